//! The device side of a worker: AF_XDP sockets, their UMEM and rings, the ring trait a worker
//! runs on (and its in-memory form), multi-buffer descriptor chains, frame capture, and the
//! NIC's queues (channel counts and ntuple rules through the ethtool interface).

pub(crate) mod arena;
pub mod capture;
pub(crate) mod chain;
pub mod ethtool;
pub mod nic_queues;
pub(crate) mod prefetch;
pub mod ring;
pub mod xsk;

/// The largest received frame a worker takes, and the most descriptors it may come in: longer
/// chains are dropped and counted as overlong.
pub use chain::{MAX_DESCS, MAX_FRAME};
