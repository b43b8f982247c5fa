//! The one set of fixtures of mpa-xdp's whole-system tests (`tests/tests/*.rs`): everything
//! that needs namespaces, root, several processes, AF_XDP, XDP attach or TCP_REPAIR.
//!
//! * The test bed, the netns helper and the privilege gate are `mpa-testbed`'s (re-exported
//!   here): [`TestBed`], [`run_in_netns`], [`require_privileged`].
//! * `start_datapath` and the hand-over of an accepted connection are `mpa-bench`'s (the
//!   experiments run the datapath the same way): [`datapath`] and [`hand_over`] wrap them.
//! * [`bins`]: the workspace's binaries, built on demand; [`frames`]: crafted frames;
//!   [`raw`]: AF_PACKET and AF_XDP sockets; [`xdp`]: the XDP program on the bed;
//!   [`peers`]: MPA peers in ns a and the datapath's counters; [`procs`]: `mpa-datapath` as
//!   a process (to kill it, or watch it fail); [`ControlDaemon`]: `mpa-control serve` with
//!   its log; [`HostilePeer`]: `mpa-bench`'s scriptable
//!   hostile peer (our socket in ns a frozen, every frame crafted over AF_PACKET).

pub mod bins;
pub mod daemon;
pub mod frames;
pub mod peers;
pub mod procs;
pub mod raw;
pub mod xdp;

pub use bins::bin;
pub use daemon::ControlDaemon;
pub use mpa_bench::hostile::{HostileConfig, HostilePeer};
pub use mpa_bench::{accept_and_hand_over, start_datapath, DatapathOptions, HandedOver, Responder};
pub use mpa_testbed::{
    require_privileged, run_in, run_in_netns, skip_or_fail, BedConfig, Conn, TestBed,
};
pub use peers::{
    datapath, ended_flow, hand_over, initiator_in_a, listen_in, responder_in_a, stats,
    wait_ended_flow, PeerListener,
};
pub use procs::DatapathProcess;
