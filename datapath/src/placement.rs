//! DDP/RDMAP placement (RFC 5041 §7, RFC 5040 §5/§7): where each verified ULPDU's payload
//! goes, every check the RFCs ask for on the way, and in-order completions.
//!
//! Validation ([`Placer::plan`]) is pure: it is used both for FPDUs found out of order (placed
//! at once when they pass, left to in-order processing otherwise) and for in-order ones
//! (where a failure becomes a Terminate). State changes only in [`Placer::complete`], in
//! stream order, so an FPDU placed early completes exactly as if it had arrived in order.

#![forbid(unsafe_code)]

use crate::region::RegionMemory;
use mpa::decoder::Ulpdu;
use mpa::wire::ddp::{
    queue, DdpError, DdpRepr, RdmapOpcode, TerminateRepr, READ_REQUEST_HEADER_LEN,
    TERMINATE_HEADER_LEN, UNTAGGED_HEADER_LEN,
};
use mpa_ctl_proto::{Completion, CompletionKind, RegionInfo};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Receive buffers a connection may have posted at once.
pub const MAX_POSTED: usize = 65_536;
/// Octets of a ULPDU [`Placer::plan`] looks at: the longest header (untagged) plus what
/// follows it for a Terminate or a Read Request.
pub const PLAN_PREFIX: usize = UNTAGGED_HEADER_LEN + READ_REQUEST_HEADER_LEN;

/// One registered region as a worker sees it.
#[derive(Debug, Clone)]
pub struct Region {
    /// Its description.
    pub info: RegionInfo,
    /// Its memory.
    pub mem: Arc<RegionMemory>,
}

/// The regions a worker knows (its own copy, updated by the control thread's commands).
#[derive(Debug, Default)]
pub struct RegionTable {
    map: HashMap<u32, Region>,
}

impl RegionTable {
    /// Adds or replaces a region.
    pub fn insert(&mut self, r: Region) {
        self.map.insert(r.info.stag, r);
    }

    /// Removes a region: later segments naming it get an invalid-STag Terminate.
    pub fn remove(&mut self, stag: u32) {
        self.map.remove(&stag);
    }

    /// The region of `stag`.
    pub fn get(&self, stag: u32) -> Option<&Region> {
        self.map.get(&stag)
    }
}

/// A receive buffer for one untagged message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostedBuf {
    /// Region.
    pub stag: u32,
    /// Offset in the region.
    pub offset: u64,
    /// Octets.
    pub len: u32,
}

/// A placement violation: the Terminate to send and the error in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementError {
    /// Terminate control (RFC 5040 Figure 9, RFC 5041 §7).
    pub terminate: TerminateRepr,
    /// What was wrong.
    pub reason: String,
}

fn err(layer: u8, error_type: u8, error_code: u8, reason: String) -> PlacementError {
    PlacementError {
        terminate: TerminateRepr {
            layer,
            error_type,
            error_code,
        },
        reason,
    }
}

/// RFC 5041 §7: DDP layer 1; tagged buffer errors (type 1), untagged (type 2).
mod ddp_err {
    pub const LAYER: u8 = 1;
    pub const TAGGED: u8 = 1;
    pub const UNTAGGED: u8 = 2;
    pub const INVALID_STAG: u8 = 0;
    pub const BOUNDS: u8 = 1;
    pub const STAG_NOT_ASSOCIATED: u8 = 2;
    pub const TO_WRAP: u8 = 3;
    pub const TAGGED_VERSION: u8 = 4;
    pub const INVALID_QN: u8 = 1;
    pub const NO_BUFFER: u8 = 2;
    pub const MSN_RANGE: u8 = 3;
    pub const INVALID_MO: u8 = 4;
    pub const TOO_LONG: u8 = 5;
    pub const UNTAGGED_VERSION: u8 = 6;
}

/// RFC 5040 Figure 9: RDMAP layer 0.
mod rdmap_err {
    pub const LAYER: u8 = 0;
    pub const PROTECTION: u8 = 1;
    pub const OPERATION: u8 = 2;
    pub const ACCESS: u8 = 2;
    pub const VERSION: u8 = 5;
    pub const UNEXPECTED_OPCODE: u8 = 6;
    pub const UNSPECIFIED: u8 = 0xff;
}

/// What a validated segment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentKind {
    /// RDMA Write or Read Response segment: payload at (STag, TO).
    Tagged {
        /// Opcode.
        opcode: RdmapOpcode,
        /// Region.
        stag: u32,
        /// Tagged offset of the payload's first octet.
        to: u64,
        /// L flag.
        last: bool,
    },
    /// A Send variant: payload into the posted buffer of its MSN at MO.
    Send {
        /// Opcode.
        opcode: RdmapOpcode,
        /// MSN.
        msn: u32,
        /// Message offset.
        mo: u32,
        /// L flag.
        last: bool,
        /// Invalidate STag (Send with Invalidate variants).
        inv_stag: u32,
    },
    /// The peer's Terminate: the connection ends.
    PeerTerminate(TerminateRepr),
}

/// A validated segment: what it is, its payload length, and where the payload goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentPlan {
    /// What it is.
    pub kind: SegmentKind,
    /// Octets of the ULPDU before the payload.
    pub header_len: usize,
    /// Payload octets.
    pub payload_len: usize,
    /// (STag, region offset) of the payload's first octet; `None` when nothing is placed.
    pub target: Option<(u32, u64)>,
}

/// The placement state of one connection.
#[derive(Debug)]
pub struct Placer {
    pd: u32,
    version: u8,
    /// Posted receive buffers for QN 0; `recv[0]` is for MSN `front_msn`.
    recv: VecDeque<PostedBuf>,
    front_msn: u32,
    /// The tagged message being completed in order: (STag, TO of its first octet, octets).
    tagged: Option<(u32, u64, u64)>,
}

impl Placer {
    /// Placement for a connection of protection domain `pd` using DDP/RDMAP `version`.
    pub fn new(pd: u32, version: u8) -> Self {
        Placer {
            pd,
            version,
            recv: VecDeque::new(),
            // RFC 5041 §5.1: the first MSN of each queue is 1.
            front_msn: 1,
            tagged: None,
        }
    }

    /// The protection domain.
    pub fn pd(&self) -> u32 {
        self.pd
    }

    /// Posted buffers not yet used.
    pub fn posted(&self) -> usize {
        self.recv.len()
    }

    /// Appends receive buffers (in MSN order); refused beyond [`MAX_POSTED`].
    pub fn post(&mut self, bufs: impl ExactSizeIterator<Item = PostedBuf>) -> Result<(), String> {
        if self.recv.len() + bufs.len() > MAX_POSTED {
            return Err(format!(
                "{} buffers posted already, {} more exceed the limit of {MAX_POSTED}",
                self.recv.len(),
                bufs.len()
            ));
        }
        self.recv.extend(bufs);
        Ok(())
    }

    /// Validates a ULPDU whose first octets are `head` (at least [`PLAN_PREFIX`] when the
    /// ULPDU is that long) and whose length is `ulpdu_len`. `in_order`: the segment is the
    /// next one of the stream (untagged messages must then be the next MSN).
    pub fn plan(
        &self,
        regions: &RegionTable,
        head: &[u8],
        ulpdu_len: usize,
        in_order: bool,
    ) -> Result<SegmentPlan, PlacementError> {
        let (repr, header_len) = match DdpRepr::parse(head, self.version) {
            Ok(x) => x,
            Err(DdpError::Version {
                ddp,
                rdmap,
                expected,
            }) => {
                let tagged = head.first().is_some_and(|c| c & 0x80 != 0);
                return Err(if ddp != expected {
                    let (t, c) = if tagged {
                        (ddp_err::TAGGED, ddp_err::TAGGED_VERSION)
                    } else {
                        (ddp_err::UNTAGGED, ddp_err::UNTAGGED_VERSION)
                    };
                    err(
                        ddp_err::LAYER,
                        t,
                        c,
                        format!("DDP version {ddp}, expected {expected}"),
                    )
                } else {
                    err(
                        rdmap_err::LAYER,
                        rdmap_err::OPERATION,
                        rdmap_err::VERSION,
                        format!("RDMAP version {rdmap}, expected {expected}"),
                    )
                });
            }
            Err(DdpError::Truncated(_)) => {
                return Err(err(
                    rdmap_err::LAYER,
                    rdmap_err::OPERATION,
                    rdmap_err::UNSPECIFIED,
                    format!("a {ulpdu_len}-octet ULPDU is too short for a DDP header"),
                ))
            }
        };
        let payload_len = ulpdu_len - header_len;
        let plan = |kind, target| SegmentPlan {
            kind,
            header_len,
            payload_len,
            target,
        };
        match repr {
            DdpRepr::Tagged {
                last,
                opcode,
                stag,
                to,
            } => {
                if !matches!(
                    opcode,
                    RdmapOpcode::RdmaWrite | RdmapOpcode::RdmaReadResponse
                ) {
                    return Err(unexpected(opcode, "tagged"));
                }
                let kind = SegmentKind::Tagged {
                    opcode,
                    stag,
                    to,
                    last,
                };
                // RFC 5041 §5.3: STag and TO of a zero-length tagged segment are not checked.
                if payload_len == 0 {
                    return Ok(plan(kind, None));
                }
                let tagged = |code, reason| err(ddp_err::LAYER, ddp_err::TAGGED, code, reason);
                let Some(r) = regions.get(stag) else {
                    return Err(tagged(
                        ddp_err::INVALID_STAG,
                        format!("STag {stag:#x} is not registered"),
                    ));
                };
                if r.info.pd != self.pd {
                    return Err(tagged(
                        ddp_err::STAG_NOT_ASSOCIATED,
                        format!(
                            "STag {stag:#x} belongs to protection domain {}, the stream to {}",
                            r.info.pd, self.pd
                        ),
                    ));
                }
                let Some(end) = to.checked_add(payload_len as u64) else {
                    return Err(tagged(
                        ddp_err::TO_WRAP,
                        format!("TO {to:#x} + {payload_len} octets wraps"),
                    ));
                };
                if end > r.info.len {
                    return Err(tagged(
                        ddp_err::BOUNDS,
                        format!(
                            "TO {to} + {payload_len} octets is beyond STag {stag:#x}'s {} octets",
                            r.info.len
                        ),
                    ));
                }
                if opcode == RdmapOpcode::RdmaWrite && !r.info.remote_write {
                    return Err(err(
                        rdmap_err::LAYER,
                        rdmap_err::PROTECTION,
                        rdmap_err::ACCESS,
                        format!("STag {stag:#x} does not allow remote writes"),
                    ));
                }
                Ok(plan(kind, Some((stag, to))))
            }
            DdpRepr::Untagged {
                last,
                opcode,
                inv_stag,
                qn,
                msn,
                mo,
            } => {
                let want_qn = match opcode {
                    RdmapOpcode::Send
                    | RdmapOpcode::SendWithInvalidate
                    | RdmapOpcode::SendWithSolicitedEvent
                    | RdmapOpcode::SendWithSolicitedEventAndInvalidate => queue::SEND,
                    RdmapOpcode::RdmaReadRequest => queue::READ_REQUEST,
                    RdmapOpcode::Terminate => queue::TERMINATE,
                    _ => return Err(unexpected(opcode, "untagged")),
                };
                let untagged = |code, reason| err(ddp_err::LAYER, ddp_err::UNTAGGED, code, reason);
                if qn != want_qn {
                    return Err(untagged(
                        ddp_err::INVALID_QN,
                        format!("{opcode:?} on queue {qn}, expected {want_qn}"),
                    ));
                }
                match opcode {
                    RdmapOpcode::Terminate => {
                        let t = head
                            .get(header_len..header_len + TERMINATE_HEADER_LEN)
                            .and_then(|b| TerminateRepr::parse(b).ok())
                            .unwrap_or(TerminateRepr {
                                layer: 0,
                                error_type: 0,
                                error_code: 0,
                            });
                        return Ok(plan(SegmentKind::PeerTerminate(t), None));
                    }
                    RdmapOpcode::RdmaReadRequest => {
                        return Err(err(
                            rdmap_err::LAYER,
                            rdmap_err::OPERATION,
                            rdmap_err::UNSPECIFIED,
                            "RDMA Read Requests are not served by this datapath".into(),
                        ))
                    }
                    _ => {}
                }
                let idx = msn.wrapping_sub(self.front_msn);
                if idx >= 1 << 31 || (in_order && idx != 0) {
                    return Err(untagged(
                        ddp_err::MSN_RANGE,
                        format!("MSN {msn} where {} is expected", self.front_msn),
                    ));
                }
                let Some(buf) = self.recv.get(idx as usize) else {
                    return Err(untagged(
                        ddp_err::NO_BUFFER,
                        format!(
                            "MSN {msn}: no receive buffer posted ({} posted from MSN {})",
                            self.recv.len(),
                            self.front_msn
                        ),
                    ));
                };
                if mo > buf.len {
                    return Err(untagged(
                        ddp_err::INVALID_MO,
                        format!("MO {mo} beyond the {}-octet buffer", buf.len),
                    ));
                }
                if u64::from(mo) + payload_len as u64 > u64::from(buf.len) {
                    return Err(untagged(
                        ddp_err::TOO_LONG,
                        format!(
                            "MO {mo} + {payload_len} octets exceed the {}-octet buffer",
                            buf.len
                        ),
                    ));
                }
                let target = (payload_len > 0).then_some((buf.stag, buf.offset + u64::from(mo)));
                // The buffer's region was checked when it was posted; it must still exist.
                if let Some((stag, _)) = target {
                    if regions.get(stag).is_none() {
                        return Err(untagged(
                            ddp_err::NO_BUFFER,
                            format!("MSN {msn}: the buffer's region {stag:#x} is gone"),
                        ));
                    }
                }
                Ok(plan(
                    SegmentKind::Send {
                        opcode,
                        msn,
                        mo,
                        last,
                        inv_stag,
                    },
                    target,
                ))
            }
        }
    }

    /// Copies the payload of `ulpdu` (validated by `plan`) into its region. Returns whether
    /// anything was written.
    pub fn place(regions: &RegionTable, plan: &SegmentPlan, ulpdu: &Ulpdu<'_>) -> bool {
        let Some((stag, mut off)) = plan.target else {
            return false;
        };
        let Some(r) = regions.get(stag) else {
            return false;
        };
        let mut skip = plan.header_len;
        for piece in ulpdu.pieces() {
            let p = piece.get(skip.min(piece.len())..).unwrap_or(&[]);
            skip -= skip.min(piece.len());
            if !p.is_empty() {
                if !r.mem.write(off, p) {
                    return false;
                }
                off += p.len() as u64;
            }
        }
        true
    }

    /// Advances the in-order state past a placed segment; returns the completion of the
    /// message it ends, if any.
    pub fn complete(&mut self, plan: &SegmentPlan, flow_id: u64) -> Option<Completion> {
        match plan.kind {
            SegmentKind::Tagged {
                opcode,
                stag,
                to,
                last,
            } => {
                let (s, first, n) = self.tagged.take().unwrap_or((stag, to, 0));
                let n = n + plan.payload_len as u64;
                if !last {
                    self.tagged = Some((s, first, n));
                    return None;
                }
                Some(Completion {
                    flow_id,
                    kind: if opcode == RdmapOpcode::RdmaReadResponse {
                        CompletionKind::ReadResponsePlaced
                    } else {
                        CompletionKind::WritePlaced
                    },
                    stag: s,
                    offset: first,
                    len: n,
                    msn: None,
                    invalidate_stag: None,
                })
            }
            SegmentKind::Send {
                opcode,
                msn,
                mo,
                last,
                inv_stag,
            } => {
                if !last {
                    return None;
                }
                let buf = self.recv.pop_front()?;
                self.front_msn = self.front_msn.wrapping_add(1);
                Some(Completion {
                    flow_id,
                    kind: CompletionKind::SendArrived,
                    stag: buf.stag,
                    offset: buf.offset,
                    len: u64::from(mo) + plan.payload_len as u64,
                    msn: Some(msn),
                    invalidate_stag: matches!(
                        opcode,
                        RdmapOpcode::SendWithInvalidate
                            | RdmapOpcode::SendWithSolicitedEventAndInvalidate
                    )
                    .then_some(inv_stag),
                })
            }
            SegmentKind::PeerTerminate(_) => None,
        }
    }
}

fn unexpected(opcode: RdmapOpcode, model: &str) -> PlacementError {
    err(
        rdmap_err::LAYER,
        rdmap_err::OPERATION,
        rdmap_err::UNEXPECTED_OPCODE,
        format!("{opcode:?} in a {model} DDP segment"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpa::encoder::FpduEncoder;
    use mpa::wire::ddp::TAGGED_HEADER_LEN;

    fn table() -> RegionTable {
        let mut t = RegionTable::default();
        for (stag, pd, write) in [(0x10, 1, true), (0x20, 1, false), (0x30, 2, true)] {
            t.insert(Region {
                info: RegionInfo {
                    stag,
                    len: 4096,
                    pd,
                    remote_write: write,
                    remote_read: false,
                    huge_pages: false,
                },
                mem: Arc::new(RegionMemory::create("t", 4096).unwrap()),
            });
        }
        t
    }

    fn tagged(op: RdmapOpcode, stag: u32, to: u64, last: bool, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; TAGGED_HEADER_LEN];
        DdpRepr::Tagged {
            last,
            opcode: op,
            stag,
            to,
        }
        .emit(&mut v, 1)
        .unwrap();
        v.extend_from_slice(payload);
        v
    }

    fn send(qn: u32, msn: u32, mo: u32, last: bool, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; UNTAGGED_HEADER_LEN];
        DdpRepr::Untagged {
            last,
            opcode: RdmapOpcode::Send,
            inv_stag: 0,
            qn,
            msn,
            mo,
        }
        .emit(&mut v, 1)
        .unwrap();
        v.extend_from_slice(payload);
        v
    }

    fn code(p: &Placer, t: &RegionTable, u: &[u8], in_order: bool) -> (u8, u8, u8) {
        let e = p.plan(t, u, u.len(), in_order).unwrap_err();
        (
            e.terminate.layer,
            e.terminate.error_type,
            e.terminate.error_code,
        )
    }

    /// Places `u` the way a flow does: through a real FPDU (markers on, so pieces split).
    fn place_via_fpdu(p: &mut Placer, t: &RegionTable, u: &[u8]) -> Option<Completion> {
        let plan = p.plan(t, u, u.len(), true).unwrap();
        let mut wire = Vec::new();
        FpduEncoder::new(true).encode(u, &mut wire).unwrap();
        let mut dec = mpa::decoder::FpduDecoder::new(true, true);
        let mut c = dec.feed(&wire);
        let ulpdu = c.next_ulpdu().unwrap().unwrap();
        assert!(Placer::place(t, &plan, &ulpdu) || plan.target.is_none());
        p.complete(&plan, 9)
    }

    #[test]
    fn tagged_violations_give_the_rfc_codes() {
        let t = table();
        let p = Placer::new(1, 1);
        let w = |stag, to, n| tagged(RdmapOpcode::RdmaWrite, stag, to, true, &vec![1u8; n]);
        assert_eq!(code(&p, &t, &w(0x99, 0, 1), true), (1, 1, 0));
        assert_eq!(code(&p, &t, &w(0x30, 0, 1), true), (1, 1, 2));
        assert_eq!(code(&p, &t, &w(0x10, 4000, 97), true), (1, 1, 1));
        assert_eq!(code(&p, &t, &w(0x10, u64::MAX - 1, 8), true), (1, 1, 3));
        assert_eq!(code(&p, &t, &w(0x20, 0, 1), true), (0, 1, 2));
        // Zero-length: STag and TO are not checked (RFC 5041 §5.3).
        assert!(p.plan(&t, &w(0x99, u64::MAX, 0), 14, true).is_ok());
        assert!(p.plan(&t, &w(0x10, 4000, 96), 14 + 96, true).is_ok());
        let mut bad = w(0x10, 0, 1);
        bad[0] = (bad[0] & !3) | 2;
        assert_eq!(code(&p, &t, &bad, true), (1, 1, 4));
        let mut bad = w(0x10, 0, 1);
        bad[1] = (bad[1] & 0x3f) | 0x80;
        assert_eq!(code(&p, &t, &bad, true), (0, 2, 5));
        let op = tagged(RdmapOpcode::Send, 0x10, 0, true, &[1]);
        assert_eq!(code(&p, &t, &op, true), (0, 2, 6));
        assert_eq!(
            code(&p, &t, &[0xc1, 0x40, 0], true),
            (0, 2, rdmap_err::UNSPECIFIED)
        );
    }

    #[test]
    fn untagged_violations_give_the_rfc_codes() {
        let t = table();
        let mut p = Placer::new(1, 1);
        assert_eq!(code(&p, &t, &send(0, 1, 0, true, &[1]), true), (1, 2, 2));
        p.post(
            [PostedBuf {
                stag: 0x10,
                offset: 100,
                len: 50,
            }]
            .into_iter(),
        )
        .unwrap();
        assert_eq!(code(&p, &t, &send(3, 1, 0, true, &[1]), true), (1, 2, 1));
        assert_eq!(code(&p, &t, &send(1, 1, 0, true, &[1]), true), (1, 2, 1));
        assert_eq!(code(&p, &t, &send(0, 0, 0, true, &[1]), true), (1, 2, 3));
        assert_eq!(code(&p, &t, &send(0, 2, 0, true, &[1]), true), (1, 2, 3));
        assert_eq!(code(&p, &t, &send(0, 2, 0, true, &[1]), false), (1, 2, 2));
        assert_eq!(code(&p, &t, &send(0, 1, 51, true, &[]), true), (1, 2, 4));
        assert_eq!(
            code(&p, &t, &send(0, 1, 40, true, &[0; 11]), true),
            (1, 2, 5)
        );
        let c = place_via_fpdu(&mut p, &t, &send(0, 1, 0, false, &[5; 30])).is_none();
        assert!(c);
        let c = place_via_fpdu(&mut p, &t, &send(0, 1, 30, true, &[6; 20])).unwrap();
        assert_eq!(
            (c.kind, c.stag, c.offset, c.len, c.msn),
            (CompletionKind::SendArrived, 0x10, 100, 50, Some(1))
        );
        let mut got = [0u8; 52];
        assert!(t.get(0x10).unwrap().mem.read(99, &mut got));
        assert_eq!(got[0], 0);
        assert!(got[1..31].iter().all(|&b| b == 5));
        assert!(got[31..51].iter().all(|&b| b == 6));
        assert_eq!(got[51], 0);
        // The buffer is used: MSN 2 has none.
        assert_eq!(code(&p, &t, &send(0, 2, 0, true, &[1]), true), (1, 2, 2));
        assert!(p
            .post((0..MAX_POSTED).map(|_| PostedBuf {
                stag: 0x10,
                offset: 0,
                len: 1
            }))
            .is_ok());
        assert!(p
            .post(
                [PostedBuf {
                    stag: 0x10,
                    offset: 0,
                    len: 1
                }]
                .into_iter()
            )
            .is_err());
    }

    #[test]
    fn tagged_messages_complete_over_their_segments() {
        let t = table();
        let mut p = Placer::new(1, 1);
        let a = tagged(RdmapOpcode::RdmaWrite, 0x10, 1000, false, &[1; 700]);
        let b = tagged(RdmapOpcode::RdmaWrite, 0x10, 1700, true, &[2; 300]);
        assert!(place_via_fpdu(&mut p, &t, &a).is_none());
        let c = place_via_fpdu(&mut p, &t, &b).unwrap();
        assert_eq!(
            (c.kind, c.stag, c.offset, c.len),
            (CompletionKind::WritePlaced, 0x10, 1000, 1000)
        );
        let mut got = vec![0u8; 1000];
        assert!(t.get(0x10).unwrap().mem.read(1000, &mut got));
        assert!(got[..700].iter().all(|&b| b == 1) && got[700..].iter().all(|&b| b == 2));
        // A peer Terminate is recognised with its control field.
        let mut term = send(2, 1, 0, true, &[0x12, 0x03, 0, 0]);
        term[1] = (term[1] & 0xf0) | 7;
        let plan = p.plan(&t, &term, term.len(), true).unwrap();
        assert_eq!(
            plan.kind,
            SegmentKind::PeerTerminate(TerminateRepr {
                layer: 1,
                error_type: 2,
                error_code: 3
            })
        );
    }
}
