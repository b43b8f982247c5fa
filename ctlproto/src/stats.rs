//! The datapath's statistics document (`Message::Stats`): typed on both sides, so a client
//! reads fields, not string keys. The worker builds [`QueueReport`]s, the server adds what it
//! knows ([`DatapathStats`]).

use crate::TerminateInfo;
use serde::{Deserialize, Serialize};

/// Counters of one ring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingStats {
    /// Frames received.
    pub rx_frames: u64,
    /// Octets received.
    pub rx_octets: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Octets sent.
    pub tx_octets: u64,
    /// Packets not sent for lack of a free TX frame.
    pub tx_no_frame: u64,
    /// Wakeups issued (the one syscall of the fast path).
    pub wakeups: u64,
    /// Frames that arrived in several descriptors (AF_XDP multi-buffer, jumbo frames) and
    /// were gathered whole (datapath/src/io/chain.rs).
    #[serde(default)]
    pub rx_multi_buffer: u64,
    /// Descriptor chains dropped whole: cut short by the ring or longer than a frame may be.
    #[serde(default)]
    pub rx_chain_dropped: u64,
    /// Largest frame received, octets.
    #[serde(default)]
    pub rx_largest: u64,
    /// Times the worker blocked waiting for frames (an idle worker's poll()).
    #[serde(default)]
    pub rx_waits: u64,
    /// RX bursts that took at least one descriptor.
    #[serde(default)]
    pub rx_bursts: u64,
    /// RX bursts that took as many descriptors as a burst may: the ring held a burst or more
    /// when the worker looked (frames were waiting for it, not it for them).
    #[serde(default)]
    pub rx_full_bursts: u64,
    /// The socket is bound in zero-copy mode (the kernel says so: `XDP_OPTIONS`); false: copy
    /// mode, every frame copied by the kernel between its buffer and the UMEM.
    #[serde(default)]
    pub zero_copy: bool,
    /// The socket takes frames larger than a UMEM frame as descriptor chains (bound with
    /// `XDP_USE_SG`).
    #[serde(default)]
    pub multi_buffer: bool,
    /// The socket's UMEM is on huge pages (2 MiB: one TLB entry for 512 frames).
    #[serde(default)]
    pub huge_pages: bool,
}

impl RingStats {
    /// Counts one RX burst of `n` descriptors out of at most `max`.
    #[inline]
    pub fn count_burst(&mut self, n: usize, max: usize) {
        if n > 0 {
            self.rx_bursts += 1;
            if n >= max {
                self.rx_full_bursts += 1;
            }
        }
    }
}

/// Whether a counter is 0: counters only some flows use are left out of their reports then
/// (a 10,000-flow stats document must stay under the control message limit).
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Counters of one receiver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RxStats {
    /// FPDUs delivered in stream order.
    pub fpdus: u64,
    /// ULPDU octets delivered.
    pub ulpdu_octets: u64,
    /// CRC errors (error 2).
    pub crc_errors: u64,
    /// Marker errors (error 3).
    pub marker_errors: u64,
    /// FPDUs placed straight from an out-of-order segment (marker-guided).
    pub placed_direct: u64,
    /// FPDUs placed out of order once their last piece arrived, gathered from pieces the
    /// reassembly store held and the segment that completed them (they reach across segment
    /// boundaries).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub placed_gathered: u64,
    /// Out-of-order FPDUs not gathered because they are much longer than the segment that
    /// would complete them (a bound on the work per received octet; they wait for the stream).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gather_over_budget: u64,
    /// FPDUs placed when they arrived in order.
    pub placed_in_order: u64,
    /// FPDUs placed from the reassembly store once a hole filled.
    pub placed_from_store: u64,
    /// In-order FPDUs that spanned segments of one RX burst, verified and placed from the
    /// segments themselves (one copy per octet).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spanned_in_place: u64,
    /// Of those, the FPDUs whose CRC was verified from the CRCs the parse pass took of their
    /// segments (only their part of the last segment read again).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub crc_from_segments: u64,
    /// In-order FPDUs inside one segment that ended with it (FPDUs aligned with segments),
    /// verified from the CRC the parse pass took of the segment: none of their octets read
    /// again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub crc_at_segment_end: u64,
    /// In-order FPDUs that spanned RX bursts, copied into the connection's FPDU buffer before
    /// they were verified and placed (two copies per octet).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub staged: u64,
    /// Out-of-order FPDU candidates the locator dropped (CRC or marker check failed).
    pub located_rejected: u64,
    /// Out-of-order FPDUs that passed the locator but not the placement checks (left to the
    /// in-order path, which reports the error precisely).
    pub ahead_refused: u64,
    /// Out-of-order segments offered for placement (the rest went to the store whole: the
    /// receiver could not place ahead then).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ahead_offered: u64,
    /// Offered segments in which the locator found no whole FPDU.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ahead_unlocated: u64,
    /// Located FPDUs not placed because they overlap one already placed ahead (or lie beyond
    /// the horizon).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ahead_overlapping: u64,
    /// Located FPDUs not placed because the segment's span list was full.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ahead_no_span: u64,
    /// Payload octets copied into regions.
    pub placed_octets: u64,
    /// Completions produced.
    pub completions: u64,
}

/// How a flow ended, as reported to clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndReport {
    /// The MPA error code (RFC 5044 §8), `None` for a clean close.
    pub mpa_error: Option<u8>,
    /// Why, in words.
    pub reason: String,
    /// The Terminate that ended it.
    pub terminate: Option<TerminateInfo>,
}

/// Counters and state of one flow, as the worker reports them (the JSON of `Stats`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowReport {
    /// The datapath's id.
    pub flow_id: u64,
    /// TCP state.
    pub state: String,
    /// Frames received for this flow.
    pub packets: u64,
    /// TCP payload octets received.
    pub octets: u64,
    /// Out-of-order segments.
    pub out_of_order_segments: u64,
    /// Segments the TCP took in one update with the one before them: consecutive in-order
    /// segments of one receive burst whose headers differ only in the sequence number, as
    /// GRO merges them (`packets` counts them too).
    #[serde(default)]
    pub segments_batched: u64,
    /// Duplicate segments (whole or partial).
    pub duplicates: u64,
    /// SACK blocks sent.
    pub sack_blocks_sent: u64,
    /// ACKs sent.
    pub acks_sent: u64,
    /// Pure ACKs run-to-completion held for a reply that carried them instead (segments not
    /// sent; docs/latency.md, "When the ACKs leave").
    #[serde(default)]
    pub acks_carried: u64,
    /// Retransmissions.
    pub retransmissions: u64,
    /// Frames sent.
    pub frames_sent: u64,
    /// TCP payload octets sent.
    pub octets_out: u64,
    /// CRC32c of the ULPDU octets in order (hex), when kept.
    pub ulpdu_digest: Option<String>,
    /// Protection domain.
    pub pd: Option<u32>,
    /// FPDUs placed ahead and waiting for the stream.
    pub placed_ahead_waiting: usize,
    /// Receive buffers posted, unused.
    pub posted_buffers: Option<usize>,
    /// Reassembly store high-water mark (octets).
    pub store_high_water: u64,
    /// Segments dropped: reassembly store full.
    pub dropped_reassembly_full: u64,
    /// Segments dropped: outside the window.
    pub dropped_out_of_window: u64,
    /// Keepalive probes sent (the peer was idle).
    #[serde(default)]
    pub keepalive_probes: u64,
    /// Zero-window probes sent.
    #[serde(default)]
    pub window_probes: u64,
    /// Segments dropped by the TCP's checks, by reason (PAWS, missing timestamp, ACK not
    /// acceptable, RST not at RCV.NXT, SYN, after close), and the challenge ACKs sent.
    #[serde(default)]
    pub tcp_drops: TcpDrops,
    /// The TS.Recent its TCP started with, inherited at the hand-over (the peer's TSval
    /// the kernel had); `None` when it was unknown (or timestamps are off), and the first
    /// acceptable timestamped segment set it.
    #[serde(default)]
    pub ts_recent_inherited: Option<u32>,
    /// MPA receive counters.
    #[serde(flatten)]
    pub rx: RxStats,
    /// What the consumer sent on it (RDMA Writes and Sends from registered memory); left out
    /// of the JSON for a flow that sent nothing (a `Stats` answer of thousands of flows must
    /// stay under the control message limit).
    #[serde(default, skip_serializing_if = "TxStats::is_idle")]
    pub tx: TxStats,
    /// How it ended, once it has.
    pub ended: Option<EndReport>,
}

impl TxStats {
    /// Nothing was posted and no Read Request answered.
    pub fn is_idle(&self) -> bool {
        self.messages_posted == 0 && self.read_responses == 0
    }
}

/// The send side of one flow: messages the consumer posted and their FPDUs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxStats {
    /// Messages posted (RDMA Writes and Sends).
    pub messages_posted: u64,
    /// Messages completed: every octet acknowledged by the peer.
    pub messages_completed: u64,
    /// Messages posted and not yet completed.
    pub messages_queued: u64,
    /// FPDUs written into segments, retransmissions included.
    pub fpdus_sent: u64,
    /// Payload octets read from regions, retransmissions included.
    pub octets_read: u64,
    /// Segments that did not start with an FPDU or ended inside one (0 when the peer's
    /// window never forced a cut inside an FPDU).
    pub partial_fpdus: u64,
    /// Congestion window at the time of the report (octets).
    pub cwnd: u64,
    /// Smoothed RTT (µs), once measured.
    pub srtt_us: Option<u64>,
    /// Read Responses queued for the peer's RDMA Read Requests.
    #[serde(default)]
    pub read_responses: u64,
    /// CRC32c of every ULPDU sent (hex), when digests are kept: equals the peer's receive
    /// digest (`ulpdu_digest` of `mpa-peer listen`).
    #[serde(default)]
    pub ulpdu_digest: Option<String>,
    /// Our IRD in force: the peer's RDMA Read Requests served at once at most (negotiated
    /// by revision 2, else the datapath's own bound).
    #[serde(default)]
    pub ird: u32,
    /// Our ORD in force: our Read Requests outstanding at most.
    #[serde(default)]
    pub ord: u32,
}

/// Segments a flow's TCP dropped, by reason (RFC 7323, RFC 5961, RFC 9293), and its
/// challenge ACKs (RFC 5961 §7).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpDrops {
    /// TSval older than TS.Recent (PAWS).
    pub paws: u64,
    /// No timestamps option although negotiated.
    pub missing_timestamp: u64,
    /// ACK bit off or ACK not acceptable.
    pub bad_ack: u64,
    /// RST not exactly at RCV.NXT.
    pub bad_rst: u64,
    /// SYN on the synchronized connection.
    pub syn: u64,
    /// Segments after the connection closed.
    pub after_close: u64,
    /// Full duplicates (every octet received before).
    pub duplicate: u64,
    /// Challenge ACKs sent.
    pub challenge_acks: u64,
    /// Challenge ACKs suppressed by the rate limit.
    pub challenge_acks_suppressed: u64,
    /// Challenges answered by a challenge ACK already owed (sent + suppressed + merged is
    /// every segment that drew a challenge).
    #[serde(default)]
    pub challenge_acks_merged: u64,
}

/// Counters and flows of one queue, as the worker reports them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueReport {
    /// The queue.
    pub queue: u32,
    /// Ring counters.
    #[serde(flatten)]
    pub ring: RingStats,
    /// Frame-level counters.
    #[serde(flatten)]
    pub stats: QueueStats,
    /// CPU seconds of the worker thread.
    pub cpu_seconds: f64,
    /// The queue's live flows this answer lists, by ascending id ([`FlowPage`]).
    pub flows: Vec<FlowReport>,
    /// Live flows of the queue, listed in this answer or not.
    #[serde(default)]
    pub flow_count: u64,
}

/// Counters of one queue.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    /// Frames that were not IP/TCP or failed their checksums.
    pub malformed: u64,
    /// TCP segments of no flow this worker owns.
    pub unknown_flow: u64,
    /// Frames of a flow's 4-tuple whose VLAN tag is not the flow's (dropped).
    #[serde(default)]
    pub wrong_vlan: u64,
    /// RX bursts.
    pub bursts: u64,
    /// Completions lost because the subscriber's ring was full (it read too slowly); its
    /// consumer sees them as an overflow.
    #[serde(default)]
    pub completions_overflow: u64,
    /// Completions of domains nobody subscribed to.
    #[serde(default)]
    pub completions_unclaimed: u64,
    /// Posts read from the shared-memory post queues (refused ones included).
    #[serde(default)]
    pub posts_shm: u64,
    /// Posts of the shared-memory queues refused (a `PostRefused` completion each).
    #[serde(default)]
    pub posts_refused: u64,
    /// Posts for a connection another worker owns, handed to the control thread to pass on.
    #[serde(default)]
    pub posts_forwarded: u64,
    /// Post queues found corrupt (their producer wrote an impossible index): never read
    /// again.
    #[serde(default)]
    pub post_queues_corrupt: u64,
    /// Messages placed with streaming stores (docs/features.md, "Streaming stores").
    #[serde(default)]
    pub streamed_messages: u64,
    /// Times the worker offered its core to other threads while it spun (`sched_yield`,
    /// docs/latency.md, "Polling and sleeping").
    #[serde(default)]
    pub spin_yields: u64,
}

/// What the registry holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryStats {
    /// Regions registered.
    pub regions: usize,
    /// Octets registered.
    pub region_octets: u64,
    /// Octets that may be registered at most.
    pub region_budget: u64,
    /// Receive buffers waiting in domains for their connection.
    pub buffers_waiting: usize,
    /// Completion subscribers.
    pub subscribers: usize,
    /// Completions no subscriber took (the workers' `completions_unclaimed`, summed).
    pub unclaimed_completions: u64,
    /// Pages of regions that a consumer took away (a hole punched into a huge-page region
    /// while the pool was empty) and that the datapath replaced with memory of its own, since
    /// it started (docs/limits.md, "A consumer's hole in a huge-page region").
    #[serde(default)]
    pub region_pages_lost: u64,
    /// Of `regions`, those registered over an application's own memory (`RegisterRegion`).
    #[serde(default)]
    pub registered_regions: usize,
    /// Their octets, part of `region_octets` (docs/limits.md, "Memory an application
    /// registers").
    #[serde(default)]
    pub registered_octets: u64,
}

/// The capture running, if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureStats {
    /// The capturing client.
    pub client: u64,
    /// The flow captured (`None`: every frame).
    pub flow: Option<u64>,
    /// Frames sent to the client.
    pub frames: u64,
    /// Octets of pcap output sent.
    pub bytes: u64,
    /// The capture's octet limit.
    pub max_bytes: u64,
    /// Frames dropped for want of room.
    pub dropped_by_client_queue: u64,
    /// Milliseconds left.
    pub ms_left: u64,
}

/// The XDP steering program's counters (per-CPU values summed), as the datapath reads them
/// from its map (`bpf/src/counters.rs` says what each counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct XdpCounters {
    /// Every frame the program ran on.
    pub seen: u64,
    /// Steered frames redirected to an AF_XDP socket.
    pub redirected: u64,
    /// Frames given to the kernel.
    pub passed: u64,
    /// Frames with a truncated or invalid header.
    pub malformed: u64,
    /// Steered frames dropped: no AF_XDP socket for their RX queue.
    pub steered_no_xsk: u64,
    /// Fragments that may carry TCP between a steered host pair: dropped.
    pub dropped_fragment: u64,
    /// IPv6 TCP behind extension headers between a steered host pair: dropped.
    pub dropped_ipv6_ext: u64,
    /// Stacked VLAN tags over TCP between a steered host pair (or too many tags): dropped.
    pub dropped_vlan_stack: u64,
    /// Malformed frames between a steered host pair: dropped.
    pub dropped_malformed: u64,
    /// Multi-buffer frames whose headers had to be copied out of their fragments.
    pub headers_copied: u64,
}

/// The whole statistics document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DatapathStats {
    /// Every queue with its flows.
    pub queues: Vec<QueueReport>,
    /// XDP program counters, when readable.
    pub xdp: Option<XdpCounters>,
    /// Flows adopted (handed over or waiting for their hand-over).
    pub adopted_flows: usize,
    /// Registered memory.
    pub registry: RegistryStats,
    /// Final reports of the most recent ended flows, oldest first (bounded).
    pub ended_flows: Vec<FlowReport>,
    /// The capture running, if any.
    pub capture: Option<CaptureStats>,
    /// The XDP steering program was found detached from the interface by someone else
    /// (`bpftool link detach`, the interface deleted): steered flows no longer reach the
    /// datapath. Checked once a second.
    #[serde(default)]
    pub xdp_detached: bool,
    /// The control socket's clients and what their bounds did.
    #[serde(default)]
    pub control: ControlStats,
    /// Hand-overs: how TS.Recent was inherited, and the ports watched for it.
    #[serde(default)]
    pub handover: HandoverStats,
    /// The datapath's memory budget (docs/limits.md).
    #[serde(default)]
    pub memory: MemoryStats,
    /// Every flow that ended since the datapath started, by how it ended.
    #[serde(default)]
    pub ended: EndedCounts,
    /// Which live flows `queues[].flows` lists.
    #[serde(default)]
    pub flow_page: FlowPage,
}

/// Live flows listed in one answer at most: with every counter at its largest, that many
/// flows and [`MAX_ENDED_FLOWS`] ended ones still fit one control message
/// ([`crate::MAX_MESSAGE`]).
pub const MAX_FLOWS_PER_ANSWER: u32 = 2048;

/// Final reports of ended flows a datapath keeps (the most recent ones).
pub const MAX_ENDED_FLOWS: usize = 256;

/// Which live flows one statistics answer lists: those of lowest id above `after`, at most
/// the `max_flows` asked for. Pages are made one after another, so a flow may end or begin
/// between two of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowPage {
    /// The flows listed have ids above this one; `None`: from the lowest.
    pub after: Option<u64>,
    /// Live flows with ids above this one (the last listed) were not listed: ask again with
    /// `flows_after` set to it. `None`: none were left out.
    pub next: Option<u64>,
}

/// Why the pages of one statistics document do not fit together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    /// The page does not start where the previous one said the next would.
    #[error("statistics page starts after {got:?}, the previous one said after {expected:?}")]
    OutOfSequence {
        /// Where the previous page said the next starts.
        expected: Option<u64>,
        /// Where this one starts.
        got: Option<u64>,
    },
    /// A page lists a flow at or below where it starts, or above where it says the next one
    /// starts.
    #[error("statistics page lists flow {0} outside its range")]
    OutOfRange(u64),
    /// A page says more flows follow but lists none (the next page would start where this
    /// one did).
    #[error("statistics page after {0:?} lists no flow but says more follow")]
    NoProgress(Option<u64>),
}

/// Flows that ended since the datapath started, by how: closed without an error, with an
/// MPA error (RFC 5044 §8), with a Terminate (RFC 5040 §7: layer, error type, error code,
/// and who sent it). Counted as each flow ends, so they only grow.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndedCounts {
    /// Ended with neither an MPA error nor a Terminate (FIN, reset, close requested,
    /// timeout).
    pub without_error: u64,
    /// Ended with an MPA error and no Terminate, by MPA error code.
    pub mpa_errors: Vec<CodeCount>,
    /// Ended with a Terminate, by its kind; at most [`EndedCounts::MAX_KINDS`] kinds (a
    /// hostile peer chooses the codes of the Terminates it sends).
    pub terminates: Vec<TerminateCount>,
    /// Terminates of kinds beyond [`EndedCounts::MAX_KINDS`].
    pub terminates_other: u64,
}

/// Flows that ended with one MPA error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeCount {
    /// The code.
    pub code: u8,
    /// Flows.
    pub count: u64,
}

/// Flows that ended with one kind of Terminate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminateCount {
    /// Layer, error type, error code, and whether we sent it.
    #[serde(flatten)]
    pub kind: TerminateInfo,
    /// Flows.
    pub count: u64,
}

impl EndedCounts {
    /// Distinct Terminate kinds kept apart.
    pub const MAX_KINDS: usize = 64;

    /// Counts one ended flow.
    pub fn count(&mut self, mpa_error: Option<u8>, terminate: Option<TerminateInfo>) {
        match (mpa_error, terminate) {
            (_, Some(kind)) => {
                if let Some(t) = self.terminates.iter_mut().find(|t| t.kind == kind) {
                    t.count += 1;
                } else if self.terminates.len() < Self::MAX_KINDS {
                    self.terminates.push(TerminateCount { kind, count: 1 });
                } else {
                    self.terminates_other += 1;
                }
            }
            (Some(code), None) => {
                if let Some(c) = self.mpa_errors.iter_mut().find(|c| c.code == code) {
                    c.count += 1;
                } else {
                    self.mpa_errors.push(CodeCount { code, count: 1 });
                }
            }
            (None, None) => self.without_error += 1,
        }
    }
}

/// The datapath's memory budget: out-of-order octets held, flows' fixed state, completion
/// rings (docs/limits.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryStats {
    /// The budget, octets.
    pub limit: u64,
    /// Charged now.
    pub used: u64,
    /// Most charged at once.
    pub high_water: u64,
    /// Out-of-order segments dropped for want of room (their senders send them again).
    pub dropped_segments: u64,
    /// Hand-overs and subscriptions refused for want of room.
    pub refused: u64,
    /// Shared-memory files (regions, completion rings, post queues) the datapath holds now.
    /// One it released holds no page, whoever kept its descriptor (docs/limits.md).
    #[serde(default)]
    pub shared_files: u64,
    /// Their octets: the registered regions' and the subscriptions' memory together, all
    /// populated at creation.
    #[serde(default)]
    pub shared_bytes: u64,
}

/// Hand-overs and the TS.Recent they inherit (docs/environment.md, "Why TS.Recent must be
/// inherited").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoverStats {
    /// Hand-overs with timestamps whose TS.Recent came from a recorded segment of the peer
    /// (or from mpa-control).
    pub ts_recent_inherited: u64,
    /// Hand-overs with timestamps whose TS.Recent stayed unknown (0): no recorded segment
    /// ended at RCV.NXT (its port not watched, or the records evicted).
    pub ts_recent_unknown: u64,
    /// Local ports watched now.
    pub watched_ports: Vec<u16>,
}

/// The control socket: clients and the bounds on what is queued for and from them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlStats {
    /// Clients connected now.
    pub clients: usize,
    /// Clients allowed at once (more are refused with an `Error` of code `Limit`).
    pub max_clients: usize,
    /// Clients refused so far because of `max_clients`.
    pub clients_refused: u64,
    /// Slots beyond `max_clients` that only operators (CAP_NET_ADMIN) may take, so that
    /// `mpa-control` and the operator's tools always get in.
    #[serde(default)]
    pub operator_slots: usize,
    /// Clients closed to make room for a new one while every slot was taken: each had not
    /// said Hello, or was not an operator, held nothing and had said nothing for a while.
    #[serde(default)]
    pub clients_evicted: u64,
    /// Clients closed at a deadline: no Hello within `hello_deadline_ms` of connecting, or
    /// (not an operator, holding nothing) nothing said for `idle_deadline_ms`.
    #[serde(default)]
    pub clients_timed_out: u64,
    /// A client that has not said Hello this long after connecting is closed.
    #[serde(default)]
    pub hello_deadline_ms: u64,
    /// A client that is not an operator, holds nothing (no region, subscription, flow, watch
    /// or capture) and has said nothing for this long is closed.
    #[serde(default)]
    pub idle_deadline_ms: u64,
    /// Messages for clients dropped because the client's queue held its octet bound (it does
    /// not read fast enough); completions among them are lost to that client.
    pub messages_dropped: u64,
    /// Octets queued for all clients now.
    pub queued_octets: u64,
    /// A connection manager serves applications' Listen and Connect.
    #[serde(default)]
    pub connection_manager: bool,
    /// Applications' listeners now.
    #[serde(default)]
    pub app_listeners: usize,
    /// Applications' connections in setup now (requested or connecting).
    #[serde(default)]
    pub app_setups: usize,
}

impl DatapathStats {
    /// Every live flow with its queue.
    pub fn live_flows(&self) -> impl Iterator<Item = (u32, &FlowReport)> {
        self.queues
            .iter()
            .flat_map(|q| q.flows.iter().map(move |f| (q.queue, f)))
    }

    /// The final report of flow `id`, once it has ended (among the most recent ones kept).
    pub fn ended_flow(&self, id: u64) -> Option<&FlowReport> {
        self.ended_flows.iter().find(|f| f.flow_id == id)
    }

    /// Checks that this answer is a page of its own: every flow it lists lies in its range,
    /// and it lists one when it says more follow.
    pub fn check_page(&self) -> Result<(), PageError> {
        let FlowPage { after, next } = self.flow_page;
        let mut any = false;
        for (_, f) in self.live_flows() {
            any = true;
            if after.is_some_and(|a| f.flow_id <= a) || next.is_some_and(|n| f.flow_id > n) {
                return Err(PageError::OutOfRange(f.flow_id));
            }
        }
        if next.is_some() && !any {
            return Err(PageError::NoProgress(after));
        }
        Ok(())
    }

    /// Adds the flows of the page that follows this document (the one its
    /// [`FlowPage::next`] asked for): each to its queue, and the page's range to this one.
    /// The counters stay those of this document.
    pub fn append_page(&mut self, page: DatapathStats) -> Result<(), PageError> {
        page.check_page()?;
        if self.flow_page.next.is_none() || page.flow_page.after != self.flow_page.next {
            return Err(PageError::OutOfSequence {
                expected: self.flow_page.next,
                got: page.flow_page.after,
            });
        }
        for q in page.queues {
            match self.queues.iter_mut().find(|mine| mine.queue == q.queue) {
                Some(mine) => mine.flows.extend(q.flows),
                None => self.queues.push(q),
            }
        }
        self.flow_page.next = page.flow_page.next;
        Ok(())
    }
}
