//! Where a consumer's posts on each connection go: the domain and completion ring (the
//! worker) of the connection's latest completion. Only a hint — a post sent to another
//! worker's queue is passed on, slower but never lost — so the table forgets connections the
//! datapath says are gone and is bounded: a consumer that sees many short connections never
//! grows it without end.

use crate::{Completion, CompletionKind, RefusalCode};
use std::collections::HashMap;

/// At most this many connections are remembered; past it the table starts again empty
/// (every connection's next completion puts it back). The datapath steers at most 16 384
/// flows per interface, so the bound is only reached by a consumer of several datapaths or
/// one that never posts on most of its connections.
const MAX_REMEMBERED_FLOWS: usize = 1 << 16;

/// Per connection: the domain and ring of its latest completion.
#[derive(Debug, Default)]
pub(super) struct FlowRings {
    by_flow: HashMap<u64, (u32, u32)>,
}

impl FlowRings {
    /// Learns from completion `c`, read from ring `ring` of domain `pd`'s subscription.
    /// A refusal says where the connection is not (one may come through another domain's
    /// subscription, a post on a connection not of that domain), except that a connection
    /// unknown or closed is forgotten.
    pub(super) fn note(&mut self, pd: u32, ring: u32, c: &Completion) {
        if c.kind == CompletionKind::PostRefused {
            if matches!(
                c.refusal(),
                Some((_, RefusalCode::UnknownFlow | RefusalCode::Closed))
            ) {
                self.by_flow.remove(&c.flow_id);
            }
            return;
        }
        if self.by_flow.len() >= MAX_REMEMBERED_FLOWS && !self.by_flow.contains_key(&c.flow_id) {
            self.by_flow.clear();
        }
        self.by_flow.insert(c.flow_id, (pd, ring));
    }

    /// The domain and ring of `flow_id`'s latest completion.
    pub(super) fn get(&self, flow_id: u64) -> Option<(u32, u32)> {
        self.by_flow.get(&flow_id).copied()
    }

    /// Forgets every connection of domain `pd` (its subscription was replaced).
    pub(super) fn forget_domain(&mut self, pd: u32) {
        self.by_flow.retain(|_, (p, _)| *p != pd);
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

    fn placed(flow_id: u64) -> Completion {
        Completion {
            flow_id,
            kind: CompletionKind::WritePlaced,
            stag: 7,
            offset: 0,
            len: 64,
            msn: None,
            invalidate_stag: None,
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
            &Completion::post_refused(5, 7, 1, RefusalCode::WrongDomain),
        );
        t.note(2, 0, &Completion::post_refused(5, 7, 1, RefusalCode::Busy));
        assert_eq!(t.get(5), Some((1, 2)));
        t.note(
            1,
            2,
            &Completion::post_refused(5, 7, 1, RefusalCode::Closed),
        );
        assert_eq!(t.get(5), None);
        t.note(1, 1, &placed(6));
        t.note(
            1,
            1,
            &Completion::post_refused(6, 7, 1, RefusalCode::UnknownFlow),
        );
        assert_eq!(t.get(6), None);
        // A refusal of a connection never seen adds nothing.
        t.note(
            1,
            1,
            &Completion::post_refused(8, 7, 1, RefusalCode::Malformed),
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
}
