//! The peer's clock offset from probe exchanges, sans I/O (docs/latency.md, "Two hosts").
//!
//! One exchange has four times: `sent` and `received` on this host's clock, `peer_received`
//! and `peer_answered` on the peer's. With θ the peer's clock minus ours, the probe's
//! one-way delay is `peer_received − θ − sent` and the answer's `received − peer_answered +
//! θ`; both are at least 0, so
//!
//! ```text
//!     peer_answered − received  ≤  θ  ≤  peer_received − sent
//! ```
//!
//! The estimate is the middle of that interval, `((peer_received − sent) + (peer_answered −
//! received)) / 2`, and its half-width ε = `((received − sent) − (peer_answered −
//! peer_received)) / 2` bounds the error whatever the two directions' delays are: half the
//! round trip the network and both hosts' stacks took. Of a measurement's exchanges the one
//! with the smallest round trip gives the tightest bound and is kept (NTP's clock filter).
//! Two measurements, before and after a run, give the offset at any time between them by
//! linear interpolation, which corrects a constant frequency difference (drift) between the
//! clocks; the error of an interpolated offset is at most the larger of the two ε.

/// One probe and its answer, in ns of CLOCK_MONOTONIC: `sent` and `received` this host's,
/// `peer_received` and `peer_answered` the peer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Exchange {
    pub(crate) sent: u64,
    pub(crate) peer_received: u64,
    pub(crate) peer_answered: u64,
    pub(crate) received: u64,
}

impl Exchange {
    /// The round trip without the peer's own time: `(received − sent) − (peer_answered −
    /// peer_received)`; `None` when the times cannot be (an answer before its probe, or a
    /// peer that took longer than the whole round trip).
    pub(crate) fn delay(&self) -> Option<u64> {
        let rtt = self.received.checked_sub(self.sent)?;
        let turn = self.peer_answered.checked_sub(self.peer_received)?;
        rtt.checked_sub(turn)
    }

    /// θ, the peer's clock minus ours, at the middle of the bound; `None` as for
    /// [`Exchange::delay`], or when θ does not fit 63 bits.
    pub(crate) fn offset(&self) -> Option<i64> {
        self.delay()?;
        let up = i128::from(self.peer_received) - i128::from(self.sent);
        let down = i128::from(self.peer_answered) - i128::from(self.received);
        i64::try_from((up + down).div_euclid(2)).ok()
    }
}

/// The offset one measurement found: its best exchange's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Estimate {
    /// When it holds, on this host's clock: the middle of the best exchange.
    pub(crate) at: u64,
    /// θ, the peer's clock minus ours, ns.
    pub(crate) offset_ns: i64,
    /// The bound on θ's error, ns (half the best exchange's delay, rounded up).
    pub(crate) error_ns: u64,
    /// The best exchange's whole round trip, ns.
    pub(crate) rtt_ns: u64,
    /// Exchanges that could be used, of the probes sent.
    pub(crate) answered: u32,
    pub(crate) sent: u32,
}

impl Estimate {
    /// The estimate of the exchange with the smallest delay (the first of equals); `None`
    /// when no exchange is usable. `sent` is the number of probes sent.
    pub(crate) fn best(exchanges: &[Exchange], sent: u32) -> Option<Estimate> {
        let usable = exchanges
            .iter()
            .filter_map(|e| Some((e, e.delay()?, e.offset()?)));
        let answered = usable.clone().count() as u32;
        let (e, delay, offset_ns) = usable.min_by_key(|&(_, delay, _)| delay)?;
        Some(Estimate {
            at: e.sent + (e.received - e.sent) / 2,
            offset_ns,
            error_ns: delay.div_ceil(2),
            rtt_ns: e.received - e.sent,
            answered,
            sent: sent.max(answered),
        })
    }
}

/// The offset between two measurements, interpolated (and beyond them, extrapolated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) before: Estimate,
    pub(crate) after: Estimate,
}

impl Span {
    /// θ at this host's time `t`, ns: on the line through the two estimates (the first's
    /// offset when both were taken at the same time).
    pub(crate) fn offset_at(&self, t: u64) -> i128 {
        let (b, a) = (&self.before, &self.after);
        let (tb, ta) = (i128::from(b.at), i128::from(a.at));
        let (ob, oa) = (i128::from(b.offset_ns), i128::from(a.offset_ns));
        if ta == tb {
            return ob;
        }
        ob + (oa - ob) * (i128::from(t) - tb) / (ta - tb)
    }

    /// The bound on an interpolated θ's error: the larger of the two estimates' (a mean of
    /// two values weighted by λ and 1 − λ errs by at most the larger error).
    #[cfg(test)]
    fn error_ns(&self) -> u64 {
        self.before.error_ns.max(self.after.error_ns)
    }

    /// The peer's clock rate against ours, in parts per million: how much θ grows per second
    /// of our time; 0 when both estimates were taken at the same time.
    pub(crate) fn drift_ppm(&self) -> f64 {
        let dt = self.after.at as f64 - self.before.at as f64;
        if dt == 0.0 {
            return 0.0;
        }
        (self.after.offset_ns as f64 - self.before.offset_ns as f64) / dt * 1e6
    }

    /// The bound on [`Span::drift_ppm`]'s error: the two offsets' errors over the time
    /// between them (infinite when there is none).
    pub(crate) fn drift_error_ppm(&self) -> f64 {
        let dt = self.after.at.abs_diff(self.before.at) as f64;
        (self.before.error_ns + self.after.error_ns) as f64 / dt * 1e6
    }

    /// The one-way latency of a message stamped `stamp` on the peer's clock and received at
    /// `now` on ours, ns: `now − (stamp − θ(now))`. Negative when the clock's error is larger
    /// than the latency.
    pub(crate) fn latency(&self, stamp: u64, now: u64) -> i128 {
        i128::from(now) - (i128::from(stamp) - self.offset_at(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An exchange on a peer whose clock is ours plus `theta`, with one-way delays `up` and
    /// `down` and `turn` ns spent by the peer, sent at our `t`.
    fn exchange(theta: i64, t: u64, up: u64, turn: u64, down: u64) -> Exchange {
        let peer = |ours: u64| (i128::from(ours) + i128::from(theta)) as u64;
        Exchange {
            sent: t,
            peer_received: peer(t + up),
            peer_answered: peer(t + up + turn),
            received: t + up + turn + down,
        }
    }

    #[test]
    fn symmetric_delays_give_the_offset_exactly() {
        let e = exchange(-5_000_000_000, 10_000_000_000, 20_000, 3_000, 20_000);
        assert_eq!(e.delay(), Some(40_000));
        assert_eq!(e.offset(), Some(-5_000_000_000));
        let est = Estimate::best(&[e], 1).unwrap();
        assert_eq!(est.error_ns, 20_000);
        assert_eq!(est.rtt_ns, 43_000);
        assert_eq!(est.at, 10_000_000_000 + 21_500);
        assert_eq!((est.answered, est.sent), (1, 1));
    }

    #[test]
    fn the_true_offset_lies_within_the_bound_whatever_the_asymmetry() {
        let theta = 123_456_789;
        for (up, down) in [(0, 50_000), (50_000, 0), (1, 1), (7_000, 31_000)] {
            let e = exchange(theta, 1_000_000, up, 2_000, down);
            let est = Estimate::best(&[e], 1).unwrap();
            let err = (i128::from(est.offset_ns) - i128::from(theta)).unsigned_abs();
            assert!(err <= u128::from(est.error_ns), "{up} {down}: {est:?}");
            // All of the asymmetry is error: half the difference of the two delays.
            assert_eq!(err, u128::from(up.abs_diff(down) / 2), "{up} {down}");
            assert_eq!(est.error_ns, (up + down).div_ceil(2));
        }
    }

    #[test]
    fn the_smallest_delay_is_kept_not_the_smallest_round_trip() {
        let theta = 1_000;
        let slow = exchange(theta + 900, 0, 40_000, 0, 60_000);
        // A long turn at the peer, a quick network: its delay is the smallest.
        let quick_net = exchange(theta, 200_000, 5_000, 500_000, 6_000);
        let fast = exchange(theta - 300, 100_000, 10_000, 0, 12_000);
        let est = Estimate::best(&[slow, quick_net, fast], 5).unwrap();
        assert_eq!(est.rtt_ns, 511_000);
        assert_eq!(est.error_ns, 5_500);
        assert_eq!(est.offset_ns, theta - 500);
        assert_eq!((est.answered, est.sent), (3, 5));
        // Equals: the first.
        let twin = exchange(theta + 7, 300_000, 5_000, 500_000, 6_000);
        let est = Estimate::best(&[twin, quick_net], 2).unwrap();
        assert_eq!(est.offset_ns, theta + 7 - 500);
    }

    #[test]
    fn impossible_exchanges_are_left_out() {
        let good = exchange(0, 1_000, 10, 5, 10);
        let backwards = Exchange {
            received: 999,
            ..good
        };
        let peer_slower_than_trip = Exchange {
            peer_answered: good.peer_received + 1_000,
            ..good
        };
        let peer_backwards = Exchange {
            peer_answered: good.peer_received - 1,
            ..good
        };
        let huge = Exchange {
            peer_received: u64::MAX,
            peer_answered: u64::MAX,
            received: u64::MAX / 2,
            sent: 0,
        };
        for bad in [backwards, peer_slower_than_trip, peer_backwards, huge] {
            assert_eq!(Estimate::best(&[bad], 1), None, "{bad:?}");
        }
        let est = Estimate::best(&[backwards, good, huge], 3).unwrap();
        assert_eq!((est.answered, est.sent, est.offset_ns), (1, 3, 0));
    }

    #[test]
    fn interpolation_follows_a_drifting_clock() {
        // The peer's clock runs 20 ppm fast: θ grows by 20 µs per second of ours.
        let theta = |t: u64| 7_000_000 + (t as i128 * 20 / 1_000_000) as i64;
        let at =
            |t: u64| Estimate::best(&[exchange(theta(t), t, 10_000, 1_000, 10_000)], 1).unwrap();
        let span = Span {
            before: at(1_000_000_000),
            after: at(11_000_000_000),
        };
        assert!(
            (span.drift_ppm() - 20.0).abs() < 0.01,
            "{}",
            span.drift_ppm()
        );
        // 20 µs of error over 10 s: ± 2 ppm.
        assert!((span.drift_error_ppm() - 2.0).abs() < 0.01);
        assert_eq!(span.error_ns(), 10_000);
        for t in [1_000_010_500u64, 6_000_000_000, 10_999_000_000] {
            let err = (span.offset_at(t) - i128::from(theta(t))).abs();
            assert!(err <= 1, "{t}: {} vs {}", span.offset_at(t), theta(t));
        }
        // Without the second estimate the same 5 s would be 100 µs off.
        let t = 6_000_010_500;
        assert_eq!(
            i128::from(theta(t)) - i128::from(span.before.offset_ns),
            100_000
        );
        // A message stamped on the peer's clock 30 µs before we got it.
        let now = 6_000_000_000;
        let stamp = (i128::from(now - 30_000) + i128::from(theta(now))) as u64;
        assert!((span.latency(stamp, now) - 30_000).abs() <= 1);
    }

    #[test]
    fn the_error_is_the_larger_and_equal_times_stay_finite() {
        let a = Estimate::best(&[exchange(50, 1_000, 3_000, 0, 3_000)], 1).unwrap();
        let b = Estimate::best(&[exchange(80, 1_000, 9_000, 0, 9_000)], 1).unwrap();
        let span = Span {
            before: a,
            after: Estimate { at: a.at, ..b },
        };
        assert_eq!(span.error_ns(), 9_000);
        assert_eq!(span.offset_at(123), 50);
        assert_eq!(span.drift_ppm(), 0.0);
        assert!(span.drift_error_ppm().is_infinite());
    }
}
