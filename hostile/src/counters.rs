//! The counters a class's expectation names: the flow's, its queue's, the XDP program's.

use mpa_ctl_proto::stats::{FlowReport, QueueStats, XdpCounters};

/// A counter the datapath keeps, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    /// Queue: frames that did not parse (checksum, truncation, options).
    Malformed,
    /// Queue: steered frames of no flow.
    UnknownFlow,
    /// Flow: TSval older than TS.Recent.
    Paws,
    /// Flow: no timestamps option.
    MissingTimestamp,
    /// Flow: ACK bit off or ACK not acceptable.
    BadAck,
    /// Flow: RST not at RCV.NXT.
    BadRst,
    /// Flow: SYN.
    Syn,
    /// Flow: outside the receive window.
    OutOfWindow,
    /// Flow: every octet received before.
    Duplicate,
    /// Queue: a VLAN tag other than the flow's.
    WrongVlan,
    /// XDP: a frame cut inside the TCP header between a steered host pair, dropped.
    XdpMalformed,
    /// XDP: IP fragments between a steered host pair, dropped.
    XdpFragment,
    /// XDP: stacked VLAN tags around steered TCP, dropped.
    XdpVlanStack,
    /// XDP: IPv6 extension headers before steered TCP, dropped.
    XdpIpv6Ext,
}

/// The counters of one moment: the flow's, its queue's, the XDP program's.
pub struct Snapshot {
    pub(super) flow: FlowReport,
    pub(super) queue: QueueStats,
    pub(super) xdp: XdpCounters,
}

impl Counter {
    pub(super) fn read(self, s: &Snapshot) -> u64 {
        let (f, q) = (&s.flow, &s.queue);
        match self {
            Counter::WrongVlan => q.wrong_vlan,
            Counter::XdpMalformed => s.xdp.dropped_malformed,
            Counter::XdpFragment => s.xdp.dropped_fragment,
            Counter::XdpVlanStack => s.xdp.dropped_vlan_stack,
            Counter::XdpIpv6Ext => s.xdp.dropped_ipv6_ext,
            Counter::Malformed => q.malformed,
            Counter::UnknownFlow => q.unknown_flow,
            Counter::Paws => f.tcp_drops.paws,
            Counter::MissingTimestamp => f.tcp_drops.missing_timestamp,
            Counter::BadAck => f.tcp_drops.bad_ack,
            Counter::BadRst => f.tcp_drops.bad_rst,
            Counter::Syn => f.tcp_drops.syn,
            Counter::OutOfWindow => f.dropped_out_of_window,
            Counter::Duplicate => f.tcp_drops.duplicate,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Counter::Malformed => "queue.malformed",
            Counter::UnknownFlow => "queue.unknown_flow",
            Counter::Paws => "tcp_drops.paws",
            Counter::MissingTimestamp => "tcp_drops.missing_timestamp",
            Counter::BadAck => "tcp_drops.bad_ack",
            Counter::BadRst => "tcp_drops.bad_rst",
            Counter::Syn => "tcp_drops.syn",
            Counter::OutOfWindow => "dropped_out_of_window",
            Counter::Duplicate => "tcp_drops.duplicate",
            Counter::WrongVlan => "queue.wrong_vlan",
            Counter::XdpMalformed => "xdp.dropped_malformed",
            Counter::XdpFragment => "xdp.dropped_fragment",
            Counter::XdpVlanStack => "xdp.dropped_vlan_stack",
            Counter::XdpIpv6Ext => "xdp.dropped_ipv6_ext",
        }
    }
}
