//! Results on stdout, which the reader may close early (`mpa-bench … | head -1`).
//!
//! Rust programs ignore SIGPIPE, so a write to a closed pipe fails with `BrokenPipe`, and
//! `println!` panics on it. [`out!`](crate::out!) and [`outln!`](crate::outln!) write through
//! the locked stdout instead: once the reader is gone every later write is dropped, the run
//! goes on to its end (and cleans up what it set up: a test bed, a datapath), and
//! [`closed`] tells the caller, which may stop early. Any other write error is reported once on
//! stderr and treated alike.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether stdout is closed (or failed): writes are being dropped.
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// Writes `args` to stdout and flushes; dropped once stdout is closed.
pub fn write(args: fmt::Arguments<'_>) {
    if closed() {
        return;
    }
    if let Err(e) = write_to(&mut io::stdout().lock(), args) {
        if CLOSED.swap(true, Ordering::Relaxed) {
            return;
        }
        if e.kind() != io::ErrorKind::BrokenPipe {
            // Not the reader leaving: say so, once (stderr may be gone too).
            let _ = writeln!(io::stderr(), "stdout: {e}; further output dropped");
        }
    }
}

/// Writes and flushes `args` to `w` (stdout is line-buffered: the flush makes a text without
/// a final newline fail here rather than at exit).
pub fn write_to(w: &mut impl Write, args: fmt::Arguments<'_>) -> io::Result<()> {
    w.write_fmt(args)?;
    w.flush()
}

/// `print!` that a closed stdout does not turn into a panic ([`write()`]).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::write(::std::format_args!($($arg)*))
    };
}

/// `println!` that a closed stdout does not turn into a panic ([`write()`]).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::out::write(::std::format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write(::std::format_args!("{}\n", ::std::format_args!($($arg)*)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that left after `room` octets.
    struct Pipe {
        got: Vec<u8>,
        room: usize,
    }

    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.got.len() >= self.room {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            let n = buf.len().min(self.room - self.got.len());
            self.got.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_reader_is_an_error_not_a_panic() {
        let mut p = Pipe {
            got: Vec::new(),
            room: 6,
        };
        write_to(&mut p, format_args!("one\n")).unwrap();
        let e = write_to(&mut p, format_args!("two\n")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        assert_eq!(p.got, b"one\ntw");
    }
}
