//! Byte views over every MPA format, in the manner of smoltcp's `wire` module.
//!
//! Each view wraps a buffer; `new_checked` (or `check_len`) validates the length once, after
//! which no accessor panics.

pub mod ddp;
pub mod fpdu;
pub mod marker;
pub mod startup;

/// A buffer was too short for the format it was viewed as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("truncated {what}: need {need} octets, have {have}")]
pub struct Truncated {
    /// The format.
    pub what: &'static str,
    /// Octets needed.
    pub need: usize,
    /// Octets present.
    pub have: usize,
}
