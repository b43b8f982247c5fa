//! [`Scatter`]: the octets of a run of in-order chunks from one offset on (the rest of the
//! current chunk, then the chunks after it), read without gathering them. An FPDU that spans
//! chunks of one run is located, verified and handed out from here in place
//! (docs/architecture.md, "Runs of segments").

use super::verify::{check_crc, check_marker};
use super::{DecodeError, MARKER_INTERVAL};
use crate::crc;
use crate::markers;
use crate::wire::fpdu::CRC_LEN;

/// The rest of one chunk and the whole chunks after it, as one sequence of octets.
#[derive(Debug, Clone, Copy)]
pub(super) struct Scatter<'a> {
    pub(super) head: &'a [u8],
    pub(super) rest: &'a [&'a [u8]],
}

impl<'a> Scatter<'a> {
    /// Whether at least `n` octets are there.
    pub(super) fn has(&self, n: usize) -> bool {
        let mut left = n.saturating_sub(self.head.len());
        for s in self.rest {
            if left == 0 {
                return true;
            }
            left = left.saturating_sub(s.len());
        }
        left == 0
    }

    /// Copies the `dst.len()` octets at `off` into `dst`; `false` when they are not all there.
    fn read(&self, off: usize, dst: &mut [u8]) -> bool {
        let mut at = 0;
        let mut skip = off;
        for s in std::iter::once(&self.head).chain(self.rest.iter()) {
            if at == dst.len() {
                break;
            }
            if skip >= s.len() {
                skip -= s.len();
                continue;
            }
            let n = (s.len() - skip).min(dst.len() - at);
            dst[at..at + n].copy_from_slice(&s[skip..skip + n]);
            at += n;
            skip = 0;
        }
        at == dst.len()
    }

    fn u16_be(&self, off: usize) -> Option<u16> {
        let mut b = [0u8; 2];
        self.read(off, &mut b).then(|| u16::from_be_bytes(b))
    }

    fn u32_le(&self, off: usize) -> Option<u32> {
        let mut b = [0u8; 4];
        self.read(off, &mut b).then(|| u32::from_le_bytes(b))
    }

    /// CRC32c of the first `len` octets (all there).
    fn crc(&self, len: usize) -> u32 {
        let mut left = len;
        let mut c = 0;
        for s in std::iter::once(&self.head).chain(self.rest.iter()) {
            if left == 0 {
                break;
            }
            let n = s.len().min(left);
            c = crc::crc32c_append(c, &s[..n]);
            left -= n;
        }
        c
    }

    /// Wire length of the FPDU at stream position `pos` starting here, if its header is
    /// there.
    pub(super) fn wire_len(&self, pos: u32, markers: bool) -> Option<usize> {
        let ulpdu_len = self.u16_be(markers::header_offset(pos, markers))?;
        Some(markers::fpdu_wire_len(pos, usize::from(ulpdu_len), markers))
    }

    /// Verifies the FPDU of `wire_len` octets (all there) at stream position `pos` as
    /// `verify_fpdu` does a contiguous one: CRC first (error 2), then every marker (error 3).
    /// Returns ULPDU_Length.
    pub(super) fn verify(
        &self,
        wire_len: usize,
        pos: u32,
        markers: bool,
        crc: bool,
    ) -> Result<u16, DecodeError> {
        let hoff = markers::header_offset(pos, markers);
        let ulpdu_len = self.u16_be(hoff).unwrap_or(0);
        if crc {
            let computed = self.crc(wire_len - CRC_LEN);
            let received = self.u32_le(wire_len - CRC_LEN).unwrap_or(!computed);
            check_crc(pos, received, computed)?;
        }
        if markers {
            // The markers in order, read from the chunk that holds them (one walk over the
            // chunks); a marker split between two chunks is gathered.
            let mut chunks = self.rest.iter();
            let (mut chunk, mut base) = (self.head, 0usize);
            let mut w = markers::to_next_marker(pos);
            while w + CRC_LEN < wire_len {
                let expected = w.saturating_sub(hoff) as u16;
                while w + 2 >= base + chunk.len() {
                    let Some(next) = chunks.next() else {
                        break;
                    };
                    base += chunk.len();
                    chunk = next;
                }
                let found = match chunk.get(w + 2 - base.min(w + 2)..) {
                    Some([a, b, ..]) if w + 2 >= base => u16::from_be_bytes([*a, *b]),
                    _ => self.u16_be(w + 2).unwrap_or(!0),
                } & !3;
                check_marker(pos, w, found, expected)?;
                w += MARKER_INTERVAL;
            }
        }
        Ok(ulpdu_len)
    }
}
