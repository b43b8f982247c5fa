//! Fuzz entry points: ordinary functions, each also run by a unit test; the cargo-fuzz targets
//! in `fuzz/` are one line each. None may panic on any input.

use crate::decoder::FpduDecoder;
use crate::locator::FpduLocator;
use crate::markers::MarkerGrid;
use crate::seq::SeqNumber;
use crate::wire::ddp::{DdpRepr, TerminateRepr};

fn flags(b: u8) -> (bool, bool) {
    (b & 1 != 0, b & 2 != 0)
}

/// Feeds `data` to in-order decoders in chunks whose sizes come from the input itself.
pub fn fuzz_decoder(data: &[u8]) {
    let Some((&cfg, rest)) = data.split_first() else {
        return;
    };
    let (markers, crc) = flags(cfg);
    let start = u32::from(cfg >> 2) * 4;
    let mut dec = FpduDecoder::at_position(start, markers, crc);
    let chunk = usize::from(cfg >> 4) * 97 + 1;
    let mut total = 0usize;
    for c in rest.chunks(chunk) {
        let mut ch = dec.feed(c);
        while let Some(r) = ch.next_ulpdu() {
            match r {
                Ok(u) => {
                    total += u.len();
                    let mut head = [0u8; 18];
                    u.copy_prefix(&mut head);
                    let _ = DdpRepr::parse(&head[..u.len().min(18)], 1);
                }
                Err(_) => break,
            }
        }
    }
    assert!(total <= rest.len());
}

/// Runs the out-of-order locator over `data` as one segment at a sequence number taken from
/// the input.
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

/// Parses `data` as a DDP/RDMAP header (both versions) and as a Terminate header.
pub fn fuzz_ddp(data: &[u8]) {
    for v in [0, 1] {
        if let Ok((repr, off)) = DdpRepr::parse(data, v) {
            assert_eq!(off, repr.header_len());
            let mut out = [0u8; 18];
            let n = repr.emit(&mut out, v).unwrap_or(0);
            assert_eq!(n, off);
            if let Some(rest) = data.get(off..) {
                let _ = TerminateRepr::parse(rest);
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
        for s in &samples {
            fuzz_decoder(s);
            fuzz_locator(s);
            fuzz_ddp(s);
            fuzz_startup(s);
        }
    }
}
