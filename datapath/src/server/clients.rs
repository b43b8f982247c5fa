//! The control server's clients: accepting them (our own user only), a reader and a bounded
//! writer thread per client, and queueing messages to them without ever blocking the control
//! thread on a slow client.

use super::{Incoming, Server};
use crossbeam_channel::Sender;
use mpa_ctl_proto::{
    encode_message, read_message_with_fds_counted, write_frame, write_frame_with_fd,
    write_frame_with_fds, write_message, ErrorCode, Message,
};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) struct Client {
    /// To the client's writer thread (bounded): the control thread never blocks on a slow
    /// client.
    out: Sender<Outgoing>,
    pub(super) hello: bool,
    /// The writer thread: it ends once `out` is dropped and the queue is written.
    writer: std::thread::JoinHandle<()>,
    /// Octets queued for the writer and not yet written.
    out_octets: Arc<AtomicUsize>,
    /// Octets the reader passed on that the control thread has not handled yet.
    in_octets: Arc<AtomicUsize>,
    /// Set when the client is dropped: its reader stops waiting for budget.
    closed: Arc<AtomicBool>,
    /// The client's process held CAP_NET_ADMIN when it connected: an operator (`mpa-control
    /// close`, `capture`), who may end, finish and capture any flow (docs/limits.md,
    /// "Ownership").
    pub(super) operator: bool,
    /// When it connected (its Hello is due within [`ControlDeadlines::hello`]).
    connected: Instant,
    /// When its last message was handled (or it connected).
    pub(super) last_heard: Instant,
    /// Its socket: shut for reading when the datapath closes the client, so that its reader
    /// sees the end at once.
    socket: std::os::unix::net::UnixStream,
}

/// When the datapath closes a control client that only holds a slot
/// ([`DatapathConfig::control_deadlines`](super::DatapathConfig::control_deadlines)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlDeadlines {
    /// A client that has not said Hello this long after connecting is closed: every real
    /// client says it first thing, so a connection that does not only holds a slot.
    pub hello: Duration,
    /// A client that is not an operator, holds nothing (no region, subscription, flow, watch
    /// or capture) and has said nothing for this long is closed: it costs a slot and two
    /// threads and gives the datapath nothing to keep.
    pub idle: Duration,
}

impl Default for ControlDeadlines {
    fn default() -> Self {
        ControlDeadlines {
            hello: Duration::from_secs(5),
            idle: Duration::from_secs(60),
        }
    }
}

/// Slots beyond `--max-control-clients` that only operators may take: however many other
/// clients hold the socket, `mpa-control` and the operator's tools get in.
pub const OPERATOR_SLOTS: usize = 8;

/// With every slot taken, a new client takes the slot of one that has been silent at least
/// this long and has not said Hello, or is not an operator and holds nothing
/// ([`Server::evictable`]).
const EVICTABLE_AFTER: Duration = Duration::from_secs(1);

/// How often the control thread looks for clients past a deadline.
pub(super) const SWEEP_EVERY: Duration = Duration::from_millis(250);

/// CAP_NET_ADMIN's bit in a capability set (linux/capability.h).
const CAP_NET_ADMIN: u32 = 12;

/// Whether the process at the other end of `stream` holds CAP_NET_ADMIN in its effective
/// set: an operator. Decided without a race on the pid: the kernel's pidfd of the process that
/// connected (SO_PEERPIDFD, Linux 6.5; before it, a pidfd opened on SO_PEERCRED's pid, which
/// leaves the window between the connect and that open), the pid the pidfd names now, that
/// pid's `/proc/PID/status`, then the pidfd asked again: when it still names the same pid,
/// the process was alive all along and the status was its own. `false` whenever any step
/// fails (docs/consumer.md, "Who may do what").
pub(super) fn peer_is_operator(stream: &std::os::unix::net::UnixStream, pid: Option<i32>) -> bool {
    use nix::sys::socket::{getsockopt, sockopt::PeerPidfd};
    let pidfd = match getsockopt(stream, PeerPidfd) {
        Ok(fd) => fd,
        Err(_) => {
            let Some(pid) = pid.and_then(rustix::process::Pid::from_raw) else {
                return false;
            };
            match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
                Ok(fd) => fd,
                Err(_) => return false,
            }
        }
    };
    let Some(pid) = pidfd_pid(&pidfd) else {
        return false;
    };
    let caps = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        });
    caps.is_some_and(|caps| caps & (1 << CAP_NET_ADMIN) != 0) && pidfd_pid(&pidfd) == Some(pid)
}

/// The pid a pidfd names (its `fdinfo`), `None` once the process is gone.
fn pidfd_pid(pidfd: &std::os::fd::OwnedFd) -> Option<i32> {
    use std::os::fd::AsRawFd;
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse::<i32>().ok())
        .filter(|&p| p > 0)
}

/// A framed message for a client, with the region whose descriptor goes along (SCM_RIGHTS),
/// or other descriptors (a subscription's rings and eventfd).
struct Outgoing(
    Vec<u8>,
    Option<Arc<mpa_stack::region::RegionMemory>>,
    Vec<std::os::fd::OwnedFd>,
);

/// Messages queued for one client at most (a second bound beside the octets).
const CLIENT_QUEUE: usize = 65_536;

/// Octets queued for one client before further messages for it are dropped (and counted):
/// a client that does not read costs at most this much memory (plus one message, which is
/// always let through into an empty queue).
pub(super) const CLIENT_QUEUE_OCTETS: usize = 32 << 20;

/// Octets of one client's requests read but not yet handled before its reader stops reading:
/// the socket's buffer then fills and the client blocks, so a flooding client costs at most
/// this (plus one message) and no other client waits for it.
const CLIENT_IN_OCTETS: usize = 1 << 20;

impl Client {
    /// The control thread handled `octets` of this client's requests.
    pub(super) fn handled(&self, octets: usize) {
        self.in_octets.fetch_sub(octets, Ordering::AcqRel);
    }

    /// The client is dropped: its reader must not wait any more.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Its writer ended (the client stopped reading, or went): nothing reaches it any more.
    pub(super) fn unreachable(&self) -> bool {
        self.writer.is_finished()
    }

    /// Its queue holds its bound: any further message for it is dropped (and counted).
    pub(super) fn full(&self) -> bool {
        self.queued() >= CLIENT_QUEUE_OCTETS
    }

    /// Octets queued for it now.
    pub(super) fn queued(&self) -> usize {
        self.out_octets.load(Ordering::Acquire)
    }
}

/// What the clients' readers passed on, queued per client and taken in turn (one message of
/// each client with something waiting, round robin): a client that floods requests delays
/// another's by at most one of its own, not by its whole [`CLIENT_IN_OCTETS`] backlog. Each
/// client's messages keep their order, its end ([`Incoming::Gone`]) after its last request.
#[derive(Default)]
pub(super) struct Turns {
    queues: HashMap<u64, VecDeque<Incoming>>,
    /// Clients with something queued, in the order they are served.
    order: VecDeque<u64>,
}

impl Turns {
    pub(super) fn push(&mut self, m: Incoming) {
        let id = match &m {
            Incoming::Msg(id, ..) | Incoming::Gone(id) => *id,
        };
        let q = self.queues.entry(id).or_default();
        if q.is_empty() {
            self.order.push_back(id);
        }
        q.push_back(m);
    }

    /// The next client's next message.
    pub(super) fn next(&mut self) -> Option<Incoming> {
        let id = self.order.pop_front()?;
        let q = self.queues.get_mut(&id)?;
        let m = q.pop_front();
        if q.is_empty() {
            self.queues.remove(&id);
        } else {
            self.order.push_back(id);
        }
        m
    }

    pub(super) fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// The client's reader: passes each request on, waiting while more than [`CLIENT_IN_OCTETS`]
/// of its earlier ones are unhandled.
///
/// Descriptors (SCM_RIGHTS) are kept only with the one request that takes one,
/// RegisterRegion (its first descriptor), and such a request counts as the whole budget: the
/// reader takes nothing more until it is handled, so a client holds at most one descriptor in
/// the datapath on its way and a flood of them costs no more than one. Every other descriptor
/// is closed at once.
fn read_requests(
    id: u64,
    r: std::os::unix::net::UnixStream,
    tx: Sender<Incoming>,
    in_octets: Arc<AtomicUsize>,
    closed: Arc<AtomicBool>,
) {
    loop {
        match read_message_with_fds_counted(&r) {
            Ok((m, fds, n)) => {
                let fd = if matches!(m, Message::RegisterRegion { .. }) {
                    fds.into_iter().next()
                } else {
                    drop(fds);
                    None
                };
                let n = if fd.is_some() {
                    n.max(CLIENT_IN_OCTETS)
                } else {
                    n
                };
                // Wait for budget (an empty budget takes any one message).
                while in_octets.load(Ordering::Acquire) > 0
                    && in_octets.load(Ordering::Acquire) + n > CLIENT_IN_OCTETS
                {
                    if closed.load(Ordering::Acquire) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                in_octets.fetch_add(n, Ordering::AcqRel);
                if tx.send(Incoming::Msg(id, m, n, fd)).is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::debug!(client = id, %e, "control client gone");
                let _ = tx.send(Incoming::Gone(id));
                return;
            }
        }
    }
}

impl Server {
    pub(super) fn accept(&mut self, in_tx: &Sender<Incoming>) {
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
            // A client that never reads must not hold the control thread in this write.
            let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
            // Only our own user (or root) may drive the datapath.
            let cred =
                nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
                    .ok();
            let allowed =
                cred.is_some_and(|c| c.uid() == nix::unistd::geteuid().as_raw() || c.uid() == 0);
            let operator = allowed && peer_is_operator(&stream, cred.map(|c| c.pid()));
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
            if let Err(message) = self.make_room(operator) {
                self.control.clients_refused += 1;
                tracing::warn!(
                    clients = self.clients.len(),
                    operator,
                    "control client refused: too many clients"
                );
                let _ = write_message(
                    &mut w,
                    &Message::Error {
                        id: 0,
                        code: ErrorCode::Limit,
                        message,
                    },
                );
                continue;
            }
            let Ok(socket) = stream.try_clone() else {
                continue;
            };
            let _ = w.set_write_timeout(None);
            let id = self.next_client;
            self.next_client += 1;
            let in_octets = Arc::new(AtomicUsize::new(0));
            let closed = Arc::new(AtomicBool::new(false));
            {
                let (tx, in_octets, closed) = (in_tx.clone(), in_octets.clone(), closed.clone());
                std::thread::spawn(move || read_requests(id, stream, tx, in_octets, closed));
            }
            let out_octets = Arc::new(AtomicUsize::new(0));
            let (out, out_rx) = crossbeam_channel::bounded::<Outgoing>(CLIENT_QUEUE);
            let queued = out_octets.clone();
            let writer = std::thread::spawn(move || {
                for Outgoing(frame, region, fds) in out_rx {
                    let r = match &region {
                        Some(mem) => write_frame_with_fd(&w, &frame, mem.fd()),
                        None if !fds.is_empty() => {
                            let b: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
                            write_frame_with_fds(&w, &frame, &b)
                        }
                        None => write_frame(&mut w, &frame),
                    };
                    queued.fetch_sub(frame.len(), Ordering::AcqRel);
                    if let Err(e) = r {
                        tracing::debug!(client = id, %e, "control client write");
                        return;
                    }
                }
            });
            self.clients.insert(
                id,
                Client {
                    out,
                    hello: false,
                    writer,
                    out_octets,
                    in_octets,
                    closed,
                    operator,
                    connected: Instant::now(),
                    last_heard: Instant::now(),
                    socket,
                },
            );
        }
    }

    /// A slot for a new client (an operator when `operator`): a free one; for an operator
    /// one of the [`OPERATOR_SLOTS`]; else the slot of the client [`Server::evictable`] names,
    /// which is closed. The refusal's words when there is none.
    fn make_room(&mut self, operator: bool) -> Result<(), String> {
        let max = self.control.max_clients;
        let n = self.clients.len();
        if n < max || (operator && n < max + OPERATOR_SLOTS) {
            return Ok(());
        }
        if let Some(victim) = self.evictable(Instant::now()) {
            self.control.clients_evicted += 1;
            let silent = self.clients[&victim].last_heard.elapsed();
            tracing::info!(
                client = victim,
                silent_ms = silent.as_millis() as u64,
                "control client closed to make room for a new one"
            );
            let why = format!(
                "closed to make room for a new client: every control slot was taken and this \
                 client had said nothing for {} ms and held nothing",
                silent.as_millis()
            );
            self.close_client(victim, why);
            return Ok(());
        }
        Err(if operator {
            format!(
                "too many control clients: {max} at most, and the {OPERATOR_SLOTS} slots kept \
                 for operators are taken"
            )
        } else {
            format!("too many control clients: {max} at most")
        })
    }

    /// The client whose slot a new client may take: silent for at least [`EVICTABLE_AFTER`]
    /// and either without a Hello, or not an operator and holding nothing; the longest
    /// silent of them.
    fn evictable(&self, now: Instant) -> Option<u64> {
        self.clients
            .iter()
            .filter(|(&id, c)| {
                now.saturating_duration_since(c.last_heard) >= EVICTABLE_AFTER
                    && (!c.hello || (!c.operator && !self.holds_anything(id)))
            })
            .min_by_key(|(&id, c)| (c.last_heard, id))
            .map(|(&id, _)| id)
    }

    /// Whether `client` holds something the datapath keeps for it: a domain (a region or a
    /// subscription), a flow it adopted, a watched port, or the capture.
    fn holds_anything(&self, client: u64) -> bool {
        self.registry.owns_any(client)
            || self.adopted.values().any(|a| a.client == client)
            || self.watches_any(client)
            || self.capture.as_ref().is_some_and(|c| c.client == client)
    }

    /// Closes the clients past a deadline ([`ControlDeadlines`]): no Hello in time after
    /// connecting; not an operator, holding nothing and silent too long.
    pub(super) fn sweep_clients(&mut self, now: Instant) {
        let ControlDeadlines { hello, idle } = self.deadlines;
        let late: Vec<(u64, String)> = self
            .clients
            .iter()
            .filter_map(|(&id, c)| {
                if !c.hello && now.saturating_duration_since(c.connected) >= hello {
                    Some((
                        id,
                        format!("closed: no Hello within {} ms", hello.as_millis()),
                    ))
                } else if c.hello
                    && !c.operator
                    && now.saturating_duration_since(c.last_heard) >= idle
                    && !self.holds_anything(id)
                {
                    Some((
                        id,
                        format!(
                            "closed: nothing said for {} ms and nothing held",
                            idle.as_millis()
                        ),
                    ))
                } else {
                    None
                }
            })
            .collect();
        for (id, why) in late {
            self.control.clients_timed_out += 1;
            tracing::info!(client = id, %why, "control client closed");
            self.close_client(id, why);
        }
    }

    /// Ends `client` from our side: `why` is its last message (Error, id 0, `Limit`), its
    /// reader is woken with the end of the stream and what it held goes
    /// ([`Server::client_gone`]); its writer sends what is queued and ends.
    fn close_client(&mut self, client: u64, why: String) {
        self.reply(
            client,
            Message::Error {
                id: 0,
                code: ErrorCode::Limit,
                message: why,
            },
        );
        if let Some(c) = self.clients.get(&client) {
            let _ = c.socket.shutdown(std::net::Shutdown::Read);
        }
        self.client_gone(client);
    }

    /// The control socket's counters now.
    pub(super) fn control_stats(&self) -> mpa_ctl_proto::stats::ControlStats {
        mpa_ctl_proto::stats::ControlStats {
            clients: self.clients.len(),
            queued_octets: self.clients.values().map(|c| c.queued() as u64).sum(),
            operator_slots: OPERATOR_SLOTS,
            hello_deadline_ms: self.deadlines.hello.as_millis() as u64,
            idle_deadline_ms: self.deadlines.idle.as_millis() as u64,
            connection_manager: self.apps.has_manager(),
            app_listeners: self.apps.counts().0,
            app_setups: self.apps.counts().1,
            ..self.control.clone()
        }
    }

    /// Closes every client's queue and waits, until `deadline` at most, for their writers to
    /// send what is queued: a stopping datapath's last words reach its clients.
    pub(super) fn close_clients(&mut self, deadline: std::time::Instant) {
        let writers: Vec<_> = self
            .clients
            .drain()
            .map(|(_, c)| {
                c.close();
                c.writer
            })
            .collect();
        for w in writers {
            while !w.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }

    pub(super) fn reply(&mut self, client: u64, m: Message) {
        self.send_to(client, m, None);
    }

    /// Queues a message for a client; `false` when its queue holds its bound (the message is
    /// dropped and counted) or the client is gone. The message is framed here, so that what
    /// is queued is counted in octets.
    pub(super) fn send_to(
        &mut self,
        client: u64,
        m: Message,
        region: Option<Arc<mpa_stack::region::RegionMemory>>,
    ) -> bool {
        self.send_outgoing(client, m, region, Vec::new())
    }

    /// [`Server::send_to`] with descriptors attached (SCM_RIGHTS, in order).
    pub(super) fn send_with_fds(
        &mut self,
        client: u64,
        m: Message,
        fds: Vec<std::os::fd::OwnedFd>,
    ) -> bool {
        self.send_outgoing(client, m, None, fds)
    }

    fn send_outgoing(
        &mut self,
        client: u64,
        m: Message,
        region: Option<Arc<mpa_stack::region::RegionMemory>>,
        fds: Vec<std::os::fd::OwnedFd>,
    ) -> bool {
        let Some(c) = self.clients.get(&client) else {
            return false;
        };
        let frame = match encode_message(&m) {
            Ok(f) => f,
            Err(e) => {
                tracing::error!(client, %e, "control message not sent");
                // An answer that cannot be sent becomes an error answer: the client must not
                // wait for one that never comes.
                let id = match &m {
                    Message::Stats { id, .. } | Message::Regions { id, .. } => Some(*id),
                    _ => None,
                };
                if let Some(id) = id {
                    let message = format!("answer not sent: {e}");
                    let err = Message::Error {
                        id,
                        code: mpa_ctl_proto::ErrorCode::Limit,
                        message,
                    };
                    return self.send_outgoing(client, err, None, Vec::new());
                }
                return false;
            }
        };
        let len = frame.len();
        let queued = c.out_octets.load(Ordering::Acquire);
        let fits = queued == 0 || queued + len <= CLIENT_QUEUE_OCTETS;
        if fits {
            c.out_octets.fetch_add(len, Ordering::AcqRel);
            match c.out.try_send(Outgoing(frame, region, fds)) {
                Ok(()) => return true,
                Err(crossbeam_channel::TrySendError::Full(_)) => {
                    c.out_octets.fetch_sub(len, Ordering::AcqRel);
                }
                Err(crossbeam_channel::TrySendError::Disconnected(_)) => {
                    c.out_octets.fetch_sub(len, Ordering::AcqRel);
                    return false;
                }
            }
        }
        self.dropped(client, queued);
        false
    }

    /// A message for `client` dropped (its queue holds `queued` octets): counted.
    pub(super) fn dropped(&mut self, client: u64, queued: usize) {
        self.control.messages_dropped += 1;
        // Logged at powers of two: a client that stopped reading must not flood the log.
        if self.control.messages_dropped.is_power_of_two() {
            tracing::warn!(
                client,
                queued,
                dropped = self.control.messages_dropped,
                "control client does not keep up: message dropped"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpa_ctl_proto::Message;

    fn msg(client: u64, id: u64) -> Incoming {
        Incoming::Msg(client, Message::get_stats(id), 30, None)
    }

    /// What `turns` gives, as (client, request id) with id 0 for the client's end.
    fn drain(turns: &mut Turns) -> Vec<(u64, u64)> {
        std::iter::from_fn(|| turns.next())
            .map(|m| match m {
                Incoming::Msg(c, Message::GetStats { id, .. }, ..) => (c, id),
                Incoming::Msg(c, m, ..) => panic!("client {c}: unexpected {m:?}"),
                Incoming::Gone(c) => (c, 0),
            })
            .collect()
    }

    /// A flooding client's backlog does not hold up another client's one request: clients
    /// take turns, each one's messages in order, its end after its last request.
    #[test]
    fn clients_take_turns_in_order() {
        let mut t = Turns::default();
        for id in 1..=1000 {
            t.push(msg(1, id));
        }
        t.push(Incoming::Gone(1));
        t.push(msg(2, 1));
        t.push(msg(2, 2));
        t.push(msg(3, 7));
        let got = drain(&mut t);
        assert_eq!(&got[..6], &[(1, 1), (2, 1), (3, 7), (1, 2), (2, 2), (1, 3)]);
        let flooder: Vec<u64> = got.iter().filter(|m| m.0 == 1).map(|m| m.1).collect();
        let mut want: Vec<u64> = (1..=1000).collect();
        want.push(0);
        assert_eq!(flooder, want);
        assert_eq!(got.len(), 1004);
        assert!(t.is_empty());
        assert!(t.next().is_none());
        // A client served again after its queue emptied goes to the back of the turns.
        t.push(msg(4, 1));
        t.push(msg(5, 1));
        t.push(msg(4, 2));
        assert_eq!(drain(&mut t), [(4, 1), (5, 1), (4, 2)]);
    }
}
