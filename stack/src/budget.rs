//! One memory budget for the whole datapath (docs/limits.md): what flows hold beyond their
//! fixed state — out-of-order octets copied into reassembly stores, a fixed charge per flow
//! for its tables, placed-ahead list and send queue, and the completion rings of
//! subscriptions — is drawn from it, across every worker and the control thread.
//!
//! A charge is taken before the memory is used and given back when it is freed, so the sum
//! never exceeds the limit. What is refused: an out-of-order segment that would have to be
//! copied (dropped and counted; the sender sends it again, as Linux prunes its out-of-order
//! queue under `tcp_mem` pressure), a new hand-over and a new subscription (refused with a
//! reason). In-order data never needs the budget: it is placed or counted, not held.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The fixed charge of one flow: its reassembly range tables, placed-ahead list, send queue
/// of up to 4,096 messages and its other state, rounded up.
pub const FLOW_CHARGE: u64 = 256 << 10;

/// The datapath's memory budget, shared by its workers and its control thread.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    used: AtomicU64,
    high_water: AtomicU64,
    /// Out-of-order segments dropped because the budget had no room for their octets.
    dropped_segments: AtomicU64,
    /// Hand-overs and subscriptions refused for want of room.
    refused: AtomicU64,
}

impl MemoryBudget {
    /// A budget of `limit` octets.
    pub fn new(limit: u64) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit,
            used: AtomicU64::new(0),
            high_water: AtomicU64::new(0),
            dropped_segments: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    /// Takes `n` octets if they fit; `false` (nothing taken) when they do not.
    pub(crate) fn try_charge(&self, n: u64) -> bool {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let Some(next) = used.checked_add(n).filter(|&u| u <= self.limit) else {
                return false;
            };
            match self
                .used
                .compare_exchange_weak(used, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.high_water.fetch_max(next, Ordering::Relaxed);
                    return true;
                }
                Err(now) => used = now,
            }
        }
    }

    /// Gives `n` octets back (at most what is used).
    pub(crate) fn release(&self, n: u64) {
        if n == 0 {
            return;
        }
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let next = used.saturating_sub(n);
            match self
                .used
                .compare_exchange_weak(used, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => used = now,
            }
        }
    }

    /// An out-of-order segment was dropped for want of room.
    pub(crate) fn count_dropped_segment(&self) {
        self.dropped_segments.fetch_add(1, Ordering::Relaxed);
    }

    /// A hand-over or subscription was refused for want of room.
    fn count_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Octets not charged now.
    pub(crate) fn available(&self) -> u64 {
        self.limit.saturating_sub(self.used.load(Ordering::Relaxed))
    }

    /// Its counters now.
    pub fn report(&self) -> mpa_ctl_proto::stats::MemoryStats {
        mpa_ctl_proto::stats::MemoryStats {
            limit: self.limit,
            used: self.used.load(Ordering::Relaxed),
            high_water: self.high_water.load(Ordering::Relaxed),
            dropped_segments: self.dropped_segments.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            ..Default::default()
        }
    }
}

/// A charge held on a budget, given back when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<MemoryBudget>,
    octets: u64,
}

impl Charge {
    /// Takes `n` octets of `budget`, or `None` when they do not fit (counted as refused).
    pub fn take(budget: &Arc<MemoryBudget>, n: u64) -> Option<Charge> {
        if budget.try_charge(n) {
            Some(Charge {
                budget: budget.clone(),
                octets: n,
            })
        } else {
            budget.count_refused();
            None
        }
    }

    /// The budget charged.
    pub(crate) fn budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(self.octets);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_never_exceed_the_limit_and_come_back() {
        let b = MemoryBudget::new(1000);
        assert!(b.try_charge(600));
        assert!(!b.try_charge(401), "over the limit");
        assert!(b.try_charge(400));
        assert!(!b.try_charge(1));
        b.release(700);
        let c = Charge::take(&b, 500).expect("fits");
        assert!(Charge::take(&b, 201).is_none());
        drop(c);
        let r = b.report();
        assert_eq!((r.used, r.high_water, r.refused), (300, 1000, 1));
        b.release(u64::MAX);
        assert_eq!(b.report().used, 0);
    }

    #[test]
    fn concurrent_charges_stay_within_the_limit() {
        let b = MemoryBudget::new(10_000);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || {
                    let mut held = 0;
                    for _ in 0..10_000 {
                        if b.try_charge(7) {
                            held += 7;
                        }
                        if held > 2000 {
                            b.release(held);
                            held = 0;
                        }
                    }
                    b.release(held);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let r = b.report();
        assert_eq!(r.used, 0);
        assert!(r.high_water <= 10_000);
    }
}
