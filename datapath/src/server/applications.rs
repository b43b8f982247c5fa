//! Connection management for applications: the datapath relays an application's Listen,
//! Connect, Accept and Reject to the connection manager (the operator's `mpa-control serve`,
//! which owns kernel sockets) and the manager's results back as events, and it holds the rule
//! that makes domains private: a hand-over puts a connection into an application's domain only
//! when that application asked for the connection (docs/consumer.md, "Connections from the
//! application").

use super::Server;
use crate::memory::registry::Refusal;
use mpa_ctl_proto::cm::{
    self, CmEvent, ConnectOptions, Decision, ListenOptions, PeerParams, SetupOutcome,
};
use mpa_ctl_proto::{AppHandOver, ErrorCode, HandOver, Message, FIRST_ALLOCATED_PD};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long the connection manager may take to bind an application's listener.
const LISTEN_ANSWER: Duration = Duration::from_secs(5);
/// How long a connection request waits for the application's Accept or Reject.
const DECISION_WAIT: Duration = Duration::from_secs(30);
/// How long a setup may take once decided or asked for, beyond its own timeout: the manager's
/// TCP connect, the startup and the hand-over. A setup nobody reports on ends at this bound.
const SETUP_WAIT: Duration = Duration::from_secs(30);

/// The applications' listeners and setups in progress.
#[derive(Default)]
pub(super) struct AppConnections {
    /// The client that serves them (an operator's `mpa-control serve`).
    manager: Option<u64>,
    /// Listener and connection ids share one sequence: an id names one thing only.
    next_id: u64,
    listens: HashMap<u64, AppListen>,
    setups: HashMap<u64, AppSetup>,
}

struct AppListen {
    owner: u64,
    pd: u32,
    backlog: u32,
    /// Until bound: the application's request id and when it was relayed.
    pending: Option<(u64, Instant)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// A request at a listener, waiting for the application's decision.
    Requested,
    /// Accepted, or connecting: the manager works on it.
    Running,
}

struct AppSetup {
    owner: u64,
    pd: u32,
    listen: Option<u64>,
    stage: Stage,
    deadline: Instant,
}

impl AppConnections {
    fn next(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Whether a listener or a setup is in domain `pd`.
    pub(super) fn uses_domain(&self, pd: u32) -> bool {
        self.listens.values().any(|l| l.pd == pd) || self.setups.values().any(|s| s.pd == pd)
    }

    /// Whether a connection manager serves applications.
    pub(super) fn has_manager(&self) -> bool {
        self.manager.is_some()
    }

    /// Listeners and setups, for statistics.
    pub(super) fn counts(&self) -> (usize, usize) {
        (self.listens.len(), self.setups.len())
    }
}

fn forbidden(message: String) -> Refusal {
    (ErrorCode::Forbidden, message)
}

fn bad(message: String) -> Refusal {
    (ErrorCode::BadRequest, message)
}

impl Server {
    /// Serves the connection-management requests; gives `m` back when it is none of them.
    pub(super) fn handle_application(&mut self, client: u64, m: Message) -> Option<Message> {
        match m {
            Message::AllocPd { id } => {
                let r = self.registry.alloc_pd(client);
                match r {
                    Ok(pd) => self.reply(client, Message::PdAllocated { id, pd }),
                    Err(e) => self.answer(client, id, Err(e)),
                }
            }
            Message::DeallocPd { id, pd } => {
                let r = self.dealloc_pd(client, pd);
                self.answer(client, id, r);
            }
            Message::ServeConnections { id } => {
                let r = self.serve_connections(client);
                self.answer(client, id, r);
            }
            Message::Listen {
                id,
                pd,
                bind,
                options,
            } => {
                if let Err(e) = self.listen(client, id, pd, bind, options) {
                    self.answer(client, id, Err(e));
                }
            }
            Message::ListenResult {
                id,
                listen_id,
                bound,
                error,
            } => {
                let r = self.listen_result(client, listen_id, bound, error);
                self.answer(client, id, r);
            }
            Message::StopListening { id, listen_id } => {
                let r = self.stop_listening(client, listen_id);
                self.answer(client, id, r);
            }
            Message::Connect {
                id,
                pd,
                remote,
                options,
            } => match self.connect(client, pd, remote, options) {
                Ok(conn_id) => self.reply(client, Message::Connecting { id, conn_id }),
                Err(e) => self.answer(client, id, Err(e)),
            },
            Message::ConnectionRequested {
                id,
                listen_id,
                params,
                peer_ird_ord,
            } => match self.connection_requested(client, listen_id, params, peer_ird_ord) {
                Ok(conn_id) => self.reply(client, Message::ConnectionQueued { id, conn_id }),
                Err(e) => self.answer(client, id, Err(e)),
            },
            Message::Accept {
                id,
                conn_id,
                private_data,
            } => {
                let r = self.decide(client, conn_id, Decision::Accept { private_data });
                self.answer(client, id, r);
            }
            Message::Reject {
                id,
                conn_id,
                private_data,
            } => {
                let r = self.decide(client, conn_id, Decision::Reject { private_data });
                self.answer(client, id, r);
            }
            Message::SetupEnded {
                id,
                conn_id,
                outcome,
            } => {
                let r = self.setup_ended(client, conn_id, outcome);
                self.answer(client, id, r);
            }
            m => return Some(m),
        }
        None
    }

    /// The domain `pd` must be `client`'s own: allocated to it, or claimed by it.
    fn own_domain(&self, client: u64, pd: u32) -> Result<(), Refusal> {
        if self.registry.domain_owner(pd) == Some(client) {
            return Ok(());
        }
        Err(forbidden(format!(
            "protection domain {pd} is not this client's (allocate one with AllocPd)"
        )))
    }

    fn manager(&self) -> Result<u64, Refusal> {
        self.apps.manager.ok_or_else(|| {
            (
                ErrorCode::Unavailable,
                "no connection manager serves applications: start `mpa-control serve` with \
                 this datapath's socket"
                    .to_string(),
            )
        })
    }

    fn is_manager(&self, client: u64) -> Result<(), Refusal> {
        if self.apps.manager == Some(client) {
            Ok(())
        } else {
            Err(forbidden(
                "only the connection manager (ServeConnections) reports on setups".into(),
            ))
        }
    }

    fn dealloc_pd(&mut self, client: u64, pd: u32) -> Result<(), Refusal> {
        self.own_domain(client, pd)?;
        let flows = self.adopted.values().filter(|a| a.pd == Some(pd)).count();
        if flows > 0 || self.apps.uses_domain(pd) {
            return Err(bad(format!(
                "protection domain {pd} is in use: {flows} connection(s), {} listener(s) or \
                 setup(s)",
                self.apps.listens.values().filter(|l| l.pd == pd).count()
                    + self.apps.setups.values().filter(|s| s.pd == pd).count()
            )));
        }
        self.registry.dealloc_pd(pd, client)
    }

    fn serve_connections(&mut self, client: u64) -> Result<(), Refusal> {
        if !self.is_operator(client) {
            return Err(forbidden(
                "ServeConnections is the connection manager's: the client's process lacked \
                 CAP_NET_ADMIN when it connected"
                    .into(),
            ));
        }
        match self.apps.manager {
            Some(m) if m != client => Err((
                ErrorCode::Limit,
                format!("another connection manager (control client {m}) serves applications"),
            )),
            _ => {
                self.apps.manager = Some(client);
                tracing::info!(client, "connection manager serves applications");
                Ok(())
            }
        }
    }

    fn listen(
        &mut self,
        client: u64,
        id: u64,
        pd: u32,
        bind: SocketAddr,
        options: ListenOptions,
    ) -> Result<(), Refusal> {
        self.own_domain(client, pd)?;
        cm::check_listen(&options).map_err(bad)?;
        let mine = self
            .apps
            .listens
            .values()
            .filter(|l| l.owner == client)
            .count();
        if mine >= cm::MAX_LISTENS_PER_CLIENT {
            return Err((
                ErrorCode::Limit,
                format!(
                    "this client has {} listeners already",
                    cm::MAX_LISTENS_PER_CLIENT
                ),
            ));
        }
        let manager = self.manager()?;
        let listen_id = self.apps.next();
        self.apps.listens.insert(
            listen_id,
            AppListen {
                owner: client,
                pd,
                backlog: options.backlog,
                pending: Some((id, Instant::now())),
            },
        );
        self.reply(
            manager,
            Message::ManagerListen {
                listen_id,
                pd,
                bind,
                options,
            },
        );
        Ok(())
    }

    fn listen_result(
        &mut self,
        client: u64,
        listen_id: u64,
        bound: Option<SocketAddr>,
        error: Option<String>,
    ) -> Result<(), Refusal> {
        self.is_manager(client)?;
        let Some(l) = self.apps.listens.get_mut(&listen_id) else {
            // Stopped (or its application gone) meanwhile: the manager closes it.
            self.reply(client, Message::ManagerStopListening { listen_id });
            return Ok(());
        };
        let Some((app_id, _)) = l.pending.take() else {
            return Err(bad(format!("listener {listen_id} was answered already")));
        };
        let owner = l.owner;
        match (bound, error) {
            (Some(bound), None) => self.reply(
                owner,
                Message::Listening {
                    id: app_id,
                    listen_id,
                    bound,
                },
            ),
            (_, error) => {
                self.apps.listens.remove(&listen_id);
                let message = error.unwrap_or_else(|| "the listener could not be bound".into());
                self.answer(owner, app_id, Err((ErrorCode::BadRequest, message)));
            }
        }
        Ok(())
    }

    fn stop_listening(&mut self, client: u64, listen_id: u64) -> Result<(), Refusal> {
        if self
            .apps
            .listens
            .get(&listen_id)
            .is_none_or(|l| l.owner != client)
        {
            return Err(bad(format!("no listener {listen_id} of this client")));
        }
        self.end_listen(listen_id);
        Ok(())
    }

    /// Forgets a listener and the requests at it not yet decided; the manager closes both.
    fn end_listen(&mut self, listen_id: u64) {
        self.apps.listens.remove(&listen_id);
        self.apps
            .setups
            .retain(|_, s| !(s.listen == Some(listen_id) && s.stage == Stage::Requested));
        if let Some(m) = self.apps.manager {
            self.reply(m, Message::ManagerStopListening { listen_id });
        }
    }

    fn setups_of(&self, client: u64) -> usize {
        self.apps
            .setups
            .values()
            .filter(|s| s.owner == client)
            .count()
    }

    fn connect(
        &mut self,
        client: u64,
        pd: u32,
        remote: SocketAddr,
        options: ConnectOptions,
    ) -> Result<u64, Refusal> {
        self.own_domain(client, pd)?;
        cm::check_connect(&options).map_err(bad)?;
        if self.setups_of(client) >= cm::MAX_SETUPS_PER_CLIENT {
            return Err((
                ErrorCode::Limit,
                format!(
                    "this client has {} connections in setup already",
                    cm::MAX_SETUPS_PER_CLIENT
                ),
            ));
        }
        let manager = self.manager()?;
        let conn_id = self.apps.next();
        let own = Duration::from_millis(u64::from(options.timeout_ms));
        self.apps.setups.insert(
            conn_id,
            AppSetup {
                owner: client,
                pd,
                listen: None,
                stage: Stage::Running,
                deadline: Instant::now() + SETUP_WAIT + 2 * own,
            },
        );
        self.reply(
            manager,
            Message::ManagerConnect {
                conn_id,
                pd,
                remote,
                options,
            },
        );
        Ok(conn_id)
    }

    fn connection_requested(
        &mut self,
        client: u64,
        listen_id: u64,
        params: PeerParams,
        peer_ird_ord: Option<(u16, u16)>,
    ) -> Result<u64, Refusal> {
        self.is_manager(client)?;
        let Some(l) = self.apps.listens.get(&listen_id) else {
            return Err(bad(format!("no listener {listen_id}")));
        };
        let (owner, pd, backlog) = (l.owner, l.pd, l.backlog);
        let waiting = self
            .apps
            .setups
            .values()
            .filter(|s| s.listen == Some(listen_id) && s.stage == Stage::Requested)
            .count();
        if waiting >= backlog as usize || self.setups_of(owner) >= cm::MAX_SETUPS_PER_CLIENT {
            return Err((
                ErrorCode::Limit,
                format!("listener {listen_id}: {waiting} requests await the application"),
            ));
        }
        let conn_id = self.apps.next();
        self.apps.setups.insert(
            conn_id,
            AppSetup {
                owner,
                pd,
                listen: Some(listen_id),
                stage: Stage::Requested,
                deadline: Instant::now() + DECISION_WAIT,
            },
        );
        let event = CmEvent::ConnectRequest {
            listen_id,
            conn_id,
            params,
            peer_ird_ord,
        };
        self.reply(owner, Message::CmEvent { event });
        Ok(conn_id)
    }

    fn decide(&mut self, client: u64, conn_id: u64, d: Decision) -> Result<(), Refusal> {
        let waiting = self
            .apps
            .setups
            .get(&conn_id)
            .is_some_and(|s| s.owner == client && s.stage == Stage::Requested);
        if !waiting {
            return Err(bad(format!(
                "no connection request {conn_id} awaits this client's decision"
            )));
        }
        let (Decision::Accept { private_data, .. } | Decision::Reject { private_data }) = &d;
        cm::check_private_data(private_data).map_err(bad)?;
        let manager = self.manager()?;
        if matches!(d, Decision::Reject { .. }) {
            self.apps.setups.remove(&conn_id);
        } else if let Some(s) = self.apps.setups.get_mut(&conn_id) {
            s.stage = Stage::Running;
            s.deadline = Instant::now() + SETUP_WAIT;
        }
        self.reply(
            manager,
            Message::ManagerDecision {
                conn_id,
                decision: d,
            },
        );
        Ok(())
    }

    fn setup_ended(
        &mut self,
        client: u64,
        conn_id: u64,
        outcome: SetupOutcome,
    ) -> Result<(), Refusal> {
        self.is_manager(client)?;
        // Gone already (rejected, cancelled, timed out): nothing to tell.
        let Some(s) = self.apps.setups.remove(&conn_id) else {
            return Ok(());
        };
        let event = match outcome {
            SetupOutcome::Rejected { private_data } => CmEvent::Rejected {
                conn_id,
                private_data,
            },
            SetupOutcome::Unreachable { reason } => CmEvent::Unreachable { conn_id, reason },
            SetupOutcome::Failed { mpa_error, reason } => CmEvent::SetupFailed {
                conn_id,
                mpa_error,
                reason,
            },
        };
        self.reply(s.owner, Message::CmEvent { event });
        Ok(())
    }

    /// The domain rule of a hand-over: into an application's domain only the connection that
    /// application asked for; into no allocated domain otherwise. Returns the application to
    /// tell once the hand-over succeeds.
    pub(super) fn check_hand_over_domain(&self, h: &HandOver) -> Result<Option<u64>, Refusal> {
        match (&h.app, h.mpa.pd) {
            (Some(app), pd) => {
                let s = self
                    .apps
                    .setups
                    .get(&app.conn_id)
                    .filter(|s| s.stage == Stage::Running && Some(s.pd) == pd);
                match s {
                    Some(s) => Ok(Some(s.owner)),
                    None => Err(forbidden(format!(
                        "connection {} is no application's setup in domain {pd:?}",
                        app.conn_id
                    ))),
                }
            }
            (None, Some(pd)) if pd >= FIRST_ALLOCATED_PD => Err(forbidden(format!(
                "protection domain {pd} is an application's: only a connection it asked for \
                 (its Listen or Connect) is handed over into it"
            ))),
            (None, _) => Ok(None),
        }
    }

    /// A hand-over of an application's connection ended: it is established (`flow_id`), or
    /// failed with `why`; `owner` is the application [`Server::check_hand_over_domain`]
    /// named.
    pub(super) fn app_hand_over_done(
        &mut self,
        owner: u64,
        app: &AppHandOver,
        r: Result<u64, String>,
    ) {
        if self.apps.setups.remove(&app.conn_id).is_none() {
            return;
        }
        let conn_id = app.conn_id;
        let event = match r {
            Ok(flow_id) => CmEvent::Established {
                conn_id,
                flow_id,
                params: app.params.clone(),
            },
            Err(reason) => CmEvent::SetupFailed {
                conn_id,
                mpa_error: None,
                reason: format!("hand-over to the datapath: {reason}"),
            },
        };
        self.reply(owner, Message::CmEvent { event });
    }

    /// A client went away: the manager's listeners and setups all end (their applications
    /// are told); an application's are cancelled at the manager.
    pub(super) fn applications_client_gone(&mut self, client: u64) {
        if self.apps.manager == Some(client) {
            self.apps.manager = None;
            let why = "the connection manager went away";
            tracing::warn!("{why}: applications' listeners and setups end");
            for (listen_id, l) in std::mem::take(&mut self.apps.listens) {
                match l.pending {
                    Some((id, _)) => {
                        self.answer(l.owner, id, Err((ErrorCode::Unavailable, why.into())))
                    }
                    None => {
                        let event = CmEvent::ListenEnded {
                            listen_id,
                            reason: why.into(),
                        };
                        self.reply(l.owner, Message::CmEvent { event });
                    }
                }
            }
            for (conn_id, s) in std::mem::take(&mut self.apps.setups) {
                let event = CmEvent::SetupFailed {
                    conn_id,
                    mpa_error: None,
                    reason: why.into(),
                };
                self.reply(s.owner, Message::CmEvent { event });
            }
            return;
        }
        let listens: Vec<u64> = self
            .apps
            .listens
            .iter()
            .filter(|(_, l)| l.owner == client)
            .map(|(&id, _)| id)
            .collect();
        for listen_id in listens {
            self.end_listen(listen_id);
        }
        let setups: Vec<u64> = self
            .apps
            .setups
            .iter()
            .filter(|(_, s)| s.owner == client)
            .map(|(&id, _)| id)
            .collect();
        for conn_id in setups {
            self.apps.setups.remove(&conn_id);
            if let Some(m) = self.apps.manager {
                let reason = "the application went away".to_string();
                self.reply(m, Message::ManagerCancel { conn_id, reason });
            }
        }
    }

    /// Ends what waited too long: a listener the manager never answered, a request the
    /// application never decided, a setup nobody reported on.
    pub(super) fn sweep_applications(&mut self, now: Instant) {
        let late: Vec<u64> = self
            .apps
            .listens
            .iter()
            .filter(|(_, l)| {
                l.pending
                    .is_some_and(|(_, t)| now.duration_since(t) >= LISTEN_ANSWER)
            })
            .map(|(&id, _)| id)
            .collect();
        for listen_id in late {
            if let Some(l) = self.apps.listens.get(&listen_id) {
                let (owner, id) = (l.owner, l.pending.map_or(0, |p| p.0));
                let message = format!(
                    "the connection manager did not bind the listener within {} s",
                    LISTEN_ANSWER.as_secs()
                );
                self.end_listen(listen_id);
                self.answer(owner, id, Err((ErrorCode::Unavailable, message)));
            }
        }
        let late: Vec<u64> = self
            .apps
            .setups
            .iter()
            .filter(|(_, s)| now >= s.deadline)
            .map(|(&id, _)| id)
            .collect();
        for conn_id in late {
            let Some(s) = self.apps.setups.remove(&conn_id) else {
                continue;
            };
            let reason = match s.stage {
                Stage::Requested => format!(
                    "the application decided nothing within {} s: rejected",
                    DECISION_WAIT.as_secs()
                ),
                Stage::Running => "the connection manager reported nothing in time".into(),
            };
            if let Some(m) = self.apps.manager {
                let reason = reason.clone();
                self.reply(m, Message::ManagerCancel { conn_id, reason });
            }
            let event = CmEvent::SetupFailed {
                conn_id,
                mpa_error: None,
                reason,
            };
            self.reply(s.owner, Message::CmEvent { event });
        }
    }
}
