//! Two whole workers on in-memory rings, back to back, and the lossy, reordering link between
//! them: the fixture of `send_pair.rs` and `work_requests.rs`. Worker A owns the sending end of
//! a connection (flow 1), worker B the receiving end (flow 2); each end's completions are read
//! from its ring as a consumer would.
#![allow(dead_code)]

use crossbeam_channel::{unbounded, Receiver};
use mpa_ctl_proto::ring::{Producer, RingFile, RingSet, Waker};
use mpa_ctl_proto::stats::FlowReport;
use mpa_ctl_proto::{Completion, RegionInfo, Role};
use mpa_datapath::io::ring::{MemRing, MemWire};
use mpa_datapath::memory::completions::RingSubscription;
use mpa_datapath::worker::{Command, Notification, Worker, WorkerConfig, WorkerError};
use mpa_stack::flow::WorkRequest;
use mpa_stack::receiver::Region;
use mpa_stack::region::RegionMemory;
use mpa_stack::sim::{SimHandover, SplitMix64};
use mpa_stack::wire::frame::parse_tcp_frame;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const A_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
pub const B_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
pub const A_ISN: u32 = u32::MAX - 20_000; // A's stream wraps early
pub const B_ISN: u32 = 7_000;
pub const SRC: u32 = 0x10;
pub const SINK: u32 = 0x20;
pub const BUFS: u32 = 0x30;
/// B's region the peer may read.
pub const READABLE: u32 = 0x40;

pub struct End {
    pub worker: Worker<MemRing>,
    pub wire: MemWire,
    pub mem: Arc<RegionMemory>,
    /// B's region of receive buffers for Sends.
    pub bufs: Option<Arc<RegionMemory>>,
    /// B's region with remote read.
    pub readable: Option<Arc<RegionMemory>>,
    pub rings: RingSet,
    pub completions: Vec<Completion>,
    /// The worker's notifications (a flow's final report when it ends).
    pub notes: Receiver<Notification>,
    /// The flow's final report, once it ended.
    pub gone: Option<FlowReport>,
}

pub fn region(stag: u32, len: u64, name: &str) -> (Region, Arc<RegionMemory>) {
    let mem = Arc::new(RegionMemory::create(name, len).unwrap());
    let r = Region {
        info: RegionInfo {
            stag,
            len,
            pd: 1,
            remote_write: stag != READABLE,
            remote_read: stag == READABLE,
            huge_pages: false,
        },
        mem: mem.clone(),
    };
    (r, mem)
}

/// A worker owning one end: `a` is the sending end (flow 1), else the receiving end (flow 2).
pub fn end(a: bool, markers: bool, len: u64) -> End {
    end_with(a, markers, len, None, None)
}

/// [`end`] with the IRD and ORD revision 2 negotiated (`None`: not negotiated).
pub fn end_with(a: bool, markers: bool, len: u64, ird: Option<u16>, ord: Option<u16>) -> End {
    end_full(a, markers, len, ird, ord, None, false)
}

/// The Responder's accepting Reply in the tests' peer-to-peer streams: it precedes B's first
/// FPDU, so A's stream starts after it.
pub const REPLY_LEN: u32 = 24;

/// [`end_with`]; with `rtr`, the connection is peer-to-peer (RFC 6581 §9.2): A is the
/// Initiator and sends `rtr` first, B the Responder that expects it (after its Reply). With
/// `run_to_completion`, the worker is configured as a `QueueDriver`'s: a turn's frames are
/// handed over at the next turn.
pub fn end_full(
    a: bool,
    markers: bool,
    len: u64,
    ird: Option<u16>,
    ord: Option<u16>,
    rtr: Option<mpa::startup::RtrType>,
    run_to_completion: bool,
) -> End {
    let (ring, wire) = MemRing::new(0).unwrap();
    let (_cmd_tx, cmd_rx) = unbounded();
    let (note_tx, notes) = unbounded();
    let mut worker = Worker::new(
        ring,
        WorkerConfig {
            digest: true,
            defer_tx_kick: run_to_completion,
            ..WorkerConfig::new(if a { A_MAC } else { B_MAC })
        },
        cmd_rx,
        note_tx,
    );
    let (r, mem) = region(if a { SRC } else { SINK }, len, "send-pair");
    worker.apply(Command::AddRegion(r));
    let bufs = (!a).then(|| {
        let (r, mem) = region(BUFS, 1 << 20, "send-pair-bufs");
        worker.apply(Command::AddRegion(r));
        mem
    });
    let readable = (!a || rtr.is_some()).then(|| {
        let (r, mem) = region(READABLE, len, "send-pair-readable");
        worker.apply(Command::AddRegion(r));
        mem
    });
    let (ours, theirs) = ("10.99.0.2:40000", "10.99.0.1:7777");
    let reply = if rtr.is_some() { REPLY_LEN } else { 0 };
    let mut h = SimHandover {
        flow_id: if a { 1 } else { 2 },
        local: if a { ours } else { theirs }.parse().unwrap(),
        remote: if a { theirs } else { ours }.parse().unwrap(),
        rcv_nxt: if a { B_ISN.wrapping_add(reply) } else { A_ISN },
        snd_nxt: if a { A_ISN } else { B_ISN },
        role: if a || rtr.is_none() {
            Role::Initiator
        } else {
            Role::Responder
        },
        rtr: rtr.into_iter().collect(),
        markers_rx: markers,
        markers_tx: markers,
        pd: Some(1),
        next_hop_mac: if a { B_MAC } else { A_MAC },
        ird,
        ord,
        ..SimHandover::default()
    }
    .build();
    if h.mpa.role == Role::Responder {
        h.mpa.reply_frame = vec![0x5a; REPLY_LEN as usize];
    }
    let (answer, result) = unbounded();
    assert!(worker.apply(Command::HandOver(Box::new(h), None, answer)));
    result.recv().unwrap().expect("hand-over accepted");
    let file = Arc::new(RingFile::create("send-pair-completions", 1, 1 << 14).unwrap());
    assert!(worker.apply(Command::Subscribe(Box::new(RingSubscription {
        pd: 1,
        id: 1,
        producer: Producer::new(file.clone(), 0).unwrap(),
        waker: Waker::create().unwrap(),
        posts: None,
    }))));
    End {
        worker,
        wire,
        mem,
        bufs,
        readable,
        rings: RingSet::new(file),
        completions: Vec::new(),
        notes,
        gone: None,
    }
}

/// Posts `p` on flow `flow` (whatever flow `p` names).
pub fn post(
    w: &mut Worker<MemRing>,
    flow: u64,
    p: WorkRequest,
) -> Result<Option<u32>, WorkerError> {
    let (answer, result) = unbounded();
    let p = WorkRequest { flow_id: flow, ..p };
    assert!(w.apply(Command::PostSend(Box::new(p), answer)));
    result.recv().unwrap()
}

/// Carries frames one way: each lost with probability `loss`, and one in `reorder` held
/// back behind the next (0: none).
pub fn carry(
    from: &MemWire,
    to: &MemWire,
    rng: &mut SplitMix64,
    loss: f64,
    held: &mut Vec<Vec<u8>>,
) -> usize {
    let frames = from.take_sent();
    let n = frames.len();
    for f in frames {
        if rng.chance(loss) {
            continue;
        }
        if rng.chance(0.02) {
            held.push(f);
            continue;
        }
        assert!(to.inject(f));
        for h in held.drain(..) {
            assert!(to.inject(h));
        }
    }
    n
}

pub struct Run {
    pub a: End,
    pub b: End,
    /// TCP payloads A sent (each one segment).
    pub segments: Vec<Vec<u8>>,
}

/// Runs both workers until A has `want_a` completions and B `want_b`, in virtual time.
pub fn run(a: End, b: End, loss: f64, seed: u64, want_a: usize, want_b: usize) -> Run {
    run_until(a, b, loss, seed, |a, b| {
        a.completions.len() >= want_a && b.completions.len() >= want_b
    })
}

/// Runs both workers until `done` holds, in virtual time.
pub fn run_until(
    mut a: End,
    mut b: End,
    loss: f64,
    seed: u64,
    done: impl Fn(&End, &End) -> bool,
) -> Run {
    let mut rng = SplitMix64(seed);
    let mut now = Instant::now();
    let (mut held_ab, mut held_ba) = (Vec::new(), Vec::new());
    let mut segments = Vec::new();
    for round in 0..200_000 {
        a.worker.poll_once_at(now).unwrap();
        // What A sent, recorded before the link may drop it.
        let sent = a.wire.take_sent();
        for f in &sent {
            let p = parse_tcp_frame(f, true).expect("A's frames are valid");
            if !p.tcp.payload().is_empty() {
                segments.push(p.tcp.payload().to_vec());
            }
        }
        let mut busy = sent.len();
        for f in sent {
            if rng.chance(loss) {
                continue;
            }
            if rng.chance(0.02) {
                held_ab.push(f);
                continue;
            }
            assert!(b.wire.inject(f));
            for h in held_ab.drain(..) {
                assert!(b.wire.inject(h));
            }
        }
        b.worker.poll_once_at(now).unwrap();
        busy += carry(&b.wire, &a.wire, &mut rng, loss, &mut held_ba);
        for e in [&mut a, &mut b] {
            e.rings.poll(&mut e.completions, 1 << 14).unwrap();
            while let Ok(n) = e.notes.try_recv() {
                if let Notification::FlowGone { stats, .. } = n {
                    e.gone = Some(*stats);
                }
            }
        }
        if done(&a, &b) {
            return Run { a, b, segments };
        }
        // Busy: a link of a few µs; idle: on to the next timer (an RTO after a tail loss).
        now += if busy > 0 {
            Duration::from_micros(20)
        } else {
            Duration::from_millis(20)
        };
        assert!(
            round < 199_999,
            "stuck: A {} completions, B {}",
            a.completions.len(),
            b.completions.len()
        );
    }
    unreachable!()
}

pub fn fill_pattern(mem: &RegionMemory, len: u64, seed: u64) {
    let mut rng = SplitMix64(seed);
    let v: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
    assert!(mem.write(0, &v));
}

pub fn contents(mem: &RegionMemory) -> Vec<u8> {
    let mut v = vec![0u8; mem.len() as usize];
    assert!(mem.read(0, &mut v));
    v
}
