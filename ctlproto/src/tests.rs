use super::*;
use std::os::unix::net::UnixStream;

fn snapshot() -> HandOver {
    HandOver {
        flow_id: 7,
        tcp: TcpSnapshot {
            local: "10.99.0.2:7777".parse().unwrap(),
            remote: "[fd99::1]:40000".parse().unwrap(),
            snd_nxt: u32::MAX,
            rcv_nxt: 5,
            snd_wl1: 4,
            snd_wnd: 65535,
            max_window: 65535,
            rcv_wnd: 131072,
            rcv_wup: 5,
            mss: 1460,
            rcv_wscale: Some(7),
            snd_wscale: Some(9),
            sack_permitted: true,
            timestamps: Some(TsSnapshot {
                tsval: 123,
                monotonic_ns: 456,
                ts_recent: 0,
            }),
            send_queue: vec![],
            recv_queue: vec![1, 2],
        },
        mpa: MpaParams {
            role: Role::Responder,
            rev: 2,
            markers_rx: true,
            markers_tx: false,
            crc: true,
            ddp_rdmap_version: 1,
            reply_frame: b"MPA ID Rep Frame\x40\x01\x00\x00".to_vec(),
            rtr: vec![mpa::startup::RtrType::ZeroLengthSend],
            pd: Some(3),
            aligned_sender: true,
            request_frame: b"MPA ID Req Frame\x40\x01\x00\x00".to_vec(),
            received_reply_frame: vec![],
            ird: Some(8),
            ord: Some(0),
        },
        next_hop_mac: [2, 0, 0, 0, 0, 1],
        app: None,
    }
}

#[test]
fn round_trip_every_message() {
    let msgs = vec![
        Message::Hello {
            version: VERSION,
            agent: "t".into(),
        },
        Message::AdoptFlow {
            id: 1,
            local: "1.2.3.4:5".parse().unwrap(),
            remote: "[::1]:6".parse().unwrap(),
        },
        Message::FlowAdopted { id: 1, flow_id: 9 },
        Message::HandOver {
            id: 2,
            handover: Box::new(snapshot()),
        },
        Message::HandedOver { id: 2, flow_id: 9 },
        Message::CloseFlow { id: 3, flow_id: 9 },
        Message::FinishFlow { id: 3, flow_id: 9 },
        Message::FlowGone {
            flow_id: 9,
            mpa_error: Some(2),
            reason: "CRC".into(),
            terminate: Some(TerminateInfo {
                layer: 2,
                error_type: 0,
                error_code: 2,
                sent: true,
            }),
        },
        Message::CreateRegion {
            id: 7,
            len: 1 << 20,
            pd: 3,
            remote_write: true,
            remote_read: false,
        },
        Message::RegionCreated {
            id: 7,
            region: RegionInfo {
                stag: 0x100,
                len: 1 << 20,
                pd: 3,
                remote_write: true,
                remote_read: false,
                huge_pages: false,
            },
        },
        Message::RegisterRegion {
            id: 7,
            pd: 3,
            len: 3 << 20,
            remote_write: false,
            remote_read: true,
        },
        Message::RegionRegistered {
            id: 7,
            region: RegionInfo {
                stag: 0x201,
                len: 3 << 20,
                pd: 3,
                remote_write: false,
                remote_read: true,
                huge_pages: true,
            },
        },
        Message::DestroyRegion { id: 8, stag: 0x100 },
        Message::ListRegions { id: 9, pd: None },
        Message::Regions {
            id: 9,
            regions: vec![],
        },
        Message::PostRecv {
            id: 10,
            target: PostTarget::Pd(3),
            stag: 0x100,
            offset: 0,
            len: 4096,
            count: 16,
            wr_id: 7,
        },
        Message::Post {
            id: 12,
            wr: crate::ring::post::WorkRequest {
                flow_id: 4,
                wr_id: 8,
                sg_list: crate::ring::post::SgList::new(&[
                    crate::ring::post::Sge {
                        stag: 0x100,
                        offset: 64,
                        len: 4096,
                    },
                    crate::ring::post::Sge {
                        stag: 0x101,
                        offset: 0,
                        len: 1,
                    },
                ])
                .unwrap(),
                count: 1,
                op: crate::ring::post::PostOp::Write {
                    sink_stag: 0x5a,
                    sink_to: 1 << 40,
                },
                signaled: false,
                solicited: false,
                fence: true,
            },
        },
        Message::Post {
            id: 13,
            wr: crate::ring::post::WorkRequest {
                solicited: true,
                ..crate::ring::post::WorkRequest::new(
                    4,
                    9,
                    crate::ring::post::PostOp::Send,
                    0x100,
                    0,
                    100,
                    2,
                )
            },
        },
        Message::Posted {
            id: 13,
            count: 2,
            first_msn: Some(1),
        },
        Message::Subscribe {
            id: 11,
            pd: 3,
            post_queues: true,
        },
        Message::Subscribed {
            id: 11,
            pd: 3,
            rings: 2,
            capacity: 4096,
            post_capacity: 1024,
        },
        Message::Unsubscribe { id: 12, pd: 3 },
        Message::WatchPort { id: 13, port: 7777 },
        Message::UnwatchPort { id: 14, port: 7777 },
        Message::StartCapture {
            id: 12,
            flow: Some(9),
            max_bytes: 1 << 20,
            duration_ms: 5000,
            snaplen: 128,
        },
        Message::StopCapture { id: 13 },
        Message::Captured {
            frames: vec![
                CapturedFrame {
                    ts_ns: 1_700_000_000_123_456_789,
                    direction: CaptureDirection::Rx,
                    orig_len: 1514,
                    data: (0..=255).collect(),
                    reconstructed: false,
                },
                CapturedFrame {
                    ts_ns: 1,
                    direction: CaptureDirection::Tx,
                    orig_len: 0,
                    data: vec![],
                    reconstructed: true,
                },
            ],
        },
        Message::CaptureDone {
            reason: "duration".into(),
            frames: 2,
            dropped: 1,
        },
        Message::get_stats(4),
        Message::Stats {
            id: 4,
            stats: Box::new(crate::stats::DatapathStats {
                queues: vec![],
                xdp: None,
                adopted_flows: 0,
                registry: Default::default(),
                ended_flows: vec![],
                capture: None,
                xdp_detached: true,
                ended: {
                    let mut e = crate::stats::EndedCounts::default();
                    e.count(Some(2), None);
                    e
                },
                memory: crate::stats::MemoryStats {
                    limit: 1 << 30,
                    used: 3 << 20,
                    high_water: 5 << 20,
                    dropped_segments: 7,
                    refused: 1,
                    shared_files: 3,
                    shared_bytes: 3 << 21,
                },
                control: crate::stats::ControlStats {
                    clients: 2,
                    max_clients: 256,
                    clients_refused: 1,
                    operator_slots: 8,
                    clients_evicted: 2,
                    clients_timed_out: 5,
                    hello_deadline_ms: 5000,
                    idle_deadline_ms: 60_000,
                    messages_dropped: 3,
                    queued_octets: 4096,
                    connection_manager: true,
                    app_listeners: 2,
                    app_setups: 1,
                },
                handover: crate::stats::HandoverStats {
                    ts_recent_inherited: 1,
                    ts_recent_unknown: 2,
                    watched_ports: vec![7777],
                },
                flow_page: crate::stats::FlowPage {
                    after: Some(9),
                    next: None,
                },
            }),
        },
        Message::Ok { id: 5 },
        Message::Error {
            id: 6,
            code: ErrorCode::UnknownFlow,
            message: "no".into(),
        },
    ];
    let (mut a, mut b) = UnixStream::pair().unwrap();
    for m in &msgs {
        write_message(&mut a, m).unwrap();
    }
    drop(a);
    for m in &msgs {
        assert_eq!(&read_message(&mut b).unwrap(), m);
    }
    assert!(matches!(read_message(&mut b), Err(ProtoError::Closed)));
}

#[test]
fn hand_overs_without_the_startup_frames_still_parse() {
    let mut j = serde_json::to_value(snapshot()).unwrap();
    let mpa = j["mpa"].as_object_mut().unwrap();
    mpa.remove("request_frame");
    mpa.remove("received_reply_frame");
    mpa.remove("ird");
    mpa.remove("ord");
    let h: HandOver = serde_json::from_value(j).unwrap();
    assert!(h.mpa.request_frame.is_empty() && h.mpa.received_reply_frame.is_empty());
    // No IRD/ORD: not negotiated (the datapath's own bounds).
    assert_eq!((h.mpa.ird, h.mpa.ord), (None, None));
}

#[test]
fn malformed_and_oversized_are_refused() {
    let mut buf = Vec::new();
    buf.extend_from_slice(&5u32.to_be_bytes());
    buf.extend_from_slice(b"{\"ty");
    assert!(matches!(
        read_message(&mut &buf[..]),
        Err(ProtoError::Io(_))
    ));
    let mut buf = Vec::new();
    buf.extend_from_slice(&(MAX_MESSAGE as u32 + 1).to_be_bytes());
    assert!(matches!(
        read_message(&mut &buf[..]),
        Err(ProtoError::TooLarge(_))
    ));
    let body = br#"{"type":"hand_over","id":1}"#;
    let mut buf = (body.len() as u32).to_be_bytes().to_vec();
    buf.extend_from_slice(body);
    assert!(matches!(
        read_message(&mut &buf[..]),
        Err(ProtoError::Malformed(_))
    ));
    let body = br#"{"type":"launch_missiles","id":1}"#;
    let mut buf = (body.len() as u32).to_be_bytes().to_vec();
    buf.extend_from_slice(body);
    assert!(matches!(
        read_message(&mut &buf[..]),
        Err(ProtoError::Malformed(_))
    ));
}

#[test]
fn descriptors_travel_with_their_message() {
    use std::io::{Read as _, Seek, SeekFrom, Write as _};
    use std::os::fd::AsFd;
    let (a, b) = UnixStream::pair().unwrap();
    let mut f = tempfile_in_memory();
    f.write_all(b"region").unwrap();
    let m = Message::Ok { id: 1 };
    write_message_with_fd(&a, &m, f.as_fd()).unwrap();
    write_message(&mut &a, &Message::Ok { id: 2 }).unwrap();
    let (got, fd) = read_message_with_fd(&b).unwrap();
    assert_eq!(got, m);
    let mut g = std::fs::File::from(fd.expect("descriptor"));
    g.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    g.read_to_string(&mut s).unwrap();
    assert_eq!(s, "region");
    let (got, fd) = read_message_with_fd(&b).unwrap();
    assert_eq!(got, Message::Ok { id: 2 });
    assert!(fd.is_none());
    drop(a);
    assert!(matches!(read_message_with_fd(&b), Err(ProtoError::Closed)));
}

fn tempfile_in_memory() -> std::fs::File {
    // One name per call: tests run side by side in one process, and two of them opening the
    // same path shared one file.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let p = std::env::temp_dir().join(format!("ctlproto-fd-{}-{n}", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    let _ = std::fs::remove_file(&p);
    f
}

#[test]
fn version_mismatch_is_typed() {
    let (mut a, mut b) = UnixStream::pair().unwrap();
    let t = std::thread::spawn(move || {
        write_message(
            &mut b,
            &Message::Hello {
                version: VERSION + 1,
                agent: "future".into(),
            },
        )
        .unwrap();
        let _ = read_message(&mut b);
    });
    match handshake(&mut a, "test") {
        Err(ProtoError::Version { theirs }) => assert_eq!(theirs, VERSION + 1),
        other => panic!("{other:?}"),
    }
    t.join().unwrap();
}

proptest::proptest! {
    #[test]
    fn arbitrary_bodies_never_panic(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
        let mut buf = (body.len() as u32).to_be_bytes().to_vec();
        buf.extend_from_slice(&body);
        let _ = read_message(&mut &buf[..]);
    }
}

/// RTR indications travel by name; names are matched without regard to case or blanks, and an
/// unknown one refuses the whole hand-over (it never reaches the datapath as a guess).
#[test]
fn rtr_names_round_trip_and_unknown_ones_are_refused() {
    use mpa::startup::RtrType;
    let mut h = snapshot();
    h.mpa.rtr = RtrType::ALL.to_vec();
    let v = serde_json::to_value(&h).unwrap();
    assert_eq!(
        v["mpa"]["rtr"],
        serde_json::json!(["ZeroLengthSend", "ZeroLengthWrite", "ZeroLengthReadRequest"])
    );
    assert_eq!(serde_json::from_value::<HandOver>(v.clone()).unwrap(), h);
    let mut loose = v.clone();
    loose["mpa"]["rtr"] = serde_json::json!([" zerolengthreadrequest "]);
    let got: HandOver = serde_json::from_value(loose).unwrap();
    assert_eq!(got.mpa.rtr, [RtrType::ZeroLengthReadRequest]);
    for bad in ["ZeroLengthSendX", "Send", ""] {
        let mut b = v.clone();
        b["mpa"]["rtr"] = serde_json::json!([bad]);
        let e = serde_json::from_value::<HandOver>(b).unwrap_err();
        assert!(
            e.to_string().contains("unknown RTR indication"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn a_message_carries_many_descriptors_in_order() {
    use std::io::{Read as _, Seek, SeekFrom, Write as _};
    use std::os::fd::AsFd;
    let (a, b) = UnixStream::pair().unwrap();
    // A subscription's answer: two ring descriptors, the post queues and a doorbell per
    // worker — more than a handful.
    let files: Vec<std::fs::File> = (0..40)
        .map(|i| {
            let mut f = tempfile_in_memory();
            write!(f, "fd {i}").unwrap();
            f
        })
        .collect();
    let fds: Vec<_> = files.iter().map(|f| f.as_fd()).collect();
    let frame = encode_message(&Message::Ok { id: 3 }).unwrap();
    write_frame_with_fds(&a, &frame, &fds).unwrap();
    let (m, got) = read_message_with_fds(&b).unwrap();
    assert_eq!(m, Message::Ok { id: 3 });
    assert_eq!(got.len(), 40);
    for (i, fd) in got.into_iter().enumerate() {
        let mut g = std::fs::File::from(fd);
        g.seek(SeekFrom::Start(0)).unwrap();
        let mut s = String::new();
        g.read_to_string(&mut s).unwrap();
        assert_eq!(s, format!("fd {i}"));
    }
}

#[test]
fn a_subscribed_answer_without_post_queues_still_parses() {
    let old = r#"{"type":"subscribe","id":4,"pd":2}"#;
    let m: Message = serde_json::from_str(old).unwrap();
    assert_eq!(
        m,
        Message::Subscribe {
            id: 4,
            pd: 2,
            post_queues: false,
        }
    );
    let old = r#"{"type":"subscribed","id":4,"pd":2,"rings":3,"capacity":64}"#;
    let m: Message = serde_json::from_str(old).unwrap();
    assert_eq!(
        m,
        Message::Subscribed {
            id: 4,
            pd: 2,
            rings: 3,
            capacity: 64,
            post_capacity: 0,
        }
    );
}

#[test]
fn refusal_codes_round_trip_through_a_completion() {
    use crate::{Completion, CompletionKind, RefusalCode};
    for code in [
        RefusalCode::Malformed,
        RefusalCode::UnknownFlow,
        RefusalCode::WrongDomain,
        RefusalCode::UnknownRegion,
        RefusalCode::OutOfBounds,
        RefusalCode::Invalid,
        RefusalCode::Busy,
        RefusalCode::Closed,
    ] {
        let c = Completion::post_refused(9, 0x44, 0xc00c1e, 3, code);
        assert_eq!(c.kind, CompletionKind::PostRefused);
        assert_eq!(c.refusal(), Some((0xc00c1e, code)));
        assert_eq!(c.posted_messages(), 3);
        assert_eq!(RefusalCode::from_code(code.code()), Some(code));
    }
    assert_eq!(RefusalCode::from_code(0), None);
    assert_eq!(RefusalCode::from_code(9), None);
    let mut c = Completion::post_refused(9, 0x44, 1, 5, RefusalCode::Busy);
    c.kind = CompletionKind::WriteSent;
    assert_eq!(c.refusal(), None);
    assert_eq!(c.posted_messages(), 1);
    c.kind = CompletionKind::WritePlaced;
    assert_eq!(c.posted_messages(), 0);
}

/// A struct of only u64 counters with every one at its largest, whatever their number
/// (serde takes a struct from a sequence of its fields in order; counters left out of the
/// JSON when 0 are then present).
fn every_counter_largest<T: serde::de::DeserializeOwned>() -> T {
    (1..200)
        .find_map(|n| serde_json::from_value(serde_json::json!(vec![u64::MAX; n])).ok())
        .expect("a struct of u64 counters")
}

/// A flow's report as long as one can be: every counter at its largest, every optional part
/// present, strings longer than the datapath makes them.
fn largest_flow_report(flow_id: u64) -> stats::FlowReport {
    let long = "x".repeat(256);
    stats::FlowReport {
        flow_id,
        state: long.clone(),
        packets: u64::MAX,
        octets: u64::MAX,
        out_of_order_segments: u64::MAX,
        segments_batched: u64::MAX,
        duplicates: u64::MAX,
        sack_blocks_sent: u64::MAX,
        acks_sent: u64::MAX,
        acks_carried: u64::MAX,
        retransmissions: u64::MAX,
        frames_sent: u64::MAX,
        octets_out: u64::MAX,
        ulpdu_digest: Some(long.clone()),
        pd: Some(u32::MAX),
        placed_ahead_waiting: usize::MAX,
        posted_buffers: Some(usize::MAX),
        store_high_water: u64::MAX,
        dropped_reassembly_full: u64::MAX,
        dropped_out_of_window: u64::MAX,
        keepalive_probes: u64::MAX,
        window_probes: u64::MAX,
        tcp_drops: every_counter_largest(),
        ts_recent_inherited: Some(u32::MAX),
        rx: every_counter_largest(),
        tx: stats::TxStats {
            messages_posted: u64::MAX,
            messages_completed: u64::MAX,
            messages_queued: u64::MAX,
            fpdus_sent: u64::MAX,
            octets_read: u64::MAX,
            partial_fpdus: u64::MAX,
            cwnd: u64::MAX,
            srtt_us: Some(u64::MAX),
            read_responses: u64::MAX,
            ulpdu_digest: Some(long.clone()),
            ird: u32::MAX,
            ord: u32::MAX,
        },
        ended: Some(stats::EndReport {
            mpa_error: Some(u8::MAX),
            reason: long,
            terminate: Some(TerminateInfo {
                layer: u8::MAX,
                error_type: u8::MAX,
                error_code: u8::MAX,
                sent: false,
            }),
        }),
    }
}

/// A queue's report listing `flows`.
fn queue_with(queue: u32, flows: &[u64]) -> stats::QueueReport {
    let mut q: stats::QueueReport = serde_json::from_value(serde_json::json!({
        "queue": queue, "rx_frames": 0, "rx_octets": 0, "tx_frames": 0, "tx_octets": 0,
        "tx_no_frame": 0, "wakeups": 0, "malformed": 0, "unknown_flow": 0, "bursts": 0,
        "cpu_seconds": 0.0, "flows": []
    }))
    .unwrap();
    q.flows = flows.iter().map(|&id| largest_flow_report(id)).collect();
    q.flow_count = flows.len() as u64;
    q
}

/// A statistics page of `queues` covering (after, next].
fn page(queues: Vec<stats::QueueReport>, after: Option<u64>, next: Option<u64>) -> DatapathStats {
    DatapathStats {
        queues,
        flow_page: stats::FlowPage { after, next },
        ..Default::default()
    }
}

use stats::DatapathStats;

#[test]
fn the_largest_page_of_flows_fits_one_control_message() {
    let n = stats::MAX_FLOWS_PER_ANSWER as u64;
    let ids: Vec<u64> = (u64::MAX - n..u64::MAX).collect();
    // Every queue a datapath may have (one per worker, 64 at most), the page's flows spread
    // over them, and every ended flow kept.
    let mut queues: Vec<_> = (0..64).map(|q| queue_with(q, &[])).collect();
    for (i, id) in ids.iter().enumerate() {
        queues[i % 64].flows.push(largest_flow_report(*id));
    }
    let mut doc = page(queues, Some(0), Some(u64::MAX));
    doc.ended_flows = (0..stats::MAX_ENDED_FLOWS as u64)
        .map(largest_flow_report)
        .collect();
    let frame = encode_message(&Message::Stats {
        id: u64::MAX,
        stats: Box::new(doc),
    })
    .expect("the largest page encodes");
    // Room left for the rest of the document (registry, control, handover, Terminate
    // kinds: each bounded and small).
    assert!(
        frame.len() + (256 << 10) <= MAX_MESSAGE,
        "largest page {} octets, limit {MAX_MESSAGE}",
        frame.len()
    );
}

#[test]
fn pages_join_in_sequence_and_a_page_out_of_its_range_is_refused() {
    let mut doc = page(
        vec![queue_with(0, &[1, 4]), queue_with(1, &[2])],
        None,
        Some(4),
    );
    doc.check_page().unwrap();
    // The next page: flows on both queues and on a queue the first did not list.
    let next = page(
        vec![queue_with(1, &[6]), queue_with(3, &[5]), queue_with(0, &[])],
        Some(4),
        None,
    );
    doc.append_page(next).unwrap();
    let listed: Vec<(u32, u64)> = doc.live_flows().map(|(q, f)| (q, f.flow_id)).collect();
    assert_eq!(listed, vec![(0, 1), (0, 4), (1, 2), (1, 6), (3, 5)]);
    assert_eq!(
        doc.flow_page,
        stats::FlowPage {
            after: None,
            next: None
        }
    );
    // Nothing follows the last page.
    assert_eq!(
        doc.append_page(page(vec![], None, None)),
        Err(stats::PageError::OutOfSequence {
            expected: None,
            got: None
        })
    );

    let mut doc = page(vec![queue_with(0, &[1, 4])], None, Some(4));
    // A page that does not start where the last one ended.
    assert_eq!(
        doc.append_page(page(vec![queue_with(0, &[9])], Some(5), None)),
        Err(stats::PageError::OutOfSequence {
            expected: Some(4),
            got: Some(5)
        })
    );
    // Flows at or below where the page starts, or above where the next one would.
    assert_eq!(
        doc.append_page(page(vec![queue_with(0, &[4])], Some(4), None)),
        Err(stats::PageError::OutOfRange(4))
    );
    assert_eq!(
        page(vec![queue_with(0, &[8])], Some(4), Some(7)).check_page(),
        Err(stats::PageError::OutOfRange(8))
    );
    // More said to follow, none listed: asking again would never end.
    assert_eq!(
        doc.append_page(page(vec![queue_with(0, &[])], Some(4), Some(4))),
        Err(stats::PageError::NoProgress(Some(4)))
    );
    // The document is as it was after every refused page.
    assert_eq!(doc.live_flows().count(), 2);
    assert_eq!(doc.flow_page.next, Some(4));
}
