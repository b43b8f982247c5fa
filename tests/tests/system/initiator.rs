//! The Initiator side of connection setup against Responders in ns a: `mpa-control connect`
//! (a process in ns b) to `mpa-peer listen`, beside an in-process datapath in ns b (as
//! `mpa-bench` runs it); and the library's `connect_and_hand_over` against in-process
//! `MpaStream::accept` Responders (RTR delivery, Responder data to an Initiator flow,
//! rejection).

use mpa::crc::crc32c_append;
use mpa::encoder::FpduEncoder;
use mpa::endpoint::{rtr_ulpdu, EndpointConfig, EndpointError};
use mpa::startup::{PrivateDataRule, RtrSet, RtrType, StartupPolicy};
use mpa_control::datapath_client::DatapathClient;
use mpa_control::initiator::{connect_and_hand_over, InitiatorOutcome};
use mpa_ctl_proto::stats::{DatapathStats, FlowReport};
use mpa_ctl_proto::Message;
use mpa_datapath::server::Datapath;
use mpa_tests::PeerListener as Listener;
use mpa_tests::{
    bin, datapath, ended_flow, require_privileged, responder_in_a, run_in_netns, stats, BedConfig,
    DatapathOptions, TestBed,
};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

/// The datapath in ns b as `mpa-bench` starts it (digests on).
fn start_datapath(bed: &TestBed) -> (Datapath, PathBuf) {
    datapath(bed, &DatapathOptions::default())
}

/// The datapath's statistics.
fn stats_at(dp_socket: &Path) -> DatapathStats {
    stats(&mut DatapathClient::connect(dp_socket, Duration::from_secs(5)).unwrap())
}

/// The final counters the datapath kept for `flow_id`.
fn ended(dp_socket: &Path, flow_id: u64) -> FlowReport {
    ended_flow(
        &mut DatapathClient::connect(dp_socket, Duration::from_secs(5)).unwrap(),
        flow_id,
    )
}

/// Runs `mpa-control connect` in ns b; returns its JSON line (or panics with its stderr).
fn connect_cli(bed: &TestBed, dp_socket: &Path, to: SocketAddr, args: &[&str]) -> Value {
    let out = bed
        .command(&bed.ns_b, &bin("mpa-control").to_string_lossy())
        .args(["connect", "--json", "--to", &to.to_string()])
        .args(["--socket", &dp_socket.to_string_lossy()])
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "connect {args:?}: {}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    let line = stdout.lines().next().expect("no line from connect");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// The wire octets of the RTR FPDU an Initiator sends toward a peer.
fn rtr_fpdu_len(rtr: RtrType, markers_tx: bool) -> u64 {
    let mut out = Vec::new();
    FpduEncoder::new(markers_tx)
        .encode(&rtr_ulpdu(rtr, 1), &mut out)
        .unwrap();
    out.len() as u64
}

struct Case {
    /// Our Request's M (markers toward us).
    our_markers: bool,
    /// The listener's M.
    peer_markers: bool,
    our_no_crc: bool,
    peer_no_crc: bool,
    /// `--rtr` with `--p2p` (revision 2).
    rtr: Option<(&'static str, RtrType)>,
}

/// One connection: the listener times out after a second of silence and closes, the
/// datapath closes after its FIN, and `connect` sees the flow gone without an MPA error.
fn run_cli_case(bed: &TestBed, dp_socket: &Path, port: u16, c: &Case) {
    let bind = SocketAddr::new(bed.addr_a(false), port);
    let mut peer_args = vec!["--timeout", "1"];
    let mut our_args = vec!["--timeout", "5"];
    if c.peer_markers {
        peer_args.push("--markers");
    }
    if c.peer_no_crc {
        peer_args.push("--no-crc");
    }
    if c.our_markers {
        our_args.push("--markers");
    }
    if c.our_no_crc {
        our_args.push("--no-crc");
    }
    if let Some((name, _)) = c.rtr {
        peer_args.extend(["--rev", "2", "--p2p"]);
        our_args.extend(["--rev", "2", "--p2p", "--rtr", name]);
    }
    let what = format!(
        "ours M={} noCRC={}, peer M={} noCRC={}, rtr {:?}",
        c.our_markers,
        c.our_no_crc,
        c.peer_markers,
        c.peer_no_crc,
        c.rtr.map(|r| r.0)
    );
    let listener = Listener::start(bed, bind, &peer_args);
    let line = connect_cli(bed, dp_socket, bind, &our_args);
    let report = listener.report(Duration::from_secs(10));
    let crc = !(c.our_no_crc && c.peer_no_crc);
    let rev = if c.rtr.is_some() { 2 } else { 1 };
    // What `connect` printed: our view of the negotiation.
    assert_eq!(line["rev"], rev, "{what}: {line}");
    assert_eq!(line["markers_rx"], c.our_markers, "{what}: {line}");
    assert_eq!(line["markers_tx"], c.peer_markers, "{what}: {line}");
    assert_eq!(line["crc"], crc, "{what}: {line}");
    assert_eq!(line["p2p"], c.rtr.is_some(), "{what}: {line}");
    assert_eq!(
        line["rtr"],
        c.rtr.map_or(Value::Null, |(_, r)| format!("{r:?}").into()),
        "{what}: {line}"
    );
    // The Responder's view: the mirror image.
    assert_eq!(report["rev"], rev, "{what}: {report}");
    assert_eq!(report["markers_rx"], c.peer_markers, "{what}: {report}");
    assert_eq!(report["markers_tx"], c.our_markers, "{what}: {report}");
    assert_eq!(report["crc"], crc, "{what}: {report}");
    // The listener's documented clean outcome here: no ULPDU, and its own idle timeout
    // (reported as error 1, "timed out") — not a startup error (4), a framing error (2, 3)
    // or a missing/bad RTR (7), which it would report instead.
    assert_eq!(report["ulpdus"], 0, "{what}: {report}");
    assert_eq!(report["error"], "timed out", "{what}: {report}");
    assert_eq!(report["error_code"], 1, "{what}: {report}");
    // The datapath sent exactly the RTR FPDU (framed toward the peer) and nothing else, and
    // the flow ended cleanly on the peer's FIN.
    let flow_id = line["flow_id"].as_u64().unwrap();
    let f = ended(dp_socket, flow_id);
    let want_out = c.rtr.map_or(0, |(_, r)| rtr_fpdu_len(r, c.peer_markers));
    assert_eq!(f.octets_out, want_out, "{what}: {f:?}");
    assert_eq!(f.retransmissions, 0, "{what}: {f:?}");
    assert_eq!(
        f.ended.as_ref().and_then(|e| e.mpa_error),
        None,
        "{what}: {f:?}"
    );
    // A Read Request RTR is answered by a zero-length Read Response: an FPDU to our flow.
    let want_fpdus = u64::from(matches!(c.rtr, Some((_, RtrType::ZeroLengthReadRequest))));
    assert_eq!(f.rx.fpdus, want_fpdus, "{what}: {f:?}");
    assert_eq!(f.rx.crc_errors, 0, "{what}: {f:?}");
    assert_eq!(f.rx.marker_errors, 0, "{what}: {f:?}");
}

#[test]
fn mpa_control_connect_to_mpa_peer_listen() {
    if !require_privileged("mpa-control connect") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = start_datapath(&bed);
    let mut port = 7600;
    for bits in 0..16u8 {
        let c = Case {
            our_markers: bits & 1 != 0,
            peer_markers: bits & 2 != 0,
            our_no_crc: bits & 4 != 0,
            peer_no_crc: bits & 8 != 0,
            rtr: None,
        };
        run_cli_case(&bed, &path, port, &c);
        port += 1;
    }
    for rtr in [
        ("send", RtrType::ZeroLengthSend),
        ("write", RtrType::ZeroLengthWrite),
        ("read", RtrType::ZeroLengthReadRequest),
    ] {
        for (our_markers, peer_markers) in [(false, false), (true, true), (false, true)] {
            let c = Case {
                our_markers,
                peer_markers,
                our_no_crc: false,
                peer_no_crc: false,
                rtr: Some(rtr),
            };
            run_cli_case(&bed, &path, port, &c);
            port += 1;
        }
    }
    let s = stats_at(&path);
    assert_eq!(s.adopted_flows, 0);
    // Every hand-over started with the peer's TSval as TS.Recent: the Initiator watched its
    // port from before its Request until the hand-over (docs/environment.md, "Why
    // TS.Recent must be inherited"), and nothing stays watched.
    assert_eq!(
        (s.handover.ts_recent_inherited, s.handover.ts_recent_unknown),
        (25, 0),
        "{:?}",
        s.handover
    );
    assert!(s.handover.watched_ports.is_empty(), "{:?}", s.handover);
    assert!(s
        .ended_flows
        .iter()
        .all(|f| f.ts_recent_inherited.is_some()));
    dp.stop();
}

#[test]
fn connect_hold_expiry_closes_the_flow() {
    if !require_privileged("mpa-control connect --hold") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = start_datapath(&bed);
    let bind = SocketAddr::new(bed.addr_a(false), 7650);
    let listener = Listener::start(&bed, bind, &["--timeout", "20", "--p2p", "--rev", "2"]);
    let t0 = Instant::now();
    let line = connect_cli(
        &bed,
        &path,
        bind,
        &["--p2p", "--rtr", "write", "--hold", "1"],
    );
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "hold took {:?}",
        t0.elapsed()
    );
    assert_eq!(line["rtr"], "ZeroLengthWrite", "{line}");
    let report = listener.report(Duration::from_secs(5));
    // The RTR passed (else error 7); then our CloseFlow reset the connection (error 1).
    assert_eq!(report["error_code"], 1, "{report}");
    assert!(
        report["error"].as_str().unwrap().contains("reset"),
        "{report}"
    );
    let f = ended(&path, line["flow_id"].as_u64().unwrap());
    let reason = f.ended.as_ref().map(|e| e.reason.as_str());
    assert_eq!(reason, Some("closed by the operator"), "{f:?}");
    assert_eq!(f.octets_out, rtr_fpdu_len(RtrType::ZeroLengthWrite, false));
    dp.stop();
}

fn initiator(
    bed: &TestBed,
    dp_socket: &Path,
    to: SocketAddr,
    policy: StartupPolicy,
    private_data: &[u8],
) -> (InitiatorOutcome, DatapathClient) {
    let mut dpc = DatapathClient::connect(dp_socket, Duration::from_secs(20)).unwrap();
    let r = run_in_netns(&bed.ns_b, || {
        connect_and_hand_over(to, policy, private_data.to_vec(), None, &mut dpc)
    });
    (r.unwrap().unwrap(), dpc)
}

#[test]
fn rtr_reaches_the_responder_and_its_data_reaches_the_initiator_flow() {
    if !require_privileged("Initiator RTR") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = start_datapath(&bed);
    let data = b"from the Responder, after the RTR".to_vec();
    for (i, markers) in [false, true].into_iter().enumerate() {
        let bind = SocketAddr::new(bed.addr_a(false), 7660 + i as u16);
        let mut cfg = EndpointConfig::default();
        cfg.policy.revision = 2;
        cfg.policy.markers_required = markers;
        cfg.policy.startup_timeout = Duration::from_secs(5);
        cfg.policy.rtr_support = RtrSet::single(RtrType::ZeroLengthSend);
        let d = data.clone();
        let peer = responder_in_a(&bed, bind, cfg, move |s| {
            let mut s = s.expect("accept");
            // Before the RTR a Responder may not send: proves the first FPDU was the RTR.
            assert!(matches!(s.send(b"x"), Err(EndpointError::NotYetAllowed)));
            let n = s
                .recv_with(Some(Duration::from_secs(5)), |_| panic!("data before RTR"))
                .expect("the RTR");
            assert_eq!(n, Some(0), "the RTR is not delivered as data");
            s.send(&d).expect("send allowed after the RTR");
            s.flush().unwrap();
            s.get_ref().shutdown(std::net::Shutdown::Write).unwrap();
            // The datapath closes after our FIN.
            while s
                .recv_with(Some(Duration::from_secs(10)), |_| {
                    panic!("datapath sent data")
                })
                .unwrap()
                .is_some()
            {}
        });
        let policy = StartupPolicy {
            revision: 2,
            p2p: true,
            startup_timeout: Duration::from_secs(5),
            ..StartupPolicy::default()
        };
        let (outcome, mut dpc) = initiator(&bed, &path, bind, policy, b"hello");
        let InitiatorOutcome::HandedOver {
            flow_id,
            frozen,
            negotiated,
        } = outcome
        else {
            panic!("rejected")
        };
        assert_eq!(negotiated.rtr, Some(RtrType::ZeroLengthSend));
        assert_eq!(negotiated.markers_tx, markers);
        peer.join().unwrap();
        let gone = dpc.wait_notification(Some(Instant::now() + Duration::from_secs(10)));
        let Ok(Some(Message::FlowGone {
            flow_id: g,
            mpa_error,
            reason,
            ..
        })) = gone
        else {
            panic!("{gone:?}")
        };
        assert_eq!(g, flow_id);
        assert_eq!(mpa_error, None, "{reason}");
        drop(frozen);
        let f = ended(&path, flow_id);
        assert_eq!(f.rx.fpdus, 1, "{f:?}");
        assert_eq!(f.rx.ulpdu_octets, data.len() as u64, "{f:?}");
        assert_eq!(
            f.ulpdu_digest,
            Some(format!("{:08x}", crc32c_append(0, &data))),
            "{f:?}"
        );
    }
    dp.stop();
}

#[test]
fn rejection_reaches_the_caller_and_not_the_datapath() {
    if !require_privileged("Initiator rejected") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = start_datapath(&bed);
    let bind = SocketAddr::new(bed.addr_a(false), 7670);
    let mut cfg = EndpointConfig::default();
    cfg.policy.private_data_rule = PrivateDataRule::RequirePrefix(b"iser:".to_vec());
    cfg.policy.reject_reason = b"only iser here".to_vec();
    let peer = responder_in_a(&bed, bind, cfg, |s| match s {
        Err(EndpointError::RejectedPeer { reason }) => reason,
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("accepted"),
    });
    let policy = StartupPolicy {
        startup_timeout: Duration::from_secs(5),
        ..StartupPolicy::default()
    };
    let (outcome, _dpc) = initiator(&bed, &path, bind, policy, b"nfs:share");
    let InitiatorOutcome::Rejected { reason } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(reason, b"only iser here");
    assert_eq!(peer.join().unwrap(), b"only iser here");
    let s = stats_at(&path);
    assert_eq!(s.adopted_flows, 0, "{s:?}");
    assert!(s.ended_flows.is_empty(), "{s:?}");
    dp.stop();
}
