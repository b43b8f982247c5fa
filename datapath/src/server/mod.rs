//! The datapath process: XDP steering, one worker per queue, and the control-socket server that
//! mpa-control talks to (the only code that touches BPF maps: docs/architecture.md, "Crate
//! layout").
//!
//! This module starts and stops the datapath and runs the control thread's loop; the rest of
//! the control thread is split by concern: `clients` (accepting and writing to control
//! clients), `requests` (one function per control request), `notifications` (what workers
//! report), `capture` (packet capture for a client), `migration` (moving a flow to the
//! worker of the queue its segments arrive on), `subscriptions` (completion rings in shared
//! memory for consumers) and `faults` (a worker that died, the XDP program detached by
//! someone else).

#![forbid(unsafe_code)]

mod applications;
mod capture;
mod clients;
mod faults;
mod migration;
mod notifications;
mod requests;
mod subscriptions;
pub use clients::{ControlDeadlines, OPERATOR_SLOTS};
pub use subscriptions::MAX_SUBSCRIPTIONS_PER_CLIENT;
mod watch;

use crate::io::nic_queues::{self, QueueSteering, Steered};
use crate::io::xsk::{XskConfig, XskQueue};
use crate::memory::registry::Registry;
use crate::memory::streaming::StreamingStores;
use crate::worker::{Command, Notification, QueueDriver, Worker, WorkerConfig};
use capture::Capture;
use clients::Client;
use crossbeam_channel::{select, unbounded, Receiver, Sender};
use mpa_bpf::{AttachMode, FlowKey, XdpSteering};
use mpa_ctl_proto::Message;
use mpa_stack::tcp::TcpConfig;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Everything the datapath needs to start.
#[derive(Debug, Clone)]
pub struct DatapathConfig {
    /// Interface to serve (in the calling thread's network namespace).
    pub iface: String,
    /// RX queues, one worker each.
    pub queues: u32,
    /// XDP attach mode.
    pub xdp_mode: AttachMode,
    /// AF_XDP socket settings.
    pub xsk: XskConfig,
    /// Control socket path (created 0600; only our own user may connect).
    pub socket: PathBuf,
    /// Keep a ULPDU digest per flow.
    pub digest: bool,
    /// TCP settings.
    pub tcp: TcpConfig,
    /// Verify TCP checksums in software.
    pub verify_checksums: bool,
    /// `WorkerConfig::chains_in_pieces`: jumbo frames decoded from their descriptors
    /// rather than gathered.
    pub chains_in_pieces: bool,
    /// `WorkerConfig::streaming_stores`: which regions take long messages with streaming
    /// stores.
    pub streaming_stores: StreamingStores,
    /// Pin worker q to CPU q (right on a server with cores to spare; on a small machine that
    /// also runs the sender it only gets in the scheduler's way).
    pub pin_cpus: bool,
    /// Octets of registered regions allowed in all.
    pub max_region_bytes: u64,
    /// Control clients connected at once at most; more are refused with an `Error` of code
    /// `Limit` ([`DEFAULT_MAX_CONTROL_CLIENTS`]).
    pub max_control_clients: usize,
    /// When a control client that only holds a slot is closed (docs/limits.md, "Control
    /// clients").
    pub control_deadlines: ControlDeadlines,
    /// Records per completion ring (one ring per worker and subscription; a power of two,
    /// [`DEFAULT_COMPLETION_RING`]).
    pub completion_ring: u32,
    /// Each worker keeps polling this long after its last frame before it may sleep
    /// ([`WorkerConfig::spin`]; zero by default).
    pub spin: Duration,
    /// While spinning, each worker thread yields its core every this many empty polls
    /// ([`WorkerConfig::yield_every`]; [`crate::worker::DEFAULT_YIELD_EVERY`] by default,
    /// 0: never).
    pub yield_every: u32,
    /// A worker whose loop has not turned for this long is stuck: the datapath stops
    /// ([`DEFAULT_WORKER_DEADLINE`]; an idle worker turns at least every 10 ms).
    pub worker_deadline: Duration,
    /// The memory budget every flow and subscription draws from, octets
    /// (`default_memory_budget` when `None`; docs/limits.md).
    pub memory_budget: Option<u64>,
    /// Run-to-completion: no worker threads; the application turns each queue's worker in
    /// its own thread ([`Datapath::take_queue_drivers`], docs/latency.md).
    pub caller_drives_queues: bool,
    /// How flows are put on the served RX queues (docs/nics.md). What it changes on the NIC
    /// is recorded beside the control socket (in `SOCKET.steering`) and
    /// undone on stop, or by the next start after a crash.
    pub queue_steering: QueueSteering,
}

/// Default of [`DatapathConfig::completion_ring`]: 32,768 records (1.5 MiB per ring), a
/// third of a second of 4 KiB messages at 4 Gbit/s for a consumer that is not scheduled.
pub const DEFAULT_COMPLETION_RING: u32 = 1 << 15;

/// Default of [`DatapathConfig::max_control_clients`]: far more than `mpa-control` and the
/// consumers of one host need, few enough that their threads and queues stay bounded.
pub const DEFAULT_MAX_CONTROL_CLIENTS: usize = 256;

/// Default of [`DatapathConfig::worker_deadline`]: 10 s, a thousand times an idle worker's
/// longest sleep.
pub const DEFAULT_WORKER_DEADLINE: Duration = Duration::from_secs(10);

/// Debug builds only (the system tests' binaries): the control thread panics when it is asked
/// for statistics, so that tests can check what a control-thread failure does.
pub const CONTROL_PANIC_AT_STATS_ENV: &str = "MPA_DATAPATH_TEST_CONTROL_PANIC_AT_STATS";

/// Default of [`DatapathConfig::max_region_bytes`]: 4 GiB.
pub const DEFAULT_MAX_REGION_BYTES: u64 = 4 << 30;

/// The most RX queues (workers) one datapath serves (`--queues`).
pub const MAX_QUEUES: u32 = 64;

/// Why the datapath could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Interface lookup failed.
    #[error("interface {0}: {1}")]
    Iface(String, String),
    /// XDP failed.
    #[error(transparent)]
    Bpf(#[from] mpa_bpf::BpfError),
    /// AF_XDP failed.
    #[error(transparent)]
    Xsk(#[from] crate::io::xsk::XskError),
    /// Queue steering could not be set up, or an earlier run's could not be undone.
    #[error(transparent)]
    Steering(#[from] nic_queues::SteeringError),
    /// The control socket could not be created.
    #[error("control socket {0}: {1}")]
    Socket(PathBuf, io::Error),
    /// Another datapath answers on the control socket's path: starting would take it over.
    #[error(
        "control socket {0}: another mpa-datapath answers there; stop it first or choose \
         another --socket"
    )]
    SocketInUse(PathBuf),
}

/// A running datapath; dropping it stops everything and detaches XDP.
pub struct Datapath {
    stop: Arc<AtomicBool>,
    control: Option<JoinHandle<()>>,
    socket: PathBuf,
    failure: faults::Failure,
    /// Run-to-completion: the queues' workers, until the application takes them.
    drivers: Vec<QueueDriver>,
    /// Undone after the sockets are closed and XDP is detached.
    queue_steering: Option<Steered>,
}

impl Datapath {
    /// Starts workers and the control server in the calling thread's network namespace.
    pub fn start(cfg: DatapathConfig) -> Result<Datapath, StartError> {
        // Before anything is attached: a running datapath's socket is never taken over.
        claim_socket_path(&cfg.socket)?;
        let ifindex = mpa_bpf::ifindex_of(&cfg.iface)
            .map_err(|e| StartError::Iface(cfg.iface.clone(), e.to_string()))?;
        let our_mac = interface_mac(&cfg.iface)?;
        // Before the sockets bind: a channel count set here decides which queues exist.
        let state = steering_state_path(&cfg.socket);
        if let Some(done) = nic_queues::recover(&state)? {
            tracing::warn!(state = %state.display(), "an earlier datapath's queue steering was left behind: {done}");
        }
        let queue_steering =
            nic_queues::apply(&cfg.iface, cfg.queues, &cfg.queue_steering, &state)?;
        tracing::info!(iface = %cfg.iface, "queue steering: {}", queue_steering.summary());
        match cfg.streaming_stores.streaming_from() {
            None if cfg.streaming_stores == StreamingStores::LargeRegions => tracing::warn!(
                "streaming stores: the last-level cache's size is unknown (sysfs): none used"
            ),
            None => tracing::info!("streaming stores: off"),
            Some(0) => tracing::info!("streaming stores: into every region"),
            Some(from) => tracing::info!(
                "streaming stores: into regions of {from} octets or more (larger than the \
                 last-level cache)"
            ),
        }
        let steering = XdpSteering::attach(ifindex, cfg.xdp_mode)?;
        let mtu = interface_mtu(&cfg.iface);
        let mut tcp = cfg.tcp.clone();
        // We send (ACKs, the Reply, Terminates) single-buffer: one UMEM frame per segment,
        // whatever the MTU. We receive what the MTU allows: larger frames arrive as AF_XDP
        // multi-buffer chains (docs/architecture.md, "Jumbo frames").
        tcp.max_snd_mss = link_mss(mtu, cfg.xsk.frame_size);
        let (notify_tx, notify_rx) = unbounded();
        let mut workers = Vec::new();
        let mut doorbells = Vec::new();
        let mut handles = Vec::new();
        let mut beats = Vec::new();
        let mut drivers = Vec::new();
        let budget = mpa_stack::budget::MemoryBudget::new(
            cfg.memory_budget.unwrap_or_else(default_memory_budget),
        );
        for q in 0..cfg.queues {
            let mut xsk = XskQueue::open(&cfg.iface, q, &cfg.xsk)?;
            let rx_frame = rx_frame_for_mtu(mtu);
            xsk.set_max_rx_frame(rx_frame);
            if rx_frame > xsk.max_rx_frame() {
                // Bound without multi-buffer (a zero-copy driver without it): the peer may
                // send segments as large as the MTU, which the socket would drop.
                tracing::warn!(iface = %cfg.iface, queue = q, mtu = ?mtu, max = xsk.max_rx_frame(),
                    "the interface's MTU allows frames larger than the AF_XDP socket receives; lower the MTU");
            }
            steering.set_xsk(q, xsk.as_fd())?;
            // The worker's post queue doorbell, shared by every subscription: a consumer
            // writes it when the worker sleeps with posts waiting (ring::post).
            let doorbell = mpa_ctl_proto::ring::Waker::create()
                .map_err(|e| StartError::Iface(cfg.iface.clone(), e.to_string()))?;
            xsk.set_doorbell(
                doorbell
                    .fd()
                    .try_clone_to_owned()
                    .map_err(|e| StartError::Iface(cfg.iface.clone(), format!("eventfd: {e}")))?,
            );
            doorbells.push(doorbell);
            let (tx, rx) = unbounded();
            let waker = xsk.waker();
            let wcfg = WorkerConfig {
                our_mac,
                tcp: tcp.clone(),
                digest: cfg.digest,
                verify_checksums: cfg.verify_checksums,
                spin: cfg.spin,
                yield_every: cfg.yield_every,
                defer_tx_kick: false,
                chains_in_pieces: cfg.chains_in_pieces,
                streaming_stores: cfg.streaming_stores,
            };
            let notify = notify_tx.clone();
            let pin = cfg.pin_cpus;
            let beat = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let flows_budget = budget.clone();
            beats.push(faults::Heartbeat::new(beat.clone()));
            if cfg.caller_drives_queues {
                // Never sleeps: the application's loop is the polling.
                let wcfg = WorkerConfig {
                    spin: Duration::MAX,
                    // The application's thread: it yields only when it asks to
                    // (`QueueDriver::set_yield_every`).
                    yield_every: 0,
                    defer_tx_kick: true,
                    ..wcfg
                };
                let worker = Worker::new(xsk, wcfg, rx, notify)
                    .with_heartbeat(beat)
                    .with_budget(flows_budget);
                drivers.push(QueueDriver::new(worker));
                handles.push(None);
                workers.push(WorkerHandle { tx, waker });
                continue;
            }
            handles.push(Some(
                std::thread::Builder::new()
                    .name(format!("mpa-worker-{q}"))
                    .spawn(move || {
                        if pin {
                            pin_to_cpu(q);
                        }
                        // Made on its own thread, so that the state it writes every burst
                        // comes from this thread's allocator arena: built on the main thread,
                        // one queue's vectors could share a cache line with the next's.
                        Worker::new(xsk, wcfg, rx, notify)
                            .with_heartbeat(beat)
                            .with_budget(flows_budget)
                            .run()
                    })
                    .map_err(|e| StartError::Iface(cfg.iface.clone(), e.to_string()))?,
            ));
            workers.push(WorkerHandle { tx, waker });
        }
        let listener = UnixListener::bind(&cfg.socket)
            .map_err(|e| StartError::Socket(cfg.socket.clone(), e))?;
        std::fs::set_permissions(&cfg.socket, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| StartError::Socket(cfg.socket.clone(), e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| StartError::Socket(cfg.socket.clone(), e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let failure = faults::Failure::default();
        let server = Server {
            steering,
            workers,
            worker_handles: handles,
            notify: notify_rx,
            listener,
            clients: HashMap::new(),
            next_client: 1,
            control: mpa_ctl_proto::stats::ControlStats {
                max_clients: cfg.max_control_clients.max(1),
                ..Default::default()
            },
            next_flow: 1,
            adopted: HashMap::new(),
            finished: std::collections::VecDeque::new(),
            ended: Default::default(),
            registry: Registry::new(cfg.max_region_bytes),
            stop: stop.clone(),
            capture: None,
            next_capture: 1,
            faults: faults::Faults::new(failure.clone(), beats, cfg.worker_deadline),
            completion_ring: cfg.completion_ring,
            doorbells,
            next_subscription: 1,
            deadlines: cfg.control_deadlines,
            watch: watch::Watches::default(),
            budget,
            subscription_charges: HashMap::new(),
            apps: Default::default(),
        };
        let control_failure = failure.clone();
        let control_stop = stop.clone();
        let control = std::thread::Builder::new()
            .name("mpa-control-server".into())
            .spawn(move || {
                // A panic here unwinds the server: its workers' channels close (they stop)
                // and the steering program detaches as it drops. What is left is to say so,
                // so that the process exits non-zero and a supervisor restarts it.
                let run = std::panic::AssertUnwindSafe(|| server.run());
                if let Err(payload) = std::panic::catch_unwind(run) {
                    let why = format!(
                        "the control thread panicked: {}",
                        faults::panic_message(payload.as_ref())
                    );
                    tracing::error!(%why, "datapath failed");
                    if let Ok(mut f) = control_failure.lock() {
                        f.get_or_insert(why);
                    }
                    control_stop.store(true, Ordering::Relaxed);
                }
            })
            .map_err(|e| StartError::Socket(cfg.socket.clone(), e))?;
        tracing::info!(iface = %cfg.iface, queues = cfg.queues, socket = %cfg.socket.display(), "datapath running");
        Ok(Datapath {
            stop,
            control: Some(control),
            socket: cfg.socket,
            failure,
            drivers,
            queue_steering: Some(queue_steering),
        })
    }

    /// Why the datapath stopped on its own (a worker failed; its flows were reported gone),
    /// or `None` while it runs. The caller should then [`stop`](Self::stop) it and exit
    /// non-zero.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    /// Run-to-completion ([`DatapathConfig::caller_drives_queues`]): the workers of the
    /// queues, by queue, for the application's threads to turn (each with
    /// [`QueueDriver::poll`]); empty after the first call and without that mode.
    pub fn take_queue_drivers(&mut self) -> Vec<QueueDriver> {
        std::mem::take(&mut self.drivers)
    }

    /// Stops workers and the server, detaches XDP, removes the socket.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.control.take() {
            let _ = h.join();
        }
        // Run-to-completion sockets the application still holds close with their drivers.
        self.drivers.clear();
        if let Some(s) = self.queue_steering.take() {
            s.undo();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for Datapath {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Where the queue steering of the datapath with control socket `socket` is recorded.
pub fn steering_state_path(socket: &std::path::Path) -> PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(".steering");
    PathBuf::from(p)
}

/// Makes `path` free for the control socket: nothing there, or a stale socket file (its
/// datapath gone: nobody accepts a connection) which is removed. A socket someone answers on
/// is another datapath's: refused.
fn claim_socket_path(path: &std::path::Path) -> Result<(), StartError> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(StartError::Socket(
            path.to_path_buf(),
            io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a file that is not a socket is there",
            ),
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(StartError::SocketInUse(path.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::info!(socket = %path.display(), "removing a stale control socket");
            std::fs::remove_file(path).map_err(|e| StartError::Socket(path.to_path_buf(), e))
        }
        Err(e) => Err(StartError::Socket(path.to_path_buf(), e)),
    }
}

/// Pins the calling worker thread to CPU `queue` (modulo the CPUs we may use), so that a
/// queue's packets, its worker and its caches stay on one core.
fn pin_to_cpu(queue: u32) {
    use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let Ok(allowed) = sched_getaffinity(Pid::from_raw(0)) else {
        return;
    };
    let cpus: Vec<usize> = (0..CpuSet::count())
        .filter(|&c| allowed.is_set(c).unwrap_or(false))
        .collect();
    if cpus.is_empty() {
        return;
    }
    let cpu = cpus[queue as usize % cpus.len()];
    let mut set = CpuSet::new();
    if set.set(cpu).is_ok() {
        if let Err(e) = sched_setaffinity(Pid::from_raw(0), &set) {
            tracing::warn!(queue, cpu, %e, "cannot pin worker");
        }
    }
}

/// The interface's MAC address, from netlink (getifaddrs), so it is right in whatever
/// network namespace the calling thread is (sysfs may belong to another).
/// The interface's MTU (sysfs), if it can be read.
fn interface_mtu(iface: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The largest segment (TCP payload and options, IPv4 headers) our link and a UMEM frame carry:
/// MTU − 40, and frame − XDP headroom − Ethernet − 40; 1460 when the MTU is unknown.
pub(crate) fn link_mss(mtu: Option<u32>, frame_size: u32) -> u16 {
    const HEADROOM: u32 = 256;
    const ETHERNET: u32 = 14;
    const IPV4_TCP: u32 = 40;
    let by_mtu = mtu.unwrap_or(1500).saturating_sub(IPV4_TCP);
    let by_frame = frame_size.saturating_sub(HEADROOM + ETHERNET + IPV4_TCP);
    by_mtu.min(by_frame).clamp(64, u32::from(u16::MAX)) as u16
}

/// The largest frame a peer may send us at `mtu`: the MTU plus Ethernet and one VLAN tag
/// (1500 when the MTU is unknown).
pub(crate) fn rx_frame_for_mtu(mtu: Option<u32>) -> usize {
    mtu.unwrap_or(1500) as usize + 14 + 4
}

fn interface_mac(iface: &str) -> Result<[u8; 6], StartError> {
    let err = |m: String| StartError::Iface(iface.to_string(), m);
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| err(e.to_string()))?;
    for a in addrs {
        if a.interface_name != iface {
            continue;
        }
        if let Some(mac) = a
            .address
            .as_ref()
            .and_then(|s| s.as_link_addr())
            .and_then(|l| l.addr())
        {
            return Ok(mac);
        }
    }
    Err(err("no link-layer address".into()))
}

/// The control thread's side of a worker: its command channel, and a way to wake it from an
/// idle wait so that a command (a hand-over) is served at once, not after the wait.
struct WorkerHandle {
    tx: Sender<Command>,
    waker: crate::io::xsk::Waker,
}

impl WorkerHandle {
    fn send(&self, c: Command) -> Result<(), crossbeam_channel::SendError<Command>> {
        self.tx.send(c)?;
        self.waker.wake();
        Ok(())
    }
}

struct Adopted {
    key: FlowKey,
    local: SocketAddr,
    remote: SocketAddr,
    client: u64,
    worker: Option<usize>,
    /// Protection domain, once handed over.
    pd: Option<u32>,
}

struct Server {
    steering: XdpSteering,
    workers: Vec<WorkerHandle>,
    /// `None` once joined (a failed worker).
    worker_handles: Vec<Option<JoinHandle<()>>>,
    notify: Receiver<Notification>,
    listener: UnixListener,
    clients: HashMap<u64, Client>,
    next_client: u64,
    /// The control socket's counters (`clients` and `queued_octets` filled in when asked).
    control: mpa_ctl_proto::stats::ControlStats,
    next_flow: u64,
    adopted: HashMap<u64, Adopted>,
    /// Final counters of the most recent ended flows (bounded).
    finished: std::collections::VecDeque<mpa_ctl_proto::stats::FlowReport>,
    /// Every ended flow, by how it ended.
    ended: mpa_ctl_proto::stats::EndedCounts,
    registry: Registry,
    stop: Arc<AtomicBool>,
    /// The packet capture running, if any (one at a time).
    capture: Option<Capture>,
    next_capture: u64,
    faults: faults::Faults,
    /// Records per completion ring.
    completion_ring: u32,
    /// Each worker's post queue doorbell (passed to every subscriber).
    doorbells: Vec<mpa_ctl_proto::ring::Waker>,
    next_subscription: u64,
    /// When clients that only hold a slot are closed.
    deadlines: ControlDeadlines,
    /// Ports watched for TS.Recent, by client, and what hand-overs inherited.
    watch: watch::Watches,
    /// The memory budget flows and subscriptions draw from.
    budget: Arc<mpa_stack::budget::MemoryBudget>,
    /// Each subscription's completion rings, charged to `budget`, by subscription id.
    subscription_charges: HashMap<u64, mpa_stack::budget::Charge>,
    /// Applications' listeners and connections in setup, and their connection manager.
    apps: applications::AppConnections,
}

/// How long a stopping datapath waits for its clients' writers to send what is queued (the
/// last FlowGone notifications), so that a client that does not read cannot hold it up.
const CLIENT_FLUSH: Duration = Duration::from_secs(1);

/// Ended flows whose final counters stay readable over the control socket.
const FINISHED_KEPT: usize = mpa_ctl_proto::stats::MAX_ENDED_FLOWS;

enum Incoming {
    /// A client's message, the octets it took (its reader waits for them to be handled
    /// when its budget is spent) and the descriptor it carried, kept for a RegisterRegion only.
    Msg(u64, Message, usize, Option<OwnedFd>),
    Gone(u64),
}

impl Server {
    fn run(mut self) {
        let (in_tx, in_rx) = unbounded::<Incoming>();
        let mut turns = clients::Turns::default();
        let mut last_sweep = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            self.accept(&in_tx);
            // Cheap: each reader passes on at most CLIENT_IN_OCTETS unhandled.
            while let Ok(m) = in_rx.try_recv() {
                turns.push(m);
            }
            if turns.is_empty() {
                select! {
                    recv(in_rx) -> m => match m {
                        Ok(m) => turns.push(m),
                        Err(_) => break,
                    },
                    recv(self.notify) -> n => if let Ok(n) = n { self.notified(n) },
                    default(Duration::from_millis(20)) => {}
                }
            } else if let Ok(n) = self.notify.try_recv() {
                // Workers' notifications take turns with the clients.
                self.notified(n);
            }
            match turns.next() {
                Some(Incoming::Msg(c, m, octets, fd)) => {
                    if let Some(client) = self.clients.get_mut(&c) {
                        client.handled(octets);
                        client.last_heard = Instant::now();
                    }
                    self.handle(c, m, fd)
                }
                Some(Incoming::Gone(c)) => self.client_gone(c),
                None => {}
            }
            self.capture_tick();
            let now = Instant::now();
            self.check_faults(now);
            if now.saturating_duration_since(last_sweep) >= clients::SWEEP_EVERY {
                last_sweep = now;
                self.sweep_clients(now);
                self.sweep_applications(now);
            }
        }
        if self.capture.is_some() {
            self.finish_capture("datapath stopping");
        }
        for w in &self.workers {
            let _ = w.send(Command::Shutdown);
        }
        for (q, h) in self.worker_handles.drain(..).enumerate() {
            // A stuck worker is never joined (it would hold the stop up for good): the
            // process exit takes its thread.
            if let Some(h) = h.filter(|_| !self.faults.is_stuck(q)) {
                let _ = h.join();
            }
        }
        if let Some(why) = self.faults.failed() {
            // The other workers stopped without reporting their flows: say why they end.
            let reason = format!("datapath stopping: {why}");
            let ids: Vec<u64> = self.adopted.keys().copied().collect();
            for flow_id in ids {
                self.end_flow(flow_id, &reason);
            }
        }
        self.close_clients(Instant::now() + CLIENT_FLUSH);
        // `steering` drops here: XDP detaches.
    }

    /// A control client went away (closed, or died): what it held goes. Its regions and
    /// subscriptions end (workers stop placing into those regions: a flow that still writes
    /// there gets a Terminate), and so do the flows it adopted but never handed over (their
    /// 4-tuples would stay steered, dropped, forever). Flows it handed over keep running: a
    /// restarted mpa-control must not cost the connections it set up.
    fn client_gone(&mut self, client: u64) {
        if let Some(c) = self.clients.remove(&client) {
            c.close();
        }
        self.close_subscriptions(client);
        self.applications_client_gone(client);
        let stags = self.registry.client_gone(client);
        self.unwatch_all(client);
        for &stag in &stags {
            for w in &self.workers {
                let _ = w.send(Command::RemoveRegion(stag));
            }
        }
        let pending: Vec<u64> = self
            .adopted
            .iter()
            .filter(|(_, a)| a.client == client && a.worker.is_none())
            .map(|(&id, _)| id)
            .collect();
        for &flow_id in &pending {
            self.forget(flow_id);
        }
        if !stags.is_empty() || !pending.is_empty() {
            tracing::info!(
                client,
                regions = stags.len(),
                adoptions = pending.len(),
                "control client gone: its regions and unfinished adoptions released"
            );
        }
    }

    /// Removes an adopted flow and its 4-tuple from the XDP flow map.
    fn forget(&mut self, flow_id: u64) {
        if let Some(a) = self.adopted.remove(&flow_id) {
            if let Err(e) = self.steering.remove_flow(&a.key) {
                tracing::warn!(flow_id, %e, "remove flow from XDP map");
            }
            // A setup that failed before its hand-over leaves no TS records behind.
            if a.worker.is_none() {
                let _ = self.steering.take_ts_segments(&a.key);
            }
        }
    }
}

/// The budget when none is configured: a quarter of the machine's memory, at least 256 MiB.
fn default_memory_budget() -> u64 {
    let pages = nix::unistd::sysconf(nix::unistd::SysconfVar::_PHYS_PAGES)
        .ok()
        .flatten()
        .unwrap_or(0);
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .unwrap_or(4096);
    ((pages.max(0) as u64).saturating_mul(page.max(0) as u64) / 4).max(256 << 20)
}

#[cfg(test)]
mod tests {
    use super::link_mss;

    #[test]
    fn link_mss_is_bounded_by_the_mtu_and_the_umem_frame() {
        assert_eq!(link_mss(Some(1500), 4096), 1460);
        assert_eq!(link_mss(Some(9000), 4096), 4096 - 256 - 14 - 40);
        assert_eq!(link_mss(Some(9000), 2048), 2048 - 256 - 14 - 40);
        assert_eq!(link_mss(None, 4096), 1460);
        assert_eq!(link_mss(Some(68), 4096), 64);
        assert_eq!(link_mss(Some(u32::MAX), u32::MAX), u16::MAX);
    }
}
