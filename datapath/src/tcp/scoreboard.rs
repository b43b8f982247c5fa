//! What the peer has SACKed above SND.UNA (RFC 2018 §5), as a small sorted range table.
//!
//! Bounded: when full, the highest range is forgotten (holes near SND.UNA matter most; a
//! forgotten range only costs a needless retransmission).

use mpa::seq::SeqNumber;

/// Enough for a window of a few hundred segments at 20 % loss; each lookup is a scan, done
/// per ACK and per transmitted segment only.
const MAX_RANGES: usize = 32;

#[derive(Debug, Clone, Copy, Default)]
struct Range {
    start: SeqNumber,
    end: SeqNumber,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Scoreboard {
    ranges: [Range; MAX_RANGES],
    len: usize,
}

impl Scoreboard {
    fn slice(&self) -> &[Range] {
        &self.ranges[..self.len]
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Octets SACKed.
    pub(crate) fn sacked(&self) -> usize {
        self.slice()
            .iter()
            .map(|r| r.end.distance_from(r.start) as usize)
            .sum()
    }

    /// The end of the highest SACKed range.
    pub(crate) fn highest(&self) -> Option<SeqNumber> {
        self.slice().last().map(|r| r.end)
    }

    /// If `seq` is SACKed, the end of its range.
    pub(crate) fn sacked_end(&self, seq: SeqNumber) -> Option<SeqNumber> {
        self.slice()
            .iter()
            .find(|r| r.start <= seq && seq < r.end)
            .map(|r| r.end)
    }

    /// RFC 6675 §4 IsLost as a boundary: the start of the highest range such that at
    /// least `ranges` SACKed ranges, or more than `octets` SACKed octets, lie at or above
    /// it. Every un-SACKed octet below it is lost; `None` when no octet is.
    pub(crate) fn lost_boundary(&self, ranges: usize, octets: usize) -> Option<SeqNumber> {
        let mut count = 0;
        let mut above = 0;
        for r in self.slice().iter().rev() {
            count += 1;
            above += r.end.distance_from(r.start) as usize;
            if count >= ranges || above > octets {
                return Some(r.start);
            }
        }
        None
    }

    /// The start of the first SACKed range above `seq`.
    pub(crate) fn next_start_after(&self, seq: SeqNumber) -> Option<SeqNumber> {
        self.slice().iter().find(|r| r.start > seq).map(|r| r.start)
    }

    /// Octets SACKed inside `[from, to)`.
    pub(crate) fn sacked_between(&self, from: SeqNumber, to: SeqNumber) -> usize {
        if to <= from {
            return 0;
        }
        self.slice()
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
        let before = self.sacked();
        // Merge every range that touches [start, end).
        let (mut s, mut e) = (start, end);
        let mut kept = [Range::default(); MAX_RANGES];
        let mut n = 0;
        for r in self.slice() {
            if r.end < s || r.start > e {
                kept[n] = *r;
                n += 1;
            } else {
                if r.start < s {
                    s = r.start;
                }
                if r.end > e {
                    e = r.end;
                }
            }
        }
        let pos = kept[..n].iter().position(|r| r.start > s).unwrap_or(n);
        if n == MAX_RANGES {
            if pos == n {
                // Higher than everything and no room: forget it.
                return false;
            }
            n -= 1; // forget the highest
        }
        kept.copy_within(pos..n, pos + 1);
        kept[pos] = Range { start: s, end: e };
        self.ranges = kept;
        self.len = n + 1;
        self.sacked() != before
    }

    /// Forgets everything at or below `una`.
    pub(crate) fn prune(&mut self, una: SeqNumber) {
        let mut n = 0;
        for i in 0..self.len {
            let mut r = self.ranges[i];
            if r.end <= una {
                continue;
            }
            if r.start < una {
                r.start = una;
            }
            self.ranges[n] = r;
            n += 1;
        }
        self.len = n;
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
        assert_eq!(b.len, MAX_RANGES);
        assert_eq!(b.lost_boundary(3, 1000), Some(s(100 + (MAX_RANGES as u32 - 4) * 10)));
        assert_eq!(b.next_start_after(s(41)), Some(s(100)));
        // A low range still gets in, pushing out the highest.
        assert!(b.add(s(50), s(60)));
        assert_eq!(b.next_start_after(s(41)), Some(s(50)));
    }
}
