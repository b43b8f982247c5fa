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
