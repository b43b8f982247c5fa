//! Per-connection counters.

/// Why a received segment, or its payload, was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum DropReason {
    /// Outside the receive window (RFC 9293 §3.10.7.4): answered with an ACK unless RST.
    OutOfWindow,
    /// Every octet was received before (full duplicate): answered with a duplicate ACK.
    Duplicate,
    /// TSval older than TS.Recent (PAWS, RFC 7323 §5.3 R1): answered with an ACK.
    Paws,
    /// No timestamps option although timestamps are on (RFC 7323 §3.2).
    MissingTimestamp,
    /// ACK field not acceptable (RFC 5961 §5.2), or ACK bit off (RFC 9293 §3.10.7.4).
    BadAck,
    /// RST not exactly at RCV.NXT: answered with a challenge ACK, or dropped when outside the
    /// window (RFC 5961 §3.2).
    BadRst,
    /// SYN on an established connection: answered with a challenge ACK (RFC 5961 §4.2).
    Syn,
    /// Out-of-order octets did not fit the reassembly limit or range table, even after
    /// pruning everything above them.
    ReassemblyFull,
    /// Data after the peer's FIN, or any segment after the connection closed.
    AfterClose,
}

/// Drops by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DropCounters {
    /// [`DropReason::OutOfWindow`].
    pub(crate) out_of_window: u64,
    /// [`DropReason::Paws`].
    pub(crate) paws: u64,
    /// [`DropReason::MissingTimestamp`].
    pub(crate) missing_timestamp: u64,
    /// [`DropReason::BadAck`].
    pub(crate) bad_ack: u64,
    /// [`DropReason::BadRst`].
    pub(crate) bad_rst: u64,
    /// [`DropReason::Syn`].
    pub(crate) syn: u64,
    /// [`DropReason::ReassemblyFull`].
    pub(crate) reassembly_full: u64,
    /// [`DropReason::AfterClose`].
    pub(crate) after_close: u64,
}

/// Counters of one connection. Plain integers: read them with [`Connection::stats`].
///
/// [`Connection::stats`]: crate::tcp::Connection::stats
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Segments handed to `handle_segment`.
    pub(crate) segs_in: u64,
    /// Payload octets in those segments (before any trimming).
    pub(crate) octets_in: u64,
    /// Segments whose payload started at RCV.NXT (after trimming old octets).
    pub in_order_segs: u64,
    /// Segments taken in one update with the one before them
    /// (`Connection::handle_segment_in_order` with several segments).
    pub(crate) segs_batched: u64,
    /// Segments stored (wholly or partly) out of order.
    pub ooo_segs: u64,
    /// Segments with data every octet of which had been received already.
    pub(crate) dup_full: u64,
    /// Segments that carried some old and some new octets.
    pub(crate) dup_partial: u64,
    /// New in-order payload octets delivered (directly and from the store).
    pub octets_delivered: u64,
    /// Octets delivered from the reassembly store.
    pub octets_reassembled: u64,
    /// Stored out-of-order octets the caller consumed before they became in order (an FPDU
    /// gathered from stored pieces and a later segment), freed from the store's limit.
    pub(crate) octets_placed_from_store: u64,
    /// Most octets the reassembly store held copied at once (placed ranges excluded).
    pub(crate) store_high_water: u64,
    /// Most disjoint out-of-order ranges held at once.
    pub(crate) ooo_ranges_high_water: u64,
    /// Out-of-order ranges pruned from the far end to make room for lower segments.
    pub(crate) ooo_pruned_ranges: u64,
    /// Octets in those ranges (copied or placed; the peer sends them again).
    pub(crate) ooo_pruned_octets: u64,
    /// Drops by reason.
    pub(crate) dropped: DropCounters,
    /// RSTs that reset the connection.
    pub(crate) rst_accepted: u64,
    /// Segments sent.
    pub(crate) segs_out: u64,
    /// Payload octets sent, retransmissions included.
    pub(crate) octets_out: u64,
    /// Segments sent without payload, SYN or FIN: pure ACKs, window updates, probes.
    pub(crate) acks_sent: u64,
    /// Pure ACKs held (`Connection::set_hold_pure_ack`) that a data segment then carried:
    /// segments not sent.
    pub(crate) acks_carried: u64,
    /// SACK blocks sent, summed over segments.
    pub sack_blocks_sent: u64,
    /// Segments sent whose first SACK block is a D-SACK (RFC 2883).
    pub(crate) dsacks_sent: u64,
    /// ACKs queued for an individual out-of-order, hole-filling or duplicate segment.
    pub(crate) acks_queued: u64,
    /// Such ACKs merged into a later one because the queue was full.
    pub(crate) acks_merged: u64,
    /// Out-of-order segments whose ACK was shared with the next one (`ooo_ack_every`).
    pub(crate) acks_shared: u64,
    /// Challenge ACKs sent (RFC 5961): ACKs that left while one was owed.
    pub(crate) challenge_acks: u64,
    /// Challenge ACKs suppressed by the rate limit (RFC 5961 §7).
    pub(crate) challenge_acks_suppressed: u64,
    /// Challenges answered by a challenge ACK already owed (one ACK per burst answers them
    /// all): sent + suppressed + merged is every segment that drew a challenge.
    pub(crate) challenge_acks_merged: u64,
    /// ACKs not sent for out-of-window or PAWS-failing segments without data
    /// (`TcpConfig::invalid_ack_interval`).
    pub(crate) invalid_acks_suppressed: u64,
    /// Window updates sent because space opened.
    pub(crate) window_updates: u64,
    /// Segments (data or FIN) sent again: recovery, timeouts and lost retransmissions.
    pub(crate) retransmissions: u64,
    /// Payload octets in those segments.
    pub(crate) octets_retransmitted: u64,
    /// Fast retransmits: the segment at SND.UNA sent at the start of each recovery episode
    /// (RFC 5681 §3.2, RFC 6675 §5 step 4.2); equal to `recovery_episodes`.
    pub(crate) fast_retransmits: u64,
    /// Fast-recovery episodes entered (RFC 6675 §5): three duplicate ACKs, or SACKs above
    /// SND.UNA enough for IsLost. Each reduces the congestion window exactly once; losses
    /// inside an episode do not reduce it again.
    pub(crate) recovery_episodes: u64,
    /// Congestion-window reductions: one per recovery episode plus one per first timeout of
    /// a backoff series (a retransmission that times out again keeps ssthresh).
    pub(crate) cwnd_reductions: u64,
    /// Retransmission timeouts (RFC 6298), backed-off ones included.
    pub(crate) rto_expiries: u64,
    /// D-SACKs received (RFC 2883): the peer got a segment twice. Each is a spurious
    /// retransmission of ours or a copy the network made; we cannot tell which, and the
    /// window is not restored (no RFC 3708 undo).
    pub(crate) dsacks_received: u64,
    /// Times `poll_transmit` held data back because the pacing rate did not allow it yet
    /// (see `TcpConfig::pacing`).
    pub(crate) pacing_waits: u64,
    /// Retransmissions found lost by SACKs of later data, and sent again without a timeout.
    pub(crate) lost_retransmits: u64,
    /// Zero-window probes sent.
    pub(crate) window_probes: u64,
    /// Keepalive probes sent (RFC 1122 §4.2.3.6).
    pub(crate) keepalive_probes: u64,
    /// Data segments of an aligned source that end inside an FPDU (RFC 5044 Appendix A.1:
    /// a receive window or segment smaller than the next FPDU).
    pub(crate) unaligned_segments: u64,
    /// SACK blocks left off data segments of an aligned source for want of room.
    pub(crate) sack_blocks_trimmed: u64,
    /// Duplicate ACKs received (RFC 5681 §2 definition).
    pub(crate) dup_acks_in: u64,
    /// RTT samples taken.
    pub(crate) rtt_samples: u64,
}

impl TcpStats {
    pub(crate) fn count_drop(&mut self, r: DropReason) {
        let d = &mut self.dropped;
        match r {
            DropReason::OutOfWindow => d.out_of_window += 1,
            DropReason::Duplicate => {} // counted in dup_full
            DropReason::Paws => d.paws += 1,
            DropReason::MissingTimestamp => d.missing_timestamp += 1,
            DropReason::BadAck => d.bad_ack += 1,
            DropReason::BadRst => d.bad_rst += 1,
            DropReason::Syn => d.syn += 1,
            DropReason::ReassemblyFull => d.reassembly_full += 1,
            DropReason::AfterClose => d.after_close += 1,
        }
    }
}
