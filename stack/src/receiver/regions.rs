//! The registered memory a receiver places into: the [`Regions`] trait the placement checks
//! and copies go through, the worker's live [`RegionTable`] (shared-memory regions) and
//! [`MemRegions`] (ordinary vectors, for tests and the in-memory pipeline).

#![forbid(unsafe_code)]

use crate::region::RegionMemory;
use mpa_ctl_proto::RegionInfo;
use std::collections::HashMap;
use std::sync::Arc;

/// The registered memory a receiver places into, as the placement checks see it: the
/// region's description (for the RFC 5040/5041 checks) and a bounds-checked write. The
/// worker's [`RegionTable`] is the live implementation; [`MemRegions`] keeps regions in
/// ordinary vectors for tests and the in-memory pipeline.
pub(crate) trait Regions {
    /// The description of the region `stag` names, if it is registered.
    fn info(&self, stag: u32) -> Option<&RegionInfo>;
    /// Copies `src` to `offset` of region `stag`; `false` (nothing written) when the region
    /// is gone or the range is outside it.
    fn write(&mut self, stag: u32, offset: u64, src: &[u8]) -> bool {
        self.write_pieces(stag, offset, src.len(), std::iter::once(src))
    }

    /// Copies `pieces` one after the other to `offset` of region `stag`, `len` octets in all:
    /// one region lookup and one bounds check for a whole message's payload (its pieces between
    /// markers and segments). `false` when the region is gone, the range is outside it (nothing
    /// written), or the pieces do not hold exactly `len` octets.
    fn write_pieces<'p>(
        &mut self,
        stag: u32,
        offset: u64,
        len: usize,
        pieces: impl Iterator<Item = &'p [u8]>,
    ) -> bool;
    /// Copies `dst.len()` octets from `offset` of region `stag` into `dst`; `false` (`dst`
    /// unspecified) when the region is gone or the range is outside it. The sender reads
    /// what it sends through this.
    fn read(&self, stag: u32, offset: u64, dst: &mut [u8]) -> bool;
    /// Asks for the lines of `len` octets at `offset` of region `stag` (into the second-level
    /// cache), without waiting: a placement expected there after other work. A hint only
    /// (nothing when the region is gone or the range outside it); its lines are left alone
    /// where messages of `len` octets take streaming stores.
    fn prefetch_for_later_write(&self, _stag: u32, _offset: u64, _len: usize) {}
}

/// One registered region as a worker sees it.
#[derive(Debug, Clone)]
pub struct Region {
    /// Its description.
    pub info: RegionInfo,
    /// Its memory.
    pub mem: Arc<RegionMemory>,
}

/// Messages shorter than this are placed with ordinary stores into every region: their
/// destination lines are mostly partial ones, which streaming stores cannot skip the read of
/// (docs/features.md, "Streaming stores").
pub const STREAMING_MIN_MESSAGE: usize = 1024;

/// The regions a worker knows (its own copy, updated by the control thread's commands).
#[derive(Debug, Default)]
pub struct RegionTable {
    /// Looked up at least once per placed FPDU: foldhash, not SipHash (see
    /// [`crate::flow_table::FlowHasher`]).
    map: HashMap<u32, Entry, crate::flow_table::FlowHasher>,
    /// Regions of at least this many octets take messages of [`STREAMING_MIN_MESSAGE`] or
    /// more with streaming stores; `None`: none do.
    streaming_from: Option<u64>,
    /// Streaming stores were issued since the last [`RegionTable::settle_stores`].
    unsettled: bool,
    /// Messages placed with streaming stores.
    streamed: u64,
}

#[derive(Debug)]
struct Entry {
    region: Region,
    streams: bool,
}

impl Entry {
    /// Whether a message of `len` octets goes into this region with streaming stores.
    #[inline]
    fn streams_message(&self, len: usize) -> bool {
        self.streams && len >= STREAMING_MIN_MESSAGE
    }
}

impl RegionTable {
    /// A table whose regions of at least `streaming_from` octets take messages of
    /// [`STREAMING_MIN_MESSAGE`] or more with streaming stores (`None`: ordinary stores only).
    /// Its owner calls [`RegionTable::settle_stores`] before it publishes anything placed.
    pub fn with_streaming_from(streaming_from: Option<u64>) -> RegionTable {
        RegionTable {
            streaming_from,
            ..RegionTable::default()
        }
    }

    /// Adds or replaces a region.
    pub fn insert(&mut self, region: Region) {
        let streams = self
            .streaming_from
            .is_some_and(|from| region.info.len >= from);
        self.map.insert(region.info.stag, Entry { region, streams });
    }

    /// Removes a region: later segments naming it get an invalid-STag Terminate. Octets
    /// already streamed into it are settled first.
    pub fn remove(&mut self, stag: u32) {
        self.settle_stores();
        self.map.remove(&stag);
    }

    /// The region of `stag`.
    pub fn get(&self, stag: u32) -> Option<&Region> {
        self.map.get(&stag).map(|e| &e.region)
    }

    /// Whether region `stag` takes long messages with streaming stores.
    pub fn streams(&self, stag: u32) -> bool {
        self.map.get(&stag).is_some_and(|e| e.streams)
    }

    /// Messages placed with streaming stores so far.
    pub fn streamed_messages(&self) -> u64 {
        self.streamed
    }

    /// Makes every octet placed so far visible to other threads and processes before
    /// anything this thread stores later (a completion, a ring index): a store fence when
    /// streaming stores were issued since the last call, nothing otherwise.
    #[inline]
    pub fn settle_stores(&mut self) {
        if self.unsettled {
            mpa_shm::settle_streamed_stores();
            self.unsettled = false;
        }
    }
}

impl Regions for RegionTable {
    fn info(&self, stag: u32) -> Option<&RegionInfo> {
        self.map.get(&stag).map(|e| &e.region.info)
    }

    #[inline]
    fn write_pieces<'p>(
        &mut self,
        stag: u32,
        offset: u64,
        len: usize,
        pieces: impl Iterator<Item = &'p [u8]>,
    ) -> bool {
        let Some(e) = self.map.get(&stag) else {
            return false;
        };
        if e.streams_message(len) {
            let placed = e.region.mem.write_pieces_streaming(offset, len, pieces);
            self.unsettled = true;
            self.streamed += 1;
            placed
        } else {
            e.region.mem.write_pieces(offset, len, pieces)
        }
    }

    fn read(&self, stag: u32, offset: u64, dst: &mut [u8]) -> bool {
        self.map
            .get(&stag)
            .is_some_and(|e| e.region.mem.read(offset, dst))
    }

    #[inline]
    fn prefetch_for_later_write(&self, stag: u32, offset: u64, len: usize) {
        if let Some(e) = self.map.get(&stag) {
            if !e.streams_message(len) {
                e.region.mem.prefetch_for_later_write(offset, len);
            }
        }
    }
}

/// Regions in ordinary memory: for tests, fuzzing and the in-memory pipeline.
#[derive(Debug, Default, Clone)]
pub(crate) struct MemRegions {
    map: HashMap<u32, (RegionInfo, Vec<u8>)>,
    /// Every placement hint asked for, in order: (STag, offset, octets).
    #[cfg(test)]
    hints: std::cell::RefCell<Vec<(u32, u64, usize)>>,
}

impl MemRegions {
    /// Adds a zero-filled region described by `info` (`info.len` octets).
    pub(crate) fn insert(&mut self, info: RegionInfo) {
        let len = usize::try_from(info.len).unwrap_or(0);
        self.map.insert(info.stag, (info, vec![0; len]));
    }

    /// Removes a region.
    #[cfg(test)]
    pub(crate) fn remove(&mut self, stag: u32) {
        self.map.remove(&stag);
    }

    /// The octets of region `stag`.
    #[cfg(test)]
    pub(crate) fn bytes(&self, stag: u32) -> Option<&[u8]> {
        self.map.get(&stag).map(|(_, b)| b.as_slice())
    }

    /// The placement hints asked for so far (see [`Regions::prefetch_for_later_write`]).
    #[cfg(test)]
    pub(crate) fn hints(&self) -> Vec<(u32, u64, usize)> {
        self.hints.borrow().clone()
    }
}

impl Regions for MemRegions {
    fn info(&self, stag: u32) -> Option<&RegionInfo> {
        self.map.get(&stag).map(|(i, _)| i)
    }

    fn write_pieces<'p>(
        &mut self,
        stag: u32,
        offset: u64,
        len: usize,
        pieces: impl Iterator<Item = &'p [u8]>,
    ) -> bool {
        let Some((_, mem)) = self.map.get_mut(&stag) else {
            return false;
        };
        let Some(dst) = usize::try_from(offset)
            .ok()
            .and_then(|start| Some(start..start.checked_add(len)?))
            .and_then(|r| mem.get_mut(r))
        else {
            return false;
        };
        let mut at = 0;
        for p in pieces {
            let n = p.len().min(len - at);
            dst[at..at + n].copy_from_slice(&p[..n]);
            at += n;
            if n < p.len() {
                return false;
            }
        }
        at == len
    }

    fn read(&self, stag: u32, offset: u64, dst: &mut [u8]) -> bool {
        let Some((_, mem)) = self.map.get(&stag) else {
            return false;
        };
        let Ok(start) = usize::try_from(offset) else {
            return false;
        };
        match start
            .checked_add(dst.len())
            .and_then(|end| mem.get(start..end))
        {
            Some(src) => {
                dst.copy_from_slice(src);
                true
            }
            None => false,
        }
    }

    #[cfg(test)]
    fn prefetch_for_later_write(&self, stag: u32, offset: u64, len: usize) {
        self.hints.borrow_mut().push((stag, offset, len));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(stag: u32, len: u64) -> Region {
        Region {
            info: RegionInfo {
                stag,
                len,
                pd: 1,
                remote_write: true,
                remote_read: false,
                huge_pages: false,
            },
            mem: Arc::new(RegionMemory::create("regions-test", len).unwrap()),
        }
    }

    /// Regions from the threshold on stream long messages, smaller ones do not; either way
    /// every message lands octet for octet, in pieces or whole, long or short.
    #[test]
    fn large_regions_stream_long_messages_and_every_message_lands_exactly() {
        let mut t = RegionTable::with_streaming_from(Some(16_384));
        t.insert(region(1, 8192));
        t.insert(region(2, 16_384));
        assert!(!t.streams(1) && t.streams(2) && !t.streams(3));
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 37 + 11) as u8).collect();
        for stag in [1, 2] {
            let pieces = src[..3000].chunks(508);
            assert!(t.write_pieces(stag, 5, 3000, pieces));
            assert!(t.write(stag, 4000, &src[..100]));
            // Past the end of the small region: refused, nothing written.
            assert_eq!(
                t.write_pieces(stag, 8000, 1200, src[..1200].chunks(508)),
                stag == 2
            );
            t.settle_stores();
            let mut got = vec![0u8; 3000];
            assert!(t.read(stag, 5, &mut got));
            assert_eq!(got, &src[..3000]);
            assert!(t.read(stag, 4000, &mut got[..100]));
            assert_eq!(&got[..100], &src[..100]);
        }
        // Region 2's 3000-octet and 1200-octet messages; not the 100-octet one.
        assert_eq!(t.streamed_messages(), 2);
        t.remove(2);
        assert!(!t.streams(2) && t.get(2).is_none());
        // No threshold: nothing streams.
        let mut t = RegionTable::with_streaming_from(None);
        t.insert(region(1, 1 << 20));
        assert!(!t.streams(1));
    }
}
