//! `--split-cpus`: the namespace bed as two hosts on this machine's two CPUs.
//!
//! On one host the ACK clock makes the receiver pay for the sender: an ACK the receiver sends
//! is processed by the sender's TCP on the receiver's CPU (veth delivers it there), and the
//! transmissions that ACK releases — GSO segmentation, veth, XDP, the copy into UMEM — run
//! there too. With `--split-cpus` the sender (`mpa-peer connect`) runs on CPU 0, the ACKs it
//! receives are steered to CPU 0 with RPS on its veth, and the receiver — the kernel-TCP
//! Responder process, or the datapath's worker threads — runs on CPU 1. Both receivers get the
//! same treatment in the same run; the consumer and the bench's own threads stay unpinned.
//! Not on a real-NIC bed (`--iface`), where the sender is another host anyway.

use anyhow::{bail, Context, Result};
use mpa_testbed::TestBed;
use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use std::process::Command;

/// The sender's CPU (and its veth's RX processing).
pub(crate) const SENDER_CPU: usize = 0;
/// The receiver's CPU.
pub(crate) const RECEIVER_CPU: usize = 1;

/// Whether the bed can be split: a namespace bed on a machine with at least two CPUs.
pub(crate) fn applies(bed: &TestBed, split: bool) -> bool {
    split && bed.external.is_none()
}

/// `program` in `ns`, pinned to `cpu` (through `taskset`) when `pin`.
pub(crate) fn command(bed: &TestBed, ns: &str, program: &str, pin: Option<usize>) -> Command {
    match pin {
        Some(cpu) => {
            let mut c = bed.command(ns, "taskset");
            c.args(["-c", &cpu.to_string(), program]);
            c
        }
        None => bed.command(ns, program),
    }
}

/// Steers the RX processing of the sender's interface (the ACKs it receives) to
/// [`SENDER_CPU`] with RPS.
pub(crate) fn steer_sender_rx(bed: &TestBed) -> Result<()> {
    let mask = format!("{:x}", 1u64 << SENDER_CPU);
    let script = format!(
        "for q in /sys/class/net/{}/queues/rx-*/rps_cpus; do echo {mask} > $q || exit 1; done",
        bed.if_a
    );
    let st = bed
        .command(&bed.ns_a, "sh")
        .args(["-c", &script])
        .status()
        .context("set rps_cpus in the sender's namespace")?;
    if !st.success() {
        bail!("could not set rps_cpus on {} in {}", bed.if_a, bed.ns_a);
    }
    Ok(())
}

/// With `--split-cpus` on a namespace bed: pins the datapath's `queues` worker threads (one per
/// queue) that this process just started to [`RECEIVER_CPU`]; `Err` when fewer showed up.
pub(crate) fn pin_datapath_workers(bed: &TestBed, split: bool, queues: u32) -> Result<()> {
    if !applies(bed, split) {
        return Ok(());
    }
    let want = queues.max(1) as usize;
    let n = pin_workers(want)?;
    if n < want {
        bail!("--split-cpus: {n} datapath worker threads to pin, {want} expected");
    }
    Ok(())
}

/// Pins the calling thread to [`RECEIVER_CPU`]: an in-process receiver (the kernel side of
/// `lat`) where a separate process would be pinned by [`command`].
pub(crate) fn pin_this_thread_to_receiver_cpu() -> Result<()> {
    let mut set = CpuSet::new();
    set.set(RECEIVER_CPU).context("cpu set")?;
    sched_setaffinity(Pid::from_raw(0), &set)
        .with_context(|| format!("pin the receiver thread to CPU {RECEIVER_CPU}"))
}

/// Pins this process's datapath worker threads (`mpa-worker-*`) to [`RECEIVER_CPU`],
/// waiting up to 2 s for `expected` of them; returns how many it pinned.
pub(crate) fn pin_workers(expected: usize) -> Result<usize> {
    // A worker names itself (its comm) once it runs, which may be just after the datapath
    // started: look again until every expected one is there, or a deadline passes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let n = pin_named_workers()?;
        if n >= expected || std::time::Instant::now() >= deadline {
            return Ok(n);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn pin_named_workers() -> Result<usize> {
    let mut set = CpuSet::new();
    set.set(RECEIVER_CPU).context("cpu set")?;
    let mut n = 0;
    for task in std::fs::read_dir("/proc/self/task").context("/proc/self/task")? {
        let task = task?;
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("mpa-worker-") {
            continue;
        }
        let tid: i32 = task
            .file_name()
            .to_string_lossy()
            .parse()
            .context("task id")?;
        sched_setaffinity(Pid::from_raw(tid), &set)
            .with_context(|| format!("pin {} to CPU {RECEIVER_CPU}", comm.trim()))?;
        n += 1;
    }
    Ok(n)
}

/// Fails unless the machine has the two CPUs the split needs.
pub(crate) fn check_cpus() -> Result<()> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if n < 2 {
        bail!("--split-cpus needs 2 CPUs, this machine has {n}");
    }
    Ok(())
}
