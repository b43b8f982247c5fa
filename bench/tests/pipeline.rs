//! `pipeline` as a library: a tiny round through the real `Worker<MemRing>` (no root, no
//! namespace) passes its own checks, and its report is sane.

use mpa_bench::options::Op;
use mpa_bench::{pipeline, PipelineOpts};

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
    }
}

#[test]
fn jumbo_segments_in_descriptor_chains_check_out() {
    // MSS 8948 (MTU 9000) cut into 3840-octet descriptors as over AF_XDP: every segment
    // arrives once, gathered whole, with loss and reordering.
    let mut o = tiny(Op::Write, true, true, 3.0, 2.0);
    o.mss = 8948;
    let r = pipeline(&o).expect("round checks pass");
    assert_eq!(r.last.frames, r.segments, "every segment arrives once");
    assert_eq!(r.last.completions, 512);
    assert!(r.last.placed_direct > 0, "{}", r.line());
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
    use mpa_bench::pipeline::{gen, round};
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
