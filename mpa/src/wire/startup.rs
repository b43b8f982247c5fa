//! The MPA Request and Reply frames of the startup phase (RFC 5044 §7.1.1; RFC 6581 §6, §9):
//!
//! ```text
//! Key (16) | M C R S Res(4) | Rev | PD_Length (u16 BE) | Private Data (PD_Length ≤ 512)
//! ```
//!
//! With revision 2 and S=1 the private data begins with the enhanced connection establishment
//! data, counted in PD_Length: `A|B|IRD(14)` and `C|D|ORD(14)`, both big-endian.
//!
//! [`StartupFrame`] is the raw view; [`StartupRepr`] gives the fields their meaning, so the
//! state machines in [`crate::startup`] never touch raw octets.
//!
//! Unlike most views, every accessor of [`StartupFrame`] is total: on a buffer that failed
//! [`StartupFrame::check_len`] missing fields read as zero and setters of missing fields do
//! nothing, so no input and no call order can make them panic.

#![forbid(unsafe_code)]

use super::Truncated;
use crate::error::{Fault, MpaErrorCode};
use std::fmt;

mod field {
    use std::ops::Range;
    pub const KEY: Range<usize> = 0..16;
    pub const FLAGS: usize = 16;
    pub const REV: usize = 17;
    pub const PD_LENGTH: Range<usize> = 18..20;
    pub const PRIVATE_DATA: usize = 20;
}

/// Octets before the private data: key, flags, Rev and PD_Length.
pub const HEADER_LEN: usize = field::PRIVATE_DATA;
/// The largest PD_Length (RFC 5044 §7.1.1; RFC 6581 §7 counts the enhanced data in it).
pub const MAX_PRIVATE_DATA: usize = 512;
/// The largest startup frame on the wire.
pub const MAX_FRAME_LEN: usize = HEADER_LEN + MAX_PRIVATE_DATA;
/// Octets of the enhanced connection establishment data (RFC 6581 §9).
pub const ENHANCED_LEN: usize = 4;
/// The most ULP private data an enhanced frame can carry.
pub const MAX_ENHANCED_ULP_PRIVATE_DATA: usize = MAX_PRIVATE_DATA - ENHANCED_LEN;

/// The Request key, `MPA ID Req Frame` (RFC 5044 §7.1.1).
pub const KEY_REQUEST: [u8; 16] = *b"MPA ID Req Frame";
/// The Reply key, `MPA ID Rep Frame` (RFC 5044 §7.1.1).
pub const KEY_REPLY: [u8; 16] = *b"MPA ID Rep Frame";

/// Bits of the flags octet (offset 16).
pub mod flags {
    /// M: markers required toward the sender of this frame.
    pub const M: u8 = 0x80;
    /// C: CRC preferred by the sender of this frame.
    pub const C: u8 = 0x40;
    /// R: rejected connection (Reply only).
    pub const R: u8 = 0x20;
    /// S: private data begins with enhanced connection establishment data (RFC 6581 §6).
    pub const S: u8 = 0x10;
    /// Res: reserved, zero on send, not checked on receive.
    pub const RES: u8 = 0x0f;
}

/// Bits and values of the enhanced connection establishment data (RFC 6581 §9).
pub mod rev2 {
    /// A, in the IRD word: peer-to-peer connection model.
    pub const A: u16 = 0x8000;
    /// B, in the IRD word: zero-length Send RTR.
    pub const B: u16 = 0x4000;
    /// C, in the ORD word: zero-length RDMA Write RTR.
    pub const C: u16 = 0x8000;
    /// D, in the ORD word: zero-length RDMA Read Request RTR.
    pub const D: u16 = 0x4000;
    /// The 14 bits of IRD or ORD.
    pub const IRD_ORD_MASK: u16 = 0x3fff;
    /// IRD or ORD value meaning "no automatic negotiation, the ULP handles it" (RFC 6581 §9.1).
    pub const NO_NEGOTIATION: u16 = 0x3fff;
}

/// Request or Reply, told apart by the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// MPA Request Frame, sent by the Initiator.
    Request,
    /// MPA Reply Frame, sent by the Responder.
    Reply,
}

impl FrameKind {
    /// The key that marks this kind.
    pub const fn key(self) -> [u8; 16] {
        match self {
            FrameKind::Request => KEY_REQUEST,
            FrameKind::Reply => KEY_REPLY,
        }
    }

    /// The kind a key marks, if any.
    pub fn from_key(key: &[u8]) -> Option<Self> {
        if key == KEY_REQUEST {
            Some(FrameKind::Request)
        } else if key == KEY_REPLY {
            Some(FrameKind::Reply)
        } else {
            None
        }
    }
}

impl fmt::Display for FrameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FrameKind::Request => "Request",
            FrameKind::Reply => "Reply",
        })
    }
}

/// A Ready-to-Receive indication type (RFC 6581 §9.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RtrType {
    /// A zero-length FULPDU Send (flag B).
    ZeroLengthSend,
    /// A zero-length RDMA Write (flag C).
    ZeroLengthWrite,
    /// A zero-length RDMA Read Request (flag D).
    ZeroLengthReadRequest,
}

impl RtrType {
    /// Every type, in our order of preference as Initiator.
    pub const ALL: [RtrType; 3] = [
        RtrType::ZeroLengthSend,
        RtrType::ZeroLengthWrite,
        RtrType::ZeroLengthReadRequest,
    ];

    const fn bit(self) -> u8 {
        match self {
            RtrType::ZeroLengthSend => 1,
            RtrType::ZeroLengthWrite => 2,
            RtrType::ZeroLengthReadRequest => 4,
        }
    }
}

/// A set of [`RtrType`]s: the B, C and D flags.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RtrSet {
    bits: u8,
}

impl RtrSet {
    /// No type.
    pub const EMPTY: RtrSet = RtrSet { bits: 0 };
    /// All three types.
    pub const ALL: RtrSet = RtrSet { bits: 7 };

    /// The set holding only `t`.
    pub const fn single(t: RtrType) -> Self {
        RtrSet { bits: t.bit() }
    }

    /// This set plus `t`.
    #[must_use]
    pub const fn with(self, t: RtrType) -> Self {
        RtrSet {
            bits: self.bits | t.bit(),
        }
    }

    /// This set less `t`.
    #[must_use]
    pub const fn without(self, t: RtrType) -> Self {
        RtrSet {
            bits: self.bits & !t.bit(),
        }
    }

    /// Whether `t` is in the set.
    pub const fn contains(self, t: RtrType) -> bool {
        self.bits & t.bit() != 0
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.bits == 0
    }

    /// Types in both sets.
    #[must_use]
    pub const fn intersection(self, other: RtrSet) -> Self {
        RtrSet {
            bits: self.bits & other.bits,
        }
    }

    /// The types, in preference order ([`RtrType::ALL`]), as a slice with static lifetime.
    pub fn as_slice(self) -> &'static [RtrType] {
        use RtrType::{ZeroLengthReadRequest as Rd, ZeroLengthSend as Sd, ZeroLengthWrite as Wr};
        const SUBSETS: [&[RtrType]; 8] = [
            &[],
            &[Sd],
            &[Wr],
            &[Sd, Wr],
            &[Rd],
            &[Sd, Rd],
            &[Wr, Rd],
            &[Sd, Wr, Rd],
        ];
        SUBSETS
            .get(usize::from(self.bits & 7))
            .copied()
            .unwrap_or(&[])
    }

    /// The first type in preference order.
    pub fn first(self) -> Option<RtrType> {
        self.as_slice().first().copied()
    }

    /// Iterates in preference order.
    pub fn iter(self) -> impl Iterator<Item = RtrType> {
        self.as_slice().iter().copied()
    }
}

impl FromIterator<RtrType> for RtrSet {
    fn from_iter<I: IntoIterator<Item = RtrType>>(iter: I) -> Self {
        iter.into_iter().fold(RtrSet::EMPTY, RtrSet::with)
    }
}

impl fmt::Debug for RtrSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// The enhanced connection establishment data at the start of the private data of a frame
/// with S=1 (RFC 6581 §9): `A|B|IRD(14), C|D|ORD(14)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rev2Params {
    /// A: peer-to-peer connection model (an RTR indication is used).
    pub peer_to_peer: bool,
    /// B, C, D: the RTR types requested (Request) or supported (Reply). Always empty when
    /// `peer_to_peer` is false (RFC 6581 §9.2: sent as 0 and ignored on receive).
    pub rtr: RtrSet,
    /// IRD (14 bits; 0x3FFF = no automatic negotiation).
    pub ird: u16,
    /// ORD (14 bits; 0x3FFF = no automatic negotiation).
    pub ord: u16,
}

impl Rev2Params {
    /// Decodes the four octets: the IRD word, then the ORD word.
    pub fn from_bytes(b: [u8; ENHANCED_LEN]) -> Self {
        let [i0, i1, o0, o1] = b;
        let ird_word = u16::from_be_bytes([i0, i1]);
        let ord_word = u16::from_be_bytes([o0, o1]);
        let peer_to_peer = ird_word & rev2::A != 0;
        let mut rtr = RtrSet::EMPTY;
        // RFC 6581 §9.2: with A=0, B, C and D MUST be ignored on reception.
        if peer_to_peer {
            if ird_word & rev2::B != 0 {
                rtr = rtr.with(RtrType::ZeroLengthSend);
            }
            if ord_word & rev2::C != 0 {
                rtr = rtr.with(RtrType::ZeroLengthWrite);
            }
            if ord_word & rev2::D != 0 {
                rtr = rtr.with(RtrType::ZeroLengthReadRequest);
            }
        }
        Rev2Params {
            peer_to_peer,
            rtr,
            ird: ird_word & rev2::IRD_ORD_MASK,
            ord: ord_word & rev2::IRD_ORD_MASK,
        }
    }

    /// Encodes the four octets; IRD and ORD are cut to 14 bits (see [`Rev2Params::check`]).
    pub fn to_bytes(&self) -> [u8; ENHANCED_LEN] {
        let mut ird_word = self.ird & rev2::IRD_ORD_MASK;
        let mut ord_word = self.ord & rev2::IRD_ORD_MASK;
        // RFC 6581 §9.2: with A=0, B, C and D MUST be sent as 0.
        if self.peer_to_peer {
            ird_word |= rev2::A;
            if self.rtr.contains(RtrType::ZeroLengthSend) {
                ird_word |= rev2::B;
            }
            if self.rtr.contains(RtrType::ZeroLengthWrite) {
                ord_word |= rev2::C;
            }
            if self.rtr.contains(RtrType::ZeroLengthReadRequest) {
                ord_word |= rev2::D;
            }
        }
        let [a, b] = ird_word.to_be_bytes();
        let [c, d] = ord_word.to_be_bytes();
        [a, b, c, d]
    }

    /// Checks that IRD and ORD fit their 14 bits (RFC 6581 §9).
    pub fn check(&self) -> Result<(), StartupFrameError> {
        for v in [self.ird, self.ord] {
            if v > rev2::IRD_ORD_MASK {
                return Err(StartupFrameError::IrdOrdOutOfRange(v));
            }
        }
        Ok(())
    }
}

/// Why a startup frame could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StartupFrameError {
    /// Fewer octets than the header or the announced private data need.
    #[error(transparent)]
    Truncated(#[from] Truncated),
    /// The key is neither the Request key nor the Reply key (RFC 5044 §7.1.1, §7.1.2 rule 5).
    #[error("not an MPA key: {found:02x?}")]
    UnknownKey {
        /// The 16 octets received.
        found: [u8; 16],
    },
    /// A valid key of the other kind: a Request where a Reply was expected is an
    /// Initiator/Initiator startup (RFC 5044 §7.1.2 rule 8).
    #[error("expected an MPA {expected} frame, received an MPA {found} frame")]
    UnexpectedKind {
        /// What the receiver waited for.
        expected: FrameKind,
        /// What arrived.
        found: FrameKind,
    },
    /// PD_Length above 512 (RFC 5044 §7.1.1).
    #[error("PD_Length {0} exceeds 512")]
    PdLengthTooLarge(u16),
    /// A revision this implementation cannot interpret (RFC 5044 §7.1.1 Rev).
    #[error("unsupported MPA revision {0}")]
    UnsupportedRevision(u8),
    /// S=1 with revision 2 but fewer than 4 octets of private data (RFC 6581 §6).
    #[error("enhanced frame (S=1) with PD_Length {0}, below the 4 octets of IRD/ORD")]
    EnhancedTooShort(u16),
    /// Emit: the private data does not fit in PD_Length's 512 octets.
    #[error("private data of {len} octets exceeds the {max} that fit")]
    PrivateDataTooLong {
        /// Octets given.
        len: usize,
        /// Octets that fit.
        max: usize,
    },
    /// Emit: enhanced data needs revision 2 or higher (RFC 6581 §6 Rev).
    #[error("enhanced data needs revision 2 or higher, not {0}")]
    EnhancedNeedsRev2(u8),
    /// Emit: IRD or ORD above 14 bits (RFC 6581 §9).
    #[error("IRD/ORD value {0:#x} exceeds 14 bits")]
    IrdOrdOutOfRange(u16),
    /// Emit: the output buffer is shorter than [`StartupRepr::buffer_len`].
    #[error("output buffer of {have} octets, need {need}")]
    BufferTooShort {
        /// Octets needed.
        need: usize,
        /// Octets present.
        have: usize,
    },
}

impl StartupFrameError {
    /// Who is at fault.
    pub fn fault(&self) -> Fault {
        match self {
            StartupFrameError::Truncated(_)
            | StartupFrameError::UnknownKey { .. }
            | StartupFrameError::PdLengthTooLarge(_)
            | StartupFrameError::EnhancedTooShort(_) => Fault::PeerMisbehaved,
            StartupFrameError::UnexpectedKind { .. }
            | StartupFrameError::UnsupportedRevision(_) => Fault::Incompatible,
            StartupFrameError::PrivateDataTooLong { .. }
            | StartupFrameError::EnhancedNeedsRev2(_)
            | StartupFrameError::IrdOrdOutOfRange(_)
            | StartupFrameError::BufferTooShort { .. } => Fault::LocalMisuse,
        }
    }

    /// The MPA error code: 4, invalid MPA Request or Reply frame (RFC 5044 §8).
    pub fn code(&self) -> MpaErrorCode {
        MpaErrorCode::InvalidStartupFrame
    }
}

/// A view over an MPA Request or Reply frame.
///
/// After [`StartupFrame::check_len`] succeeds the buffer holds the header and the whole
/// private data it announces, and PD_Length is at most 512. It may hold more octets after the
/// frame (FPDUs of Full Operation); [`StartupFrame::frame_len`] says where the frame ends.
#[derive(Debug, Clone, Copy)]
pub struct StartupFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> StartupFrame<T> {
    /// Wraps a buffer without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        StartupFrame { buffer }
    }

    /// Wraps a buffer after [`StartupFrame::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, StartupFrameError> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Checks the header is present, PD_Length is at most 512 and the private data is
    /// present.
    pub fn check_len(&self) -> Result<(), StartupFrameError> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(Truncated {
                what: "MPA startup frame header",
                need: HEADER_LEN,
                have,
            }
            .into());
        }
        let pd = self.pd_length();
        // RFC 5044 §7.1.1 PD_Length: above 512 the frame MUST be treated as improper.
        if usize::from(pd) > MAX_PRIVATE_DATA {
            return Err(StartupFrameError::PdLengthTooLarge(pd));
        }
        let need = self.frame_len();
        if have < need {
            return Err(Truncated {
                what: "MPA startup frame private data",
                need,
                have,
            }
            .into());
        }
        Ok(())
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn byte(&self, i: usize) -> u8 {
        self.buffer.as_ref().get(i).copied().unwrap_or(0)
    }

    /// The 16 octets of the key.
    pub fn key(&self) -> [u8; 16] {
        let mut k = [0u8; 16];
        for (i, o) in k.iter_mut().enumerate() {
            *o = self.byte(field::KEY.start + i);
        }
        k
    }

    /// Request or Reply, if the key is one of the two.
    pub fn kind(&self) -> Option<FrameKind> {
        FrameKind::from_key(&self.key())
    }

    /// The flags octet (M, C, R, S and Res).
    pub fn flags(&self) -> u8 {
        self.byte(field::FLAGS)
    }

    /// M: markers required in FPDUs toward the sender.
    pub fn m(&self) -> bool {
        self.flags() & flags::M != 0
    }

    /// C: CRC preferred by the sender.
    pub fn c(&self) -> bool {
        self.flags() & flags::C != 0
    }

    /// R: rejected (meaningful in a Reply only).
    pub fn r(&self) -> bool {
        self.flags() & flags::R != 0
    }

    /// S: enhanced connection establishment data present (RFC 6581 §6; revision 2 and up).
    pub fn s(&self) -> bool {
        self.flags() & flags::S != 0
    }

    /// Res: the four reserved bits.
    pub fn res(&self) -> u8 {
        self.flags() & flags::RES
    }

    /// Rev.
    pub fn rev(&self) -> u8 {
        self.byte(field::REV)
    }

    /// PD_Length.
    pub fn pd_length(&self) -> u16 {
        u16::from_be_bytes([
            self.byte(field::PD_LENGTH.start),
            self.byte(field::PD_LENGTH.start + 1),
        ])
    }

    /// Octets of the whole frame as announced: header plus PD_Length.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + usize::from(self.pd_length())
    }

    /// The private data (including any enhanced data); cut short when the buffer is.
    pub fn private_data(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = self.frame_len().min(b.len());
        b.get(field::PRIVATE_DATA..end).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> StartupFrame<T> {
    fn set_byte(&mut self, i: usize, v: u8) {
        if let Some(o) = self.buffer.as_mut().get_mut(i) {
            *o = v;
        }
    }

    /// Sets the key.
    pub fn set_key(&mut self, key: [u8; 16]) {
        for (i, o) in key.into_iter().enumerate() {
            self.set_byte(field::KEY.start + i, o);
        }
    }

    /// Sets the whole flags octet.
    pub fn set_flags(&mut self, v: u8) {
        self.set_byte(field::FLAGS, v);
    }

    fn set_flag(&mut self, bit: u8, on: bool) {
        let f = self.flags();
        self.set_flags(if on { f | bit } else { f & !bit });
    }

    /// Sets M.
    pub fn set_m(&mut self, on: bool) {
        self.set_flag(flags::M, on);
    }

    /// Sets C.
    pub fn set_c(&mut self, on: bool) {
        self.set_flag(flags::C, on);
    }

    /// Sets R.
    pub fn set_r(&mut self, on: bool) {
        self.set_flag(flags::R, on);
    }

    /// Sets S.
    pub fn set_s(&mut self, on: bool) {
        self.set_flag(flags::S, on);
    }

    /// Sets Res (the low four bits of `v`).
    pub fn set_res(&mut self, v: u8) {
        let f = self.flags();
        self.set_flags((f & !flags::RES) | (v & flags::RES));
    }

    /// Sets Rev.
    pub fn set_rev(&mut self, v: u8) {
        self.set_byte(field::REV, v);
    }

    /// Sets PD_Length.
    pub fn set_pd_length(&mut self, v: u16) {
        let [a, b] = v.to_be_bytes();
        self.set_byte(field::PD_LENGTH.start, a);
        self.set_byte(field::PD_LENGTH.start + 1, b);
    }

    /// The private data, writable; cut short when the buffer is.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        let end = self.frame_len();
        let b = self.buffer.as_mut();
        let end = end.min(b.len());
        b.get_mut(field::PRIVATE_DATA..end).unwrap_or(&mut [])
    }
}

/// The meaning of a startup frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartupRepr<'a> {
    /// Request or Reply.
    pub kind: FrameKind,
    /// M: the sender requires markers in the FPDUs it receives.
    pub markers: bool,
    /// C: the sender prefers CRCs (CRCs are used iff either frame has C=1).
    pub crc: bool,
    /// R: the Reply rejects the connection. Always false for a Request (R is not checked
    /// there, RFC 5044 §7.1.1) and never emitted in one.
    pub rejected: bool,
    /// Rev.
    pub rev: u8,
    /// The enhanced data (S=1, revision 2 or higher; RFC 6581 §6).
    pub enhanced: Option<Rev2Params>,
    /// The ULP private data: after the enhanced data when there is some.
    pub private_data: &'a [u8],
}

impl<'a> StartupRepr<'a> {
    /// Parses a frame of either kind.
    ///
    /// Checks the length, the key, PD_Length ≤ 512 and the revision (0, 1 and 2 are
    /// understood). R is ignored in a Request and Res is never checked (RFC 5044 §7.1.1).
    /// S is a Res bit below revision 2 and is then ignored as well.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        frame: &StartupFrame<&'a T>,
    ) -> Result<Self, StartupFrameError> {
        frame.check_len()?;
        let buf: &'a [u8] = frame.buffer.as_ref();
        let key = frame.key();
        // RFC 5044 §7.1.1 Key, §7.1.2 rule 5: receivers MUST check the key.
        let kind = FrameKind::from_key(&key).ok_or(StartupFrameError::UnknownKey { found: key })?;
        let rev = frame.rev();
        // RFC 5044 §7.1.1 Rev: receivers MUST check it; we understand 0 (RDMA Consortium,
        // Appendix C), 1 (RFC 5044) and 2 (RFC 6581).
        if rev > 2 {
            return Err(StartupFrameError::UnsupportedRevision(rev));
        }
        let pd = buf
            .get(field::PRIVATE_DATA..frame.frame_len())
            .unwrap_or(&[]);
        let (enhanced, private_data) = if rev >= 2 && frame.s() {
            // RFC 6581 §6: with S=1 the private data MUST begin with the enhanced data.
            match (pd.get(..ENHANCED_LEN), pd.get(ENHANCED_LEN..)) {
                (Some(&[a, b, c, d]), Some(rest)) => {
                    (Some(Rev2Params::from_bytes([a, b, c, d])), rest)
                }
                _ => return Err(StartupFrameError::EnhancedTooShort(frame.pd_length())),
            }
        } else {
            (None, pd)
        };
        Ok(StartupRepr {
            kind,
            markers: frame.m(),
            crc: frame.c(),
            // RFC 5044 §7.1.1 R: set to zero and not checked on reception in a Request.
            rejected: kind == FrameKind::Reply && frame.r(),
            rev,
            enhanced,
            private_data,
        })
    }

    /// Parses a frame that must be of kind `expected`: a valid key of the other kind gives
    /// [`StartupFrameError::UnexpectedKind`] (RFC 5044 §7.1.2 rule 8).
    pub fn parse_expected<T: AsRef<[u8]> + ?Sized>(
        frame: &StartupFrame<&'a T>,
        expected: FrameKind,
    ) -> Result<Self, StartupFrameError> {
        let repr = Self::parse(frame)?;
        if repr.kind != expected {
            return Err(StartupFrameError::UnexpectedKind {
                expected,
                found: repr.kind,
            });
        }
        Ok(repr)
    }

    /// PD_Length of the emitted frame.
    pub fn pd_length(&self) -> usize {
        self.private_data.len()
            + if self.enhanced.is_some() {
                ENHANCED_LEN
            } else {
                0
            }
    }

    /// Octets of the emitted frame.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.pd_length()
    }

    /// Checks the repr can be emitted: PD_Length ≤ 512, enhanced data only with revision 2 or
    /// higher, IRD and ORD within 14 bits.
    pub fn check(&self) -> Result<(), StartupFrameError> {
        if let Some(e) = &self.enhanced {
            if self.rev < 2 {
                return Err(StartupFrameError::EnhancedNeedsRev2(self.rev));
            }
            e.check()?;
        }
        let max = MAX_PRIVATE_DATA
            - if self.enhanced.is_some() {
                ENHANCED_LEN
            } else {
                0
            };
        if self.private_data.len() > max {
            return Err(StartupFrameError::PrivateDataTooLong {
                len: self.private_data.len(),
                max,
            });
        }
        Ok(())
    }

    /// Writes the frame at the start of `frame`'s buffer (Res zero, R only in a rejecting
    /// Reply, S iff enhanced) and returns its length.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        frame: &mut StartupFrame<T>,
    ) -> Result<usize, StartupFrameError> {
        self.check()?;
        let need = self.buffer_len();
        let have = frame.buffer.as_ref().len();
        if have < need {
            return Err(StartupFrameError::BufferTooShort { need, have });
        }
        frame.set_key(self.kind.key());
        let mut f = 0;
        if self.markers {
            f |= flags::M;
        }
        if self.crc {
            f |= flags::C;
        }
        // RFC 5044 §7.1.1 R: zero in a Request.
        if self.rejected && self.kind == FrameKind::Reply {
            f |= flags::R;
        }
        if self.enhanced.is_some() {
            f |= flags::S;
        }
        // RFC 5044 §7.1.1 Res: MUST be zero when sending.
        frame.set_flags(f);
        frame.set_rev(self.rev);
        // check() bounds the length by 512.
        frame.set_pd_length(u16::try_from(self.pd_length()).unwrap_or(u16::MAX));
        let pd = frame.private_data_mut();
        let ulp = match &self.enhanced {
            Some(e) => {
                if let Some(o) = pd.get_mut(..ENHANCED_LEN) {
                    o.copy_from_slice(&e.to_bytes());
                }
                pd.get_mut(ENHANCED_LEN..).unwrap_or(&mut [])
            }
            None => pd,
        };
        if let Some(o) = ulp.get_mut(..self.private_data.len()) {
            o.copy_from_slice(self.private_data);
        }
        Ok(need)
    }

    /// The frame as a new vector.
    pub fn to_bytes(&self) -> Result<Vec<u8>, StartupFrameError> {
        self.check()?;
        let mut v = vec![0u8; self.buffer_len()];
        self.emit(&mut StartupFrame::new_unchecked(&mut v[..]))?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Rev 1 Request: M=1, C=1, Res bits 0, PD "hi".
    const REQ_REV1: [u8; 22] = [
        0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6d,
        0x65, // key
        0xc0, 0x01, 0x00, 0x02, // M C, Rev 1, PD_Length 2
        b'h', b'i',
    ];

    /// Rev 2 Reply, S=1, C=1: A=1 B=1 IRD=5, C=1 D=0 ORD=0x3FFF, then PD "ok".
    const REP_REV2: [u8; 26] = [
        0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x70, 0x20, 0x46, 0x72, 0x61, 0x6d,
        0x65, // key
        0x50, 0x02, 0x00, 0x06, // C S, Rev 2, PD_Length 6
        0xc0, 0x05, 0xbf, 0xff, // A|B|IRD 5, C|ORD 0x3fff
        b'o', b'k',
    ];

    /// Rev 1 Reply rejecting with reason "no".
    const REP_REJECT: [u8; 22] = [
        0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x70, 0x20, 0x46, 0x72, 0x61, 0x6d,
        0x65, // key
        0x20, 0x01, 0x00, 0x02, // R, Rev 1, PD_Length 2
        b'n', b'o',
    ];

    fn frame_with(key: [u8; 16], flags: u8, rev: u8, pd: &[u8]) -> Vec<u8> {
        let mut v = key.to_vec();
        v.push(flags);
        v.push(rev);
        v.extend_from_slice(&u16::try_from(pd.len()).unwrap().to_be_bytes());
        v.extend_from_slice(pd);
        v
    }

    #[test]
    fn keys_are_the_rfc_octets() {
        assert_eq!(KEY_REQUEST, REQ_REV1[..16]);
        assert_eq!(KEY_REPLY, REP_REV2[..16]);
        assert_eq!(FrameKind::from_key(&KEY_REQUEST), Some(FrameKind::Request));
        assert_eq!(FrameKind::from_key(&KEY_REPLY), Some(FrameKind::Reply));
        assert_eq!(FrameKind::from_key(b"MPA ID Rex Frame"), None);
        assert_eq!(FrameKind::from_key(b"short"), None);
    }

    #[test]
    fn deconstruct_request_rev1() {
        let f = StartupFrame::new_checked(&REQ_REV1[..]).unwrap();
        assert_eq!(f.kind(), Some(FrameKind::Request));
        assert!(f.m() && f.c() && !f.r() && !f.s());
        assert_eq!(
            (f.res(), f.rev(), f.pd_length(), f.frame_len()),
            (0, 1, 2, 22)
        );
        assert_eq!(f.private_data(), b"hi");
        let r = StartupRepr::parse(&f).unwrap();
        assert_eq!(
            r,
            StartupRepr {
                kind: FrameKind::Request,
                markers: true,
                crc: true,
                rejected: false,
                rev: 1,
                enhanced: None,
                private_data: b"hi",
            }
        );
    }

    #[test]
    fn deconstruct_reply_rev2() {
        let f = StartupFrame::new_checked(&REP_REV2[..]).unwrap();
        assert!(!f.m() && f.c() && !f.r() && f.s());
        let r = StartupRepr::parse(&f).unwrap();
        assert_eq!(r.kind, FrameKind::Reply);
        assert_eq!(r.rev, 2);
        assert_eq!(
            r.enhanced,
            Some(Rev2Params {
                peer_to_peer: true,
                rtr: RtrSet::single(RtrType::ZeroLengthSend).with(RtrType::ZeroLengthWrite),
                ird: 5,
                ord: rev2::NO_NEGOTIATION,
            })
        );
        assert_eq!(r.private_data, b"ok");
        assert_eq!(r.pd_length(), 6);
    }

    #[test]
    fn deconstruct_reject() {
        let r = StartupRepr::parse(&StartupFrame::new_checked(&REP_REJECT[..]).unwrap()).unwrap();
        assert!(r.rejected);
        assert_eq!(r.private_data, b"no");
    }

    #[test]
    fn construct_with_setters() {
        let mut buf = [0xaau8; 22];
        let mut f = StartupFrame::new_unchecked(&mut buf[..]);
        f.set_key(KEY_REQUEST);
        f.set_flags(0);
        f.set_m(true);
        f.set_c(true);
        f.set_r(true);
        f.set_r(false);
        f.set_s(true);
        f.set_s(false);
        f.set_res(0xf);
        f.set_res(0);
        f.set_rev(1);
        f.set_pd_length(2);
        f.private_data_mut().copy_from_slice(b"hi");
        assert_eq!(buf, REQ_REV1);
    }

    #[test]
    fn emit_fixtures() {
        for fixture in [&REQ_REV1[..], &REP_REV2[..], &REP_REJECT[..]] {
            let r = StartupRepr::parse(&StartupFrame::new_checked(fixture).unwrap()).unwrap();
            assert_eq!(r.buffer_len(), fixture.len());
            assert_eq!(r.to_bytes().unwrap(), fixture);
            let mut buf = vec![0x55u8; fixture.len() + 3];
            assert_eq!(
                r.emit(&mut StartupFrame::new_unchecked(&mut buf[..]))
                    .unwrap(),
                fixture.len()
            );
            assert_eq!(&buf[..fixture.len()], fixture);
            assert_eq!(
                &buf[fixture.len()..],
                &[0x55; 3],
                "emit writes nothing past the frame"
            );
        }
    }

    #[test]
    fn request_rev2_fixture_with_all_rtr_flags() {
        let pd = [0xff, 0xff, 0xff, 0xff, 0xee];
        let bytes = frame_with(KEY_REQUEST, flags::S | flags::M, 2, &pd);
        let r = StartupRepr::parse(&StartupFrame::new_checked(&bytes[..]).unwrap()).unwrap();
        let e = r.enhanced.unwrap();
        assert!(e.peer_to_peer);
        assert_eq!(e.rtr, RtrSet::ALL);
        assert_eq!((e.ird, e.ord), (0x3fff, 0x3fff));
        assert_eq!(r.private_data, &[0xee]);
        assert_eq!(r.to_bytes().unwrap(), bytes);
    }

    #[test]
    fn truncated_at_every_length() {
        for fixture in [&REQ_REV1[..], &REP_REV2[..]] {
            for len in 0..fixture.len() {
                let err = StartupFrame::new_checked(&fixture[..len]).unwrap_err();
                assert!(
                    matches!(err, StartupFrameError::Truncated(_)),
                    "len {len}: {err:?}"
                );
                // Accessors on an unchecked short buffer never panic.
                let f = StartupFrame::new_unchecked(&fixture[..len]);
                let _ = (
                    f.key(),
                    f.kind(),
                    f.flags(),
                    f.rev(),
                    f.pd_length(),
                    f.frame_len(),
                );
                assert!(f.private_data().len() <= len.saturating_sub(HEADER_LEN));
                let mut short = fixture[..len].to_vec();
                let mut g = StartupFrame::new_unchecked(&mut short[..]);
                g.set_key(KEY_REPLY);
                g.set_m(true);
                g.set_res(3);
                g.set_rev(9);
                g.set_pd_length(512);
                let _ = g.private_data_mut();
            }
            assert!(StartupFrame::new_checked(fixture).is_ok());
        }
        assert_eq!(
            StartupFrame::new_checked(&REQ_REV1[..21]).unwrap_err(),
            StartupFrameError::Truncated(Truncated {
                what: "MPA startup frame private data",
                need: 22,
                have: 21
            })
        );
    }

    #[test]
    fn trailing_octets_are_not_the_frame() {
        let mut v = REQ_REV1.to_vec();
        v.extend_from_slice(&[0, 0, 0, 0, 0, 0x2a]);
        let f = StartupFrame::new_checked(&v[..]).unwrap();
        assert_eq!(f.frame_len(), 22);
        assert_eq!(f.private_data(), b"hi");
        assert_eq!(StartupRepr::parse(&f).unwrap().private_data, b"hi");
    }

    #[test]
    fn wrong_key() {
        let mut v = REQ_REV1.to_vec();
        v[3] = b'_';
        let err = StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap_err();
        assert!(matches!(err, StartupFrameError::UnknownKey { found } if found[3] == b'_'));
        assert_eq!(err.code(), MpaErrorCode::InvalidStartupFrame);
        assert_eq!(err.fault(), Fault::PeerMisbehaved);
    }

    #[test]
    fn request_where_reply_expected_is_distinguishable() {
        let f = StartupFrame::new_checked(&REQ_REV1[..]).unwrap();
        assert_eq!(
            StartupRepr::parse_expected(&f, FrameKind::Reply).unwrap_err(),
            StartupFrameError::UnexpectedKind {
                expected: FrameKind::Reply,
                found: FrameKind::Request
            }
        );
        let f = StartupFrame::new_checked(&REP_REV2[..]).unwrap();
        assert_eq!(
            StartupRepr::parse_expected(&f, FrameKind::Request).unwrap_err(),
            StartupFrameError::UnexpectedKind {
                expected: FrameKind::Request,
                found: FrameKind::Reply
            }
        );
        assert!(StartupRepr::parse_expected(&f, FrameKind::Reply).is_ok());
    }

    #[test]
    fn pd_length_limits() {
        for len in [0usize, 1, 511, 512] {
            let pd = vec![7u8; len];
            let v = frame_with(KEY_REPLY, 0, 1, &pd);
            let r = StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap();
            assert_eq!(r.private_data.len(), len);
            assert_eq!(r.to_bytes().unwrap(), v);
        }
        let v = frame_with(KEY_REPLY, 0, 1, &[7u8; 513]);
        assert_eq!(
            StartupFrame::new_checked(&v[..]).unwrap_err(),
            StartupFrameError::PdLengthTooLarge(513)
        );
        // Even with only the header present, 513 is refused at once (not "need more").
        assert_eq!(
            StartupFrame::new_checked(&v[..20]).unwrap_err(),
            StartupFrameError::PdLengthTooLarge(513)
        );
        let mut h = v[..20].to_vec();
        h[18..20].copy_from_slice(&0xffffu16.to_be_bytes());
        assert_eq!(
            StartupFrame::new_checked(&h[..]).unwrap_err(),
            StartupFrameError::PdLengthTooLarge(0xffff)
        );
    }

    #[test]
    fn r_in_request_and_res_are_ignored() {
        let v = frame_with(KEY_REQUEST, flags::R | flags::RES, 1, b"x");
        let r = StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap();
        assert!(!r.rejected && !r.markers && !r.crc);
        assert_eq!(r.private_data, b"x");
        // Emitted cleanly: no R in a Request, Res zero.
        let mut want = v.clone();
        want[16] = 0;
        assert_eq!(r.to_bytes().unwrap(), want);
        // A rejecting Request repr still emits R=0.
        let r2 = StartupRepr {
            rejected: true,
            ..r
        };
        assert_eq!(r2.to_bytes().unwrap()[16], 0);
        // Res in a Reply is ignored as well.
        let v = frame_with(KEY_REPLY, flags::RES | flags::M, 1, b"");
        let r = StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap();
        assert!(r.markers && !r.rejected && r.enhanced.is_none());
    }

    #[test]
    fn s_below_rev2_is_a_reserved_bit() {
        for rev in [0, 1] {
            let v = frame_with(KEY_REQUEST, flags::S, rev, &[0xc0, 1, 0x80, 1]);
            let r = StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap();
            assert_eq!(r.enhanced, None);
            assert_eq!(r.private_data.len(), 4);
        }
        // Rev 2 without S: plain private data.
        let v = frame_with(KEY_REQUEST, 0, 2, &[1, 2]);
        let r = StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap();
        assert_eq!((r.enhanced, r.private_data), (None, &[1u8, 2][..]));
    }

    #[test]
    fn revisions() {
        for rev in 3..=255u8 {
            let v = frame_with(KEY_REQUEST, 0, rev, b"");
            assert_eq!(
                StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap_err(),
                StartupFrameError::UnsupportedRevision(rev)
            );
        }
        let v = frame_with(KEY_REQUEST, 0xf0, 0, b"");
        assert_eq!(
            StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap())
                .unwrap()
                .rev,
            0
        );
    }

    #[test]
    fn enhanced_too_short() {
        for n in 0..4 {
            let v = frame_with(KEY_REPLY, flags::S, 2, &[0x80; 3][..n]);
            assert_eq!(
                StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap_err(),
                StartupFrameError::EnhancedTooShort(u16::try_from(n).unwrap())
            );
        }
        let v = frame_with(KEY_REPLY, flags::S, 2, &[0, 0, 0, 0]);
        let r = StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap();
        assert_eq!(r.enhanced, Some(Rev2Params::default()));
        assert!(r.private_data.is_empty());
    }

    #[test]
    fn bcd_ignored_without_a_and_zero_on_send() {
        // A=0, B=1, C=1, D=1 on receive: ignored (RFC 6581 §9.2).
        let p = Rev2Params::from_bytes([0x40, 0x03, 0xc0, 0x04]);
        assert_eq!(
            p,
            Rev2Params {
                peer_to_peer: false,
                rtr: RtrSet::EMPTY,
                ird: 3,
                ord: 4
            }
        );
        // A=0 with a non-empty set: B, C, D sent as zero.
        let p = Rev2Params {
            peer_to_peer: false,
            rtr: RtrSet::ALL,
            ird: 1,
            ord: 2,
        };
        assert_eq!(p.to_bytes(), [0, 1, 0, 2]);
        let p = Rev2Params {
            peer_to_peer: true,
            rtr: RtrSet::single(RtrType::ZeroLengthReadRequest),
            ird: 1,
            ord: 2,
        };
        assert_eq!(p.to_bytes(), [0x80, 1, 0x40, 2]);
        assert_eq!(Rev2Params::from_bytes(p.to_bytes()), p);
    }

    #[test]
    fn emit_refuses_what_does_not_fit() {
        let big = [0u8; 513];
        let r = StartupRepr {
            kind: FrameKind::Request,
            markers: false,
            crc: true,
            rejected: false,
            rev: 1,
            enhanced: None,
            private_data: &big,
        };
        assert_eq!(
            r.to_bytes().unwrap_err(),
            StartupFrameError::PrivateDataTooLong { len: 513, max: 512 }
        );
        let r = StartupRepr {
            private_data: &big[..509],
            rev: 2,
            enhanced: Some(Rev2Params::default()),
            ..r
        };
        assert_eq!(
            r.to_bytes().unwrap_err(),
            StartupFrameError::PrivateDataTooLong { len: 509, max: 508 }
        );
        let r = StartupRepr {
            private_data: &big[..508],
            ..r
        };
        assert_eq!(r.to_bytes().unwrap().len(), 532);
        let r = StartupRepr { rev: 1, ..r };
        assert_eq!(
            r.to_bytes().unwrap_err(),
            StartupFrameError::EnhancedNeedsRev2(1)
        );
        let r = StartupRepr {
            rev: 2,
            enhanced: Some(Rev2Params {
                ird: 0x4000,
                ..Default::default()
            }),
            ..r
        };
        assert_eq!(
            r.to_bytes().unwrap_err(),
            StartupFrameError::IrdOrdOutOfRange(0x4000)
        );
        assert_eq!(r.to_bytes().unwrap_err().fault(), Fault::LocalMisuse);
        let r = StartupRepr {
            enhanced: None,
            private_data: b"abc",
            ..r
        };
        let mut small = [0u8; 22];
        assert_eq!(
            r.emit(&mut StartupFrame::new_unchecked(&mut small[..]))
                .unwrap_err(),
            StartupFrameError::BufferTooShort { need: 23, have: 22 }
        );
    }

    #[test]
    fn rtr_set() {
        assert!(RtrSet::EMPTY.is_empty());
        assert_eq!(RtrSet::ALL.as_slice(), &RtrType::ALL);
        let s: RtrSet = [RtrType::ZeroLengthReadRequest, RtrType::ZeroLengthWrite]
            .into_iter()
            .collect();
        assert_eq!(
            s.as_slice(),
            &[RtrType::ZeroLengthWrite, RtrType::ZeroLengthReadRequest]
        );
        assert_eq!(s.first(), Some(RtrType::ZeroLengthWrite));
        assert_eq!(
            s.without(RtrType::ZeroLengthWrite)
                .iter()
                .collect::<Vec<_>>(),
            vec![RtrType::ZeroLengthReadRequest]
        );
        assert_eq!(
            s.intersection(RtrSet::single(RtrType::ZeroLengthSend)),
            RtrSet::EMPTY
        );
        assert_eq!(
            format!("{:?}", s),
            "{ZeroLengthWrite, ZeroLengthReadRequest}"
        );
        for bits in 0..8u8 {
            let set = RtrSet { bits };
            assert_eq!(set.iter().collect::<RtrSet>(), set);
        }
    }

    fn arb_rev2() -> impl Strategy<Value = Rev2Params> {
        (any::<bool>(), 0u8..8, 0u16..=0x3fff, 0u16..=0x3fff).prop_map(|(a, bits, ird, ord)| {
            Rev2Params {
                peer_to_peer: a,
                rtr: if a { RtrSet { bits } } else { RtrSet::EMPTY },
                ird,
                ord,
            }
        })
    }

    proptest! {
        #[test]
        fn round_trip(
            reply in any::<bool>(),
            markers in any::<bool>(),
            crc in any::<bool>(),
            rejected in any::<bool>(),
            enhanced in proptest::option::of(arb_rev2()),
            rev_low in 0u8..3,
            pd in proptest::collection::vec(any::<u8>(), 0..=508),
        ) {
            let kind = if reply { FrameKind::Reply } else { FrameKind::Request };
            let rev = if enhanced.is_some() { 2 } else { rev_low };
            let r = StartupRepr {
                kind, markers, crc, rejected: rejected && reply, rev, enhanced, private_data: &pd,
            };
            let bytes = r.to_bytes().unwrap();
            prop_assert_eq!(bytes.len(), r.buffer_len());
            let f = StartupFrame::new_checked(&bytes[..]).unwrap();
            prop_assert_eq!(StartupRepr::parse(&f).unwrap(), r);
        }

        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            let f = StartupFrame::new_unchecked(&data[..]);
            let _ = (f.key(), f.flags(), f.rev(), f.pd_length(), f.private_data());
            if let Ok(r) = StartupRepr::parse(&f) {
                // What parses re-emits to a frame that parses the same.
                let again = r.to_bytes().unwrap();
                prop_assert_eq!(StartupRepr::parse(&StartupFrame::new_checked(&again[..]).unwrap()).unwrap(), r);
            }
        }
    }
}
