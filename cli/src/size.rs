//! Sizes in octets as perftest and iperf3 take them: a number with an optional unit `K`, `M`,
//! `G`, `T` (also `KB`/`KiB`, any case) in binary multiples, `4K` = 4096, `1G` = 2^30. The
//! parsing is the `parse-size` crate's (binary units); this module names the bad value in its
//! error and checks the target type's range.

use parse_size::{Config, Error as ParseError};

/// A value that is not a size, or one too large for where it goes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("empty size: give a number of octets, e.g. 4096 or 4K")]
    Empty,
    #[error(
        "{0:?} is not a size: a number of octets, optionally with a unit K, M, G or T \
         (binary multiples: 4K = 4096; KiB, MiB, GiB, TiB alike)"
    )]
    Invalid(String),
    #[error("{value:?} is too large: at most {max} octets")]
    TooLarge { value: String, max: u64 },
}

/// Parses `s` as a size for a `T` (`usize`, `u64`, `u32`); the clap value parser of every
/// size option (`value_parser = mpa_cli::size::<usize>`).
pub fn size<T: TryFrom<u64> + Bounded>(s: &str) -> Result<T, SizeError> {
    let too_large = || SizeError::TooLarge {
        value: s.to_string(),
        max: T::MAX_U64,
    };
    let n = Config::new()
        .with_binary()
        .parse_size(s)
        .map_err(|e| match e {
            // A unit alone (`K`) has an empty number too, but is no empty value.
            ParseError::Empty if s.trim().is_empty() => SizeError::Empty,
            ParseError::PosOverflow => too_large(),
            _ => SizeError::Invalid(s.to_string()),
        })?;
    T::try_from(n).map_err(|_| too_large())
}

/// The largest value of an unsigned target type, for the error message.
pub trait Bounded {
    const MAX_U64: u64;
}

impl Bounded for u64 {
    const MAX_U64: u64 = u64::MAX;
}

impl Bounded for usize {
    const MAX_U64: u64 = usize::MAX as u64;
}

impl Bounded for u32 {
    const MAX_U64: u64 = u32::MAX as u64;
}

impl Bounded for u16 {
    const MAX_U64: u64 = u16::MAX as u64;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_numbers_and_binary_units() {
        assert_eq!(size::<u64>("64"), Ok(64));
        assert_eq!(size::<u64>("4K"), Ok(4096));
        assert_eq!(size::<u64>("4k"), Ok(4096));
        assert_eq!(size::<u64>("4KB"), Ok(4096));
        assert_eq!(size::<u64>("4KiB"), Ok(4096));
        assert_eq!(size::<u64>("256M"), Ok(256 << 20));
        assert_eq!(size::<u64>("1G"), Ok(1 << 30));
        assert_eq!(size::<u64>("1GiB"), Ok(1 << 30));
        assert_eq!(size::<u64>("2T"), Ok(2 << 40));
        assert_eq!(size::<u64>("1.5K"), Ok(1536));
        assert_eq!(size::<usize>("63K"), Ok(64512));
        assert_eq!(size::<u32>("0"), Ok(0));
    }

    #[test]
    fn errors_name_the_value() {
        assert_eq!(size::<u64>(""), Err(SizeError::Empty));
        let e = size::<u64>("4X").unwrap_err();
        assert_eq!(e, SizeError::Invalid("4X".into()));
        assert!(e.to_string().contains("\"4X\" is not a size"), "{e}");
        assert!(matches!(size::<u64>("K"), Err(SizeError::Invalid(_))));
        assert!(matches!(size::<u64>("-1"), Err(SizeError::Invalid(_))));
        assert!(matches!(
            size::<u64>("4 apples"),
            Err(SizeError::Invalid(_))
        ));
        // Past u64, and past the target type.
        let e = size::<u64>("20E").unwrap_err();
        assert!(e.to_string().contains("\"20E\" is too large"), "{e}");
        let e = size::<u32>("4G").unwrap_err();
        assert_eq!(
            e,
            SizeError::TooLarge {
                value: "4G".into(),
                max: u32::MAX.into()
            }
        );
        assert!(e.to_string().contains("at most 4294967295 octets"), "{e}");
    }
}
