//! Bulk senders through a bottleneck, on virtual time: one or more pairs (A_i sends to B_i)
//! whose A→B segments share one link of a given rate with a drop-tail queue of a given
//! size, then random loss, reordering and duplication ([`LinkCfg`], as in `pair.rs`) and a
//! propagation delay; the ACKs come back over the same kind of lossy link without the
//! bottleneck. Every stream octet is a function of its offset ([`pattern`]), so B checks
//! each delivered octet as it comes (exactly once, in order, byte-exact) without keeping
//! the stream.
//!
//! What the sender is held to: every segment inside the peer's window when it left; the
//! congestion window reduced exactly once per recovery episode and per first timeout
//! (watched from outside, after every event); octets retransmitted bounded by the octets
//! the network really dropped; a fair share of a shared bottleneck.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use mpa::seq::SeqNumber;

use super::harness::*;
use super::pair::{handovers, LinkCfg, Rng};
use crate::tcp::{CongestionControl, Connection, Event, State, TcpConfig};
use crate::wire::tcp::{TcpPacket, TcpRepr};

/// The shared bottleneck on the A→B path.
#[derive(Debug, Clone, Copy)]
struct Bottleneck {
    /// Octets per second.
    pub(crate) rate: u64,
    /// Drop-tail queue in octets: a segment that finds this many queued is dropped.
    pub(crate) queue: usize,
}

/// One sender and its receiver.
struct Flow {
    a: Connection,
    b: Connection,
    /// Stream octets A is to send.
    n: usize,
    /// Octets handed to A so far.
    queued: usize,
    /// Octets B delivered (all checked).
    delivered: usize,
    /// A starts sending then.
    start: Instant,
    closing: bool,
    done_at: Option<Instant>,
    /// A's data octets the network dropped (queue or loss), retransmissions included.
    lost_octets: u64,
    queue_drops: u64,
    /// A's data octets the link held back behind later segments: each looks lost to a
    /// sender that counts duplicate ACKs or SACKed segments (RFC 6675 DupThresh).
    reordered_octets: u64,
    /// Observed from outside: times A's cwnd went down.
    cwnd_decreases: u64,
    last_cwnd: usize,
    /// Decreases seen in the current recovery episode (with no timeout in between).
    decreases_this_episode: u32,
    last_episodes: u64,
    last_rtos: u64,
    /// Delivered octets at each sample time (`Net::sample_every`).
    samples: Vec<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Dir {
    AtoB,
    BtoA,
}

/// (arrival, tiebreak, flow, direction, octets).
type Packet = (Instant, u64, usize, Dir, Vec<u8>);

struct Net {
    flows: Vec<Flow>,
    t0: Instant,
    now: Instant,
    link: LinkCfg,
    bn: Bottleneck,
    rng: Rng,
    heap: BinaryHeap<Reverse<Packet>>,
    /// When the bottleneck finishes sending what it holds.
    bn_busy_until: Instant,
    counter: u64,
    sample_every: Duration,
    next_sample: Instant,
}

/// What a run measured for one flow.
#[derive(Debug, Clone)]
pub(crate) struct FlowReport {
    pub(crate) delivered: usize,
    pub(crate) secs: f64,
    lost_octets: u64,
    queue_drops: u64,
    reordered_octets: u64,
    cwnd_decreases: u64,
    pub(crate) samples: Vec<usize>,
    pub(crate) a: crate::tcp::TcpStats,
}

impl FlowReport {
    /// Goodput in Mbit/s.
    fn mbps(&self) -> f64 {
        self.delivered as f64 * 8.0 / self.secs / 1e6
    }
}

fn sender_cfg(cc: CongestionControl) -> TcpConfig {
    TcpConfig {
        snd_buf: 4 << 20,
        congestion_control: cc,
        time_wait: Duration::from_secs(30),
        ..TcpConfig::default()
    }
}

fn receiver_cfg() -> TcpConfig {
    TcpConfig {
        rcv_buf: 2 << 20,
        reassembly_limit: 2 << 20,
        ..TcpConfig::default()
    }
}

impl Net {
    pub(crate) fn new(t0: Instant, link: LinkCfg, bn: Bottleneck, seed: u64) -> Net {
        Net {
            flows: Vec::new(),
            t0,
            now: t0,
            link,
            bn,
            rng: Rng(seed),
            heap: BinaryHeap::new(),
            bn_busy_until: t0,
            counter: 0,
            sample_every: Duration::from_millis(100),
            next_sample: t0,
        }
    }

    /// Adds a flow sending `n` octets from `start` on.
    fn add_flow(&mut self, a_cfg: &TcpConfig, n: usize, start: Instant) {
        let (ha, hb) = handovers(self.t0, true, true);
        let a = Connection::new(&ha, a_cfg, self.t0).unwrap();
        let last_cwnd = a.cwnd();
        self.flows.push(Flow {
            a,
            b: Connection::new(&hb, &receiver_cfg(), self.t0).unwrap(),
            n,
            queued: 0,
            delivered: 0,
            start,
            closing: false,
            done_at: None,
            lost_octets: 0,
            queue_drops: 0,
            reordered_octets: 0,
            cwnd_decreases: 0,
            last_cwnd,
            decreases_this_episode: 0,
            last_episodes: 0,
            last_rtos: 0,
            samples: Vec::new(),
        });
    }

    /// Puts a segment on the link; returns whether it was held back (reordered).
    fn push(&mut self, at: Instant, flow: usize, dir: Dir, bytes: Vec<u8>) -> bool {
        let (at, reordered, copies) = self.link.arrival(&mut self.rng, self.t0, at);
        for _ in 0..copies {
            self.counter += 1;
            self.heap
                .push(Reverse((at, self.counter, flow, dir, bytes.clone())));
        }
        reordered
    }

    /// A's segment enters the bottleneck queue (or is dropped at its tail), then the lossy
    /// link.
    fn send_a(&mut self, i: usize, bytes: Vec<u8>, payload: usize) {
        let backlog = if self.bn_busy_until > self.now {
            let d = self.bn_busy_until - self.now;
            (d.as_nanos() * u128::from(self.bn.rate) / 1_000_000_000) as usize
        } else {
            0
        };
        if backlog + bytes.len() > self.bn.queue {
            self.flows[i].queue_drops += 1;
            self.flows[i].lost_octets += payload as u64;
            return;
        }
        let start = self.bn_busy_until.max(self.now);
        let tx = Duration::from_nanos(bytes.len() as u64 * 1_000_000_000 / self.bn.rate);
        self.bn_busy_until = start + tx;
        if self.rng.chance(self.link.loss) {
            self.flows[i].lost_octets += payload as u64;
            return;
        }
        if self.push(start + tx, i, Dir::AtoB, bytes) {
            self.flows[i].reordered_octets += payload as u64;
        }
    }

    fn send_b(&mut self, i: usize, bytes: Vec<u8>) {
        if self.rng.chance(self.link.loss) {
            return;
        }
        self.push(self.now, i, Dir::BtoA, bytes);
    }

    fn transmit(&mut self, i: usize) {
        let now = self.now;
        loop {
            let mut any = false;
            if let Some(b) = to_wire(&mut self.flows[i].a, now, PEER_IP, OUR_IP) {
                let seg = parse(&b);
                let a = &self.flows[i].a;
                if !seg.payload.is_empty() {
                    // The peer's receive window: nothing beyond SND.UNA + SND.WND.
                    let end = seg.repr.seq_number + seg.payload.len();
                    assert!(
                        end <= a.snd_una() + a.snd_wnd(),
                        "flow {i}: segment beyond the peer's window"
                    );
                }
                self.send_a(i, b, seg.payload.len());
                any = true;
            }
            if let Some(b) = to_wire(&mut self.flows[i].b, now, OUR_IP, PEER_IP) {
                self.send_b(i, b);
                any = true;
            }
            if !any {
                break;
            }
        }
    }

    fn feed(&mut self, i: usize) {
        let f = &mut self.flows[i];
        if self.now < f.start || f.closing {
            return;
        }
        while f.queued < f.n {
            let k = f.a.send_capacity().min(f.n - f.queued).min(256 * 1024);
            if k == 0 {
                break;
            }
            let chunk = stream(f.queued as u64, k);
            f.queued += f.a.send(&chunk);
        }
        if f.delivered == f.n && f.a.send_queued() == 0 {
            f.a.close();
            f.closing = true;
        }
    }

    fn deliver(&mut self, i: usize, dir: Dir, bytes: &[u8]) {
        let now = self.now;
        let p = TcpPacket::new_checked(bytes).unwrap();
        let repr = TcpRepr::parse(&p).unwrap();
        let payload = p.payload();
        let f = &mut self.flows[i];
        match dir {
            Dir::AtoB => {
                let out = f.b.handle_segment(now, &repr, payload);
                let mut check = |octets: &[u8]| {
                    for (k, &o) in octets.iter().enumerate() {
                        let off = f.delivered + k;
                        assert!(
                            o == pattern(off as u64),
                            "flow {i}: octet {off} wrong (delivered twice, out of order or \
                             corrupt)"
                        );
                    }
                    f.delivered += octets.len();
                    assert!(f.delivered <= f.n, "flow {i}: more delivered than sent");
                };
                check(&payload[out.in_order.clone()]);
                if out.reassembled > 0 {
                    f.b.drain_reassembled(|s| check(s));
                }
                if f.delivered == f.n && f.done_at.is_none() {
                    f.done_at = Some(now);
                }
            }
            Dir::BtoA => {
                f.a.handle_segment(now, &repr, payload);
                f.a.drain_reassembled(|_| {});
            }
        }
    }

    /// Watches A's window after every event: the only decreases are the reductions the
    /// counters report, one per recovery episode.
    fn observe(&mut self) {
        for (i, f) in self.flows.iter_mut().enumerate() {
            let (cwnd, rec) = (f.a.cwnd(), f.a.in_recovery());
            let (episodes, rtos) = (f.a.stats().recovery_episodes, f.a.stats().rto_expiries);
            if (episodes, rtos) != (f.last_episodes, f.last_rtos) {
                f.decreases_this_episode = 0;
                (f.last_episodes, f.last_rtos) = (episodes, rtos);
            }
            if cwnd < f.last_cwnd {
                f.cwnd_decreases += 1;
                if rec {
                    f.decreases_this_episode += 1;
                    assert!(
                        f.decreases_this_episode <= 1,
                        "flow {i}: cwnd reduced twice in one recovery episode"
                    );
                }
            }
            f.last_cwnd = cwnd;
        }
    }

    /// Runs until every flow delivered and closed, or until `until`.
    pub(crate) fn run(&mut self, until: Duration) -> Vec<FlowReport> {
        let end = self.t0 + until;
        loop {
            while self.now >= self.next_sample {
                for f in &mut self.flows {
                    f.samples.push(f.delivered);
                }
                self.next_sample += self.sample_every;
            }
            for i in 0..self.flows.len() {
                self.feed(i);
                self.transmit(i);
                let f = &mut self.flows[i];
                while f.a.poll_event().is_some() {}
                while let Some(e) = f.b.poll_event() {
                    if e == Event::PeerClosed {
                        f.b.close();
                    }
                }
            }
            self.observe();
            let mut next = self.heap.peek().map(|Reverse((at, ..))| *at);
            for f in &self.flows {
                for t in [f.a.poll_timeout(), f.b.poll_timeout()]
                    .into_iter()
                    .flatten()
                    .chain((f.start > self.now).then_some(f.start))
                {
                    next = Some(next.map_or(t, |n: Instant| n.min(t)));
                }
            }
            let Some(next) = next else { break };
            if next > end {
                break;
            }
            self.now = self.now.max(next);
            let mut burst = vec![(false, false); self.flows.len()];
            while let Some(Reverse((at, ..))) = self.heap.peek() {
                if *at > self.now {
                    break;
                }
                let Some(Reverse((_, _, i, dir, bytes))) = self.heap.pop() else {
                    break;
                };
                self.deliver(i, dir, &bytes);
                match dir {
                    Dir::AtoB => burst[i].1 = true,
                    Dir::BtoA => burst[i].0 = true,
                }
            }
            for (f, (a, b)) in self.flows.iter_mut().zip(burst) {
                if a {
                    f.a.end_of_burst(self.now);
                }
                if b {
                    f.b.end_of_burst(self.now);
                }
                for c in [&mut f.a, &mut f.b] {
                    if c.poll_timeout().is_some_and(|at| at <= self.now) {
                        c.handle_timeout(self.now);
                    }
                }
            }
            self.observe();
        }
        self.flows
            .iter()
            .map(|f| FlowReport {
                delivered: f.delivered,
                secs: (f.done_at.unwrap_or(self.now) - f.start).as_secs_f64(),
                lost_octets: f.lost_octets,
                queue_drops: f.queue_drops,
                reordered_octets: f.reordered_octets,
                cwnd_decreases: f.cwnd_decreases,
                samples: f.samples.clone(),
                a: *f.a.stats(),
            })
            .collect()
    }

    fn assert_clean_close(&self) {
        for (i, f) in self.flows.iter().enumerate() {
            assert_eq!(f.b.state(), State::Closed, "flow {i}: B closed");
            assert!(
                matches!(f.a.state(), State::TimeWait | State::Closed),
                "flow {i}: A closed: {:?}",
                f.a.state()
            );
            assert!(f.a.error().is_none() && f.b.error().is_none());
            let s = f.b.stats();
            assert_eq!(s.dropped.reassembly_full + s.dropped.out_of_window, 0);
        }
    }
}

/// 100 Mbit/s, 10 ms RTT (5 ms each way), a queue of one bandwidth-delay product.
fn bottleneck() -> Bottleneck {
    Bottleneck {
        rate: 12_500_000,
        queue: 125_000,
    }
}

fn link(loss: f64) -> LinkCfg {
    LinkCfg {
        delay: Duration::from_millis(5),
        poll: Duration::from_micros(10),
        ..LinkCfg::lossy(loss)
    }
}

/// One bulk transfer of `n` octets; checks delivery, the window reductions, the counters.
fn bulk(cc: CongestionControl, loss: f64, seed: u64, n: usize) -> FlowReport {
    bulk_over(cc, link(loss), seed, n)
}

fn bulk_over(cc: CongestionControl, link: LinkCfg, seed: u64, n: usize) -> FlowReport {
    let loss = link.loss;
    let t0 = Instant::now();
    let mut net = Net::new(t0, link, bottleneck(), seed);
    net.add_flow(&sender_cfg(cc), n, t0);
    let r = net.run(Duration::from_secs(3600)).remove(0);
    let a = &r.a;
    eprintln!(
        "{cc:?} loss {:4.1} %: {n} octets in {:.3} s virtual = {:.1} Mbit/s; lost {} \
         (queue drops {}), reordered {}, retransmitted {} in {} segments; episodes {} rtos {} \
         reductions {} (seen {}); lost rtx {}; D-SACKs {}; pacing waits {}",
        loss * 100.0,
        r.secs,
        r.mbps(),
        r.lost_octets,
        r.queue_drops,
        r.reordered_octets,
        a.octets_retransmitted,
        a.retransmissions,
        a.recovery_episodes,
        a.rto_expiries,
        a.cwnd_reductions,
        r.cwnd_decreases,
        a.lost_retransmits,
        a.dsacks_received,
        a.pacing_waits,
    );
    assert_eq!(r.delivered, n, "every octet delivered");
    net.assert_clean_close();
    // The window went down exactly when the counters say it was reduced.
    assert!(r.cwnd_decreases <= a.cwnd_reductions);
    assert_eq!(a.recovery_episodes, a.fast_retransmits);
    assert!(a.cwnd_reductions <= a.recovery_episodes + a.rto_expiries);
    r
}

const MIB: usize = 1 << 20;

/// Octets retransmitted over what a loss-based sender must retransmit: every octet the
/// network dropped, and every octet it held back behind later ones (a DupThresh sender
/// cannot tell those from losses; RACK's time window could).
fn rtx_ratio(r: &FlowReport) -> f64 {
    r.a.octets_retransmitted as f64 / (r.lost_octets + r.reordered_octets) as f64
}

#[test]
fn bulk_lossless_fills_the_bottleneck() {
    for cc in [CongestionControl::Cubic, CongestionControl::NewReno] {
        let r = bulk(cc, 0.0, 31, 16 * MIB);
        // Only the queue drops (slow start's overshoot, then each probe past the BDP +
        // queue); recovery resends each drop, no timeout.
        assert!(r.queue_drops > 0);
        assert_eq!(r.a.rto_expiries, 0, "{cc:?}");
        assert!(rtx_ratio(&r) <= 1.5, "{cc:?}: {}", rtx_ratio(&r));
        assert!(r.mbps() > 90.0, "{cc:?}: {:.1} Mbit/s", r.mbps());
    }
}

/// Random loss with reordering (2 % of segments held back up to two one-way delays) and
/// duplication (1 %) on both paths, through the bottleneck.
fn lossy(loss: f64, seed: u64, n: usize) -> [FlowReport; 2] {
    [CongestionControl::Cubic, CongestionControl::NewReno].map(|cc| bulk(cc, loss, seed, n))
}

#[test]
fn bulk_1_percent_loss() {
    for r in lossy(0.01, 32, 8 * MIB) {
        assert_eq!(r.a.rto_expiries, 0, "no timeout at 1 %");
        assert!(rtx_ratio(&r) <= 1.5, "{}", rtx_ratio(&r));
    }
}

#[test]
fn bulk_5_percent_loss() {
    // Timeouts: CUBIC 3, NewReno 2 (a retransmission lost twice, or a loss in a window of
    // fewer than four segments).
    for (r, rtos) in lossy(0.05, 33, 4 * MIB).iter().zip([3, 2]) {
        assert_eq!(r.a.rto_expiries, rtos);
        assert!(rtx_ratio(r) <= 1.5, "{}", rtx_ratio(r));
    }
}

#[test]
fn bulk_20_percent_loss() {
    // Windows of two or three segments: timeouts as often as fast recoveries (RACK-TLP
    // would turn some into probes). Still every octet, and no needless go-back flood.
    for r in lossy(0.20, 34, 2 * MIB) {
        assert!(r.a.rto_expiries > 0 && r.a.recovery_episodes > 0);
        assert!(rtx_ratio(&r) <= 1.5, "{}", rtx_ratio(&r));
    }
}

/// Without reordering every retransmission but a lost retransmission's or a timeout's
/// go-back answers a real loss.
#[test]
fn bulk_1_and_5_percent_loss_without_reordering() {
    for (loss, seed, n) in [(0.01, 35, 8 * MIB), (0.05, 36, 4 * MIB)] {
        for cc in [CongestionControl::Cubic, CongestionControl::NewReno] {
            let l = LinkCfg {
                reorder: 0.0,
                ..link(loss)
            };
            let r = bulk_over(cc, l, seed, n);
            assert_eq!(r.reordered_octets, 0);
            let ratio = r.a.octets_retransmitted as f64 / r.lost_octets as f64;
            assert!(ratio <= 1.5, "{cc:?} at {loss}: {ratio}");
            // One timeout in the four runs: NewReno at 5 %.
            let rtos = u64::from(loss > 0.02 && cc == CongestionControl::NewReno);
            assert_eq!(r.a.rto_expiries, rtos, "{cc:?} at {loss}");
        }
    }
}
/// Two senders through one bottleneck, the second starting a second later: over the
/// second half of the run each gets at least a third of what both get (within 2:1).
fn share(cc: CongestionControl, seed: u64) -> (f64, f64) {
    let t0 = Instant::now();
    let mut net = Net::new(t0, link(0.0), bottleneck(), seed);
    let run = Duration::from_secs(20);
    net.add_flow(&sender_cfg(cc), usize::MAX / 2, t0);
    net.add_flow(&sender_cfg(cc), usize::MAX / 2, t0 + Duration::from_secs(1));
    let r = net.run(run);
    let half = r[0].samples.len() / 2;
    let got: Vec<f64> = r
        .iter()
        .map(|f| (f.samples[f.samples.len() - 1] - f.samples[half]) as f64)
        .collect();
    let secs = run.as_secs_f64() / 2.0;
    let (x, y) = (got[0] * 8.0 / secs / 1e6, got[1] * 8.0 / secs / 1e6);
    eprintln!(
        "{cc:?} share: {x:.1} + {y:.1} Mbit/s over the second half; episodes {} / {}, rtos {} / {}",
        r[0].a.recovery_episodes,
        r[1].a.recovery_episodes,
        r[0].a.rto_expiries,
        r[1].a.rto_expiries
    );
    (x, y)
}

#[test]
fn two_cubic_senders_share_a_bottleneck() {
    let (x, y) = share(CongestionControl::Cubic, 41);
    assert!(x + y > 80.0, "together {:.1} Mbit/s", x + y);
    assert!(x <= 2.0 * y && y <= 2.0 * x, "{x:.1} vs {y:.1} Mbit/s");
}

#[test]
fn two_newreno_senders_share_a_bottleneck() {
    let (x, y) = share(CongestionControl::NewReno, 42);
    assert!(x + y > 80.0, "together {:.1} Mbit/s", x + y);
    assert!(x <= 2.0 * y && y <= 2.0 * x, "{x:.1} vs {y:.1} Mbit/s");
}

/// `poll_transmit` releases data no faster than the pacing rate (2 × cwnd / SRTT in slow
/// start) allows at `now`, plus the saved-up credit; `next_send_at` says when the next may
/// leave and `poll_timeout` wakes the caller then; ACKs are never held back.
#[test]
fn pacing_bounds_what_leaves_at_each_instant() {
    let t0 = Instant::now();
    let cfg = TcpConfig {
        snd_buf: 1 << 20,
        initial_cwnd_segments: 100,
        ..TcpConfig::default()
    };
    let mut c = Connection::new(&handover(t0, true), &cfg, t0).unwrap();
    let mut p = Peer::new(true);
    p.wnd = 8192; // << 7 = 1 MiB
    c.send(b"abc");
    assert_eq!(drain_tx(&mut c, t0).len(), 1, "no RTT yet: not paced");
    // SRTT 10 ms from the echoed timestamp.
    let t1 = t0 + ms(10);
    p.ack = SeqNumber(SND0) + 3u32;
    p.tsecr = TSVAL_AT_FREEZE;
    c.handle_segment(t1, &p.pure_ack(0), &[]);
    assert_eq!(c.srtt(), Some(ms(10)));
    let cwnd = c.cwnd();
    assert_eq!(cwnd, 100 * 1460);
    let rate = c.pacing_rate().unwrap();
    assert_eq!(
        rate,
        (2.0 * cwnd as f64 / 0.010) as u64,
        "slow start: gain 2"
    );
    // A segment is 32 header octets (timestamps) + 1448: 50.68 µs at that rate. Credit
    // saved while idle: 200 µs, so 1 + 200 / 50.68 = 4.9: four or five leave at once.
    assert_eq!(c.send(&stream(3, 512 * 1024)), 512 * 1024);
    let burst = drain_tx(&mut c, t1);
    assert!((4..=5).contains(&burst.len()), "{}", burst.len());
    let at = c.next_send_at().expect("paced");
    assert!(at > t1 && at <= t1 + Duration::from_micros(51));
    assert_eq!(c.poll_timeout(), Some(at), "woken for the next segment");
    assert!(drain_tx(&mut c, t1).is_empty());
    assert!(c.stats().pacing_waits > 0);
    // An ACK is owed (peer data): it leaves at once, without data.
    let (d, payload) = p.data(0, 100);
    c.handle_segment(t1, &d, &payload);
    c.end_of_burst(t1);
    let acks = drain_tx(&mut c, t1);
    assert_eq!(acks.len(), 1);
    assert!(acks[0].payload.is_empty());
    // At `at` exactly one more; over the next millisecond one per 50.68 µs.
    assert_eq!(drain_tx(&mut c, at).len(), 1);
    let mut n = 0;
    let mut now = at;
    while now < at + ms(1) {
        now = c.next_send_at().unwrap_or(now + Duration::from_micros(1));
        n += drain_tx(&mut c, now).len();
    }
    assert!((19..=20).contains(&n), "{n} segments in 1 ms");
}

/// A long fat path (100 Mbit/s, 100 ms RTT: 860 segments in flight) with 0.01 % random
/// loss: NewReno regains one segment per RTT after each halving, CUBIC's window function
/// returns to W_max in K = cbrt(W_max × 0.3 / 0.4) seconds whatever the RTT.
#[test]
fn cubic_outruns_newreno_on_a_long_fat_path() {
    let t0 = Instant::now();
    let mut got = Vec::new();
    for cc in [CongestionControl::Cubic, CongestionControl::NewReno] {
        let l = LinkCfg {
            loss: 0.0001,
            reorder: 0.0,
            duplicate: 0.0,
            delay: Duration::from_millis(50),
            ..link(0.0)
        };
        let bn = Bottleneck {
            rate: 12_500_000,
            queue: 1_250_000,
        };
        let mut net = Net::new(t0, l, bn, 51);
        net.add_flow(&sender_cfg(cc), usize::MAX / 2, t0);
        let r = net.run(Duration::from_secs(30)).remove(0);
        // The last 20 s.
        let n = r.samples.len();
        let mbps = (r.samples[n - 1] - r.samples[n - 201]) as f64 * 8.0 / 20.0 / 1e6;
        eprintln!(
            "{cc:?} long fat path: {mbps:.1} Mbit/s over the last 20 s; lost {} episodes {} \
             rtos {}",
            r.lost_octets, r.a.recovery_episodes, r.a.rto_expiries
        );
        got.push(mbps);
    }
    assert!(
        got[0] > 1.3 * got[1],
        "CUBIC {:.1} vs NewReno {:.1}",
        got[0],
        got[1]
    );
}
