//! The other processes of an experiment: `mpa-peer connect` (the sender, ns a) and
//! `mpa-peer listen` (the blocking kernel-TCP Responder, ns b), the report each prints, and the
//! CPU they use.

use crate::bed::cpu::{CpuUse, SystemCpu};
use crate::bed::options::{Op, Run, PORT};
use anyhow::{anyhow, bail, Context, Result};
use mpa_ctl_proto::stats::FlowReport;
use mpa_harness::sibling;
use mpa_testbed::TestBed;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::process::Stdio;

/// The JSON line `mpa-peer` prints per connection (peer/src/report.rs `Report`): the fields
/// the experiments read. Fields only one role or mode reports are `None` when absent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct PeerReport {
    /// The other end's address.
    pub(crate) peer: String,
    /// ULPDUs sent (connect) or received (listen), and their octets.
    pub(crate) ulpdus: u64,
    /// connect: messages sent (several ULPDUs each when aligned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) messages: Option<u64>,
    pub(crate) ulpdu_bytes: u64,
    /// CRC32c of the ULPDU octets in order (hex).
    pub(crate) ulpdu_digest: String,
    /// The MPA error code (RFC 5044 §8) the connection ended with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error_code: Option<u8>,
    /// Why the connection failed, in words; `None` when it did not.
    #[serde(default)]
    pub(crate) error: Option<String>,
    /// From the start until the end of the connection.
    pub(crate) seconds: f64,
    /// connect: from the first ULPDU written until the peer closed after the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) transfer_seconds: Option<f64>,
    /// connect: the connection's TCP congestion control.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) congestion: Option<String>,
    /// listen: RDMA Write messages placed into the region, and their payload octets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) writes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) write_octets: Option<u64>,
    /// listen: Send messages received, and their payload octets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sends: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) send_octets: Option<u64>,
    /// listen --advertise: CRC32c of the whole region when the connection ended (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) region_digest: Option<String>,
    /// listen --advertise: every octet written equalled the region pattern at its place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) region_pattern_ok: Option<bool>,
    /// listen --echo: RDMA Write messages written back to the Initiator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) echoes: Option<u64>,
}

impl PeerReport {
    /// Several connections' reports as one: counters summed, `seconds` and
    /// `transfer_seconds` the longest, the rest from the first (the default report when there
    /// is none).
    pub(crate) fn aggregate(reports: &[PeerReport]) -> PeerReport {
        let Some((first, rest)) = reports.split_first() else {
            return PeerReport::default();
        };
        let mut sum = first.clone();
        for r in rest {
            sum.ulpdus += r.ulpdus;
            sum.ulpdu_bytes += r.ulpdu_bytes;
            sum.seconds = sum.seconds.max(r.seconds);
            sum.transfer_seconds = match (sum.transfer_seconds, r.transfer_seconds) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, _) => a,
            };
            for (total, one) in [
                (&mut sum.writes, r.writes),
                (&mut sum.write_octets, r.write_octets),
                (&mut sum.sends, r.sends),
                (&mut sum.send_octets, r.send_octets),
                (&mut sum.echoes, r.echoes),
                (&mut sum.messages, r.messages),
            ] {
                if let (Some(t), Some(o)) = (total.as_mut(), one) {
                    *t += o;
                }
            }
        }
        sum
    }
}

/// The report as the JSON line `mpa-peer` printed (of the fields read), for messages.
impl std::fmt::Display for PeerReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&serde_json::to_string(self).map_err(|_| std::fmt::Error)?)
    }
}

/// What carries the CRC32c of the ULPDU octets it sent or received: an `mpa-peer` report, or
/// a datapath flow's (`None` when the datapath kept no digest).
pub(crate) trait UlpduDigest {
    fn ulpdu_digest(&self) -> Option<&str>;
}

impl UlpduDigest for PeerReport {
    fn ulpdu_digest(&self) -> Option<&str> {
        Some(&self.ulpdu_digest)
    }
}

impl UlpduDigest for FlowReport {
    fn ulpdu_digest(&self) -> Option<&str> {
        self.ulpdu_digest.as_deref()
    }
}

/// CPU seconds (user + system) used so far by this process / by waited-for children.
pub(crate) fn cpu_seconds(who: nix::sys::resource::UsageWho) -> f64 {
    nix::sys::resource::getrusage(who)
        .map(|u| {
            let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or(0.0)
}

/// Runs `mpa-peer connect` in ns a; returns its report.
pub(crate) fn sender(bed: &TestBed, r: &Run) -> Result<PeerReport> {
    sender_with(bed, r, &[])
}

/// [`sender`] with `extra` arguments for `mpa-peer connect` (e.g. `--timestamps`).
pub(crate) fn sender_with(bed: &TestBed, r: &Run, extra: &[String]) -> Result<PeerReport> {
    let peer = sibling("mpa-peer")?;
    let count = (r.transfer.bytes / r.size as u64).max(1).to_string();
    let to = SocketAddr::new(bed.addr_b(false), PORT).to_string();
    let mut args = vec!["connect", "--to", &to, "--timeout", "60"];
    let secs = |d: std::time::Duration| d.as_secs_f64().to_string();
    let (duration, interval) = (r.transfer.duration.map(secs), r.transfer.interval.map(secs));
    match &duration {
        Some(d) => args.extend(["--duration", d]),
        None => args.extend(["--count", &count]),
    }
    if let Some(i) = &interval {
        args.extend(["--interval", i]);
    }
    let size = r.size.to_string();
    args.extend(["--size", &size]);
    if r.transfer.op == Op::Send {
        args.extend(["--op", "send"]);
    }
    if r.aligned() {
        args.push("--aligned");
    }
    if !r.framing.crc() {
        args.push("--no-crc");
    }
    if r.markers() {
        args.push("--markers");
    }
    if let Some(cc) = &r.transfer.sender_cc {
        args.extend(["--congestion", cc]);
    }
    args.extend(extra.iter().map(String::as_str));
    let pin =
        crate::bed::split::applies(bed, r.bed.split_cpus).then_some(crate::bed::split::SENDER_CPU);
    let out = crate::bed::split::command(bed, &bed.ns_a, &peer.to_string_lossy(), pin)
        .args(&args)
        .stderr(Stdio::inherit())
        .output()
        .context("run mpa-peer connect")?;
    let report: PeerReport = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("mpa-peer output {:?}", String::from_utf8_lossy(&out.stdout)))?;
    if !out.status.success() {
        bail!(
            "mpa-peer connect failed: {}",
            report.error.as_deref().unwrap_or("no reason given")
        );
    }
    Ok(report)
}

/// What one kernel-TCP Responder run measured.
pub(crate) struct KernelResult {
    /// The sender's report (several: summed, the longest transfer; see
    /// [`PeerReport::aggregate`]).
    pub(crate) sent: PeerReport,
    /// The Responder's report (several connections: summed).
    pub(crate) got: PeerReport,
    /// Every sender's and every connection's report.
    pub(crate) senders: Vec<PeerReport>,
    pub(crate) receivers: Vec<PeerReport>,
    /// CPU seconds: whole system during the transfer, the Responder process, the sender.
    pub(crate) cpu: CpuUse,
}

/// The blocking kernel-TCP Responder in ns b, same sender.
pub(crate) fn kernel_run(bed: &TestBed, r: &Run) -> Result<KernelResult> {
    let peer_bin = sibling("mpa-peer")?;
    let bind = SocketAddr::new(bed.addr_b(false), PORT).to_string();
    let connections = r.transfer.connections.max(1).to_string();
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
    if !r.framing.crc() {
        args.push("--no-crc");
    }
    if r.markers() {
        args.push("--markers");
    }
    let cpu0 = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_CHILDREN);
    let pin = crate::bed::split::applies(bed, r.bed.split_cpus)
        .then_some(crate::bed::split::RECEIVER_CPU);
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
        .map(serde_json::from_str::<PeerReport>)
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
        sent: PeerReport::aggregate(&senders),
        got: PeerReport::aggregate(&receivers),
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
pub(crate) struct PeerListen {
    child: std::process::Child,
}

impl PeerListen {
    /// Starts it and waits for its "listening on" line.
    pub(crate) fn start(bed: &TestBed, ns: &str, args: &[&str]) -> Result<PeerListen> {
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
    pub(crate) fn report(mut self, within: std::time::Duration) -> Result<PeerReport> {
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
        serde_json::from_str(line).with_context(|| format!("mpa-peer listen output {line:?}"))
    }
}

impl Drop for PeerListen {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `r.connections` senders (`mpa-peer connect`) at once in ns a; their reports in order.
pub(crate) fn senders(bed: &TestBed, r: &Run) -> Result<Vec<PeerReport>> {
    if r.transfer.connections <= 1 {
        return Ok(vec![sender(bed, r)?]);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..r.transfer.connections)
            .map(|_| s.spawn(|| sender(bed, r)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow!("sender thread panicked"))?)
            .collect()
    })
}

/// Whether the receivers' ULPDU digests are the senders' (as multisets: with several
/// connections any sender may have met any receiver); a missing digest matches none.
pub(crate) fn digests_match<S: UlpduDigest, R: UlpduDigest>(
    senders: &[S],
    receivers: &[R],
) -> bool {
    let (a, b) = (sorted_digests(senders), sorted_digests(receivers));
    !a.is_empty() && a.iter().all(Option::is_some) && a == b
}

fn sorted_digests(reports: &[impl UlpduDigest]) -> Vec<Option<&str>> {
    let mut d: Vec<Option<&str>> = reports.iter().map(UlpduDigest::ulpdu_digest).collect();
    d.sort_unstable();
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report as `mpa-peer connect` prints it (fields the bench does not read included).
    const CONNECT: &str = r#"{"peer":"10.0.0.2:7777","rev":1,"markers_rx":true,"markers_tx":true,"crc":true,"ulpdus":4,"ulpdu_bytes":16384,"ulpdu_digest":"0badcafe","error_code":null,"error":null,"mulpdu":1448,"seconds":0.5,"transfer_seconds":0.25,"congestion":"cubic"}"#;

    fn connect(digest: &str, ulpdus: u64, transfer_seconds: Option<f64>) -> PeerReport {
        PeerReport {
            ulpdus,
            ulpdu_bytes: ulpdus * 4096,
            ulpdu_digest: digest.into(),
            seconds: transfer_seconds.unwrap_or(1.0) + 0.1,
            transfer_seconds,
            ..PeerReport::default()
        }
    }

    #[test]
    fn reads_what_mpa_peer_prints() {
        let r: PeerReport = serde_json::from_str(CONNECT).unwrap();
        assert_eq!((r.ulpdus, r.ulpdu_bytes), (4, 16384));
        assert_eq!(r.ulpdu_digest, "0badcafe");
        assert_eq!((r.error, r.error_code), (None, None));
        assert_eq!(r.transfer_seconds, Some(0.25));
        assert_eq!(r.congestion.as_deref(), Some("cubic"));
        assert_eq!((r.writes, r.echoes), (None, None));
        // A listener's report has no transfer_seconds but its own counters.
        let l: PeerReport = serde_json::from_str(
            r#"{"peer":"p","ulpdus":1,"ulpdu_bytes":64,"ulpdu_digest":"1","error_code":2,"error":"CRC","seconds":1.5,"writes":1,"write_octets":50,"echoes":3}"#,
        )
        .unwrap();
        assert_eq!(l.transfer_seconds, None);
        assert_eq!(
            (l.writes, l.write_octets, l.echoes),
            (Some(1), Some(50), Some(3))
        );
        assert_eq!((l.error_code, l.error.as_deref()), (Some(2), Some("CRC")));
    }

    #[test]
    fn aggregate_sums_counters_and_takes_the_longest_time() {
        let mut a = connect("a", 2, Some(1.0));
        a.writes = Some(2);
        let mut b = connect("b", 3, Some(3.0));
        b.writes = Some(3);
        b.seconds = 0.5;
        let sum = PeerReport::aggregate(&[a.clone(), b]);
        assert_eq!((sum.ulpdus, sum.ulpdu_bytes), (5, 5 * 4096));
        assert_eq!(sum.writes, Some(5));
        assert_eq!(sum.transfer_seconds, Some(3.0));
        assert_eq!(sum.seconds, 1.1);
        assert_eq!(sum.ulpdu_digest, "a");
        assert_eq!(PeerReport::aggregate(std::slice::from_ref(&a)), a);
        assert_eq!(PeerReport::aggregate(&[]), PeerReport::default());
    }

    #[test]
    fn digests_match_as_multisets() {
        let s = [connect("a", 1, None), connect("b", 1, None)];
        let r = [connect("b", 1, None), connect("a", 1, None)];
        assert!(digests_match(&s, &r));
        assert!(!digests_match(&s, &r[..1]));
        assert!(!digests_match::<PeerReport, PeerReport>(&[], &[]));
        let other = [connect("a", 1, None), connect("c", 1, None)];
        assert!(!digests_match(&s, &other));
    }
}
