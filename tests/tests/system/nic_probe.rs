//! `mpa-datapath probe` against the kernel: on the namespace bed's veth it reads what
//! drivers/net/veth.c sets up (Linux 6.18), sees an offload flipped with ethtool and the XDP
//! features the kernel recomputes, and names the reason generic XDP cannot run with GRO on;
//! a missing interface is exit status 1 with the reason, a bad command line 2.

use mpa_tests::{bin, require_privileged, run_in, BedConfig, TestBed};
use serde_json::{json, Value};
use std::process::Output;

/// `mpa-datapath probe ARGS` in ns b.
fn probe_in_b(bed: &TestBed, args: &[&str]) -> Output {
    bed.command(&bed.ns_b, &bin("mpa-datapath").to_string_lossy())
        .arg("probe")
        .args(args)
        .output()
        .unwrap()
}

/// The JSON document of `probe --iface <b's veth> --json`, and its exit status.
fn probe_json(bed: &TestBed) -> (Option<i32>, Value) {
    let out = probe_in_b(bed, &["--iface", &bed.if_b, "--json"]);
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not one JSON document ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), doc)
}

/// `ethtool ARGS` in namespace `ns`.
fn ethtool(ns: &str, args: &[&str]) {
    let mut v = vec!["ethtool"];
    v.extend_from_slice(args);
    run_in(ns, &v).unwrap_or_else(|e| panic!("{v:?}: {e}"));
}

/// The offload `name` (as `ethtool -k` shows it) in a probe document.
fn offload(doc: &Value, name: &str) -> Value {
    doc["device"]["offloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {doc}"))
        .clone()
}

#[test]
fn the_probe_reads_a_bed_veth_as_the_kernel_sets_it_up() {
    if !require_privileged("mpa-datapath probe on the bed") {
        return;
    }
    let bed = TestBed::up(BedConfig {
        queues: 2,
        mtu: 9000,
        ..BedConfig::default()
    })
    .unwrap();
    let (code, doc) = probe_json(&bed);
    assert_eq!(code, Some(0), "{doc:#}");
    assert_eq!(
        (doc["usable"].clone(), doc["ok"].clone()),
        (json!(true), json!(true))
    );
    assert_eq!(doc["iface"], bed.if_b);
    let dev = &doc["device"];
    // A virtual interface: the driver is the rtnetlink link kind; no device, no bus, no
    // firmware, no interrupts.
    assert_eq!(dev["link"]["kind"], "veth");
    assert_eq!(
        dev["driver"],
        json!({"name": "veth", "source": "link-kind", "bus": null, "address": null})
    );
    assert_eq!(dev["firmware"], json!({"not_reported": "no device"}));
    assert_eq!(dev["irqs"], json!({"device": false, "list": []}));
    // drivers/net/veth.c, veth_set_xdp_features(): when the peer has no more TX queues than
    // this end has RX queues, xdp_set_features_flag(dev, NETDEV_XDP_ACT_BASIC |
    // NETDEV_XDP_ACT_REDIRECT | NETDEV_XDP_ACT_RX_SG), plus NDO_XMIT and NDO_XMIT_SG only when
    // the peer has an XDP program or GRO (veth_gro_requested(peer)), which veth_newlink()
    // turns off on both ends (veth_disable_gro). XSK_ZEROCOPY never: no zero-copy, and so no
    // xdp-zc-max-segs (netdev-genl puts it only beside xsk-zerocopy).
    assert_eq!(dev["xdp"]["xdp"], json!(["basic", "redirect", "rx-sg"]));
    assert_eq!(dev["xdp"]["zc_max_segs"], Value::Null);
    let p = &doc["predictions"];
    assert_eq!(p["xdp_mode_auto"], "native");
    assert_eq!(p["zero_copy_auto"], "copy");
    assert_eq!(p["zero_copy_on"], "fails");
    // veth_get_channels(): counts are the real queue numbers, maxima the allocated ones; the
    // bed made 2 of each (numtxqueues/numrxqueues 2).
    assert_eq!(
        dev["queues"],
        json!({"source": "ethtool", "rx": 2, "tx": 2, "combined": 0,
               "rx_max": 2, "tx_max": 2, "combined_max": null})
    );
    assert_eq!(p["queues_max"], 2);
    assert_eq!(doc["options"], json!(["--queues 2"]));
    // MTU 9000: frames of 9018 octets, three 3840-octet UMEM frames each.
    assert_eq!(dev["link"]["mtu"], 9000);
    assert_eq!(dev["link"]["max_mtu"], 65535);
    assert_eq!(
        (
            p["receive"].clone(),
            p["frame_octets"].clone(),
            p["descriptors"].clone()
        ),
        (json!("multi-buffer"), json!(9018), json!(3))
    );
    // veth_newlink() leaves GRO off; LRO and hardware GRO the veth cannot do.
    assert_eq!(
        offload(&doc, "generic-receive-offload"),
        json!({"name": "generic-receive-offload", "active": false, "changeable": true})
    );
    assert_eq!(offload(&doc, "large-receive-offload")["changeable"], false);
    assert_eq!(doc["problems"], json!([]));

    // The text form says the same.
    let out = probe_in_b(&bed, &["--iface", &bed.if_b]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("\nverdict    usable: native XDP, AF_XDP copy mode; run with --queues 2\n"),
        "{text}"
    );
    assert!(text.contains("--zero-copy on fails"), "{text}");
}

#[test]
fn the_probe_sees_offloads_flipped_and_the_xdp_features_the_kernel_recomputes() {
    if !require_privileged("mpa-datapath probe and ethtool on the bed") {
        return;
    }
    let bed = TestBed::up(BedConfig {
        queues: 2,
        ..BedConfig::default()
    })
    .unwrap();
    // GRO on b itself: seen, and no reason against native XDP, which runs before GRO.
    ethtool(&bed.ns_b, &["-K", &bed.if_b, "gro", "on"]);
    let (code, doc) = probe_json(&bed);
    assert_eq!(code, Some(0), "{doc:#}");
    assert_eq!(offload(&doc, "generic-receive-offload")["active"], true);
    assert_eq!(
        doc["device"]["xdp"]["xdp"],
        json!(["basic", "redirect", "rx-sg"])
    );

    // GRO on the peer: veth_set_features() calls xdp_features_set_redirect_target(peer, true)
    // on b, which adds NDO_XMIT and NDO_XMIT_SG; off again takes them away.
    ethtool(&bed.ns_a, &["-K", &bed.if_a, "gro", "on"]);
    let (_, doc) = probe_json(&bed);
    assert_eq!(
        doc["device"]["xdp"]["xdp"],
        json!(["basic", "redirect", "ndo-xmit", "rx-sg", "ndo-xmit-sg"])
    );
    ethtool(&bed.ns_a, &["-K", &bed.if_a, "gro", "off"]);
    let (_, doc) = probe_json(&bed);
    assert_eq!(
        doc["device"]["xdp"]["xdp"],
        json!(["basic", "redirect", "rx-sg"])
    );

    // b down to one RX queue while a sends on two: veth_set_channels() recomputes the
    // features, and veth_set_xdp_features() clears them all (peer->real_num_tx_queues >
    // dev->real_num_rx_queues). No native XDP: generic XDP, after GRO, which is on: exit 1.
    ethtool(&bed.ns_b, &["-L", &bed.if_b, "rx", "1"]);
    let (code, doc) = probe_json(&bed);
    assert_eq!(code, Some(1), "{doc:#}");
    assert_eq!(doc["device"]["xdp"]["xdp"], json!([]));
    assert_eq!(doc["device"]["queues"]["rx"], 1);
    assert_eq!(doc["predictions"]["xdp_mode_auto"], "generic");
    assert_eq!(
        (doc["usable"].clone(), doc["ok"].clone()),
        (json!(false), json!(false))
    );
    assert_eq!(doc["problems"].as_array().unwrap().len(), 1, "{doc:#}");
    let problem = &doc["problems"][0];
    assert_eq!(problem["reason"], "offload-on");
    assert_eq!(problem["fix"], format!("ethtool -K {} gro off", bed.if_b));
    let out = probe_in_b(&bed, &["--iface", &bed.if_b]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains("not usable: generic-receive-offload is on: XDP will run in generic mode"),
        "{err}"
    );

    // GRO off again: usable in generic mode, said so.
    ethtool(&bed.ns_b, &["-K", &bed.if_b, "gro", "off"]);
    let (code, doc) = probe_json(&bed);
    assert_eq!(code, Some(0), "{doc:#}");
    assert_eq!(
        doc["verdict"],
        "usable: generic XDP (skb mode), AF_XDP copy mode"
    );
}

#[test]
fn a_missing_interface_is_exit_1_with_the_reason_and_a_bad_command_line_2() {
    // Nothing here needs privileges or a namespace: no interface of this name can exist.
    let dp = bin("mpa-datapath");
    let run = |args: &[&str]| std::process::Command::new(&dp).args(args).output().unwrap();
    let out = run(&["probe", "--iface", "mpa-nosuch0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("mpa-nosuch0: not usable: no interface mpa-nosuch0 in this network namespace"),
        "{err}"
    );
    let out = run(&["probe", "--iface", "mpa-nosuch0", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["device"], Value::Null);
    assert_eq!(doc["problems"][0]["reason"], "no-such-interface");
    assert_eq!(
        (doc["usable"].clone(), doc["ok"].clone()),
        (json!(false), json!(false))
    );

    for args in [
        &["probe", "--iface", "eth0", "--bogus"][..],
        &["probe"],
        &["probe", "--iface", "a/b"],
        &["probe", "--iface", "sixteen-octets00"],
        &["--iface", "eth0", "probe"],
        &[],
    ] {
        let out = run(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
