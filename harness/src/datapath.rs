//! The datapath as every experiment and whole-system test starts it, and the hand-over of an
//! accepted connection to it: THE `start_datapath` and hand-over fixture of the workspace.

use anyhow::{anyhow, bail, Context, Result};
use mpa::startup::{Negotiated, StartupPolicy};
use mpa_bpf::AttachMode;
use mpa_control::datapath_client::DatapathClient;
use mpa_control::freeze::FrozenSocket;
use mpa_control::responder::{respond_and_hand_over, Outcome};
use mpa_control::Placement;
use mpa_ctl_proto::stats::DatapathStats;
use mpa_datapath::io::nic_queues::QueueSteering;
use mpa_datapath::io::xsk::{BindMode, XskConfig};
use mpa_datapath::memory::streaming::StreamingStores;
use mpa_datapath::server::{
    Datapath, DatapathConfig, DEFAULT_COMPLETION_RING, DEFAULT_MAX_CONTROL_CLIENTS,
    DEFAULT_MAX_REGION_BYTES,
};
use mpa_stack::tcp::TcpConfig;
use mpa_testbed::{run_in_netns, TestBed};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A fresh path in the temp directory, unique per process and call: `mpa-<what>-<pid>-<n>`.
pub fn temp_path(what: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "mpa-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// How to start the datapath (see [`start_datapath`]).
#[derive(Debug, Clone)]
pub struct DatapathOptions {
    /// RX queues (one worker each).
    pub queues: u32,
    /// Keep a ULPDU digest per flow.
    pub digest: bool,
    /// The minimal TCP's settings.
    pub tcp: TcpConfig,
    /// The AF_XDP sockets (copy mode: veth has no zero-copy, docs/environment.md).
    pub xsk: XskConfig,
    /// Control clients at once at most.
    pub max_control_clients: usize,
    /// When control clients that only hold a slot are closed.
    pub control_deadlines: mpa_datapath::server::ControlDeadlines,
    /// Octets of registered regions allowed in all.
    pub max_region_bytes: u64,
    /// Records per completion ring.
    pub completion_ring: u32,
    /// How long a worker keeps polling after its last frame (`DatapathConfig::spin`).
    pub spin: Duration,
    /// While spinning, a worker yields its core every this many empty polls
    /// (`DatapathConfig::yield_every`; 0: never).
    pub yield_every: u32,
    /// The memory budget (`DatapathConfig::memory_budget`; `None`: the machine's default).
    pub memory_budget: Option<u64>,
    /// Run-to-completion: no worker threads; take the queues' drivers with
    /// `Datapath::take_queue_drivers` and poll them (`DatapathConfig::caller_drives_queues`).
    pub caller_drives_queues: bool,
    /// Where XDP attaches (native by default).
    pub xdp_mode: AttachMode,
    /// How flows are put on the served queues (`DatapathConfig::queue_steering`).
    pub queue_steering: QueueSteering,
    /// Jumbo frames decoded from their descriptors (`DatapathConfig::chains_in_pieces`).
    pub chains_in_pieces: bool,
    /// Which regions take long messages with streaming stores
    /// (`DatapathConfig::streaming_stores`).
    pub streaming_stores: StreamingStores,
}

impl Default for DatapathOptions {
    fn default() -> Self {
        DatapathOptions {
            queues: 1,
            digest: true,
            tcp: TcpConfig::default(),
            xsk: XskConfig {
                bind_mode: BindMode::Copy,
                ..XskConfig::default()
            },
            max_control_clients: DEFAULT_MAX_CONTROL_CLIENTS,
            control_deadlines: Default::default(),
            max_region_bytes: DEFAULT_MAX_REGION_BYTES,
            spin: Duration::ZERO,
            yield_every: mpa_datapath::worker::DEFAULT_YIELD_EVERY,
            completion_ring: DEFAULT_COMPLETION_RING,
            memory_budget: None,
            caller_drives_queues: false,
            queue_steering: Default::default(),
            xdp_mode: AttachMode::Driver,
            chains_in_pieces: true,
            streaming_stores: StreamingStores::default(),
        }
    }
}

/// Starts the datapath in ns b on the bed's interface (XDP as `opts` says, checksums verified, no CPU
/// pinning), its control socket at `socket`. Retried for a moment: right after an earlier
/// datapath stopped, the kernel may still hold the queue (EBUSY on the AF_XDP bind).
pub fn start_datapath(bed: &TestBed, socket: &Path, opts: &DatapathOptions) -> Result<Datapath> {
    start_datapath_on(&bed.ns_b, &bed.if_b, socket, opts)
}

/// [`start_datapath`] in namespace `ns` on its interface `iface` (e.g. ns a's end of the
/// bed, for a datapath on each side).
pub fn start_datapath_on(
    ns: &str,
    iface: &str,
    socket: &Path,
    opts: &DatapathOptions,
) -> Result<Datapath> {
    let t0 = Instant::now();
    loop {
        let cfg = DatapathConfig {
            iface: iface.to_string(),
            queues: opts.queues,
            xdp_mode: opts.xdp_mode,
            xsk: opts.xsk.clone(),
            socket: socket.to_path_buf(),
            digest: opts.digest,
            tcp: opts.tcp.clone(),
            verify_checksums: true,
            chains_in_pieces: opts.chains_in_pieces,
            streaming_stores: opts.streaming_stores,
            pin_cpus: false,
            max_region_bytes: opts.max_region_bytes,
            max_control_clients: opts.max_control_clients,
            control_deadlines: opts.control_deadlines,
            completion_ring: opts.completion_ring,
            spin: opts.spin,
            yield_every: opts.yield_every,
            worker_deadline: mpa_datapath::server::DEFAULT_WORKER_DEADLINE,
            memory_budget: opts.memory_budget,
            caller_drives_queues: opts.caller_drives_queues,
            queue_steering: opts.queue_steering.clone(),
        };
        match run_in_netns(ns, move || Datapath::start(cfg))? {
            Ok(dp) => return Ok(dp),
            Err(e) if t0.elapsed() < Duration::from_secs(3) => {
                tracing::info!(%e, "datapath start; retrying");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e).context("start the datapath"),
        }
    }
}

/// How the hand-over listener answers an Initiator.
#[derive(Debug, Clone)]
pub struct Responder {
    /// The startup policy.
    pub policy: StartupPolicy,
    /// The private data of the accepting Reply (the datapath sends it).
    pub reply_private_data: Vec<u8>,
    /// Where the flow places what it receives.
    pub placement: Placement,
    /// Bound on every wait for the datapath's answers on the returned client.
    pub wait: Duration,
}

impl Responder {
    /// Markers toward us required or not, CRC allowed or suppressed; no placement.
    pub fn framing(markers: bool, crc: bool) -> Responder {
        Responder {
            policy: StartupPolicy {
                markers_required: markers,
                crc_suppressed_by_admin: !crc,
                ..StartupPolicy::default()
            },
            reply_private_data: Vec::new(),
            placement: Placement::default(),
            wait: Duration::from_secs(20),
        }
    }
}

/// A connection the datapath now owns.
#[derive(Debug)]
pub struct HandedOver {
    /// The datapath's flow.
    pub flow_id: u64,
    /// The control connection it was handed over on (FlowGone comes here).
    pub dpc: DatapathClient,
    /// The kernel socket, frozen: keep it until the flow is gone.
    pub frozen: FrozenSocket,
    /// What was negotiated.
    pub negotiated: Negotiated,
}

/// Runs the Responder startup on `sock` inside namespace `ns` (neighbour lookups resolve
/// there) and hands the connection to the datapath behind `dpc`.
pub fn respond_in(
    ns: &str,
    sock: TcpStream,
    r: &Responder,
    dpc: &mut DatapathClient,
) -> Result<Outcome> {
    let o = run_in_netns(ns, || {
        respond_and_hand_over(
            sock,
            r.policy.clone(),
            r.reply_private_data.clone(),
            r.placement,
            dpc,
        )
    })??;
    Ok(o)
}

/// Accepts one connection on `listener` (bound in namespace `ns`, the bed's `ns_b`) and hands
/// it to the datapath whose control socket is `dp_socket`; a rejection is an error.
pub fn accept_and_hand_over(
    ns: &str,
    dp_socket: &Path,
    listener: &TcpListener,
    r: &Responder,
) -> Result<HandedOver> {
    let (sock, _) = listener.accept().context("accept")?;
    let mut dpc = DatapathClient::connect(dp_socket, r.wait).context("reach the datapath")?;
    match respond_in(ns, sock, r, &mut dpc)? {
        Outcome::HandedOver {
            flow_id,
            frozen,
            negotiated,
        } => Ok(HandedOver {
            flow_id,
            dpc,
            frozen,
            negotiated,
        }),
        Outcome::Rejected { reason } => bail!("rejected: {}", String::from_utf8_lossy(&reason)),
    }
}

/// The datapath's statistics document with every live flow, asked for on `dpc`.
pub fn stats(dpc: &mut DatapathClient) -> Result<DatapathStats> {
    Ok(dpc.stats()?)
}

/// The datapath behind `socket` as Initiator: connects from ns b to `to` with `policy` and
/// `private_data`, its flow placing into domain `pd`, and hands the connection over; returns
/// the flow, the Responder's region advertisement, and the frozen kernel socket (keep it
/// until the flow is gone).
pub fn initiate(
    bed: &TestBed,
    socket: &Path,
    to: std::net::SocketAddr,
    policy: StartupPolicy,
    private_data: Vec<u8>,
    pd: u32,
) -> Result<(u64, mpa_ctl_proto::region_ad::RegionAd, FrozenSocket)> {
    let mut dpc = DatapathClient::connect(socket, Duration::from_secs(20))?;
    let outcome = run_in_netns(&bed.ns_b, || {
        mpa_control::initiator::connect_and_hand_over(
            to,
            policy,
            private_data,
            Placement {
                pd: Some(pd),
                aligned_sender: false,
                conn_id: None,
            },
            &mut dpc,
        )
    })??;
    let mpa_control::initiator::InitiatorOutcome::HandedOver {
        flow_id,
        negotiated,
        frozen,
    } = outcome
    else {
        bail!("{to} rejected the connection");
    };
    let ad = mpa_ctl_proto::region_ad::RegionAd::parse(&negotiated.peer_private_data)?
        .ok_or_else(|| anyhow!("{to} advertised no region"))?;
    Ok((flow_id, ad, frozen))
}
