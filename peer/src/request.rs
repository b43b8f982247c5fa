//! The RDMA Read Request as both sides of `mpa-peer` read and write it: the untagged DDP
//! header's MSN (QN 1) and the RDMA Read Request Header (RFC 5040 §4.4).

use mpa::wire::ddp::{ReadRequestRepr, READ_REQUEST_ULPDU_LEN};

/// The prefix of a ULPDU a `Sink` and a Terminate need: the longest DDP header plus a Read
/// Request's RDMA header.
pub(crate) const HEAD_LEN: usize = READ_REQUEST_ULPDU_LEN;

/// An RDMA Read Request: the untagged DDP header's MSN (QN 1) and the RDMA Read Request
/// Header (RFC 5040 §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadRequest {
    pub msn: u32,
    pub sink_stag: u32,
    pub sink_to: u64,
    /// RDMA Read Message Size (RDMARDSZ).
    pub size: u32,
    pub src_stag: u32,
    pub src_to: u64,
}

impl ReadRequest {
    /// Reads the RDMA Read Request Header `h` (`mpa::wire::ddp::ReadRequestRepr`).
    pub(crate) fn parse(msn: u32, h: &[u8]) -> Option<Self> {
        let r = ReadRequestRepr::parse(h).ok()?;
        Some(ReadRequest {
            msn,
            sink_stag: r.sink_stag,
            sink_to: r.sink_to,
            size: r.size,
            src_stag: r.src_stag,
            src_to: r.src_to,
        })
    }

    /// The whole ULPDU: untagged DDP header (L, QN 1, MO 0) and the Read Request Header.
    pub(crate) fn ulpdu(&self, version: u8) -> [u8; HEAD_LEN] {
        ReadRequestRepr {
            sink_stag: self.sink_stag,
            sink_to: self.sink_to,
            size: self.size,
            src_stag: self.src_stag,
            src_to: self.src_to,
        }
        .ulpdu(self.msn, version)
    }
}
