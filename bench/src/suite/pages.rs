//! The pages `make bench` keeps current from one run of the standard set: the performance
//! page (docs/performance.md: every table of the run, the machine, the build, how to
//! reproduce) and README.md's headline figures (the lines between its headline markers).
//! Both are written from the run's typed documents, never by hand.

use super::SuiteResults;
use crate::report::document::{BwRecord, PipelineRecord};
use crate::report::{Document, Receiver};
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

/// The lines README.md's headline figures sit between.
pub(crate) const HEADLINE_BEGIN: &str = "<!-- headline:begin -->";
pub(crate) const HEADLINE_END: &str = "<!-- headline:end -->";
/// Columns of the pages' prose.
const WIDTH: usize = 96;

/// Today's date (UTC) as YYYY-MM-DD.
fn today() -> String {
    chrono::Utc::now().format("%Y-%m-%d").to_string()
}

/// `to` as a path relative to the directory `from` (both made absolute first).
pub(crate) fn relative_path(from_dir: &Path, to: &Path) -> Result<PathBuf> {
    let abs = |p: &Path| -> Result<PathBuf> {
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            std::env::current_dir()?.join(p)
        };
        // Lexically: `..` and `.` resolved without touching the file system.
        let mut out = PathBuf::new();
        for c in p.components() {
            match c {
                Component::ParentDir => {
                    out.pop();
                }
                Component::CurDir => {}
                other => out.push(other),
            }
        }
        Ok(out)
    };
    let (from, to) = (abs(from_dir)?, abs(to)?);
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut rel = PathBuf::new();
    for _ in from.components().skip(common) {
        rel.push("..");
    }
    for c in to.components().skip(common) {
        rel.push(c);
    }
    Ok(rel)
}

/// The datapath's latency modes, as the headline names them.
const MODES: [(Receiver, &str); 3] = [
    (Receiver::Datapath, "sleeping workers"),
    (Receiver::DatapathSpin, "spinning workers"),
    (Receiver::RunToCompletion, "run-to-completion"),
];

/// The headline figures: a few rows of the run, each with both receivers where there are two.
pub(crate) fn headline(r: &SuiteResults) -> String {
    let mut rows: Vec<[String; 4]> = Vec::new();
    let f2 = |x: f64| format!("{x:.2}");
    let ratio = |d: f64, k: f64| {
        if d.is_finite() && k.is_finite() && k > 0.0 {
            format!("{:.2}×", d / k)
        } else {
            "—".to_string()
        }
    };
    for doc in &r.documents {
        match doc {
            // The headline keeps the deep ring's figures: the frames-in-cache run is a
            // breakdown, on the performance page only.
            Document::Pipeline { params, .. } if params.ring_fill.is_some() => {}
            Document::Pipeline { results, .. } => {
                if let Some(c) = results.iter().find_map(|p| match p {
                    PipelineRecord::Config(c)
                        if c.mss == 1448 && c.size == 4096 && c.stage.is_none() && !c.variant =>
                    {
                        Some(c)
                    }
                    _ => None,
                }) {
                    rows.push([
                        if c.aligned {
                            "receive pipeline alone, one core, FPDUs aligned with segments \
                             (MSS 1448, 4 KiB)"
                        } else {
                            "receive pipeline alone, one core (MSS 1448, 4 KiB)"
                        }
                        .into(),
                        "—".into(),
                        format!(
                            "{} Gbit/s ({:.0} ns/packet)",
                            f2(c.gbit_s_per_core),
                            c.ns_per_packet
                        ),
                        "—".into(),
                    ]);
                }
                if let Some(w) = results.iter().find_map(|p| match p {
                    PipelineRecord::Workers(w) => Some(w),
                    _ => None,
                }) {
                    rows.push([
                        format!(
                            "receive pipeline, {} workers (MSS {}, {})",
                            w.workers,
                            w.mss,
                            size_name(w.size)
                        ),
                        "—".into(),
                        format!(
                            "{} Gbit/s, {:.2}× one worker",
                            f2(w.aggregate_gbit_s),
                            w.scaling
                        ),
                        "—".into(),
                    ]);
                }
            }
            Document::Bw { params, results } => {
                let get = |who: Receiver, size: usize| {
                    results
                        .iter()
                        .find(|b: &&BwRecord| b.receiver == who && b.size == size)
                };
                let loss = params.loss_percent;
                for size in [4096usize, 65536 - 1024] {
                    let (Some(k), Some(d)) =
                        (get(Receiver::Kernel, size), get(Receiver::Datapath, size))
                    else {
                        continue;
                    };
                    let what = if loss == 0 {
                        format!("goodput, no loss, {}", size_name(size))
                    } else {
                        format!("goodput, {loss} % loss, {}", size_name(size))
                    };
                    rows.push([
                        what,
                        format!("{} Gbit/s", f2(k.gbit_s)),
                        format!("{} Gbit/s", f2(d.gbit_s)),
                        ratio(d.gbit_s, k.gbit_s),
                    ]);
                    if loss == 0 && size == 4096 {
                        rows.push([
                            "whole-system CPU per octet, no loss, 4 KiB".into(),
                            format!("{} ns", f2(k.system_cpu_ns_per_octet)),
                            format!("{} ns", f2(d.system_cpu_ns_per_octet)),
                            ratio(d.system_cpu_ns_per_octet, k.system_cpu_ns_per_octet),
                        ]);
                    }
                }
            }
            Document::Lat {
                params, results, ..
            } if params.rate > 0 && !params.pingpong => {
                let get =
                    |who: Receiver| results.iter().find(|l| l.receiver == who && l.size == 64);
                for (who, mode) in MODES {
                    if let (Some(k), Some(d)) = (get(Receiver::Kernel), get(who)) {
                        rows.push([
                            format!(
                                "one-way latency p50 / p99, 64 B at {} msg/s, {mode}",
                                thousands(params.rate)
                            ),
                            format!("{:.1} / {:.1} µs", k.p50_us, k.p99_us),
                            format!("{:.1} / {:.1} µs", d.p50_us, d.p99_us),
                            ratio(d.p50_us, k.p50_us),
                        ]);
                    }
                }
            }
            Document::Lat {
                params, results, ..
            } if params.pingpong => {
                let get =
                    |who: Receiver| results.iter().find(|l| l.receiver == who && l.size == 64);
                for (who, mode) in MODES {
                    if let (Some(k), Some(d)) = (get(Receiver::Kernel), get(who)) {
                        rows.push([
                            format!("ping-pong latency p50 / p99 (RTT/2), 64 B, {mode}"),
                            format!("{:.1} / {:.1} µs", k.p50_us, k.p99_us),
                            format!("{:.1} / {:.1} µs", d.p50_us, d.p99_us),
                            ratio(d.p50_us, k.p50_us),
                        ]);
                    }
                }
            }
            Document::Setup { results, .. } => {
                if let Some(s) = results.first() {
                    rows.push([
                        format!(
                            "connection setup, {} connections",
                            thousands(s.connections as u64)
                        ),
                        "—".into(),
                        format!(
                            "{} hand-overs/s, p50 {:.2} ms",
                            thousands(s.handovers_per_s.round() as u64),
                            s.p50_ms
                        ),
                        "—".into(),
                    ]);
                }
            }
            Document::Lat { .. } => {}
        }
    }
    let intro = format!(
        "Measured {} on build {}: {}; a namespace bed of veth pairs (AF_XDP in copy mode), the \
         same kernel-TCP sender for both receivers, RDMA Writes with markers and CRC placed into \
         a registered region; medians over the rounds.",
        today(),
        r.commit,
        r.machine
    );
    let mut s = format!(
        "{}\n\n| measure | kernel TCP receiver | mpa-xdp datapath | datapath / kernel |\n\
         |---|---|---|---|\n",
        wrap(&intro, WIDTH)
    );
    for row in rows {
        let _ = writeln!(s, "| {} | {} | {} | {} |", row[0], row[1], row[2], row[3]);
    }
    s += "\n";
    s += &wrap(
        "These figures are regenerated by `make bench`; every table, with its spread, is in \
         [docs/performance.md](docs/performance.md).",
        WIDTH,
    );
    s.push('\n');
    s
}

/// `text` (one paragraph) broken into lines of at most `width` columns at spaces.
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = 0usize;
    for word in text.split_whitespace() {
        let n = word.chars().count();
        if line > 0 && line + 1 + n > width {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += n;
    }
    out
}

fn size_name(size: usize) -> String {
    if size.is_multiple_of(1024) {
        format!("{} KiB", size / 1024)
    } else {
        format!("{size} B")
    }
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// `readme` with the lines between the headline markers replaced by `block`.
pub(crate) fn replace_headline(readme: &str, block: &str) -> Result<String> {
    let (Some(b), Some(e)) = (readme.find(HEADLINE_BEGIN), readme.find(HEADLINE_END)) else {
        bail!("no {HEADLINE_BEGIN} … {HEADLINE_END} block to replace");
    };
    if e < b {
        bail!("{HEADLINE_END} comes before {HEADLINE_BEGIN}");
    }
    Ok(format!(
        "{}{HEADLINE_BEGIN}\n{}{}",
        &readme[..b],
        block,
        &readme[e..]
    ))
}

/// The performance page: how the figures were made and every table of the run's summary,
/// its plots linked from `results_rel` (the run's directory, relative to the page).
pub(crate) fn performance_page(summary: &str, r: &SuiteResults, results_rel: &Path) -> String {
    let rel = results_rel.display().to_string();
    let about = format!(
        "Measured {} on build {}: {}. Every figure below comes from that one run of the standard \
         set; the run's raw output (summary, `results.json`, the plots and the `.hgrm` latency \
         histograms) is in [`{rel}/`]({rel}/). How each benchmark works: \
         [benchmarks.md](benchmarks.md); past investigations: \
         [investigations/](investigations/README.md).",
        today(),
        r.commit,
        r.machine,
    );
    let reading = "Reproduce with `make bench` (as root, a few minutes), or one table at a time \
         with the command in its heading. On a machine with few cores the busy-polling worker, \
         the kernel sender and its softirq share the CPUs, and single rounds vary up to 2× (more \
         under loss): read every ratio with the spread beside it. The test bed is veth pairs \
         with AF_XDP in copy mode; a NIC in zero-copy mode removes two kernel copies per octet \
         from the datapath's side.";
    let mut s = format!(
        "<!-- Regenerated by `make bench` (mpa-bench suite); do not edit by hand. -->\n\
         # Performance\n\n{}\n\n{}\n\n",
        wrap(&about, WIDTH),
        wrap(reading, WIDTH)
    );
    // The summary without its own title and preamble, plots linked from the page.
    let body = summary.find("\n## ").map_or(summary, |i| &summary[i + 1..]);
    for line in body.lines() {
        match line
            .strip_prefix("![")
            .and_then(|rest| rest.split_once("]("))
            .and_then(|(alt, file)| Some((alt, file.strip_suffix(')')?)))
        {
            Some((alt, file)) if !file.contains('/') => {
                let _ = writeln!(s, "![{alt}]({rel}/{file})");
            }
            _ => {
                s += line;
                s.push('\n');
            }
        }
    }
    s
}

/// Writes the performance page and README.md's headline block.
pub(crate) fn write_pages(
    summary: &str,
    r: &SuiteResults,
    out: &Path,
    page: Option<&Path>,
    readme: Option<&Path>,
) -> Result<()> {
    if let Some(page) = page {
        let dir = page.parent().unwrap_or(Path::new("."));
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let rel = relative_path(dir, out)?;
        std::fs::write(page, performance_page(summary, r, &rel))
            .with_context(|| format!("write {}", page.display()))?;
    }
    if let Some(readme) = readme {
        let text = std::fs::read_to_string(readme)
            .with_context(|| format!("read {}", readme.display()))?;
        let new = replace_headline(&text, &headline(r))
            .with_context(|| format!("{}", readme.display()))?;
        std::fs::write(readme, new).with_context(|| format!("write {}", readme.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_headline_block_is_replaced_and_nothing_else() {
        let readme =
            format!("# x\n\nintro\n\n{HEADLINE_BEGIN}\nold\nrows\n{HEADLINE_END}\n\n## after\n");
        let new = replace_headline(&readme, "new table\n").unwrap();
        assert_eq!(
            new,
            format!("# x\n\nintro\n\n{HEADLINE_BEGIN}\nnew table\n{HEADLINE_END}\n\n## after\n")
        );
        assert!(replace_headline("# no markers\n", "x").is_err());
        assert!(replace_headline(&format!("{HEADLINE_END}\n{HEADLINE_BEGIN}\n"), "x").is_err());
    }

    #[test]
    fn paths_are_made_relative_to_the_page() {
        assert_eq!(
            relative_path(Path::new("/r/docs"), Path::new("/r/bench/results/latest")).unwrap(),
            PathBuf::from("../bench/results/latest")
        );
        assert_eq!(
            relative_path(Path::new("/r/docs/"), Path::new("/r/docs/x")).unwrap(),
            PathBuf::from("x")
        );
    }

    #[test]
    fn the_page_links_plots_into_the_run_directory() {
        let r = SuiteResults {
            machine: "m".into(),
            commit: "c".into(),
            seconds: 1.0,
            documents: Vec::new(),
        };
        let summary = "# mpa-bench standard set\n\npreamble\n\n## Pipeline\n\n| a |\n\n![stages](pipeline-stages.png)\n";
        let page = performance_page(summary, &r, Path::new("../bench/results/latest"));
        assert!(page.contains("## Pipeline\n\n| a |\n"));
        assert!(page.contains("![stages](../bench/results/latest/pipeline-stages.png)"));
        assert!(!page.contains("preamble"));
        assert!(page.contains("on build c: m."));
        assert_eq!(wrap("aa bb cc dd", 5), "aa bb\ncc dd");
        assert_eq!(wrap("a", 5), "a");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(size_name(64512), "63 KiB");
        let d = today();
        assert_eq!((d.len(), &d[4..5], &d[7..8]), (10, "-", "-"));
    }
}
