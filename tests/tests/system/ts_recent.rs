//! TS.Recent inherited at the hand-over (docs/environment.md, "Why TS.Recent must be
//! inherited"): for a watched port, the XDP program records the peer's timestamped segments
//! until the flow is steered, and the datapath's TCP starts with the TSval of the one that
//! ended at RCV.NXT — the peer's real last TSval, here our Request's; a forged pure ACK at
//! RCV.NXT with a TSval half the space away then fails PAWS, and data after it is placed
//! octet-exact. Without a watch the TS.Recent stays unknown, and that is counted.

use mpa_app::Consumer;
use mpa_control::datapath_client::DatapathClient;
use mpa_ctl_proto::stats::FlowReport;
use mpa_ctl_proto::Message;
use mpa_harness::hostile_peer::{fpdu_bytes, write_ulpdu};
use mpa_tests::{accept_and_hand_over, datapath, listen_in, require_privileged, stats};
use mpa_tests::{BedConfig, DatapathOptions, HandedOver, Responder, TestBed};
use mpa_tests::{HostileConfig, HostilePeer};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

const PD: u32 = 9;

fn connect(bed: &TestBed, socket: &Path, port: u16) -> (HandedOver, HostilePeer) {
    let addr = SocketAddr::new(bed.addr_b(false), port);
    let listener = listen_in(&bed.ns_b, addr);
    let resp = Responder {
        placement: mpa_control::Placement {
            pd: Some(PD),
            aligned_sender: false,
            conn_id: None,
        },
        ..Responder::framing(false, true)
    };
    let (h, p) = std::thread::scope(|s| {
        let t = s.spawn(|| accept_and_hand_over(&bed.ns_b, socket, &listener, &resp));
        let p = HostilePeer::connect(bed, addr, &HostileConfig::default());
        (t.join().unwrap(), p)
    });
    (h.unwrap(), p.unwrap())
}

fn live(dpc: &mut DatapathClient, flow_id: u64) -> FlowReport {
    stats(dpc)
        .live_flows()
        .find(|(_, f)| f.flow_id == flow_id)
        .expect("the flow is live")
        .1
        .clone()
}

#[test]
fn ts_recent_is_inherited_and_a_forged_far_ack_no_longer_wedges_the_flow() {
    if !require_privileged("TS.Recent at hand-over") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, socket) = datapath(&bed, &DatapathOptions::default());
    let mut consumer = Consumer::connect(&socket, Duration::from_secs(5)).unwrap();
    let region = consumer.create_region(4096, PD, true, false).unwrap();
    let stag = region.info().stag;
    // Port 7791 is watched from before the peer connects; 7792 is not.
    let mut watcher = DatapathClient::connect(&socket, Duration::from_secs(5)).unwrap();
    watcher
        .request(|id| Message::WatchPort { id, port: 7791 })
        .unwrap();
    assert_eq!(stats(&mut watcher).handover.watched_ports, vec![7791]);

    let (mut h, mut p) = connect(&bed, &socket, 7791);
    let real = p.startup_tsval.expect("our Request's TSval was seen");
    let f = live(&mut h.dpc, h.flow_id);
    assert_eq!(f.ts_recent_inherited, Some(real), "{f:?}");
    let s = stats(&mut h.dpc).handover;
    assert_eq!((s.ts_recent_inherited, s.ts_recent_unknown), (1, 0));

    // The forged pure ACK at RCV.NXT (our SND.NXT), its TSval half the space away from our
    // clock now: dropped by PAWS. (Not from `real`: our ACK of the datapath's Reply, sent
    // while connecting, already moved its TS.Recent a little past `real`, and a TSval just
    // under 2^31 ahead of TS.Recent is "newer" and would become the baseline.)
    let mut forged = p.seg(&[]);
    forged.ts = Some((p.tsval().wrapping_add(1 << 31), p.ts_recent));
    p.send_seg(&forged).unwrap();
    // Then real data, with our real clock: acknowledged and placed octet-exact.
    let data: Vec<u8> = (0..700u32).map(|i| (i * 7 + 3) as u8).collect();
    p.send_data(&fpdu_bytes(&write_ulpdu(stag, 64, &data), true))
        .unwrap();
    let want = p.snd_nxt;
    let ack = p
        .wait_for(Duration::from_secs(3), |r| r.ack == Some(want))
        .unwrap();
    assert!(ack.is_some(), "no ACK of SND.NXT {want}: {:?}", p.inbox);
    let mut got = vec![0u8; data.len()];
    assert!(region.read(64, &mut got));
    assert_eq!(got, data);
    let f = live(&mut h.dpc, h.flow_id);
    assert_eq!(f.tcp_drops.paws, 1, "{f:?}");
    assert_eq!(f.rx.fpdus, 1, "{f:?}");
    drop(p);
    drop(h);

    // Not watched: nothing recorded, the TS.Recent unknown and counted.
    let (mut h, p) = connect(&bed, &socket, 7792);
    let f = live(&mut h.dpc, h.flow_id);
    assert_eq!(f.ts_recent_inherited, None, "{f:?}");
    let s = stats(&mut h.dpc).handover;
    assert_eq!((s.ts_recent_inherited, s.ts_recent_unknown), (1, 1));
    drop(p);
    drop(h);

    // The watch goes with its client.
    drop(watcher);
    let mut dpc = DatapathClient::connect(&socket, Duration::from_secs(5)).unwrap();
    let mut watched = stats(&mut dpc).handover.watched_ports;
    for _ in 0..100 {
        if watched.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        watched = stats(&mut dpc).handover.watched_ports;
    }
    assert!(watched.is_empty(), "{watched:?}");
    drop(dpc);
    dp.stop();
}
