//! The receiver alone (RTR check, Terminates, placement errors, out-of-order placement) and in
//! the in-memory pair: an Initiator's FPDU stream over a lossy, reordering, duplicating link
//! into a receiver placing into in-memory regions. No AF_XDP, no namespace, no root.

mod gather;
mod hints;
mod pair;
mod stream;
mod unit;

use mpa_ctl_proto::RegionInfo;

/// A region of `len` octets in domain `pd` that peers may write (not read).
pub(crate) fn writable_region(stag: u32, len: u64, pd: u32) -> RegionInfo {
    RegionInfo {
        stag,
        len,
        pd,
        remote_write: true,
        remote_read: false,
        huge_pages: false,
    }
}
