//! The impairment bridge under the whole system: 20 % loss, reordering and duplication in
//! both directions (data a → b, ACKs and the datapath's own segments b → a), and both
//! receivers still finish octet-exact: `mpa-bench demo` (the AF_XDP datapath, RDMA Writes
//! placed and the region compared octet for octet) and `mpa-bench bw`, which runs the kernel
//! baseline and the datapath on the same impaired bed. The transfers are small (8 MiB) so
//! that the test stays well under a minute.

use mpa_tests::require_privileged;
use std::process::Command;

/// Both directions: 20 % drop, 5 % reordered by 3 frames (or 1 ms), 2 % duplicated.
const IMPAIR: &str = "drop=20,reorder=5,dup=2,seed=7,both";

fn bench(args: &[&str]) -> String {
    let out = Command::new(mpa_tests::bin("mpa-bench"))
        .args(args)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "mpa-bench {args:?} failed\n{stdout}\n{stderr}"
    );
    format!("{stdout}\n{stderr}")
}

/// The counters of one direction from an `impairment: a→b …; b→a …` line.
fn counter(line: &str, dir: &str, key: &str) -> u64 {
    let part = line
        .split(';')
        .find(|p| p.contains(dir))
        .unwrap_or_else(|| panic!("no {dir} in {line}"));
    part.split(dir)
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {part}"))
}

fn check_impaired_both_ways(out: &str) {
    let line = out
        .lines()
        .rev()
        .find(|l| l.contains("impairment") && l.contains("a→b"))
        .unwrap_or_else(|| panic!("no impairment counters in\n{out}"));
    for dir in ["a→b", "b→a"] {
        for key in ["dropped", "reordered", "duplicated"] {
            assert!(counter(line, dir, key) > 0, "{dir} {key}: {line}");
        }
        // Nothing lost that the impairment did not decide.
        for key in ["send_errors", "socket_drops", "truncated", "overflow"] {
            assert_eq!(counter(line, dir, key), 0, "{dir} {key}: {line}");
        }
    }
}

#[test]
fn demo_places_octet_exact_through_loss_reordering_and_duplication_both_ways() {
    if !require_privileged("impaired demo") {
        return;
    }
    let out = bench(&["demo", "--bytes", "8388608", "--impair", IMPAIR]);
    assert!(out.contains("digest_match=true"), "{out}");
    assert!(
        out.contains("equals what the peer wrote"),
        "placement not checked octet for octet:\n{out}"
    );
    check_impaired_both_ways(&out);
}

#[test]
fn bw_kernel_and_datapath_finish_octet_exact_through_the_impairment() {
    if !require_privileged("impaired bw") {
        return;
    }
    let out = bench(&[
        "bw", "--rounds", "1", "--sizes", "4096", "--bytes", "8388608", "--impair", IMPAIR,
    ]);
    assert!(out.contains("round 1, 4096 B: kernel"), "{out}");
    check_impaired_both_ways(&out);
}

#[test]
fn corruption_with_a_valid_tcp_checksum_ends_in_an_mpa_crc_terminate() {
    if !require_privileged("impaired demo, CRC") {
        return;
    }
    // 1 % of a → b data frames get a bit flipped and their TCP checksum fixed: the kernel and
    // the datapath's TCP accept them, the FPDU CRC must not (RFC 5044 §8: MPA error 2, CRC
    // mismatch, reported in a Terminate of layer 2 = LLP). Seed 3 corrupts data FPDUs first
    // (not the MPA Request, which a flipped bit would make a different error).
    let out = Command::new(mpa_tests::bin("mpa-bench"))
        .args([
            "demo",
            "--bytes",
            "8388608",
            "--impair",
            "corrupt=1,fix-csum,seed=3",
        ])
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("peer terminated: layer 2, type 0, code 2"),
        "{text}"
    );
}

#[test]
fn impair_syntax_errors_name_the_key() {
    // Parsed before any bed is built: no privilege needed.
    let out = Command::new(mpa_tests::bin("mpa-bench"))
        .args(["demo", "--impair", "drop=20,dorp=5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`dorp`") && err.contains("unknown key"),
        "{err}"
    );
}
