//! The bounded out-of-order store.
//!
//! A ring of `capacity` octets indexed by sequence offset from RCV.NXT: the octet with
//! sequence number `s` lives at `(head + (s - RCV.NXT)) % capacity`, so data never moves once
//! written, and in-order delivery from outside the store (zero-copy, straight from the
//! caller's frame) only moves `head`. Beside it a small sorted table of disjoint,
//! non-adjacent ranges says which octets are present, each with a recency stamp for SACK
//! (RFC 2018 §4: first block = the most recently changed range).
//!
//! Bounds: octets held ≤ `limit`, ranges ≤ `max_ranges`; both tables are allocated once.
//! The ring is zero-initialised memory (`calloc`), so its pages are only committed once a
//! connection actually sees reordering.

use mpa::seq::SeqNumber;
use std::ops::Range;

use crate::wire::tcp::{SackBlock, SackBlocks};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OooRange {
    start: SeqNumber,
    end: SeqNumber,
    stamp: u64,
}

/// What [`Reassembly::insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Insert {
    /// Stored; `new` octets were not held before.
    Stored { new: usize },
    /// Every octet was held already.
    Duplicate,
    /// Storing would exceed the octet limit or the range table: nothing was stored.
    Full,
}

pub(crate) struct Reassembly {
    ring: Box<[u8]>,
    /// Ring index of RCV.NXT.
    head: usize,
    /// Sorted by sequence (relative to RCV.NXT), disjoint, non-adjacent, all above RCV.NXT.
    ranges: Vec<OooRange>,
    max_ranges: usize,
    stored: usize,
    limit: usize,
    clock: u64,
}

impl std::fmt::Debug for Reassembly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The ring is not printed: it is megabytes.
        f.debug_struct("Reassembly")
            .field("capacity", &self.ring.len())
            .field("head", &self.head)
            .field("stored", &self.stored)
            .field("limit", &self.limit)
            .field("ranges", &self.ranges)
            .finish()
    }
}

impl Reassembly {
    pub(crate) fn new(capacity: usize, limit: usize, max_ranges: usize) -> Reassembly {
        let max_ranges = max_ranges.max(1);
        Reassembly {
            ring: vec![0u8; capacity.max(1)].into_boxed_slice(),
            head: 0,
            ranges: Vec::with_capacity(max_ranges),
            max_ranges,
            stored: 0,
            limit: limit.min(capacity),
            clock: 0,
        }
    }

    /// Ring size: data is only stored below `RCV.NXT + capacity`.
    pub(crate) fn capacity(&self) -> usize {
        self.ring.len()
    }

    /// Octets held.
    pub(crate) fn stored(&self) -> usize {
        self.stored
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Number of disjoint ranges held.
    #[cfg(test)]
    pub(crate) fn range_count(&self) -> usize {
        self.ranges.len()
    }

    /// Stores `data` at `seq`. Octets at or below `rcv_nxt` or at or beyond
    /// `rcv_nxt + capacity` are ignored (the caller trims; this is defence).
    #[cfg(test)]
    pub(crate) fn insert(&mut self, rcv_nxt: SeqNumber, seq: SeqNumber, data: &[u8]) -> Insert {
        self.insert_except(rcv_nxt, seq, data, &[])
    }

    /// As `insert`, but the octets of `data` inside `placed` (sorted, disjoint offset
    /// ranges) are only marked as present, not copied: their owner consumed them already
    /// and skips them when they are drained.
    pub(crate) fn insert_except(
        &mut self,
        rcv_nxt: SeqNumber,
        seq: SeqNumber,
        data: &[u8],
        placed: &[Range<usize>],
    ) -> Insert {
        let mut front = 0usize;
        let cap = self.ring.len() as u64;
        // Clip to (rcv_nxt, rcv_nxt + capacity) in offset space.
        let mut off = u64::from(seq.distance_from(rcv_nxt));
        let mut data = data;
        if off >= 1 << 31 {
            // seq is before rcv_nxt: skip the old octets.
            let skip = (1u64 << 32) - off;
            if skip >= data.len() as u64 {
                return Insert::Duplicate;
            }
            data = &data[skip as usize..];
            front = skip as usize;
            off = 0;
        }
        if off >= cap {
            return Insert::Full;
        }
        let keep = (cap - off).min(data.len() as u64) as usize;
        let data = &data[..keep];
        if data.is_empty() {
            return Insert::Duplicate;
        }
        let s = rcv_nxt + off as u32;
        let e = s + data.len();
        let rel = |x: SeqNumber| x.distance_from(rcv_nxt);
        let (rs, re) = (rel(s), rel(e));
        // Ranges touching or overlapping [s, e): i..j.
        let i = self.ranges.partition_point(|r| rel(r.end) < rs);
        let j = self.ranges.partition_point(|r| rel(r.start) <= re);
        let mut held = 0usize;
        for r in &self.ranges[i..j] {
            let lo = rel(r.start).max(rs);
            let hi = rel(r.end).min(re);
            held += hi.saturating_sub(lo) as usize;
        }
        let new = data.len() - held;
        if new == 0 {
            return Insert::Duplicate;
        }
        if self.stored + new > self.limit || (i == j && self.ranges.len() >= self.max_ranges) {
            return Insert::Full;
        }
        // Copy what was not placed (`placed` is relative to the data as passed, of which
        // `front` octets were trimmed as old).
        let mut at = 0usize;
        for r in placed {
            let s = r.start.saturating_sub(front).min(data.len());
            let e = r.end.saturating_sub(front).min(data.len());
            if s > at {
                self.copy_in(off as usize + at, &data[at..s]);
            }
            at = at.max(e);
        }
        if at < data.len() {
            self.copy_in(off as usize + at, &data[at..]);
        }
        self.clock += 1;
        let merged = if i == j {
            OooRange {
                start: s,
                end: e,
                stamp: self.clock,
            }
        } else {
            let first = self.ranges[i];
            let last = self.ranges[j - 1];
            OooRange {
                start: if rel(first.start) < rs {
                    first.start
                } else {
                    s
                },
                end: if rel(last.end) > re { last.end } else { e },
                stamp: self.clock,
            }
        };
        if i == j {
            self.ranges.insert(i, merged);
        } else {
            self.ranges[i] = merged;
            self.ranges.drain(i + 1..j);
        }
        self.stored += new;
        Insert::Stored { new }
    }

    fn copy_in(&mut self, off: usize, data: &[u8]) {
        let cap = self.ring.len();
        let pos = (self.head + off) % cap;
        let first = (cap - pos).min(data.len());
        self.ring[pos..pos + first].copy_from_slice(&data[..first]);
        self.ring[..data.len() - first].copy_from_slice(&data[first..]);
    }

    /// RCV.NXT moved forward by `n` octets delivered from outside the store, to `new_nxt`.
    /// O(1) when nothing is held.
    pub(crate) fn advance(&mut self, new_nxt: SeqNumber, n: usize) {
        self.head = (self.head + n % self.ring.len()) % self.ring.len();
        if self.ranges.is_empty() {
            return;
        }
        let mut gone = 0;
        for r in self.ranges.iter_mut() {
            if r.end <= new_nxt {
                self.stored -= r.end.distance_from(r.start) as usize;
                gone += 1;
            } else {
                if r.start < new_nxt {
                    self.stored -= new_nxt.distance_from(r.start) as usize;
                    r.start = new_nxt;
                }
                break;
            }
        }
        self.ranges.drain(..gone);
    }

    /// Octets that can be drained at `rcv_nxt`.
    pub(crate) fn readable(&self, rcv_nxt: SeqNumber) -> usize {
        match self.ranges.first() {
            Some(r) if r.start == rcv_nxt => r.end.distance_from(r.start) as usize,
            _ => 0,
        }
    }

    /// Hands the octets readable at `rcv_nxt` to `f` (one or two slices: the ring may wrap),
    /// frees them, and returns how many; the caller moves RCV.NXT on by that many.
    pub(crate) fn drain(&mut self, rcv_nxt: SeqNumber, mut f: impl FnMut(&[u8])) -> usize {
        let n = self.readable(rcv_nxt);
        if n == 0 {
            return 0;
        }
        let cap = self.ring.len();
        let first = (cap - self.head).min(n);
        f(&self.ring[self.head..self.head + first]);
        if first < n {
            f(&self.ring[..n - first]);
        }
        self.head = (self.head + n) % cap;
        self.stored -= n;
        self.ranges.remove(0);
        n
    }

    /// Fills `out` with up to `max` blocks, most recently changed first (RFC 2018 §4).
    pub(crate) fn sack_blocks(&self, max: usize, out: &mut SackBlocks) {
        out.clear();
        let mut below = u64::MAX;
        for _ in 0..max {
            let Some(r) = self
                .ranges
                .iter()
                .filter(|r| r.stamp < below)
                .max_by_key(|r| r.stamp)
            else {
                break;
            };
            below = r.stamp;
            out.push(SackBlock {
                left: r.start,
                right: r.end,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn drain_all(r: &mut Reassembly, nxt: &mut SeqNumber, out: &mut Vec<u8>) {
        loop {
            let n = r.drain(*nxt, |s| out.extend_from_slice(s));
            if n == 0 {
                break;
            }
            *nxt = *nxt + n;
        }
    }

    #[test]
    fn placed_spans_are_marked_but_not_copied() {
        let base = SeqNumber(100);
        let mut r = Reassembly::new(64, 64, 4);
        let data: Vec<u8> = (1..=20u8).collect();
        // Octets 4..10 and 12..15 of the segment were placed by the caller.
        assert_eq!(
            r.insert_except(base, base + 5u32, &data, &[4..10, 12..15]),
            Insert::Stored { new: 20 }
        );
        let mut sb = SackBlocks::new();
        r.sack_blocks(4, &mut sb);
        assert_eq!(
            sb.as_slice(),
            &[SackBlock {
                left: base + 5u32,
                right: base + 25u32
            }]
        );
        // Fill the hole from outside and drain: placed octets come back stale (zero).
        r.advance(base + 5u32, 5);
        let mut out = Vec::new();
        let mut nxt = base + 5u32;
        drain_all(&mut r, &mut nxt, &mut out);
        let mut want = data.clone();
        want[4..10].fill(0);
        want[12..15].fill(0);
        assert_eq!(out, want);
        // Old octets trimmed at the front shift the spans with them.
        let mut r = Reassembly::new(64, 64, 4);
        assert_eq!(
            r.insert_except(
                base,
                SeqNumber(98),
                &data[..8],
                std::slice::from_ref(&(3..5))
            ),
            Insert::Stored { new: 6 }
        );
        let mut out = Vec::new();
        let mut nxt = base;
        drain_all(&mut r, &mut nxt, &mut out);
        assert_eq!(out, vec![3, 0, 0, 6, 7, 8]);
    }

    #[test]
    fn merge_overlap_and_drain_across_wrap() {
        let base = SeqNumber(u32::MAX - 5);
        let mut r = Reassembly::new(16, 16, 4);
        let data: Vec<u8> = (0..16u8).collect();
        // [4,8) then [10,12) then [6,11) bridging both.
        assert_eq!(
            r.insert(base, base + 4u32, &data[4..8]),
            Insert::Stored { new: 4 }
        );
        assert_eq!(
            r.insert(base, base + 10u32, &data[10..12]),
            Insert::Stored { new: 2 }
        );
        assert_eq!(r.range_count(), 2);
        assert_eq!(
            r.insert(base, base + 6u32, &data[6..11]),
            Insert::Stored { new: 2 }
        );
        assert_eq!(r.range_count(), 1);
        assert_eq!(r.stored(), 8);
        assert_eq!(r.insert(base, base + 5u32, &data[5..9]), Insert::Duplicate);
        let mut sb = SackBlocks::new();
        r.sack_blocks(4, &mut sb);
        assert_eq!(
            sb.as_slice(),
            &[SackBlock {
                left: base + 4u32,
                right: base + 12u32
            }]
        );
        // Deliver [0,4) from outside (zero copy): the store advances and [4,12) is readable.
        let mut nxt = base + 4u32;
        r.advance(nxt, 4);
        assert_eq!(r.readable(nxt), 8);
        let mut out = Vec::new();
        drain_all(&mut r, &mut nxt, &mut out);
        assert_eq!(out, &data[4..12]);
        assert_eq!(r.stored(), 0);
        // The ring wraps: store [14, 18) relative to the old base, which spans the ring end.
        let more: Vec<u8> = (100..120u8).collect();
        assert_eq!(
            r.insert(nxt, nxt + 2u32, &more[2..10]),
            Insert::Stored { new: 8 }
        );
        r.advance(nxt + 2u32, 2);
        nxt = nxt + 2u32;
        let mut out = Vec::new();
        drain_all(&mut r, &mut nxt, &mut out);
        assert_eq!(out, &more[2..10]);
    }

    #[test]
    fn limits() {
        let nxt = SeqNumber(1000);
        let mut r = Reassembly::new(100, 10, 2);
        assert_eq!(
            r.insert(nxt, nxt + 1u32, &[1; 6]),
            Insert::Stored { new: 6 }
        );
        // 6 + 5 > 10
        assert_eq!(r.insert(nxt, nxt + 20u32, &[2; 5]), Insert::Full);
        assert_eq!(
            r.insert(nxt, nxt + 20u32, &[2; 2]),
            Insert::Stored { new: 2 }
        );
        // a third range
        assert_eq!(r.insert(nxt, nxt + 40u32, &[3; 1]), Insert::Full);
        // but extending an existing one is fine
        assert_eq!(
            r.insert(nxt, nxt + 7u32, &[1; 2]),
            Insert::Stored { new: 2 }
        );
        assert_eq!(r.stored(), 10);
        // beyond the ring: refused, never indexed
        assert_eq!(r.insert(nxt, nxt + 100u32, &[9; 1]), Insert::Full);
        // partly beyond: clipped
        let mut r = Reassembly::new(100, 100, 4);
        assert_eq!(
            r.insert(nxt, nxt + 98u32, &[9; 5]),
            Insert::Stored { new: 2 }
        );
        // before rcv_nxt: old octets skipped
        assert_eq!(
            r.insert(nxt, nxt + (-3i32) as u32, &[9; 3]),
            Insert::Duplicate
        );
        // ... and what is left starts at rcv_nxt: stored, readable at once.
        assert_eq!(
            r.insert(nxt, SeqNumber(997), &[9; 5]),
            Insert::Stored { new: 2 }
        );
        assert_eq!(r.readable(nxt), 2);
    }

    #[test]
    fn advance_trims_and_drops_ranges() {
        let nxt = SeqNumber(0);
        let mut r = Reassembly::new(64, 64, 8);
        r.insert(nxt, SeqNumber(2), &[0; 3]); // [2,5)
        r.insert(nxt, SeqNumber(8), &[0; 4]); // [8,12)
        r.advance(SeqNumber(10), 10);
        assert_eq!(r.stored(), 2);
        assert_eq!(r.readable(SeqNumber(10)), 2);
    }

    #[test]
    fn sack_order_is_most_recent_first() {
        let nxt = SeqNumber(0);
        let mut r = Reassembly::new(1000, 1000, 8);
        for s in [100u32, 300, 500, 700, 900] {
            r.insert(nxt, SeqNumber(s), &[0; 10]);
        }
        r.insert(nxt, SeqNumber(310), &[0; 10]); // touches [300,310): most recent
        let mut sb = SackBlocks::new();
        r.sack_blocks(3, &mut sb);
        let lefts: Vec<u32> = sb.as_slice().iter().map(|b| b.left.0).collect();
        assert_eq!(lefts, [300, 900, 700]);
        assert_eq!(sb.as_slice()[0].right, SeqNumber(320));
    }

    /// One operation of the model test: store a segment out of order, or deliver a segment
    /// in order from outside (as the connection does), then drain.
    #[derive(Debug, Clone)]
    enum Op {
        Insert { off: u32, len: usize },
        InOrder { len: usize },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (1u32..200, 1usize..60).prop_map(|(off, len)| Op::Insert { off, len }),
            1 => (1usize..40).prop_map(|len| Op::InOrder { len }),
        ]
    }

    proptest! {
        /// Against a naive model (a bitmap of held octets over the whole stream): random
        /// overlapping inserts give the same delivered stream, octet for octet, and the
        /// bounds hold at every step.
        #[test]
        fn matches_naive_model(start in any::<u32>(), cap in 64usize..256, limit in 1usize..256,
                               ops in proptest::collection::vec(op(), 1..120)) {
            let stream: Vec<u8> = (0..100_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
            let base = SeqNumber(start);
            let mut r = Reassembly::new(cap, limit, 6);
            let mut nxt = 0usize; // delivered so far
            let mut held = vec![false; stream.len()];
            let mut out = Vec::new();
            for op in ops {
                match op {
                    Op::Insert { off, len } => {
                        let s = nxt + off as usize;
                        let res = r.insert(base + nxt, base + s, &stream[s..s + len]);
                        if s >= nxt + cap {
                            prop_assert_eq!(res, Insert::Full);
                            continue;
                        }
                        let e = (s + len).min(nxt + cap);
                        let new_in_model = (s..e).filter(|&k| !held[k]).count();
                        match res {
                            Insert::Stored { new } => {
                                prop_assert_eq!(new, new_in_model);
                                for h in &mut held[s..e] { *h = true; }
                            }
                            Insert::Duplicate => prop_assert_eq!(new_in_model, 0),
                            Insert::Full => prop_assert!(new_in_model > 0),
                        }
                    }
                    Op::InOrder { len } => {
                        out.extend_from_slice(&stream[nxt..nxt + len]);
                        for h in &mut held[nxt..nxt + len] { *h = false; }
                        nxt += len;
                        r.advance(base + nxt, len);
                    }
                }
                prop_assert!(r.stored() <= limit);
                prop_assert!(r.range_count() <= 6);
                prop_assert_eq!(r.stored(), held.iter().filter(|&&h| h).count());
                loop {
                    let before = out.len();
                    let n = r.drain(base + nxt, |s| out.extend_from_slice(s));
                    if n == 0 { break; }
                    for h in &mut held[nxt..nxt + n] { *h = false; }
                    nxt += n;
                    prop_assert_eq!(out.len() - before, n);
                }
                // The model's next octet is not held (else drain would have taken it).
                prop_assert!(!held[nxt]);
                prop_assert_eq!(&out[..], &stream[..nxt]);
            }
        }
    }
}
