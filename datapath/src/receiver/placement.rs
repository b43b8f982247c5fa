//! DDP/RDMAP placement (RFC 5041 §7, RFC 5040 §5/§7): where each verified ULPDU's payload
//! goes, every check the RFCs ask for on the way, and in-order completions.
//!
//! Validation ([`Placer::plan`]) is pure: it is used both for FPDUs found out of order (placed
//! at once when they pass, left to in-order processing otherwise) and for in-order ones
//! (where a failure becomes a Terminate). State changes only in [`Placer::complete`], in
//! stream order, so an FPDU placed early completes exactly as if it had arrived in order.

#![forbid(unsafe_code)]

use super::regions::Regions;
use mpa::decoder::Ulpdu;
use mpa::wire::ddp::{
    queue, DdpError, DdpRepr, RdmapOpcode, TerminateRepr, READ_REQUEST_HEADER_LEN,
    TERMINATE_HEADER_LEN, UNTAGGED_HEADER_LEN,
};
use mpa_ctl_proto::{Completion, CompletionKind};
use std::collections::VecDeque;

/// Receive buffers a connection may have posted at once.
pub const MAX_POSTED: usize = 65_536;
/// Octets of a ULPDU [`Placer::plan`] looks at: the longest header (untagged) plus what
/// follows it for a Terminate or a Read Request.
pub const PLAN_PREFIX: usize = UNTAGGED_HEADER_LEN + READ_REQUEST_HEADER_LEN;

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

/// Why a segment may not be placed: one variant per check of RFC 5040 §7 / RFC 5041 §7, with
/// the values that failed it. Built without allocation (the out-of-order path builds and drops
/// these for candidates it leaves to the in-order path); the words come from `Display` only
/// when somebody reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// The DDP version is not the negotiated one.
    #[error("DDP version {got}, expected {expected}")]
    DdpVersion {
        /// Version received.
        got: u8,
        /// Version negotiated.
        expected: u8,
        /// The segment is tagged.
        tagged: bool,
    },
    /// The RDMAP version is not the negotiated one.
    #[error("RDMAP version {got}, expected {expected}")]
    RdmapVersion {
        /// Version received.
        got: u8,
        /// Version negotiated.
        expected: u8,
    },
    /// The ULPDU is shorter than its DDP header.
    #[error("a {ulpdu_len}-octet ULPDU is too short for a DDP header")]
    Truncated {
        /// ULPDU octets.
        ulpdu_len: usize,
    },
    /// An opcode that the buffer model does not carry.
    #[error("{opcode:?} in a {} DDP segment", if *tagged { "tagged" } else { "untagged" })]
    UnexpectedOpcode {
        /// The opcode.
        opcode: RdmapOpcode,
        /// The segment is tagged.
        tagged: bool,
    },
    /// The STag names no region.
    #[error("STag {stag:#x} is not registered")]
    InvalidStag {
        /// The STag.
        stag: u32,
    },
    /// The STag's region belongs to another protection domain.
    #[error("STag {stag:#x} belongs to protection domain {region_pd}, the stream to {stream_pd}")]
    StagNotAssociated {
        /// The STag.
        stag: u32,
        /// The region's domain.
        region_pd: u32,
        /// The stream's domain.
        stream_pd: u32,
    },
    /// TO plus length wraps the 64-bit offset space.
    #[error("TO {to:#x} + {len} octets wraps")]
    ToWrap {
        /// Tagged offset.
        to: u64,
        /// Payload octets.
        len: usize,
    },
    /// The payload reaches beyond the region.
    #[error("TO {to} + {len} octets is beyond STag {stag:#x}'s {region_len} octets")]
    Bounds {
        /// The STag.
        stag: u32,
        /// Tagged offset.
        to: u64,
        /// Payload octets.
        len: usize,
        /// The region's octets.
        region_len: u64,
    },
    /// An RDMA Write to a region without remote write access.
    #[error("STag {stag:#x} does not allow remote writes")]
    NoRemoteWrite {
        /// The STag.
        stag: u32,
    },
    /// An untagged segment on the wrong queue for its opcode.
    #[error("{opcode:?} on queue {qn}, expected {expected}")]
    InvalidQn {
        /// The opcode.
        opcode: RdmapOpcode,
        /// Queue received.
        qn: u32,
        /// Queue the opcode belongs on.
        expected: u32,
    },
    /// A valid RDMA Read Request: this datapath cannot answer it yet (no send path).
    #[error("RDMA Read Requests are not served by this datapath")]
    ReadRequestUnsupported,
    /// An RDMA Read Request whose Data Source STag names no region (RFC 5040 §5.2.1).
    #[error("Read Request source STag {stag:#x} is not valid")]
    ReadInvalidStag {
        /// The Data Source STag.
        stag: u32,
    },
    /// An RDMA Read Request for a region of another protection domain.
    #[error("Read Request source STag {stag:#x} belongs to domain {region_pd}, the stream to {stream_pd}")]
    ReadStagNotAssociated {
        /// The Data Source STag.
        stag: u32,
        /// The region's domain.
        region_pd: u32,
        /// The stream's domain.
        stream_pd: u32,
    },
    /// Source TO + RDMA Read Message Size wraps 2^64.
    #[error("Read Request source TO {to} + {len} octets wraps")]
    ReadToWrap {
        /// The Data Source Tagged Offset.
        to: u64,
        /// The RDMA Read Message Size.
        len: u32,
    },
    /// The octets asked for lie (partly) outside the source region.
    #[error(
        "Read Request source TO {to} + {len} octets is beyond STag {stag:#x}'s {region_len} octets"
    )]
    ReadBounds {
        /// The Data Source STag.
        stag: u32,
        /// The Data Source Tagged Offset.
        to: u64,
        /// The RDMA Read Message Size.
        len: u32,
        /// The region's octets.
        region_len: u64,
    },
    /// An RDMA Read Request for a region without remote read access.
    #[error("STag {stag:#x} does not allow remote reads")]
    NoRemoteRead {
        /// The Data Source STag.
        stag: u32,
    },
    /// The MSN is not the one expected (in order) or not within the posted range.
    #[error("MSN {msn} where {expected} is expected")]
    MsnRange {
        /// MSN received.
        msn: u32,
        /// MSN expected next.
        expected: u32,
    },
    /// No receive buffer is posted for the MSN.
    #[error("MSN {msn}: no receive buffer posted ({posted} posted from MSN {front})")]
    NoBuffer {
        /// MSN received.
        msn: u32,
        /// Buffers posted.
        posted: usize,
        /// MSN of the first posted buffer.
        front: u32,
    },
    /// The message offset is beyond the buffer.
    #[error("MO {mo} beyond the {buf_len}-octet buffer")]
    InvalidMo {
        /// Message offset.
        mo: u32,
        /// Buffer octets.
        buf_len: u32,
    },
    /// The payload does not fit the rest of the buffer.
    #[error("MO {mo} + {len} octets exceed the {buf_len}-octet buffer")]
    TooLong {
        /// Message offset.
        mo: u32,
        /// Payload octets.
        len: usize,
        /// Buffer octets.
        buf_len: u32,
    },
    /// A segment of a tagged message that does not continue it: another STag, or a TO other
    /// than the one right after the message's octets so far.
    #[error("tagged segment STag {stag:#x} TO {to} does not continue STag {expected_stag:#x} at TO {expected_to}")]
    TaggedDiscontinuity {
        /// The segment's STag.
        stag: u32,
        /// The segment's TO.
        to: u64,
        /// The message's STag.
        expected_stag: u32,
        /// Where the message continues.
        expected_to: u64,
    },
    /// The posted buffer's region was destroyed after it was posted.
    #[error("MSN {msn}: the buffer's region {stag:#x} is gone")]
    BufferRegionGone {
        /// MSN.
        msn: u32,
        /// The buffer's region.
        stag: u32,
    },
}

impl PlacementError {
    /// The Terminate control fields (layer, type, code) the RFCs assign to this error
    /// (RFC 5040 Figure 9 for RDMAP, RFC 5041 §7 for DDP).
    pub fn terminate(&self) -> TerminateRepr {
        use PlacementError as E;
        let (layer, error_type, error_code) = match *self {
            E::DdpVersion { tagged: true, .. } => {
                (ddp_err::LAYER, ddp_err::TAGGED, ddp_err::TAGGED_VERSION)
            }
            E::DdpVersion { tagged: false, .. } => {
                (ddp_err::LAYER, ddp_err::UNTAGGED, ddp_err::UNTAGGED_VERSION)
            }
            E::RdmapVersion { .. } => (rdmap_err::LAYER, rdmap_err::OPERATION, rdmap_err::VERSION),
            E::Truncated { .. } | E::ReadRequestUnsupported => (
                rdmap_err::LAYER,
                rdmap_err::OPERATION,
                rdmap_err::UNSPECIFIED,
            ),
            E::UnexpectedOpcode { .. } => (
                rdmap_err::LAYER,
                rdmap_err::OPERATION,
                rdmap_err::UNEXPECTED_OPCODE,
            ),
            E::InvalidStag { .. } => (ddp_err::LAYER, ddp_err::TAGGED, ddp_err::INVALID_STAG),
            E::StagNotAssociated { .. } => (
                ddp_err::LAYER,
                ddp_err::TAGGED,
                ddp_err::STAG_NOT_ASSOCIATED,
            ),
            E::ToWrap { .. } => (ddp_err::LAYER, ddp_err::TAGGED, ddp_err::TO_WRAP),
            // RFC 5041 §7.2 has no code of its own for a tagged message whose segments change
            // STag or jump in TO (its segments describe one contiguous run of one tagged
            // buffer, §5.1/§5.2). Another STag: "Invalid STag" (0x00), the STag is not valid
            // for the message it continues. The same STag at another TO: "Base or bounds
            // violation" (0x01), the octets fall outside the message's contiguous run.
            E::TaggedDiscontinuity {
                stag,
                expected_stag,
                ..
            } => (
                ddp_err::LAYER,
                ddp_err::TAGGED,
                if stag != expected_stag {
                    ddp_err::INVALID_STAG
                } else {
                    ddp_err::BOUNDS
                },
            ),
            E::Bounds { .. } => (ddp_err::LAYER, ddp_err::TAGGED, ddp_err::BOUNDS),
            E::NoRemoteWrite { .. } | E::NoRemoteRead { .. } => {
                (rdmap_err::LAYER, rdmap_err::PROTECTION, rdmap_err::ACCESS)
            }
            // RFC 5040 §7 (Figure 9): the Data Source's checks of an RDMA Read Request are
            // RDMAP Remote Protection Errors.
            E::ReadInvalidStag { .. } => (
                rdmap_err::LAYER,
                rdmap_err::PROTECTION,
                rdmap_err::INVALID_STAG,
            ),
            E::ReadBounds { .. } => (rdmap_err::LAYER, rdmap_err::PROTECTION, rdmap_err::BOUNDS),
            E::ReadStagNotAssociated { .. } => (
                rdmap_err::LAYER,
                rdmap_err::PROTECTION,
                rdmap_err::STAG_NOT_ASSOCIATED,
            ),
            E::ReadToWrap { .. } => (rdmap_err::LAYER, rdmap_err::PROTECTION, rdmap_err::TO_WRAP),
            E::InvalidQn { .. } => (ddp_err::LAYER, ddp_err::UNTAGGED, ddp_err::INVALID_QN),
            E::MsnRange { .. } => (ddp_err::LAYER, ddp_err::UNTAGGED, ddp_err::MSN_RANGE),
            E::NoBuffer { .. } | E::BufferRegionGone { .. } => {
                (ddp_err::LAYER, ddp_err::UNTAGGED, ddp_err::NO_BUFFER)
            }
            E::InvalidMo { .. } => (ddp_err::LAYER, ddp_err::UNTAGGED, ddp_err::INVALID_MO),
            E::TooLong { .. } => (ddp_err::LAYER, ddp_err::UNTAGGED, ddp_err::TOO_LONG),
        };
        TerminateRepr {
            layer,
            error_type,
            error_code,
        }
    }
}

/// Why receive buffers were not posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{posted} buffers posted already, {more} more exceed the limit of {MAX_POSTED}")]
pub struct PostError {
    /// Buffers waiting.
    pub posted: usize,
    /// Buffers offered.
    pub more: usize,
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
    pub const INVALID_STAG: u8 = 0;
    pub const BOUNDS: u8 = 1;
    pub const ACCESS: u8 = 2;
    pub const STAG_NOT_ASSOCIATED: u8 = 3;
    pub const TO_WRAP: u8 = 4;
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
    pub fn post(
        &mut self,
        bufs: impl ExactSizeIterator<Item = PostedBuf>,
    ) -> Result<(), PostError> {
        if self.recv.len() + bufs.len() > MAX_POSTED {
            return Err(PostError {
                posted: self.recv.len(),
                more: bufs.len(),
            });
        }
        self.recv.extend(bufs);
        Ok(())
    }

    /// Validates a ULPDU whose first octets are `head` (at least [`PLAN_PREFIX`] when the
    /// ULPDU is that long) and whose length is `ulpdu_len`. `in_order`: the segment is the
    /// next one of the stream (untagged messages must then be the next MSN).
    pub fn plan<R: Regions + ?Sized>(
        &self,
        regions: &R,
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
                    PlacementError::DdpVersion {
                        got: ddp,
                        expected,
                        tagged,
                    }
                } else {
                    PlacementError::RdmapVersion {
                        got: rdmap,
                        expected,
                    }
                });
            }
            Err(DdpError::Truncated(_)) => return Err(PlacementError::Truncated { ulpdu_len }),
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
                    return Err(PlacementError::UnexpectedOpcode {
                        opcode,
                        tagged: true,
                    });
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
                let Some(r) = regions.info(stag) else {
                    return Err(PlacementError::InvalidStag { stag });
                };
                if r.pd != self.pd {
                    return Err(PlacementError::StagNotAssociated {
                        stag,
                        region_pd: r.pd,
                        stream_pd: self.pd,
                    });
                }
                let Some(end) = to.checked_add(payload_len as u64) else {
                    return Err(PlacementError::ToWrap {
                        to,
                        len: payload_len,
                    });
                };
                if end > r.len {
                    return Err(PlacementError::Bounds {
                        stag,
                        to,
                        len: payload_len,
                        region_len: r.len,
                    });
                }
                if opcode == RdmapOpcode::RdmaWrite && !r.remote_write {
                    return Err(PlacementError::NoRemoteWrite { stag });
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
                    _ => {
                        return Err(PlacementError::UnexpectedOpcode {
                            opcode,
                            tagged: false,
                        })
                    }
                };
                if qn != want_qn {
                    return Err(PlacementError::InvalidQn {
                        opcode,
                        qn,
                        expected: want_qn,
                    });
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
                        return Err(self.check_read_request(
                            head.get(header_len..header_len + READ_REQUEST_HEADER_LEN),
                            ulpdu_len,
                            regions,
                        ))
                    }
                    _ => {}
                }
                let idx = msn.wrapping_sub(self.front_msn);
                if idx >= 1 << 31 || (in_order && idx != 0) {
                    return Err(PlacementError::MsnRange {
                        msn,
                        expected: self.front_msn,
                    });
                }
                let Some(buf) = self.recv.get(idx as usize) else {
                    return Err(PlacementError::NoBuffer {
                        msn,
                        posted: self.recv.len(),
                        front: self.front_msn,
                    });
                };
                if mo > buf.len {
                    return Err(PlacementError::InvalidMo {
                        mo,
                        buf_len: buf.len,
                    });
                }
                if u64::from(mo) + payload_len as u64 > u64::from(buf.len) {
                    return Err(PlacementError::TooLong {
                        mo,
                        len: payload_len,
                        buf_len: buf.len,
                    });
                }
                let target = (payload_len > 0).then_some((buf.stag, buf.offset + u64::from(mo)));
                // The buffer's region was checked when it was posted; it must still exist.
                if let Some((stag, _)) = target {
                    if regions.info(stag).is_none() {
                        return Err(PlacementError::BufferRegionGone { msn, stag });
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
    pub fn place<R: Regions + ?Sized>(
        regions: &mut R,
        plan: &SegmentPlan,
        ulpdu: &Ulpdu<'_>,
    ) -> bool {
        let Some((stag, mut off)) = plan.target else {
            return false;
        };
        let mut skip = plan.header_len;
        for piece in ulpdu.pieces() {
            let p = piece.get(skip.min(piece.len())..).unwrap_or(&[]);
            skip -= skip.min(piece.len());
            if !p.is_empty() {
                if !regions.write(stag, off, p) {
                    return false;
                }
                off += p.len() as u64;
            }
        }
        true
    }

    /// Whether `plan`, the next segment in stream order, continues the tagged message being
    /// completed (if it is tagged and one is): the same STag, at the TO right after the
    /// octets so far. Zero-length segments are not checked (RFC 5041 §5.3), nor is a segment
    /// after only zero-length ones. Call before placing an in-order segment;
    /// [`Placer::complete`] checks again.
    pub fn continues(&self, plan: &SegmentPlan) -> Result<(), PlacementError> {
        let SegmentKind::Tagged { stag, to, .. } = plan.kind else {
            return Ok(());
        };
        match self.tagged {
            Some((s, first, n)) if n > 0 && plan.payload_len > 0 => {
                let expected_to = first.wrapping_add(n);
                if stag == s && to == expected_to {
                    Ok(())
                } else {
                    Err(PlacementError::TaggedDiscontinuity {
                        stag,
                        to,
                        expected_stag: s,
                        expected_to,
                    })
                }
            }
            _ => Ok(()),
        }
    }

    /// The Data Source's checks of an RDMA Read Request (RFC 5040 §4.4, §5.2.1): its header
    /// present, then the source STag valid, of this stream's domain, TO + size not wrapping,
    /// inside the region, and readable by the peer. A request that passes is still refused
    /// ([`PlacementError::ReadRequestUnsupported`]): answering needs the send path.
    fn check_read_request<R: Regions + ?Sized>(
        &self,
        header: Option<&[u8]>,
        ulpdu_len: usize,
        regions: &R,
    ) -> PlacementError {
        let Some(h) = header.filter(|h| h.len() == READ_REQUEST_HEADER_LEN) else {
            return PlacementError::Truncated { ulpdu_len };
        };
        // Sink STag (4) | Sink TO (8) | RDMA Read Message Size (4) | Source STag (4) | Source TO (8).
        let be32 = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let size = be32(12);
        let stag = be32(16);
        let to = (u64::from(be32(20)) << 32) | u64::from(be32(24));
        let Some(r) = regions.info(stag) else {
            return PlacementError::ReadInvalidStag { stag };
        };
        if r.pd != self.pd {
            return PlacementError::ReadStagNotAssociated {
                stag,
                region_pd: r.pd,
                stream_pd: self.pd,
            };
        }
        let Some(end) = to.checked_add(u64::from(size)) else {
            return PlacementError::ReadToWrap { to, len: size };
        };
        if end > r.len {
            return PlacementError::ReadBounds {
                stag,
                to,
                len: size,
                region_len: r.len,
            };
        }
        if !r.remote_read {
            return PlacementError::NoRemoteRead { stag };
        }
        PlacementError::ReadRequestUnsupported
    }

    /// Advances the in-order state past a placed segment; returns the completion of the
    /// message it ends, if any, or the error when the segment does not continue its tagged
    /// message ([`Placer::continues`]; the state is then left as it was).
    pub fn complete(
        &mut self,
        plan: &SegmentPlan,
        flow_id: u64,
    ) -> Result<Option<Completion>, PlacementError> {
        self.continues(plan)?;
        Ok(self.advance(plan, flow_id))
    }

    fn advance(&mut self, plan: &SegmentPlan, flow_id: u64) -> Option<Completion> {
        match plan.kind {
            SegmentKind::Tagged {
                opcode,
                stag,
                to,
                last,
            } => {
                let (s, first, n) = match self.tagged.take() {
                    // Only zero-length segments so far: this one names the message.
                    Some((_, _, 0)) | None => (stag, to, 0),
                    Some(t) => t,
                };
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

#[cfg(test)]
mod tests;
