//! The producer side of a completion ring: a worker.

use super::*;

/// The producer's end of one ring (a worker's). Owns its indices: what is in the shared
/// header is only ever written by it, never trusted back.
#[derive(Debug)]
pub struct Producer {
    file: Arc<RingFile>,
    end: WriteEnd,
    lost: u64,
    published_lost: u64,
}

impl Producer {
    /// The producer of ring `ring` of `file` (`None` when there is no such ring).
    pub fn new(file: Arc<RingFile>, ring: u32) -> Option<Producer> {
        let end = WriteEnd::new(&file.0, ring)?;
        let lost = file.0.u64_at(ring, OFF_LOST).load(Ordering::Acquire);
        Some(Producer {
            end,
            lost,
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
        if !self.end.has_room(&self.file.0) {
            return false;
        }
        self.end.write(&self.file.0, &encode_record(r, self.lost));
        true
    }

    /// Counts a record as lost without trying to write it (it may not overtake a marker
    /// that is still waiting for room).
    pub fn lose(&mut self) {
        self.lost += 1;
    }

    /// Free slots as far as this producer knows (at least; the consumer may have freed more).
    pub fn room(&self) -> u64 {
        self.end.room()
    }

    /// Makes every record pushed so far (and the lost count) visible to the consumer;
    /// `true` when the consumer sleeps and must be woken (its `waiting` flag was set, and is
    /// now cleared). Once per burst.
    #[must_use]
    pub fn publish(&mut self) -> bool {
        if !self.end.unpublished() && self.lost == self.published_lost {
            return false;
        }
        // Head before lost: a consumer that sees a lost count also sees every record
        // written before those losses (see `Reader::peek`).
        self.end.publish(&self.file.0);
        self.file
            .0
            .u64_at(self.end.ring(), OFF_LOST)
            .store(self.lost, Ordering::Release);
        self.published_lost = self.lost;
        self.end.take_waiting(&self.file.0)
    }

    /// The producer index: records pushed (lost ones not counted).
    pub fn head(&self) -> u64 {
        self.end.head()
    }

    /// Records lost so far.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// This ring's index in the file.
    pub fn ring(&self) -> u32 {
        self.end.ring()
    }
}
