//! Posts through the shared-memory post queues over real AF_XDP: a consumer posts RDMA Writes
//! and Sends with `Consumer::post_write_shm` / `post_send_shm` (no control-socket request) on
//! a flow the datapath made as Initiator toward the kernel-TCP `mpa-peer listen`, which
//! places the Writes into the region it advertised. The listener's region must end up octet
//! for octet the consumer's and every post must complete. Posts the datapath must refuse (an
//! unknown STag, a flow of another domain than the subscription's, a malformed record) come
//! back as `PostRefused` completions with their work request ids while the connection goes on
//! working; posts written into the queue of a worker that does not own the flow are passed
//! on, not lost; and a consumer that scribbles over its post queue neither crashes nor stalls
//! the datapath.

use mpa::crc::crc32c;
use mpa_app::{ConnectionEvent, Consumer, ConsumerError};
use mpa_control::datapath_client::DatapathClient;
use mpa_ctl_proto::client::ControlClient;
use mpa_ctl_proto::region_ad::RegionAd;
use mpa_ctl_proto::ring::post::{PostOp, SgList, Sge, WorkRequest};
use mpa_ctl_proto::stats::QueueStats;
use mpa_ctl_proto::{Completion, CompletionKind, CompletionStatus, Message, RefusalCode};
use mpa_stack::sim::SplitMix64;
use mpa_tests::PeerListener as Listener;
use mpa_tests::{
    datapath, datapath_initiates, require_privileged, BedConfig, DatapathOptions, TestBed,
};
use serde_json::Value;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

const PD: u32 = 5;
const OTHER_PD: u32 = 6;
const PEER_STAG: u32 = 0x7700;
const LEN: u64 = 1 << 20;
const MSG: u64 = 4096;

/// A kernel `mpa-peer listen` in ns a and the datapath's connection to it.
struct Connected {
    listener: Listener,
    flow_id: u64,
    /// The region the listener advertised.
    ad: RegionAd,
    frozen: mpa_control::freeze::FrozenSocket,
}

/// Starts `mpa-peer listen` on `port` of ns a, advertising `len` octets at [`PEER_STAG`], and
/// connects the datapath at `path` to it in domain [`PD`].
fn connect_to_peer(bed: &TestBed, path: &Path, port: u16, len: u64) -> Connected {
    let bind = SocketAddr::new(bed.addr_a(false), port);
    let advertise = format!("{PEER_STAG:#x}:{len}");
    let listener = Listener::start(bed, bind, &["--timeout", "30", "--advertise", &advertise]);
    let (flow_id, negotiated, frozen) = datapath_initiates(bed, path, bind, PD);
    let ad = RegionAd::parse(&negotiated.peer_private_data)
        .expect("a valid advertisement")
        .expect("the listener's advertisement");
    Connected {
        listener,
        flow_id,
        ad,
        frozen,
    }
}

/// Every queue's counters, summed.
fn queue_totals(path: &Path) -> QueueStats {
    let mut dpc = DatapathClient::connect(path, Duration::from_secs(5)).unwrap();
    let s = mpa_tests::stats(&mut dpc);
    let mut t = QueueStats::default();
    for q in &s.queues {
        t.posts_shm += q.stats.posts_shm;
        t.posts_refused += q.stats.posts_refused;
        t.posts_forwarded += q.stats.posts_forwarded;
        t.post_queues_corrupt += q.stats.post_queues_corrupt;
    }
    t
}

/// Completions until `want` says enough (bounded by `within`), all of them.
fn completions_until(
    consumer: &mut Consumer,
    within: Duration,
    mut want: impl FnMut(&[Completion]) -> bool,
) -> Vec<Completion> {
    let deadline = Instant::now() + within;
    let mut all = Vec::new();
    while !want(&all) {
        assert!(Instant::now() < deadline, "completions so far: {all:#?}");
        if let Some(b) = consumer
            .next_completions(Instant::now() + Duration::from_millis(200))
            .unwrap()
        {
            all.extend(b);
        }
    }
    all
}

/// `post`, retried while its queue is full (reading completions into `seen` meanwhile: the
/// worker reads the queue on its own, the consumer only has to wait).
fn post_retrying(consumer: &mut Consumer, post: &WorkRequest, seen: &mut Vec<Completion>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match consumer.post(post) {
            Ok(()) => return,
            Err(ConsumerError::PostQueueFull { .. }) => {
                assert!(Instant::now() < deadline, "the post queue stays full");
                if let Some(b) = consumer
                    .next_completions(Instant::now() + Duration::from_millis(1))
                    .unwrap()
                {
                    seen.extend(b);
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn writes_posted_through_shared_memory_reach_the_kernel_peer_and_refusals_come_back() {
    if !require_privileged("shared-memory posts") {
        return;
    }
    let bed = TestBed::up(BedConfig {
        queues: 2,
        ..BedConfig::default()
    })
    .unwrap();
    let (dp, path) = datapath(
        &bed,
        &DatapathOptions {
            queues: 2,
            ..DatapathOptions::default()
        },
    );
    let mut consumer = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
    let region = consumer.create_region(LEN, PD, false, false).unwrap();
    let other = consumer
        .create_region(4096, OTHER_PD, false, false)
        .unwrap();
    consumer.subscribe(PD).unwrap();
    consumer.subscribe(OTHER_PD).unwrap();
    assert!(consumer.post_queue_file(PD).is_some());
    let mut rng = SplitMix64(77);
    let src: Vec<u8> = (0..LEN).map(|_| rng.next_u64() as u8).collect();
    assert!(region.write(0, &src));

    let Connected {
        listener,
        flow_id,
        ad,
        frozen,
    } = connect_to_peer(&bed, &path, 7900, LEN);
    assert_eq!((ad.stag, ad.len), (PEER_STAG, LEN));
    let stag = region.info().stag;
    let write = |i: u64, wr_id: u64| WorkRequest {
        flow_id,
        wr_id,
        sg_list: SgList::one(stag, i * MSG, MSG),
        count: 1,
        op: PostOp::Write {
            sink_stag: ad.stag,
            sink_to: ad.base_to + i * MSG,
        },
        signaled: true,
        solicited: false,
        fence: false,
    };
    let count = LEN / MSG;
    let half = count / 2;
    let mut seen = Vec::new();
    // The first half one post each, alternately into both workers' queues: the one that does
    // not own the flow passes its posts on through the control thread.
    for i in 0..half {
        let p = write(i, i);
        loop {
            match consumer.post_to(PD, (i % 2) as u32, &p) {
                Ok(()) => break,
                Err(ConsumerError::PostQueueFull { .. }) => {
                    if let Some(b) = consumer
                        .next_completions(Instant::now() + Duration::from_millis(1))
                        .unwrap()
                    {
                        seen.extend(b);
                    }
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    let sent = |all: &[Completion]| {
        all.iter()
            .filter(|c| c.kind == CompletionKind::WriteSent)
            .count() as u64
    };
    let more = completions_until(&mut consumer, Duration::from_secs(60), |all| {
        sent(&seen) + sent(all) >= half
    });
    seen.extend(more);
    assert!(
        seen.iter().all(|c| c.kind == CompletionKind::WriteSent),
        "{seen:#?}"
    );
    let t = queue_totals(&path);
    assert!(t.posts_forwarded > 0, "no post was passed on: {t:?}");

    // Refusals: an unknown STag, a region of another domain, the flow posted through the
    // other domain's queue, a record of no message. The connection goes on.
    const BAD_STAG: u64 = 0xbad0;
    const FOREIGN_REGION: u64 = 0xbad1;
    const FOREIGN_QUEUE: u64 = 0xbad2;
    const NO_MESSAGE: u64 = 0xbad3;
    consumer
        .post_write_shm(
            flow_id,
            0xdead_beef,
            0,
            MSG,
            1,
            ad.stag,
            ad.base_to,
            BAD_STAG,
        )
        .unwrap();
    consumer
        .post_write_shm(
            flow_id,
            other.info().stag,
            0,
            MSG,
            1,
            ad.stag,
            ad.base_to,
            FOREIGN_REGION,
        )
        .unwrap();
    consumer
        .post_in(
            OTHER_PD,
            &WorkRequest {
                sg_list: SgList::one(other.info().stag, 0, MSG),
                ..write(0, FOREIGN_QUEUE)
            },
        )
        .unwrap();
    consumer
        .post(&WorkRequest {
            count: 0,
            ..write(0, NO_MESSAGE)
        })
        .unwrap();
    let refusals = |all: &[Completion]| {
        all.iter()
            .filter(|c| c.kind == CompletionKind::PostRefused)
            .count()
    };
    let got = completions_until(&mut consumer, Duration::from_secs(10), |all| {
        refusals(all) >= 4
    });
    let mut codes: Vec<(u64, RefusalCode)> = got.iter().filter_map(|c| c.refusal()).collect();
    codes.sort_by_key(|c| c.0);
    assert_eq!(
        codes,
        vec![
            (BAD_STAG, RefusalCode::UnknownRegion),
            (FOREIGN_REGION, RefusalCode::WrongDomain),
            (FOREIGN_QUEUE, RefusalCode::WrongDomain),
            (NO_MESSAGE, RefusalCode::Malformed),
        ],
        "{got:#?}"
    );
    for c in got.iter().filter(|c| c.kind == CompletionKind::PostRefused) {
        assert_eq!(c.flow_id, flow_id, "{c:?}");
        // The refused post's message count: what the consumer stops counting as outstanding.
        let posted = if c.offset == NO_MESSAGE { 0 } else { 1 };
        assert_eq!(c.msn, Some(posted), "{c:?}");
        // Verbs' statuses: a region not the poster's is a local protection error, a record
        // that makes no sense a local QP operation error.
        let status = match c.offset {
            NO_MESSAGE => CompletionStatus::LocalQpOperation,
            _ => CompletionStatus::LocalProtection,
        };
        assert_eq!(c.status, status, "{c:?}");
    }

    // The second half (one post per message again), then Sends, all through shared memory.
    let mut seen = Vec::new();
    for i in half..count {
        post_retrying(&mut consumer, &write(i, i), &mut seen);
    }
    const SENDS: u32 = 4;
    consumer
        .post_send_shm(flow_id, stag, 0, 1000, SENDS, 0x5e)
        .unwrap();
    let more = completions_until(&mut consumer, Duration::from_secs(60), |all| {
        sent(&seen) + sent(all) >= count - half
            && all
                .iter()
                .chain(&seen)
                .filter(|c| c.kind == CompletionKind::SendSent)
                .count()
                >= SENDS as usize
    });
    seen.extend(more);
    let mut offsets: Vec<u64> = seen
        .iter()
        .filter(|c| c.kind == CompletionKind::WriteSent)
        .map(|c| c.offset)
        .collect();
    offsets.sort_unstable();
    assert_eq!(
        offsets,
        (half..count).map(|i| i * MSG).collect::<Vec<_>>(),
        "every Write of the second half completes once"
    );
    consumer.finish_flow(flow_id).unwrap();
    let report = listener.report(Duration::from_secs(30));
    drop(frozen);
    assert_eq!(report["error"], Value::Null, "{report}");
    assert_eq!(report["writes"], count, "{report}");
    assert_eq!(report["write_octets"], LEN, "{report}");
    assert_eq!(report["sends"], SENDS, "{report}");
    assert_eq!(
        report["region_digest"],
        format!("{:08x}", crc32c(&src)),
        "the listener's region is not the consumer's: {report}"
    );
    let t = queue_totals(&path);
    assert_eq!(t.posts_shm, count + 4 + 1, "{t:?}");
    assert_eq!(t.posts_refused, 4, "{t:?}");
    assert_eq!(t.post_queues_corrupt, 0, "{t:?}");
    assert_eq!(dp.failure(), None);
    dp.stop();
}

/// Writes whose scatter-gather lists take their octets from two regions, in pieces of odd
/// lengths and out of order, reach the kernel `mpa-peer listen` octet-exact; a gathered,
/// solicited Send arrives as a Send.
#[test]
fn gathered_writes_reach_the_kernel_peer_octet_exact() {
    if !require_privileged("scatter-gather posts") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = datapath(&bed, &DatapathOptions::default());
    let mut consumer = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
    const HALF: u64 = LEN / 2;
    let first = consumer.create_region(HALF, PD, false, false).unwrap();
    let second = consumer.create_region(HALF, PD, false, false).unwrap();
    consumer.subscribe(PD).unwrap();
    let mut rng = SplitMix64(5);
    let a: Vec<u8> = (0..HALF).map(|_| rng.next_u64() as u8).collect();
    let b: Vec<u8> = (0..HALF).map(|_| rng.next_u64() as u8).collect();
    assert!(first.write(0, &a) && second.write(0, &b));
    let Connected {
        listener,
        flow_id,
        ad,
        frozen,
    } = connect_to_peer(&bed, &path, 7910, LEN);
    let (sa, sb) = (first.info().stag, second.info().stag);
    // Write i fills the sink's [i·MSG, (i+1)·MSG) with: 1000 octets of the second region's
    // message i, 7 of the first's, then the rest of the first's message i (the sink's image is
    // the pieces one after the other).
    let count = LEN / MSG;
    let mut want = Vec::with_capacity(LEN as usize);
    let mut seen = Vec::new();
    for i in 0..count {
        let at = (i * MSG / 2) % (HALF - MSG);
        let entries = [
            Sge {
                stag: sb,
                offset: at,
                len: 1000,
            },
            Sge {
                stag: sa,
                offset: HALF - 7,
                len: 7,
            },
            Sge {
                stag: sa,
                offset: at,
                len: MSG - 1007,
            },
        ];
        for e in &entries {
            let src = if e.stag == sa { &a } else { &b };
            want.extend_from_slice(&src[e.offset as usize..(e.offset + e.len) as usize]);
        }
        let wr = WorkRequest {
            sg_list: SgList::new(&entries).unwrap(),
            ..WorkRequest::new(
                flow_id,
                i,
                PostOp::Write {
                    sink_stag: ad.stag,
                    sink_to: ad.base_to + i * MSG,
                },
                0,
                0,
                1,
                1,
            )
        };
        post_retrying(&mut consumer, &wr, &mut seen);
    }
    let send = WorkRequest {
        sg_list: SgList::new(&[
            Sge {
                stag: sa,
                offset: 0,
                len: 10,
            },
            Sge {
                stag: sb,
                offset: 0,
                len: 990,
            },
        ])
        .unwrap(),
        solicited: true,
        ..WorkRequest::new(flow_id, 0x5e, PostOp::Send, 0, 0, 1, 1)
    };
    post_retrying(&mut consumer, &send, &mut seen);
    let done = |all: &[Completion]| {
        all.iter()
            .filter(|c| c.status == CompletionStatus::Success)
            .count() as u64
    };
    let more = completions_until(&mut consumer, Duration::from_secs(60), |all| {
        done(&seen) + done(all) > count
    });
    seen.extend(more);
    let mut lens: Vec<(CompletionKind, u64)> = seen.iter().map(|c| (c.kind, c.len)).collect();
    lens.dedup();
    assert_eq!(
        lens,
        [
            (CompletionKind::WriteSent, MSG),
            (CompletionKind::SendSent, 1000)
        ],
        "{seen:#?}"
    );
    consumer.finish_flow(flow_id).unwrap();
    let report = listener.report(Duration::from_secs(30));
    drop(frozen);
    assert_eq!(report["error"], Value::Null, "{report}");
    assert_eq!(report["writes"], count, "{report}");
    assert_eq!(report["sends"], 1, "{report}");
    assert_eq!(
        report["region_digest"],
        format!("{:08x}", crc32c(&want)),
        "the listener's region is not the gathered image: {report}"
    );
    assert_eq!(dp.failure(), None);
    dp.stop();
}

#[test]
fn a_consumer_scribbling_over_its_post_queue_does_not_hurt_the_datapath() {
    if !require_privileged("a corrupt post queue") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = datapath(&bed, &DatapathOptions::default());
    // The vandal: its own domain, its queue file written at random.
    let mut vandal = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
    let _vr = vandal.create_region(4096, OTHER_PD, false, false).unwrap();
    vandal.subscribe(OTHER_PD).unwrap();
    let file = std::fs::File::from(
        vandal
            .post_queue_file(OTHER_PD)
            .unwrap()
            .fd()
            .try_clone_to_owned()
            .unwrap(),
    );
    let mut rng = SplitMix64(99);
    // Queue 0: header of three 128-octet lines (head at 128), then 128-octet records. Four
    // records of garbage published: each is refused as malformed.
    let garbage: Vec<u8> = (0..4 * 128).map(|_| rng.next_u64() as u8).collect();
    file.write_at(&garbage, 384).unwrap();
    file.write_at(&4u64.to_le_bytes(), 128).unwrap();
    let got = completions_until(&mut vandal, Duration::from_secs(10), |all| all.len() >= 4);
    assert!(
        got.iter()
            .all(|c| c.refusal().map(|r| r.1) == Some(RefusalCode::Malformed)),
        "{got:#?}"
    );
    // Then a head far ahead of what the worker read: the queue is given up, counted once.
    file.write_at(&(4u64 + (1 << 40)).to_le_bytes(), 128)
        .unwrap();
    let t0 = Instant::now();
    while queue_totals(&path).post_queues_corrupt == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "corrupt queue not noticed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // More garbage everywhere, header included.
    let junk: Vec<u8> = (0..8192).map(|_| rng.next_u64() as u8).collect();
    file.write_at(&junk, 0).unwrap();

    // Another consumer's connection works meanwhile, its posts through shared memory.
    let mut consumer = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
    let len = 256 * 1024u64;
    let region = consumer.create_region(len, PD, false, false).unwrap();
    consumer.subscribe(PD).unwrap();
    let src: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
    assert!(region.write(0, &src));
    let Connected {
        listener,
        flow_id,
        ad,
        frozen,
    } = connect_to_peer(&bed, &path, 7910, len);
    let count = (len / MSG) as u32;
    consumer
        .post_write_shm(
            flow_id,
            region.info().stag,
            0,
            MSG,
            count,
            ad.stag,
            ad.base_to,
            1,
        )
        .unwrap();
    let got = completions_until(&mut consumer, Duration::from_secs(60), |all| {
        all.len() >= count as usize
    });
    assert!(
        got.iter().all(|c| c.kind == CompletionKind::WriteSent),
        "{got:#?}"
    );
    consumer.finish_flow(flow_id).unwrap();
    let report = listener.report(Duration::from_secs(30));
    drop(frozen);
    assert_eq!(report["error"], Value::Null, "{report}");
    assert_eq!(report["write_octets"], len, "{report}");
    assert_eq!(
        report["region_digest"],
        format!("{:08x}", crc32c(&src)),
        "{report}"
    );
    let t = queue_totals(&path);
    assert_eq!(t.post_queues_corrupt, 1, "{t:?}");
    assert_eq!(dp.failure(), None);
    drop(vandal);

    // A subscriber that does not ask for post queues (one that predates them) gets the two
    // ring descriptors only.
    let mut old = ControlClient::connect(&path, Duration::from_secs(10)).unwrap();
    let (m, fds) = old
        .request_with_fds(|id| Message::Subscribe {
            id,
            pd: 9,
            post_queues: false,
        })
        .unwrap();
    assert!(
        matches!(
            m,
            Message::Subscribed {
                post_capacity: 0,
                ..
            }
        ),
        "{m:?}"
    );
    assert_eq!(fds.len(), 2);
    dp.stop();
}

#[test]
fn a_sleeping_worker_sets_its_waiting_flag_and_wakes_on_its_doorbell() {
    if !require_privileged("the post queue doorbell") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = datapath(&bed, &DatapathOptions::default());
    let mut consumer = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
    let region = consumer.create_region(4096, PD, false, false).unwrap();
    consumer.subscribe(PD).unwrap();
    let Connected {
        listener,
        flow_id,
        ad,
        frozen,
    } = connect_to_peer(&bed, &path, 7920, 4096);
    let file = std::fs::File::from(
        consumer
            .post_queue_file(PD)
            .unwrap()
            .fd()
            .try_clone_to_owned()
            .unwrap(),
    );
    // Queue 0's `waiting` flag (octet 264): the idle worker sets it before it sleeps.
    let waiting = || {
        let mut b = [0u8; 4];
        file.read_exact_at(&mut b, 264).unwrap();
        u32::from_le_bytes(b)
    };
    let t0 = Instant::now();
    while waiting() != 1 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the idle worker never said it sleeps"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    // A post into a sleeping worker's queue rings its doorbell: the refusal of a post naming
    // no region comes back at once, not at the end of the worker's wait (up to 10 ms).
    let mut took = Vec::new();
    for i in 0..21u64 {
        // Idle for a while that is not a whole number of the worker's 10 ms waits: posts land
        // anywhere in a wait.
        std::thread::sleep(Duration::from_micros(30_000 + (i * 3_700) % 10_000));
        let t = Instant::now();
        consumer
            .post_write_shm(flow_id, 0xdead_0000, 0, 64, 1, ad.stag, ad.base_to, i)
            .unwrap();
        let got = completions_until(&mut consumer, Duration::from_secs(5), |all| {
            all.iter().any(|c| c.refusal().map(|r| r.0) == Some(i))
        });
        took.push(t.elapsed());
        assert!(
            got.iter()
                .all(|c| c.refusal() == Some((i, RefusalCode::UnknownRegion))),
            "{got:#?}"
        );
    }
    took.sort_unstable();
    assert!(
        took[took.len() / 2] < Duration::from_millis(2),
        "a sleeping worker's posts wait for its timeout: {took:?}"
    );
    // The connection is still fine: a Write goes through.
    assert!(region.write(0, &[0x5a; 4096]));
    consumer
        .post_write_shm(
            flow_id,
            region.info().stag,
            0,
            4096,
            1,
            ad.stag,
            ad.base_to,
            99,
        )
        .unwrap();
    let got = completions_until(&mut consumer, Duration::from_secs(20), |all| {
        !all.is_empty()
    });
    assert_eq!(got[0].kind, CompletionKind::WriteSent, "{got:#?}");
    consumer.finish_flow(flow_id).unwrap();
    let report = listener.report(Duration::from_secs(30));
    drop(frozen);
    assert_eq!(report["error"], Value::Null, "{report}");
    assert_eq!(report["write_octets"], 4096, "{report}");
    dp.stop();
}

#[test]
fn a_run_to_completion_driver_reads_the_post_queues_at_every_turn() {
    if !require_privileged("shared-memory posts, run-to-completion") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (mut dp, path) = datapath(
        &bed,
        &DatapathOptions {
            caller_drives_queues: true,
            queue_steering: Default::default(),
            ..DatapathOptions::default()
        },
    );
    let mut driver = dp.take_queue_drivers().pop().expect("queue 0's driver");
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        // The queue turned by a thread of its own (the application's loop), never sleeping.
        let turning = s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                driver.poll().unwrap();
            }
        });
        let mut consumer = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
        let len = 256 * 1024u64;
        let region = consumer.create_region(len, PD, false, false).unwrap();
        consumer.subscribe(PD).unwrap();
        let mut rng = SplitMix64(5);
        let src: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        assert!(region.write(0, &src));
        let Connected {
            listener,
            flow_id,
            ad,
            frozen,
        } = connect_to_peer(&bed, &path, 7930, len);
        let count = len / MSG;
        let mut seen = Vec::new();
        for i in 0..count {
            let p = WorkRequest {
                flow_id,
                wr_id: i,
                sg_list: SgList::one(region.info().stag, i * MSG, MSG),
                count: 1,
                op: PostOp::Write {
                    sink_stag: ad.stag,
                    sink_to: ad.base_to + i * MSG,
                },
                signaled: true,
                solicited: false,
                fence: false,
            };
            post_retrying(&mut consumer, &p, &mut seen);
        }
        let more = completions_until(&mut consumer, Duration::from_secs(60), |all| {
            (seen.len() + all.len()) as u64 >= count
        });
        seen.extend(more);
        assert!(
            seen.iter().all(|c| c.kind == CompletionKind::WriteSent),
            "{seen:#?}"
        );
        consumer.finish_flow(flow_id).unwrap();
        let report = listener.report(Duration::from_secs(30));
        drop(frozen);
        assert_eq!(report["error"], Value::Null, "{report}");
        assert_eq!(report["writes"], count, "{report}");
        assert_eq!(
            report["region_digest"],
            format!("{:08x}", crc32c(&src)),
            "{report}"
        );
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        turning.join().unwrap();
    });
    drop(driver);
    dp.stop();
}

/// The completion descriptor in the application's own epoll set: an armed subscription wakes
/// it at its next completion, once; a disarmed one does not; arming with completions waiting
/// says so instead of arming.
#[test]
fn an_armed_subscription_wakes_the_applications_own_epoll_once() {
    use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
    if !require_privileged("completion descriptor in epoll") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = datapath(&bed, &DatapathOptions::default());
    let mut consumer = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
    let _region = consumer.create_region(4096, PD, false, false).unwrap();
    consumer.subscribe(PD).unwrap();
    assert!(matches!(
        consumer.arm(OTHER_PD),
        Err(ConsumerError::NotSubscribed(OTHER_PD))
    ));
    assert!(consumer.completion_fd(OTHER_PD).is_none());
    let Connected {
        listener,
        flow_id,
        ad,
        frozen,
    } = connect_to_peer(&bed, &path, 7940, 4096);
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).unwrap();
    let fd = consumer
        .completion_fd(PD)
        .unwrap()
        .try_clone_to_owned()
        .unwrap();
    epoll
        .add(&fd, EpollEvent::new(EpollFlags::EPOLLIN, u64::from(PD)))
        .unwrap();
    let wait = |ms: u16| {
        let mut ev = [EpollEvent::empty(); 4];
        let n = epoll.wait(&mut ev, EpollTimeout::from(ms)).unwrap();
        ev[..n].iter().map(|e| e.data()).collect::<Vec<_>>()
    };
    // A post the datapath refuses (no region 0xdead0000) comes back as a completion.
    let refused = |consumer: &mut Consumer, wr_id: u64| {
        consumer
            .post_write_shm(flow_id, 0xdead_0000, 0, 64, 1, ad.stag, ad.base_to, wr_id)
            .unwrap();
    };
    let mut got = Vec::new();
    while consumer.poll_completions(&mut got).unwrap() > 0 {}

    // Armed: the completion makes the descriptor readable, in our own epoll set.
    assert!(consumer.arm(PD).unwrap());
    assert_eq!(wait(0), Vec::<u64>::new(), "readable before any completion");
    refused(&mut consumer, 1);
    assert_eq!(wait(5000), vec![u64::from(PD)], "armed, no wake-up in 5 s");
    consumer.ack_notify(PD).unwrap();
    assert_eq!(
        wait(0),
        Vec::<u64>::new(),
        "still readable after ack_notify"
    );
    got.clear();
    while got.is_empty() {
        consumer.poll_completions(&mut got).unwrap();
    }
    assert_eq!(
        got[0].refusal(),
        Some((1, RefusalCode::UnknownRegion)),
        "{got:#?}"
    );

    // Not armed: the next completion arrives in the ring without touching the descriptor.
    refused(&mut consumer, 2);
    got.clear();
    let t0 = Instant::now();
    while got.is_empty() {
        consumer.poll_completions(&mut got).unwrap();
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "no completion in 5 s"
        );
    }
    assert_eq!(
        got[0].refusal(),
        Some((2, RefusalCode::UnknownRegion)),
        "{got:#?}"
    );
    assert_eq!(wait(0), Vec::<u64>::new(), "woken while not armed");

    // Arming while a completion waits in the ring says so, and arms nothing.
    refused(&mut consumer, 3);
    let t0 = Instant::now();
    while consumer.arm(PD).unwrap() {
        consumer.ack_notify(PD).unwrap();
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "no completion in 5 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    got.clear();
    consumer.poll_completions(&mut got).unwrap();
    assert_eq!(
        got[0].refusal(),
        Some((3, RefusalCode::UnknownRegion)),
        "{got:#?}"
    );

    consumer.finish_flow(flow_id).unwrap();
    let _ = listener.report(Duration::from_secs(30));
    drop(frozen);
    dp.stop();
}

/// The application that owns a connection's domain (not the connection manager that adopted
/// it) learns that the connection ended, and how: a close of its own, and a Terminate the
/// peer sent for a Write to an STag it never advertised.
#[test]
fn the_domains_owner_learns_that_its_connections_ended_and_how() {
    if !require_privileged("connection ends to the domain's owner") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = datapath(&bed, &DatapathOptions::default());
    let mut consumer = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
    let region = consumer.create_region(4096, PD, false, false).unwrap();
    consumer.subscribe(PD).unwrap();
    let ended = |consumer: &mut Consumer, flow_id: u64| {
        let t0 = Instant::now();
        let ev = consumer
            .wait_connection_event(Duration::from_secs(20))
            .unwrap();
        assert!(t0.elapsed() < Duration::from_secs(21));
        let Some(ConnectionEvent::Ended(e)) = ev else {
            panic!("no end of flow {flow_id}: {ev:?}");
        };
        assert_eq!(e.flow_id, flow_id, "{e:?}");
        assert_eq!(consumer.connection_events().unwrap(), vec![]);
        e
    };

    // Closed by the application: no error, no Terminate.
    let Connected {
        listener,
        flow_id,
        frozen,
        ..
    } = connect_to_peer(&bed, &path, 7950, 4096);
    assert_eq!(consumer.connection_events().unwrap(), vec![]);
    consumer.finish_flow(flow_id).unwrap();
    let _ = listener.report(Duration::from_secs(30));
    let e = ended(&mut consumer, flow_id);
    assert_eq!((e.mpa_error, e.terminate), (None, None), "{e:?}");
    drop(frozen);

    // A Write to an STag the peer never advertised: its Terminate (DDP, tagged buffer error,
    // invalid STag: RFC 5041 §7.2) ends the connection.
    let Connected {
        listener,
        flow_id,
        frozen,
        ..
    } = connect_to_peer(&bed, &path, 7951, 4096);
    assert!(region.write(0, &[0x5a; 64]));
    consumer
        .post_write_shm(
            flow_id,
            region.info().stag,
            0,
            64,
            1,
            PEER_STAG ^ 0xff00,
            0,
            1,
        )
        .unwrap();
    let e = ended(&mut consumer, flow_id);
    let t = e.terminate.unwrap_or_else(|| panic!("no Terminate: {e:?}"));
    assert_eq!(
        (t.layer, t.error_type, t.error_code, t.sent),
        (1, 1, 0, false),
        "{e:?}"
    );
    let _ = listener.report(Duration::from_secs(30));
    drop(frozen);
    assert_eq!(consumer.connection_events_dropped(), 0);
    dp.stop();
}
