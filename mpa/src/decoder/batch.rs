//! The batch path: many whole FPDUs verified with one pass over their headers and markers and
//! one CRC call over all their octets, so that a chunk of full-size FPDUs costs one long CRC
//! (at the kernel's full speed) rather than a short CRC call per FPDU.

use super::verify::markers_ok;
use super::{prefix_has_crc, FpduDecoder, CRC_RESIDUE};
use crate::crc;
use crate::markers;

/// FPDUs checked by one batch CRC pass (bounds the work redone when a batch fails).
pub(super) const BATCH_MAX_FPDUS: usize = 64;
/// Smallest FPDU (wire octets) worth a batch check.
pub(super) const BATCH_MIN_WIRE: usize = 512;

/// One FPDU of a verified batch.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct BatchEntry {
    pub(super) wire: u32,
    pub(super) ulpdu: u16,
}

impl FpduDecoder {
    /// Verifies the whole FPDUs at the front of `input` (at most [`BATCH_MAX_FPDUS`], each of
    /// at least [`BATCH_MIN_WIRE`] octets) in one pass over their headers and markers and one
    /// CRC pass over all their octets, and records their lengths in `self.batch`.
    ///
    /// The CRC: a valid FPDU (its octets followed by its CRC field) is a CRC32c codeword whose
    /// CRC is the residue [`CRC_RESIDUE`], and the CRC of consecutive codewords follows from
    /// their lengths by [`crc::CombineFixed`]. One long CRC call runs at the kernel's full
    /// speed where many short ones pay their setup each. The markers: each FPDU's markers are
    /// checked in order while its header is read; the run ends before the first FPDU with a
    /// wrong FPDUPTR (so that FPDU goes through [`verify_fpdu`], which checks its CRC first and
    /// reports whichever error is there precisely).
    ///
    /// `input_crc`, the CRC32c of `input` when known: the batch is then checked against it
    /// with the CRC of the shorter of the batch and what follows it in `input` (nothing read
    /// when the batch takes all of it).
    ///
    /// Returns `(verified, scanned, rest_crc)`: how many FPDUs were verified (0 when fewer than
    /// two passed the scan, or when the batch CRC fails: then each FPDU is checked on its own
    /// and the bad one is reported precisely), how many octets the run covered, and the CRC32c
    /// of `input[scanned..]` when it is known.
    pub(super) fn batch_scan(
        &mut self,
        input: &[u8],
        input_crc: Option<u32>,
    ) -> (usize, usize, Option<u32>) {
        let markers = self.markers;
        let mut run = BatchRun {
            input,
            markers,
            pos: self.pos,
            off: 0,
            n: 0,
            expected: 0,
            fixed: [crc::CombineFixed::new(0); 4],
            batch: &mut self.batch,
        };
        'fpdus: while run.n < BATCH_MAX_FPDUS {
            let hoff = markers::header_offset(run.pos, markers);
            let Some(ulpdu_len) = run.header(hoff) else {
                break;
            };
            let w = markers::fpdu_wire_len(run.pos, usize::from(ulpdu_len), markers);
            if !run.take(w, hoff, ulpdu_len) {
                break;
            }
            // FPDUs of one size tend to follow each other: while they do, where the next
            // header is does not wait for this one to be read (the scan runs ahead).
            while run.n < BATCH_MAX_FPDUS {
                let hoff = markers::header_offset(run.pos, markers);
                let w = markers::fpdu_wire_len(run.pos, usize::from(ulpdu_len), markers);
                match run.header(hoff) {
                    Some(len) if len == ulpdu_len => {}
                    Some(_) => continue 'fpdus,
                    None => break 'fpdus,
                }
                if !run.take(w, hoff, ulpdu_len) {
                    break 'fpdus;
                }
            }
        }
        let (n, off, expected) = (run.n, run.off, run.expected);
        if n < 2 {
            return (0, off, None);
        }
        let (verified, rest_crc) = match input_crc {
            Some(c) => {
                let (verified, rest) = prefix_has_crc(input, c, off, expected);
                (verified, Some(rest))
            }
            None => (crc::crc32c(&input[..off]) == expected, None),
        };
        if verified {
            (n, off, rest_crc)
        } else {
            (0, off, None)
        }
    }
}

/// The state of one batch pass ([`FpduDecoder::batch_scan`]).
struct BatchRun<'i, 'b> {
    input: &'i [u8],
    markers: bool,
    /// Stream position and input offset of the next FPDU.
    pos: u32,
    off: usize,
    /// FPDUs taken.
    n: usize,
    /// The CRC their octets must have.
    expected: u32,
    /// FPDUs of one ULPDU size take one of two wire lengths (one marker more or less), 4
    /// octets apart: a direct-mapped cache keyed by `wire / 4 % 4` keeps both.
    fixed: [crc::CombineFixed; 4],
    batch: &'b mut [BatchEntry; BATCH_MAX_FPDUS],
}

impl BatchRun<'_, '_> {
    /// ULPDU_Length of the next FPDU, whose header is at `hoff`, if it is in the input.
    #[inline(always)]
    fn header(&self, hoff: usize) -> Option<u16> {
        match self.input.get(self.off + hoff..) {
            Some([a, b, ..]) => Some(u16::from_be_bytes([*a, *b])),
            _ => None,
        }
    }

    /// Takes the next FPDU (`w` wire octets, header at `hoff`, carrying `ulpdu_len`) into
    /// the batch if it is whole, long enough to be worth it and its markers are right.
    #[inline(always)]
    fn take(&mut self, w: usize, hoff: usize, ulpdu_len: u16) -> bool {
        // Short FPDUs: one CRC call each costs less than combining.
        if w < BATCH_MIN_WIRE {
            return false;
        }
        let Some(wire) = self.input.get(self.off..self.off + w) else {
            return false;
        };
        if self.markers && !markers_ok(wire, self.pos, hoff) {
            return false;
        }
        self.expected = if self.n == 0 {
            CRC_RESIDUE
        } else {
            let f = &mut self.fixed[(w >> 2) & 3];
            if f.len_b() != w as u64 {
                *f = crc::CombineFixed::new(w as u64);
            }
            f.combine(self.expected, CRC_RESIDUE)
        };
        self.batch[self.n] = BatchEntry {
            wire: w as u32,
            ulpdu: ulpdu_len,
        };
        self.off += w;
        self.pos = self.pos.wrapping_add(w as u32);
        self.n += 1;
        true
    }
}
