//! IPv4 (RFC 791) and IPv6 (RFC 8200) headers, as far as a TCP data path needs them.
//!
//! [`Ipv4Packet`] and [`Ipv6Packet`] view a whole packet. Their buffer may be longer than the
//! packet (Ethernet pads short frames to 60 octets): [`Ipv4Packet::payload`] and
//! [`Ipv6Packet::payload`] end where the header's length says, never at the buffer's end.
//!
//! The data path handles neither fragments nor IPv6 extension headers: [`Ipv4Repr::parse`]
//! and [`Ipv6Repr::parse`] turn them into typed errors the caller counts and drops.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::Range;

use super::checksum;

mod field4 {
    use std::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLG_OFF: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC: Range<usize> = 12..16;
    pub const DST: Range<usize> = 16..20;
}

mod field6 {
    use std::ops::Range;
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Range<usize> = 8..24;
    pub const DST: Range<usize> = 24..40;
}

/// IPv4 flag: don't fragment (RFC 791 §3.1), in the flags/fragment-offset word.
pub const IPV4_DF: u16 = 0x4000;
/// IPv4 flag: more fragments.
pub const IPV4_MF: u16 = 0x2000;
/// Mask of the fragment offset (in 8-octet units) in the flags/fragment-offset word.
pub const IPV4_FRAG_OFFSET_MASK: u16 = 0x1fff;

/// Octets of an IPv4 header without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// Octets of the fixed IPv6 header.
pub const IPV6_HEADER_LEN: usize = 40;
/// TTL / hop limit the emit helpers use (Linux's default).
pub const DEFAULT_HOP_LIMIT: u8 = 64;

/// IPv6 next-header values that are extension headers (RFC 8200 §4; IANA "IPv6 Extension
/// Header Types"), ESP and AH included.
pub const IPV6_EXTENSION_HEADERS: [u8; 11] = [0, 43, 44, 50, 51, 60, 135, 139, 140, 253, 254];

/// Whether an IPv6 next-header value is an extension header.
pub fn is_ipv6_extension_header(next_header: u8) -> bool {
    IPV6_EXTENSION_HEADERS.contains(&next_header)
}

/// What is wrong with an IP header, or why one could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IpError {
    /// The buffer is shorter than the header, or than the packet its length field announces.
    #[error("truncated IP packet: need {need} octets, have {have}")]
    Truncated {
        /// Octets needed.
        need: usize,
        /// Octets present.
        have: usize,
    },
    /// The version field is not the one the view expects.
    #[error("IP version {0} where another was expected")]
    BadVersion(u8),
    /// IPv4 IHL below 5 words (RFC 791 §3.1).
    #[error("IPv4 IHL {0} is below the minimum of 5 words")]
    BadHeaderLen(u8),
    /// IPv4 total length smaller than the header.
    #[error("IPv4 total length {total_len} is shorter than its {header_len}-octet header")]
    BadTotalLen {
        /// The total-length field.
        total_len: usize,
        /// The header length from IHL.
        header_len: usize,
    },
    /// The IPv4 header checksum is wrong.
    #[error("bad IPv4 header checksum")]
    BadChecksum,
    /// An IPv4 fragment (MF set or offset non-zero): not reassembled here.
    #[error("IPv4 fragment (more fragments {more_fragments}, offset {offset} octets)")]
    Fragment {
        /// MF flag.
        more_fragments: bool,
        /// Fragment offset in octets.
        offset: usize,
    },
    /// An IPv6 extension header follows the fixed header: not handled here.
    #[error("unsupported IPv6 extension header {next_header}")]
    Unsupported {
        /// The next-header value.
        next_header: u8,
    },
    /// The payload is too long for the length field.
    #[error("IP payload of {0} octets does not fit the length field")]
    PayloadTooLong(usize),
}

fn u16_at(b: &[u8], r: Range<usize>) -> u16 {
    u16::from_be_bytes([b[r.start], b[r.start + 1]])
}

/// A view over an IPv4 packet.
///
/// Contract: after [`Ipv4Packet::check_len`] succeeds, no accessor panics.
#[derive(Debug, Clone, Copy)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wraps a buffer after [`Ipv4Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, IpError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the version (4), that IHL is at least 5 words and inside the buffer, and that
    /// the total length covers the header and lies inside the buffer (which may be longer:
    /// Ethernet padding).
    pub fn check_len(&self) -> Result<(), IpError> {
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
        if have < total_len {
            return Err(IpError::Truncated {
                need: total_len,
                have,
            });
        }
        Ok(())
    }

    /// Consumes the view, giving back the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version field.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field4::VER_IHL] >> 4
    }
    /// Header length in octets (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field4::VER_IHL] & 0x0f) * 4
    }
    /// DSCP and ECN octet.
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field4::DSCP_ECN]
    }
    /// Total length: header and payload.
    pub fn total_len(&self) -> usize {
        usize::from(u16_at(self.buffer.as_ref(), field4::LENGTH))
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field4::IDENT)
    }
    fn flags_offset(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field4::FLG_OFF)
    }
    /// DF set.
    pub fn dont_frag(&self) -> bool {
        self.flags_offset() & IPV4_DF != 0
    }
    /// MF set.
    pub fn more_frags(&self) -> bool {
        self.flags_offset() & IPV4_MF != 0
    }
    /// Fragment offset in octets.
    pub fn frag_offset(&self) -> usize {
        usize::from(self.flags_offset() & IPV4_FRAG_OFFSET_MASK) * 8
    }
    /// Whether the packet is a fragment: MF set or a non-zero offset.
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }
    /// Time to live.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field4::TTL]
    }
    /// Protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field4::PROTOCOL]
    }
    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field4::CHECKSUM)
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field4::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field4::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    /// Whether the header checksum is right (RFC 791 §3.1: the one's complement sum over
    /// the header, options included, is all ones).
    pub fn verify_checksum(&self) -> bool {
        let h = &self.buffer.as_ref()[..self.header_len()];
        checksum::fold(checksum::sum(0, h)) == 0xffff
    }
    /// The header checksum the packet should carry (the present field is left out).
    pub fn compute_checksum(&self) -> u16 {
        let h = &self.buffer.as_ref()[..self.header_len()];
        let acc = checksum::sum(0, &h[..field4::CHECKSUM.start]);
        !checksum::fold(checksum::sum(acc, &h[field4::CHECKSUM.end..]))
    }
    /// The options (between the fixed header and the payload).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[IPV4_HEADER_LEN..self.header_len()]
    }
    /// The payload: from the end of the header to the total length (padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn set_u16(&mut self, r: Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes())
    }
    /// Sets version 4 and the header length in octets (rounded down to words, at most 60).
    pub fn set_version_and_header_len(&mut self, len: usize) {
        let words = (len.min(60) / 4) as u8;
        self.buffer.as_mut()[field4::VER_IHL] = 0x40 | words;
    }
    /// Sets the DSCP and ECN octet.
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[field4::DSCP_ECN] = v
    }
    /// Sets the total length.
    pub fn set_total_len(&mut self, v: u16) {
        self.set_u16(field4::LENGTH, v)
    }
    /// Sets the identification.
    pub fn set_ident(&mut self, v: u16) {
        self.set_u16(field4::IDENT, v)
    }
    /// Sets the flags/fragment-offset word ([`IPV4_DF`], [`IPV4_MF`], offset in 8-octet
    /// units).
    pub fn set_flags_offset(&mut self, v: u16) {
        self.set_u16(field4::FLG_OFF, v)
    }
    /// Sets the time to live.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field4::TTL] = v
    }
    /// Sets the protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field4::PROTOCOL] = v
    }
    /// Sets the header checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set_u16(field4::CHECKSUM, v)
    }
    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field4::SRC].copy_from_slice(&a.octets())
    }
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field4::DST].copy_from_slice(&a.octets())
    }
    /// Computes and writes the header checksum.
    pub fn fill_checksum(&mut self) {
        let c = self.compute_checksum();
        self.set_checksum(c)
    }
    /// The payload, writable (up to the total length).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let r = self.header_len()..self.total_len();
        &mut self.buffer.as_mut()[r]
    }
}

/// The meaning of an IPv4 header the data path accepts: no fragment, options ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Protocol of the payload.
    pub protocol: u8,
    /// Payload octets (total length − header length).
    pub payload_len: usize,
    /// Time to live.
    pub hop_limit: u8,
}

impl Ipv4Repr {
    /// A TCP header as the data path sends it: TTL 64.
    pub fn tcp(src_addr: Ipv4Addr, dst_addr: Ipv4Addr, payload_len: usize) -> Ipv4Repr {
        Ipv4Repr {
            src_addr,
            dst_addr,
            protocol: checksum::PROTO_TCP,
            payload_len,
            hop_limit: DEFAULT_HOP_LIMIT,
        }
    }

    /// Parses a packet: checks its lengths, then (when `verify_checksum`) its header
    /// checksum, then rejects fragments.
    pub fn parse<T: AsRef<[u8]>>(
        packet: &Ipv4Packet<T>,
        verify_checksum: bool,
    ) -> Result<Ipv4Repr, IpError> {
        packet.check_len()?;
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

    /// Octets of the header [`Ipv4Repr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        IPV4_HEADER_LEN
    }

    /// Writes a 20-octet header at the start of `buf`: DSCP/ECN 0, identification 0, DF set
    /// (RFC 6864 §4.1: an atomic datagram's ID may be anything), checksum filled. Returns the
    /// header length; the payload goes after it.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, IpError> {
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

/// A view over an IPv6 packet.
///
/// Contract: after [`Ipv6Packet::check_len`] succeeds, no accessor panics.
#[derive(Debug, Clone, Copy)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps a buffer without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wraps a buffer after [`Ipv6Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, IpError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the version (6) and that the fixed header and the payload length it announces
    /// lie inside the buffer (which may be longer: Ethernet padding).
    pub fn check_len(&self) -> Result<(), IpError> {
        let have = self.buffer.as_ref().len();
        if have < IPV6_HEADER_LEN {
            return Err(IpError::Truncated {
                need: IPV6_HEADER_LEN,
                have,
            });
        }
        if self.version() != 6 {
            return Err(IpError::BadVersion(self.version()));
        }
        let need = IPV6_HEADER_LEN + self.payload_len();
        if have < need {
            return Err(IpError::Truncated { need, have });
        }
        Ok(())
    }

    /// Consumes the view, giving back the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn first_word(&self) -> u32 {
        let b = &self.buffer.as_ref()[field6::VER_TC_FLOW];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    /// Version field.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }
    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        (self.first_word() >> 20) as u8
    }
    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.first_word() & 0x000f_ffff
    }
    /// Payload length (extension headers included).
    pub fn payload_len(&self) -> usize {
        usize::from(u16_at(self.buffer.as_ref(), field6::PAYLOAD_LEN))
    }
    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field6::NXT_HDR]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field6::HOP_LIMIT]
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field6::SRC]);
        Ipv6Addr::from(a)
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field6::DST]);
        Ipv6Addr::from(a)
    }
    /// The payload: the payload length's octets after the fixed header (padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[IPV6_HEADER_LEN..IPV6_HEADER_LEN + self.payload_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets version 6, traffic class and flow label.
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let w = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        self.buffer.as_mut()[field6::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes())
    }
    /// Sets the payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        self.buffer.as_mut()[field6::PAYLOAD_LEN].copy_from_slice(&v.to_be_bytes())
    }
    /// Sets the next header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field6::NXT_HDR] = v
    }
    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field6::HOP_LIMIT] = v
    }
    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field6::SRC].copy_from_slice(&a.octets())
    }
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field6::DST].copy_from_slice(&a.octets())
    }
    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = IPV6_HEADER_LEN + self.payload_len();
        &mut self.buffer.as_mut()[IPV6_HEADER_LEN..end]
    }
}

/// The meaning of an IPv6 header the data path accepts: no extension header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next header (never an extension header).
    pub next_header: u8,
    /// Payload octets.
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Ipv6Repr {
    /// A TCP header as the data path sends it: hop limit 64.
    pub fn tcp(src_addr: Ipv6Addr, dst_addr: Ipv6Addr, payload_len: usize) -> Ipv6Repr {
        Ipv6Repr {
            src_addr,
            dst_addr,
            next_header: checksum::PROTO_TCP,
            payload_len,
            hop_limit: DEFAULT_HOP_LIMIT,
        }
    }

    /// Parses a packet: checks its lengths and rejects extension headers.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Result<Ipv6Repr, IpError> {
        packet.check_len()?;
        let next_header = packet.next_header();
        if is_ipv6_extension_header(next_header) {
            return Err(IpError::Unsupported { next_header });
        }
        Ok(Ipv6Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header,
            payload_len: packet.payload_len(),
            hop_limit: packet.hop_limit(),
        })
    }

    /// Octets of the header [`Ipv6Repr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        IPV6_HEADER_LEN
    }

    /// Writes the 40-octet header at the start of `buf` (traffic class and flow label 0);
    /// returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, IpError> {
        let len = u16::try_from(self.payload_len)
            .map_err(|_| IpError::PayloadTooLong(self.payload_len))?;
        let have = buf.len();
        let Some(h) = buf.get_mut(..IPV6_HEADER_LEN) else {
            return Err(IpError::Truncated {
                need: IPV6_HEADER_LEN,
                have,
            });
        };
        let mut p = Ipv6Packet::new_unchecked(h);
        p.set_version_tc_flow(0, 0);
        p.set_payload_len(len);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        Ok(IPV6_HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 192.168.122.1 -> 192.168.122.57, ID 0x1c46, DF, TTL 64, TCP, total length 68 (only the
    /// header's 20 octets are here, then 4 octets of what would be TCP); checksum by an
    /// independent script.
    const V4_HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x44, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x06, 0xa8, 0xe2, 0xc0, 0xa8, 0x7a,
        0x01, 0xc0, 0xa8, 0x7a, 0x39,
    ];
    /// 2001:db8::1 -> 2001:db8::aa, flow label 0x12345, payload length 49, TCP, hop limit 64.
    const V6_HEADER: [u8; 40] = [
        0x60, 0x01, 0x23, 0x45, 0x00, 0x31, 0x06, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xaa,
    ];

    /// RFC 1071 the slow way: 16-bit words with end-around carry.
    fn naive_sum(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for pair in data.chunks(2) {
            s += u32::from(pair[0]) << 8 | u32::from(*pair.get(1).unwrap_or(&0));
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    /// The IPv4 fixture with a payload of `len` octets (total length adjusted, checksum
    /// recomputed the slow way) and `pad` octets of Ethernet padding after it.
    fn v4_packet(len: usize, pad: usize) -> Vec<u8> {
        let mut p = V4_HEADER.to_vec();
        p[2..4].copy_from_slice(&((20 + len) as u16).to_be_bytes());
        p[10..12].fill(0);
        let c = !naive_sum(&p);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p.extend((0..len).map(|i| i as u8));
        p.extend(std::iter::repeat_n(0xee, pad));
        p
    }

    #[test]
    fn v4_deconstruct() {
        assert_eq!(naive_sum(&V4_HEADER), 0xffff, "fixture checksum");
        let mut buf = V4_HEADER.to_vec();
        buf.resize(68, 0);
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 68);
        assert_eq!(p.ident(), 0x1c46);
        assert!(p.dont_frag());
        assert!(!p.more_frags());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.protocol(), 6);
        assert_eq!(p.checksum(), 0xa8e2);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 168, 122, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(192, 168, 122, 57));
        assert!(p.verify_checksum());
        assert_eq!(p.compute_checksum(), 0xa8e2);
        assert_eq!(p.payload().len(), 48);
        assert!(p.options().is_empty());
    }

    #[test]
    fn v4_padding_is_trimmed() {
        let buf = v4_packet(20, 6);
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.payload(), &buf[20..40]);
        let r = Ipv4Repr::parse(&p, true).unwrap();
        assert_eq!(r.payload_len, 20);
    }

    #[test]
    fn v4_truncated_and_impossible() {
        let buf = v4_packet(8, 0);
        for len in 0..buf.len() {
            assert!(
                matches!(
                    Ipv4Packet::new_checked(&buf[..len]),
                    Err(IpError::Truncated { .. })
                ),
                "len {len}"
            );
        }
        let mut b = buf.clone();
        b[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            IpError::BadVersion(6)
        );
        let mut b = buf.clone();
        b[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            IpError::BadHeaderLen(4)
        );
        let mut b = buf.clone();
        b[0] = 0x47; // 28-octet header: inside the 28-octet buffer, so total length is next
        b[2..4].copy_from_slice(&24u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            IpError::BadTotalLen {
                total_len: 24,
                header_len: 28
            }
        );
        let mut b = buf.clone();
        b[0] = 0x4f; // 60-octet header in a 28-octet buffer
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            IpError::Truncated { need: 60, have: 28 }
        );
    }

    #[test]
    fn v4_options_are_skipped() {
        // IHL 6: four option octets (NOP NOP NOP EOL), payload after them.
        let mut p = vec![
            0x46, 0, 0, 28, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        p.extend([1, 1, 1, 0, 0xa, 0xb, 0xc, 0xd]);
        let c = !naive_sum(&p[..24]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        let pk = Ipv4Packet::new_checked(&p[..]).unwrap();
        assert!(pk.verify_checksum());
        assert_eq!(pk.options(), &[1, 1, 1, 0]);
        assert_eq!(pk.payload(), &[0xa, 0xb, 0xc, 0xd]);
        assert_eq!(Ipv4Repr::parse(&pk, true).unwrap().payload_len, 4);
    }

    #[test]
    fn v4_fragments_are_errors() {
        for (word, mf, off) in [
            (0x2000u16, true, 0),
            (0x0001, false, 8),
            (0x3fff, true, 65528),
        ] {
            let mut b = v4_packet(8, 0);
            b[6..8].copy_from_slice(&word.to_be_bytes());
            Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
            let p = Ipv4Packet::new_checked(&b[..]).unwrap();
            assert!(p.is_fragment());
            assert_eq!(
                Ipv4Repr::parse(&p, true).unwrap_err(),
                IpError::Fragment {
                    more_fragments: mf,
                    offset: off
                }
            );
        }
    }

    #[test]
    fn v4_bad_checksum() {
        let good = v4_packet(8, 0);
        for i in 0..20 {
            let mut b = good.clone();
            b[i] ^= 0x01;
            let Ok(p) = Ipv4Packet::new_checked(&b[..]) else {
                continue; // version / IHL / length octets: structurally wrong first
            };
            assert!(!p.verify_checksum(), "octet {i}");
            assert_eq!(Ipv4Repr::parse(&p, true).unwrap_err(), IpError::BadChecksum);
            if (6..8).contains(&i) {
                // Flags / offset: unverified, the flipped bit makes it a fragment.
                assert!(matches!(
                    Ipv4Repr::parse(&p, false),
                    Err(IpError::Fragment { .. })
                ));
            } else {
                assert!(Ipv4Repr::parse(&p, false).is_ok(), "octet {i}");
            }
        }
    }

    #[test]
    fn v4_emit() {
        let r = Ipv4Repr::tcp(
            Ipv4Addr::new(192, 168, 122, 1),
            Ipv4Addr::new(192, 168, 122, 57),
            48,
        );
        let mut b = [0u8; 20];
        assert_eq!(r.emit(&mut b).unwrap(), 20);
        let mut want = V4_HEADER;
        want[4..6].fill(0); // identification 0
        let c = !naive_sum(&{
            let mut w = want;
            w[10..12].fill(0);
            w
        });
        want[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(b, want);
        assert_eq!(naive_sum(&b), 0xffff);
        assert_eq!(
            r.emit(&mut b[..19]).unwrap_err(),
            IpError::Truncated { need: 20, have: 19 }
        );
        assert_eq!(
            Ipv4Repr::tcp(r.src_addr, r.dst_addr, 65516)
                .emit(&mut b)
                .unwrap_err(),
            IpError::PayloadTooLong(65516)
        );
        let mut full = vec![0u8; 68];
        r.emit(&mut full).unwrap();
        let back = Ipv4Repr::parse(&Ipv4Packet::new_checked(&full[..]).unwrap(), true).unwrap();
        assert_eq!(back, r);
    }

    fn v6_packet(pad: usize) -> Vec<u8> {
        let mut p = V6_HEADER.to_vec();
        p.extend((0..49).map(|i| i as u8));
        p.extend(std::iter::repeat_n(0xee, pad));
        p
    }

    #[test]
    fn v6_deconstruct() {
        let buf = v6_packet(3);
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 49);
        assert_eq!(p.next_header(), 6);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "2001:db8::aa".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &buf[40..89]);
        let r = Ipv6Repr::parse(&p).unwrap();
        assert_eq!(r.payload_len, 49);
        assert_eq!(r.next_header, 6);
    }

    #[test]
    fn v6_truncated_and_version() {
        let buf = v6_packet(0);
        for len in 0..buf.len() {
            assert!(
                matches!(
                    Ipv6Packet::new_checked(&buf[..len]),
                    Err(IpError::Truncated { .. })
                ),
                "len {len}"
            );
        }
        let mut b = buf.clone();
        b[0] = 0x45;
        assert_eq!(
            Ipv6Packet::new_checked(&b[..]).unwrap_err(),
            IpError::BadVersion(4)
        );
    }

    #[test]
    fn v6_extension_headers_unsupported() {
        for nh in IPV6_EXTENSION_HEADERS {
            let mut b = v6_packet(0);
            b[6] = nh;
            let p = Ipv6Packet::new_checked(&b[..]).unwrap();
            assert_eq!(
                Ipv6Repr::parse(&p).unwrap_err(),
                IpError::Unsupported { next_header: nh }
            );
        }
        // UDP is not an extension header: parsed, the caller decides.
        let mut b = v6_packet(0);
        b[6] = 17;
        assert_eq!(
            Ipv6Repr::parse(&Ipv6Packet::new_unchecked(&b[..]))
                .unwrap()
                .next_header,
            17
        );
    }

    #[test]
    fn v6_emit() {
        let r = Ipv6Repr::tcp(
            "2001:db8::1".parse().unwrap(),
            "2001:db8::aa".parse().unwrap(),
            49,
        );
        let mut b = [0u8; 40];
        assert_eq!(r.emit(&mut b).unwrap(), 40);
        let mut want = V6_HEADER;
        want[1..4].fill(0); // flow label 0
        assert_eq!(b, want);
        assert_eq!(
            Ipv6Repr::tcp(r.src_addr, r.dst_addr, 65536)
                .emit(&mut b)
                .unwrap_err(),
            IpError::PayloadTooLong(65536)
        );
        let mut full = v6_packet(0);
        r.emit(&mut full).unwrap();
        assert_eq!(
            Ipv6Repr::parse(&Ipv6Packet::new_checked(&full[..]).unwrap()).unwrap(),
            r
        );
    }
}
