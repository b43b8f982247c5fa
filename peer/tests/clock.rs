//! `mpa-peer clock`, the clock responder, as a process on loopback: a probe is answered with
//! its nonce and number and two times of this host's CLOCK_MONOTONIC between our send and
//! our receipt; everything else is dropped unanswered and counted; it ends by itself when
//! its client is idle, however often strangers probe it, with its report.

mod common;

use common::BIN;
use mpa_ctl_proto::clock_probe::ClockMessage;
use serde_json::Value;
use std::io::{BufRead, BufReader, ErrorKind, Read};
use std::net::UdpSocket;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// The responder with `args` after `clock --listen 127.0.0.1:0`, and the address it
/// listens on.
fn responder(args: &[&str]) -> (Child, String) {
    let mut child = Command::new(BIN)
        .args(["clock", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("mpa-peer: clock: listening on ")
        .and_then(|l| l.strip_suffix(" (UDP)"))
        .expect(&line)
        .to_string();
    (child, addr)
}

/// A socket connected to `addr`, its reads bounded.
fn prober(addr: &str) -> UdpSocket {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    sock
}

/// The JSON line of a responder that has ended.
fn report(child: &mut Child) -> Value {
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    serde_json::from_str(out.trim()).unwrap()
}

#[test]
fn probes_are_answered_and_nothing_else_then_it_ends_when_idle() {
    let (mut child, addr) = responder(&["--idle-timeout", "1"]);
    let sock = prober(&addr);
    // Hostile first: garbage, a message one octet short, an answer (never answered back).
    sock.send(b"not a clock probe").unwrap();
    let probe = ClockMessage::Probe { nonce: 5, seq: 9 };
    sock.send(&probe.emit()[..39]).unwrap();
    let answer = probe.answer(1, 2).unwrap();
    sock.send(&answer.emit()).unwrap();
    sock.send(&ClockMessage::Keepalive { nonce: 5 }.emit())
        .unwrap();
    let sent = monotonic_ns();
    sock.send(&probe.emit()).unwrap();
    let mut buf = [0u8; 64];
    let n = sock.recv(&mut buf).unwrap();
    let received = monotonic_ns();
    let Ok(ClockMessage::Answer {
        nonce: 5,
        seq: 9,
        received: peer_received,
        answered: peer_answered,
    }) = ClockMessage::parse(&buf[..n])
    else {
        panic!("not the answer: {:?}", &buf[..n]);
    };
    // One host, one clock: the responder's times lie between ours.
    assert!(
        sent <= peer_received && peer_received <= peer_answered && peer_answered <= received,
        "{sent} {peer_received} {peer_answered} {received}"
    );
    // Idle for a second, it ends by itself with its counts.
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let report = report(&mut child);
    assert_eq!(report["listen"], addr.as_str());
    assert_eq!(report["answered"], 1, "{report}");
    assert_eq!(report["keepalives"], 1, "{report}");
    assert_eq!(report["strangers"], 0, "{report}");
    assert_eq!(report["dropped"], 3, "{report}");
    assert_eq!(report["client"], sock.local_addr().unwrap().to_string());
    assert_eq!(report["ended"], "idle", "{report}");
    // Nothing else came back: what it sent is in our socket by now.
    sock.set_nonblocking(true).unwrap();
    let e = sock.recv(&mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e}");
}

#[test]
fn a_zero_timeout_is_a_usage_error() {
    for opt in ["--idle-timeout", "--lifetime"] {
        let o = Command::new(BIN)
            .args(["clock", "--listen", "127.0.0.1:0", opt, "0"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{opt}");
    }
}

/// Only the client keeps the responder alive: a stranger probing every 200 ms is answered,
/// counted, and the responder still ends its idle timeout after the client's last probe.
#[test]
fn a_stranger_probing_does_not_keep_it_alive() {
    let (mut child, addr) = responder(&["--idle-timeout", "1", "--lifetime", "30"]);
    let client = prober(&addr);
    let stranger = prober(&addr);
    let mut buf = [0u8; 64];
    client
        .send(&ClockMessage::Probe { nonce: 1, seq: 1 }.emit())
        .unwrap();
    client.recv(&mut buf).unwrap();
    let last = Instant::now();
    let mut answers = 0;
    let ended = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        // Well past the idle timeout: the stranger kept it alive.
        assert!(
            last.elapsed() < Duration::from_secs(5),
            "still running {:?} after the client's last probe",
            last.elapsed()
        );
        let probe = ClockMessage::Probe {
            nonce: 2,
            seq: answers + 1,
        };
        // Once the responder has ended, the probe may be refused.
        if stranger.send(&probe.emit()).is_ok() {
            stranger
                .set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            if let Ok(n) = stranger.recv(&mut buf) {
                assert!(
                    matches!(
                        ClockMessage::parse(&buf[..n]),
                        Ok(ClockMessage::Answer { nonce: 2, .. })
                    ),
                    "{:?}",
                    &buf[..n]
                );
                answers += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    let idle = last.elapsed();
    assert!(ended.success(), "{ended}");
    assert!(
        idle < Duration::from_millis(2500),
        "ended {idle:?} after the client's last probe"
    );
    assert!(answers >= 3, "the stranger had {answers} answers");
    let report = report(&mut child);
    assert_eq!(report["ended"], "idle", "{report}");
    assert_eq!(report["client"], client.local_addr().unwrap().to_string());
    // Every answer the stranger read, and the client's; one more if the responder answered a
    // probe whose answer came after the stranger stopped waiting.
    assert!(
        report["answered"].as_u64().unwrap() > u64::from(answers),
        "{report}"
    );
    assert!(
        report["strangers"].as_u64().unwrap() >= u64::from(answers),
        "{report}"
    );
}
