//! Property tests of the framing path: encoder → decoder round trips, the out-of-order
//! locator against the whole-stream truth, and single-octet corruption.

use mpa::decoder::{DecodeError, FpduDecoder};
use mpa::encoder::FpduEncoder;
use mpa::locator::{FpduLocator, LocatedFpdu};
use mpa::markers::{self, MarkerGrid};
use mpa::seq::SeqNumber;
use proptest::prelude::*;

/// One FPDU of the truth: wire range in the stream and its ULPDU.
#[derive(Debug, Clone)]
struct Sent {
    start: usize,
    end: usize,
    ulpdu: Vec<u8>,
}

/// A stream position where an FPDU can begin: 4-aligned and not right behind a marker
/// position (the marker there would lead the FPDU, so the FPDU begins on it).
fn fpdu_boundary(pos: u32) -> u32 {
    let pos = pos & !3;
    if pos % 512 == 4 {
        pos - 4
    } else {
        pos
    }
}

fn encode_stream(start_pos: u32, markers: bool, sizes: &[usize], seed: u8) -> (Vec<u8>, Vec<Sent>) {
    assert_eq!(start_pos, fpdu_boundary(start_pos));
    let mut enc = FpduEncoder::at_position(start_pos, markers);
    let mut wire = Vec::new();
    let mut sent = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let u: Vec<u8> = (0..n)
            .map(|j| (j as u8).wrapping_mul(31).wrapping_add(i as u8 ^ seed))
            .collect();
        let r = enc.encode(&u, &mut wire).unwrap();
        sent.push(Sent {
            start: r.start,
            end: r.end,
            ulpdu: u,
        });
    }
    (wire, sent)
}

fn decode_chunks(
    dec: &mut FpduDecoder,
    wire: &[u8],
    cuts: &[usize],
) -> Result<Vec<Vec<u8>>, DecodeError> {
    let mut got = Vec::new();
    let mut at = 0;
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
    cuts.push(wire.len());
    cuts.sort_unstable();
    for c in cuts {
        let mut ch = dec.feed(&wire[at..c]);
        while let Some(r) = ch.next_ulpdu() {
            got.push(r?.to_vec());
        }
        at = c;
    }
    Ok(got)
}

fn sizes_strategy(mulpdu: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop_oneof![0..=mulpdu, 0usize..40, Just(mulpdu)], 1..40)
}

fn params() -> impl Strategy<Value = (bool, bool, u32, u32, usize)> {
    (
        any::<bool>(),
        any::<bool>(),
        // SeqStart: anywhere, often near the 32-bit wrap.
        prop_oneof![any::<u32>(), (u32::MAX - 4096)..=u32::MAX],
        // Start position of the encoder, 4-aligned, sometimes just before a wrap of the
        // sequence space relative to SeqStart.
        prop_oneof![
            (0u32..4096).prop_map(|p| fpdu_boundary(p * 4)),
            ((u32::MAX / 4 - 2048)..=u32::MAX / 4).prop_map(|p| fpdu_boundary(p * 4))
        ],
        prop_oneof![
            Just(536usize),
            Just(1448),
            Just(1460),
            Just(3454),
            Just(8948)
        ],
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn round_trip((markers, crc, _seq_start, start, emss) in params(),
                  seed in any::<u8>(),
                  sizes in sizes_strategy(9000),
                  cuts in prop::collection::vec(any::<usize>(), 0..60)) {
        let mulpdu = markers::mulpdu(emss, markers);
        let sizes: Vec<usize> = sizes.into_iter().map(|s| s.min(mulpdu)).collect();
        let (wire, sent) = encode_stream(start, markers, &sizes, seed);
        let mut dec = FpduDecoder::at_position(start, markers, crc);
        let got = decode_chunks(&mut dec, &wire, &cuts).unwrap();
        prop_assert_eq!(got.len(), sent.len());
        for (g, s) in got.iter().zip(&sent) {
            prop_assert_eq!(g, &s.ulpdu);
        }
        prop_assert_eq!(dec.position(), start.wrapping_add(wire.len() as u32));
        prop_assert_eq!(dec.buffered(), 0);
        // Every FPDU fits one EMSS segment wherever it starts.
        for s in &sent {
            prop_assert!(s.end - s.start <= emss.max(140));
        }
    }

    #[test]
    fn locator_finds_every_locatable_fpdu((_m, _crc, seq_start, start, _emss) in params(),
                  seed in any::<u8>(),
                  sizes in sizes_strategy(2000),
                  cuts in prop::collection::vec(any::<usize>(), 1..40),
                  order in any::<u64>()) {
        let (wire, sent) = encode_stream(start, true, &sizes, seed);
        let grid = MarkerGrid::new(SeqNumber(seq_start), true);
        let loc = FpduLocator::new(grid, true);
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
        cuts.push(0);
        cuts.push(wire.len());
        cuts.sort_unstable();
        cuts.dedup();
        let mut segs: Vec<(usize, usize)> = cuts.windows(2).map(|w| (w[0], w[1])).collect();
        // Deliver in a pseudo-random order: the locator holds no state between segments.
        let mut x = order | 1;
        for i in (1..segs.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            segs.swap(i, (x % (i as u64 + 1)) as usize);
        }
        for (a, b) in segs {
            let seq = grid.seq(start.wrapping_add(a as u32));
            let mut out: Vec<LocatedFpdu> = Vec::new();
            loc.locate(seq, &wire[a..b], &mut out);
            let inside: Vec<&Sent> = sent.iter().filter(|s| s.start >= a && s.end <= b).collect();
            // Locatable: some marker lying wholly in the segment belongs to an FPDU that
            // starts inside it.
            let anchored = sent.iter().any(|s| {
                s.start >= a && s.start < b && (s.start..s.end).any(|o| {
                    let pos = start.wrapping_add(o as u32);
                    markers::is_marker_pos(pos) && o + 4 <= b && o + 4 <= s.end
                })
            });
            if anchored {
                prop_assert_eq!(out.len(), inside.len(), "segment {}..{}", a, b);
            }
            for f in &out {
                let s = sent.iter().find(|s| s.start == a + f.range.start);
                prop_assert!(s.is_some(), "located FPDU at {} is not one that was sent", a + f.range.start);
                let s = s.unwrap();
                prop_assert_eq!(a + f.range.end, s.end);
                prop_assert_eq!(f.seq, grid.seq(start.wrapping_add(s.start as u32)));
                prop_assert_eq!(&f.ulpdu(&grid, &wire[a..b]).unwrap().to_vec(), &s.ulpdu);
            }
        }
    }

    #[test]
    fn single_octet_flip_is_detected((markers, _crc, seq_start, start, _emss) in params(),
                  seed in any::<u8>(),
                  sizes in sizes_strategy(1500),
                  which in any::<prop::sample::Index>(),
                  flip in 1u8..=255) {
        let (mut wire, sent) = encode_stream(start, markers, &sizes, seed);
        let at = which.index(wire.len());
        wire[at] ^= flip;
        let hit = sent.iter().position(|s| s.start <= at && at < s.end).unwrap();
        // In order: an error, or the stream ends inside an FPDU (a length field was hit);
        // never the original ULPDUs.
        let mut dec = FpduDecoder::at_position(start, markers, true);
        match decode_chunks(&mut dec, &wire, &[]) {
            Err(_) => {}
            Ok(got) => {
                prop_assert!(dec.buffered() > 0 || got.len() < sent.len(),
                    "flip at {} in FPDU {} went unnoticed", at, hit);
                prop_assert!(got.len() <= hit);
            }
        }
        // Out of order: nothing located covers the flipped octet.
        if markers {
            let grid = MarkerGrid::new(SeqNumber(seq_start), true);
            let mut out = Vec::new();
            FpduLocator::new(grid, true).locate(grid.seq(start), &wire, &mut out);
            for f in &out {
                prop_assert!(!f.range.contains(&at), "corrupt FPDU {:?} located", f.range);
            }
        }
    }
}
