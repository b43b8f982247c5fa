//! Memory shared between the datapath and a consumer process: a memfd mapped `MAP_SHARED` by
//! both. Registered regions (the datapath writes, the consumer reads) and completion rings
//! (both write their own indices) are built on [`SharedMemory`]; the control protocol
//! (`mpa-ctl-proto`, which re-exports this crate as `mpa_ctl_proto::shm`), the protocol stack's
//! regions and the application's consumer all map memory through it, so it is a crate of its
//! own that depends on nothing of ours.
//!
//! The other process may write the octets at any time, so no Rust reference to them is ever
//! formed: only bounds-checked raw copies ([`SharedMemory::write`], [`SharedMemory::read`])
//! and, for the ring headers, atomics through [`SharedMemory::ptr_at`]. The creator seals
//! the memfd against shrinking and growing before mapping it (and against new seals): a
//! holder of the descriptor that `ftruncate`s it gets EPERM instead of turning the next
//! access into a SIGBUS. [`SharedMemory::open`] maps a received descriptor only when it
//! carries those seals and has the announced size. [`SharedMemory::register`] maps memory an
//! application made itself and hands over (verbs' `ibv_reg_mr` over its own buffer): a memfd
//! it seals against resizing first, if the application has not.
//!
//! The creator's drop frees the file's pages (a hole punched over all of it) after unmapping:
//! the other process may keep its descriptor and mapping as long as it likes, but it then
//! holds no page the creator populated; any page it touches again is a new, zeroed one
//! charged to it (docs/limits.md, "Shared memory after it is released").
//!
//! Seals cannot stop the other process from punching a hole into the file: on huge pages the
//! next access there may find the pool empty and fault. A mapping this process writes is
//! therefore guarded ([`SharedMemory::guard`], the `guard` module): such a fault replaces the
//! page with anonymous memory and is counted ([`SharedMemory::pages_lost`],
//! [`pages_lost_total`]) instead of killing the process (docs/limits.md, "A consumer's hole in
//! a huge-page region").
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use nix::fcntl::{fallocate, fcntl, FallocateFlags, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

mod guard;
mod register;

pub use guard::pages_lost_total;
pub use register::RegisterError;

/// Why shared memory could not be made or mapped.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// Length 0 or beyond the address space.
    #[error("shared memory length {0} is not usable (1 ..= {max})", max = isize::MAX)]
    Length(u64),
    /// A received descriptor is not what was announced.
    #[error("shared memory: {0}")]
    Layout(&'static str),
    /// The kernel refused.
    #[error("{what}: {err}")]
    Sys {
        /// The call.
        what: &'static str,
        /// The error.
        err: nix::Error,
    },
    /// Every entry of the SIGBUS guard's table is taken.
    #[error("shared memory: the SIGBUS guard holds {0} mappings already")]
    GuardFull(usize),
}

fn sys(what: &'static str) -> impl FnOnce(nix::Error) -> ShmError {
    move |err| ShmError::Sys { what, err }
}

/// Whether a mapping may be written through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `PROT_READ`: [`SharedMemory::write`] refuses.
    ReadOnly,
    /// `PROT_READ | PROT_WRITE`.
    ReadWrite,
}

/// One shared mapping of a memfd, unmapped on drop.
///
/// Aligned to 128 octets (two cache lines, the adjacent-line prefetcher's pair): every worker
/// reads `ptr` and `len` at each copy, and the value sits in an `Arc` made on the control
/// thread, whose other allocations (and the `Arc`'s own counts) must not share its line.
#[repr(align(128))]
pub struct SharedMemory {
    ptr: NonNull<u8>,
    /// Octets that may be accessed.
    len: usize,
    /// Octets mapped: `len` rounded up to whole pages (a hugetlb mapping is whole huge pages).
    map_len: usize,
    fd: OwnedFd,
    access: Access,
    /// On hugetlbfs.
    huge: bool,
    /// The file's page size: the huge page size on hugetlbfs.
    page: usize,
    /// Made by [`SharedMemory::create`]: its drop frees the file's pages.
    creator: bool,
    /// In the SIGBUS guard's table ([`SharedMemory::guard`]).
    guard: Option<guard::Guarded>,
}

/// Files this process created and has not dropped, and their octets.
static CREATED_FILES: AtomicU64 = AtomicU64::new(0);
static CREATED_BYTES: AtomicU64 = AtomicU64::new(0);

/// The shared memory this process created and still holds: (files, octets). Memory it
/// released is not counted, whoever still holds a descriptor to it: none of its pages are
/// left.
pub fn created_now() -> (u64, u64) {
    (
        CREATED_FILES.load(Ordering::Relaxed),
        CREATED_BYTES.load(Ordering::Relaxed),
    )
}

/// Octets of the file `fd` has pages for (st_blocks), whoever populated them.
pub fn resident_bytes(fd: BorrowedFd<'_>) -> Result<u64, ShmError> {
    let st = nix::sys::stat::fstat(fd).map_err(sys("fstat"))?;
    Ok(u64::try_from(st.st_blocks).unwrap_or(0) * 512)
}

// SAFETY: the mapping is owned by this value until drop and reached only through raw copies
// and atomics (never references), so several threads using it are no different from the
// other process doing so.
unsafe impl Send for SharedMemory {}
// SAFETY: as above: `&SharedMemory` allows only bounds-checked raw copies and raw pointers.
unsafe impl Sync for SharedMemory {}

impl std::fmt::Debug for SharedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMemory")
            .field("len", &self.len)
            .field("access", &self.access)
            .field("huge", &self.huge)
            .field("guard", &self.guard)
            .finish()
    }
}

fn usable(len: u64) -> Result<NonZeroUsize, ShmError> {
    usize::try_from(len)
        .ok()
        .filter(|&l| l <= isize::MAX as usize)
        .and_then(NonZeroUsize::new)
        .ok_or(ShmError::Length(len))
}

const SEALS: SealFlag = SealFlag::F_SEAL_SHRINK
    .union(SealFlag::F_SEAL_GROW)
    .union(SealFlag::F_SEAL_SEAL);

impl SharedMemory {
    /// `len` octets of zeroed memory in a new memfd named `name` (visible in /proc/PID/fd),
    /// sealed against resizing, mapped read-write. With `huge`, huge pages are asked for
    /// (`MFD_HUGETLB`; `len` must then be a multiple of the huge page size) and the call
    /// fails where the system has none to give: the caller falls back.
    pub fn create(name: &str, len: u64, huge: bool) -> Result<SharedMemory, ShmError> {
        let size = usable(len)?;
        let extra = if huge {
            MFdFlags::MFD_HUGETLB
        } else {
            MFdFlags::empty()
        };
        let fd = memfd_create(
            name,
            MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING | extra,
        )
        .map_err(sys("memfd_create"))?;
        nix::unistd::ftruncate(&fd, size.get() as i64).map_err(sys("ftruncate"))?;
        // The length is fixed from here on, for us and for every holder of the descriptor.
        fcntl(&fd, FcntlArg::F_ADD_SEALS(SEALS)).map_err(sys("seal"))?;
        let mut m = Self::map(fd, size, Access::ReadWrite)?;
        m.creator = true;
        CREATED_FILES.fetch_add(1, Ordering::Relaxed);
        CREATED_BYTES.fetch_add(m.len as u64, Ordering::Relaxed);
        Ok(m)
    }

    /// Maps a received memfd of `len` octets after checking that it has that size and is
    /// sealed against resizing (the consumer's side).
    pub fn open(fd: OwnedFd, len: u64, access: Access) -> Result<SharedMemory, ShmError> {
        let size = usable(len)?;
        let st = nix::sys::stat::fstat(&fd).map_err(sys("fstat"))?;
        if u64::try_from(st.st_size).ok() != Some(len) {
            return Err(ShmError::Layout(
                "file size differs from the announced length",
            ));
        }
        let seals = fcntl(&fd, FcntlArg::F_GET_SEALS).map_err(sys("F_GET_SEALS"))?;
        let want = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW;
        if !SealFlag::from_bits_truncate(seals).contains(want) {
            return Err(ShmError::Layout("file not sealed against resizing"));
        }
        Self::map(fd, size, access)
    }

    fn map(fd: OwnedFd, size: NonZeroUsize, access: Access) -> Result<SharedMemory, ShmError> {
        let prot = match access {
            Access::ReadOnly => ProtFlags::PROT_READ,
            Access::ReadWrite => ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
        };
        // A hugetlbfs file's block size is its huge page size, a memfd's on shmem the page
        // size: what the kernel maps and faults in, and what the guard replaces.
        let fs = nix::sys::statfs::fstatfs(&fd).map_err(sys("fstatfs"))?;
        let huge = fs.filesystem_type() == nix::sys::statfs::HUGETLBFS_MAGIC;
        let page = usize::try_from(fs.block_size())
            .ok()
            .filter(|p| p.is_power_of_two())
            .ok_or(ShmError::Layout(
                "the file system's block size is not a page size",
            ))?;
        let map_len = size
            .get()
            .checked_next_multiple_of(page)
            .filter(|&l| l <= isize::MAX as usize)
            .and_then(NonZeroUsize::new)
            .ok_or(ShmError::Length(size.get() as u64))?;
        // Populated now (every page allocated and mapped, writable where the mapping is):
        // otherwise the first record or placement into each page takes a page fault inside
        // a worker's burst (0.5–1 µs each, every flow of that worker waiting; 3.8 % of the
        // worker's samples in `mpa-bench pipeline`, rings and regions being fresh per
        // round), or inside a consumer's read. Registration pays it once, as RDMA memory
        // registration pins its pages.
        let flags = MapFlags::MAP_SHARED | MapFlags::MAP_POPULATE;
        // SAFETY: a fresh shared mapping of `size` octets of a memfd that has that size and
        // is sealed against shrinking (created so, or checked by `open`); nothing in this
        // process aliases it and no reference into it is ever formed.
        let ptr = unsafe { mmap(None, map_len, prot, flags, &fd, 0) }.map_err(sys("mmap"))?;
        Ok(SharedMemory {
            ptr: ptr.cast(),
            len: size.get(),
            map_len: map_len.get(),
            fd,
            access,
            huge,
            page,
            creator: false,
            guard: None,
        })
    }

    /// Puts this mapping under the SIGBUS guard until it is dropped: an access that faults
    /// because the file cannot back a page any more (a hole punched into a huge-page file
    /// while the pool is empty) finds anonymous zeroed memory in that page instead of killing
    /// the process, and is counted in [`SharedMemory::pages_lost`]. The first guarded mapping
    /// installs the process's SIGBUS handler; a SIGBUS outside every guarded mapping still
    /// ends the process as before. For mappings this process relies on touching whatever the
    /// other holder of the file does (docs/limits.md, "A consumer's hole in a huge-page
    /// region").
    pub fn guard(&mut self) -> Result<(), ShmError> {
        if self.guard.is_none() {
            let prot = match self.access {
                Access::ReadOnly => libc::PROT_READ,
                Access::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
            };
            self.guard = Some(guard::Guarded::add(
                self.ptr.as_ptr(),
                self.map_len,
                self.page,
                prot,
            )?);
        }
        Ok(())
    }

    /// Pages of a guarded mapping that faulted and were replaced by anonymous memory: what
    /// was placed in them since is this process's alone, the other holder of the file does
    /// not see it. 0 for a mapping not guarded.
    pub fn pages_lost(&self) -> u64 {
        self.guard.as_ref().map_or(0, guard::Guarded::lost)
    }

    /// The file's page size: the huge page size for a hugetlbfs file.
    pub fn page_size(&self) -> usize {
        self.page
    }

    /// Octets mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a mapping has at least one octet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Backed by huge pages.
    pub fn huge_pages(&self) -> bool {
        self.huge
    }

    /// The descriptor, to pass to the other process.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// `off` as an index when `off .. off + n` lies inside the mapping.
    fn span(&self, off: u64, n: usize) -> Option<usize> {
        let off = usize::try_from(off).ok()?;
        (off.checked_add(n)? <= self.len).then_some(off)
    }

    /// A raw pointer to the `n` octets at `off`, `None` when they are not all inside the
    /// mapping. The caller accesses them only atomically or by raw copies, and not after
    /// `self` is dropped.
    pub fn ptr_at(&self, off: usize, n: usize) -> Option<*mut u8> {
        let off = self.span(off as u64, n)?;
        // SAFETY: off + n <= len (checked), so the pointer stays inside the mapping.
        Some(unsafe { self.ptr.as_ptr().add(off) })
    }

    /// Copies `src` to offset `off`; `false` (nothing written) when it does not fit or the
    /// mapping is read-only.
    #[inline]
    pub fn write(&self, off: u64, src: &[u8]) -> bool {
        if self.access != Access::ReadWrite {
            return false;
        }
        let Some(off) = self.span(off, src.len()) else {
            return false;
        };
        // An ordinary copy: streaming stores are `write_pieces_streaming`, for long messages
        // into memory larger than the last-level cache (docs/features.md, "Streaming stores").
        // SAFETY: off + src.len() <= len (checked above) and the mapping is writable, so the
        // destination lies inside our live mapping; `src` is ordinary memory of this process
        // and cannot overlap it (no reference into the mapping is ever handed out).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
        };
        true
    }

    /// Asks for the lines of `off .. off + len` to be brought into the second-level cache
    /// without waiting for them: a hint for a write expected after other work (the next
    /// FPDU's checks), which changes no octet and never faults. The part of the range outside
    /// the mapping is left out; a read-only mapping asks for nothing. Into the second level,
    /// not the first: a first-level prefetch holds one of the core's few first-level miss
    /// buffers until its line arrives, and the kilobytes asked for at once filled them and
    /// made the worker wait on its own hints; the copy's own first-level requests then find
    /// the lines one level away (docs/investigations/2026-12-07-destination-hint-into-l2.md).
    #[inline]
    pub fn prefetch_for_later_write(&self, off: u64, len: usize) {
        if self.access != Access::ReadWrite {
            return;
        }
        let Ok(off) = usize::try_from(off) else {
            return;
        };
        if off >= self.len {
            return;
        }
        let len = len.min(self.len - off);
        prefetch_lines::<INTO_L2>(self.ptr.as_ptr().wrapping_add(off), len);
    }

    /// Copies `pieces`, one after the other, to offset `off`: one bounds check for all `len`
    /// octets (a message placed in its pieces between markers). `false` (nothing written) when
    /// `len` octets do not fit or the mapping is read-only; at most `len` octets are written
    /// even if the pieces hold more, and `false` then too.
    #[inline]
    pub fn write_pieces<'p>(
        &self,
        off: u64,
        len: usize,
        pieces: impl Iterator<Item = &'p [u8]>,
    ) -> bool {
        if self.access != Access::ReadWrite {
            return false;
        }
        let Some(off) = self.span(off, len) else {
            return false;
        };
        // Every destination line is asked for, for writing, before the first store: the reads
        // for ownership of a message's lines then overlap one another instead of queueing
        // behind the copy's stores (docs/features.md, "Streaming stores").
        prefetch_lines::<FOR_WRITE>(self.ptr.as_ptr().wrapping_add(off), len);
        let mut at = 0;
        for p in pieces {
            let n = p.len().min(len - at);
            // SAFETY: off + at + n <= off + len <= self.len (checked above) and the mapping is
            // writable; `p` is ordinary memory of this process, not part of the mapping.
            unsafe {
                std::ptr::copy_nonoverlapping(p.as_ptr(), self.ptr.as_ptr().add(off + at), n)
            };
            at += n;
            if n < p.len() {
                return false;
            }
        }
        at == len
    }

    /// [`SharedMemory::write_pieces`] with non-temporal (streaming) stores for every whole
    /// 64-octet line of the destination, ordinary stores for the partial lines at its ends. A
    /// line that straddles two pieces is put together in a line buffer first, so a message
    /// cut by markers and segments is streamed whole. Streaming skips the read for ownership
    /// of each destination line: it pays for long messages into memory larger than the
    /// last-level cache (docs/features.md, "Streaming stores"). The stores are weakly ordered: call
    /// [`settle_streamed_stores`] before anything tells another thread or process that the
    /// octets are there.
    #[inline]
    pub fn write_pieces_streaming<'p>(
        &self,
        off: u64,
        len: usize,
        pieces: impl Iterator<Item = &'p [u8]>,
    ) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            if self.access != Access::ReadWrite {
                return false;
            }
            let Some(off) = self.span(off, len) else {
                return false;
            };
            let mut pieces = Pieces {
                cur: &[],
                rest: pieces,
            };
            // SAFETY: off + len <= self.len (checked above) and the mapping is writable, so
            // the `len` octets at `off` lie inside our live mapping; the pieces are ordinary
            // memory of this process, not part of the mapping.
            unsafe { stream_pieces(self.ptr.as_ptr().add(off), len, &mut pieces) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        self.write_pieces(off, len, pieces)
    }

    /// Copies the octets at `off` into `dst`; `false` when out of bounds.
    pub fn read(&self, off: u64, dst: &mut [u8]) -> bool {
        let Some(off) = self.span(off, dst.len()) else {
            return false;
        };
        // SAFETY: bounds checked above; `dst` is our own memory, not part of the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        };
        true
    }
}

/// Makes every streaming store this thread issued ([`SharedMemory::write_pieces_streaming`])
/// globally visible before any later store: call it before publishing what they wrote (a
/// completion, a ring index, an answer to a control request).
#[inline]
pub fn settle_streamed_stores() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a store fence has no operands and SSE is part of every x86_64 CPU.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// The prefetch for lines about to be stored into (by the copy right after it).
/// `_MM_HINT_ET0` compiles to `prefetcht0` (a shared-state fetch; the store then upgrades the
/// line) unless the build enables the `prfchw` feature; a real `prefetchw` measured no better
/// in the receive pipeline (docs/investigations/2026-12-07-prefetches-in-the-receive-pipeline.md).
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::_MM_HINT_ET0 as FOR_WRITE;
/// The prefetch into the second-level cache (`prefetcht1`): see
/// [`SharedMemory::prefetch_for_later_write`].
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::_MM_HINT_T1 as INTO_L2;
#[cfg(not(target_arch = "x86_64"))]
const FOR_WRITE: i32 = 0;
#[cfg(not(target_arch = "x86_64"))]
const INTO_L2: i32 = 0;

/// Asks for the cache lines of `dst .. dst + len` without waiting, with `HINT` (`FOR_WRITE`,
/// `INTO_L2`); nothing where the CPU has no such hint.
#[inline(always)]
fn prefetch_lines<const HINT: i32>(dst: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut line = dst.wrapping_sub(dst as usize & 63);
        let end = dst.wrapping_add(len);
        while line < end {
            // SAFETY: a prefetch never faults and reads nothing the program sees; the lines
            // are those of the destination the caller checked.
            unsafe { std::arch::x86_64::_mm_prefetch::<HINT>(line.cast()) };
            line = line.wrapping_add(64);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (dst, len);
}

/// A message's pieces as one stream of octets.
#[cfg(target_arch = "x86_64")]
struct Pieces<'p, I> {
    /// What is left of the current piece.
    cur: &'p [u8],
    rest: I,
}

#[cfg(target_arch = "x86_64")]
impl<'p, I: Iterator<Item = &'p [u8]>> Pieces<'p, I> {
    /// The rest of the current piece, never empty; `None` when every piece is used up.
    #[inline]
    fn piece(&mut self) -> Option<&'p [u8]> {
        while self.cur.is_empty() {
            self.cur = self.rest.next()?;
        }
        Some(self.cur)
    }

    /// Copies the next octets, at most `n`, to `dst` with ordinary stores: how many there were.
    ///
    /// # Safety
    /// `dst .. dst + n` is writable and does not overlap any piece.
    #[inline]
    unsafe fn copy_to(&mut self, dst: *mut u8, n: usize) -> usize {
        let mut done = 0;
        while done < n {
            let Some(p) = self.piece() else { break };
            let k = p.len().min(n - done);
            // SAFETY: done + k <= n, inside the caller's range; `p` has k octets.
            unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), dst.add(done), k) };
            self.cur = &p[k..];
            done += k;
        }
        done
    }
}

/// One destination line put together from pieces, aligned as the line is.
#[cfg(target_arch = "x86_64")]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Writes `len` octets of `pieces` to `dst`: ordinary stores up to the first 64-octet boundary
/// and after the last, streaming stores (SSE2, part of every x86_64 CPU) for the whole lines
/// between. `true` when the pieces held exactly `len` octets; at most `len` are written.
///
/// # Safety
/// `dst .. dst + len` is writable memory that no piece overlaps.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_pieces<'p>(
    dst: *mut u8,
    len: usize,
    pieces: &mut Pieces<'p, impl Iterator<Item = &'p [u8]>>,
) -> bool {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    let head = dst.align_offset(64).min(len);
    // SAFETY: head <= len.
    let mut at = unsafe { pieces.copy_to(dst, head) };
    if at < head {
        return false;
    }
    let mut line = Line([0; 64]);
    while len - at >= 64 {
        let Some(p) = pieces.piece() else {
            return false;
        };
        let src = if p.len() >= 64 {
            pieces.cur = &p[64..];
            p.as_ptr()
        } else {
            // SAFETY: the line buffer has 64 octets and is ours.
            let k = unsafe { pieces.copy_to(line.0.as_mut_ptr(), 64) };
            if k < 64 {
                // SAFETY: at + k < len: inside the caller's range.
                unsafe { std::ptr::copy_nonoverlapping(line.0.as_ptr(), dst.add(at), k) };
                return false;
            }
            line.0.as_ptr()
        };
        // SAFETY: `src` has 64 readable octets (a piece's or the line buffer's); dst + at is
        // 64-aligned (at >= head, in steps of 64) with at + 64 <= len, inside the caller's
        // range; unaligned loads, aligned streaming stores.
        unsafe {
            let d = dst.add(at).cast::<__m128i>();
            let s = src.cast::<__m128i>();
            for i in 0..4 {
                _mm_stream_si128(d.add(i), _mm_loadu_si128(s.add(i)));
            }
        }
        at += 64;
    }
    // SAFETY: at <= len: the rest of the caller's range.
    at += unsafe { pieces.copy_to(dst.add(at), len - at) };
    at == len && pieces.piece().is_none()
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // Out of the guard's table first: a later mapping at the same address is not ours.
        drop(self.guard.take());
        // SAFETY: unmaps exactly the mapping `map` made, once; no reference into it exists
        // and the raw pointers handed out may not outlive `self`.
        let _ = unsafe { munmap(self.ptr.cast(), self.map_len) };
        if self.creator {
            // Every page goes, also from the other process's mapping: a descriptor it kept
            // holds nothing the creator populated.
            let punch = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
            if let Err(e) = fallocate(&self.fd, punch, 0, self.len as i64) {
                tracing::warn!(%e, len = self.len, "shared memory: pages not freed");
            }
            CREATED_FILES.fetch_sub(1, Ordering::Relaxed);
            CREATED_BYTES.fetch_sub(self.len as u64, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom};

    #[test]
    fn writes_are_visible_through_the_descriptor_and_bounded() {
        let m = SharedMemory::create("test-shm", 10_000, false).unwrap();
        assert_eq!(m.len(), 10_000);
        assert!(m.write(9_990, &[7u8; 10]));
        assert!(!m.write(9_991, &[7u8; 10]));
        assert!(!m.write(u64::MAX, &[1]));
        assert!(m.write(10_000, &[]));
        // Pieces: one bounds check for the whole; never past `len`.
        assert!(m.write_pieces(100, 6, [&b"ab"[..], b"cde", b"f"].into_iter()));
        assert!(!m.write_pieces(9_995, 6, [&b"abcdef"[..]].into_iter()));
        assert!(!m.write_pieces(200, 3, [&b"ab"[..], b"cd"].into_iter()));
        let mut p = [0u8; 8];
        assert!(m.read(99, &mut p));
        assert_eq!(&p, b"\0abcdef\0");
        assert!(m.read(199, &mut p[..5]));
        assert_eq!(&p[..5], b"\0abc\0");
        assert!(m.ptr_at(9_992, 8).is_some());
        assert!(m.ptr_at(9_993, 8).is_none());
        assert!(m.ptr_at(usize::MAX, 1).is_none());
        let mut f = std::fs::File::from(m.fd().try_clone_to_owned().unwrap());
        f.seek(SeekFrom::Start(9_989)).unwrap();
        let mut b = [0u8; 11];
        f.read_exact(&mut b).unwrap();
        assert_eq!(b, [0, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7]);
        let mut r = [0u8; 2];
        assert!(m.read(9_998, &mut r));
        assert_eq!(r, [7, 7]);
        assert!(!m.read(9_999, &mut r));
    }

    proptest::proptest! {
        /// Streaming writes change exactly what ordinary writes change, and say the same,
        /// at every destination alignment, for pieces of any sizes (markers' 508-octet gaps,
        /// segments, empty pieces), and when the pieces hold fewer or more than `len`.
        #[test]
        fn streaming_writes_equal_ordinary_writes(
            off in 0u64..200,
            cuts in proptest::collection::vec(0usize..300, 0..24),
            len_delta in -70i64..70,
            seed in proptest::prelude::any::<u8>(),
        ) {
            let src: Vec<u8> = (0..8000u32).map(|i| (i * 131 + seed as u32) as u8).collect();
            let mut pieces = Vec::new();
            let mut at = 0;
            for c in cuts {
                let end = (at + c).min(src.len());
                pieces.push(&src[at..end]);
                at = end;
            }
            let held = at as i64;
            let len = (held + len_delta).clamp(0, 6000) as usize;
            let ordinary = SharedMemory::create("test-ordinary", 8192, false).unwrap();
            let streamed = SharedMemory::create("test-streamed", 8192, false).unwrap();
            let a = ordinary.write_pieces(off, len, pieces.iter().copied());
            let b = streamed.write_pieces_streaming(off, len, pieces.iter().copied());
            settle_streamed_stores();
            proptest::prop_assert_eq!(a, b);
            let (mut x, mut y) = (vec![0u8; 8192], vec![0u8; 8192]);
            proptest::prop_assert!(ordinary.read(0, &mut x) && streamed.read(0, &mut y));
            if a {
                // Exactly the message, nothing else.
                proptest::prop_assert_eq!(&y[off as usize..][..len], &src[..len]);
            }
            // Where the pieces held more or fewer octets than `len`, each writes what it got
            // to before it noticed: the ordinary copy as much as fits, the streaming one may
            // stop short of it, never beyond it.
            for (i, (p, q)) in x.iter().zip(&y).enumerate() {
                proptest::prop_assert!(p == q || (!a && *q == 0), "octet {} differs", i);
            }
        }
    }

    #[test]
    fn streaming_writes_are_bounded_and_refused_read_only() {
        let m = SharedMemory::create("test-shm-stream", 10_000, false).unwrap();
        let src = [9u8; 2000];
        assert!(!m.write_pieces_streaming(9_000, 1_001, [&src[..1_001]].into_iter()));
        assert!(!m.write_pieces_streaming(u64::MAX, 1, [&src[..1]].into_iter()));
        assert!(m.write_pieces_streaming(8_000, 2_000, [&src[..700], &src[700..]].into_iter()));
        settle_streamed_stores();
        let mut r = [0u8; 2001];
        assert!(m.read(7_999, &mut r));
        assert_eq!(r[0], 0);
        assert!(r[1..].iter().all(|&b| b == 9));
        let ro = SharedMemory::open(
            m.fd().try_clone_to_owned().unwrap(),
            10_000,
            Access::ReadOnly,
        )
        .unwrap();
        assert!(!ro.write_pieces_streaming(0, 100, [&src[..100]].into_iter()));
    }

    #[test]
    fn open_checks_size_and_seals_and_read_only_refuses_writes() {
        let m = SharedMemory::create("test-shm-open", 8192, false).unwrap();
        assert!(m.write(100, b"hello"));
        let fd = || m.fd().try_clone_to_owned().unwrap();
        assert!(matches!(
            SharedMemory::open(fd(), 4096, Access::ReadOnly),
            Err(ShmError::Layout(_))
        ));
        let ro = SharedMemory::open(fd(), 8192, Access::ReadOnly).unwrap();
        let mut b = [0u8; 5];
        assert!(ro.read(100, &mut b));
        assert_eq!(&b, b"hello");
        assert!(!ro.write(0, b"x"), "read-only mapping written");
        let unsealed = memfd_create("unsealed", MFdFlags::MFD_CLOEXEC).unwrap();
        nix::unistd::ftruncate(&unsealed, 8192).unwrap();
        assert!(matches!(
            SharedMemory::open(unsealed, 8192, Access::ReadWrite),
            Err(ShmError::Layout(_))
        ));
        assert!(matches!(
            SharedMemory::create("zero", 0, false),
            Err(ShmError::Length(0))
        ));
    }
}
