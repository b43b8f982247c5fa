//! `pipeline`: the datapath's receive pipeline measured apart from any kernel sender. The real
//! `Worker<MemRing>` (frame parsing, flow lookup, TCP, MPA decoder/CRC/markers, placement into
//! a registered `RegionMemory`, ACKs, completions) runs on this thread, fed frames prepared in
//! memory beforehand by a pre-recorded sender (it does not react to ACKs).
//!
//! Timed: only `Worker::poll_once`, from the first poll of a burst until the burst (at most a
//! ring, 4,096 frames) is drained. Not timed: copying the frames into the ring (as a NIC would
//! fill UMEM), posting receive buffers, taking the ACK frames and completions off the ring.
//! The thread's CPU time and wall time cover the whole loop. Every round is checked: region
//! octets, completions (count, order, place), the flows' counters and digests.

pub mod gen;
mod profile;
pub mod round;

use crate::options::{Align, Op};
use anyhow::{bail, Result};
use clap::Args;
use round::RoundResult;
use serde_json::{json, Value};
use std::net::SocketAddrV4;

pub(crate) const OUR_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
pub(crate) const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
/// The peer's stream starts just before the sequence space wraps.
pub(crate) const RCV_NXT: u32 = u32::MAX - 100_000;
pub(crate) const SND_NXT: u32 = 1000;

pub(crate) fn local() -> SocketAddrV4 {
    SocketAddrV4::new([10, 99, 0, 2].into(), 40000)
}

/// `mpa-bench pipeline`'s options.
#[derive(Args, Clone, Debug)]
pub struct PipelineArgs {
    /// Timed rounds (each on a fresh worker; the same frames).
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Flows; segments are interleaved round-robin across them.
    #[arg(long, default_value_t = 1)]
    pub flows: usize,
    /// ULPDU (message) size, DDP header included.
    #[arg(long, default_value_t = 4096)]
    pub size: usize,
    /// TCP payload octets per segment.
    #[arg(long, default_value_t = 1448)]
    pub mss: usize,
    /// Markers (the default).
    #[arg(long, overrides_with = "no_markers")]
    pub markers: bool,
    /// No markers.
    #[arg(long)]
    pub no_markers: bool,
    /// CRC (the default).
    #[arg(long, overrides_with = "no_crc")]
    pub crc: bool,
    /// No CRC (the receiver does not check it).
    #[arg(long)]
    pub no_crc: bool,
    /// RDMA Writes into a region, Sends into posted buffers, or `count`: no protection
    /// domain, payloads only decoded and digested.
    #[arg(long, value_enum, default_value = "write")]
    pub op: Op,
    /// FPDUs aligned with segments by exact fill; `auto`: when there is loss or reordering.
    #[arg(long, value_enum, default_value = "auto")]
    pub aligned: Align,
    /// Segments lost, percent (each is sent again 32–287 segments later).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Segments moved 1–8 segments later, percent.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// Keep the flows' ULPDU digest (CRC32c over every ULPDU octet, checked after each round)
    /// when placing too; `--op count` always keeps it. `mpa-datapath` keeps none by default.
    #[arg(long)]
    pub digest: bool,
    /// Skip software TCP checksum verification (`mpa-datapath --no-verify-checksums`: where
    /// the NIC verified it).
    #[arg(long)]
    pub no_verify_checksums: bool,
    /// Octets of messages per round.
    #[arg(long, default_value_t = 256 << 20)]
    pub bytes: u64,
    /// Seed of the payload, loss and reordering.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also run the per-stage variants (count vs placing, markers+CRC vs CRC vs plain, 1 vs
    /// 16 flows, loss aligned vs not, Sends) and print them side by side.
    #[arg(long)]
    pub variants: bool,
    /// Record one more round with `perf record` and print the top symbols (skipped when perf
    /// is not usable).
    #[arg(long)]
    pub perf: bool,
    /// Print one JSON line per configuration (`result: {...}`).
    #[arg(long)]
    pub json: bool,
}

/// One configuration of the pipeline (what the library runs).
#[derive(Clone, Debug)]
pub struct PipelineOpts {
    pub rounds: usize,
    pub flows: usize,
    pub size: usize,
    pub mss: usize,
    pub markers: bool,
    pub crc: bool,
    pub op: Op,
    pub aligned: bool,
    pub loss: f64,
    pub reorder: f64,
    pub bytes: u64,
    pub seed: u64,
    /// Keep (and check) the flows' ULPDU digests.
    pub digest: bool,
    /// Verify TCP checksums in software.
    pub verify_checksums: bool,
}

impl PipelineArgs {
    /// The configuration the options name.
    pub fn opts(&self) -> PipelineOpts {
        PipelineOpts {
            rounds: self.rounds.max(1),
            flows: self.flows.max(1),
            size: self.size,
            mss: self.mss,
            markers: !self.no_markers,
            crc: !self.no_crc,
            op: self.op,
            aligned: match self.aligned {
                Align::Auto => self.loss > 0.0 || self.reorder > 0.0,
                Align::On => true,
                Align::Off => false,
            },
            loss: self.loss,
            reorder: self.reorder,
            bytes: self.bytes,
            seed: self.seed,
            digest: self.digest || self.op == Op::Count,
            verify_checksums: !self.no_verify_checksums,
        }
    }
}

impl PipelineOpts {
    /// A short name of the configuration.
    pub fn label(&self) -> String {
        let framing = match (self.markers, self.crc) {
            (true, true) => "markers+CRC",
            (false, true) => "CRC only",
            (true, false) => "markers only",
            (false, false) => "plain",
        };
        let op = match self.op {
            Op::Write => "write",
            Op::Send => "send",
            Op::Count => "count",
        };
        let mut s = format!("{op}, {framing}, {} flow(s)", self.flows);
        if self.digest {
            s += ", digest";
        }
        if !self.verify_checksums {
            s += ", no TCP checksum check";
        }
        if self.loss > 0.0 || self.reorder > 0.0 {
            s += &format!(", loss {} % reorder {} %", self.loss, self.reorder);
        }
        s += if self.aligned {
            ", aligned"
        } else {
            ", unaligned"
        };
        s
    }
}

/// Median, min and max.
#[derive(Debug, Clone, Copy)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    fn of(mut v: Vec<f64>) -> Spread {
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Spread {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }

    fn json(&self) -> Value {
        json!({"median": self.median, "min": self.min, "max": self.max})
    }
}

/// What a configuration measured over its rounds (every round checked).
#[derive(Debug, Clone)]
pub struct PipelineReport {
    pub opts: PipelineOpts,
    /// Segments (frames) per round and the prepared stream's loss/reordering.
    pub segments: u64,
    pub dropped: u64,
    pub reordered: u64,
    /// Poll time per segment, ns.
    pub ns_per_segment: Spread,
    /// The thread's CPU time in polls per segment, ns (not inflated by preemption).
    pub cpu_ns_per_segment: Spread,
    /// ULPDU payload Gbit/s on one core (payload octets over poll time).
    pub gbits: Spread,
    /// Segments per second (poll time).
    pub segments_per_s: Spread,
    /// Thread CPU time over wall time of the whole loop (1.0: never preempted).
    pub cpu_over_wall: Spread,
    /// Poll time over the whole loop's wall time.
    pub poll_share: Spread,
    /// The last round.
    pub last: RoundResult,
}

impl PipelineReport {
    /// One line of text.
    pub fn line(&self) -> String {
        let r = &self.last;
        format!(
            "{}: {:.0} ns/segment ({:.0}–{:.0}; CPU {:.0}), {:.2} Gbit/s payload/core ({:.2}–{:.2}), \
             {:.2} M segments/s, CPU/wall {:.2}, poll/loop {:.2}; {} segments ({} lost+resent, \
             {} reordered), {} ACKs, FPDUs {} (direct {}, in order {}, from store {}), \
             {} completions, {} region octets checked",
            self.opts.label(),
            self.ns_per_segment.median,
            self.ns_per_segment.min,
            self.ns_per_segment.max,
            self.cpu_ns_per_segment.median,
            self.gbits.median,
            self.gbits.min,
            self.gbits.max,
            self.segments_per_s.median / 1e6,
            self.cpu_over_wall.median,
            self.poll_share.median,
            self.segments,
            self.dropped,
            self.reordered,
            r.acks,
            r.fpdus,
            r.placed_direct,
            r.placed_in_order,
            r.placed_from_store,
            r.completions,
            r.compared,
        )
    }

    /// Every value, for `--json`.
    pub fn json(&self) -> Value {
        let o = &self.opts;
        let r = &self.last;
        json!({
            "label": o.label(), "flows": o.flows, "size": o.size, "mss": o.mss,
            "markers": o.markers, "crc": o.crc, "op": format!("{:?}", o.op).to_lowercase(),
            "aligned": o.aligned, "loss": o.loss, "reorder": o.reorder, "bytes": o.bytes,
            "rounds": o.rounds, "digest": o.digest, "verify_checksums": o.verify_checksums, "segments": self.segments, "dropped": self.dropped,
            "reordered": self.reordered,
            "ns_per_segment": self.ns_per_segment.json(),
            "cpu_ns_per_segment": self.cpu_ns_per_segment.json(), "gbits": self.gbits.json(),
            "segments_per_s": self.segments_per_s.json(),
            "cpu_over_wall": self.cpu_over_wall.json(), "poll_share": self.poll_share.json(),
            "acks": r.acks, "fpdus": r.fpdus, "placed_direct": r.placed_direct,
            "placed_in_order": r.placed_in_order, "placed_from_store": r.placed_from_store,
            "out_of_order_segments": r.out_of_order_segments,
            "store_high_water": r.store_high_water, "completions": r.completions,
            "region_octets_checked": r.compared, "payload_octets": r.payload_octets,
        })
    }
}

/// Prepares the frames once, then runs `o.rounds` checked rounds. `Err` names the first
/// round whose check failed.
pub fn pipeline(o: &PipelineOpts) -> Result<PipelineReport> {
    Ok(pipeline_many(std::slice::from_ref(o))?.remove(0))
}

/// Several configurations side by side: all frames prepared first, then round `i` of every
/// configuration before round `i + 1` of any, so that load from elsewhere on the machine falls
/// on all of them alike. The rounds of the first configuration decide their number.
pub fn pipeline_many(configs: &[PipelineOpts]) -> Result<Vec<PipelineReport>> {
    let prepared = configs
        .iter()
        .map(gen::prepare)
        .collect::<Result<Vec<_>>>()?;
    let n = configs.first().map_or(1, |o| o.rounds.max(1));
    let mut rounds: Vec<Vec<RoundResult>> = vec![Vec::with_capacity(n); configs.len()];
    for i in 0..n {
        for ((o, p), out) in configs.iter().zip(&prepared).zip(rounds.iter_mut()) {
            match round::run_round(o, p) {
                Ok(r) => out.push(r),
                Err(e) => bail!("{}: round {} of {n} FAILED: {e:#}", o.label(), i + 1),
            }
        }
    }
    Ok(configs
        .iter()
        .zip(prepared)
        .zip(rounds)
        .map(|((o, p), rounds)| report(o, &p, rounds))
        .collect())
}

fn report(o: &PipelineOpts, p: &gen::Prepared, mut rounds: Vec<RoundResult>) -> PipelineReport {
    let per = |f: &dyn Fn(&RoundResult) -> f64| Spread::of(rounds.iter().map(f).collect());
    let secs = |r: &RoundResult| r.poll.as_secs_f64().max(1e-9);
    PipelineReport {
        opts: o.clone(),
        segments: p.segments,
        dropped: p.dropped,
        reordered: p.reordered,
        ns_per_segment: per(&|r| secs(r) * 1e9 / r.frames.max(1) as f64),
        cpu_ns_per_segment: per(&|r| r.poll_cpu.as_secs_f64() * 1e9 / r.frames.max(1) as f64),
        gbits: per(&|r| r.payload_octets as f64 * 8.0 / secs(r) / 1e9),
        segments_per_s: per(&|r| r.frames as f64 / secs(r)),
        cpu_over_wall: per(&|r| r.cpu / r.wall.as_secs_f64().max(1e-9)),
        poll_share: per(&|r| secs(r) / r.wall.as_secs_f64().max(1e-9)),
        last: rounds.pop().expect("at least one round"),
    }
}

/// The per-stage variants of `base`, in the order of the table.
pub fn variants(base: &PipelineOpts) -> Vec<PipelineOpts> {
    let v = |f: &dyn Fn(&mut PipelineOpts)| {
        let mut o = base.clone();
        o.loss = 0.0;
        o.reorder = 0.0;
        o.aligned = false;
        o.flows = 1;
        o.op = Op::Write;
        o.markers = true;
        o.crc = true;
        o.digest = false;
        f(&mut o);
        o
    };
    let count = |o: &mut PipelineOpts| {
        o.op = Op::Count;
        o.digest = true;
    };
    vec![
        v(&count),
        v(&|o| {
            count(o);
            o.digest = false
        }),
        v(&|_| {}),
        v(&|o| o.verify_checksums = false),
        v(&|o| o.markers = false),
        v(&|o| {
            o.markers = false;
            o.crc = false
        }),
        v(&|o| {
            count(o);
            o.digest = false;
            o.markers = false;
            o.crc = false;
            o.verify_checksums = false;
        }),
        v(&|o| o.aligned = true),
        v(&|o| o.flows = 16),
        v(&|o| o.op = Op::Send),
        v(&|o| {
            o.loss = 1.0;
            o.aligned = true
        }),
        v(&|o| o.loss = 1.0),
    ]
}

/// The table of `reports`, side by side (markdown).
pub fn table(reports: &[PipelineReport]) -> String {
    let mut s = String::from(
        "| configuration | ns/segment median (min–max) | CPU ns/segment median (min–max) \
         | Gbit/s payload/core median (min–max) | M segments/s | CPU/wall | ACKs/segment \
         | placed direct / from store |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        s += &format!(
            "| {} | {:.0} ({:.0}–{:.0}) | {:.0} ({:.0}–{:.0}) | {:.2} ({:.2}–{:.2}) | {:.2} | {:.2} \
             | {:.3} | {} / {} |\n",
            r.opts.label(),
            r.ns_per_segment.median,
            r.ns_per_segment.min,
            r.ns_per_segment.max,
            r.cpu_ns_per_segment.median,
            r.cpu_ns_per_segment.min,
            r.cpu_ns_per_segment.max,
            r.gbits.median,
            r.gbits.min,
            r.gbits.max,
            r.segments_per_s.median / 1e6,
            r.cpu_over_wall.median,
            r.last.acks as f64 / r.last.frames.max(1) as f64,
            r.last.placed_direct,
            r.last.placed_from_store,
        );
    }
    s
}

/// `mpa-bench pipeline`: the configuration, then (with `--variants`) the table, then (with
/// `--perf`) a profile. `Err` when any round failed its checks.
pub fn run_cli(a: &PipelineArgs) -> Result<()> {
    let base = a.opts();
    let emit = |r: &PipelineReport| {
        if a.json {
            println!("result: {}", r.json());
        } else {
            println!("pipeline: OK {}", r.line());
        }
    };
    let main = pipeline(&base)?;
    emit(&main);
    if a.variants {
        let all = pipeline_many(&variants(&base))?;
        all.iter().for_each(emit);
        println!(
            "\nper stage ({} rounds of {} MiB each, interleaved across the configurations; \
             poll time only, Gbit/s from wall poll time):\n",
            base.rounds,
            base.bytes >> 20
        );
        print!("{}", table(&all));
    }
    if a.perf {
        profile::profile(&base)?;
    }
    Ok(())
}
