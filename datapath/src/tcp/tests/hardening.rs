//! Hostile or unusual peers: limits that hold whatever the peer sends or announced.

use std::time::Instant;

use super::harness::*;
use crate::tcp::{DropReason, TcpConfig};
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
