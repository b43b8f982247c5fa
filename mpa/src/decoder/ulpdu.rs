//! [`Ulpdu`]: a verified ULPDU inside its FPDU's wire image, read as the pieces between
//! markers (and between chunks, for an FPDU that spans chunks of one run) so that nothing is
//! copied to strip them.

use super::MARKER_INTERVAL;
use crate::markers;
use crate::wire::fpdu::HEADER_LEN;
use crate::wire::marker::MARKER_LEN;

/// A verified ULPDU inside an FPDU's wire image, markers still in place.
#[derive(Debug, Clone, Copy)]
pub struct Ulpdu<'a> {
    /// The FPDU's wire image, or its first part when it spans chunks.
    wire: &'a [u8],
    /// The chunks that hold the rest of an FPDU spanning chunks (empty otherwise).
    more: &'a [&'a [u8]],
    pos: u32,
    len: u16,
    markers: bool,
}

impl<'a> Ulpdu<'a> {
    pub(crate) fn new(wire: &'a [u8], pos: u32, len: u16, markers: bool) -> Self {
        Ulpdu {
            wire,
            more: &[],
            pos,
            len,
            markers,
        }
    }

    /// A ULPDU whose FPDU starts at `wire` and goes on in the chunks `more`.
    pub(crate) fn spanning(
        wire: &'a [u8],
        more: &'a [&'a [u8]],
        pos: u32,
        len: u16,
        markers: bool,
    ) -> Self {
        Ulpdu {
            wire,
            more,
            pos,
            len,
            markers,
        }
    }

    /// ULPDU_Length.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether the ULPDU is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Stream position of the FPDU's first wire octet (its leading marker, if any).
    pub fn fpdu_position(&self) -> u32 {
        self.pos
    }

    /// Whether the FPDU spans chunks (its octets are not one slice).
    pub fn spans_chunks(&self) -> bool {
        !self.more.is_empty()
    }

    /// The ULPDU as one slice, when no marker falls inside it.
    pub fn contiguous(&self) -> Option<&'a [u8]> {
        let mut pieces = self.pieces();
        let first = pieces.next().unwrap_or(&[]);
        if pieces.next().is_none() && first.len() == self.len() {
            Some(first)
        } else {
            None
        }
    }

    /// The ULPDU octets as the pieces between markers, in order.
    #[inline]
    pub fn pieces(&self) -> UlpduPieces<'a> {
        let hoff = markers::header_offset(self.pos, self.markers);
        let cur = hoff + HEADER_LEN;
        let next_marker = if self.markers {
            // The first marker behind the header (a leading marker sits before it).
            let first = markers::to_next_marker(self.pos);
            if first < cur {
                first + MARKER_INTERVAL
            } else {
                first
            }
        } else {
            usize::MAX
        };
        UlpduPieces {
            wire: self.wire,
            more: self.more,
            base: 0,
            cur,
            remaining: self.len(),
            next_marker,
        }
    }

    /// Copies the ULPDU's first `dst.len()` octets (or all, if shorter) into `dst`; returns
    /// how many were copied.
    #[inline]
    pub fn copy_prefix(&self, dst: &mut [u8]) -> usize {
        let mut pieces = self.pieces();
        // Usually (a DDP header) the first piece holds it all.
        let Some(first) = pieces.next() else {
            return 0;
        };
        if let Some(head) = first.get(..dst.len()) {
            dst.copy_from_slice(head);
            return dst.len();
        }
        dst[..first.len()].copy_from_slice(first);
        let mut at = first.len();
        for p in pieces {
            if at == dst.len() {
                break;
            }
            let n = p.len().min(dst.len() - at);
            dst[at..at + n].copy_from_slice(&p[..n]);
            at += n;
        }
        at
    }

    /// Appends the ULPDU to `out`.
    pub fn extend_vec(&self, out: &mut Vec<u8>) {
        out.reserve(self.len());
        for p in self.pieces() {
            out.extend_from_slice(p);
        }
    }

    /// The ULPDU as a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.extend_vec(&mut v);
        v
    }
}

/// The pieces of a ULPDU between markers, in order.
#[derive(Debug, Clone)]
pub struct UlpduPieces<'a> {
    /// The chunk holding wire offset `cur` (or the last one).
    wire: &'a [u8],
    /// The chunks after it.
    more: &'a [&'a [u8]],
    /// Wire offset of `wire[0]`.
    base: usize,
    /// Wire offset of the next ULPDU octet.
    cur: usize,
    remaining: usize,
    next_marker: usize,
}

impl<'a> Iterator for UlpduPieces<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.remaining == 0 {
            return None;
        }
        if self.cur == self.next_marker {
            self.cur += MARKER_LEN;
            self.next_marker += MARKER_INTERVAL;
        }
        while self.cur >= self.base + self.wire.len() {
            let (next, more) = self.more.split_first()?;
            self.base += self.wire.len();
            self.wire = next;
            self.more = more;
        }
        let at = self.cur - self.base;
        let n = self
            .remaining
            .min(self.next_marker - self.cur)
            .min(self.wire.len() - at);
        let piece = &self.wire[at..at + n];
        self.cur += n;
        self.remaining -= n;
        Some(piece)
    }
}
