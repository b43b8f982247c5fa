//! One connection against a scripted peer. Every hand-over starts 2000 octets (receive) and
//! 500 octets (send) below the 32-bit wrap, and the peer's TSval just below its wrap, so
//! every test below crosses all three.

use std::time::Instant;

use mpa::seq::SeqNumber;
use proptest::prelude::*;

use super::harness::*;
use crate::tcp::{
    Connection, DropReason, Event, HandoverState, State, TcpConfig, TcpError, TextLengths,
    TsHandover,
};
use crate::wire::tcp::{SackBlock, TcpFlags, TcpTimestamps};

/// The defaults without keepalive, whose timer would stand in every `poll_timeout` below
/// (tests/reaping.rs has it).
fn cfg() -> TcpConfig {
    TcpConfig {
        keepalive_idle: None,
        ..TcpConfig::default()
    }
}

#[test]
fn in_order_zero_copy_and_ack_every_second_segment() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let p = Peer::new(true);
    assert!(drain_tx(&mut c, t0).is_empty(), "nothing to say yet");

    let (r, d) = p.data(0, SEG);
    let (o, got) = feed(&mut c, t0, &r, &d);
    assert_eq!(o.in_order, 0..SEG);
    assert_eq!(o.reassembled, 0);
    assert_eq!(got, d);
    assert!(drain_tx(&mut c, t0).is_empty(), "one segment: delayed");
    assert_eq!(c.poll_timeout(), Some(t0 + ms(40)));

    let (r, d) = p.data(SEG as u64, SEG);
    feed(&mut c, t0, &r, &d);
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1, "second segment: ACK at once");
    assert!(tx[0].is_pure_ack());
    assert_eq!(tx[0].ack(), p.base + 2 * SEG as u32);
    assert_eq!(tx[0].repr.seq_number, SeqNumber(SND0));
    // TSecr = the TSval of the first unacknowledged segment (RFC 7323 §4.3).
    assert_eq!(
        tx[0].repr.options.timestamps,
        Some(TcpTimestamps {
            tsval: TSVAL_AT_FREEZE,
            tsecr: p.tsval
        })
    );
    assert_eq!(c.poll_timeout(), None, "delayed-ACK timer cleared");

    // Third segment, then the end of the RX burst: ACK.
    let (r, d) = p.data(2 * SEG as u64, SEG);
    feed(&mut c, t0, &r, &d);
    assert!(drain_tx(&mut c, t0).is_empty());
    c.end_of_burst(t0);
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].ack(), p.base + 3 * SEG as u32);

    // Fourth, no end of burst: the delayed-ACK timer sends it.
    let (r, d) = p.data(3 * SEG as u64, SEG);
    feed(&mut c, t0 + ms(1), &r, &d);
    assert!(drain_tx(&mut c, t0 + ms(1)).is_empty());
    let at = c.poll_timeout().unwrap();
    assert_eq!(at, t0 + ms(41));
    c.handle_timeout(at);
    let tx = drain_tx(&mut c, at);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].ack(), p.base + 4 * SEG as u32);
    assert_eq!(c.rcv_nxt(), p.base + 4 * SEG as u32);
    assert!(c.rcv_nxt().0 < RCV0, "crossed the wrap");
    let s = c.stats();
    assert_eq!((s.in_order_segs, s.ooo_segs, s.acks_sent), (4, 0, 3));
    assert_eq!(s.octets_delivered, 4 * SEG as u64);
}

#[test]
fn overlap_is_trimmed_and_duplicates_acked() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let p = Peer::new(true);
    let (r, d) = p.data(0, 1000);
    feed(&mut c, t0, &r, &d);
    // [500, 1500): the first 500 octets are old.
    let (r, d) = p.data(500, 1000);
    let (o, got) = feed(&mut c, t0, &r, &d);
    assert_eq!(o.in_order, 500..1000);
    assert_eq!(got, stream(1000, 500));
    assert_eq!(c.stats().dup_partial, 1);
    drain_tx(&mut c, t0);
    // A full duplicate: dropped, answered with a duplicate ACK at once.
    let (r, d) = p.data(0, 1000);
    let (o, got) = feed(&mut c, t0, &r, &d);
    assert_eq!(o.dropped, Some(DropReason::Duplicate));
    assert!(got.is_empty());
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].ack(), p.base + 1500u32);
    assert_eq!(c.stats().dup_full, 1);
}

/// A segment whose octets the caller holds in pieces (`handle_segment_in_order`, only its
/// length given) is taken exactly as the same segment in one piece — in order, partly old,
/// wholly old, with FIN — and one that starts beyond RCV.NXT is refused with nothing changed.
#[test]
fn a_segment_taken_by_length_is_taken_as_in_one_piece() {
    let t0 = Instant::now();
    let mut whole = conn(t0, true, &cfg());
    let mut by_len = conn(t0, true, &cfg());
    let p = Peer::new(true);
    let script: [(u64, usize, bool); 7] = [
        (0, 1000, false),
        (500, 1000, false), // [500, 1000) old
        (0, 1000, false),   // wholly old
        (3000, 500, false), // beyond RCV.NXT: refused by length
        (1500, 1500, false),
        (2900, 700, false), // reaches into what the store holds
        (3500, 100, true),
    ];
    for (i, &(off, len, fin)) in script.iter().enumerate() {
        let (mut r, d) = p.data(off, len);
        if fin {
            r.flags = r.flags | TcpFlags::FIN;
        }
        let now = t0 + ms(i as u64);
        let a = whole.handle_segment(now, &r, &d);
        let before = (by_len.rcv_nxt(), by_len.stats().segs_in);
        let b = match by_len.handle_segment_in_order(now, &r, TextLengths::one(len)) {
            Some(b) => {
                assert!(off != 3000, "segment {i} is out of order");
                b
            }
            None => {
                assert_eq!(off, 3000, "segment {i} refused");
                assert_eq!((by_len.rcv_nxt(), by_len.stats().segs_in), before);
                by_len.handle_segment(now, &r, &d)
            }
        };
        assert_eq!(
            (a.in_order.clone(), a.reassembled, a.dropped),
            (b.in_order.clone(), b.reassembled, b.dropped),
            "segment {i}"
        );
        if a.reassembled > 0 {
            let (mut x, mut y) = (Vec::new(), Vec::new());
            whole.drain_reassembled(|s| x.extend_from_slice(s));
            by_len.drain_reassembled(|s| y.extend_from_slice(s));
            assert_eq!(x, y);
        }
        whole.end_of_burst(now);
        by_len.end_of_burst(now);
        let (ta, tb) = (drain_tx(&mut whole, now), drain_tx(&mut by_len, now));
        assert_eq!(ta.len(), tb.len(), "segment {i}");
        for (x, y) in ta.iter().zip(&tb) {
            assert_eq!((x.ack(), x.sack()), (y.ack(), y.sack()), "segment {i}");
        }
    }
    assert_eq!(whole.rcv_nxt(), p.base + 3600u32 + 1u32, "FIN taken");
    assert_eq!(by_len.rcv_nxt(), whole.rcv_nxt());
    let (a, b) = (whole.stats(), by_len.stats());
    assert_eq!(
        (a.in_order_segs, a.ooo_segs, a.dup_full, a.dup_partial),
        (b.in_order_segs, b.ooo_segs, b.dup_full, b.dup_partial)
    );
    assert_eq!((a.dup_full, a.dup_partial, a.ooo_segs), (1, 2, 1));
}

#[test]
fn out_of_order_sack_and_reassembly() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let p = Peer::new(true);
    let s = SEG as u64;
    let seq = |k: u64| p.base + (k * s) as u32;
    feed(&mut c, t0, &p.data(0, SEG).0, &p.data(0, SEG).1);

    // Segment 2 (1 is missing): stored, ACKed at once with one SACK block.
    let (o, got) = feed(&mut c, t0, &p.data(2 * s, SEG).0, &p.data(2 * s, SEG).1);
    assert!(o.in_order.is_empty() && got.is_empty() && o.dropped.is_none());
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].ack(), seq(1));
    assert_eq!(
        tx[0].sack(),
        &[SackBlock {
            left: seq(2),
            right: seq(3)
        }]
    );
    // Segment 4: the newest block comes first (RFC 2018 §4).
    feed(&mut c, t0, &p.data(4 * s, SEG).0, &p.data(4 * s, SEG).1);
    let tx = drain_tx(&mut c, t0);
    assert_eq!(
        tx[0].sack(),
        &[
            SackBlock {
                left: seq(4),
                right: seq(5)
            },
            SackBlock {
                left: seq(2),
                right: seq(3)
            }
        ]
    );
    // Segment 2 again: a duplicate out of order.
    let (o, _) = feed(&mut c, t0, &p.data(2 * s, SEG).0, &p.data(2 * s, SEG).1);
    assert_eq!(o.dropped, Some(DropReason::Duplicate));
    assert_eq!(drain_tx(&mut c, t0).len(), 1);
    assert_eq!(c.reassembly_stored(), 2 * SEG);

    // Segment 1 fills the first hole: its payload in order, then segment 2 from the store.
    let (o, got) = feed(&mut c, t0, &p.data(s, SEG).0, &p.data(s, SEG).1);
    assert_eq!(o.in_order, 0..SEG);
    assert_eq!(o.reassembled, SEG);
    assert_eq!(got, stream(s, 2 * SEG));
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1, "a filled hole is ACKed at once");
    assert_eq!(tx[0].ack(), seq(3));
    assert_eq!(
        tx[0].sack(),
        &[SackBlock {
            left: seq(4),
            right: seq(5)
        }]
    );
    let (_, got) = feed(&mut c, t0, &p.data(3 * s, SEG).0, &p.data(3 * s, SEG).1);
    assert_eq!(got, stream(3 * s, 2 * SEG));
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx[0].ack(), seq(5));
    assert!(tx[0].sack().is_empty(), "no holes, no SACK");
    let st = c.stats();
    assert_eq!(st.ooo_segs, 2);
    assert_eq!(st.dup_full, 1);
    assert_eq!(st.octets_reassembled, 2 * SEG as u64);
    assert_eq!(st.octets_delivered, 5 * SEG as u64);
    assert_eq!(c.reassembly_stored(), 0);
}

#[test]
fn sack_block_count_fits_the_option_space() {
    for ts in [true, false] {
        let t0 = Instant::now();
        // An ACK per segment, so that each ACK shows the blocks of its moment.
        let strict = TcpConfig {
            ooo_ack_every: 1,
            ..cfg()
        };
        let mut c = conn(t0, ts, &strict);
        let p = Peer::new(ts);
        for k in 0..6u64 {
            let off = (2 * k + 1) * 100;
            feed(&mut c, t0, &p.data(off, 50).0, &p.data(off, 50).1);
        }
        let tx = drain_tx(&mut c, t0);
        // One ACK per out-of-order segment (RFC 5681 §4.2), each frozen at its moment.
        assert_eq!(tx.len(), 6);
        for (k, a) in tx.iter().enumerate() {
            let off = (2 * k as u32 + 1) * 100;
            assert_eq!(a.sack()[0].left, p.base + off, "its own segment first");
            assert_eq!(a.sack().len(), (k + 1).min(if ts { 3 } else { 4 }));
        }
        let last = &tx[5];
        // RFC 2018 §3: 4 blocks fit without timestamps, 3 with.
        assert_eq!(last.sack().len(), if ts { 3 } else { 4 });
        assert_eq!(last.sack()[0].left, p.base + 1100u32, "most recent first");
        assert_eq!(
            last.sack()[1].left,
            p.base + 900u32,
            "then the most recently reported"
        );
        assert!(last.repr.header_len() <= 60);
    }
}

/// The default shares ACKs within a burst (`ooo_ack_every`): out-of-order segments that
/// start new SACK blocks share one ACK as long as its blocks can report every range changed
/// since the previous ACK; the next one that would not fit freezes it. So every block is
/// reported by some ACK of the burst (a sender's RACK would otherwise take an unreported
/// range for lost), with a third of the ACKs.
#[test]
fn shared_acks_report_every_changed_range() {
    for ts in [true, false] {
        let t0 = Instant::now();
        let mut c = conn(t0, ts, &cfg());
        let p = Peer::new(ts);
        let blocks = if ts { 3 } else { 4 };
        // Seven new blocks in one burst: 100..150, 300..350, ... (the holes between lost).
        let off = |k: u32| (2 * k + 1) * 100;
        for k in 0..7u32 {
            let o = u64::from(off(k));
            feed(&mut c, t0, &p.data(o, 50).0, &p.data(o, 50).1);
        }
        c.end_of_burst(t0);
        let tx = drain_tx(&mut c, t0);
        assert_eq!(tx.len(), 7usize.div_ceil(blocks), "ts {ts}");
        assert_eq!(c.stats().acks_shared, 7 - tx.len() as u64);
        for k in 0..7u32 {
            let (l, r) = (p.base + off(k), p.base + off(k) + 50u32);
            assert!(
                tx.iter()
                    .any(|a| a.sack().iter().any(|b| b.left == l && b.right == r)),
                "ts {ts}: block {k} reported"
            );
        }
        for a in &tx {
            assert_eq!(a.ack(), p.base, "nothing in order");
            assert_eq!(a.sack().len(), blocks.min(a.sack().len()));
        }
        // The newest first in the last ACK (RFC 2018 §4).
        assert_eq!(tx.last().unwrap().sack()[0].left, p.base + off(6));

        // A segment that extends a block already reported and one that starts a new block
        // share an ACK; a duplicate still gets its own D-SACK.
        let o = u64::from(off(6) + 50);
        feed(&mut c, t0, &p.data(o, 50).0, &p.data(o, 50).1);
        feed(&mut c, t0, &p.data(2000, 50).0, &p.data(2000, 50).1);
        feed(&mut c, t0, &p.data(2000, 50).0, &p.data(2000, 50).1);
        c.end_of_burst(t0);
        let tx = drain_tx(&mut c, t0);
        assert_eq!(tx.len(), 2, "ts {ts}: shared ACK, then the D-SACK");
        assert_eq!(tx[0].sack()[0].left, p.base + 2000u32);
        assert_eq!(tx[0].sack()[1].left, p.base + off(6));
        assert_eq!(tx[0].sack()[1].right, p.base + off(6) + 100u32);
        assert_eq!(tx[1].sack()[0].left, p.base + 2000u32);
        assert_eq!(tx[1].sack()[0].right, p.base + 2050u32);
        assert_eq!(c.stats().dsacks_sent, 1);
    }
}

#[test]
fn rst_exactly_at_rcv_nxt_resets() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let mut p = Peer::new(true);
    feed(&mut c, t0, &p.data(0, 100).0, &p.data(0, 100).1);
    // PAWS does not apply to RST: an old TSval does not save it.
    p.tsval = PEER_TS0 - 1000;
    let rst = p.repr(p.base + 100u32, TcpFlags::RST);
    let o = c.handle_segment(t0, &rst, &[]);
    assert_eq!(o.dropped, None);
    assert_eq!(c.state(), State::Closed);
    assert_eq!(c.poll_event(), Some(Event::Reset));
    assert_eq!(c.error(), Some(&TcpError::Reset));
    assert!(drain_tx(&mut c, t0).is_empty(), "a RST is never answered");
    assert_eq!(c.send(b"x"), 0);
    assert_eq!(c.stats().rst_accepted, 1);
}

#[test]
fn rst_in_window_but_not_exact_gets_a_challenge_ack() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let p = Peer::new(true);
    let rst = p.repr(p.base + 1u32, TcpFlags::RST);
    let o = c.handle_segment(t0, &rst, &[]);
    assert_eq!(o.dropped, Some(DropReason::BadRst));
    assert_eq!(c.state(), State::Established);
    assert_eq!(c.poll_event(), None);
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert!(tx[0].is_pure_ack());
    assert_eq!(tx[0].ack(), p.base);
    assert_eq!(c.stats().challenge_acks, 1);
    // Further in the window, same answer.
    let rst = p.repr(p.base + 60_000u32, TcpFlags::RST);
    c.handle_segment(t0, &rst, &[]);
    assert_eq!(drain_tx(&mut c, t0).len(), 1);
    assert_eq!(c.state(), State::Established);
}

#[test]
fn rst_outside_the_window_is_dropped_silently() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let p = Peer::new(true);
    let wnd = c.rcv_wnd();
    for seq in [
        p.base + wnd + 10u32,
        p.base + u32::MAX,
        p.base + (1u32 << 31),
    ] {
        let o = c.handle_segment(t0, &p.repr(seq, TcpFlags::RST), &[]);
        assert_eq!(o.dropped, Some(DropReason::BadRst));
    }
    assert!(drain_tx(&mut c, t0).is_empty());
    assert_eq!(c.state(), State::Established);
    assert_eq!(c.stats().dropped.bad_rst, 3);
}

#[test]
fn syn_on_established_gets_a_challenge_ack() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let p = Peer::new(true);
    let mut syn = p.repr(p.base, TcpFlags::SYN);
    syn.options.mss = Some(1460);
    let o = c.handle_segment(t0, &syn, &[]);
    assert_eq!(o.dropped, Some(DropReason::Syn));
    assert_eq!(c.state(), State::Established);
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].ack(), p.base);
    assert_eq!(c.stats().challenge_acks, 1);
}

#[test]
fn challenge_acks_are_rate_limited() {
    let t0 = Instant::now();
    let mut cfg = cfg();
    cfg.challenge_ack_limit = 2;
    let mut c = conn(t0, true, &cfg);
    let p = Peer::new(true);
    let rst = p.repr(p.base + 5u32, TcpFlags::RST);
    // Five challenges in one burst: one ACK answers them all, and only it is counted sent.
    for _ in 0..5 {
        c.handle_segment(t0, &rst, &[]);
    }
    assert_eq!(c.stats().challenge_acks, 0, "owed, not sent yet");
    assert_eq!(drain_tx(&mut c, t0).len(), 1);
    assert_eq!(c.stats().challenge_acks, 1);
    assert_eq!(c.stats().challenge_acks_merged, 4);
    assert_eq!(c.stats().challenge_acks_suppressed, 0);
    // Each in its own burst: the limit (2 a second) allows one more.
    let mut acks = 0;
    for _ in 0..3 {
        c.handle_segment(t0, &rst, &[]);
        acks += drain_tx(&mut c, t0).len();
    }
    assert_eq!(acks, 1);
    assert_eq!(c.stats().challenge_acks, 2);
    assert_eq!(c.stats().challenge_acks_suppressed, 2);
    c.handle_segment(t0 + ms(1001), &rst, &[]);
    assert_eq!(drain_tx(&mut c, t0 + ms(1001)).len(), 1);
    assert_eq!(c.stats().challenge_acks, 3);
    assert_eq!(c.stats().challenge_acks_merged, 4);
}

#[test]
fn ack_validation_rfc5961() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let mut p = Peer::new(true);
    // Too new: acknowledges something never sent.
    p.ack = SeqNumber(SND0) + 1u32;
    let (o, got) = feed(&mut c, t0, &p.data(0, 10).0, &p.data(0, 10).1);
    assert_eq!(o.dropped, Some(DropReason::BadAck));
    assert!(got.is_empty());
    assert_eq!(drain_tx(&mut c, t0).len(), 1, "challenge ACK");
    // Too old: below SND.UNA - MAX.SND.WND.
    p.ack = SeqNumber(SND0) + (65_537u32).wrapping_neg();
    let (o, _) = feed(&mut c, t0, &p.data(0, 10).0, &p.data(0, 10).1);
    assert_eq!(o.dropped, Some(DropReason::BadAck));
    assert_eq!(drain_tx(&mut c, t0).len(), 1);
    // Old but within the window: the ACK field is ignored, the data taken.
    p.ack = SeqNumber(SND0) + 100u32.wrapping_neg();
    let (o, got) = feed(&mut c, t0, &p.data(0, 10).0, &p.data(0, 10).1);
    assert_eq!(o.dropped, None);
    assert_eq!(got, stream(0, 10));
    // ACK bit off: dropped.
    let mut r = p.data(10, 10).0;
    r.ack_number = None;
    assert_eq!(
        c.handle_segment(t0, &r, &stream(10, 10)).dropped,
        Some(DropReason::BadAck)
    );
    assert_eq!(c.stats().dropped.bad_ack, 3);
    assert_eq!(c.stats().challenge_acks, 2);
}

#[test]
fn paws_drops_old_tsval_across_the_wrap() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let mut p = Peer::new(true);
    // TS.Recent = PEER_TS0 from the hand-over: one older is dropped, with an ACK.
    p.tsval = PEER_TS0 - 1;
    let (o, got) = feed(&mut c, t0, &p.data(0, 100).0, &p.data(0, 100).1);
    assert_eq!(o.dropped, Some(DropReason::Paws));
    assert!(got.is_empty());
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].repr.options.timestamps.unwrap().tsecr, PEER_TS0);
    // A TSval past the peer's wrap is newer: accepted, and becomes TS.Recent.
    p.tsval = PEER_TS0.wrapping_add(20); // = 4
    let (o, got) = feed(&mut c, t0, &p.data(0, 100).0, &p.data(0, 100).1);
    assert_eq!(o.dropped, None);
    assert_eq!(got.len(), 100);
    assert_eq!(c.ts_recent(), Some(4));
    // Now the pre-wrap value is old.
    p.tsval = PEER_TS0 + 5;
    let (o, _) = feed(&mut c, t0, &p.data(100, 100).0, &p.data(100, 100).1);
    assert_eq!(o.dropped, Some(DropReason::Paws));
    assert_eq!(c.stats().dropped.paws, 2);
    // A segment without timestamps is dropped silently (RFC 7323 §3.2).
    let mut r = p.data(100, 100).0;
    r.options.timestamps = None;
    drain_tx(&mut c, t0);
    assert_eq!(
        c.handle_segment(t0, &r, &stream(100, 100)).dropped,
        Some(DropReason::MissingTimestamp)
    );
    assert!(drain_tx(&mut c, t0).is_empty());
}

#[test]
fn ts_recent_only_from_segments_at_last_ack_sent() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let mut p = Peer::new(true);
    p.tsval = 10;
    feed(&mut c, t0, &p.data(0, 100).0, &p.data(0, 100).1);
    assert_eq!(c.ts_recent(), Some(10));
    // Not yet ACKed: SEG.SEQ > Last.ACK.sent, TS.Recent keeps the older value (RFC 7323
    // §4.3), so the echoed TSecr measures the delayed ACK too.
    p.tsval = 11;
    feed(&mut c, t0, &p.data(100, 100).0, &p.data(100, 100).1);
    assert_eq!(c.ts_recent(), Some(10));
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx[0].repr.options.timestamps.unwrap().tsecr, 10);
    p.tsval = 12;
    feed(&mut c, t0, &p.data(200, 100).0, &p.data(200, 100).1);
    assert_eq!(c.ts_recent(), Some(12));
}

#[test]
fn timestamps_continue_the_kernel_clock() {
    let t0 = Instant::now();
    let c = conn(t0, true, &cfg());
    assert_eq!(c.tsval(t0), Some(TSVAL_AT_FREEZE));
    assert_eq!(c.tsval(t0 + ms(1500)), Some(TSVAL_AT_FREEZE + 1500));
    // The kernel's clock wraps; ours follows.
    let mut h = handover(t0, true);
    h.timestamps = Some(TsHandover {
        tsval_at_freeze: u32::MAX - 99,
        freeze_instant: t0,
        ts_recent: 0,
    });
    let mut c = Connection::new(&h, &cfg(), t0).unwrap();
    assert_eq!(c.tsval(t0 + ms(1500)), Some(1400));
    // What goes on the wire at t = freeze + 1500 ms. TS.Recent unknown: TSecr 0.
    c.send(b"reply");
    let tx = drain_tx(&mut c, t0 + ms(1500));
    assert_eq!(
        tx[0].repr.options.timestamps,
        Some(TcpTimestamps {
            tsval: 1400,
            tsecr: 0
        })
    );
    assert_eq!(c.ts_recent(), None);
    // Unknown TS.Recent: PAWS does not drop anything, and the first segment sets it.
    let mut p = Peer::new(true);
    p.tsval = 7;
    let (o, _) = feed(&mut c, t0, &p.data(0, 10).0, &p.data(0, 10).1);
    assert_eq!(o.dropped, None);
    assert_eq!(c.ts_recent(), Some(7));
}

#[test]
fn zero_window_then_window_update_on_release() {
    let t0 = Instant::now();
    let mut cfg = cfg();
    cfg.rcv_buf = 10_000;
    cfg.reassembly_limit = 10_000;
    cfg.manual_release = true;
    let mut h = handover(t0, true);
    h.rcv_wscale = 0;
    h.rcv_wnd = 10_000;
    let mut c = Connection::new(&h, &cfg, t0).unwrap();
    let p = Peer::new(true);
    let mut edges = Vec::new();
    for k in 0..10u64 {
        let (_, got) = feed(
            &mut c,
            t0,
            &p.data(k * 1000, 1000).0,
            &p.data(k * 1000, 1000).1,
        );
        assert_eq!(got.len(), 1000);
        for s in drain_tx(&mut c, t0) {
            edges.push(s.ack() + u32::from(s.repr.window_len));
        }
    }
    assert_eq!(c.rcv_wnd(), 0);
    assert_eq!(edges.len(), 5);
    assert!(
        edges.iter().all(|e| *e == p.base + 10_000u32),
        "right edge held: {edges:?}"
    );
    // The receiver stops: more data is outside the (zero) window; answered with an ACK.
    let (o, got) = feed(&mut c, t0, &p.data(10_000, 1000).0, &p.data(10_000, 1000).1);
    assert_eq!(o.dropped, Some(DropReason::OutOfWindow));
    assert!(got.is_empty());
    // So is a one-octet zero-window probe.
    let (o, _) = feed(&mut c, t0, &p.data(10_000, 1).0, &p.data(10_000, 1).1);
    assert_eq!(o.dropped, Some(DropReason::OutOfWindow));
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].repr.window_len, 0);
    // The text of a segment at RCV.NXT is refused, but its ACK still counts (RFC 9293
    // §3.10.7.4 "special allowance").
    c.send(b"ours");
    assert_eq!(drain_tx(&mut c, t0).len(), 1);
    let mut pa = p.clone();
    pa.ack = SeqNumber(SND0) + 4u32;
    let (o, got) = feed(
        &mut c,
        t0,
        &pa.data(10_000, 1000).0,
        &pa.data(10_000, 1000).1,
    );
    assert_eq!(o.dropped, Some(DropReason::OutOfWindow));
    assert!(got.is_empty());
    assert_eq!(c.snd_una(), pa.ack);
    drain_tx(&mut c, t0);
    // Releasing a little (below the SWS threshold) says nothing.
    c.release(500);
    assert!(drain_tx(&mut c, t0).is_empty());
    // Releasing enough sends a window update.
    c.release(4500);
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].repr.window_len, 5000);
    assert_eq!(c.stats().window_updates, 1);
    let (_, got) = feed(&mut c, t0, &p.data(10_000, 1000).0, &p.data(10_000, 1000).1);
    assert_eq!(got.len(), 1000);
}

#[test]
fn advertised_edge_never_retracts() {
    let t0 = Instant::now();
    let mut cfg = cfg();
    cfg.rcv_buf = 64 * 1024;
    cfg.reassembly_limit = 64 * 1024;
    let mut h = handover(t0, true);
    // The kernel advertised more than our buffer: we must honour its edge.
    h.rcv_wnd = 256 * 1024;
    let kernel_edge = h.rcv_wup + h.rcv_wnd;
    let mut c = Connection::new(&h, &cfg, t0).unwrap();
    let p = Peer::new(true);
    c.end_of_burst(t0);
    let mut last = SeqNumber(RCV0);
    let mut off = 0u64;
    for round in 0..200u64 {
        let (_, got) = feed(&mut c, t0, &p.data(off, SEG).0, &p.data(off, SEG).1);
        off += got.len() as u64;
        if round % 7 == 0 {
            // some reordering too: a segment ahead
            feed(
                &mut c,
                t0,
                &p.data(off + SEG as u64, SEG).0,
                &p.data(off + SEG as u64, SEG).1,
            );
        }
        c.end_of_burst(t0);
        for s in drain_tx(&mut c, t0) {
            let edge = s.right_edge();
            assert!(edge >= last, "edge retracted: {edge} < {last}");
            if s.ack() + 1u32 < kernel_edge {
                assert!(edge >= kernel_edge, "kernel's edge retracted");
            }
            last = edge;
        }
    }
    assert!(off > 256 * 1024, "data kept flowing ({off})");
}

/// An ACK frozen for an earlier segment carries an older acknowledgment number; its window
/// is rounded up to the scale so that its edge does not fall short of the one advertised.
/// That rounded-up edge is advertised too: later ACKs must not fall back behind it (by less
/// than one scale unit, but a sender sees a retracted edge all the same).
#[test]
fn frozen_acks_do_not_retract_the_edge() {
    let t0 = Instant::now();
    let strict = TcpConfig {
        ooo_ack_every: 1,
        rcv_buf: 64 * 1024,
        reassembly_limit: 64 * 1024,
        ..cfg()
    };
    let h = handover(t0, true);
    let mut c = Connection::new(&h, &strict, t0).unwrap();
    let p = Peer::new(true);
    let s = SEG as u64;
    let mut last = SeqNumber(RCV0);
    let mut frozen_older = 0;
    for k in 0..100u64 {
        // Segment 2k + 1 ahead of its hole, then segment 2k, which fills it: two ACKs, the
        // first frozen with the older number.
        let (ahead, fill) = ((2 * k + 1) * s, 2 * k * s);
        feed(&mut c, t0, &p.data(ahead, SEG).0, &p.data(ahead, SEG).1);
        feed(&mut c, t0, &p.data(fill, SEG).0, &p.data(fill, SEG).1);
        c.end_of_burst(t0);
        let tx = drain_tx(&mut c, t0);
        frozen_older += usize::from(tx.len() > 1 && tx[0].ack() < tx[tx.len() - 1].ack());
        for a in tx {
            let edge = a.right_edge();
            assert!(edge >= last, "round {k}: edge retracted: {edge} < {last}");
            last = edge;
        }
    }
    assert_eq!(frozen_older, 100, "frozen ACKs with older numbers");
}

#[test]
fn passive_close_after_out_of_order_fin() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let mut p = Peer::new(true);
    let s = SEG as u64;
    feed(&mut c, t0, &p.data(0, SEG).0, &p.data(0, SEG).1);
    // Segment 2 with FIN arrives before segment 1: no end of stream yet.
    let mut r = p.data(2 * s, SEG).0;
    r.flags = r.flags | TcpFlags::FIN;
    feed(&mut c, t0, &r, &stream(2 * s, SEG));
    assert_eq!(c.poll_event(), None);
    assert_eq!(c.state(), State::Established);
    let (_, got) = feed(&mut c, t0, &p.data(s, SEG).0, &p.data(s, SEG).1);
    assert_eq!(got, stream(s, 2 * SEG));
    assert_eq!(c.poll_event(), Some(Event::PeerClosed));
    assert_eq!(c.state(), State::CloseWait);
    let fin_ack = p.base + (3 * s + 1) as u32;
    let tx = drain_tx(&mut c, t0);
    // The out-of-order segment and the one that filled the hole came in one burst: one ACK
    // reports both (it acknowledges the FIN too; nothing is left to SACK).
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].ack(), fin_ack);
    assert!(tx[0].sack().is_empty());
    // We may still send; then close: LAST-ACK, FIN on the data.
    assert_eq!(c.send(b"bye"), 3);
    c.close();
    assert_eq!(c.state(), State::LastAck);
    assert_eq!(c.send(b"more"), 0);
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].payload, b"bye");
    assert!(tx[0].repr.flags.fin());
    assert_eq!(tx[0].repr.seq_number, SeqNumber(SND0));
    // The peer's FIN again (our ACK lost): ACKed again, state kept.
    let mut again = p.repr(p.base + (3 * s) as u32, TcpFlags::FIN);
    again.options.timestamps.as_mut().unwrap().tsval += 1;
    c.handle_segment(t0, &again, &[]);
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].ack(), fin_ack);
    assert_eq!(c.state(), State::LastAck);
    // ACK of our FIN: CLOSED.
    p.ack = SeqNumber(SND0) + 4u32;
    c.handle_segment(t0, &p.pure_ack(3 * s + 1), &[]);
    assert_eq!(c.state(), State::Closed);
    assert_eq!(c.poll_event(), Some(Event::Closed));
    assert_eq!(c.poll_timeout(), None);
    assert_eq!(c.error(), None);
}

#[test]
fn active_close_through_fin_wait_and_time_wait() {
    let t0 = Instant::now();
    let mut cfg = cfg();
    cfg.time_wait = ms(500);
    let mut c = conn(t0, true, &cfg);
    let mut p = Peer::new(true);
    assert_eq!(c.send(b"hello"), 5);
    c.close();
    assert_eq!(c.state(), State::FinWait1);
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert!(tx[0].repr.flags.fin());
    assert_eq!(tx[0].payload, b"hello");
    // FIN acknowledged: FIN-WAIT-2.
    p.ack = SeqNumber(SND0) + 6u32;
    c.handle_segment(t0 + ms(1), &p.pure_ack(0), &[]);
    assert_eq!(c.state(), State::FinWait2);
    assert_eq!(
        c.poll_timeout(),
        Some(t0 + ms(1) + cfg.fin_wait2_timeout),
        "nothing outstanding: only the FIN-WAIT-2 bound"
    );
    // Data still arrives in FIN-WAIT-2, then the peer's FIN: TIME-WAIT.
    let (_, got) = feed(&mut c, t0 + ms(2), &p.data(0, 10).0, &p.data(0, 10).1);
    assert_eq!(got.len(), 10);
    let fin = p.repr(p.base + 10u32, TcpFlags::FIN);
    c.handle_segment(t0 + ms(2), &fin, &[]);
    assert_eq!(c.state(), State::TimeWait);
    assert_eq!(c.poll_event(), Some(Event::PeerClosed));
    let tx = drain_tx(&mut c, t0 + ms(2));
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].ack(), p.base + 11u32);
    // A retransmitted FIN in TIME-WAIT: ACK again, timer restarted.
    c.handle_segment(t0 + ms(100), &fin, &[]);
    assert_eq!(drain_tx(&mut c, t0 + ms(100)).len(), 1);
    assert_eq!(c.poll_timeout(), Some(t0 + ms(600)));
    c.handle_timeout(t0 + ms(600));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(c.poll_event(), Some(Event::Closed));
}

#[test]
fn simultaneous_close_goes_through_closing() {
    let t0 = Instant::now();
    let mut c = conn(t0, false, &cfg());
    let mut p = Peer::new(false);
    c.close();
    let tx = drain_tx(&mut c, t0);
    assert!(tx[0].repr.flags.fin() && tx[0].payload.is_empty());
    // The peer's FIN crosses ours (it does not acknowledge our FIN).
    c.handle_segment(t0, &p.repr(p.base, TcpFlags::FIN), &[]);
    assert_eq!(c.state(), State::Closing);
    assert_eq!(c.poll_event(), Some(Event::PeerClosed));
    p.ack = SeqNumber(SND0) + 1u32;
    c.handle_segment(t0, &p.pure_ack(1), &[]);
    assert_eq!(c.state(), State::TimeWait);
}

#[test]
fn fin_wait_1_with_fin_and_ack_together_goes_to_time_wait() {
    let t0 = Instant::now();
    let mut c = conn(t0, false, &cfg());
    let mut p = Peer::new(false);
    c.close();
    drain_tx(&mut c, t0);
    p.ack = SeqNumber(SND0) + 1u32;
    c.handle_segment(t0, &p.repr(p.base, TcpFlags::FIN), &[]);
    assert_eq!(c.state(), State::TimeWait);
}

#[test]
fn retransmission_backs_off_then_fails() {
    let t0 = Instant::now();
    let mut cfg = cfg();
    cfg.max_retransmissions = 5;
    cfg.rto_max = ms(6000);
    let mut c = conn(t0, true, &cfg);
    assert_eq!(c.send(b"MPA reply"), 9);
    let first = drain_tx(&mut c, t0);
    assert_eq!(first.len(), 1);
    let mut now = t0;
    let mut gaps = Vec::new();
    for _ in 0..5 {
        let at = c.poll_timeout().unwrap();
        gaps.push((at - now).as_millis());
        now = at;
        c.handle_timeout(now);
        let tx = drain_tx(&mut c, now);
        assert_eq!(tx.len(), 1, "one retransmission per timeout");
        assert_eq!(tx[0].payload, b"MPA reply");
        assert_eq!(tx[0].repr.seq_number, SeqNumber(SND0));
    }
    // RFC 6298 §5.5: doubled each time, capped at rto_max.
    assert_eq!(gaps, [1000, 2000, 4000, 6000, 6000]);
    let at = c.poll_timeout().unwrap();
    c.handle_timeout(at);
    assert_eq!(c.state(), State::Closed);
    let e = TcpError::RetransmissionLimit { retransmissions: 5 };
    assert_eq!(c.poll_event(), Some(Event::Failed(e.clone())));
    assert_eq!(c.error(), Some(&e));
    assert_eq!(mpa::MpaErrorCode::from(&e).code(), 1);
    assert_eq!(c.stats().retransmissions, 5);
    assert_eq!(c.stats().rto_expiries, 6);
    assert_eq!(c.send(b"x"), 0);
    assert!(drain_tx(&mut c, at).is_empty());
}

#[test]
fn fin_is_retransmitted() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    c.close();
    assert_eq!(drain_tx(&mut c, t0).len(), 1);
    let at = c.poll_timeout().unwrap();
    c.handle_timeout(at);
    let tx = drain_tx(&mut c, at);
    assert_eq!(tx.len(), 1);
    assert!(tx[0].repr.flags.fin());
    assert_eq!(tx[0].repr.seq_number, SeqNumber(SND0));
    assert_eq!(c.stats().retransmissions, 1);
}

#[test]
fn rtt_from_timestamps_and_karn() {
    for ts in [true, false] {
        let t0 = Instant::now();
        let mut c = conn(t0, ts, &cfg());
        let mut p = Peer::new(ts);
        c.send(b"abc");
        drain_tx(&mut c, t0);
        p.ack = SeqNumber(SND0) + 3u32;
        p.tsecr = TSVAL_AT_FREEZE;
        c.handle_segment(t0 + ms(100), &p.pure_ack(0), &[]);
        // SRTT 100, RTTVAR 50: RTO = 100 + 4 * 50.
        assert_eq!(c.rto(), ms(300), "ts={ts}");
        assert_eq!(c.stats().rtt_samples, 1);
    }
    // Karn: no sample from a retransmitted segment.
    let t0 = Instant::now();
    let mut c = conn(t0, false, &cfg());
    let mut p = Peer::new(false);
    c.send(b"abc");
    drain_tx(&mut c, t0);
    c.handle_timeout(t0 + ms(1000));
    assert_eq!(drain_tx(&mut c, t0 + ms(1000)).len(), 1);
    p.ack = SeqNumber(SND0) + 3u32;
    c.handle_segment(t0 + ms(1100), &p.pure_ack(0), &[]);
    assert_eq!(c.stats().rtt_samples, 0);
    assert_eq!(c.rto(), ms(1000), "backoff forgotten, no sample");
}

#[test]
fn fast_retransmit_on_three_duplicate_acks() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let mut p = Peer::new(true);
    p.wnd = 4096; // 512 KiB
    c.handle_segment(t0, &p.pure_ack(0), &[]);
    let data = stream(0, 8 * SEG);
    assert_eq!(c.send(&data), data.len());
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 8);
    assert!(tx.iter().all(|s| s.payload.len() == SEG));
    let mut sent = Vec::new();
    for s in &tx {
        sent.extend_from_slice(&s.payload);
    }
    assert_eq!(sent, data);
    for k in 0..3 {
        p.tsval += 1;
        c.handle_segment(t0 + ms(10 + k), &p.pure_ack(0), &[]);
        let tx = drain_tx(&mut c, t0 + ms(10 + k));
        if k < 2 {
            assert!(tx.is_empty());
        } else {
            assert_eq!(tx.len(), 1, "fast retransmit");
            assert_eq!(tx[0].repr.seq_number, SeqNumber(SND0));
            assert_eq!(tx[0].payload, &data[..SEG]);
        }
    }
    assert_eq!(c.stats().fast_retransmits, 1);
    assert_eq!(c.stats().dup_acks_in, 3);
    // Everything acknowledged: recovery over, nothing outstanding.
    p.ack = SeqNumber(SND0) + data.len() as u32;
    c.handle_segment(t0 + ms(20), &p.pure_ack(0), &[]);
    assert_eq!(c.snd_una(), p.ack);
    assert_eq!(c.send_queued(), 0);
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn sack_guided_retransmission_fills_holes_only() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let mut p = Peer::new(true);
    p.wnd = 4096;
    c.handle_segment(t0, &p.pure_ack(0), &[]);
    let data = stream(0, 10 * SEG);
    c.send(&data);
    assert_eq!(drain_tx(&mut c, t0).len(), 10);
    let seg = |k: u32| SeqNumber(SND0) + k * SEG as u32;
    // Segment 0 lost, 1..5 arrived: the SACK says so, enough to declare 0 lost.
    let mut r = p.pure_ack(0);
    r.options.sack.push(SackBlock {
        left: seg(1),
        right: seg(5),
    });
    c.handle_segment(t0 + ms(5), &r, &[]);
    let tx = drain_tx(&mut c, t0 + ms(5));
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].repr.seq_number, seg(0));
    // Then 6..9 arrive, 5 is a hole: the next retransmission is 5, skipping 1..5.
    r.options.sack.push(SackBlock {
        left: seg(6),
        right: seg(9),
    });
    c.handle_segment(t0 + ms(6), &r, &[]);
    let tx = drain_tx(&mut c, t0 + ms(6));
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].repr.seq_number, seg(5));
    assert_eq!(tx[0].payload, &data[5 * SEG..6 * SEG]);
    assert_eq!(c.stats().fast_retransmits, 1);
    assert_eq!(c.stats().retransmissions, 2);
}

#[test]
fn zero_window_probe_then_send() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let mut p = Peer::new(true);
    p.wnd = 0;
    c.handle_segment(t0, &p.pure_ack(0), &[]);
    assert_eq!(c.snd_wnd(), 0);
    c.send(b"x");
    assert!(drain_tx(&mut c, t0).is_empty(), "window closed");
    let at = c.poll_timeout().unwrap();
    assert_eq!(at, t0 + ms(1000));
    c.handle_timeout(at);
    let tx = drain_tx(&mut c, at);
    assert_eq!(tx.len(), 1);
    assert!(tx[0].payload.is_empty());
    assert_eq!(
        tx[0].repr.seq_number,
        SeqNumber(SND0) + u32::MAX,
        "SND.UNA - 1"
    );
    assert_eq!(c.stats().window_probes, 1);
    assert_eq!(c.poll_timeout(), Some(at + ms(2000)), "probe backoff");
    // The window opens.
    p.wnd = 100;
    p.tsval += 1;
    c.handle_segment(at + ms(1), &p.pure_ack(0), &[]);
    let tx = drain_tx(&mut c, at + ms(1));
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].payload, b"x");
}

#[test]
fn abort_sends_rst_and_closed_answers_with_rst() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let p = Peer::new(true);
    c.abort();
    assert_eq!(c.state(), State::Closed);
    assert_eq!(c.poll_event(), Some(Event::Closed));
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert!(tx[0].repr.flags.rst());
    assert_eq!(tx[0].repr.seq_number, SeqNumber(SND0));
    // RFC 9293 §3.10.7.1: in CLOSED, a segment with ACK gets <SEQ=SEG.ACK><CTL=RST>.
    let o = c.handle_segment(t0, &p.data(0, 5).0, &stream(0, 5));
    assert_eq!(o.dropped, Some(DropReason::AfterClose));
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert!(tx[0].repr.flags.rst() && tx[0].repr.ack_number.is_none());
    assert_eq!(tx[0].repr.seq_number, p.ack);
    // A RST is never answered.
    c.handle_segment(t0, &p.repr(p.base, TcpFlags::RST), &[]);
    assert!(drain_tx(&mut c, t0).is_empty());
}

#[test]
fn small_transmit_buffer_is_refused_without_losing_the_ack() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let p = Peer::new(true);
    feed(&mut c, t0, &p.data(0, 10).0, &p.data(0, 10).1);
    c.end_of_burst(t0);
    let mut small = [0u8; 31];
    assert!(c.poll_transmit(t0, &mut small).is_none());
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].ack(), p.base + 10u32);
    // A buffer with room for 100 payload octets gets segments of 100.
    c.send(&[7u8; 250]);
    let mut buf = [0u8; 32 + 100];
    let t = c.poll_transmit(t0, &mut buf).unwrap();
    assert_eq!(t.payload_len, 100);
}

#[test]
fn invalid_handover_is_an_error() {
    let t0 = Instant::now();
    let mut h = handover(t0, true);
    h.rcv_wscale = 15;
    assert!(matches!(
        Connection::new(&h, &cfg(), t0),
        Err(TcpError::InvalidHandover(_))
    ));
    let h = HandoverState {
        mss: 0,
        ..handover(t0, false)
    };
    assert!(Connection::new(&h, &cfg(), t0).is_err());
    let bad = TcpConfig {
        rcv_buf: 0,
        ..cfg()
    };
    assert!(Connection::new(&handover(t0, true), &bad, t0).is_err());
    // A peer shift above 14 is used as 14 (RFC 7323 §2.3).
    let h = HandoverState {
        snd_wscale: 20,
        ..handover(t0, true)
    };
    let mut c = Connection::new(&h, &cfg(), t0).unwrap();
    let mut p = Peer::new(true);
    p.wnd = 1;
    c.handle_segment(t0, &p.pure_ack(0), &[]);
    assert_eq!(c.snd_wnd(), 1 << 14);
}

/// One arbitrary segment from a confused or hostile peer.
#[derive(Debug, Clone)]
struct Junk {
    seq_off: i64,
    ack_off: i64,
    len: usize,
    flags: u16,
    wnd: u16,
    tsval: Option<u32>,
    sack: Vec<(i64, i64)>,
    tick_ms: u64,
}

fn junk() -> impl Strategy<Value = Junk> {
    (
        prop_oneof![-70_000i64..70_000, any::<u32>().prop_map(i64::from)],
        prop_oneof![-70_000i64..70_000, 0i64..10],
        0usize..3000,
        0u16..0x200,
        any::<u16>(),
        proptest::option::of(any::<u32>()),
        proptest::collection::vec((-5000i64..70_000, -5000i64..70_000), 0..4),
        0u64..300,
    )
        .prop_map(
            |(seq_off, ack_off, len, flags, wnd, tsval, sack, tick_ms)| Junk {
                seq_off,
                ack_off,
                len,
                flags,
                wnd,
                tsval,
                sack,
                tick_ms,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Arbitrary segments, sends, closes and timeouts never panic; the advertised right edge
    /// never moves left; the store stays within its bound; delivered ranges lie inside the
    /// payload.
    #[test]
    fn arbitrary_input_keeps_invariants(segs in proptest::collection::vec(junk(), 1..60), ts in any::<bool>()) {
        let t0 = Instant::now();
        let mut cfg = cfg();
        cfg.rcv_buf = 32 * 1024;
        cfg.reassembly_limit = 8 * 1024;
        cfg.max_retransmissions = 3;
        let mut c = conn(t0, ts, &cfg);
        let p = Peer::new(ts);
        let payload = vec![0x5au8; 3000];
        let mut now = t0;
        let mut last_edge: Option<SeqNumber> = None;
        c.send(b"some data to send");
        for (i, j) in segs.iter().enumerate() {
            now += ms(j.tick_ms);
            let mut r = p.repr(p.base + j.seq_off as u32, crate::wire::tcp::TcpFlags(j.flags).without(TcpFlags::ACK));
            r.ack_number = (j.flags & 0x10 != 0 || j.flags & 1 == 0).then(|| SeqNumber(SND0) + j.ack_off as u32);
            r.window_len = j.wnd;
            r.options.timestamps = j.tsval.map(|v| TcpTimestamps { tsval: v, tsecr: 0 });
            for (l, rr) in &j.sack {
                r.options.sack.push(SackBlock { left: SeqNumber(SND0) + *l as u32, right: SeqNumber(SND0) + *rr as u32 });
            }
            let o = c.handle_segment(now, &r, &payload[..j.len]);
            prop_assert!(o.in_order.end <= j.len && o.in_order.start <= o.in_order.end);
            let _ = c.drain_reassembled(|_| {});
            prop_assert!(c.reassembly_stored() <= cfg.reassembly_limit);
            if i % 5 == 0 { c.end_of_burst(now); }
            if i == 30 { c.close(); }
            if let Some(at) = c.poll_timeout() { if at <= now { c.handle_timeout(now); } }
            let mut buf = [0u8; 1600];
            let mut n = 0;
            while let Some(t) = c.poll_transmit(now, &mut buf) {
                n += 1;
                prop_assert!(n < 1000);
                prop_assert!(t.len() <= buf.len());
                if let (Some(ack), false) = (t.repr.ack_number, t.repr.flags.rst()) {
                    let edge = ack + (u32::from(t.repr.window_len) << 7);
                    if let Some(l) = last_edge { prop_assert!(edge >= l, "edge {} < {}", edge, l); }
                    last_edge = Some(edge);
                }
            }
            while c.poll_event().is_some() {}
        }
    }
}

// ---------------------------------------------------------------- ACKs and the store under loss

/// A burst of out-of-order segments: each gets its own ACK carrying the SACK information of
/// its moment, its own block first (RFC 5681 §4.2, RFC 2018 §4), even though the caller polls
/// once per burst; the segment that fills the hole is ACKed at once; in-order bulk after that
/// keeps one ACK per burst.
#[test]
fn every_out_of_order_segment_gets_its_own_ack() {
    let t0 = Instant::now();
    let strict = TcpConfig {
        ooo_ack_every: 1,
        ..cfg()
    };
    let mut c = conn(t0, true, &strict);
    let p = Peer::new(true);
    let s = SEG as u64;
    let seq = |k: u64| p.base + (k * s) as u32;
    // Segments 1, 3, 4, 6 arrive in one burst (0, 2, 5 lost).
    for k in [1u64, 3, 4, 6] {
        feed(&mut c, t0, &p.data(k * s, SEG).0, &p.data(k * s, SEG).1);
    }
    c.end_of_burst(t0);
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 4, "one ACK per out-of-order segment");
    let firsts: Vec<(SeqNumber, SeqNumber)> = tx
        .iter()
        .map(|a| (a.sack()[0].left, a.sack()[0].right))
        .collect();
    assert_eq!(
        firsts,
        [
            (seq(1), seq(2)),
            (seq(3), seq(4)),
            (seq(3), seq(5)),
            (seq(6), seq(7))
        ]
    );
    assert_eq!(tx[3].sack().len(), 3);
    assert_eq!(
        tx[3].sack()[1].left,
        seq(3),
        "then the most recently reported"
    );
    assert_eq!(tx[3].sack()[2].left, seq(1));
    for a in &tx {
        assert!(a.is_pure_ack());
        assert_eq!(a.ack(), seq(0), "duplicate ACKs");
        assert_eq!(
            a.repr.window_len, tx[0].repr.window_len,
            "same window: dup ACKs"
        );
    }
    assert_eq!(c.stats().acks_queued, 3, "the last one is the burst's own");
    // The first hole fills: one ACK at once, with the remaining holes.
    feed(&mut c, t0, &p.data(0, SEG).0, &p.data(0, SEG).1);
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].ack(), seq(2));
    // It advanced RCV.NXT: no block of its own; the most recently reported first.
    assert_eq!(tx[0].sack()[0].left, seq(6));
    assert_eq!(tx[0].sack()[1].left, seq(3));
    // Part of the next hole (not at RCV.NXT) fills: its own ACK too.
    feed(&mut c, t0, &p.data(5 * s, SEG).0, &p.data(5 * s, SEG).1);
    feed(&mut c, t0, &p.data(2 * s, SEG).0, &p.data(2 * s, SEG).1);
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 2);
    assert_eq!((tx[0].ack(), tx[0].sack()[0].left), (seq(2), seq(3)));
    assert_eq!(tx[1].ack(), seq(7));
    assert!(tx[1].sack().is_empty());
    // In-order bulk: six segments in one burst, one ACK.
    for k in 7..13u64 {
        feed(&mut c, t0, &p.data(k * s, SEG).0, &p.data(k * s, SEG).1);
    }
    c.end_of_burst(t0);
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1, "in-order bulk: one ACK per burst");
    assert_eq!(tx[0].ack(), seq(13));
}

/// RFC 2883: a duplicate is reported in the first SACK block of its ACK; above RCV.NXT the
/// enclosing range follows it; a partial duplicate reports its old part.
#[test]
fn duplicates_are_reported_with_dsack() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let p = Peer::new(true);
    let s = SEG as u64;
    let seq = |k: u64| p.base + (k * s) as u32;
    feed(&mut c, t0, &p.data(0, SEG).0, &p.data(0, SEG).1);
    feed(&mut c, t0, &p.data(2 * s, SEG).0, &p.data(2 * s, SEG).1);
    feed(&mut c, t0, &p.data(3 * s, SEG).0, &p.data(3 * s, SEG).1);
    drain_tx(&mut c, t0);
    // Below RCV.NXT.
    feed(&mut c, t0, &p.data(0, SEG).0, &p.data(0, SEG).1);
    // Above it, inside the stored [2, 4).
    let (o, _) = feed(&mut c, t0, &p.data(3 * s, SEG).0, &p.data(3 * s, SEG).1);
    assert_eq!(o.dropped, Some(DropReason::Duplicate));
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 2, "each duplicate its own ACK");
    let b0 = tx[0].sack();
    assert_eq!(
        (b0[0].left, b0[0].right),
        (seq(0), seq(1)),
        "D-SACK below the ACK"
    );
    assert!(b0[0].right <= tx[0].ack());
    assert_eq!((b0[1].left, b0[1].right), (seq(2), seq(4)), "then the SACK");
    let b1 = tx[1].sack();
    assert_eq!(
        (b1[0].left, b1[0].right),
        (seq(3), seq(4)),
        "D-SACK above the ACK"
    );
    assert_eq!(
        (b1[1].left, b1[1].right),
        (seq(2), seq(4)),
        "then the range enclosing it"
    );
    assert_eq!(b1.len(), 2);
    // A partial duplicate at RCV.NXT: its old half.
    let half = SEG as u64 / 2;
    let (r, d) = p.data(s - half, SEG + SEG / 2);
    let (o, got) = feed(&mut c, t0, &r, &d);
    assert_eq!(o.in_order, SEG / 2..SEG + SEG / 2);
    assert_eq!(got.len(), 3 * SEG, "and the store drained");
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    let b = tx[0].sack();
    assert_eq!(
        (b[0].left, b[0].right),
        (p.base + (s - half) as u32, seq(1))
    );
    assert_eq!(b.len(), 1);
    assert_eq!(c.stats().dsacks_sent, 3);
    // Nothing pending: the next ACK has no SACK at all.
    feed(&mut c, t0, &p.data(4 * s, SEG).0, &p.data(4 * s, SEG).1);
    c.end_of_burst(t0);
    assert!(drain_tx(&mut c, t0)[0].sack().is_empty());
}

/// The store full: ranges are pruned from the far end to keep the segments nearest
/// RCV.NXT; a segment above everything held is the one dropped; the segment that fills the
/// first hole is always taken.
#[test]
fn full_store_prunes_the_far_end() {
    let t0 = Instant::now();
    let cfg = TcpConfig {
        max_ooo_ranges: 3,
        ..cfg()
    };
    let mut c = conn(t0, true, &cfg);
    let p = Peer::new(true);
    let s = SEG as u64;
    for k in [3u64, 6, 9] {
        let (o, _) = feed(&mut c, t0, &p.data(k * s, SEG).0, &p.data(k * s, SEG).1);
        assert_eq!(o.dropped, None);
    }
    assert_eq!(c.reassembly_ranges().0, 3);
    // A fourth range, nearer than [9, 10): that one goes.
    let (o, _) = feed(&mut c, t0, &p.data(s, SEG).0, &p.data(s, SEG).1);
    assert_eq!(o.dropped, None);
    assert_eq!(c.stats().ooo_pruned_ranges, 1);
    assert_eq!(c.stats().ooo_pruned_octets, SEG as u64);
    assert_eq!(c.reassembly_stored(), 3 * SEG);
    // Farther than everything held: dropped.
    let (o, _) = feed(&mut c, t0, &p.data(11 * s, SEG).0, &p.data(11 * s, SEG).1);
    assert_eq!(o.dropped, Some(DropReason::ReassemblyFull));
    // The first hole fills: in order, [0, 2) delivered, [3, 4) and [6, 7) still held.
    let (_, got) = feed(&mut c, t0, &p.data(0, SEG).0, &p.data(0, SEG).1);
    assert_eq!(got, stream(0, 2 * SEG));
    let tx = drain_tx(&mut c, t0);
    let a = tx.last().unwrap();
    assert_eq!(a.ack(), p.base + (2 * s) as u32);
    let lefts: Vec<_> = a.sack().iter().map(|b| b.left).collect();
    assert!(lefts.contains(&(p.base + (3 * s) as u32)));
    assert!(lefts.contains(&(p.base + (6 * s) as u32)));
    assert_eq!(a.sack().len(), 2, "the pruned range is not SACKed");
    let (_, got) = feed(&mut c, t0, &p.data(2 * s, SEG).0, &p.data(2 * s, SEG).1);
    assert_eq!(got, stream(2 * s, 2 * SEG));
}

/// Octets are copied only within `reassembly_limit` of RCV.NXT (the ring): a segment that
/// cannot be placed farther out is dropped, one nearer is taken, and once RCV.NXT moves on
/// the same segment fits.
#[test]
fn copies_stay_within_the_limit_of_rcv_nxt() {
    let t0 = Instant::now();
    let cfg = TcpConfig {
        reassembly_limit: 3 * SEG,
        ..cfg()
    };
    let mut c = conn(t0, true, &cfg);
    let p = Peer::new(true);
    let s = SEG as u64;
    let (o, _) = feed(&mut c, t0, &p.data(2 * s, SEG).0, &p.data(2 * s, SEG).1);
    assert_eq!(o.dropped, None);
    let (o, _) = feed(&mut c, t0, &p.data(4 * s, SEG).0, &p.data(4 * s, SEG).1);
    assert_eq!(o.dropped, Some(DropReason::ReassemblyFull));
    assert_eq!(c.stats().dropped.reassembly_full, 1);
    let (o, _) = feed(&mut c, t0, &p.data(s, SEG).0, &p.data(s, SEG).1);
    assert_eq!(o.dropped, None);
    let (_, got) = feed(&mut c, t0, &p.data(0, SEG).0, &p.data(0, SEG).1);
    assert_eq!(got, stream(0, 3 * SEG));
    let (o, _) = feed(&mut c, t0, &p.data(4 * s, SEG).0, &p.data(4 * s, SEG).1);
    assert_eq!(o.dropped, None);
    let (_, got) = feed(&mut c, t0, &p.data(3 * s, SEG).0, &p.data(3 * s, SEG).1);
    assert_eq!(got, stream(3 * s, 2 * SEG));
    assert_eq!(c.reassembly_stored(), 0);
}

/// A full window of holes (every other segment of 1 MiB lost) fits: no drops, one range per
/// hole, and everything comes out once the holes fill.
#[test]
fn a_full_window_of_holes_fits() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let p = Peer::new(true);
    let s = SEG as u64;
    feed(&mut c, t0, &p.data(0, SEG).0, &p.data(0, SEG).1);
    c.end_of_burst(t0);
    let tx = drain_tx(&mut c, t0);
    let edge = tx[0].right_edge();
    let segs = edge.distance_from(p.base) as u64 / s;
    assert!(segs > 700, "a 1 MiB window ({segs} segments)");
    for k in (2..segs).step_by(2) {
        let (o, _) = feed(&mut c, t0, &p.data(k * s, SEG).0, &p.data(k * s, SEG).1);
        assert_eq!(o.dropped, None, "segment {k}");
    }
    let (ranges, max) = c.reassembly_ranges();
    assert_eq!(ranges as u64, (segs - 1) / 2);
    assert!(ranges > 32 && ranges <= max, "{ranges} of {max}");
    assert_eq!(c.stats().dropped.reassembly_full, 0);
    let mut got = stream(0, SEG);
    for k in (1..segs).step_by(2) {
        got.extend(feed(&mut c, t0, &p.data(k * s, SEG).0, &p.data(k * s, SEG).1).1);
    }
    let n = got.len();
    assert_eq!(got, stream(0, n));
    assert_eq!(n as u64, segs * s);
    assert_eq!(c.reassembly_stored(), 0);
}

/// Behind a hole, a sender whose segments the caller places sees the window grow past
/// `reassembly_limit` (the ring) up to `rcv_buf`, never past it; one segment out there that
/// cannot be placed is dropped, not copied over the ring; and once the hole fills every octet
/// comes out in order.
#[test]
fn placed_segments_open_the_window_past_the_ring_up_to_rcv_buf() {
    let t0 = Instant::now();
    let (limit, rcv_buf) = (64 * 1024, 256 * 1024);
    let cfg = TcpConfig {
        reassembly_limit: limit,
        rcv_buf,
        ..cfg()
    };
    let mut c = conn(t0, true, &cfg);
    let p = Peer::new(true);
    let s = SEG as u64;
    feed(&mut c, t0, &p.data(0, SEG).0, &p.data(0, SEG).1);
    c.end_of_burst(t0);
    let mut edge = drain_tx(&mut c, t0).pop().unwrap().right_edge();
    let nxt = p.base + s as u32;
    assert!(
        edge.distance_from(nxt) as usize <= limit + 128,
        "no placed octets yet: the limit"
    );
    // [1, 2) is lost; the sender fills whatever window it is offered, the caller places all.
    let mut k = 2u64;
    let mut unplaced_refused = false;
    while p.base + ((k + 1) * s) as u32 <= edge {
        let (r, d) = p.data(k * s, SEG);
        if k * s > 2 * limit as u64 && !unplaced_refused {
            // One segment the caller cannot place, past the ring: dropped (retransmitted).
            let (o, _) = feed(&mut c, t0, &r, &d);
            assert_eq!(o.dropped, Some(DropReason::ReassemblyFull));
            unplaced_refused = true;
        }
        let o = c.handle_segment_placing(t0, &r, &d, &mut |_, data, spans| {
            spans.push(0..data.len());
        });
        assert_eq!(o.dropped, None, "segment {k}");
        c.end_of_burst(t0);
        for a in drain_tx(&mut c, t0) {
            assert!(a.right_edge() >= edge, "edge retracted");
            edge = a.right_edge();
        }
        k += 1;
    }
    assert!(unplaced_refused);
    let wnd = edge.distance_from(nxt) as usize;
    assert!(wnd > 3 * limit, "window {wnd}: grew past the ring");
    assert!(wnd <= rcv_buf + 128, "window {wnd}: rcv_buf at most");
    assert_eq!(c.reassembly_stored(), 0);
    assert_eq!(c.stats().dropped.reassembly_full, 1);
    // The hole fills: everything up to the last segment is delivered (placed octets as
    // they were placed: skipped by their owner).
    let (_, got) = feed(&mut c, t0, &p.data(s, SEG).0, &p.data(s, SEG).1);
    assert_eq!(got.len() as u64, (k - 1) * s);
    assert_eq!(&got[..SEG], &stream(s, SEG)[..]);
    assert_eq!(c.rcv_nxt(), p.base + (k * s) as u32);
}

/// The window offers what the store can take (its limit plus octets the caller placed
/// itself), never retracts its right edge, and reopens with the ACK of the segment that
/// fills the hole.
#[test]
fn window_tracks_free_capacity_and_reopens() {
    let t0 = Instant::now();
    let limit = 128 * 1024;
    let cfg = TcpConfig {
        reassembly_limit: limit,
        ..cfg()
    };
    let mut c = conn(t0, true, &cfg);
    let p = Peer::new(true);
    let s = SEG as u64;
    feed(&mut c, t0, &p.data(0, SEG).0, &p.data(0, SEG).1);
    c.end_of_burst(t0);
    let a = drain_tx(&mut c, t0).pop().unwrap();
    let wnd = a.right_edge().distance_from(a.ack()) as usize;
    assert!(
        wnd <= limit + 128 && wnd + 128 > limit,
        "window {wnd}: the store's limit"
    );
    let mut last = a.right_edge();
    // Two segments out of order; the caller places the second itself.
    feed(&mut c, t0, &p.data(2 * s, SEG).0, &p.data(2 * s, SEG).1);
    let (r, d) = p.data(4 * s, SEG);
    c.handle_segment_placing(t0, &r, &d, &mut |_, data, spans| {
        spans.push(0..data.len());
    });
    assert_eq!(c.reassembly_stored(), SEG, "placed octets are not stored");
    let tx = drain_tx(&mut c, t0);
    for a in &tx {
        assert!(a.right_edge() >= last, "edge retracted");
        last = a.right_edge();
    }
    assert!(
        last.distance_from(p.base + s as u32) as usize + 128 > limit + SEG,
        "placed octets do not count against the window"
    );
    // The hole fills: the ACK moves the edge on by what was delivered.
    let (_, got) = feed(&mut c, t0, &p.data(s, SEG).0, &p.data(s, SEG).1);
    assert_eq!(got.len(), 2 * SEG);
    let tx = drain_tx(&mut c, t0);
    let a = tx.last().unwrap();
    assert!(a.right_edge() >= last);
    assert!(
        a.right_edge().distance_from(a.ack()) as usize + 128 > limit + SEG,
        "window reopened at once"
    );
}

/// A held pure ACK: in-order data's ACK waits (owed) until data carries it or the hold ends;
/// the ACK an out-of-order segment is owed is never held.
#[test]
fn a_held_pure_ack_rides_on_data_and_out_of_order_acks_are_not_held() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let p = Peer::new(true);
    let s = SEG as u64;
    let hold_and_drain = |c: &mut Connection| {
        c.set_hold_pure_ack(true);
        let tx = drain_tx(c, t0);
        c.set_hold_pure_ack(false);
        tx
    };

    // Two in-order segments (an ACK owed at once), then the burst's end: held.
    for k in 0..2 {
        feed(&mut c, t0, &p.data(k * s, SEG).0, &p.data(k * s, SEG).1);
    }
    c.end_of_burst(t0);
    assert!(hold_and_drain(&mut c).is_empty());
    assert!(c.ack_owed());
    // Data to send carries it: one segment, with the ACK.
    assert_eq!(c.send(&[7u8; 100]), 100);
    let tx = hold_and_drain(&mut c);
    assert_eq!(tx.len(), 1);
    assert_eq!(
        (tx[0].payload.len(), tx[0].ack()),
        (100, p.base + 2 * SEG as u32)
    );
    assert!(!c.ack_owed());
    assert_eq!(c.stats().acks_carried, 1);

    // Held, then released: the pure ACK.
    feed(&mut c, t0, &p.data(2 * s, SEG).0, &p.data(2 * s, SEG).1);
    c.end_of_burst(t0);
    assert!(hold_and_drain(&mut c).is_empty());
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert!(tx[0].is_pure_ack());
    assert_eq!(tx[0].ack(), p.base + 3 * SEG as u32);

    // Out of order (segment 3 missing): its duplicate ACK with SACK leaves despite the hold.
    feed(&mut c, t0, &p.data(4 * s, SEG).0, &p.data(4 * s, SEG).1);
    let tx = hold_and_drain(&mut c);
    assert_eq!(tx.len(), 1);
    assert!(tx[0].is_pure_ack());
    assert_eq!(tx[0].ack(), p.base + 3 * SEG as u32);
    assert_eq!(tx[0].sack().len(), 1);
    assert!(!c.ack_owed());
    // Only the ACK the data carried counts; the released and the unheld ones do not.
    assert_eq!(c.stats().acks_carried, 1);
}
