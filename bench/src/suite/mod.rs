//! `mpa-bench suite` (what `make bench` runs): a bounded standard set of the experiments
//! (3 to 8 minutes on the 2-core development VM), each side by side with kernel TCP where it
//! has a counterpart, written to one directory:
//!
//! * `summary.md`: the tables, the parameters, the machine and the commit;
//! * `results.json`: `{"machine", "commit", "seconds", "documents": [<one document per
//!   experiment>]}`;
//! * `lat-cdf-<size>.png`, `bw-by-size.png`, `pipeline-stages.png`: the plots;
//! * `lat-{kernel,datapath}-<size>.hgrm`: the latency distributions.

pub(crate) mod pages;
pub(crate) mod plot;

use crate::bed::options::{Align, BedArgs, FramingArgs, Op, TransferArgs};
use crate::bw::{self, BwArgs, BwRow};
use crate::lat::{self, ClockArgs, DatapathMode, LatArgs, PostVia, Row, Side};
use crate::pipeline::{self, PipelineArgs};
use crate::report::document::BwRecord;
use crate::report::{check_shape, Document, Receiver};
use crate::setup::{self, SetupArgs};
use anyhow::{Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `mpa-bench suite`'s options.
#[derive(Args, Clone, Debug)]
pub struct SuiteArgs {
    /// Where the summary, JSON, plots and `.hgrm` files go.
    #[arg(long, default_value_os_t = crate::report::default_out("suite"))]
    pub out: PathBuf,
    /// A much smaller set (a minute or two): to check the harness, not to quote.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Also write the performance page (every table of this run, its plots linked from
    /// `--out`), e.g. docs/performance.md.
    #[arg(long, value_name = "FILE")]
    pub(crate) performance_page: Option<PathBuf>,
    /// Also replace the headline figures in this README (the lines between its
    /// `<!-- headline:begin -->` and `<!-- headline:end -->` markers).
    #[arg(long, value_name = "FILE")]
    pub(crate) readme: Option<PathBuf>,
    /// Print one JSON document on stdout (`{"scenario": "suite", "out", "ok"}`); the summary
    /// goes to stderr.
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// The standard set's experiments.
pub(crate) struct Plan {
    pub(crate) pipeline: PipelineArgs,
    /// Two workers side by side against one, MSS 1448, 4 KiB.
    pub(crate) pipeline_workers: PipelineArgs,
    /// FPDUs aligned with their segments, as MPA-aware senders send them: MSS 1448, 1 and
    /// 4 KiB.
    pub(crate) pipeline_aligned: PipelineArgs,
    /// The pipeline and its stage ladder with the frames in the worker's own caches (the ring
    /// filled one burst ahead): what the per-segment work costs without the frames' first
    /// touch. MSS 1448, 4 KiB.
    pub(crate) pipeline_hot: PipelineArgs,
    pub(crate) lat: LatArgs,
    /// Ping-pong (half the round trip), 64 B and 4 KiB: needs no clock agreement.
    pub(crate) lat_pingpong: LatArgs,
    pub(crate) bw: BwArgs,
    /// One `bw` per loss rate (the lossy bridge), 4 KiB ULPDUs, aligned sender.
    pub(crate) bw_loss: Vec<BwArgs>,
    /// Unpaced latency (queues build up): what batching does under load.
    pub(crate) lat_unpaced: LatArgs,
    pub(crate) setup: SetupArgs,
}

impl SuiteArgs {
    pub(crate) fn plan(&self) -> Plan {
        let q = self.quick;
        let pipeline = PipelineArgs {
            rounds: if q { 2 } else { 5 },
            flows: 1,
            sizes: vec![4096, 65536 - 1024],
            mss: vec![1448, 8948],
            markers: true,
            no_markers: false,
            crc: true,
            no_crc: false,
            op: Op::Write,
            aligned: Align::Auto,
            loss: 0.0,
            reorder: 0.0,
            digest: false,
            no_digest: false,
            no_verify_checksums: false,
            umem_chunk: 3840,
            gather_chains: false,
            huge_pages: false,
            region_bytes: 16 << 20,
            ring_fill: None,
            streaming_stores: Default::default(),
            no_timestamps: false,
            bytes: if q { 16 << 20 } else { 256 << 20 },
            seed: 1,
            variants: false,
            perf: false,
            perf_data: None,
            stages: true,
            json: false,
            workers: 1,
        };
        let lat = LatArgs {
            sizes: if q {
                vec![64, 4096]
            } else {
                vec![64, 1024, 4096, 16384, 65536 - 1024]
            },
            messages: if q { 1000 } else { 10_000 },
            rate: 10_000,
            rounds: if q { 1 } else { 3 },
            bed: BedArgs::default(),
            framing: FramingArgs::default(),
            out: self.out.clone(),
            json: false,
            consumer_busy_poll: false,
            spin_us: 1000,
            spin_yield_polls: mpa_datapath::worker::DEFAULT_YIELD_EVERY,
            modes: vec![DatapathMode::Sleep, DatapathMode::Spin, DatapathMode::Rtc],
            post_via: PostVia::Shm,
            wire_segments: false,
            busy_poll_us: 0,
            pingpong: false,
            flood_neighbour: None,
            clock: ClockArgs::default(),
        };
        let lat_unpaced = LatArgs {
            sizes: vec![64, 4096],
            messages: if q { 1000 } else { 20_000 },
            rate: 0,
            rounds: 1,
            ..lat.clone()
        };
        Plan {
            pipeline_aligned: PipelineArgs {
                rounds: if q { 1 } else { 3 },
                sizes: vec![1024, 4096],
                mss: vec![1448],
                aligned: Align::On,
                stages: false,
                ..pipeline.clone()
            },
            pipeline_hot: PipelineArgs {
                rounds: if q { 1 } else { 3 },
                sizes: vec![4096],
                mss: vec![1448],
                ring_fill: Some(64),
                ..pipeline.clone()
            },
            pipeline_workers: PipelineArgs {
                rounds: if q { 1 } else { 3 },
                sizes: vec![4096],
                mss: vec![1448],
                stages: false,
                workers: 2,
                ..pipeline.clone()
            },
            pipeline,
            lat_pingpong: LatArgs {
                sizes: vec![64, 4096],
                pingpong: true,
                modes: vec![
                    DatapathMode::Sleep,
                    DatapathMode::Spin,
                    DatapathMode::Rtc,
                    DatapathMode::RustApp,
                    DatapathMode::CApi,
                ],
                ..lat.clone()
            },
            lat,
            bw: BwArgs {
                sizes: if q {
                    vec![4096]
                } else {
                    vec![1024, 4096, 16384, 65536 - 1024]
                },
                transfer: TransferArgs {
                    duration: None,
                    interval: None,
                    bytes: if q { 32 << 20 } else { 256 << 20 },
                    ..self.bw_base(q).transfer
                },
                ..self.bw_base(q)
            },
            bw_loss: (if q { vec![5] } else { vec![1, 5, 10, 20] })
                .into_iter()
                .map(|loss| BwArgs {
                    sizes: vec![4096],
                    transfer: TransferArgs {
                        duration: None,
                        interval: None,
                        bytes: if q { 8 << 20 } else { 64 << 20 },
                        ..self.bw_base(q).transfer
                    },
                    bed: BedArgs {
                        loss,
                        ..BedArgs::default()
                    },
                    ..self.bw_base(q)
                })
                .collect(),
            lat_unpaced,
            setup: SetupArgs {
                connections: if q { 100 } else { 1000 },
                parallel: 16,
                json: false,
            },
        }
    }

    fn bw_base(&self, q: bool) -> BwArgs {
        BwArgs {
            sizes: vec![4096],
            transfer: TransferArgs {
                duration: None,
                interval: None,
                bytes: 32 << 20,
                op: Op::Write,
                region_bytes: 16 << 20,
                align: Align::Auto,
                connections: 1,
                rcv_buf: None,
                ooo_ack_every: None,
                spin_us: 0,
                sender_cc: None,
            },
            rounds: if q { 1 } else { 3 },
            bed: BedArgs::default(),
            framing: FramingArgs::default(),
            json: false,
            sender: crate::bw::SenderSide::Kernel,
            wire_segments: false,
        }
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("{cpu}, {cores} cores, Linux {kernel}")
}

fn commit() -> String {
    std::process::Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// Runs the set, writes the directory; returns the summary text.
pub fn suite(a: &SuiteArgs) -> Result<String> {
    let plan = a.plan();
    std::fs::create_dir_all(&a.out).with_context(|| format!("create {}", a.out.display()))?;
    let t0 = Instant::now();
    let mut docs: Vec<Document> = Vec::new();
    // Named before the run writes its files into the tree (which would mark it dirty).
    let build = commit();
    let mut md = format!(
        "# mpa-bench standard set\n\nMachine: {}; commit {}; made by `make bench` \
         (`mpa-bench suite{}`). Every figure below is from this one run.\n\n",
        machine(),
        build,
        if a.quick { " --quick" } else { "" }
    );

    eprintln!("suite: pipeline");
    let (doc, run) = pipeline::pipeline_run(&plan.pipeline)?;
    let _ = write!(
        md,
        "## Receive pipeline alone (`mpa-bench pipeline --mss 1448,8948 --sizes 4096,64512 --stages`)\n\n\
         One core, in-memory frame ring, no kernel: RDMA Writes with markers + CRC placed into a \
         region, every round checked. {} rounds of {} MiB per configuration.\n\n{}\n",
        plan.pipeline.rounds,
        plan.pipeline.bytes >> 20,
        pipeline::summary_table(&run.reports)
    );
    if let Some(st) = &run.stages {
        let _ = write!(
            md,
            "{}\n![pipeline stages](pipeline-stages.png)\n\n",
            st.table()
        );
        plot::stages(
            &a.out.join("pipeline-stages.png"),
            &format!(
                "pipeline ns/packet by stage (MSS {}, {} B ULPDUs)",
                plan.pipeline.mss[0], plan.pipeline.sizes[0]
            ),
            &st.stage_ns(),
        )?;
    }
    docs.push(doc);

    eprintln!("suite: pipeline, two workers");
    let (doc, run) = pipeline::pipeline_run(&plan.pipeline_workers)?;
    let _ = write!(
        md,
        "### Two workers (`mpa-bench pipeline --workers 2 --mss 1448 --sizes 4096 --rounds {}`)\n\n\
         Each worker its own ring, flows, region and completion ring, pinned to its own CPU, \
         started together; every round also runs one worker alone.\n{}\n",
        plan.pipeline_workers.rounds,
        pipeline::workers::table(&run.workers)
    );
    docs.push(doc);

    eprintln!("suite: pipeline, aligned FPDUs");
    let (doc, run) = pipeline::pipeline_run(&plan.pipeline_aligned)?;
    let _ = write!(
        md,
        "### FPDUs aligned with their segments (`mpa-bench pipeline --aligned on --mss 1448 --sizes 1024,4096 --rounds {}`)\n\n\
         What MPA-aware senders (iWARP NICs, soft-iWARP) send: each segment holds whole FPDUs, \
         a 4 KiB Write three of them, each placed on its own.\n\n{}\n",
        plan.pipeline_aligned.rounds,
        pipeline::summary_table(&run.reports)
    );
    docs.push(doc);

    eprintln!("suite: pipeline, frames in the worker's caches");
    let (doc, run) = pipeline::pipeline_run(&plan.pipeline_hot)?;
    let _ = write!(
        md,
        "### Frames in the worker's caches (`mpa-bench pipeline --ring-fill 64 --mss 1448 --sizes 4096 --stages --rounds {}`)\n\n\
         The ring filled one burst ahead of the worker instead of as deep as it is (16 MiB of \
         frames): the frames are still in the core's caches, as for a worker that keeps up with \
         its NIC. The stage ladder then shows the per-segment work without the frames' first \
         touch, which the first rung above absorbs.\n\n{}\n{}\n",
        plan.pipeline_hot.rounds,
        pipeline::summary_table(&run.reports),
        run.stages.as_ref().map(|st| st.table()).unwrap_or_default()
    );
    docs.push(doc);

    eprintln!("suite: lat");
    let (doc, rows) = lat::lat(&plan.lat)?;
    let _ = write!(
        md,
        "## One-way latency (`mpa-bench lat --sizes {} --messages {} --rate {} --rounds {}`)\n\n\
         Sender write to the receiver's consumer seeing the whole message, µs.\n\n```\n{}```\n\n",
        join(&plan.lat.sizes),
        plan.lat.messages,
        plan.lat.rate,
        plan.lat.rounds,
        lat::table(&rows)
    );
    for &size in &plan.lat.sizes {
        let name = format!("lat-cdf-{size}.png");
        let series: Vec<plot::CdfSeries> = rows
            .iter()
            .filter(|r| r.bytes == size)
            .map(|r: &Row| plot::CdfSeries {
                receiver: r.side.key(),
                points: plot::cdf_points(&r.samples.hist),
            })
            .collect();
        plot::latency_cdf(
            &a.out.join(&name),
            &format!(
                "one-way latency, {size} B messages, {} msg/s",
                plan.lat.rate
            ),
            &series,
        )?;
        let _ = writeln!(md, "![latency CDF {size} B]({name})");
    }
    md.push('\n');
    docs.push(doc);

    eprintln!("suite: lat, ping-pong");
    let (doc, rows) = lat::pingpong(&plan.lat_pingpong)?;
    let _ = write!(
        md,
        "## Ping-pong latency (`mpa-bench lat --pingpong --sizes {} --messages {} --rounds {}`)\n\n\
         RDMA Write ping-pong (as perftest's `ib_write_lat`) against the kernel's echo: half \
         the round trip, µs; round trips need no common clock.\n\n```\n{}```\n\n",
        join(&plan.lat_pingpong.sizes),
        plan.lat_pingpong.messages,
        plan.lat_pingpong.rounds,
        lat::pingpong_table(&rows)
    );
    docs.push(doc);

    eprintln!("suite: bw");
    let (doc, rows) = bw::bw(&plan.bw)?;
    let _ = write!(
        md,
        "## Goodput and CPU (`mpa-bench bw --sizes {} --bytes {} --rounds {}`)\n\n\
         Same sender (kernel TCP, markers + CRC), MTU 1500, no loss; the datapath places RDMA \
         Writes into a region (checked octet for octet), the kernel Responder reads and digests.\n\n\
         ```\n{}```\n\n![goodput by size](bw-by-size.png)\n\n",
        join(&plan.bw.sizes),
        plan.bw.transfer.bytes,
        plan.bw.rounds,
        bw::table(&rows)
    );
    plot::goodput_by_size(
        &a.out.join("bw-by-size.png"),
        "goodput by ULPDU size, MTU 1500, no loss",
        &bw_series(&rows),
    )?;
    docs.push(doc);
    let mut loss_rows = Vec::new();
    for b in &plan.bw_loss {
        eprintln!("suite: bw at {} % loss", b.bed.loss);
        let (doc, rows) = bw::bw(b)?;
        loss_rows.push((b.bed.loss, rows));
        docs.push(doc);
    }
    let _ = write!(
        md,
        "### Under loss (`mpa-bench bw --loss L --sizes 4096 --bytes {} --rounds {}`)\n\n\
         The lossy bridge (nftables drops L % of the sender's data frames), aligned sender, \
         markers + CRC. Gbit/s median (min–max) of {} rounds.\n\n{}\n",
        plan.bw_loss.first().map_or(0, |b| b.transfer.bytes),
        plan.bw_loss.first().map_or(0, |b| b.rounds),
        plan.bw_loss.first().map_or(0, |b| b.rounds),
        loss_table(&loss_rows)
    );

    eprintln!("suite: lat, unpaced");
    let (doc, rows) = lat::lat(&plan.lat_unpaced)?;
    let _ = write!(
        md,
        "## One-way latency, unpaced (`mpa-bench lat --rate 0 --sizes {} --messages {}`)\n\n\
         The sender writes as fast as it can: queues build up, so this shows batching under \
         load rather than the floor.\n\n```\n{}```\n\n",
        join(&plan.lat_unpaced.sizes),
        plan.lat_unpaced.messages,
        lat::table(&rows)
    );
    docs.push(doc);

    eprintln!("suite: setup");
    let r = setup::setup(&plan.setup)?;
    let _ = write!(
        md,
        "## Connection setup (`mpa-bench setup --connections {} --parallel {}`)\n\n{}\n\n",
        plan.setup.connections,
        plan.setup.parallel,
        r.line()
    );
    docs.push(r.document());

    let _ = writeln!(
        md,
        "Whole set: {:.0} s. Latency distributions: `lat-{{kernel,datapath}}-<size>.hgrm`.",
        t0.elapsed().as_secs_f64()
    );
    // Checked as they will be read: a headline value that could not be measured (NaN, null
    // in JSON) fails the set here rather than its readers later.
    for d in &docs {
        check_shape(&serde_json::to_value(d)?)
            .with_context(|| format!("the {} document", d.scenario().key()))?;
    }
    let all = SuiteResults {
        machine: machine(),
        commit: build,
        seconds: t0.elapsed().as_secs_f64(),
        documents: docs,
    };
    write(
        &a.out.join("results.json"),
        &serde_json::to_string_pretty(&all)?,
    )?;
    write(&a.out.join("summary.md"), &md)?;
    pages::write_pages(
        &md,
        &all,
        &a.out,
        a.performance_page.as_deref(),
        a.readme.as_deref(),
    )?;
    Ok(md)
}

/// `results.json`: the machine, the commit, the set's duration and every document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct SuiteResults {
    pub(crate) machine: String,
    pub(crate) commit: String,
    pub(crate) seconds: f64,
    pub(crate) documents: Vec<Document>,
}

/// The loss table (markdown): per loss rate, both receivers' goodput and the ratio.
pub(crate) fn loss_table(rows: &[(u8, Vec<BwRow>)]) -> String {
    let mut s = String::from(
        "| loss | kernel-TCP receiver Gbit/s | datapath Gbit/s | datapath / kernel | \
         out-of-order FPDUs placed directly |\n|---|---|---|---|---|\n",
    );
    for (loss, rows) in rows {
        let get = |who: Receiver| rows.iter().find(|r| r.receiver == who).map(BwRow::record);
        let (Some(k), Some(d)) = (get(Receiver::Kernel), get(Receiver::Datapath)) else {
            continue;
        };
        let cell =
            |v: &BwRecord| format!("{:.2} ({:.2}–{:.2})", v.gbit_s, v.gbit_s_min, v.gbit_s_max);
        let direct = d
            .placed_direct_percent
            .map_or("n/a".to_string(), |p| format!("{p:.1} %"));
        let _ = writeln!(
            s,
            "| {loss} % | {} | {} | {:.2}× | {direct} |",
            cell(&k),
            cell(&d),
            d.gbit_s / k.gbit_s
        );
    }
    s
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("write {}", path.display()))
}

fn join(v: &[usize]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The goodput plot's series from `bw` rows.
pub(crate) fn bw_series(rows: &[BwRow]) -> Vec<plot::BwSeries> {
    [Side::Kernel, Side::Datapath]
        .into_iter()
        .map(|side| plot::BwSeries {
            receiver: side.key(),
            points: rows
                .iter()
                .filter(|r| r.receiver == side.receiver())
                .map(BwRow::record)
                // A value that could not be measured is left out of the plot.
                .filter(|v| !(v.gbit_s.is_nan() || v.gbit_s_min.is_nan() || v.gbit_s_max.is_nan()))
                .map(|v| (v.size as f64, v.gbit_s, v.gbit_s_min, v.gbit_s_max))
                .collect(),
        })
        .collect()
}
