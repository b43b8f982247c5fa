//! Round-trip time estimation and the retransmission timeout (RFC 6298).

use std::time::Duration;

/// Clock granularity G of RFC 6298 §2.
const GRANULARITY: Duration = Duration::from_millis(1);

#[derive(Debug, Clone)]
pub(crate) struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    backoff: u32,
    min: Duration,
    max: Duration,
}

impl RttEstimator {
    pub(crate) fn new(initial: Duration, min: Duration, max: Duration) -> RttEstimator {
        RttEstimator {
            srtt: None,
            rttvar: Duration::ZERO,
            // RFC 6298 §2.1: until a sample, RTO = the initial value.
            rto: initial.clamp(min, max),
            backoff: 0,
            min,
            max,
        }
    }

    /// Takes one RTT measurement (RFC 6298 §2.2, §2.3).
    pub(crate) fn sample(&mut self, r: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                let diff = srtt.abs_diff(r);
                // RTTVAR <- 3/4 RTTVAR + 1/4 |SRTT - R'|; SRTT <- 7/8 SRTT + 1/8 R'
                self.rttvar = self.rttvar * 3 / 4 + diff / 4;
                self.srtt = Some(srtt * 7 / 8 + r / 8);
            }
        }
        let srtt = self.srtt.unwrap_or(r);
        // RTO <- SRTT + max(G, 4 RTTVAR), then §2.4 lower and §2.5 upper bounds.
        self.rto = (srtt + GRANULARITY.max(self.rttvar * 4)).clamp(self.min, self.max);
        // §5.7 note: a new sample after backoff restores the computed RTO.
        self.backoff = 0;
    }

    /// The current timeout, backed off (RFC 6298 §5.5) and capped.
    pub(crate) fn rto(&self) -> Duration {
        self.rto
            .checked_mul(1u32 << self.backoff.min(16))
            .unwrap_or(self.max)
            .min(self.max)
    }

    /// Doubles the timeout (RFC 6298 §5.5).
    pub(crate) fn back_off(&mut self) {
        self.backoff = self.backoff.saturating_add(1);
    }

    /// Forgets the backoff once new data is acknowledged.
    pub(crate) fn reset_backoff(&mut self) {
        self.backoff = 0;
    }

    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.srtt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6298_arithmetic() {
        let ms = Duration::from_millis;
        let mut e = RttEstimator::new(ms(1000), ms(200), ms(60_000));
        assert_eq!(e.rto(), ms(1000));
        e.sample(ms(100));
        // SRTT 100, RTTVAR 50, RTO = 100 + 200 = 300
        assert_eq!(e.rto(), ms(300));
        e.sample(ms(100));
        // RTTVAR = 37.5, SRTT 100, RTO = 250
        assert_eq!(e.rto(), ms(250));
        for _ in 0..50 {
            e.sample(ms(1));
        }
        assert_eq!(e.rto(), ms(200), "clamped to the minimum");
        e.back_off();
        e.back_off();
        assert_eq!(e.rto(), ms(800));
        for _ in 0..40 {
            e.back_off();
        }
        assert_eq!(e.rto(), ms(60_000), "capped");
        e.reset_backoff();
        assert_eq!(e.rto(), ms(200));
        assert!(e.srtt().unwrap() < ms(10));
    }
}
