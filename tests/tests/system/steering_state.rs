//! The queue-steering state file names the device, not only its interface (docs/nics.md,
//! section 4): a datapath killed with its channels set is undone by the next start after the
//! interface was renamed, under the new name; and when another device has the recorded name
//! and the recorded one is gone, the next start refuses, naming the file, which it keeps.
//! The channel counts are read back with `ethtool -l`, apart from the datapath's own code.

use mpa_tests::{require_privileged, BedConfig, DatapathProcess, TestBed};
use std::path::PathBuf;

/// The interface's current RX channel count, as `ethtool -l` prints it.
fn rx_channels(bed: &TestBed, iface: &str) -> u32 {
    let out = bed
        .command(&bed.ns_b, "ethtool")
        .args(["-l", iface])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.split("Current hardware settings:")
        .nth(1)
        .and_then(|current| {
            current
                .lines()
                .find_map(|l| l.strip_prefix("RX:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or_else(|| panic!("{text}"))
}

/// `ip` in `ns`, which must succeed.
fn ip(bed: &TestBed, ns: &str, args: &[&str]) {
    let st = bed.command(ns, "ip").args(args).status().unwrap();
    assert!(st.success(), "ip {args:?}");
}

fn ifindex(bed: &TestBed, iface: &str) -> String {
    let out = bed
        .command(&bed.ns_b, "cat")
        .arg(format!("/sys/class/net/{iface}/ifindex"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Removes the state file on every way out of the test (the namespaces, and the devices in
/// them, go with the bed).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_renamed_interface_is_recovered_and_another_device_under_its_name_is_refused() {
    if !require_privileged("queue steering state across a rename") {
        return;
    }
    let bed = TestBed::up(BedConfig {
        queues: 4,
        ..BedConfig::default()
    })
    .unwrap();
    // veth takes native XDP only with at least as many RX queues as its peer has TX queues.
    let st = bed
        .command(&bed.ns_a, "ethtool")
        .args(["-L", &bed.if_a, "tx", "2"])
        .status()
        .unwrap();
    assert!(st.success());
    let args = ["--queues", "2", "--steer", "channels"];

    // Killed with the count set; then the interface is renamed.
    let mut dp = DatapathProcess::start_with(&bed, &[], &args).unwrap();
    let socket = dp.socket.clone();
    let state = RemoveOnDrop(mpa_datapath::server::steering_state_path(&socket));
    dp.kill9();
    assert_eq!(rx_channels(&bed, &bed.if_b), 2);
    assert!(state.0.exists());
    let renamed = format!("mparn{}", std::process::id() % 1_000_000);
    let original_index = ifindex(&bed, &bed.if_b);
    ip(&bed, &bed.ns_b, &["link", "set", "dev", &bed.if_b, "down"]);
    ip(
        &bed,
        &bed.ns_b,
        &["link", "set", "dev", &bed.if_b, "name", &renamed],
    );
    ip(&bed, &bed.ns_b, &["link", "set", "dev", &renamed, "up"]);

    // The next start finds the device under its new name and puts the count back there.
    let sock = socket.to_string_lossy().into_owned();
    let mut dp2 =
        DatapathProcess::start_with(&bed, &[], &["--socket", &sock, "--iface", &renamed]).unwrap();
    let log = dp2.log().join("\n");
    assert!(
        log.contains(&format!("{} was renamed {renamed}", bed.if_b))
            && log.contains("RX channels 2 → 4 restored"),
        "{log}"
    );
    assert_eq!(rx_channels(&bed, &renamed), 4);
    assert!(!state.0.exists());
    assert!(dp2.terminate().success());

    // Killed again; then the device leaves the namespace and a new one takes its name.
    let mut again = vec!["--socket", &sock, "--iface", &renamed];
    again.extend(args);
    let mut dp3 = DatapathProcess::start_with(&bed, &[], &again).unwrap();
    dp3.kill9();
    assert!(state.0.exists());
    ip(
        &bed,
        &bed.ns_b,
        &["link", "set", "dev", &renamed, "netns", &bed.ns_a],
    );
    let peer = format!("mparp{}", std::process::id() % 1_000_000);
    ip(
        &bed,
        &bed.ns_b,
        &[
            "link", "add", &renamed, "type", "veth", "peer", "name", &peer,
        ],
    );
    ip(&bed, &bed.ns_b, &["link", "set", "dev", &renamed, "up"]);
    ip(&bed, &bed.ns_b, &["link", "set", "dev", &peer, "up"]);
    let new_index = ifindex(&bed, &renamed);
    assert_ne!(new_index, original_index);
    let refused =
        DatapathProcess::start_once_with(&bed, &[], &["--socket", &sock, "--iface", &renamed])
            .err()
            .expect("started on another device under the recorded name");
    assert!(
        refused.contains(&state.0.display().to_string())
            && refused.contains(&format!("{renamed} is another device now"))
            && refused.contains(&format!("ifindex {original_index} → {new_index}"))
            && refused.contains("the file is kept"),
        "{refused}"
    );
    assert!(state.0.exists());
    assert_eq!(
        rx_channels(&bed, &renamed),
        1,
        "the new device was left alone"
    );
}
