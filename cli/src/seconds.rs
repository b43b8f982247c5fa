//! Seconds as `--duration` and `--interval` take them: a positive number, fractions allowed
//! (`10`, `0.5`), as iperf3's `-t` and `-i`.

use std::time::Duration;

/// A value that is not a positive number of seconds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecondsError {
    #[error("{0:?} is not a number of seconds (e.g. 10 or 0.5)")]
    Invalid(String),
    #[error("{0:?} seconds: must be more than 0")]
    NotPositive(String),
    #[error("{0:?} seconds is too long")]
    TooLong(String),
}

/// Parses `s` as a positive number of seconds; the clap value parser of `--duration` and
/// `--interval`.
pub fn seconds(s: &str) -> Result<Duration, SecondsError> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| SecondsError::Invalid(s.to_string()))?;
    if v.is_nan() {
        return Err(SecondsError::Invalid(s.to_string()));
    }
    if v <= 0.0 {
        return Err(SecondsError::NotPositive(s.to_string()));
    }
    Duration::try_from_secs_f64(v).map_err(|_| SecondsError::TooLong(s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_and_fractional_seconds() {
        assert_eq!(seconds("10"), Ok(Duration::from_secs(10)));
        assert_eq!(seconds("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(seconds(" 2 "), Ok(Duration::from_secs(2)));
    }

    #[test]
    fn errors_name_the_value() {
        assert_eq!(seconds("ten"), Err(SecondsError::Invalid("ten".into())));
        assert_eq!(seconds("NaN"), Err(SecondsError::Invalid("NaN".into())));
        assert_eq!(seconds("0"), Err(SecondsError::NotPositive("0".into())));
        assert_eq!(seconds("-1"), Err(SecondsError::NotPositive("-1".into())));
        assert_eq!(seconds("inf"), Err(SecondsError::TooLong("inf".into())));
        assert!(seconds("").unwrap_err().to_string().contains("\"\""));
    }
}
