//! Processing the ACK field and SACK blocks of incoming segments: our send side's
//! progress, RTT samples, duplicate ACKs, and entering fast recovery (RFC 5681, 6298, 6675).

use std::time::{Duration, Instant};

use mpa::seq::SeqNumber;
use tracing::debug;

use super::*;

impl Connection {
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
            for b in repr.options.sack.as_slice() {
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
            if self.recovery.is_some() {
                // One retransmission per duplicate ACK while recovering.
                self.rtx_pending = true;
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
                self.rtx_next = self.snd_una;
                self.rtx_pending = true;
                self.stats.lost_retransmits += 1;
            }
        }
        if sack_news && self.recovery.is_none() {
            // RFC 6675 §4 IsLost: more than (DupThresh - 1) * SMSS SACKed above the hole.
            if self.scoreboard.sacked() > (self.dupthresh() as usize - 1) * self.snd_mss {
                self.enter_recovery();
            }
        } else if sack_news && self.recovery.is_some() {
            self.rtx_pending = true;
        }

        // RFC 9293 §3.10.7.4: update the send window if SND.WL1 < SEG.SEQ, or SND.WL1 =
        // SEG.SEQ and SND.WL2 =< SEG.ACK; also on any ACK of new data (as Linux does), so a
        // SND.WL1 left 2^31 behind by a long one-way transfer cannot freeze the window.
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

        self.sndbuf.consume(acked.min(self.sndbuf.len()));
        self.rtx_una = None;
        self.snd_una = ack;
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

        // RFC 5681 §3.1 congestion window growth; RFC 6582 partial / full ACKs in recovery.
        match self.recovery {
            Some(recover) if ack < recover => {
                // Partial ACK: retransmit the next hole at once.
                self.rtx_pending = true;
                if self.scoreboard.is_empty() {
                    self.rtx_next = ack;
                }
            }
            Some(_) => {
                self.recovery = None;
                self.cwnd = self.ssthresh;
            }
            None => {
                let mss = self.snd_mss;
                if self.cwnd < self.ssthresh {
                    self.cwnd += acked.min(mss);
                } else {
                    self.cwnd += (mss * mss / self.cwnd).max(1);
                }
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

    /// Octets believed in the network (RFC 6675 §4 "pipe", simplified): sent, neither
    /// acknowledged nor SACKed, and not deemed lost. In recovery every un-SACKed hole below
    /// the highest SACK is lost until retransmitted; after a timeout everything from SND.NXT
    /// (pulled back to SND.UNA) on is.
    pub(super) fn pipe(&self) -> usize {
        match (self.recovery, self.scoreboard.highest()) {
            (Some(_), Some(high)) => {
                let flight = self.snd_max.distance_from(self.snd_una) as usize;
                let from = if self.rtx_next > self.snd_una {
                    self.rtx_next
                } else {
                    self.snd_una
                };
                let lost = if high > from {
                    high.distance_from(from) as usize - self.scoreboard.sacked_between(from, high)
                } else {
                    0
                };
                flight
                    .saturating_sub(self.scoreboard.sacked())
                    .saturating_sub(lost)
            }
            _ => {
                let sent = self.snd_nxt.distance_from(self.snd_una) as usize;
                sent - self
                    .scoreboard
                    .sacked_between(self.snd_una, self.snd_nxt)
                    .min(sent)
            }
        }
    }

    pub(super) fn enter_recovery(&mut self) {
        self.limited_transmit = 0;
        let flight = self.snd_max.distance_from(self.snd_una) as usize;
        // RFC 5681 §3.2 (2): ssthresh = max(FlightSize / 2, 2*SMSS).
        self.ssthresh = (flight / 2).max(2 * self.snd_mss);
        self.cwnd = self.ssthresh;
        self.recovery = Some(self.snd_max);
        self.rtx_next = self.snd_una;
        self.rtx_pending = true;
        self.rtt_probe = None;
        self.stats.fast_retransmits += 1;
        debug!(una = %self.snd_una, max = %self.snd_max, "tcp: fast retransmit");
    }
}
