//! `pipeline --workers N`: N workers side by side, as the datapath runs one per RX queue. Each
//! has its own `Worker<MemRing>`, ring, flows (their own 4-tuples, STags and payloads,
//! [`gen::prepare_worker`]), regions and completion ring, set up on its own thread, pinned to
//! its own CPU when there are enough (when not, none is pinned, and the report says so). All
//! start together (a barrier) and each does what a single-worker round does: inject a burst,
//! poll it (timed), take ACKs and completions, and check everything at the end.
//!
//! Aggregate: the payload of all workers over the slowest worker's poll time (the timed part
//! of a single-worker round, so that the two compare), and over the loop span (first start to
//! last end, injection included). The 1-worker reference runs in the same rounds, on worker
//! 0's frames and CPU, through the same code, so the scaling factor compares like with like.

use super::gen::{self, Prepared};
use super::round::{run_round_on, RoundResult};
use super::{baseline, PipelineOpts, Spread};
use crate::report::document::{PipelineWorkerRecord, PipelineWorkersRecord};
use anyhow::{anyhow, bail, Result};
use std::sync::Barrier;

/// The CPUs this process may run on, in order.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    use nix::sched::{sched_getaffinity, CpuSet};
    use nix::unistd::Pid;
    let Ok(set) = sched_getaffinity(Pid::from_raw(0)) else {
        return Vec::new();
    };
    (0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect()
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) -> Result<()> {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    set.set(cpu)?;
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| anyhow!("pinning to CPU {cpu}: {e}"))
}

/// One CPU per worker when there are enough, else none (`None`: not pinned).
pub(crate) fn placement(workers: usize) -> Option<Vec<usize>> {
    let cpus = allowed_cpus();
    (workers <= cpus.len()).then(|| cpus[..workers].to_vec())
}

/// Runs `f` on each of `inputs` on its own thread (named `{name}-w{w}`, pinned to `cpus[w]`
/// when given), all sharing one barrier that `f` meets when it is ready to start. A failed
/// pin still runs `f` (so the barrier is met) and is that thread's error. Returns every
/// thread's result, in order; `Err` names the first thread that failed.
fn side_by_side<I: Send, T: Send>(
    name: &str,
    inputs: Vec<I>,
    cpus: Option<&[usize]>,
    f: impl Fn(I, &Barrier) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let start = Barrier::new(inputs.len());
    let results: Vec<Result<T>> = std::thread::scope(|s| {
        let handles: Vec<_> = inputs
            .into_iter()
            .enumerate()
            .map(|(w, input)| {
                let cpu = cpus.map(|c| c[w]);
                let (start, f) = (&start, &f);
                std::thread::Builder::new()
                    .name(format!("{name}-w{w}"))
                    .spawn_scoped(s, move || {
                        let pinned = cpu.map_or(Ok(()), pin);
                        let r = f(input, start);
                        pinned.and(r)
                    })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(anyhow!("the {name} thread panicked"))),
                Err(e) => Err(anyhow!("spawning a {name} thread: {e}")),
            })
            .collect()
    });
    results
        .into_iter()
        .enumerate()
        .map(|(w, r)| r.map_err(|e| e.context(format!("{name} {w}"))))
        .collect()
}

/// One multi-worker round: worker `w` runs `prepared[w]` on its own thread (pinned to
/// `cpus[w]` when given). Returns every worker's result; `Err` names the first worker whose
/// round failed.
pub(crate) fn run_workers_round(
    o: &PipelineOpts,
    prepared: &[Prepared],
    cpus: Option<&[usize]>,
) -> Result<Vec<RoundResult>> {
    // The round sets its worker up first, then meets the others at the barrier.
    side_by_side("worker", prepared.iter().collect(), cpus, |p, start| {
        run_round_on(o, p, &mut |_| {}, Some(start))
    })
}

/// The warm copy ([`baseline::Payloads::time_warm_copy`]) of each of `prepared`'s payloads on
/// its own thread (pinned to `cpus[w]` when given), all started together. Returns each
/// thread's copy time.
fn copies_side_by_side(
    payloads: &mut [baseline::Payloads],
    prepared: &[Prepared],
    cpus: Option<&[usize]>,
) -> Result<Vec<std::time::Duration>> {
    let inputs = payloads.iter_mut().zip(prepared).collect();
    side_by_side("memcpy", inputs, cpus, |(pl, p), start| {
        start.wait();
        Ok(pl.time_warm_copy(p))
    })
}

/// What one worker measured over the rounds.
#[derive(Debug, Clone)]
pub(crate) struct WorkerReport {
    /// Its index, and the CPU it was pinned to.
    pub(crate) worker: usize,
    pub(crate) cpu: Option<usize>,
    /// Its flows' ids and STags.
    pub(crate) flow_ids: Vec<u64>,
    pub(crate) stags: Vec<u32>,
    /// Segments it was sent per round.
    pub(crate) segments: u64,
    pub(crate) ns_per_segment: Spread,
    pub(crate) cpu_ns_per_segment: Spread,
    pub(crate) gbits: Spread,
    pub(crate) cpu_over_wall: Spread,
    /// The last round.
    pub(crate) last: RoundResult,
}

/// What `pipeline --workers N` measured for one configuration.
#[derive(Debug, Clone)]
pub(crate) struct WorkersReport {
    pub(crate) opts: PipelineOpts,
    pub(crate) workers: usize,
    /// The CPUs the workers were pinned to (`None`: more workers than CPUs, not pinned).
    pub(crate) cpus: Option<Vec<usize>>,
    /// Payload of all workers over the slowest worker's poll time, per round.
    pub(crate) aggregate_gbits: Spread,
    /// Payload of all workers over the span from the first start to the last end.
    pub(crate) aggregate_loop_gbits: Spread,
    /// The 1-worker reference of the same rounds (worker 0's frames, CPU and code path).
    pub(crate) one: WorkerReport,
    pub(crate) one_loop_gbits: Spread,
    /// Aggregate over the 1-worker reference, round by round.
    pub(crate) scaling: Spread,
    /// The same from the threads' CPU time in polls instead of wall time: what preemption
    /// by other load does not inflate (contention for caches and memory between the workers
    /// still does, which is what this should show).
    pub(crate) aggregate_cpu_gbits: Spread,
    pub(crate) one_cpu_gbits: Spread,
    pub(crate) scaling_cpu: Spread,
    pub(crate) per_worker: Vec<WorkerReport>,
    /// Octet passes alone over worker 0's frames, as in the single-worker table.
    pub(crate) memcpy_gbits: Spread,
    pub(crate) crc_gbits: Spread,
    /// The warm copy of every worker's payloads, one thread per worker on the workers' CPUs,
    /// side by side (all payload over the slowest copy time), and alone on worker 0's CPU,
    /// in the same rounds: how far the machine's caches and memory let a plain copy scale,
    /// the reference for the workers' scaling.
    /// `None` with one worker.
    pub(crate) memcpy_side_by_side_gbits: Option<Spread>,
    pub(crate) memcpy_alone_gbits: Option<Spread>,
    pub(crate) memcpy_scaling: Option<Spread>,
}

fn spread(v: Vec<f64>) -> Spread {
    Spread::of(v).unwrap_or(Spread {
        median: 0.0,
        min: 0.0,
        max: 0.0,
    })
}

fn secs(d: std::time::Duration) -> f64 {
    d.as_secs_f64().max(1e-9)
}

fn worker_report(
    w: usize,
    cpu: Option<usize>,
    p: &Prepared,
    rounds: &[RoundResult],
) -> WorkerReport {
    let per = |f: &dyn Fn(&RoundResult) -> f64| spread(rounds.iter().map(f).collect());
    WorkerReport {
        worker: w,
        cpu,
        flow_ids: p.flows.iter().map(|f| f.flow_id).collect(),
        stags: p.flows.iter().map(|f| f.stag).collect(),
        segments: p.segments,
        ns_per_segment: per(&|r| secs(r.poll) * 1e9 / r.frames.max(1) as f64),
        cpu_ns_per_segment: per(&|r| r.poll_cpu.as_secs_f64() * 1e9 / r.frames.max(1) as f64),
        gbits: per(&|r| r.payload_octets as f64 * 8.0 / secs(r.poll) / 1e9),
        cpu_over_wall: per(&|r| r.cpu / secs(r.wall)),
        last: rounds.last().cloned().unwrap_or_default(),
    }
}

/// Payload of `rs` over the slowest poll time, over the loop span, and over the largest CPU
/// time in polls, Gbit/s.
fn aggregate(rs: &[RoundResult]) -> (f64, f64, f64) {
    let payload: u64 = rs.iter().map(|r| r.payload_octets).sum();
    let slowest = rs.iter().map(|r| r.poll).max().unwrap_or_default();
    let most_cpu = rs.iter().map(|r| r.poll_cpu).max().unwrap_or_default();
    let began = rs.iter().filter_map(|r| r.began).min();
    let ended = rs.iter().filter_map(|r| r.ended).max();
    let span = match (began, ended) {
        (Some(b), Some(e)) => e.saturating_duration_since(b),
        _ => std::time::Duration::ZERO,
    };
    let bits = payload as f64 * 8.0;
    (
        bits / secs(slowest) / 1e9,
        bits / secs(span) / 1e9,
        bits / secs(most_cpu) / 1e9,
    )
}

/// Prepares every worker's frames, then runs `o.rounds` rounds, each the 1-worker reference
/// (with `workers` > 1) followed by all `workers` together. `Err` names the first round and
/// worker whose checks failed.
pub(crate) fn run(o: &PipelineOpts, workers: usize) -> Result<WorkersReport> {
    let workers = workers.max(1);
    let prepared = (0..workers)
        .map(|w| gen::prepare_worker(o, w))
        .collect::<Result<Vec<_>>>()?;
    let cpus = placement(workers);
    let n = o.rounds.max(1);
    let mut all: Vec<Vec<RoundResult>> = vec![Vec::with_capacity(n); workers];
    let mut one: Vec<RoundResult> = Vec::with_capacity(n);
    let mut agg = Vec::with_capacity(n);
    let mut agg_loop = Vec::with_capacity(n);
    let mut one_loop = Vec::with_capacity(n);
    let mut scaling = Vec::with_capacity(n);
    let (mut agg_cpu, mut one_cpu, mut scaling_cpu) = (Vec::new(), Vec::new(), Vec::new());
    let mut passes = Vec::with_capacity(n);
    // Each worker's payloads for the copies side by side; worker 0's also for the passes.
    let mut copies: Vec<baseline::Payloads> = prepared
        .iter()
        .map(|p| baseline::Payloads::of(p, super::round::burst_frames(o, p)))
        .collect();
    let (mut copy_together, mut copy_alone, mut copy_scaling) =
        (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let fail = |e: anyhow::Error, what: &str| {
            anyhow!(
                "{}, {what}: round {} of {n} FAILED: {e:#}",
                o.label(),
                i + 1
            )
        };
        let reference = run_workers_round(o, &prepared[..1], cpus.as_ref().map(|c| &c[..1]))
            .map_err(|e| fail(e, "1 worker"))?
            .remove(0);
        let rs = run_workers_round(o, &prepared, cpus.as_deref())
            .map_err(|e| fail(e, &format!("{workers} workers")))?;
        let (a, l, c) = aggregate(&rs);
        let (one_gbits, one_l, one_c) = aggregate(std::slice::from_ref(&reference));
        agg.push(a);
        agg_loop.push(l);
        one_loop.push(one_l);
        scaling.push(a / one_gbits.max(1e-9));
        agg_cpu.push(c);
        one_cpu.push(one_c);
        scaling_cpu.push(c / one_c.max(1e-9));
        one.push(reference);
        for (w, r) in rs.into_iter().enumerate() {
            all[w].push(r);
        }
        passes.push(copies[0].time(&prepared[0]));
        if workers > 1 {
            let alone = copies_side_by_side(
                &mut copies[..1],
                &prepared[..1],
                cpus.as_ref().map(|c| &c[..1]),
            )
            .map_err(|e| fail(e, "memcpy alone"))?;
            let together = copies_side_by_side(&mut copies, &prepared, cpus.as_deref())
                .map_err(|e| fail(e, "memcpy side by side"))?;
            let bits = |ps: &[Prepared]| {
                ps.iter()
                    .map(|p| p.payload_octets() as f64 * 8.0)
                    .sum::<f64>()
            };
            let slowest =
                |d: &[std::time::Duration]| secs(d.iter().copied().max().unwrap_or_default());
            let one = bits(&prepared[..1]) / slowest(&alone) / 1e9;
            let all = bits(&prepared) / slowest(&together) / 1e9;
            copy_alone.push(one);
            copy_together.push(all);
            copy_scaling.push(all / one.max(1e-9));
        }
    }
    let cpu_of = |w: usize| cpus.as_ref().map(|c| c[w]);
    let payload = one.first().map_or(0, |r| r.payload_octets) as f64;
    let pass = |f: &dyn Fn(&baseline::OctetPasses) -> std::time::Duration| {
        spread(
            passes
                .iter()
                .map(|x| payload * 8.0 / secs(f(x)) / 1e9)
                .collect(),
        )
    };
    Ok(WorkersReport {
        opts: o.clone(),
        workers,
        aggregate_gbits: spread(agg),
        aggregate_loop_gbits: spread(agg_loop),
        one: worker_report(0, cpu_of(0), &prepared[0], &one),
        one_loop_gbits: spread(one_loop),
        scaling: spread(scaling),
        aggregate_cpu_gbits: spread(agg_cpu),
        one_cpu_gbits: spread(one_cpu),
        scaling_cpu: spread(scaling_cpu),
        per_worker: all
            .iter()
            .enumerate()
            .map(|(w, rs)| worker_report(w, cpu_of(w), &prepared[w], rs))
            .collect(),
        memcpy_gbits: pass(&|x| x.memcpy),
        crc_gbits: pass(&|x| x.crc),
        memcpy_side_by_side_gbits: Spread::of(copy_together),
        memcpy_alone_gbits: Spread::of(copy_alone),
        memcpy_scaling: Spread::of(copy_scaling),
        cpus,
    })
}

/// Several configurations, one after the other.
pub(crate) fn run_many(configs: &[PipelineOpts], workers: usize) -> Result<Vec<WorkersReport>> {
    if configs.is_empty() {
        bail!("no configuration");
    }
    configs.iter().map(|o| run(o, workers)).collect()
}

impl WorkerReport {
    fn record(&self) -> PipelineWorkerRecord {
        let r = &self.last;
        PipelineWorkerRecord {
            worker: self.worker,
            cpu: self.cpu,
            flow_ids: self.flow_ids.clone(),
            stags: self.stags.clone(),
            segments: self.segments,
            ns_per_packet: self.ns_per_segment,
            cpu_ns_per_packet: self.cpu_ns_per_segment,
            gbit_s: self.gbits,
            cpu_over_wall: self.cpu_over_wall,
            frames: r.frames,
            acks: r.acks,
            fpdus: r.fpdus,
            completions: r.completions,
            region_octets_checked: r.compared,
            payload_octets: r.payload_octets,
        }
    }
}

impl WorkersReport {
    /// One line of text.
    pub fn line(&self) -> String {
        let pinned = match &self.cpus {
            Some(c) => format!("pinned to CPUs {c:?}"),
            None => "not pinned (more workers than CPUs)".into(),
        };
        format!(
            "{}, {} workers {pinned}: aggregate {:.2} Gbit/s payload ({:.2}–{:.2}; over the loop \
             incl. injection {:.2}), 1 worker {:.2} Gbit/s, scaling {:.2}× ({:.2}–{:.2}), from \
             CPU time {:.2}×{}; per worker {} Gbit/s; {} completions, {} region octets checked",
            self.opts.label(),
            self.workers,
            self.aggregate_gbits.median,
            self.aggregate_gbits.min,
            self.aggregate_gbits.max,
            self.aggregate_loop_gbits.median,
            self.one.gbits.median,
            self.scaling.median,
            self.scaling.min,
            self.scaling.max,
            self.scaling_cpu.median,
            self.memcpy_scaling
                .map(|k| format!(", warm memcpy side by side {:.2}×", k.median))
                .unwrap_or_default(),
            self.per_worker
                .iter()
                .map(|w| format!("{:.2}", w.gbits.median))
                .collect::<Vec<_>>()
                .join(" / "),
            self.per_worker
                .iter()
                .map(|w| w.last.completions)
                .sum::<u64>(),
            self.per_worker.iter().map(|w| w.last.compared).sum::<u64>(),
        )
    }

    /// Every value, for `--json` (with the keys every pipeline result carries: the per-worker
    /// medians as `gbit_s_per_core` and `ns_per_packet`).
    pub(crate) fn record(&self) -> PipelineWorkersRecord {
        let o = &self.opts;
        let median = |f: &dyn Fn(&WorkerReport) -> f64| {
            spread(self.per_worker.iter().map(f).collect()).median
        };
        PipelineWorkersRecord {
            label: o.label(),
            workers: self.workers,
            pinned: self.cpus.is_some(),
            cpus: self.cpus.clone(),
            flows_per_worker: o.flows,
            size: o.size,
            mss: o.mss,
            markers: o.markers,
            crc: o.crc,
            op: o.op,
            aligned: o.aligned,
            loss: o.loss,
            reorder: o.reorder,
            bytes_per_worker: o.bytes,
            rounds: o.rounds,
            gbit_s_per_core: median(&|w| w.gbits.median),
            ns_per_packet: median(&|w| w.ns_per_segment.median),
            memcpy_gbit_s: self.memcpy_gbits.median,
            crc_gbit_s: self.crc_gbits.median,
            aggregate_gbit_s: self.aggregate_gbits.median,
            aggregate_gbit_s_spread: self.aggregate_gbits,
            aggregate_loop_gbit_s: self.aggregate_loop_gbits,
            one_worker_gbit_s: self.one.gbits,
            one_worker_ns_per_packet: self.one.ns_per_segment,
            one_worker_loop_gbit_s: self.one_loop_gbits,
            scaling: self.scaling.median,
            scaling_spread: self.scaling,
            aggregate_cpu_gbit_s: self.aggregate_cpu_gbits,
            one_worker_cpu_gbit_s: self.one_cpu_gbits,
            scaling_cpu: self.scaling_cpu,
            memcpy_side_by_side_gbit_s: self.memcpy_side_by_side_gbits,
            memcpy_alone_gbit_s: self.memcpy_alone_gbits,
            memcpy_scaling: self.memcpy_scaling,
            per_worker: self.per_worker.iter().map(WorkerReport::record).collect(),
        }
    }
}

/// The table of `reports` (markdown): the 1-worker reference, each worker, the aggregate.
pub(crate) fn table(reports: &[WorkersReport]) -> String {
    let mut s = String::new();
    for r in reports {
        s += &format!(
            "\nMSS {}, ULPDU {}, {} flow(s) per worker, {}:\n\n\
             | worker | CPU | ns/packet median (min–max) | CPU ns/packet | Gbit/s payload \
             median (min–max) | CPU/wall | frames | completions | region octets checked |\n\
             |---|---|---|---|---|---|---|---|---|\n",
            r.opts.mss,
            r.opts.size,
            r.opts.flows,
            match &r.cpus {
                Some(_) => "each worker pinned to its own CPU".to_string(),
                None => format!(
                    "{} workers on {} CPUs: not pinned",
                    r.workers,
                    allowed_cpus().len()
                ),
            },
        );
        let cpu = |c: Option<usize>| c.map_or("–".into(), |c| c.to_string());
        let row = |name: String, w: &WorkerReport| {
            format!(
                "| {name} | {} | {:.0} ({:.0}–{:.0}) | {:.0} | {:.2} ({:.2}–{:.2}) | {:.2} | {} \
                 | {} | {} |\n",
                cpu(w.cpu),
                w.ns_per_segment.median,
                w.ns_per_segment.min,
                w.ns_per_segment.max,
                w.cpu_ns_per_segment.median,
                w.gbits.median,
                w.gbits.min,
                w.gbits.max,
                w.cpu_over_wall.median,
                w.last.frames,
                w.last.completions,
                w.last.compared,
            )
        };
        s += &row("alone (1 worker)".into(), &r.one);
        for w in &r.per_worker {
            s += &row(format!("{} of {}", w.worker, r.workers), w);
        }
        s +=
            &format!(
            "| **aggregate** ({} workers) | | | | **{:.2}** ({:.2}–{:.2}) | | {} | {} | {} |\n\n\
             aggregate = all workers' payload over the slowest worker's poll time; over the loop \
             span (first start to last end, injection included) {:.2} Gbit/s (1 worker: {:.2}); \
             scaling vs 1 worker in the same rounds: **{:.2}×** ({:.2}–{:.2}); from the \
             threads' CPU time in polls (not inflated by preemption) {:.2} Gbit/s vs {:.2}: \
             {:.2}× ({:.2}–{:.2}).{}\n",
            r.workers,
            r.aggregate_gbits.median,
            r.aggregate_gbits.min,
            r.aggregate_gbits.max,
            r.per_worker.iter().map(|w| w.last.frames).sum::<u64>(),
            r.per_worker.iter().map(|w| w.last.completions).sum::<u64>(),
            r.per_worker.iter().map(|w| w.last.compared).sum::<u64>(),
            r.aggregate_loop_gbits.median,
            r.one_loop_gbits.median,
            r.scaling.median,
            r.scaling.min,
            r.scaling.max,
            r.aggregate_cpu_gbits.median,
            r.one_cpu_gbits.median,
            r.scaling_cpu.median,
            r.scaling_cpu.min,
            r.scaling_cpu.max,
            match (r.memcpy_side_by_side_gbits, r.memcpy_alone_gbits, r.memcpy_scaling) {
                (Some(t), Some(a), Some(k)) => format!(
                    " The warm memcpy of the same payloads, one thread per worker on the same \
                     CPUs, side by side: {:.2} Gbit/s against {:.2} alone, **{:.2}×** \
                     ({:.2}–{:.2}): what this machine's caches and memory give a plain copy.",
                    t.median, a.median, k.median, k.min, k.max
                ),
                _ => String::new(),
            },
        );
    }
    s
}
