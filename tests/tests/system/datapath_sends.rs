//! The datapath as a sender over real AF_XDP: a consumer posts RDMA Writes from its
//! registered region on a flow the datapath made as Initiator (`connect_and_hand_over` in
//! ns b) toward the kernel-TCP `mpa-peer listen` in ns a, which places them into the region
//! it advertised. The listener's region must end up octet for octet the consumer's, every
//! Write must complete on the consumer's ring once the peer acknowledged it, and the flow
//! must close gracefully (FinishFlow: FIN after the last FPDU) — markers on and off, with
//! and without loss and reordering of the datapath's segments (the impairment bridge).

use mpa::crc::crc32c;
use mpa_app::Consumer;
use mpa_control::datapath_client::DatapathClient;
use mpa_ctl_proto::region_ad::RegionAd;
use mpa_ctl_proto::stats::FlowReport;
use mpa_ctl_proto::CompletionKind;
use mpa_stack::sim::SplitMix64;
use mpa_tests::PeerListener as Listener;
use mpa_tests::{
    bin, datapath, datapath_initiates, require_privileged, BedConfig, DatapathOptions, TestBed,
};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

const PD: u32 = 5;
const PEER_STAG: u32 = 0x7700;

struct Case {
    /// The listener asks for markers (the datapath sends them).
    markers: bool,
    len: u64,
    msg: u64,
}

/// One connection's Writes through the datapath at `path`; returns the flow's final report.
fn writes_reach_the_kernel_peer(bed: &TestBed, path: &Path, port: u16, c: &Case) -> FlowReport {
    let what = format!("markers {} len {} msg {}", c.markers, c.len, c.msg);
    let mut consumer = Consumer::connect(path, Duration::from_secs(10)).unwrap();
    let region = consumer.create_region(c.len, PD, false, false).unwrap();
    consumer.subscribe(PD).unwrap();
    let mut rng = SplitMix64(port.into());
    let src: Vec<u8> = (0..c.len).map(|_| rng.next_u64() as u8).collect();
    assert!(region.write(0, &src));
    let bind = SocketAddr::new(bed.addr_a(false), port);
    let advertise = format!("{PEER_STAG:#x}:{}", c.len);
    let mut args = vec!["--timeout", "20", "--advertise", &advertise];
    if c.markers {
        args.push("--markers");
    }
    let listener = Listener::start(bed, bind, &args);
    let (flow_id, negotiated, frozen) = datapath_initiates(bed, path, bind, PD);
    assert_eq!(negotiated.markers_tx, c.markers, "{what}");
    let ad: RegionAd = RegionAd::parse(&negotiated.peer_private_data)
        .expect("a valid advertisement")
        .expect("the listener's advertisement");
    assert_eq!((ad.stag, ad.len), (PEER_STAG, c.len), "{what}");
    let count = (c.len / c.msg) as u32;
    consumer
        .post_write(
            flow_id,
            region.info().stag,
            0,
            c.msg,
            count,
            ad.stag,
            ad.base_to,
        )
        .unwrap();
    // Every Write completes, in order, once the peer acknowledged it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut done = 0u32;
    while done < count {
        assert!(
            Instant::now() < deadline,
            "{what}: {done} of {count} Writes completed"
        );
        let got = consumer.next_completions(Instant::now() + Duration::from_millis(200));
        if got.is_err() {
            let mut dpc = DatapathClient::connect(path, Duration::from_secs(5)).unwrap();
            let s = mpa_tests::stats(&mut dpc);
            panic!(
                "{what}: {got:?} after {done}: {}",
                serde_json::to_string(&s).unwrap()
            );
        }
        let Some(batch) = got.unwrap() else {
            continue;
        };
        for comp in batch {
            assert_eq!(comp.flow_id, flow_id, "{what}");
            assert_eq!(comp.kind, CompletionKind::WriteSent, "{what}: {comp:?}");
            assert_eq!(
                (comp.stag, comp.offset, comp.len),
                (region.info().stag, u64::from(done) * c.msg, c.msg),
                "{what}"
            );
            done += 1;
        }
    }
    // Then Sends (QN 0, MSN from 1), from the same region.
    const SENDS: u32 = 8;
    let send_len = c.msg.min(3000);
    let msn = consumer
        .post_send(flow_id, region.info().stag, 0, send_len, SENDS)
        .map(|m| m.expect("no Read waits"))
        .unwrap();
    assert_eq!(msn, 1, "{what}");
    let mut sent = 0;
    while sent < SENDS {
        assert!(
            Instant::now() < deadline,
            "{what}: {sent} of {SENDS} Sends completed"
        );
        for comp in consumer
            .next_completions(Instant::now() + Duration::from_millis(200))
            .unwrap()
            .unwrap_or_default()
        {
            assert_eq!(comp.kind, CompletionKind::SendSent, "{what}: {comp:?}");
            assert_eq!(comp.msn, Some(sent + 1), "{what}: {comp:?}");
            assert_eq!(
                (comp.offset, comp.len),
                (u64::from(sent) * send_len, send_len)
            );
            sent += 1;
        }
    }
    consumer.finish_flow(flow_id).unwrap();
    let report = listener.report(Duration::from_secs(30));
    drop(frozen);
    assert_eq!(report["error"], Value::Null, "{what}: {report}");
    assert_eq!(report["sends"], SENDS, "{what}: {report}");
    assert_eq!(
        report["send_octets"],
        u64::from(SENDS) * send_len,
        "{what}: {report}"
    );
    assert_eq!(report["writes"], u64::from(count), "{what}: {report}");
    assert_eq!(report["write_octets"], c.len, "{what}: {report}");
    assert_eq!(
        report["region_digest"],
        format!("{:08x}", crc32c(&src)),
        "{what}: the listener's region is not the consumer's: {report}"
    );
    // The flow ends cleanly once both FINs are through.
    let f = mpa_tests::wait_ended_flow(path, flow_id, Duration::from_secs(20));
    assert_eq!(
        f.ended.as_ref().and_then(|e| e.mpa_error),
        None,
        "{what}: {f:?}"
    );
    assert_eq!(
        f.tx.messages_completed,
        u64::from(count + SENDS),
        "{what}: {f:?}"
    );
    assert_eq!(f.tx.partial_fpdus, 0, "{what}: {f:?}");
    // Every ULPDU the datapath sent is what the listener received, in order.
    assert_eq!(
        f.tx.ulpdu_digest.as_deref(),
        report["ulpdu_digest"].as_str(),
        "{what}: {f:?} / {report}"
    );
    // The consumer goes, and with it its region and its hold on domain PD (released as the
    // datapath sees the client gone), so that the next case's consumer may take the domain.
    drop(consumer);
    let mut dpc = DatapathClient::connect(path, Duration::from_secs(5)).unwrap();
    let t0 = Instant::now();
    while mpa_tests::stats(&mut dpc).registry.regions > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{what}: region not released"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    f
}

#[test]
fn datapath_writes_reach_mpa_peer_listen_octet_exact() {
    if !require_privileged("datapath sender") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = datapath(&bed, &DatapathOptions::default());
    let mut port = 7800;
    for markers in [false, true] {
        for (len, msg) in [(1u64 << 20, 4096u64), (4 << 20, 65536)] {
            writes_reach_the_kernel_peer(&bed, &path, port, &Case { markers, len, msg });
            port += 1;
        }
    }
    dp.stop();
}

/// One data segment the datapath sent, as tshark read it.
struct SeenSegment {
    /// Relative TCP sequence number and payload length.
    seq: u64,
    len: u64,
    /// FPDUs the MPA dissector found in it.
    fpdus: usize,
}

/// The datapath's segments toward `port` in `pcap`, as tshark's MPA dissector reads them.
fn tshark_segments(pcap: &Path, port: u16) -> (Vec<SeenSegment>, bool) {
    let out = std::process::Command::new("tshark")
        // MPA by its heuristic first (docs/capture.md, "The startup frames").
        .args(["-o", "tcp.try_heuristic_first:TRUE", "-n", "-r"])
        .arg(pcap)
        .args(["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"])
        .args(["-e", "tcp.dstport", "-e", "tcp.seq", "-e", "tcp.len"])
        .args([
            "-e",
            "iwarp_mpa.ulpdulength",
            "-e",
            "iwarp_mpa.marker_fpduptr",
        ])
        .output()
        .expect("tshark (make deps installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut markers_shown = false;
    let segs = text
        .lines()
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|f| f.first() == Some(&port.to_string().as_str()))
        .filter_map(|f| {
            let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
            let len = n(2)?;
            markers_shown |= f.get(4).is_some_and(|m| !m.is_empty());
            let fpdus = f
                .get(3)
                .map_or(0, |v| v.split(',').filter(|x| !x.is_empty()).count());
            (len > 0).then_some(SeenSegment {
                seq: n(1)?,
                len,
                fpdus,
            })
        })
        .collect();
    (segs, markers_shown)
}

/// What the datapath sends, captured by `mpa-control capture` and read by Wireshark's MPA
/// dissector: every FPDU found, each with a good CRC, markers shown, with and without
/// markers. (Wireshark's `number_of_markers` in packet-iwarp-mpa.c counts a Marker at the
/// very end of a segment — one that RFC 5044 §4.3 places at the start of the next FPDU — and
/// loses the stream after such a segment; the sender sizes its FPDUs so that none ends
/// there, `sender::post::fpdu_chunk`.)
#[test]
fn a_captured_datapath_sender_passes_wiresharks_mpa_dissector() {
    if !require_privileged("datapath sender capture") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = datapath(&bed, &DatapathOptions::default());
    for (markers, port) in [(false, 7820u16), (true, 7821)] {
        let pcap = std::env::temp_dir().join(format!(
            "mpa-send-capture-{}-{port}.pcap",
            std::process::id()
        ));
        let child = std::process::Command::new(bin("mpa-control"))
            .args([
                "capture",
                "--all",
                "--duration",
                "120",
                "--json",
                "--socket",
            ])
            .arg(&path)
            .arg("--out")
            .arg(&pcap)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut dpc = DatapathClient::connect(&path, Duration::from_secs(5)).unwrap();
        let t0 = Instant::now();
        while mpa_tests::stats(&mut dpc).capture.is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "capture never started"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let c = Case {
            markers,
            len: 256 << 10,
            msg: 4096,
        };
        let f = writes_reach_the_kernel_peer(&bed, &path, port, &c);
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
        let (mut segs, markers_shown) = tshark_segments(&pcap, port);
        // The first is the MPA Request (sent by the kernel socket before the hand-over).
        assert_eq!(segs.first().map(|s| (s.seq, s.fpdus)), Some((1, 0)));
        segs.remove(0);
        let found: usize = segs.iter().map(|s| s.fpdus).sum();
        let verbose = std::process::Command::new("tshark")
            .args(["-o", "tcp.try_heuristic_first:TRUE", "-n", "-V", "-r"])
            .arg(&pcap)
            .output()
            .unwrap();
        let v = String::from_utf8_lossy(&verbose.stdout);
        assert_eq!(v.matches("Bad CRC32").count(), 0, "markers {markers}");
        assert_eq!(
            v.matches("(Good CRC32)").count(),
            found,
            "markers {markers}"
        );
        assert!(
            segs.iter().all(|s| s.fpdus <= 1),
            "one FPDU per segment here"
        );
        if markers {
            assert!(markers_shown, "markers shown");
            // SeqStart: the first data segment (it begins with the first Marker). The sender
            // sizes FPDUs so that none ends right before a Marker, where Wireshark's dissector
            // would count one Marker too many and lose the stream.
            let start = segs.first().map_or(0, |s| s.seq);
            let ends_on_marker = |s: &SeenSegment| (s.seq + s.len - start).is_multiple_of(512);
            assert!(
                !segs.iter().any(ends_on_marker),
                "a segment ends on a Marker position"
            );
        }
        assert_eq!(
            found as u64, f.tx.fpdus_sent,
            "every FPDU the datapath sent, found"
        );
        let _ = std::fs::remove_file(&pcap);
    }
    dp.stop();
}

#[test]
fn datapath_writes_survive_loss_and_reordering() {
    if !require_privileged("datapath sender under loss") {
        return;
    }
    for (drop, port) in [(1u8, 7810u16), (5, 7811)] {
        let spec = format!("ba.drop={drop},ba.reorder=2,seed={port}");
        let bed = TestBed::up(BedConfig {
            bridge: true,
            loss_port: port,
            impair: Some(spec.parse().unwrap()),
            ..BedConfig::default()
        })
        .unwrap();
        let (dp, path) = datapath(&bed, &DatapathOptions::default());
        for markers in [false, true] {
            writes_reach_the_kernel_peer(
                &bed,
                &path,
                port,
                &Case {
                    markers,
                    len: 2 << 20,
                    msg: 4096,
                },
            );
        }
        dp.stop();
    }
}

/// `mpa-peer connect --op read` against the datapath as Responder: its consumer's region
/// (remote read, pattern-filled) is read through the datapath octet-exact, the datapath
/// answering every Read Request with Read Responses; a Read beyond the region gets RFC 5040's
/// Terminate 0/1/1 (the advertisement lies about the length to make the peer ask).
#[test]
fn mpa_peer_reads_a_region_through_the_datapath() {
    if !require_privileged("datapath Read Responses") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = datapath(&bed, &DatapathOptions::default());
    const LEN: u64 = 1 << 20;
    let mut consumer = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
    let region = consumer.create_region(LEN, PD, false, true).unwrap();
    let fill: Vec<u8> = (0..LEN as usize)
        .map(|o| mpa_ctl_proto::pattern::pattern(0, o))
        .collect();
    assert!(region.write(0, &fill));
    // The Responder's IRD: revision 2 negotiates it (RFC 6581 §9.1) and the datapath holds
    // the peer to it (the peer's ORD becomes min(its 8, ours)).
    for (port, advertised, size, count, markers, ird) in [
        (7830u16, LEN, 65536u64, 48u64, false, 8u16),
        (7831, LEN, 4096, 300, true, 3),
        (7832, 2 * LEN, 65536, 32, false, 8),
    ] {
        let addr = SocketAddr::new(bed.addr_b(false), port);
        let listener = mpa_tests::listen_in(&bed.ns_b, addr);
        let ad = RegionAd {
            writes: false,
            sends: false,
            stag: region.info().stag,
            len: advertised,
            base_to: 0,
            recv_buf_size: 0,
        };
        let responder = mpa_tests::Responder {
            reply_private_data: ad.emit().to_vec(),
            placement: mpa_control::Placement {
                pd: Some(PD),
                aligned_sender: false,
                conn_id: None,
            },
            ..mpa_tests::Responder::framing(markers, true)
        };
        let mut responder = responder;
        responder.policy.ird = ird;
        let (ns_b, sock) = (bed.ns_b.clone(), path.clone());
        let setup = std::thread::spawn(move || {
            mpa_tests::accept_and_hand_over(&ns_b, &sock, &listener, &responder)
        });
        let mut cmd = bed.command(&bed.ns_a, &bin("mpa-peer").to_string_lossy());
        cmd.args(["connect", "--to", &addr.to_string(), "--op", "read"])
            .args(["--rev", "2"])
            .args(["--size", &size.to_string(), "--count", &count.to_string()])
            .args(["--timeout", "20"]);
        if markers {
            cmd.arg("--markers");
        }
        let out = cmd.output().unwrap();
        let handed = setup.join().unwrap().unwrap();
        let report: Value = serde_json::from_str(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .unwrap_or_else(|| panic!("{}", String::from_utf8_lossy(&out.stderr))),
        )
        .unwrap();
        let what = format!("port {port}, {count} reads of {size}");
        if advertised == LEN {
            assert!(out.status.success(), "{what}: {report}");
            assert_eq!(report["read_pattern_ok"], true, "{what}: {report}");
            assert_eq!(report["read_responses"], count, "{what}: {report}");
            assert_eq!(report["read_octets"], count * size, "{what}: {report}");
        } else {
            // Reads cycle through the advertised 2 MiB: one reaches past the real 1 MiB.
            assert!(!out.status.success(), "{what}: {report}");
            let t = &report["terminate_received"];
            assert_eq!(
                (&t["layer"], &t["error_type"], &t["error_code"]),
                (&Value::from(0), &Value::from(1), &Value::from(1)),
                "{what}: {report}"
            );
        }
        // The flow's own account.
        let f = mpa_tests::wait_ended_flow(&path, handed.flow_id, Duration::from_secs(20));
        drop(handed);
        assert_eq!(
            f.tx.ird,
            u32::from(ird),
            "{what}: the negotiated IRD: {f:?}"
        );
        if advertised == LEN {
            assert_eq!(f.tx.read_responses, count, "{what}: {f:?}");
            assert_eq!(
                f.ended.as_ref().and_then(|e| e.terminate),
                None,
                "{what}: {f:?}"
            );
        } else {
            let t = f
                .ended
                .as_ref()
                .and_then(|e| e.terminate)
                .expect("our Terminate");
            assert_eq!(
                (t.layer, t.error_type, t.error_code, t.sent),
                (0, 1, 1, true)
            );
        }
    }
    dp.stop();
}

/// The datapath reads: a consumer posts RDMA Reads (a `Post` of Reads) of the kernel `mpa-peer
/// listen --remote-read` region; every Read Response lands in the consumer's region
/// (completed as `ReadResponsePlaced`, in order) and equals the listener's pattern, more reads
/// posted at once than the datapath keeps outstanding (its ORD).
#[test]
fn the_datapath_reads_mpa_peer_listens_region() {
    if !require_privileged("datapath RDMA Reads") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = datapath(&bed, &DatapathOptions::default());
    const LEN: u64 = 1 << 20;
    const READ: u64 = 16384;
    let count = (LEN / READ) as u32;
    let mut consumer = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
    let region = consumer.create_region(LEN, PD, false, false).unwrap();
    consumer.subscribe(PD).unwrap();
    let port = 7840;
    let bind = SocketAddr::new(bed.addr_a(false), port);
    let advertise = format!("{PEER_STAG:#x}:{LEN}");
    let listener = Listener::start(
        &bed,
        bind,
        &[
            "--timeout",
            "20",
            "--advertise",
            &advertise,
            "--remote-read",
            "--fill-pattern",
        ],
    );
    let (flow_id, negotiated, frozen) = datapath_initiates(&bed, &path, bind, PD);
    let ad = RegionAd::parse(&negotiated.peer_private_data)
        .unwrap()
        .unwrap();
    consumer
        .post_read(
            flow_id,
            region.info().stag,
            0,
            READ,
            count,
            ad.stag,
            ad.base_to,
        )
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut done = 0u32;
    while done < count {
        assert!(
            Instant::now() < deadline,
            "{done} of {count} reads completed"
        );
        let Some(batch) = consumer
            .next_completions(Instant::now() + Duration::from_millis(200))
            .unwrap()
        else {
            continue;
        };
        for c in batch {
            assert_eq!(c.kind, CompletionKind::ReadResponsePlaced, "{c:?}");
            assert_eq!(
                (c.stag, c.offset, c.len),
                (region.info().stag, u64::from(done) * READ, READ)
            );
            done += 1;
        }
    }
    let want: Vec<u8> = (0..LEN as usize)
        .map(|o| mpa_ctl_proto::pattern::pattern(0, o))
        .collect();
    assert!(
        region.to_vec() == want,
        "what the datapath read differs from the listener's region"
    );
    consumer.finish_flow(flow_id).unwrap();
    let report = listener.report(Duration::from_secs(30));
    drop(frozen);
    assert_eq!(report["error"], Value::Null, "{report}");
    assert_eq!(report["reads_served"], u64::from(count), "{report}");
    dp.stop();
}

/// More than 2 GiB of Read Responses owed at once (8 outstanding reads of 256 MiB, as the
/// peer's ORD allows, 12 in all): the sequence space addresses at most 2^31 octets ahead of
/// SND.UNA, so the TCP sees the queue 1 GiB at a time and the rest comes into view as octets
/// are acknowledged (docs/limits.md). Every read arrives with the region's pattern.
#[test]
fn read_responses_beyond_2_gib_outstanding_are_all_served() {
    if !require_privileged("datapath Read Responses beyond 2 GiB") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = datapath(&bed, &DatapathOptions::default());
    const LEN: u64 = 256 << 20;
    const COUNT: u64 = 12;
    let mut consumer = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
    let region = consumer.create_region(LEN, PD, false, true).unwrap();
    let fill: Vec<u8> = (0..LEN as usize)
        .map(|o| mpa_ctl_proto::pattern::pattern(0, o))
        .collect();
    assert!(region.write(0, &fill));
    drop(fill);
    let addr = SocketAddr::new(bed.addr_b(false), 7835);
    let listener = mpa_tests::listen_in(&bed.ns_b, addr);
    let ad = RegionAd {
        writes: false,
        sends: false,
        stag: region.info().stag,
        len: LEN,
        base_to: 0,
        recv_buf_size: 0,
    };
    let mut responder = mpa_tests::Responder {
        reply_private_data: ad.emit().to_vec(),
        placement: mpa_control::Placement {
            pd: Some(PD),
            aligned_sender: false,
            conn_id: None,
        },
        ..mpa_tests::Responder::framing(false, true)
    };
    responder.policy.ird = 16;
    let (ns_b, sock) = (bed.ns_b.clone(), path.clone());
    let setup = std::thread::spawn(move || {
        mpa_tests::accept_and_hand_over(&ns_b, &sock, &listener, &responder)
    });
    let mut cmd = bed.command(&bed.ns_a, &bin("mpa-peer").to_string_lossy());
    cmd.args([
        "connect",
        "--to",
        &addr.to_string(),
        "--op",
        "read",
        "--rev",
        "2",
    ])
    .args(["--size", &LEN.to_string(), "--count", &COUNT.to_string()])
    .args(["--timeout", "120"]);
    let out = cmd.output().unwrap();
    let handed = setup.join().unwrap().unwrap();
    let report: Value = serde_json::from_str(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_else(|| panic!("{}", String::from_utf8_lossy(&out.stderr))),
    )
    .unwrap();
    assert!(out.status.success(), "{report}");
    assert_eq!(report["read_pattern_ok"], true, "{report}");
    assert_eq!(report["read_responses"], COUNT, "{report}");
    assert_eq!(report["read_octets"], COUNT * LEN, "{report}");
    let f = mpa_tests::wait_ended_flow(&path, handed.flow_id, Duration::from_secs(30));
    drop(handed);
    assert_eq!(f.tx.read_responses, COUNT, "{f:?}");
    assert!(f.tx.octets_read >= COUNT * LEN, "{f:?}");
    dp.stop();
}
