//! `mpa-control serve`'s `max_connections` (docs/limits.md): connections in setup plus
//! handed over, counted across all listeners. One beyond it is reset at once; the slot comes back when a
//! setup times out, when the policy rejects, and when a handed-over flow ends (FlowGone).

use mpa::endpoint::{EndpointConfig, EndpointError, MpaStream};
use mpa_tests::{
    initiator_in_a, require_privileged, run_in_netns, BedConfig, ControlDaemon, DatapathOptions,
    TestBed,
};
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

const REFUSED: &str = "refused: max_connections reached";

/// An Initiator in ns a sending `private_data`; `f` gets the outcome.
fn initiator<T: Send + 'static>(
    bed: &TestBed,
    addr: SocketAddr,
    private_data: &[u8],
    f: impl FnOnce(SocketAddr, Result<MpaStream<TcpStream>, EndpointError>) -> T + Send + 'static,
) -> JoinHandle<T> {
    let mut cfg = EndpointConfig::default();
    cfg.policy.startup_timeout = Duration::from_secs(5);
    cfg.private_data = private_data.to_vec();
    initiator_in_a(bed, addr, cfg, f)
}

/// A peer handed over that stays until told to go, then closes (FIN) and waits for the
/// datapath's close. Its local address once handed over.
fn held_peer(
    bed: &TestBed,
    addr: SocketAddr,
    private_data: &[u8],
) -> (SocketAddr, mpsc::Sender<()>, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let h = initiator(bed, addr, private_data, move |local, s| {
        let s = s.expect("startup through mpa-control");
        tx.send(local).unwrap();
        go_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("told to go");
        s.get_ref().shutdown(std::net::Shutdown::Write).unwrap();
        let mut s = s;
        let end = s.recv_with(Some(Duration::from_secs(10)), |_| {
            panic!("datapath sent an FPDU")
        });
        assert!(matches!(end, Ok(None)), "the datapath's close: {end:?}");
    });
    let local = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the peer's startup");
    (local, go_tx, h)
}

/// A plain TCP peer in ns a that connects and sends nothing: its local address (`None` when
/// the connection was already reset: getsockname fails then), and (on its thread) how its
/// connect and read of at most 10 s ended.
fn silent_peer(
    bed: &TestBed,
    addr: SocketAddr,
) -> (Option<SocketAddr>, JoinHandle<std::io::Result<usize>>) {
    let (tx, rx) = mpsc::channel();
    let ns = bed.ns_a.clone();
    let h = std::thread::spawn(move || {
        run_in_netns(&ns, move || {
            // A reset can already be there when connect_timeout checks SO_ERROR.
            let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5));
            let _ = tx.send(s.as_ref().ok().and_then(|s| s.local_addr().ok()));
            let mut s = s?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.read(&mut [0u8; 64])
        })
        .unwrap()
    });
    let local = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the silent peer's connect");
    (local, h)
}

/// A connection beyond the limit: it is reset (ECONNRESET, seen by the connect when the
/// reset is already there, else by the first read; never data, never an end of stream), and
/// the daemon logs the refusal once more.
fn assert_refused(bed: &TestBed, daemon: &ControlDaemon, addr: SocketAddr, refusals: usize) {
    let (_, h) = silent_peer(bed, addr);
    match h.join().unwrap() {
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
        Ok(n) => panic!("a refused connection is reset, got a read of {n} octets"),
    }
    daemon.wait_for("the refusal", Duration::from_secs(5), |l| {
        l.iter().filter(|l| l.contains(REFUSED)).count() == refusals
    });
    assert_eq!(daemon.count(&[REFUSED, "max=2"]), refusals);
}

#[test]
fn max_connections_refuses_with_a_reset_and_every_ending_gives_the_slot_back() {
    if !require_privileged("mpa-control max_connections") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let socket = mpa_harness::temp_path("limit-dp.sock");
    let dp = mpa_tests::start_datapath(&bed, &socket, &DatapathOptions::default())
        .unwrap_or_else(|e| panic!("{e:#}"));
    let b = bed.addr_b(false);
    let (open, strict) = (SocketAddr::new(b, 7601), SocketAddr::new(b, 7602));
    let config = mpa_harness::temp_path("limit-config.toml");
    std::fs::write(
        &config,
        format!(
            r#"
            datapath_socket = "{}"
            startup_timeout_ms = 1500
            max_connections = 2

            [[listener]]
            bind = "{open}"

            [[listener]]
            bind = "{strict}"
            private_data_prefix = "iser:"
            reject_reason = "only iser here"
            "#,
            socket.display()
        ),
    )
    .unwrap();
    let daemon = ControlDaemon::start(&bed, &config, "info,mpa_control=debug");
    daemon.wait_for("both listeners", Duration::from_secs(5), |l| {
        l.iter().filter(|l| l.contains("listening for MPA")).count() == 2
    });
    daemon.wait_line(&["datapath connected"]);

    // Slot 1: a peer handed over. Slot 2: a silent peer in its startup, on the other
    // listener (the limit counts all listeners).
    let (a, a_go, a_done) = held_peer(&bed, open, b"");
    let flow_a = daemon.flow_of(a);
    let (silent, silent_read) = silent_peer(&bed, strict);
    let silent = silent.expect("the silent peer's address");
    daemon.wait_line(&[
        "accepted: setup started",
        &format!("peer={silent} "),
        "active=2",
    ]);

    // Full: the third connection is reset, on either listener.
    assert_refused(&bed, &daemon, open, 1);
    assert_refused(&bed, &daemon, strict, 2);

    // The silent peer's startup times out: it sees an ordinary close, and its slot is back.
    let r = silent_read.join().unwrap();
    assert!(
        matches!(r, Ok(0)),
        "the timed-out peer sees end of stream, got {r:?}"
    );
    daemon.wait_line(&["setup failed", &format!("peer={silent} "), "timed out"]);
    daemon.wait_line(&["slot given back", &format!("peer={silent} ")]);
    let (c, c_go, c_done) = held_peer(&bed, open, b"");
    let flow_c = daemon.flow_of(c);
    assert_refused(&bed, &daemon, open, 3);

    // A handed-over flow ends (its peer closes): FlowGone, frozen socket closed, slot back.
    a_go.send(()).unwrap();
    a_done.join().unwrap();
    daemon.wait_line(&[
        "flow gone: frozen socket closed",
        &format!("flow_id={flow_a} "),
    ]);
    daemon.wait_line(&["slot given back", &format!("peer={a} ")]);

    // A rejected startup takes the free slot and gives it back.
    let rejected = initiator(&bed, strict, b"nvme:x", |_, s| match s {
        Err(EndpointError::Rejected { private_data }) => private_data,
        Err(e) => panic!("expected a reject, got {e}"),
        Ok(_) => panic!("expected a reject, got a connection"),
    });
    assert_eq!(rejected.join().unwrap(), b"only iser here");
    daemon.wait_line(&["rejected by policy"]);
    // The outcome is logged before the setup lets go of its slot: wait for the slot (the
    // third given back: the silent peer's, a's, the rejected one's).
    daemon.wait_for("the rejected setup's slot", Duration::from_secs(10), |l| {
        l.iter().filter(|l| l.contains("slot given back")).count() >= 3
    });
    let (d, d_go, d_done) = held_peer(&bed, strict, b"iser:x");
    let flow_d = daemon.flow_of(d);
    assert_refused(&bed, &daemon, strict, 4);
    assert_eq!(daemon.count(&["handed over"]), 3);

    for (go, done, flow, peer) in [(c_go, c_done, flow_c, c), (d_go, d_done, flow_d, d)] {
        go.send(()).unwrap();
        done.join().unwrap();
        daemon.wait_line(&[
            "flow gone: frozen socket closed",
            &format!("flow_id={flow} "),
        ]);
        daemon.wait_line(&["slot given back", &format!("peer={peer} ")]);
    }
    // Both slots free: two more at once are accepted.
    let (e, e_go, e_done) = held_peer(&bed, open, b"");
    let (f, f_go, f_done) = held_peer(&bed, strict, b"iser:y");
    daemon.flow_of(e);
    daemon.flow_of(f);
    assert_eq!(daemon.count(&[REFUSED]), 4);
    for (go, done) in [(e_go, e_done), (f_go, f_done)] {
        go.send(()).unwrap();
        done.join().unwrap();
    }
    drop(daemon);
    dp.stop();
    let _ = std::fs::remove_file(&config);
}

/// `max_connections_per_source`: one peer address holds at most that many slots (here 2 of
/// 4); its next connection is reset with its own log line, while another address (ns a's
/// IPv6 one) is still accepted, and the address's slot comes back when one of its setups ends.
#[test]
fn one_source_cannot_take_every_slot() {
    if !require_privileged("mpa-control max_connections_per_source") {
        return;
    }
    const PER_SOURCE: &str = "refused: max_connections_per_source reached for this address";
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let socket = mpa_harness::temp_path("per-source-dp.sock");
    let dp = mpa_tests::start_datapath(&bed, &socket, &DatapathOptions::default())
        .unwrap_or_else(|e| panic!("{e:#}"));
    let (v4, v6) = (
        SocketAddr::new(bed.addr_b(false), 7611),
        SocketAddr::new(bed.addr_b(true), 7612),
    );
    let config = mpa_harness::temp_path("per-source-config.toml");
    std::fs::write(
        &config,
        format!(
            r#"
            datapath_socket = "{}"
            startup_timeout_ms = 4000
            max_connections = 4
            max_connections_per_source = 2

            [[listener]]
            bind = "{v4}"

            [[listener]]
            bind = "{v6}"
            "#,
            socket.display()
        ),
    )
    .unwrap();
    let daemon = ControlDaemon::start(&bed, &config, "info,mpa_control=debug");
    daemon.wait_for("both listeners", Duration::from_secs(5), |l| {
        l.iter().filter(|l| l.contains("listening for MPA")).count() == 2
    });
    daemon.wait_line(&["datapath connected"]);
    // Two silent peers from ns a's IPv4 address hold its two slots.
    let (p1, r1) = silent_peer(&bed, v4);
    let (p2, r2) = silent_peer(&bed, v4);
    for p in [p1, p2] {
        let p = p.expect("accepted");
        daemon.wait_line(&["accepted: setup started", &format!("peer={p} ")]);
    }
    // The third from that address is reset, with the per-source reason.
    let (_, r3) = silent_peer(&bed, v4);
    match r3.join().unwrap() {
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
        Ok(n) => panic!("a refused connection is reset, got a read of {n} octets"),
    }
    daemon.wait_for("the refusal", Duration::from_secs(5), |l| {
        l.iter().any(|l| l.contains(PER_SOURCE))
    });
    assert_eq!(daemon.count(&[REFUSED]), 0, "not the global limit");
    // Another address of the same host is still served.
    let (p4, r4) = silent_peer(&bed, v6);
    let p4 = p4.expect("accepted from the other address");
    daemon.wait_line(&[
        "accepted: setup started",
        &format!("peer={p4} "),
        "active=3",
    ]);
    // The first two time out: their slots come back, and the address is served again.
    for r in [r1, r2, r4] {
        assert!(matches!(r.join().unwrap(), Ok(0)));
    }
    let (p5, r5) = silent_peer(&bed, v4);
    let p5 = p5.expect("accepted again");
    daemon.wait_line(&["accepted: setup started", &format!("peer={p5} ")]);
    assert!(matches!(r5.join().unwrap(), Ok(0)));
    assert_eq!(daemon.count(&[PER_SOURCE]), 1);
    drop(daemon);
    dp.stop();
}
