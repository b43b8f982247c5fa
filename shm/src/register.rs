//! Memory an application made itself and hands over to be registered (verbs' `ibv_reg_mr`
//! over its own buffer): the datapath's checks and seals before it maps it
//! (docs/consumer.md, "Registering memory the application has").

use crate::{sys, usable, Access, SharedMemory, ShmError};
use nix::fcntl::{fcntl, FcntlArg, OFlag, SealFlag};
use std::os::fd::OwnedFd;

/// Why memory an application hands over cannot be registered ([`SharedMemory::register`]).
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// The file takes no seals: not a memfd (a regular file, a pipe, a socket).
    #[error("not a memfd: the descriptor's file takes no seals (F_GET_SEALS: {0})")]
    NotMemfd(nix::Error),
    /// Not open for reading and writing: it could neither be sealed nor mapped writable.
    #[error("the memfd's descriptor is not open for reading and writing")]
    NotReadWrite,
    /// Sealed against writing: the datapath places into it.
    #[error("the memfd is sealed against writing (F_SEAL_WRITE or F_SEAL_FUTURE_WRITE)")]
    WriteSealed,
    /// Neither sealed against resizing nor open to being sealed: it could shrink under the
    /// mapping, and an access beyond its end is a SIGBUS.
    #[error(
        "the memfd may shrink or grow and takes no more seals: create it with \
         MFD_ALLOW_SEALING, or seal it with F_SEAL_SHRINK | F_SEAL_GROW"
    )]
    Unsealable,
    /// Shorter than the length to register.
    #[error("the memfd holds {size} octets, fewer than the {len} to register")]
    TooShort {
        /// The file's size.
        size: u64,
        /// The length asked for.
        len: u64,
    },
    /// The seals could not be added, the file not mapped or the mapping not guarded.
    #[error(transparent)]
    Map(#[from] ShmError),
}

impl SharedMemory {
    /// Registers the first `len` octets of a memfd an application made and hands over (the
    /// datapath's side of verbs' `ibv_reg_mr` over the application's own memory): checks
    /// that it is a memfd open for reading and writing and not sealed against writing, seals
    /// it against shrinking and growing unless it is already (the application may still add
    /// seals of its own), checks that it holds `len` octets, maps them read-write (populated,
    /// as [`SharedMemory::create`] does) and guards the mapping ([`SharedMemory::guard`]).
    /// Huge-page memfds (`MFD_HUGETLB`) are mapped in whole huge pages. The file stays the
    /// application's: dropping the mapping leaves its pages alone.
    pub fn register(fd: OwnedFd, len: u64) -> Result<SharedMemory, RegisterError> {
        let size = usable(len)?;
        let seals = fcntl(&fd, FcntlArg::F_GET_SEALS).map_err(RegisterError::NotMemfd)?;
        let seals = SealFlag::from_bits_truncate(seals);
        let mode = fcntl(&fd, FcntlArg::F_GETFL).map_err(sys("F_GETFL"))?;
        if OFlag::from_bits_truncate(mode) & OFlag::O_ACCMODE != OFlag::O_RDWR {
            return Err(RegisterError::NotReadWrite);
        }
        if seals.intersects(SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_FUTURE_WRITE) {
            return Err(RegisterError::WriteSealed);
        }
        // Too short is refused before the file is sealed: a refusal leaves it as it was.
        let short = |fd: &OwnedFd| -> Result<(), RegisterError> {
            let st = nix::sys::stat::fstat(fd).map_err(sys("fstat"))?;
            let size = u64::try_from(st.st_size).unwrap_or(0);
            if size < len {
                return Err(RegisterError::TooShort { size, len });
            }
            Ok(())
        };
        short(&fd)?;
        let want = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW;
        if !seals.contains(want) {
            if seals.contains(SealFlag::F_SEAL_SEAL) {
                return Err(RegisterError::Unsealable);
            }
            match fcntl(&fd, FcntlArg::F_ADD_SEALS(want)) {
                Ok(_) => {}
                Err(nix::Error::EPERM) => return Err(RegisterError::Unsealable),
                Err(err) => return Err(ShmError::Sys { what: "seal", err }.into()),
            }
        }
        // Sealed: the size read now holds for as long as the file lives (it may have shrunk
        // since the look above).
        short(&fd)?;
        let mut m = Self::map(fd, size, Access::ReadWrite)?;
        m.guard()?;
        Ok(m)
    }

    /// Maps the first `len` octets of a file this process holds, sealed or not: an
    /// application's own mapping of memory it registers with the datapath. The caller answers
    /// for the file's length while the mapping lives (an access beyond the file's end is a
    /// SIGBUS); nothing is checked but that the file holds `len` octets now.
    pub fn map_file(fd: OwnedFd, len: u64, access: Access) -> Result<SharedMemory, ShmError> {
        let size = usable(len)?;
        let st = nix::sys::stat::fstat(&fd).map_err(sys("fstat"))?;
        if u64::try_from(st.st_size).unwrap_or(0) < len {
            return Err(ShmError::Layout(
                "the file is shorter than the length to map",
            ));
        }
        Self::map(fd, size, access)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::memfd::{memfd_create, MFdFlags};
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileExt;

    fn memfd(flags: MFdFlags, len: i64) -> OwnedFd {
        let fd = memfd_create("app-memory", MFdFlags::MFD_CLOEXEC | flags).unwrap();
        nix::unistd::ftruncate(&fd, len).unwrap();
        fd
    }

    fn seals(fd: std::os::fd::BorrowedFd<'_>) -> SealFlag {
        SealFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GET_SEALS).unwrap())
    }

    /// An unsealed memfd that allows sealing is sealed against resizing (and nothing more),
    /// mapped and guarded; both sides see each other's octets, and dropping the registration
    /// leaves the application's pages alone.
    #[test]
    fn an_application_memfd_is_sealed_mapped_and_left_its_pages() {
        let app = memfd(MFdFlags::MFD_ALLOW_SEALING, 3 * 4096);
        assert_eq!(seals(app.as_fd()), SealFlag::empty());
        let file = std::fs::File::from(app.try_clone().unwrap());
        file.write_all_at(b"from the application", 100).unwrap();
        let m = SharedMemory::register(app.try_clone().unwrap(), 10_000).unwrap();
        assert_eq!(
            seals(app.as_fd()),
            SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW
        );
        assert_eq!(nix::unistd::ftruncate(&app, 4096), Err(nix::Error::EPERM));
        assert!(m.guard.is_some());
        assert_eq!(m.len(), 10_000);
        let mut b = [0u8; 20];
        assert!(m.read(100, &mut b));
        assert_eq!(&b, b"from the application");
        assert!(m.write(9_990, b"placed"));
        assert!(!m.write(9_995, b"placed"), "beyond the registered length");
        drop(m);
        let mut b = [0u8; 6];
        file.read_exact_at(&mut b, 9_990).unwrap();
        assert_eq!(&b, b"placed");
        // The application may still seal it further.
        fcntl(&app, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SEAL)).unwrap();
        // Already sealed against resizing (and against more seals): taken as it is.
        let again = SharedMemory::register(app, 12_288).unwrap();
        assert_eq!(again.len(), 12_288);
    }

    #[test]
    fn what_cannot_be_registered_is_refused_with_the_reason() {
        // No MFD_ALLOW_SEALING: the file is born with F_SEAL_SEAL.
        let fixed = memfd(MFdFlags::empty(), 4096);
        assert!(matches!(
            SharedMemory::register(fixed, 4096),
            Err(RegisterError::Unsealable)
        ));
        let short = memfd(MFdFlags::MFD_ALLOW_SEALING, 4096);
        let e = SharedMemory::register(short.try_clone().unwrap(), 4097).unwrap_err();
        assert_eq!(
            seals(short.as_fd()),
            SealFlag::empty(),
            "sealed though refused"
        );
        assert!(matches!(
            e,
            RegisterError::TooShort {
                size: 4096,
                len: 4097
            }
        ));
        assert_eq!(
            e.to_string(),
            "the memfd holds 4096 octets, fewer than the 4097 to register"
        );
        let (r, _w) = nix::unistd::pipe().unwrap();
        assert!(matches!(
            SharedMemory::register(r, 4096),
            Err(RegisterError::NotMemfd(nix::Error::EINVAL))
        ));
        let written = memfd(MFdFlags::MFD_ALLOW_SEALING, 4096);
        fcntl(
            &written,
            FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_FUTURE_WRITE),
        )
        .unwrap();
        assert!(matches!(
            SharedMemory::register(written, 4096),
            Err(RegisterError::WriteSealed)
        ));
        // The same memfd opened again read-only.
        let rw = memfd(MFdFlags::MFD_ALLOW_SEALING, 4096);
        let ro: OwnedFd = std::fs::File::open(format!("/proc/self/fd/{}", {
            use std::os::fd::AsRawFd;
            rw.as_raw_fd()
        }))
        .unwrap()
        .into();
        assert!(matches!(
            SharedMemory::register(ro, 4096),
            Err(RegisterError::NotReadWrite)
        ));
        assert_eq!(
            seals(rw.as_fd()),
            SealFlag::empty(),
            "sealed though refused"
        );
        for len in [0, u64::MAX] {
            let fd = memfd(MFdFlags::MFD_ALLOW_SEALING, 4096);
            assert!(matches!(
                SharedMemory::register(fd, len),
                Err(RegisterError::Map(ShmError::Length(l))) if l == len
            ));
        }
    }

    /// A regular file takes no seals, wherever it lies; one on tmpfs (not a memfd, but shmem)
    /// takes them only when made as a memfd with sealing allowed, so it is refused as
    /// unsealable.
    #[test]
    fn files_that_are_not_memfds_are_refused() {
        let dir = std::env::current_exe().unwrap();
        let dir = dir.parent().unwrap();
        let path = dir.join(format!("register-not-a-memfd-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let _ = std::fs::remove_file(&path);
        file.set_len(4096).unwrap();
        let on_tmpfs = nix::sys::statfs::fstatfs(&file).unwrap().filesystem_type()
            == nix::sys::statfs::TMPFS_MAGIC;
        let e = SharedMemory::register(file.into(), 4096).unwrap_err();
        if on_tmpfs {
            assert!(matches!(e, RegisterError::Unsealable), "{e}");
        } else {
            assert!(matches!(e, RegisterError::NotMemfd(_)), "{e}");
            assert_eq!(
                e.to_string(),
                "not a memfd: the descriptor's file takes no seals (F_GET_SEALS: EINVAL: \
                 Invalid argument)"
            );
        }
    }
}
