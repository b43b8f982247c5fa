//! What the state file records of the changes made to a NIC: each ntuple rule with where it
//! is, the channel counts before and after, and the device (see the parent module).

use super::*;

/// Where a rule is, or is to be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Place {
    /// This location.
    At(u32),
    /// Wherever the driver puts it: it is the rule equal to it at a location that was not
    /// in use before.
    ChosenByDriver {
        /// The locations in use before the rule was inserted.
        in_use_before: Vec<u32>,
    },
}

impl Place {
    pub(super) fn location(&self) -> Option<u32> {
        match self {
            Place::At(l) => Some(*l),
            Place::ChosenByDriver { .. } => None,
        }
    }
}

/// One ntuple rule: recorded before it is inserted, marked inserted after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct RuleRecord {
    pub(super) rule: TcpRule,
    pub(super) place: Place,
    pub(super) inserted: bool,
}

/// A rule as state files hold it: a record, or a (location, rule) pair of a file that
/// names the interface only.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RuleOnDisk {
    Record(RuleRecord),
    Located(u32, TcpRule),
}

pub(super) fn rules_on_disk<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<RuleRecord>, D::Error> {
    Ok(Vec::<RuleOnDisk>::deserialize(d)?
        .into_iter()
        .map(|r| match r {
            RuleOnDisk::Record(r) => r,
            RuleOnDisk::Located(loc, rule) => RuleRecord {
                rule,
                place: Place::At(loc),
                inserted: true,
            },
        })
        .collect())
}

/// What the datapath changed on the NIC, or is about to: the state file's content.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Changes {
    /// The interface's name when the change was recorded.
    pub(super) iface: String,
    /// Its device; `None` in a file that names the interface only.
    #[serde(default)]
    pub(super) device: Option<Identity>,
    /// The channels before, and as set (recorded before they are set).
    #[serde(default)]
    pub(super) channels: Option<(Channels, Channels)>,
    /// Rules, in the order they were inserted.
    #[serde(default, deserialize_with = "rules_on_disk")]
    pub(super) rules: Vec<RuleRecord>,
}

impl Changes {
    pub(super) fn is_empty(&self) -> bool {
        self.channels.is_none() && self.rules.is_empty()
    }

    /// What is recorded, for an operator undoing it by hand.
    pub(super) fn describe(&self) -> String {
        let mut d = Vec::new();
        if let Some((before, set)) = &self.channels {
            d.push(format!(
                "RX channels set {} → {}",
                before.rx_queues(),
                set.rx_queues()
            ));
        }
        for r in &self.rules {
            let at = match &r.place {
                Place::At(l) => format!("at {l}"),
                Place::ChosenByDriver { .. } => "at a location the driver chose".into(),
            };
            d.push(format!("{} {at}", describe_rule(&r.rule)));
        }
        if d.is_empty() {
            "no change".into()
        } else {
            d.join("; ")
        }
    }
}

pub(super) fn describe_rule(r: &TcpRule) -> String {
    format!(
        "ntuple rule tcp{} dst-port {} src-port {:#x}/{:#x} → queue {}",
        if r.ipv6 { 6 } else { 4 },
        r.dst_port,
        r.src_bits,
        r.src_mask,
        r.queue
    )
}
