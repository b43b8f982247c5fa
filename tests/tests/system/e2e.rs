//! End to end on a test bed: a kernel-TCP MPA Initiator in ns a, the hand-over by mpa-control's
//! library in ns b, and the datapath (XDP + AF_XDP + minimal TCP + MPA receive) in ns b.
//! Byte-exact delivery is checked by digest equality.

use mpa::crc::crc32c_append;
use mpa::encoder::FpduEncoder;
use mpa::endpoint::{EndpointConfig, EndpointError, MpaStream};
use mpa::markers;
use mpa::wire::ddp::{DdpRepr, RdmapOpcode};
use mpa_app::Consumer;
use mpa_control::datapath_client::DatapathClient;
use mpa_ctl_proto::stats::FlowReport;
use mpa_ctl_proto::{Message, PostTarget};
use mpa_datapath::io::xsk::{BindMode, XskConfig};
use mpa_datapath::server::Datapath;
use mpa_stack::tcp::TcpConfig;
use mpa_tests::capture::Tcpdump;
use mpa_tests::frames::v4_ports;
use mpa_tests::{
    bin, datapath, ended_flow, hand_over, initiator_in_a, listen_in, require_privileged, stats,
    BedConfig, DatapathOptions, TestBed,
};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The datapath in ns b, 4096 UMEM frames a queue.
fn dp_on(bed: &TestBed, queues: u32) -> (Datapath, PathBuf) {
    dp_with(bed, queues, TcpConfig::default())
}

fn dp_with(bed: &TestBed, queues: u32, tcp: TcpConfig) -> (Datapath, PathBuf) {
    let opts = DatapathOptions {
        queues,
        tcp,
        xsk: XskConfig {
            frames: 4096,
            bind_mode: BindMode::Copy,
            ..XskConfig::default()
        },
        ..DatapathOptions::default()
    };
    datapath(bed, &opts)
}

struct Case {
    v6: bool,
    /// Payload size cap (0: sweep 0..=MULPDU).
    size: usize,
    initiator_markers: bool,
    responder_markers: bool,
    crc: bool,
    count: usize,
}

/// The Initiator's ULPDU `i`: sizes sweep 0..=MULPDU.
fn ulpdu(i: usize, mulpdu: usize, size: usize) -> Vec<u8> {
    // A fixed size may exceed MULPDU (RFC 5044 allows up to 64768): FPDUs then span segments.
    let len = if size > 0 {
        size
    } else {
        (i * 97) % (mulpdu + 1)
    };
    (0..len).map(|j| (i * 131 + j * 7 + 3) as u8).collect()
}

/// Runs one connection; returns the flow's final counters.
fn run_case(bed: &TestBed, dp_socket: &Path, port: u16, c: &Case) -> FlowReport {
    let addr = SocketAddr::new(bed.addr_b(c.v6), port);
    let listener = listen_in(&bed.ns_b, addr);
    let (im, crc, count, size) = (c.initiator_markers, c.crc, c.count, c.size);
    let emss = bed.config.mtu as usize - if c.v6 { 60 } else { 40 } - 12;
    let mut cfg = EndpointConfig::default();
    cfg.policy.markers_required = im;
    cfg.policy.crc_suppressed_by_admin = !crc;
    cfg.policy.startup_timeout = Duration::from_secs(30);
    let initiator = initiator_in_a(bed, addr, cfg, move |_, s| {
        let mut s = s.expect("startup with the datapath");
        let mulpdu = markers::mulpdu(emss, s.negotiated().markers_tx);
        let mut digest = 0u32;
        let mut octets = 0usize;
        for i in 0..count {
            let u = ulpdu(i, mulpdu, size);
            digest = crc32c_append(digest, &u);
            octets += u.len();
            s.send(&u).unwrap();
        }
        s.flush().unwrap();
        s.get_ref().shutdown(std::net::Shutdown::Write).unwrap();
        // The datapath closes after our FIN; nothing else may arrive.
        while s
            .recv_with(Some(Duration::from_secs(20)), |_| {
                panic!("datapath sent an FPDU")
            })
            .unwrap()
            .is_some()
        {}
        (digest, octets)
    });
    let (flow_id, mut dpc, frozen) =
        hand_over(bed, dp_socket, &listener, c.responder_markers, c.crc, None);
    let (digest, octets) = initiator.join().unwrap();
    // Wait for the datapath to report the flow gone, then compare.
    let gone = dpc.next_notification().unwrap();
    let Message::FlowGone {
        flow_id: gone_id,
        mpa_error,
        reason,
        ..
    } = gone
    else {
        panic!("{gone:?}")
    };
    assert_eq!(gone_id, flow_id);
    assert_eq!(mpa_error, None, "flow ended with {reason}");
    drop(frozen);
    let f = ended_flow(&mut dpc, flow_id);
    assert_eq!(
        f.ulpdu_digest,
        Some(format!("{digest:08x}")),
        "digest mismatch: {f:?}"
    );
    assert_eq!(f.rx.ulpdu_octets, octets as u64);
    assert_eq!(f.rx.fpdus, c.count as u64);
    assert_eq!(f.rx.crc_errors, 0);
    f
}

#[test]
fn byte_exact_delivery_through_the_datapath() {
    if !require_privileged("datapath e2e") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = dp_on(&bed, 1);
    let mut port = 7400;
    for v6 in [false, true] {
        for bits in 0..8u8 {
            let case = Case {
                v6,
                initiator_markers: bits & 1 != 0,
                responder_markers: bits & 2 != 0,
                crc: bits & 4 != 0,
                count: 300,
                size: 0,
            };
            run_case(&bed, &path, port, &case);
            port += 1;
        }
    }
    dp.stop();
}

#[test]
fn jumbo_mtu_and_every_size_up_to_mulpdu() {
    if !require_privileged("datapath e2e mtu 3506") {
        return;
    }
    let bed = TestBed::up(BedConfig {
        mtu: 3506,
        ..BedConfig::default()
    })
    .unwrap();
    let (dp, path) = dp_on(&bed, 1);
    for (i, v6) in [false, true].into_iter().enumerate() {
        let case = Case {
            v6,
            size: 0,
            initiator_markers: false,
            responder_markers: true,
            crc: true,
            count: 400,
        };
        run_case(&bed, &path, 7500 + i as u16, &case);
    }
    dp.stop();
}

/// MTU 9000 (docs/architecture.md, "Jumbo frames"): the XDP program is frags-aware and the
/// AF_XDP socket multi-buffer, so 9014-octet frames arrive as chains of three descriptors
/// (3840-octet UMEM frame data), here gathered whole (`--gather-chains`): every ULPDU size
/// up to MULPDU and 8 KiB ULPDUs, v4 and v6, octet-exact, with frames larger than 4 KiB
/// counted.
#[test]
fn jumbo_mtu_9000_through_multi_buffer() {
    jumbo_mtu_9000(false, 7550);
}

/// The same with the chains decoded from their descriptors (the default): FPDUs spanning
/// descriptors are verified from the descriptors' CRCs and placed from the UMEM frames
/// themselves.
#[test]
fn jumbo_mtu_9000_decoded_from_the_descriptors() {
    jumbo_mtu_9000(true, 7560);
}

fn jumbo_mtu_9000(chains_in_pieces: bool, mut port: u16) {
    if !require_privileged("datapath e2e mtu 9000") {
        return;
    }
    let bed = TestBed::up(BedConfig {
        mtu: 9000,
        ..BedConfig::default()
    })
    .unwrap();
    let opts = DatapathOptions {
        xsk: XskConfig {
            frames: 4096,
            bind_mode: BindMode::Copy,
            ..XskConfig::default()
        },
        chains_in_pieces,
        ..DatapathOptions::default()
    };
    let (dp, path) = datapath(&bed, &opts);
    for v6 in [false, true] {
        for size in [0, 8192] {
            let case = Case {
                v6,
                size,
                initiator_markers: false,
                responder_markers: true,
                crc: true,
                count: 400,
            };
            run_case(&bed, &path, port, &case);
            port += 1;
        }
    }
    let mut dpc = DatapathClient::connect(&path, Duration::from_secs(5)).unwrap();
    let st = stats(&mut dpc);
    let ring = st.queues[0].ring;
    assert!(
        ring.rx_multi_buffer > 0,
        "no frame above a UMEM frame: {ring:?}"
    );
    // Full-sized segments: MTU 9000 plus the Ethernet header.
    assert_eq!(ring.rx_largest, 9014, "{ring:?}");
    assert_eq!(ring.rx_chain_dropped, 0, "{ring:?}");
    let spanned: u64 = (st.queues[0].flows.iter().chain(&st.ended_flows))
        .map(|f| f.rx.spanned_in_place)
        .sum();
    let joined: u64 = (st.queues[0].flows.iter().chain(&st.ended_flows))
        .map(|f| f.rx.crc_from_segments)
        .sum();
    if chains_in_pieces {
        assert!(spanned > 0, "no FPDU placed across descriptors");
        assert!(joined > 0, "no FPDU verified from its descriptors' CRCs");
    }
    dp.stop();
}

#[test]
fn loss_in_the_bridge_is_repaired_with_sack() {
    if !require_privileged("datapath e2e loss") {
        return;
    }
    for (i, loss) in [1u8, 5].into_iter().enumerate() {
        let port = 7600 + i as u16;
        let bed = TestBed::up(BedConfig {
            bridge: true,
            loss_percent: loss,
            loss_port: port,
            ..BedConfig::default()
        })
        .unwrap();
        let (dp, path) = dp_on(&bed, 1);
        let case = Case {
            v6: false,
            size: 4096,
            initiator_markers: false,
            responder_markers: true,
            crc: true,
            count: 4000,
        };
        let f = run_case(&bed, &path, port, &case);
        assert!(bed.dropped().unwrap() > 0, "{loss}% loss dropped nothing");
        assert!(
            f.out_of_order_segments > 0,
            "no out-of-order arrivals at {loss}%: {f:?}"
        );
        assert!(f.sack_blocks_sent > 0, "SACK not used at {loss}%: {f:?}");
        dp.stop();
    }
}

#[test]
fn two_queues_sixteen_concurrent_connections() {
    if !require_privileged("datapath e2e 2 queues") {
        return;
    }
    let bed = TestBed::up(BedConfig {
        queues: 2,
        ..BedConfig::default()
    })
    .unwrap();
    let (dp, path) = dp_on(&bed, 2);
    let flows: Vec<FlowReport> = std::thread::scope(|s| {
        // Sixteen, so that both queues get some (each connection's queue is the sender's
        // pick: with eight, all on one queue happened once in a loaded run).
        let handles: Vec<_> = (0..16u16)
            .map(|i| {
                let (bed, path) = (&bed, &path);
                s.spawn(move || {
                    let case = Case {
                        v6: i % 2 == 1,
                        size: 0,
                        initiator_markers: i & 2 != 0,
                        responder_markers: i & 4 != 0,
                        crc: true,
                        count: 500,
                    };
                    run_case(bed, path, 7700 + i, &case)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(flows.len(), 16);
    // Both queues carried traffic (the peer's connections hash to both).
    let mut dpc = DatapathClient::connect(&path, Duration::from_secs(5)).unwrap();
    let stats = stats(&mut dpc);
    assert_eq!(stats.queues.len(), 2);
    for q in &stats.queues {
        assert!(q.ring.rx_frames > 0, "queue idle: {q:?}");
    }
    dp.stop();
}

/// Connects an Initiator in ns a and runs `f` on the established stream.
fn initiator_with<T: Send + 'static>(
    bed: &TestBed,
    addr: SocketAddr,
    f: impl FnOnce(MpaStream<TcpStream>) -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let mut cfg = EndpointConfig::default();
    cfg.policy.startup_timeout = Duration::from_secs(10);
    initiator_in_a(bed, addr, cfg, |_, s| {
        f(s.expect("startup with the datapath"))
    })
}

#[test]
fn crc_error_terminates_that_connection_only_and_a_reset_is_error_1() {
    if !require_privileged("datapath error paths") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = dp_on(&bed, 1);
    // A capture in ns a of every segment from b: the frozen kernel sockets must never speak.
    let pcap = std::env::temp_dir().join(format!("mpa-e2e-{}.pcap", std::process::id()));
    let dump = Tcpdump::start(
        &bed,
        &bed.ns_a,
        &bed.if_a,
        &pcap,
        &["tcp and src host 10.99.0.2"],
    );
    std::thread::scope(|s| {
        // A good connection runs beside the bad ones.
        let good = s.spawn(|| {
            let case = Case {
                v6: false,
                size: 1000,
                initiator_markers: true,
                responder_markers: true,
                crc: true,
                count: 3000,
            };
            run_case(&bed, &path, 7800, &case)
        });
        // Error 2: one corrupt FPDU; the datapath answers with a Terminate, then closes.
        let addr = SocketAddr::new(bed.addr_b(false), 7801);
        let listener = listen_in(&bed.ns_b, addr);
        let bad = initiator_with(&bed, addr, |mut s| {
            let mut wire = Vec::new();
            FpduEncoder::new(s.negotiated().markers_tx)
                .encode(&[7u8; 300], &mut wire)
                .unwrap();
            wire[100] ^= 0x10;
            std::io::Write::write_all(&mut s.get_ref(), &wire).unwrap();
            loop {
                match s.recv_with(Some(Duration::from_secs(10)), |_| {}) {
                    Ok(Some(_)) => continue,
                    other => return other.map(|_| ()),
                }
            }
        });
        let (flow_id, mut dpc, frozen) = hand_over(&bed, &path, &listener, true, true, None);
        let r = bad.join().unwrap();
        assert!(
            matches!(
                r,
                Err(EndpointError::Terminated {
                    layer: 2,
                    error_type: 0,
                    error_code: 2
                })
            ),
            "{r:?}"
        );
        let Message::FlowGone {
            flow_id: id,
            mpa_error,
            ..
        } = dpc.next_notification().unwrap()
        else {
            panic!()
        };
        assert_eq!((id, mpa_error), (flow_id, Some(2)));
        drop(frozen);
        // Error 1: the peer resets.
        let addr = SocketAddr::new(bed.addr_b(false), 7802);
        let listener = listen_in(&bed.ns_b, addr);
        let reset = initiator_with(&bed, addr, |mut s| {
            s.send(&[1u8; 2000]).unwrap();
            s.flush().unwrap();
            std::thread::sleep(Duration::from_millis(200));
            let sock = s.into_inner().unwrap();
            nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::Linger, &libc_linger0())
                .unwrap();
            drop(sock);
        });
        let (flow_id, mut dpc, frozen) = hand_over(&bed, &path, &listener, false, true, None);
        reset.join().unwrap();
        let Message::FlowGone {
            flow_id: id,
            mpa_error,
            reason,
            ..
        } = dpc.next_notification().unwrap()
        else {
            panic!()
        };
        assert_eq!((id, mpa_error), (flow_id, Some(1)), "{reason}");
        drop(frozen);
        // The good one was not disturbed.
        let g = good.join().unwrap();
        assert_eq!(g.rx.fpdus, 3000);
    });
    std::thread::sleep(Duration::from_millis(300));
    dump.stop();
    // No RST ever left b (the datapath closes cleanly; frozen sockets close in repair mode).
    let out = std::process::Command::new("tcpdump")
        .args([
            "-r",
            &pcap.to_string_lossy(),
            "-n",
            "tcp[tcpflags] & tcp-rst != 0",
        ])
        .output()
        .unwrap();
    let rsts = String::from_utf8_lossy(&out.stdout).lines().count();
    let all = std::process::Command::new("tcpdump")
        .args(["-r", &pcap.to_string_lossy(), "-n"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&all.stdout).lines().count() > 10,
        "capture saw nothing: {}",
        String::from_utf8_lossy(&all.stderr)
    );
    assert_eq!(rsts, 0, "{}", String::from_utf8_lossy(&out.stdout));
    let _ = std::fs::remove_file(&pcap);
    dp.stop();
}

fn libc_linger0() -> nix::libc::linger {
    nix::libc::linger {
        l_onoff: 1,
        l_linger: 0,
    }
}

#[test]
fn mpa_peer_connect_through_the_datapath() {
    if !require_privileged("datapath e2e with mpa-peer") {
        return;
    }
    let peer = bin("mpa-peer");
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = dp_on(&bed, 1);
    for (i, (markers, crc, size)) in [
        (true, true, "4096"),
        (false, false, "1430"),
        (true, false, "0"),
    ]
    .into_iter()
    .enumerate()
    {
        let port = 7900 + i as u16;
        let addr = SocketAddr::new(bed.addr_b(false), port);
        let listener = listen_in(&bed.ns_b, addr);
        let mut args = vec![
            "connect".to_string(),
            "--to".into(),
            addr.to_string(),
            "--count".into(),
            "2000".into(),
        ];
        args.extend([
            "--size".into(),
            size.to_string(),
            "--timeout".into(),
            "30".into(),
        ]);
        if markers {
            args.push("--markers".into());
        }
        args.push(if crc { "--crc" } else { "--no-crc" }.into());
        let mut cmd = bed.command(&bed.ns_a, &peer.to_string_lossy());
        cmd.args(&args);
        let handle = std::thread::spawn(move || cmd.output());
        let (flow_id, mut dpc, frozen) = hand_over(&bed, &path, &listener, markers, crc, None);
        let out = handle.join().unwrap().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let sent: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let Message::FlowGone { mpa_error, .. } = dpc.next_notification().unwrap() else {
            panic!()
        };
        assert_eq!(mpa_error, None);
        drop(frozen);
        let f = ended_flow(&mut dpc, flow_id);
        assert_eq!(
            f.ulpdu_digest.as_deref(),
            sent["ulpdu_digest"].as_str(),
            "{f:?} vs {sent}"
        );
        assert_eq!(f.rx.fpdus, 2000);
        assert_eq!(sent["markers_tx"], markers);
        assert_eq!(sent["crc"], crc);
    }
    dp.stop();
}

#[test]
fn rev2_peer_to_peer_rtr_is_consumed_by_the_datapath() {
    if !require_privileged("datapath e2e rtr") {
        return;
    }
    use mpa::startup::{RtrSet, RtrType};
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = dp_on(&bed, 1);
    let rtrs = [
        RtrType::ZeroLengthSend,
        RtrType::ZeroLengthWrite,
        RtrType::ZeroLengthReadRequest,
    ];
    for (i, rtr) in rtrs.into_iter().enumerate() {
        let addr = SocketAddr::new(bed.addr_b(false), 8000 + i as u16);
        let listener = listen_in(&bed.ns_b, addr);
        let mut cfg = EndpointConfig::default();
        cfg.policy.revision = 2;
        cfg.policy.p2p = true;
        cfg.policy.rtr_send = RtrSet::single(rtr);
        let initiator = initiator_in_a(&bed, addr, cfg, move |_, s| {
            let mut s = s.expect("rev 2 startup");
            assert_eq!(s.negotiated().rtr, Some(rtr));
            let mut digest = 0u32;
            for n in 0..100usize {
                let u = ulpdu(n, 1430, 0);
                digest = crc32c_append(digest, &u);
                s.send(&u).unwrap();
            }
            s.flush().unwrap();
            s.get_ref().shutdown(std::net::Shutdown::Write).unwrap();
            // A Read RTR is answered with a zero-length Read Response; nothing else comes.
            let mut got = Vec::new();
            while s
                .recv_with(Some(Duration::from_secs(20)), |u| got.push(u.to_vec()))
                .unwrap()
                .is_some()
            {}
            let expected_replies = usize::from(rtr == RtrType::ZeroLengthReadRequest);
            assert_eq!(got.len(), expected_replies, "{rtr:?}");
            for r in &got {
                let (repr, off) = mpa::wire::ddp::DdpRepr::parse(r, 1).unwrap();
                assert!(matches!(
                    repr,
                    mpa::wire::ddp::DdpRepr::Tagged {
                        opcode: mpa::wire::ddp::RdmapOpcode::RdmaReadResponse,
                        last: true,
                        ..
                    }
                ));
                assert_eq!(off, r.len(), "zero-length");
            }
            digest
        });
        let (flow_id, mut dpc, frozen) = hand_over(&bed, &path, &listener, false, true, None);
        let digest = initiator.join().unwrap();
        let Message::FlowGone {
            mpa_error, reason, ..
        } = dpc.next_notification().unwrap()
        else {
            panic!()
        };
        assert_eq!(mpa_error, None, "{rtr:?}: {reason}");
        drop(frozen);
        let f = ended_flow(&mut dpc, flow_id);
        assert_eq!(f.ulpdu_digest, Some(format!("{digest:08x}")));
        assert_eq!(f.rx.fpdus, 100, "the RTR is not delivered as data");
    }
    dp.stop();
}

/// A ULPDU: DDP header `h` (version `v` in both DV and RV unless patched) and `n` payload octets.
fn ddp_ulpdu(h: DdpRepr, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; h.header_len() + n];
    h.emit(&mut v, 1).unwrap();
    for (i, b) in v[h.header_len()..].iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    v
}

fn write(stag: u32, to: u64, n: usize) -> Vec<u8> {
    ddp_ulpdu(
        DdpRepr::Tagged {
            last: true,
            opcode: RdmapOpcode::RdmaWrite,
            stag,
            to,
        },
        n,
    )
}

fn send(qn: u32, msn: u32, mo: u32, n: usize) -> Vec<u8> {
    ddp_ulpdu(
        DdpRepr::Untagged {
            last: true,
            opcode: RdmapOpcode::Send,
            inv_stag: 0,
            qn,
            msn,
            mo,
        },
        n,
    )
}

#[test]
fn placement_violations_terminate_with_rfc_codes_and_spare_other_connections() {
    if !require_privileged("datapath placement errors") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    // Short TIME-WAIT: each case's flow is reported gone once it ends.
    let tcp = TcpConfig {
        time_wait: Duration::from_millis(200),
        ..TcpConfig::default()
    };
    let (dp, path) = dp_with(&bed, 1, tcp);
    let mut consumer = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
    let a = consumer.create_region(1 << 20, 1, true, false).unwrap();
    let b = consumer.create_region(4096, 1, false, true).unwrap();
    let c = consumer.create_region(4096, 2, true, false).unwrap();
    let (sa, sb, sc) = (a.info().stag, b.info().stag, c.info().stag);
    assert_ne!(sa & 0xff_ff_ff_00, sb & 0xff_ff_ff_00);
    let len_a = a.info().len;
    // (what, buffers to post first, the ULPDU, expected Terminate layer/type/code)
    let mut bad_ddp_version = write(sa, 0, 8);
    bad_ddp_version[0] = (bad_ddp_version[0] & !3) | 2;
    let mut bad_rdmap_version = write(sa, 0, 8);
    bad_rdmap_version[1] = (bad_rdmap_version[1] & 0x3f) | 0x80;
    let mut tagged_send = write(sa, 0, 8);
    tagged_send[1] = (tagged_send[1] & 0xf0) | 3;
    let mut read_request = send(1, 1, 0, 16);
    read_request[1] = (read_request[1] & 0xf0) | 1;
    type Case = (&'static str, u32, Vec<u8>, (u8, u8, u8));
    let cases: Vec<Case> = vec![
        ("unknown STag", 0, write(sa ^ 0xff, 0, 10), (1, 1, 0)),
        ("beyond the region", 0, write(sa, len_a - 10, 20), (1, 1, 1)),
        ("STag of another domain", 0, write(sc, 0, 10), (1, 1, 2)),
        ("TO wraps", 0, write(sa, u64::MAX - 5, 10), (1, 1, 3)),
        ("no remote write access", 0, write(sb, 0, 10), (0, 1, 2)),
        ("DDP version", 0, bad_ddp_version, (1, 1, 4)),
        ("RDMAP version", 0, bad_rdmap_version, (0, 2, 5)),
        ("Send opcode in a tagged segment", 0, tagged_send, (0, 2, 6)),
        (
            "Send without a posted buffer",
            0,
            send(0, 1, 0, 10),
            (1, 2, 2),
        ),
        (
            "Send with a MSN out of range",
            1,
            send(0, 2, 0, 10),
            (1, 2, 3),
        ),
        (
            "Send with MO beyond the buffer",
            1,
            send(0, 1, 200, 0),
            (1, 2, 4),
        ),
        (
            "Send longer than the buffer",
            1,
            send(0, 1, 0, 150),
            (1, 2, 5),
        ),
        ("Send on queue 3", 1, send(3, 1, 0, 10), (1, 2, 1)),
        (
            "RDMA Read Request (not served)",
            0,
            read_request,
            (0, 2, 0xff),
        ),
    ];
    std::thread::scope(|s| {
        // A good placing connection runs beside the bad ones: 2000 writes into region A.
        let good_addr = SocketAddr::new(bed.addr_b(false), 7820);
        let listener = listen_in(&bed.ns_b, good_addr);
        let good = initiator_with(&bed, good_addr, move |mut s| {
            for i in 0..2000u64 {
                s.send(&write(sa, i * 500, 500)).unwrap();
            }
            s.flush().unwrap();
            s.get_ref().shutdown(std::net::Shutdown::Write).unwrap();
            while s
                .recv_with(Some(Duration::from_secs(20)), |_| {})
                .unwrap()
                .is_some()
            {}
        });
        let bed = &bed;
        let path = &path;
        let good_side = s.spawn(move || {
            let (flow_id, mut dpc, frozen) = hand_over(bed, path, &listener, false, true, Some(1));
            good.join().unwrap();
            let gone = dpc.next_notification().unwrap();
            drop(frozen);
            (flow_id, gone, ended_flow(&mut dpc, flow_id))
        });
        for (i, (what, post, ulpdu, want)) in cases.into_iter().enumerate() {
            if post > 0 {
                consumer
                    .post_recv(PostTarget::Pd(1), sa, 0, 100, post)
                    .unwrap();
            }
            let addr = SocketAddr::new(bed.addr_b(false), 7821 + i as u16);
            let listener = listen_in(&bed.ns_b, addr);
            let peer = initiator_with(bed, addr, move |mut s| {
                s.send(&ulpdu).unwrap();
                s.flush().unwrap();
                loop {
                    match s.recv_with(Some(Duration::from_secs(10)), |_| {}) {
                        Ok(Some(_)) => continue,
                        other => return other.map(|_| ()),
                    }
                }
            });
            let (flow_id, mut dpc, frozen) = hand_over(bed, path, &listener, false, true, Some(1));
            let r = peer.join().unwrap();
            match r {
                Err(EndpointError::Terminated {
                    layer,
                    error_type,
                    error_code,
                }) => assert_eq!((layer, error_type, error_code), want, "{what}"),
                other => panic!("{what}: the peer saw {other:?}"),
            }
            let Message::FlowGone {
                flow_id: id,
                mpa_error,
                terminate,
                reason,
            } = dpc.next_notification().unwrap()
            else {
                panic!("{what}")
            };
            drop(frozen);
            assert_eq!(id, flow_id);
            assert_eq!(mpa_error, None, "{what}: {reason}");
            let t = terminate.unwrap_or_else(|| panic!("{what}: no Terminate ({reason})"));
            assert_eq!(
                (t.layer, t.error_type, t.error_code, t.sent),
                (want.0, want.1, want.2, true),
                "{what}: {reason}"
            );
        }
        // The peer's own Terminate ends its connection too, reported as received.
        let addr = SocketAddr::new(bed.addr_b(false), 7840);
        let listener = listen_in(&bed.ns_b, addr);
        let peer = initiator_with(bed, addr, move |mut s| {
            s.send(&write(sa, 0, 100)).unwrap();
            s.send_terminate(mpa::MpaErrorCode::TcpClosed).unwrap();
            while let Ok(Some(_)) = s.recv_with(Some(Duration::from_secs(10)), |_| {}) {}
        });
        let (flow_id, mut dpc, frozen) = hand_over(bed, path, &listener, false, true, Some(1));
        peer.join().unwrap();
        let Message::FlowGone {
            flow_id: id,
            terminate,
            ..
        } = dpc.next_notification().unwrap()
        else {
            panic!()
        };
        drop(frozen);
        assert_eq!(id, flow_id);
        let t = terminate.expect("peer Terminate reported");
        assert_eq!(
            (t.layer, t.error_type, t.error_code, t.sent),
            (2, 0, 1, false)
        );
        // The good connection was not disturbed: every write placed, region A holds them.
        let (_, gone, stats) = good_side.join().unwrap();
        assert!(
            matches!(
                gone,
                Message::FlowGone {
                    mpa_error: None,
                    terminate: None,
                    ..
                }
            ),
            "{gone:?}"
        );
        assert_eq!(stats.rx.placed_in_order, 2000, "{stats:?}");
        assert_eq!(stats.rx.completions, 2000, "{stats:?}");
        let mut got = vec![0u8; 500];
        for i in [0u64, 1, 999, 1999] {
            assert!(a.read(i * 500, &mut got));
            let want: Vec<u8> = (0..500).map(|j| (j % 251) as u8).collect();
            assert_eq!(got, want, "write {i}");
        }
    });
    dp.stop();
}

/// `tshark -r FILE -T fields -e F…`: one row per frame, fields tab-separated, repeated
/// occurrences comma-separated.
fn tshark_fields(pcap: &Path, fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = std::process::Command::new("tshark");
    // MPA is found by a heuristic, which tshark otherwise tries only after the dissector of
    // either port: an ephemeral port registered to another protocol would hide the connection
    // (docs/capture.md, "The startup frames").
    cmd.args(["-o", "tcp.try_heuristic_first:TRUE"]);
    cmd.args(["-n", "-r"]).arg(pcap).args(["-T", "fields"]);
    cmd.args(["-E", "occurrence=a", "-E", "aggregator=,"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark (make deps installs it)");
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// Values of one field over every frame (repeated occurrences counted each).
fn occurrences(rows: &[Vec<String>], col: usize, pred: impl Fn(&[String]) -> bool) -> Vec<String> {
    rows.iter()
        .filter(|r| pred(r))
        .filter_map(|r| r.get(col))
        .flat_map(|v| v.split(','))
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn capture_of_all_flows_opens_in_tshark_with_mpa_fpdus_both_ways() {
    if !require_privileged("datapath capture") {
        return;
    }
    let control = bin("mpa-control");
    let peer = bin("mpa-peer");
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = dp_on(&bed, 1);
    let dir = std::env::temp_dir();
    let pcap = dir.join(format!("mpa-capture-{}.pcap", std::process::id()));
    let socket = path.to_string_lossy().to_string();
    let capture_cmd = |out: &Path, which: &[&str], duration: &str| {
        let mut c = std::process::Command::new(&control);
        c.arg("capture").args(which);
        c.args([
            "--duration",
            duration,
            "--socket",
            &socket,
            "--json",
            "--out",
        ]);
        c.arg(out);
        c
    };
    // Refused: a flow that does not exist.
    let out = capture_cmd(&dir.join("mpa-capture-none.pcap"), &["--flow", "999"], "1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no flow 999"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The capture of everything, ended by SIGINT once both connections are done.
    let child = capture_cmd(&pcap, &["--all"], "120")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut dpc = DatapathClient::connect(&path, Duration::from_secs(5)).unwrap();
    let t0 = std::time::Instant::now();
    loop {
        if stats(&mut dpc).capture.is_some() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "capture never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // One capture at a time.
    let out = capture_cmd(&dir.join("mpa-capture-second.pcap"), &["--all"], "1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already running"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 1: CRC, no markers: tshark reassembles FPDUs that span segments.
    let plain_port = 8100;
    let case = Case {
        v6: false,
        size: 700,
        initiator_markers: false,
        responder_markers: false,
        crc: true,
        count: 100,
    };
    run_case(&bed, &path, plain_port, &case);
    // 2: markers and CRC, one FPDU per segment (tshark's MPA dissector finds markers only in
    // segments that hold one FPDU each).
    let marker_port = 8101;
    let addr = SocketAddr::new(bed.addr_b(false), marker_port);
    let listener = listen_in(&bed.ns_b, addr);
    let mut cmd = bed.command(&bed.ns_a, &peer.to_string_lossy());
    cmd.args(["connect", "--to", &addr.to_string(), "--count", "50"]);
    cmd.args([
        "--size",
        "1000",
        "--fpdu-per-segment",
        "--markers",
        "--crc",
        "--timeout",
        "30",
    ]);
    let sender = std::thread::spawn(move || cmd.output());
    let (flow_id, mut dpc2, frozen) = hand_over(&bed, &path, &listener, true, true, None);
    let sent = sender.join().unwrap().unwrap();
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let Message::FlowGone { mpa_error, .. } = dpc2.next_notification().unwrap() else {
        panic!()
    };
    assert_eq!(mpa_error, None);
    drop(frozen);
    assert_eq!(ended_flow(&mut dpc2, flow_id).rx.fpdus, 50);
    // End the capture as an operator would (Ctrl-C): the file is complete.
    let killed = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["reason"], "stopped", "{summary}");
    assert_eq!(summary["dropped"], 0, "{summary}");
    assert_eq!(
        summary["reconstructed"], 2,
        "one Request per connection: {summary}"
    );
    assert!(summary["rx"].as_u64().unwrap() >= 100, "{summary}");
    assert!(summary["tx"].as_u64().unwrap() >= 4, "{summary}");
    assert_eq!(
        summary["bytes"].as_u64().unwrap(),
        std::fs::metadata(&pcap).unwrap().len(),
        "{summary}"
    );
    // tshark recognises the startup (the rebuilt Requests, the datapath's Replies) and the
    // FPDUs of both connections, with good CRCs; the capture holds both directions.
    let rows = tshark_fields(
        &pcap,
        &[
            "ip.src",
            "tcp.srcport",
            "tcp.dstport",
            "iwarp_mpa.key.req",
            "iwarp_mpa.key.rep",
            "iwarp_mpa.ulpdulength",
            "iwarp_mpa.marker_fpduptr",
        ],
    );
    let (a, b) = (bed.addr_a(false).to_string(), bed.addr_b(false).to_string());
    assert!(rows.iter().any(|r| r[0] == a) && rows.iter().any(|r| r[0] == b));
    let to_port = |p: u16| move |r: &[String]| r[2] == p.to_string();
    let from_port = |p: u16| move |r: &[String]| r[1] == p.to_string();
    for port in [plain_port, marker_port] {
        assert_eq!(
            occurrences(&rows, 3, to_port(port)).len(),
            1,
            "Request to {port}"
        );
        assert_eq!(
            occurrences(&rows, 4, from_port(port)).len(),
            1,
            "Reply from {port}"
        );
    }
    let plain = occurrences(&rows, 5, to_port(plain_port));
    assert_eq!(plain.len(), 100, "FPDUs without markers: {plain:?}");
    assert!(plain.iter().all(|l| l == "700"), "{plain:?}");
    let marked = occurrences(&rows, 5, to_port(marker_port));
    assert_eq!(marked.len(), 50, "FPDUs with markers: {marked:?}");
    assert!(
        !occurrences(&rows, 6, to_port(marker_port)).is_empty(),
        "markers shown"
    );
    let verbose = std::process::Command::new("tshark")
        .args(["-o", "tcp.try_heuristic_first:TRUE", "-n", "-V", "-r"])
        .arg(&pcap)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&verbose.stdout);
    assert!(text.matches("(Good CRC32)").count() >= 150, "CRCs checked");
    assert_eq!(text.matches("Bad CRC32").count(), 0);
    let _ = std::fs::remove_file(&pcap);
    dp.stop();
}

/// The records of a libpcap file written by `mpa-control capture`: (captured octets, length on
/// the wire). Checks the file header on the way.
fn pcap_records(file: &[u8]) -> Vec<(Vec<u8>, u32)> {
    let u32_at = |at: usize| u32::from_ne_bytes(file[at..at + 4].try_into().unwrap());
    assert_eq!(u32_at(0), 0xa1b2_3c4d, "nanosecond libpcap magic");
    assert_eq!(u32_at(20), 1, "LINKTYPE_ETHERNET");
    let mut at = 24;
    let mut out = Vec::new();
    while at < file.len() {
        let (incl, orig) = (u32_at(at + 8) as usize, u32_at(at + 12));
        out.push((file[at + 16..at + 16 + incl].to_vec(), orig));
        at += 16 + incl;
    }
    assert_eq!(at, file.len(), "whole records only");
    out
}

#[test]
fn capture_bounds_flow_filter_snaplen_size_and_duration() {
    if !require_privileged("datapath capture bounds") {
        return;
    }
    use mpa_control::capture::{capture, CaptureOptions};
    use std::sync::atomic::AtomicBool;
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = dp_on(&bed, 1);
    let capture_running = |path: &Path| {
        let mut dpc = DatapathClient::connect(path, Duration::from_secs(5)).unwrap();
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if stats(&mut dpc).capture.is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("capture never started");
    };
    // Two connections, held until the capture of the first one runs, then sending 1000-octet
    // ULPDUs: only the first one's frames are captured, each cut to 60 octets, for 1.5 s.
    let mut conns = Vec::new();
    for port in [8110u16, 8111] {
        let addr = SocketAddr::new(bed.addr_b(false), port);
        let listener = listen_in(&bed.ns_b, addr);
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let peer = initiator_with(&bed, addr, move |mut s| {
            go_rx.recv().unwrap();
            for _ in 0..200 {
                s.send(&[5u8; 1000]).unwrap();
            }
            s.flush().unwrap();
            s.get_ref().shutdown(std::net::Shutdown::Write).unwrap();
            while let Ok(Some(_)) = s.recv_with(Some(Duration::from_secs(20)), |_| {}) {}
        });
        let (flow_id, dpc, frozen) = hand_over(&bed, &path, &listener, false, true, None);
        conns.push((port, flow_id, go_tx, peer, dpc, frozen));
    }
    let (port_a, flow_a) = (conns[0].0, conns[0].1);
    let p = path.clone();
    let cap = std::thread::spawn(move || {
        let mut dpc = DatapathClient::connect(&p, Duration::from_secs(5)).unwrap();
        let opts = CaptureOptions {
            flow: Some(flow_a),
            max_bytes: 64 << 20,
            duration: Duration::from_millis(1500),
            snaplen: 60,
        };
        let t0 = std::time::Instant::now();
        let r = capture(&mut dpc, &opts, Vec::new(), &AtomicBool::new(false)).unwrap();
        (r, t0.elapsed())
    });
    capture_running(&path);
    for (_, _, go, ..) in &conns {
        go.send(()).unwrap();
    }
    let ((summary, file), took) = cap.join().unwrap();
    assert_eq!(summary.reason, "duration");
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert_eq!(summary.bytes, file.len() as u64);
    let records = pcap_records(&file);
    assert_eq!(records.len() as u64, summary.frames);
    assert!(summary.frames > 20, "{summary:?}");
    assert_eq!(summary.dropped, 0, "{summary:?}");
    for (data, orig) in &records {
        assert!(data.len() <= 60 && data.len() as u32 <= *orig);
        let (src, dst) = v4_ports(data);
        assert!(
            src == port_a || dst == port_a,
            "another flow's frame: {src} → {dst}"
        );
    }
    assert!(records
        .iter()
        .any(|(d, orig)| d.len() == 60 && *orig > 1000));
    for (_, flow_id, _, peer, mut dpc, frozen) in conns {
        peer.join().unwrap();
        let gone = dpc.next_notification().unwrap();
        assert!(
            matches!(gone, Message::FlowGone { flow_id: id, mpa_error: None, .. } if id == flow_id),
            "{gone:?}"
        );
        drop(frozen);
    }
    // The size bound: the capture of everything ends by itself, the file within the bound.
    let max = 24 + 10 * (16 + 60);
    let p = path.clone();
    let cap = std::thread::spawn(move || {
        let mut dpc = DatapathClient::connect(&p, Duration::from_secs(5)).unwrap();
        let opts = CaptureOptions {
            flow: None,
            max_bytes: max,
            duration: Duration::from_secs(60),
            snaplen: 60,
        };
        let t0 = std::time::Instant::now();
        let r = capture(&mut dpc, &opts, Vec::new(), &AtomicBool::new(false)).unwrap();
        (r, t0.elapsed())
    });
    capture_running(&path);
    let case = Case {
        v6: false,
        size: 1000,
        initiator_markers: false,
        responder_markers: false,
        crc: true,
        count: 100,
    };
    run_case(&bed, &path, 8112, &case);
    let ((summary, file), took) = cap.join().unwrap();
    assert_eq!(summary.reason, "max_bytes", "{summary:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    // Full: the next 60-octet record would not have fitted.
    let len = file.len() as u64;
    assert!(len <= max && len > max - (16 + 60), "{len} of {max}");
    assert_eq!(pcap_records(&file).len() as u64, summary.frames);
    assert!(summary.frames >= 10, "{summary:?}");
    dp.stop();
}
