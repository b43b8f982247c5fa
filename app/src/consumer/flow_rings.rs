//! Where a consumer's posts on each connection go. Normally the domain and completion ring (the
//! worker) of the connection's latest completion: a post sent to another worker's queue is
//! passed on, slower but never lost. But while messages posted through one queue have not all
//! completed, later posts on the connection go through that same queue: a post that queue's
//! worker passed on is still on its way to the owner, and one written straight into the
//! owner's queue could overtake it (docs/consumer.md, "Through shared memory"). The table
//! forgets connections the datapath says are gone and is bounded: a consumer that sees many
//! short connections never grows it without end.

use mpa_ctl_proto::{Completion, CompletionKind, RefusalCode};
use std::collections::HashMap;

/// At most this many connections are remembered; past it the table starts again empty
/// (every connection's next completion puts it back). The datapath steers at most 16 384
/// flows per interface, so the bound is only reached by a consumer of several datapaths or
/// one that never posts on most of its connections.
const MAX_REMEMBERED_FLOWS: usize = 1 << 16;

/// What is known of one connection.
#[derive(Debug, Default, Clone, Copy)]
struct Route {
    /// The domain and ring of its latest completion.
    completed: Option<(u32, u32)>,
    /// The domain and queue its outstanding messages were posted through.
    posted: Option<(u32, u32)>,
    /// Messages posted and not yet completed (sent and acknowledged, placed, or refused).
    outstanding: u64,
}

/// Per connection: where its posts go.
#[derive(Debug, Default)]
pub(super) struct FlowRings {
    by_flow: HashMap<u64, Route>,
}

impl FlowRings {
    /// Learns from completion `c`, read from ring `ring` of domain `pd`'s subscription.
    /// A refusal says where the connection is not (one may come through another domain's
    /// subscription, a post on a connection not of that domain), except that a connection
    /// unknown or closed is forgotten; it completes the refused post's messages.
    pub(super) fn note(&mut self, pd: u32, ring: u32, c: &Completion) {
        let done = c.posted_messages();
        if c.kind == CompletionKind::PostRefused {
            if matches!(
                c.refusal(),
                Some((_, RefusalCode::UnknownFlow | RefusalCode::Closed))
            ) {
                self.by_flow.remove(&c.flow_id);
            } else if let Some(r) = self.by_flow.get_mut(&c.flow_id) {
                r.outstanding = r.outstanding.saturating_sub(done);
            }
            return;
        }
        let r = self.entry(c.flow_id);
        r.completed = Some((pd, ring));
        r.outstanding = r.outstanding.saturating_sub(done);
    }

    /// `count` messages on `flow_id` were posted through queue `queue` of domain `pd`.
    pub(super) fn posted(&mut self, flow_id: u64, pd: u32, queue: u32, count: u32) {
        let r = self.entry(flow_id);
        if r.outstanding == 0 {
            r.posted = Some((pd, queue));
        }
        r.outstanding = r.outstanding.saturating_add(u64::from(count));
    }

    /// Where the next post on `flow_id` goes: the queue its outstanding messages went
    /// through, else the ring of its latest completion.
    pub(super) fn get(&self, flow_id: u64) -> Option<(u32, u32)> {
        let r = self.by_flow.get(&flow_id)?;
        match r.posted {
            Some(q) if r.outstanding > 0 => Some(q),
            _ => r.completed,
        }
    }

    /// Forgets every connection of domain `pd` (its subscription was replaced).
    pub(super) fn forget_domain(&mut self, pd: u32) {
        self.by_flow.retain(|_, r| {
            let of_pd = |x: Option<(u32, u32)>| x.is_some_and(|(p, _)| p == pd);
            !of_pd(r.completed) && !of_pd(r.posted)
        });
    }

    /// The connection's entry, made if new (the bound checked only then).
    fn entry(&mut self, flow_id: u64) -> &mut Route {
        if self.by_flow.len() >= MAX_REMEMBERED_FLOWS && !self.by_flow.contains_key(&flow_id) {
            self.by_flow.clear();
        }
        self.by_flow.entry(flow_id).or_default()
    }

    /// How many connections are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_flow.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpa_ctl_proto::CompletionStatus;

    fn placed(flow_id: u64) -> Completion {
        Completion {
            flow_id,
            kind: CompletionKind::WritePlaced,
            stag: 7,
            offset: 0,
            len: 64,
            msn: None,
            invalidate_stag: None,
            wr_id: 0,
            status: CompletionStatus::Success,
        }
    }

    #[test]
    fn the_latest_completion_names_the_ring() {
        let mut t = FlowRings::default();
        t.note(1, 0, &placed(9));
        assert_eq!(t.get(9), Some((1, 0)));
        t.note(1, 3, &placed(9));
        assert_eq!(t.get(9), Some((1, 3)));
        assert_eq!(t.get(10), None);
    }

    #[test]
    fn a_refusal_moves_nothing_but_unknown_and_closed_flows_are_forgotten() {
        let mut t = FlowRings::default();
        t.note(1, 2, &placed(5));
        t.note(
            2,
            0,
            &Completion::post_refused(5, 7, 1, 1, RefusalCode::WrongDomain),
        );
        t.note(
            2,
            0,
            &Completion::post_refused(5, 7, 1, 1, RefusalCode::Busy),
        );
        assert_eq!(t.get(5), Some((1, 2)));
        t.note(
            1,
            2,
            &Completion::post_refused(5, 7, 1, 1, RefusalCode::Closed),
        );
        assert_eq!(t.get(5), None);
        t.note(1, 1, &placed(6));
        t.note(
            1,
            1,
            &Completion::post_refused(6, 7, 1, 1, RefusalCode::UnknownFlow),
        );
        assert_eq!(t.get(6), None);
        // A refusal of a connection never seen adds nothing.
        t.note(
            1,
            1,
            &Completion::post_refused(8, 7, 1, 1, RefusalCode::Malformed),
        );
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn the_table_is_bounded() {
        let mut t = FlowRings::default();
        for f in 0..MAX_REMEMBERED_FLOWS as u64 {
            t.note(1, 0, &placed(f));
        }
        assert_eq!(t.len(), MAX_REMEMBERED_FLOWS);
        // A known connection updates in place.
        t.note(1, 1, &placed(0));
        assert_eq!(t.len(), MAX_REMEMBERED_FLOWS);
        // One more starts again with only it.
        t.note(1, 1, &placed(u64::MAX));
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(u64::MAX), Some((1, 1)));
    }

    #[test]
    fn a_replaced_subscription_forgets_its_connections() {
        let mut t = FlowRings::default();
        t.note(1, 0, &placed(1));
        t.note(2, 0, &placed(2));
        t.forget_domain(1);
        assert_eq!((t.get(1), t.get(2)), (None, Some((2, 0))));
    }

    fn sent(flow_id: u64) -> Completion {
        Completion {
            kind: CompletionKind::WriteSent,
            ..placed(flow_id)
        }
    }

    #[test]
    fn posts_stay_on_their_queue_until_its_messages_complete() {
        let mut t = FlowRings::default();
        // Posted through queue 0 (no completion yet): 3 messages, then 1 more.
        t.posted(4, 1, 0, 3);
        assert_eq!(t.get(4), Some((1, 0)));
        // The owner's first completion (data from the peer) names ring 2, but queue 0 still
        // holds messages that worker passed on: later posts follow them there.
        t.note(1, 2, &placed(4));
        assert_eq!(t.get(4), Some((1, 0)));
        t.posted(4, 1, 0, 1);
        t.note(1, 2, &sent(4));
        t.note(1, 2, &sent(4));
        t.note(1, 2, &sent(4));
        assert_eq!(t.get(4), Some((1, 0)), "one message still on its way");
        t.note(1, 2, &sent(4));
        // All completed: now straight to the owner's queue.
        assert_eq!(t.get(4), Some((1, 2)));
        t.posted(4, 1, 2, 2);
        // A refused post completes its messages too.
        t.note(
            1,
            2,
            &Completion::post_refused(4, 7, 9, 2, RefusalCode::Busy),
        );
        t.note(1, 3, &placed(4));
        assert_eq!(t.get(4), Some((1, 3)));
    }

    #[test]
    fn a_replaced_subscription_forgets_connections_posted_through_it() {
        let mut t = FlowRings::default();
        t.posted(1, 7, 0, 1);
        t.note(2, 0, &placed(1));
        t.forget_domain(7);
        assert_eq!(t.get(1), None);
    }
}
