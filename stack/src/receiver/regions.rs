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
}

/// One registered region as a worker sees it.
#[derive(Debug, Clone)]
pub struct Region {
    /// Its description.
    pub info: RegionInfo,
    /// Its memory.
    pub mem: Arc<RegionMemory>,
}

/// The regions a worker knows (its own copy, updated by the control thread's commands).
#[derive(Debug, Default)]
pub struct RegionTable {
    /// Looked up at least once per placed FPDU: foldhash, not SipHash (see
    /// [`crate::flow_table::FlowHasher`]).
    map: HashMap<u32, Region, crate::flow_table::FlowHasher>,
}

impl RegionTable {
    /// Adds or replaces a region.
    pub fn insert(&mut self, r: Region) {
        self.map.insert(r.info.stag, r);
    }

    /// Removes a region: later segments naming it get an invalid-STag Terminate.
    pub fn remove(&mut self, stag: u32) {
        self.map.remove(&stag);
    }

    /// The region of `stag`.
    pub fn get(&self, stag: u32) -> Option<&Region> {
        self.map.get(&stag)
    }
}

impl Regions for RegionTable {
    fn info(&self, stag: u32) -> Option<&RegionInfo> {
        self.map.get(&stag).map(|r| &r.info)
    }

    #[inline]
    fn write_pieces<'p>(
        &mut self,
        stag: u32,
        offset: u64,
        len: usize,
        pieces: impl Iterator<Item = &'p [u8]>,
    ) -> bool {
        self.map
            .get(&stag)
            .is_some_and(|r| r.mem.write_pieces(offset, len, pieces))
    }

    fn read(&self, stag: u32, offset: u64, dst: &mut [u8]) -> bool {
        self.map.get(&stag).is_some_and(|r| r.mem.read(offset, dst))
    }
}

/// Regions in ordinary memory: for tests, fuzzing and the in-memory pipeline.
#[derive(Debug, Default, Clone)]
pub(crate) struct MemRegions {
    map: HashMap<u32, (RegionInfo, Vec<u8>)>,
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
}
