//! The AF_XDP and XDP modes `mpa-datapath` is asked for, on veth (docs/environment.md: native
//! XDP, AF_XDP in copy mode only): `--zero-copy on` fails and says why, naming the interface,
//! its driver and the kernel's refusal; `--zero-copy auto` falls back to copy mode and the
//! statistics say so; `--xdp-mode generic` attaches in skb mode and places a transfer exactly.

use mpa_control::datapath_client::DatapathClient;
use mpa_ctl_proto::consumer::Consumer;
use mpa_ctl_proto::Message;
use mpa_tests::{
    ended_flow, hand_over, listen_in, require_privileged, stats, writes_from_a, BedConfig,
    DatapathProcess, TestBed,
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

#[test]
fn generic_xdp_places_a_transfer_exactly() {
    if !require_privileged("generic XDP") {
        return;
    }
    const WRITES: u64 = 64;
    const LEN: usize = 4096;
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let dp = DatapathProcess::start_with(&bed, &[], &["--xdp-mode", "generic"]).unwrap();
    // Attached in skb mode: `ip link` shows "xdpgeneric".
    assert!(bed.link_b().unwrap().contains("xdpgeneric"));
    let mut consumer = Consumer::connect(&dp.socket, Duration::from_secs(10)).unwrap();
    let region = consumer.create_region(1 << 20, 1, true, false).unwrap();
    let addr = SocketAddr::new(bed.addr_b(false), 7671);
    let listener = listen_in(&bed.ns_b, addr);
    let peer = writes_from_a(&bed, addr, region.info().stag, WRITES, LEN);
    let (flow, mut dpc, frozen) = hand_over(&bed, &dp.socket, &listener, false, true, Some(1));
    peer.join().unwrap().unwrap();
    match dpc.next_notification().unwrap() {
        Message::FlowGone {
            flow_id,
            mpa_error: None,
            ..
        } => assert_eq!(flow_id, flow),
        m => panic!("{m:?}"),
    }
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
