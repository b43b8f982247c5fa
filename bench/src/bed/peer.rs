//! The other processes of an experiment: `mpa-peer connect` (the sender, ns a) and
//! `mpa-peer listen` (the blocking kernel-TCP Responder, ns b), and the CPU they use.

use crate::bed::cpu::{CpuUse, SystemCpu};
use crate::bed::options::{Op, Run, PORT};
use anyhow::{anyhow, bail, Context, Result};
use mpa_harness::sibling;
use mpa_testbed::TestBed;
use serde_json::Value;
use std::net::SocketAddr;
use std::process::Stdio;

/// CPU seconds (user + system) used so far by this process / by waited-for children.
pub fn cpu_seconds(who: nix::sys::resource::UsageWho) -> f64 {
    nix::sys::resource::getrusage(who)
        .map(|u| {
            let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or(0.0)
}

/// Runs `mpa-peer connect` in ns a; returns its JSON report.
pub fn sender(bed: &TestBed, r: &Run) -> Result<Value> {
    sender_with(bed, r, &[])
}

/// [`sender`] with `extra` arguments for `mpa-peer connect` (e.g. `--timestamps`).
pub fn sender_with(bed: &TestBed, r: &Run, extra: &[String]) -> Result<Value> {
    let peer = sibling("mpa-peer")?;
    let count = (r.bytes / r.size as u64).max(1).to_string();
    let to = SocketAddr::new(bed.addr_b(false), PORT).to_string();
    let mut args = vec!["connect", "--to", &to, "--count", &count, "--timeout", "60"];
    let size = r.size.to_string();
    args.extend(["--size", &size]);
    if r.op == Op::Send {
        args.extend(["--op", "send"]);
    }
    if r.aligned() {
        args.push("--aligned");
    }
    if r.plain {
        args.push("--no-crc");
    }
    if r.markers() {
        args.push("--markers");
    }
    if let Some(cc) = &r.sender_cc {
        args.extend(["--congestion", cc]);
    }
    args.extend(extra.iter().map(String::as_str));
    let pin =
        crate::bed::split::applies(bed, r.split_cpus).then_some(crate::bed::split::SENDER_CPU);
    let out = crate::bed::split::command(bed, &bed.ns_a, &peer.to_string_lossy(), pin)
        .args(&args)
        .stderr(Stdio::inherit())
        .output()
        .context("run mpa-peer connect")?;
    let v: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("mpa-peer output {:?}", String::from_utf8_lossy(&out.stdout)))?;
    if !out.status.success() {
        bail!("mpa-peer connect failed: {}", v["error"]);
    }
    Ok(v)
}

/// What one kernel-TCP Responder run measured.
pub struct KernelResult {
    /// The sender's report (several: summed, the longest transfer; see [`aggregate`]).
    pub sent: Value,
    /// The Responder's report (several connections: summed).
    pub got: Value,
    /// Every sender's and every connection's report.
    pub senders: Vec<Value>,
    pub receivers: Vec<Value>,
    /// CPU seconds: whole system during the transfer, the Responder process, the sender.
    pub cpu: CpuUse,
}

/// The blocking kernel-TCP Responder in ns b, same sender.
pub fn kernel_run(bed: &TestBed, r: &Run) -> Result<KernelResult> {
    let peer_bin = sibling("mpa-peer")?;
    let bind = SocketAddr::new(bed.addr_b(false), PORT).to_string();
    let connections = r.connections.max(1).to_string();
    let mut args = vec![
        "listen",
        "--bind",
        &bind,
        "--connections",
        &connections,
        "--timeout",
        "60",
        // A sender that never connects must not leave the Responder behind its bed.
        "--accept-timeout",
        "120",
    ];
    if r.plain {
        args.push("--no-crc");
    }
    if r.markers() {
        args.push("--markers");
    }
    let cpu0 = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_CHILDREN);
    let pin =
        crate::bed::split::applies(bed, r.split_cpus).then_some(crate::bed::split::RECEIVER_CPU);
    let mut child = crate::bed::split::command(bed, &bed.ns_b, &peer_bin.to_string_lossy(), pin)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    wait_listening(&mut child)?;
    let system = SystemCpu::start()?;
    let sender0 = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_CHILDREN);
    let senders = match senders(bed, r) {
        Ok(s) => s,
        Err(e) => {
            // The Responder would wait in accept() for a sender that never comes.
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    let sender_cpu = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_CHILDREN) - sender0;
    let out = child.wait_with_output()?;
    let system = system.seconds()?;
    let both = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_CHILDREN) - cpu0;
    // One JSON line per connection.
    let receivers = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str::<Value>)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| {
            format!(
                "mpa-peer listen output {:?}",
                String::from_utf8_lossy(&out.stdout)
            )
        })?;
    if receivers.len() != senders.len() {
        bail!(
            "mpa-peer listen reported {} connections for {} senders",
            receivers.len(),
            senders.len()
        );
    }
    Ok(KernelResult {
        sent: aggregate(&senders),
        got: aggregate(&receivers),
        senders,
        receivers,
        cpu: CpuUse {
            system,
            receiver: (both - sender_cpu).max(0.0),
            sender: sender_cpu,
        },
    })
}

fn wait_listening(child: &mut std::process::Child) -> Result<()> {
    use std::io::BufRead;
    let err = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
    let mut lines = std::io::BufReader::new(err).lines();
    match lines.next() {
        Some(Ok(l)) if l.contains("listening on") => {
            std::thread::spawn(move || for _ in lines {});
            Ok(())
        }
        other => bail!("mpa-peer listen did not start: {other:?}"),
    }
}

/// `mpa-peer listen` for one connection in namespace `ns` (its arguments after `listen`),
/// ready once it says it listens; killed when dropped.
pub struct PeerListen {
    child: std::process::Child,
}

impl PeerListen {
    /// Starts it and waits for its "listening on" line.
    pub fn start(bed: &TestBed, ns: &str, args: &[&str]) -> Result<PeerListen> {
        use std::io::{BufRead, BufReader, Read};
        let bin = sibling("mpa-peer")?;
        let mut child = bed
            .command(ns, &bin.to_string_lossy())
            .arg("listen")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("mpa-peer listen")?;
        let err = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
        let mut err = BufReader::new(err);
        let mut line = String::new();
        err.read_line(&mut line)?;
        if !line.contains("listening on") {
            let _ = child.kill();
            let _ = child.wait();
            bail!("mpa-peer listen: {line}");
        }
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = err.read_to_string(&mut rest);
            if !rest.trim().is_empty() {
                tracing::warn!("mpa-peer listen: {}", rest.trim());
            }
        });
        Ok(PeerListen { child })
    }

    /// Its report of the connection once it exited, waiting at most `within`.
    pub fn report(mut self, within: std::time::Duration) -> Result<Value> {
        use std::io::Read;
        let t0 = std::time::Instant::now();
        while self.child.try_wait()?.is_none() {
            if t0.elapsed() > within {
                bail!("mpa-peer listen did not finish within {within:?}");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            o.read_to_string(&mut out)?;
        }
        let line = out
            .lines()
            .next()
            .ok_or_else(|| anyhow!("no report from mpa-peer listen"))?;
        Ok(serde_json::from_str(line)?)
    }
}

impl Drop for PeerListen {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `r.connections` senders (`mpa-peer connect`) at once in ns a; their reports in order.
pub fn senders(bed: &TestBed, r: &Run) -> Result<Vec<Value>> {
    if r.connections <= 1 {
        return Ok(vec![sender(bed, r)?]);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..r.connections)
            .map(|_| s.spawn(|| sender(bed, r)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow!("sender thread panicked"))?)
            .collect()
    })
}

/// Whether the receivers' ULPDU digests are the senders' (as multisets: with several
/// connections any sender may have met any receiver).
pub fn digests_match(senders: &[Value], receivers: &[Value]) -> bool {
    let mut a: Vec<String> = senders
        .iter()
        .map(|v| v["ulpdu_digest"].to_string())
        .collect();
    let mut b: Vec<String> = receivers
        .iter()
        .map(|v| v["ulpdu_digest"].to_string())
        .collect();
    a.sort();
    b.sort();
    !a.is_empty() && a == b
}

/// Numeric fields summed over `reports` (the rest from the first), `transfer_seconds` and
/// `seconds` the longest: what several connections carried together.
pub fn aggregate(reports: &[Value]) -> Value {
    let mut sum = reports.first().cloned().unwrap_or(Value::Null);
    let Some(obj) = sum.as_object_mut() else {
        return sum;
    };
    for r in reports.iter().skip(1) {
        for (k, v) in obj.iter_mut() {
            let longest = k == "transfer_seconds" || k == "seconds";
            match (v.as_f64(), r[k.as_str()].as_f64()) {
                (Some(a), Some(b)) if longest => *v = serde_json::json!(a.max(b)),
                (Some(a), Some(b)) if v.is_u64() && r[k.as_str()].is_u64() => {
                    *v = serde_json::json!(a as u64 + b as u64)
                }
                (Some(a), Some(b)) => *v = serde_json::json!(a + b),
                _ => {}
            }
        }
    }
    sum
}
