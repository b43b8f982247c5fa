//! One handed-over TCP connection: the state machine.
//!
//! Inputs: [`Connection::handle_segment`], [`Connection::handle_timeout`],
//! [`Connection::end_of_burst`], [`Connection::send`], [`Connection::close`],
//! [`Connection::release`]. Outputs: [`Connection::poll_transmit`],
//! [`Connection::poll_timeout`], [`Connection::poll_event`], and the in-order octets (the
//! [`SegmentOutcome::in_order`] range of each segment's own payload, then
//! [`Connection::drain_reassembled`]).
//!
//! The caller's loop, per RX burst:
//! ```text
//! for each segment of this flow:
//!     out = conn.handle_segment(now, &repr, payload)
//!     consume payload[out.in_order]            // zero copy, straight from the frame
//!     if out.reassembled > 0: conn.drain_reassembled(|octets| consume(octets))
//! conn.end_of_burst(now)
//! while let Some(t) = conn.poll_transmit(now, frame) { checksum, IP, Ethernet, TX }
//! while let Some(e) = conn.poll_event() { ... }
//! wake at conn.poll_timeout() -> conn.handle_timeout(now)
//! ```
//!
//! ACK policy (RFC 5681 §4.2, RFC 2018 §4, RFC 2883). In-order bulk: an ACK becomes due at
//! every second in-order segment, at `end_of_burst`, or when the delayed-ACK timer fires;
//! "due" is a flag, so a caller that polls `poll_transmit` once per burst sends one
//! (stretch) ACK per flow per burst (docs/architecture.md, "Receive path"). Under loss every out-of-order segment,
//! every segment that fills (part of) a hole and every duplicate is owed its own ACK: when the
//! next segment comes in, the ACK the previous one is owed is frozen (acknowledgment number
//! and SACK blocks of that moment: the block holding the newest segment first, D-SACK first
//! for a duplicate) into a bounded queue that `poll_transmit` empties before anything else,
//! so a burst of reordered segments still yields its ACKs. Up to `ooo_ack_every` segments of
//! a burst share one ACK while its SACK blocks can report every range they changed (the ACKs
//! of a burst leave together, so sharing only saves ACKs); a duplicate's D-SACK goes alone.
//! No allocation per ACK.
//!
//! Receive window: the reassembly ring has `reassembly_limit` octets indexed by sequence
//! offset from RCV.NXT, so out-of-order octets sit inside the window at their own place and
//! do not shrink it; the window offered is `rcv_buf` minus delivered-but-unreleased octets
//! (zero but in the tests' builds, `TcpConfig::manual_release`), at most what the store can
//! take (its octet limit plus the octets the caller placed itself, which need no store),
//! rounded to the scale, never retracting the right edge (the kernel's included). Every ACK
//! re-offers it, so the ACK of a segment that fills a hole reopens the window at once.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::{Duration, Instant};

use mpa::seq::SeqNumber;
use tracing::{debug, warn};

use super::cc::Controller;
use super::config::{HandoverState, TcpConfig, MAX_WINDOW_SCALE};
use super::error::TcpError;
use super::reassembly::{Insert, Reassembly};
use super::rtt::RttEstimator;
use super::scoreboard::Scoreboard;
use super::send_buf::SendBuffer;
use super::source::SendSource;
use super::stats::{DropReason, TcpStats};
use super::timer::{Timer, Timers};
use super::PlacedSpans;

mod ack;
mod in_order;
mod rx;
use in_order::Text;
pub(crate) use in_order::TextLengths;
mod timers;
mod tx;
use crate::wire::tcp::{
    TcpFlags, TcpOptions, TcpPacket, TcpRepr, TcpTimestamps, HEADER_LEN, MAX_SACK_BLOCKS,
    TIMESTAMPS_OPTION_LEN,
};

/// RFC 7323 §5.5: TS.Recent is invalid after 24 days without an update.
const TS_RECENT_MAX_AGE: Duration = Duration::from_secs(24 * 24 * 3600);
/// The largest receive buffer: windows are at most 2^30 (RFC 7323 §2.3).
const MAX_BUF: usize = 1 << 30;

/// Connection states with RFC 9293's names; only the synchronized ones exist here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Data flows both ways.
    Established,
    /// The peer's FIN was delivered; we may still send.
    CloseWait,
    /// We sent FIN; it is not yet acknowledged.
    FinWait1,
    /// Our FIN is acknowledged; waiting for the peer's.
    FinWait2,
    /// Both sent FIN; ours is not yet acknowledged.
    Closing,
    /// We sent FIN after the peer's; waiting for its acknowledgment.
    LastAck,
    /// Both FINs acknowledged; lingering to re-ACK a retransmitted FIN.
    TimeWait,
    /// Gone: closed, reset or failed.
    Closed,
}

/// Something the owner of the connection must hear about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// The peer reset the connection (RST at RCV.NXT). The connection is closed.
    Reset,
    /// The peer's FIN arrived in order, after every octet it sent: end of stream.
    PeerClosed,
    /// The connection closed normally (both FINs acknowledged, or after TIME-WAIT) or was
    /// aborted locally.
    Closed,
    /// The connection failed (sticky; see [`Connection::error`]).
    Failed(TcpError),
}

/// What [`Connection::handle_segment`] did with a segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentOutcome {
    /// The sub-range of the segment's payload that is new in-order data, to be consumed now
    /// (zero copy); empty when none. Octets before it were already received, octets after it
    /// lay beyond the receive window.
    pub in_order: Range<usize>,
    /// Octets that became in order in the reassembly store: call
    /// [`Connection::drain_reassembled`] after consuming `in_order`.
    pub reassembled: usize,
    /// Why the segment, or its payload, was not accepted.
    pub(crate) dropped: Option<DropReason>,
}

/// A segment [`Connection::poll_transmit`] wrote into the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// The header's meaning.
    pub(crate) repr: TcpRepr,
    /// Octets of the header at the start of the buffer (options included).
    pub(crate) header_len: usize,
    /// Payload octets right after it.
    pub(crate) payload_len: usize,
}

impl Transmit {
    /// Octets of the whole TCP segment: `buf[..len()]`. Fill its checksum before sending
    /// ([`TcpPacket::fill_checksum_v4`] / `_v6`); it is written as zero.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.header_len + self.payload_len
    }
}

#[derive(Debug, Clone, Copy)]
struct TsClock {
    tsval_at_freeze: u32,
    freeze_instant: Instant,
}

/// What `poll_transmit` decided to send.
#[derive(Debug, Clone, Copy)]
struct Plan {
    seq: SeqNumber,
    len: usize,
    fin: bool,
    retransmission: bool,
}

/// An ACK frozen for one segment: what it acknowledged and SACKed at that moment.
#[derive(Debug, Clone, Copy)]
struct AckSnap {
    ack: SeqNumber,
    sack: crate::wire::tcp::SackBlocks,
    dsack: bool,
}

/// The smallest receive window offered under memory pressure (`free_window`): in-order data
/// needs no memory from the budget, so a flow is slowed, never stalled, by others' use of it.
pub(crate) const PRESSURE_WINDOW: usize = 64 << 10;

/// A TCP connection in a synchronized state, handed over from the kernel. See the module
/// documentation for the caller's loop. What it sends comes from `S`: a byte ring
/// (`SendBuffer`, filled by `Connection::send` in the tests) unless built with
/// `Connection::with_source`.
#[derive(Debug)]
pub struct Connection<S: SendSource = SendBuffer> {
    cfg: TcpConfig,
    state: State,
    local_port: u16,
    remote_port: u16,
    /// The latest time passed in.
    now: Instant,

    // ---- receive ----
    rcv_nxt: SeqNumber,
    /// The right edge we advertised: never moves left (RFC 9293 §3.8.6.2.2, RFC 7323 §2.4).
    adv_edge: SeqNumber,
    rcv_wscale: u8,
    /// Largest payload seen (for SWS avoidance), starting from the peer's MSS.
    rcv_mss: usize,
    store: Reassembly,
    /// Delivered octets not yet released (manual release only).
    unreleased: usize,
    /// Sequence number of the peer's FIN, once a FIN inside the window was seen.
    peer_fin: Option<SeqNumber>,
    peer_fin_done: bool,
    segs_unacked: u32,
    ack_now: bool,
    /// While set, `ack_now` alone builds no segment: the ACK waits for data to carry it
    /// (`Connection::set_hold_pure_ack`).
    hold_pure_ack: bool,
    /// A pure ACK was held and no segment has left since.
    ack_held: bool,
    /// The latest segment is owed its own ACK (out of order, hole filling, duplicate).
    ack_each: bool,
    /// The owed ACK is for an out-of-order segment ending here (may be shared with the next
    /// segment if that one continues it: `TcpConfig::ooo_ack_every`).
    ooo_owed_end: Option<SeqNumber>,
    /// Segments sharing the owed ACK so far.
    ooo_shared: u32,
    /// One octet of each out-of-order range changed since the last ACK was frozen or sent
    /// (`changed_len` of them): a segment shares the owed ACK only while one ACK's SACK
    /// blocks can still report every one of them.
    changed: [SeqNumber; MAX_SACK_BLOCKS],
    changed_len: usize,
    /// The segment being handled shares the previous one's ACK.
    sharing_ack: bool,
    /// A duplicate to report first in the next ACK (RFC 2883).
    dsack: Option<(SeqNumber, SeqNumber)>,
    /// ACKs frozen for earlier segments, oldest first (bounded by `cfg.ack_queue`).
    ack_queue: VecDeque<AckSnap>,
    window_update: bool,
    last_ack_sent: SeqNumber,
    sack_ok: bool,
    max_sack_blocks: usize,

    // ---- timestamps (RFC 7323) ----
    ts: Option<TsClock>,
    ts_recent: u32,
    ts_recent_valid: bool,
    ts_recent_at: Instant,

    // ---- send ----
    snd_una: SeqNumber,
    snd_nxt: SeqNumber,
    /// Highest sequence number sent plus one (SND.NXT before any go-back).
    snd_max: SeqNumber,
    snd_wnd: u32,
    snd_wl1: SeqNumber,
    snd_wl2: SeqNumber,
    max_snd_wnd: u32,
    snd_wscale: u8,
    snd_mss: usize,
    /// The octets from SND.UNA on.
    src: S,
    /// Our FIN's sequence number once `close` was called.
    our_fin: Option<SeqNumber>,
    /// The datapath's memory budget the store's copied octets are charged to (`None`:
    /// unbounded but by the store's own limit), and what is charged now.
    budget: Option<std::sync::Arc<crate::budget::MemoryBudget>>,
    budget_held: u64,
    /// `close` was called while the source held octets beyond its view: the FIN is placed
    /// once they are in view (`place_fin`).
    fin_waits_for_backlog: bool,
    /// The congestion window and slow-start threshold (`cc.rs`).
    cc: Controller,
    dupacks: u32,
    /// RFC 6675 RecoveryPoint (RFC 6582 "recover"): SND.MAX when fast recovery began.
    recovery: Option<SeqNumber>,
    /// RFC 6675 §5 (4.2), RFC 6582 partial ACK: the segment at SND.UNA goes next,
    /// whatever the pipe says (it starts recovery, or it was found lost again).
    rtx_una_now: bool,
    /// RFC 6675 HighRxt (exclusive): holes below this were retransmitted in the current
    /// recovery.
    rtx_next: SeqNumber,
    /// The retransmission of the octet at SND.UNA in this recovery, and SND.MAX when it
    /// left: a SACK above that SND.MAX means it was lost too (data sent after it arrived).
    rtx_una: Option<(SeqNumber, SeqNumber)>,
    /// RFC 6582 §4.1 after a timeout: SND.MAX when it fired. Until SND.UNA passes it the
    /// go-back resends, and duplicate ACKs or SACKs do not start a recovery episode (that
    /// would reduce the window a second time for the same losses).
    rto_recover: Option<SeqNumber>,
    /// Pacing: the earliest time the next data segment may leave.
    pace_next: Instant,
    /// `poll_transmit` held data back for pacing: `poll_timeout` includes `pace_next`.
    pace_wait: bool,
    /// RFC 3042 limited transmit: new segments allowed beyond cwnd on early dup ACKs.
    limited_transmit: u32,
    scoreboard: Scoreboard,
    rtt: RttEstimator,
    /// Karn's rule timing: (sequence number whose ACK ends the sample, send time).
    rtt_probe: Option<(SeqNumber, Instant)>,
    rto_count: u32,
    persist_backoff: u32,
    /// Zero-window probes sent since the peer's window closed (`TcpConfig::persist_max_probes`).
    persist_probes: u32,
    probe_pending: bool,
    /// The next new segment may end inside one of the source's units (see `on_persist`).
    force_cut: bool,
    /// When the latest acceptable segment arrived: the keepalive's idle time counts from it.
    last_rx: Instant,
    /// Keepalive probes sent since then.
    keepalive_probes_out: u32,
    keepalive_pending: bool,
    /// SND.UNA when the keepalive timer last found the send side stalled (`on_keepalive`).
    stall_mark: Option<SeqNumber>,
    /// A RST to send: (seq, ack).
    rst_pending: Option<(SeqNumber, Option<SeqNumber>)>,

    timers: Timers,
    challenge_window: (Instant, u32),
    /// A challenge ACK is owed and not yet sent: counted as sent when the next ACK leaves,
    /// and further challenges until then share it.
    challenge_owed: bool,
    /// When an ACK last answered an invalid segment without data.
    last_invalid_ack: Option<Instant>,
    events: VecDeque<Event>,
    error: Option<TcpError>,
    stats: TcpStats,
}

impl Connection<SendBuffer> {
    /// Creates the connection in ESTABLISHED from a hand-over snapshot, sending from a byte
    /// ring of `cfg.snd_buf` octets. `now` is the current time; the caller should
    /// `poll_transmit` at once (the data path's first segment, e.g. the MPA Reply, carries
    /// the current ACK and window).
    pub fn new(h: &HandoverState, cfg: &TcpConfig, now: Instant) -> Result<Connection, TcpError> {
        Connection::with_source(h, cfg, now, SendBuffer::new(cfg.snd_buf))
    }

    /// Octets queued to send and not yet acknowledged.
    #[cfg(test)]
    pub(crate) fn send_queued(&self) -> usize {
        self.src.len()
    }
    /// Room in the send buffer.
    #[cfg(test)]
    pub(crate) fn send_capacity(&self) -> usize {
        if self.can_send() {
            self.src.free()
        } else {
            0
        }
    }
}

impl<S: SendSource> Connection<S> {
    /// As [`Connection::new`], sending what `src` holds (e.g. an FPDU source reading
    /// registered memory). `cfg.snd_buf` still sizes the SACK scoreboard: set it to the
    /// most the source will have in flight.
    pub(crate) fn with_source(
        h: &HandoverState,
        cfg: &TcpConfig,
        now: Instant,
        src: S,
    ) -> Result<Connection<S>, TcpError> {
        if cfg.rcv_buf == 0 || cfg.rcv_buf > MAX_BUF {
            return Err(TcpError::InvalidHandover("rcv_buf must be in 1..=2^30"));
        }
        if cfg.snd_buf == 0 || cfg.snd_buf > MAX_BUF {
            return Err(TcpError::InvalidHandover("snd_buf must be in 1..=2^30"));
        }
        // Our own shift came from our kernel: a value above 14 means a broken snapshot.
        if h.rcv_wscale > MAX_WINDOW_SCALE {
            return Err(TcpError::InvalidHandover("rcv_wscale above 14"));
        }
        let min_mss = if h.timestamps.is_some() { 64 } else { 1 };
        if usize::from(h.mss) < min_mss {
            return Err(TcpError::InvalidHandover("peer MSS too small"));
        }
        // RFC 7323 §2.3: a shift above 14 from the peer is used as 14 (and logged).
        let snd_wscale = if h.snd_wscale > MAX_WINDOW_SCALE {
            warn!(
                shift = h.snd_wscale,
                "peer window scale above 14: using 14 (RFC 7323 §2.3)"
            );
            MAX_WINDOW_SCALE
        } else {
            h.snd_wscale
        };
        let ts_overhead = if h.timestamps.is_some() {
            TIMESTAMPS_OPTION_LEN
        } else {
            0
        };
        let ts = h.timestamps.map(|t| TsClock {
            tsval_at_freeze: t.tsval_at_freeze,
            freeze_instant: t.freeze_instant,
        });
        let ts_recent = h.timestamps.map_or(0, |t| t.ts_recent);
        if cfg.max_snd_mss < 64 {
            return Err(TcpError::InvalidHandover("max_snd_mss below 64"));
        }
        // The peer's MSS bounds what it can take, ours what our link and frames can carry.
        let snd_mss = usize::from(h.mss.min(cfg.max_snd_mss));
        // The kernel's advertised right edge: ours starts there and never retreats.
        let kernel_edge = h.rcv_wup + h.rcv_wnd;
        let adv_edge = if kernel_edge > h.rcv_nxt {
            kernel_edge
        } else {
            h.rcv_nxt
        };
        let max_sack_blocks =
            cfg.max_sack_blocks
                .min(if ts.is_some() { 3 } else { MAX_SACK_BLOCKS });
        let rcv_mss = snd_mss.saturating_sub(ts_overhead).max(1);
        // One range per MSS of the store: with full-sized segments the octet limit is reached
        // first, however many holes a full window holds.
        let max_ranges = match cfg.max_ooo_ranges {
            0 => cfg.reassembly_limit.min(cfg.rcv_buf).div_ceil(rcv_mss) + 1,
            n => n,
        };
        let mut c = Connection {
            cfg: cfg.clone(),
            state: State::Established,
            local_port: h.local_port,
            remote_port: h.remote_port,
            now,
            rcv_nxt: h.rcv_nxt,
            adv_edge,
            rcv_wscale: h.rcv_wscale,
            rcv_mss,
            store: Reassembly::new(cfg.rcv_buf, cfg.reassembly_limit, max_ranges),
            unreleased: 0,
            peer_fin: None,
            peer_fin_done: false,
            segs_unacked: 0,
            ack_now: false,
            hold_pure_ack: false,
            ack_held: false,
            ack_each: false,
            ooo_owed_end: None,
            ooo_shared: 0,
            changed: [SeqNumber(0); MAX_SACK_BLOCKS],
            changed_len: 0,
            sharing_ack: false,
            dsack: None,
            ack_queue: VecDeque::with_capacity(cfg.ack_queue),
            window_update: false,
            last_ack_sent: h.rcv_nxt,
            sack_ok: h.sack_permitted,
            max_sack_blocks,
            ts,
            ts_recent,
            ts_recent_valid: ts.is_some() && ts_recent != 0,
            ts_recent_at: now,
            snd_una: h.snd_nxt,
            snd_nxt: h.snd_nxt,
            snd_max: h.snd_nxt,
            snd_wnd: h.snd_wnd,
            snd_wl1: h.rcv_nxt,
            snd_wl2: h.snd_nxt,
            max_snd_wnd: h.snd_wnd,
            snd_wscale,
            snd_mss,
            src,
            our_fin: None,
            fin_waits_for_backlog: false,
            budget: None,
            budget_held: 0,
            cc: Controller::new(cfg.congestion_control, snd_mss, cfg.initial_cwnd_segments),
            dupacks: 0,
            recovery: None,
            rtx_una_now: false,
            rtx_next: h.snd_nxt,
            rtx_una: None,
            rto_recover: None,
            pace_next: now,
            pace_wait: false,
            limited_transmit: 0,
            // Every other full segment of a full send buffer a separate range.
            scoreboard: Scoreboard::with_capacity(
                (cfg.snd_buf.div_ceil(2 * snd_mss) + 1).min(4096),
            ),
            rtt: RttEstimator::new(cfg.rto_initial, cfg.rto_min, cfg.rto_max),
            rtt_probe: None,
            rto_count: 0,
            persist_backoff: 0,
            persist_probes: 0,
            probe_pending: false,
            force_cut: false,
            last_rx: now,
            keepalive_probes_out: 0,
            keepalive_pending: false,
            stall_mark: None,
            rst_pending: None,
            timers: Timers::default(),
            challenge_window: (now, 0),
            challenge_owed: false,
            last_invalid_ack: None,
            events: VecDeque::with_capacity(4),
            error: None,
            stats: TcpStats::default(),
        };
        if let Some(idle) = cfg.keepalive_idle {
            c.timers.set(Timer::Keepalive, now + idle);
        }
        debug!(
            local = c.local_port,
            remote = c.remote_port,
            rcv_nxt = %c.rcv_nxt,
            snd_nxt = %c.snd_nxt,
            snd_wnd = c.snd_wnd,
            ts = c.ts.is_some(),
            sack = c.sack_ok,
            "tcp: connection adopted"
        );
        Ok(c)
    }

    // ------------------------------------------------------------------ accessors

    /// The state.
    pub(crate) fn state(&self) -> State {
        self.state
    }
    /// Counters.
    pub fn stats(&self) -> &TcpStats {
        &self.stats
    }
    /// The error the connection failed with, if it did (sticky).
    #[cfg(test)]
    pub(crate) fn error(&self) -> Option<&TcpError> {
        self.error.as_ref()
    }
    /// RCV.NXT: every octet before it was delivered.
    pub(crate) fn rcv_nxt(&self) -> SeqNumber {
        self.rcv_nxt
    }
    /// SND.UNA.
    pub(crate) fn snd_una(&self) -> SeqNumber {
        self.snd_una
    }
    /// SND.NXT.
    pub(crate) fn snd_nxt(&self) -> SeqNumber {
        self.snd_nxt
    }
    /// The receive window the peer was last told: right edge minus RCV.NXT.
    pub(crate) fn rcv_wnd(&self) -> u32 {
        if self.adv_edge > self.rcv_nxt {
            self.adv_edge.distance_from(self.rcv_nxt)
        } else {
            0
        }
    }
    /// The peer's window in octets.
    #[cfg(test)]
    pub(crate) fn snd_wnd(&self) -> u32 {
        self.snd_wnd
    }
    /// Octets held out of order (copied into the store; placed ones excluded).
    #[cfg(test)]
    pub(crate) fn reassembly_stored(&self) -> usize {
        self.store.stored()
    }
    /// Disjoint out-of-order ranges held, and the most the table takes.
    #[cfg(test)]
    pub(crate) fn reassembly_ranges(&self) -> (usize, usize) {
        (self.store.range_count(), self.store.max_ranges())
    }
    /// Octets the source holds from SND.UNA on (sent or not).
    #[cfg(test)]
    pub(crate) fn source_queued(&self) -> usize {
        self.src.queued()
    }
    /// The send source.
    pub(crate) fn source(&self) -> &S {
        &self.src
    }
    /// The send source, to queue more (queue only at its end: what was sent stays as it was).
    pub(crate) fn source_mut(&mut self) -> &mut S {
        &mut self.src
    }
    /// RFC 5044's EMSS: the MSS less the options every segment carries (timestamps). An
    /// aligned source sizes its FPDUs to it.
    pub(crate) fn emss(&self) -> usize {
        let ts = if self.ts.is_some() {
            TIMESTAMPS_OPTION_LEN
        } else {
            0
        };
        self.snd_mss.saturating_sub(ts).max(1)
    }
    /// Whether more may be queued: the connection is open and our FIN not yet queued.
    pub(crate) fn can_queue(&self) -> bool {
        self.can_send()
    }
    /// The congestion window in octets.
    pub(crate) fn cwnd(&self) -> usize {
        self.cc.cwnd()
    }
    /// Whether a fast-recovery episode (RFC 6675) is in progress.
    #[cfg(test)]
    pub(crate) fn in_recovery(&self) -> bool {
        self.recovery.is_some()
    }
    /// The smoothed RTT, once sampled.
    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.rtt.srtt()
    }
    /// The retransmission timeout now in force (backoff included).
    #[cfg(test)]
    pub(crate) fn rto(&self) -> Duration {
        self.rtt.rto()
    }
    /// Our timestamp clock at `now`: the kernel's TSval at the freeze plus the milliseconds
    /// since (wrapping), or `None` without timestamps.
    pub(crate) fn tsval(&self, now: Instant) -> Option<u32> {
        self.ts.map(|t| {
            let ms = now.saturating_duration_since(t.freeze_instant).as_millis();
            // Modulo 2^32 is the point: the clock wraps.
            t.tsval_at_freeze.wrapping_add(ms as u32)
        })
    }
    /// The TSecr we send: TS.Recent, or 0 while it is unknown.
    #[cfg(test)]
    pub(crate) fn ts_recent(&self) -> Option<u32> {
        self.ts_recent_valid.then_some(self.ts_recent)
    }

    /// The send side's state, for test failure messages.
    #[cfg(test)]
    pub(crate) fn send_debug(&self) -> String {
        format!(
            "state {:?} una {} nxt {} max {} data_end {} fin {:?} wnd {} cwnd {} ssthresh {} \
             recovery {:?} rtx_next {} rtx_una {:?} now {} rto_recover {:?} pipe {} sacked {:?} \
             timers {:?} rto {:?} pace_wait {}",
            self.state,
            self.snd_una,
            self.snd_nxt,
            self.snd_max,
            self.data_end(),
            self.our_fin,
            self.snd_wnd,
            self.cc.cwnd(),
            self.cc.ssthresh(),
            self.recovery,
            self.rtx_next,
            self.rtx_una,
            self.rtx_una_now,
            self.rto_recover,
            self.pipe(),
            self.scoreboard,
            self.timers,
            self.rtt.rto(),
            self.pace_wait,
        )
    }

    /// Charges the octets the reassembly store copies to `budget` from now on (segments
    /// that do not fit it are dropped, counted as `reassembly_full`).
    pub(crate) fn set_budget(&mut self, budget: std::sync::Arc<crate::budget::MemoryBudget>) {
        if let Some(old) = self.budget.take() {
            old.release(self.budget_held);
        }
        self.budget_held = 0;
        self.budget = Some(budget);
        self.settle_budget(0);
    }

    fn can_send(&self) -> bool {
        matches!(self.state, State::Established | State::CloseWait)
            && self.our_fin.is_none()
            && !self.fin_waits_for_backlog
    }

    // ------------------------------------------------------------------ time and events

    fn enter_time_wait(&mut self, now: Instant) {
        self.state = State::TimeWait;
        self.timers.clear_all();
        self.timers.set(Timer::TimeWait, now + self.cfg.time_wait);
    }

    fn enter_closed(&mut self, error: Option<TcpError>) {
        self.state = State::Closed;
        self.timers.clear_all();
        self.ack_now = false;
        self.ack_each = false;
        self.ack_queue.clear();
        self.probe_pending = false;
        self.keepalive_pending = false;
        match error {
            Some(TcpError::Reset) => {
                self.error = Some(TcpError::Reset);
                self.events.push_back(Event::Reset);
            }
            Some(e) => {
                self.error = Some(e.clone());
                self.events.push_back(Event::Failed(e));
            }
            None => self.events.push_back(Event::Closed),
        }
    }

    /// The next event, oldest first.
    pub(crate) fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}

impl<S: SendSource> Drop for Connection<S> {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.release(self.budget_held);
        }
    }
}
