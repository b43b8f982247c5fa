//! TS.Recent at the hand-over (docs/environment.md, "Why TS.Recent must be inherited"): the
//! ports control clients ask us to watch (the XDP program then records the peer's last
//! timestamped segments of their connections until they are steered), and the choice, at
//! each hand-over, of the TSval the kernel had taken as TS.Recent.
//!
//! The XDP maps stay ours alone (docs/architecture.md, "Crate layout"): clients only name
//! ports; we count who watches what, so that a port stays watched while any client wants it
//! and a client that goes takes its watches with it.

use super::Server;
use mpa_bpf::{choose_ts_recent, FlowKey};
use mpa_ctl_proto::stats::HandoverStats;
use mpa_ctl_proto::{ErrorCode, HandOver, Message};
use std::collections::{BTreeMap, BTreeSet};

/// Watched ports and the hand-over counters.
#[derive(Debug, Default)]
pub(super) struct Watches {
    /// Port → the clients watching it.
    ports: BTreeMap<u16, BTreeSet<u64>>,
    stats: HandoverStats,
}

impl Server {
    /// WatchPort: `client` wants `port`'s connections recorded.
    pub(super) fn watch_port(&mut self, client: u64, id: u64, port: u16) {
        if port == 0 {
            return self.reply(
                client,
                Message::Error {
                    id,
                    code: ErrorCode::BadRequest,
                    message: "port 0 cannot be watched".into(),
                },
            );
        }
        if !self.watch.ports.contains_key(&port) {
            if let Err(e) = self.steering.watch_port(port) {
                return self.reply(
                    client,
                    Message::Error {
                        id,
                        code: ErrorCode::Limit,
                        message: format!(
                            "port {port} cannot be watched ({} ports are): {e}",
                            self.watch.ports.len()
                        ),
                    },
                );
            }
            tracing::debug!(port, client, "port watched for TS.Recent");
        }
        self.watch.ports.entry(port).or_default().insert(client);
        self.reply(client, Message::Ok { id });
    }

    /// UnwatchPort: `client` no longer watches `port`.
    pub(super) fn unwatch_port(&mut self, client: u64, id: u64, port: u16) {
        if !self
            .watch
            .ports
            .get(&port)
            .is_some_and(|c| c.contains(&client))
        {
            return self.reply(
                client,
                Message::Error {
                    id,
                    code: ErrorCode::BadRequest,
                    message: format!("port {port} is not watched by this client"),
                },
            );
        }
        self.release_watch(client, port);
        self.reply(client, Message::Ok { id });
    }

    /// Whether `client` watches a port.
    pub(super) fn watches_any(&self, client: u64) -> bool {
        self.watch.ports.values().any(|c| c.contains(&client))
    }

    /// A client went away: its watches end.
    pub(super) fn unwatch_all(&mut self, client: u64) {
        let ports: Vec<u16> = self
            .watch
            .ports
            .iter()
            .filter(|(_, c)| c.contains(&client))
            .map(|(&p, _)| p)
            .collect();
        for port in ports {
            self.release_watch(client, port);
        }
    }

    fn release_watch(&mut self, client: u64, port: u16) {
        let Some(clients) = self.watch.ports.get_mut(&port) else {
            return;
        };
        clients.remove(&client);
        if clients.is_empty() {
            self.watch.ports.remove(&port);
            if let Err(e) = self.steering.unwatch_port(port) {
                tracing::warn!(port, %e, "port not unwatched in the XDP map");
            }
        }
    }

    /// Fills in the hand-over's TS.Recent (when timestamps are on and mpa-control did not
    /// know it) from the peer's segments the XDP program recorded for `key` before it was
    /// steered, and forgets those records.
    pub(super) fn inherit_ts_recent(&mut self, key: &FlowKey, handover: &mut HandOver) {
        let segments = self.steering.take_ts_segments(key).unwrap_or_else(|e| {
            tracing::warn!(flow_id = handover.flow_id, %e, "TS records not readable");
            Vec::new()
        });
        let rcv_nxt = handover.tcp.rcv_nxt;
        let Some(ts) = handover.tcp.timestamps.as_mut() else {
            return;
        };
        if ts.ts_recent == 0 {
            if let Some(v) = choose_ts_recent(&segments, rcv_nxt) {
                ts.ts_recent = v;
            }
        }
        if ts.ts_recent != 0 {
            self.watch.stats.ts_recent_inherited += 1;
            tracing::debug!(
                flow_id = handover.flow_id,
                ts_recent = ts.ts_recent,
                "TS.Recent inherited"
            );
        } else {
            self.watch.stats.ts_recent_unknown += 1;
            // The first timestamped segment to arrive, real or forged, will set it. A port
            // nobody watches is the setup's choice (an older mpa-control, a test); a watched
            // one without a match is not expected (records evicted by a flood, or the watch
            // came too late).
            let port = key.local().port();
            if self.watch.ports.contains_key(&port) {
                tracing::warn!(
                    flow_id = handover.flow_id,
                    port,
                    recorded = segments.len(),
                    "TS.Recent unknown at hand-over: no recorded segment of the peer ends at RCV.NXT"
                );
            } else {
                tracing::info!(
                    flow_id = handover.flow_id,
                    port,
                    "TS.Recent unknown at hand-over: port not watched"
                );
            }
        }
    }

    /// The hand-over counters for the statistics.
    pub(super) fn handover_stats(&self) -> HandoverStats {
        HandoverStats {
            watched_ports: self.watch.ports.keys().copied().collect(),
            ..self.watch.stats.clone()
        }
    }
}
