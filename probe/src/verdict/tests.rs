//! The verdict and its rendering on readings built by hand: a NIC with zero-copy, a veth
//! without, offloads on, MTUs beyond what a kernel receives, a missing interface, readings the
//! kernel did not give.

use super::*;
use crate::readings::{
    Driver, DriverSource, Firmware, Irq, Irqs, Link, Offload, QueueSource, Queues, Reading,
    Version, XdpAttached, OFFLOADS, XDP_BASIC, XDP_REDIRECT, XDP_RX_SG, XDP_XSK_ZEROCOPY,
};
use crate::render;
use crate::Datapath;
use serde_json::Value;

/// A datapath as mpa-datapath is by default: 64 queues, 4096-octet UMEM frames with 256 of
/// headroom, frames of MTU + Ethernet + one VLAN tag, segments bounded by MTU and frame.
const DATAPATH: Datapath = Datapath {
    max_queues: 64,
    frame_size: 4096,
    headroom: 256,
    rx_frame_for_mtu: |mtu| mtu.unwrap_or(1500) as usize + 14 + 4,
    link_mss: |mtu, frame| {
        let by_mtu = mtu.unwrap_or(1500).saturating_sub(40);
        let by_frame = frame.saturating_sub(256 + 14 + 40);
        by_mtu.min(by_frame).clamp(64, u32::from(u16::MAX)) as u16
    },
    driver_info: |_| None,
};

fn judge_here(r: &Readings) -> Report {
    judge(r, &DATAPATH)
}

fn kernel(major: u32, minor: u32) -> Option<Kernel> {
    Kernel::parse(&format!("{major}.{minor}.3-test"))
}

fn offloads(on: &[&str], fixed: &[&str]) -> Reading<Vec<Offload>> {
    Reading::Got(
        OFFLOADS
            .iter()
            .map(|o| Offload {
                name: o.shown.to_string(),
                active: on.contains(&o.shown),
                changeable: !fixed.contains(&o.shown),
            })
            .collect(),
    )
}

/// A NIC: ice on PCI, 4 combined queues, native XDP with zero-copy of up to 5 segments,
/// every offload off, one interrupt per queue.
fn nic(mtu: u32) -> Readings {
    Readings {
        iface: "eth1".into(),
        kernel: kernel(6, 18),
        cpus: 8,
        device: Some(Device {
            link: Link {
                ifindex: 4,
                kind: None,
                ethernet: true,
                link_type: "ether".into(),
                up: true,
                operstate: "up".into(),
                mtu,
                min_mtu: Some(68),
                max_mtu: Some(9702),
                num_rx_queues: Some(8),
                num_tx_queues: Some(8),
                parent_bus: Some("pci".into()),
                parent_dev: Some("0000:3b:00.0".into()),
                xdp_attached: None,
            },
            driver: Driver {
                name: Some("ice".into()),
                source: DriverSource::Sysfs,
                bus: Some("pci".into()),
                address: Some("0000:3b:00.0".into()),
            },
            firmware: Reading::Got(Firmware {
                driver: Some("ice".into()),
                running: vec![Version {
                    name: "fw.mgmt".into(),
                    value: "7.3.4".into(),
                }],
                ..Firmware::default()
            }),
            queues: Reading::Got(Queues {
                source: QueueSource::Ethtool,
                rx: 0,
                tx: 0,
                combined: 4,
                rx_max: None,
                tx_max: None,
                combined_max: Some(8),
            }),
            xdp: Reading::Got(XdpFeatures {
                xdp: XDP_BASIC | XDP_REDIRECT | XDP_XSK_ZEROCOPY | XDP_RX_SG,
                zc_max_segs: Some(5),
                rx_metadata: 0b11,
                xsk: 0,
            }),
            offloads: offloads(&[], &[]),
            irqs: Irqs {
                device: true,
                list: (0..4)
                    .map(|q| Irq {
                        irq: 100 + q,
                        name: Some(format!("ice-eth1-TxRx-{q}")),
                        cpus: Some(q.to_string()),
                    })
                    .collect(),
            },
        }),
    }
}

/// A veth end as the kernel sets it up with no XDP on its peer (drivers/net/veth.c,
/// `veth_set_xdp_features`): basic, redirect, rx-sg; no zero-copy; no device.
fn veth() -> Readings {
    let mut r = nic(1500);
    r.iface = "veth-b".into();
    let d = r.device.as_mut().unwrap();
    d.link.kind = Some("veth".into());
    d.link.parent_bus = None;
    d.link.parent_dev = None;
    d.driver = Driver {
        name: Some("veth".into()),
        source: DriverSource::LinkKind,
        bus: None,
        address: None,
    };
    d.firmware = Reading::not("no device");
    d.queues = Reading::Got(Queues {
        source: QueueSource::Ethtool,
        rx: 1,
        tx: 1,
        combined: 0,
        rx_max: Some(1),
        tx_max: Some(1),
        combined_max: None,
    });
    d.xdp = Reading::Got(XdpFeatures {
        xdp: XDP_BASIC | XDP_REDIRECT | XDP_RX_SG,
        zc_max_segs: None,
        rx_metadata: 0b111,
        xsk: 0,
    });
    d.offloads = offloads(&[], &["large-receive-offload", "rx-gro-hw"]);
    d.irqs = Irqs {
        device: false,
        list: Vec::new(),
    };
    r
}

fn device(r: &mut Readings) -> &mut Device {
    r.device.as_mut().unwrap()
}

fn predictions(rep: &Report) -> &Predictions {
    rep.predictions.as_ref().unwrap()
}

fn json(r: &Readings) -> Value {
    serde_json::from_str(&render::json(r, &judge_here(r))).unwrap()
}

fn finding(rep: &Report, t: Topic) -> &Finding {
    rep.findings.iter().find(|f| f.topic == t).unwrap()
}

#[test]
fn a_nic_with_zero_copy_is_usable_in_zero_copy_on_every_queue() {
    let rep = judge_here(&nic(1500));
    assert!(rep.usable(), "{:?}", rep.blockers);
    let p = predictions(&rep);
    assert_eq!(p.xdp_mode_auto, XdpMode::Native);
    assert_eq!(p.zero_copy_auto, ZeroCopyAuto::ZeroCopy);
    assert_eq!(p.zero_copy_on, ZeroCopyOn::Binds);
    assert_eq!(
        (p.receive, p.frame_octets, p.descriptors),
        (Receive::SingleBuffer, 1518, 1)
    );
    assert_eq!(p.queues_max, Some(4));
    assert_eq!(rep.options, ["--queues 4"]);
    assert_eq!(
        render::summary(&rep),
        "usable: native XDP, AF_XDP zero-copy; run with --queues 4"
    );
    let order: Vec<Topic> = rep.findings.iter().map(|f| f.topic).collect();
    use Topic::*;
    assert_eq!(
        order,
        [Interface, Driver, Firmware, Kernel, Queues, Mtu, Xdp, Offloads, Irqs]
    );
    assert_eq!(finding(&rep, Driver).reading, "ice, pci 0000:3b:00.0");
    assert_eq!(finding(&rep, Firmware).reading, "fw.mgmt 7.3.4");
    let irqs = &finding(&rep, Irqs).reading;
    assert!(
        irqs.starts_with("4: 100 ice-eth1-TxRx-0 on CPUs 0, 101"),
        "{irqs}"
    );
}

#[test]
fn a_veth_has_no_zero_copy_and_zero_copy_on_fails() {
    let r = veth();
    let rep = judge_here(&r);
    assert!(rep.usable(), "{:?}", rep.blockers);
    let p = predictions(&rep);
    assert_eq!(p.xdp_mode_auto, XdpMode::Native);
    assert_eq!(p.zero_copy_auto, ZeroCopyAuto::Copy);
    assert_eq!(p.zero_copy_on, ZeroCopyOn::Fails);
    assert!(rep.options.is_empty(), "{:?}", rep.options);
    assert_eq!(
        render::summary(&rep),
        "usable: native XDP, AF_XDP copy mode"
    );
    let xdp = finding(&rep, Topic::Xdp);
    assert_eq!(
        xdp.reading,
        "basic redirect rx-sg (rx metadata: timestamp hash vlan-tag)"
    );
    assert!(
        xdp.datapath
            .iter()
            .any(|l| l.contains("--zero-copy on fails")),
        "{xdp:?}"
    );
    assert_eq!(
        finding(&rep, Topic::Irqs).reading,
        "none: a virtual interface has no device and no interrupts of its own"
    );
    let text = render::text(&r, &rep);
    assert!(
        text.contains("\nverdict    usable: native XDP, AF_XDP copy mode\n"),
        "{text}"
    );
    let j = json(&r);
    assert_eq!(
        j["device"]["xdp"]["xdp"],
        serde_json::json!(["basic", "redirect", "rx-sg"])
    );
    assert_eq!(j["device"]["xdp"]["zc_max_segs"], Value::Null);
    assert_eq!(j["predictions"]["zero_copy_on"], "fails");
    assert_eq!(j["predictions"]["zero_copy_auto"], "copy");
    assert_eq!(j["device"]["driver"]["source"], "link-kind");
    assert_eq!(j["device"]["firmware"]["not_reported"], "no device");
    assert_eq!(
        j["device"]["irqs"],
        serde_json::json!({"device": false, "list": []})
    );
    assert_eq!(
        (j["usable"].clone(), j["ok"].clone()),
        (true.into(), true.into())
    );
    assert_eq!(j["problems"], serde_json::json!([]));
}

#[test]
fn lro_on_must_be_turned_off_and_says_how() {
    let mut r = nic(1500);
    device(&mut r).offloads = offloads(&["large-receive-offload", "rx-gro-hw"], &[]);
    let rep = judge_here(&r);
    assert!(!rep.usable());
    assert_eq!(
        rep.blockers,
        [
            Blocker::OffloadOn {
                name: "large-receive-offload".into(),
                before_generic_only: false,
                fix: "ethtool -K eth1 lro off".into(),
            },
            Blocker::OffloadOn {
                name: "rx-gro-hw".into(),
                before_generic_only: false,
                fix: "ethtool -K eth1 rx-gro-hw off".into(),
            },
        ]
    );
    let off = finding(&rep, Topic::Offloads);
    assert_eq!(
        off.datapath,
        ["must be off: ethtool -K eth1 lro off rx-gro-hw off"]
    );
    let j = json(&r);
    assert_eq!(
        (j["usable"].clone(), j["ok"].clone()),
        (false.into(), false.into())
    );
    assert_eq!(j["problems"][0]["reason"], "offload-on");
    assert_eq!(j["problems"][0]["topic"], "offloads");
    assert_eq!(j["problems"][0]["fix"], "ethtool -K eth1 lro off");
    assert_eq!(
        render::summary(&rep),
        "not usable: 2 reasons (exit status 1)"
    );
}

#[test]
fn an_offload_the_driver_keeps_on_cannot_be_fixed_by_ethtool() {
    let mut r = nic(1500);
    device(&mut r).offloads = offloads(&["rx-gro-hw"], &["rx-gro-hw"]);
    let rep = judge_here(&r);
    assert_eq!(
        rep.blockers,
        [Blocker::OffloadFixed {
            name: "rx-gro-hw".into()
        }]
    );
}

#[test]
fn gro_matters_only_when_xdp_runs_in_generic_mode() {
    // Native XDP runs before GRO: GRO on is said, not held against the interface.
    let mut r = veth();
    device(&mut r).offloads = offloads(&["generic-receive-offload"], &[]);
    let rep = judge_here(&r);
    assert!(rep.usable(), "{:?}", rep.blockers);
    let off = finding(&rep, Topic::Offloads);
    assert!(off.datapath[0].contains("runs after native XDP"), "{off:?}");

    // No native XDP (veth whose peer has more TX queues than it has RX queues: the kernel
    // clears every feature): generic XDP sees GRO's merged segments.
    device(&mut r).xdp = Reading::Got(XdpFeatures {
        xdp: 0,
        zc_max_segs: None,
        rx_metadata: 0,
        xsk: 0,
    });
    let rep = judge_here(&r);
    assert_eq!(predictions(&rep).xdp_mode_auto, XdpMode::Generic);
    assert_eq!(predictions(&rep).zero_copy_on, ZeroCopyOn::Fails);
    assert_eq!(
        rep.blockers,
        [Blocker::OffloadOn {
            name: "generic-receive-offload".into(),
            before_generic_only: true,
            fix: "ethtool -K veth-b gro off".into(),
        }]
    );
    assert!(rep.blockers[0]
        .to_string()
        .contains("XDP will run in generic mode"));
}

#[test]
fn native_xdp_without_redirect_needs_generic_mode() {
    let mut r = nic(1500);
    device(&mut r).xdp = Reading::Got(XdpFeatures {
        xdp: XDP_BASIC | XDP_XSK_ZEROCOPY,
        zc_max_segs: None,
        rx_metadata: 0,
        xsk: 0,
    });
    device(&mut r).offloads = offloads(&["rx-gro-list"], &[]);
    let rep = judge_here(&r);
    assert_eq!(rep.options, ["--queues 4", "--xdp-mode generic"]);
    assert_eq!(predictions(&rep).zero_copy_on, ZeroCopyOn::Fails);
    // Generic XDP runs after GRO: rx-gro-list must be off.
    assert_eq!(rep.blockers.len(), 1);
    assert_eq!(rep.blockers[0].code(), "offload-on");
}

#[test]
fn jumbo_frames_beyond_what_an_old_kernel_receives() {
    let mut r = nic(9000);
    r.kernel = kernel(6, 1);
    let rep = judge_here(&r);
    assert_eq!(predictions(&rep).receive, Receive::Dropped);
    assert_eq!(
        rep.blockers,
        [Blocker::MtuBeyondLimit {
            mtu: 9000,
            frame: 9018,
            release: "6.1.3-test".into(),
            frame_data: 3840,
            max_mtu: 3822,
        }]
    );
    assert_eq!(rep.blockers[0].code(), "mtu-beyond-limit");
    // The largest MTU that fits a UMEM frame is fine there.
    let mut r = nic(3822);
    r.kernel = kernel(6, 1);
    assert!(judge_here(&r).usable());
    let mut r = nic(3823);
    r.kernel = kernel(6, 1);
    assert!(!judge_here(&r).usable());
}

#[test]
fn jumbo_frames_with_enough_zero_copy_segments_and_with_too_few() {
    let rep = judge_here(&nic(9000));
    assert!(rep.usable());
    let p = predictions(&rep);
    assert_eq!((p.receive, p.descriptors), (Receive::MultiBuffer, 3));
    assert_eq!(p.zero_copy_auto, ZeroCopyAuto::ZeroCopy);

    let mut r = nic(9000);
    device(&mut r).xdp = Reading::Got(XdpFeatures {
        xdp: XDP_BASIC | XDP_REDIRECT | XDP_XSK_ZEROCOPY | XDP_RX_SG,
        zc_max_segs: Some(1),
        rx_metadata: 0,
        xsk: 0,
    });
    let rep = judge_here(&r);
    assert!(rep.usable(), "copy mode receives them: {:?}", rep.blockers);
    let p = predictions(&rep);
    assert_eq!(p.zero_copy_auto, ZeroCopyAuto::ZeroCopyWithoutMultiBuffer);
    assert_eq!(p.zero_copy_on, ZeroCopyOn::BindsWithoutMultiBuffer);
    assert_eq!(rep.options, ["--queues 4", "--zero-copy off"]);
    assert_eq!(
        render::summary(&rep),
        "usable: native XDP, AF_XDP copy mode; run with --queues 4 --zero-copy off"
    );
}

#[test]
fn no_such_interface_is_the_one_reason() {
    let r = Readings {
        iface: "nosuch0".into(),
        kernel: kernel(6, 18),
        cpus: 2,
        device: None,
    };
    let rep = judge_here(&r);
    assert_eq!(rep.blockers, [Blocker::NoSuchInterface("nosuch0".into())]);
    assert!(rep.findings.is_empty() && rep.predictions.is_none());
    let text = render::text(&r, &rep);
    assert!(
        text.contains("✗ interface: no interface nosuch0 in this network namespace"),
        "{text}"
    );
    let j = json(&r);
    assert_eq!(j["device"], Value::Null);
    assert_eq!(j["problems"][0]["reason"], "no-such-interface");
    assert_eq!(j["ok"], false);
}

#[test]
fn other_reasons_an_interface_cannot_be_used() {
    let mut r = nic(1500);
    device(&mut r).link.xdp_attached = Some(XdpAttached {
        mode: "driver".into(),
        prog_id: Some(31),
    });
    device(&mut r).link.ethernet = false;
    r.kernel = kernel(5, 15);
    let codes: Vec<_> = judge_here(&r).blockers.iter().map(Blocker::code).collect();
    assert_eq!(codes, ["not-ethernet", "xdp-attached", "old-kernel"]);
    let b = &judge_here(&r).blockers[1];
    assert!(b
        .to_string()
        .starts_with("an XDP program (id 31) is attached in driver mode"));
}

#[test]
fn readings_the_kernel_did_not_give_leave_the_choice_to_the_datapath() {
    let mut r = nic(1500);
    r.kernel = None;
    let d = device(&mut r);
    d.xdp = Reading::not("the kernel has no netdev generic netlink family");
    d.offloads = Reading::not("the driver does not report it");
    d.queues = Reading::not("the driver does not report it");
    let rep = judge_here(&r);
    assert!(rep.usable(), "{:?}", rep.blockers);
    let p = predictions(&rep);
    assert_eq!(p.xdp_mode_auto, XdpMode::NativeElseGeneric);
    assert_eq!(p.zero_copy_auto, ZeroCopyAuto::ZeroCopyElseCopy);
    assert_eq!(p.zero_copy_on, ZeroCopyOn::Unknown);
    assert_eq!(p.queues_max, None);
    assert_eq!(
        finding(&rep, Topic::Xdp).reading,
        "not reported (the kernel has no netdev generic netlink family)"
    );
    assert!(finding(&rep, Topic::Offloads).datapath[0].contains("ethtool -k eth1"));
    let j = json(&r);
    assert_eq!(
        j["device"]["xdp"]["not_reported"],
        "the kernel has no netdev generic netlink family"
    );
}

#[test]
fn more_queues_than_the_datapath_serves() {
    let mut r = nic(1500);
    device(&mut r).queues = Reading::Got(Queues {
        source: QueueSource::Ethtool,
        rx: 0,
        tx: 0,
        combined: 96,
        rx_max: None,
        tx_max: None,
        combined_max: Some(128),
    });
    let rep = judge_here(&r);
    assert_eq!(rep.options, ["--queues 64"]);
    assert_eq!(predictions(&rep).queues_max, Some(64));
    let q = finding(&rep, Topic::Queues);
    assert!(
        q.datapath[0].contains("`ethtool -L eth1 combined 64`"),
        "{q:?}"
    );
    // 64 workers on 8 CPUs.
    assert!(finding(&rep, Topic::Irqs).datapath[1].contains("64 queues and 8 CPUs"));
}

#[test]
fn hostile_values_do_not_overflow() {
    let mut r = nic(u32::MAX);
    device(&mut r).xdp = Reading::Got(XdpFeatures {
        xdp: u64::MAX,
        zc_max_segs: Some(u32::MAX),
        rx_metadata: u64::MAX,
        xsk: u64::MAX,
    });
    let rep = judge_here(&r);
    let p = predictions(&rep);
    assert_eq!(p.frame_octets, u64::from(u32::MAX) + 18);
    assert_eq!(p.descriptors, (u64::from(u32::MAX) + 18).div_ceil(3840));
    // Unknown bits are named by number.
    let j = json(&r);
    assert_eq!(j["device"]["xdp"]["xdp"][63], "bit 63");
    let many = Irqs {
        device: true,
        list: (0..20)
            .map(|i| Irq {
                irq: i,
                name: None,
                cpus: None,
            })
            .collect(),
    };
    device(&mut r).irqs = many;
    let rep = judge_here(&r);
    assert!(finding(&rep, Topic::Irqs).reading.ends_with("and 12 more"));
}

#[test]
fn kernel_releases_parse() {
    let k = Kernel::parse("6.18.44-fc-v1045\n").unwrap();
    assert_eq!(
        (k.major, k.minor, k.release.as_str()),
        (6, 18, "6.18.44-fc-v1045")
    );
    assert!(k.at_least(6, 6) && k.at_least(6, 18) && !k.at_least(6, 19));
    assert_eq!(
        Kernel::parse("6.1").map(|k| (k.major, k.minor)),
        Some((6, 1))
    );
    assert_eq!(Kernel::parse("linux"), None);
    assert_eq!(Kernel::parse("6"), None);
    assert_eq!(Kernel::parse(""), None);
}
