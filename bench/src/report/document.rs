//! The document each experiment prints with `--json`, typed: `{"scenario", "params",
//! "results"}` with the params and the results of `lat`, `bw`, `pipeline` and `setup`. These
//! types define the keys (docs/benchmarks.md, "JSON", documents them); [`check_shape`] checks
//! a document against them.
//!
//! A NaN (a value that could not be measured) is written as `null`, as serde_json writes every
//! non-finite number. The headline values of each scenario must be numbers: reading them back
//! refuses `null`. Every other floating-point value reads `null` back as NaN.

use crate::bed::options::{DatapathMode, Framing, Op, PostVia, SenderSide};
use crate::bed::sender_tcp::SenderTcp;
use crate::report::Spread;
use anyhow::{anyhow, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::net::IpAddr;

/// The experiments that print a document.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Scenario {
    Lat,
    Bw,
    Pipeline,
    Setup,
}

impl Scenario {
    pub(crate) fn key(self) -> &'static str {
        match self {
            Scenario::Lat => "lat",
            Scenario::Bw => "bw",
            Scenario::Pipeline => "pipeline",
            Scenario::Setup => "setup",
        }
    }
}

/// The document of one experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "scenario", rename_all = "lowercase")]
pub(crate) enum Document {
    Lat {
        params: LatParams,
        results: Vec<LatRecord>,
        /// One-way runs: how the sender's stamps and the receivers' clock relate (none for
        /// `--pingpong`, whose round trips need no common clock).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        clock: Option<LatClock>,
    },
    Bw {
        params: BwParams,
        results: Vec<BwRecord>,
    },
    Pipeline {
        params: PipelineParams,
        results: Vec<PipelineRecord>,
    },
    Setup {
        params: SetupParams,
        results: Vec<SetupRecord>,
    },
}

impl Document {
    pub(crate) fn scenario(&self) -> Scenario {
        match self {
            Document::Lat { .. } => Scenario::Lat,
            Document::Bw { .. } => Scenario::Bw,
            Document::Pipeline { .. } => Scenario::Pipeline,
            Document::Setup { .. } => Scenario::Setup,
        }
    }
}

/// Checks that `doc` has the shape docs/benchmarks.md documents: a known scenario, and
/// params and results that read as that scenario's (`Document`), headline values numbers.
/// An error names the part and the result that does not, and why.
pub fn check_shape(doc: &Value) -> Result<()> {
    let scenario =
        Scenario::deserialize(&doc["scenario"]).map_err(|e| anyhow!("\"scenario\": {e}"))?;
    match scenario {
        Scenario::Lat => {
            check::<LatParams>(scenario, doc, |r| LatRecord::deserialize(r).map(drop))?;
            // One-way samples are only as good as the clock: a one-way document says which.
            if doc["params"]["pingpong"] != true {
                LatClock::deserialize(&doc["clock"]).map_err(|e| anyhow!("lat clock: {e}"))?;
            }
            Ok(())
        }
        Scenario::Bw => check::<BwParams>(scenario, doc, |r| BwRecord::deserialize(r).map(drop)),
        Scenario::Setup => {
            check::<SetupParams>(scenario, doc, |r| SetupRecord::deserialize(r).map(drop))
        }
        // Told apart by their per-worker results, so that an error names the missing key
        // rather than only that neither kind matched.
        Scenario::Pipeline => {
            check::<PipelineParams>(scenario, doc, |r| match r.get("per_worker") {
                Some(_) => PipelineWorkersRecord::deserialize(r).map(drop),
                None => PipelineConfigRecord::deserialize(r).map(drop),
            })
        }
    }
}

fn check<P: DeserializeOwned>(
    scenario: Scenario,
    doc: &Value,
    record: impl Fn(&Value) -> Result<(), serde_json::Error>,
) -> Result<()> {
    let key = scenario.key();
    P::deserialize(&doc["params"]).map_err(|e| anyhow!("{key} params: {e}"))?;
    let results = doc["results"]
        .as_array()
        .ok_or_else(|| anyhow!("{key}: \"results\" is not an array"))?;
    for (i, r) in results.iter().enumerate() {
        record(r).map_err(|e| anyhow!("{key} result {i}: {e}"))?;
    }
    Ok(())
}

/// Reads back a floating-point value that was NaN when written (`null`).
fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// [`nan_if_null`] for each value of a list.
fn nans_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Ok(Vec::<Option<f64>>::deserialize(d)?
        .into_iter()
        .map(|x| x.unwrap_or(f64::NAN))
        .collect())
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

fn nan() -> f64 {
    f64::NAN
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The receiver a `lat` or `bw` result is of (with `bw --sender datapath`: the sender, and
/// `dp→dp` the datapath sending to a second datapath).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Receiver {
    #[serde(rename = "kernel")]
    Kernel,
    #[serde(rename = "datapath")]
    Datapath,
    #[serde(rename = "dp→dp")]
    DatapathToDatapath,
    /// `lat`: the datapath with spinning worker threads.
    #[serde(rename = "datapath-spin")]
    DatapathSpin,
    /// `lat`: the datapath turned by the measuring thread (run-to-completion).
    #[serde(rename = "datapath-rtc")]
    RunToCompletion,
    /// `lat`: run-to-completion whose thread sleeps when the queue is idle.
    #[serde(rename = "datapath-rtc-sleep")]
    RunToCompletionSleeping,
    /// `lat --pingpong`: the C ping-pong through libmpaxdp.
    #[serde(rename = "datapath-c-api")]
    CApi,
    /// `lat --pingpong`: its Rust twin, a process of its own.
    #[serde(rename = "datapath-rust-app")]
    RustApp,
}

impl Receiver {
    /// As documents and tables name it.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Receiver::Kernel => "kernel",
            Receiver::Datapath => "datapath",
            Receiver::DatapathToDatapath => "dp→dp",
            Receiver::DatapathSpin => "datapath-spin",
            Receiver::RunToCompletion => "datapath-rtc",
            Receiver::RunToCompletionSleeping => "datapath-rtc-sleep",
            Receiver::CApi => "datapath-c-api",
            Receiver::RustApp => "datapath-rust-app",
        }
    }
}

/// `lat`'s options. The bed's loss, impairment, queues, CPU split and interface are recorded
/// only when they differ from the private bed's defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct LatParams {
    pub(crate) sizes: Vec<usize>,
    pub(crate) messages: u64,
    pub(crate) rate: u64,
    pub(crate) rounds: u32,
    pub(crate) mtu: u32,
    pub(crate) consumer_busy_poll: bool,
    pub(crate) spin_us: u64,
    /// `--spin-yield-polls`: empty polls between a spinner's yields (0: never).
    #[serde(default)]
    pub(crate) spin_yield_polls: u32,
    /// The datapath modes measured (`lat --modes`).
    #[serde(default)]
    pub(crate) modes: Vec<DatapathMode>,
    /// `--pingpong`: how the process modes' consumer posts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) post_via: Option<PostVia>,
    /// `--wire-segments`: the kernel side's sender without TSO, its receiver with GRO.
    #[serde(default, skip_serializing_if = "is_false")]
    pub(crate) wire_segments: bool,
    /// `--busy-poll-us`: preferred busy polling on the datapath's sockets (0: off).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) busy_poll_us: u32,
    pub(crate) framing: Framing,
    /// `--pingpong`: RTT/2 of RDMA Write ping-pong instead of one-way latency.
    #[serde(default, skip_serializing_if = "is_false")]
    pub(crate) pingpong: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) loss_percent: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) impair: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) queues: Option<u32>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub(crate) split_cpus: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) iface: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) peer: Option<IpAddr>,
}

/// How one-way `lat` samples relate the sender's clock to the receivers'
/// (docs/latency.md, "Two hosts"): `{"source": "same-host"}` or `{"source": "measured", …}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "kebab-case")]
pub(crate) enum LatClock {
    /// Both ends read one host's CLOCK_MONOTONIC (the private bed's namespaces): nothing
    /// measured, nothing corrected.
    SameHost,
    /// The peer host's clock, measured against this host's before and after every run; each
    /// run's samples corrected by the offset interpolated between the two.
    Measured(MeasuredClock),
}

/// The peer host's clock as `lat` measured it (`LatClock::Measured`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct MeasuredClock {
    /// The clock responder (`mpa-peer clock` on the peer host), `ADDR:PORT`, UDP.
    pub(crate) responder: String,
    /// Probes per measurement (`--clock-probes`).
    pub(crate) probes: u32,
    /// `--max-clock-error-us`, in ns.
    pub(crate) max_error_ns: u64,
    /// θ, the peer's clock minus this host's, at the first measurement, ns.
    pub(crate) offset_ns: i64,
    /// ε, the largest error bound of any measurement, ns: every sample is ± this.
    pub(crate) error_ns: u64,
    /// How fast θ changed from the first measurement to the last, ppm, and the bound on that
    /// figure's error.
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) drift_ppm: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) drift_error_ppm: f64,
    /// Every measurement, in order: before the first run and after each.
    pub(crate) measurements: Vec<ClockMeasurement>,
}

/// One measurement of the peer's clock: its best exchange.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ClockMeasurement {
    /// When, seconds after the first measurement.
    pub(crate) at_s: f64,
    pub(crate) offset_ns: i64,
    pub(crate) error_ns: u64,
    /// The best exchange's round trip, ns.
    pub(crate) rtt_ns: u64,
    /// Probes answered, of those sent.
    pub(crate) answered: u32,
    pub(crate) sent: u32,
}

/// One `lat` result: a receiver and a size over all rounds, latencies in µs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct LatRecord {
    pub(crate) receiver: Receiver,
    pub(crate) size: usize,
    pub(crate) rounds: u32,
    pub(crate) samples: u64,
    pub(crate) bad_stamps: u64,
    pub(crate) min_us: f64,
    pub(crate) p50_us: f64,
    pub(crate) p90_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) p999_us: f64,
    pub(crate) max_us: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) mean_us: f64,
}

/// `bw`'s options.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct BwParams {
    pub(crate) sizes: Vec<usize>,
    pub(crate) bytes: u64,
    /// `--duration`: each sender sent for this long instead of `bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) duration_s: Option<f64>,
    pub(crate) rounds: u32,
    pub(crate) mtu: u32,
    pub(crate) loss_percent: u8,
    pub(crate) queues: u32,
    pub(crate) framing: Framing,
    /// The impairment's configuration (its `Debug` form).
    pub(crate) impair: Option<String>,
    pub(crate) connections: u32,
    pub(crate) op: Op,
    pub(crate) aligned: bool,
    pub(crate) iface: Option<String>,
    pub(crate) peer: Option<IpAddr>,
    pub(crate) split_cpus: bool,
    pub(crate) sender_cc: Option<String>,
    pub(crate) sender: SenderSide,
    pub(crate) wire_segments: bool,
}

/// One `bw` result: a receiver and a size over all rounds. Goodput in Gbit/s of ULPDU octets
/// (median, min, max, mean, each round's); CPU in ns per octet (medians).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct BwRecord {
    pub(crate) receiver: Receiver,
    pub(crate) size: usize,
    pub(crate) rounds: usize,
    pub(crate) gbit_s: f64,
    pub(crate) gbit_s_min: f64,
    pub(crate) gbit_s_max: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) gbit_s_mean: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) msg_per_s: f64,
    /// Messages and ULPDU octets of one round.
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) messages: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) octets: f64,
    /// Whole-system CPU, the receiver process's, and the sender's.
    pub(crate) system_cpu_ns_per_octet: f64,
    pub(crate) process_cpu_ns_per_octet: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) sender_cpu_ns_per_octet: f64,
    /// Share of the out-of-order FPDUs placed on arrival (the datapath under loss).
    pub(crate) placed_direct_percent: Option<f64>,
    /// The Linux sender's TCP: retransmitted segments per 100, RTOs (medians of rounds).
    pub(crate) sender_retrans_percent: Option<f64>,
    pub(crate) sender_rtos: Option<f64>,
    /// The Linux sender's TCP counters of each round.
    pub(crate) round_sender_tcp: Vec<SenderTcp>,
    #[serde(deserialize_with = "nans_if_null")]
    pub(crate) round_gbit_s: Vec<f64>,
    /// The datapath's goodput over the kernel's, paired by round (datapath results only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) paired_goodput_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) paired_goodput_ratio_min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) paired_goodput_ratio_max: Option<f64>,
}

/// `pipeline`'s options.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct PipelineParams {
    pub(crate) mss: Vec<usize>,
    pub(crate) sizes: Vec<usize>,
    pub(crate) rounds: usize,
    pub(crate) flows: usize,
    pub(crate) markers: bool,
    pub(crate) crc: bool,
    pub(crate) op: Op,
    pub(crate) aligned: bool,
    pub(crate) loss: f64,
    pub(crate) reorder: f64,
    pub(crate) bytes: u64,
    pub(crate) verify_checksums: bool,
    pub(crate) digest: bool,
    pub(crate) seed: u64,
    /// Chained frames decoded from their descriptors (not `--gather-chains`; absent in
    /// documents from before that was the default: gathered).
    #[serde(default)]
    pub(crate) chains_in_pieces: bool,
    /// `--huge-pages`.
    #[serde(default)]
    pub(crate) huge_pages: bool,
    /// `--streaming-stores` (absent in documents from before the option).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) streaming_stores: Option<String>,
    /// `--workers`, only above 1 (one worker's document keeps its shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) workers: Option<usize>,
    /// `--ring-fill`, when given: frames written that many ahead of the worker (absent: as
    /// many as the ring holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ring_fill: Option<usize>,
}

/// One `pipeline` result: a configuration on one worker, or (`--workers`) on several side by
/// side.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum PipelineRecord {
    Workers(Box<PipelineWorkersRecord>),
    Config(Box<PipelineConfigRecord>),
}

/// One configuration on one worker over its rounds; the counters are the last round's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct PipelineConfigRecord {
    pub(crate) label: String,
    pub(crate) flows: usize,
    pub(crate) size: usize,
    pub(crate) mss: usize,
    pub(crate) markers: bool,
    pub(crate) crc: bool,
    pub(crate) op: Op,
    pub(crate) aligned: bool,
    pub(crate) loss: f64,
    pub(crate) reorder: f64,
    pub(crate) bytes: u64,
    pub(crate) rounds: usize,
    pub(crate) digest: bool,
    pub(crate) verify_checksums: bool,
    pub(crate) segments: u64,
    pub(crate) dropped: u64,
    pub(crate) reordered: u64,
    pub(crate) ns_per_segment: Spread,
    pub(crate) cpu_ns_per_segment: Spread,
    pub(crate) gbits: Spread,
    pub(crate) segments_per_s: Spread,
    pub(crate) cpu_over_wall: Spread,
    pub(crate) poll_share: Spread,
    pub(crate) acks: u64,
    pub(crate) fpdus: u64,
    pub(crate) placed_direct: u64,
    pub(crate) placed_in_order: u64,
    pub(crate) placed_from_store: u64,
    /// In-order FPDUs that spanned segments of one burst, placed from the frames in place.
    #[serde(default)]
    pub(crate) spanned_in_place: u64,
    /// Of those, the ones whose CRC was joined from the CRCs the parse pass took.
    #[serde(default)]
    pub(crate) crc_from_segments: u64,
    /// In-order FPDUs that ended their segment, verified from its CRC.
    #[serde(default)]
    pub(crate) crc_at_segment_end: u64,
    /// In-order FPDUs that spanned bursts, copied into the FPDU buffer first.
    #[serde(default)]
    pub(crate) staged: u64,
    /// Octets of the RX frames on transparent huge pages at the end (`--huge-pages`).
    #[serde(default)]
    pub(crate) huge_page_octets: u64,
    pub(crate) out_of_order_segments: u64,
    /// Segments the TCP took in one update with the one before them.
    #[serde(default)]
    pub(crate) segments_batched: u64,
    pub(crate) store_high_water: u64,
    pub(crate) completions: u64,
    pub(crate) region_octets_checked: u64,
    pub(crate) payload_octets: u64,
    /// Payload Gbit/s on one core (median, min, max), poll ns per packet and Mpps (medians).
    pub(crate) gbit_s_per_core: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) gbit_s_per_core_min: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) gbit_s_per_core_max: f64,
    pub(crate) ns_per_packet: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) mpps: f64,
    /// memcpy alone and CRC32c alone over the same octets, and the pipeline's share of each.
    pub(crate) memcpy_gbit_s: f64,
    pub(crate) crc_gbit_s: f64,
    /// The same over frames just written into a ring, burst by burst (what the pipeline
    /// reads).
    #[serde(default = "nan", deserialize_with = "nan_if_null")]
    pub(crate) memcpy_warm_gbit_s: f64,
    #[serde(default = "nan", deserialize_with = "nan_if_null")]
    pub(crate) crc_warm_gbit_s: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) share_of_memcpy: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) share_of_crc: f64,
    /// A rung of the stage ladder: its stage, and the stage's own ns per packet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stage: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stage_ns_per_packet: Option<f64>,
    /// The cost model fitted over the run's configurations of this ULPDU size at several MSS:
    /// ns per segment = `fit_ns_per_packet` + `fit_ns_per_kib` × payload KiB per segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fit_ns_per_packet: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fit_ns_per_kib: Option<f64>,
    /// One of the per-stage variants (`--variants`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub(crate) variant: bool,
}

/// One configuration on several workers side by side (`--workers`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct PipelineWorkersRecord {
    pub(crate) label: String,
    pub(crate) workers: usize,
    pub(crate) pinned: bool,
    pub(crate) cpus: Option<Vec<usize>>,
    pub(crate) flows_per_worker: usize,
    pub(crate) size: usize,
    pub(crate) mss: usize,
    pub(crate) markers: bool,
    pub(crate) crc: bool,
    pub(crate) op: Op,
    pub(crate) aligned: bool,
    pub(crate) loss: f64,
    pub(crate) reorder: f64,
    pub(crate) bytes_per_worker: u64,
    pub(crate) rounds: usize,
    /// The per-worker medians, under the keys every pipeline result carries.
    pub(crate) gbit_s_per_core: f64,
    pub(crate) ns_per_packet: f64,
    pub(crate) memcpy_gbit_s: f64,
    pub(crate) crc_gbit_s: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) aggregate_gbit_s: f64,
    pub(crate) aggregate_gbit_s_spread: Spread,
    pub(crate) aggregate_loop_gbit_s: Spread,
    pub(crate) one_worker_gbit_s: Spread,
    pub(crate) one_worker_ns_per_packet: Spread,
    pub(crate) one_worker_loop_gbit_s: Spread,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) scaling: f64,
    pub(crate) scaling_spread: Spread,
    pub(crate) aggregate_cpu_gbit_s: Spread,
    pub(crate) one_worker_cpu_gbit_s: Spread,
    pub(crate) scaling_cpu: Spread,
    /// The warm memcpy of every worker's payloads side by side on the workers' CPUs, alone
    /// on worker 0's, and the ratio (absent with one worker).
    #[serde(default)]
    pub(crate) memcpy_side_by_side_gbit_s: Option<Spread>,
    #[serde(default)]
    pub(crate) memcpy_alone_gbit_s: Option<Spread>,
    #[serde(default)]
    pub(crate) memcpy_scaling: Option<Spread>,
    pub(crate) per_worker: Vec<PipelineWorkerRecord>,
}

/// One worker of [`PipelineWorkersRecord`]; the counters are the last round's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct PipelineWorkerRecord {
    pub(crate) worker: usize,
    pub(crate) cpu: Option<usize>,
    pub(crate) flow_ids: Vec<u64>,
    pub(crate) stags: Vec<u32>,
    pub(crate) segments: u64,
    pub(crate) ns_per_packet: Spread,
    pub(crate) cpu_ns_per_packet: Spread,
    pub(crate) gbit_s: Spread,
    pub(crate) cpu_over_wall: Spread,
    pub(crate) frames: u64,
    pub(crate) acks: u64,
    pub(crate) fpdus: u64,
    pub(crate) completions: u64,
    pub(crate) region_octets_checked: u64,
    pub(crate) payload_octets: u64,
}

/// `setup`'s options.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct SetupParams {
    pub(crate) connections: usize,
    pub(crate) parallel: usize,
}

/// The `setup` result: hand-overs per second and hand-over latency (ms).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct SetupRecord {
    pub(crate) connections: usize,
    pub(crate) parallel: usize,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) seconds: f64,
    pub(crate) handovers_per_s: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) min_ms: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p90_ms: f64,
    pub(crate) p99_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) p999_ms: f64,
    pub(crate) max_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) rss_mib: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub(crate) close_seconds: f64,
}
