//! `flows` and `stats`: both read the datapath's statistics document and print it as
//! tables (or as JSON).

use crate::cli::Target;
use serde_json::Value;

/// Asks for the statistics document. It arrives typed; the tables below print it by column
/// name from its JSON form (the same document `--json` prints).
fn get_stats(target: &Target) -> Result<Value, String> {
    let (mut c, path) = target.connect()?;
    match c.stats() {
        Ok(stats) => serde_json::to_value(&stats).map_err(|e| e.to_string()),
        Err(e) => Err(format!("datapath at {}: {e}", path.display())),
    }
}

/// Every live flow, with its queue.
fn live_flows(stats: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for q in stats["queues"].as_array().into_iter().flatten() {
        for f in q["flows"].as_array().into_iter().flatten() {
            let mut f = f.clone();
            if let Some(o) = f.as_object_mut() {
                o.insert("queue".into(), q["queue"].clone());
            }
            out.push(f);
        }
    }
    out
}

pub(crate) fn flows(target: &Target, json: bool) -> Result<(), String> {
    let stats = get_stats(target)?;
    let flows = live_flows(&stats);
    if json {
        println!("{}", Value::Array(flows));
        return Ok(());
    }
    if flows.is_empty() {
        println!("no flows");
        return Ok(());
    }
    print!("{}", flow_table(&flows, "queue"));
    Ok(())
}

pub(crate) fn stats(target: &Target, json: bool) -> Result<(), String> {
    let stats = get_stats(target)?;
    if json {
        println!("{stats}");
        return Ok(());
    }
    println!("adopted flows: {}", cell(&stats["adopted_flows"]));
    // "xdp: dropped_fragment 0, …, redirected 10, seen 12, …": every counter, by name.
    let xdp = match stats["xdp"].as_object() {
        Some(o) => o
            .iter()
            .map(|(k, v)| format!("{k} {}", cell(v)))
            .collect::<Vec<_>>()
            .join(", "),
        None => "-".into(),
    };
    println!("xdp: {xdp}");
    println!();
    const QUEUE_COLS: [&str; 10] = [
        "queue",
        "rx_frames",
        "rx_octets",
        "tx_frames",
        "tx_octets",
        "tx_no_frame",
        "wakeups",
        "malformed",
        "unknown_flow",
        "bursts",
    ];
    let queues: Vec<Vec<String>> = stats["queues"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|q| {
            let mut row: Vec<String> = QUEUE_COLS.iter().map(|k| cell(&q[*k])).collect();
            row.push(q["flows"].as_array().map_or(0, Vec::len).to_string());
            // The AF_XDP mode the kernel bound the queue's socket in.
            let mode = match q["zero_copy"].as_bool() {
                Some(true) => "zero-copy",
                Some(false) => "copy",
                None => "-",
            };
            row.push(mode.to_string());
            row
        })
        .collect();
    let mut heads: Vec<&str> = QUEUE_COLS.to_vec();
    heads.extend(["flows", "af_xdp"]);
    print!("{}", table(&heads, &queues));
    let live = live_flows(&stats);
    if !live.is_empty() {
        println!("\nlive flows:");
        print!("{}", flow_table(&live, "queue"));
    }
    let ended = stats["ended_flows"].as_array().cloned().unwrap_or_default();
    println!("\nended flows (oldest first): {}", ended.len());
    if !ended.is_empty() {
        print!("{}", flow_table(&ended, "end"));
    }
    Ok(())
}

/// One flow per row; `extra` is "queue" (live flows) or "end" (ended flows).
fn flow_table(flows: &[Value], extra: &str) -> String {
    const COLS: [(&str, &str); 10] = [
        ("flow", "flow_id"),
        ("state", "state"),
        ("packets", "packets"),
        ("fpdus", "fpdus"),
        ("ulpdu_octets", "ulpdu_octets"),
        ("crc_err", "crc_errors"),
        ("marker_err", "marker_errors"),
        ("ooo", "out_of_order_segments"),
        ("retx", "retransmissions"),
        ("digest", "ulpdu_digest"),
    ];
    let mut heads: Vec<&str> = COLS.iter().map(|(h, _)| *h).collect();
    heads.push(extra);
    let rows: Vec<Vec<String>> = flows
        .iter()
        .map(|f| {
            let mut row: Vec<String> = COLS.iter().map(|(_, k)| cell(&f[*k])).collect();
            row.push(match extra {
                "end" => end_cell(&f["ended"]),
                k => cell(&f[k]),
            });
            row
        })
        .collect();
    table(&heads, &rows)
}

fn end_cell(v: &Value) -> String {
    match (&v["reason"], &v["mpa_error"]) {
        (Value::Null, _) => "-".into(),
        (r, Value::Null) => cell(r),
        (r, e) => format!("{} (MPA error {})", cell(r), cell(e)),
    }
}

/// A JSON value as a table cell.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// Left-aligned columns, two spaces apart.
fn table(heads: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = heads.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s.push('\n');
        s
    };
    let heads: Vec<String> = heads.iter().map(|h| h.to_uppercase()).collect();
    let mut out = line(heads.iter().map(String::as_str).collect());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_line_up_and_show_every_flow() {
        let stats = json!({
            "queues": [
                {"queue": 0, "flows": [{"flow_id": 3, "state": "Established", "fpdus": 10,
                  "ulpdu_digest": "deadbeef"}]},
                {"queue": 1, "flows": [{"flow_id": 12, "state": "CloseWait", "fpdus": 0,
                  "ulpdu_digest": null}]}
            ]
        });
        let flows = live_flows(&stats);
        assert_eq!(flows.len(), 2);
        assert_eq!(flows[1]["queue"], 1);
        let t = flow_table(&flows, "queue");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("FLOW  STATE"), "{t}");
        assert!(lines[1].starts_with("3     Established  "), "{t}");
        assert!(lines[2].starts_with("12    CloseWait    "), "{t}");
        assert!(
            lines[1].contains("deadbeef") && lines[2].ends_with(" 1"),
            "{t}"
        );
    }

    #[test]
    fn ended_cell_says_why() {
        assert_eq!(end_cell(&Value::Null), "-");
        assert_eq!(
            end_cell(&json!({"reason": "FIN", "mpa_error": null})),
            "FIN"
        );
        assert_eq!(
            end_cell(&json!({"reason": "CRC", "mpa_error": 2})),
            "CRC (MPA error 2)"
        );
    }
}
