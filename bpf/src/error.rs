//! Errors, each naming the step that failed and, where one is involved, the interface.

use std::fmt;
use std::io;
use std::net::SocketAddr;

use crate::AttachMode;

/// An interface as errors and logs name it: its index, and its name when it could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    /// Interface index (in the network namespace the program is attached in).
    pub index: u32,
    /// Interface name, if it could be resolved when the error was made.
    pub name: Option<String>,
}

impl Iface {
    /// Resolves the name of `index` in the calling thread's network namespace, if it can.
    pub(crate) fn resolve(index: u32) -> Self {
        let name = nix::net::if_::if_indextoname(index)
            .ok()
            .map(|n| n.to_string_lossy().into_owned());
        Self { index, name }
    }
}

impl fmt::Display for Iface {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{name} (ifindex {})", self.index),
            None => write!(f, "ifindex {}", self.index),
        }
    }
}

/// A BPF map of the steering program, for errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapName {
    /// `flows`: 4-tuple → flow.
    Flows,
    /// `xsks`: RX queue → AF_XDP socket.
    Xsks,
    /// `counters`: per-CPU counters.
    Counters,
    /// `hosts`: (local, remote) address pair → flows steered between them.
    Hosts,
    /// `watch_ports`: local ports whose connections' timestamps are recorded.
    WatchPorts,
    /// `ts_records`: the peer's last timestamped segments per watched connection.
    TsRecords,
}

impl MapName {
    /// The map's name in the BPF object.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Flows => "flows",
            Self::Xsks => "xsks",
            Self::Counters => "counters",
            Self::Hosts => "hosts",
            Self::WatchPorts => "watch_ports",
            Self::TsRecords => "ts_records",
        }
    }
}

impl fmt::Display for MapName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What went wrong, and where.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    /// libbpf could not parse the embedded BPF object.
    #[error("open the embedded XDP object")]
    Open(#[source] libbpf_rs::Error),

    /// The kernel refused the program or a map (verifier, missing privilege, memory).
    #[error("load the XDP program into the kernel (verifier log, if any, went to the `libbpf` tracing target)")]
    Load(#[source] libbpf_rs::Error),

    /// The object lacks a program or map this crate expects (build mismatch).
    #[error("the XDP object has no {kind} named `{name}`")]
    Missing {
        /// "program" or "map".
        kind: &'static str,
        /// The missing name.
        name: &'static str,
    },

    /// A map's key size, value size or capacity differs from the Rust mirror of the C code.
    #[error("map `{map}`: {what} is {actual}, this crate expects {expected}")]
    Layout {
        /// The map.
        map: MapName,
        /// "key size", "value size" or "max_entries".
        what: &'static str,
        /// Size in the loaded object.
        actual: u32,
        /// Size the Rust side encodes.
        expected: u32,
    },

    /// An interface index that the kernel API cannot take (above `i32::MAX`).
    #[error("invalid interface index {0}")]
    InvalidIfindex(u32),

    /// No interface of that name in the calling thread's network namespace.
    #[error("no interface named `{name}`")]
    NoSuchInterface {
        /// The name looked up.
        name: String,
        /// The lookup's error.
        #[source]
        source: io::Error,
    },

    /// The program is already attached; detach first.
    #[error("the XDP program is already attached to {iface}")]
    AlreadyAttached {
        /// Where it is attached.
        iface: Iface,
    },

    /// Attaching in the requested mode failed (`EBUSY`/`EEXIST`: another XDP program is there).
    #[error("attach the XDP program to {iface} in {mode} mode{hint}")]
    Attach {
        /// The target interface.
        iface: Iface,
        /// The mode tried.
        mode: AttachMode,
        /// What the kernel's error means where its own message is lost (a BPF link carries
        /// none): empty, or `" (…)"`.
        hint: &'static str,
        /// libbpf's error.
        #[source]
        source: libbpf_rs::Error,
    },

    /// [`AttachMode::DriverOrGeneric`]: both modes failed.
    #[error("attach the XDP program to {iface}: driver mode failed ({driver}), generic mode too")]
    AttachFallback {
        /// The target interface.
        iface: Iface,
        /// Why driver mode failed.
        driver: libbpf_rs::Error,
        /// Why generic mode failed.
        #[source]
        generic: libbpf_rs::Error,
    },

    /// Querying or detaching the attached program failed.
    #[error("detach the XDP program from {iface} ({mode} mode)")]
    Detach {
        /// The interface.
        iface: Iface,
        /// The mode it was attached in.
        mode: AttachMode,
        /// libbpf's error.
        #[source]
        source: libbpf_rs::Error,
    },

    /// Entering the network namespace the program was attached in failed.
    #[error("enter the network namespace of {iface}")]
    Netns {
        /// The interface.
        iface: Iface,
        /// setns(2) or opening the namespace.
        #[source]
        source: io::Error,
    },

    /// Reading the calling thread's network namespace failed.
    #[error("open the current network namespace")]
    CurrentNetns(#[source] io::Error),

    /// A map update, lookup or delete failed.
    #[error("{op} in map `{map}` (program {target})")]
    Map {
        /// The map.
        map: MapName,
        /// The operation ("update", "delete", "lookup", "iterate").
        op: &'static str,
        /// Where the program is attached, or "not attached".
        target: String,
        /// libbpf's error.
        #[source]
        source: libbpf_rs::Error,
    },

    /// `flows` holds [`crate::MAX_FLOWS`] entries already.
    #[error("flow table full ({capacity} flows; program {target})")]
    FlowTableFull {
        /// The map's capacity.
        capacity: u32,
        /// Where the program is attached, or "not attached".
        target: String,
    },

    /// A queue index beyond the XSKMAP.
    #[error("RX queue {queue} is beyond the XSK map (queues 0..{max})")]
    QueueOutOfRange {
        /// The queue asked for.
        queue: u32,
        /// [`crate::MAX_QUEUES`].
        max: u32,
    },

    /// A flow key from addresses of different families.
    #[error("flow key: local {local} and remote {remote} are of different address families")]
    FamilyMismatch {
        /// The local address given.
        local: SocketAddr,
        /// The remote address given.
        remote: SocketAddr,
    },

    /// A `flows` key read back from the kernel that is not a valid encoding.
    #[error("flows map holds a key with unknown family {family}")]
    BadKey {
        /// The family octet found.
        family: u8,
    },

    /// `BPF_PROG_TEST_RUN` failed.
    #[error("test run of the XDP program")]
    TestRun(#[source] libbpf_rs::Error),
}

/// `Result` with [`BpfError`].
pub type Result<T, E = BpfError> = std::result::Result<T, E>;

/// What an attach error means, for the errors whose reason the kernel gives only in a netlink
/// message that a BPF link's creation does not return.
pub(crate) fn attach_hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error().map(nix::errno::Errno::from_raw) {
        // veth_xdp_set: "XDP expects number of rx queues not less than peer tx queues".
        Some(nix::errno::Errno::ENOSPC) => {
            " (ENOSPC: the device has fewer RX queues than XDP needs; on veth, fewer than its \
             peer has TX queues: `ethtool -l` on both ends)"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enospc_on_attach_names_the_queue_counts_and_other_errors_add_nothing() {
        let enospc = std::io::Error::from_raw_os_error(nix::errno::Errno::ENOSPC as i32);
        assert!(attach_hint(&enospc).contains("fewer RX queues"));
        assert!(attach_hint(&enospc).contains("ethtool -l"));
        let ebusy = std::io::Error::from_raw_os_error(nix::errno::Errno::EBUSY as i32);
        assert_eq!(attach_hint(&ebusy), "");
    }
}
