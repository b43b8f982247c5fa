//! The pre-recorded sender of `pipeline`: per flow an FPDU stream of RDMA Writes or Sends (markers
//! on or off, cut at the MSS or aligned by exact fill), cut into TCP segments, built into
//! Ethernet frames once, interleaved round-robin across flows, then dropped (retransmitted
//! later) and reordered deterministically. What a correct receiver must end up with is kept
//! beside the frames: per-message completions, the ULPDU digest, the region pattern.

use super::{PipelineOpts, OUR_MAC, PEER_MAC, RCV_NXT, SND_NXT};
use anyhow::{anyhow, bail, Result};
use etherparse::{PacketBuilder, TcpOptionElement};
use mpa::wire::ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use mpa_stack::sim::{send_segment, write_segment, FpduStream, SplitMix64};
use mpa_stack::wire::tcp::TIMESTAMPS_OPTION_LEN;
use std::net::SocketAddrV4;

use crate::bed::options::Op;

/// Largest ULPDU of one DDP segment when unaligned (RFC 5044 MULPDU bound, minus slack).
const MAX_UNALIGNED_ULPDU: usize = 16 * 1024;

/// One flow of the pre-recorded sender and what the receiver must make of it.
pub(crate) struct FlowPlan {
    /// The datapath's id of the flow.
    pub(crate) flow_id: u64,
    /// The peer's address (our side is `super::local`).
    pub(crate) remote: SocketAddrV4,
    /// The region it writes into / its posted buffers are in (none for `count`).
    pub(crate) stag: u32,
    /// Region octets.
    pub(crate) region_len: u64,
    /// Message slots in the region (writes and receive buffers wrap around).
    pub(crate) slots: u64,
    /// Messages sent.
    pub(crate) messages: u64,
    /// Payload octets of each message.
    pub(crate) payload_len: usize,
    /// CRC32c over every ULPDU octet in order.
    pub(crate) digest: u32,
    /// FPDUs in the stream.
    pub(crate) fpdus: u64,
    /// TCP payload octets in the stream.
    pub(crate) wire_octets: u64,
}

/// One prepared frame: its octets, its flow and the messages begun by its end (for posting
/// receive buffers ahead of a burst).
pub(crate) struct Frame {
    pub(crate) bytes: Vec<u8>,
    pub(crate) flow: usize,
    pub(crate) msgs_upto: u64,
}

/// Everything the sender sends in one round, in sending order, and the flows' plans.
pub(crate) struct Prepared {
    pub(crate) flows: Vec<FlowPlan>,
    pub(crate) frames: Vec<Frame>,
    /// Frames sent twice (the first copy dropped) and frames moved later.
    pub(crate) dropped: u64,
    pub(crate) reordered: u64,
    /// Segments per flow before loss (the frames of the stream).
    pub(crate) segments: u64,
    /// The payload table messages are cut from (see [`payload`]).
    pub(crate) table: Vec<u8>,
    /// The global index of `flows[0]`: with several workers (`pipeline --workers`) each
    /// worker's flows have their own 4-tuples, STags, flow ids and payloads; 0 with one.
    pub(crate) first_flow: usize,
}

impl Prepared {
    /// ULPDU payload octets of every flow's messages (what a round places).
    pub(crate) fn payload_octets(&self) -> u64 {
        self.flows
            .iter()
            .map(|f| f.messages * f.payload_len as u64)
            .sum()
    }
}

/// Payload of message `m` of flow `f`: a window of the random table, shifted per message so
/// that a misplaced message shows.
pub(crate) fn payload(table: &[u8], len: usize, f: usize, m: u64) -> &[u8] {
    let off = ((f as u64 * 7919 + m * 131) % 4096) as usize;
    &table[off..off + len]
}

/// The header length of the op's DDP segments.
pub(crate) fn header_len(op: Op) -> usize {
    match op {
        Op::Send => UNTAGGED_HEADER_LEN,
        _ => TAGGED_HEADER_LEN,
    }
}

/// Region slots (messages) per flow: about `--region-bytes` in all, at least 256 per flow (more
/// than any reordering distance), at most the messages.
fn slots(o: &PipelineOpts, payload_len: usize, messages: u64) -> u64 {
    let per_flow = o.region_bytes / o.flows as u64 / payload_len as u64;
    per_flow.max(256).min(messages).max(1)
}

/// The peer's port of global flow 0; flow `g` has this + `g` (so at most 65,535 − this + 1
/// flows in all).
pub(crate) const FIRST_PEER_PORT: u16 = 7000;

/// Octets of a generated frame before its TCP payload: Ethernet, IPv4, TCP, and the
/// timestamps option (two NOPs and its 10 octets) when the frames carry it.
pub(crate) fn frame_header_len(timestamps: bool) -> usize {
    let options = if timestamps { TIMESTAMPS_OPTION_LEN } else { 0 };
    14 + 20 + 20 + options
}

/// The peer's TSval in its first frame (`PipelineOpts::timestamps`).
pub(crate) const PEER_TSVAL: u32 = 0x4000_0000;

/// Frames of a flow per tick of the peer's TSval: a Linux peer's TSval is a millisecond clock,
/// and a millisecond of 1448-octet segments at ~12 Gbit/s is about this many.
pub(crate) const FRAMES_PER_TSVAL_TICK: usize = 1024;

/// A segment from the peer `remote` to us, with the timestamps option when `tsval` is given.
fn frame(remote: SocketAddrV4, seq: u32, payload: &[u8], tsval: Option<u32>) -> Vec<u8> {
    let local = super::local();
    let b = PacketBuilder::ethernet2(PEER_MAC, OUR_MAC)
        .ipv4(remote.ip().octets(), local.ip().octets(), 64)
        .tcp(remote.port(), local.port(), seq, 512)
        .ack(SND_NXT);
    let b = match tsval {
        // TSecr: our clock's first value (the hand-over's `tsval`).
        Some(v) => b
            .options(&[
                TcpOptionElement::Noop,
                TcpOptionElement::Noop,
                TcpOptionElement::Timestamp(v, 1),
            ])
            .expect("the timestamps option fits"),
        None => b,
    };
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).expect("frame fits");
    v
}

/// Builds one flow's stream and cuts it into frames: (plan, frames with their messages begun).
/// `f` is the flow's index in its worker (the frames' `flow`), `g` its global index (its
/// 4-tuple, STag, flow id and payloads).
fn build_flow(
    o: &PipelineOpts,
    f: usize,
    g: usize,
    table: &[u8],
) -> Result<(FlowPlan, Vec<Frame>)> {
    let hlen = header_len(o.op);
    if o.size <= hlen {
        mpa_cli::usage!(
            "--size {} leaves no payload after the {hlen}-octet DDP header",
            o.size
        );
    }
    let payload_len = o.size - hlen;
    let total = (o.bytes / o.size as u64).max(1);
    let messages = total.div_ceil(o.flows as u64).max(1);
    let slots = slots(o, payload_len, messages);
    let stag = 0x100 + g as u32;
    let mut b = FpduStream::new(o.markers, o.aligned.then_some(o.mss));
    b.wire.reserve((messages as usize) * (o.size + 32));
    // Unaligned: DDP segments as large as MULPDU allows; TCP cuts the stream at the MSS.
    let take = |left: usize| left.min(MAX_UNALIGNED_ULPDU - hlen);
    for m in 0..messages {
        let data = payload(table, payload_len, g, m);
        let slot = m % slots;
        match o.op {
            Op::Send => {
                let msn = (m + 1) as u32;
                let header = |off: usize, last| send_segment(msn, off as u32, last);
                b.message(data, hlen, header, take)
            }
            _ => {
                let to = slot * payload_len as u64;
                let header = |off: usize, last| write_segment(stag, to + off as u64, last);
                b.message(data, hlen, header, take)
            }
        }
    }
    b.finish();
    let wire = std::mem::take(&mut b.wire);
    let ends: Vec<usize> = match o.aligned {
        true => std::mem::take(&mut b.segment_ends),
        false => (1..=wire.len().div_ceil(o.mss))
            .map(|i| (i * o.mss).min(wire.len()))
            .collect(),
    };
    let port = u16::try_from(usize::from(FIRST_PEER_PORT) + g)
        .map_err(|_| anyhow!("too many flows: {}", g + 1))?;
    let remote = SocketAddrV4::new([10, 99, 0, 1].into(), port);
    let mut frames = Vec::with_capacity(ends.len());
    let (mut start, mut msg) = (0usize, 0usize);
    for &end in &ends {
        if end - start > o.mss {
            bail!("aligned segment of {} octets exceeds the MSS", end - start);
        }
        while msg < b.message_starts.len() && b.message_starts[msg] < end {
            msg += 1;
        }
        let seq = RCV_NXT.wrapping_add(start as u32);
        let tsval = o
            .timestamps
            .then(|| PEER_TSVAL.wrapping_add((frames.len() / FRAMES_PER_TSVAL_TICK) as u32));
        frames.push(Frame {
            bytes: frame(remote, seq, &wire[start..end], tsval),
            flow: f,
            msgs_upto: msg as u64,
        });
        start = end;
    }
    let plan = FlowPlan {
        flow_id: g as u64 + 1,
        remote,
        stag,
        region_len: slots * payload_len as u64,
        slots,
        messages,
        payload_len,
        digest: b.digest,
        fpdus: b.fpdus,
        wire_octets: wire.len() as u64,
    };
    Ok((plan, frames))
}

/// Every flow's frames, round-robin, then loss (each lost frame is sent again 32–287 frames
/// later) and reordering (a frame moved 1–8 frames later), from `o.seed`.
pub(crate) fn prepare(o: &PipelineOpts) -> Result<Prepared> {
    prepare_worker(o, 0)
}

/// [`prepare`] for worker `w` of `pipeline --workers`: its `o.flows` flows are global flows
/// `w × o.flows ..`, so that no two workers share a 4-tuple, STag, flow id or payload; the
/// volume, loss and reordering are each worker's own, as if it ran alone.
pub(crate) fn prepare_worker(o: &PipelineOpts, w: usize) -> Result<Prepared> {
    let first_flow = w * o.flows;
    let mut rng = SplitMix64(o.seed);
    let table: Vec<u8> = (0..o.size + 4096).map(|_| rng.next_u64() as u8).collect();
    let mut flows = Vec::with_capacity(o.flows);
    let mut per_flow = Vec::with_capacity(o.flows);
    for f in 0..o.flows {
        let (plan, frames) = build_flow(o, f, first_flow + f, &table)?;
        flows.push(plan);
        per_flow.push(frames.into_iter());
    }
    let mut interleaved = Vec::new();
    loop {
        let before = interleaved.len();
        for it in per_flow.iter_mut() {
            interleaved.extend(it.next());
        }
        if interleaved.len() == before {
            break;
        }
    }
    let segments = interleaved.len() as u64;
    // Sort keys: position × 4 (+1 moved, +2 retransmitted), stable for equal keys.
    let (mut dropped, mut reordered) = (0, 0);
    let mut keyed: Vec<(u64, Frame)> = Vec::with_capacity(interleaved.len() + 1024);
    for (i, fr) in interleaved.into_iter().enumerate() {
        let i = i as u64;
        if rng.chance(o.loss / 100.0) {
            dropped += 1;
            keyed.push(((i + 32 + rng.below(256)) * 4 + 2, fr));
        } else if rng.chance(o.reorder / 100.0) {
            reordered += 1;
            keyed.push(((i + 1 + rng.below(8)) * 4 + 1, fr));
        } else {
            keyed.push((i * 4, fr));
        }
    }
    keyed.sort_by_key(|(k, _)| *k);
    Ok(Prepared {
        flows,
        frames: keyed.into_iter().map(|(_, f)| f).collect(),
        dropped,
        reordered,
        segments,
        table,
        first_flow,
    })
}
