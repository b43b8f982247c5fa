//! The connection's timers: a small table with one deadline each.

use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Delayed ACK (RFC 9293 §3.8.6.3).
    DelayedAck = 0,
    /// Retransmission (RFC 6298).
    Retransmit = 1,
    /// Zero-window probe (RFC 9293 §3.8.6.1).
    Persist = 2,
    /// TIME-WAIT.
    TimeWait = 3,
    /// Keepalive (RFC 1122 §4.2.3.6): idle time, then the interval between probes. Moved
    /// lazily: a segment only records its arrival; when this fires early it re-arms.
    Keepalive = 4,
    /// The bound on FIN-WAIT-2 (Linux `tcp_fin_timeout`).
    FinWait2 = 5,
}

impl Timer {
    pub(crate) const ALL: [Timer; 6] = [
        Timer::DelayedAck,
        Timer::Retransmit,
        Timer::Persist,
        Timer::TimeWait,
        Timer::Keepalive,
        Timer::FinWait2,
    ];
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Timers {
    at: [Option<Instant>; 6],
}

impl Timers {
    pub(crate) fn set(&mut self, t: Timer, at: Instant) {
        self.at[t as usize] = Some(at);
    }
    pub(crate) fn clear(&mut self, t: Timer) {
        self.at[t as usize] = None;
    }
    pub(crate) fn is_set(&self, t: Timer) -> bool {
        self.at[t as usize].is_some()
    }
    pub(crate) fn clear_all(&mut self) {
        self.at = [None; 6];
    }
    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }
    /// Clears and returns the timer `t` if it expired at `now`.
    pub(crate) fn take_expired(&mut self, t: Timer, now: Instant) -> bool {
        match self.at[t as usize] {
            Some(at) if at <= now => {
                self.at[t as usize] = None;
                true
            }
            _ => false,
        }
    }
}
