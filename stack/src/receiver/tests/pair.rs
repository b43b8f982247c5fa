//! Property tests on the in-memory pair: for any loss, reordering and duplication, every
//! region ends octet-equal to what was written, completions arrive exactly once and in order,
//! the digest matches, and the share of FPDUs placed straight from out-of-order segments is
//! reported.

use super::stream::{self, Segmentation, Stream, FLOW, PD};
use crate::flow::{
    receive_pieces_in_run, receive_segment, receive_segment_in_run, receive_segments_in_run,
};
use crate::receiver::{MemRegions, MpaReceiver, ReceiverConfig, RunOctets, RxStats};
use crate::tcp::tests::harness::SEG;
use crate::tcp::tests::pair::{handovers, LinkCfg, Pair, Rng, Sink};
use crate::tcp::{Connection, TcpConfig};
use crate::wire::tcp::TcpRepr;
use mpa_ctl_proto::Completion;
use proptest::prelude::*;
use std::time::{Duration, Instant};

/// B: its TCP's octets through the MPA receiver into in-memory regions.
struct MpaSink {
    rx: MpaReceiver,
    regions: MemRegions,
    delivered: usize,
    completions: Vec<Completion>,
    /// In-order octets decoded a burst at a time (`MpaReceiver::handle_in_order_run`), as the
    /// worker does, rather than segment by segment; two segments in three taken in pieces
    /// (as a frame in several receive descriptors), cut where their sequence number says,
    /// falling back as the worker does when TCP wants the octets in one piece; and the third
    /// cut in two consecutive segments offered as one batch (falling back to one by one).
    runs: bool,
}

impl Sink for MpaSink {
    fn on_segment(&mut self, b: &mut Connection, now: Instant, repr: &TcpRepr, payload: &[u8]) {
        let out = receive_segment(b, &mut self.rx, now, repr, payload, &mut self.regions);
        self.delivered += out.in_order.len() + out.reassembled;
        while let Some(c) = self.rx.poll_completion() {
            self.completions.push(c);
        }
    }

    fn on_segment_in_burst<'f>(
        &mut self,
        b: &mut Connection,
        now: Instant,
        repr: &TcpRepr,
        payload: &'f [u8],
        run: &mut RunOctets<'f>,
    ) {
        if !self.runs {
            return self.on_segment(b, now, repr, payload);
        }
        let seq = repr.seq_number.0 as usize;
        if !seq.is_multiple_of(3) {
            // Cuts at an odd and an even offset, either may be 0 or the end (empty pieces).
            let c1 = (seq / 3) % (payload.len() + 1);
            let c2 = (c1 + (seq / 7) % 2000).min(payload.len());
            let pieces = [&payload[..c1], &payload[c1..c2], &payload[c2..]];
            // Each piece's CRC as the parse pass gives it (right, unknown or wrong); an empty
            // piece is none of the run's.
            let crcs = [
                (seq, pieces[0]),
                (seq + c1, pieces[1]),
                (seq + c2, pieces[2]),
            ]
            .map(|(at, p)| payload_crc(at, p));
            if let Some(out) = receive_pieces_in_run(
                b,
                &mut self.rx,
                now,
                repr,
                (pieces.into_iter(), &crcs[..]),
                run,
                &mut self.regions,
            ) {
                self.delivered += out.in_order.len() + out.reassembled;
                while let Some(c) = self.rx.poll_completion() {
                    self.completions.push(c);
                }
                return;
            }
            // Out of order: the run so far first, then the segment in one piece.
            self.end_burst(run);
            return self.on_segment(b, now, repr, payload);
        }
        if payload.len() >= 2 && repr.takes_followers(payload.len()) {
            // The rest as two consecutive segments of one batch (the worker's batching:
            // `receive_segments_in_run`), cut anywhere; refused, they go one by one.
            let c = 1 + (seq / 5) % (payload.len() - 1);
            let parts = [&payload[..c], &payload[c..]];
            let crcs = parts.map(|p| payload_crc(seq, p));
            let batch = (&parts[..], &crcs[..]);
            if let Some(out) =
                receive_segments_in_run(b, &mut self.rx, now, repr, batch, run, &mut self.regions)
            {
                self.delivered += out.in_order.len() + out.reassembled;
            } else {
                let mut r = *repr;
                for (p, crc) in parts.into_iter().zip(crcs) {
                    let out = receive_segment_in_run(
                        b,
                        &mut self.rx,
                        now,
                        &r,
                        (p, crc),
                        run,
                        &mut self.regions,
                    );
                    self.delivered += out.in_order.len() + out.reassembled;
                    r.seq_number = r.seq_number + p.len();
                }
            }
        } else {
            let p = (payload, payload_crc(seq, payload));
            let out = receive_segment_in_run(b, &mut self.rx, now, repr, p, run, &mut self.regions);
            self.delivered += out.in_order.len() + out.reassembled;
        }
        while let Some(c) = self.rx.poll_completion() {
            self.completions.push(c);
        }
    }

    fn end_burst(&mut self, run: &mut RunOctets<'_>) {
        self.rx.handle_in_order_run(run, &mut self.regions);
        run.clear();
        while let Some(c) = self.rx.poll_completion() {
            self.completions.push(c);
        }
    }

    fn delivered(&self) -> usize {
        self.delivered
    }
}

/// A segment's payload CRC as the worker's parse pass gives it (`seq`: its sequence number):
/// mostly right; unknown for one segment in eleven, wrong for one in thirteen (a wrong one
/// can only make the decoder read the octets again).
fn payload_crc(seq: usize, payload: &[u8]) -> Option<u32> {
    match (seq % 11, seq % 13) {
        (0, _) => None,
        (_, 0) => Some(mpa::crc::crc32c(payload) ^ 1),
        _ => Some(mpa::crc::crc32c(payload)),
    }
}

#[derive(Debug, Clone, Copy)]
struct Case {
    seed: u64,
    octets: usize,
    markers: bool,
    aligned: bool,
    loss: f64,
    reorder: f64,
    duplicate: f64,
    runs: bool,
}

struct Outcome {
    stats: RxStats,
    fpdus: u64,
}

fn run(c: Case) -> Outcome {
    let seg = if c.aligned {
        Segmentation::Aligned(SEG)
    } else {
        Segmentation::Unaligned(4000)
    };
    let Stream {
        wire,
        segment_ends,
        regions,
        posted,
        expect_regions,
        expect_completions,
        expect_digest,
        fpdus,
    } = stream::build(c.seed, c.octets, c.markers, seg);
    let t0 = Instant::now();
    let (_, hb) = handovers(t0, true, true);
    let mut rx = MpaReceiver::new(&ReceiverConfig {
        flow_id: FLOW,
        start: hb.rcv_nxt,
        markers: c.markers,
        crc: true,
        aligned_sender: c.aligned,
        ddp_rdmap_version: 1,
        pd: Some(PD),
        expect_rtr: None,
        digest: true,
    });
    rx.post_recv(&posted).expect("posted");
    let sink = MpaSink {
        rx,
        regions,
        delivered: 0,
        completions: Vec::new(),
        runs: c.runs,
    };
    let link = LinkCfg {
        loss: c.loss,
        reorder: c.reorder,
        duplicate: c.duplicate,
        delay: Duration::from_micros(200),
        rate: 1_250_000_000,
        poll: Duration::from_micros(10),
    };
    let b_cfg = TcpConfig {
        rcv_buf: 512 * 1024,
        reassembly_limit: 512 * 1024,
        ..TcpConfig::default()
    };
    let mut p = Pair::with_sink(t0, link, Rng(c.seed), wire, true, true, &b_cfg, sink);
    p.segment_ends = segment_ends.map(Into::into);
    p.run(t0);
    let s = &p.sink;
    assert_eq!(s.delivered, p.data.len(), "every octet delivered: {c:?}");
    assert!(!s.rx.is_ended(), "no Terminate: {c:?}");
    assert!(
        s.completions == expect_completions,
        "completions exactly once, in order: {c:?}: got {}, want {}",
        s.completions.len(),
        expect_completions.len()
    );
    for stag in [stream::WRITE_STAG, stream::SEND_STAG] {
        assert!(
            s.regions.bytes(stag) == expect_regions.bytes(stag),
            "region {stag:#x} octet-equal: {c:?}"
        );
    }
    assert_eq!(s.rx.digest(), Some(expect_digest), "digest: {c:?}");
    let st = *s.rx.stats();
    assert_eq!(st.fpdus, fpdus);
    assert_eq!(
        st.placed_direct + st.placed_gathered + st.placed_in_order + st.placed_from_store,
        fpdus,
        "every FPDU placed once: {st:?}"
    );
    assert_eq!(st.crc_errors + st.marker_errors, 0);
    assert_eq!(s.rx.placed_ahead_waiting(), 0);
    Outcome { stats: st, fpdus }
}

fn share_direct(o: &Outcome) -> f64 {
    o.stats.placed_direct as f64 / o.fpdus.max(1) as f64
}

/// Of the FPDUs that arrived out of order, the share placed on arrival (straight from their
/// segment or gathered with stored pieces) rather than from the store once the hole filled.
fn share_ahead(o: &Outcome) -> f64 {
    let s = &o.stats;
    let ahead = s.placed_direct + s.placed_gathered;
    ahead as f64 / (ahead + s.placed_from_store).max(1) as f64
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn any_loss_reordering_and_duplication_places_every_octet_once(
        seed in any::<u64>(),
        markers in any::<bool>(),
        aligned in any::<bool>(),
        loss in prop_oneof![Just(0.0), Just(0.01), Just(0.05), Just(0.1), Just(0.2)],
        reorder in 0.0..0.1f64,
        duplicate in 0.0..0.05f64,
        runs in any::<bool>(),
    ) {
        let c = Case { seed, octets: 192 * 1024, markers, aligned, loss, reorder, duplicate, runs };
        let o = run(c);
        eprintln!(
            "{c:?}: {} FPDUs, {:.0} % placed directly, {} from the store, {} rejected by the locator",
            o.fpdus,
            100.0 * share_direct(&o),
            o.stats.placed_from_store,
            o.stats.located_rejected
        );
    }
}

/// With markers (or an aligned sender) and loss, most FPDUs behind a hole are placed straight
/// from their segment; without either, none can be (the store holds them).
#[test]
fn out_of_order_segments_are_placed_directly_when_locatable() {
    let base = Case {
        seed: 11,
        octets: 1 << 20,
        markers: true,
        aligned: false,
        loss: 0.05,
        reorder: 0.02,
        duplicate: 0.01,
        runs: false,
    };
    let marked = run(base);
    let aligned = run(Case {
        markers: false,
        aligned: true,
        ..base
    });
    let neither = run(Case {
        markers: false,
        aligned: false,
        ..base
    });
    eprintln!(
        "placed directly: markers {:.1} %, aligned {:.1} %, neither {:.1} %; out-of-order \
         FPDUs placed on arrival: markers {:.1} % ({} gathered), aligned {:.1} %",
        100.0 * share_direct(&marked),
        100.0 * share_direct(&aligned),
        100.0 * share_direct(&neither),
        100.0 * share_ahead(&marked),
        marked.stats.placed_gathered,
        100.0 * share_ahead(&aligned),
    );
    assert!(marked.stats.placed_direct > 0, "{:?}", marked.stats);
    assert!(aligned.stats.placed_direct > 0, "{:?}", aligned.stats);
    assert_eq!(neither.stats.placed_direct, 0);
    assert!(neither.stats.placed_from_store > 0);
    // Markers locate the FPDUs that straddle the unaligned segments too: once their last
    // piece is in, they are gathered with the stored pieces. Without markers nothing is.
    assert!(marked.stats.placed_gathered > 0, "{:?}", marked.stats);
    assert!(share_ahead(&marked) > 0.75, "{:?}", marked.stats);
    assert_eq!(aligned.stats.placed_gathered, 0);
    assert_eq!(neither.stats.placed_gathered, 0);
}

#[test]
fn heavy_loss_still_places_every_octet() {
    for (i, loss) in [0.1, 0.2, 0.3].into_iter().enumerate() {
        for (markers, aligned) in [(true, false), (false, true), (true, true)] {
            run(Case {
                seed: 40 + i as u64,
                octets: 256 * 1024,
                markers,
                aligned,
                loss,
                reorder: 0.05,
                duplicate: 0.03,
                runs: i % 2 == 1,
            });
        }
    }
}

/// Decoded a burst at a time, FPDUs that span the segments of a burst are verified and placed
/// from the segments themselves: with no loss every FPDU that does not reach across bursts is,
/// and the regions, completions and digest are those of segment-by-segment decoding.
#[test]
fn runs_place_fpdus_spanning_segments_in_place_and_octet_exact() {
    for markers in [false, true] {
        for (loss, reorder) in [(0.0, 0.0), (0.05, 0.05)] {
            let c = Case {
                seed: 7,
                octets: 512 * 1024,
                markers,
                aligned: false,
                loss,
                reorder,
                duplicate: 0.0,
                runs: true,
            };
            let with = run(c);
            let without = run(Case { runs: false, ..c });
            assert_eq!(with.fpdus, without.fpdus);
            assert_eq!(without.stats.spanned_in_place, 0, "{:?}", without.stats);
            assert!(with.stats.spanned_in_place > 0, "{:?}", with.stats);
            if loss == 0.0 {
                // Unaligned 4000-octet segments: nearly every FPDU spans two; only those
                // crossing a burst's end are staged.
                assert!(
                    with.stats.staged < with.stats.spanned_in_place,
                    "{:?}",
                    with.stats
                );
            }
        }
    }
}
