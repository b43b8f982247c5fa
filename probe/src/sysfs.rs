//! What the probe reads from sysfs and procfs: the driver and bus address behind an interface,
//! its queues when ethtool has no channels for it, its interrupts and their CPUs, the kernel's
//! release. Every file is read with a size bound and every directory listing with a count
//! bound; the interface name was checked to be a plain name (no `/`) before it gets here.

use crate::readings::{Driver, DriverSource, Irq, Irqs, Kernel, QueueSource, Queues};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The most octets read of one small file.
const MAX_FILE: u64 = 4096;
/// The most entries looked at in one directory.
const MAX_ENTRIES: usize = 4096;

/// A small text file, trimmed; `None` when it cannot be read.
fn read_small(path: &Path) -> Option<String> {
    let mut s = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_FILE)
        .read_to_string(&mut s)
        .ok()?;
    Some(s.trim().to_string())
}

/// The last component of the target of symlink `path` (`…/drivers/ice` → `ice`).
fn link_name(path: &Path) -> Option<String> {
    let target = std::fs::read_link(path).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

/// The names in directory `dir`, at most [`MAX_ENTRIES`].
fn entries(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.take(MAX_ENTRIES)
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

fn class_net(iface: &str) -> PathBuf {
    Path::new("/sys/class/net").join(iface)
}

/// The driver (`device/driver`), its bus (`device/subsystem`) and the device's address
/// (`device`), or the link kind of a virtual interface without a device.
pub(crate) fn driver(iface: &str, kind: Option<&str>) -> Driver {
    let dev = class_net(iface).join("device");
    match link_name(&dev.join("driver")) {
        Some(name) => Driver {
            name: Some(name),
            source: DriverSource::Sysfs,
            bus: link_name(&dev.join("subsystem")),
            address: link_name(&dev),
        },
        None => Driver {
            name: kind.map(str::to_string),
            source: if kind.is_some() {
                DriverSource::LinkKind
            } else {
                DriverSource::Unknown
            },
            bus: None,
            address: None,
        },
    }
}

/// The queues in use from `/sys/class/net/IF/queues/` (`rx-N`, `tx-N`), counted as RX-only
/// and TX-only (sysfs does not say which are combined), no maxima.
pub(crate) fn queues(iface: &str) -> Option<Queues> {
    let names = entries(&class_net(iface).join("queues"));
    if names.is_empty() {
        return None;
    }
    let count = |prefix: &str| names.iter().filter(|n| n.starts_with(prefix)).count() as u32;
    Some(Queues {
        source: QueueSource::Sysfs,
        rx: count("rx-"),
        tx: count("tx-"),
        combined: 0,
        rx_max: None,
        tx_max: None,
        combined_max: None,
    })
}

/// The device's interrupts: MSI/MSI-X (`device/msi_irqs/`, or its parent's for a device on a
/// transport such as virtio), else its legacy one (`device/irq`), each with its handler's
/// name and CPUs, in order of number.
pub(crate) fn irqs(iface: &str) -> Irqs {
    let dev = class_net(iface).join("device");
    if !dev.exists() {
        return Irqs {
            device: false,
            list: Vec::new(),
        };
    }
    let msi = |dir: &Path| -> Vec<u32> {
        entries(&dir.join("msi_irqs"))
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect()
    };
    let mut numbers = msi(&dev);
    if numbers.is_empty() {
        // A device on a transport (virtio) has its interrupts on the transport's device.
        if let Some(parent) = std::fs::canonicalize(&dev)
            .ok()
            .as_deref()
            .and_then(Path::parent)
        {
            numbers = msi(parent);
        }
    }
    if numbers.is_empty() {
        numbers.extend(
            read_small(&dev.join("irq"))
                .and_then(|s| s.parse().ok())
                .filter(|&n: &u32| n != 0),
        );
    }
    numbers.sort_unstable();
    Irqs {
        device: true,
        list: numbers.into_iter().map(irq).collect(),
    }
}

fn irq(n: u32) -> Irq {
    Irq {
        irq: n,
        name: read_small(
            &Path::new("/sys/kernel/irq")
                .join(n.to_string())
                .join("actions"),
        )
        .filter(|s| !s.is_empty())
        .map(|s| s.chars().take(64).collect()),
        cpus: read_small(
            &Path::new("/proc/irq")
                .join(n.to_string())
                .join("smp_affinity_list"),
        ),
    }
}

/// The running kernel.
pub(crate) fn kernel() -> Option<Kernel> {
    Kernel::parse(&read_small(Path::new("/proc/sys/kernel/osrelease"))?)
}

/// CPUs this process may run on.
pub(crate) fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}
