//! The RDMA Read Request as both sides of `mpa-peer` read and write it: the untagged DDP
//! header's MSN (QN 1) and the RDMA Read Request Header (RFC 5040 §4.4).

use mpa::wire::ddp::{queue, DdpRepr, RdmapOpcode, READ_REQUEST_HEADER_LEN, UNTAGGED_HEADER_LEN};

/// The prefix of a ULPDU a `Sink` and a Terminate need: the longest DDP header plus a Read
/// Request's RDMA header.
pub(crate) const HEAD_LEN: usize = UNTAGGED_HEADER_LEN + READ_REQUEST_HEADER_LEN;

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

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    (u64::from(be32(&b[..4])) << 32) | u64::from(be32(&b[4..8]))
}

impl ReadRequest {
    /// Reads the RDMA Read Request Header `h` (Data Sink STag 0..4, Data Sink TO 4..12,
    /// RDMARDSZ 12..16, Data Source STag 16..20, Data Source TO 20..28).
    pub(crate) fn parse(msn: u32, h: &[u8]) -> Option<Self> {
        let h = h.get(..READ_REQUEST_HEADER_LEN)?;
        Some(ReadRequest {
            msn,
            sink_stag: be32(&h[0..4]),
            sink_to: be64(&h[4..12]),
            size: be32(&h[12..16]),
            src_stag: be32(&h[16..20]),
            src_to: be64(&h[20..28]),
        })
    }

    /// The whole ULPDU: untagged DDP header (L, QN 1, MO 0) and the Read Request Header.
    pub(crate) fn ulpdu(&self, version: u8) -> [u8; HEAD_LEN] {
        let mut v = [0u8; HEAD_LEN];
        let n = DdpRepr::Untagged {
            last: true,
            opcode: RdmapOpcode::RdmaReadRequest,
            inv_stag: 0,
            qn: queue::READ_REQUEST,
            msn: self.msn,
            mo: 0,
        }
        .emit(&mut v, version)
        .unwrap_or(UNTAGGED_HEADER_LEN);
        let h = &mut v[n..];
        h[0..4].copy_from_slice(&self.sink_stag.to_be_bytes());
        h[4..12].copy_from_slice(&self.sink_to.to_be_bytes());
        h[12..16].copy_from_slice(&self.size.to_be_bytes());
        h[16..20].copy_from_slice(&self.src_stag.to_be_bytes());
        h[20..28].copy_from_slice(&self.src_to.to_be_bytes());
        v
    }
}
