//! Byte views over the headers the data path parses and builds, in the manner of smoltcp's
//! `wire` module.
//!
//! Each view wraps a buffer; `new_checked` (or `check_len`) validates it once, after which no
//! accessor panics. A `Repr` turns raw fields into meaning, so state machines never touch raw
//! octets.
#![forbid(unsafe_code)]

pub mod checksum;
pub mod ethernet;
pub mod frame;
pub mod ip;
pub mod tcp;

pub use tcp::{SackBlock, TcpFlags, TcpOptions, TcpPacket, TcpRepr, TcpTimestamps, TcpWireError};
