//! DDP (RFC 5041 §4) and RDMAP (RFC 5040 §4) headers carried inside a ULPDU.
//!
//! ```text
//! octet 0: T(0x80) L(0x40) Rsvd(4) DV(2)=01      octet 1: RV(2)=01 Rsv(2) OpCode(4)
//! tagged:   STag u32 | TO u64                                  (14 octets in all)
//! untagged: RsvdULP/Invalidate STag u32 | QN u32 | MSN u32 | MO u32 (18 octets in all)
//! ```

use super::Truncated;

mod field {
    use std::ops::Range;
    pub const DDP_CONTROL: usize = 0;
    pub const RDMAP_CONTROL: usize = 1;
    pub const STAG: Range<usize> = 2..6;
    pub const TO: Range<usize> = 6..14;
    pub const INV_STAG: Range<usize> = 2..6;
    pub const QN: Range<usize> = 6..10;
    pub const MSN: Range<usize> = 10..14;
    pub const MO: Range<usize> = 14..18;
}

/// Tagged flag in the DDP control octet.
pub const FLAG_TAGGED: u8 = 0x80;
/// Last flag in the DDP control octet.
pub const FLAG_LAST: u8 = 0x40;
/// The DDP version this implementation sends (RFC 5041); RDMAC peers use 0.
pub const DDP_VERSION: u8 = 1;
/// The RDMAP version this implementation sends (RFC 5040); RDMAC peers use 0.
pub const RDMAP_VERSION: u8 = 1;
/// Tagged header length.
pub const TAGGED_HEADER_LEN: usize = 14;
/// Untagged header length.
pub const UNTAGGED_HEADER_LEN: usize = 18;
/// Queue numbers of untagged RDMAP messages (RFC 5040 §5).
pub mod queue {
    /// Send variants.
    pub const SEND: u32 = 0;
    /// RDMA Read Request.
    pub const READ_REQUEST: u32 = 1;
    /// Terminate.
    pub const TERMINATE: u32 = 2;
}

/// RDMAP opcodes (RFC 5040 §4.2, Figure 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmapOpcode {
    /// 0, tagged.
    RdmaWrite,
    /// 1, untagged QN 1.
    RdmaReadRequest,
    /// 2, tagged.
    RdmaReadResponse,
    /// 3, untagged QN 0.
    Send,
    /// 4, untagged QN 0.
    SendWithInvalidate,
    /// 5, untagged QN 0.
    SendWithSolicitedEvent,
    /// 6, untagged QN 0.
    SendWithSolicitedEventAndInvalidate,
    /// 7, untagged QN 2.
    Terminate,
    /// Anything else.
    Unknown(u8),
}

impl From<u8> for RdmapOpcode {
    fn from(v: u8) -> Self {
        match v & 0x0f {
            0 => Self::RdmaWrite,
            1 => Self::RdmaReadRequest,
            2 => Self::RdmaReadResponse,
            3 => Self::Send,
            4 => Self::SendWithInvalidate,
            5 => Self::SendWithSolicitedEvent,
            6 => Self::SendWithSolicitedEventAndInvalidate,
            7 => Self::Terminate,
            x => Self::Unknown(x),
        }
    }
}

impl From<RdmapOpcode> for u8 {
    fn from(op: RdmapOpcode) -> u8 {
        match op {
            RdmapOpcode::RdmaWrite => 0,
            RdmapOpcode::RdmaReadRequest => 1,
            RdmapOpcode::RdmaReadResponse => 2,
            RdmapOpcode::Send => 3,
            RdmapOpcode::SendWithInvalidate => 4,
            RdmapOpcode::SendWithSolicitedEvent => 5,
            RdmapOpcode::SendWithSolicitedEventAndInvalidate => 6,
            RdmapOpcode::Terminate => 7,
            RdmapOpcode::Unknown(x) => x & 0x0f,
        }
    }
}

impl RdmapOpcode {
    /// Whether RFC 5040 carries this opcode in a tagged DDP message.
    pub fn is_tagged(self) -> bool {
        matches!(self, Self::RdmaWrite | Self::RdmaReadResponse)
    }
}

/// A view over a DDP header (either model) at the start of a ULPDU.
#[derive(Debug, Clone, Copy)]
pub struct DdpHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DdpHeader<T> {
    /// Wraps a buffer without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        DdpHeader { buffer }
    }

    /// Wraps a buffer after [`DdpHeader::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        let h = Self::new_unchecked(buffer);
        h.check_len()?;
        Ok(h)
    }

    /// Checks the buffer holds the whole header its T flag announces; after this no accessor
    /// panics (untagged accessors on a tagged header are still in bounds only if the buffer is
    /// long enough, so they are checked separately by [`DdpHeader::header_len`]).
    pub fn check_len(&self) -> Result<(), Truncated> {
        let have = self.buffer.as_ref().len();
        if have < 2 {
            return Err(Truncated {
                what: "DDP header",
                need: 2,
                have,
            });
        }
        let need = self.header_len();
        if have < need {
            return Err(Truncated {
                what: "DDP header",
                need,
                have,
            });
        }
        Ok(())
    }

    /// Header length for this header's model.
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
    }

    fn ctl(&self) -> u8 {
        self.buffer.as_ref()[field::DDP_CONTROL]
    }

    /// T flag.
    pub fn is_tagged(&self) -> bool {
        self.ctl() & FLAG_TAGGED != 0
    }

    /// L flag.
    pub fn is_last(&self) -> bool {
        self.ctl() & FLAG_LAST != 0
    }

    /// DDP version (DV).
    pub fn ddp_version(&self) -> u8 {
        self.ctl() & 0x03
    }

    /// RDMAP version (RV).
    pub fn rdmap_version(&self) -> u8 {
        self.buffer.as_ref()[field::RDMAP_CONTROL] >> 6
    }

    /// RDMAP opcode.
    pub fn opcode(&self) -> RdmapOpcode {
        RdmapOpcode::from(self.buffer.as_ref()[field::RDMAP_CONTROL] & 0x0f)
    }

    fn be32(&self, r: std::ops::Range<usize>) -> u32 {
        let b = &self.buffer.as_ref()[r];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Tagged: STag.
    pub fn stag(&self) -> u32 {
        self.be32(field::STAG)
    }

    /// Tagged: Tagged Offset.
    pub fn tagged_offset(&self) -> u64 {
        let b = &self.buffer.as_ref()[field::TO];
        u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    }

    /// Untagged: the RsvdULP octets that carry the invalidate STag.
    pub fn invalidate_stag(&self) -> u32 {
        self.be32(field::INV_STAG)
    }

    /// Untagged: queue number.
    pub fn queue_number(&self) -> u32 {
        self.be32(field::QN)
    }

    /// Untagged: message sequence number.
    pub fn msn(&self) -> u32 {
        self.be32(field::MSN)
    }

    /// Untagged: message offset.
    pub fn message_offset(&self) -> u32 {
        self.be32(field::MO)
    }

    /// The DDP payload after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// A parsed DDP/RDMAP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdpRepr {
    /// Tagged buffer model.
    Tagged {
        /// L flag.
        last: bool,
        /// RDMAP opcode.
        opcode: RdmapOpcode,
        /// STag.
        stag: u32,
        /// Tagged Offset.
        to: u64,
    },
    /// Untagged buffer model.
    Untagged {
        /// L flag.
        last: bool,
        /// RDMAP opcode.
        opcode: RdmapOpcode,
        /// Invalidate STag (RsvdULP octets 1..5).
        inv_stag: u32,
        /// Queue number.
        qn: u32,
        /// Message sequence number.
        msn: u32,
        /// Message offset.
        mo: u32,
    },
}

/// Why a DDP header could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DdpError {
    /// Too short.
    #[error(transparent)]
    Truncated(#[from] Truncated),
    /// DV or RV not the version this stream uses.
    #[error("DDP version {ddp} / RDMAP version {rdmap}, expected {expected}")]
    Version {
        /// DV received.
        ddp: u8,
        /// RV received.
        rdmap: u8,
        /// The version the stream negotiated.
        expected: u8,
    },
}

impl DdpRepr {
    /// Parses the header at the start of `ulpdu`, expecting DDP and RDMAP version `version`
    /// (1, or 0 for a permissive connection with an RDMAC peer). Returns the header and the
    /// payload offset.
    pub fn parse(ulpdu: &[u8], version: u8) -> Result<(DdpRepr, usize), DdpError> {
        let h = DdpHeader::new_checked(ulpdu)?;
        if h.ddp_version() != version || h.rdmap_version() != version {
            return Err(DdpError::Version {
                ddp: h.ddp_version(),
                rdmap: h.rdmap_version(),
                expected: version,
            });
        }
        let repr = if h.is_tagged() {
            DdpRepr::Tagged {
                last: h.is_last(),
                opcode: h.opcode(),
                stag: h.stag(),
                to: h.tagged_offset(),
            }
        } else {
            DdpRepr::Untagged {
                last: h.is_last(),
                opcode: h.opcode(),
                inv_stag: h.invalidate_stag(),
                qn: h.queue_number(),
                msn: h.msn(),
                mo: h.message_offset(),
            }
        };
        Ok((repr, h.header_len()))
    }

    /// Header length on the wire.
    pub fn header_len(&self) -> usize {
        match self {
            DdpRepr::Tagged { .. } => TAGGED_HEADER_LEN,
            DdpRepr::Untagged { .. } => UNTAGGED_HEADER_LEN,
        }
    }

    /// Writes the header with DDP/RDMAP version `version`; returns the octets written, or
    /// `None` when `buf` is too short.
    pub fn emit(&self, buf: &mut [u8], version: u8) -> Option<usize> {
        let n = self.header_len();
        let buf = buf.get_mut(..n)?;
        let (last, opcode) = match *self {
            DdpRepr::Tagged { last, opcode, .. } | DdpRepr::Untagged { last, opcode, .. } => {
                (last, opcode)
            }
        };
        let mut ctl = version & 0x03;
        if last {
            ctl |= FLAG_LAST;
        }
        match *self {
            DdpRepr::Tagged { stag, to, .. } => {
                buf[field::DDP_CONTROL] = ctl | FLAG_TAGGED;
                buf[field::STAG].copy_from_slice(&stag.to_be_bytes());
                buf[field::TO].copy_from_slice(&to.to_be_bytes());
            }
            DdpRepr::Untagged {
                inv_stag,
                qn,
                msn,
                mo,
                ..
            } => {
                buf[field::DDP_CONTROL] = ctl;
                buf[field::INV_STAG].copy_from_slice(&inv_stag.to_be_bytes());
                buf[field::QN].copy_from_slice(&qn.to_be_bytes());
                buf[field::MSN].copy_from_slice(&msn.to_be_bytes());
                buf[field::MO].copy_from_slice(&mo.to_be_bytes());
            }
        }
        buf[field::RDMAP_CONTROL] = ((version & 0x03) << 6) | u8::from(opcode);
        Some(n)
    }
}

/// RDMA Read Request header (RFC 5040 §4.4), following an untagged DDP header: sink STag,
/// sink TO, read message size, source STag, source TO.
pub const READ_REQUEST_HEADER_LEN: usize = 28;

/// An RDMA Read Request (RFC 5040 §4.4): after its untagged DDP header (queue 1), the Data
/// Sink's buffer, the size, and the Data Source's buffer the octets are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequestRepr {
    /// Data Sink STag: where the Read Response goes.
    pub sink_stag: u32,
    /// Data Sink Tagged Offset.
    pub sink_to: u64,
    /// RDMA Read Message Size.
    pub size: u32,
    /// Data Source STag: what is read.
    pub src_stag: u32,
    /// Data Source Tagged Offset.
    pub src_to: u64,
}

/// An RDMA Read Request ULPDU: the untagged DDP header and the Read Request header.
pub const READ_REQUEST_ULPDU_LEN: usize = UNTAGGED_HEADER_LEN + READ_REQUEST_HEADER_LEN;

impl ReadRequestRepr {
    /// Parses the [`READ_REQUEST_HEADER_LEN`] octets at the start of `buf` (the ULPDU's
    /// payload, after its DDP header); what follows is not looked at.
    pub fn parse(buf: &[u8]) -> Result<Self, Truncated> {
        let h: &[u8; READ_REQUEST_HEADER_LEN] = buf
            .get(..READ_REQUEST_HEADER_LEN)
            .and_then(|b| b.try_into().ok())
            .ok_or(Truncated {
                what: "RDMA Read Request header",
                need: READ_REQUEST_HEADER_LEN,
                have: buf.len(),
            })?;
        let be32 = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let be64 = |i: usize| (u64::from(be32(i)) << 32) | u64::from(be32(i + 4));
        Ok(ReadRequestRepr {
            sink_stag: be32(0),
            sink_to: be64(4),
            size: be32(12),
            src_stag: be32(16),
            src_to: be64(20),
        })
    }

    /// The Read Request header: Sink STag (4) | Sink TO (8) | RDMA Read Message Size (4) |
    /// Source STag (4) | Source TO (8).
    pub fn emit(&self) -> [u8; READ_REQUEST_HEADER_LEN] {
        let mut h = [0u8; READ_REQUEST_HEADER_LEN];
        h[0..4].copy_from_slice(&self.sink_stag.to_be_bytes());
        h[4..12].copy_from_slice(&self.sink_to.to_be_bytes());
        h[12..16].copy_from_slice(&self.size.to_be_bytes());
        h[16..20].copy_from_slice(&self.src_stag.to_be_bytes());
        h[20..28].copy_from_slice(&self.src_to.to_be_bytes());
        h
    }

    /// The whole ULPDU: untagged, queue 1, MSN `msn`, L set, DDP/RDMAP version `version`,
    /// then this header.
    pub fn ulpdu(&self, msn: u32, version: u8) -> [u8; READ_REQUEST_ULPDU_LEN] {
        let mut u = [0u8; READ_REQUEST_ULPDU_LEN];
        let ddp = DdpRepr::Untagged {
            last: true,
            opcode: RdmapOpcode::RdmaReadRequest,
            inv_stag: 0,
            qn: queue::READ_REQUEST,
            msn,
            mo: 0,
        };
        // The array holds the untagged header: emit cannot fall short.
        let _ = ddp.emit(&mut u, version);
        u[UNTAGGED_HEADER_LEN..].copy_from_slice(&self.emit());
        u
    }
}

/// Terminate header (RFC 5040 §4.8): Terminate Control and reserved bits, 4 octets, then
/// optional DDP segment length and terminated headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminateRepr {
    /// Layer: 0 RDMA, 1 DDP, 2 LLP (MPA).
    pub layer: u8,
    /// Error type (0 for MPA errors at layer 2).
    pub error_type: u8,
    /// Error code.
    pub error_code: u8,
}

/// The DDP segment a Terminate names by its copied header (RFC 5040 §4.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminatedSegment {
    /// A tagged segment (an RDMA Write or a Read Response): its STag and tagged offset.
    Tagged {
        /// The STag.
        stag: u32,
        /// The tagged offset.
        to: u64,
    },
    /// An untagged segment: its queue (0 Sends, 1 Read Requests) and message sequence number.
    Untagged {
        /// The queue number.
        qn: u32,
        /// The message sequence number.
        msn: u32,
    },
}

/// Terminate layer for errors found by the LLP (MPA).
pub const TERMINATE_LAYER_LLP: u8 = 2;
/// Terminate control octets (no terminated headers included).
pub const TERMINATE_HEADER_LEN: usize = 4;

impl TerminateRepr {
    /// An MPA error as a Terminate: layer 2, error type 0 (RFC 5044 §8, RFC 6581 §8).
    pub fn mpa(code: crate::MpaErrorCode) -> Self {
        TerminateRepr {
            layer: TERMINATE_LAYER_LLP,
            error_type: 0,
            error_code: code.code(),
        }
    }

    /// Parses the Terminate Control field.
    pub fn parse(buf: &[u8]) -> Result<Self, Truncated> {
        let b = buf.get(..TERMINATE_HEADER_LEN).ok_or(Truncated {
            what: "Terminate header",
            need: TERMINATE_HEADER_LEN,
            have: buf.len(),
        })?;
        Ok(TerminateRepr {
            layer: b[0] >> 4,
            error_type: b[0] & 0x0f,
            error_code: b[1],
        })
    }

    /// The DDP segment a Terminate names, when its HdrCt D bit says the segment's DDP header
    /// is copied into it and it is there (RFC 5040 §4.8): `buf` starts at the Terminate
    /// Control field; the DDP Segment Length (16 bits) follows it, then the header.
    pub fn terminated_segment(buf: &[u8]) -> Option<TerminatedSegment> {
        if buf.get(2)? & HDRCT_D == 0 {
            return None;
        }
        let h = buf.get(TERMINATE_HEADER_LEN + 2..)?;
        let be32 = |r: std::ops::Range<usize>| -> Option<u32> {
            Some(u32::from_be_bytes(h.get(r)?.try_into().ok()?))
        };
        if h.first()? & FLAG_TAGGED != 0 {
            Some(TerminatedSegment::Tagged {
                stag: be32(field::STAG)?,
                to: u64::from_be_bytes(h.get(field::TO)?.try_into().ok()?),
            })
        } else {
            Some(TerminatedSegment::Untagged {
                qn: be32(field::QN)?,
                msn: be32(field::MSN)?,
            })
        }
    }

    /// Writes the Terminate Control field (HdrCt = 0: no headers included).
    pub fn emit(&self) -> [u8; TERMINATE_HEADER_LEN] {
        [
            (self.layer << 4) | (self.error_type & 0x0f),
            self.error_code,
            0,
            0,
        ]
    }
}

/// Builds a whole Terminate ULPDU (untagged, QN 2, L set) for an MPA error.
pub fn terminate_ulpdu(code: crate::MpaErrorCode, msn: u32, version: u8) -> Vec<u8> {
    terminate_with(TerminateRepr::mpa(code).emit(), msn, version, &[])
}

/// A Terminate ULPDU (untagged, QN 2, MSN `msn`, L set): the control field `ctl`, then `rest`
/// (DDP Segment Length and terminated headers, when included).
fn terminate_with(ctl: [u8; TERMINATE_HEADER_LEN], msn: u32, version: u8, rest: &[u8]) -> Vec<u8> {
    let repr = DdpRepr::Untagged {
        last: true,
        opcode: RdmapOpcode::Terminate,
        inv_stag: 0,
        qn: queue::TERMINATE,
        msn,
        mo: 0,
    };
    let mut v = vec![0u8; UNTAGGED_HEADER_LEN];
    let n = repr.emit(&mut v, version).unwrap_or(0);
    v.truncate(n);
    v.extend_from_slice(&ctl);
    v.extend_from_slice(rest);
    v
}

/// Terminate Control HdrCt bit M: the DDP Segment Length field is valid (RFC 5040 §4.8).
pub const HDRCT_M: u8 = 0x80;
/// HdrCt bit D: the terminated DDP header is included.
pub const HDRCT_D: u8 = 0x40;
/// HdrCt bit R: the terminated RDMA (Read Request) header is included.
pub const HDRCT_R: u8 = 0x20;

/// Builds a Terminate ULPDU (untagged, QN 2, L set) that reports an error found in an
/// incoming DDP segment: HdrCt M and D set, the segment's length (its ULPDU length, clamped
/// to 16 bits) and its DDP header (14 or 18 octets, `ddp_header`'s first octets) follow the
/// control field (RFC 5040 §4.8, Figure 10: DDP errors and RDMAP errors include them). When
/// the segment is an RDMA Read Request (untagged, QN 1) and `ddp_header` holds its RDMA Read
/// Request Header too, that header follows as the Terminated RDMA Header and R is set
/// ("It MUST be present if the R bit is set"; sent back only for Read Requests).
pub fn terminate_ulpdu_for_segment(
    t: TerminateRepr,
    msn: u32,
    version: u8,
    segment_len: usize,
    ddp_header: &[u8],
) -> Vec<u8> {
    let hdr_len = match ddp_header.first() {
        Some(c) if c & FLAG_TAGGED != 0 => TAGGED_HEADER_LEN,
        Some(_) => UNTAGGED_HEADER_LEN,
        None => 0,
    }
    .min(ddp_header.len());
    let mut ctl = t.emit();
    ctl[2] |= if hdr_len > 0 {
        HDRCT_M | HDRCT_D
    } else {
        HDRCT_M
    };
    let seg = u16::try_from(segment_len).unwrap_or(u16::MAX);
    let mut rest = seg.to_be_bytes().to_vec();
    rest.extend_from_slice(&ddp_header[..hdr_len]);
    let read_request = hdr_len == UNTAGGED_HEADER_LEN
        && ddp_header[field::QN] == queue::READ_REQUEST.to_be_bytes();
    if let Some(rh) = ddp_header
        .get(hdr_len..hdr_len + READ_REQUEST_HEADER_LEN)
        .filter(|_| read_request)
    {
        ctl[2] |= HDRCT_R;
        rest.extend_from_slice(rh);
    }
    terminate_with(ctl, msn, version, &rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_segment_a_terminate_names_is_read_back_from_its_copied_header() {
        let t = TerminateRepr {
            layer: 0,
            error_type: 1,
            error_code: 0,
        };
        // A Write's tagged header: STag 0x1234_5678, TO 0x9_0000_0001.
        let mut w = [0u8; TAGGED_HEADER_LEN];
        w[0] = FLAG_TAGGED | FLAG_LAST | DDP_VERSION;
        w[field::STAG].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        w[field::TO].copy_from_slice(&0x9_0000_0001u64.to_be_bytes());
        let u = terminate_ulpdu_for_segment(t, 1, 1, 100, &w);
        assert_eq!(
            TerminateRepr::terminated_segment(&u[UNTAGGED_HEADER_LEN..]),
            Some(TerminatedSegment::Tagged {
                stag: 0x1234_5678,
                to: 0x9_0000_0001
            })
        );
        // A Read Request's untagged header: queue 1, MSN 7.
        let mut r = [0u8; UNTAGGED_HEADER_LEN];
        r[0] = FLAG_LAST | DDP_VERSION;
        r[field::QN].copy_from_slice(&1u32.to_be_bytes());
        r[field::MSN].copy_from_slice(&7u32.to_be_bytes());
        let u = terminate_ulpdu_for_segment(t, 1, 1, 46, &r);
        assert_eq!(
            TerminateRepr::terminated_segment(&u[UNTAGGED_HEADER_LEN..]),
            Some(TerminatedSegment::Untagged { qn: 1, msn: 7 })
        );
        // Without D, or cut short, it names nothing.
        assert_eq!(TerminateRepr::terminated_segment(&t.emit()), None);
        let mut cut = u[UNTAGGED_HEADER_LEN..].to_vec();
        cut.truncate(TERMINATE_HEADER_LEN + 2 + 10);
        assert_eq!(TerminateRepr::terminated_segment(&cut), None);
    }

    #[test]
    fn terminate_for_a_segment_carries_its_header() {
        let t = TerminateRepr {
            layer: 1,
            error_type: 1,
            error_code: 1,
        };
        let v = terminate_ulpdu_for_segment(t, 1, 1, 1000, &WRITE_HDR);
        assert_eq!(v.len(), 18 + 4 + 2 + 14);
        let (r, off) = DdpRepr::parse(&v, 1).unwrap();
        assert!(matches!(
            r,
            DdpRepr::Untagged {
                opcode: RdmapOpcode::Terminate,
                qn: 2,
                msn: 1,
                last: true,
                ..
            }
        ));
        assert_eq!(&v[off..off + 4], &[0x11, 0x01, 0xc0, 0x00]);
        assert_eq!(TerminateRepr::parse(&v[off..]).unwrap(), t);
        assert_eq!(&v[off + 4..off + 6], &1000u16.to_be_bytes());
        assert_eq!(&v[off + 6..], &WRITE_HDR);
        let v = terminate_ulpdu_for_segment(t, 1, 1, 100, &SEND_HDR);
        assert_eq!(&v[off + 6..], &SEND_HDR);
    }

    #[test]
    fn read_request_octets_as_rfc_5040_lays_them_out() {
        let r = ReadRequestRepr {
            sink_stag: 0x0102_0304,
            sink_to: 0x1112_1314_1516_1718,
            size: 0x2122_2324,
            src_stag: 0x3132_3334,
            src_to: 0x4142_4344_4546_4748,
        };
        let u = r.ulpdu(9, 1);
        // Untagged, L set, DV 1 | RV 1, Read Request (opcode 1), no Invalidate STag, QN 1,
        // MSN 9, MO 0 (RFC 5041 §4.3, RFC 5040 §4.1).
        assert_eq!(
            u[..18],
            [0x41, 0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0]
        );
        // Sink STag | Sink TO | RDMA Read Message Size | Source STag | Source TO (§4.4).
        let h: Vec<u8> = (0x01..=0x04)
            .chain(0x11..=0x18)
            .chain(0x21..=0x24)
            .chain(0x31..=0x34)
            .chain(0x41..=0x48)
            .collect();
        assert_eq!(u[18..], h[..]);
        assert_eq!(ReadRequestRepr::parse(&u[18..]), Ok(r));
        assert_eq!(
            ReadRequestRepr::parse(&u[18..45]),
            Err(Truncated {
                what: "RDMA Read Request header",
                need: 28,
                have: 27,
            })
        );
        assert!(matches!(
            DdpRepr::parse(&u, 1),
            Ok((
                DdpRepr::Untagged {
                    opcode: RdmapOpcode::RdmaReadRequest,
                    qn: queue::READ_REQUEST,
                    msn: 9,
                    last: true,
                    ..
                },
                18
            ))
        ));
    }

    /// RFC 5044 Figure 5: untagged Send with L set, QN 0, MSN 1, MO 0.
    const SEND_HDR: [u8; 18] = [0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
    /// docs/protocol.md worked example: zero-length tagged RDMA Write, STag 1, TO 0.
    const WRITE_HDR: [u8; 14] = [0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];

    #[test]
    fn parse_untagged() {
        let (r, off) = DdpRepr::parse(&SEND_HDR, 1).unwrap();
        assert_eq!(off, 18);
        assert_eq!(
            r,
            DdpRepr::Untagged {
                last: true,
                opcode: RdmapOpcode::Send,
                inv_stag: 0,
                qn: 0,
                msn: 1,
                mo: 0
            }
        );
        let mut out = [0u8; 18];
        assert_eq!(r.emit(&mut out, 1), Some(18));
        assert_eq!(out, SEND_HDR);
    }

    #[test]
    fn parse_tagged() {
        let (r, off) = DdpRepr::parse(&WRITE_HDR, 1).unwrap();
        assert_eq!(off, 14);
        assert_eq!(
            r,
            DdpRepr::Tagged {
                last: true,
                opcode: RdmapOpcode::RdmaWrite,
                stag: 1,
                to: 0
            }
        );
        let mut out = [0u8; 14];
        r.emit(&mut out, 1).unwrap();
        assert_eq!(out, WRITE_HDR);
        assert!(r.emit(&mut [0u8; 13], 1).is_none());
    }

    #[test]
    fn truncated_and_version() {
        assert!(matches!(
            DdpRepr::parse(&WRITE_HDR[..13], 1),
            Err(DdpError::Truncated(_))
        ));
        assert!(matches!(
            DdpRepr::parse(&SEND_HDR[..17], 1),
            Err(DdpError::Truncated(_))
        ));
        assert!(matches!(
            DdpRepr::parse(&[0x41], 1),
            Err(DdpError::Truncated(_))
        ));
        assert_eq!(
            DdpRepr::parse(&WRITE_HDR, 0).unwrap_err(),
            DdpError::Version {
                ddp: 1,
                rdmap: 1,
                expected: 0
            }
        );
        let h = DdpHeader::new_checked(&WRITE_HDR[..]).unwrap();
        assert_eq!(h.payload(), &[] as &[u8]);
    }

    #[test]
    fn opcodes_round_trip() {
        for v in 0u8..16 {
            assert_eq!(u8::from(RdmapOpcode::from(v)), v);
        }
        assert_eq!(RdmapOpcode::from(9), RdmapOpcode::Unknown(9));
    }

    #[test]
    fn terminate() {
        let t = terminate_ulpdu(crate::MpaErrorCode::CrcMismatch, 1, 1);
        let (r, off) = DdpRepr::parse(&t, 1).unwrap();
        assert!(matches!(
            r,
            DdpRepr::Untagged {
                opcode: RdmapOpcode::Terminate,
                qn: 2,
                msn: 1,
                last: true,
                ..
            }
        ));
        let tr = TerminateRepr::parse(&t[off..]).unwrap();
        assert_eq!(
            tr,
            TerminateRepr {
                layer: 2,
                error_type: 0,
                error_code: 2
            }
        );
    }
}
