//! The bounded out-of-order store.
//!
//! A ring of `capacity` octets indexed by sequence offset from RCV.NXT: the octet with
//! sequence number `s` lives at `(head + (s - RCV.NXT)) % capacity`, so data never moves once
//! written, and in-order delivery from outside the store (zero-copy, straight from the
//! caller's frame) only moves `head`. Beside it two sorted tables of disjoint ranges: which
//! octets are present (`ranges`, non-adjacent), and which of those the caller placed itself
//! (`placed`, a subset, not copied and not counted against the octet limit). Octets are
//! held up to `span` above RCV.NXT (the window's reach), but copied only below the ring's end
//! (its size is the octet limit): beyond it only placed octets, so the window a sender
//! whose segments are placed directly may use is not bounded by the ring.
//!
//! Bounds are by memory: copied octets ≤ `limit`; ranges ≤ `max_ranges` (the connection
//! sizes it at one per MSS of the limit, so full-sized segments never reach it before the
//! octets do); placed ranges ≤ `PLACED_PER_RANGE × max_ranges` (past that, placed octets are
//! copied like the others). When a segment does not fit, ranges are pruned from the far end
//! (highest sequence numbers first, as Linux prunes its out-of-order queue) as long as
//! everything pruned lies above the new segment; otherwise the new segment is the farthest
//! and is refused. (The ring's size is the octet limit, so a segment's copies always fit the
//! limit and pruning serves the range tables.) Tables and ring are allocated once; the ring
//! is zero-initialised memory
//! (`calloc`), so its pages are only committed once a connection actually sees reordering.
//!
//! SACK (RFC 2018 §4): a small most-recently-changed list of sequence numbers, one inside
//! each recently changed range; the first block is the range of the newest segment, then the
//! most recently reported others, then the lowest ranges. D-SACK (RFC 2883) puts the
//! duplicate first and, when it lies above RCV.NXT, its enclosing range second.

use std::collections::VecDeque;
use std::ops::Range;

use mpa::seq::SeqNumber;

use crate::wire::tcp::{SackBlock, SackBlocks, MAX_SACK_BLOCKS};

/// Entries of the most-recently-changed list.
const MRU: usize = 8;
/// Placed ranges the table holds per present range.
const PLACED_PER_RANGE: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: SeqNumber,
    end: SeqNumber,
}

impl Span {
    fn len(&self) -> usize {
        self.end.distance_from(self.start) as usize
    }

    /// Whether `seq` lies in `[start, end)`, compared as offsets from `base` (RCV.NXT).
    fn holds(&self, base: SeqNumber, seq: SeqNumber) -> bool {
        let rel = |x: SeqNumber| x.distance_from(base);
        rel(self.start) <= rel(seq) && rel(seq) < rel(self.end)
    }
}

/// What [`Reassembly::insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Insert {
    /// Stored; `new` octets were not held before; `dup` is the first part that was (for a
    /// D-SACK, RFC 2883).
    Stored {
        new: usize,
        dup: Option<(SeqNumber, SeqNumber)>,
    },
    /// Every octet was held already.
    Duplicate,
    /// Storing would exceed the octet limit or the range table even after pruning what lies
    /// above the segment: nothing was stored.
    Full,
}

pub(crate) struct Reassembly {
    /// Copied octets, at `(head + offset from RCV.NXT) % len`: only offsets below its length
    /// can be copied.
    ring: Box<[u8]>,
    /// How far above RCV.NXT octets are tracked (the window's reach, at least the ring):
    /// beyond the ring only octets the caller placed itself, which need no copy.
    span: usize,
    /// Ring index of RCV.NXT.
    head: usize,
    /// Present octets: sorted, disjoint, non-adjacent, all above RCV.NXT.
    ranges: VecDeque<Span>,
    /// The parts of `ranges` the caller placed itself: sorted, disjoint.
    placed: VecDeque<Span>,
    max_ranges: usize,
    /// Octets copied into the ring (what `limit` bounds).
    copied: usize,
    /// Octets in `placed`.
    placed_octets: usize,
    limit: usize,
    /// One octet of each recently changed range, newest first (may be stale: looked up).
    mru: [SeqNumber; MRU],
    mru_len: usize,
    /// Ranges and octets (copied or placed) pruned to make room.
    pruned_ranges: u64,
    pruned_octets: u64,
}

impl std::fmt::Debug for Reassembly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The ring is not printed: it is megabytes.
        f.debug_struct("Reassembly")
            .field("ring", &self.ring.len())
            .field("span", &self.span)
            .field("head", &self.head)
            .field("copied", &self.copied)
            .field("placed_octets", &self.placed_octets)
            .field("limit", &self.limit)
            .field("ranges", &self.ranges.len())
            .field("placed", &self.placed.len())
            .finish()
    }
}

/// `[i, j)`: the ranges of `v` touching or overlapping `[rs, re)` (offsets from `base`).
fn touching(v: &VecDeque<Span>, base: SeqNumber, rs: u32, re: u32) -> (usize, usize) {
    // Most out-of-order segments arrive at or above the start of the highest range (in
    // order behind a hole): then only that range can touch them, and every lower one ends
    // below `rs` (spans are sorted and non-adjacent). Two binary searches per call over a
    // few hundred ranges were a fifth of the worker's time at 20 % loss.
    match v.back() {
        None => return (0, 0),
        Some(b) if b.start.distance_from(base) <= rs => {
            let n = v.len();
            return (n - usize::from(b.end.distance_from(base) >= rs), n);
        }
        Some(_) => {}
    }
    let i = v.partition_point(|r| r.end.distance_from(base) < rs);
    let j = v.partition_point(|r| r.start.distance_from(base) <= re);
    (i, j.max(i))
}

/// Adds `[s, e)` to `v`, merging what it touches.
fn merge_in(v: &mut VecDeque<Span>, base: SeqNumber, s: SeqNumber, e: SeqNumber) {
    let rel = |x: SeqNumber| x.distance_from(base);
    let (rs, re) = (rel(s), rel(e));
    let (i, j) = touching(v, base, rs, re);
    if i == j {
        v.insert(i, Span { start: s, end: e });
        return;
    }
    let (first, last) = (v[i], v[j - 1]);
    v[i] = Span {
        start: if rel(first.start) < rs {
            first.start
        } else {
            s
        },
        end: if rel(last.end) > re { last.end } else { e },
    };
    v.drain(i + 1..j);
}

/// Removes every octet of `v` below `nxt`; returns how many.
fn trim_below(v: &mut VecDeque<Span>, nxt: SeqNumber) -> usize {
    let mut gone = 0;
    while let Some(r) = v.front_mut() {
        if r.end <= nxt {
            gone += r.len();
            v.pop_front();
        } else {
            if r.start < nxt {
                gone += nxt.distance_from(r.start) as usize;
                r.start = nxt;
            }
            break;
        }
    }
    gone
}

/// Calls `f` with each part of `[a, b)` (offsets from `base`) not held in `v[i..j]`.
fn gaps(
    v: &VecDeque<Span>,
    (i, j): (usize, usize),
    base: SeqNumber,
    (a, b): (u32, u32),
    mut f: impl FnMut(u32, u32),
) {
    let mut at = a;
    for r in v.range(i..j) {
        let (lo, hi) = (r.start.distance_from(base), r.end.distance_from(base));
        if hi <= at {
            continue;
        }
        if lo >= b {
            break;
        }
        if lo > at {
            f(at, lo);
        }
        at = hi;
    }
    if at < b {
        f(at, b);
    }
}

/// The parts of `[0, len)` outside `placed` (sorted, disjoint, relative to the same start),
/// in order: what `insert_except` copies.
fn unplaced(
    placed: impl Iterator<Item = (usize, usize)>,
    len: usize,
) -> impl Iterator<Item = Range<usize>> {
    let mut placed = placed.fuse();
    let mut at = 0usize;
    let mut tail_done = false;
    std::iter::from_fn(move || {
        for (a, b) in placed.by_ref() {
            let piece = (a > at).then_some(at..a);
            at = at.max(b);
            if piece.is_some() {
                return piece;
            }
        }
        if tail_done || at >= len {
            return None;
        }
        tail_done = true;
        Some(at..len)
    })
}

impl Reassembly {
    /// A store tracking octets up to `span` above RCV.NXT, copying at most `limit` of them,
    /// all below `limit` (the ring's size); `max_ranges` disjoint ranges.
    pub(crate) fn new(span: usize, limit: usize, max_ranges: usize) -> Reassembly {
        let max_ranges = max_ranges.max(1);
        let span = span.max(1);
        let capacity = limit.clamp(1, span);
        Reassembly {
            ring: vec![0u8; capacity].into_boxed_slice(),
            span,
            head: 0,
            ranges: VecDeque::with_capacity(max_ranges),
            placed: VecDeque::with_capacity(max_ranges * PLACED_PER_RANGE),
            max_ranges,
            copied: 0,
            placed_octets: 0,
            limit: limit.min(capacity),
            mru: [SeqNumber(0); MRU],
            mru_len: 0,
            pruned_ranges: 0,
            pruned_octets: 0,
        }
    }

    /// Ring size: octets are only copied below `RCV.NXT + capacity`.
    pub(crate) fn capacity(&self) -> usize {
        self.ring.len()
    }

    /// Reach: octets are only held (copied below the ring's end, placed by the caller
    /// above it) below `RCV.NXT + span`.
    pub(crate) fn span(&self) -> usize {
        self.span
    }

    /// The octet limit on copied octets.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Octets copied into the store (placed ones excluded): what the limit bounds.
    pub(crate) fn stored(&self) -> usize {
        self.copied
    }

    /// Octets held that the caller placed itself.
    pub(crate) fn placed(&self) -> usize {
        self.placed_octets
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Number of disjoint ranges held.
    pub(crate) fn range_count(&self) -> usize {
        self.ranges.len()
    }

    /// The ranges held, as offsets from `rcv_nxt`.
    #[cfg(test)]
    pub(crate) fn held_offsets(&self, rcv_nxt: SeqNumber) -> Vec<Range<usize>> {
        let rel = |x: SeqNumber| x.distance_from(rcv_nxt) as usize;
        self.ranges
            .iter()
            .map(|r| rel(r.start)..rel(r.end))
            .collect()
    }

    /// The most ranges held at once.
    #[cfg(test)]
    pub(crate) fn max_ranges(&self) -> usize {
        self.max_ranges
    }

    /// (ranges, octets) pruned from the far end so far.
    pub(crate) fn pruned(&self) -> (u64, u64) {
        (self.pruned_ranges, self.pruned_octets)
    }

    /// Stores `data` at `seq`. Octets at or below `rcv_nxt` or at or beyond
    /// `rcv_nxt + span` are ignored (the caller trims; this is defence).
    #[cfg(test)]
    pub(crate) fn insert(&mut self, rcv_nxt: SeqNumber, seq: SeqNumber, data: &[u8]) -> Insert {
        self.insert_except(rcv_nxt, seq, data, &[])
    }

    /// Octets of `placed` inside `[s, e)`, which is a whole range of `ranges` (so a placed
    /// range is either inside it or outside).
    fn placed_within(&self, s: SeqNumber, e: SeqNumber, base: SeqNumber) -> usize {
        let rel = |x: SeqNumber| x.distance_from(base);
        let (i, j) = touching(&self.placed, base, rel(s), rel(e));
        self.placed
            .range(i..j)
            .filter(|p| p.start >= s && p.end <= e)
            .map(Span::len)
            .sum()
    }

    /// As `insert`, but the octets of `data` inside `placed` (sorted, disjoint offset
    /// ranges) are only marked as present, not copied: their owner consumed them already
    /// and skips them when they are drained. They do not count against the octet limit.
    /// Beyond the ring only placed octets are taken: a segment with an octet to copy there
    /// is refused whole (`Full`), like one the limit cannot take.
    pub(crate) fn insert_except(
        &mut self,
        rcv_nxt: SeqNumber,
        seq: SeqNumber,
        data: &[u8],
        placed: &[Range<usize>],
    ) -> Insert {
        let mut front = 0usize;
        let reach = self.span as u64;
        // Clip to (rcv_nxt, rcv_nxt + span) in offset space.
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
        if off >= reach {
            return Insert::Full;
        }
        let keep = (reach - off).min(data.len() as u64) as usize;
        let data = &data[..keep];
        if data.is_empty() {
            return Insert::Duplicate;
        }
        let base = rcv_nxt;
        let s = rcv_nxt + off as u32;
        let e = s + data.len();
        let rel = |x: SeqNumber| x.distance_from(base);
        let (rs, re) = (rel(s), rel(e));
        let (i, j) = touching(&self.ranges, base, rs, re);
        let mut held = 0usize;
        let mut dup = None;
        for r in self.ranges.range(i..j) {
            let lo = rel(r.start).max(rs);
            let hi = rel(r.end).min(re);
            if hi > lo {
                held += (hi - lo) as usize;
                dup.get_or_insert((base + lo, base + hi));
            }
        }
        let new = data.len() - held;
        if new == 0 {
            return Insert::Duplicate;
        }
        // Placed spans in offset space (`placed` is relative to the data as passed, of which
        // `front` octets were trimmed as old), clipped to what is kept. A span whose new
        // parts do not fit the placed table is copied instead.
        let span_at = |r: &Range<usize>| {
            let a = r.start.saturating_sub(front).min(data.len());
            let b = r.end.saturating_sub(front).min(data.len());
            (off as u32 + a as u32, off as u32 + b as u32)
        };
        let placed_room = self.max_ranges * PLACED_PER_RANGE;
        let mut accepted = 0usize; // spans taken, a prefix of `placed`
        let mut pieces = 0usize;
        let mut new_placed = 0usize;
        for r in placed {
            let (a, b) = span_at(r);
            let (mut n, mut octets) = (0usize, 0usize);
            gaps(&self.ranges, (i, j), base, (a, b), |x, y| {
                n += 1;
                octets += (y - x) as usize;
            });
            if self.placed.len() + pieces + n > placed_room {
                break;
            }
            accepted += 1;
            pieces += n;
            new_placed += octets;
        }
        let placed = &placed[..accepted];
        // The placed spans relative to `data`; everything outside them is copied (held
        // octets too: the same octets again), so the last copied octet must lie inside the
        // ring: a copy past it would land on another offset's octets.
        let placed_in_data = || {
            placed.iter().map(|r| {
                let (a, b) = span_at(r);
                ((a - off as u32) as usize, (b - off as u32) as usize)
            })
        };
        if unplaced(placed_in_data(), data.len())
            .last()
            .is_some_and(|last| off as usize + last.end > self.ring.len())
        {
            return Insert::Full;
        }
        let new_copied = new - new_placed;
        // Room: prune whole ranges from the far end, all strictly above this segment.
        let extra_range = usize::from(i == j);
        let (mut k, mut freed, mut pb) = (0usize, 0usize, self.placed.len());
        while self.copied + new_copied - freed.min(self.copied) > self.limit
            || self.ranges.len() - k + extra_range > self.max_ranges
        {
            let n = self.ranges.len() - k;
            if n <= j {
                return Insert::Full;
            }
            let r = self.ranges[n - 1];
            let mut p = 0;
            while pb > 0 && self.placed[pb - 1].start >= r.start {
                p += self.placed[pb - 1].len();
                pb -= 1;
            }
            freed += r.len() - p;
            k += 1;
        }
        for _ in 0..k {
            if let Some(r) = self.ranges.pop_back() {
                let p = self.placed_within(r.start, r.end, base);
                while self.placed.back().is_some_and(|x| x.start >= r.start) {
                    self.placed.pop_back();
                }
                self.placed_octets -= p;
                self.copied -= r.len() - p;
                self.pruned_ranges += 1;
                self.pruned_octets += r.len() as u64;
            }
        }
        if k > 0 {
            self.forget_pruned(base);
        }
        // Copy what was not placed.
        for piece in unplaced(placed_in_data(), data.len()) {
            self.copy_in(off as usize + piece.start, &data[piece]);
        }
        // Mark the new placed parts.
        let Reassembly {
            ranges,
            placed: table,
            placed_octets,
            ..
        } = self;
        for r in placed {
            gaps(ranges, (i, j), base, span_at(r), |x, y| {
                merge_in(table, base, base + x, base + y);
                *placed_octets += (y - x) as usize;
            });
        }
        merge_in(&mut self.ranges, base, s, e);
        self.copied += new_copied;
        self.touch(base, e + u32::MAX); // e - 1: inside the merged range
        Insert::Stored { new, dup }
    }

    /// Whether `[s, e)` (above `rcv_nxt`, not empty) is held and copied: inside one present
    /// range, no octet of it placed by the caller.
    fn copied_span(&self, rcv_nxt: SeqNumber, s: SeqNumber, e: SeqNumber) -> bool {
        let rel = |x: SeqNumber| x.distance_from(rcv_nxt);
        let (rs, re) = (rel(s), rel(e));
        if rs >= re || re as usize > self.ring.len() || rs >= 1 << 31 {
            return false;
        }
        let Some(k) = self.find(rcv_nxt, s) else {
            return false;
        };
        if rel(self.ranges[k].end) < re {
            return false;
        }
        let (i, j) = touching(&self.placed, rcv_nxt, rs, re);
        // Touching includes adjacent placed ranges; only an overlap disqualifies.
        !self
            .placed
            .range(i..j)
            .any(|p| rel(p.start) < re && rel(p.end) > rs)
    }

    /// The copied octets `[s, e)` as one or two slices of the ring (it may wrap), when
    /// every one of them is held and none was placed by the caller.
    pub(crate) fn copied_octets(
        &self,
        rcv_nxt: SeqNumber,
        s: SeqNumber,
        e: SeqNumber,
    ) -> Option<(&[u8], &[u8])> {
        if !self.copied_span(rcv_nxt, s, e) {
            return None;
        }
        let cap = self.ring.len();
        let n = e.distance_from(s) as usize;
        let pos = (self.head + s.distance_from(rcv_nxt) as usize) % cap;
        let first = (cap - pos).min(n);
        Some((&self.ring[pos..pos + first], &self.ring[..n - first]))
    }

    /// The caller consumed the copied octets `[s, e)` itself (placed them): from now on they
    /// count as placed, not against the octet limit, and are skipped by their owner when
    /// drained. `false` (nothing changed) when they are not all held and copied, or the
    /// placed table is full.
    pub(crate) fn mark_placed(&mut self, rcv_nxt: SeqNumber, s: SeqNumber, e: SeqNumber) -> bool {
        if !self.copied_span(rcv_nxt, s, e) {
            return false;
        }
        if self.placed.len() >= self.max_ranges * PLACED_PER_RANGE {
            return false;
        }
        let n = e.distance_from(s) as usize;
        merge_in(&mut self.placed, rcv_nxt, s, e);
        self.placed_octets += n;
        self.copied -= n;
        true
    }

    /// Moves the range holding `seq` to the front of the most-recently-changed list, and
    /// forgets entries of the same range or of none.
    ///
    /// By bounds, not by a search per entry: an entry's octet stays held until RCV.NXT
    /// passes it (its offset from `base` then wraps above the highest range's end) or its
    /// range is pruned (`forget_pruned` drops those entries when it happens); and ranges
    /// only merge, so an entry inside this range's bounds names this range.
    fn touch(&mut self, base: SeqNumber, seq: SeqNumber) {
        let rel = |x: SeqNumber| x.distance_from(base);
        let this = self.find(base, seq).map(|k| self.ranges[k]);
        let top = self.ranges.back().map_or(0, |r| rel(r.end));
        let mut keep = [seq; MRU];
        let mut n = 1;
        for k in 0..self.mru_len {
            let p = self.mru[k];
            if n == MRU {
                break;
            }
            if !this.is_some_and(|r| r.holds(base, p)) && rel(p) < top {
                keep[n] = p;
                n += 1;
            }
        }
        self.mru = keep;
        self.mru_len = n;
    }

    /// Drops the most-recently-changed entries whose ranges were pruned (rare: only when
    /// the store is full), so that `touch` may judge the rest by bounds.
    fn forget_pruned(&mut self, base: SeqNumber) {
        let mut n = 0;
        for k in 0..self.mru_len {
            let p = self.mru[k];
            if self.find(base, p).is_some() {
                self.mru[n] = p;
                n += 1;
            }
        }
        self.mru_len = n;
    }

    /// Whether the range holding `seq` also holds one of `hints`.
    pub(crate) fn same_range(
        &self,
        rcv_nxt: SeqNumber,
        seq: SeqNumber,
        hints: &[SeqNumber],
    ) -> bool {
        let Some(k) = self.find(rcv_nxt, seq) else {
            return false;
        };
        // Range k holds a hint exactly when the hint lies within its bounds.
        let r = self.ranges[k];
        hints.iter().any(|&h| r.holds(rcv_nxt, h))
    }

    /// How many SACK blocks an ACK needs to report every range changed by the segments
    /// since the last ACK (`hints`: an octet of each) and by `[seq, seq + len)` too (above
    /// `rcv_nxt`, not yet stored): the distinct ranges holding a hint, plus one if the segment
    /// starts a new range or changes one no hint lies in. At most one more than the truth
    /// (a segment that bridges two hinted ranges merges them). No allocation.
    pub(crate) fn blocks_for_changes(
        &self,
        rcv_nxt: SeqNumber,
        hints: &[SeqNumber],
        seq: SeqNumber,
        len: usize,
    ) -> usize {
        let mut idx = [usize::MAX; MAX_SACK_BLOCKS + 1];
        let mut n = 0;
        for &h in hints {
            if let Some(k) = self.find(rcv_nxt, h) {
                if !idx[..n].contains(&k) && n < idx.len() {
                    idx[n] = k;
                    n += 1;
                }
            }
        }
        let rel = |x: SeqNumber| x.distance_from(rcv_nxt);
        let (i, j) = touching(&self.ranges, rcv_nxt, rel(seq), rel(seq + len));
        if i == j || (i..j).any(|k| !idx[..n].contains(&k)) {
            n += 1;
        }
        n
    }

    /// The index of the range holding `seq`, comparing offsets from `base` (at or below the
    /// lowest range).
    fn find(&self, base: SeqNumber, seq: SeqNumber) -> Option<usize> {
        let rel = |x: SeqNumber| x.distance_from(base);
        // The highest range first (see `touching`).
        let last = self.ranges.back()?;
        if rel(last.start) <= rel(seq) {
            return (rel(seq) < rel(last.end)).then(|| self.ranges.len() - 1);
        }
        let k = self.ranges.partition_point(|r| rel(r.end) <= rel(seq));
        (k < self.ranges.len() && rel(self.ranges[k].start) <= rel(seq)).then_some(k)
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
    #[inline]
    pub(crate) fn advance(&mut self, new_nxt: SeqNumber, n: usize) {
        // Called for every in-order segment: a compare and a subtraction instead of two
        // divisions by the (run-time) capacity, which cost ~4 % of the pipeline's samples.
        // `head < cap` always, so one subtraction brings `head + step < 2 cap` back.
        let cap = self.ring.len();
        let step = if n < cap { n } else { n % cap };
        self.head += step;
        if self.head >= cap {
            self.head -= cap;
        }
        if self.ranges.is_empty() {
            return;
        }
        let gone = trim_below(&mut self.ranges, new_nxt);
        let p = trim_below(&mut self.placed, new_nxt);
        self.placed_octets -= p;
        self.copied -= gone - p;
    }

    /// Octets that can be drained at `rcv_nxt`.
    pub(crate) fn readable(&self, rcv_nxt: SeqNumber) -> usize {
        match self.ranges.front() {
            Some(r) if r.start == rcv_nxt => r.len(),
            _ => 0,
        }
    }

    /// Hands the octets readable at `rcv_nxt` to `f` (in order, one slice per pass over the
    /// ring: it may wrap, and a range with placed octets past its end goes round again),
    /// frees them, and returns how many; the caller moves RCV.NXT on by that many.
    pub(crate) fn drain(&mut self, rcv_nxt: SeqNumber, mut f: impl FnMut(&[u8])) -> usize {
        let n = self.readable(rcv_nxt);
        if n == 0 {
            return 0;
        }
        // A range reaching past the ring (placed octets there) goes round it more than once:
        // the owner skips the placed octets, whatever the ring holds at their places.
        let cap = self.ring.len();
        let mut left = n;
        while left > 0 {
            let k = (cap - self.head).min(left);
            f(&self.ring[self.head..self.head + k]);
            left -= k;
            self.head = (self.head + k) % cap;
        }
        self.ranges.pop_front();
        let p = trim_below(&mut self.placed, rcv_nxt + n);
        self.placed_octets -= p;
        self.copied -= n - p;
        n
    }

    /// Fills `out` with up to `max` blocks (RFC 2018 §4): with a D-SACK (RFC 2883) the
    /// duplicate first and the range enclosing it second; then the most recently changed
    /// ranges, newest first; then the lowest others. No allocation; a few binary searches.
    pub(crate) fn sack_blocks(
        &self,
        rcv_nxt: SeqNumber,
        max: usize,
        dsack: Option<(SeqNumber, SeqNumber)>,
        out: &mut SackBlocks,
    ) {
        out.clear();
        let max = max.min(MAX_SACK_BLOCKS);
        let mut used = [usize::MAX; MAX_SACK_BLOCKS];
        let push = |out: &mut SackBlocks, k: usize, used: &mut [usize; MAX_SACK_BLOCKS]| {
            if out.len() >= max || used.contains(&k) {
                return;
            }
            let r = self.ranges[k];
            used[out.len()] = k;
            out.push(SackBlock {
                left: r.start,
                right: r.end,
            });
        };
        if let Some((l, r)) = dsack.filter(|_| max > 0) {
            out.push(SackBlock { left: l, right: r });
            if let Some(k) = self.find(rcv_nxt, l) {
                push(out, k, &mut used);
            }
        }
        for &p in &self.mru[..self.mru_len] {
            if let Some(k) = self.find(rcv_nxt, p) {
                push(out, k, &mut used);
            }
        }
        for k in 0..self.ranges.len() {
            if out.len() >= max {
                break;
            }
            push(out, k, &mut used);
        }
    }
}

#[cfg(test)]
mod tests;
