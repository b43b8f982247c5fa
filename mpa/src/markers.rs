//! The marker grid (RFC 5044 §4.2–4.3) and the wire layout of an FPDU at a stream position.
//!
//! Positions are octet offsets from SeqStart (the first octet of Full Operation, where the
//! first marker sits) modulo 2^32. Because 512 divides 2^32, `pos % 512` places markers
//! correctly across sequence-number wrap.
//!
//! An FPDU's wire image: an optional *leading* marker (when the FPDU starts on a marker
//! position: FPDUPTR 0, covered by this FPDU's CRC), then the header, ULPDU, PAD and CRC with a
//! marker inserted at every multiple of 512. A marker right after the CRC belongs to the next
//! FPDU. Everything is 4-aligned, so a marker never splits a field and the CRC field always
//! forms the last four wire octets; the CRC covers every wire octet before it.

use crate::seq::SeqNumber;
use crate::wire::fpdu::{self, MAX_ULPDU, MIN_MULPDU};
use crate::wire::marker::MARKER_LEN;

/// Octets from one marker to the next.
pub const MARKER_INTERVAL: u32 = 512;
/// Payload octets between two markers.
const BETWEEN_MARKERS: usize = MARKER_INTERVAL as usize - MARKER_LEN;

/// Where markers fall in one direction of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkerGrid {
    /// TCP sequence number of the first octet of Full Operation (the first marker).
    pub seq_start: SeqNumber,
    /// Whether this direction carries markers at all.
    pub enabled: bool,
}

impl MarkerGrid {
    /// A grid for a direction that starts Full Operation at `seq_start`.
    pub fn new(seq_start: SeqNumber, enabled: bool) -> Self {
        MarkerGrid { seq_start, enabled }
    }

    /// Stream position of a sequence number.
    #[inline]
    pub fn pos(&self, seq: SeqNumber) -> u32 {
        seq.distance_from(self.seq_start)
    }

    /// Sequence number of a stream position.
    #[inline]
    pub fn seq(&self, pos: u32) -> SeqNumber {
        self.seq_start + pos
    }
}

/// Whether a marker starts at stream position `pos`.
#[inline]
pub fn is_marker_pos(pos: u32) -> bool {
    pos.is_multiple_of(MARKER_INTERVAL)
}

/// How far before the marker at stream position `marker_pos` the FPDU its pointer `ptr`
/// names begins (RFC 5044 §4.3): 0 when the pointer is 0 (the marker fell between FPDUs and
/// belongs to the next); `None` when the pointer names a marker position, where no header
/// can be. A header right behind a marker position belongs to an FPDU that marker leads
/// (its own pointer was 0), so that FPDU begins `MARKER_LEN` earlier. The one rule for every
/// reader of a marker: the in-segment locator and a marker read from octets held elsewhere.
#[inline]
pub fn fpdu_start_behind(marker_pos: u32, ptr: u16) -> Option<u32> {
    let ptr = u32::from(ptr);
    if ptr == 0 {
        return Some(0);
    }
    let header = marker_pos.wrapping_sub(ptr);
    if is_marker_pos(header) {
        return None;
    }
    Some(if is_marker_pos(header.wrapping_sub(MARKER_LEN as u32)) {
        ptr + MARKER_LEN as u32
    } else {
        ptr
    })
}

/// Octets from `pos` to the next marker position (0 when `pos` is one).
#[inline]
pub fn to_next_marker(pos: u32) -> usize {
    ((MARKER_INTERVAL - pos % MARKER_INTERVAL) % MARKER_INTERVAL) as usize
}

/// Wire octets of an FPDU whose marker-free form is `content_len` octets (header through CRC)
/// starting at stream position `start`.
#[inline]
pub fn wire_len(start: u32, content_len: usize, markers: bool) -> usize {
    if !markers {
        return content_len;
    }
    let (lead, room) = match to_next_marker(start) {
        0 => (MARKER_LEN, BETWEEN_MARKERS),
        r => (0, r),
    };
    let inner = content_len.saturating_sub(room).div_ceil(BETWEEN_MARKERS);
    lead + content_len + MARKER_LEN * inner
}

/// Offset of the ULPDU_Length field in the FPDU's wire image (4 with a leading marker).
#[inline]
pub fn header_offset(start: u32, markers: bool) -> usize {
    if markers && is_marker_pos(start) {
        MARKER_LEN
    } else {
        0
    }
}

/// Wire octets of the FPDU carrying a ULPDU of `ulpdu_len` octets at `start`.
#[inline]
pub fn fpdu_wire_len(start: u32, ulpdu_len: usize, markers: bool) -> usize {
    wire_len(start, fpdu::fpdu_len(ulpdu_len), markers)
}

/// MULPDU from EMSS (RFC 5044 §5: with markers `EMSS − (6 + 4·⌈EMSS/512⌉ + EMSS mod 4)`,
/// without `EMSS − (6 + EMSS mod 4)`), never below 128 nor above 64768.
pub fn mulpdu(emss: usize, markers: bool) -> usize {
    let overhead = 6 + emss % 4 + if markers { 4 * emss.div_ceil(512) } else { 0 };
    emss.saturating_sub(overhead).clamp(MIN_MULPDU, MAX_ULPDU)
}

/// The largest ULPDU whose FPDU fits in `room` wire octets at `start`, if any does.
pub fn max_ulpdu_in(start: u32, room: usize, markers: bool) -> Option<usize> {
    // wire_len is monotonic in the ULPDU length: binary search over 0..=MAX_ULPDU.
    if fpdu_wire_len(start, 0, markers) > room {
        return None;
    }
    let (mut lo, mut hi) = (0usize, MAX_ULPDU);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fpdu_wire_len(start, mid, markers) <= room {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo)
}

/// One piece of an FPDU's wire image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// A marker at `wire` (offset in the wire image) whose FPDUPTR must be `fpdu_ptr`.
    Marker {
        /// Offset in the wire image.
        wire: usize,
        /// The FPDUPTR a sender writes there.
        fpdu_ptr: u16,
    },
    /// `len` octets of the marker-free FPDU, from `content` on, at `wire`.
    Content {
        /// Offset in the wire image.
        wire: usize,
        /// Offset in the marker-free FPDU.
        content: usize,
        /// Octets.
        len: usize,
    },
}

/// The pieces of an FPDU's wire image, in order.
#[derive(Debug, Clone)]
pub struct WireLayout {
    pos: u32,
    wire: usize,
    content: usize,
    content_len: usize,
    header_wire: usize,
    markers: bool,
}

impl WireLayout {
    /// The layout of `content_len` marker-free octets starting at stream position `start`.
    pub fn new(start: u32, content_len: usize, markers: bool) -> Self {
        WireLayout {
            pos: start,
            wire: 0,
            content: 0,
            content_len,
            header_wire: header_offset(start, markers),
            markers,
        }
    }
}

impl Iterator for WireLayout {
    type Item = Piece;

    #[inline]
    fn next(&mut self) -> Option<Piece> {
        if self.content >= self.content_len {
            return None;
        }
        if self.markers && is_marker_pos(self.pos) {
            // The leading marker points at the header right behind it: FPDUPTR 0.
            let fpdu_ptr = if self.content == 0 {
                0
            } else {
                // Within one FPDU (≤ 66 KiB) the distance fits; the low two bits are zero.
                (self.wire - self.header_wire) as u16
            };
            let piece = Piece::Marker {
                wire: self.wire,
                fpdu_ptr,
            };
            self.wire += MARKER_LEN;
            self.pos = self.pos.wrapping_add(MARKER_LEN as u32);
            return Some(piece);
        }
        let room = if self.markers {
            to_next_marker(self.pos)
        } else {
            usize::MAX
        };
        let len = (self.content_len - self.content).min(room);
        let piece = Piece::Content {
            wire: self.wire,
            content: self.content,
            len,
        };
        self.wire += len;
        self.content += len;
        self.pos = self.pos.wrapping_add(len as u32);
        Some(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fpdu_start_behind_follows_the_pointer_and_the_leading_marker() {
        // Pointer 0: the marker is the FPDU's first octets.
        assert_eq!(fpdu_start_behind(1024, 0), Some(0));
        // A header in the middle of the interval: the pointer is the distance.
        assert_eq!(fpdu_start_behind(1024, 100), Some(100));
        // A header right behind the previous marker: that marker leads the FPDU.
        assert_eq!(fpdu_start_behind(1024, 508), Some(512));
        // A header at a marker position is impossible (the marker is there).
        assert_eq!(fpdu_start_behind(1024, 512), None);
        assert_eq!(fpdu_start_behind(1024, 1024), None);
        // Before the stream's first marker, positions wrap like sequence numbers.
        assert_eq!(fpdu_start_behind(0, 100), Some(100));
        // 512 - 65532 is 4 past a marker position (2^32 is a multiple of 512).
        assert_eq!(fpdu_start_behind(512, 65532), Some(65536));
        assert_eq!(fpdu_start_behind(512, 65528), Some(65528));
    }

    fn layout_len(start: u32, content: usize, markers: bool) -> usize {
        WireLayout::new(start, content, markers)
            .map(|p| match p {
                Piece::Marker { .. } => MARKER_LEN,
                Piece::Content { len, .. } => len,
            })
            .sum()
    }

    #[test]
    fn wire_len_matches_layout() {
        for start in (0u32..2048)
            .step_by(4)
            .chain([u32::MAX - 3, u32::MAX - 511])
        {
            for content in (8..3000).step_by(4) {
                for markers in [false, true] {
                    assert_eq!(
                        wire_len(start, content, markers),
                        layout_len(start, content, markers),
                        "start {start} content {content}"
                    );
                }
            }
        }
    }

    #[test]
    fn rfc_example_pointers() {
        // The first FPDU starts at SeqStart behind the first marker; if it continues past 512
        // the marker there has FPDUPTR 508 (docs/protocol.md, "Markers").
        let pieces: Vec<_> = WireLayout::new(0, 1000, true).collect();
        assert_eq!(
            pieces[0],
            Piece::Marker {
                wire: 0,
                fpdu_ptr: 0
            }
        );
        assert_eq!(
            pieces[1],
            Piece::Content {
                wire: 4,
                content: 0,
                len: 508
            }
        );
        assert_eq!(
            pieces[2],
            Piece::Marker {
                wire: 512,
                fpdu_ptr: 508
            }
        );
        // RFC 5044 Figure 6: an FPDU at 0x1ec has a marker right after ULPDU_Length, 0x14.
        let pieces: Vec<_> = WireLayout::new(0x1ec, 48, true).collect();
        assert_eq!(
            pieces[0],
            Piece::Content {
                wire: 0,
                content: 0,
                len: 0x14
            }
        );
        assert_eq!(
            pieces[1],
            Piece::Marker {
                wire: 0x14,
                fpdu_ptr: 0x14
            }
        );
    }

    #[test]
    fn marker_between_fpdus_belongs_to_next() {
        // Content that ends exactly on a marker position takes no marker.
        assert_eq!(wire_len(4, 508, true), 508);
        assert_eq!(wire_len(4, 512, true), 516);
        // Content starting on a marker position takes it as a leading marker.
        assert_eq!(header_offset(512, true), 4);
        assert_eq!(wire_len(512, 8, true), 12);
    }

    #[test]
    fn mulpdu_formula() {
        // EMSS 1448 (MSS 1460 less 12 of timestamps): markers 1448 - (6 + 12 + 0) = 1430.
        assert_eq!(mulpdu(1448, true), 1430);
        assert_eq!(mulpdu(1448, false), 1442);
        assert_eq!(mulpdu(1460, false), 1454);
        assert_eq!(mulpdu(1461, false), 1454);
        assert_eq!(mulpdu(100, true), 128);
        assert_eq!(mulpdu(1 << 20, false), 64768);
        // A MULPDU-sized FPDU fits an EMSS segment wherever it starts, when EMSS ≥ 140.
        for emss in [536usize, 1448, 1460, 3454, 8948] {
            for markers in [false, true] {
                let m = mulpdu(emss, markers);
                for start in (0u32..1024).step_by(4) {
                    assert!(
                        fpdu_wire_len(start, m, markers) <= emss,
                        "{emss} {markers} {start}"
                    );
                }
            }
        }
    }

    #[test]
    fn max_ulpdu_in_is_tight() {
        for start in (0u32..1024).step_by(4) {
            for room in [0usize, 7, 8, 12, 100, 1448, 9000] {
                for markers in [false, true] {
                    match max_ulpdu_in(start, room, markers) {
                        None => assert!(fpdu_wire_len(start, 0, markers) > room),
                        Some(n) => {
                            assert!(fpdu_wire_len(start, n, markers) <= room);
                            assert!(n == MAX_ULPDU || fpdu_wire_len(start, n + 1, markers) > room);
                        }
                    }
                }
            }
        }
    }
}
