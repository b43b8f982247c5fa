//! The ring alone: a producer thread and a consumer thread (every record in order, every loss
//! counted exactly and where it happened), index wrap-around against a model, the Moved
//! marker, the wake-up handshake, and what a consumer checks when it maps a file.

use super::*;
use proptest::prelude::*;
use std::collections::VecDeque;

fn rec(seq: u64) -> Record {
    Record::Completion(Completion {
        flow_id: seq,
        kind: CompletionKind::WritePlaced,
        stag: 7,
        offset: seq.wrapping_mul(3),
        len: 1,
        msn: None,
        invalidate_stag: None,
        wr_id: seq,
        status: CompletionStatus::Success,
    })
}

fn seq_of(r: Record) -> u64 {
    match r {
        Record::Completion(c) => {
            assert_eq!(c.offset, c.flow_id.wrapping_mul(3), "record torn");
            c.flow_id
        }
        m => panic!("unexpected {m:?}"),
    }
}

/// SplitMix64.
fn next(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One producer thread, one consumer thread, a small ring that overflows often: every
/// delivered record comes in order, and the losses reported between two delivered records
/// are exactly the records missing between them.
fn stress(capacity: u32, n: u64, start: u64, sleep_consumer: bool) {
    let file = Arc::new(RingFile::create_at("stress", 1, capacity, start).unwrap());
    let waker = Waker::create().unwrap();
    let wake_fd: OwnedFd = waker.fd().try_clone_to_owned().unwrap();
    let mut p = Producer::new(file.clone(), 0).unwrap();
    let prod = std::thread::spawn(move || {
        let mut s = 1u64;
        let mut seq = 0u64;
        let mut wakes = 0u64;
        while seq < n {
            let burst = 1 + next(&mut s) % 64;
            for _ in 0..burst.min(n - seq) {
                p.push(&rec(seq));
                seq += 1;
            }
            if p.publish() {
                waker.wake();
                wakes += 1;
            }
            if next(&mut s).is_multiple_of(16) {
                std::thread::yield_now();
            }
        }
        (p.lost(), wakes)
    });
    let mut set = RingSet::new(file.clone());
    let mut s = 2u64;
    let (mut expect, mut lost_since, mut delivered, mut lost_total) = (0u64, 0u64, 0u64, 0u64);
    let mut out = Vec::new();
    let t0 = std::time::Instant::now();
    loop {
        out.clear();
        let max = 1 + (next(&mut s) % 200) as usize;
        let lost = set.poll(&mut out, max).unwrap();
        for c in &out {
            let got = seq_of(Record::Completion(*c));
            assert_eq!(
                got - expect,
                lost_since,
                "gap before {got} not reported exactly"
            );
            expect = got + 1;
            lost_since = 0;
            delivered += 1;
        }
        lost_since += lost;
        lost_total += lost;
        if expect + lost_since == n && prod.is_finished() {
            break;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(60), "stuck");
        if out.is_empty() && lost == 0 {
            if sleep_consumer {
                if set.prepare_sleep() {
                    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
                    let mut fds = [PollFd::new(wake_fd.as_fd(), PollFlags::POLLIN)];
                    let _ = poll(&mut fds, PollTimeout::from(50u8));
                    drain_eventfd(wake_fd.as_fd());
                    set.finish_sleep();
                }
            } else if next(&mut s).is_multiple_of(4) {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
    }
    let (plost, _wakes) = prod.join().unwrap();
    assert_eq!(delivered + lost_total, n);
    assert_eq!(lost_total, plost, "every loss reported once");
    // Nothing left.
    out.clear();
    assert_eq!(set.poll(&mut out, 10).unwrap(), 0);
    assert!(out.is_empty());
}

#[test]
fn threads_see_every_record_in_order_and_every_loss_exactly() {
    stress(64, 300_000, 0, false);
}

#[test]
fn threads_across_the_index_wrap() {
    stress(16, 100_000, u64::MAX - 50_000, false);
}

#[test]
fn a_sleeping_consumer_is_always_woken() {
    // Sleeps of 50 ms at most: a lost wake-up would show as a stall only in time, so the
    // producer's wakes are counted too: with a sleeping consumer they happen.
    stress(256, 100_000, 7, true);
}

#[test]
fn publish_wakes_only_a_waiting_consumer() {
    let file = Arc::new(RingFile::create("w", 1, 4).unwrap());
    let mut p = Producer::new(file.clone(), 0).unwrap();
    let mut set = RingSet::new(file.clone());
    assert!(p.push(&rec(0)));
    assert!(!p.publish(), "nobody waits");
    assert!(!set.prepare_sleep(), "a record is there: do not sleep");
    let mut out = Vec::new();
    assert_eq!(set.poll(&mut out, 10).unwrap(), 0);
    assert_eq!(out.len(), 1);
    assert!(set.prepare_sleep());
    assert!(!p.publish(), "nothing new: nothing to wake for");
    assert!(p.push(&rec(1)));
    assert!(p.publish(), "the consumer sleeps: wake it");
    assert!(p.push(&rec(2)));
    assert!(!p.publish(), "the flag was cleared by the first wake");
}

#[test]
fn moved_marker_holds_the_new_ring_until_the_old_one_is_read() {
    let file = Arc::new(RingFile::create("m", 2, 8).unwrap());
    let (mut a, mut b) = (
        Producer::new(file.clone(), 0).unwrap(),
        Producer::new(file.clone(), 1).unwrap(),
    );
    let mut set = RingSet::new(file.clone());
    // Flow 1's first two completions on worker 0, then it moves to worker 1.
    a.push(&rec(1));
    a.push(&rec(1));
    let pos = a.head();
    b.push(&Record::Moved {
        flow_id: 1,
        from_ring: 0,
        position: pos,
    });
    b.push(&rec(1));
    // Worker 1 publishes first: the consumer must not see its record yet.
    let _ = b.publish();
    let mut out = Vec::new();
    set.poll(&mut out, 10).unwrap();
    assert!(out.is_empty());
    let _ = a.publish();
    // Whatever ring the consumer starts with, ring 0 comes first.
    for _ in 0..2 {
        set.poll(&mut out, 10).unwrap();
    }
    assert_eq!(out.len(), 3);
    assert_eq!(set.tails(), vec![2, 2]);
}

#[test]
fn a_full_ring_counts_losses_and_reports_them_in_place() {
    let file = Arc::new(RingFile::create("f", 1, 2).unwrap());
    let mut p = Producer::new(file.clone(), 0).unwrap();
    let mut r = Reader::new(file.clone(), 0).unwrap();
    assert!(p.push(&rec(0)) && p.push(&rec(1)));
    assert!(!p.push(&rec(2)) && !p.push(&rec(3)));
    assert_eq!((p.lost(), p.room()), (2, 0));
    let _ = p.publish();
    assert_eq!(r.take().unwrap(), Next::Record(rec(0)));
    r.commit();
    assert!(p.push(&rec(4)), "a slot was freed");
    let _ = p.publish();
    assert_eq!(r.take().unwrap(), Next::Record(rec(1)));
    assert_eq!(r.take().unwrap(), Next::Lost(2));
    assert_eq!(r.take().unwrap(), Next::Record(rec(4)));
    assert_eq!(r.take().unwrap(), Next::Empty);
    r.commit();
    // A loss after the last record: reported once the ring is empty.
    assert!(p.push(&rec(5)) && p.push(&rec(6)) && !p.push(&rec(7)));
    let _ = p.publish();
    assert_eq!(r.take().unwrap(), Next::Record(rec(5)));
    assert_eq!(r.take().unwrap(), Next::Record(rec(6)));
    assert_eq!(r.take().unwrap(), Next::Lost(1));
    assert_eq!(r.take().unwrap(), Next::Empty);
}

#[test]
fn the_consumer_checks_what_it_maps() {
    let f = RingFile::create("o", 3, 16).unwrap();
    let fd = || f.fd().try_clone_to_owned().unwrap();
    assert!(RingFile::open(fd(), 3, 16).is_ok());
    assert!(matches!(
        RingFile::open(fd(), 2, 16),
        Err(RingError::Layout(_))
    ));
    assert!(matches!(
        RingFile::open(fd(), 3, 12),
        Err(RingError::Shape { .. })
    ));
    // Sealed: the consumer cannot resize what the worker writes.
    assert_eq!(nix::unistd::ftruncate(fd(), 0), Err(nix::Error::EPERM));
    // An unsealed file of the right size is refused.
    let raw = nix::sys::memfd::memfd_create("x", nix::sys::memfd::MFdFlags::empty()).unwrap();
    nix::unistd::ftruncate(&raw, f.len() as i64).unwrap();
    assert!(matches!(
        RingFile::open(raw, 3, 16),
        Err(RingError::Layout(_))
    ));
    assert!(RingFile::create("z", 0, 16).is_err());
    assert!(RingFile::create("z", 1, 3).is_err());
    assert!(RingFile::create("z", 1, MAX_CAPACITY * 2).is_err());
}

#[test]
fn a_corrupt_head_is_an_error_not_a_read_out_of_bounds() {
    let file = Arc::new(RingFile::create("c", 1, 4).unwrap());
    let mut r = Reader::new(file.clone(), 0).unwrap();
    file.u64_at(0, OFF_HEAD).store(100, Ordering::Release);
    assert!(matches!(r.take(), Err(RingError::Corrupt { .. })));
    // A consumer that writes a wild tail only loses records: the producer stays in bounds.
    file.u64_at(0, OFF_HEAD).store(0, Ordering::Release);
    let mut p = Producer::new(file.clone(), 0).unwrap();
    file.u64_at(0, OFF_TAIL)
        .store(u64::MAX / 2, Ordering::Release);
    for i in 0..10 {
        p.push(&rec(i));
    }
    assert_eq!(p.head() + p.lost(), 10);
    assert!(p.head() <= 4);
}

proptest! {
    /// Pushes, publishes, reads and commits in any order, with indices starting anywhere
    /// (across u64::MAX): the ring behaves as a bounded FIFO that drops what does not fit.
    #[test]
    fn index_wrap_around_matches_a_bounded_fifo(
        start in prop_oneof![Just(0u64), Just(u64::MAX), u64::MAX - 40..=u64::MAX, any::<u64>()],
        cap_log in 1u32..5,
        ops in proptest::collection::vec(0u8..4, 1..400),
    ) {
        let cap = 1u32 << cap_log;
        let file = Arc::new(RingFile::create_at("p", 1, cap, start).unwrap());
        let mut p = Producer::new(file.clone(), 0).unwrap();
        let mut r = Reader::new(file.clone(), 0).unwrap();
        // Model: what the producer holds unpublished, what is published and unread, what the
        // consumer consumed but did not commit.
        let mut pending: VecDeque<(u64, u64)> = VecDeque::new();
        let mut visible: VecDeque<(u64, u64)> = VecDeque::new();
        let (mut uncommitted, mut seq, mut lost, mut lost_published, mut reported) = (0u64, 0u64, 0u64, 0u64, 0u64);
        for op in ops {
            match op {
                0 => {
                    let used = (pending.len() + visible.len()) as u64 + uncommitted;
                    let ok = p.push(&rec(seq));
                    prop_assert_eq!(ok, used < u64::from(cap));
                    if ok { pending.push_back((seq, lost)); } else { lost += 1; }
                    seq += 1;
                }
                1 => { let _ = p.publish(); visible.extend(pending.drain(..)); lost_published = lost; }
                2 => {
                    let got = r.take().unwrap();
                    match visible.front() {
                        Some(&(_, l)) if l > reported => {
                            prop_assert_eq!(got, Next::Lost(l - reported));
                            reported = l;
                        }
                        Some(&(s, _)) => {
                            prop_assert_eq!(got, Next::Record(rec(s)));
                            visible.pop_front();
                            uncommitted += 1;
                        }
                        None if lost_published > reported => {
                            prop_assert_eq!(got, Next::Lost(lost_published - reported));
                            reported = lost_published;
                        }
                        None => prop_assert_eq!(got, Next::Empty),
                    }
                }
                _ => { r.commit(); uncommitted = 0; }
            }
        }
        prop_assert_eq!(p.head().wrapping_sub(start) + p.lost(), seq);
    }

    #[test]
    fn records_round_trip(
        (flow_id, offset, len, stag) in any::<(u64, u64, u64, u32)>(),
        msn in proptest::option::of(any::<u32>()),
        invalidate_stag in proptest::option::of(any::<u32>()),
        k in 0usize..3,
        lost in any::<u64>(),
        wr_id in any::<u64>(),
        st in 0usize..6,
    ) {
        let kind = [CompletionKind::WritePlaced, CompletionKind::ReadResponsePlaced, CompletionKind::SendArrived][k];
        let status = [
            CompletionStatus::Success,
            CompletionStatus::Flushed,
            CompletionStatus::RemoteInvalidRequest,
            CompletionStatus::RemoteAccess,
            CompletionStatus::RemoteOperation,
            CompletionStatus::RetryExceeded,
        ][st];
        let r = Record::Completion(Completion { flow_id, kind, stag, offset, len, msn, invalidate_stag, wr_id, status });
        prop_assert_eq!(decode_record(&encode_record(&r, lost)), Some((r, lost)));
        let m = Record::Moved { flow_id, from_ring: stag, position: offset };
        prop_assert_eq!(decode_record(&encode_record(&m, lost)), Some((m, lost)));
    }

    #[test]
    fn arbitrary_slots_never_panic(b in proptest::array::uniform32(any::<u8>()), c in proptest::array::uniform32(any::<u8>())) {
        let mut s = [0u8; RECORD_LEN];
        s[..32].copy_from_slice(&b);
        s[32..].copy_from_slice(&c);
        if let Some((r, l)) = decode_record(&s) {
            prop_assert_eq!(decode_record(&encode_record(&r, l)), Some((r, l)));
        }
    }
}

#[test]
fn poll_with_rings_names_the_ring_of_every_completion() {
    let file = Arc::new(RingFile::create("w", 3, 8).unwrap());
    let mut set = RingSet::new(file.clone());
    for ring in [2u32, 0, 2] {
        let mut p = Producer::new(file.clone(), ring).unwrap();
        // Each ring's producer starts from the ring's published head.
        let seq = u64::from(ring) * 10 + p.head();
        assert!(p.push(&rec(seq)));
        let _ = p.publish();
    }
    let (mut out, mut rings) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        set.poll_with_rings(&mut out, &mut rings, 10).unwrap();
    }
    assert_eq!(out.len(), 3);
    assert_eq!(rings.len(), 3);
    for (c, r) in out.iter().zip(&rings) {
        assert_eq!(c.flow_id / 10, u64::from(*r), "{c:?} from ring {r}");
    }
}

#[test]
fn a_post_refusal_record_round_trips() {
    let c = Completion::post_refused(5, 0x10, 0xfeed, 2, crate::RefusalCode::WrongDomain);
    let b = encode_record(&Record::Completion(c), 3);
    assert_eq!(b[44], 5, "kind 5");
    assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 0xfeed);
    assert_eq!(u64::from_le_bytes(b[16..24].try_into().unwrap()), 3);
    assert_eq!(decode_record(&b), Some((Record::Completion(c), 3)));
}
