//! `mpa-peer`: the MPA reference peer over kernel TCP.
//!
//! * `listen`: Responder; prints one JSON line per connection when it ends.
//! * `connect`: Initiator; sends N DDP tagged RDMA Writes with a deterministic payload, closes,
//!   and prints one JSON line.
#![forbid(unsafe_code)]

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use mpa::crc::crc32c_append;
use mpa::endpoint::{EndpointConfig, EndpointError, MpaStream};
use mpa::startup::{Negotiated, StartupPolicy};
use mpa::wire::ddp::{DdpRepr, RdmapOpcode, TAGGED_HEADER_LEN};
use mpa::wire::fpdu::MAX_ULPDU;
use serde::Serialize;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "mpa-peer",
    version,
    about = "MPA (RFC 5044/6581) reference peer over kernel TCP"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Responder: accept connections, run the startup phase, receive ULPDUs.
    Listen(ListenArgs),
    /// Initiator: connect, run the startup phase, send RDMA Writes, close.
    Connect(ConnectArgs),
}

#[derive(Args, Clone)]
struct Common {
    /// Ask the peer to put markers in the FPDUs it sends us (our frame's M flag).
    #[arg(long)]
    markers: bool,
    /// Ask for CRCs (the default; CRC is used when either side asks).
    #[arg(long, overrides_with = "no_crc")]
    #[allow(dead_code)]
    crc: bool,
    /// Administratively suppress our CRC request (RFC 5044 §4.4).
    #[arg(long = "no-crc", overrides_with = "crc")]
    no_crc: bool,
    /// MPA revision: connect sends a frame of this revision (default 1); listen accepts
    /// revisions up to this one (default 2; revision 1 is always accepted).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=2))]
    rev: Option<u8>,
    /// Peer-to-peer model with an RTR indication (needs --rev 2).
    #[arg(long)]
    p2p: bool,
    /// Seconds allowed for the startup phase and for each wait for data.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
}

#[derive(Args)]
struct ListenArgs {
    /// Address and port to listen on.
    #[arg(long)]
    bind: SocketAddr,
    /// Connections to serve before exiting (0 = forever).
    #[arg(long, default_value_t = 1)]
    connections: u64,
    /// Private data for the accepting Reply.
    #[arg(long)]
    private_data: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct ConnectArgs {
    /// Responder address and port.
    #[arg(long)]
    to: SocketAddr,
    /// ULPDUs to send.
    #[arg(long)]
    count: u64,
    /// ULPDU size in octets (DDP header included; sizes below 14 are sent as opaque ULPDUs
    /// too short for a DDP header, for framing tests).
    #[arg(long)]
    size: usize,
    /// Private data for the Request.
    #[arg(long)]
    private_data: Option<String>,
    #[command(flatten)]
    common: Common,
}

/// The one JSON line per connection.
#[derive(Serialize, Default)]
struct Report {
    peer: String,
    rev: Option<u8>,
    markers_rx: Option<bool>,
    markers_tx: Option<bool>,
    crc: Option<bool>,
    ulpdus: u64,
    ulpdu_bytes: u64,
    ulpdu_digest: String,
    error_code: Option<u8>,
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    private_data: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rtr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mulpdu: Option<usize>,
    seconds: f64,
}

impl Report {
    fn negotiated(&mut self, n: &Negotiated) {
        self.rev = Some(n.rev);
        self.markers_rx = Some(n.markers_rx);
        self.markers_tx = Some(n.markers_tx);
        self.crc = Some(n.crc);
        self.private_data = Some(String::from_utf8_lossy(&n.peer_private_data).into_owned());
        self.rtr = n.rtr.map(|r| format!("{r:?}"));
    }

    fn fail(&mut self, e: &EndpointError) {
        self.error_code = e.code().map(|c| c.code());
        self.error = Some(e.to_string());
    }
}

fn config(
    c: &Common,
    private_data: Option<&str>,
    default_rev: u8,
) -> anyhow::Result<EndpointConfig> {
    let rev = c.rev.unwrap_or(default_rev);
    if c.p2p && rev < 2 {
        bail!("--p2p needs --rev 2");
    }
    let policy = StartupPolicy {
        revision: rev,
        accept_rev2: rev >= 2,
        markers_required: c.markers,
        crc_suppressed_by_admin: c.no_crc,
        p2p: c.p2p,
        startup_timeout: Duration::from_secs(c.timeout),
        ..StartupPolicy::default()
    };
    policy.validate().context("policy")?;
    let private_data = private_data.unwrap_or("").as_bytes().to_vec();
    if private_data.len() > 512 {
        bail!(
            "private data is {} octets, at most 512 fit in a startup frame",
            private_data.len()
        );
    }
    Ok(EndpointConfig {
        policy,
        private_data,
        emss: 1448,
    })
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Listen(a) => listen(a),
        Cmd::Connect(a) => connect(a),
    };
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("mpa-peer: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn emit(report: &Report) {
    // One line per connection; stdout is line-buffered through println.
    match serde_json::to_string(report) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("mpa-peer: cannot encode report: {e}"),
    }
}

/// Serves connections; returns whether all ended without error.
fn listen(a: ListenArgs) -> anyhow::Result<bool> {
    let cfg = config(&a.common, a.private_data.as_deref(), 2)?;
    let listener = TcpListener::bind(a.bind).with_context(|| format!("bind {}", a.bind))?;
    // Tests and scripts read the bound address (with --bind ...:0) from this line.
    eprintln!("mpa-peer: listening on {}", listener.local_addr()?);
    let (tx, rx) = mpsc::channel::<bool>();
    let mut started = 0u64;
    let timeout = Duration::from_secs(a.common.timeout);
    while a.connections == 0 || started < a.connections {
        let (sock, peer) = listener.accept().context("accept")?;
        started += 1;
        let cfg = cfg.clone();
        let tx = tx.clone();
        std::thread::spawn(move || {
            let report = serve(sock, peer, &cfg, timeout);
            let ok = report.error.is_none();
            emit(&report);
            if let Some(e) = &report.error {
                eprintln!("mpa-peer: {peer}: {e}");
            }
            let _ = tx.send(ok);
        });
    }
    drop(tx);
    // Wait for every connection thread, not just the first failure.
    Ok(rx.iter().filter(|ok| !ok).count() == 0)
}

fn serve(sock: TcpStream, peer: SocketAddr, cfg: &EndpointConfig, timeout: Duration) -> Report {
    let t0 = Instant::now();
    let mut report = Report {
        peer: peer.to_string(),
        ..Report::default()
    };
    let _ = sock.set_nodelay(true);
    let mut digest = 0u32;
    let r = (|| -> Result<(), EndpointError> {
        let mut s = MpaStream::accept(sock, cfg)?;
        report.negotiated(s.negotiated());
        while let Some(_n) = s.recv_with(Some(timeout), |u| {
            for p in u.pieces() {
                digest = crc32c_append(digest, p);
            }
        })? {}
        let st = s.stats();
        report.ulpdus = st.ulpdus_rx;
        report.ulpdu_bytes = st.ulpdu_octets_rx;
        Ok(())
    })();
    if let Err(e) = r {
        report.fail(&e);
    }
    report.ulpdu_digest = format!("{digest:08x}");
    report.seconds = t0.elapsed().as_secs_f64();
    report
}

/// The deterministic payload octet at message offset `i` of ULPDU number `n`.
#[cfg(test)]
fn pattern(n: u64, i: usize) -> u8 {
    ((n as usize)
        .wrapping_mul(131)
        .wrapping_add(i.wrapping_mul(7))
        .wrapping_add(3)
        % 251) as u8
}

/// The same octets, sliced out of one precomputed table: `pattern(n, i)` is periodic in `i`
/// with period 251 and ULPDU `n` starts `198·n mod 251` into the period (7·198 ≡ 131), so the
/// sender copies instead of computing each octet.
struct PatternTable(Vec<u8>);

impl PatternTable {
    fn new(len: usize) -> Self {
        PatternTable((0..len + 251).map(|j| ((j * 7 + 3) % 251) as u8).collect())
    }

    fn payload(&self, n: u64, len: usize) -> &[u8] {
        let k = ((n % 251) * 198 % 251) as usize;
        &self.0[k..k + len]
    }
}

fn connect(a: ConnectArgs) -> anyhow::Result<bool> {
    let cfg = config(&a.common, a.private_data.as_deref(), 1)?;
    if a.size > MAX_ULPDU {
        bail!(
            "--size {} exceeds the 64768-octet ULPDU maximum (RFC 5044 §3)",
            a.size
        );
    }
    let t0 = Instant::now();
    let sock = TcpStream::connect_timeout(&a.to, Duration::from_secs(a.common.timeout))
        .with_context(|| format!("connect {}", a.to))?;
    sock.set_nodelay(true)?;
    let mut report = Report {
        peer: a.to.to_string(),
        ..Report::default()
    };
    let mut digest = 0u32;
    let r = (|| -> Result<(), EndpointError> {
        let mut s = MpaStream::connect(sock, &cfg)?;
        report.negotiated(s.negotiated());
        report.mulpdu = Some(s.mulpdu());
        let mut ulpdu = vec![0u8; a.size];
        let table = PatternTable::new(a.size);
        let mut to = 0u64;
        for n in 0..a.count {
            if a.size >= TAGGED_HEADER_LEN {
                let h = DdpRepr::Tagged {
                    last: true,
                    opcode: RdmapOpcode::RdmaWrite,
                    stag: 1,
                    to,
                };
                h.emit(&mut ulpdu, s.negotiated().ddp_rdmap_version);
                let len = a.size - TAGGED_HEADER_LEN;
                ulpdu[TAGGED_HEADER_LEN..].copy_from_slice(table.payload(n, len));
                to += (a.size - TAGGED_HEADER_LEN) as u64;
            } else {
                ulpdu.copy_from_slice(table.payload(n, a.size));
            }
            digest = crc32c_append(digest, &ulpdu);
            s.send(&ulpdu)?;
        }
        s.flush()?;
        let st = s.stats();
        report.ulpdus = st.ulpdus_tx;
        report.ulpdu_bytes = st.ulpdu_octets_tx;
        s.get_ref().shutdown(std::net::Shutdown::Write)?;
        // Wait for the peer to close; a Terminate it sends instead becomes our error.
        while s
            .recv_with(Some(Duration::from_secs(a.common.timeout)), |_| {})?
            .is_some()
        {}
        Ok(())
    })();
    if let Err(e) = r {
        report.fail(&e);
        eprintln!("mpa-peer: {}: {e}", a.to);
    }
    report.ulpdu_digest = format!("{digest:08x}");
    report.seconds = t0.elapsed().as_secs_f64();
    let ok = report.error.is_none();
    emit(&report);
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_table_matches_the_definition() {
        let t = PatternTable::new(600);
        for n in [0u64, 1, 2, 250, 251, 252, 65535, 1 << 33] {
            let p = t.payload(n, 600);
            for (i, &b) in p.iter().enumerate() {
                assert_eq!(b, pattern(n, i), "n {n} i {i}");
            }
        }
    }
}
