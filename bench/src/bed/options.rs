//! What an experiment is asked to do: the options of `mpa-bench demo` and of `bw` runs, and the
//! bed they run on.

use anyhow::Result;
use clap::Args;
use mpa_testbed::{BedConfig, Impairment, TestBed};

/// `demo` and `compare`: one transfer's options.
#[derive(Args, Clone, Debug)]
pub struct Run {
    /// Octets to send.
    #[arg(long, default_value_t = 256 << 20)]
    pub bytes: u64,
    /// ULPDU size.
    #[arg(long, default_value_t = 4096)]
    pub size: usize,
    /// MTU of the bed (jumbo frames up to 9000 and beyond: the XDP program is frags-aware).
    #[arg(long, default_value_t = 1500)]
    pub mtu: u32,
    /// Loss in the bridge namespace, percent (0: direct veth pair).
    #[arg(long, default_value_t = 0)]
    pub loss: u8,
    /// RX queues.
    #[arg(long, default_value_t = 1)]
    pub queues: u32,
    /// The impairment bridge instead of the Linux bridge, both directions possible, seeded:
    /// e.g. `drop=20,reorder=5,dup=2,corrupt=0.1,delay-us=100,seed=7,both` (rates in percent
    /// of TCP frames to/from the port; testbed/src/impair.rs `Impairment::SYNTAX`).
    #[arg(long, value_name = "SPEC", conflicts_with = "loss")]
    pub impair: Option<Impairment>,
    /// Markers and CRC both ways (the default); --plain turns both off.
    #[arg(long)]
    pub plain: bool,
    /// CRC but no markers; with an aligned sender the datapath then places out-of-order
    /// segments whose first FPDU verifies by CRC (the listener's `aligned_sender`).
    #[arg(long, conflicts_with = "plain")]
    pub no_markers: bool,
    /// What the sender does: RDMA Writes into a registered region (checked byte for byte),
    /// Sends into posted buffers (checked likewise), or `count`: no placement (payloads only
    /// counted and digested, the data path of issue 3).
    #[arg(long, value_enum, default_value = "write")]
    pub op: Op,
    /// Region size for `--op write` (writes wrap around in whole slots).
    #[arg(long, default_value_t = 16 << 20)]
    pub region_bytes: u64,
    /// Whether the sender aligns FPDUs with TCP segments (RFC 5044 §5.1; what lets segments
    /// that arrive out of order be placed on their own). `auto`: when there is loss. Aligned
    /// sending cuts messages so that FPDUs fill every TCP segment exactly.
    #[arg(long, value_enum, default_value = "auto")]
    pub align: Align,
    /// Print one JSON line with every measured value (`result: {...}`).
    #[arg(long)]
    pub json: bool,
    /// Connections at once, each with its own sender carrying `--bytes` (and, when placing,
    /// its own region in its own protection domain).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub connections: u32,
    /// The datapath TCP's receive buffer and reassembly limit, octets (default: TcpConfig's).
    #[arg(long)]
    pub rcv_buf: Option<usize>,
    /// The datapath TCP's `ooo_ack_every` (default: TcpConfig's).
    #[arg(long)]
    pub ooo_ack_every: Option<u32>,
    /// The bed as two hosts on two CPUs: the sender and its veth's RX (the ACKs, by RPS) on
    /// CPU 0, the receiver (the kernel Responder process, or the datapath's workers) on CPU 1
    /// (bench/src/split.rs). Both receivers alike; not with --iface.
    #[arg(long)]
    pub split_cpus: bool,
    /// Keep each datapath worker polling this many µs after its last frame before it may
    /// sleep (`mpa-datapath --spin-us`; 0: sleep after 256 empty polls).
    #[arg(long, default_value_t = 0)]
    pub spin_us: u64,
    /// The sender's TCP congestion control (`mpa-peer connect --congestion`: cubic, bbr, …;
    /// default: the sender namespace's, which follows the host's). Both receivers alike.
    #[arg(long, value_name = "NAME")]
    pub sender_cc: Option<String>,
}

/// `--align`: whether the sender aligns FPDUs with TCP segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Align {
    Auto,
    On,
    Off,
}

impl Run {
    /// Markers both ways.
    pub fn markers(&self) -> bool {
        !self.plain && !self.no_markers
    }

    /// Whether the sender aligns FPDUs with TCP segments.
    pub fn aligned(&self) -> bool {
        match self.align {
            Align::Auto => self.loss > 0 || self.impair.is_some(),
            Align::On => true,
            Align::Off => false,
        }
    }
}

/// `--op`: what the sender does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Op {
    Write,
    Send,
    Count,
}

/// Protection domain of the bench's (first) connection and region; connection `i` of a run
/// with several uses `PD + i`.
pub const PD: u32 = 1;

/// The port the hand-over listener (or the kernel Responder) listens on in ns b.
pub const PORT: u16 = 7777;

/// `bw` and `lat` on real NICs instead of the private bed: XDP on this host's `--iface`, the
/// sender (`mpa-peer connect`) on the peer host, started through `--peer-exec`.
#[derive(Args, Clone, Debug, Default)]
pub struct NicArgs {
    /// Run on this interface of this host instead of the private namespace bed (the datapath
    /// attaches XDP here; the kernel Responder listens on its address).
    #[arg(long, requires = "peer")]
    pub iface: Option<String>,
    /// The sender host's address.
    #[arg(long, requires = "iface")]
    pub peer: Option<std::net::IpAddr>,
    /// This host's address on --iface (default: the interface's first IPv4 address).
    #[arg(long, requires = "iface")]
    pub local: Option<std::net::IpAddr>,
    /// The command prefix that runs the sender on the peer host (default: `ssh root@PEER`).
    #[arg(long, requires = "iface")]
    pub peer_exec: Option<String>,
    /// The directory of `mpa-peer` on the peer host (default: the same path as here).
    #[arg(long, requires = "iface")]
    pub peer_bin_dir: Option<String>,
}

impl NicArgs {
    /// The external bed these options name, if any.
    pub fn external(&self) -> Option<mpa_testbed::ExternalPeer> {
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

/// The bed a run asks for: the peer host through real NICs when `nic` names one, else the
/// private namespace bed.
pub fn bed_for(r: &Run, nic: &NicArgs) -> Result<TestBed> {
    match nic.external() {
        Some(_) if r.loss > 0 => anyhow::bail!(
            "--loss needs the private bed's bridge; on real interfaces impose loss on the path \
             yourself"
        ),
        Some(_) if r.impair.is_some() => anyhow::bail!(
            "--impair needs the private bed's bridge namespace; on real interfaces impair the \
             path yourself"
        ),
        Some(peer) => Ok(TestBed::external(peer, r.mtu)?),
        None => bed(r),
    }
}

/// The bed a run asks for: the direct veth pair, or the bridge with loss.
pub fn bed(r: &Run) -> Result<TestBed> {
    if r.split_cpus {
        crate::bed::split::check_cpus()?;
    }
    let bed = TestBed::up(BedConfig {
        bridge: r.loss > 0 || r.impair.is_some(),
        loss_percent: r.loss,
        loss_port: PORT,
        mtu: r.mtu,
        queues: r.queues,
        impair: r.impair.clone(),
    })?;
    if crate::bed::split::applies(&bed, r.split_cpus) {
        crate::bed::split::steer_sender_rx(&bed)?;
    }
    Ok(bed)
}

/// The messages a run sends.
pub fn messages(r: &Run) -> u64 {
    (r.bytes / r.size as u64).max(1)
}
