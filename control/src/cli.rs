//! The command line of `mpa-control`: what each subcommand takes, parsed by clap. What the
//! commands do is in [`crate::commands`].

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use mpa::startup::RtrType;
use mpa_control::config::{Config, DEFAULT_SOCKET};
use mpa_control::datapath_client::DatapathClient;
use mpa_ctl_proto::capture::{DEFAULT_MAX_BYTES, DEFAULT_SNAPLEN};
use mpa_ops::logs::LogFormat;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "mpa-control",
    version,
    about = "mpa-xdp connection setup: the MPA Responder daemon, and datapath operations"
)]
pub(crate) struct Cli {
    /// Log lines as text or JSON.
    ///
    /// Log lines on stderr as text (coloured only on a terminal) or as one JSON object per
    /// line (for journald and log collectors).
    #[arg(long, value_enum, default_value = "text", global = true)]
    pub(crate) log_format: LogFormat,
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// Accept MPA connections on the configured listeners and hand them to the datapath.
    Serve {
        /// TOML configuration file (docs/operations.md has a commented example).
        #[arg(long)]
        config: PathBuf,
        /// Serve metrics for Prometheus (OpenMetrics text) at http://ADDR/metrics (overrides
        /// the file's `metrics`; port 0: any free port, logged).
        #[arg(long, value_name = "ADDR")]
        metrics: Option<SocketAddr>,
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
    /// MPA Initiator: connect, start MPA and hand the connection to the datapath.
    ///
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
    /// Capture a flow's frames (or all) into a pcap file.
    ///
    /// Capture the frames the datapath receives and sends (one flow, or all) into a pcap file
    /// for Wireshark/tshark. Bounded in time and size; one capture at a time per datapath.
    /// The MPA startup frames, which the kernel carried before the hand-over, are rebuilt
    /// from it and written first, so that Wireshark's MPA dissector recognises the FPDUs.
    /// Ends after --duration, at --max-bytes, or on SIGINT/SIGTERM; prints one line.
    Capture(CaptureArgs),
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("which").required(true).args(["flow", "all"])))]
pub(crate) struct CaptureArgs {
    /// Capture this flow only (the id from `flows`).
    #[arg(long)]
    pub(crate) flow: Option<u64>,
    /// Capture every frame the datapath receives or sends.
    #[arg(long)]
    pub(crate) all: bool,
    /// The pcap file to write (replaced if it exists).
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Seconds to capture (more than 0, at most 3600; fractions allowed).
    #[arg(long)]
    pub(crate) duration: f64,
    /// Largest file, octets (pcap headers included; at most 4 GiB).
    #[arg(long, default_value_t = DEFAULT_MAX_BYTES)]
    pub(crate) max_bytes: u64,
    /// Octets kept of each frame (1 to 262144).
    #[arg(long, default_value_t = DEFAULT_SNAPLEN)]
    pub(crate) snaplen: u32,
    #[command(flatten)]
    pub(crate) target: Target,
    /// Print the summary as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct ConnectArgs {
    /// The Responder's address and port.
    #[arg(long)]
    pub(crate) to: SocketAddr,
    #[command(flatten)]
    pub(crate) target: Target,
    /// Ask the Responder for markers in the FPDUs it sends us (our Request's M flag).
    #[arg(long)]
    pub(crate) markers: bool,
    /// Administratively suppress our CRC request (C=0; CRCs are still used if the
    /// Responder asks).
    #[arg(long)]
    pub(crate) no_crc: bool,
    /// MPA revision of the Request [default: 2 with --p2p, else 1].
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub(crate) rev: Option<u8>,
    /// Peer-to-peer model (RFC 6581, needs revision 2): the datapath sends the agreed RTR
    /// indication as the first FPDU.
    #[arg(long)]
    pub(crate) p2p: bool,
    /// The RTR indications we offer (repeat or comma-separate; needs --p2p) [default: all].
    #[arg(long, value_enum, value_delimiter = ',', requires = "p2p")]
    pub(crate) rtr: Vec<RtrArg>,
    /// Private data for the Request.
    #[arg(long)]
    pub(crate) private_data: Option<String>,
    /// Protection domain of the connection: the peer's RDMA Writes and Sends place into its
    /// registered regions and posted buffers.
    #[arg(long)]
    pub(crate) pd: Option<u32>,
    /// The Responder aligns FPDUs with segments: without markers, out-of-order segments
    /// whose first FPDU verifies by CRC are placed at once.
    #[arg(long, requires = "pd")]
    pub(crate) aligned_sender: bool,
    /// Seconds allowed for the TCP connect and for the wait for the Reply (at least 1).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub(crate) timeout: u64,
    /// Close the flow (CloseFlow) after this many seconds [default: wait until it ends].
    #[arg(long)]
    pub(crate) hold: Option<f64>,
    /// Print the line as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// An RTR indication (RFC 6581 §9.2), as named on the command line.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum RtrArg {
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
pub(crate) struct Target {
    /// The datapath's control socket [default: the config's datapath_socket, else
    /// /run/mpa-datapath.sock].
    #[arg(long)]
    pub(crate) socket: Option<PathBuf>,
    /// Take the socket path from this configuration file.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
}

impl Target {
    pub(crate) fn path(&self) -> Result<PathBuf, String> {
        if let Some(s) = &self.socket {
            return Ok(s.clone());
        }
        if let Some(c) = &self.config {
            let cfg = Config::load(c).map_err(|e| format!("config {}: {e}", c.display()))?;
            return Ok(cfg.datapath_socket);
        }
        Ok(PathBuf::from(DEFAULT_SOCKET))
    }

    pub(crate) fn connect(&self) -> Result<(DatapathClient, PathBuf), String> {
        let path = self.path()?;
        let c = DatapathClient::connect(&path, Duration::from_secs(5))
            .map_err(|e| format!("cannot reach the datapath at {}: {e}", path.display()))?;
        Ok((c, path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zero timeout was raised to one second without a word; now it is refused.
    #[test]
    fn connect_takes_no_zero_timeout() {
        let parse = |t: &str| {
            Cli::try_parse_from([
                "mpa-control",
                "connect",
                "--to",
                "192.0.2.1:5000",
                "--timeout",
                t,
            ])
        };
        let e = parse("0").err().expect("--timeout 0 taken");
        assert!(e.to_string().contains("0 is not in 1..=86400"), "{e}");
        assert!(parse("1").is_ok());
        assert!(parse("86401").is_err());
    }
}
