//! [`Scatter`]: the octets of a run of in-order chunks from one offset on (the rest of the
//! current chunk, then the chunks after it), read without gathering them. An FPDU that spans
//! chunks of one run is located, verified and handed out from here in place
//! (docs/architecture.md, "Runs of segments").

use super::verify::{check_crc, check_marker};
use super::{prefix_has_crc, DecodeError, CRC_RESIDUE, MARKER_INTERVAL};
use crate::crc;
use crate::markers;
use crate::wire::fpdu::CRC_LEN;

/// An FPDU's CRC joined from the CRCs of its parts ([`Scatter::verify`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Joined {
    /// Whether a CRC given with the chunks was joined (not only CRCs computed here).
    pub(super) from_given: bool,
    /// The CRC32c of the rest of the last chunk the FPDU reached, when known.
    pub(super) rest_crc: Option<u32>,
}

/// The rest of one chunk and the whole chunks after it, as one sequence of octets.
#[derive(Debug, Clone, Copy)]
pub(super) struct Scatter<'a> {
    pub(super) head: &'a [u8],
    pub(super) rest: &'a [&'a [u8]],
    /// The CRC32c of `head`, and of each of `rest`, where known.
    pub(super) head_crc: Option<u32>,
    pub(super) rest_crcs: &'a [Option<u32>],
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

    /// Whether the first `len` octets, which go beyond `head`, end in a valid CRC (their
    /// CRC32c is [`CRC_RESIDUE`]), joined from the CRCs of `head` (computed here when not
    /// known), of the chunks they cover whole (known) and of the last chunk they reach: its
    /// CRC and that of the shorter of their part of it and the rest, read here (of the part
    /// alone when the chunk's is not known); and how it was joined. `None`, with no octet
    /// read, when the CRC of a chunk covered whole is not known, when nothing known would be
    /// joined, or when the octets are not all there.
    fn joined_check(&self, len: usize) -> Option<(bool, Joined)> {
        let beyond = len.checked_sub(self.head.len())?;
        // First whether the CRC of every chunk covered whole is known: else the caller reads
        // the octets once, not partly here and again there.
        let (mut left, mut reach) = (beyond, 0);
        for (i, s) in self.rest.iter().enumerate() {
            reach = i + 1;
            if left <= s.len() {
                break;
            }
            self.rest_crcs.get(i).copied().flatten()?;
            left -= s.len();
        }
        if reach == 0 || left > self.rest[reach - 1].len() {
            return None;
        }
        let (last, last_crc) = (
            self.rest[reach - 1],
            self.rest_crcs.get(reach - 1).copied().flatten(),
        );
        if self.head_crc.is_none() && reach == 1 && last_crc.is_none() {
            // Nothing known to join from: reading the octets is all there is.
            return None;
        }
        let mut joined = self.head_crc.unwrap_or_else(|| crc::crc32c(self.head));
        for (s, c) in self.rest[..reach - 1].iter().zip(self.rest_crcs) {
            joined = crc::crc32c_combine(joined, c.unwrap_or_default(), s.len() as u64);
        }
        // The CRC its part of the last chunk must have for the whole to be a valid FPDU.
        let expected = crc::crc32c_rest(joined, CRC_RESIDUE, left as u64);
        let (ok, rest_crc) = match last_crc {
            Some(c) => {
                let (ok, rest) = prefix_has_crc(last, c, left, expected);
                (ok, Some(rest))
            }
            None => (crc::crc32c(&last[..left]) == expected, None),
        };
        // The last chunk's CRC joins only when its rest, not the part, was read.
        let from_given = self.head_crc.is_some()
            || reach > 1
            || (last_crc.is_some() && last.len() - left < left);
        Some((
            ok,
            Joined {
                from_given,
                rest_crc,
            },
        ))
    }

    /// Wire length of the FPDU at stream position `pos` starting here, if its header is
    /// there.
    pub(super) fn wire_len(&self, pos: u32, markers: bool) -> Option<usize> {
        let ulpdu_len = self.u16_be(markers::header_offset(pos, markers))?;
        Some(markers::fpdu_wire_len(pos, usize::from(ulpdu_len), markers))
    }

    /// Verifies the FPDU of `wire_len` octets (all there) at stream position `pos` as
    /// `verify_fpdu` does a contiguous one: CRC first (error 2), then every marker (error 3).
    /// The CRC from the chunks' CRCs where they are known ([`Scatter::joined_check`]: the whole
    /// FPDU must have [`CRC_RESIDUE`]), else, or when that fails, from the octets (so that an
    /// error reports the CRC received and the one computed). Returns ULPDU_Length, and
    /// whether the CRC was joined: then with the CRC of the last chunk's rest, when known.
    pub(super) fn verify(
        &self,
        wire_len: usize,
        pos: u32,
        markers: bool,
        crc: bool,
    ) -> Result<(u16, Option<Joined>), DecodeError> {
        let hoff = markers::header_offset(pos, markers);
        let ulpdu_len = self.u16_be(hoff).unwrap_or(0);
        let mut joined = None;
        if crc {
            match self.joined_check(wire_len) {
                Some((true, j)) => joined = Some(j),
                _ => {
                    let computed = self.crc(wire_len - CRC_LEN);
                    let received = self.u32_le(wire_len - CRC_LEN).unwrap_or(!computed);
                    check_crc(pos, received, computed)?;
                }
            }
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
        Ok((ulpdu_len, joined))
    }
}
