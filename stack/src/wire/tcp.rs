//! The TCP header (RFC 9293 §3.1) with the options an established connection meets:
//! MSS, window scale and timestamps (RFC 7323), SACK-permitted and SACK (RFC 2018).
//!
//! [`TcpPacket`] views a whole segment (header and payload): the buffer's length is the
//! segment's length, so the caller slices the IP payload by the IP header's length first.
//! [`TcpRepr`] is the parsed meaning, `Copy` and free of borrows; the payload stays in the
//! caller's buffer.

#![forbid(unsafe_code)]

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use mpa::seq::SeqNumber;

use super::checksum;

mod options;
pub(crate) use options::SackBlock;
pub use options::{SackBlocks, TcpOptions, TcpTimestamps};

mod field {
    use std::ops::Range;
    pub(crate) const SRC_PORT: Range<usize> = 0..2;
    pub(crate) const DST_PORT: Range<usize> = 2..4;
    pub(crate) const SEQ_NUM: Range<usize> = 4..8;
    pub(crate) const ACK_NUM: Range<usize> = 8..12;
    pub(crate) const FLAGS: Range<usize> = 12..14;
    pub(crate) const WIN_SIZE: Range<usize> = 14..16;
    pub(crate) const CHECKSUM: Range<usize> = 16..18;
    pub(crate) const URGENT: Range<usize> = 18..20;
    pub(crate) const OPTIONS: usize = 20;
}

/// Option kinds (IANA "TCP Option Kind Numbers").
mod kind {
    pub(crate) const EOL: u8 = 0;
    pub(crate) const NOP: u8 = 1;
    pub(crate) const MSS: u8 = 2;
    pub(crate) const WINDOW_SCALE: u8 = 3;
    pub(crate) const SACK_PERMITTED: u8 = 4;
    pub(crate) const SACK: u8 = 5;
    pub(crate) const TIMESTAMPS: u8 = 8;
}

/// Octets of a TCP header without options.
pub const HEADER_LEN: usize = 20;
/// The largest TCP header: data offset 15 words.
pub(crate) const MAX_HEADER_LEN: usize = 60;
/// The most option octets a header can carry.
const MAX_OPTIONS_LEN: usize = MAX_HEADER_LEN - HEADER_LEN;
/// The most SACK blocks one option can carry: (40 - 2) / 8.
pub(crate) const MAX_SACK_BLOCKS: usize = 4;
/// Octets [`TcpRepr::emit`] uses for the timestamps option (NOP, NOP, kind 8, len 10).
pub const TIMESTAMPS_OPTION_LEN: usize = 12;

/// What is wrong with a TCP header, or why one could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TcpWireError {
    /// The buffer is shorter than the fixed header or than the header its data offset announces.
    #[error("truncated TCP header: need {need} octets, have {have}")]
    Truncated {
        /// Octets needed.
        need: usize,
        /// Octets present.
        have: usize,
    },
    /// Data offset below 5 words (RFC 9293 §3.1).
    #[error("TCP data offset {0} is below the minimum of 5 words")]
    BadDataOffset(u8),
    /// An option's kind octet is the last of the option space, or its length runs past it.
    #[error("TCP option kind {kind} at option offset {offset} runs past the header")]
    OptionTruncated {
        /// The option kind.
        kind: u8,
        /// Its offset inside the option space.
        offset: usize,
    },
    /// An option length below 2, or one a known option cannot have.
    #[error("TCP option kind {kind} has invalid length {len}")]
    OptionBadLength {
        /// The option kind.
        kind: u8,
        /// The length octet.
        len: u8,
    },
    /// The options of a [`TcpRepr`] do not fit in 40 octets.
    #[error("TCP options need {need} octets, at most 40 fit")]
    OptionsTooLong {
        /// Octets the options need.
        need: usize,
    },
}

/// TCP control bits. [`TcpRepr`] keeps ACK in [`TcpRepr::ack_number`] instead, so its flags
/// never contain `TcpFlags::ACK`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u16);

impl TcpFlags {
    /// No more data from sender.
    pub(crate) const FIN: TcpFlags = TcpFlags(0x001);
    /// Synchronize sequence numbers.
    pub(crate) const SYN: TcpFlags = TcpFlags(0x002);
    /// Reset the connection.
    pub(crate) const RST: TcpFlags = TcpFlags(0x004);
    /// Push function.
    pub const PSH: TcpFlags = TcpFlags(0x008);
    /// Acknowledgment field is significant.
    pub(crate) const ACK: TcpFlags = TcpFlags(0x010);
    /// Urgent pointer field is significant.
    const URG: TcpFlags = TcpFlags(0x020);
    /// ECN echo (RFC 3168).
    const ECE: TcpFlags = TcpFlags(0x040);
    /// Congestion window reduced (RFC 3168).
    const CWR: TcpFlags = TcpFlags(0x080);
    /// ECN nonce, historic (RFC 3540).
    const NS: TcpFlags = TcpFlags(0x100);
    const ALL: u16 = 0x1ff;

    /// No flag set.
    pub(crate) const fn empty() -> TcpFlags {
        TcpFlags(0)
    }
    /// Whether every flag of `other` is set.
    pub(crate) const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }
    /// `self` with the flags of `other` added.
    #[must_use]
    pub(crate) const fn with(self, other: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | other.0)
    }
    /// `self` with the flags of `other` removed.
    #[must_use]
    pub(crate) const fn without(self, other: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 & !other.0)
    }
    /// FIN set.
    pub(crate) const fn fin(self) -> bool {
        self.contains(Self::FIN)
    }
    /// SYN set.
    pub(crate) const fn syn(self) -> bool {
        self.contains(Self::SYN)
    }
    /// RST set.
    pub(crate) const fn rst(self) -> bool {
        self.contains(Self::RST)
    }
    /// PSH set.
    #[cfg(test)]
    pub(crate) const fn psh(self) -> bool {
        self.contains(Self::PSH)
    }
}

impl std::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        self.with(rhs)
    }
}

impl fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(TcpFlags, &str); 9] = [
            (TcpFlags::FIN, "FIN"),
            (TcpFlags::SYN, "SYN"),
            (TcpFlags::RST, "RST"),
            (TcpFlags::PSH, "PSH"),
            (TcpFlags::ACK, "ACK"),
            (TcpFlags::URG, "URG"),
            (TcpFlags::ECE, "ECE"),
            (TcpFlags::CWR, "CWR"),
            (TcpFlags::NS, "NS"),
        ];
        let mut first = true;
        for (flag, name) in NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("-")?;
        }
        Ok(())
    }
}

/// A view over a TCP segment: header, options and payload.
///
/// Contract: after `TcpPacket::check_len` succeeds, no accessor panics.
#[derive(Debug, Clone, Copy)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wraps a buffer without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    /// Wraps a buffer after `TcpPacket::check_len`.
    pub fn new_checked(buffer: T) -> Result<Self, TcpWireError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds the fixed header, that the data offset is at least 5
    /// words, and that the header it announces lies inside the buffer.
    pub(crate) fn check_len(&self) -> Result<(), TcpWireError> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(TcpWireError::Truncated {
                need: HEADER_LEN,
                have,
            });
        }
        let words = self.data_offset();
        // RFC 9293 §3.1: the header is at least 5 32-bit words.
        if words < 5 {
            return Err(TcpWireError::BadDataOffset(words));
        }
        let need = usize::from(words) * 4;
        if have < need {
            return Err(TcpWireError::Truncated { need, have });
        }
        Ok(())
    }

    /// Consumes the view, giving back the buffer.
    #[cfg(test)]
    pub(crate) fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, r: std::ops::Range<usize>) -> u16 {
        let b = &self.buffer.as_ref()[r];
        u16::from_be_bytes([b[0], b[1]])
    }

    fn u32_at(&self, r: std::ops::Range<usize>) -> u32 {
        let b = &self.buffer.as_ref()[r];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Source port.
    pub(crate) fn src_port(&self) -> u16 {
        self.u16_at(field::SRC_PORT)
    }
    /// Destination port.
    pub(crate) fn dst_port(&self) -> u16 {
        self.u16_at(field::DST_PORT)
    }
    /// Sequence number.
    pub fn seq_number(&self) -> SeqNumber {
        SeqNumber(self.u32_at(field::SEQ_NUM))
    }
    /// Acknowledgment number (meaningful when ACK is set).
    pub fn ack_number(&self) -> SeqNumber {
        SeqNumber(self.u32_at(field::ACK_NUM))
    }
    /// Data offset in 32-bit words.
    fn data_offset(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS.start] >> 4
    }
    /// Header length in octets (data offset × 4).
    pub(crate) fn header_len(&self) -> usize {
        usize::from(self.data_offset()) * 4
    }
    /// All nine control bits, ACK included.
    pub(crate) fn flags(&self) -> TcpFlags {
        TcpFlags(self.u16_at(field::FLAGS) & TcpFlags::ALL)
    }
    /// FIN set.
    #[cfg(test)]
    pub(crate) fn fin(&self) -> bool {
        self.flags().fin()
    }
    /// SYN set.
    #[cfg(test)]
    pub(crate) fn syn(&self) -> bool {
        self.flags().syn()
    }
    /// RST set.
    #[cfg(test)]
    pub(crate) fn rst(&self) -> bool {
        self.flags().rst()
    }
    /// PSH set.
    #[cfg(test)]
    pub(crate) fn psh(&self) -> bool {
        self.flags().psh()
    }
    /// ACK set.
    #[cfg(test)]
    pub(crate) fn ack(&self) -> bool {
        self.flags().contains(TcpFlags::ACK)
    }
    /// Window field, unscaled.
    pub fn window_len(&self) -> u16 {
        self.u16_at(field::WIN_SIZE)
    }
    /// Checksum field.
    #[cfg(test)]
    pub(crate) fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }
    /// Urgent pointer.
    pub(crate) fn urgent_at(&self) -> u16 {
        self.u16_at(field::URGENT)
    }
    /// The option octets (between the fixed header and the payload).
    pub(crate) fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..self.header_len()]
    }
    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
    /// Sequence space the segment occupies: payload octets plus one for SYN and one for FIN.
    #[cfg(test)]
    pub(crate) fn segment_len(&self) -> usize {
        let f = self.flags();
        self.payload().len() + usize::from(f.syn()) + usize::from(f.fin())
    }

    /// Whether the checksum is right for an IPv4 pseudo-header.
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let b = self.buffer.as_ref();
        let acc = checksum::pseudo_header_v4(src, dst, b.len() as u32);
        checksum::fold(checksum::sum(acc, b)) == 0xffff
    }

    /// Whether the checksum is right for an IPv6 pseudo-header.
    #[cfg(test)]
    pub(crate) fn verify_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        let acc = checksum::pseudo_header_v6(src, dst, b.len() as u32);
        checksum::fold(checksum::sum(acc, b)) == 0xffff
    }

    /// The checksum the segment should carry with an IPv4 pseudo-header (the present
    /// checksum field is left out of the sum).
    pub(crate) fn compute_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> u16 {
        let b = self.buffer.as_ref();
        let acc = checksum::pseudo_header_v4(src, dst, b.len() as u32);
        Self::finish(acc, b)
    }

    /// The checksum the segment should carry with an IPv6 pseudo-header.
    pub(crate) fn compute_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> u16 {
        let b = self.buffer.as_ref();
        let acc = checksum::pseudo_header_v6(src, dst, b.len() as u32);
        Self::finish(acc, b)
    }

    fn finish(acc: u64, b: &[u8]) -> u16 {
        let acc = checksum::sum(acc, &b[..field::CHECKSUM.start]);
        let acc = checksum::sum(acc, &b[field::CHECKSUM.end..]);
        !checksum::fold(acc)
    }
}

impl<'a> TcpPacket<&'a [u8]> {
    /// The payload, borrowed from the underlying buffer rather than from the view (it outlives
    /// the view: a worker keeps the payloads of a burst's frames together).
    pub fn payload_in_buffer(&self) -> &'a [u8] {
        let buffer: &'a [u8] = self.buffer;
        &buffer[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    fn set_u16(&mut self, r: std::ops::Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }
    fn set_u32(&mut self, r: std::ops::Range<usize>, v: u32) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the source port.
    fn set_src_port(&mut self, v: u16) {
        self.set_u16(field::SRC_PORT, v)
    }
    /// Sets the destination port.
    fn set_dst_port(&mut self, v: u16) {
        self.set_u16(field::DST_PORT, v)
    }
    /// Sets the sequence number.
    fn set_seq_number(&mut self, v: SeqNumber) {
        self.set_u32(field::SEQ_NUM, v.0)
    }
    /// Sets the acknowledgment number.
    fn set_ack_number(&mut self, v: SeqNumber) {
        self.set_u32(field::ACK_NUM, v.0)
    }
    /// Sets the header length in octets; rounded down to whole words, at most 60.
    fn set_header_len(&mut self, len: usize) {
        let words = (len.min(MAX_HEADER_LEN) / 4) as u8;
        let b = &mut self.buffer.as_mut()[field::FLAGS.start];
        *b = (*b & 0x0f) | (words << 4);
    }
    /// Sets all control bits (the reserved bits are cleared).
    fn set_flags(&mut self, flags: TcpFlags) {
        let off = u16::from(self.data_offset()) << 12;
        self.set_u16(field::FLAGS, off | (flags.0 & TcpFlags::ALL));
    }
    /// Sets the window field.
    fn set_window_len(&mut self, v: u16) {
        self.set_u16(field::WIN_SIZE, v)
    }
    /// Sets the checksum field.
    pub(crate) fn set_checksum(&mut self, v: u16) {
        self.set_u16(field::CHECKSUM, v)
    }
    /// Sets the urgent pointer.
    fn set_urgent_at(&mut self, v: u16) {
        self.set_u16(field::URGENT, v)
    }
    /// The payload, writable.
    #[cfg(test)]
    pub(crate) fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
    /// Computes and writes the checksum for an IPv4 pseudo-header.
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        let c = self.compute_checksum_v4(src, dst);
        self.set_checksum(c)
    }
    /// Computes and writes the checksum for an IPv6 pseudo-header.
    pub(crate) fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        let c = self.compute_checksum_v6(src, dst);
        self.set_checksum(c)
    }
}

/// The meaning of a TCP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: SeqNumber,
    /// Acknowledgment number: `Some` exactly when ACK is set.
    pub ack_number: Option<SeqNumber>,
    /// Control bits other than ACK.
    pub flags: TcpFlags,
    /// Window field, unscaled.
    pub window_len: u16,
    /// Urgent pointer (kept, not acted upon).
    pub urgent_at: u16,
    /// Options.
    pub options: TcpOptions,
}

impl TcpRepr {
    /// Parses a checked packet's header and options. The checksum is not looked at (it needs
    /// the IP addresses: see [`TcpPacket::verify_checksum_v4`]).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &TcpPacket<T>) -> Result<TcpRepr, TcpWireError> {
        let mut r = TcpRepr::default();
        r.parse_into(packet)?;
        Ok(r)
    }

    /// [`TcpRepr::parse`] into `self` (meaningless after an error), for the receive path: a
    /// repr returned by value was copied out of the `Result` with wide loads over the narrow
    /// stores that built it, a failed store forward per frame that waits for every earlier
    /// store, the previous segment's region copy included (~9 % of the worker's samples).
    #[inline(always)]
    pub fn parse_into<T: AsRef<[u8]>>(
        &mut self,
        packet: &TcpPacket<T>,
    ) -> Result<(), TcpWireError> {
        packet.check_len()?;
        let flags = packet.flags();
        self.src_port = packet.src_port();
        self.dst_port = packet.dst_port();
        self.seq_number = packet.seq_number();
        self.ack_number = flags.contains(TcpFlags::ACK).then(|| packet.ack_number());
        self.flags = flags.without(TcpFlags::ACK);
        self.window_len = packet.window_len();
        self.urgent_at = packet.urgent_at();
        TcpOptions::parse_into(&mut self.options, packet.options())
    }

    /// Whether a segment with this header and `len` octets of text may be taken together with
    /// the ones that continue it ([`TcpRepr::continued_by`]; docs/architecture.md, "Runs of
    /// segments"): it carries text and an ACK, no control bit but PSH (which the receive path
    /// does not act on) and no option but timestamps.
    pub fn takes_followers(&self, len: usize) -> bool {
        let o = &self.options;
        len > 0
            && self.ack_number.is_some()
            && self.flags.without(TcpFlags::PSH) == TcpFlags::empty()
            && o.mss.is_none()
            && o.window_scale.is_none()
            && !o.sack_permitted
            && o.sack.is_empty()
    }

    /// Whether `next`, with `len` octets of text, continues a segment with this header whose
    /// text ends at `end`: it starts there, carries text, and its header is this one's but
    /// for the sequence number and PSH — the same ports, ACK, window and options (GRO's rule).
    #[inline]
    pub fn continued_by(&self, end: SeqNumber, next: &TcpRepr, len: usize) -> bool {
        len > 0
            && next.seq_number == end
            && next.ack_number == self.ack_number
            && next.window_len == self.window_len
            && next.flags.without(TcpFlags::PSH) == self.flags.without(TcpFlags::PSH)
            && next.src_port == self.src_port
            && next.dst_port == self.dst_port
            && next.urgent_at == self.urgent_at
            && next.options == self.options
    }

    /// Octets of the header [`TcpRepr::emit`] writes.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.options.emitted_len()
    }

    /// Sequence space of a segment with this header and `payload_len` octets.
    pub(crate) fn segment_len(&self, payload_len: usize) -> usize {
        payload_len + usize::from(self.flags.syn()) + usize::from(self.flags.fin())
    }

    /// Writes the header (options padded to 4 octets) at the start of the packet's buffer,
    /// with a zero checksum; returns the header length. The payload, if any, goes after it;
    /// fill the checksum last.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut TcpPacket<T>,
    ) -> Result<usize, TcpWireError> {
        let opt_len = self.options.emitted_len();
        if opt_len > MAX_OPTIONS_LEN {
            return Err(TcpWireError::OptionsTooLong { need: opt_len });
        }
        let len = HEADER_LEN + opt_len;
        let have = packet.buffer.as_ref().len();
        if have < len {
            return Err(TcpWireError::Truncated { need: len, have });
        }
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_seq_number(self.seq_number);
        packet.set_ack_number(self.ack_number.unwrap_or_default());
        packet.set_header_len(len);
        let mut flags = self.flags.without(TcpFlags::ACK);
        if self.ack_number.is_some() {
            flags = flags.with(TcpFlags::ACK);
        }
        packet.set_flags(flags);
        packet.set_window_len(self.window_len);
        packet.set_checksum(0);
        packet.set_urgent_at(self.urgent_at);
        self.options
            .emit(&mut packet.buffer.as_mut()[field::OPTIONS..len]);
        Ok(len)
    }
}

/// Fuzz entry point: parses arbitrary octets as a TCP segment and, when they parse, checks
/// that emitting the result parses back to the same meaning. Never panics on any input.
#[cfg(test)]
pub(crate) fn fuzz_parse(data: &[u8]) {
    let Ok(p) = TcpPacket::new_checked(data) else {
        return;
    };
    let _ = p.payload();
    let _ = p.compute_checksum_v4(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST);
    if let Ok(repr) = TcpRepr::parse(&p) {
        let mut buf = [0u8; MAX_HEADER_LEN];
        if let Ok(n) = repr.emit(&mut TcpPacket::new_unchecked(&mut buf[..])) {
            let back = TcpRepr::parse(&TcpPacket::new_unchecked(&buf[..n]));
            debug_assert_eq!(back.ok().map(|r| r.options), Some(repr.options));
        }
    }
}

#[cfg(test)]
mod tests;
