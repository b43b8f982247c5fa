//! Building outgoing frames: [`FrameTemplate`], one flow's Ethernet and IP headers, prebuilt.

use super::{FrameError, MAX_L2L3_LEN};
use crate::wire::ethernet::{self, EthernetRepr, MacAddr, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use crate::wire::ip::IpError;
use crate::wire::ip::{Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, IPV4_HEADER_LEN};
use crate::wire::tcp::TcpPacket;
use std::net::{IpAddr, SocketAddr};

/// The Ethernet and IP headers of one flow's outgoing frames, built once at hand-over.
///
/// `src` is our local address, `dst` the peer's. IPv4 frames carry TTL 64, DF set,
/// identification 0; IPv6 frames hop limit 64, traffic class and flow label 0. No VLAN tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameTemplate {
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src: SocketAddr,
    dst: SocketAddr,
    /// Ethernet and IP headers with zero length and checksum fields.
    header: [u8; MAX_L2L3_LEN],
    l2l3_len: usize,
}

impl FrameTemplate {
    /// Builds the template. IPv4-mapped IPv6 addresses (what a dual-stack socket reports for
    /// an IPv4 connection) are taken as the IPv4 addresses they map; after that both
    /// addresses must be of one family.
    pub fn new(
        src_mac: MacAddr,
        dst_mac: MacAddr,
        src: SocketAddr,
        dst: SocketAddr,
    ) -> Result<FrameTemplate, FrameError> {
        let src = SocketAddr::new(src.ip().to_canonical(), src.port());
        let dst = SocketAddr::new(dst.ip().to_canonical(), dst.port());
        let mut header = [0u8; MAX_L2L3_LEN];
        let (ethertype, ip_len) = match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => (ETHERTYPE_IPV4, {
                let at = ethernet::HEADER_LEN;
                Ipv4Repr::tcp(s, d, 0).emit(&mut header[at..])?
            }),
            (IpAddr::V6(s), IpAddr::V6(d)) => (ETHERTYPE_IPV6, {
                let at = ethernet::HEADER_LEN;
                Ipv6Repr::tcp(s, d, 0).emit(&mut header[at..])?
            }),
            (s, d) => return Err(FrameError::FamilyMismatch { src: s, dst: d }),
        };
        let eth = EthernetRepr {
            src_addr: src_mac,
            dst_addr: dst_mac,
            vlan: None,
            ethertype,
        };
        let eth_len = eth.emit(&mut header)?;
        Ok(FrameTemplate {
            src_mac,
            dst_mac,
            src,
            dst,
            header,
            l2l3_len: eth_len + ip_len,
        })
    }

    /// Our MAC address.
    #[cfg(test)]
    pub(crate) fn src_mac(&self) -> MacAddr {
        self.src_mac
    }
    /// The next hop's MAC address.
    #[cfg(test)]
    pub(crate) fn dst_mac(&self) -> MacAddr {
        self.dst_mac
    }
    /// Our address and port (IPv4-mapped addresses made IPv4).
    #[cfg(test)]
    pub(crate) fn src(&self) -> SocketAddr {
        self.src
    }
    /// The peer's address and port (IPv4-mapped addresses made IPv4).
    #[cfg(test)]
    pub(crate) fn dst(&self) -> SocketAddr {
        self.dst
    }

    /// Octets in front of the TCP segment: 14 + 20 for IPv4, 14 + 40 for IPv6.
    pub fn l2l3_len(&self) -> usize {
        self.l2l3_len
    }

    /// Completes a frame whose TCP segment (header and payload, `tcp_len` octets) is already
    /// at `buf[self.l2l3_len()..self.l2l3_len() + tcp_len]`: writes the Ethernet and IP
    /// headers in front of it, fills the IPv4 header checksum and the TCP checksum (in
    /// software, over pseudo-header, header and payload; whatever the checksum field held is
    /// ignored), and returns the frame's length.
    ///
    /// The TCP ports are the segment's own and are not rewritten. Nothing is written when an
    /// error is returned.
    pub fn finish(&self, buf: &mut [u8], tcp_len: usize) -> Result<usize, FrameError> {
        let l = self.l2l3_len;
        let need = l.saturating_add(tcp_len);
        let have = buf.len();
        let Some(frame) = buf.get_mut(..need) else {
            return Err(FrameError::BufferTooShort { need, have });
        };
        let (hdr, seg) = frame.split_at_mut(l);
        TcpPacket::new_checked(&*seg)?;
        let ip_len = match self.src.ip() {
            IpAddr::V4(_) => IPV4_HEADER_LEN + tcp_len,
            IpAddr::V6(_) => tcp_len,
        };
        let ip_len = u16::try_from(ip_len).map_err(|_| IpError::PayloadTooLong(tcp_len))?;
        hdr.copy_from_slice(&self.header[..l]);
        let ip = &mut hdr[ethernet::HEADER_LEN..];
        let mut tcp = TcpPacket::new_unchecked(seg);
        match (self.src.ip(), self.dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut p = Ipv4Packet::new_unchecked(ip);
                p.set_total_len(ip_len);
                p.fill_checksum();
                tcp.fill_checksum_v4(s, d);
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                Ipv6Packet::new_unchecked(ip).set_payload_len(ip_len);
                tcp.fill_checksum_v6(s, d);
            }
            // `new` admits one family only.
            (s, d) => return Err(FrameError::FamilyMismatch { src: s, dst: d }),
        }
        Ok(need)
    }
}
