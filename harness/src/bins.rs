//! The workspace's binaries (`mpa-peer`, `mpa-control`, `mpa-bench`, `mpa-datapath`) for the
//! tests and experiments that run them as processes: [`sibling`] finds one beside the running
//! executable; [`bin`] (tests) builds them first, [`example`] an example program.
//! Under `cargo test --workspace` they are fresh already; under `cargo test -p mpa-tests` the
//! first test that needs one builds them (with the profile the tests were built with).

use anyhow::{anyhow, Result};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The workspace's binaries and examples, built once per test process: as the whole
/// workspace with its examples, so that cargo resolves features as `cargo test --workspace`
/// does (dev-dependencies included) and finds fresh what that command built — built for a
/// narrower set, every crate under `nix` or `serde` would build a second time.
fn built() -> &'static Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(|| cargo_build(&["--workspace", "--lib", "--bins", "--examples"]))
}

/// The path of workspace binary `name`, built if needed.
pub fn bin(name: &str) -> PathBuf {
    if let Err(e) = built() {
        panic!("building the workspace binaries: {e}");
    }
    sibling(name).unwrap_or_else(|e| panic!("{e:#}"))
}

/// The directory holding libmpaxdp (`libmpaxdp.so`, `libmpaxdp.a`), built first.
pub fn c_library_dir() -> PathBuf {
    match built() {
        Ok(profile_dir) => profile_dir.clone(),
        Err(e) => panic!("building libmpaxdp: {e}"),
    }
}

/// The path of example `name` of workspace package `package` (e.g. the consumer API's
/// `minimal_consumer`), built first.
pub fn example(package: &str, name: &str) -> PathBuf {
    match built() {
        Ok(profile_dir) => {
            let path = profile_dir.join("examples").join(name);
            assert!(
                path.is_file(),
                "{package} has no example {name} ({} missing)",
                path.display()
            );
            path
        }
        Err(e) => panic!("building example {name} of {package}: {e}"),
    }
}

/// `cargo build ARGS` into the target directory and profile of this test executable; the
/// profile's directory (`target/<profile dir>`).
fn cargo_build(args: &[&str]) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe
        .parent()
        .ok_or_else(|| format!("{} has no directory", exe.display()))?;
    // A workspace binary (`mpa-bench` running a connection manager) has its siblings beside
    // it already: build nothing (a test executable is in target/<profile dir>/deps).
    if dir.file_name().is_none_or(|n| n != "deps") {
        return Ok(dir.to_path_buf());
    }
    let profile_dir = dir
        .parent()
        .ok_or_else(|| format!("{} is not in target/<profile>/deps", exe.display()))?;
    // Run by hand rather than by cargo: use what is there.
    let Some(cargo) = std::env::var_os("CARGO") else {
        return Ok(profile_dir.to_path_buf());
    };
    let target_dir = profile_dir
        .parent()
        .ok_or_else(|| format!("no target directory above {}", profile_dir.display()))?;
    let mut cmd = Command::new(cargo);
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("build")
        .args(args)
        .arg("--target-dir")
        .arg(target_dir);
    // The profile `cargo test` built this executable with: `test` into debug/, `release`
    // (`cargo test --release`) into release/.
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("release") => cmd.arg("--release"),
        _ => cmd.args(["--profile", "test"]),
    };
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(profile_dir.to_path_buf())
}

/// The workspace binary `name` built beside the running one (`cargo build --workspace`):
/// in the same directory, or one up for a test executable in `target/<profile>/deps`.
pub fn sibling(name: &str) -> Result<PathBuf> {
    let me = std::env::current_exe()?;
    let dir = me
        .parent()
        .ok_or_else(|| anyhow!("{} has no directory", me.display()))?;
    let mut candidates = vec![dir.join(name)];
    if dir.file_name().is_some_and(|d| d == "deps") {
        candidates.extend(dir.parent().map(|p| p.join(name)));
    }
    candidates.into_iter().find(|p| p.exists()).ok_or_else(|| {
        anyhow!(
            "{name} not found beside {}: build the workspace first (cargo build --release --workspace)",
            me.display()
        )
    })
}
