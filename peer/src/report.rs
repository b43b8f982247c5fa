//! The JSON line `mpa-peer` prints per connection.

use hdrhistogram::Histogram;
use mpa::endpoint::EndpointError;
use mpa::startup::Negotiated;
use mpa::wire::ddp::TerminateRepr;
use mpa_ctl_proto::region_ad::RegionAd;
use serde::Serialize;

/// The one JSON line per connection.
#[derive(Serialize, Default)]
pub(crate) struct Report {
    pub(crate) peer: String,
    pub(crate) rev: Option<u8>,
    pub(crate) markers_rx: Option<bool>,
    pub(crate) markers_tx: Option<bool>,
    pub(crate) crc: Option<bool>,
    pub(crate) ulpdus: u64,
    pub(crate) ulpdu_bytes: u64,
    pub(crate) ulpdu_digest: String,
    pub(crate) error_code: Option<u8>,
    pub(crate) error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) private_data: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rtr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mulpdu: Option<usize>,
    /// connect --op write|send: messages sent (with --aligned a message is several ULPDUs;
    /// with --duration the count is known only at the end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) messages: Option<u64>,
    /// connect: the operation sent; listen: the operation received ("write", "send", "read",
    /// "other", or "mixed"), absent when no ULPDU arrived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) op: Option<&'static str>,
    /// The region advertisement used (connect) or sent (listen).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) region: Option<RegionReport>,
    pub(crate) seconds: f64,
    /// connect: from the first ULPDU written until the peer closed (after the last one was
    /// read): the transfer alone, without the TCP handshake and MPA startup, whose lost and
    /// retransmitted SYN or Request under loss would otherwise add a timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) transfer_seconds: Option<f64>,
    /// connect: the TCP congestion control of the connection (TCP_CONGESTION).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) congestion: Option<String>,
    /// listen: RDMA Write messages (segments with L) placed into the region, and their
    /// payload octets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) writes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) write_octets: Option<u64>,
    /// listen: Send messages (untagged, QN 0, L set) received, and their payload octets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sends: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) send_octets: Option<u64>,
    /// listen --advertise: CRC32c of the whole region when the connection ended (hex).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) region_digest: Option<String>,
    /// listen --advertise: every octet written equalled the region pattern at its place
    /// (`sink.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) region_pattern_ok: Option<bool>,
    /// listen --advertise: RDMA Read Requests answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reads_served: Option<u64>,
    /// connect --op read: Read Responses complete, their payload octets, whether every
    /// octet equalled the pattern at its source offset, and the goodput of those octets over
    /// `transfer_seconds` in Gbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) read_responses: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) read_octets: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) read_pattern_ok: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) goodput_gbps: Option<f64>,
    /// listen: the region the Initiator advertised in its Request (`connect --op pingpong`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) peer_region: Option<RegionReport>,
    /// listen --echo: RDMA Write messages written back to the Initiator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) echoes: Option<u64>,
    /// connect --op pingpong: round trips measured, warm-up round trips before them (not
    /// measured), and the percentiles of half the round-trip time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) iterations: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) warmup: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rtt_half_ns: Option<RttReport>,
    /// The Terminate this side sent for a DDP/RDMAP violation of the peer's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) terminate_sent: Option<TerminateReport>,
    /// The Terminate the peer sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) terminate_received: Option<TerminateReport>,
}

/// A Terminate's control fields (RFC 5040 §4.8).
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TerminateReport {
    pub(crate) layer: u8,
    pub(crate) error_type: u8,
    pub(crate) error_code: u8,
}

impl From<TerminateRepr> for TerminateReport {
    fn from(t: TerminateRepr) -> Self {
        TerminateReport {
            layer: t.layer,
            error_type: t.error_type,
            error_code: t.error_code,
        }
    }
}

#[derive(Serialize, Clone, Copy)]
pub(crate) struct RegionReport {
    pub(crate) stag: u32,
    pub(crate) len: u64,
    pub(crate) base_to: u64,
    pub(crate) recv_buf_size: u32,
}

impl From<&RegionAd> for RegionReport {
    fn from(ad: &RegionAd) -> Self {
        RegionReport {
            stag: ad.stag,
            len: ad.len,
            base_to: ad.base_to,
            recv_buf_size: ad.recv_buf_size,
        }
    }
}

impl Report {
    pub(crate) fn negotiated(&mut self, n: &Negotiated) {
        self.rev = Some(n.rev);
        self.markers_rx = Some(n.markers_rx);
        self.markers_tx = Some(n.markers_tx);
        self.crc = Some(n.crc);
        self.private_data = Some(String::from_utf8_lossy(&n.peer_private_data).into_owned());
        self.rtr = n.rtr.map(|r| format!("{r:?}"));
    }

    pub(crate) fn fail(&mut self, e: &EndpointError) {
        self.error_code = e.code().map(|c| c.code());
        self.error = Some(e.to_string());
        if let EndpointError::Terminated {
            layer,
            error_type,
            error_code,
        } = *e
        {
            self.terminate_received = Some(TerminateReport {
                layer,
                error_type,
                error_code,
            });
        }
    }

    /// We sent Terminate `t` because of `why`.
    pub(crate) fn terminated(&mut self, t: TerminateRepr, why: &dyn std::fmt::Display) {
        self.error = Some(format!(
            "sent Terminate layer {} type {} code {:#04x}: {why}",
            t.layer, t.error_type, t.error_code
        ));
        self.terminate_sent = Some(t.into());
    }
}

pub(crate) fn emit(report: &Report) {
    // One line per connection, flushed at once.
    match serde_json::to_string(report) {
        Ok(s) => mpa_cli::outln!("{s}"),
        Err(e) => eprintln!("mpa-peer: cannot encode report: {e}"),
    }
}

/// Half the round-trip time in ns: HdrHistogram's values (equivalent within its 3
/// significant digits).
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
pub(crate) struct RttReport {
    pub min: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
}

impl RttReport {
    /// `None` for an empty histogram.
    pub(crate) fn of(h: &Histogram<u64>) -> Option<Self> {
        (!h.is_empty()).then(|| RttReport {
            min: h.min(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: h.mean(),
        })
    }
}
