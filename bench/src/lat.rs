//! `lat`: one-way latency per message, the datapath against the blocking kernel-TCP
//! Responder, same bed and sender, alternating.
//!
//! The sender (`mpa-peer connect --timestamps --rate R`, ns a) starts every RDMA Write's
//! payload with the CLOCK_MONOTONIC time in ns (u64 LE) taken right before the message is
//! encoded and written; the namespaces share the host's clock. The receivers take
//! CLOCK_MONOTONIC again:
//! * datapath: the bench's consumer, when it holds a completion (`Consumer::next_completions`
//!   returned its batch) and has read the stamp from the mapped region at the completion's
//!   offset — so the datapath's number includes the completion ring in shared memory and
//!   the consumer's wake-up by the ring's eventfd (`--consumer-busy-poll`: it spins on the
//!   ring instead, `Consumer::set_busy_poll`);
//! * kernel: an in-process blocking `MpaStream` Responder in ns b, in `recv_with`'s callback,
//!   i.e. when the whole ULPDU has been read and its FPDU checked.
//!
//! Latency runs check counts, lengths, offsets and the ULPDU digest (which covers the
//! stamps), not the region against the pattern (the stamps overwrite its first 8 octets).

use crate::options::{bed_for, messages, Align, NicArgs, Op, Run, PD, PORT};
use crate::peer::sender_with;
use crate::progress::Progress;
use crate::report::{Document, Scenario};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use hdrhistogram::Histogram;
use mpa::endpoint::{EndpointConfig, MpaStream};
use mpa::startup::StartupPolicy;
use mpa::wire::ddp::TAGGED_HEADER_LEN;
use mpa::wire::fpdu::MAX_ULPDU;
use mpa_ctl_proto::consumer::Consumer;
use mpa_ctl_proto::region_ad::RegionAd;
use mpa_ctl_proto::CompletionKind;
use mpa_harness::datapath::{
    accept_and_hand_over, start_datapath, stats, temp_path, DatapathOptions, HandedOver, Responder,
};
use mpa_testbed::{run_in_netns, TestBed};
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `mpa-bench lat`'s options.
#[derive(Args, Clone, Debug)]
pub struct LatArgs {
    /// ULPDU sizes (DDP header included; at least 22, at most 64768).
    #[arg(long, value_delimiter = ',', default_values_t = [64usize, 1024, 4096, 16384])]
    pub sizes: Vec<usize>,
    /// Messages per size, side and round.
    #[arg(long, default_value_t = 20_000)]
    pub messages: u64,
    /// The sender's pacing, messages per second (0: unpaced; queues then build up).
    #[arg(long, default_value_t = 10_000)]
    pub rate: u64,
    /// Rounds; each runs every size on the kernel side, then on the datapath.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// MTU of the bed.
    #[arg(long, default_value_t = 1500)]
    pub mtu: u32,
    /// No markers, no CRC (default: markers + CRC, like `demo`).
    #[arg(long)]
    pub plain: bool,
    /// CRC but no markers.
    #[arg(long, conflicts_with = "plain")]
    pub no_markers: bool,
    /// Where the `.hgrm` percentile distributions go (one per side and size).
    #[arg(long, default_value = "bench/results/latest")]
    pub out: PathBuf,
    /// Print the one JSON document on stdout (the table goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// On real NICs: one-way latency needs one clock on both ends (CLOCK_MONOTONIC is per
    /// host), so the peer must be this host (e.g. another namespace or a NIC looped back);
    /// stamps from the future are counted as bad.
    #[command(flatten)]
    pub nic: NicArgs,
    /// The datapath side's consumer busy-polls its completion ring instead of sleeping on
    /// the ring's eventfd until the worker wakes it (the default): it then needs a core of
    /// its own, which a 2-core bed that also runs the sender, the worker and the kernel's
    /// veth work does not have (p50 at 64 B 525 µs busy vs 18 µs sleeping, README).
    #[arg(long)]
    pub consumer_busy_poll: bool,
    /// The datapath's workers keep polling this many µs after their last frame before they
    /// may sleep (`mpa-datapath --spin-us`; 0: sleep after 256 empty polls).
    #[arg(long, default_value_t = 0)]
    pub spin_us: u64,
    /// RDMA Write ping-pong instead (perftest `ib_write_lat` style, RTT/2): the kernel
    /// `mpa-peer listen --echo` answers both a kernel-TCP Initiator and the datapath's
    /// (bench/src/lat_pingpong.rs); `--messages` iterations, `--rate` unused.
    #[arg(long)]
    pub pingpong: bool,
}

impl LatArgs {
    /// The transfer of one size, as the other experiments describe it.
    pub fn run(&self, size: usize) -> Run {
        Run {
            bytes: self.messages.max(1) * size as u64,
            size,
            mtu: self.mtu,
            loss: 0,
            queues: 1,
            impair: None,
            plain: self.plain,
            no_markers: self.no_markers,
            op: Op::Write,
            region_bytes: 16 << 20,
            align: Align::Off,
            json: false,
            connections: 1,
            rcv_buf: None,
            ooo_ack_every: None,
            split_cpus: false,
            spin_us: 0,
            sender_cc: None,
        }
    }

    fn sender_args(&self) -> Vec<String> {
        vec![
            "--timestamps".into(),
            "--rate".into(),
            self.rate.to_string(),
        ]
    }
}

/// Octets of the send timestamp at the start of each payload.
pub const STAMP_LEN: usize = 8;

/// The send timestamp at the start of a payload (u64 LE), if it is long enough.
pub fn decode_stamp(payload: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(
        payload.get(..STAMP_LEN)?.try_into().ok()?,
    ))
}

/// CLOCK_MONOTONIC in nanoseconds, the sender's clock.
pub fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// The two receivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Kernel,
    Datapath,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Kernel => "kernel-tcp MpaStream",
            Side::Datapath => "mpa-datapath (AF_XDP)",
        }
    }

    /// For file names and JSON.
    pub fn key(self) -> &'static str {
        match self {
            Side::Kernel => "kernel",
            Side::Datapath => "datapath",
        }
    }
}

/// One-way latencies in ns, and the stamps that could not be used.
pub struct Samples {
    pub hist: Histogram<u64>,
    /// Missing, zero, in the future, or older than a minute.
    pub bad: u64,
}

impl Default for Samples {
    fn default() -> Self {
        Samples {
            // 1 ns .. 1 h, 3 significant digits.
            hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds"),
            bad: 0,
        }
    }
}

impl Samples {
    /// Records `now - ts` (ns).
    pub fn record(&mut self, ts: Option<u64>, now: u64) {
        match ts {
            Some(ts) if ts > 0 && ts <= now && now - ts < 60_000_000_000 => {
                self.hist.saturating_record((now - ts).max(1))
            }
            _ => self.bad += 1,
        }
    }

    pub fn add(&mut self, o: &Samples) {
        self.hist.add(&o.hist).expect("same bounds");
        self.bad += o.bad;
    }
}

/// One row of the table: a side and a size, all rounds.
pub struct Row {
    pub side: Side,
    pub bytes: usize,
    pub samples: Samples,
}

const QUANTILES: [(&str, f64); 4] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)];

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The perftest-style table (µs), then the ratio of the p50s per size.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:22} {:>6} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "receiver", "bytes", "samples", "min", "p50", "p90", "p99", "p99.9", "max"
    );
    for r in rows {
        let h = &r.samples.hist;
        let _ = write!(
            s,
            "{:22} {:>6} {:>8} {:>9.2}",
            r.side.name(),
            r.bytes,
            h.len(),
            us(h.min())
        );
        for (_, q) in QUANTILES {
            let _ = write!(s, " {:>9.2}", us(h.value_at_quantile(q)));
        }
        let _ = write!(s, " {:>9.2}", us(h.max()));
        if r.samples.bad > 0 {
            let _ = write!(s, "  ({} bad stamps)", r.samples.bad);
        }
        s.push('\n');
    }
    let _ = writeln!(s, "(one-way latency, µs)");
    for r in rows.iter().filter(|r| r.side == Side::Datapath) {
        let k = rows
            .iter()
            .find(|k| k.side == Side::Kernel && k.bytes == r.bytes);
        if let Some(k) = k.filter(|k| !k.samples.hist.is_empty() && !r.samples.hist.is_empty()) {
            let ratio = r.samples.hist.value_at_quantile(0.5) as f64
                / k.samples.hist.value_at_quantile(0.5).max(1) as f64;
            let _ = writeln!(s, "p50 datapath / kernel at {:>6} B: {ratio:.2}x", r.bytes);
        }
    }
    s
}

/// HdrHistogram's percentile distribution text format (`.hgrm`, as
/// `outputPercentileDistribution` writes it), values in µs.
pub fn hgrm(h: &Histogram<u64>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    if !h.is_empty() {
        for v in h.iter_quantiles(5) {
            let q = v.quantile_iterated_to();
            let value = us(h.highest_equivalent(v.value_iterated_to()));
            let total: u64 = h.count_between(0, v.value_iterated_to());
            if q < 1.0 {
                let _ = writeln!(
                    s,
                    "{value:12.3} {q:2.12} {total:10} {:14.2}",
                    1.0 / (1.0 - q)
                );
            } else {
                let _ = writeln!(s, "{value:12.3} {q:2.12} {total:10}");
            }
        }
    }
    let _ = writeln!(
        s,
        "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]",
        h.mean() / 1000.0,
        h.stdev() / 1000.0
    );
    let _ = writeln!(
        s,
        "#[Max     = {:12.3}, Total count    = {:12}]",
        us(h.max()),
        h.len()
    );
    let _ = writeln!(
        s,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        h.buckets(),
        // Not exposed by the crate: 2 * 10^sigfig rounded up to a power of two.
        (2 * 10u64.pow(u32::from(h.sigfig()))).next_power_of_two()
    );
    s
}

/// The JSON result of a row (README, "JSON").
pub fn row_json(r: &Row, rounds: u32) -> serde_json::Value {
    let h = &r.samples.hist;
    let mut v = serde_json::json!({
        "receiver": r.side.key(),
        "size": r.bytes,
        "rounds": rounds,
        "samples": h.len(),
        "bad_stamps": r.samples.bad,
        "min_us": us(h.min()),
        "max_us": us(h.max()),
        "mean_us": h.mean() / 1000.0,
    });
    for (name, q) in QUANTILES {
        let key = format!("{}_us", name.replace('.', ""));
        v[key] = serde_json::json!(us(h.value_at_quantile(q)));
    }
    v
}

impl LatArgs {
    /// The document's parameters.
    pub fn params_json(&self) -> serde_json::Value {
        self.params()
    }

    fn params(&self) -> serde_json::Value {
        serde_json::json!({
            "sizes": self.sizes, "messages": self.messages, "rate": self.rate,
            "rounds": self.rounds, "mtu": self.mtu,
            "consumer_busy_poll": self.consumer_busy_poll, "spin_us": self.spin_us,
            "framing": match (self.plain, self.no_markers) {
                (true, _) => "plain",
                (false, true) => "crc",
                (false, false) => "markers+crc",
            },
        })
    }
}

/// Runs `lat`: every size on both sides, `rounds` times; writes the `.hgrm` files; returns
/// the document and the rows.
pub fn lat(a: &LatArgs) -> Result<(Document, Vec<Row>)> {
    if a.sizes.is_empty() || a.rounds == 0 {
        bail!("--sizes and --rounds must not be empty / 0");
    }
    for &size in &a.sizes {
        if !(TAGGED_HEADER_LEN + STAMP_LEN..=MAX_ULPDU).contains(&size) {
            bail!(
                "--sizes {size}: a ULPDU must hold the {TAGGED_HEADER_LEN}-octet header and the \
                 {STAMP_LEN}-octet stamp, and be at most {MAX_ULPDU} octets"
            );
        }
    }
    let bed = bed_for(&a.run(a.sizes[0]), &a.nic)?;
    let extra = a.sender_args();
    let mut rows: Vec<Row> = Vec::new();
    for &size in &a.sizes {
        for side in [Side::Kernel, Side::Datapath] {
            rows.push(Row {
                side,
                bytes: size,
                samples: Samples::default(),
            });
        }
    }
    let progress = Progress::new("lat", u64::from(a.rounds) * a.sizes.len() as u64 * 2);
    for round in 0..a.rounds {
        for (i, &size) in a.sizes.iter().enumerate() {
            let r = a.run(size);
            let at = format!("round {} of {}", round + 1, a.rounds);
            progress.running(format!("{at}: kernel, {size} B"));
            let k = kernel_lat(&bed, &r, &extra).with_context(|| format!("kernel, {size} B"))?;
            progress.done(format!(
                "kernel {size} B: p50 {:.1} µs",
                us(k.hist.value_at_quantile(0.5))
            ));
            rows[2 * i].samples.add(&k);
            progress.running(format!("{at}: datapath, {size} B"));
            let d = datapath_lat(&bed, &r, &extra, a.consumer_busy_poll, a.spin_us)
                .with_context(|| format!("datapath, {size} B"))?;
            progress.done(format!(
                "datapath {size} B: p50 {:.1} µs",
                us(d.hist.value_at_quantile(0.5))
            ));
            rows[2 * i + 1].samples.add(&d);
            progress.println(format!(
                "round {}, {size} B: p50 kernel {:.1} µs, datapath {:.1} µs",
                round + 1,
                us(k.hist.value_at_quantile(0.5)),
                us(d.hist.value_at_quantile(0.5))
            ));
        }
    }
    drop(progress);
    std::fs::create_dir_all(&a.out).with_context(|| format!("create {}", a.out.display()))?;
    for r in &rows {
        let path = a.out.join(hgrm_name(r.side, r.bytes, a.rate));
        std::fs::write(&path, hgrm(&r.samples.hist))
            .with_context(|| format!("write {}", path.display()))?;
    }
    let mut doc = Document::new(Scenario::Lat, a.params());
    doc.results = rows.iter().map(|r| row_json(r, a.rounds)).collect();
    Ok((doc, rows))
}

/// The `.hgrm` file of a side and size (`-unpaced` when the sender was not paced).
pub fn hgrm_name(side: Side, bytes: usize, rate: u64) -> String {
    let pace = if rate == 0 { "-unpaced" } else { "" };
    format!("lat-{}-{bytes}{pace}.hgrm", side.key())
}

/// `mpa-bench lat`: the table (stdout, or stderr with `--json`) and the document with `--json`.
pub fn run_cli(a: &LatArgs) -> Result<()> {
    if a.pingpong {
        let (doc, rows) = crate::lat_pingpong::pingpong(a)?;
        let text = format!(
            "bed: mtu {}; {}; RDMA Write ping-pong against the kernel mpa-peer listen --echo, {} \
             iterations per size, side and round (after 100 warm-up), {} rounds\n{}",
            a.mtu,
            match (a.plain, a.no_markers) {
                (true, _) => "no markers, no CRC",
                (false, true) => "CRC, no markers",
                (false, false) => "markers + CRC",
            },
            a.messages,
            a.rounds,
            crate::lat_pingpong::pingpong_table(&rows)
        );
        if a.json {
            eprint!("{text}");
            crate::report::print(&doc);
        } else {
            print!("{text}");
        }
        return Ok(());
    }
    let (doc, rows) = lat(a)?;
    let mut text = format!(
        "bed: mtu {}; {}; {} messages per size, side and round, {} rounds, sender paced at {}; RDMA Writes into a 16 MiB region (datapath) / digested (kernel)\n",
        a.mtu,
        match (a.plain, a.no_markers) {
            (true, _) => "no markers, no CRC",
            (false, true) => "CRC, no markers",
            (false, false) => "markers + CRC",
        },
        a.messages,
        a.rounds,
        if a.rate == 0 {
            "no rate (unpaced)".to_string()
        } else {
            format!("{} msg/s", a.rate)
        }
    );
    text += &table(&rows);
    text += &format!(
        "hgrm files: {}/lat-{{kernel,datapath}}-<bytes>{}.hgrm\n",
        a.out.display(),
        if a.rate == 0 { "-unpaced" } else { "" }
    );
    if a.json {
        eprint!("{text}");
        crate::report::print(&doc);
    } else {
        print!("{text}");
    }
    Ok(())
}

/// Accepts one connection on `listener` within `wait`.
fn accept_within(listener: &TcpListener, wait: Duration) -> Result<std::net::TcpStream> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + wait;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The kernel side: an in-process blocking `MpaStream` Responder in ns b.
fn kernel_lat(bed: &TestBed, r: &Run, extra: &[String]) -> Result<Samples> {
    let addr = SocketAddr::new(bed.addr_b(false), PORT);
    let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr))??;
    let cfg = EndpointConfig {
        policy: StartupPolicy {
            revision: 2,
            accept_rev2: true,
            markers_required: r.markers(),
            crc_suppressed_by_admin: r.plain,
            startup_timeout: Duration::from_secs(20),
            ..StartupPolicy::default()
        },
        private_data: Vec::new(),
        emss: 1448,
    };
    let payload = (r.size - TAGGED_HEADER_LEN) as u64;
    let responder = std::thread::spawn(move || -> Result<(Samples, u64)> {
        let sock = accept_within(&listener, Duration::from_secs(30))?;
        sock.set_nodelay(true)?;
        let mut s = MpaStream::accept(sock, &cfg)?;
        let mut smp = Samples::default();
        let mut wrong = 0u64;
        while s
            .recv_with(Some(Duration::from_secs(60)), |u| {
                let mut head = [0u8; TAGGED_HEADER_LEN + STAMP_LEN];
                let k = u.copy_prefix(&mut head);
                // The whole ULPDU has been read (and its FPDU checked): the receive point.
                let now = monotonic_ns();
                smp.record(decode_stamp(&head[TAGGED_HEADER_LEN.min(k)..k]), now);
                if u.len() as u64 != payload + TAGGED_HEADER_LEN as u64 {
                    wrong += 1;
                }
            })?
            .is_some()
        {}
        Ok((smp, wrong))
    });
    let sent = sender_with(bed, r, extra)?;
    let (smp, wrong) = responder
        .join()
        .map_err(|_| anyhow!("kernel Responder panicked"))??;
    let n = messages(r);
    if sent["ulpdus"].as_u64() != Some(n) || smp.hist.len() + smp.bad != n || wrong > 0 {
        bail!(
            "kernel side: sent {} ULPDUs, {} stamped ones received ({} bad), {wrong} of the wrong length; {n} expected",
            sent["ulpdus"],
            smp.hist.len(),
            smp.bad
        );
    }
    Ok(smp)
}

/// The datapath side: the datapath and hand-over listener in ns b, the consumer reading the
/// stamps from the region at each completion's offset.
fn datapath_lat(
    bed: &TestBed,
    r: &Run,
    extra: &[String],
    busy_poll: bool,
    spin_us: u64,
) -> Result<Samples> {
    let socket = temp_path("lat.sock");
    let opts = DatapathOptions {
        spin: Duration::from_micros(spin_us),
        ..DatapathOptions::default()
    };
    let dp = start_datapath(bed, &socket, &opts)?;
    let mut consumer = Consumer::connect(&socket, Duration::from_secs(20))?;
    let region = consumer.create_region(r.region_bytes, PD, true, false)?;
    consumer.subscribe(PD)?;
    // Sleeping on the eventfd, or spinning on the ring with --consumer-busy-poll.
    consumer.set_busy_poll(busy_poll);
    let ad = RegionAd {
        writes: true,
        sends: false,
        stag: region.info().stag,
        len: r.region_bytes,
        base_to: 0,
        recv_buf_size: 0,
    };
    let payload = (r.size - TAGGED_HEADER_LEN) as u64;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    // Owns the consumer and the mapping (not shared: the mapping is Send, not Sync).
    let collector = std::thread::spawn(move || -> Result<(Samples, u64)> {
        let mut smp = Samples::default();
        let mut wrong = 0u64;
        let mut quiet_since_stop = 0;
        loop {
            let deadline = Instant::now() + Duration::from_millis(100);
            match consumer.next_completions(deadline)? {
                Some(batch) => {
                    for c in batch {
                        let mut ts = [0u8; STAMP_LEN];
                        let ok = region.read(c.offset, &mut ts);
                        // The consumer holds the completion and its stamp: the receive point.
                        let now = monotonic_ns();
                        smp.record(ok.then(|| u64::from_le_bytes(ts)), now);
                        if c.kind != CompletionKind::WritePlaced || c.len != payload {
                            wrong += 1;
                        }
                    }
                }
                None if flag.load(Ordering::Relaxed) => {
                    quiet_since_stop += 1;
                    if quiet_since_stop >= 3 {
                        return Ok((smp, wrong));
                    }
                }
                None => {}
            }
        }
    });
    let markers = r.markers();
    let responder = Responder {
        reply_private_data: ad.emit().to_vec(),
        placement: mpa_control::Placement {
            pd: Some(PD),
            aligned_sender: false,
        },
        wait: Duration::from_secs(120),
        ..Responder::framing(markers, !r.plain)
    };
    let addr = SocketAddr::new(bed.addr_b(false), PORT);
    let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr))??;
    let (ns_b, sock_path) = (bed.ns_b.clone(), socket.clone());
    let setup =
        std::thread::spawn(move || accept_and_hand_over(&ns_b, &sock_path, &listener, &responder));
    let peer = sender_with(bed, r, extra)?;
    let HandedOver {
        flow_id,
        mut dpc,
        frozen,
        ..
    } = setup
        .join()
        .map_err(|_| anyhow!("setup thread panicked"))??;
    let gone = dpc.next_notification()?;
    drop(frozen);
    let stats = stats(&mut dpc)?;
    let report = stats
        .ended_flow(flow_id)
        .cloned()
        .ok_or_else(|| anyhow!("flow {flow_id} missing from stats ({gone:?})"))?;
    stop.store(true, Ordering::Relaxed);
    let (smp, wrong) = collector
        .join()
        .map_err(|_| anyhow!("completion reader panicked"))??;
    dp.stop();
    if let Some(e) = &report.ended {
        if e.terminate.is_some() || e.mpa_error.is_some() {
            bail!("the flow ended with an error: {e:?}");
        }
    }
    let flow = serde_json::to_value(&report)?;
    if flow["ulpdu_digest"] != peer["ulpdu_digest"] {
        bail!(
            "digests differ: sent {} received {}",
            peer["ulpdu_digest"],
            flow["ulpdu_digest"]
        );
    }
    let n = messages(r);
    if smp.hist.len() + smp.bad != n || wrong > 0 {
        bail!(
            "datapath side: {} completions with stamps ({} bad), {wrong} wrong; {n} expected",
            smp.hist.len(),
            smp.bad
        );
    }
    Ok(smp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_codec() {
        let ns = 0x0102_0304_0506_0708u64;
        let mut p = ns.to_le_bytes().to_vec();
        p.extend_from_slice(b"pattern");
        assert_eq!(decode_stamp(&p), Some(ns));
        assert_eq!(decode_stamp(&p[..7]), None);
        let (a, b) = (monotonic_ns(), monotonic_ns());
        assert!(a > 0 && b >= a);
    }

    #[test]
    fn samples_reject_implausible_stamps() {
        let mut s = Samples::default();
        s.record(Some(1_000), 3_000);
        s.record(None, 3_000);
        s.record(Some(0), 3_000);
        s.record(Some(5_000), 3_000);
        s.record(Some(1), 61_000_000_000);
        assert_eq!((s.hist.len(), s.bad), (1, 4));
        assert_eq!(s.hist.value_at_quantile(0.5), 2_000);
    }

    fn rows() -> Vec<Row> {
        let mut k = Samples::default();
        let mut d = Samples::default();
        for i in 1..=1000u64 {
            k.record(Some(1), 1 + i * 10); // 10 ns .. 10 µs
            d.record(Some(1), 1 + i * 1000); // 1 µs .. 1 ms
        }
        vec![
            Row {
                side: Side::Kernel,
                bytes: 64,
                samples: k,
            },
            Row {
                side: Side::Datapath,
                bytes: 64,
                samples: d,
            },
        ]
    }

    #[test]
    fn table_has_percentiles_and_ratio() {
        let t = table(&rows());
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0]
            .split_whitespace()
            .eq(["receiver", "bytes", "samples", "min", "p50", "p90", "p99", "p99.9", "max"]));
        let k: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(&k[..2], ["kernel-tcp", "MpaStream"]);
        // bytes, samples, min, p50, p90, p99, p99.9, max in µs.
        // Values are the histogram's (3 significant digits: equivalent ranges of 8 ns here).
        assert_eq!(
            &k[2..],
            ["64", "1000", "0.01", "5.00", "9.01", "9.90", "9.99", "10.01"]
        );
        let d: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(&d[..4], ["mpa-datapath", "(AF_XDP)", "64", "1000"]);
        assert_eq!(d[5], "500.22"); // 3 significant digits: 500 µs reads as its range's top
        assert!(
            t.contains("p50 datapath / kernel at     64 B: 99.98x"),
            "{t}"
        );
    }

    #[test]
    fn hgrm_format() {
        let r = rows();
        let text = hgrm(&r[1].samples.hist);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].split_whitespace().eq([
            "Value",
            "Percentile",
            "TotalCount",
            "1/(1-Percentile)"
        ]));
        assert_eq!(lines[1], "");
        let first: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(first, ["1.000", "0.000000000000", "1", "1.00"]);
        // The last data line is the maximum at percentile 1 without the last column.
        let last = lines.iter().rev().find(|l| !l.starts_with('#')).unwrap();
        let last: Vec<&str> = last.split_whitespace().collect();
        assert_eq!(last.len(), 3);
        assert_eq!(&last[1..], ["1.000000000000", "1000"]);
        assert!(text.contains("#[Max     ="));
        assert!(text.contains("Total count    =         1000]"));
        assert!(text.contains("SubBuckets     =         2048]"), "{text}");
    }

    #[test]
    fn rows_make_a_documented_lat_document() {
        let r = rows();
        let mut doc = Document::new(Scenario::Lat, serde_json::json!({"sizes": [64]}));
        doc.results = r.iter().map(|r| row_json(r, 3)).collect();
        let v = doc.to_value();
        crate::report::check_shape(&v).unwrap();
        assert_eq!(v["results"][0]["receiver"], "kernel");
        assert_eq!(v["results"][1]["receiver"], "datapath");
        assert_eq!(v["results"][1]["samples"], 1000);
        assert_eq!(v["results"][1]["p50_us"], 500.223);
        assert!(v["results"][1]["p999_us"].as_f64().unwrap() > 998.0);
        assert_eq!(
            hgrm_name(Side::Datapath, 64, 0),
            "lat-datapath-64-unpaced.hgrm"
        );
        assert_eq!(
            hgrm_name(Side::Kernel, 4096, 10_000),
            "lat-kernel-4096.hgrm"
        );
    }
}
