//! The MPA data path: AF_XDP workers, flow table, placement, and a minimal TCP for
//! established connections handed over from the kernel with TCP_REPAIR.
//!
//! Modules so far:
//! * [`wire`]: byte views (smoltcp style) for the headers the data path parses and builds: TCP.
//! * [`xsk`]: one AF_XDP socket per RX queue with its UMEM and rings (the only `unsafe`).
//! * [`tcp`]: a sans-I/O TCP for established connections only (receive fast path, reassembly,
//!   ACK policy, and reliable sending of the few octets the data path itself sends).
//!
//! `unsafe` is allowed crate-wide because AF_XDP code (rings, UMEM) will live here; every
//! module that does not need it carries `#![forbid(unsafe_code)]`.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod capture;
pub mod flow;
pub mod placement;
pub mod region;
pub mod registry;
pub mod server;
pub mod tcp;
pub mod wire;
pub mod worker;
pub mod xsk;
