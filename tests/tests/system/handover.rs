//! Responder connection setup against kernel TCP Initiators in a test bed. The datapath side of
//! the control socket is played by a scripted protocol peer on a socket pair (the real
//! datapath answers the same messages); it checks what mpa-control sends and in which order.

use mpa::endpoint::{EndpointConfig, EndpointError};
use mpa::startup::{PrivateDataRule, StartupPolicy};
use mpa::wire::startup::{FrameKind, StartupFrame, StartupRepr};
use mpa_control::datapath_client::{ClientError, DatapathClient};
use mpa_control::responder::{respond_and_hand_over, Outcome, SetupError};
use mpa_ctl_proto::{handshake, read_message, write_message, ErrorCode, Message, ProtoError};
use mpa_harness::respond_in;
use mpa_tests::{initiator_in_a, listen_in, require_privileged, BedConfig, Responder, TestBed};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// Starts an Initiator in ns a; returns its eventual result.
fn initiator(
    bed: &TestBed,
    addr: SocketAddr,
    private_data: &[u8],
) -> std::thread::JoinHandle<Result<(), EndpointError>> {
    let mut cfg = EndpointConfig {
        private_data: private_data.to_vec(),
        ..Default::default()
    };
    cfg.policy.startup_timeout = Duration::from_millis(1500);
    cfg.policy.markers_required = true;
    initiator_in_a(bed, addr, cfg, |_, s| s.map(|_| ()))
}

fn datapath_pair() -> (DatapathClient, UnixStream) {
    let (a, mut b) = UnixStream::pair().unwrap();
    let t = std::thread::spawn(move || {
        handshake(&mut b, "scripted-datapath").unwrap();
        b
    });
    let c = DatapathClient::over(a, Duration::from_secs(5)).unwrap();
    (c, t.join().unwrap())
}

#[test]
fn accepted_connection_is_handed_over_and_the_kernel_stays_silent() {
    if !require_privileged("handover accepted") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let mac_a = bed.mac_a().unwrap();
    for v6 in [false, true] {
        let addr = SocketAddr::new(bed.addr_b(v6), 7200 + u16::from(v6));
        let listener = listen_in(&bed.ns_b, addr);
        let client = initiator(&bed, addr, b"hello");
        let (sock, peer) = listener.accept().unwrap();
        let (mut dp, mut script) = datapath_pair();
        let script = std::thread::spawn(move || {
            let Message::AdoptFlow { id, local, remote } = read_message(&mut script).unwrap()
            else {
                panic!("first request must be AdoptFlow")
            };
            assert_eq!((local, remote), (addr, peer));
            write_message(&mut script, &Message::FlowAdopted { id, flow_id: 42 }).unwrap();
            let Message::HandOver { id, handover } = read_message(&mut script).unwrap() else {
                panic!("second request must be HandOver")
            };
            write_message(&mut script, &Message::HandedOver { id, flow_id: 42 }).unwrap();
            handover
        });
        // The scripted datapath sits in the root namespace; neighbour lookups need ns b.
        let responder = Responder {
            policy: StartupPolicy::default(),
            reply_private_data: b"welcome".to_vec(),
            ..Responder::framing(false, true)
        };
        let outcome = respond_in(&bed.ns_b, sock, &responder, &mut dp);
        let handover = script.join().unwrap();
        let Outcome::HandedOver {
            flow_id,
            frozen,
            negotiated,
        } = outcome.unwrap()
        else {
            panic!("not handed over")
        };
        assert_eq!(flow_id, 42);
        assert!(negotiated.markers_tx, "the Initiator asked for markers");
        assert_eq!(negotiated.peer_private_data, b"hello");
        assert_eq!(handover.flow_id, 42);
        assert_eq!((handover.tcp.local, handover.tcp.remote), (addr, peer));
        assert_eq!(handover.tcp.mss, if v6 { 1440 } else { 1460 });
        assert_eq!(handover.next_hop_mac, mac_a);
        assert!(handover.mpa.markers_tx && !handover.mpa.markers_rx && handover.mpa.crc);
        // The Reply the datapath will send: accepting, M=0 (we asked for none), our data.
        let f = StartupFrame::new_checked(&handover.mpa.reply_frame[..]).unwrap();
        let reply = StartupRepr::parse_expected(&f, FrameKind::Reply).unwrap();
        assert!(!reply.rejected && !reply.markers && reply.crc);
        assert_eq!(reply.private_data, b"welcome");
        // The Request as received, exactly, for captures to show.
        let f = StartupFrame::new_checked(&handover.mpa.request_frame[..]).unwrap();
        let request = StartupRepr::parse_expected(&f, FrameKind::Request).unwrap();
        assert!(request.markers && request.private_data.ends_with(b"hello"));
        assert!(handover.mpa.received_reply_frame.is_empty());
        // No Reply came from the kernel: the Initiator times out waiting for it.
        let r = client.join().unwrap();
        assert!(matches!(r, Err(EndpointError::Startup(_))), "{r:?}");
        drop(frozen);
    }
}

#[test]
fn rejected_request_gets_the_reason_from_the_kernel_socket() {
    if !require_privileged("handover rejected") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let addr = SocketAddr::new(bed.addr_b(false), 7210);
    let listener = listen_in(&bed.ns_b, addr);
    let client = initiator(&bed, addr, b"no-token");
    let (sock, _) = listener.accept().unwrap();
    let (mut dp, mut script) = datapath_pair();
    let policy = StartupPolicy {
        private_data_rule: PrivateDataRule::RequirePrefix(b"token=".to_vec()),
        reject_reason: b"missing token".to_vec(),
        ..StartupPolicy::default()
    };
    let outcome = respond_and_hand_over(sock, policy, vec![], None, &mut dp).unwrap();
    assert!(matches!(outcome, Outcome::Rejected { ref reason } if reason == b"missing token"));
    match client.join().unwrap() {
        Err(EndpointError::Rejected { private_data }) => assert_eq!(private_data, b"missing token"),
        other => panic!("{other:?}"),
    }
    // The datapath heard nothing of it.
    script
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    assert!(matches!(read_message(&mut script), Err(ProtoError::Io(_))));
}

#[test]
fn datapath_refusal_fails_the_setup() {
    if !require_privileged("handover refused") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let addr = SocketAddr::new(bed.addr_b(false), 7220);
    let listener = listen_in(&bed.ns_b, addr);
    let client = initiator(&bed, addr, b"");
    let (sock, _) = listener.accept().unwrap();
    let (mut dp, mut script) = datapath_pair();
    let t = std::thread::spawn(move || {
        let Message::AdoptFlow { id, .. } = read_message(&mut script).unwrap() else {
            panic!()
        };
        write_message(
            &mut script,
            &Message::Error {
                id,
                code: ErrorCode::Limit,
                message: "flow table full".into(),
            },
        )
        .unwrap();
    });
    let e =
        respond_and_hand_over(sock, StartupPolicy::default(), vec![], None, &mut dp).unwrap_err();
    t.join().unwrap();
    assert!(
        matches!(
            e,
            SetupError::Datapath(ClientError::Refused {
                code: ErrorCode::Limit,
                ..
            })
        ),
        "{e}"
    );
    // The kernel socket was closed normally: the Initiator sees the connection end.
    let r = client.join().unwrap();
    assert!(r.is_err());
}
