//! The privilege gate of every whole-system test: go on, skip loudly, or — with
//! `MPA_REQUIRE_PRIVILEGED=1` (`make test`, CI) — fail instead of skipping.

use crate::BedError;
use std::io::Write;
use std::process::Command;

/// Whether this process may build beds: root, network namespaces, and the tools a bed runs
/// (`ip`, `ethtool`; `make deps` installs them).
pub fn privileged() -> Result<(), BedError> {
    if quick_tier() {
        return Err(BedError::Unprivileged(
            "the quick tier (MPA_QUICK=1, `make check`) runs no bed".into(),
        ));
    }
    if !nix::unistd::Uid::effective().is_root() {
        return Err(BedError::Unprivileged(
            "not root (needs CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN)".into(),
        ));
    }
    if !std::path::Path::new("/proc/self/ns/net").exists() {
        return Err(BedError::Unprivileged("no network namespaces".into()));
    }
    for tool in ["ip", "ethtool"] {
        if Command::new(tool).arg("-V").output().is_err() {
            return Err(BedError::Unprivileged(format!(
                "`{tool}` not found (make deps)"
            )));
        }
    }
    Ok(())
}

/// Whether this is the quick tier (`MPA_QUICK=1`, `make check`): whole-system tests skip
/// quietly, even as root.
fn quick_tier() -> bool {
    std::env::var("MPA_QUICK").as_deref() == Ok("1")
}

/// Whether privileged tests must run rather than skip (`MPA_REQUIRE_PRIVILEGED=1`).
fn privilege_required() -> bool {
    std::env::var("MPA_REQUIRE_PRIVILEGED").as_deref() == Ok("1")
}

/// Skips `test` for `reason` with a loud warning, or panics when `MPA_REQUIRE_PRIVILEGED=1`
/// forbids skipping.
pub fn skip_or_fail(test: &str, reason: &str) {
    if privilege_required() {
        panic!("{test}: MPA_REQUIRE_PRIVILEGED=1 but {reason}");
    }
    if quick_tier() {
        return;
    }
    // Straight to fd 2, not eprintln!: the test harness captures eprintln! output of passing
    // tests, and a skip must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "\n!!! WARNING: SKIPPING {test}: {reason}\n\
         !!! (run as root to exercise it; MPA_REQUIRE_PRIVILEGED=1 makes this a failure)\n"
    );
}

/// For tests: `true` to go on, `false` to skip (with a loud warning), or a panic when
/// `MPA_REQUIRE_PRIVILEGED=1` demands privileged tests run.
pub fn require_privileged(test: &str) -> bool {
    match privileged() {
        Ok(()) => true,
        Err(e) => {
            skip_or_fail(test, &e.to_string());
            false
        }
    }
}
