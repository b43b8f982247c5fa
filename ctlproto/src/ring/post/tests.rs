//! The post queue alone: every op through a slot and back, back-pressure instead of loss,
//! index wrap-around, the doorbell handshake between an application thread and a sleeping
//! worker thread, and what a worker does with an application that writes garbage.

use super::super::spsc::{OFF_HEAD, OFF_TAIL, OFF_WAITING};
use super::super::{drain_eventfd, RingFile, Waker};
use super::*;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Post number `seq`: its fields all derived from it, so that a torn or misplaced record
/// shows.
fn post(seq: u64) -> WorkRequest {
    let op = match seq % 3 {
        0 => PostOp::Write {
            sink_stag: seq as u32 ^ 0x5a5a,
            sink_to: seq.wrapping_mul(7),
        },
        1 => PostOp::Send,
        _ => PostOp::Read {
            src_stag: seq as u32 ^ 0xa5a5,
            src_to: seq.wrapping_mul(11),
        },
    };
    WorkRequest {
        flow_id: seq.wrapping_mul(3),
        wr_id: seq,
        sg_list: SgList::one(9, seq.wrapping_mul(5), 1 + seq % 4096),
        count: 1 + (seq % 16) as u32,
        op,
        signaled: true,
        solicited: false,
        fence: false,
    }
}

fn seq_of(r: &Result<WorkRequest, PostRefused>) -> u64 {
    let p = r.as_ref().expect("a well-formed post");
    assert_eq!(*p, post(p.wr_id), "record torn");
    p.wr_id
}

/// SplitMix64.
fn next(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn queue(capacity: u32, start: u64) -> (Arc<PostQueueFile>, PostProducer, PostReader) {
    let file = Arc::new(PostQueueFile::create_at("posts", 1, capacity, start).unwrap());
    let reader = PostReader::new(file.clone(), 0).unwrap();
    let producer = PostProducer::new(file.clone(), 0).unwrap();
    (file, producer, reader)
}

fn readable(fd: BorrowedFd<'_>) -> bool {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::ZERO).unwrap() == 1
}

#[test]
fn every_op_crosses_the_queue_unchanged() {
    let (_f, mut p, mut r) = queue(8, 0);
    let posts = [post(0), post(1), post(2)];
    assert!(matches!(posts[0].op, PostOp::Write { .. }));
    assert_eq!(posts[1].op, PostOp::Send);
    assert!(matches!(posts[2].op, PostOp::Read { .. }));
    for x in &posts {
        p.try_post(x).unwrap();
    }
    let mut out = Vec::new();
    assert_eq!(r.take(&mut out, 10).unwrap(), 0, "nothing published yet");
    let _ = p.publish();
    assert_eq!(r.take(&mut out, 10).unwrap(), 3);
    assert_eq!(out, posts.map(Ok::<_, PostRefused>).to_vec());
    // The layout of the module's table.
    let b = encode_post(&posts[0]);
    assert_eq!(b[0], 1);
    assert_eq!(b[2], 1, "one entry");
    assert_eq!(b[8..16], 0u64.to_le_bytes());
    assert_eq!(b[32..36], 0x5a5au32.to_le_bytes());
    assert_eq!(b[48..52], 9u32.to_le_bytes(), "the entry's STag");
    assert_eq!(b[60..68], 1u64.to_le_bytes(), "the entry's length");
    assert_eq!(encode_post(&posts[1])[0], 2);
    assert_eq!(encode_post(&posts[2])[36..40], 3u32.to_le_bytes());
}

#[test]
fn a_full_queue_refuses_and_loses_nothing() {
    let (_f, mut p, mut r) = queue(4, 0);
    for i in 0..4 {
        p.try_post(&post(i)).unwrap();
    }
    assert_eq!(p.try_post(&post(4)), Err(PostQueueFull));
    assert_eq!(p.room(), 0);
    let _ = p.publish();
    let mut out = Vec::new();
    assert_eq!(r.take(&mut out, 1).unwrap(), 1, "at most max");
    assert_eq!(p.try_post(&post(4)), Ok(()), "the reader committed a slot");
    assert_eq!(p.try_post(&post(5)), Err(PostQueueFull));
    let _ = p.publish();
    while r.take(&mut out, 3).unwrap() > 0 {}
    assert_eq!(out.iter().map(seq_of).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
    assert_eq!(r.tail(), 5);
    // No allocation once warmed: a cleared vector of the right capacity is reused.
    out.clear();
    let cap = out.capacity();
    for round in 0..100u64 {
        for i in 0..4 {
            p.try_post(&post(100 + round * 4 + i)).unwrap();
        }
        let _ = p.publish();
        out.clear();
        assert_eq!(r.take(&mut out, cap).unwrap(), 4);
        assert_eq!(out.capacity(), cap);
    }
}

#[test]
fn posts_cross_the_index_wrap() {
    let start = u64::MAX - 10;
    let (_f, mut p, mut r) = queue(4, start);
    let mut out = Vec::new();
    let mut s = 3u64;
    let (mut sent, mut got) = (0u64, 0u64);
    while got < 100 {
        for _ in 0..next(&mut s) % 6 {
            if p.try_post(&post(sent)).is_ok() {
                sent += 1;
            }
        }
        let _ = p.publish();
        out.clear();
        r.take(&mut out, 1 + (next(&mut s) % 4) as usize).unwrap();
        for x in &out {
            assert_eq!(seq_of(x), got);
            got += 1;
        }
    }
    assert_eq!(p.head(), start.wrapping_add(sent));
    assert!(p.head() < start, "the indices wrapped");
}

#[test]
fn publish_rings_only_for_a_sleeping_worker() {
    let (_f, mut p, mut r) = queue(4, 0);
    let worker_bell = Waker::create().unwrap();
    let app_bell = Waker::from_fd(worker_bell.fd().try_clone_to_owned().unwrap());
    let wake = |p: &mut PostProducer| {
        let w = p.publish();
        if w {
            app_bell.wake();
        }
        w
    };
    p.try_post(&post(0)).unwrap();
    assert!(!wake(&mut p), "the worker is awake");
    assert!(!r.prepare_sleep(), "a post is there: do not sleep");
    let mut out = Vec::new();
    r.take(&mut out, 10).unwrap();
    assert!(r.prepare_sleep());
    assert!(!wake(&mut p), "nothing new: nothing to ring for");
    assert!(!readable(worker_bell.fd()));
    p.try_post(&post(1)).unwrap();
    assert!(wake(&mut p), "the worker sleeps: ring");
    assert!(readable(worker_bell.fd()));
    drain_eventfd(worker_bell.fd());
    assert!(!readable(worker_bell.fd()));
    p.try_post(&post(2)).unwrap();
    assert!(!wake(&mut p), "the flag was cleared by the first ring");
    r.finish_sleep();
    assert_eq!(r.take(&mut out, 10).unwrap(), 2);
}

/// An application thread and a worker thread that sleeps on the eventfd whenever the queue
/// is empty. Half of the bursts wait until the worker has read everything, so that their
/// publish is the last before the worker must be woken: a lost wake-up then shows as a sleep
/// that times out while posts are waiting.
#[test]
fn a_sleeping_worker_never_misses_a_post() {
    const N: u64 = 100_000;
    let (_f, mut p, mut r) = queue(64, u64::MAX - 30_000);
    let worker_bell = Waker::create().unwrap();
    let app_bell = Waker::from_fd(worker_bell.fd().try_clone_to_owned().unwrap());
    let received = Arc::new(AtomicU64::new(0));
    let seen = received.clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    let app = std::thread::spawn(move || {
        let (mut s, mut sent, mut rings) = (5u64, 0u64, 0u64);
        while sent < N {
            for _ in 0..(1 + next(&mut s) % 64).min(N - sent) {
                while p.try_post(&post(sent)).is_err() {
                    // Full: the worker must see what is there before it frees a slot.
                    if p.publish() {
                        app_bell.wake();
                        rings += 1;
                    }
                    std::thread::yield_now();
                    assert!(Instant::now() < deadline, "the worker never freed a slot");
                }
                sent += 1;
            }
            if p.publish() {
                app_bell.wake();
                rings += 1;
            }
            if next(&mut s).is_multiple_of(2) {
                while seen.load(Ordering::Acquire) < sent {
                    std::thread::yield_now();
                    assert!(Instant::now() < deadline, "the worker stalled");
                }
            }
        }
        rings
    });
    let (mut s, mut got, mut flags, mut sleeps, mut missed) = (6u64, 0u64, 0u64, 0u64, 0u64);
    let mut out = Vec::with_capacity(256);
    while got < N {
        assert!(Instant::now() < deadline, "stuck at {got}");
        out.clear();
        let n = r.take(&mut out, 1 + (next(&mut s) % 256) as usize).unwrap();
        for x in &out {
            assert_eq!(seq_of(x), got, "out of order");
            got += 1;
        }
        received.store(got, Ordering::Release);
        if n > 0 {
            continue;
        }
        flags += 1;
        if !r.prepare_sleep() {
            continue;
        }
        sleeps += 1;
        let mut fds = [PollFd::new(worker_bell.fd(), PollFlags::POLLIN)];
        if poll(&mut fds, PollTimeout::from(1000u16)).unwrap() == 0
            && r.has_news()
            && !readable(worker_bell.fd())
        {
            missed += 1;
        }
        drain_eventfd(worker_bell.fd());
        r.finish_sleep();
    }
    let rings = app.join().unwrap();
    assert_eq!(missed, 0, "a sleep missed its wake-up");
    assert!(sleeps > 0 && rings > 0, "the worker slept and was rung for");
    // Each ring clears a flag the worker set: never more rings than flags set (a flag set
    // just before posts arrived may still be rung for: a spurious wake-up, harmless).
    assert!(rings <= flags, "rung without a sleeping worker");
    out.clear();
    assert_eq!(r.take(&mut out, 10).unwrap(), 0);
}

#[test]
fn a_corrupt_head_stops_the_queue_without_panic() {
    // Ahead by more than a queue.
    let (f, mut p, mut r) = queue(4, 0);
    p.try_post(&post(0)).unwrap();
    let _ = p.publish();
    f.0.u64_at(0, OFF_HEAD).store(5, Ordering::Release);
    let mut out = Vec::new();
    assert!(matches!(
        r.take(&mut out, 10),
        Err(PostQueueError::Corrupt { queue: 0, .. })
    ));
    // Once corrupt, always: the worker stops reading, and the queue keeps nobody awake.
    f.0.u64_at(0, OFF_HEAD).store(1, Ordering::Release);
    assert!(r.take(&mut out, 10).is_err());
    assert!(!r.has_news() && r.prepare_sleep());
    assert!(out.is_empty());

    // Backwards: below a head already seen, even one not yet read up to.
    let (f, mut p, mut r) = queue(4, 100);
    for i in 0..3 {
        p.try_post(&post(i)).unwrap();
    }
    let _ = p.publish();
    assert_eq!(r.take(&mut out, 1).unwrap(), 1);
    f.0.u64_at(0, OFF_HEAD).store(102, Ordering::Release);
    let e = r.take(&mut out, 10).unwrap_err();
    assert!(e.to_string().contains("backwards"), "{e}");
    // Below the tail (wraps to a huge distance).
    let (f, _p, mut r) = queue(4, 0);
    f.0.u64_at(0, OFF_HEAD).store(u64::MAX, Ordering::Release);
    assert!(r.take(&mut out, 10).is_err());
}

#[test]
fn garbage_records_are_refused_with_their_cookie() {
    let (f, mut p, mut r) = queue(128, 0);
    let good = encode_post(&post(0x77));
    let mut bad = Vec::new();
    for op in [0u8, 4, 0x80, 0xff] {
        let mut b = good;
        b[0] = op;
        bad.push((b, PostDefect::UnknownOp(op)));
    }
    // Octet 1 holds the flags (bits 0–2): its other bits, and every padding octet,
    // including the entries past the list's end.
    for flag in [8u8, 0x10, 0x80] {
        let mut b = good;
        b[1] = flag;
        bad.push((b, PostDefect::Padding));
    }
    for i in (3..8).chain(40..48).chain(68..128) {
        let mut b = good;
        b[i] = 1;
        bad.push((b, PostDefect::Padding));
    }
    let mut send = encode_post(&post(1));
    send[32] = 1;
    bad.push((send, PostDefect::SendRemote));
    let mut b = good;
    b[36..40].fill(0);
    bad.push((b, PostDefect::ZeroCount));
    let mut b = good;
    b[60..68].fill(0);
    bad.push((b, PostDefect::ZeroLen));
    for n in [0u8, 5, 0xff] {
        let mut b = good;
        b[2] = n;
        bad.push((b, PostDefect::SgeCount(n)));
    }
    // Two entries: a second, valid entry makes a gather, which takes a count of 1 and no
    // Read; the solicited flag belongs to Sends.
    let two = |op: u8, count: u32| {
        let mut b = good;
        b[0] = op;
        b[2] = 2;
        b[68..72].copy_from_slice(&9u32.to_le_bytes());
        b[80..88].copy_from_slice(&1u64.to_le_bytes());
        b[36..40].copy_from_slice(&count.to_le_bytes());
        if op == 2 {
            b[16..24].fill(0);
            b[32..36].fill(0);
        }
        b
    };
    bad.push((two(1, 2), PostDefect::CountWithGather));
    bad.push((two(3, 1), PostDefect::ReadGather));
    let mut b = good;
    b[1] = 2;
    bad.push((b, PostDefect::SolicitedNotSend));
    // Written straight into the slots, as an application scribbling on the file would.
    for (b, _) in &bad {
        assert!(p.end.has_room(&f.0));
        p.end.write(&f.0, b);
    }
    let _ = p.publish();
    let mut out = Vec::new();
    assert_eq!(r.take(&mut out, 128).unwrap(), bad.len());
    for (got, (b, defect)) in out.iter().zip(&bad) {
        let wr_id = u64::from_le_bytes(b[24..32].try_into().unwrap());
        let flow_id = u64::from_le_bytes(b[8..16].try_into().unwrap());
        let count = u32::from_le_bytes(b[36..40].try_into().unwrap());
        assert_eq!(
            *got,
            Err(PostRefused {
                flow_id,
                wr_id,
                count,
                defect: *defect
            })
        );
    }
    // The queue goes on after garbage.
    p.try_post(&post(3)).unwrap();
    let _ = p.publish();
    out.clear();
    r.take(&mut out, 10).unwrap();
    assert_eq!(out, [Ok::<_, PostRefused>(post(3))]);
}

#[test]
fn a_wild_tail_never_lets_the_application_overwrite_unread_posts() {
    let (f, mut p, _r) = queue(4, 0);
    f.0.u64_at(0, OFF_TAIL)
        .store(u64::MAX / 2, Ordering::Release);
    let ok = (0..10).filter(|&i| p.try_post(&post(i)).is_ok()).count();
    assert_eq!(ok, 4);
    assert_eq!(p.head(), 4);
    // Any non-zero flag counts as set: one ring too many is harmless.
    f.0.u32_at(0, OFF_WAITING).store(7, Ordering::Release);
    assert!(p.publish());
}

#[test]
fn the_application_checks_what_it_maps() {
    let f = PostQueueFile::create("o", 3, 16).unwrap();
    let fd = || f.fd().try_clone_to_owned().unwrap();
    let opened = PostQueueFile::open(fd(), 3, 16).unwrap();
    assert_eq!((opened.queues(), opened.capacity()), (3, 16));
    assert_eq!(opened.len(), 3 * queue_bytes(16));
    assert!(matches!(
        PostQueueFile::open(fd(), 2, 16),
        Err(PostQueueError::Layout(_))
    ));
    assert!(matches!(
        PostQueueFile::open(fd(), 3, 12),
        Err(PostQueueError::Shape { .. })
    ));
    assert_eq!(nix::unistd::ftruncate(fd(), 0), Err(nix::Error::EPERM));
    // A completion ring file is not a post queue file of the same size, nor the reverse.
    let c = RingFile::create("c", 1, 64).unwrap();
    assert_eq!(c.len(), queue_bytes(32));
    let cfd = c.fd().try_clone_to_owned().unwrap();
    assert!(matches!(
        PostQueueFile::open(cfd, 1, 32),
        Err(PostQueueError::Layout(_))
    ));
    let q = PostQueueFile::create("q", 1, 4).unwrap();
    assert_eq!(q.len(), super::super::ring_bytes(8));
    let qfd = q.fd().try_clone_to_owned().unwrap();
    assert!(matches!(
        RingFile::open(qfd, 1, 8),
        Err(RingError::Layout(_))
    ));
    assert!(PostQueueFile::create("z", 0, 16).is_err());
    assert!(PostQueueFile::create("z", 1, 3).is_err());
    assert!(PostProducer::new(Arc::new(q), 1).is_none());
}

#[test]
fn a_gathered_solicited_fenced_send_crosses_the_queue() {
    let (_f, mut p, mut r) = queue(4, 0);
    let sg = SgList::new(&[
        Sge {
            stag: 1,
            offset: 10,
            len: 100,
        },
        Sge {
            stag: 2,
            offset: 0,
            len: 1,
        },
        Sge {
            stag: 1,
            offset: 500,
            len: 7,
        },
        Sge {
            stag: 3,
            offset: u64::MAX - 1,
            len: 1,
        },
    ])
    .unwrap();
    let wr = WorkRequest {
        sg_list: sg,
        solicited: true,
        fence: true,
        signaled: false,
        ..WorkRequest::new(5, 6, PostOp::Send, 0, 0, 1, 1)
    };
    assert_eq!(sg.total_len(), Some(109));
    p.try_post(&wr).unwrap();
    let _ = p.publish();
    let mut out = Vec::new();
    r.take(&mut out, 4).unwrap();
    assert_eq!(out, [Ok::<_, PostRefused>(wr)]);
    assert_eq!(SgList::new(&[]), Err(SgListLength(0)));
    assert_eq!(SgList::new(&[Sge::default(); 5]), Err(SgListLength(5)));
    // The control socket's JSON carries the list as an array.
    let json = serde_json::to_string(&wr).unwrap();
    assert_eq!(serde_json::from_str::<WorkRequest>(&json).unwrap(), wr);
    let empty = json.replace(&serde_json::to_string(&sg).unwrap(), "[]");
    assert!(serde_json::from_str::<WorkRequest>(&empty).is_err());
}

proptest! {
    #[test]
    fn posts_round_trip(
        (flow_id, wr_id, remote_to) in any::<(u64, u64, u64)>(),
        (count, remote_stag) in any::<(u32, u32)>(),
        entries in proptest::collection::vec(any::<(u32, u64, u64)>(), 1..=MAX_SGE),
        (op, flags) in (0u8..3, 0u8..8),
    ) {
        let op = match op {
            0 => PostOp::Write { sink_stag: remote_stag, sink_to: remote_to },
            1 => PostOp::Send,
            _ => PostOp::Read { src_stag: remote_stag, src_to: remote_to },
        };
        let entries: Vec<Sge> = entries
            .iter()
            .map(|&(stag, offset, len)| Sge { stag, offset, len: len.max(1) })
            .collect();
        let n = if op == PostOp::Send || matches!(op, PostOp::Write { .. }) { entries.len() } else { 1 };
        let p = WorkRequest {
            flow_id,
            wr_id,
            sg_list: SgList::new(&entries[..n]).unwrap(),
            count: if n > 1 { 1 } else { count.max(1) },
            op,
            signaled: flags & 1 == 0,
            solicited: flags & 2 != 0 && op == PostOp::Send,
            fence: flags & 4 != 0,
        };
        prop_assert_eq!(decode_post(&encode_post(&p)), Ok(p));
    }

    #[test]
    fn arbitrary_post_slots_never_panic(a in proptest::array::uniform32(any::<u8>()), b in proptest::array::uniform32(any::<u8>()), n in 0u8..6, op in 0u8..5) {
        let mut s = [0u8; POST_LEN];
        s[..32].copy_from_slice(&a);
        s[48..80].copy_from_slice(&b);
        s[0] = op;
        s[2] = n;
        match decode_post(&s) {
            Ok(p) => prop_assert_eq!(encode_post(&p), s),
            Err(r) => prop_assert_eq!(r.wr_id, u64::from_le_bytes(s[24..32].try_into().unwrap())),
        }
    }
}
