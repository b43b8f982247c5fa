//! `mpa-bench`: whole experiments on a private namespace test bed.
//!
//! * `demo`: the datapath and the hand-over listener in ns b, `mpa-peer connect` in ns a;
//!   prints goodput, FPDU counts, errors and the digest check, last line `demo: OK …` or
//!   `demo: FAILED …`.
//! * `compare`: the same sender against the datapath and against the blocking kernel-TCP
//!   Responder (`mpa-peer listen`), same bed, same run.
#![forbid(unsafe_code)]

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use mpa::startup::StartupPolicy;
use mpa::wire::ddp::{self, DdpRepr, RdmapOpcode};
use mpa_bpf::AttachMode;
use mpa_control::datapath_client::DatapathClient;
use mpa_control::responder::{respond_and_hand_over, Outcome};
use mpa_ctl_proto::consumer::{Consumer, MappedRegion};
use mpa_ctl_proto::pattern::PatternTable;
use mpa_ctl_proto::region_ad::{self, RegionAd};
use mpa_ctl_proto::{Completion, CompletionKind, Message, PostTarget};
use mpa_datapath::receiver::MAX_POSTED;
use mpa_datapath::server::{Datapath, DatapathConfig};
use mpa_datapath::tcp::TcpConfig;
use mpa_datapath::xsk::{BindMode, XskConfig};
use mpa_testbed::{run_in_netns, BedConfig, TestBed};
use serde_json::Value;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "mpa-bench",
    version,
    about = "mpa-xdp experiments on a namespace test bed"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// One transfer through the datapath, checked byte for byte.
    Demo(Run),
    /// Goodput and CPU: datapath vs the blocking kernel-TCP Responder, same bed and sender.
    Compare(Run),
    /// Many connections at once through `mpa-control serve`: hand-over rate, all carry data.
    Scale(Scale),
}

#[derive(Args, Clone)]
struct Run {
    /// Octets to send.
    #[arg(long, default_value_t = 256 << 20)]
    bytes: u64,
    /// ULPDU size.
    #[arg(long, default_value_t = 4096)]
    size: usize,
    /// MTU of the bed (≤ 3506 with XDP on veth).
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// Loss in the bridge namespace, percent (0: direct veth pair).
    #[arg(long, default_value_t = 0)]
    loss: u8,
    /// RX queues.
    #[arg(long, default_value_t = 1)]
    queues: u32,
    /// Markers and CRC both ways (the default); --plain turns both off.
    #[arg(long)]
    plain: bool,
    /// CRC but no markers; with an aligned sender the datapath then places out-of-order
    /// segments whose first FPDU verifies by CRC (the listener's `aligned_sender`).
    #[arg(long, conflicts_with = "plain")]
    no_markers: bool,
    /// What the sender does: RDMA Writes into a registered region (checked byte for byte),
    /// Sends into posted buffers (checked likewise), or `count`: no placement (payloads only
    /// counted and digested, the data path of issue 3).
    #[arg(long, value_enum, default_value = "write")]
    op: Op,
    /// Region size for `--op write` (writes wrap around in whole slots).
    #[arg(long, default_value_t = 16 << 20)]
    region_bytes: u64,
    /// Whether the sender aligns FPDUs with TCP segments (RFC 5044 §5.1; what lets segments
    /// that arrive out of order be placed on their own). `auto`: when there is loss. Aligned
    /// sending cuts messages so that FPDUs fill every TCP segment exactly.
    #[arg(long, value_enum, default_value = "auto")]
    align: Align,
    /// Print one JSON line with every measured value (`result: {...}`).
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Align {
    Auto,
    On,
    Off,
}

impl Run {
    fn markers(&self) -> bool {
        !self.plain && !self.no_markers
    }

    fn aligned(&self) -> bool {
        match self.align {
            Align::Auto => self.loss > 0,
            Align::On => true,
            Align::Off => false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Op {
    Write,
    Send,
    Count,
}

/// Protection domain of the bench's connection and region.
const PD: u32 = 1;

const PORT: u16 = 7777;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Demo(r) => match demo(&r) {
            Ok(line) => {
                println!("demo: OK {line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                println!("demo: FAILED {e:#}");
                ExitCode::FAILURE
            }
        },
        Cmd::Scale(sc) => match scale(&sc) {
            Ok(line) => {
                println!("scale: OK {line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                println!("scale: FAILED {e:#}");
                ExitCode::FAILURE
            }
        },
        Cmd::Compare(r) => match compare(&r) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mpa-bench: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}

fn bed(r: &Run) -> Result<TestBed> {
    Ok(TestBed::up(BedConfig {
        bridge: r.loss > 0,
        loss_percent: r.loss,
        loss_port: PORT,
        mtu: r.mtu,
        queues: r.queues,
    })?)
}

/// The sibling binary `name` (built with this one by `cargo build --workspace`).
fn sibling(name: &str) -> Result<PathBuf> {
    let me = std::env::current_exe()?;
    let p = me.with_file_name(name);
    if !p.exists() {
        bail!(
            "{} not found: build the workspace first (cargo build --release --workspace)",
            p.display()
        );
    }
    Ok(p)
}

/// CPU seconds (user + system) used so far by this process / by waited-for children.
fn cpu_seconds(who: nix::sys::resource::UsageWho) -> f64 {
    nix::sys::resource::getrusage(who)
        .map(|u| {
            let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or(0.0)
}

/// Runs `mpa-peer connect` in ns a; returns its JSON report.
fn sender(bed: &TestBed, r: &Run) -> Result<Value> {
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
    let out = bed
        .command(&bed.ns_a, &peer.to_string_lossy())
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

/// What one datapath run measured.
struct DpResult {
    peer: Value,
    flow: Value,
    cpu: f64,
    xdp: Value,
    /// Placement check: (messages completed, region octets compared), when placing.
    placement: Option<(u64, u64)>,
}

/// The consumer side of a placing run: the region, what the sender will do with it, and a
/// thread that reads completions as they come (a consumer must keep up).
struct Placement {
    collector: std::thread::JoinHandle<Result<Vec<Completion>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    region: MappedRegion,
    ad: RegionAd,
    op: Op,
}

impl Placement {
    /// Creates the region (and posts receive buffers for Sends) before the connection.
    fn prepare(socket: &std::path::Path, r: &Run) -> Result<Placement> {
        let mut consumer = Consumer::connect(socket, Duration::from_secs(20))?;
        let count = messages(r);
        let (len, recv) = match r.op {
            Op::Write => (r.region_bytes, 0u32),
            Op::Send => {
                let p = r.size.saturating_sub(ddp::UNTAGGED_HEADER_LEN).max(1) as u32;
                if count > MAX_POSTED as u64 {
                    bail!("--op send posts one buffer per message: at most {MAX_POSTED} messages, not {count} (raise --size or lower --bytes)");
                }
                (u64::from(p) * count, p)
            }
            Op::Count => bail!("no placement with --op count"),
        };
        let region = consumer.create_region(len, PD, true, false)?;
        let stag = region.info().stag;
        if r.op == Op::Send {
            consumer.post_recv(PostTarget::Pd(PD), stag, 0, recv, count as u32)?;
        }
        consumer.subscribe(PD)?;
        let ad = RegionAd {
            writes: true,
            sends: recv > 0,
            stag,
            len,
            base_to: 0,
            recv_buf_size: recv,
        };
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let collector = std::thread::spawn(move || -> Result<Vec<Completion>> {
            let mut all = Vec::new();
            let mut quiet_since_stop = 0;
            loop {
                let deadline = Instant::now() + Duration::from_millis(100);
                match consumer.next_completions(deadline)? {
                    Some(b) => all.extend(b),
                    None if flag.load(std::sync::atomic::Ordering::Relaxed) => {
                        quiet_since_stop += 1;
                        if quiet_since_stop >= 5 {
                            return Ok(all);
                        }
                    }
                    None => {}
                }
            }
        });
        Ok(Placement {
            collector,
            stop,
            region,
            ad,
            op: r.op,
        })
    }

    /// After the flow ended: every message completed, in order, where it belongs, and the
    /// region holds exactly what the sender wrote. Returns (messages, octets compared).
    fn verify(self, r: &Run) -> Result<(u64, u64)> {
        let count = messages(r);
        let payload = match self.op {
            Op::Write => r.size - ddp::TAGGED_HEADER_LEN,
            _ => r.size - ddp::UNTAGGED_HEADER_LEN,
        } as u64;
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let all = self
            .collector
            .join()
            .map_err(|_| anyhow!("completion reader panicked"))??;
        if all.len() as u64 != count {
            bail!("{} completions for {count} messages", all.len());
        }
        let mut n = 0u64;
        {
            for c in all {
                let want = match self.op {
                    Op::Write => (
                        CompletionKind::WritePlaced,
                        region_ad::write_to(&self.ad, n, payload).unwrap_or(u64::MAX),
                    ),
                    _ => (
                        CompletionKind::SendArrived,
                        n * u64::from(self.ad.recv_buf_size),
                    ),
                };
                if (c.kind, c.offset, c.len) != (want.0, want.1, payload) {
                    bail!("completion {n} is {c:?}, expected {want:?} of {payload} octets");
                }
                n += 1;
            }
        }
        let got = self.region.to_vec();
        let mut want = vec![0u8; got.len()];
        let table = PatternTable::new(payload as usize);
        for m in 0..count {
            let off = match self.op {
                Op::Write => region_ad::write_to(&self.ad, m, payload).unwrap_or(0),
                _ => m * u64::from(self.ad.recv_buf_size),
            } as usize;
            want[off..off + payload as usize].copy_from_slice(table.payload(m, payload as usize));
        }
        if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
            bail!(
                "region differs from what the peer wrote at offset {i}: {:#04x} instead of {:#04x}",
                got[i],
                want[i]
            );
        }
        Ok((n, got.len() as u64))
    }
}

fn messages(r: &Run) -> u64 {
    (r.bytes / r.size as u64).max(1)
}

/// The datapath in ns b as every experiment runs it (driver XDP, AF_XDP copy mode, checksums
/// verified); `digest`: keep a ULPDU digest per flow.
fn start_datapath(
    bed: &TestBed,
    socket: &std::path::Path,
    queues: u32,
    digest: bool,
) -> Result<Datapath> {
    let cfg = DatapathConfig {
        iface: bed.if_b.clone(),
        queues,
        xdp_mode: AttachMode::Driver,
        xsk: XskConfig {
            bind_mode: BindMode::Copy,
            ..XskConfig::default()
        },
        socket: socket.to_path_buf(),
        digest,
        tcp: TcpConfig::default(),
        verify_checksums: true,
        pin_cpus: false,
        max_region_bytes: mpa_datapath::server::DEFAULT_MAX_REGION_BYTES,
    };
    Ok(run_in_netns(&bed.ns_b, move || Datapath::start(cfg))??)
}

fn datapath_run(bed: &TestBed, r: &Run) -> Result<DpResult> {
    let socket = std::env::temp_dir().join(format!("mpa-bench-{}.sock", std::process::id()));
    let dp = start_datapath(bed, &socket, r.queues, true)?;
    let placement = match r.op {
        Op::Count => None,
        _ => Some(Placement::prepare(&socket, r)?),
    };
    let reply_pd = placement
        .as_ref()
        .map(|p| p.ad.emit().to_vec())
        .unwrap_or_default();
    let pd = placement.as_ref().map(|_| PD);
    let addr = SocketAddr::new(bed.addr_b(false), PORT);
    let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr))??;
    let markers = r.markers();
    let crc = !r.plain;
    let aligned_sender = r.aligned() && !markers && crc;
    let sock_path = socket.clone();
    let ns_b = bed.ns_b.clone();
    // The hand-over listener: one connection.
    let setup = std::thread::spawn(move || -> Result<(u64, DatapathClient, Outcome)> {
        let (sock, _) = listener.accept()?;
        let mut dpc = DatapathClient::connect(&sock_path, Duration::from_secs(120))?;
        let policy = StartupPolicy {
            markers_required: markers,
            crc_suppressed_by_admin: !crc,
            ..StartupPolicy::default()
        };
        let (o, dpc) = run_in_netns(&ns_b, move || {
            let placement = mpa_control::Placement { pd, aligned_sender };
            let o = respond_and_hand_over(sock, policy, reply_pd, placement, &mut dpc);
            (o, dpc)
        })?;
        let o = o?;
        let id = match &o {
            Outcome::HandedOver { flow_id, .. } => *flow_id,
            Outcome::Rejected { reason } => bail!("rejected: {}", String::from_utf8_lossy(reason)),
        };
        Ok((id, dpc, o))
    });
    let cpu0 = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_SELF);
    let peer = sender(bed, r)?;
    let (flow_id, mut dpc, outcome) = setup
        .join()
        .map_err(|_| anyhow!("setup thread panicked"))??;
    let gone = dpc.next_notification()?;
    let cpu = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_SELF) - cpu0;
    if std::env::var_os("MPA_BENCH_THREADS").is_some() {
        print_thread_cpu();
    }
    drop(outcome);
    let Message::Stats { stats, .. } = dpc.request(|id| Message::GetStats { id })? else {
        bail!("no stats")
    };
    let mut flow = stats["ended_flows"]
        .as_array()
        .and_then(|a| a.iter().find(|f| f["flow_id"] == flow_id).cloned())
        .ok_or_else(|| anyhow!("flow {flow_id} missing from stats ({gone:?})"))?;
    // The workers' own CPU (one queue: the flow's worker), apart from the control thread and
    // the consumer that run in this process too.
    let worker_cpu: f64 = stats["queues"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|q| q["cpu_seconds"].as_f64())
        .sum();
    flow["worker_cpu_seconds"] = serde_json::json!(worker_cpu);
    let placement = match placement {
        Some(p) if flow["ended"]["terminate"].is_null() && flow["ended"]["mpa_error"].is_null() => {
            Some(p.verify(r)?)
        }
        Some(_) => bail!("the flow ended with an error: {}", flow["ended"]),
        None => None,
    };
    dp.stop();
    Ok(DpResult {
        peer,
        flow,
        cpu,
        xdp: stats["xdp"].clone(),
        placement,
    })
}

/// CPU seconds of each live thread of this process, by name (MPA_BENCH_THREADS=1): where a
/// run's CPU went.
fn print_thread_cpu() {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    let tick = 100.0; // USER_HZ
    let mut rows: Vec<(String, f64)> = dir
        .filter_map(|e| {
            let p = e.ok()?.path();
            let name = std::fs::read_to_string(p.join("comm"))
                .ok()?
                .trim()
                .to_string();
            let stat = std::fs::read_to_string(p.join("stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let t = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
            Some((name, t / tick))
        })
        .collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (name, secs) in rows.iter().filter(|r| r.1 > 0.0) {
        println!("thread {name:20} {secs:.2} s");
    }
}

fn gbit(octets: f64, seconds: f64) -> f64 {
    octets * 8.0 / seconds / 1e9
}

fn demo(r: &Run) -> Result<String> {
    let bed = bed(r)?;
    let t0 = Instant::now();
    let d = datapath_run(&bed, r)?;
    let secs = d.peer["seconds"]
        .as_f64()
        .unwrap_or(t0.elapsed().as_secs_f64());
    let octets = d.flow["ulpdu_octets"].as_f64().unwrap_or(0.0);
    let digest_ok = d.flow["ulpdu_digest"] == d.peer["ulpdu_digest"];
    println!("sender      : {}", d.peer);
    println!("datapath    : {}", d.flow);
    println!("xdp         : {}", d.xdp);
    println!(
        "fpdus={} ulpdu_octets={} crc_errors={} marker_errors={} out_of_order={} sack_blocks={} digest_match={}",
        d.flow["fpdus"], d.flow["ulpdu_octets"], d.flow["crc_errors"], d.flow["marker_errors"],
        d.flow["out_of_order_segments"], d.flow["sack_blocks_sent"], digest_ok
    );
    if !digest_ok {
        bail!(
            "digests differ: sent {} received {}",
            d.peer["ulpdu_digest"],
            d.flow["ulpdu_digest"]
        );
    }
    if let Some(e) = d.flow["ended"]["mpa_error"].as_u64() {
        bail!("flow ended with MPA error {e}");
    }
    let dropped = if r.loss > 0 { bed.dropped()? } else { 0 };
    if r.loss > 0 {
        println!("bridge dropped {dropped} frames");
    }
    println!(
        "datapath CPU: {:.2} s for {:.0} MiB (workers {:.2} s)",
        d.cpu,
        octets / (1 << 20) as f64,
        d.flow["worker_cpu_seconds"].as_f64().unwrap_or(0.0)
    );
    let g = gbit(octets, secs);
    let f = &d.flow;
    let n = |k: &str| f[k].as_u64().unwrap_or(0);
    let (direct, store) = (n("placed_direct"), n("placed_from_store"));
    // Share of the FPDUs that arrived out of order (placed ahead or from the store) that were
    // placed directly.
    let direct_pct = if direct + store > 0 {
        Some(100.0 * direct as f64 / (direct + store) as f64)
    } else {
        None
    };
    if let Some((msgs, region)) = d.placement {
        println!(
            "placement   : {msgs} messages completed in order; region of {region} octets equals what the peer wrote; placed_direct={direct} placed_from_store={store} placed_in_order={} located_rejected={} store_high_water={}",
            n("placed_in_order"), n("located_rejected"), n("store_high_water")
        );
    }
    if r.json {
        let v = serde_json::json!({
            "gbit_per_s": g,
            "seconds": secs,
            "ulpdu_octets": octets,
            "cpu_seconds": d.cpu,
            "op": format!("{:?}", r.op).to_lowercase(),
            "loss_percent": r.loss,
            "bridge_dropped": dropped,
            "placed_direct": direct,
            "placed_from_store": store,
            "placed_direct_percent": direct_pct,
            "placement_checked": d.placement.map(|(m, o)| serde_json::json!({"messages": m, "region_octets": o})),
            "flow": d.flow,
        });
        println!("result: {v}");
    }
    Ok(match (d.placement, direct_pct) {
        (Some(_), Some(p)) => format!("{g:.2} Gbit/s placed_direct={p:.1}%"),
        (Some(_), None) => format!("{g:.2} Gbit/s placed_direct=n/a (nothing out of order)"),
        (None, _) => format!("{g:.2} Gbit/s"),
    })
}

/// The blocking kernel-TCP Responder in ns b, same sender.
fn kernel_run(bed: &TestBed, r: &Run) -> Result<(Value, Value, f64)> {
    let peer_bin = sibling("mpa-peer")?;
    let bind = SocketAddr::new(bed.addr_b(false), PORT).to_string();
    let mut args = vec![
        "listen",
        "--bind",
        &bind,
        "--connections",
        "1",
        "--timeout",
        "60",
    ];
    if r.plain {
        args.push("--no-crc");
    }
    if r.markers() {
        args.push("--markers");
    }
    let cpu0 = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_CHILDREN);
    let mut child = bed
        .command(&bed.ns_b, &peer_bin.to_string_lossy())
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    wait_listening(&mut child)?;
    let sent = sender(bed, r)?;
    let out = child.wait_with_output()?;
    let cpu = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_CHILDREN) - cpu0;
    let got: Value = serde_json::from_slice(&out.stdout)?;
    Ok((sent, got, cpu))
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

fn compare(r: &Run) -> Result<()> {
    let bed = bed(r)?;
    // Alternate the two receivers so that machine noise hits both.
    let mut rows = Vec::new();
    for round in 0..2 {
        let k = kernel_run(&bed, r)?;
        let kernel_octets = k.1["ulpdu_bytes"].as_f64().unwrap_or(0.0);
        if k.0["ulpdu_digest"] != k.1["ulpdu_digest"] {
            bail!("kernel Responder digests differ");
        }
        let kg = gbit(kernel_octets, k.1["seconds"].as_f64().unwrap_or(1.0));
        rows.push((
            "kernel-tcp mpa-peer listen",
            round,
            kg,
            k.2 / kernel_octets * 1e9,
        ));
        let d = datapath_run(&bed, r)?;
        if d.flow["ulpdu_digest"] != d.peer["ulpdu_digest"] {
            bail!("datapath digests differ");
        }
        let octets = d.flow["ulpdu_octets"].as_f64().unwrap_or(0.0);
        let dg = gbit(octets, d.peer["seconds"].as_f64().unwrap_or(1.0));
        rows.push(("mpa-datapath (AF_XDP)", round, dg, d.cpu / octets * 1e9));
        if r.loss > 0 {
            let n = |k: &str| d.flow[k].as_u64().unwrap_or(0);
            let (direct, store) = (n("placed_direct"), n("placed_from_store"));
            println!(
                "round {round}: datapath placed {direct} out-of-order FPDUs directly, {store} from the store"
            );
        }
    }
    println!(
        "bed: mtu {} loss {}% queues {}; {} MiB as {} B ULPDUs, {}; sender {}; datapath: {}",
        r.mtu,
        r.loss,
        r.queues,
        r.bytes >> 20,
        r.size,
        match (r.markers(), r.plain) {
            (true, _) => "markers + CRC",
            (false, false) => "CRC, no markers",
            (false, true) => "no markers, no CRC",
        },
        if r.aligned() {
            "aligned (exact fill)"
        } else {
            "unaligned"
        },
        match r.op {
            Op::Write => "RDMA Writes placed into a region, checked",
            Op::Send => "Sends placed into posted buffers, checked",
            Op::Count => "payloads counted and digested, not placed",
        }
    );
    println!(
        "{:28} {:>5} {:>12} {:>16}",
        "receiver", "round", "Gbit/s", "CPU ns/octet"
    );
    for (name, round, g, cpu) in &rows {
        println!("{name:28} {round:>5} {g:>12.2} {cpu:>16.3}");
    }
    let avg = |n: &str| {
        let v: Vec<f64> = rows.iter().filter(|r| r.0 == n).map(|r| r.2).collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    let ratio = avg("mpa-datapath (AF_XDP)") / avg("kernel-tcp mpa-peer listen");
    println!("datapath / kernel goodput: {ratio:.2}x");
    Ok(())
}

/// `scale`: connections set up through `mpa-control serve` and kept open at once.
#[derive(Args, Clone)]
struct Scale {
    /// Connections to hand over and keep open.
    #[arg(long, default_value_t = 10_000)]
    connections: usize,
    /// Initiator threads connecting in parallel (in ns a).
    #[arg(long, default_value_t = 32)]
    parallel: usize,
}

/// Runs `scale`: the datapath in ns b (in this process), `mpa-control serve` (child, ns b),
/// `connections` MPA Initiators in ns a (threads). Measures the hand-over rate, checks that
/// every connection carries an FPDU through the datapath, then closes them all.
fn scale(s: &Scale) -> Result<String> {
    let n = s.connections;
    if n == 0 || s.parallel == 0 {
        bail!("--connections and --parallel must be at least 1");
    }
    // Descriptors: the Initiators' sockets here, the frozen ones in the daemon (which
    // inherits the limit); each process holds about `n`.
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let want = (n + 2048) as u64;
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if hard < want {
        bail!("{n} connections need {want} descriptors per process; the hard limit is {hard}");
    }
    setrlimit(Resource::RLIMIT_NOFILE, want, hard).context("raise RLIMIT_NOFILE")?;
    let bed = TestBed::up(BedConfig {
        bridge: false,
        loss_percent: 0,
        loss_port: PORT,
        mtu: 1500,
        queues: 1,
    })?;
    let socket = std::env::temp_dir().join(format!("mpa-scale-{}.sock", std::process::id()));
    let dp = start_datapath(&bed, &socket, 1, false)?;
    let addr = SocketAddr::new(bed.addr_b(false), PORT);
    let config = std::env::temp_dir().join(format!("mpa-scale-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        format!(
            "datapath_socket = {:?}\nmax_connections = {}\n\n[[listener]]\nbind = \"{addr}\"\n",
            socket.to_string_lossy(),
            n + 64
        ),
    )?;
    let mut daemon = bed
        .command(&bed.ns_b, &sibling("mpa-control")?.to_string_lossy())
        .args(["serve", "--config", &config.to_string_lossy()])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .context("start mpa-control serve")?;
    let result = scale_run(&bed, s, addr, &socket);
    let _ = daemon.kill();
    let _ = daemon.wait();
    let _ = std::fs::remove_file(&config);
    dp.stop();
    result
}

fn scale_run(
    bed: &TestBed,
    s: &Scale,
    addr: SocketAddr,
    socket: &std::path::Path,
) -> Result<String> {
    use mpa::endpoint::{EndpointConfig, MpaStream};
    use std::net::TcpStream;
    let n = s.connections;
    // Wait for the daemon's listener.
    let t_wait = Instant::now();
    loop {
        let up = run_in_netns(&bed.ns_a, move || {
            TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
        })?;
        if up {
            break;
        }
        if t_wait.elapsed() > Duration::from_secs(10) {
            bail!("mpa-control serve is not listening on {addr}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The probe above was refused by nothing but counted as a failed setup: let it end.
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let per = n.div_ceil(s.parallel);
    let mut handles = Vec::new();
    for t in 0..s.parallel {
        let count = per.min(n.saturating_sub(t * per));
        let ns_a = bed.ns_a.clone();
        handles.push(std::thread::spawn(move || {
            run_in_netns(
                &ns_a,
                move || -> Result<(Vec<MpaStream<TcpStream>>, Vec<f64>)> {
                    let mut cfg = EndpointConfig::default();
                    cfg.policy.startup_timeout = Duration::from_secs(30);
                    let mut streams = Vec::with_capacity(count);
                    let mut lat = Vec::with_capacity(count);
                    for _ in 0..count {
                        let c0 = Instant::now();
                        let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(30))?;
                        sock.set_nodelay(true)?;
                        // Returns once the datapath sent the Reply: the hand-over is complete.
                        let st = MpaStream::connect(sock, &cfg)?;
                        lat.push(c0.elapsed().as_secs_f64());
                        streams.push(st);
                    }
                    Ok((streams, lat))
                },
            )?
        }));
    }
    let mut streams = Vec::with_capacity(n);
    let mut lat = Vec::with_capacity(n);
    for h in handles {
        let (st, l) = h
            .join()
            .map_err(|_| anyhow!("initiator thread panicked"))??;
        streams.extend(st);
        lat.extend(l);
    }
    let setup_secs = t0.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize] * 1e3;
    let mut dpc = DatapathClient::connect(socket, Duration::from_secs(60))?;
    let flows_of = |dpc: &mut DatapathClient| -> Result<Vec<Value>> {
        let Message::Stats { stats, .. } = dpc.request(|id| Message::GetStats { id })? else {
            bail!("no stats")
        };
        Ok(stats["queues"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|q| q["flows"].as_array().cloned().unwrap_or_default())
            .collect())
    };
    let live = flows_of(&mut dpc)?.len();
    if live != n {
        bail!("{live} flows live in the datapath, {n} expected");
    }
    // Every connection carries one FPDU (a 64-octet RDMA Write) through the datapath.
    let ulpdu = {
        let mut v = vec![0u8; 64];
        DdpRepr::Tagged {
            last: true,
            opcode: RdmapOpcode::RdmaWrite,
            stag: 1,
            to: 0,
        }
        .emit(&mut v, 1);
        v
    };
    for st in streams.iter_mut() {
        st.send(&ulpdu)?;
        st.flush()?;
    }
    let t_data = Instant::now();
    let carried = loop {
        let flows = flows_of(&mut dpc)?;
        let carried = flows.iter().filter(|f| f["fpdus"] == 1).count();
        if carried == n || t_data.elapsed() > Duration::from_secs(30) {
            break carried;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let rss_mib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0);
    if carried != n {
        bail!("{carried} of {n} connections carried their FPDU through the datapath");
    }
    // Close them all: every flow must end cleanly.
    let t_close = Instant::now();
    for st in &streams {
        let _ = st.get_ref().shutdown(std::net::Shutdown::Write);
    }
    let left = loop {
        let left = flows_of(&mut dpc)?.len();
        if left == 0 || t_close.elapsed() > Duration::from_secs(60) {
            break left;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    drop(streams);
    if left != 0 {
        bail!("{left} flows still open 60 s after their peers closed");
    }
    println!(
        "scale: {n} connections handed over in {setup_secs:.2} s by {} initiator threads; latency p50 {:.2} ms p99 {:.2} ms max {:.2} ms; process RSS with all open {rss_mib:.0} MiB; all closed cleanly in {:.1} s",
        s.parallel,
        pct(0.5),
        pct(0.99),
        pct(1.0),
        t_close.elapsed().as_secs_f64()
    );
    Ok(format!(
        "{n} concurrent connections, {:.0} hand-overs/s",
        n as f64 / setup_secs
    ))
}
