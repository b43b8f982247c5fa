//! `mpa-control serve`: accept MPA connections with kernel sockets, run the Responder startup,
//! hand each connection to the datapath and keep its frozen socket until the datapath says
//! the flow is gone (docs/architecture.md, "Connection setup").
//!
//! Threads:
//! * one **listener** thread per `[[listener]]`: accepts, refuses at once when the datapath is
//!   unavailable, `max_connections` is reached or the peer's address holds
//!   `max_connections_per_source` (with a reset: `refuse`), otherwise starts
//!   a setup;
//! * one short-lived **setup** thread per connection in its startup phase, running
//!   [`respond_and_hand_over`] with a [`DatapathClient`] whose other end is a **relay** thread
//!   (an in-process socket pair) — both end when the setup does;
//! * one **link** thread owning the only connection to the datapath. Relays pass it requests
//!   over a channel; it rewrites their ids onto its own connection, so every flow is adopted on
//!   that connection and every `FlowGone` arrives there. It keeps `flow_id → frozen socket` for
//!   the handed-over connections (no thread per established connection) and drops the socket
//!   (closing it silently, in repair mode) on `FlowGone`.
//!
//! When the datapath goes away (socket error, or no answer within [`ANSWER_TIMEOUT`]) the link
//! closes every frozen socket, logs one line containing [`UNAVAILABLE`], makes the listeners
//! refuse new connections and reconnects every [`RETRY_EVERY`]. Exiting sends nothing: the
//! datapath keeps serving established flows.

mod admission;
mod applications;
mod request_ids;
use request_ids::id_mut;
pub mod counters;

use crate::config::{Config, ListenerConfig};
use crate::datapath_client::DatapathClient;
use crate::freeze::FrozenSocket;
use crate::responder::{respond_and_hand_over, Outcome};
use crate::Placement;
use admission::{NoSlot, Shared, Slot};
use counters::{Counters, DaemonCollector, Failure, ListenerCounts, Refusal};
use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender};
use mpa_ctl_proto::cm::Decision;
use mpa_ctl_proto::{handshake, read_message, write_message, Message, VERSION};
use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// An answer from the datapath later than this means it is hung: treated as gone. (Its
/// control thread may spend up to 2 s on one hand-over waiting for a worker.)
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// Reconnection attempts while the datapath is unavailable.
pub const RETRY_EVERY: Duration = Duration::from_secs(1);
/// A liveness probe is sent when nothing else was sent for this long.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);
/// The words of the one log line written when the datapath goes away.
pub const UNAVAILABLE: &str = "datapath unavailable";
/// The log message of each listener once it accepts.
pub const LISTENING: &str = "listening for MPA connections";
/// The flow id the liveness probe closes: never allocated (the XDP map keeps 32 bits), so
/// the answer is always "unknown flow". The control protocol has no ping message.
const PROBE_FLOW: u64 = u64::MAX;
const AGENT: &str = concat!("mpa-control ", env!("CARGO_PKG_VERSION"));
const TICK: Duration = Duration::from_millis(100);

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A listener could not bind.
    #[error("listener {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A thread could not be started.
    #[error("cannot start a thread: {0}")]
    Spawn(std::io::Error),
}

/// A handed-over connection: its frozen kernel socket, kept until the flow is gone.
#[derive(Debug)]
struct Held {
    /// Dropping it closes the socket silently.
    _frozen: FrozenSocket,
    peer: SocketAddr,
    _slot: Slot,
}

/// What setups and relays tell the link.
enum LinkMsg {
    /// A request for the datapath; the answer (with the epoch it was given in) comes back on
    /// `answer`, or `answer` is dropped when the datapath is unavailable.
    Request {
        /// The epoch of the relay's earlier answers (`None` before the first).
        epoch: Option<u64>,
        msg: Message,
        answer: Sender<(u64, Message)>,
        /// An application's connection request (its listener): where the application's
        /// decision goes once the datapath queued it.
        decision: Option<(u64, Sender<Decision>)>,
    },
    /// A connection was handed over: hold its socket until the flow is gone.
    Register {
        epoch: u64,
        flow_id: u64,
        held: Held,
    },
    /// A setup ended; the flows it adopted are no longer awaited.
    Done { epoch: u64, flows: Vec<u64> },
}

/// What the link's reader thread saw, tagged with the connection's epoch.
enum DpEvent {
    Msg(Message),
    Lost(String),
}

/// A running daemon.
pub struct Daemon {
    /// The listeners' addresses, in configuration order.
    pub bound: Vec<SocketAddr>,
    shared: Arc<Shared>,
    counters: Arc<Counters>,
    _threads: Vec<JoinHandle<()>>,
}

impl Daemon {
    /// Binds every listener, connects to the datapath (or starts retrying) and starts
    /// serving. The threads run until the process exits.
    pub fn start(cfg: Config) -> Result<Daemon, DaemonError> {
        let mut listeners = Vec::new();
        for l in &cfg.listeners {
            let sock = TcpListener::bind(l.bind).map_err(|source| DaemonError::Bind {
                addr: l.bind,
                source,
            })?;
            listeners.push((sock, Arc::new(l.clone())));
        }
        let counters = Arc::new(Counters {
            listeners: listeners
                .iter()
                .map(|(_, l)| (l.bind, Default::default()))
                .collect(),
            ..Default::default()
        });
        let shared = Arc::new(Shared {
            up: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            max: cfg.max_connections,
            by_source: Default::default(),
            per_source: cfg.max_connections_per_source,
        });
        let (link_tx, link_rx) = unbounded();
        let mut link = Link::new(
            cfg.datapath_socket.clone(),
            shared.clone(),
            counters.clone(),
            link_tx.clone(),
            cfg.startup_timeout,
        );
        // The listeners' ports are watched for TS.Recent from before the first accept.
        link.watch = listeners
            .iter()
            .filter_map(|(sock, _)| sock.local_addr().ok().map(|a| a.port()))
            .collect();
        // First attempt before accepting, so that a running datapath is used from the start.
        link.tick();
        let mut threads = vec![std::thread::Builder::new()
            .name("mpa-link".into())
            .spawn(move || link.run(link_rx))
            .map_err(DaemonError::Spawn)?];
        let mut bound = Vec::new();
        for (i, (sock, lc)) in listeners.into_iter().enumerate() {
            let (shared, link_tx) = (shared.clone(), link_tx.clone());
            let counts = counters.listeners[i].1.clone();
            bound.push(lc.bind);
            tracing::info!(bind = %lc.bind, "{LISTENING}");
            threads.push(
                std::thread::Builder::new()
                    .name(format!("mpa-listen-{}", lc.bind))
                    .spawn(move || accept_loop(sock, lc, shared, counts, link_tx))
                    .map_err(DaemonError::Spawn)?,
            );
        }
        Ok(Daemon {
            bound,
            shared,
            counters,
            _threads: threads,
        })
    }

    /// What the listeners and setups did so far, for a metrics scrape.
    pub fn collector(&self) -> DaemonCollector {
        DaemonCollector(self.shared.clone(), self.counters.clone())
    }
}

fn accept_loop(
    listener: TcpListener,
    lc: Arc<ListenerConfig>,
    shared: Arc<Shared>,
    counts: Arc<ListenerCounts>,
    link: Sender<LinkMsg>,
) {
    loop {
        let (sock, peer) = match listener.accept() {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: do not spin.
                tracing::warn!(bind = %lc.bind, %e, "accept");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        counts.accepted();
        if !shared.up.load(Ordering::Acquire) {
            counts.refused(Refusal::DatapathUnavailable);
            tracing::info!(%peer, bind = %lc.bind, "refused: {UNAVAILABLE}");
            refuse(sock);
            continue;
        }
        let slot = match Slot::take(&shared, peer) {
            Ok(s) => s,
            Err(NoSlot::Full) => {
                counts.refused(Refusal::MaxConnections);
                tracing::warn!(%peer, bind = %lc.bind, max = shared.max, "refused: max_connections reached");
                refuse(sock);
                continue;
            }
            Err(NoSlot::Source) => {
                counts.refused(Refusal::MaxConnectionsPerSource);
                tracing::warn!(%peer, bind = %lc.bind, max = shared.per_source,
                    "refused: max_connections_per_source reached for this address");
                refuse(sock);
                continue;
            }
        };
        tracing::debug!(%peer, bind = %lc.bind, active = shared.active.load(Ordering::Acquire), "accepted: setup started");
        let (lc, link, c) = (lc.clone(), link.clone(), counts.clone());
        let spawned = std::thread::Builder::new()
            .name("mpa-setup".into())
            .spawn(move || setup(sock, peer, &lc, &c, link, slot));
        if let Err(e) = spawned {
            counts.refused(Refusal::NoThread);
            tracing::warn!(%peer, %e, "refused: cannot start a setup thread");
        }
    }
}

/// Refuses an accepted connection with a reset (SO_LINGER 0). A plain close would end with a
/// FIN or a RST depending on whether the peer's MPA Request had arrived yet (a close with
/// unread data resets); the reset is the same either way, tells the Initiator at once, and
/// leaves no TIME-WAIT socket behind per refusal (a flood of refused connections costs
/// nothing).
fn refuse(sock: TcpStream) {
    let reset = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    if let Err(e) = nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::Linger, &reset) {
        tracing::debug!(%e, "SO_LINGER on a refused connection: closed with a FIN instead");
    }
}

/// The accepting Reply's private data: the listener's, after a region advertisement
/// (`mpa_ctl_proto::region_ad`) when the listener asks for one: the lowest STag of its domain
/// that allows remote writes.
fn reply_private_data(lc: &ListenerConfig, dp: &mut DatapathClient) -> Result<Vec<u8>, String> {
    let (true, Some(pd)) = (lc.advertise_region, lc.pd) else {
        return Ok(lc.reply_private_data.clone());
    };
    let regions = match dp.request(|id| Message::ListRegions { id, pd: Some(pd) }) {
        Ok(Message::Regions { regions, .. }) => regions,
        Ok(m) => return Err(format!("datapath answered {m:?} to ListRegions")),
        Err(e) => return Err(format!("cannot list the regions of domain {pd}: {e}")),
    };
    let Some(r) = regions
        .iter()
        .filter(|r| r.remote_write && r.pd == pd)
        .min_by_key(|r| r.stag)
    else {
        return Err(format!(
            "advertise_region: domain {pd} has no region that allows remote writes"
        ));
    };
    let ad = mpa_ctl_proto::region_ad::RegionAd {
        writes: true,
        sends: lc.advertise_recv_size > 0,
        stag: r.stag,
        len: r.len,
        base_to: 0,
        recv_buf_size: lc.advertise_recv_size,
    };
    let mut v = ad.emit().to_vec();
    v.extend_from_slice(&lc.reply_private_data);
    Ok(v)
}

/// Sets up one connection (its own thread).
fn setup(
    sock: TcpStream,
    peer: SocketAddr,
    lc: &ListenerConfig,
    counts: &ListenerCounts,
    link: Sender<LinkMsg>,
    slot: Slot,
) {
    let bind = lc.bind;
    with_relay(&link, counts, |dp, epoch| {
        let reply_pd = match reply_private_data(lc, dp) {
            Ok(pd) => pd,
            Err(e) => {
                // Closing without a Reply: the Initiator's startup fails at once.
                counts.refused(Refusal::NoAdvertisement);
                tracing::warn!(%peer, %bind, "refused: {e}");
                return;
            }
        };
        let placement = Placement {
            pd: lc.pd,
            aligned_sender: lc.aligned_sender,
            conn_id: None,
        };
        match respond_and_hand_over(sock, lc.policy.clone(), reply_pd, placement, dp) {
            Ok(Outcome::HandedOver {
                flow_id,
                frozen,
                negotiated: n,
            }) => {
                counts.handed_over();
                tracing::info!(
                    flow_id,
                    %peer,
                    %bind,
                    rev = n.rev,
                    markers_rx = n.markers_rx,
                    markers_tx = n.markers_tx,
                    crc = n.crc,
                    "handed over"
                );
                let held = Held {
                    _frozen: frozen,
                    peer,
                    _slot: slot,
                };
                let epoch = epoch.load(Ordering::Acquire);
                let _ = link.send(LinkMsg::Register {
                    epoch,
                    flow_id,
                    held,
                });
            }
            Ok(Outcome::Rejected { reason }) => {
                counts.rejected();
                let reason = String::from_utf8_lossy(&reason);
                tracing::info!(%peer, %bind, %reason, "rejected by policy");
            }
            Err(e) => {
                counts.failed(Failure::from(&e));
                tracing::warn!(%peer, %bind, %e, "setup failed");
            }
        }
    });
}

/// Runs `f` with a [`DatapathClient`] whose other end is a relay thread to the link (an
/// in-process socket pair), and the epoch of the datapath connection its requests went to;
/// closing the client when `f` returns ends the relay, which then reports the setup done.
fn with_relay(
    link: &Sender<LinkMsg>,
    counts: &ListenerCounts,
    f: impl FnOnce(&mut DatapathClient, &AtomicU64),
) {
    let (ours, theirs) = match UnixStream::pair() {
        Ok(p) => p,
        Err(e) => {
            counts.failed(Failure::Resources);
            return tracing::warn!(%e, "setup: socket pair");
        }
    };
    let epoch = Arc::new(AtomicU64::new(0));
    let handle = {
        let (link, epoch) = (link.clone(), epoch.clone());
        match std::thread::Builder::new()
            .name("mpa-relay".into())
            .spawn(move || relay(theirs, link, epoch))
        {
            Ok(h) => h,
            Err(e) => {
                counts.failed(Failure::Resources);
                return tracing::warn!(%e, "setup: cannot start a relay thread");
            }
        }
    };
    // Longer than the link's own limit: the link decides when the datapath is gone.
    match DatapathClient::over(ours, 2 * ANSWER_TIMEOUT) {
        Ok(mut dp) => {
            f(&mut dp, &epoch);
            drop(dp);
        }
        Err(e) => {
            counts.failed(Failure::Datapath);
            tracing::warn!(%e, "setup: relay handshake");
        }
    }
    let _ = handle.join();
}

/// Serves one setup's [`DatapathClient`] over the in-process socket pair: answers the Hello
/// itself and passes every request to the link.
fn relay(mut s: UnixStream, link: Sender<LinkMsg>, epoch_out: Arc<AtomicU64>) {
    let mut epoch = None;
    let mut adopted = Vec::new();
    while let Ok(m) = read_message(&mut s) {
        if let Message::Hello { .. } = m {
            let hello = Message::Hello {
                version: VERSION,
                agent: AGENT.into(),
            };
            if write_message(&mut s, &hello).is_err() {
                break;
            }
            continue;
        }
        let (tx, rx) = bounded(1);
        let request = LinkMsg::Request {
            epoch,
            msg: m,
            answer: tx,
            decision: None,
        };
        if link.send(request).is_err() {
            break;
        }
        // A dropped answer: the datapath is unavailable; closing fails the setup.
        let Ok((e, answer)) = rx.recv() else { break };
        epoch = Some(e);
        epoch_out.store(e, Ordering::Release);
        if let Message::FlowAdopted { flow_id, .. } = answer {
            adopted.push(flow_id);
        }
        if write_message(&mut s, &answer).is_err() {
            break;
        }
    }
    if let (Some(epoch), false) = (epoch, adopted.is_empty()) {
        let _ = link.send(LinkMsg::Done {
            epoch,
            flows: adopted,
        });
    }
}

/// A forwarded request waiting for its answer.
struct Waiting {
    /// `None` for the liveness probe.
    answer: Option<Sender<(u64, Message)>>,
    /// The relay's id, put back into the answer.
    their_id: u64,
    sent: Instant,
    /// See [`LinkMsg::Request`].
    decision: Option<(u64, Sender<Decision>)>,
}

/// The one datapath connection.
struct Link {
    socket: PathBuf,
    shared: Arc<Shared>,
    /// The write side; a reader thread sends what arrives to `dp_rx`.
    conn: Option<UnixStream>,
    /// Bumped on every connection, so that late events of an old one are ignored.
    epoch: u64,
    dp_tx: Sender<(u64, DpEvent)>,
    dp_rx: Receiver<(u64, DpEvent)>,
    next_id: u64,
    waiting: HashMap<u64, Waiting>,
    /// Flows adopted whose setup has not registered its socket yet → already gone.
    adopting: HashMap<u64, bool>,
    held: HashMap<u64, Held>,
    last_attempt: Option<Instant>,
    last_sent: Instant,
    /// The outage line was logged (once per outage).
    outage_logged: bool,
    /// The listeners' ports: watched on every connection to the datapath, so that the peer's
    /// last TSval before each hand-over is recorded (docs/environment.md, "Why TS.Recent
    /// must be inherited").
    watch: Vec<u16>,
    /// Counts the outages.
    counters: Arc<Counters>,
    /// The link's own channel, for the application setups it starts.
    tx: Sender<LinkMsg>,
    /// Each wait of an application's setup (the configuration's `startup_timeout_ms`).
    app_timeout: Duration,
    /// Applications' listeners and setups.
    apps: applications::AppService,
}

impl Link {
    fn new(
        socket: PathBuf,
        shared: Arc<Shared>,
        counters: Arc<Counters>,
        tx: Sender<LinkMsg>,
        app_timeout: Duration,
    ) -> Link {
        let (dp_tx, dp_rx) = unbounded();
        Link {
            tx,
            app_timeout,
            apps: Default::default(),
            socket,
            shared,
            counters,
            conn: None,
            epoch: 0,
            dp_tx,
            dp_rx,
            next_id: 1,
            waiting: HashMap::new(),
            adopting: HashMap::new(),
            held: HashMap::new(),
            last_attempt: None,
            last_sent: Instant::now(),
            outage_logged: false,
            watch: Vec::new(),
        }
    }

    /// Asks the fresh connection `s` (before its reader starts) to watch the listeners'
    /// ports. A refusal (a datapath without the request, or its table full) only costs the
    /// inherited TS.Recent: logged, not fatal.
    fn watch_ports(&mut self, s: &mut UnixStream) -> Result<(), String> {
        for &port in &self.watch {
            let id = self.next_id;
            self.next_id += 1;
            write_message(s, &Message::WatchPort { id, port }).map_err(|e| e.to_string())?;
            match read_message(s).map_err(|e| e.to_string())? {
                Message::Ok { id: got } if got == id => {
                    tracing::debug!(port, "listener port watched for TS.Recent")
                }
                Message::Error { message, .. } => {
                    tracing::warn!(port, %message, "listener port not watched: hand-overs start with TS.Recent unknown")
                }
                m => return Err(format!("unexpected answer to WatchPort: {m:?}")),
            }
        }
        Ok(())
    }

    fn run(mut self, rx: Receiver<LinkMsg>) {
        let dp_rx = self.dp_rx.clone();
        loop {
            select! {
                recv(rx) -> m => match m {
                    Ok(m) => self.on_setup_msg(m),
                    Err(_) => return,
                },
                recv(dp_rx) -> e => {
                    if let Ok((epoch, e)) = e {
                        if epoch == self.epoch && self.conn.is_some() {
                            match e {
                                DpEvent::Msg(m) => self.on_datapath_msg(m),
                                DpEvent::Lost(why) => self.lost(&why),
                            }
                        }
                    }
                },
                default(TICK) => {},
            }
            self.tick();
        }
    }

    /// Reconnects when due; detects a hung datapath; probes an idle one.
    fn tick(&mut self) {
        let now = Instant::now();
        if self.conn.is_none() {
            if self
                .last_attempt
                .is_none_or(|t| now.duration_since(t) >= RETRY_EVERY)
            {
                self.last_attempt = Some(now);
                if let Err(why) = self.connect() {
                    if self.outage_logged {
                        tracing::debug!(socket = %self.socket.display(), %why, "datapath still unavailable");
                    } else {
                        self.log_outage(&why, 0);
                    }
                }
            }
            return;
        }
        if let Some(w) = self.waiting.values().map(|w| w.sent).min() {
            if now.duration_since(w) > ANSWER_TIMEOUT {
                let why = format!("no answer for {} s", ANSWER_TIMEOUT.as_secs());
                self.lost(&why);
            }
        } else if now.duration_since(self.last_sent) >= PROBE_EVERY {
            let id = self.next_id;
            self.next_id += 1;
            let probe = Message::CloseFlow {
                id,
                flow_id: PROBE_FLOW,
            };
            self.send(
                id,
                probe,
                Waiting {
                    answer: None,
                    their_id: 0,
                    sent: now,
                    decision: None,
                },
            );
        }
    }

    fn connect(&mut self) -> Result<(), String> {
        let mut s = UnixStream::connect(&self.socket).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(ANSWER_TIMEOUT))
            .and_then(|()| s.set_write_timeout(Some(ANSWER_TIMEOUT)))
            .map_err(|e| e.to_string())?;
        let agent = handshake(&mut s, AGENT).map_err(|e| e.to_string())?;
        self.watch_ports(&mut s)?;
        self.serve_connections(&mut s)?;
        // The reader waits for notifications as long as it takes; liveness is the probe's job.
        s.set_read_timeout(None).map_err(|e| e.to_string())?;
        let mut reader = s.try_clone().map_err(|e| e.to_string())?;
        self.epoch += 1;
        let (epoch, tx) = (self.epoch, self.dp_tx.clone());
        std::thread::Builder::new()
            .name("mpa-link-reader".into())
            .spawn(move || loop {
                match read_message(&mut reader) {
                    Ok(m) => {
                        if tx.send((epoch, DpEvent::Msg(m))).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send((epoch, DpEvent::Lost(e.to_string())));
                        return;
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        self.conn = Some(s);
        self.last_sent = Instant::now();
        self.outage_logged = false;
        self.shared.up.store(true, Ordering::Release);
        tracing::info!(socket = %self.socket.display(), %agent, "datapath connected: serving MPA connections");
        Ok(())
    }

    fn log_outage(&mut self, why: &str, closed: usize) {
        self.outage_logged = true;
        self.counters.datapath_lost.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            "{UNAVAILABLE} ({}: {why}): closed {closed} handed-over connection(s); refusing MPA \
             connections, retrying every {} s",
            self.socket.display(),
            RETRY_EVERY.as_secs()
        );
    }

    /// The datapath went away: close everything that depended on it.
    fn lost(&mut self, why: &str) {
        let Some(conn) = self.conn.take() else { return };
        // Ends the reader thread too (its events are of an old epoch from now on).
        let _ = conn.shutdown(Shutdown::Both);
        self.shared.up.store(false, Ordering::Release);
        let closed = self.held.len();
        // Dropping frozen sockets closes them silently; dropping answer senders fails the
        // setups in progress (their relays close).
        self.held.clear();
        self.waiting.clear();
        self.adopting.clear();
        self.applications_lost();
        self.last_attempt = Some(Instant::now());
        self.log_outage(why, closed);
    }

    /// Sends request `id` and waits for its answer.
    fn send(&mut self, id: u64, msg: Message, waiting: Waiting) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        if let Err(e) = write_message(conn, &msg) {
            return self.lost(&e.to_string());
        }
        self.last_sent = waiting.sent;
        self.waiting.insert(id, waiting);
    }

    fn on_setup_msg(&mut self, m: LinkMsg) {
        match m {
            LinkMsg::Request {
                epoch,
                mut msg,
                answer,
                decision,
            } => {
                // Dropping `answer` tells the relay the datapath it talked to is gone.
                if self.conn.is_none() || epoch.is_some_and(|e| e != self.epoch) {
                    return;
                }
                let id = self.next_id;
                let Some(slot) = id_mut(&mut msg) else {
                    return;
                };
                let their_id = std::mem::replace(slot, id);
                self.next_id += 1;
                let waiting = Waiting {
                    answer: Some(answer),
                    their_id,
                    sent: Instant::now(),
                    decision,
                };
                self.send(id, msg, waiting);
            }
            LinkMsg::Register {
                epoch,
                flow_id,
                held,
            } => {
                if self.conn.is_none() || epoch != self.epoch {
                    tracing::info!(flow_id, peer = %held.peer, "handed over to a datapath that is gone: socket closed");
                    return;
                }
                match self.adopting.remove(&flow_id) {
                    Some(false) => {
                        self.held.insert(flow_id, held);
                    }
                    Some(true) => {
                        tracing::info!(flow_id, peer = %held.peer, "flow gone: frozen socket closed");
                    }
                    None => {
                        tracing::warn!(flow_id, peer = %held.peer, "hand-over of a flow not adopted here: socket closed");
                    }
                }
            }
            LinkMsg::Done { epoch, flows } => {
                if epoch == self.epoch {
                    for f in flows {
                        self.adopting.remove(&f);
                    }
                }
            }
        }
    }

    fn on_datapath_msg(&mut self, mut m: Message) {
        if self.on_manager_msg(&m) {
            return;
        }
        if let Message::FlowGone {
            flow_id,
            mpa_error,
            reason,
            ..
        } = &m
        {
            if let Some(h) = self.held.remove(flow_id) {
                tracing::info!(flow_id, peer = %h.peer, ?mpa_error, %reason, "flow gone: frozen socket closed");
            } else if let Some(gone) = self.adopting.get_mut(flow_id) {
                // Its setup has not registered the socket yet: closed when it does.
                *gone = true;
            } else {
                tracing::debug!(flow_id, %reason, "flow gone: not held here");
            }
            return;
        }
        let Some(id) = id_mut(&mut m) else {
            return tracing::debug!(?m, "datapath message ignored");
        };
        let Some(w) = self.waiting.remove(id) else {
            return tracing::warn!(?m, "datapath answer to no request");
        };
        *id = w.their_id;
        if let Message::FlowAdopted { flow_id, .. } = m {
            self.adopting.insert(flow_id, false);
        }
        if let (Message::ConnectionQueued { conn_id, .. }, Some((listen_id, tx))) = (&m, w.decision)
        {
            self.await_decision(*conn_id, listen_id, tx);
        }
        if let Some(a) = w.answer {
            let _ = a.send((self.epoch, m));
        }
    }
}
