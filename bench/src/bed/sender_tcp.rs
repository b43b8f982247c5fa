//! What the Linux sender's TCP did during one run: its namespace's SNMP counters
//! (`/proc/net/snmp`, `/proc/net/netstat`) read before and after, so that a slow round under
//! loss can be told apart — retransmission timeouts, tail loss probes, spurious RTOs, SACK
//! recoveries — for the kernel and the datapath receiver alike. The sender's namespace holds
//! only the sender's connections, so the differences are that run's.

use anyhow::{anyhow, Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The counters kept: (`/proc/net` group, name, name in the report).
const COUNTERS: [(&str, &str, &str); 7] = [
    ("Tcp", "OutSegs", "out_segs"),
    ("Tcp", "RetransSegs", "retrans_segs"),
    ("TcpExt", "TCPTimeouts", "rtos"),
    ("TcpExt", "TCPSpuriousRTOs", "spurious_rtos"),
    ("TcpExt", "TCPLossProbes", "loss_probes"),
    ("TcpExt", "TCPSackRecovery", "sack_recoveries"),
    ("TcpExt", "TCPDSACKRecv", "dsacks_received"),
];

/// A snapshot of the sender namespace's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SenderTcp {
    values: BTreeMap<&'static str, u64>,
}

impl SenderTcp {
    /// Reads the counters of network namespace `ns`.
    pub fn read(ns: &str) -> Result<SenderTcp> {
        let mut text = String::new();
        for f in ["/proc/net/snmp", "/proc/net/netstat"] {
            let out = mpa_testbed::run_in(ns, &["cat", f]).with_context(|| format!("{ns}: {f}"))?;
            text.push_str(&String::from_utf8_lossy(&out.stdout));
        }
        SenderTcp::parse(&text)
    }

    /// Parses the `/proc/net/snmp` and `/proc/net/netstat` layout: per group a line of names
    /// and a line of values, both prefixed by `Group:`.
    pub fn parse(text: &str) -> Result<SenderTcp> {
        let mut groups: BTreeMap<&str, (Vec<&str>, Vec<&str>)> = BTreeMap::new();
        for line in text.lines() {
            let Some((group, rest)) = line.split_once(':') else {
                continue;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let e = groups.entry(group).or_default();
            if e.0.is_empty() {
                e.0 = fields;
            } else {
                e.1 = fields;
            }
        }
        let mut values = BTreeMap::new();
        for (group, name, key) in COUNTERS {
            let (names, vals) = groups
                .get(group)
                .ok_or_else(|| anyhow!("no {group} counters"))?;
            let i = names
                .iter()
                .position(|n| *n == name)
                .ok_or_else(|| anyhow!("no {group} {name}"))?;
            let v = vals
                .get(i)
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| anyhow!("{group} {name}: no value"))?;
            values.insert(key, v);
        }
        Ok(SenderTcp { values })
    }

    /// What happened between `before` and `self` (counters only grow; a reset reads as 0).
    pub fn since(&self, before: &SenderTcp) -> SenderTcp {
        let values = self
            .values
            .iter()
            .map(|(k, v)| {
                (
                    *k,
                    v.saturating_sub(before.values.get(k).copied().unwrap_or(0)),
                )
            })
            .collect();
        SenderTcp { values }
    }

    /// One counter (0 when unknown).
    pub fn get(&self, key: &str) -> u64 {
        self.values.get(key).copied().unwrap_or(0)
    }

    /// Retransmitted segments per 100 sent.
    pub fn retrans_percent(&self) -> f64 {
        100.0 * self.get("retrans_segs") as f64 / (self.get("out_segs").max(1)) as f64
    }

    /// The counters as JSON.
    pub fn json(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (k, v) in &self.values {
            m.insert((*k).to_string(), json!(v));
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNMP: &str = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
        Tcp: RtoAlgorithm RtoMin OutSegs RetransSegs InErrs\nTcp: 1 200 1000 37 0\n\
        TcpExt: SyncookiesSent TCPTimeouts TCPSpuriousRTOs TCPLossProbes TCPSackRecovery TCPDSACKRecv\n\
        TcpExt: 0 4 1 9 12 3\n";

    #[test]
    fn parses_and_subtracts() {
        let a = SenderTcp::parse(SNMP).unwrap();
        assert_eq!(a.get("out_segs"), 1000);
        assert_eq!(a.get("retrans_segs"), 37);
        assert_eq!(a.get("rtos"), 4);
        assert_eq!(a.get("spurious_rtos"), 1);
        assert_eq!(a.get("loss_probes"), 9);
        assert_eq!(a.get("sack_recoveries"), 12);
        assert_eq!(a.get("dsacks_received"), 3);
        let b = SenderTcp::parse(&SNMP.replace("1 200 1000 37 0", "1 200 3000 137 0")).unwrap();
        let d = b.since(&a);
        assert_eq!(d.get("out_segs"), 2000);
        assert_eq!(d.get("retrans_segs"), 100);
        assert_eq!(d.get("rtos"), 0);
        assert!((d.retrans_percent() - 5.0).abs() < 1e-9);
        assert_eq!(d.json()["retrans_segs"], 100);
    }

    #[test]
    fn a_missing_counter_is_an_error() {
        let e = SenderTcp::parse(&SNMP.replace("TCPTimeouts", "Other")).unwrap_err();
        assert_eq!(e.to_string(), "no TcpExt TCPTimeouts");
        assert!(SenderTcp::parse("Ip: a\nIp: 1\n").is_err());
    }
}
