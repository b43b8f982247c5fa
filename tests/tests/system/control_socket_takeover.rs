//! The control socket's path is never taken over: a second `mpa-datapath` started on the path
//! of a running one refuses to start and says why (the first goes on serving), while a stale
//! socket file left by a datapath that died (`kill -9`) is removed and the new one starts.

use mpa_control::datapath_client::DatapathClient;
use mpa_tests::{require_privileged, stats, BedConfig, DatapathProcess, TestBed};
use std::time::Duration;

#[test]
fn a_running_datapaths_socket_is_refused_and_a_stale_one_is_replaced() {
    if !require_privileged("control socket takeover") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let mut first = DatapathProcess::start(&bed, &[]).unwrap();
    let path = first.socket.to_string_lossy().into_owned();

    let log = match DatapathProcess::start_once_with(&bed, &[], &["--socket", &path]) {
        Ok(_) => panic!("a second datapath started on a running one's socket"),
        Err(log) => log,
    };
    assert!(log.contains("another mpa-datapath answers there"), "{log}");
    // The first one still answers.
    let mut dpc = DatapathClient::connect(&first.socket, Duration::from_secs(5)).unwrap();
    assert_eq!(stats(&mut dpc).queues.len(), 1);
    drop(dpc);

    // Killed, it leaves its socket file behind; the next datapath removes it and serves.
    first.kill9();
    assert!(
        first.socket.exists(),
        "a killed datapath leaves its socket file"
    );
    let second = DatapathProcess::start_with(&bed, &[], &["--socket", &path]).unwrap();
    assert!(
        second
            .log()
            .iter()
            .any(|l| l.contains("removing a stale control socket")),
        "{:?}",
        second.log()
    );
    // (`second.socket` is the path the fixture chose; `--socket` overrode it.)
    let mut dpc = DatapathClient::connect(path.as_ref(), Duration::from_secs(5)).unwrap();
    assert_eq!(stats(&mut dpc).queues.len(), 1);
}
