//! Fuzz entry points: ordinary functions, each also run by a unit test; the cargo-fuzz targets
//! in `fuzz/` are one line each. None may panic on any input.

use crate::decoder::{DecodeError, FpduDecoder};
use crate::locator::FpduLocator;
use crate::markers::MarkerGrid;
use crate::seq::SeqNumber;
use crate::wire::ddp::{DdpRepr, ReadRequestRepr, TerminateRepr, READ_REQUEST_HEADER_LEN};

fn flags(b: u8) -> (bool, bool) {
    (b & 1 != 0, b & 2 != 0)
}

/// Feeds `data` to in-order decoders in chunks whose sizes come from the input itself: chunk
/// by chunk, as runs of chunks (`FpduDecoder::feed_run`, FPDUs spanning chunks handed out in
/// place), and as runs with each chunk's CRC given as the parse pass gives it
/// (`FpduDecoder::feed_run_with_crcs`: FPDUs verified from the chunks' CRCs). All must hand
/// out the same ULPDUs and stop at the same error.
pub fn fuzz_decoder(data: &[u8]) {
    let Some((&cfg, rest)) = data.split_first() else {
        return;
    };
    let Some((&run_cfg, rest)) = rest.split_first() else {
        return;
    };
    let (markers, crc) = flags(cfg);
    let start = u32::from(cfg >> 2) * 4;
    let chunk = usize::from(cfg >> 4) * 97 + 1;
    let per_run = usize::from(run_cfg) + 1;
    let chunks: Vec<&[u8]> = rest.chunks(chunk).collect();
    let mut by_chunk = FpduDecoder::at_position(start, markers, crc);
    let mut by_run = FpduDecoder::at_position(start, markers, crc);
    let mut with_crcs = FpduDecoder::at_position(start, markers, crc);
    let a = decode_chunks(&mut by_chunk, &chunks, 1, false);
    let b = decode_chunks(&mut by_run, &chunks, per_run, false);
    assert_eq!(a, b, "chunk by chunk and by runs of {per_run}");
    let c = decode_chunks(&mut with_crcs, &chunks, per_run, true);
    assert_eq!(
        a, c,
        "chunk by chunk and by runs of {per_run} with their CRCs"
    );
    assert!(a.0.iter().map(Vec::len).sum::<usize>() <= rest.len());
    if a.1.is_none() {
        assert_eq!(by_chunk.position(), by_run.position());
        assert_eq!(by_chunk.buffered(), by_run.buffered());
    }
}

/// The ULPDUs `dec` hands out over `chunks` fed as runs of `per_run`, with the chunks' CRCs
/// when `crcs` (a chunk's rest's from the decoder, as the receiver takes it), and the error
/// it stopped at.
fn decode_chunks(
    dec: &mut FpduDecoder,
    chunks: &[&[u8]],
    per_run: usize,
    crcs: bool,
) -> (Vec<Vec<u8>>, Option<DecodeError>) {
    let mut got = Vec::new();
    let chunk_crcs: Vec<Option<u32>> = chunks
        .iter()
        .map(|c| crcs.then(|| crate::crc::crc32c(c)))
        .collect();
    for (run, run_crcs) in chunks.chunks(per_run).zip(chunk_crcs.chunks(per_run)) {
        let (mut i, mut skip, mut rest_crc) = (0, 0, None);
        while i < run.len() {
            let input_crc = if skip == 0 { run_crcs[i] } else { rest_crc };
            let mut ch = dec.feed_run_with_crcs(
                &run[i][skip..],
                input_crc,
                &run[i + 1..],
                &run_crcs[i + 1..],
            );
            while let Some(r) = ch.next_ulpdu() {
                match r {
                    Ok(u) => {
                        let mut head = [0u8; 18];
                        u.copy_prefix(&mut head);
                        let _ = DdpRepr::parse(&head[..u.len().min(18)], 1);
                        got.push(u.to_vec());
                    }
                    Err(e) => return (got, Some(e)),
                }
            }
            let (mut spill, spill_rest_crc) = (ch.spill(), ch.spill_rest_crc());
            i += 1;
            while i < run.len() && spill >= run[i].len() {
                spill -= run[i].len();
                i += 1;
            }
            (skip, rest_crc) = (spill, spill_rest_crc);
        }
    }
    (got, None)
}

/// Runs the out-of-order locator over `data` as one segment at a sequence number taken from
/// the input, without and with the segment's CRC given (both must locate the same FPDUs).
pub fn fuzz_locator(data: &[u8]) {
    if data.len() < 5 {
        return;
    }
    let (hdr, seg) = data.split_at(5);
    let seq = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
    let (markers, crc) = flags(hdr[4]);
    let grid = MarkerGrid::new(SeqNumber(seq.wrapping_mul(3)), markers);
    let loc = FpduLocator::new(grid, crc).with_aligned_sender(hdr[4] & 4 != 0);
    let mut out = Vec::new();
    loc.locate(SeqNumber(seq), seg, &mut out);
    // With the segment's CRC as the parse pass takes it: the same FPDUs.
    let mut with_crc = Vec::new();
    loc.locate_with_crc(
        SeqNumber(seq),
        seg,
        Some(crate::crc::crc32c(seg)),
        &mut with_crc,
    );
    assert_eq!(out, with_crc, "located with the segment's CRC");
    let mut prev_end = 0;
    for f in &out {
        assert!(f.range.start >= prev_end && f.range.end <= seg.len());
        prev_end = f.range.end;
        let u = f
            .ulpdu(&grid, seg)
            .expect("located FPDU lies in the segment");
        assert_eq!(
            u.pieces().map(<[u8]>::len).sum::<usize>(),
            usize::from(f.ulpdu_len)
        );
    }
}

/// Parses `data` as a DDP/RDMAP header (both versions), then what follows as a Terminate
/// header and as an RDMA Read Request header.
pub fn fuzz_ddp(data: &[u8]) {
    for v in [0, 1] {
        if let Ok((repr, off)) = DdpRepr::parse(data, v) {
            assert_eq!(off, repr.header_len());
            let mut out = [0u8; 18];
            let n = repr.emit(&mut out, v).unwrap_or(0);
            assert_eq!(n, off);
            if let Some(rest) = data.get(off..) {
                let _ = TerminateRepr::parse(rest);
                // What parses emits the same octets back.
                if let Ok(rr) = ReadRequestRepr::parse(rest) {
                    assert_eq!(rr.emit()[..], rest[..READ_REQUEST_HEADER_LEN]);
                }
            }
        }
    }
}

pub use crate::startup::fuzz_startup;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_points_survive_samples() {
        let mut samples: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0xff; 7], vec![3; 2000]];
        let mut x = 0x1234_5678u32;
        for len in [1usize, 5, 20, 100, 600, 1500, 5000] {
            let v: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            samples.push(v);
        }
        // Valid streams too (start 0, one-octet chunks, runs of 200): FPDUs span chunks.
        for markers in [false, true] {
            let mut enc = crate::encoder::FpduEncoder::new(markers);
            let mut wire = vec![u8::from(markers) | 2, 199];
            for n in [0usize, 30, 600, 1500] {
                enc.encode(&vec![7u8; n], &mut wire).unwrap();
            }
            samples.push(wire);
        }
        for s in &samples {
            fuzz_decoder(s);
            fuzz_locator(s);
            fuzz_ddp(s);
            fuzz_startup(s);
        }
    }
}
