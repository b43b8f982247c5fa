//! A worker reading a subscription's shared-memory post queue, without AF_XDP: posts become
//! frames at the next poll; what it must refuse (unknown region, a flow of another domain
//! than the subscription's, a malformed record, a flow nobody has) comes back as a
//! `PostRefused` completion with the post's wr_id; a post for a flow it does not own goes
//! to the control thread; a corrupt queue is counted once and never read again.

use crossbeam_channel::{unbounded, Receiver};
use mpa_ctl_proto::ring::post::{
    PostOp, PostProducer, PostQueueFile, PostReader, SgList, Sge, WorkRequest,
};
use mpa_ctl_proto::ring::{Producer, RingFile, RingSet, Waker};
use mpa_ctl_proto::{Completion, CompletionKind, RefusalCode, RegionInfo};
use mpa_datapath::io::ring::{MemRing, MemWire};
use mpa_datapath::memory::completions::RingSubscription;
use mpa_datapath::worker::{Command, Notification, Worker, WorkerConfig};
use mpa_stack::receiver::Region;
use mpa_stack::region::RegionMemory;
use mpa_stack::sim::SimHandover;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

const STAG: u32 = 0x10;
const FLOW: u64 = 3;

struct Bench {
    worker: Worker<MemRing>,
    wire: MemWire,
    notes: Receiver<Notification>,
}

/// A worker owning flow [`FLOW`] of domain 1, with region [`STAG`] of domain 1.
fn bench() -> Bench {
    let (ring, wire) = MemRing::new(0).unwrap();
    let (_cmd_tx, cmd_rx) = unbounded();
    let (note_tx, notes) = unbounded();
    let mut worker = Worker::new(ring, WorkerConfig::new([2, 0, 0, 0, 0, 2]), cmd_rx, note_tx);
    let mem = Arc::new(RegionMemory::create("post-queue-test", 64 * 1024).unwrap());
    worker.apply(Command::AddRegion(Region {
        info: RegionInfo {
            stag: STAG,
            len: 64 * 1024,
            pd: 1,
            remote_write: false,
            remote_read: false,
            huge_pages: false,
        },
        mem,
    }));
    let h = SimHandover {
        flow_id: FLOW,
        local: "10.99.0.2:40000".parse().unwrap(),
        remote: "10.99.0.1:7777".parse().unwrap(),
        rcv_nxt: 5000,
        snd_nxt: 1000,
        pd: Some(1),
        next_hop_mac: [2, 0, 0, 0, 0, 1],
        ..SimHandover::default()
    }
    .build();
    let (answer, result) = unbounded();
    assert!(worker.apply(Command::HandOver(Box::new(h), None, answer)));
    result.recv().unwrap().expect("hand-over accepted");
    Bench {
        worker,
        wire,
        notes,
    }
}

/// Subscription `id` of domain `pd` with a post queue: the consumer's ends.
fn subscribe(w: &mut Worker<MemRing>, pd: u32, id: u64) -> (PostProducer, RingSet, PostQueueFile) {
    let rings = Arc::new(RingFile::create("post-queue-completions", 1, 64).unwrap());
    let posts = Arc::new(PostQueueFile::create("post-queue-posts", 1, 16).unwrap());
    let reader = PostReader::new(posts.clone(), 0).unwrap();
    assert!(w.apply(Command::Subscribe(Box::new(RingSubscription {
        pd,
        id,
        producer: Producer::new(rings.clone(), 0).unwrap(),
        waker: Waker::create().unwrap(),
        posts: Some(reader),
    }))));
    let fd = posts.fd().try_clone_to_owned().unwrap();
    let consumer_side = Arc::new(PostQueueFile::open(fd, 1, 16).unwrap());
    let fd = posts.fd().try_clone_to_owned().unwrap();
    (
        PostProducer::new(consumer_side, 0).unwrap(),
        RingSet::new(rings),
        PostQueueFile::open(fd, 1, 16).unwrap(),
    )
}

fn write(wr_id: u64, stag: u32) -> WorkRequest {
    WorkRequest {
        flow_id: FLOW,
        wr_id,
        sg_list: SgList::one(stag, 0, 100),
        count: 1,
        op: PostOp::Write {
            sink_stag: 0x77,
            sink_to: 0,
        },
        signaled: true,
        solicited: false,
        fence: false,
    }
}

fn post(p: &mut PostProducer, r: &WorkRequest) {
    p.try_post(r).unwrap();
    let _ = p.publish();
}

/// The refusals in the rings: (flow, wr_id, code), each checked to complete with its code's
/// status.
fn refusals(rings: &mut RingSet) -> Vec<(u64, u64, RefusalCode)> {
    let mut out: Vec<Completion> = Vec::new();
    rings.poll(&mut out, 64).unwrap();
    out.iter()
        .filter(|c| c.kind == CompletionKind::PostRefused)
        .map(|c| {
            let (wr_id, code) = c.refusal().unwrap();
            assert_eq!(c.status, code.status(), "{c:?}");
            (c.flow_id, wr_id, code)
        })
        .collect()
}

#[test]
fn a_posted_write_leaves_at_the_next_poll_and_bad_posts_are_refused_with_their_cookies() {
    let mut b = bench();
    let (mut p, mut rings, _) = subscribe(&mut b.worker, 1, 1);
    b.wire.take_sent();
    post(&mut p, &write(7, STAG));
    b.worker.poll_once().unwrap();
    let octets: usize = b.wire.take_sent().iter().map(Vec::len).sum();
    assert!(
        octets > 100,
        "the Write's frame was not sent ({octets} octets)"
    );
    assert_eq!(refusals(&mut rings), vec![]);

    post(&mut p, &write(8, 0xdead));
    post(
        &mut p,
        &WorkRequest {
            count: 0,
            ..write(9, STAG)
        },
    );
    post(
        &mut p,
        &WorkRequest {
            sg_list: SgList::one(STAG, 1 << 30, 100),
            ..write(10, STAG)
        },
    );
    // A gather is checked entry by entry: one bad entry refuses the whole request.
    let gather = |entries: &[Sge]| SgList::new(entries).unwrap();
    let fine = Sge {
        stag: STAG,
        offset: 0,
        len: 10,
    };
    post(
        &mut p,
        &WorkRequest {
            sg_list: gather(&[
                fine,
                Sge {
                    stag: 0xdead,
                    ..fine
                },
            ]),
            ..write(11, STAG)
        },
    );
    post(
        &mut p,
        &WorkRequest {
            sg_list: gather(&[
                fine,
                fine,
                Sge {
                    offset: 1 << 30,
                    ..fine
                },
            ]),
            ..write(12, STAG)
        },
    );
    // A Read fills one entry; a gather is one message.
    post(
        &mut p,
        &WorkRequest {
            sg_list: gather(&[fine, fine]),
            op: PostOp::Read {
                src_stag: 0x77,
                src_to: 0,
            },
            ..write(13, STAG)
        },
    );
    post(
        &mut p,
        &WorkRequest {
            sg_list: gather(&[fine, fine]),
            count: 2,
            ..write(14, STAG)
        },
    );
    // More messages than the connection's send queue holds (4,096): busy, a full queue.
    post(
        &mut p,
        &WorkRequest {
            sg_list: SgList::one(STAG, 0, 1),
            count: 5000,
            ..write(15, STAG)
        },
    );
    b.worker.poll_once().unwrap();
    assert_eq!(
        refusals(&mut rings),
        vec![
            (FLOW, 8, RefusalCode::UnknownRegion),
            (FLOW, 9, RefusalCode::Malformed),
            (FLOW, 10, RefusalCode::OutOfBounds),
            (FLOW, 11, RefusalCode::UnknownRegion),
            (FLOW, 12, RefusalCode::OutOfBounds),
            (FLOW, 13, RefusalCode::Malformed),
            (FLOW, 14, RefusalCode::Malformed),
            (FLOW, 15, RefusalCode::Busy),
        ]
    );
    let s = b.worker.report().stats;
    assert_eq!((s.posts_shm, s.posts_refused), (9, 8));
    let octets: usize = b.wire.take_sent().iter().map(Vec::len).sum();
    assert_eq!(octets, 0, "nothing of a refused gather is sent");
}

#[test]
fn a_post_through_another_domains_queue_is_refused() {
    let mut b = bench();
    let (_p1, mut rings1, _) = subscribe(&mut b.worker, 1, 1);
    let (mut p2, mut rings2, _) = subscribe(&mut b.worker, 2, 2);
    b.wire.take_sent();
    post(&mut p2, &write(5, STAG));
    b.worker.poll_once().unwrap();
    assert_eq!(
        refusals(&mut rings2),
        vec![(FLOW, 5, RefusalCode::WrongDomain)]
    );
    assert_eq!(refusals(&mut rings1), vec![]);
    let octets: usize = b.wire.take_sent().iter().map(Vec::len).sum();
    assert_eq!(octets, 0, "nothing of a refused post is sent");
}

#[test]
fn a_post_for_a_flow_the_worker_does_not_own_goes_to_the_control_thread() {
    let mut b = bench();
    let (mut p, mut rings, _) = subscribe(&mut b.worker, 1, 1);
    let other = WorkRequest {
        flow_id: 99,
        ..write(11, STAG)
    };
    post(&mut p, &other);
    b.worker.poll_once().unwrap();
    assert_eq!(refusals(&mut rings), vec![]);
    let n = b.notes.try_iter().find_map(|n| match n {
        Notification::Post {
            queue,
            sub,
            pd,
            post,
            forwarding,
        } => Some((queue, sub, pd, post, forwarding)),
        _ => None,
    });
    let (queue, sub, pd, fwd, forwarding) = n.expect("the post forwarded");
    assert_eq!((queue, sub, pd, fwd), (0, 1, 1, other));
    assert_eq!(forwarding.load(std::sync::atomic::Ordering::Acquire), 1);
    // Nobody has the flow: the control thread hands it back, and it is refused.
    assert!(b.worker.apply(Command::Post {
        sub,
        pd,
        post: Box::new(fwd)
    }));
    b.worker.poll_once().unwrap();
    assert_eq!(
        refusals(&mut rings),
        vec![(99, 11, RefusalCode::UnknownFlow)]
    );
    // Passed on to the owner (as the control thread does after a move), it is posted.
    b.wire.take_sent();
    assert!(b.worker.apply(Command::Post {
        sub,
        pd,
        post: Box::new(write(12, STAG))
    }));
    b.worker.poll_once().unwrap();
    assert!(b.wire.take_sent().iter().map(Vec::len).sum::<usize>() > 100);
    assert_eq!(refusals(&mut rings), vec![]);
}

#[test]
fn a_corrupt_post_queue_is_counted_once_and_left_alone() {
    let mut b = bench();
    let (mut p, mut rings, file) = subscribe(&mut b.worker, 1, 1);
    let f = std::fs::File::from(file.fd().try_clone_to_owned().unwrap());
    // A head far ahead of the worker's tail (head: octet 128 of the queue).
    f.write_at(&(1u64 << 40).to_le_bytes(), 128).unwrap();
    for _ in 0..5 {
        b.worker.poll_once().unwrap();
    }
    assert_eq!(b.worker.report().stats.post_queues_corrupt, 1);
    // Whatever comes later is not read; the flow still takes posts another way.
    let _ = p.try_post(&write(1, STAG));
    let _ = p.publish();
    b.worker.poll_once().unwrap();
    assert_eq!(refusals(&mut rings), vec![]);
    assert_eq!(b.worker.report().stats.post_queues_corrupt, 1);
    let (answer, result) = unbounded();
    let sp = WorkRequest::new(FLOW, 0, PostOp::Send, STAG, 0, 10, 1);
    assert!(b.worker.apply(Command::PostSend(Box::new(sp), answer)));
    assert!(result.recv().unwrap().is_ok());
}

#[test]
fn an_unsubscribed_queue_is_no_longer_read() {
    let mut b = bench();
    let (mut p, _rings, _) = subscribe(&mut b.worker, 1, 1);
    assert!(b.worker.apply(Command::Unsubscribe { pd: 1, id: 1 }));
    post(&mut p, &write(1, STAG));
    b.wire.take_sent();
    b.worker.poll_once().unwrap();
    assert_eq!(b.worker.report().stats.posts_shm, 0);
}
