//! One connection's data segments matched with the ACKs that report them.

use serde::Serialize;
use std::collections::{BTreeMap, HashSet};

/// Relative sequence numbers beyond this are before the first data octet seen (or wrapped
/// garbage): left out.
const HALF_SPACE: u32 = 1 << 31;

/// Percentiles of the time from a segment's transmission to the first ACK reporting it.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub(crate) struct Percentiles {
    /// Segments measured.
    pub(crate) count: u64,
    /// µs; `None` when `count` is 0.
    pub(crate) p10_us: Option<f64>,
    pub(crate) p50_us: Option<f64>,
    pub(crate) p90_us: Option<f64>,
    pub(crate) p99_us: Option<f64>,
}

impl Percentiles {
    fn of(mut ns: Vec<u64>) -> Percentiles {
        ns.sort_unstable();
        let q = |q: f64| {
            (!ns.is_empty()).then(|| {
                let i = ((q * ns.len() as f64) as usize).min(ns.len() - 1);
                ns[i] as f64 / 1000.0
            })
        };
        Percentiles {
            count: ns.len() as u64,
            p10_us: q(0.10),
            p50_us: q(0.50),
            p90_us: q(0.90),
            p99_us: q(0.99),
        }
    }
}

/// What one connection's frames told so far.
#[derive(Debug, Default)]
pub(crate) struct Connection {
    /// The sequence number of the first data segment seen: offsets are taken from it.
    base: Option<u32>,
    /// Segments sent and not yet reported, by relative sequence number: (time of the latest
    /// transmission in ns, whether that was a retransmission).
    pending: BTreeMap<u32, (u64, bool)>,
    /// Every segment start sent once (to tell a retransmission).
    sent: HashSet<u32>,
    data_segments: u64,
    first_ns: Vec<u64>,
    again_ns: Vec<u64>,
}

impl Connection {
    fn rel(&self, seq: u32) -> Option<u32> {
        let r = seq.wrapping_sub(self.base?);
        (r < HALF_SPACE).then_some(r)
    }

    /// A data segment starting at `seq`, sent at `t_ns`.
    pub(crate) fn data(&mut self, t_ns: u64, seq: u32) {
        self.data_segments += 1;
        self.base.get_or_insert(seq);
        let Some(s) = self.rel(seq) else { return };
        let again = !self.sent.insert(s);
        self.pending.insert(s, (t_ns, again));
    }

    /// An ACK at `t_ns`: cumulative `ack`, and SACK blocks `[left, right)`.
    pub(crate) fn ack(&mut self, t_ns: u64, ack: u32, sack: &[(u32, u32)]) {
        let Some(a) = self.rel(ack) else { return };
        let mut spans = vec![(0, a)];
        spans.extend(
            sack.iter()
                .filter_map(|&(l, r)| Some((self.rel(l)?, self.rel(r)?))),
        );
        for (lo, hi) in spans {
            if lo >= hi {
                continue;
            }
            let covered: Vec<u32> = self.pending.range(lo..hi).map(|(&s, _)| s).collect();
            for s in covered {
                if let Some((t0, again)) = self.pending.remove(&s) {
                    let d = t_ns.saturating_sub(t0);
                    if again {
                        self.again_ns.push(d);
                    } else {
                        self.first_ns.push(d);
                    }
                }
            }
        }
    }

    /// Data segments seen.
    pub(crate) fn data_segments(&self) -> u64 {
        self.data_segments
    }

    /// Segments still pending.
    pub(crate) fn unreported(&self) -> u64 {
        self.pending.len() as u64
    }

    /// First transmissions reported.
    pub(crate) fn first(&self) -> Percentiles {
        Percentiles::of(self.first_ns.clone())
    }

    /// Retransmissions reported.
    pub(crate) fn retransmitted(&self) -> Percentiles {
        Percentiles::of(self.again_ns.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: u32 = 0xffff_f000; // wraps within the test's sequence space

    #[test]
    fn cumulative_acks_report_each_segment_once() {
        let mut c = Connection::default();
        for i in 0..4u32 {
            c.data(1_000 * u64::from(i), B.wrapping_add(i * 1000));
        }
        c.ack(5_000, B.wrapping_add(2000), &[]);
        c.ack(9_000, B.wrapping_add(4000), &[]);
        c.ack(9_500, B.wrapping_add(4000), &[]); // duplicate: nothing new
        let f = c.first();
        assert_eq!(f.count, 4);
        // 5000-0, 5000-1000, 9000-2000, 9000-3000 ns
        assert_eq!(f.p10_us, Some(4.0));
        assert_eq!(f.p99_us, Some(7.0));
        assert_eq!(c.retransmitted().count, 0);
        assert_eq!(c.unreported(), 0);
        assert_eq!(c.data_segments(), 4);
    }

    #[test]
    fn sack_blocks_report_segments_beyond_the_hole_and_retransmissions_count_apart() {
        let mut c = Connection::default();
        for i in 0..3u32 {
            c.data(0, B.wrapping_add(i * 100));
        }
        // Segment 1 lost: ACK 100 with SACK [200, 300).
        c.ack(
            10_000,
            B.wrapping_add(100),
            &[(B.wrapping_add(200), B.wrapping_add(300))],
        );
        assert_eq!(c.first().count, 2);
        assert_eq!(c.unreported(), 1);
        c.data(20_000, B.wrapping_add(100)); // the retransmission
        c.ack(23_000, B.wrapping_add(300), &[]);
        let r = c.retransmitted();
        assert_eq!((r.count, r.p50_us), (1, Some(3.0)));
        assert_eq!(c.unreported(), 0);
    }

    #[test]
    fn acks_before_any_data_and_old_sequence_numbers_are_ignored() {
        let mut c = Connection::default();
        c.ack(1, 12345, &[]);
        c.data(10, 5000);
        c.ack(20, 4000, &[(1000, 2000)]); // before the first data octet
        assert_eq!(c.first().count, 0);
        assert_eq!(c.unreported(), 1);
        assert_eq!(Percentiles::of(Vec::new()), Percentiles::default());
    }
}
