//! The control requests: one function per request kind, and the dispatch that picks it. A
//! client must say Hello (with our protocol version) before anything else.

use super::{Adopted, Command, Server};
use crate::memory::registry::Refusal;
use mpa_bpf::{FlowKey, FlowValue};
use mpa_ctl_proto::ring::post::WorkRequest;
use mpa_ctl_proto::stats::{
    CaptureStats, DatapathStats, FlowPage, QueueReport, MAX_FLOWS_PER_ANSWER,
};
use mpa_ctl_proto::{ErrorCode, HandOver, Message, PostTarget, VERSION};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

impl Server {
    /// Serves one message from `client`, with the descriptor it carried (RegisterRegion's; no
    /// other request takes one, and its reader closed any other).
    pub(super) fn handle(&mut self, client: u64, m: Message, fd: Option<OwnedFd>) {
        let hello = self.clients.get(&client).is_some_and(|c| c.hello);
        if !hello {
            return self.hello(client, m);
        }
        // An answer without side effects that would be dropped is not computed: a client
        // that floods GetStats and never reads costs no worker round trips once its queue is
        // full, nor after it stopped reading.
        // (Counted as `send_to` would: dropped when the queue is full, not when the client's
        // writer has ended.)
        if matches!(m, Message::GetStats { .. } | Message::ListRegions { .. }) {
            match self.clients.get(&client) {
                Some(c) if c.unreachable() => return,
                Some(c) if c.full() => {
                    let queued = c.queued();
                    return self.dropped(client, queued);
                }
                _ => {}
            }
        }
        // Steering a 4-tuple, handing a connection over and watching a port's segments are
        // the connection manager's: a client without CAP_NET_ADMIN could black-hole a live
        // kernel connection or put a made-up one into another application's domain
        // (docs/consumer.md, "Who may do what").
        if let Message::AdoptFlow { id, .. }
        | Message::HandOver { id, .. }
        | Message::WatchPort { id, .. } = &m
        {
            if !self.is_operator(client) {
                let what = match &m {
                    Message::AdoptFlow { .. } => "AdoptFlow",
                    Message::HandOver { .. } => "HandOver",
                    _ => "WatchPort",
                };
                let message = format!(
                    "{what} is the connection manager's: the client's process lacked \
                     CAP_NET_ADMIN when it connected"
                );
                return self.answer(client, *id, Err((ErrorCode::Forbidden, message)));
            }
        }
        let Some(m) = self.handle_application(client, m) else {
            return;
        };
        match m {
            Message::AdoptFlow { id, local, remote } => self.adopt_flow(client, id, local, remote),
            Message::HandOver { id, handover } => self.hand_over(client, id, handover),
            Message::CloseFlow { id, flow_id } => self.close_flow(client, id, flow_id),
            Message::FinishFlow { id, flow_id } => self.finish_flow(client, id, flow_id),
            Message::GetStats {
                id,
                flows_after,
                max_flows,
            } => {
                #[cfg(debug_assertions)]
                if std::env::var_os(super::CONTROL_PANIC_AT_STATS_ENV).is_some() {
                    panic!("fault injected by {}", super::CONTROL_PANIC_AT_STATS_ENV);
                }
                self.get_stats(client, id, flows_after, max_flows)
            }
            Message::CreateRegion {
                id,
                len,
                pd,
                remote_write,
                remote_read,
            } => self.create_region(client, id, len, pd, remote_write, remote_read),
            Message::RegisterRegion {
                id,
                pd,
                len,
                remote_write,
                remote_read,
            } => self.register_region(client, id, len, pd, (remote_write, remote_read), fd),
            Message::DestroyRegion { id, stag } => self.destroy_region(client, id, stag),
            Message::ListRegions { id, pd } => self.list_regions(client, id, pd),
            Message::PostRecv {
                id,
                target,
                stag,
                offset,
                len,
                count,
                wr_id,
            } => {
                let r = self.post_recv(client, target, stag, offset, len, count, wr_id);
                self.answer(client, id, r);
            }
            Message::Post { id, wr } => self.post_send(client, id, wr),
            Message::Subscribe {
                id,
                pd,
                post_queues,
            } => self.subscribe(client, id, pd, post_queues),
            Message::Unsubscribe { id, pd } => {
                let r = self.close_subscription(client, pd);
                self.answer(client, id, r);
            }
            Message::WatchPort { id, port } => self.watch_port(client, id, port),
            Message::UnwatchPort { id, port } => self.unwatch_port(client, id, port),
            Message::StartCapture {
                id,
                flow,
                max_bytes,
                duration_ms,
                snaplen,
            } => {
                let r = self.start_capture(client, flow, max_bytes, duration_ms, snaplen);
                self.answer(client, id, r);
            }
            Message::StopCapture { id } => self.stop_capture(client, id),
            other => self.not_a_request(client, other),
        }
    }

    /// Ok, or the refusal, for request `id`.
    pub(super) fn answer(&mut self, client: u64, id: u64, r: Result<(), Refusal>) {
        match r {
            Ok(()) => self.reply(client, Message::Ok { id }),
            Err((code, message)) => self.reply(client, Message::Error { id, code, message }),
        }
    }

    /// Before its Hello a client may say only Hello: one with another version is answered
    /// with ours (so that it can tell the user), anything else is refused.
    fn hello(&mut self, client: u64, m: Message) {
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
    }

    /// AdoptFlow: the 4-tuple goes into the XDP flow map under a new flow id, so that its
    /// segments come to us (and no longer to the frozen kernel socket).
    fn adopt_flow(&mut self, client: u64, id: u64, local: SocketAddr, remote: SocketAddr) {
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
        if self.faults.xdp_detached {
            // Its segments could never reach us.
            return self.reply(
                client,
                Message::Error {
                    id,
                    code: ErrorCode::Internal,
                    message: super::faults::XDP_DETACHED.into(),
                },
            );
        }
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

    /// HandOver: the adopted flow's TCP and MPA state goes to a worker, which answers
    /// whether it took the flow.
    fn hand_over(&mut self, client: u64, id: u64, handover: Box<HandOver>) {
        let flow_id = handover.flow_id;
        let Some(a) = self.adopted.get(&flow_id) else {
            return self.reply(
                client,
                Message::Error {
                    id,
                    code: ErrorCode::UnknownFlow,
                    message: format!("flow {flow_id} was not adopted"),
                },
            );
        };
        if a.client != client {
            return self.reply(
                client,
                Message::Error {
                    id,
                    code: ErrorCode::Forbidden,
                    message: format!("flow {flow_id} was adopted by another control client"),
                },
            );
        }
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
        let app_owner = match self.check_hand_over_domain(&handover) {
            Ok(o) => o,
            Err((code, message)) => {
                // A refused hand-over leaves nothing steered: the manager rolls back.
                return self.reply(client, Message::Error { id, code, message });
            }
        };
        let key = a.key;
        // Queue choice: RSS decides where the peer's segments arrive, which nothing
        // tells us yet. Spread hand-overs; the first segment on another queue makes
        // that queue's worker ask for the flow (Notification::Stray) and it moves.
        let w = (flow_id as usize) % self.workers.len();
        if let Some(a) = self.adopted.get_mut(&flow_id) {
            a.worker = Some(w);
            a.pd = handover.mpa.pd;
        }
        let mut handover = handover;
        self.inherit_ts_recent(&key, &mut handover);
        let shared = handover
            .mpa
            .pd
            .and_then(|pd| self.registry.shared_queue(pd))
            .map(|q| q as std::sync::Arc<dyn mpa_stack::receiver::SharedReceiveQueue>);
        let app = handover.app.clone();
        let (tx, rx) = crossbeam_channel::bounded(1);
        let r = if self.workers[w]
            .send(Command::HandOver(handover, shared, tx))
            .is_err()
        {
            Err((ErrorCode::Internal, "worker gone".to_string()))
        } else {
            match rx.recv_timeout(Duration::from_secs(2)) {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => {
                    self.forget(flow_id);
                    let code = match e {
                        crate::worker::WorkerError::MemoryBudget { .. } => ErrorCode::Limit,
                        _ => ErrorCode::BadRequest,
                    };
                    Err((code, e.to_string()))
                }
                Err(_) => Err((ErrorCode::Internal, "worker did not answer".to_string())),
            }
        };
        if let (Some(app), Some(owner)) = (&app, app_owner) {
            let done = r.as_ref().map(|()| flow_id).map_err(|(_, m)| m.clone());
            self.app_hand_over_done(owner, app, done);
        }
        match r {
            Ok(()) => self.reply(client, Message::HandedOver { id, flow_id }),
            Err((code, message)) => self.reply(client, Message::Error { id, code, message }),
        }
    }

    /// CloseFlow: its worker resets the connection (it reports FlowGone); a flow adopted but
    /// not yet handed over is simply forgotten.
    fn close_flow(&mut self, client: u64, id: u64, flow_id: u64) {
        if let Err((code, message)) = self.may_control(client, flow_id) {
            return self.reply(client, Message::Error { id, code, message });
        }
        match self.adopted.get(&flow_id) {
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
        }
    }

    /// FinishFlow: its worker closes our direction after what is queued (a FIN).
    fn finish_flow(&mut self, client: u64, id: u64, flow_id: u64) {
        if let Err((code, message)) = self.may_control(client, flow_id) {
            return self.reply(client, Message::Error { id, code, message });
        }
        let w = self.adopted.get(&flow_id).map(|a| a.worker);
        let r = match w {
            None => Err((ErrorCode::UnknownFlow, format!("no flow {flow_id}"))),
            Some(None) => Err((
                ErrorCode::BadRequest,
                format!("flow {flow_id} not handed over yet"),
            )),
            Some(Some(w)) => self.workers[w]
                .send(Command::Finish(flow_id))
                .map_err(|_| (ErrorCode::Internal, "worker gone".to_string())),
        };
        self.answer(client, id, r);
    }

    /// GetStats: every worker's counters, the XDP program's, the registry's, the ended flows
    /// kept, the capture running, and a page of the live flows: the `max_flows` of lowest id
    /// above `flows_after`.
    fn get_stats(&mut self, client: u64, id: u64, flows_after: Option<u64>, max: Option<u32>) {
        let max = match max.unwrap_or(MAX_FLOWS_PER_ANSWER) {
            m @ 1..=MAX_FLOWS_PER_ANSWER => m as usize,
            m => {
                let message =
                    format!("max_flows {m}: an answer lists 1 ..= {MAX_FLOWS_PER_ANSWER} flows");
                return self.answer(client, id, Err((ErrorCode::BadRequest, message)));
            }
        };
        let mut queues = Vec::new();
        for w in &self.workers {
            let (tx, rx) = crossbeam_channel::bounded(1);
            // One more than the page holds: whether any is left out is then known.
            let ask = Command::Stats {
                after: flows_after,
                max: max + 1,
                answer: tx,
            };
            if w.send(ask).is_ok() {
                if let Ok(v) = rx.recv_timeout(Duration::from_secs(2)) {
                    queues.push(v);
                }
            }
        }
        let flow_page = FlowPage {
            after: flows_after,
            next: keep_lowest_flows(&mut queues, max),
        };
        // A client that is not an operator sees the counters of every queue but only its own
        // flows (the page stays the same, so its `next` still covers every flow).
        let operator = self.is_operator(client);
        if !operator {
            for q in &mut queues {
                let mut flows = std::mem::take(&mut q.flows);
                flows.retain(|f| self.sees_flow(client, f));
                q.flows = flows;
            }
        }
        let unclaimed_completions = queues.iter().map(|q| q.stats.completions_unclaimed).sum();
        let xdp = self
            .steering
            .counters()
            .ok()
            .map(|c| mpa_ctl_proto::stats::XdpCounters {
                seen: c.seen,
                redirected: c.redirected,
                passed: c.passed,
                malformed: c.malformed,
                steered_no_xsk: c.steered_no_xsk,
                dropped_fragment: c.dropped_fragment,
                dropped_ipv6_ext: c.dropped_ipv6_ext,
                dropped_vlan_stack: c.dropped_vlan_stack,
                dropped_malformed: c.dropped_malformed,
                headers_copied: c.headers_copied,
            });
        let capture = self.capture.as_ref().map(|c| CaptureStats {
            client: c.client,
            flow: c.flow,
            frames: c.frames,
            bytes: c.bytes,
            max_bytes: c.max_bytes,
            dropped_by_client_queue: c.dropped,
            ms_left: c
                .deadline
                .saturating_duration_since(Instant::now())
                .as_millis() as u64,
        });
        let stats = Box::new(DatapathStats {
            queues,
            xdp,
            adopted_flows: self.adopted.len(),
            registry: mpa_ctl_proto::stats::RegistryStats {
                unclaimed_completions,
                ..self.registry.stats()
            },
            ended_flows: self
                .finished
                .iter()
                .filter(|f| operator || self.sees_flow(client, f))
                .cloned()
                .collect(),
            capture: capture.filter(|c| operator || c.client == client),
            xdp_detached: self.faults.xdp_detached,
            control: self.control_stats(),
            handover: self.handover_stats(),
            memory: {
                let (shared_files, shared_bytes) = mpa_ctl_proto::shm::created_now();
                mpa_ctl_proto::stats::MemoryStats {
                    shared_files,
                    shared_bytes,
                    ..self.budget.report()
                }
            },
            ended: self.ended.clone(),
            flow_page,
        });
        self.reply(client, Message::Stats { id, stats });
    }

    /// CreateRegion: the registry creates it and every worker learns it; its descriptor goes
    /// to the client with the answer.
    fn create_region(
        &mut self,
        client: u64,
        id: u64,
        len: u64,
        pd: u32,
        remote_write: bool,
        remote_read: bool,
    ) {
        match self
            .registry
            .create(len, pd, remote_write, remote_read, client)
        {
            Ok(r) => {
                self.add_region(&r, "region created");
                let m = Message::RegionCreated {
                    id,
                    region: r.info.clone(),
                };
                self.send_to(client, m, Some(r.mem.clone()));
            }
            Err((code, message)) => self.reply(client, Message::Error { id, code, message }),
        }
    }

    /// Every worker learns region `r` (created or registered), logged as `what`.
    fn add_region(&mut self, r: &mpa_stack::receiver::Region, what: &'static str) {
        for w in &self.workers {
            let _ = w.send(Command::AddRegion(r.clone()));
        }
        let i = &r.info;
        tracing::info!(
            stag = i.stag,
            len = i.len,
            pd = i.pd,
            huge = i.huge_pages,
            "{what}"
        );
    }

    /// RegisterRegion: the application's memfd, sealed, mapped and guarded by the registry,
    /// becomes a region every worker learns, as a created one does; the answer carries no
    /// descriptor (docs/consumer.md, "Registering memory the application has").
    fn register_region(
        &mut self,
        client: u64,
        id: u64,
        len: u64,
        pd: u32,
        access: (bool, bool),
        fd: Option<OwnedFd>,
    ) {
        let Some(fd) = fd else {
            let message = "RegisterRegion carries no descriptor: attach the memfd to the \
                           message (SCM_RIGHTS)";
            return self.answer(client, id, Err((ErrorCode::BadRequest, message.into())));
        };
        match self.registry.register(fd, len, pd, access, client) {
            Ok(r) => {
                self.add_region(&r, "region registered over the application's memory");
                let region = r.info.clone();
                self.reply(client, Message::RegionRegistered { id, region });
            }
            Err(e) => self.answer(client, id, Err(e)),
        }
    }

    /// DestroyRegion: gone from the registry and from every worker.
    fn destroy_region(&mut self, client: u64, id: u64, stag: u32) {
        match self.registry.destroy_for(stag, client) {
            Ok(()) => {
                for w in &self.workers {
                    let _ = w.send(Command::RemoveRegion(stag));
                }
                self.reply(client, Message::Ok { id });
            }
            Err((code, message)) => self.reply(client, Message::Error { id, code, message }),
        }
    }

    /// ListRegions: the regions of one protection domain, or all; a client that is not an
    /// operator sees only those of the domains it owns.
    fn list_regions(&mut self, client: u64, id: u64, pd: Option<u32>) {
        let mut regions = self.registry.list(pd);
        if !self.is_operator(client) {
            regions.retain(|r| self.registry.domain_owner(r.pd) == Some(client));
        }
        self.reply(client, Message::Regions { id, regions });
    }

    /// Subscribe: `client` receives the completions of protection domain `pd` (through
    /// completion rings in shared memory, `subscriptions.rs`), unless the domain belongs to
    /// another client.
    fn subscribe(&mut self, client: u64, id: u64, pd: u32, post_queues: bool) {
        self.open_subscription(client, id, pd, post_queues);
    }

    /// StopCapture: only the client that started the capture may stop it; it ends at the
    /// next turn of the loop.
    fn stop_capture(&mut self, client: u64, id: u64) {
        match self.capture.as_mut() {
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
        }
    }

    /// Whether `client`'s process held CAP_NET_ADMIN when it connected (`clients.rs`).
    pub(super) fn is_operator(&self, client: u64) -> bool {
        self.clients.get(&client).is_some_and(|c| c.operator)
    }

    /// Whether a client that is not an operator may see flow `f` in statistics: one it
    /// adopted, or one of a domain it owns.
    fn sees_flow(&self, client: u64, f: &mpa_ctl_proto::stats::FlowReport) -> bool {
        self.adopted
            .get(&f.flow_id)
            .is_some_and(|a| a.client == client)
            || f.pd
                .is_some_and(|pd| self.registry.domain_owner(pd) == Some(client))
    }

    /// Whether `client` may end, finish or capture flow `flow_id`: the client that adopted
    /// it (`mpa-control`, for hand-overs), the one that owns its protection domain (its
    /// consumer), or an operator (a process with CAP_NET_ADMIN: `mpa-control close`,
    /// `capture`). Others get `Forbidden`: control clients share the datapath's uid, so the
    /// socket's permissions alone do not keep one consumer off another's flows. An unknown
    /// flow passes here (the caller answers `UnknownFlow`).
    pub(super) fn may_control(&self, client: u64, flow_id: u64) -> Result<(), Refusal> {
        let Some(a) = self.adopted.get(&flow_id) else {
            return Ok(());
        };
        if self.is_operator(client) {
            return Ok(());
        }
        let owns_domain =
            a.pd.is_some_and(|pd| self.registry.domain_owner(pd) == Some(client));
        if a.client == client || owns_domain {
            Ok(())
        } else {
            Err((
                ErrorCode::Forbidden,
                format!("flow {flow_id} belongs to another control client"),
            ))
        }
    }

    /// Anything else (an answer or a notification sent to us) is refused.
    fn not_a_request(&mut self, client: u64, other: Message) {
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

    /// Post: messages to send on one flow, from a region of its domain,
    /// through its worker; answered with Posted or the reason none was queued.
    fn post_send(&mut self, client: u64, id: u64, post: WorkRequest) {
        let flow_id = post.flow_id;
        let r = (|| -> Result<Option<u32>, Refusal> {
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
            self.registry.check_domain(pd, client)?;
            if let Some(defect) = post.defect() {
                return Err((ErrorCode::BadRequest, defect.to_string()));
            }
            let (tx, rx) = crossbeam_channel::bounded(1);
            self.workers[w]
                .send(Command::PostSend(Box::new(post), tx))
                .map_err(|_| (ErrorCode::Internal, "worker gone".to_string()))?;
            match rx.recv_timeout(Duration::from_secs(2)) {
                Ok(Ok(first_msn)) => Ok(first_msn),
                Ok(Err(e)) => Err((ErrorCode::BadRequest, e.to_string())),
                Err(_) => Err((ErrorCode::Internal, "worker did not answer".into())),
            }
        })();
        match r {
            Ok(first_msn) => self.reply(
                client,
                Message::Posted {
                    id,
                    count: post.count,
                    first_msn,
                },
            ),
            Err(e) => self.answer(client, id, Err(e)),
        }
    }

    /// PostRecv: receive buffers for Sends, posted to a protection domain (they wait there
    /// for its next flow) or to one flow (through its worker).
    #[allow(clippy::too_many_arguments)]
    fn post_recv(
        &mut self,
        client: u64,
        target: PostTarget,
        stag: u32,
        offset: u64,
        len: u32,
        count: u32,
        wr_id: u64,
    ) -> Result<(), crate::memory::registry::Refusal> {
        match target {
            PostTarget::Pd(pd) => {
                self.registry.check_domain(pd, client)?;
                let bufs = self.registry.buffers(pd, stag, offset, len, count, wr_id)?;
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
                self.registry.check_domain(pd, client)?;
                let bufs = self.registry.buffers(pd, stag, offset, len, count, wr_id)?;
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
}

/// Keeps the `max` flows of lowest id among the queues' reports (each lists its lowest ones,
/// by ascending id); returns the id of the last kept when any was left out.
fn keep_lowest_flows(queues: &mut [QueueReport], max: usize) -> Option<u64> {
    let mut ids: Vec<u64> = (queues.iter())
        .flat_map(|q| q.flows.iter().map(|f| f.flow_id))
        .collect();
    if ids.len() <= max {
        return None;
    }
    let (_, &mut last, _) = ids.select_nth_unstable(max - 1);
    for q in queues {
        q.flows.retain(|f| f.flow_id <= last);
    }
    Some(last)
}
