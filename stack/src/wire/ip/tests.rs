use super::*;
use std::net::{Ipv4Addr, Ipv6Addr};

/// 192.168.122.1 -> 192.168.122.57, ID 0x1c46, DF, TTL 64, TCP, total length 68 (only the
/// header's 20 octets are here, then 4 octets of what would be TCP); checksum by an
/// independent script.
const V4_HEADER: [u8; 20] = [
    0x45, 0x00, 0x00, 0x44, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x06, 0xa8, 0xe2, 0xc0, 0xa8, 0x7a, 0x01,
    0xc0, 0xa8, 0x7a, 0x39,
];
/// 2001:db8::1 -> 2001:db8::aa, flow label 0x12345, payload length 49, TCP, hop limit 64.
const V6_HEADER: [u8; 40] = [
    0x60, 0x01, 0x23, 0x45, 0x00, 0x31, 0x06, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xaa,
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
