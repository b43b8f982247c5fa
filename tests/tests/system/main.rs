//! Every whole-system test of mpa-xdp but those that change what the whole machine shares
//! (`tests/tests/machine_wide/`), in one test binary: namespaces, processes, real sockets, XDP and
//! TCP_REPAIR (docs/testing.md). One module per subject; libtest runs the tests side by side,
//! each on a namespace bed of its own (unique names), so that a test waiting on the network or
//! a timer leaves the machine to the others.

mod ack_timing;
mod app_connections;
mod bed;
mod c_library;
mod completions;
mod connection_limit;
mod consumer_example;
mod control_daemon;
mod control_limits;
mod control_socket_takeover;
mod datapath_sends;
mod domains;
mod e2e;
mod faults;
mod freeze;
mod handover;
mod help_texts;
mod hostile;
mod impair;
mod initiator;
mod logs;
mod nic_probe;
mod nic_queues;
mod operations;
mod pingpong_example;
mod placement;
mod post_queue;
mod registered_memory;
mod rtr_interop;
mod run_to_completion;
mod scale;
mod statistics_pages;
mod steering_state;
mod streaming_stores;
mod ts_recent;
mod xdp_program;
mod xdp_steering;
mod xsk;
