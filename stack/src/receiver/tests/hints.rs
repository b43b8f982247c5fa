//! Placement hints: after an in-order placement that continues the one before it, the
//! receiver asks for the lines 4 to 8 KiB past its end not asked for yet (docs/architecture.md,
//! "Receive path"), and only then.

use super::unit::{cfg, frame, write};
use super::writable_region;
use crate::receiver::{InOrderSource, MemRegions, MpaReceiver};
use mpa::encoder::FpduEncoder;

#[test]
fn only_a_placement_that_continues_the_last_one_asks_for_the_next_lines() {
    for markers in [false, true] {
        let mut rx = MpaReceiver::new(&cfg(markers, None));
        let mut r = MemRegions::default();
        r.insert(writable_region(0x10, 64 << 10, 1));
        r.insert(writable_region(0x20, 64 << 10, 1));
        let mut enc = FpduEncoder::new(markers);
        let wire = frame(
            &mut enc,
            &[
                // One message in two FPDUs, then one right after it.
                write(0x10, 0, false, &[1; 700]),
                write(0x10, 700, true, &[2; 300]),
                write(0x10, 1000, true, &[3; 500]),
                // Elsewhere in the region, then a long FPDU right after that.
                write(0x10, 5000, true, &[4; 300]),
                write(0x10, 5300, true, &[5; 20_000]),
                // Another region where the last placement ended in the first.
                write(0x20, 25_300, true, &[6; 100]),
                // Zero-length, then one continuing the message before it.
                write(0x20, 25_400, true, &[]),
                write(0x20, 25_400, true, &[7; 64]),
            ],
        );
        for piece in wire.chunks(1448) {
            rx.handle_in_order(piece, InOrderSource::Segment, &mut r);
        }
        assert!(rx.poll_terminate().is_none(), "markers {markers}");
        assert_eq!(
            r.hints(),
            // As far past each continuing placement's end as it was long, at least 4 KiB and
            // at most 8 KiB, each line asked for once.
            [
                (0x10, 1000, 4 << 10),
                (0x10, 1000 + (4 << 10), 500),
                (0x10, 25_300, 8 << 10),
                (0x20, 25_464, 4 << 10),
            ],
            "markers {markers}"
        );
        let b = r.bytes(0x10).unwrap();
        assert!(b[5300..25_300].iter().all(|&x| x == 5));
    }
}
