//! The MPA Request and Reply frames of the startup phase (RFC 5044 §7.1.1; RFC 6581 §6, §9):
//!
//! ```text
//! Key (16) | M C R S Res(4) | Rev | PD_Length (u16 BE) | Private Data (PD_Length ≤ 512)
//! ```
//!
//! With revision 2 and S=1 the private data begins with the enhanced connection establishment
//! data, counted in PD_Length: `A|B|IRD(14)` and `C|D|ORD(14)`, both big-endian.
//!
//! [`StartupFrame`] (here) is the raw view; [`StartupRepr`] (`repr`) gives the fields their
//! meaning, so the state machines in [`crate::startup`] never touch raw octets; [`Rev2Params`]
//! (`enhanced`) is the enhanced data. The RTR types it carries are negotiation vocabulary and
//! live in [`crate::rtr`].
//!
//! Unlike most views, every accessor of [`StartupFrame`] is total: on a buffer that failed
//! [`StartupFrame::check_len`] missing fields read as zero and setters of missing fields do
//! nothing, so no input and no call order can make them panic.

#![forbid(unsafe_code)]

use super::Truncated;
use std::fmt;

mod enhanced;
mod error;
mod repr;
#[cfg(test)]
mod tests;

pub use enhanced::Rev2Params;
pub use error::StartupFrameError;
pub use repr::StartupRepr;

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
