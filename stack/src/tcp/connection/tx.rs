//! Send side: queueing, close and abort, choosing the next segment (recovery holes, new data,
//! FIN, zero-window probes, ACKs) and writing it.

use std::time::{Duration, Instant};

use mpa::seq::SeqNumber;
use tracing::{debug, trace, warn};

use super::*;

/// The most sending time a paced connection saves up while it does not send (see `pace`).
const PACING_CREDIT: Duration = Duration::from_micros(200);

impl Connection<SendBuffer> {
    /// Queues octets to send (bounded by the send buffer); returns how many were taken. Takes
    /// nothing after [`Connection::close`] or once the connection is closing or closed.
    #[cfg(test)]
    pub(crate) fn send(&mut self, data: &[u8]) -> usize {
        if !self.can_send() {
            return 0;
        }
        self.src.push(data)
    }
}

impl<S: SendSource> Connection<S> {
    /// Closes our direction: a FIN follows the queued octets, and is retransmitted until
    /// acknowledged (RFC 9293 §3.10.4).
    pub(crate) fn close(&mut self) {
        match self.state {
            State::Established => self.state = State::FinWait1,
            State::CloseWait => self.state = State::LastAck,
            _ => return,
        }
        self.fin_waits_for_backlog = true;
        self.place_fin();
        debug!(local = self.local_port, state = ?self.state, "tcp: close");
    }

    /// Aborts: one RST goes out with the next `poll_transmit`, the connection closes at once
    /// and reports [`Event::Closed`] (RFC 9293 §3.10.5).
    pub(crate) fn abort(&mut self) {
        if self.state == State::Closed {
            return;
        }
        self.rst_pending = Some((self.snd_nxt, None));
        self.enter_closed(None);
    }

    /// Our FIN's place once every queued octet is in view (a source may hold more than
    /// the sequence space addresses at once: `SendSource::backlog`).
    pub(super) fn place_fin(&mut self) {
        if self.fin_waits_for_backlog && self.src.backlog() == 0 {
            self.fin_waits_for_backlog = false;
            self.our_fin = Some(self.snd_una + self.src.queued());
        }
    }

    pub(super) fn data_end(&self) -> SeqNumber {
        self.snd_una + self.src.queued()
    }

    pub(super) fn payload_room(&self, opts_len: usize, buf_len: usize) -> usize {
        // RFC 6691: the MSS excludes options, so the payload is MSS minus option octets.
        let by_mss = self.snd_mss.saturating_sub(opts_len).max(1);
        let by_buf = buf_len.saturating_sub(HEADER_LEN + opts_len);
        by_mss.min(by_buf)
    }

    /// The length of a segment from `off` within `limit` (at most `room`, what a whole
    /// segment may carry), as the source cuts it. When not even one of the source's units
    /// (an FPDU) fits a whole segment — a buffer or MSS too small for it — the segment is
    /// cut anyway (RFC 5044 Appendix A.1: an MPA-aware TCP may break alignment when the
    /// EMSS shrinks), else the stream would stall.
    pub(super) fn cut_len(&self, off: usize, limit: usize, room: usize) -> usize {
        let n = self.src.segment_len(off, limit);
        if n > 0 || limit == 0 || self.src.segment_len(off, room) > 0 {
            return n;
        }
        self.src.queued().saturating_sub(off).min(limit)
    }

    /// A retransmission from `off` within `limit` (windows and `room`) and up to the next
    /// SACKed range (`sacked`). When that range begins inside the first unit (the peer
    /// SACKed octets we never sent as a segment edge), the whole unit is resent within
    /// `limit`: resending SACKed octets is harmless, a segment that does not start with an
    /// FPDU is not.
    pub(super) fn sack_clamped_len(
        &self,
        off: usize,
        sacked: usize,
        limit: usize,
        room: usize,
    ) -> usize {
        match self.cut_len(off, sacked.min(limit), room) {
            0 if sacked < limit => self.cut_len(off, limit, room),
            n => n,
        }
    }

    /// RFC 6675 §4 NextSeg rules 1 (`lost_only`) and 3: the first un-SACKed octet at or
    /// above HighRxt, below the highest SACKed octet, and lost (rule 1) or not (rule 3).
    pub(super) fn plan_recovery(&mut self, room: usize, lost_only: bool) -> Option<Plan> {
        let mut s = if self.rtx_next > self.snd_una {
            self.rtx_next
        } else {
            self.snd_una
        };
        while let Some(end) = self.scoreboard.sacked_end(s) {
            s = end;
        }
        let limit = if lost_only {
            self.lost_end()
        } else {
            self.scoreboard.highest()?
        };
        if s >= limit {
            return None;
        }
        self.plan_hole(s, room)
    }

    /// The retransmission of the octets from `s` (un-SACKed) up to the next SACKed range.
    pub(super) fn plan_hole(&mut self, s: SeqNumber, room: usize) -> Option<Plan> {
        if s >= self.snd_max {
            return None;
        }
        let data_end = self.data_end();
        let sacked = self
            .scoreboard
            .next_start_after(s)
            .map_or(usize::MAX, |next| next.distance_from(s) as usize);
        let len = if s < data_end {
            let off = s.distance_from(self.snd_una) as usize;
            self.sack_clamped_len(off, sacked, room, room)
        } else {
            0
        };
        let fin = self
            .our_fin
            .is_some_and(|f| s + len == f && f < self.snd_max);
        if len == 0 && !fin {
            return None;
        }
        Some(Plan {
            seq: s,
            len,
            fin,
            retransmission: true,
        })
    }

    /// The next data (or FIN) from SND.NXT, within the windows.
    pub(super) fn plan_send(&mut self, room: usize) -> Option<Plan> {
        let mut s = self.snd_nxt;
        // After a timeout SND.NXT went back: skip what the peer SACKed.
        while s < self.snd_max {
            match self.scoreboard.sacked_end(s) {
                Some(end) => s = end,
                None => break,
            }
        }
        if s > self.snd_nxt {
            self.snd_nxt = s;
        }
        let data_end = self.data_end();
        if s > data_end {
            return None; // only our FIN is beyond the data, and it is sent
        }
        let queued = data_end.distance_from(s) as usize;
        // The peer's window is absolute; the congestion window limits what is in flight.
        let by_rwnd =
            (self.snd_wnd as usize).saturating_sub(s.distance_from(self.snd_una) as usize);
        let mut by_cwnd = self.cc.cwnd().saturating_sub(self.pipe());
        let limited = by_cwnd < room.min(queued) && self.limited_transmit > 0 && s >= self.snd_max;
        if limited {
            by_cwnd = room;
        }
        let usable = by_rwnd.min(by_cwnd);
        let off = s.distance_from(self.snd_una) as usize;
        let limit = usable.min(room);
        let retransmission = s < self.snd_max;
        let sacked = match self.scoreboard.next_start_after(s) {
            Some(next) if retransmission => next.distance_from(s) as usize,
            _ => usize::MAX,
        };
        // The source cuts: whole FPDUs for an aligned one, so a window or cwnd that ends
        // inside the next FPDU sends nothing yet (RFC 5044 §5.1 lists exactly those
        // windows among the ways alignment is lost). `full` is what a whole segment takes.
        let full = self.cut_len(off, room, room);
        // Only the plan right after the persist timer found the window too small may cut.
        let force_cut = std::mem::take(&mut self.force_cut);
        let mut len = if queued == 0 {
            0
        } else if retransmission {
            self.sack_clamped_len(off, sacked, limit, room)
        } else {
            self.cut_len(off, limit, room)
        };
        let nothing_in_flight = self.snd_una == self.snd_max;
        if len == 0 && limit > 0 && force_cut && nothing_in_flight && by_rwnd < full {
            // The peer's window stayed below the next FPDU through a persist interval with
            // nothing in flight: RFC 5044 Appendix A.1 lets a too small receive window break
            // alignment rather than stall (the rest of the FPDU follows, and segments after
            // it start with FPDUs again).
            len = queued.min(limit);
        }
        // RFC 9293 §3.8.6.2.1 sender SWS avoidance (Nagle off: a short segment that empties
        // the queue goes at once).
        let worthwhile = len == full
            || len >= (self.max_snd_wnd as usize) / 2
            || nothing_in_flight
            || retransmission;
        if len > 0 && !worthwhile {
            len = 0;
        }
        // Our FIN rides on the last data segment, or goes alone; it does not need window.
        let fin = self.our_fin.is_some_and(|f| s + len == f);
        if len == 0 && !fin {
            let window_blocks = self.snd_wnd == 0 || (full > 0 && by_rwnd < full);
            if queued > 0 && window_blocks && nothing_in_flight {
                // RFC 9293 §3.8.6.1: probe a zero window (or, for an aligned source, one
                // too small for the next FPDU: see `on_persist`).
                if !self.timers.is_set(Timer::Persist) {
                    self.arm_persist();
                }
            }
            return None;
        }
        if limited && len > 0 {
            self.limited_transmit -= 1;
        }
        Some(Plan {
            seq: s,
            len,
            fin,
            retransmission,
        })
    }

    /// The pacing rate in octets per second: gain × cwnd / SRTT, the gain 2 in slow start
    /// and 1.2 after (Linux's `tcp_pacing_ss_ratio` / `ca_ratio`), so that pacing never
    /// holds the window back while still spreading it over the RTT. `None` when pacing is
    /// off, before any RTT sample, or with an SRTT that rounds to zero (timestamps count in
    /// milliseconds; a sub-millisecond path is not paced).
    pub(crate) fn pacing_rate(&self) -> Option<u64> {
        if !self.cfg.pacing {
            return None;
        }
        let srtt = self.rtt.srtt().filter(|d| !d.is_zero())?;
        let gain = if self.cc.in_slow_start() { 2.0 } else { 1.2 };
        Some(((self.cc.cwnd() as f64 * gain / srtt.as_secs_f64()) as u64).max(1))
    }

    /// The earliest time the next data segment may leave: until then `poll_transmit`
    /// holds data back (ACKs, probes and RSTs are never paced). `None` when pacing holds
    /// nothing back at the latest time passed in. [`Connection::poll_timeout`] includes it
    /// whenever data was held back.
    #[cfg(test)]
    pub(crate) fn next_send_at(&self) -> Option<Instant> {
        (self.pace_next > self.now && self.pacing_rate().is_some()).then_some(self.pace_next)
    }

    /// Pacing: a data segment of `octets` (header included) left at `now`. The next may
    /// leave `octets / rate` later. Unused time is kept as credit for up to
    /// [`PACING_CREDIT`] (at least two segments' time), so a worker that polls every few
    /// tens of microseconds still reaches the rate, and a sender that was idle cannot
    /// burst more than that.
    fn pace(&mut self, now: Instant, octets: usize) {
        let Some(rate) = self.pacing_rate() else {
            return;
        };
        let interval = Duration::from_secs_f64(octets as f64 / rate as f64);
        let credit = PACING_CREDIT.max(interval * 2);
        let floor = now.checked_sub(credit).unwrap_or(now);
        let base = if self.pace_next > floor {
            self.pace_next
        } else {
            floor
        };
        self.pace_next = base + interval;
    }

    pub(super) fn arm_persist(&mut self) {
        let d = self
            .rtt
            .rto()
            .checked_mul(1 << self.persist_backoff.min(16))
            .unwrap_or(self.cfg.rto_max)
            .min(self.cfg.rto_max);
        self.timers.set(Timer::Persist, self.now + d);
    }

    pub(super) fn options(&mut self, now: Instant) -> TcpOptions {
        let mut o = TcpOptions::default();
        if let Some(tsval) = self.tsval(now) {
            // RFC 7323 §3.2: every segment carries TSopt once negotiated; TSecr = TS.Recent.
            o.timestamps = Some(TcpTimestamps {
                tsval,
                tsecr: if self.ts_recent_valid {
                    self.ts_recent
                } else {
                    0
                },
            });
        }
        // RFC 2018 §4: SACK in every ACK while holes exist; first block the most recent
        // (RFC 2883: a pending D-SACK before it).
        self.sack_now(&mut o.sack);
        o
    }

    /// Holds (or stops holding) the pure ACK owed to in-order data: while held,
    /// [`Connection::poll_transmit`] builds it only inside a data segment, so that a reply
    /// posted soon after a message carries its ACK instead of following one. The caller that
    /// holds must release and poll again before long ([`Connection::ack_owed`] says whether
    /// an ACK still waits); ACKs owed to out-of-order, duplicate or hole-filling segments,
    /// and window updates, are never held.
    pub fn set_hold_pure_ack(&mut self, hold: bool) {
        self.hold_pure_ack = hold;
    }

    /// Whether an ACK is owed and not sent yet.
    pub fn ack_owed(&self) -> bool {
        self.ack_now || self.ack_each || !self.ack_queue.is_empty()
    }

    /// Writes the next segment to send into `buf` (TCP header, then payload; checksum zero)
    /// and describes it; `None` when there is nothing to send. Call until `None` after every
    /// input. `buf` should hold at least 60 octets plus an MSS; a smaller one gets smaller
    /// segments, one below 60 octets may get nothing.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.now = now;
        if let Some((seq, ack)) = self.rst_pending {
            let repr = TcpRepr {
                src_port: self.local_port,
                dst_port: self.remote_port,
                seq_number: seq,
                ack_number: ack,
                flags: TcpFlags::RST,
                window_len: 0,
                urgent_at: 0,
                options: TcpOptions::default(),
            };
            let n = repr.emit(&mut TcpPacket::new_unchecked(&mut *buf)).ok()?;
            self.rst_pending = None;
            self.stats.segs_out += 1;
            return Some(Transmit {
                repr,
                header_len: n,
                payload_len: 0,
            });
        }
        if self.state == State::Closed {
            return None;
        }
        if let Some(snap) = self.ack_queue.pop_front() {
            // An ACK frozen for an earlier segment goes first, as if sent then.
            let mut opts = self.options(now);
            opts.sack = snap.sack;
            return self.transmit_frozen(buf, opts, snap);
        }
        let mut opts = self.options(now);
        // An aligned source's segments are sized from the options every segment carries
        // (RFC 5044's EMSS); SACK blocks that do not fit beside the data are left to the
        // pure ACKs (below).
        let sack_len = if S::ALIGNED && !opts.sack.is_empty() {
            4 + 8 * opts.sack.len()
        } else {
            0
        };
        let room = self.payload_room(opts.emitted_len() - sack_len, buf.len());
        if sack_len > 0 && (self.ack_each || self.dsack.is_some()) {
            // The ACK an out-of-order or duplicate segment is owed would lose SACK blocks
            // beside a full aligned segment (RFC 2018 §4: report the most recent): it goes
            // alone, first; the data follows in the next call.
            return self.transmit(now, buf, opts, self.snd_nxt, 0, false, None);
        }

        let mut plan = None;
        // Pacing holds data (new or retransmitted) back; ACKs and probes never wait.
        let paced = self.pace_next > now && self.pacing_rate().is_some();
        self.pace_wait = false;
        if self.state == State::TimeWait {
        } else if paced {
            let fin_unsent = self.our_fin.is_some_and(|f| self.snd_max <= f);
            if self.rtx_una_now
                || self.recovery.is_some()
                || self.snd_nxt < self.data_end()
                || fin_unsent
            {
                self.pace_wait = true;
                self.stats.pacing_waits += 1;
            }
        } else if self.recovery.is_some() {
            // RFC 6675 §5 step 4.2 (and a lost retransmission or RFC 6582 partial ACK): the
            // segment at SND.UNA first, then step (C): while cwnd − pipe ≥ 1 SMSS, NextSeg
            // rule 1 (lost holes), rule 2 (new data), rule 3 (other holes below the
            // highest SACK).
            if std::mem::take(&mut self.rtx_una_now) {
                let mut s = self.snd_una;
                while let Some(end) = self.scoreboard.sacked_end(s) {
                    s = end;
                }
                plan = self.plan_hole(s, room);
            }
            if plan.is_none() && self.pipe() + self.snd_mss <= self.cc.cwnd() {
                plan = self.plan_recovery(room, true);
                if plan.is_none() {
                    plan = self.plan_send(room);
                }
                if plan.is_none() {
                    plan = self.plan_recovery(room, false);
                }
            }
        } else {
            plan = self.plan_send(room);
        }
        if let Some(p) = plan {
            if S::ALIGNED {
                // Keep the SACK blocks (most recent first) that fit beside the payload.
                let keep = opts.sack.len();
                let without = opts.emitted_len() - if keep > 0 { 4 + 8 * keep } else { 0 };
                let with = |k: usize| without + if k > 0 { 4 + 8 * k } else { 0 };
                let mut k = keep;
                while k > 0 && self.payload_room(with(k), buf.len()) < p.len {
                    k -= 1;
                }
                if k < keep {
                    let blocks = opts.sack;
                    opts.sack.clear();
                    for b in &blocks.as_slice()[..k] {
                        opts.sack.push(*b);
                    }
                    self.stats.sack_blocks_trimmed += (keep - k) as u64;
                }
            }
            return self.transmit(now, buf, opts, p.seq, p.len, p.fin, Some(p));
        }
        if self.probe_pending || self.keepalive_pending {
            // A zero-window or keepalive probe: an old sequence number (SND.UNA - 1)
            // elicits an ACK with the window (as Linux does), without committing data beyond
            // the window (RFC 1122 §4.2.3.6 allows a probe without data).
            if self.probe_pending {
                self.stats.window_probes += 1;
            } else {
                self.stats.keepalive_probes += 1;
            }
            self.probe_pending = false;
            self.keepalive_pending = false;
            let seq = self.snd_una + u32::MAX;
            return self.transmit(now, buf, opts, seq, 0, false, None);
        }
        if self.ack_now || self.ack_each {
            if self.hold_pure_ack && !self.ack_each && !self.window_update {
                // Left for the data that follows (or for the caller to release).
                self.ack_held = true;
                return None;
            }
            if self.window_update {
                self.stats.window_updates += 1;
            }
            return self.transmit(now, buf, opts, self.snd_nxt, 0, false, None);
        }
        None
    }

    /// Writes a pure ACK frozen for an earlier segment: its acknowledgment number and SACK
    /// blocks, the current timestamps, and the advertised right edge expressed from its
    /// acknowledgment number (rounded up: the edge never appears to retract).
    fn transmit_frozen(
        &mut self,
        buf: &mut [u8],
        options: TcpOptions,
        snap: AckSnap,
    ) -> Option<Transmit> {
        self.advertise();
        let ws = u32::from(self.rcv_wscale);
        let wnd = if self.adv_edge > snap.ack {
            self.adv_edge.distance_from(snap.ack) as usize
        } else {
            0
        };
        let window_len = wnd.div_ceil(1 << ws).min(65535) as u16;
        // Rounded up, this ACK's edge may lie past the one advertised (by less than one
        // scale unit): it is advertised now, so later ACKs must not fall back behind it.
        let edge = snap.ack + (u32::from(window_len) << ws);
        if edge > self.adv_edge {
            self.adv_edge = edge;
        }
        let repr = TcpRepr {
            src_port: self.local_port,
            dst_port: self.remote_port,
            seq_number: self.snd_nxt,
            ack_number: Some(snap.ack),
            flags: TcpFlags::empty(),
            window_len,
            urgent_at: 0,
            options,
        };
        let header_len = match repr.emit(&mut TcpPacket::new_unchecked(&mut *buf)) {
            Ok(n) => n,
            Err(e) => {
                warn!(error = %e, have = buf.len(), "tcp: transmit buffer too small");
                return None;
            }
        };
        if snap.ack > self.last_ack_sent {
            self.last_ack_sent = snap.ack;
        }
        self.stats.segs_out += 1;
        self.stats.acks_sent += 1;
        self.stats.sack_blocks_sent += repr.options.sack.len() as u64;
        self.stats.dsacks_sent += u64::from(snap.dsack);
        self.challenge_answered();
        trace!(ack = %snap.ack, wnd = window_len, sack = ?repr.options.sack, "tcp: tx frozen ack");
        Some(Transmit {
            repr,
            header_len,
            payload_len: 0,
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        options: TcpOptions,
        seq: SeqNumber,
        len: usize,
        fin: bool,
        plan: Option<Plan>,
    ) -> Option<Transmit> {
        let window_len = self.advertise();
        let mut flags = TcpFlags::empty();
        if fin {
            flags = flags | TcpFlags::FIN;
        }
        if len > 0 {
            flags = flags | TcpFlags::PSH;
        }
        let repr = TcpRepr {
            src_port: self.local_port,
            dst_port: self.remote_port,
            seq_number: seq,
            ack_number: Some(self.rcv_nxt),
            flags,
            window_len,
            urgent_at: 0,
            options,
        };
        let header_len = match repr.emit(&mut TcpPacket::new_unchecked(&mut *buf)) {
            Ok(n) => n,
            Err(e) => {
                warn!(error = %e, have = buf.len(), "tcp: transmit buffer too small");
                return None;
            }
        };
        if len > 0 {
            let off = seq.distance_from(self.snd_una) as usize;
            if S::ALIGNED && self.src.segment_len(off, len) != len {
                self.stats.unaligned_segments += 1;
            }
            if let Err(e) = self.src.fill(off, &mut buf[header_len..header_len + len]) {
                warn!(local = self.local_port, error = %e, "tcp: send source failed");
                self.fail_with_rst(TcpError::Source(e));
                // The RST goes out in this buffer instead.
                return self.poll_transmit(now, buf);
            }
        }

        // Bookkeeping: this segment carries the current ACK and window.
        if self.dsack.is_some() && !repr.options.sack.is_empty() {
            self.stats.dsacks_sent += 1;
        }
        self.dsack = None;
        self.ack_each = false;
        self.ooo_shared = 0;
        self.changed_len = 0;
        self.ack_now = false;
        self.window_update = false;
        self.segs_unacked = 0;
        self.timers.clear(Timer::DelayedAck);
        self.last_ack_sent = self.rcv_nxt;
        self.stats.segs_out += 1;
        self.stats.octets_out += len as u64;
        self.challenge_answered();
        self.stats.sack_blocks_sent += repr.options.sack.len() as u64;
        if let Some(p) = plan {
            let end = seq + p.len + u32::from(p.fin);
            self.pace(now, header_len + p.len);
            if p.retransmission {
                self.stats.retransmissions += 1;
                self.stats.octets_retransmitted += p.len as u64;
                if self.recovery.is_some() && seq == self.snd_una {
                    self.rtx_una = Some((seq, self.snd_max));
                }
                // Karn: a retransmission invalidates the running sample.
                self.rtt_probe = None;
                if self.recovery.is_some() && end > self.rtx_next {
                    self.rtx_next = end;
                }
            } else if self.rtt_probe.is_none() && self.ts.is_none() {
                self.rtt_probe = Some((end, now));
            }
            if end > self.snd_nxt {
                self.snd_nxt = end;
            }
            if end > self.snd_max {
                self.snd_max = end;
            }
            // RFC 6298 §5.1: start the timer when sending data if it is not running.
            if !self.timers.is_set(Timer::Retransmit) {
                self.timers.set(Timer::Retransmit, now + self.rtt.rto());
            }
        } else {
            self.stats.acks_sent += 1;
        }
        if self.ack_held {
            // The held ACK leaves now: inside data, or on its own once released.
            self.ack_held = false;
            if len > 0 {
                self.stats.acks_carried += 1;
            }
        }
        trace!(seq = %seq, len, fin, ack = %self.rcv_nxt, wnd = window_len, "tcp: tx");
        Some(Transmit {
            repr,
            header_len,
            payload_len: len,
        })
    }
}
