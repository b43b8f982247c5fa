//! FPDUs that reach across segment boundaries, placed out of order once their last piece
//! arrives (`receiver/out_of_order.rs`): through the TCP (its store holds the earlier pieces)
//! and the receiver, as `flow::receive_segment` composes them.

use super::unit::write;
use super::writable_region;
use crate::flow::receive_segment;
use crate::receiver::{MemRegions, MpaReceiver, ReceiverConfig, RxEnd, RxError};
use crate::tcp::tests::harness::{conn, Peer, RCV0};
use crate::tcp::{Connection, TcpConfig};
use mpa::encoder::FpduEncoder;
use mpa::seq::SeqNumber;
use mpa::MpaErrorCode;
use std::time::Instant;

const STAG: u32 = 0x10;

struct Bed {
    t0: Instant,
    tcp: Connection,
    rx: MpaReceiver,
    regions: MemRegions,
    peer: Peer,
    /// The stream: three 1000-octet Writes at TO 0, 1000, 2000 (markers, CRC).
    wire: Vec<u8>,
    /// Where each FPDU ends on the wire.
    ends: Vec<usize>,
}

fn bed() -> Bed {
    let t0 = Instant::now();
    let mut enc = FpduEncoder::new(true);
    let (mut wire, mut ends) = (Vec::new(), Vec::new());
    for (i, fill) in [1u8, 2, 3].into_iter().enumerate() {
        enc.encode(
            &write(STAG, 1000 * i as u64, true, &[fill; 1000]),
            &mut wire,
        )
        .unwrap();
        ends.push(wire.len());
    }
    let mut regions = MemRegions::default();
    regions.insert(writable_region(STAG, 4096, 1));
    let rx = MpaReceiver::new(&ReceiverConfig {
        flow_id: 1,
        start: SeqNumber(RCV0),
        markers: true,
        crc: true,
        aligned_sender: false,
        ddp_rdmap_version: 1,
        pd: Some(1),
        expect_rtr: None,
        digest: true,
    });
    Bed {
        t0,
        tcp: conn(t0, true, &TcpConfig::default()),
        rx,
        regions,
        peer: Peer::new(true),
        wire,
        ends,
    }
}

impl Bed {
    /// Wire octets `[a, b)` as one segment.
    fn segment(&mut self, a: usize, b: usize) {
        let repr = self.peer.data(a as u64, b - a).0;
        receive_segment(
            &mut self.tcp,
            &mut self.rx,
            self.t0,
            &repr,
            &self.wire[a..b],
            &mut self.regions,
        );
    }

    fn region(&self, to: usize) -> &[u8] {
        &self.regions.bytes(STAG).unwrap()[to..to + 1000]
    }

    fn completions(&mut self) -> Vec<u64> {
        std::iter::from_fn(|| self.rx.poll_completion())
            .map(|c| c.offset)
            .collect()
    }
}

/// Segments cut across FPDUs: S0 = [0, 500) holds the start of W0, S1 = [500, 1500) the
/// rest of W0 and the start of W1, S2 = [1500, end) the rest of W1 and W2 whole. S2 comes
/// first (W2 is placed from it alone), then S1: W1 is now whole (its start in S1, its rest
/// stored) and is gathered and placed at once; W0 still lacks S0. Then S0 fills the hole.
#[test]
fn an_fpdu_across_segments_is_placed_when_its_last_piece_arrives() {
    let mut b = bed();
    let (w0, w1) = (b.ends[0], b.ends[1]);
    assert!(
        w0 > 500 && w0 < 1500 && w1 > 1500,
        "the cuts straddle W0 and W1"
    );
    let end = b.wire.len();
    b.segment(1500, end);
    assert_eq!(b.rx.stats().placed_direct, 1);
    assert_eq!(b.rx.stats().placed_gathered, 0);
    assert!(b.region(2000).iter().all(|&x| x == 3));
    b.segment(500, 1500);
    let st = *b.rx.stats();
    assert_eq!((st.placed_direct, st.placed_gathered), (1, 1), "{st:?}");
    assert!(b.region(1000).iter().all(|&x| x == 2), "W1 placed ahead");
    assert!(b.region(0).iter().all(|&x| x == 0), "W0 not yet");
    assert!(
        b.completions().is_empty(),
        "completions wait for the stream"
    );
    // The stored piece of W1 no longer counts against the store.
    assert_eq!(b.tcp.stats().octets_placed_from_store, (w1 - 1500) as u64);
    b.segment(0, 500);
    assert!(b.region(0).iter().all(|&x| x == 1));
    assert_eq!(b.completions(), [0, 1000, 2000]);
    let st = *b.rx.stats();
    assert_eq!(st.fpdus, 3);
    assert_eq!(st.placed_from_store + st.placed_in_order, 1, "{st:?}");
    assert_eq!(b.rx.placed_ahead_waiting(), 0);
    assert!(b.rx.poll_terminate().is_none());
}

/// A gathered FPDU is verified like any other before a single octet of it is placed: W1 with
/// a flipped payload octet (in its stored piece) fails its CRC, is left in the store, and
/// the in-order stream reports it (error 2) when it gets there.
#[test]
fn a_gathered_fpdu_with_a_bad_crc_is_not_placed() {
    let mut b = bed();
    let w1 = b.ends[1];
    b.wire[w1 - 100] ^= 0x20;
    let end = b.wire.len();
    b.segment(1500, end);
    let rejected = b.rx.stats().located_rejected;
    b.segment(500, 1500);
    let st = *b.rx.stats();
    assert_eq!((st.placed_direct, st.placed_gathered), (1, 0), "{st:?}");
    // The same cut with a good W1 gathers it (above); here the candidate fails its check.
    assert!(st.located_rejected > rejected, "{st:?}");
    assert!(
        b.region(1000).iter().all(|&x| x == 0),
        "nothing of W1 placed"
    );
    b.segment(0, 500);
    assert_eq!(b.completions(), [0]);
    assert!(matches!(
        b.rx.poll_terminate(),
        Some(RxEnd::Local {
            error: RxError::Mpa(MpaErrorCode::CrcMismatch),
            ..
        })
    ));
    assert!(b.region(1000).iter().all(|&x| x == 0));
}

/// The piece that completes an FPDU may be its middle one. W1 is cut in three
/// (S1 = [500, w0 + 300), S2 = [w0 + 300, w0 + 700), S3 = [w0 + 700, end)): S3 and S1 come
/// first, then the middle S2, whose first marker points back to W1's header in the store.
#[test]
fn an_fpdu_completed_by_its_middle_piece_is_gathered() {
    let mut b = bed();
    let w0 = b.ends[0];
    let end = b.wire.len();
    let (c1, c2) = (w0 + 300, w0 + 700);
    b.segment(c2, end);
    b.segment(500, c1);
    assert_eq!(b.rx.stats().placed_gathered, 0);
    b.segment(c1, c2);
    assert_eq!(b.rx.stats().placed_gathered, 1, "{:?}", b.rx.stats());
    assert!(b.region(1000).iter().all(|&x| x == 2));
    b.segment(0, 500);
    assert_eq!(b.completions(), [0, 1000, 2000]);
    assert!(b.region(0).iter().all(|&x| x == 1) && b.region(2000).iter().all(|&x| x == 3));
}
