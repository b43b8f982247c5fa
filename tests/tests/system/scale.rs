//! Many connections at once: `mpa-bench scale` sets up 10,000 MPA connections through
//! `mpa-control serve`, hands each over to one datapath, checks that every one carries an
//! FPDU through it, then closes them all (each must end cleanly).

use mpa_tests::require_privileged;
use std::process::Command;

#[test]
fn ten_thousand_connections_in_one_datapath() {
    if !require_privileged("scale") {
        return;
    }
    // Each process (this bench, the daemon) holds one descriptor per connection.
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    let n = 10_000u64.min(hard.saturating_sub(2048));
    if n < 10_000 {
        eprintln!("descriptor hard limit {hard}: testing {n} connections instead of 10,000");
    }
    assert!(
        n >= 1000,
        "descriptor hard limit {hard} is too low for a scale test"
    );
    let out = Command::new(mpa_tests::bin("mpa-bench"))
        .args(["setup", "--connections", &n.to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && stdout
                .lines()
                .any(|l| l.starts_with(&format!("setup: OK {n} concurrent connections"))),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
