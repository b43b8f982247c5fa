//! Out-of-order FPDU location (RFC 5044 §6): given one TCP segment (sequence number and
//! octets) and the direction's marker grid, find every FPDU wholly inside it and verify it,
//! without any octet outside the segment.
//!
//! Markers give anchors: a marker whose four octets lie in the segment names the header of
//! the FPDU that contains it (`m − FPDUPTR`, or `m + 4` for FPDUPTR 0). From an anchor:
//! * forward, ULPDU_Length of each verified FPDU gives the next one (RFC 5044 §6);
//! * backward (CRC on only), the FPDU that ends exactly where the anchor starts is the unique
//!   4-aligned candidate whose ULPDU_Length says so and whose CRC verifies, and so on
//!   toward the segment start.
//!
//! So with CRC on, every FPDU wholly inside the segment is found as soon as one marker in the
//! segment belongs to an FPDU that starts inside it. A candidate that fails its CRC or marker
//! check is dropped and counted, never returned (RFC 5044 §8 allows an optimized receiver to
//! drop such segments; TCP retransmission repairs them).
//!
//! The cost is linear in the segment: candidate headers are scanned once, and the octets
//! verified per segment are bounded by `VERIFY_BUDGET_PER_OCTET` times its length; a
//! candidate beyond the budget is left unverified and counted (its octets go the in-order
//! way, like those of any segment the locator cannot use).

use crate::decoder::{verify_fpdu, DecodeError, Ulpdu, CRC_RESIDUE};
use crate::markers::{self, MarkerGrid};
use crate::seq::SeqNumber;
use crate::wire::fpdu::HEADER_LEN;
use crate::wire::marker::{Marker, MARKER_LEN};
use std::ops::Range;

/// Smallest FPDU on the wire: header, 2 octets of PAD, CRC.
const MIN_FPDU: usize = 8;

/// Octets a segment may have verified, as a multiple of its length. Verified FPDUs are
/// disjoint, so an honest segment needs at most one pass, plus one for a rare false
/// candidate (an aligned-sender guess, a ULPDU_Length look-alike in the payload). Without a
/// bound a crafted segment whose every 4-aligned offset names an FPDU ending at the anchor
/// costs ~L²/8 CRC octets (1.8 MB for 3.8 KB), for every copy of it.
const VERIFY_BUDGET_PER_OCTET: usize = 3;

/// One FPDU found and verified inside a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocatedFpdu {
    /// Sequence number of its first wire octet (its leading marker, if any).
    pub seq: SeqNumber,
    /// Its wire image inside the segment.
    pub range: Range<usize>,
    /// ULPDU_Length.
    pub ulpdu_len: u16,
}

impl LocatedFpdu {
    /// Sequence number one past its last octet.
    pub fn end_seq(&self) -> SeqNumber {
        self.seq + self.range.len()
    }

    /// The ULPDU (as pieces between markers) inside `segment`, the same octets passed to
    /// [`FpduLocator::locate`].
    pub fn ulpdu<'a>(&self, grid: &MarkerGrid, segment: &'a [u8]) -> Option<Ulpdu<'a>> {
        let wire = segment.get(self.range.clone())?;
        Some(Ulpdu::new(
            wire,
            grid.pos(self.seq),
            self.ulpdu_len,
            grid.enabled,
        ))
    }
}

/// What a [`FpduLocator::locate`] call saw besides the FPDUs it returned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocateStats {
    /// Markers read inside the segment.
    pub markers: u32,
    /// Candidates whose CRC did not verify.
    pub crc_failures: u32,
    /// Candidates with a valid CRC whose markers disagreed (would be error 3 in order).
    pub marker_mismatches: u32,
    /// Markers pointing where no FPDU header can be (inside a marker, misaligned, or into an
    /// FPDU already found).
    pub bad_pointers: u32,
    /// Octets run through the CRC (or, CRCs off, checked) for candidates.
    pub crc_octets: u64,
    /// Candidates not verified because the segment's verification budget was spent.
    pub over_budget: u32,
    /// Candidates that were the whole segment, verified from the segment's CRC (none of their
    /// octets read again: [`FpduLocator::locate_with_crc`]).
    pub crc_from_segment: u32,
}

/// Locates FPDUs in out-of-order segments of one direction.
#[derive(Debug, Clone, Copy)]
pub struct FpduLocator {
    grid: MarkerGrid,
    crc: bool,
    aligned_sender: bool,
}

impl FpduLocator {
    /// A locator for the direction described by `grid`; `crc`: CRCs were negotiated.
    pub fn new(grid: MarkerGrid, crc: bool) -> Self {
        FpduLocator {
            grid,
            crc,
            aligned_sender: false,
        }
    }

    /// Opt-in for peers known to align FPDUs with segments (RFC 5044 §5.1): also try an FPDU
    /// header at the very start of each segment (needs CRC to verify).
    pub fn with_aligned_sender(mut self, on: bool) -> Self {
        self.aligned_sender = on;
        self
    }

    /// The grid.
    pub fn grid(&self) -> &MarkerGrid {
        &self.grid
    }

    /// Where the FPDU that the first marker inside `segment` (at sequence number `seq`) points
    /// to starts: possibly before the segment (an FPDU that began in an earlier one). `None`
    /// without markers, when no whole marker lies inside, or when its pointer cannot be an
    /// FPDU header (into a marker position). Nothing is verified: a candidate for
    /// [`FpduLocator::verify_whole`].
    pub fn first_marked_start(&self, seq: SeqNumber, segment: &[u8]) -> Option<SeqNumber> {
        if !self.grid.enabled {
            return None;
        }
        let m = markers::to_next_marker(self.grid.pos(seq));
        self.marked_start(seq + m, segment.get(m..m + MARKER_LEN)?)
    }

    /// As [`FpduLocator::first_marked_start`], for the last marker inside `segment`.
    pub fn last_marked_start(&self, seq: SeqNumber, segment: &[u8]) -> Option<SeqNumber> {
        if !self.grid.enabled {
            return None;
        }
        let first = markers::to_next_marker(self.grid.pos(seq));
        let n = segment.len().checked_sub(first + MARKER_LEN)? / markers::MARKER_INTERVAL as usize;
        let m = first + n * markers::MARKER_INTERVAL as usize;
        self.marked_start(seq + m, segment.get(m..m + MARKER_LEN)?)
    }

    /// Where the FPDU that the marker `marker` (4 octets, at sequence number `at`, a marker
    /// position) points to starts; `None` when its pointer cannot be an FPDU header (into a
    /// marker position) or markers are off. Nothing is verified.
    pub fn marked_start(&self, at: SeqNumber, marker: &[u8]) -> Option<SeqNumber> {
        if !self.grid.enabled || marker.len() < MARKER_LEN {
            return None;
        }
        let ptr = Marker::new_unchecked(marker).fpdu_ptr();
        let back = markers::fpdu_start_behind(self.grid.pos(at), ptr)?;
        Some(SeqNumber(at.0.wrapping_sub(back)))
    }

    /// Sequence number of the last marker position before `seq` (markers on), for reading
    /// that marker from octets held elsewhere.
    pub fn marker_before(&self, seq: SeqNumber) -> Option<SeqNumber> {
        if !self.grid.enabled {
            return None;
        }
        let back = match self.grid.pos(seq) % markers::MARKER_INTERVAL {
            0 => markers::MARKER_INTERVAL,
            r => r,
        };
        Some(SeqNumber(seq.0.wrapping_sub(back)))
    }

    /// Wire length of the FPDU starting at `seq` whose first octets are `head` (enough to
    /// hold its header: see [`FpduLocator::header_end`]), or `None` when `head` is shorter.
    pub fn wire_len(&self, seq: SeqNumber, head: &[u8]) -> Option<usize> {
        wire_len_of(head, self.grid.pos(seq), self.grid.enabled)
    }

    /// Octets from an FPDU's start at `seq` through its header.
    pub fn header_end(&self, seq: SeqNumber) -> usize {
        markers::header_offset(self.grid.pos(seq), self.grid.enabled) + HEADER_LEN
    }

    /// Verifies `wire` as one whole FPDU starting at `seq` (its length what its header says;
    /// CRC, then every marker, as in order): the same checks an FPDU found by
    /// [`FpduLocator::locate`] passed, for an FPDU gathered from several segments.
    pub fn verify_whole(&self, seq: SeqNumber, wire: &[u8]) -> Result<LocatedFpdu, DecodeError> {
        let pos = self.grid.pos(seq);
        if self.wire_len(seq, wire) != Some(wire.len()) {
            return Err(DecodeError::Misframed {
                located: pos,
                chain: pos,
            });
        }
        let ulpdu_len = verify_fpdu(wire, pos, self.grid.enabled, self.crc)?;
        Ok(LocatedFpdu {
            seq,
            range: 0..wire.len(),
            ulpdu_len,
        })
    }

    /// Appends to `out`, in sequence order, every verified FPDU wholly inside `segment`, which
    /// starts at sequence number `seq`. `out` is not cleared (reuse it to avoid allocation).
    pub fn locate(
        &self,
        seq: SeqNumber,
        segment: &[u8],
        out: &mut Vec<LocatedFpdu>,
    ) -> LocateStats {
        self.locate_with_crc(seq, segment, None, out)
    }

    /// [`FpduLocator::locate`] with the CRC32c of the whole segment when known (taken with
    /// its checksum): an FPDU that is the whole segment — an aligned sender's — is then
    /// verified from it, its octets not read again (a valid FPDU, CRC field included, has the
    /// CRC32c residue); when that fails it is read as without.
    pub fn locate_with_crc(
        &self,
        seq: SeqNumber,
        segment: &[u8],
        segment_crc: Option<u32>,
        out: &mut Vec<LocatedFpdu>,
    ) -> LocateStats {
        let mut cx = Scan {
            grid: &self.grid,
            crc: self.crc,
            segment_crc: segment_crc.filter(|_| self.crc),
            seg: segment,
            base: self.grid.pos(seq),
            seq,
            out,
            first: 0,
            cursor: 0,
            budget: segment.len().saturating_mul(VERIFY_BUDGET_PER_OCTET),
            stats: LocateStats::default(),
        };
        cx.first = cx.out.len();
        let seg_pos = cx.base;
        if self.aligned_sender && self.crc {
            cx.forward(0);
        }
        if self.grid.enabled {
            let mut m = markers::to_next_marker(seg_pos);
            while m + MARKER_LEN <= segment.len() {
                cx.stats.markers += 1;
                if m >= cx.cursor {
                    cx.anchor(m);
                }
                m += markers::MARKER_INTERVAL as usize;
            }
        }
        let (first, stats) = (cx.first, cx.stats);
        out[first..].sort_unstable_by_key(|f| f.range.start);
        stats
    }
}

struct Scan<'a> {
    grid: &'a MarkerGrid,
    crc: bool,
    /// The CRC32c of all of `seg`, when known.
    segment_crc: Option<u32>,
    seg: &'a [u8],
    base: u32,
    seq: SeqNumber,
    out: &'a mut Vec<LocatedFpdu>,
    first: usize,
    /// Octets before this offset are covered by FPDUs already found.
    cursor: usize,
    /// Octets that may still be verified.
    budget: usize,
    stats: LocateStats,
}

/// Wire length of the FPDU whose wire image starts with `head` at stream position `pos`
/// (its ULPDU Length read past any leading marker), or `None` when `head` ends before the
/// header.
fn wire_len_of(head: &[u8], pos: u32, marked: bool) -> Option<usize> {
    let h = markers::header_offset(pos, marked);
    let b = head.get(h..h + HEADER_LEN)?;
    let len = usize::from(u16::from_be_bytes([b[0], b[1]]));
    Some(markers::fpdu_wire_len(pos, len, marked))
}

impl Scan<'_> {
    fn pos(&self, off: usize) -> u32 {
        self.base.wrapping_add(off as u32)
    }

    /// Uses the marker at segment offset `m` as an anchor.
    fn anchor(&mut self, m: usize) {
        let ptr = Marker::new_unchecked(&self.seg[m..m + MARKER_LEN]).fpdu_ptr();
        let Some(header) = m.checked_sub(usize::from(ptr)) else {
            return; // the FPDU began before this segment
        };
        let Some(back) = markers::fpdu_start_behind(self.pos(m), ptr) else {
            self.stats.bad_pointers += 1;
            return;
        };
        if header < self.cursor {
            self.stats.bad_pointers += 1;
            return;
        }
        let Some(start) = m.checked_sub(back as usize) else {
            return; // led by a marker before this segment
        };
        if start < self.cursor {
            self.stats.bad_pointers += 1;
            return;
        }
        if self.crc {
            self.backward(start);
        }
        let end = self.forward(start);
        self.cursor = self.cursor.max(end).max(m + MARKER_LEN);
    }

    /// Wire length of the FPDU whose wire image starts at `off`, if its header is inside.
    fn wire_len_at(&self, off: usize) -> Option<usize> {
        wire_len_of(self.seg.get(off..)?, self.pos(off), self.grid.enabled)
    }

    /// Verifies the FPDU at `off` of wire length `wl` and records it.
    fn try_take(&mut self, off: usize, wl: usize) -> bool {
        let Some(wire) = self.seg.get(off..off + wl) else {
            return false;
        };
        if wl > self.budget {
            self.stats.over_budget += 1;
            return false;
        }
        let whole_valid = wl == self.seg.len() && self.segment_crc == Some(CRC_RESIDUE);
        let verified = if whole_valid {
            // Its CRC is right: only its markers are checked.
            self.stats.crc_from_segment += 1;
            verify_fpdu(wire, self.pos(off), self.grid.enabled, false)
        } else {
            self.budget -= wl;
            self.stats.crc_octets += wl as u64;
            verify_fpdu(wire, self.pos(off), self.grid.enabled, self.crc)
        };
        match verified {
            Ok(ulpdu_len) => {
                self.out.push(LocatedFpdu {
                    seq: self.seq + off,
                    range: off..off + wl,
                    ulpdu_len,
                });
                true
            }
            Err(DecodeError::Marker { .. }) => {
                self.stats.marker_mismatches += 1;
                false
            }
            Err(_) => {
                self.stats.crc_failures += 1;
                false
            }
        }
    }

    /// Follows ULPDU_Length from the FPDU at `off`; returns where the chain stopped.
    fn forward(&mut self, mut off: usize) -> usize {
        while let Some(wl) = self.wire_len_at(off) {
            if off + wl > self.seg.len() || !self.try_take(off, wl) {
                break;
            }
            off += wl;
        }
        self.cursor = self.cursor.max(off);
        off
    }

    /// Finds the FPDUs that end exactly at `end`, one after the other, down to the cursor.
    fn backward(&mut self, mut end: usize) {
        let lo = self.cursor;
        let mut q = end;
        while q >= lo + 4 {
            q -= 4;
            if end - q < MIN_FPDU {
                continue;
            }
            // No FPDU starts right after a marker position: that marker would lead it.
            if self.grid.enabled
                && markers::is_marker_pos(self.pos(q).wrapping_sub(MARKER_LEN as u32))
            {
                continue;
            }
            if self.wire_len_at(q) == Some(end - q) && self.try_take(q, end - q) {
                end = q;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoder::FpduEncoder;

    struct Truth {
        wire: Vec<u8>,
        /// (wire start, wire end, ulpdu)
        fpdus: Vec<(usize, usize, Vec<u8>)>,
    }

    fn build(markers: bool, sizes: &[usize]) -> Truth {
        let mut enc = FpduEncoder::new(markers);
        let mut wire = Vec::new();
        let mut fpdus = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let u: Vec<u8> = (0..n).map(|j| (i * 13 + j) as u8).collect();
            let r = enc.encode(&u, &mut wire).unwrap();
            fpdus.push((r.start, r.end, u));
        }
        Truth { wire, fpdus }
    }

    /// An FPDU that is the whole segment, the segment's CRC known, is located without its
    /// octets read again; a corrupt one is read and rejected as without the CRC; a segment's
    /// CRC that is wrong only makes the FPDU read.
    #[test]
    fn a_whole_segment_fpdu_is_verified_from_the_segments_crc() {
        for markers in [false, true] {
            let t = build(markers, &[700, 1000, 300]);
            let grid = MarkerGrid::new(SeqNumber(1000), markers);
            let loc = FpduLocator::new(grid, true).with_aligned_sender(!markers);
            let (a, b) = (t.fpdus[1].0, t.fpdus[1].1);
            let seg = &t.wire[a..b];
            let seq = SeqNumber(1000 + a as u32);
            let (mut with, mut without) = (Vec::new(), Vec::new());
            let s = loc.locate_with_crc(seq, seg, Some(crate::crc::crc32c(seg)), &mut with);
            loc.locate(seq, seg, &mut without);
            assert_eq!(with, without);
            assert_eq!(with.len(), 1);
            assert_eq!((s.crc_from_segment, s.crc_octets), (1, 0), "{s:?}");
            let s = loc.locate_with_crc(seq, seg, Some(0x1234), &mut Vec::new());
            assert_eq!(s.crc_from_segment, 0);
            assert_eq!(s.crc_octets, seg.len() as u64);
            let mut bad = seg.to_vec();
            let last = bad.len() - 1;
            bad[last] ^= 1;
            let mut got = Vec::new();
            let s = loc.locate_with_crc(seq, &bad, Some(crate::crc::crc32c(&bad)), &mut got);
            assert!(got.is_empty());
            assert_eq!((s.crc_from_segment, s.crc_failures), (0, 1), "{s:?}");
        }
    }

    #[test]
    fn finds_fpdus_around_a_marker() {
        let t = build(true, &[100, 200, 300, 50, 700, 20, 20]);
        let grid = MarkerGrid::new(SeqNumber(1000), true);
        let loc = FpduLocator::new(grid, true);
        // A segment from octet 120 to 1200 of the stream.
        let (a, b) = (120, 1200);
        let mut out = Vec::new();
        loc.locate(SeqNumber(1000 + a as u32), &t.wire[a..b], &mut out);
        let want: Vec<_> = t.fpdus.iter().filter(|f| f.0 >= a && f.1 <= b).collect();
        assert_eq!(out.len(), want.len());
        for (got, w) in out.iter().zip(want) {
            assert_eq!(got.range, w.0 - a..w.1 - a);
            assert_eq!(got.ulpdu(&grid, &t.wire[a..b]).unwrap().to_vec(), w.2);
        }
    }

    #[test]
    fn corrupt_fpdu_is_dropped() {
        let t = build(true, &[600, 600]);
        let mut wire = t.wire.clone();
        wire[300] ^= 0x40;
        let grid = MarkerGrid::new(SeqNumber(u32::MAX - 100), true);
        let loc = FpduLocator::new(grid, true);
        let mut out = Vec::new();
        let st = loc.locate(grid.seq(0), &wire, &mut out);
        assert!(st.crc_failures >= 1);
        assert!(out.iter().all(|f| f.range.start != 0));
    }

    #[test]
    fn without_markers_only_aligned_mode_finds() {
        let t = build(false, &[100, 200]);
        let grid = MarkerGrid::new(SeqNumber(5), false);
        let mut out = Vec::new();
        FpduLocator::new(grid, true).locate(grid.seq(0), &t.wire, &mut out);
        assert!(out.is_empty());
        FpduLocator::new(grid, true)
            .with_aligned_sender(true)
            .locate(grid.seq(0), &t.wire, &mut out);
        assert_eq!(out.len(), 2);
    }

    /// A segment of length `len` built so that one marker anchors a backward search in which
    /// every 4-aligned offset holds a ULPDU_Length naming an FPDU that ends at the anchor
    /// (and none has a valid CRC): the worst case for the backward search.
    fn backward_worst_case(len: usize) -> Vec<u8> {
        let interval = markers::MARKER_INTERVAL as usize;
        let mut seg = vec![0x5au8; len];
        let last = (len - MARKER_LEN) / interval * interval;
        for m in (0..=last).step_by(interval) {
            // Every marker but the last points before the segment; the last leads an FPDU.
            let ptr: u16 = if m == last { 0 } else { 0xfffc };
            seg[m..m + MARKER_LEN].copy_from_slice(&crate::wire::marker::marker_bytes(ptr));
        }
        let mut q = last;
        while q >= 4 {
            q -= 4;
            let pos = q as u32;
            if markers::is_marker_pos(pos.wrapping_sub(MARKER_LEN as u32)) {
                continue;
            }
            let want = last - q;
            let h = q + markers::header_offset(pos, true);
            if let Some(ulen) =
                (0..=0xffffu16).find(|&u| markers::fpdu_wire_len(pos, usize::from(u), true) == want)
            {
                seg[h..h + 2].copy_from_slice(&ulen.to_be_bytes());
            }
        }
        seg
    }

    #[test]
    fn verification_cost_is_linear_in_the_segment_length() {
        let grid = MarkerGrid::new(SeqNumber(0), true);
        let loc = FpduLocator::new(grid, true);
        for len in [1500, 3800, 9000, 65_000] {
            let seg = backward_worst_case(len);
            let mut out = Vec::new();
            let st = loc.locate(SeqNumber(0), &seg, &mut out);
            assert!(out.is_empty());
            assert!(st.markers as usize >= len / 512);
            assert!(
                st.crc_octets <= (VERIFY_BUDGET_PER_OCTET * len) as u64,
                "{len} octets: {} CRC octets ({} candidates rejected)",
                st.crc_octets,
                st.crc_failures + st.marker_mismatches
            );
        }
    }

    #[test]
    fn hostile_pointers_do_not_panic() {
        let grid = MarkerGrid::new(SeqNumber(0), true);
        let loc = FpduLocator::new(grid, true);
        let mut out = Vec::new();
        for fill in [0x00u8, 0xff, 0x04, 0x80] {
            let seg = vec![fill; 3000];
            for start in [0u32, 4, 508, 510, 1] {
                loc.locate(SeqNumber(start), &seg, &mut out);
            }
        }
    }
}
