//! `pipeline --perf`: one more round under `perf record` (software clock, so it also works
//! where the VM has no hardware counters), sampling only the timed part, then the top symbols. Skipped when perf is not
//! usable.

use super::{gen, round, PipelineOpts};
use anyhow::{bail, Result};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

/// Whether `perf record` works here.
fn perf_usable() -> bool {
    Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-o", "/dev/null", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Records one round of `o`, only while the worker is polled (perf starts disabled and is
/// enabled around each timed part through its control FIFO), and prints the top symbols.
pub(crate) fn profile(o: &PipelineOpts, keep: Option<&std::path::Path>, json: bool) -> Result<()> {
    if !perf_usable() {
        crate::report::line(
            json,
            "perf: not usable here (`perf record -e cpu-clock true` failed); no profile",
        );
        return Ok(());
    }
    let p = gen::prepare(o)?;
    let data = keep
        .map(std::path::Path::to_path_buf)
        .unwrap_or_else(|| mpa_harness::datapath::temp_path("pipeline.perf.data"));
    let ctl = mpa_harness::datapath::temp_path("pipeline.perf.ctl");
    let ack = mpa_harness::datapath::temp_path("pipeline.perf.ack");
    for f in [&ctl, &ack] {
        if !Command::new("mkfifo").arg(f).status()?.success() {
            bail!("mkfifo {} failed", f.display());
        }
    }
    let mut perf = Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "-F",
            "9999",
            "-D",
            "-1",
            "-o",
        ])
        .arg(&data)
        .arg(format!(
            "--control=fifo:{},{}",
            ctl.display(),
            ack.display()
        ))
        .args(["-p", &std::process::id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    // Blocks until perf opens its ends.
    let mut ctl_w = std::fs::OpenOptions::new().write(true).open(&ctl)?;
    let mut ack_r = BufReader::new(std::fs::File::open(&ack)?);
    let mut failed = None;
    let mut toggle = |on: bool| {
        let cmd: &[u8] = if on { b"enable\n" } else { b"disable\n" };
        let mut line = String::new();
        if let Err(e) = ctl_w
            .write_all(cmd)
            .and_then(|_| ack_r.read_line(&mut line))
        {
            failed.get_or_insert(e);
        }
    };
    let r = round::run_round_with(o, &p, &mut toggle);
    let _ = Command::new("kill")
        .args(["-INT", &perf.id().to_string()])
        .status();
    perf.wait()?;
    for f in [&ctl, &ack] {
        let _ = std::fs::remove_file(f);
    }
    r?;
    if let Some(e) = failed {
        bail!("perf control: {e}");
    }
    let out = Command::new("perf")
        .args([
            "report",
            "--stdio",
            "--no-children",
            "--sort",
            "symbol",
            "-i",
        ])
        .arg(&data)
        .args(["--percent-limit", "0.7"])
        .stderr(Stdio::null())
        .output()?;
    if keep.is_none() {
        let _ = std::fs::remove_file(&data);
    }
    crate::report::line(
        json,
        &format!("\nperf (one round of {}; only while polling):", o.label()),
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .take(30)
        .for_each(|l| crate::report::line(json, l.trim_end_matches([' ', '-'])));
    Ok(())
}
