//! Congestion control: how many octets may be in flight (RFC 5681, RFC 6582, RFC 9438).
//!
//! The controller only owns the window arithmetic. Loss detection and what to send during
//! recovery (RFC 6675's pipe, NextSeg, IsLost) live in `connection/ack.rs` and
//! `connection/tx.rs`, which tell the controller about four things: an ACK of new data
//! outside recovery ([`Controller::on_ack`]), the start of a recovery episode
//! ([`Controller::on_congestion`], the one window reduction of that episode), its end
//! ([`Controller::on_recovery_end`]) and a retransmission timeout ([`Controller::on_rto`]).
//!
//! Sans I/O like the rest: time is passed in. CUBIC's window function is computed in `f64`
//! segments (deterministic, no clock read); its cube root only at congestion events and at
//! the start of each congestion-avoidance epoch, never per segment.

use std::time::{Duration, Instant};

use mpa::seq::SeqNumber;

/// Which congestion controller a connection runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CongestionControl {
    /// NewReno (RFC 5681 slow start and congestion avoidance with appropriate byte counting,
    /// RFC 3465; window halved once per recovery episode, RFC 6582 / RFC 6675).
    NewReno,
    /// CUBIC (RFC 9438) with its Reno-friendly region and fast convergence: the window
    /// grows with time since the last reduction, independent of the RTT, and is reduced to
    /// 0.7 of itself. The default for bulk sending.
    #[default]
    Cubic,
}

/// RFC 9438 §4.1: C, in segments per second cubed.
const CUBIC_C: f64 = 0.4;
/// RFC 9438 §4.1: β_cubic, the multiplicative decrease factor.
const CUBIC_BETA: f64 = 0.7;
/// RFC 9438 §4.3: α_cubic = 3(1 − β) / (1 + β), so that the Reno-friendly estimate grows as
/// fast on average as Reno with β = 0.5.
const CUBIC_ALPHA: f64 = 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA);

/// RFC 3465 L: slow start grows by at most this many segments per ACK, so that a stretch
/// ACK (the datapath's own receiver ACKs once per RX burst) cannot make the window jump.
const ABC_LIMIT_SEGMENTS: usize = 2;

/// RFC 9438 §4.2, Figure 2: K, the time in seconds the window function takes to climb from
/// `cwnd_epoch` back to `w_max` (both in segments); 0 when it starts at or above `w_max`.
fn cubic_k(w_max: f64, cwnd_epoch: f64) -> f64 {
    ((w_max - cwnd_epoch).max(0.0) / CUBIC_C).cbrt()
}

/// RFC 9438 §4.2, Figure 1: W_cubic(t) = C (t − K)³ + W_max, in segments, `t` in seconds
/// since the epoch began.
fn w_cubic(t: f64, k: f64, w_max: f64) -> f64 {
    let d = t - k;
    CUBIC_C * d * d * d + w_max
}

/// CUBIC's state (RFC 9438 §4.1 variables), in segments.
#[derive(Debug, Clone)]
struct Cubic {
    /// W_max: the window just before the last reduction (after fast convergence).
    w_max: f64,
    /// cwnd_prior: the window just before the last reduction, as it was.
    cwnd_prior: f64,
    /// The current congestion-avoidance epoch: (t_epoch, K). `None` until the first ACK in
    /// congestion avoidance after a reduction, slow start or an application-limited spell.
    epoch: Option<(Instant, f64)>,
    /// W_est, the Reno-friendly estimate (§4.3).
    w_est: f64,
    /// The window in segments while in congestion avoidance (fractions kept).
    cwnd: f64,
    /// The last reduction was a timeout: the next epoch starts with K = 0 and W_max = its
    /// starting window (§4.8).
    after_rto: bool,
}

#[derive(Debug, Clone)]
enum Algo {
    NewReno {
        /// Octets acknowledged in congestion avoidance since the window last grew (RFC 5681
        /// §3.1's byte counting: one SMSS per window's worth of ACKed octets).
        acked: usize,
    },
    Cubic(Cubic),
}

/// RFC 9406 §4.3 constants.
const HYSTART_MIN_RTT_THRESH: Duration = Duration::from_millis(4);
const HYSTART_MAX_RTT_THRESH: Duration = Duration::from_millis(16);
const HYSTART_MIN_RTT_DIVISOR: u32 = 8;
const HYSTART_N_RTT_SAMPLE: u32 = 8;
const HYSTART_CSS_GROWTH_DIVISOR: usize = 4;
const HYSTART_CSS_ROUNDS: u32 = 5;

/// HyStart++ (RFC 9406): leaves slow start when the RTT of a round rises above the previous
/// round's minimum by a threshold (the queue is building), through a few rounds of
/// conservative slow start (a quarter of the growth), instead of doubling until a whole
/// window's worth of the queue overflows. Per ACK it keeps a minimum and a count; at
/// round ends (one per RTT) it compares.
#[derive(Debug, Clone, Default)]
struct HyStart {
    /// The round ends when this is acknowledged (SND.MAX when it began).
    window_end: Option<SeqNumber>,
    last_round_min: Option<Duration>,
    round_min: Option<Duration>,
    samples: u32,
    /// Conservative slow start: (cssBaselineMinRtt, rounds in it so far).
    css: Option<(Duration, u32)>,
}

impl HyStart {
    /// RFC 9406 §4.2 for one ACK in slow start. Returns `true` when conservative slow
    /// start has lasted `CSS_ROUNDS`: slow start ends.
    fn on_ack(&mut self, ack: SeqNumber, snd_max: SeqNumber, sample: Option<Duration>) -> bool {
        if self.window_end.is_none_or(|w| ack >= w) {
            // A new round.
            self.window_end = Some(snd_max);
            self.last_round_min = self.round_min.take();
            self.samples = 0;
            if let Some((_, rounds)) = &mut self.css {
                *rounds += 1;
                if *rounds >= HYSTART_CSS_ROUNDS {
                    *self = HyStart::default();
                    return true;
                }
            }
        }
        if let Some(r) = sample {
            self.round_min = Some(self.round_min.map_or(r, |m| m.min(r)));
            self.samples += 1;
        }
        if self.samples < HYSTART_N_RTT_SAMPLE {
            return false;
        }
        let Some(cur) = self.round_min else {
            return false;
        };
        match self.css {
            None => {
                if let Some(last) = self.last_round_min {
                    let thresh = (last / HYSTART_MIN_RTT_DIVISOR)
                        .clamp(HYSTART_MIN_RTT_THRESH, HYSTART_MAX_RTT_THRESH);
                    if cur >= last + thresh {
                        self.css = Some((cur, 0));
                    }
                }
            }
            Some((baseline, _)) => {
                // The RTT fell back below the baseline: the rise was spurious.
                if cur < baseline {
                    self.css = None;
                }
            }
        }
        false
    }
}

/// A connection's congestion window and slow-start threshold, and the algorithm moving them.
#[derive(Debug, Clone)]
pub(crate) struct Controller {
    algo: Algo,
    hystart: HyStart,
    /// cwnd in octets.
    cwnd: usize,
    /// ssthresh in octets (`usize::MAX` until the first congestion event).
    ssthresh: usize,
    mss: usize,
}

impl Controller {
    pub(crate) fn new(kind: CongestionControl, mss: usize, initial_segments: u32) -> Controller {
        let mss = mss.max(1);
        let cwnd = mss * initial_segments.max(1) as usize;
        let algo = match kind {
            CongestionControl::NewReno => Algo::NewReno { acked: 0 },
            CongestionControl::Cubic => Algo::Cubic(Cubic {
                w_max: 0.0,
                cwnd_prior: 0.0,
                epoch: None,
                w_est: 0.0,
                cwnd: cwnd as f64 / mss as f64,
                after_rto: false,
            }),
        };
        Controller {
            algo,
            hystart: HyStart::default(),
            cwnd,
            ssthresh: usize::MAX,
            mss,
        }
    }

    /// The congestion window in octets.
    pub(crate) fn cwnd(&self) -> usize {
        self.cwnd
    }

    /// The slow-start threshold in octets.
    #[cfg(test)]
    pub(crate) fn ssthresh(&self) -> usize {
        self.ssthresh
    }

    pub(crate) fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    /// HyStart++ bookkeeping for an ACK of new data up to `ack` in slow start, with the RTT
    /// sample it gave; call before [`Controller::on_ack`]. Ends slow start (ssthresh =
    /// cwnd, RFC 9406 §4.2) after the conservative rounds.
    pub(crate) fn on_slow_start_ack(
        &mut self,
        ack: SeqNumber,
        snd_max: SeqNumber,
        sample: Option<Duration>,
    ) {
        if self.in_slow_start() && self.hystart.on_ack(ack, snd_max, sample) {
            self.ssthresh = self.cwnd;
        }
    }

    /// `acked` new octets were acknowledged outside recovery. `cwnd_limited`: the window,
    /// not the application or the peer's window, bounded what was in flight (RFC 7661's
    /// idea: a window that was not used is not validated, so it does not grow). `srtt` is
    /// CUBIC's RTT in W_cubic(t + RTT) (§4.4).
    pub(crate) fn on_ack(
        &mut self,
        now: Instant,
        acked: usize,
        srtt: Option<Duration>,
        cwnd_limited: bool,
    ) {
        let mss = self.mss;
        if !cwnd_limited {
            if let Algo::Cubic(c) = &mut self.algo {
                // RFC 9438 §5.8: time spent application-limited must not count in t; a new
                // epoch starts from the current window when the window is used again.
                c.epoch = None;
            }
            return;
        }
        if self.cwnd < self.ssthresh {
            // RFC 5681 §3.1 slow start, RFC 3465 byte counting with L = 2 SMSS; a quarter
            // of that in HyStart++'s conservative slow start (RFC 9406 §4.2).
            let div = if self.hystart.css.is_some() {
                HYSTART_CSS_GROWTH_DIVISOR
            } else {
                1
            };
            self.cwnd += acked.min(ABC_LIMIT_SEGMENTS * mss) / div;
            if let Algo::Cubic(c) = &mut self.algo {
                c.cwnd = self.cwnd as f64 / mss as f64;
            }
            return;
        }
        match &mut self.algo {
            Algo::NewReno { acked: total } => {
                // RFC 5681 §3.1 (eq. 3 with byte counting): one SMSS per cwnd of ACKed octets.
                *total += acked;
                if *total >= self.cwnd {
                    *total -= self.cwnd;
                    self.cwnd += mss;
                }
            }
            Algo::Cubic(c) => {
                // Never below where it was (float rounding): only a loss reduces it.
                let w = c.on_ack(now, acked as f64 / mss as f64, srtt, self.cwnd, mss);
                self.cwnd = self.cwnd.max(w);
            }
        }
    }

    /// A recovery episode starts (RFC 6675 §5 step 4.2 / RFC 5681 §3.2 step 2): the one
    /// window reduction of the episode. `flight` is FlightSize in octets.
    pub(crate) fn on_congestion(&mut self, flight: usize) {
        let mss = self.mss;
        // RFC 9406 §4.2: a loss ends slow start and HyStart++'s rounds.
        self.hystart = HyStart::default();
        match &mut self.algo {
            Algo::NewReno { acked } => {
                // RFC 5681 §3.2 (4): ssthresh = max(FlightSize / 2, 2*SMSS).
                self.ssthresh = (flight / 2).max(2 * mss);
                *acked = 0;
            }
            Algo::Cubic(c) => {
                self.ssthresh = c.reduce(self.cwnd, mss);
                c.after_rto = false;
            }
        }
        // RFC 6675 §5 (4.2): cwnd = ssthresh; the pipe decides what leaves during recovery.
        self.cwnd = self.ssthresh;
        if let Algo::Cubic(c) = &mut self.algo {
            c.cwnd = self.cwnd as f64 / mss as f64;
        }
    }

    /// The recovery episode ended (the cumulative ACK reached the recovery point): cwnd
    /// stays at ssthresh (RFC 6582 §3.2 step 3, option 1) and congestion avoidance resumes;
    /// CUBIC starts a new epoch at the next ACK.
    pub(crate) fn on_recovery_end(&mut self) {
        self.cwnd = self
            .cwnd
            .min(self.ssthresh.max(2 * self.mss))
            .max(2 * self.mss);
        if let Algo::Cubic(c) = &mut self.algo {
            c.epoch = None;
            c.cwnd = self.cwnd as f64 / self.mss as f64;
        }
    }

    /// A retransmission timeout (RFC 5681 §3.1 eq. 4, RFC 6298 §5, RFC 9438 §4.8): cwnd
    /// falls to the loss window of one segment. `first`: the first timeout of this
    /// backoff series; a retransmission that times out again keeps ssthresh (RFC 5681 §3.1
    /// after eq. 4: it must not halve once per backoff).
    pub(crate) fn on_rto(&mut self, flight: usize, first: bool) {
        let mss = self.mss;
        self.hystart = HyStart::default();
        if first {
            match &mut self.algo {
                Algo::NewReno { acked } => {
                    self.ssthresh = (flight / 2).max(2 * mss);
                    *acked = 0;
                }
                Algo::Cubic(c) => {
                    self.ssthresh = c.reduce(self.cwnd, mss);
                    c.after_rto = true;
                }
            }
        }
        self.cwnd = mss;
        if let Algo::Cubic(c) = &mut self.algo {
            c.epoch = None;
            c.cwnd = 1.0;
        }
    }
}

impl Cubic {
    /// RFC 9438 §4.6 and §4.7 at a congestion event: W_max with fast convergence, and the
    /// new ssthresh in octets (cwnd × β, at least 2 SMSS).
    fn reduce(&mut self, cwnd: usize, mss: usize) -> usize {
        let w = cwnd as f64 / mss as f64;
        // §4.7 fast convergence: a flow that lost before regaining its previous W_max
        // releases bandwidth to newer flows by remembering a lower W_max.
        self.w_max = if w < self.w_max {
            w * (1.0 + CUBIC_BETA) / 2.0
        } else {
            w
        };
        self.cwnd_prior = w;
        self.epoch = None;
        ((w * CUBIC_BETA * mss as f64) as usize).max(2 * mss)
    }

    /// RFC 9438 §4.2-§4.5: one ACK of `segs` segments in congestion avoidance; returns the
    /// new cwnd in octets.
    fn on_ack(
        &mut self,
        now: Instant,
        segs: f64,
        srtt: Option<Duration>,
        cwnd_bytes: usize,
        mss: usize,
    ) -> usize {
        let (t_epoch, k) = match self.epoch {
            Some(e) => e,
            None => {
                // A new epoch: cwnd_epoch is the window now; W_est starts there (§4.3).
                let cwnd_epoch = cwnd_bytes as f64 / mss as f64;
                self.cwnd = cwnd_epoch;
                if self.after_rto || self.w_max < cwnd_epoch {
                    // §4.8: after a timeout, K = 0 and W_max = the window at the start of
                    // congestion avoidance. Also when the window already passed W_max
                    // (e.g. an application-limited restart above it): convex growth.
                    self.w_max = cwnd_epoch;
                    self.after_rto = false;
                }
                let k = cubic_k(self.w_max, cwnd_epoch);
                self.w_est = cwnd_epoch;
                self.epoch = Some((now, k));
                (now, k)
            }
        };
        let t = now.saturating_duration_since(t_epoch).as_secs_f64();
        let rtt = srtt.map_or(0.0, |d| d.as_secs_f64());
        // §4.3: the Reno-friendly estimate; α = 1 once it reached the pre-reduction window.
        let alpha = if self.w_est >= self.cwnd_prior {
            1.0
        } else {
            CUBIC_ALPHA
        };
        self.w_est += alpha * segs / self.cwnd;
        if w_cubic(t, k, self.w_max) < self.w_est {
            // §4.3: Reno-friendly region: at least as fast as Reno would be (never below
            // where the cubic branch already took it: the window only shrinks on loss).
            self.cwnd = self.cwnd.max(self.w_est);
        } else {
            // §4.4 concave / §4.5 convex: move towards W_cubic one RTT ahead, at most 1.5×.
            let target = w_cubic(t + rtt, k, self.w_max).clamp(self.cwnd, 1.5 * self.cwnd);
            self.cwnd += (target - self.cwnd) / self.cwnd * segs;
        }
        ((self.cwnd * mss as f64) as usize).max(2 * mss)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1000;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn cubic_k_and_window_function_match_rfc9438() {
        // W_max = 100 segments, reduced by β = 0.7 to 70: K = cbrt(100 × 0.3 / 0.4)
        // = cbrt(75) = 4.217163326508746 s.
        let k = cubic_k(100.0, 70.0);
        assert!(close(k, 75f64.cbrt()), "{k}");
        assert!(close(k, 4.217_163_326_508_746), "{k}");
        // W_cubic(0) = 0.4 × (−K)³ + 100 = 0.4 × (−75) + 100 = 70: it starts at cwnd_epoch.
        assert!(close(w_cubic(0.0, k, 100.0), 70.0));
        // W_cubic(K) = W_max: the plateau.
        assert!(close(w_cubic(k, k, 100.0), 100.0));
        // One second past K: 100 + 0.4 × 1³ = 100.4; two: 100 + 0.4 × 8 = 103.2.
        assert!(close(w_cubic(k + 1.0, k, 100.0), 100.4));
        assert!(close(w_cubic(k + 2.0, k, 100.0), 103.2));
        // One second before K: 100 − 0.4 = 99.6 (concave side, symmetric).
        assert!(close(w_cubic(k - 1.0, k, 100.0), 99.6));
        // W_max = 10, from 7: K = cbrt(3 / 0.4) = cbrt(7.5) = 1.957433820... s.
        assert!(close(cubic_k(10.0, 7.0), 1.957_433_820_177_77));
        // Starting at or above W_max: K = 0.
        assert_eq!(cubic_k(50.0, 60.0), 0.0);
        // α_cubic = 3 × 0.3 / 1.7 = 0.5294117647058824.
        assert!(close(CUBIC_ALPHA, 0.529_411_764_705_882_4));
    }

    #[test]
    fn cubic_reduction_and_fast_convergence() {
        let t0 = Instant::now();
        let mut c = Controller::new(CongestionControl::Cubic, MSS, 100);
        assert!(c.in_slow_start());
        // First loss at 100 segments: ssthresh = cwnd = 70 segments, W_max = 100.
        c.on_congestion(100 * MSS);
        assert_eq!(c.ssthresh(), 70 * MSS);
        assert_eq!(c.cwnd(), 70 * MSS);
        let Algo::Cubic(s) = &c.algo else {
            unreachable!()
        };
        assert!(close(s.w_max, 100.0) && close(s.cwnd_prior, 100.0));
        c.on_recovery_end();
        // Next loss below the old W_max (at 80): fast convergence W_max = 80 × 1.7 / 2 = 68.
        c.cwnd = 80 * MSS;
        c.on_congestion(80 * MSS);
        let Algo::Cubic(s) = &c.algo else {
            unreachable!()
        };
        assert!(close(s.w_max, 68.0), "{}", s.w_max);
        assert_eq!(c.ssthresh(), 56 * MSS);
        // A timeout: loss window of one segment; a repeated one keeps ssthresh.
        c.on_rto(56 * MSS, true);
        assert_eq!(c.cwnd(), MSS);
        assert_eq!(c.ssthresh(), (56.0 * 0.7 * MSS as f64) as usize);
        let th = c.ssthresh();
        c.on_rto(MSS, false);
        assert_eq!(c.ssthresh(), th);
        let _ = t0;
    }

    #[test]
    fn cubic_reno_friendly_estimate_and_growth_along_w_cubic() {
        let t0 = Instant::now();
        let mut c = Controller::new(CongestionControl::Cubic, MSS, 100);
        c.on_congestion(100 * MSS);
        c.on_recovery_end();
        // The first ACK opens the epoch at t0 with cwnd_epoch = 70, K = cbrt(75).
        c.on_ack(t0, MSS, None, true);
        let Algo::Cubic(s) = &c.algo else {
            unreachable!()
        };
        // W_est after one segment: 70 + α × 1 / 70.
        let w_est = 70.0 + CUBIC_ALPHA / 70.0;
        assert!(close(s.w_est, w_est), "{}", s.w_est);
        // At t = 0, W_cubic(0) = 70 < W_est: the Reno-friendly region sets cwnd = W_est.
        assert!(close(s.cwnd, w_est));
        assert_eq!(c.cwnd(), (w_est * MSS as f64) as usize);
        // Feed a whole window (70 segments, one ACK each) at t = 0: W_est grows by about α
        // (≈ 0.529 segments per RTT's worth of ACKs), as RFC 9438 §4.3 intends.
        for _ in 1..70 {
            c.on_ack(t0, MSS, None, true);
        }
        let Algo::Cubic(s) = &c.algo else {
            unreachable!()
        };
        assert!((s.w_est - (70.0 + CUBIC_ALPHA)).abs() < 0.01, "{}", s.w_est);
        // At t = K the cubic is at W_max = 100, far above W_est: cwnd moves towards
        // W_cubic(K + RTT), by (target − cwnd) / cwnd per segment.
        let k = 75f64.cbrt();
        let at = t0 + Duration::from_secs_f64(k);
        let before = s.cwnd;
        let rtt = Duration::from_millis(100);
        c.on_ack(at, MSS, Some(rtt), true);
        let Algo::Cubic(s) = &c.algo else {
            unreachable!()
        };
        let target = w_cubic(k + 0.1, k, 100.0).min(1.5 * before);
        assert!(
            close(s.cwnd, before + (target - before) / before),
            "{}",
            s.cwnd
        );
        // Application-limited: no growth, and the epoch restarts.
        let w = c.cwnd();
        c.on_ack(at + rtt, MSS, Some(rtt), false);
        assert_eq!(c.cwnd(), w);
        let Algo::Cubic(s) = &c.algo else {
            unreachable!()
        };
        assert!(s.epoch.is_none());
    }

    #[test]
    fn hystart_leaves_slow_start_when_the_rtt_rises() {
        let mut c = Controller::new(CongestionControl::Cubic, MSS, 10);
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut seq = SeqNumber(u32::MAX - 5000); // rounds across the wrap
        let mut max = seq + 10_000u32;
        // Feeds one round: `acks` ACKs of one segment each with RTT `rtt`, then a new round.
        let mut round = |c: &mut Controller, rtt: Duration, acks: u32| {
            for _ in 0..acks {
                seq = seq + MSS as u32;
                c.on_slow_start_ack(seq, max, Some(rtt));
                c.on_ack(t0, MSS, Some(rtt), true);
            }
            // The round's last ACK covers all it sent; the next round sends a window more.
            seq = max;
            max = seq + c.cwnd() as u32;
            c.on_slow_start_ack(seq, max, None);
        };
        // Round 1 ends at once; round 2: RTT 40 ms.
        round(&mut c, ms(40), 0);
        round(&mut c, ms(40), 10);
        assert!(c.hystart.css.is_none());
        // Round 3: 44 ms, below 40 + max(40/8, 4) = 45: still slow start, full growth.
        let w = c.cwnd();
        round(&mut c, ms(44), 10);
        assert!(c.hystart.css.is_none());
        assert_eq!(c.cwnd(), w + 10 * MSS);
        // Round 4: 50 ms, at least 44 + max(44/8, 4) = 49.5 once 8 samples are in:
        // conservative slow start from the eighth ACK on, a quarter of the growth.
        let w = c.cwnd();
        round(&mut c, ms(50), 10);
        assert_eq!(c.hystart.css.map(|(b, _)| b), Some(ms(50)));
        assert_eq!(c.cwnd(), w + 7 * MSS + 3 * (MSS / 4));
        assert!(c.in_slow_start());
        // Four more rounds in CSS (five counted from the round it began in): slow start
        // ends with ssthresh = cwnd.
        for _ in 0..3 {
            round(&mut c, ms(50), 10);
            assert!(c.in_slow_start());
        }
        round(&mut c, ms(50), 10);
        assert!(!c.in_slow_start());
        assert_eq!(c.ssthresh(), c.cwnd());
    }

    #[test]
    fn newreno_slow_start_avoidance_and_halving() {
        let t0 = Instant::now();
        let mut c = Controller::new(CongestionControl::NewReno, MSS, 10);
        // Slow start: at most 2 SMSS per ACK (RFC 3465 L = 2).
        c.on_ack(t0, 5 * MSS, None, true);
        assert_eq!(c.cwnd(), 12 * MSS);
        c.on_ack(t0, MSS, None, true);
        assert_eq!(c.cwnd(), 13 * MSS);
        // Not window-limited: no growth.
        c.on_ack(t0, MSS, None, false);
        assert_eq!(c.cwnd(), 13 * MSS);
        // Loss with 13 segments in flight: ssthresh = 6.5 segments, cwnd = ssthresh.
        c.on_congestion(13 * MSS);
        assert_eq!(c.ssthresh(), 6500);
        assert_eq!(c.cwnd(), 6500);
        c.on_recovery_end();
        // Congestion avoidance: one SMSS per cwnd of ACKed octets.
        c.on_ack(t0, 6000, None, true);
        assert_eq!(c.cwnd(), 6500);
        c.on_ack(t0, 1000, None, true);
        assert_eq!(c.cwnd(), 7500);
        // Timeout: one segment; ssthresh from FlightSize / 2, at least 2 SMSS.
        c.on_rto(3 * MSS, true);
        assert_eq!((c.cwnd(), c.ssthresh()), (MSS, 2 * MSS));
    }
}
