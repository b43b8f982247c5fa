//! The exit codes of the command-line tools: 0 done, 1 failed at run time (a check, the peer,
//! the network), 2 a usage error: clap's own (it exits with 2 while parsing), or a
//! combination or value of options that only a later check finds ([`Usage`]).

use std::process::ExitCode;

/// A command line that cannot run, found by a check clap cannot make (exit code 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// Returns early with a [`Usage`] error (converted with `?`-style `.into()`), formatted like
/// `format!`.
#[macro_export]
macro_rules! usage {
    ($($t:tt)*) => {
        return Err($crate::Usage(::std::format!($($t)*)).into())
    };
}

/// Exit code 2 for an error that is (or was caused by) a [`Usage`] error, else 1.
pub fn exit_code(e: &anyhow::Error) -> ExitCode {
    ExitCode::from(code(e))
}

/// [`exit_code`] as a number (2 or 1).
pub fn code(e: &anyhow::Error) -> u8 {
    if e.chain().any(|c| c.is::<Usage>()) {
        2
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    fn refuse() -> anyhow::Result<()> {
        usage!("--duration needs --op write or send, not {}", "read")
    }

    #[test]
    fn usage_errors_exit_2_through_context() {
        let e = refuse().unwrap_err();
        assert_eq!(
            e.to_string(),
            "--duration needs --op write or send, not read"
        );
        assert_eq!(code(&e), 2);
        let e = refuse().context("bw").unwrap_err();
        assert_eq!(code(&e), 2);
        assert_eq!(code(&anyhow::anyhow!("connection refused")), 1);
    }
}
