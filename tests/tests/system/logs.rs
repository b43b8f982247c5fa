//! Structured logs: `mpa-datapath --log-format json` writes every log line on stderr as one
//! JSON object (level, target, fields), with no terminal colour codes; the text format has no
//! colour codes either when stderr is not a terminal.

use mpa_tests::{require_privileged, BedConfig, DatapathProcess, TestBed};

#[test]
fn json_logs_are_one_object_per_line_and_text_logs_have_no_colour_off_a_terminal() {
    if !require_privileged("datapath logs") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let dp = DatapathProcess::start_with(&bed, &[], &["--log-format", "json"]).unwrap();
    let log = dp.log();
    // The readiness line is not a log record: it is what supervisors wait for.
    let records: Vec<&String> = log
        .iter()
        .filter(|l| !l.starts_with("mpa-datapath: ready"))
        .collect();
    assert!(!records.is_empty(), "{log:?}");
    let mut bound = None;
    for l in &records {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{l}");
        if v["fields"]["message"] == "AF_XDP socket bound" {
            bound = Some(v);
        }
    }
    let bound = bound.unwrap_or_else(|| panic!("no socket record: {log:?}"));
    assert_eq!(bound["fields"]["mode"], "copy", "{bound}");
    assert_eq!(bound["fields"]["queue"], 0, "{bound}");
    drop(dp);

    let dp = DatapathProcess::start(&bed, &[]).unwrap();
    let log = dp.log().join("\n");
    assert!(log.contains("AF_XDP socket bound"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "colour codes off a terminal: {log}"
    );
}
