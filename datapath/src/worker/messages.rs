//! What passes between the control thread and a worker: its commands, its notifications,
//! and why it refuses a command.

use crate::io::capture::{CaptureBatch, CaptureSpec};
use crate::memory::completions::{RingMark, RingSubscription};
use crossbeam_channel::Sender;
use mpa_ctl_proto::ring::post::WorkRequest;
use mpa_ctl_proto::stats::{FlowReport, QueueReport};
use mpa_ctl_proto::HandOver;
use mpa_stack::flow::{Flow, FlowEnd, FlowError};
use mpa_stack::receiver::{PostRecvError, PostedBuf, Region};
use mpa_stack::sender::PostError;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

/// What the control thread asks of a worker.
pub enum Command {
    /// Start owning a flow from its hand-over, drawing its receive buffers from its domain's
    /// shared receive queue if it has one; the answer says whether it worked.
    HandOver(
        Box<HandOver>,
        Option<Arc<dyn mpa_stack::receiver::SharedReceiveQueue>>,
        Sender<Result<(), WorkerError>>,
    ),
    /// A region to place into (every worker gets its own copy).
    AddRegion(Region),
    /// A region no longer accepts placement.
    RemoveRegion(u32),
    /// Post receive buffers to a flow.
    PostRecv(u64, Vec<PostedBuf>, Sender<Result<(), WorkerError>>),
    /// Post Writes or Sends on a flow; the answer carries the first Send's MSN.
    PostSend(Box<WorkRequest>, Sender<Result<Option<u32>, WorkerError>>),
    /// Abort a flow (RST to the peer).
    Close(u64),
    /// Close a flow gracefully: a FIN after what is queued.
    Finish(u64),
    /// Abort every flow (RST to each peer), each reported gone with this reason.
    AbortAll(&'static str),
    /// Give a flow up (it belongs to another queue's worker): answer with its state and
    /// where its completions end in this worker's ring.
    Release(u64, Sender<Option<(Box<Flow>, Option<RingMark>)>>),
    /// Take over a flow released by another worker.
    Adopt(Box<Flow>, (SocketAddr, SocketAddr), Option<RingMark>),
    /// Deliver a domain's completions into this ring (replacing the domain's earlier one),
    /// and read the subscription's post queue.
    Subscribe(Box<RingSubscription>),
    /// A post another worker read from subscription `sub`'s queue (of domain `pd`) for a
    /// flow it does not own: post it, or refuse it through this worker's ring of `sub`.
    Post {
        /// The subscription whose queue carried it.
        sub: u64,
        /// Its domain.
        pd: u32,
        /// The post.
        post: Box<WorkRequest>,
    },
    /// A subscription ended (its consumer is gone): unmap its ring.
    Unsubscribe {
        /// The domain.
        pd: u32,
        /// The subscription.
        id: u64,
    },
    /// Report counters and the live flows of lowest id above `after`, at most `max` of them.
    Stats {
        /// List flows whose id is above this one (`None`: from the lowest).
        after: Option<u64>,
        /// List at most this many.
        max: usize,
        /// Where the report goes.
        answer: Sender<QueueReport>,
    },
    /// Start capturing (replacing any capture running).
    StartCapture(CaptureSpec),
    /// Stop capturing: hand over what is held ([`Notification::Captured`]), then answer with
    /// the frames dropped for want of room.
    StopCapture(Sender<u64>),
    /// Stop the worker.
    Shutdown,
}

/// What a worker reports on its own.
#[derive(Debug)]
pub enum Notification {
    /// A flow ended; the control thread removes it from the XDP map and tells mpa-control.
    FlowGone {
        /// The flow.
        flow_id: u64,
        /// Our address of the 4-tuple.
        local: SocketAddr,
        /// The peer.
        remote: SocketAddr,
        /// How.
        end: FlowEnd,
        /// Final counters.
        stats: Box<FlowReport>,
    },
    /// Captured frames (a full batch, or what one poll captured); the control thread sends
    /// them to the capturing client and gives the emptied batch back.
    Captured {
        /// The worker's queue.
        queue: u32,
        /// The capture they belong to.
        generation: u64,
        /// The frames.
        batch: CaptureBatch,
    },
    /// A post read from a post queue for a flow this worker does not own: the control
    /// thread passes it to the flow's worker ([`Command::Post`]), or back to this one to be
    /// refused when no worker has it.
    Post {
        /// The queue (worker) that read it.
        queue: u32,
        /// The subscription whose queue carried it.
        sub: u64,
        /// Its domain.
        pd: u32,
        /// The post.
        post: WorkRequest,
        /// The reading worker's count of posts in transit: decremented once passed on.
        forwarding: Arc<AtomicUsize>,
    },
    /// Segments of a steered 4-tuple arrive on this queue, whose worker does not own it: RSS
    /// put the peer's connection here. The control thread moves the flow over.
    Stray {
        /// The queue that saw the segment.
        queue: u32,
        /// Our address.
        local: SocketAddr,
        /// The peer.
        remote: SocketAddr,
    },
}

/// Why a worker refused a command.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A hand-over for a 4-tuple that already has a flow here.
    #[error("the 4-tuple already has a flow")]
    DuplicateFlow,
    /// The flow is not on this worker.
    #[error("no flow {0} on this worker")]
    NoFlow(u64),
    /// The datapath's memory budget has no room for another flow (docs/limits.md).
    #[error("the datapath's memory budget is exhausted ({used} of {limit} octets in use)")]
    MemoryBudget {
        /// Octets charged.
        used: u64,
        /// The budget.
        limit: u64,
    },
    /// The hand-over could not become a flow.
    #[error(transparent)]
    HandOver(#[from] FlowError),
    /// Messages to send were refused (none was queued).
    #[error("flow {flow}: {error}")]
    Post {
        /// The flow.
        flow: u64,
        /// Why.
        error: PostError,
    },
    /// Receive buffers were refused.
    #[error("flow {flow}: {error}")]
    PostRecv {
        /// The flow.
        flow: u64,
        /// Why.
        error: PostRecvError,
    },
}
