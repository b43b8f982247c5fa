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

mod baseline;
mod fit;
pub(crate) mod gen;
mod options;
mod profile;
mod report;
pub(crate) mod round;
pub(crate) mod stages;
pub(crate) mod workers;

pub(crate) use fit::cost_fit;
pub(crate) use report::PipelineReport;

use crate::bed::options::{Align, Op};
use crate::report::document::{PipelineConfigRecord, PipelineParams, PipelineRecord};
use crate::report::Document;
pub(crate) use crate::report::Spread;
use anyhow::{bail, Result};
use clap::Args;
use clap::ValueEnum;
use mpa_datapath::memory::streaming::StreamingStores;
use round::RoundResult;
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
    pub(crate) rounds: usize,
    /// Flows; segments are interleaved round-robin across them.
    #[arg(long, default_value_t = 1)]
    pub(crate) flows: usize,
    /// ULPDU (message) sizes, DDP header included (sizes: 4K, 63K); every size runs at every
    /// MSS.
    #[arg(
        short = 's',
        long,
        alias = "size",
        value_delimiter = ',',
        default_values_t = [4096usize],
        value_parser = mpa_cli::size::<usize>
    )]
    pub(crate) sizes: Vec<usize>,
    /// TCP payload octets per segment (MSS 1448: MTU 1500; 3454: MTU 3506; 8948: MTU 9000).
    #[arg(long, value_delimiter = ',', default_values_t = [1448usize, 8948], value_parser = mpa_cli::size::<usize>)]
    pub(crate) mss: Vec<usize>,
    /// Markers (the default).
    #[arg(long, overrides_with = "no_markers")]
    pub(crate) markers: bool,
    /// No markers.
    #[arg(long)]
    pub(crate) no_markers: bool,
    /// CRC (the default).
    #[arg(long, overrides_with = "no_crc")]
    pub(crate) crc: bool,
    /// No CRC (the receiver does not check it).
    #[arg(long)]
    pub(crate) no_crc: bool,
    /// RDMA Writes into a region, Sends into posted buffers, or `count`: no protection
    /// domain, payloads only decoded and digested.
    #[arg(long, value_enum, default_value = "write")]
    pub(crate) op: Op,
    /// FPDUs aligned with segments by exact fill; `auto`: when there is loss or reordering.
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) aligned: Align,
    /// Segments lost, percent (each is sent again 32–287 segments later).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) loss: f64,
    /// Segments moved 1–8 segments later, percent.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) reorder: f64,
    /// Keep the flows' ULPDU digest (CRC32c over every ULPDU octet, checked after each round)
    /// when placing too; `--op count` keeps it unless `--no-digest`. `mpa-datapath` keeps none
    /// by default.
    #[arg(long)]
    pub(crate) digest: bool,
    /// With `--op count`, no digest either: no payload octet is read but for the checks asked
    /// for (the first rung of `--stages`); each round then checks the counts only.
    #[arg(long, conflicts_with = "digest")]
    pub(crate) no_digest: bool,
    /// Skip software TCP checksum verification (`mpa-datapath --no-verify-checksums`: where
    /// the NIC verified it).
    #[arg(long)]
    pub(crate) no_verify_checksums: bool,
    /// Octets of packet data per UMEM frame: larger frames reach the worker as multi-buffer
    /// descriptor chains and are gathered, as over AF_XDP with 4096-octet frames (3840); 0:
    /// every frame in one descriptor (what a UMEM chunk holding a whole jumbo frame would give).
    #[arg(long, default_value_t = 3840, value_parser = mpa_cli::size::<usize>)]
    pub(crate) umem_chunk: usize,
    /// Gather chained frames into one buffer before decoding them, instead of decoding them
    /// from their descriptors (`mpa-datapath --gather-chains`).
    #[arg(long)]
    pub(crate) gather_chains: bool,
    /// Put the RX frames on transparent huge pages (as a UMEM on huge pages: a TLB entry per
    /// 2 MiB instead of per frame); the summary says how much the kernel gave.
    #[arg(long)]
    pub(crate) huge_pages: bool,
    /// Registered memory per worker, octets (a size: 16M, 1G), shared by its flows, at least
    /// one message; each flow writes at least 256 messages (or all it has) before it writes
    /// over its first again. Larger than the last-level cache, every line placed into is a
    /// miss, as in an application's large buffer; the default fits in most servers'.
    #[arg(long, default_value_t = DEFAULT_REGION_BYTES, value_parser = mpa_cli::size::<u64>)]
    pub(crate) region_bytes: u64,
    /// Frames written into the RX ring before each series of polls (at most what the ring
    /// holds, the default): the worker then reads frames written that many frames ago. A
    /// deep ring models a worker behind its NIC, frames in the last-level cache or memory; 64
    /// (one poll's burst) one keeping up, frames still in the core's caches. The warm memcpy
    /// and CRC passes are filled and timed in the same bursts.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) ring_fill: Option<u64>,
    /// Which regions take messages of 1 KiB or more with streaming stores
    /// (`mpa-datapath --streaming-stores`; off by default); the summary says when the region
    /// takes them.
    #[arg(long, value_enum, default_value_t = StreamingStores::default())]
    pub(crate) streaming_stores: StreamingStores,
    /// Frames without the TCP timestamps option.
    ///
    /// Frames without the TCP timestamps option. By default every frame carries one, as Linux
    /// peers send it (MSS 1448 at MTU 1500 is what remains with it), and the flows negotiated
    /// it: the worker checks it (PAWS) and echoes it.
    #[arg(long)]
    pub(crate) no_timestamps: bool,
    /// Octets of messages per round (a size: 256M, 1G).
    #[arg(long, default_value_t = 256 << 20, value_parser = mpa_cli::size::<u64>)]
    pub(crate) bytes: u64,
    /// Seed of the payload, loss and reordering.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Also run the per-stage variants (count vs placing, markers+CRC vs CRC vs plain, 1 vs
    /// 16 flows, loss aligned vs not, Sends) and print them side by side.
    #[arg(long)]
    pub(crate) variants: bool,
    /// Record one more round with `perf record` and print the top symbols (skipped when perf
    /// is not usable).
    #[arg(long)]
    pub(crate) perf: bool,
    /// With `--perf`: keep the recording at this path (for `perf annotate -i PATH`) instead of
    /// deleting it.
    #[arg(long, value_name = "PATH")]
    pub(crate) perf_data: Option<std::path::PathBuf>,
    /// Also run the stage ladder at the first MSS and size (see [`stages`]) and print the
    /// per-stage breakdown.
    #[arg(long)]
    pub(crate) stages: bool,
    /// Print the one JSON document on stdout (the tables go to stderr).
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Workers side by side (each its own worker, ring, flows and regions, pinned to its own
    /// CPU when there are enough), all started together; `--bytes` and `--flows` are per
    /// worker. Above 1, every round also runs 1 worker alone, and the report shows each
    /// worker, the aggregate and the scaling instead of the single-worker table.
    #[arg(long, default_value_t = 1)]
    pub(crate) workers: usize,
}

/// `PipelineArgs::region_bytes` by default: inside the last-level cache of most server CPUs.
pub(crate) const DEFAULT_REGION_BYTES: u64 = 16 << 20;

/// One configuration of the pipeline (what the library runs).
#[derive(Clone, Debug)]
pub(crate) struct PipelineOpts {
    pub(crate) rounds: usize,
    pub(crate) flows: usize,
    pub(crate) size: usize,
    pub(crate) mss: usize,
    pub(crate) markers: bool,
    pub(crate) crc: bool,
    pub(crate) op: Op,
    pub(crate) aligned: bool,
    pub(crate) loss: f64,
    pub(crate) reorder: f64,
    pub(crate) bytes: u64,
    pub(crate) seed: u64,
    /// Keep (and check) the flows' ULPDU digests.
    pub(crate) digest: bool,
    /// Verify TCP checksums in software.
    pub(crate) verify_checksums: bool,
    /// Multi-buffer descriptor size (0: whole frames), `PipelineArgs::umem_chunk`.
    pub(crate) umem_chunk: usize,
    /// Chained frames decoded from their descriptors, not gathered.
    pub(crate) chains_in_pieces: bool,
    /// RX frames on transparent huge pages.
    pub(crate) huge_pages: bool,
    /// Registered memory per worker, octets.
    pub(crate) region_bytes: u64,
    /// Frames injected before each series of polls (`None`: as many as the ring holds).
    pub(crate) ring_fill: Option<usize>,
    /// Which regions take long messages with streaming stores.
    pub(crate) streaming_stores: StreamingStores,
    /// TCP timestamps in every frame.
    pub(crate) timestamps: bool,
}

impl PipelineArgs {
    /// The configurations the options name: every size at every MSS.
    pub(crate) fn configs(&self) -> Vec<PipelineOpts> {
        self.mss
            .iter()
            .flat_map(|&mss| self.sizes.iter().map(move |&size| self.opts(mss, size)))
            .collect()
    }

    /// The configuration of one MSS and size.
    pub(crate) fn opts(&self, mss: usize, size: usize) -> PipelineOpts {
        PipelineOpts {
            rounds: self.rounds,
            flows: self.flows,
            size,
            mss,
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
            digest: self.digest || (self.op == Op::Count && !self.no_digest),
            verify_checksums: !self.no_verify_checksums,
            umem_chunk: self.umem_chunk,
            chains_in_pieces: !self.gather_chains,
            huge_pages: self.huge_pages,
            region_bytes: self.region_bytes,
            ring_fill: self
                .ring_fill
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            streaming_stores: self.streaming_stores,
            timestamps: !self.no_timestamps,
        }
    }
}

impl PipelineOpts {
    /// A short name of the configuration.
    pub(crate) fn label(&self) -> String {
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
        if !self.timestamps {
            s += ", no timestamps";
        }
        if !self.chains_in_pieces && self.umem_chunk > 0 {
            s += ", chains gathered";
        }
        if self.huge_pages {
            s += ", frames on huge pages";
        }
        if self.region_bytes != DEFAULT_REGION_BYTES {
            s += &format!(", region {} MiB", self.region_bytes >> 20);
        }
        if let Some(n) = self.ring_fill {
            s += &format!(", ring filled {n} frames at a time");
        }
        if self
            .streaming_stores
            .streaming_from()
            .is_some_and(|from| self.region_bytes >= from)
        {
            s += ", streaming stores";
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

/// Several configurations side by side: all frames prepared first, then round `i` of every
/// configuration before round `i + 1` of any, so that load from elsewhere on the machine falls
/// on all of them alike. The rounds of the first configuration decide their number.
pub(crate) fn pipeline_many(configs: &[PipelineOpts]) -> Result<Vec<PipelineReport>> {
    let prepared = configs
        .iter()
        .map(gen::prepare)
        .collect::<Result<Vec<_>>>()?;
    let n = configs.first().map_or(1, |o| o.rounds.max(1));
    let mut rounds: Vec<Vec<RoundResult>> = vec![Vec::with_capacity(n); configs.len()];
    let mut passes: Vec<Vec<baseline::OctetPasses>> = vec![Vec::with_capacity(n); configs.len()];
    let mut spans: Vec<baseline::Payloads> = prepared
        .iter()
        .zip(configs)
        .map(|(p, o)| baseline::Payloads::of(p, round::burst_frames(o, p)))
        .collect();
    for i in 0..n {
        for (((o, p), out), (pass, span)) in configs
            .iter()
            .zip(&prepared)
            .zip(rounds.iter_mut())
            .zip(passes.iter_mut().zip(spans.iter_mut()))
        {
            match round::run_round(o, p) {
                Ok(r) => out.push(r),
                Err(e) => bail!("{}: round {} of {n} FAILED: {e:#}", o.label(), i + 1),
            }
            pass.push(span.time(p));
        }
    }
    Ok(configs
        .iter()
        .zip(prepared)
        .zip(rounds.into_iter().zip(passes))
        .map(|((o, p), (rounds, passes))| report(o, &p, rounds, &passes))
        .collect())
}

fn report(
    o: &PipelineOpts,
    p: &gen::Prepared,
    mut rounds: Vec<RoundResult>,
    passes: &[baseline::OctetPasses],
) -> PipelineReport {
    let payload = rounds.first().map_or(0, |r| r.payload_octets) as f64;
    let octet_pass = |f: &dyn Fn(&baseline::OctetPasses) -> std::time::Duration| {
        Spread::of(
            passes
                .iter()
                .map(|x| payload * 8.0 / f(x).as_secs_f64().max(1e-9) / 1e9)
                .collect(),
        )
        .expect("one pass per round")
    };
    let per = |f: &dyn Fn(&RoundResult) -> f64| {
        Spread::of(rounds.iter().map(f).collect()).expect("at least one round")
    };
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
        memcpy_gbits: octet_pass(&|x| x.memcpy),
        crc_gbits: octet_pass(&|x| x.crc),
        memcpy_warm_gbits: octet_pass(&|x| x.memcpy_warm),
        crc_warm_gbits: octet_pass(&|x| x.crc_warm),
        last: rounds.pop().expect("at least one round"),
    }
}

/// The per-stage variants of `base`, in the order of the table.
pub(crate) fn variants(base: &PipelineOpts) -> Vec<PipelineOpts> {
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
pub(crate) fn table(reports: &[PipelineReport]) -> String {
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

impl PipelineArgs {
    /// The document's parameters.
    pub(crate) fn params(&self) -> PipelineParams {
        let o = self.opts(0, 0);
        PipelineParams {
            mss: self.mss.clone(),
            sizes: self.sizes.clone(),
            rounds: o.rounds,
            flows: o.flows,
            markers: o.markers,
            crc: o.crc,
            op: o.op,
            aligned: o.aligned,
            loss: o.loss,
            reorder: o.reorder,
            bytes: o.bytes,
            huge_pages: o.huge_pages,
            chains_in_pieces: o.chains_in_pieces,
            streaming_stores: o
                .streaming_stores
                .to_possible_value()
                .map(|v| v.get_name().to_string()),
            verify_checksums: o.verify_checksums,
            digest: o.digest,
            seed: o.seed,
            // Only with several: one worker's document keeps its shape.
            workers: (self.workers > 1).then_some(self.workers),
            ring_fill: o.ring_fill,
        }
    }
}

/// The pipeline's results: every configuration, then (with `stages`) the ladder.
pub(crate) struct PipelineRun {
    pub(crate) reports: Vec<PipelineReport>,
    pub(crate) stages: Option<stages::StageTable>,
    pub(crate) variants: Vec<PipelineReport>,
    /// `--workers` above 1: one report per configuration (then `reports` is empty).
    pub(crate) workers: Vec<workers::WorkersReport>,
}

/// Runs what `a` asks for and builds the document.
pub(crate) fn pipeline_run(a: &PipelineArgs) -> Result<(Document, PipelineRun)> {
    options::check(a)?;
    let configs = a.configs();
    if configs.is_empty() {
        mpa_cli::usage!("--mss and --sizes must each name at least one value");
    }
    let (reports, multi) = match a.workers {
        1 => (pipeline_many(&configs)?, Vec::new()),
        n => (Vec::new(), workers::run_many(&configs, n)?),
    };
    let stages = if a.stages {
        Some(stages::run(&configs[0])?)
    } else {
        None
    };
    let variants = if a.variants {
        pipeline_many(&variants(&configs[0]))?
    } else {
        Vec::new()
    };
    let config = |r: PipelineConfigRecord| PipelineRecord::Config(Box::new(r));
    let mut results: Vec<PipelineRecord> = reports
        .iter()
        .map(|r| {
            let fit = cost_fit(&reports, r.opts.size);
            config(PipelineConfigRecord {
                fit_ns_per_packet: fit.map(|f| f.ns_per_packet),
                fit_ns_per_kib: fit.map(|f| f.ns_per_kib),
                ..r.record()
            })
        })
        .collect();
    results.extend(
        multi
            .iter()
            .map(|w| PipelineRecord::Workers(Box::new(w.record()))),
    );
    if let Some(st) = &stages {
        results.extend(st.records().into_iter().map(config));
    }
    results.extend(variants.iter().map(|r| {
        config(PipelineConfigRecord {
            variant: true,
            ..r.record()
        })
    }));
    let doc = Document::Pipeline {
        params: a.params(),
        results,
    };
    Ok((
        doc,
        PipelineRun {
            reports,
            stages,
            variants,
            workers: multi,
        },
    ))
}

/// The per-configuration summary table (markdown): Gbit/s per core against memcpy and CRC,
/// over frames just written (warm: what the pipeline reads) and from memory (cold).
pub(crate) fn summary_table(reports: &[PipelineReport]) -> String {
    let mut s = String::from(
        "| MSS | ULPDU | Gbit/s payload/core median (min–max) | ns/packet | Mpps \
         | memcpy warm / cold Gbit/s | CRC32c warm / cold Gbit/s | pipeline / warm memcpy \
         | pipeline / warm CRC |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        s += &format!(
            "| {} | {} | {:.2} ({:.2}–{:.2}) | {:.0} | {:.2} | {:.1} / {:.1} | {:.1} / {:.1} | {:.2} | {:.2} |\n",
            r.opts.mss,
            r.opts.size,
            r.gbits.median,
            r.gbits.min,
            r.gbits.max,
            r.ns_per_segment.median,
            r.segments_per_s.median / 1e6,
            r.memcpy_warm_gbits.median,
            r.memcpy_gbits.median,
            r.crc_warm_gbits.median,
            r.crc_gbits.median,
            r.gbits.median / r.memcpy_warm_gbits.median,
            r.gbits.median / r.crc_warm_gbits.median,
        );
    }
    let mut sizes: Vec<usize> = reports.iter().map(|r| r.opts.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for size in sizes {
        if let Some(f) = cost_fit(reports, size) {
            s += &format!(
                "\nCost fit over the {} MSS values at {size}-octet ULPDUs: {:.0} ns per packet + \
                 {:.0} ns per KiB of payload.\n",
                f.points, f.ns_per_packet, f.ns_per_kib
            );
        }
    }
    s
}

/// `mpa-bench pipeline`: the configurations, the ladder and variants when asked, then (with
/// `--perf`) a profile. `Err` when any round failed its checks.
pub fn run_cli(a: &PipelineArgs) -> Result<()> {
    let (doc, run) = pipeline_run(a)?;
    let mut text = String::new();
    for r in &run.reports {
        text += &format!("pipeline: OK {}\n", r.line());
    }
    for r in &run.workers {
        text += &format!("pipeline: OK {}\n", r.line());
    }
    if let Some(first) = run.reports.first() {
        text += &format!(
            "\n{} rounds of {} MiB per configuration, interleaved; {}:\n\n",
            a.rounds,
            a.bytes >> 20,
            first.opts.label()
        );
        text += &summary_table(&run.reports);
    }
    if let Some(first) = run.workers.first() {
        text += &format!(
            "\n{} rounds of {} MiB per worker; each round 1 worker alone, then {} together; {}:\n",
            a.rounds,
            a.bytes >> 20,
            first.workers,
            first.opts.label()
        );
        text += &workers::table(&run.workers);
    }
    if let Some(st) = &run.stages {
        text += &format!("\n{}", st.table());
    }
    if !run.variants.is_empty() {
        text += "\nvariants (poll time only, Gbit/s from wall poll time):\n\n";
        text += &table(&run.variants);
    }
    crate::report::text(a.json, &text);
    if a.json {
        crate::report::print(&doc)?;
    }
    if a.perf {
        profile::profile(&a.configs()[0], a.perf_data.as_deref(), a.json)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
