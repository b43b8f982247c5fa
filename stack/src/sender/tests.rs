//! The FPDU source alone (differential against `mpa`'s encoder, post checks) and in the
//! in-memory pair: A = a TCP sending from an `FpduSource` over a lossy, reordering,
//! duplicating link, B = our TCP and MPA receiver placing into its regions.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use mpa::decoder::FpduDecoder;
use mpa::encoder::FpduEncoder;
use mpa::seq::SeqNumber;
use mpa::wire::ddp::DdpRepr;
use mpa_ctl_proto::{Completion, CompletionKind, RegionInfo};
use proptest::prelude::*;

use super::*;
use crate::flow::receive_segment;
use crate::receiver::{MemRegions, MpaReceiver, PostedBuf, ReceiverConfig};
use crate::sim::{send_segment, write_segment, SplitMix64 as Rng};
use crate::tcp::tests::harness::{OUR_IP, PEER_IP};
use crate::tcp::tests::pair::handovers;
use crate::tcp::{Connection, Event, SendSource, TcpConfig};
use crate::wire::tcp::{TcpPacket, TcpRepr};

const SRC_STAG: u32 = 0x51;
const WRITE_STAG: u32 = 0x100;
const SEND_STAG: u32 = 0x200;
const PD: u32 = 1;
const FLOW: u64 = 9;

fn region(stag: u32, len: u64) -> RegionInfo {
    crate::receiver::tests::writable_region(stag, len, PD)
}

/// A's regions: one region of `len` random octets.
fn source_regions(rng: &mut Rng, len: usize) -> MemRegions {
    let mut r = MemRegions::default();
    r.insert(region(SRC_STAG, len as u64));
    let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
    assert!(r.write(SRC_STAG, 0, &data));
    r
}

/// One message of a test: (is a Send, source offset, length).
#[derive(Debug, Clone, Copy)]
struct Spec {
    send: bool,
    src: u64,
    len: u64,
}

/// Random messages: sizes from the interesting ones (0 only for Writes).
fn specs(rng: &mut Rng, n: usize, src_len: usize) -> Vec<Spec> {
    const SIZES: [u64; 12] = [0, 1, 2, 3, 5, 100, 1429, 1448, 1449, 4096, 12_000, 65_536];
    (0..n)
        .map(|_| {
            let send = rng.chance(0.4);
            let mut len = SIZES[rng.below(SIZES.len() as u64) as usize];
            if send && len == 0 {
                len = 1;
            }
            let src = rng.below(src_len as u64 - len + 1);
            Spec { send, src, len }
        })
        .collect()
}

// ------------------------------------------------------------------ the source alone

/// The stream `mpa`'s encoder makes of the same messages, with the FPDU boundaries.
fn reference(
    cfg: &SenderConfig,
    mulpdu: usize,
    regions: &MemRegions,
    specs: &[Spec],
) -> (Vec<u8>, Vec<usize>, Vec<usize>) {
    let mut enc = FpduEncoder::at_position(cfg.position, cfg.markers);
    let src = regions.bytes(SRC_STAG).unwrap();
    let (mut out, mut ends, mut counts) = (Vec::new(), Vec::new(), Vec::new());
    let (mut to, mut msn) = (0u64, 1u32);
    // Content octets so far (FPDUs without markers), for the FPDU size rule.
    let mut content = 0u64;
    let first_marker = mpa::markers::to_next_marker(cfg.position) as u64;
    for s in specs {
        let hdr = if s.send { 18 } else { 14 };
        let chunk = super::post::fpdu_chunk(mulpdu, hdr, s.len, content, first_marker, cfg.markers);
        let mut off = 0;
        let mut n = 0;
        loop {
            let take = (s.len - off).min(chunk);
            let last = off + take == s.len;
            let ddp: DdpRepr = if s.send {
                send_segment(msn, off as u32, last)
            } else {
                write_segment(WRITE_STAG, to + off, last)
            };
            let mut h = [0u8; 18];
            ddp.emit(&mut h, 1).unwrap();
            let p = &src[(s.src + off) as usize..(s.src + off + take) as usize];
            enc.encode_parts(&[&h[..hdr], p], &mut out).unwrap();
            ends.push(out.len());
            content += mpa::wire::fpdu::fpdu_len(hdr + take as usize) as u64;
            n += 1;
            off += take;
            if last {
                break;
            }
        }
        counts.push(n);
        if s.send {
            msn += 1;
        } else {
            to += s.len;
        }
    }
    (out, ends, counts)
}

fn post_all<R: Regions>(src: &mut FpduSource<R>, specs: &[Spec]) {
    let mut to = 0;
    for s in specs {
        if s.send {
            src.post_send(SRC_STAG, s.src, s.len).unwrap();
        } else {
            src.post_write(SRC_STAG, s.src, s.len, WRITE_STAG, to)
                .unwrap();
            to += s.len;
        }
    }
}

/// Octet-equal to the encoder's stream, whole and in any pieces; segments cut only after
/// whole FPDUs and as many as fit; completions exactly when the last octet is acknowledged.
fn check_against_encoder(seed: u64, emss: usize, markers: bool, position: u32, n: usize) {
    let mut rng = Rng(seed);
    let regions = source_regions(&mut rng, 70_000);
    let specs = specs(&mut rng, n, 70_000);
    let cfg = SenderConfig {
        position,
        ..SenderConfig::new(emss, markers)
    };
    let mut src = FpduSource::new(cfg, regions.clone()).unwrap();
    post_all(&mut src, &specs);
    let (want, ends, counts) = reference(&cfg, src.mulpdu(), &regions, &specs);
    assert_eq!(
        src.queued(),
        want.len(),
        "{seed} {emss} {markers} {position}"
    );
    let mut whole = vec![0u8; want.len()];
    src.fill(0, &mut whole).unwrap();
    assert!(
        whole == want,
        "whole stream differs: {seed} {emss} {markers}"
    );
    // Random pieces (partial FPDUs included) give the same octets.
    for _ in 0..50 {
        let a = rng.below(want.len() as u64) as usize;
        let b = a + rng.below((want.len() - a) as u64 + 1) as usize;
        let mut part = vec![0u8; b - a];
        src.fill(a, &mut part).unwrap();
        assert!(part == want[a..b], "piece {a}..{b}");
    }
    // Segments: from every boundary, whole FPDUs up to the EMSS, as many as fit.
    let mut off = 0;
    let mut i = 0;
    while off < want.len() {
        let len = src.segment_len(off, emss);
        assert!(len > 0 && len <= emss, "segment at {off}: {len}");
        while ends[i] < off + len {
            i += 1;
        }
        assert_eq!(ends[i], off + len, "segment ends after an FPDU");
        if let Some(&next) = ends.get(i + 1) {
            assert!(next - off > emss, "the next FPDU would not have fitted");
        }
        // A smaller room that ends inside the first FPDU gives nothing.
        let first = ends.iter().find(|&&e| e > off).unwrap() - off;
        assert_eq!(src.segment_len(off, first - 1), 0);
        assert_eq!(src.segment_len(off, first), first);
        off += len;
    }
    // Acknowledging octet by octet ranges: a message completes with its last octet.
    let mut msg_ends = Vec::new();
    {
        let mut k = 0;
        for &fpdus in &counts {
            k += fpdus;
            msg_ends.push(ends[k - 1]);
        }
    }
    let mut acked = 0;
    let mut done = 0;
    while acked < want.len() {
        let step = (1 + rng.below(3000) as usize).min(want.len() - acked);
        src.acked(step);
        acked += step;
        while let Some(c) = src.poll_completion() {
            assert_eq!(c.id, done as u64 + 1);
            assert!(msg_ends[done] <= acked);
            assert_eq!(c.len, specs[done].len);
            done += 1;
        }
        assert!(done == specs.len() || msg_ends[done] > acked);
    }
    assert_eq!(done, specs.len());
    assert_eq!(src.queued(), 0);
}

#[test]
fn stream_equals_the_encoders() {
    for (seed, emss, markers, position) in [
        (1, 1448, true, 0),
        (2, 1448, false, 0),
        (3, 536, true, 508),
        (4, 8948, true, u32::MAX - 3),
        (5, 64, true, 4),
        (6, 1460, false, 12),
        (7, 1000, true, u32::MAX - 511),
    ] {
        check_against_encoder(seed, emss, markers, position, 40);
    }
}

#[test]
fn post_errors_are_typed_and_queue_nothing() {
    let mut rng = Rng(3);
    let mut cfg = SenderConfig::new(1448, true);
    cfg.pd = Some(PD);
    cfg.max_messages = 2;
    let mut regions = source_regions(&mut rng, 1000);
    regions.insert(RegionInfo {
        pd: 2,
        ..region(0x77, 100)
    });
    let mut src = FpduSource::new(cfg, regions).unwrap();
    assert_eq!(
        src.post_write(0x99, 0, 1, 1, 0),
        Err(PostError::UnknownRegion { stag: 0x99 })
    );
    assert_eq!(
        src.post_send(0x77, 0, 1),
        Err(PostError::WrongDomain {
            stag: 0x77,
            region_pd: 2,
            pd: PD
        })
    );
    assert_eq!(
        src.post_write(SRC_STAG, 999, 2, 1, 0),
        Err(PostError::OutOfBounds {
            stag: SRC_STAG,
            offset: 999,
            len: 2,
            region_len: 1000
        })
    );
    assert!(matches!(
        src.post_write(SRC_STAG, u64::MAX, 2, 1, 0),
        Err(PostError::OutOfBounds { .. })
    ));
    assert_eq!(
        src.post_write(SRC_STAG, 0, 2, 1, u64::MAX),
        Err(PostError::TooLong { len: 2 })
    );
    assert_eq!(src.queued(), 0);
    assert_eq!(src.next_msn(), 1, "a refused Send takes no MSN");
    assert_eq!(src.post_send(SRC_STAG, 0, 1000).unwrap().1, 1);
    assert_eq!(src.post_send(SRC_STAG, 0, 0).unwrap().1, 2);
    assert_eq!(src.post_send(SRC_STAG, 0, 1), Err(PostError::QueueFull(2)));
    assert_eq!(
        FpduSource::new(SenderConfig::new(63, true), MemRegions::default()).unwrap_err(),
        SenderConfigError::EmssTooSmall { emss: 63 }
    );
    let mut odd = SenderConfig::new(1448, true);
    odd.position = 2;
    assert_eq!(
        FpduSource::new(odd, MemRegions::default()).unwrap_err(),
        SenderConfigError::Unaligned(2)
    );
}

#[test]
fn region_gone_in_flight_is_an_error_not_a_panic() {
    let mut rng = Rng(4);
    let mut src = FpduSource::new(
        SenderConfig::new(1448, false),
        source_regions(&mut rng, 5000),
    )
    .unwrap();
    src.post_write(SRC_STAG, 0, 5000, 1, 0).unwrap();
    src.regions_mut().remove(SRC_STAG);
    let mut out = vec![0u8; 1448];
    assert!(matches!(
        src.fill(0, &mut out),
        Err(SourceError::RegionUnreadable { stag: SRC_STAG, .. })
    ));
    // Partly too: the scratch path reports the same.
    assert!(src.fill(10, &mut out[..100]).is_err());
}

// ------------------------------------------------------------------ the pair

#[derive(Debug, Clone, Copy)]
struct Case {
    seed: u64,
    messages: usize,
    emss: usize,
    markers: bool,
    loss: f64,
    reorder: f64,
    duplicate: f64,
}

/// B: TCP, MPA receiver and its regions.
struct B {
    tcp: Connection,
    rx: MpaReceiver,
    regions: MemRegions,
    completions: Vec<Completion>,
}

/// A packet on the link: (arrival, tiebreak, to B, octets).
type Packet = (Instant, u64, bool, Vec<u8>);

struct Outcome {
    a_stats: crate::tcp::TcpStats,
    segments: u64,
}

fn wire<S: SendSource>(c: &mut Connection<S>, now: Instant, buf: &mut [u8]) -> Option<Vec<u8>> {
    let t = c.poll_transmit(now, buf)?;
    Some(buf[..t.len()].to_vec())
}

/// Decodes a segment A sent on its own, with the markers of its stream position: it must
/// begin with an FPDU and hold whole FPDUs only, every CRC good.
fn check_segment(markers: bool, start: SeqNumber, repr: &TcpRepr, payload: &[u8]) -> usize {
    let pos = repr.seq_number.distance_from(start);
    let mut dec = FpduDecoder::at_position(pos, markers, true);
    let mut n = 0;
    {
        let mut chunk = dec.feed(payload);
        while let Some(u) = chunk.next_ulpdu() {
            if let Err(e) = u {
                panic!("segment at {pos} ({} octets): {e}", payload.len());
            }
            n += 1;
        }
    }
    assert_eq!(
        dec.buffered(),
        0,
        "segment at {pos} ({} octets) ends inside an FPDU",
        payload.len()
    );
    assert!(n > 0, "segment at {pos} holds no whole FPDU");
    n
}

fn run(c: Case) -> Outcome {
    let mut rng = Rng(c.seed);
    let t0 = Instant::now();
    let (mut ha, mut hb) = handovers(t0, true, true);
    // The EMSS the case asks for: MSS less the timestamps.
    ha.mss = (c.emss + 12) as u16;
    hb.mss = ha.mss;
    let start = ha.snd_nxt;
    const SRC_LEN: usize = 200_000;
    let specs = specs(&mut rng, c.messages, SRC_LEN);
    let src_regions = source_regions(&mut rng, SRC_LEN);

    // B's regions, posted buffers and the completions it must report.
    let total_write: u64 = specs.iter().filter(|s| !s.send).map(|s| s.len).sum();
    let total_send: u64 = specs.iter().filter(|s| s.send).map(|s| s.len + 8).sum();
    let mut b_regions = MemRegions::default();
    b_regions.insert(region(WRITE_STAG, total_write + 1));
    b_regions.insert(region(SEND_STAG, total_send + 1));
    let mut expect = b_regions.clone();
    let src_bytes = src_regions.bytes(SRC_STAG).unwrap();
    let (mut to, mut send_off, mut msn) = (0u64, 0u64, 1u32);
    let mut posted = Vec::new();
    let mut expect_completions = Vec::new();
    for s in &specs {
        let data = &src_bytes[s.src as usize..(s.src + s.len) as usize];
        if s.send {
            assert!(expect.write(SEND_STAG, send_off, data));
            posted.push(PostedBuf {
                stag: SEND_STAG,
                offset: send_off,
                len: s.len as u32 + 8,
                wr_id: 0,
            });
            expect_completions.push(Completion {
                flow_id: FLOW,
                kind: CompletionKind::SendArrived,
                stag: SEND_STAG,
                offset: send_off,
                len: s.len,
                msn: Some(msn),
                invalidate_stag: None,
                wr_id: 0,
                status: mpa_ctl_proto::CompletionStatus::Success,
            });
            send_off += s.len + 8;
            msn += 1;
        } else {
            assert!(expect.write(WRITE_STAG, to, data));
            expect_completions.push(Completion {
                flow_id: FLOW,
                kind: CompletionKind::WritePlaced,
                stag: WRITE_STAG,
                offset: to,
                len: s.len,
                msn: None,
                invalidate_stag: None,
                wr_id: 0,
                status: mpa_ctl_proto::CompletionStatus::Success,
            });
            to += s.len;
        }
    }

    let a_cfg = TcpConfig {
        snd_buf: 1 << 20,
        rto_initial: Duration::from_millis(200),
        max_snd_mss: 9100,
        ..TcpConfig::default()
    };
    let mut a = Connection::with_source(
        &ha,
        &a_cfg,
        t0,
        FpduSource::new(SenderConfig::new(c.emss, c.markers), src_regions).unwrap(),
    )
    .unwrap();
    assert_eq!(a.emss(), c.emss);
    post_all(a.source_mut(), &specs);
    let mut rx = MpaReceiver::new(&ReceiverConfig {
        flow_id: FLOW,
        start: hb.rcv_nxt,
        markers: c.markers,
        crc: true,
        aligned_sender: true,
        ddp_rdmap_version: 1,
        pd: Some(PD),
        expect_rtr: None,
        digest: false,
    });
    rx.post_recv(&posted).unwrap();
    let b_cfg = TcpConfig {
        rcv_buf: 512 * 1024,
        reassembly_limit: 512 * 1024,
        ..TcpConfig::default()
    };
    let mut b = B {
        tcp: Connection::new(&hb, &b_cfg, t0).unwrap(),
        rx,
        regions: b_regions,
        completions: Vec::new(),
    };

    let delay = Duration::from_micros(200);
    let rate = 1_250_000_000u64;
    let mut heap: BinaryHeap<Reverse<Packet>> = BinaryHeap::new();
    let mut busy = [t0; 2];
    let mut counter = 0u64;
    let mut now = t0;
    let mut a_done = Vec::new();
    let mut segments = 0u64;
    let mut buf = vec![0u8; 10_000];
    for _ in 0..2_000_000 {
        // Everything both want to send now goes on the link.
        loop {
            let mut any = false;
            for to_b in [true, false] {
                let bytes = if to_b {
                    wire(&mut a, now, &mut buf)
                } else {
                    wire(&mut b.tcp, now, &mut buf)
                };
                let Some(mut bytes) = bytes else { continue };
                any = true;
                let (src, dst) = if to_b {
                    (PEER_IP, OUR_IP)
                } else {
                    (OUR_IP, PEER_IP)
                };
                TcpPacket::new_unchecked(&mut bytes[..]).fill_checksum_v4(src, dst);
                if to_b {
                    let p = TcpPacket::new_checked(&bytes[..]).unwrap();
                    let repr = TcpRepr::parse(&p).unwrap();
                    if !p.payload().is_empty() {
                        check_segment(c.markers, start, &repr, p.payload());
                        segments += 1;
                    }
                }
                let i = usize::from(!to_b);
                let at0 = busy[i].max(now);
                busy[i] = at0 + Duration::from_nanos(bytes.len() as u64 * 1_000_000_000 / rate);
                if rng.chance(c.loss) {
                    continue;
                }
                let mut at = busy[i] + delay;
                if rng.chance(c.reorder) {
                    at += Duration::from_nanos(rng.below(2 * delay.as_nanos() as u64));
                }
                let copies = if rng.chance(c.duplicate) { 2 } else { 1 };
                for _ in 0..copies {
                    counter += 1;
                    heap.push(Reverse((at, counter, to_b, bytes.clone())));
                }
            }
            if !any {
                break;
            }
        }
        while let Some(comp) = a.source_mut().poll_completion() {
            a_done.push(comp);
        }
        while let Some(e) = a.poll_event() {
            assert!(!matches!(e, Event::Failed(_) | Event::Reset), "A: {e:?}");
        }
        if a.source_queued() == 0 && b.completions.len() == expect_completions.len() {
            break;
        }
        let next = [
            heap.peek().map(|Reverse((at, ..))| *at),
            a.poll_timeout(),
            b.tcp.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else { break };
        now = now.max(next);
        let (mut burst_a, mut burst_b) = (false, false);
        while heap.peek().is_some_and(|Reverse((at, ..))| *at <= now) {
            let Some(Reverse((_, _, to_b, bytes))) = heap.pop() else {
                break;
            };
            let p = TcpPacket::new_checked(&bytes[..]).unwrap();
            let repr = TcpRepr::parse(&p).unwrap();
            if to_b {
                burst_b = true;
                receive_segment(
                    &mut b.tcp,
                    &mut b.rx,
                    now,
                    &repr,
                    p.payload(),
                    &mut b.regions,
                );
                while let Some(comp) = b.rx.poll_completion() {
                    b.completions.push(comp);
                }
            } else {
                burst_a = true;
                a.handle_segment(now, &repr, p.payload());
            }
        }
        if burst_a {
            a.end_of_burst(now);
        }
        if burst_b {
            b.tcp.end_of_burst(now);
        }
        if a.poll_timeout().is_some_and(|t| t <= now) {
            a.handle_timeout(now);
        }
        if b.tcp.poll_timeout().is_some_and(|t| t <= now) {
            b.tcp.handle_timeout(now);
        }
        assert!(
            now - t0 < Duration::from_secs(3600),
            "virtual time ran away: {c:?}\n{}",
            a.send_debug()
        );
    }
    while let Some(comp) = a.source_mut().poll_completion() {
        a_done.push(comp);
    }
    assert_eq!(a.source_queued(), 0, "everything acknowledged: {c:?}");
    assert!(!b.rx.is_ended(), "no Terminate: {c:?}");
    assert!(
        b.completions == expect_completions,
        "B's completions exactly once, in order: {c:?}: got {}, want {}",
        b.completions.len(),
        expect_completions.len()
    );
    assert_eq!(a_done.len(), specs.len(), "A completes each message once");
    let (mut msn, mut to) = (1u32, 0u64);
    for (i, (d, s)) in a_done.iter().zip(&specs).enumerate() {
        assert_eq!(d.id, i as u64 + 1);
        assert_eq!((d.src_stag, d.src_offset, d.len), (SRC_STAG, s.src, s.len));
        if s.send {
            assert_eq!(
                d.kind,
                MessageKind::Send {
                    msn,
                    solicited: false
                }
            );
            msn += 1;
        } else {
            assert_eq!(
                d.kind,
                MessageKind::Write {
                    sink_stag: WRITE_STAG,
                    sink_to: to
                }
            );
            to += s.len;
        }
    }
    for stag in [WRITE_STAG, SEND_STAG] {
        assert!(
            b.regions.bytes(stag) == expect.bytes(stag),
            "region {stag:#x} octet-exact: {c:?}"
        );
    }
    let st = *a.stats();
    assert_eq!(st.unaligned_segments, 0);
    assert_eq!(a.source().stats().partial_fills, 0);
    assert_eq!(a.source().stats().completed, specs.len() as u64);
    let rxs = *b.rx.stats();
    assert_eq!(rxs.crc_errors + rxs.marker_errors, 0);
    Outcome {
        a_stats: st,
        segments,
    }
}

#[test]
fn writes_and_sends_at_0_1_5_20_percent_loss() {
    for (i, loss) in [0.0, 0.01, 0.05, 0.2].into_iter().enumerate() {
        for markers in [true, false] {
            let lossy = loss > 0.0;
            let c = Case {
                seed: 100 + i as u64 * 2 + u64::from(markers),
                messages: 60,
                emss: 1448,
                markers,
                loss,
                reorder: if lossy { 0.03 } else { 0.0 },
                duplicate: if lossy { 0.02 } else { 0.0 },
            };
            let o = run(c);
            assert!(
                !lossy || o.a_stats.retransmissions > 0,
                "{c:?}: loss retransmits"
            );
            eprintln!(
                "{c:?}: {} data segments, {} retransmissions ({} RTO, {} recoveries)",
                o.segments,
                o.a_stats.retransmissions,
                o.a_stats.rto_expiries,
                o.a_stats.recovery_episodes
            );
        }
    }
}

#[test]
fn jumbo_and_small_emss() {
    for (seed, emss) in [(7, 8948), (8, 524), (9, 100)] {
        run(Case {
            seed,
            messages: 30,
            emss,
            markers: true,
            loss: 0.05,
            reorder: 0.02,
            duplicate: 0.01,
        });
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn any_sizes_and_emss_send_aligned_and_exact(
        seed in any::<u64>(),
        emss in 64usize..9000,
        markers in any::<bool>(),
        loss in prop_oneof![Just(0.0), Just(0.01), Just(0.05), Just(0.2)],
        messages in 1usize..40,
    ) {
        run(Case { seed, messages, emss, markers, loss, reorder: 0.02, duplicate: 0.01 });
    }

    #[test]
    fn any_layout_equals_the_encoders(
        seed in any::<u64>(),
        emss in 64usize..9000,
        markers in any::<bool>(),
        position in any::<u32>(),
        n in 1usize..30,
    ) {
        check_against_encoder(seed, emss, markers, position & !3, n);
    }
}

// ------------------------------------------------------------------ against a scripted peer

mod scripted {
    use super::*;
    use crate::tcp::tests::harness::{handover, Peer, SEG};

    type Sender = Connection<FpduSource<MemRegions>>;

    /// Our connection sending one 20 000-octet Write, the peer's window `wnd` octets.
    fn sender(t0: Instant, wnd: u32, markers: bool) -> (Sender, SeqNumber) {
        let mut rng = Rng(5);
        let mut h = handover(t0, true);
        h.snd_wnd = wnd;
        let cfg = TcpConfig::default();
        let src = FpduSource::new(
            SenderConfig::new(SEG, markers),
            source_regions(&mut rng, 20_000),
        )
        .unwrap();
        let mut c = Connection::with_source(&h, &cfg, t0, src).unwrap();
        c.source_mut()
            .post_write(SRC_STAG, 0, 20_000, WRITE_STAG, 0)
            .unwrap();
        (c, h.snd_nxt)
    }

    fn drain(c: &mut Sender, now: Instant) -> Vec<(TcpRepr, Vec<u8>)> {
        let mut buf = [0u8; 2048];
        let mut v = Vec::new();
        while let Some(t) = c.poll_transmit(now, &mut buf) {
            let p = TcpPacket::new_unchecked(&buf[..t.len()]);
            v.push((t.repr, p.payload().to_vec()));
            assert!(v.len() < 1000);
        }
        v
    }

    /// A zero window: the probes carry no data (SND.UNA − 1, as Linux), so they never
    /// break alignment; the window's answer lets the aligned segments go.
    #[test]
    fn zero_window_probe_carries_no_octet() {
        let t0 = Instant::now();
        let (mut c, start) = sender(t0, 0, true);
        assert!(drain(&mut c, t0).iter().all(|(_, p)| p.is_empty()));
        let at = c.poll_timeout().expect("persist timer");
        c.handle_timeout(at);
        let probes = drain(&mut c, at);
        assert_eq!(probes.len(), 1);
        assert!(probes[0].1.is_empty());
        assert_eq!(probes[0].0.seq_number, start + u32::MAX);
        assert_eq!(c.stats().window_probes, 1);
        // The window opens: full aligned segments.
        let mut peer = Peer::new(true);
        peer.ack = start;
        c.handle_segment(at, &peer.pure_ack(0), &[]);
        let segs = drain(&mut c, at);
        assert!(!segs.is_empty());
        for (r, p) in &segs {
            check_segment(true, start, r, p);
        }
        assert_eq!(c.stats().unaligned_segments, 0);
    }

    /// A window open but below one FPDU, nothing in flight: nothing goes until the persist
    /// timer, then one segment fills the window inside the FPDU (RFC 5044 Appendix A.1);
    /// the next ends that FPDU, and those after start with FPDUs again.
    #[test]
    fn window_below_one_fpdu_breaks_alignment_once_after_a_persist_interval() {
        let t0 = Instant::now();
        let (mut c, start) = sender(t0, 1024, true);
        assert!(
            drain(&mut c, t0).is_empty(),
            "nothing fits a 1024-octet window"
        );
        let at = c.poll_timeout().expect("persist timer");
        c.handle_timeout(at);
        let segs = drain(&mut c, at);
        assert_eq!(segs.len(), 1);
        assert_eq!(segs[0].1.len(), 1024);
        assert_eq!(c.stats().unaligned_segments, 1);
        let mut head = segs[0].1.clone();
        let mut peer = Peer::new(true);
        peer.ack = start + 1024u32;
        c.handle_segment(at, &peer.pure_ack(0), &[]);
        let segs = drain(&mut c, at);
        assert!(segs.len() >= 2);
        // The rest of the cut FPDU ends the first segment (both together are one whole
        // FPDU); then whole FPDUs from a boundary.
        head.extend_from_slice(&segs[0].1);
        let mut dec = FpduDecoder::new(true, true);
        let mut chunk = dec.feed(&head);
        assert!(matches!(chunk.next_ulpdu(), Some(Ok(_))));
        assert!(chunk.next_ulpdu().is_none());
        drop(chunk);
        assert_eq!(dec.buffered(), 0);
        for (r, p) in &segs[1..] {
            check_segment(true, start, r, p);
        }
        assert_eq!(c.stats().unaligned_segments, 1);
    }

    /// Data from the peer out of order: the owed ACK with its SACK block goes alone, the
    /// aligned data segments stay full-sized (SACK blocks that do not fit are left off).
    #[test]
    fn sack_blocks_do_not_shrink_aligned_segments() {
        let t0 = Instant::now();
        let (mut c, start) = sender(t0, 64 * 1024, false);
        let mut peer = Peer::new(true);
        peer.ack = start;
        let (r, p) = peer.data(1000, 500);
        c.handle_segment(t0, &r, &p);
        let segs = drain(&mut c, t0);
        assert!(segs[0].1.is_empty(), "the owed ACK first");
        assert_eq!(segs[0].0.options.sack.len(), 1);
        let data: Vec<_> = segs.iter().filter(|(_, p)| !p.is_empty()).collect();
        assert!(data.len() >= 2);
        assert_eq!(data[0].1.len(), SEG, "one full FPDU per segment");
        for (r, p) in data {
            check_segment(false, start, r, p);
            assert!(r.options.sack.is_empty());
        }
        assert!(c.stats().sack_blocks_trimmed > 0);
    }

    /// A region removed under a message in flight fails the connection with a RST and a
    /// typed error.
    #[test]
    fn region_gone_fails_the_connection() {
        let t0 = Instant::now();
        let (mut c, _) = sender(t0, 64 * 1024, true);
        c.source_mut().regions_mut().remove(SRC_STAG);
        let segs = drain(&mut c, t0);
        assert_eq!(segs.len(), 1);
        assert!(segs[0].0.flags.rst());
        assert!(matches!(
            c.poll_event(),
            Some(Event::Failed(crate::tcp::TcpError::Source(
                SourceError::RegionUnreadable { stag: SRC_STAG, .. }
            )))
        ));
    }
}

/// What one core fills per second: 64 KiB Writes cut into 1448-octet segments (markers on
/// and off), each segment written from the region with its CRC. Measurement, not a check:
/// `cargo test --release -p mpa-datapath --lib sender::tests::fill_rate -- --ignored --nocapture`.
#[test]
#[ignore]
fn fill_rate() {
    for markers in [false, true] {
        let mut rng = Rng(6);
        let mut src = FpduSource::new(
            SenderConfig::new(1448, markers),
            source_regions(&mut rng, 1 << 20),
        )
        .unwrap();
        let mut out = vec![0u8; 1448];
        let t = std::time::Instant::now();
        let mut octets = 0u64;
        while t.elapsed() < Duration::from_secs(3) {
            for i in 0..16 {
                src.post_write(SRC_STAG, i * 65_536, 65_536, WRITE_STAG, 0)
                    .unwrap();
            }
            while src.queued() > 0 {
                let n = src.segment_len(0, 1448);
                src.fill(0, &mut out[..n]).unwrap();
                src.acked(n);
                octets += n as u64;
            }
            while src.poll_completion().is_some() {}
        }
        let s = t.elapsed().as_secs_f64();
        eprintln!(
            "markers {markers}: {:.2} Gbit/s of FPDUs, {:.0} ns per segment",
            octets as f64 * 8.0 / s / 1e9,
            s * 1e9 / (octets as f64 / 1448.0)
        );
    }
}

/// With markers, FPDU sizes are chosen so that no FPDU ends right before a Marker (Wireshark
/// loses a stream whose segment ends there); without markers they are MULPDU's.
#[test]
fn fpdu_ends_avoid_marker_positions() {
    use super::post::fpdu_chunk;
    let (mulpdu, hdr) = (1424usize, 14usize);
    for first_marker in [0u64, 4, 300] {
        for start in (0..4096u64).step_by(4) {
            for len in [1u64, 100, 1410, 4082, 65536] {
                let chunk = fpdu_chunk(mulpdu, hdr, len, start, first_marker, true);
                assert!(chunk <= (mulpdu - hdr) as u64);
                let fpdus = len.div_ceil(chunk);
                let full = mpa::wire::fpdu::fpdu_len(hdr + chunk as usize) as u64;
                let last = len - (fpdus - 1) * chunk;
                let mut ends: Vec<u64> = (1..fpdus).map(|k| start + k * full).collect();
                ends.push(
                    start
                        + (fpdus - 1) * full
                        + mpa::wire::fpdu::fpdu_len(hdr + last as usize) as u64,
                );
                let hit = |e: &u64| *e >= first_marker && (e - first_marker).is_multiple_of(508);
                if len > 4 {
                    // Several sizes (or a split in two) to choose from: one avoids every
                    // Marker position.
                    assert!(
                        !ends.iter().any(hit),
                        "start {start} len {len} chunk {chunk}: {ends:?}"
                    );
                }
            }
        }
        assert_eq!(
            fpdu_chunk(mulpdu, hdr, 4082, 0, first_marker, false),
            (mulpdu - hdr) as u64
        );
    }
}
