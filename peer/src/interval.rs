//! Per-interval lines on stderr (`-i SECONDS`, as iperf3's): for each interval of a transfer
//! its start and end in seconds from the transfer's start, the ULPDU octets sent or received
//! in it and their Gbit/s. Time is passed in, so the arithmetic is tested without a clock.

use std::fmt;
use std::time::{Duration, Instant};

/// Counts a transfer's octets into intervals of `every`.
pub(crate) struct Meter {
    /// Names the transfer on each line (the peer's address).
    label: String,
    every: Duration,
    start: Instant,
    /// Where the current interval started, and the octets counted until then.
    from: Duration,
    octets_at_from: u64,
}

/// One interval's line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Interval<'a> {
    label: &'a str,
    from: Duration,
    to: Duration,
    octets: u64,
}

impl Interval<'_> {
    /// Gbit/s of the interval's octets.
    pub(crate) fn gbit_s(&self) -> f64 {
        let secs = (self.to - self.from).as_secs_f64();
        if secs > 0.0 {
            self.octets as f64 * 8.0 / secs / 1e9
        } else {
            0.0
        }
    }
}

impl fmt::Display for Interval<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}] {:6.2}-{:.2} s {:>14} octets {:8.3} Gbit/s",
            self.label,
            self.from.as_secs_f64(),
            self.to.as_secs_f64(),
            self.octets,
            self.gbit_s()
        )
    }
}

impl Meter {
    /// A meter whose first interval starts at `start`.
    pub(crate) fn new(label: impl Into<String>, every: Duration, start: Instant) -> Meter {
        Meter {
            label: label.into(),
            every,
            start,
            from: Duration::ZERO,
            octets_at_from: 0,
        }
    }

    /// With `total` octets counted by `now`: the interval that ended, if the current one is
    /// at least `every` long. An interval in which nothing was counted for a while (a stall)
    /// ends only at the next count, so its end is when that count came and its rate the
    /// average over it.
    pub(crate) fn tick(&mut self, now: Instant, total: u64) -> Option<Interval<'_>> {
        let at = now.saturating_duration_since(self.start);
        (at >= self.from + self.every).then(|| self.close(at, total))
    }

    /// The last interval, cut short at `now`: `None` when nothing was counted since the last
    /// one and it is shorter than an interval (the moments between the last count and the
    /// end, a line of zeros otherwise).
    pub(crate) fn finish(&mut self, now: Instant, total: u64) -> Option<Interval<'_>> {
        let at = now.saturating_duration_since(self.start);
        let idle = total == self.octets_at_from && at < self.from + self.every;
        (at > self.from && !idle).then(|| self.close(at, total))
    }

    fn close(&mut self, at: Duration, total: u64) -> Interval<'_> {
        let (from, octets) = (self.from, total.saturating_sub(self.octets_at_from));
        self.from = at;
        self.octets_at_from = total;
        Interval {
            label: &self.label,
            from,
            to: at,
            octets,
        }
    }
}

/// Prints `line` on stderr (a stderr closed too is no reason to stop a transfer).
pub(crate) fn print(line: Option<Interval<'_>>) {
    use std::io::Write;
    if let Some(l) = line {
        let _ = writeln!(std::io::stderr(), "mpa-peer: {l}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_split_the_octets_and_end_with_the_rest() {
        let t0 = Instant::now();
        let s = |ms| t0 + Duration::from_millis(ms);
        let mut m = Meter::new("10.0.0.2:7777", Duration::from_secs(1), t0);
        assert_eq!(m.tick(s(400), 50_000_000), None);
        let i = m.tick(s(1000), 125_000_000).unwrap();
        assert_eq!(
            (i.from, i.to, i.octets),
            (s(0) - t0, s(1000) - t0, 125_000_000)
        );
        assert!((i.gbit_s() - 1.0).abs() < 1e-9);
        assert_eq!(
            i.to_string(),
            "[10.0.0.2:7777]   0.00-1.00 s      125000000 octets    1.000 Gbit/s"
        );
        // A stall: the next count 2.5 s later closes one interval of 2.5 s.
        let i = m.tick(s(3500), 375_000_000).unwrap();
        assert_eq!((i.from.as_millis(), i.to.as_millis()), (1000, 3500));
        assert_eq!(i.octets, 250_000_000);
        assert!((i.gbit_s() - 0.8).abs() < 1e-9);
        assert_eq!(m.tick(s(3600), 400_000_000), None);
        // The rest, cut short; then nothing more.
        let i = m.finish(s(3750), 400_000_000).unwrap();
        assert_eq!((i.from.as_millis(), i.to.as_millis()), (3500, 3750));
        assert_eq!(i.octets, 25_000_000);
        assert_eq!(m.finish(s(3750), 400_000_000), None);
        // Nothing counted since the last line, less than an interval ago: no line of zeros;
        // a whole interval of nothing is a line.
        assert_eq!(m.finish(s(3800), 400_000_000), None);
        let i = m.finish(s(4750), 400_000_000).unwrap();
        assert_eq!(
            (i.from.as_millis(), i.to.as_millis(), i.octets),
            (3750, 4750, 0)
        );
    }

    #[test]
    fn the_octets_of_all_intervals_add_up_to_the_total() {
        let t0 = Instant::now();
        let mut m = Meter::new("p", Duration::from_millis(100), t0);
        let mut sum = 0;
        for k in 1..=1000u64 {
            if let Some(i) = m.tick(t0 + Duration::from_millis(k * 7), k * 4096) {
                sum += i.octets;
            }
        }
        sum += m
            .finish(t0 + Duration::from_millis(7001), 1000 * 4096)
            .map_or(0, |i| i.octets);
        assert_eq!(sum, 1000 * 4096);
    }
}
