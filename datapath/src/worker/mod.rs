//! One polling worker per RX queue: it owns its frame ring and its flows; the control thread
//! talks to it over channels only (docs/architecture.md, fast-path rules). Generic over the
//! ring: AF_XDP in production, in memory for tests and the isolated pipeline benchmark.

#![forbid(unsafe_code)]

use crate::io::capture::CaptureTap;
use crate::io::ring::FrameRing;
use crate::memory::completions::Outbox;
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use mpa_ctl_proto::stats::QueueStats;
use mpa_ctl_proto::{CaptureDirection, HandOver};
use mpa_stack::flow::{Flow, FlowEnd, FrameSink};
use mpa_stack::flow_table::{FlowHasher, FlowTable};
use mpa_stack::receiver::RegionTable;
use mpa_stack::wire::frame::parse_tcp_frame;
use mpa_stack::wire::tcp::TcpRepr;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};
use strays::Strays;

mod burst;
mod config;
mod driver;
mod messages;
pub(crate) mod posts;
mod report;
pub mod strays;
use config::SPIN_POLLS;
pub use config::{WorkerConfig, DEFAULT_YIELD_EVERY};
pub use driver::{DriveError, PostOp, QueueDriver, SgList, Sge, WorkRequest};
pub use messages::{Command, Notification, WorkerError};

/// What one turn of a worker's loop did.
pub(crate) enum Turn<E> {
    /// Polled: the RX descriptors taken.
    Polled(usize),
    /// The frame ring failed.
    Failed(E),
    /// Told to stop (the datapath stops).
    Stop,
}

/// A flow's frames go straight into the ring's TX buffers, and to the capture when one
/// wants them.
struct TxSink<'a, R: FrameRing> {
    ring: &'a mut R,
    tap: Option<&'a mut CaptureTap>,
}

impl<'a, R: FrameRing> TxSink<'a, R> {
    /// The sink of flow `flow`'s frames: the ring, and the capture if it wants that flow.
    fn of_flow(ring: &'a mut R, tap: &'a mut Option<CaptureTap>, flow: u64) -> Self {
        TxSink {
            ring,
            tap: tap.as_mut().filter(|t| t.wants(flow)),
        }
    }
}

impl<R: FrameRing> FrameSink for TxSink<'_, R> {
    fn room(&mut self) -> usize {
        self.ring.tx_room()
    }

    fn frame_capacity(&self) -> usize {
        self.ring.tx_frame_capacity()
    }

    fn send_with(&mut self, build: impl FnOnce(&mut [u8]) -> usize) -> bool {
        let tap = &mut self.tap;
        self.ring.send_with(|buf| {
            let n = build(buf);
            if n > 0 {
                if let Some(t) = tap.as_mut() {
                    t.push(CaptureDirection::Tx, &buf[..n], false);
                }
            }
            n
        })
    }
}

/// A worker bound to one queue.
pub struct Worker<R: FrameRing> {
    xsk: R,
    regions: RegionTable,
    flows: FlowTable<Flow>,
    ids: HashMap<u64, (SocketAddr, SocketAddr), FlowHasher>,
    cfg: WorkerConfig,
    commands: Receiver<Command>,
    notify: Sender<Notification>,
    stats: QueueStats,
    /// Polls in a row that found nothing: past `spin_polls` the worker sleeps in poll().
    empty_polls: u32,
    /// Empty polls before it may sleep: [`SPIN_POLLS`], or none for a run-to-completion
    /// loop told to sleep when idle.
    spin_polls: u32,
    /// When the last frame came (the [`WorkerConfig::spin`] window starts there).
    last_frame_at: Instant,
    /// Flow timers: (deadline, flow id), earliest first. A flow has at most one live entry,
    /// the one equal to `armed[id]`; others are stale and skipped when popped. Checked once
    /// per poll, never per frame: only flows whose deadline passed are visited.
    timers: BinaryHeap<Reverse<(Instant, u64)>>,
    armed: HashMap<u64, Instant, FlowHasher>,
    /// Every entry in `timers`, so that a deadline already queued is never queued again:
    /// long timers (keepalive, FIN-WAIT-2) would otherwise gain a copy at every visit that a
    /// shorter one (delayed ACK) causes, and keep them for hours.
    queued: HashSet<(Instant, u64), FlowHasher>,
    /// Flows to visit this round (touched by a segment or a command, or a timer fired).
    due: Vec<(SocketAddr, SocketAddr)>,
    touched: Vec<(SocketAddr, SocketAddr)>,
    /// 4-tuples reported as stray, each with the frames that arrived before the flow came
    /// here (bounded in number, octets and time): they are replayed on hand-over or adoption
    /// instead of being lost, which would cost the peer a retransmission timeout.
    strays: Strays,
    /// Flows that ran out of TX frames with data to send, or had messages posted: visited at
    /// the next poll.
    tx_waiting: Vec<(SocketAddr, SocketAddr)>,
    /// With [`WorkerConfig::defer_tx_kick`]: flows whose pure ACK the last turn held for a
    /// post to carry; built at the next turn if none did (docs/latency.md, "When the ACKs
    /// leave").
    acks_held: Vec<(SocketAddr, SocketAddr)>,
    /// The packet capture, while one runs: `None` costs one branch per frame.
    tap: Option<CaptureTap>,
    /// The completion rings of subscribed domains.
    completions: Outbox,
    /// Reading the subscriptions' post queues.
    posts: posts::PostInbox,
    /// Test-only fault injection, in debug builds only ([`PANIC_AT_HANDOVER_ENV`]).
    #[cfg(debug_assertions)]
    panic_at_handover: Option<usize>,
    /// Test-only ([`HANG_AT_HANDOVER_ENV`]).
    #[cfg(debug_assertions)]
    hang_at_handover: Option<usize>,
    /// Turns of [`Worker::run`]'s loop, published for the control thread's watchdog
    /// (`server/faults.rs`): a worker whose count stops moving is stuck.
    heartbeat: Option<Arc<AtomicU64>>,
    turns: u64,
    /// The datapath's memory budget each flow draws from (`mpa_stack::budget`).
    budget: Option<Arc<mpa_stack::budget::MemoryBudget>>,
    /// Where a burst keeps a flow's in-order payloads until it decodes them together
    /// (`burst::Run`), emptied between bursts.
    run_buffers: Option<burst::RunBuffers<'static>>,
    /// Where chained frames the burst cannot take in pieces are gathered (`burst::BurstCx`).
    gather: Vec<u8>,
    /// Whether the parse takes each payload's CRC32c in the checksum's pass: whether the flow
    /// of the last frame matched checks CRCs (a frame usually follows one of its own flow; a
    /// wrong guess only costs time: a CRC not taken is computed by the receiver, one taken
    /// for a flow without CRCs goes unused).
    payload_crcs: bool,
}

/// Debug builds only (the system tests' binaries; release builds ignore it): a worker panics
/// when a hand-over reaches it while it owns this many flows, so that tests can check what a
/// worker failure does to its flows. Read once when the worker is made; acted on in the
/// hand-over command, never per packet.
pub const PANIC_AT_HANDOVER_ENV: &str = "MPA_DATAPATH_TEST_PANIC_AT_HANDOVER";

/// Debug builds only, like [`PANIC_AT_HANDOVER_ENV`]: the worker stops making progress (sleeps
/// for good) at such a hand-over, so that tests can check the watchdog.
pub const HANG_AT_HANDOVER_ENV: &str = "MPA_DATAPATH_TEST_HANG_AT_HANDOVER";

impl<R: FrameRing> Worker<R> {
    /// A worker for the frame ring `xsk`.
    pub fn new(
        xsk: R,
        cfg: WorkerConfig,
        commands: Receiver<Command>,
        notify: Sender<Notification>,
    ) -> Self {
        Worker {
            xsk,
            regions: RegionTable::with_streaming_from(cfg.streaming_stores.streaming_from()),
            flows: FlowTable::default(),
            ids: HashMap::default(),
            cfg,
            commands,
            notify,
            stats: QueueStats::default(),
            empty_polls: 0,
            spin_polls: SPIN_POLLS,
            last_frame_at: Instant::now(),
            timers: BinaryHeap::new(),
            armed: HashMap::default(),
            queued: HashSet::default(),
            due: Vec::with_capacity(256),
            touched: Vec::with_capacity(256),
            strays: Strays::default(),
            tx_waiting: Vec::new(),
            acks_held: Vec::new(),
            completions: Outbox::default(),
            posts: posts::PostInbox::default(),
            tap: None,
            #[cfg(debug_assertions)]
            panic_at_handover: std::env::var(PANIC_AT_HANDOVER_ENV)
                .ok()
                .and_then(|v| v.parse().ok()),
            #[cfg(debug_assertions)]
            hang_at_handover: std::env::var(HANG_AT_HANDOVER_ENV)
                .ok()
                .and_then(|v| v.parse().ok()),
            heartbeat: None,
            turns: 0,
            budget: None,
            run_buffers: Some(burst::RunBuffers::new()),
            gather: Vec::new(),
            payload_crcs: true,
        }
    }

    /// Every flow handed over from now on draws from `budget` (its fixed charge, and its
    /// out-of-order octets); a hand-over it has no room for is refused.
    pub fn with_budget(mut self, budget: Arc<mpa_stack::budget::MemoryBudget>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Publishes the turns of the run loop in `beat` (one relaxed store per turn, none per
    /// packet), for the control thread's watchdog.
    pub(crate) fn with_heartbeat(mut self, beat: Arc<AtomicU64>) -> Self {
        self.heartbeat = Some(beat);
        self
    }

    /// [`WorkerConfig::yield_every`] from now on.
    pub(crate) fn set_yield_every(&mut self, polls: u32) {
        self.cfg.yield_every = polls;
    }

    /// Run-to-completion: sleep in poll() once no frame came for `spin`, without spinning
    /// [`SPIN_POLLS`] empty polls first (the application's loop polls as often as it likes);
    /// `None`: never sleep.
    pub(crate) fn set_sleep_after(&mut self, spin: Option<Duration>) {
        self.cfg.spin = spin.unwrap_or(Duration::MAX);
        self.spin_polls = if spin.is_some() { 0 } else { SPIN_POLLS };
    }

    /// Polls until told to stop.
    pub(crate) fn run(mut self) {
        loop {
            let busy = match self.turn() {
                Turn::Stop => break,
                Turn::Polled(n) => n > 0,
                Turn::Failed(e) => {
                    tracing::error!(queue = self.xsk.queue(), %e, "worker I/O");
                    std::thread::sleep(Duration::from_millis(10));
                    false
                }
            };
            if !busy && self.flows.is_empty() {
                // Idle without flows: block on the control channel instead of spinning.
                match self.commands.recv_timeout(Duration::from_millis(5)) {
                    Ok(c) => {
                        if !self.command(c) {
                            break;
                        }
                    }
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
                }
            }
        }
        self.abort_all();
    }

    /// One turn of the loop: the heartbeat, the control thread's commands, one poll.
    pub(crate) fn turn(&mut self) -> Turn<R::Error> {
        self.turns += 1;
        if let Some(beat) = &self.heartbeat {
            beat.store(self.turns, std::sync::atomic::Ordering::Relaxed);
        }
        if !self.handle_commands() {
            return Turn::Stop;
        }
        match self.poll_once() {
            Ok(n) => Turn::Polled(n),
            Err(e) => Turn::Failed(e),
        }
    }

    /// Every flow aborted (RST to its peer): the worker stops.
    pub(crate) fn abort_all(&mut self) {
        for (_, f) in self.flows.iter_mut() {
            f.abort();
        }
    }

    fn handle_commands(&mut self) -> bool {
        loop {
            match self.commands.try_recv() {
                Ok(c) => {
                    if !self.command(c) {
                        return false;
                    }
                }
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
    }

    fn command(&mut self, c: Command) -> bool {
        // Whatever the command answers or hands on (a released flow's completions, a removed
        // region) comes after every octet placed so far.
        self.regions.settle_stores();
        match c {
            Command::AddRegion(r) => self.regions.insert(r),
            Command::RemoveRegion(stag) => {
                self.regions.remove(stag);
                for (_, f) in self.flows.iter_mut() {
                    f.forget_region(stag);
                }
            }
            Command::PostSend(post, answer) => {
                let _ = answer.send(self.post(&post));
            }
            Command::PostRecv(id, bufs, answer) => {
                let r = match self.ids.get(&id).and_then(|k| self.flows.get_mut(k)) {
                    Some(f) => f
                        .post_recv(&bufs)
                        .map_err(|error| WorkerError::PostRecv { flow: id, error }),
                    None => Err(WorkerError::NoFlow(id)),
                };
                let _ = answer.send(r);
            }
            Command::HandOver(h, shared, answer) => {
                #[cfg(debug_assertions)]
                if self.panic_at_handover == Some(self.flows.len()) {
                    panic!(
                        "fault injected by {PANIC_AT_HANDOVER_ENV} (hand-over with {} flows)",
                        self.flows.len()
                    );
                }
                #[cfg(debug_assertions)]
                if self.hang_at_handover == Some(self.flows.len()) {
                    tracing::warn!("fault injected by {HANG_AT_HANDOVER_ENV}: the worker hangs");
                    loop {
                        std::thread::sleep(Duration::from_secs(3600));
                    }
                }
                let key = flow_key(h.tcp.local, h.tcp.remote);
                let charge = self.budget.as_ref().map(|b| {
                    mpa_stack::budget::Charge::take(b, mpa_stack::budget::FLOW_CHARGE).ok_or(b)
                });
                let r = if self.flows.contains_key(&key) {
                    Err(WorkerError::DuplicateFlow)
                } else if let Some(Err(b)) = &charge {
                    let m = b.report();
                    Err(WorkerError::MemoryBudget {
                        used: m.used,
                        limit: m.limit,
                    })
                } else {
                    match Flow::new(
                        &h,
                        self.cfg.our_mac,
                        &self.cfg.tcp,
                        self.cfg.digest,
                        Instant::now(),
                        self.xsk.tx_frame_capacity(),
                    ) {
                        Ok(mut f) => {
                            if let Some(Ok(c)) = charge {
                                f.attach_budget(c);
                            }
                            if let Some(t) = self.tap.as_mut().filter(|t| t.wants(f.id)) {
                                capture_startup(t, &h, self.cfg.our_mac);
                            }
                            if let Some(q) = shared {
                                if let Err(e) = f.attach_shared_receive_queue(q) {
                                    tracing::warn!(flow = f.id, %e, "the domain's shared receive queue not attached");
                                }
                            }
                            self.replay_strays(&mut f, key, Instant::now());
                            self.ids.insert(f.id, key);
                            self.flows.insert(key, f);
                            self.touched.push(key);
                            Ok(())
                        }
                        Err(e) => Err(WorkerError::HandOver(e)),
                    }
                };
                let _ = answer.send(r);
            }
            Command::Finish(id) => {
                if let Some(&key) = self.ids.get(&id) {
                    if let Some(f) = self.flows.get_mut(&key) {
                        f.close_gracefully();
                        self.tx_waiting.push(key);
                    }
                }
            }
            Command::Close(id) => {
                if let Some(f) = self.ids.get(&id).and_then(|k| self.flows.get_mut(k)) {
                    f.abort();
                    if let Some(k) = self.ids.get(&id) {
                        self.touched.push(*k);
                    }
                }
            }
            Command::AbortAll(reason) => {
                for (key, f) in self.flows.iter_mut() {
                    f.abort_because(reason);
                    self.touched.push(*key);
                }
            }
            Command::Stats { after, max, answer } => {
                let _ = answer.send(self.report_page(after, max));
            }
            Command::StartCapture(spec) => {
                tracing::debug!(
                    queue = self.xsk.queue(),
                    generation = spec.generation,
                    "capture on"
                );
                self.tap = Some(CaptureTap::new(spec));
            }
            Command::StopCapture(answer) => {
                self.flush_capture(None);
                let dropped = self.tap.take().map_or(0, |t| t.dropped());
                let _ = answer.send(dropped);
            }
            Command::Release(id, answer) => {
                // Its completions so far are published here first, and the mark says where
                // they end: the new worker's records of it wait behind a marker until the
                // consumer has read this ring that far.
                self.armed.remove(&id);
                let flow = self
                    .ids
                    .remove(&id)
                    .and_then(|k| self.flows.remove(&k))
                    .map(|f| {
                        let mark = self.completions.leave(f.id, f.pd());
                        (Box::new(f), mark)
                    });
                let _ = answer.send(flow);
            }
            Command::Adopt(flow, key, mark) => {
                let key = flow_key(key.0, key.1);
                self.ids.insert(flow.id, key);
                self.completions.arrive(flow.id, mark);
                let mut flow = *flow;
                self.replay_strays(&mut flow, key, Instant::now());
                self.flows.insert(key, flow);
                self.touched.push(key);
            }
            Command::Subscribe(sub) => self.completions.subscribe(*sub),
            Command::Post { sub, pd, post } => self.post_from_queue(sub, pd, &post, true),
            Command::Unsubscribe { pd, id } => self.completions.unsubscribe(pd, id),
            Command::Shutdown => return false,
        }
        true
    }

    /// The post queues, one RX burst, timers, TX. Returns the RX descriptors taken (frames,
    /// or parts of multi-buffer frames). `Worker::run` calls it in a loop; in-memory tests
    /// and benchmarks call it directly.
    pub fn poll_once(&mut self) -> Result<usize, R::Error> {
        self.poll_once_at(Instant::now())
    }

    /// [`Worker::poll_once`] at `now` (virtual time for tests).
    pub fn poll_once_at(&mut self, now: Instant) -> Result<usize, R::Error> {
        // Posts first: their flows are then served in this pass, and the wait below is not
        // taken while they wait.
        self.read_posts();
        let queue = self.xsk.queue();
        // Spin while traffic flows; once idle, sleep in poll() until a frame or the next timer.
        let spinning = self.empty_polls < self.spin_polls
            || now.saturating_duration_since(self.last_frame_at) < self.cfg.spin;
        // Flows with frames to send (posted messages, a TX ring that was full) must not wait
        // for the poll() below: they are served in this pass.
        let timeout_ms = if spinning || !self.tx_waiting.is_empty() {
            0
        } else {
            let next = self.timers.peek().map(|Reverse((t, _))| *t);
            next.map_or(10, |t| {
                // poll() counts milliseconds: a deadline closer than one (a paced flow's next
                // segment, µs away) is polled for, not slept past by a whole millisecond.
                let left = t.saturating_duration_since(now);
                if left < Duration::from_millis(1) {
                    0
                } else {
                    left.as_millis().clamp(1, 10) as i32
                }
            })
        };
        let (timeout_ms, slept) = self.prepare_sleep(timeout_ms);
        if !self.acks_held.is_empty() {
            self.send_held_acks(now);
        }
        let Worker {
            xsk,
            flows,
            touched,
            stats,
            cfg,
            strays,
            notify,
            regions,
            tap,
            run_buffers,
            gather,
            payload_crcs,
            ..
        } = self;
        if let Some(t) = tap.as_mut() {
            t.begin_poll();
        }
        if cfg.defer_tx_kick {
            // The previous turn's frames (ACKs) leave now, before this turn's burst.
            xsk.flush()?;
        }
        strays.expire(now);
        let mut cx = burst::BurstCx {
            flows,
            touched,
            stats,
            verify_checksums: cfg.verify_checksums,
            strays,
            notify,
            regions,
            tap: tap.as_mut(),
            queue,
            now,
            repr: TcpRepr::default(),
            gather,
            chains_in_pieces: cfg.chains_in_pieces,
            payload_crcs,
        };
        let bufs = run_buffers.take().unwrap_or_else(burst::RunBuffers::new);
        let n = xsk
            .rx_burst_frames(timeout_ms, |frames| {
                let mut run = burst::Run::new(bufs.reuse());
                cx.receive(frames, &mut run);
                run.into_buffers().reuse()
            })
            .map(|(n, bufs)| {
                *run_buffers = Some(bufs);
                n
            });
        if slept {
            // Woken (by a frame, a command, the doorbell or the timeout): posts that came
            // meanwhile are served in this pass, not the next.
            self.completions.finish_post_sleep();
            self.read_posts();
        }
        let n = n?;
        if n > 0 {
            self.stats.bursts += 1;
            self.empty_polls = 0;
            self.last_frame_at = now;
        } else {
            self.empty_polls = self.empty_polls.saturating_add(1);
            let every = self.cfg.yield_every;
            if !slept && every > 0 && self.empty_polls.is_multiple_of(every) {
                self.stats.spin_yields += 1;
                std::thread::yield_now();
            }
        }
        // ACK policy: one ACK per flow per burst (the TCP asks for more when it must).
        // Only flows with something to do are visited: touched ones and due timers, so an
        // idle flow costs nothing per poll.
        self.due.clear();
        for key in self.touched.drain(..) {
            if let Some(f) = self.flows.get_mut(&key) {
                f.end_of_burst(now);
                self.due.push(key);
            }
        }
        while let Some(Reverse((t, id))) = self.timers.peek().copied() {
            if t > now {
                break;
            }
            self.timers.pop();
            self.queued.remove(&(t, id));
            if self.armed.get(&id) == Some(&t) {
                self.armed.remove(&id);
                if let Some(k) = self.ids.get(&id) {
                    self.due.push(*k);
                }
            }
        }
        self.due.append(&mut self.tx_waiting);
        self.due.sort_unstable();
        self.due.dedup();
        let mut gone = Vec::new();
        let Worker {
            xsk,
            flows,
            tx_waiting,
            due,
            timers,
            armed,
            queued,
            tap,
            completions,
            acks_held,
            cfg,
            ..
        } = self;
        let hold_acks = cfg.defer_tx_kick;
        for key in due.iter() {
            let Some(f) = flows.get_mut(key) else {
                continue;
            };
            if f.has_completions() {
                completions.deliver(f);
            }
            f.on_timer(now);
            let mut sink = TxSink::of_flow(xsk, tap, f.id);
            // Twice: events seen at the end of the first pass (the peer's FIN, an error) queue
            // our FIN or a Terminate, which must leave now, not at the flow's next visit.
            // Run-to-completion holds the pure ACK of in-order data: the application's reply,
            // posted before the next turn, carries it.
            let mut ack_owed = false;
            for _ in 0..2 {
                if hold_acks {
                    ack_owed = f.poll_frames_holding_ack(now, &mut sink);
                } else {
                    f.poll_frames(now, &mut sink);
                }
            }
            if ack_owed {
                acks_held.push(*key);
            }
            if f.wants_to_send() && sink.ring.tx_room() == 0 {
                // Out of TX frames with data the window allows: back at the next poll.
                tx_waiting.push(*key);
            }
            if f.ended().is_some() {
                gone.push(*key);
            } else if let Some(t) = f.next_timeout() {
                // Keep the earliest deadline armed; a later one is re-armed when this fires
                // (an early visit is harmless: on_timer checks the flow's own deadline).
                if armed.get(&f.id).is_none_or(|&a| t < a) {
                    armed.insert(f.id, t);
                    if queued.insert((t, f.id)) {
                        timers.push(Reverse((t, f.id)));
                    }
                }
            }
        }
        self.compact_timers();
        // A flow that ended completes every work request it still holds (flushed, docs/
        // consumer.md "Completions") before its end is reported.
        for key in &gone {
            if let Some(f) = self.flows.get_mut(key) {
                f.flush_work();
                self.completions.deliver(f);
            }
        }
        // Each ring written in this burst is published once (and its consumer woken if it
        // sleeps), before any flow is reported gone, and before the TX kick: in copy mode
        // (veth) `sendto` carries our ACKs through the peer's stack inside the call, which
        // the consumer's wake-up need not wait for (the kernel, too, wakes a reader before it
        // sends the ACK). Octets placed with streaming stores are settled first: a consumer
        // reads them as soon as it sees the ring's index.
        self.regions.settle_stores();
        self.completions.publish();
        if !self.cfg.defer_tx_kick {
            self.xsk.flush()?;
        }
        if self.tap.is_some() {
            self.flush_capture(Some(now));
        }
        for key in gone {
            if let Some(f) = self.flows.remove(&key) {
                self.strays.take(&key);
                self.completions.gone(f.id);
                self.ids.remove(&f.id);
                self.armed.remove(&f.id);
                let end = f.ended().cloned().unwrap_or(FlowEnd {
                    mpa_error: None,
                    terminate: None,
                    reason: "closed".into(),
                });
                tracing::info!(flow = f.id, ?end, "flow ended");
                let _ = self.notify.send(Notification::FlowGone {
                    flow_id: f.id,
                    local: key.0,
                    remote: key.1,
                    end,
                    stats: Box::new(f.report()),
                });
            }
        }
        Ok(n)
    }

    /// Builds the pure ACKs the last turn held that no post carried since.
    fn send_held_acks(&mut self, now: Instant) {
        for key in self.acks_held.drain(..) {
            let Some(f) = self.flows.get_mut(&key) else {
                continue;
            };
            let mut sink = TxSink::of_flow(&mut self.xsk, &mut self.tap, f.id);
            f.poll_frames(now, &mut sink);
            if f.wants_to_send() && sink.ring.tx_room() == 0 {
                self.tx_waiting.push(key);
            }
        }
    }

    /// Entries of flows that ended or moved, and deadlines that moved earlier, stay in the
    /// heap until due (hours for a keepalive): when they outnumber the live ones, the heap is
    /// rebuilt from `armed`, so its size stays proportional to the flows (amortized O(1) per
    /// push).
    fn compact_timers(&mut self) {
        if self.timers.len() <= 2 * self.armed.len() + 1024 {
            return;
        }
        self.timers = self
            .armed
            .iter()
            .map(|(&id, &t)| Reverse((t, id)))
            .collect();
        self.queued = self.armed.iter().map(|(&id, &t)| (t, id)).collect();
    }

    /// Entries in the timer heap (live and stale).
    pub fn timer_entries(&self) -> usize {
        self.timers.len()
    }

    /// Stray 4-tuples held and the octets of their frames.
    pub fn strays(&self) -> (usize, usize) {
        (self.strays.len(), self.strays.bytes())
    }

    /// A flow for `key` arrived here: the frames held for it go into it, in arrival order.
    fn replay_strays(&mut self, flow: &mut Flow, key: (SocketAddr, SocketAddr), now: Instant) {
        for frame in self.strays.take(&key) {
            if let Ok(f) = parse_tcp_frame(&frame, self.cfg.verify_checksums) {
                if !flow.vlan_matches(f.vlan) {
                    self.stats.wrong_vlan += 1;
                    continue;
                }
                if let Ok(repr) = TcpRepr::parse(&f.tcp) {
                    flow.on_segment(now, &repr, f.tcp.payload(), &mut self.regions);
                }
            }
        }
    }

    /// Applies one command as if the control thread had sent it (in-memory drivers); `false`
    /// after `Shutdown`.
    pub fn apply(&mut self, c: Command) -> bool {
        self.command(c)
    }

    /// Hands captured frames to the control thread: at the end of a poll (`Some(now)`) those
    /// that are due, at the end of the capture (`None`) all.
    fn flush_capture(&mut self, poll: Option<Instant>) {
        let Some(t) = self.tap.as_mut() else {
            return;
        };
        let (queue, generation) = (self.xsk.queue(), t.generation());
        let notify = &self.notify;
        let send = |batch| {
            let _ = notify.send(Notification::Captured {
                queue,
                generation,
                batch,
            });
        };
        match poll {
            Some(now) => t.due_batches(now).for_each(send),
            None => t.all_batches().for_each(send),
        }
    }
}

/// The key of a flow's 4-tuple as its frames carry it: a dual-stack socket reports an IPv4
/// peer as IPv4-mapped IPv6 addresses, its frames are IPv4.
fn flow_key(local: SocketAddr, remote: SocketAddr) -> (SocketAddr, SocketAddr) {
    let c = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
    (c(local), c(remote))
}

/// Captures the MPA startup frames the kernel carried before the hand-over (rebuilt from
/// it; marked as reconstructed), so that the capture shows the connection from its start.
fn capture_startup(tap: &mut CaptureTap, h: &HandOver, our_mac: [u8; 6]) {
    match crate::io::capture::startup_frames(h, our_mac) {
        Ok(frames) => {
            for (direction, frame) in frames {
                tap.push(direction, &frame, true);
            }
        }
        Err(e) => {
            tracing::warn!(flow = h.flow_id, %e, "startup frames not rebuilt for the capture")
        }
    }
}
