//! The whole-system tests that change what the whole machine shares — the huge page reserve
//! (`vm.nr_hugepages`), which every datapath's UMEM and regions draw on — or that read what the
//! whole process shares (the shared memory it created, counted by every datapath in it), in a
//! test binary of their own, which cargo runs alone, one test at a time ([`one_at_a_time`]).

mod af_xdp_modes;
mod nics_runbook;
mod region_holes;
mod registered_huge_pages;
mod released_memory;

use std::os::fd::OwnedFd;

/// Held by each test here for its whole run: they raise and restore the same reserve.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed holding it left nothing half-changed: its guards restored the reserve.
    MACHINE.lock().unwrap_or_else(|e| e.into_inner())
}

/// `vm.nr_hugepages` raised for a test and put back on every exit path.
struct HugePageReserve {
    before: u64,
}

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

impl HugePageReserve {
    fn add(pages: u64) -> Option<HugePageReserve> {
        let before: u64 = std::fs::read_to_string(NR_HUGEPAGES)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        std::fs::write(NR_HUGEPAGES, (before + pages).to_string()).ok()?;
        Some(HugePageReserve { before })
    }
}

impl Drop for HugePageReserve {
    fn drop(&mut self) {
        let _ = std::fs::write(NR_HUGEPAGES, self.before.to_string());
    }
}

/// A `HugePages_*` line of /proc/meminfo.
fn huge_pages(field: &str) -> u64 {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap();
    info.lines()
        .find_map(|l| {
            l.strip_prefix("HugePages_")?
                .strip_prefix(field)?
                .strip_prefix(':')
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// HugePages_Free of /proc/meminfo.
fn free_huge_pages() -> u64 {
    huge_pages("Free")
}

/// The default huge page size (2 MiB on x86_64).
const HUGE_PAGE: usize = 2 << 20;

/// Every huge page the pool still gives, held by a hugetlb memfd of its own until dropped: a
/// page the pool is asked for meanwhile is refused, as on a host whose pool is used up. The
/// reserve's overcommit (`vm.nr_overcommit_hugepages`) is set to 0 meanwhile, so no surplus
/// page comes instead.
struct PoolHog {
    _file: OwnedFd,
    _overcommit: Option<Overcommit>,
}

const NR_OVERCOMMIT: &str = "/proc/sys/vm/nr_overcommit_hugepages";

/// `vm.nr_overcommit_hugepages` as it was, put back on drop.
struct Overcommit(String);

impl Drop for Overcommit {
    fn drop(&mut self) {
        let _ = std::fs::write(NR_OVERCOMMIT, &self.0);
    }
}

impl PoolHog {
    fn take_all() -> PoolHog {
        use nix::fcntl::{fallocate, FallocateFlags};
        use nix::sys::memfd::{memfd_create, MFdFlags};
        let before = std::fs::read_to_string(NR_OVERCOMMIT).unwrap();
        let overcommit = (before.trim() != "0").then(|| {
            std::fs::write(NR_OVERCOMMIT, "0").unwrap();
            Overcommit(before)
        });
        let file = memfd_create(
            "huge-page-pool-hog",
            MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_HUGETLB,
        )
        .unwrap();
        let total = huge_pages("Total");
        nix::unistd::ftruncate(&file, (total as usize * HUGE_PAGE) as i64).unwrap();
        for i in 0..total as usize {
            let at = (i * HUGE_PAGE) as i64;
            if fallocate(&file, FallocateFlags::empty(), at, HUGE_PAGE as i64).is_err() {
                break;
            }
        }
        assert_eq!(
            huge_pages("Free"),
            huge_pages("Rsvd"),
            "a huge page is still to be had"
        );
        PoolHog {
            _file: file,
            _overcommit: overcommit,
        }
    }
}
