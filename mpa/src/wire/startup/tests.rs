use super::*;
use crate::error::{Fault, MpaErrorCode};
use crate::rtr::{RtrSet, RtrType};
use crate::wire::Truncated;
use proptest::prelude::*;

/// Rev 1 Request: M=1, C=1, Res bits 0, PD "hi".
const REQ_REV1: [u8; 22] = [
    0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6d,
    0x65, // key
    0xc0, 0x01, 0x00, 0x02, // M C, Rev 1, PD_Length 2
    b'h', b'i',
];

/// Rev 2 Reply, S=1, C=1: A=1 B=1 IRD=5, C=1 D=0 ORD=0x3FFF, then PD "ok".
const REP_REV2: [u8; 26] = [
    0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x70, 0x20, 0x46, 0x72, 0x61, 0x6d,
    0x65, // key
    0x50, 0x02, 0x00, 0x06, // C S, Rev 2, PD_Length 6
    0xc0, 0x05, 0xbf, 0xff, // A|B|IRD 5, C|ORD 0x3fff
    b'o', b'k',
];

/// Rev 1 Reply rejecting with reason "no".
const REP_REJECT: [u8; 22] = [
    0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x70, 0x20, 0x46, 0x72, 0x61, 0x6d,
    0x65, // key
    0x20, 0x01, 0x00, 0x02, // R, Rev 1, PD_Length 2
    b'n', b'o',
];

fn frame_with(key: [u8; 16], flags: u8, rev: u8, pd: &[u8]) -> Vec<u8> {
    let mut v = key.to_vec();
    v.push(flags);
    v.push(rev);
    v.extend_from_slice(&u16::try_from(pd.len()).unwrap().to_be_bytes());
    v.extend_from_slice(pd);
    v
}

#[test]
fn keys_are_the_rfc_octets() {
    assert_eq!(KEY_REQUEST, REQ_REV1[..16]);
    assert_eq!(KEY_REPLY, REP_REV2[..16]);
    assert_eq!(FrameKind::from_key(&KEY_REQUEST), Some(FrameKind::Request));
    assert_eq!(FrameKind::from_key(&KEY_REPLY), Some(FrameKind::Reply));
    assert_eq!(FrameKind::from_key(b"MPA ID Rex Frame"), None);
    assert_eq!(FrameKind::from_key(b"short"), None);
}

#[test]
fn deconstruct_request_rev1() {
    let f = StartupFrame::new_checked(&REQ_REV1[..]).unwrap();
    assert_eq!(f.kind(), Some(FrameKind::Request));
    assert!(f.m() && f.c() && !f.r() && !f.s());
    assert_eq!(
        (f.res(), f.rev(), f.pd_length(), f.frame_len()),
        (0, 1, 2, 22)
    );
    assert_eq!(f.private_data(), b"hi");
    let r = StartupRepr::parse(&f).unwrap();
    assert_eq!(
        r,
        StartupRepr {
            kind: FrameKind::Request,
            markers: true,
            crc: true,
            rejected: false,
            rev: 1,
            enhanced: None,
            private_data: b"hi",
        }
    );
}

#[test]
fn deconstruct_reply_rev2() {
    let f = StartupFrame::new_checked(&REP_REV2[..]).unwrap();
    assert!(!f.m() && f.c() && !f.r() && f.s());
    let r = StartupRepr::parse(&f).unwrap();
    assert_eq!(r.kind, FrameKind::Reply);
    assert_eq!(r.rev, 2);
    assert_eq!(
        r.enhanced,
        Some(Rev2Params {
            peer_to_peer: true,
            rtr: RtrSet::single(RtrType::ZeroLengthSend).with(RtrType::ZeroLengthWrite),
            ird: 5,
            ord: rev2::NO_NEGOTIATION,
        })
    );
    assert_eq!(r.private_data, b"ok");
    assert_eq!(r.pd_length(), 6);
}

#[test]
fn deconstruct_reject() {
    let r = StartupRepr::parse(&StartupFrame::new_checked(&REP_REJECT[..]).unwrap()).unwrap();
    assert!(r.rejected);
    assert_eq!(r.private_data, b"no");
}

#[test]
fn construct_with_setters() {
    let mut buf = [0xaau8; 22];
    let mut f = StartupFrame::new_unchecked(&mut buf[..]);
    f.set_key(KEY_REQUEST);
    f.set_flags(0);
    f.set_m(true);
    f.set_c(true);
    f.set_r(true);
    f.set_r(false);
    f.set_s(true);
    f.set_s(false);
    f.set_res(0xf);
    f.set_res(0);
    f.set_rev(1);
    f.set_pd_length(2);
    f.private_data_mut().copy_from_slice(b"hi");
    assert_eq!(buf, REQ_REV1);
}

#[test]
fn emit_fixtures() {
    for fixture in [&REQ_REV1[..], &REP_REV2[..], &REP_REJECT[..]] {
        let r = StartupRepr::parse(&StartupFrame::new_checked(fixture).unwrap()).unwrap();
        assert_eq!(r.buffer_len(), fixture.len());
        assert_eq!(r.to_bytes().unwrap(), fixture);
        let mut buf = vec![0x55u8; fixture.len() + 3];
        assert_eq!(
            r.emit(&mut StartupFrame::new_unchecked(&mut buf[..]))
                .unwrap(),
            fixture.len()
        );
        assert_eq!(&buf[..fixture.len()], fixture);
        assert_eq!(
            &buf[fixture.len()..],
            &[0x55; 3],
            "emit writes nothing past the frame"
        );
    }
}

#[test]
fn request_rev2_fixture_with_all_rtr_flags() {
    let pd = [0xff, 0xff, 0xff, 0xff, 0xee];
    let bytes = frame_with(KEY_REQUEST, flags::S | flags::M, 2, &pd);
    let r = StartupRepr::parse(&StartupFrame::new_checked(&bytes[..]).unwrap()).unwrap();
    let e = r.enhanced.unwrap();
    assert!(e.peer_to_peer);
    assert_eq!(e.rtr, RtrSet::ALL);
    assert_eq!((e.ird, e.ord), (0x3fff, 0x3fff));
    assert_eq!(r.private_data, &[0xee]);
    assert_eq!(r.to_bytes().unwrap(), bytes);
}

#[test]
fn truncated_at_every_length() {
    for fixture in [&REQ_REV1[..], &REP_REV2[..]] {
        for len in 0..fixture.len() {
            let err = StartupFrame::new_checked(&fixture[..len]).unwrap_err();
            assert!(
                matches!(err, StartupFrameError::Truncated(_)),
                "len {len}: {err:?}"
            );
            // Accessors on an unchecked short buffer never panic.
            let f = StartupFrame::new_unchecked(&fixture[..len]);
            let _ = (
                f.key(),
                f.kind(),
                f.flags(),
                f.rev(),
                f.pd_length(),
                f.frame_len(),
            );
            assert!(f.private_data().len() <= len.saturating_sub(HEADER_LEN));
            let mut short = fixture[..len].to_vec();
            let mut g = StartupFrame::new_unchecked(&mut short[..]);
            g.set_key(KEY_REPLY);
            g.set_m(true);
            g.set_res(3);
            g.set_rev(9);
            g.set_pd_length(512);
            let _ = g.private_data_mut();
        }
        assert!(StartupFrame::new_checked(fixture).is_ok());
    }
    assert_eq!(
        StartupFrame::new_checked(&REQ_REV1[..21]).unwrap_err(),
        StartupFrameError::Truncated(Truncated {
            what: "MPA startup frame private data",
            need: 22,
            have: 21
        })
    );
}

#[test]
fn trailing_octets_are_not_the_frame() {
    let mut v = REQ_REV1.to_vec();
    v.extend_from_slice(&[0, 0, 0, 0, 0, 0x2a]);
    let f = StartupFrame::new_checked(&v[..]).unwrap();
    assert_eq!(f.frame_len(), 22);
    assert_eq!(f.private_data(), b"hi");
    assert_eq!(StartupRepr::parse(&f).unwrap().private_data, b"hi");
}

#[test]
fn wrong_key() {
    let mut v = REQ_REV1.to_vec();
    v[3] = b'_';
    let err = StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap_err();
    assert!(matches!(err, StartupFrameError::UnknownKey { found } if found[3] == b'_'));
    assert_eq!(err.code(), MpaErrorCode::InvalidStartupFrame);
    assert_eq!(err.fault(), Fault::PeerMisbehaved);
}

#[test]
fn request_where_reply_expected_is_distinguishable() {
    let f = StartupFrame::new_checked(&REQ_REV1[..]).unwrap();
    assert_eq!(
        StartupRepr::parse_expected(&f, FrameKind::Reply).unwrap_err(),
        StartupFrameError::UnexpectedKind {
            expected: FrameKind::Reply,
            found: FrameKind::Request
        }
    );
    let f = StartupFrame::new_checked(&REP_REV2[..]).unwrap();
    assert_eq!(
        StartupRepr::parse_expected(&f, FrameKind::Request).unwrap_err(),
        StartupFrameError::UnexpectedKind {
            expected: FrameKind::Request,
            found: FrameKind::Reply
        }
    );
    assert!(StartupRepr::parse_expected(&f, FrameKind::Reply).is_ok());
}

#[test]
fn pd_length_limits() {
    for len in [0usize, 1, 511, 512] {
        let pd = vec![7u8; len];
        let v = frame_with(KEY_REPLY, 0, 1, &pd);
        let r = StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap();
        assert_eq!(r.private_data.len(), len);
        assert_eq!(r.to_bytes().unwrap(), v);
    }
    let v = frame_with(KEY_REPLY, 0, 1, &[7u8; 513]);
    assert_eq!(
        StartupFrame::new_checked(&v[..]).unwrap_err(),
        StartupFrameError::PdLengthTooLarge(513)
    );
    // Even with only the header present, 513 is refused at once (not "need more").
    assert_eq!(
        StartupFrame::new_checked(&v[..20]).unwrap_err(),
        StartupFrameError::PdLengthTooLarge(513)
    );
    let mut h = v[..20].to_vec();
    h[18..20].copy_from_slice(&0xffffu16.to_be_bytes());
    assert_eq!(
        StartupFrame::new_checked(&h[..]).unwrap_err(),
        StartupFrameError::PdLengthTooLarge(0xffff)
    );
}

#[test]
fn r_in_request_and_res_are_ignored() {
    let v = frame_with(KEY_REQUEST, flags::R | flags::RES, 1, b"x");
    let r = StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap();
    assert!(!r.rejected && !r.markers && !r.crc);
    assert_eq!(r.private_data, b"x");
    // Emitted cleanly: no R in a Request, Res zero.
    let mut want = v.clone();
    want[16] = 0;
    assert_eq!(r.to_bytes().unwrap(), want);
    // A rejecting Request repr still emits R=0.
    let r2 = StartupRepr {
        rejected: true,
        ..r
    };
    assert_eq!(r2.to_bytes().unwrap()[16], 0);
    // Res in a Reply is ignored as well.
    let v = frame_with(KEY_REPLY, flags::RES | flags::M, 1, b"");
    let r = StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap();
    assert!(r.markers && !r.rejected && r.enhanced.is_none());
}

#[test]
fn s_below_rev2_is_a_reserved_bit() {
    for rev in [0, 1] {
        let v = frame_with(KEY_REQUEST, flags::S, rev, &[0xc0, 1, 0x80, 1]);
        let r = StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap();
        assert_eq!(r.enhanced, None);
        assert_eq!(r.private_data.len(), 4);
    }
    // Rev 2 without S: plain private data.
    let v = frame_with(KEY_REQUEST, 0, 2, &[1, 2]);
    let r = StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap();
    assert_eq!((r.enhanced, r.private_data), (None, &[1u8, 2][..]));
}

#[test]
fn revisions() {
    for rev in 3..=255u8 {
        let v = frame_with(KEY_REQUEST, 0, rev, b"");
        assert_eq!(
            StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap_err(),
            StartupFrameError::UnsupportedRevision(rev)
        );
    }
    let v = frame_with(KEY_REQUEST, 0xf0, 0, b"");
    assert_eq!(
        StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap())
            .unwrap()
            .rev,
        0
    );
}

#[test]
fn enhanced_too_short() {
    for n in 0..4 {
        let v = frame_with(KEY_REPLY, flags::S, 2, &[0x80; 3][..n]);
        assert_eq!(
            StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap_err(),
            StartupFrameError::EnhancedTooShort(u16::try_from(n).unwrap())
        );
    }
    let v = frame_with(KEY_REPLY, flags::S, 2, &[0, 0, 0, 0]);
    let r = StartupRepr::parse(&StartupFrame::new_checked(&v[..]).unwrap()).unwrap();
    assert_eq!(r.enhanced, Some(Rev2Params::default()));
    assert!(r.private_data.is_empty());
}

#[test]
fn bcd_ignored_without_a_and_zero_on_send() {
    // A=0, B=1, C=1, D=1 on receive: ignored (RFC 6581 §9.2).
    let p = Rev2Params::from_bytes([0x40, 0x03, 0xc0, 0x04]);
    assert_eq!(
        p,
        Rev2Params {
            peer_to_peer: false,
            rtr: RtrSet::EMPTY,
            ird: 3,
            ord: 4
        }
    );
    // A=0 with a non-empty set: B, C, D sent as zero.
    let p = Rev2Params {
        peer_to_peer: false,
        rtr: RtrSet::ALL,
        ird: 1,
        ord: 2,
    };
    assert_eq!(p.to_bytes(), [0, 1, 0, 2]);
    let p = Rev2Params {
        peer_to_peer: true,
        rtr: RtrSet::single(RtrType::ZeroLengthReadRequest),
        ird: 1,
        ord: 2,
    };
    assert_eq!(p.to_bytes(), [0x80, 1, 0x40, 2]);
    assert_eq!(Rev2Params::from_bytes(p.to_bytes()), p);
}

#[test]
fn emit_refuses_what_does_not_fit() {
    let big = [0u8; 513];
    let r = StartupRepr {
        kind: FrameKind::Request,
        markers: false,
        crc: true,
        rejected: false,
        rev: 1,
        enhanced: None,
        private_data: &big,
    };
    assert_eq!(
        r.to_bytes().unwrap_err(),
        StartupFrameError::PrivateDataTooLong { len: 513, max: 512 }
    );
    let r = StartupRepr {
        private_data: &big[..509],
        rev: 2,
        enhanced: Some(Rev2Params::default()),
        ..r
    };
    assert_eq!(
        r.to_bytes().unwrap_err(),
        StartupFrameError::PrivateDataTooLong { len: 509, max: 508 }
    );
    let r = StartupRepr {
        private_data: &big[..508],
        ..r
    };
    assert_eq!(r.to_bytes().unwrap().len(), 532);
    let r = StartupRepr { rev: 1, ..r };
    assert_eq!(
        r.to_bytes().unwrap_err(),
        StartupFrameError::EnhancedNeedsRev2(1)
    );
    let r = StartupRepr {
        rev: 2,
        enhanced: Some(Rev2Params {
            ird: 0x4000,
            ..Default::default()
        }),
        ..r
    };
    assert_eq!(
        r.to_bytes().unwrap_err(),
        StartupFrameError::IrdOrdOutOfRange(0x4000)
    );
    assert_eq!(r.to_bytes().unwrap_err().fault(), Fault::LocalMisuse);
    let r = StartupRepr {
        enhanced: None,
        private_data: b"abc",
        ..r
    };
    let mut small = [0u8; 22];
    assert_eq!(
        r.emit(&mut StartupFrame::new_unchecked(&mut small[..]))
            .unwrap_err(),
        StartupFrameError::BufferTooShort { need: 23, have: 22 }
    );
}

/// The set whose B, C, D bits (1, 2, 4, in [`RtrType::ALL`] order) are `bits`.
fn rtr_set_of_bits(bits: u8) -> RtrSet {
    RtrType::ALL
        .into_iter()
        .enumerate()
        .filter(|(i, _)| bits >> i & 1 == 1)
        .map(|(_, t)| t)
        .collect()
}

fn arb_rev2() -> impl Strategy<Value = Rev2Params> {
    (any::<bool>(), 0u8..8, 0u16..=0x3fff, 0u16..=0x3fff).prop_map(|(a, bits, ird, ord)| {
        Rev2Params {
            peer_to_peer: a,
            rtr: if a {
                rtr_set_of_bits(bits)
            } else {
                RtrSet::EMPTY
            },
            ird,
            ord,
        }
    })
}

proptest! {
    #[test]
    fn round_trip(
        reply in any::<bool>(),
        markers in any::<bool>(),
        crc in any::<bool>(),
        rejected in any::<bool>(),
        enhanced in proptest::option::of(arb_rev2()),
        rev_low in 0u8..3,
        pd in proptest::collection::vec(any::<u8>(), 0..=508),
    ) {
        let kind = if reply { FrameKind::Reply } else { FrameKind::Request };
        let rev = if enhanced.is_some() { 2 } else { rev_low };
        let r = StartupRepr {
            kind, markers, crc, rejected: rejected && reply, rev, enhanced, private_data: &pd,
        };
        let bytes = r.to_bytes().unwrap();
        prop_assert_eq!(bytes.len(), r.buffer_len());
        let f = StartupFrame::new_checked(&bytes[..]).unwrap();
        prop_assert_eq!(StartupRepr::parse(&f).unwrap(), r);
    }

    #[test]
    fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let f = StartupFrame::new_unchecked(&data[..]);
        let _ = (f.key(), f.flags(), f.rev(), f.pd_length(), f.private_data());
        if let Ok(r) = StartupRepr::parse(&f) {
            // What parses re-emits to a frame that parses the same.
            let again = r.to_bytes().unwrap();
            prop_assert_eq!(StartupRepr::parse(&StartupFrame::new_checked(&again[..]).unwrap()).unwrap(), r);
        }
    }
}
