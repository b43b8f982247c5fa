//! In-order FPDU receiver (RFC 5044 §5.2): the stream in arbitrary chunks in, verified ULPDUs
//! out, markers stripped, CRC checked, errors 2 and 3 detected.
//!
//! ULPDUs come out without copying: a [`Ulpdu`] borrows the caller's chunk when the FPDU lies
//! inside it, or the decoder's own buffer when the FPDU spanned chunks, and exposes the ULPDU
//! octets as the pieces between markers. Only an FPDU that spans chunks is copied (once, into
//! a buffer bounded by the largest possible FPDU).

use crate::crc;
use crate::error::{Fault, MpaErrorCode};
use crate::markers;
use crate::wire::fpdu::{self, CRC_LEN, HEADER_LEN};
use crate::wire::marker::MARKER_LEN;

const MARKER_INTERVAL: usize = markers::MARKER_INTERVAL as usize;

/// Why decoding stopped. Sticky: after an error the decoder yields nothing more (RFC 5044 §8:
/// MPA MUST NOT deliver further FPDUs on that half connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Error 2: the CRC does not match.
    #[error("CRC mismatch in the FPDU at stream position {pos}: received {received:#010x}, computed {computed:#010x}")]
    Crc {
        /// Stream position of the FPDU.
        pos: u32,
        /// The CRC field.
        received: u32,
        /// The CRC computed over the octets.
        computed: u32,
    },
    /// Error 3: a marker disagrees with ULPDU_Length on where the FPDU starts.
    #[error("marker at stream position {marker_pos} has FPDUPTR {found}, expected {expected}")]
    Marker {
        /// Stream position of the marker.
        marker_pos: u32,
        /// FPDUPTR received (low two bits cleared).
        found: u16,
        /// FPDUPTR implied by ULPDU_Length framing.
        expected: u16,
    },
    /// Error 3: an FPDU that its markers located at stream position `located` (and that was
    /// placed out of order) is not where ULPDU_Length framing puts the next FPDU.
    #[error("the FPDU markers located at stream position {located} is not on the ULPDU_Length chain (next FPDU boundary after {chain})")]
    Misframed {
        /// Where the markers put the FPDU.
        located: u32,
        /// Where the in-order chain stands (start of the FPDU it is inside).
        chain: u32,
    },
    /// The caller dropped a [`Chunk`] before draining it; the stream position is lost.
    #[error("a chunk was dropped before all its FPDUs were taken")]
    Abandoned,
}

impl DecodeError {
    /// The MPA error code to report.
    pub fn code(&self) -> MpaErrorCode {
        match self {
            DecodeError::Crc { .. } => MpaErrorCode::CrcMismatch,
            DecodeError::Marker { .. } | DecodeError::Misframed { .. } => {
                MpaErrorCode::MarkerMismatch
            }
            DecodeError::Abandoned => MpaErrorCode::LocalCatastrophic,
        }
    }

    /// Who is at fault.
    pub fn fault(&self) -> Fault {
        match self {
            DecodeError::Abandoned => Fault::LocalMisuse,
            _ => Fault::PeerMisbehaved,
        }
    }
}

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

/// One FPDU of a verified batch.
#[derive(Debug, Clone, Copy, Default)]
struct BatchEntry {
    wire: u32,
    ulpdu: u16,
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

    /// Steps over `wire_len` octets holding one FPDU that was already verified and consumed
    /// out of order (marker-guided placement, DESIGN.md): the in-order chain must reach it
    /// exactly at an FPDU boundary. Fails with error 3 when ULPDU_Length (the chain) and the
    /// markers (which located the FPDU) disagree on where it starts: octets of an earlier FPDU
    /// are still buffered (RFC 5044 §8: checked when an out-of-order gap closes). The error
    /// is sticky like any other.
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
        Chunk {
            dec: self,
            input,
            off: 0,
            done: false,
            batch_at: 0,
            batch_n: 0,
            scanned_end: 0,
        }
    }

    /// Checks a whole FPDU wire image at the current position and advances past it.
    fn verify(&mut self, wire: &[u8]) -> Result<u16, DecodeError> {
        let ulpdu_len = verify_fpdu(wire, self.pos, self.markers, self.crc)?;
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
        self.partial.resize(have + covered, 0);
        self.partial_crc =
            crc::crc32c_copy(self.partial_crc, &mut self.partial[have..], &src[..covered]);
        self.partial.extend_from_slice(&src[covered..]);
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
    /// Returns `(verified, scanned)`: how many FPDUs were verified (0 when fewer than two
    /// passed the scan, or when the batch CRC fails: then each FPDU is checked on its own and
    /// the bad one is reported precisely), and how many octets the run covered.
    fn batch_scan(&mut self, input: &[u8]) -> (usize, usize) {
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
        let (n, off) = (run.n, run.off);
        if n >= 2 && crc::crc32c(&input[..off]) == run.expected {
            (n, off)
        } else {
            (0, off)
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

/// One chunk of stream octets being decoded.
pub struct Chunk<'d, 'a> {
    dec: &'d mut FpduDecoder,
    input: &'a [u8],
    off: usize,
    done: bool,
    /// `dec.batch[batch_at..batch_n]` are the FPDUs at `off` that one batch pass verified.
    batch_at: usize,
    batch_n: usize,
    /// Input offset up to which a batch pass looked (no new pass starts before it).
    scanned_end: usize,
}

/// CRC32c of any message followed by its own CRC (least-significant octet first).
const CRC_RESIDUE: u32 = 0x4867_4BC7;
/// FPDUs checked by one batch CRC pass (bounds the work redone when a batch fails).
const BATCH_MAX_FPDUS: usize = 64;
/// Smallest FPDU (wire octets) worth a batch check.
const BATCH_MIN_WIRE: usize = 512;

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

impl<'a> Chunk<'_, 'a> {
    /// The next verified ULPDU, `None` when the chunk is used up (its tail kept), or the
    /// decoder's sticky error (returned once per chunk).
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub fn next_ulpdu(&mut self) -> Option<Result<Ulpdu<'_>, DecodeError>> {
        if self.batch_at < self.batch_n {
            return Some(Ok(self.take_batched()));
        }
        self.next_unbatched()
    }

    /// The next FPDU of the verified batch (`batch_at < batch_n`).
    #[inline]
    fn take_batched(&mut self) -> Ulpdu<'a> {
        take_batched(self.dec, self.input, &mut self.off, &mut self.batch_at)
    }

    /// [`Chunk::next_ulpdu`] outside a verified batch.
    #[inline]
    fn next_unbatched(&mut self) -> Option<Result<Ulpdu<'_>, DecodeError>> {
        if self.done {
            return None;
        }
        if let Some(e) = self.dec.error {
            self.done = true;
            return Some(Err(e));
        }
        let dec = &mut *self.dec;
        if dec.partial_taken {
            dec.partial.clear();
            dec.partial_crc = 0;
            dec.partial_taken = false;
        }
        let rest = &self.input[self.off..];
        if !dec.partial.is_empty() {
            // Complete the FPDU that spans chunks.
            let want = match dec.wire_len_from(&dec.partial) {
                Ok(w) => w,
                Err(head) => {
                    let take = (head - dec.partial.len()).min(rest.len());
                    dec.buffer(&rest[..take], None);
                    self.off += take;
                    match dec.wire_len_from(&dec.partial) {
                        Ok(w) => w,
                        Err(_) => {
                            self.done = true;
                            return None;
                        }
                    }
                }
            };
            let rest = &self.input[self.off..];
            let take = (want - dec.partial.len()).min(rest.len());
            dec.buffer(&rest[..take], Some(want));
            self.off += take;
            if dec.partial.len() < want {
                self.done = true;
                return None;
            }
            let pos = dec.pos;
            let r = dec.verify_partial();
            dec.partial_taken = true;
            dec.stats.reassembled += u64::from(r.is_ok());
            return Some(match r {
                Ok(len) => Ok(Ulpdu::new(&dec.partial, pos, len, dec.markers)),
                Err(e) => {
                    dec.error = Some(e);
                    self.done = true;
                    Err(e)
                }
            });
        }
        if rest.is_empty() {
            self.done = true;
            return None;
        }
        let want = match dec.wire_len_from(rest) {
            Ok(w) if w <= rest.len() => w,
            w => {
                // Incomplete: keep the tail (bounded by the largest FPDU) for the next chunk.
                dec.buffer(rest, w.ok());
                self.off = self.input.len();
                self.done = true;
                return None;
            }
        };
        if dec.crc && want >= BATCH_MIN_WIRE && self.off >= self.scanned_end {
            let (n, scanned) = dec.batch_scan(rest);
            self.scanned_end = self.off + scanned;
            if n > 0 {
                self.batch_at = 0;
                self.batch_n = n;
                return Some(Ok(take_batched(
                    dec,
                    self.input,
                    &mut self.off,
                    &mut self.batch_at,
                )));
            }
        }
        let wire = &self.input[self.off..self.off + want];
        let pos = dec.pos;
        match dec.verify(wire) {
            Ok(len) => {
                self.off += want;
                Some(Ok(Ulpdu::new(wire, pos, len, dec.markers)))
            }
            Err(e) => {
                dec.error = Some(e);
                self.done = true;
                Some(Err(e))
            }
        }
    }

    /// Octets of this chunk not yet taken.
    pub fn remaining(&self) -> usize {
        self.input.len() - self.off
    }
}

/// Takes FPDU `batch_at` of the verified batch `dec.batch`, at `input[off..]`.
#[inline]
fn take_batched<'a>(
    dec: &mut FpduDecoder,
    input: &'a [u8],
    off: &mut usize,
    batch_at: &mut usize,
) -> Ulpdu<'a> {
    let e = dec.batch[*batch_at];
    *batch_at += 1;
    let w = e.wire as usize;
    let wire = &input[*off..*off + w];
    *off += w;
    let pos = dec.pos;
    dec.advance(w, e.ulpdu);
    Ulpdu::new(wire, pos, e.ulpdu, dec.markers)
}

impl Drop for Chunk<'_, '_> {
    fn drop(&mut self) {
        if !self.done && self.off < self.input.len() && self.dec.error.is_none() {
            self.dec.error = Some(DecodeError::Abandoned);
        }
    }
}

/// A verified ULPDU inside an FPDU's wire image, markers still in place.
#[derive(Debug, Clone, Copy)]
pub struct Ulpdu<'a> {
    wire: &'a [u8],
    pos: u32,
    len: u16,
    markers: bool,
}

impl<'a> Ulpdu<'a> {
    pub(crate) fn new(wire: &'a [u8], pos: u32, len: u16, markers: bool) -> Self {
        Ulpdu {
            wire,
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

    /// The FPDU's whole wire image (markers, header, ULPDU, PAD, CRC).
    pub fn fpdu_wire(&self) -> &'a [u8] {
        self.wire
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

/// Verifies the whole wire image of the FPDU at stream position `pos` (`wire.len()` must be
/// its wire length, as computed from its header): CRC first (error 2), then every marker
/// (error 3, only meaningful with a valid CRC). Returns ULPDU_Length.
pub(crate) fn verify_fpdu(
    wire: &[u8],
    pos: u32,
    markers: bool,
    crc: bool,
) -> Result<u16, DecodeError> {
    let computed = crc.then(|| crc::crc32c(&wire[..wire.len() - CRC_LEN]));
    verify_fpdu_computed(wire, pos, markers, computed)
}

/// [`verify_fpdu`] with the CRC32c of the FPDU's octets before its CRC field already
/// computed (`None`: CRCs are off).
fn verify_fpdu_computed(
    wire: &[u8],
    pos: u32,
    markers: bool,
    computed: Option<u32>,
) -> Result<u16, DecodeError> {
    let hoff = markers::header_offset(pos, markers);
    let ulpdu_len = u16::from_be_bytes([wire[hoff], wire[hoff + 1]]);
    let n = wire.len();
    // RFC 5044 §6: locate unambiguously and verify the CRC before passing the ULPDU on.
    if let Some(computed) = computed {
        let received = u32::from_le_bytes([wire[n - 4], wire[n - 3], wire[n - 2], wire[n - 1]]);
        if computed != received {
            return Err(DecodeError::Crc {
                pos,
                received,
                computed,
            });
        }
    }
    if markers {
        check_markers(wire, pos, hoff)?;
    }
    Ok(ulpdu_len)
}

/// Checks every marker of the FPDU wire image `wire` at stream position `pos` whose header
/// is at `hoff`, in order (RFC 5044 §8 error 3: we check every marker, in order data too).
/// Markers sit wherever the stream position is a multiple of 512; none can fall on the CRC
/// (the last 4 octets).
#[inline]
fn check_markers(wire: &[u8], pos: u32, hoff: usize) -> Result<(), DecodeError> {
    let n = wire.len();
    let mut w = markers::to_next_marker(pos);
    while w + CRC_LEN < n {
        // A leading marker (w == 0, hoff == 4) has FPDUPTR 0; the others point at the header.
        let expected = w.saturating_sub(hoff) as u16;
        let found = u16::from_be_bytes([wire[w + 2], wire[w + 3]]) & !3;
        if found != expected {
            return Err(DecodeError::Marker {
                marker_pos: pos.wrapping_add(w as u32),
                found,
                expected,
            });
        }
        w += MARKER_INTERVAL;
    }
    Ok(())
}

/// Whether every marker of the FPDU is right: [`check_markers`] without the error's details.
#[inline]
fn markers_ok(wire: &[u8], pos: u32, hoff: usize) -> bool {
    let end = wire.len().saturating_sub(CRC_LEN);
    let mut w = markers::to_next_marker(pos);
    if w == 0 && end > 0 {
        // The leading marker: FPDUPTR 0.
        if marker_ptr(wire, 0) != 0 {
            return false;
        }
        w = MARKER_INTERVAL;
    }
    let mut expected = w.wrapping_sub(hoff) as u16;
    while w < end {
        if marker_ptr(wire, w) != expected {
            return false;
        }
        w += MARKER_INTERVAL;
        expected = expected.wrapping_add(MARKER_INTERVAL as u16);
    }
    true
}

/// FPDUPTR (low two bits cleared) of the marker at `wire[w..]`, or !0 if it is not whole.
#[inline(always)]
fn marker_ptr(wire: &[u8], w: usize) -> u16 {
    match wire.get(w..) {
        Some([_, _, a, b, ..]) => u16::from_be_bytes([*a, *b]) & !3,
        _ => !0,
    }
}

/// The pieces of a ULPDU between markers, in order.
#[derive(Debug, Clone)]
pub struct UlpduPieces<'a> {
    wire: &'a [u8],
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
        let n = self.remaining.min(self.next_marker - self.cur);
        let piece = self.wire.get(self.cur..self.cur + n)?;
        self.cur += n;
        self.remaining -= n;
        Some(piece)
    }
}

/// Marker octets inside the FPDU at `pos` of `ulpdu_len` (for accounting).
pub fn markers_in_fpdu(pos: u32, ulpdu_len: usize, markers: bool) -> usize {
    (markers::fpdu_wire_len(pos, ulpdu_len, markers) - fpdu::fpdu_len(ulpdu_len)) / MARKER_LEN
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoder::FpduEncoder;

    fn stream(markers: bool, sizes: &[usize]) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut enc = FpduEncoder::new(markers);
        let mut out = Vec::new();
        let mut sent = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let u: Vec<u8> = (0..n).map(|j| (i * 31 + j * 7) as u8).collect();
            enc.encode(&u, &mut out).unwrap();
            sent.push(u);
        }
        (out, sent)
    }

    fn decode_all(
        dec: &mut FpduDecoder,
        wire: &[u8],
        chunk: usize,
    ) -> Result<Vec<Vec<u8>>, DecodeError> {
        let mut got = Vec::new();
        for c in wire.chunks(chunk.max(1)) {
            let mut ch = dec.feed(c);
            while let Some(r) = ch.next_ulpdu() {
                got.push(r?.to_vec());
            }
        }
        Ok(got)
    }

    #[test]
    fn round_trip_every_chunking() {
        for markers in [false, true] {
            let (wire, sent) = stream(markers, &[0, 1, 42, 508, 509, 1430, 3000, 2]);
            for chunk in [1, 2, 3, 5, 64, 511, 512, 1448, wire.len()] {
                let mut dec = FpduDecoder::new(markers, true);
                assert_eq!(
                    decode_all(&mut dec, &wire, chunk).unwrap(),
                    sent,
                    "chunk {chunk}"
                );
                assert_eq!(dec.position() as usize, wire.len());
                assert_eq!(dec.buffered(), 0);
                assert_eq!(dec.stats().fpdus, sent.len() as u64);
            }
        }
    }

    #[test]
    fn zero_copy_when_contiguous() {
        let (wire, _) = stream(false, &[100]);
        let mut dec = FpduDecoder::new(false, true);
        let mut ch = dec.feed(&wire);
        let u = ch.next_ulpdu().unwrap().unwrap();
        let s = u.contiguous().unwrap();
        assert_eq!(s.as_ptr(), wire[2..].as_ptr());
    }

    #[test]
    fn crc_error_is_sticky() {
        let (mut wire, _) = stream(true, &[100, 100]);
        wire[60] ^= 1;
        let mut dec = FpduDecoder::new(true, true);
        let r = decode_all(&mut dec, &wire, 1000);
        assert!(matches!(r, Err(DecodeError::Crc { .. })), "{r:?}");
        assert_eq!(dec.error().unwrap().code(), MpaErrorCode::CrcMismatch);
        let mut ch = dec.feed(&wire);
        assert!(matches!(
            ch.next_ulpdu(),
            Some(Err(DecodeError::Crc { .. }))
        ));
        assert!(ch.next_ulpdu().is_none());
    }

    #[test]
    fn crc_off_ignores_crc_field() {
        let (mut wire, sent) = stream(false, &[10]);
        let n = wire.len();
        wire[n - 1] ^= 0xff;
        let mut dec = FpduDecoder::new(false, false);
        assert_eq!(decode_all(&mut dec, &wire, 3).unwrap(), sent);
    }

    #[test]
    fn marker_error_with_valid_crc() {
        // Forge a wrong FPDUPTR and fix the CRC: error 3.
        let (mut wire, _) = stream(true, &[1000]);
        wire[512 + 2] = 0;
        wire[512 + 3] = 0x10;
        let n = wire.len();
        let c = crc::crc32c(&wire[..n - 4]);
        wire[n - 4..].copy_from_slice(&c.to_le_bytes());
        let mut dec = FpduDecoder::new(true, true);
        let r = decode_all(&mut dec, &wire, 7);
        assert_eq!(
            r.unwrap_err(),
            DecodeError::Marker {
                marker_pos: 512,
                found: 0x10,
                expected: 508
            }
        );
    }

    #[test]
    fn abandoned_chunk_is_an_error() {
        let (wire, _) = stream(false, &[10, 10]);
        let mut dec = FpduDecoder::new(false, true);
        {
            let mut ch = dec.feed(&wire);
            let _ = ch.next_ulpdu();
        }
        assert_eq!(dec.error(), Some(DecodeError::Abandoned));
    }

    #[test]
    fn copy_prefix_across_marker() {
        let mut enc = FpduEncoder::at_position(500, true);
        let u: Vec<u8> = (0..40u8).collect();
        let mut wire = Vec::new();
        enc.encode(&u, &mut wire).unwrap();
        let mut dec = FpduDecoder::at_position(500, true, true);
        let mut ch = dec.feed(&wire);
        let got = ch.next_ulpdu().unwrap().unwrap();
        assert!(got.contiguous().is_none());
        let mut head = [0u8; 18];
        assert_eq!(got.copy_prefix(&mut head), 18);
        assert_eq!(&head[..], &u[..18]);
        assert_eq!(markers_in_fpdu(500, 40, true), 1);
    }

    /// A stream starting at `start` and each FPDU's range in it.
    fn stream_at(
        start: u32,
        markers: bool,
        sizes: &[usize],
    ) -> (Vec<u8>, Vec<Vec<u8>>, Vec<std::ops::Range<usize>>) {
        let mut enc = FpduEncoder::at_position(start, markers);
        let (mut out, mut sent, mut ranges) = (Vec::new(), Vec::new(), Vec::new());
        for (i, &n) in sizes.iter().enumerate() {
            let u: Vec<u8> = (0..n).map(|j| (i * 17 + j * 5) as u8).collect();
            ranges.push(enc.encode(&u, &mut out).unwrap());
            sent.push(u);
        }
        (out, sent, ranges)
    }

    /// Decodes `wire` (at stream position `start`) in chunks of `chunk` octets: the ULPDUs
    /// delivered, and the error decoding stopped at.
    fn outcome(
        start: u32,
        markers: bool,
        wire: &[u8],
        chunk: usize,
    ) -> (Vec<Vec<u8>>, Option<DecodeError>) {
        let mut dec = FpduDecoder::at_position(start, markers, true);
        let mut got = Vec::new();
        for c in wire.chunks(chunk) {
            let mut ch = dec.feed(c);
            while let Some(r) = ch.next_ulpdu() {
                match r {
                    Ok(u) => got.push(u.to_vec()),
                    Err(e) => return (got, Some(e)),
                }
            }
        }
        assert_eq!(dec.stats().fpdus, got.len() as u64);
        (got, dec.error())
    }

    /// Rewrites the CRC of a whole FPDU wire image so that it is valid again.
    fn fix_crc(fpdu: &mut [u8]) {
        let n = fpdu.len();
        let c = crc::crc32c(&fpdu[..n - CRC_LEN]);
        fpdu[n - CRC_LEN..].copy_from_slice(&c.to_le_bytes());
    }

    /// Marker offsets (in the stream image) inside `range` of a stream that starts at `start`.
    fn markers_in(start: u32, range: &std::ops::Range<usize>) -> Vec<usize> {
        let first = range.start + markers::to_next_marker(start.wrapping_add(range.start as u32));
        (first..range.end - CRC_LEN)
            .step_by(MARKER_INTERVAL)
            .collect()
    }

    /// Chunk sizes: one that never holds two whole FPDUs of at least `BATCH_MIN_WIRE` octets
    /// (so every FPDU is checked on its own), then ones that batch.
    const REFERENCE_CHUNK: usize = BATCH_MIN_WIRE - 1;
    const BATCHING_CHUNKS: [usize; 3] = [3000, 8192, usize::MAX];

    #[test]
    fn marker_error_inside_a_batch_is_reported_exactly() {
        let (mut wire, sent, ranges) = stream_at(0, true, &[2000; 6]);
        let r = ranges[3].clone();
        let m = markers_in(0, &r)[1];
        wire[m + 3] ^= 0x10;
        fix_crc(&mut wire[r.clone()]);
        let expected = DecodeError::Marker {
            marker_pos: m as u32,
            found: u16::from_be_bytes([wire[m + 2], wire[m + 3]]) & !3,
            expected: (m - r.start) as u16,
        };
        for chunk in [REFERENCE_CHUNK, 3000, usize::MAX] {
            let (got, err) = outcome(0, true, &wire, chunk);
            assert_eq!(got, sent[..3], "chunk {chunk}");
            assert_eq!(err, Some(expected), "chunk {chunk}");
        }
    }

    #[test]
    fn crc_error_inside_a_batch_is_reported_for_its_fpdu() {
        for markers in [false, true] {
            let (mut wire, sent, ranges) = stream_at(0, markers, &[1500; 8]);
            let r = ranges[4].clone();
            wire[r.start + 700] ^= 0x80;
            let n = r.end;
            let received = u32::from_le_bytes(wire[n - 4..n].try_into().unwrap());
            let computed = crc::crc32c(&wire[r.start..n - 4]);
            let expected = DecodeError::Crc {
                pos: r.start as u32,
                received,
                computed,
            };
            for chunk in [REFERENCE_CHUNK, 3000, usize::MAX] {
                let (got, err) = outcome(0, markers, &wire, chunk);
                assert_eq!(got, sent[..4], "markers {markers} chunk {chunk}");
                assert_eq!(err, Some(expected), "markers {markers} chunk {chunk}");
            }
        }
    }

    #[test]
    fn first_error_in_stream_order_wins_and_crc_before_markers() {
        let (wire, _, ranges) = stream_at(0, true, &[1800; 7]);
        let forge = |wire: &mut Vec<u8>, i: usize| {
            let m = markers_in(0, &ranges[i])[0];
            wire[m + 2] ^= 0x01;
            fix_crc(&mut wire[ranges[i].clone()]);
        };
        let flip = |wire: &mut Vec<u8>, i: usize| wire[ranges[i].start + 100] ^= 1;
        // A bad CRC and a bad marker in one FPDU: error 2 (the CRC is checked first).
        let mut w = wire.clone();
        forge(&mut w, 2);
        flip(&mut w, 2);
        let (got, err) = outcome(0, true, &w, usize::MAX);
        assert_eq!(got.len(), 2);
        assert!(matches!(err, Some(DecodeError::Crc { pos, .. }) if pos == ranges[2].start as u32));
        // A CRC error before a marker error, and the other way round.
        let mut w = wire.clone();
        flip(&mut w, 1);
        forge(&mut w, 4);
        let (got, err) = outcome(0, true, &w, usize::MAX);
        assert_eq!(got.len(), 1);
        assert!(matches!(err, Some(DecodeError::Crc { .. })), "{err:?}");
        let mut w = wire.clone();
        forge(&mut w, 1);
        flip(&mut w, 4);
        let (got, err) = outcome(0, true, &w, usize::MAX);
        assert_eq!(got.len(), 1);
        assert!(matches!(err, Some(DecodeError::Marker { .. })), "{err:?}");
    }

    /// Batched decoding delivers exactly what FPDU-at-a-time decoding does and stops at the
    /// same error, for every forged marker and for octet flips all over the stream.
    #[test]
    fn batches_agree_with_fpdu_at_a_time() {
        let sizes = [
            600, 3000, 100, 5000, 1000, 700, 2000, 40, 9000, 1500, 508, 4096,
        ];
        for start in [0u32, 4, 508, 1000, u32::MAX - 2047] {
            for markers in [false, true] {
                let (wire, sent, ranges) = stream_at(start, markers, &sizes);
                let check = |w: &[u8], what: &str| {
                    let reference = outcome(start, markers, w, REFERENCE_CHUNK);
                    for chunk in BATCHING_CHUNKS {
                        assert_eq!(
                            outcome(start, markers, w, chunk),
                            reference,
                            "{what}, chunk {chunk}"
                        );
                    }
                    reference
                };
                let (got, err) = check(&wire, "clean");
                assert_eq!((got, err), (sent.clone(), None));
                if markers {
                    for (i, r) in ranges.iter().enumerate() {
                        for m in markers_in(start, r) {
                            for bit in [0x04u8, 0x80] {
                                let mut w = wire.clone();
                                w[m + 3] ^= bit;
                                fix_crc(&mut w[r.clone()]);
                                let (got, err) = check(&w, &format!("marker at {m}"));
                                assert_eq!(got, sent[..i]);
                                assert!(
                                    matches!(err, Some(DecodeError::Marker { marker_pos, .. })
                                        if marker_pos == start.wrapping_add(m as u32)),
                                    "{err:?}"
                                );
                            }
                        }
                    }
                }
                for at in (0..wire.len()).step_by(97) {
                    let mut w = wire.clone();
                    w[at] ^= 0x20;
                    check(&w, &format!("flip at {at}"));
                }
            }
        }
    }

    /// FPDUs reassembled from small chunks (their CRC computed as they are copied in) give
    /// exactly what whole ones do, errors included.
    #[test]
    fn reassembly_agrees_with_whole_fpdus() {
        let sizes = [0, 1, 42, 700, 2000, 3, 510];
        for start in [0u32, 508, u32::MAX - 3] {
            for markers in [false, true] {
                let (wire, sent, _) = stream_at(start, markers, &sizes);
                for at in (0..wire.len()).step_by(11).chain([usize::MAX]) {
                    let mut w = wire.clone();
                    if let Some(o) = w.get_mut(at) {
                        *o ^= 0x02;
                    }
                    let whole = outcome(start, markers, &w, usize::MAX);
                    if at == usize::MAX {
                        assert_eq!(whole, (sent.clone(), None));
                    }
                    for chunk in [1, 2, 3, 6, 13, 100] {
                        let got = outcome(start, markers, &w, chunk);
                        assert_eq!(got, whole, "flip at {at}, chunk {chunk}");
                    }
                }
            }
        }
    }
}
