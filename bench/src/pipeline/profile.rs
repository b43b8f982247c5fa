//! `pipeline --perf`: one more round under `perf record` (software clock, so it also works
//! where the VM has no hardware counters), then the top symbols. Skipped when perf is not
//! usable.

use super::{gen, round, PipelineOpts};
use anyhow::Result;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Whether `perf record` works here.
fn perf_usable() -> bool {
    Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-o", "/dev/null", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Records one round of `o` and prints the top symbols.
pub fn profile(o: &PipelineOpts) -> Result<()> {
    if !perf_usable() {
        println!("perf: not usable here (`perf record -e cpu-clock true` failed); no profile");
        return Ok(());
    }
    let p = gen::prepare(o)?;
    let data = crate::datapath::temp_path("pipeline.perf.data");
    let mut perf = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-F", "4999", "-o"])
        .arg(&data)
        .args(["-p", &std::process::id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    // perf attaches asynchronously.
    std::thread::sleep(Duration::from_millis(500));
    let r = round::run_round(o, &p);
    let _ = Command::new("kill")
        .args(["-INT", &perf.id().to_string()])
        .status();
    perf.wait()?;
    r?;
    let out = Command::new("perf")
        .args(["report", "--stdio", "--no-children", "--sort", "symbol", "-i"])
        .arg(&data)
        .args(["--percent-limit", "0.7"])
        .stderr(Stdio::null())
        .output()?;
    let _ = std::fs::remove_file(&data);
    println!("\nperf (one round of {}; samples of this process, including the untimed parts):", o.label());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .take(30)
        .for_each(|l| println!("{l}"));
    Ok(())
}
