//! `mpa-datapath`: the AF_XDP MPA data path for one interface; `mpa-datapath probe`: what an
//! interface's NIC and driver can do for it (docs/operations.md, "Probing an interface").
#![forbid(unsafe_code)]

use clap::{CommandFactory, Parser, Subcommand};
use mpa_bpf::AttachMode;
use mpa_datapath::io::nic_queues::QueueSteering;
use mpa_datapath::io::xsk::{BindMode, BusyPoll, HugePages, XskConfig};
use mpa_datapath::memory::streaming::StreamingStores;
use mpa_datapath::server::{Datapath, DatapathConfig};
use mpa_ops::logs::LogFormat;
use mpa_stack::tcp::TcpConfig;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `--zero-copy`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ZeroCopy {
    Auto,
    On,
    Off,
}

/// `--steer`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Steer {
    /// Change nothing on the NIC (a warning when it has more RX queues than --queues).
    Off,
    /// Set the NIC's RX channel count to --queues.
    Channels,
    /// Ntuple rules sending TCP to the --steer-port ports to the served queues.
    Ntuple,
}

#[derive(Parser)]
#[command(
    args_override_self = true,
    name = "mpa-datapath",
    version,
    about = "MPA over AF_XDP: steer, receive, place",
    // `mpa-datapath --iface X …` serves; `mpa-datapath probe --iface X` only reads.
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Interface to serve.
    #[arg(long, required = true)]
    iface: Option<String>,
    /// TOML file of options.
    ///
    /// TOML file of options: each key a long option of this command (`queues = 2`,
    /// `zero_copy = "auto"`, `pin_cpus = true`); options on the command line win.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Serve OpenMetrics at http://ADDR/metrics.
    ///
    /// Serve metrics for Prometheus (OpenMetrics text) at http://ADDR/metrics, e.g.
    /// `127.0.0.1:9464` (port 0: any free port, logged). docs/operations.md lists them.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// Also metrics per live flow.
    ///
    /// With --metrics: also a set of metrics per live flow (one label set per flow; for
    /// small numbers of flows).
    #[arg(long, requires = "metrics")]
    metrics_flows: bool,
    /// Log lines as text or JSON.
    ///
    /// Log lines on stderr as text (coloured only on a terminal) or as one JSON object per
    /// line (for journald and log collectors).
    #[arg(
        long,
        value_enum,
        default_value = "text",
        value_name = "FORMAT",
        hide_possible_values = true
    )]
    log_format: LogFormat,
    /// RX queues, a worker each.
    ///
    /// RX queues (one worker and one AF_XDP socket each).
    #[arg(long, default_value_t = 1)]
    #[arg(value_name = "N")]
    queues: u32,
    /// AF_XDP zero-copy: auto, on, off.
    ///
    /// AF_XDP zero-copy: `auto` (zero-copy where the driver has it, else copy mode, the reason
    /// logged), `on` (zero-copy or fail, naming the interface, its driver and the kernel's
    /// reason), `off` (copy mode). `mpa-control stats` shows what each queue got.
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        value_name = "MODE",
        hide_possible_values = true
    )]
    zero_copy: ZeroCopy,
    /// XDP mode: native, generic, auto.
    ///
    /// XDP attach mode: `native` (in the driver; `driver` is the same), `generic` (skb mode,
    /// any interface, slower), or `auto` (native, else generic).
    #[arg(long, default_value = "auto", value_name = "MODE")]
    xdp_mode: String,
    /// Steer MPA flows to served queues.
    ///
    /// How MPA flows reach the queues that have a socket (docs/nics.md): `channels` sets the
    /// NIC's RX channel count to --queues, `ntuple` installs rules sending TCP to the
    /// --steer-port ports to those queues; both are undone on exit, and after a crash by the
    /// next start.
    #[arg(
        long,
        value_enum,
        default_value = "off",
        value_name = "HOW",
        hide_possible_values = true
    )]
    steer: Steer,
    /// Listener ports for --steer ntuple.
    ///
    /// With --steer ntuple: the local ports of the listeners whose flows the datapath takes
    /// (the `port` of mpa-control's `[[listener]]` tables).
    #[arg(long, value_delimiter = ',', value_name = "PORT")]
    steer_port: Vec<u16>,
    /// Control socket path.
    #[arg(long, default_value = "/run/mpa-datapath.sock")]
    socket: PathBuf,
    /// Keep a CRC32c digest per flow.
    ///
    /// Keep a CRC32c digest of each flow's ULPDU octets (for tests and demos).
    #[arg(long)]
    digest: bool,
    /// UMEM frames per queue.
    ///
    /// UMEM frames per queue, half for receiving and half for sending: at least 256 (two bursts
    /// each way).
    #[arg(long, default_value_t = 8192)]
    #[arg(value_name = "N")]
    frames: u32,
    /// UMEM frame octets: 4096 or 2048.
    ///
    /// Octets per UMEM frame: 4096 or 2048 (half the memory; frames above 1792 octets then
    /// arrive as descriptor chains).
    #[arg(long, default_value_t = 4096, value_parser = frame_size)]
    #[arg(value_name = "OCTETS")]
    frame_size: u32,
    /// UMEM on huge pages: auto, on, off.
    ///
    /// UMEM on huge pages: `auto` (where enough are free, else normal pages, logged), `on`
    /// (or fail naming how many are needed), `off`.
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        value_name = "MODE",
        hide_possible_values = true
    )]
    huge_pages: HugePages,
    /// Skip TCP checksum verification.
    ///
    /// Skip software TCP checksum verification (only where the NIC verified it).
    #[arg(long)]
    no_verify_checksums: bool,
    /// Gather jumbo frames before decoding them.
    ///
    /// Gather each jumbo frame's receive descriptors (UMEM frames) into one buffer before
    /// decoding it: one more copy of every octet, FPDUs that span descriptors staged. By
    /// default a chain whose descriptors came in one burst is decoded where it lies (measured
    /// faster, docs/features.md "Jumbo frames").
    #[arg(long)]
    gather_chains: bool,
    /// Streaming stores: which regions.
    ///
    /// Which registered regions take messages of 1 KiB or more with streaming
    /// (non-temporal) stores, which skip reading each destination line first: `off` (ordinary
    /// stores with the destination prefetched for writing, measured faster on our machines),
    /// `large-regions` (larger than the last-level cache, where every line would miss anyway),
    /// `on` (every region; a consumer that reads at once then finds the octets in memory, not
    /// in the cache). Measure before turning it on (docs/features.md "Streaming stores").
    #[arg(long, value_enum, default_value_t = StreamingStores::default(), value_name = "WHICH", hide_possible_values = true)]
    streaming_stores: StreamingStores,
    /// Pin worker q to CPU q.
    #[arg(long)]
    pin_cpus: bool,
    /// Poll this many µs before sleeping.
    ///
    /// Keep each worker polling this many µs after its last frame before it may sleep in
    /// poll(): lower latency for request/response loads, a core's worth of CPU while they
    /// last (0: sleep after 256 empty polls).
    #[arg(long, default_value_t = 0)]
    #[arg(value_name = "US")]
    spin_us: u64,
    /// Yield every this many empty polls.
    ///
    /// While a worker spins (the 256 empty polls before it sleeps, and --spin-us), it offers
    /// its core to other runnable threads every this many empty polls (`sched_yield`), so
    /// that a thread woken on its core — the application, the peer, the kernel's work for
    /// either — does not wait for its time slice to end (0: never yield, for a core of its
    /// own).
    #[arg(long, default_value_t = mpa_datapath::worker::DEFAULT_YIELD_EVERY, value_name = "POLLS")]
    spin_yield_polls: u32,
    /// Stuck-worker deadline, ms.
    ///
    /// A worker whose loop has not turned for this many ms is stuck: its flows are reported
    /// gone and the datapath exits non-zero (an idle worker turns at least every 10 ms).
    #[arg(long, default_value_t = mpa_datapath::server::DEFAULT_WORKER_DEADLINE.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(100..))]
    #[arg(value_name = "MS")]
    worker_deadline_ms: u64,
    /// Octets flows and rings may hold.
    ///
    /// Octets all flows and completion rings may hold together: out-of-order octets copied
    /// for reassembly, 256 KiB of fixed state per flow, the completion rings of each
    /// subscription (default: a quarter of the machine's memory; docs/limits.md).
    #[arg(long, value_name = "OCTETS")]
    memory_budget: Option<u64>,
    /// Control clients at once at most.
    ///
    /// Control-socket clients connected at once at most (more are refused).
    #[arg(long, default_value_t = mpa_datapath::server::DEFAULT_MAX_CONTROL_CLIENTS)]
    #[arg(value_name = "N")]
    max_control_clients: usize,
    /// Seconds a client has to say Hello.
    ///
    /// Close a control client that has not said Hello this long after connecting.
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = mpa_cli::seconds)]
    control_hello_timeout: std::time::Duration,
    /// Idle limit, holding nothing, s.
    ///
    /// Close a control client without CAP_NET_ADMIN that holds nothing (no region,
    /// subscription, flow or watch) and has said nothing this long.
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = mpa_cli::seconds)]
    control_idle_timeout: std::time::Duration,
    /// Records per completion ring.
    ///
    /// Records per completion ring (one ring per worker and subscribing consumer, in shared
    /// memory): a power of two; a consumer that falls this far behind loses completions
    /// (counted, and reported to it as an overflow).
    #[arg(long, default_value_t = mpa_datapath::server::DEFAULT_COMPLETION_RING)]
    #[arg(value_name = "RECORDS")]
    completion_ring: u32,
    /// Registered region octets.
    ///
    /// Octets of registered memory regions allowed in all.
    #[arg(long, default_value_t = mpa_datapath::server::DEFAULT_MAX_REGION_BYTES)]
    #[arg(value_name = "OCTETS")]
    max_region_bytes: u64,
    /// Busy polling, µs (0: off).
    ///
    /// Preferred busy polling on every AF_XDP socket (SO_PREFER_BUSY_POLL, SO_BUSY_POLL of
    /// this many µs, SO_BUSY_POLL_BUDGET): the kernel runs the driver's receive from our
    /// wake-ups instead of interrupts (0 = off). Also `--busy-poll`.
    #[arg(long, alias = "busy-poll", default_value_t = 0)]
    #[arg(value_name = "US")]
    busy_poll_us: u32,
    /// Busy-poll budget, packets per round.
    ///
    /// Busy-poll budget (packets per round) with --busy-poll-us.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    #[arg(value_name = "N")]
    busy_poll_budget: u32,
    /// Keepalive idle time, ms (0: never).
    ///
    /// Keepalive: probe a flow whose peer sent nothing for this long, in milliseconds; 0 =
    /// never [default: 7200000, RFC 1122's 2 h].
    #[arg(long)]
    #[arg(value_name = "MS")]
    keepalive_idle_ms: Option<u64>,
    /// Keepalive probe interval, ms.
    ///
    /// Keepalive: between unanswered probes, ms; at least 500 (Linux peers answer such
    /// probes at most every 0.5 s) [default: 75000].
    #[arg(long)]
    #[arg(value_name = "MS")]
    keepalive_interval_ms: Option<u64>,
    /// Keepalive probes that end a flow.
    ///
    /// Keepalive: unanswered probes that end the flow [default: 9].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    #[arg(value_name = "N")]
    keepalive_probes: Option<u32>,
    /// Longest FIN-WAIT-2, ms.
    ///
    /// The longest FIN-WAIT-2 lasts, ms [default: 60000, as Linux tcp_fin_timeout].
    #[arg(long)]
    #[arg(value_name = "MS")]
    fin_wait2_timeout_ms: Option<u64>,
    /// Zero-window probes that end a flow.
    ///
    /// Zero-window probes, while the peer's window stays closed, that end the flow
    /// [default: 15, as Linux tcp_retries2].
    #[arg(long)]
    #[arg(value_name = "N")]
    persist_max_probes: Option<u32>,
}

/// `--frame-size`: the UMEM frame sizes the datapath's frame layout takes.
fn frame_size(s: &str) -> Result<u32, String> {
    match s {
        "2048" | "2K" | "2k" => Ok(2048),
        "4096" | "4K" | "4k" => Ok(4096),
        o => Err(format!("{o}: 2048 or 4096")),
    }
}

#[derive(Subcommand)]
enum Command {
    /// What an interface's NIC and driver can do for the datapath (changes nothing).
    ///
    /// Driver and firmware, queues, MTU, XDP and AF_XDP zero-copy features, the offloads that
    /// must be off, interrupts; each with what the datapath will do with it, and a verdict.
    /// Exit status 0: the datapath can run there (the report says in which modes and with
    /// which options); 1: it cannot (each reason named, on stderr too); 2: a usage error.
    Probe(mpa_probe::ProbeArgs),
}

/// The TCP settings: the defaults (`TcpConfig::default`), with what the command line names.
fn tcp_config(a: &Args) -> TcpConfig {
    let d = TcpConfig::default();
    let ms = Duration::from_millis;
    TcpConfig {
        keepalive_idle: match a.keepalive_idle_ms {
            Some(0) => None,
            Some(n) => Some(ms(n)),
            None => d.keepalive_idle,
        },
        keepalive_interval: a.keepalive_interval_ms.map_or(d.keepalive_interval, ms),
        keepalive_probes: a.keepalive_probes.unwrap_or(d.keepalive_probes),
        fin_wait2_timeout: a.fin_wait2_timeout_ms.map_or(d.fin_wait2_timeout, ms),
        persist_max_probes: a.persist_max_probes.unwrap_or(d.persist_max_probes),
        ..d
    }
}

/// Exit status when a worker failed (EX_SOFTWARE of sysexits.h): its flows were reported gone
/// and the datapath stopped (datapath/src/server/faults.rs says why it does not carry on).
const EXIT_WORKER_FAILED: u8 = 70;

fn main() -> ExitCode {
    if let Some(code) = mpa_ops::generate::if_asked(Args::command, "8") {
        return code;
    }
    let argv = std::env::args_os().collect();
    let a = match mpa_ops::options_file::expand(&Args::command(), "config", argv) {
        Ok(argv) => Args::parse_from(argv),
        Err(e) => {
            eprintln!("mpa-datapath: {e}");
            return ExitCode::from(2);
        }
    };
    let iface = match (a.command.as_ref(), a.iface.clone()) {
        (Some(Command::Probe(p)), _) => return mpa_probe::run(p, &mpa_datapath::probe_needs()),
        (None, Some(iface)) => iface,
        // clap requires --iface without a subcommand.
        (None, None) => {
            eprintln!("mpa-datapath: --iface is required");
            return ExitCode::from(2);
        }
    };
    mpa_ops::logs::init(a.log_format, "info");
    let xdp_mode = match a.xdp_mode.as_str() {
        "native" | "driver" => AttachMode::Driver,
        "generic" => AttachMode::Generic,
        "auto" => AttachMode::DriverOrGeneric,
        o => {
            eprintln!("mpa-datapath: --xdp-mode {o:?}: expected native, generic or auto");
            return ExitCode::from(2);
        }
    };
    let max_queues = mpa_datapath::server::MAX_QUEUES;
    if a.queues == 0 || a.queues > max_queues {
        eprintln!(
            "mpa-datapath: --queues {} out of 1..={max_queues}",
            a.queues
        );
        return ExitCode::from(2);
    }
    let min_frames = mpa_datapath::io::xsk::MIN_FRAMES;
    if a.frames < min_frames {
        eprintln!(
            "mpa-datapath: --frames {}: at least {min_frames} per queue (half for RX, half for TX)",
            a.frames
        );
        return ExitCode::from(2);
    }
    if a.max_control_clients == 0 {
        eprintln!("mpa-datapath: --max-control-clients 0: mpa-control itself is a control client");
        return ExitCode::from(2);
    }
    let ring = a.completion_ring;
    let (lo, hi) = (
        mpa_ctl_proto::ring::MIN_CAPACITY,
        mpa_ctl_proto::ring::MAX_CAPACITY,
    );
    if !ring.is_power_of_two() || !(lo..=hi).contains(&ring) {
        eprintln!("mpa-datapath: --completion-ring {ring}: a power of two in {lo}..={hi}");
        return ExitCode::from(2);
    }
    if !a.steer_port.is_empty() && !matches!(a.steer, Steer::Ntuple) {
        eprintln!("mpa-datapath: --steer-port is for --steer ntuple");
        return ExitCode::from(2);
    }
    if matches!(a.steer, Steer::Ntuple) && a.steer_port.is_empty() {
        eprintln!(
            "mpa-datapath: --steer ntuple needs the listeners' ports: --steer-port PORT[,PORT…]"
        );
        return ExitCode::from(2);
    }
    let tcp = tcp_config(&a);
    let socket = a.socket.clone();
    let cfg = DatapathConfig {
        iface: iface.clone(),
        queues: a.queues,
        xdp_mode,
        xsk: XskConfig {
            frames: a.frames,
            frame_size: a.frame_size,
            huge_pages: a.huge_pages,
            bind_mode: match a.zero_copy {
                ZeroCopy::Auto => BindMode::Auto,
                ZeroCopy::On => BindMode::ZeroCopy,
                ZeroCopy::Off => BindMode::Copy,
            },
            busy_poll: (a.busy_poll_us > 0).then_some(BusyPoll {
                usecs: a.busy_poll_us,
                budget: a.busy_poll_budget,
            }),
            ..XskConfig::default()
        },
        socket: a.socket,
        digest: a.digest,
        tcp,
        verify_checksums: !a.no_verify_checksums,
        chains_in_pieces: !a.gather_chains,
        streaming_stores: a.streaming_stores,
        pin_cpus: a.pin_cpus,
        max_region_bytes: a.max_region_bytes,
        max_control_clients: a.max_control_clients,
        control_deadlines: mpa_datapath::server::ControlDeadlines {
            hello: a.control_hello_timeout,
            idle: a.control_idle_timeout,
        },
        completion_ring: ring,
        spin: std::time::Duration::from_micros(a.spin_us),
        yield_every: a.spin_yield_polls,
        worker_deadline: std::time::Duration::from_millis(a.worker_deadline_ms),
        memory_budget: a.memory_budget,
        caller_drives_queues: false,
        queue_steering: match a.steer {
            Steer::Off => QueueSteering::Off,
            Steer::Channels => QueueSteering::Channels,
            Steer::Ntuple => QueueSteering::Ntuple {
                ports: a.steer_port.clone(),
            },
        },
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, stop.clone()) {
            eprintln!("mpa-datapath: signal handler: {e}");
            return ExitCode::from(2);
        }
    }
    let dp = match Datapath::start(cfg) {
        Ok(dp) => dp,
        Err(e) => {
            // The whole chain: "attach ... in driver mode: Device or resource busy".
            let mut msg = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("mpa-datapath: {msg}");
            return ExitCode::FAILURE;
        }
    };
    let _metrics = match a.metrics {
        None => None,
        Some(addr) => {
            let (per_flow, socket, iface) = (a.metrics_flows, socket.clone(), iface.clone());
            let render = move || mpa_ops::metrics::datapath::scrape(&socket, &iface, per_flow);
            match mpa_ops::metrics::Endpoint::start(addr, render) {
                Ok(ep) => {
                    tracing::info!(addr = %ep.local_addr(), "metrics at http://{}/metrics", ep.local_addr());
                    Some(ep)
                }
                Err(e) => {
                    eprintln!("mpa-datapath: --metrics {addr}: {e}");
                    dp.stop();
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    // Tests and scripts wait for this line; a `Type=notify` unit for the notification.
    eprintln!("mpa-datapath: ready");
    mpa_ops::readiness::ready(&format!(
        "serving {iface}, control socket {}",
        socket.display()
    ));
    while !stop.load(Ordering::Relaxed) && dp.failure().is_none() {
        std::thread::sleep(Duration::from_millis(50));
    }
    mpa_ops::readiness::stopping();
    let failure = dp.failure();
    dp.stop();
    match failure {
        None => ExitCode::SUCCESS,
        Some(why) => {
            // A supervisor restarts us; the XDP link went with the stop.
            eprintln!("mpa-datapath: stopped: {why}");
            ExitCode::from(EXIT_WORKER_FAILED)
        }
    }
}
