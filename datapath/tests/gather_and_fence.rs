//! A work request's scatter-gather list, Solicited Event and fence, end to end between two
//! in-memory workers (the `pair` fixture): a gathered Write or Send places its entries' octets
//! one after the other, octet-exact, through markers, FPDU edges and retransmissions; a
//! solicited Send goes out with RDMAP opcode 5; a fenced request starts only once the Reads
//! posted before it are answered; and whatever is posted behind a Read that waits for ORD room
//! keeps its place, and is flushed with it (docs/consumer.md, "Work requests").

mod pair;

use mpa::wire::fpdu;
use mpa_ctl_proto::{CompletionKind, CompletionStatus as S};
use mpa_datapath::worker::Command;
use mpa_stack::flow::{PostOp, SgList, Sge, WorkRequest};
use mpa_stack::receiver::PostedBuf;
use mpa_stack::wire::frame::parse_tcp_frame;
use pair::*;
use std::time::{Duration, Instant};

/// A second region of A's, of another STag.
const OTHER: u32 = 0x50;

fn post_with(op: PostOp, sg: SgList, wr_id: u64) -> WorkRequest {
    WorkRequest {
        flow_id: 1,
        op,
        sg_list: sg,
        count: 1,
        wr_id,
        signaled: true,
        solicited: false,
        fence: false,
    }
}

fn write_to(sink_to: u64) -> PostOp {
    PostOp::Write {
        sink_stag: SINK,
        sink_to,
    }
}

/// The RDMAP opcodes of the FPDUs in TCP payloads, in order (no markers, and A aligns: each
/// segment starts with an FPDU).
fn opcodes(payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut ops = Vec::new();
    for p in payloads {
        let mut at = 0;
        while at + 4 <= p.len() {
            ops.push(p[at + 3] & 0x0f);
            let ulpdu_len = u16::from_be_bytes([p[at], p[at + 1]]);
            at += fpdu::fpdu_len(usize::from(ulpdu_len));
        }
    }
    ops
}

/// (kind, wr_id, status) of each of an end's completions, in order.
fn outcomes(e: &End) -> Vec<(CompletionKind, u64, S)> {
    e.completions
        .iter()
        .map(|c| (c.kind, c.wr_id, c.status))
        .collect()
}

/// The TCP payloads of frames.
fn payloads(frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    frames
        .iter()
        .filter_map(|f| Some(parse_tcp_frame(f, true).ok()?.tcp.payload().to_vec()))
        .collect()
}

#[test]
fn gathered_writes_and_sends_place_their_entries_octet_exact() {
    let mut a = end(true, true, 1 << 16);
    let (other, other_mem) = region(OTHER, 1 << 12, "gather-other");
    assert!(a.worker.apply(Command::AddRegion(other)));
    fill_pattern(&a.mem, 1 << 16, 3);
    fill_pattern(&other_mem, 1 << 12, 4);
    let mut b = end(false, true, 1 << 16);
    let (answer, result) = crossbeam_channel::unbounded();
    let buf = PostedBuf {
        stag: BUFS,
        offset: 8192,
        len: 8192,
        wr_id: 77,
    };
    assert!(b.worker.apply(Command::PostRecv(2, vec![buf], answer)));
    result.recv().unwrap().unwrap();
    // A Write of three entries from two regions (one of 7 octets, which no FPDU edge
    // or marker respects), and a Send of two.
    let write = [
        Sge {
            stag: SRC,
            offset: 100,
            len: 3000,
        },
        Sge {
            stag: OTHER,
            offset: 3,
            len: 7,
        },
        Sge {
            stag: SRC,
            offset: 20_000,
            len: 5000,
        },
    ];
    let send = [
        Sge {
            stag: OTHER,
            offset: 0,
            len: 10,
        },
        Sge {
            stag: SRC,
            offset: 40_000,
            len: 4000,
        },
    ];
    let sg = |e: &[Sge]| SgList::new(e).unwrap();
    post(&mut a.worker, 1, post_with(write_to(64), sg(&write), 1)).unwrap();
    post(&mut a.worker, 1, post_with(PostOp::Send, sg(&send), 2)).unwrap();
    // Loss makes A read the entries again for its retransmissions.
    let r = run(a, b, 0.03, 17, 2, 2);
    let gathered = |entries: &[Sge]| -> Vec<u8> {
        let (src, other) = (contents(&r.a.mem), contents(&other_mem));
        entries
            .iter()
            .flat_map(|e| {
                let m = if e.stag == SRC { &src } else { &other };
                m[e.offset as usize..(e.offset + e.len) as usize].to_vec()
            })
            .collect()
    };
    let sink = contents(&r.b.mem);
    assert!(sink[..64].iter().all(|&x| x == 0));
    assert_eq!(sink[64..64 + 8007], gathered(&write)[..]);
    assert!(sink[64 + 8007..].iter().all(|&x| x == 0), "nothing beyond");
    let bufs = contents(r.b.bufs.as_ref().unwrap());
    assert_eq!(bufs[8192..8192 + 4010], gathered(&send)[..]);
    assert!(bufs[8192 + 4010..].iter().all(|&x| x == 0));
    // Each completes once, with the list's whole length and its first entry.
    let done: Vec<_> =
        r.a.completions
            .iter()
            .map(|c| (c.kind, c.wr_id, c.status, c.stag, c.offset, c.len))
            .collect();
    assert_eq!(
        done,
        vec![
            (CompletionKind::WriteSent, 1, S::Success, SRC, 100, 8007),
            (CompletionKind::SendSent, 2, S::Success, OTHER, 0, 4010),
        ]
    );
    let arrived: Vec<_> =
        r.b.completions
            .iter()
            .map(|c| (c.kind, c.wr_id, c.len))
            .collect();
    assert_eq!(
        arrived,
        vec![
            (CompletionKind::WritePlaced, 0, 8007),
            (CompletionKind::SendArrived, 77, 4010)
        ]
    );
}

#[test]
fn a_solicited_send_goes_out_as_send_with_solicited_event() {
    let mut a = end(true, false, 1 << 16);
    let mut b = end(false, false, 1 << 16);
    let (answer, result) = crossbeam_channel::unbounded();
    let bufs = (0..2)
        .map(|i| PostedBuf {
            stag: BUFS,
            offset: i * 4096,
            len: 4096,
            wr_id: 10 + i,
        })
        .collect();
    assert!(b.worker.apply(Command::PostRecv(2, bufs, answer)));
    result.recv().unwrap().unwrap();
    let plain = post_with(PostOp::Send, SgList::one(SRC, 0, 100), 1);
    let solicited = WorkRequest {
        solicited: true,
        wr_id: 2,
        ..plain
    };
    post(&mut a.worker, 1, plain).unwrap();
    post(&mut a.worker, 1, solicited).unwrap();
    let r = run(a, b, 0.0, 5, 2, 2);
    // RFC 5040 §4.2: Send 3, Send with Solicited Event 5.
    assert_eq!(opcodes(&r.segments), vec![3, 5]);
    let got: Vec<_> =
        r.b.completions
            .iter()
            .map(|c| (c.kind, c.wr_id, c.msn))
            .collect();
    assert_eq!(
        got,
        vec![
            (CompletionKind::SendArrived, 10, Some(1)),
            (CompletionKind::SendArrived, 11, Some(2))
        ]
    );
}

/// A posts a Read of B's readable region, then a Write: with the fence, the Write is not on
/// the wire until the Read's response is placed; without it, it goes at once.
#[test]
fn a_fenced_write_waits_for_the_reads_posted_before_it() {
    for fence in [false, true] {
        let mut a = end(true, false, 1 << 16);
        let b = end(false, false, 1 << 16);
        fill_pattern(b.readable.as_ref().unwrap(), 1 << 16, 9);
        let read = WorkRequest {
            op: PostOp::Read {
                src_stag: READABLE,
                src_to: 0,
            },
            ..post_with(PostOp::Send, SgList::one(SRC, 0, 4096), 1)
        };
        let write = WorkRequest {
            fence,
            ..post_with(write_to(0), SgList::one(SRC, 8192, 1000), 2)
        };
        post(&mut a.worker, 1, read).unwrap();
        post(&mut a.worker, 1, write).unwrap();
        // A alone, long enough for anything it may send to go.
        let now = Instant::now();
        for i in 0..5 {
            a.worker
                .poll_once_at(now + Duration::from_micros(i))
                .unwrap();
        }
        let sent = a.wire.take_sent();
        // Read Request 1, RDMA Write 0.
        let want = if fence { vec![1] } else { vec![1, 0] };
        assert_eq!(opcodes(&payloads(&sent)), want, "fence {fence}");
        for f in sent {
            assert!(b.wire.inject(f));
        }
        let r = run(a, b, 0.0, 7, 2, 1);
        let done = outcomes(&r.a);
        assert!(
            done.contains(&(CompletionKind::ReadResponsePlaced, 1, S::Success))
                && done.contains(&(CompletionKind::WriteSent, 2, S::Success)),
            "{done:?}"
        );
        // The Read brought B's octets into A's region; the Write placed A's into B's.
        let (src, readable) = (contents(&r.a.mem), contents(r.b.readable.as_ref().unwrap()));
        assert_eq!(src[..4096], readable[..4096]);
        assert_eq!(contents(&r.b.mem)[..1000], src[8192..9192]);
    }
}

/// With an ORD of 1, A's second Read waits for the first's answer, and a Write posted after
/// it waits behind it (work requests start in order); a close flushes what waits, in order.
#[test]
fn what_is_posted_behind_a_waiting_read_keeps_its_place_and_is_flushed_with_it() {
    let mut a = end_with(true, false, 1 << 16, None, Some(1));
    let b = end_with(false, false, 1 << 16, Some(1), None);
    let read = |wr_id, at| WorkRequest {
        op: PostOp::Read {
            src_stag: READABLE,
            src_to: at,
        },
        ..post_with(PostOp::Send, SgList::one(SRC, at, 512), wr_id)
    };
    post(&mut a.worker, 1, read(1, 0)).unwrap();
    post(&mut a.worker, 1, read(2, 512)).unwrap();
    let first_msn = post(
        &mut a.worker,
        1,
        post_with(PostOp::Send, SgList::one(SRC, 4096, 100), 3),
    )
    .unwrap();
    assert_eq!(first_msn, None, "the Send waits: no MSN yet");
    let now = Instant::now();
    for i in 0..5 {
        a.worker
            .poll_once_at(now + Duration::from_micros(i))
            .unwrap();
    }
    let sent = a.wire.take_sent();
    assert_eq!(
        opcodes(&payloads(&sent)),
        vec![1],
        "one Read Request, nothing behind it"
    );
    for f in sent {
        assert!(b.wire.inject(f));
    }
    let mut b = b;
    let (answer, result) = crossbeam_channel::unbounded();
    let buf = PostedBuf {
        stag: BUFS,
        offset: 0,
        len: 4096,
        wr_id: 50,
    };
    assert!(b.worker.apply(Command::PostRecv(2, vec![buf], answer)));
    result.recv().unwrap().unwrap();
    let r = run(a, b, 0.0, 3, 3, 1);
    let done = outcomes(&r.a);
    assert_eq!(
        done,
        vec![
            (CompletionKind::ReadResponsePlaced, 1, S::Success),
            (CompletionKind::ReadResponsePlaced, 2, S::Success),
            (CompletionKind::SendSent, 3, S::Success),
        ],
    );
    assert_eq!(
        r.b.completions[0].msn,
        Some(1),
        "the Send took MSN 1 when it went"
    );

    // Again, closed while the second Read and the Send wait: all three flushed, in order.
    let mut a = end_with(true, false, 1 << 16, None, Some(1));
    post(&mut a.worker, 1, read(1, 0)).unwrap();
    post(&mut a.worker, 1, read(2, 512)).unwrap();
    let send = WorkRequest {
        signaled: false,
        ..post_with(PostOp::Send, SgList::one(SRC, 4096, 100), 3)
    };
    post(&mut a.worker, 1, send).unwrap();
    assert!(a.worker.apply(Command::Close(1)));
    let b = end_with(false, false, 1 << 16, Some(1), None);
    let r = run_until(a, b, 0.0, 7, |a, _| {
        a.gone.is_some() && a.completions.len() >= 3
    });
    let done = outcomes(&r.a);
    assert_eq!(
        done,
        vec![
            (CompletionKind::SendSent, 3, S::Flushed),
            (CompletionKind::ReadResponsePlaced, 1, S::Flushed),
            (CompletionKind::ReadResponsePlaced, 2, S::Flushed),
        ],
    );
}
