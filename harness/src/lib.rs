//! What mpa-xdp's whole-system tests (`tests/`) and its benchmark (`mpa-bench`) share, so
//! that an experiment and a test run the system the same way:
//!
//! * [`datapath`]: a datapath started on a namespace bed ([`start_datapath`]), and the
//!   hand-over of an accepted MPA connection to it ([`accept_and_hand_over`], [`respond_in`]).
//! * [`procs`]: `mpa-datapath` as a process (to kill it, or watch it fail); [`control`]:
//!   `mpa-control serve` as a process with its log.
//! * [`bins`]: the workspace's binaries ([`sibling`]; [`bin`] builds them first).
//! * [`completions`]: a consumer's completions read on a thread of their own during a
//!   transfer ([`CompletionReader`]).
//! * [`hostile_peer`]: a scriptable hostile MPA peer (a real connection, our kernel socket in
//!   ns a frozen, every frame crafted over AF_PACKET).
//!
//! The namespace bed itself is `mpa-testbed`'s.
#![forbid(unsafe_code)]

pub mod bins;
pub mod completions;
pub mod control;
pub mod datapath;
pub mod hostile_peer;
pub mod procs;

pub use bins::{bin, c_library_dir, example, sibling};
pub use completions::CompletionReader;
pub use control::ControlDaemon;
pub use datapath::{
    accept_and_hand_over, respond_in, start_datapath, temp_path, DatapathOptions, HandedOver,
    Responder,
};
pub use hostile_peer::{HostileConfig, HostilePeer};
pub use procs::DatapathProcess;
