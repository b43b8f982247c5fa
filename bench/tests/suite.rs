//! The bench harness end to end: `mpa-bench suite --quick` leaves the summary, the JSON
//! documents (each of the documented shape, both receivers where there is a kernel
//! counterpart), PNG plots and `.hgrm` files; `bw`, `lat --pingpong` and one-way `lat` with
//! the peer's clock measured run on "real" interfaces (`--iface`, `--peer`, `--peer-exec`:
//! here the bed's veth and its peer namespace), and one-way `lat` refuses to run there
//! without the peer's clock; bad options are refused with a clear message. Values are not
//! asserted (they are measurements), only that they exist and are positive — except the
//! measured clock offset, which on one host must lie within its own error bound.

use mpa_bench::report::check_shape;
use mpa_harness::bin;
use mpa_testbed::{require_privileged, BedConfig, TestBed};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn receivers(doc: &Value) -> Vec<(String, u64)> {
    doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["receiver"].as_str().unwrap_or("").to_string(),
                r["size"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn is_png(p: &Path) -> bool {
    std::fs::read(p).is_ok_and(|b| b.starts_with(b"\x89PNG\r\n\x1a\n"))
}

#[test]
fn suite_quick_writes_summary_documents_plots_and_hgrm_files() {
    if !require_privileged("bench suite") {
        return;
    }
    let out = std::env::temp_dir().join(format!("mpa-bench-suite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    // The pages it keeps current, written beside the run: a performance page one directory
    // below it, and a README with the headline markers.
    let pages = out.with_extension("pages");
    let _ = std::fs::remove_dir_all(&pages);
    std::fs::create_dir_all(pages.join("docs")).unwrap();
    let readme = pages.join("README.md");
    std::fs::write(
        &readme,
        "# title\n\n<!-- headline:begin -->\nold figures\n<!-- headline:end -->\n\n## next\n",
    )
    .unwrap();
    let page = pages.join("docs/performance.md");
    let run = Command::new(bin("mpa-bench"))
        .args(["suite", "--quick", "--out"])
        .arg(&out)
        .arg("--performance-page")
        .arg(&page)
        .arg("--readme")
        .arg(&readme)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.lines().any(|l| l.starts_with("suite: OK")),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let all: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let docs = all["documents"].as_array().unwrap();
    let scenarios: Vec<&str> = docs
        .iter()
        .map(|d| d["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(
        scenarios,
        [
            "pipeline", "pipeline", "pipeline", "pipeline", "lat", "lat", "bw", "bw", "lat",
            "setup"
        ]
    );
    // FPDUs aligned with their segments, 1 and 4 KiB Writes at MSS 1448.
    let aligned: Vec<(bool, u64, u64)> = docs[2]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["aligned"] == true,
                r["mss"].as_u64().unwrap(),
                r["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(aligned, [(true, 1448, 1024), (true, 1448, 4096)]);
    // The frames in the worker's caches: the ring filled one burst ahead, the pipeline and its
    // stage ladder at MSS 1448, 4 KiB; the other runs say nothing of a ring fill.
    let hot = &docs[3];
    assert_eq!(hot["params"]["ring_fill"], 64, "{hot}");
    let hot_results = hot["results"].as_array().unwrap();
    assert!(
        hot_results
            .iter()
            .any(|r| r["mss"] == 1448 && r["size"] == 4096 && r.get("stage").is_none()),
        "{hot}"
    );
    assert_eq!(
        hot_results
            .iter()
            .filter(|r| r.get("stage").is_some())
            .count(),
        5,
        "{hot}"
    );
    for d in &docs[..3] {
        assert!(d["params"].get("ring_fill").is_none(), "{d}");
    }
    // Two workers against one; the ping-pong beside the one-way runs.
    let workers = docs[1]["results"].as_array().unwrap();
    assert!(
        workers
            .iter()
            .any(|w| w["workers"] == 2 && w["scaling"].as_f64().unwrap() > 0.0),
        "{workers:?}"
    );
    let pingpong: Vec<bool> = docs
        .iter()
        .filter(|d| d["scenario"] == "lat")
        .map(|d| d["params"]["pingpong"] == true)
        .collect();
    assert_eq!(pingpong, [false, true, false]);
    // The ping-pong's modes include the two examples in processes of their own, C and Rust.
    let pp = docs
        .iter()
        .find(|d| d["params"]["pingpong"] == true)
        .unwrap();
    let mut want = Vec::new();
    for size in [64, 4096] {
        for r in [
            "kernel",
            "datapath",
            "datapath-spin",
            "datapath-rtc",
            "datapath-rust-app",
            "datapath-c-api",
        ] {
            want.push((r.to_string(), size));
        }
    }
    assert_eq!(receivers(pp), want);
    for d in docs {
        check_shape(d).unwrap_or_else(|e| panic!("{e:#}: {d}"));
    }
    // Both receivers for every size, in lat and bw.
    for d in docs
        .iter()
        .filter(|d| matches!(d["scenario"].as_str(), Some("lat" | "bw")))
    {
        let r = receivers(d);
        for size in d["params"]["sizes"].as_array().unwrap() {
            let size = size.as_u64().unwrap();
            for side in ["kernel", "datapath"] {
                assert!(r.contains(&(side.to_string(), size)), "{side} {size}: {d}");
            }
        }
        for x in d["results"].as_array().unwrap() {
            let key = if d["scenario"] == "lat" {
                "p50_us"
            } else {
                "gbit_s"
            };
            assert!(x[key].as_f64().unwrap() > 0.0, "{x}");
        }
    }
    // The pipeline at MSS 1448 and 8948, and the stage ladder.
    let p = &docs[0]["results"];
    for mss in [1448, 8948] {
        assert!(
            p.as_array()
                .unwrap()
                .iter()
                .any(|r| r["mss"] == mss && r["size"] == 4096 && r.get("stage").is_none()),
            "{p}"
        );
    }
    assert_eq!(
        p.as_array()
            .unwrap()
            .iter()
            .filter(|r| r.get("stage").is_some())
            .count(),
        5
    );
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    // The C example beside its Rust twin, per size.
    for size in ["    64", "  4096"] {
        let line = format!("C library / Rust interface, same example, at {size} B: p50 ");
        assert!(summary.contains(&line), "{line}: {summary}");
    }
    for png in ["pipeline-stages.png", "bw-by-size.png", "lat-cdf-64.png"] {
        assert!(is_png(&out.join(png)), "{png}");
        assert!(summary.contains(&format!("({png})")), "{summary}");
    }
    for hgrm in [
        "lat-kernel-64.hgrm",
        "lat-datapath-4096.hgrm",
        "lat-datapath-64-unpaced.hgrm",
    ] {
        let text = std::fs::read_to_string(out.join(hgrm)).unwrap();
        assert!(text.contains("#[Max     ="), "{hgrm}: {text}");
    }
    // The headline block replaced, and only it; the page holds the run's tables with its plots
    // linked into the run's directory.
    let text = std::fs::read_to_string(&readme).unwrap();
    assert!(
        text.starts_with("# title\n\n<!-- headline:begin -->\nMeasured "),
        "{text}"
    );
    assert!(
        text.ends_with("<!-- headline:end -->\n\n## next\n"),
        "{text}"
    );
    assert!(!text.contains("old figures"), "{text}");
    for row in [
        "receive pipeline alone, one core (MSS 1448, 4 KiB)",
        "receive pipeline alone, one core, FPDUs aligned with segments (MSS 1448, 4 KiB)",
        "goodput, 5 % loss, 4 KiB",
        "one-way latency p50 / p99, 64 B",
        "ping-pong latency p50 / p99 (RTT/2), 64 B, run-to-completion",
        "receive pipeline, 2 workers (MSS 1448, 4 KiB)",
        "connection setup",
    ] {
        assert!(text.contains(row), "{row}: {text}");
    }
    let perf = std::fs::read_to_string(&page).unwrap();
    let run_dir = format!("../../{}", out.file_name().unwrap().to_string_lossy());
    assert!(perf.contains("## Receive pipeline alone"), "{perf}");
    assert!(perf.contains("### Frames in the worker's caches"), "{perf}");
    // The frames-in-cache run is on the page, not in the headline: one row for the pipeline.
    assert_eq!(
        text.matches("receive pipeline alone, one core (MSS 1448, 4 KiB)")
            .count(),
        1,
        "{text}"
    );
    assert!(
        perf.contains(&format!("]({run_dir}/pipeline-stages.png)")),
        "{perf}"
    );
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&pages);
}

/// `mpa-bench ARGS --json` in ns b on the bed's interface as a host's NIC, with ns a as the
/// peer host (`--iface`, `--peer`, `--peer-exec`).
fn run_on_interface(bed: &TestBed, args: &[&str]) -> std::process::Output {
    bed.command(&bed.ns_b, &bin("mpa-bench").to_string_lossy())
        .args(args)
        .args(["--json", "--iface", &bed.if_b, "--peer"])
        .arg(bed.addr_a(false).to_string())
        .args(["--peer-exec", &format!("ip netns exec {}", bed.ns_a)])
        .output()
        .unwrap()
}

/// [`run_on_interface`], which must succeed: its document, of the documented shape and
/// naming the interface, and its text (stderr).
fn on_interface_with_text(bed: &TestBed, args: &[&str]) -> (Value, String) {
    let run = run_on_interface(bed, args);
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{stdout}\n{stderr}");
    let doc: Value = serde_json::from_str(stdout.trim()).unwrap();
    check_shape(&doc).unwrap();
    assert_eq!(doc["params"]["iface"], bed.if_b.as_str());
    (doc, stderr)
}

/// [`on_interface_with_text`]'s document.
fn on_interface(bed: &TestBed, args: &[&str]) -> Value {
    on_interface_with_text(bed, args).0
}

/// Every namespace name a bench on an interface gives its own namespace
/// (`mpat<pid>x<n>-host`) belongs to a bench still running (another test's): none left
/// behind.
fn no_host_namespace_left() {
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    for name in list.split_whitespace().filter(|n| n.ends_with("-host")) {
        let pid = name
            .strip_prefix("mpat")
            .and_then(|r| r.split('x').next())
            .unwrap_or("");
        assert!(
            !pid.is_empty() && Path::new(&format!("/proc/{pid}")).exists(),
            "{name} left behind: {list}"
        );
    }
}

#[test]
fn bw_runs_on_an_interface_with_a_peer_host() {
    if !require_privileged("bench on an interface") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let doc = on_interface(
        &bed,
        &[
            "bw", "--sizes", "4096", "--bytes", "8388608", "--rounds", "1",
        ],
    );
    assert_eq!(
        receivers(&doc),
        [("kernel".to_string(), 4096), ("datapath".to_string(), 4096)]
    );
    // The name the bench gave ns b is gone.
    no_host_namespace_left();
}

#[test]
fn lat_one_way_runs_on_an_interface_with_the_peers_clock_measured() {
    if !require_privileged("one-way latency on an interface") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    // The sender in ns a as the peer host, its clock measured through `mpa-peer clock` there.
    // The two namespaces share one clock, so the offset really is 0: each measurement must
    // find it within its own error bound, and the drift within its bound.
    let out = std::env::temp_dir().join(format!("mpa-bench-ow-{}", std::process::id()));
    let out_arg = out.to_string_lossy();
    let (doc, text) = on_interface_with_text(
        &bed,
        &[
            "lat",
            "--sizes",
            "64",
            "--messages",
            "200",
            "--rounds",
            "1",
            "--spin-us",
            "200",
            "--clock-probes",
            "100",
            // Loose: a loaded machine's probes may be slow; the bound's refusal is tested
            // below, and the measured offset must still lie within its own bound.
            "--max-clock-error-us",
            "500",
            "--out",
            &out_arg,
        ],
    );
    let clock = &doc["clock"];
    assert_eq!(clock["source"], "measured", "{clock}");
    assert_eq!(
        clock["responder"],
        format!("{}:7778", bed.addr_a(false)),
        "{clock}"
    );
    assert_eq!(clock["probes"], 100);
    assert_eq!(clock["max_error_ns"], 500_000);
    // Before the first run and after each of the four (kernel and three datapath modes).
    let ms = clock["measurements"].as_array().unwrap();
    assert_eq!(ms.len(), 5, "{clock}");
    for m in ms {
        let (offset, error) = (
            m["offset_ns"].as_i64().unwrap(),
            m["error_ns"].as_u64().unwrap(),
        );
        assert!(offset.unsigned_abs() <= error, "|θ| > ε: {m}");
        assert!(error <= 500_000 && error > 0, "{m}");
        let (answered, sent) = (m["answered"].as_u64().unwrap(), m["sent"].as_u64().unwrap());
        assert!(answered >= 1 && answered <= sent && answered <= 100, "{m}");
        assert!(m["rtt_ns"].as_u64().unwrap() >= 2 * error - 1, "{m}");
    }
    let worst = ms.iter().map(|m| m["error_ns"].as_u64().unwrap()).max();
    assert_eq!(clock["error_ns"].as_u64(), worst);
    assert_eq!(clock["offset_ns"], ms[0]["offset_ns"]);
    let (drift, bound) = (
        clock["drift_ppm"].as_f64().unwrap(),
        clock["drift_error_ppm"].as_f64().unwrap(),
    );
    assert!(drift.abs() <= bound, "drift {drift} ± {bound} ppm");
    let want: Vec<(String, u64)> = ["kernel", "datapath", "datapath-spin", "datapath-rtc"]
        .iter()
        .map(|r| (r.to_string(), 64))
        .collect();
    assert_eq!(receivers(&doc), want);
    for r in doc["results"].as_array().unwrap() {
        // Every message accounted for; samples there, positive.
        let (samples, bad) = (
            r["samples"].as_u64().unwrap(),
            r["bad_stamps"].as_u64().unwrap(),
        );
        assert_eq!(samples + bad, 200, "{r}");
        assert!(samples > 0, "{r}");
        assert!(r["min_us"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["p50_us"].as_f64().unwrap() > 0.0, "{r}");
    }
    // The table says what the samples are worth.
    assert!(
        text.contains("clock: the peer host's, measured through 10.99.0.1:7778"),
        "{text}"
    );
    assert!(text.contains("every sample ±"), "{text}");
    let _ = std::fs::remove_dir_all(&out);
    no_host_namespace_left();
}

/// Drops UDP to `port` arriving in namespace `ns` (the peer host's firewall).
fn drop_udp_port(ns: &str, port: u16) {
    let rules = format!(
        "table inet mpaclock {{\n chain input {{\n  type filter hook input priority 0; policy \
         accept;\n  udp dport {port} counter drop\n }}\n}}\n"
    );
    let path = std::env::temp_dir().join(format!("{ns}-clock.nft"));
    std::fs::write(&path, rules).unwrap();
    mpa_testbed::run_in(ns, &["nft", "-f", &path.to_string_lossy()]).unwrap();
    let _ = std::fs::remove_file(&path);
}

#[test]
fn lat_one_way_on_two_hosts_refuses_without_the_peers_clock() {
    if !require_privileged("one-way latency without the peer's clock") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    drop_udp_port(&bed.ns_a, 7778);
    let refused = |args: &[&str]| {
        let mut all = vec!["lat", "--sizes", "64", "--messages", "100", "--rounds", "1"];
        all.extend(args);
        let run = run_on_interface(&bed, &all);
        let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{stdout}\n{stderr}");
        let doc: Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(doc["ok"], false, "{doc}");
        assert!(stderr.contains("lat: FAILED"), "{stderr}");
        // The responder it started in the peer's namespace is gone with it.
        let pids = mpa_testbed::run(&["ip", "netns", "pids", &bed.ns_a]).unwrap();
        assert!(
            pids.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&pids.stdout)
        );
        doc["error"].as_str().unwrap().to_string()
    };
    // The probes are dropped: nothing answers within the few seconds.
    let e = refused(&[]);
    for says in [
        "the clock responder on the peer 10.99.0.1 did not answer on UDP port 7778",
        "none answered",
        "mpa-peer clock --listen 10.99.0.1:7778",
        "--pingpong, which needs no common clock",
    ] {
        assert!(e.contains(says), "{says}: {e}");
    }
    // No mpa-peer where --peer-bin-dir says: the responder cannot be started.
    let e = refused(&["--peer-bin-dir", "/nonexistent/mpa"]);
    for says in [
        "the clock responder could not be started on the peer 10.99.0.1 (UDP port 7778)",
        "/nonexistent/mpa/mpa-peer clock --listen 10.99.0.1:7778",
        "it ended",
        "--pingpong, which needs no common clock",
    ] {
        assert!(e.contains(says), "{says}: {e}");
    }
    // Another port gets through, but no exchange is as exact as 1 ns.
    let e = refused(&["--clock-port", "7779", "--max-clock-error-us", "0.001"]);
    for says in [
        "the peer 10.99.0.1's clock offset is known only to ±",
        "more than --max-clock-error-us 0.001",
        "--pingpong",
    ] {
        assert!(e.contains(says), "{says}: {e}");
    }
    no_host_namespace_left();
}

#[test]
fn lat_pingpong_runs_on_an_interface_with_a_peer_host() {
    if !require_privileged("ping-pong on an interface") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    // As for bw: the bench in ns b as a host with a NIC, the echo server on the "peer host"
    // ns a; ping-pong needs no common clock. Every mode beside kernel TCP.
    let out = std::env::temp_dir().join(format!("mpa-bench-pp-{}", std::process::id()));
    let out_arg = out.to_string_lossy();
    let doc = on_interface(
        &bed,
        &[
            "lat",
            "--pingpong",
            "--sizes",
            "64,4096",
            "--messages",
            "200",
            "--rounds",
            "1",
            "--spin-us",
            "200",
            "--out",
            &out_arg,
        ],
    );
    assert_eq!(doc["params"]["pingpong"], true);
    let mut want = Vec::new();
    for size in [64, 4096] {
        for r in ["kernel", "datapath", "datapath-spin", "datapath-rtc"] {
            want.push((r.to_string(), size));
        }
    }
    assert_eq!(receivers(&doc), want);
    for r in doc["results"].as_array().unwrap() {
        assert_eq!(r["samples"], 200, "{r}");
        assert!(r["p50_us"].as_f64().unwrap() > 0.0, "{r}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bw_for_a_duration_reports_what_was_sent_with_interval_lines() {
    if !require_privileged("bench bw --duration") {
        return;
    }
    let run = Command::new(bin("mpa-bench"))
        .args([
            "bw", "-t", "1", "-i", "0.5", "-s", "4K", "--rounds", "1", "-J",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    let doc: Value = serde_json::from_str(stdout.trim()).unwrap();
    check_shape(&doc).unwrap();
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["params"]["duration_s"], 1.0, "{doc}");
    assert_eq!(
        receivers(&doc),
        [("kernel".to_string(), 4096), ("datapath".to_string(), 4096)]
    );
    // Each side counted what its sender sent in the time (the datapath's region checked
    // against it), and the sender printed its intervals.
    for r in doc["results"].as_array().unwrap() {
        let (messages, octets) = (
            r["messages"].as_f64().unwrap(),
            r["octets"].as_f64().unwrap(),
        );
        assert!(messages > 0.0, "{r}");
        assert_eq!(octets, messages * 4096.0, "{r}");
    }
    let intervals = stderr.lines().filter(|l| l.ends_with("Gbit/s")).count();
    assert!(intervals >= 2, "{stderr}");
}

#[test]
fn bad_options_are_refused_with_a_reason() {
    let bench = bin("mpa-bench");
    let run = |args: &[&str]| {
        let o = Command::new(&bench).args(args).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
        )
    };
    // --iface without --peer: a usage error.
    let (code, text) = run(&["bw", "--iface", "eth0"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("--peer"), "{text}");
    // Loss on real interfaces.
    let (code, text) = run(&[
        "bw",
        "--iface",
        "eth0",
        "--peer",
        "192.0.2.1",
        "--loss",
        "5",
    ]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("bw: FAILED --loss needs the private bed"),
        "{text}"
    );
    // The peer's clock is measured only on two hosts, and not for round trips.
    let (code, text) = run(&["lat", "--clock-port", "9000"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("--iface"), "{text}");
    let (code, text) = run(&[
        "lat",
        "--pingpong",
        "--iface",
        "eth0",
        "--peer",
        "192.0.2.1",
        "--clock-probes",
        "5",
    ]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("--clock-probes"), "{text}");
    let (code, text) = run(&[
        "lat",
        "--iface",
        "eth0",
        "--peer",
        "192.0.2.1",
        "--max-clock-error-us",
        "0",
    ]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("must be more than 0 µs"), "{text}");
    // Sizes a latency stamp does not fit in.
    let (code, text) = run(&["lat", "--sizes", "16"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("lat: FAILED --sizes 16"), "{text}");
    // The examples' modes are ping-pongs with CRCs.
    let (code, text) = run(&["lat", "--modes", "sleep,c-api"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("--modes c-api and rust-app are ping-pong modes: add --pingpong"),
        "{text}"
    );
    let (code, text) = run(&["lat", "--pingpong", "--plain", "--modes", "rust-app"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("leave out --plain"), "{text}");
    let (code, text) = run(&["pipeline", "--mss", ""]);
    assert_ne!(code, Some(0), "{text}");
    // Options no pipeline run could honour: refused before any frame is built, with the
    // reason and exit code 2 (an MSS beyond the largest frame panicked in the generator).
    for (args, reason) in [
        (
            &["pipeline", "--mss", "70000"][..],
            "pipeline: FAILED --mss 70000 makes 70066-octet frames",
        ),
        (
            &["pipeline", "--workers", "0"],
            "pipeline: FAILED --workers must be at least 1",
        ),
        (
            &["pipeline", "--bytes", "0"],
            "pipeline: FAILED --bytes 0 holds no 4096-octet message",
        ),
        // bw's sizes divided the volume: 0 panicked.
        (
            &["bw", "--sizes", "0"],
            "bw: FAILED --sizes 0: a Write's ULPDU holds its 14-octet DDP header",
        ),
        (&["lat", "--messages", "0"], "0 is not in 1.."),
        (
            &["soak", "--minutes", "0"],
            "soak: FAILED --minutes 0 must be more than 0",
        ),
    ] {
        let (code, text) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {text}");
        assert!(text.contains(reason), "{args:?}: {text}");
        assert!(!text.contains("panicked"), "{args:?}: {text}");
    }
}

/// `mpa-bench soak` with `args`: its exit code, stdout and stderr.
fn soak(args: &[&str]) -> (Option<i32>, String, String) {
    let run = Command::new(bin("mpa-bench"))
        .arg("soak")
        .args(args)
        .output()
        .unwrap();
    (
        run.status.code(),
        String::from_utf8_lossy(&run.stdout).into_owned(),
        String::from_utf8_lossy(&run.stderr).into_owned(),
    )
}

#[test]
fn a_short_soak_accounts_for_every_flow_and_octet() {
    if !require_privileged("soak") {
        return;
    }
    let (code, stdout, stderr) = soak(&[
        "--minutes",
        "0.15",
        "--connections",
        "3",
        "--bytes",
        "2097152",
        "--loss",
        "5",
        "--warmup-waves",
        "2",
        // Nine seconds: the allocator has not settled; the bound is the long soak's.
        "--max-rss-growth-percent",
        "100",
    ]);
    assert!(
        code == Some(0) && stdout.lines().any(|l| l.starts_with("soak: OK ")),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("every flow ended, every region released"),
        "{stdout}"
    );
    assert!(stdout.contains("every charge given back"), "{stdout}");
}

/// A soak that ends before its warm-up and a wave after it has no sample to judge growth by:
/// it fails and says so, rather than report its peak as a baseline.
#[test]
fn a_soak_shorter_than_its_warm_up_says_growth_was_not_checked() {
    if !require_privileged("soak") {
        return;
    }
    let (code, stdout, stderr) = soak(&[
        "--minutes",
        "0.02",
        "--connections",
        "1",
        "--bytes",
        "65536",
        "--warmup-waves",
        "100000",
    ]);
    let text = stdout + &stderr;
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(
            "before the warm-up's 100000 and one wave after them: memory and descriptor growth \
             not checked"
        ),
        "{text}"
    );
    assert!(!text.contains("soak: OK"), "{text}");
}
