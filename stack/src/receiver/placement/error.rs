//! Why a segment may not be placed ([`PlacementError`]) and the Terminate each reason
//! carries (RFC 5040 §7 Figure 9 for RDMAP, RFC 5041 §7 for DDP).

use super::MAX_POSTED;
use mpa::wire::ddp::{RdmapOpcode, TerminateRepr};

/// Why a segment may not be placed: one variant per check of RFC 5040 §7 / RFC 5041 §7, with
/// the values that failed it. Built without allocation (the out-of-order path builds and drops
/// these for candidates it leaves to the in-order path); the words come from `Display` only
/// when somebody reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PlacementError {
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
    /// A Read Response that answers none of our outstanding Read Requests (or lands outside
    /// the sink its request named). RFC 5040 names no code of its own: RDMAP "unexpected
    /// opcode", the stream's state does not allow it.
    #[error("Read Response to STag {stag:#x}, TO {to}, {len} octets: no Read Request of ours asked for it")]
    UnsolicitedReadResponse {
        /// Its STag.
        stag: u32,
        /// Its TO.
        to: u64,
        /// Payload octets.
        len: usize,
    },
    /// More RDMA Read Requests outstanding than our IRD (RFC 5040 §6.1 "MUST NOT exceed").
    /// RFC 5040 names no code of its own: RDMAP "catastrophic error, localized to RDMAP
    /// Stream", as siw answers an IRQ overrun.
    #[error("Read Request MSN {msn}: more than {ird} RDMA Read Requests outstanding")]
    IrdExceeded {
        /// Its MSN (queue 1).
        msn: u32,
        /// Our IRD.
        ird: usize,
    },
    /// Source TO + RDMA Read Message Size wraps 2^64.
    #[error("Read Request source TO {to} + {len} octets wraps")]
    ReadToWrap {
        /// The Data Source Tagged Offset.
        to: u64,
        /// The RDMA Read Message Size.
        len: u32,
    },
    /// Sink TO + RDMA Read Message Size wraps 2^64: no Read Response can carry it.
    #[error("Read Request sink TO {to} + {len} octets wraps")]
    ReadSinkToWrap {
        /// The Data Sink Tagged Offset.
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
    pub(crate) fn terminate(&self) -> TerminateRepr {
        use PlacementError as E;
        let (layer, error_type, error_code) = match *self {
            E::DdpVersion { tagged: true, .. } => {
                (ddp_err::LAYER, ddp_err::TAGGED, ddp_err::TAGGED_VERSION)
            }
            E::DdpVersion { tagged: false, .. } => {
                (ddp_err::LAYER, ddp_err::UNTAGGED, ddp_err::UNTAGGED_VERSION)
            }
            E::RdmapVersion { .. } => (rdmap_err::LAYER, rdmap_err::OPERATION, rdmap_err::VERSION),
            E::Truncated { .. } => (
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
            E::ReadToWrap { .. } | E::ReadSinkToWrap { .. } => {
                (rdmap_err::LAYER, rdmap_err::PROTECTION, rdmap_err::TO_WRAP)
            }
            E::UnsolicitedReadResponse { .. } => (
                rdmap_err::LAYER,
                rdmap_err::OPERATION,
                rdmap_err::UNEXPECTED_OPCODE,
            ),
            E::IrdExceeded { .. } => (
                rdmap_err::LAYER,
                rdmap_err::OPERATION,
                rdmap_err::CATASTROPHIC_STREAM,
            ),
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
    pub(crate) posted: usize,
    /// Buffers offered.
    pub(crate) more: usize,
}

/// RFC 5041 §7: DDP layer 1; tagged buffer errors (type 1), untagged (type 2).
pub(super) mod ddp_err {
    pub(crate) const LAYER: u8 = 1;
    pub(crate) const TAGGED: u8 = 1;
    pub(crate) const UNTAGGED: u8 = 2;
    pub(crate) const INVALID_STAG: u8 = 0;
    pub(crate) const BOUNDS: u8 = 1;
    pub(crate) const STAG_NOT_ASSOCIATED: u8 = 2;
    pub(crate) const TO_WRAP: u8 = 3;
    pub(crate) const TAGGED_VERSION: u8 = 4;
    pub(crate) const INVALID_QN: u8 = 1;
    pub(crate) const NO_BUFFER: u8 = 2;
    pub(crate) const MSN_RANGE: u8 = 3;
    pub(crate) const INVALID_MO: u8 = 4;
    pub(crate) const TOO_LONG: u8 = 5;
    pub(crate) const UNTAGGED_VERSION: u8 = 6;
}

/// RFC 5040 Figure 9: RDMAP layer 0.
pub(super) mod rdmap_err {
    pub(crate) const LAYER: u8 = 0;
    pub(crate) const PROTECTION: u8 = 1;
    pub(crate) const OPERATION: u8 = 2;
    pub(crate) const INVALID_STAG: u8 = 0;
    pub(crate) const BOUNDS: u8 = 1;
    pub(crate) const ACCESS: u8 = 2;
    pub(crate) const STAG_NOT_ASSOCIATED: u8 = 3;
    pub(crate) const TO_WRAP: u8 = 4;
    pub(crate) const VERSION: u8 = 5;
    pub(crate) const UNEXPECTED_OPCODE: u8 = 6;
    pub(crate) const CATASTROPHIC_STREAM: u8 = 7;
    pub(crate) const UNSPECIFIED: u8 = 0xff;
}
