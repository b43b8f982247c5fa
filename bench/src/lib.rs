//! `mpa-bench`'s library: whole experiments on a private namespace test bed, and the fixtures
//! the whole-system tests (`tests/`, `mpa-tests`) share with them.
//!
//! * [`datapath`]: THE `start_datapath` and the hand-over of an accepted connection to it.
//! * [`demo`]: the datapath and the hand-over listener in ns b, `mpa-peer connect` in ns a;
//!   goodput, FPDU counts, errors and the digest check.
//! * [`bw`]: goodput and CPU per octet, the datapath against the blocking kernel-TCP
//!   Responder (`mpa-peer listen`), same bed, same sender, same run, rounds alternating.
//! * [`lat`]: one-way latency per message (hdrhistogram), datapath vs the kernel-TCP
//!   Responder, same bed and sender.
//! * [`setup`]: many connections at once through `mpa-control serve`: hand-overs per second
//!   and hand-over latency percentiles.
//! * [`suite`]: `make bench`'s bounded standard set, its summary, JSON and plots ([`plot`]).
//! * [`report`], [`cpu`], [`progress`]: the JSON document, CPU accounting, the progress line.
//! * [`hostile`]: hostile-input classes against the live datapath (a scriptable hostile peer
//!   on a frozen kernel socket, frames over AF_PACKET) beside an octet-exact bystander.
//! * [`pipeline`]: the datapath's receive pipeline (`Worker<MemRing>`) on frames prepared in
//!   memory: ns per segment, no kernel sender, no namespace, no root.
#![forbid(unsafe_code)]

pub mod ab;
pub mod ack_timing;
pub mod bed;
pub mod bw;
pub mod demo;
pub mod hostile;
pub mod lat;
pub mod pipeline;
pub mod report;
pub mod setup;
pub mod soak;
pub mod suite;

pub use bed::options::{Align, Op, Run};
pub use bw::BwArgs;
pub use demo::demo;
pub use lat::{lat, LatArgs};
pub use pipeline::{pipeline, pipeline_many, PipelineArgs, PipelineOpts, PipelineReport};
pub use setup::{setup, SetupArgs};
