//! Consecutive segments taken in one update (`Connection::handle_segment_in_order` with
//! several segments, as the worker batches them within a burst) against the same segments
//! handed over one by one: the same octets, ACKs, timers and counters, or a refusal that
//! changes nothing.

use std::time::Instant;

use proptest::prelude::*;

use super::harness::*;
use crate::tcp::{Connection, TcpConfig, TextLengths};
use crate::wire::tcp::{TcpFlags, TcpRepr};

fn cfg() -> TcpConfig {
    TcpConfig {
        keepalive_idle: None,
        ..TcpConfig::default()
    }
}

/// One segment of a script: the peer's header and its octets.
#[derive(Debug, Clone)]
struct Seg {
    repr: TcpRepr,
    payload: Vec<u8>,
}

/// What a connection's outside shows: RCV.NXT, the send window, its timer and the counters
/// (the batching counter left out).
fn outside(c: &Connection) -> impl PartialEq + std::fmt::Debug {
    let mut s = *c.stats();
    s.segs_batched = 0;
    (c.rcv_nxt(), c.snd_wnd(), c.poll_timeout(), s)
}

/// Hands `burst` to `one` segment by segment and to `batched` in batches (consecutive
/// segments the worker's rule joins: `TcpRepr::takes_followers` / `continued_by`), each
/// batch one by one when the TCP refuses it. Appends the octets each delivered.
fn hand_burst(
    one: &mut Connection,
    batched: &mut Connection,
    now: Instant,
    burst: &[Seg],
    got: &mut (Vec<u8>, Vec<u8>),
) -> u64 {
    for s in burst {
        let (_, d) = feed(one, now, &s.repr, &s.payload);
        got.0.extend(d);
    }
    let mut refused = 0;
    let mut i = 0;
    while i < burst.len() {
        let first = &burst[i];
        let mut j = i + 1;
        if first.repr.takes_followers(first.payload.len()) {
            let mut end = first.repr.seq_number + first.payload.len();
            while let Some(n) = burst.get(j) {
                if !first.repr.continued_by(end, &n.repr, n.payload.len()) {
                    break;
                }
                end = end + n.payload.len();
                j += 1;
            }
        }
        let batch = &burst[i..j];
        let text = TextLengths::of(batch.iter().map(|s| s.payload.len()));
        let taken = if batch.len() > 1 {
            batched.handle_segment_in_order(now, &first.repr, text)
        } else {
            None
        };
        match taken {
            Some(out) => {
                let all: Vec<u8> = batch.iter().flat_map(|s| s.payload.clone()).collect();
                got.1.extend_from_slice(&all[out.in_order.clone()]);
                if out.reassembled > 0 {
                    batched.drain_reassembled(|b| got.1.extend_from_slice(b));
                }
            }
            None => {
                if batch.len() > 1 {
                    refused += 1;
                }
                for s in batch {
                    let (_, d) = feed(batched, now, &s.repr, &s.payload);
                    got.1.extend(d);
                }
            }
        }
        i = j;
    }
    refused
}

/// Both connections end the burst and send what they owe: the same segments.
fn same_output(one: &mut Connection, batched: &mut Connection, now: Instant, at: &str) {
    one.end_of_burst(now);
    batched.end_of_burst(now);
    let (a, b) = (drain_tx(one, now), drain_tx(batched, now));
    let show = |v: &[super::harness::Seg]| {
        v.iter()
            .map(|s| {
                (
                    s.repr.seq_number,
                    s.repr.ack_number,
                    s.repr.window_len,
                    s.repr.flags,
                    s.sack().to_vec(),
                    s.payload.len(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(show(&a), show(&b), "{at}");
}

/// Ten in-order segments of one burst: taken in one update, with what ten updates give —
/// one ACK at the end of the burst, ten segments counted, nine of them batched.
#[test]
fn in_order_segments_of_a_burst_are_taken_in_one_update() {
    let t0 = Instant::now();
    let (mut one, mut batched) = (conn(t0, true, &cfg()), conn(t0, true, &cfg()));
    let p = Peer::new(true);
    let burst: Vec<Seg> = (0..10)
        .map(|k| {
            let (repr, payload) = p.data(k * SEG as u64, SEG);
            Seg { repr, payload }
        })
        .collect();
    let mut got = (Vec::new(), Vec::new());
    assert_eq!(hand_burst(&mut one, &mut batched, t0, &burst, &mut got), 0);
    assert_eq!(got.0, stream(0, 10 * SEG));
    assert_eq!(got.1, got.0);
    assert_eq!(outside(&one), outside(&batched));
    assert_eq!(batched.stats().segs_batched, 9);
    assert_eq!(batched.stats().in_order_segs, 10);
    assert_eq!(batched.stats().segs_in, 10);
    same_output(&mut one, &mut batched, t0, "end of burst");
    assert_eq!(
        batched.rcv_nxt(),
        p.base + 10 * SEG as u32,
        "crossed the wrap"
    );

    // The send window was last updated by the tenth segment (SND.WL1 its SEQ): a segment from
    // the sixth's SEQ on, with new octets and another window, does not change it.
    let mut q = p.clone();
    q.wnd = 600;
    let (r, d) = q.data(5 * SEG as u64, 6 * SEG);
    let wnd = one.snd_wnd();
    feed(&mut one, t0, &r, &d);
    feed(&mut batched, t0, &r, &d);
    assert_eq!(one.snd_wnd(), wnd);
    assert_eq!(outside(&one), outside(&batched));
}

/// Each condition under which one update would not give what separate ones give makes the
/// TCP refuse the batch with nothing changed.
#[test]
fn batches_one_update_cannot_stand_for_are_refused_with_nothing_changed() {
    let t0 = Instant::now();
    let p = Peer::new(true);
    let lens = || TextLengths::of([SEG, SEG].into_iter());
    let check = |c: &mut Connection, repr: &TcpRepr, why: &str| {
        let before = outside(c);
        assert!(
            c.handle_segment_in_order(t0, repr, lens()).is_none(),
            "{why}"
        );
        assert_eq!(outside(c), before, "{why}");
    };

    // Beyond RCV.NXT.
    let mut c = conn(t0, true, &cfg());
    check(&mut c, &p.data(SEG as u64, SEG).0, "beyond RCV.NXT");
    // Before RCV.NXT (a retransmission reaching into new octets).
    feed(&mut c, t0, &p.data(0, SEG).0, &p.data(0, SEG).1);
    check(&mut c, &p.data(100, SEG).0, "before RCV.NXT");
    // With octets held out of order (and an ACK owed for them).
    let mut c = conn(t0, true, &cfg());
    feed(
        &mut c,
        t0,
        &p.data(4 * SEG as u64, SEG).0,
        &p.data(4 * SEG as u64, SEG).1,
    );
    check(&mut c, &p.data(0, SEG).0, "octets held out of order");
    // A FIN, a SYN, a RST, no ACK.
    let mut c = conn(t0, true, &cfg());
    for f in [TcpFlags::FIN, TcpFlags::SYN, TcpFlags::RST] {
        let mut r = p.data(0, SEG).0;
        r.flags = r.flags | f;
        check(&mut c, &r, &format!("{f:?}"));
    }
    let mut r = p.data(0, SEG).0;
    r.ack_number = None;
    check(&mut c, &r, "no ACK");
    // An ACK of data never sent.
    let mut r = p.data(0, SEG).0;
    r.ack_number = Some(p.ack + 1_000_000u32);
    check(&mut c, &r, "unacceptable ACK");
    // A TSval PAWS rejects; none where timestamps are required.
    let mut old = p.clone();
    old.tsval = PEER_TS0.wrapping_sub(1000);
    check(&mut c, &old.data(0, SEG).0, "PAWS");
    let mut r = p.data(0, SEG).0;
    r.options.timestamps = None;
    check(&mut c, &r, "no timestamps");
    // More than the window.
    let big = TextLengths::of(std::iter::repeat_n(SEG, 64));
    let before = outside(&c);
    assert!(c
        .handle_segment_in_order(t0, &p.data(0, SEG).0, big)
        .is_none());
    assert_eq!(outside(&c), before, "beyond the window");
    // And taken when none of these holds.
    assert!(c
        .handle_segment_in_order(t0, &p.data(0, SEG).0, lens())
        .is_some());
    assert_eq!(c.rcv_nxt(), p.base + 2 * SEG as u32);
}

/// One step of a peer's script.
#[derive(Debug, Clone)]
enum Step {
    /// The next `len` octets.
    Next(usize),
    /// `gap` octets skipped, then `len`.
    Gap(usize, usize),
    /// `len` octets from `back` octets below the highest sent.
    Again(usize, usize),
    /// `len` octets sent again from the receiver's RCV.NXT on (at the burst's start), each
    /// such step continuing the one before: fills holes, in batches.
    FromHole(usize),
    /// The peer's clock ticks (a TSval one more from now on).
    Tick,
    /// A segment with a TSval from long ago.
    Stale(usize),
    /// The peer's window field changes.
    Window(u16),
    /// The next `len` octets with FIN.
    Fin(usize),
    /// The burst ends.
    EndBurst,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => (1usize..=SEG).prop_map(Step::Next),
        8 => Just(Step::Next(SEG)),
        2 => (1usize..4000, 1usize..=SEG).prop_map(|(g, l)| Step::Gap(g, l)),
        2 => (1usize..6000, 1usize..=SEG).prop_map(|(b, l)| Step::Again(b, l)),
        3 => (1usize..=SEG).prop_map(Step::FromHole),
        1 => Just(Step::Tick),
        1 => (1usize..=SEG).prop_map(Step::Stale),
        1 => (400u16..600).prop_map(Step::Window),
        1 => (0usize..=SEG).prop_map(Step::Fin),
        3 => Just(Step::EndBurst),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any script of bursts (in order, gaps, retransmissions, clock ticks, stale TSvals,
    /// window changes, FIN, more than the window): batched as the worker batches, the
    /// connection delivers the same octets, sends the same segments and ends in the same
    /// state as one taking every segment alone.
    #[test]
    fn batched_segments_give_what_separate_ones_give(
        steps in proptest::collection::vec(step(), 1..120),
        small_buffer in any::<bool>(),
    ) {
        let t0 = Instant::now();
        let cfg = TcpConfig {
            rcv_buf: if small_buffer { 16 * 1024 } else { cfg().rcv_buf },
            ..cfg()
        };
        let (mut one, mut batched) = (conn(t0, true, &cfg), conn(t0, true, &cfg));
        let mut p = Peer::new(true);
        let (mut hi, mut fin) = (0u64, false);
        let mut burst = Vec::new();
        let mut got = (Vec::new(), Vec::new());
        let mut now = t0;
        let mut resend_at = None;
        for (i, s) in steps.iter().chain([Step::EndBurst].iter()).enumerate() {
            let seg = |off: u64, len: usize, p: &Peer| {
                let (repr, payload) = p.data(off, len);
                Seg { repr, payload }
            };
            match *s {
                _ if fin && !matches!(s, Step::EndBurst) => {}
                Step::Next(l) => {
                    burst.push(seg(hi, l, &p));
                    hi += l as u64;
                }
                Step::Gap(g, l) => {
                    burst.push(seg(hi + g as u64, l, &p));
                    hi += (g + l) as u64;
                }
                Step::Again(b, l) => {
                    let off = hi.saturating_sub(b as u64);
                    burst.push(seg(off, l.min((hi - off) as usize).max(1), &p));
                    hi = hi.max(off + 1);
                }
                Step::FromHole(l) => {
                    let at = resend_at
                        .unwrap_or_else(|| u64::from(one.rcv_nxt().distance_from(p.base)));
                    burst.push(seg(at, l, &p));
                    resend_at = Some(at + l as u64);
                    hi = hi.max(at + l as u64);
                }
                Step::Tick => p.tsval = p.tsval.wrapping_add(1),
                Step::Stale(l) => {
                    let mut old = p.clone();
                    old.tsval = p.tsval.wrapping_sub(100_000);
                    burst.push(seg(hi, l, &old));
                }
                Step::Window(w) => p.wnd = w,
                Step::Fin(l) => {
                    let mut s = seg(hi, l, &p);
                    s.repr.flags = s.repr.flags | TcpFlags::FIN;
                    burst.push(s);
                    hi += l as u64;
                    fin = true;
                }
                Step::EndBurst => {
                    hand_burst(&mut one, &mut batched, now, &burst, &mut got);
                    burst.clear();
                    resend_at = None;
                    prop_assert_eq!(outside(&one), outside(&batched), "step {}", i);
                    same_output(&mut one, &mut batched, now, &format!("step {i}"));
                    now += ms(1);
                }
            }
        }
        prop_assert_eq!(&got.0, &got.1);
        prop_assert_eq!(&got.0[..], &stream(0, got.0.len())[..]);
    }
}
