//! What every experiment hands back: the one JSON document `--json` prints on stdout
//! (`{"scenario", "params", "results"}`), the spread of a value over rounds, and the check of
//! a document's shape (the keys README promises for each scenario).

pub mod progress;

use anyhow::{bail, Result};
use serde_json::{json, Value};

/// The experiments that print a document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Lat,
    Bw,
    Pipeline,
    Setup,
}

impl Scenario {
    pub fn key(self) -> &'static str {
        match self {
            Scenario::Lat => "lat",
            Scenario::Bw => "bw",
            Scenario::Pipeline => "pipeline",
            Scenario::Setup => "setup",
        }
    }

    fn from_key(k: &str) -> Option<Scenario> {
        [
            Scenario::Lat,
            Scenario::Bw,
            Scenario::Pipeline,
            Scenario::Setup,
        ]
        .into_iter()
        .find(|s| s.key() == k)
    }

    /// The keys each result of this scenario carries (README, "JSON").
    pub fn result_keys(self) -> &'static [&'static str] {
        match self {
            Scenario::Lat => &[
                "receiver", "size", "rounds", "samples", "min_us", "p50_us", "p90_us", "p99_us",
                "p999_us", "max_us",
            ],
            Scenario::Bw => &[
                "receiver",
                "size",
                "rounds",
                "gbit_s",
                "gbit_s_min",
                "gbit_s_max",
                "system_cpu_ns_per_octet",
                "process_cpu_ns_per_octet",
            ],
            Scenario::Pipeline => &[
                "mss",
                "size",
                "gbit_s_per_core",
                "ns_per_packet",
                "memcpy_gbit_s",
                "crc_gbit_s",
            ],
            Scenario::Setup => &[
                "connections",
                "handovers_per_s",
                "p50_ms",
                "p90_ms",
                "p99_ms",
                "max_ms",
            ],
        }
    }
}

/// The document of one experiment.
#[derive(Clone, Debug)]
pub struct Document {
    pub scenario: Scenario,
    pub params: Value,
    pub results: Vec<Value>,
}

impl Document {
    pub fn new(scenario: Scenario, params: Value) -> Document {
        Document {
            scenario,
            params,
            results: Vec::new(),
        }
    }

    pub fn to_value(&self) -> Value {
        json!({
            "scenario": self.scenario.key(),
            "params": self.params,
            "results": self.results,
        })
    }
}

/// Checks that `doc` has the shape README documents: a known scenario, an object of params,
/// and results that each carry the scenario's keys with numbers (strings for `receiver`).
pub fn check_shape(doc: &Value) -> Result<()> {
    let Some(key) = doc["scenario"].as_str() else {
        bail!("no \"scenario\" string");
    };
    let Some(scenario) = Scenario::from_key(key) else {
        bail!("unknown scenario {key:?}");
    };
    if !doc["params"].is_object() {
        bail!("\"params\" is not an object");
    }
    let Some(results) = doc["results"].as_array() else {
        bail!("\"results\" is not an array");
    };
    for (i, r) in results.iter().enumerate() {
        for &k in scenario.result_keys() {
            let v = &r[k];
            let ok = match k {
                "receiver" => matches!(v.as_str(), Some("datapath" | "kernel")),
                _ => v.is_number(),
            };
            if !ok {
                bail!("{key} result {i}: \"{k}\" missing or of the wrong type ({v})");
            }
        }
    }
    Ok(())
}

/// Median, min and max of a value over rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// The spread of `v` (the median of an even count is the mean of the middle two); `None`
    /// when `v` is empty or holds a NaN.
    pub fn of(mut v: Vec<f64>) -> Option<Spread> {
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

    pub fn json(&self) -> Value {
        json!({"median": self.median, "min": self.min, "max": self.max})
    }
}

/// Prints `doc` as the one document on stdout.
pub fn print(doc: &Document) {
    println!("{}", doc.to_value());
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn shape_accepts_documented_keys_and_names_what_is_missing() {
        let mut d = Document::new(Scenario::Bw, json!({"loss": 0}));
        d.results.push(json!({
            "receiver": "datapath", "size": 4096, "rounds": 3, "gbit_s": 2.0,
            "gbit_s_min": 1.5, "gbit_s_max": 2.5, "system_cpu_ns_per_octet": 1.2,
            "process_cpu_ns_per_octet": 0.5,
        }));
        check_shape(&d.to_value()).unwrap();
        d.results[0]["receiver"] = json!("nic");
        let e = check_shape(&d.to_value()).unwrap_err().to_string();
        assert!(e.contains("\"receiver\""), "{e}");
        d.results[0]["receiver"] = json!("kernel");
        d.results[0].as_object_mut().unwrap().remove("gbit_s_max");
        let e = check_shape(&d.to_value()).unwrap_err().to_string();
        assert!(e.contains("bw result 0: \"gbit_s_max\""), "{e}");
        assert!(check_shape(&json!({"scenario": "nope", "params": {}, "results": []})).is_err());
        assert!(check_shape(&json!({"scenario": "lat", "params": 1, "results": []})).is_err());
        check_shape(&json!({"scenario": "lat", "params": {}, "results": []})).unwrap();
    }
}
