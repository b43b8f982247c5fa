//! `mpa-bench`'s library: whole experiments on a private namespace test bed, and the fixtures
//! the whole-system tests (`tests/`, `mpa-tests`) share with them.
//!
//! * [`datapath`]: THE `start_datapath` and the hand-over of an accepted connection to it.
//! * [`demo`]: the datapath and the hand-over listener in ns b, `mpa-peer connect` in ns a;
//!   goodput, FPDU counts, errors and the digest check.
//! * [`compare`]: the same sender against the datapath and against the blocking kernel-TCP
//!   Responder (`mpa-peer listen`), same bed, same run.
//! * [`lat`]: one-way latency per message (hdrhistogram), datapath vs the kernel-TCP
//!   Responder, same bed and sender.
//! * [`scale`]: many connections at once through `mpa-control serve`.
//! * [`pipeline`]: the datapath's receive pipeline (`Worker<MemRing>`) on frames prepared in
//!   memory: ns per segment, no kernel sender, no namespace, no root.
#![forbid(unsafe_code)]

pub mod compare;
pub mod datapath;
pub mod demo;
pub mod lat;
pub mod options;
pub mod peer;
pub mod pipeline;
pub mod placement;
pub mod scale;

pub use compare::compare;
pub use datapath::{
    accept_and_hand_over, respond_in, start_datapath, temp_path, DatapathOptions, HandedOver,
    Responder,
};
pub use demo::demo;
pub use lat::{lat, LatArgs};
pub use options::{Align, Op, Run, Scale};
pub use peer::sibling;
pub use pipeline::{pipeline, pipeline_many, PipelineArgs, PipelineOpts, PipelineReport};
pub use scale::scale;
