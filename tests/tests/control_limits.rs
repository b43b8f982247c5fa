//! The control socket's bounds: clients beyond `max_control_clients` are refused with an
//! `Error` of code `Limit` (and counted); a client that floods requests and never reads the
//! answers costs a bounded queue (messages beyond it dropped and counted), while another
//! client is still answered.

use mpa_control::datapath_client::DatapathClient;
use mpa_ctl_proto::{handshake, read_message, write_message, ErrorCode, Message};
use mpa_tests::{datapath, require_privileged, stats, BedConfig, DatapathOptions, TestBed};
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
    // The third is refused, with the reason.
    let mut third = UnixStream::connect(&socket).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    match read_message(&mut third).unwrap() {
        Message::Error { code, message, .. } => {
            assert_eq!(code, ErrorCode::Limit);
            assert_eq!(message, "too many control clients: 2 at most");
        }
        m => panic!("third client: {m:?}"),
    }
    assert!(DatapathClient::connect(&socket, Duration::from_secs(2)).is_err());
    let s = stats(&mut first);
    assert_eq!(
        (
            s.control.clients,
            s.control.max_clients,
            s.control.clients_refused
        ),
        (2, 2, 2)
    );
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
