//! In-order FPDU receiver (RFC 5044 §5.2): the stream in arbitrary chunks in, verified ULPDUs
//! out, markers stripped, CRC checked, errors 2 and 3 detected.
//!
//! ULPDUs come out without copying: a [`Ulpdu`] borrows the caller's chunk when the FPDU lies
//! inside it, or the decoder's own buffer when the FPDU spanned chunks, and exposes the ULPDU
//! octets as the pieces between markers. An FPDU that spans chunks fed as one run
//! ([`FpduDecoder::feed_run`]) is handed out in place too; only an FPDU that spans runs is
//! copied (once, into a buffer bounded by the largest possible FPDU).
//!
//! Modules: [`Chunk`] (`chunk`) walks one chunk; the batch path (`batch`) verifies many
//! full-size FPDUs with one CRC call; `verify` checks one FPDU's CRC and markers; [`Ulpdu`]
//! (`ulpdu`) reads a verified ULPDU around its markers (and across chunks); `scatter` reads
//! and verifies an FPDU that spans chunks of a run where it lies; [`DecodeError`] (`error`).

mod batch;
mod chunk;
mod error;
mod scatter;
#[cfg(test)]
mod tests;
mod ulpdu;
mod verify;

pub use chunk::Chunk;
use chunk::ChunkCrcs;
pub use error::DecodeError;
pub use ulpdu::{Ulpdu, UlpduPieces};
pub(crate) use verify::verify_fpdu;

use crate::crc;
use crate::markers;
use crate::wire::fpdu::{self, CRC_LEN, HEADER_LEN};
use crate::wire::marker::MARKER_LEN;
use batch::{BatchEntry, BATCH_MAX_FPDUS};
use verify::verify_fpdu_computed;

const MARKER_INTERVAL: usize = markers::MARKER_INTERVAL as usize;

/// CRC32c of any message followed by its own CRC (least-significant octet first): a whole
/// FPDU, CRC field included, has this CRC exactly when its CRC field is right.
pub(crate) const CRC_RESIDUE: u32 = 0x4867_4BC7;

/// Counters of one decoder.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecoderStats {
    /// FPDUs delivered.
    pub fpdus: u64,
    /// ULPDU octets delivered.
    pub ulpdu_octets: u64,
    /// Wire octets consumed by delivered FPDUs.
    pub wire_octets: u64,
    /// FPDUs that spanned chunks and were reassembled.
    pub reassembled: u64,
    /// FPDUs that spanned chunks of one run and were handed out in place.
    pub spanned: u64,
    /// Of those, the ones whose CRC was joined from the chunks' CRCs
    /// ([`FpduDecoder::feed_run_with_crcs`]).
    pub crc_joined: u64,
    /// FPDUs inside a chunk that ended with it, verified from the CRC the chunk came with (of
    /// what the FPDUs before them left): none of their octets read again.
    pub crc_at_chunk_end: u64,
}

/// The in-order FPDU receiver of one half connection.
#[derive(Debug)]
pub struct FpduDecoder {
    pos: u32,
    markers: bool,
    crc: bool,
    partial: Vec<u8>,
    /// CRC32c of the octets of `partial` before its CRC field, computed while copying them in.
    partial_crc: u32,
    partial_taken: bool,
    error: Option<DecodeError>,
    stats: DecoderStats,
    /// Wire and ULPDU lengths of the FPDUs the last batch pass verified (see
    /// [`FpduDecoder::batch_scan`]), so that taking them neither rescans nor reverifies.
    batch: [BatchEntry; BATCH_MAX_FPDUS],
}
impl FpduDecoder {
    /// A decoder at the start of Full Operation (stream position 0 = SeqStart). `markers`: we
    /// required markers from the peer; `crc`: CRCs were negotiated.
    pub fn new(markers: bool, crc: bool) -> Self {
        Self::at_position(0, markers, crc)
    }

    /// A decoder that continues at stream position `pos`.
    pub fn at_position(pos: u32, markers: bool, crc: bool) -> Self {
        FpduDecoder {
            pos,
            markers,
            crc,
            partial: Vec::new(),
            partial_crc: 0,
            partial_taken: false,
            error: None,
            stats: DecoderStats::default(),
            batch: [BatchEntry::default(); BATCH_MAX_FPDUS],
        }
    }

    /// Stream position of the next FPDU (octets since SeqStart, mod 2^32), not counting octets
    /// buffered for an FPDU that is not complete yet.
    pub fn position(&self) -> u32 {
        self.pos
    }

    /// Whether FPDUs carry a CRC that is checked (negotiated).
    pub fn checks_crc(&self) -> bool {
        self.crc
    }

    /// Octets buffered for an incomplete FPDU.
    pub fn buffered(&self) -> usize {
        if self.partial_taken {
            0
        } else {
            self.partial.len()
        }
    }

    /// The sticky error, if decoding failed.
    pub fn error(&self) -> Option<DecodeError> {
        self.error
    }

    /// Counters.
    pub fn stats(&self) -> DecoderStats {
        self.stats
    }

    /// Steps over `wire_len` octets holding one FPDU that was already verified and consumed out of
    /// order (docs/architecture.md, "Out-of-order placement"): the in-order chain must reach it
    /// exactly at an FPDU boundary. Fails with error 3 when ULPDU_Length (the chain) and the
    /// markers (which located the FPDU) disagree on where it starts: octets of an earlier FPDU are
    /// still buffered (RFC 5044 §8: checked when an out-of-order gap closes). The error is sticky
    /// like any other.
    pub fn skip_verified(&mut self, wire_len: usize) -> Result<(), DecodeError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.buffered() > 0 {
            let e = DecodeError::Misframed {
                located: self.pos.wrapping_add(self.buffered() as u32),
                chain: self.pos,
            };
            self.error = Some(e);
            return Err(e);
        }
        self.pos = self.pos.wrapping_add(wire_len as u32);
        self.stats.fpdus += 1;
        self.stats.wire_octets += wire_len as u64;
        Ok(())
    }

    /// Offers the next octets of the stream. Take ULPDUs with [`Chunk::next_ulpdu`] until it
    /// returns `None`; octets of an incomplete FPDU at the end are kept for the next chunk.
    pub fn feed<'d, 'a>(&'d mut self, input: &'a [u8]) -> Chunk<'d, 'a> {
        Chunk::new(self, input, &[], ChunkCrcs::default())
    }

    /// [`FpduDecoder::feed`] for a chunk followed by `next`, the chunks after it that are still
    /// in hand (a run of segments): an FPDU that starts in `input` and ends in `next` is
    /// verified and handed out in place rather than buffered. After the chunk,
    /// [`Chunk::spill`] says how many octets of `next` it took; decoding goes on from there.
    /// Only an FPDU that does not end within the run is buffered.
    pub fn feed_run<'d, 'a>(&'d mut self, input: &'a [u8], next: &'a [&'a [u8]]) -> Chunk<'d, 'a> {
        Chunk::new(self, input, next, ChunkCrcs::default())
    }

    /// [`FpduDecoder::feed_run`] with the CRC32c of `input` and of each chunk of `next`
    /// (`next_crcs[i]` of `next[i]`), where known: those taken when the segments were parsed,
    /// in the checksum's pass. An FPDU that ends with `input` is then verified from its CRC
    /// (not read again: an FPDU aligned with its segment); one that spans chunks from the
    /// CRCs of the chunks it covers whole and of its parts of the first and last ones (of the
    /// last one the shorter of its part and the rest is read). [`Chunk::spill_rest_crc`]
    /// gives the CRC of that last chunk's rest, where decoding goes on. An unknown CRC
    /// (`None`) means the octets are read, as by [`FpduDecoder::feed_run`]; a wrong one can
    /// only fail the check, which is then made again from the octets and reported exactly.
    pub fn feed_run_with_crcs<'d, 'a>(
        &'d mut self,
        input: &'a [u8],
        input_crc: Option<u32>,
        next: &'a [&'a [u8]],
        next_crcs: &'a [Option<u32>],
    ) -> Chunk<'d, 'a> {
        let crcs = ChunkCrcs {
            input: input_crc,
            next: next_crcs,
        };
        Chunk::new(self, input, next, crcs)
    }

    /// Checks a whole FPDU wire image at the current position and advances past it.
    fn verify(&mut self, wire: &[u8]) -> Result<u16, DecodeError> {
        let ulpdu_len = verify_fpdu(wire, self.pos, self.markers, self.crc)?;
        self.advance(wire.len(), ulpdu_len);
        Ok(ulpdu_len)
    }

    /// Checks a whole FPDU wire image whose CRC32c, CRC field included, is known to be
    /// [`CRC_RESIDUE`] (so its CRC is right): its markers, and advances past it.
    fn verify_codeword(&mut self, wire: &[u8]) -> Result<u16, DecodeError> {
        let ulpdu_len = verify_fpdu_computed(wire, self.pos, self.markers, None)?;
        self.advance(wire.len(), ulpdu_len);
        Ok(ulpdu_len)
    }

    /// Checks the reassembled FPDU in `self.partial` (its CRC already computed as it was
    /// copied in) and advances past it.
    fn verify_partial(&mut self) -> Result<u16, DecodeError> {
        let computed = self.crc.then_some(self.partial_crc);
        let ulpdu_len = verify_fpdu_computed(&self.partial, self.pos, self.markers, computed)?;
        self.advance(self.partial.len(), ulpdu_len);
        Ok(ulpdu_len)
    }

    /// Appends `src` to the FPDU being reassembled (`want`: its wire length, once its header
    /// is in), extending the CRC over the octets before its CRC field in the same pass. Until
    /// the header is in, every octet is before the CRC field (the shortest FPDU has 2 octets
    /// of PAD, or a leading marker, between its header and its CRC).
    fn buffer(&mut self, src: &[u8], want: Option<usize>) {
        let have = self.partial.len();
        if !self.crc {
            self.partial.extend_from_slice(src);
            return;
        }
        let covered = match want {
            Some(w) => {
                self.partial.reserve_exact(w.saturating_sub(have));
                w.saturating_sub(CRC_LEN)
                    .saturating_sub(have)
                    .min(src.len())
            }
            None => src.len(),
        };
        // CRC then copy, both over `src` while it is in L1: the copying CRC kernel would
        // need the destination initialised first (a memset of every buffered octet, 2 % of
        // the pipeline's samples), and `partial` is allocated once and reused.
        self.partial_crc = crc::crc32c_append(self.partial_crc, &src[..covered]);
        self.partial.extend_from_slice(src);
    }

    /// Steps past a verified FPDU of `wire_len` octets carrying `ulpdu_len`.
    #[inline]
    fn advance(&mut self, wire_len: usize, ulpdu_len: u16) {
        self.pos = self.pos.wrapping_add(wire_len as u32);
        self.stats.fpdus += 1;
        self.stats.ulpdu_octets += u64::from(ulpdu_len);
        self.stats.wire_octets += wire_len as u64;
    }

    /// Wire length of the FPDU at the current position once its header is in `head`, or the
    /// octets needed to read the header.
    fn wire_len_from(&self, head: &[u8]) -> Result<usize, usize> {
        wire_len_at(self.pos, self.markers, head)
    }
}

/// Whether `data[..at]` has the CRC32c `expected`, given `crc`, that of all of `data`: the
/// shorter of `data[..at]` and `data[at..]` is read, the other's CRC follows from `crc`
/// (`crc32c_combine`). Returns that, and the CRC32c of `data[at..]` (right when `crc` is).
/// For FPDUs verified from the CRC of the segment they lie in, with what follows them.
fn prefix_has_crc(data: &[u8], crc: u32, at: usize, expected: u32) -> (bool, u32) {
    let after = data.len() - at;
    if after == 0 {
        // All of `data`, an FPDU aligned with its segment (what MPA-aware senders send):
        // nothing to read or combine; the empty rest's CRC32c is 0.
        (crc == expected, 0)
    } else if after < at {
        let rest = crc::crc32c(&data[at..]);
        (
            crc == crc::crc32c_combine(expected, rest, after as u64),
            rest,
        )
    } else {
        let head = crc::crc32c(&data[..at]);
        (head == expected, crc::crc32c_rest(head, crc, after as u64))
    }
}

/// Wire length of the FPDU starting at stream position `pos` whose first octets are `head`,
/// or the octets needed to read its header.
fn wire_len_at(pos: u32, markers: bool, head: &[u8]) -> Result<usize, usize> {
    let hoff = markers::header_offset(pos, markers);
    match head.get(hoff..hoff + HEADER_LEN) {
        Some(h) => {
            let ulpdu_len = usize::from(u16::from_be_bytes([h[0], h[1]]));
            Ok(markers::fpdu_wire_len(pos, ulpdu_len, markers))
        }
        None => Err(hoff + HEADER_LEN),
    }
}

/// Marker octets inside the FPDU at `pos` of `ulpdu_len` (for accounting).
pub fn markers_in_fpdu(pos: u32, ulpdu_len: usize, markers: bool) -> usize {
    (markers::fpdu_wire_len(pos, ulpdu_len, markers) - fpdu::fpdu_len(ulpdu_len)) / MARKER_LEN
}
