//! `mpa-bench ab` end to end, without root: the receive pipeline (in memory) from the same
//! build on both sides; every round runs both, the headline values come back per result row
//! with a ratio, and a build that is not there is refused with its path.

use mpa_harness::bin;
use serde_json::Value;
use std::process::Command;

#[test]
fn ab_compares_two_builds_row_by_row() {
    let bench = bin("mpa-bench");
    let dir = bench.parent().unwrap();
    let out = Command::new(&bench)
        .arg("ab")
        .arg(dir)
        .arg(&bench)
        .args(["--rounds", "2", "--json", "--"])
        .args(["pipeline", "--rounds", "1", "--bytes", "2097152"])
        .args(["--mss", "1448", "--sizes", "4096,16384"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["rounds"], 2);
    assert_eq!(doc["experiment"][0], "pipeline");
    let cmp = doc["comparisons"].as_array().unwrap();
    // Two rows (one per ULPDU size) × the two headline values of `pipeline`.
    assert_eq!(cmp.len(), 4, "{doc}");
    for c in cmp {
        let row = c["row"].as_str().unwrap();
        assert!(row.contains("mss=1448"), "{c}");
        assert!(
            row.contains("size=4096") || row.contains("size=16384"),
            "{c}"
        );
        let m = c["metric"].as_str().unwrap();
        assert!(m == "ns_per_packet" || m == "gbit_s_per_core", "{c}");
        for side in ["old", "new"] {
            let s = &c[side];
            let (lo, med, hi) = (
                s["min"].as_f64().unwrap(),
                s["median"].as_f64().unwrap(),
                s["max"].as_f64().unwrap(),
            );
            assert!(lo > 0.0 && lo <= med && med <= hi, "{c}");
        }
        assert!(c["ratio"].as_f64().unwrap() > 0.0, "{c}");
    }
}

#[test]
fn ab_refuses_a_missing_build_and_an_empty_experiment() {
    let bench = bin("mpa-bench");
    let out = Command::new(&bench)
        .args([
            "ab",
            "/nonexistent/build",
            "/nonexistent/other",
            "--",
            "pipeline",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("ab: FAILED") && said.contains("/nonexistent/build"),
        "{said}"
    );
    // No experiment after `--`: a usage error.
    let out = Command::new(&bench)
        .args(["ab", "/a", "/b"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
