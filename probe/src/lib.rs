//! The NIC probe, `mpa-datapath probe --iface IF [--json]`: what an interface's NIC and driver
//! can do for the datapath, read without changing anything (in the spirit of `xdp-loader features` and
//! `ethtool -i`), each reading with what the datapath will do with it, and a verdict: exit
//! status 0 when the datapath can run there (perhaps in copy or generic mode, said so), 1 when
//! it cannot (each reason named), 2 for a usage error. docs/operations.md, "Probing an
//! interface", shows an answer and what each line means.
//!
//! * `netlink`: the kernel's answers (rtnetlink, ethtool, netdev, devlink), read as hostile
//!   input; `sysfs`: driver, bus address, interrupts, kernel release.
//! * `readings`: what was read, as plain data; `verdict`: what it means for the datapath,
//!   pure, so that it is tested on readings built by hand; `render`: text and JSON.
//!
//! The datapath gives what it needs of an interface ([`Datapath`]: its queue limit, its UMEM
//! frames, how large a frame at an MTU is, the segments it sends, the ethtool driver query);
//! the probe depends on nothing of the datapath's.
//!
//! Everything is read in the caller's network namespace (run it as `ip netns exec NS …` for an
//! interface in another; that also mounts the namespace's own sysfs).
#![forbid(unsafe_code)]

mod netlink;
mod readings;
mod render;
mod sysfs;
mod verdict;

use netlink::{Conn, NlError};
use netlink_sys::constants::{NETLINK_GENERIC, NETLINK_ROUTE};
use readings::{Device, Reading, Readings};
use std::process::ExitCode;

/// What the datapath that runs the probe needs of an interface: the verdict judges the
/// readings against it.
#[derive(Debug, Clone, Copy)]
pub struct Datapath {
    /// RX queues it serves at most.
    pub max_queues: u32,
    /// Octets of each UMEM frame (`--frame-size`'s default).
    pub frame_size: u32,
    /// Octets of a UMEM frame before the packet (the XDP headroom).
    pub headroom: u32,
    /// The largest frame a peer may send at an MTU (`None`: unknown).
    pub rx_frame_for_mtu: fn(Option<u32>) -> usize,
    /// The largest segment (TCP payload and options) it sends at an MTU with UMEM frames of
    /// a size.
    pub link_mss: fn(Option<u32>, u32) -> u16,
    /// The driver's name and firmware version as `ethtool -i` gives them, when it does.
    pub driver_info: fn(&str) -> Option<DriverInfo>,
}

impl Datapath {
    /// Octets of a frame one UMEM frame holds.
    pub(crate) fn frame_data(&self) -> u64 {
        u64::from(self.frame_size.saturating_sub(self.headroom))
    }
}

/// The ethtool driver query's answer (`ethtool -i`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverInfo {
    /// The driver's name.
    pub driver: String,
    /// The firmware version ("" when the driver gives none).
    pub firmware: String,
}

/// `mpa-datapath probe`.
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// Interface to probe, in this network namespace.
    #[arg(long, value_parser = interface_name)]
    pub iface: String,
    /// Print one JSON document on stdout instead of the text.
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// A name the kernel could give an interface (`dev_valid_name`): 1 to 15 octets, not `.` or
/// `..`, no `/`, `:` or white space. Anything else is a usage error, and never reaches a path.
fn interface_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() < 16
        && s != "."
        && s != ".."
        && !s.chars().any(|c| c == '/' || c == ':' || c.is_whitespace());
    if ok {
        Ok(s.to_string())
    } else {
        Err("not an interface name (1 to 15 octets, no '/', ':' or spaces)".into())
    }
}

/// Probes `args.iface` for `dp`, prints the report (text or JSON) on stdout, and returns the
/// exit status: 0 usable, 1 not (the reasons also on stderr) or the probe could not read the
/// interface.
pub fn run(args: &ProbeArgs, dp: &Datapath) -> ExitCode {
    let readings = match gather(&args.iface, dp) {
        Ok(r) => r,
        Err(e) => {
            if args.json {
                mpa_cli::outln!("{}", render::failure(&args.iface, &e.to_string()));
            }
            eprintln!("mpa-datapath probe: {}: {e}", args.iface);
            return ExitCode::FAILURE;
        }
    };
    let report = verdict::judge(&readings, dp);
    if args.json {
        mpa_cli::outln!("{}", render::json(&readings, &report));
    } else {
        mpa_cli::out!("{}", render::text(&readings, &report));
    }
    if report.usable() {
        ExitCode::SUCCESS
    } else {
        let reasons: Vec<String> = report.blockers.iter().map(ToString::to_string).collect();
        eprintln!(
            "mpa-datapath probe: {}: not usable: {}",
            args.iface,
            reasons.join("; ")
        );
        ExitCode::FAILURE
    }
}

/// Everything there is to read about `iface`. Only the link itself is required (without
/// rtnetlink there is nothing to say); every other reading that fails says why instead.
fn gather(iface: &str, dp: &Datapath) -> Result<Readings, NlError> {
    let mut readings = Readings {
        iface: iface.to_string(),
        kernel: sysfs::kernel(),
        cpus: sysfs::cpus(),
        device: None,
    };
    let mut route = Conn::open(NETLINK_ROUTE)?;
    let Some(link) = netlink::link::get(&mut route, iface)? else {
        return Ok(readings);
    };
    let ifindex = link.ifindex;
    let driver = sysfs::driver(iface, link.kind.as_deref());
    let mut genl = Conn::open(NETLINK_GENERIC);
    let queues = match ask(&mut genl, |c| netlink::ethtool::channels(c, ifindex)) {
        Reading::NotReported { not_reported } => {
            sysfs::queues(iface).map_or_else(|| Reading::not(not_reported), Reading::Got)
        }
        got => got,
    };
    // The parent device rtnetlink names (right in any namespace), else sysfs's.
    let bus = link.parent_bus.clone().or_else(|| driver.bus.clone());
    let dev = link.parent_dev.clone().or_else(|| driver.address.clone());
    let firmware = match (bus, dev) {
        (Some(bus), Some(dev)) => ask(&mut genl, |c| netlink::devlink::info(c, &bus, &dev)),
        _ => Reading::not("no device"),
    };
    // Drivers without devlink still tell `ethtool -i` their firmware.
    let firmware = match firmware {
        Reading::NotReported { not_reported } => firmware_from_ethtool(iface, dp)
            .map_or_else(|| Reading::not(not_reported), Reading::Got),
        got => got,
    };
    let xdp = ask(&mut genl, |c| netlink::netdev::features(c, ifindex));
    let offloads = ask(&mut genl, |c| netlink::ethtool::offloads(c, ifindex));
    readings.device = Some(Device {
        irqs: sysfs::irqs(iface),
        link,
        driver,
        firmware,
        queues,
        xdp,
        offloads,
    });
    Ok(readings)
}

/// The firmware version the driver gives the ethtool interface (`ethtool -i`), when it gives
/// one.
fn firmware_from_ethtool(iface: &str, dp: &Datapath) -> Option<readings::Firmware> {
    let info = (dp.driver_info)(iface)?;
    (!info.firmware.is_empty()).then(|| readings::Firmware {
        driver: Some(info.driver),
        running: vec![readings::Version {
            name: "fw (ethtool)".into(),
            value: info.firmware,
        }],
        ..readings::Firmware::default()
    })
}

/// One generic-netlink reading; why not, when the socket or the request failed.
fn ask<T>(
    conn: &mut Result<Conn, NlError>,
    f: impl FnOnce(&mut Conn) -> Result<T, NlError>,
) -> Reading<T> {
    match conn {
        Ok(c) => f(c).map_or_else(|e| Reading::not(explain(&e)), Reading::Got),
        Err(e) => Reading::not(&*e),
    }
}

/// An error in words an operator acts on.
fn explain(e: &NlError) -> String {
    const EPERM: i32 = 1;
    const ENODEV: i32 = 19;
    const EOPNOTSUPP: i32 = 95;
    const EACCES: i32 = 13;
    match e.errno() {
        Some(EOPNOTSUPP) => "the driver does not report it".into(),
        Some(ENODEV) => "no such device for this family".into(),
        Some(EPERM | EACCES) => "permission denied: needs CAP_NET_ADMIN".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_the_kernel_could_give_are_taken() {
        for ok in ["eth0", "veth-b", "enp59s0f0np0", "a", "mpat12345x6-b"] {
            assert_eq!(interface_name(ok).as_deref(), Ok(ok));
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "../x",
            "eth0:1",
            "a b",
            "sixteen-octets00",
            "\t",
        ] {
            assert!(interface_name(bad).is_err(), "{bad:?}");
        }
    }
}
