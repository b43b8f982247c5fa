//! IPv4 (RFC 791): the packet view and the header the data path accepts.

use super::{
    u16_at, IpError, DEFAULT_HOP_LIMIT, IPV4_DF, IPV4_FRAG_OFFSET_MASK, IPV4_HEADER_LEN, IPV4_MF,
};
use crate::wire::checksum;
use std::net::Ipv4Addr;
use std::ops::Range;

mod field4 {
    use std::ops::Range;
    pub(crate) const VER_IHL: usize = 0;
    pub(crate) const DSCP_ECN: usize = 1;
    pub(crate) const LENGTH: Range<usize> = 2..4;
    pub(crate) const IDENT: Range<usize> = 4..6;
    pub(crate) const FLG_OFF: Range<usize> = 6..8;
    pub(crate) const TTL: usize = 8;
    pub(crate) const PROTOCOL: usize = 9;
    pub(crate) const CHECKSUM: Range<usize> = 10..12;
    pub(crate) const SRC: Range<usize> = 12..16;
    pub(crate) const DST: Range<usize> = 16..20;
}

/// A view over an IPv4 packet.
///
/// Contract: after [`Ipv4Packet::check_len`] succeeds, no accessor panics.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checking it.
    pub(crate) fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wraps a buffer after [`Ipv4Packet::check_len`].
    #[cfg(test)]
    pub(crate) fn new_checked(buffer: T) -> Result<Self, IpError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the version (4), that IHL is at least 5 words and inside the buffer, and that
    /// the total length covers the header and lies inside the buffer (which may be longer:
    /// Ethernet padding).
    #[cfg(test)]
    pub(crate) fn check_len(&self) -> Result<(), IpError> {
        self.check_len_in(self.buffer.as_ref().len())
    }

    /// [`Ipv4Packet::check_len`] for a packet of which the buffer holds the first part (at
    /// least the header) and the frame `in_frame` octets from the header on (a frame in
    /// several receive descriptors): the total length is checked against `in_frame`.
    pub(crate) fn check_len_in(&self, in_frame: usize) -> Result<(), IpError> {
        let have = self.buffer.as_ref().len();
        if have < IPV4_HEADER_LEN {
            return Err(IpError::Truncated {
                need: IPV4_HEADER_LEN,
                have,
            });
        }
        if self.version() != 4 {
            return Err(IpError::BadVersion(self.version()));
        }
        // RFC 791 §3.1: the minimum value for a correct header is 5.
        let ihl = self.buffer.as_ref()[field4::VER_IHL] & 0x0f;
        if ihl < 5 {
            return Err(IpError::BadHeaderLen(ihl));
        }
        let header_len = self.header_len();
        if have < header_len {
            return Err(IpError::Truncated {
                need: header_len,
                have,
            });
        }
        let total_len = self.total_len();
        if total_len < header_len {
            return Err(IpError::BadTotalLen {
                total_len,
                header_len,
            });
        }
        let have = have.max(in_frame);
        if have < total_len {
            return Err(IpError::Truncated {
                need: total_len,
                have,
            });
        }
        Ok(())
    }

    /// Version field.
    pub(crate) fn version(&self) -> u8 {
        self.buffer.as_ref()[field4::VER_IHL] >> 4
    }
    /// Header length in octets (IHL × 4).
    pub(crate) fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field4::VER_IHL] & 0x0f) * 4
    }
    /// Total length: header and payload.
    pub(crate) fn total_len(&self) -> usize {
        usize::from(u16_at(self.buffer.as_ref(), field4::LENGTH))
    }
    /// Identification.
    #[cfg(test)]
    pub(crate) fn ident(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field4::IDENT)
    }
    fn flags_offset(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field4::FLG_OFF)
    }
    /// DF set.
    #[cfg(test)]
    pub(crate) fn dont_frag(&self) -> bool {
        self.flags_offset() & IPV4_DF != 0
    }
    /// MF set.
    pub(crate) fn more_frags(&self) -> bool {
        self.flags_offset() & IPV4_MF != 0
    }
    /// Fragment offset in octets.
    pub(crate) fn frag_offset(&self) -> usize {
        usize::from(self.flags_offset() & IPV4_FRAG_OFFSET_MASK) * 8
    }
    /// Whether the packet is a fragment: MF set or a non-zero offset.
    pub(crate) fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }
    /// Time to live.
    pub(crate) fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field4::TTL]
    }
    /// Protocol of the payload.
    pub(crate) fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field4::PROTOCOL]
    }
    /// Header checksum field.
    #[cfg(test)]
    pub(crate) fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field4::CHECKSUM)
    }
    /// Source address.
    pub(crate) fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field4::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    /// Destination address.
    pub(crate) fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field4::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    /// Whether the header checksum is right (RFC 791 §3.1: the one's complement sum over
    /// the header, options included, is all ones).
    pub(crate) fn verify_checksum(&self) -> bool {
        let h = &self.buffer.as_ref()[..self.header_len()];
        checksum::fold(checksum::sum_header(0, h)) == 0xffff
    }
    /// The header checksum the packet should carry (the present field is left out).
    pub(crate) fn compute_checksum(&self) -> u16 {
        let h = &self.buffer.as_ref()[..self.header_len()];
        let acc = checksum::sum(0, &h[..field4::CHECKSUM.start]);
        !checksum::fold(checksum::sum(acc, &h[field4::CHECKSUM.end..]))
    }
    /// The options (between the fixed header and the payload).
    #[cfg(test)]
    pub(crate) fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[IPV4_HEADER_LEN..self.header_len()]
    }
    /// The payload: from the end of the header to the total length (padding excluded).
    #[cfg(test)]
    pub(crate) fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn set_u16(&mut self, r: Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes())
    }
    /// Sets version 4 and the header length in octets (rounded down to words, at most 60).
    fn set_version_and_header_len(&mut self, len: usize) {
        let words = (len.min(60) / 4) as u8;
        self.buffer.as_mut()[field4::VER_IHL] = 0x40 | words;
    }
    /// Sets the DSCP and ECN octet.
    fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[field4::DSCP_ECN] = v
    }
    /// Sets the total length.
    pub(crate) fn set_total_len(&mut self, v: u16) {
        self.set_u16(field4::LENGTH, v)
    }
    /// Sets the identification.
    fn set_ident(&mut self, v: u16) {
        self.set_u16(field4::IDENT, v)
    }
    /// Sets the flags/fragment-offset word ([`IPV4_DF`], [`IPV4_MF`], offset in 8-octet
    /// units).
    fn set_flags_offset(&mut self, v: u16) {
        self.set_u16(field4::FLG_OFF, v)
    }
    /// Sets the time to live.
    pub(crate) fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field4::TTL] = v
    }
    /// Sets the protocol.
    fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field4::PROTOCOL] = v
    }
    /// Sets the header checksum field.
    pub(crate) fn set_checksum(&mut self, v: u16) {
        self.set_u16(field4::CHECKSUM, v)
    }
    /// Sets the source address.
    pub(crate) fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field4::SRC].copy_from_slice(&a.octets())
    }
    /// Sets the destination address.
    pub(crate) fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field4::DST].copy_from_slice(&a.octets())
    }
    /// Computes and writes the header checksum.
    pub(crate) fn fill_checksum(&mut self) {
        let c = self.compute_checksum();
        self.set_checksum(c)
    }
}

/// The meaning of an IPv4 header the data path accepts: no fragment, options ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ipv4Repr {
    /// Source address.
    pub(crate) src_addr: Ipv4Addr,
    /// Destination address.
    pub(crate) dst_addr: Ipv4Addr,
    /// Protocol of the payload.
    pub(crate) protocol: u8,
    /// Payload octets (total length − header length).
    pub(crate) payload_len: usize,
    /// Time to live.
    pub(crate) hop_limit: u8,
}

impl Ipv4Repr {
    /// A TCP header as the data path sends it: TTL 64.
    pub(crate) fn tcp(src_addr: Ipv4Addr, dst_addr: Ipv4Addr, payload_len: usize) -> Ipv4Repr {
        Ipv4Repr {
            src_addr,
            dst_addr,
            protocol: checksum::PROTO_TCP,
            payload_len,
            hop_limit: DEFAULT_HOP_LIMIT,
        }
    }

    /// [`Ipv4Repr::parse_in`] of a packet the buffer holds whole.
    #[cfg(test)]
    pub(crate) fn parse<T: AsRef<[u8]>>(
        packet: &Ipv4Packet<T>,
        verify_checksum: bool,
    ) -> Result<Ipv4Repr, IpError> {
        Self::parse_in(packet, 0, verify_checksum)
    }

    /// Parses a packet: checks its lengths (as [`Ipv4Packet::check_len_in`] with
    /// `in_frame`), then (when `verify_checksum`) its header checksum, then rejects fragments.
    // Forced inline: once per received frame, and a call returned the repr through memory
    // (a failed store forward, see `parse_tcp_frame`).
    #[inline(always)]
    pub(crate) fn parse_in<T: AsRef<[u8]>>(
        packet: &Ipv4Packet<T>,
        in_frame: usize,
        verify_checksum: bool,
    ) -> Result<Ipv4Repr, IpError> {
        packet.check_len_in(in_frame)?;
        // RFC 1122 §3.2.1.2: a host MUST verify the header checksum and silently discard a
        // datagram with a bad one.
        if verify_checksum && !packet.verify_checksum() {
            return Err(IpError::BadChecksum);
        }
        if packet.is_fragment() {
            return Err(IpError::Fragment {
                more_fragments: packet.more_frags(),
                offset: packet.frag_offset(),
            });
        }
        Ok(Ipv4Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: packet.total_len() - packet.header_len(),
            hop_limit: packet.hop_limit(),
        })
    }

    /// Writes a 20-octet header at the start of `buf`: DSCP/ECN 0, identification 0, DF set
    /// (RFC 6864 §4.1: an atomic datagram's ID may be anything), checksum filled. Returns the
    /// header length; the payload goes after it.
    pub(crate) fn emit(&self, buf: &mut [u8]) -> Result<usize, IpError> {
        let total = IPV4_HEADER_LEN + self.payload_len;
        let total = u16::try_from(total).map_err(|_| IpError::PayloadTooLong(self.payload_len))?;
        let have = buf.len();
        let Some(h) = buf.get_mut(..IPV4_HEADER_LEN) else {
            return Err(IpError::Truncated {
                need: IPV4_HEADER_LEN,
                have,
            });
        };
        let mut p = Ipv4Packet::new_unchecked(h);
        p.set_version_and_header_len(IPV4_HEADER_LEN);
        p.set_dscp_ecn(0);
        p.set_total_len(total);
        p.set_ident(0);
        p.set_flags_offset(IPV4_DF);
        p.set_hop_limit(self.hop_limit);
        p.set_protocol(self.protocol);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        p.fill_checksum();
        Ok(IPV4_HEADER_LEN)
    }
}
