//! What every experiment hands back: the one JSON document `--json` prints on stdout
//! (`{"scenario", "params", "results"}`, typed in `document`), the spread of a value over
//! rounds, and the check of a document's shape (the keys docs/benchmarks.md documents for each
//! scenario).

pub(crate) mod document;
pub(crate) mod progress;

pub use document::check_shape;
pub(crate) use document::{Document, Receiver};

use anyhow::Result;
use serde::{Deserialize, Serialize};

/// Median, min and max of a value over rounds (`{"median", "min", "max"}` in documents).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Spread {
    /// The spread of `v` (the median of an even count is the mean of the middle two); `None`
    /// when `v` is empty or holds a NaN.
    pub(crate) fn of(mut v: Vec<f64>) -> Option<Spread> {
        if v.is_empty() || v.iter().any(|x| x.is_nan()) {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// Where an experiment writes its files unless `--out` says otherwise: outside any checkout,
/// in the user's state directory (`$XDG_STATE_HOME/mpa-bench/<experiment>`, else
/// `~/.local/state/mpa-bench/<experiment>`, else the temporary directory's `mpa-bench`).
pub(crate) fn default_out(experiment: &str) -> std::path::PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| std::path::PathBuf::from(h).join(".local/state"))
        })
        .unwrap_or_else(std::env::temp_dir);
    state.join("mpa-bench").join(experiment)
}

/// A document as printed: its own keys, then `"ok": true` (a failed run prints
/// [`failure`] instead, with `"ok": false`). Readers of the documents (`check_shape`, `ab`,
/// the suite) ignore the key.
#[derive(Serialize)]
struct Printed<'a, T: Serialize> {
    #[serde(flatten)]
    doc: &'a T,
    ok: bool,
}

/// `doc` as the one document on stdout, `"ok": true` added.
pub(crate) fn to_json<T: Serialize>(doc: &T) -> Result<String> {
    Ok(serde_json::to_string(&Printed { doc, ok: true })?)
}

/// Prints `doc` as the one document on stdout (`to_json`).
pub fn print<T: Serialize>(doc: &T) -> Result<()> {
    mpa_cli::outln!("{}", to_json(doc)?);
    Ok(())
}

/// The one document a failed run prints with `--json`:
/// `{"scenario": "bw", "error": "…", "ok": false}`.
pub fn failure(scenario: &str, e: &anyhow::Error) -> String {
    #[derive(Serialize)]
    struct Failure<'a> {
        scenario: &'a str,
        error: String,
        ok: bool,
    }
    serde_json::to_string(&Failure {
        scenario,
        error: format!("{e:#}"),
        ok: false,
    })
    .expect("strings serialise")
}

/// Human text of a run: on stdout, or on stderr when stdout carries the JSON document.
pub fn text(json: bool, t: &str) {
    if json {
        eprint!("{t}");
    } else {
        mpa_cli::out!("{t}");
    }
}

/// [`text`] of one line.
pub fn line(json: bool, l: &str) {
    if json {
        eprintln!("{l}");
    } else {
        mpa_cli::outln!("{l}");
    }
}

#[cfg(test)]
mod tests {
    use super::document::*;
    use super::*;
    use crate::bed::options::{Framing, Op, SenderSide};
    use serde_json::json;

    #[test]
    fn spread_median_min_max() {
        let s = Spread::of(vec![3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Spread::of(vec![4.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (3.0, 1.0, 10.0));
        assert_eq!(Spread::of(vec![]), None);
        assert_eq!(Spread::of(vec![1.0, f64::NAN]), None);
        let one = Spread::of(vec![7.5]).unwrap();
        assert_eq!((one.median, one.min, one.max), (7.5, 7.5, 7.5));
        assert_eq!(
            serde_json::to_value(one).unwrap(),
            json!({"median": 7.5, "min": 7.5, "max": 7.5})
        );
    }

    fn bw_params() -> BwParams {
        BwParams {
            sizes: vec![4096],
            bytes: 1 << 20,
            duration_s: None,
            rounds: 3,
            mtu: 1500,
            loss_percent: 0,
            queues: 1,
            framing: Framing::MarkersCrc,
            impair: None,
            connections: 1,
            op: Op::Write,
            aligned: false,
            iface: None,
            peer: None,
            split_cpus: false,
            sender_cc: None,
            sender: SenderSide::Kernel,
            wire_segments: false,
        }
    }

    fn bw_record() -> BwRecord {
        BwRecord {
            receiver: Receiver::Datapath,
            size: 4096,
            rounds: 3,
            gbit_s: 2.0,
            gbit_s_min: 1.5,
            gbit_s_max: 2.5,
            gbit_s_mean: 2.0,
            msg_per_s: f64::NAN,
            messages: 256.0,
            octets: 1048576.0,
            system_cpu_ns_per_octet: 1.2,
            process_cpu_ns_per_octet: 0.5,
            sender_cpu_ns_per_octet: 0.25,
            placed_direct_percent: None,
            sender_retrans_percent: Some(1.0),
            sender_rtos: Some(0.0),
            round_sender_tcp: vec![Default::default()],
            round_gbit_s: vec![1.5, 2.0, f64::NAN],
            paired_goodput_ratio: None,
            paired_goodput_ratio_min: None,
            paired_goodput_ratio_max: None,
        }
    }

    #[test]
    fn documents_have_the_documented_keys_and_nan_is_null() {
        let doc = Document::Bw {
            params: bw_params(),
            results: vec![bw_record()],
        };
        let v = serde_json::to_value(&doc).unwrap();
        assert_eq!(v["scenario"], "bw");
        assert_eq!(v["params"]["framing"], "markers+crc");
        assert_eq!(v["params"]["op"], "write");
        assert_eq!(v["params"]["sender"], "kernel");
        assert!(v["params"]["impair"].is_null());
        let r = &v["results"][0];
        assert_eq!(r["receiver"], "datapath");
        assert!(r["msg_per_s"].is_null());
        assert!(r["placed_direct_percent"].is_null());
        assert!(r["round_gbit_s"][2].is_null());
        assert_eq!(r["round_sender_tcp"][0]["rtos"], 0);
        assert!(r.get("paired_goodput_ratio").is_none());
        check_shape(&v).unwrap();
        // Read back: NaN where null was written (NaN is not equal to itself: compare text).
        let back: Document = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), v);
    }

    #[test]
    fn printed_documents_say_ok_and_failures_say_why() {
        let doc = Document::Bw {
            params: bw_params(),
            results: vec![bw_record()],
        };
        let v: serde_json::Value = serde_json::from_str(&to_json(&doc).unwrap()).unwrap();
        assert_eq!(v["ok"], true);
        assert_eq!(v["scenario"], "bw");
        check_shape(&v).unwrap();
        let back: Document = serde_json::from_value(v).unwrap();
        assert_eq!(back.scenario(), Scenario::Bw);
        let e = anyhow::anyhow!("digests differ").context("kernel, 4096 B");
        let v: serde_json::Value = serde_json::from_str(&failure("bw", &e)).unwrap();
        assert_eq!(
            v,
            json!({"scenario": "bw", "error": "kernel, 4096 B: digests differ", "ok": false})
        );
    }

    #[test]
    fn shape_names_what_is_missing_or_wrong() {
        let doc = Document::Bw {
            params: bw_params(),
            results: vec![bw_record()],
        };
        let mut v = serde_json::to_value(&doc).unwrap();
        v["results"][0]["receiver"] = json!("nic");
        let e = check_shape(&v).unwrap_err().to_string();
        assert!(e.contains("bw result 0: unknown variant `nic`"), "{e}");
        v["results"][0]["receiver"] = json!("kernel");
        v["results"][0]
            .as_object_mut()
            .unwrap()
            .remove("gbit_s_max");
        let e = check_shape(&v).unwrap_err().to_string();
        assert!(e.contains("bw result 0: missing field `gbit_s_max`"), "{e}");
        // A headline value that could not be measured (NaN, written as null) fails.
        v["results"][0]["gbit_s_max"] = json!(null);
        let e = check_shape(&v).unwrap_err().to_string();
        assert!(e.contains("bw result 0: invalid type: null"), "{e}");
        v["params"].as_object_mut().unwrap().remove("mtu");
        let e = check_shape(&v).unwrap_err().to_string();
        assert!(e.contains("bw params: missing field `mtu`"), "{e}");
        let e = check_shape(&json!({"scenario": "nope", "params": {}, "results": []}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"scenario\": unknown variant `nope`"), "{e}");
        assert!(check_shape(&json!({"scenario": "setup", "params": 1, "results": []})).is_err());
        check_shape(&json!({
            "scenario": "setup", "params": {"connections": 1, "parallel": 1}, "results": []
        }))
        .unwrap();
    }
}
