//! Crafted Ethernet frames, the one place for them. [`Frame`] bends every header field the
//! XDP program parses (checksums left zero: the program does not check them); well-formed
//! frames with checksums come from `etherparse`'s builder ([`udp_v4`]).

use mpa::wire::ddp::{DdpRepr, RdmapOpcode};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};

pub const ETH_P_IP: u16 = 0x0800;
pub const ETH_P_ARP: u16 = 0x0806;
pub const ETH_P_IPV6: u16 = 0x86dd;
pub const ETH_P_8021Q: u16 = 0x8100;
pub const ETH_P_8021AD: u16 = 0x88a8;
pub const IPPROTO_ICMP: u8 = 1;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_ICMPV6: u8 = 58;
pub const IPV6_HOPOPTS: u8 = 0;
pub const IPV6_ROUTING: u8 = 43;
pub const IPV6_FRAGMENT: u8 = 44;
pub const IPV6_ESP: u8 = 50;
pub const IPV6_AH: u8 = 51;
pub const IPV6_NONXT: u8 = 59;
pub const IPV6_DSTOPTS: u8 = 60;

/// One IPv6 extension header, emitted between the fixed header and the TCP header (each
/// names the next one; the last names the frame's `next`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ext {
    /// Hop-by-hop, routing or destination options (`kind`): `len8` 8-octet units beyond
    /// the first, padded with PadN-like octets.
    Opts { kind: u8, len8: u8 },
    /// Fragment header: offset in 8-octet units, more-fragments flag.
    Fragment { offset: u16, more: bool },
    /// Authentication header with a 4-octet ICV (16 octets).
    Ah,
}

impl Ext {
    fn kind(self) -> u8 {
        match self {
            Ext::Opts { kind, .. } => kind,
            Ext::Fragment { .. } => IPV6_FRAGMENT,
            Ext::Ah => IPV6_AH,
        }
    }

    fn emit(self, next: u8, b: &mut Vec<u8>) {
        match self {
            Ext::Opts { len8, .. } => {
                b.extend_from_slice(&[next, len8]);
                b.resize(b.len() + 6 + 8 * usize::from(len8), 1);
            }
            Ext::Fragment { offset, more } => {
                b.extend_from_slice(&[next, 0]);
                b.extend_from_slice(&((offset << 3) | u16::from(more)).to_be_bytes());
                b.extend_from_slice(&0x1234_5678u32.to_be_bytes());
            }
            Ext::Ah => {
                // Payload Len = length in 4-octet units minus 2: 16 octets -> 2.
                b.extend_from_slice(&[next, 2, 0, 0]);
                b.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, 1, 0xaa, 0xbb, 0xcc, 0xdd]);
            }
        }
    }

    fn len(self) -> usize {
        match self {
            Ext::Opts { len8, .. } => 8 + 8 * usize::from(len8),
            Ext::Fragment { .. } => 8,
            Ext::Ah => 16,
        }
    }
}

pub const DST_MAC: [u8; 6] = [0xff; 6];
pub const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

#[derive(Debug, Clone)]
pub enum Ip {
    V4 {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        /// Header length in 32-bit words (5..=15 valid).
        ihl: u8,
        version: u8,
        frag_off: u16,
        proto: u8,
    },
    V6 {
        src: Ipv6Addr,
        dst: Ipv6Addr,
        version: u8,
        /// The upper layer's protocol (after any extension headers).
        next: u8,
        /// Extension headers, in order.
        ext: Vec<Ext>,
    },
}

/// A TCP segment from `src` to `dst` in an Ethernet frame; every field can be bent.
#[derive(Debug, Clone)]
pub struct Frame {
    /// TPIDs of VLAN tags, outermost first.
    pub tags: Vec<u16>,
    pub ip: Ip,
    pub sport: u16,
    pub dport: u16,
    /// TCP data offset field (32-bit words). The header emitted is max(doff, 5) words long.
    pub doff: u8,
    pub payload: usize,
    /// Cut the frame to this many octets.
    pub truncate: Option<usize>,
}

impl Frame {
    pub fn tcp(src: SocketAddr, dst: SocketAddr) -> Self {
        let ip = match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Ip::V4 {
                src: s,
                dst: d,
                ihl: 5,
                version: 4,
                frag_off: 0x4000, // DF
                proto: IPPROTO_TCP,
            },
            (IpAddr::V6(s), IpAddr::V6(d)) => Ip::V6 {
                src: s,
                dst: d,
                version: 6,
                next: IPPROTO_TCP,
                ext: Vec::new(),
            },
            _ => panic!("mixed families"),
        };
        Self {
            tags: Vec::new(),
            ip,
            sport: src.port(),
            dport: dst.port(),
            doff: 5,
            payload: 16,
            truncate: None,
        }
    }

    pub fn tagged(mut self, tpids: &[u16]) -> Self {
        self.tags = tpids.to_vec();
        self
    }

    pub fn truncated(mut self, len: usize) -> Self {
        self.truncate = Some(len);
        self
    }

    pub fn with_doff(mut self, doff: u8) -> Self {
        self.doff = doff;
        self
    }

    /// Bends IPv4 header fields; panics on an IPv6 frame.
    pub fn v4(mut self, f: impl FnOnce(&mut u8, &mut u8, &mut u16, &mut u8)) -> Self {
        match &mut self.ip {
            Ip::V4 {
                ihl,
                version,
                frag_off,
                proto,
                ..
            } => f(ihl, version, frag_off, proto),
            Ip::V6 { .. } => panic!("not an IPv4 frame"),
        }
        self
    }

    /// Bends IPv6 header fields (version, and the next header of the fixed header or, with
    /// extension headers, of the last one); panics on an IPv4 frame.
    pub fn v6(mut self, f: impl FnOnce(&mut u8, &mut u8)) -> Self {
        match &mut self.ip {
            Ip::V6 { version, next, .. } => f(version, next),
            Ip::V4 { .. } => panic!("not an IPv6 frame"),
        }
        self
    }

    /// IPv6 extension headers between the fixed header and the upper layer; panics on IPv4.
    pub fn v6_ext(mut self, headers: &[Ext]) -> Self {
        match &mut self.ip {
            Ip::V6 { ext, .. } => *ext = headers.to_vec(),
            Ip::V4 { .. } => panic!("not an IPv6 frame"),
        }
        self
    }

    pub fn bytes(&self) -> Vec<u8> {
        let tcp_len = usize::from(self.doff.max(5)) * 4;
        let mut b = Vec::with_capacity(128);
        b.extend_from_slice(&DST_MAC);
        b.extend_from_slice(&SRC_MAC);
        for (i, tpid) in self.tags.iter().enumerate() {
            b.extend_from_slice(&tpid.to_be_bytes());
            b.extend_from_slice(&(5 + i as u16).to_be_bytes()); // VID 5, 6, ...
        }
        match &self.ip {
            Ip::V4 {
                src,
                dst,
                ihl,
                version,
                frag_off,
                proto,
            } => {
                let hlen = usize::from(*ihl).max(5) * 4;
                let total = (hlen + tcp_len + self.payload) as u16;
                b.extend_from_slice(&ETH_P_IP.to_be_bytes());
                b.push((version << 4) | (ihl & 0x0f));
                b.push(0);
                b.extend_from_slice(&total.to_be_bytes());
                b.extend_from_slice(&[0x12, 0x34]);
                b.extend_from_slice(&frag_off.to_be_bytes());
                b.push(64);
                b.push(*proto);
                b.extend_from_slice(&[0, 0]);
                b.extend_from_slice(&src.octets());
                b.extend_from_slice(&dst.octets());
                b.resize(b.len() + hlen - 20, 1); // options: NOP
            }
            Ip::V6 {
                src,
                dst,
                version,
                next,
                ext,
            } => {
                let ext_len: usize = ext.iter().map(|e| e.len()).sum();
                let first = ext.first().map_or(*next, |e| e.kind());
                b.extend_from_slice(&ETH_P_IPV6.to_be_bytes());
                b.extend_from_slice(&[version << 4, 0, 0, 0]);
                b.extend_from_slice(&((ext_len + tcp_len + self.payload) as u16).to_be_bytes());
                b.push(first);
                b.push(64);
                b.extend_from_slice(&src.octets());
                b.extend_from_slice(&dst.octets());
                for (i, e) in ext.iter().enumerate() {
                    let after = ext.get(i + 1).map_or(*next, |n| n.kind());
                    e.emit(after, &mut b);
                }
            }
        }
        b.extend_from_slice(&self.sport.to_be_bytes());
        b.extend_from_slice(&self.dport.to_be_bytes());
        b.extend_from_slice(&1u32.to_be_bytes()); // seq
        b.extend_from_slice(&1u32.to_be_bytes()); // ack
        b.push(self.doff << 4);
        b.push(0x18); // PSH ACK
        b.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]); // window, checksum, urgent
        b.resize(b.len() + tcp_len - 20, 1); // options: NOP
        b.extend((0..self.payload).map(|i| i as u8));
        if let Some(n) = self.truncate {
            b.truncate(n);
        }
        b
    }
}

/// An ARP request for 10.0.0.2 (Ethernet frame, unpadded).
pub fn arp_request() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&DST_MAC);
    b.extend_from_slice(&SRC_MAC);
    b.extend_from_slice(&ETH_P_ARP.to_be_bytes());
    b.extend_from_slice(&[0, 1, 0x08, 0, 6, 4, 0, 1]);
    b.extend_from_slice(&SRC_MAC);
    b.extend_from_slice(&[10, 0, 0, 1]);
    b.extend_from_slice(&[0; 6]);
    b.extend_from_slice(&[10, 0, 0, 2]);
    b
}

/// Ethernet header with EtherType `ethertype`, followed by `rest`.
pub fn raw(ethertype: u16, rest: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&DST_MAC);
    b.extend_from_slice(&SRC_MAC);
    b.extend_from_slice(&ethertype.to_be_bytes());
    b.extend_from_slice(rest);
    b
}

/// A well-formed IPv4/UDP frame (IP and UDP checksums filled in) from `src` to `dst`.
pub fn udp_v4(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: SocketAddrV4,
    dst: SocketAddrV4,
    payload: &[u8],
) -> Vec<u8> {
    let builder = etherparse::PacketBuilder::ethernet2(src_mac, dst_mac)
        .ipv4(src.ip().octets(), dst.ip().octets(), 64)
        .udp(src.port(), dst.port());
    let mut frame = Vec::with_capacity(builder.size(payload.len()));
    builder
        .write(&mut frame, payload)
        .expect("an IPv4/UDP frame");
    frame
}

/// The TCP ports (source, destination) of an untagged IPv4 frame.
pub fn v4_ports(frame: &[u8]) -> (u16, u16) {
    let p = |at: usize| u16::from_be_bytes([frame[at], frame[at + 1]]);
    (p(34), p(36))
}

/// A DDP tagged RDMA Write ULPDU (last, MSN 1) of `n` octets `i % 251` for STag `stag` at
/// tagged offset `to`.
pub fn rdma_write(stag: u32, to: u64, n: usize) -> Vec<u8> {
    let h = DdpRepr::Tagged {
        last: true,
        opcode: RdmapOpcode::RdmaWrite,
        stag,
        to,
    };
    let mut v = vec![0u8; h.header_len() + n];
    h.emit(&mut v, 1).unwrap();
    for (i, b) in v[h.header_len()..].iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    v
}
