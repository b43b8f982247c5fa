//! End to end on a test bed: a kernel-TCP MPA Initiator in ns a, the hand-over by mpa-control's
//! library in ns b, and the datapath (XDP + AF_XDP + minimal TCP + MPA receive) in ns b.
//! Byte-exact delivery is checked by digest equality.

use mpa::crc::crc32c_append;
use mpa::encoder::FpduEncoder;
use mpa::endpoint::{EndpointConfig, EndpointError, MpaStream};
use mpa::markers;
use mpa::startup::StartupPolicy;
use mpa_bpf::AttachMode;
use mpa_control::datapath_client::DatapathClient;
use mpa_control::responder::{respond_and_hand_over, Outcome};
use mpa_ctl_proto::Message;
use mpa_datapath::server::{Datapath, DatapathConfig};
use mpa_datapath::tcp::TcpConfig;
use mpa_datapath::xsk::{BindMode, XskConfig};
use mpa_testbed::{require_privileged, run_in_netns, BedConfig, TestBed};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

static N: AtomicU32 = AtomicU32::new(0);

fn socket_path() -> PathBuf {
    std::env::temp_dir().join(format!(
        "mpa-dp-{}-{}.sock",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

fn start_datapath(bed: &TestBed, queues: u32) -> (Datapath, PathBuf) {
    let path = socket_path();
    let cfg = DatapathConfig {
        iface: bed.if_b.clone(),
        queues,
        xdp_mode: AttachMode::Driver,
        xsk: XskConfig {
            frames: 4096,
            bind_mode: BindMode::Copy,
            ..XskConfig::default()
        },
        socket: path.clone(),
        digest: true,
        tcp: TcpConfig::default(),
        verify_checksums: true,
        pin_cpus: false,
        max_region_bytes: mpa_datapath::server::DEFAULT_MAX_REGION_BYTES,
    };
    let dp = run_in_netns(&bed.ns_b, move || Datapath::start(cfg))
        .unwrap()
        .unwrap();
    (dp, path)
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

/// Accepts one connection on `listener` (in ns b) and hands it to the datapath.
fn accept_and_hand_over(
    bed: &TestBed,
    dp_socket: &Path,
    listener: &TcpListener,
    markers: bool,
    crc: bool,
) -> (u64, DatapathClient, mpa_control::freeze::FrozenSocket) {
    let (sock, _) = listener.accept().unwrap();
    let mut dpc = DatapathClient::connect(dp_socket, Duration::from_secs(20)).unwrap();
    let policy = StartupPolicy {
        markers_required: markers,
        crc_suppressed_by_admin: !crc,
        ..StartupPolicy::default()
    };
    let (outcome, dpc) = run_in_netns(&bed.ns_b, move || {
        let r = respond_and_hand_over(sock, policy, b"datapath".to_vec(), None, &mut dpc);
        (r, dpc)
    })
    .unwrap();
    let Outcome::HandedOver {
        flow_id, frozen, ..
    } = outcome.unwrap()
    else {
        panic!("rejected")
    };
    (flow_id, dpc, frozen)
}

/// The final counters the datapath kept for an ended flow.
fn ended_flow(dpc: &mut DatapathClient, flow_id: u64) -> serde_json::Value {
    let Message::Stats { stats, .. } = dpc.request(|id| Message::GetStats { id }).unwrap() else {
        panic!("no stats")
    };
    stats["ended_flows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["flow_id"] == flow_id)
        .expect("final counters kept")
        .clone()
}

/// Runs one connection; returns the flow's final counters.
fn run_case(bed: &TestBed, dp_socket: &Path, port: u16, c: &Case) -> serde_json::Value {
    let addr = SocketAddr::new(bed.addr_b(c.v6), port);
    let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr).unwrap()).unwrap();
    let (im, crc, count, size) = (c.initiator_markers, c.crc, c.count, c.size);
    let emss = bed.config.mtu as usize - if c.v6 { 60 } else { 40 } - 12;
    let ns_a = bed.ns_a.clone();
    let initiator = std::thread::spawn(move || {
        run_in_netns(&ns_a, move || {
            let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
            sock.set_nodelay(true).unwrap();
            let mut cfg = EndpointConfig::default();
            cfg.policy.markers_required = im;
            cfg.policy.crc_suppressed_by_admin = !crc;
            cfg.policy.startup_timeout = Duration::from_secs(10);
            let mut s = MpaStream::connect(sock, &cfg).expect("startup with the datapath");
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
        })
        .unwrap()
    });
    let (flow_id, mut dpc, frozen) =
        accept_and_hand_over(bed, dp_socket, &listener, c.responder_markers, c.crc);
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
        f["ulpdu_digest"],
        format!("{digest:08x}"),
        "digest mismatch: {f}"
    );
    assert_eq!(f["ulpdu_octets"], octets);
    assert_eq!(f["fpdus"], c.count);
    assert_eq!(f["crc_errors"], 0);
    f.clone()
}

#[test]
fn byte_exact_delivery_through_the_datapath() {
    if !require_privileged("datapath e2e") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = start_datapath(&bed, 1);
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
    let (dp, path) = start_datapath(&bed, 1);
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
        let (dp, path) = start_datapath(&bed, 1);
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
            f["out_of_order_segments"].as_u64().unwrap() > 0,
            "no out-of-order arrivals at {loss}%: {f}"
        );
        assert!(
            f["sack_blocks_sent"].as_u64().unwrap() > 0,
            "SACK not used at {loss}%: {f}"
        );
        dp.stop();
    }
}

#[test]
fn two_queues_eight_concurrent_connections() {
    if !require_privileged("datapath e2e 2 queues") {
        return;
    }
    let bed = TestBed::up(BedConfig {
        queues: 2,
        ..BedConfig::default()
    })
    .unwrap();
    let (dp, path) = start_datapath(&bed, 2);
    let flows: Vec<serde_json::Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8u16)
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
    assert_eq!(flows.len(), 8);
    // Both queues carried traffic (the peer's connections hash to both).
    let mut dpc = DatapathClient::connect(&path, Duration::from_secs(5)).unwrap();
    let Message::Stats { stats, .. } = dpc.request(|id| Message::GetStats { id }).unwrap() else {
        panic!()
    };
    let queues = stats["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 2);
    for q in queues {
        assert!(q["rx_frames"].as_u64().unwrap() > 0, "queue idle: {q}");
    }
    dp.stop();
}

/// Connects an Initiator in ns a and runs `f` on the established stream.
fn initiator_with<T: Send + 'static>(
    bed: &TestBed,
    addr: SocketAddr,
    f: impl FnOnce(MpaStream<TcpStream>) -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let ns_a = bed.ns_a.clone();
    std::thread::spawn(move || {
        run_in_netns(&ns_a, move || {
            let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
            let mut cfg = EndpointConfig::default();
            cfg.policy.startup_timeout = Duration::from_secs(10);
            f(MpaStream::connect(sock, &cfg).expect("startup with the datapath"))
        })
        .unwrap()
    })
}

#[test]
fn crc_error_terminates_that_connection_only_and_a_reset_is_error_1() {
    if !require_privileged("datapath error paths") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = start_datapath(&bed, 1);
    // A capture in ns a of every segment from b: the frozen kernel sockets must never speak.
    let pcap = std::env::temp_dir().join(format!("mpa-e2e-{}.pcap", std::process::id()));
    let mut dump = bed
        .command(&bed.ns_a, "tcpdump")
        .args([
            "-i",
            &bed.if_a,
            "-U",
            "-w",
            &pcap.to_string_lossy(),
            "tcp and src host 10.99.0.2",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("tcpdump (make deps installs it)");
    std::thread::sleep(Duration::from_millis(500));
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
        let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr).unwrap()).unwrap();
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
        let (flow_id, mut dpc, frozen) = accept_and_hand_over(&bed, &path, &listener, true, true);
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
        let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr).unwrap()).unwrap();
        let reset = initiator_with(&bed, addr, |mut s| {
            s.send(&[1u8; 2000]).unwrap();
            s.flush().unwrap();
            std::thread::sleep(Duration::from_millis(200));
            let sock = s.into_inner().unwrap();
            nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::Linger, &libc_linger0())
                .unwrap();
            drop(sock);
        });
        let (flow_id, mut dpc, frozen) = accept_and_hand_over(&bed, &path, &listener, false, true);
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
        assert_eq!(g["fpdus"], 3000);
    });
    std::thread::sleep(Duration::from_millis(300));
    let _ = dump.kill();
    let _ = dump.wait();
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

/// `mpa-peer` built beside this test (`cargo test --workspace` builds every binary first).
fn mpa_peer_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/e2e-… → target/<profile>/mpa-peer
    let p = exe
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("mpa-peer");
    assert!(
        p.exists(),
        "{} missing: run the tests with `cargo test --workspace` (make test)",
        p.display()
    );
    p
}

#[test]
fn mpa_peer_connect_through_the_datapath() {
    if !require_privileged("datapath e2e with mpa-peer") {
        return;
    }
    let peer = mpa_peer_binary();
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = start_datapath(&bed, 1);
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
        let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr).unwrap()).unwrap();
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
        let (flow_id, mut dpc, frozen) = accept_and_hand_over(&bed, &path, &listener, markers, crc);
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
        assert_eq!(f["ulpdu_digest"], sent["ulpdu_digest"], "{f} vs {sent}");
        assert_eq!(f["fpdus"], 2000);
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
    let (dp, path) = start_datapath(&bed, 1);
    let rtrs = [
        RtrType::ZeroLengthSend,
        RtrType::ZeroLengthWrite,
        RtrType::ZeroLengthReadRequest,
    ];
    for (i, rtr) in rtrs.into_iter().enumerate() {
        let addr = SocketAddr::new(bed.addr_b(false), 8000 + i as u16);
        let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr).unwrap()).unwrap();
        let ns_a = bed.ns_a.clone();
        let initiator = std::thread::spawn(move || {
            run_in_netns(&ns_a, move || {
                let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
                let mut cfg = EndpointConfig::default();
                cfg.policy.revision = 2;
                cfg.policy.p2p = true;
                cfg.policy.rtr_send = RtrSet::single(rtr);
                let mut s = MpaStream::connect(sock, &cfg).expect("rev 2 startup");
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
            })
            .unwrap()
        });
        let (flow_id, mut dpc, frozen) = accept_and_hand_over(&bed, &path, &listener, false, true);
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
        assert_eq!(f["ulpdu_digest"], format!("{digest:08x}"));
        assert_eq!(f["fpdus"], 100, "the RTR is not delivered as data");
    }
    dp.stop();
}
