//! A tiny round through the real `Worker<MemRing>` (no root, no namespace) passes its own
//! checks, and its report is sane.

use super::{gen, pipeline_many, round, PipelineOpts, PipelineReport};
use crate::bed::options::Op;

/// One configuration's checked rounds.
fn pipeline(o: &PipelineOpts) -> anyhow::Result<PipelineReport> {
    Ok(pipeline_many(std::slice::from_ref(o))?.remove(0))
}
use mpa_datapath::memory::streaming::StreamingStores;

fn tiny(op: Op, markers: bool, aligned: bool, loss: f64, reorder: f64) -> PipelineOpts {
    PipelineOpts {
        rounds: 1,
        flows: 1,
        size: 4096,
        mss: 1448,
        markers,
        crc: true,
        op,
        aligned,
        loss,
        reorder,
        bytes: 2 << 20,
        seed: 7,
        digest: true,
        verify_checksums: true,
        umem_chunk: 3840,
        chains_in_pieces: false,
        streaming_stores: Default::default(),
        huge_pages: false,
        region_bytes: 16 << 20,
        ring_fill: None,
        timestamps: true,
    }
}

#[test]
fn jumbo_segments_in_descriptor_chains_check_out() {
    // MSS 8948 (MTU 9000) cut into 3840-octet descriptors as over AF_XDP: every segment
    // arrives once, gathered whole (`--gather-chains`), with loss and reordering.
    let mut o = tiny(Op::Write, true, true, 3.0, 2.0);
    o.mss = 8948;
    let r = pipeline(&o).expect("round checks pass");
    assert!(r.line().contains("chains gathered"), "{}", r.line());
    assert_eq!(r.last.frames, r.segments, "every segment arrives once");
    assert_eq!(r.last.completions, 512);
    assert!(r.last.placed_direct > 0, "{}", r.line());
}

#[test]
fn jumbo_chains_decoded_from_their_descriptors_check_out() {
    // As above, each chain decoded from its descriptors (the default): out-of-order
    // chains are gathered, in-order ones place the FPDUs spanning descriptors from them.
    let mut o = tiny(Op::Write, true, false, 3.0, 2.0);
    o.mss = 8948;
    o.chains_in_pieces = true;
    let r = pipeline(&o).expect("round checks pass");
    assert_eq!(r.last.frames, r.segments, "every segment arrives once");
    assert_eq!(r.last.completions, 512);
    assert!(!r.line().contains("chains gathered"), "{}", r.line());
    // Without loss every chain is in order: nearly every FPDU spans descriptors in place.
    o.loss = 0.0;
    o.reorder = 0.0;
    let r = pipeline(&o).expect("round checks pass");
    assert!(r.last.spanned_in_place > 10 * r.last.staged, "{}", r.line());
}

#[test]
fn streaming_stores_check_out() {
    // Every region streamed (`--streaming-stores on`): messages cut by markers, segments and
    // descriptors, some out of order, land octet for octet (each round checks the region).
    for mss in [1448, 8948] {
        let mut o = tiny(Op::Write, true, false, 3.0, 2.0);
        o.mss = mss;
        o.streaming_stores = StreamingStores::On;
        let r = pipeline(&o).expect("round checks pass");
        assert!(r.line().contains("streaming stores"), "{}", r.line());
        assert_eq!(r.last.completions, 512);
    }
    // Off: the label says nothing of it.
    let mut o = tiny(Op::Write, true, false, 0.0, 0.0);
    o.streaming_stores = StreamingStores::Off;
    let r = pipeline(&o).expect("round checks pass");
    assert!(!r.line().contains("streaming stores"), "{}", r.line());
}

#[test]
fn a_ring_filled_a_burst_at_a_time_checks_out_in_smaller_injections() {
    // `--ring-fill`: the frames injected before each series of polls, at most what the ring
    // holds; the round still checks out, in more injections, and says how it was fed.
    let o = tiny(Op::Write, true, false, 0.0, 0.0);
    let p = gen::prepare(&o).expect("frames");
    let full = round::burst_frames(&o, &p);
    let mut small = o.clone();
    small.ring_fill = Some(64);
    assert_eq!(round::burst_frames(&small, &p), 64.min(full));
    small.ring_fill = Some(usize::MAX);
    assert_eq!(round::burst_frames(&small, &p), full);
    small.ring_fill = Some(64);
    let a = pipeline(&o).expect("round checks pass");
    let b = pipeline(&small).expect("round checks pass");
    assert_eq!(b.last.completions, a.last.completions);
    assert_eq!(b.last.injections, p.frames.len().div_ceil(64) as u64);
    assert!(
        b.last.injections > a.last.injections,
        "{} vs {}",
        b.line(),
        a.line()
    );
    assert!(
        b.line().contains("ring filled 64 frames at a time"),
        "{}",
        b.line()
    );
}

#[test]
fn frames_on_transparent_huge_pages_check_out() {
    // The RX frames' arena advised onto transparent huge pages: the round checks out, and
    // where the kernel allows them (not `[never]`) it gave some.
    let mut o = tiny(Op::Write, true, false, 0.0, 0.0);
    o.huge_pages = true;
    let r = pipeline(&o).expect("round checks pass");
    assert!(r.line().contains("frames on huge pages"), "{}", r.line());
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if thp.contains('[') && !thp.contains("[never]") {
        assert!(r.last.huge_page_octets >= 2 << 20, "{}", r.line());
    }
}

#[test]
fn a_lossy_aligned_round_with_markers_places_ahead_and_checks_out() {
    let r = pipeline(&tiny(Op::Write, true, true, 5.0, 0.0)).expect("round checks pass");
    assert!(r.segments > 1000, "{}", r.line());
    assert!(r.dropped > 0, "loss applied: {}", r.line());
    assert_eq!(r.last.frames, r.segments, "every segment arrives once");
    assert!(r.last.placed_direct > 0, "{}", r.line());
    assert_eq!(r.last.completions, 512);
    assert_eq!(r.last.payload_octets, 512 * (4096 - 14));
    assert!(r.last.compared > 0 && r.last.acks > 0);
    assert!(r.ns_per_segment.median > 0.0 && r.gbits.median > 0.0);
    assert!(r.ns_per_segment.min <= r.ns_per_segment.median);
    assert!(r.ns_per_segment.median <= r.ns_per_segment.max);
}

#[test]
fn unaligned_reordered_sends_and_counting_flows_check_out() {
    let mut o = tiny(Op::Send, true, false, 2.0, 3.0);
    o.flows = 3;
    let r = pipeline(&o).expect("sends check out");
    assert!(r.last.placed_from_store > 0, "{}", r.line());
    assert_eq!(r.last.completions, 513, "{}", r.line());
    let mut o = tiny(Op::Count, false, false, 1.0, 0.0);
    o.crc = false;
    let r = pipeline(&o).expect("counting checks out");
    assert_eq!((r.last.completions, r.last.compared), (0, 0));
    assert!(r.last.fpdus >= 512);
}

#[test]
fn a_round_that_misses_or_mangles_a_segment_fails_its_checks() {
    use crate::pipeline::{gen, round};
    let o = tiny(Op::Write, true, true, 0.0, 0.0);
    let mut p = gen::prepare(&o).unwrap();
    round::run_round(&o, &p).expect("intact");
    let lost = p.frames.remove(p.frames.len() / 2);
    let e = round::run_round(&o, &p).expect_err("a segment never arrives");
    assert!(e.to_string().contains("octets received"), "{e:#}");
    // A flipped payload octet: the TCP checksum no longer matches.
    let mut bad = lost.bytes.clone();
    *bad.last_mut().unwrap() ^= 1;
    p.frames.push(gen::Frame { bytes: bad, ..lost });
    let e = round::run_round(&o, &p).expect_err("a mangled segment");
    assert!(e.to_string().contains("malformed"), "{e:#}");
}

#[test]
fn two_workers_side_by_side_each_check_out_with_their_own_flows() {
    use crate::pipeline::{gen, workers};
    // Two flows per worker, with loss and reordering: each worker's own 4-tuples, STags and
    // payloads (a message placed by the wrong worker or flow would show in the region).
    let mut o = tiny(Op::Write, true, true, 2.0, 1.0);
    o.flows = 2;
    let prepared: Vec<gen::Prepared> = (0..2)
        .map(|w| gen::prepare_worker(&o, w).unwrap())
        .collect();
    let ids: Vec<Vec<u64>> = prepared
        .iter()
        .map(|p| p.flows.iter().map(|f| f.flow_id).collect())
        .collect();
    assert_eq!(ids, vec![vec![1, 2], vec![3, 4]]);
    let stags: Vec<u32> = prepared
        .iter()
        .flat_map(|p| p.flows.iter().map(|f| f.stag))
        .collect();
    assert_eq!(stags, vec![0x100, 0x101, 0x102, 0x103]);
    let ports: Vec<u16> = prepared
        .iter()
        .flat_map(|p| p.flows.iter().map(|f| f.remote.port()))
        .collect();
    assert_eq!(ports, vec![7000, 7001, 7002, 7003]);
    assert_eq!(prepared[1].first_flow, 2);

    let cpus = workers::placement(2);
    let rs = workers::run_workers_round(&o, &prepared, cpus.as_deref()).expect("rounds check out");
    assert_eq!(rs.len(), 2);
    for (w, (r, p)) in rs.iter().zip(&prepared).enumerate() {
        // Exact: every segment once (the lost ones' first copies never enter the ring).
        assert_eq!(r.frames, p.segments, "worker {w}");
        assert_eq!(r.frames, p.frames.len() as u64, "worker {w}");
        // 2 MiB of 4 KiB messages over two flows: 256 each, every one completed in order
        // at its place (checked inside the round), counted per worker.
        assert_eq!(r.completions, 512, "worker {w}");
        assert_eq!(r.payload_octets, 512 * (4096 - 14), "worker {w}");
        let region: u64 = p.flows.iter().map(|f| f.region_len).sum();
        assert_eq!(
            r.compared, region,
            "worker {w}: every region octet compared"
        );
        assert!(r.began.is_some() && r.ended.is_some());
    }
}

#[test]
fn the_workers_report_has_each_worker_the_aggregate_and_the_reference() {
    use crate::pipeline::workers;
    let mut o = tiny(Op::Write, true, false, 0.0, 0.0);
    o.rounds = 2;
    let r = workers::run(&o, 2).expect("rounds check out");
    assert_eq!((r.workers, r.per_worker.len()), (2, 2));
    for (w, x) in r.per_worker.iter().enumerate() {
        assert_eq!(x.worker, w);
        assert_eq!(x.flow_ids, vec![w as u64 + 1]);
        assert_eq!(x.last.frames, x.segments);
        assert_eq!(x.last.completions, 512);
        assert!(x.gbits.median > 0.0 && x.ns_per_segment.median > 0.0);
    }
    assert_eq!(r.one.last.completions, 512);
    assert_eq!(r.one.flow_ids, vec![1]);
    // The aggregate counts both workers' payload, so it is at least the slower one's rate.
    let slowest = r
        .per_worker
        .iter()
        .map(|w| w.gbits.min)
        .fold(f64::INFINITY, f64::min);
    assert!(r.aggregate_gbits.max >= slowest, "{}", r.line());
    assert!(r.scaling.median > 0.0, "{}", r.line());
    // The plain copy side by side, as the workers ran: both rounds measured, the machine's
    // own scaling beside the workers'.
    let k = r
        .memcpy_scaling
        .expect("two workers: the copy side by side was timed");
    assert!(k.min > 0.0 && k.max.is_finite(), "{}", r.line());
    assert!(r.memcpy_alone_gbits.is_some_and(|a| a.min > 0.0));
    assert!(
        r.line().contains("warm memcpy side by side"),
        "{}",
        r.line()
    );
    assert!(workers::table(std::slice::from_ref(&r)).contains("side by side:"));
    let v = r.record();
    assert!(v.memcpy_scaling.is_some());
    assert_eq!(v.workers, 2);
    assert_eq!(v.per_worker.len(), 2);
    assert_eq!(v.per_worker[1].completions, 512);
    // Its document has the keys every pipeline result carries.
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        pipeline: crate::PipelineArgs,
    }
    let args = <Cli as clap::Parser>::parse_from(["pipeline", "--workers", "2"]).pipeline;
    let doc = crate::report::Document::Pipeline {
        params: args.params(),
        results: vec![crate::report::document::PipelineRecord::Workers(Box::new(
            v,
        ))],
    };
    crate::report::check_shape(&serde_json::to_value(&doc).unwrap()).unwrap();
    assert!(workers::table(&[r]).contains("aggregate"));
}

#[test]
fn more_workers_than_cpus_run_unpinned_and_check_out() {
    use crate::pipeline::{gen, workers};
    let n = workers::allowed_cpus().len() + 1;
    assert_eq!(workers::placement(n), None, "no pinning with {n} workers");
    assert_eq!(workers::placement(1).map(|c| c.len()), Some(1));
    let mut o = tiny(Op::Send, false, false, 0.0, 2.0);
    o.bytes = 512 << 10;
    let prepared: Vec<gen::Prepared> = (0..n)
        .map(|w| gen::prepare_worker(&o, w).unwrap())
        .collect();
    let rs = workers::run_workers_round(&o, &prepared, None).expect("rounds check out");
    for (w, (r, p)) in rs.iter().zip(&prepared).enumerate() {
        assert_eq!(r.frames, p.segments, "worker {w}");
        assert_eq!(r.completions, 128, "worker {w}");
    }
}

#[test]
fn frames_with_or_without_timestamps_place_spanning_fpdus_in_place() {
    // Unaligned 4 KiB FPDUs over MSS 1448: nearly all span segments of one burst and are
    // placed from the frames; only those that cross a burst's end are staged.
    for timestamps in [true, false] {
        let mut o = tiny(Op::Write, true, false, 0.0, 0.0);
        o.timestamps = timestamps;
        o.region_bytes = 64 << 20;
        let r = pipeline(&o).expect("round checks pass");
        assert_eq!(r.line().contains("no timestamps"), !timestamps);
        assert!(r.line().contains("region 64 MiB"), "{}", r.line());
        assert_eq!(r.last.completions, 512);
        assert!(
            r.last.spanned_in_place > 10 * r.last.staged && r.last.staged > 0,
            "{}",
            r.line()
        );
    }
}

/// `--op count --no-digest` reads no payload octet beyond the checks asked for (the stage
/// ladder's first rung, from the command line), and its round checks out on the counts.
#[test]
fn counting_without_a_digest_is_the_first_rung() {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        pipeline: crate::PipelineArgs,
    }
    let parse = |args: &[&str]| {
        <Cli as clap::Parser>::try_parse_from([&["pipeline"], args].concat()).map(|c| c.pipeline)
    };
    let count = parse(&["--op", "count"]).unwrap();
    assert!(
        count.opts(1448, 4096).digest,
        "counting keeps the digest by default"
    );
    let args = parse(&[
        "--op",
        "count",
        "--no-digest",
        "--no-crc",
        "--no-markers",
        "--no-verify-checksums",
    ])
    .unwrap();
    let mut o = args.opts(1448, 4096);
    assert!(!o.digest);
    assert!(!o.label().contains("digest"), "{}", o.label());
    assert!(
        parse(&["--digest", "--no-digest"]).is_err(),
        "the two conflict"
    );
    o.bytes = 1 << 20;
    o.rounds = 1;
    let r = pipeline(&o).expect("the round checks out");
    assert_eq!((r.last.completions, r.last.compared), (0, 0));
    assert_eq!(r.last.fpdus, 256, "1 MiB of 4 KiB Writes");
    assert!(r.last.segments_batched > 0);
}

/// FPDUs aligned with segments (`--aligned on`, no loss): every FPDU lies inside a segment
/// (none spans, none staged), and the last of each segment is verified from the segment's CRC
/// taken in the checksum's pass; with the CRC off, none is.
#[test]
fn aligned_fpdus_are_verified_from_their_segments_crcs() {
    for crc in [true, false] {
        let mut o = tiny(Op::Write, true, true, 0.0, 0.0);
        o.crc = crc;
        let r = pipeline(&o).expect("round checks pass");
        assert_eq!(r.last.completions, 512);
        assert_eq!(r.last.spanned_in_place + r.last.staged, 0, "{}", r.line());
        if crc {
            assert!(r.last.crc_at_segment_end >= r.segments, "{}", r.line());
            assert!(r.last.crc_at_segment_end <= r.last.fpdus, "{}", r.line());
        } else {
            assert_eq!(r.last.crc_at_segment_end, 0, "{}", r.line());
        }
    }
}
