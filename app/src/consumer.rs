//! The consumer API: what an application that owns registered memory uses. It creates
//! regions over the datapath's control socket, maps their memory (the descriptor arrives
//! with SCM_RIGHTS), posts receive buffers for Sends, and reads completions, in order per
//! connection.
//!
//! Completions come through shared memory: at [`Consumer::subscribe`] the datapath passes a
//! sealed memfd of completion rings (one per worker, [`mpa_ctl_proto::ring`]) and an eventfd; the
//! consumer maps the rings and reads them without any system call while records are there.
//! When none are, [`Consumer::next_completions`] sleeps on the eventfd (after setting each
//! ring's `waiting` flag, which is the only time a worker makes the system call that wakes
//! it), or, with [`Consumer::set_busy_poll`], spins on the rings until its deadline (lowest
//! latency, a core's worth of CPU).
//!
//! A consumer that falls behind never stalls a worker: records that do not fit its ring are
//! lost and counted (in the ring and in the datapath's `completions_overflow` per queue), and
//! [`Consumer::next_completions`] reports them as [`ConsumerError::Overflow`] at the place in
//! the stream where they were lost — after returning every record that came before them —
//! once; the next call goes on with the records after the loss. Every record delivered is in
//! order per connection.
//!
//! Posts (RDMA Writes, Sends, Reads) go either over the control socket
//! ([`Consumer::post_write`], one request and answer each) or through shared memory
//! ([`Consumer::post`], [`Consumer::post_write_shm`], ...): at subscribe the datapath also
//! passes a post queue per worker ([`mpa_ctl_proto::ring::post`]) and each worker's doorbell eventfd.
//! A post is written into the queue of the worker that owns its connection — the one whose
//! ring its latest completion came from; queue 0 for a connection that has had none yet (the
//! datapath passes a misrouted post on to the owner) — with no system call unless that worker
//! sleeps. A full queue is [`ConsumerError::PostQueueFull`] (nothing written: post again once
//! the worker has read). A post the datapath refuses comes back as a
//! [`mpa_ctl_proto::CompletionKind::PostRefused`] completion with its wr_id
//! ([`mpa_ctl_proto::Completion::refusal`]). Posts on one connection keep their order while they go
//! through one queue; one passed on by a worker that does not own the connection may be
//! overtaken by a later post written straight into the owner's queue (after the connection's
//! first completion, or after it moved): when the order matters (Sends), post a connection's
//! first messages once it has had a completion, or over the control socket.
//!
//! ```no_run
//! use mpa_app::Consumer;
//! use std::time::{Duration, Instant};
//! let mut c = Consumer::connect("/run/mpa-datapath.sock".as_ref(), Duration::from_secs(5))?;
//! let region = c.create_region(1 << 20, 1, true, false)?;
//! c.subscribe(1)?;
//! // ... a peer writes (STag region.info().stag) ...
//! while let Some(batch) = c.next_completions(Instant::now() + Duration::from_secs(1))? {
//!     for done in batch { println!("{done:?}"); }
//! }
//! let mut first = [0u8; 16];
//! region.read(0, &mut first);
//! # Ok::<(), mpa_app::ConsumerError>(())
//! ```

use mpa_ctl_proto::client::{ClientError, ControlClient};
use mpa_ctl_proto::ring::post::{PostOp, WorkRequest};
use mpa_ctl_proto::ring::{drain_eventfd, RingError, RingFile, RingSet};
use mpa_ctl_proto::shm::{Access, SharedMemory, ShmError};
use mpa_ctl_proto::{Completion, Message, PostTarget, RegionInfo};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::os::fd::AsFd;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a consumer request failed.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// The socket or the protocol failed, or the datapath refused.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// An answer without the region's descriptor.
    #[error("RegionCreated for {0:#x} without a descriptor")]
    NoDescriptor(u32),
    /// Completions of domain `pd` did not fit the consumer's ring (it read too slowly) and
    /// were dropped by the datapath: `lost` records, at this place in the stream. The
    /// subscription goes on; the next call returns what came after them.
    #[error("{lost} completions of domain {pd} lost: the consumer fell behind its ring")]
    Overflow {
        /// Domain.
        pd: u32,
        /// Records lost here.
        lost: u64,
    },
    /// The subscription's rings could not be used.
    #[error("completion rings of domain {pd}: {err}")]
    Ring {
        /// Domain.
        pd: u32,
        /// Why.
        err: RingError,
    },
    /// A `Subscribed` answer without its two descriptors (or without as many post queue
    /// descriptors as it announced).
    #[error("Subscribed for domain {0} without the ring and eventfd descriptors")]
    NoRing(u32),
    /// The subscription's post queues could not be mapped.
    #[error("post queues of domain {pd}: {err}")]
    PostQueue {
        /// Domain.
        pd: u32,
        /// Why.
        err: mpa_ctl_proto::ring::post::PostQueueError,
    },
    /// No subscription to the domain.
    #[error("not subscribed to domain {0}")]
    NotSubscribed(u32),
    /// No subscription with post queues to carry the post (not subscribed to its domain, or
    /// a datapath without post queues): post over the control socket.
    #[error("no shared-memory post queue for connection {0}")]
    NoPostQueue(u64),
    /// The worker's post queue is full (it has not read what was posted before): nothing
    /// was written; post again once it has read.
    #[error("post queue {queue} full: the worker has not read the earlier posts yet")]
    PostQueueFull {
        /// The queue (the worker).
        queue: u32,
    },
    /// No completion queue of this consumer has the id.
    #[error("no completion queue {0}")]
    UnknownCq(u32),
    /// A connection's send and receive CQs must be of one domain.
    #[error("completion queues {send} and {recv} are of different domains")]
    CqDomains {
        /// The send CQ.
        send: u32,
        /// The receive CQ.
        recv: u32,
    },
    /// A CQ's capacity out of 1 ..= [`cqs::MAX_CQ_CAPACITY`].
    #[error("completion queue capacity {0} (1 ..= {max})", max = cqs::MAX_CQ_CAPACITY)]
    CqCapacity(u32),
    /// [`cqs::MAX_CQS`] CQs exist already.
    #[error("{max} completion queues exist already", max = cqs::MAX_CQS)]
    TooManyCqs,
    /// The CQ is bound to a connection or a domain: unbind first.
    #[error("completion queue {0} is in use by a connection or a domain")]
    CqBusy(u32),
    /// [`cqs::MAX_BOUND_CONNECTIONS`] connections have CQs of their own already.
    #[error("{max} connections have completion queues of their own already", max = cqs::MAX_BOUND_CONNECTIONS)]
    TooManyBindings,
    /// Completions bound for CQ `cq` did not fit it (it was polled too seldom): `lost`
    /// records, at this place in its stream.
    #[error("{lost} completions of completion queue {cq} lost: it was full")]
    CqOverflow {
        /// The CQ.
        cq: u32,
        /// Records lost here.
        lost: u64,
    },
    /// The region could not be mapped (or its descriptor is not the sealed memfd of the
    /// announced length).
    #[error("mapping region {stag:#x}: {err}")]
    Map {
        /// Region.
        stag: u32,
        /// Why.
        err: ShmError,
    },
}

/// A connection to the datapath as a consumer.
pub struct Consumer {
    client: ControlClient,
    subs: Vec<Subscription>,
    /// A loss found while records before it were returned: reported at the next call.
    pending_loss: Option<(u32, u64)>,
    busy_poll: bool,
    busy_poll_yield_every: u32,
    next_sub: usize,
    /// Per connection: the domain and ring of its latest completion (where to post).
    flow_rings: flow_rings::FlowRings,
    /// The ring of each completion of a poll (reused).
    ring_tags: Vec<u32>,
    /// Connection events not yet taken ([`Consumer::connection_events`]).
    ended: std::collections::VecDeque<ConnectionEvent>,
    /// Ends not kept because [`MAX_CONNECTION_EVENTS`] were waiting.
    ended_dropped: u64,
    /// The completion queues the domains' streams are split into.
    cqs: cqs::Cqs,
    /// Records of the domains' streams read while polling a CQ (reused).
    stream_scratch: Vec<Completion>,
}

/// A signaled work request of id 0 from one range: what the per-operation shorthands post.
pub(crate) fn work(
    flow_id: u64,
    stag: u32,
    offset: u64,
    len: u64,
    count: u32,
    op: PostOp,
) -> WorkRequest {
    WorkRequest::new(flow_id, 0, op, stag, offset, len, count)
}

/// One subscribed domain: its rings and eventfd, and its post queues.
struct Subscription {
    pd: u32,
    rings: RingSet,
    wake: std::os::fd::OwnedFd,
    posts: Option<posts::PostQueues>,
}

mod connections;
pub mod cqs;
mod flow_rings;
mod posts;

pub use connections::{ConnectionEnded, ConnectionEvent, MAX_CONNECTION_EVENTS};

/// Completions returned by one [`Consumer::next_completions`] at most.
const BATCH: usize = 4096;

/// [`Consumer::set_busy_poll_yield_every`] by default (as the datapath's workers yield while
/// they spin).
pub const DEFAULT_BUSY_POLL_YIELD_EVERY: u32 = mpa_ctl_proto::ring::SPIN_YIELD_EVERY;

impl Consumer {
    /// The ring file of the subscription to `pd` (to inspect it; the workers write it), if
    /// subscribed.
    pub fn ring_file(&self, pd: u32) -> Option<&mpa_ctl_proto::ring::RingFile> {
        self.subs
            .iter()
            .find(|s| s.pd == pd)
            .and_then(|s| s.rings.file())
    }

    /// Connects; `timeout` bounds every wait for an answer.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Consumer, ConsumerError> {
        let agent = concat!("mpa consumer ", env!("CARGO_PKG_VERSION"));
        Ok(Consumer {
            client: ControlClient::connect_as(path, timeout, agent)?,
            subs: Vec::new(),
            pending_loss: None,
            busy_poll: false,
            busy_poll_yield_every: DEFAULT_BUSY_POLL_YIELD_EVERY,
            next_sub: 0,
            ended: std::collections::VecDeque::new(),
            ended_dropped: 0,
            cqs: cqs::Cqs::default(),
            stream_scratch: Vec::new(),
            flow_rings: flow_rings::FlowRings::default(),
            ring_tags: Vec::new(),
        })
    }

    fn unexpected(m: Message) -> ConsumerError {
        ClientError::Unexpected(Box::new(m)).into()
    }

    /// Creates a region of `len` octets in protection domain `pd` and maps it.
    pub fn create_region(
        &mut self,
        len: u64,
        pd: u32,
        remote_write: bool,
        remote_read: bool,
    ) -> Result<MappedRegion, ConsumerError> {
        let (m, fd) = self.client.request_with_fd(|id| Message::CreateRegion {
            id,
            len,
            pd,
            remote_write,
            remote_read,
        })?;
        let Message::RegionCreated { region, .. } = m else {
            return Err(Self::unexpected(m));
        };
        let fd = fd.ok_or(ConsumerError::NoDescriptor(region.stag))?;
        MappedRegion::map(region, fd)
    }

    /// Registers memory the application already has (verbs' `ibv_reg_mr` over its own
    /// buffer): the first `len` octets of memfd `fd`, in protection domain `pd`. The datapath
    /// receives a duplicate of the descriptor, which must be open for reading and writing;
    /// it seals the file against shrinking and growing unless it is sealed so already (a
    /// memfd made without `MFD_ALLOW_SEALING` and not so sealed is refused, as is one sealed
    /// against writing or shorter than `len`), maps it and places into it. Huge-page memfds
    /// (`MFD_HUGETLB`) are taken too. The application keeps its own mapping and its
    /// descriptor: what peers write lands in its memory, and the pages stay its own when the
    /// region is destroyed (docs/consumer.md, "Registering memory the application has").
    pub fn register_region(
        &mut self,
        fd: std::os::fd::BorrowedFd<'_>,
        len: u64,
        pd: u32,
        remote_write: bool,
        remote_read: bool,
    ) -> Result<RegionInfo, ConsumerError> {
        let m = self
            .client
            .request_sending_fd(fd, |id| Message::RegisterRegion {
                id,
                pd,
                len,
                remote_write,
                remote_read,
            })?;
        match m {
            Message::RegionRegistered { region, .. } => Ok(region),
            m => Err(Self::unexpected(m)),
        }
    }

    /// No further placement into `stag`.
    pub fn destroy_region(&mut self, stag: u32) -> Result<(), ConsumerError> {
        self.expect_ok(|id| Message::DestroyRegion { id, stag })
    }

    /// Regions, all or of one domain.
    pub fn regions(&mut self, pd: Option<u32>) -> Result<Vec<RegionInfo>, ConsumerError> {
        match self.client.request(|id| Message::ListRegions { id, pd })? {
            Message::Regions { regions, .. } => Ok(regions),
            m => Err(Self::unexpected(m)),
        }
    }

    /// Posts `count` receive buffers of `len` octets from `offset` in region `stag`.
    pub fn post_recv(
        &mut self,
        target: PostTarget,
        stag: u32,
        offset: u64,
        len: u32,
        count: u32,
    ) -> Result<(), ConsumerError> {
        self.post_recv_wr(target, stag, offset, len, count, 0)
    }

    /// Posts `count` RDMA Writes of `len` octets on connection `flow_id`, write `i` from
    /// `offset + i·len` of region `stag` to the peer's `sink_stag` at `sink_to + i·len`
    /// (a [`Message::Post`]); each completes as [`mpa_ctl_proto::CompletionKind::WriteSent`].
    #[allow(clippy::too_many_arguments)]
    pub fn post_write(
        &mut self,
        flow_id: u64,
        stag: u32,
        offset: u64,
        len: u64,
        count: u32,
        sink_stag: u32,
        sink_to: u64,
    ) -> Result<(), ConsumerError> {
        let op = PostOp::Write { sink_stag, sink_to };
        self.post_via_socket(&work(flow_id, stag, offset, len, count, op))
            .map(|_| ())
    }

    /// Posts work request `wr` over the control socket (a round trip; the shared-memory way
    /// is [`Consumer::post`]); returns the first Send's MSN for Sends. Each message completes
    /// with `wr.wr_id + i` (unsignaled ones only when they fail).
    pub fn post_via_socket(
        &mut self,
        wr: &mpa_ctl_proto::ring::post::WorkRequest,
    ) -> Result<Option<u32>, ConsumerError> {
        let wr = *wr;
        match self.client.request(|id| Message::Post { id, wr })? {
            Message::Posted { first_msn, .. } => Ok(first_msn),
            m => Err(Self::unexpected(m)),
        }
    }

    /// [`Consumer::post_recv`] with work request ids: buffer `i` completes with `wr_id + i`
    /// (and with status flushed if the connection ends before a Send fills it).
    pub fn post_recv_wr(
        &mut self,
        target: PostTarget,
        stag: u32,
        offset: u64,
        len: u32,
        count: u32,
        wr_id: u64,
    ) -> Result<(), ConsumerError> {
        self.expect_ok(|id| Message::PostRecv {
            id,
            target,
            stag,
            offset,
            len,
            count,
            wr_id,
        })
    }

    /// Closes connection `flow_id` gracefully: what is posted goes out, then a FIN
    /// ([`Message::FinishFlow`]).
    pub fn finish_flow(&mut self, flow_id: u64) -> Result<(), ConsumerError> {
        self.expect_ok(|id| Message::FinishFlow { id, flow_id })
    }

    /// Posts `count` RDMA Reads of `len` octets on connection `flow_id`: read `i` fetches the
    /// peer's `src_stag` at `src_to + i·len` into region `stag` at `offset + i·len` (see
    /// [`Message::Post`]); each completes as [`mpa_ctl_proto::CompletionKind::ReadResponsePlaced`].
    #[allow(clippy::too_many_arguments)]
    pub fn post_read(
        &mut self,
        flow_id: u64,
        stag: u32,
        offset: u64,
        len: u64,
        count: u32,
        src_stag: u32,
        src_to: u64,
    ) -> Result<(), ConsumerError> {
        let op = PostOp::Read { src_stag, src_to };
        self.post_via_socket(&work(flow_id, stag, offset, len, count, op))
            .map(|_| ())
    }

    /// Posts `count` Sends of `len` octets on connection `flow_id` from `offset + i·len` of
    /// region `stag`; returns the first one's MSN (`None` when they wait behind a Read posted
    /// before: their MSNs are given when they go). Each completes as
    /// [`mpa_ctl_proto::CompletionKind::SendSent`].
    pub fn post_send(
        &mut self,
        flow_id: u64,
        stag: u32,
        offset: u64,
        len: u64,
        count: u32,
    ) -> Result<Option<u32>, ConsumerError> {
        self.post_via_socket(&work(flow_id, stag, offset, len, count, PostOp::Send))
    }

    /// Receive the completions of domain `pd`'s connections on this consumer: maps the
    /// rings the datapath made for it. Subscribing to a domain again replaces its rings.
    pub fn subscribe(&mut self, pd: u32) -> Result<(), ConsumerError> {
        let (m, fds) = self.client.request_with_fds(|id| Message::Subscribe {
            id,
            pd,
            post_queues: true,
        })?;
        let Message::Subscribed {
            rings,
            capacity,
            post_capacity,
            ..
        } = m
        else {
            return Err(Self::unexpected(m));
        };
        let want = if post_capacity == 0 {
            2
        } else {
            3 + rings as usize
        };
        if fds.len() != want {
            return Err(ConsumerError::NoRing(pd));
        }
        let mut fds = fds.into_iter();
        let file = fds.next().ok_or(ConsumerError::NoRing(pd))?;
        let wake = fds.next().ok_or(ConsumerError::NoRing(pd))?;
        let file =
            RingFile::open(file, rings, capacity).map_err(|err| ConsumerError::Ring { pd, err })?;
        let posts = match fds.next() {
            Some(queues) => Some(posts::PostQueues::open(
                pd,
                queues,
                fds.collect(),
                rings,
                post_capacity,
            )?),
            None => None,
        };
        self.subs.retain(|s| s.pd != pd);
        self.flow_rings.forget_domain(pd);
        self.subs.push(Subscription {
            pd,
            rings: RingSet::new(Arc::new(file)),
            wake,
            posts,
        });
        Ok(())
    }

    /// Busy polling: [`Consumer::next_completions`] spins on the rings until its deadline
    /// instead of sleeping on the eventfd (lowest latency; costs a core while it waits).
    pub fn set_busy_poll(&mut self, on: bool) {
        self.busy_poll = on;
    }

    /// While busy polling, offer the core to other runnable threads every this many empty
    /// polls of the rings (`sched_yield`; [`DEFAULT_BUSY_POLL_YIELD_EVERY`] by default, 0:
    /// never). A spinner that never yields holds its core until its time slice ends, and the
    /// worker or the peer woken there waits that long (docs/latency.md, "Polling and
    /// sleeping").
    pub fn set_busy_poll_yield_every(&mut self, polls: u32) {
        self.busy_poll_yield_every = polls;
    }

    /// Stop receiving domain `pd`'s completions and give its rings and post queues back.
    /// Completions not read by then are discarded, as `ibv_destroy_cq` discards them: read
    /// them first. The datapath releases the rings' memory (docs/limits.md, "Shared memory
    /// after it is released"), so the consumer no longer reads them.
    pub fn unsubscribe(&mut self, pd: u32) -> Result<(), ConsumerError> {
        self.expect_ok(|id| Message::Unsubscribe { id, pd })?;
        self.subs.retain(|s| s.pd != pd);
        self.next_sub = 0;
        Ok(())
    }

    fn expect_ok(&mut self, build: impl FnOnce(u64) -> Message) -> Result<(), ConsumerError> {
        match self.client.request(build)? {
            Message::Ok { .. } => Ok(()),
            m => Err(Self::unexpected(m)),
        }
    }

    /// The eventfd the workers write when a completion of `pd`'s connections arrives while
    /// the subscription is armed ([`Consumer::arm`]): for the application's own epoll or
    /// poll loop, as `ibv_comp_channel`'s descriptor (docs/consumer.md, "Waiting in your own
    /// event loop"). `None` when not subscribed to `pd`. It stays the consumer's: do not
    /// close it.
    pub fn completion_fd(&self, pd: u32) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.subs
            .iter()
            .find(|s| s.pd == pd)
            .map(|s| s.wake.as_fd())
    }

    /// Asks for a wake-up of [`Consumer::completion_fd`] at the next completion of `pd`'s
    /// connections (`ibv_req_notify_cq`). `Ok(true)`: armed, wait on the descriptor, then
    /// [`Consumer::ack_notify`] and poll ([`Consumer::poll_completions`]). `Ok(false)`:
    /// completions are waiting already and nothing was armed: poll them now. One arming
    /// brings at most one wake-up.
    pub fn arm(&mut self, pd: u32) -> Result<bool, ConsumerError> {
        let s = self
            .subs
            .iter_mut()
            .find(|s| s.pd == pd)
            .ok_or(ConsumerError::NotSubscribed(pd))?;
        Ok(s.rings.prepare_sleep())
    }

    /// After [`Consumer::completion_fd`] became readable, or to give up waiting: reads the
    /// eventfd empty and disarms `pd`'s subscription (`ibv_ack_cq_events`).
    pub fn ack_notify(&mut self, pd: u32) -> Result<(), ConsumerError> {
        let s = self
            .subs
            .iter()
            .find(|s| s.pd == pd)
            .ok_or(ConsumerError::NotSubscribed(pd))?;
        drain_eventfd(s.wake.as_fd());
        s.rings.finish_sleep();
        Ok(())
    }

    /// The next batch of completions (in order per connection), or `None` when none arrives
    /// before `deadline`; [`ConsumerError::Overflow`] where records were lost (see the
    /// module). Sleeps on the subscriptions' eventfds, or spins with
    /// [`Consumer::set_busy_poll`]. A datapath that went away ends it with an error.
    pub fn next_completions(
        &mut self,
        deadline: Instant,
    ) -> Result<Option<Vec<Completion>>, ConsumerError> {
        if let Some((pd, lost)) = self.pending_loss.take() {
            return Err(ConsumerError::Overflow { pd, lost });
        }
        let mut out = Vec::new();
        let mut spins = 0u32;
        loop {
            if let Some(v) = self.poll_rings(&mut out)? {
                return Ok(Some(v));
            }
            if !self.wait_for_records(deadline, &mut spins)? {
                return Ok(None);
            }
        }
    }

    /// Waits for the rings to have records (or for a while, spinning with
    /// [`Consumer::set_busy_poll`]): `false` once `deadline` has passed. A datapath that went
    /// away is an error.
    pub(crate) fn wait_for_records(
        &mut self,
        deadline: Instant,
        spins: &mut u32,
    ) -> Result<bool, ConsumerError> {
        let now = Instant::now();
        if self.busy_poll {
            *spins = spins.wrapping_add(1);
            // Now and then (and at the end), whether the datapath is still there.
            if now >= deadline || spins.is_multiple_of(1 << 16) {
                self.check_socket()?;
            }
            if now >= deadline {
                return Ok(false);
            }
            let every = self.busy_poll_yield_every;
            if every > 0 && spins.is_multiple_of(every) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            return Ok(true);
        }
        let Some(left) = deadline
            .checked_duration_since(now)
            .filter(|d| !d.is_zero())
        else {
            self.check_socket()?;
            return Ok(false);
        };
        if !self.subs.iter_mut().all(|s| s.rings.prepare_sleep()) {
            for s in &self.subs {
                s.rings.finish_sleep();
            }
            return Ok(true);
        }
        let timeout = PollTimeout::try_from(left.as_millis().clamp(1, 60_000) as i32)
            .unwrap_or(PollTimeout::MAX);
        let mut fds: Vec<PollFd<'_>> = self
            .subs
            .iter()
            .map(|s| PollFd::new(s.wake.as_fd(), PollFlags::POLLIN))
            .collect();
        fds.push(PollFd::new(self.client.as_fd(), PollFlags::POLLIN));
        let r = poll(&mut fds, timeout);
        let socket_ready = fds
            .last()
            .and_then(|f| f.revents())
            .is_some_and(|e| !e.is_empty());
        drop(fds);
        for s in &self.subs {
            drain_eventfd(s.wake.as_fd());
            s.rings.finish_sleep();
        }
        match r {
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(e) => {
                return Err(ClientError::Proto(mpa_ctl_proto::ProtoError::Io(e.into())).into())
            }
        }
        if socket_ready {
            self.check_socket()?;
        }
        Ok(true)
    }

    /// The completions in the rings now, appended to `out` (at most 4096), without waiting
    /// and without a system call: for a run-to-completion loop that turns the queue itself
    /// (docs/latency.md) and has nothing to wait for. A loss is reported as
    /// [`Consumer::next_completions`] reports it. Unlike that call it does not look at the
    /// control socket: a datapath that went away shows as no more completions, and as an
    /// error of the loop's next control request or of its queue driver.
    pub fn poll_completions(&mut self, out: &mut Vec<Completion>) -> Result<usize, ConsumerError> {
        if !self.cqs.unrouted.is_empty() {
            let n = self.cqs.unrouted.len().min(BATCH);
            out.extend(self.cqs.unrouted.drain(..n));
            return Ok(n);
        }
        if let Some((pd, lost)) = self.cqs.unrouted_lost.take() {
            return Err(ConsumerError::Overflow { pd, lost });
        }
        self.read_rings(out)
    }

    /// The rings' records now into `out`, those of connections with CQs into their CQs.
    fn read_rings(&mut self, out: &mut Vec<Completion>) -> Result<usize, ConsumerError> {
        if let Some((pd, lost)) = self.pending_loss.take() {
            return Err(ConsumerError::Overflow { pd, lost });
        }
        let before = out.len();
        let n = self.subs.len();
        for k in 0..n {
            let i = (self.next_sub + k) % n;
            let s = &mut self.subs[i];
            let pd = s.pd;
            let start = out.len();
            self.ring_tags.clear();
            let lost = s
                .rings
                .poll_with_rings(out, &mut self.ring_tags, before + BATCH)
                .map_err(|err| ConsumerError::Ring { pd, err })?;
            self.note_rings(pd, start, out);
            self.route_to_cqs(pd, start, out);
            if lost > 0 {
                self.next_sub = i;
                if out.len() == before {
                    return Err(ConsumerError::Overflow { pd, lost });
                }
                self.pending_loss = Some((pd, lost));
                break;
            }
            if out.len() > before {
                self.next_sub = (i + 1) % n;
                break;
            }
        }
        Ok(out.len() - before)
    }

    /// Moves the records of `out[start..]` (read from domain `pd`'s rings) that belong to a CQ
    /// into it, keeping the others in order.
    fn route_to_cqs(&mut self, pd: u32, start: usize, out: &mut Vec<Completion>) {
        let mut keep = start;
        for i in start..out.len() {
            let c = out[i];
            if !self.cqs.route(pd, &c) {
                out[keep] = c;
                keep += 1;
            }
        }
        out.truncate(keep);
    }

    /// Reads the rings, each subscription in turn: `Some` batch when there were records;
    /// an overflow error when a loss comes first (one found after records is kept for the
    /// next call). Called with no loss pending (`next_completions` reports one first).
    fn poll_rings(
        &mut self,
        out: &mut Vec<Completion>,
    ) -> Result<Option<Vec<Completion>>, ConsumerError> {
        out.clear();
        Ok((self.poll_completions(out)? > 0).then(|| std::mem::take(out)))
    }
}

/// A region's memory mapped into the consumer. The datapath writes it (placement) and reads
/// it (messages the consumer posts) at any time, so it is only read and written by copying
/// ([`MappedRegion::read`], [`MappedRegion::write`]), never through a reference.
#[derive(Debug)]
pub struct MappedRegion {
    info: RegionInfo,
    mem: SharedMemory,
}

impl MappedRegion {
    /// The mapping's first octet, for a C program (libmpaxdp's `mpx_region_addr`): it stays
    /// valid while the region is kept, and the datapath reads and writes the octets at any
    /// time (a Rust program copies with [`MappedRegion::read`] and [`MappedRegion::write`]).
    pub fn as_ptr(&self) -> *mut u8 {
        self.mem.ptr_at(0, 0).unwrap_or(std::ptr::null_mut())
    }

    fn map(info: RegionInfo, fd: OwnedFd) -> Result<MappedRegion, ConsumerError> {
        let stag = info.stag;
        // Read-write: it is the consumer's own memory, and what it posts to send is written
        // there first.
        let mem = SharedMemory::open(fd, info.len, Access::ReadWrite)
            .map_err(|err| ConsumerError::Map { stag, err })?;
        Ok(MappedRegion { info, mem })
    }

    /// The region.
    pub fn info(&self) -> &RegionInfo {
        &self.info
    }

    /// The region's memfd (sealed against resizing), e.g. to map it elsewhere. Once the
    /// region is destroyed and the datapath has let go of it, the file holds no page: what
    /// is read through it then is zeros.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.mem.fd()
    }

    /// Copies the octets at `off` into `dst`; `false` when out of bounds.
    pub fn read(&self, off: u64, dst: &mut [u8]) -> bool {
        self.mem.read(off, dst)
    }

    /// Copies `src` to `off` (e.g. what a posted Write or Send will send); `false` when out
    /// of bounds. Octets of a message in flight must not change until its completion: a
    /// retransmission reads them again.
    pub fn write(&self, off: u64, src: &[u8]) -> bool {
        self.mem.write(off, src)
    }

    /// The whole region, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.mem.len()];
        self.mem.read(0, &mut v);
        v
    }
}
