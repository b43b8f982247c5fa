//! Memory shared between the datapath and a consumer process: a memfd mapped `MAP_SHARED` by
//! both. Registered regions (the datapath writes, the consumer reads) and completion rings
//! (both write their own indices) are built on [`SharedMemory`].
//!
//! The other process may write the octets at any time, so no Rust reference to them is ever
//! formed: only bounds-checked raw copies ([`SharedMemory::write`], [`SharedMemory::read`])
//! and, for the ring headers, atomics through [`SharedMemory::ptr_at`]. The creator seals
//! the memfd against shrinking and growing before mapping it (and against new seals): a
//! holder of the descriptor that `ftruncate`s it gets EPERM instead of turning the next
//! access into a SIGBUS. [`SharedMemory::open`] maps a received descriptor only when it
//! carries those seals and has the announced size.
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

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
    len: usize,
    fd: OwnedFd,
    access: Access,
    huge: bool,
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
        m.huge = huge;
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
        let ptr = unsafe { mmap(None, size, prot, flags, &fd, 0) }.map_err(sys("mmap"))?;
        Ok(SharedMemory {
            ptr: ptr.cast(),
            len: size.get(),
            fd,
            access,
            huge: false,
        })
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
        // An ordinary copy: non-temporal (streaming) stores, which skip the read-for-ownership
        // of each destination line, gain little into a region that fits the last-level cache,
        // lose on the short pieces between markers, and leave the octets out of cache for a
        // consumer that reads at once; they pay only for long contiguous messages into
        // regions larger than the cache (docs/investigations/2026-12-03-non-temporal-stores.md).
        // SAFETY: off + src.len() <= len (checked above) and the mapping is writable, so the
        // destination lies inside our live mapping; `src` is ordinary memory of this process
        // and cannot overlap it (no reference into the mapping is ever handed out).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
        };
        true
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

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `map` made, once; no reference into it exists
        // and the raw pointers handed out may not outlive `self`.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
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
