//! Faults the control thread watches for, at most once per turn of its loop and never per
//! packet: a worker thread that died (a panic), the XDP program detached from the
//! interface by someone else, and regions that lost pages to a consumer's hole.
//!
//! **A dead or stuck worker stops the datapath.** A worker publishes each turn of its loop;
//! one whose count has not moved for the deadline (`--worker-deadline-ms`, 10 s by default)
//! is stuck and handled like a dead one, its thread left behind.
//! **A dead worker stops the datapath.** Its flows are reported gone at once (`FlowGone`,
//! the reason naming the queue and the panic) and unsteered, then the whole datapath stops
//! and the process exits non-zero ([`Datapath::failure`](super::Datapath::failure)). Carrying
//! on with the other queues was rejected: the dead queue's AF_XDP socket is gone, and RSS
//! keeps hashing new connections to that queue, whose steered segments the XDP program then
//! drops (steered without XSK) — a datapath that silently black-holes a share of its future
//! connections is worse than one that stops and lets its supervisor restart it. With the
//! program attached through a BPF link the exit leaves the interface as it was.
//!
//! **A detached program ends the flows, not the datapath.** Once a second the control thread
//! asks the link whether it still holds the program on the interface. When it does not, the
//! flows are aborted (RST to each peer, `FlowGone` with [`XDP_DETACHED`]) and new adoptions
//! refused; the datapath keeps answering statistics, which show `xdp_detached`. Whoever
//! detached it did so on purpose: re-attaching behind their back would fight them.
//!
//! **A consumer's hole costs its own region, not the datapath.** A consumer that punches a
//! hole into a huge-page region while the pool is empty makes the next placement there fault;
//! the region's mapping is guarded (`mpa_shm`), so the page is replaced by the datapath's own
//! memory and counted. Each such region is named in a warning once, and
//! `registry.region_pages_lost` counts the pages (docs/limits.md, "A consumer's hole in a
//! huge-page region").

use super::{Command, Server};
use mpa_ctl_proto::Message;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the XDP attachment is checked: a detach is reported within this (plus one turn
/// of the control loop).
pub(super) const XDP_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The reason of the flows ended because the XDP program was detached, and of refused
/// adoptions afterwards.
pub(super) const XDP_DETACHED: &str = "the XDP steering program was detached from the interface";

/// Why the datapath stopped on its own, shared with [`super::Datapath`].
pub(super) type Failure = Arc<Mutex<Option<String>>>;

/// A worker's published loop count ([`crate::worker::Worker::with_heartbeat`]) and when the
/// control thread last saw it move.
pub(super) struct Heartbeat {
    beat: Arc<AtomicU64>,
    seen: u64,
    moved_at: Instant,
    stuck: bool,
}

impl Heartbeat {
    pub(super) fn new(beat: Arc<AtomicU64>) -> Self {
        Heartbeat {
            beat,
            seen: 0,
            moved_at: Instant::now(),
            stuck: false,
        }
    }
}

/// What the control thread knows of faults.
pub(super) struct Faults {
    /// The XDP program was found detached (reported once, then in every statistics).
    pub(super) xdp_detached: bool,
    next_xdp_check: Instant,
    /// Set when a worker died: the datapath stops and the process exits non-zero.
    pub(super) failure: Failure,
    /// One per worker, by queue.
    beats: Vec<Heartbeat>,
    /// A worker whose loop has not turned for this long is stuck.
    deadline: Duration,
}

impl Faults {
    pub(super) fn new(failure: Failure, beats: Vec<Heartbeat>, deadline: Duration) -> Self {
        Faults {
            xdp_detached: false,
            next_xdp_check: Instant::now() + XDP_CHECK_INTERVAL,
            failure,
            beats,
            deadline,
        }
    }

    /// Whether the worker of queue `q` was found stuck.
    pub(super) fn is_stuck(&self, q: usize) -> bool {
        self.beats.get(q).is_some_and(|b| b.stuck)
    }

    /// The failure that stopped the datapath, if one did.
    pub(super) fn failed(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }
}

impl Server {
    /// One look at the workers (a flag each) and, once a second, at the XDP attachment.
    pub(super) fn check_faults(&mut self, now: Instant) {
        self.check_workers();
        self.check_heartbeats(now);
        self.report_lost_pages();
        if now >= self.faults.next_xdp_check {
            self.faults.next_xdp_check = now + XDP_CHECK_INTERVAL;
            self.check_xdp();
        }
    }

    /// Names each region that lost pages to its consumer's hole, once.
    fn report_lost_pages(&mut self) {
        for (info, pages, page_size) in self.registry.newly_losing() {
            tracing::warn!(
                stag = info.stag,
                pd = info.pd,
                pages,
                page_size,
                "region: its consumer took pages away (a hole punched while the huge-page pool \
                 was empty); placement goes on into memory of the datapath's own there, which the \
                 consumer does not see"
            );
        }
    }

    /// A worker thread that ended while the datapath runs has failed (workers end only on
    /// Shutdown): its flows are reported gone and unsteered, and the datapath stops.
    fn check_workers(&mut self) {
        for q in 0..self.worker_handles.len() {
            if !self.worker_handles[q]
                .as_ref()
                .is_some_and(|h| h.is_finished())
            {
                continue;
            }
            let Some(h) = self.worker_handles[q].take() else {
                continue;
            };
            let why = match h.join() {
                Err(payload) => format!("panicked: {}", panic_message(payload.as_ref())),
                Ok(()) => "stopped unexpectedly".to_string(),
            };
            self.worker_failed(q, format!("worker of queue {q} {why}"));
        }
    }

    /// A worker whose loop has not turned within the deadline is stuck (a livelock, a
    /// blocking call, a deadlock): like a dead one, its flows are reported gone and
    /// unsteered and the datapath stops; its thread is left behind, not joined.
    fn check_heartbeats(&mut self, now: Instant) {
        for q in 0..self.faults.beats.len() {
            let b = &mut self.faults.beats[q];
            let seen = b.beat.load(std::sync::atomic::Ordering::Relaxed);
            if seen != b.seen {
                b.seen = seen;
                b.moved_at = now;
                continue;
            }
            let still = now.saturating_duration_since(b.moved_at);
            if b.stuck || still < self.faults.deadline || self.worker_handles[q].is_none() {
                continue;
            }
            b.stuck = true;
            let reason = format!(
                "worker of queue {q} stuck: its loop has not turned for {} ms",
                still.as_millis()
            );
            self.worker_failed(q, reason);
        }
    }

    /// The worker of queue `q` failed for `reason`: its flows are reported gone and
    /// unsteered, and the datapath stops.
    fn worker_failed(&mut self, q: usize, reason: String) {
        let flows: Vec<u64> = self
            .adopted
            .iter()
            .filter(|(_, a)| a.worker == Some(q))
            .map(|(&id, _)| id)
            .collect();
        tracing::error!(queue = q, flows = flows.len(), %reason,
            "worker failed: its flows are reported gone and the datapath stops");
        for flow_id in flows {
            self.end_flow(flow_id, &reason);
        }
        if let Ok(mut f) = self.faults.failure.lock() {
            f.get_or_insert(reason);
        }
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Reports a flow whose worker cannot report it (failed, or stopping because another
    /// failed) gone to its client, with `reason`, and unsteers it.
    pub(super) fn end_flow(&mut self, flow_id: u64, reason: &str) {
        let client = self.adopted.get(&flow_id).map(|a| a.client);
        self.forget(flow_id);
        if let Some(c) = client {
            let m = Message::FlowGone {
                flow_id,
                mpa_error: None,
                terminate: None,
                reason: reason.to_string(),
            };
            self.reply(c, m);
        }
    }

    /// Whether our program still sits on the interface (one bpf syscall on the link).
    fn check_xdp(&mut self) {
        if self.faults.xdp_detached {
            return;
        }
        match self.steering.is_attached() {
            Ok(true) => {}
            Ok(false) => {
                self.faults.xdp_detached = true;
                tracing::error!(
                    iface = ?self.steering.iface(),
                    flows = self.adopted.len(),
                    "the XDP steering program was detached by someone else: steered flows \
                     no longer reach the datapath; aborting them, refusing new ones"
                );
                // Their segments now go to the kernel, to frozen sockets that still process
                // input: end them cleanly (RST to each peer, FlowGone so that mpa-control
                // closes the frozen sockets) rather than leave them to hang.
                for w in &self.workers {
                    let _ = w.send(Command::AbortAll(XDP_DETACHED));
                }
            }
            Err(e) => tracing::warn!(%e, "XDP attachment check failed"),
        }
    }
}

/// The text a panic carried (`panic!("...")` gives a `&str` or a `String`).
pub(super) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}
