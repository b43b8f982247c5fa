//! End to end on a test bed: a kernel-TCP MPA Initiator in ns a, the hand-over by mpa-control's
//! library in ns b, and the datapath (XDP + AF_XDP + minimal TCP + MPA receive) in ns b.
//! Byte-exact delivery is checked by digest equality.

use mpa::crc::crc32c_append;
use mpa::endpoint::{EndpointConfig, MpaStream};
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
    let (sock, _) = listener.accept().unwrap();
    let mut dpc = DatapathClient::connect(dp_socket, Duration::from_secs(20)).unwrap();
    let policy = StartupPolicy {
        markers_required: c.responder_markers,
        crc_suppressed_by_admin: !c.crc,
        ..StartupPolicy::default()
    };
    let ns_b = bed.ns_b.clone();
    let (outcome, mut dpc) = run_in_netns(&ns_b, move || {
        let r = respond_and_hand_over(sock, policy, b"datapath".to_vec(), &mut dpc);
        (r, dpc)
    })
    .unwrap();
    let Outcome::HandedOver {
        flow_id, frozen, ..
    } = outcome.unwrap()
    else {
        panic!("rejected")
    };
    let (digest, octets) = initiator.join().unwrap();
    // Wait for the datapath to report the flow gone, then compare.
    let gone = dpc.next_notification().unwrap();
    let Message::FlowGone {
        flow_id: gone_id,
        mpa_error,
        reason,
    } = gone
    else {
        panic!("{gone:?}")
    };
    assert_eq!(gone_id, flow_id);
    assert_eq!(mpa_error, None, "flow ended with {reason}");
    drop(frozen);
    let Message::Stats { stats, .. } = dpc.request(|id| Message::GetStats { id }).unwrap() else {
        panic!()
    };
    let ended = stats["ended_flows"].as_array().unwrap();
    let f = ended
        .iter()
        .find(|f| f["flow_id"] == flow_id)
        .expect("final counters kept");
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
