//! The datapath's statistics document ([`DatapathStats`], what `mpa-control stats` prints)
//! as metric families, all named `mpa_datapath_…` and labelled with the interface; queue
//! families also with the queue, per-flow families (when asked for: a label set per flow)
//! also with the flow id. docs/operations.md lists every family.

use super::{Families, Labels};
use mpa_ctl_proto::client::ControlClient;
use mpa_ctl_proto::stats::{DatapathStats, FlowReport, QueueReport};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Unit;
use std::path::Path;

/// One scrape's snapshot of the datapath.
#[derive(Debug)]
pub struct DatapathCollector {
    /// The interface served (a label on every sample).
    pub interface: String,
    /// The statistics document, as read at the scrape.
    pub stats: DatapathStats,
    /// Also one label set per live flow.
    pub per_flow: bool,
}

impl Collector for DatapathCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let mut f = Families::new(&mut encoder);
        self.queues(&mut f)?;
        self.interface(&mut f)?;
        self.ended(&mut f)?;
        if self.per_flow {
            self.flows(&mut f)?;
        }
        Ok(())
    }
}

/// The longest one scrape waits for the datapath's answer (the datapath's control thread
/// asks each worker, up to 2 s each; Prometheus' default scrape timeout is 10 s).
pub const SCRAPE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// One scrape: the statistics document asked of the datapath on its control socket (the
/// same request as `mpa-control stats`), as OpenMetrics text; `Err` says why there is none.
pub fn scrape(socket: &Path, interface: &str, per_flow: bool) -> Result<String, String> {
    let agent = concat!("mpa-ops metrics ", env!("CARGO_PKG_VERSION"));
    let mut client = ControlClient::connect_as(socket, SCRAPE_TIMEOUT, agent)
        .map_err(|e| format!("datapath control socket {}: {e}", socket.display()))?;
    // Without per-flow metrics a page of one flow is enough: each queue's flow count comes
    // with it.
    let stats = if per_flow {
        client.stats()
    } else {
        client.stats_page(None, Some(1))
    }
    .map_err(|e| format!("statistics: {e}"))?;
    let collector = DatapathCollector {
        interface: interface.to_string(),
        stats,
        per_flow,
    };
    super::encode(collector).map_err(|e| format!("encoding: {e}"))
}

type QueueField = fn(&QueueReport) -> u64;
type FlowField = fn(&FlowReport) -> u64;

impl DatapathCollector {
    fn if_label(&self) -> Labels {
        vec![("interface", self.interface.clone())]
    }

    fn queue_labels(&self, q: &QueueReport) -> Labels {
        vec![
            ("interface", self.interface.clone()),
            ("queue", q.queue.to_string()),
        ]
    }

    fn queues(&self, f: &mut Families) -> std::fmt::Result {
        let qs = &self.stats.queues;
        let counters: [(&str, &str, Option<Unit>, QueueField); 22] = [
            (
                "rx_frames",
                "Frames received on the queue's AF_XDP socket.",
                None,
                |q| q.ring.rx_frames,
            ),
            ("rx", "Octets received.", Some(Unit::Bytes), |q| {
                q.ring.rx_octets
            }),
            ("tx_frames", "Frames sent.", None, |q| q.ring.tx_frames),
            ("tx", "Octets sent.", Some(Unit::Bytes), |q| {
                q.ring.tx_octets
            }),
            (
                "tx_no_frame",
                "Packets not sent for lack of a free TX frame.",
                None,
                |q| q.ring.tx_no_frame,
            ),
            (
                "wakeups",
                "Kernel wake-ups issued (sendto/poll on the socket).",
                None,
                |q| q.ring.wakeups,
            ),
            (
                "rx_multi_buffer_frames",
                "Frames that arrived as descriptor chains (jumbo frames).",
                None,
                |q| q.ring.rx_multi_buffer,
            ),
            (
                "rx_chains_dropped",
                "Descriptor chains dropped whole (cut short or too long).",
                None,
                |q| q.ring.rx_chain_dropped,
            ),
            (
                "rx_waits",
                "Times the worker slept waiting for frames.",
                None,
                |q| q.ring.rx_waits,
            ),
            (
                "rx_bursts",
                "RX bursts that took at least one descriptor.",
                None,
                |q| q.ring.rx_bursts,
            ),
            (
                "rx_full_bursts",
                "RX bursts that took as many descriptors as a burst may.",
                None,
                |q| q.ring.rx_full_bursts,
            ),
            (
                "malformed_frames",
                "Frames that were not IP/TCP or failed their checksums.",
                None,
                |q| q.stats.malformed,
            ),
            (
                "unknown_flow_segments",
                "TCP segments of no flow the queue's worker owns.",
                None,
                |q| q.stats.unknown_flow,
            ),
            (
                "wrong_vlan_frames",
                "Frames of a flow's 4-tuple with another VLAN tag (dropped).",
                None,
                |q| q.stats.wrong_vlan,
            ),
            (
                "completions_overflow",
                "Completions lost: the subscriber's ring was full.",
                None,
                |q| q.stats.completions_overflow,
            ),
            (
                "completions_unclaimed",
                "Completions of domains nobody subscribed to.",
                None,
                |q| q.stats.completions_unclaimed,
            ),
            (
                "posts_shm",
                "Posts read from shared-memory post queues.",
                None,
                |q| q.stats.posts_shm,
            ),
            (
                "posts_refused",
                "Posts refused (a PostRefused completion each).",
                None,
                |q| q.stats.posts_refused,
            ),
            (
                "posts_forwarded",
                "Posts for a connection another worker owns, passed on.",
                None,
                |q| q.stats.posts_forwarded,
            ),
            (
                "post_queues_corrupt",
                "Post queues abandoned because their producer corrupted them.",
                None,
                |q| q.stats.post_queues_corrupt,
            ),
            (
                "streamed_messages",
                "Messages placed with streaming stores (--streaming-stores).",
                None,
                |q| q.stats.streamed_messages,
            ),
            (
                "spin_yields",
                "Times the worker offered its core to other threads while it spun.",
                None,
                |q| q.stats.spin_yields,
            ),
        ];
        for (name, help, unit, get) in counters {
            let samples = qs.iter().map(|q| (self.queue_labels(q), get(q)));
            f.counter(&format!("mpa_datapath_{name}"), help, unit, samples)?;
        }
        f.counter(
            "mpa_datapath_worker_cpu",
            "CPU time of the queue's worker thread.",
            Some(Unit::Seconds),
            qs.iter().map(|q| (self.queue_labels(q), q.cpu_seconds)),
        )?;
        f.gauge(
            "mpa_datapath_flows",
            "Live flows on the queue.",
            None,
            qs.iter()
                .map(|q| (self.queue_labels(q), q.flow_count as i64)),
        )?;
        f.gauge(
            "mpa_datapath_zero_copy",
            "1 when the queue's AF_XDP socket is bound in zero-copy mode, 0 in copy mode.",
            None,
            qs.iter()
                .map(|q| (self.queue_labels(q), i64::from(q.ring.zero_copy))),
        )?;
        f.gauge(
            "mpa_datapath_multi_buffer",
            "1 when the queue's socket takes frames as descriptor chains (XDP_USE_SG).",
            None,
            qs.iter()
                .map(|q| (self.queue_labels(q), i64::from(q.ring.multi_buffer))),
        )?;
        f.gauge(
            "mpa_datapath_huge_pages",
            "1 when the queue's UMEM is on huge pages.",
            None,
            qs.iter()
                .map(|q| (self.queue_labels(q), i64::from(q.ring.huge_pages))),
        )
    }

    fn interface(&self, f: &mut Families) -> std::fmt::Result {
        let s = &self.stats;
        // A sample of the interface alone: every family of this function has one.
        let sample = |v: u64| [(self.if_label(), v)];
        if let Some(x) = &s.xdp {
            let xdp: [(&str, &str, u64); 10] = [
                ("seen", "Frames the XDP program ran on.", x.seen),
                (
                    "redirected",
                    "Steered frames redirected to an AF_XDP socket.",
                    x.redirected,
                ),
                ("passed", "Frames given to the kernel.", x.passed),
                (
                    "malformed",
                    "Frames with a truncated or invalid header.",
                    x.malformed,
                ),
                (
                    "steered_no_xsk",
                    "Steered frames dropped: no AF_XDP socket on their queue.",
                    x.steered_no_xsk,
                ),
                (
                    "dropped_fragment",
                    "IP fragments between a steered host pair, dropped.",
                    x.dropped_fragment,
                ),
                (
                    "dropped_ipv6_ext",
                    "IPv6 TCP behind extension headers between a steered pair, dropped.",
                    x.dropped_ipv6_ext,
                ),
                (
                    "dropped_vlan_stack",
                    "Stacked VLAN tags between a steered host pair, dropped.",
                    x.dropped_vlan_stack,
                ),
                (
                    "dropped_malformed",
                    "Malformed frames between a steered host pair, dropped.",
                    x.dropped_malformed,
                ),
                (
                    "headers_copied",
                    "Multi-buffer frames whose headers were copied out of fragments.",
                    x.headers_copied,
                ),
            ];
            for (name, help, v) in xdp {
                f.counter(
                    &format!("mpa_datapath_xdp_{name}_frames"),
                    help,
                    None,
                    sample(v),
                )?;
            }
        }
        f.gauge(
            "mpa_datapath_xdp_attached",
            "1 while the XDP program is attached, 0 once someone else detached it.",
            None,
            sample(u64::from(!s.xdp_detached)),
        )?;
        f.gauge(
            "mpa_datapath_adopted_flows",
            "Flows handed over or waiting for their hand-over.",
            None,
            sample(s.adopted_flows as u64),
        )?;
        f.gauge(
            "mpa_datapath_regions",
            "Registered memory regions.",
            None,
            sample(s.registry.regions as u64),
        )?;
        f.gauge(
            "mpa_datapath_registered",
            "Octets registered.",
            Some(Unit::Bytes),
            sample(s.registry.region_octets),
        )?;
        f.gauge(
            "mpa_datapath_registered_limit",
            "Octets that may be registered at most.",
            Some(Unit::Bytes),
            sample(s.registry.region_budget),
        )?;
        f.gauge(
            "mpa_datapath_buffers_waiting",
            "Receive buffers waiting in domains for their connection.",
            None,
            sample(s.registry.buffers_waiting as u64),
        )?;
        f.gauge(
            "mpa_datapath_subscribers",
            "Completion subscribers.",
            None,
            sample(s.registry.subscribers as u64),
        )?;
        f.counter(
            "mpa_datapath_region_pages_lost",
            "Region pages a consumer took away (a hole in a huge-page region) and the datapath replaced.",
            None,
            sample(s.registry.region_pages_lost),
        )?;
        f.gauge(
            "mpa_datapath_control_clients",
            "Control-socket clients connected.",
            None,
            sample(s.control.clients as u64),
        )?;
        f.gauge(
            "mpa_datapath_control_clients_limit",
            "Control-socket clients allowed at once.",
            None,
            sample(s.control.max_clients as u64),
        )?;
        f.counter(
            "mpa_datapath_control_clients_refused",
            "Control-socket clients refused at the limit.",
            None,
            sample(s.control.clients_refused),
        )?;
        f.gauge(
            "mpa_datapath_control_operator_slots",
            "Control-socket slots beyond the limit kept for operators.",
            None,
            sample(s.control.operator_slots as u64),
        )?;
        f.counter(
            "mpa_datapath_control_clients_evicted",
            "Silent control clients closed to make room for a new one.",
            None,
            sample(s.control.clients_evicted),
        )?;
        f.counter(
            "mpa_datapath_control_clients_timed_out",
            "Control clients closed at the Hello or idle deadline.",
            None,
            sample(s.control.clients_timed_out),
        )?;
        f.counter(
            "mpa_datapath_control_messages_dropped",
            "Messages for slow control clients dropped at their queue's bound.",
            None,
            sample(s.control.messages_dropped),
        )?;
        f.gauge(
            "mpa_datapath_control_queued",
            "Octets queued for control clients.",
            Some(Unit::Bytes),
            sample(s.control.queued_octets),
        )?;
        f.counter(
            "mpa_datapath_handovers_ts_recent_inherited",
            "Hand-overs whose TS.Recent came from a recorded segment.",
            None,
            sample(s.handover.ts_recent_inherited),
        )?;
        f.counter(
            "mpa_datapath_handovers_ts_recent_unknown",
            "Hand-overs whose TS.Recent stayed unknown.",
            None,
            sample(s.handover.ts_recent_unknown),
        )?;
        f.gauge(
            "mpa_datapath_memory_limit",
            "The memory budget (docs/limits.md).",
            Some(Unit::Bytes),
            sample(s.memory.limit),
        )?;
        f.gauge(
            "mpa_datapath_memory_used",
            "Octets charged to the memory budget now.",
            Some(Unit::Bytes),
            sample(s.memory.used),
        )?;
        f.gauge(
            "mpa_datapath_memory_high_water",
            "Most octets charged at once.",
            Some(Unit::Bytes),
            sample(s.memory.high_water),
        )?;
        f.gauge(
            "mpa_datapath_shared_memory_files",
            "Shared-memory files (regions, completion rings, post queues) held.",
            None,
            sample(s.memory.shared_files),
        )?;
        f.gauge(
            "mpa_datapath_shared_memory",
            "Octets of shared memory held (regions, completion rings, post queues).",
            Some(Unit::Bytes),
            sample(s.memory.shared_bytes),
        )?;
        f.counter(
            "mpa_datapath_memory_dropped_segments",
            "Out-of-order segments dropped for want of room.",
            None,
            sample(s.memory.dropped_segments),
        )?;
        f.counter(
            "mpa_datapath_memory_refused",
            "Hand-overs and subscriptions refused for want of room.",
            None,
            sample(s.memory.refused),
        )?;
        f.gauge(
            "mpa_datapath_capture_running",
            "1 while a packet capture runs.",
            None,
            sample(u64::from(s.capture.is_some())),
        )
    }

    fn ended(&self, f: &mut Families) -> std::fmt::Result {
        let e = &self.stats.ended;
        f.counter(
            "mpa_datapath_flows_ended_without_error",
            "Flows that ended with neither an MPA error nor a Terminate.",
            None,
            [(self.if_label(), e.without_error)],
        )?;
        f.counter(
            "mpa_datapath_flows_ended_mpa_error",
            "Flows that ended with an MPA error (RFC 5044 section 8), by code.",
            None,
            e.mpa_errors.iter().map(|c| {
                let mut l = self.if_label();
                l.push(("code", format!("0x{:02x}", c.code)));
                (l, c.count)
            }),
        )?;
        f.counter(
            "mpa_datapath_flows_ended_terminate",
            "Flows that ended with a Terminate (RFC 5040 section 7), by layer, error type, \
             error code and sender.",
            None,
            e.terminates.iter().map(|t| {
                let layer = match t.kind.layer {
                    0 => "rdmap".to_string(),
                    1 => "ddp".to_string(),
                    2 => "mpa".to_string(),
                    n => n.to_string(),
                };
                let mut l = self.if_label();
                l.push(("layer", layer));
                l.push(("error_type", format!("0x{:x}", t.kind.error_type)));
                l.push(("error_code", format!("0x{:02x}", t.kind.error_code)));
                l.push((
                    "sender",
                    if t.kind.sent { "us" } else { "peer" }.to_string(),
                ));
                (l, t.count)
            }),
        )?;
        f.counter(
            "mpa_datapath_flows_ended_terminate_other",
            "Flows that ended with a Terminate of a kind beyond the 64 counted apart.",
            None,
            [(self.if_label(), e.terminates_other)],
        )
    }

    fn flows(&self, f: &mut Families) -> std::fmt::Result {
        let live: Vec<(Labels, &FlowReport)> = self
            .stats
            .live_flows()
            .map(|(queue, fl)| {
                let l = vec![
                    ("interface", self.interface.clone()),
                    ("queue", queue.to_string()),
                    ("flow", fl.flow_id.to_string()),
                ];
                (l, fl)
            })
            .collect();
        let counters: [(&str, &str, Option<Unit>, FlowField); 14] = [
            (
                "flow_rx_segments",
                "Segments received for the flow.",
                None,
                |fl| fl.packets,
            ),
            (
                "flow_rx",
                "TCP payload octets received.",
                Some(Unit::Bytes),
                |fl| fl.octets,
            ),
            ("flow_tx_segments", "Segments sent.", None, |fl| {
                fl.frames_sent
            }),
            (
                "flow_tx",
                "TCP payload octets sent.",
                Some(Unit::Bytes),
                |fl| fl.octets_out,
            ),
            (
                "flow_retransmissions",
                "Retransmitted segments.",
                None,
                |fl| fl.retransmissions,
            ),
            (
                "flow_out_of_order_segments",
                "Segments that arrived out of order.",
                None,
                |fl| fl.out_of_order_segments,
            ),
            (
                "flow_duplicate_segments",
                "Duplicate segments (whole or partial).",
                None,
                |fl| fl.duplicates,
            ),
            (
                "flow_fpdus",
                "FPDUs delivered in stream order.",
                None,
                |fl| fl.rx.fpdus,
            ),
            (
                "flow_ulpdu",
                "ULPDU octets delivered.",
                Some(Unit::Bytes),
                |fl| fl.rx.ulpdu_octets,
            ),
            (
                "flow_placed",
                "Payload octets placed into registered memory.",
                Some(Unit::Bytes),
                |fl| fl.rx.placed_octets,
            ),
            (
                "flow_crc_errors",
                "FPDUs with a bad CRC (MPA error 2).",
                None,
                |fl| fl.rx.crc_errors,
            ),
            (
                "flow_marker_errors",
                "Bad markers (MPA error 3).",
                None,
                |fl| fl.rx.marker_errors,
            ),
            (
                "flow_messages_posted",
                "RDMA Writes and Sends posted on the flow.",
                None,
                |fl| fl.tx.messages_posted,
            ),
            (
                "flow_messages_completed",
                "Posted messages every octet of which the peer acknowledged.",
                None,
                |fl| fl.tx.messages_completed,
            ),
        ];
        for (name, help, unit, get) in counters {
            let samples = live.iter().map(|(l, fl)| (l.clone(), get(fl)));
            f.counter(&format!("mpa_datapath_{name}"), help, unit, samples)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpa_ctl_proto::stats::{EndedCounts, TerminateCount, XdpCounters};
    use mpa_ctl_proto::TerminateInfo;
    use openmetrics_parser::OpenMetricsValue;

    fn stats() -> DatapathStats {
        let mut ended = EndedCounts::default();
        ended.count(None, None);
        ended.count(Some(2), None);
        let term = TerminateInfo {
            layer: 1,
            error_type: 2,
            error_code: 5,
            sent: true,
        };
        ended.count(Some(2), Some(term));
        assert_eq!(
            ended.terminates,
            vec![TerminateCount {
                kind: term,
                count: 1
            }]
        );
        let queue: QueueReport = serde_json::from_value(serde_json::json!({
            "queue": 3, "rx_frames": 10, "rx_octets": 15000, "tx_frames": 4, "tx_octets": 240,
            "tx_no_frame": 0, "wakeups": 1, "malformed": 0, "unknown_flow": 2, "bursts": 5,
            "cpu_seconds": 0.5, "flows": []
        }))
        .unwrap();
        DatapathStats {
            queues: vec![queue],
            xdp: Some(XdpCounters {
                seen: 12,
                redirected: 10,
                ..Default::default()
            }),
            ended,
            ..Default::default()
        }
    }

    fn value(text: &str, family: &str, labels: &[(&str, &str)]) -> f64 {
        let m = openmetrics_parser::openmetrics::parse_openmetrics(text)
            .unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        let fam = m
            .families
            .get(family)
            .unwrap_or_else(|| panic!("no {family} in\n{text}"));
        let names = fam.get_label_names().to_vec();
        let values: Vec<String> = names
            .iter()
            .map(|n| labels.iter().find(|(k, _)| k == n).unwrap().1.to_string())
            .collect();
        let s = fam
            .get_sample_by_label_values(&values)
            .unwrap_or_else(|| panic!("no {family}{labels:?} in\n{text}"));
        match &s.value {
            OpenMetricsValue::Counter(c) => c.value.as_f64(),
            OpenMetricsValue::Gauge(g) => g.as_f64(),
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn the_statistics_document_as_openmetrics() {
        let c = DatapathCollector {
            interface: "eth0".into(),
            stats: stats(),
            per_flow: true,
        };
        let text = super::super::encode(c).unwrap();
        assert!(text.ends_with("# EOF\n"), "{text}");
        let q = [("interface", "eth0"), ("queue", "3")];
        assert_eq!(value(&text, "mpa_datapath_rx_bytes", &q), 15000.0);
        assert_eq!(value(&text, "mpa_datapath_rx_frames", &q), 10.0);
        assert_eq!(value(&text, "mpa_datapath_worker_cpu_seconds", &q), 0.5);
        assert_eq!(value(&text, "mpa_datapath_zero_copy", &q), 0.0);
        let i = [("interface", "eth0")];
        assert_eq!(value(&text, "mpa_datapath_xdp_redirected_frames", &i), 10.0);
        assert_eq!(
            value(&text, "mpa_datapath_flows_ended_without_error", &i),
            1.0
        );
        let mpa = [("interface", "eth0"), ("code", "0x02")];
        assert_eq!(
            value(&text, "mpa_datapath_flows_ended_mpa_error", &mpa),
            1.0
        );
        let t = [
            ("interface", "eth0"),
            ("layer", "ddp"),
            ("error_type", "0x2"),
            ("error_code", "0x05"),
            ("sender", "us"),
        ];
        assert_eq!(value(&text, "mpa_datapath_flows_ended_terminate", &t), 1.0);
    }

    #[test]
    fn terminate_kinds_are_bounded() {
        let mut e = EndedCounts::default();
        for code in 0..=255u8 {
            let kind = TerminateInfo {
                layer: 0,
                error_type: 1,
                error_code: code,
                sent: false,
            };
            e.count(None, Some(kind));
        }
        assert_eq!(e.terminates.len(), EndedCounts::MAX_KINDS);
        assert_eq!(e.terminates_other, 256 - EndedCounts::MAX_KINDS as u64);
    }
}
