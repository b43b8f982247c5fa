//! IPv6 (RFC 8200): the packet view and the header the data path accepts.

use super::{is_ipv6_extension_header, u16_at, IpError, DEFAULT_HOP_LIMIT, IPV6_HEADER_LEN};
use crate::wire::checksum;
use std::net::Ipv6Addr;

mod field6 {
    use std::ops::Range;
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Range<usize> = 8..24;
    pub const DST: Range<usize> = 24..40;
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
