//! Connections from the application (docs/consumer.md, "Connections from the application"):
//! an application listens, sees each Request with its private data, accepts or rejects it,
//! and connects, all through the datapath and the connection manager (`mpa-control serve` in
//! ns b, no configured listener); kernel MPA peers in ns a. Domains stay private: a hand-over
//! goes only into the domain of the application that asked, and one application cannot name
//! another's domain, listener or connection request.

use mpa::endpoint::{EndpointConfig, EndpointError, MpaStream};
use mpa::startup::PrivateDataRule;
use mpa::wire::ddp::{DdpRepr, RdmapOpcode};
use mpa_app::{ConnectionEvent, Consumer, ConsumerError, MappedRegion};
use mpa_ctl_proto::client::ClientError;
use mpa_ctl_proto::cm::{CmEvent, ConnectOptions, ListenOptions};
use mpa_ctl_proto::{CompletionKind, ErrorCode};
use mpa_datapath::server::Datapath;
use mpa_tests::{
    datapath, initiator_in_a, listen_in, require_privileged, BedConfig, ControlDaemon,
    DatapathOptions, TestBed,
};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

/// A datapath in ns b and a connection manager serving applications beside it.
struct Bed {
    bed: TestBed,
    socket: PathBuf,
    _daemon: ControlDaemon,
    _dp: Datapath,
}

fn bed() -> Bed {
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, socket) = datapath(&bed, &DatapathOptions::default());
    let config = mpa_harness::temp_path("app-cm.toml");
    std::fs::write(
        &config,
        format!("datapath_socket = \"{}\"\n", socket.display()),
    )
    .unwrap();
    let daemon = ControlDaemon::start(&bed, &config, "info");
    daemon.wait_line(&["serving applications"]);
    Bed {
        bed,
        socket,
        _daemon: daemon,
        _dp: dp,
    }
}

fn app(b: &Bed) -> Consumer {
    Consumer::connect(&b.socket, Duration::from_secs(10)).unwrap()
}

/// The next connection-manager event; panics on anything else or after [`WAIT`].
#[track_caller]
fn cm_event(c: &mut Consumer) -> CmEvent {
    match c.wait_connection_event(WAIT).unwrap() {
        Some(ConnectionEvent::Cm(e)) => e,
        e => panic!("a connection-manager event expected, got {e:?}"),
    }
}

#[track_caller]
fn refused<T: std::fmt::Debug>(what: &str, code: ErrorCode, r: Result<T, ConsumerError>) -> String {
    match r {
        Err(ConsumerError::Client(ClientError::Refused { code: c, message })) if c == code => {
            message
        }
        r => panic!("{what}: {code:?} expected, got {r:?}"),
    }
}

/// An application with a domain, a region peers may write and a subscription.
fn app_with_region(b: &Bed) -> (Consumer, u32, MappedRegion) {
    let mut c = app(b);
    let pd = c.alloc_pd().unwrap();
    let region = c.create_region(1 << 16, pd, true, false).unwrap();
    c.subscribe(pd).unwrap();
    (c, pd, region)
}

/// An Initiator in ns a with `private_data`: on success it writes `n` octets at tagged
/// offset 0 of `stag` (the pattern of `frames::rdma_write`) and returns the Reply's private
/// data; a rejection returns the rejecting Reply's private data as the error.
fn initiator(
    b: &Bed,
    to: SocketAddr,
    private_data: &[u8],
    stag: u32,
    n: usize,
) -> std::thread::JoinHandle<Result<Vec<u8>, Vec<u8>>> {
    let h = initiator_kept(b, to, private_data, stag, n);
    std::thread::spawn(move || h.join().unwrap().map(|(reply, _)| reply))
}

/// What [`initiator_kept`] gives: the Reply's private data and the open connection, or the
/// rejecting Reply's private data.
type Kept = Result<(Vec<u8>, MpaStream<TcpStream>), Vec<u8>>;

/// [`initiator`], and the connection kept open.
fn initiator_kept(
    b: &Bed,
    to: SocketAddr,
    private_data: &[u8],
    stag: u32,
    n: usize,
) -> std::thread::JoinHandle<Kept> {
    let mut cfg = EndpointConfig::default();
    cfg.policy.revision = 2;
    cfg.policy.startup_timeout = Duration::from_secs(15);
    cfg.private_data = private_data.to_vec();
    initiator_in_a(&b.bed, to, cfg, move |_, s| match s {
        Ok(mut s) => {
            let reply = s.negotiated().peer_private_data.clone();
            s.send(&mpa_tests::frames::rdma_write(stag, 0, n)).unwrap();
            s.flush().unwrap();
            Ok((reply, s))
        }
        Err(EndpointError::Rejected { private_data }) => Err(private_data),
        Err(e) => panic!("initiator: {e}"),
    })
}

/// The region holds `n` octets of the `frames::rdma_write` pattern from offset 0.
fn placed(c: &mut Consumer, region: &MappedRegion, n: usize) {
    let batch = c
        .next_completions(std::time::Instant::now() + WAIT)
        .unwrap()
        .unwrap_or_else(|| panic!("no completion within {WAIT:?}"));
    assert_eq!(batch.len(), 1, "{batch:?}");
    let cpl = &batch[0];
    assert_eq!(
        (cpl.kind, cpl.stag, cpl.offset, cpl.len),
        (CompletionKind::WritePlaced, region.info().stag, 0, n as u64),
        "{cpl:?}"
    );
    let mut got = vec![0u8; n];
    assert!(region.read(0, &mut got));
    let want: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    assert_eq!(got, want, "placed octets");
}

/// A kernel MPA peer in ns a, listening: it accepts one connection, takes the application's
/// 1000-octet Write, runs `then` on the connection, and resets it once told to (its address,
/// the teller, the thread).
fn resetting_peer(
    b: &Bed,
    then: impl FnOnce(&mut MpaStream<TcpStream>) + Send + 'static,
) -> (
    SocketAddr,
    std::sync::mpsc::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let listener = listen_in(&b.bed.ns_a, SocketAddr::new(b.bed.addr_a(false), 0));
    let at = listener.local_addr().unwrap();
    let (reset_tx, reset_rx) = std::sync::mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        let (sock, _) = listener.accept().unwrap();
        let mut s = MpaStream::accept(sock, &EndpointConfig::default()).unwrap();
        let mut got = 0;
        while got < 1000 {
            let more = s
                .recv_with(Some(WAIT), |u| {
                    got += u.len() - mpa::wire::ddp::TAGGED_HEADER_LEN;
                })
                .unwrap();
            assert!(more.is_some(), "the Write");
        }
        then(&mut s);
        s.flush().unwrap();
        reset_rx.recv_timeout(WAIT).unwrap();
        // A reset: SO_LINGER 0, then close.
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        nix::sys::socket::setsockopt(s.get_ref(), nix::sys::socket::sockopt::Linger, &linger)
            .unwrap();
    });
    (at, reset_tx, peer)
}

/// A Send ULPDU (queue 0, message `msn`, last) of `len` octets `fill`.
fn send_ulpdu(msn: u32, fill: u8, len: usize) -> Vec<u8> {
    let h = DdpRepr::Untagged {
        last: true,
        opcode: RdmapOpcode::Send,
        inv_stag: 0,
        qn: 0,
        msn,
        mo: 0,
    };
    let mut u = vec![fill; h.header_len() + len];
    h.emit(&mut u, 1).unwrap();
    u
}

#[test]
fn an_application_listens_sees_the_private_data_and_accepts_or_rejects() {
    if !require_privileged("application listen/accept/reject") {
        return;
    }
    let b = bed();
    let (mut c, pd, region) = app_with_region(&b);
    let stag = region.info().stag;
    let bind = SocketAddr::new(b.bed.addr_b(false), 0);
    let (listen_id, bound) = c.listen(pd, bind, ListenOptions::default()).unwrap();
    assert_ne!(bound.port(), 0, "the port chosen is reported");

    // Accepted: the Request's private data reaches the application, the Reply's the peer.
    let peer = initiator(&b, bound, b"hello from a", stag, 3000);
    let CmEvent::ConnectRequest {
        listen_id: l,
        conn_id,
        params,
        peer_ird_ord,
    } = cm_event(&mut c)
    else {
        panic!("ConnectRequest expected");
    };
    assert_eq!(l, listen_id);
    assert_eq!(params.private_data, b"hello from a");
    assert_eq!(params.peer.ip(), b.bed.addr_a(false));
    assert_eq!(params.local, SocketAddr::new(bound.ip(), bound.port()));
    assert_eq!(params.revision, 2);
    assert_eq!(
        peer_ird_ord,
        Some((8, 8)),
        "the Initiator's IRD/ORD as sent"
    );
    c.accept(conn_id, b"welcome").unwrap();
    let CmEvent::Established {
        conn_id: established,
        flow_id,
        params,
    } = cm_event(&mut c)
    else {
        panic!("Established expected");
    };
    assert_eq!(established, conn_id);
    assert_eq!(params.private_data, b"hello from a");
    assert!(flow_id > 0);
    assert_eq!(peer.join().unwrap(), Ok(b"welcome".to_vec()));
    placed(&mut c, &region, 3000);
    // The peer closed once its Write was out: the end comes after the setup's events.
    match c.wait_connection_event(WAIT).unwrap() {
        Some(ConnectionEvent::Ended(e)) => {
            assert_eq!(
                (e.flow_id, e.mpa_error, e.terminate),
                (flow_id, None, None),
                "{e:?}"
            )
        }
        e => panic!("the connection's end expected, got {e:?}"),
    }

    // Rejected: the peer gets our private data, nothing is handed over.
    let peer = initiator(&b, bound, b"second", stag, 10);
    let CmEvent::ConnectRequest {
        conn_id, params, ..
    } = cm_event(&mut c)
    else {
        panic!("ConnectRequest expected");
    };
    assert_eq!(params.private_data, b"second");
    c.reject(conn_id, b"not today").unwrap();
    assert_eq!(peer.join().unwrap(), Err(b"not today".to_vec()));
    // A decision on a request already decided is refused.
    refused(
        "second decision",
        ErrorCode::BadRequest,
        c.accept(conn_id, b""),
    );

    // Stopped: the port no longer accepts.
    c.stop_listening(listen_id).unwrap();
    let to = bound;
    let closed = mpa_testbed::run_in_netns(&b.bed.ns_a, move || {
        let t0 = std::time::Instant::now();
        // The accept loop closes the socket within its poll period.
        loop {
            match TcpStream::connect_timeout(&to, Duration::from_secs(2)) {
                Err(e) => return e.kind(),
                Ok(_) if t0.elapsed() > Duration::from_secs(5) => panic!("still accepting"),
                Ok(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    })
    .unwrap();
    assert_eq!(closed, std::io::ErrorKind::ConnectionRefused);
    assert_eq!(c.connection_events().unwrap(), vec![]);
}

#[test]
fn an_application_connects_and_learns_established_rejected_or_unreachable() {
    if !require_privileged("application connect") {
        return;
    }
    let b = bed();
    let (mut c, pd, _region) = app_with_region(&b);
    let a = b.bed.addr_a(false);

    // Established: our Request's private data reaches the peer, its Reply's reaches us.
    let listener = listen_in(&b.bed.ns_a, SocketAddr::new(a, 0));
    let at = listener.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let (sock, _) = listener.accept().unwrap();
        let cfg = EndpointConfig {
            private_data: b"responder says hi".to_vec(),
            ..EndpointConfig::default()
        };
        let s = MpaStream::accept(sock, &cfg).unwrap();
        (s.negotiated().peer_private_data.clone(), s)
    });
    let options = ConnectOptions {
        private_data: b"initiator app".to_vec(),
        ..ConnectOptions::default()
    };
    let conn_id = c.connect_to(pd, at, options).unwrap();
    let CmEvent::Established {
        conn_id: got,
        flow_id,
        params,
    } = cm_event(&mut c)
    else {
        panic!("Established expected");
    };
    assert_eq!(got, conn_id);
    assert_eq!(params.private_data, b"responder says hi");
    assert_eq!(params.peer, at);
    let (request, _s) = peer.join().unwrap();
    assert_eq!(request, b"initiator app");
    c.finish_flow(flow_id).unwrap();

    // Rejected by the peer's policy: its reason comes back.
    let listener = listen_in(&b.bed.ns_a, SocketAddr::new(a, 0));
    let at = listener.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let (sock, _) = listener.accept().unwrap();
        let mut cfg = EndpointConfig::default();
        cfg.policy.private_data_rule = PrivateDataRule::RequirePrefix(b"iser".to_vec());
        cfg.policy.reject_reason = b"iser only".to_vec();
        matches!(
            MpaStream::accept(sock, &cfg),
            Err(EndpointError::RejectedPeer { .. })
        )
    });
    let conn_id = c.connect_to(pd, at, ConnectOptions::default()).unwrap();
    assert_eq!(
        cm_event(&mut c),
        CmEvent::Rejected {
            conn_id,
            private_data: b"iser only".to_vec()
        }
    );
    assert!(peer.join().unwrap());

    // Unreachable: nobody listens there (the peer resets the SYN).
    let dead = listen_in(&b.bed.ns_a, SocketAddr::new(a, 0));
    let at = dead.local_addr().unwrap();
    drop(dead);
    let conn_id = c.connect_to(pd, at, ConnectOptions::default()).unwrap();
    match cm_event(&mut c) {
        CmEvent::Unreachable {
            conn_id: got,
            reason,
        } => {
            assert_eq!(got, conn_id);
            assert!(reason.contains("refused"), "{reason}");
        }
        e => panic!("Unreachable expected, got {e:?}"),
    }
}

#[test]
fn applications_cannot_name_each_others_domains_listeners_or_requests() {
    if !require_privileged("application isolation") {
        return;
    }
    let b = bed();
    let (mut one, pd_one, region) = app_with_region(&b);
    let (mut two, pd_two, _r2) = app_with_region(&b);
    assert_ne!(pd_one, pd_two);
    let bind = SocketAddr::new(b.bed.addr_b(false), 0);

    // Each listens on its own port and sees only its own requests.
    let (l1, at1) = one.listen(pd_one, bind, ListenOptions::default()).unwrap();
    let (_l2, at2) = two.listen(pd_two, bind, ListenOptions::default()).unwrap();
    assert_ne!(at1.port(), at2.port());
    let m = "another application's domain";
    refused(
        m,
        ErrorCode::Forbidden,
        two.listen(pd_one, bind, ListenOptions::default()),
    );
    refused(
        m,
        ErrorCode::Forbidden,
        two.connect_to(pd_one, at1, ConnectOptions::default()),
    );
    refused(
        m,
        ErrorCode::Forbidden,
        two.create_region(4096, pd_one, true, true),
    );
    refused(m, ErrorCode::Forbidden, two.subscribe(pd_one));
    refused(m, ErrorCode::Forbidden, two.dealloc_pd(pd_one));
    refused(
        "another's listener",
        ErrorCode::BadRequest,
        two.stop_listening(l1),
    );
    // A domain number nobody was given cannot be claimed.
    refused(
        "an unallocated domain",
        ErrorCode::Forbidden,
        two.create_region(4096, pd_two + 1000, true, true),
    );

    let peer = initiator_kept(&b, at1, b"for one", region.info().stag, 100);
    let CmEvent::ConnectRequest { conn_id, .. } = cm_event(&mut one) else {
        panic!("ConnectRequest expected");
    };
    refused(
        "another's request",
        ErrorCode::BadRequest,
        two.accept(conn_id, b"mine"),
    );
    refused(
        "another's request",
        ErrorCode::BadRequest,
        two.reject(conn_id, b"no"),
    );
    assert_eq!(two.connection_events().unwrap(), vec![]);
    one.accept(conn_id, b"ok").unwrap();
    let CmEvent::Established { flow_id, .. } = cm_event(&mut one) else {
        panic!("Established expected");
    };
    let (reply, _open) = peer.join().unwrap().unwrap();
    assert_eq!(reply, b"ok");
    placed(&mut one, &region, 100);
    // Another application (a process without CAP_NET_ADMIN, as applications run) neither
    // ends nor sees the connection or the region.
    assert_eq!(as_application(&b, "finish", flow_id), "Forbidden");
    assert_eq!(as_application(&b, "sees-flow", flow_id), "no");
    assert_eq!(as_application(&b, "regions", 0), "0");
    refused(m, ErrorCode::BadRequest, one.dealloc_pd(pd_one));
    assert_eq!(two.connection_events().unwrap(), vec![]);
}

/// The connection manager itself (an operator) cannot put a connection into an
/// application's domain that did not ask for it: a made-up or redirected hand-over is
/// refused and nothing is placed.
#[test]
fn a_hand_over_goes_only_into_the_domain_whose_application_asked() {
    if !require_privileged("hand-over domain rule") {
        return;
    }
    let b = bed();
    let (mut c, pd, region) = app_with_region(&b);
    let addr = SocketAddr::new(b.bed.addr_b(false), 7811);
    let listener = listen_in(&b.bed.ns_b, addr);
    let resp = mpa_tests::Responder {
        placement: mpa_control::Placement {
            pd: Some(pd),
            aligned_sender: false,
            conn_id: None,
        },
        ..mpa_tests::Responder::framing(false, true)
    };
    let mut cfg = EndpointConfig::default();
    cfg.policy.startup_timeout = Duration::from_secs(3);
    let stag = region.info().stag;
    let peer = initiator_in_a(&b.bed, addr, cfg, move |_, s| {
        let mut s = s?;
        s.send(&mpa_tests::frames::rdma_write(stag, 0, 100))?;
        s.flush()
    });
    let refused = match mpa_tests::accept_and_hand_over(&b.bed.ns_b, &b.socket, &listener, &resp) {
        Ok(_) => panic!("a hand-over into an application's domain it did not ask for"),
        Err(e) => format!("{e:#}"),
    };
    assert!(refused.contains("is an application's"), "{refused}");
    // The Initiator never saw its Reply (the datapath would have sent it): nothing placed.
    assert!(peer.join().unwrap().is_err());
    assert_eq!(c.poll_completions(&mut Vec::new()).unwrap(), 0);
    let mut got = vec![0u8; 100];
    assert!(region.read(0, &mut got));
    assert_eq!(got, vec![0u8; 100]);
}

/// Runs `op` on `arg` in a child process without CAP_NET_ADMIN (an application, not an
/// operator): this test binary again, [`probe_as_application`] only, through `setpriv`.
/// Returns what the probe printed.
fn as_application(b: &Bed, op: &str, arg: u64) -> String {
    let out = std::process::Command::new("setpriv")
        .args(["--inh-caps=-net_admin", "--bounding-set=-net_admin", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "app_connections::probe_as_application",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("APP_PROBE_SOCKET", &b.socket)
        .env("APP_PROBE_OP", op)
        .env("APP_PROBE_ARG", arg.to_string())
        .output()
        .expect("setpriv (util-linux)");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.split_once("PROBE: ").map(|(_, a)| a.trim()))
        .unwrap_or_else(|| {
            panic!(
                "no probe answer: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .to_string()
}

/// The child of [`as_application`]; does nothing when run as a test.
#[test]
fn probe_as_application() {
    let (Some(socket), Some(op), Some(arg)) = (
        std::env::var_os("APP_PROBE_SOCKET"),
        std::env::var("APP_PROBE_OP").ok(),
        std::env::var("APP_PROBE_ARG").ok(),
    ) else {
        return;
    };
    let arg: u64 = arg.parse().unwrap();
    let mut c = Consumer::connect(std::path::Path::new(&socket), Duration::from_secs(10)).unwrap();
    let answer = match op.as_str() {
        "finish" => match c.finish_flow(arg) {
            Ok(()) => "Ok".to_string(),
            Err(ConsumerError::Client(ClientError::Refused { code, .. })) => format!("{code:?}"),
            Err(e) => format!("{e}"),
        },
        "sees-flow" => {
            let mut dpc = mpa_ctl_proto::client::ControlClient::connect(
                std::path::Path::new(&socket),
                Duration::from_secs(10),
            )
            .unwrap();
            let stats = dpc.stats().unwrap();
            let seen = stats.live_flows().any(|(_, f)| f.flow_id == arg);
            if seen { "yes" } else { "no" }.to_string()
        }
        "regions" => c.regions(None).unwrap().len().to_string(),
        op => panic!("unknown probe {op}"),
    };
    println!("PROBE: {answer}");
}

/// An application's work requests on a connection it made, against a kernel peer in ns a:
/// a Write posted over the control socket completes with its id and success; receive buffers
/// posted with ids complete flushed, with those ids, when the peer resets the connection;
/// then the connection's end comes, and a post on it is refused.
#[test]
fn work_requests_complete_with_their_ids_and_a_reset_flushes_the_rest() {
    if !require_privileged("application work requests") {
        return;
    }
    use mpa_ctl_proto::ring::post::{PostOp, SgList, WorkRequest};
    use mpa_ctl_proto::{CompletionStatus, PostTarget};
    let b = bed();
    let (mut c, pd, region) = app_with_region(&b);
    let stag = region.info().stag;
    let (at, reset_tx, peer) = resetting_peer(&b, |_| {});
    let conn_id = c.connect_to(pd, at, ConnectOptions::default()).unwrap();
    let CmEvent::Established { flow_id, .. } = cm_event(&mut c) else {
        panic!("Established expected");
    };
    assert!(conn_id > 0);
    c.post_recv_wr(PostTarget::Flow(flow_id), stag, 8192, 1024, 3, 700)
        .unwrap();
    let wr = WorkRequest {
        flow_id,
        wr_id: 42,
        sg_list: SgList::one(stag, 0, 1000),
        count: 1,
        op: PostOp::Write {
            sink_stag: 0x77,
            sink_to: 0,
        },
        signaled: true,
        solicited: false,
        fence: false,
    };
    assert_eq!(c.post_via_socket(&wr).unwrap(), None);
    let done = c
        .next_completions(std::time::Instant::now() + WAIT)
        .unwrap()
        .expect("the Write's completion");
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(
        (done[0].kind, done[0].wr_id, done[0].status),
        (CompletionKind::WriteSent, 42, CompletionStatus::Success)
    );
    reset_tx.send(()).unwrap();
    peer.join().unwrap();
    // The reset: the three buffers flushed with their ids, then the end.
    let mut flushed = Vec::new();
    let t0 = std::time::Instant::now();
    while flushed.len() < 3 && t0.elapsed() < WAIT {
        if let Some(batch) = c
            .next_completions(std::time::Instant::now() + WAIT)
            .unwrap()
        {
            flushed.extend(batch);
        }
    }
    let got: Vec<_> = flushed
        .iter()
        .map(|c| (c.kind, c.wr_id, c.status, c.offset))
        .collect();
    let flushed_buf = |i: u64| {
        (
            CompletionKind::SendArrived,
            700 + i,
            CompletionStatus::Flushed,
            8192 + i * 1024,
        )
    };
    assert_eq!(got, vec![flushed_buf(0), flushed_buf(1), flushed_buf(2)]);
    match c.wait_connection_event(WAIT).unwrap() {
        Some(ConnectionEvent::Ended(e)) => assert_eq!(e.flow_id, flow_id, "{e:?}"),
        e => panic!("the connection's end expected, got {e:?}"),
    }
    refused(
        "a post on the ended connection",
        ErrorCode::UnknownFlow,
        c.post_via_socket(&wr),
    );
}

/// Completion queues: with a send CQ and a receive CQ set for its domain before it connects,
/// a connection's own Write completes on the send CQ, the peer's Write and Send on the receive
/// CQ, and so does the receive buffer its reset flushes; the domain's stream stays empty. CQs
/// of two domains make no pair, and a CQ in use is not destroyed.
#[test]
fn a_connections_completions_split_into_its_send_and_receive_cqs() {
    if !require_privileged("completion queues") {
        return;
    }
    use mpa_ctl_proto::ring::post::{PostOp, WorkRequest};
    use mpa_ctl_proto::{Completion, CompletionStatus as S, PostTarget};
    let b = bed();
    let (mut c, pd, region) = app_with_region(&b);
    let stag = region.info().stag;
    let send_cq = c.create_cq(pd, 64).unwrap();
    let recv_cq = c.create_cq(pd, 64).unwrap();
    c.set_domain_cqs(send_cq, recv_cq).unwrap();
    // What CQs refuse.
    let other_pd = c.alloc_pd().unwrap();
    assert!(matches!(
        c.create_cq(other_pd, 64),
        Err(ConsumerError::NotSubscribed(p)) if p == other_pd
    ));
    c.subscribe(other_pd).unwrap();
    let foreign = c.create_cq(other_pd, 64).unwrap();
    assert!(matches!(
        c.bind_cqs(1, send_cq, foreign),
        Err(ConsumerError::CqDomains { .. })
    ));
    assert!(matches!(
        c.create_cq(pd, 0),
        Err(ConsumerError::CqCapacity(0))
    ));
    assert!(matches!(
        c.destroy_cq(send_cq),
        Err(ConsumerError::CqBusy(_))
    ));
    assert!(matches!(
        c.poll_cq(999, &mut Vec::new(), 1),
        Err(ConsumerError::UnknownCq(999))
    ));
    c.destroy_cq(foreign).unwrap();

    let (at, reset_tx, peer) = resetting_peer(&b, move |s| {
        // A Write into the application's region, then a Send into its first buffer.
        s.send(&mpa_tests::frames::rdma_write(stag, 0, 500))
            .unwrap();
        s.send(&send_ulpdu(1, 7, 100)).unwrap();
    });
    c.connect_to(pd, at, ConnectOptions::default()).unwrap();
    let CmEvent::Established { flow_id, .. } = cm_event(&mut c) else {
        panic!("Established expected");
    };
    c.post_recv_wr(PostTarget::Flow(flow_id), stag, 8192, 1024, 2, 700)
        .unwrap();
    let wr = WorkRequest::new(
        flow_id,
        42,
        PostOp::Write {
            sink_stag: 0x77,
            sink_to: 0,
        },
        stag,
        0,
        1000,
        1,
    );
    c.post_via_socket(&wr).unwrap();
    let until = |c: &mut mpa_app::Consumer, cq: u32, n: usize| -> Vec<(CompletionKind, u64, S)> {
        let mut got: Vec<Completion> = Vec::new();
        let deadline = std::time::Instant::now() + WAIT;
        while got.len() < n && std::time::Instant::now() < deadline {
            c.wait_cq(cq, &mut got, 16, deadline).unwrap();
        }
        got.iter().map(|x| (x.kind, x.wr_id, x.status)).collect()
    };
    assert_eq!(
        until(&mut c, send_cq, 1),
        [(CompletionKind::WriteSent, 42, S::Success)]
    );
    assert_eq!(
        until(&mut c, recv_cq, 2),
        [
            (CompletionKind::WritePlaced, 0, S::Success),
            (CompletionKind::SendArrived, 700, S::Success)
        ]
    );
    reset_tx.send(()).unwrap();
    peer.join().unwrap();
    assert_eq!(
        until(&mut c, recv_cq, 1),
        [(CompletionKind::SendArrived, 701, S::Flushed)]
    );
    let mut stream = Vec::new();
    assert_eq!(c.poll_completions(&mut stream).unwrap(), 0, "{stream:?}");
    assert!(
        c.poll_cq(send_cq, &mut stream, 16).unwrap() == 0,
        "{stream:?}"
    );
}

/// A domain's shared receive queue: buffers posted to the domain before its connections
/// exist are drawn by both of them as their Sends arrive, each connection's in MSN order; a
/// connection that draws from it posts no buffers of its own.
#[test]
fn two_connections_draw_from_their_domains_shared_receive_queue() {
    if !require_privileged("a shared receive queue") {
        return;
    }
    use mpa_ctl_proto::PostTarget;
    let b = bed();
    let (mut c, pd, region) = app_with_region(&b);
    let stag = region.info().stag;
    c.post_recv_wr(PostTarget::Pd(pd), stag, 0, 1024, 4, 100)
        .unwrap();
    let (_listen_id, bound) = c
        .listen(
            pd,
            SocketAddr::new(b.bed.addr_b(false), 0),
            ListenOptions::default(),
        )
        .unwrap();
    // Two Initiators, each two Sends of its own octets (MSN 1 and 2), then it waits.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let done_rx = std::sync::Arc::new(std::sync::Mutex::new(done_rx));
    let peer = |fill: u8| {
        let mut cfg = EndpointConfig::default();
        cfg.policy.revision = 2;
        cfg.policy.startup_timeout = Duration::from_secs(15);
        let done = done_rx.clone();
        initiator_in_a(&b.bed, bound, cfg, move |_, s| {
            let mut s = s.expect("accepted");
            for msn in 1..=2u32 {
                s.send(&send_ulpdu(msn, fill + msn as u8, 200)).unwrap();
            }
            s.flush().unwrap();
            let _ = done.lock().unwrap().recv_timeout(WAIT);
        })
    };
    let mut flows = Vec::new();
    let mut peers = Vec::new();
    for fill in [0x10u8, 0x20] {
        peers.push(peer(fill));
        let CmEvent::ConnectRequest { conn_id, .. } = cm_event(&mut c) else {
            panic!("ConnectRequest expected");
        };
        c.accept(conn_id, b"").unwrap();
        let CmEvent::Established { flow_id, .. } = cm_event(&mut c) else {
            panic!("Established expected");
        };
        flows.push(flow_id);
    }
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + WAIT;
    while got.len() < 4 && std::time::Instant::now() < deadline {
        if let Some(batch) = c.next_completions(deadline).unwrap() {
            got.extend(batch);
        }
    }
    assert_eq!(got.len(), 4, "{got:#?}");
    // Every buffer used once; each connection's two Sends in MSN order into buffers it drew in
    // that order; each buffer holds its Send's octets.
    let mut ids: Vec<u64> = got.iter().map(|x| x.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [100, 101, 102, 103]);
    for (flow, fill) in flows.iter().zip([0x10u8, 0x20]) {
        let mine: Vec<_> = got.iter().filter(|x| x.flow_id == *flow).collect();
        assert_eq!(mine.len(), 2, "{got:#?}");
        assert_eq!((mine[0].msn, mine[1].msn), (Some(1), Some(2)));
        assert!(mine[0].wr_id < mine[1].wr_id, "{mine:?}");
        for (m, x) in mine.iter().enumerate() {
            assert_eq!(
                (x.kind, x.len, x.offset),
                (CompletionKind::SendArrived, 200, (x.wr_id - 100) * 1024)
            );
            let mut octets = vec![0u8; 200];
            assert!(region.read(x.offset, &mut octets));
            assert!(octets.iter().all(|&o| o == fill + 1 + m as u8), "{x:?}");
        }
    }
    let r = c.post_recv_wr(PostTarget::Flow(flows[0]), stag, 8192, 1024, 1, 9);
    let message = refused("a connection's own buffer", ErrorCode::BadRequest, r);
    assert!(message.contains("shared receive queue"), "{message}");
    drop(done_tx);
    for p in peers {
        p.join().unwrap();
    }
}
