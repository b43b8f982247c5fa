//! The MPA data path: AF_XDP workers, flow table, placement, and a minimal TCP for
//! established connections handed over from the kernel with TCP_REPAIR.
//!
//! Modules, in the order a received frame meets them:
//! * [`xsk`]: one AF_XDP socket per RX queue with its UMEM and rings; [`ring`]: the
//!   [`ring::FrameRing`] trait a worker runs on, and an in-memory ring ([`ring::MemRing`]).
//! * [`worker`]: one polling thread per queue: frames → flows, timers, TX, completions out
//!   ([`completions`]: into the subscribers' shared-memory rings).
//! * [`wire`]: byte views (smoltcp style) of Ethernet, IP and TCP headers; frame templates.
//! * [`flow`]: one connection: [`tcp::Connection`] + [`receiver::MpaReceiver`].
//! * [`tcp`]: a sans-I/O TCP for established, handed-over connections.
//! * [`receiver`]: the sans-I/O MPA receiver: FPDU decoding and location, RTR check,
//!   RFC 5040/5041 placement checks and Terminates, completions.
//! * [`region`], [`registry`]: registered memory (memfd regions, STags, posted buffers).
//! * [`server`]: the datapath process: control socket, workers, XDP steering; [`capture`].
//!
//! `unsafe` is allowed crate-wide only for the boundary that needs it: [`xsk`] (the AF_XDP
//! rings and UMEM, and the prefetch of received frames), and the TCP checksum's SIMD kernel
//! (`wire/checksum/x86.rs`: its loads and the calls of its `#[target_feature]` functions;
//! [`wire`] denies it everywhere else). Registered memory is mapped and copied into by
//! `mpa_ctl_proto::shm` (shared with the completion rings and the consumer). Every other
//! module carries `#![forbid(unsafe_code)]`.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod budget;
pub mod capture;
pub mod chain;
pub mod completions;
pub mod flow;
pub mod flow_table;
pub mod fuzz;
pub mod receiver;
pub mod region;
pub mod registry;
pub mod ring;
pub mod sender;
pub mod server;
pub mod sim;
pub mod strays;
pub mod tcp;
pub mod wire;
pub mod worker;
pub mod xsk;
