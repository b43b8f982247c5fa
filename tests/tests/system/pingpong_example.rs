//! The Write ping-pong example (`app/examples/write_pingpong.rs`, walked through in
//! docs/verbs.md) listens and connects by itself: between two datapaths (one in each
//! namespace, each with its connection manager), and against `mpa-peer` in both roles
//! (`listen --echo`, `connect --op pingpong`); and so does its C twin over libmpaxdp
//! (`examples/c/write_pingpong.c`). Every echo is checked octet for octet by
//! whichever side measures.

use mpa_datapath::server::Datapath;
use mpa_harness::datapath::start_datapath_on;
use mpa_harness::example;
use mpa_tests::{
    bin, datapath, require_privileged, BedConfig, ControlDaemon, DatapathOptions, PeerListener,
    TestBed,
};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SIZE: &str = "64";
const ITERS: &str = "300";

/// A connection manager for the datapath at `socket`, in namespace `ns`.
pub(crate) fn manager(bed: &TestBed, ns: &str, socket: &Path) -> ControlDaemon {
    let config = mpa_harness::temp_path("pingpong-cm.toml");
    std::fs::write(
        &config,
        format!("datapath_socket = \"{}\"\n", socket.display()),
    )
    .unwrap();
    let d = ControlDaemon::start_in(bed, ns, &config, "info");
    d.wait_line(&["serving applications"]);
    d
}

/// `program SOCKET ARGS…`, its output piped.
pub(crate) fn spawn(program: &Path, socket: &Path, args: &[&str]) -> Child {
    Command::new(program)
        .arg(socket)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The first line `child` prints (a listener says where it listens).
pub(crate) fn first_line(child: &mut Child) -> String {
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut first,
    )
    .unwrap();
    first.trim().to_string()
}

fn pingpong(program: &Path, socket: &Path, role: &str, addr: SocketAddr, extra: &[&str]) -> Child {
    let at = addr.to_string();
    let args: Vec<&str> = [role, &at, SIZE, ITERS]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    spawn(program, socket, &args)
}

/// Waits (bounded) for `child`; its output, which must be a success.
pub(crate) fn finished(child: Child, what: &str) -> String {
    let t0 = Instant::now();
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        while t0.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(100));
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return;
            }
        }
        let _ = Command::new("kill").arg(pid.to_string()).status();
    });
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().unwrap();
    let _ = watchdog.join();
    let out = String::from_utf8_lossy(&stdout).into_owned();
    assert!(
        status.success(),
        "{what}: {status}\n{out}\n{}",
        String::from_utf8_lossy(&stderr)
    );
    out
}

/// The measuring side's table: perftest's header and one row of SIZE and ITERS.
fn latency_table(out: &str) {
    let mut lines = out.lines().skip_while(|l| !l.contains("#bytes"));
    let header = lines.next().unwrap_or_else(|| panic!("no table: {out}"));
    assert!(header.contains("t_typical[usec]") && header.contains("99.9% percentile[usec]"));
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(&row[..2], &[SIZE, ITERS], "{out}");
    let values: Vec<f64> = row[2..].iter().map(|v| v.parse().unwrap()).collect();
    assert_eq!(values.len(), 7, "{out}");
    assert!(
        values[0] > 0.0 && values[0] <= values[1],
        "t_min ≤ t_max: {out}"
    );
}

#[test]
fn the_example_pings_between_two_datapaths() {
    if !require_privileged("the ping-pong example between two datapaths") {
        return;
    }
    // Both sides poll for their completions.
    between_two_datapaths(
        &example("mpa-app", "write_pingpong"),
        None,
        &["--busy-poll", "16"],
        &["--busy-poll", "16"],
    );
}

#[test]
fn the_c_example_pings_between_two_datapaths() {
    if !require_privileged("the C ping-pong example between two datapaths") {
        return;
    }
    // Both sides offer IRD and ORD 1 (mpx_conn_param): negotiated so.
    // The connector polls for its completions, the listener sleeps.
    between_two_datapaths(
        &c_example(),
        Some("; IRD 1, ORD 1)"),
        &[],
        &["--busy-poll", "16"],
    );
}

#[test]
fn the_c_example_pings_mpa_peer_and_echoes_for_it() {
    if !require_privileged("the C ping-pong example against mpa-peer") {
        return;
    }
    against_mpa_peer(&c_example());
}

/// The C example's `--json`: one document of perftest's values, the iterations all there.
#[test]
fn the_c_example_prints_one_json_document() {
    if !require_privileged("the C ping-pong example's JSON") {
        return;
    }
    let program = c_example();
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (_dp, socket) = datapath(&bed, &DatapathOptions::default());
    let _cm = manager(&bed, &bed.ns_b, &socket);
    let at = SocketAddr::new(bed.addr_a(false), 7934);
    let peer = PeerListener::start(
        &bed,
        at,
        &["--echo", "--advertise", "0xec0001:64", "--rev", "2"],
    );
    let client = spawn(
        &program,
        &socket,
        &["connect", &at.to_string(), SIZE, ITERS, "--json"],
    );
    let out = finished(client, "connect side, --json");
    let doc: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(doc["bytes"], 64, "{doc}");
    assert_eq!(doc["iterations"], ITERS.parse::<u64>().unwrap(), "{doc}");
    for key in [
        "t_min_usec",
        "t_max_usec",
        "t_typical_usec",
        "t_avg_usec",
        "t_stdev_usec",
        "p99_usec",
        "p99_9_usec",
    ] {
        assert!(doc[key].as_f64().is_some_and(|v| v >= 0.0), "{key}: {doc}");
    }
    assert!(
        doc["t_min_usec"].as_f64() <= doc["t_max_usec"].as_f64(),
        "{doc}"
    );
    let report = peer.report(Duration::from_secs(30));
    assert_eq!(report["echoes"], ITERS.parse::<u64>().unwrap(), "{report}");
}

/// `examples/c/write_pingpong.c`, built against libmpaxdp.
fn c_example() -> PathBuf {
    super::c_library::example_program("write_pingpong")
}

/// The listening side on datapath B, the connecting side on datapath A, both `program`
/// (with `listen_extra` and `connect_extra` arguments); the listener's output holds
/// `connected` when given.
fn between_two_datapaths(
    program: &Path,
    connected: Option<&str>,
    listen_extra: &[&str],
    connect_extra: &[&str],
) {
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (_dp_b, socket_b) = datapath(&bed, &DatapathOptions::default());
    let socket_a: PathBuf = mpa_harness::temp_path("dp-a.sock");
    let _dp_a: Datapath =
        start_datapath_on(&bed.ns_a, &bed.if_a, &socket_a, &DatapathOptions::default()).unwrap();
    let _cm_b = manager(&bed, &bed.ns_b, &socket_b);
    let _cm_a = manager(&bed, &bed.ns_a, &socket_a);

    let at = SocketAddr::new(bed.addr_b(false), 7931);
    let mut server = pingpong(program, &socket_b, "listen", at, listen_extra);
    // Ready once it says where it listens.
    assert_eq!(first_line(&mut server), format!("listening on {at}"));
    let client = pingpong(program, &socket_a, "connect", at, connect_extra);
    latency_table(&finished(client, "connect side"));
    let out = finished(server, "listen side");
    assert!(out.contains(&format!("{ITERS} echoes")), "{out}");
    if let Some(line) = connected {
        assert!(out.contains(line), "{line}: {out}");
    }
}

#[test]
fn the_example_pings_mpa_peer_and_echoes_for_it() {
    if !require_privileged("the ping-pong example against mpa-peer") {
        return;
    }
    against_mpa_peer(&example("mpa-app", "write_pingpong"));
}

/// `program` measuring against `mpa-peer listen --echo`, then echoing for `mpa-peer connect
/// --op pingpong`.
fn against_mpa_peer(program: &Path) {
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (_dp, socket) = datapath(&bed, &DatapathOptions::default());
    let _cm = manager(&bed, &bed.ns_b, &socket);

    // The example measures; mpa-peer echoes.
    let at = SocketAddr::new(bed.addr_a(false), 7932);
    let peer = PeerListener::start(
        &bed,
        at,
        &["--echo", "--advertise", "0xec0001:64", "--rev", "2"],
    );
    let client = pingpong(program, &socket, "connect", at, &[]);
    latency_table(&finished(client, "connect side"));
    let report = peer.report(Duration::from_secs(30));
    assert_eq!(report["error"], serde_json::Value::Null, "{report}");
    assert_eq!(report["echoes"], ITERS.parse::<u64>().unwrap(), "{report}");

    // mpa-peer measures (it checks every echo); the example echoes.
    let at = SocketAddr::new(bed.addr_b(false), 7933);
    let mut server = pingpong(program, &socket, "listen", at, &[]);
    first_line(&mut server);
    let size = (64 + mpa::wire::ddp::TAGGED_HEADER_LEN).to_string();
    let out = bed
        .command(&bed.ns_a, &bin("mpa-peer").to_string_lossy())
        .args(["connect", "--to", &at.to_string(), "--op", "pingpong"])
        .args(["--size", &size, "--count", ITERS, "--warmup", "10"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mpa-peer connect --op pingpong: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(report["error"], serde_json::Value::Null, "{report}");
    assert_eq!(
        report["iterations"],
        ITERS.parse::<u64>().unwrap(),
        "{report}"
    );
    let out = finished(server, "listen side");
    assert!(out.contains(&format!("{} echoes", 300 + 10)), "{out}");
}

/// A bad `--busy-poll` is a usage error of every example that takes it, and names it,
/// before any connection to a datapath is tried.
#[test]
fn a_bad_busy_poll_is_a_usage_error_of_every_example() {
    let bw = super::c_library::example_program("rdma_bw");
    for program in [example("mpa-app", "write_pingpong"), c_example(), bw] {
        for (args, says) in [
            (&["--busy-poll", "x"][..], "--busy-poll"),
            (&["--busy-poll", "-1"][..], "--busy-poll"),
            (&["--busy-poll", "4294967296"][..], "--busy-poll"),
            (&["--busy-poll"][..], "usage"),
        ] {
            let out: Output = Command::new(&program)
                .args(["/nonexistent.sock", "connect", "127.0.0.1:1", "64", "1"])
                .args(args)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{}: {args:?}: {err}",
                program.display()
            );
            assert!(
                err.contains(says) && err.contains("usage"),
                "{}: {args:?}: {err}",
                program.display()
            );
        }
    }
}
