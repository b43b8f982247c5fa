//! Which device a state file names: its identity (ifindex, permanent hardware address, bus
//! address, driver) beside its interface name, and finding it again among the interfaces there
//! are now (see the parent module: names move, and an undo applied to another device would
//! remove someone else's rules or channels).

use super::*;

/// How the state file's device compares with the interfaces there are now.
#[derive(Debug, thiserror::Error)]
pub enum DeviceMismatch {
    /// The file names the interface but not the device.
    #[error(
        "it names interface {iface} but not its device (ifindex, permanent address, bus), so \
         whether {iface} is still the device it changed cannot be told. It records: {changes}. \
         Check that device (`ethtool -l {iface}`, `ethtool -n {iface}`), undo what is left \
         (`ethtool -L {iface} …`, `ethtool -N {iface} delete LOCATION`), then remove the file"
    )]
    Unknown {
        /// The interface named.
        iface: String,
        /// What the file records.
        changes: String,
    },
    /// No interface is the recorded device.
    #[error("{}", gone_text(iface, recorded, now.as_ref()))]
    Gone {
        /// The interface name recorded.
        iface: String,
        /// The device recorded.
        recorded: Identity,
        /// The device under the recorded name now, if any.
        now: Option<Identity>,
    },
    /// Several interfaces have the recorded identity.
    #[error(
        "interfaces {} all have the identity recorded for {iface} ({recorded}), none its \
         ifindex: which one it is cannot be told; check them (`ethtool -l`, `ethtool -n`), \
         undo by hand, then remove the file",
        names.join(", ")
    )]
    Ambiguous {
        /// The interface name recorded.
        iface: String,
        /// The device recorded.
        recorded: Identity,
        /// The interfaces that have it.
        names: Vec<String>,
    },
}

pub(super) fn gone_text(iface: &str, recorded: &Identity, now: Option<&Identity>) -> String {
    let head = match now {
        Some(now) => format!(
            "{iface} is another device now ({}), and no interface is the one recorded \
             ({recorded})",
            recorded.differences(now)
        ),
        None => format!("no interface {iface}, and no interface is its device ({recorded})"),
    };
    format!(
        "{head}: if that device is gone, what was changed on it went with it: remove the file; \
         if it is in another network namespace, start the datapath there"
    )
}

/// What tells a device apart from others, whatever its interface is named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// Interface index in the network namespace (a new one when the device is re-created).
    pub ifindex: u32,
    /// Permanent hardware address (`ethtool -P`), `None` for a device without one.
    pub permanent_address: Option<String>,
    /// Bus address (`ethtool -i` bus-info; a PCI address), `None` for a virtual device.
    pub bus: Option<String>,
    /// Driver (`ethtool -i`).
    pub driver: Option<String>,
}

impl Identity {
    /// A hardware identity, which survives the device being re-created (a driver reload);
    /// without one the ifindex is all there is.
    pub(super) fn is_hardware(&self) -> bool {
        self.permanent_address.is_some() || self.bus.is_some()
    }

    /// Whether `now` is this device.
    pub(super) fn matches(&self, now: &Identity) -> bool {
        if self.is_hardware() {
            self.permanent_address == now.permanent_address
                && self.bus == now.bus
                && self.driver == now.driver
        } else {
            self == now
        }
    }

    /// What differs from `now`, as "field was → is".
    pub(super) fn differences(&self, now: &Identity) -> String {
        let text = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".into());
        let mut d = Vec::new();
        if self.ifindex != now.ifindex {
            d.push(format!("ifindex {} → {}", self.ifindex, now.ifindex));
        }
        for (what, was, is) in [
            (
                "permanent address",
                &self.permanent_address,
                &now.permanent_address,
            ),
            ("bus", &self.bus, &now.bus),
            ("driver", &self.driver, &now.driver),
        ] {
            if was != is {
                d.push(format!("{what} {} → {}", text(was), text(is)));
            }
        }
        d.join(", ")
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".into());
        write!(
            f,
            "ifindex {}, permanent address {}, bus {}, driver {}",
            self.ifindex,
            text(&self.permanent_address),
            text(&self.bus),
            text(&self.driver)
        )
    }
}

/// An interface and its device's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Netdev {
    pub(super) name: String,
    pub(super) id: Identity,
}

/// Which of `now` is the device recorded as `iface` with `id`.
pub(super) fn find_device<'a>(
    iface: &str,
    id: &Identity,
    now: &'a [Netdev],
) -> Result<&'a Netdev, Box<DeviceMismatch>> {
    let same: Vec<&Netdev> = now.iter().filter(|d| id.matches(&d.id)).collect();
    match same[..] {
        [one] => Ok(one),
        [] => Err(Box::new(DeviceMismatch::Gone {
            iface: iface.to_string(),
            recorded: id.clone(),
            now: now.iter().find(|d| d.name == iface).map(|d| d.id.clone()),
        })),
        _ => same
            .iter()
            .find(|d| d.id.ifindex == id.ifindex)
            .copied()
            .ok_or_else(|| {
                Box::new(DeviceMismatch::Ambiguous {
                    iface: iface.to_string(),
                    recorded: id.clone(),
                    names: same.iter().map(|d| d.name.clone()).collect(),
                })
            }),
    }
}
