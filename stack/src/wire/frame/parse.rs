//! Taking a received frame apart: [`parse_tcp_frame`] and the [`TcpFrame`] it yields.

use super::FrameError;
use crate::wire::checksum::PROTO_TCP;
#[cfg(test)]
use crate::wire::ethernet::MacAddr;
use crate::wire::ethernet::{EthernetFrame, VlanTag, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use crate::wire::ip::{Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, IPV6_HEADER_LEN};
use crate::wire::tcp::TcpPacket;
use std::net::{IpAddr, SocketAddr};

/// A received TCP frame, taken apart. Borrows the frame.
#[derive(Debug, Clone, Copy)]
pub struct TcpFrame<'a> {
    // The MAC addresses, the IP payload's length and the TCP header's offset are checked by
    // the tests only: the worker reads none of them.
    /// Source MAC address.
    #[cfg(test)]
    pub(crate) src_mac: MacAddr,
    /// Destination MAC address.
    #[cfg(test)]
    pub(crate) dst_mac: MacAddr,
    /// The VLAN tag, if the frame had one.
    pub vlan: Option<VlanTag>,
    /// Source address and TCP port.
    pub src: SocketAddr,
    /// Destination address and TCP port.
    pub dst: SocketAddr,
    /// Octets of the IP payload (the TCP segment), by the IP header's length: Ethernet
    /// padding excluded.
    #[cfg(test)]
    pub(crate) ip_payload_len: usize,
    /// Offset of the TCP header in the frame.
    #[cfg(test)]
    pub(crate) tcp_offset: usize,
    /// The TCP segment, exactly `ip_payload_len` octets; its header has passed
    /// `TcpPacket::check_len`.
    pub tcp: TcpPacket<&'a [u8]>,
}

/// Takes a received frame apart: Ethernet (one 802.1Q / 802.1ad tag skipped), IPv4 or IPv6,
/// TCP. The IPv4 header checksum is always verified; the TCP checksum when
/// `verify_tcp_checksum` (turn it off only where the NIC has verified it).
///
/// Never panics, never allocates. Fragments, IPv6 extension headers, non-IP and non-TCP
/// frames are errors for the caller to count and drop.
///
/// Inlined into the worker's loop: returned through memory, the frame's fields (written
/// piecewise here, read back as whole vectors there) cost a failed store forward per frame,
/// which waits for every store before it, the previous segment's placement into a region
/// included (`mpa-bench pipeline --perf`).
#[inline(always)]
pub fn parse_tcp_frame(
    frame: &[u8],
    verify_tcp_checksum: bool,
) -> Result<TcpFrame<'_>, FrameError> {
    let eth = EthernetFrame::new_checked(frame)?;
    let l3_offset = eth.header_len();
    // Slices are cut from `frame` itself (the views' accessors borrow the view).
    let ip = &frame[l3_offset..];
    // The TCP segment's first and end offsets in `frame`.
    let (src_ip, dst_ip, tcp_at, tcp_end) = match eth.ethertype() {
        ETHERTYPE_IPV4 => {
            let p = Ipv4Packet::new_checked(ip)?;
            let r = Ipv4Repr::parse(&p, true)?;
            if r.protocol != PROTO_TCP {
                return Err(FrameError::NotTcp {
                    protocol: r.protocol,
                });
            }
            let hl = p.header_len();
            (
                IpAddr::V4(r.src_addr),
                IpAddr::V4(r.dst_addr),
                l3_offset + hl,
                l3_offset + p.total_len(),
            )
        }
        ETHERTYPE_IPV6 => {
            let p = Ipv6Packet::new_checked(ip)?;
            let r = Ipv6Repr::parse(&p)?;
            if r.next_header != PROTO_TCP {
                return Err(FrameError::NotTcp {
                    protocol: r.next_header,
                });
            }
            (
                IpAddr::V6(r.src_addr),
                IpAddr::V6(r.dst_addr),
                l3_offset + IPV6_HEADER_LEN,
                l3_offset + IPV6_HEADER_LEN + r.payload_len,
            )
        }
        ethertype => return Err(FrameError::NotIp { ethertype }),
    };
    let segment = &frame[tcp_at..tcp_end];
    let tcp = TcpPacket::new_checked(segment)?;
    if verify_tcp_checksum {
        // RFC 9293 §3.1 (MUST-3): the receiver checks the checksum; a bad segment is dropped.
        let ok = match (src_ip, dst_ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) => tcp.verify_checksum_v4(s, d),
            (IpAddr::V6(s), IpAddr::V6(d)) => tcp.verify_checksum_v6(s, d),
            _ => false, // unreachable: both come from one header
        };
        if !ok {
            return Err(FrameError::BadTcpChecksum);
        }
    }
    Ok(TcpFrame {
        #[cfg(test)]
        src_mac: eth.src_addr(),
        #[cfg(test)]
        dst_mac: eth.dst_addr(),
        vlan: eth.vlan(),
        src: SocketAddr::new(src_ip, tcp.src_port()),
        dst: SocketAddr::new(dst_ip, tcp.dst_port()),
        #[cfg(test)]
        ip_payload_len: segment.len(),
        #[cfg(test)]
        tcp_offset: tcp_at,
        tcp,
    })
}
