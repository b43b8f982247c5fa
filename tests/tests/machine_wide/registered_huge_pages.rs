//! A huge-page memfd (`MFD_HUGETLB`) the application registers (docs/consumer.md,
//! "Registering memory the application has"): taken in whole huge pages, a peer's Writes land
//! in the application's own mapping, and the application's own hole in it while the pool is
//! empty costs that region a page, not the datapath (docs/limits.md, "A consumer's hole in a
//! huge-page region").

use crate::{free_huge_pages, HugePageReserve, PoolHog, HUGE_PAGE, NR_HUGEPAGES};
use mpa_app::Consumer;
use mpa_shm::{Access, SharedMemory};
use mpa_tests::{
    ended_flow, gone_cleanly, hand_over, listen_in, require_privileged, skip_or_fail, stats,
    writes_from_a, BedConfig, DatapathProcess, TestBed,
};
use nix::fcntl::{fallocate, fcntl, FallocateFlags, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::Duration;

/// 384 RDMA Writes of 8 KiB (3 MiB) into the first 3 MiB of a 4 MiB huge-page memfd, whose
/// second huge page the application punched out while the pool was empty: the region is on
/// huge pages, the datapath lives, every Write completes, the first huge page holds what the
/// peer sent in the application's mapping, and `region_pages_lost` says 1.
#[test]
fn a_registered_huge_page_memfd_takes_writes_and_survives_its_owners_hole() {
    const WRITES: u64 = 384;
    const LEN: usize = 8 << 10;
    let _machine = crate::one_at_a_time();
    let test = "a registered huge-page memfd";
    if !require_privileged(test) {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let dp = DatapathProcess::start_with(&bed, &[], &["--huge-pages", "off"]).unwrap();
    let Some(_reserve) = HugePageReserve::add(2) else {
        return skip_or_fail(test, &format!("{NR_HUGEPAGES} cannot be raised"));
    };
    if free_huge_pages() < 2 {
        return skip_or_fail(test, "the kernel gave fewer than 2 huge pages");
    }
    let flags = MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_HUGETLB | MFdFlags::MFD_ALLOW_SEALING;
    let fd = memfd_create("application-huge", flags).unwrap();
    nix::unistd::ftruncate(&fd, 2 * HUGE_PAGE as i64).unwrap();
    let own = SharedMemory::map_file(
        fd.try_clone().unwrap(),
        2 * HUGE_PAGE as u64,
        Access::ReadWrite,
    )
    .unwrap();
    assert!(own.huge_pages());
    let len = WRITES * LEN as u64;
    let mut consumer = Consumer::connect(&dp.socket, Duration::from_secs(10)).unwrap();
    let info = consumer
        .register_region(fd.as_fd(), len, 1, true, false)
        .unwrap();
    assert!(info.huge_pages, "{info:?}");
    assert_eq!(info.len, len);
    let sealed = SealFlag::from_bits_truncate(fcntl(&fd, FcntlArg::F_GET_SEALS).unwrap());
    assert_eq!(sealed, SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW);
    // The application's own hole over its second huge page; then the pool is used up.
    let punch = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    fallocate(&fd, punch, HUGE_PAGE as i64, HUGE_PAGE as i64).unwrap();
    let hog = PoolHog::take_all();

    let addr = SocketAddr::new(bed.addr_b(false), 7682);
    let listener = listen_in(&bed.ns_b, addr);
    let peer = writes_from_a(&bed, addr, info.stag, WRITES, LEN);
    let (flow, mut dpc, frozen) = hand_over(&bed, &dp.socket, &listener, false, true, Some(1));
    peer.join().unwrap().unwrap();
    gone_cleanly(&mut dpc, flow);
    drop(frozen);
    let f = ended_flow(&mut dpc, flow);
    assert_eq!(f.rx.completions, WRITES, "{f:?}");
    let s = stats(&mut dpc);
    assert_eq!(s.registry.region_pages_lost, 1);
    assert_eq!(
        (s.registry.registered_regions, s.registry.registered_octets),
        (1, len)
    );
    let want: Vec<u8> = (0..LEN).map(|j| (j % 251) as u8).collect();
    let mut got = vec![0u8; LEN];
    for i in 0..(HUGE_PAGE / LEN) as u64 {
        assert!(own.read(i * LEN as u64, &mut got));
        assert_eq!(got, want, "write {i} in the application's mapping");
    }
    drop(hog);
}
