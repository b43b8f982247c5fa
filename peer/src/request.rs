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
    pub header: ReadRequestRepr,
}

impl ReadRequest {
    /// Reads the RDMA Read Request Header `h`.
    pub(crate) fn parse(msn: u32, h: &[u8]) -> Option<Self> {
        let header = ReadRequestRepr::parse(h).ok()?;
        Some(ReadRequest { msn, header })
    }

    /// The whole ULPDU: untagged DDP header (L, QN 1, MO 0) and the Read Request Header.
    pub(crate) fn ulpdu(&self, version: u8) -> [u8; HEAD_LEN] {
        self.header.ulpdu(self.msn, version)
    }
}
