//! FPDUs placed ahead of the in-order stream: sorted by sequence number, disjoint, bounded;
//! each completes when the stream reaches it.

use super::placement::SegmentPlan;
use super::MAX_PLACED_AHEAD;
use mpa::seq::SeqNumber;
use std::collections::VecDeque;

/// Entries further than this above the in-order point are not taken (the receive window is
/// far smaller; anything beyond is behind us, i.e. already passed).
const HORIZON: u32 = 1 << 30;

/// An FPDU placed out of order, waiting for the in-order stream to reach it.
#[derive(Debug, Clone, Copy)]
pub(super) struct PlacedAhead {
    /// Sequence number of its first wire octet.
    pub(crate) start: SeqNumber,
    /// Its wire length (markers included).
    pub(crate) wire_len: usize,
    /// What it was, for its in-order completion.
    pub(crate) plan: SegmentPlan,
    /// CRC32c of its ULPDU octets (for the flow digest, joined in order; 0 without one).
    pub(crate) ulpdu_crc: u32,
    /// ULPDU octets.
    pub(crate) ulpdu_len: usize,
}

/// Where a located FPDU would go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    /// Free: insert at this index.
    Free(usize),
    /// The same FPDU is already placed (a retransmission).
    Duplicate,
    /// It overlaps a placed FPDU, or lies outside the horizon: not placed.
    Overlaps,
}

/// The placed-ahead FPDUs and the in-order point they are measured from.
#[derive(Debug)]
pub(super) struct AheadList {
    entries: VecDeque<PlacedAhead>,
    /// Sequence number of the next octet the in-order stream consumes.
    rx_seq: SeqNumber,
}

impl AheadList {
    pub(crate) fn new(start: SeqNumber) -> Self {
        AheadList {
            entries: VecDeque::new(),
            rx_seq: start,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Offset of `seq` above the in-order point.
    fn offset(&self, seq: SeqNumber) -> u32 {
        seq.distance_from(self.rx_seq)
    }

    /// The in-order stream consumed `n` octets.
    pub(crate) fn advance(&mut self, n: usize) {
        self.rx_seq = self.rx_seq + n;
    }

    /// Offset of the first entry when it starts within the next `len` in-order octets. Entries
    /// the stream already passed are dropped first (they cannot be reached any more).
    pub(crate) fn next_within(&mut self, len: usize) -> Option<usize> {
        while let Some(p) = self.entries.front() {
            if self.offset(p.start) >= HORIZON {
                self.entries.pop_front();
            } else {
                break;
            }
        }
        self.entries
            .front()
            .map(|p| self.offset(p.start) as usize)
            .filter(|&d| d < len)
    }

    pub(crate) fn pop_front(&mut self) -> Option<PlacedAhead> {
        self.entries.pop_front()
    }

    /// Where an FPDU of `wire_len` octets at `seq` would be inserted.
    pub(crate) fn slot_for(&self, seq: SeqNumber, wire_len: usize) -> Slot {
        let key = self.offset(seq);
        if key >= HORIZON || self.entries.len() >= MAX_PLACED_AHEAD {
            return Slot::Overlaps;
        }
        let end = key as usize + wire_len;
        // Most FPDUs land above every placed one (the stream behind a hole): no search
        // over entries that each take a cache line of their own.
        let at = match self.entries.back() {
            Some(b) if self.offset(b.start) < key => self.entries.len(),
            _ => self.entries.partition_point(|p| self.offset(p.start) < key),
        };
        if let Some(p) = self.entries.get(at) {
            if p.start == seq && p.wire_len == wire_len {
                return Slot::Duplicate;
            }
            if (self.offset(p.start) as usize) < end {
                return Slot::Overlaps;
            }
        }
        if at > 0 {
            let p = &self.entries[at - 1];
            if self.offset(p.start) as usize + p.wire_len > key as usize {
                return Slot::Overlaps;
            }
        }
        Slot::Free(at)
    }

    /// Inserts at a slot [`Self::slot_for`] returned (nothing changed in between).
    pub(crate) fn insert(&mut self, at: usize, p: PlacedAhead) {
        self.entries.insert(at, p);
    }
}
