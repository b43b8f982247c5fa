//! Byte views over the headers the data path parses and builds, in the manner of smoltcp's
//! `wire` module.
//!
//! Each view wraps a buffer; `new_checked` (or `check_len`) validates it once, after which no
//! accessor panics. A `Repr` turns raw fields into meaning, so state machines never touch raw
//! octets.
// Denied, not forbidden, here and in `checksum`: the checksum's SIMD kernel
// (`checksum/x86.rs`) allows it for its loads and the calls of its `#[target_feature]`
// functions; every other module forbids it.
#![deny(unsafe_code)]

pub(crate) mod checksum;
pub(crate) mod ethernet;
/// A frame's VLAN tag ([`frame::TcpFrame::vlan`]).
pub use ethernet::VlanTag;
pub mod frame;
pub(crate) mod ip;
pub mod tcp;
