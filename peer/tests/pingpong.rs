//! Write ping-pong over loopback: `mpa-peer listen --advertise … --echo` writes every RDMA
//! Write back into the region the Initiator advertised, `mpa-peer connect --op pingpong`
//! times the round trips. No timing value is asserted, only that the percentiles are there
//! and ordered; the echo's placement and its failures are checked from a hand-built
//! Initiator too.

mod common;

use common::{connect, finish, flag, listen, BIN};
use mpa::endpoint::{EndpointConfig, EndpointError, MpaStream};
use mpa::wire::ddp::{DdpRepr, RdmapOpcode, TAGGED_HEADER_LEN};
use mpa_ctl_proto::region_ad::RegionAd;
use serde_json::{json, Value};
use std::net::TcpStream;
use std::time::Duration;

/// The percentiles of RTT/2 are all there, above 0 and in order.
fn assert_percentiles(rtt: &Value, ctx: &str) {
    let keys = ["min", "p50", "p90", "p99", "p999", "max"];
    let v: Vec<u64> = keys
        .iter()
        .map(|k| {
            rtt[k]
                .as_u64()
                .unwrap_or_else(|| panic!("{k} missing: {ctx}"))
        })
        .collect();
    assert!(v[0] > 0, "{ctx}");
    assert!(v.windows(2).all(|w| w[0] <= w[1]), "{v:?}: {ctx}");
    let mean = rtt["mean"].as_f64().unwrap();
    assert!(mean >= v[0] as f64 && mean <= v[5] as f64, "{ctx}");
}

#[test]
fn pingpong_round_trips_with_and_without_markers() {
    let samples = std::env::temp_dir().join(format!("mpa-peer-rtt-{}.txt", std::process::id()));
    let samples_s = samples.to_str().unwrap().to_string();
    // (size, markers, extra arguments on both sides)
    for (size, markers, extra) in [
        (4096usize, false, &[][..]),
        (4096, true, &[][..]),
        // The largest ULPDU: its echo is cut at MULPDU into several FPDUs.
        (64_768, true, &[][..]),
        // Zero-length Writes; revision 2 with an RTR first.
        (14, true, &["--rev", "2", "--p2p"][..]),
    ] {
        let mut largs = vec!["--advertise", "0x2a:65536", "--base-to", "0x7000", "--echo"];
        largs.extend(flag(markers, "--markers"));
        largs.extend_from_slice(extra);
        let l = listen(&largs);
        let size_s = size.to_string();
        let mut cargs = vec![
            "--op",
            "pingpong",
            "--size",
            &size_s,
            "--count",
            "200",
            "--warmup",
            "10",
            "--private-data",
            "after-the-ad",
            "--rtt-samples",
            &samples_s,
        ];
        cargs.extend(flag(markers, "--markers"));
        cargs.extend_from_slice(extra);
        let (c, c_ok, c_err) = connect(&l.addr, &cargs);
        let (s, s_ok) = finish(l);
        let ctx = format!("size {size} markers {markers} {extra:?}: client {c} server {s} {c_err}");
        assert!(c_ok && s_ok, "{ctx}");
        assert_eq!(
            (&c["error"], &s["error"]),
            (&Value::Null, &Value::Null),
            "{ctx}"
        );
        assert_eq!(c["op"], "pingpong", "{ctx}");
        assert_eq!(c["iterations"], 200, "{ctx}");
        assert_eq!(c["warmup"], 10, "{ctx}");
        assert_percentiles(&c["rtt_half_ns"], &ctx);
        // Every ping (warm-up ones too) placed and echoed once.
        assert_eq!(s["echoes"], 210, "{ctx}");
        assert_eq!(s["writes"], 210, "{ctx}");
        assert_eq!(s["write_octets"], 210 * (size - TAGGED_HEADER_LEN), "{ctx}");
        assert_eq!(
            (&c["ulpdus"], &s["ulpdus"]),
            (&json!(210), &json!(210)),
            "{ctx}"
        );
        assert_eq!(c["ulpdu_digest"], s["ulpdu_digest"], "{ctx}");
        // The Initiator's advertisement, and its private data after it.
        let want = json!({"stag": 0x5a5a_0002u32, "len": size - TAGGED_HEADER_LEN,
                          "base_to": 0, "recv_buf_size": 0});
        assert_eq!(s["peer_region"], want, "{ctx}");
        assert_eq!(s["private_data"], "after-the-ad", "{ctx}");
        assert_eq!(s["markers_tx"], markers, "{ctx}");
        let text = std::fs::read_to_string(&samples).unwrap();
        let rtts: Vec<u64> = text.lines().map(|l| l.parse().unwrap()).collect();
        assert_eq!(rtts.len(), 200, "{ctx}");
        assert!(rtts.iter().all(|&r| r > 0), "{ctx}");
    }
    let _ = std::fs::remove_file(&samples);
}

#[test]
fn an_initiator_without_advertisement_is_rejected() {
    let l = listen(&["--advertise", "0x2a:65536", "--echo"]);
    let (c, c_ok, err) = connect(&l.addr, &["--op", "write", "--size", "100", "--count", "5"]);
    let (s, s_ok) = finish(l);
    let ctx = format!("client {c} server {s} {err}");
    assert!(!c_ok && !s_ok, "{ctx}");
    for r in [&c, &s] {
        let e = r["error"].as_str().unwrap();
        assert!(e.contains("carries no region advertisement"), "{ctx}");
    }
    assert!(
        c["error"]
            .as_str()
            .unwrap()
            .contains("rejected by the peer"),
        "{ctx}"
    );
    assert_eq!(s["ulpdus"], 0, "{ctx}");
}

#[test]
fn a_corrupted_echo_is_detected() {
    // Echo 5 (a warm-up ping) comes back with its first octet flipped.
    let l = listen(&[
        "--advertise",
        "0x2a:65536",
        "--echo",
        "--echo-corrupt-every",
        "5",
    ]);
    let cargs = [
        "--op", "pingpong", "--size", "1000", "--count", "200", "--warmup", "10",
    ];
    let (c, c_ok, err) = connect(&l.addr, &cargs);
    let (s, _) = finish(l);
    let ctx = format!("client {c} server {s} {err}");
    assert!(!c_ok, "{ctx}");
    let e = c["error"].as_str().unwrap();
    assert!(e.contains("echo of ping 4: 1 octets differ"), "{ctx}");
    assert_eq!(
        (&c["iterations"], &c["warmup"]),
        (&json!(0), &json!(4)),
        "{ctx}"
    );
    assert!(c.get("rtt_half_ns").is_none(), "{ctx}");
    assert_eq!(s["echoes"], 5, "{ctx}");
}

fn write_ulpdu(stag: u32, to: u64, last: bool, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; TAGGED_HEADER_LEN];
    DdpRepr::Tagged {
        last,
        opcode: RdmapOpcode::RdmaWrite,
        stag,
        to,
    }
    .emit(&mut v, 1)
    .unwrap();
    v.extend_from_slice(payload);
    v
}

#[test]
fn a_message_is_echoed_whole_and_an_echo_outside_the_region_is_terminated() {
    // Ours: STag 0x2a, TOs 0x1000..0x1000 + 4096; the Initiator's: STag 0x77, TOs 0x500..0x564.
    let l = listen(&["--advertise", "0x2a:4096", "--base-to", "0x1000", "--echo"]);
    let theirs = RegionAd {
        writes: true,
        sends: false,
        stag: 0x77,
        len: 100,
        base_to: 0x500,
        recv_buf_size: 0,
    };
    let cfg = EndpointConfig {
        private_data: theirs.emit().to_vec(),
        ..EndpointConfig::default()
    };
    let sock = TcpStream::connect(&l.addr).unwrap();
    let mut s = MpaStream::connect(sock, &cfg).unwrap();
    let timeout = Some(Duration::from_secs(20));
    let data: Vec<u8> = (0..50u8).collect();
    // One message in two DDP segments: echoed once, when L arrives.
    s.send(&write_ulpdu(0x2a, 0x1000 + 10, false, &data[..30]))
        .unwrap();
    s.flush().unwrap();
    s.send(&write_ulpdu(0x2a, 0x1000 + 40, true, &data[30..]))
        .unwrap();
    s.flush().unwrap();
    let mut got = Vec::new();
    while got.is_empty() {
        s.recv_with(timeout, |u| got.push(u.to_vec())).unwrap();
    }
    assert_eq!(got, [write_ulpdu(0x77, 0x500 + 10, true, &data)]);
    // At our offset 90, 20 octets do not fit the Initiator's 100.
    let bad = write_ulpdu(0x2a, 0x1000 + 90, true, &data[..20]);
    s.send(&bad).unwrap();
    s.flush().unwrap();
    let e = loop {
        match s.recv_with(timeout, |u| panic!("{:?}", u.to_vec())) {
            Ok(Some(_)) => {}
            Ok(None) => panic!("closed without a Terminate"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(
            e,
            EndpointError::Terminated {
                layer: 0,
                error_type: 2,
                error_code: 0xff
            }
        ),
        "{e}"
    );
    drop(s);
    let (r, ok) = finish(l);
    assert!(!ok, "{r}");
    assert_eq!((&r["writes"], &r["echoes"]), (&json!(2), &json!(1)), "{r}");
    assert_eq!(
        r["terminate_sent"],
        json!({"layer": 0, "error_type": 2, "error_code": 255}),
        "{r}"
    );
    let e = r["error"].as_str().unwrap();
    assert!(e.contains("outside the Initiator's region"), "{r}");
}

#[test]
fn pingpong_arguments_are_checked() {
    for (args, needle) in [
        (
            &["--op", "write", "--warmup", "5"][..],
            "are for --op pingpong",
        ),
        (
            &["--op", "pingpong", "--rate", "10"][..],
            "not for --op pingpong",
        ),
        (
            &["--op", "pingpong", "--size", "13"][..],
            "at least 14 octets",
        ),
    ] {
        let out = std::process::Command::new(BIN)
            .args(["connect", "--to", "127.0.0.1:9", "--count", "1"])
            .args(if args.contains(&"--size") {
                &[][..]
            } else {
                &["--size", "100"][..]
            })
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(needle),
            "{args:?}: {err}"
        );
    }
    let out = std::process::Command::new(BIN)
        .args(["listen", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("--echo") && !help.contains("corrupt"),
        "{help}"
    );
}
