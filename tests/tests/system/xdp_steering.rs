//! The program attached to a real veth between two network namespaces the test creates:
//! kernel traffic passes, steered flows are dropped (no XSK bound) while others keep working,
//! removal restores delivery, malformed frames are counted, and Drop detaches.
//!
//! Needs root; skips loudly otherwise, fails instead when MPA_REQUIRE_PRIVILEGED=1.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, UdpSocket};
use std::time::{Duration, Instant};

use mpa_bpf::{AttachMode, BpfError, FlowValue, XdpCounters, XdpSteering};
use mpa_testbed::{A4 as A_V4, A6 as A_V6, B4 as B_V4, B6 as B_V6};
use mpa_tests::frames::{self, Frame};
use mpa_tests::xdp::{attach_b, flow_key, ifindex_b, inject_from_a, reversed_key};
use mpa_tests::{require_privileged, run_in_netns, BedConfig, TestBed};

/// How long a steered (dropped) segment must stay undelivered.
const STALL: Duration = Duration::from_millis(400);

fn counters(s: &XdpSteering) -> XdpCounters {
    s.counters().expect("read counters")
}

/// The bed of these tests (single queue, direct pair), or `None` when the test is skipped.
fn bed(test: &str) -> Option<TestBed> {
    if !require_privileged(test) {
        return None;
    }
    Some(TestBed::up(BedConfig::default()).unwrap())
}

/// `ip link show` of the XDP side's interface.
fn link_b(tb: &TestBed) -> String {
    tb.link_b().expect("ip link show")
}

/// Polls `cond` every 10 ms for up to `within`.
fn wait_for(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// (a) + (d) + (f): plain traffic, IPv4 and IPv6 (ARP and ND included), passes; nothing is
/// steered; dropping the handle on another thread and namespace detaches it.
#[test]
fn unsteered_traffic_passes_and_drop_detaches() {
    let Some(tb) = bed("unsteered_traffic_passes_and_drop_detaches") else {
        return;
    };
    let s = attach_b(&tb, AttachMode::Driver).expect("attach in driver mode");
    assert_eq!(s.attached_mode(), Some(AttachMode::Driver));
    assert_eq!(
        s.iface().and_then(|i| i.name.as_deref()),
        Some(tb.if_b.as_str())
    );
    let link = link_b(&tb);
    assert!(
        link.contains(&format!("prog/xdp id {}", s.prog_id())),
        "{} should show our driver-mode program: {link}",
        tb.if_b
    );

    for (ip, port) in [(IpAddr::V4(B_V4), 7001), (IpAddr::V6(B_V6), 7002)] {
        let l = tb.listen_b(ip, port);
        let mut c = tb.connect(&l);
        c.echo(b"hello through XDP_PASS").expect("echo");
    }

    let c = counters(&s);
    assert!(c.seen > 0 && c.passed > 0, "{c:?}");
    assert_eq!(c.redirected, 0, "{c:?}");
    assert_eq!(c.steered_no_xsk, 0, "{c:?}");
    assert_eq!(c.malformed, 0, "{c:?}");
    assert_eq!(c.seen, c.passed, "{c:?}");

    // Dropped here, in the test's own namespace: detach must act in namespace b.
    let prog_id = s.prog_id();
    drop(s);
    let link = link_b(&tb);
    assert!(!link.contains("xdp"), "still attached after drop: {link}");
    assert!(!link.contains(&format!("id {prog_id}")), "{link}");
}

/// (b) + (c) for one address family.
fn steered_flow_is_dropped(test: &str, server_ip: IpAddr, client_ip: IpAddr) {
    let Some(tb) = bed(test) else {
        return;
    };
    let s = attach_b(&tb, AttachMode::Driver).expect("attach in driver mode");
    let l1 = tb.listen_b(server_ip, 7101);
    let l2 = tb.listen_b(server_ip, 7102);

    let mut c1 = tb.connect(&l1);
    assert_eq!(c1.server.peer_addr().unwrap().ip(), client_ip);
    c1.echo(b"before steering").expect("echo before steering");

    // The 4-tuple the wrong way round (local = the client) matches nothing on b.
    let reversed = reversed_key(&c1);
    s.insert_flow(&reversed, FlowValue::new(99)).unwrap();
    c1.echo(b"reversed key steers nothing")
        .expect("echo with a reversed key");
    assert!(s.remove_flow(&reversed).unwrap());
    assert_eq!(counters(&s).steered_no_xsk, 0);

    // Steer the flow: with no XSK its segments are dropped, never given to the kernel.
    let key = flow_key(&c1);
    s.insert_flow(&key, FlowValue::new(1)).unwrap();
    assert_eq!(s.flow_count().unwrap(), 1);
    let before = counters(&s);
    c1.client.write_all(b"steered").expect("client write");
    c1.server.set_read_timeout(Some(STALL)).unwrap();
    let mut buf = [0u8; 7];
    // A read interrupted (the process stopped and continued, as a frozen VM is) is no
    // answer either way: read again for the rest of the wait.
    let t0 = Instant::now();
    let r = loop {
        match c1.server.read(&mut buf) {
            Err(e) if e.kind() == ErrorKind::Interrupted && t0.elapsed() < STALL => {
                let left = STALL
                    .saturating_sub(t0.elapsed())
                    .max(Duration::from_millis(1));
                c1.server.set_read_timeout(Some(left)).unwrap();
            }
            r => break r,
        }
    };
    match r {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("a steered segment reached the kernel socket: {other:?}"),
    }
    assert!(
        wait_for(Duration::from_secs(1), || counters(&s)
            .since(&before)
            .steered_no_xsk
            >= 1),
        "no drop counted: {:?}",
        counters(&s).since(&before)
    );
    let d = counters(&s).since(&before);
    assert_eq!(d.redirected, 0, "{d:?}");

    // Another connection, on another port, works meanwhile (its SYN and data pass).
    let mut c2 = tb.connect(&l2);
    c2.echo(b"unsteered neighbour").expect("second connection");
    // And the stalled one is still stalled: its retransmissions are dropped too.
    let mut probe = [0u8; 1];
    c1.server
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    assert!(c1.server.read(&mut probe).is_err(), "steered data leaked");

    // (c) Unsteer: the kernel gets the retransmission and the connection carries on.
    assert!(s.remove_flow(&key).unwrap());
    assert!(!s.remove_flow(&key).unwrap());
    assert_eq!(s.flow_count().unwrap(), 0);
    // The next retransmission timer (exponential backoff from 200 ms) fires well within this.
    c1.server
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    c1.server
        .read_exact(&mut buf)
        .expect("retransmission after remove_flow");
    assert_eq!(&buf, b"steered");
    c1.server.write_all(&buf).unwrap();
    c1.client.read_exact(&mut buf).expect("echo after unsteer");
    c1.echo(b"after unsteering").expect("echo after unsteering");

    let c = counters(&s);
    assert_eq!(c.redirected, 0, "{c:?}");
    assert_eq!(c.seen, c.passed + c.steered_no_xsk, "{c:?}");
}

#[test]
fn steered_ipv4_flow_is_dropped_until_removed() {
    steered_flow_is_dropped(
        "steered_ipv4_flow_is_dropped_until_removed",
        B_V4.into(),
        A_V4.into(),
    );
}

#[test]
fn steered_ipv6_flow_is_dropped_until_removed() {
    steered_flow_is_dropped(
        "steered_ipv6_flow_is_dropped_until_removed",
        B_V6.into(),
        A_V6.into(),
    );
}

/// (e): frames with broken headers, sent raw from namespace a, are counted and passed.
#[test]
fn malformed_frames_are_counted() {
    let Some(tb) = bed("malformed_frames_are_counted") else {
        return;
    };
    let s = attach_b(&tb, AttachMode::Driver).expect("attach in driver mode");
    let before = counters(&s);

    let v4 = Frame::tcp((A_V4, 40000).into(), (B_V4, 7777).into());
    let sent = [
        // EtherType IPv4 and a 10-octet IP header.
        frames::raw(frames::ETH_P_IP, &[0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6]),
        // IHL 4 (padded to 60 octets, so malformed whatever the link adds).
        v4.clone().v4(|ihl, _, _, _| *ihl = 4).bytes(),
        // TCP data offset 3.
        v4.with_doff(3).bytes(),
    ];
    inject_from_a(&tb, &sent);

    let n = sent.len() as u64;
    assert!(
        wait_for(Duration::from_secs(2), || counters(&s)
            .since(&before)
            .malformed
            >= n),
        "malformed frames not counted: {:?}",
        counters(&s).since(&before)
    );
    let d = counters(&s).since(&before);
    assert_eq!(d.malformed, n, "{d:?}");
    assert_eq!(d.redirected + d.steered_no_xsk, 0, "{d:?}");
}

/// (f) and the attach modes: generic mode, explicit detach, driver-or-generic picking driver,
/// and refusing to replace a program already attached.
#[test]
fn attach_modes_and_detach() {
    let Some(tb) = bed("attach_modes_and_detach") else {
        return;
    };

    let mut generic = attach_b(&tb, AttachMode::Generic).expect("attach generic");
    assert_eq!(generic.attached_mode(), Some(AttachMode::Generic));
    let link = link_b(&tb);
    assert!(link.contains("xdpgeneric"), "{link}");
    let l = tb.listen_b(B_V4.into(), 7201);
    tb.connect(&l).echo(b"generic mode").expect("echo");
    assert!(counters(&generic).passed > 0);

    // A second program is refused, and the error names the interface and the mode.
    let e = attach_b(&tb, AttachMode::Driver).unwrap_err();
    assert!(
        matches!(
            e,
            BpfError::Attach {
                mode: AttachMode::Driver,
                ..
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("{} (ifindex ", tb.if_b)) && msg.contains("driver"),
        "{msg}"
    );

    generic.detach().expect("detach");
    assert_eq!(generic.attached_mode(), None);
    generic.detach().expect("second detach is a no-op");
    let link = link_b(&tb);
    assert!(!link.contains("xdp"), "{link}");

    let auto = attach_b(&tb, AttachMode::DriverOrGeneric).expect("attach driver-or-generic");
    assert_eq!(
        auto.attached_mode(),
        Some(AttachMode::Driver),
        "veth has native XDP"
    );
    let e = attach_b(&tb, AttachMode::Driver).unwrap_err();
    assert!(matches!(e, BpfError::Attach { .. }), "{e:?}");
    tb.connect(&l).echo(b"driver mode").expect("echo");

    // The detached handle can be attached again (from namespace b).
    let ifindex = ifindex_b(&tb);
    drop(auto);
    let mode = run_in_netns(&tb.ns_b, || generic.attach_to(ifindex, AttachMode::Driver))
        .unwrap()
        .expect("re-attach");
    assert_eq!(mode, AttachMode::Driver);
    assert!(link_b(&tb).contains("prog/xdp id"));
    drop(generic);
    assert!(!link_b(&tb).contains("xdp"));
}

/// Frames the program cannot parse to the ports, between the hosts of a steered flow, sent
/// raw from namespace a: each class is dropped and counted, while fragmented UDP between the
/// same hosts (3000-octet datagrams, both families) still reaches the kernel.
#[test]
fn unparsed_frames_of_steered_hosts_are_dropped() {
    let Some(tb) = bed("unparsed_frames_of_steered_hosts_are_dropped") else {
        return;
    };
    let s = attach_b(&tb, AttachMode::Driver).expect("attach in driver mode");
    let l4 = tb.listen_b(B_V4.into(), 7301);
    let l6 = tb.listen_b(B_V6.into(), 7302);
    let (c4, c6) = (tb.connect(&l4), tb.connect(&l6));
    s.insert_flow(&flow_key(&c4), FlowValue::new(1)).unwrap();
    s.insert_flow(&flow_key(&c6), FlowValue::new(2)).unwrap();
    let before = counters(&s);

    let v4 = Frame::tcp((A_V4, 40000).into(), (B_V4, 7301).into());
    let v6 = Frame::tcp((A_V6, 40000).into(), (B_V6, 7302).into());
    let hbh = frames::Ext::Opts {
        kind: frames::IPV6_HOPOPTS,
        len8: 0,
    };
    let fragment = frames::Ext::Fragment {
        offset: 185,
        more: false,
    };
    let qinq = [frames::ETH_P_8021AD, frames::ETH_P_8021Q];
    let sent = [
        v4.clone().v4(|_, _, f, _| *f = 0x2000).bytes(),
        v4.clone().v4(|_, _, f, _| *f = 0x00b9).bytes(),
        v6.clone().v6_ext(&[fragment]).bytes(),
        v6.clone().v6_ext(&[hbh]).bytes(),
        v4.clone().tagged(&qinq).bytes(),
        v6.clone().tagged(&qinq).bytes(),
    ];
    inject_from_a(&tb, &sent);
    assert!(
        wait_for(Duration::from_secs(2), || counters(&s)
            .since(&before)
            .dropped()
            >= 6),
        "not dropped: {:?}",
        counters(&s).since(&before)
    );

    for (from, to) in [
        (IpAddr::V4(A_V4), IpAddr::V4(B_V4)),
        (A_V6.into(), B_V6.into()),
    ] {
        let rx = run_in_netns(&tb.ns_b, || UdpSocket::bind((to, 7303)))
            .unwrap()
            .expect("bind in b");
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = run_in_netns(&tb.ns_a, || UdpSocket::bind((from, 0)))
            .unwrap()
            .expect("bind in a");
        let big = vec![0x5a; 3000];
        tx.send_to(&big, (to, 7303)).expect("send 3000 octets");
        let mut buf = [0u8; 4096];
        let (n, _) = rx.recv_from(&mut buf).expect("fragmented UDP delivered");
        assert_eq!(&buf[..n], &big[..]);
    }
    let d = counters(&s).since(&before);
    assert_eq!(
        (d.dropped_fragment, d.dropped_ipv6_ext, d.dropped_vlan_stack),
        (3, 1, 2),
        "{d:?}"
    );
    assert_eq!(d.redirected + d.steered_no_xsk, 0, "{d:?}");
    assert!(d.passed >= 6, "the datagrams' fragments: {d:?}");
}
