//! devlink `info` (linux/devlink.h, `DEVLINK_CMD_INFO_GET`): the driver's name and the
//! firmware versions of a device that has a devlink instance (most current NIC drivers).

use super::genl::{ask, Family};
use super::{attrs, Conn, NlError};
use crate::readings::{Firmware, Version};

/// The devlink family.
#[derive(Debug)]
pub(crate) struct Devlink;

impl Family for Devlink {
    const NAME: &'static str = "devlink";
    const VERSION: u8 = 1;
}

/// `DEVLINK_CMD_INFO_GET`.
const CMD_INFO_GET: u8 = 51;

/// `DEVLINK_ATTR_*`.
mod attr {
    pub const BUS_NAME: u16 = 1;
    pub const DEV_NAME: u16 = 2;
    pub const INFO_DRIVER_NAME: u16 = 98;
    pub const INFO_VERSION_FIXED: u16 = 100;
    pub const INFO_VERSION_RUNNING: u16 = 101;
    pub const INFO_VERSION_STORED: u16 = 102;
    pub const INFO_VERSION_NAME: u16 = 103;
    pub const INFO_VERSION_VALUE: u16 = 104;
}

/// The most versions kept of each kind.
const MAX_VERSIONS: usize = 32;

/// The firmware of device `bus`/`dev` (`pci`, `0000:3b:00.0`).
pub(crate) fn info(conn: &mut Conn, bus: &str, dev: &str) -> Result<Firmware, NlError> {
    let reply = ask::<Devlink>(
        conn,
        CMD_INFO_GET,
        vec![
            attrs::string_attr(attr::BUS_NAME, bus),
            attrs::string_attr(attr::DEV_NAME, dev),
        ],
    )?;
    Ok(firmware_of(&reply))
}

/// The firmware of an `INFO_GET` reply: each version a nest of name and value; one without a
/// name is left out.
pub(crate) fn firmware_of(reply: &[u8]) -> Firmware {
    let versions = |kind| -> Vec<Version> {
        attrs::iter(reply)
            .filter(|a| a.kind() == kind)
            .filter_map(|a| {
                Some(Version {
                    name: attrs::string_in(a.value(), attr::INFO_VERSION_NAME)?,
                    value: attrs::string_in(a.value(), attr::INFO_VERSION_VALUE)
                        .unwrap_or_default(),
                })
            })
            .take(MAX_VERSIONS)
            .collect()
    };
    Firmware {
        driver: attrs::string_in(reply, attr::INFO_DRIVER_NAME),
        running: versions(attr::INFO_VERSION_RUNNING),
        stored: versions(attr::INFO_VERSION_STORED),
        fixed: versions(attr::INFO_VERSION_FIXED),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::attrs::{encode, nest, string_attr};

    fn version(kind: u16, name: &str, value: &str) -> netlink_packet_core::DefaultNla {
        nest(
            kind,
            &[
                string_attr(attr::INFO_VERSION_NAME, name),
                string_attr(attr::INFO_VERSION_VALUE, value),
            ],
        )
    }

    #[test]
    fn running_stored_and_fixed_versions() {
        let reply = encode(&[
            string_attr(attr::BUS_NAME, "pci"),
            string_attr(attr::DEV_NAME, "0000:3b:00.0"),
            string_attr(attr::INFO_DRIVER_NAME, "ice"),
            version(attr::INFO_VERSION_FIXED, "board.id", "K91258-000"),
            version(attr::INFO_VERSION_RUNNING, "fw.mgmt", "7.3.4"),
            version(attr::INFO_VERSION_RUNNING, "fw.undi", "1.3429.0"),
            version(attr::INFO_VERSION_STORED, "fw.mgmt", "7.3.4"),
            // A version without a name is left out.
            nest(
                attr::INFO_VERSION_RUNNING,
                &[string_attr(attr::INFO_VERSION_VALUE, "x")],
            ),
        ]);
        let f = firmware_of(&reply);
        assert_eq!(f.driver.as_deref(), Some("ice"));
        let names: Vec<_> = f.running.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["fw.mgmt", "fw.undi"]);
        assert_eq!(f.running[1].value, "1.3429.0");
        assert_eq!(f.stored.len(), 1);
        assert_eq!(f.fixed[0].name, "board.id");
    }

    #[test]
    fn versions_are_bounded() {
        let many: Vec<_> = (0..100)
            .map(|i| version(attr::INFO_VERSION_RUNNING, &format!("fw.{i}"), "1"))
            .collect();
        assert_eq!(firmware_of(&encode(&many)).running.len(), MAX_VERSIONS);
        assert_eq!(firmware_of(&[0xff; 3]), Firmware::default());
    }
}
