//! The verdict on an interface's readings: for each reading what the datapath will do with
//! it (which XDP mode and AF_XDP mode its `auto` settings pick, what `--zero-copy on` does,
//! how frames at the MTU arrive, how many queues to serve), and the reasons, each named, why
//! it cannot run there. Pure: the readings in, the report out (docs/operations.md, "Probing an
//! interface").

use crate::readings::{
    bit_names, Device, Kernel, Readings, XdpFeatures, RX_METADATA, XDP_ACT, XDP_BASIC,
    XDP_REDIRECT, XDP_RX_SG, XDP_XSK_ZEROCOPY,
};
use crate::Datapath;
use serde::Serialize;

mod findings;
#[cfg(test)]
mod tests;

/// What the report is about, in the order it is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Topic {
    /// The interface itself.
    Interface,
    /// Driver and device.
    Driver,
    /// Firmware versions.
    Firmware,
    /// The running kernel.
    Kernel,
    /// RX/TX queues.
    Queues,
    /// MTU and frame size.
    Mtu,
    /// XDP and AF_XDP features.
    Xdp,
    /// Offloads that merge segments.
    Offloads,
    /// Interrupts.
    Irqs,
}

impl Topic {
    /// The label in the text form.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Topic::Interface => "interface",
            Topic::Driver => "driver",
            Topic::Firmware => "firmware",
            Topic::Kernel => "kernel",
            Topic::Queues => "queues",
            Topic::Mtu => "mtu",
            Topic::Xdp => "xdp",
            Topic::Offloads => "offloads",
            Topic::Irqs => "irqs",
        }
    }
}

/// One line of the report: a reading and what the datapath will do with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Finding {
    /// What it is about.
    pub topic: Topic,
    /// What was read.
    pub reading: String,
    /// What the datapath will do with it.
    pub datapath: Vec<String>,
}

/// Why the datapath cannot run on the interface.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Blocker {
    /// No such interface.
    #[error("no interface {0} in this network namespace")]
    NoSuchInterface(String),
    /// Not Ethernet.
    #[error(
        "not an Ethernet interface (link type {0}): the datapath receives and sends Ethernet \
         frames"
    )]
    NotEthernet(String),
    /// A kernel before the one the datapath needs.
    #[error(
        "Linux {0}: the datapath needs 6.1 or later (docs/environment.md, \"Kernel versions\")"
    )]
    OldKernel(String),
    /// Another XDP program holds the interface.
    #[error(
        "an XDP program{} is attached in {mode} mode: the datapath attaches its own and cannot \
         share the interface (a running mpa-datapath holds one too)",
        prog_id.map_or(String::new(), |id| format!(" (id {id})"))
    )]
    XdpAttached {
        /// Its mode.
        mode: String,
        /// Its program id.
        prog_id: Option<u32>,
    },
    /// An offload that merges segments before XDP sees them is on.
    #[error(
        "{name} is on: {}; turn it off: {fix}",
        if *before_generic_only {
            "XDP will run in generic mode, after it, and merged segments larger than the MTU \
             would reach the datapath, which drops them"
        } else {
            "the NIC merges segments before any XDP program sees them, into frames larger than \
             the MTU, which the datapath drops"
        }
    )]
    OffloadOn {
        /// Its ethtool name.
        name: String,
        /// It only matters because XDP will run in generic mode.
        before_generic_only: bool,
        /// The command that turns it off.
        fix: String,
    },
    /// Such an offload is on and the driver does not let it be turned off.
    #[error("{name} is on and fixed by the driver: it merges segments before XDP sees them")]
    OffloadFixed {
        /// Its ethtool name.
        name: String,
    },
    /// Frames at the MTU exceed what the datapath receives on this kernel.
    #[error(
        "MTU {mtu}: frames of up to {frame} octets need multi-buffer AF_XDP (Linux 6.6), and \
         this is {release}: the datapath receives frames of up to {frame_data} octets; lower \
         the MTU to {max_mtu}"
    )]
    MtuBeyondLimit {
        /// The MTU.
        mtu: u32,
        /// The largest frame at that MTU.
        frame: u64,
        /// The kernel.
        release: String,
        /// Octets of a frame one UMEM frame holds.
        frame_data: u64,
        /// The largest MTU whose frames fit.
        max_mtu: u64,
    },
}

impl Blocker {
    /// A stable name for scripts (`offload-on`).
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Blocker::NoSuchInterface(_) => "no-such-interface",
            Blocker::NotEthernet(_) => "not-ethernet",
            Blocker::OldKernel(_) => "old-kernel",
            Blocker::XdpAttached { .. } => "xdp-attached",
            Blocker::OffloadOn { .. } => "offload-on",
            Blocker::OffloadFixed { .. } => "offload-fixed",
            Blocker::MtuBeyondLimit { .. } => "mtu-beyond-limit",
        }
    }

    /// What it is about.
    pub(crate) fn topic(&self) -> Topic {
        match self {
            Blocker::NoSuchInterface(_) | Blocker::NotEthernet(_) | Blocker::XdpAttached { .. } => {
                Topic::Interface
            }
            Blocker::OldKernel(_) => Topic::Kernel,
            Blocker::OffloadOn { .. } | Blocker::OffloadFixed { .. } => Topic::Offloads,
            Blocker::MtuBeyondLimit { .. } => Topic::Mtu,
        }
    }
}

/// The XDP mode `--xdp-mode auto` ends in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum XdpMode {
    /// In the driver.
    Native,
    /// In the skb path (after GRO).
    Generic,
    /// Features not reported: native if the driver takes it, else generic.
    NativeElseGeneric,
}

/// What `--zero-copy auto` binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ZeroCopyAuto {
    /// Zero-copy, with multi-buffer where frames need it.
    ZeroCopy,
    /// Zero-copy without multi-buffer: frames above a UMEM frame are dropped.
    ZeroCopyWithoutMultiBuffer,
    /// Copy mode.
    Copy,
    /// Features not reported: zero-copy if the driver takes it, else copy.
    ZeroCopyElseCopy,
}

/// What `--zero-copy on` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ZeroCopyOn {
    /// Binds in zero-copy mode.
    Binds,
    /// Binds without multi-buffer: frames above a UMEM frame are dropped.
    BindsWithoutMultiBuffer,
    /// Fails: the datapath does not start.
    Fails,
    /// Not known (features not reported).
    Unknown,
}

/// How a frame at the MTU reaches a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Receive {
    /// In one UMEM frame.
    SingleBuffer,
    /// As a chain of UMEM frames, gathered into one.
    MultiBuffer,
    /// Not at all: larger than a UMEM frame, without multi-buffer.
    Dropped,
}

/// What the datapath's `auto` settings will pick and how frames arrive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Predictions {
    /// `--xdp-mode auto` (the default).
    pub xdp_mode_auto: XdpMode,
    /// `--zero-copy auto` (the default).
    pub zero_copy_auto: ZeroCopyAuto,
    /// `--zero-copy on`.
    pub zero_copy_on: ZeroCopyOn,
    /// Frames at the MTU.
    pub receive: Receive,
    /// The largest frame at the MTU (MTU, Ethernet header and one VLAN tag).
    pub frame_octets: u64,
    /// UMEM frames such a frame takes.
    pub descriptors: u64,
    /// The largest `--queues` worth giving (every RX queue in use), if known.
    pub queues_max: Option<u32>,
    /// Octets of a frame one UMEM frame holds (a frame less the XDP headroom).
    #[serde(skip)]
    pub frame_data: u64,
    /// The largest MTU whose frames fit one UMEM frame.
    #[serde(skip)]
    pub single_buffer_mtu: u64,
    /// The largest segment the datapath sends at the MTU (TCP payload and options).
    #[serde(skip)]
    pub sent_mss: u16,
}

/// The whole verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Report {
    /// One finding per topic, in order.
    pub findings: Vec<Finding>,
    /// What the datapath's settings will pick (absent without an interface).
    pub predictions: Option<Predictions>,
    /// Options to run the datapath with on this interface.
    pub options: Vec<String>,
    /// Why it cannot run there (none: it can).
    pub blockers: Vec<Blocker>,
}

impl Report {
    /// The datapath can run on the interface.
    pub(crate) fn usable(&self) -> bool {
        self.blockers.is_empty()
    }
}

/// The verdict on `r` for datapath `dp`.
pub(crate) fn judge(r: &Readings, dp: &Datapath) -> Report {
    let mut rep = Report {
        findings: Vec::new(),
        predictions: None,
        options: Vec::new(),
        blockers: Vec::new(),
    };
    let Some(d) = &r.device else {
        rep.blockers.push(Blocker::NoSuchInterface(r.iface.clone()));
        return rep;
    };
    let mode = xdp_mode(d);
    // Where XDP will run: generic also when the driver's native XDP cannot redirect.
    let generic = mode == XdpMode::Generic || d.xdp.got().is_some_and(native_without_redirect);
    let frame = u64::try_from((dp.rx_frame_for_mtu)(Some(d.link.mtu))).unwrap_or(u64::MAX);
    let frame_data = dp.frame_data();
    let descriptors = frame.div_ceil(frame_data).max(1);
    let multi_buffer_kernel = r.kernel.as_ref().is_none_or(|k| k.at_least(6, 6));
    let receive = if descriptors == 1 {
        Receive::SingleBuffer
    } else if multi_buffer_kernel {
        Receive::MultiBuffer
    } else {
        Receive::Dropped
    };
    let (zero_copy_auto, zero_copy_on) = zero_copy(d, mode, descriptors);
    let queues_max = d.queues.got().map(|q| q.rx_in_use().min(dp.max_queues));
    rep.predictions = Some(Predictions {
        xdp_mode_auto: mode,
        zero_copy_auto,
        zero_copy_on,
        receive,
        frame_octets: frame,
        descriptors,
        queues_max,
        frame_data,
        single_buffer_mtu: single_buffer_mtu(dp),
        sent_mss: (dp.link_mss)(Some(d.link.mtu), dp.frame_size),
    });
    findings::interface(r, d, &mut rep);
    findings::driver(d, &mut rep);
    findings::kernel(r.kernel.as_ref(), frame_data, &mut rep);
    findings::queues(r, d, dp.max_queues, &mut rep);
    findings::mtu(r, d, &mut rep);
    findings::xdp(d, &mut rep);
    findings::offloads(r, d, generic, &mut rep);
    findings::irqs(r, d, &mut rep);
    rep
}

/// The mode `--xdp-mode auto` ends in: native where the driver implements XDP and its
/// redirect (frames reach AF_XDP sockets by XDP_REDIRECT), else generic.
fn xdp_mode(d: &Device) -> XdpMode {
    match d.xdp.got() {
        None => XdpMode::NativeElseGeneric,
        Some(f) if f.xdp & XDP_BASIC != 0 => XdpMode::Native,
        Some(_) => XdpMode::Generic,
    }
}

/// Native XDP without XDP_REDIRECT: `auto` attaches natively, but no frame reaches a socket.
pub(crate) fn native_without_redirect(f: &XdpFeatures) -> bool {
    f.xdp & XDP_BASIC != 0 && f.xdp & XDP_REDIRECT == 0
}

/// What `--zero-copy auto` and `--zero-copy on` do (xsk.rs: zero-copy with multi-buffer,
/// else zero-copy without, else, for `auto`, copy mode).
fn zero_copy(d: &Device, mode: XdpMode, descriptors: u64) -> (ZeroCopyAuto, ZeroCopyOn) {
    let Some(f) = d.xdp.got() else {
        return (ZeroCopyAuto::ZeroCopyElseCopy, ZeroCopyOn::Unknown);
    };
    // Zero-copy needs the program in the driver.
    if mode != XdpMode::Native || native_without_redirect(f) || f.xdp & XDP_XSK_ZEROCOPY == 0 {
        return (ZeroCopyAuto::Copy, ZeroCopyOn::Fails);
    }
    if descriptors <= u64::from(f.zc_max_segs.unwrap_or(1)) || descriptors == 1 {
        (ZeroCopyAuto::ZeroCopy, ZeroCopyOn::Binds)
    } else {
        (
            ZeroCopyAuto::ZeroCopyWithoutMultiBuffer,
            ZeroCopyOn::BindsWithoutMultiBuffer,
        )
    }
}

/// The features' names, or "none".
pub(crate) fn names_or_none(bits: u64, table: &[&str]) -> String {
    let n = bit_names(bits, table);
    if n.is_empty() {
        "none".into()
    } else {
        n.join(" ")
    }
}

/// `xdp-act` names of `f`.
pub(crate) fn xdp_names(f: &XdpFeatures) -> String {
    names_or_none(f.xdp, &XDP_ACT)
}

/// `xdp-rx-metadata` names of `f`.
pub(crate) fn rx_metadata_names(f: &XdpFeatures) -> String {
    names_or_none(f.rx_metadata, &RX_METADATA)
}

/// The driver implements multi-buffer native XDP.
pub(crate) fn rx_sg(f: &XdpFeatures) -> bool {
    f.xdp & XDP_RX_SG != 0
}

/// The largest MTU whose frames fit one UMEM frame of `dp`.
pub(crate) fn single_buffer_mtu(dp: &Datapath) -> u64 {
    // The frame at MTU 0 is the link header alone.
    dp.frame_data()
        .saturating_sub((dp.rx_frame_for_mtu)(Some(0)) as u64)
}

/// The kernel's release, or "an unknown kernel".
pub(crate) fn release(k: Option<&Kernel>) -> String {
    k.map_or_else(|| "an unknown kernel".into(), |k| k.release.clone())
}
