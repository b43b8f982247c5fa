//! The device side of a worker: AF_XDP sockets, their UMEM and rings, the ring trait a worker
//! runs on (and its in-memory form), multi-buffer descriptor chains, and frame capture.

pub mod capture;
pub(crate) mod chain;
pub(crate) mod prefetch;
pub mod ring;
pub mod xsk;
