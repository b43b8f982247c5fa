//! Lock-free single-producer/single-consumer rings in shared memory: completions (worker →
//! application, this module) and posts (application → worker, [`post`]). Each is one ring per
//! (worker, subscription), all rings of a subscription in one sealed memfd that the datapath
//! creates and passes to the application with SCM_RIGHTS (with an eventfd to wake the side
//! that sleeps). Both kinds share the file layout, the index discipline and the wake-up
//! handshake below (the shared code is in `spsc`); they differ in magic, record codec, and
//! what a full ring means.
//!
//! Layout of the file: `rings` rings back to back, each [`ring_bytes`]`(capacity)` octets
//! (a whole number of pages). A ring is a header of three 128-octet lines — static fields,
//! then the producer's, then the consumer's, so that neither side's writes pull the other's
//! line (128: the adjacent-line prefetcher pairs 64-octet lines) — and `capacity` records of
//! [`RECORD_LEN`] octets:
//!
//! | offset | field | written by |
//! |---|---|---|
//! | 0 | magic u32 (`"MPAC"`, `"MPAQ"`), layout version u32, capacity u32, ring index u32, rings u32 | creator, once |
//! | 128 | head u64: records published (producer index) | producer (release) |
//! | 136 | lost u64: records that did not fit, in all (completions; 0 in post queues) | producer (release) |
//! | 256 | tail u64: records consumed (consumer index) | consumer (release) |
//! | 264 | waiting u32: 1 while the consumer sleeps or is about to | consumer (set), producer (clear) |
//!
//! Indices are free-running u64 (slot = index & (capacity − 1)); all their arithmetic wraps.
//! A reader believes a head only when it is at most a ring ahead of its own tail and not
//! behind a head it saw before ([`RingError::Corrupt`] otherwise); a producer believes a tail
//! only within a ring behind its own head (the ring looks full otherwise).
//!
//! A completion record (little endian, [`MAGIC`] `"MPAC"`, [`LAYOUT_VERSION`] 2):
//! `flow_id u64 | offset u64 | len u64 | lost u64 | stag u32 | msn u32 | invalidate_stag u32 |
//! kind u8 | flags u8 (1: msn, 2: invalidate_stag) | status u8 | 0 | wr_id u64 | 8 × 0`, where `lost` is the ring's lost
//! count when the record was written: a reader that sees it rise knows exactly how many
//! records were lost right before this one. Kinds 0–5 are the [`CompletionKind`]s (Write
//! placed, Read Response placed, Send arrived, Write sent, Send sent, post refused); kind
//! 0x80 is a [`Record::Moved`] marker (a flow came from another worker: its earlier
//! completions are in ring `stag` before position `offset`).
//!
//! Kind 5, a post of the shared-memory post queue ([`post`]) refused, nothing of it queued:
//!
//! | field | holds |
//! |---|---|
//! | flow_id | the post's connection (as the post named it) |
//! | offset | the post's wr_id |
//! | len | the [`crate::RefusalCode`]: 1 malformed, 2 unknown flow, 3 wrong domain, 4 unknown region, 5 out of bounds, 6 invalid, 7 busy, 8 closed |
//! | stag | the post's local region |
//! | flags | 0 |
//!
//! It is written into the ring of the worker that refused the post, of the subscription
//! whose queue carried it.
//!
//! The completion producer (a worker) never waits: a record that does not fit is counted in
//! `lost` and dropped. It publishes `head` (then `lost`) once per burst, then — after a full
//! fence — looks at `waiting` and, only when it is set, clears it and writes the eventfd. The
//! consumer sets `waiting`, fences, and checks the rings again before it sleeps, so one of
//! the two always sees the other (no lost wake-up). The post queue's roles are the other way
//! round, with back-pressure instead of loss ([`post`]).
//!
//! This module (with `spsc`) is the ring memory boundary of the crate: the only `unsafe`
//! outside the region mapping, each block with its `// SAFETY:` line. Shared memory is never
//! reached through a Rust reference except the header's atomics, which both sides only ever
//! access atomically.
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use crate::{Completion, CompletionKind, CompletionStatus};
use mpa_shm::ShmError;
use spsc::{ring_bytes_of, ReadEnd, RecordLayout, Rings, WriteEnd, OFF_LOST};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
#[cfg(test)]
use {spsc::OFF_HEAD, spsc::OFF_TAIL, std::sync::atomic::AtomicU64};

/// Octets of one completion record.
pub const RECORD_LEN: usize = 64;
/// Octets of a ring's header (three 128-octet lines).
pub const HEADER_LEN: usize = 384;
/// `"MPAC"`.
pub const MAGIC: u32 = u32::from_le_bytes(*b"MPAC");
/// Version of the completion ring layout.
pub const LAYOUT_VERSION: u32 = 2;
/// Smallest capacity (records).
pub const MIN_CAPACITY: u32 = 2;
/// Largest capacity (records): 48 MiB per ring.
pub const MAX_CAPACITY: u32 = 1 << 20;
/// Most rings in one file (workers).
pub const MAX_RINGS: u32 = 1024;

const KIND_MOVED: u8 = 0x80;

/// Octets one ring of `capacity` records takes in the file.
pub fn ring_bytes(capacity: u32) -> usize {
    ring_bytes_of(RECORD_LEN, capacity)
}

/// Polls of the rings between two `sched_yield`s of a side that spins on them (a worker with
/// `--spin`, a consumer busy-polling): both sides of a ring yield alike, so that two spinners
/// sharing a core still hand it over.
pub const SPIN_YIELD_EVERY: u32 = 32;

/// Why a ring file could not be made, mapped or read.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// Capacity not a power of two in range, or a ring count out of range.
    #[error("completion rings: {rings} rings of {capacity} records (capacity a power of two in {MIN_CAPACITY} ..= {MAX_CAPACITY}, 1 ..= {MAX_RINGS} rings)")]
    Shape {
        /// Rings asked for.
        rings: u32,
        /// Records per ring asked for.
        capacity: u32,
    },
    /// The kernel refused.
    #[error("completion rings: {what}: {err}")]
    Sys {
        /// The call.
        what: &'static str,
        /// The error.
        err: nix::Error,
    },
    /// The file is not what the datapath announced (size, seals, header).
    #[error("completion rings: {0}")]
    Layout(&'static str),
    /// A ring's indices or a record make no sense: the shared memory was written by someone
    /// else than its producer.
    #[error("completion ring {ring}: {what}")]
    Corrupt {
        /// The ring.
        ring: u32,
        /// What was wrong.
        what: &'static str,
    },
}

fn sys(what: &'static str) -> impl FnOnce(nix::Error) -> RingError {
    move |err| RingError::Sys { what, err }
}

/// What one slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// A completion.
    Completion(Completion),
    /// Flow `flow_id` moved to this ring's worker: its earlier completions are in ring
    /// `from_ring` before index `position`, and must be read first. Never shown to users.
    Moved {
        /// The flow.
        flow_id: u64,
        /// The ring it came from.
        from_ring: u32,
        /// The producer index of `from_ring` after the flow's last record there.
        position: u64,
    },
}

/// The octets of `r` in a slot, with the ring's lost count `lost` (see the module).
pub fn encode_record(r: &Record, lost: u64) -> [u8; RECORD_LEN] {
    let mut b = [0u8; RECORD_LEN];
    let (flow_id, offset, len, stag, msn, inv, kind, flags, status, wr_id) = match *r {
        Record::Completion(c) => (
            c.flow_id,
            c.offset,
            c.len,
            c.stag,
            c.msn.unwrap_or(0),
            c.invalidate_stag.unwrap_or(0),
            match c.kind {
                CompletionKind::WritePlaced => 0,
                CompletionKind::ReadResponsePlaced => 1,
                CompletionKind::SendArrived => 2,
                CompletionKind::WriteSent => 3,
                CompletionKind::SendSent => 4,
                CompletionKind::PostRefused => 5,
            },
            u8::from(c.msn.is_some()) | (u8::from(c.invalidate_stag.is_some()) << 1),
            c.status.code(),
            c.wr_id,
        ),
        Record::Moved {
            flow_id,
            from_ring,
            position,
        } => (flow_id, position, 0, from_ring, 0, 0, KIND_MOVED, 0, 0, 0),
    };
    b[0..8].copy_from_slice(&flow_id.to_le_bytes());
    b[8..16].copy_from_slice(&offset.to_le_bytes());
    b[16..24].copy_from_slice(&len.to_le_bytes());
    b[24..32].copy_from_slice(&lost.to_le_bytes());
    b[32..36].copy_from_slice(&stag.to_le_bytes());
    b[36..40].copy_from_slice(&msn.to_le_bytes());
    b[40..44].copy_from_slice(&inv.to_le_bytes());
    b[44] = kind;
    b[45] = flags;
    b[46] = status;
    b[48..56].copy_from_slice(&wr_id.to_le_bytes());
    b
}

/// A slot's record and lost count; `None` for an unknown kind or flags, or non-zero padding.
pub fn decode_record(b: &[u8; RECORD_LEN]) -> Option<(Record, u64)> {
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
    let (kind, flags) = (b[44], b[45]);
    if flags & !3 != 0 || b[47] != 0 || b[56..64] != [0; 8] {
        return None;
    }
    let status = CompletionStatus::from_code(b[46])?;
    let lost = u64_at(24);
    let kind = match kind {
        0 => CompletionKind::WritePlaced,
        1 => CompletionKind::ReadResponsePlaced,
        2 => CompletionKind::SendArrived,
        3 => CompletionKind::WriteSent,
        4 => CompletionKind::SendSent,
        5 => CompletionKind::PostRefused,
        KIND_MOVED if flags == 0 && status == CompletionStatus::Success => {
            return Some((
                Record::Moved {
                    flow_id: u64_at(0),
                    from_ring: u32_at(32),
                    position: u64_at(8),
                },
                lost,
            ))
        }
        _ => return None,
    };
    let c = Completion {
        flow_id: u64_at(0),
        kind,
        stag: u32_at(32),
        offset: u64_at(8),
        len: u64_at(16),
        msn: (flags & 1 != 0).then(|| u32_at(36)),
        invalidate_stag: (flags & 2 != 0).then(|| u32_at(40)),
        wr_id: u64_at(48),
        status,
    };
    Some((Record::Completion(c), lost))
}

/// The completion rings' kind of ring file.
pub(crate) enum Completions {}

impl RecordLayout for Completions {
    const MAGIC: u32 = MAGIC;
    const VERSION: u32 = LAYOUT_VERSION;
    const LEN: usize = RECORD_LEN;
}

/// The shared mapping of a subscription's ring file.
pub struct RingFile(Rings<Completions>);

impl std::fmt::Debug for RingFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingFile")
            .field("rings", &self.0.rings())
            .field("capacity", &self.0.capacity())
            .finish()
    }
}

impl From<ShmError> for RingError {
    fn from(e: ShmError) -> RingError {
        match e {
            ShmError::Sys { what, err } => RingError::Sys { what, err },
            ShmError::Layout(what) => RingError::Layout(what),
            ShmError::Length(_) => RingError::Layout("ring file length not usable"),
            ShmError::GuardFull(_) => RingError::Layout("the SIGBUS guard is full"),
        }
    }
}

impl RingFile {
    /// Creates a sealed memfd named `name` holding `rings` empty rings of `capacity` records
    /// (the datapath's side).
    pub fn create(name: &str, rings: u32, capacity: u32) -> Result<RingFile, RingError> {
        Self::create_at(name, rings, capacity, 0)
    }

    /// [`RingFile::create`] with every ring's indices starting at `start` (tests of index
    /// wrap-around).
    pub fn create_at(
        name: &str,
        rings: u32,
        capacity: u32,
        start: u64,
    ) -> Result<RingFile, RingError> {
        Rings::create_at(name, rings, capacity, start).map(RingFile)
    }

    /// Maps a ring file received from the datapath, checking that it is sealed, of the size
    /// `rings` × `capacity` make, and that every header says so (the consumer's side).
    pub fn open(fd: OwnedFd, rings: u32, capacity: u32) -> Result<RingFile, RingError> {
        Rings::open(fd, rings, capacity).map(RingFile)
    }

    /// The descriptor to pass to the consumer.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.0.fd()
    }

    /// Rings in the file.
    pub fn rings(&self) -> u32 {
        self.0.rings()
    }

    /// Records per ring.
    pub fn capacity(&self) -> u32 {
        self.0.capacity()
    }

    /// Octets mapped.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    #[cfg(test)]
    fn u64_at(&self, ring: u32, off: usize) -> &AtomicU64 {
        self.0.u64_at(ring, off)
    }
}

pub mod post;
mod producer;
mod reader;
mod spsc;
pub use producer::Producer;
pub use reader::{drain_eventfd, Next, Reader, RingSet, Waker};

#[cfg(test)]
mod tests;
