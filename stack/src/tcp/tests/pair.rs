//! Two connections over an in-memory link that loses, reorders and duplicates segments with
//! seeded randomness, on virtual time (quinn's `Pair`). A sends N octets to B; B must deliver
//! every octet exactly once, in order, byte-exact; then both close.
//!
//! What B does with a segment is a [`Sink`]: here the octets are collected ([`ByteSink`]);
//! the MPA receiver's tests plug in the receiver placing into regions (`crate::receiver`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use mpa::seq::SeqNumber;

use super::harness::*;
use crate::receiver::RunOctets;
use crate::tcp::{Connection, Event, HandoverState, State, TcpConfig, TsHandover};
use crate::wire::tcp::{TcpPacket, TcpRepr};

pub(crate) use crate::sim::SplitMix64 as Rng;

#[derive(Debug, Clone, Copy)]
pub(crate) struct LinkCfg {
    pub(crate) loss: f64,
    pub(crate) reorder: f64,
    pub(crate) duplicate: f64,
    /// One-way propagation delay.
    pub(crate) delay: Duration,
    /// Octets per second (serialisation).
    pub(crate) rate: u64,
    /// The receivers busy-poll: arrivals are handled at the next multiple of this, so one
    /// RX burst holds every segment that arrived since the last poll.
    pub(crate) poll: Duration,
}

impl LinkCfg {
    /// When a segment that left the wire at `left` reaches the receiver (one-way delay, held
    /// back by up to two delays when reordered, rounded up to the receiver's next poll after
    /// `t0`), whether it was held back, and in how many copies (2 when duplicated).
    pub(crate) fn arrival(
        &self,
        rng: &mut Rng,
        t0: Instant,
        left: Instant,
    ) -> (Instant, bool, usize) {
        let mut at = left + self.delay;
        let reordered = rng.chance(self.reorder);
        if reordered {
            // Held back by up to two delays: overtaken by later segments.
            at += Duration::from_nanos(rng.below(2 * self.delay.as_nanos() as u64));
        }
        let since = (at - t0).as_nanos() as u64;
        let poll = self.poll.as_nanos() as u64;
        let at = t0 + Duration::from_nanos(since.div_ceil(poll) * poll);
        let copies = if rng.chance(self.duplicate) { 2 } else { 1 };
        (at, reordered, copies)
    }

    pub(crate) fn lossy(loss: f64) -> LinkCfg {
        LinkCfg {
            loss,
            reorder: if loss > 0.0 { 0.02 } else { 0.0 },
            duplicate: if loss > 0.0 { 0.01 } else { 0.0 },
            delay: Duration::from_micros(500),
            rate: 1_250_000_000, // 10 Gbit/s
            poll: Duration::from_micros(10),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Dir {
    AtoB,
    BtoA,
}

/// What B does with each segment that reaches it.
pub(crate) trait Sink {
    /// Runs one segment through B's connection (and whatever sits above it).
    fn on_segment(&mut self, b: &mut Connection, now: Instant, repr: &TcpRepr, payload: &[u8]);
    /// Stream octets delivered in order so far.
    fn delivered(&self) -> usize;
    /// [`Sink::on_segment`] for a segment of a burst whose octets stay in hand until
    /// [`Sink::end_burst`] (`run`: the burst's, empty at its start).
    fn on_segment_in_burst<'f>(
        &mut self,
        b: &mut Connection,
        now: Instant,
        repr: &TcpRepr,
        payload: &'f [u8],
        run: &mut RunOctets<'f>,
    ) {
        let _ = run;
        self.on_segment(b, now, repr, payload);
    }
    /// The burst's segments were all handed over.
    fn end_burst(&mut self, run: &mut RunOctets<'_>) {
        let _ = run;
    }
}

/// Collects what B delivers.
#[derive(Debug, Default)]
pub(crate) struct ByteSink {
    pub(crate) received: Vec<u8>,
}

impl Sink for ByteSink {
    fn on_segment(&mut self, b: &mut Connection, now: Instant, repr: &TcpRepr, payload: &[u8]) {
        let out = b.handle_segment(now, repr, payload);
        assert!(out.in_order.end <= payload.len());
        self.received
            .extend_from_slice(&payload[out.in_order.clone()]);
        if out.reassembled > 0 {
            let rx = &mut self.received;
            let n = b.drain_reassembled(|s| rx.extend_from_slice(s));
            assert_eq!(n, out.reassembled);
        }
    }

    fn delivered(&self) -> usize {
        self.received.len()
    }
}

/// Which side is which in the hand-over: A's send side is B's receive side.
pub(crate) fn handovers(t0: Instant, ts: bool, sack: bool) -> (HandoverState, HandoverState) {
    let a_snd = SeqNumber(u32::MAX - 10_000); // A -> B stream wraps early
    let b_snd = SeqNumber(u32::MAX - 3);
    let ts_a = TsHandover {
        tsval_at_freeze: u32::MAX - 50, // A's clock wraps after 50 ms
        freeze_instant: t0,
        ts_recent: 77,
    };
    let ts_b = TsHandover {
        tsval_at_freeze: 77,
        freeze_instant: t0,
        ts_recent: u32::MAX - 50,
    };
    let a = HandoverState {
        local_port: PEER_PORT,
        remote_port: OUR_PORT,
        snd_nxt: a_snd,
        rcv_nxt: b_snd,
        snd_wnd: 64 * 1024,
        rcv_wnd: 64 * 1024,
        rcv_wup: b_snd,
        snd_wscale: 7,
        rcv_wscale: 7,
        mss: MSS,
        sack_permitted: sack,
        timestamps: ts.then_some(ts_a),
    };
    let b = HandoverState {
        local_port: OUR_PORT,
        remote_port: PEER_PORT,
        snd_nxt: b_snd,
        rcv_nxt: a_snd,
        rcv_wup: a_snd,
        timestamps: ts.then_some(ts_b),
        ..a
    };
    (a, b)
}

/// A segment on the link: (arrival, tiebreak, direction, octets).
type Packet = (Instant, u64, Dir, Vec<u8>);

pub(crate) struct Pair<S: Sink = ByteSink> {
    pub(crate) a: Connection,
    pub(crate) b: Connection,
    t0: Instant,
    now: Instant,
    link: LinkCfg,
    rng: Rng,
    /// (arrival, tiebreak, direction, octets)
    in_flight: BinaryHeap<Reverse<Packet>>,
    busy_until: [Instant; 2],
    counter: u64,
    pub(crate) data: Vec<u8>,
    sent: usize,
    /// When set, A writes `data` one TCP segment at a time, ending each at the next of these
    /// offsets (an aligned MPA sender: every segment starts with an FPDU).
    pub(crate) segment_ends: Option<std::collections::VecDeque<usize>>,
    pub(crate) sink: S,
    a_received: Vec<u8>,
    b_events: Vec<Event>,
    a_events: Vec<Event>,
    max_stored: usize,
    acks_with_sack: u64,
    segments_on_link: u64,
    /// When B had delivered every octet.
    pub(crate) done_at: Option<Instant>,
    /// B's stored out-of-order segments and full duplicates, in arrival order, each waiting
    /// for the ACK that answers it.
    waiting: std::collections::VecDeque<Expect>,
    /// Out-of-order segments answered by an ACK whose first SACK block contains them.
    ooo_answered: u64,
    /// SACK blocks on those ACKs.
    ooo_answer_blocks: u64,
    /// Full duplicates answered by an ACK whose first block reports exactly them (D-SACK).
    dsack_answered: u64,
    /// Events that never got their own ACK (a later ACK answered a later event first).
    pub(crate) unanswered: u64,
    /// Full duplicates B received (D-SACK expected).
    dups_seen: u64,
    /// Out-of-order segments B stored and has not reported yet (ACK or SACK block).
    to_report: Vec<(SeqNumber, SeqNumber)>,
    /// Of those, how many none of the ACKs B sent right after their burst reported: a
    /// sender's RACK takes such a range for lost once a later one is SACKed.
    unreported_after_burst: u64,
}

/// What an ACK from B should report first.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// The first SACK block contains `[.0, .1)`.
    Ooo(SeqNumber, SeqNumber),
    /// The first SACK block is `[.0, .1)`, a D-SACK (RFC 2883).
    Dup(SeqNumber, SeqNumber),
}

impl Expect {
    /// Whether an ACK with these SACK blocks answers it. A segment that was partly a
    /// duplicate gets a D-SACK first (RFC 2883): then the second block must hold it.
    fn answered_by(&self, sack: &[crate::wire::tcp::SackBlock]) -> bool {
        let holds = |b: &crate::wire::tcp::SackBlock, s, e| b.left <= s && e <= b.right;
        match (*self, sack) {
            (Expect::Ooo(s, e), [b, ..]) if holds(b, s, e) => true,
            (Expect::Ooo(s, e), [d, b, ..]) => holds(b, d.left, d.right) && holds(b, s, e),
            (Expect::Dup(s, e), [b, ..]) => b.left == s && b.right == e,
            _ => false,
        }
    }
}

impl Pair {
    fn new(
        t0: Instant,
        link: LinkCfg,
        seed: u64,
        n: usize,
        ts: bool,
        sack: bool,
        b_cfg: &TcpConfig,
    ) -> Pair {
        let mut rng = Rng(seed);
        let data = (0..n).map(|_| rng.next_u64() as u8).collect();
        Pair::with_sink(t0, link, rng, data, ts, sack, b_cfg, ByteSink::default())
    }
}

impl<S: Sink> Pair<S> {
    /// A pair where A sends `data` and B hands each segment to `sink`; `rng` drives the link.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn with_sink(
        t0: Instant,
        link: LinkCfg,
        rng: Rng,
        data: Vec<u8>,
        ts: bool,
        sack: bool,
        b_cfg: &TcpConfig,
        sink: S,
    ) -> Pair<S> {
        let (ha, hb) = handovers(t0, ts, sack);
        let a_cfg = TcpConfig {
            snd_buf: 512 * 1024,
            rto_initial: Duration::from_millis(200),
            // Longer than the peer's backed-off FIN retransmissions at 20 % loss, so that a
            // lost last ACK does not meet a RST from a connection already gone.
            time_wait: Duration::from_secs(30),
            ..TcpConfig::default()
        };
        Pair {
            a: Connection::new(&ha, &a_cfg, t0).unwrap(),
            b: Connection::new(&hb, b_cfg, t0).unwrap(),
            t0,
            now: t0,
            link,
            rng,
            in_flight: BinaryHeap::new(),
            busy_until: [t0; 2],
            counter: 0,
            data,
            sent: 0,
            segment_ends: None,
            sink,
            a_received: Vec::new(),
            b_events: Vec::new(),
            a_events: Vec::new(),
            max_stored: 0,
            acks_with_sack: 0,
            segments_on_link: 0,
            done_at: None,
            waiting: std::collections::VecDeque::new(),
            ooo_answered: 0,
            ooo_answer_blocks: 0,
            dsack_answered: 0,
            unanswered: 0,
            dups_seen: 0,
            to_report: Vec::new(),
            unreported_after_burst: 0,
        }
    }

    /// Matches an ACK from B against the events waiting for their own ACK: the first one it
    /// answers is popped, with every older one (those never got theirs).
    fn match_ack(&mut self, seg: &Seg) {
        let Some(k) = self.waiting.iter().position(|e| e.answered_by(seg.sack())) else {
            return;
        };
        self.unanswered += k as u64;
        match self.waiting.drain(..=k).next_back() {
            Some(Expect::Ooo(..)) => {
                self.ooo_answered += 1;
                self.ooo_answer_blocks += seg.sack().len() as u64;
            }
            Some(Expect::Dup(..)) => self.dsack_answered += 1,
            None => {}
        }
    }

    fn put_on_link(&mut self, dir: Dir, bytes: Vec<u8>) {
        self.segments_on_link += 1;
        let l = self.link;
        let i = dir as usize;
        // Serialise at the link rate, then propagate.
        let start = self.busy_until[i].max(self.now);
        let tx = Duration::from_nanos(bytes.len() as u64 * 1_000_000_000 / l.rate);
        self.busy_until[i] = start + tx;
        if self.rng.chance(l.loss) {
            return;
        }
        let (at, _, copies) = l.arrival(&mut self.rng, self.t0, start + tx);
        for _ in 0..copies {
            self.counter += 1;
            self.in_flight
                .push(Reverse((at, self.counter, dir, bytes.clone())));
        }
    }

    fn transmit_all(&mut self) {
        loop {
            let mut any = false;
            if let Some(b) = to_wire(&mut self.a, self.now, PEER_IP, OUR_IP) {
                self.put_on_link(Dir::AtoB, b);
                any = true;
            }
            if let Some(b) = to_wire(&mut self.b, self.now, OUR_IP, PEER_IP) {
                let seg = parse(&b);
                if !seg.sack().is_empty() {
                    self.acks_with_sack += 1;
                }
                self.match_ack(&seg);
                let covers = |&(s, e): &(SeqNumber, SeqNumber)| {
                    e <= seg.ack() || seg.sack().iter().any(|b| b.left <= s && e <= b.right)
                };
                self.to_report.retain(|r| !covers(r));
                self.put_on_link(Dir::BtoA, b);
                any = true;
            }
            if !any {
                break;
            }
        }
        // Everything B sends after a burst has left: each range stored in it was reported.
        self.unreported_after_burst += self.to_report.len() as u64;
        self.to_report.clear();
    }

    /// A writes its next segment only once everything before it left, so that its TCP cuts
    /// the stream where the segment ends are.
    fn send_segments(&mut self) {
        loop {
            let unsent = (self.a.snd_una() + self.a.send_queued()).distance_from(self.a.snd_nxt());
            let mut wrote = false;
            if unsent == 0 {
                if let Some(&end) = self.segment_ends.as_ref().and_then(|e| e.front()) {
                    let chunk = &self.data[self.sent..end];
                    if self.a.send_capacity() >= chunk.len() {
                        self.sent += self.a.send(chunk);
                        if let Some(e) = self.segment_ends.as_mut() {
                            e.pop_front();
                        }
                        wrote = true;
                    }
                }
            }
            let before = self.segments_on_link;
            self.transmit_all();
            if !wrote && self.segments_on_link == before {
                break;
            }
        }
    }

    /// Delivers every segment due by `now`, as one RX burst per receiver.
    fn deliver_due(&mut self) {
        let mut burst_a = false;
        let mut burst_b = false;
        // The burst's packets stay in hand until it ends, as a worker's RX frames do.
        let mut burst = Vec::new();
        while let Some(Reverse((at, _, _, _))) = self.in_flight.peek() {
            if *at > self.now {
                break;
            }
            let Some(Reverse((_, _, dir, bytes))) = self.in_flight.pop() else {
                break;
            };
            burst.push((dir, bytes));
        }
        let mut run = RunOctets::new();
        for (dir, bytes) in &burst {
            let dir = *dir;
            let p = TcpPacket::new_checked(&bytes[..]).unwrap();
            let (src, dst) = match dir {
                Dir::AtoB => (PEER_IP, OUR_IP),
                Dir::BtoA => (OUR_IP, PEER_IP),
            };
            assert!(p.verify_checksum_v4(src, dst));
            let repr = TcpRepr::parse(&p).unwrap();
            let payload = p.payload_in_buffer();
            match dir {
                Dir::AtoB => {
                    burst_b = true;
                    let (ooo0, dup0) = (self.b.stats().ooo_segs, self.b.stats().dup_full);
                    self.sink
                        .on_segment_in_burst(&mut self.b, self.now, &repr, payload, &mut run);
                    let (s, e) = (repr.seq_number, repr.seq_number + payload.len());
                    if self.b.stats().ooo_segs > ooo0 {
                        self.waiting.push_back(Expect::Ooo(s, e));
                        self.to_report.push((s, e));
                    } else if self.b.stats().dup_full > dup0 && !payload.is_empty() {
                        self.dups_seen += 1;
                        self.waiting.push_back(Expect::Dup(s, e));
                    }
                    self.max_stored = self.max_stored.max(self.b.reassembly_stored());
                    // Delivered so far is a prefix of what was sent: exactly once, in order.
                    let k = self.sink.delivered();
                    assert!(k <= self.data.len(), "more delivered than sent");
                    if k == self.data.len() && self.done_at.is_none() {
                        self.done_at = Some(self.now);
                    }
                }
                Dir::BtoA => {
                    burst_a = true;
                    let out = self.a.handle_segment(self.now, &repr, payload);
                    self.a_received
                        .extend_from_slice(&payload[out.in_order.clone()]);
                    let rx = &mut self.a_received;
                    self.a.drain_reassembled(|s| rx.extend_from_slice(s));
                }
            }
        }
        self.sink.end_burst(&mut run);
        if burst_a {
            self.a.end_of_burst(self.now);
        }
        if burst_b {
            self.b.end_of_burst(self.now);
        }
    }

    fn step(&mut self) -> bool {
        if self.segment_ends.is_none() {
            if self.sent < self.data.len() {
                self.sent += self.a.send(&self.data[self.sent..]);
            }
            self.transmit_all();
        } else {
            self.send_segments();
        }
        while let Some(e) = self.a.poll_event() {
            self.a_events.push(e);
        }
        while let Some(e) = self.b.poll_event() {
            if e == Event::PeerClosed {
                self.b.close();
            }
            self.b_events.push(e);
        }
        // Advance virtual time to the next thing that happens.
        let next = [
            self.in_flight.peek().map(|Reverse((at, ..))| *at),
            self.a.poll_timeout(),
            self.b.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else {
            return false;
        };
        self.now = self.now.max(next);
        self.deliver_due();
        for c in [&mut self.a, &mut self.b] {
            if let Some(at) = c.poll_timeout() {
                if at <= self.now {
                    c.handle_timeout(self.now);
                }
            }
        }
        true
    }

    /// Runs until A's data is delivered and both sides closed, or the limits hit.
    pub(crate) fn run(&mut self, t0: Instant) {
        let mut closing = false;
        for _ in 0..5_000_000 {
            if !closing && self.sink.delivered() == self.data.len() && self.a.send_queued() == 0 {
                self.a.close();
                closing = true;
            }
            if !self.step() {
                break;
            }
            assert!(
                self.now - t0 < Duration::from_secs(3600),
                "virtual time ran away: received {} of {}\na: {:?} {:?}\nb: {:?}",
                self.sink.delivered(),
                self.data.len(),
                self.a.send_debug(),
                self.a.stats(),
                self.b.stats()
            );
        }
    }
}

fn transfer(loss: f64, seed: u64, n: usize, ts: bool, sack: bool, b_cfg: TcpConfig) -> Pair {
    let t0 = Instant::now();
    let mut p = Pair::new(t0, LinkCfg::lossy(loss), seed, n, ts, sack, &b_cfg);
    p.run(t0);
    let (sa, sb) = (p.a.stats(), p.b.stats());
    eprintln!(
        "loss {loss}: {n} octets delivered after {:.3} s virtual; link segments {}; B: in-order {} ooo {} \
         dup {}+{} acks {} sack-blocks {} reasm-full {}; A: rtx {} fast {} rto {}",
        (p.done_at.unwrap_or(p.now) - t0).as_secs_f64(),
        p.segments_on_link,
        sb.in_order_segs,
        sb.ooo_segs,
        sb.dup_full,
        sb.dup_partial,
        sb.acks_sent,
        sb.sack_blocks_sent,
        sb.dropped.reassembly_full,
        sa.retransmissions,
        sa.fast_retransmits,
        sa.rto_expiries
    );
    assert_eq!(
        p.sink.received.len(),
        n,
        "all octets delivered (loss {loss})"
    );
    assert!(
        p.sink.received == p.data,
        "byte-exact, in order (loss {loss})"
    );
    assert!(p.max_stored <= b_cfg.reassembly_limit);
    // Clean close both ways: B saw the FIN after the data, closed, and got to CLOSED.
    assert_eq!(p.b_events.first(), Some(&Event::PeerClosed));
    assert_eq!(p.b.state(), State::Closed, "B closed");
    assert!(
        matches!(p.a.state(), State::Closed),
        "A closed (TIME-WAIT done): {:?}",
        p.a.state()
    );
    assert!(
        p.a.error().is_none() && p.b.error().is_none(),
        "a: {:?} {:?}\nb: {:?} {:?}",
        p.a.error(),
        p.a.stats(),
        p.b.error(),
        p.b.stats()
    );
    p
}

fn receiver_cfg() -> TcpConfig {
    TcpConfig {
        rcv_buf: 512 * 1024,
        reassembly_limit: 512 * 1024,
        ..TcpConfig::default()
    }
}

const N: usize = 2 << 20;

#[test]
fn lossless_transfer_is_in_order_and_cheap_on_acks() {
    let p = transfer(0.0, 1, N, true, true, receiver_cfg());
    let s = p.b.stats();
    assert_eq!(s.ooo_segs, 0);
    assert_eq!(s.dup_full + s.dup_partial, 0);
    assert_eq!(s.octets_delivered, N as u64);
    assert_eq!(p.a.stats().retransmissions, 0);
    // At most one ACK per two data segments, plus the closing ones.
    assert!(
        s.acks_sent <= s.in_order_segs / 2 + 4,
        "acks {} for {} segments",
        s.acks_sent,
        s.in_order_segs
    );
    assert_eq!(p.acks_with_sack, 0);
}

#[test]
fn transfer_with_1_percent_loss() {
    let p = transfer(0.01, 2, N, true, true, receiver_cfg());
    let s = p.b.stats();
    assert!(s.ooo_segs > 0 && s.dup_full + s.dup_partial > 0, "{s:?}");
    assert!(p.acks_with_sack > 0 && s.sack_blocks_sent > 0);
    assert!(p.a.stats().retransmissions > 0);
}

#[test]
fn transfer_with_5_percent_loss() {
    let p = transfer(0.05, 3, N, true, true, receiver_cfg());
    let s = p.b.stats();
    assert!(s.ooo_segs > 0 && s.dup_full + s.dup_partial > 0, "{s:?}");
    assert!(s.sack_blocks_sent > 0);
    assert!(p.a.stats().fast_retransmits > 0);
}

#[test]
fn transfer_with_20_percent_loss() {
    // An ACK per out-of-order segment: this pair's sender is our own small TCP, whose
    // recovery leans on the number of ACKs (shared ACKs are swept in `loss_sweep_*`).
    let cfg = TcpConfig {
        ooo_ack_every: 1,
        ..receiver_cfg()
    };
    let p = transfer(0.20, 4, N, true, true, cfg);
    let s = p.b.stats();
    assert!(s.ooo_segs > 0 && s.dup_full + s.dup_partial > 0, "{s:?}");
    assert!(p.acks_with_sack > 0 && s.sack_blocks_sent > 0);
    assert!(p.a.stats().rto_expiries > 0 || p.a.stats().fast_retransmits > 0);
}

#[test]
fn transfer_without_timestamps_or_sack() {
    // Karn's rule for RTT, NewReno-style recovery from duplicate ACKs and timeouts only.
    let p = transfer(0.05, 5, N / 4, false, false, receiver_cfg());
    assert_eq!(p.acks_with_sack, 0);
    assert!(p.b.stats().ooo_segs > 0);
    assert!(p.a.stats().rtt_samples > 0);
}

#[test]
fn tiny_reassembly_limit_still_converges() {
    let cfg = TcpConfig {
        reassembly_limit: 3 * SEG,
        max_ooo_ranges: 2,
        ..receiver_cfg()
    };
    let p = transfer(0.05, 6, N / 4, true, true, cfg);
    let s = p.b.stats();
    assert!(s.dropped.reassembly_full > 0, "{s:?}");
    assert!(p.max_stored <= 3 * SEG);
}

#[test]
fn many_seeds_at_high_loss_small_transfers() {
    for seed in 100..110 {
        transfer(
            0.2,
            seed,
            64 * 1024,
            seed % 2 == 0,
            seed % 3 != 0,
            receiver_cfg(),
        );
    }
}

#[test]
fn reply_then_data_both_ways() {
    // B (the data path) sends its MPA Reply over a lossy link while receiving: both
    // directions carry data, and B's Reply reaches A exactly.
    let t0 = Instant::now();
    let mut p = Pair::new(
        t0,
        LinkCfg::lossy(0.1),
        9,
        256 * 1024,
        true,
        true,
        &receiver_cfg(),
    );
    let reply: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    assert_eq!(p.b.send(&reply), reply.len());
    p.run(t0);
    assert_eq!(p.a_received, reply);
    assert_eq!(p.sink.received, p.data);
    assert_eq!(p.a.state(), State::Closed);
    assert_eq!(p.b.state(), State::Closed);
}

/// At 1, 5, 10, 20 and 30 % loss with reordering and duplication: every octet delivered;
/// every out-of-order segment answered by its own ACK whose first SACK block holds it (or
/// whose D-SACK first block is followed by the block holding it); every full duplicate
/// answered by a D-SACK; no `reassembly_full` drop (the sender respects the window); and
/// recovery not dominated by timeouts where the old receiver's was (printed: compare with
/// the numbers before this change, in the commit message).
#[test]
fn loss_sweep_acks_every_out_of_order_segment() {
    // RFC 5681 §4.2 to the letter: an ACK for every out-of-order segment.
    loss_sweep(1);
}

/// The default shares one ACK among up to 16 segments of a burst as long as its SACK blocks
/// can report every range they changed (a duplicate still gets its own D-SACK): the sender
/// gets the same SACK information, at the same moment, at a fraction of the ACK processing.
#[test]
fn loss_sweep_with_shared_acks_for_contiguous_out_of_order_runs() {
    loss_sweep(TcpConfig::default().ooo_ack_every);
}

fn loss_sweep(ooo_ack_every: u32) {
    for (loss, seed, n) in [
        (0.01, 21, N),
        (0.05, 22, N),
        (0.10, 23, N),
        (0.20, 24, N),
        (0.30, 25, N / 8),
    ] {
        let t0 = Instant::now();
        let cfg = TcpConfig {
            ooo_ack_every,
            ..TcpConfig::default()
        };
        let p = transfer(loss, seed, n, true, true, cfg);
        let (s, a) = (p.b.stats(), p.a.stats());
        let secs = (p.done_at.unwrap() - t0).as_secs_f64();
        eprintln!(
            "  every {ooo_ack_every}: ooo {} answered {} shared {} ({:.2} blocks/ACK) unanswered {}; \
             dups {} D-SACKed {}; ranges high {}; lost rtx {}; fast {} rto {}; {secs:.2} s; \
             B acks {}",
            s.ooo_segs,
            p.ooo_answered,
            s.acks_shared,
            p.ooo_answer_blocks as f64 / p.ooo_answered.max(1) as f64,
            p.unanswered,
            p.dups_seen,
            p.dsack_answered,
            s.ooo_ranges_high_water,
            a.lost_retransmits,
            a.fast_retransmits,
            a.rto_expiries,
            s.acks_sent
        );
        assert!(s.ooo_segs > 0 && p.dups_seen > 0, "loss {loss}: {s:?}");
        if ooo_ack_every == 1 {
            assert_eq!(p.ooo_answered, s.ooo_segs, "loss {loss}: one ACK each");
            assert_eq!(s.acks_shared, 0);
            assert!(s.acks_sent >= s.ooo_segs + s.dup_full);
        } else {
            // Each out-of-order segment has its own ACK or shares the next one's.
            assert!(
                p.ooo_answered + s.acks_shared >= s.ooo_segs,
                "loss {loss}: {} + {} < {}",
                p.ooo_answered,
                s.acks_shared,
                s.ooo_segs
            );
            assert!(s.acks_shared > 0, "loss {loss}");
        }
        assert!(p.ooo_answer_blocks >= p.ooo_answered);
        if ooo_ack_every == 1 {
            assert_eq!(p.dsack_answered, p.dups_seen, "loss {loss}: D-SACK each");
        } else {
            // Shared ACKs shift the harness's pairing of ACKs to segments; count D-SACKs.
            let dups = p.dups_seen;
            assert!(
                s.dsacks_sent >= dups,
                "loss {loss}: D-SACK each: {dups} {s:?}"
            );
        }
        assert_eq!(s.dropped.reassembly_full, 0);
        assert_eq!(s.ooo_pruned_ranges, 0);
        assert_eq!(s.acks_merged, 0);
        // Shared or not, the ACKs of each burst report every range stored in it.
        assert_eq!(p.unreported_after_burst, 0, "loss {loss}");
        // This pair's sender is our own small TCP, which counts duplicate ACKs: shared ACKs
        // slow its recovery (a Linux sender, SACK and RACK based, is measured live with
        // `mpa-bench demo --loss`). The bounds hold for an ACK per segment.
        if ooo_ack_every == 1 {
            if loss <= 0.10 {
                // Before: at 10 % 76 fast retransmits, 77 timeouts, 22.95 s.
                assert!(a.fast_retransmits >= a.rto_expiries, "loss {loss}: {a:?}");
            }
            match seed {
                23 => assert!(secs < 10.0, "10 %: {secs} s (before: 22.95 s)"),
                24 => assert!(secs < 1200.0, "20 %: {secs} s (before: over 3600 s)"),
                _ => {}
            }
        } else {
            assert!(secs < 3000.0, "loss {loss}: {secs} s");
        }
    }
}
