//! Reading the values to compare out of a document of any build: the edge where a foreign
//! document (possibly of an older version) is read as JSON.

use serde_json::Value;

/// The fields that tell the results of one document apart.
const ROW_KEYS: [&str; 7] = [
    "receiver",
    "variant",
    "stage",
    "mss",
    "size",
    "connections",
    "workers",
];

/// The values `ab` compares when none is named, by experiment.
pub(crate) fn headline_metrics(scenario: &str) -> &'static [&'static str] {
    match scenario {
        "lat" => &["p50_us", "p99_us"],
        "bw" => &["gbit_s", "process_cpu_ns_per_octet"],
        "pipeline" => &["ns_per_packet", "gbit_s_per_core"],
        "setup" => &["handovers_per_s", "p50_ms"],
        "demo" => &["gbit_per_s", "flow.worker_cpu_seconds"],
        _ => &[],
    }
}

/// The JSON document in an experiment's stdout: the whole output, else its last line that is
/// a JSON object (older builds printed `result: {...}` after their text).
pub(crate) fn document_in(out: &str) -> Option<Value> {
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(out.trim()) {
        return Some(v);
    }
    out.lines().rev().find_map(|l| {
        let l = l.trim();
        let l = l.strip_prefix("result:").map_or(l, str::trim);
        match serde_json::from_str::<Value>(l) {
            Ok(v @ Value::Object(_)) => Some(v),
            _ => None,
        }
    })
}

/// One result's values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RowValues {
    /// Its identifying fields, `key=value` joined by spaces.
    pub(crate) row: String,
    /// (metric, value) for each metric it carries as a number.
    pub(crate) values: Vec<(String, f64)>,
}

fn lookup<'a>(v: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted.split('.').try_fold(v, |v, k| v.get(k))
}

/// The values of `metrics` in each result of `doc` (a `{"scenario","params","results"}`
/// document), or of the document itself when it has no results array.
pub(crate) fn values_of(doc: &Value, metrics: &[String]) -> Vec<RowValues> {
    let results: Vec<&Value> = match doc.get("results").and_then(Value::as_array) {
        Some(rs) => rs.iter().collect(),
        None => vec![doc],
    };
    results
        .into_iter()
        .map(|r| RowValues {
            row: ROW_KEYS
                .iter()
                .filter_map(|k| {
                    let v = r.get(*k)?;
                    Some(match v {
                        Value::String(s) => format!("{k}={s}"),
                        other => format!("{k}={other}"),
                    })
                })
                .collect::<Vec<_>>()
                .join(" "),
            values: metrics
                .iter()
                .filter_map(|m| Some((m.clone(), lookup(r, m)?.as_f64()?)))
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documents_are_found_whole_or_on_their_last_line() {
        let d = document_in("{\"a\": 1}\n").unwrap();
        assert_eq!(d["a"], 1);
        let d = document_in("sender: x\nresult: {\"gbit_per_s\": 2.5}\ndemo: OK\n").unwrap();
        assert_eq!(d["gbit_per_s"], 2.5);
        assert_eq!(document_in("no json here\n[1, 2]\n"), None);
    }

    #[test]
    fn values_are_taken_per_result_row_and_nested_keys_resolve() {
        let doc = json!({"scenario": "lat", "params": {}, "results": [
            {"receiver": "kernel", "size": 64, "p50_us": 10.5, "p99_us": 70.0},
            {"receiver": "datapath", "size": 64, "p50_us": 8.0},
        ]});
        let m = vec!["p50_us".to_string(), "p99_us".to_string()];
        let rows = values_of(&doc, &m);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].row, "receiver=kernel size=64");
        assert_eq!(
            rows[0].values,
            vec![("p50_us".into(), 10.5), ("p99_us".into(), 70.0)]
        );
        assert_eq!(rows[1].values, vec![("p50_us".into(), 8.0)]);
        let demo = json!({"gbit_per_s": 3.0, "flow": {"worker_cpu_seconds": 1.25}});
        let m = vec![
            "gbit_per_s".to_string(),
            "flow.worker_cpu_seconds".to_string(),
        ];
        let rows = values_of(&demo, &m);
        assert_eq!(rows[0].row, "");
        assert_eq!(
            rows[0].values,
            vec![
                ("gbit_per_s".into(), 3.0),
                ("flow.worker_cpu_seconds".into(), 1.25)
            ]
        );
        assert_eq!(headline_metrics("nothing"), &[] as &[&str]);
    }
}
