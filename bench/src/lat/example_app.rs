//! `lat --pingpong --modes c-api,rust-app`: the ping-pong examples as the datapath's
//! application, each in a process of its own, against the same echo server as the other
//! modes, the datapath's workers sleeping when idle as in the `sleep` mode:
//! * `c-api`: `examples/c/write_pingpong.c` through libmpaxdp, compiled when the run starts —
//!   against the library beside `mpa-bench` and the source tree's header when `mpa-bench`
//!   runs from a build tree, else against the installed library (`pkg-config mpa-xdp`, the
//!   source from the installed examples);
//! * `rust-app`: its twin `app/examples/write_pingpong.rs`, built beside `mpa-bench`
//!   (`make build` builds the examples).
//!
//! Both check every echo and write every round trip (`--samples`); the first [`WARMUP`] are
//! dropped as the other modes drop theirs, so the rows are measured as theirs are:
//! CLOCK_MONOTONIC around a post and its echo's completion, RTT/2.

use super::args::LatArgs;
use super::echo::{check_echo, echo_server, WARMUP};
use super::samples::Samples;
use crate::bed::application::connection_manager;
use crate::bed::options::PORT;
use anyhow::{bail, Context, Result};
use mpa::wire::ddp::TAGGED_HEADER_LEN;
use mpa_harness::datapath::{start_datapath, temp_path, DatapathOptions};
use mpa_testbed::TestBed;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The C ping-pong's source in the source tree this `mpa-bench` was built from.
const SOURCE_TREE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// A ping-pong example, ready to run.
pub(crate) struct ExampleApp {
    exe: PathBuf,
    /// It prints one JSON document of its figures (the C program's `--json`).
    json: bool,
}

impl ExampleApp {
    /// The Rust ping-pong example beside `mpa-bench`.
    pub(crate) fn rust() -> Result<ExampleApp> {
        let here = std::env::current_exe()?;
        let exe = here
            .parent()
            .context("mpa-bench has no directory")?
            .join("examples/write_pingpong");
        if !exe.is_file() {
            bail!(
                "--modes rust-app: no {} (make build, or cargo build --release -p mpa-app \
                 --example write_pingpong)",
                exe.display()
            );
        }
        Ok(ExampleApp { exe, json: false })
    }

    /// Compiles `write_pingpong.c` (see the module's documentation for which library).
    pub(crate) fn c() -> Result<ExampleApp> {
        let here = std::env::current_exe()?;
        let exe_dir = here.parent().context("mpa-bench has no directory")?;
        let tree = Path::new(SOURCE_TREE);
        let out = temp_path("c-api");
        std::fs::create_dir_all(&out)?;
        let exe = out.join("write_pingpong");
        let mut cc = Command::new("cc");
        cc.args(["-std=c11", "-D_DEFAULT_SOURCE", "-O2", "-Wall", "-o"])
            .arg(&exe);
        let built_lib = exe_dir.join("libmpaxdp.so");
        if built_lib.is_file() && tree.join("capi/include/mpaxdp.h").is_file() {
            // A build tree: the library under its soname in the program's directory, found
            // there at run time.
            for name in ["libmpaxdp.so", "libmpaxdp.so.0"] {
                let to = out.join(name);
                let _ = std::fs::remove_file(&to);
                std::fs::copy(&built_lib, &to)
                    .with_context(|| format!("copying {}", built_lib.display()))?;
            }
            cc.arg(tree.join("examples/c/write_pingpong.c"))
                .arg("-I")
                .arg(tree.join("capi/include"))
                .arg("-L")
                .arg(&out)
                .arg(format!("-Wl,-rpath,{}", out.display()))
                .arg("-lmpaxdp");
        } else {
            let installed = exe_dir.join("../share/doc/mpa-xdp/examples/c/write_pingpong.c");
            if !installed.is_file() {
                bail!(
                    "--modes c-api: no libmpaxdp beside {} and no installed example {}",
                    here.display(),
                    installed.display()
                );
            }
            let flags = Command::new("pkg-config")
                .args(["--cflags", "--libs", "mpa-xdp"])
                .output()
                .context("--modes c-api: running pkg-config")?;
            if !flags.status.success() {
                bail!(
                    "--modes c-api: pkg-config mpa-xdp: {}",
                    String::from_utf8_lossy(&flags.stderr).trim()
                );
            }
            cc.arg(installed)
                .args(String::from_utf8_lossy(&flags.stdout).split_whitespace());
        }
        cc.arg("-lm");
        let built = cc
            .output()
            .context("--modes c-api needs a C compiler: running cc")?;
        if !built.status.success() {
            bail!(
                "--modes c-api: compiling the C ping-pong: {}",
                String::from_utf8_lossy(&built.stderr)
            );
        }
        Ok(ExampleApp { exe, json: true })
    }

    /// One ping-pong of `size`-octet Writes (the DDP header included) against the echo
    /// server: its samples.
    pub(crate) fn pingpong(&self, bed: &TestBed, a: &LatArgs, size: usize) -> Result<Samples> {
        let payload = (size - TAGGED_HEADER_LEN) as u64;
        let socket = temp_path("example-app.sock");
        let opts = DatapathOptions {
            yield_every: a.spin_yield_polls,
            xsk: a.xsk(),
            ..a.bed.datapath_options(bed)?
        };
        let dp = start_datapath(bed, &socket, &opts)?;
        let manager = connection_manager(bed, &socket)?;
        let echo = echo_server(bed, a, payload)?;
        let to = SocketAddr::new(bed.addr_a(false), PORT);
        let iterations = WARMUP + a.messages;
        let samples_file = temp_path("example-app.samples");
        let mut cmd = Command::new(&self.exe);
        cmd.arg(&socket)
            .arg("connect")
            .arg(to.to_string())
            .arg(payload.to_string())
            .arg(iterations.to_string())
            .arg("--samples")
            .arg(&samples_file);
        if self.json {
            cmd.arg("--json");
        }
        if a.consumer_busy_poll {
            cmd.arg("--busy-poll").arg(a.spin_yield_polls.to_string());
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", self.exe.display()))?;
        // Each of its waits is bounded by itself; this bounds the whole.
        let deadline = Instant::now() + Duration::from_secs(60) + Duration::from_millis(iterations);
        let status = loop {
            if let Some(st) = child.try_wait()? {
                break st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("the ping-pong example did not finish {iterations} round trips in time");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let out = child.wait_with_output()?;
        if !status.success() {
            bail!(
                "the ping-pong example failed ({status}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        if self.json {
            let doc: serde_json::Value =
                serde_json::from_slice(&out.stdout).context("the C ping-pong's JSON document")?;
            if doc["iterations"].as_u64() != Some(iterations)
                || doc["bytes"].as_u64() != Some(payload)
            {
                bail!("the C ping-pong reports {doc}, not {iterations} × {payload} octets");
            }
        }
        let text =
            std::fs::read_to_string(&samples_file).context("the ping-pong example's samples")?;
        let _ = std::fs::remove_file(&samples_file);
        let rtts: Vec<u64> = text
            .lines()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .context("the ping-pong example's samples")?;
        if rtts.len() as u64 != iterations {
            bail!(
                "the ping-pong example wrote {} samples, not {iterations}",
                rtts.len()
            );
        }
        let mut smp = Samples::default();
        for &rtt in &rtts[WARMUP as usize..] {
            smp.hist.saturating_record((rtt / 2).max(1));
        }
        // The example disconnected; the echo server saw every ping.
        check_echo(echo.report(Duration::from_secs(40))?, iterations)?;
        dp.stop();
        drop(manager);
        Ok(smp)
    }
}
