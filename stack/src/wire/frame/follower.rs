//! The headers a batch of one flow's segments share, and the check of the next frame against
//! them in place: the receive path's common case (a sender's segments back to back, headers
//! equal but for lengths, sequence numbers and checksums) without parsing each frame's headers
//! into addresses, ports and options again (docs/architecture.md, "Runs of segments").
//!
//! A frame follows when its header octets are those of the batch's first frame — which parsed
//! — but for the fields a follower may change: IPv4 total length, identification and header
//! checksum, IPv6 payload length, the TCP sequence number, PSH and the TCP checksum. Every
//! other octet equal, [`parse_tcp_frame_with_payload_crc`](super::parse_tcp_frame_with_payload_crc)
//! would find the same addresses, ports, VLAN tag, control bits but PSH, window, urgent
//! pointer and options (`TcpRepr::continued_by`'s rule, and GRO's, which also compares the
//! octets); the lengths and both checksums are checked here as that parse checks them. Any
//! other frame is not a follower, and goes through the parse.

use super::super::checksum;
use super::super::ethernet::{EthernetFrame, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use super::super::ip::{IPV4_HEADER_LEN, IPV6_HEADER_LEN};
use super::super::tcp::{TcpFlags, TcpPacket};
use mpa::seq::SeqNumber;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Header octets compared, at most: Ethernet with a VLAN tag (18), IPv4 with options (60), TCP
/// with options (60), rounded up to whole 64-bit words.
const MAX_WORDS: usize = 18;

/// The TCP control bit a follower may set or clear.
const PSH: u8 = 0x08;

/// The network layer of the batch's frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Network {
    /// IPv4, its header `header_len` octets; the pseudo-header's addresses.
    V4 {
        header_len: usize,
        src: Ipv4Addr,
        dst: Ipv4Addr,
    },
    /// IPv6 (no extension header); the pseudo-header's addresses.
    V6 { src: Ipv6Addr, dst: Ipv6Addr },
}

/// The header octets of a batch's first frame, with what a follower may change masked out.
/// Empty (no frame follows) until [`BatchHeader::take`] takes a frame's.
#[derive(Debug, Clone)]
pub struct BatchHeader {
    /// The header octets (up to the payload's first offset, `payload_at`) as native-endian
    /// words: whole words from the frame's start, the last one the header's last eight
    /// octets.
    words: [u64; MAX_WORDS],
    mask: [u64; MAX_WORDS],
    /// Words compared; 0: empty.
    n_words: usize,
    network: Network,
    ip_at: usize,
    tcp_at: usize,
    payload_at: usize,
}

/// A frame that follows a [`BatchHeader`]: what differs from the batch's first frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Follower<'f> {
    /// Its sequence number.
    pub seq_number: SeqNumber,
    /// The control bits but ACK (as `TcpRepr::flags`): the first frame's, PSH maybe not.
    pub flags: TcpFlags,
    /// The TCP payload (Ethernet padding left out); never empty.
    pub payload: &'f [u8],
    /// The payload's CRC32c when asked for and the TCP checksum was verified (as
    /// [`TcpFrame::payload_crc`](super::TcpFrame::payload_crc)).
    pub payload_crc: Option<u32>,
}

impl Default for BatchHeader {
    fn default() -> Self {
        BatchHeader {
            words: [0; MAX_WORDS],
            mask: [0; MAX_WORDS],
            n_words: 0,
            network: Network::V6 {
                src: Ipv6Addr::UNSPECIFIED,
                dst: Ipv6Addr::UNSPECIFIED,
            },
            ip_at: 0,
            tcp_at: 0,
            payload_at: 0,
        }
    }
}

/// The 64-bit words of `b` (a multiple of 8 octets), native-endian.
#[inline(always)]
fn words(b: &[u8]) -> impl Iterator<Item = u64> + '_ {
    b.chunks_exact(8)
        .map(|w| u64::from_ne_bytes(w.try_into().unwrap_or_default()))
}

/// The native-endian word of the eight octets at `at` (0 where `b` ends before them).
#[inline(always)]
fn word_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .map_or(0, |w| u64::from_ne_bytes(w.try_into().unwrap_or_default()))
}

#[inline(always)]
fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

impl BatchHeader {
    /// Takes the headers of `frame`, a frame that [`parse_tcp_frame`](super::parse_tcp_frame)
    /// accepted, as the batch's. `false` (and empty: nothing follows) for anything but
    /// Ethernet / IPv4 or IPv6 / TCP.
    pub fn take(&mut self, frame: &[u8]) -> bool {
        self.n_words = 0;
        self.take_layout(frame).is_some()
    }

    fn take_layout(&mut self, frame: &[u8]) -> Option<()> {
        let eth = EthernetFrame::new_checked(frame).ok()?;
        let ip_at = eth.header_len();
        let ip = frame.get(ip_at..)?;
        let v4 = |at: usize| -> Option<Ipv4Addr> {
            Some(Ipv4Addr::from(
                <[u8; 4]>::try_from(ip.get(at..at + 4)?).ok()?,
            ))
        };
        let v6 = |at: usize| -> Option<Ipv6Addr> {
            Some(Ipv6Addr::from(
                <[u8; 16]>::try_from(ip.get(at..at + 16)?).ok()?,
            ))
        };
        // What a follower may change in the network header: offsets from its start.
        let (network, tcp_at, may_change): (_, _, &[usize]) = match eth.ethertype() {
            ETHERTYPE_IPV4 => {
                let header_len = usize::from(ip.first()? & 0x0f) * 4;
                if header_len < IPV4_HEADER_LEN {
                    return None;
                }
                let (src, dst) = (v4(12)?, v4(16)?);
                let network = Network::V4 {
                    header_len,
                    src,
                    dst,
                };
                // Total length, identification, header checksum.
                (network, ip_at + header_len, &[2, 3, 4, 5, 10, 11])
            }
            ETHERTYPE_IPV6 => {
                let (src, dst) = (v6(8)?, v6(24)?);
                // Payload length.
                (Network::V6 { src, dst }, ip_at + IPV6_HEADER_LEN, &[4, 5])
            }
            _ => return None,
        };
        let tcp = TcpPacket::new_checked(frame.get(tcp_at..)?).ok()?;
        let payload_at = tcp_at + tcp.header_len();
        let n_words = payload_at.div_ceil(8);
        if n_words > MAX_WORDS || payload_at < 8 {
            return None;
        }
        let mut bytes = [0u8; MAX_WORDS * 8];
        let mut mask = [0u8; MAX_WORDS * 8];
        bytes[..payload_at].copy_from_slice(frame.get(..payload_at)?);
        mask[..payload_at].fill(0xff);
        for &at in may_change {
            mask[ip_at + at] = 0;
        }
        // Sequence number and checksum; of the control bits, PSH.
        for at in [4, 5, 6, 7, 16, 17] {
            mask[tcp_at + at] = 0;
        }
        mask[tcp_at + 13] &= !PSH;
        // Whole words, then the header's last eight octets (overlapping the word before
        // them unless the header ends on a word): no octet past the header is read.
        let last = payload_at - 8;
        let at = |i: usize| if i + 1 == n_words { last } else { i * 8 };
        for i in 0..n_words {
            (self.words[i], self.mask[i]) = (word_at(&bytes, at(i)), word_at(&mask, at(i)));
        }
        self.network = network;
        (self.ip_at, self.tcp_at, self.payload_at) = (ip_at, tcp_at, payload_at);
        self.n_words = n_words;
        Some(())
    }

    /// `frame` as a follower of the batch's first frame, its TCP checksum verified when
    /// `verify_tcp_checksum` and then, when `take_crc`, its payload's CRC32c taken in the same
    /// pass. `None` for any frame that is not one (the caller parses it), a bad IPv4 header
    /// checksum or TCP checksum included (the parse drops and counts it).
    #[inline]
    pub fn follower<'f>(
        &self,
        frame: &'f [u8],
        verify_tcp_checksum: bool,
        take_crc: bool,
    ) -> Option<Follower<'f>> {
        let n = self.n_words;
        let head = frame.get(..self.payload_at)?;
        let (Some(body), Some(last)) = (n.checked_sub(1), head.len().checked_sub(8)) else {
            return None;
        };
        let (&t, &m) = self.words.get(body).zip(self.mask.get(body))?;
        let mut diff = (word_at(head, last) ^ t) & m;
        for ((w, t), m) in words(head.get(..body * 8)?)
            .zip(&self.words)
            .zip(&self.mask)
        {
            diff |= (w ^ t) & m;
        }
        if diff != 0 {
            return None;
        }
        let (tcp_len, ip_end) = match self.network {
            Network::V4 { header_len, .. } => {
                let total = usize::from(be16(frame, self.ip_at + 2)?);
                // RFC 1122 §3.2.1.2: the header checksum verified, as the parse does.
                let h = frame.get(self.ip_at..self.ip_at + header_len)?;
                if checksum::fold(checksum::sum_header(0, h)) != 0xffff {
                    return None;
                }
                (total.checked_sub(header_len)?, self.ip_at + total)
            }
            Network::V6 { .. } => {
                let len = usize::from(be16(frame, self.ip_at + 4)?);
                (len, self.tcp_at + len)
            }
        };
        // A payload of at least one octet, within the frame (Ethernet padding may follow).
        if ip_end <= self.payload_at || ip_end > frame.len() {
            return None;
        }
        let segment = frame.get(self.tcp_at..ip_end)?;
        let payload = frame.get(self.payload_at..ip_end)?;
        let mut payload_crc = None;
        if verify_tcp_checksum {
            let acc = match self.network {
                Network::V4 { src, dst, .. } => {
                    checksum::pseudo_header_v4(src, dst, tcp_len as u32)
                }
                Network::V6 { src, dst } => checksum::pseudo_header_v6(src, dst, tcp_len as u32),
            };
            payload_crc =
                checksum::verify_tcp(acc, segment, self.payload_at - self.tcp_at, take_crc)?;
        }
        let tcp = TcpPacket::new_unchecked(segment);
        Some(Follower {
            seq_number: tcp.seq_number(),
            flags: tcp.flags().without(TcpFlags::ACK),
            payload,
            payload_crc,
        })
    }
}
