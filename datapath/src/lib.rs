//! The MPA data path process: AF_XDP sockets and their rings, registered memory shared with
//! consumers, one polling worker per queue driving the sans-I/O protocol stack
//! (`mpa_stack`), and the server that owns them (control socket, XDP steering, hand-overs).
//!
//! Modules, in the order a received frame meets them:
//! * [`io`]: one AF_XDP socket per RX queue with its UMEM and rings ([`io::xsk`]); the
//!   [`io::ring::FrameRing`] trait a worker runs on, and an in-memory ring
//!   ([`io::ring::MemRing`]); multi-buffer descriptor chains; capture to pcap.
//! * [`worker`]: one polling thread per queue: frames → flows (`mpa_stack::flow`), timers,
//!   TX, completions out.
//! * [`memory`]: registered memory (memfd regions, STags, posted buffers) and the
//!   subscribers' shared-memory completion rings.
//! * [`server`]: the datapath process: control socket, workers, XDP steering.
//! * [`probe`]: `mpa-datapath probe`, what an interface's NIC and driver can do for the
//!   datapath (read-only; netlink and sysfs).
//!
//! `unsafe` is allowed only for the boundary that needs it: [`io::xsk`] (the AF_XDP rings and
//! UMEM) and `io::prefetch` (the prefetch of received frames). Registered memory is mapped
//! and copied into by `mpa_ctl_proto::shm` (shared with the completion rings and the
//! consumer). Every other module carries `#![forbid(unsafe_code)]`.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod io;
pub mod memory;
pub mod probe;
pub mod server;
pub mod worker;
