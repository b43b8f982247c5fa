//! The report as people read it (one line per topic, what the datapath will do beneath) and as
//! one JSON document (the readings, the predictions, the findings, the problems, `"usable"`,
//! and `"ok"` as in every `--json` document of the tools: true exactly when the exit status
//! is 0).

use crate::readings::{Device, Kernel, Readings};
use crate::verdict::{Finding, Predictions, Report, Topic, XdpMode, ZeroCopyAuto};
use serde::Serialize;

/// Width of the label column.
const LABEL: usize = 11;

/// The text form.
pub(crate) fn text(r: &Readings, rep: &Report) -> String {
    let mut out = String::new();
    let mut line = |label: &str, s: &str| {
        out.push_str(&format!("{label:<LABEL$}{s}\n"));
    };
    for f in &rep.findings {
        line(f.topic.label(), &f.reading);
        for d in &f.datapath {
            line("", &format!("→ {d}"));
        }
    }
    if r.device.is_none() {
        line(Topic::Interface.label(), &format!("{}: none", r.iface));
    }
    line("verdict", &summary(rep));
    for b in &rep.blockers {
        line("", &format!("✗ {}: {b}", b.topic().label()));
    }
    out
}

/// The verdict in one line.
pub(crate) fn summary(rep: &Report) -> String {
    if !rep.usable() {
        let n = rep.blockers.len();
        return format!(
            "not usable: {n} reason{} (exit status 1)",
            if n == 1 { "" } else { "s" }
        );
    }
    let Some(p) = &rep.predictions else {
        return "usable".into();
    };
    let generic_asked = rep.options.iter().any(|o| o == "--xdp-mode generic");
    let xdp = match p.xdp_mode_auto {
        _ if generic_asked => "generic XDP",
        XdpMode::Native => "native XDP",
        XdpMode::Generic => "generic XDP (skb mode)",
        XdpMode::NativeElseGeneric => "native or generic XDP",
    };
    let af_xdp = match p.zero_copy_auto {
        ZeroCopyAuto::ZeroCopy => "AF_XDP zero-copy",
        ZeroCopyAuto::ZeroCopyWithoutMultiBuffer | ZeroCopyAuto::Copy => "AF_XDP copy mode",
        ZeroCopyAuto::ZeroCopyElseCopy => "AF_XDP zero-copy or copy mode",
    };
    let mut s = format!("usable: {xdp}, {af_xdp}");
    if !rep.options.is_empty() {
        s.push_str(&format!("; run with {}", rep.options.join(" ")));
    }
    s
}

/// One problem in the JSON document.
#[derive(Serialize)]
struct Problem {
    topic: Topic,
    reason: &'static str,
    message: String,
    fix: Option<String>,
}

/// The JSON document.
#[derive(Serialize)]
struct Document<'a> {
    iface: &'a str,
    kernel: Option<&'a Kernel>,
    cpus: usize,
    device: Option<&'a Device>,
    predictions: Option<&'a Predictions>,
    findings: &'a [Finding],
    options: &'a [String],
    problems: Vec<Problem>,
    verdict: String,
    usable: bool,
    ok: bool,
}

/// The JSON form.
pub(crate) fn json(r: &Readings, rep: &Report) -> String {
    let problems = rep
        .blockers
        .iter()
        .map(|b| Problem {
            topic: b.topic(),
            reason: b.code(),
            message: b.to_string(),
            fix: match b {
                crate::verdict::Blocker::OffloadOn { fix, .. } => Some(fix.clone()),
                _ => None,
            },
        })
        .collect();
    let doc = Document {
        iface: &r.iface,
        kernel: r.kernel.as_ref(),
        cpus: r.cpus,
        device: r.device.as_ref(),
        predictions: rep.predictions.as_ref(),
        findings: &rep.findings,
        options: &rep.options,
        problems,
        verdict: summary(rep),
        usable: rep.usable(),
        ok: rep.usable(),
    };
    serde_json::to_string(&doc).unwrap_or_else(|e| failure(&r.iface, &e.to_string()))
}

/// The document of a probe that could not read the interface at all.
pub(crate) fn failure(iface: &str, error: &str) -> String {
    serde_json::json!({"iface": iface, "error": error, "usable": false, "ok": false}).to_string()
}
