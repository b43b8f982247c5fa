//! Receive side: segment validation (RFC 9293, RFC 5961, RFC 7323), in-order delivery,
//! reassembly, the peer's FIN, the receive window and ACK scheduling.

use std::time::{Duration, Instant};

use mpa::seq::SeqNumber;
use tracing::{debug, trace};

use super::*;

impl<S: SendSource> Connection<S> {
    /// Processes one segment of this connection (the caller matched the 4-tuple and verified
    /// the checksum). Never panics, whatever the segment.
    pub fn handle_segment(
        &mut self,
        now: Instant,
        repr: &TcpRepr,
        payload: &[u8],
    ) -> SegmentOutcome {
        self.handle_segment_placing(now, repr, payload, &mut |_, _, _| {})
    }

    /// As [`Connection::handle_segment`]; before out-of-order octets go into the reassembly
    /// store, `place` sees them (their sequence number and octets) and may consume parts of
    /// them itself (marker-guided placement, docs/architecture.md): the ranges it reports in
    /// [`PlacedSpans`] count as received (for ACKs and SACK) but are not copied; when they
    /// become in order, [`Connection::drain_reassembled`] hands stale octets for them, which
    /// the caller skips.
    pub(crate) fn handle_segment_placing(
        &mut self,
        now: Instant,
        repr: &TcpRepr,
        payload: &[u8],
        place: &mut dyn FnMut(SeqNumber, &[u8], &mut PlacedSpans<'_>),
    ) -> SegmentOutcome {
        let out = self.handle_segment_inner(now, repr, Text::Octets(payload), place);
        self.settle_budget(0);
        out
    }

    pub(super) fn handle_segment_inner(
        &mut self,
        now: Instant,
        repr: &TcpRepr,
        payload: Text<'_>,
        place: &mut dyn FnMut(SeqNumber, &[u8], &mut PlacedSpans<'_>),
    ) -> SegmentOutcome {
        self.now = now;
        // The previous segment's own ACK, if it is owed one, is frozen before this one
        // changes the state — unless one ACK can report both (`ooo_ack_every`): this one
        // continues the previous one's SACK block, or (with SACK, no D-SACK owed) it brings
        // new octets and every range changed since the last ACK, its own included, still
        // fits in one ACK's SACK blocks. Every ACK owed within one RX burst leaves at the same
        // moment (after the burst), so sharing loses no timing, only ACKs — and each ACK costs
        // the sender's SACK processing and, on veth, the worker's TX syscall.
        let seq0 = repr.seq_number;
        let continues = !payload.is_empty()
            && self.ooo_shared + 1 < self.cfg.ooo_ack_every
            && (self.ooo_owed_end == Some(seq0)
                || (self.ack_each
                    && self.sack_ok
                    && self.dsack.is_none()
                    && seq0 >= self.rcv_nxt
                    && self.store.blocks_for_changes(
                        self.rcv_nxt,
                        &self.changed[..self.changed_len],
                        seq0,
                        payload.len(),
                    ) <= self.max_sack_blocks));
        if continues {
            self.ooo_shared += 1;
            self.stats.acks_shared += 1;
        } else {
            self.freeze_ack();
        }
        self.sharing_ack = continues;
        self.ooo_owed_end = None;
        self.stats.segs_in += u64::from(payload.segments());
        self.stats.octets_in += payload.len() as u64;
        let flags = repr.flags;
        let seq = repr.seq_number;
        let seg_len = repr.segment_len(payload.len());

        if self.state == State::Closed {
            // RFC 9293 §3.10.7.1 (CLOSED): a RST is discarded; anything else is answered with
            // a RST: <SEQ=SEG.ACK><CTL=RST>, or <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>.
            if !flags.rst() {
                self.rst_pending = Some(match repr.ack_number {
                    Some(ack) => (ack, None),
                    None => (SeqNumber(0), Some(seq + seg_len)),
                });
            }
            return self.drop(DropReason::AfterClose);
        }

        // RFC 7323 §5.3 R1 (PAWS) and §3.2, before the sequence check. RSTs are exempt
        // (RFC 7323 §5.2: a RST is acceptable regardless of its timestamp).
        let ts_opt = repr.options.timestamps;
        if self.ts.is_some() && !flags.rst() {
            match ts_opt {
                // RFC 7323 §3.2: once negotiated, a non-RST segment without TSopt SHOULD be
                // silently dropped.
                None if self.cfg.require_timestamps => {
                    return self.drop(DropReason::MissingTimestamp);
                }
                Some(t) if self.paws_rejects(t.tsval, now) => {
                    // R1: not acceptable: send an ACK (RFC 9293 §3.10.7.4), rate-limited
                    // when the segment has no data, and drop.
                    self.invalid_ack(now, payload.is_empty() && !flags.fin());
                    trace!(
                        tsval = t.tsval,
                        ts_recent = self.ts_recent,
                        "tcp: PAWS drop"
                    );
                    return self.drop(DropReason::Paws);
                }
                _ => {}
            }
        }

        // RFC 9293 §3.10.7.4 first: sequence number acceptability.
        let mut refuse_text = false;
        if !self.acceptable(seq, seg_len, flags, payload.is_empty()) {
            if flags.rst() {
                // RFC 5961 §3.2 (1): a RST outside the window is silently dropped.
                return self.drop(DropReason::BadRst);
            }
            if flags.syn() {
                // RFC 5961 §4.2: a SYN gets a challenge ACK "irrespective of the sequence
                // number", under the same limit as every challenge ACK (§7), or a flood of
                // out-of-window SYNs would draw an ACK each.
                self.challenge_ack(now);
                return self.drop(DropReason::Syn);
            }
            // RFC 9293 §3.10.7.4: <SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>, drop; rate-limited
            // for segments without data or FIN.
            self.invalid_ack(now, seg_len == 0);
            if seq == self.rcv_nxt && self.rcv_wnd() == 0 {
                // Zero window, segment at RCV.NXT: its text is refused, but "special
                // allowance should be made to accept valid ACKs" (same section), so its
                // control and ACK fields are still processed, as Linux does.
                refuse_text = true;
            } else {
                if flags.fin() && self.state == State::TimeWait {
                    // Eighth: a retransmitted FIN restarts TIME-WAIT.
                    self.timers.set(Timer::TimeWait, now + self.cfg.time_wait);
                }
                if seg_len > 0 && seq + seg_len <= self.rcv_nxt {
                    self.stats.dup_full += 1;
                    if !payload.is_empty() {
                        // RFC 2883: report the duplicate, in its own ACK.
                        self.dsack = Some((seq, seq + payload.len()));
                        self.ack_each = true;
                    }
                    return self.drop(DropReason::Duplicate);
                }
                return self.drop(DropReason::OutOfWindow);
            }
        }

        // Second: RST (RFC 5961 §3.2).
        if flags.rst() {
            if seq == self.rcv_nxt {
                // (2) exactly RCV.NXT: reset.
                self.stats.rst_accepted += 1;
                if self.state == State::TimeWait {
                    self.enter_closed(None);
                } else {
                    debug!(local = self.local_port, "tcp: reset by peer");
                    self.enter_closed(Some(TcpError::Reset));
                }
            } else {
                // (3) in the window but not exact: challenge ACK.
                self.challenge_ack(now);
                return self.drop(DropReason::BadRst);
            }
            return SegmentOutcome::default();
        }

        // Fourth: SYN in a synchronized state: challenge ACK, drop (RFC 5961 §4.2,
        // RFC 9293 §3.10.7.4).
        if flags.syn() {
            self.challenge_ack(now);
            return self.drop(DropReason::Syn);
        }

        // Fifth: ACK. RFC 9293 §3.10.7.4: if the ACK bit is off, drop the segment.
        let Some(ack) = repr.ack_number else {
            return self.drop(DropReason::BadAck);
        };
        // RFC 5961 §5.2: acceptable iff (SND.UNA - MAX.SND.WND) <= SEG.ACK <= SND.NXT; else
        // send an ACK and drop. (SND.NXT here is the highest sent, SND.MAX.)
        if ack > self.snd_max || ack < self.snd_una + self.max_snd_wnd.wrapping_neg() {
            self.challenge_ack(now);
            return self.drop(DropReason::BadAck);
        }

        // Acceptable in every respect: the peer is alive (keepalive; Linux stamps
        // `rcv_tstamp` at the same point, in tcp_ack).
        self.peer_heard(now);

        // RFC 7323 §4.3 / §5.3 R3: TS.Recent <- SEG.TSval if SEG.TSval >= TS.Recent and
        // SEG.SEQ <= Last.ACK.sent.
        if let (Some(t), Some(_)) = (ts_opt, self.ts) {
            let newer = !self.ts_recent_valid || (t.tsval.wrapping_sub(self.ts_recent) as i32) >= 0;
            if newer && seq <= self.last_ack_sent {
                self.ts_recent = t.tsval;
                self.ts_recent_valid = true;
                self.ts_recent_at = now;
            }
        }

        self.process_ack(now, repr, ack, payload.len());
        if self.state == State::Closed {
            return SegmentOutcome::default();
        }
        if refuse_text {
            return self.drop(DropReason::OutOfWindow);
        }

        // Seventh: segment text; eighth: FIN.
        let out = self.process_data(now, seq, flags, payload, place);
        self.check_peer_fin(now);
        out
    }

    pub(super) fn drop(&mut self, r: DropReason) -> SegmentOutcome {
        self.stats.count_drop(r);
        SegmentOutcome {
            dropped: Some(r),
            ..SegmentOutcome::default()
        }
    }

    /// RFC 7323 §5.3 R1: TSval older than a valid TS.Recent.
    pub(super) fn paws_rejects(&mut self, tsval: u32, now: Instant) -> bool {
        if !self.ts_recent_valid {
            return false;
        }
        // RFC 7323 §5.5: after 24 days idle TS.Recent is no longer valid.
        if now.saturating_duration_since(self.ts_recent_at) > TS_RECENT_MAX_AGE {
            self.ts_recent_valid = false;
            return false;
        }
        (tsval.wrapping_sub(self.ts_recent) as i32) < 0
    }

    /// RFC 9293 §3.10.7.4, the four cases of the acceptability test, against the window we
    /// advertised.
    pub(super) fn acceptable(
        &self,
        seq: SeqNumber,
        seg_len: usize,
        flags: TcpFlags,
        no_data: bool,
    ) -> bool {
        let nxt = self.rcv_nxt;
        let wnd = self.rcv_wnd();
        let in_wnd = |s: SeqNumber| s.distance_from(nxt) < wnd;
        match (seg_len, wnd) {
            (0, 0) => seq == nxt,
            (0, _) => in_wnd(seq),
            // A bare FIN at RCV.NXT is taken even with a zero window, as Linux does (it
            // costs no buffer); anything else is not acceptable.
            (_, 0) => seg_len == 1 && flags.fin() && no_data && seq == nxt,
            (len, _) => in_wnd(seq) || in_wnd(seq + (len - 1)),
        }
    }

    /// The ACK owed to a segment that failed the sequence check or PAWS: always for one that
    /// carries data (`limited` false), at most once per `invalid_ack_interval` otherwise.
    pub(super) fn invalid_ack(&mut self, now: Instant, limited: bool) {
        if limited {
            if let Some(t) = self.last_invalid_ack {
                if now.saturating_duration_since(t) < self.cfg.invalid_ack_interval {
                    self.stats.invalid_acks_suppressed += 1;
                    return;
                }
            }
            self.last_invalid_ack = Some(now);
        }
        self.ack_now = true;
    }

    pub(super) fn challenge_ack(&mut self, now: Instant) {
        // One ACK per burst answers every challenge owed in it: those after the first share
        // it and neither use the rate limit nor count as sent (the counter counts ACKs that
        // leave, in the transmit paths).
        if self.challenge_owed {
            self.stats.challenge_acks_merged += 1;
            return;
        }
        // RFC 5961 §7: rate-limit challenge ACKs.
        let (start, count) = &mut self.challenge_window;
        if now.saturating_duration_since(*start) >= Duration::from_secs(1) {
            *start = now;
            *count = 0;
        }
        if *count < self.cfg.challenge_ack_limit {
            *count += 1;
            self.ack_now = true;
            self.challenge_owed = true;
        } else {
            self.stats.challenge_acks_suppressed += 1;
        }
    }

    /// Bookkeeping of every segment that carries our current ACK: an owed challenge ACK
    /// has now been sent.
    pub(super) fn challenge_answered(&mut self) {
        if self.challenge_owed {
            self.challenge_owed = false;
            self.stats.challenge_acks += 1;
        }
    }

    pub(super) fn process_data(
        &mut self,
        now: Instant,
        seq: SeqNumber,
        flags: TcpFlags,
        payload: Text<'_>,
        place: &mut dyn FnMut(SeqNumber, &[u8], &mut PlacedSpans<'_>),
    ) -> SegmentOutcome {
        let mut out = SegmentOutcome::default();
        if payload.is_empty() && !flags.fin() {
            return out;
        }
        if !matches!(
            self.state,
            State::Established | State::FinWait1 | State::FinWait2
        ) {
            // RFC 9293 §3.10.7.4 seventh: CLOSE-WAIT, CLOSING, LAST-ACK, TIME-WAIT: the peer
            // already sent FIN, ignore the text. Eighth: a FIN again means our ACK was lost:
            // ACK it; in TIME-WAIT restart the timer.
            if flags.fin() {
                self.ack_now = true;
                if self.state == State::TimeWait {
                    self.timers.set(Timer::TimeWait, now + self.cfg.time_wait);
                }
            }
            if !payload.is_empty() {
                return self.drop(DropReason::AfterClose);
            }
            return out;
        }

        // Trim octets already received (acceptability guarantees some of the segment is new
        // or it is a bare FIN).
        let mut skip = 0usize;
        if seq < self.rcv_nxt {
            skip = (self.rcv_nxt.distance_from(seq) as usize).min(payload.len());
        }
        let start = seq + skip;
        let mut len = payload.len() - skip;
        let mut fin = flags.fin();
        // RFC 9293 §3.10.7.4: trim to the window; a FIN beyond it is not taken. Out-of-order
        // octets are also bounded by the store's reach.
        let room_edge = if start == self.rcv_nxt {
            self.adv_edge
        } else {
            let reach_edge = self.rcv_nxt + self.store.span();
            if reach_edge < self.adv_edge {
                reach_edge
            } else {
                self.adv_edge
            }
        };
        let room = if room_edge > start {
            room_edge.distance_from(start) as usize
        } else {
            0
        };
        if len > room {
            len = room;
            fin = false;
        }
        if self.peer_fin.is_some_and(|f| start + len > f) {
            // Data past the FIN the peer already sent: ignore what lies beyond it.
            let f = self.peer_fin.unwrap_or(start);
            len = if f > start {
                f.distance_from(start) as usize
            } else {
                0
            };
        }
        self.rcv_mss = self.rcv_mss.max(len.min(payload.largest()));

        if start == self.rcv_nxt {
            if len > 0 {
                if skip > 0 {
                    self.stats.dup_partial += 1;
                    // RFC 2883: the old part is a duplicate (as Linux reports it).
                    self.dsack = Some((seq, start));
                    self.ack_each = true;
                }
                let segments = payload.segments();
                self.stats.in_order_segs += u64::from(segments);
                out.in_order = skip..skip + len;
                let had_ooo = !self.store.is_empty();
                self.rcv_nxt = self.rcv_nxt + len;
                self.store.advance(self.rcv_nxt, len);
                self.delivered(len);
                if had_ooo {
                    // RFC 5681 §4.2: ACK at once a segment that fills (part of) a gap.
                    self.ack_each = true;
                } else {
                    // Segments taken as one count one by one: the first that leaves fewer
                    // than `ack_every_segments` unacknowledged starts the delayed-ACK timer.
                    let first = self.segs_unacked + 1;
                    self.segs_unacked += segments;
                    if first < self.cfg.ack_every_segments && !self.timers.is_set(Timer::DelayedAck)
                    {
                        // RFC 9293 §3.8.6.3: delay under 0.5 s.
                        self.timers.set(Timer::DelayedAck, now + self.cfg.ack_delay);
                    }
                    if self.segs_unacked >= self.cfg.ack_every_segments {
                        // RFC 5681 §4.2: an ACK for at least every second full-sized segment.
                        self.ack_now = true;
                    }
                }
            }
            out.reassembled = self.store.readable(self.rcv_nxt);
        } else if len > 0 {
            // Out of order: the caller may place parts itself; the rest is copied into the
            // store. RFC 5681 §4.2: ACK at once, this segment's own ACK.
            if !self.ack_each {
                self.ooo_shared = 0;
            }
            self.ack_each = true;
            self.ooo_owed_end = Some(start + len);
            let Text::Octets(octets) = payload else {
                // Unreachable: only a segment starting at or before RCV.NXT comes without
                // its octets (`handle_segment_in_order`), and what is left of it starts at
                // RCV.NXT. Dropped rather than stored as octets it does not have.
                debug_assert!(false, "out-of-order segment without its octets");
                return self.drop(DropReason::OutOfWindow);
            };
            let data = &octets[skip..skip + len];
            let mut spans = PlacedSpans::default();
            if self.rcv_nxt + self.store.span() > start {
                let mut shown = PlacedSpans::with_store(&self.store, self.rcv_nxt);
                place(start, data, &mut shown);
                spans = shown.detach();
                // Stored octets the caller consumed with this segment's (an FPDU gathered
                // from both) no longer count against the store.
                for &(s, e) in spans.stored_spans() {
                    if self.store.mark_placed(self.rcv_nxt, s, e) {
                        self.stats.octets_placed_from_store += u64::from(e.distance_from(s));
                    }
                }
            }
            let pruned = self.store.pruned();
            // The octets it may add to the store come from the datapath's memory budget
            // first (`crate::budget`); without room the segment goes, as if the store were
            // full.
            let reserved = match &self.budget {
                None => Some(0),
                Some(b) if b.try_charge(len as u64) => Some(len as u64),
                Some(b) => {
                    b.count_dropped_segment();
                    None
                }
            };
            let inserted = match reserved {
                Some(_) => self
                    .store
                    .insert_except(self.rcv_nxt, start, data, spans.as_slice()),
                None => Insert::Full,
            };
            self.settle_budget(reserved.unwrap_or(0));
            match inserted {
                Insert::Stored { new, dup } => {
                    self.stats.ooo_segs += 1;
                    // One hint per distinct range (sharing stops before more ranges
                    // changed than one ACK reports, so they fit).
                    if !self.store.same_range(
                        self.rcv_nxt,
                        start,
                        &self.changed[..self.changed_len],
                    ) && self.changed_len < self.changed.len()
                    {
                        self.changed[self.changed_len] = start;
                        self.changed_len += 1;
                    }
                    self.stats.store_high_water =
                        self.stats.store_high_water.max(self.store.stored() as u64);
                    self.stats.ooo_ranges_high_water = self
                        .stats
                        .ooo_ranges_high_water
                        .max(self.store.range_count() as u64);
                    if new < len || skip > 0 {
                        self.stats.dup_partial += 1;
                    }
                    if skip > 0 {
                        self.dsack = Some((seq, start));
                    } else if dup.is_some() {
                        self.dsack = dup;
                    }
                }
                Insert::Duplicate => {
                    if self.sharing_ack {
                        // It was to share the previous segment's ACK, but a duplicate gets
                        // its own (D-SACK): the previous one goes alone (nothing changed).
                        self.freeze_ack();
                        self.stats.acks_shared -= 1;
                        self.ack_each = true;
                    }
                    self.ooo_owed_end = None;
                    self.stats.dup_full += 1;
                    self.dsack = Some((seq, start + len));
                    out.dropped = Some(DropReason::Duplicate);
                }
                Insert::Full => {
                    fin = false;
                    self.stats.count_drop(DropReason::ReassemblyFull);
                    out.dropped = Some(DropReason::ReassemblyFull);
                    trace!(
                        stored = self.store.stored(),
                        "tcp: reassembly full, dropped"
                    );
                }
            }
            let now_pruned = self.store.pruned();
            self.stats.ooo_pruned_ranges += now_pruned.0 - pruned.0;
            self.stats.ooo_pruned_octets += now_pruned.1 - pruned.1;
        } else if !fin {
            self.ack_now = true;
        }
        if fin {
            let f = start + len;
            if self.peer_fin.is_none() {
                self.peer_fin = Some(f);
            }
            self.ack_now = true;
        }
        out
    }

    pub(super) fn delivered(&mut self, n: usize) {
        self.stats.octets_delivered += n as u64;
        #[cfg(test)]
        if self.cfg.manual_release {
            self.unreleased += n;
        }
    }

    /// Hands the octets that became in order in the reassembly store to `f`, in order (one
    /// or two slices per contiguous run), and returns how many. Call it after consuming the
    /// in-order range of the segment that filled the hole. Uses the time of the latest input.
    pub fn drain_reassembled(&mut self, mut f: impl FnMut(&[u8])) -> usize {
        let mut total = 0;
        loop {
            let n = self.store.drain(self.rcv_nxt, &mut f);
            if n == 0 {
                break;
            }
            self.rcv_nxt = self.rcv_nxt + n;
            total += n;
        }
        if total > 0 {
            self.delivered(total);
            self.stats.octets_reassembled += total as u64;
            self.ack_each = true;
            self.check_peer_fin(self.now);
        }
        self.settle_budget(0);
        total
    }

    /// Brings the budget's charge to the octets the store holds now, `reserved` of which
    /// were charged ahead of an insert (they are covered; only the rest is given back).
    pub(super) fn settle_budget(&mut self, reserved: u64) {
        let Some(b) = &self.budget else { return };
        let held = self.store.stored() as u64;
        let charged = self.budget_held + reserved;
        if held < charged {
            b.release(charged - held);
        } else if held > charged {
            // Not reached: an insert copies at most the octets reserved for it.
            let _ = b.try_charge(held - charged);
        }
        self.budget_held = held;
    }

    /// The peer's FIN is processed once every octet before it was delivered (RFC 9293
    /// §3.10.7.4 eighth).
    pub(super) fn check_peer_fin(&mut self, now: Instant) {
        let Some(f) = self.peer_fin else { return };
        if self.peer_fin_done || f != self.rcv_nxt {
            return;
        }
        self.peer_fin_done = true;
        self.rcv_nxt = self.rcv_nxt + 1u32;
        self.store.advance(self.rcv_nxt, 1);
        if self.adv_edge < self.rcv_nxt {
            self.adv_edge = self.rcv_nxt;
        }
        self.ack_now = true;
        self.events.push_back(Event::PeerClosed);
        debug!(local = self.local_port, state = ?self.state, "tcp: peer FIN");
        match self.state {
            State::Established => self.state = State::CloseWait,
            State::FinWait1 => {
                if self.our_fin.is_some_and(|fin| self.snd_una > fin) {
                    self.enter_time_wait(now);
                } else {
                    self.state = State::Closing;
                }
            }
            State::FinWait2 => self.enter_time_wait(now),
            _ => {}
        }
    }

    /// Releases `n` delivered octets back to the window (with
    /// [`TcpConfig::manual_release`]; a no-op otherwise). Schedules a window update when the
    /// window opens from (near) zero.
    #[cfg(test)]
    pub(crate) fn release(&mut self, n: usize) {
        if !self.cfg.manual_release {
            return;
        }
        self.unreleased -= n.min(self.unreleased);
        let cur = self.rcv_wnd() as usize;
        let want = self.free_window();
        let thresh = self.sws_threshold();
        // RFC 9293 §3.8.6.2.2 with Linux's rule: tell the peer when the window grew by at
        // least the SWS threshold and either was zero or at least doubles.
        if want >= cur + thresh && (cur == 0 || want >= 2 * cur) && !self.window_update {
            self.window_update = true;
            self.ack_now = true;
        }
    }

    /// Called by the poll loop after a burst of received segments: sends the pending ACK
    /// (one per flow per burst for in-order bulk; the ACKs owed to individual segments were
    /// queued as they came).
    pub fn end_of_burst(&mut self, now: Instant) {
        self.now = now;
        if self.segs_unacked > 0 || self.timers.is_set(Timer::DelayedAck) {
            self.ack_now = true;
        }
    }

    /// Freezes the ACK the latest segment is owed (see the module documentation); when the
    /// queue is full it stays owed and merges into the next.
    pub(super) fn freeze_ack(&mut self) {
        if !self.ack_each || self.state == State::Closed {
            return;
        }
        if self.ack_queue.len() >= self.cfg.ack_queue {
            self.stats.acks_merged += 1;
            return;
        }
        let mut sack = crate::wire::tcp::SackBlocks::new();
        self.sack_now(&mut sack);
        self.ack_queue.push_back(AckSnap {
            ack: self.rcv_nxt,
            sack,
            dsack: self.dsack.is_some() && !sack.is_empty(),
        });
        self.stats.acks_queued += 1;
        // That ACK acknowledges everything so far (a held one too).
        self.ack_each = false;
        self.ooo_shared = 0;
        self.changed_len = 0;
        self.ack_now = false;
        self.ack_held = false;
        self.dsack = None;
        self.segs_unacked = 0;
        self.timers.clear(Timer::DelayedAck);
    }

    /// The SACK blocks for an ACK sent now (pending D-SACK first).
    pub(super) fn sack_now(&self, out: &mut crate::wire::tcp::SackBlocks) {
        out.clear();
        if self.sack_ok && (!self.store.is_empty() || self.dsack.is_some()) {
            self.store
                .sack_blocks(self.rcv_nxt, self.max_sack_blocks, self.dsack, out);
        }
    }

    /// What the buffers can take: `rcv_buf` less delivered-but-unreleased octets, at most the
    /// store's octet limit plus the octets placed by the caller (they need no store). A
    /// sender that cannot be placed meets a window of the limit and so never a full store;
    /// where the caller places what comes, the placed octets do not count and the window
    /// opens up to `rcv_buf` while a hole holds RCV.NXT back (a segment there that turns out
    /// not placeable is refused and retransmitted, as Linux prunes its out-of-order queue).
    ///
    /// Under memory pressure the store can only grow by what the datapath's budget has left
    /// (`crate::budget`), but never below [`PRESSURE_WINDOW`]: the window offered then
    /// shrinks as data arrives instead of inviting segments that would be dropped. The right
    /// edge never moves back (`advertise`).
    pub(super) fn free_window(&self) -> usize {
        let max_field = 65535usize << self.rcv_wscale;
        let copyable = match &self.budget {
            None => self.store.limit(),
            Some(b) => {
                let room = usize::try_from(b.available()).unwrap_or(usize::MAX);
                self.store.limit().min(
                    self.store
                        .stored()
                        .saturating_add(room)
                        .max(PRESSURE_WINDOW),
                )
            }
        };
        let by_store = copyable + self.store.placed();
        self.store
            .span()
            .saturating_sub(self.unreleased)
            .min(by_store)
            .min(max_field)
    }

    pub(super) fn sws_threshold(&self) -> usize {
        (self.store.capacity() / 2).min(self.rcv_mss).max(1)
    }

    /// The window field for an outgoing segment; moves the advertised right edge forward
    /// when worthwhile and never backward (RFC 9293 §3.8.6.2.2 receiver SWS avoidance,
    /// RFC 7323 §2.4).
    pub(super) fn advertise(&mut self) -> u16 {
        if self.adv_edge < self.rcv_nxt {
            self.adv_edge = self.rcv_nxt;
        }
        let ws = u32::from(self.rcv_wscale);
        let cur = self.adv_edge.distance_from(self.rcv_nxt) as usize;
        let want = self.free_window();
        let mut wnd = cur;
        if want > cur
            && (want - cur >= self.sws_threshold()
                || want >= self.store.capacity().min(self.store.limit()))
        {
            // Round down to what the shift can say ...
            wnd = (want >> ws) << ws;
        }
        // ... but never below the edge already advertised: round that up instead.
        let mut field = wnd >> ws;
        if (field << ws) < cur {
            field = cur.div_ceil(1 << ws);
        }
        let field = field.min(65535);
        let edge = self.rcv_nxt + ((field as u32) << ws);
        if edge > self.adv_edge {
            self.adv_edge = edge;
        }
        field as u16
    }
}
