use super::*;
use proptest::prelude::*;

/// ACK|PSH, 40000 -> 7777, seq 0x01020304, ack 0x05060708, window 0x01f5, NOP NOP TS
/// (0x11223344, 0x55667788), payload "hi"; checksum for 10.0.0.1 -> 10.0.0.2 computed by an
/// independent script.
const SEGMENT: [u8; 34] = [
    0x9c, 0x40, 0x1e, 0x61, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x80, 0x18, 0x01, 0xf5,
    0x1c, 0x48, 0x00, 0x00, 0x01, 0x01, 0x08, 0x0a, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
    0x68, 0x69,
];
const SRC4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const DST4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const SRC6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const DST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

fn repr() -> TcpRepr {
    TcpRepr {
        src_port: 40000,
        dst_port: 7777,
        seq_number: SeqNumber(0x0102_0304),
        ack_number: Some(SeqNumber(0x0506_0708)),
        flags: TcpFlags::PSH,
        window_len: 0x01f5,
        urgent_at: 0,
        options: TcpOptions {
            timestamps: Some(TcpTimestamps {
                tsval: 0x1122_3344,
                tsecr: 0x5566_7788,
            }),
            ..TcpOptions::default()
        },
    }
}

/// RFC 1071 the slow way: 16-bit words, end-around carry, over pseudo-header and segment.
fn naive_checksum(pseudo: &[u8], seg: &[u8]) -> u16 {
    let mut all = pseudo.to_vec();
    all.extend_from_slice(seg);
    let mut s: u32 = 0;
    for pair in all.chunks(2) {
        s += u32::from(pair[0]) << 8 | u32::from(*pair.get(1).unwrap_or(&0));
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
    }
    !(s as u16)
}

fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, len: usize) -> Vec<u8> {
    let mut p = src.octets().to_vec();
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&[0, 6]);
    p.extend_from_slice(&(len as u16).to_be_bytes());
    p
}

fn pseudo_v6(src: Ipv6Addr, dst: Ipv6Addr, len: usize) -> Vec<u8> {
    let mut p = src.octets().to_vec();
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&(len as u32).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 6]);
    p
}

#[test]
fn deconstruct() {
    let p = TcpPacket::new_checked(&SEGMENT[..]).unwrap();
    assert_eq!(p.src_port(), 40000);
    assert_eq!(p.dst_port(), 7777);
    assert_eq!(p.seq_number(), SeqNumber(0x0102_0304));
    assert_eq!(p.ack_number(), SeqNumber(0x0506_0708));
    assert_eq!(p.header_len(), 32);
    assert!(p.ack() && p.psh() && !p.syn() && !p.fin() && !p.rst());
    assert_eq!(p.window_len(), 0x01f5);
    assert_eq!(p.checksum(), 0x1c48);
    assert_eq!(p.options().len(), 12);
    assert_eq!(p.payload(), b"hi");
    assert_eq!(p.segment_len(), 2);
    assert!(p.verify_checksum_v4(SRC4, DST4));
    assert!(!p.verify_checksum_v4(SRC4, Ipv4Addr::new(10, 0, 0, 3)));
    assert_eq!(TcpRepr::parse(&p).unwrap(), repr());
}

#[test]
fn construct() {
    let r = repr();
    assert_eq!(r.header_len(), 32);
    let mut buf = [0xa5u8; 34];
    let mut p = TcpPacket::new_unchecked(&mut buf[..]);
    assert_eq!(r.emit(&mut p).unwrap(), 32);
    p.payload_mut().copy_from_slice(b"hi");
    p.fill_checksum_v4(SRC4, DST4);
    assert_eq!(buf, SEGMENT);
}

#[test]
fn checksum_vectors_v4_and_v6() {
    // IPv4: the fixture's checksum against the naive sum.
    let mut zeroed = SEGMENT;
    zeroed[16] = 0;
    zeroed[17] = 0;
    assert_eq!(
        naive_checksum(&pseudo_v4(SRC4, DST4, zeroed.len()), &zeroed),
        0x1c48
    );
    // IPv6: value from the independent script, and the naive sum agrees.
    let p = TcpPacket::new_checked(&zeroed[..]).unwrap();
    assert_eq!(p.compute_checksum_v6(SRC6, DST6), 0xd4d5);
    assert_eq!(
        naive_checksum(&pseudo_v6(SRC6, DST6, zeroed.len()), &zeroed),
        0xd4d5
    );
    let mut buf = zeroed;
    let mut p = TcpPacket::new_unchecked(&mut buf[..]);
    p.fill_checksum_v6(SRC6, DST6);
    assert!(p.verify_checksum_v6(SRC6, DST6));
    assert!(!p.verify_checksum_v4(SRC4, DST4));
    // Any single flipped bit is caught.
    for i in 0..buf.len() {
        let mut c = buf;
        c[i] ^= 0x10;
        assert!(!TcpPacket::new_unchecked(&c[..]).verify_checksum_v6(SRC6, DST6));
    }
}

#[test]
fn checksum_odd_lengths_against_naive() {
    for len in [0usize, 1, 2, 3, 1447, 1448] {
        let mut seg = vec![0u8; 20 + len];
        let mut r = repr();
        r.options = TcpOptions::default();
        r.emit(&mut TcpPacket::new_unchecked(&mut seg[..])).unwrap();
        for (i, b) in seg[20..].iter_mut().enumerate() {
            *b = (i * 131 + 7) as u8;
        }
        let want = naive_checksum(&pseudo_v4(SRC4, DST4, seg.len()), &seg);
        let mut p = TcpPacket::new_unchecked(&mut seg[..]);
        assert_eq!(p.compute_checksum_v4(SRC4, DST4), want, "len {len}");
        p.fill_checksum_v4(SRC4, DST4);
        assert!(p.verify_checksum_v4(SRC4, DST4));
        let want6 = {
            let mut z = seg.clone();
            z[16] = 0;
            z[17] = 0;
            naive_checksum(&pseudo_v6(SRC6, DST6, z.len()), &z)
        };
        assert_eq!(
            TcpPacket::new_unchecked(&seg[..]).compute_checksum_v6(SRC6, DST6),
            want6
        );
    }
}

#[test]
fn truncated_and_bad_offset() {
    assert_eq!(
        TcpPacket::new_checked(&SEGMENT[..19]).unwrap_err(),
        TcpWireError::Truncated { need: 20, have: 19 }
    );
    // Data offset 8 words over a 31-octet buffer.
    assert_eq!(
        TcpPacket::new_checked(&SEGMENT[..31]).unwrap_err(),
        TcpWireError::Truncated { need: 32, have: 31 }
    );
    for words in 0..5u8 {
        let mut b = SEGMENT;
        b[12] = words << 4;
        assert_eq!(
            TcpPacket::new_checked(&b[..]).unwrap_err(),
            TcpWireError::BadDataOffset(words)
        );
    }
    // Data offset 15 over a 34-octet buffer.
    let mut b = SEGMENT;
    b[12] = 0xf0;
    assert!(matches!(
        TcpPacket::new_checked(&b[..]),
        Err(TcpWireError::Truncated { need: 60, .. })
    ));
    // Repr::parse re-checks an unchecked view rather than indexing past the end.
    assert!(TcpRepr::parse(&TcpPacket::new_unchecked(&b[..])).is_err());
}

fn opts(o: &[u8]) -> Result<TcpOptions, TcpWireError> {
    TcpOptions::parse(o)
}

#[test]
fn every_option_parses() {
    let o = opts(&[
        2, 4, 0x05, 0xb4, // MSS 1460
        1, 3, 3, 7, // NOP, WS 7
        4, 2, // SACK permitted
        8, 10, 0, 0, 0, 1, 0, 0, 0, 2, // TS 1, 2
        5, 18, 0, 0, 0, 10, 0, 0, 0, 20, 0xff, 0xff, 0xff, 0xf0, 0, 0, 0, 5, // SACK x2
    ])
    .unwrap();
    assert_eq!(o.mss, Some(1460));
    assert_eq!(o.window_scale, Some(7));
    assert!(o.sack_permitted);
    assert_eq!(o.timestamps, Some(TcpTimestamps { tsval: 1, tsecr: 2 }));
    assert_eq!(
        o.sack.as_slice(),
        &[
            SackBlock {
                left: SeqNumber(10),
                right: SeqNumber(20)
            },
            SackBlock {
                left: SeqNumber(0xffff_fff0),
                right: SeqNumber(5)
            }
        ]
    );
}

#[test]
fn four_sack_blocks_and_padding() {
    let mut o = vec![1, 1, 5, 34];
    for i in 0..8u32 {
        o.extend_from_slice(&(i * 100).to_be_bytes());
    }
    let p = opts(&o).unwrap();
    assert_eq!(p.sack.len(), 4);
    assert_eq!(p.sack.as_slice()[3].right, SeqNumber(700));
    // EOL ends the list: anything after it is padding and ignored, even garbage.
    assert_eq!(opts(&[0, 2, 1]).unwrap(), TcpOptions::default());
    assert_eq!(opts(&[1, 1, 1, 0]).unwrap(), TcpOptions::default());
    assert_eq!(opts(&[]).unwrap(), TcpOptions::default());
    assert_eq!(opts(&[3, 3, 14, 0]).unwrap().window_scale, Some(14));
}

#[test]
fn unknown_options_are_skipped() {
    // kind 30 (MPTCP) len 4, kind 254 (experimental) len 2, then TS.
    let o = opts(&[30, 4, 0xaa, 0xbb, 254, 2, 8, 10, 0, 0, 0, 9, 0, 0, 0, 8]).unwrap();
    assert_eq!(o.timestamps, Some(TcpTimestamps { tsval: 9, tsecr: 8 }));
}

#[test]
fn malformed_options_are_errors() {
    use TcpWireError::*;
    // kind with no length octet
    assert_eq!(opts(&[2]), Err(OptionTruncated { kind: 2, offset: 0 }));
    assert_eq!(
        opts(&[1, 1, 8]),
        Err(OptionTruncated { kind: 8, offset: 2 })
    );
    // unknown kind with no length octet
    assert_eq!(
        opts(&[99]),
        Err(OptionTruncated {
            kind: 99,
            offset: 0
        })
    );
    // length runs past the end
    assert_eq!(
        opts(&[8, 10, 0, 0]),
        Err(OptionTruncated { kind: 8, offset: 0 })
    );
    assert_eq!(
        opts(&[99, 40, 0, 0]),
        Err(OptionTruncated {
            kind: 99,
            offset: 0
        })
    );
    // length below 2 (would loop forever or go backwards)
    assert_eq!(opts(&[99, 0]), Err(OptionBadLength { kind: 99, len: 0 }));
    assert_eq!(opts(&[99, 1, 0]), Err(OptionBadLength { kind: 99, len: 1 }));
    // wrong fixed lengths
    assert_eq!(opts(&[2, 3, 0]), Err(OptionBadLength { kind: 2, len: 3 }));
    assert_eq!(
        opts(&[2, 5, 0, 0, 0]),
        Err(OptionBadLength { kind: 2, len: 5 })
    );
    assert_eq!(opts(&[3, 2]), Err(OptionBadLength { kind: 3, len: 2 }));
    assert_eq!(
        opts(&[3, 4, 1, 1]),
        Err(OptionBadLength { kind: 3, len: 4 })
    );
    assert_eq!(opts(&[4, 3, 0]), Err(OptionBadLength { kind: 4, len: 3 }));
    let mut ts9 = vec![8, 9];
    ts9.extend_from_slice(&[0; 7]);
    assert_eq!(opts(&ts9), Err(OptionBadLength { kind: 8, len: 9 }));
    let mut ts11 = vec![8, 11];
    ts11.extend_from_slice(&[0; 9]);
    assert_eq!(opts(&ts11), Err(OptionBadLength { kind: 8, len: 11 }));
    // SACK: empty, not a multiple of 8, more than 4 blocks
    assert_eq!(opts(&[5, 2]), Err(OptionBadLength { kind: 5, len: 2 }));
    let mut s10 = vec![5, 10];
    s10.extend_from_slice(&[0; 8]);
    s10[1] = 11;
    s10.push(0);
    assert_eq!(opts(&s10), Err(OptionBadLength { kind: 5, len: 11 }));
    let mut s42 = vec![5, 42];
    s42.extend_from_slice(&[0; 40]);
    assert_eq!(opts(&s42), Err(OptionBadLength { kind: 5, len: 42 }));
}

#[test]
fn bad_options_in_a_packet_fail_parse() {
    let mut b = SEGMENT;
    b[23] = 11; // TS length 11 inside a 12-octet option space: runs past the end
    let p = TcpPacket::new_checked(&b[..]).unwrap();
    assert_eq!(
        TcpRepr::parse(&p),
        Err(TcpWireError::OptionTruncated { kind: 8, offset: 2 })
    );
}

#[test]
fn emit_pads_to_words_and_round_trips() {
    let mut r = repr();
    r.flags = TcpFlags::FIN | TcpFlags::PSH;
    r.options.mss = Some(1460);
    r.options.window_scale = Some(7);
    r.options.sack_permitted = true;
    for i in 0..2u32 {
        r.options.sack.push(SackBlock {
            left: SeqNumber(i * 10),
            right: SeqNumber(i * 10 + 5),
        });
    }
    // 4 + 4 + 4 + 12 + 20 = 44 > 40
    assert_eq!(r.options.emitted_len(), 44);
    let mut buf = [0u8; 80];
    assert_eq!(
        r.emit(&mut TcpPacket::new_unchecked(&mut buf[..])),
        Err(TcpWireError::OptionsTooLong { need: 44 })
    );
    r.options.mss = None;
    let n = r.emit(&mut TcpPacket::new_unchecked(&mut buf[..])).unwrap();
    assert_eq!(n, 60);
    assert_eq!(n % 4, 0);
    let back = TcpRepr::parse(&TcpPacket::new_checked(&buf[..n]).unwrap()).unwrap();
    assert_eq!(back, r);
    // Too small a buffer is an error, not a panic.
    assert_eq!(
        r.emit(&mut TcpPacket::new_unchecked(&mut buf[..59])),
        Err(TcpWireError::Truncated { need: 60, have: 59 })
    );
    // Without ACK the ack field is zero and ACK is clear.
    r.ack_number = None;
    r.flags = TcpFlags::RST;
    r.options = TcpOptions::default();
    let n = r.emit(&mut TcpPacket::new_unchecked(&mut buf[..])).unwrap();
    let p = TcpPacket::new_checked(&buf[..n]).unwrap();
    assert!(!p.ack() && p.rst());
    assert_eq!(p.ack_number(), SeqNumber(0));
    assert_eq!(TcpRepr::parse(&p).unwrap(), r);
}

#[test]
fn flags_debug() {
    assert_eq!(format!("{:?}", TcpFlags::SYN | TcpFlags::ACK), "SYN|ACK");
    assert_eq!(format!("{:?}", TcpFlags::empty()), "-");
}

#[test]
fn fuzz_entry_point_on_fixtures() {
    fuzz_parse(&SEGMENT);
    fuzz_parse(&SEGMENT[..10]);
    fuzz_parse(&[0xff; 60]);
}

fn arb_repr() -> impl Strategy<Value = TcpRepr> {
    (
        any::<(u16, u16, u32)>(),
        proptest::option::of(any::<u32>()),
        0u16..0x200,
        any::<(u16, u16)>(),
        proptest::option::of(any::<u16>()),
        proptest::option::of(0u8..15),
        any::<bool>(),
        proptest::option::of(any::<(u32, u32)>()),
        proptest::collection::vec(any::<(u32, u32)>(), 0..=4),
    )
        .prop_map(|(p, ack, fl, (w, u), mss, ws, sp, ts, sack)| {
            let mut options = TcpOptions {
                mss,
                window_scale: ws,
                sack_permitted: sp,
                timestamps: ts.map(|(tsval, tsecr)| TcpTimestamps { tsval, tsecr }),
                ..TcpOptions::default()
            };
            for (l, r) in sack {
                options.sack.push(SackBlock {
                    left: SeqNumber(l),
                    right: SeqNumber(r),
                });
            }
            TcpRepr {
                src_port: p.0,
                dst_port: p.1,
                seq_number: SeqNumber(p.2),
                ack_number: ack.map(SeqNumber),
                flags: TcpFlags(fl).without(TcpFlags::ACK),
                window_len: w,
                urgent_at: u,
                options,
            }
        })
}

proptest! {
    #[test]
    fn round_trip(r in arb_repr(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut buf = vec![0u8; MAX_HEADER_LEN + payload.len()];
        match r.emit(&mut TcpPacket::new_unchecked(&mut buf[..])) {
            Err(TcpWireError::OptionsTooLong { need }) => prop_assert!(need > 40),
            Err(e) => prop_assert!(false, "{e}"),
            Ok(n) => {
                prop_assert_eq!(n % 4, 0);
                buf.truncate(n + payload.len());
                buf[n..].copy_from_slice(&payload);
                let mut p = TcpPacket::new_checked(&mut buf[..]).unwrap();
                p.fill_checksum_v4(SRC4, DST4);
                prop_assert!(p.verify_checksum_v4(SRC4, DST4));
                prop_assert_eq!(p.payload(), &payload[..]);
                prop_assert_eq!(TcpRepr::parse(&p).unwrap(), r);
            }
        }
    }

    /// The NOP NOP TS shortcut reads what the general walk reads, for option spaces that
    /// start like it and for any others (near misses of its layout included).
    #[test]
    fn timestamps_shortcut_matches_the_general_walk(
        head in prop_oneof![Just(vec![1u8, 1, 8, 10]), Just(vec![1u8, 1, 8, 9]), Just(vec![1u8, 8, 10]), Just(vec![])],
        rest in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let opts = [&head[..], &rest].concat();
        prop_assert_eq!(TcpOptions::parse(&opts), TcpOptions::parse_general(&opts));
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..80)) {
        fuzz_parse(&data);
        let _ = TcpOptions::parse(&data);
    }

    #[test]
    fn arbitrary_options_never_panic(o in proptest::collection::vec(
        prop_oneof![Just(0u8), Just(1), Just(2), Just(3), Just(4), Just(5), Just(8), Just(10), any::<u8>()], 0..40)) {
        let mut seg = SEGMENT.to_vec();
        seg.truncate(20);
        let words = (20 + o.len()).div_ceil(4);
        seg[12] = (words as u8) << 4;
        seg.extend_from_slice(&o);
        seg.resize(words * 4, 0);
        fuzz_parse(&seg);
    }
}
