//! Posts through shared memory: a subscription's post queues (one per worker) and the
//! workers' doorbells, and the [`Consumer`] methods that write them.

use super::{Consumer, ConsumerError};
use mpa_ctl_proto::ring::post::{PostOp, PostProducer, PostQueueFile, WorkRequest};
use mpa_ctl_proto::ring::Waker;
use mpa_ctl_proto::Completion;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// One subscription's post queues and the doorbell of each queue's worker.
pub(super) struct PostQueues {
    file: Arc<PostQueueFile>,
    producers: Vec<PostProducer>,
    doorbells: Vec<Waker>,
}

impl PostQueues {
    /// Maps the post queue file (`queues` queues of `capacity` records) and keeps one
    /// doorbell per queue.
    pub(super) fn open(
        pd: u32,
        file: OwnedFd,
        doorbells: Vec<OwnedFd>,
        queues: u32,
        capacity: u32,
    ) -> Result<PostQueues, ConsumerError> {
        if doorbells.len() != queues as usize {
            return Err(ConsumerError::NoRing(pd));
        }
        let file = Arc::new(
            PostQueueFile::open(file, queues, capacity)
                .map_err(|err| ConsumerError::PostQueue { pd, err })?,
        );
        let producers = (0..queues)
            .filter_map(|q| PostProducer::new(file.clone(), q))
            .collect();
        Ok(PostQueues {
            file,
            producers,
            doorbells: doorbells.into_iter().map(Waker::from_fd).collect(),
        })
    }
}

impl Consumer {
    /// Remembers, for each completion of domain `pd` read from `out[start..]`, the ring it
    /// came from (`ring_tags`, in the same order): its connection's worker.
    pub(super) fn note_rings(&mut self, pd: u32, start: usize, out: &[Completion]) {
        for (c, &ring) in out[start.min(out.len())..].iter().zip(&self.ring_tags) {
            self.flow_rings.note(pd, ring, c);
        }
    }

    /// The post queue (worker) a post on `flow_id` goes to: the queue of its messages not yet
    /// completed, else the ring of the connection's latest completion, else queue 0 of the
    /// first subscription with post queues.
    pub fn post_queue_of(&self, flow_id: u64) -> Option<(u32, u32)> {
        if let Some((pd, ring)) = self.flow_rings.get(flow_id) {
            if self.subs.iter().any(|s| s.pd == pd && s.posts.is_some()) {
                return Some((pd, ring));
            }
        }
        self.subs
            .iter()
            .find(|s| s.posts.is_some())
            .map(|s| (s.pd, 0))
    }

    /// Posts `post` through the shared-memory queue of its connection's worker (see the
    /// module), in the subscription it was last seen in (a connection with no completion yet:
    /// the first subscription's queue 0; use [`Consumer::post_in`] to name the domain). No
    /// system call unless the worker sleeps. [`ConsumerError::PostQueueFull`]: nothing was
    /// written, post again once the worker has read. What the datapath refuses comes back as
    /// a [`mpa_ctl_proto::CompletionKind::PostRefused`] completion carrying `post.wr_id`.
    pub fn post(&mut self, post: &WorkRequest) -> Result<(), ConsumerError> {
        let (pd, queue) = self
            .post_queue_of(post.flow_id)
            .ok_or(ConsumerError::NoPostQueue(post.flow_id))?;
        self.post_to(pd, queue, post)
    }

    /// [`Consumer::post`] through the post queues of domain `pd`'s subscription (queue of the
    /// connection's latest completion, else queue 0).
    pub fn post_in(&mut self, pd: u32, post: &WorkRequest) -> Result<(), ConsumerError> {
        let queue = match self.flow_rings.get(post.flow_id) {
            Some((p, ring)) if p == pd => ring,
            _ => 0,
        };
        self.post_to(pd, queue, post)
    }

    /// [`Consumer::post`] into queue `queue` of domain `pd`'s subscription (a queue whose
    /// worker does not own the connection passes the post on: slower, never lost).
    pub fn post_to(
        &mut self,
        pd: u32,
        queue: u32,
        post: &WorkRequest,
    ) -> Result<(), ConsumerError> {
        let q = self
            .subs
            .iter_mut()
            .find(|s| s.pd == pd)
            .and_then(|s| s.posts.as_mut())
            .ok_or(ConsumerError::NoPostQueue(post.flow_id))?;
        let i = (queue as usize).min(q.producers.len().saturating_sub(1));
        let (Some(p), Some(bell)) = (q.producers.get_mut(i), q.doorbells.get(i)) else {
            return Err(ConsumerError::NoPostQueue(post.flow_id));
        };
        p.try_post(post)
            .map_err(|_| ConsumerError::PostQueueFull { queue: p.queue() })?;
        let queue = p.queue();
        if p.publish() {
            bell.wake();
        }
        self.flow_rings.posted(post.flow_id, pd, queue, post.count);
        Ok(())
    }

    /// [`Consumer::post_write`] through shared memory ([`Consumer::post`]): `count` RDMA
    /// Writes of `len` octets, write `i` from `offset + i·len` of region `stag` to the peer's
    /// `sink_stag` at `sink_to + i·len`; each completes as
    /// [`mpa_ctl_proto::CompletionKind::WriteSent`], a refusal carries `wr_id`.
    #[allow(clippy::too_many_arguments)]
    pub fn post_write_shm(
        &mut self,
        flow_id: u64,
        stag: u32,
        offset: u64,
        len: u64,
        count: u32,
        sink_stag: u32,
        sink_to: u64,
        wr_id: u64,
    ) -> Result<(), ConsumerError> {
        let op = PostOp::Write { sink_stag, sink_to };
        self.post(&WorkRequest {
            wr_id,
            ..super::work(flow_id, stag, offset, len, count, op)
        })
    }

    /// [`Consumer::post_send`] through shared memory ([`Consumer::post`]); each Send
    /// completes as [`mpa_ctl_proto::CompletionKind::SendSent`] (with its MSN).
    pub fn post_send_shm(
        &mut self,
        flow_id: u64,
        stag: u32,
        offset: u64,
        len: u64,
        count: u32,
        wr_id: u64,
    ) -> Result<(), ConsumerError> {
        let op = PostOp::Send;
        self.post(&WorkRequest {
            wr_id,
            ..super::work(flow_id, stag, offset, len, count, op)
        })
    }

    /// [`Consumer::post_read`] through shared memory ([`Consumer::post`]); each Read
    /// completes as [`mpa_ctl_proto::CompletionKind::ReadResponsePlaced`].
    #[allow(clippy::too_many_arguments)]
    pub fn post_read_shm(
        &mut self,
        flow_id: u64,
        stag: u32,
        offset: u64,
        len: u64,
        count: u32,
        src_stag: u32,
        src_to: u64,
        wr_id: u64,
    ) -> Result<(), ConsumerError> {
        let op = PostOp::Read { src_stag, src_to };
        self.post(&WorkRequest {
            wr_id,
            ..super::work(flow_id, stag, offset, len, count, op)
        })
    }

    /// The post queue file of domain `pd`'s subscription, if it has one (to inspect it; the
    /// workers read it).
    pub fn post_queue_file(&self, pd: u32) -> Option<&PostQueueFile> {
        self.subs
            .iter()
            .find(|s| s.pd == pd)
            .and_then(|s| s.posts.as_ref())
            .map(|q| &*q.file)
    }
}
