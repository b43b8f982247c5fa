//! The producer side of a completion ring: a worker.
#![allow(unsafe_code)]

use super::*;

/// The producer's end of one ring (a worker's). Owns its indices: what is in the shared
/// header is only ever written by it, never trusted back.
#[derive(Debug)]
pub struct Producer {
    file: Arc<RingFile>,
    ring: u32,
    cap: u64,
    head: u64,
    /// The consumer's tail last read (read again only when the ring looks full).
    tail_seen: u64,
    lost: u64,
    published_head: u64,
    published_lost: u64,
}

impl Producer {
    /// The producer of ring `ring` of `file` (`None` when there is no such ring).
    pub fn new(file: Arc<RingFile>, ring: u32) -> Option<Producer> {
        if ring >= file.rings {
            return None;
        }
        let head = file.u64_at(ring, OFF_HEAD).load(Ordering::Acquire);
        let lost = file.u64_at(ring, OFF_LOST).load(Ordering::Acquire);
        Some(Producer {
            cap: u64::from(file.capacity),
            ring,
            head,
            tail_seen: head,
            lost,
            published_head: head,
            published_lost: lost,
            file,
        })
    }

    /// Writes `r` into the next slot (not yet visible: see [`Producer::publish`]); `false`
    /// when the ring is full, in which case it is counted as lost.
    #[inline]
    pub fn push(&mut self, r: &Record) -> bool {
        if !self.try_push(r) {
            self.lost += 1;
            return false;
        }
        true
    }

    /// [`Producer::push`] that does not count a record that does not fit (a marker the
    /// producer will write later).
    #[inline]
    pub fn try_push(&mut self, r: &Record) -> bool {
        if self.head.wrapping_sub(self.tail_seen) >= self.cap {
            let t = self
                .file
                .u64_at(self.ring, OFF_TAIL)
                .load(Ordering::Acquire);
            // A tail beyond the head or more than a ring behind is not the consumer's: treat
            // the ring as full rather than overwrite records on its word.
            self.tail_seen = if self.head.wrapping_sub(t) <= self.cap {
                t
            } else {
                self.head.wrapping_sub(self.cap)
            };
            if self.head.wrapping_sub(self.tail_seen) >= self.cap {
                return false;
            }
        }
        let b = encode_record(r, self.lost);
        // SAFETY: the slot of `head` is inside the mapping (`slot`); the consumer has
        // released it (head − tail < capacity, tail read with acquire) and reads it only
        // after the release store of a head beyond it; `b` is our own stack memory.
        unsafe {
            std::ptr::copy_nonoverlapping(
                b.as_ptr(),
                self.file.slot(self.ring, self.head),
                RECORD_LEN,
            )
        };
        self.head = self.head.wrapping_add(1);
        true
    }

    /// Counts a record as lost without trying to write it (it may not overtake a marker
    /// that is still waiting for room).
    pub fn lose(&mut self) {
        self.lost += 1;
    }

    /// Free slots as far as this producer knows (at least; the consumer may have freed more).
    pub fn room(&self) -> u64 {
        self.cap - self.head.wrapping_sub(self.tail_seen).min(self.cap)
    }

    /// Makes every record pushed so far (and the lost count) visible to the consumer;
    /// `true` when the consumer sleeps and must be woken (its `waiting` flag was set, and is
    /// now cleared). Once per burst.
    #[must_use]
    pub fn publish(&mut self) -> bool {
        if self.head == self.published_head && self.lost == self.published_lost {
            return false;
        }
        // Head before lost: a consumer that sees a lost count also sees every record
        // written before those losses (see `Reader::poll`).
        self.file
            .u64_at(self.ring, OFF_HEAD)
            .store(self.head, Ordering::Release);
        self.file
            .u64_at(self.ring, OFF_LOST)
            .store(self.lost, Ordering::Release);
        self.published_head = self.head;
        self.published_lost = self.lost;
        // Pairs with the consumer's fence between setting `waiting` and checking the ring.
        fence(Ordering::SeqCst);
        let waiting = self.file.u32_at(self.ring, OFF_WAITING);
        waiting.load(Ordering::Relaxed) != 0 && waiting.swap(0, Ordering::AcqRel) != 0
    }

    /// The producer index: records pushed (lost ones not counted).
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Records lost so far.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// This ring's index in the file.
    pub fn ring(&self) -> u32 {
        self.ring
    }
}
