//! The reassembly store's unit and property tests.

use super::*;
use proptest::prelude::*;

fn drain_all(r: &mut Reassembly, nxt: &mut SeqNumber, out: &mut Vec<u8>) {
    loop {
        let n = r.drain(*nxt, |s| out.extend_from_slice(s));
        if n == 0 {
            break;
        }
        *nxt = *nxt + n;
    }
}

#[test]
fn placed_spans_are_marked_but_not_copied() {
    let base = SeqNumber(100);
    let mut r = Reassembly::new(64, 64, 4);
    let data: Vec<u8> = (1..=20u8).collect();
    // Octets 4..10 and 12..15 of the segment were placed by the caller.
    assert_eq!(
        r.insert_except(base, base + 5u32, &data, &[4..10, 12..15]),
        Insert::Stored { new: 20, dup: None }
    );
    let mut sb = SackBlocks::new();
    r.sack_blocks(base, 4, None, &mut sb);
    assert_eq!(
        sb.as_slice(),
        &[SackBlock {
            left: base + 5u32,
            right: base + 25u32
        }]
    );
    // Fill the hole from outside and drain: placed octets come back stale (zero).
    r.advance(base + 5u32, 5);
    let mut out = Vec::new();
    let mut nxt = base + 5u32;
    drain_all(&mut r, &mut nxt, &mut out);
    let mut want = data.clone();
    want[4..10].fill(0);
    want[12..15].fill(0);
    assert_eq!(out, want);
    // Old octets trimmed at the front shift the spans with them.
    let mut r = Reassembly::new(64, 64, 4);
    assert_eq!(
        r.insert_except(
            base,
            SeqNumber(98),
            &data[..8],
            std::slice::from_ref(&(3..5))
        ),
        Insert::Stored { new: 6, dup: None }
    );
    let mut out = Vec::new();
    let mut nxt = base;
    drain_all(&mut r, &mut nxt, &mut out);
    assert_eq!(out, vec![3, 0, 0, 6, 7, 8]);
}

#[test]
fn merge_overlap_and_drain_across_wrap() {
    let base = SeqNumber(u32::MAX - 5);
    let mut r = Reassembly::new(16, 16, 4);
    let data: Vec<u8> = (0..16u8).collect();
    // [4,8) then [10,12) then [6,11) bridging both.
    assert_eq!(
        r.insert(base, base + 4u32, &data[4..8]),
        Insert::Stored { new: 4, dup: None }
    );
    assert_eq!(
        r.insert(base, base + 10u32, &data[10..12]),
        Insert::Stored { new: 2, dup: None }
    );
    assert_eq!(r.range_count(), 2);
    assert_eq!(
        r.insert(base, base + 6u32, &data[6..11]),
        Insert::Stored {
            new: 2,
            dup: Some((base + 6u32, base + 8u32))
        }
    );
    assert_eq!(r.range_count(), 1);
    assert_eq!(r.stored(), 8);
    assert_eq!(r.insert(base, base + 5u32, &data[5..9]), Insert::Duplicate);
    let mut sb = SackBlocks::new();
    r.sack_blocks(base, 4, None, &mut sb);
    assert_eq!(
        sb.as_slice(),
        &[SackBlock {
            left: base + 4u32,
            right: base + 12u32
        }]
    );
    // Deliver [0,4) from outside (zero copy): the store advances and [4,12) is readable.
    let mut nxt = base + 4u32;
    r.advance(nxt, 4);
    assert_eq!(r.readable(nxt), 8);
    let mut out = Vec::new();
    drain_all(&mut r, &mut nxt, &mut out);
    assert_eq!(out, &data[4..12]);
    assert_eq!(r.stored(), 0);
    // The ring wraps: store [14, 18) relative to the old base, which spans the ring end.
    let more: Vec<u8> = (100..120u8).collect();
    assert_eq!(
        r.insert(nxt, nxt + 2u32, &more[2..10]),
        Insert::Stored { new: 8, dup: None }
    );
    r.advance(nxt + 2u32, 2);
    nxt = nxt + 2u32;
    let mut out = Vec::new();
    drain_all(&mut r, &mut nxt, &mut out);
    assert_eq!(out, &more[2..10]);
}

#[test]
fn limits() {
    let nxt = SeqNumber(1000);
    // Tracked up to 100 above RCV.NXT, copied only below 10 (the limit is the ring).
    let mut r = Reassembly::new(100, 10, 2);
    assert_eq!(r.capacity(), 10);
    assert_eq!(r.span(), 100);
    assert_eq!(
        r.insert(nxt, nxt + 1u32, &[1; 6]),
        Insert::Stored { new: 6, dup: None }
    );
    // A copy past the ring's end would land on other offsets' octets: refused whole.
    assert_eq!(r.insert(nxt, nxt + 8u32, &[2; 3]), Insert::Full);
    assert_eq!(r.insert(nxt, nxt + 20u32, &[2; 2]), Insert::Full);
    assert_eq!(r.stored(), 6);
    assert_eq!(
        r.insert(nxt, nxt + 8u32, &[2; 2]),
        Insert::Stored { new: 2, dup: None }
    );
    // a third range: the far one of the two is pruned, as it lies above the new one
    let mut r3 = Reassembly::new(100, 100, 2);
    r3.insert(nxt, nxt + 10u32, &[1; 2]);
    r3.insert(nxt, nxt + 40u32, &[1; 2]);
    assert_eq!(
        r3.insert(nxt, nxt + 20u32, &[3; 1]),
        Insert::Stored { new: 1, dup: None }
    );
    assert_eq!(r3.pruned(), (1, 2));
    // ... and one above both is refused
    assert_eq!(r3.insert(nxt, nxt + 60u32, &[3; 1]), Insert::Full);
    // but extending an existing one is fine
    assert_eq!(
        r.insert(nxt, nxt + 7u32, &[1; 1]),
        Insert::Stored { new: 1, dup: None }
    );
    assert_eq!(r.stored(), 9);
    // beyond the reach: refused, never indexed
    assert_eq!(r.insert(nxt, nxt + 100u32, &[9; 1]), Insert::Full);
    // partly beyond: clipped
    let mut r = Reassembly::new(100, 100, 4);
    assert_eq!(
        r.insert(nxt, nxt + 98u32, &[9; 5]),
        Insert::Stored { new: 2, dup: None }
    );
    // before rcv_nxt: old octets skipped
    assert_eq!(
        r.insert(nxt, nxt + (-3i32) as u32, &[9; 3]),
        Insert::Duplicate
    );
    // ... and what is left starts at rcv_nxt: stored, readable at once.
    assert_eq!(
        r.insert(nxt, SeqNumber(997), &[9; 5]),
        Insert::Stored { new: 2, dup: None }
    );
    assert_eq!(r.readable(nxt), 2);
}

/// Beyond the ring only octets the caller placed are held: they are SACKed like the others,
/// a segment with any octet to copy there is refused whole (nothing changes), and a range
/// longer than the ring drains in passes round it, the copied octets intact.
#[test]
fn placed_octets_reach_past_the_ring() {
    let base = SeqNumber(u32::MAX - 3);
    let mut r = Reassembly::new(100, 16, 4);
    let data: Vec<u8> = (0..60u8).collect();
    // [10, 14) copied, inside the ring.
    assert_eq!(
        r.insert(base, base + 10u32, &data[10..14]),
        Insert::Stored { new: 4, dup: None }
    );
    // [14, 50): placed except [14, 16), which is copied (inside the ring).
    assert_eq!(
        r.insert_except(
            base,
            base + 14u32,
            &data[14..50],
            std::slice::from_ref(&(2..36))
        ),
        Insert::Stored { new: 36, dup: None }
    );
    assert_eq!((r.stored(), r.placed()), (6, 34));
    // [50, 60) with [58, 60) not placed: that copy would be past the ring.
    let before = (r.stored(), r.placed(), r.range_count());
    assert_eq!(
        r.insert_except(
            base,
            base + 50u32,
            &data[50..60],
            std::slice::from_ref(&(0..8))
        ),
        Insert::Full
    );
    assert_eq!((r.stored(), r.placed(), r.range_count()), before);
    // Placed whole: held.
    assert_eq!(
        r.insert_except(
            base,
            base + 50u32,
            &data[50..60],
            std::slice::from_ref(&(0..10))
        ),
        Insert::Stored { new: 10, dup: None }
    );
    let mut sb = SackBlocks::new();
    r.sack_blocks(base, 4, None, &mut sb);
    assert_eq!(
        sb.as_slice(),
        &[SackBlock {
            left: base + 10u32,
            right: base + 60u32
        }]
    );
    // [0, 10) arrives in order from outside; the 50 octets of [10, 60) drain (4 passes round
    // a 16-octet ring): the copied ones as they came, the placed ones stale.
    r.advance(base + 10u32, 10);
    let mut out = Vec::new();
    let mut passes = 0;
    let n = r.drain(base + 10u32, |s| {
        passes += 1;
        out.extend_from_slice(s);
    });
    assert_eq!((n, out.len()), (50, 50));
    assert!(passes >= 4, "{passes} passes");
    assert_eq!(&out[..6], &data[10..16]);
    assert!(r.is_empty());
    assert_eq!((r.stored(), r.placed()), (0, 0));
    // The ring is consistent afterwards: a copy at the new RCV.NXT + 3 reads back.
    let nxt = base + 60u32;
    assert_eq!(
        r.insert(nxt, nxt + 3u32, &data[0..5]),
        Insert::Stored { new: 5, dup: None }
    );
    let (a, b) = r.copied_octets(nxt, nxt + 3u32, nxt + 8u32).unwrap();
    assert_eq!([a, b].concat(), &data[0..5]);
}

#[test]
fn advance_trims_and_drops_ranges() {
    let nxt = SeqNumber(0);
    let mut r = Reassembly::new(64, 64, 8);
    r.insert(nxt, SeqNumber(2), &[0; 3]); // [2,5)
    r.insert(nxt, SeqNumber(8), &[0; 4]); // [8,12)
    r.advance(SeqNumber(10), 10);
    assert_eq!(r.stored(), 2);
    assert_eq!(r.readable(SeqNumber(10)), 2);
}

#[test]
fn sack_order_is_most_recent_first() {
    let nxt = SeqNumber(0);
    let mut r = Reassembly::new(1000, 1000, 8);
    for s in [100u32, 300, 500, 700, 900] {
        r.insert(nxt, SeqNumber(s), &[0; 10]);
    }
    r.insert(nxt, SeqNumber(310), &[0; 10]); // touches [300,310): most recent
    let mut sb = SackBlocks::new();
    r.sack_blocks(nxt, 3, None, &mut sb);
    let lefts: Vec<u32> = sb.as_slice().iter().map(|b| b.left.0).collect();
    assert_eq!(lefts, [300, 900, 700]);
    assert_eq!(sb.as_slice()[0].right, SeqNumber(320));
}

/// One operation of the model test: store a segment out of order, or deliver a segment
/// in order from outside (as the connection does), then drain.
#[derive(Debug, Clone)]
enum Op {
    Insert { off: u32, len: usize },
    InOrder { len: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u32..200, 1usize..60).prop_map(|(off, len)| Op::Insert { off, len }),
        1 => (1usize..40).prop_map(|len| Op::InOrder { len }),
    ]
}

/// The stream the model tests send: 100,000 octets that differ from their neighbours.
fn model_stream() -> Vec<u8> {
    (0..100_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect()
}

/// After a stored segment ending at `e` (offsets from the stream's start; RCV.NXT at `nxt`):
/// pruning took whole ranges from the far end, all above the segment, and the model of held
/// octets follows the store there; then the two agree octet for octet.
fn follow_pruning(
    r: &Reassembly,
    base: SeqNumber,
    nxt: usize,
    e: usize,
    held: &mut [bool],
) -> Result<(), TestCaseError> {
    let now = r.held_offsets(base + nxt);
    for (k, h) in held.iter_mut().enumerate().skip(nxt) {
        let in_store = now.iter().any(|x| x.contains(&(k - nxt)));
        if *h && !in_store {
            prop_assert!(k >= e, "pruned at or below the segment");
            *h = false;
        }
        prop_assert_eq!(*h, in_store);
    }
    Ok(())
}

/// Drains what became readable into `out`, as the connection does, moving the model's RCV.NXT
/// (`nxt`) on; each drain hands over exactly the octets it counts.
fn drain_model(
    r: &mut Reassembly,
    base: SeqNumber,
    nxt: &mut usize,
    held: &mut [bool],
    out: &mut Vec<u8>,
) -> Result<(), TestCaseError> {
    loop {
        let before = out.len();
        let n = r.drain(base + *nxt, |s| out.extend_from_slice(s));
        if n == 0 {
            return Ok(());
        }
        prop_assert_eq!(out.len() - before, n);
        for h in &mut held[*nxt..*nxt + n] {
            *h = false;
        }
        *nxt += n;
    }
}

proptest! {
    /// Against a naive model (a bitmap of held octets over the whole stream): random
    /// overlapping inserts give the same delivered stream, octet for octet, and the
    /// bounds hold at every step.
    #[test]
    fn matches_naive_model(start in any::<u32>(), cap in 64usize..256, limit in 1usize..256,
                           ops in proptest::collection::vec(op(), 1..120)) {
        let stream = model_stream();
        let base = SeqNumber(start);
        let mut r = Reassembly::new(cap, limit, 6);
        let mut nxt = 0usize; // delivered so far
        let mut held = vec![false; stream.len()];
        let mut out = Vec::new();
        // The last octet of the newest stored segment (RFC 2018 §4: the first SACK block
        // reports the range holding the most recently received segment).
        let mut newest: Option<usize> = None;
        for op in ops {
            match op {
                Op::Insert { off, len } => {
                    let s = nxt + off as usize;
                    let res = r.insert(base + nxt, base + s, &stream[s..s + len]);
                    if let Insert::Stored { .. } = res {
                        newest = Some((s + len).min(nxt + cap) - 1);
                    }
                    if s >= nxt + cap {
                        prop_assert_eq!(res, Insert::Full);
                        continue;
                    }
                    let e = (s + len).min(nxt + cap);
                    let new_in_model = (s..e).filter(|&k| !held[k]).count();
                    match res {
                        Insert::Stored { new, .. } => {
                            prop_assert_eq!(new, new_in_model);
                            for h in &mut held[s..e] { *h = true; }
                            follow_pruning(&r, base, nxt, e, &mut held)?;
                        }
                        Insert::Duplicate => prop_assert_eq!(new_in_model, 0),
                        Insert::Full => prop_assert!(new_in_model > 0),
                    }
                }
                Op::InOrder { len } => {
                    out.extend_from_slice(&stream[nxt..nxt + len]);
                    for h in &mut held[nxt..nxt + len] { *h = false; }
                    nxt += len;
                    r.advance(base + nxt, len);
                }
            }
            prop_assert!(r.stored() <= limit);
            prop_assert!(r.range_count() <= 6);
            prop_assert_eq!(r.placed(), 0);
            prop_assert_eq!(r.stored(), held.iter().filter(|&&h| h).count());
            drain_model(&mut r, base, &mut nxt, &mut held, &mut out)?;
            // The model's next octet is not held (else drain would have taken it).
            prop_assert!(!held[nxt]);
            // SACK blocks: distinct held ranges (whole, as the model holds them), the
            // newest segment's first.
            let mut sb = SackBlocks::new();
            r.sack_blocks(base + nxt, 4, None, &mut sb);
            let ranges = r.held_offsets(base + nxt);
            prop_assert_eq!(sb.len(), ranges.len().min(4));
            let mut seen = Vec::new();
            for b in sb.as_slice() {
                let (lo, hi) = (b.left.distance_from(base) as usize, b.right.distance_from(base) as usize);
                prop_assert!(ranges.contains(&((lo - nxt)..(hi - nxt))), "block {lo}..{hi} is not a held range");
                prop_assert!(!seen.contains(&lo), "block {lo} twice");
                seen.push(lo);
            }
            if let Some(n) = newest.filter(|&n| n >= nxt && held[n]) {
                let first = sb.as_slice()[0];
                let (lo, hi) = (first.left.distance_from(base) as usize, first.right.distance_from(base) as usize);
                prop_assert!(lo <= n && n < hi, "first block {lo}..{hi} misses the newest segment's octet {n}");
            }
            prop_assert_eq!(&out[..], &stream[..nxt]);
        }
    }
}

/// An insert whose octets `[a, b)` (relative to the segment) the caller placed itself.
#[derive(Debug, Clone)]
struct PlacedOp {
    off: u32,
    len: usize,
    placed: (usize, usize),
}

fn placed_op() -> impl Strategy<Value = Option<PlacedOp>> {
    prop_oneof![
        3 => (1u32..300, 1usize..60, 0usize..60, 0usize..60).prop_map(|(off, len, a, b)| {
            let (a, b) = (a.min(b).min(len), a.max(b).min(len));
            Some(PlacedOp { off, len, placed: (a, b) })
        }),
        1 => Just(None),
    ]
}

proptest! {
    /// With placed octets and a reach past the ring: against a model of held octets, every
    /// copy stays inside the ring (a segment needing one past it is refused), held octets
    /// are copied or placed (`stored + placed` = the model's count), and the delivered
    /// stream equals the sent one wherever no placed octet was involved.
    #[test]
    fn placed_past_the_ring_matches_model(start in any::<u32>(), span in 64usize..320,
                                          limit in 1usize..200,
                                          ops in proptest::collection::vec(placed_op(), 1..120)) {
        let stream = model_stream();
        let base = SeqNumber(start);
        let mut r = Reassembly::new(span, limit, 6);
        let ring = limit.clamp(1, span);
        prop_assert_eq!(r.capacity(), ring);
        let mut nxt = 0usize;
        let mut held = vec![false; stream.len()];
        let mut maybe_stale = vec![false; stream.len()];
        let mut out = Vec::new();
        for op in ops {
            match op {
                Some(PlacedOp { off, len, placed: (a, b) }) => {
                    let s = nxt + off as usize;
                    let res = r.insert_except(base + nxt, base + s, &stream[s..s + len], std::slice::from_ref(&(a..b)));
                    if s >= nxt + span {
                        prop_assert_eq!(res, Insert::Full);
                        continue;
                    }
                    let e = (s + len).min(nxt + span);
                    let new_in_model = (s..e).filter(|&k| !held[k]).count();
                    // Something new, and an octet to copy (not placed) past the ring: refused.
                    let copy_past = new_in_model > 0
                        && (s..e).any(|k| !(s + a..s + b).contains(&k) && k - nxt >= ring);
                    if copy_past {
                        prop_assert_eq!(res, Insert::Full);
                        continue;
                    }
                    match res {
                        Insert::Stored { new, .. } => {
                            prop_assert_eq!(new, new_in_model);
                            for k in s..e {
                                if !held[k] && (s + a..s + b).contains(&k) {
                                    maybe_stale[k] = true;
                                }
                                held[k] = true;
                            }
                            follow_pruning(&r, base, nxt, e, &mut held)?;
                        }
                        Insert::Duplicate => prop_assert_eq!(new_in_model, 0),
                        Insert::Full => prop_assert!(new_in_model > 0),
                    }
                }
                None => {
                    // 20 octets in order from outside.
                    out.extend_from_slice(&stream[nxt..nxt + 20]);
                    for k in nxt..nxt + 20 { held[k] = false; maybe_stale[k] = false; }
                    nxt += 20;
                    r.advance(base + nxt, 20);
                }
            }
            prop_assert!(r.stored() <= ring);
            prop_assert_eq!(r.stored() + r.placed(), held.iter().filter(|&&h| h).count());
            drain_model(&mut r, base, &mut nxt, &mut held, &mut out)?;
            prop_assert!(!held[nxt]);
            prop_assert_eq!(out.len(), nxt);
            for k in 0..nxt {
                if !maybe_stale[k] {
                    prop_assert_eq!(out[k], stream[k], "octet {} (copied) differs", k);
                }
            }
        }
    }
}

/// Stored octets can be read back in place (across the ring's wrap) and handed over as placed
/// by the caller: they then count as placed, not against the octet limit, and only copied
/// octets of one present range are shown.
#[test]
fn copied_octets_are_shown_and_can_be_marked_placed() {
    let base = SeqNumber(1000);
    let mut r = Reassembly::new(64, 64, 4);
    // RCV.NXT moved 50 octets first, so the ring wraps inside what is stored next.
    r.advance(base + 50u32, 50);
    let nxt = base + 50u32;
    let data: Vec<u8> = (1..=30u8).collect();
    assert_eq!(
        r.insert_except(nxt, nxt + 10u32, &data, std::slice::from_ref(&(20..25))),
        Insert::Stored { new: 30, dup: None }
    );
    assert_eq!((r.stored(), r.placed()), (25, 5));
    // Octets 10..30 of the stream: the first 20 of the segment, across the wrap (the ring's
    // head is at 50 of 64, so stream offset 14 is the ring's end).
    let (p, q) = r.copied_octets(nxt, nxt + 10u32, nxt + 30u32).unwrap();
    assert_eq!((p.len(), q.len()), (4, 16));
    assert_eq!([p, q].concat(), data[..20]);
    // Not shown: a range reaching into placed octets, below or beyond what is held, or empty.
    assert!(r.copied_octets(nxt, nxt + 25u32, nxt + 32u32).is_none());
    assert!(r.copied_octets(nxt, nxt + 5u32, nxt + 12u32).is_none());
    assert!(r.copied_octets(nxt, nxt + 35u32, nxt + 41u32).is_none());
    assert!(r.copied_octets(nxt, nxt + 12u32, nxt + 12u32).is_none());
    // Handed over: 15 copied octets become placed.
    assert!(r.mark_placed(nxt, nxt + 10u32, nxt + 25u32));
    assert_eq!((r.stored(), r.placed()), (10, 20));
    assert!(r.copied_octets(nxt, nxt + 10u32, nxt + 12u32).is_none());
    assert!(!r.mark_placed(nxt, nxt + 10u32, nxt + 12u32), "only once");
    // The range still reads as present: it drains whole (the placed octets stale) and the
    // counters return to zero.
    r.advance(nxt + 10u32, 10);
    let mut out = Vec::new();
    let mut at = nxt + 10u32;
    drain_all(&mut r, &mut at, &mut out);
    assert_eq!(out.len(), 30);
    assert_eq!(out[25..], data[25..]);
    assert_eq!((r.stored(), r.placed()), (0, 0));
}
