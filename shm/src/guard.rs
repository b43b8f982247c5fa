//! The SIGBUS guard: a page of a guarded mapping that the kernel can no longer back is replaced
//! by anonymous zeroed memory, instead of the access killing the process.
//!
//! The other process holds a writable descriptor of every file mapped here. On a huge-page
//! (hugetlbfs) file a hole it punches (`fallocate(FALLOC_FL_PUNCH_HOLE)`, or `madvise(MADV_REMOVE)`
//! on its own mapping) gives the page and its reservation back to the pool; our next access
//! there asks the pool for a new page, and when the pool is empty the kernel answers with
//! SIGBUS. The same holds for any fault the file cannot serve. Seals cannot forbid a hole, so
//! the access is made safe instead, as Wayland compositors guard the `wl_shm` pools their
//! clients may shrink: a process-wide SIGBUS handler looks the faulting address up in a table
//! of guarded mappings and, when it lies in one, maps anonymous memory over the faulting page
//! (`MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS`, the whole huge page for a hugetlb mapping: its
//! VMA splits only at huge-page boundaries) and returns, so the access runs again and succeeds.
//! From then on that page is ours alone: what we store there the other process never sees,
//! and what it stores there we never see — it punched the hole (docs/limits.md, "A consumer's
//! hole in a huge-page region"). Each replaced page is counted, per mapping and in all.
//!
//! A SIGBUS anywhere else is not ours to swallow: the handler puts back the disposition it
//! found when it was installed (the default, or the Rust runtime's) and returns, so the fault
//! happens again and ends the process as it would have without the guard; a SIGBUS sent by a
//! process (`kill`) is raised again for that disposition.
//!
//! The handler does only what is async-signal-safe: atomics on a fixed table, `mmap`,
//! `sigaction` and `raise` — no allocation, no lock, no log. The table is fixed at
//! [`CAPACITY`] mappings; each entry is published under a sequence count, so the handler never
//! reads an entry half written.

use crate::ShmError;
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};

/// Mappings guarded at once: the datapath's regions (4,096 at most) with room to spare.
pub(crate) const CAPACITY: usize = 8192;

/// One guarded mapping.
struct Slot {
    /// Owned by a [`Guarded`] from its making to its drop.
    taken: AtomicBool,
    /// Odd while the fields below are being written.
    seq: AtomicU64,
    /// First octet, page-aligned.
    start: AtomicUsize,
    /// Octets, a multiple of `page`; 0 for a free slot.
    len: AtomicUsize,
    /// The page size of the mapping (a power of two).
    page: AtomicUsize,
    /// The mapping's protection (`PROT_*`), given to a replacement page.
    prot: AtomicUsize,
    /// One bit per page: set once the page is being, or has been, replaced.
    replaced: AtomicPtr<AtomicU64>,
    /// Pages replaced.
    lost: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            taken: AtomicBool::new(false),
            seq: AtomicU64::new(0),
            start: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            page: AtomicUsize::new(0),
            prot: AtomicUsize::new(0),
            replaced: AtomicPtr::new(std::ptr::null_mut()),
            lost: AtomicU64::new(0),
        }
    }
}

static SLOTS: [Slot; CAPACITY] = [const { Slot::new() }; CAPACITY];

/// Pages replaced in every guarded mapping since the process started.
static LOST: AtomicU64 = AtomicU64::new(0);

/// The SIGBUS disposition found when the handler was installed, written once before it.
struct OldAction(UnsafeCell<MaybeUninit<libc::sigaction>>);

// SAFETY: written once, inside `INSTALL`, before the handler that reads it is installed;
// only read afterwards.
unsafe impl Sync for OldAction {}

static OLD: OldAction = OldAction(UnsafeCell::new(MaybeUninit::zeroed()));
static INSTALL: Once = Once::new();
/// The errno of a failed installation (0: installed).
static INSTALLED: OnceLock<i32> = OnceLock::new();

/// Pages replaced by anonymous memory in every guarded mapping so far.
pub fn pages_lost_total() -> u64 {
    LOST.load(Ordering::Relaxed)
}

/// Installs the handler, once per process.
fn install() -> Result<(), ShmError> {
    INSTALL.call_once(|| {
        let errno = {
            // SAFETY: reads the current disposition into `OLD`, which nothing reads before the
            // handler is installed below (and the handler cannot run before that).
            let r = unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), OLD.0.get().cast()) };
            if r != 0 {
                nix::errno::Errno::last_raw()
            } else {
                // SAFETY: a zeroed sigaction is a valid value of the C struct; its fields are
                // set below and the handler has the signature SA_SIGINFO calls for.
                let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
                new.sa_sigaction = on_sigbus as *const () as usize;
                new.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                // SAFETY: `new.sa_mask` is ours to fill; `sigemptyset` only writes it.
                unsafe { libc::sigemptyset(&mut new.sa_mask) };
                // SAFETY: installs a handler that only does what is async-signal-safe.
                let r = unsafe { libc::sigaction(libc::SIGBUS, &new, std::ptr::null_mut()) };
                if r != 0 {
                    nix::errno::Errno::last_raw()
                } else {
                    0
                }
            }
        };
        let _ = INSTALLED.set(errno);
    });
    match INSTALLED.get().copied().unwrap_or(0) {
        0 => Ok(()),
        e => Err(ShmError::Sys {
            what: "sigaction(SIGBUS)",
            err: nix::errno::Errno::from_raw(e),
        }),
    }
}

/// A mapping in the table; taken out on drop, which must come before the mapping's `munmap`.
pub(crate) struct Guarded {
    slot: usize,
    /// The bits `Slot::replaced` points to: freed only after the slot is emptied.
    _replaced: Box<[AtomicU64]>,
}

impl std::fmt::Debug for Guarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded")
            .field("slot", &self.slot)
            .field("lost", &self.lost())
            .finish()
    }
}

impl Guarded {
    /// Guards the `len` octets at `start`, a mapping of pages of `page` octets with protection
    /// `prot`, until the returned value is dropped. The caller keeps the mapping alive as long.
    pub(crate) fn add(
        start: *mut u8,
        len: usize,
        page: usize,
        prot: libc::c_int,
    ) -> Result<Guarded, ShmError> {
        let start = start as usize;
        if !page.is_power_of_two()
            || !start.is_multiple_of(page)
            || len == 0
            || !len.is_multiple_of(page)
        {
            return Err(ShmError::Layout(
                "a guarded mapping must be whole pages, page-aligned",
            ));
        }
        install()?;
        let words = (len / page).div_ceil(64);
        let mut bits = Vec::new();
        bits.try_reserve_exact(words)
            .map_err(|_| ShmError::Layout("no memory for the guard's page map"))?;
        bits.extend((0..words).map(|_| AtomicU64::new(0)));
        let mut bits = bits.into_boxed_slice();
        let slot = SLOTS
            .iter()
            .position(|s| {
                s.taken
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            })
            .ok_or(ShmError::GuardFull(CAPACITY))?;
        let s = &SLOTS[slot];
        s.seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        s.start.store(start, Ordering::Relaxed);
        s.len.store(len, Ordering::Relaxed);
        s.page.store(page, Ordering::Relaxed);
        s.prot.store(prot as usize, Ordering::Relaxed);
        s.replaced.store(bits.as_mut_ptr(), Ordering::Relaxed);
        s.lost.store(0, Ordering::Relaxed);
        s.seq.fetch_add(1, Ordering::Release);
        Ok(Guarded {
            slot,
            _replaced: bits,
        })
    }

    /// Pages of this mapping replaced so far.
    pub(crate) fn lost(&self) -> u64 {
        SLOTS[self.slot].lost.load(Ordering::Relaxed)
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        let s = &SLOTS[self.slot];
        s.seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        s.len.store(0, Ordering::Relaxed);
        s.replaced.store(std::ptr::null_mut(), Ordering::Relaxed);
        s.seq.fetch_add(1, Ordering::Release);
        s.taken.store(false, Ordering::Release);
    }
}

/// What the handler reads of a slot whose mapping holds the faulting address.
struct Hit {
    slot: &'static Slot,
    start: usize,
    page: usize,
    prot: libc::c_int,
    replaced: *const AtomicU64,
}

/// The guarded mapping holding `addr`, read consistently (a slot being written is skipped:
/// it is being made or dropped, and neither is accessed meanwhile).
fn find(addr: usize) -> Option<Hit> {
    for slot in &SLOTS {
        for _ in 0..4 {
            let seq = slot.seq.load(Ordering::Acquire);
            if seq % 2 == 1 {
                break;
            }
            let start = slot.start.load(Ordering::Relaxed);
            let len = slot.len.load(Ordering::Relaxed);
            let page = slot.page.load(Ordering::Relaxed);
            let prot = slot.prot.load(Ordering::Relaxed) as libc::c_int;
            let replaced = slot.replaced.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if slot.seq.load(Ordering::Relaxed) != seq {
                continue;
            }
            if len != 0 && !replaced.is_null() && addr >= start && addr - start < len {
                return Some(Hit {
                    slot,
                    start,
                    page,
                    prot,
                    replaced,
                });
            }
            break;
        }
    }
    None
}

/// Replaces the page of a guarded mapping that holds `addr`: whether the access may be
/// retried (the page is replaced, or another thread is replacing it now).
fn replace(addr: usize) -> bool {
    let Some(hit) = find(addr) else {
        return false;
    };
    let base = addr & !(hit.page - 1);
    let index = (base - hit.start) / hit.page;
    // SAFETY: index < len / page (addr is inside the mapping), so the word is inside the bits
    // allocated for it, which live until the slot is emptied (the mapping is not being
    // dropped while it is accessed).
    let word = unsafe { &*hit.replaced.add(index / 64) };
    let bit = 1u64 << (index % 64);
    if word.fetch_or(bit, Ordering::AcqRel) & bit != 0 {
        // Another thread faulted on the same page and maps it: the access runs again, and
        // faults again until that mapping is in place.
        return true;
    }
    let flags = libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    // SAFETY: replaces exactly one page of a mapping this process owns and guards (aligned to
    // its page size, inside it); nothing holds a reference into it, only raw copies do.
    let got = unsafe { libc::mmap(base as *mut libc::c_void, hit.page, hit.prot, flags, -1, 0) };
    if got as usize != base {
        word.fetch_and(!bit, Ordering::AcqRel);
        return false;
    }
    hit.slot.lost.fetch_add(1, Ordering::Relaxed);
    LOST.fetch_add(1, Ordering::Relaxed);
    true
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo; si_addr is the faulting
    // address for a fault (and meaningless, but readable, for a signal a process sent).
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    if code == libc::BUS_ADRERR && replace(addr) {
        return;
    }
    // Not ours: the disposition found at installation takes over.
    // SAFETY: `OLD` was filled before this handler was installed; sigaction is
    // async-signal-safe.
    unsafe { libc::sigaction(libc::SIGBUS, OLD.0.get().cast(), std::ptr::null_mut()) };
    // A fault (BUS_ADRALN, BUS_ADRERR, BUS_OBJERR, BUS_MCEERR_AR) happens again when the
    // instruction runs again; anything else, such as a SIGBUS sent by `kill`, is raised again.
    if !(1..=4).contains(&code) {
        // SAFETY: raise is async-signal-safe; the signal stays pending until this handler
        // returns, then meets the disposition just put back.
        unsafe { libc::raise(libc::SIGBUS) };
    }
}

#[cfg(test)]
mod tests {
    use crate::{Access, SharedMemory};
    use nix::sys::memfd::{memfd_create, MFdFlags};
    use std::num::NonZeroUsize;
    use std::os::unix::process::ExitStatusExt;

    const PAGE: usize = 4096;

    /// A guarded read-write mapping of `pages` pages of an unsealed memfd, and a second
    /// descriptor of the file: shrinking the file through it takes pages from under the
    /// mapping, so an access there faults as one into a punched huge page does when the pool
    /// is empty (both are BUS_ADRERR).
    fn guarded(pages: usize) -> (SharedMemory, std::os::fd::OwnedFd) {
        let fd = memfd_create("guarded", MFdFlags::MFD_CLOEXEC).unwrap();
        nix::unistd::ftruncate(&fd, (pages * PAGE) as i64).unwrap();
        let other = fd.try_clone().unwrap();
        let size = NonZeroUsize::new(pages * PAGE).unwrap();
        let mut m = SharedMemory::map(fd, size, Access::ReadWrite).unwrap();
        m.guard().unwrap();
        (m, other)
    }

    #[test]
    fn a_page_the_file_cannot_back_is_replaced_counted_and_kept() {
        let (m, other) = guarded(3);
        assert_eq!(m.page_size(), PAGE);
        assert!(m.write(10, b"shared"));
        let before = super::pages_lost_total();
        // Pages 1 and 2 leave the file.
        nix::unistd::ftruncate(&other, PAGE as i64).unwrap();
        assert_eq!(m.pages_lost(), 0);
        assert!(m.write(PAGE as u64 + 100, b"after the hole"));
        assert_eq!(m.pages_lost(), 1);
        let mut b = [0u8; 14];
        assert!(m.read(PAGE as u64 + 100, &mut b));
        assert_eq!(&b, b"after the hole");
        // The rest of the replaced page reads zeros; the same page does not fault again.
        let mut z = [1u8; 100];
        assert!(m.read(PAGE as u64, &mut z));
        assert_eq!(z, [0u8; 100]);
        assert!(m.write(2 * PAGE as u64 - 1, b"x"));
        assert_eq!(m.pages_lost(), 1);
        // A read faults too, and page 2 is replaced on its own.
        let mut r = [9u8; 4];
        assert!(m.read(2 * PAGE as u64, &mut r));
        assert_eq!(r, [0; 4]);
        assert_eq!(m.pages_lost(), 2);
        assert!(super::pages_lost_total() >= before + 2);
        // Page 0 is still the file's.
        let mut f = [0u8; 6];
        let file = std::fs::File::from(other);
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut f, 10).unwrap();
        assert_eq!(&f, b"shared");
    }

    /// Threads that fault on the same page at once replace it once: no thread's octets are
    /// lost to a second replacement.
    #[test]
    fn threads_faulting_on_one_page_replace_it_once() {
        let (m, other) = guarded(2);
        nix::unistd::ftruncate(&other, PAGE as i64).unwrap();
        let m = std::sync::Arc::new(m);
        let start = std::sync::Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8u8)
            .map(|t| {
                let (m, start) = (m.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    for i in 0..64u64 {
                        assert!(m.write(PAGE as u64 + u64::from(t) * 64 + i, &[t + 1]));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(m.pages_lost(), 1);
        let mut b = [0u8; 512];
        assert!(m.read(PAGE as u64, &mut b));
        for (i, &v) in b.iter().enumerate() {
            assert_eq!(v, (i / 64) as u8 + 1, "octet {i}");
        }
    }

    /// The child process's part of the tests below, chosen by this variable.
    const CHILD: &str = "MPA_SHM_GUARD_CHILD";

    /// Runs test `name` of this binary again in a child process with [`CHILD`] set to `what`.
    fn in_child(name: &str, what: &str) -> std::process::ExitStatus {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--test-threads=1", "--nocapture"])
            .env(CHILD, what)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
    }

    /// In the child: the handler installed, no core dump for the death that is expected.
    fn child_setup() -> (SharedMemory, std::os::fd::OwnedFd) {
        // SAFETY: prctl(PR_SET_DUMPABLE, 0) only changes this process's dumpable flag.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
        guarded(1)
    }

    /// A SIGBUS from memory no guarded mapping holds still ends the process (through the
    /// disposition found at installation: here the Rust runtime's, which puts the default
    /// back), and one a process sends too.
    #[test]
    fn a_sigbus_outside_every_guarded_mapping_still_kills() {
        match std::env::var(CHILD).as_deref() {
            Ok("fault") => {
                let _guarded = child_setup();
                // Not guarded: beyond the end of its file.
                let fd = memfd_create("unguarded", MFdFlags::MFD_CLOEXEC).unwrap();
                nix::unistd::ftruncate(&fd, PAGE as i64).unwrap();
                let size = NonZeroUsize::new(2 * PAGE).unwrap();
                let m = SharedMemory::map(fd, size, Access::ReadWrite).unwrap();
                let mut b = [0u8; 1];
                m.read(PAGE as u64, &mut b);
                std::process::exit(0);
            }
            Ok("sent") => {
                // SAFETY: sets SIGBUS to its default before the guard is installed, as in a
                // process without the Rust runtime's handler.
                unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
                let _guarded = child_setup();
                // SAFETY: raise only sends the signal to this thread.
                unsafe { libc::raise(libc::SIGBUS) };
                std::process::exit(0);
            }
            Ok(_) => std::process::exit(3),
            Err(_) => {}
        }
        let name = "guard::tests::a_sigbus_outside_every_guarded_mapping_still_kills";
        for what in ["fault", "sent"] {
            let status = in_child(name, what);
            assert_eq!(status.signal(), Some(libc::SIGBUS), "{what}: {status:?}");
        }
    }
}
