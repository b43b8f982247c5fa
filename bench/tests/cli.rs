//! The command line's habits, without a namespace: sizes with suffixes (the bad value named),
//! one JSON document on stdout for every `--json` run, also a failed one (`"ok": false`),
//! exit codes (2 usage, 1 at run time) and a closed stdout ending quietly.

use serde_json::Value;
use std::process::{Command, Output, Stdio};

const BENCH: &str = env!("CARGO_BIN_EXE_mpa-bench");

fn run(args: &[&str]) -> Output {
    Command::new(BENCH)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run mpa-bench")
}

fn text(o: &Output) -> String {
    format!(
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The one JSON document of stdout (the whole of it).
fn document(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

#[test]
fn a_bad_size_is_a_usage_error_that_names_it() {
    for (args, says) in [
        (vec!["bw", "--sizes", "64,4X"], "\"4X\" is not a size"),
        (vec!["demo", "--bytes", "1Q"], "\"1Q\" is not a size"),
        (vec!["lat", "-s", ""], "empty size"),
        (vec!["pipeline", "--bytes", "20E"], "\"20E\" is too large"),
        (
            vec!["soak", "--memory-budget", "12 apples"],
            "is not a size",
        ),
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(says), "{args:?}: {}", text(&o));
    }
}

#[test]
fn sizes_take_binary_suffixes_in_lists_too() {
    // The receive pipeline alone needs no namespace: a tiny run, its document read back.
    let o = run(&[
        "pipeline", "-s", "64,4K", "--mss", "1448", "--bytes", "256K", "--rounds", "1", "-J",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let doc = document(&o);
    assert_eq!(doc["ok"], true, "{doc}");
    assert_eq!(
        doc["params"]["sizes"],
        serde_json::json!([64, 4096]),
        "{doc}"
    );
    assert_eq!(doc["params"]["bytes"], 256 * 1024, "{doc}");
    mpa_bench::report::check_shape(&doc).unwrap();
}

#[test]
fn a_failed_json_run_prints_one_failure_document() {
    // A usage error found after parsing (exit 2) and a runtime failure (exit 1), each as the
    // one document on stdout; the line saying so on stderr.
    let cases: [(&[&str], &str, i32, &str); 4] = [
        (&["lat", "-J", "--sizes", "16"], "lat", 2, "--sizes 16"),
        (
            &["bw", "-J", "--duration", "1", "--op", "send"],
            "bw",
            2,
            "--duration needs --op write or count",
        ),
        (
            &["ack-timing", "--json", "/nonexistent/capture.pcap"],
            "ack-timing",
            1,
            "capture.pcap",
        ),
        (
            &[
                "ab",
                "-J",
                "/nonexistent/old",
                "/nonexistent/new",
                "--",
                "pipeline",
            ],
            "ab",
            1,
            "/nonexistent/old",
        ),
    ];
    for (args, scenario, code, says) in cases {
        let o = run(args);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", text(&o));
        let doc = document(&o);
        assert_eq!(doc["ok"], false, "{args:?}: {doc}");
        assert_eq!(doc["scenario"], scenario, "{args:?}: {doc}");
        assert!(
            doc["error"].as_str().unwrap().contains(says),
            "{args:?}: {doc}"
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&format!("{scenario}: FAILED")), "{err}");
    }
    // Without --json the last line on stdout says it, as before.
    let o = run(&["lat", "--sizes", "16"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.trim_end().ends_with("lat: FAILED --sizes 16: a ULPDU must hold the 14-octet header and the 8-octet stamp, and be at most 64768 octets"), "{out}");
}

#[test]
fn every_experiment_takes_json() {
    for cmd in [
        "demo",
        "bw",
        "lat",
        "setup",
        "pipeline",
        "hostile",
        "suite",
        "soak",
        "ab",
        "ack-timing",
    ] {
        let o = run(&[cmd, "--help"]);
        let help = String::from_utf8_lossy(&o.stdout);
        assert!(help.contains("-J, --json"), "{cmd}: {help}");
        assert!(!help.contains("src/"), "{cmd}: {help}");
    }
    // One that needs no namespace: the hostile classes listed as a document.
    let o = run(&["hostile", "--list", "-J"]);
    assert!(o.status.success(), "{}", text(&o));
    let doc = document(&o);
    assert_eq!(
        (&doc["scenario"], &doc["ok"]),
        (&"hostile".into(), &true.into())
    );
    assert!(!doc["classes"].as_array().unwrap().is_empty(), "{doc}");
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        vec!["bw", "--sizes"],
        vec!["bw", "-t", "0"],
        vec!["bw", "-i", "soon"],
        vec!["demo", "-t", "1", "--op", "send"],
        vec!["bw", "--sender", "datapath", "-t", "1"],
        vec!["nonsense"],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(!text(&o).contains("panicked"), "{args:?}: {}", text(&o));
    }
}

/// `mpa-bench … | head -1`: stdout a pipe whose reader is gone before anything is written.
fn closed_pipe() -> std::io::PipeWriter {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    writer
}

#[test]
fn a_closed_stdout_ends_quietly() {
    for (args, code) in [
        (vec!["hostile", "--list"], 0),
        (vec!["hostile", "--list", "-J"], 0),
        (vec!["lat", "-J", "--sizes", "16"], 2),
        (vec!["lat", "--sizes", "16"], 2),
        (vec!["bw", "--help"], 0),
    ] {
        let o = Command::new(BENCH)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    }
}
