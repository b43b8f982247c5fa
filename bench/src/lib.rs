//! `mpa-bench`'s library: whole experiments on a private namespace test bed (or two hosts),
//! one module per experiment, each side by side with kernel TCP where it has a counterpart.
//!
//! * [`demo`](mod@demo): one transfer through the datapath, checked octet for octet.
//! * [`bw`]: goodput and CPU per octet, the datapath against the blocking kernel-TCP
//!   Responder (`mpa-peer listen`), same bed, same sender, same run, rounds alternating.
//! * [`lat`](mod@lat): one-way latency per message (hdrhistogram), and the Write ping-pong.
//! * [`setup`](mod@setup): many connections at once through `mpa-control serve`: hand-overs
//!   per second and hand-over latency percentiles.
//! * [`pipeline`](mod@pipeline): the receive pipeline (`Worker<MemRing>`) on frames prepared
//!   in memory: ns per segment, no kernel sender, no namespace, no root.
//! * [`hostile`]: hostile-input classes against the live datapath beside an octet-exact
//!   bystander.
//! * [`soak`]: one datapath for minutes under waves of connections.
//! * [`suite`]: `make bench`'s standard set, its summary, JSON, plots and the pages it keeps
//!   current.
//! * [`ab`]: an old build against a new one; [`ack_timing`]: ACK timing from a capture.
//! * [`bed`]: the shared bed, framing and transfer options, `mpa-peer` processes, the consumer
//!   side, CPU and TCP accounting; [`report`]: the typed JSON documents and the progress line.
//!
//! Starting a datapath and the hostile peer are `mpa-harness`'s, shared with the tests.
#![forbid(unsafe_code)]
// Results go through `mpa_cli::outln!`: a closed stdout must end the run quietly, not panic.
#![deny(clippy::print_stdout)]

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

pub use bed::options::Run;
pub use lat::LatArgs;
pub use pipeline::PipelineArgs;
pub use setup::SetupArgs;
