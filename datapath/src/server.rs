//! The datapath process: XDP steering, one worker per queue, and the control-socket server
//! that mpa-control talks to (the only code that touches BPF maps: DESIGN.md).

use crate::capture::{CaptureBatch, CaptureSpec, BATCHES_PER_WORKER};
use crate::registry::Registry;
use crate::tcp::TcpConfig;
use crate::worker::{Command, Notification, Worker, WorkerConfig};
use crate::xsk::{XskConfig, XskQueue};
use crossbeam_channel::{select, unbounded, Receiver, Sender};
use mpa_bpf::{AttachMode, FlowKey, FlowValue, XdpSteering};
use mpa_ctl_proto::capture::{check_request, pcap_record_len, PCAP_FILE_HEADER_LEN};
use mpa_ctl_proto::{
    read_message, write_message, write_message_with_fd, CapturedFrame, ErrorCode, Message,
    PostTarget, VERSION,
};
use serde_json::json;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
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
    /// Pin worker q to CPU q (right on a server with cores to spare; on a small machine that
    /// also runs the sender it only gets in the scheduler's way).
    pub pin_cpus: bool,
    /// Octets of registered regions allowed in all.
    pub max_region_bytes: u64,
}

/// Default of [`DatapathConfig::max_region_bytes`]: 4 GiB.
pub const DEFAULT_MAX_REGION_BYTES: u64 = 4 << 30;

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
    Xsk(#[from] crate::xsk::XskError),
    /// The control socket could not be created.
    #[error("control socket {0}: {1}")]
    Socket(PathBuf, io::Error),
}

/// A running datapath; dropping it stops everything and detaches XDP.
pub struct Datapath {
    stop: Arc<AtomicBool>,
    control: Option<JoinHandle<()>>,
    socket: PathBuf,
}

impl Datapath {
    /// Starts workers and the control server in the calling thread's network namespace.
    pub fn start(cfg: DatapathConfig) -> Result<Datapath, StartError> {
        let ifindex = mpa_bpf::ifindex_of(&cfg.iface)
            .map_err(|e| StartError::Iface(cfg.iface.clone(), e.to_string()))?;
        let our_mac = interface_mac(&cfg.iface)?;
        let steering = XdpSteering::attach(ifindex, cfg.xdp_mode)?;
        let (notify_tx, notify_rx) = unbounded();
        let mut workers = Vec::new();
        let mut handles = Vec::new();
        for q in 0..cfg.queues {
            let xsk = XskQueue::open(&cfg.iface, q, &cfg.xsk)?;
            steering.set_xsk(q, xsk.as_fd())?;
            let (tx, rx) = unbounded();
            let waker = xsk.waker();
            let wcfg = WorkerConfig {
                our_mac,
                tcp: cfg.tcp.clone(),
                digest: cfg.digest,
                verify_checksums: cfg.verify_checksums,
            };
            let w = Worker::new(xsk, wcfg, rx, notify_tx.clone());
            let pin = cfg.pin_cpus;
            handles.push(
                std::thread::Builder::new()
                    .name(format!("mpa-worker-{q}"))
                    .spawn(move || {
                        if pin {
                            pin_to_cpu(q);
                        }
                        w.run()
                    })
                    .map_err(|e| StartError::Iface(cfg.iface.clone(), e.to_string()))?,
            );
            workers.push(WorkerHandle { tx, waker });
        }
        let _ = std::fs::remove_file(&cfg.socket);
        let listener = UnixListener::bind(&cfg.socket)
            .map_err(|e| StartError::Socket(cfg.socket.clone(), e))?;
        std::fs::set_permissions(&cfg.socket, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| StartError::Socket(cfg.socket.clone(), e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| StartError::Socket(cfg.socket.clone(), e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let server = Server {
            steering,
            workers,
            worker_handles: handles,
            notify: notify_rx,
            listener,
            clients: HashMap::new(),
            next_client: 1,
            next_flow: 1,
            adopted: HashMap::new(),
            finished: std::collections::VecDeque::new(),
            registry: Registry::new(cfg.max_region_bytes),
            stop: stop.clone(),
            capture: None,
            next_capture: 1,
        };
        let control = std::thread::Builder::new()
            .name("mpa-control-server".into())
            .spawn(move || server.run())
            .map_err(|e| StartError::Socket(cfg.socket.clone(), e))?;
        tracing::info!(iface = %cfg.iface, queues = cfg.queues, socket = %cfg.socket.display(), "datapath running");
        Ok(Datapath {
            stop,
            control: Some(control),
            socket: cfg.socket,
        })
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
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for Datapath {
    fn drop(&mut self) {
        self.shutdown();
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
    waker: crate::xsk::Waker,
}

impl WorkerHandle {
    fn send(&self, c: Command) -> Result<(), crossbeam_channel::SendError<Command>> {
        self.tx.send(c)?;
        self.waker.wake();
        Ok(())
    }
}

struct Client {
    /// To the client's writer thread (bounded): the control thread never blocks on a slow
    /// client.
    out: Sender<Outgoing>,
    hello: bool,
}

/// A message for a client, with the region whose descriptor goes along (SCM_RIGHTS).
struct Outgoing(Message, Option<Arc<crate::region::RegionMemory>>);

/// Messages queued for one client before further completions for it are dropped (and
/// counted).
const CLIENT_QUEUE: usize = 65_536;

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
    worker_handles: Vec<JoinHandle<()>>,
    notify: Receiver<Notification>,
    listener: UnixListener,
    clients: HashMap<u64, Client>,
    next_client: u64,
    next_flow: u64,
    adopted: HashMap<u64, Adopted>,
    /// Final counters of the most recent ended flows (bounded).
    finished: std::collections::VecDeque<crate::flow::FlowReport>,
    registry: Registry,
    stop: Arc<AtomicBool>,
    /// The packet capture running, if any (one at a time).
    capture: Option<Capture>,
    next_capture: u64,
}

/// A packet capture on behalf of one client.
struct Capture {
    client: u64,
    generation: u64,
    flow: Option<u64>,
    deadline: Instant,
    max_bytes: u64,
    /// Octets of the pcap file the frames sent so far make (file header included).
    bytes: u64,
    /// Frames sent to the client.
    frames: u64,
    /// Frames lost: no room in a worker, or the client's queue full.
    dropped: u64,
    /// Where each worker's emptied batches go back.
    returns: Vec<Sender<CaptureBatch>>,
    /// Set when the capture must end at the next turn of the loop.
    ending: Option<&'static str>,
}

/// Octets of frames per [`Message::Captured`] (base64 makes them a third larger; the
/// protocol's message limit is 8 MiB).
const CAPTURED_MESSAGE_OCTETS: usize = 1 << 20;

/// Ended flows whose final counters stay readable over the control socket.
const FINISHED_KEPT: usize = 256;

enum Incoming {
    Msg(u64, Message),
    Gone(u64),
}

impl Server {
    fn run(mut self) {
        let (in_tx, in_rx) = unbounded::<Incoming>();
        while !self.stop.load(Ordering::Relaxed) {
            self.accept(&in_tx);
            select! {
                recv(in_rx) -> m => match m {
                    Ok(Incoming::Msg(c, m)) => self.handle(c, m),
                    Ok(Incoming::Gone(c)) => {
                        self.clients.remove(&c);
                        self.registry.client_gone(c);
                    }
                    Err(_) => break,
                },
                recv(self.notify) -> n => if let Ok(n) = n { self.notified(n) },
                default(Duration::from_millis(20)) => {}
            }
            self.capture_tick();
        }
        if self.capture.is_some() {
            self.finish_capture("datapath stopping");
        }
        for w in &self.workers {
            let _ = w.send(Command::Shutdown);
        }
        for h in self.worker_handles.drain(..) {
            let _ = h.join();
        }
        // `steering` drops here: XDP detaches.
    }

    fn accept(&mut self, in_tx: &Sender<Incoming>) {
        // Linux allocates a socket in every accept(), even one that finds nothing: ask poll()
        // first, since this runs on every turn of the loop (every notification).
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [PollFd::new(self.listener.as_fd(), PollFlags::POLLIN)];
        if !matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0) {
            return;
        }
        loop {
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::warn!(%e, "control accept");
                    return;
                }
            };
            let _ = stream.set_nonblocking(false);
            // Only our own user (or root) may drive the datapath.
            let allowed =
                nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
                    .map(|c| c.uid() == nix::unistd::geteuid().as_raw() || c.uid() == 0)
                    .unwrap_or(false);
            let mut w = match stream.try_clone() {
                Ok(w) => w,
                Err(_) => continue,
            };
            if !allowed {
                let _ = write_message(
                    &mut w,
                    &Message::Error {
                        id: 0,
                        code: ErrorCode::Forbidden,
                        message: "not the datapath's user".into(),
                    },
                );
                continue;
            }
            let id = self.next_client;
            self.next_client += 1;
            let tx = in_tx.clone();
            let mut r = stream;
            std::thread::spawn(move || loop {
                match read_message(&mut r) {
                    Ok(m) => {
                        if tx.send(Incoming::Msg(id, m)).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        tracing::debug!(client = id, %e, "control client gone");
                        let _ = tx.send(Incoming::Gone(id));
                        return;
                    }
                }
            });
            let (out, out_rx) = crossbeam_channel::bounded::<Outgoing>(CLIENT_QUEUE);
            std::thread::spawn(move || {
                for Outgoing(m, region) in out_rx {
                    let r = match &region {
                        Some(mem) => write_message_with_fd(&w, &m, mem.fd()),
                        None => write_message(&mut w, &m),
                    };
                    if let Err(e) = r {
                        tracing::debug!(client = id, %e, "control client write");
                        return;
                    }
                }
            });
            self.clients.insert(id, Client { out, hello: false });
        }
    }

    fn reply(&mut self, client: u64, m: Message) {
        self.send_to(client, m, None);
    }

    /// Queues a message for a client; `false` when its queue is full (or it is gone).
    fn send_to(
        &mut self,
        client: u64,
        m: Message,
        region: Option<Arc<crate::region::RegionMemory>>,
    ) -> bool {
        let Some(c) = self.clients.get(&client) else {
            return false;
        };
        match c.out.try_send(Outgoing(m, region)) {
            Ok(()) => true,
            Err(crossbeam_channel::TrySendError::Full(_)) => {
                tracing::warn!(client, "control client does not keep up: message dropped");
                false
            }
            Err(crossbeam_channel::TrySendError::Disconnected(_)) => false,
        }
    }

    fn handle(&mut self, client: u64, m: Message) {
        let hello = self.clients.get(&client).is_some_and(|c| c.hello);
        if !hello {
            match m {
                Message::Hello { version, .. } if version == VERSION => {
                    if let Some(c) = self.clients.get_mut(&client) {
                        c.hello = true;
                    }
                    let agent = concat!("mpa-datapath ", env!("CARGO_PKG_VERSION")).to_string();
                    self.reply(
                        client,
                        Message::Hello {
                            version: VERSION,
                            agent,
                        },
                    );
                }
                Message::Hello { version, .. } => {
                    let message = format!("version {version}, this datapath speaks {VERSION}");
                    self.reply(
                        client,
                        Message::Hello {
                            version: VERSION,
                            agent: message,
                        },
                    );
                }
                _ => self.reply(
                    client,
                    Message::Error {
                        id: 0,
                        code: ErrorCode::BadRequest,
                        message: "hello first".into(),
                    },
                ),
            }
            return;
        }
        match m {
            Message::AdoptFlow { id, local, remote } => {
                let key = match FlowKey::new(local, remote) {
                    Ok(k) => k,
                    Err(e) => {
                        return self.reply(
                            client,
                            Message::Error {
                                id,
                                code: ErrorCode::BadRequest,
                                message: e.to_string(),
                            },
                        )
                    }
                };
                if self.adopted.values().any(|a| a.key == key) {
                    return self.reply(
                        client,
                        Message::Error {
                            id,
                            code: ErrorCode::FlowExists,
                            message: format!("{local} ↔ {remote} is owned"),
                        },
                    );
                }
                let flow_id = self.next_flow;
                match self.steering.insert_flow(
                    &key,
                    FlowValue {
                        flow_id: flow_id as u32,
                        flags: 0,
                    },
                ) {
                    Ok(()) => {
                        self.next_flow += 1;
                        self.adopted.insert(
                            flow_id,
                            Adopted {
                                key,
                                local,
                                remote,
                                client,
                                worker: None,
                                pd: None,
                            },
                        );
                        self.reply(client, Message::FlowAdopted { id, flow_id });
                    }
                    Err(e) => self.reply(
                        client,
                        Message::Error {
                            id,
                            code: ErrorCode::Limit,
                            message: e.to_string(),
                        },
                    ),
                }
            }
            Message::HandOver { id, handover } => {
                let flow_id = handover.flow_id;
                let Some(a) = self.adopted.get_mut(&flow_id) else {
                    return self.reply(
                        client,
                        Message::Error {
                            id,
                            code: ErrorCode::UnknownFlow,
                            message: format!("flow {flow_id} was not adopted"),
                        },
                    );
                };
                if (handover.tcp.local, handover.tcp.remote) != (a.local, a.remote) {
                    return self.reply(
                        client,
                        Message::Error {
                            id,
                            code: ErrorCode::BadRequest,
                            message: "4-tuple differs from the adopted one".into(),
                        },
                    );
                }
                // Queue choice: RSS decides where the peer's segments arrive, which nothing
                // tells us yet. Spread hand-overs; the first segment on another queue makes
                // that queue's worker ask for the flow (Notification::Stray) and it moves.
                let w = (flow_id as usize) % self.workers.len();
                a.worker = Some(w);
                a.pd = handover.mpa.pd;
                let bufs = handover
                    .mpa
                    .pd
                    .map(|pd| self.registry.take_waiting(pd))
                    .unwrap_or_default();
                let (tx, rx) = crossbeam_channel::bounded(1);
                if self.workers[w]
                    .send(Command::HandOver(handover, bufs, tx))
                    .is_err()
                {
                    return self.reply(
                        client,
                        Message::Error {
                            id,
                            code: ErrorCode::Internal,
                            message: "worker gone".into(),
                        },
                    );
                }
                match rx.recv_timeout(Duration::from_secs(2)) {
                    Ok(Ok(())) => self.reply(client, Message::HandedOver { id, flow_id }),
                    Ok(Err(e)) => {
                        self.forget(flow_id);
                        self.reply(
                            client,
                            Message::Error {
                                id,
                                code: ErrorCode::BadRequest,
                                message: e.to_string(),
                            },
                        )
                    }
                    Err(_) => self.reply(
                        client,
                        Message::Error {
                            id,
                            code: ErrorCode::Internal,
                            message: "worker did not answer".into(),
                        },
                    ),
                }
            }
            Message::CloseFlow { id, flow_id } => match self.adopted.get(&flow_id) {
                None => self.reply(
                    client,
                    Message::Error {
                        id,
                        code: ErrorCode::UnknownFlow,
                        message: format!("no flow {flow_id}"),
                    },
                ),
                Some(a) => {
                    match a.worker {
                        Some(w) => {
                            let _ = self.workers[w].send(Command::Close(flow_id));
                        }
                        None => self.forget(flow_id),
                    }
                    self.reply(client, Message::Ok { id });
                }
            },
            Message::GetStats { id } => {
                let mut queues = Vec::new();
                for w in &self.workers {
                    let (tx, rx) = crossbeam_channel::bounded(1);
                    if w.send(Command::Stats(tx)).is_ok() {
                        if let Ok(report) = rx.recv_timeout(Duration::from_secs(2)) {
                            queues.push(report);
                        }
                    }
                }
                let xdp = self.steering.counters().ok().map(|c| format!("{c:?}"));
                let capture = self.capture.as_ref().map(|c| {
                    json!({
                        "client": c.client,
                        "flow": c.flow,
                        "frames": c.frames,
                        "bytes": c.bytes,
                        "max_bytes": c.max_bytes,
                        "dropped_by_client_queue": c.dropped,
                        "ms_left": c.deadline.saturating_duration_since(Instant::now()).as_millis() as u64,
                    })
                });
                let stats = json!({
                    "queues": queues,
                    "xdp": xdp,
                    "adopted_flows": self.adopted.len(),
                    "registry": self.registry.stats_json(),
                    "ended_flows": self.finished,
                    "capture": capture,
                });
                self.reply(client, Message::Stats { id, stats });
            }
            Message::CreateRegion {
                id,
                len,
                pd,
                remote_write,
                remote_read,
            } => match self.registry.create(len, pd, remote_write, remote_read) {
                Ok(r) => {
                    for w in &self.workers {
                        let _ = w.send(Command::AddRegion(r.clone()));
                    }
                    tracing::info!(
                        stag = r.info.stag,
                        len,
                        pd,
                        huge = r.info.huge_pages,
                        "region created"
                    );
                    let m = Message::RegionCreated {
                        id,
                        region: r.info.clone(),
                    };
                    self.send_to(client, m, Some(r.mem.clone()));
                }
                Err((code, message)) => self.reply(client, Message::Error { id, code, message }),
            },
            Message::DestroyRegion { id, stag } => match self.registry.destroy(stag) {
                Ok(()) => {
                    for w in &self.workers {
                        let _ = w.send(Command::RemoveRegion(stag));
                    }
                    self.reply(client, Message::Ok { id });
                }
                Err((code, message)) => self.reply(client, Message::Error { id, code, message }),
            },
            Message::ListRegions { id, pd } => {
                let regions = self.registry.list(pd);
                self.reply(client, Message::Regions { id, regions });
            }
            Message::PostRecv {
                id,
                target,
                stag,
                offset,
                len,
                count,
            } => {
                let r = self.post_recv(target, stag, offset, len, count);
                match r {
                    Ok(()) => self.reply(client, Message::Ok { id }),
                    Err((code, message)) => {
                        self.reply(client, Message::Error { id, code, message })
                    }
                }
            }
            Message::Subscribe { id, pd } => {
                self.registry.subscribe(pd, client);
                self.reply(client, Message::Ok { id });
            }
            Message::StartCapture {
                id,
                flow,
                max_bytes,
                duration_ms,
                snaplen,
            } => {
                let r = self.start_capture(client, flow, max_bytes, duration_ms, snaplen);
                match r {
                    Ok(()) => self.reply(client, Message::Ok { id }),
                    Err((code, message)) => {
                        self.reply(client, Message::Error { id, code, message })
                    }
                }
            }
            Message::StopCapture { id } => match self.capture.as_mut() {
                Some(c) if c.client == client => {
                    c.ending.get_or_insert("stopped");
                    self.reply(client, Message::Ok { id });
                }
                _ => self.reply(
                    client,
                    Message::Error {
                        id,
                        code: ErrorCode::BadRequest,
                        message: "no capture of this client is running".into(),
                    },
                ),
            },
            other => {
                let message = format!("not a request: {other:?}");
                self.reply(
                    client,
                    Message::Error {
                        id: 0,
                        code: ErrorCode::BadRequest,
                        message,
                    },
                );
            }
        }
    }

    fn post_recv(
        &mut self,
        target: PostTarget,
        stag: u32,
        offset: u64,
        len: u32,
        count: u32,
    ) -> Result<(), crate::registry::Refusal> {
        match target {
            PostTarget::Pd(pd) => {
                let bufs = self.registry.buffers(pd, stag, offset, len, count)?;
                self.registry.wait(pd, bufs)
            }
            PostTarget::Flow(flow_id) => {
                let a = self
                    .adopted
                    .get(&flow_id)
                    .ok_or((ErrorCode::UnknownFlow, format!("no flow {flow_id}")))?;
                let (Some(w), Some(pd)) = (a.worker, a.pd) else {
                    return Err((
                        ErrorCode::BadRequest,
                        format!("flow {flow_id} has no protection domain (or no hand-over yet)"),
                    ));
                };
                let bufs = self.registry.buffers(pd, stag, offset, len, count)?;
                let (tx, rx) = crossbeam_channel::bounded(1);
                self.workers[w]
                    .send(Command::PostRecv(flow_id, bufs, tx))
                    .map_err(|_| (ErrorCode::Internal, "worker gone".to_string()))?;
                match rx.recv_timeout(Duration::from_secs(2)) {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err((ErrorCode::BadRequest, e.to_string())),
                    Err(_) => Err((ErrorCode::Internal, "worker did not answer".into())),
                }
            }
        }
    }

    /// Starts a capture for `client`: every worker gets its batches (the capture's whole
    /// memory, reserved here) and starts copying.
    fn start_capture(
        &mut self,
        client: u64,
        flow: Option<u64>,
        max_bytes: u64,
        duration_ms: u64,
        snaplen: u32,
    ) -> Result<(), crate::registry::Refusal> {
        check_request(max_bytes, duration_ms, snaplen)
            .map_err(|e| (ErrorCode::BadRequest, e.to_string()))?;
        if let Some(c) = &self.capture {
            let left = c.deadline.saturating_duration_since(Instant::now());
            return Err((
                ErrorCode::Limit,
                format!(
                    "a capture is already running (one at a time; it ends within {:.1} s)",
                    left.as_secs_f64()
                ),
            ));
        }
        if let Some(f) = flow.filter(|f| !self.adopted.contains_key(f)) {
            return Err((ErrorCode::UnknownFlow, format!("no flow {f}")));
        }
        let generation = self.next_capture;
        self.next_capture += 1;
        let mut returns = Vec::with_capacity(self.workers.len());
        for w in &self.workers {
            let (tx, free) = crossbeam_channel::bounded(BATCHES_PER_WORKER);
            for _ in 0..BATCHES_PER_WORKER {
                let _ = tx.try_send(CaptureBatch::standard());
            }
            let spec = CaptureSpec {
                generation,
                flow,
                snaplen,
                free,
            };
            if w.send(Command::StartCapture(spec)).is_err() {
                // Undo: the workers that started drop their taps (their answers are not needed).
                for w in &self.workers {
                    let (tx, _) = crossbeam_channel::bounded(1);
                    let _ = w.send(Command::StopCapture(tx));
                }
                return Err((ErrorCode::Internal, "worker gone".into()));
            }
            returns.push(tx);
        }
        tracing::info!(
            client,
            ?flow,
            max_bytes,
            duration_ms,
            snaplen,
            "capture started"
        );
        self.capture = Some(Capture {
            client,
            generation,
            flow,
            deadline: Instant::now() + Duration::from_millis(duration_ms),
            max_bytes,
            bytes: PCAP_FILE_HEADER_LEN,
            frames: 0,
            dropped: 0,
            returns,
            ending: None,
        });
        Ok(())
    }

    /// Ends the capture when its time is up, its size bound reached, its client asked or left.
    fn capture_tick(&mut self) {
        let Some(c) = &self.capture else {
            return;
        };
        let reason = if !self.clients.contains_key(&c.client) {
            Some("client gone")
        } else if c.ending.is_some() {
            c.ending
        } else if Instant::now() >= c.deadline {
            Some("duration")
        } else {
            None
        };
        if let Some(reason) = reason {
            self.finish_capture(reason);
        }
    }

    /// Stops every worker's tap, forwards what they still held, and tells the client.
    fn finish_capture(&mut self, reason: &'static str) {
        let mut dropped = 0;
        for w in &self.workers {
            let (tx, rx) = crossbeam_channel::bounded(1);
            if w.send(Command::StopCapture(tx)).is_ok() {
                match rx.recv_timeout(Duration::from_secs(2)) {
                    Ok(d) => dropped += d,
                    Err(_) => tracing::warn!("worker did not stop its capture in time"),
                }
            }
        }
        // A worker sends its last batches before it answers: they are queued by now.
        while let Ok(n) = self.notify.try_recv() {
            self.notified(n);
        }
        let Some(c) = self.capture.take() else {
            return;
        };
        let dropped = c.dropped + dropped;
        tracing::info!(
            client = c.client,
            reason,
            frames = c.frames,
            bytes = c.bytes,
            dropped,
            "capture done"
        );
        let done = Message::CaptureDone {
            reason: reason.to_string(),
            frames: c.frames,
            dropped,
        };
        self.reply(c.client, done);
    }

    /// Sends a worker's captured frames to the capturing client (within the size bound) and
    /// gives the batch back to the worker.
    fn captured(&mut self, queue: u32, generation: u64, mut batch: CaptureBatch) {
        let Some(c) = self.capture.as_mut().filter(|c| c.generation == generation) else {
            return;
        };
        let mut messages: Vec<Vec<CapturedFrame>> = Vec::new();
        let mut chunk = Vec::new();
        let mut octets = 0usize;
        for (r, data) in batch.frames() {
            let grows = pcap_record_len(data.len());
            if c.bytes + grows > c.max_bytes {
                c.ending.get_or_insert("max_bytes");
                break;
            }
            c.bytes += grows;
            octets += data.len();
            chunk.push(CapturedFrame {
                ts_ns: r.ts_ns,
                direction: r.direction,
                orig_len: r.orig_len,
                data: data.to_vec(),
                reconstructed: r.reconstructed,
            });
            if octets >= CAPTURED_MESSAGE_OCTETS {
                messages.push(std::mem::take(&mut chunk));
                octets = 0;
            }
        }
        if !chunk.is_empty() {
            messages.push(chunk);
        }
        batch.clear();
        if let Some(back) = c.returns.get(queue as usize) {
            let _ = back.try_send(batch);
        }
        let client = c.client;
        for frames in messages {
            let n = frames.len() as u64;
            let sent = self.send_to(client, Message::Captured { frames }, None);
            if let Some(c) = self.capture.as_mut() {
                if sent {
                    c.frames += n;
                } else {
                    c.dropped += n;
                }
            }
        }
    }

    fn forget(&mut self, flow_id: u64) {
        if let Some(a) = self.adopted.remove(&flow_id) {
            if let Err(e) = self.steering.remove_flow(&a.key) {
                tracing::warn!(flow_id, %e, "remove flow from XDP map");
            }
        }
    }

    fn notified(&mut self, n: Notification) {
        match n {
            Notification::Captured {
                queue,
                generation,
                batch,
            } => self.captured(queue, generation, batch),
            Notification::Stray {
                queue,
                local,
                remote,
            } => {
                let q = queue as usize;
                let Some((&flow_id, a)) = self
                    .adopted
                    .iter_mut()
                    .find(|(_, a)| a.local == local && a.remote == remote)
                else {
                    return;
                };
                let Some(owner) = a.worker.filter(|w| *w != q && q < self.workers.len()) else {
                    return;
                };
                let (tx, rx) = crossbeam_channel::bounded(1);
                if self.workers[owner]
                    .send(Command::Release(flow_id, tx))
                    .is_err()
                {
                    return;
                }
                if let Ok(Some(flow)) = rx.recv_timeout(Duration::from_secs(1)) {
                    a.worker = Some(q);
                    let _ = self.workers[q].send(Command::Adopt(flow, (local, remote)));
                    tracing::debug!(flow_id, from = owner, to = q, "flow moved to its RSS queue");
                }
            }
            Notification::Completions { pd, items } => {
                let n = items.len() as u64;
                let sent = match self.registry.subscriber(pd) {
                    Some(c) => self.send_to(c, Message::Completions { pd, items }, None),
                    None => false,
                };
                if !sent {
                    self.registry.unclaimed_completions += n;
                }
            }
            Notification::FlowGone {
                flow_id,
                end,
                stats,
                ..
            } => {
                let client = self.adopted.get(&flow_id).map(|a| a.client);
                self.forget(flow_id);
                tracing::info!(flow_id, ?end, ?stats, "flow gone");
                if let Some(c) = client {
                    let m = Message::FlowGone {
                        flow_id,
                        mpa_error: end.mpa_error.map(mpa::MpaErrorCode::code),
                        terminate: end.terminate,
                        reason: end.reason,
                    };
                    self.reply(c, m);
                }
                if self.finished.len() == FINISHED_KEPT {
                    self.finished.pop_front();
                }
                self.finished.push_back(*stats);
            }
        }
    }
}
