//! The control socket's bounds: clients beyond `max_control_clients` (and the slots kept for
//! operators) are refused with an `Error` of code `Limit` (and counted); a client that floods
//! requests and never reads the answers costs a bounded queue (messages beyond it dropped and
//! counted), while another client is still answered; connections that say nothing lose their
//! slots (to a newcomer, or at their deadline) and are told why.

use mpa_control::datapath_client::DatapathClient;
use mpa_ctl_proto::{handshake, read_message, write_message, ErrorCode, Message};
use mpa_datapath::server::{ControlDeadlines, OPERATOR_SLOTS};
use mpa_tests::{datapath, require_privileged, stats, BedConfig, DatapathOptions, TestBed};
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// The datapath's octet bound per client queue (datapath/src/server/clients.rs).
const CLIENT_QUEUE_OCTETS: u64 = 32 << 20;

#[test]
fn clients_beyond_the_limit_are_refused_and_a_flooder_is_bounded() {
    if !require_privileged("control limits") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (_dp, socket) = datapath(
        &bed,
        &DatapathOptions {
            max_control_clients: 2,
            ..DatapathOptions::default()
        },
    );
    let mut first = DatapathClient::connect(&socket, Duration::from_secs(5)).unwrap();
    // The second client floods: Hello, then requests it never reads the answers of.
    let mut flooder = UnixStream::connect(&socket).unwrap();
    flooder
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    handshake(&mut flooder, "flooder").unwrap();
    // This test runs as root (CAP_NET_ADMIN): its further clients are operators and take the
    // slots kept for them; one more is refused, with the reason.
    let operators: Vec<DatapathClient> = (0..OPERATOR_SLOTS)
        .map(|i| {
            DatapathClient::connect(&socket, Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("operator slot {i}: {e}"))
        })
        .collect();
    let mut third = UnixStream::connect(&socket).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    match read_message(&mut third).unwrap() {
        Message::Error { code, message, .. } => {
            assert_eq!(code, ErrorCode::Limit);
            assert_eq!(
                message,
                format!(
                    "too many control clients: 2 at most, and the {OPERATOR_SLOTS} slots kept \
                     for operators are taken"
                )
            );
        }
        m => panic!("third client: {m:?}"),
    }
    assert!(DatapathClient::connect(&socket, Duration::from_secs(2)).is_err());
    let s = stats(&mut first);
    assert_eq!(
        (
            s.control.clients,
            s.control.max_clients,
            s.control.operator_slots,
            s.control.clients_refused,
            s.control.clients_evicted
        ),
        (2 + OPERATOR_SLOTS, 2, OPERATOR_SLOTS, 2, 0)
    );
    drop(operators);
    let mut w = flooder.try_clone().unwrap();
    let flood = std::thread::spawn(move || {
        for id in 1..=200_000u64 {
            if write_message(&mut w, &Message::get_stats(id)).is_err() {
                return id;
            }
        }
        200_000
    });
    // The first client is answered all along; the flooder's queue reaches its bound and the
    // excess is dropped and counted.
    let t0 = Instant::now();
    let dropped = loop {
        let s = stats(&mut first);
        assert!(
            s.control.queued_octets <= CLIENT_QUEUE_OCTETS + (1 << 20),
            "{:?}",
            s.control
        );
        if s.control.messages_dropped > 0 {
            break s.control;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no message dropped for a client that does not read: {:?}",
            s.control
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        dropped.queued_octets >= CLIENT_QUEUE_OCTETS / 2,
        "{dropped:?}"
    );
    // Both directions shut: the flood thread's blocked write fails, the datapath's reader sees
    // the end.
    flooder.shutdown(std::net::Shutdown::Both).unwrap();
    drop(flooder);
    let _ = flood.join();
    // Once the flooder is gone its queue is freed and a new client fits again.
    let t0 = Instant::now();
    loop {
        let s = stats(&mut first);
        if s.control.clients == 1 && s.control.queued_octets == 0 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", s.control);
        std::thread::sleep(Duration::from_millis(50));
    }
    DatapathClient::connect(&socket, Duration::from_secs(5)).unwrap();
}

/// Reads what the datapath says to a client it closes: one `Error` (code `Limit`), then the
/// end of the stream. Its message.
fn closing_words(s: &mut UnixStream) -> String {
    let message = match read_message(s) {
        Ok(Message::Error {
            id: 0,
            code,
            message,
        }) => {
            assert_eq!(code, ErrorCode::Limit, "{message}");
            message
        }
        other => panic!("a closed client is told why, got {other:?}"),
    };
    let mut rest = [0u8; 64];
    match s.read(&mut rest) {
        Ok(0) => message,
        other => panic!("after `{message}`: the end of the stream, got {other:?}"),
    }
}

/// Connections that never say Hello fill every slot, the operators' too: a new client is
/// served within 10 s (it takes the slot of the longest silent one, which is told why), and
/// the rest are closed at the Hello deadline, each told why. Counted in the statistics.
#[test]
fn silent_connections_lose_their_slots_to_a_newcomer_and_at_the_hello_deadline() {
    if !require_privileged("control limits") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (_dp, socket) = datapath(
        &bed,
        &DatapathOptions {
            max_control_clients: 2,
            control_deadlines: ControlDeadlines {
                hello: Duration::from_secs(6),
                ..ControlDeadlines::default()
            },
            ..DatapathOptions::default()
        },
    );
    let mut silent: Vec<UnixStream> = (0..2 + OPERATOR_SLOTS)
        .map(|_| {
            let s = UnixStream::connect(&socket).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s
        })
        .collect();
    let t0 = Instant::now();
    let mut newcomer = loop {
        match DatapathClient::connect(&socket, Duration::from_secs(2)) {
            Ok(c) => break c,
            Err(e) => assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no slot for a new client within 10 s: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let s = stats(&mut newcomer);
    assert_eq!(s.control.clients_evicted, 1, "{:?}", s.control);
    assert_eq!(s.control.clients, 2 + OPERATOR_SLOTS, "{:?}", s.control);
    // The first silent connection was the longest silent: it made room.
    let evicted = closing_words(&mut silent[0]);
    assert!(
        evicted.starts_with("closed to make room for a new client"),
        "{evicted}"
    );
    for (i, s) in silent.iter_mut().enumerate().skip(1) {
        let words = closing_words(s);
        assert_eq!(
            words, "closed: no Hello within 6000 ms",
            "silent connection {i}"
        );
    }
    let s = stats(&mut newcomer);
    assert_eq!(
        (
            s.control.clients,
            s.control.clients_evicted,
            s.control.clients_timed_out,
            s.control.hello_deadline_ms
        ),
        (1, 1, 1 + OPERATOR_SLOTS as u64, 6000),
        "{:?}",
        s.control
    );
}

/// A client without CAP_NET_ADMIN that says Hello and then nothing, holding nothing, is closed
/// at the idle deadline and told why; one that holds a region is not. Operators never are.
#[test]
fn an_idle_client_holding_nothing_is_closed_at_the_idle_deadline() {
    if !require_privileged("control limits") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (_dp, socket) = datapath(
        &bed,
        &DatapathOptions {
            control_deadlines: ControlDeadlines {
                idle: Duration::from_secs(2),
                ..ControlDeadlines::default()
            },
            ..DatapathOptions::default()
        },
    );
    // The clients without CAP_NET_ADMIN: `mpa-bench hostile --probe-idle` run by setpriv
    // (util-linux), one holding nothing and one holding a region; each prints the datapath's
    // last words, or that it was still served after the deadline.
    let probe = |hold: &str| {
        std::process::Command::new("setpriv")
            .args(["--inh-caps=-net_admin", "--bounding-set=-net_admin", "--"])
            .arg(mpa_tests::bin("mpa-bench"))
            .args(["hostile", "--probe-socket"])
            .arg(&socket)
            .args(["--probe-idle", hold, "--probe-idle-ms", "4000"])
            .output()
            .expect("setpriv")
    };
    // An operator (this test's own client, root) silent all along.
    let mut op = DatapathClient::connect(&socket, Duration::from_secs(5)).unwrap();
    let (nothing, region) = std::thread::scope(|sc| {
        let a = sc.spawn(|| probe("nothing"));
        let b = sc.spawn(|| probe("region"));
        (a.join().unwrap(), b.join().unwrap())
    });
    let line = |o: &std::process::Output| {
        format!(
            "{} {}",
            String::from_utf8_lossy(&o.stdout).trim(),
            String::from_utf8_lossy(&o.stderr).trim()
        )
    };
    assert_eq!(
        String::from_utf8_lossy(&nothing.stdout).trim(),
        "closed: nothing said for 2000 ms and nothing held",
        "{}",
        line(&nothing)
    );
    assert_eq!(
        String::from_utf8_lossy(&region.stdout).trim(),
        "served",
        "{}",
        line(&region)
    );
    // The operator, silent as long, is still served; one client was closed.
    let s = stats(&mut op);
    assert_eq!(
        (s.control.clients_timed_out, s.control.idle_deadline_ms),
        (1, 2000),
        "{:?}",
        s.control
    );
}
