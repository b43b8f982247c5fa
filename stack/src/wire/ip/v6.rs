//! IPv6 (RFC 8200): the packet view and the header the data path accepts.

use super::{is_ipv6_extension_header, u16_at, IpError, DEFAULT_HOP_LIMIT, IPV6_HEADER_LEN};
use crate::wire::checksum;
use std::net::Ipv6Addr;

mod field6 {
    use std::ops::Range;
    pub(crate) const VER_TC_FLOW: Range<usize> = 0..4;
    pub(crate) const PAYLOAD_LEN: Range<usize> = 4..6;
    pub(crate) const NXT_HDR: usize = 6;
    pub(crate) const HOP_LIMIT: usize = 7;
    pub(crate) const SRC: Range<usize> = 8..24;
    pub(crate) const DST: Range<usize> = 24..40;
}

/// A view over an IPv6 packet.
///
/// Contract: after [`Ipv6Packet::check_len`] succeeds, no accessor panics.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps a buffer without checking it.
    pub(crate) fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wraps a buffer after [`Ipv6Packet::check_len`].
    #[cfg(test)]
    pub(crate) fn new_checked(buffer: T) -> Result<Self, IpError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the version (6) and that the fixed header and the payload length it announces
    /// lie inside the buffer (which may be longer: Ethernet padding).
    #[cfg(test)]
    pub(crate) fn check_len(&self) -> Result<(), IpError> {
        self.check_len_in(self.buffer.as_ref().len())
    }

    /// [`Ipv6Packet::check_len`] for a packet of which the buffer holds the first part (at
    /// least the fixed header) and the frame `in_frame` octets from the header on: the payload
    /// length is checked against `in_frame`.
    pub(crate) fn check_len_in(&self, in_frame: usize) -> Result<(), IpError> {
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
        let have = have.max(in_frame);
        let need = IPV6_HEADER_LEN + self.payload_len();
        if have < need {
            return Err(IpError::Truncated { need, have });
        }
        Ok(())
    }

    #[cfg(test)]
    fn first_word(&self) -> u32 {
        let b = &self.buffer.as_ref()[field6::VER_TC_FLOW];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    /// Version field.
    pub(crate) fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }
    /// Traffic class.
    #[cfg(test)]
    pub(crate) fn traffic_class(&self) -> u8 {
        (self.first_word() >> 20) as u8
    }
    /// Flow label (20 bits).
    #[cfg(test)]
    pub(crate) fn flow_label(&self) -> u32 {
        self.first_word() & 0x000f_ffff
    }
    /// Payload length (extension headers included).
    pub(crate) fn payload_len(&self) -> usize {
        usize::from(u16_at(self.buffer.as_ref(), field6::PAYLOAD_LEN))
    }
    /// Next header.
    pub(crate) fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field6::NXT_HDR]
    }
    /// Hop limit.
    pub(crate) fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field6::HOP_LIMIT]
    }
    /// Source address.
    pub(crate) fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field6::SRC]);
        Ipv6Addr::from(a)
    }
    /// Destination address.
    pub(crate) fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field6::DST]);
        Ipv6Addr::from(a)
    }
    /// The payload: the payload length's octets after the fixed header (padding excluded).
    #[cfg(test)]
    pub(crate) fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[IPV6_HEADER_LEN..IPV6_HEADER_LEN + self.payload_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets version 6, traffic class and flow label.
    fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let w = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        self.buffer.as_mut()[field6::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes())
    }
    /// Sets the payload length.
    pub(crate) fn set_payload_len(&mut self, v: u16) {
        self.buffer.as_mut()[field6::PAYLOAD_LEN].copy_from_slice(&v.to_be_bytes())
    }
    /// Sets the next header.
    fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field6::NXT_HDR] = v
    }
    /// Sets the hop limit.
    pub(crate) fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field6::HOP_LIMIT] = v
    }
    /// Sets the source address.
    pub(crate) fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field6::SRC].copy_from_slice(&a.octets())
    }
    /// Sets the destination address.
    pub(crate) fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field6::DST].copy_from_slice(&a.octets())
    }
}

/// The meaning of an IPv6 header the data path accepts: no extension header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ipv6Repr {
    /// Source address.
    pub(crate) src_addr: Ipv6Addr,
    /// Destination address.
    pub(crate) dst_addr: Ipv6Addr,
    /// Next header (never an extension header).
    pub(crate) next_header: u8,
    /// Payload octets.
    pub(crate) payload_len: usize,
    /// Hop limit.
    pub(crate) hop_limit: u8,
}

impl Ipv6Repr {
    /// A TCP header as the data path sends it: hop limit 64.
    pub(crate) fn tcp(src_addr: Ipv6Addr, dst_addr: Ipv6Addr, payload_len: usize) -> Ipv6Repr {
        Ipv6Repr {
            src_addr,
            dst_addr,
            next_header: checksum::PROTO_TCP,
            payload_len,
            hop_limit: DEFAULT_HOP_LIMIT,
        }
    }

    /// [`Ipv6Repr::parse_in`] of a packet the buffer holds whole.
    #[cfg(test)]
    pub(crate) fn parse<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Result<Ipv6Repr, IpError> {
        Self::parse_in(packet, 0)
    }

    /// Parses a packet: checks its lengths (as [`Ipv6Packet::check_len_in`] with
    /// `in_frame`) and rejects extension headers.
    #[inline(always)]
    pub(crate) fn parse_in<T: AsRef<[u8]>>(
        packet: &Ipv6Packet<T>,
        in_frame: usize,
    ) -> Result<Ipv6Repr, IpError> {
        packet.check_len_in(in_frame)?;
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

    /// Writes the 40-octet header at the start of `buf` (traffic class and flow label 0);
    /// returns its length.
    pub(crate) fn emit(&self, buf: &mut [u8]) -> Result<usize, IpError> {
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
