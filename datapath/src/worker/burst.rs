//! One RX burst through the flows: each frame parsed in place, matched to its flow and handed
//! to it. The in-order payloads of one flow's consecutive frames form a run that is decoded
//! once the flow's frames stop coming (another flow's frame, a gathered frame, the end of the
//! burst), while every frame of the run is still in hand: an FPDU that spans segments is then
//! verified and placed from the frames themselves (docs/architecture.md, "Runs of segments").

#![forbid(unsafe_code)]

use super::Notification;
use crate::io::capture::CaptureTap;
use crate::io::chain::{ChainedFrame, RxFrame, RxFrames};
use crossbeam_channel::Sender;
use mpa::seq::SeqNumber;
use mpa_ctl_proto::stats::QueueStats;
use mpa_ctl_proto::CaptureDirection;
use mpa_stack::flow::Flow;
use mpa_stack::flow_table::FlowTable;
use mpa_stack::receiver::{reuse_slices, RegionTable, RunOctets};
use mpa_stack::wire::frame::{
    octets_in, parse_tcp_frame_in_pieces_with_payload_crcs, parse_tcp_frame_with_payload_crc,
    BatchHeader,
};
use mpa_stack::wire::tcp::{TcpFlags, TcpRepr};
use mpa_stack::wire::VlanTag;
use std::net::SocketAddr;
use std::time::Instant;

use super::strays::Strays;

type Key = (SocketAddr, SocketAddr);

/// One flow's in-order payloads of this burst not decoded yet, and its latest segments not
/// handed to the TCP yet (a [`Batch`]).
pub(super) struct Run<'f> {
    key: Option<Key>,
    octets: RunOctets<'f>,
    batch: Batch<'f>,
    /// The CRC32c of each payload piece of the chained frame being taken
    /// (`parse_tcp_frame_in_pieces_with_payload_crcs`).
    piece_crcs: Vec<Option<u32>>,
}

/// Consecutive segments of the run's flow whose headers are equal but for the sequence
/// number and PSH (`TcpRepr::continued_by`), kept until one that does not continue them (or
/// the run's end), then handed to the TCP in one update (`Flow::on_segments_in_run`), as GRO
/// merges them (docs/architecture.md, "Runs of segments").
struct Batch<'f> {
    /// The first one's header (`repr.seq_number` the first one's).
    repr: TcpRepr,
    /// Its frame's VLAN tag, which the flow matched.
    vlan: Option<VlanTag>,
    /// Its frame. A frame whose header octets are this one's but for what a follower may
    /// change continues the batch without being parsed (`BatchHeader::follower`).
    first: &'f [u8],
    /// `first`'s header octets, taken when a second frame comes (`header_taken`): a batch of
    /// one, as each message of a ping-pong is, never builds it.
    header: BatchHeader,
    header_taken: bool,
    /// Where the next one must start.
    end: SeqNumber,
    /// Their payloads; empty: no batch.
    payloads: Vec<&'f [u8]>,
    /// The CRC32c of each payload, if the parse took it.
    crcs: Vec<Option<u32>>,
    /// Their control bits (they may differ in PSH), to hand them over one by one.
    flags: Vec<TcpFlags>,
}

/// The allocations a run keeps from burst to burst (see [`reuse_run`]).
pub(super) struct RunBuffers<'f> {
    octets: RunOctets<'f>,
    payloads: Vec<&'f [u8]>,
    crcs: Vec<Option<u32>>,
    flags: Vec<TcpFlags>,
    piece_crcs: Vec<Option<u32>>,
}

impl RunBuffers<'_> {
    /// No buffer allocated yet.
    pub(super) fn new() -> Self {
        RunBuffers {
            octets: RunOctets::new(),
            payloads: Vec::new(),
            crcs: Vec::new(),
            flags: Vec::new(),
            piece_crcs: Vec::new(),
        }
    }

    /// The buffers emptied, for slices of another lifetime.
    pub(super) fn reuse<'b>(self) -> RunBuffers<'b> {
        let (mut flags, mut crcs) = (self.flags, self.crcs);
        flags.clear();
        crcs.clear();
        RunBuffers {
            octets: self.octets.reuse(),
            payloads: reuse_slices(self.payloads),
            crcs,
            flags,
            piece_crcs: self.piece_crcs,
        }
    }
}

impl<'f> Run<'f> {
    /// An empty run in `bufs`'s allocations.
    pub(super) fn new(bufs: RunBuffers<'f>) -> Self {
        Run {
            key: None,
            octets: bufs.octets,
            batch: Batch {
                repr: TcpRepr::default(),
                vlan: None,
                first: &[],
                header: BatchHeader::default(),
                header_taken: false,
                end: SeqNumber(0),
                payloads: bufs.payloads,
                crcs: bufs.crcs,
                flags: bufs.flags,
            },
            piece_crcs: bufs.piece_crcs,
        }
    }

    /// The allocations, for the next burst.
    pub(super) fn into_buffers(self) -> RunBuffers<'f> {
        RunBuffers {
            octets: self.octets,
            payloads: self.batch.payloads,
            crcs: self.batch.crcs,
            flags: self.batch.flags,
            piece_crcs: self.piece_crcs,
        }
    }

    /// Hands the batch, if any, to the run's flow: in one TCP update when the TCP can take
    /// its segments as one, else one by one.
    fn hand_batch(&mut self, now: Instant, flows: &mut FlowTable<Flow>, regions: &mut RegionTable) {
        if self.batch.payloads.is_empty() {
            return;
        }
        let b = &mut self.batch;
        if let Some(flow) = self.key.and_then(|k| flows.get_mut(&k)) {
            match (&b.payloads[..], &b.crcs[..]) {
                (&[one], &[crc]) => {
                    flow.on_segment_in_run(now, &b.repr, (one, crc), &mut self.octets, regions)
                }
                _ if flow.on_segments_in_run(
                    now,
                    &b.repr,
                    (&b.payloads, &b.crcs),
                    &mut self.octets,
                    regions,
                ) => {}
                _ => {
                    // Exactly the segments that came: the first one's header with each one's
                    // sequence number and control bits.
                    let (seq, flags) = (b.repr.seq_number, b.repr.flags);
                    let mut at = seq;
                    for ((&p, &f), &crc) in b.payloads.iter().zip(&b.flags).zip(&b.crcs) {
                        b.repr.seq_number = at;
                        b.repr.flags = f;
                        flow.on_segment_in_run(now, &b.repr, (p, crc), &mut self.octets, regions);
                        at = at + p.len();
                    }
                    (b.repr.seq_number, b.repr.flags) = (seq, flags);
                }
            }
        }
        b.payloads.clear();
        b.crcs.clear();
        b.flags.clear();
    }

    /// Hands the batch over, then decodes the run in its flow.
    fn end(&mut self, now: Instant, flows: &mut FlowTable<Flow>, regions: &mut RegionTable) {
        self.hand_batch(now, flows, regions);
        if let Some(k) = self.key.take() {
            if let Some(f) = flows.get_mut(&k) {
                f.end_run(&mut self.octets, regions);
            }
        }
        self.octets.clear();
    }
}

/// What a burst reaches of the worker.
pub(super) struct BurstCx<'w> {
    pub(super) flows: &'w mut FlowTable<Flow>,
    pub(super) touched: &'w mut Vec<Key>,
    pub(super) stats: &'w mut QueueStats,
    pub(super) verify_checksums: bool,
    pub(super) strays: &'w mut Strays,
    pub(super) notify: &'w Sender<Notification>,
    pub(super) regions: &'w mut RegionTable,
    pub(super) tap: Option<&'w mut CaptureTap>,
    pub(super) queue: u32,
    pub(super) now: Instant,
    /// Parsed into in place, frame after frame (`TcpRepr::parse_into`).
    pub(super) repr: TcpRepr,
    /// Where a chained frame the run cannot take in pieces is gathered (the worker's, kept
    /// from burst to burst).
    pub(super) gather: &'w mut Vec<u8>,
    /// `WorkerConfig::chains_in_pieces`.
    pub(super) chains_in_pieces: bool,
    /// Whether to take payload CRCs at parse (the worker's guess, updated at each flow
    /// lookup).
    pub(super) payload_crcs: &'w mut bool,
}

impl BurstCx<'_> {
    /// Every frame of the burst; `run` is empty before and after.
    pub(super) fn receive<'u>(&mut self, frames: &mut RxFrames<'u, '_>, run: &mut Run<'u>) {
        while let Some(frame) = frames.next() {
            match frame {
                RxFrame::InPlace(b) => {
                    if !self.follows(b, run) {
                        self.frame(b, Some(&mut *run));
                    }
                }
                RxFrame::Chained(c) => {
                    if !self.chained(c, run) {
                        // Gathered, and handled on its own after the run, as below.
                        run.end(self.now, self.flows, self.regions);
                        let mut gather = std::mem::take(self.gather);
                        c.gather_into(&mut gather);
                        self.frame(&gather, None);
                        *self.gather = gather;
                    }
                }
                RxFrame::Gathered(b) => {
                    // Valid only until the next frame: handled on its own, after the run.
                    run.end(self.now, self.flows, self.regions);
                    self.frame(b, None);
                }
            }
        }
        run.end(self.now, self.flows, self.regions);
    }

    /// A frame in several descriptors of this burst, taken into the run piece by piece (no
    /// copy: docs/architecture.md, "Runs of segments") when it is a well-formed, in-order
    /// segment of a known flow whose headers lie in its first descriptor. Returns false, with
    /// nothing counted or changed beyond ending another flow's run, for any other frame: the
    /// caller gathers it and takes it as one piece, which counts and reports it exactly as
    /// any frame.
    fn chained<'u>(&mut self, c: ChainedFrame<'u, '_>, run: &mut Run<'u>) -> bool {
        if !self.chains_in_pieces || self.tap.is_some() {
            // Capture records frames whole.
            return false;
        }
        let Ok((f, payload)) = parse_tcp_frame_in_pieces_with_payload_crcs(
            c.pieces(),
            self.verify_checksums,
            *self.payload_crcs,
            &mut run.piece_crcs,
        ) else {
            return false;
        };
        let key = (f.dst, f.src);
        if run.key.is_some_and(|k| k != key) {
            run.end(self.now, self.flows, self.regions);
        } else {
            run.hand_batch(self.now, self.flows, self.regions);
        }
        let Some(flow) = self.flows.get_mut(&key) else {
            return false;
        };
        *self.payload_crcs = flow.checks_crc();
        if !flow.vlan_matches(f.vlan) || self.repr.parse_into(&f.tcp).is_err() {
            return false;
        }
        let pieces = octets_in(c.pieces(), payload);
        if !flow.on_segment_in_pieces_in_run(
            self.now,
            &self.repr,
            (pieces, &run.piece_crcs),
            &mut run.octets,
            self.regions,
        ) {
            return false;
        }
        run.key = Some(key);
        if self.touched.last() != Some(&key) {
            self.touched.push(key);
        }
        true
    }

    /// Whether `frame` continues the run's open batch and joined it: the common case, the
    /// next segment of the batch, its headers those of the batch's first frame but for what a
    /// follower may change. What the parse and `TcpRepr::continued_by` would decide, without
    /// them; `false` (nothing changed) for any other frame, which goes to [`BurstCx::frame`].
    /// Apart from it, so that a follower does not pay for the parse path's setup.
    #[inline]
    fn follows<'f>(&mut self, frame: &'f [u8], run: &mut Run<'f>) -> bool {
        let b = &mut run.batch;
        if b.payloads.is_empty() {
            return false;
        }
        if !b.header_taken {
            b.header.take(b.first);
            b.header_taken = true;
        }
        match b
            .header
            .follower(frame, self.verify_checksums, *self.payload_crcs)
        {
            Some(f) if f.seq_number == b.end => {
                b.payloads.push(f.payload);
                b.crcs.push(f.payload_crc);
                b.flags.push(f.flags);
                b.end = b.end + f.payload.len();
                true
            }
            _ => false,
        }
    }

    /// One frame; `run`: it stays in hand until the run ends.
    fn frame<'f>(&mut self, frame: &'f [u8], run: Option<&mut Run<'f>>) {
        let parsed =
            parse_tcp_frame_with_payload_crc(frame, self.verify_checksums, *self.payload_crcs);
        let f = match parsed {
            Ok(f) => f,
            Err(_) => {
                self.stats.malformed += 1;
                if let Some(t) = self.tap.as_mut().filter(|t| t.all()) {
                    t.push(CaptureDirection::Rx, frame, false);
                }
                return;
            }
        };
        let key = (f.dst, f.src);
        let mut run = run;
        let mut parsed = false;
        if let Some(r) = run.as_deref_mut() {
            if r.key.is_some_and(|k| k != key) {
                // Another flow's frame: the run so far is decoded first (a run is one flow's).
                r.end(self.now, self.flows, self.regions);
            } else if !r.batch.payloads.is_empty() {
                parsed = self.repr.parse_into(&f.tcp).is_ok();
                let payload = f.tcp.payload_in_buffer();
                let b = &mut r.batch;
                if parsed
                    && f.vlan == b.vlan
                    && b.repr.continued_by(b.end, &self.repr, payload.len())
                {
                    b.payloads.push(payload);
                    b.crcs.push(f.payload_crc);
                    b.flags.push(self.repr.flags);
                    b.end = b.end + payload.len();
                    return;
                }
                r.hand_batch(self.now, self.flows, self.regions);
            }
        }
        let Some(flow) = self.flows.get_mut(&key) else {
            // XDP steered it here, so some worker owns it: ask for it once.
            self.stats.unknown_flow += 1;
            if let Some(t) = self.tap.as_mut().filter(|t| t.all()) {
                t.push(CaptureDirection::Rx, frame, false);
            }
            // Asked for when first seen and again at most once per interval: the flow may not
            // have been handed over yet when the first one came.
            if self.strays.on_frame(key, frame, self.now) {
                let _ = self.notify.send(Notification::Stray {
                    queue: self.queue,
                    local: key.0,
                    remote: key.1,
                });
            }
            return;
        };
        *self.payload_crcs = flow.checks_crc();
        if let Some(t) = self.tap.as_mut().filter(|t| t.wants(flow.id)) {
            t.push(CaptureDirection::Rx, frame, false);
        }
        if !flow.vlan_matches(f.vlan) {
            self.stats.wrong_vlan += 1;
            return;
        }
        if !parsed && self.repr.parse_into(&f.tcp).is_err() {
            self.stats.malformed += 1;
            return;
        }
        let payload = f.tcp.payload_in_buffer();
        match run {
            Some(r) => {
                if self.tap.is_none()
                    && self.repr.takes_followers(payload.len())
                    && flow.expects(self.repr.seq_number)
                {
                    // The first of a batch (capture records each frame as it is handled).
                    let b = &mut r.batch;
                    std::mem::swap(&mut self.repr, &mut b.repr);
                    b.vlan = f.vlan;
                    (b.first, b.header_taken) = (frame, false);
                    b.end = b.repr.seq_number + payload.len();
                    b.payloads.push(payload);
                    b.crcs.push(f.payload_crc);
                    b.flags.push(b.repr.flags);
                } else {
                    flow.on_segment_in_run(
                        self.now,
                        &self.repr,
                        (payload, f.payload_crc),
                        &mut r.octets,
                        self.regions,
                    );
                }
                r.key = Some(key);
            }
            None => flow.on_segment(self.now, &self.repr, payload, self.regions),
        }
        if self.touched.last() != Some(&key) {
            self.touched.push(key);
        }
    }
}
