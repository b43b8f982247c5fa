//! The AF_XDP and XDP modes `mpa-datapath` is asked for, on veth (docs/environment.md: native
//! XDP, AF_XDP in copy mode only): `--zero-copy on` fails and says why, naming the interface,
//! its driver and the kernel's refusal; `--zero-copy auto` falls back to copy mode and the
//! statistics say so; `--xdp-mode generic` attaches in skb mode and places a transfer exactly;
//! UMEM frames of 2 KiB and UMEM on huge pages place transfers exactly too.

use crate::{free_huge_pages, HugePageReserve, NR_HUGEPAGES};
use mpa_app::Consumer;
use mpa_control::datapath_client::DatapathClient;
use mpa_tests::{
    ended_flow, gone_cleanly, hand_over, listen_in, require_privileged, stats, writes_from_a,
    BedConfig, DatapathProcess, TestBed,
};
use std::net::SocketAddr;
use std::time::Duration;

/// Every queue's `zero_copy` and `multi_buffer` in the datapath's statistics.
fn modes(dp: &DatapathProcess) -> Vec<(bool, bool)> {
    let mut dpc = DatapathClient::connect(&dp.socket, Duration::from_secs(5)).unwrap();
    let s = stats(&mut dpc);
    s.queues
        .iter()
        .map(|q| (q.ring.zero_copy, q.ring.multi_buffer))
        .collect()
}

#[test]
fn zero_copy_on_veth_is_refused_with_the_reason_and_auto_falls_back_to_copy() {
    let _machine = crate::one_at_a_time();
    if !require_privileged("AF_XDP zero-copy modes") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let log = match DatapathProcess::start_once_with(&bed, &[], &["--zero-copy", "on"]) {
        Ok(_) => panic!("--zero-copy on started on veth"),
        Err(log) => log,
    };
    assert!(log.contains(&bed.if_b), "{log}");
    assert!(log.contains("zero-copy refused"), "{log}");
    // veth has no device in sysfs: the message says so instead of naming a driver.
    assert!(log.contains("no driver in sysfs"), "{log}");

    let dp = DatapathProcess::start_with(&bed, &[], &["--zero-copy", "auto"]).unwrap();
    assert_eq!(modes(&dp), [(false, true)]);
    let log = dp.log().join("\n");
    assert!(log.contains("AF_XDP socket in copy mode"), "{log}");
    assert!(log.contains("zero-copy refused"), "{log}");
    drop(dp);

    let dp = DatapathProcess::start_with(&bed, &[], &["--zero-copy", "off"]).unwrap();
    assert_eq!(modes(&dp), [(false, true)]);
    assert!(!dp.log().join("\n").contains("zero-copy refused"));
}

/// A transfer of 64 RDMA Writes of 4 KiB from the kernel peer in ns a, handed over to `dp`:
/// every message completed and every octet where it belongs.
fn transfer_placed_exactly(bed: &TestBed, dp: &DatapathProcess, port: u16) {
    const WRITES: u64 = 64;
    const LEN: usize = 4096;
    let mut consumer = Consumer::connect(&dp.socket, Duration::from_secs(10)).unwrap();
    let region = consumer.create_region(1 << 20, 1, true, false).unwrap();
    let addr = SocketAddr::new(bed.addr_b(false), port);
    let listener = listen_in(&bed.ns_b, addr);
    let peer = writes_from_a(bed, addr, region.info().stag, WRITES, LEN);
    let (flow, mut dpc, frozen) = hand_over(bed, &dp.socket, &listener, false, true, Some(1));
    peer.join().unwrap().unwrap();
    gone_cleanly(&mut dpc, flow);
    drop(frozen);
    let f = ended_flow(&mut dpc, flow);
    // Every message completed (in order or placed ahead when a segment came late), and every
    // octet where it belongs.
    assert_eq!(f.rx.completions, WRITES, "{f:?}");
    let want: Vec<u8> = (0..LEN).map(|j| (j % 251) as u8).collect();
    let mut got = vec![0u8; LEN];
    for i in 0..WRITES {
        assert!(region.read(i * LEN as u64, &mut got));
        assert_eq!(got, want, "write {i}");
    }
}

#[test]
fn generic_xdp_places_a_transfer_exactly() {
    let _machine = crate::one_at_a_time();
    if !require_privileged("generic XDP") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let dp = DatapathProcess::start_with(&bed, &[], &["--xdp-mode", "generic"]).unwrap();
    // Attached in skb mode: `ip link` shows "xdpgeneric".
    assert!(bed.link_b().unwrap().contains("xdpgeneric"));
    transfer_placed_exactly(&bed, &dp, 7671);
}

#[test]
fn half_size_and_fewest_umem_frames_place_a_transfer_exactly_and_other_layouts_are_refused() {
    let _machine = crate::one_at_a_time();
    if !require_privileged("2 KiB UMEM frames") {
        return;
    }
    // At MTU 1500 a frame of 1514 octets fits a 2048-octet frame after the 256-octet headroom;
    // at MTU 4000 every data frame arrives as a descriptor chain.
    for mtu in [1500, 4000] {
        let bed = TestBed::up(BedConfig {
            mtu,
            ..BedConfig::default()
        })
        .unwrap();
        let dp = DatapathProcess::start_with(&bed, &[], &["--frame-size", "2048"]).unwrap();
        transfer_placed_exactly(&bed, &dp, 7672);
        if mtu > 1500 {
            let mut dpc = DatapathClient::connect(&dp.socket, Duration::from_secs(5)).unwrap();
            let s = stats(&mut dpc);
            assert!(
                s.queues[0].ring.rx_multi_buffer > 0,
                "{:?}",
                s.queues[0].ring
            );
        }
    }
    // Frame sizes the layout does not take are refused before anything is attached.
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let log = DatapathProcess::start_once_with(&bed, &[], &["--frame-size", "3000"])
        .err()
        .expect("--frame-size 3000 taken");
    assert!(log.contains("2048 or 4096"), "{log}");
    // Too few frames for a burst each way is refused before anything is attached (it started,
    // then neither received nor sent); the fewest it takes carry a connection octet-exact.
    let log = DatapathProcess::start_once_with(&bed, &[], &["--frames", "255"])
        .err()
        .expect("--frames 255 taken");
    assert!(
        log.contains("--frames 255: at least 256 per queue"),
        "{log}"
    );
    let dp = DatapathProcess::start_with(&bed, &[], &["--frames", "256"]).unwrap();
    transfer_placed_exactly(&bed, &dp, 7674);
}

#[test]
fn umem_on_huge_pages_when_asked_and_a_clear_failure_without_them() {
    let _machine = crate::one_at_a_time();
    if !require_privileged("huge pages") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    // 1024 frames × 4 KiB: two 2 MiB pages.
    let args = ["--frames", "1024", "--huge-pages", "on"];
    if free_huge_pages() == 0 {
        let log = DatapathProcess::start_once_with(&bed, &[], &args)
            .err()
            .expect("--huge-pages on started without huge pages");
        assert!(log.contains("needs 2 free 2 MiB pages"), "{log}");
        // `auto` falls back to normal pages and says so.
        let dp =
            DatapathProcess::start_with(&bed, &[], &["--frames", "1024", "--huge-pages", "auto"])
                .unwrap();
        let mut dpc = DatapathClient::connect(&dp.socket, Duration::from_secs(5)).unwrap();
        assert!(!stats(&mut dpc).queues[0].ring.huge_pages);
        assert!(dp.log().join("\n").contains("UMEM on normal pages"));
    }
    let Some(_reserve) = HugePageReserve::add(4) else {
        panic!("could not raise {NR_HUGEPAGES}");
    };
    let dp = DatapathProcess::start_with(&bed, &[], &args).unwrap();
    let mut dpc = DatapathClient::connect(&dp.socket, Duration::from_secs(5)).unwrap();
    assert!(stats(&mut dpc).queues[0].ring.huge_pages);
    transfer_placed_exactly(&bed, &dp, 7673);
}
