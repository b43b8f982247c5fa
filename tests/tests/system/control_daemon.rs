//! `mpa-control serve` as a process in ns b, beside an in-process datapath (as `mpa-bench`
//! runs it), with in-process MPA Initiators in ns a; `mpa-control flows|stats|close` against
//! the same datapath socket.

use mpa::crc::crc32c_append;
use mpa::endpoint::{EndpointConfig, EndpointError, MpaStream};
use mpa_datapath::server::Datapath;
use mpa_tests::ControlDaemon as Daemon;
use mpa_tests::{
    bin, initiator_in_a, require_privileged, run_in_netns, BedConfig, DatapathOptions, TestBed,
};
use serde_json::Value;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A fresh path in the temp directory.
fn temp_path(what: &str) -> PathBuf {
    mpa_harness::temp_path(&format!("ctl-{what}"))
}

/// Starts the datapath in ns b exactly as `mpa-bench` does (digests on).
fn start_datapath(bed: &TestBed, socket: &Path) -> Datapath {
    mpa_tests::start_datapath(bed, socket, &DatapathOptions::default())
        .unwrap_or_else(|e| panic!("{e:#}"))
}

/// `mpa-control`, built beside this test.
fn control_binary() -> PathBuf {
    bin("mpa-control")
}

/// Runs an `mpa-control` subcommand (the control socket is a path: any namespace will do).
fn cli(args: &[&str]) -> Output {
    Command::new(control_binary())
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn write_config(text: &str) -> PathBuf {
    let p = temp_path("config.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// An Initiator in ns a: connects to `addr` with `private_data`, then runs `f` on the
/// startup's outcome and the local address.
fn initiator<T: Send + 'static>(
    bed: &TestBed,
    addr: SocketAddr,
    private_data: &[u8],
    f: impl FnOnce(SocketAddr, Result<MpaStream<TcpStream>, EndpointError>) -> T + Send + 'static,
) -> JoinHandle<T> {
    let mut cfg = EndpointConfig::default();
    cfg.policy.markers_required = true;
    cfg.policy.startup_timeout = Duration::from_secs(5);
    cfg.private_data = private_data.to_vec();
    initiator_in_a(bed, addr, cfg, f)
}

/// What one Initiator sent.
struct Sent {
    local: SocketAddr,
    digest: u32,
    octets: usize,
    count: usize,
}

/// Sends `count` ULPDUs of `size` octets (content from `seed`) and keeps their digest.
fn send_ulpdus(s: &mut MpaStream<TcpStream>, seed: usize, count: usize, size: usize) -> u32 {
    let mut digest = 0u32;
    for i in 0..count {
        let u: Vec<u8> = (0..size)
            .map(|j| (seed * 31 + i * 131 + j * 7 + 3) as u8)
            .collect();
        digest = crc32c_append(digest, &u);
        s.send(&u).unwrap();
    }
    s.flush().unwrap();
    digest
}

/// An Initiator that sends, closes, and waits for the datapath's close.
fn transfer(bed: &TestBed, addr: SocketAddr, seed: usize) -> JoinHandle<Sent> {
    const COUNT: usize = 200;
    const SIZE: usize = 1000;
    initiator(bed, addr, b"", move |local, s| {
        let mut s = s.expect("startup through mpa-control");
        let digest = send_ulpdus(&mut s, seed, COUNT, SIZE);
        s.get_ref().shutdown(std::net::Shutdown::Write).unwrap();
        while s
            .recv_with(Some(Duration::from_secs(10)), |_| {
                panic!("datapath sent an FPDU")
            })
            .unwrap()
            .is_some()
        {}
        Sent {
            local,
            digest,
            octets: COUNT * SIZE,
            count: COUNT,
        }
    })
}

/// `mpa-control stats --json`.
fn stats_json(socket: &Path) -> Value {
    let out = cli(&["stats", "--json", "--socket", &socket.to_string_lossy()]);
    assert!(out.status.success(), "stats: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The ended flow's final counters match what `sent` sent.
fn assert_delivered(stats: &Value, flow_id: u64, sent: &Sent) {
    let ended = stats["ended_flows"].as_array().unwrap();
    let f = ended
        .iter()
        .find(|f| f["flow_id"] == flow_id)
        .unwrap_or_else(|| panic!("flow {flow_id} not among the ended flows: {stats}"));
    assert_eq!(
        f["ulpdu_digest"],
        format!("{:08x}", sent.digest),
        "digest of {}: {f}",
        sent.local
    );
    assert_eq!(f["ulpdu_octets"], sent.octets, "{f}");
    assert_eq!(f["fpdus"], sent.count, "{f}");
    assert_eq!(f["crc_errors"], 0, "{f}");
}

/// Sockets on local `port` in ns b other than the listener (frozen ones show as ESTAB).
fn sockets_on(bed: &TestBed, port: u16) -> String {
    let filter = format!("( sport = :{port} )");
    let out = bed
        .command(&bed.ns_b, "ss")
        .args(["-Htn", "state", "connected", &filter])
        .output()
        .unwrap();
    text(&out.stdout).trim().to_string()
}

fn wait_no_sockets(bed: &TestBed, port: u16) {
    let t0 = Instant::now();
    loop {
        let s = sockets_on(bed, port);
        if s.is_empty() {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "sockets left on {port}:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn serve_hands_over_rejects_lists_and_closes() {
    if !require_privileged("mpa-control serve") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let socket = temp_path("dp.sock");
    let dp = start_datapath(&bed, &socket);
    let b = bed.addr_b(false);
    let (open, strict) = (SocketAddr::new(b, 7101), SocketAddr::new(b, 7102));
    let config = write_config(&format!(
        r#"
        datapath_socket = "{}"
        startup_timeout_ms = 5000
        max_connections = 16

        [[listener]]
        bind = "{open}"
        markers_required = true
        reply_private_data = "welcome"

        [[listener]]
        bind = "{strict}"
        private_data_prefix = "iser:"
        reject_reason = "only iser here"
        "#,
        socket.display()
    ));
    let daemon = Daemon::start(&bed, &config, "info");
    daemon.wait_for("both listeners", Duration::from_secs(5), |l| {
        l.iter().filter(|l| l.contains("listening for MPA")).count() == 2
    });
    assert_eq!(daemon.count(&["datapath connected"]), 1);

    // (a) Three concurrent transfers, each handed over, each delivered byte for byte.
    let senders: Vec<_> = (0..3).map(|i| transfer(&bed, open, i)).collect();
    let sent: Vec<Sent> = senders.into_iter().map(|h| h.join().unwrap()).collect();
    let flows: Vec<u64> = sent.iter().map(|s| daemon.flow_of(s.local)).collect();
    for &f in &flows {
        // FlowGone reached the link, which closed that flow's frozen socket.
        daemon.wait_gone(f);
    }
    wait_no_sockets(&bed, open.port());
    let stats = stats_json(&socket);
    for (f, s) in flows.iter().zip(&sent) {
        assert_delivered(&stats, *f, s);
    }
    // Each hand-over inherited the peer's TSval as TS.Recent: the daemon watches its
    // listeners' ports (docs/environment.md, "Why TS.Recent must be inherited").
    let h = &stats["handover"];
    assert_eq!(h["ts_recent_inherited"], 3, "{h}");
    assert_eq!(h["ts_recent_unknown"], 0, "{h}");
    assert_eq!(h["watched_ports"], serde_json::json!([7101, 7102]), "{h}");
    // The XDP program's counters are numbers an exporter can read, not a debug string.
    let xdp = &stats["xdp"];
    assert!(xdp["redirected"].as_u64().unwrap() > 0, "{xdp}");
    assert!(xdp["seen"].as_u64() >= xdp["redirected"].as_u64(), "{xdp}");
    let human = cli(&["stats", "--socket", &socket.to_string_lossy()]);
    assert!(human.status.success(), "{}", text(&human.stderr));
    assert!(
        text(&human.stdout).contains("ended flows (oldest first): 3"),
        "{}",
        text(&human.stdout)
    );
    let xdp_line = text(&human.stdout)
        .lines()
        .find(|l| l.starts_with("xdp: "))
        .map(String::from)
        .unwrap_or_default();
    assert!(
        xdp_line.contains(&format!("redirected {}", xdp["redirected"])),
        "{}",
        text(&human.stdout)
    );

    // (b) The strict listener rejects by private-data prefix, with the configured reason.
    let rejected = initiator(&bed, strict, b"nvme:x", |_, s| match s {
        Err(EndpointError::Rejected { private_data }) => private_data,
        Err(e) => panic!("expected a reject, got {e}"),
        Ok(_) => panic!("expected a reject, got a connection"),
    });
    assert_eq!(rejected.join().unwrap(), b"only iser here");
    daemon.wait_for("the reject", Duration::from_secs(5), |l| {
        l.iter().any(|l| l.contains("rejected by policy"))
    });

    // (c) An open connection is listed by `flows`, and `close` ends it.
    let (tx, rx) = mpsc::channel();
    let held = initiator(&bed, open, b"", move |local, s| {
        let mut s = s.expect("startup through mpa-control");
        send_ulpdus(&mut s, 9, 5, 100);
        tx.send(local).unwrap();
        s.recv_with(Some(Duration::from_secs(10)), |_| {
            panic!("datapath sent an FPDU")
        })
    });
    let local = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let flow = daemon.flow_of(local);
    let sock = socket.to_string_lossy().into_owned();
    let t0 = Instant::now();
    loop {
        let out = cli(&["flows", "--json", "--socket", &sock]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let listed = v.as_array().unwrap().iter().find(|f| f["flow_id"] == flow);
        if listed.is_some_and(|f| f["fpdus"] == 5) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "flow {flow} not listed with 5 FPDUs: {v}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = cli(&["flows", "--socket", &sock]);
    let table = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(table.starts_with("FLOW  "), "{table}");
    assert!(
        table.lines().any(|l| l.starts_with(&format!("{flow} "))),
        "{table}"
    );
    assert_eq!(sockets_on(&bed, open.port()).lines().count(), 1);
    let out = cli(&["close", &flow.to_string(), "--socket", &sock]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), format!("flow {flow}: closed"));
    match held.join().unwrap() {
        Err(EndpointError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
        Ok(None) | Err(EndpointError::Closed) => {}
        other => panic!("the Initiator saw {other:?} after close"),
    }
    daemon.wait_gone(flow);
    wait_no_sockets(&bed, open.port());
    let out = cli(&["close", &flow.to_string(), "--socket", &sock]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(&format!("close {flow}: no such flow")),
        "{}",
        text(&out.stderr)
    );
    let out = cli(&["flows", "--socket", &sock]);
    assert_eq!(text(&out.stdout).trim(), "no flows");

    daemon.terminate();
    dp.stop();
    let _ = std::fs::remove_file(&config);
}

#[test]
fn datapath_going_away_refuses_then_serves_again() {
    if !require_privileged("mpa-control serve without a datapath") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let socket = temp_path("dp.sock");
    let addr = SocketAddr::new(bed.addr_b(false), 7201);
    let config = write_config(&format!(
        "datapath_socket = \"{}\"\nstartup_timeout_ms = 3000\n[[listener]]\nbind = \"{addr}\"\nmarkers_required = true\n",
        socket.display()
    ));
    // The daemon first, without a datapath: it waits for one. (Started the other way round,
    // the daemon inherits the datapath's AF_XDP socket — created without CLOEXEC — and a
    // restarted datapath finds the queue busy.)
    let daemon = Daemon::start(&bed, &config, "info");
    daemon.wait_for("the listener", Duration::from_secs(5), |l| {
        l.iter().any(|l| l.contains("listening for MPA"))
    });
    assert_eq!(daemon.count(&["datapath unavailable (", "closed 0"]), 1);
    let dp = start_datapath(&bed, &socket);
    daemon.wait_for("the connection", Duration::from_secs(5), |l| {
        l.iter().any(|l| l.contains("datapath connected"))
    });

    // One connection handed over and open when the datapath goes.
    let (tx, rx) = mpsc::channel::<()>();
    let (up_tx, up_rx) = mpsc::channel();
    let held = initiator(&bed, addr, b"", move |local, s| {
        let mut s = s.expect("startup through mpa-control");
        send_ulpdus(&mut s, 1, 3, 100);
        up_tx.send(local).unwrap();
        let _ = rx.recv_timeout(Duration::from_secs(20));
    });
    let local = up_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    daemon.flow_of(local);
    assert_eq!(sockets_on(&bed, addr.port()).lines().count(), 1);

    // (d) The datapath stops: one clear line, the frozen socket closed, new connections refused.
    dp.stop();
    daemon.wait_for("the outage", Duration::from_secs(5), |l| {
        l.iter().any(|l| {
            l.contains("datapath unavailable") && l.contains("closed 1 handed-over connection")
        })
    });
    wait_no_sockets(&bed, addr.port());
    let refused = initiator(&bed, addr, b"", |_, s| s.err().map(|e| e.to_string()));
    let e = refused
        .join()
        .unwrap()
        .expect("startup succeeded without a datapath");
    assert!(!e.contains("timed out"), "refused slowly: {e}");
    daemon.wait_for("the refusal", Duration::from_secs(5), |l| {
        l.iter()
            .any(|l| l.contains("refused: datapath unavailable"))
    });
    assert_eq!(
        daemon.count(&["datapath unavailable ("]),
        2,
        "one line per outage (at start, and now)"
    );
    let _ = tx.send(());
    held.join().unwrap();

    // The datapath is back: the daemon reconnects and serves again.
    let dp = start_datapath(&bed, &socket);
    daemon.wait_for("the reconnection", Duration::from_secs(5), |l| {
        l.iter()
            .filter(|l| l.contains("datapath connected"))
            .count()
            == 2
    });
    let sent = transfer(&bed, addr, 7).join().unwrap();
    let flow = daemon.flow_of(sent.local);
    daemon.wait_gone(flow);
    assert_delivered(&stats_json(&socket), flow, &sent);

    drop(daemon);
    dp.stop();
    let _ = std::fs::remove_file(&config);
}

/// An Initiator that sends 100 ULPDUs, reports its address, waits for `go`, sends 100 more,
/// closes and waits for the datapath's close.
fn transfer_in_two_halves(
    bed: &TestBed,
    addr: SocketAddr,
    seed: usize,
) -> (
    JoinHandle<Sent>,
    mpsc::Receiver<SocketAddr>,
    mpsc::Sender<()>,
) {
    const HALF: usize = 100;
    const SIZE: usize = 1000;
    let (up_tx, up) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let h = initiator(bed, addr, b"", move |local, s| {
        let mut s = s.expect("startup through mpa-control");
        let mut digest = 0u32;
        let mut send_half = |s: &mut MpaStream<TcpStream>, from: usize| {
            for i in from..from + HALF {
                let u: Vec<u8> = (0..SIZE)
                    .map(|j| (seed * 31 + i * 131 + j * 7 + 3) as u8)
                    .collect();
                digest = crc32c_append(digest, &u);
                s.send(&u).unwrap();
            }
            s.flush().unwrap();
        };
        send_half(&mut s, 0);
        up_tx.send(local).unwrap();
        go_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        send_half(&mut s, HALF);
        s.get_ref().shutdown(std::net::Shutdown::Write).unwrap();
        while s
            .recv_with(Some(Duration::from_secs(10)), |_| {
                panic!("datapath sent an FPDU")
            })
            .unwrap()
            .is_some()
        {}
        Sent {
            local,
            digest,
            octets: 2 * HALF * SIZE,
            count: 2 * HALF,
        }
    });
    (h, up, go)
}

/// `mpa-control` killed (SIGKILL) while connections exist. The flows it
/// handed over keep running in the datapath to their clean end, octet for octet (its frozen
/// sockets close silently with it, in repair mode), and a new daemon serves again.
#[test]
fn killed_daemon_leaves_its_flows_running_and_a_new_one_serves() {
    if !require_privileged("mpa-control killed") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let socket = temp_path("dp.sock");
    let addr = SocketAddr::new(bed.addr_b(false), 7251);
    let config = write_config(&format!(
        "datapath_socket = \"{}\"\nstartup_timeout_ms = 5000\n[[listener]]\nbind = \"{addr}\"\nmarkers_required = true\n",
        socket.display()
    ));
    // The daemon before the datapath (see datapath_going_away_refuses_then_serves_again).
    let daemon = Daemon::start(&bed, &config, "info");
    daemon.wait_for("the listener", Duration::from_secs(5), |l| {
        l.iter().any(|l| l.contains("listening for MPA"))
    });
    let dp = start_datapath(&bed, &socket);
    daemon.wait_for("the connection", Duration::from_secs(5), |l| {
        l.iter().any(|l| l.contains("datapath connected"))
    });
    let (held, up, go) = transfer_in_two_halves(&bed, addr, 5);
    let local = up.recv_timeout(Duration::from_secs(10)).unwrap();
    let flow = daemon.flow_of(local);

    // kill -9 (Daemon's drop) mid-transfer; the second half goes to the datapath alone.
    drop(daemon);
    go.send(()).unwrap();
    let sent = held.join().unwrap();
    assert_eq!(sent.local, local);
    let t0 = Instant::now();
    let stats = loop {
        let s = stats_json(&socket);
        if s["ended_flows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["flow_id"] == flow)
        {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "flow {flow} never ended: {s}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_delivered(&stats, flow, &sent);
    wait_no_sockets(&bed, addr.port());

    // A new daemon serves again on the same datapath.
    let daemon = Daemon::start(&bed, &config, "info");
    daemon.wait_for("the connection", Duration::from_secs(5), |l| {
        l.iter().any(|l| l.contains("datapath connected"))
    });
    let sent = transfer(&bed, addr, 6).join().unwrap();
    let flow = daemon.flow_of(sent.local);
    daemon.wait_gone(flow);
    assert_delivered(&stats_json(&socket), flow, &sent);
    drop(daemon);
    dp.stop();
    let _ = std::fs::remove_file(&config);
}

#[test]
fn bad_configs_and_missing_datapath_fail_clearly() {
    // (e) No privileges needed: serve stops at the configuration.
    let cases = [
        (
            "[[listener]]\nbind = \"127.0.0.1:7301\"\nird = 20000\n",
            "listener[0] (bind 127.0.0.1:7301).ird: 20000 exceeds the 14-bit maximum",
        ),
        (
            "[[listener]]\nbind = \"127.0.0.1:7301\"\nmarker_required = true\n",
            "unknown field `marker_required`",
        ),
        ("max_connections = 0\n", "max_connections: must be at least 1"),
        (
            "max_connections = 8\nmax_connections_per_source = 9\n[[listener]]\nbind = \"127.0.0.1:7301\"\n",
            "max_connections_per_source: 9 is not between 1 and max_connections (8)",
        ),
        (
            "[[listener]]\nbind = \"127.0.0.1:7301\"\nprivate_data_max_len = 8\nprivate_data_prefix = \"x\"\n",
            "private_data_prefix: and private_data_max_len are exclusive",
        ),
    ];
    for (toml, want) in cases {
        let p = write_config(toml);
        let out = cli(&["serve", "--config", &p.to_string_lossy()]);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "serve accepted:\n{toml}");
        assert!(err.contains("mpa-control: config "), "{err}");
        assert!(err.contains(want), "{err}\nmissing: {want}");
        let _ = std::fs::remove_file(&p);
    }
    let out = cli(&["serve", "--config", "/nonexistent/mpa-control.toml"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("/nonexistent/mpa-control.toml"));
    // A listener that cannot bind (TEST-NET-1 is on no interface).
    let p = write_config("[[listener]]\nbind = \"192.0.2.1:7301\"\n");
    let out = cli(&["serve", "--config", &p.to_string_lossy()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("mpa-control: listener 192.0.2.1:7301: "),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_file(&p);
    // The operations without a datapath.
    let nowhere = temp_path("none.sock");
    let nowhere = nowhere.to_string_lossy();
    for args in [
        vec!["flows", "--socket", &nowhere],
        vec!["stats", "--json", "--socket", &nowhere],
        vec!["close", "3", "--socket", &nowhere],
    ] {
        let out = cli(&args);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            text(&out.stderr).contains(&format!("cannot reach the datapath at {nowhere}")),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_silent_initiator_is_dropped_at_the_startup_timeout() {
    if !require_privileged("mpa-control serve startup timeout") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let socket = temp_path("dp.sock");
    let dp = start_datapath(&bed, &socket);
    let addr = SocketAddr::new(bed.addr_b(false), 7103);
    let config = write_config(&format!(
        "datapath_socket = \"{}\"\nstartup_timeout_ms = 600\n[[listener]]\nbind = \"{addr}\"\n",
        socket.display()
    ));
    let daemon = Daemon::start(&bed, &config, "info");
    daemon.wait_for("the listener", Duration::from_secs(5), |l| {
        l.iter().any(|l| l.contains("listening for MPA"))
    });
    // Half a Request header, then silence: the Responder gives up at the timeout and closes.
    let (eof, waited) = run_in_netns(&bed.ns_a, move || {
        use std::io::{Read, Write};
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        s.write_all(b"MPA ID Req").unwrap();
        let t0 = Instant::now();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = [0u8; 64];
        let r = s.read(&mut b);
        (matches!(r, Ok(0)), t0.elapsed())
    })
    .unwrap();
    assert!(eof, "the daemon did not close the silent connection");
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(5),
        "closed after {waited:?}, the timeout is 600 ms"
    );
    daemon.wait_for("the timeout", Duration::from_secs(5), |l| {
        l.iter()
            .any(|l| l.contains("setup failed") && l.contains("timed out waiting for the MPA"))
    });
    // Closed by the Responder (an ordinary close: TIME-WAIT at most), never handed over.
    let left = sockets_on(&bed, addr.port());
    assert!(
        left.lines().all(|l| l.starts_with("TIME-WAIT")),
        "sockets left on {}:\n{left}",
        addr.port()
    );
    assert_eq!(daemon.count(&["handed over"]), 0);
    daemon.terminate();
    dp.stop();
    let _ = std::fs::remove_file(&config);
}

/// Reaping: with short keepalive settings, an idle peer that answers the probes
/// keeps its flow; once its namespace drops everything from us (nftables), the datapath
/// probes, gives up, reports the flow gone with the reason, the daemon closes the frozen
/// socket and frees the `max_connections` slot, and the next connection is accepted.
#[test]
fn silent_peer_is_reaped_and_its_slot_freed() {
    if !require_privileged("silent_peer_is_reaped_and_its_slot_freed") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let socket = temp_path("dp.sock");
    // Probes 0.7 s apart: Linux answers an out-of-window segment at most every 0.5 s
    // (tcp_invalid_ratelimit), and a keepalive probe is one.
    let opts = DatapathOptions {
        tcp: mpa_stack::tcp::TcpConfig {
            keepalive_idle: Some(Duration::from_millis(1000)),
            keepalive_interval: Duration::from_millis(700),
            keepalive_probes: 2,
            ..Default::default()
        },
        ..DatapathOptions::default()
    };
    let _dp = mpa_tests::start_datapath(&bed, &socket, &opts).unwrap_or_else(|e| panic!("{e:#}"));
    let addr = SocketAddr::new(bed.addr_b(false), 7401);
    let config = write_config(&format!(
        r#"
        datapath_socket = "{}"
        startup_timeout_ms = 5000
        max_connections = 1

        [[listener]]
        bind = "{addr}"
        markers_required = true
        "#,
        socket.display()
    ));
    let daemon = Daemon::start(&bed, &config, "info");
    daemon.wait_for("the listener", Duration::from_secs(5), |l| {
        l.iter().any(|l| l.contains("listening for MPA"))
    });

    // One peer: a few ULPDUs, then idle with its socket open until told to go.
    let (tx, rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let held = initiator(&bed, addr, b"", move |local, s| {
        let mut s = s.expect("startup through mpa-control");
        send_ulpdus(&mut s, 1, 3, 100);
        tx.send(local).unwrap();
        let _ = go_rx.recv_timeout(Duration::from_secs(30));
        drop(s);
    });
    let local = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let flow = daemon.flow_of(local);
    let sock = socket.to_string_lossy().into_owned();
    let listed = |flow: u64| -> Option<Value> {
        let out = cli(&["flows", "--json", "--socket", &sock]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .find(|f| f["flow_id"] == flow)
            .cloned()
    };
    // Answered probes keep it: more probes than the limit, still established.
    let t0 = Instant::now();
    loop {
        let f = listed(flow).expect("the live peer's flow stays");
        assert_eq!(f["state"], "Established", "{f}");
        if f["keepalive_probes"].as_u64().unwrap() > 3 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "no probes: {f}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The one slot is taken.
    let refused = initiator(&bed, addr, b"", |_, s| s.is_err());
    assert!(refused.join().unwrap(), "a second connection got through");
    daemon.wait_for("the refusal", Duration::from_secs(5), |l| {
        l.iter().any(|l| l.contains("max_connections reached"))
    });

    // The peer goes silent: its namespace drops everything from our port.
    let nft = |args: &[&str]| {
        let out = bed.command(&bed.ns_a, "nft").args(args).output().unwrap();
        assert!(out.status.success(), "nft {args:?}: {}", text(&out.stderr));
    };
    nft(&["add", "table", "inet", "mpa_reap"]);
    nft(&[
        "add",
        "chain",
        "inet",
        "mpa_reap",
        "in",
        "{ type filter hook input priority 0 ; policy accept ; }",
    ]);
    nft(&[
        "add", "rule", "inet", "mpa_reap", "in", "tcp", "sport", "7401", "drop",
    ]);

    daemon.wait_for("the reaped flow", Duration::from_secs(15), |l| {
        l.iter().any(|l| {
            l.contains("flow gone: frozen socket closed")
                && l.contains(&format!("flow_id={flow} "))
                && l.contains("no answer to 2 keepalive probes")
        })
    });
    wait_no_sockets(&bed, addr.port());
    assert!(listed(flow).is_none());
    let stats = stats_json(&socket);
    let ended = stats["ended_flows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["flow_id"] == flow)
        .unwrap_or_else(|| panic!("flow {flow} not ended: {stats}"))
        .clone();
    assert_eq!(ended["ended"]["mpa_error"], 1, "{ended}");
    assert_eq!(
        ended["ended"]["reason"], "TCP: peer silent: no answer to 2 keepalive probes",
        "{ended}"
    );
    assert_eq!(ended["fpdus"], 3, "{ended}");
    assert_eq!(ended["state"], "Closed", "{ended}");

    // The slot is free again: a new peer is handed over.
    nft(&["delete", "table", "inet", "mpa_reap"]);
    let (tx, rx) = mpsc::channel();
    let next = initiator(&bed, addr, b"", move |local, s| {
        let mut s = s.expect("a new connection after the reap");
        send_ulpdus(&mut s, 2, 1, 100);
        tx.send(local).unwrap();
    });
    let local2 = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let flow2 = daemon.flow_of(local2);
    assert_ne!(flow2, flow);
    next.join().unwrap();
    let _ = go_tx.send(());
    held.join().unwrap();
}
