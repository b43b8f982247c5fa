//! What the Linux sender's TCP did during one run: its namespace's SNMP counters
//! (`/proc/net/snmp`, `/proc/net/netstat`) read before and after, so that a slow round under
//! loss can be told apart — retransmission timeouts, tail loss probes, spurious RTOs, SACK
//! recoveries — for the kernel and the datapath receiver alike. The sender's namespace holds
//! only the sender's connections, so the differences are that run's.

use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A counter of [`SenderTcp`].
type Counter = fn(&mut SenderTcp) -> &mut u64;

/// The counters kept: (`/proc/net` group, name, field).
const COUNTERS: [(&str, &str, Counter); 7] = [
    ("Tcp", "OutSegs", |t| &mut t.out_segs),
    ("Tcp", "RetransSegs", |t| &mut t.retrans_segs),
    ("TcpExt", "TCPTimeouts", |t| &mut t.rtos),
    ("TcpExt", "TCPSpuriousRTOs", |t| &mut t.spurious_rtos),
    ("TcpExt", "TCPLossProbes", |t| &mut t.loss_probes),
    ("TcpExt", "TCPSackRecovery", |t| &mut t.sack_recoveries),
    ("TcpExt", "TCPDSACKRecv", |t| &mut t.dsacks_received),
];

/// A snapshot of the sender namespace's counters (or, from [`SenderTcp::since`], what
/// happened between two); as `bw` documents record it per round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SenderTcp {
    /// Segments sent, and of them retransmitted.
    pub(crate) out_segs: u64,
    pub(crate) retrans_segs: u64,
    /// Retransmission timeouts, and those undone as spurious.
    pub(crate) rtos: u64,
    pub(crate) spurious_rtos: u64,
    /// Tail loss probes.
    pub(crate) loss_probes: u64,
    /// Recoveries by SACK.
    pub(crate) sack_recoveries: u64,
    /// D-SACKs received (the receiver got a segment twice).
    pub(crate) dsacks_received: u64,
}

impl SenderTcp {
    /// Reads the counters of network namespace `ns`.
    pub(crate) fn read(ns: &str) -> Result<SenderTcp> {
        let mut text = String::new();
        for f in ["/proc/net/snmp", "/proc/net/netstat"] {
            let out = mpa_testbed::run_in(ns, &["cat", f]).with_context(|| format!("{ns}: {f}"))?;
            text.push_str(&String::from_utf8_lossy(&out.stdout));
        }
        SenderTcp::parse(&text)
    }

    /// Parses the `/proc/net/snmp` and `/proc/net/netstat` layout: per group a line of names
    /// and a line of values, both prefixed by `Group:`.
    pub(crate) fn parse(text: &str) -> Result<SenderTcp> {
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
        let mut counters = SenderTcp::default();
        for (group, name, field) in COUNTERS {
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
            *field(&mut counters) = v;
        }
        Ok(counters)
    }

    /// What happened between `before` and `self` (counters only grow; a reset reads as 0).
    pub(crate) fn since(&self, before: &SenderTcp) -> SenderTcp {
        let (mut now, mut then) = (*self, *before);
        let mut d = SenderTcp::default();
        for (_, _, field) in COUNTERS {
            *field(&mut d) = field(&mut now).saturating_sub(*field(&mut then));
        }
        d
    }

    /// Retransmitted segments per 100 sent.
    pub(crate) fn retrans_percent(&self) -> f64 {
        100.0 * self.retrans_segs as f64 / self.out_segs.max(1) as f64
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
        assert_eq!(
            a,
            SenderTcp {
                out_segs: 1000,
                retrans_segs: 37,
                rtos: 4,
                spurious_rtos: 1,
                loss_probes: 9,
                sack_recoveries: 12,
                dsacks_received: 3,
            }
        );
        let b = SenderTcp::parse(&SNMP.replace("1 200 1000 37 0", "1 200 3000 137 0")).unwrap();
        let d = b.since(&a);
        assert_eq!((d.out_segs, d.retrans_segs, d.rtos), (2000, 100, 0));
        assert!((d.retrans_percent() - 5.0).abs() < 1e-9);
        let json = serde_json::to_value(d).unwrap();
        assert_eq!(json["retrans_segs"], 100);
        assert_eq!(json.as_object().map(|o| o.len()), Some(COUNTERS.len()));
    }

    #[test]
    fn a_missing_counter_is_an_error() {
        let e = SenderTcp::parse(&SNMP.replace("TCPTimeouts", "Other")).unwrap_err();
        assert_eq!(e.to_string(), "no TcpExt TCPTimeouts");
        assert!(SenderTcp::parse("Ip: a\nIp: 1\n").is_err());
    }
}
