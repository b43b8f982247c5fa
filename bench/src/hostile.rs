//! `mpa-bench hostile`: the hostile suite (`mpa-hostile`, docs/hostile.md) as a command — a
//! line per class, the bystander's and the summary (`hostile: N/N classes as specified;
//! bystander octet-exact`), or with `--json` one document.

use anyhow::Result;
pub use mpa_hostile::HostileArgs;

/// Runs what `a` asks: a probe line, the class list, or the classes. Ok(true) when every class
/// behaved as specified and the bystander finished octet-exact.
pub fn hostile(a: &HostileArgs) -> Result<bool> {
    if let Some(line) = mpa_hostile::probe_line(a) {
        mpa_cli::outln!("{line}");
        return Ok(true);
    }
    // The lines go to stderr when stdout carries the document.
    let mut say = |l: &str| crate::report::line(a.json, l);
    if a.list {
        let classes = mpa_hostile::selected(a);
        for c in &classes {
            say(&format!("class {}: expect {}", c.name, c.expect));
        }
        if a.json {
            let list: Vec<serde_json::Value> = classes
                .iter()
                .map(|c| serde_json::json!({"name": c.name, "expect": c.expect.to_string()}))
                .collect();
            crate::report::print(&serde_json::json!({"scenario": "hostile", "classes": list}))?;
        }
        return Ok(true);
    }
    let r = mpa_hostile::run(a, &mut say)?;
    if a.json {
        let mut doc = serde_json::json!({
            "scenario": "hostile",
            "classes": r.outcomes,
            "bystander": {
                "ok": r.bystander.is_ok(),
                "text": match &r.bystander { Ok(t) | Err(t) => t.clone() },
            },
            "summary": r.summary,
        });
        if r.ok() {
            crate::report::print(&doc)?;
        } else {
            // The failure document, with what was measured.
            doc["error"] = r.summary.clone().into();
            doc["ok"] = false.into();
            mpa_cli::outln!("{doc}");
        }
    }
    Ok(r.ok())
}
