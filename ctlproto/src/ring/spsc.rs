//! What every ring file shares, whatever its records: the header lines, the free-running
//! indices, the sealed memfd and the checks of a received one, the copy of a record into and
//! out of a slot, and the index discipline of each end — the producer's room check that never
//! believes a tail it cannot have, the reader's check that refuses a head it cannot have, and
//! the `waiting` flag with the fences that keep a wake-up from being lost (see the layout in
//! the module above).
//!
//! A kind of ring file is a [`RecordLayout`]: its magic, layout version and record size. The
//! record codecs and what a full ring means (completions: dropped and counted; posts:
//! refused to the caller) belong to the kinds, not here.
//!
//! The ends ([`WriteEnd`], [`ReadEnd`]) hold only their own indices; the file is passed to
//! each call, so that the kinds keep owning their file however they share it.
#![allow(unsafe_code)]

use super::{RingError, HEADER_LEN, MAX_CAPACITY, MAX_RINGS, MIN_CAPACITY};
use mpa_shm::{Access, SharedMemory};
use std::marker::PhantomData;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

const PAGE: usize = 4096;
pub(super) const OFF_MAGIC: usize = 0;
pub(super) const OFF_VERSION: usize = 4;
pub(super) const OFF_CAPACITY: usize = 8;
pub(super) const OFF_INDEX: usize = 12;
pub(super) const OFF_RINGS: usize = 16;
pub(super) const OFF_HEAD: usize = 128;
pub(super) const OFF_LOST: usize = 136;
pub(super) const OFF_TAIL: usize = 256;
pub(super) const OFF_WAITING: usize = 264;

/// One kind of ring file: what its headers say and how long its records are.
pub(crate) trait RecordLayout {
    /// First header word of every ring.
    const MAGIC: u32;
    /// Second header word: the version of this kind's layout.
    const VERSION: u32;
    /// Octets of one record.
    const LEN: usize;
}

/// Octets one ring of `capacity` records of `len` octets takes in a file: a whole number of
/// pages, so that every ring starts page-aligned (its header atomics aligned with it).
pub(super) fn ring_bytes_of(len: usize, capacity: u32) -> usize {
    (HEADER_LEN + capacity as usize * len).next_multiple_of(PAGE)
}

/// The shared mapping of a ring file of kind `L`.
pub(crate) struct Rings<L> {
    mem: SharedMemory,
    rings: u32,
    capacity: u32,
    kind: PhantomData<fn() -> L>,
}

impl<L: RecordLayout> Rings<L> {
    fn check_shape(rings: u32, capacity: u32) -> Result<usize, RingError> {
        let ok = capacity.is_power_of_two()
            && (MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity)
            && (1..=MAX_RINGS).contains(&rings);
        if !ok {
            return Err(RingError::Shape { rings, capacity });
        }
        Ok(rings as usize * ring_bytes_of(L::LEN, capacity))
    }

    /// A sealed memfd named `name` of `rings` empty rings, indices starting at `start`.
    pub(crate) fn create_at(
        name: &str,
        rings: u32,
        capacity: u32,
        start: u64,
    ) -> Result<Rings<L>, RingError> {
        let len = Self::check_shape(rings, capacity)?;
        // Sealed like regions: the other process, truncating its descriptor, cannot turn our
        // next access into a SIGBUS.
        let f = Rings {
            mem: SharedMemory::create(name, len as u64, false)?,
            rings,
            capacity,
            kind: PhantomData,
        };
        for r in 0..rings {
            f.u32_at(r, OFF_MAGIC).store(L::MAGIC, Ordering::Relaxed);
            f.u32_at(r, OFF_VERSION)
                .store(L::VERSION, Ordering::Relaxed);
            f.u32_at(r, OFF_CAPACITY).store(capacity, Ordering::Relaxed);
            f.u32_at(r, OFF_INDEX).store(r, Ordering::Relaxed);
            f.u32_at(r, OFF_RINGS).store(rings, Ordering::Relaxed);
            f.u64_at(r, OFF_HEAD).store(start, Ordering::Relaxed);
            f.u64_at(r, OFF_TAIL).store(start, Ordering::Relaxed);
        }
        fence(Ordering::Release);
        Ok(f)
    }

    /// Maps a received ring file after checking that it is sealed, of the size `rings` ×
    /// `capacity` make, and that every header says so.
    pub(crate) fn open(fd: OwnedFd, rings: u32, capacity: u32) -> Result<Rings<L>, RingError> {
        let len = Self::check_shape(rings, capacity)?;
        let f = Rings {
            mem: SharedMemory::open(fd, len as u64, Access::ReadWrite)?,
            rings,
            capacity,
            kind: PhantomData,
        };
        fence(Ordering::Acquire);
        for r in 0..rings {
            let got = [OFF_MAGIC, OFF_VERSION, OFF_CAPACITY, OFF_INDEX, OFF_RINGS]
                .map(|o| f.u32_at(r, o).load(Ordering::Relaxed));
            if got != [L::MAGIC, L::VERSION, capacity, r, rings] {
                return Err(RingError::Layout(
                    "ring header differs from the announced rings",
                ));
            }
        }
        Ok(f)
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.mem.fd()
    }

    pub(crate) fn rings(&self) -> u32 {
        self.rings
    }

    pub(crate) fn capacity(&self) -> u32 {
        self.capacity
    }

    pub(crate) fn len(&self) -> usize {
        self.mem.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }

    fn field(&self, ring: u32, off: usize) -> *mut u8 {
        assert!(ring < self.rings && off + 8 <= HEADER_LEN);
        let at = ring as usize * ring_bytes_of(L::LEN, self.capacity) + off;
        // ring < rings and off + 8 <= HEADER_LEN, so `at + 8 <= len`: never `None`.
        self.mem
            .ptr_at(at, 8)
            .expect("ring header field inside the mapping")
    }

    pub(crate) fn u64_at(&self, ring: u32, off: usize) -> &AtomicU64 {
        // SAFETY: `field` is inside the mapping, 8-aligned (page-aligned ring start, offsets
        // 128/136/256), lives as long as `self`, and both processes access these octets only
        // atomically.
        unsafe { AtomicU64::from_ptr(self.field(ring, off).cast()) }
    }

    pub(crate) fn u32_at(&self, ring: u32, off: usize) -> &AtomicU32 {
        // SAFETY: as `u64_at`; 4-aligned offsets.
        unsafe { AtomicU32::from_ptr(self.field(ring, off).cast()) }
    }

    fn slot(&self, ring: u32, index: u64) -> *mut u8 {
        assert!(ring < self.rings);
        let i = (index & u64::from(self.capacity - 1)) as usize;
        let at = ring as usize * ring_bytes_of(L::LEN, self.capacity) + HEADER_LEN + i * L::LEN;
        // i < capacity, so `at + LEN <= (ring + 1) × ring_bytes <= len`: never `None`.
        self.mem
            .ptr_at(at, L::LEN)
            .expect("ring slot inside the mapping")
    }

    /// Copies the record at `index` of `ring` into `dst` (its first `LEN` octets).
    fn read_slot(&self, ring: u32, index: u64, dst: &mut [u8]) {
        let n = dst.len().min(L::LEN);
        // SAFETY: `slot` points at `LEN >= n` octets inside the mapping; `dst` is memory of
        // this process, never part of the mapping (no reference into it is handed out). The
        // other process may write the slot meanwhile: the copy is then torn, which the
        // record's decoder, reading only the copy, is there to refuse.
        unsafe { std::ptr::copy_nonoverlapping(self.slot(ring, index), dst.as_mut_ptr(), n) };
    }

    /// Copies `src` (at most `LEN` octets) into the record at `index` of `ring`.
    fn write_slot(&self, ring: u32, index: u64, src: &[u8]) {
        let n = src.len().min(L::LEN);
        // SAFETY: as `read_slot`, the other way round: the destination is `LEN >= n` octets
        // inside our read-write mapping and `src` lies outside it.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.slot(ring, index), n) };
    }
}

/// The producer's indices of one ring. What is in the shared header is only ever written by
/// it, never trusted back, except the consumer's tail, and that only within reason.
#[derive(Debug)]
pub(crate) struct WriteEnd {
    ring: u32,
    cap: u64,
    head: u64,
    /// The consumer's tail last read (read again only when the ring looks full).
    tail_seen: u64,
    published: u64,
}

impl WriteEnd {
    /// The producer of ring `ring` of `file` (`None` when there is no such ring).
    pub(crate) fn new<L: RecordLayout>(file: &Rings<L>, ring: u32) -> Option<WriteEnd> {
        if ring >= file.rings {
            return None;
        }
        let head = file.u64_at(ring, OFF_HEAD).load(Ordering::Acquire);
        Some(WriteEnd {
            ring,
            cap: u64::from(file.capacity),
            head,
            tail_seen: head,
            published: head,
        })
    }

    /// Whether the next slot is free, reading the consumer's tail again when it looks full.
    #[inline]
    pub(crate) fn has_room<L: RecordLayout>(&mut self, file: &Rings<L>) -> bool {
        if self.head.wrapping_sub(self.tail_seen) < self.cap {
            return true;
        }
        let t = file.u64_at(self.ring, OFF_TAIL).load(Ordering::Acquire);
        // A tail beyond the head or more than a ring behind is not the consumer's: treat the
        // ring as full rather than overwrite records on its word.
        self.tail_seen = if self.head.wrapping_sub(t) <= self.cap {
            t
        } else {
            self.head.wrapping_sub(self.cap)
        };
        self.head.wrapping_sub(self.tail_seen) < self.cap
    }

    /// Writes `record` into the next slot and moves past it (not yet visible: see
    /// [`WriteEnd::publish`]). Only after [`WriteEnd::has_room`] said yes.
    #[inline]
    pub(crate) fn write<L: RecordLayout>(&mut self, file: &Rings<L>, record: &[u8]) {
        debug_assert!(self.head.wrapping_sub(self.tail_seen) < self.cap);
        // The consumer has released this slot (head − tail < capacity, tail read with
        // acquire) and reads it only after the release store of a head beyond it.
        file.write_slot(self.ring, self.head, record);
        self.head = self.head.wrapping_add(1);
    }

    /// Free slots as far as this producer knows (at least; the consumer may have freed more).
    pub(crate) fn room(&self) -> u64 {
        self.cap - self.head.wrapping_sub(self.tail_seen).min(self.cap)
    }

    /// Records written since the last [`WriteEnd::publish`].
    pub(crate) fn unpublished(&self) -> bool {
        self.head != self.published
    }

    /// Makes every record written so far visible to the consumer (release).
    pub(crate) fn publish<L: RecordLayout>(&mut self, file: &Rings<L>) {
        file.u64_at(self.ring, OFF_HEAD)
            .store(self.head, Ordering::Release);
        self.published = self.head;
    }

    /// After publishing: `true` when the consumer sleeps and must be woken (its `waiting`
    /// flag was set, and is now cleared).
    pub(crate) fn take_waiting<L: RecordLayout>(&self, file: &Rings<L>) -> bool {
        // Pairs with the consumer's fence between setting `waiting` and checking the ring:
        // either it sees our head, or we see its flag.
        fence(Ordering::SeqCst);
        let waiting = file.u32_at(self.ring, OFF_WAITING);
        waiting.load(Ordering::Relaxed) != 0 && waiting.swap(0, Ordering::AcqRel) != 0
    }

    /// The producer index: records written.
    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    /// The ring's index in the file.
    pub(crate) fn ring(&self) -> u32 {
        self.ring
    }
}

/// The consumer's indices of one ring. Its own tail is the truth; the producer's head is
/// believed only when it is at most a ring ahead of the tail and never behind a head seen
/// before.
#[derive(Debug)]
pub(crate) struct ReadEnd {
    ring: u32,
    cap: u64,
    tail: u64,
    committed: u64,
    head_seen: u64,
}

impl ReadEnd {
    /// The consumer of ring `ring` of `file` (`None` when there is no such ring).
    pub(crate) fn new<L: RecordLayout>(file: &Rings<L>, ring: u32) -> Option<ReadEnd> {
        if ring >= file.rings {
            return None;
        }
        let tail = file.u64_at(ring, OFF_TAIL).load(Ordering::Acquire);
        Some(ReadEnd {
            ring,
            cap: u64::from(file.capacity),
            tail,
            committed: tail,
            head_seen: tail,
        })
    }

    /// Records published and not yet consumed (acquire: their octets are visible), or what
    /// is wrong with the head.
    pub(crate) fn unread<L: RecordLayout>(&mut self, file: &Rings<L>) -> Result<u64, &'static str> {
        let head = file.u64_at(self.ring, OFF_HEAD).load(Ordering::Acquire);
        let unread = head.wrapping_sub(self.tail);
        if unread > self.cap {
            return Err("head more than a ring ahead of the tail");
        }
        // tail ≤ head_seen ≤ tail + capacity, so a head that went back is one with fewer
        // unread records than were already seen.
        if unread < self.head_seen.wrapping_sub(self.tail) {
            return Err("head moved backwards");
        }
        self.head_seen = head;
        Ok(unread)
    }

    /// Whether the head differs from the tail (no check: a wrong head is news too, which the
    /// next [`ReadEnd::unread`] reports).
    pub(crate) fn has_news<L: RecordLayout>(&self, file: &Rings<L>) -> bool {
        file.u64_at(self.ring, OFF_HEAD).load(Ordering::Acquire) != self.tail
    }

    /// Copies the record at the tail into `dst`. Only when [`ReadEnd::unread`] said there is
    /// one: the producer wrote it before its release store of a head beyond it, which we
    /// read with acquire, and does not write it again before our tail passes it.
    pub(crate) fn read<L: RecordLayout>(&self, file: &Rings<L>, dst: &mut [u8]) {
        file.read_slot(self.ring, self.tail, dst);
    }

    /// Consumes the record at the tail (visible to the producer at [`ReadEnd::commit`]).
    pub(crate) fn advance(&mut self) {
        self.tail = self.tail.wrapping_add(1);
    }

    /// Gives the slots consumed back to the producer (release).
    pub(crate) fn commit<L: RecordLayout>(&mut self, file: &Rings<L>) {
        if self.tail != self.committed {
            file.u64_at(self.ring, OFF_TAIL)
                .store(self.tail, Ordering::Release);
            self.committed = self.tail;
        }
    }

    /// Sets or clears the `waiting` flag. Setting it is followed by a full fence: check the
    /// ring again after it, before sleeping.
    pub(crate) fn set_waiting<L: RecordLayout>(&self, file: &Rings<L>, on: bool) {
        file.u32_at(self.ring, OFF_WAITING)
            .store(u32::from(on), Ordering::SeqCst);
        if on {
            fence(Ordering::SeqCst);
        }
    }

    /// The consumer index: records consumed.
    pub(crate) fn tail(&self) -> u64 {
        self.tail
    }

    /// The ring's index in the file.
    pub(crate) fn ring(&self) -> u32 {
        self.ring
    }
}
