//! The application interface of mpa-xdp, shaped like verbs and rdma_cm (docs/verbs.md maps
//! every call; docs/consumer.md is the full reference): a [`Consumer`] is the context (a
//! connection to one datapath's control socket); through it an application allocates
//! protection domains, registers regions, subscribes to completions that arrive through
//! shared memory, posts work requests (over the shared-memory post queue or the socket),
//! and listens, accepts, rejects and connects, with the connection manager (`mpa-control
//! serve`) doing the kernel side.
//!
//! The wire types it speaks (messages, completion records, work requests, connection events)
//! are `mpa-ctl-proto`'s, re-exported here so that an application needs this crate only.
#![deny(unsafe_code)]

pub mod consumer;

pub use consumer::{
    ConnectionEnded, ConnectionEvent, Consumer, ConsumerError, MappedRegion,
    DEFAULT_BUSY_POLL_YIELD_EVERY, MAX_CONNECTION_EVENTS,
};
pub use mpa_ctl_proto::cm::{CmEvent, ConnectOptions, ListenOptions, PeerParams};
pub use mpa_ctl_proto::ring::post::{PostOp, SgList, Sge, WorkRequest, MAX_SGE};
pub use mpa_ctl_proto::{
    Completion, CompletionKind, CompletionStatus, PostTarget, RefusalCode, RegionInfo,
    TerminateInfo, FIRST_ALLOCATED_PD,
};
