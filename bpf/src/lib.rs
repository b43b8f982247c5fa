//! The XDP steering program of the MPA data path, and a small safe API over it.
//!
//! The program (`src/bpf/steer.bpf.c`, compiled by build.rs with libbpf-cargo and embedded)
//! parses Ethernet (up to eight 802.1Q/802.1ad tags), IPv4 (any IHL) or IPv6 (with its
//! extension-header chain), and TCP. An unfragmented segment, untagged or behind one tag,
//! whose 4-tuple is in the `flows` map goes to the AF_XDP socket registered for the receiving
//! RX queue, or is **dropped** when there is none: a steered flow's frames never reach the
//! kernel, whose frozen (TCP_REPAIR) socket for it must not see them. For the same reason
//! fragments, IPv6 extension-header chains and VLAN stacks that may carry TCP between the two
//! hosts of a steered flow are dropped and counted (docs/architecture.md, "XDP steering").
//! Everything else — SYNs of unknown flows, ARP, ND, ICMP, other protocols, frames that do
//! not parse — goes to the kernel.
//!
//! ```no_run
//! use mpa_bpf::{ifindex_of, AttachMode, FlowKey, FlowValue, XdpSteering};
//! # fn main() -> Result<(), mpa_bpf::BpfError> {
//! let steering = XdpSteering::attach(ifindex_of("eth0")?, AttachMode::DriverOrGeneric)?;
//! let key = FlowKey::new("10.0.0.2:7777".parse().unwrap(), "10.0.0.1:40000".parse().unwrap())?;
//! steering.insert_flow(&key, FlowValue::new(1))?;
//! // ... set_xsk(queue, fd) for every RX queue ...
//! println!("{:?}", steering.counters()?);
//! # Ok(()) }
//! ```
//!
//! libbpf's own messages (including the verifier log when a load fails) are sent to
//! `tracing` under the target `libbpf`; the first [`XdpSteering::load`] installs that
//! process-wide.
//!
//! Needs `CAP_BPF` and `CAP_NET_ADMIN` (root).

// `unsafe` only in `link` (BPF link creation and queries libbpf-rs does not offer).
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod counters;
mod error;
mod flow;
mod link;
pub mod netns;
mod steering;
mod ts;

pub use counters::XdpCounters;
pub use error::{BpfError, Iface, MapName, Result};
pub use flow::{FlowKey, FlowValue};
pub use steering::{AttachMode, XdpAction, XdpSteering};
pub use ts::{choose_ts_recent, TsSegment, TS_SEGMENTS};

/// RX queues the XSK map can hold (`xsks` max_entries). Steered frames arriving on a higher
/// queue are dropped.
pub const MAX_QUEUES: u32 = 64;

/// Flows the `flows` map can hold (max_entries).
pub const MAX_FLOWS: u32 = 16384;

/// Local ports the `watch_ports` map can hold.
pub const MAX_WATCHED_PORTS: u32 = 256;

/// Connections whose timestamped segments `ts_records` holds at once (an LRU map: the least
/// recently updated go first).
pub const MAX_TS_RECORDS: u32 = 4096;

/// The index of interface `name` in the calling thread's network namespace
/// (`if_nametoindex(3)`; from a thread that entered another namespace with
/// [`netns::NetNs::run`] it resolves there).
pub fn ifindex_of(name: &str) -> Result<u32> {
    nix::net::if_::if_nametoindex(name).map_err(|e| BpfError::NoSuchInterface {
        name: name.to_owned(),
        source: e.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_interface_is_typed() {
        let e = ifindex_of("mpab-no-such-if").unwrap_err();
        assert!(matches!(e, BpfError::NoSuchInterface { .. }), "{e}");
        assert!(e.to_string().contains("mpab-no-such-if"));
    }

    #[test]
    fn handles_move_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<XdpSteering>();
        send_sync::<netns::NetNs>();
    }

    #[test]
    fn loopback_resolves() {
        assert!(ifindex_of("lo").unwrap() > 0);
    }
}
