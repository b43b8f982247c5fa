//! The frames of a [`crate::io::ring::MemRing`], laid out as a UMEM: one anonymous mapping of
//! equal frames, each descriptor's octets at its frame's start plus the XDP headroom. A frame's
//! first touch then costs what it costs over AF_XDP — a page, and a TLB entry, per 4096-octet
//! frame — or, with transparent huge pages asked for, what it costs in a UMEM on huge pages
//! (docs/benchmarks.md, "The receive pipeline alone").
//!
//! A frame is reached only through its [`Frame`], one per frame and neither `Clone` nor `Copy`:
//! it passes from side to side as a UMEM frame's address passes through the fill and RX rings,
//! and writing takes it mutably, reading shared, so a write never meets a read of one frame.

use std::ffi::c_void;
use std::io;
use std::num::NonZeroUsize;
use std::ptr::NonNull;

/// Octets before each frame's data, as the kernel leaves `XDP_PACKET_HEADROOM` in a UMEM frame.
pub(crate) const HEADROOM: usize = 256;

/// A transparent huge page (x86-64).
const HUGE_PAGE: usize = 2 << 20;

/// Tells arenas apart, so that a frame is used only with its own.
static ARENAS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The one handle to one frame of an [`Arena`].
#[derive(Debug)]
pub(crate) struct Frame {
    arena: u64,
    index: u32,
}

/// `frames` frames of `frame` octets in one private anonymous mapping.
#[derive(Debug)]
pub(crate) struct Arena {
    map: NonNull<c_void>,
    map_len: usize,
    /// The first frame: the mapping's start, or its first huge-page boundary.
    base: NonNull<u8>,
    frame: usize,
    frames: usize,
    id: u64,
}

// SAFETY: the mapping is owned by the arena alone and freed only in `drop`; a frame's octets
// are reached only through `write` (with the frame's one handle, mutably) and `read` (with it
// shared), so no two threads touch one frame's octets but to read them.
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl Arena {
    /// Maps `frames` frames of `frame` octets (more than [`HEADROOM`]), page-aligned; with
    /// `huge_pages`, aligned to 2 MiB and advised onto transparent huge pages before any is
    /// touched (whether the kernel gave them: [`Arena::huge_page_octets`]). Returns the arena
    /// and the handle of each of its frames.
    pub(crate) fn new(
        frame: usize,
        frames: usize,
        huge_pages: bool,
    ) -> io::Result<(Arena, Vec<Frame>)> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
        if frame <= HEADROOM || frames == 0 || frames > u32::MAX as usize {
            return Err(bad("frame size or count out of range"));
        }
        let len = frame
            .checked_mul(frames)
            .ok_or_else(|| bad("arena too large"))?;
        let slack = if huge_pages { HUGE_PAGE } else { 0 };
        let map_len = len
            .checked_add(slack)
            .ok_or_else(|| bad("arena too large"))?;
        let size = NonZeroUsize::new(map_len).ok_or_else(|| bad("empty arena"))?;
        // SAFETY: a fresh private anonymous mapping at an address of the kernel's choosing
        // aliases nothing; it is unmapped once, in `drop`.
        let map = unsafe {
            nix::sys::mman::mmap_anonymous(
                None,
                size,
                nix::sys::mman::ProtFlags::PROT_READ | nix::sys::mman::ProtFlags::PROT_WRITE,
                nix::sys::mman::MapFlags::MAP_PRIVATE | nix::sys::mman::MapFlags::MAP_NORESERVE,
            )
        }
        .map_err(io::Error::from)?;
        let start = map.as_ptr().cast::<u8>();
        let skip = if huge_pages {
            start.align_offset(HUGE_PAGE)
        } else {
            0
        };
        let base = NonNull::new(start.wrapping_add(skip)).ok_or_else(|| bad("null mapping"))?;
        let arena = Arena {
            map,
            map_len,
            base,
            frame,
            frames,
            id: ARENAS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        };
        if huge_pages {
            // SAFETY: the range is inside the mapping just made (skip < HUGE_PAGE = slack);
            // advice changes no octet.
            unsafe {
                nix::sys::mman::madvise(base.cast(), len, nix::sys::mman::MmapAdvise::MADV_HUGEPAGE)
            }
            .map_err(io::Error::from)?;
        }
        let handles = (0..frames as u32)
            .map(|index| Frame {
                arena: arena.id,
                index,
            })
            .collect();
        Ok((arena, handles))
    }

    /// Frames in the arena.
    #[cfg(test)]
    pub(crate) fn frames(&self) -> usize {
        self.frames
    }

    /// Octets of data a frame holds (after its headroom).
    pub(crate) fn capacity(&self) -> usize {
        self.frame - HEADROOM
    }

    /// The data area of `f`, or `None` for another arena's frame.
    fn data(&self, f: &Frame) -> Option<*mut u8> {
        let i = f.index as usize;
        (f.arena == self.id && i < self.frames)
            .then(|| self.base.as_ptr().wrapping_add(i * self.frame + HEADROOM))
    }

    /// Copies `octets` (cut at [`Arena::capacity`]) into frame `f`; returns how many (0 for
    /// another arena's frame).
    pub(crate) fn write(&self, f: &mut Frame, octets: &[u8]) -> usize {
        let Some(dst) = self.data(f) else {
            return 0;
        };
        let n = octets.len().min(self.capacity());
        // SAFETY: `dst .. dst + n` lies inside the frame in the mapping (n ≤ capacity); the
        // frame's one handle is borrowed mutably here, so no slice `read` gave of it is alive
        // and no other write runs; `octets`, a shared slice, cannot be this frame's octets.
        unsafe { std::ptr::copy_nonoverlapping(octets.as_ptr(), dst, n) };
        n
    }

    /// The first `len` octets (cut at [`Arena::capacity`]) of frame `f`; empty for another
    /// arena's frame.
    pub(crate) fn read<'a>(&'a self, f: &'a Frame, len: usize) -> &'a [u8] {
        let Some(src) = self.data(f) else {
            return &[];
        };
        // SAFETY: inside the frame in the mapping, initialised (an anonymous mapping reads as
        // zeros until written), and not written while the slice lives: it borrows the frame's
        // one handle, which `write` needs mutably.
        unsafe { std::slice::from_raw_parts(src, len.min(self.capacity())) }
    }

    /// Octets of the arena the kernel backs with transparent huge pages now
    /// (`AnonHugePages` of its mapping in /proc/self/smaps), or `None` if unreadable.
    pub(crate) fn huge_page_octets(&self) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let at = self.base.as_ptr() as usize;
        let mut inside = false;
        for line in smaps.lines() {
            let head = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = head.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = lo <= at && at < hi;
                    continue;
                }
            }
            if let (true, Some(kb)) = (inside, line.strip_prefix("AnonHugePages:")) {
                let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().ok()?;
                return Some(kb * 1024);
            }
        }
        None
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no slice of it outlives the arena
        // (`read` borrows the arena).
        let _ = unsafe { nix::sys::mman::munmap(self.map, self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_hold_their_octets_apart() {
        let (a, mut frames) = Arena::new(4096, 8, false).unwrap();
        assert_eq!((a.frames(), a.capacity(), frames.len()), (8, 3840, 8));
        for (i, f) in frames.iter_mut().enumerate() {
            assert_eq!(a.write(f, &vec![i as u8 + 1; 3840]), 3840);
        }
        for (i, f) in frames.iter().enumerate() {
            assert!(
                a.read(f, 3840).iter().all(|&o| o == i as u8 + 1),
                "frame {i}"
            );
        }
        // Cut at the capacity; another arena's frame reaches nothing here.
        assert_eq!(a.write(&mut frames[0], &[9; 5000]), 3840);
        assert_eq!(a.read(&frames[0], 9000).len(), 3840);
        let (b, mut other) = Arena::new(4096, 8, false).unwrap();
        assert_eq!(a.write(&mut other[0], &[1]), 0);
        assert!(a.read(&other[0], 10).is_empty());
        assert_eq!(b.write(&mut other[0], &[1]), 1);
        assert!(Arena::new(256, 8, false).is_err());
        assert!(Arena::new(4096, 0, false).is_err());
    }

    #[test]
    fn huge_pages_are_asked_for_on_a_2_mib_boundary() {
        let (a, mut frames) = Arena::new(4096, 1024, true).unwrap();
        assert_eq!(a.base.as_ptr() as usize % HUGE_PAGE, 0);
        for f in &mut frames {
            a.write(f, &[1; 64]);
        }
        // Whether the kernel gave huge pages depends on its settings; the count is readable.
        assert!(a.huge_page_octets().is_some());
    }
}
