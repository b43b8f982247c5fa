//! The consumer's work requests on a flow: what each posted message's completion reports (its
//! `wr_id`, whether it is signaled), and the flush when the flow ends — every message posted
//! and not done, every Read outstanding or waiting and every receive buffer no Send used
//! completes with a failure status, as verbs flushes a queue pair in error: the request the
//! peer's Terminate names with the Terminate's status, the oldest with "retry exceeded" when
//! the connection gave up on a silent peer, the rest "flushed" (docs/consumer.md,
//! "Completions").

use super::*;
use mpa::wire::ddp::{queue, TerminateRepr, TerminatedSegment};
use mpa_ctl_proto::CompletionStatus;
use std::collections::VecDeque;

/// A consumer's message not yet completed: what its completion reports.
#[derive(Debug, Clone, Copy)]
pub(super) struct PostedWork {
    /// The sender's message id (Writes and Sends given to the sender); `None` for Reads and
    /// for what still waits ([`super::send::Waiting`]).
    pub(super) msg: Option<u64>,
    pub(super) wr_id: u64,
    pub(super) signaled: bool,
    /// The completion's kind when it succeeds.
    pub(super) kind: CompletionKind,
    pub(super) stag: u32,
    pub(super) offset: u64,
    pub(super) len: u64,
    pub(super) msn: Option<u32>,
    /// A Write's sink: the peer's STag and tagged offset.
    pub(super) sink: Option<(u32, u64)>,
    /// A Read's Read Request MSN (queue 1), once the request was sent.
    pub(super) read_msn: Option<u32>,
}

/// Which request a flow's end fails with a status of its own; every other one is flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WorkFailure {
    status: CompletionStatus,
    names: Named,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    /// The segment the peer's Terminate copied back: the request that sent it, if still
    /// outstanding (a Write or Send completes when TCP acknowledged it, which may have come
    /// before the Terminate).
    Segment(TerminatedSegment),
    /// The oldest request outstanding: the one the silent peer left waiting.
    Oldest,
    /// None: the Terminate named no segment of ours.
    Nothing,
}

impl WorkFailure {
    /// The peer's Terminate `t`, which named `segment`: RFC 5040 §7.2 and RFC 5041 §7.2's
    /// layers and error types, as verbs' statuses.
    pub(super) fn terminate(t: &TerminateRepr, segment: Option<TerminatedSegment>) -> Self {
        const RDMAP: u8 = 0;
        const DDP: u8 = 1;
        let status = match (t.layer, t.error_type) {
            // Remote protection error; tagged buffer error.
            (RDMAP, 1) | (DDP, 1) => CompletionStatus::RemoteAccess,
            // Untagged buffer error.
            (DDP, 2) => CompletionStatus::RemoteInvalidRequest,
            _ => CompletionStatus::RemoteOperation,
        };
        WorkFailure {
            status,
            names: segment.map_or(Named::Nothing, Named::Segment),
        }
    }

    /// Retransmissions, keepalives or zero-window probes ran out.
    pub(super) fn retry_exceeded() -> Self {
        WorkFailure {
            status: CompletionStatus::RetryExceeded,
            names: Named::Oldest,
        }
    }

    /// Whether it names `w`, the `oldest` request outstanding or not.
    fn names(&self, w: &PostedWork, oldest: bool) -> bool {
        match self.names {
            Named::Oldest => oldest,
            Named::Nothing => false,
            Named::Segment(TerminatedSegment::Tagged { stag, to }) => {
                w.kind == CompletionKind::WriteSent
                    && w.sink.is_some_and(|(s, first)| {
                        s == stag && to >= first && to - first < w.len.max(1)
                    })
            }
            Named::Segment(TerminatedSegment::Untagged { qn, msn }) => match qn {
                queue::SEND => w.kind == CompletionKind::SendSent && w.msn == Some(msn),
                queue::READ_REQUEST => {
                    w.kind == CompletionKind::ReadResponsePlaced && w.read_msn == Some(msn)
                }
                _ => false,
            },
        }
    }
}

/// The work requests of one flow, in the order they complete.
#[derive(Debug, Default)]
pub(super) struct Work {
    /// Writes and Sends posted, not yet acknowledged (acknowledged in order).
    pub(super) sends: VecDeque<PostedWork>,
    /// Reads posted (waiting or sent), not yet answered (answered in order).
    pub(super) reads: VecDeque<PostedWork>,
    /// Completions the end of the flow produced, not yet taken.
    pub(super) flushed: VecDeque<Completion>,
    /// What ended the flow makes of one request, if anything (the first cause wins).
    pub(super) failure: Option<WorkFailure>,
    /// Flushed: the queue pair is in error, as verbs' after a Terminate either way; what the
    /// sender still completes (the peer acknowledging octets of a request already flushed)
    /// reports nothing.
    pub(super) in_error: bool,
}

impl PostedWork {
    pub(super) fn completion(&self, flow_id: u64, status: CompletionStatus) -> Completion {
        Completion {
            flow_id,
            kind: self.kind,
            stag: self.stag,
            offset: self.offset,
            len: self.len,
            msn: self.msn,
            invalidate_stag: None,
            wr_id: self.wr_id,
            status,
        }
    }
}

impl Flow {
    /// Fills in a successful completion's work request from the posted work it completes
    /// (`msg`: the sender's id of a Write or Send); `false` when the completion is not to be
    /// reported (an unsignaled request).
    pub(super) fn complete_work(&mut self, c: &mut Completion, msg: Option<u64>) -> bool {
        let queue = match c.kind {
            CompletionKind::WriteSent | CompletionKind::SendSent => &mut self.work.sends,
            CompletionKind::ReadResponsePlaced => &mut self.work.reads,
            _ => return true,
        };
        // Messages complete in the order they were posted; a completion of no posted work
        // (none should come) is reported as it is.
        if msg.is_some_and(|m| queue.front().is_some_and(|w| w.msg != Some(m))) {
            tracing::debug!(flow = self.id, ?msg, "completion of no posted work request");
            return true;
        }
        match queue.pop_front() {
            Some(w) => {
                c.wr_id = w.wr_id;
                w.signaled
            }
            None => true,
        }
    }

    /// The flow ended: every work request not done completes now, signaled or not, after the
    /// completions already due (in their order): Writes and Sends not acknowledged, then
    /// Reads not answered, then receive buffers no Send used (Send arrived, no MSN, their own
    /// length). The one request the end names (the peer's Terminate's segment, or the oldest
    /// when the peer went silent) completes with that status, every other with
    /// [`CompletionStatus::Flushed`]. A Write or Send completes when the peer's TCP
    /// acknowledged it, so the one a peer's Terminate names may have completed already; why
    /// the flow ended travels with its end too. Idempotent: a second call finds nothing.
    pub fn flush_work(&mut self) {
        let mut due = VecDeque::new();
        self.drain_due(|c| due.push_back(*c));
        let id = self.id;
        let mut failure = self.work.failure.take();
        let mut oldest = true;
        for w in self.work.sends.drain(..).chain(self.work.reads.drain(..)) {
            let status = match failure {
                Some(f) if f.names(&w, oldest) => {
                    failure = None;
                    f.status
                }
                _ => CompletionStatus::Flushed,
            };
            oldest = false;
            due.push_back(w.completion(id, status));
        }
        for b in self.rx.take_posted() {
            due.push_back(Completion {
                flow_id: id,
                kind: CompletionKind::SendArrived,
                stag: b.stag,
                offset: b.offset,
                len: u64::from(b.len),
                msn: None,
                invalidate_stag: None,
                wr_id: b.wr_id,
                status: CompletionStatus::Flushed,
            });
        }
        self.waiting.clear();
        self.work.in_error = true;
        self.work.flushed.extend(due);
    }
}
