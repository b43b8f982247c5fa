//! Completion queues, shaped like verbs' CQs, over a domain's completion stream. The datapath
//! writes one stream per subscribed domain (a ring per worker); the consumer splits it: each
//! connection (queue pair) has a send CQ — its own Writes, Sends and Reads completing, and its
//! refused posts — and a receive CQ — what the peer placed or sent into its buffers, and its
//! flushed receive buffers. A connection's CQs are the ones bound to it
//! ([`Consumer::bind_cqs`]), else its domain's ([`Consumer::set_domain_cqs`]); a connection
//! with neither stays on the domain's stream ([`Consumer::poll_completions`]). The CQs of a
//! domain share its completion channel, the subscription's eventfd, as several verbs CQs may
//! share one `ibv_comp_channel` (docs/consumer.md, "Completion queues").
//!
//! Every queue is bounded: a CQ holds at most its capacity, the records of other CQs and of the
//! domain's stream met while polling one CQ wait in theirs; a record that finds its queue full
//! is lost and counted, and reported where it was lost, as a ring's losses are.

use super::{Consumer, ConsumerError};
use mpa_ctl_proto::{Completion, CompletionKind};
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// CQs per consumer at most.
pub const MAX_CQS: usize = 256;
/// Records one CQ holds at most (as a device's `max_cqe`).
pub const MAX_CQ_CAPACITY: u32 = 1 << 16;
/// Connections with CQs of their own at most (the datapath steers at most 16 384 flows per
/// interface).
pub const MAX_BOUND_CONNECTIONS: usize = 1 << 16;
/// Records of the domain's stream met while polling a CQ, waiting for
/// [`Consumer::poll_completions`], at most.
const MAX_UNROUTED: usize = 1 << 16;

/// One completion queue.
#[derive(Debug)]
struct Cq {
    id: u32,
    pd: u32,
    capacity: u32,
    records: VecDeque<Completion>,
    /// Records lost since the last report.
    lost: u64,
    /// Connections and domains it is bound to.
    users: usize,
}

/// A connection's CQs: (send, receive).
type Pair = (u32, u32);

/// The consumer's CQs and where each connection's completions go.
#[derive(Debug, Default)]
pub(super) struct Cqs {
    next_id: u32,
    cqs: Vec<Cq>,
    by_flow: HashMap<u64, Pair>,
    by_pd: HashMap<u32, Pair>,
    /// The domain stream's records met while polling a CQ, returned first by the next
    /// `poll_completions`.
    pub(super) unrouted: VecDeque<Completion>,
    /// The domain stream's records lost because `unrouted` was full, reported by the next
    /// `poll_completions` after the ones kept: (domain, records).
    pub(super) unrouted_lost: Option<(u32, u64)>,
}

/// Whether a completion belongs on its connection's send CQ: a request of its own completed
/// or refused. The rest — what the peer placed, Sends into its receive buffers (arrived or
/// flushed) — go on the receive CQ.
fn is_send_side(kind: CompletionKind) -> bool {
    matches!(
        kind,
        CompletionKind::WriteSent
            | CompletionKind::SendSent
            | CompletionKind::ReadResponsePlaced
            | CompletionKind::PostRefused
    )
}

impl Cqs {
    fn cq(&self, id: u32) -> Result<&Cq, ConsumerError> {
        self.cqs
            .iter()
            .find(|c| c.id == id)
            .ok_or(ConsumerError::UnknownCq(id))
    }

    /// The two CQs, checked to exist and to be of one domain: that domain.
    fn pair_pd(&self, (send, recv): Pair) -> Result<u32, ConsumerError> {
        let (s, r) = (self.cq(send)?.pd, self.cq(recv)?.pd);
        if s != r {
            return Err(ConsumerError::CqDomains { send, recv });
        }
        Ok(s)
    }

    fn use_pair(&mut self, p: Pair, delta: isize) {
        for id in [p.0, p.1] {
            if let Some(c) = self.cqs.iter_mut().find(|c| c.id == id) {
                c.users = c.users.saturating_add_signed(delta);
            }
        }
    }

    /// Takes `c` (read from domain `pd`'s stream) into its CQ; `false` when it has none.
    pub(super) fn route(&mut self, pd: u32, c: &Completion) -> bool {
        if self.cqs.is_empty() {
            return false;
        }
        let Some(&(send, recv)) = self.by_flow.get(&c.flow_id).or_else(|| self.by_pd.get(&pd))
        else {
            return false;
        };
        let id = if is_send_side(c.kind) { send } else { recv };
        match self.cqs.iter_mut().find(|q| q.id == id) {
            Some(q) if q.records.len() < q.capacity as usize => q.records.push_back(*c),
            Some(q) => q.lost += 1,
            None => return false,
        }
        true
    }

    /// Keeps a record of the domain's stream met while polling a CQ.
    fn keep_unrouted(&mut self, pd: u32, c: Completion) {
        if self.unrouted.len() < MAX_UNROUTED {
            self.unrouted.push_back(c);
        } else {
            let (_, lost) = self.unrouted_lost.get_or_insert((pd, 0));
            *lost += 1;
        }
    }

    /// Up to `max` of CQ `id`'s records into `out`; its loss once its records before the loss
    /// are taken.
    fn take(
        &mut self,
        id: u32,
        out: &mut Vec<Completion>,
        max: usize,
    ) -> Result<usize, ConsumerError> {
        let q = self
            .cqs
            .iter_mut()
            .find(|c| c.id == id)
            .ok_or(ConsumerError::UnknownCq(id))?;
        let n = q.records.len().min(max);
        out.extend(q.records.drain(..n));
        if n == 0 && q.lost > 0 {
            let lost = std::mem::take(&mut q.lost);
            return Err(ConsumerError::CqOverflow { cq: id, lost });
        }
        Ok(n)
    }
}

impl Consumer {
    /// Creates a completion queue of domain `pd` holding up to `capacity` records
    /// (`ibv_create_cq`); the domain must be subscribed. Its id, a handle of this consumer's.
    pub fn create_cq(&mut self, pd: u32, capacity: u32) -> Result<u32, ConsumerError> {
        if !self.subs.iter().any(|s| s.pd == pd) {
            return Err(ConsumerError::NotSubscribed(pd));
        }
        if capacity == 0 || capacity > MAX_CQ_CAPACITY {
            return Err(ConsumerError::CqCapacity(capacity));
        }
        if self.cqs.cqs.len() >= MAX_CQS {
            return Err(ConsumerError::TooManyCqs);
        }
        self.cqs.next_id = self.cqs.next_id.wrapping_add(1).max(1);
        let id = self.cqs.next_id;
        self.cqs.cqs.push(Cq {
            id,
            pd,
            capacity,
            records: VecDeque::new(),
            lost: 0,
            users: 0,
        });
        Ok(id)
    }

    /// Destroys CQ `cq` (`ibv_destroy_cq`): refused while a connection or domain uses it;
    /// records still in it are discarded.
    pub fn destroy_cq(&mut self, cq: u32) -> Result<(), ConsumerError> {
        if self.cqs.cq(cq)?.users > 0 {
            return Err(ConsumerError::CqBusy(cq));
        }
        self.cqs.cqs.retain(|c| c.id != cq);
        Ok(())
    }

    /// Connection `flow_id`'s completions go to `send_cq` (its own requests) and `recv_cq`
    /// (what arrives), two CQs of one domain, from the next record read on (the queue pair's
    /// `send_cq` and `recv_cq` of `ibv_create_qp`). Binding again replaces.
    pub fn bind_cqs(
        &mut self,
        flow_id: u64,
        send_cq: u32,
        recv_cq: u32,
    ) -> Result<(), ConsumerError> {
        let pair = (send_cq, recv_cq);
        self.cqs.pair_pd(pair)?;
        if !self.cqs.by_flow.contains_key(&flow_id)
            && self.cqs.by_flow.len() >= MAX_BOUND_CONNECTIONS
        {
            return Err(ConsumerError::TooManyBindings);
        }
        if let Some(old) = self.cqs.by_flow.insert(flow_id, pair) {
            self.cqs.use_pair(old, -1);
        }
        self.cqs.use_pair(pair, 1);
        Ok(())
    }

    /// Connection `flow_id` has no CQs of its own any more (its queue pair is destroyed): its
    /// records go to its domain's CQs, or its domain's stream.
    pub fn unbind_cqs(&mut self, flow_id: u64) {
        if let Some(old) = self.cqs.by_flow.remove(&flow_id) {
            self.cqs.use_pair(old, -1);
        }
    }

    /// Every connection of the CQs' domain without CQs of its own uses `send_cq` and
    /// `recv_cq`: set before connecting or listening, no record of a new connection reaches
    /// the domain's stream. Setting again replaces.
    pub fn set_domain_cqs(&mut self, send_cq: u32, recv_cq: u32) -> Result<(), ConsumerError> {
        let pair = (send_cq, recv_cq);
        let pd = self.cqs.pair_pd(pair)?;
        if let Some(old) = self.cqs.by_pd.insert(pd, pair) {
            self.cqs.use_pair(old, -1);
        }
        self.cqs.use_pair(pair, 1);
        Ok(())
    }

    /// Up to `max` of CQ `cq`'s completions into `out`, in order per connection, without
    /// waiting (`ibv_poll_cq`): what it holds, else what the rings hold now, routed (records of
    /// other CQs wait in theirs, those of the domain's stream for
    /// [`Consumer::poll_completions`]). [`ConsumerError::CqOverflow`] once, after the records
    /// before a loss; a ring's loss as [`Consumer::poll_completions`] reports it.
    pub fn poll_cq(
        &mut self,
        cq: u32,
        out: &mut Vec<Completion>,
        max: usize,
    ) -> Result<usize, ConsumerError> {
        let n = self.cqs.take(cq, out, max)?;
        if n > 0 {
            return Ok(n);
        }
        let pd = self.cqs.cq(cq)?.pd;
        let mut stream = std::mem::take(&mut self.stream_scratch);
        stream.clear();
        let r = self.read_rings(&mut stream);
        for c in stream.drain(..) {
            self.cqs.keep_unrouted(pd, c);
        }
        self.stream_scratch = stream;
        r?;
        self.cqs.take(cq, out, max)
    }

    /// [`Consumer::poll_cq`], waiting until `deadline` for a completion (sleeping on the
    /// domain's eventfd, or spinning with [`Consumer::set_busy_poll`]): 0 when none came.
    pub fn wait_cq(
        &mut self,
        cq: u32,
        out: &mut Vec<Completion>,
        max: usize,
        deadline: Instant,
    ) -> Result<usize, ConsumerError> {
        let mut spins = 0;
        loop {
            let n = self.poll_cq(cq, out, max)?;
            if n > 0 || !self.wait_for_records(deadline, &mut spins)? {
                return Ok(n);
            }
        }
    }

    /// The completion descriptor of CQ `cq`: its domain's channel (for epoll; arm with
    /// [`Consumer::arm`] of the domain).
    pub fn cq_fd(&self, cq: u32) -> Result<std::os::fd::BorrowedFd<'_>, ConsumerError> {
        let pd = self.cqs.cq(cq)?.pd;
        self.completion_fd(pd)
            .ok_or(ConsumerError::NotSubscribed(pd))
    }

    /// The domain of CQ `cq`.
    pub fn cq_domain(&self, cq: u32) -> Result<u32, ConsumerError> {
        Ok(self.cqs.cq(cq)?.pd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpa_ctl_proto::CompletionStatus;

    fn c(flow_id: u64, kind: CompletionKind, wr_id: u64) -> Completion {
        Completion {
            flow_id,
            kind,
            stag: 1,
            offset: 0,
            len: 1,
            msn: None,
            invalidate_stag: None,
            wr_id,
            status: CompletionStatus::Success,
        }
    }

    fn cqs(pairs: &[(u32, u32)]) -> Cqs {
        let mut q = Cqs::default();
        for &(id, pd) in pairs {
            q.cqs.push(Cq {
                id,
                pd,
                capacity: 2,
                records: VecDeque::new(),
                lost: 0,
                users: 0,
            });
        }
        q
    }

    #[test]
    fn a_connections_records_split_into_its_send_and_receive_cqs() {
        let mut q = cqs(&[(1, 7), (2, 7), (3, 7), (4, 7)]);
        q.by_flow.insert(10, (1, 2));
        q.by_pd.insert(7, (3, 4));
        // Bound: own requests on 1, what arrives on 2; the domain's others on 3 and 4; another
        // domain's on its stream.
        assert!(q.route(7, &c(10, CompletionKind::WriteSent, 1)));
        assert!(q.route(7, &c(10, CompletionKind::SendArrived, 2)));
        assert!(q.route(7, &c(10, CompletionKind::ReadResponsePlaced, 3)));
        assert!(q.route(7, &c(11, CompletionKind::WritePlaced, 4)));
        assert!(q.route(7, &c(11, CompletionKind::PostRefused, 5)));
        assert!(!q.route(8, &c(12, CompletionKind::WritePlaced, 6)));
        let ids = |q: &mut Cqs, id| {
            let mut out = Vec::new();
            q.take(id, &mut out, 10).unwrap();
            out.iter().map(|c| c.wr_id).collect::<Vec<_>>()
        };
        assert_eq!(ids(&mut q, 1), [1, 3]);
        assert_eq!(ids(&mut q, 2), [2]);
        assert_eq!(ids(&mut q, 3), [5]);
        assert_eq!(ids(&mut q, 4), [4]);
    }

    #[test]
    fn a_full_cq_counts_its_losses_and_reports_them_after_what_it_kept() {
        let mut q = cqs(&[(1, 7)]);
        q.by_pd.insert(7, (1, 1));
        for i in 0..5 {
            assert!(q.route(7, &c(10, CompletionKind::WriteSent, i)));
        }
        let mut out = Vec::new();
        assert_eq!(q.take(1, &mut out, 1).unwrap(), 1);
        assert_eq!(q.take(1, &mut out, 10).unwrap(), 1);
        assert!(matches!(
            q.take(1, &mut out, 10),
            Err(ConsumerError::CqOverflow { cq: 1, lost: 3 })
        ));
        assert_eq!(q.take(1, &mut out, 10).unwrap(), 0, "reported once");
        assert_eq!(out.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [0, 1]);
    }
}
