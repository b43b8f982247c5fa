//! Tests of the startup phase: both roles alone against fabricated frames, and together.

use super::*;
use crate::wire::startup::{flags, KEY_REPLY, KEY_REQUEST};
use proptest::prelude::*;

const SEND: RtrType = RtrType::ZeroLengthSend;
const WRITE: RtrType = RtrType::ZeroLengthWrite;
const READ: RtrType = RtrType::ZeroLengthReadRequest;
const NO_NEG: u16 = NO_IRD_ORD_NEGOTIATION;

fn frame(key: [u8; 16], fl: u8, rev: u8, pd: &[u8]) -> Vec<u8> {
    let mut v = key.to_vec();
    v.push(fl);
    v.push(rev);
    v.extend_from_slice(&u16::try_from(pd.len()).unwrap().to_be_bytes());
    v.extend_from_slice(pd);
    v
}

fn enhanced(p2p: bool, rtr: RtrSet, ird: u16, ord: u16, ulp: &[u8]) -> Vec<u8> {
    let mut v = Rev2Params {
        peer_to_peer: p2p,
        rtr,
        ird,
        ord,
    }
    .to_bytes()
    .to_vec();
    v.extend_from_slice(ulp);
    v
}

fn parse(bytes: &[u8]) -> StartupRepr<'_> {
    StartupRepr::parse(&StartupFrame::new_checked(bytes).unwrap()).unwrap()
}

fn rev2_policy() -> StartupPolicy {
    StartupPolicy {
        revision: 2,
        ..StartupPolicy::default()
    }
}

fn p2p_policy() -> StartupPolicy {
    StartupPolicy {
        revision: 2,
        p2p: true,
        ..StartupPolicy::default()
    }
}

/// Both state machines behind one interface, for the drivers below.
trait Machine {
    fn input(&mut self, now: Instant, bytes: &[u8]) -> Result<usize, StartupError>;
    fn event(&mut self) -> Option<StartupEvent>;
    fn transmit(&mut self) -> Option<Vec<u8>>;
    fn events(&mut self) -> Vec<StartupEvent> {
        std::iter::from_fn(|| self.event()).collect()
    }
}

impl Machine for InitiatorStartup {
    fn input(&mut self, now: Instant, bytes: &[u8]) -> Result<usize, StartupError> {
        self.handle_input(now, bytes)
    }
    fn event(&mut self) -> Option<StartupEvent> {
        self.poll_event()
    }
    fn transmit(&mut self) -> Option<Vec<u8>> {
        self.poll_transmit()
    }
}

impl Machine for ResponderStartup {
    fn input(&mut self, now: Instant, bytes: &[u8]) -> Result<usize, StartupError> {
        self.handle_input(now, bytes)
    }
    fn event(&mut self) -> Option<StartupEvent> {
        self.poll_event()
    }
    fn transmit(&mut self) -> Option<Vec<u8>> {
        self.poll_transmit()
    }
}

fn established(events: &[StartupEvent]) -> &Negotiated {
    match events {
        [StartupEvent::Established(n)] => n,
        other => panic!("expected one Established event, got {other:?}"),
    }
}

fn failed(events: &[StartupEvent]) -> &StartupError {
    match events {
        [StartupEvent::Failed(e)] => e,
        other => panic!("expected one Failed event, got {other:?}"),
    }
}

fn rejected(events: &[StartupEvent]) -> &[u8] {
    match events {
        [StartupEvent::Rejected { private_data }] => private_data,
        other => panic!("expected one Rejected event, got {other:?}"),
    }
}

/// One whole exchange, each frame delivered in one piece; the Responder decides by policy.
struct Exchange {
    init: InitiatorStartup,
    resp: ResponderStartup,
    request: Vec<u8>,
    reply: Option<Vec<u8>>,
    init_events: Vec<StartupEvent>,
    resp_events: Vec<StartupEvent>,
}

fn exchange(ip: &StartupPolicy, ipd: &[u8], rp: &StartupPolicy, rpd: &[u8]) -> Exchange {
    let now = Instant::now();
    let mut init = InitiatorStartup::new(ip.clone(), ipd.to_vec(), now).unwrap();
    let mut resp = ResponderStartup::auto(rp.clone(), rpd.to_vec(), now);
    let request = init.poll_transmit().unwrap();
    assert_eq!(init.poll_transmit(), None, "the Request goes out once");
    let r = resp.handle_input(now, &request);
    let reply = resp.poll_transmit();
    if r.is_ok() {
        assert_eq!(r, Ok(request.len()));
    } else {
        assert_eq!(reply, None, "no Reply after a failed Request");
    }
    if let Some(reply) = &reply {
        let _ = init.handle_input(now, reply);
    }
    let init_events = init.events();
    let resp_events = resp.events();
    Exchange {
        init,
        resp,
        request,
        reply,
        init_events,
        resp_events,
    }
}

/// Feeds a fabricated Reply to a fresh Initiator; returns it and its events.
fn initiator_gets(
    ip: &StartupPolicy,
    reply: &[u8],
) -> (
    InitiatorStartup,
    Result<usize, StartupError>,
    Vec<StartupEvent>,
) {
    let now = Instant::now();
    let mut init = InitiatorStartup::new(ip.clone(), Vec::new(), now).unwrap();
    init.poll_transmit().unwrap();
    let r = init.handle_input(now, reply);
    let ev = init.events();
    (init, r, ev)
}

/// Feeds a fabricated Request to a fresh auto Responder; returns it, the result, the Reply
/// and the events.
fn responder_gets(
    rp: &StartupPolicy,
    request: &[u8],
) -> (
    ResponderStartup,
    Result<usize, StartupError>,
    Option<Vec<u8>>,
    Vec<StartupEvent>,
) {
    let now = Instant::now();
    let mut resp = ResponderStartup::auto(rp.clone(), Vec::new(), now);
    let r = resp.handle_input(now, request);
    let reply = resp.poll_transmit();
    let ev = resp.events();
    (resp, r, reply, ev)
}

#[test]
fn default_request_bytes() {
    let mut i =
        InitiatorStartup::new(StartupPolicy::default(), b"hello".to_vec(), Instant::now()).unwrap();
    let req = i.poll_transmit().unwrap();
    let mut want = b"MPA ID Req Frame".to_vec();
    want.extend_from_slice(&[0x40, 0x01, 0x00, 0x05]);
    want.extend_from_slice(b"hello");
    assert_eq!(req, want);
    assert_eq!(i.state(), StartupState::WaitReply);
}

#[test]
fn rev2_request_bytes() {
    let policy = StartupPolicy {
        revision: 2,
        p2p: true,
        markers_required: true,
        ird: 8,
        ord: 4,
        rtr_send: RtrSet::single(SEND).with(READ),
        ..StartupPolicy::default()
    };
    let req = InitiatorStartup::new(policy, b"x".to_vec(), Instant::now())
        .unwrap()
        .poll_transmit()
        .unwrap();
    let mut want = b"MPA ID Req Frame".to_vec();
    // M C S, Rev 2, PD_Length 5; A|B|IRD 8, D|ORD 4; "x".
    want.extend_from_slice(&[0xd0, 0x02, 0x00, 0x05, 0xc0, 0x08, 0x40, 0x04, b'x']);
    assert_eq!(req, want);
    // Revision 2 without p2p: A, B, C, D all zero.
    let req = InitiatorStartup::new(rev2_policy(), Vec::new(), Instant::now())
        .unwrap()
        .poll_transmit()
        .unwrap();
    assert_eq!(
        &req[16..],
        &[0x50, 0x02, 0x00, 0x04, 0x00, 0x08, 0x00, 0x08]
    );
}

#[test]
fn markers_and_crc_table() {
    for req_m in [false, true] {
        for req_c in [false, true] {
            for rep_m in [false, true] {
                for rep_c in [false, true] {
                    let ip = StartupPolicy {
                        markers_required: req_m,
                        crc_suppressed_by_admin: !req_c,
                        ..StartupPolicy::default()
                    };
                    let rp = StartupPolicy {
                        markers_required: rep_m,
                        crc_suppressed_by_admin: !rep_c,
                        ..StartupPolicy::default()
                    };
                    let x = exchange(&ip, b"", &rp, b"");
                    let ctx = format!("Request M={req_m} C={req_c}, Reply M={rep_m} C={rep_c}");
                    let req = parse(&x.request);
                    assert_eq!((req.markers, req.crc), (req_m, req_c), "{ctx}");
                    let reply = x.reply.clone().unwrap();
                    let rep = parse(&reply);
                    assert_eq!(
                        (rep.markers, rep.crc, rep.rejected),
                        (rep_m, rep_c, false),
                        "{ctx}"
                    );
                    let i = established(&x.init_events);
                    let r = established(&x.resp_events);
                    // RFC 5044 §7.1.1 M: each endpoint's M asks markers toward itself.
                    assert_eq!((i.markers_rx, i.markers_tx), (req_m, rep_m), "{ctx}");
                    assert_eq!((r.markers_rx, r.markers_tx), (rep_m, req_m), "{ctx}");
                    // C: CRCs both ways iff either frame has C=1.
                    assert_eq!(i.crc, req_c || rep_c, "{ctx}");
                    assert_eq!(r.crc, i.crc, "{ctx}");
                    assert_eq!(
                        i.framing(),
                        Framing {
                            markers_rx: req_m,
                            markers_tx: rep_m,
                            crc: i.crc,
                            ddp_rdmap_version: 1
                        }
                    );
                    assert_eq!(x.init.framing(), Some(i.framing()));
                    assert_eq!(
                        (i.rev, r.rev, i.ddp_rdmap_version, r.ddp_rdmap_version),
                        (1, 1, 1, 1)
                    );
                }
            }
        }
    }
}

#[test]
fn revision_combinations() {
    for (irev, accept_rev2) in [(1, true), (1, false), (2, true)] {
        let ip = StartupPolicy {
            revision: irev,
            ..StartupPolicy::default()
        };
        let rp = StartupPolicy {
            accept_rev2,
            ..StartupPolicy::default()
        };
        let x = exchange(&ip, b"pd", &rp, b"rp");
        let i = established(&x.init_events);
        let r = established(&x.resp_events);
        assert_eq!((i.rev, r.rev), (irev, irev), "rev reported is the peer's");
        assert_eq!(i.peer_private_data, b"rp");
        assert_eq!(r.peer_private_data, b"pd");
        assert_eq!(i.peer_enhanced.is_some(), irev == 2);
        assert_eq!(r.peer_enhanced.is_some(), irev == 2);
    }
    // RFC 6581 §10: an enhanced Request to a Responder without revision 2 closes.
    let rp = StartupPolicy {
        accept_rev2: false,
        ..StartupPolicy::default()
    };
    let x = exchange(&rev2_policy(), b"", &rp, b"");
    let e = failed(&x.resp_events);
    assert_eq!(e, &StartupError::EnhancedNotSupported);
    assert_eq!(
        (e.code(), e.disposition()),
        (MpaErrorCode::InvalidStartupFrame, Disposition::CloseTcp)
    );
    assert!(x.reply.is_none() && x.init_events.is_empty());
}

#[test]
fn responder_revision_rules() {
    let rp = StartupPolicy::default();
    // Unenhanced revision 2 Request → unenhanced Reply of revision 2.
    let (_, _, reply, ev) = responder_gets(&rp, &frame(KEY_REQUEST, 0, 2, b"a"));
    let reply = reply.unwrap();
    let rep = parse(&reply);
    assert_eq!((rep.rev, rep.enhanced), (2, None));
    assert_eq!(reply[16] & flags::S, 0);
    assert_eq!(established(&ev).peer_private_data, b"a");
    // Revision 1 Request with the S bit (a Res bit there) → unenhanced, revision 1.
    let (_, _, reply, ev) = responder_gets(&rp, &frame(KEY_REQUEST, flags::S, 1, &[0x80, 0, 0, 0]));
    assert_eq!(parse(&reply.unwrap()).rev, 1);
    assert_eq!(established(&ev).peer_private_data, &[0x80, 0, 0, 0]);
    // Without revision 2, an unenhanced revision 2 Request is not accepted either.
    let no2 = StartupPolicy {
        accept_rev2: false,
        ..StartupPolicy::default()
    };
    let (_, r, reply, _) = responder_gets(&no2, &frame(KEY_REQUEST, 0, 2, b""));
    assert_eq!(
        (r, reply),
        (Err(StartupError::RevisionNotAccepted(2)), None)
    );
    // Revision 3 fails right after the header, before the private data.
    let req = frame(KEY_REQUEST, 0, 3, &[0; 100]);
    let mut resp = ResponderStartup::auto(rp.clone(), Vec::new(), Instant::now());
    assert_eq!(
        resp.handle_input(Instant::now(), &req[..20]),
        Err(StartupError::Frame(StartupFrameError::UnsupportedRevision(
            3
        )))
    );
}

#[test]
fn initiator_revision_rules() {
    // A revision-1 Initiator accepts an unenhanced revision-2 Reply when revision 2 is
    // accepted, and closes when it is not.
    let reply = frame(KEY_REPLY, 0, 2, b"");
    let (_, r, ev) = initiator_gets(&StartupPolicy::default(), &reply);
    assert_eq!(r, Ok(20));
    assert_eq!(established(&ev).rev, 2);
    let no2 = StartupPolicy {
        accept_rev2: false,
        ..StartupPolicy::default()
    };
    let (_, r, _) = initiator_gets(&no2, &reply);
    assert_eq!(r, Err(StartupError::RevisionNotAccepted(2)));
    // RFC 6581 §10: the Reply's S must answer the Request's S.
    let (_, r, _) = initiator_gets(&rev2_policy(), &frame(KEY_REPLY, 0, 1, b""));
    assert_eq!(
        r,
        Err(StartupError::EnhancedMismatch {
            sent: true,
            received: false
        })
    );
    let (_, r, _) = initiator_gets(&rev2_policy(), &frame(KEY_REPLY, 0, 2, b""));
    assert_eq!(
        r,
        Err(StartupError::EnhancedMismatch {
            sent: true,
            received: false
        })
    );
    let (_, r, _) = initiator_gets(
        &StartupPolicy::default(),
        &frame(
            KEY_REPLY,
            flags::S,
            2,
            &enhanced(false, RtrSet::EMPTY, 1, 1, b""),
        ),
    );
    let e = r.unwrap_err();
    assert_eq!(
        e,
        StartupError::EnhancedMismatch {
            sent: false,
            received: true
        }
    );
    assert_eq!(
        (e.fault(), e.disposition()),
        (Fault::PeerMisbehaved, Disposition::CloseTcp)
    );
    // Revision 3.
    let (_, r, _) = initiator_gets(&StartupPolicy::default(), &frame(KEY_REPLY, 0, 3, b""));
    assert_eq!(
        r,
        Err(StartupError::Frame(StartupFrameError::UnsupportedRevision(
            3
        )))
    );
}

#[test]
fn rdmac_revision_0_peers() {
    let permissive = StartupPolicy {
        permissive: true,
        ..StartupPolicy::default()
    };
    // Appendix C.2.4: an RDMAC Initiator; the permissive Responder answers Rev 0, M=1, C=1.
    for fl in [flags::M | flags::C, 0] {
        let (_, r, reply, ev) = responder_gets(&permissive, &frame(KEY_REQUEST, fl, 0, b"rdmac"));
        assert_eq!(r, Ok(25));
        let reply = reply.unwrap();
        let rep = parse(&reply);
        assert_eq!(
            (rep.rev, rep.markers, rep.crc, rep.rejected),
            (0, true, true, false)
        );
        let n = established(&ev);
        assert_eq!(
            (
                n.rev,
                n.ddp_rdmap_version,
                n.markers_rx,
                n.markers_tx,
                n.crc
            ),
            (0, 0, true, true, true)
        );
    }
    // Non-permissive: close (RFC 5044 §7.1.1 Rev), no Reply.
    let (_, r, reply, ev) =
        responder_gets(&StartupPolicy::default(), &frame(KEY_REQUEST, 0xc0, 0, b""));
    assert_eq!(r, Err(StartupError::RevisionNotAccepted(0)));
    assert_eq!(reply, None);
    assert_eq!(failed(&ev).disposition(), Disposition::CloseTcp);
    // Appendix C.2.5: a permissive Initiator getting a Rev 0 Reply uses version 0, markers
    // and CRC, whatever its own M said.
    let ip = StartupPolicy {
        permissive: true,
        crc_suppressed_by_admin: true,
        ..StartupPolicy::default()
    };
    let (_, r, ev) = initiator_gets(&ip, &frame(KEY_REPLY, flags::M | flags::C, 0, b""));
    assert_eq!(r, Ok(20));
    let n = established(&ev);
    assert_eq!(
        (
            n.rev,
            n.ddp_rdmap_version,
            n.markers_rx,
            n.markers_tx,
            n.crc
        ),
        (0, 0, true, true, true)
    );
    let (_, r, _) = initiator_gets(
        &StartupPolicy::default(),
        &frame(KEY_REPLY, flags::M | flags::C, 0, b""),
    );
    assert_eq!(r, Err(StartupError::RevisionNotAccepted(0)));
    // A permissive Responder that will not add markers rejects the RDMAC peer.
    let no_markers = StartupPolicy {
        markers_tx_allowed: false,
        ..permissive
    };
    let (resp, _, reply, ev) = responder_gets(&no_markers, &frame(KEY_REQUEST, 0xc0, 0, b""));
    assert!(parse(&reply.unwrap()).rejected);
    assert_eq!(rejected(&ev), no_markers.reject_reason.as_slice());
    assert_eq!(resp.reject_cause(), Some(RejectCause::Markers));
}

#[test]
fn initiator_initiator_is_detected() {
    let now = Instant::now();
    let mut a = InitiatorStartup::new(StartupPolicy::default(), vec![1; 100], now).unwrap();
    let mut b = InitiatorStartup::new(StartupPolicy::default(), vec![2; 100], now).unwrap();
    let ra = a.poll_transmit().unwrap();
    let rb = b.poll_transmit().unwrap();
    // Detected from the header alone, before the private data arrives.
    let e = a.handle_input(now, &rb[..20]).unwrap_err();
    assert_eq!(e, StartupError::InitiatorInitiator);
    assert_eq!(
        (e.code(), e.fault(), e.disposition()),
        (
            MpaErrorCode::InvalidStartupFrame,
            Fault::Incompatible,
            Disposition::CloseTcp
        )
    );
    assert_eq!(
        b.handle_input(now, &ra),
        Err(StartupError::InitiatorInitiator)
    );
    assert_eq!(failed(&a.events()), &StartupError::InitiatorInitiator);
    assert_eq!(a.state(), StartupState::Failed);
    // Sticky.
    assert_eq!(
        a.handle_input(now, &rb[20..]),
        Err(StartupError::InitiatorInitiator)
    );
    assert_eq!(a.error(), Some(&StartupError::InitiatorInitiator));
    assert!(a.events().is_empty(), "the failure is reported once");
    // The frame-level error tells the two kinds apart as well.
    let f = StartupFrame::new_checked(&rb[..]).unwrap();
    assert_eq!(
        StartupRepr::parse_expected(&f, FrameKind::Reply),
        Err(StartupFrameError::UnexpectedKind {
            expected: FrameKind::Reply,
            found: FrameKind::Request
        })
    );
}

#[test]
fn responder_rejects_a_reply_key() {
    let (resp, r, reply, ev) =
        responder_gets(&StartupPolicy::default(), &frame(KEY_REPLY, 0, 1, b""));
    assert_eq!(r, Err(StartupError::UnexpectedReply));
    assert_eq!(failed(&ev), &StartupError::UnexpectedReply);
    assert_eq!(reply, None);
    assert_eq!(resp.state(), StartupState::Failed);
}

#[test]
fn wrong_key_closes() {
    let mut bad = frame(KEY_REQUEST, 0, 1, b"");
    bad[0] = b'm';
    let (_, r, _, _) = responder_gets(&StartupPolicy::default(), &bad);
    let e = r.unwrap_err();
    assert!(
        matches!(e, StartupError::Frame(StartupFrameError::UnknownKey { .. })),
        "{e:?}"
    );
    assert_eq!(
        (e.code(), e.fault(), e.disposition()),
        (
            MpaErrorCode::InvalidStartupFrame,
            Fault::PeerMisbehaved,
            Disposition::CloseTcp
        )
    );
    let mut bad = frame(KEY_REPLY, 0, 1, b"");
    bad[15] = 0;
    let (_, r, _) = initiator_gets(&StartupPolicy::default(), &bad);
    assert!(matches!(
        r,
        Err(StartupError::Frame(StartupFrameError::UnknownKey { .. }))
    ));
}

#[test]
fn streaming_private_data() {
    let now = Instant::now();
    for pd_len in [0usize, 1, 100, 511, 512] {
        let req = frame(KEY_REQUEST, 0x40, 1, &vec![9u8; pd_len]);
        let mut resp = ResponderStartup::auto(StartupPolicy::default(), Vec::new(), now);
        // Fewer octets than PD_Length announces: more data is needed, not an error.
        let half = 20 + pd_len / 2;
        assert_eq!(resp.handle_input(now, &req[..half]), Ok(half));
        if half < req.len() {
            assert_eq!(resp.state(), StartupState::WaitRequest);
            assert!(resp.poll_event().is_none() && resp.poll_transmit().is_none());
        }
        assert_eq!(resp.handle_input(now, &req[half..]), Ok(req.len() - half));
        assert_eq!(established(&resp.events()).peer_private_data.len(), pd_len);
        assert_eq!(resp.bytes_consumed(), req.len());
    }
    // PD_Length 513: refused as soon as the header is in (RFC 5044 §7.1.1).
    let mut hdr = frame(KEY_REQUEST, 0, 1, b"");
    hdr[18..20].copy_from_slice(&513u16.to_be_bytes());
    let mut resp = ResponderStartup::auto(StartupPolicy::default(), Vec::new(), now);
    assert_eq!(resp.handle_input(now, &hdr[..19]), Ok(19));
    assert_eq!(
        resp.handle_input(now, &hdr[19..]),
        Err(StartupError::Frame(StartupFrameError::PdLengthTooLarge(
            513
        )))
    );
    // Same at the Initiator.
    let mut rhdr = frame(KEY_REPLY, 0, 1, b"");
    rhdr[18..20].copy_from_slice(&0xffffu16.to_be_bytes());
    let (_, r, _) = initiator_gets(&StartupPolicy::default(), &rhdr);
    assert_eq!(
        r,
        Err(StartupError::Frame(StartupFrameError::PdLengthTooLarge(
            0xffff
        )))
    );
}

#[test]
fn private_data_buffer_limit() {
    let rp = StartupPolicy {
        max_private_data: 50,
        ..StartupPolicy::default()
    };
    let (_, r, _, _) = responder_gets(&rp, &frame(KEY_REQUEST, 0, 1, &[0; 50]));
    assert_eq!(r, Ok(70));
    let req = frame(KEY_REQUEST, 0, 1, &[0; 51]);
    let mut resp = ResponderStartup::auto(rp.clone(), Vec::new(), Instant::now());
    // RFC 5044 §7.1.2 rule 9: refused from the header, before buffering the private data.
    let e = resp.handle_input(Instant::now(), &req[..20]).unwrap_err();
    assert_eq!(
        e,
        StartupError::PrivateDataExceedsBuffer {
            pd_length: 51,
            buffer: 50
        }
    );
    assert_eq!(
        (e.code(), e.disposition()),
        (MpaErrorCode::InvalidStartupFrame, Disposition::CloseTcp)
    );
    let ip = StartupPolicy {
        max_private_data: 3,
        ..StartupPolicy::default()
    };
    let (_, r, _) = initiator_gets(&ip, &frame(KEY_REPLY, 0, 1, b"four"));
    assert_eq!(
        r,
        Err(StartupError::PrivateDataExceedsBuffer {
            pd_length: 4,
            buffer: 3
        })
    );
}

#[test]
fn r_in_request_and_res_are_ignored() {
    let (_, r, reply, ev) = responder_gets(
        &StartupPolicy::default(),
        &frame(KEY_REQUEST, flags::R | flags::RES | flags::C, 1, b""),
    );
    assert_eq!(r, Ok(20));
    let reply = reply.unwrap();
    assert!(!parse(&reply).rejected);
    assert_eq!(
        reply[16] & (flags::R | flags::RES),
        0,
        "R and Res zero on send"
    );
    assert!(established(&ev).crc);
    let (_, r, ev) = initiator_gets(
        &StartupPolicy::default(),
        &frame(KEY_REPLY, flags::RES, 1, b""),
    );
    assert_eq!(r, Ok(20));
    established(&ev);
}

#[test]
fn timeouts() {
    let t0 = Instant::now();
    let ten = Duration::from_secs(10);
    let almost = t0 + ten - Duration::from_millis(1);

    let mut i = InitiatorStartup::new(StartupPolicy::default(), Vec::new(), t0).unwrap();
    assert_eq!(i.poll_timeout(), Some(t0 + ten));
    i.handle_timeout(almost);
    assert_eq!(i.state(), StartupState::WaitReply);
    assert!(i.poll_event().is_none());
    i.handle_timeout(t0 + ten);
    let e = failed(&i.events()).clone();
    assert_eq!(e, StartupError::Timeout(Awaiting::Reply));
    assert_eq!(
        (e.code(), e.fault(), e.disposition()),
        (
            MpaErrorCode::InvalidStartupFrame,
            Fault::Transport,
            Disposition::CloseTcp
        )
    );
    assert_eq!(i.poll_timeout(), None);
    assert_eq!(i.poll_transmit(), None, "nothing is sent after a failure");
    assert_eq!(
        i.handle_input(t0 + ten, &frame(KEY_REPLY, 0, 1, b"")),
        Err(e)
    );

    // Input that arrives at the deadline does not count.
    let mut i = InitiatorStartup::new(StartupPolicy::default(), Vec::new(), t0).unwrap();
    assert_eq!(
        i.handle_input(t0 + ten, b"MPA"),
        Err(StartupError::Timeout(Awaiting::Reply))
    );

    // Responder/Responder: the wait for the Request times out (RFC 5044 §7.1.2 rule 8).
    let short = StartupPolicy {
        startup_timeout: Duration::from_secs(1),
        ..StartupPolicy::default()
    };
    let mut r = ResponderStartup::auto(short.clone(), Vec::new(), t0);
    assert_eq!(r.poll_timeout(), Some(t0 + Duration::from_secs(1)));
    assert_eq!(
        r.handle_input(t0, &frame(KEY_REQUEST, 0, 1, b"abc")[..10]),
        Ok(10)
    );
    r.handle_timeout(t0 + Duration::from_millis(999));
    assert_eq!(r.state(), StartupState::WaitRequest);
    r.handle_timeout(t0 + Duration::from_secs(1));
    assert_eq!(
        failed(&r.events()),
        &StartupError::Timeout(Awaiting::Request)
    );
    assert_eq!(
        r.handle_input(t0, b"x"),
        Err(StartupError::Timeout(Awaiting::Request))
    );

    // Explicit mode: a ULP that does not decide in time.
    let mut r = ResponderStartup::new(short, t0);
    assert_eq!(r.handle_input(t0, &frame(KEY_REQUEST, 0, 1, b"")), Ok(20));
    assert!(matches!(r.events()[..], [StartupEvent::RequestReceived(_)]));
    assert_eq!(r.poll_timeout(), Some(t0 + Duration::from_secs(1)));
    r.handle_timeout(t0 + Duration::from_secs(1));
    assert_eq!(
        failed(&r.events()),
        &StartupError::Timeout(Awaiting::Decision)
    );
    assert_eq!(
        r.accept(Vec::new()),
        Err(StartupError::Timeout(Awaiting::Decision))
    );
    assert_eq!(r.poll_transmit(), None);

    // After the startup, time no longer matters.
    let mut x = exchange(
        &StartupPolicy::default(),
        b"",
        &StartupPolicy::default(),
        b"",
    );
    x.init.handle_timeout(t0 + ten * 100);
    x.resp.handle_timeout(t0 + ten * 100);
    assert_eq!((x.init.poll_timeout(), x.resp.poll_timeout()), (None, None));
    assert_eq!(
        (x.init.state(), x.resp.state()),
        (StartupState::FullOperation, StartupState::FullOperation)
    );

    // A timeout too large for Instant means no deadline, not a panic.
    let forever = StartupPolicy {
        startup_timeout: Duration::MAX,
        ..StartupPolicy::default()
    };
    let mut i = InitiatorStartup::new(forever.clone(), Vec::new(), t0).unwrap();
    assert_eq!(i.poll_timeout(), None);
    i.handle_timeout(t0 + ten * 1000);
    assert_eq!(i.state(), StartupState::WaitReply);
    assert_eq!(
        ResponderStartup::auto(forever, Vec::new(), t0).poll_timeout(),
        None
    );
}

#[test]
fn reject_by_private_data_rule_with_reason() {
    let rp = StartupPolicy {
        private_data_rule: PrivateDataRule::RequirePrefix(b"APP1".to_vec()),
        reject_reason: b"wrong application".to_vec(),
        ..StartupPolicy::default()
    };
    let x = exchange(&StartupPolicy::default(), b"APP2 hello", &rp, b"never sent");
    let reply = x.reply.clone().unwrap();
    let rep = parse(&reply);
    assert!(rep.rejected);
    assert_eq!(rep.private_data, b"wrong application");
    assert_eq!(rejected(&x.resp_events), b"wrong application");
    assert_eq!(x.resp.reject_cause(), Some(RejectCause::PrivateData));
    assert_eq!(x.resp.state(), StartupState::Rejected);
    // RFC 5044 §7.1.2 rule 3: R=1 → rejected, TCP left open.
    assert_eq!(rejected(&x.init_events), b"wrong application");
    assert_eq!(x.init.reject_cause(), Some(RejectCause::Peer));
    assert_eq!(x.init.state(), StartupState::Rejected);
    assert_eq!(x.init.error(), None);
    let mut init = x.init;
    assert_eq!(init.handle_input(Instant::now(), b"more"), Ok(0));

    // Accepted with the right prefix.
    let x = exchange(&StartupPolicy::default(), b"APP1 hello", &rp, b"welcome");
    assert_eq!(established(&x.init_events).peer_private_data, b"welcome");

    // MaxLen.
    let rp = StartupPolicy {
        private_data_rule: PrivateDataRule::MaxLen(3),
        ..StartupPolicy::default()
    };
    assert!(matches!(
        exchange(&StartupPolicy::default(), b"abc", &rp, b"").resp_events[..],
        [StartupEvent::Established(_)]
    ));
    let x = exchange(&StartupPolicy::default(), b"abcd", &rp, b"");
    assert_eq!(rejected(&x.init_events), rp.reject_reason.as_slice());
    assert!(PrivateDataRule::AcceptAny.accepts(&[0; 512]));
}

#[test]
fn enhanced_reject_carries_ird_ord() {
    // RFC 6581 §9.1: the Responder may reject an initiator IRD below the ORD it needs and
    // say the needed ORD in the Reply; the Initiator passes it to the ULP.
    let ip = StartupPolicy {
        revision: 2,
        ird: 4,
        ord: 4,
        ..StartupPolicy::default()
    };
    let rp = StartupPolicy {
        required_ord: 6,
        ..StartupPolicy::default()
    };
    let x = exchange(&ip, b"", &rp, b"");
    assert_eq!(
        x.resp.reject_cause(),
        Some(RejectCause::InsufficientIrd {
            initiator_ird: 4,
            required_ord: 6
        })
    );
    let reply = x.reply.clone().unwrap();
    let rep = parse(&reply);
    assert!(rep.rejected);
    assert_eq!(rep.enhanced.map(|e| e.ord), Some(6));
    rejected(&x.init_events);
    assert_eq!(x.init.peer_enhanced().map(|e| e.ord), Some(6));
    // Enough IRD: accepted. 0x3FFF (no negotiation) is not "too small".
    for ird in [6, NO_NEG] {
        let ip = StartupPolicy { ird, ..ip.clone() };
        established(&exchange(&ip, b"", &rp, b"").init_events);
    }
}

#[test]
fn initiator_private_data_rule() {
    let ip = StartupPolicy {
        private_data_rule: PrivateDataRule::RequirePrefix(b"OK".to_vec()),
        ..StartupPolicy::default()
    };
    let reply = frame(KEY_REPLY, 0, 1, b"NO");
    let (i, r, ev) = initiator_gets(&ip, &[&reply[..], &b"fpdu"[..]].concat());
    let e = r.unwrap_err();
    assert_eq!(e, StartupError::PrivateDataNotAcceptable);
    // RFC 5044 §7.1.2 rule 3: exit MPA, TCP left open; the Reply's octets were consumed.
    assert_eq!(
        (e.disposition(), e.fault()),
        (Disposition::LeaveTcpOpen, Fault::Incompatible)
    );
    assert_eq!(failed(&ev), &e);
    assert_eq!(i.bytes_consumed(), reply.len());
    let (_, r, _) = initiator_gets(&ip, &frame(KEY_REPLY, 0, 1, b"OK!"));
    assert_eq!(r, Ok(23));
}

#[test]
fn explicit_responder() {
    let now = Instant::now();
    let mut resp = ResponderStartup::new(StartupPolicy::default(), now);
    assert_eq!(
        resp.accept(Vec::new()),
        Err(StartupError::InvalidCall("accept"))
    );
    assert_eq!(
        resp.reject(Vec::new()),
        Err(StartupError::InvalidCall("reject"))
    );
    assert_eq!(
        StartupError::InvalidCall("accept").disposition(),
        Disposition::Unaffected
    );
    assert_eq!(
        resp.state(),
        StartupState::WaitRequest,
        "misuse is not sticky"
    );
    let mut init = InitiatorStartup::new(
        StartupPolicy {
            markers_required: true,
            ..rev2_policy()
        },
        b"who".to_vec(),
        now,
    )
    .unwrap();
    let req = init.poll_transmit().unwrap();
    assert_eq!(resp.handle_input(now, &req), Ok(req.len()));
    assert_eq!(resp.handle_input(now, b"later"), Ok(0));
    assert!(resp.poll_transmit().is_none());
    let info = match &resp.events()[..] {
        [StartupEvent::RequestReceived(info)] => info.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (
            info.rev,
            info.markers,
            info.crc,
            info.private_data.as_slice()
        ),
        (2, true, true, &b"who"[..])
    );
    assert_eq!(info.enhanced.map(|e| (e.ird, e.ord)), Some((8, 8)));
    assert!(info.negotiated.markers_tx);
    assert_eq!(resp.state(), StartupState::WaitDecision);
    // Too long for an enhanced Reply: refused, nothing changes.
    assert_eq!(
        resp.accept(vec![0; 509]),
        Err(StartupError::PrivateDataTooLong { len: 509, max: 508 })
    );
    assert_eq!(resp.state(), StartupState::WaitDecision);
    resp.accept(b"welcome".to_vec()).unwrap();
    assert_eq!(
        resp.accept(Vec::new()),
        Err(StartupError::InvalidCall("accept"))
    );
    let n = established(&resp.events()).clone();
    assert_eq!(n, info.negotiated);
    let reply = resp.poll_transmit().unwrap();
    assert_eq!(init.handle_input(now, &reply), Ok(reply.len()));
    assert_eq!(established(&init.events()).peer_private_data, b"welcome");

    // Explicit rejection with the ULP's reason.
    let mut resp = ResponderStartup::new(StartupPolicy::default(), now);
    let mut init = InitiatorStartup::new(StartupPolicy::default(), Vec::new(), now).unwrap();
    resp.handle_input(now, &init.poll_transmit().unwrap())
        .unwrap();
    resp.events();
    assert!(resp.reject(vec![0; 513]).is_err());
    resp.reject(b"busy".to_vec()).unwrap();
    assert_eq!(rejected(&resp.events()), b"busy");
    assert_eq!(resp.reject_cause(), Some(RejectCause::Ulp));
    let reply = resp.poll_transmit().unwrap();
    init.handle_input(now, &reply).unwrap();
    assert_eq!(rejected(&init.events()), b"busy");

    // Policy rejections do not wait for the ULP.
    let rp = StartupPolicy {
        private_data_rule: PrivateDataRule::MaxLen(0),
        ..StartupPolicy::default()
    };
    let mut resp = ResponderStartup::new(rp, now);
    resp.handle_input(now, &frame(KEY_REQUEST, 0, 1, b"x"))
        .unwrap();
    rejected(&resp.events());
    assert!(parse(&resp.poll_transmit().unwrap()).rejected);
}

#[test]
fn markers_tx_not_allowed() {
    let no_markers = StartupPolicy {
        markers_tx_allowed: false,
        ..StartupPolicy::default()
    };
    let wants = StartupPolicy {
        markers_required: true,
        ..StartupPolicy::default()
    };
    // Responder: a Request with M=1 is rejected (R=1).
    let x = exchange(&wants, b"", &no_markers, b"");
    assert_eq!(x.resp.reject_cause(), Some(RejectCause::Markers));
    rejected(&x.init_events);
    // M=0: fine.
    established(&exchange(&StartupPolicy::default(), b"", &no_markers, b"").resp_events);
    // Initiator: a Reply with M=1 fails it.
    let x = exchange(&no_markers, b"", &wants, b"");
    established(&x.resp_events);
    let e = failed(&x.init_events);
    assert_eq!(e, &StartupError::MarkersNotAllowed);
    assert_eq!(
        (e.fault(), e.disposition()),
        (Fault::Incompatible, Disposition::CloseTcp)
    );
}

#[test]
fn crc_suppressed_by_admin() {
    let off = StartupPolicy {
        crc_suppressed_by_admin: true,
        ..StartupPolicy::default()
    };
    let on = StartupPolicy::default();
    // The peer's C=1 keeps CRCs on in both directions.
    for (ip, rp, crc) in [
        (&off, &on, true),
        (&on, &off, true),
        (&off, &off, false),
        (&on, &on, true),
    ] {
        let x = exchange(ip, b"", rp, b"");
        assert_eq!(established(&x.init_events).crc, crc);
        assert_eq!(established(&x.resp_events).crc, crc);
        assert_eq!(parse(&x.request).crc, !ip.crc_suppressed_by_admin);
    }
}

#[test]
fn rtr_negotiation_table() {
    let sets: Vec<RtrSet> = (1u8..8)
        .map(|bits| {
            RtrType::ALL
                .iter()
                .enumerate()
                .filter(|(i, _)| bits & (1 << i) != 0)
                .map(|(_, t)| *t)
                .collect()
        })
        .collect();
    for &send in &sets {
        for &support in &sets {
            let ip = StartupPolicy {
                rtr_send: send,
                ..p2p_policy()
            };
            let rp = StartupPolicy {
                rtr_support: support,
                ..StartupPolicy::default()
            };
            let x = exchange(&ip, b"", &rp, b"");
            let ctx = format!("send {send:?}, support {support:?}");
            let r = established(&x.resp_events);
            let reply = x.reply.clone().unwrap();
            let offered = parse(&reply).enhanced.unwrap();
            assert!(offered.peer_to_peer && r.p2p, "{ctx}");
            let matched = send.intersection(support);
            // RFC 6581 §9.2: the matching options, or at least one supported.
            let want_offer = if matched.is_empty() { support } else { matched };
            assert_eq!(offered.rtr, want_offer, "{ctx}");
            assert_eq!(r.rtr_accepted(), want_offer.as_slice(), "{ctx}");
            assert_eq!(r.rtr, None);
            match matched.first() {
                Some(t) => {
                    let i = established(&x.init_events);
                    assert_eq!(i.rtr, Some(t), "{ctx}");
                    assert!(i.p2p);
                    assert!(r.rtr_accepted().contains(&t), "{ctx}");
                }
                None => {
                    let e = failed(&x.init_events);
                    assert_eq!(
                        e,
                        &StartupError::NoMatchingRtr {
                            can_send: send,
                            supported: support
                        },
                        "{ctx}"
                    );
                    assert_eq!(e.code(), MpaErrorCode::NoMatchingRtr);
                    assert_eq!(e.code().code(), 7);
                    assert_eq!(e.disposition(), Disposition::TerminateThenClose);
                    assert!(
                        x.init.framing().is_some(),
                        "the Terminate needs the framing"
                    );
                }
            }
        }
    }
    // Preference: Send, then Write, then Read.
    let x = exchange(&p2p_policy(), b"", &StartupPolicy::default(), b"");
    assert_eq!(established(&x.init_events).rtr, Some(SEND));
    assert_eq!(established(&x.init_events).rtr_options, RtrSet::ALL);
}

#[test]
fn client_server_model_has_no_rtr() {
    let x = exchange(&rev2_policy(), b"", &StartupPolicy::default(), b"");
    let reply = x.reply.clone().unwrap();
    // A=0: B, C, D sent as 0.
    assert_eq!(reply[20] & 0xc0, 0);
    assert_eq!(reply[22] & 0xc0, 0);
    for n in [established(&x.init_events), established(&x.resp_events)] {
        assert!(!n.p2p);
        assert_eq!((n.rtr, n.rtr_options), (None, RtrSet::EMPTY));
        assert!(n.rtr_accepted().is_empty());
    }
}

#[test]
fn connection_model_mismatch_is_code_7() {
    let reply = frame(
        KEY_REPLY,
        flags::S,
        2,
        &enhanced(false, RtrSet::EMPTY, 8, 8, b""),
    );
    let (i, r, _) = initiator_gets(&p2p_policy(), &reply);
    let e = r.unwrap_err();
    assert_eq!(
        e,
        StartupError::ConnectionModelMismatch {
            requested: true,
            replied: false
        }
    );
    assert_eq!(
        (e.code(), e.disposition()),
        (MpaErrorCode::NoMatchingRtr, Disposition::TerminateThenClose)
    );
    assert_eq!(i.framing().map(|f| f.ddp_rdmap_version), Some(1));
    let reply = frame(
        KEY_REPLY,
        flags::S,
        2,
        &enhanced(true, RtrSet::ALL, 8, 8, b""),
    );
    let (_, r, _) = initiator_gets(&rev2_policy(), &reply);
    assert_eq!(
        r,
        Err(StartupError::ConnectionModelMismatch {
            requested: false,
            replied: true
        })
    );
}

#[test]
fn read_rtr_needs_an_inbound_read_slot() {
    let ip = StartupPolicy {
        rtr_send: RtrSet::single(READ),
        ord: 0,
        ..p2p_policy()
    };
    // Responder IRD 0: the Read RTR cannot be used.
    let reply = frame(
        KEY_REPLY,
        flags::S,
        2,
        &enhanced(true, RtrSet::single(READ), 0, 0, b""),
    );
    let (_, r, _) = initiator_gets(&ip, &reply);
    assert!(matches!(r, Err(StartupError::NoMatchingRtr { .. })));
    // IRD 1: chosen, and our ORD becomes 1 for it.
    let reply = frame(
        KEY_REPLY,
        flags::S,
        2,
        &enhanced(true, RtrSet::single(READ), 1, 0, b""),
    );
    let (_, _, ev) = initiator_gets(&ip, &reply);
    let n = established(&ev);
    assert_eq!((n.rtr, n.ord), (Some(READ), 1));
    // The Responder raises its IRD to 1 for an offered Read RTR (RFC 6581 §9.1 example).
    let x = exchange(&ip, b"", &StartupPolicy::default(), b"");
    let r = established(&x.resp_events);
    assert_eq!(r.ird, 1);
    assert_eq!(established(&x.init_events).rtr, Some(READ));
    // A Responder with IRD 0 does not offer the Read RTR.
    let rp = StartupPolicy {
        ird: 0,
        ..StartupPolicy::default()
    };
    let x = exchange(&ip, b"", &rp, b"");
    let reply = x.reply.clone().unwrap();
    assert_eq!(
        parse(&reply).enhanced.unwrap().rtr,
        RtrSet::single(SEND).with(WRITE)
    );
    assert!(matches!(
        failed(&x.init_events),
        StartupError::NoMatchingRtr { .. }
    ));
}

#[test]
fn ird_ord_negotiation() {
    let ip = StartupPolicy {
        revision: 2,
        ird: 4,
        ord: 16,
        ..StartupPolicy::default()
    };
    let rp = StartupPolicy {
        ird: 8,
        ord: 8,
        ..StartupPolicy::default()
    };
    let x = exchange(&ip, b"", &rp, b"");
    let reply = x.reply.clone().unwrap();
    let e = parse(&reply).enhanced.unwrap();
    assert_eq!((e.ird, e.ord), (8, 4));
    let i = established(&x.init_events);
    let r = established(&x.resp_events);
    assert_eq!((i.ird, i.ord), (4, 8));
    assert_eq!((r.ird, r.ord), (8, 4));
    assert_eq!(i.peer_enhanced.map(|p| (p.ird, p.ord)), Some((8, 4)));
    assert_eq!(r.peer_enhanced.map(|p| (p.ird, p.ord)), Some((4, 16)));

    // Initiator ORD 0x3FFF: the Responder answers IRD 0x3FFF and keeps its own; the
    // Initiator keeps its ORD.
    let x = exchange(
        &StartupPolicy {
            ord: NO_NEG,
            ..ip.clone()
        },
        b"",
        &rp,
        b"",
    );
    let reply = x.reply.clone().unwrap();
    assert_eq!(parse(&reply).enhanced.unwrap().ird, NO_NEG);
    assert_eq!(established(&x.resp_events).ird, 8);
    assert_eq!(established(&x.init_events).ord, NO_NEG);
    // Initiator IRD 0x3FFF: the Responder answers ORD 0x3FFF and keeps its own.
    let x = exchange(
        &StartupPolicy {
            ird: NO_NEG,
            ..ip.clone()
        },
        b"",
        &rp,
        b"",
    );
    let reply = x.reply.clone().unwrap();
    assert_eq!(parse(&reply).enhanced.unwrap().ord, NO_NEG);
    assert_eq!(established(&x.resp_events).ord, 8);
    assert_eq!(established(&x.init_events).ird, NO_NEG);
    // A Reply with IRD/ORD 0x3FFF leaves the Initiator's values unchanged.
    let reply = frame(
        KEY_REPLY,
        flags::S,
        2,
        &enhanced(false, RtrSet::EMPTY, NO_NEG, NO_NEG, b""),
    );
    let (_, _, ev) = initiator_gets(&ip, &reply);
    let n = established(&ev);
    assert_eq!((n.ird, n.ord), (4, 16));

    // The Responder's ORD above our IRD: insufficient IRD resources, code 6.
    let reply = frame(
        KEY_REPLY,
        flags::S,
        2,
        &enhanced(false, RtrSet::EMPTY, 8, 9, b""),
    );
    let (i, r, ev) = initiator_gets(&ip, &reply);
    let e = r.unwrap_err();
    assert_eq!(
        e,
        StartupError::InsufficientIrd {
            required: 9,
            available: 4
        }
    );
    assert_eq!(
        (e.code(), e.code().code(), e.disposition()),
        (
            MpaErrorCode::InsufficientIrd,
            6,
            Disposition::TerminateThenClose
        )
    );
    assert_eq!(failed(&ev), &e);
    assert_eq!(
        i.framing(),
        Some(Framing {
            markers_rx: false,
            markers_tx: false,
            crc: true,
            ddp_rdmap_version: 1
        })
    );
    assert_eq!(i.peer_enhanced().map(|p| p.ord), Some(9));
}

#[test]
fn policy_validation() {
    let now = Instant::now();
    let d = StartupPolicy::default;
    let cases = [
        (
            StartupPolicy { revision: 0, ..d() },
            PolicyError::Revision(0),
        ),
        (
            StartupPolicy { revision: 3, ..d() },
            PolicyError::Revision(3),
        ),
        (
            StartupPolicy {
                revision: 2,
                accept_rev2: false,
                ..d()
            },
            PolicyError::Rev2NotAccepted,
        ),
        (
            StartupPolicy { p2p: true, ..d() },
            PolicyError::P2pNeedsRev2,
        ),
        (
            StartupPolicy {
                rtr_send: RtrSet::EMPTY,
                ..p2p_policy()
            },
            PolicyError::NoRtrToSend,
        ),
        (
            StartupPolicy {
                rtr_support: RtrSet::EMPTY,
                ..d()
            },
            PolicyError::NoRtrSupported,
        ),
        (
            StartupPolicy {
                rtr_support: RtrSet::single(READ),
                ird: 0,
                ..d()
            },
            PolicyError::NoRtrSupported,
        ),
        (
            StartupPolicy { ird: 0x4000, ..d() },
            PolicyError::IrdOrdOutOfRange(0x4000),
        ),
        (
            StartupPolicy { ord: 0xffff, ..d() },
            PolicyError::IrdOrdOutOfRange(0xffff),
        ),
        (
            StartupPolicy {
                required_ord: 0x4000,
                ..d()
            },
            PolicyError::IrdOrdOutOfRange(0x4000),
        ),
        (
            StartupPolicy {
                reject_reason: vec![0; 509],
                ..d()
            },
            PolicyError::RejectReasonTooLong { len: 509, max: 508 },
        ),
        (
            StartupPolicy {
                reject_reason: vec![0; 513],
                accept_rev2: false,
                ..d()
            },
            PolicyError::RejectReasonTooLong { len: 513, max: 512 },
        ),
    ];
    for (p, want) in cases {
        assert_eq!(p.validate(), Err(want));
        let e = InitiatorStartup::new(p.clone(), Vec::new(), now).unwrap_err();
        assert_eq!(e, StartupError::InvalidPolicy(want));
        assert_eq!(
            (e.fault(), e.code(), e.disposition()),
            (
                Fault::LocalMisuse,
                MpaErrorCode::LocalCatastrophic,
                Disposition::Unaffected
            )
        );
        // A Responder cannot refuse construction: it starts failed.
        let mut r = ResponderStartup::new(p, now);
        assert_eq!(r.state(), StartupState::Failed);
        assert_eq!(
            r.handle_input(now, &frame(KEY_REQUEST, 0, 1, b"")),
            Err(StartupError::InvalidPolicy(want))
        );
        assert_eq!(failed(&r.events()), &StartupError::InvalidPolicy(want));
    }
    assert_eq!(d().validate(), Ok(()));
    assert_eq!(
        StartupPolicy {
            rtr_support: RtrSet::single(READ),
            ird: 0,
            accept_rev2: false,
            ..d()
        }
        .validate(),
        Ok(())
    );
    // Private data that does not fit.
    assert_eq!(
        InitiatorStartup::new(d(), vec![0; 513], now).unwrap_err(),
        StartupError::PrivateDataTooLong { len: 513, max: 512 }
    );
    assert!(InitiatorStartup::new(d(), vec![0; 512], now).is_ok());
    assert_eq!(
        InitiatorStartup::new(rev2_policy(), vec![0; 509], now).unwrap_err(),
        StartupError::PrivateDataTooLong { len: 509, max: 508 }
    );
    let mut r = ResponderStartup::auto(d(), vec![0; 509], now);
    assert_eq!(
        r.error(),
        Some(&StartupError::PrivateDataTooLong { len: 509, max: 508 })
    );
    assert!(r.handle_input(now, b"").is_err());
}

#[test]
fn error_classification_table() {
    use StartupError as E;
    let rtr = RtrSet::EMPTY;
    let table: Vec<(E, Fault, u8, Disposition)> = vec![
        (
            E::Frame(StartupFrameError::PdLengthTooLarge(600)),
            Fault::PeerMisbehaved,
            4,
            Disposition::CloseTcp,
        ),
        (
            E::Frame(StartupFrameError::UnsupportedRevision(9)),
            Fault::Incompatible,
            4,
            Disposition::CloseTcp,
        ),
        (
            E::InitiatorInitiator,
            Fault::Incompatible,
            4,
            Disposition::CloseTcp,
        ),
        (
            E::UnexpectedReply,
            Fault::PeerMisbehaved,
            4,
            Disposition::CloseTcp,
        ),
        (
            E::PrivateDataExceedsBuffer {
                pd_length: 2,
                buffer: 1,
            },
            Fault::Incompatible,
            4,
            Disposition::CloseTcp,
        ),
        (
            E::RevisionNotAccepted(0),
            Fault::Incompatible,
            4,
            Disposition::CloseTcp,
        ),
        (
            E::EnhancedNotSupported,
            Fault::Incompatible,
            4,
            Disposition::CloseTcp,
        ),
        (
            E::EnhancedMismatch {
                sent: true,
                received: false,
            },
            Fault::PeerMisbehaved,
            4,
            Disposition::CloseTcp,
        ),
        (
            E::MarkersNotAllowed,
            Fault::Incompatible,
            4,
            Disposition::CloseTcp,
        ),
        (
            E::PrivateDataNotAcceptable,
            Fault::Incompatible,
            4,
            Disposition::LeaveTcpOpen,
        ),
        (
            E::ConnectionModelMismatch {
                requested: true,
                replied: false,
            },
            Fault::PeerMisbehaved,
            7,
            Disposition::TerminateThenClose,
        ),
        (
            E::NoMatchingRtr {
                can_send: rtr,
                supported: rtr,
            },
            Fault::Incompatible,
            7,
            Disposition::TerminateThenClose,
        ),
        (
            E::InsufficientIrd {
                required: 2,
                available: 1,
            },
            Fault::Incompatible,
            6,
            Disposition::TerminateThenClose,
        ),
        (
            E::Timeout(Awaiting::Request),
            Fault::Transport,
            4,
            Disposition::CloseTcp,
        ),
        (
            E::PrivateDataTooLong { len: 1, max: 0 },
            Fault::LocalMisuse,
            5,
            Disposition::Unaffected,
        ),
        (
            E::InvalidCall("accept"),
            Fault::LocalMisuse,
            5,
            Disposition::Unaffected,
        ),
    ];
    for (e, fault, code, disp) in table {
        assert_eq!(
            (e.fault(), e.code().code(), e.disposition()),
            (fault, code, disp),
            "{e}"
        );
        assert!(!e.to_string().is_empty());
    }
}

#[test]
fn extra_octets_after_each_frame_are_left_alone() {
    let now = Instant::now();
    let mut init = InitiatorStartup::new(StartupPolicy::default(), b"req".to_vec(), now).unwrap();
    let mut resp = ResponderStartup::auto(StartupPolicy::default(), b"rep".to_vec(), now);
    let req = init.poll_transmit().unwrap();
    let with_extra = [&req[..], &[0xde, 0xad][..]].concat();
    assert_eq!(resp.handle_input(now, &with_extra), Ok(req.len()));
    assert_eq!(resp.handle_input(now, &with_extra[req.len()..]), Ok(0));
    let reply = resp.poll_transmit().unwrap();
    assert_eq!(resp.poll_transmit(), None, "the Reply goes out once");
    // The first FPDU follows the Reply in the same read.
    let fpdu = [
        0x00, 0x0e, 0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0xeb, 0xd3, 0x4c, 0x5f,
    ];
    let stream = [&reply[..], &fpdu[..]].concat();
    assert_eq!(init.handle_input(now, &stream), Ok(reply.len()));
    assert_eq!(init.handle_input(now, &stream[reply.len()..]), Ok(0));
    assert_eq!(init.bytes_consumed(), reply.len());
    established(&init.events());
}

#[test]
fn fuzz_entry_point_samples() {
    let req = InitiatorStartup::new(p2p_policy(), b"fuzz".to_vec(), Instant::now())
        .unwrap()
        .poll_transmit()
        .unwrap();
    let reply = frame(
        KEY_REPLY,
        flags::S | flags::M,
        2,
        &enhanced(true, RtrSet::ALL, 3, 3, b"\0ok"),
    );
    let mut samples: Vec<Vec<u8>> = vec![
        vec![],
        vec![0],
        req.clone(),
        reply.clone(),
        [&reply[..], &[1, 2, 3][..]].concat(),
        [&req[..], &req[..]].concat(),
        frame(KEY_REQUEST, 0xff, 0, &[0; 512]),
        frame(KEY_REPLY, 0xff, 1, b"\0"),
        frame(KEY_REPLY, 0x20, 2, b""),
        vec![0xff; 700],
    ];
    for n in 0..req.len() {
        samples.push(req[..n].to_vec());
    }
    let mut big = frame(KEY_REQUEST, 0, 1, b"");
    big[18] = 2;
    samples.push(big);
    for s in &samples {
        fuzz_startup(s);
        for first in [1u8, 7, 40] {
            let mut t = s.clone();
            if let Some(b) = t.first_mut() {
                *b = first;
            }
            fuzz_startup(&t);
        }
    }
}

fn arb_policy() -> impl Strategy<Value = StartupPolicy> {
    (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        1u8..8,
        1u8..8,
        prop_oneof![Just(NO_NEG), 0u16..20],
        prop_oneof![Just(NO_NEG), 0u16..20],
        any::<bool>(),
    )
        .prop_map(
            |(markers, crc_off, enhanced, send, support, ird, ord, p2p)| {
                let set = |bits: u8| -> RtrSet {
                    RtrType::ALL
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| bits & (1 << i) != 0)
                        .map(|(_, t)| *t)
                        .collect()
                };
                StartupPolicy {
                    revision: if enhanced { 2 } else { 1 },
                    p2p: enhanced && p2p,
                    markers_required: markers,
                    crc_suppressed_by_admin: crc_off,
                    rtr_send: set(send),
                    rtr_support: set(support).with(SEND),
                    ird,
                    ord,
                    ..StartupPolicy::default()
                }
            },
        )
}

/// Delivers `bytes` to `m` in chunks of the given sizes (cycled); returns the octets
/// consumed in all. Stops feeding a chunk's rest once the machine took less than offered.
fn deliver(
    m: &mut impl Machine,
    now: Instant,
    bytes: &[u8],
    chunks: &[usize],
) -> Result<usize, StartupError> {
    let mut off = 0;
    let mut k = 0;
    let mut consumed = 0;
    while off < bytes.len() {
        let n = chunks.get(k % chunks.len()).copied().unwrap_or(1).max(1);
        k += 1;
        let end = (off + n).min(bytes.len());
        let took = m.input(now, &bytes[off..end])?;
        assert!(took <= end - off);
        consumed += took;
        if took < end - off {
            // The frame ended inside this chunk: the machine must take nothing more.
            assert_eq!(m.input(now, &bytes[off + took..]), Ok(0));
            return Ok(consumed);
        }
        off = end;
    }
    Ok(consumed)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Two endpoints driving each other (quinn's `Pair`), frames split in random chunks and
    /// followed by FPDU octets that are not theirs to take.
    #[test]
    fn pair_in_random_chunks(
        ip in arb_policy(),
        rp in arb_policy(),
        ipd in proptest::collection::vec(any::<u8>(), 0..=508),
        rpd in proptest::collection::vec(any::<u8>(), 0..=508),
        extra in proptest::collection::vec(any::<u8>(), 0..64),
        chunks in proptest::collection::vec(1usize..64, 1..8),
    ) {
        let now = Instant::now();
        let mut init = InitiatorStartup::new(ip.clone(), ipd.clone(), now).unwrap();
        let mut resp = ResponderStartup::auto(rp.clone(), rpd.clone(), now);
        let req = init.transmit().unwrap();
        let stream = [&req[..], &extra[..]].concat();
        prop_assert_eq!(deliver(&mut resp, now, &stream, &chunks), Ok(req.len()));
        let reply = resp.transmit().unwrap();
        let stream = [&reply[..], &extra[..]].concat();
        let r = deliver(&mut init, now, &stream, &chunks);
        let ie = init.events();
        let re = resp.events();
        let rn = established(&re).clone();
        match (&ie[..], r) {
            ([StartupEvent::Established(i)], Ok(n)) => {
                prop_assert_eq!(n, reply.len());
                prop_assert_eq!(init.bytes_consumed(), reply.len());
                prop_assert_eq!(i.markers_rx, rn.markers_tx);
                prop_assert_eq!(i.markers_tx, rn.markers_rx);
                prop_assert_eq!(i.markers_rx, ip.markers_required);
                prop_assert_eq!(i.markers_tx, rp.markers_required);
                prop_assert_eq!(i.crc, rn.crc);
                prop_assert_eq!(i.crc, !ip.crc_suppressed_by_admin || !rp.crc_suppressed_by_admin);
                prop_assert_eq!(&i.peer_private_data, &rpd);
                prop_assert_eq!(&rn.peer_private_data, &ipd);
                prop_assert_eq!(i.p2p, rn.p2p);
                prop_assert_eq!(i.p2p, ip.p2p);
                if let Some(t) = i.rtr {
                    prop_assert!(rn.rtr_accepted().contains(&t));
                    prop_assert!(ip.rtr_send.contains(t));
                } else {
                    prop_assert!(!i.p2p);
                }
                if ip.revision == 2 {
                    // RFC 6581 §9.1 after success.
                    if ip.ord != NO_NEG && rp.ird != NO_NEG {
                        prop_assert!(i.ord <= rn.ird);
                    }
                    if rp.ord != NO_NEG && ip.ird != NO_NEG {
                        prop_assert!(rn.ord <= i.ird);
                    }
                }
            }
            ([StartupEvent::Failed(e)], Err(e2)) => {
                prop_assert_eq!(e, &e2);
                prop_assert!(matches!(e, StartupError::NoMatchingRtr { .. }), "{:?}", e);
                prop_assert_eq!(init.bytes_consumed(), reply.len());
            }
            (other, r) => prop_assert!(false, "unexpected {:?} / {:?}", other, r),
        }
    }

    #[test]
    fn fuzz_startup_never_panics(data in proptest::collection::vec(any::<u8>(), 0..700)) {
        fuzz_startup(&data);
    }

    #[test]
    fn fuzz_startup_on_mutated_frames(
        reply in any::<bool>(),
        pos in 0usize..40,
        val in any::<u8>(),
        pd in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let mut f = frame(if reply { KEY_REPLY } else { KEY_REQUEST }, 0x40, 2, &pd);
        if let Some(b) = f.get_mut(pos) {
            *b = val;
        }
        fuzz_startup(&f);
    }
}
