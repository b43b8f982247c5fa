//! `mpa-peer listen --advertise` as a Data Sink and Data Source over loopback: RDMA Writes
//! placed into its region (checked against a region the test computes), RDMA Reads answered
//! (`connect --op read`), and every violation answered with the Terminate RFC 5041 §7.2 /
//! RFC 5040 Figure 9 assign, seen both in the reports and, from a hand-built Initiator, on
//! the wire (control field, HdrCt, the offending headers carried back).

mod common;

use common::{connect, finish, flag, listen, BIN};
use mpa::crc::crc32c;
use mpa::encoder::FpduEncoder;
use mpa::endpoint::{EndpointConfig, MpaStream};
use mpa::wire::ddp::{DdpRepr, RdmapOpcode, ReadRequestRepr, TAGGED_HEADER_LEN};
use mpa_ctl_proto::pattern::{pattern, PatternTable};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

/// The region `connect --op write --size (payload + 14) --count count` leaves in a zeroed
/// region of `len` octets: payload `n` in slot `n mod slots` (region_ad::write_to).
fn written_region(len: usize, payload: usize, count: u64) -> Vec<u8> {
    let mut r = vec![0u8; len];
    let slots = (len / payload) as u64;
    let t = PatternTable::new(payload);
    for n in 0..count {
        let at = (n % slots) as usize * payload;
        r[at..at + payload].copy_from_slice(t.payload(n, payload));
    }
    r
}

fn terminate(layer: u8, error_type: u8, error_code: u8) -> Value {
    json!({"layer": layer, "error_type": error_type, "error_code": error_code})
}

#[test]
fn writes_land_in_the_region_at_base_to() {
    // (payload, count, markers): 198 octets is ≡ 198 (mod 251), so payload n in slot n is the
    // region pattern there (no wrap: 330 slots); 986 octets wrap 101 slots and are not.
    for (payload, count, markers, pattern_ok) in [
        (198usize, 300u64, false, true),
        (198, 300, true, true),
        (986, 300, false, false),
    ] {
        let len = 65_536;
        let mut largs = vec!["--advertise", "0x2a:65536", "--base-to", "0x10000"];
        largs.extend(flag(markers, "--markers"));
        let l = listen(&largs);
        let size = (payload + TAGGED_HEADER_LEN).to_string();
        let count_s = count.to_string();
        let mut cargs = vec!["--op", "write", "--size", &size, "--count", &count_s];
        cargs.extend(flag(markers, "--markers"));
        let (c, c_ok, c_err) = connect(&l.addr, &cargs);
        let (s, s_ok) = finish(l);
        let ctx = format!("payload {payload} markers {markers}: client {c} server {s} {c_err}");
        assert!(c_ok && s_ok, "{ctx}");
        assert_eq!(s["error"], Value::Null, "{ctx}");
        assert_eq!(c["region"]["base_to"], 0x10000, "{ctx}");
        assert_eq!(s["writes"], count, "{ctx}");
        assert_eq!(s["write_octets"], count * payload as u64, "{ctx}");
        assert_eq!(
            (&s["sends"], &s["send_octets"]),
            (&json!(0), &json!(0)),
            "{ctx}"
        );
        assert_eq!(s["region_pattern_ok"], pattern_ok, "{ctx}");
        let want = format!("{:08x}", crc32c(&written_region(len, payload, count)));
        assert_eq!(s["region_digest"], want, "{ctx}");
        assert_eq!(c["ulpdu_digest"], s["ulpdu_digest"], "{ctx}");
        assert!(s.get("terminate_sent").is_none(), "{ctx}");
    }
}

#[test]
fn sends_are_counted_beside_the_region() {
    let l = listen(&["--advertise", "7:4096:1000"]);
    let (c, c_ok, err) = connect(&l.addr, &["--op", "send", "--size", "500", "--count", "9"]);
    let (s, s_ok) = finish(l);
    assert!(c_ok && s_ok, "{c} {s} {err}");
    assert_eq!(
        (&s["sends"], &s["send_octets"]),
        (&json!(9), &json!(9 * 482))
    );
    assert_eq!((&s["writes"], &s["write_octets"]), (&json!(0), &json!(0)));
    assert_eq!(s["region_digest"], format!("{:08x}", crc32c(&[0u8; 4096])));
    assert_eq!(s["region_pattern_ok"], true);
}

#[test]
fn reads_are_served_from_a_pattern_filled_region() {
    for (size, count, extra) in [
        // Responses of several FPDUs each, the reads wrapping through the region.
        (10_000usize, 50u64, &[][..]),
        (1, 200, &["--markers"][..]),
        // Revision 2 negotiates IRD/ORD; the RTR is consumed by both streams.
        (65_536, 20, &["--rev", "2", "--p2p", "--markers"][..]),
    ] {
        let mut largs = vec![
            "--advertise",
            "0x33:100000",
            "--base-to",
            "5",
            "--remote-read",
            "--fill-pattern",
        ];
        largs.extend_from_slice(extra);
        let l = listen(&largs);
        let size_s = size.to_string();
        let count_s = count.to_string();
        let mut cargs = vec!["--op", "read", "--size", &size_s, "--count", &count_s];
        cargs.extend_from_slice(extra);
        let (c, c_ok, err) = connect(&l.addr, &cargs);
        let (s, s_ok) = finish(l);
        let ctx = format!("size {size} {extra:?}: client {c} server {s} {err}");
        assert!(c_ok && s_ok, "{ctx}");
        assert_eq!(c["error"], Value::Null, "{ctx}");
        assert_eq!(c["op"], "read", "{ctx}");
        assert_eq!(c["read_responses"], count, "{ctx}");
        assert_eq!(c["read_octets"], count * size as u64, "{ctx}");
        assert_eq!(c["read_pattern_ok"], true, "{ctx}");
        assert!(c["goodput_gbps"].as_f64().unwrap() > 0.0, "{ctx}");
        // The Read Requests are all the Initiator sent, and all the listener received.
        assert_eq!(c["ulpdus"], count, "{ctx}");
        assert_eq!(s["ulpdus"], count, "{ctx}");
        assert_eq!(c["ulpdu_digest"], s["ulpdu_digest"], "{ctx}");
        assert_eq!(s["reads_served"], count, "{ctx}");
        assert_eq!(s["op"], "read", "{ctx}");
        assert_eq!(s["writes"], 0, "{ctx}");
        let region: Vec<u8> = (0..100_000).map(|o| pattern(0, o)).collect();
        assert_eq!(
            s["region_digest"],
            format!("{:08x}", crc32c(&region)),
            "{ctx}"
        );
    }
}

#[test]
fn reads_without_remote_read_get_the_access_terminate() {
    let l = listen(&["--advertise", "0x33:100000", "--fill-pattern"]);
    let (c, c_ok, err) = connect(&l.addr, &["--op", "read", "--size", "100", "--count", "5"]);
    let (s, s_ok) = finish(l);
    let ctx = format!("client {c} server {s} {err}");
    assert!(!c_ok && !s_ok, "{ctx}");
    assert_eq!(c["terminate_received"], terminate(0, 1, 2), "{ctx}");
    assert_eq!(s["terminate_sent"], terminate(0, 1, 2), "{ctx}");
    assert_eq!(c["read_responses"], 0, "{ctx}");
    assert_eq!(s["reads_served"], 0, "{ctx}");
    assert!(
        s["error"]
            .as_str()
            .unwrap()
            .contains("does not allow remote reads"),
        "{ctx}"
    );
}

#[test]
fn reading_needs_an_advertised_region_that_holds_the_read() {
    for (largs, size, needle) in [
        (&[][..], "10", "no region advertisement"),
        (
            &["--advertise", "1:100"][..],
            "101",
            "exceeds the advertised region",
        ),
    ] {
        let l = listen(largs);
        let (c, c_ok, err) = connect(&l.addr, &["--op", "read", "--size", size, "--count", "1"]);
        let (s, s_ok) = finish(l);
        assert!(!c_ok && s_ok, "{c} {s} {err}");
        assert!(c["error"].as_str().unwrap().contains(needle), "{c}");
        assert_eq!(s["ulpdus"], 0, "{s}");
    }
}

#[test]
fn regions_above_1_gib_are_refused() {
    let out = Command::new(BIN)
        .args([
            "listen",
            "--bind",
            "127.0.0.1:0",
            "--advertise",
            "1:0x40000001",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1 GiB"), "{err}");
    let out = Command::new(BIN)
        .args(["listen", "--bind", "127.0.0.1:0", "--remote-read"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "--remote-read needs --advertise");
}

/// A hand-built Initiator (revision 1, CRC, no markers either way): sends `ulpdus` in one
/// write, then reads everything the listener sends until it closes. Returns the ULPDUs it
/// received and the listener's report.
fn hand_built(largs: &[&str], ulpdus: &[Vec<u8>]) -> (Vec<Vec<u8>>, Value, bool) {
    let l = listen(largs);
    let sock = TcpStream::connect(&l.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let s = MpaStream::connect(sock, &EndpointConfig::default()).unwrap();
    assert!(!s.negotiated().markers_rx && s.negotiated().crc);
    let mut sock = s.into_inner().unwrap();
    let mut wire = Vec::new();
    let mut enc = FpduEncoder::new(false);
    for u in ulpdus {
        enc.encode(u, &mut wire).unwrap();
    }
    // One write: the listener reads these ULPDUs in one batch.
    sock.write_all(&wire).unwrap();
    let mut got = Vec::new();
    sock.read_to_end(&mut got).unwrap();
    drop(sock);
    // FPDUs without markers: ULPDU_Length, ULPDU, PAD to 4, CRC.
    let mut out = Vec::new();
    let mut at = 0;
    while at < got.len() {
        let len = usize::from(u16::from_be_bytes([got[at], got[at + 1]]));
        out.push(got[at + 2..at + 2 + len].to_vec());
        at += (2 + len).div_ceil(4) * 4 + 4;
    }
    assert_eq!(at, got.len(), "whole FPDUs");
    let (report, ok) = finish(l);
    (out, report, ok)
}

fn write_ulpdu(stag: u32, to: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; TAGGED_HEADER_LEN];
    DdpRepr::Tagged {
        last: true,
        opcode: RdmapOpcode::RdmaWrite,
        stag,
        to,
    }
    .emit(&mut v, 1)
    .unwrap();
    v.resize(TAGGED_HEADER_LEN + n, 0xab);
    v
}

/// An RDMA Read Request (QN 1, MSN `msn`) for `size` octets of `src_stag` at `src_to`.
fn read_request(msn: u32, size: u32, src_stag: u32, src_to: u64) -> Vec<u8> {
    ReadRequestRepr {
        sink_stag: 0x5a5a_0001,
        sink_to: u64::from(msn),
        size,
        src_stag,
        src_to,
    }
    .ulpdu(msn, 1)
    .to_vec()
}

/// Checks that `t` is a Terminate (untagged, QN 2, L) with control (layer, type, code),
/// HdrCt `hdrct`, DDP Segment Length `seg_len`, and `headers` carried back.
fn assert_terminate(
    t: &[u8],
    (layer, ty, code): (u8, u8, u8),
    hdrct: u8,
    seg_len: usize,
    headers: &[u8],
) {
    let (h, off) = DdpRepr::parse(t, 1).unwrap();
    assert!(
        matches!(
            h,
            DdpRepr::Untagged {
                opcode: RdmapOpcode::Terminate,
                qn: 2,
                last: true,
                ..
            }
        ),
        "{h:?}"
    );
    let c = &t[off..];
    assert_eq!(
        (c[0] >> 4, c[0] & 0xf, c[1], c[2]),
        (layer, ty, code, hdrct)
    );
    assert_eq!(u16::from_be_bytes([c[4], c[5]]), seg_len as u16);
    assert_eq!(&c[6..], headers);
}

#[test]
fn writes_outside_the_region_get_the_ddp_terminates() {
    // Region STag 0x2a, TOs 0x1000..0x1000 + 4096.
    let largs = ["--advertise", "0x2a:4096", "--base-to", "0x1000"];
    for (u, code) in [
        (write_ulpdu(0x2b, 0x1000, 10), 0x00),
        (write_ulpdu(0x2a, 0x1000 + 4090, 10), 0x01),
        (write_ulpdu(0x2a, 0xfff, 10), 0x01),
        (write_ulpdu(0x2a, u64::MAX - 4, 10), 0x03),
    ] {
        // A good write first: placed before the bad one ends the connection.
        let good = write_ulpdu(0x2a, 0x1000, 100);
        let (got, s, s_ok) = hand_built(&largs, &[good, u.clone()]);
        let ctx = format!("code {code}: {s}");
        assert!(!s_ok, "{ctx}");
        assert_eq!(s["terminate_sent"], terminate(1, 1, code), "{ctx}");
        assert_eq!(
            (&s["writes"], &s["write_octets"]),
            (&json!(1), &json!(100)),
            "{ctx}"
        );
        let mut region = vec![0u8; 4096];
        region[..100].fill(0xab);
        assert_eq!(
            s["region_digest"],
            format!("{:08x}", crc32c(&region)),
            "{ctx}"
        );
        assert_eq!(got.len(), 1, "{ctx}");
        // RFC 5040 Figure 10: DDP errors carry the segment length and the DDP header (M, D).
        assert_terminate(
            &got[0],
            (1, 1, code),
            0xc0,
            u.len(),
            &u[..TAGGED_HEADER_LEN],
        );
    }
}

#[test]
fn bad_read_requests_get_the_rdmap_terminates() {
    // Region STag 0x33, TOs 5..5 + 1000, remote reads allowed.
    let largs = [
        "--advertise",
        "0x33:1000",
        "--base-to",
        "5",
        "--remote-read",
    ];
    for (rr, code) in [
        (read_request(1, 10, 0x34, 5), 0x00),
        (read_request(1, 10, 0x33, 1000), 0x01),
        (read_request(1, 10, 0x33, 4), 0x01),
        (read_request(1, 10, 0x33, u64::MAX - 5), 0x04),
    ] {
        let (got, s, s_ok) = hand_built(&largs, std::slice::from_ref(&rr));
        let ctx = format!("code {code}: {s}");
        assert!(!s_ok, "{ctx}");
        assert_eq!(s["terminate_sent"], terminate(0, 1, code), "{ctx}");
        assert_eq!(s["reads_served"], 0, "{ctx}");
        assert_eq!(got.len(), 1, "{ctx}");
        // Remote Protection Errors carry the DDP header and the Read Request header (M, D, R).
        assert_terminate(&got[0], (0, 1, code), 0xe0, rr.len(), &rr);
    }
}

#[test]
fn read_requests_beyond_the_ird_get_a_terminate_after_the_answers() {
    // Revision 1: IRD 16. Seventeen requests arrive in one batch; the first sixteen are
    // answered in order, the seventeenth is refused with 0/2/7.
    let largs = [
        "--advertise",
        "0x33:1000",
        "--remote-read",
        "--fill-pattern",
    ];
    let rrs: Vec<Vec<u8>> = (1..=17)
        .map(|m| read_request(m, 8, 0x33, 8 * u64::from(m)))
        .collect();
    let (got, s, s_ok) = hand_built(&largs, &rrs);
    let ctx = format!("{s}");
    assert!(!s_ok, "{ctx}");
    assert_eq!(s["reads_served"], 16, "{ctx}");
    assert_eq!(s["terminate_sent"], terminate(0, 2, 7), "{ctx}");
    assert_eq!(got.len(), 17, "{ctx}");
    for (m, r) in (1..=16u64).zip(&got) {
        let (h, off) = DdpRepr::parse(r, 1).unwrap();
        assert_eq!(
            h,
            DdpRepr::Tagged {
                last: true,
                opcode: RdmapOpcode::RdmaReadResponse,
                stag: 0x5a5a_0001,
                to: m,
            }
        );
        let want: Vec<u8> = (0..8).map(|i| pattern(0, 8 * m as usize + i)).collect();
        assert_eq!(&r[off..], &want[..], "read {m}");
    }
    // A Remote Operation Error carries the DDP header, not the RDMA header (Figure 10).
    let last = &rrs[16];
    assert_terminate(&got[16], (0, 2, 7), 0xc0, last.len(), &last[..18]);
}
