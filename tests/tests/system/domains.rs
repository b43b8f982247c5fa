//! Protection domains belong to one control client (docs/limits.md, "Per control client"):
//! the first to create a region in a domain or subscribe to it owns it; another client's
//! Subscribe, Unsubscribe, CreateRegion, DestroyRegion and PostRecv naming it are refused
//! with `Forbidden`, and the owner keeps its subscription and receives its completions. mpa-control's hand-over naming
//! the domain is not a consumer request and is allowed.

use mpa_app::{Consumer, ConsumerError};
use mpa_ctl_proto::client::ClientError;
use mpa_ctl_proto::{CompletionKind, ErrorCode, PostTarget};
use mpa_harness::hostile_peer::{fpdu_bytes, write_ulpdu};
use mpa_tests::{accept_and_hand_over, datapath, listen_in, require_privileged, stats};
use mpa_tests::{BedConfig, DatapathOptions, Responder, TestBed};
use mpa_tests::{HostileConfig, HostilePeer};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const PD: u32 = 11;

#[track_caller]
fn forbidden<T>(what: &str, r: Result<T, ConsumerError>) {
    match r {
        Err(ConsumerError::Client(ClientError::Refused {
            code: ErrorCode::Forbidden,
            ..
        })) => {}
        Err(e) => panic!("{what}: Forbidden expected, got {e}"),
        Ok(_) => panic!("{what}: Forbidden expected, got success"),
    }
}

#[test]
fn another_client_cannot_touch_a_domain_and_the_owner_keeps_its_completions() {
    if !require_privileged("protection domain ownership") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, socket) = datapath(&bed, &DatapathOptions::default());
    let wait = Duration::from_secs(5);
    let mut a = Consumer::connect(&socket, wait).unwrap();
    let region = a.create_region(8192, PD, true, false).unwrap();
    let stag = region.info().stag;
    a.subscribe(PD).unwrap();

    // The connection places into the domain (the hand-over names it: allowed).
    let addr = SocketAddr::new(bed.addr_b(false), 7793);
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
        let t = s.spawn(|| accept_and_hand_over(&bed.ns_b, &socket, &listener, &resp));
        let p = HostilePeer::connect(&bed, addr, &HostileConfig::default());
        (t.join().unwrap(), p)
    });
    let mut h = h.unwrap();
    let mut p = p.unwrap();

    // The second consumer: every request naming the domain is refused.
    let mut b = Consumer::connect(&socket, wait).unwrap();
    forbidden("Subscribe", b.subscribe(PD));
    forbidden("Unsubscribe", b.unsubscribe(PD));
    forbidden("CreateRegion", b.create_region(4096, PD, true, false));
    forbidden("DestroyRegion", b.destroy_region(stag));
    forbidden(
        "PostRecv to the domain",
        b.post_recv(PostTarget::Pd(PD), stag, 0, 100, 1),
    );
    forbidden(
        "PostRecv to its flow",
        b.post_recv(PostTarget::Flow(h.flow_id), stag, 0, 100, 1),
    );
    // Reading the list is not touching; its own domain is its own.
    assert_eq!(b.regions(Some(PD)).unwrap().len(), 1);
    let own = b.create_region(4096, PD + 1, true, false).unwrap();
    b.subscribe(PD + 1).unwrap();
    let st = stats(&mut h.dpc).registry;
    assert_eq!((st.regions, st.subscribers), (2, 2));

    // The owner's subscription stands: the Write's completion goes to it, none to b.
    let data: Vec<u8> = (0..300u32).map(|i| (i * 3 + 1) as u8).collect();
    p.send_data(&fpdu_bytes(&write_ulpdu(stag, 500, &data), true))
        .unwrap();
    let want = p.snd_nxt;
    assert!(p
        .wait_for(Duration::from_secs(3), |r| r.ack == Some(want))
        .unwrap()
        .is_some());
    let items = a
        .next_completions(Instant::now() + Duration::from_secs(3))
        .unwrap()
        .expect("the owner's completion");
    assert_eq!(items.len(), 1, "{items:?}");
    let c = &items[0];
    assert_eq!(
        (c.flow_id, c.kind, c.stag, c.offset, c.len),
        (h.flow_id, CompletionKind::WritePlaced, stag, 500, 300)
    );
    let mut got = vec![0u8; 300];
    assert!(region.read(500, &mut got));
    assert_eq!(got, data);
    assert!(b
        .next_completions(Instant::now() + Duration::from_millis(200))
        .unwrap()
        .is_none());

    // Once the owner is gone, the domain is free (its regions went with it).
    drop(a);
    let mut taken = false;
    for _ in 0..100 {
        if b.subscribe(PD).is_ok() {
            taken = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(taken, "domain {PD} still owned after its owner left");
    drop(own);
    drop(p);
    drop(h);
    dp.stop();
}
