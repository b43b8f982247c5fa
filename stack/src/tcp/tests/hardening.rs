//! Hostile or unusual peers: limits that hold whatever the peer sends or announced.

use std::time::Instant;

use super::harness::*;
use crate::tcp::{Connection, DropReason, TcpConfig};
use crate::wire::tcp::TcpFlags;

/// RFC 5961 §4.2: a SYN gets a challenge ACK whatever its sequence number, and RFC 5961 §7
/// limits those: a flood of out-of-window SYNs must not get an ACK each.
#[test]
fn out_of_window_syns_get_rate_limited_challenge_acks() {
    let t0 = Instant::now();
    let cfg = TcpConfig {
        challenge_ack_limit: 3,
        ..TcpConfig::default()
    };
    let mut c = conn(t0, true, &cfg);
    let p = Peer::new(true);
    let far = p.base + (1u32 << 30);
    let mut acks = 0;
    for _ in 0..50 {
        let o = c.handle_segment(t0, &p.repr(far, TcpFlags::SYN), &[]);
        assert_eq!(o.dropped, Some(DropReason::Syn));
        acks += drain_tx(&mut c, t0).len();
    }
    assert_eq!(acks, 3);
    assert_eq!(c.stats().challenge_acks, 3);
    assert_eq!(c.stats().challenge_acks_suppressed, 47);
    // A new second, a new allowance; the ACK names RCV.NXT.
    c.handle_segment(t0 + ms(1001), &p.repr(far, TcpFlags::SYN), &[]);
    let tx = drain_tx(&mut c, t0 + ms(1001));
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].ack(), p.base);
}

/// A peer announcing a jumbo MSS does not make us build segments our link cannot carry.
#[test]
fn send_mss_is_clamped_to_ours() {
    let t0 = Instant::now();
    let cfg = TcpConfig {
        max_snd_mss: 1460,
        ..TcpConfig::default()
    };
    let h = handover_with_mss(t0, 9000);
    let mut c = Connection::new(&h, &cfg, t0).unwrap();
    assert_eq!(c.send(&stream(0, 20_000)), 20_000);
    let tx = drain_tx(&mut c, t0);
    assert!(!tx.is_empty());
    for s in &tx {
        // 1460 minus the timestamps option.
        assert!(s.payload.len() <= 1448, "{} octets", s.payload.len());
    }
    // Under ours, the peer's MSS still rules.
    let h = handover_with_mss(t0, 536);
    let mut c = Connection::new(&h, &cfg, t0).unwrap();
    c.send(&stream(0, 5000));
    assert!(drain_tx(&mut c, t0).iter().all(|s| s.payload.len() <= 524));
    // A nonsensical limit is refused.
    let tiny = TcpConfig {
        max_snd_mss: 10,
        ..TcpConfig::default()
    };
    assert!(Connection::new(&h, &tiny, t0).is_err());
}

fn handover_with_mss(t0: Instant, mss: u16) -> crate::tcp::HandoverState {
    crate::tcp::HandoverState {
        mss,
        ..handover(t0, true)
    }
}

/// Linux's `tcp_invalid_ratelimit`: segments without data that fail the sequence check or
/// PAWS get at most one ACK per `invalid_ack_interval` (no ACK loop, no reflector), while
/// segments with data keep theirs.
#[test]
fn acks_to_invalid_segments_without_data_are_rate_limited() {
    let t0 = Instant::now();
    let cfg = TcpConfig::default();
    let mut c = conn(t0, true, &cfg);
    let mut p = Peer::new(true);
    let far = p.base + (1u32 << 30);
    let mut acks = 0;
    for i in 0..40u64 {
        let now = t0 + std::time::Duration::from_millis(i * 10);
        let o = c.handle_segment(now, &p.repr(far, TcpFlags::empty()), &[]);
        assert_eq!(o.dropped, Some(DropReason::OutOfWindow));
        acks += drain_tx(&mut c, now).len();
    }
    // 0..390 ms: one; nothing again before 500 ms.
    assert_eq!(acks, 1);
    assert_eq!(c.stats().invalid_acks_suppressed, 39);
    let later = t0 + std::time::Duration::from_millis(500);
    c.handle_segment(later, &p.repr(far, TcpFlags::empty()), &[]);
    assert_eq!(drain_tx(&mut c, later).len(), 1);
    // PAWS-failing pure ACKs share the limit.
    p.tsval = super::harness::PEER_TS0 - 1;
    c.handle_segment(later, &p.pure_ack(0), &[]);
    assert!(drain_tx(&mut c, later).is_empty());
    assert_eq!(c.stats().invalid_acks_suppressed, 40);
    // Out-of-window data is answered every time.
    p.tsval = super::harness::PEER_TS0 + 1;
    for _ in 0..5 {
        let o = c.handle_segment(later, &p.repr(far, TcpFlags::PSH), &[7u8; 100]);
        assert_eq!(o.dropped, Some(DropReason::OutOfWindow));
        assert_eq!(drain_tx(&mut c, later).len(), 1);
    }
    assert_eq!(c.stats().invalid_acks_suppressed, 40);
}

/// docs/environment.md, "Why TS.Recent must be inherited": a forged pure ACK at RCV.NXT
/// whose TSval is half the space from the peer's wedges a flow that starts with TS.Recent
/// unknown (it becomes the baseline and every real segment then fails PAWS), and is dropped
/// by PAWS in one that inherited the peer's TSval at its hand-over.
#[test]
fn inherited_ts_recent_keeps_a_forged_far_ack_from_wedging_the_flow() {
    let t0 = Instant::now();
    for inherited in [false, true] {
        let mut h = handover(t0, true);
        if !inherited {
            h.timestamps.as_mut().unwrap().ts_recent = 0;
        }
        let mut c = Connection::new(&h, &TcpConfig::default(), t0).unwrap();
        let mut p = Peer::new(true);
        p.tsval = PEER_TS0.wrapping_add(1 << 31);
        let forged = c.handle_segment(t0, &p.pure_ack(0), &[]);
        p.tsval = PEER_TS0.wrapping_add(5);
        let (o, got) = feed(&mut c, t0, &p.data(0, 100).0, &p.data(0, 100).1);
        if inherited {
            assert_eq!(forged.dropped, Some(DropReason::Paws));
            assert_eq!(o.dropped, None);
            assert_eq!(got, stream(0, 100));
        } else {
            assert_eq!(forged.dropped, None);
            assert_eq!(o.dropped, Some(DropReason::Paws), "wedged");
            assert!(got.is_empty());
        }
    }
}
