//! Connection setup for mpa-xdp: kernel sockets, the MPA startup phase, and the TCP_REPAIR
//! hand-over of a quiet connection to the datapath (docs/architecture.md, "Connection setup";
//! docs/environment.md, "TCP_REPAIR hand-over").
#![forbid(unsafe_code)]

pub mod capture;
pub mod config;
pub mod daemon;
pub mod datapath_client;
pub mod freeze;
mod handover;
pub use handover::Placement;
pub mod initiator;
pub mod neighbour;
pub mod responder;
pub mod setup_error;
