//! Every message of the protocol, and the error codes and Terminate details they carry.

use crate::cm::{CmEvent, ConnectOptions, Decision, ListenOptions, PeerParams, SetupOutcome};
use crate::{CapturedFrame, HandOver, PostTarget, RegionInfo};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// An RDMAP Terminate's control field (RFC 5040 §4.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminateInfo {
    /// 0 RDMAP, 1 DDP, 2 LLP (MPA).
    pub layer: u8,
    /// Error type.
    pub error_type: u8,
    /// Error code.
    pub error_code: u8,
    /// We sent it (true) or the peer did (false).
    pub sent: bool,
}

/// Error codes in [`Message::Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    /// Incompatible protocol version (kept for the wire format: the datapath answers a Hello
    /// of another version with its own Hello instead).
    Version,
    /// The request is not valid (details in the message).
    BadRequest,
    /// No such flow.
    UnknownFlow,
    /// The 4-tuple is already owned.
    FlowExists,
    /// A limit (flows, memory) was reached.
    Limit,
    /// The requester is not allowed.
    Forbidden,
    /// The datapath failed internally.
    Internal,
    /// What the request needs is not running: no connection manager serves applications.
    Unavailable,
}

/// Every message of the protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// First message each way.
    Hello {
        /// `VERSION`.
        version: u32,
        /// Free text: program name and version.
        agent: String,
    },
    /// control → datapath: start steering this 4-tuple; the datapath creates the flow, inserts
    /// it into the XDP `flows` map and holds its packets until the hand-over arrives.
    AdoptFlow {
        /// Request id.
        id: u64,
        /// Our side.
        local: SocketAddr,
        /// The peer.
        remote: SocketAddr,
    },
    /// datapath → control: the flow exists and is steered.
    FlowAdopted {
        /// Request id.
        id: u64,
        /// The flow.
        flow_id: u64,
    },
    /// control → datapath: the frozen kernel state; the datapath now owns the connection.
    HandOver {
        /// Request id.
        id: u64,
        /// The state.
        handover: Box<HandOver>,
    },
    /// datapath → control: hand-over accepted.
    HandedOver {
        /// Request id.
        id: u64,
        /// The flow.
        flow_id: u64,
    },
    /// mpa-control or consumer → datapath: close the flow gracefully — what is queued to
    /// send (posted Writes and Sends) goes out first, then a FIN (RFC 9293 §3.10.4); the flow
    /// ends (FlowGone) when both directions are closed. Answered with Ok.
    FinishFlow {
        /// Request id.
        id: u64,
        /// The flow.
        flow_id: u64,
    },
    /// control → datapath: forget a flow at once (hand-over failed, or an operator closes
    /// it). Answered with Ok.
    CloseFlow {
        /// Request id.
        id: u64,
        /// The flow.
        flow_id: u64,
    },
    /// datapath → control (id 0): a connection ended; close its frozen socket silently.
    FlowGone {
        /// The flow.
        flow_id: u64,
        /// The MPA error code (RFC 5044 §8), if it ended with one.
        mpa_error: Option<u8>,
        /// Why, in words.
        reason: String,
        /// The Terminate that ended it, either way.
        #[serde(default)]
        terminate: Option<TerminateInfo>,
    },
    /// consumer → datapath: create a registered memory region (memfd; huge pages when the
    /// length is a multiple of 2 MiB and hugetlbfs has room). Answered by
    /// [`Message::RegionCreated`] carrying the memory's file descriptor (SCM_RIGHTS, see
    /// `read_message_with_fd`); the region lives until [`Message::DestroyRegion`], until
    /// the client that created it disconnects, or until the datapath exits.
    CreateRegion {
        /// Request id.
        id: u64,
        /// Octets (at least 1).
        len: u64,
        /// Protection domain.
        pd: u32,
        /// Allow RDMA Writes from peers.
        remote_write: bool,
        /// Allow RDMA Read Requests from peers.
        remote_read: bool,
    },
    /// datapath → consumer: the region, with its memory's descriptor attached.
    RegionCreated {
        /// Request id.
        id: u64,
        /// The region.
        region: RegionInfo,
    },
    /// consumer → datapath: register memory the application already has (verbs'
    /// `ibv_reg_mr` over its own buffer): the first `len` octets of the memfd attached to
    /// this message (SCM_RIGHTS, see `write_message_with_fd`), open for reading and writing.
    /// The datapath seals the file against shrinking and growing unless it is already (a
    /// file that is neither sealed so nor open to sealing is refused), maps it and answers
    /// [`Message::RegionRegistered`]. The region then lives as a created one does; the
    /// application keeps its own mapping, and the file's pages stay its own.
    RegisterRegion {
        /// Request id.
        id: u64,
        /// Protection domain.
        pd: u32,
        /// Octets (at least 1; the memfd holds at least as many).
        len: u64,
        /// Allow RDMA Writes from peers.
        remote_write: bool,
        /// Allow RDMA Read Requests from peers.
        remote_read: bool,
    },
    /// datapath → consumer: the region registered (no descriptor: the application has it).
    RegionRegistered {
        /// Request id.
        id: u64,
        /// The region.
        region: RegionInfo,
    },
    /// consumer → datapath: no further placement into the region (flows that target it get
    /// an invalid-STag Terminate); its memory stays valid for whoever mapped it.
    DestroyRegion {
        /// Request id.
        id: u64,
        /// The region.
        stag: u32,
    },
    /// List regions, all or of one domain.
    ListRegions {
        /// Request id.
        id: u64,
        /// Only this domain.
        pd: Option<u32>,
    },
    /// The regions.
    Regions {
        /// Request id.
        id: u64,
        /// Regions.
        regions: Vec<RegionInfo>,
    },
    /// consumer → datapath: post `count` receive buffers of `len` octets each, back to back in
    /// region `stag` from `offset`, for Sends (QN 0), in MSN order.
    PostRecv {
        /// Request id.
        id: u64,
        /// A connection, or a domain's waiting list.
        target: PostTarget,
        /// Region.
        stag: u32,
        /// Offset of the first buffer.
        offset: u64,
        /// Octets per buffer.
        len: u32,
        /// Buffers.
        count: u32,
        /// The work request id: message (or buffer) `i` completes with `wr_id + i`.
        #[serde(default)]
        wr_id: u64,
    },
    /// consumer → datapath: work request `wr` (RDMA Writes, Sends or Reads: the type the
    /// shared-memory post queue carries) over the control socket. Answered by
    /// [`Message::Posted`] once all its messages are queued (or wait their turn behind a Read
    /// or a fence), or by an error with none queued. A Write or Send completes
    /// ([`crate::CompletionKind::WriteSent`], [`crate::CompletionKind::SendSent`]) when the
    /// peer has acknowledged its every octet, a Read ([`crate::CompletionKind::ReadResponsePlaced`])
    /// when its Read Response is placed; at most the connection's ORD Reads are outstanding.
    Post {
        /// Request id.
        id: u64,
        /// The work request.
        wr: crate::ring::post::WorkRequest,
    },
    /// datapath → consumer: the messages of a [`Message::Post`] are queued.
    Posted {
        /// Request id.
        id: u64,
        /// Messages queued.
        count: u32,
        /// The MSN of the first Send (Sends given to the sender at once only).
        first_msn: Option<u32>,
    },
    /// consumer → datapath: send this client the completions of the domain's connections
    /// (one subscriber per domain), answered by [`Message::Subscribed`]. A protection domain
    /// belongs to the client that first creates a region in it or subscribes to it, until that
    /// client is gone or has neither a region in it nor the subscription: Subscribe,
    /// CreateRegion, DestroyRegion and PostRecv of another client naming it are refused with
    /// [`ErrorCode::Forbidden`]. (A hand-over naming the domain is not a consumer's request and
    /// is not checked.)
    Subscribe {
        /// Request id.
        id: u64,
        /// Domain.
        pd: u32,
        /// Also a post queue per worker and the workers' doorbells with the answer (see
        /// [`Message::Subscribed`]); without it (a consumer that predates them), only the two
        /// ring descriptors come.
        #[serde(default)]
        post_queues: bool,
    },
    /// consumer → datapath: end this client's subscription to the domain's completions
    /// (refused unless it is the subscriber); a domain with none of its regions left is
    /// released with it.
    Unsubscribe {
        /// Request id.
        id: u64,
        /// Domain.
        pd: u32,
    },
    /// control → datapath: until [`Message::UnwatchPort`] (or this client is gone), record
    /// the peer's last timestamped segments of every connection to local TCP port `port`
    /// that is not steered yet, so that a hand-over of such a connection starts the
    /// datapath's TCP with the TS.Recent the kernel had (docs/environment.md, "Why TS.Recent
    /// must be inherited"). Ask before the peer's last segment to the kernel can arrive: a
    /// Responder's listening port before it accepts, an Initiator's local port before it
    /// sends the Request. Several clients may watch one port.
    WatchPort {
        /// Request id.
        id: u64,
        /// Local TCP port.
        port: u16,
    },
    /// control → datapath: this client no longer watches `port`.
    UnwatchPort {
        /// Request id.
        id: u64,
        /// Local TCP port.
        port: u16,
    },
    /// datapath → subscriber: the completions come through shared memory, not this socket,
    /// and posts may go through it too. Descriptors travel with it (SCM_RIGHTS, see
    /// [`crate::read_message_with_fds`]), in this order: the sealed memfd of `rings`
    /// completion rings of `capacity` records each (one per worker; layout in
    /// [`crate::ring`]), then the eventfd the workers write when the consumer sleeps; then,
    /// when `post_capacity` is not 0 (the Subscribe asked for `post_queues`), the sealed
    /// memfd of `rings` post queues of `post_capacity` records each (queue `i` read by worker
    /// `i`; layout in [`crate::ring::post`]) and `rings` eventfds, worker `i`'s doorbell,
    /// which the consumer writes when [`crate::ring::post::PostProducer::publish`] says that
    /// worker sleeps. The
    /// subscription (and the workers' hold on the rings and queues) ends with
    /// [`Message::Unsubscribe`], when this client's connection closes, or when it subscribes
    /// to the domain again (new rings and queues).
    Subscribed {
        /// Request id.
        id: u64,
        /// Domain.
        pd: u32,
        /// Rings in the file (the datapath's workers).
        rings: u32,
        /// Records per ring (a power of two).
        capacity: u32,
        /// Records per post queue (a power of two); 0: no post queues came (not asked for,
        /// a datapath without them, or too many workers for the descriptors one message
        /// carries).
        #[serde(default)]
        post_capacity: u32,
    },
    /// Ask for statistics. The answer lists at most `max_flows` live flows, those with the
    /// lowest ids above `flows_after`; [`crate::stats::FlowPage`] says where the next page
    /// starts (docs/consumer.md, "Statistics in pages").
    GetStats {
        /// Request id.
        id: u64,
        /// List only flows whose id is above this one; `None`: from the lowest.
        #[serde(default)]
        flows_after: Option<u64>,
        /// List at most this many flows, 1 ..= [`crate::stats::MAX_FLOWS_PER_ANSWER`];
        /// `None`: that bound.
        #[serde(default)]
        max_flows: Option<u32>,
    },
    /// Statistics: per queue and per flow counters, registry and capture.
    Stats {
        /// Request id.
        id: u64,
        /// The document.
        stats: Box<crate::stats::DatapathStats>,
    },
    /// Start a packet capture for this client (one at a time per datapath): answered by
    /// [`Message::Ok`], then the datapath streams [`Message::Captured`] batches to this client
    /// and ends with [`Message::CaptureDone`] when `duration_ms` passed, `max_bytes` of pcap
    /// output (24-octet file header and 16 octets per record included) were sent, or
    /// [`Message::StopCapture`] came. Bounds: `capture::check_request`.
    StartCapture {
        /// Request id.
        id: u64,
        /// Only this flow's frames; `None`: every frame the datapath receives or sends.
        flow: Option<u64>,
        /// Bound of the pcap file the frames make, octets.
        max_bytes: u64,
        /// Bound of the capture's duration, milliseconds.
        duration_ms: u64,
        /// Octets kept of each frame.
        snaplen: u32,
    },
    /// End this client's capture now (answered by [`Message::Ok`]; [`Message::CaptureDone`]
    /// follows).
    StopCapture {
        /// Request id.
        id: u64,
    },
    /// datapath → capturing client (id 0): captured frames, in the order each worker saw
    /// them (workers' batches interleave).
    Captured {
        /// The frames.
        frames: Vec<CapturedFrame>,
    },
    /// datapath → capturing client (id 0): the capture ended; nothing of it follows.
    CaptureDone {
        /// Why: "duration", "max_bytes", "stopped", "datapath stopping".
        reason: String,
        /// Frames sent to the client.
        frames: u64,
        /// Frames seen but not sent: worker buffers full, or the client's queue full.
        dropped: u64,
    },
    /// application → datapath: allocate a protection domain owned by this client. Its
    /// number is the datapath's choice (at least [`crate::FIRST_ALLOCATED_PD`]); every
    /// request of another client naming it is refused. Answered by [`Message::PdAllocated`].
    AllocPd {
        /// Request id.
        id: u64,
    },
    /// datapath → application: the domain.
    PdAllocated {
        /// Request id.
        id: u64,
        /// The domain.
        pd: u32,
    },
    /// application → datapath: release an allocated domain; refused while a region, a
    /// subscription, a listener, a setup or a connection of it remains. Answered by Ok.
    DeallocPd {
        /// Request id.
        id: u64,
        /// The domain.
        pd: u32,
    },
    /// application → datapath: listen for MPA connections on `bind`; the connection manager
    /// binds a kernel socket there and each Request arrives as
    /// [`CmEvent::ConnectRequest`]. Answered by [`Message::Listening`] once bound.
    Listen {
        /// Request id.
        id: u64,
        /// The domain accepted connections place into (this client's).
        pd: u32,
        /// Address and port (port 0: one is chosen).
        bind: SocketAddr,
        /// The listener's policy.
        #[serde(default)]
        options: ListenOptions,
    },
    /// datapath → application: the listener is bound.
    Listening {
        /// Request id.
        id: u64,
        /// The listener.
        listen_id: u64,
        /// Where it listens (the port chosen for port 0).
        bound: SocketAddr,
    },
    /// application → datapath: stop listening; requests not yet decided are rejected.
    /// Answered by Ok.
    StopListening {
        /// Request id.
        id: u64,
        /// The listener.
        listen_id: u64,
    },
    /// application → datapath: connect to `remote` as an MPA Initiator; the connection
    /// manager does, and the outcome arrives as a [`CmEvent`]. Answered by
    /// [`Message::Connecting`] at once.
    Connect {
        /// Request id.
        id: u64,
        /// The domain the connection places into (this client's).
        pd: u32,
        /// The Responder.
        remote: SocketAddr,
        /// The Request's parameters.
        #[serde(default)]
        options: ConnectOptions,
    },
    /// datapath → application: the setup started.
    Connecting {
        /// Request id.
        id: u64,
        /// The connection, named by its events.
        conn_id: u64,
    },
    /// application → datapath: accept connection request `conn_id` (its accepting Reply
    /// carries `private_data`); [`CmEvent::Established`] follows. Answered by Ok.
    Accept {
        /// Request id.
        id: u64,
        /// The request.
        conn_id: u64,
        /// The Reply's private data. (IRD and ORD are the listener's, see
        /// [`ListenOptions`].)
        #[serde(default)]
        private_data: Vec<u8>,
    },
    /// application → datapath: reject connection request `conn_id` (a Reply with R=1
    /// carrying `private_data`). Answered by Ok.
    Reject {
        /// Request id.
        id: u64,
        /// The request.
        conn_id: u64,
        /// The rejecting Reply's private data.
        #[serde(default)]
        private_data: Vec<u8>,
    },
    /// datapath → application (id 0): what happened to a listener or connection of its.
    CmEvent {
        /// The event.
        event: CmEvent,
    },
    /// connection manager → datapath: this client sets up the applications' connections
    /// (one at a time; an operator only). Answered by Ok.
    ServeConnections {
        /// Request id.
        id: u64,
    },
    /// datapath → connection manager (id 0): bind a listener for an application and answer
    /// with [`Message::ListenResult`].
    ManagerListen {
        /// The listener.
        listen_id: u64,
        /// The application's domain, which the hand-overs name.
        pd: u32,
        /// Where.
        bind: SocketAddr,
        /// Its policy.
        options: ListenOptions,
    },
    /// connection manager → datapath: the listener is bound (`bound`) or could not be
    /// (`error`). Answered by Ok.
    ListenResult {
        /// Request id.
        id: u64,
        /// The listener.
        listen_id: u64,
        /// Where it listens.
        bound: Option<SocketAddr>,
        /// Why it could not.
        error: Option<String>,
    },
    /// datapath → connection manager (id 0): close the listener (requests in setup are
    /// rejected).
    ManagerStopListening {
        /// The listener.
        listen_id: u64,
    },
    /// connection manager → datapath: an MPA Request arrived at an application's listener.
    /// Answered by [`Message::ConnectionQueued`] (the application was told) or an error
    /// (reject the connection).
    ConnectionRequested {
        /// Request id.
        id: u64,
        /// The listener.
        listen_id: u64,
        /// The Request.
        params: PeerParams,
        /// Revision 2: the Initiator's IRD and ORD.
        peer_ird_ord: Option<(u16, u16)>,
    },
    /// datapath → connection manager: the request's connection.
    ConnectionQueued {
        /// Request id.
        id: u64,
        /// The connection.
        conn_id: u64,
    },
    /// datapath → connection manager (id 0): the application accepted or rejected.
    ManagerDecision {
        /// The connection.
        conn_id: u64,
        /// What to do.
        decision: Decision,
    },
    /// datapath → connection manager (id 0): connect for an application; the hand-over
    /// names `conn_id`, or [`Message::SetupEnded`] says why there is none.
    ManagerConnect {
        /// The connection.
        conn_id: u64,
        /// The application's domain, which the hand-over names.
        pd: u32,
        /// The Responder.
        remote: SocketAddr,
        /// The Request's parameters.
        options: ConnectOptions,
    },
    /// datapath → connection manager (id 0): abandon the setup of `conn_id` (its
    /// application is gone or stopped listening, or it took too long).
    ManagerCancel {
        /// The connection.
        conn_id: u64,
        /// Why.
        reason: String,
    },
    /// connection manager → datapath: an application's setup ended without a hand-over.
    /// Answered by Ok.
    SetupEnded {
        /// Request id.
        id: u64,
        /// The connection.
        conn_id: u64,
        /// How.
        outcome: SetupOutcome,
    },
    /// Plain success.
    Ok {
        /// Request id.
        id: u64,
    },
    /// A refused request.
    Error {
        /// Request id (0 when the request could not be parsed).
        id: u64,
        /// What kind of failure.
        code: ErrorCode,
        /// Details.
        message: String,
    },
}

impl Message {
    /// A statistics request for the first page: the flows of lowest id, as many as one answer
    /// holds.
    pub fn get_stats(id: u64) -> Message {
        Message::GetStats {
            id,
            flows_after: None,
            max_flows: None,
        }
    }
}
