//! [`Chunk`]: one chunk of stream octets being decoded, handing out verified ULPDUs from a
//! verified batch, from the chunk itself, in place across the chunks after it in the same run,
//! or from the decoder's reassembly buffer.

use super::batch::BATCH_MIN_WIRE;
use super::scatter::Scatter;
use super::{prefix_has_crc, DecodeError, FpduDecoder, Ulpdu, CRC_RESIDUE};

/// The CRC32c of a chunk and of the chunks after it in its run, where known
/// ([`FpduDecoder::feed_run_with_crcs`]).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ChunkCrcs<'a> {
    pub(super) input: Option<u32>,
    pub(super) next: &'a [Option<u32>],
}

/// One chunk of stream octets being decoded.
pub struct Chunk<'d, 'a> {
    dec: &'d mut FpduDecoder,
    input: &'a [u8],
    /// The chunks after `input` in the same run, still in hand: an FPDU that continues into
    /// them is handed out in place, not buffered.
    next: &'a [&'a [u8]],
    crcs: ChunkCrcs<'a>,
    /// Octets of `next` the last FPDU handed out took.
    spill: usize,
    /// The CRC32c of the rest of the last chunk it reached (after the spill), when known.
    spill_rest_crc: Option<u32>,
    off: usize,
    /// The CRC32c of `input[rest_crc_at..]`, when known: the chunk's own CRC at first, then
    /// of what follows each FPDU verified (a valid FPDU's octets have [`CRC_RESIDUE`]), so
    /// that an FPDU ending with the chunk is verified without reading it again.
    rest_crc: Option<u32>,
    rest_crc_at: usize,
    done: bool,
    /// `dec.batch[batch_at..batch_n]` are the FPDUs at `off` that one batch pass verified.
    batch_at: usize,
    batch_n: usize,
    /// Input offset up to which a batch pass looked (no new pass starts before it).
    scanned_end: usize,
}

impl<'d, 'a> Chunk<'d, 'a> {
    pub(super) fn new(
        dec: &'d mut FpduDecoder,
        input: &'a [u8],
        next: &'a [&'a [u8]],
        crcs: ChunkCrcs<'a>,
    ) -> Self {
        let rest_crc = crcs.input.filter(|_| dec.crc);
        Chunk {
            dec,
            input,
            next,
            crcs,
            spill: 0,
            spill_rest_crc: None,
            off: 0,
            rest_crc,
            rest_crc_at: 0,
            done: false,
            batch_at: 0,
            batch_n: 0,
            scanned_end: 0,
        }
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
                // The FPDU goes on into the next chunks of the run: verified and handed out
                // where it lies when it ends inside them.
                let sc = Scatter {
                    head: rest,
                    rest: self.next,
                    // The chunk rest's CRC, when known (the chunk's own, or carried past the
                    // FPDUs before it); else that part's is computed, when the others are.
                    head_crc: self.rest_crc.filter(|_| self.rest_crc_at == self.off),
                    rest_crcs: self.crcs.next,
                };
                let pos = dec.pos;
                let want = w.ok().or_else(|| sc.wire_len(pos, dec.markers));
                if let Some(want) = want.filter(|&w| !self.next.is_empty() && sc.has(w)) {
                    self.off = self.input.len();
                    self.done = true;
                    return Some(match sc.verify(want, pos, dec.markers, dec.crc) {
                        Ok((len, joined)) => {
                            self.spill = want - rest.len();
                            self.spill_rest_crc = joined.and_then(|j| j.rest_crc);
                            dec.stats.crc_joined += u64::from(joined.is_some_and(|j| j.from_given));
                            dec.advance(want, len);
                            dec.stats.spanned += 1;
                            Ok(Ulpdu::spanning(rest, self.next, pos, len, dec.markers))
                        }
                        Err(e) => {
                            dec.error = Some(e);
                            Err(e)
                        }
                    });
                }
                // Incomplete: keep the tail (bounded by the largest FPDU) for the next chunk.
                dec.buffer(rest, w.ok());
                self.off = self.input.len();
                self.done = true;
                return None;
            }
        };
        let rest_crc = self.rest_crc.filter(|_| self.rest_crc_at == self.off);
        // A batch takes two FPDUs of at least BATCH_MIN_WIRE octets or none: not worth a
        // scan when no second one fits behind this one (an FPDU that ends its segment).
        if dec.crc
            && want >= BATCH_MIN_WIRE
            && rest.len() - want >= BATCH_MIN_WIRE
            && self.off >= self.scanned_end
        {
            let (n, scanned, after_crc) = dec.batch_scan(rest, rest_crc);
            self.scanned_end = self.off + scanned;
            if n > 0 {
                if scanned == rest.len() && rest_crc.is_some() {
                    dec.stats.crc_at_chunk_end += n as u64;
                }
                (self.rest_crc, self.rest_crc_at) = (after_crc, self.off + scanned);
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
        // With the CRC of the chunk's rest known, a valid FPDU being a codeword of
        // CRC_RESIDUE: one that is all of the rest (FPDU Alignment, RFC 5044 Appendix B.2) is
        // not read again, one longer than what follows it is checked with the CRC of that
        // instead. When that check fails, or without the CRC, the FPDU is read, and an error
        // reported exactly.
        let after = rest.len() - want;
        let after_crc = rest_crc.and_then(|c| {
            let (valid, after_crc) = prefix_has_crc(rest, c, want, CRC_RESIDUE);
            valid.then_some(after_crc)
        });
        let verified = if after_crc.is_some() {
            dec.verify_codeword(wire)
        } else {
            dec.verify(wire)
        };
        match verified {
            Ok(len) => {
                dec.stats.crc_at_chunk_end += u64::from(after_crc.is_some() && after == 0);
                self.off += want;
                if after > 0 {
                    (self.rest_crc, self.rest_crc_at) = (after_crc, self.off);
                }
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

    /// Octets of the run's next chunks that the last ULPDU handed out reached into (0 unless
    /// it spanned chunks): decoding goes on that far into them.
    pub fn spill(&self) -> usize {
        self.spill
    }

    /// The CRC32c of what the last ULPDU handed out left of the last chunk it reached (the
    /// octets after the first [`Chunk::spill`] of the chunk decoding goes on in; of nothing, 0,
    /// when it took the whole chunk), when it was verified from the chunks' CRCs
    /// ([`FpduDecoder::feed_run_with_crcs`]) and that chunk's CRC is known: decoding goes on
    /// there with it.
    pub fn spill_rest_crc(&self) -> Option<u32> {
        self.spill_rest_crc
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
