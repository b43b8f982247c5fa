//! `soak`: one datapath kept running for `--minutes` while waves of connections open,
//! transfer (RDMA Writes placed into a fresh region per connection and checked octet for
//! octet, digests end to end) and close, optionally through the lossy bridge. After every
//! wave: no flow, adoption or region left behind in the datapath, and this process's resident
//! memory and open descriptors sampled. It fails on any lost or misplaced octet, any flow not
//! accounted for, or growth after the warm-up beyond the stated bounds.

use crate::bed::options::{Align, BedArgs, FramingArgs, Op, Run, TransferArgs};
use crate::bed::peer::digests_match;
use crate::demo::transfer;
use crate::report::progress::Progress;
use anyhow::{bail, Context, Result};
use clap::Args;
use mpa_control::datapath_client::DatapathClient;
use mpa_harness::datapath::{start_datapath, stats, temp_path, DatapathOptions};
use std::time::{Duration, Instant};

/// `mpa-bench soak`'s options.
#[derive(Args, Clone, Debug)]
pub struct SoakArgs {
    /// How long to run.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) minutes: f64,
    /// Connections per wave, at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub(crate) connections: u32,
    /// Octets each connection carries (a size: 8M).
    #[arg(long, default_value_t = 8 << 20, value_parser = mpa_cli::size::<u64>)]
    pub(crate) bytes: u64,
    /// ULPDU size (4096 or 4K).
    #[arg(short = 's', long, default_value_t = 4096, value_parser = mpa_cli::size::<usize>)]
    pub(crate) size: usize,
    // With loss or impairment the sender aligns FPDUs.
    #[command(flatten)]
    pub(crate) bed: BedArgs,
    /// Waves before the memory and descriptor baseline is taken: the allocator's arenas and
    /// the threads' stacks settle over the first twenty or so (RSS then stays within 1 %).
    #[arg(long, default_value_t = 20)]
    pub(crate) warmup_waves: u32,
    /// Resident memory growth allowed after the warm-up, MiB.
    #[arg(long, default_value_t = 64.0)]
    pub(crate) max_rss_growth_mib: f64,
    /// Resident memory growth allowed after the warm-up, percent of the baseline (the
    /// smaller of the two bounds holds).
    #[arg(long, default_value_t = 5.0)]
    pub(crate) max_rss_growth_percent: f64,
    /// The datapath's memory budget, octets (default: the machine's; docs/limits.md).
    ///
    /// The datapath's memory budget, octets (default: the machine's; docs/limits.md). After
    /// every wave its charges must all be back, and its high water never above it.
    #[arg(long, value_name = "OCTETS", value_parser = mpa_cli::size::<u64>)]
    pub(crate) memory_budget: Option<u64>,
    /// Print one JSON document on stdout (`{"scenario": "soak", "summary", "ok"}`); the
    /// text goes to stderr.
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// One sample after a wave.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Sample {
    pub(crate) rss_mib: f64,
    pub(crate) fds: usize,
}

/// This process's resident memory (MiB) and open descriptors.
pub(crate) fn sample() -> Result<Sample> {
    let status = std::fs::read_to_string("/proc/self/status").context("read /proc/self/status")?;
    Ok(Sample {
        rss_mib: vm_rss_mib(&status).context("no VmRSS in /proc/self/status")?,
        fds: std::fs::read_dir("/proc/self/fd")
            .context("read /proc/self/fd")?
            .count(),
    })
}

/// `VmRSS` of a `/proc/<pid>/status` text, MiB.
pub(crate) fn vm_rss_mib(status: &str) -> Option<f64> {
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map(|kib| kib / 1024.0)
}

/// What the samples after the warm-up say: `Err` naming the growth when it exceeds the bounds
/// (memory by more than `max_rss_growth_mib`, descriptors at all beyond a small slack for
/// threads' transient ones).
pub(crate) fn check_growth(
    baseline: Sample,
    later: &[Sample],
    max_rss_growth_mib: f64,
) -> Result<()> {
    const FD_SLACK: usize = 8;
    for (i, s) in later.iter().enumerate() {
        if s.rss_mib > baseline.rss_mib + max_rss_growth_mib {
            bail!(
                "resident memory grew from {:.1} MiB to {:.1} MiB by wave {} after the warm-up",
                baseline.rss_mib,
                s.rss_mib,
                i + 1
            );
        }
        if s.fds > baseline.fds + FD_SLACK {
            bail!(
                "open descriptors grew from {} to {} by wave {} after the warm-up",
                baseline.fds,
                s.fds,
                i + 1
            );
        }
    }
    Ok(())
}

/// The longest `--minutes`.
const MAX_MINUTES: f64 = 365.0 * 24.0 * 60.0;

/// Runs the soak; returns the summary line.
pub fn soak(a: &SoakArgs) -> Result<String> {
    // A year at most: the deadline is then always a time the clock can hold.
    if !(a.minutes > 0.0 && a.minutes <= MAX_MINUTES) {
        mpa_cli::usage!(
            "--minutes {} must be more than 0 and at most {MAX_MINUTES} (a year)",
            a.minutes
        );
    }
    let r = Run {
        transfer: TransferArgs {
            duration: None,
            interval: None,
            bytes: a.bytes,
            op: Op::Write,
            region_bytes: 4 << 20,
            align: Align::Auto,
            connections: a.connections,
            rcv_buf: None,
            ooo_ack_every: None,
            spin_us: 0,
            sender_cc: None,
        },
        size: a.size,
        bed: a.bed.clone(),
        framing: FramingArgs::default(),
        json: false,
    };
    let bed = a.bed.bed()?;
    let socket = temp_path("soak.sock");
    let opts = DatapathOptions {
        memory_budget: a.memory_budget,
        ..a.bed.datapath_options(&bed)?
    };
    let dp = start_datapath(&bed, &socket, &opts)?;
    let result = crate::bed::split::pin_datapath_workers(&bed, a.bed.split_cpus, a.bed.queues)
        .and_then(|()| waves(a, &r, &bed, &socket));
    dp.stop();
    result
}

fn waves(
    a: &SoakArgs,
    r: &Run,
    bed: &mpa_testbed::TestBed,
    socket: &std::path::Path,
) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs_f64(a.minutes * 60.0);
    let mut dpc = DatapathClient::connect(socket, Duration::from_secs(10))?;
    let progress = Progress::new("soak", 0);
    let (mut wave, mut octets, mut flows) = (0u32, 0f64, 0u64);
    let mut baseline: Option<Sample> = None;
    let mut later: Vec<Sample> = Vec::new();
    let mut peak = Sample {
        rss_mib: 0.0,
        fds: 0,
    };
    let t0 = Instant::now();
    let mut memory = mpa_ctl_proto::stats::MemoryStats::default();
    while wave == 0 || Instant::now() < deadline {
        wave += 1;
        progress.running(format!("wave {wave}"));
        let d = transfer(bed, socket, r).with_context(|| format!("wave {wave}"))?;
        if !digests_match(&d.peers, &d.flows) {
            bail!("wave {wave}: digests differ");
        }
        let Some((messages, _)) = d.placement else {
            bail!("wave {wave}: nothing placed");
        };
        let want = crate::bed::options::messages(r) * u64::from(r.transfer.connections);
        if messages != want {
            bail!("wave {wave}: {messages} messages completed, {want} sent");
        }
        octets += d.flow.rx.ulpdu_octets as f64;
        flows += d.flows.len() as u64;
        // Everything of the wave is gone from the datapath: flows, adoptions and (the
        // consumers having closed) regions; allow the control thread a moment.
        // So are their charges on the memory budget (flows, stores, completion rings).
        let t = Instant::now();
        loop {
            let s = stats(&mut dpc)?;
            let live = s.live_flows().count();
            memory = s.memory;
            if memory.high_water > memory.limit {
                bail!(
                    "wave {wave}: the memory budget exceeded: high water {} of {}",
                    memory.high_water,
                    memory.limit
                );
            }
            if live == 0 && s.adopted_flows == 0 && s.registry.regions == 0 && memory.used == 0 {
                break;
            }
            if t.elapsed() > Duration::from_secs(10) {
                bail!(
                    "wave {wave}: {live} flows, {} adoptions, {} regions and {} octets of the \
                     memory budget left behind",
                    s.adopted_flows,
                    s.registry.regions,
                    memory.used
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let s = sample()?;
        peak.rss_mib = peak.rss_mib.max(s.rss_mib);
        peak.fds = peak.fds.max(s.fds);
        match baseline {
            None if wave >= a.warmup_waves => baseline = Some(s),
            Some(_) => later.push(s),
            None => {}
        }
        if wave % 10 == 0 {
            progress.println(format!(
                "soak: wave {wave}: {:.0} MiB placed, RSS {:.1} MiB, {} descriptors",
                octets / (1 << 20) as f64,
                s.rss_mib,
                s.fds
            ));
        }
        progress.done(format!(
            "wave {wave}: {:.0} MiB so far, RSS {:.0} MiB, {} fds",
            octets / (1 << 20) as f64,
            s.rss_mib,
            s.fds
        ));
    }
    drop(progress);
    // Growth is judged on the samples after the baseline: a run that ended before it has
    // none, and says so rather than report the peak as a baseline.
    let Some(base) = baseline.filter(|_| !later.is_empty()) else {
        bail!(
            "the run ended after {wave} waves, before the warm-up's {} and one wave after \
             them: memory and descriptor growth not checked (more --minutes or fewer \
             --warmup-waves)",
            a.warmup_waves
        );
    };
    let bound = a
        .max_rss_growth_mib
        .min(base.rss_mib * a.max_rss_growth_percent / 100.0);
    check_growth(base, &later, bound)?;
    let last = later.last().copied().unwrap_or(base);
    let grown = later.iter().map(|s| s.rss_mib).fold(base.rss_mib, f64::max) - base.rss_mib;
    Ok(format!(
        "{wave} waves, {flows} connections, {:.0} MiB placed and checked in {:.0} s, \
         {}; after the warm-up ({} waves) RSS {:.1} → {:.1} MiB (peak {:.1}, most growth \
         {:.1} MiB = {:.1} %), descriptors {} → {} (peak {}); memory budget {} MiB: high \
         water {:.1} MiB, {} out-of-order segments dropped for want of room, every charge \
         given back; every flow ended, every region released",
        octets / (1 << 20) as f64,
        t0.elapsed().as_secs_f64(),
        match &a.bed.impair {
            Some(_) => "through the impairment bridge".to_string(),
            None => format!("{} % loss", a.bed.loss),
        },
        a.warmup_waves,
        base.rss_mib,
        last.rss_mib,
        peak.rss_mib,
        grown,
        100.0 * grown / base.rss_mib.max(1.0),
        base.fds,
        last.fds,
        peak.fds,
        memory.limit >> 20,
        memory.high_water as f64 / (1 << 20) as f64,
        memory.dropped_segments
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_from_status() {
        let s = "Name:\tx\nVmPeak:\t  9999 kB\nVmRSS:\t   2048 kB\nThreads:\t3\n";
        assert_eq!(vm_rss_mib(s), Some(2.0));
        assert_eq!(vm_rss_mib("Name: x\n"), None);
        assert!(sample().unwrap().fds > 0);
    }

    #[test]
    fn growth_beyond_the_bounds_fails_with_the_wave() {
        let b = Sample {
            rss_mib: 100.0,
            fds: 40,
        };
        let ok = [
            Sample {
                rss_mib: 150.0,
                fds: 48,
            },
            Sample {
                rss_mib: 90.0,
                fds: 30,
            },
        ];
        check_growth(b, &ok, 64.0).unwrap();
        let e = check_growth(
            b,
            &[
                ok[0],
                Sample {
                    rss_mib: 170.0,
                    fds: 40,
                },
            ],
            64.0,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("100.0 MiB to 170.0 MiB by wave 2"), "{e}");
        let e = check_growth(
            b,
            &[Sample {
                rss_mib: 100.0,
                fds: 49,
            }],
            64.0,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("from 40 to 49 by wave 1"), "{e}");
    }
}
