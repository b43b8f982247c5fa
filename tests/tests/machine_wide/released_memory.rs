//! Shared memory the datapath released (a destroyed region, an ended subscription's completion
//! rings) holds no page, however many descriptors to it a consumer kept: the charge the
//! datapath gave back is all there was (docs/limits.md, "Shared memory after it is
//! released"). The datapath's statistics count the shared memory of its whole process, so
//! this test runs where no other datapath lives beside it (the `machine_wide` binary, one test
//! at a time).

use mpa_app::{Consumer, ConsumerError};
use mpa_control::datapath_client::DatapathClient;
use mpa_ctl_proto::client::ClientError;
use mpa_ctl_proto::shm::resident_bytes;
use mpa_ctl_proto::ErrorCode;
use mpa_tests::{datapath, require_privileged, stats, BedConfig, DatapathOptions, TestBed};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

const CYCLES: usize = 1000;
const REGION: u64 = 1 << 20;
const MAX_REGION_BYTES: u64 = 16 << 20;

/// Octets the kept descriptors' files have pages for.
fn held(kept: &[OwnedFd]) -> u64 {
    kept.iter()
        .map(|f| resident_bytes(f.as_fd()).expect("fstat"))
        .sum()
}

#[test]
fn released_regions_and_subscriptions_hold_no_pages_whatever_the_consumer_kept() {
    if !require_privileged("released memory") {
        return;
    }
    let _alone = crate::one_at_a_time();
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (_dp, socket) = datapath(
        &bed,
        &DatapathOptions {
            max_region_bytes: MAX_REGION_BYTES,
            completion_ring: 1024,
            ..DatapathOptions::default()
        },
    );
    let mut w = DatapathClient::connect(&socket, Duration::from_secs(5)).unwrap();
    let before = stats(&mut w).memory;
    let mut con = Consumer::connect(&socket, Duration::from_secs(5)).unwrap();
    let mut kept = Vec::with_capacity(2 * CYCLES);
    for i in 0..CYCLES {
        let r = con
            .create_region(REGION, 0x51, true, false)
            .unwrap_or_else(|e| panic!("region {i}: {e}"));
        // The consumer writes into it too: its own pages must go as well.
        assert!(r.write(REGION - 4096, &[0xa5; 4096]));
        kept.push(r.fd().try_clone_to_owned().unwrap());
        con.destroy_region(r.info().stag).unwrap();
    }
    for i in 0..CYCLES {
        con.subscribe(0x52)
            .unwrap_or_else(|e| panic!("subscription {i}: {e}"));
        let rings = con.ring_file(0x52).expect("the subscription's rings");
        kept.push(rings.fd().try_clone_to_owned().unwrap());
        con.unsubscribe(0x52).unwrap();
    }
    // The workers let go of what was released at their next turn.
    let t0 = Instant::now();
    loop {
        let h = held(&kept);
        if h == 0 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{h} octets still held through {} kept descriptors of released memory",
            kept.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // And the budget has it all back: the control thread counts what a worker let go when
    // it hears of it, a moment after the pages went (longer on a busy machine).
    let key = |m: &mpa_ctl_proto::stats::MemoryStats| (m.shared_files, m.shared_bytes, m.used);
    let t0 = Instant::now();
    loop {
        let after = stats(&mut w).memory;
        if key(&after) == key(&before) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "(shared files, shared octets, budget used) {:?} after, {:?} before: {after:?}",
            key(&after),
            key(&before)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // What the kept descriptors read now is zeros, in fresh pages of their own.
    let mut buf = [0xffu8; 16];
    std::fs::File::from(kept[0].try_clone().unwrap())
        .read_exact_at(&mut buf, REGION - 4096)
        .unwrap();
    assert_eq!(buf, [0u8; 16]);
    // Past the bound: refused, the limit named.
    let live = con
        .create_region(MAX_REGION_BYTES / 2, 0x51, true, false)
        .unwrap();
    match con.create_region(MAX_REGION_BYTES / 2 + 1, 0x51, true, false) {
        Err(ConsumerError::Client(ClientError::Refused {
            code: ErrorCode::Limit,
            message,
        })) => assert!(
            message.contains(&format!("--max-region-bytes {MAX_REGION_BYTES}")),
            "{message}"
        ),
        other => panic!("a region past --max-region-bytes refused with Limit, got {other:?}"),
    }
    let now = stats(&mut w).memory;
    assert_eq!(
        (now.shared_files, now.shared_bytes),
        (
            before.shared_files + 1,
            before.shared_bytes + live.info().len
        ),
        "{now:?}"
    );
}
