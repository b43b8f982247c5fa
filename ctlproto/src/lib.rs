//! The control-socket protocol spoken between `mpa-control` (connection setup) and
//! `mpa-datapath` over a Unix stream socket. Both sides import this crate only, so the
//! connection-setup process links neither AF_XDP nor libbpf code.
//!
//! Framing: every message is `length (u32 BE) | JSON object`, at most [`MAX_MESSAGE`] octets
//! of JSON. The first message each way is [`Message::Hello`] carrying [`VERSION`]; the datapath
//! answers a Hello of another version with its own (and nothing else), so the client can tell
//! the user ([`ProtoError::Version`] from [`handshake`]). Every message carries a request id
//! so replies can be matched; datapath notifications use id 0.
//!
//! Modules: `message` (every [`Message`]), `framing` (length prefix, descriptors, handshake),
//! `handover` (the frozen TCP and MPA state of one connection), `region` and `completion`
//! (registered memory and what is reported about it), [`ring`] (completions and posts through
//! shared memory, mapped with [`shm`], the `mpa-shm` crate), [`cm`] (applications' listen, accept, reject, connect and their events),
//! [`capture`], [`client`]. The application's API over all of it is the `mpa-app` crate.
//!
//! Three mpa-xdp conventions that are not MPA live here too, because every program taking part
//! in a demo or benchmark (connection setup, reference peer, bench) shares this crate:
//! [`pattern`] (the deterministic payload every tool sends and checks), [`region_ad`] (a
//! Responder's region advertisement in its Reply's private data, with the placement both
//! sides derive from it) and [`clock_probe`] (the probes by which the bench measures a peer
//! host's clock offset).
#![deny(unsafe_code)]

pub mod capture;
pub mod client;
pub mod clock_probe;
pub mod cm;
pub mod fuzz;
pub mod pattern;
pub mod region_ad;
pub mod ring;
pub mod stats;

/// Shared memory (sealed memfds, their mappings and copies): the `mpa-shm` crate, named here
/// too because regions, rings and post queues travel as its descriptors.
pub use mpa_shm as shm;

mod completion;
mod framing;
mod handover;
mod message;
mod region;
mod rtr_names;
#[cfg(test)]
mod tests;

pub use capture::{CaptureDirection, CapturedFrame};
pub use completion::{Completion, CompletionKind, CompletionStatus, RefusalCode};
pub use framing::{
    encode_message, handshake, read_message, read_message_counted, read_message_with_fd,
    read_message_with_fds, read_message_with_fds_counted, write_frame, write_frame_with_fd,
    write_frame_with_fds, write_message, write_message_with_fd, ProtoError, MAX_FDS,
};
pub use handover::{
    AppHandOver, HandOver, MpaParams, Role, TcpSnapshot, TsSnapshot, DATAPATH_MAX_IRD,
    DATAPATH_MAX_ORD,
};
pub use message::{ErrorCode, Message, TerminateInfo};
pub use region::{PostTarget, RegionInfo};

/// The lowest protection domain [`Message::AllocPd`] hands out; lower numbers are the
/// domains an operator's configuration names (a TOML listener's `pd`), owned by the first
/// client to use them.
pub const FIRST_ALLOCATED_PD: u32 = 0x0100_0000;

/// Protocol version. Bump on any incompatible change.
pub const VERSION: u32 = 2;
/// Largest JSON body accepted: statistics of ~10,000 flows (≈330 octets each) fit; the peer
/// is a local process of the same user, the bound only stops runaway lengths.
pub const MAX_MESSAGE: usize = 8 * 1024 * 1024;
