//! What the daemon's listeners and setups did, counted as it happens, and the metrics made
//! of it (`mpa-control serve --metrics`; docs/operations.md lists them).

use super::admission::Shared;
use crate::setup_error::SetupError;
use mpa_ops::metrics::{Families, Labels};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Why an accepted connection was refused before its setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The datapath is not reachable.
    DatapathUnavailable,
    /// `max_connections` reached.
    MaxConnections,
    /// `max_connections_per_source` reached for the peer's address.
    MaxConnectionsPerSource,
    /// No thread could be started for the setup.
    NoThread,
    /// The region advertisement the listener puts in its Reply could not be made.
    NoAdvertisement,
}

impl Refusal {
    const ALL: [Refusal; 5] = [
        Refusal::DatapathUnavailable,
        Refusal::MaxConnections,
        Refusal::MaxConnectionsPerSource,
        Refusal::NoThread,
        Refusal::NoAdvertisement,
    ];

    fn label(self) -> &'static str {
        match self {
            Refusal::DatapathUnavailable => "datapath_unavailable",
            Refusal::MaxConnections => "max_connections",
            Refusal::MaxConnectionsPerSource => "max_connections_per_source",
            Refusal::NoThread => "no_thread",
            Refusal::NoAdvertisement => "no_advertisement",
        }
    }
}

/// Why a setup failed: the [`SetupError`] variant, or the setup's own plumbing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    Tcp,
    Closed,
    Startup,
    Datapath,
    Freeze,
    NextHop,
    NotQuiet,
    /// A socket pair or relay thread could not be had.
    Resources,
    /// An application's setup that its application cancelled, left or never decided.
    Abandoned,
}

impl Failure {
    const ALL: [Failure; 9] = [
        Failure::Tcp,
        Failure::Closed,
        Failure::Startup,
        Failure::Datapath,
        Failure::Freeze,
        Failure::NextHop,
        Failure::NotQuiet,
        Failure::Resources,
        Failure::Abandoned,
    ];

    fn label(self) -> &'static str {
        match self {
            Failure::Tcp => "tcp",
            Failure::Closed => "closed",
            Failure::Startup => "startup",
            Failure::Datapath => "datapath",
            Failure::Freeze => "freeze",
            Failure::NextHop => "next_hop",
            Failure::NotQuiet => "not_quiet",
            Failure::Resources => "resources",
            Failure::Abandoned => "abandoned",
        }
    }
}

impl From<&SetupError> for Failure {
    fn from(e: &SetupError) -> Failure {
        match e {
            SetupError::Io(_) => Failure::Tcp,
            SetupError::Closed => Failure::Closed,
            SetupError::Startup(_) => Failure::Startup,
            SetupError::Datapath(_) => Failure::Datapath,
            SetupError::Freeze(_) => Failure::Freeze,
            SetupError::Neighbour(_) => Failure::NextHop,
            SetupError::NotQuiet { .. } => Failure::NotQuiet,
            SetupError::Abandoned(_) => Failure::Abandoned,
        }
    }
}

/// One listener's counts.
#[derive(Debug, Default)]
pub(crate) struct ListenerCounts {
    accepted: AtomicU64,
    refused: [AtomicU64; Refusal::ALL.len()],
    handed_over: AtomicU64,
    rejected: AtomicU64,
    failed: [AtomicU64; Failure::ALL.len()],
}

impl ListenerCounts {
    pub(crate) fn accepted(&self) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn refused(&self, why: Refusal) {
        // ALL lists the variants in declaration order: the discriminant is the index.
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn handed_over(&self) {
        self.handed_over.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn failed(&self, why: Failure) {
        self.failed[why as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// Every listener's counts, and the link's.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) listeners: Vec<(SocketAddr, Arc<ListenerCounts>)>,
    /// Times the datapath connection was lost.
    pub(crate) datapath_lost: AtomicU64,
}

/// A scrape of the daemon: reads the counters as it encodes them.
#[derive(Debug)]
pub struct DaemonCollector(pub(super) Arc<Shared>, pub(super) Arc<Counters>);

impl Collector for DaemonCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let (s, c) = (&self.0, &self.1);
        let mut f = Families::new(&mut encoder);
        let by_listener = |get: &dyn Fn(&ListenerCounts) -> u64| -> Vec<(Labels, u64)> {
            c.listeners
                .iter()
                .map(|(bind, l)| (mpa_ops::metrics::label("listener", bind), get(l)))
                .collect()
        };
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        f.counter(
            "mpa_control_connections_accepted",
            "TCP connections accepted by the listener.",
            None,
            by_listener(&|l| load(&l.accepted)),
        )?;
        f.counter(
            "mpa_control_handovers",
            "Connections whose MPA startup completed and which the datapath adopted.",
            None,
            by_listener(&|l| load(&l.handed_over)),
        )?;
        f.counter(
            "mpa_control_rejected",
            "MPA Requests rejected by the listener's policy (a Reply with the Rejected bit).",
            None,
            by_listener(&|l| load(&l.rejected)),
        )?;
        let mut refused = Vec::new();
        let mut failed = Vec::new();
        for (bind, l) in &c.listeners {
            for (i, r) in Refusal::ALL.iter().enumerate() {
                let labels = vec![("listener", bind.to_string()), ("reason", r.label().into())];
                refused.push((labels, load(&l.refused[i])));
            }
            for (i, why) in Failure::ALL.iter().enumerate() {
                let labels = vec![
                    ("listener", bind.to_string()),
                    ("reason", why.label().into()),
                ];
                failed.push((labels, load(&l.failed[i])));
            }
        }
        f.counter(
            "mpa_control_connections_refused",
            "Connections refused (reset) before their setup, by reason.",
            None,
            refused,
        )?;
        f.counter(
            "mpa_control_setups_failed",
            "Setups that failed after they started, by reason.",
            None,
            failed,
        )?;
        f.counter(
            "mpa_control_datapath_lost",
            "Times the datapath became unavailable: not reachable at start, or its connection lost \
             (the handed-over sockets closed).",
            None,
            [(Labels::new(), load(&c.datapath_lost))],
        )?;
        f.gauge(
            "mpa_control_datapath_connected",
            "1 while the daemon holds a working datapath connection.",
            None,
            [(Labels::new(), i64::from(s.up.load(Ordering::Relaxed)))],
        )?;
        f.gauge(
            "mpa_control_connections_held",
            "Connections in setup or handed over (their frozen sockets held).",
            None,
            [(Labels::new(), s.active.load(Ordering::Relaxed) as i64)],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_is_counted_under_its_own_label() {
        for (i, r) in Refusal::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{r:?}");
        }
        for (i, f) in Failure::ALL.iter().enumerate() {
            assert_eq!(*f as usize, i, "{f:?}");
        }
    }
}
