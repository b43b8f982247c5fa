//! Work requests end to end between two in-memory workers (the `pair` fixture): every
//! completion carries its work request's id; an unsignaled request completes only when it
//! fails; and when a connection ends — a local close, the peer's reset, a Terminate either way
//! — every request still outstanding and every receive buffer no Send used completes, once,
//! in order, with a failure status: the one the peer's Terminate names with its status, the
//! oldest with "retry exceeded" when retransmissions ran out, the rest flushed
//! (docs/consumer.md, "Completions").

mod pair;

use crossbeam_channel::unbounded;
use mpa_ctl_proto::{Completion, CompletionKind, CompletionStatus as S};
use mpa_datapath::worker::{Command, Notification};
use mpa_stack::flow::{PostOp, SgList, WorkRequest};
use mpa_stack::receiver::PostedBuf;
use pair::*;
use std::time::{Duration, Instant};

fn write(wr_id: u64, count: u32, signaled: bool, sink_stag: u32) -> WorkRequest {
    WorkRequest {
        flow_id: 1,
        op: PostOp::Write {
            sink_stag,
            sink_to: 0,
        },
        sg_list: SgList::one(SRC, 0, 2000),
        count,
        wr_id,
        signaled,
        solicited: false,
        fence: false,
    }
}

fn send(wr_id: u64, count: u32) -> WorkRequest {
    WorkRequest {
        flow_id: 1,
        op: PostOp::Send,
        sg_list: SgList::one(SRC, 0, 1000),
        count,
        wr_id,
        signaled: true,
        solicited: false,
        fence: false,
    }
}

/// Posts `count` 4 KiB receive buffers on B's flow, work requests `wr_id ..`.
fn post_recv(b: &mut End, wr_id: u64, count: u64) {
    let bufs = (0..count)
        .map(|i| PostedBuf {
            stag: BUFS,
            offset: i * 4096,
            len: 4096,
            wr_id: wr_id + i,
        })
        .collect();
    let (answer, result) = unbounded();
    assert!(b.worker.apply(Command::PostRecv(2, bufs, answer)));
    result.recv().unwrap().unwrap();
}

fn ids(c: &[Completion], kind: CompletionKind) -> Vec<(u64, S)> {
    c.iter()
        .filter(|c| c.kind == kind)
        .map(|c| (c.wr_id, c.status))
        .collect()
}

#[test]
fn completions_carry_their_work_request_ids_and_unsignaled_ones_stay_silent() {
    let mut a = end(true, false, 1 << 16);
    let mut b = end(false, false, 1 << 16);
    post_recv(&mut b, 900, 3);
    post(&mut a.worker, 1, write(100, 4, true, SINK)).unwrap();
    post(&mut a.worker, 1, write(200, 4, false, SINK)).unwrap();
    post(&mut a.worker, 1, send(300, 3)).unwrap();
    // A: 4 signaled Writes and 3 Sends; B: 8 Writes placed and 3 Sends arrived.
    let r = run(a, b, 0.02, 5, 7, 11);
    let ok = |ids: std::ops::Range<u64>| ids.map(|i| (i, S::Success)).collect::<Vec<_>>();
    assert_eq!(
        ids(&r.a.completions, CompletionKind::WriteSent),
        ok(100..104)
    );
    assert_eq!(
        ids(&r.a.completions, CompletionKind::SendSent),
        ok(300..303)
    );
    assert_eq!(r.a.completions.len(), 7, "{:?}", r.a.completions);
    assert_eq!(
        ids(&r.b.completions, CompletionKind::SendArrived),
        ok(900..903)
    );
    // Writes the peer placed are no request of B's: id 0.
    assert_eq!(
        ids(&r.b.completions, CompletionKind::WritePlaced),
        vec![(0, S::Success); 8]
    );
}

/// A closes its end at once (a reset) with Writes and Sends posted and not yet sent: each
/// completes flushed, the unsignaled ones too; B, reset by A, flushes its receive buffers.
#[test]
fn a_local_close_and_the_peers_reset_flush_everything_outstanding() {
    let mut a = end(true, false, 1 << 16);
    let mut b = end(false, false, 1 << 16);
    post_recv(&mut b, 50, 4);
    post(&mut a.worker, 1, write(10, 3, true, SINK)).unwrap();
    post(&mut a.worker, 1, write(20, 2, false, SINK)).unwrap();
    post(&mut a.worker, 1, send(30, 1)).unwrap();
    assert!(a.worker.apply(Command::Close(1)));
    let r = run_until(a, b, 0.0, 7, |a, b| a.gone.is_some() && b.gone.is_some());
    let flushed = |ids: &[u64]| ids.iter().map(|&i| (i, S::Flushed)).collect::<Vec<_>>();
    let a_ids: Vec<(u64, S)> =
        r.a.completions
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
    assert_eq!(
        a_ids,
        flushed(&[10, 11, 12, 20, 21, 30]),
        "{:?}",
        r.a.completions
    );
    assert_eq!(
        ids(&r.b.completions, CompletionKind::SendArrived),
        flushed(&[50, 51, 52, 53])
    );
    let b0 = &r.b.completions[0];
    assert_eq!((b0.stag, b0.offset, b0.len, b0.msn), (BUFS, 0, 4096, None));
}

/// A writes into an STag B does not have, then asks for Reads: B ends the stream with a
/// Terminate at the Write (sent: its receive buffers flushed) and answers no Read; A receives
/// the Terminate with every Read outstanding (each flushed). Every request completes exactly
/// once, in order.
#[test]
fn a_terminate_either_way_flushes_both_ends() {
    let mut a = end(true, false, 1 << 16);
    let mut b = end(false, false, 1 << 16);
    post_recv(&mut b, 60, 2);
    post(&mut a.worker, 1, write(70, 1, true, 0xdead_0000)).unwrap();
    let reads = WorkRequest {
        flow_id: 1,
        op: PostOp::Read {
            src_stag: READABLE,
            src_to: 0,
        },
        sg_list: SgList::one(SRC, 0, 1024),
        count: 8,
        wr_id: 500,
        signaled: false,
        solicited: false,
        fence: false,
    };
    post(&mut a.worker, 1, reads).unwrap();
    let r = run_until(a, b, 0.0, 8, |a, b| a.gone.is_some() && b.gone.is_some());
    let ended = r.a.gone.as_ref().unwrap().ended.clone().unwrap();
    let t = ended.terminate.expect("A's end names B's Terminate");
    assert!(!t.sent && t.layer < 2, "{ended:?}");
    let eb = r.b.gone.as_ref().unwrap().ended.clone().unwrap();
    assert!(eb.terminate.is_some_and(|t| t.sent), "{eb:?}");
    // The bad Write was acknowledged before B judged it (a success); the Reads, unsignaled,
    // all complete because all failed.
    let c = &r.a.completions;
    assert_eq!((c[0].wr_id, c[0].status), (70, S::Success), "{c:?}");
    let reads: Vec<(u64, S)> = (500..508).map(|i| (i, S::Flushed)).collect();
    assert_eq!(ids(c, CompletionKind::ReadResponsePlaced), reads, "{c:?}");
    assert_eq!(c.len(), 9, "{c:?}");
    assert_eq!(
        ids(&r.b.completions, CompletionKind::SendArrived),
        vec![(60, S::Flushed), (61, S::Flushed)]
    );
}

/// A reads from an STag B does not have: B's Terminate names that Read Request (its copied
/// header: queue 1, MSN 1), so that Read completes with "remote access"; the Reads behind it
/// are flushed, and a Write acknowledged before stays a success.
#[test]
fn the_read_a_peers_terminate_names_fails_with_remote_access() {
    let mut a = end(true, false, 1 << 16);
    let b = end(false, false, 1 << 16);
    post(&mut a.worker, 1, write(40, 1, true, SINK)).unwrap();
    let reads = WorkRequest {
        flow_id: 1,
        op: PostOp::Read {
            src_stag: 0xbad_0000,
            src_to: 0,
        },
        sg_list: SgList::one(SRC, 0, 512),
        count: 3,
        wr_id: 900,
        signaled: true,
        solicited: false,
        fence: false,
    };
    post(&mut a.worker, 1, reads).unwrap();
    let r = run_until(a, b, 0.0, 11, |a, b| a.gone.is_some() && b.gone.is_some());
    let ended = r.a.gone.as_ref().unwrap().ended.clone().unwrap();
    let t = ended.terminate.expect("A's end names B's Terminate");
    assert!(!t.sent, "{ended:?}");
    let c: Vec<(u64, S)> =
        r.a.completions
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
    assert_eq!(
        c,
        vec![
            (40, S::Success),
            (900, S::RemoteAccess),
            (901, S::Flushed),
            (902, S::Flushed)
        ],
        "{:?} after {t:?}",
        r.a.completions
    );
}

/// Everything A sends is lost: A's Writes stay unacknowledged through every retransmission
/// timeout until the connection gives up. The oldest completes with "retry exceeded", the
/// rest flushed; the flow's end says why.
#[test]
fn the_oldest_request_fails_with_retry_exceeded_when_retransmissions_run_out() {
    let mut a = end(true, false, 1 << 16);
    post(&mut a.worker, 1, write(10, 2, true, SINK)).unwrap();
    post(&mut a.worker, 1, write(20, 1, false, SINK)).unwrap();
    // Virtual time a second a turn: the backed-off timeouts (up to two minutes each) pass in
    // a few thousand turns; every frame A sends is lost.
    let mut now = Instant::now();
    for _ in 0..10_000 {
        a.worker.poll_once_at(now).unwrap();
        drop(a.wire.take_sent());
        a.rings.poll(&mut a.completions, 1 << 14).unwrap();
        while let Ok(n) = a.notes.try_recv() {
            if let Notification::FlowGone { stats, .. } = n {
                a.gone = Some(*stats);
            }
        }
        if a.gone.is_some() {
            break;
        }
        now += Duration::from_secs(1);
    }
    let ended = a
        .gone
        .as_ref()
        .expect("the flow gave up")
        .ended
        .clone()
        .unwrap();
    assert!(ended.reason.contains("retransmission"), "{ended:?}");
    let c: Vec<(u64, S)> = a.completions.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        c,
        vec![(10, S::RetryExceeded), (11, S::Flushed), (20, S::Flushed)],
        "{:?}",
        a.completions
    );
}

/// A Send larger than one segment to a peer that posted no buffer: the peer refuses its first
/// segment with an untagged buffer error (DDP 2/x) before it has all of the Send, so the Send
/// is still outstanding when the Terminate names it (queue 0, MSN 1): it completes with
/// "remote invalid request".
#[test]
fn a_send_the_peer_has_no_buffer_for_fails_with_remote_invalid_request() {
    let mut a = end(true, false, 1 << 16);
    let b = end(false, false, 1 << 16);
    let big = WorkRequest {
        sg_list: SgList::one(SRC, 0, 60_000),
        ..send(77, 1)
    };
    post(&mut a.worker, 1, big).unwrap();
    let r = run_until(a, b, 0.0, 13, |a, b| a.gone.is_some() && b.gone.is_some());
    let ended = r.a.gone.as_ref().unwrap().ended.clone().unwrap();
    let t = ended.terminate.expect("A's end names B's Terminate");
    assert_eq!((t.layer, t.error_type, t.sent), (1, 2, false), "{ended:?}");
    let c: Vec<(u64, S)> =
        r.a.completions
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
    assert_eq!(c, vec![(77, S::RemoteInvalidRequest)]);
}
