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

/// Under memory pressure the offered window shrinks toward `PRESSURE_WINDOW` instead of
/// growing with the store's limit: beside a connection whose budget has room, the same
/// in-order data leaves the pressed one's right edge at most that far ahead — and never
/// behind where it was.
#[test]
fn the_window_shrinks_under_memory_pressure_but_its_right_edge_never_moves_back() {
    use crate::tcp::connection::PRESSURE_WINDOW;
    let t0 = Instant::now();
    let roomy = MemoryBudget::new(1 << 30);
    let pressed = MemoryBudget::new(1 << 30);
    assert!(pressed.try_charge(1 << 30), "others hold all of it");
    let mut edges = Vec::new();
    for budget in [roomy, pressed] {
        let mut c = conn(t0, false, &TcpConfig::default());
        c.set_budget(budget);
        let peer = Peer::new(false);
        let mut last_edge = None;
        let mut off = 0u64;
        for _ in 0..200 {
            let (r, p) = peer.data(off, SEG);
            let (out, got) = feed(&mut c, t0, &r, &p);
            assert_eq!(
                (out.dropped, got.len()),
                (None, SEG),
                "in order needs no budget"
            );
            off += SEG as u64;
            for s in drain_tx(&mut c, t0) {
                let edge = s.right_edge();
                if let Some(l) = last_edge {
                    assert!(edge >= l, "the right edge moved back");
                }
                last_edge = Some(edge);
            }
        }
        let edge = last_edge.expect("ACKs sent");
        edges.push(edge.distance_from(peer.base + off as u32) as usize);
    }
    assert!(
        edges[0] > 2 * PRESSURE_WINDOW,
        "room: the window grows: {edges:?}"
    );
    assert!(
        edges[1] <= PRESSURE_WINDOW + SEG,
        "pressure: at most {PRESSURE_WINDOW} ahead: {edges:?}"
    );
}
