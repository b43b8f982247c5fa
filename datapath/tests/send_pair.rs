//! Two whole workers on in-memory rings, back to back: worker A owns one end of a connection
//! and sends RDMA Writes and Sends a consumer posted (`Command::PostSend`) from a registered
//! region; worker B owns the other end and places them. Frames cross a lossy, reordering link
//! in between. Checks what a consumer would: the sink region holds the source's octets
//! exactly, each side's completions arrive once, in order, with the right offsets, and the
//! segments A sent each start with an FPDU (RFC 5044 §5.1).

mod pair;

use crossbeam_channel::unbounded;
use mpa::wire::fpdu;
use mpa_ctl_proto::stats::FlowReport;
use mpa_ctl_proto::CompletionKind;
use mpa_datapath::worker::{Command, WorkerError};
use mpa_stack::flow::{PostOp, SgList, WorkRequest};
use mpa_stack::sim::SplitMix64;
use mpa_stack::wire::frame::parse_tcp_frame;
use pair::*;
use std::time::{Duration, Instant};

fn writes_arrive_exactly(markers: bool, loss: f64, seed: u64) {
    const LEN: u64 = 1 << 20;
    const MSG: u64 = 4096;
    let count = (LEN / MSG) as u32;
    let mut a = end(true, markers, LEN);
    let b = end(false, markers, LEN);
    fill_pattern(&a.mem, LEN, seed);
    let op = PostOp::Write {
        sink_stag: SINK,
        sink_to: 0,
    };
    let first = post(
        &mut a.worker,
        1,
        WorkRequest {
            flow_id: 1,
            op,
            sg_list: SgList::one(SRC, 0, MSG),
            count,
            wr_id: 0,
            signaled: true,
            solicited: false,
            fence: false,
        },
    );
    assert_eq!(first.unwrap(), None);
    let r = run(a, b, loss, seed, count as usize, count as usize);
    assert!(
        contents(&r.a.mem) == contents(&r.b.mem),
        "sink differs from source"
    );
    for (i, c) in r.a.completions.iter().enumerate() {
        assert_eq!(
            (c.flow_id, c.kind, c.stag),
            (1, CompletionKind::WriteSent, SRC)
        );
        assert_eq!((c.offset, c.len, c.msn), (i as u64 * MSG, MSG, None));
    }
    for (i, c) in r.b.completions.iter().enumerate() {
        assert_eq!(
            (c.flow_id, c.kind, c.stag),
            (2, CompletionKind::WritePlaced, SINK)
        );
        assert_eq!((c.offset, c.len), (i as u64 * MSG, MSG));
    }
    assert_eq!(r.a.completions.len(), count as usize);
    assert_eq!(r.b.completions.len(), count as usize);
    let fa = &r.a.worker.report().flows[0];
    assert_eq!(fa.tx.messages_posted, u64::from(count));
    assert_eq!(fa.tx.messages_completed, u64::from(count));
    assert_eq!(fa.tx.messages_queued, 0);
    assert_eq!(fa.tx.partial_fpdus, 0, "every segment whole FPDUs");
    if loss > 0.0 {
        assert!(fa.retransmissions > 0, "{loss}: nothing lost?");
    }
    let fb = &r.b.worker.report().flows[0];
    assert_eq!((fb.rx.crc_errors, fb.rx.marker_errors), (0, 0));
    // The sender's digest of what it sent is the receiver's of what it got, retransmissions
    // and all.
    assert!(fa.tx.ulpdu_digest.is_some());
    assert_eq!(fa.tx.ulpdu_digest, fb.ulpdu_digest);
    assert_eq!(fb.rx.placed_octets, LEN);
    if !markers {
        // Every segment A sent is whole FPDUs: from its first octet, ULPDU_Lengths chain
        // to its very end (RFC 5044 §5.1).
        for seg in &r.segments {
            let mut at = 0;
            while at + 2 <= seg.len() {
                let ulpdu = u16::from_be_bytes([seg[at], seg[at + 1]]);
                at += fpdu::fpdu_len(usize::from(ulpdu));
            }
            assert_eq!(
                at,
                seg.len(),
                "a segment of {} octets not cut after an FPDU",
                seg.len()
            );
        }
    }
    assert!(r.segments.len() as u64 >= u64::from(count));
    // A graceful close: A's FIN after its last FPDU, B answers with its own; both flows end
    // cleanly.
    let (mut a, mut b) = (r.a, r.b);
    assert!(a.worker.apply(Command::Finish(1)));
    let mut now = Instant::now() + Duration::from_secs(1000);
    let mut rng = SplitMix64(seed);
    let (mut h1, mut h2) = (Vec::new(), Vec::new());
    for _ in 0..2_000 {
        a.worker.poll_once_at(now).unwrap();
        let mut busy = carry(&a.wire, &b.wire, &mut rng, loss, &mut h1);
        b.worker.poll_once_at(now).unwrap();
        busy += carry(&b.wire, &a.wire, &mut rng, loss, &mut h2);
        if a.worker.report().flows.is_empty() && b.worker.report().flows.is_empty() {
            return;
        }
        // Idle: on to the next timer (a FIN's retransmission, TIME-WAIT's end).
        now += Duration::from_millis(if busy > 0 { 1 } else { 100 });
    }
    panic!(
        "no clean close: A {:?}, B {:?}",
        a.worker.report().flows,
        b.worker.report().flows
    );
}

#[test]
fn writes_arrive_octet_exact_without_loss() {
    writes_arrive_exactly(false, 0.0, 1);
    writes_arrive_exactly(true, 0.0, 2);
}

#[test]
fn writes_arrive_octet_exact_at_1_and_5_percent_loss() {
    for (markers, loss, seed) in [
        (false, 0.01, 3),
        (true, 0.01, 4),
        (false, 0.05, 5),
        (true, 0.05, 6),
    ] {
        writes_arrive_exactly(markers, loss, seed);
    }
}

#[test]
fn sends_land_in_posted_buffers_in_msn_order() {
    const MSG: u64 = 3000;
    let count = 40u32;
    let mut a = end(true, true, 1 << 20);
    let mut b = end(false, true, 1 << 20);
    fill_pattern(&a.mem, 1 << 20, 9);
    // B posts 40 buffers of 4 KiB in its buffer region.
    let bufs = (0..count)
        .map(|i| mpa_stack::receiver::PostedBuf {
            stag: BUFS,
            offset: u64::from(i) * 4096,
            len: 4096,
            wr_id: 0,
        })
        .collect();
    let (answer, result) = unbounded();
    assert!(b.worker.apply(Command::PostRecv(2, bufs, answer)));
    result.recv().unwrap().unwrap();
    let first = post(
        &mut a.worker,
        1,
        WorkRequest {
            flow_id: 1,
            op: PostOp::Send,
            sg_list: SgList::one(SRC, 100, MSG),
            count,
            wr_id: 0,
            signaled: true,
            solicited: false,
            fence: false,
        },
    );
    assert_eq!(first.unwrap(), Some(1));
    let r = run(a, b, 0.02, 11, count as usize, count as usize);
    for (i, c) in r.a.completions.iter().enumerate() {
        assert_eq!(c.kind, CompletionKind::SendSent);
        assert_eq!(
            (c.offset, c.len, c.msn),
            (100 + i as u64 * MSG, MSG, Some(i as u32 + 1))
        );
    }
    let region_b = r.b.worker.report();
    assert_eq!(region_b.flows[0].tx.messages_posted, 0);
    for (i, c) in r.b.completions.iter().enumerate() {
        assert_eq!(c.kind, CompletionKind::SendArrived);
        assert_eq!(
            (c.stag, c.offset, c.len, c.msn),
            (BUFS, i as u64 * 4096, MSG, Some(i as u32 + 1))
        );
    }
    // The Sends' octets in B's buffers.
    let mut got = vec![0u8; MSG as usize];
    let src = contents(&r.a.mem);
    for i in 0..count as u64 {
        assert!(r.b.bufs.as_ref().unwrap().read(i * 4096, &mut got));
        let from = (100 + i * MSG) as usize;
        assert!(
            got[..] == src[from..from + MSG as usize],
            "Send {i} differs"
        );
    }
}

#[test]
fn posts_are_checked_and_refused_whole() {
    let mut a = end(true, false, 1 << 16);
    let p = |stag, offset, len, count| WorkRequest {
        flow_id: 1,
        op: PostOp::Write {
            sink_stag: SINK,
            sink_to: 0,
        },
        sg_list: SgList::one(stag, offset, len),
        count,
        wr_id: 0,
        signaled: true,
        solicited: false,
        fence: false,
    };
    let err = |r: Result<Option<u32>, WorkerError>| r.unwrap_err().to_string();
    assert_eq!(
        err(post(&mut a.worker, 1, p(0x99, 0, 10, 1))),
        "flow 1: no registered region 0x00000099"
    );
    assert_eq!(
        err(post(&mut a.worker, 1, p(SRC, 0, 4096, 17))),
        "flow 1: 69632 octets at 0 lie outside region 0x00000010 of 65536 octets"
    );
    assert_eq!(
        err(post(&mut a.worker, 7, p(SRC, 0, 1, 1))),
        "no flow 7 on this worker"
    );
    assert_eq!(
        err(post(&mut a.worker, 1, p(SRC, 0, 1, 5000))),
        "flow 1: send queue full (4096 messages)"
    );
    let r = a.worker.report();
    assert_eq!(
        r.flows[0].tx.messages_posted, 0,
        "refused posts queue nothing"
    );
}

#[test]
fn reads_fetch_the_peers_region_octet_exact() {
    // 64 reads of 16 KiB (each answered by a multi-FPDU Read Response), more than the ORD
    // bound at once, at 2 % loss with reordering; markers on.
    const LEN: u64 = 1 << 20;
    const READ: u64 = 16384;
    let count = (LEN / READ) as u32;
    let mut a = end(true, true, LEN);
    let b = end(false, true, LEN);
    fill_pattern(b.readable.as_ref().unwrap(), LEN, 21);
    let op = PostOp::Read {
        src_stag: READABLE,
        src_to: 0,
    };
    let p = WorkRequest {
        flow_id: 1,
        op,
        sg_list: SgList::one(SRC, 0, READ),
        count,
        wr_id: 0,
        signaled: true,
        solicited: false,
        fence: false,
    };
    assert_eq!(post(&mut a.worker, 1, p).unwrap(), None);
    let r = run(a, b, 0.02, 21, count as usize, 0);
    assert!(
        contents(&r.a.mem) == contents(r.b.readable.as_ref().unwrap()),
        "what A read differs from B's region"
    );
    for (i, c) in r.a.completions.iter().enumerate() {
        assert_eq!(
            (c.flow_id, c.kind, c.stag),
            (1, CompletionKind::ReadResponsePlaced, SRC)
        );
        assert_eq!((c.offset, c.len), (i as u64 * READ, READ));
    }
    assert_eq!(r.a.completions.len(), count as usize);
    assert!(
        r.b.completions.is_empty(),
        "the Data Source reports nothing to its consumer"
    );
    let fb = &r.b.worker.report().flows[0];
    assert_eq!(fb.tx.read_responses, u64::from(count));
    assert!(fb.ended.is_none(), "{fb:?}");
}

/// The flow's report, open or gone.
fn flow_report(e: &End) -> FlowReport {
    e.worker
        .report()
        .flows
        .into_iter()
        .next()
        .or_else(|| e.gone.clone())
        .expect("the worker has its flow or reported its end")
}

/// Reads of `READ` octets each, `count` of them, from B's readable region into A's.
fn reads(count: u32, len: u64) -> WorkRequest {
    WorkRequest {
        flow_id: 1,
        op: PostOp::Read {
            src_stag: READABLE,
            src_to: 0,
        },
        sg_list: SgList::one(SRC, 0, len),
        count,
        wr_id: 0,
        signaled: true,
        solicited: false,
        fence: false,
    }
}

/// RFC 6581 §9.1: B's negotiated IRD is 2 and A's ORD 2 — A keeps at most two Read Requests
/// outstanding (B would end the stream at a third, 0/2/7), so 48 reads all complete through
/// loss. Without the negotiated ORD A would send 16 at once.
#[test]
fn reads_stay_within_the_negotiated_ord() {
    const LEN: u64 = 1 << 18;
    const READ: u64 = 4096 + 100;
    let count = (LEN / READ) as u32;
    let mut a = end_with(true, true, LEN, Some(8), Some(2));
    let b = end_with(false, true, LEN, Some(2), Some(8));
    fill_pattern(b.readable.as_ref().unwrap(), LEN, 61);
    assert_eq!(post(&mut a.worker, 1, reads(count, READ)).unwrap(), None);
    let r = run(a, b, 0.02, 61, count as usize, 0);
    let n = (u64::from(count) * READ) as usize;
    assert!(
        contents(&r.a.mem)[..n] == contents(r.b.readable.as_ref().unwrap())[..n],
        "what A read differs from B's region"
    );
    assert_eq!(r.a.completions.len(), count as usize);
    let fb = flow_report(&r.b);
    assert!(fb.ended.is_none(), "{fb:?}");
    assert_eq!(fb.tx.read_responses, u64::from(count));
}

/// A peer that ignores the IRD it was given (A has no negotiated ORD and sends 16 Read
/// Requests; B negotiated IRD 3): B serves three and ends the stream at the fourth with
/// RDMAP's catastrophic error (layer 0, type 2, code 7), naming its IRD.
#[test]
fn a_read_beyond_the_negotiated_ird_ends_the_stream() {
    let mut a = end_with(true, false, 1 << 16, None, None);
    let b = end_with(false, false, 1 << 16, Some(3), None);
    assert_eq!(post(&mut a.worker, 1, reads(16, 1024)).unwrap(), None);
    let r = run_until(a, b, 0.0, 62, |a, b| {
        flow_report(a).ended.is_some() && flow_report(b).ended.is_some()
    });
    let eb = flow_report(&r.b).ended.expect("B ended");
    let t = eb.terminate.as_ref().expect("B sent a Terminate");
    assert_eq!((t.layer, t.error_type, t.error_code), (0, 2, 7), "{eb:?}");
    assert_eq!(
        eb.reason,
        "Read Request MSN 4: more than 3 RDMA Read Requests outstanding"
    );
    let ea = flow_report(&r.a).ended.expect("A ended");
    assert!(ea.terminate.is_some(), "A saw B's Terminate: {ea:?}");
    // Every Read completes once, in order, with its work request id: what B answered before
    // the fourth landed; the fourth, which B's Terminate names (queue 1, MSN 4), with its
    // status (a remote operation error); then the rest flushed.
    use mpa_ctl_proto::CompletionStatus as S;
    let c = &r.a.completions;
    assert_eq!(c.len(), 16, "{c:?}");
    for (i, c) in c.iter().enumerate() {
        assert_eq!(c.kind, CompletionKind::ReadResponsePlaced, "{c:?}");
        assert_eq!(
            (c.wr_id, c.offset, c.len),
            (i as u64, i as u64 * 1024, 1024)
        );
        let want = match i {
            0..3 => S::Success,
            3 => S::RemoteOperation,
            _ => S::Flushed,
        };
        assert_eq!(c.status, want, "read {i}: {c:?}");
    }
}

/// An ORD of 0 negotiated: a Read is refused when posted, nothing is sent.
#[test]
fn no_reads_with_a_negotiated_ord_of_zero() {
    let mut a = end_with(true, false, 1 << 16, Some(4), Some(0));
    assert_eq!(
        post(&mut a.worker, 1, reads(1, 1024))
            .unwrap_err()
            .to_string(),
        "flow 1: the connection's negotiated ORD is 0: no RDMA Read may be sent"
    );
    // Writes still go.
    let w = WorkRequest {
        op: PostOp::Write {
            sink_stag: SINK,
            sink_to: 0,
        },
        ..reads(1, 1024)
    };
    assert_eq!(post(&mut a.worker, 1, w).unwrap(), None);
}

#[test]
fn reads_are_checked_where_they_land() {
    let mut a = end(true, false, 1 << 16);
    let read = |stag, offset, len, count| WorkRequest {
        flow_id: 1,
        op: PostOp::Read {
            src_stag: READABLE,
            src_to: 0,
        },
        sg_list: SgList::one(stag, offset, len),
        count,
        wr_id: 0,
        signaled: true,
        solicited: false,
        fence: false,
    };
    let err = |r: Result<Option<u32>, WorkerError>| r.unwrap_err().to_string();
    assert_eq!(
        err(post(&mut a.worker, 1, read(SRC, 0, 0, 1))),
        "flow 1: an RDMA Read of 0 octets: reads here are 1 ..= 4294967295 octets"
    );
    assert_eq!(
        err(post(&mut a.worker, 1, read(SRC, 1 << 15, 1 << 15, 2))),
        "flow 1: 65536 octets at 32768 lie outside region 0x00000010 of 65536 octets"
    );
    assert_eq!(
        err(post(&mut a.worker, 1, read(0x77, 0, 1, 1))),
        "flow 1: no registered region 0x00000077"
    );
}

/// A worker asleep between frames serves a message posted meanwhile at once: the poll after
/// the post sends it without first blocking for frames (it used to wait for poll()'s timeout,
/// up to 10 ms, before it looked at the flow). Counted, not timed: `rx_waits` is the number
/// of blocking waits.
#[test]
fn a_posted_message_is_sent_without_waiting_for_frames() {
    let mut a = end(true, false, 1 << 16);
    let now = Instant::now();
    // Idle long enough to stop spinning (256 empty polls) and block once.
    for _ in 0..300 {
        a.worker.poll_once_at(now).unwrap();
        if a.worker.report().ring.rx_waits > 0 {
            break;
        }
    }
    let waits = a.worker.report().ring.rx_waits;
    assert!(waits > 0, "the idle worker never blocked");
    let _ = a.wire.take_sent();
    let op = PostOp::Write {
        sink_stag: SINK,
        sink_to: 0,
    };
    let p = WorkRequest {
        flow_id: 1,
        op,
        sg_list: SgList::one(SRC, 0, 1000),
        count: 1,
        wr_id: 0,
        signaled: true,
        solicited: false,
        fence: false,
    };
    assert_eq!(post(&mut a.worker, 1, p).unwrap(), None);
    a.worker.poll_once_at(now).unwrap();
    assert_eq!(
        a.worker.report().ring.rx_waits,
        waits,
        "blocked before sending"
    );
    let sent = a.wire.take_sent();
    let data: Vec<_> = sent
        .iter()
        .filter_map(|f| parse_tcp_frame(f, true).ok())
        .filter(|p| !p.tcp.payload().is_empty())
        .collect();
    assert_eq!(data.len(), 1, "the Write left in that poll");
}

/// The TCP segments of `frames`: (acknowledgment number, payload length).
fn acks_and_lengths(frames: &[Vec<u8>]) -> Vec<(u32, usize)> {
    frames
        .iter()
        .map(|f| {
            let p = parse_tcp_frame(f, true).expect("valid frames");
            (p.tcp.ack_number().0, p.tcp.payload().len())
        })
        .collect()
}

/// Where the stream of the segments in `frames` ends (the ACK that covers them).
fn stream_end(frames: &[Vec<u8>]) -> u32 {
    let p = parse_tcp_frame(frames.last().expect("a segment"), true).expect("valid frames");
    p.tcp
        .seq_number()
        .0
        .wrapping_add(p.tcp.payload().len() as u32)
}

/// Run-to-completion holds the pure ACK a turn owes to in-order data until the next turn:
/// a reply posted in between carries it (one segment, not an ACK and then the reply, as the
/// kernel's delayed ACK does for request-response); without a reply the ACK leaves at the
/// next turn. A worker thread (process mode) acknowledges in the same turn.
#[test]
fn a_run_to_completion_reply_carries_the_ack_of_the_message_it_answers() {
    for run_to_completion in [true, false] {
        let mut a = end(true, false, 1 << 16);
        let mut b = end_full(false, false, 1 << 16, None, None, None, run_to_completion);
        let now = Instant::now();
        let write = |stag, sink_stag| WorkRequest {
            flow_id: 1,
            op: PostOp::Write {
                sink_stag,
                sink_to: 0,
            },
            sg_list: SgList::one(stag, 0, 64),
            count: 1,
            wr_id: 0,
            signaled: true,
            solicited: false,
            fence: false,
        };
        for round in 0..3u64 {
            // A's Write to B's sink: one segment.
            assert_eq!(post(&mut a.worker, 1, write(SRC, SINK)).unwrap(), None);
            a.worker.poll_once_at(now).unwrap();
            let from_a = a.wire.take_sent();
            assert_eq!(acks_and_lengths(&from_a).len(), 1);
            let end_of_a = stream_end(&from_a);
            for f in from_a {
                assert!(b.wire.inject(f));
            }
            b.worker.poll_once_at(now).unwrap();
            b.rings.poll(&mut b.completions, 64).unwrap();
            let placed = |e: &End| {
                e.completions
                    .iter()
                    .filter(|c| c.kind == CompletionKind::WritePlaced)
                    .count() as u64
            };
            assert_eq!(placed(&b), round + 1, "the Write placed");
            let sent = acks_and_lengths(&b.wire.take_sent());
            if !run_to_completion {
                assert_eq!(
                    sent,
                    vec![(end_of_a, 0)],
                    "a worker thread acknowledges at once"
                );
                continue;
            }
            assert_eq!(sent, vec![], "the ACK is held (and nothing handed over)");
            let sent = if round == 1 {
                // No reply: the next turn sends the ACK on its own.
                b.worker.poll_once_at(now).unwrap();
                b.worker.poll_once_at(now).unwrap();
                acks_and_lengths(&b.wire.take_sent())
            } else {
                // The reply (B's readable region to A's), posted before B's next turn.
                assert_eq!(post(&mut b.worker, 2, write(READABLE, SRC)).unwrap(), None);
                b.worker.poll_once_at(now).unwrap();
                b.worker.poll_once_at(now).unwrap();
                let sent = b.wire.take_sent();
                for f in &sent {
                    assert!(a.wire.inject(f.clone()));
                }
                a.worker.poll_once_at(now).unwrap();
                let _ = a.wire.take_sent();
                acks_and_lengths(&sent)
            };
            let want = if round == 1 { 0 } else { 64 + 14 + 6 };
            assert_eq!(
                sent,
                vec![(end_of_a, want)],
                "one segment acknowledges A's Write"
            );
        }
        // The two replies each carried the ACK B held; the ACK sent on its own is not counted.
        let carried = b.worker.report().flows[0].acks_carried;
        assert_eq!(carried, if run_to_completion { 2 } else { 0 });
        a.rings.poll(&mut a.completions, 64).unwrap();
        let replies = if run_to_completion { 2 } else { 0 };
        let placed = a
            .completions
            .iter()
            .filter(|c| c.kind == CompletionKind::WritePlaced)
            .count();
        assert_eq!(placed, replies, "{:?}", a.completions);
    }
}

/// Peer-to-peer (RFC 6581 §9.2), two datapaths: A (Initiator) sends each RTR type first, B
/// (Responder) takes it; then Writes, Sends and Reads go each way. An untagged RTR takes MSN 1
/// of its queue (RFC 5041 §5.1): A's first Send after a Send RTR carries MSN 2, its first Read
/// after a Read RTR MSN 2, and B expects exactly that (it would end the stream with DDP
/// 1/2/3 otherwise); the zero-length Read Response to A's Read RTR completes nothing for A's
/// consumer. Every octet is compared.
#[test]
fn every_rtr_then_writes_sends_and_reads_both_ways_between_two_datapaths() {
    use mpa::startup::RtrType;
    const LEN: u64 = 1 << 18;
    const MSG: u64 = 3000;
    const COUNT: u32 = 12;
    // Each end's region that remote writes, Sends and Reads land in.
    let main_stag = |e: usize| if e == 0 { SRC } else { SINK };
    for rtr in RtrType::ALL {
        for op in ["write", "send", "read"] {
            for actor in [0usize, 1] {
                let other = 1 - actor;
                let what = format!("{rtr:?}: {op} by {}", ["A", "B"][actor]);
                let mut ends = [
                    end_full(true, true, LEN, Some(8), Some(8), Some(rtr), false),
                    end_full(false, true, LEN, Some(8), Some(8), Some(rtr), false),
                ];
                let flow = |e: usize| e as u64 + 1;
                // The octets: the actor's readable region (Writes, Sends), or the other's
                // (Reads); they land in the main region of the other end (Reads: the actor's).
                let (source, dest) = if op == "read" {
                    (other, actor)
                } else {
                    (actor, other)
                };
                let src_mem = ends[source].readable.clone().unwrap();
                fill_pattern(&src_mem, LEN, 77);
                let post_op = match op {
                    "write" => PostOp::Write {
                        sink_stag: main_stag(dest),
                        sink_to: 0,
                    },
                    "send" => {
                        let bufs = (0..COUNT)
                            .map(|i| mpa_stack::receiver::PostedBuf {
                                stag: main_stag(dest),
                                offset: u64::from(i) * 4096,
                                len: 4096,
                                wr_id: 0,
                            })
                            .collect();
                        let (answer, result) = unbounded();
                        let w = &mut ends[dest].worker;
                        assert!(w.apply(Command::PostRecv(flow(dest), bufs, answer)));
                        result.recv().unwrap().unwrap();
                        PostOp::Send
                    }
                    _ => PostOp::Read {
                        src_stag: READABLE,
                        src_to: 0,
                    },
                };
                let first = post(
                    &mut ends[actor].worker,
                    flow(actor),
                    WorkRequest {
                        flow_id: 1,
                        op: post_op,
                        sg_list: SgList::one(
                            if op == "read" {
                                main_stag(actor)
                            } else {
                                READABLE
                            },
                            0,
                            MSG,
                        ),
                        count: COUNT,
                        wr_id: 0,
                        signaled: true,
                        solicited: false,
                        fence: false,
                    },
                )
                .unwrap_or_else(|e| panic!("{what}: {e}"));
                // After A's Send RTR (MSN 1 of queue 0), A's Sends start at MSN 2.
                let send_base = 1 + u32::from(actor == 0 && rtr == RtrType::ZeroLengthSend);
                if op == "send" {
                    assert_eq!(first, Some(send_base), "{what}");
                }
                let want = COUNT as usize;
                let [a, b] = ends;
                let r = run_until(a, b, 0.01, 5, |a, b| {
                    let e = [a, b];
                    e[dest].completions.len() >= want
                        && (op == "read" || e[source].completions.len() >= want)
                });
                let e = [&r.a, &r.b];
                for x in e {
                    let f = flow_report(x);
                    assert!(f.ended.is_none(), "{what}: {f:?}");
                }
                let src_octets = contents(&src_mem);
                let mut got = vec![0u8; MSG as usize];
                for i in 0..u64::from(COUNT) {
                    let want = &src_octets[(i * MSG) as usize..((i + 1) * MSG) as usize];
                    let off = if op == "send" { i * 4096 } else { i * MSG };
                    assert!(e[dest].mem.read(off, &mut got));
                    assert!(got == want, "{what}: message {i} differs");
                }
                let (kind, sent_kind) = match op {
                    "write" => (CompletionKind::WritePlaced, Some(CompletionKind::WriteSent)),
                    "send" => (CompletionKind::SendArrived, Some(CompletionKind::SendSent)),
                    _ => (CompletionKind::ReadResponsePlaced, None),
                };
                let kinds: Vec<_> = e[dest].completions.iter().map(|c| c.kind).collect();
                assert_eq!(kinds, vec![kind; want], "{what}");
                if let Some(k) = sent_kind {
                    let kinds: Vec<_> = e[source].completions.iter().map(|c| c.kind).collect();
                    assert_eq!(kinds, vec![k; want], "{what}");
                } else {
                    assert!(e[source].completions.is_empty(), "{what}");
                }
                if op == "send" {
                    let msns: Vec<_> = e[dest].completions.iter().map(|c| c.msn.unwrap()).collect();
                    let want: Vec<u32> = (send_base..send_base + COUNT).collect();
                    assert_eq!(msns, want, "{what}");
                }
            }
        }
    }
}

/// A flow's send budget (docs/limits.md: 1 GiB of the consumer's Writes and Sends queued):
/// a post that would go past it is refused whole with the budget's numbers, one within it is
/// taken, and nothing is queued by a refusal. (The region is a sparse memfd: nothing is read
/// unless sent.)
#[test]
fn posts_beyond_the_send_budget_are_refused_whole() {
    const MIB: u64 = 1 << 20;
    // Not a multiple of the huge page: a sparse memfd, nothing reserved up front.
    let mut a = end(true, false, 2048 * MIB + 4096);
    let p = |offset, count| WorkRequest {
        flow_id: 1,
        op: PostOp::Write {
            sink_stag: SINK,
            sink_to: 0,
        },
        sg_list: SgList::one(SRC, offset, 768 * MIB),
        count,
        wr_id: 0,
        signaled: true,
        solicited: false,
        fence: false,
    };
    let err = |r: Result<Option<u32>, WorkerError>| r.unwrap_err().to_string();
    assert_eq!(
        err(post(&mut a.worker, 1, p(0, 2))),
        "flow 1: send budget: 0 octets queued + 1610612736 posted exceed the flow's 1073741824"
    );
    assert_eq!(a.worker.report().flows[0].tx.messages_posted, 0);
    post(&mut a.worker, 1, p(0, 1)).expect("within the budget");
    assert_eq!(
        err(post(&mut a.worker, 1, p(768 * MIB, 1))),
        "flow 1: send budget: 805306368 octets queued + 805306368 posted exceed the flow's 1073741824"
    );
    assert_eq!(a.worker.report().flows[0].tx.messages_posted, 1);
}
