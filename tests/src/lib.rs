//! The one set of fixtures of mpa-xdp's whole-system tests (`tests/tests/*.rs`): everything
//! that needs namespaces, root, several processes, AF_XDP, XDP attach or TCP_REPAIR.
//!
//! * The test bed, the netns helper and the privilege gate are `mpa-testbed`'s (re-exported
//!   here): [`TestBed`], [`run_in_netns`], [`require_privileged`].
//! * What the benchmark runs the same way is `mpa-harness`'s (re-exported here): starting a
//!   datapath and handing connections over to it ([`datapath`] and [`hand_over`] wrap them),
//!   the workspace's binaries ([`bin`]), `mpa-datapath` as a process ([`DatapathProcess`]),
//!   `mpa-control serve` with its log ([`ControlDaemon`]) and the scriptable hostile peer
//!   ([`HostilePeer`]).
//! * [`capture`]: `tcpdump` writing a capture; [`frames`]: crafted frames; [`raw`]:
//!   AF_PACKET and AF_XDP sockets; [`xdp`]: the XDP program on the bed; [`peers`]: MPA peers
//!   in ns a and the datapath's counters.

pub mod capture;
pub mod frames;
pub mod peers;
pub mod raw;
pub mod xdp;

pub use mpa_harness::{
    accept_and_hand_over, bin, start_datapath, ControlDaemon, DatapathOptions, DatapathProcess,
    HandedOver, HostileConfig, HostilePeer, Responder,
};
pub use mpa_testbed::{
    require_privileged, run_in, run_in_netns, skip_or_fail, BedConfig, Conn, TestBed,
};
pub use peers::{
    datapath, datapath_initiates, ended_flow, gone_cleanly, hand_over, initiator_in_a, listen_in,
    responder_in_a, stats, wait_ended_flow, writes_from_a, PeerListener,
};
