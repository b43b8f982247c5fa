//! A hole punched into a huge-page region while the pool is empty (docs/limits.md, "A
//! consumer's hole in a huge-page region"): the access that finds it is answered with SIGBUS,
//! which the guard of `mpa-shm` turns into a replaced, counted page. First the guard alone, in
//! this process; then the datapath, with a consumer punching the hole and a peer writing into
//! it.

use crate::{free_huge_pages, HugePageReserve, PoolHog, HUGE_PAGE, NR_HUGEPAGES};
use mpa_app::Consumer;
use mpa_control::datapath_client::DatapathClient;
use mpa_shm::SharedMemory;
use mpa_tests::{
    ended_flow, gone_cleanly, hand_over, listen_in, require_privileged, skip_or_fail, stats,
    writes_from_a, BedConfig, DatapathProcess, TestBed,
};
use nix::fcntl::{fallocate, FallocateFlags};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::Duration;

/// The pool raised by `pages` free huge pages, or `None` (the test skipped, loudly) on a
/// machine that cannot give them.
fn reserve(test: &str, pages: u64) -> Option<HugePageReserve> {
    let Some(r) = HugePageReserve::add(pages) else {
        skip_or_fail(test, &format!("{NR_HUGEPAGES} cannot be raised"));
        return None;
    };
    if free_huge_pages() < pages {
        skip_or_fail(
            test,
            &format!("the kernel gave fewer than {pages} huge pages"),
        );
        return None;
    }
    Some(r)
}

/// Punches a hole over huge page `page` of the file, as a consumer may through its descriptor.
fn punch(fd: std::os::fd::BorrowedFd<'_>, page: usize) {
    let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    fallocate(fd, flags, (page * HUGE_PAGE) as i64, HUGE_PAGE as i64).unwrap();
}

#[test]
fn a_hole_in_a_guarded_huge_page_mapping_costs_the_page_not_the_process() {
    let _machine = crate::one_at_a_time();
    let test = "a hole in a guarded huge-page mapping";
    if !require_privileged(test) {
        return;
    }
    let Some(_reserve) = reserve(test, 2) else {
        return;
    };
    let mut m = SharedMemory::create("guarded-huge", 2 * HUGE_PAGE as u64, true).unwrap();
    m.guard().unwrap();
    assert!(m.huge_pages());
    assert_eq!(m.page_size(), HUGE_PAGE);
    assert!(m.write(0, b"kept"));
    assert!(m.write(HUGE_PAGE as u64, b"taken"));
    // What the other holder of the descriptor does: a hole over page 1, then the pool is
    // used up, so the page cannot come back.
    let other = m.fd().try_clone_to_owned().unwrap();
    punch(other.as_fd(), 1);
    let hog = PoolHog::take_all();
    let lost_before = mpa_shm::pages_lost_total();

    // Without the guard this store is a SIGBUS that ends the test binary.
    assert!(m.write(HUGE_PAGE as u64 + 100, b"after the hole"));
    assert_eq!(m.pages_lost(), 1);
    assert_eq!(mpa_shm::pages_lost_total(), lost_before + 1);
    let mut b = [0u8; 14];
    assert!(m.read(HUGE_PAGE as u64 + 100, &mut b));
    assert_eq!(&b, b"after the hole");
    // The whole huge page was replaced: its other octets read zeros, its last one takes a store
    // without a second fault.
    let mut z = [7u8; 100];
    assert!(m.read(HUGE_PAGE as u64, &mut z));
    assert_eq!(z, [0; 100]);
    assert!(m.write(2 * HUGE_PAGE as u64 - 1, b"x"));
    assert_eq!(m.pages_lost(), 1);
    // Page 0 is still the file's, shared with the other holder.
    let mut k = [0u8; 4];
    let file = std::fs::File::from(other);
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut k, 0).unwrap();
    assert_eq!(&k, b"kept");
    drop(hog);
}

/// 512 RDMA Writes of 8 KiB from the kernel peer cover both huge pages of a 4 MiB region
/// whose consumer punched a hole over page 1 while the pool was empty: the datapath lives,
/// every Write completes, page 0 holds what the peer sent, `region_pages_lost` says 1, the
/// log names the region once, and the consumer never sees the octets placed in page 1.
#[test]
fn a_consumers_hole_in_a_huge_page_region_costs_its_region_not_the_datapath() {
    const WRITES: u64 = 512;
    const LEN: usize = 8 << 10;
    let _machine = crate::one_at_a_time();
    let test = "a consumer's hole in a huge-page region";
    if !require_privileged(test) {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    // UMEM on normal pages: the pool raised below is the region's alone.
    let dp = DatapathProcess::start_with(&bed, &[], &["--huge-pages", "off"]).unwrap();
    let Some(_reserve) = reserve(test, 2) else {
        return;
    };
    let mut consumer = Consumer::connect(&dp.socket, Duration::from_secs(10)).unwrap();
    let region = consumer
        .create_region(2 * HUGE_PAGE as u64, 1, true, false)
        .unwrap();
    assert!(region.info().huge_pages, "{:?}", region.info());
    punch(region.fd(), 1);
    let hog = PoolHog::take_all();

    let addr = SocketAddr::new(bed.addr_b(false), 7681);
    let listener = listen_in(&bed.ns_b, addr);
    let peer = writes_from_a(&bed, addr, region.info().stag, WRITES, LEN);
    let (flow, mut dpc, frozen) = hand_over(&bed, &dp.socket, &listener, false, true, Some(1));
    peer.join().unwrap().unwrap();
    gone_cleanly(&mut dpc, flow);
    drop(frozen);
    let f = ended_flow(&mut dpc, flow);
    assert_eq!(f.rx.completions, WRITES, "{f:?}");
    // Answered: the datapath lives.
    assert_eq!(stats(&mut dpc).registry.region_pages_lost, 1);
    // The warning comes within a turn of the control loop; once for the region.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let named = |dp: &DatapathProcess| {
        dp.log()
            .iter()
            .filter(|l| l.contains("its consumer took pages away"))
            .count()
    };
    while named(&dp) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = dp.log().join("\n");
    assert_eq!(named(&dp), 1, "{log}");
    assert!(
        log.contains(&format!("stag={}", region.info().stag)),
        "{log}"
    );

    // Page 0: every octet the peer sent there.
    let want: Vec<u8> = (0..LEN).map(|j| (j % 251) as u8).collect();
    let mut got = vec![0u8; LEN];
    for i in 0..(HUGE_PAGE / LEN) as u64 {
        assert!(region.read(i * LEN as u64, &mut got));
        assert_eq!(got, want, "write {i}");
    }
    // Page 1 is the consumer's hole: with the pool back, its own mapping faults in a new,
    // zeroed page there; what the peer wrote went to the datapath's replacement.
    drop(hog);
    assert!(region.read(HUGE_PAGE as u64, &mut got));
    assert!(
        got.iter().all(|&b| b == 0),
        "the consumer sees placed octets"
    );
    // The datapath still serves: a new region, and statistics.
    drop(region);
    consumer.create_region(4096, 1, true, false).unwrap();
    let mut dpc = DatapathClient::connect(&dp.socket, Duration::from_secs(5)).unwrap();
    assert_eq!(stats(&mut dpc).registry.region_pages_lost, 1);
}
