//! `mpa-peer`: the MPA reference peer over kernel TCP.
//!
//! * `listen`: Responder; prints one JSON line per connection when it ends.
//! * `connect`: Initiator; sends N DDP tagged RDMA Writes (`--op write`) or untagged Sends
//!   (`--op send`) with the deterministic payload of [`mpa_ctl_proto::pattern`], closes, and prints one
//!   JSON line. When the Responder's Reply carries a region advertisement
//!   ([`mpa_ctl_proto::region_ad`]) the Writes go into the advertised region. `--op read`
//!   reads from the advertised region instead (RDMA Read Requests, `read.rs`); `--op
//!   pingpong` measures write ping-pong latency against `listen --echo` (`pingpong.rs`).
//! * `clock`: the clock responder `mpa-bench lat` starts on a peer host to measure the
//!   offset between the hosts' clocks (`clock.rs`).
//! * `listen --advertise` keeps the advertised region in memory and is a real Data Sink for
//!   it (`sink.rs`), with `--remote-read` a Data Source too, and with `--echo` writes every
//!   RDMA Write back into the region the Initiator advertised (`echo.rs`).
#![forbid(unsafe_code)]
// Results go through `mpa_cli::outln!`: a closed stdout must end the run quietly, not panic.
#![deny(clippy::print_stdout)]

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use mpa::crc::crc32c_append;
use mpa::endpoint::{EndpointConfig, EndpointError, MpaStream};
use mpa::startup::{Negotiated, RtrType, StartupPolicy};
use mpa::wire::ddp::{
    queue, DdpRepr, RdmapOpcode, TerminateRepr, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN,
};
use mpa::wire::fpdu::MAX_ULPDU;
use mpa_ctl_proto::pattern::PatternTable;
use mpa_ctl_proto::region_ad::{self, RegionAd};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod clock;
mod connect;
mod echo;
mod interval;
mod listen;
mod pingpong;
mod read;
mod report;
mod request;
mod sink;

use report::{emit, RegionReport, Report};

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
    /// Initiator: connect, run the startup phase, send RDMA Writes or Sends, close.
    Connect(ConnectArgs),
    /// Clock responder for `mpa-bench lat` from another host.
    ///
    /// Clock responder: answer `mpa-bench lat`'s clock probes over UDP with this host's
    /// CLOCK_MONOTONIC, so that one-way latency can be measured from another host; exits
    /// when idle.
    Clock(clock::ClockArgs),
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
    /// Seconds allowed for the startup phase and for each wait for data (at least 1).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400))]
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
    /// Seconds to wait for each connection to arrive (0 = no limit): past it the listener
    /// exits with an error instead of waiting in accept() for a sender that failed.
    #[arg(long, default_value_t = 0)]
    accept_timeout: u64,
    /// Private data for the accepting Reply (after the advertisement with --advertise).
    #[arg(long)]
    private_data: Option<String>,
    /// Advertise a region in the accepting Reply's private data (format: docs/peer.md): STag
    /// (decimal or 0x hex) and length (a size: 16M, 1G; 0x hex too; at most 1 GiB; RDMA
    /// Writes accepted), and with RECVSIZE > 0 Sends accepted into receive buffers of
    /// RECVSIZE octets (a size too). Each connection
    /// keeps a region of LEN octets in memory: RDMA Writes are checked (RFC 5041 §7.2) and
    /// placed, a violation is answered with its Terminate; Sends are only digested.
    #[arg(long, value_name = "STAG:LEN[:RECVSIZE]", value_parser = parse_advertise)]
    advertise: Option<RegionAd>,
    /// The advertised region's base TO: the Tagged Offset of its first octet.
    #[arg(long, requires = "advertise", default_value_t = 0, value_parser = parse_u64)]
    base_to: u64,
    /// The region allows remote reads: RDMA Read Requests for it are answered with Read
    /// Responses (without it they get the RDMAP Terminate 0/1/2, access rights violation).
    #[arg(long, requires = "advertise")]
    remote_read: bool,
    /// The region starts filled with the deterministic pattern `connect` sends (message 0's
    /// octet o at offset o), for `connect --op read`; otherwise it starts zeroed.
    #[arg(long, requires = "advertise")]
    fill_pattern: bool,
    /// Write every complete RDMA Write message back to the Initiator at once: an RDMA Write
    /// of the same octets to the region the Initiator advertised in its Request's private
    /// data, at the same offset (`connect --op pingpong`). A Request without an
    /// advertisement is rejected; an echo outside the Initiator's region ends the connection
    /// with a Terminate.
    #[arg(long, requires = "advertise")]
    echo: bool,
    /// Test hook: flip the first octet of every K-th echo (0: none).
    #[arg(
        long,
        hide = true,
        requires = "echo",
        default_value_t = 0,
        value_name = "K"
    )]
    echo_corrupt_every: u64,
    /// Every SECONDS, a line per connection on stderr with the octets received in the
    /// interval and their Gbit/s (as iperf3's -i).
    #[arg(short = 'i', long, value_name = "SECONDS", value_parser = mpa_cli::seconds)]
    interval: Option<Duration>,
    #[command(flatten)]
    common: Common,
}

/// What `connect` sends.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Op {
    /// Tagged RDMA Writes (RDMAP opcode 0).
    Write,
    /// Untagged Sends (RDMAP opcode 3) on QN 0, MSN from 1.
    Send,
    /// RDMA Read Requests (RDMAP opcode 1) for the advertised region.
    Read,
    /// Write ping-pong latency against `listen --echo`: one RDMA Write at a time, each
    /// awaiting its echo.
    Pingpong,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Send => "send",
            Op::Read => "read",
            Op::Pingpong => "pingpong",
        }
    }
}

#[derive(Args)]
struct ConnectArgs {
    /// Responder address and port (as iperf3's -c).
    #[arg(short = 'c', long)]
    to: SocketAddr,
    /// Messages to send (--op pingpong: round trips measured, after the warm-up; as
    /// perftest's -n). Either this or --duration.
    #[arg(
        short = 'n',
        long,
        required_unless_present = "duration",
        conflicts_with = "duration"
    )]
    count: Option<u64>,
    /// Send until SECONDS have passed instead of --count messages (--op write and send; as
    /// iperf3's -t and perftest's -D); the report says how many were sent.
    #[arg(
        short = 't',
        visible_short_alias = 'D',
        long,
        value_name = "SECONDS",
        value_parser = mpa_cli::seconds
    )]
    duration: Option<Duration>,
    /// Every SECONDS, a line on stderr with the octets sent in the interval and their
    /// Gbit/s (as iperf3's -i; --op write and send).
    #[arg(short = 'i', long, value_name = "SECONDS", value_parser = mpa_cli::seconds)]
    interval: Option<Duration>,
    /// ULPDU size in octets, DDP header included (14 octets for Writes, 18 for Sends; a size:
    /// 4096, 4K, 63K; as perftest's -s). With --op write and no advertisement, sizes below 14
    /// are sent as opaque ULPDUs too short for a DDP header, for framing tests. With --op
    /// read: the size of each RDMA Read in octets (RDMARDSZ; its Read Response is cut into
    /// FPDUs of at most MULPDU octets).
    #[arg(short = 's', long, value_parser = mpa_cli::size::<usize>)]
    size: usize,
    /// RDMA Writes (to the advertised region, else STag 1 with TO advancing), Sends, RDMA
    /// Reads from the advertised region (at most ORD outstanding: the negotiated one with
    /// --rev 2, else 8), or Write ping-pong against `listen --echo`.
    #[arg(long, value_enum, default_value_t = Op::Write)]
    op: Op,
    /// Aligned sending (RFC 5044 §5.1) over kernel TCP: messages are cut into DDP segments
    /// whose FPDUs fill every MSS-sized TCP segment exactly (docs/peer.md), only whole
    /// segments are written (a rare short one ends with MSG_EOR), so Linux starts every
    /// segment with an FPDU and a receiver can place segments that arrive out of order.
    #[arg(long, conflicts_with = "fpdu_per_segment")]
    aligned: bool,
    /// Every FPDU in a TCP segment of its own (MSG_EOR after each; one system call per FPDU):
    /// for captures read by Wireshark, whose MPA dissector finds markers only so.
    #[arg(long)]
    fpdu_per_segment: bool,
    /// Private data for the Request.
    #[arg(long)]
    private_data: Option<String>,
    /// Latency runs: each message's payload starts with the CLOCK_MONOTONIC time in
    /// nanoseconds (u64 little-endian) taken right before the message is encoded and written
    /// (every message is flushed on its own). The rest of the payload is the usual pattern, so
    /// a receiver's region no longer equals the pattern; the digest covers the stamps.
    #[arg(long)]
    timestamps: bool,
    /// Pacing in messages per second (0: unpaced).
    ///
    /// Pacing in messages per second (0: unpaced). Default: 10000 with --timestamps (so no
    /// queue builds up), unpaced otherwise.
    #[arg(long, value_name = "MSG_PER_S")]
    rate: Option<u64>,
    /// The connection's TCP congestion control (TCP_CONGESTION: `cubic`, `bbr`, `reno`, …;
    /// default: the system's `net.ipv4.tcp_congestion_control`). The report names the one used.
    #[arg(long, value_name = "NAME")]
    congestion: Option<String>,
    /// --op pingpong: round trips before the measured ones, not counted [default: 100].
    #[arg(long, value_name = "W")]
    warmup: Option<u64>,
    /// --op pingpong: write every measured round-trip time (ns) to FILE, one per line.
    #[arg(long, value_name = "FILE")]
    rtt_samples: Option<std::path::PathBuf>,
    #[command(flatten)]
    common: Common,
}

/// CLOCK_MONOTONIC in nanoseconds (shared by all network namespaces of a host).
fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// A TCP stream that can end a record: `send(MSG_EOR)` stops Linux from appending later
/// data to the same segment (and from collapsing it on retransmission).
struct EorStream(TcpStream);

impl std::io::Read for EorStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl std::io::Write for EorStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl mpa::endpoint::Transport for EorStream {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> std::io::Result<()> {
        self.0.set_read_timeout(timeout)
    }

    fn write_record(&mut self, mut buf: &[u8]) -> std::io::Result<()> {
        use nix::sys::socket::{send, MsgFlags};
        use std::os::fd::AsRawFd;
        while !buf.is_empty() {
            match send(self.0.as_raw_fd(), buf, MsgFlags::MSG_EOR) {
                Ok(n) => buf = &buf[n..],
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

pub(crate) use mpa_cli::usage;

fn config(c: &Common, private_data: Vec<u8>, default_rev: u8) -> anyhow::Result<EndpointConfig> {
    let rev = c.rev.unwrap_or(default_rev);
    if c.p2p && rev < 2 {
        usage!("--p2p needs --rev 2");
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
    if private_data.len() > 512 {
        usage!(
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
    if let Some(code) = mpa_ops::generate::if_asked(<Cli as clap::CommandFactory>::command, "1") {
        return code;
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Listen(a) => listen::listen(a),
        Cmd::Connect(a) => connect::connect(a),
        Cmd::Clock(a) => clock::clock(a),
    };
    // 0 done, 1 failed at run time (a check, the peer, the network), 2 a usage error (clap's
    // own, or a combination of options it cannot check). A reader that closed stdout early
    // changes none of it: the reports it did not read were its choice.
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("mpa-peer: {e:#}");
            mpa_cli::exit_code(&e)
        }
    }
}

/// A number in decimal or 0x hex.
fn num<T: TryFrom<u64>>(what: &str, v: &str) -> Result<T, String> {
    let n = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse::<u64>(),
    }
    .map_err(|e| format!("{what} {v:?}: {e}"))?;
    T::try_from(n).map_err(|_| format!("{what} {v} is too large"))
}

/// `--base-to N`.
fn parse_u64(s: &str) -> Result<u64, String> {
    num("value", s)
}

/// A size in 0x hex, or as [`mpa_cli::size()`] takes it (`4096`, `16M`).
fn size_or_hex<T: TryFrom<u64> + mpa_cli::size::Bounded>(what: &str, v: &str) -> Result<T, String> {
    if v.starts_with("0x") || v.starts_with("0X") {
        return num(what, v);
    }
    mpa_cli::size(v).map_err(|e| format!("{what}: {e}"))
}

/// `--advertise STAG:LEN[:RECVSIZE]`.
fn parse_advertise(s: &str) -> Result<RegionAd, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let (stag, len, recv) = match parts[..] {
        [stag, len] => (stag, len, "0"),
        [stag, len, recv] => (stag, len, recv),
        _ => return Err(format!("expected STAG:LEN[:RECVSIZE], got {s:?}")),
    };
    let recv_buf_size: u32 = size_or_hex("RECVSIZE", recv)?;
    let ad = RegionAd {
        writes: true,
        sends: recv_buf_size > 0,
        stag: num("STAG", stag)?,
        len: size_or_hex("LEN", len)?,
        base_to: 0,
        recv_buf_size,
    };
    ad.check().map_err(|e| e.to_string())?;
    Ok(ad)
}

/// Why `connect` stopped early.
enum ConnectError {
    /// A protocol or I/O error from the endpoint.
    Mpa(EndpointError),
    /// Our own refusal (the advertisement rules the operation out).
    Refused(String),
    /// The peer's message broke a DDP/RDMAP rule: we sent this Terminate.
    Violation(TerminateRepr, String),
    /// What the peer sent failed a check no protocol rule covers (an echo's octets).
    Failed(String),
}

impl From<EndpointError> for ConnectError {
    fn from(e: EndpointError) -> Self {
        ConnectError::Mpa(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertise_argument() {
        assert_eq!(
            parse_advertise("0x10:4096"),
            Ok(RegionAd {
                writes: true,
                sends: false,
                stag: 0x10,
                len: 4096,
                base_to: 0,
                recv_buf_size: 0
            })
        );
        let ad = parse_advertise("7:1048576:2048").unwrap();
        assert!(ad.writes && ad.sends);
        assert_eq!((ad.stag, ad.len, ad.recv_buf_size), (7, 1 << 20, 2048));
        assert!(!parse_advertise("7:100:0").unwrap().sends);
        assert!(parse_advertise("7").is_err());
        assert!(parse_advertise("7:1:2:3").is_err());
        assert!(parse_advertise("0x100000000:1")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_advertise("x:1").is_err());
        // Sizes with suffixes; the bad one named.
        let ad = parse_advertise("0x2a:16M:4K").unwrap();
        assert_eq!((ad.stag, ad.len, ad.recv_buf_size), (0x2a, 16 << 20, 4096));
        let e = parse_advertise("7:16Q").unwrap_err();
        assert!(e.contains("LEN: \"16Q\" is not a size"), "{e}");
        assert!(parse_advertise("7:1:8G").unwrap_err().contains("too large"));
    }
}
