//! `mpa-peer connect` → `mpa-peer listen` over loopback: every combination of markers (either
//! side) and CRC gives identical digests and no error.

mod common;

use common::{connect, finish, flag, listen, BIN};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;

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
    // A usage error: exit 2.
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("64768"));
    let out = Command::new(BIN)
        .args(["listen", "--bind", "127.0.0.1:0", "--p2p", "--rev", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rev 2"));
}

#[test]
fn connect_to_nothing_fails_fast() {
    // Port 9 (discard) is closed on loopback here: connection refused, a runtime error: exit 1.
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
    assert_eq!(out.status.code(), Some(1));
    let _ = Duration::from_secs(0);
}

#[test]
fn writes_and_sends_against_a_region_advertisement() {
    for (op, markers) in [
        ("write", false),
        ("write", true),
        ("send", false),
        ("send", true),
    ] {
        // STag 42, a 100 000-octet region (101 slots of 986 octets: the writes wrap), receive
        // buffers of 1000 octets; ordinary private data after the advertisement.
        let mut largs = vec![
            "--advertise",
            "0x2a:100000:1000",
            "--private-data",
            "after-ad",
        ];
        largs.extend(flag(markers, "--markers"));
        let l = listen(&largs);
        let mut cargs = vec!["--op", op, "--count", "300", "--size", "1000"];
        cargs.extend(flag(markers, "--markers"));
        let (c, c_ok, c_err) = connect(&l.addr, &cargs);
        let (s, s_ok) = finish(l);
        let ctx = format!("{op} markers {markers}: client {c} server {s} stderr {c_err}");
        assert!(c_ok && s_ok, "{ctx}");
        assert_eq!(c["error"], Value::Null, "{ctx}");
        assert_eq!(s["error"], Value::Null, "{ctx}");
        assert_eq!(c["ulpdu_digest"], s["ulpdu_digest"], "{ctx}");
        assert_eq!(c["ulpdus"], 300, "{ctx}");
        assert_eq!(s["ulpdus"], 300, "{ctx}");
        assert_eq!(c["ulpdu_bytes"], 300_000, "{ctx}");
        assert_eq!(c["op"], op, "{ctx}");
        // The listener names what it received from the DDP headers.
        assert_eq!(s["op"], op, "{ctx}");
        for v in [&c, &s] {
            assert_eq!(v["region"]["stag"], 42, "{ctx}");
            assert_eq!(v["region"]["len"], 100_000, "{ctx}");
            assert_eq!(v["region"]["base_to"], 0, "{ctx}");
            assert_eq!(v["region"]["recv_buf_size"], 1000, "{ctx}");
        }
        assert_eq!(c["private_data"], "after-ad", "{ctx}");
        assert_eq!(c["markers_tx"], markers, "{ctx}");
    }
}

#[test]
fn without_an_advertisement_writes_are_unchanged_and_sends_still_go() {
    for op in ["write", "send"] {
        let l = listen(&[]);
        let (c, c_ok, c_err) = connect(&l.addr, &["--op", op, "--count", "50", "--size", "64"]);
        let (s, s_ok) = finish(l);
        let ctx = format!("{op}: client {c} server {s} stderr {c_err}");
        assert!(c_ok && s_ok, "{ctx}");
        assert_eq!(c["ulpdu_digest"], s["ulpdu_digest"], "{ctx}");
        assert_eq!(c["op"], op, "{ctx}");
        assert_eq!(s["op"], op, "{ctx}");
        assert!(c.get("region").is_none(), "{ctx}");
        assert!(s.get("region").is_none(), "{ctx}");
    }
    // The default is write.
    let l = listen(&[]);
    let (c, c_ok, _) = connect(&l.addr, &["--count", "3", "--size", "14"]);
    let (s, _) = finish(l);
    assert!(c_ok);
    assert_eq!(c["op"], "write");
    assert_eq!(s["op"], "write");
}

/// Runs `connect` against a listener advertising `ad`; the connect must fail with `needle` in
/// both its stderr and its JSON line's error, after a startup that succeeded.
fn refused(ad: &str, cargs: &[&str], needle: &str) {
    let l = listen(&["--advertise", ad]);
    let mut args = vec!["--count", "5"];
    args.extend_from_slice(cargs);
    let (c, c_ok, c_err) = connect(&l.addr, &args);
    let (s, s_ok) = finish(l);
    let ctx = format!("{ad} {cargs:?}: client {c} server {s} stderr {c_err}");
    assert!(!c_ok, "{ctx}");
    assert!(c_err.contains(needle), "{ctx}");
    assert!(c["error"].as_str().unwrap_or("").contains(needle), "{ctx}");
    assert_eq!(c["ulpdus"], 0, "{ctx}");
    assert!(c["region"].is_object(), "{ctx}");
    // Nothing was sent; the Responder saw an orderly close.
    assert!(s_ok, "{ctx}");
    assert_eq!(s["ulpdus"], 0, "{ctx}");
}

#[test]
fn writes_that_do_not_fit_the_region_are_refused() {
    // Payload 186 octets, region 100.
    refused("7:100", &["--op", "write", "--size", "200"], "does not fit");
}

#[test]
fn operations_the_advertisement_rules_out_are_refused() {
    refused(
        "7:100",
        &["--op", "send", "--size", "50"],
        "does not accept Sends",
    );
    // Payload 32 octets, buffers of 31.
    refused(
        "7:100:31",
        &["--op", "send", "--size", "50"],
        "receive buffer size",
    );
    refused("7:100:31", &["--op", "write", "--size", "10"], "tagged");
}

#[test]
fn send_smaller_than_the_untagged_header_is_refused() {
    let out = Command::new(BIN)
        .args([
            "connect",
            "--to",
            "127.0.0.1:9",
            "--op",
            "send",
            "--count",
            "1",
            "--size",
            "10",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--op send needs --size of at least 18"),
        "{err}"
    );
    let out = Command::new(BIN)
        .args(["listen", "--bind", "127.0.0.1:0", "--advertise", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("STAG:LEN"));
}

/// `listen --accept-timeout 1` with no sender: the listener gives up (non-zero exit, the
/// reason on stderr) instead of waiting in accept() for ever. The wait for its exit is
/// bounded too (30 s, far above the 1 s asked for).
#[test]
fn listen_gives_up_after_accept_timeout() {
    let mut child = Command::new(BIN)
        .args(["listen", "--bind", "127.0.0.1:0", "--accept-timeout", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn listener");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("listener still waiting 30 s after --accept-timeout 1");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "exit status {status}");
    assert!(
        err.contains("no connection within --accept-timeout 1 s"),
        "stderr: {err}"
    );
}

/// `connect --congestion reno` sets the connection's congestion control and the report says
/// so (reno is built into every Linux kernel); an unknown name fails before any data.
#[test]
fn connect_sets_and_reports_the_congestion_control() {
    let l = listen(&[]);
    let (c, ok, err) = connect(
        &l.addr,
        &["--count", "10", "--size", "100", "--congestion", "reno"],
    );
    let (s, s_ok) = finish(l);
    assert!(ok && s_ok, "client {c} server {s} stderr {err}");
    assert_eq!(c["congestion"], "reno", "{c}");
    assert_eq!(s["ulpdus"], 10, "{s}");
    let l = listen(&[]);
    let out = Command::new(BIN)
        .args([
            "connect",
            "--to",
            &l.addr,
            "--timeout",
            "20",
            "--count",
            "1",
        ])
        .args(["--size", "100", "--congestion", "no-such-algorithm"])
        .output()
        .expect("run connect");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--congestion no-such-algorithm"),
        "stderr: {err}"
    );
}
