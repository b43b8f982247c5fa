//! What each subcommand of `mpa-control` does, one module per command (the command line that
//! selects them is in [`crate::cli`]). Each returns the message to print on failure.

mod capture;
mod close;
mod connect;
mod serve;
mod stats;

pub(crate) use capture::capture_cmd;
pub(crate) use close::close;
pub(crate) use connect::connect;
pub(crate) use serve::serve;
pub(crate) use stats::{flows, stats};
