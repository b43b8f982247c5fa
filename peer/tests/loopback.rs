//! `mpa-peer connect` → `mpa-peer listen` over loopback: every combination of markers (either
//! side) and CRC gives identical digests and no error.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_mpa-peer");

struct Listener {
    child: Child,
    addr: String,
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn listen(args: &[&str]) -> Listener {
    let mut child = Command::new(BIN)
        .args(["listen", "--bind", "127.0.0.1:0", "--timeout", "20"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn listener");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("mpa-peer: listening on ")
        .expect(&line)
        .to_string();
    // Keep draining stderr so the child never blocks on it.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while err.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
            sink.clear();
        }
    });
    Listener { child, addr }
}

fn finish(mut l: Listener) -> (Value, bool) {
    let out = l.child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).unwrap();
    let status = l.child.wait().unwrap();
    (
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}")),
        status.success(),
    )
}

fn connect(addr: &str, args: &[&str]) -> (Value, bool, String) {
    let out = Command::new(BIN)
        .args(["connect", "--to", addr, "--timeout", "20"])
        .args(args)
        .output()
        .expect("run connect");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let v: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout:?}"));
    (
        v,
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn flag(on: bool, name: &'static str) -> Option<&'static str> {
    on.then_some(name)
}

#[test]
fn every_marker_and_crc_combination() {
    for bits in 0..16u8 {
        let (lm, cm, lcrc, ccrc) = (bits & 1 != 0, bits & 2 != 0, bits & 4 != 0, bits & 8 != 0);
        let largs: Vec<&str> = [
            flag(lm, "--markers"),
            Some(if lcrc { "--crc" } else { "--no-crc" }),
        ]
        .into_iter()
        .flatten()
        .collect();
        let l = listen(&largs);
        let size = ["1", "14", "100", "1000", "1430"][usize::from(bits) % 5];
        let mut cargs = vec!["--count", "300", "--size", size];
        cargs.extend(flag(cm, "--markers"));
        cargs.push(if ccrc { "--crc" } else { "--no-crc" });
        let (c, c_ok, c_err) = connect(&l.addr, &cargs);
        let (s, s_ok) = finish(l);
        let ctx = format!("combo {bits:04b}: client {c} server {s} stderr {c_err}");
        assert!(c_ok && s_ok, "{ctx}");
        assert_eq!(c["error_code"], Value::Null, "{ctx}");
        assert_eq!(s["error_code"], Value::Null, "{ctx}");
        assert_eq!(c["ulpdu_digest"], s["ulpdu_digest"], "{ctx}");
        assert_eq!(c["ulpdus"], 300, "{ctx}");
        assert_eq!(s["ulpdus"], 300, "{ctx}");
        assert_eq!(c["ulpdu_bytes"], s["ulpdu_bytes"], "{ctx}");
        // Negotiation seen from both sides (RFC 5044 §7.1.1).
        assert_eq!(s["markers_rx"], lm, "{ctx}");
        assert_eq!(s["markers_tx"], cm, "{ctx}");
        assert_eq!(c["markers_rx"], cm, "{ctx}");
        assert_eq!(c["markers_tx"], lm, "{ctx}");
        assert_eq!(s["crc"], lcrc || ccrc, "{ctx}");
        assert_eq!(c["crc"], lcrc || ccrc, "{ctx}");
    }
}

#[test]
fn rev2_peer_to_peer_with_private_data() {
    let l = listen(&[
        "--rev",
        "2",
        "--p2p",
        "--markers",
        "--private-data",
        "hello-initiator",
    ]);
    let (c, c_ok, err) = connect(
        &l.addr,
        &[
            "--count",
            "50",
            "--size",
            "4000",
            "--rev",
            "2",
            "--p2p",
            "--private-data",
            "hi",
        ],
    );
    let (s, s_ok) = finish(l);
    assert!(c_ok && s_ok, "{c} {s} {err}");
    assert_eq!(c["ulpdu_digest"], s["ulpdu_digest"]);
    assert_eq!(c["rev"], 2);
    assert_eq!(s["rev"], 2);
    assert_eq!(s["private_data"], "hi");
    assert_eq!(c["private_data"], "hello-initiator");
    assert!(c["rtr"].is_string(), "{c}");
    assert_eq!(s["ulpdus"], 50, "the RTR is not counted as a ULPDU");
}

#[test]
fn bad_arguments_are_refused() {
    let out = Command::new(BIN)
        .args([
            "connect",
            "--to",
            "127.0.0.1:9",
            "--count",
            "1",
            "--size",
            "70000",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("64768"));
    let out = Command::new(BIN)
        .args(["listen", "--bind", "127.0.0.1:0", "--p2p", "--rev", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rev 2"));
}

#[test]
fn connect_to_nothing_fails_fast() {
    // Port 9 (discard) is closed on loopback here: connection refused, exit non-zero.
    let out = Command::new(BIN)
        .args([
            "connect",
            "--to",
            "127.0.0.1:9",
            "--count",
            "1",
            "--size",
            "20",
            "--timeout",
            "2",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let _ = Duration::from_secs(0);
}
