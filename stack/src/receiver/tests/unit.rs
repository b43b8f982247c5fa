//! The receiver driven directly with FPDU octets: RTRs, Terminates both ways, placement
//! violations, CRC errors, and FPDUs placed ahead of the stream.

use crate::receiver::{
    InOrderSource, MemRegions, MpaReceiver, PlacementError, PostedBuf, ReceiverConfig, RxEnd,
    RxError,
};
use crate::tcp::PlacedSpans;
use mpa::crc::crc32c;
use mpa::encoder::FpduEncoder;
use mpa::endpoint::rtr_ulpdu;
use mpa::seq::SeqNumber;
use mpa::startup::{RtrSet, RtrType};
use mpa::wire::ddp::{
    queue, terminate_ulpdu, DdpRepr, RdmapOpcode, ReadRequestRepr, TerminateRepr, TAGGED_HEADER_LEN,
};
use mpa::MpaErrorCode;
use mpa_ctl_proto::{CompletionKind, RegionInfo};

const START: u32 = u32::MAX - 700;

pub(super) fn cfg(markers: bool, expect_rtr: Option<RtrSet>) -> ReceiverConfig {
    ReceiverConfig {
        flow_id: 1,
        start: SeqNumber(START),
        markers,
        crc: true,
        aligned_sender: false,
        ddp_rdmap_version: 1,
        pd: Some(1),
        expect_rtr,
        digest: true,
    }
}

fn regions() -> MemRegions {
    let mut r = MemRegions::default();
    r.insert(RegionInfo {
        stag: 0x10,
        len: 8192,
        pd: 1,
        remote_write: true,
        remote_read: false,
        huge_pages: false,
    });
    r
}

pub(super) fn write(stag: u32, to: u64, last: bool, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; TAGGED_HEADER_LEN];
    DdpRepr::Tagged {
        last,
        opcode: RdmapOpcode::RdmaWrite,
        stag,
        to,
    }
    .emit(&mut v, 1)
    .unwrap();
    v.extend_from_slice(payload);
    v
}

pub(super) fn frame(enc: &mut FpduEncoder, ulpdus: &[Vec<u8>]) -> Vec<u8> {
    let mut w = Vec::new();
    for u in ulpdus {
        enc.encode(u, &mut w).unwrap();
    }
    w
}

fn feed(rx: &mut MpaReceiver, r: &mut MemRegions, wire: &[u8]) {
    rx.handle_in_order(wire, InOrderSource::Segment, r);
}

#[test]
fn in_order_writes_are_placed_and_completed_once() {
    let mut rx = MpaReceiver::new(&cfg(true, None));
    let mut r = regions();
    let mut enc = FpduEncoder::new(true);
    let wire = frame(
        &mut enc,
        &[
            write(0x10, 100, false, &[1; 700]),
            write(0x10, 800, true, &[2; 300]),
        ],
    );
    // Any chunking of the stream gives the same result.
    for piece in wire.chunks(37) {
        feed(&mut rx, &mut r, piece);
    }
    let c = rx.poll_completion().unwrap();
    assert_eq!(
        (c.kind, c.stag, c.offset, c.len),
        (CompletionKind::WritePlaced, 0x10, 100, 1000)
    );
    assert!(rx.poll_completion().is_none());
    let b = r.bytes(0x10).unwrap();
    assert!(b[100..800].iter().all(|&x| x == 1) && b[800..1100].iter().all(|&x| x == 2));
    assert_eq!((b[99], b[1100]), (0, 0));
    assert_eq!(rx.stats().placed_in_order, 2);
    assert!(rx.poll_terminate().is_none());
}

#[test]
fn responder_refuses_a_first_fpdu_that_is_not_a_negotiated_rtr() {
    let want = Some(RtrSet::single(RtrType::ZeroLengthWrite));
    let mut rx = MpaReceiver::new(&cfg(false, want));
    let mut r = regions();
    let wire = frame(
        &mut FpduEncoder::new(false),
        &[rtr_ulpdu(RtrType::ZeroLengthSend, 1)],
    );
    feed(&mut rx, &mut r, &wire);
    let end = rx.poll_terminate().cloned().unwrap();
    assert_eq!(
        end,
        RxEnd::Local {
            error: RxError::Mpa(MpaErrorCode::NoMatchingRtr),
            terminate: TerminateRepr::mpa(MpaErrorCode::NoMatchingRtr),
            ulpdu: terminate_ulpdu(MpaErrorCode::NoMatchingRtr, 1, 1),
        }
    );
    // Reported once; sticky: nothing more is placed.
    assert!(rx.poll_terminate().is_none());
    assert!(rx.is_ended() && !rx.wants_segments_ahead());
    let more = frame(
        &mut FpduEncoder::new(false),
        &[write(0x10, 0, true, &[9; 64])],
    );
    feed(&mut rx, &mut r, &more);
    assert!(r.bytes(0x10).unwrap().iter().all(|&x| x == 0));
}

#[test]
fn a_read_request_rtr_is_answered_at_its_sink() {
    let set = RtrSet::single(RtrType::ZeroLengthReadRequest).with(RtrType::ZeroLengthSend);
    let mut rx = MpaReceiver::new(&cfg(true, Some(set)));
    let mut r = regions();
    let mut rtr = rtr_ulpdu(RtrType::ZeroLengthReadRequest, 1);
    // Sink STag and TO follow the untagged header (RFC 5040 §4.4).
    let at = mpa::wire::ddp::UNTAGGED_HEADER_LEN;
    rtr[at..at + 4].copy_from_slice(&0x55u32.to_be_bytes());
    rtr[at + 4..at + 12].copy_from_slice(&0x1234u64.to_be_bytes());
    let wire = frame(&mut FpduEncoder::new(true), &[rtr]);
    feed(&mut rx, &mut r, &wire);
    let h = rx.poll_reply().unwrap();
    let (repr, n) = DdpRepr::parse(&h, 1).unwrap();
    assert_eq!(n, TAGGED_HEADER_LEN);
    assert_eq!(
        repr,
        DdpRepr::Tagged {
            last: true,
            opcode: RdmapOpcode::RdmaReadResponse,
            stag: 0x55,
            to: 0x1234
        }
    );
    assert!(rx.poll_reply().is_none() && rx.poll_terminate().is_none());
    assert_eq!(rx.stats().fpdus, 0, "the RTR is not data");
}

#[test]
fn a_peer_terminate_ends_placement() {
    let mut rx = MpaReceiver::new(&cfg(false, None));
    let mut r = regions();
    let term = terminate_ulpdu(MpaErrorCode::CrcMismatch, 1, 1);
    // A Terminate is untagged on queue 2.
    let (repr, _) = DdpRepr::parse(&term, 1).unwrap();
    assert!(matches!(repr, DdpRepr::Untagged { qn, .. } if qn == queue::TERMINATE));
    let mut enc = FpduEncoder::new(false);
    let wire = frame(&mut enc, &[term, write(0x10, 0, true, &[7; 32])]);
    feed(&mut rx, &mut r, &wire);
    assert_eq!(
        rx.poll_terminate(),
        Some(&RxEnd::Peer(
            TerminateRepr::mpa(MpaErrorCode::CrcMismatch),
            None
        ))
    );
    assert!(
        r.bytes(0x10).unwrap().iter().all(|&x| x == 0),
        "nothing placed after it"
    );
    assert!(rx.poll_completion().is_none());
}

#[test]
fn a_placement_violation_is_a_terminate_with_the_segment_header() {
    let mut rx = MpaReceiver::new(&cfg(false, None));
    let mut r = regions();
    let bad = write(0x99, 0, true, &[1; 10]);
    let wire = frame(
        &mut FpduEncoder::new(false),
        &[bad.clone(), write(0x10, 0, true, &[3; 8])],
    );
    feed(&mut rx, &mut r, &wire);
    let Some(RxEnd::Local {
        error,
        terminate,
        ulpdu,
    }) = rx.poll_terminate().cloned()
    else {
        panic!("a local Terminate")
    };
    assert_eq!(
        error,
        RxError::Placement(PlacementError::InvalidStag { stag: 0x99 })
    );
    assert_eq!(
        (terminate.layer, terminate.error_type, terminate.error_code),
        (1, 1, 0)
    );
    // RFC 5040 Figure 10: the Terminate carries the offending DDP header.
    assert!(ulpdu.ends_with(&bad[..TAGGED_HEADER_LEN]));
    assert!(r.bytes(0x10).unwrap().iter().all(|&x| x == 0));
}

#[test]
fn a_crc_error_is_error_2_and_sticky() {
    let mut rx = MpaReceiver::new(&cfg(true, None));
    let mut r = regions();
    let mut wire = frame(
        &mut FpduEncoder::new(true),
        &[write(0x10, 0, true, &[5; 100])],
    );
    let last = wire.len() - 1;
    wire[last] ^= 1;
    feed(&mut rx, &mut r, &wire);
    assert!(matches!(
        rx.poll_terminate(),
        Some(RxEnd::Local {
            error: RxError::Mpa(MpaErrorCode::CrcMismatch),
            ..
        })
    ));
    assert_eq!(rx.stats().crc_errors, 1);
    assert!(r.bytes(0x10).unwrap().iter().all(|&x| x == 0));
}

/// `n` Writes of 1000 octets into STag 0x10 one after the other, the `i`th all `i + 1`, each
/// one FPDU with markers (the wire image of each).
fn writes_of_1000(n: usize) -> Vec<Vec<u8>> {
    let mut enc = FpduEncoder::new(true);
    (0..n)
        .map(|i| {
            let fill = [i as u8 + 1; 1000];
            frame(&mut enc, &[write(0x10, 1000 * i as u64, true, &fill)])
        })
        .collect()
}

#[test]
fn fpdus_ahead_of_a_hole_are_placed_at_once_and_complete_in_order() {
    let mut rx = MpaReceiver::new(&cfg(true, None));
    let mut r = regions();
    let [a, b] = <[Vec<u8>; 2]>::try_from(writes_of_1000(2)).unwrap();
    assert!(rx.wants_segments_ahead());
    // b arrives first, a segment of its own, behind the hole that a leaves.
    let mut spans = PlacedSpans::default();
    rx.handle_segment_ahead(SeqNumber(START) + a.len(), (&b, None), &mut spans, &mut r);
    assert_eq!(spans.as_slice(), std::slice::from_ref(&(0..b.len())));
    assert_eq!(rx.stats().placed_direct, 1);
    assert!(r.bytes(0x10).unwrap()[1000..2000].iter().all(|&x| x == 2));
    assert!(
        rx.poll_completion().is_none(),
        "not before the stream reaches it"
    );
    // A retransmission of b is recognised, not placed twice.
    let mut again = PlacedSpans::default();
    rx.handle_segment_ahead(SeqNumber(START) + a.len(), (&b, None), &mut again, &mut r);
    assert_eq!(rx.stats().placed_direct, 1);
    assert_eq!(again.as_slice(), std::slice::from_ref(&(0..b.len())));
    // The hole fills; the TCP then hands the (stale) octets of b in order, which are skipped.
    feed(&mut rx, &mut r, &a);
    rx.handle_in_order(&b, InOrderSource::Store, &mut r);
    let offsets: Vec<u64> = std::iter::from_fn(|| rx.poll_completion())
        .map(|c| c.offset)
        .collect();
    assert_eq!(offsets, [0, 1000]);
    assert_eq!(rx.stats().fpdus, 2);
    assert_eq!(rx.placed_ahead_waiting(), 0);
}

/// An FPDU ahead of a hole that is its whole segment, the segment's CRC given as the parse
/// pass takes it, is placed at once as without it; a corrupt one (its CRC field flipped, the
/// segment's CRC that of its octets) is not placed, left to the in-order path.
#[test]
fn an_fpdu_ahead_that_is_its_whole_segment_is_verified_from_the_segments_crc() {
    let mut rx = MpaReceiver::new(&cfg(true, None));
    let mut r = regions();
    let [a, b, c] = <[Vec<u8>; 3]>::try_from(writes_of_1000(3)).unwrap();
    let mut bad = c.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x10;
    let seq_c = SeqNumber(START) + a.len() + b.len();
    let mut spans = PlacedSpans::default();
    rx.handle_segment_ahead(seq_c, (&bad, Some(crc32c(&bad))), &mut spans, &mut r);
    assert!(spans.as_slice().is_empty());
    assert_eq!(rx.stats().placed_direct, 0);
    assert_eq!(rx.stats().located_rejected, 1);
    assert!(r.bytes(0x10).unwrap()[2000..3000].iter().all(|&x| x == 0));
    let mut spans = PlacedSpans::default();
    let seq_b = SeqNumber(START) + a.len();
    rx.handle_segment_ahead(seq_b, (&b, Some(crc32c(&b))), &mut spans, &mut r);
    assert_eq!(spans.as_slice(), std::slice::from_ref(&(0..b.len())));
    assert_eq!(rx.stats().placed_direct, 1);
    assert!(r.bytes(0x10).unwrap()[1000..2000].iter().all(|&x| x == 2));
}

/// Two regions of the stream's domain, so that a change of STag passes every other check.
fn two_regions() -> MemRegions {
    let mut r = regions();
    r.insert(RegionInfo {
        stag: 0x20,
        len: 8192,
        pd: 1,
        remote_write: true,
        remote_read: false,
        huge_pages: false,
    });
    r
}

fn local_terminate(rx: &mut MpaReceiver) -> (RxError, (u8, u8, u8), Vec<u8>) {
    match rx.poll_terminate().cloned() {
        Some(RxEnd::Local {
            error,
            terminate: t,
            ulpdu,
        }) => (error, (t.layer, t.error_type, t.error_code), ulpdu),
        other => panic!("expected our Terminate, got {other:?}"),
    }
}

/// The segments of one tagged message continue one STag at contiguous TOs; a segment that
/// changes either is a Terminate (DDP tagged: Invalid STag, or Base or bounds violation),
/// never a completion with the first segment's STag and TO.
#[test]
fn a_tagged_message_that_changes_stag_or_to_is_a_terminate() {
    for (second, code) in [
        (write(0x20, 800, true, &[2; 300]), 0),
        (write(0x10, 2000, true, &[2; 300]), 1),
        (write(0x10, 700, true, &[2; 300]), 1),
    ] {
        let mut rx = MpaReceiver::new(&cfg(true, None));
        let mut r = two_regions();
        let wire = frame(
            &mut FpduEncoder::new(true),
            &[write(0x10, 100, false, &[1; 700]), second.clone()],
        );
        feed(&mut rx, &mut r, &wire);
        assert!(rx.poll_completion().is_none());
        let (error, t, ulpdu) = local_terminate(&mut rx);
        assert!(matches!(
            error,
            RxError::Placement(PlacementError::TaggedDiscontinuity {
                expected_stag: 0x10,
                expected_to: 800,
                ..
            })
        ));
        assert_eq!(t, (1, 1, code));
        assert!(ulpdu.ends_with(&second[..TAGGED_HEADER_LEN]));
        // Nothing of the second segment was placed.
        assert!(r.bytes(0x20).unwrap().iter().all(|&x| x == 0));
        let b = r.bytes(0x10).unwrap();
        assert!(b[800..].iter().all(|&x| x == 0) && b[..100].iter().all(|&x| x == 0));
    }
}

/// The same when the second segment was placed ahead of the stream: it does not complete
/// the message once the first arrives; the stream ends with the Terminate.
#[test]
fn a_discontinuous_tagged_segment_placed_ahead_is_a_terminate_in_order() {
    let mut rx = MpaReceiver::new(&cfg(true, None));
    let mut r = two_regions();
    let mut enc = FpduEncoder::new(true);
    let a = frame(&mut enc, &[write(0x10, 0, false, &[1; 1000])]);
    let second = write(0x20, 1000, true, &[2; 1000]);
    let b = frame(&mut enc, std::slice::from_ref(&second));
    let mut spans = PlacedSpans::default();
    rx.handle_segment_ahead(SeqNumber(START) + a.len(), (&b, None), &mut spans, &mut r);
    assert_eq!(rx.stats().placed_direct, 1);
    feed(&mut rx, &mut r, &a);
    rx.handle_in_order(&b, InOrderSource::Store, &mut r);
    assert!(rx.poll_completion().is_none());
    let (_, t, ulpdu) = local_terminate(&mut rx);
    assert_eq!(t, (1, 1, 0));
    assert!(ulpdu.ends_with(&second[..TAGGED_HEADER_LEN]));
}

/// An RDMA Read Request ULPDU (QN 1, MSN 1) for `size` octets at (`src_stag`, `src_to`).
fn read_request(src_stag: u32, src_to: u64, size: u32) -> Vec<u8> {
    read_request_msn(1, src_stag, src_to, size)
}

/// Valid Read Requests are handed on in order, each once; the queue-1 MSN must be the next
/// (DDP "MSN range", RFC 5041 §7.2); more than [`MAX_INBOUND_READS`] unanswered is RDMAP's
/// catastrophic stream error 0/2/7 (as siw answers an IRQ overrun).
#[test]
fn valid_read_requests_are_handed_on_in_order_within_ird() {
    let mut base = regions();
    base.insert(RegionInfo {
        stag: 0x30,
        len: 4096,
        pd: 1,
        remote_write: false,
        remote_read: true,
        huge_pages: false,
    });
    let mut rx = MpaReceiver::new(&cfg(false, None));
    let mut r = base.clone();
    let reqs: Vec<Vec<u8>> = (1..=3)
        .map(|m| read_request_msn(m, 0x30, 64 * u64::from(m), 100))
        .collect();
    feed(&mut rx, &mut r, &frame(&mut FpduEncoder::new(false), &reqs));
    for m in 1..=3u32 {
        let got = rx.poll_read_request().expect("handed on");
        assert_eq!(
            got,
            crate::receiver::ReadRequest {
                msn: m,
                header: ReadRequestRepr {
                    sink_stag: 0x77,
                    sink_to: 0,
                    size: 100,
                    src_stag: 0x30,
                    src_to: 64 * u64::from(m),
                },
            }
        );
    }
    assert!(rx.poll_read_request().is_none());
    assert!(rx.poll_terminate().is_none());
    // Out of MSN order.
    let mut rx = MpaReceiver::new(&cfg(false, None));
    let wire = frame(
        &mut FpduEncoder::new(false),
        &[read_request_msn(2, 0x30, 0, 1)],
    );
    feed(&mut rx, &mut base.clone(), &wire);
    let (error, codes, _) = local_terminate(&mut rx);
    assert_eq!(
        error,
        RxError::Placement(PlacementError::MsnRange {
            msn: 2,
            expected: 1
        })
    );
    assert_eq!(codes, (1, 2, 3));
    // IRD: one more than the bound while none is answered; then answered ones make room.
    let mut rx = MpaReceiver::new(&cfg(false, None));
    let ird = crate::receiver::MAX_INBOUND_READS as u32;
    let reqs: Vec<Vec<u8>> = (1..=ird).map(|m| read_request_msn(m, 0x30, 0, 1)).collect();
    feed(
        &mut rx,
        &mut base.clone(),
        &frame(&mut FpduEncoder::new(false), &reqs),
    );
    while rx.poll_read_request().is_some() {}
    rx.reads_served(1);
    // (No markers: FPDUs do not depend on their stream position.)
    let more = [
        read_request_msn(ird + 1, 0x30, 0, 1),
        read_request_msn(ird + 2, 0x30, 0, 1),
    ];
    feed(
        &mut rx,
        &mut base.clone(),
        &frame(&mut FpduEncoder::new(false), &more),
    );
    assert_eq!(rx.poll_read_request().map(|q| q.msn), Some(ird + 1));
    let (error, codes, _) = local_terminate(&mut rx);
    assert_eq!(
        error,
        RxError::Placement(PlacementError::IrdExceeded {
            msn: ird + 2,
            ird: ird as usize,
        })
    );
    assert_eq!(codes, (0, 2, 7));
}

/// An RDMA Read Request ULPDU (QN 1, `msn`) for `size` octets at (`src_stag`, `src_to`).
fn read_request_msn(msn: u32, src_stag: u32, src_to: u64, size: u32) -> Vec<u8> {
    mpa::wire::ddp::ReadRequestRepr {
        sink_stag: 0x77,
        sink_to: 0,
        size,
        src_stag,
        src_to,
    }
    .ulpdu(msn, 1)
    .to_vec()
}

/// The Data Source's checks of a Read Request give RFC 5040's RDMAP Remote Protection
/// Errors, each with its code; a request without its header is the RDMAP operation error
/// "unspecified".
#[test]
fn read_requests_are_checked() {
    let mut base = regions();
    base.insert(RegionInfo {
        stag: 0x30,
        len: 4096,
        pd: 1,
        remote_write: false,
        remote_read: true,
        huge_pages: false,
    });
    base.insert(RegionInfo {
        stag: 0x40,
        len: 4096,
        pd: 2,
        remote_write: false,
        remote_read: true,
        huge_pages: false,
    });
    let short = {
        let mut v = read_request(0x30, 0, 16);
        v.truncate(mpa::wire::ddp::UNTAGGED_HEADER_LEN + 20);
        v
    };
    type Case = (Vec<u8>, PlacementError, (u8, u8, u8));
    let cases: [Case; 6] = [
        (
            read_request(0x99, 0, 16),
            PlacementError::ReadInvalidStag { stag: 0x99 },
            (0, 1, 0x00),
        ),
        (
            read_request(0x30, 4090, 16),
            PlacementError::ReadBounds {
                stag: 0x30,
                to: 4090,
                len: 16,
                region_len: 4096,
            },
            (0, 1, 0x01),
        ),
        (
            read_request(0x10, 0, 16),
            PlacementError::NoRemoteRead { stag: 0x10 },
            (0, 1, 0x02),
        ),
        (
            read_request(0x40, 0, 16),
            PlacementError::ReadStagNotAssociated {
                stag: 0x40,
                region_pd: 2,
                stream_pd: 1,
            },
            (0, 1, 0x03),
        ),
        (
            read_request(0x30, u64::MAX - 3, 16),
            PlacementError::ReadToWrap {
                to: u64::MAX - 3,
                len: 16,
            },
            (0, 1, 0x04),
        ),
        (
            short.clone(),
            PlacementError::Truncated {
                ulpdu_len: short.len(),
            },
            (0, 2, 0xff),
        ),
    ];
    for (ulpdu, want, codes) in cases {
        let mut rx = MpaReceiver::new(&cfg(false, None));
        let mut r = base.clone();
        let wire = frame(&mut FpduEncoder::new(false), std::slice::from_ref(&ulpdu));
        feed(&mut rx, &mut r, &wire);
        let (error, got, term) = local_terminate(&mut rx);
        assert_eq!(error, RxError::Placement(want), "{want:?}");
        assert_eq!(got, codes, "{want:?}");
        // RFC 5040 Figure 10: the Terminate carries the offending DDP header and, for a Read
        // Request whose header arrived, that RDMA Read Request Header with HdrCt R set.
        let h = mpa::wire::ddp::UNTAGGED_HEADER_LEN;
        let whole = ulpdu.len() >= h + mpa::wire::ddp::READ_REQUEST_HEADER_LEN;
        let carried = if whole { &ulpdu[..] } else { &ulpdu[..h] };
        assert!(term.ends_with(carried), "{want:?}");
        let hdrct = term[h + 2];
        assert_eq!(hdrct & mpa::wire::ddp::HDRCT_R != 0, whole, "{want:?}");
    }
}

/// A Read Response (tagged, opcode 1) with `payload` at (`stag`, `to`).
fn read_response(stag: u32, to: u64, last: bool, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; TAGGED_HEADER_LEN];
    DdpRepr::Tagged {
        last,
        opcode: RdmapOpcode::RdmaReadResponse,
        stag,
        to,
    }
    .emit(&mut v, 1)
    .unwrap();
    v.extend_from_slice(payload);
    v
}

/// A Read Response is placed only inside the sink one of our Read Requests named (RFC 5040
/// §4.5), oldest first; anything else — none asked for, another STag, beyond the asked size,
/// or a second answer to an answered request — is RDMAP's "unexpected opcode" 0/2/6 and
/// places nothing. (The region here has no remote write: a Read Response does not need it.)
#[test]
fn read_responses_land_only_where_our_read_requests_asked() {
    let mut base = regions();
    base.insert(RegionInfo {
        stag: 0x20,
        len: 4096,
        pd: 1,
        remote_write: false,
        remote_read: false,
        huge_pages: false,
    });
    // Expected: two answers, the first in two segments.
    let mut rx = MpaReceiver::new(&cfg(false, None));
    assert!(rx.expect_read_response(0x20, 100, 64));
    assert!(rx.expect_read_response(0x20, 1000, 8));
    let mut r = base.clone();
    let wire = frame(
        &mut FpduEncoder::new(false),
        &[
            read_response(0x20, 100, false, &[1; 40]),
            read_response(0x20, 140, true, &[2; 24]),
            read_response(0x20, 1000, true, &[3; 8]),
        ],
    );
    feed(&mut rx, &mut r, &wire);
    assert!(rx.poll_terminate().is_none());
    let got: Vec<_> = std::iter::from_fn(|| rx.poll_completion())
        .map(|c| (c.kind, c.stag, c.offset, c.len))
        .collect();
    assert_eq!(
        got,
        [
            (CompletionKind::ReadResponsePlaced, 0x20, 100, 64),
            (CompletionKind::ReadResponsePlaced, 0x20, 1000, 8)
        ]
    );
    let placed = r.bytes(0x20).unwrap();
    assert_eq!(&placed[100..140], &[1; 40]);
    assert_eq!(&placed[140..164], &[2; 24]);
    assert_eq!(&placed[1000..1008], &[3; 8]);
    // Not asked for.
    type Case = (&'static str, Vec<(u32, u64, u64)>, Vec<u8>);
    let cases: [Case; 4] = [
        (
            "none outstanding",
            vec![],
            read_response(0x20, 0, true, &[9; 8]),
        ),
        (
            "another STag",
            vec![(0x20, 0, 64)],
            read_response(0x10, 0, true, &[9; 8]),
        ),
        (
            "beyond the size asked",
            vec![(0x20, 0, 64)],
            read_response(0x20, 60, true, &[9; 8]),
        ),
        (
            "not the oldest",
            vec![(0x20, 0, 64), (0x20, 512, 64)],
            read_response(0x20, 512, true, &[9; 8]),
        ),
    ];
    for (what, expected, ulpdu) in cases {
        let mut rx = MpaReceiver::new(&cfg(false, None));
        for (s, t, n) in expected {
            assert!(rx.expect_read_response(s, t, n));
        }
        let mut r = base.clone();
        feed(
            &mut rx,
            &mut r,
            &frame(&mut FpduEncoder::new(false), &[ulpdu]),
        );
        let (error, codes, _) = local_terminate(&mut rx);
        assert!(
            matches!(
                error,
                RxError::Placement(PlacementError::UnsolicitedReadResponse { .. })
            ),
            "{what}: {error:?}"
        );
        assert_eq!(codes, (0, 2, 6), "{what}");
        assert!(
            r.bytes(0x20).unwrap().iter().all(|&b| b == 0),
            "{what}: placed"
        );
        assert!(
            r.bytes(0x10).unwrap().iter().all(|&b| b == 0),
            "{what}: placed"
        );
    }
}

/// A zero-length Read Response answers a request like any other (RFC 5040 §4.5): with none of
/// ours outstanding it is unsolicited (0/2/6), not a `ReadResponsePlaced` completion.
#[test]
fn a_zero_length_read_response_nobody_asked_for_is_a_terminate() {
    let mut rx = MpaReceiver::new(&cfg(false, None));
    let mut r = regions();
    let wire = frame(
        &mut FpduEncoder::new(false),
        &[read_response(0x10, 0, true, &[])],
    );
    feed(&mut rx, &mut r, &wire);
    assert!(rx.poll_completion().is_none(), "no completion");
    let (error, codes, _) = local_terminate(&mut rx);
    assert_eq!(
        error,
        RxError::Placement(PlacementError::UnsolicitedReadResponse {
            stag: 0x10,
            to: 0,
            len: 0
        })
    );
    assert_eq!(codes, (0, 2, 6));
}

/// A Read Request whose sink TO + size wraps cannot be answered (its Read Response would
/// wrap): the stream ends with RDMAP's TO wrap (0/1/4) at once, instead of the request being
/// dropped later with its IRD slot held for good.
#[test]
fn a_read_request_whose_sink_wraps_is_a_terminate() {
    let mut base = regions();
    base.insert(RegionInfo {
        stag: 0x30,
        len: 4096,
        pd: 1,
        remote_write: false,
        remote_read: true,
        huge_pages: false,
    });
    let mut ulpdu = read_request(0x30, 0, 16);
    let at = mpa::wire::ddp::UNTAGGED_HEADER_LEN + 4;
    ulpdu[at..at + 8].copy_from_slice(&(u64::MAX - 3).to_be_bytes());
    let mut rx = MpaReceiver::new(&cfg(false, None));
    feed(
        &mut rx,
        &mut base,
        &frame(&mut FpduEncoder::new(false), &[ulpdu]),
    );
    assert!(rx.poll_read_request().is_none(), "not handed on");
    let (error, codes, _) = local_terminate(&mut rx);
    assert_eq!(
        error,
        RxError::Placement(PlacementError::ReadSinkToWrap {
            to: u64::MAX - 3,
            len: 16
        })
    );
    assert_eq!(codes, (0, 1, 4));
}

/// An untagged RTR takes MSN 1 of its queue (RFC 5041 §5.1): after a Read RTR the first Read
/// Request is MSN 2 (MSN 1 again is DDP 1/2/3); after a Send RTR the first Send is MSN 2 and
/// fills the first posted buffer (the RTR consumed none).
#[test]
fn an_untagged_rtr_takes_msn_1_of_its_queue() {
    let mut base = regions();
    base.insert(RegionInfo {
        stag: 0x30,
        len: 4096,
        pd: 1,
        remote_write: false,
        remote_read: true,
        huge_pages: false,
    });
    for (msn, ok) in [(2, true), (1, false)] {
        let set = RtrSet::single(RtrType::ZeroLengthReadRequest);
        let mut rx = MpaReceiver::new(&cfg(false, Some(set)));
        let mut r = base.clone();
        let wire = frame(
            &mut FpduEncoder::new(false),
            &[
                rtr_ulpdu(RtrType::ZeroLengthReadRequest, 1),
                read_request_msn(msn, 0x30, 0, 16),
            ],
        );
        feed(&mut rx, &mut r, &wire);
        assert!(rx.poll_reply().is_some(), "the RTR is answered");
        if ok {
            assert_eq!(rx.poll_read_request().map(|q| q.msn), Some(2));
            assert!(rx.poll_terminate().is_none());
        } else {
            let (error, codes, _) = local_terminate(&mut rx);
            assert_eq!(
                error,
                RxError::Placement(PlacementError::MsnRange {
                    msn: 1,
                    expected: 2
                })
            );
            assert_eq!(codes, (1, 2, 3));
        }
    }
    // A Send RTR, then a Send of MSN 2 into the first posted buffer.
    let set = RtrSet::single(RtrType::ZeroLengthSend);
    let mut rx = MpaReceiver::new(&cfg(false, Some(set)));
    let mut r = regions();
    rx.post_recv(&[PostedBuf {
        stag: 0x10,
        offset: 256,
        len: 64,
        wr_id: 0,
    }])
    .unwrap();
    let mut send = vec![0u8; mpa::wire::ddp::UNTAGGED_HEADER_LEN];
    DdpRepr::Untagged {
        last: true,
        opcode: RdmapOpcode::Send,
        inv_stag: 0,
        qn: queue::SEND,
        msn: 2,
        mo: 0,
    }
    .emit(&mut send, 1)
    .unwrap();
    send.extend_from_slice(&[7; 20]);
    let wire = frame(
        &mut FpduEncoder::new(false),
        &[rtr_ulpdu(RtrType::ZeroLengthSend, 1), send],
    );
    feed(&mut rx, &mut r, &wire);
    assert!(rx.poll_terminate().is_none());
    let c = rx.poll_completion().expect("the Send completes");
    assert_eq!(
        (c.kind, c.msn, c.offset, c.len),
        (CompletionKind::SendArrived, Some(2), 256, 20)
    );
    assert_eq!(&r.bytes(0x10).unwrap()[256..276], &[7; 20]);
}

/// Our Read RTR is answered by a zero-length Read Response: it is expected before any other,
/// answers only the RTR (no consumer completion), and frees its ORD slot.
#[test]
fn the_answer_to_our_read_rtr_completes_nothing() {
    let mut rx = MpaReceiver::new(&cfg(false, None));
    let mut r = regions();
    assert!(rx.expect_rtr_read_response());
    assert!(rx.expect_read_response(0x10, 0, 8));
    let wire = frame(
        &mut FpduEncoder::new(false),
        &[
            read_response(mpa::endpoint::RTR_STAG, 0, true, &[]),
            read_response(0x10, 0, true, &[5; 8]),
        ],
    );
    feed(&mut rx, &mut r, &wire);
    assert!(rx.poll_terminate().is_none());
    assert_eq!(rx.take_rtr_answered(), 1);
    let c = rx.poll_completion().expect("the real Read's completion");
    assert_eq!(
        (c.kind, c.offset, c.len),
        (CompletionKind::ReadResponsePlaced, 0, 8)
    );
    assert!(rx.poll_completion().is_none());
}
