//! Run-to-completion (docs/latency.md) on a namespace bed: the example program
//! `datapath/examples/run_to_completion.rs` in ns b is the datapath and its application in one
//! thread — no worker thread — and plays RDMA Write ping-pong with the kernel-TCP
//! `mpa-peer listen --echo` in ns a. Every echo must come back placed, the echoed octets must
//! equal those sent, the connection must close, and the echo server must count exactly the
//! Writes the example posted. Its thread either spins (it must never block) or sleeps in the
//! kernel whenever a poll finds nothing (it must have blocked while echoes were on their way).

use mpa_harness::example;
use mpa_tests::{require_privileged, BedConfig, PeerListener, TestBed};
use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const ECHO_STAG: u32 = 0xec_0001;

/// Waits for `child` at most `within`; killed and `None` past it.
fn wait_within(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let t0 = Instant::now();
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        if t0.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_all(r: Option<impl Read>) -> String {
    let mut s = String::new();
    if let Some(mut r) = r {
        let _ = r.read_to_string(&mut s);
    }
    s
}

/// How the example's thread waits for the echo.
#[derive(Clone, Copy, PartialEq)]
enum Waiting {
    Spins,
    SleepsWhenIdle,
}

fn ping_pong(
    bed: &TestBed,
    program: &Path,
    port: u16,
    size: u64,
    iterations: u64,
    markers: bool,
    waiting: Waiting,
) {
    let payload = size - mpa::wire::ddp::TAGGED_HEADER_LEN as u64;
    let bind = SocketAddr::new(bed.addr_a(false), port);
    let advertise = format!("{ECHO_STAG:#x}:{payload}");
    let mut echo_args = vec![
        "--echo",
        "--timeout",
        "30",
        "--accept-timeout",
        "60",
        "--advertise",
        &advertise,
        "--rev",
        "2",
    ];
    if markers {
        echo_args.push("--markers");
    }
    let echo = PeerListener::start(bed, bind, &echo_args);

    let socket = mpa_harness::datapath::temp_path("rtc.sock");
    let mut cmd = bed.command(&bed.ns_b, &program.to_string_lossy());
    cmd.args(["--iface", &bed.if_b, "--connect", &bind.to_string()])
        .args(["--size", &size.to_string()])
        .args(["--iterations", &iterations.to_string()])
        .arg("--socket")
        .arg(&socket);
    if markers {
        cmd.arg("--markers");
    }
    if waiting == Waiting::SleepsWhenIdle {
        cmd.arg("--sleep-when-idle");
    }
    let mut rtc = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_within(&mut rtc, Duration::from_secs(90));
    let (out, err) = (read_all(rtc.stdout.take()), read_all(rtc.stderr.take()));
    assert!(
        status.is_some_and(|s| s.success()),
        "run_to_completion {size} B: {status:?}\nstdout: {out}\nstderr: {err}"
    );
    assert!(
        out.starts_with(&format!(
            "echo verified: {iterations} round trips of {size} octets; RTT/2 p50 "
        )),
        "{out}"
    );
    // A spinning loop never blocks; one that sleeps when idle does, at least while each echo
    // is on its way.
    let slept: u64 = (out.trim().rsplit_once("; the thread slept "))
        .and_then(|(_, rest)| rest.strip_suffix(" times"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no sleep count in {out}"));
    match waiting {
        Waiting::Spins => assert_eq!(slept, 0, "{out}"),
        Waiting::SleepsWhenIdle => assert!(slept >= iterations / 2, "{out}"),
    }
    // The control socket is removed when the datapath stops.
    assert!(!socket.exists(), "{} left behind", socket.display());

    let v = echo.report(Duration::from_secs(30));
    assert_eq!(v["echoes"], iterations, "{v}");
    assert!(v["error"].is_null(), "{v}");
}

#[test]
fn an_application_thread_turning_the_queue_plays_ping_pong_with_a_kernel_peer() {
    if !require_privileged("run-to-completion ping-pong") {
        return;
    }
    // Built before any peer listens: a build can outlast the peer's accept timeout.
    let program = example("mpa-datapath", "run_to_completion");
    let bed = TestBed::up(BedConfig::default()).unwrap();
    // A small Write without markers, then one of several segments with markers both ways.
    ping_pong(&bed, &program, 7661, 64, 300, false, Waiting::Spins);
    ping_pong(&bed, &program, 7662, 4096, 200, true, Waiting::Spins);
}

#[test]
fn an_application_thread_that_sleeps_when_idle_plays_ping_pong_with_a_kernel_peer() {
    if !require_privileged("run-to-completion ping-pong, sleeping when idle") {
        return;
    }
    let program = example("mpa-datapath", "run_to_completion");
    let bed = TestBed::up(BedConfig::default()).unwrap();
    ping_pong(
        &bed,
        &program,
        7663,
        64,
        300,
        false,
        Waiting::SleepsWhenIdle,
    );
    ping_pong(
        &bed,
        &program,
        7664,
        4096,
        200,
        true,
        Waiting::SleepsWhenIdle,
    );
}
