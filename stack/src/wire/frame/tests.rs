use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use mpa::seq::SeqNumber;
use proptest::prelude::*;

use super::*;
use crate::wire::ethernet::{MacAddr, ETHERTYPE_IPV4};
use crate::wire::ip::Ipv4Packet;
use crate::wire::tcp::{TcpFlags, TcpOptions, TcpPacket, TcpRepr};
use std::net::SocketAddr;

// Fixtures built by an independent script (Python `struct`, RFC 1071 sum); the tests
// below check their checksums again with `naive_sum`.

/// 52:54:00:ab:cd:ef -> 52:54:00:12:34:56, 192.168.122.1:40000 -> 192.168.122.57:7777,
/// IPv4 ID 0x1c46 DF TTL 64; TCP ACK|PSH seq 0x9e3779b9 ack 0x7f4a7c15 window 502,
/// NOP NOP TS(0x0a1b2c3d, 0x00c0ffee), payload "MPA ID Req Frame".
const FRAME_V4: [u8; 82] = [
    0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x52, 0x54, 0x00, 0xab, 0xcd, 0xef, 0x08, 0x00, 0x45, 0x00,
    0x00, 0x44, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x06, 0xa8, 0xe2, 0xc0, 0xa8, 0x7a, 0x01, 0xc0, 0xa8,
    0x7a, 0x39, 0x9c, 0x40, 0x1e, 0x61, 0x9e, 0x37, 0x79, 0xb9, 0x7f, 0x4a, 0x7c, 0x15, 0x80, 0x18,
    0x01, 0xf6, 0x9c, 0xa4, 0x00, 0x00, 0x01, 0x01, 0x08, 0x0a, 0x0a, 0x1b, 0x2c, 0x3d, 0x00, 0xc0,
    0xff, 0xee, 0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x71, 0x20, 0x46, 0x72, 0x61,
    0x6d, 0x65,
];
/// 52:54:00:12:34:56 -> 52:54:00:ab:cd:ef, [2001:db8::1]:40001 -> [2001:db8::aa]:7777,
/// flow label 0x12345, hop limit 64; TCP ACK|PSH seq 0xfffffff0 ack 1 window 1024,
/// NOP NOP TS, payload "MPA ID Rep Frame!" (odd segment length: 49).
const FRAME_V6: [u8; 103] = [
    0x52, 0x54, 0x00, 0xab, 0xcd, 0xef, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x86, 0xdd, 0x60, 0x01,
    0x23, 0x45, 0x00, 0x31, 0x06, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0xaa, 0x9c, 0x41, 0x1e, 0x61, 0xff, 0xff, 0xff, 0xf0, 0x00, 0x00,
    0x00, 0x01, 0x80, 0x18, 0x04, 0x00, 0xa6, 0x67, 0x00, 0x00, 0x01, 0x01, 0x08, 0x0a, 0x0a, 0x1b,
    0x2c, 0x3d, 0x00, 0xc0, 0xff, 0xee, 0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x70,
    0x20, 0x46, 0x72, 0x61, 0x6d, 0x65, 0x21,
];
/// A minimum (60-octet) frame: 192.168.122.57:7777 -> 192.168.122.1:40000, IPv4 ID 0 DF
/// TTL 64, a bare 20-octet ACK (seq 0x7f4a7c15, ack 0x9e3779c9, window 501), then six
/// octets of non-zero Ethernet padding.
const FRAME_MIN: [u8; 60] = [
    0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x52, 0x54, 0x00, 0xab, 0xcd, 0xef, 0x08, 0x00, 0x45, 0x00,
    0x00, 0x28, 0x00, 0x00, 0x40, 0x00, 0x40, 0x06, 0xc5, 0x44, 0xc0, 0xa8, 0x7a, 0x39, 0xc0, 0xa8,
    0x7a, 0x01, 0x1e, 0x61, 0x9c, 0x40, 0x7f, 0x4a, 0x7c, 0x15, 0x9e, 0x37, 0x79, 0xc9, 0x50, 0x10,
    0x01, 0xf5, 0x6a, 0x51, 0x00, 0x00, 0xde, 0xad, 0xbe, 0xef, 0x55, 0xaa,
];

const MAC_A: MacAddr = [0x52, 0x54, 0x00, 0xab, 0xcd, 0xef];
const MAC_B: MacAddr = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];

/// RFC 1071 the slow way: 16-bit words, end-around carry, odd octet padded with zero.
fn naive_sum(parts: &[&[u8]]) -> u16 {
    let all: Vec<u8> = parts.concat();
    let mut s: u32 = 0;
    for pair in all.chunks(2) {
        s += u32::from(pair[0]) << 8 | u32::from(*pair.get(1).unwrap_or(&0));
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Independent check of a whole IPv4/TCP frame's two checksums (no VLAN tag).
fn v4_checksums_ok(f: &[u8]) -> (bool, bool) {
    let ip = &f[14..];
    let hl = usize::from(ip[0] & 0xf) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let seg = &ip[hl..total];
    let pseudo = [&ip[12..20], &[0, 6], &(seg.len() as u16).to_be_bytes()[..]].concat();
    (
        naive_sum(&[&ip[..hl]]) == 0xffff,
        naive_sum(&[&pseudo, seg]) == 0xffff,
    )
}

/// Independent check of an IPv6/TCP frame's TCP checksum (no VLAN tag).
fn v6_checksum_ok(f: &[u8]) -> bool {
    let ip = &f[14..];
    let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    let seg = &ip[40..40 + plen];
    let pseudo = [&ip[8..40], &(plen as u32).to_be_bytes()[..], &[0, 0, 0, 6]].concat();
    naive_sum(&[&pseudo, seg]) == 0xffff
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Inserts an 802.1Q tag (VID `vid`) after the MAC addresses.
fn tagged(f: &[u8], vid: u16) -> Vec<u8> {
    [&f[..12], &[0x81, 0x00], &vid.to_be_bytes()[..], &f[12..]].concat()
}

#[test]
fn fixtures_have_right_checksums() {
    assert_eq!(v4_checksums_ok(&FRAME_V4), (true, true));
    assert_eq!(v4_checksums_ok(&FRAME_MIN), (true, true));
    assert!(v6_checksum_ok(&FRAME_V6));
}

#[test]
fn parse_v4() {
    let f = parse_tcp_frame(&FRAME_V4, true).unwrap();
    assert_eq!(f.dst_mac, MAC_B);
    assert_eq!(f.src_mac, MAC_A);
    assert_eq!(f.vlan, None);
    assert_eq!(f.src, sa("192.168.122.1:40000"));
    assert_eq!(f.dst, sa("192.168.122.57:7777"));
    assert_eq!(f.ip_payload_len, 48);
    assert_eq!(f.tcp_offset, 34);
    assert_eq!(f.tcp.seq_number(), SeqNumber(0x9e37_79b9));
    assert_eq!(f.tcp.ack_number(), SeqNumber(0x7f4a_7c15));
    assert_eq!(f.tcp.flags(), TcpFlags::ACK | TcpFlags::PSH);
    assert_eq!(f.tcp.window_len(), 502);
    assert_eq!(f.tcp.payload(), b"MPA ID Req Frame");
    assert_eq!(&FRAME_V4[f.tcp_offset + 32..], b"MPA ID Req Frame");
    let opts = TcpRepr::parse(&f.tcp).unwrap().options;
    assert_eq!(opts.timestamps.unwrap().tsval, 0x0a1b_2c3d);
}

#[test]
fn parse_v6() {
    let f = parse_tcp_frame(&FRAME_V6, true).unwrap();
    assert_eq!(f.src_mac, MAC_B);
    assert_eq!(f.dst_mac, MAC_A);
    assert_eq!(f.src, sa("[2001:db8::1]:40001"));
    assert_eq!(f.dst, sa("[2001:db8::aa]:7777"));
    assert_eq!(f.ip_payload_len, 49);
    assert_eq!(f.tcp_offset, 54);
    assert_eq!(f.tcp.seq_number(), SeqNumber(0xffff_fff0));
    assert_eq!(f.tcp.ack_number(), SeqNumber(1));
    assert_eq!(f.tcp.payload(), b"MPA ID Rep Frame!");
}

#[test]
fn ethernet_padding_is_trimmed() {
    let f = parse_tcp_frame(&FRAME_MIN, true).unwrap();
    assert_eq!(f.ip_payload_len, 20);
    assert_eq!(f.tcp.into_inner().len(), 20);
    assert!(f.tcp.payload().is_empty());
    assert_eq!(f.src, sa("192.168.122.57:7777"));
    assert_eq!(f.tcp.seq_number(), SeqNumber(0x7f4a_7c15));
    // The padding is covered by no checksum: changing it changes nothing.
    let mut b = FRAME_MIN;
    b[54..].fill(0x00);
    assert!(parse_tcp_frame(&b, true).is_ok());
    // Frames cut inside the padding still parse; cut inside the packet they do not.
    for len in 0..FRAME_MIN.len() {
        assert_eq!(
            parse_tcp_frame(&FRAME_MIN[..len], true).is_ok(),
            len >= 54,
            "len {len}"
        );
    }
}

#[test]
fn truncated_at_every_length() {
    let v4_tagged = tagged(&FRAME_V4, 7);
    let v6_tagged = tagged(&FRAME_V6, 7);
    for frame in [&FRAME_V4[..], &FRAME_V6[..], &v4_tagged, &v6_tagged] {
        assert!(parse_tcp_frame(frame, true).is_ok());
        for len in 0..frame.len() {
            for verify in [false, true] {
                assert!(
                    parse_tcp_frame(&frame[..len], verify).is_err(),
                    "len {len} of {}",
                    frame.len()
                );
            }
        }
    }
}

#[test]
fn vlan_tagged_frames_parse() {
    for (tpid, frame) in [(0x8100u16, &FRAME_V4[..]), (0x88a8, &FRAME_V6[..])] {
        let mut b = tagged(frame, 0x2064); // PCP 1, VID 100
        b[12..14].copy_from_slice(&tpid.to_be_bytes());
        let plain = parse_tcp_frame(frame, true).unwrap();
        let f = parse_tcp_frame(&b, true).unwrap();
        let tag = f.vlan.unwrap();
        assert_eq!((tag.tpid, tag.vid(), tag.pcp()), (tpid, 100, 1));
        assert_eq!((f.src, f.dst), (plain.src, plain.dst));
        assert_eq!(f.tcp_offset, plain.tcp_offset + 4);
        assert_eq!(f.tcp.payload(), plain.tcp.payload());
    }
    // Two stacked tags: the inner TPID is not IP.
    let b = tagged(&tagged(&FRAME_V4, 5), 6);
    assert_eq!(
        parse_tcp_frame(&b, true).unwrap_err(),
        FrameError::NotIp { ethertype: 0x8100 }
    );
}

#[test]
fn not_ip_and_not_tcp() {
    let mut b = FRAME_V4;
    b[12..14].copy_from_slice(&0x0806u16.to_be_bytes()); // ARP
    assert_eq!(
        parse_tcp_frame(&b, true).unwrap_err(),
        FrameError::NotIp { ethertype: 0x0806 }
    );
    let mut b = FRAME_V4;
    b[14 + 9] = 17; // UDP
    Ipv4Packet::new_unchecked(&mut b[14..]).fill_checksum();
    assert_eq!(
        parse_tcp_frame(&b, true).unwrap_err(),
        FrameError::NotTcp { protocol: 17 }
    );
    let mut b = FRAME_V6;
    b[14 + 6] = 58; // ICMPv6
    assert_eq!(
        parse_tcp_frame(&b, true).unwrap_err(),
        FrameError::NotTcp { protocol: 58 }
    );
    // An IPv6 packet behind the IPv4 EtherType, and the reverse.
    let mut b = FRAME_V6;
    b[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    assert_eq!(
        parse_tcp_frame(&b, true).unwrap_err(),
        FrameError::Ip(IpError::BadVersion(6))
    );
}

#[test]
fn fragments_are_errors() {
    for (word, mf, offset) in [
        (0x2000u16, true, 0),
        (0x4001, false, 8),
        (0x2010, true, 128),
    ] {
        let mut b = FRAME_V4;
        b[14 + 6..14 + 8].copy_from_slice(&word.to_be_bytes());
        Ipv4Packet::new_unchecked(&mut b[14..]).fill_checksum();
        assert_eq!(
            parse_tcp_frame(&b, false).unwrap_err(),
            FrameError::Ip(IpError::Fragment {
                more_fragments: mf,
                offset
            })
        );
    }
}

#[test]
fn ipv6_extension_headers_are_unsupported() {
    for nh in [0u8, 43, 44, 60] {
        let mut b = FRAME_V6;
        b[14 + 6] = nh;
        assert_eq!(
            parse_tcp_frame(&b, false).unwrap_err(),
            FrameError::Ip(IpError::Unsupported { next_header: nh })
        );
    }
}

#[test]
fn bad_ipv4_header_checksum() {
    for i in [14 + 1, 14 + 4, 14 + 8, 14 + 10, 14 + 11, 14 + 12, 14 + 19] {
        let mut b = FRAME_V4;
        b[i] ^= 0x01;
        assert_eq!(
            parse_tcp_frame(&b, false).unwrap_err(),
            FrameError::Ip(IpError::BadChecksum),
            "octet {i}"
        );
    }
}

/// Every single-octet change in the TCP segment, or in the addresses of the IPv6
/// pseudo-header, fails the TCP checksum. (For IPv4 an address change fails the header
/// checksum first.)
#[test]
fn any_flipped_octet_fails_tcp_checksum() {
    for (frame, tcp_at) in [
        (&FRAME_V4[..], 34),
        (&FRAME_V6[..], 54),
        (&FRAME_MIN[..], 34),
    ] {
        let tcp_end = tcp_at + parse_tcp_frame(frame, true).unwrap().ip_payload_len;
        for i in tcp_at..tcp_end {
            for mask in [0x01u8, 0x80, 0xff] {
                let mut b = frame.to_vec();
                b[i] ^= mask;
                let err = parse_tcp_frame(&b, true).unwrap_err();
                // The data-offset nibble is the only octet whose change can make the
                // header itself malformed first.
                let data_offset_changed = i == tcp_at + 12 && mask & 0xf0 != 0;
                if !data_offset_changed {
                    assert_eq!(err, FrameError::BadTcpChecksum, "octet {i} mask {mask:#x}");
                } else {
                    assert!(
                        matches!(err, FrameError::BadTcpChecksum | FrameError::Tcp(_)),
                        "octet {i} mask {mask:#x}: {err:?}"
                    );
                }
                if !data_offset_changed {
                    assert!(parse_tcp_frame(&b, false).is_ok(), "octet {i}");
                }
            }
        }
    }
    for i in 14 + 8..14 + 40 {
        let mut b = FRAME_V6;
        b[i] ^= 0x01;
        assert_eq!(
            parse_tcp_frame(&b, true).unwrap_err(),
            FrameError::BadTcpChecksum
        );
    }
}

#[test]
fn template_lengths_and_families() {
    let t4 = FrameTemplate::new(MAC_A, MAC_B, sa("10.0.0.1:1"), sa("10.0.0.2:2")).unwrap();
    assert_eq!(t4.l2l3_len(), 34);
    let t6 = FrameTemplate::new(MAC_A, MAC_B, sa("[::1]:1"), sa("[::2]:2")).unwrap();
    assert_eq!(t6.l2l3_len(), 54);
    assert!(matches!(
        FrameTemplate::new(MAC_A, MAC_B, sa("10.0.0.1:1"), sa("[::2]:2")),
        Err(FrameError::FamilyMismatch { .. })
    ));
    // A dual-stack socket's view of an IPv4 connection builds IPv4 frames.
    let m = FrameTemplate::new(
        MAC_A,
        MAC_B,
        sa("[::ffff:10.0.0.1]:1"),
        sa("[::ffff:10.0.0.2]:2"),
    )
    .unwrap();
    assert_eq!(m, t4);
    assert_eq!(m.src(), sa("10.0.0.1:1"));
    assert_eq!((m.src_mac(), m.dst_mac()), (MAC_A, MAC_B));
}

/// `finish` reproduces the independently built minimum frame octet for octet.
#[test]
fn finish_matches_fixture() {
    let t = FrameTemplate::new(
        MAC_A,
        MAC_B,
        sa("192.168.122.57:7777"),
        sa("192.168.122.1:40000"),
    )
    .unwrap();
    let mut buf = [0xa5u8; 128];
    buf[34..54].copy_from_slice(&FRAME_MIN[34..54]);
    buf[34 + 16..34 + 18].fill(0); // as poll_transmit leaves it
    assert_eq!(t.finish(&mut buf, 20).unwrap(), 54);
    assert_eq!(&buf[..54], &FRAME_MIN[..54]);
    // A stale checksum field is ignored, not summed.
    buf[34 + 16..34 + 18].fill(0x77);
    assert_eq!(t.finish(&mut buf, 20).unwrap(), 54);
    assert_eq!(&buf[..54], &FRAME_MIN[..54]);
}

#[test]
fn finish_errors() {
    let t = FrameTemplate::new(MAC_A, MAC_B, sa("10.0.0.1:1"), sa("10.0.0.2:2")).unwrap();
    let mut buf = [0u8; 60];
    assert_eq!(
        t.finish(&mut buf, 27).unwrap_err(),
        FrameError::BufferTooShort { need: 61, have: 60 }
    );
    assert_eq!(
        t.finish(&mut buf, usize::MAX).unwrap_err(),
        FrameError::BufferTooShort {
            need: usize::MAX,
            have: 60
        }
    );
    // Data offset 0: not a TCP header.
    assert_eq!(
        t.finish(&mut buf, 20).unwrap_err(),
        FrameError::Tcp(TcpWireError::BadDataOffset(0))
    );
    assert_eq!(buf, [0u8; 60], "nothing written on error");
    let mut big = vec![0u8; 34 + 65_516];
    big[34 + 12] = 0x50;
    assert_eq!(
        t.finish(&mut big, 65_516).unwrap_err(),
        FrameError::Ip(IpError::PayloadTooLong(65_516))
    );
    assert_eq!(t.finish(&mut big, 65_515).unwrap(), 34 + 65_515);
    assert!(parse_tcp_frame(&big, true).is_ok());
}

fn repr(src_port: u16, dst_port: u16, seq: u32) -> TcpRepr {
    TcpRepr {
        src_port,
        dst_port,
        seq_number: SeqNumber(seq),
        ack_number: Some(SeqNumber(seq ^ 0x5555_5555)),
        flags: TcpFlags::PSH,
        window_len: 1000,
        urgent_at: 0,
        options: TcpOptions::default(),
    }
}

/// Writes `repr` and `payload` where the template wants them, finishes, parses back.
fn round_trip(t: &FrameTemplate, r: &TcpRepr, payload: &[u8]) {
    let mut buf = vec![0u8; 2048];
    let l = t.l2l3_len();
    let hl = r
        .emit(&mut TcpPacket::new_unchecked(&mut buf[l..]))
        .unwrap();
    buf[l + hl..l + hl + payload.len()].copy_from_slice(payload);
    let n = t.finish(&mut buf, hl + payload.len()).unwrap();
    assert_eq!(n, l + hl + payload.len());
    let f = parse_tcp_frame(&buf[..n], true).unwrap();
    assert_eq!((f.src_mac, f.dst_mac), (t.src_mac(), t.dst_mac()));
    assert_eq!(f.src.ip(), t.src().ip());
    assert_eq!(f.dst.ip(), t.dst().ip());
    assert_eq!((f.src.port(), f.dst.port()), (r.src_port, r.dst_port));
    assert_eq!(f.tcp.seq_number(), r.seq_number);
    assert_eq!(f.tcp.payload(), payload);
    assert_eq!(TcpRepr::parse(&f.tcp).unwrap(), *r);
    assert_eq!(f.tcp_offset, l);
    if t.src().is_ipv4() {
        assert_eq!(v4_checksums_ok(&buf[..n]), (true, true));
    } else {
        assert!(v6_checksum_ok(&buf[..n]));
    }
}

#[test]
fn round_trip_v4_and_v6() {
    let t4 = FrameTemplate::new(MAC_A, MAC_B, sa("10.1.2.3:7777"), sa("10.3.2.1:40000")).unwrap();
    let t6 = FrameTemplate::new(
        MAC_A,
        MAC_B,
        sa("[fd00::1:2]:7777"),
        sa("[fd00::3:4]:40000"),
    )
    .unwrap();
    for t in [t4, t6] {
        for len in [0, 1, 2, 3, 1460] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            round_trip(&t, &repr(7777, 40000, 0xdead_beef), &payload);
        }
    }
}

/// The hand-off the data path uses: `Connection::poll_transmit` writes the segment after
/// `l2l3_len` octets, `finish` completes it, and the frame parses with verification.
#[test]
fn round_trip_from_connection() {
    use crate::tcp::{Connection, HandoverState, TcpConfig};
    let now = Instant::now();
    let h = HandoverState {
        local_port: 7777,
        remote_port: 40000,
        snd_nxt: SeqNumber(0x1000),
        rcv_nxt: SeqNumber(0x2000),
        snd_wnd: 65535,
        rcv_wnd: 65535,
        rcv_wup: SeqNumber(0x2000),
        snd_wscale: 0,
        rcv_wscale: 0,
        mss: 1460,
        sack_permitted: false,
        timestamps: None,
    };
    for (ours, peer) in [
        ("192.168.122.57:7777", "192.168.122.1:40000"),
        ("[2001:db8::aa]:7777", "[2001:db8::1]:40000"),
    ] {
        let mut c = Connection::new(&h, &TcpConfig::default(), now).unwrap();
        assert_eq!(c.send(b"MPA ID Rep Frame"), 16);
        let t = FrameTemplate::new(MAC_B, MAC_A, sa(ours), sa(peer)).unwrap();
        let mut buf = [0u8; 2048];
        let l = t.l2l3_len();
        let tx = c.poll_transmit(now, &mut buf[l..]).unwrap();
        let n = t.finish(&mut buf, tx.len()).unwrap();
        let f = parse_tcp_frame(&buf[..n], true).unwrap();
        assert_eq!((f.src, f.dst), (sa(ours), sa(peer)));
        assert_eq!(f.tcp.seq_number(), SeqNumber(0x1000));
        assert_eq!(f.tcp.ack_number(), SeqNumber(0x2000));
        assert_eq!(f.tcp.payload(), b"MPA ID Rep Frame");
    }
}

#[test]
fn fuzz_entry_point_runs() {
    fuzz_parse_tcp_frame(&FRAME_V4);
    fuzz_parse_tcp_frame(&FRAME_V6);
    fuzz_parse_tcp_frame(&[]);
}

proptest! {
    #[test]
    fn never_panics_on_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        fuzz_parse_tcp_frame(&data);
    }

    /// Valid frames with a few octets overwritten reach deeper than random bytes.
    #[test]
    fn never_panics_on_mutated_frames(
        which in 0usize..3,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut b = [&FRAME_V4[..], &FRAME_V6[..], &FRAME_MIN[..]][which].to_vec();
        for (i, v) in edits {
            let i = i.index(b.len());
            b[i] = v;
        }
        fuzz_parse_tcp_frame(&b);
        fuzz_parse_tcp_frame(&b[..cut.index(b.len() + 1)]);
        // Against its own unchanged frame's header, the changed frame follows only where the
        // parse would batch it the same; its own header, taken, never panics.
        let first = [&FRAME_V4[..], &FRAME_V6[..], &FRAME_MIN[..]][which];
        let mut h = BatchHeader::default();
        prop_assert!(h.take(first));
        for frame in [&b[..], &b[..cut.index(b.len() + 1)]] {
            for (verify, crc) in [(true, true), (false, false)] {
                let got = h.follower(frame, verify, crc);
                if got.is_some() {
                    prop_assert_eq!(got, parsed_follower(first, frame, verify, crc));
                }
            }
        }
        let mut own = BatchHeader::default();
        if own.take(&b) {
            let _ = own.follower(&b, true, true);
        }
    }

    #[test]
    fn round_trips(
        v6 in any::<bool>(),
        a4 in any::<[u8; 4]>(), b4 in any::<[u8; 4]>(),
        a6 in any::<[u8; 16]>(), b6 in any::<[u8; 16]>(),
        ports in any::<(u16, u16)>(),
        seq in any::<u32>(),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let (s, d) = if v6 {
            (IpAddr::V6(Ipv6Addr::from(a6)), IpAddr::V6(Ipv6Addr::from(b6)))
        } else {
            (IpAddr::V4(Ipv4Addr::from(a4)), IpAddr::V4(Ipv4Addr::from(b4)))
        };
        // Mapped v6 addresses become v4 in the template; compare with what it kept.
        let t = FrameTemplate::new(MAC_A, MAC_B, SocketAddr::new(s, ports.0), SocketAddr::new(d, ports.1));
        let Ok(t) = t else { return Ok(()) }; // one mapped, one not: family mismatch
        round_trip(&t, &repr(ports.0, ports.1, seq), &payload);
    }
}

/// Known-good checksums: the fixtures' checksum fields (from the independent script) are
/// what the fast sum computes, and frames of every segment size up to a full 1448-octet
/// payload built by etherparse (another implementation) verify, and fail when one octet of
/// the payload changes.
#[test]
fn known_good_tcp_checksums() {
    let p = TcpPacket::new_checked(&FRAME_V4[34..]).unwrap();
    let (s4, d4) = (
        Ipv4Addr::new(192, 168, 122, 1),
        Ipv4Addr::new(192, 168, 122, 57),
    );
    assert_eq!(p.checksum(), 0x9ca4);
    assert_eq!(p.compute_checksum_v4(s4, d4), 0x9ca4);
    let p = TcpPacket::new_checked(&FRAME_MIN[34..54]).unwrap();
    assert_eq!(p.compute_checksum_v4(d4, s4), 0x6a51);
    let p = TcpPacket::new_checked(&FRAME_V6[54..]).unwrap();
    let s6: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let d6: Ipv6Addr = "2001:db8::aa".parse().unwrap();
    assert_eq!(p.compute_checksum_v6(s6, d6), 0xa667);

    let payload: Vec<u8> = (0..1448u32).map(|i| (i * 131 + 7) as u8).collect();
    for len in (0..=1448).step_by(7).chain([1447, 1448]) {
        let mut f = Vec::new();
        etherparse::PacketBuilder::ethernet2(MAC_A, MAC_B)
            .ipv4(s4.octets(), d4.octets(), 64)
            .tcp(40000, 7777, 0x9e37_79b9, 502)
            .ack(0x7f4a_7c15)
            .write(&mut f, &payload[..len])
            .unwrap();
        assert_eq!(v4_checksums_ok(&f), (true, true));
        assert!(parse_tcp_frame(&f, true).is_ok(), "v4 len {len}");
        // Taking the payload's CRC in the checksum's pass: the same verdict, the exact CRC,
        // none without verification.
        let g = parse_tcp_frame_with_payload_crc(&f, true, true).unwrap();
        assert_eq!(
            g.payload_crc,
            Some(mpa::crc::crc32c(&payload[..len])),
            "len {len}"
        );
        assert_eq!(parse_tcp_frame(&f, true).unwrap().payload_crc, None);
        let g = parse_tcp_frame_with_payload_crc(&f, false, true).unwrap();
        assert_eq!(g.payload_crc, None);
        // Not asked for: none, the checksum verified all the same.
        let g = parse_tcp_frame_with_payload_crc(&f, true, false).unwrap();
        assert_eq!(g.payload_crc, None);
        if len > 0 {
            let last = f.len() - 1;
            f[last] ^= 0x5a;
            assert!(parse_tcp_frame(&f, true).is_err(), "v4 len {len} corrupted");
            let e = parse_tcp_frame_with_payload_crc(&f, true, true).unwrap_err();
            assert_eq!(e, FrameError::BadTcpChecksum, "v4 len {len} corrupted");
            let e = parse_tcp_frame_with_payload_crc(&f, true, false).unwrap_err();
            assert_eq!(e, FrameError::BadTcpChecksum, "v4 len {len} corrupted");
        }
        let mut f = Vec::new();
        etherparse::PacketBuilder::ethernet2(MAC_B, MAC_A)
            .ipv6(s6.octets(), d6.octets(), 64)
            .tcp(40001, 7777, 0xffff_fff0, 1024)
            .ack(1)
            .write(&mut f, &payload[..len])
            .unwrap();
        assert!(v6_checksum_ok(&f));
        assert!(parse_tcp_frame(&f, true).is_ok(), "v6 len {len}");
        let g = parse_tcp_frame_with_payload_crc(&f, true, true).unwrap();
        assert_eq!(
            g.payload_crc,
            Some(mpa::crc::crc32c(&payload[..len])),
            "v6 len {len}"
        );
    }
}

/// A frame of `payload_len` octets of payload (v4 or v6), as a jumbo frame arrives.
fn jumbo(v6: bool, payload_len: usize) -> Vec<u8> {
    let (a, b) = if v6 {
        (sa("[2001:db8::1]:40001"), sa("[2001:db8::aa]:7777"))
    } else {
        (sa("10.1.2.3:40001"), sa("10.3.2.1:7777"))
    };
    let t = FrameTemplate::new(MAC_A, MAC_B, a, b).unwrap();
    let r = repr(40001, 7777, 0xffff_f000);
    let l = t.l2l3_len();
    let mut buf = vec![0u8; l + 60 + payload_len];
    let hl = r
        .emit(&mut TcpPacket::new_unchecked(&mut buf[l..]))
        .unwrap();
    for (i, o) in buf[l + hl..l + hl + payload_len].iter_mut().enumerate() {
        *o = (i * 7 + i / 251) as u8;
    }
    let n = t.finish(&mut buf, hl + payload_len).unwrap();
    buf.truncate(n);
    buf
}

/// `frame` cut at `cuts` (ascending offsets) into pieces.
fn cut_at<'a>(frame: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut pieces = Vec::new();
    let mut at = 0;
    for &c in cuts.iter().chain([frame.len()].iter()) {
        pieces.push(&frame[at..c]);
        at = c;
    }
    pieces
}

/// A frame in pieces parses as the whole frame: the same addresses, header and checksum
/// verdict, and its payload range, read across the pieces, is the whole frame's payload —
/// at every cut after the headers, even and odd, into two and three pieces, the fixtures'
/// odd-length segment and Ethernet padding included.
#[test]
fn a_frame_in_pieces_parses_as_the_whole_frame() {
    let frames = [
        FRAME_V4.to_vec(),
        FRAME_V6.to_vec(),
        FRAME_MIN.to_vec(),
        tagged(&FRAME_V4, 7),
        jumbo(false, 8948),
        jumbo(true, 8927),
    ];
    for frame in &frames {
        let whole = parse_tcp_frame(frame, true).unwrap();
        let header_end = whole.tcp_offset + whole.tcp.header_len();
        let payload_at = whole.tcp.payload().as_ptr() as usize - frame.as_ptr() as usize;
        let step = if frame.len() > 1000 { 331 } else { 1 };
        let mut cuts: Vec<Vec<usize>> = (header_end..=frame.len())
            .step_by(step)
            .map(|c| vec![c])
            .collect();
        cuts.push(vec![header_end, header_end]); // an empty piece
        cuts.extend(
            (header_end..frame.len())
                .step_by(step * 3)
                .map(|c| vec![c, (c + 1 + step).min(frame.len())]),
        );
        for c in &cuts {
            let pieces = cut_at(frame, c);
            let (f, payload) = parse_tcp_frame_in_pieces(pieces.iter().copied(), true)
                .unwrap_or_else(|e| panic!("cuts {c:?} of {}: {e}", frame.len()));
            assert_eq!((f.src, f.dst, f.vlan), (whole.src, whole.dst, whole.vlan));
            assert_eq!(f.tcp_offset, whole.tcp_offset);
            assert_eq!(f.ip_payload_len, whole.ip_payload_len);
            assert_eq!(
                TcpRepr::parse(&f.tcp).unwrap(),
                TcpRepr::parse(&whole.tcp).unwrap()
            );
            assert_eq!(payload.start, payload_at, "cuts {c:?}");
            assert_eq!(&frame[payload.clone()], whole.tcp.payload(), "cuts {c:?}");
            // The CRC32c of each part of the payload, in the checksum's pass; none unverified.
            let mut crcs = vec![Some(1)];
            let (g, at) = parse_tcp_frame_in_pieces_with_payload_crcs(
                pieces.iter().copied(),
                true,
                true,
                &mut crcs,
            )
            .unwrap();
            assert_eq!((g.src, g.dst, at.clone()), (f.src, f.dst, payload.clone()));
            let parts: Vec<Option<u32>> = octets_in(pieces.iter().copied(), at)
                .map(|p| Some(mpa::crc::crc32c(p)))
                .collect();
            assert_eq!(crcs, parts, "cuts {c:?}");
            // Unverified, or not asked for: none.
            for (verify, take) in [(false, true), (true, false)] {
                let p = pieces.iter().copied();
                parse_tcp_frame_in_pieces_with_payload_crcs(p, verify, take, &mut crcs).unwrap();
                assert!(crcs.is_empty(), "cuts {c:?}");
            }
        }
    }
}

/// Any octet of the segment changed fails the checksum of the frame in pieces, wherever the
/// pieces are cut (each parity of each piece's start); no checksum, no error.
#[test]
fn a_frame_in_pieces_fails_its_checksum_as_the_whole_frame() {
    for v6 in [false, true] {
        let frame = jumbo(v6, 3001);
        let whole = parse_tcp_frame(&frame, true).unwrap();
        let header_end = whole.tcp_offset + whole.tcp.header_len();
        let tcp_end = whole.tcp_offset + whole.ip_payload_len;
        for cuts in [
            vec![header_end + 1],
            vec![header_end + 2, header_end + 1001],
            vec![header_end + 7, header_end + 8, header_end + 1500],
        ] {
            for i in (whole.tcp_offset..tcp_end).step_by(13) {
                if i == whole.tcp_offset + 12 {
                    continue; // the data offset: the header itself may change
                }
                let mut b = frame.clone();
                b[i] ^= 0x5a;
                let pieces = cut_at(&b, &cuts);
                assert_eq!(
                    parse_tcp_frame_in_pieces(pieces.iter().copied(), true).unwrap_err(),
                    FrameError::BadTcpChecksum,
                    "octet {i} cuts {cuts:?}"
                );
                assert!(parse_tcp_frame_in_pieces(pieces.iter().copied(), false).is_ok());
                let mut crcs = Vec::new();
                assert_eq!(
                    parse_tcp_frame_in_pieces_with_payload_crcs(
                        pieces.iter().copied(),
                        true,
                        true,
                        &mut crcs
                    )
                    .unwrap_err(),
                    FrameError::BadTcpChecksum,
                    "octet {i} cuts {cuts:?}"
                );
            }
        }
    }
}

/// Headers that reach past the first piece, frames shorter than their IP header says, and
/// no pieces at all are errors, never a panic.
#[test]
fn a_frame_in_pieces_needs_its_headers_in_the_first() {
    let frame = jumbo(false, 2000);
    let whole = parse_tcp_frame(&frame, true).unwrap();
    let header_end = whole.tcp_offset + whole.tcp.header_len();
    for cut in 0..header_end {
        let pieces = cut_at(&frame, &[cut]);
        assert!(
            parse_tcp_frame_in_pieces(pieces.iter().copied(), true).is_err(),
            "cut {cut}"
        );
    }
    for len in 0..frame.len() {
        let pieces = cut_at(&frame[..len], &[header_end.min(len)]);
        assert!(parse_tcp_frame_in_pieces(pieces.iter().copied(), false).is_err());
    }
    assert!(parse_tcp_frame_in_pieces(std::iter::empty(), true).is_err());
}

/// A segment of a batch as a Linux sender writes them (`crate::fuzz::batch_segment`), with
/// `pad` octets of Ethernet padding.
fn segment(v6: bool, seq: u32, psh: bool, ident: u16, len: usize, pad: usize) -> Vec<u8> {
    let mut f = crate::fuzz::batch_segment(v6, None, seq, psh, ident, len);
    f.resize(f.len() + pad, 0xa5);
    f
}

/// [`crate::fuzz::refill_checksums`] of an untagged frame.
fn refill_checksums(frame: &mut [u8], v6: bool) {
    crate::fuzz::refill_checksums(frame, 14, v6);
}

use crate::fuzz::parsed_follower;

#[test]
fn followers_of_a_batch_are_what_the_parse_finds() {
    for v6 in [false, true] {
        for vlan in [None, Some(42)] {
            let with_vlan = |f: Vec<u8>| vlan.map_or(f.clone(), |vid| tagged(&f, vid));
            let first = with_vlan(segment(v6, 1000, false, 7, 1448, 0));
            let mut h = BatchHeader::default();
            assert!(h.take(&first), "v6 {v6} vlan {vlan:?}");
            for (i, (len, pad, psh)) in [
                (1448, 0, false),
                (1, 0, true),
                (17, 9, false),
                (700, 3, true),
            ]
            .into_iter()
            .enumerate()
            {
                let seq = 0xffff_fff0u32.wrapping_add(i as u32 * 5000);
                let frame = with_vlan(segment(v6, seq, psh, 8 + i as u16, len, pad));
                for (verify, crc) in [(true, true), (true, false), (false, false), (false, true)] {
                    let got = h.follower(&frame, verify, crc);
                    let want = parsed_follower(&first, &frame, verify, crc);
                    assert!(got.is_some(), "v6 {v6} vlan {vlan:?} len {len}");
                    assert_eq!(got, want, "v6 {v6} vlan {vlan:?} len {len} {verify} {crc}");
                    let f = got.unwrap();
                    assert_eq!(f.seq_number, SeqNumber(seq));
                    assert_eq!(f.payload.len(), len);
                    assert_eq!(f.flags.contains(TcpFlags::PSH), psh);
                    let want_crc = (verify && crc).then(|| mpa::crc::crc32c(f.payload));
                    assert_eq!(f.payload_crc, want_crc);
                }
            }
        }
    }
}

#[test]
fn frames_that_do_not_follow_a_batch() {
    let first = segment(false, 1000, false, 7, 1448, 0);
    let mut h = BatchHeader::default();
    assert!(
        h.follower(&first, true, true).is_none(),
        "an empty header takes nothing"
    );
    assert!(h.take(&first));
    let next = segment(false, 2448, false, 8, 1448, 0);
    assert!(h.follower(&next, true, true).is_some());
    // Each of these, changed alone, makes a frame that is not a follower.
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut changed = |what: &'static str, at: usize, v: u8| {
        let mut f = next.clone();
        f[at] ^= v;
        if !what.contains("checksum") {
            refill_checksums(&mut f, false);
        }
        cases.push((what, f));
    };
    for (what, at, v) in [
        ("destination MAC", 0, 1),
        ("TTL", 22, 1),
        ("source address", 29, 1),
        ("source port", 35, 1),
        ("destination port", 37, 1),
        ("acknowledgment", 45, 1),
        ("SYN", 47, 0x02),
        ("window", 49, 1),
        ("TSval", 61, 1),
        ("IPv4 header checksum", 24, 1),
        ("TCP checksum", 50, 1),
        ("payload (TCP checksum)", 80, 1),
    ] {
        changed(what, at, v);
    }
    for (i, (what, f)) in cases.iter().enumerate() {
        assert!(h.follower(f, true, true).is_none(), "{what}");
        // The parse batches frames whose MAC addresses or TTL differ: the header's check is
        // stricter there, never looser.
        if i >= 2 {
            assert!(parsed_follower(&first, f, true, true).is_none(), "{what}");
        }
    }
    // Lengths past the frame, or no payload.
    let mut long = next.clone();
    let total = u16::from_be_bytes([long[16], long[17]]) + 1;
    long[16..18].copy_from_slice(&total.to_be_bytes());
    Ipv4Packet::new_unchecked(&mut long[14..]).fill_checksum();
    assert!(h.follower(&long, false, false).is_none());
    let empty = segment(false, 2448, false, 8, 0, 40);
    assert!(h.follower(&empty, true, false).is_none());
    assert_eq!(parsed_follower(&first, &empty, true, false), None);
    // A TCP checksum not verified is not looked at, as by the parse.
    let (_, bad) = &cases[10];
    assert_eq!(
        h.follower(bad, false, false),
        parsed_follower(&first, bad, false, false)
    );
    assert!(h.follower(bad, false, false).is_some());
    // Another family, or a tag, is another header.
    assert!(h
        .follower(&segment(true, 2448, false, 8, 1448, 0), true, true)
        .is_none());
    assert!(h.follower(&tagged(&next, 1), true, true).is_none());
    // A frame with one octet of payload, shorter than its header rounded up to words.
    let tiny = segment(false, 3896, false, 9, 1, 0);
    assert!(h.follower(&tiny, true, true).is_some());
    // What is not an Ethernet / IP / TCP frame is not taken; nothing follows it.
    assert!(!h.take(&tiny[..40]));
    assert!(h.follower(&next, true, true).is_none());
}

#[test]
fn every_header_octet_a_follower_may_not_change_makes_it_none() {
    for v6 in [false, true] {
        let first = segment(v6, 1, false, 1, 1448, 0);
        let mut h = BatchHeader::default();
        assert!(h.take(&first));
        let next = segment(v6, 1449, false, 2, 1448, 0);
        let (ip, tcp) = (14, if v6 { 14 + 40 } else { 14 + 20 });
        let may: Vec<usize> = if v6 {
            vec![ip + 4, ip + 5]
        } else {
            vec![ip + 2, ip + 3, ip + 4, ip + 5, ip + 10, ip + 11]
        }
        .into_iter()
        .chain([tcp + 4, tcp + 5, tcp + 6, tcp + 7, tcp + 16, tcp + 17])
        .collect();
        for at in 0..tcp + 32 {
            for x in (0..8).map(|b| 1u8 << b) {
                let mut f = next.clone();
                f[at] ^= x;
                refill_checksums(&mut f, v6);
                let got = h.follower(&f, true, true);
                let psh = at == tcp + 13 && x == 0x08;
                if may.contains(&at) || psh {
                    // A length changed may leave the frame (then none); anything else still
                    // follows, as the parse finds it.
                    let length = if v6 { ip + 4..ip + 6 } else { ip + 2..ip + 4 };
                    assert!(
                        got.is_some() || length.contains(&at),
                        "v6 {v6} octet {at} ^ {x:#x}"
                    );
                    if got.is_some() {
                        let want = parsed_follower(&first, &f, true, true);
                        assert_eq!(got, want, "v6 {v6} octet {at} ^ {x:#x}");
                    }
                } else {
                    assert!(got.is_none(), "v6 {v6} octet {at} ^ {x:#x}");
                }
            }
        }
    }
}

proptest! {
    /// Whatever the octets, a frame the batch header takes as a follower is one the parse
    /// takes as one, with the same sequence number, control bits, payload and CRC; and a
    /// change to any header octet a follower may not change makes it none.
    #[test]
    fn a_follower_is_what_the_parse_would_batch(
        v6 in any::<bool>(),
        len in 1usize..1500,
        pad in 0usize..8,
        changes in proptest::collection::vec((0usize..120, 1u8..=255), 0..3),
        refill in any::<bool>(),
        verify in any::<bool>(),
        crc in any::<bool>(),
    ) {
        let first = segment(v6, 1, false, 1, 1448, 0);
        let mut h = BatchHeader::default();
        prop_assert!(h.take(&first));
        let original = segment(v6, 1449, true, 2, len, pad);
        let mut frame = original.clone();
        let payload_at = if v6 { 14 + 40 + 32 } else { 14 + 20 + 32 };
        for &(at, x) in &changes {
            if let Some(o) = frame.get_mut(at) {
                *o ^= x;
            }
        }
        if refill {
            refill_checksums(&mut frame, v6);
        }
        let got = h.follower(&frame, verify, crc);
        if got.is_some() {
            prop_assert_eq!(got, parsed_follower(&first, &frame, verify, crc));
        }
        if frame == original {
            prop_assert!(got.is_some());
        }
        // A follower has changed only what a follower may change.
        let (ip, tcp) = (14, if v6 { 14 + 40 } else { 14 + 20 });
        let may: &[usize] = if v6 { &[ip + 4, ip + 5] } else { &[ip + 2, ip + 3, ip + 4, ip + 5, ip + 10, ip + 11] };
        for at in 0..payload_at {
            let diff = frame[at] ^ original[at];
            let allowed = may.contains(&at)
                || [tcp + 4, tcp + 5, tcp + 6, tcp + 7, tcp + 16, tcp + 17].contains(&at)
                || at == tcp + 13 && diff == 0x08;
            if diff != 0 && !allowed {
                prop_assert!(got.is_none(), "octet {} changed", at);
            }
        }
    }
}
