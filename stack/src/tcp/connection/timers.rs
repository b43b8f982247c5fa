//! Timers of a connection: retransmission (RFC 6298), persist (zero-window probes, RFC 9293
//! §3.8.6.1), keepalive (RFC 1122 §4.2.3.6), delayed ACK, TIME-WAIT, and pacing's next send.

use super::*;

impl<S: SendSource> Connection<S> {
    /// When [`Connection::handle_timeout`] should next be called.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        if self.state == State::Closed {
            return None;
        }
        let pace = self.pace_wait.then_some(self.pace_next);
        match (self.timers.next(), pace) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs every timer that expired at `now`.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        if self.state == State::Closed {
            return;
        }
        for t in Timer::ALL {
            if !self.timers.take_expired(t, now) {
                continue;
            }
            match t {
                Timer::DelayedAck => self.ack_now = true,
                Timer::Retransmit => self.on_rto(now),
                Timer::Persist => self.on_persist(),
                Timer::TimeWait => self.enter_closed(None),
                Timer::Keepalive => self.on_keepalive(now),
                Timer::FinWait2 => {
                    if self.state == State::FinWait2 {
                        warn!(
                            local = self.local_port,
                            timeout_ms = self.cfg.fin_wait2_timeout.as_millis() as u64,
                            "tcp: no FIN from the peer in FIN-WAIT-2"
                        );
                        self.fail_with_rst(TcpError::FinWait2Timeout {
                            timeout: self.cfg.fin_wait2_timeout,
                        });
                    }
                }
            }
            if self.state == State::Closed {
                return;
            }
        }
    }

    /// RFC 9293 §3.8.6.1: probe a closed window, backing off; give up (RST) after
    /// `persist_max_probes` probes while it stays closed.
    fn on_persist(&mut self) {
        if self.src.queued() == 0 {
            return;
        }
        if self.snd_wnd != 0 {
            // Open, yet too small for the next FPDU of an aligned source (`plan_send` armed
            // the timer), with nothing in flight: waiting longer may never end (a peer whose
            // whole buffer is below one FPDU), so one segment may now end inside an FPDU.
            // Zero-window probes themselves carry no data (SND.UNA − 1, see
            // `poll_transmit`): they never break alignment.
            if self.snd_una == self.snd_max {
                self.force_cut = true;
            }
            return;
        }
        if self.persist_probes >= self.cfg.persist_max_probes {
            warn!(
                local = self.local_port,
                probes = self.persist_probes,
                "tcp: the peer's window stayed closed"
            );
            self.fail_with_rst(TcpError::PersistLimit {
                probes: self.persist_probes,
            });
            return;
        }
        self.probe_pending = true;
        self.persist_probes += 1;
        self.persist_backoff = self.persist_backoff.saturating_add(1);
        self.arm_persist();
    }

    /// RFC 1122 §4.2.3.6 keepalive, as Linux times it: the first probe `keepalive_idle` after
    /// the peer's last acceptable segment, then one every `keepalive_interval`; the
    /// connection fails when the timer finds `keepalive_probes` probes unanswered. Segments
    /// only record their arrival (`last_rx`), so the timer moves here, at most once per idle
    /// period, never per segment.
    fn on_keepalive(&mut self, now: Instant) {
        let Some(idle) = self.cfg.keepalive_idle else {
            return;
        };
        // Closing states have their own bounds (FIN retransmissions, FIN-WAIT-2, TIME-WAIT).
        if !matches!(self.state, State::Established | State::CloseWait) {
            return;
        }
        // Queued, none in flight, and neither the retransmission nor the persist timer
        // waiting: nothing will ever send them. A bug, not the peer's doing; end the flow
        // with the reason rather than keep its slot forever.
        // Seen at two firings of this timer in a row (an idle period apart), SND.UNA unmoved.
        let queued = self.src.queued();
        let stalled = self.snd_una == self.snd_max
            && queued > 0
            && !self.timers.is_set(Timer::Persist)
            && !self.timers.is_set(Timer::Retransmit);
        let mark = stalled.then_some(self.snd_una);
        let previous = std::mem::replace(&mut self.stall_mark, mark);
        if mark.is_some() && previous == mark {
            warn!(local = self.local_port, queued, "tcp: send stalled");
            self.fail_with_rst(TcpError::SendStalled { queued });
            return;
        }
        // Octets in flight or queued: the retransmission or persist limits watch the peer.
        if self.snd_una != self.snd_max || queued > 0 {
            self.timers.set(Timer::Keepalive, now + idle);
            return;
        }
        let since = now.saturating_duration_since(self.last_rx);
        if self.keepalive_probes_out == 0 && since < idle {
            self.timers.set(Timer::Keepalive, self.last_rx + idle);
            return;
        }
        if self.keepalive_probes_out >= self.cfg.keepalive_probes {
            warn!(
                local = self.local_port,
                probes = self.keepalive_probes_out,
                silent_ms = since.as_millis() as u64,
                "tcp: keepalive: the peer is gone"
            );
            self.fail_with_rst(TcpError::KeepaliveTimeout {
                probes: self.keepalive_probes_out,
            });
            return;
        }
        self.keepalive_pending = true;
        self.keepalive_probes_out += 1;
        self.timers
            .set(Timer::Keepalive, now + self.cfg.keepalive_interval);
    }

    /// A segment passed every acceptability check: the peer is alive.
    pub(super) fn peer_heard(&mut self, now: Instant) {
        self.last_rx = now;
        self.keepalive_probes_out = 0;
    }

    /// Gives up on the peer: one RST goes out (a live peer learns the connection is gone),
    /// and the connection fails with `e`.
    pub(super) fn fail_with_rst(&mut self, e: TcpError) {
        self.rst_pending = Some((self.snd_nxt, None));
        self.enter_closed(Some(e));
    }

    /// RFC 6298 §5.4-5.7 and RFC 5681 §3.1 on a retransmission timeout.
    fn on_rto(&mut self, now: Instant) {
        if self.snd_una == self.snd_max {
            return;
        }
        self.rto_count += 1;
        self.stats.rto_expiries += 1;
        // RFC 9293 §3.8.3 R2: give up after too many retransmissions.
        if self.rto_count > self.cfg.max_retransmissions {
            warn!(
                local = self.local_port,
                retransmissions = self.cfg.max_retransmissions,
                "tcp: retransmission limit reached"
            );
            self.enter_closed(Some(TcpError::RetransmissionLimit {
                retransmissions: self.cfg.max_retransmissions,
            }));
            return;
        }
        let flight = self.snd_max.distance_from(self.snd_una) as usize;
        // RFC 5681 §3.1 (4), RFC 9438 §4.8: ssthresh from the flight (only at the first
        // timeout of a backoff series), cwnd = one segment.
        self.cc.on_rto(flight, self.rto_count == 1);
        self.stats.cwnd_reductions += u64::from(self.rto_count == 1);
        // RFC 6675 §5.1: a timeout ends fast recovery; HighRxt restarts at SND.UNA.
        self.recovery = None;
        self.rtx_una_now = false;
        self.rtx_una = None;
        self.rtx_next = self.snd_una;
        self.rto_recover = Some(self.snd_max);
        self.dupacks = 0;
        // The SACK information is kept (RFC 6675 §5.1 lets recovery after a timeout use it);
        // reneging is detected on ACKs instead (see `ack_new_data`).
        // Go back: resend from SND.UNA (skipping SACKed ranges).
        self.snd_nxt = self.snd_una;
        self.rtt_probe = None;
        // RFC 1122 §4.2.2.17: the peer shrank its window to zero under octets in flight.
        // Nothing can be resent into it and the persist timer only runs with nothing in
        // flight, so this timeout probes instead (its answer carries the window; a lost
        // window update would otherwise leave us silent until the retransmission limit).
        if self.snd_wnd == 0 && self.snd_una < self.data_end() {
            self.probe_pending = true;
        }
        // RFC 6298 §5.5, §5.6: back off and restart.
        self.rtt.back_off();
        self.timers.set(Timer::Retransmit, now + self.rtt.rto());
        debug!(
            local = self.local_port,
            rto_ms = self.rtt.rto().as_millis() as u64,
            count = self.rto_count,
            "tcp: retransmission timeout"
        );
    }
}
