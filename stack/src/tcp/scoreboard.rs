//! What the peer has SACKed above SND.UNA (RFC 2018 §5), as a sorted table of disjoint
//! ranges.
//!
//! Bounded, allocated once: sized by the connection for the send buffer (every other
//! segment of a full buffer lost, as a drop-tail queue does to slow start's overshoot);
//! when full, the highest range is forgotten (holes near SND.UNA matter most; a forgotten
//! range only costs a needless retransmission).

use mpa::seq::SeqNumber;

/// The capacity of [`Scoreboard::default`].
#[cfg(test)]
const DEFAULT_RANGES: usize = 32;

#[derive(Debug, Clone, Copy, Default)]
struct Range {
    start: SeqNumber,
    end: SeqNumber,
}

impl Range {
    fn len(&self) -> usize {
        self.end.distance_from(self.start) as usize
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Scoreboard {
    ranges: Vec<Range>,
    cap: usize,
    /// Octets SACKed: the sum of the ranges' lengths.
    total: usize,
}

#[cfg(test)]
impl Default for Scoreboard {
    fn default() -> Self {
        Scoreboard::with_capacity(DEFAULT_RANGES)
    }
}

impl Scoreboard {
    /// A table of at most `cap` ranges (at least 4), allocated now.
    pub(crate) fn with_capacity(cap: usize) -> Scoreboard {
        let cap = cap.max(4);
        Scoreboard {
            ranges: Vec::with_capacity(cap),
            cap,
            total: 0,
        }
    }

    fn slice(&self) -> &[Range] {
        &self.ranges
    }

    pub(crate) fn clear(&mut self) {
        self.ranges.clear();
        self.total = 0;
    }

    /// Octets SACKed.
    pub(crate) fn sacked(&self) -> usize {
        self.total
    }

    /// The end of the highest SACKed range.
    pub(crate) fn highest(&self) -> Option<SeqNumber> {
        self.slice().last().map(|r| r.end)
    }

    /// If `seq` is SACKed, the end of its range.
    pub(crate) fn sacked_end(&self, seq: SeqNumber) -> Option<SeqNumber> {
        let i = self.ranges.partition_point(|r| r.end <= seq);
        self.ranges.get(i).filter(|r| r.start <= seq).map(|r| r.end)
    }

    /// RFC 6675 §4 IsLost as a boundary: the start of the highest range such that at
    /// least `ranges` SACKed ranges, or more than `octets` SACKed octets, lie at or above
    /// it. Every un-SACKed octet below it is lost; `None` when no octet is.
    pub(crate) fn lost_boundary(&self, ranges: usize, octets: usize) -> Option<SeqNumber> {
        let mut count = 0;
        let mut above = 0;
        for r in self.slice().iter().rev() {
            count += 1;
            above += r.len();
            if count >= ranges || above > octets {
                return Some(r.start);
            }
        }
        None
    }

    /// The start of the first SACKed range above `seq`.
    pub(crate) fn next_start_after(&self, seq: SeqNumber) -> Option<SeqNumber> {
        let i = self.ranges.partition_point(|r| r.start <= seq);
        self.ranges.get(i).map(|r| r.start)
    }

    /// Octets SACKed inside `[from, to)`.
    pub(crate) fn sacked_between(&self, from: SeqNumber, to: SeqNumber) -> usize {
        if to <= from {
            return 0;
        }
        // Only the ranges that end above `from` and start below `to`.
        let lo = self.ranges.partition_point(|r| r.end <= from);
        let hi = self.ranges.partition_point(|r| r.start < to);
        self.ranges[lo..hi.max(lo)]
            .iter()
            .map(|r| {
                let lo = if r.start > from { r.start } else { from };
                let hi = if r.end < to { r.end } else { to };
                if hi > lo {
                    hi.distance_from(lo) as usize
                } else {
                    0
                }
            })
            .sum()
    }

    /// Adds a block the caller validated (SND.UNA < start < end <= SND.MAX); returns whether
    /// anything new was learnt.
    pub(crate) fn add(&mut self, start: SeqNumber, end: SeqNumber) -> bool {
        // The ranges [i, j) touch [start, end): they merge with it.
        let i = self.ranges.partition_point(|r| r.end < start);
        let j = self.ranges.partition_point(|r| r.start <= end);
        let (mut s, mut e) = (start, end);
        let mut merged = 0;
        if i < j {
            if self.ranges[i].start < s {
                s = self.ranges[i].start;
            }
            if self.ranges[j - 1].end > e {
                e = self.ranges[j - 1].end;
            }
            merged = self.ranges[i..j].iter().map(Range::len).sum();
        }
        let new = e.distance_from(s) as usize - merged;
        if new == 0 {
            return false;
        }
        let r = Range { start: s, end: e };
        if i < j {
            self.ranges[i] = r;
            self.ranges.drain(i + 1..j);
        } else {
            if self.ranges.len() == self.cap {
                if i == self.ranges.len() {
                    // Higher than everything and no room: forget it.
                    return false;
                }
                // Forget the highest.
                if let Some(h) = self.ranges.pop() {
                    self.total -= h.len();
                }
            }
            self.ranges.insert(i, r);
        }
        self.total += new;
        true
    }

    /// Forgets everything at or below `una`.
    pub(crate) fn prune(&mut self, una: SeqNumber) {
        let k = self.ranges.partition_point(|r| r.end <= una);
        self.ranges.drain(..k);
        if let Some(r) = self.ranges.first_mut() {
            if r.start < una {
                r.start = una;
            }
        }
        self.total = self.ranges.iter().map(Range::len).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_prune_bound() {
        let s = |x: u32| SeqNumber(x.wrapping_add(u32::MAX - 50));
        let mut b = Scoreboard::default();
        assert!(b.add(s(10), s(20)));
        assert!(b.add(s(30), s(40)));
        assert!(!b.add(s(12), s(18)));
        assert!(b.add(s(20), s(30)));
        assert_eq!(b.sacked(), 30);
        assert_eq!(b.sacked_end(s(15)), Some(s(40)));
        assert_eq!(b.sacked_end(s(40)), None);
        assert_eq!(b.sacked_between(s(15), s(35)), 20);
        assert_eq!(b.sacked_between(s(0), s(100)), 30);
        assert_eq!(b.sacked_between(s(35), s(15)), 0);
        b.prune(s(25));
        assert_eq!(b.sacked(), 15);
        for i in 0..40u32 {
            b.add(s(100 + i * 10), s(105 + i * 10));
        }
        assert_eq!(b.ranges.len(), DEFAULT_RANGES);
        assert_eq!(
            b.lost_boundary(3, 1000),
            Some(s(100 + (DEFAULT_RANGES as u32 - 4) * 10))
        );
        assert_eq!(b.next_start_after(s(41)), Some(s(100)));
        // A low range still gets in, pushing out the highest.
        assert!(b.add(s(50), s(60)));
        assert_eq!(b.next_start_after(s(41)), Some(s(50)));
    }
}
