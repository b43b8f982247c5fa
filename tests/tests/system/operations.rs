//! What an operator relies on, on the namespace bed: the metrics endpoints of `mpa-datapath`
//! and `mpa-control serve` scraped while a connection carries data and parsed as OpenMetrics
//! (every documented family there, and moving); the systemd readiness notification; the
//! datapath's options file.

use mpa::crc::crc32c_append;
use mpa::endpoint::EndpointConfig;
use mpa_tests::{
    initiator_in_a, require_privileged, run_in_netns, BedConfig, ControlDaemon, DatapathProcess,
    TestBed,
};
use openmetrics_parser::{MetricsExposition, OpenMetricsType, OpenMetricsValue};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::sync::mpsc;
use std::time::{Duration, Instant};

type Scrape = MetricsExposition<OpenMetricsType, OpenMetricsValue>;

/// The address a program logged as "metrics at http://ADDR/metrics".
fn metrics_addr(log: &[String]) -> SocketAddr {
    let line = log
        .iter()
        .find(|l| l.contains("metrics at http://"))
        .unwrap_or_else(|| panic!("no metrics line in {log:#?}"));
    let rest = &line[line.find("http://").unwrap() + 7..];
    rest[..rest.find("/metrics").unwrap()].parse().unwrap()
}

/// `GET /metrics` inside ns b, parsed.
fn scrape(bed: &TestBed, addr: SocketAddr) -> Scrape {
    let text = run_in_netns(&bed.ns_b, move || {
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        out
    })
    .unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    openmetrics_parser::openmetrics::parse_openmetrics(body)
        .unwrap_or_else(|e| panic!("not OpenMetrics ({e:?}):\n{body}"))
}

/// The sum of a family's samples (0 when it has none or is absent).
fn total(s: &Scrape, family: &str) -> f64 {
    s.families.get(family).map_or(0.0, |f| {
        f.iter_samples()
            .map(|x| match &x.value {
                OpenMetricsValue::Counter(c) => c.value.as_f64(),
                OpenMetricsValue::Gauge(g) => g.as_f64(),
                v => panic!("{family}: {v:?}"),
            })
            .sum()
    })
}

/// A documented family: name, type, and when it is there ("always", "per flow", or "once"
/// something happened).
struct Documented {
    name: String,
    kind: String,
    when: String,
}

/// The families docs/operations.md lists.
fn documented(prefix: &str) -> Vec<Documented> {
    let page = include_str!("../../../docs/operations.md");
    let mut out = Vec::new();
    for line in page.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() >= 6 && cells[1].starts_with(&format!("`{prefix}")) {
            out.push(Documented {
                name: cells[1].trim_matches('`').to_string(),
                kind: cells[2].to_string(),
                when: cells[4].to_string(),
            });
        }
    }
    assert!(out.len() > 5, "no {prefix} table in docs/operations.md");
    out
}

/// Every family in `s` is documented with its type; every family documented as there
/// `always` (and `per flow`, when `flows_live`) is in `s`.
fn assert_documented(s: &Scrape, prefix: &str, flows_live: bool) {
    let docs = documented(prefix);
    for (name, f) in &s.families {
        let d = docs
            .iter()
            .find(|d| &d.name == name)
            .unwrap_or_else(|| panic!("{name} is served but not in docs/operations.md"));
        assert_eq!(d.kind, f.family_type.to_string(), "{name}: documented type");
    }
    for d in &docs {
        let expected = d.when == "always" || (flows_live && d.when == "per flow");
        if expected {
            assert!(
                s.families.contains_key(&d.name),
                "{} documented but not served",
                d.name
            );
        }
    }
}

/// The Initiator of the test: 100 ULPDUs of 1000 octets, a signal, a wait for `go`, 100
/// more, a close; the digest of all.
fn two_halves(
    bed: &TestBed,
    to: SocketAddr,
) -> (
    std::thread::JoinHandle<u32>,
    mpsc::Receiver<()>,
    mpsc::Sender<()>,
) {
    let (half_tx, half) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let mut cfg = EndpointConfig::default();
    cfg.policy.markers_required = true;
    cfg.policy.startup_timeout = Duration::from_secs(5);
    let h = initiator_in_a(bed, to, cfg, move |_, s| {
        let mut s = s.expect("startup through mpa-control");
        let mut digest = 0;
        for i in 0..200usize {
            if i == 100 {
                s.flush().unwrap();
                half_tx.send(()).unwrap();
                go_rx.recv_timeout(Duration::from_secs(60)).unwrap();
            }
            let u: Vec<u8> = (0..1000).map(|j| (i * 131 + j * 7 + 3) as u8).collect();
            digest = crc32c_append(digest, &u);
            s.send(&u).unwrap();
        }
        s.flush().unwrap();
        s.get_ref().shutdown(std::net::Shutdown::Write).unwrap();
        while s
            .recv_with(Some(Duration::from_secs(10)), |_| {
                panic!("an FPDU from the datapath")
            })
            .unwrap()
            .is_some()
        {}
        digest
    });
    (h, half, go)
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(20), "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn write_temp(what: &str, text: &str) -> std::path::PathBuf {
    let p = mpa_harness::temp_path(what);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn metrics_of_both_programs_parse_are_documented_and_move_with_traffic() {
    if !require_privileged("metrics endpoints") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let dp =
        DatapathProcess::start_with(&bed, &[], &["--metrics", "127.0.0.1:0", "--metrics-flows"])
            .unwrap();
    let dp_metrics = metrics_addr(&dp.log());
    let listen = SocketAddr::new(bed.addr_b(false), 7401);
    let config = write_temp(
        "ops-control.toml",
        &format!(
            "datapath_socket = \"{}\"\nmetrics = \"127.0.0.1:0\"\n[[listener]]\nbind = \"{listen}\"\nmarkers_required = true\n",
            dp.socket.display()
        ),
    );
    let daemon = ControlDaemon::start(&bed, &config, "info");
    daemon.wait_for("metrics and the datapath", Duration::from_secs(10), |l| {
        l.iter().any(|l| l.contains("metrics at http://"))
            && l.iter().any(|l| l.contains("datapath connected"))
    });
    let ctl_metrics = metrics_addr(&daemon.log());

    let before = scrape(&bed, dp_metrics);
    assert_documented(&before, "mpa_datapath_", false);
    let rx_before = total(&before, "mpa_datapath_rx_bytes");
    let c0 = scrape(&bed, ctl_metrics);
    assert_documented(&c0, "mpa_control_", false);
    assert_eq!(total(&c0, "mpa_control_datapath_connected"), 1.0);
    assert_eq!(total(&c0, "mpa_control_handovers"), 0.0);

    // Mid-transfer: the flow's own families, the hand-over counted.
    let (initiator, half, go) = two_halves(&bed, listen);
    half.recv_timeout(Duration::from_secs(30)).unwrap();
    let mut mid = before;
    wait_until("the first half placed", || {
        mid = scrape(&bed, dp_metrics);
        total(&mid, "mpa_datapath_flow_ulpdu_bytes") == 100_000.0
    });
    assert_documented(&mid, "mpa_datapath_", true);
    assert_eq!(total(&mid, "mpa_datapath_flows"), 1.0);
    assert_eq!(total(&mid, "mpa_datapath_flow_fpdus"), 100.0);
    assert!(total(&mid, "mpa_datapath_rx_bytes") >= rx_before + 100_000.0);
    let c1 = scrape(&bed, ctl_metrics);
    assert_eq!(total(&c1, "mpa_control_connections_accepted"), 1.0);
    assert_eq!(total(&c1, "mpa_control_handovers"), 1.0);
    assert_eq!(total(&c1, "mpa_control_connections_held"), 1.0);
    assert_eq!(total(&c1, "mpa_control_setups_failed"), 0.0);

    // After: the rest received, the flow ended without error, its families gone.
    go.send(()).unwrap();
    initiator.join().unwrap();
    let mut after = mid;
    wait_until("the flow ended", || {
        after = scrape(&bed, dp_metrics);
        total(&after, "mpa_datapath_flows_ended_without_error") == 1.0
    });
    assert!(total(&after, "mpa_datapath_rx_bytes") >= rx_before + 200_000.0);
    // At least a segment per MSS of payload went through the XDP program.
    assert!(total(&after, "mpa_datapath_xdp_redirected_frames") >= 200_000.0 / 1460.0);
    assert_eq!(total(&after, "mpa_datapath_flows"), 0.0);
    assert!(!after.families.contains_key("mpa_datapath_flow_ulpdu_bytes"));
    wait_until("the frozen socket released", || {
        total(&scrape(&bed, ctl_metrics), "mpa_control_connections_held") == 0.0
    });
    daemon.terminate();
}

/// Binds a notification socket as systemd does for a `Type=notify` unit.
fn notify_socket() -> (UnixDatagram, std::path::PathBuf) {
    let path = mpa_harness::temp_path("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    (sock, path)
}

#[test]
fn both_programs_tell_systemd_when_they_are_ready() {
    if !require_privileged("readiness notification") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (sock, path) = notify_socket();
    let env = path.to_string_lossy().into_owned();
    let dp = DatapathProcess::start_with(&bed, &[("NOTIFY_SOCKET", &env)], &[]).unwrap();
    let mut buf = [0u8; 512];
    let n = sock.recv(&mut buf).unwrap();
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg}");
    assert!(
        msg.contains(&format!("STATUS=serving {}", bed.if_b)),
        "{msg}"
    );

    // mpa-control serve: ready once its listeners accept.
    let config = write_temp(
        "ops-notify.toml",
        &format!(
            "datapath_socket = \"{}\"\n[[listener]]\nbind = \"127.0.0.1:7402\"\n",
            dp.socket.display()
        ),
    );
    let mut ctl = bed
        .command(&bed.ns_b, &mpa_tests::bin("mpa-control").to_string_lossy())
        .args(["serve", "--config", &config.to_string_lossy()])
        .env("NOTIFY_SOCKET", &env)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let n = sock.recv(&mut buf);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(ctl.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let n = n.unwrap_or_else(|e| {
        let mut err = String::new();
        let _ = ctl.stderr.take().unwrap().read_to_string(&mut err);
        panic!("no notification from mpa-control ({e}):\n{err}")
    });
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg}");
    assert!(msg.contains("STATUS=1 listener(s) accepting"), "{msg}");
    // SIGTERM: it says it is stopping, and exits 0.
    let n = sock.recv(&mut buf).unwrap();
    assert_eq!(String::from_utf8_lossy(&buf[..n]), "STOPPING=1\n");
    drop(ctl.stderr.take());
    assert!(ctl.wait().unwrap().success());
    let _ = std::fs::remove_file(path);
}

#[test]
fn the_datapath_takes_its_options_from_a_file_and_names_a_bad_key() {
    if !require_privileged("datapath options file") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let good = write_temp(
        "ops-dp.toml",
        "queues = 1\nmetrics = \"127.0.0.1:0\"\nmetrics_flows = true\nxdp-mode = \"native\"\n",
    );
    let dp =
        DatapathProcess::start_with(&bed, &[], &["--config", &good.to_string_lossy()]).unwrap();
    // The file's options were taken: its metrics address serves.
    let addr = metrics_addr(&dp.log());
    assert_eq!(total(&scrape(&bed, addr), "mpa_datapath_xdp_attached"), 1.0);
    drop(dp);

    let bad = write_temp("ops-bad.toml", "queues = 1\nspin = 5\n");
    let out = std::process::Command::new(mpa_tests::bin("mpa-datapath"))
        .args(["--config", &bad.to_string_lossy(), "--iface", "lo"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&*bad.to_string_lossy()) && err.contains("spin: no such option"),
        "{err}"
    );
}

/// The capabilities a unit in packaging/systemd/ keeps (`CapabilityBoundingSet=`), as
/// setpriv names them (`net_admin`).
fn unit_capabilities(unit: &str) -> Vec<String> {
    let path = format!(
        "{}/../packaging/systemd/{unit}.in",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .unwrap_or_else(|| panic!("{path}: no CapabilityBoundingSet"));
    line.split_whitespace()
        .map(|c| c.trim_start_matches("CAP_").to_lowercase())
        .collect()
}

/// The capability numbers of linux/capability.h for the names the units use.
fn capability_mask(caps: &[String]) -> u64 {
    caps.iter()
        .map(|c| {
            let bit = match c.as_str() {
                "net_bind_service" => 10,
                "net_admin" => 12,
                "net_raw" => 13,
                "ipc_lock" => 14,
                "sys_nice" => 23,
                "perfmon" => 38,
                "bpf" => 39,
                other => panic!("capability {other} not in this table"),
            };
            1u64 << bit
        })
        .sum()
}

/// `setpriv` that leaves root only `caps`, as systemd does with the unit's
/// CapabilityBoundingSet (root keeps what the bounding set allows at exec).
fn setpriv(caps: &[String]) -> Vec<String> {
    let set = caps
        .iter()
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(",");
    vec![
        "setpriv".into(),
        format!("--bounding-set=-all,{set}"),
        "--inh-caps=-all".into(),
        "--".into(),
    ]
}

/// The effective capabilities of a process (`CapEff` of /proc/PID/status).
fn effective_capabilities(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .unwrap()
        .trim();
    u64::from_str_radix(hex, 16).unwrap()
}

#[test]
fn both_programs_work_with_only_the_capabilities_their_units_keep() {
    if !require_privileged("unit capabilities") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let dp_caps = unit_capabilities("mpa-datapath@.service");
    let wrapper = setpriv(&dp_caps);
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let dp = DatapathProcess::start_wrapped(&bed, &wrapper, &["--metrics", "127.0.0.1:0"])
        .unwrap_or_else(|log| panic!("the datapath with {dp_caps:?} only:\n{log}"));
    assert_eq!(effective_capabilities(dp.pid()), capability_mask(&dp_caps));

    let ctl_caps = unit_capabilities("mpa-control.service");
    let wrapper = setpriv(&ctl_caps);
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let listen = SocketAddr::new(bed.addr_b(false), 7403);
    let config = write_temp(
        "ops-caps.toml",
        &format!(
            "datapath_socket = \"{}\"\n[[listener]]\nbind = \"{listen}\"\nmarkers_required = true\n",
            dp.socket.display()
        ),
    );
    let daemon = ControlDaemon::start_wrapped(&bed, &wrapper, &config, "info");
    daemon.wait_for("the datapath", Duration::from_secs(10), |l| {
        l.iter().any(|l| l.contains("datapath connected"))
    });
    // A whole connection: startup, TCP_REPAIR hand-over, placement, close.
    let (initiator, half, go) = two_halves(&bed, listen);
    half.recv_timeout(Duration::from_secs(30)).unwrap();
    go.send(()).unwrap();
    initiator.join().unwrap();
    let addr = metrics_addr(&dp.log());
    wait_until("the flow ended", || {
        total(
            &scrape(&bed, addr),
            "mpa_datapath_flows_ended_without_error",
        ) == 1.0
    });
    let s = scrape(&bed, addr);
    assert!(total(&s, "mpa_datapath_rx_bytes") >= 200_000.0);
    assert_eq!(daemon.count(&["handed over"]), 1, "{:#?}", daemon.log());
    daemon.terminate();
}
