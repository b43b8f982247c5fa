//! Shared by the privileged tests: the skip-or-fail gate, a two-namespace veth test bed, and
//! hand-built frames.
//!
//! Tests that need root skip with a loud warning when not privileged, and fail instead when
//! `MPA_REQUIRE_PRIVILEGED=1` (`make test`, CI).

#![allow(dead_code)] // each test file uses a different part

use std::io::Write;

pub mod frames;
pub mod testbed;

/// Whether privileged tests must run rather than skip.
pub fn privilege_required() -> bool {
    std::env::var("MPA_REQUIRE_PRIVILEGED").is_ok_and(|v| v == "1")
}

/// Skips (loud warning, returns) or fails (panics) for `reason`.
pub fn skip_or_fail(test: &str, reason: &str) {
    if privilege_required() {
        panic!("{test}: {reason}, and MPA_REQUIRE_PRIVILEGED=1 forbids skipping");
    }
    // Straight to fd 2, not eprintln!: the test harness captures eprintln! output of passing
    // tests, and a skip must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "\n!!! WARNING: SKIPPING {test}: {reason}\n\
         !!! (run as root to exercise it; MPA_REQUIRE_PRIVILEGED=1 makes this a failure)\n"
    );
}

/// Whether the process runs with effective uid 0 (from /proc, no unsafe).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// True if the test may go on; otherwise it has been skipped (or has failed).
pub fn privileged(test: &str) -> bool {
    if is_root() {
        true
    } else {
        skip_or_fail(
            test,
            "not root (needs CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN)",
        );
        false
    }
}
