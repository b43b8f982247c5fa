//! Registered memory: a memfd (huge pages when possible) mapped shared into the datapath;
//! the consumer maps the same descriptor (passed with SCM_RIGHTS) and sees every octet the
//! workers place.
//!
//! This is the second memory boundary of the crate, like the UMEM: the memory is shared with
//! another process that may read or write it at any time, so no Rust reference to it is ever
//! formed; the workers copy into it through raw pointers after a bounds check.
//!
//! The memfd is sealed against shrinking and growing before it is mapped (and against new
//! seals): a consumer that `ftruncate`s its descriptor gets EPERM instead of turning the
//! workers' next copy into a SIGBUS.

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

/// Huge page size tried for regions whose length is a multiple of it.
const HUGE_PAGE: u64 = 2 << 20;

/// Why a region could not be created.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    /// Length 0 or beyond the address space.
    #[error("region length {0} is not usable (1 ..= {max})", max = isize::MAX)]
    Length(u64),
    /// The kernel refused.
    #[error("{what}: {err}")]
    Sys {
        /// The call.
        what: &'static str,
        /// The error.
        err: nix::Error,
    },
}

/// The memory of one region.
pub struct RegionMemory {
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
    huge: bool,
}

// SAFETY: the mapping is plain shared memory owned by this value until drop; every access
// goes through bounds-checked raw copies (no references), so using it from several threads
// at once is no different from another process writing it.
unsafe impl Send for RegionMemory {}
// SAFETY: as above; `&RegionMemory` only allows bounds-checked raw copies.
unsafe impl Sync for RegionMemory {}

impl std::fmt::Debug for RegionMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionMemory")
            .field("len", &self.len)
            .field("huge", &self.huge)
            .finish()
    }
}

impl RegionMemory {
    /// Creates `len` octets of zeroed shared memory named `name` (visible in
    /// /proc/PID/fd). Huge pages are tried first when `len` is a multiple of 2 MiB.
    pub fn create(name: &str, len: u64) -> Result<RegionMemory, RegionError> {
        let size = usize::try_from(len)
            .ok()
            .filter(|&l| l > 0 && l <= isize::MAX as usize)
            .and_then(NonZeroUsize::new)
            .ok_or(RegionError::Length(len))?;
        let sys = |what| move |err| RegionError::Sys { what, err };
        if len.is_multiple_of(HUGE_PAGE) {
            if let Ok(m) = Self::map(name, size, MFdFlags::MFD_HUGETLB) {
                return Ok(m);
            }
        }
        Self::map(name, size, MFdFlags::empty()).map_err(sys("memfd region"))
    }

    fn map(name: &str, size: NonZeroUsize, extra: MFdFlags) -> nix::Result<RegionMemory> {
        let fd = memfd_create(
            name,
            MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING | extra,
        )?;
        nix::unistd::ftruncate(&fd, size.get() as i64)?;
        // The length is fixed from here on, for us and for every holder of the descriptor.
        fcntl(
            &fd,
            FcntlArg::F_ADD_SEALS(
                SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL,
            ),
        )?;
        // SAFETY: a fresh shared mapping of our own memfd, `size` octets that the ftruncate
        // above made exist; nothing else in this process aliases it. With huge pages the
        // length is a multiple of the page size (checked by the caller).
        let ptr = unsafe {
            mmap(
                None,
                size,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                &fd,
                0,
            )?
        };
        Ok(RegionMemory {
            ptr: ptr.cast(),
            len: size.get(),
            fd,
            huge: extra.contains(MFdFlags::MFD_HUGETLB),
        })
    }

    /// Octets.
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// Never true: regions have at least one octet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Backed by huge pages.
    pub fn huge_pages(&self) -> bool {
        self.huge
    }

    /// The descriptor to pass to the consumer.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn span(&self, off: u64, n: usize) -> Option<usize> {
        let off = usize::try_from(off).ok()?;
        (off.checked_add(n)? <= self.len).then_some(off)
    }

    /// Copies `src` to offset `off`; `false` (nothing written) when it does not fit.
    pub fn write(&self, off: u64, src: &[u8]) -> bool {
        let Some(off) = self.span(off, src.len()) else {
            return false;
        };
        // SAFETY: off + src.len() <= len (checked above), so the destination lies inside our
        // live mapping; `src` is ordinary memory of this process and cannot overlap it
        // (no reference into the mapping is ever handed out).
        // An ordinary copy: non-temporal (streaming) stores, which skip the read-for-ownership
        // of each destination line, took 300 ns per 1400-octet copy into a 16 MiB region
        // against 140 for this on the 2-vCPU VM of docs/environment.md (a fence per copy or
        // not), and would leave the octets out of cache for a consumer that reads at once.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
        };
        true
    }

    /// Copies octets at `off` into `dst`; `false` when out of bounds.
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

impl Drop for RegionMemory {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by `map` with this address and length and is
        // unmapped once, here; no reference into it exists.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};

    #[test]
    fn writes_are_visible_through_the_descriptor_and_bounded() {
        let m = RegionMemory::create("test-region", 10_000).unwrap();
        assert_eq!(m.len(), 10_000);
        assert!(m.write(9_990, &[7u8; 10]));
        assert!(!m.write(9_991, &[7u8; 10]));
        assert!(!m.write(u64::MAX, &[1]));
        assert!(m.write(10_000, &[]));
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

    /// Copies at every destination alignment within a line and lengths around line multiples:
    /// exactly the octets written change.
    #[test]
    fn copies_are_exact_at_every_alignment_and_length() {
        let m = RegionMemory::create("copy-region", 16_384).unwrap();
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 131 + 7) as u8).collect();
        let mut model = vec![0u8; 16_384];
        let lens = [0, 1, 63, 64, 65, 1023, 1024, 1025, 1448, 4096, 5000];
        for (i, &len) in lens.iter().enumerate() {
            for align in [0usize, 1, 15, 16, 33, 63] {
                let off = 64 * (i + 1) + align;
                let from = (i * 7 + align) % 64;
                let part = &src[from..from + len.min(src.len() - from)];
                assert!(m.write(off as u64, part));
                model[off..off + part.len()].copy_from_slice(part);
            }
        }
        let mut all = vec![0u8; 16_384];
        assert!(m.read(0, &mut all));
        assert!(all == model, "region differs from the model");
    }

    #[test]
    fn the_length_is_sealed_but_the_octets_stay_writable() {
        for len in [10_000, HUGE_PAGE] {
            let m = RegionMemory::create("sealed-region", len).unwrap();
            let fd = m.fd().try_clone_to_owned().unwrap();
            // What a consumer holding the descriptor might try.
            for l in [0, 4096, len as i64 - 1, len as i64 + 1, 2 * len as i64] {
                assert_eq!(
                    nix::unistd::ftruncate(&fd, l),
                    Err(nix::Error::EPERM),
                    "ftruncate to {l} (huge pages {})",
                    m.huge_pages()
                );
            }
            let seals = fcntl(&fd, FcntlArg::F_GET_SEALS).unwrap();
            let want = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL;
            assert_eq!(SealFlag::from_bits_truncate(seals) & want, want);
            assert_eq!(
                fcntl(&fd, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_FUTURE_WRITE)),
                Err(nix::Error::EPERM)
            );
            // Both sides still write and read every octet.
            let end = len - 3;
            assert!(m.write(end, &[1, 2, 3]));
            let mut f = std::fs::File::from(fd);
            f.seek(SeekFrom::Start(0)).unwrap();
            f.write_all(&[9, 8]).unwrap();
            let mut r = [0u8; 3];
            assert!(m.read(end, &mut r));
            assert_eq!(r, [1, 2, 3]);
            let mut r = [0u8; 2];
            assert!(m.read(0, &mut r));
            assert_eq!(r, [9, 8]);
            assert_eq!(f.metadata().unwrap().len(), len);
        }
    }

    #[test]
    fn zero_and_huge_lengths_are_refused() {
        assert!(matches!(
            RegionMemory::create("z", 0),
            Err(RegionError::Length(0))
        ));
        assert!(RegionMemory::create("h", u64::MAX).is_err());
    }
}
