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
use mpa_bpf::AttachMode;
use mpa_control::datapath_client::DatapathClient;
use mpa_control::responder::{respond_and_hand_over, Outcome};
use mpa_ctl_proto::Message;
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
}

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
    if r.plain {
        args.push("--no-crc");
    } else {
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
}

fn datapath_run(bed: &TestBed, r: &Run) -> Result<DpResult> {
    let socket = std::env::temp_dir().join(format!("mpa-bench-{}.sock", std::process::id()));
    let cfg = DatapathConfig {
        iface: bed.if_b.clone(),
        queues: r.queues,
        xdp_mode: AttachMode::Driver,
        xsk: XskConfig {
            bind_mode: BindMode::Copy,
            ..XskConfig::default()
        },
        socket: socket.clone(),
        digest: true,
        tcp: TcpConfig::default(),
        verify_checksums: true,
        pin_cpus: false,
        max_region_bytes: mpa_datapath::server::DEFAULT_MAX_REGION_BYTES,
    };
    let dp = run_in_netns(&bed.ns_b, move || Datapath::start(cfg))??;
    let addr = SocketAddr::new(bed.addr_b(false), PORT);
    let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr))??;
    let markers = !r.plain;
    let sock_path = socket.clone();
    let ns_b = bed.ns_b.clone();
    // The hand-over listener: one connection.
    let setup = std::thread::spawn(move || -> Result<(u64, DatapathClient, Outcome)> {
        let (sock, _) = listener.accept()?;
        let mut dpc = DatapathClient::connect(&sock_path, Duration::from_secs(120))?;
        let policy = StartupPolicy {
            markers_required: markers,
            crc_suppressed_by_admin: !markers,
            ..StartupPolicy::default()
        };
        let (o, dpc) = run_in_netns(&ns_b, move || {
            let o = respond_and_hand_over(sock, policy, Vec::new(), None, &mut dpc);
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
    drop(outcome);
    let Message::Stats { stats, .. } = dpc.request(|id| Message::GetStats { id })? else {
        bail!("no stats")
    };
    let flow = stats["ended_flows"]
        .as_array()
        .and_then(|a| a.iter().find(|f| f["flow_id"] == flow_id).cloned())
        .ok_or_else(|| anyhow!("flow {flow_id} missing from stats ({gone:?})"))?;
    dp.stop();
    Ok(DpResult {
        peer,
        flow,
        cpu,
        xdp: stats["xdp"].clone(),
    })
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
    if r.loss > 0 {
        println!("bridge dropped {} frames", bed.dropped()?);
    }
    println!(
        "datapath CPU: {:.2} s for {:.0} MiB",
        d.cpu,
        octets / (1 << 20) as f64
    );
    Ok(format!("{:.2} Gbit/s", gbit(octets, secs)))
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
    } else {
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
    }
    println!(
        "bed: mtu {} loss {}% queues {}; {} MiB as {} B ULPDUs, {}",
        r.mtu,
        r.loss,
        r.queues,
        r.bytes >> 20,
        r.size,
        if r.plain {
            "no markers, no CRC"
        } else {
            "markers + CRC"
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
