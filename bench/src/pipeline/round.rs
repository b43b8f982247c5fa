//! One round of `pipeline`: a fresh `Worker<MemRing>` with one hand-over per flow and a
//! registered region per flow, the prepared frames injected in bursts of at most a ring, the
//! worker polled until each burst is drained (the timed part), then the checks.

use super::gen::{header_len, payload, Prepared, PEER_TSVAL};
use super::{local, PipelineOpts, OUR_MAC, PEER_MAC, RCV_NXT, SND_NXT};
use crate::bed::options::{Op, PD};
use anyhow::{anyhow, bail, Result};
use crossbeam_channel::{unbounded, Receiver};
use mpa_ctl_proto::ring::{Producer, RingFile, RingSet, Waker};
use mpa_ctl_proto::{
    stats::FlowReport, Completion, CompletionKind, HandOver, RegionInfo, TsSnapshot,
};
use mpa_datapath::io::ring::{MemRing, MemWire, MEM_FRAME_SIZE, MEM_RING_SIZE};
use mpa_datapath::memory::completions::RingSubscription;
use mpa_datapath::worker::{Command, Notification, Worker, WorkerConfig};
use mpa_stack::receiver::{PostedBuf, Region};
use mpa_stack::region::RegionMemory;
use mpa_stack::sim::SimHandover;
use mpa_stack::tcp::TcpConfig;
use nix::time::{clock_gettime, ClockId};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Receive window and buffer of every flow: far more than any reordering distance, so the
/// worker never drops a segment as out of window.
const RCV_BUF: usize = 4 << 20;

/// What one round measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct RoundResult {
    /// Time inside `poll_once` (frame parsing to ACK frames and completions).
    pub(crate) poll: Duration,
    /// This thread's CPU time inside `poll_once` (CLOCK_THREAD_CPUTIME_ID): what preemption
    /// by other load on the machine does not inflate.
    pub(crate) poll_cpu: Duration,
    /// Wall time of the whole loop (also injecting, posting, taking ACKs and completions).
    pub(crate) wall: Duration,
    /// This thread's CPU time over the whole loop (CLOCK_THREAD_CPUTIME_ID: the exact form of
    /// getrusage(RUSAGE_THREAD), which is tick-granular on this kernel and read above 1.0 of
    /// wall time on short rounds).
    pub(crate) cpu: f64,
    /// Frames the worker received.
    pub(crate) frames: u64,
    /// Payload octets placed or counted (messages × payload).
    pub(crate) payload_octets: u64,
    /// ACK frames the worker sent.
    pub(crate) acks: u64,
    /// Bursts injected (each at most a ring).
    pub(crate) injections: u64,
    /// Summed flow counters.
    pub(crate) fpdus: u64,
    pub(crate) placed_direct: u64,
    pub(crate) placed_in_order: u64,
    pub(crate) placed_from_store: u64,
    pub(crate) spanned_in_place: u64,
    pub(crate) crc_from_segments: u64,
    pub(crate) crc_at_segment_end: u64,
    pub(crate) staged: u64,
    /// Octets of the RX frames the kernel backed with transparent huge pages at the end.
    pub(crate) huge_page_octets: u64,
    pub(crate) out_of_order_segments: u64,
    /// Segments the TCP took in one update with the one before them (`segments_batched`).
    pub(crate) segments_batched: u64,
    pub(crate) store_high_water: u64,
    /// Octets of region compared with what was sent.
    pub(crate) compared: u64,
    /// Completions checked.
    pub(crate) completions: u64,
    /// When the loop began and ended (`wall` apart): with several workers, the span from the
    /// first start to the last end is the aggregate's loop time.
    pub(crate) began: Option<Instant>,
    pub(crate) ended: Option<Instant>,
}

struct Setup {
    worker: Worker<MemRing>,
    wire: MemWire,
    /// The consumer's end of the domain's completion ring (what a subscriber maps).
    rings: RingSet,
    _notes: Receiver<Notification>,
    mems: Vec<Arc<RegionMemory>>,
    /// Kept so the worker's command channel stays open.
    _cmd: crossbeam_channel::Sender<Command>,
}

fn handover(o: &PipelineOpts, flow_id: u64, remote: std::net::SocketAddrV4) -> HandOver {
    SimHandover {
        flow_id,
        local: local().into(),
        remote: remote.into(),
        rcv_nxt: RCV_NXT,
        snd_nxt: SND_NXT,
        mss: o.mss as u16,
        rcv_wnd: RCV_BUF as u32,
        markers_rx: o.markers,
        crc: o.crc,
        pd: (o.op != Op::Count).then_some(PD),
        aligned_sender: o.aligned && !o.markers && o.crc,
        next_hop_mac: PEER_MAC,
        timestamps: o.timestamps.then(|| TsSnapshot {
            // Our TSval clock starts at 1 now; the peer's first frame is the first it echoes.
            tsval: 1,
            monotonic_ns: clock_gettime(ClockId::CLOCK_MONOTONIC)
                .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
                .unwrap_or(0),
            ts_recent: PEER_TSVAL.wrapping_sub(1),
        }),
        ..SimHandover::default()
    }
    .build()
}

fn setup(o: &PipelineOpts, p: &Prepared) -> Result<Setup> {
    // Frames laid out as in a UMEM: one per frame stride, the data after the headroom; with
    // descriptors of `umem_chunk` octets, frames of `umem_chunk` + 256 (4096 for 3840).
    let frame_size = match o.umem_chunk {
        0 => MEM_FRAME_SIZE,
        c => c + 256,
    };
    let (ring, wire) = MemRing::with_frames(0, frame_size, o.huge_pages)
        .map_err(|e| anyhow!("frame arena of {frame_size}-octet frames: {e}"))?;
    wire.set_chunk((o.umem_chunk > 0).then_some(o.umem_chunk));
    let (cmd, cmd_rx) = unbounded();
    let (note_tx, notes) = unbounded();
    let tcp = TcpConfig {
        rcv_buf: RCV_BUF,
        reassembly_limit: RCV_BUF,
        ..TcpConfig::default()
    };
    let mut worker = Worker::new(
        ring,
        WorkerConfig {
            tcp,
            digest: o.digest,
            verify_checksums: o.verify_checksums,
            chains_in_pieces: o.chains_in_pieces,
            streaming_stores: o.streaming_stores,
            // The pipeline's own cost: an empty poll here is the end of a round, not a
            // spinner sharing a core.
            yield_every: 0,
            ..WorkerConfig::new(OUR_MAC)
        },
        cmd_rx,
        note_tx,
    );
    // The completion ring a subscriber would map: one burst's completions fit many times
    // over, and the round reads it after every burst.
    let file = Arc::new(RingFile::create(
        "pipeline-completions",
        1,
        COMPLETION_RING,
    )?);
    worker.apply(Command::Subscribe(Box::new(RingSubscription {
        pd: PD,
        id: 1,
        producer: Producer::new(file.clone(), 0).ok_or_else(|| anyhow!("no ring 0"))?,
        waker: Waker::create()?,
        posts: None,
    })));
    let rings = RingSet::new(file);
    let mut mems = Vec::new();
    for (i, f) in p.flows.iter().enumerate() {
        if o.op != Op::Count {
            let mem = Arc::new(RegionMemory::create(
                &format!("pipeline-{}", p.first_flow + i),
                f.region_len,
            )?);
            // Touched once before timing, as a registered region in use is: page faults of a
            // fresh memfd are not the pipeline's cost.
            mem.write(0, &vec![0u8; f.region_len as usize]);
            worker.apply(Command::AddRegion(Region {
                info: RegionInfo {
                    stag: f.stag,
                    len: f.region_len,
                    pd: PD,
                    remote_write: true,
                    remote_read: false,
                    huge_pages: false,
                },
                mem: mem.clone(),
            }));
            mems.push(mem);
        }
        let (answer, result) = unbounded();
        let h = handover(o, f.flow_id, f.remote);
        worker.apply(Command::HandOver(Box::new(h), None, answer));
        result
            .recv()?
            .map_err(|e| anyhow!("hand-over of flow {}: {e}", f.flow_id))?;
    }
    Ok(Setup {
        worker,
        wire,
        rings,
        _notes: notes,
        mems,
        _cmd: cmd,
    })
}

/// This thread's CPU time so far.
fn thread_cpu() -> Duration {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

/// Records of the round's completion ring.
const COMPLETION_RING: u32 = 1 << 16;

/// Reads the completion ring (outside the timed part: the consumer's work, in its own
/// thread in a real run); a loss fails the round.
fn take_completions(
    rings: &mut RingSet,
    first_flow: usize,
    into: &mut [Vec<Completion>],
) -> Result<()> {
    let mut got = Vec::new();
    loop {
        got.clear();
        let lost = rings.poll(&mut got, 4096)?;
        for c in &got {
            let local = (c.flow_id as usize).checked_sub(first_flow + 1);
            if let Some(v) = local.and_then(|i| into.get_mut(i)) {
                v.push(*c);
            }
        }
        if lost > 0 {
            bail!("{lost} completions lost: the ring of {COMPLETION_RING} records overflowed");
        }
        if got.is_empty() {
            return Ok(());
        }
    }
}

/// Frames injected into the ring before each burst of polls: as many as the ring holds,
/// counting the descriptors a multi-buffer frame takes, or fewer when `--ring-fill` says so.
pub(crate) fn burst_frames(o: &PipelineOpts, p: &Prepared) -> usize {
    let per_frame = p
        .frames
        .iter()
        .map(|f| descriptors(o, f.bytes.len()))
        .max()
        .unwrap_or(1);
    let holds = (MEM_RING_SIZE / per_frame).max(1);
    o.ring_fill.map_or(holds, |n| n.clamp(1, holds))
}

/// Descriptors a frame of `len` octets takes in the ring (several for a multi-buffer frame).
fn descriptors(o: &PipelineOpts, len: usize) -> usize {
    match o.umem_chunk {
        0 => 1,
        c => len.div_ceil(c).max(1),
    }
}

/// Runs one round; `Err` when any check fails.
pub(crate) fn run_round(o: &PipelineOpts, p: &Prepared) -> Result<RoundResult> {
    run_round_with(o, p, &mut |_| {})
}

/// [`run_round`], calling `timing(true)` before and `timing(false)` after each timed part.
pub(crate) fn run_round_with(
    o: &PipelineOpts,
    p: &Prepared,
    timing: &mut dyn FnMut(bool),
) -> Result<RoundResult> {
    run_round_on(o, p, timing, None)
}

/// [`run_round_with`] as one of several workers: the worker, its ring, regions and flows
/// are set up on the calling thread (so that their memory comes from this thread's
/// allocator arena, as a worker thread's own would), then every worker waits at `start`
/// before its loop begins. A failed setup still meets the others at `start` (none of them
/// waits forever) and then returns its error.
pub(crate) fn run_round_on(
    o: &PipelineOpts,
    p: &Prepared,
    timing: &mut dyn FnMut(bool),
    start: Option<&std::sync::Barrier>,
) -> Result<RoundResult> {
    let s = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| setup(o, p)))
        .unwrap_or_else(|_| Err(anyhow!("the round's setup panicked")));
    if let Some(b) = start {
        b.wait();
    }
    let mut s = s?;
    let nflows = p.flows.len();
    let mut completions: Vec<Vec<Completion>> = vec![Vec::new(); nflows];
    let mut posted = vec![0u64; nflows];
    let mut r = RoundResult::default();
    let cpu0 = thread_cpu();
    let wall0 = Instant::now();
    for burst in p.frames.chunks(burst_frames(o, p)) {
        if o.op == Op::Send {
            // Receive buffers for every message this burst begins, posted ahead (outside the
            // poll time; a consumer posts them in its own thread).
            let mut need = posted.clone();
            for fr in burst {
                need[fr.flow] = need[fr.flow].max(fr.msgs_upto);
            }
            for (f, plan) in p.flows.iter().enumerate() {
                if need[f] > posted[f] {
                    let bufs = (posted[f]..need[f])
                        .map(|m| PostedBuf {
                            stag: plan.stag,
                            offset: (m % plan.slots) * plan.payload_len as u64,
                            len: plan.payload_len as u32,
                            wr_id: 0,
                        })
                        .collect();
                    let (answer, result) = unbounded();
                    s.worker
                        .apply(Command::PostRecv(plan.flow_id, bufs, answer));
                    result.recv()?.map_err(|e| anyhow!("post: {e}"))?;
                    posted[f] = need[f];
                }
            }
        }
        if s.wire.inject_copies(burst.iter().map(|f| &f.bytes[..])) != burst.len() {
            bail!("the in-memory RX ring refused a frame");
        }
        r.injections += 1;
        timing(true);
        let c = thread_cpu();
        let t = Instant::now();
        let mut got = 0;
        let want: usize = burst.iter().map(|f| descriptors(o, f.bytes.len())).sum();
        while got < want {
            got += s.worker.poll_once()?;
        }
        r.poll += t.elapsed();
        r.poll_cpu += thread_cpu().saturating_sub(c);
        timing(false);
        r.acks += s.wire.take_sent().len() as u64;
        take_completions(&mut s.rings, p.first_flow, &mut completions)?;
    }
    r.wall = wall0.elapsed();
    r.cpu = thread_cpu().saturating_sub(cpu0).as_secs_f64();
    r.began = Some(wall0);
    r.ended = Some(wall0 + r.wall);
    // Every completion was published at the end of the burst that made it.
    let want: u64 = p.flows.iter().map(|f| f.messages).sum();
    let deadline = Instant::now() + Duration::from_secs(1);
    while o.op != Op::Count
        && completions.iter().map(|c| c.len() as u64).sum::<u64>() < want
        && Instant::now() < deadline
    {
        s.worker.poll_once()?;
        r.acks += s.wire.take_sent().len() as u64;
        take_completions(&mut s.rings, p.first_flow, &mut completions)?;
    }
    let q = s.worker.report();
    r.frames = q.ring.rx_frames;
    if q.stats.malformed + q.stats.unknown_flow > 0 {
        bail!(
            "{} malformed frames, {} of no flow",
            q.stats.malformed,
            q.stats.unknown_flow
        );
    }
    if q.flows.len() != nflows {
        bail!("{} flows left of {nflows}", q.flows.len());
    }
    r.huge_page_octets = s.wire.huge_page_octets().unwrap_or(0);
    for (f, plan) in p.flows.iter().enumerate() {
        let rep = q
            .flows
            .iter()
            .find(|x| x.flow_id == plan.flow_id)
            .ok_or_else(|| anyhow!("flow {} gone", plan.flow_id))?;
        check_flow(o, plan, rep)?;
        r.fpdus += rep.rx.fpdus;
        r.placed_direct += rep.rx.placed_direct;
        r.placed_in_order += rep.rx.placed_in_order;
        r.placed_from_store += rep.rx.placed_from_store;
        r.spanned_in_place += rep.rx.spanned_in_place;
        r.crc_from_segments += rep.rx.crc_from_segments;
        r.crc_at_segment_end += rep.rx.crc_at_segment_end;
        r.staged += rep.rx.staged;
        r.out_of_order_segments += rep.out_of_order_segments;
        r.segments_batched += rep.segments_batched;
        r.store_high_water = r.store_high_water.max(rep.store_high_water);
        r.payload_octets += plan.messages * plan.payload_len as u64;
        if o.op != Op::Count {
            r.completions += check_completions(o, plan, &completions[f])?;
            r.compared += check_region(o, p, f, &s.mems[f])?;
        }
    }
    Ok(r)
}

fn check_flow(o: &PipelineOpts, plan: &super::gen::FlowPlan, rep: &FlowReport) -> Result<()> {
    let id = plan.flow_id;
    let rx = &rep.rx;
    // With timestamps, the flow took them over and no frame failed their checks.
    let ts = (
        rep.ts_recent_inherited,
        rep.tcp_drops.paws,
        rep.tcp_drops.missing_timestamp,
    );
    if o.timestamps && ts != (Some(PEER_TSVAL.wrapping_sub(1)), 0, 0) {
        bail!(
            "flow {id}: timestamps not in force (TS.Recent inherited, PAWS drops, missing): {ts:?}"
        );
    }
    if rx.crc_errors + rx.marker_errors > 0 {
        bail!(
            "flow {id}: {} CRC and {} marker errors",
            rx.crc_errors,
            rx.marker_errors
        );
    }
    if rep.dropped_out_of_window + rep.dropped_reassembly_full > 0 {
        bail!(
            "flow {id}: {} segments dropped out of window, {} with the store full",
            rep.dropped_out_of_window,
            rep.dropped_reassembly_full
        );
    }
    if rep.octets != plan.wire_octets {
        bail!(
            "flow {id}: {} TCP octets received of {}",
            rep.octets,
            plan.wire_octets
        );
    }
    if rx.fpdus != plan.fpdus {
        bail!("flow {id}: {} FPDUs delivered of {}", rx.fpdus, plan.fpdus);
    }
    let digest = format!("{:08x}", plan.digest);
    if rep.ulpdu_digest.is_some() && rep.ulpdu_digest.as_deref() != Some(digest.as_str()) {
        bail!(
            "flow {id}: ULPDU digest {:?}, sent {digest}",
            rep.ulpdu_digest
        );
    }
    if let Some(end) = &rep.ended {
        bail!("flow {id} ended: {end:?}");
    }
    Ok(())
}

/// Every message completed once, in order, where it belongs.
fn check_completions(
    o: &PipelineOpts,
    plan: &super::gen::FlowPlan,
    got: &[Completion],
) -> Result<u64> {
    let id = plan.flow_id;
    if got.len() as u64 != plan.messages {
        bail!(
            "flow {id}: {} completions for {} messages",
            got.len(),
            plan.messages
        );
    }
    for (m, c) in got.iter().enumerate() {
        let m = m as u64;
        let off = (m % plan.slots) * plan.payload_len as u64;
        let (kind, msn) = match o.op {
            Op::Send => (CompletionKind::SendArrived, Some((m + 1) as u32)),
            _ => (CompletionKind::WritePlaced, None),
        };
        if (c.kind, c.stag, c.offset, c.len, c.msn)
            != (kind, plan.stag, off, plan.payload_len as u64, msn)
        {
            bail!("flow {id}: completion {m} is {c:?}, expected {kind:?} at {off} (msn {msn:?})");
        }
    }
    Ok(got.len() as u64)
}

/// The whole region equals the last message written into each slot.
fn check_region(o: &PipelineOpts, p: &Prepared, f: usize, mem: &RegionMemory) -> Result<u64> {
    let plan = &p.flows[f];
    let len = plan.payload_len;
    let mut got = vec![0u8; plan.region_len as usize];
    if !mem.read(0, &mut got) {
        bail!("flow {}: region unreadable", plan.flow_id);
    }
    for slot in 0..plan.slots {
        // The last message that went to this slot.
        let m = slot + (plan.messages - 1 - slot) / plan.slots * plan.slots;
        let want = payload(&p.table, len, p.first_flow + f, m);
        let at = (slot as usize) * len;
        if let Some(i) = got[at..at + len].iter().zip(want).position(|(a, b)| a != b) {
            bail!(
                "flow {}: region differs at offset {} (message {m}, {:?}, header {} octets)",
                plan.flow_id,
                at + i,
                o.op,
                header_len(o.op)
            );
        }
    }
    Ok(got.len() as u64)
}
