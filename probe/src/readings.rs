//! What the probe read about an interface, as plain data: filled in from netlink and sysfs by
//! the readers, and built by hand in the tests of the verdict. Nothing here judges; the
//! verdict (`super::verdict`) does.

use serde::{Serialize, Serializer};

/// Everything read about one interface.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Readings {
    /// The interface asked about.
    pub iface: String,
    /// The running kernel.
    pub kernel: Option<Kernel>,
    /// CPUs this process may run on.
    pub cpus: usize,
    /// The interface, when it exists in this network namespace.
    pub device: Option<Device>,
}

/// The running kernel's release (`/proc/sys/kernel/osrelease`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Kernel {
    /// As the kernel says it (`6.18.44-…`).
    pub release: String,
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl Kernel {
    /// The version of a release string (`6.18.44-fc` → 6.18); `None` when it starts otherwise.
    pub fn parse(release: &str) -> Option<Kernel> {
        let release = release.trim();
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(Kernel {
            release: release.chars().take(64).collect(),
            major,
            minor,
        })
    }

    /// At least `major.minor`.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

/// A value the kernel may not report; why not, when it does not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub(crate) enum Reading<T> {
    /// Reported.
    Got(T),
    /// Not reported, and why.
    NotReported {
        /// Why (a missing family, an errno, a virtual device).
        not_reported: String,
    },
}

impl<T> Reading<T> {
    /// Not reported because of `why`.
    pub fn not(why: impl std::fmt::Display) -> Self {
        Reading::NotReported {
            not_reported: why.to_string(),
        }
    }

    /// The value, if reported.
    pub fn got(&self) -> Option<&T> {
        match self {
            Reading::Got(t) => Some(t),
            Reading::NotReported { .. } => None,
        }
    }

    /// Why it is not reported, if it is not.
    pub fn why_not(&self) -> Option<&str> {
        match self {
            Reading::Got(_) => None,
            Reading::NotReported { not_reported } => Some(not_reported),
        }
    }
}

/// One interface that exists.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Device {
    /// From rtnetlink.
    pub link: Link,
    /// The driver and the device behind the interface.
    pub driver: Driver,
    /// Firmware versions (devlink `info`).
    pub firmware: Reading<Firmware>,
    /// RX/TX queues (ethtool channels, else sysfs).
    pub queues: Reading<Queues>,
    /// XDP and AF_XDP features (the netdev generic-netlink family).
    pub xdp: Reading<XdpFeatures>,
    /// The offloads that change segments before XDP sees them (ethtool features).
    pub offloads: Reading<Vec<Offload>>,
    /// Interrupts of the device's queues.
    pub irqs: Irqs,
}

/// What rtnetlink says about the interface (`RTM_GETLINK`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Link {
    /// Interface index.
    pub ifindex: u32,
    /// The link kind of a virtual interface (`veth`, `bridge`, …); `None` for a device's own.
    pub kind: Option<String>,
    /// ARPHRD_ETHER with a 6-octet address: the frames the datapath builds.
    pub ethernet: bool,
    /// The link type as rtnetlink names it (`Ether`, `Loopback`, …).
    pub link_type: String,
    /// Administratively up (IFF_UP).
    pub up: bool,
    /// Operational state (`up`, `down`, `lower-layer-down`, …).
    pub operstate: String,
    /// MTU.
    pub mtu: u32,
    /// Smallest MTU the driver takes.
    pub min_mtu: Option<u32>,
    /// Largest MTU the driver takes.
    pub max_mtu: Option<u32>,
    /// RX queues allocated (the most that can be in use).
    pub num_rx_queues: Option<u32>,
    /// TX queues allocated.
    pub num_tx_queues: Option<u32>,
    /// Bus of the parent device (`pci`), as the kernel names it.
    pub parent_bus: Option<String>,
    /// Parent device (`0000:3b:00.0`).
    pub parent_dev: Option<String>,
    /// An XDP program already attached, if any.
    pub xdp_attached: Option<XdpAttached>,
}

/// An XDP program attached to the interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct XdpAttached {
    /// `driver`, `generic`, `offload` or `multiple`.
    pub mode: String,
    /// Its BPF program id.
    pub prog_id: Option<u32>,
}

/// The driver of the interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Driver {
    /// Its name, if known.
    pub name: Option<String>,
    /// Where the name came from.
    pub source: DriverSource,
    /// Bus of the device (`pci`), `None` for a virtual interface.
    pub bus: Option<String>,
    /// The device's bus address (`0000:3b:00.0`).
    pub address: Option<String>,
}

/// Where a driver's name came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum DriverSource {
    /// `/sys/class/net/IF/device/driver`.
    Sysfs,
    /// The rtnetlink link kind of a virtual interface.
    LinkKind,
    /// Neither.
    Unknown,
}

/// Firmware and versions from devlink `info`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub(crate) struct Firmware {
    /// The driver devlink names.
    pub driver: Option<String>,
    /// Versions running now (`fw`, `fw.mgmt`, …).
    pub running: Vec<Version>,
    /// Versions stored in flash, to run after a reset.
    pub stored: Vec<Version>,
    /// Fixed versions (board, ASIC).
    pub fixed: Vec<Version>,
}

/// One named version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Version {
    /// Its name (`fw.mgmt`).
    pub name: String,
    /// Its value.
    pub value: String,
}

/// RX/TX queues.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Queues {
    /// Where the counts came from.
    pub source: QueueSource,
    /// RX-only channels in use.
    pub rx: u32,
    /// TX-only channels in use.
    pub tx: u32,
    /// Combined (RX and TX) channels in use.
    pub combined: u32,
    /// Most RX-only channels.
    pub rx_max: Option<u32>,
    /// Most TX-only channels.
    pub tx_max: Option<u32>,
    /// Most combined channels.
    pub combined_max: Option<u32>,
}

impl Queues {
    /// RX queues in use: each needs a worker and an AF_XDP socket.
    pub fn rx_in_use(&self) -> u32 {
        self.rx.saturating_add(self.combined)
    }
}

/// Where queue counts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum QueueSource {
    /// ethtool netlink, `CHANNELS_GET`.
    Ethtool,
    /// `/sys/class/net/IF/queues/` (no maxima there).
    Sysfs,
}

/// The netdev family's answer to `dev-get` (Documentation/netlink/specs/netdev.yaml).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct XdpFeatures {
    /// `xdp-features`: the `xdp-act` bits.
    #[serde(serialize_with = "xdp_act_names")]
    pub xdp: u64,
    /// `xdp-zc-max-segs`: descriptors one zero-copy frame may take (reported with
    /// `xsk-zerocopy` only).
    pub zc_max_segs: Option<u32>,
    /// `xdp-rx-metadata-features`.
    #[serde(serialize_with = "rx_metadata_names")]
    pub rx_metadata: u64,
    /// `xsk-features`.
    #[serde(serialize_with = "xsk_names")]
    pub xsk: u64,
}

/// `xdp-act` bits (netdev.yaml), in bit order.
pub(crate) const XDP_ACT: [&str; 7] = [
    "basic",
    "redirect",
    "ndo-xmit",
    "xsk-zerocopy",
    "hw-offload",
    "rx-sg",
    "ndo-xmit-sg",
];
/// `xdp-rx-metadata` bits (netdev.yaml).
pub(crate) const RX_METADATA: [&str; 3] = ["timestamp", "hash", "vlan-tag"];
/// `xsk-flags` bits (netdev.yaml).
pub(crate) const XSK_FLAGS: [&str; 3] = ["tx-timestamp", "tx-checksum", "tx-launch-time-fifo"];

/// `xdp-act` basic: native XDP (XDP_PASS, XDP_DROP, XDP_ABORTED).
pub(crate) const XDP_BASIC: u64 = 1 << 0;
/// `xdp-act` redirect: XDP_REDIRECT, which sends frames to AF_XDP sockets.
pub(crate) const XDP_REDIRECT: u64 = 1 << 1;
/// `xdp-act` xsk-zerocopy: AF_XDP zero-copy.
pub(crate) const XDP_XSK_ZEROCOPY: u64 = 1 << 3;
/// `xdp-act` rx-sg: native XDP takes frames of several buffers (jumbo frames).
pub(crate) const XDP_RX_SG: u64 = 1 << 5;

/// The names of the bits set in `bits`, `bit N` for a bit the table does not name.
pub(crate) fn bit_names(bits: u64, names: &[&str]) -> Vec<String> {
    (0..64)
        .filter(|b| bits & (1u64 << b) != 0)
        .map(|b| {
            names
                .get(b)
                .map_or_else(|| format!("bit {b}"), |n| n.to_string())
        })
        .collect()
}

fn xdp_act_names<S: Serializer>(bits: &u64, s: S) -> Result<S::Ok, S::Error> {
    bit_names(*bits, &XDP_ACT).serialize(s)
}

fn rx_metadata_names<S: Serializer>(bits: &u64, s: S) -> Result<S::Ok, S::Error> {
    bit_names(*bits, &RX_METADATA).serialize(s)
}

fn xsk_names<S: Serializer>(bits: &u64, s: S) -> Result<S::Ok, S::Error> {
    bit_names(*bits, &XSK_FLAGS).serialize(s)
}

/// One offload as ethtool features reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Offload {
    /// Its name as `ethtool -k` shows it (`large-receive-offload`).
    pub name: String,
    /// On now.
    pub active: bool,
    /// Can be turned on or off (in `hw` and not in `nochange`): ethtool's "[fixed]" otherwise.
    pub changeable: bool,
}

/// An offload's names: in the kernel's feature strings (what ethtool netlink's bitsets carry),
/// as `ethtool -k` shows it, and as `ethtool -K` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OffloadName {
    /// `netdev_features_strings` (`rx-lro`).
    pub kernel: &'static str,
    /// `ethtool -k` (`large-receive-offload`).
    pub shown: &'static str,
    /// `ethtool -K` (`lro`).
    pub short: &'static str,
}

/// The offloads the probe reads: hardware ones merge segments before any XDP program; software
/// ones before generic XDP (docs/operations.md, "Probing an interface").
pub(crate) const OFFLOADS: [OffloadName; 4] = [
    OffloadName {
        kernel: "rx-lro",
        shown: "large-receive-offload",
        short: "lro",
    },
    OffloadName {
        kernel: "rx-gro-hw",
        shown: "rx-gro-hw",
        short: "rx-gro-hw",
    },
    OffloadName {
        kernel: "rx-gro",
        shown: "generic-receive-offload",
        short: "gro",
    },
    OffloadName {
        kernel: "rx-gro-list",
        shown: "rx-gro-list",
        short: "rx-gro-list",
    },
];

/// The names of the offload `ethtool -k` shows as `shown`.
pub(crate) fn offload_name(shown: &str) -> Option<OffloadName> {
    OFFLOADS.iter().copied().find(|o| o.shown == shown)
}

/// Interrupts of the device's queues.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Irqs {
    /// There is a device (a virtual interface has none, and no interrupts of its own).
    pub device: bool,
    /// Its interrupts (MSI/MSI-X, else the legacy one).
    pub list: Vec<Irq>,
}

/// One interrupt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Irq {
    /// Its number.
    pub irq: u32,
    /// Its handler's name (`/sys/kernel/irq/N/actions`: `eth0-TxRx-0`).
    pub name: Option<String>,
    /// The CPUs it may run on (`/proc/irq/N/smp_affinity_list`: `0-3,8`).
    pub cpus: Option<String>,
}
