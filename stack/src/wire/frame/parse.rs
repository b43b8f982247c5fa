//! Taking a received frame apart: [`parse_tcp_frame`] and the [`TcpFrame`] it yields.

use super::FrameError;
use crate::wire::checksum::{self, PROTO_TCP};
#[cfg(test)]
use crate::wire::ethernet::MacAddr;
use crate::wire::ethernet::{EthernetFrame, VlanTag, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use crate::wire::ip::{Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, IPV6_HEADER_LEN};
use crate::wire::tcp::TcpPacket;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;

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
    /// The TCP segment, exactly `ip_payload_len` octets (of a frame in pieces, its part in the
    /// first piece: [`parse_tcp_frame_in_pieces`]); its header has passed
    /// `TcpPacket::check_len`.
    pub tcp: TcpPacket<&'a [u8]>,
    /// The CRC32c of the TCP payload, when [`parse_tcp_frame_with_payload_crc`] took it in
    /// the checksum's pass.
    pub payload_crc: Option<u32>,
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
    parse_frame(frame, verify_tcp_checksum, false)
}

/// [`parse_tcp_frame`] that also takes the CRC32c of the TCP payload
/// ([`TcpFrame::payload_crc`]) in the checksum's pass over the payload's octets when
/// `payload_crc` (one pass where the CPU has a kernel that folds both): an MPA receiver then
/// verifies an FPDU that spans segments from their CRCs instead of reading their octets again
/// (docs/architecture.md, "Runs of segments"). Ask only where the flow checks CRCs: the
/// folded pass costs more than the checksum alone. Without checksum verification no CRC is
/// taken (`payload_crc` is `None`): a pass of its own would cost what the receiver's costs.
#[inline(always)]
pub fn parse_tcp_frame_with_payload_crc(
    frame: &[u8],
    verify_tcp_checksum: bool,
    payload_crc: bool,
) -> Result<TcpFrame<'_>, FrameError> {
    parse_frame(frame, verify_tcp_checksum, payload_crc)
}

#[inline(always)]
fn parse_frame(
    frame: &[u8],
    verify_tcp_checksum: bool,
    take_crc: bool,
) -> Result<TcpFrame<'_>, FrameError> {
    let head = parse_head(frame, frame.len())?;
    let segment = &frame[head.tcp_at..head.tcp_end];
    let tcp = TcpPacket::new_checked(segment)?;
    let mut payload_crc = None;
    if verify_tcp_checksum {
        let acc = head.pseudo_header(segment.len());
        payload_crc = checksum::verify_tcp(acc, segment, tcp.header_len(), take_crc)
            .ok_or(FrameError::BadTcpChecksum)?;
    }
    let mut f = head.frame(tcp);
    f.payload_crc = payload_crc;
    Ok(f)
}

/// [`parse_tcp_frame`] for a frame that arrived in several pieces (the receive descriptors of
/// one multi-buffer frame, in order): the headers must lie in the first piece (else
/// [`FrameError::Tcp`], truncated: the caller may gather the frame and parse that), the TCP
/// checksum is verified over every piece. Returns the frame, whose `tcp` view holds the
/// header and the part of the payload in the first piece, and the payload's range in the
/// whole frame's octets (the pieces one after the other). The same checks and errors as
/// [`parse_tcp_frame`] otherwise.
pub fn parse_tcp_frame_in_pieces<'a>(
    pieces: impl Iterator<Item = &'a [u8]> + Clone,
    verify_tcp_checksum: bool,
) -> Result<(TcpFrame<'a>, Range<usize>), FrameError> {
    parse_in_pieces(pieces, verify_tcp_checksum, None)
}

/// [`parse_tcp_frame_in_pieces`] that also takes, in the checksum's pass, the CRC32c of each
/// piece's part of the payload when `take_crcs`: `payload_crcs` is emptied, then holds one CRC
/// per part that [`octets_in`] yields for the payload's range, in its order — what a run of
/// segments carries so that an FPDU spanning descriptors is verified from their CRCs
/// (docs/architecture.md, "Runs of segments"). Not asked for, or without checksum
/// verification, it stays empty, as [`parse_tcp_frame_with_payload_crc`] takes none; on an
/// error its content is meaningless.
pub fn parse_tcp_frame_in_pieces_with_payload_crcs<'a>(
    pieces: impl Iterator<Item = &'a [u8]> + Clone,
    verify_tcp_checksum: bool,
    take_crcs: bool,
    payload_crcs: &mut Vec<Option<u32>>,
) -> Result<(TcpFrame<'a>, Range<usize>), FrameError> {
    payload_crcs.clear();
    let crcs = take_crcs.then_some(payload_crcs);
    parse_in_pieces(pieces, verify_tcp_checksum, crcs)
}

fn parse_in_pieces<'a>(
    pieces: impl Iterator<Item = &'a [u8]> + Clone,
    verify_tcp_checksum: bool,
    mut crcs: Option<&mut Vec<Option<u32>>>,
) -> Result<(TcpFrame<'a>, Range<usize>), FrameError> {
    let mut rest = pieces.clone();
    let first = rest.next().unwrap_or_default();
    let frame_len = pieces.map(<[u8]>::len).sum();
    let head = parse_head(first, frame_len)?;
    let in_first = &first[head.tcp_at..head.tcp_end.min(first.len())];
    let tcp = TcpPacket::new_checked(in_first)?;
    let payload = head.tcp_at + tcp.header_len()..head.tcp_end;
    if verify_tcp_checksum {
        let mut acc = head.pseudo_header(head.tcp_end - head.tcp_at);
        // Each piece's part of the segment summed at its parity (offsets from the segment's
        // start); with CRCs, each part of the payload in the same pass. The header's length
        // is a multiple of 4: the payload in the first piece starts at an even offset.
        let mut sum_part = |acc: u64, part: &[u8], odd: bool| match crcs.as_deref_mut() {
            Some(crcs) if !part.is_empty() => {
                let (acc, crc) = checksum::sum_at_with_crc32c(acc, part, odd);
                crcs.push(Some(crc));
                acc
            }
            _ => checksum::sum_at(acc, part, odd),
        };
        let (header, in_payload) = in_first.split_at(tcp.header_len());
        acc = checksum::sum_header(acc, header);
        acc = sum_part(acc, in_payload, false);
        let mut at = first.len();
        for piece in rest {
            if at >= head.tcp_end {
                break;
            }
            let part = &piece[..piece.len().min(head.tcp_end - at)];
            acc = sum_part(acc, part, (at - head.tcp_at) % 2 == 1);
            at += part.len();
        }
        if at < head.tcp_end || checksum::fold(acc) != 0xffff {
            return Err(FrameError::BadTcpChecksum);
        }
    }
    Ok((head.frame(tcp), payload))
}

/// The octets in `range` of data split into `pieces` (offsets counted across the pieces, one
/// after the other), piece by piece, empty parts left out: a frame's payload from
/// [`parse_tcp_frame_in_pieces`], or part of it.
pub fn octets_in<'p>(
    pieces: impl Iterator<Item = &'p [u8]> + Clone,
    range: Range<usize>,
) -> impl Iterator<Item = &'p [u8]> + Clone {
    let mut at = 0usize;
    pieces.filter_map(move |p| {
        let start = at;
        at += p.len();
        let (lo, hi) = (range.start.max(start), range.end.min(at));
        (lo < hi).then(|| &p[lo - start..hi - start])
    })
}

/// What the Ethernet and IP headers say: the addresses and where the TCP segment lies.
struct Head {
    #[cfg(test)]
    src_mac: MacAddr,
    #[cfg(test)]
    dst_mac: MacAddr,
    vlan: Option<VlanTag>,
    src_ip: IpAddr,
    dst_ip: IpAddr,
    /// The TCP segment's first and end offsets in the frame.
    tcp_at: usize,
    tcp_end: usize,
}

/// The Ethernet and IP headers, in `head` (the frame, or its first piece), of a frame of
/// `frame_len` octets.
#[inline(always)]
fn parse_head(head: &[u8], frame_len: usize) -> Result<Head, FrameError> {
    let eth = EthernetFrame::new_checked(head)?;
    let l3_offset = eth.header_len();
    // Slices are cut from `head` itself (the views' accessors borrow the view).
    let ip = &head[l3_offset..];
    let in_frame = frame_len.saturating_sub(l3_offset);
    let (src_ip, dst_ip, tcp_at, tcp_end) = match eth.ethertype() {
        ETHERTYPE_IPV4 => {
            let p = Ipv4Packet::new_unchecked(ip);
            let r = Ipv4Repr::parse_in(&p, in_frame, true)?;
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
            let p = Ipv6Packet::new_unchecked(ip);
            let r = Ipv6Repr::parse_in(&p, in_frame)?;
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
    Ok(Head {
        #[cfg(test)]
        src_mac: eth.src_addr(),
        #[cfg(test)]
        dst_mac: eth.dst_addr(),
        vlan: eth.vlan(),
        src_ip,
        dst_ip,
        tcp_at,
        tcp_end,
    })
}

impl Head {
    /// The unfolded sum of the pseudo-header for a segment of `tcp_len` octets.
    #[inline(always)]
    fn pseudo_header(&self, tcp_len: usize) -> u64 {
        match (self.src_ip, self.dst_ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) => checksum::pseudo_header_v4(s, d, tcp_len as u32),
            (IpAddr::V6(s), IpAddr::V6(d)) => checksum::pseudo_header_v6(s, d, tcp_len as u32),
            // Unreachable: both come from one header. A sum no segment matches.
            _ => 0,
        }
    }

    #[inline(always)]
    fn frame(self, tcp: TcpPacket<&[u8]>) -> TcpFrame<'_> {
        TcpFrame {
            #[cfg(test)]
            src_mac: self.src_mac,
            #[cfg(test)]
            dst_mac: self.dst_mac,
            vlan: self.vlan,
            src: SocketAddr::new(self.src_ip, tcp.src_port()),
            dst: SocketAddr::new(self.dst_ip, tcp.dst_port()),
            #[cfg(test)]
            ip_payload_len: self.tcp_end - self.tcp_at,
            #[cfg(test)]
            tcp_offset: self.tcp_at,
            tcp,
            payload_crc: None,
        }
    }
}
