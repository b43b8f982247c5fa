//! What an experiment is asked to do: the bed it runs on ([`BedArgs`], with the two-host
//! [`NicArgs`]), how FPDUs are framed ([`FramingArgs`]), and one transfer ([`Run`]: `demo`'s
//! options, and each transfer of the other experiments).

use anyhow::Result;
use clap::Args;
use mpa_datapath::io::ethtool::Ethtool;
use mpa_datapath::io::nic_queues::QueueSteering;
use mpa_harness::datapath::DatapathOptions;
use mpa_testbed::{run_in_netns, BedConfig, Impairment, TestBed};
use serde::{Deserialize, Serialize};

/// The bed every experiment with a kernel sender runs on: the private namespace bed (its MTU,
/// loss or impairment bridge, RX queues, split over two CPUs) or, with `--iface`, this host's
/// interface and a peer host.
#[derive(Args, Clone, Debug, PartialEq)]
pub(crate) struct BedArgs {
    /// MTU of the bed (jumbo frames up to 9000 and beyond: the XDP program is frags-aware).
    #[arg(long, default_value_t = 1500)]
    pub(crate) mtu: u32,
    /// Loss in the bridge namespace, percent (0: direct veth pair).
    #[arg(long, default_value_t = 0)]
    pub(crate) loss: u8,
    /// Impair with our bridge instead: drop, reorder, duplicate, delay, corrupt.
    ///
    /// The impairment bridge instead of the Linux bridge, both directions possible, seeded:
    /// e.g. `drop=20,reorder=5,dup=2,corrupt=0.1,delay-us=100,seed=7,both` (rates in percent
    /// of TCP frames to/from the port; the syntax: docs/benchmarks.md, "Impairment bridge").
    #[arg(long, value_name = "SPEC", conflicts_with = "loss")]
    pub(crate) impair: Option<Impairment>,
    /// RX queues of the bed's interfaces and of the datapath.
    #[arg(long, default_value_t = 1)]
    pub(crate) queues: u32,
    /// The bed as two hosts on two CPUs: the sender and its veth's RX (the ACKs, by RPS) on
    /// CPU 0, the receiver (the kernel Responder, or the datapath's workers) on CPU 1
    /// (docs/benchmarks.md, "bw"). Both receivers alike; not with --iface.
    #[arg(long)]
    pub(crate) split_cpus: bool,
    /// Where the datapath attaches its XDP program: `native` (in the driver) or `generic`
    /// (skb mode: any interface, slower; for drivers without native XDP).
    #[arg(long, value_enum, default_value = "native")]
    pub(crate) xdp_mode: XdpMode,
    #[command(flatten)]
    pub(crate) nic: NicArgs,
}

/// `--xdp-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum XdpMode {
    /// In the driver.
    Native,
    /// On the skb path.
    Generic,
}

impl XdpMode {
    /// The attach mode the datapath is started with.
    pub(crate) fn attach(self) -> mpa_bpf::AttachMode {
        match self {
            XdpMode::Native => mpa_bpf::AttachMode::Driver,
            XdpMode::Generic => mpa_bpf::AttachMode::Generic,
        }
    }
}

impl Default for BedArgs {
    /// The defaults of the command line: the direct veth pair, MTU 1500, one queue.
    fn default() -> Self {
        BedArgs {
            mtu: 1500,
            loss: 0,
            impair: None,
            queues: 1,
            split_cpus: false,
            xdp_mode: XdpMode::Native,
            nic: NicArgs::default(),
        }
    }
}

impl BedArgs {
    /// The datapath's options every experiment starts from on `bed`: its queues, where XDP
    /// attaches, and how flows are kept on the served queues (`--steer`).
    pub(crate) fn datapath_options(&self, bed: &TestBed) -> Result<DatapathOptions> {
        Ok(DatapathOptions {
            queues: self.queues,
            xdp_mode: self.xdp_mode.attach(),
            queue_steering: self.queue_steering(bed)?,
            ..DatapathOptions::default()
        })
    }

    /// `--steer` on `bed`. The private bed's interfaces have --queues RX queues: nothing to
    /// steer there. On --iface, `auto` reads the NIC's channels in the datapath's namespace.
    fn queue_steering(&self, bed: &TestBed) -> Result<QueueSteering> {
        if self.nic.iface.is_none() {
            return Ok(QueueSteering::Off);
        }
        Ok(match self.nic.steer {
            Steer::Off => QueueSteering::Off,
            Steer::Channels => QueueSteering::Channels,
            Steer::Auto => {
                let iface = bed.if_b.clone();
                let channels = run_in_netns(&bed.ns_b, move || Ethtool::new(&iface)?.channels())?;
                match channels {
                    Ok(ch) if ch.rx_queues() > self.queues => {
                        tracing::info!(
                            iface = %bed.if_b,
                            rx_queues = ch.rx_queues(),
                            served = self.queues,
                            "the NIC's channels are set to the served queues for each datapath \
                             run (--steer auto; --steer off leaves them)"
                        );
                        QueueSteering::Channels
                    }
                    // Not every driver reports channels: then there is nothing to set.
                    _ => QueueSteering::Off,
                }
            }
        })
    }

    /// Whether frames are lost, reordered or otherwise impaired on the way (the bridge
    /// namespace is in between).
    pub(crate) fn impaired(&self) -> bool {
        self.loss > 0 || self.impair.is_some()
    }

    /// Brings the bed up: the peer host through real NICs when `--iface` names one, else the
    /// private namespace bed (the direct veth pair, or the bridge with loss or impairment).
    pub(crate) fn bed(&self) -> Result<TestBed> {
        match self.nic.external() {
            Some(_) if self.loss > 0 => mpa_cli::usage!(
                "--loss needs the private bed's bridge; on real interfaces impose loss on the \
                 path yourself"
            ),
            Some(_) if self.impair.is_some() => mpa_cli::usage!(
                "--impair needs the private bed's bridge namespace; on real interfaces impair \
                 the path yourself"
            ),
            Some(_) if self.split_cpus => mpa_cli::usage!(
                "--split-cpus splits the private bed over two CPUs; on real interfaces the \
                 sender is another host already"
            ),
            Some(peer) => Ok(TestBed::external(peer, self.mtu)?),
            None => self.namespace_bed(),
        }
    }

    fn namespace_bed(&self) -> Result<TestBed> {
        if self.split_cpus {
            crate::bed::split::check_cpus()?;
        }
        let bed = TestBed::up(BedConfig {
            bridge: self.impaired(),
            loss_percent: self.loss,
            loss_port: PORT,
            mtu: self.mtu,
            queues: self.queues,
            impair: self.impair.clone(),
        })?;
        if crate::bed::split::applies(&bed, self.split_cpus) {
            crate::bed::split::steer_sender_rx(&bed)?;
        }
        Ok(bed)
    }
}

/// How FPDUs are framed both ways: markers and CRC (the default), CRC alone, or neither.
#[derive(Args, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FramingArgs {
    /// No markers, no CRC (default: markers and CRC both ways).
    #[arg(long)]
    pub(crate) plain: bool,
    /// CRC but no markers; with an aligned sender the datapath then places out-of-order
    /// segments whose first FPDU verifies by CRC (the listener's `aligned_sender`).
    #[arg(long, conflicts_with = "plain")]
    pub(crate) no_markers: bool,
}

impl FramingArgs {
    /// Markers both ways.
    pub(crate) fn markers(&self) -> bool {
        !self.plain && !self.no_markers
    }

    /// CRC both ways.
    pub(crate) fn crc(&self) -> bool {
        !self.plain
    }

    pub(crate) fn framing(&self) -> Framing {
        match (self.plain, self.no_markers) {
            (true, _) => Framing::Plain,
            (false, true) => Framing::Crc,
            (false, false) => Framing::MarkersCrc,
        }
    }
}

/// The framing a run used, as documents record it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Framing {
    #[serde(rename = "markers+crc")]
    MarkersCrc,
    #[serde(rename = "crc")]
    Crc,
    #[serde(rename = "plain")]
    Plain,
}

impl Framing {
    /// As documents name it.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Framing::MarkersCrc => "markers+crc",
            Framing::Crc => "crc",
            Framing::Plain => "plain",
        }
    }

    /// In words, for the tables' heading.
    pub(crate) fn words(self) -> &'static str {
        match self {
            Framing::MarkersCrc => "markers + CRC",
            Framing::Crc => "CRC, no markers",
            Framing::Plain => "no markers, no CRC",
        }
    }
}

/// One transfer's options: `demo`'s, and each transfer of the other experiments.
#[derive(Args, Clone, Debug)]
pub struct Run {
    /// ULPDU size (4096 or 4K; as perftest's -s).
    #[arg(short = 's', long, default_value_t = 4096, value_parser = mpa_cli::size::<usize>)]
    pub(crate) size: usize,
    #[command(flatten)]
    pub(crate) bed: BedArgs,
    #[command(flatten)]
    pub(crate) framing: FramingArgs,
    #[command(flatten)]
    pub(crate) transfer: TransferArgs,
    /// Print one JSON document with every measured value on stdout (the text goes to
    /// stderr).
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// What the sender sends and how the receiving datapath is set up: the same on `demo` and
/// `bw` (`soak` and `lat` choose their own).
#[derive(Args, Clone, Debug)]
pub(crate) struct TransferArgs {
    /// Octets each connection sends (per run; a size: 256M, 1G).
    #[arg(long, default_value_t = 256 << 20, value_parser = mpa_cli::size::<u64>)]
    pub(crate) bytes: u64,
    /// Send for SECONDS instead of --bytes (as iperf3's -t, perftest's -D): each sender sends
    /// until the time is up; the results count what was sent. Not with --op send (its buffers
    /// are posted for a known count).
    #[arg(
        short = 't',
        visible_short_alias = 'D',
        long,
        value_name = "SECONDS",
        value_parser = mpa_cli::seconds
    )]
    pub(crate) duration: Option<std::time::Duration>,
    /// Every SECONDS, a line on stderr per sender with the octets it sent in the interval and
    /// their Gbit/s (as iperf3's -i; `mpa-peer connect --interval`).
    #[arg(short = 'i', long, value_name = "SECONDS", value_parser = mpa_cli::seconds)]
    pub(crate) interval: Option<std::time::Duration>,
    /// What the sender does: RDMA Writes into a registered region (checked byte for byte),
    /// Sends into posted buffers (checked likewise), or `count`: no placement (payloads only
    /// counted and digested).
    #[arg(long, value_enum, default_value = "write")]
    pub(crate) op: Op,
    /// Region size for `--op write` (writes wrap around in whole slots).
    #[arg(long, default_value_t = 16 << 20, value_parser = mpa_cli::size::<u64>)]
    pub(crate) region_bytes: u64,
    /// Whether the sender aligns FPDUs with TCP segments (RFC 5044 §5.1; what lets segments
    /// that arrive out of order be placed on their own). `auto`: when there is loss. Aligned
    /// sending cuts messages so that FPDUs fill every TCP segment exactly.
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) align: Align,
    /// Connections at once, each with its own sender carrying `--bytes` (and, when placing,
    /// its own region in its own protection domain); goodput is their sum.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub(crate) connections: u32,
    /// The datapath TCP's receive buffer and reassembly limit, octets (default: TcpConfig's).
    #[arg(long, value_parser = mpa_cli::size::<usize>)]
    pub(crate) rcv_buf: Option<usize>,
    /// The datapath TCP's `ooo_ack_every` (default: TcpConfig's).
    #[arg(long)]
    pub(crate) ooo_ack_every: Option<u32>,
    /// Keep each datapath worker polling this many µs after its last frame before it may
    /// sleep (`mpa-datapath --spin-us`; 0: sleep after 256 empty polls).
    #[arg(long, default_value_t = 0)]
    pub(crate) spin_us: u64,
    /// The sender's TCP congestion control (`mpa-peer connect --congestion`: cubic, bbr, …;
    /// default: the sender namespace's, which follows the host's). Both receivers alike.
    #[arg(long, value_name = "NAME")]
    pub(crate) sender_cc: Option<String>,
}

/// `--align`: whether the sender aligns FPDUs with TCP segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Align {
    Auto,
    On,
    Off,
}

impl Run {
    /// Markers both ways.
    pub(crate) fn markers(&self) -> bool {
        self.framing.markers()
    }

    /// Whether the sender aligns FPDUs with TCP segments.
    pub(crate) fn aligned(&self) -> bool {
        match self.transfer.align {
            Align::Auto => self.bed.impaired(),
            Align::On => true,
            Align::Off => false,
        }
    }
}

/// `--op`: what the sender does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Op {
    Write,
    Send,
    Count,
}

/// `bw --sender`: which side sends.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SenderSide {
    /// Kernel TCP (`mpa-peer connect`) sends; the datapath and the kernel Responder receive.
    Kernel,
    /// The datapath sends; the kernel `mpa-peer listen` receives.
    Datapath,
}

/// Protection domain of the bench's (first) connection and region; connection `i` of a run
/// with several uses `PD + i`.
pub(crate) const PD: u32 = 1;

/// The port the hand-over listener (or the kernel Responder) listens on in ns b.
pub(crate) const PORT: u16 = 7777;

/// The experiments on real NICs instead of the private bed: XDP on this host's `--iface`, the
/// sender (`mpa-peer connect`) on the peer host, started through `--peer-exec`.
#[derive(Args, Clone, Debug, Default, PartialEq)]
pub(crate) struct NicArgs {
    /// Run on this interface of this host instead of the private namespace bed (the datapath
    /// attaches XDP here; the kernel Responder listens on its address).
    #[arg(long, requires = "peer")]
    pub(crate) iface: Option<String>,
    /// The sender host's address.
    #[arg(long, requires = "iface")]
    pub(crate) peer: Option<std::net::IpAddr>,
    /// This host's address on --iface (default: the interface's first IPv4 address).
    #[arg(long, requires = "iface")]
    pub(crate) local: Option<std::net::IpAddr>,
    /// The command prefix that runs the sender on the peer host (default: `ssh root@PEER`).
    #[arg(long, requires = "iface")]
    pub(crate) peer_exec: Option<String>,
    /// The directory of `mpa-peer` on the peer host (default: the same path as here).
    #[arg(long, requires = "iface")]
    pub(crate) peer_bin_dir: Option<String>,
    /// How the datapath keeps the peer's segments on the queues it serves when --iface has
    /// more RX queues than --queues (docs/nics.md, "4. Queues, and putting MPA flows on
    /// them"): `auto` sets the NIC's channel count to --queues for each datapath run and puts
    /// it back after (`mpa-datapath --steer channels`) when the NIC has more and reports its
    /// channels; `channels` always; `off` leaves the NIC as it is (segments hashed to another
    /// queue are dropped and counted as `steered_no_xsk`: for NICs whose RSS you spread
    /// yourself).
    #[arg(long, value_enum, default_value = "auto", requires = "iface")]
    pub(crate) steer: Steer,
}

/// `--steer`: how the datapath's runs on --iface keep flows on their queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Steer {
    /// Channels when the NIC has more RX queues than are served.
    #[default]
    Auto,
    /// Leave the NIC as it is.
    Off,
    /// The NIC's channel count set to the served queues for each run.
    Channels,
}

impl NicArgs {
    /// The external bed these options name, if any.
    pub(crate) fn external(&self) -> Option<mpa_testbed::ExternalPeer> {
        let (iface, peer) = (self.iface.clone()?, self.peer?);
        let exec = match &self.peer_exec {
            Some(p) => p.split_whitespace().map(String::from).collect(),
            None => vec!["ssh".into(), format!("root@{peer}")],
        };
        Some(mpa_testbed::ExternalPeer {
            iface,
            local: self
                .local
                .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
            peer,
            exec,
            bin_dir: self.peer_bin_dir.clone(),
        })
    }
}

/// The messages a run sends (with `--duration`: what `--bytes` would send; the senders'
/// reports say how many they sent).
pub(crate) fn messages(r: &Run) -> u64 {
    (r.transfer.bytes / r.size as u64).max(1)
}

impl TransferArgs {
    /// Refuses what `--duration` cannot go with: `--op send` posts its receive buffers for a
    /// known number of messages before the sender starts.
    pub(crate) fn check(&self) -> Result<()> {
        if self.duration.is_some() && self.op == Op::Send {
            mpa_cli::usage!(
                "--duration needs --op write or count: --op send posts a buffer per message \
                 before the run, so it sends --bytes"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Parser, Subcommand};

    /// The experiments that take the bed and framing options, as `mpa-bench` names them.
    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Cmd,
    }

    #[derive(Subcommand)]
    enum Cmd {
        Demo(Run),
        Bw(crate::bw::BwArgs),
        Lat(crate::lat::LatArgs),
        Soak(crate::soak::SoakArgs),
    }

    fn parse(args: &[&str]) -> Result<Cmd, clap::Error> {
        Cli::try_parse_from(std::iter::once("mpa-bench").chain(args.iter().copied())).map(|c| c.cmd)
    }

    fn bed_of(cmd: &Cmd) -> &BedArgs {
        match cmd {
            Cmd::Demo(r) => &r.bed,
            Cmd::Bw(a) => &a.bed,
            Cmd::Lat(a) => &a.bed,
            Cmd::Soak(a) => &a.bed,
        }
    }

    #[test]
    fn the_defaults_are_the_command_lines() {
        for name in ["demo", "bw", "lat", "soak"] {
            let cmd = parse(&[name]).unwrap();
            assert_eq!(bed_of(&cmd), &BedArgs::default(), "{name}");
        }
        let Ok(Cmd::Demo(r)) = parse(&["demo"]) else {
            panic!("demo");
        };
        assert_eq!(r.framing, FramingArgs::default());
        assert_eq!(r.framing.framing(), Framing::MarkersCrc);
        assert!(!r.aligned());
    }

    #[test]
    fn every_experiment_takes_the_bed_flags_by_their_names() {
        let flags = [
            "--mtu",
            "9000",
            "--queues",
            "2",
            "--split-cpus",
            "--impair",
            "drop=5,seed=3",
        ];
        for name in ["demo", "bw", "lat", "soak"] {
            let mut args = vec![name];
            args.extend(flags);
            let cmd = parse(&args).unwrap_or_else(|e| panic!("{name}: {e}"));
            let bed = bed_of(&cmd);
            assert_eq!(
                (bed.mtu, bed.queues, bed.split_cpus),
                (9000, 2, true),
                "{name}"
            );
            assert!(bed.impaired() && bed.impair.is_some(), "{name}");
            let cmd = parse(&[
                name,
                "--loss",
                "5",
                "--iface",
                "eth0",
                "--peer",
                "192.0.2.1",
            ])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            let bed = bed_of(&cmd);
            assert_eq!(bed.loss, 5);
            assert_eq!(bed.nic.iface.as_deref(), Some("eth0"));
            assert_eq!(bed.nic.steer, Steer::Auto);
            let cmd = parse(&[
                name,
                "--iface",
                "eth0",
                "--peer",
                "192.0.2.1",
                "--steer",
                "off",
            ])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(bed_of(&cmd).nic.steer, Steer::Off);
            // Steering is for --iface: the private bed's interfaces have --queues queues.
            assert!(parse(&[name, "--steer", "channels"]).is_err());
            // Loss and the impairment bridge exclude each other; --iface needs --peer.
            assert!(parse(&[name, "--loss", "5", "--impair", "drop=5"]).is_err());
            assert!(parse(&[name, "--iface", "eth0"]).is_err());
        }
    }

    #[test]
    fn framing_flags_where_framing_is_chosen() {
        for name in ["demo", "bw", "lat"] {
            let framing = |extra: &str| {
                let cmd = parse(&[name, extra]).unwrap_or_else(|e| panic!("{name}: {e}"));
                match cmd {
                    Cmd::Demo(r) => r.framing,
                    Cmd::Bw(a) => a.framing,
                    Cmd::Lat(a) => a.framing,
                    Cmd::Soak(_) => unreachable!(),
                }
            };
            assert_eq!(framing("--plain").framing(), Framing::Plain);
            assert_eq!(framing("--no-markers").framing(), Framing::Crc);
            assert!(parse(&[name, "--plain", "--no-markers"]).is_err());
        }
        // soak runs markers and CRC only.
        assert!(parse(&["soak", "--plain"]).is_err());
    }

    #[test]
    fn a_private_bed_option_on_real_interfaces_is_refused() {
        let nic = NicArgs {
            iface: Some("eth0".into()),
            peer: Some("192.0.2.1".parse().unwrap()),
            ..NicArgs::default()
        };
        for (bed, flag) in [
            (
                BedArgs {
                    loss: 5,
                    ..BedArgs::default()
                },
                "--loss",
            ),
            (
                BedArgs {
                    impair: Some("drop=5".parse().unwrap()),
                    ..BedArgs::default()
                },
                "--impair",
            ),
            (
                BedArgs {
                    split_cpus: true,
                    ..BedArgs::default()
                },
                "--split-cpus",
            ),
        ] {
            let e = BedArgs {
                nic: nic.clone(),
                ..bed
            }
            .bed()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
            assert!(e.starts_with(flag), "{flag}: {e}");
        }
    }
}

/// How the datapath side runs (`lat --modes`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum DatapathMode {
    /// Worker threads that sleep when idle (the datapath's default).
    Sleep,
    /// Worker threads that spin `--spin-us` after their last frame.
    Spin,
    /// Run-to-completion: the measuring thread is the worker.
    Rtc,
    /// Run-to-completion whose thread sleeps in the kernel as soon as a poll finds nothing
    /// (`QueueDriver::set_sleep_after`).
    RtcSleep,
    /// `lat --pingpong` only: the C ping-pong (`examples/c/write_pingpong.c`) through
    /// libmpaxdp as the application, a process of its own; worker threads sleeping when idle.
    CApi,
    /// `lat --pingpong` only: its Rust twin (`app/examples/write_pingpong.rs`), the same way.
    RustApp,
}

impl DatapathMode {
    /// The measuring thread turns the queue (no worker thread).
    pub(crate) fn runs_to_completion(self) -> bool {
        matches!(self, DatapathMode::Rtc | DatapathMode::RtcSleep)
    }

    /// A ping-pong example is the application, in a process of its own.
    pub(crate) fn runs_an_example(self) -> bool {
        matches!(self, DatapathMode::CApi | DatapathMode::RustApp)
    }
}

/// How a consumer posts (`lat --pingpong --post-via`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum PostVia {
    /// The shared-memory post queue.
    Shm,
    /// A control-socket request per post.
    Control,
}
