//! Processing the ACK field and SACK blocks of incoming segments: our send side's
//! progress, RTT samples, duplicate ACKs, and entering fast recovery (RFC 5681, 6298, 6675).

use std::time::{Duration, Instant};

use mpa::seq::SeqNumber;
use tracing::debug;

use super::*;

impl<S: SendSource> Connection<S> {
    pub(super) fn process_ack(
        &mut self,
        now: Instant,
        repr: &TcpRepr,
        ack: SeqNumber,
        payload_len: usize,
    ) {
        let new_wnd = u32::from(repr.window_len) << self.snd_wscale;
        let seq = repr.seq_number;
        let advanced = ack > self.snd_una;

        // RFC 2018 §5 / RFC 6675: learn SACKed ranges, each block validated against
        // (SND.UNA, SND.MAX].
        let mut sack_news = false;
        if self.sack_ok {
            let floor = if ack > self.snd_una {
                ack
            } else {
                self.snd_una
            };
            let blocks = repr.options.sack.as_slice();
            // RFC 2883 §4: a first block below the cumulative ACK, or inside the second
            // block, reports a duplicate (counted only; see `TcpStats::dsacks_received`).
            if let Some(d) = blocks.first() {
                let inside_next = blocks
                    .get(1)
                    .is_some_and(|n| n.left <= d.left && d.right <= n.right);
                if d.left < d.right && (d.right <= ack || inside_next) {
                    self.stats.dsacks_received += 1;
                }
            }
            for b in blocks {
                if b.left > floor && b.left < b.right && b.right <= self.snd_max {
                    sack_news |= self.scoreboard.add(b.left, b.right);
                }
            }
        }

        if ack > self.snd_una {
            self.ack_new_data(now, repr, ack);
        } else if ack == self.snd_una
            && payload_len == 0
            && !repr.flags.fin()
            && self.snd_una != self.snd_max
            && new_wnd == self.snd_wnd
        {
            // RFC 5681 §2: a duplicate ACK.
            self.stats.dup_acks_in += 1;
            self.dupacks += 1;
            if self.recovery.is_some() || self.rto_recover.is_some() {
                // In recovery the pipe accounts for what the duplicate reports (`pipe`);
                // after a timeout the go-back resends (RFC 6582 §4.1).
            } else if self.dupacks >= self.dupthresh() {
                // RFC 5681 §3.2: fast retransmit on the third duplicate ACK (fewer with a
                // small flight, RFC 5827 early retransmit).
                self.enter_recovery();
            } else {
                // RFC 3042 limited transmit: a new segment per early duplicate ACK.
                self.limited_transmit += 1;
            }
        }
        // A lost retransmission (as Linux's lost-retransmit detection): the hole at SND.UNA
        // was resent, and data sent after it has been SACKed while the hole stays: resend it
        // now rather than wait for the timeout.
        if let (Some((hole, high)), Some(_), Some(sacked)) =
            (self.rtx_una, self.recovery, self.scoreboard.highest())
        {
            if self.snd_una == hole && sacked > high {
                self.rtx_una = None;
                self.rtx_una_now = true;
                self.stats.lost_retransmits += 1;
            }
        }
        // RFC 6675 §5 step 4: IsLost(HighACK + 1) also starts recovery, before three
        // duplicate ACKs when SACKs show enough above the hole.
        if sack_news
            && self.recovery.is_none()
            && self.rto_recover.is_none()
            && self.snd_una != self.snd_max
            && self.lost_end() > self.snd_una
        {
            self.enter_recovery();
        }

        // RFC 9293 §3.10.7.4: update the send window if SND.WL1 < SEG.SEQ, or SND.WL1 =
        // SEG.SEQ and SND.WL2 =< SEG.ACK; also on any ACK of new data (as Linux does), so a
        // SND.WL1 left 2^31 behind by a long one-way transfer cannot freeze the window.
        self.update_send_window(seq, ack, new_wnd, advanced);
    }

    /// RFC 9293 §3.10.7.4's send window update for a segment's SEQ, ACK and (scaled) window;
    /// `advanced`: its ACK acknowledged new data.
    pub(super) fn update_send_window(
        &mut self,
        seq: SeqNumber,
        ack: SeqNumber,
        new_wnd: u32,
        advanced: bool,
    ) {
        if advanced || self.snd_wl1 < seq || (self.snd_wl1 == seq && self.snd_wl2 <= ack) {
            self.snd_wnd = new_wnd;
            self.snd_wl1 = seq;
            self.snd_wl2 = ack;
            self.max_snd_wnd = self.max_snd_wnd.max(new_wnd);
            if new_wnd > 0 {
                self.persist_probes = 0;
                if self.timers.is_set(Timer::Persist) {
                    self.timers.clear(Timer::Persist);
                    self.persist_backoff = 0;
                }
            }
        }
    }

    pub(super) fn ack_new_data(&mut self, now: Instant, repr: &TcpRepr, ack: SeqNumber) {
        let acked = ack.distance_from(self.snd_una) as usize;
        let flight_before = self.snd_max.distance_from(self.snd_una) as usize;
        // RTT: from the echoed timestamp when on (RFC 7323 §4.1, only for ACKs of new data,
        // §4.2), else Karn's rule: one timed segment, never a retransmitted one (RFC 6298 §3).
        let mut sample = None;
        if let (Some(t), Some(now_ts)) = (repr.options.timestamps, self.tsval(now)) {
            let ms = now_ts.wrapping_sub(t.tsecr);
            if t.tsecr != 0 && (ms as i32) >= 0 && u128::from(ms) <= self.cfg.rto_max.as_millis() {
                sample = Some(Duration::from_millis(u64::from(ms)));
            }
        } else if let Some((end, sent)) = self.rtt_probe {
            if ack >= end {
                sample = Some(now.saturating_duration_since(sent));
                self.rtt_probe = None;
            }
        }
        if let Some(r) = sample {
            self.rtt.sample(r);
            self.stats.rtt_samples += 1;
        }

        self.src.acked(acked.min(self.src.queued()));
        self.rtx_una = None;
        self.snd_una = ack;
        self.place_fin();
        if self.snd_nxt < ack {
            self.snd_nxt = ack;
        }
        if self.rtx_next < ack {
            self.rtx_next = ack;
        }
        self.scoreboard.prune(ack);
        if self.scoreboard.sacked_end(ack).is_some() {
            // The peer SACKed the octet at SND.UNA yet does not acknowledge it: it reneged
            // (RFC 2018 §8). Forget every SACK, as Linux does.
            self.scoreboard.clear();
        }
        self.rto_count = 0;
        self.rtt.reset_backoff();
        self.dupacks = 0;
        self.limited_transmit = 0;

        // Window growth outside recovery (`cc.rs`); RFC 6582 / RFC 6675 partial and full
        // ACKs in recovery.
        match self.recovery {
            Some(recover) if ack < recover => {
                if !self.sack_ok {
                    // RFC 6582 §3.2 step 5: without SACK the partial ACK says the segment at
                    // SND.UNA is lost: retransmit it at once. (With SACK, RFC 6675 does not:
                    // what lies above may simply be in flight, after a reordering.)
                    self.rtx_una_now = true;
                } else if self.snd_una < self.rtx_next {
                    // The hole now at SND.UNA was retransmitted: if data sent from now on is
                    // SACKed while it stays, that retransmission was lost too.
                    self.rtx_una = Some((self.snd_una, self.snd_max));
                }
            }
            Some(_) => {
                // RFC 6675 §5 step (A): the cumulative ACK reached RecoveryPoint.
                self.recovery = None;
                self.rtx_una_now = false;
                self.cc.on_recovery_end();
            }
            None => {
                if self.rto_recover.is_some_and(|r| ack >= r) {
                    self.rto_recover = None;
                }
                self.cc.on_slow_start_ack(ack, self.snd_max, sample);
                let cwnd = self.cc.cwnd();
                let cwnd_limited = if self.cc.in_slow_start() {
                    2 * flight_before >= cwnd
                } else {
                    flight_before + 3 * self.snd_mss >= cwnd
                };
                self.cc.on_ack(now, acked, self.rtt.srtt(), cwnd_limited);
            }
        }

        // RFC 6298 §5.2 / §5.3: stop the timer when all is acknowledged, else restart it.
        if self.snd_una == self.snd_max {
            self.timers.clear(Timer::Retransmit);
        } else {
            self.timers.set(Timer::Retransmit, now + self.rtt.rto());
        }

        // Our FIN acknowledged?
        if let Some(fin) = self.our_fin {
            if ack > fin {
                match self.state {
                    // RFC 9293 §3.10.7.4 fifth, FIN-WAIT-1: FIN acknowledged -> FIN-WAIT-2.
                    State::FinWait1 => {
                        self.state = State::FinWait2;
                        // Bounded: a peer that never sends its FIN must not hold the flow.
                        self.timers
                            .set(Timer::FinWait2, now + self.cfg.fin_wait2_timeout);
                    }
                    // CLOSING: -> TIME-WAIT.
                    State::Closing => self.enter_time_wait(now),
                    // LAST-ACK: -> CLOSED.
                    State::LastAck => self.enter_closed(None),
                    _ => {}
                }
            }
        }
    }

    /// RFC 5827 early retransmit: with fewer than four segments outstanding and nothing
    /// new to send, the threshold is one less than the segments outstanding.
    pub(super) fn dupthresh(&self) -> u32 {
        let flight = self.snd_max.distance_from(self.snd_una) as usize;
        let segs = flight.div_ceil(self.snd_mss.max(1)) as u32;
        if segs < 4 && self.data_end() <= self.snd_max {
            segs.saturating_sub(1).clamp(1, 3)
        } else {
            3
        }
    }

    /// RFC 6675 §4 IsLost as a boundary: every un-SACKed octet below the returned
    /// sequence number is lost (DupThresh discontiguous SACKed ranges, or more than
    /// (DupThresh − 1) × SMSS SACKed octets, lie above it); none above. SND.UNA when
    /// nothing is.
    pub(super) fn lost_end(&self) -> SeqNumber {
        let thresh = self.dupthresh() as usize;
        self.scoreboard
            .lost_boundary(thresh, (thresh - 1) * self.snd_mss)
            .filter(|&b| b > self.snd_una)
            .unwrap_or(self.snd_una)
    }

    /// Octets believed in the network. In recovery RFC 6675 §4's pipe: over
    /// [SND.UNA, SND.MAX), every octet neither SACKed nor lost counts once, and every
    /// retransmitted one (below HighRxt) once more; without SACK each duplicate ACK
    /// counts as one segment that left (RFC 5681 §3.2's inflation). Otherwise, after a
    /// timeout, everything from SND.NXT (pulled back to SND.UNA) on is lost.
    pub(super) fn pipe(&self) -> usize {
        match self.recovery {
            Some(_) => {
                let (una, max) = (self.snd_una, self.snd_max);
                let flight = max.distance_from(una) as usize;
                let board = &self.scoreboard;
                let unsacked_below = |x: SeqNumber| {
                    let x = if x > max { max } else { x };
                    if x > una {
                        x.distance_from(una) as usize - board.sacked_between(una, x)
                    } else {
                        0
                    }
                };
                let lost = unsacked_below(self.lost_end());
                let rtx = unsacked_below(self.rtx_next);
                let mut pipe = (flight - board.sacked().min(flight)).saturating_sub(lost) + rtx;
                if !self.sack_ok {
                    pipe = pipe.saturating_sub(self.dupacks as usize * self.snd_mss);
                }
                pipe
            }
            None => {
                let sent = self.snd_nxt.distance_from(self.snd_una) as usize;
                sent - self
                    .scoreboard
                    .sacked_between(self.snd_una, self.snd_nxt)
                    .min(sent)
            }
        }
    }

    /// RFC 6675 §5 step 4: RecoveryPoint = HighData, the episode's one window reduction
    /// (`cc.rs`), HighRxt from SND.UNA, and the segment at SND.UNA retransmitted first.
    pub(super) fn enter_recovery(&mut self) {
        self.limited_transmit = 0;
        let flight = self.snd_max.distance_from(self.snd_una) as usize;
        self.cc.on_congestion(flight);
        self.recovery = Some(self.snd_max);
        self.rtx_next = self.snd_una;
        self.rtx_una_now = true;
        self.rtx_una = None;
        self.rtt_probe = None;
        self.stats.fast_retransmits += 1;
        self.stats.recovery_episodes += 1;
        self.stats.cwnd_reductions += 1;
        debug!(una = %self.snd_una, max = %self.snd_max, "tcp: fast retransmit");
    }
}
