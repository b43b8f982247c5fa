//! The connection manager's side of applications' connections (docs/consumer.md, "Connections
//! from the application"): the datapath relays an application's Listen and Connect here; this
//! process binds and accepts, or connects, with kernel sockets, asks the application through
//! the datapath whether to accept a Request, runs the MPA startup and hands the connection
//! over naming the application's setup, so that the datapath puts it into that application's
//! domain and tells it.
//!
//! Threads: one accept loop per application listener (polling its stop flag), and one setup
//! thread per connection, each with a relay to the link like the configured listeners' setups.

use super::admission::Slot;
use super::counters::{Failure, ListenerCounts, Refusal};
use super::{refuse, with_relay, Held, Link, LinkMsg, ANSWER_TIMEOUT};
use crate::datapath_client::DatapathClient;
use crate::handover::{negotiated_bound, Placement};
use crate::initiator::{connect_tcp, start_and_hand_over_on, InitiatorOutcome};
use crate::responder::{decide_and_hand_over, Outcome, Verdict};
use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use mpa::startup::{RtrSet, StartupPolicy};
use mpa_ctl_proto::cm::{ConnectOptions, Decision, ListenOptions, PeerParams, SetupOutcome};
use mpa_ctl_proto::{read_message, write_message, Message};
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often an application listener's accept loop looks at its stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);

/// The applications' listeners and setups this manager runs.
#[derive(Default)]
pub(super) struct AppService {
    listeners: HashMap<u64, AppListener>,
    /// Setups that wait for (or may be cancelled by) the application: dropping the sender
    /// abandons the setup.
    setups: HashMap<u64, SetupHandle>,
    /// What every application listener and connect did.
    pub(super) counts: Arc<ListenerCounts>,
}

struct AppListener {
    stop: Arc<AtomicBool>,
}

struct SetupHandle {
    /// The listener of a request; `None` for a connect.
    listen: Option<u64>,
    decision: Sender<Decision>,
}

/// A Responder policy from an application's listen options.
fn listen_policy(o: &ListenOptions, timeout: Duration) -> StartupPolicy {
    StartupPolicy {
        accept_rev2: o.revision >= 2,
        permissive: o.permissive,
        markers_required: o.markers_required,
        crc_suppressed_by_admin: !o.crc,
        rtr_support: o.rtr_support.iter().fold(RtrSet::EMPTY, |s, &t| s.with(t)),
        ird: o.ird,
        ord: o.ord,
        startup_timeout: timeout,
        ..StartupPolicy::default()
    }
}

/// An Initiator policy from an application's connect options.
fn connect_policy(o: &ConnectOptions, timeout: Duration) -> StartupPolicy {
    StartupPolicy {
        revision: o.revision,
        markers_required: o.markers_required,
        crc_suppressed_by_admin: !o.crc,
        p2p: o.p2p,
        ird: o.ird,
        ord: o.ord,
        startup_timeout: if o.timeout_ms == 0 {
            timeout
        } else {
            Duration::from_millis(u64::from(o.timeout_ms))
        },
        ..StartupPolicy::default()
    }
}

impl Link {
    /// A message of the datapath for the connection manager; `false` when `m` is none.
    pub(super) fn on_manager_msg(&mut self, m: &Message) -> bool {
        match m {
            Message::ManagerListen {
                listen_id,
                pd,
                bind,
                options,
            } => self.app_listen(*listen_id, *pd, *bind, options),
            Message::ManagerStopListening { listen_id } => {
                if let Some(l) = self.apps.listeners.remove(listen_id) {
                    l.stop.store(true, Ordering::Release);
                }
                // Requests at it not yet accepted are abandoned (the datapath forgot them).
                self.apps.setups.retain(|_, s| s.listen != Some(*listen_id));
            }
            Message::ManagerDecision { conn_id, decision } => {
                if let Some(s) = self.apps.setups.remove(conn_id) {
                    let _ = s.decision.send(decision.clone());
                }
            }
            Message::ManagerConnect {
                conn_id,
                pd,
                remote,
                options,
            } => self.app_connect(*conn_id, *pd, *remote, options.clone()),
            Message::ManagerCancel { conn_id, reason } => {
                if self.apps.setups.remove(conn_id).is_some() {
                    tracing::info!(conn_id, %reason, "application's setup cancelled");
                }
            }
            _ => return false,
        }
        true
    }

    /// Asks the fresh connection `s` to send the applications' Listen and Connect here. A
    /// refusal (another manager serves them, or a datapath without them) is logged: the
    /// configured listeners work without.
    pub(super) fn serve_connections(&mut self, s: &mut UnixStream) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        write_message(s, &Message::ServeConnections { id }).map_err(|e| e.to_string())?;
        match read_message(s).map_err(|e| e.to_string())? {
            Message::Ok { id: got } if got == id => {
                tracing::info!("serving applications' Listen and Connect");
            }
            Message::Error { message, .. } => {
                tracing::warn!(%message, "not serving applications' Listen and Connect")
            }
            m => return Err(format!("unexpected answer to ServeConnections: {m:?}")),
        }
        Ok(())
    }

    /// A request of the link itself, whose answer nobody waits for.
    fn tell_datapath(&mut self, msg: impl FnOnce(u64) -> Message) {
        let id = self.next_id;
        self.next_id += 1;
        let waiting = super::Waiting {
            answer: None,
            their_id: 0,
            sent: std::time::Instant::now(),
            decision: None,
        };
        self.send(id, msg(id), waiting);
    }

    fn app_listen(&mut self, listen_id: u64, pd: u32, bind: SocketAddr, o: &ListenOptions) {
        let listener = match TcpListener::bind(bind) {
            Ok(l) => l,
            Err(e) => {
                let error = Some(format!("cannot listen on {bind}: {e}"));
                tracing::info!(listen_id, %bind, %e, "application listener not bound");
                return self.tell_datapath(|id| Message::ListenResult {
                    id,
                    listen_id,
                    bound: None,
                    error,
                });
            }
        };
        let bound = listener.local_addr().ok();
        let stop = Arc::new(AtomicBool::new(false));
        let ctx = ListenCtx {
            listen_id,
            pd,
            aligned_sender: o.aligned_sender,
            policy: listen_policy(o, self.app_timeout),
            link: self.tx.clone(),
            shared: self.shared.clone(),
            counts: self.apps.counts.clone(),
        };
        let flag = stop.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("mpa-app-listen-{listen_id}"))
            .spawn(move || accept_loop(listener, flag, ctx));
        if let Err(e) = spawned {
            let error = Some(format!("cannot start a listener thread: {e}"));
            return self.tell_datapath(|id| Message::ListenResult {
                id,
                listen_id,
                bound: None,
                error,
            });
        }
        // The peer's last segment to the kernel before each hand-over is its first FPDU's
        // ACK of our Reply: watch the port so that TS.Recent is inherited (docs/environment.md,
        // "Why TS.Recent must be inherited").
        if let Some(port) = bound.map(|b| b.port()) {
            self.tell_datapath(|id| Message::WatchPort { id, port });
        }
        self.apps.listeners.insert(listen_id, AppListener { stop });
        tracing::info!(listen_id, ?bound, pd, "listening for an application");
        self.tell_datapath(|id| Message::ListenResult {
            id,
            listen_id,
            bound,
            error: None,
        });
    }

    fn app_connect(&mut self, conn_id: u64, pd: u32, remote: SocketAddr, o: ConnectOptions) {
        let (decision, cancel) = bounded::<Decision>(1);
        self.apps.setups.insert(
            conn_id,
            SetupHandle {
                listen: None,
                decision,
            },
        );
        let policy = connect_policy(&o, self.app_timeout);
        let (link, shared, counts) = (
            self.tx.clone(),
            self.shared.clone(),
            self.apps.counts.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("mpa-app-connect".into())
            .spawn(move || {
                let slot = match Slot::take(&shared, remote) {
                    Ok(s) => s,
                    Err(_) => {
                        counts.refused(Refusal::MaxConnections);
                        let reason = "the connection manager's max_connections is reached".into();
                        let outcome = SetupOutcome::Failed {
                            mpa_error: None,
                            reason,
                        };
                        return report_direct(&link, conn_id, outcome);
                    }
                };
                with_relay(&link, &counts, |dp, epoch| {
                    let placement = Placement {
                        pd: Some(pd),
                        aligned_sender: o.aligned_sender,
                        conn_id: Some(conn_id),
                    };
                    let sock = match connect_tcp(o.local, remote, policy.startup_timeout) {
                        Ok(s) => s,
                        Err(e) => {
                            counts.failed(Failure::Tcp);
                            let reason = format!("{remote}: {e}");
                            return report(dp, conn_id, SetupOutcome::Unreachable { reason });
                        }
                    };
                    // Abandoned while connecting: nothing is handed over.
                    if matches!(cancel.try_recv(), Err(crossbeam_channel::TryRecvError::Disconnected)) {
                        return counts.failed(Failure::Abandoned);
                    }
                    match start_and_hand_over_on(sock, policy, o.private_data, placement, dp) {
                        Ok(InitiatorOutcome::HandedOver {
                            flow_id, frozen, ..
                        }) => {
                            counts.handed_over();
                            tracing::info!(conn_id, flow_id, %remote, "application's connection handed over");
                            register(&link, epoch, flow_id, frozen, remote, slot);
                        }
                        Ok(InitiatorOutcome::Rejected { reason }) => {
                            counts.rejected();
                            let outcome = SetupOutcome::Rejected {
                                private_data: reason,
                            };
                            report(dp, conn_id, outcome);
                        }
                        Err(e) => {
                            counts.failed(Failure::from(&e));
                            tracing::info!(conn_id, %remote, %e, "application's connect failed");
                            let outcome = SetupOutcome::Failed {
                                mpa_error: e.mpa_error(),
                                reason: e.to_string(),
                            };
                            report(dp, conn_id, outcome);
                        }
                    }
                });
            });
        if let Err(e) = spawned {
            self.apps.setups.remove(&conn_id);
            let reason = format!("cannot start a setup thread: {e}");
            self.tell_datapath(|id| Message::SetupEnded {
                id,
                conn_id,
                outcome: SetupOutcome::Failed {
                    mpa_error: None,
                    reason,
                },
            });
        }
    }

    /// A connection request was queued at the datapath: its decision comes here.
    pub(super) fn await_decision(&mut self, conn_id: u64, listen_id: u64, tx: Sender<Decision>) {
        self.apps.setups.insert(
            conn_id,
            SetupHandle {
                listen: Some(listen_id),
                decision: tx,
            },
        );
    }

    /// The datapath went away: its applications' listeners and setups are gone with it.
    pub(super) fn applications_lost(&mut self) {
        for (_, l) in self.apps.listeners.drain() {
            l.stop.store(true, Ordering::Release);
        }
        self.apps.setups.clear();
    }
}

/// What an application listener's threads need.
struct ListenCtx {
    listen_id: u64,
    pd: u32,
    aligned_sender: bool,
    policy: StartupPolicy,
    link: Sender<LinkMsg>,
    shared: Arc<super::admission::Shared>,
    counts: Arc<ListenerCounts>,
}

fn accept_loop(listener: TcpListener, stop: Arc<AtomicBool>, ctx: ListenCtx) {
    let ctx = Arc::new(ctx);
    let timeout =
        nix::poll::PollTimeout::try_from(STOP_POLL).unwrap_or(nix::poll::PollTimeout::MAX);
    while !stop.load(Ordering::Acquire) {
        let mut fds = [nix::poll::PollFd::new(
            listener.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, timeout) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                tracing::warn!(listen_id = ctx.listen_id, %e, "application listener: poll");
                std::thread::sleep(STOP_POLL);
                continue;
            }
        }
        let (sock, peer) = match listener.accept() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(listen_id = ctx.listen_id, %e, "application listener: accept");
                std::thread::sleep(STOP_POLL);
                continue;
            }
        };
        ctx.counts.accepted();
        let slot = match Slot::take(&ctx.shared, peer) {
            Ok(s) => s,
            Err(_) => {
                ctx.counts.refused(Refusal::MaxConnections);
                refuse(sock);
                continue;
            }
        };
        let c = ctx.clone();
        let spawned = std::thread::Builder::new()
            .name("mpa-app-setup".into())
            .spawn(move || accept_setup(sock, peer, &c, slot));
        if let Err(e) = spawned {
            ctx.counts.refused(Refusal::NoThread);
            tracing::warn!(%peer, %e, "refused: cannot start a setup thread");
        }
    }
    tracing::info!(listen_id = ctx.listen_id, "application listener closed");
}

/// One Request at an application's listener: the application decides through the datapath.
fn accept_setup(sock: TcpStream, peer: SocketAddr, ctx: &ListenCtx, slot: Slot) {
    let Ok(local) = sock.local_addr() else { return };
    let listen_id = ctx.listen_id;
    let conn = std::cell::Cell::new(None::<u64>);
    with_relay(&ctx.link, &ctx.counts, |dp, epoch| {
        let decide = |info: &mpa::startup::RequestInfo, placement: &mut Placement| {
            let n = &info.negotiated;
            let params = PeerParams {
                peer,
                local,
                revision: info.rev,
                markers_rx: n.markers_rx,
                markers_tx: n.markers_tx,
                crc: n.crc,
                ird: negotiated_bound(n, n.ird),
                ord: negotiated_bound(n, n.ord),
                private_data: info.private_data.clone(),
            };
            let peer_ird_ord = info.enhanced.map(|e| (e.ird, e.ord));
            let (dtx, drx) = bounded::<Decision>(1);
            let (atx, arx) = bounded(1);
            let request = LinkMsg::Request {
                epoch: None,
                msg: Message::ConnectionRequested {
                    id: 0,
                    listen_id,
                    params,
                    peer_ird_ord,
                },
                answer: atx,
                decision: Some((listen_id, dtx)),
            };
            if ctx.link.send(request).is_err() {
                return Verdict::Abandon("the link to the datapath ended".into());
            }
            match arx.recv_timeout(2 * ANSWER_TIMEOUT) {
                Ok((_, Message::ConnectionQueued { conn_id, .. })) => {
                    conn.set(Some(conn_id));
                    placement.conn_id = Some(conn_id);
                }
                Ok((_, Message::Error { message, .. })) => {
                    tracing::info!(listen_id, %peer, %message, "application's request refused by the datapath");
                    return Verdict::Reject(b"connection request not taken".to_vec());
                }
                Ok((_, m)) => return Verdict::Abandon(format!("datapath answered {m:?}")),
                Err(_) => return Verdict::Abandon("the datapath did not answer".into()),
            }
            match drx.recv_timeout(ctx.policy.startup_timeout) {
                Ok(Decision::Accept { private_data }) => Verdict::Accept(private_data),
                Ok(Decision::Reject { private_data }) => Verdict::Reject(private_data),
                Err(RecvTimeoutError::Timeout) => Verdict::Abandon(format!(
                    "the application decided nothing within {} ms",
                    ctx.policy.startup_timeout.as_millis()
                )),
                Err(RecvTimeoutError::Disconnected) => {
                    Verdict::Abandon("the application cancelled the request".into())
                }
            }
        };
        let placement = Placement {
            pd: Some(ctx.pd),
            aligned_sender: ctx.aligned_sender,
            conn_id: None,
        };
        match decide_and_hand_over(sock, ctx.policy.clone(), decide, placement, dp) {
            Ok(Outcome::HandedOver {
                flow_id, frozen, ..
            }) => {
                ctx.counts.handed_over();
                tracing::info!(listen_id, flow_id, %peer, "application's connection handed over");
                register(&ctx.link, epoch, flow_id, frozen, peer, slot);
            }
            Ok(Outcome::Rejected { .. }) => ctx.counts.rejected(),
            Err(e) => {
                ctx.counts.failed(Failure::from(&e));
                tracing::info!(listen_id, %peer, %e, "application's request failed");
                if let Some(conn_id) = conn.get() {
                    let outcome = SetupOutcome::Failed {
                        mpa_error: e.mpa_error(),
                        reason: e.to_string(),
                    };
                    report(dp, conn_id, outcome);
                }
            }
        }
    });
}

fn register(
    link: &Sender<LinkMsg>,
    epoch: &AtomicU64,
    flow_id: u64,
    frozen: crate::freeze::FrozenSocket,
    peer: SocketAddr,
    slot: Slot,
) {
    let held = Held {
        _frozen: frozen,
        peer,
        _slot: slot,
    };
    let _ = link.send(LinkMsg::Register {
        epoch: epoch.load(Ordering::Acquire),
        flow_id,
        held,
    });
}

/// Tells the datapath how an application's setup ended (it tells the application).
fn report(dp: &mut DatapathClient, conn_id: u64, outcome: SetupOutcome) {
    if let Err(e) = dp.request(|id| Message::SetupEnded {
        id,
        conn_id,
        outcome,
    }) {
        tracing::debug!(conn_id, %e, "setup outcome not reported");
    }
}

/// [`report`] without a relay (none could be had).
fn report_direct(link: &Sender<LinkMsg>, conn_id: u64, outcome: SetupOutcome) {
    let (answer, _) = bounded(1);
    let _ = link.send(LinkMsg::Request {
        epoch: None,
        msg: Message::SetupEnded {
            id: 0,
            conn_id,
            outcome,
        },
        answer,
        decision: None,
    });
}
