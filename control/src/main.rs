//! `mpa-control`: the connection-setup daemon (`serve`) and operations on the datapath
//! (`flows`, `stats`, `close`, `capture`) over its control socket.
#![forbid(unsafe_code)]

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use mpa::startup::{RtrSet, RtrType, StartupPolicy};
use mpa_control::capture::{capture, CaptureOptions, CaptureSummary};
use mpa_control::config::{Config, DEFAULT_SOCKET};
use mpa_control::daemon::Daemon;
use mpa_control::datapath_client::{ClientError, DatapathClient};
use mpa_control::initiator::{connect_and_hand_over, InitiatorOutcome};
use mpa_ctl_proto::capture::{
    DEFAULT_MAX_BYTES, DEFAULT_SNAPLEN, MAX_BYTES, MAX_DURATION_MS, MAX_SNAPLEN, MIN_BYTES,
};
use mpa_ctl_proto::{ErrorCode, Message};
use serde_json::{json, Value};
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "mpa-control",
    version,
    about = "mpa-xdp connection setup: the MPA Responder daemon, and datapath operations"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Accept MPA connections on the configured listeners and hand them to the datapath.
    Serve {
        /// TOML configuration file.
        #[arg(long)]
        config: PathBuf,
    },
    /// List the datapath's live flows.
    Flows {
        #[command(flatten)]
        target: Target,
        /// Print the flows as a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The datapath's counters: queues, XDP, live and ended flows.
    Stats {
        #[command(flatten)]
        target: Target,
        /// Print the datapath's JSON document instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// MPA Initiator: connect to a Responder with a kernel socket, send the Request, validate
    /// the Reply and hand the connection to the datapath (which sends the agreed RTR first
    /// when --p2p). Prints one line (the flow and what was negotiated), then holds the frozen
    /// socket until the connection ends.
    ///
    /// The datapath has no API for ULP data yet, so the connection carries at most the RTR
    /// from us and whatever the Responder sends. It ends when the peer closes (exit 0 if
    /// cleanly, non-zero with the MPA error otherwise), or after --hold seconds, when
    /// `connect` asks the datapath to close the flow (CloseFlow: the datapath resets the
    /// connection) and exits 0; SIGINT/SIGTERM close the flow the same way. A rejection
    /// (Reply with R=1) or a failed startup exits non-zero with the reason on stderr; the
    /// datapath never hears of such a connection.
    Connect(ConnectArgs),
    /// Close a flow: the datapath resets the connection and forgets it.
    Close {
        #[command(flatten)]
        target: Target,
        /// The flow id (from `flows`).
        id: u64,
    },
    /// Capture the frames the datapath receives and sends (one flow, or all) into a pcap file
    /// for Wireshark/tshark. Bounded in time and size; one capture at a time per datapath.
    /// The MPA startup frames, which the kernel carried before the hand-over, are rebuilt
    /// from it and written first, so that Wireshark's MPA dissector recognises the FPDUs.
    /// Ends after --duration, at --max-bytes, or on SIGINT/SIGTERM; prints one line.
    Capture(CaptureArgs),
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("which").required(true).args(["flow", "all"])))]
struct CaptureArgs {
    /// Capture this flow only (the id from `flows`).
    #[arg(long)]
    flow: Option<u64>,
    /// Capture every frame the datapath receives or sends.
    #[arg(long)]
    all: bool,
    /// The pcap file to write (replaced if it exists).
    #[arg(long)]
    out: PathBuf,
    /// Seconds to capture (more than 0, at most 3600; fractions allowed).
    #[arg(long)]
    duration: f64,
    /// Largest file, octets (pcap headers included; at most 4 GiB).
    #[arg(long, default_value_t = DEFAULT_MAX_BYTES)]
    max_bytes: u64,
    /// Octets kept of each frame (1 to 262144).
    #[arg(long, default_value_t = DEFAULT_SNAPLEN)]
    snaplen: u32,
    #[command(flatten)]
    target: Target,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ConnectArgs {
    /// The Responder's address and port.
    #[arg(long)]
    to: SocketAddr,
    #[command(flatten)]
    target: Target,
    /// Ask the Responder for markers in the FPDUs it sends us (our Request's M flag).
    #[arg(long)]
    markers: bool,
    /// Administratively suppress our CRC request (C=0; CRCs are still used if the
    /// Responder asks).
    #[arg(long)]
    no_crc: bool,
    /// MPA revision of the Request [default: 2 with --p2p, else 1].
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=2))]
    rev: Option<u8>,
    /// Peer-to-peer model (RFC 6581, needs revision 2): the datapath sends the agreed RTR
    /// indication as the first FPDU.
    #[arg(long)]
    p2p: bool,
    /// The RTR indications we offer (repeat or comma-separate; needs --p2p) [default: all].
    #[arg(long, value_enum, value_delimiter = ',', requires = "p2p")]
    rtr: Vec<RtrArg>,
    /// Private data for the Request.
    #[arg(long)]
    private_data: Option<String>,
    /// Protection domain of the connection: the peer's RDMA Writes and Sends place into its
    /// registered regions and posted buffers.
    #[arg(long)]
    pd: Option<u32>,
    /// The Responder aligns FPDUs with segments: without markers, out-of-order segments
    /// whose first FPDU verifies by CRC are placed at once.
    #[arg(long, requires = "pd")]
    aligned_sender: bool,
    /// Seconds allowed for the TCP connect and for the wait for the Reply.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    /// Close the flow (CloseFlow) after this many seconds [default: wait until it ends].
    #[arg(long)]
    hold: Option<f64>,
    /// Print the line as JSON.
    #[arg(long)]
    json: bool,
}

/// An RTR indication (RFC 6581 §9.2), as named on the command line.
#[derive(Clone, Copy, ValueEnum)]
enum RtrArg {
    /// A zero-length Send.
    Send,
    /// A zero-length RDMA Write.
    Write,
    /// A zero-length RDMA Read Request.
    Read,
}

impl From<RtrArg> for RtrType {
    fn from(r: RtrArg) -> RtrType {
        match r {
            RtrArg::Send => RtrType::ZeroLengthSend,
            RtrArg::Write => RtrType::ZeroLengthWrite,
            RtrArg::Read => RtrType::ZeroLengthReadRequest,
        }
    }
}

#[derive(Args, Debug)]
struct Target {
    /// The datapath's control socket [default: the config's datapath_socket, else
    /// /run/mpa-datapath.sock].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Take the socket path from this configuration file.
    #[arg(long)]
    config: Option<PathBuf>,
}

impl Target {
    fn path(&self) -> Result<PathBuf, String> {
        if let Some(s) = &self.socket {
            return Ok(s.clone());
        }
        if let Some(c) = &self.config {
            let cfg = Config::load(c).map_err(|e| format!("config {}: {e}", c.display()))?;
            return Ok(cfg.datapath_socket);
        }
        Ok(PathBuf::from(DEFAULT_SOCKET))
    }

    fn connect(&self) -> Result<(DatapathClient, PathBuf), String> {
        let path = self.path()?;
        let c = DatapathClient::connect(&path, Duration::from_secs(5))
            .map_err(|e| format!("cannot reach the datapath at {}: {e}", path.display()))?;
        Ok((c, path))
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Serve { config } => serve(&config),
        Cmd::Flows { target, json } => flows(&target, json),
        Cmd::Stats { target, json } => stats(&target, json),
        Cmd::Connect(a) => connect(&a),
        Cmd::Close { target, id } => close(&target, id),
        Cmd::Capture(a) => capture_cmd(&a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mpa-control: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(config: &Path) -> Result<(), String> {
    let cfg = Config::load(config).map_err(|e| format!("config {}: {e}", config.display()))?;
    // Before any thread: a signal during startup must not kill us with the default action.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .map_err(|e| format!("signal handlers: {e}"))?;
    let _daemon = Daemon::start(cfg).map_err(|e| e.to_string())?;
    if let Some(sig) = signals.forever().next() {
        // Handed-over flows keep running in the datapath; their frozen sockets close silently
        // when the process exits.
        tracing::info!(signal = sig, "exiting");
    }
    Ok(())
}

/// Asks for the statistics document.
fn get_stats(target: &Target) -> Result<Value, String> {
    let (mut c, path) = target.connect()?;
    match c.request(|id| Message::GetStats { id }) {
        Ok(Message::Stats { stats, .. }) => Ok(stats),
        Ok(m) => Err(format!("unexpected answer from {}: {m:?}", path.display())),
        Err(e) => Err(format!("datapath at {}: {e}", path.display())),
    }
}

/// Every live flow, with its queue.
fn live_flows(stats: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for q in stats["queues"].as_array().into_iter().flatten() {
        for f in q["flows"].as_array().into_iter().flatten() {
            let mut f = f.clone();
            if let Some(o) = f.as_object_mut() {
                o.insert("queue".into(), q["queue"].clone());
            }
            out.push(f);
        }
    }
    out
}

fn flows(target: &Target, json: bool) -> Result<(), String> {
    let stats = get_stats(target)?;
    let flows = live_flows(&stats);
    if json {
        println!("{}", Value::Array(flows));
        return Ok(());
    }
    if flows.is_empty() {
        println!("no flows");
        return Ok(());
    }
    print!("{}", flow_table(&flows, "queue"));
    Ok(())
}

fn stats(target: &Target, json: bool) -> Result<(), String> {
    let stats = get_stats(target)?;
    if json {
        println!("{stats}");
        return Ok(());
    }
    println!("adopted flows: {}", cell(&stats["adopted_flows"]));
    println!("xdp: {}", cell(&stats["xdp"]));
    println!();
    const QUEUE_COLS: [&str; 10] = [
        "queue",
        "rx_frames",
        "rx_octets",
        "tx_frames",
        "tx_octets",
        "tx_no_frame",
        "wakeups",
        "malformed",
        "unknown_flow",
        "bursts",
    ];
    let queues: Vec<Vec<String>> = stats["queues"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|q| {
            let mut row: Vec<String> = QUEUE_COLS.iter().map(|k| cell(&q[*k])).collect();
            row.push(q["flows"].as_array().map_or(0, Vec::len).to_string());
            row
        })
        .collect();
    let mut heads: Vec<&str> = QUEUE_COLS.to_vec();
    heads.push("flows");
    print!("{}", table(&heads, &queues));
    let live = live_flows(&stats);
    if !live.is_empty() {
        println!("\nlive flows:");
        print!("{}", flow_table(&live, "queue"));
    }
    let ended = stats["ended_flows"].as_array().cloned().unwrap_or_default();
    println!("\nended flows (oldest first): {}", ended.len());
    if !ended.is_empty() {
        print!("{}", flow_table(&ended, "end"));
    }
    Ok(())
}

/// The Request's policy from the command line.
fn initiator_policy(a: &ConnectArgs) -> Result<StartupPolicy, String> {
    let revision = a.rev.unwrap_or(if a.p2p { 2 } else { 1 });
    if a.p2p && revision < 2 {
        return Err("--p2p needs --rev 2".into());
    }
    let policy = StartupPolicy {
        revision,
        markers_required: a.markers,
        crc_suppressed_by_admin: a.no_crc,
        p2p: a.p2p,
        rtr_send: if a.rtr.is_empty() {
            RtrSet::ALL
        } else {
            a.rtr.iter().map(|r| RtrType::from(*r)).collect()
        },
        startup_timeout: Duration::from_secs(a.timeout.max(1)),
        ..StartupPolicy::default()
    };
    policy.validate().map_err(|e| format!("policy: {e}"))?;
    Ok(policy)
}

fn connect(a: &ConnectArgs) -> Result<(), String> {
    let policy = initiator_policy(a)?;
    let hold = match a.hold {
        Some(h) if !(h.is_finite() && h >= 0.0) => {
            return Err(format!("--hold {h}: not a number of seconds"))
        }
        h => h.map(Duration::from_secs_f64),
    };
    // Before the hand-over: a signal must close the flow, not leave it running unowned.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| format!("signals: {e}"))?;
    }
    let (mut dp, path) = a.target.connect()?;
    let private_data = a.private_data.clone().unwrap_or_default().into_bytes();
    let outcome = connect_and_hand_over(
        a.to,
        policy,
        private_data,
        mpa_control::Placement {
            pd: a.pd,
            aligned_sender: a.aligned_sender,
        },
        &mut dp,
    )
    .map_err(|e| format!("connect {}: {e}", a.to))?;
    let (flow_id, frozen, n) = match outcome {
        InitiatorOutcome::Rejected { reason } => {
            return Err(format!(
                "connect {}: rejected by the Responder: {}",
                a.to,
                String::from_utf8_lossy(&reason)
            ))
        }
        InitiatorOutcome::HandedOver {
            flow_id,
            frozen,
            negotiated,
        } => (flow_id, frozen, negotiated),
    };
    let rtr = n.rtr.map(|r| format!("{r:?}"));
    if a.json {
        let line = json!({
            "flow_id": flow_id,
            "to": a.to.to_string(),
            "rev": n.rev,
            "markers_rx": n.markers_rx,
            "markers_tx": n.markers_tx,
            "crc": n.crc,
            "p2p": n.p2p,
            "rtr": rtr,
            "ird": n.ird,
            "ord": n.ord,
            "private_data": String::from_utf8_lossy(&n.peer_private_data),
        });
        println!("{line}");
    } else {
        println!(
            "flow {flow_id}: {} rev {} markers_rx {} markers_tx {} crc {} rtr {}",
            a.to,
            n.rev,
            n.markers_rx,
            n.markers_tx,
            n.crc,
            rtr.as_deref().unwrap_or("-")
        );
    }
    let deadline = hold.map(|h| Instant::now() + h);
    let dp_err = |e: ClientError| format!("flow {flow_id}: datapath at {}: {e}", path.display());
    loop {
        // Short slices so that a signal is seen promptly.
        let slice = Instant::now() + Duration::from_millis(200);
        let until = deadline.map_or(slice, |d| d.min(slice));
        match dp.wait_notification(Some(until)).map_err(dp_err)? {
            Some(Message::FlowGone {
                flow_id: gone,
                mpa_error,
                reason,
                terminate,
            }) if gone == flow_id => {
                drop(frozen);
                return match mpa_error {
                    None if terminate.is_some() => Err(format!(
                        "flow {flow_id} ended with a Terminate ({terminate:?}): {reason}"
                    )),
                    None => {
                        tracing::info!(flow_id, %reason, "flow ended");
                        Ok(())
                    }
                    Some(code) => Err(format!(
                        "flow {flow_id} ended with MPA error {code}: {reason}"
                    )),
                };
            }
            Some(_) => continue,
            None => {}
        }
        let expired = deadline.is_some_and(|d| Instant::now() >= d);
        if expired || stop.load(Ordering::Relaxed) {
            break;
        }
    }
    // Held long enough (or told to stop): the datapath resets the connection.
    match dp.request(|id| Message::CloseFlow { id, flow_id }) {
        Ok(Message::Ok { .. }) => {}
        Ok(m) => return Err(dp_err(ClientError::Unexpected(Box::new(m)))),
        Err(e) => return Err(dp_err(e)),
    }
    let t0 = Instant::now() + Duration::from_secs(5);
    while let Some(m) = dp.wait_notification(Some(t0)).map_err(dp_err)? {
        if matches!(m, Message::FlowGone { flow_id: gone, .. } if gone == flow_id) {
            break;
        }
    }
    drop(frozen);
    tracing::info!(flow_id, "flow closed");
    Ok(())
}

fn close(target: &Target, flow_id: u64) -> Result<(), String> {
    let (mut c, path) = target.connect()?;
    match c.request(|id| Message::CloseFlow { id, flow_id }) {
        Ok(Message::Ok { .. }) => {
            println!("flow {flow_id}: closed");
            Ok(())
        }
        Ok(m) => Err(format!("unexpected answer from {}: {m:?}", path.display())),
        Err(ClientError::Refused {
            code: ErrorCode::UnknownFlow,
            message,
        }) => Err(format!(
            "close {flow_id}: no such flow in the datapath ({message})"
        )),
        Err(e) => Err(format!(
            "close {flow_id}: datapath at {}: {e}",
            path.display()
        )),
    }
}

/// The capture's bounds from the command line, checked.
fn capture_options(a: &CaptureArgs) -> Result<CaptureOptions, String> {
    let max_s = MAX_DURATION_MS / 1000;
    if !(a.duration.is_finite() && a.duration > 0.0 && a.duration <= max_s as f64) {
        return Err(format!(
            "--duration {}: must be more than 0 and at most {max_s} seconds",
            a.duration
        ));
    }
    let duration = Duration::from_secs_f64(a.duration).max(Duration::from_millis(1));
    if !(MIN_BYTES..=MAX_BYTES).contains(&a.max_bytes) {
        return Err(format!(
            "--max-bytes {}: must be {MIN_BYTES} to {MAX_BYTES} (4 GiB)",
            a.max_bytes
        ));
    }
    if a.snaplen == 0 || a.snaplen > MAX_SNAPLEN {
        return Err(format!(
            "--snaplen {}: must be 1 to {MAX_SNAPLEN}",
            a.snaplen
        ));
    }
    Ok(CaptureOptions {
        flow: a.flow,
        max_bytes: a.max_bytes,
        duration,
        snaplen: a.snaplen,
    })
}

fn capture_cmd(a: &CaptureArgs) -> Result<(), String> {
    let opts = capture_options(a)?;
    // A signal ends the capture early (the file stays valid), it does not kill us.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| format!("signals: {e}"))?;
    }
    let file = std::fs::File::create(&a.out)
        .map_err(|e| format!("capture file {}: {e}", a.out.display()))?;
    let (mut dp, path) = a.target.connect()?;
    let out = std::io::BufWriter::new(file);
    let (summary, _) = capture(&mut dp, &opts, out, &stop).map_err(|e| {
        format!(
            "capture into {} (datapath at {}): {e}",
            a.out.display(),
            path.display()
        )
    })?;
    println!("{}", capture_line(&summary, &a.out, a.json));
    Ok(())
}

/// The summary line, human or JSON.
fn capture_line(s: &CaptureSummary, out: &Path, json: bool) -> String {
    if json {
        json!({
            "out": out.display().to_string(),
            "frames": s.frames,
            "rx": s.rx,
            "tx": s.tx,
            "reconstructed": s.reconstructed,
            "bytes": s.bytes,
            "dropped": s.dropped,
            "reason": s.reason,
        })
        .to_string()
    } else {
        format!(
            "capture: {} frames ({} rx, {} tx, {} reconstructed), {} bytes in {}, {} dropped, ended: {}",
            s.frames,
            s.rx,
            s.tx,
            s.reconstructed,
            s.bytes,
            out.display(),
            s.dropped,
            s.reason
        )
    }
}

/// One flow per row; `extra` is "queue" (live flows) or "end" (ended flows).
fn flow_table(flows: &[Value], extra: &str) -> String {
    const COLS: [(&str, &str); 10] = [
        ("flow", "flow_id"),
        ("state", "state"),
        ("packets", "packets"),
        ("fpdus", "fpdus"),
        ("ulpdu_octets", "ulpdu_octets"),
        ("crc_err", "crc_errors"),
        ("marker_err", "marker_errors"),
        ("ooo", "out_of_order_segments"),
        ("retx", "retransmissions"),
        ("digest", "ulpdu_digest"),
    ];
    let mut heads: Vec<&str> = COLS.iter().map(|(h, _)| *h).collect();
    heads.push(extra);
    let rows: Vec<Vec<String>> = flows
        .iter()
        .map(|f| {
            let mut row: Vec<String> = COLS.iter().map(|(_, k)| cell(&f[*k])).collect();
            row.push(match extra {
                "end" => end_cell(&f["ended"]),
                k => cell(&f[k]),
            });
            row
        })
        .collect();
    table(&heads, &rows)
}

fn end_cell(v: &Value) -> String {
    match (&v["reason"], &v["mpa_error"]) {
        (Value::Null, _) => "-".into(),
        (r, Value::Null) => cell(r),
        (r, e) => format!("{} (MPA error {})", cell(r), cell(e)),
    }
}

/// A JSON value as a table cell.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// Left-aligned columns, two spaces apart.
fn table(heads: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = heads.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s.push('\n');
        s
    };
    let heads: Vec<String> = heads.iter().map(|h| h.to_uppercase()).collect();
    let mut out = line(heads.iter().map(String::as_str).collect());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_line_up_and_show_every_flow() {
        let stats = json!({
            "queues": [
                {"queue": 0, "flows": [{"flow_id": 3, "state": "Established", "fpdus": 10,
                  "ulpdu_digest": "deadbeef"}]},
                {"queue": 1, "flows": [{"flow_id": 12, "state": "CloseWait", "fpdus": 0,
                  "ulpdu_digest": null}]}
            ]
        });
        let flows = live_flows(&stats);
        assert_eq!(flows.len(), 2);
        assert_eq!(flows[1]["queue"], 1);
        let t = flow_table(&flows, "queue");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("FLOW  STATE"), "{t}");
        assert!(lines[1].starts_with("3     Established  "), "{t}");
        assert!(lines[2].starts_with("12    CloseWait    "), "{t}");
        assert!(
            lines[1].contains("deadbeef") && lines[2].ends_with(" 1"),
            "{t}"
        );
    }

    fn capture_args(args: &[&str]) -> Result<CaptureArgs, String> {
        let mut v = vec!["mpa-control", "capture"];
        v.extend_from_slice(args);
        match Cli::try_parse_from(v) {
            Ok(Cli {
                cmd: Cmd::Capture(a),
            }) => Ok(a),
            Ok(_) => Err("not capture".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn capture_wants_exactly_one_of_flow_and_all() {
        let a = capture_args(&["--all", "--out", "x.pcap", "--duration", "2"]).unwrap();
        let o = capture_options(&a).unwrap();
        assert_eq!(o.flow, None);
        assert_eq!(o.duration, Duration::from_secs(2));
        assert_eq!((o.max_bytes, o.snaplen), (64 << 20, 65535));
        let a = capture_args(&["--flow", "7", "--out", "x.pcap", "--duration", "0.25"]).unwrap();
        let o = capture_options(&a).unwrap();
        assert_eq!((o.flow, o.duration), (Some(7), Duration::from_millis(250)));
        let both = capture_args(&["--flow", "7", "--all", "--out", "x", "--duration", "1"]);
        assert!(both.unwrap_err().contains("cannot be used with"));
        let neither = capture_args(&["--out", "x", "--duration", "1"]);
        assert!(neither.unwrap_err().contains("required"));
        assert!(
            capture_args(&["--all", "--duration", "1"]).is_err(),
            "--out needed"
        );
    }

    #[test]
    fn capture_bounds_are_checked_with_clear_errors() {
        for (args, want) in [
            (vec!["--duration", "0"], "--duration 0: must be more than 0"),
            (vec!["--duration=-1"], "--duration -1"),
            (vec!["--duration", "3601"], "at most 3600 seconds"),
            (vec!["--duration", "NaN"], "--duration NaN"),
            (
                vec!["--duration", "1", "--max-bytes", "10"],
                "--max-bytes 10: must be 41",
            ),
            (
                vec!["--duration", "1", "--max-bytes", "5000000000"],
                "--max-bytes 5000000000",
            ),
            (vec!["--duration", "1", "--snaplen", "0"], "--snaplen 0"),
            (
                vec!["--duration", "1", "--snaplen", "300000"],
                "--snaplen 300000",
            ),
        ] {
            let mut v = vec!["--all", "--out", "x.pcap"];
            v.extend(args.iter());
            let a = capture_args(&v).unwrap();
            let e = capture_options(&a).unwrap_err();
            assert!(e.contains(want), "{args:?}: {e}");
        }
        let a = capture_args(&[
            "--all",
            "--out",
            "x",
            "--duration",
            "3600",
            "--max-bytes",
            "41",
        ]);
        assert!(capture_options(&a.unwrap()).is_ok());
    }

    #[test]
    fn capture_summary_line() {
        let s = CaptureSummary {
            frames: 10,
            rx: 6,
            tx: 4,
            reconstructed: 1,
            bytes: 2000,
            dropped: 0,
            reason: "duration".into(),
        };
        assert_eq!(
            capture_line(&s, Path::new("a.pcap"), false),
            "capture: 10 frames (6 rx, 4 tx, 1 reconstructed), 2000 bytes in a.pcap, 0 dropped, ended: duration"
        );
        let j: Value = serde_json::from_str(&capture_line(&s, Path::new("a.pcap"), true)).unwrap();
        assert_eq!(j["frames"], 10);
        assert_eq!(j["reason"], "duration");
        assert_eq!(j["out"], "a.pcap");
    }

    #[test]
    fn ended_cell_says_why() {
        assert_eq!(end_cell(&Value::Null), "-");
        assert_eq!(
            end_cell(&json!({"reason": "FIN", "mpa_error": null})),
            "FIN"
        );
        assert_eq!(
            end_cell(&json!({"reason": "CRC", "mpa_error": 2})),
            "CRC (MPA error 2)"
        );
    }
}
