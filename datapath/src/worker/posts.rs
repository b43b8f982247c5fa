//! The worker's reading of the shared-memory post queues (`mpa_ctl_proto::ring::post`): every
//! turn, a bounded number of posts across all subscriptions' queues, taken in turn, each
//! posted on its flow or refused through the subscription's completion ring. A post for a flow this worker does
//! not own (it moved, or the consumer guessed the queue) goes to the control thread, which
//! passes it to the owner ([`Command::Post`](super::Command::Post)); nothing is lost.

#![forbid(unsafe_code)]

use super::{Notification, TxSink, Worker, WorkerError};
use crate::io::ring::FrameRing;
use mpa_ctl_proto::ring::post::WorkRequest;
use mpa_ctl_proto::{Completion, RefusalCode};
use mpa_stack::sender::PostError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Posts read per turn at most, from all queues together: consumers that keep their queues
/// full (however many) cannot hold the worker away from its frames for longer than this
/// many. Each queue is visited in turn for an equal share (at least one), and a turn that
/// spends the budget ends where the next one starts: a neighbour's refused posts cost its own
/// share, not the others' (docs/limits.md, "Posts").
pub(crate) const POSTS_PER_TURN: usize = 64;

/// Posts a worker may have handed to the control thread and not yet seen passed on: beyond,
/// a misrouted post is refused as busy (the channel stays bounded whatever a consumer does).
pub(crate) const MAX_FORWARDED: usize = 1024;

/// The worker's post reading state.
#[derive(Debug)]
pub(crate) struct PostInbox {
    /// Where one queue's posts are taken into (reused: no allocation once warm).
    batch: Vec<Result<WorkRequest, mpa_ctl_proto::ring::post::PostRefused>>,
    /// Posts forwarded to the control thread and not yet passed on.
    pub(crate) forwarding: Arc<AtomicUsize>,
    /// The subscription the next turn's reading starts at.
    next: usize,
    /// Posts refused for a fault of the poster's (not `Busy`), counted to tell a visit whose
    /// posts were all refused.
    poster_faults: u64,
}

impl Default for PostInbox {
    fn default() -> Self {
        PostInbox {
            batch: Vec::with_capacity(POSTS_PER_TURN),
            forwarding: Arc::default(),
            next: 0,
            poster_faults: 0,
        }
    }
}

/// Why `Worker::post` refused, as the consumer is told.
pub(crate) fn refusal_code(e: &WorkerError) -> RefusalCode {
    match e {
        WorkerError::NoFlow(_) => RefusalCode::UnknownFlow,
        WorkerError::Post { error, .. } => match error {
            PostError::UnknownRegion { .. } => RefusalCode::UnknownRegion,
            PostError::WrongDomain { .. } => RefusalCode::WrongDomain,
            PostError::OutOfBounds { .. } => RefusalCode::OutOfBounds,
            PostError::TooLong { .. }
            | PostError::ReadSize { .. }
            | PostError::NoReads
            | PostError::Gather => RefusalCode::Invalid,
            PostError::QueueFull(_) | PostError::SendBudget { .. } => RefusalCode::Busy,
            PostError::Closed => RefusalCode::Closed,
        },
        _ => RefusalCode::Invalid,
    }
}

impl<R: FrameRing> Worker<R> {
    /// Up to [`POSTS_PER_TURN`] posts from the subscriptions' post queues, each posted,
    /// forwarded or refused: rounds over the queues from where the last turn stopped, each
    /// queue taking an equal share per round, until the budget is spent or every queue is
    /// empty.
    pub(super) fn read_posts(&mut self) {
        let subs = self.completions.subscriptions();
        if subs == 0 {
            return;
        }
        let share = (POSTS_PER_TURN / subs).max(1);
        let start = self.posts.next % subs;
        let now = Instant::now();
        let mut left = POSTS_PER_TURN;
        let mut batch = std::mem::take(&mut self.posts.batch);
        'rounds: loop {
            let mut more = false;
            for k in 0..subs {
                if left == 0 {
                    // The next turn starts with the queue this one could not reach.
                    self.posts.next = (start + k) % subs;
                    break 'rounds;
                }
                let i = (start + k) % subs;
                if self.completions.posts_paused(i, now) {
                    continue;
                }
                let want = share.min(left);
                batch.clear();
                let Some((pd, sub)) = self.completions.take_posts(
                    i,
                    &mut batch,
                    want,
                    &mut self.stats.post_queues_corrupt,
                ) else {
                    continue;
                };
                let taken = batch.len();
                left -= taken;
                more |= taken == want;
                let faults = self.posts.poster_faults;
                self.handle_posts(pd, sub, &mut batch);
                if taken > 0 {
                    let all_refused = self.posts.poster_faults - faults == taken as u64;
                    self.completions.posts_refused(i, all_refused, now);
                }
            }
            if !more {
                break;
            }
        }
        self.posts.batch = batch;
    }

    /// The posts just taken from subscription `sub`'s queue (domain `pd`).
    fn handle_posts(
        &mut self,
        pd: u32,
        sub: u64,
        batch: &mut Vec<Result<WorkRequest, mpa_ctl_proto::ring::post::PostRefused>>,
    ) {
        for r in batch.drain(..) {
            self.stats.posts_shm += 1;
            match r {
                Ok(p) => self.post_from_queue(sub, pd, &p, false),
                Err(bad) => self.refuse_post(
                    sub,
                    Completion::post_refused(
                        bad.flow_id,
                        0,
                        bad.wr_id,
                        bad.count,
                        RefusalCode::Malformed,
                    ),
                ),
            }
        }
    }

    /// Posts `p` (read from subscription `sub` of domain `pd`) on its flow, or refuses it
    /// through that subscription's ring. A flow this worker does not own goes to the
    /// control thread unless `forwarded` (it came from there: the flow is gone).
    pub(crate) fn post_from_queue(&mut self, sub: u64, pd: u32, p: &WorkRequest, forwarded: bool) {
        let stag = p.sg_list.first().stag;
        let refused = |code| Completion::post_refused(p.flow_id, stag, p.wr_id, p.count, code);
        let flow_pd = match self.ids.get(&p.flow_id).copied() {
            Some(k) => self.flows.get_mut(&k).map(|f| f.pd()),
            None => None,
        };
        match flow_pd {
            None if forwarded => self.refuse_post(sub, refused(RefusalCode::UnknownFlow)),
            None => {
                if self.posts.forwarding.load(Ordering::Acquire) >= MAX_FORWARDED {
                    // Posts on connections this worker does not have, faster than they can be
                    // passed on: the poster's doing (flows move seldom).
                    self.posts.poster_faults += 1;
                    return self.refuse_post(sub, refused(RefusalCode::Busy));
                }
                self.posts.forwarding.fetch_add(1, Ordering::AcqRel);
                self.stats.posts_forwarded += 1;
                let _ = self.notify.send(Notification::Post {
                    queue: self.xsk.queue(),
                    sub,
                    pd,
                    post: *p,
                    forwarding: self.posts.forwarding.clone(),
                });
            }
            // A consumer posts only on the connections of its own domain.
            Some(f) if f != Some(pd) => self.refuse_post(sub, refused(RefusalCode::WrongDomain)),
            Some(_) => {
                if let Err(e) = self.post(p) {
                    tracing::debug!(flow = p.flow_id, wr_id = p.wr_id, %e, "post refused");
                    self.refuse_post(sub, refused(refusal_code(&e)));
                }
            }
        }
    }

    fn refuse_post(&mut self, sub: u64, c: Completion) {
        self.stats.posts_refused += 1;
        // Busy is the datapath's state (a full send queue), not the poster's fault.
        if !matches!(c.refusal(), Some((_, RefusalCode::Busy))) {
            self.posts.poster_faults += 1;
        }
        self.completions.refuse(sub, &c);
    }

    /// Before sleeping up to `timeout_ms`, the post queues' `waiting` flags: a consumer that
    /// posts meanwhile rings the doorbell, which ends the wait (ring::post). The timeout to
    /// use (0 when posts came) and whether the flags are to be cleared after the wait.
    pub(super) fn prepare_sleep(&mut self, timeout_ms: i32) -> (i32, bool) {
        let now = Instant::now();
        if timeout_ms > 0 && self.completions.prepare_post_sleep(now) {
            // Awake when a paused post queue's pause ends (rounded up to a millisecond).
            let timeout_ms = match self.completions.posts_pause_left(now) {
                Some(left) => timeout_ms.min(left.as_micros().div_ceil(1000).max(1) as i32),
                None => timeout_ms,
            };
            (timeout_ms, true)
        } else {
            (0, false)
        }
    }

    /// Queues the messages of `post` on its flow (all or none); the first Send's MSN.
    pub(crate) fn post(&mut self, post: &WorkRequest) -> Result<Option<u32>, WorkerError> {
        let id = post.flow_id;
        let key = *self.ids.get(&id).ok_or(WorkerError::NoFlow(id))?;
        let f = self.flows.get_mut(&key).ok_or(WorkerError::NoFlow(id))?;
        let first_msn = f
            .post(&self.regions, post)
            .map_err(|error| WorkerError::Post { flow: id, error })?;
        // Sent in this turn's TX pass, not at the flow's next segment or timer.
        self.tx_waiting.push(key);
        Ok(first_msn)
    }

    /// [`Worker::post`], and the flow's frames built and handed to the kernel at once (the
    /// flow is still visited at the next turn, which arms its timers).
    pub(crate) fn post_and_send(
        &mut self,
        post: &WorkRequest,
    ) -> Result<Result<Option<u32>, WorkerError>, R::Error> {
        let id = post.flow_id;
        let first_msn = match self.post(post) {
            Ok(m) => m,
            Err(e) => return Ok(Err(e)),
        };
        if let Some(f) = self.ids.get(&id).and_then(|k| self.flows.get_mut(k)) {
            let mut sink = TxSink::of_flow(&mut self.xsk, &mut self.tap, f.id);
            f.poll_frames(Instant::now(), &mut sink);
        }
        self.xsk.flush()?;
        Ok(Ok(first_msn))
    }
}
