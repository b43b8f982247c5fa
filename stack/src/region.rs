//! Registered memory: a memfd (huge pages when possible) mapped shared into the datapath;
//! the consumer maps the same descriptor (passed with SCM_RIGHTS) and sees every octet the
//! workers place.
//!
//! The mapping itself is [`mpa_shm::SharedMemory`] (shared with the completion
//! rings and the consumer's side): memory another process may read or write at any time, so
//! no Rust reference to it is ever formed; the workers copy into it through bounds-checked
//! raw copies. The memfd is sealed against shrinking and growing before it is mapped (and
//! against new seals): a consumer that `ftruncate`s its descriptor gets EPERM instead of
//! turning the workers' next copy into a SIGBUS. A hole it punches cannot be sealed against;
//! the mapping is guarded instead ([`SharedMemory::guard`]): a page the kernel can no longer
//! back is replaced and counted ([`RegionMemory::pages_lost`]) rather than killing the
//! datapath (docs/limits.md, "A consumer's hole in a huge-page region").
#![forbid(unsafe_code)]

use mpa_shm::{RegisterError, SharedMemory, ShmError};
use std::os::fd::{BorrowedFd, OwnedFd};

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
    /// The SIGBUS guard's table is full.
    #[error("the SIGBUS guard holds {0} mappings already")]
    GuardFull(usize),
}

impl RegionError {
    fn of(len: u64) -> impl FnOnce(ShmError) -> RegionError {
        move |e| match e {
            ShmError::Sys { what, err } => RegionError::Sys { what, err },
            ShmError::GuardFull(n) => RegionError::GuardFull(n),
            ShmError::Length(_) | ShmError::Layout(_) => RegionError::Length(len),
        }
    }
}

/// The memory of one region.
#[derive(Debug)]
pub struct RegionMemory {
    mem: SharedMemory,
    /// The application's own memory ([`RegionMemory::register`]), not created here.
    registered: bool,
}

impl RegionMemory {
    /// Creates `len` octets of zeroed shared memory named `name` (visible in
    /// /proc/PID/fd), guarded against SIGBUS. Huge pages are tried first when `len` is a
    /// multiple of 2 MiB.
    pub fn create(name: &str, len: u64) -> Result<RegionMemory, RegionError> {
        let huge = (len.is_multiple_of(HUGE_PAGE) && len > 0)
            .then(|| SharedMemory::create(name, len, true).ok())
            .flatten();
        let mut mem = match huge {
            Some(mem) => mem,
            None => SharedMemory::create(name, len, false).map_err(RegionError::of(len))?,
        };
        mem.guard().map_err(RegionError::of(len))?;
        Ok(RegionMemory {
            mem,
            registered: false,
        })
    }

    /// Registers the first `len` octets of a memfd the application made and handed over
    /// (see [`SharedMemory::register`]): sealed against resizing, mapped and guarded. Its
    /// pages stay the application's: nothing is freed when the region goes.
    pub fn register(fd: OwnedFd, len: u64) -> Result<RegionMemory, RegisterError> {
        Ok(RegionMemory {
            mem: SharedMemory::register(fd, len)?,
            registered: true,
        })
    }

    /// The application's own memory, registered rather than created.
    pub fn registered(&self) -> bool {
        self.registered
    }

    /// Pages the consumer took away (a hole punched while the huge-page pool was empty) and
    /// that anonymous memory replaced here: what was placed in them since, the consumer does
    /// not see (docs/limits.md, "A consumer's hole in a huge-page region").
    pub fn pages_lost(&self) -> u64 {
        self.mem.pages_lost()
    }

    /// Octets in each of those pages: the huge page size on huge pages.
    pub fn page_size(&self) -> usize {
        self.mem.page_size()
    }

    /// Octets.
    pub fn len(&self) -> u64 {
        self.mem.len() as u64
    }

    /// Never true: regions have at least one octet.
    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }

    /// Backed by huge pages.
    pub fn huge_pages(&self) -> bool {
        self.mem.huge_pages()
    }

    /// The descriptor to pass to the consumer.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.mem.fd()
    }

    /// Copies `src` to offset `off`; `false` (nothing written) when it does not fit.
    #[inline]
    pub fn write(&self, off: u64, src: &[u8]) -> bool {
        self.mem.write(off, src)
    }

    /// Copies `pieces` one after the other to `off`, `len` octets in all, with one bounds
    /// check (see [`SharedMemory::write_pieces`]).
    #[inline]
    pub fn write_pieces<'p>(
        &self,
        off: u64,
        len: usize,
        pieces: impl Iterator<Item = &'p [u8]>,
    ) -> bool {
        self.mem.write_pieces(off, len, pieces)
    }

    /// Asks for the lines of `off .. off + len` for writing without waiting (see
    /// [`SharedMemory::prefetch_for_later_write`]): no octet changes.
    #[inline]
    pub fn prefetch_for_later_write(&self, off: u64, len: usize) {
        self.mem.prefetch_for_later_write(off, len)
    }

    /// As [`RegionMemory::write_pieces`] with streaming stores for the destination's whole
    /// lines (see [`SharedMemory::write_pieces_streaming`]); visible to others only after
    /// [`mpa_shm::settle_streamed_stores`].
    #[inline]
    pub fn write_pieces_streaming<'p>(
        &self,
        off: u64,
        len: usize,
        pieces: impl Iterator<Item = &'p [u8]>,
    ) -> bool {
        self.mem.write_pieces_streaming(off, len, pieces)
    }

    /// Copies octets at `off` into `dst`; `false` when out of bounds.
    pub fn read(&self, off: u64, dst: &mut [u8]) -> bool {
        self.mem.read(off, dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    use std::io::{Seek, SeekFrom, Write};

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
