//! Limits that end a connection whose peer went away: keepalive, FIN-WAIT-2 and persist.
//! Every timer is checked just before and exactly at its deadline.

use std::time::{Duration, Instant};

use mpa::seq::SeqNumber;

use super::harness::*;
use crate::tcp::{Connection, Event, State, TcpConfig, TcpError};
use crate::wire::tcp::TcpFlags;

const JUST: Duration = Duration::from_nanos(1);

fn cfg() -> TcpConfig {
    TcpConfig {
        keepalive_idle: Some(ms(10_000)),
        keepalive_interval: ms(2_000),
        keepalive_probes: 3,
        fin_wait2_timeout: ms(3_000),
        persist_max_probes: 3,
        ..TcpConfig::default()
    }
}

/// Runs the timers due before `at` (delayed ACKs, a keepalive deadline that only re-arms),
/// then at `at - 1 ns` (nothing may happen) and at `at`; returns what went out at `at`.
fn fire_exactly(c: &mut Connection, at: Instant) -> Vec<Seg> {
    while let Some(t) = c.poll_timeout().filter(|&t| t < at) {
        c.handle_timeout(t);
        for s in drain_tx(c, t) {
            assert!(!s.repr.flags.rst(), "RST at {t:?}");
            assert_ne!(
                s.repr.seq_number,
                SeqNumber(SND0) + u32::MAX,
                "probe before {at:?}"
            );
        }
    }
    assert_eq!(c.poll_timeout(), Some(at), "deadline");
    let state = c.state();
    c.handle_timeout(at - JUST);
    assert!(
        drain_tx(c, at - JUST).is_empty(),
        "nothing before the deadline"
    );
    assert_eq!(c.state(), state, "no change before the deadline");
    assert_eq!(c.poll_timeout(), Some(at), "still armed");
    c.handle_timeout(at);
    drain_tx(c, at)
}

fn assert_keepalive_probe(s: &Seg, ack: u32) {
    assert!(s.payload.is_empty());
    assert_eq!(s.repr.flags, TcpFlags::empty(), "a bare ACK");
    assert_eq!(s.repr.seq_number, SeqNumber(SND0) + u32::MAX, "SND.UNA - 1");
    assert_eq!(s.ack(), SeqNumber(RCV0) + ack);
}

fn assert_rst_failed(c: &mut Connection, tx: &[Seg], e: TcpError) {
    assert_eq!(tx.len(), 1, "{tx:?}");
    assert!(tx[0].repr.flags.rst());
    assert_eq!(c.state(), State::Closed);
    assert_eq!(c.poll_event(), Some(Event::Failed(e.clone())));
    assert_eq!(c.error(), Some(&e));
    assert_eq!(mpa::MpaErrorCode::from(&e).code(), 1);
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn defaults_are_rfc_1122_and_linux() {
    let d = TcpConfig::default();
    assert_eq!(d.keepalive_idle, Some(Duration::from_secs(7200)));
    assert_eq!(d.keepalive_interval, Duration::from_secs(75));
    assert_eq!(d.keepalive_probes, 9);
    assert_eq!(d.fin_wait2_timeout, Duration::from_secs(60));
    assert_eq!(d.persist_max_probes, 15);
}

#[test]
fn a_silent_peer_is_probed_then_reset() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    assert!(drain_tx(&mut c, t0).is_empty());
    // Idle time, then one probe per interval; after the third unanswered one, a RST.
    let mut at = t0 + ms(10_000);
    for n in 1..=3 {
        let tx = fire_exactly(&mut c, at);
        assert_eq!(tx.len(), 1, "probe {n}");
        assert_keepalive_probe(&tx[0], 0);
        assert_eq!(c.stats().keepalive_probes, n);
        assert_eq!(c.state(), State::Established);
        at += ms(2_000);
    }
    let tx = fire_exactly(&mut c, at);
    assert_eq!(at - t0, ms(16_000), "idle + probes × interval");
    assert_rst_failed(&mut c, &tx, TcpError::KeepaliveTimeout { probes: 3 });
    assert_eq!(c.stats().keepalive_probes, 3);
}

#[test]
fn an_answered_probe_and_any_segment_restart_the_idle_time() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let mut p = Peer::new(true);
    // Data at 4 s: the first deadline (10 s) finds the flow busy 6 s ago and re-arms.
    let (d, payload) = p.data(0, 100);
    c.handle_segment(t0 + ms(4_000), &d, &payload);
    drain_tx(&mut c, t0 + ms(4_000));
    let tx = fire_exactly(&mut c, t0 + ms(10_000));
    assert!(tx.is_empty(), "not idle long enough: {tx:?}");
    // 10 s after the data: probe; the peer answers it (a duplicate ACK at its SND.NXT).
    let tx = fire_exactly(&mut c, t0 + ms(14_000));
    assert_eq!(tx.len(), 1);
    assert_keepalive_probe(&tx[0], 100);
    p.tsval += 1;
    let o = c.handle_segment(t0 + ms(15_000), &p.pure_ack(100), &[]);
    assert_eq!(o.dropped, None);
    assert!(drain_tx(&mut c, t0 + ms(15_000)).is_empty());
    // The interval deadline finds the answer: no probe, the idle time restarts from it.
    let tx = fire_exactly(&mut c, t0 + ms(16_000));
    assert!(tx.is_empty(), "{tx:?}");
    let tx = fire_exactly(&mut c, t0 + ms(25_000));
    assert_eq!(tx.len(), 1);
    assert_keepalive_probe(&tx[0], 100);
    // Two unanswered, then an answer again: the count starts over (three more to fail).
    fire_exactly(&mut c, t0 + ms(27_000));
    p.tsval += 1;
    c.handle_segment(t0 + ms(28_000), &p.pure_ack(100), &[]);
    assert!(fire_exactly(&mut c, t0 + ms(29_000)).is_empty());
    let mut at = t0 + ms(38_000);
    for _ in 0..3 {
        assert_eq!(fire_exactly(&mut c, at).len(), 1);
        at += ms(2_000);
    }
    assert_eq!(c.stats().keepalive_probes, 6);
    let tx = fire_exactly(&mut c, at);
    assert_rst_failed(&mut c, &tx, TcpError::KeepaliveTimeout { probes: 3 });
}

#[test]
fn an_unacceptable_segment_does_not_count_as_an_answer() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let p = Peer::new(true);
    assert_eq!(fire_exactly(&mut c, t0 + ms(10_000)).len(), 1);
    // Out of the window: answered with an ACK, but proves nothing about the peer.
    let far = p.repr(p.base + (1u32 << 30), TcpFlags::empty());
    c.handle_segment(t0 + ms(11_000), &far, &[]);
    drain_tx(&mut c, t0 + ms(11_000));
    assert_eq!(fire_exactly(&mut c, t0 + ms(12_000)).len(), 1);
    assert_eq!(c.stats().keepalive_probes, 2);
}

#[test]
fn no_keepalive_when_disabled() {
    let t0 = Instant::now();
    let cfg = TcpConfig {
        keepalive_idle: None,
        ..cfg()
    };
    let mut c = conn(t0, true, &cfg);
    assert_eq!(c.poll_timeout(), None);
    c.handle_timeout(t0 + Duration::from_secs(100_000));
    assert_eq!(c.state(), State::Established);
    assert!(drain_tx(&mut c, t0 + Duration::from_secs(100_000)).is_empty());
}

#[test]
fn keepalive_waits_while_octets_are_queued() {
    // A closed window holds our octets: the persist timer watches the peer, not keepalive.
    let t0 = Instant::now();
    let cfg = TcpConfig {
        persist_max_probes: 100,
        rto_max: ms(60_000),
        ..cfg()
    };
    let mut c = conn(t0, true, &cfg);
    let mut p = Peer::new(true);
    p.wnd = 0;
    c.handle_segment(t0, &p.pure_ack(0), &[]);
    c.send(b"x");
    assert!(drain_tx(&mut c, t0).is_empty());
    let mut now = t0;
    while now < t0 + ms(60_000) {
        now = c.poll_timeout().unwrap();
        c.handle_timeout(now);
        for s in drain_tx(&mut c, now) {
            assert!(s.repr.seq_number == SeqNumber(SND0) + u32::MAX);
        }
    }
    assert_eq!(c.stats().keepalive_probes, 0);
    assert!(c.stats().window_probes > 0);
    assert_eq!(c.state(), State::Established);
}

#[test]
fn fin_wait_2_is_bounded() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let mut p = Peer::new(true);
    c.close();
    assert!(drain_tx(&mut c, t0)[0].repr.flags.fin());
    p.ack = SeqNumber(SND0) + 1u32;
    c.handle_segment(t0 + ms(5), &p.pure_ack(0), &[]);
    assert_eq!(c.state(), State::FinWait2);
    // Data from the peer does not extend it (as Linux's tcp_fin_timeout).
    p.tsval += 1;
    let (d, payload) = p.data(0, 10);
    c.handle_segment(t0 + ms(1_000), &d, &payload);
    drain_tx(&mut c, t0 + ms(1_000));
    let tx = fire_exactly(&mut c, t0 + ms(3_005));
    assert_rst_failed(
        &mut c,
        &tx,
        TcpError::FinWait2Timeout { timeout: ms(3_000) },
    );
    assert_eq!(c.stats().keepalive_probes, 0);
}

#[test]
fn the_peers_fin_in_fin_wait_2_stops_the_bound() {
    let t0 = Instant::now();
    let cfg = TcpConfig {
        time_wait: ms(500),
        ..cfg()
    };
    let mut c = conn(t0, true, &cfg);
    let mut p = Peer::new(true);
    c.close();
    drain_tx(&mut c, t0);
    p.ack = SeqNumber(SND0) + 1u32;
    c.handle_segment(t0, &p.pure_ack(0), &[]);
    assert_eq!(c.poll_timeout(), Some(t0 + ms(3_000)));
    c.handle_segment(t0 + ms(100), &p.repr(p.base, TcpFlags::FIN), &[]);
    assert_eq!(c.state(), State::TimeWait);
    assert_eq!(c.poll_timeout(), Some(t0 + ms(600)));
    c.handle_timeout(t0 + ms(600));
    assert_eq!(c.poll_event(), Some(Event::PeerClosed));
    assert_eq!(c.poll_event(), Some(Event::Closed));
}

#[test]
fn persist_gives_up_after_the_probe_limit() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let mut p = Peer::new(true);
    p.wnd = 0;
    c.handle_segment(t0, &p.pure_ack(0), &[]);
    c.send(b"MPA reply");
    assert!(drain_tx(&mut c, t0).is_empty());
    // Probes back off (1, 2, 4 s); the peer answers each with its window still closed.
    let mut at = t0 + ms(1_000);
    for (n, gap) in [(1, 2_000), (2, 4_000), (3, 8_000)] {
        let tx = fire_exactly(&mut c, at);
        assert_eq!(tx.len(), 1, "probe {n}");
        assert_eq!(tx[0].repr.seq_number, SeqNumber(SND0) + u32::MAX);
        assert_eq!(c.stats().window_probes, n);
        p.tsval += 1;
        c.handle_segment(at + ms(1), &p.pure_ack(0), &[]);
        assert!(drain_tx(&mut c, at + ms(1)).is_empty());
        at += ms(gap);
    }
    let tx = fire_exactly(&mut c, at);
    assert_rst_failed(&mut c, &tx, TcpError::PersistLimit { probes: 3 });
}

#[test]
fn an_opening_window_restarts_the_probe_count() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let mut p = Peer::new(true);
    p.wnd = 0;
    c.handle_segment(t0, &p.pure_ack(0), &[]);
    assert_eq!(c.send(&[7u8; 200]), 200);
    assert!(drain_tx(&mut c, t0).is_empty());
    let mut now = t0;
    for _ in 0..3 {
        now = c.poll_timeout().unwrap();
        c.handle_timeout(now);
        assert_eq!(drain_tx(&mut c, now).len(), 1);
    }
    // 128 octets of window (1 << 7): they go, and are acknowledged with the window closed
    // again.
    p.wnd = 1;
    p.tsval += 1;
    c.handle_segment(now + ms(1), &p.pure_ack(0), &[]);
    let tx = drain_tx(&mut c, now + ms(1));
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].payload.len(), 128);
    p.wnd = 0;
    p.ack = SeqNumber(SND0) + 128u32;
    p.tsval += 1;
    c.handle_segment(now + ms(2), &p.pure_ack(0), &[]);
    assert!(drain_tx(&mut c, now + ms(2)).is_empty());
    // Three more probes are allowed before the limit.
    let mut probes = 0;
    while c.state() == State::Established {
        now = c.poll_timeout().unwrap();
        c.handle_timeout(now);
        let tx = drain_tx(&mut c, now);
        if c.state() == State::Established {
            probes += tx.len();
        } else {
            assert_rst_failed(&mut c, &tx, TcpError::PersistLimit { probes: 3 });
        }
    }
    assert_eq!(probes, 3);
    assert_eq!(c.stats().window_probes, 6);
}

/// RFC 1122 §4.2.2.17: the peer shrinks its window to zero while our octets are in flight
/// beyond the new right edge. Nothing may go beyond the edge, and the zero window MUST be
/// probed: each retransmission timeout sends a probe (SND.UNA - 1, no data) whose answer
/// carries the peer's window, so that a lost window update cannot leave the flow waiting for
/// the retransmission limit; once the window opens the octets go again.
#[test]
fn a_window_shrunk_to_zero_with_octets_in_flight_is_probed() {
    let t0 = Instant::now();
    let mut c = conn(t0, true, &cfg());
    let mut p = Peer::new(true);
    c.handle_segment(t0, &p.pure_ack(0), &[]);
    assert_eq!(c.send(b"a Terminate"), 11);
    let tx = drain_tx(&mut c, t0);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].payload, b"a Terminate");
    // The peer acknowledges nothing and closes its window: the right edge moves left of
    // the octets in flight.
    p.wnd = 0;
    p.tsval += 1;
    c.handle_segment(t0 + ms(1), &p.pure_ack(0), &[]);
    assert!(drain_tx(&mut c, t0 + ms(1)).is_empty());
    let mut now = t0 + ms(1);
    for n in 1..=3u64 {
        now = c
            .poll_timeout()
            .expect("a timer while octets are in flight");
        c.handle_timeout(now);
        let tx = drain_tx(&mut c, now);
        assert_eq!(tx.len(), 1, "timeout {n}: {tx:?}");
        assert!(tx[0].payload.is_empty(), "nothing beyond the right edge");
        assert_eq!(tx[0].repr.seq_number, SeqNumber(SND0) + u32::MAX);
        assert_eq!(c.stats().window_probes, n);
        assert_eq!(c.state(), State::Established);
    }
    // The probe's answer opens the window: the octets go again at once.
    p.wnd = 512;
    p.tsval += 1;
    c.handle_segment(now + ms(1), &p.pure_ack(0), &[]);
    let tx = drain_tx(&mut c, now + ms(1));
    assert_eq!(tx.len(), 1, "{tx:?}");
    assert_eq!(tx[0].repr.seq_number, SeqNumber(SND0));
    assert_eq!(tx[0].payload, b"a Terminate");
}
