use super::batch::BATCH_MIN_WIRE;
use super::*;
use crate::encoder::FpduEncoder;
use crate::error::MpaErrorCode;

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

/// The chunk CRCs a run is fed with ([`FpduDecoder::feed_run_with_crcs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GivenCrcs {
    /// None known ([`FpduDecoder::feed_run`]).
    Unknown,
    /// Each chunk's CRC32c, that of a chunk's rest from [`Chunk::spill_rest_crc`] as the
    /// receiver takes it.
    Right,
    /// Each one off by a bit.
    Wrong,
}

/// What [`decode_runs`] saw.
#[derive(Debug, PartialEq, Eq)]
struct RunsDecoded {
    ulpdus: Vec<Vec<u8>>,
    /// ULPDUs handed out in place across chunks.
    spanned: u64,
    /// Of those, the ones verified from the chunks' CRCs (a spill CRC came back).
    joined: u64,
}

/// Decodes `wire` cut into `cuts`-sized chunks fed as runs of `per_run` chunks each (the
/// segments of one burst), with the chunks' CRCs as `given` says.
fn decode_runs(
    dec: &mut FpduDecoder,
    wire: &[u8],
    cut: usize,
    per_run: usize,
    given: GivenCrcs,
) -> Result<RunsDecoded, DecodeError> {
    let chunks: Vec<&[u8]> = wire.chunks(cut.max(1)).collect();
    decode_chunks_in_runs(dec, &chunks, per_run, given)
}

/// [`decode_runs`] for `chunks` cut where they are.
fn decode_chunks_in_runs(
    dec: &mut FpduDecoder,
    chunks: &[&[u8]],
    per_run: usize,
    given: GivenCrcs,
) -> Result<RunsDecoded, DecodeError> {
    let crcs: Vec<Option<u32>> = chunks
        .iter()
        .map(|c| match given {
            GivenCrcs::Unknown => None,
            GivenCrcs::Right => Some(crc::crc32c(c)),
            GivenCrcs::Wrong => Some(crc::crc32c(c) ^ 0x100),
        })
        .collect();
    let mut out = RunsDecoded {
        ulpdus: Vec::new(),
        spanned: 0,
        joined: 0,
    };
    for (run, run_crcs) in chunks
        .chunks(per_run.max(1))
        .zip(crcs.chunks(per_run.max(1)))
    {
        let (mut i, mut skip, mut rest_crc) = (0, 0, None);
        while i < run.len() {
            let input = &run[i][skip..];
            let input_crc = if skip == 0 { run_crcs[i] } else { rest_crc };
            let joined_before = dec.stats().crc_joined;
            let mut ch =
                dec.feed_run_with_crcs(input, input_crc, &run[i + 1..], &run_crcs[i + 1..]);
            while let Some(r) = ch.next_ulpdu() {
                let u = r?;
                out.spanned += u64::from(u.spans_chunks());
                out.ulpdus.push(u.to_vec());
            }
            let (mut spill, spill_rest_crc) = (ch.spill(), ch.spill_rest_crc());
            drop(ch);
            out.joined += dec.stats().crc_joined - joined_before;
            i += 1;
            while i < run.len() && spill >= run[i].len() {
                spill -= run[i].len();
                i += 1;
            }
            if let (Some(c), true, GivenCrcs::Right) = (spill_rest_crc, spill > 0, given) {
                assert_eq!(c, crc::crc32c(&run[i][spill..]), "the rest's CRC");
            }
            (skip, rest_crc) = (spill, spill_rest_crc);
        }
        assert_eq!(skip, 0, "an FPDU reached past its run");
    }
    Ok(out)
}

#[test]
fn runs_hand_out_fpdus_spanning_chunks_in_place_at_every_cut() {
    for markers in [false, true] {
        let (wire, sent) = stream(markers, &[0, 1, 42, 508, 509, 1430, 3000, 2, 4096, 700]);
        for cut in [1, 2, 3, 5, 64, 511, 512, 1448, wire.len()] {
            for per_run in [1, 2, 3, 64] {
                for crc in [false, true] {
                    let mut dec = FpduDecoder::new(markers, crc);
                    let got = decode_runs(&mut dec, &wire, cut, per_run, GivenCrcs::Unknown);
                    let RunsDecoded {
                        ulpdus: got,
                        spanned,
                        joined,
                    } = got.unwrap();
                    assert_eq!(got, sent, "cut {cut} per run {per_run}");
                    assert_eq!(joined, 0);
                    assert_eq!(dec.position() as usize, wire.len());
                    assert_eq!(dec.buffered(), 0);
                    let s = dec.stats();
                    assert_eq!(s.fpdus, sent.len() as u64);
                    assert_eq!(s.spanned, spanned);
                    if per_run == 1 {
                        assert_eq!(s.spanned, 0);
                    }
                    if per_run == 64 && cut >= 512 {
                        // Every FPDU that spans chunks ends inside its run unless it spans
                        // the run's end: nothing else is buffered.
                        assert!(s.reassembled <= wire.len().div_ceil(cut * per_run) as u64);
                    }
                }
            }
        }
    }
}

#[test]
fn a_spanning_fpdu_with_a_bad_crc_or_marker_is_reported_exactly() {
    for markers in [false, true] {
        let (wire, _) = stream(markers, &[3000, 100]);
        // One octet flipped in the ULPDU (past the first chunk): a CRC error; one in a
        // marker's FPDUPTR, CRCs off (with them on, the CRC fails first): a marker error.
        let mut targets = vec![(2000, true)];
        if markers {
            targets.push((1024 + 3, false));
        }
        for (at, crc) in targets {
            let mut bad = wire.clone();
            bad[at] ^= 0x10;
            let mut whole = FpduDecoder::new(markers, crc);
            let expected = decode_all(&mut whole, &bad, bad.len()).unwrap_err();
            for given in [GivenCrcs::Unknown, GivenCrcs::Right, GivenCrcs::Wrong] {
                let mut dec = FpduDecoder::new(markers, crc);
                let err = decode_runs(&mut dec, &bad, 700, 64, given).unwrap_err();
                assert_eq!(err, expected, "markers {markers} at {at} {given:?}");
                assert_eq!(dec.error(), Some(err), "sticky");
            }
            let mut dec = FpduDecoder::new(markers, crc);
            let err = decode_runs(&mut dec, &bad, 700, 64, GivenCrcs::Unknown).unwrap_err();
            assert_eq!(err, expected, "markers {markers} at {at}");
            if crc {
                assert!(matches!(err, DecodeError::Crc { .. }), "{err:?}");
            } else {
                assert!(matches!(err, DecodeError::Marker { .. }), "{err:?}");
            }
            assert_eq!(dec.error(), Some(err), "sticky");
        }
    }
}

#[test]
fn a_spanning_ulpdu_is_read_from_the_chunks_themselves() {
    let (wire, sent) = stream(true, &[3000]);
    let chunks: Vec<&[u8]> = wire.chunks(1000).collect();
    let mut dec = FpduDecoder::new(true, true);
    let mut ch = dec.feed_run(chunks[0], &chunks[1..]);
    let u = ch.next_ulpdu().unwrap().unwrap();
    assert!(u.spans_chunks());
    let pieces: Vec<&[u8]> = u.pieces().collect();
    // Every piece lies inside one of the chunks (nothing was copied).
    for p in &pieces {
        let inside = chunks.iter().any(|c| {
            let (c0, p0) = (c.as_ptr() as usize, p.as_ptr() as usize);
            p0 >= c0 && p0 + p.len() <= c0 + c.len()
        });
        assert!(inside);
    }
    assert_eq!(pieces.concat(), sent[0]);
    let mut head = [0u8; 28];
    assert_eq!(u.copy_prefix(&mut head), 28);
    assert_eq!(&head[..], &sent[0][..28]);
    assert!(ch.next_ulpdu().is_none());
    assert_eq!(ch.spill(), wire.len() - 1000);
}

/// With the chunks' CRCs known, every FPDU handed out across chunks is verified from them (a
/// spill CRC comes back, equal to the CRC of what it took of its last chunk), and the ULPDUs
/// are exactly those of a run without CRCs; with wrong CRCs given, none is joined and the
/// ULPDUs are the same again (the octets were read).
#[test]
fn spanning_fpdus_are_verified_from_the_chunks_crcs() {
    for markers in [false, true] {
        let (wire, sent) = stream(markers, &[4096; 12]);
        for cut in [700, 1448, 3840, 8948] {
            for per_run in [2, 3, 64] {
                let mut dec = FpduDecoder::new(markers, true);
                let plain = decode_runs(&mut dec, &wire, cut, per_run, GivenCrcs::Unknown);
                let plain = plain.unwrap();
                assert_eq!(plain.ulpdus, sent);
                let mut dec = FpduDecoder::new(markers, true);
                let right = decode_runs(&mut dec, &wire, cut, per_run, GivenCrcs::Right).unwrap();
                assert_eq!(right.ulpdus, sent, "cut {cut} per run {per_run}");
                assert_eq!(right.spanned, plain.spanned);
                assert!(right.joined <= right.spanned);
                if cut < 4096 && per_run == 64 {
                    // Every FPDU spans chunks; every one handed out in place is joined (an
                    // FPDU after one staged has its first part's CRC computed, the rest known).
                    assert!(right.spanned > 0);
                    assert_eq!(right.joined, right.spanned, "cut {cut}");
                }
                let mut dec = FpduDecoder::new(markers, true);
                let wrong = decode_runs(&mut dec, &wire, cut, per_run, GivenCrcs::Wrong).unwrap();
                assert_eq!(wrong.ulpdus, sent);
                assert_eq!(wrong.joined, 0);
            }
        }
    }
}

/// `wire` (FPDUs from stream position 0) cut after every `per_chunk` FPDUs, and after the
/// first `part` octets of the FPDU after them when `part > 0` (the rest of that FPDU then
/// starts the next chunk).
fn cut_at_fpdus(markers: bool, wire: &[u8], per_chunk: usize, part: usize) -> Vec<&[u8]> {
    let ends = fpdu_ends(markers, wire);
    let mut cuts: Vec<usize> = Vec::new();
    for (i, &end) in ends.iter().enumerate() {
        if (i + 1) % per_chunk == 0 {
            cuts.push(end);
            if part > 0 && end + part < ends.get(i + 1).copied().unwrap_or(0) {
                cuts.push(end + part);
            }
        }
    }
    let mut chunks = Vec::new();
    let mut at = 0;
    for c in cuts.into_iter().chain([wire.len()]) {
        if c > at {
            chunks.push(&wire[at..c]);
            at = c;
        }
    }
    chunks
}

/// Where each FPDU of `wire` (from stream position 0) ends.
fn fpdu_ends(markers: bool, wire: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut pos = 0;
    while pos < wire.len() {
        pos += wire_len_at(pos as u32, markers, &wire[pos..]).unwrap();
        ends.push(pos);
    }
    ends
}

/// An FPDU that ends its chunk (FPDU Alignment) is verified from the CRC the chunk came with,
/// none of its octets read again: alone in its chunk, after others in it (which are read, or
/// checked as a batch against the chunk's CRC when the batch ends it), or after the end of
/// an FPDU that spilled into the chunk. The ULPDUs are those of a decode without CRCs given;
/// with wrong CRCs given, none is verified that way and the ULPDUs are the same again.
#[test]
fn fpdus_that_end_their_chunk_are_verified_from_its_crc() {
    for markers in [false, true] {
        let (wire, sent) = stream(markers, &[1400, 1400, 300, 100, 600, 700, 20, 1000, 1400]);
        for (per_chunk, part) in [(1, 0), (2, 0), (3, 0), (1, 100), (2, 250)] {
            for per_run in [1, 64] {
                let chunks = cut_at_fpdus(markers, &wire, per_chunk, part);
                let case = format!("markers {markers}, {per_chunk} per chunk, part {part}");
                let mut dec = FpduDecoder::new(markers, true);
                let right = decode_chunks_in_runs(&mut dec, &chunks, per_run, GivenCrcs::Right);
                assert_eq!(right.unwrap().ulpdus, sent, "{case}");
                // At least the last FPDU of each chunk cut at FPDU edges at both ends, at most
                // every FPDU that lies whole in a chunk.
                let ends = fpdu_ends(markers, &wire);
                let (mut aligned, mut whole, mut at) = (0, 0, 0);
                for c in &chunks {
                    let (start, end) = (at, at + c.len());
                    at = end;
                    let starts = start == 0 || ends.contains(&start);
                    let inside = ends
                        .iter()
                        .zip([0].iter().chain(&ends))
                        .filter(|&(&e, &s)| s >= start && e <= end)
                        .count() as u64;
                    whole += inside;
                    aligned += u64::from(starts && ends.contains(&end) && inside > 0);
                }
                let at_end = dec.stats().crc_at_chunk_end;
                assert!(aligned > 0, "{case}");
                assert!((aligned..=whole).contains(&at_end), "{case}: {at_end}");
                for given in [GivenCrcs::Unknown, GivenCrcs::Wrong] {
                    let mut dec = FpduDecoder::new(markers, true);
                    let got = decode_chunks_in_runs(&mut dec, &chunks, per_run, given);
                    assert_eq!(got.unwrap().ulpdus, sent, "{case} {given:?}");
                    assert_eq!(dec.stats().crc_at_chunk_end, 0, "{case} {given:?}");
                }
            }
        }
    }
}

/// A bad FPDU in a chunk whose CRC is known, an octet flipped anywhere in it (its CRC field
/// too), fails as a decode of the whole stream fails — the same CRC received and computed —
/// and nothing of it is handed out: alone in its chunk, the last of a batch, or checked with
/// the CRC of a shorter FPDU after it.
#[test]
fn a_bad_fpdu_in_a_chunk_with_a_known_crc_is_reported_exactly() {
    for markers in [false, true] {
        let (wire, sent) = stream(markers, &[1400, 1400, 1400, 200]);
        let ends = fpdu_ends(markers, &wire);
        for (bad_fpdu, at) in [
            (1, ends[0] + 8),
            (1, ends[1] - 5),
            (1, ends[1] - 1),
            (2, ends[1] + 8),
            (2, ends[2] - 1),
        ] {
            let mut bad = wire.clone();
            bad[at] ^= 0x08;
            let mut whole = FpduDecoder::new(markers, true);
            let expected = decode_all(&mut whole, &bad, bad.len()).unwrap_err();
            assert!(matches!(expected, DecodeError::Crc { .. }), "{expected:?}");
            for per_chunk in [1, 2] {
                let chunks = cut_at_fpdus(markers, &bad, per_chunk, 0);
                let mut dec = FpduDecoder::new(markers, true);
                let mut got = Vec::new();
                let mut err = None;
                'chunks: for c in &chunks {
                    let mut ch = dec.feed_run_with_crcs(c, Some(crc::crc32c(c)), &[], &[]);
                    while let Some(r) = ch.next_ulpdu() {
                        match r {
                            Ok(u) => got.push(u.to_vec()),
                            Err(e) => {
                                err = Some(e);
                                break 'chunks;
                            }
                        }
                    }
                }
                let case = format!("markers {markers}, flip at {at}, {per_chunk} per chunk");
                assert_eq!(err, Some(expected), "{case}");
                assert_eq!(got, sent[..bad_fpdu], "{case}");
            }
        }
    }
}

#[test]
fn a_prefix_crc_from_the_whole_agrees_with_reading_both_sides_at_every_split() {
    let data: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
    let whole = crate::crc::crc32c(&data);
    for at in 0..=data.len() {
        let head = crate::crc::crc32c(&data[..at]);
        let rest = crate::crc::crc32c(&data[at..]);
        assert_eq!(
            super::prefix_has_crc(&data, whole, at, head),
            (true, rest),
            "at {at}"
        );
        assert!(
            !super::prefix_has_crc(&data, whole, at, head ^ 1).0,
            "at {at}"
        );
    }
}
