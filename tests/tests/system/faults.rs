//! Faults (docs/limits.md, "Process faults"): a crash must never leave the host worse off than
//! before. `mpa-datapath` runs as a process in ns b ([`DatapathProcess`]) so that it can be
//! killed or made to fail; Initiators are kernel-TCP MPA endpoints in ns a.
//!
//! * `kill -9` of the datapath takes its XDP program with it (bpf_link): the interface no
//!   longer drops the flows it steered, and a new datapath starts on it and serves.
//! * A stale program of ours attached through netlink (what datapaths before bpf_link left
//!   behind) is removed at start; a running datapath's program is never displaced.
//! * A worker panic ends that queue's flows with `FlowGone` and the reason, unsteers them and
//!   makes the process exit with status 70.
//! * The program detached by someone else is reported (log and `xdp_detached`) and its flows
//!   end with that reason; netlink cannot detach it.
//! * A dead control client loses its regions, subscriptions and unfinished adoptions; other
//!   flows keep placing.

use mpa::crc::crc32c_append;
use mpa::endpoint::{EndpointConfig, EndpointError, MpaStream};
use mpa_app::Consumer;
use mpa_bpf::{AttachMode, XdpSteering};
use mpa_control::datapath_client::DatapathClient;
use mpa_ctl_proto::Message;
use mpa_datapath::server::CONTROL_PANIC_AT_STATS_ENV;
use mpa_datapath::worker::{HANG_AT_HANDOVER_ENV, PANIC_AT_HANDOVER_ENV};
use mpa_harness::{accept_and_hand_over, Responder};
use mpa_tests::frames::rdma_write;
use mpa_tests::xdp::ifindex_b;
use mpa_tests::{
    ended_flow, hand_over, initiator_in_a, listen_in, require_privileged, run_in, run_in_netns,
    skip_or_fail, stats, BedConfig, DatapathProcess, TestBed,
};
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Waits (bounded) until `cond` holds; panics naming `what` otherwise.
fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn start(bed: &TestBed, envs: &[(&str, &str)]) -> DatapathProcess {
    DatapathProcess::start(bed, envs).unwrap_or_else(|log| panic!("mpa-datapath: {log}"))
}

fn xdp_on_b(bed: &TestBed) -> bool {
    bed.link_b().unwrap().contains("xdp")
}

/// ULPDU `i` of the stream `seed`: `size` octets.
fn ulpdu(seed: usize, i: usize, size: usize) -> Vec<u8> {
    (0..size)
        .map(|j| (seed * 31 + i * 131 + j * 7 + 3) as u8)
        .collect()
}

fn initiator_cfg() -> EndpointConfig {
    let mut cfg = EndpointConfig::default();
    cfg.policy.startup_timeout = Duration::from_secs(20);
    cfg
}

/// One whole connection through the datapath at `socket`: an Initiator sends 300 ULPDUs of
/// 1000 octets and closes; the flow must end cleanly with the same digest and octet count.
fn transfer_through(bed: &TestBed, socket: &Path, port: u16, seed: usize) {
    const COUNT: usize = 300;
    const SIZE: usize = 1000;
    let addr = SocketAddr::new(bed.addr_b(false), port);
    let listener = listen_in(&bed.ns_b, addr);
    let peer = initiator_in_a(bed, addr, initiator_cfg(), move |_, s| {
        let mut s = s.expect("startup with the datapath");
        let mut digest = 0u32;
        for i in 0..COUNT {
            let u = ulpdu(seed, i, SIZE);
            digest = crc32c_append(digest, &u);
            s.send(&u).unwrap();
        }
        s.flush().unwrap();
        s.get_ref().shutdown(std::net::Shutdown::Write).unwrap();
        while s
            .recv_with(Some(Duration::from_secs(20)), |_| {
                panic!("datapath sent an FPDU")
            })
            .unwrap()
            .is_some()
        {}
        digest
    });
    let (flow_id, mut dpc, frozen) = hand_over(bed, socket, &listener, false, true, None);
    let digest = peer.join().unwrap();
    let Message::FlowGone {
        flow_id: gone,
        mpa_error,
        reason,
        ..
    } = dpc.next_notification().unwrap()
    else {
        panic!("not FlowGone")
    };
    assert_eq!((gone, mpa_error), (flow_id, None), "{reason}");
    drop(frozen);
    let f = ended_flow(&mut dpc, flow_id);
    assert_eq!(f.ulpdu_digest, Some(format!("{digest:08x}")), "{f:?}");
    assert_eq!(f.rx.ulpdu_octets, (COUNT * SIZE) as u64, "{f:?}");
    assert_eq!(f.rx.fpdus, COUNT as u64, "{f:?}");
}

/// An Initiator held mid-connection: it sends 10 ULPDUs, reports its address, and waits for
/// `go`. Then it keeps sending (bounded) until the connection fails, and returns how: after
/// the datapath is gone and the frozen socket closed, the kernel of ns b answers with a reset
/// (the interface no longer drops the 4-tuple).
struct Held {
    peer: JoinHandle<Option<ErrorKind>>,
    sent: mpsc::Receiver<SocketAddr>,
    go: mpsc::Sender<()>,
}

fn held_initiator(bed: &TestBed, addr: SocketAddr) -> Held {
    let (sent_tx, sent) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let peer = initiator_in_a(bed, addr, initiator_cfg(), move |local, s| {
        let mut s: MpaStream<TcpStream> = s.expect("startup with the datapath");
        for i in 0..10 {
            s.send(&ulpdu(0, i, 500)).unwrap();
        }
        s.flush().unwrap();
        sent_tx.send(local).unwrap();
        go_rx.recv_timeout(Duration::from_secs(60)).unwrap();
        let kind = |e: EndpointError| match e {
            EndpointError::Io(e) => Some(e.kind()),
            EndpointError::Closed => Some(ErrorKind::UnexpectedEof),
            _ => None,
        };
        for i in 0..50 {
            if let Err(e) = s.send(&ulpdu(1, i, 500)).and_then(|()| s.flush()) {
                return kind(e);
            }
            match s.recv_with(Some(Duration::from_millis(200)), |_| {}) {
                Err(EndpointError::Timeout) | Ok(Some(_)) => {}
                Ok(None) => return Some(ErrorKind::UnexpectedEof),
                Err(e) => return kind(e),
            }
        }
        None
    });
    Held { peer, sent, go }
}

/// Live FPDUs of `flow_id`, once its worker counted `n`.
fn wait_fpdus(dpc: &mut DatapathClient, flow_id: u64, n: u64) {
    wait_until(
        &format!("flow {flow_id} received {n} FPDUs"),
        Duration::from_secs(10),
        || {
            stats(dpc)
                .live_flows()
                .any(|(_, f)| f.flow_id == flow_id && f.rx.fpdus == n)
        },
    );
}

#[test]
fn kill_9_leaves_no_program_behind_and_a_restart_serves_again() {
    if !require_privileged("kill -9 of the datapath") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let mut dp = start(&bed, &[]);
    assert!(xdp_on_b(&bed), "{}", bed.link_b().unwrap());

    // A connection handed over and carrying data when the datapath dies.
    let addr = SocketAddr::new(bed.addr_b(false), 7601);
    let listener = listen_in(&bed.ns_b, addr);
    let held = held_initiator(&bed, addr);
    let (flow_id, mut dpc, frozen) = hand_over(&bed, &dp.socket, &listener, false, true, None);
    held.sent.recv_timeout(Duration::from_secs(20)).unwrap();
    wait_fpdus(&mut dpc, flow_id, 10);

    let status = dp.kill9();
    assert_eq!(status.signal(), Some(9), "{status}");
    // The kernel released the link with the process: the program left the interface.
    wait_until(
        "XDP gone from the interface",
        Duration::from_secs(5),
        || !xdp_on_b(&bed),
    );
    // mpa-control closes its frozen sockets when the datapath goes; the 4-tuple then reaches
    // the kernel, which resets it: the peer learns, instead of sending into a black hole.
    drop(dpc);
    drop(frozen);
    held.go.send(()).unwrap();
    assert_eq!(held.peer.join().unwrap(), Some(ErrorKind::ConnectionReset));
    // Kernel TCP on the interface is untouched.
    let l = bed.listen_b(bed.addr_b(false), 7602);
    bed.connect(&l).echo(b"after kill -9").unwrap();

    // A new datapath starts on the same interface (no "Native and generic XDP can't be
    // active at the same time") and carries a new connection octet for octet.
    let dp = start(&bed, &[]);
    assert!(
        !dp.log().iter().any(|l| l.contains("stale")),
        "nothing stale to remove after a bpf_link owner died: {:?}",
        dp.log()
    );
    transfer_through(&bed, &dp.socket, 7603, 1);
}

#[test]
fn stale_program_is_removed_and_a_running_datapath_is_not_displaced() {
    if !require_privileged("stale XDP program") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();

    // A second datapath on a served interface fails and leaves the first one alone.
    let mut first = start(&bed, &[]);
    let log = match DatapathProcess::start_once(&bed, &[]) {
        Ok(_) => panic!("a second datapath started on the same interface"),
        Err(log) => log,
    };
    assert!(
        log.contains(&format!(
            "mpa-datapath: attach the XDP program to {} (ifindex",
            bed.if_b
        )) && log.contains("Device or resource busy"),
        "{log}"
    );
    assert!(!log.contains("stale"), "{log}");
    transfer_through(&bed, &first.socket, 7611, 2);
    assert!(first.terminate().success());
    assert!(!xdp_on_b(&bed), "a clean stop detaches");

    // What a datapath from before bpf_link left on a crash: our program, attached through
    // netlink, owned by nobody.
    let ifindex = ifindex_b(&bed);
    let prog_id = run_in_netns(&bed.ns_b, || {
        XdpSteering::load()
            .unwrap()
            .attach_legacy_and_leak(ifindex, AttachMode::Driver)
    })
    .unwrap()
    .unwrap();
    assert!(
        bed.link_b()
            .unwrap()
            .contains(&format!("prog/xdp id {prog_id}")),
        "{}",
        bed.link_b().unwrap()
    );
    let mut dp = start(&bed, &[]);
    let removed: Vec<_> = dp
        .log()
        .into_iter()
        .filter(|l| l.contains("removed a stale XDP steering program"))
        .collect();
    assert_eq!(removed.len(), 1, "{:?}", dp.log());
    assert!(
        removed[0].contains(&format!("prog_id={prog_id} ")),
        "{removed:?}"
    );
    assert!(!bed.link_b().unwrap().contains(&format!("id {prog_id} ")));
    transfer_through(&bed, &dp.socket, 7612, 3);
    assert!(dp.terminate().success());
    assert!(!xdp_on_b(&bed), "{}", bed.link_b().unwrap());
}

#[test]
fn worker_panic_reports_its_flows_gone_and_exits_non_zero() {
    if !require_privileged("worker panic") {
        return;
    }
    if !cfg!(debug_assertions) {
        // The binaries are built with this test's profile; release builds have no hook.
        eprintln!("\n!!! SKIPPING worker panic: the fault hook exists in debug builds only\n");
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    // The worker panics at a hand-over that finds it owning one flow already.
    // mpa_bpf's debug lines show each flow unsteered.
    let mut dp = start(
        &bed,
        &[
            (PANIC_AT_HANDOVER_ENV, "1"),
            ("RUST_LOG", "info,mpa_bpf=debug"),
        ],
    );

    let addr = SocketAddr::new(bed.addr_b(false), 7621);
    // The second hand-over makes the worker panic: it is refused.
    let f = flow_then_faulted_hand_over(&bed, &dp, addr, 7622);
    let (flow_id, mut dpc, frozen, held, second) = (f.flow_id, f.dpc, f.frozen, f.held, f.second);
    let e = f.refused.expect_err("a hand-over to a panicking worker");
    assert!(format!("{e:#}").contains("worker did not answer"), "{e:#}");
    assert!(matches!(
        second.join().unwrap(),
        Err(EndpointError::Startup(_))
    ));

    // The first flow is reported gone, with the reason.
    let Message::FlowGone {
        flow_id: gone,
        mpa_error,
        terminate,
        reason,
    } = dpc.next_notification().unwrap()
    else {
        panic!("not FlowGone")
    };
    assert_eq!((gone, mpa_error, terminate), (flow_id, None, None));
    assert!(
        reason.starts_with("worker of queue 0 panicked: fault injected by"),
        "{reason}"
    );
    // Then the datapath stops, with a status and a line that say why.
    let status = dp.wait_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(70), "{status}");
    let log = dp.log();
    assert!(
        log.iter()
            .any(|l| l.starts_with("mpa-datapath: stopped: worker of queue 0 panicked")),
        "{log:?}"
    );
    // Its 4-tuple left the XDP flow map before the stop.
    let local = addr.to_string();
    let unsteered = log
        .iter()
        .position(|l| l.contains("flow unsteered") && l.contains(&format!("local={local} ")));
    let failed = log.iter().position(|l| l.contains("worker failed"));
    assert!(
        matches!((failed, unsteered), (Some(f), Some(u)) if f < u),
        "{log:?}"
    );
    assert!(!xdp_on_b(&bed), "{}", bed.link_b().unwrap());
    // The flow's 4-tuple is no longer dropped: the peer gets the kernel's reset.
    drop(frozen);
    held.go.send(()).unwrap();
    assert_eq!(held.peer.join().unwrap(), Some(ErrorKind::ConnectionReset));

    // The host is as before: a datapath (without the fault) serves again.
    let dp = start(&bed, &[]);
    transfer_through(&bed, &dp.socket, 7623, 4);
}

/// A worker that stops turning its loop (the debug hook hangs it at a hand-over) is found by
/// the control thread's watchdog within the deadline: its flow is reported gone with the
/// reason, the program leaves the interface, and the process exits 70 — not a zombie that a
/// supervisor would never restart.
#[test]
fn a_stuck_worker_is_found_and_the_datapath_exits_non_zero() {
    if !require_privileged("stuck worker") {
        return;
    }
    if !cfg!(debug_assertions) {
        eprintln!("\n!!! SKIPPING stuck worker: the fault hook exists in debug builds only\n");
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let mut dp = DatapathProcess::start_with(
        &bed,
        &[(HANG_AT_HANDOVER_ENV, "1")],
        &["--worker-deadline-ms", "1500"],
    )
    .unwrap();
    let addr = SocketAddr::new(bed.addr_b(false), 7631);
    // The second hand-over hangs the worker.
    let f = flow_then_faulted_hand_over(&bed, &dp, addr, 7632);
    let (flow_id, mut dpc, frozen, held) = (f.flow_id, f.dpc, f.frozen, f.held);
    assert!(f.refused.is_err(), "a hand-over to a stuck worker");
    let _ = f.second.join();
    let Message::FlowGone {
        flow_id: gone,
        reason,
        ..
    } = dpc.next_notification().unwrap()
    else {
        panic!("not FlowGone")
    };
    assert_eq!(gone, flow_id);
    assert!(
        reason.starts_with("worker of queue 0 stuck: its loop has not turned for"),
        "{reason}"
    );
    let status = dp.wait_exit(Duration::from_secs(20));
    assert_eq!(status.code(), Some(70), "{status}");
    assert!(
        dp.log()
            .iter()
            .any(|l| l.starts_with("mpa-datapath: stopped: worker of queue 0 stuck")),
        "{:?}",
        dp.log()
    );
    assert!(!xdp_on_b(&bed), "{}", bed.link_b().unwrap());
    drop(frozen);
    held.go.send(()).unwrap();
    let _ = held.peer.join();
}

/// A panic of the control thread (the debug hook panics it on a statistics request) stops
/// the datapath: the workers end, the program leaves the interface, and the process exits
/// 70 with the reason, instead of living on without a control socket or steering.
#[test]
fn a_control_thread_panic_ends_the_process_non_zero() {
    if !require_privileged("control thread panic") {
        return;
    }
    if !cfg!(debug_assertions) {
        eprintln!("\n!!! SKIPPING control panic: the fault hook exists in debug builds only\n");
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let mut dp = start(&bed, &[(CONTROL_PANIC_AT_STATS_ENV, "1")]);
    assert!(xdp_on_b(&bed));
    let mut dpc = DatapathClient::connect(&dp.socket, Duration::from_secs(5)).unwrap();
    assert!(dpc.request(Message::get_stats).is_err());
    let status = dp.wait_exit(Duration::from_secs(20));
    assert_eq!(status.code(), Some(70), "{status}");
    assert!(
        dp.log()
            .iter()
            .any(|l| l
                .starts_with("mpa-datapath: stopped: the control thread panicked: fault injected")),
        "{:?}",
        dp.log()
    );
    assert!(!xdp_on_b(&bed), "{}", bed.link_b().unwrap());
}

/// A flow handed over at `addr` and carrying FPDUs, then a second connection (port
/// `second_port`) whose hand-over meets the worker's injected fault.
struct FaultedHandOver {
    flow_id: u64,
    dpc: DatapathClient,
    frozen: mpa_control::freeze::FrozenSocket,
    held: Held,
    /// The second Initiator's thread (its startup times out).
    second: JoinHandle<Result<(), EndpointError>>,
    /// What the second hand-over returned (its error with its causes).
    refused: Result<mpa_harness::HandedOver, String>,
}

fn flow_then_faulted_hand_over(
    bed: &TestBed,
    dp: &DatapathProcess,
    addr: SocketAddr,
    second_port: u16,
) -> FaultedHandOver {
    let listener = listen_in(&bed.ns_b, addr);
    let held = held_initiator(bed, addr);
    let (flow_id, mut dpc, frozen) = hand_over(bed, &dp.socket, &listener, false, true, None);
    held.sent.recv_timeout(Duration::from_secs(20)).unwrap();
    wait_fpdus(&mut dpc, flow_id, 10);
    let addr2 = SocketAddr::new(bed.addr_b(false), second_port);
    let listener2 = listen_in(&bed.ns_b, addr2);
    let mut cfg = initiator_cfg();
    cfg.policy.startup_timeout = Duration::from_secs(3);
    let second = initiator_in_a(bed, addr2, cfg, |_, s| s.map(|_| ()));
    let refused = accept_and_hand_over(
        &bed.ns_b,
        &dp.socket,
        &listener2,
        &Responder::framing(false, true),
    )
    .map_err(|e| format!("{e:#}"));
    FaultedHandOver {
        flow_id,
        dpc,
        frozen,
        held,
        second,
        refused,
    }
}

/// `ip -j -d link show` of the bed's interface: the id of the XDP program attached.
fn attached_prog_id(bed: &TestBed) -> u64 {
    let out = run_in(
        &bed.ns_b,
        &["ip", "-j", "-d", "link", "show", "dev", &bed.if_b],
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v[0]["xdp"]["prog"]["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no XDP program in {v}"))
}

#[test]
fn xdp_detach_by_someone_else_is_reported_and_ends_the_flows() {
    if !require_privileged("XDP detached by someone else") {
        return;
    }
    if std::process::Command::new("bpftool")
        .arg("version")
        .output()
        .is_err()
    {
        skip_or_fail("XDP detached by someone else", "bpftool is not installed");
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let mut dp = start(&bed, &[]);
    let addr = SocketAddr::new(bed.addr_b(false), 7641);
    let listener = listen_in(&bed.ns_b, addr);
    let held = held_initiator(&bed, addr);
    let (flow_id, mut dpc, frozen) = hand_over(&bed, &dp.socket, &listener, false, true, None);
    held.sent.recv_timeout(Duration::from_secs(20)).unwrap();
    wait_fpdus(&mut dpc, flow_id, 10);
    assert!(!stats(&mut dpc).xdp_detached);

    // Netlink cannot take a link-attached program away.
    let e = run_in(
        &bed.ns_b,
        &["ip", "link", "set", "dev", &bed.if_b, "xdp", "off"],
    )
    .expect_err("ip link set xdp off removed a bpf_link program");
    assert!(
        e.to_string().contains("Can't replace active BPF XDP link"),
        "{e}"
    );
    assert!(xdp_on_b(&bed));

    // BPF_LINK_DETACH can: find our link by its program and detach it.
    let prog_id = attached_prog_id(&bed);
    let out = std::process::Command::new("bpftool")
        .args(["-j", "link", "show"])
        .output()
        .unwrap();
    let links: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let link_id = links
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["prog_id"].as_u64() == Some(prog_id))
        .and_then(|l| l["id"].as_u64())
        .unwrap_or_else(|| panic!("no link holds program {prog_id}: {links}"));
    let st = std::process::Command::new("bpftool")
        .args(["link", "detach", "id", &link_id.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    assert!(!xdp_on_b(&bed));

    // Reported within the check interval (1 s): the flow ends with the reason (the peer gets
    // the datapath's RST), the statistics say so, one line in the log.
    let Message::FlowGone {
        flow_id: gone,
        mpa_error,
        reason,
        ..
    } = dpc.next_notification().unwrap()
    else {
        panic!("not FlowGone")
    };
    assert_eq!((gone, mpa_error), (flow_id, None));
    assert_eq!(
        reason,
        "the XDP steering program was detached from the interface"
    );
    drop(frozen);
    held.go.send(()).unwrap();
    assert_eq!(held.peer.join().unwrap(), Some(ErrorKind::ConnectionReset));
    assert!(stats(&mut dpc).xdp_detached);
    let log = dp.log();
    assert_eq!(
        log.iter()
            .filter(|l| l.contains("XDP steering program was detached by someone else"))
            .count(),
        1,
        "{log:?}"
    );
    // New flows are refused: their segments could not reach the datapath.
    let r = dpc.request(|id| Message::AdoptFlow {
        id,
        local: SocketAddr::new(bed.addr_b(false), 7642),
        remote: SocketAddr::new(bed.addr_a(false), 40000),
    });
    let e = r.expect_err("adoption without XDP");
    assert!(
        e.to_string()
            .contains("the XDP steering program was detached from the interface"),
        "{e}"
    );
    drop(dpc);
    assert!(dp.terminate().success());
}

/// The datapath process's completion-ring memfds of domains 1 and 2: (mappings of 1,
/// descriptors of 1, mappings of 2, descriptors of 2). The memfds are named
/// `mpa-completions-PD-SUBSCRIPTION`.
fn completion_rings(pid: u32) -> (usize, usize, usize, usize) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let of = |pd: u32| {
        let name = format!("memfd:mpa-completions-{pd}-");
        (
            maps.lines().filter(|l| l.contains(&name)).count(),
            fds.iter().filter(|l| l.contains(&name)).count(),
        )
    };
    let ((m1, f1), (m2, f2)) = (of(1), of(2));
    (m1, f1, m2, f2)
}

#[test]
fn dead_client_loses_its_regions_and_adoptions_and_other_flows_keep_placing() {
    if !require_privileged("dead control client") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let mut dp = start(&bed, &[]);
    let path = dp.socket.clone();
    // Consumer A (domain 1) dies mid-transfer; consumer B (domain 2) lives on.
    let mut a = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
    let region_a = a.create_region(1 << 20, 1, true, false).unwrap();
    a.subscribe(1).unwrap();
    let mut b = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
    let region_b = b.create_region(1 << 20, 2, true, false).unwrap();
    b.subscribe(2).unwrap();
    let (sa, sb) = (region_a.info().stag, region_b.info().stag);
    let mut dpc = DatapathClient::connect(&path, Duration::from_secs(10)).unwrap();
    let before = stats(&mut dpc).registry;
    assert_eq!((before.regions, before.subscribers), (2, 2));

    // Each peer writes 100 × 500 octets, waits for `go`, then 100 more.
    let peer = |port: u16, stag: u32| {
        let addr = SocketAddr::new(bed.addr_b(false), port);
        let listener = listen_in(&bed.ns_b, addr);
        let (half_tx, half) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let h = initiator_in_a(&bed, addr, initiator_cfg(), move |_, s| {
            let mut s = s.expect("startup with the datapath");
            for i in 0..100u64 {
                s.send(&rdma_write(stag, i * 500, 500)).unwrap();
            }
            s.flush().unwrap();
            half_tx.send(()).unwrap();
            go_rx.recv_timeout(Duration::from_secs(60)).unwrap();
            for i in 100..200u64 {
                if s.send(&rdma_write(stag, i * 500, 500)).is_err() {
                    break;
                }
            }
            let _ = s.flush();
            let _ = s.get_ref().shutdown(std::net::Shutdown::Write);
            loop {
                match s.recv_with(Some(Duration::from_secs(20)), |_| {}) {
                    Ok(Some(_)) => continue,
                    other => return other.map(|_| ()),
                }
            }
        });
        (listener, half, go, h)
    };
    let (la, half_a, go_a, peer_a) = peer(7631, sa);
    let (flow_a, mut dpc_a, frozen_a) = hand_over(&bed, &path, &la, false, true, Some(1));
    let (lb, half_b, go_b, peer_b) = peer(7632, sb);
    let (flow_b, mut dpc_b, frozen_b) = hand_over(&bed, &path, &lb, false, true, Some(2));
    half_a.recv_timeout(Duration::from_secs(20)).unwrap();
    half_b.recv_timeout(Duration::from_secs(20)).unwrap();
    // Both consumers see the first 100 completions of their flow.
    let completions = |c: &mut Consumer, n: usize| {
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        while got < n {
            match c.next_completions(deadline).unwrap() {
                Some(items) => got += items.len(),
                None => break,
            }
        }
        got
    };
    assert_eq!(completions(&mut a, 100), 100);
    assert_eq!(completions(&mut b, 100), 100);

    // A control client that adopted a 4-tuple and died before its hand-over.
    let mut adopter = DatapathClient::connect(&path, Duration::from_secs(10)).unwrap();
    let adopted_before = stats(&mut dpc).adopted_flows;
    let r = adopter
        .request(|id| Message::AdoptFlow {
            id,
            local: SocketAddr::new(bed.addr_b(false), 7639),
            remote: SocketAddr::new(bed.addr_a(false), 40000),
        })
        .unwrap();
    assert!(matches!(r, Message::FlowAdopted { .. }), "{r:?}");
    assert_eq!(stats(&mut dpc).adopted_flows, adopted_before + 1);

    // Each consumer's completion rings: one memfd mapped (and held) by the datapath.
    let pid = dp.pid();
    wait_until(
        "the rings of domains 1 and 2 held by the datapath",
        Duration::from_secs(5),
        || completion_rings(pid) == (1, 1, 1, 1),
    );

    // Consumer A and the adopter die (their connections close as a killed process's do).
    drop(region_a);
    drop(a);
    drop(adopter);
    wait_until(
        "the dead clients' region, subscription and adoption released",
        Duration::from_secs(5),
        || {
            let s = stats(&mut dpc);
            (
                s.registry.regions,
                s.registry.subscribers,
                s.registry.region_octets,
                s.adopted_flows,
            ) == (1, 1, 1 << 20, adopted_before)
        },
    );
    // Its completion rings are released: the workers unmapped them and closed the memfd.
    wait_until(
        "the dead consumer's completion rings unmapped and closed",
        Duration::from_secs(5),
        || completion_rings(pid) == (0, 0, 1, 1),
    );

    // Flow A's next write names a region that no longer exists: Terminate "invalid STag"
    // (RFC 5041 §7.2: layer DDP, tagged buffer error, code 0), that flow only.
    go_a.send(()).unwrap();
    match peer_a.join().unwrap() {
        Err(EndpointError::Terminated {
            layer,
            error_type,
            error_code,
        }) => assert_eq!((layer, error_type, error_code), (1, 1, 0)),
        other => panic!("flow A's peer saw {other:?}"),
    }
    let Message::FlowGone {
        flow_id, terminate, ..
    } = dpc_a.next_notification().unwrap()
    else {
        panic!("not FlowGone")
    };
    assert_eq!(flow_id, flow_a);
    let t = terminate.expect("a Terminate");
    assert_eq!((t.layer, t.error_type, t.error_code), (1, 1, 0));
    drop(frozen_a);

    // Flow B places its second half into region B and ends cleanly, every octet in place.
    go_b.send(()).unwrap();
    peer_b.join().unwrap().unwrap();
    let Message::FlowGone {
        flow_id,
        mpa_error,
        terminate,
        reason,
    } = dpc_b.next_notification().unwrap()
    else {
        panic!("not FlowGone")
    };
    assert_eq!(
        (flow_id, mpa_error, terminate),
        (flow_b, None, None),
        "{reason}"
    );
    drop(frozen_b);
    assert_eq!(completions(&mut b, 100), 100);
    let f = ended_flow(&mut dpc_b, flow_b);
    assert_eq!(
        (f.rx.placed_in_order, f.rx.completions),
        (200, 200),
        "{f:?}"
    );
    let want: Vec<u8> = (0..500).map(|j| (j % 251) as u8).collect();
    let mut got = vec![0u8; 500];
    for i in 0..200u64 {
        assert!(region_b.read(i * 500, &mut got));
        assert_eq!(got, want, "write {i}");
    }
    drop(dpc);
    drop((dpc_a, dpc_b, b));
    assert!(dp.terminate().success());
}
