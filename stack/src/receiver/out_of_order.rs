//! Out-of-order placement (docs/architecture.md, "Out-of-order placement"): FPDUs of a
//! segment that arrived ahead of RCV.NXT are placed on arrival when the locator finds them
//! whole inside it (markers, CRC), and — when an FPDU reaches across the segment's start or
//! end — once every piece of it is in: the pieces that came earlier are read from the TCP's
//! store, the FPDU is gathered, verified like any other (CRC, then every marker) and placed;
//! the store stops counting the pieces it held.
//!
//! Why the second case matters: a sender that meets the advertised right edge with less than
//! a segment of room cuts its segment there (Linux with TCP_NODELAY, `tcp_mss_split_point`),
//! and every later segment of that send buffer follows the cut, so an aligned sender's FPDUs
//! stop starting its segments; an unaligned sender's FPDUs straddle segments always. Without
//! gathering, those FPDUs waited in the store for the hole below them to fill (at 20 % loss a
//! third of the out-of-order FPDUs, `mpa-bench demo --loss 20`).

use super::ahead::{self, PlacedAhead};
use super::placement::{Placer, SegmentKind, PLAN_PREFIX};
use super::regions::Regions;
use super::{MpaReceiver, MAX_PLACED_AHEAD};
use crate::tcp::PlacedSpans;
use mpa::crc::crc32c_append;
use mpa::decoder::Ulpdu;
use mpa::seq::SeqNumber;

/// An FPDU is gathered only when it is at most this many times longer than the segment that
/// completes it, so that a peer resending pieces of FPDUs that never verify cannot make each
/// octet it sends cost much more than its own copy and CRC (the locator's own bound is
/// alike). Honest FPDUs of up to 8 segments qualify whichever piece comes last; longer ones,
/// or a short last piece of a long one, wait for the in-order stream as before.
const GATHER_BUDGET_PER_OCTET: usize = 8;

impl MpaReceiver {
    /// Out-of-order octets `data` at `seq` (called by the TCP for each segment ahead of
    /// RCV.NXT): places every FPDU wholly inside that the locator verifies and the placement
    /// checks accept, and the FPDUs reaching across the segment's edges whose other pieces
    /// the store holds; reports them in `spans` so the TCP store does not copy (or no longer
    /// counts) them. Anything doubtful is left to the in-order path, which reports errors
    /// precisely. `data_crc`: the CRC32c of `data`, when known (the parse took it of the whole
    /// segment): an FPDU that is all of `data` is then verified from it.
    pub(crate) fn handle_segment_ahead<R: Regions + ?Sized>(
        &mut self,
        seq: SeqNumber,
        (data, data_crc): (&[u8], Option<u32>),
        spans: &mut PlacedSpans<'_>,
        regions: &mut R,
    ) {
        if !self.wants_segments_ahead() || self.placer.is_none() {
            return;
        }
        let mut located = std::mem::take(&mut self.located);
        located.clear();
        let ls = self
            .locator
            .locate_with_crc(seq, data, data_crc, &mut located);
        self.stats.located_rejected += u64::from(ls.crc_failures + ls.marker_mismatches);
        self.stats.ahead_offered += 1;
        self.stats.ahead_unlocated += u64::from(located.is_empty());
        let end = seq + data.len();
        // The FPDU that began in an earlier segment, if the first marker points before this
        // one (spans must be pushed in order: it comes first).
        let marked = self.locator.first_marked_start(seq, data);
        let mut last_end = None;
        if let Some(a) = marked
            .filter(|&a| a < seq)
            .or_else(|| self.stored_marked_start(seq, spans))
        {
            last_end = self.place_gathered(a, seq, data, spans, regions);
        }
        for f in &located {
            if !spans.has_room() || self.ahead.len() >= MAX_PLACED_AHEAD {
                self.stats.ahead_no_span += 1;
                break;
            }
            last_end = Some(f.end_seq());
            let slot = match self.ahead.slot_for(f.seq, f.range.len()) {
                ahead::Slot::Free(at) => at,
                // A retransmission of an FPDU already placed: not placed twice, but its
                // octets need not be stored either.
                ahead::Slot::Duplicate => {
                    spans.push(f.range.clone());
                    continue;
                }
                ahead::Slot::Overlaps => {
                    self.stats.ahead_overlapping += 1;
                    continue;
                }
            };
            let Some(u) = f.ulpdu(self.locator.grid(), data) else {
                continue;
            };
            let Some(p) = self.place_one(f.seq, f.range.len(), &u, regions) else {
                continue;
            };
            if !spans.push(f.range.clone()) {
                continue;
            }
            self.stats.placed_direct += 1;
            self.ahead.insert(slot, p);
        }
        // The FPDU that begins here and ends in a later segment: after the last one found
        // (its successor in the chain), or where the last marker points inside.
        // Failing both, the first marker after the segment, if the store holds it.
        let tail = last_end
            .or_else(|| {
                self.locator
                    .last_marked_start(seq, data)
                    .filter(|&a| a >= seq)
            })
            .or_else(|| {
                let at = end + mpa::markers::to_next_marker(self.locator.grid().pos(end));
                self.stored_marker(at, spans).filter(|&a| a >= seq)
            });
        if let Some(t) = tail.filter(|&t| t < end) {
            self.place_gathered(t, seq, data, spans, regions);
        }
        self.located = located;
    }

    /// Where the FPDU holding the last marker before `seq` starts, when the store holds that
    /// marker and the FPDU reaches into this segment: the FPDU that began earlier and ends
    /// here before this segment's first marker (which points past it).
    fn stored_marked_start(&self, seq: SeqNumber, spans: &PlacedSpans<'_>) -> Option<SeqNumber> {
        let at = self.locator.marker_before(seq)?;
        self.stored_marker(at, spans).filter(|&a| a < seq)
    }

    /// Where the FPDU that the marker at `at` points to starts, when the store holds that
    /// marker.
    fn stored_marker(&self, at: SeqNumber, spans: &PlacedSpans<'_>) -> Option<SeqNumber> {
        const LEN: usize = mpa::wire::marker::MARKER_LEN;
        let (p, q) = spans.stored(at, at + LEN)?;
        let mut m = [0u8; LEN];
        m[..p.len()].copy_from_slice(p);
        m[p.len()..].copy_from_slice(q);
        self.locator.marked_start(at, &m)
    }

    /// Plans and places one verified out-of-order FPDU of `wire_len` octets at `start`
    /// carrying `u`: the entry for the ahead list, or `None` when the placement checks refuse
    /// it or it must wait for the stream (a Terminate, a Read Request).
    fn place_one<R: Regions + ?Sized>(
        &mut self,
        start: SeqNumber,
        wire_len: usize,
        u: &Ulpdu<'_>,
        regions: &mut R,
    ) -> Option<PlacedAhead> {
        let placer = self.placer.as_mut()?;
        let mut head = [0u8; PLAN_PREFIX];
        let n = u.copy_prefix(&mut head);
        let mut planned = placer.plan(regions, &head[..n], u.len(), false);
        if let Err(e) = &planned {
            if placer.draw_for(e) {
                planned = placer.plan(regions, &head[..n], u.len(), false);
            }
        }
        let plan = match planned {
            Ok(p)
                if !matches!(
                    p.kind,
                    SegmentKind::PeerTerminate(..) | SegmentKind::ReadRequest(_)
                ) =>
            {
                p
            }
            _ => {
                self.stats.ahead_refused += 1;
                return None;
            }
        };
        if plan.target.is_some() && !Placer::place(regions, &plan, u) {
            return None;
        }
        // The ULPDU's CRC only serves the flow digest (the FPDU CRC was checked).
        let ulpdu_crc = if self.digest.is_some() {
            u.pieces().fold(0, crc32c_append)
        } else {
            0
        };
        self.stats.placed_octets += plan.payload_len as u64;
        Some(PlacedAhead {
            start,
            wire_len,
            plan,
            ulpdu_crc,
            ulpdu_len: u.len(),
        })
    }

    /// Places the FPDU starting at `a` that reaches across an edge of the segment `data` at
    /// `seq`, gathered from the store's copied octets and the segment, if every piece is in
    /// and it verifies. Returns where it ends when it is placed now or was already.
    fn place_gathered<R: Regions + ?Sized>(
        &mut self,
        a: SeqNumber,
        seq: SeqNumber,
        data: &[u8],
        spans: &mut PlacedSpans<'_>,
        regions: &mut R,
    ) -> Option<SeqNumber> {
        let end = seq + data.len();
        if !spans.has_room() || self.ahead.len() >= MAX_PLACED_AHEAD {
            return None;
        }
        let mut wire = std::mem::take(&mut self.gathered);
        let r = self.place_gathered_in(a, seq, data, spans, regions, &mut wire);
        self.gathered = wire;
        let (b, placed) = r?;
        let piece = |x: SeqNumber| x.distance_from(seq) as usize;
        let (lo, hi) = (if a < seq { seq } else { a }, if b > end { end } else { b });
        spans.push(piece(lo)..piece(hi));
        if let Some((slot, p)) = placed {
            if a < seq {
                spans.push_stored(a, seq);
            }
            if b > end {
                spans.push_stored(end, b);
            }
            self.stats.placed_gathered += 1;
            self.ahead.insert(slot, p);
        }
        Some(b)
    }

    /// [`MpaReceiver::place_gathered`] with the gather buffer `wire` taken out of `self`:
    /// the FPDU's end, and its slot in the ahead list and entry (`None`: placed before).
    #[allow(clippy::type_complexity)]
    fn place_gathered_in<R: Regions + ?Sized>(
        &mut self,
        a: SeqNumber,
        seq: SeqNumber,
        data: &[u8],
        spans: &PlacedSpans<'_>,
        regions: &mut R,
        wire: &mut Vec<u8>,
    ) -> Option<(SeqNumber, Option<(usize, PlacedAhead)>)> {
        let end = seq + data.len();
        if !gather(a, a + self.locator.header_end(a), seq, data, spans, wire) {
            return None;
        }
        let wire_len = self.locator.wire_len(a, wire)?;
        let b = a + wire_len;
        // It must reach into this segment and out of it (the locator took those inside).
        if !(a < end && b > seq) || (a >= seq && b <= end) {
            return None;
        }
        if wire_len > data.len().saturating_mul(GATHER_BUDGET_PER_OCTET) {
            self.stats.gather_over_budget += 1;
            return None;
        }
        // Copies only once every piece is in (the common miss costs a few lookups).
        if !gather(a, b, seq, data, spans, wire) {
            return None;
        }
        let slot = match self.ahead.slot_for(a, wire_len) {
            ahead::Slot::Free(at) => at,
            ahead::Slot::Duplicate => return Some((b, None)),
            ahead::Slot::Overlaps => {
                self.stats.ahead_overlapping += 1;
                return None;
            }
        };
        let f = match self.locator.verify_whole(a, wire) {
            Ok(f) => f,
            Err(_) => {
                self.stats.located_rejected += 1;
                return None;
            }
        };
        let u = f.ulpdu(self.locator.grid(), wire)?;
        let p = self.place_one(a, wire_len, &u, regions)?;
        Some((b, Some((slot, p))))
    }
}

/// Gathers the stream octets `[s, e)` into `out` from the segment `data` at `seq` and, for
/// the parts outside it, from the store's copied octets; `false` (nothing copied) when any is
/// missing.
fn gather(
    s: SeqNumber,
    e: SeqNumber,
    seq: SeqNumber,
    data: &[u8],
    spans: &PlacedSpans<'_>,
    out: &mut Vec<u8>,
) -> bool {
    out.clear();
    let end = seq + data.len();
    let none: (&[u8], &[u8]) = (&[], &[]);
    // Every piece is looked up before any octet is copied.
    let below = if s < seq {
        match spans.stored(s, if e < seq { e } else { seq }) {
            Some(p) => p,
            None => return false,
        }
    } else {
        none
    };
    let above = if e > end {
        match spans.stored(if s > end { s } else { end }, e) {
            Some(p) => p,
            None => return false,
        }
    } else {
        none
    };
    let (lo, hi) = (if s > seq { s } else { seq }, if e < end { e } else { end });
    let inside = if lo < hi {
        let (i, j) = (
            lo.distance_from(seq) as usize,
            hi.distance_from(seq) as usize,
        );
        match data.get(i..j) {
            Some(d) => d,
            None => return false,
        }
    } else {
        &[]
    };
    for piece in [below.0, below.1, inside, above.0, above.1] {
        out.extend_from_slice(piece);
    }
    true
}
