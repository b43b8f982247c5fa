//! The consumer's work requests on a flow: what each posted message's completion reports (its
//! `wr_id`, whether it is signaled), and the flush when the flow ends — every message posted
//! and not done, every Read outstanding or waiting and every receive buffer no Send used
//! completes with a failure status, as verbs flushes a queue pair in error
//! (docs/consumer.md, "Completions").

use super::*;
use mpa_ctl_proto::CompletionStatus;
use std::collections::VecDeque;

/// A consumer's message not yet completed: what its completion reports.
#[derive(Debug, Clone, Copy)]
pub(super) struct PostedWork {
    /// The sender's message id (Writes and Sends); 0 for Reads.
    pub(super) msg: u64,
    pub(super) wr_id: u64,
    pub(super) signaled: bool,
    /// The completion's kind when it succeeds.
    pub(super) kind: CompletionKind,
    pub(super) stag: u32,
    pub(super) offset: u64,
    pub(super) len: u64,
    pub(super) msn: Option<u32>,
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
}

impl PostedWork {
    fn completion(&self, flow_id: u64, status: CompletionStatus) -> Completion {
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
        if msg.is_some_and(|m| queue.front().is_some_and(|w| w.msg != m)) {
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

    /// The flow ended: every work request not done completes now with
    /// [`CompletionStatus::Flushed`], signaled or not, after the completions already due (in
    /// their order): Writes and Sends not acknowledged, then Reads not answered, then receive
    /// buffers no Send used (Send arrived, no MSN, their own length). A Write or Send
    /// completes when the peer's TCP acknowledged it, so the one a peer's Terminate names may
    /// have completed already: why the flow ended travels with its end, not in a status.
    /// Idempotent: a second call finds nothing.
    pub fn flush_work(&mut self) {
        let mut due = VecDeque::new();
        self.drain_due(|c| due.push_back(*c));
        let id = self.id;
        for w in self.work.sends.drain(..).chain(self.work.reads.drain(..)) {
            due.push_back(w.completion(id, CompletionStatus::Flushed));
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
        self.reads_waiting.clear();
        self.work.flushed.extend(due);
    }
}
