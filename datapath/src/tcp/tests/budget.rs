//! The reassembly store's copied octets drawn from a shared memory budget
//! (`crate::budget`): out-of-order segments are stored while the budget has room, dropped
//! (counted) when it has none, and every octet comes back when the hole fills and when the
//! connection goes — the budget is never exceeded.

use super::harness::*;
use crate::budget::MemoryBudget;
use crate::tcp::{DropReason, TcpConfig};
use std::time::Instant;

#[test]
fn out_of_order_octets_are_held_only_within_the_budget_and_given_back() {
    let t0 = Instant::now();
    let budget = MemoryBudget::new(3 * SEG as u64);
    let mut c = conn(t0, false, &TcpConfig::default());
    c.set_budget(budget.clone());
    let peer = Peer::new(false);
    // A hole of one segment at RCV.NXT, then three segments above it: all three fit the budget.
    for k in 1..=3u64 {
        let (r, p) = peer.data(k * SEG as u64, SEG);
        let (out, got) = feed(&mut c, t0, &r, &p);
        assert!(got.is_empty());
        assert_eq!(out.dropped, None, "segment {k} stored");
    }
    assert_eq!(budget.report().used, 3 * SEG as u64);
    let (r, p) = peer.data(4 * SEG as u64, SEG);
    let (out, _) = feed(&mut c, t0, &r, &p);
    assert_eq!(
        out.dropped,
        Some(DropReason::ReassemblyFull),
        "no room left"
    );
    let m = budget.report();
    assert_eq!(
        (m.used, m.dropped_segments, m.high_water),
        (3 * SEG as u64, 1, 3 * SEG as u64)
    );
    assert_eq!(c.stats().dropped.reassembly_full, 1);
    // The hole fills: the stored octets come out in order and their charge with them.
    let (r, p) = peer.data(0, SEG);
    let (_, got) = feed(&mut c, t0, &r, &p);
    assert!(
        got == stream(0, 4 * SEG),
        "every stored octet delivered in order"
    );
    assert_eq!(budget.report().used, 0);
    // Held again, then the connection goes: given back.
    let (r, p) = peer.data(6 * SEG as u64, SEG);
    let _ = feed(&mut c, t0, &r, &p);
    assert_eq!(budget.report().used, SEG as u64);
    drop(c);
    assert_eq!(budget.report().used, 0);
}
