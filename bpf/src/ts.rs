//! The peer's timestamped segments the program records for watched connections before their
//! hand-over (`struct ts_record` in `steer.bpf.c`), and the rule that picks the TS.Recent the
//! kernel had from them (docs/environment.md, "Why TS.Recent must be inherited").

/// Octets in `struct ts_record`: `next`, `count`, then [`TS_SEGMENTS`] × (seq, end, tsval).
pub(crate) const TS_RECORD_SIZE: usize = 8 + TS_SEGMENTS * 12;

/// Segments remembered per connection (`TS_RECORDS` in `steer.bpf.c`).
pub const TS_SEGMENTS: usize = 4;

/// One timestamped segment of the peer, as the program saw it on its way to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TsSegment {
    /// SEG.SEQ.
    pub seq: u32,
    /// SEG.SEQ + SEG.LEN, SYN and FIN counting one each.
    pub end: u32,
    /// Its TSval.
    pub tsval: u32,
}

/// Decodes a `struct ts_record` read from the map: its segments, oldest first.
pub(crate) fn decode(b: &[u8]) -> Vec<TsSegment> {
    if b.len() < TS_RECORD_SIZE {
        return Vec::new();
    }
    let word = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let next = word(0) as usize % TS_SEGMENTS;
    let count = (word(4) as usize).min(TS_SEGMENTS);
    // The newest is just before `next`; the oldest of `count` is `count` slots before that.
    (0..count)
        .map(|k| (next + TS_SEGMENTS - count + k) % TS_SEGMENTS)
        .map(|slot| {
            let at = 8 + slot * 12;
            TsSegment {
                seq: word(at),
                end: word(at + 4),
                tsval: word(at + 8),
            }
        })
        .collect()
}

/// The TS.Recent the kernel had when it was frozen at `rcv_nxt`, from the recorded segments
/// (oldest first): the TSval of the newest segment that the kernel would have taken it from,
/// one with SEG.SEQ ≤ RCV.NXT ≤ SEG.SEQ + SEG.LEN (RFC 7323 §4.3: the segment that ended at
/// the last acknowledged point, or a pure ACK at it). `None` when no segment qualifies.
///
/// Why this rule: a blind forger who does not know RCV.NXT cannot plant a segment that passes
/// it (except by guessing RCV.NXT to within the segment's length), and a segment wholly below
/// RCV.NXT (an old retransmission) is skipped, which at worst yields an older, more permissive
/// TS.Recent. Comparisons are modulo 2³² (RFC 9293 §3.4).
pub fn choose_ts_recent(segments: &[TsSegment], rcv_nxt: u32) -> Option<u32> {
    segments
        .iter()
        .rev()
        .find(|s| {
            let len = s.end.wrapping_sub(s.seq);
            rcv_nxt.wrapping_sub(s.seq) <= len && len < 1 << 31
        })
        .map(|s| s.tsval)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(seq: u32, len: u32, tsval: u32) -> TsSegment {
        TsSegment {
            seq,
            end: seq.wrapping_add(len),
            tsval,
        }
    }

    #[test]
    fn the_segment_that_ended_at_rcv_nxt_wins() {
        // SYN, then the Request (20 + 100 octets) ending at RCV.NXT.
        let segs = [seg(999, 1, 10), seg(1000, 120, 11)];
        assert_eq!(choose_ts_recent(&segs, 1120), Some(11));
    }

    #[test]
    fn a_later_pure_ack_at_rcv_nxt_wins_over_the_data() {
        let segs = [seg(1000, 120, 11), seg(1120, 0, 12)];
        assert_eq!(choose_ts_recent(&segs, 1120), Some(12));
    }

    #[test]
    fn forged_segments_away_from_rcv_nxt_are_never_chosen() {
        let real = seg(1000, 120, 11);
        // Newer, but at a guessed sequence number: below, above, or half the space away.
        for forged in [
            seg(1119u32.wrapping_sub(5000), 0, 11 + (1 << 31)),
            seg(1121, 0, 11 + (1 << 31)),
            seg(1120 + (1 << 31), 0, 5),
            seg(1121, 100, 5),
        ] {
            assert_eq!(
                choose_ts_recent(&[real, forged], 1120),
                Some(11),
                "{forged:?}"
            );
        }
    }

    #[test]
    fn segments_wholly_below_rcv_nxt_do_not_count() {
        // An old retransmission (ends before RCV.NXT) and nothing at RCV.NXT: unknown.
        let segs = [seg(1000, 100, 11)];
        assert_eq!(choose_ts_recent(&segs, 1120), None);
        assert_eq!(choose_ts_recent(&[], 1120), None);
    }

    #[test]
    fn sequence_numbers_wrap() {
        let segs = [seg(u32::MAX - 10, 20, 7)];
        assert_eq!(choose_ts_recent(&segs, 9), Some(7));
        assert_eq!(choose_ts_recent(&segs, u32::MAX - 10), Some(7));
        assert_eq!(choose_ts_recent(&segs, 10), None);
    }

    #[test]
    fn the_ring_decodes_oldest_first() {
        let mut b = vec![0u8; TS_RECORD_SIZE];
        let put =
            |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        // Five segments written into four slots: slot 0 was overwritten by the fifth.
        for (i, (seq, tsval)) in [(10, 1), (20, 2), (30, 3), (40, 4), (50, 5)]
            .iter()
            .enumerate()
        {
            let slot = i % TS_SEGMENTS;
            put(&mut b, 8 + slot * 12, *seq);
            put(&mut b, 8 + slot * 12 + 4, seq + 10);
            put(&mut b, 8 + slot * 12 + 8, *tsval);
        }
        put(&mut b, 0, 1);
        put(&mut b, 4, 4);
        let tsvals: Vec<u32> = decode(&b).iter().map(|s| s.tsval).collect();
        assert_eq!(tsvals, [2, 3, 4, 5]);
        // Two written: two decoded.
        put(&mut b, 0, 2);
        put(&mut b, 4, 2);
        let seqs: Vec<u32> = decode(&b).iter().map(|s| s.seq).collect();
        assert_eq!(seqs, [50, 20]);
    }
}
