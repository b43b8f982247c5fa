//! `ab`: an old build against a new one, in the same run. Each round runs the same experiment
//! (`mpa-bench SCENARIO ARGS --json`) with the old build and then the new one, alternating
//! which goes first, so that the noise of a shared machine falls on both; then each headline
//! value's median and range per build and their ratio.
//!
//! A build is a directory holding `mpa-bench` and its siblings (`mpa-datapath`,
//! `mpa-control`, `mpa-peer`: the experiments start them from beside `mpa-bench`), or the
//! path of an `mpa-bench` binary. The documents are read as JSON of whatever version the
//! build prints, so an older build's document works as long as it carries the values asked
//! for (`--metric`).

mod compare;

use crate::report::Spread;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use compare::{headline_metrics, values_of, RowValues};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `mpa-bench ab`'s options.
#[derive(Args, Clone, Debug)]
pub struct AbArgs {
    /// The old build: a directory holding mpa-bench (and its siblings), or mpa-bench itself.
    pub(crate) old: PathBuf,
    /// The new build, likewise.
    pub(crate) new: PathBuf,
    /// Rounds: each runs both builds once.
    #[arg(short = 'n', long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) rounds: u32,
    /// A value to compare, by its key in the documents' results (e.g. `p50_us`, `gbit_s`,
    /// `ns_per_packet`; `flow.worker_cpu_seconds` for a nested one). Repeatable; default:
    /// the experiment's headline values.
    #[arg(long = "metric", value_name = "KEY")]
    pub(crate) metrics: Vec<String>,
    /// Longest one run may take, seconds; a run past it is killed and the comparison fails.
    #[arg(long, default_value_t = 1800)]
    pub(crate) timeout_s: u64,
    /// Print one JSON document on stdout instead of the table.
    #[arg(short = 'J', long)]
    pub json: bool,
    /// The experiment and its arguments, after `--`: e.g. `-- pipeline --mss 1448 --rounds 3`.
    #[arg(last = true, required = true, value_name = "SCENARIO ARGS")]
    pub(crate) experiment: Vec<String>,
}

/// One value compared.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub(crate) struct Comparison {
    /// Which result: its identifying fields (`receiver=datapath size=4096`), empty for a
    /// document with one result.
    pub(crate) row: String,
    /// The key compared.
    pub(crate) metric: String,
    /// Over the rounds, old build.
    pub(crate) old: Option<Spread>,
    /// Over the rounds, new build.
    pub(crate) new: Option<Spread>,
    /// New median / old median.
    pub(crate) ratio: Option<f64>,
}

/// The document `ab --json` prints.
#[derive(Serialize, Clone, Debug)]
pub(crate) struct AbReport {
    pub(crate) old: String,
    pub(crate) new: String,
    pub(crate) experiment: Vec<String>,
    pub(crate) rounds: u32,
    pub(crate) comparisons: Vec<Comparison>,
}

/// The `mpa-bench` of a build argument.
fn binary(build: &Path) -> Result<PathBuf> {
    let bin = if build.is_dir() {
        build.join("mpa-bench")
    } else {
        build.to_path_buf()
    };
    if !bin.is_file() {
        bail!(
            "ab: {} is neither an mpa-bench binary nor a directory holding one",
            build.display()
        );
    }
    Ok(bin)
}

/// Runs `bin ARGS --json` within `timeout`; the JSON document it printed.
fn run_once(bin: &Path, experiment: &[String], timeout: Duration) -> Result<serde_json::Value> {
    let mut child = Command::new(bin)
        .args(experiment)
        .arg("--json")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("ab: start {}", bin.display()))?;
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("ab: no stdout of {}", bin.display()))?;
    // Read on a thread so that a child filling the pipe never blocks while we wait on it.
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).map(|_| s)
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "ab: {} {} ran past {} s; killed",
                bin.display(),
                experiment.join(" "),
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = reader
        .join()
        .map_err(|_| anyhow!("ab: the reader thread panicked"))?
        .context("ab: read the experiment's output")?;
    if !status.success() {
        // A build that prints a failure document says why.
        let why = compare::document_in(&out)
            .and_then(|d| d.get("error")?.as_str().map(|e| format!(": {e}")))
            .unwrap_or_default();
        bail!(
            "ab: {} {} failed ({status}){why}",
            bin.display(),
            experiment.join(" ")
        );
    }
    compare::document_in(&out).ok_or_else(|| {
        anyhow!(
            "ab: {} {} printed no JSON document",
            bin.display(),
            experiment.join(" ")
        )
    })
}

/// Runs the comparison; each run's values go to stderr as they come.
pub(crate) fn ab(a: &AbArgs) -> Result<AbReport> {
    let bins = [binary(&a.old)?, binary(&a.new)?];
    let timeout = Duration::from_secs(a.timeout_s);
    let metrics = if a.metrics.is_empty() {
        headline_metrics(&a.experiment[0])
            .iter()
            .map(|m| m.to_string())
            .collect()
    } else {
        a.metrics.clone()
    };
    // (row, metric) -> values per build, in the order rows first appear.
    let mut values: BTreeMap<(usize, String, String), [Vec<f64>; 2]> = BTreeMap::new();
    let mut rows_seen: Vec<String> = Vec::new();
    for round in 0..a.rounds {
        // Alternate which build goes first.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let doc = run_once(&bins[side], &a.experiment, timeout)?;
            let rows: Vec<RowValues> = values_of(&doc, &metrics);
            if rows.iter().all(|r| r.values.is_empty()) {
                bail!(
                    "ab: {}'s document has none of {:?}",
                    bins[side].display(),
                    metrics
                );
            }
            for r in rows {
                let idx = match rows_seen.iter().position(|x| *x == r.row) {
                    Some(i) => i,
                    None => {
                        rows_seen.push(r.row.clone());
                        rows_seen.len() - 1
                    }
                };
                for (m, v) in r.values {
                    eprintln!(
                        "ab: round {} {} {}{}{m} = {v}",
                        round + 1,
                        ["old", "new"][side],
                        r.row,
                        if r.row.is_empty() { "" } else { " " }
                    );
                    values.entry((idx, r.row.clone(), m)).or_default()[side].push(v);
                }
            }
        }
    }
    let comparisons = values
        .into_iter()
        .map(|((_, row, metric), [old, new])| {
            let (o, n) = (Spread::of(old), Spread::of(new));
            Comparison {
                row,
                metric,
                ratio: match (o, n) {
                    (Some(o), Some(n)) if o.median != 0.0 => Some(n.median / o.median),
                    _ => None,
                },
                old: o,
                new: n,
            }
        })
        .collect();
    Ok(AbReport {
        old: bins[0].display().to_string(),
        new: bins[1].display().to_string(),
        experiment: a.experiment.clone(),
        rounds: a.rounds,
        comparisons,
    })
}

/// The table `ab` prints.
pub(crate) fn table(r: &AbReport) -> String {
    let mut s = format!(
        "{} rounds of `mpa-bench {}`, builds alternating\nold: {}\nnew: {}\n",
        r.rounds,
        r.experiment.join(" "),
        r.old,
        r.new
    );
    let cell = |x: &Option<Spread>| match x {
        Some(x) => format!("{:.3} ({:.3}–{:.3})", x.median, x.min, x.max),
        None => "-".to_string(),
    };
    s += &format!(
        "{:<36} {:<26} {:>30} {:>30} {:>8}\n",
        "result", "value", "old median (min–max)", "new median (min–max)", "new/old"
    );
    for c in &r.comparisons {
        s += &format!(
            "{:<36} {:<26} {:>30} {:>30} {:>8}\n",
            c.row,
            c.metric,
            cell(&c.old),
            cell(&c.new),
            c.ratio.map_or("-".to_string(), |x| format!("{x:.3}"))
        );
    }
    s
}

/// `mpa-bench ab`: the table on stdout, or the document with `--json`.
pub fn run_cli(a: &AbArgs) -> Result<()> {
    let r = ab(a)?;
    if a.json {
        crate::report::print(&r)?;
    } else {
        mpa_cli::out!("{}", table(&r));
    }
    Ok(())
}
