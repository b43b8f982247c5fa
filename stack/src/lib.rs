//! mpa-xdp's protocol stack, sans I/O: everything between a received frame and octets placed
//! in registered memory, and back to the frames a flow sends, with time passed in and no
//! socket, ring or thread of its own (the datapath's workers drive it; tests, fuzzing and
//! `mpa-bench pipeline` drive it in memory).
//!
//! Modules, in the order a received frame meets them:
//! * [`wire`]: byte views (smoltcp style) of Ethernet, IP and TCP headers; frame templates.
//! * [`flow_table`]: a worker's flows by 4-tuple.
//! * [`flow`]: one connection: [`tcp::Connection`] + `receiver::MpaReceiver` +
//!   `sender::FpduSource`.
//! * [`tcp`]: a TCP for established connections handed over from the kernel.
//! * [`receiver`]: FPDU decoding and location, RTR check, RFC 5040/5041 placement checks and
//!   Terminates, completions; it places into [`region::RegionMemory`].
//! * [`sender`]: RDMA Writes, Sends, Read Requests and Read Responses as FPDUs.
//! * [`budget`]: the one memory budget flows draw from.
//! * [`sim`], [`fuzz`]: building blocks to drive flows in memory; the fuzz entry points.
//!
//! `unsafe` is forbidden in every module but the TCP checksum's SIMD kernel
//! (`wire/checksum/x86.rs`: its loads and the calls of its `#[target_feature]` functions).
//! Registered memory is mapped and copied into by `mpa_shm`.
#![deny(
    unsafe_code,
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks
)]
#![warn(missing_docs)]

pub mod budget;
pub mod flow;
pub mod flow_table;
pub mod fuzz;
pub mod receiver;
pub mod region;
pub mod sender;
pub mod sim;
pub mod tcp;
pub mod wire;
