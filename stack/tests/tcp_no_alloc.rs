//! The receive path allocates nothing per segment (docs/architecture.md, "Fast-path rules"): a counting
//! global allocator watches `handle_segment`, `drain_reassembled`, `end_of_burst` and
//! `poll_transmit` over in-order, reordered, duplicate and SACK-carrying traffic.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mpa::seq::SeqNumber;
use mpa_stack::tcp::{Connection, HandoverState, TcpConfig, TsHandover};
use mpa_stack::wire::tcp::{TcpFlags, TcpOptions, TcpRepr, TcpTimestamps};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Counting is on for the test's own thread only: the test harness's other threads
    /// allocate when they like (under load, while this test runs), and must not count.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call unchanged to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const SEG: usize = 1448;

#[test]
fn receive_path_does_not_allocate() {
    let t0 = Instant::now();
    let start = SeqNumber(u32::MAX - 50_000);
    let h = HandoverState {
        local_port: 7777,
        remote_port: 40000,
        snd_nxt: SeqNumber(1),
        rcv_nxt: start,
        snd_wnd: 1 << 20,
        rcv_wnd: 1 << 20,
        rcv_wup: start,
        snd_wscale: 7,
        rcv_wscale: 7,
        mss: 1460,
        sack_permitted: true,
        timestamps: Some(TsHandover {
            tsval_at_freeze: 1,
            freeze_instant: t0,
            ts_recent: 1,
        }),
    };
    let mut c = Connection::new(&h, &TcpConfig::default(), t0).unwrap();
    let payload = vec![0xabu8; SEG];
    let mut tx = vec![0u8; 2048];
    let mut now = t0;
    let repr = |k: usize, tsval: u32| TcpRepr {
        src_port: 40000,
        dst_port: 7777,
        seq_number: start + k * SEG,
        ack_number: Some(SeqNumber(1)),
        flags: TcpFlags::PSH,
        window_len: 512,
        urgent_at: 0,
        options: TcpOptions {
            timestamps: Some(TcpTimestamps { tsval, tsecr: 1 }),
            ..TcpOptions::default()
        },
    };
    let mut delivered = 0usize;
    COUNTING.with(|c| c.set(true));
    let before = ALLOCS.load(Ordering::Relaxed);
    for burst in 0..500usize {
        for i in 0..20usize {
            let k = burst * 20 + i;
            // Every 10th burst: a segment overtakes two others (a hole, SACK), and one
            // segment arrives twice.
            let idx = match (burst % 10, i) {
                (0, 5) => k + 2,
                (0, 6) => k - 1,
                (0, 7) => k - 1,
                _ => k,
            };
            let r = repr(idx, 2 + burst as u32);
            let out = c.handle_segment(now, &r, &payload);
            delivered += out.in_order.len();
            if out.reassembled > 0 {
                delivered += c.drain_reassembled(|_| {});
            }
            if i == 8 && burst % 10 == 0 {
                c.handle_segment(now, &r, &payload); // duplicate
            }
            // ACK at once on reordering: poll after each segment, as a caller may.
            while c.poll_transmit(now, &mut tx).is_some() {}
        }
        now += Duration::from_micros(10);
        c.end_of_burst(now);
        while c.poll_transmit(now, &mut tx).is_some() {}
    }
    let after = ALLOCS.load(Ordering::Relaxed);
    COUNTING.with(|c| c.set(false));
    assert_eq!(delivered, 500 * 20 * SEG);
    assert!(c.stats().ooo_segs >= 50 && c.stats().sack_blocks_sent > 0);
    assert_eq!(after - before, 0, "allocations on the receive path");
}
