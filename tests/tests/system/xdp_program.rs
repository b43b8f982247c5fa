//! The XDP program's parser and verdicts, frame by frame, with `BPF_PROG_TEST_RUN` (needs
//! root, no network namespaces): which frames are steered, passed or counted malformed, and
//! the map API around them.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;

use mpa_bpf::{
    BpfError, FlowKey, FlowValue, XdpAction, XdpCounters, XdpSteering, MAX_FLOWS, MAX_QUEUES,
};
use mpa_tests::frames::{self, Frame};
use mpa_tests::{raw, require_privileged};

/// Addresses as the XDP side sees them: frames go from REMOTE to LOCAL.
const LOCAL4: &str = "10.1.0.2:7777";
const REMOTE4: &str = "10.1.0.1:40000";
const LOCAL6: &str = "[fd00:1::2]:7777";
const REMOTE6: &str = "[fd00:1::1]:40000";

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn load(test: &str) -> Option<XdpSteering> {
    if !require_privileged(test) {
        return None;
    }
    Some(XdpSteering::load().unwrap_or_else(|e| panic!("load: {e:?}")))
}

/// What a frame should do.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// Steered with no XSK: XDP_DROP, steered_no_xsk + 1.
    Steered,
    /// XDP_PASS, well formed.
    Passed,
    /// XDP_PASS, malformed + 1.
    Malformed,
    /// Not parsed to the ports, maybe TCP of a steered host pair: XDP_DROP, dropped_fragment + 1.
    Fragment,
    /// Likewise, dropped_ipv6_ext + 1.
    Ipv6Ext,
    /// Likewise, dropped_vlan_stack + 1.
    VlanStack,
    /// Malformed behind the addresses of a steered host pair: XDP_DROP, malformed + 1,
    /// dropped_malformed + 1.
    MalformedDropped,
}

fn run_one(s: &XdpSteering, name: &str, frame: &[u8], want: Expect) {
    let copied = run_with(s, name, want, || s.test_run(frame));
    assert_eq!(copied, 0, "{name}: headers copied from a linear frame");
}

/// Runs the program once through `run` and checks the verdict and the counters against
/// `want`; returns `headers_copied` (the multi-buffer fallback), which `want` leaves open.
fn run_with(
    s: &XdpSteering,
    name: &str,
    want: Expect,
    run: impl FnOnce() -> Result<XdpAction, BpfError>,
) -> u64 {
    let before = s.counters().unwrap();
    let action = run().unwrap_or_else(|e| panic!("{name}: {e:?}"));
    let mut d = s.counters().unwrap().since(&before);
    let copied = std::mem::take(&mut d.headers_copied);
    let (want_action, want_delta) = match want {
        Expect::Steered => (
            XdpAction::Drop,
            XdpCounters {
                seen: 1,
                steered_no_xsk: 1,
                ..Default::default()
            },
        ),
        Expect::Passed => (
            XdpAction::Pass,
            XdpCounters {
                seen: 1,
                passed: 1,
                ..Default::default()
            },
        ),
        Expect::Malformed => (
            XdpAction::Pass,
            XdpCounters {
                seen: 1,
                passed: 1,
                malformed: 1,
                ..Default::default()
            },
        ),
        Expect::Fragment => (
            XdpAction::Drop,
            XdpCounters {
                seen: 1,
                dropped_fragment: 1,
                ..Default::default()
            },
        ),
        Expect::Ipv6Ext => (
            XdpAction::Drop,
            XdpCounters {
                seen: 1,
                dropped_ipv6_ext: 1,
                ..Default::default()
            },
        ),
        Expect::VlanStack => (
            XdpAction::Drop,
            XdpCounters {
                seen: 1,
                dropped_vlan_stack: 1,
                ..Default::default()
            },
        ),
        Expect::MalformedDropped => (
            XdpAction::Drop,
            XdpCounters {
                seen: 1,
                malformed: 1,
                dropped_malformed: 1,
                ..Default::default()
            },
        ),
    };
    assert_eq!(action, want_action, "{name}: verdict");
    assert_eq!(d, want_delta, "{name}: counters");
    copied
}

/// Steers the v4 and v6 flows the verdict table expects.
fn insert_flows(s: &XdpSteering) {
    s.insert_flow(
        &FlowKey::new(sa(LOCAL4), sa(REMOTE4)).unwrap(),
        FlowValue::new(4),
    )
    .unwrap();
    s.insert_flow(
        &FlowKey::new(sa(LOCAL6), sa(REMOTE6)).unwrap(),
        FlowValue::new(6),
    )
    .unwrap();
}

#[test]
fn parser_verdicts() {
    let Some(s) = load("parser_verdicts") else {
        return;
    };
    insert_flows(&s);
    let cases = verdict_cases();
    for (name, frame, want) in &cases {
        run_one(&s, name, frame, *want);
    }

    let c = s.counters().unwrap();
    assert_eq!(c.seen, cases.len() as u64);
    assert_eq!(
        c.seen,
        c.redirected + c.steered_no_xsk + c.passed + c.dropped(),
        "{c:?}"
    );
    assert_eq!(c.redirected, 0);
    // Per-CPU read is consistent with the sum.
    let per_cpu = s.counters_per_cpu().unwrap();
    assert!(!per_cpu.is_empty());
    assert_eq!(per_cpu.into_iter().sum::<XdpCounters>(), c);
}

/// Multi-buffer frames (the program is frags-aware: jumbo frames arrive as a linear part and
/// fragments): every frame of the verdict table, with its linear part cut at each header
/// boundary and inside headers, gets the verdict and counters it gets whole. When the cut
/// falls inside the headers they are copied out and parsed whole (`headers_copied`), never
/// judged malformed for the cut.
#[test]
fn parser_verdicts_multi_buffer() {
    let Some(s) = load("parser_verdicts_multi_buffer") else {
        return;
    };
    insert_flows(&s);
    let mut copies = 0;
    let mut runs = 0;
    for (name, frame, want) in &verdict_cases() {
        for linear in [14usize, 15, 16, 20, 33, 34, 40, 53, 54, 60, 70, 90, 130] {
            if linear >= frame.len() {
                continue;
            }
            let what = format!("{name}, linear {linear} of {}", frame.len());
            match s.test_run_linear(frame, linear as u32) {
                Err(BpfError::TestRun(e)) if runs == 0 => {
                    eprintln!("SKIP parser_verdicts_multi_buffer: this kernel takes no linear size in BPF_PROG_TEST_RUN ({e})");
                    return;
                }
                _ => {}
            }
            runs += 1;
            // The verdict run above counted once; run again through the checker.
            copies += run_with(&s, &what, *want, || s.test_run_linear(frame, linear as u32));
        }
    }
    assert!(runs > 500, "{runs} runs");
    // Most cuts fall inside the headers: each of those took the copy.
    assert!(copies > runs / 2, "{copies} copies of {runs} runs");

    // A 9000-octet steered frame (MSS 8948 with timestamps) with the kernel's own split
    // (its linear part is a page less head- and tailroom): headers read in place.
    for (name, src, dst) in [("v4 jumbo", REMOTE4, LOCAL4), ("v6 jumbo", REMOTE6, LOCAL6)] {
        let mut f = Frame::tcp(sa(src), sa(dst));
        f.payload = 9000 - if name.starts_with("v4") { 40 } else { 60 };
        let frame = f.bytes();
        assert_eq!(frame.len(), 9014);
        run_one(&s, name, &frame, Expect::Steered);
        let copied = run_with(&s, name, Expect::Steered, || {
            s.test_run_linear(&frame, 3000)
        });
        assert_eq!(copied, 0, "{name}: headers in the linear part");
    }
}

/// One row per frame: name, frame, expected verdict and counter change.
fn verdict_cases() -> Vec<(&'static str, Vec<u8>, Expect)> {
    let v4 = Frame::tcp(sa(REMOTE4), sa(LOCAL4));
    let v6 = Frame::tcp(sa(REMOTE6), sa(LOCAL6));
    use frames::{
        Ext, ETH_P_8021AD, ETH_P_8021Q, ETH_P_IP, ETH_P_IPV6, IPPROTO_ICMP, IPPROTO_ICMPV6,
        IPPROTO_UDP, IPV6_DSTOPTS, IPV6_ESP, IPV6_HOPOPTS, IPV6_NONXT, IPV6_ROUTING,
    };
    use Expect::*;
    let hbh = Ext::Opts {
        kind: IPV6_HOPOPTS,
        len8: 0,
    };
    let dst = |len8| Ext::Opts {
        kind: IPV6_DSTOPTS,
        len8,
    };
    let rt = Ext::Opts {
        kind: IPV6_ROUTING,
        len8: 2,
    };
    let frag = |offset, more| Ext::Fragment { offset, more };
    let qinq = [ETH_P_8021AD, ETH_P_8021Q];
    // Same hosts as the steered flows, other ports: not steered, but the same host pair.
    let v4_other_ports = Frame::tcp(sa("10.1.0.1:40001"), sa("10.1.0.2:80"));
    let v4_other_host = Frame::tcp(sa("10.1.0.9:40000"), sa(LOCAL4));
    let v6_other_host = Frame::tcp(sa("[fd00:1::9]:40000"), sa(LOCAL6));
    let f4 = |f: &Frame, off: u16, p: u8| {
        f.clone()
            .v4(|_, _, fo, pr| {
                *fo = off;
                *pr = p;
            })
            .bytes()
    };
    const TCP: u8 = 6;

    #[rustfmt::skip]
    let cases: Vec<(&str, Vec<u8>, Expect)> = vec![
        // IPv4
        ("v4 hit", v4.bytes(), Steered),
        ("v4 no payload", Frame { payload: 0, ..v4.clone() }.bytes(), Steered),
        ("v4 reverse direction", Frame::tcp(sa(LOCAL4), sa(REMOTE4)).bytes(), Passed),
        ("v4 other local port", Frame::tcp(sa(REMOTE4), sa("10.1.0.2:7778")).bytes(), Passed),
        ("v4 other remote addr", Frame::tcp(sa("10.1.0.9:40000"), sa(LOCAL4)).bytes(), Passed),
        ("v4 802.1Q", v4.clone().tagged(&[ETH_P_8021Q]).bytes(), Steered),
        ("v4 802.1ad", v4.clone().tagged(&[ETH_P_8021AD]).bytes(), Steered),
        ("v4 two tags (QinQ)", v4.clone().tagged(&qinq).bytes(), VlanStack),
        ("v4 two 802.1Q tags", v4.clone().tagged(&[ETH_P_8021Q, ETH_P_8021Q]).bytes(), VlanStack),
        ("v4 eight tags", v4.clone().tagged(&[ETH_P_8021Q; 8]).bytes(), VlanStack),
        ("v4 nine tags (inner unseen)", v4.clone().tagged(&[ETH_P_8021Q; 9]).bytes(), VlanStack),
        ("v4 sixteen tags", v4.clone().tagged(&[ETH_P_8021AD; 16]).bytes(), VlanStack),
        ("other host, nine tags", v4_other_host.clone().tagged(&[ETH_P_8021Q; 9]).bytes(), VlanStack),
        ("v4 QinQ, same hosts, other ports", v4_other_ports.clone().tagged(&qinq).bytes(), VlanStack),
        ("v4 QinQ, udp", v4.clone().tagged(&qinq).v4(|_, _, _, p| *p = IPPROTO_UDP).bytes(), Passed),
        ("v4 QinQ, icmp", v4.clone().tagged(&qinq).v4(|_, _, _, p| *p = IPPROTO_ICMP).bytes(), Passed),
        ("v4 QinQ, other host", v4_other_host.clone().tagged(&qinq).bytes(), Passed),
        ("v4 QinQ, reverse direction", Frame::tcp(sa(LOCAL4), sa(REMOTE4)).tagged(&qinq).bytes(), Passed),
        ("v4 QinQ, ip header cut", v4.clone().tagged(&qinq).truncated(14 + 8 + 10).bytes(), Malformed),
        ("v4 options ihl 6", v4.clone().v4(|ihl, _, _, _| *ihl = 6).bytes(), Steered),
        ("v4 options ihl 15", v4.clone().v4(|ihl, _, _, _| *ihl = 15).bytes(), Steered),
        ("v4 first fragment", f4(&v4, 0x2000, TCP), Fragment),
        ("v4 later fragment", f4(&v4, 0x2010, TCP), Fragment),
        ("v4 last fragment", f4(&v4, 0x0001, TCP), Fragment),
        ("v4 fragment, same hosts, other ports", f4(&v4_other_ports, 0x2000, TCP), Fragment),
        ("v4 802.1Q fragment", v4.clone().tagged(&[ETH_P_8021Q]).v4(|_, _, f, _| *f = 0x0010).bytes(), Fragment),
        ("v4 fragment, icmp", f4(&v4, 0x2000, IPPROTO_ICMP), Passed),
        ("v4 later fragment, udp", f4(&v4, 0x0010, IPPROTO_UDP), Passed),
        ("v4 fragment, other host", f4(&v4_other_host, 0x2000, TCP), Passed),
        ("v4 fragment, reverse direction", f4(&Frame::tcp(sa(LOCAL4), sa(REMOTE4)), 0x0010, TCP), Passed),
        ("v4 fragment, other local addr", f4(&Frame::tcp(sa(REMOTE4), sa("10.1.0.3:7777")), 0x0010, TCP), Passed),
        ("v4 icmp, steered hosts", v4.clone().v4(|_, _, _, p| *p = IPPROTO_ICMP).bytes(), Passed),
        ("v4 udp same ports", v4.clone().v4(|_, _, _, p| *p = IPPROTO_UDP).bytes(), Passed),
        ("v4 tcp doff 8", v4.clone().with_doff(8).bytes(), Steered),
        ("v4 tcp doff 15", v4.clone().with_doff(15).bytes(), Steered),
        // IPv4, malformed
        ("v4 ihl 4", v4.clone().v4(|ihl, _, _, _| *ihl = 4).bytes(), Malformed),
        ("v4 ihl 0", v4.clone().v4(|ihl, _, _, _| *ihl = 0).bytes(), Malformed),
        ("v4 version 6 in ipv4 ethertype", v4.clone().v4(|_, v, _, _| *v = 6).bytes(), Malformed),
        ("v4 header cut at 10", v4.clone().truncated(14 + 10).bytes(), Malformed),
        ("v4 header cut at 19", v4.clone().truncated(14 + 19).bytes(), Malformed),
        ("v4 ethertype, no header", frames::raw(ETH_P_IP, &[]), Malformed),
        ("v4 ihl 15 beyond frame", v4.clone().v4(|ihl, _, _, _| *ihl = 15).truncated(14 + 50).bytes(), Malformed),
        ("v4 tcp cut at 10", v4.clone().truncated(14 + 20 + 10).bytes(), MalformedDropped),
        ("v4 tcp cut at 19", v4.clone().truncated(14 + 20 + 19).bytes(), MalformedDropped),
        ("v4 tcp doff 4", v4.clone().with_doff(4).bytes(), MalformedDropped),
        ("v4 tcp doff 0", v4.clone().with_doff(0).bytes(), MalformedDropped),
        ("v4 tcp doff 15 beyond frame", Frame { payload: 0, ..v4.clone() }.with_doff(15).truncated(14 + 20 + 40).bytes(), MalformedDropped),
        ("v4 vlan tag cut", v4.clone().tagged(&[ETH_P_8021Q]).truncated(14 + 2).bytes(), Malformed),
        ("vlan tag, no room", frames::raw(ETH_P_8021Q, &[]), Malformed),
        // A malformed frame of a 4-tuple that is not steered is malformed all the same.
        ("v4 miss, tcp doff 3", Frame::tcp(sa(LOCAL4), sa(REMOTE4)).with_doff(3).bytes(), Malformed),
        // IPv6
        ("v6 hit", v6.bytes(), Steered),
        ("v6 reverse direction", Frame::tcp(sa(LOCAL6), sa(REMOTE6)).bytes(), Passed),
        ("v6 other remote port", Frame::tcp(sa("[fd00:1::1]:40001"), sa(LOCAL6)).bytes(), Passed),
        ("v6 802.1Q", v6.clone().tagged(&[ETH_P_8021Q]).bytes(), Steered),
        ("v6 tcp behind hop-by-hop", v6.clone().v6_ext(&[hbh]).bytes(), Ipv6Ext),
        ("v6 tcp behind dst, routing, dst", v6.clone().v6_ext(&[dst(1), rt, dst(0)]).bytes(), Ipv6Ext),
        ("v6 tcp behind AH", v6.clone().v6_ext(&[Ext::Ah]).bytes(), Ipv6Ext),
        ("v6 tcp behind 8 headers", v6.clone().v6_ext(&[dst(0); 8]).bytes(), Ipv6Ext),
        ("v6 9 headers (chain not followed)", v6.clone().v6_ext(&[dst(0); 9]).v6(|_, n| *n = IPPROTO_ICMPV6).bytes(), Ipv6Ext),
        ("v6 same hosts, other ports, hop-by-hop", Frame::tcp(sa("[fd00:1::1]:1"), sa("[fd00:1::2]:2")).v6_ext(&[hbh]).bytes(), Ipv6Ext),
        ("v6 icmpv6 behind hop-by-hop", v6.clone().v6_ext(&[hbh]).v6(|_, n| *n = IPPROTO_ICMPV6).bytes(), Passed),
        ("v6 udp behind dst opts", v6.clone().v6_ext(&[dst(2)]).v6(|_, n| *n = IPPROTO_UDP).bytes(), Passed),
        ("v6 no next header behind hop-by-hop", v6.clone().v6_ext(&[hbh]).v6(|_, n| *n = IPV6_NONXT).bytes(), Passed),
        ("v6 esp", v6.clone().v6(|_, n| *n = IPV6_ESP).bytes(), Passed),
        ("v6 hop-by-hop, other host", v6_other_host.clone().v6_ext(&[hbh]).bytes(), Passed),
        ("v6 hop-by-hop cut short", v6.clone().v6_ext(&[dst(4)]).truncated(14 + 40 + 20).bytes(), MalformedDropped),
        ("v6 first fragment, tcp", v6.clone().v6_ext(&[frag(0, true)]).bytes(), Fragment),
        ("v6 later fragment, tcp", v6.clone().v6_ext(&[frag(100, true)]).bytes(), Fragment),
        ("v6 last fragment behind hop-by-hop", v6.clone().v6_ext(&[hbh, frag(100, false)]).bytes(), Fragment),
        ("v6 later fragment, dst opts first", v6.clone().v6_ext(&[frag(100, false), dst(0)]).bytes(), Fragment),
        ("v6 first fragment, icmpv6", v6.clone().v6_ext(&[frag(0, true)]).v6(|_, n| *n = IPPROTO_ICMPV6).bytes(), Passed),
        ("v6 later fragment, icmpv6", v6.clone().v6_ext(&[frag(100, false)]).v6(|_, n| *n = IPPROTO_ICMPV6).bytes(), Passed),
        ("v6 fragment, other host", v6_other_host.clone().v6_ext(&[frag(100, true)]).bytes(), Passed),
        ("v6 QinQ", v6.clone().tagged(&qinq).bytes(), VlanStack),
        ("v6 QinQ, fragment", v6.clone().tagged(&qinq).v6_ext(&[frag(100, true)]).bytes(), VlanStack),
        ("v6 QinQ, icmpv6", v6.clone().tagged(&qinq).v6(|_, n| *n = IPPROTO_ICMPV6).bytes(), Passed),
        ("v6 udp", v6.clone().v6(|_, n| *n = IPPROTO_UDP).bytes(), Passed),
        ("v6 tcp doff 10", v6.clone().with_doff(10).bytes(), Steered),
        // IPv6, malformed
        ("v6 version 4", v6.clone().v6(|v, _| *v = 4).bytes(), Malformed),
        ("v6 header cut at 39", v6.clone().truncated(14 + 39).bytes(), Malformed),
        ("v6 ethertype, no header", frames::raw(ETH_P_IPV6, &[0x60]), Malformed),
        ("v6 tcp cut at 12", v6.clone().truncated(14 + 40 + 12).bytes(), MalformedDropped),
        ("v6 tcp doff 2", v6.clone().with_doff(2).bytes(), MalformedDropped),
        // Not IP
        ("arp", frames::arp_request(), Passed),
        ("unknown ethertype", frames::raw(0x88b5, &[0; 46]), Passed),
        ("bare ethernet header", frames::raw(0x88b5, &[]), Passed),
    ];
    cases
}

/// The host pairs behind the unparsed-frame drops follow the flows: counted per pair,
/// kept while any flow of the pair is steered, gone with the last; a replaced flow counts once.
#[test]
fn host_pairs_follow_the_flows() {
    let Some(s) = load("host_pairs_follow_the_flows") else {
        return;
    };
    let a = FlowKey::new(sa(LOCAL4), sa(REMOTE4)).unwrap();
    let b = FlowKey::new(sa("10.1.0.2:7778"), sa("10.1.0.1:40001")).unwrap();
    let other = FlowKey::new(sa(LOCAL4), sa("10.1.0.9:1")).unwrap();
    let fragment = Frame::tcp(sa("10.1.0.1:5"), sa("10.1.0.2:6"))
        .v4(|_, _, f, _| *f = 0x0010)
        .bytes();
    let qinq = Frame::tcp(sa("10.1.0.1:5"), sa("10.1.0.2:6"))
        .tagged(&[frames::ETH_P_8021AD, frames::ETH_P_8021Q])
        .bytes();
    let v6_ext = Frame::tcp(sa(REMOTE6), sa(LOCAL6))
        .v6_ext(&[frames::Ext::Opts {
            kind: frames::IPV6_HOPOPTS,
            len8: 0,
        }])
        .bytes();

    assert_eq!(s.host_flows(&a).unwrap(), 0);
    assert_eq!(s.test_run(&fragment).unwrap(), XdpAction::Pass);
    assert_eq!(s.test_run(&qinq).unwrap(), XdpAction::Pass);
    s.insert_flow(&a, FlowValue::new(1)).unwrap();
    s.insert_flow(&a, FlowValue::new(2)).unwrap(); // replaced: still one flow
    s.insert_flow(&b, FlowValue::new(3)).unwrap();
    s.insert_flow(&other, FlowValue::new(4)).unwrap();
    assert_eq!(s.host_flows(&a).unwrap(), 2);
    assert_eq!(s.host_flows(&b).unwrap(), 2);
    assert_eq!(s.host_flows(&other).unwrap(), 1);
    assert_eq!(s.test_run(&fragment).unwrap(), XdpAction::Drop);
    assert_eq!(s.test_run(&qinq).unwrap(), XdpAction::Drop);
    // IPv6 pairs are their own.
    assert_eq!(s.test_run(&v6_ext).unwrap(), XdpAction::Pass);

    assert!(s.remove_flow(&a).unwrap());
    assert!(!s.remove_flow(&a).unwrap()); // not counted twice
    assert_eq!(s.host_flows(&b).unwrap(), 1);
    assert_eq!(s.test_run(&fragment).unwrap(), XdpAction::Drop);
    assert!(s.remove_flow(&b).unwrap());
    assert_eq!(s.host_flows(&b).unwrap(), 0);
    assert_eq!(s.test_run(&fragment).unwrap(), XdpAction::Pass);
    assert_eq!(s.test_run(&qinq).unwrap(), XdpAction::Pass);
    assert_eq!(s.host_flows(&other).unwrap(), 1);

    let d = s.counters().unwrap();
    assert_eq!((d.dropped_fragment, d.dropped_vlan_stack), (2, 1), "{d:?}");
}

#[test]
fn flows_insert_remove_list() {
    let Some(s) = load("flows_insert_remove_list") else {
        return;
    };
    let key = FlowKey::new(sa(LOCAL4), sa(REMOTE4)).unwrap();
    let mapped = FlowKey::new(sa("[::ffff:10.1.0.2]:7777"), sa("[::ffff:10.1.0.1]:40000")).unwrap();
    let frame = Frame::tcp(sa(REMOTE4), sa(LOCAL4)).bytes();

    assert_eq!(s.flow_count().unwrap(), 0);
    assert_eq!(s.test_run(&frame).unwrap(), XdpAction::Pass);

    s.insert_flow(&key, FlowValue::new(7)).unwrap();
    assert_eq!(s.flow_count().unwrap(), 1);
    assert_eq!(s.flow(&key).unwrap(), Some(FlowValue::new(7)));
    assert_eq!(s.test_run(&frame).unwrap(), XdpAction::Drop);

    // Replacing keeps one entry; an IPv4-mapped spelling is the same flow.
    s.insert_flow(
        &mapped,
        FlowValue {
            flow_id: 8,
            flags: 0,
        },
    )
    .unwrap();
    assert_eq!(s.flow_count().unwrap(), 1);
    assert_eq!(s.flows().unwrap(), vec![(key, FlowValue::new(8))]);

    let key6 = FlowKey::new(sa(LOCAL6), sa(REMOTE6)).unwrap();
    s.insert_flow(&key6, FlowValue::new(9)).unwrap();
    let mut listed = s.flows().unwrap();
    listed.sort_by_key(|(_, v)| v.flow_id);
    assert_eq!(
        listed,
        vec![(key, FlowValue::new(8)), (key6, FlowValue::new(9))]
    );

    assert!(s.remove_flow(&key).unwrap());
    assert!(!s.remove_flow(&key).unwrap());
    assert_eq!(s.flow(&key).unwrap(), None);
    assert_eq!(s.test_run(&frame).unwrap(), XdpAction::Pass);
    assert_eq!(s.flow_count().unwrap(), 1);
    assert!(s.remove_flow(&key6).unwrap());
    assert_eq!(s.flow_count().unwrap(), 0);
}

#[test]
fn xsk_registered_means_redirect() {
    let Some(s) = load("xsk_registered_means_redirect") else {
        return;
    };
    let key = FlowKey::new(sa(LOCAL6), sa(REMOTE6)).unwrap();
    let frame = Frame::tcp(sa(REMOTE6), sa(LOCAL6)).bytes();
    s.insert_flow(&key, FlowValue::new(1)).unwrap();

    // BPF_PROG_TEST_RUN delivers on RX queue 0. An unbound AF_XDP socket is enough for the
    // map lookup to succeed (the frame would then fail at the socket, which counts it).
    let xsk = raw::xdp_socket().expect("AF_XDP socket");
    s.set_xsk(0, xsk.as_fd()).unwrap();
    let before = s.counters().unwrap();
    assert_eq!(s.test_run(&frame).unwrap(), XdpAction::Redirect);
    let d = s.counters().unwrap().since(&before);
    assert_eq!(
        d,
        XdpCounters {
            seen: 1,
            redirected: 1,
            ..Default::default()
        }
    );
    // Unsteered traffic is unaffected by the XSK.
    assert_eq!(s.test_run(&frames::arp_request()).unwrap(), XdpAction::Pass);
    // What the data path cannot take is dropped, XSK or not.
    let fragment = Frame::tcp(sa(REMOTE6), sa(LOCAL6))
        .v6_ext(&[frames::Ext::Fragment {
            offset: 0,
            more: true,
        }])
        .bytes();
    assert_eq!(s.test_run(&fragment).unwrap(), XdpAction::Drop);
    assert_eq!(
        s.test_run(
            &Frame::tcp(sa(REMOTE6), sa(LOCAL6))
                .tagged(&[frames::ETH_P_8021AD, frames::ETH_P_8021Q])
                .bytes()
        )
        .unwrap(),
        XdpAction::Drop
    );
    assert_eq!(s.test_run(&frame).unwrap(), XdpAction::Redirect);

    // An XSK on another queue does not catch queue 0's frames.
    s.clear_xsk(0).unwrap();
    s.set_xsk(1, xsk.as_fd()).unwrap();
    assert_eq!(s.test_run(&frame).unwrap(), XdpAction::Drop);
    s.clear_xsk(1).unwrap();
    s.clear_xsk(1).unwrap(); // idempotent

    // Closing the socket takes it out of the map.
    s.set_xsk(0, xsk.as_fd()).unwrap();
    drop(xsk);
    assert_eq!(s.test_run(&frame).unwrap(), XdpAction::Drop);

    // Errors: queue beyond the map; a descriptor that is not an AF_XDP socket.
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let e = s.set_xsk(MAX_QUEUES, udp.as_fd()).unwrap_err();
    assert!(
        matches!(e, BpfError::QueueOutOfRange { queue: 64, .. }),
        "{e}"
    );
    assert!(matches!(
        s.clear_xsk(MAX_QUEUES),
        Err(BpfError::QueueOutOfRange { .. })
    ));
    let e = s.set_xsk(0, udp.as_fd()).unwrap_err();
    assert!(matches!(e, BpfError::Map { op: "update", .. }), "{e:?}");
    assert!(e.to_string().contains("xsks"), "{e}");
}

#[test]
fn flow_table_full_is_typed() {
    let Some(s) = load("flow_table_full_is_typed") else {
        return;
    };
    let key = |i: u32| {
        let [a, b, c, d] = i.to_be_bytes();
        FlowKey::new(
            SocketAddr::new([10, b, c, d].into(), 80),
            SocketAddr::new([192, 168, a, 1].into(), 9),
        )
        .unwrap()
    };
    for i in 0..MAX_FLOWS {
        s.insert_flow(&key(i), FlowValue::new(i)).unwrap();
    }
    let e = s
        .insert_flow(&key(MAX_FLOWS), FlowValue::new(0))
        .unwrap_err();
    assert!(
        matches!(e, BpfError::FlowTableFull { capacity, .. } if capacity == MAX_FLOWS),
        "{e:?}"
    );
    // Replacing a present flow still works when full.
    s.insert_flow(&key(3), FlowValue::new(33)).unwrap();
    assert_eq!(s.flow(&key(3)).unwrap(), Some(FlowValue::new(33)));
    assert_eq!(s.flow_count().unwrap(), MAX_FLOWS as usize);
}

#[test]
fn attach_errors_name_the_interface() {
    let Some(mut s) = load("attach_errors_name_the_interface") else {
        return;
    };
    let e = s
        .attach_to(u32::MAX, mpa_bpf::AttachMode::Generic)
        .unwrap_err();
    assert!(matches!(e, BpfError::InvalidIfindex(u32::MAX)), "{e}");

    let missing = 0x7fff_fff0;
    let e = s
        .attach_to(missing, mpa_bpf::AttachMode::Driver)
        .unwrap_err();
    assert!(matches!(e, BpfError::Attach { .. }), "{e:?}");
    assert!(e.to_string().contains(&format!("ifindex {missing}")), "{e}");
    assert!(e.to_string().contains("driver"), "{e}");

    let e = s
        .attach_to(missing, mpa_bpf::AttachMode::DriverOrGeneric)
        .unwrap_err();
    assert!(matches!(e, BpfError::AttachFallback { .. }), "{e:?}");
    assert!(s.attached_mode().is_none());
    s.detach().unwrap(); // not attached: no-op
}

/// A frame from `src` to `dst` with `payload` octets at `seq`, `flags` (TCP flag octet) and
/// the option octets `opts` (a multiple of 4).
fn ts_frame(src: &str, dst: &str, seq: u32, flags: u8, opts: &[u8], payload: usize) -> Vec<u8> {
    let mut f = Frame::tcp(sa(src), sa(dst));
    f.doff = 5 + (opts.len() / 4) as u8;
    f.payload = payload;
    let mut b = f.bytes();
    let tcp = if sa(src).is_ipv4() { 14 + 20 } else { 14 + 40 };
    b[tcp + 4..tcp + 8].copy_from_slice(&seq.to_be_bytes());
    b[tcp + 13] = flags;
    b[tcp + 20..tcp + 20 + opts.len()].copy_from_slice(opts);
    b
}

fn ts_opts(tsval: u32) -> Vec<u8> {
    let mut o = vec![1, 1, 8, 10];
    o.extend_from_slice(&tsval.to_be_bytes());
    o.extend_from_slice(&7u32.to_be_bytes());
    o
}

/// The records behind the inherited TS.Recent (docs/environment.md, "Why TS.Recent must be
/// inherited"): kept only for watched ports, only for segments the kernel gets (not steered
/// ones), with SYN, FIN and payload in the sequence range, the Timestamps option found
/// wherever it sits, at most the newest four, taken once.
#[test]
fn timestamped_segments_of_watched_ports_are_recorded_until_steered() {
    let Some(s) = load("ts records") else { return };
    let key = FlowKey::new(sa(LOCAL4), sa(REMOTE4)).unwrap();
    // Not watched: nothing recorded.
    let f = ts_frame(REMOTE4, LOCAL4, 1000, 0x18, &ts_opts(5), 16);
    assert_eq!(s.test_run(&f).unwrap(), XdpAction::Pass);
    assert!(s.take_ts_segments(&key).unwrap().is_empty());

    s.watch_port(7777).unwrap();
    assert!(s.is_watched(7777).unwrap());
    // A SYN in Linux's option layout (MSS, SACK permitted, Timestamps, NOP, window scale).
    let mut syn_opts = vec![2, 4, 5, 0xb4, 4, 2, 8, 10];
    syn_opts.extend_from_slice(&100u32.to_be_bytes());
    syn_opts.extend_from_slice(&0u32.to_be_bytes());
    syn_opts.extend_from_slice(&[1, 3, 3, 7]);
    let syn = ts_frame(REMOTE4, LOCAL4, 999, 0x02, &syn_opts, 0);
    assert_eq!(s.test_run(&syn).unwrap(), XdpAction::Pass);
    // Data, then a pure ACK, a segment without timestamps and a RST (neither recorded).
    for f in [
        ts_frame(REMOTE4, LOCAL4, 1000, 0x18, &ts_opts(101), 120),
        ts_frame(REMOTE4, LOCAL4, 1120, 0x10, &ts_opts(102), 0),
        ts_frame(REMOTE4, LOCAL4, 1120, 0x10, &[], 0),
        ts_frame(REMOTE4, LOCAL4, 1120, 0x04, &ts_opts(103), 0),
    ] {
        assert_eq!(s.test_run(&f).unwrap(), XdpAction::Pass);
    }
    let segs = s.take_ts_segments(&key).unwrap();
    let got: Vec<(u32, u32, u32)> = segs.iter().map(|t| (t.seq, t.end, t.tsval)).collect();
    assert_eq!(
        got,
        [(999, 1000, 100), (1000, 1120, 101), (1120, 1120, 102)]
    );
    assert_eq!(mpa_bpf::choose_ts_recent(&segs, 1120), Some(102));
    // Taken once.
    assert!(s.take_ts_segments(&key).unwrap().is_empty());

    // Six segments: the newest four are kept; a FIN counts one.
    for i in 0..6u32 {
        let f = ts_frame(REMOTE4, LOCAL4, 2000 + i, 0x11, &ts_opts(200 + i), 0);
        s.test_run(&f).unwrap();
    }
    let segs = s.take_ts_segments(&key).unwrap();
    let got: Vec<(u32, u32, u32)> = segs.iter().map(|t| (t.seq, t.end, t.tsval)).collect();
    assert_eq!(
        got,
        [
            (2002, 2003, 202),
            (2003, 2004, 203),
            (2004, 2005, 204),
            (2005, 2006, 205)
        ]
    );

    // IPv6 too.
    let key6 = FlowKey::new(sa(LOCAL6), sa(REMOTE6)).unwrap();
    s.test_run(&ts_frame(REMOTE6, LOCAL6, 7, 0x18, &ts_opts(9), 10))
        .unwrap();
    let segs = s.take_ts_segments(&key6).unwrap();
    assert_eq!(segs.len(), 1);
    assert_eq!((segs[0].seq, segs[0].end, segs[0].tsval), (7, 17, 9));

    // Steered: the kernel no longer gets its segments, nothing is recorded.
    s.insert_flow(&key, FlowValue::new(1)).unwrap();
    assert_eq!(
        s.test_run(&ts_frame(REMOTE4, LOCAL4, 3000, 0x18, &ts_opts(300), 16))
            .unwrap(),
        XdpAction::Drop
    );
    assert!(s.take_ts_segments(&key).unwrap().is_empty());
    s.remove_flow(&key).unwrap();

    // Unwatching forgets the port's records.
    s.test_run(&ts_frame(REMOTE4, LOCAL4, 4000, 0x18, &ts_opts(400), 16))
        .unwrap();
    assert_eq!(s.ts_record_count(), 1);
    assert!(s.unwatch_port(7777).unwrap());
    assert!(!s.unwatch_port(7777).unwrap());
    assert_eq!(s.ts_record_count(), 0);
    s.test_run(&ts_frame(REMOTE4, LOCAL4, 5000, 0x18, &ts_opts(500), 16))
        .unwrap();
    assert!(s.take_ts_segments(&key).unwrap().is_empty());
}
