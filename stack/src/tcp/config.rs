//! What a connection starts from: the kernel's state at hand-over and local policy.

use std::time::{Duration, Instant};

use mpa::seq::SeqNumber;

use super::cc::CongestionControl;

/// The largest window scale shift (RFC 7323 §2.3).
pub(crate) const MAX_WINDOW_SCALE: u8 = 14;

/// The state of a kernel socket frozen with TCP_REPAIR (docs/environment.md, "TCP_REPAIR hand-over").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandoverState {
    /// Our port.
    pub local_port: u16,
    /// The peer's port.
    pub remote_port: u16,
    /// `TCP_QUEUE_SEQ` of the send queue. With nothing unsent or unacknowledged at the
    /// freeze (SIOCOUTQ 0) this is also SND.UNA.
    pub snd_nxt: SeqNumber,
    /// `TCP_QUEUE_SEQ` of the receive queue: RCV.NXT.
    pub rcv_nxt: SeqNumber,
    /// `TCP_REPAIR_WINDOW.snd_wnd`: the peer's window in octets as the kernel holds it (the
    /// kernel has already applied the peer's shift; it is not shifted again).
    pub snd_wnd: u32,
    /// `TCP_REPAIR_WINDOW.rcv_wnd`: the window we last advertised, in octets.
    pub rcv_wnd: u32,
    /// `TCP_REPAIR_WINDOW.rcv_wup`: RCV.NXT when that window was advertised. The right edge
    /// `rcv_wup + rcv_wnd` must never be retracted.
    pub rcv_wup: SeqNumber,
    /// The peer's window scale shift (`tcpi_snd_wscale`); 0 when scaling was not negotiated.
    pub snd_wscale: u8,
    /// Our window scale shift (`tcpi_rcv_wscale`); 0 when scaling was not negotiated.
    pub rcv_wscale: u8,
    /// The MSS the peer announced in its SYN (`TCP_MAXSEG` in repair mode), options excluded.
    pub mss: u16,
    /// SACK was negotiated.
    pub sack_permitted: bool,
    /// Timestamps were negotiated: the kernel's clock at the freeze.
    pub timestamps: Option<TsHandover>,
}

/// The kernel's timestamp clock at the freeze, so that our TSvals continue it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TsHandover {
    /// `TCP_TIMESTAMP` read while frozen: the kernel's TSval at `freeze_instant`.
    pub tsval_at_freeze: u32,
    /// The instant of that read (take the earlier of the two monotonic reads that bracket it,
    /// so that our clock is at most one tick ahead, never behind).
    pub freeze_instant: Instant,
    /// The peer's last TSval (TS.Recent), or 0 if unknown (the kernel does not export it).
    pub ts_recent: u32,
}

/// Local policy for one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpConfig {
    /// Receive window in octets: the most we advertise, and how far above RCV.NXT
    /// out-of-order octets are taken. At most 2^30. Beyond `reassembly_limit` the window
    /// is only offered against octets the caller placed itself (see `reassembly_limit`).
    pub rcv_buf: usize,
    /// The reassembly store: the most octets copied into it at once, and its ring's size
    /// (allocated once, at construction; pages committed when first written), so copied
    /// octets lie within this many of RCV.NXT. Octets the caller placed itself are not
    /// copied and do not count. A segment that would exceed it makes room by pruning
    /// stored ranges above it, from the far end; one above everything stored, or with an
    /// octet to copy beyond the ring, is dropped and counted (the peer retransmits it).
    /// The window offered is at most this plus the octets placed ahead of RCV.NXT: a
    /// sender whose segments are not placed sees this window; one whose are sees up to
    /// `rcv_buf`. Above `rcv_buf` it is `rcv_buf`.
    pub reassembly_limit: usize,
    /// The most disjoint out-of-order ranges held at once (each hole costs one); 0 (default)
    /// sizes the table by memory: one range per peer MSS of the reassembly limit, enough for
    /// every other full-sized segment of a full window to be missing.
    pub max_ooo_ranges: usize,
    /// ACKs owed to individual out-of-order, hole-filling or duplicate segments that wait
    /// for the next `poll_transmit` (RFC 5681 §4.2: each gets its own ACK with the SACK
    /// information of its moment). Past this many the newest are merged into one.
    pub ack_queue: usize,
    /// Segments owed their own ACK (out of order, filling a hole) share one ACK per this many
    /// (1: an ACK each, as RFC 5681 §4.2 asks): with SACK, as long as that ACK's blocks can
    /// report every range changed since the previous ACK (the next segment that would not
    /// fit gets a new one); without SACK, only segments that extend the previous one's range.
    /// A duplicate always gets its own D-SACK. The ACKs owed within one RX burst all leave
    /// after it, so sharing delays nothing and loses no SACK information; it saves ACKs, and
    /// each costs the sender's SACK processing and, on veth, the worker's own TX syscall
    /// (like Linux's SACK compression, `tcp_comp_sack_nr`, which bounds it at 44).
    pub ooo_ack_every: u32,
    /// SACK blocks per ACK: at most 4, and 3 when timestamps are on (40 option octets).
    pub max_sack_blocks: usize,
    /// ACK at once after this many in-order data segments (RFC 5681 §4.2: at most 2).
    pub ack_every_segments: u32,
    /// Delayed-ACK timer when neither of the above nor an end of burst sends one.
    pub ack_delay: Duration,
    /// When true, delivered octets keep occupying the window until `Connection::release`
    /// gives them back; the tests' builds only (a consumer-driven window has no user yet, and
    /// without its release call the window would close for good).
    #[cfg(test)]
    pub manual_release: bool,
    /// Send buffer in octets (data queued and not yet acknowledged).
    pub snd_buf: usize,
    /// Initial congestion window in segments (RFC 6928).
    pub initial_cwnd_segments: u32,
    /// The congestion controller (default CUBIC, RFC 9438).
    pub congestion_control: CongestionControl,
    /// Pace data segments at gain × cwnd / SRTT (2 in slow start, 1.2 after) instead of
    /// sending each window as one burst: `poll_transmit` holds data back until the next
    /// segment's time (a deadline `poll_timeout` reports), so a burst cannot
    /// overflow a shallow queue on the path. Off while no RTT sample exists, or SRTT rounds
    /// to zero (timestamps count in ms).
    pub pacing: bool,
    /// RTO before any RTT sample (RFC 6298 §2.1 says 1 s).
    pub rto_initial: Duration,
    /// Lower bound on the RTO (RFC 6298 §2.4 says 1 s; Linux uses 200 ms).
    pub rto_min: Duration,
    /// Upper bound on the RTO (RFC 6298 §2.5: at least 60 s).
    pub rto_max: Duration,
    /// Consecutive retransmission timeouts without progress before the connection fails.
    pub max_retransmissions: u32,
    /// How long TIME-WAIT lasts. The frozen kernel socket keeps the 4-tuple reserved, so this
    /// can be far shorter than 2×MSL; it only needs to cover the peer's retransmissions of
    /// its FIN should our last ACK be lost (Linux: 0.2, 0.6, 1.4, 3.0 s ...), or the peer
    /// meets a RST instead of a clean close.
    pub time_wait: Duration,
    /// Keepalive (RFC 1122 §4.2.3.6, RFC 9293 §3.8.4): after this long without an acceptable
    /// segment from the peer, while nothing of ours is in flight or queued, probe it (an ACK
    /// one below SND.UNA, which a live peer answers); `None`: never. RFC 1122 wants it off
    /// by default for kernel sockets, but here the datapath is the only one that can tell a
    /// vanished peer (the frozen kernel socket and the `max_connections` slot live as long as
    /// the flow), so it is on, with RFC 1122's 2 h.
    pub keepalive_idle: Option<Duration>,
    /// Between unanswered keepalive probes (Linux `tcp_keepalive_intvl`: 75 s). Keep it at
    /// 0.5 s or more: Linux answers an out-of-window segment, which a probe is, at most once
    /// per `tcp_invalid_ratelimit` (0.5 s), and a suppressed answer counts as silence.
    pub keepalive_interval: Duration,
    /// Unanswered keepalive probes after which the connection fails with a RST
    /// (`TcpError::KeepaliveTimeout`) (Linux `tcp_keepalive_probes`: 9): idle + probes ×
    /// interval after the peer's last segment.
    pub keepalive_probes: u32,
    /// The longest FIN-WAIT-2 lasts: our FIN was acknowledged and the peer's never comes
    /// (Linux `tcp_fin_timeout`: 60 s). Then a RST, `TcpError::FinWait2Timeout`.
    pub fin_wait2_timeout: Duration,
    /// Zero-window probes sent while the peer's window stays closed, after which the
    /// connection fails with a RST (`TcpError::PersistLimit`); the Linux equivalent is
    /// `tcp_retries2` (15). Unlike Linux, an answered probe does not restart the count: only an
    /// opening window does, so a live peer that never reads cannot hold the flow for ever.
    pub persist_max_probes: u32,
    /// Challenge ACKs per second at most (RFC 5961 §7).
    pub challenge_ack_limit: u32,
    /// At most one ACK per this interval answers segments without data that fail the
    /// sequence check or PAWS (Linux's `tcp_invalid_ratelimit`, 500 ms): two stacks that
    /// disagree on the sequence space, or a forger, must not get an ACK loop or a reflector.
    /// Segments carrying data keep their ACK (the peer's recovery needs it).
    pub invalid_ack_interval: Duration,
    /// Drop non-RST segments without timestamps once timestamps are on (RFC 7323 §3.2 SHOULD).
    pub require_timestamps: bool,
    /// The largest segment we send, in TCP payload octets with options (an MSS for IPv4
    /// headers): the peer's announced MSS is clamped to it, so that no segment exceeds our
    /// MTU or a UMEM frame whatever the peer announced (RFC 9293 §3.7.1: the effective
    /// send MSS is also bounded by our own MTU). At least 64. `Datapath::start` derives it
    /// from the interface; the default is for Ethernet's 1500.
    pub max_snd_mss: u16,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            // Linux's default tcp_rmem maximum is 6 MiB; at 20 % loss a 1 MiB window was
            // full of placed octets behind the hole at RCV.NXT
            // (docs/investigations/2026-12-02-window-over-placed-octets.md).
            rcv_buf: 4 << 20,
            reassembly_limit: 1 << 20,
            max_ooo_ranges: 0,
            ack_queue: 64,
            ooo_ack_every: 16,
            max_sack_blocks: 4,
            ack_every_segments: 2,
            ack_delay: Duration::from_millis(40),
            #[cfg(test)]
            manual_release: false,
            snd_buf: 256 * 1024,
            initial_cwnd_segments: 10,
            congestion_control: CongestionControl::default(),
            pacing: true,
            rto_initial: Duration::from_secs(1),
            rto_min: Duration::from_millis(200),
            rto_max: Duration::from_secs(60),
            max_retransmissions: 15,
            time_wait: Duration::from_secs(5),
            keepalive_idle: Some(Duration::from_secs(2 * 3600)),
            keepalive_interval: Duration::from_secs(75),
            keepalive_probes: 9,
            fin_wait2_timeout: Duration::from_secs(60),
            persist_max_probes: 15,
            challenge_ack_limit: 100,
            invalid_ack_interval: Duration::from_millis(500),
            require_timestamps: true,
            max_snd_mss: 1460,
        }
    }
}
