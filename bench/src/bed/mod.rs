//! The namespace bed every experiment runs on, and what runs on it beside the system under
//! test: the options shared by the experiments (bed, MTU, framing, the two-host interface
//! arguments), `mpa-peer` processes as senders and kernel-TCP receivers, the consumer side of
//! a placing run, CPU accounting, the Linux sender's TCP counters, and the bed split over two
//! CPUs.

pub mod cpu;
pub mod options;
pub mod peer;
pub mod placement;
pub mod sender_tcp;
pub mod split;
