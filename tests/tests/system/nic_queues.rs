//! Queue steering (`mpa-datapath --steer`, docs/nics.md): the NIC's RX channels set to the
//! served queues and put back on exit, after a kill by the next start (unless an
//! administrator changed them since), and ntuple rules refused with the driver named where
//! the driver has none (veth). The channel counts are read back with `ethtool -l`, apart from
//! the datapath's own ethtool code.

use mpa_tests::{require_privileged, BedConfig, DatapathProcess, TestBed};
use std::path::PathBuf;

/// The interface's current RX channel count, as `ethtool -l` prints it.
fn rx_channels(bed: &TestBed) -> u32 {
    let out = bed
        .command(&bed.ns_b, "ethtool")
        .args(["-l", &bed.if_b])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let current = text
        .split("Current hardware settings:")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    current
        .lines()
        .find_map(|l| l.strip_prefix("RX:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{text}"))
}

fn set_rx_channels(bed: &TestBed, n: u32) {
    let st = bed
        .command(&bed.ns_b, "ethtool")
        .args(["-L", &bed.if_b, "rx", &n.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

fn state_file(dp: &DatapathProcess) -> PathBuf {
    mpa_datapath::server::steering_state_path(&dp.socket)
}

fn log(dp: &DatapathProcess) -> String {
    dp.log().join("\n")
}

#[test]
fn channels_are_set_to_the_served_queues_and_put_back_on_exit_and_after_a_kill() {
    if !require_privileged("queue steering by channels") {
        return;
    }
    let bed = TestBed::up(BedConfig {
        queues: 4,
        ..BedConfig::default()
    })
    .unwrap();
    assert_eq!(rx_channels(&bed), 4);
    // veth takes native XDP only with at least as many RX queues as its peer has TX queues
    // (ENOSPC otherwise); a NIC's peer is another host, and has no say.
    let st = bed
        .command(&bed.ns_a, "ethtool")
        .args(["-L", &bed.if_a, "tx", "2"])
        .status()
        .unwrap();
    assert!(st.success());
    let args = ["--queues", "2", "--steer", "channels"];

    // A clean stop puts the count back and leaves no state.
    let mut dp = DatapathProcess::start_with(&bed, &[], &args).unwrap();
    assert_eq!(rx_channels(&bed), 2);
    assert!(
        log(&dp).contains("queue steering: channels: RX 4 → 2"),
        "{}",
        log(&dp)
    );
    let state = state_file(&dp);
    assert!(state.exists());
    assert!(dp.terminate().success());
    assert_eq!(rx_channels(&bed), 4);
    assert!(!state.exists());

    // Killed: the count stays and so does the record of it; the next datapath (without
    // --steer, on one queue) puts it back first, then warns that queues go unserved.
    let mut dp = DatapathProcess::start_with(&bed, &[], &args).unwrap();
    let (socket, state) = (dp.socket.clone(), state_file(&dp));
    dp.kill9();
    assert_eq!(rx_channels(&bed), 2);
    assert!(state.exists());
    let mut dp2 =
        DatapathProcess::start_with(&bed, &[], &["--socket", &socket.to_string_lossy()]).unwrap();
    let l = log(&dp2);
    assert!(
        l.contains("left behind") && l.contains("RX channels 2 → 4 restored"),
        "{l}"
    );
    assert!(l.contains("more RX queues than are served"), "{l}");
    assert_eq!(rx_channels(&bed), 4);
    assert!(!state.exists());
    assert!(dp2.terminate().success());
    assert_eq!(rx_channels(&bed), 4);

    // Killed, then an administrator sets another count: it is kept.
    let mut dp = DatapathProcess::start_with(&bed, &[], &args).unwrap();
    let (socket, state) = (dp.socket.clone(), state_file(&dp));
    dp.kill9();
    assert!(state.exists());
    set_rx_channels(&bed, 3);
    let mut dp3 =
        DatapathProcess::start_with(&bed, &[], &["--socket", &socket.to_string_lossy()]).unwrap();
    assert!(
        log(&dp3).contains("channels changed since, kept"),
        "{}",
        log(&dp3)
    );
    assert_eq!(rx_channels(&bed), 3);
    assert!(!state.exists());
    assert!(dp3.terminate().success());
    assert_eq!(rx_channels(&bed), 3);
}

#[test]
fn more_queues_than_the_nic_has_channels_is_refused_before_anything_changes() {
    if !require_privileged("queue steering by channels") {
        return;
    }
    let bed = TestBed::up(BedConfig {
        queues: 2,
        ..BedConfig::default()
    })
    .unwrap();
    let l = DatapathProcess::start_once_with(&bed, &[], &["--queues", "4", "--steer", "channels"])
        .err()
        .expect("started with more queues than channels");
    assert!(
        l.contains(&bed.if_b) && l.contains("--queues 4 but the NIC has at most 2 RX channels"),
        "{l}"
    );
    assert_eq!(rx_channels(&bed), 2);
    assert!(!bed.link_b().unwrap().contains("xdp"));
}

#[test]
fn ntuple_rules_on_a_driver_without_them_fail_naming_the_driver() {
    if !require_privileged("queue steering by ntuple rules") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let dp =
        DatapathProcess::start_once_with(&bed, &[], &["--steer", "ntuple", "--steer-port", "7680"]);
    let l = dp.err().expect("ntuple steering started on veth");
    assert!(
        l.contains(&bed.if_b) && l.contains("the driver (veth) takes no ntuple rules"),
        "{l}"
    );
    // Nothing was left attached or recorded.
    assert!(!bed.link_b().unwrap().contains("xdp"));
}

#[test]
fn steering_options_out_of_place_are_usage_errors() {
    let dp = mpa_tests::bin("mpa-datapath");
    for (args, want) in [
        (
            &["--iface", "lo", "--steer", "ntuple"][..],
            "needs the listeners' ports",
        ),
        (
            &["--iface", "lo", "--steer-port", "7000"][..],
            "is for --steer ntuple",
        ),
        (
            &["--iface", "lo", "--steer", "rss"][..],
            "invalid value 'rss'",
        ),
    ] {
        let out = std::process::Command::new(&dp).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
