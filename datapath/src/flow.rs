//! One handed-over MPA connection inside a worker: its TCP, its MPA receiver, and what it
//! sends (the accepting Reply, ACKs, a Terminate on error).

use crate::placement::{
    PlacementError, Placer, PostedBuf, RegionTable, SegmentKind, SegmentPlan, PLAN_PREFIX,
};
use crate::tcp::{Connection, Event, HandoverState, PlacedSpans, TcpConfig, TsHandover};
use crate::wire::frame::FrameTemplate;
use crate::wire::tcp::TcpRepr;
use mpa::crc::{crc32c_append, crc32c_combine};
use mpa::decoder::{DecodeError, FpduDecoder, Ulpdu};
use mpa::encoder::FpduEncoder;
use mpa::endpoint::rtr_ulpdu;
use mpa::locator::{FpduLocator, LocatedFpdu};
use mpa::markers::MarkerGrid;
use mpa::seq::SeqNumber;
use mpa::startup::RtrType;
use mpa::wire::ddp::{
    self, terminate_ulpdu, terminate_ulpdu_for_segment, DdpRepr, RdmapOpcode, TerminateRepr,
};
use mpa::MpaErrorCode;
use mpa_ctl_proto::{Completion, HandOver, Role, TerminateInfo};
use serde_json::json;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// FPDUs placed out of order and not yet completed in order, per flow.
pub const MAX_PLACED_AHEAD: usize = 4096;

/// Why a hand-over could not become a flow.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    /// The TCP state is not usable.
    #[error("TCP state: {0}")]
    Tcp(#[from] crate::tcp::TcpError),
    /// Addresses or MACs are not usable.
    #[error("frame template: {0}")]
    Frame(#[from] crate::wire::frame::FrameError),
    /// Something else in the hand-over is wrong.
    #[error("hand-over: {0}")]
    Invalid(String),
}

/// Counters of one flow (MPA side; TCP keeps its own).
#[derive(Debug, Clone, Copy, Default)]
pub struct FlowStats {
    /// Frames received for this flow.
    pub packets: u64,
    /// FPDUs delivered.
    pub fpdus: u64,
    /// ULPDU octets delivered.
    pub ulpdu_octets: u64,
    /// CRC errors (error 2).
    pub crc_errors: u64,
    /// Marker errors (error 3).
    pub marker_errors: u64,
    /// Frames sent.
    pub frames_sent: u64,
    /// FPDUs placed straight from an out-of-order segment (marker-guided).
    pub placed_direct: u64,
    /// FPDUs placed when they arrived in order.
    pub placed_in_order: u64,
    /// FPDUs placed from the reassembly store once a hole filled.
    pub placed_from_store: u64,
    /// Out-of-order FPDU candidates the locator dropped (CRC or marker check failed).
    pub located_rejected: u64,
    /// Payload octets copied into regions.
    pub placed_octets: u64,
    /// Completions produced.
    pub completions: u64,
}

/// How a flow ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowEnd {
    /// The MPA error code (RFC 5044 §8), `None` for a clean close.
    pub mpa_error: Option<u8>,
    /// Why, in words.
    pub reason: String,
    /// The Terminate that ended it (sent by us or by the peer).
    pub terminate: Option<TerminateInfo>,
}

/// One connection.
pub struct Flow {
    /// The datapath's id.
    pub id: u64,
    tcp: Connection,
    template: FrameTemplate,
    decoder: FpduDecoder,
    encoder: FpduEncoder,
    version: u8,
    /// RFC 5044 §7.1.2: a Responder sends no FPDU before one arrived; RFC 6581: the first must
    /// be one of these RTRs (empty: any FPDU).
    expect_first: Option<Vec<String>>,
    digest: Option<u32>,
    stats: FlowStats,
    rx: RxPlacement,
    ending: Option<FlowEnd>,
    ended: Option<FlowEnd>,
    /// When the flow started, for reports.
    pub started: Instant,
}

/// Converts a CLOCK_MONOTONIC reading into an `Instant` (both use the same clock on Linux).
fn instant_of_monotonic(ns: u64, now: Instant) -> Instant {
    let now_ns = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(ns);
    now.checked_sub(Duration::from_nanos(now_ns.saturating_sub(ns)))
        .unwrap_or(now)
}

impl Flow {
    /// Builds the flow from a hand-over; `our_mac` is the interface's address. A Responder's
    /// accepting Reply is queued at once (TCP retransmits it until acknowledged); so is a
    /// peer-to-peer Initiator's RTR indication, its first FPDU.
    pub fn new(
        h: &HandOver,
        our_mac: [u8; 6],
        cfg: &TcpConfig,
        digest: bool,
        now: Instant,
    ) -> Result<Flow, FlowError> {
        let t = &h.tcp;
        let ts = t.timestamps.map(|ts| TsHandover {
            tsval_at_freeze: ts.tsval,
            freeze_instant: instant_of_monotonic(ts.monotonic_ns, now),
            ts_recent: ts.ts_recent,
        });
        let state = HandoverState {
            local_port: t.local.port(),
            remote_port: t.remote.port(),
            snd_nxt: mpa::SeqNumber(t.snd_nxt),
            rcv_nxt: mpa::SeqNumber(t.rcv_nxt),
            snd_wnd: t.snd_wnd,
            rcv_wnd: t.rcv_wnd,
            rcv_wup: mpa::SeqNumber(t.rcv_wup),
            snd_wscale: t.snd_wscale.unwrap_or(0),
            rcv_wscale: t.rcv_wscale.unwrap_or(0),
            mss: t.mss,
            sack_permitted: t.sack_permitted,
            timestamps: ts,
        };
        let mut tcp = Connection::new(&state, cfg, now)?;
        let template = FrameTemplate::new(our_mac, h.next_hop_mac, t.local, t.remote)?;
        let m = &h.mpa;
        let mut encoder = FpduEncoder::new(m.markers_tx);
        let expect_first = match m.role {
            Role::Responder => {
                if m.reply_frame.is_empty() {
                    return Err(FlowError::Invalid(
                        "Responder hand-over without a Reply".into(),
                    ));
                }
                if tcp.send(&m.reply_frame) != m.reply_frame.len() {
                    return Err(FlowError::Invalid(
                        "Reply does not fit the send buffer".into(),
                    ));
                }
                Some(m.rtr.clone())
            }
            Role::Initiator => {
                if !m.reply_frame.is_empty() {
                    return Err(FlowError::Invalid(
                        "Initiator hand-over with a Reply frame".into(),
                    ));
                }
                match m.rtr.as_slice() {
                    // Not peer-to-peer: the ULP's first FPDU comes later.
                    [] => {}
                    // RFC 6581 §9.2: the negotiated RTR is the very first FPDU, framed as
                    // agreed (markers toward the peer if it asked for them).
                    [name] => {
                        let rtr = parse_rtr(name).ok_or_else(|| {
                            FlowError::Invalid(format!("unknown RTR indication {name:?}"))
                        })?;
                        let mut wire = Vec::new();
                        encoder
                            .encode(&rtr_ulpdu(rtr, m.ddp_rdmap_version), &mut wire)
                            .map_err(|e| FlowError::Invalid(format!("RTR FPDU: {e}")))?;
                        if tcp.send(&wire) != wire.len() {
                            return Err(FlowError::Invalid(
                                "RTR does not fit the send buffer".into(),
                            ));
                        }
                    }
                    more => {
                        return Err(FlowError::Invalid(format!(
                            "an Initiator sends one RTR indication, not {more:?}"
                        )))
                    }
                }
                None
            }
        };
        let rx = RxPlacement {
            flow_id: h.flow_id,
            placer: m.pd.map(|pd| Placer::new(pd, m.ddp_rdmap_version)),
            locator: FpduLocator::new(MarkerGrid::new(SeqNumber(t.rcv_nxt), m.markers_rx), m.crc)
                .with_aligned_sender(m.aligned_sender && m.crc),
            locatable: m.markers_rx || (m.aligned_sender && m.crc),
            ahead: VecDeque::new(),
            rx_seq: SeqNumber(t.rcv_nxt),
            skip_left: 0,
            completions: Vec::new(),
            located: Vec::new(),
        };
        Ok(Flow {
            id: h.flow_id,
            rx,
            tcp,
            template,
            decoder: FpduDecoder::new(m.markers_rx, m.crc),
            encoder,
            version: m.ddp_rdmap_version,
            expect_first,
            digest: digest.then_some(0),
            stats: FlowStats::default(),
            ending: None,
            ended: None,
            started: now,
        })
    }

    /// Handles one TCP segment of this flow; `regions` is the worker's region table.
    pub fn on_segment(
        &mut self,
        now: Instant,
        repr: &TcpRepr,
        payload: &[u8],
        regions: &RegionTable,
    ) {
        self.stats.packets += 1;
        let Flow {
            tcp,
            decoder,
            expect_first,
            digest,
            stats,
            version,
            rx,
            ..
        } = self;
        // Out-of-order octets: with markers toward us, every FPDU wholly inside the segment
        // whose CRC and placement checks pass is placed now (DESIGN.md).
        let out = if rx.can_place_ahead(decoder, expect_first) {
            let digest = digest.is_some();
            tcp.handle_segment_placing(now, repr, payload, &mut |seq, data, spans| {
                rx.place_ahead(seq, data, spans, regions, stats, digest)
            })
        } else {
            tcp.handle_segment(now, repr, payload)
        };
        let in_order = payload.get(out.in_order).unwrap_or(&[]);
        let mut mrx = MpaRx {
            decoder,
            read_response: None,
            expect_first,
            digest,
            stats,
            version: *version,
            failure: None,
            rx,
            regions,
        };
        mrx.consume(in_order, false);
        if out.reassembled > 0 {
            tcp.drain_reassembled(|b| mrx.consume(b, true));
        }
        let (failure, read_response) = (mrx.failure.take(), mrx.read_response);
        match failure {
            Some(RxFailure::Mpa(code)) => self.fail(code),
            Some(RxFailure::Placement { error, head, len }) => {
                self.fail_placement(error, &head, len)
            }
            Some(RxFailure::PeerTerminate(t)) => self.peer_terminated(t),
            None => {
                if let Some((stag, to)) = read_response {
                    self.answer_read_rtr(stag, to);
                }
            }
        }
    }

    /// A zero-length Read Request RTR is answered by a zero-length Read Response (RFC 6581
    /// §9.2, RFC 5040 §5.2): our first FPDU, allowed now that one arrived.
    fn answer_read_rtr(&mut self, stag: u32, to: u64) {
        let resp = DdpRepr::Tagged {
            last: true,
            opcode: RdmapOpcode::RdmaReadResponse,
            stag,
            to,
        };
        let mut h = [0u8; ddp::TAGGED_HEADER_LEN];
        let mut wire = Vec::new();
        if resp.emit(&mut h, self.version).is_some() && self.encoder.encode(&h, &mut wire).is_ok() {
            self.tcp.send(&wire);
        }
    }

    /// Posts receive buffers for the peer's Sends.
    pub fn post_recv(&mut self, bufs: &[PostedBuf]) -> Result<(), String> {
        match self.rx.placer.as_mut() {
            Some(p) => p.post(bufs.iter().copied()),
            None => Err(format!(
                "flow {} has no protection domain: it does not place",
                self.id
            )),
        }
    }

    /// The flow's protection domain.
    pub fn pd(&self) -> Option<u32> {
        self.rx.placer.as_ref().map(Placer::pd)
    }

    /// Moves the completions produced since the last call (in order) to the end of `out`.
    pub fn drain_completions_into(&mut self, out: &mut Vec<Completion>) {
        out.append(&mut self.rx.completions);
    }

    /// Whether completions are waiting.
    pub fn has_completions(&self) -> bool {
        !self.rx.completions.is_empty()
    }

    /// Ends the connection with an MPA error: a Terminate (layer 2, type 0) goes out as an
    /// FPDU, then our FIN (RFC 5044 §8: the ULP — us — sends the Terminate, then closes).
    fn fail(&mut self, code: MpaErrorCode) {
        let t = terminate_ulpdu(code, 1, self.version);
        let info = TerminateRepr::mpa(code);
        self.terminate_and_close(&t, info, Some(code.code()), code.to_string());
    }

    /// Ends the connection for a placement violation: a Terminate that carries the offending
    /// segment's DDP header (RFC 5040 §7, Figure 10), then our FIN.
    fn fail_placement(&mut self, e: PlacementError, head: &[u8], seg_len: usize) {
        let t = terminate_ulpdu_for_segment(e.terminate, 1, self.version, seg_len, head);
        self.terminate_and_close(&t, e.terminate, None, e.reason);
    }

    fn terminate_and_close(
        &mut self,
        ulpdu: &[u8],
        t: TerminateRepr,
        mpa_error: Option<u8>,
        reason: String,
    ) {
        if self.ending.is_some() || self.ended.is_some() {
            return;
        }
        let mut wire = Vec::new();
        if self.encoder.encode(ulpdu, &mut wire).is_ok() {
            self.tcp.send(&wire);
        }
        self.tcp.close();
        tracing::info!(flow = self.id, layer = t.layer, error_type = t.error_type, code = t.error_code, %reason, "Terminate sent");
        self.ending = Some(FlowEnd {
            mpa_error,
            reason,
            terminate: Some(TerminateInfo {
                layer: t.layer,
                error_type: t.error_type,
                error_code: t.error_code,
                sent: true,
            }),
        });
    }

    /// The peer sent a Terminate: nothing more is placed; we close.
    fn peer_terminated(&mut self, t: TerminateRepr) {
        if self.ending.is_some() || self.ended.is_some() {
            return;
        }
        self.tcp.close();
        self.ending = Some(FlowEnd {
            mpa_error: None,
            reason: format!(
                "the peer sent a Terminate (layer {}, type {}, code {:#04x})",
                t.layer, t.error_type, t.error_code
            ),
            terminate: Some(TerminateInfo {
                layer: t.layer,
                error_type: t.error_type,
                error_code: t.error_code,
                sent: false,
            }),
        });
    }

    /// Called at the end of each RX burst that touched this flow.
    pub fn end_of_burst(&mut self, now: Instant) {
        self.tcp.end_of_burst(now);
    }

    /// Runs timers due at `now`.
    pub fn on_timer(&mut self, now: Instant) {
        if self.tcp.poll_timeout().is_some_and(|t| t <= now) {
            self.tcp.handle_timeout(now);
        }
    }

    /// When the flow next needs [`Flow::on_timer`].
    pub fn next_timeout(&self) -> Option<Instant> {
        self.tcp.poll_timeout()
    }

    /// Builds every frame due now into `scratch` and hands each to `send`.
    pub fn poll_frames(&mut self, now: Instant, scratch: &mut [u8], mut send: impl FnMut(&[u8])) {
        let l = self.template.l2l3_len();
        while let Some(tx) = scratch
            .get_mut(l..)
            .and_then(|b| self.tcp.poll_transmit(now, b))
        {
            match self
                .template
                .finish(scratch, tx.header_len + tx.payload_len)
            {
                Ok(n) => {
                    self.stats.frames_sent += 1;
                    send(&scratch[..n]);
                }
                Err(e) => tracing::error!(flow = self.id, %e, "cannot build frame"),
            }
        }
        self.poll_events();
    }

    fn poll_events(&mut self) {
        while let Some(ev) = self.tcp.poll_event() {
            match ev {
                Event::PeerClosed => {
                    // The peer finished sending: close our side too. An FPDU cut short by the
                    // FIN is error 1.
                    if self.decoder.buffered() > 0 && self.ending.is_none() {
                        self.ending = Some(FlowEnd {
                            mpa_error: Some(MpaErrorCode::TcpClosed.code()),
                            reason: "peer closed inside an FPDU".into(),
                            terminate: None,
                        });
                    }
                    self.tcp.close();
                }
                Event::Reset => {
                    let reason = "connection reset by the peer".to_string();
                    self.finish(Some(MpaErrorCode::TcpClosed.code()), reason);
                }
                Event::Failed(e) => {
                    self.finish(Some(MpaErrorCode::TcpClosed.code()), format!("TCP: {e}"));
                }
                Event::Closed => {
                    let end = self.ending.take().unwrap_or(FlowEnd {
                        mpa_error: None,
                        reason: "closed".to_string(),
                        terminate: None,
                    });
                    self.finish_with(end);
                }
            }
        }
    }

    fn finish(&mut self, mpa_error: Option<u8>, reason: String) {
        self.finish_with(FlowEnd {
            mpa_error,
            reason,
            terminate: None,
        });
    }

    fn finish_with(&mut self, end: FlowEnd) {
        if self.ended.is_none() {
            // An earlier MPA error or Terminate wins over the TCP close it caused.
            let end = match self.ending.take() {
                Some(e) if e.mpa_error.is_some() || e.terminate.is_some() => e,
                _ => end,
            };
            self.ended = Some(end);
        }
    }

    /// How the flow ended, once it has.
    pub fn ended(&self) -> Option<&FlowEnd> {
        self.ended.as_ref()
    }

    /// Forgets the connection at once (operator close): RST to the peer.
    pub fn abort(&mut self) {
        self.tcp.abort();
        self.finish(None, "closed by the operator".into());
    }

    /// Counters and state as JSON.
    pub fn stats_json(&self) -> serde_json::Value {
        let t = self.tcp.stats();
        json!({
            "flow_id": self.id,
            "state": format!("{:?}", self.tcp.state()),
            "packets": self.stats.packets,
            "octets": t.octets_in,
            "fpdus": self.stats.fpdus,
            "ulpdu_octets": self.stats.ulpdu_octets,
            "crc_errors": self.stats.crc_errors,
            "marker_errors": self.stats.marker_errors,
            "out_of_order_segments": t.ooo_segs,
            "duplicates": t.dup_full + t.dup_partial,
            "sack_blocks_sent": t.sack_blocks_sent,
            "acks_sent": t.acks_sent,
            "retransmissions": t.retransmissions,
            "frames_sent": self.stats.frames_sent,
            "octets_out": t.octets_out,
            "ulpdu_digest": self.digest.map(|d| format!("{d:08x}")),
            "pd": self.pd(),
            "placed_direct": self.stats.placed_direct,
            "placed_in_order": self.stats.placed_in_order,
            "placed_from_store": self.stats.placed_from_store,
            "placed_octets": self.stats.placed_octets,
            "located_rejected": self.stats.located_rejected,
            "placed_ahead_waiting": self.rx.ahead.len(),
            "completions": self.stats.completions,
            "posted_buffers": self.rx.placer.as_ref().map(Placer::posted),
            "store_high_water": t.store_high_water,
            "dropped_reassembly_full": t.dropped.reassembly_full,
            "dropped_out_of_window": t.dropped.out_of_window,
            "ended": self.ended.as_ref().map(|e| json!({"mpa_error": e.mpa_error, "reason": e.reason, "terminate": e.terminate})),
        })
    }
}

/// An FPDU placed out of order, waiting for the in-order stream to reach it.
#[derive(Debug, Clone, Copy)]
struct PlacedAhead {
    /// Sequence number of its first wire octet.
    start: SeqNumber,
    /// Its wire length (markers included).
    wire_len: usize,
    /// What it was, for its in-order completion.
    plan: SegmentPlan,
    /// CRC32c of its ULPDU octets (for the flow digest, joined in order; 0 without one).
    ulpdu_crc: u32,
    /// ULPDU octets.
    ulpdu_len: usize,
}

/// The receive placement state of a flow.
struct RxPlacement {
    flow_id: u64,
    /// `None` without a protection domain: payloads are only counted (and digested).
    placer: Option<Placer>,
    locator: FpduLocator,
    /// Out-of-order segments can be parsed alone: markers toward us, or an aligned sender
    /// and CRCs (header at segment start, verified by CRC).
    locatable: bool,
    /// FPDUs placed ahead of the in-order stream, sorted by sequence, bounded.
    ahead: VecDeque<PlacedAhead>,
    /// Sequence number of the next octet the in-order stream consumes.
    rx_seq: SeqNumber,
    /// Octets still to step over (the rest of an FPDU placed ahead).
    skip_left: usize,
    completions: Vec<Completion>,
    located: Vec<LocatedFpdu>,
}

impl RxPlacement {
    /// Placement ahead of the stream needs markers (or an aligned sender and CRCs), a domain,
    /// the first FPDU (the RTR) seen, and no error.
    fn can_place_ahead(&self, decoder: &FpduDecoder, expect_first: &Option<Vec<String>>) -> bool {
        self.locatable
            && self.placer.is_some()
            && expect_first.is_none()
            && decoder.error().is_none()
            && self.ahead.len() < MAX_PLACED_AHEAD
    }

    /// Advances the in-order placement state past `plan` (placed now or ahead) and queues
    /// the completion it produces.
    fn complete(&mut self, plan: &SegmentPlan, stats: &mut FlowStats) {
        if let Some(placer) = self.placer.as_mut() {
            if let Some(c) = placer.complete(plan, self.flow_id) {
                stats.completions += 1;
                self.completions.push(c);
            }
        }
    }

    /// Offset of `seq` above the in-order point (entries and segments ahead are within
    /// the receive window, far below 2^31).
    fn ahead_of(&self, seq: SeqNumber) -> u32 {
        seq.distance_from(self.rx_seq)
    }

    /// The out-of-order octets `data` at `seq`: places every FPDU wholly inside that the
    /// locator verifies and the placement checks accept, and reports them in `spans` so the
    /// TCP store does not copy them. Anything doubtful is left to the in-order path, which
    /// reports errors precisely.
    fn place_ahead(
        &mut self,
        seq: SeqNumber,
        data: &[u8],
        spans: &mut PlacedSpans,
        regions: &RegionTable,
        stats: &mut FlowStats,
        digest: bool,
    ) {
        let Some(placer) = self.placer.as_ref() else {
            return;
        };
        self.located.clear();
        let ls = self.locator.locate(seq, data, &mut self.located);
        stats.located_rejected += u64::from(ls.crc_failures + ls.marker_mismatches);
        for i in 0..self.located.len() {
            if !spans.has_room() || self.ahead.len() >= MAX_PLACED_AHEAD {
                break;
            }
            let f = self.located[i].clone();
            let key = self.ahead_of(f.seq);
            if key >= 1 << 30 {
                continue;
            }
            let end = key as usize + f.range.len();
            // Sorted insert; an exact duplicate (retransmission) is not placed twice.
            let at = self.ahead.partition_point(|p| self.ahead_of(p.start) < key);
            if let Some(p) = self.ahead.get(at) {
                if p.start == f.seq && p.wire_len == f.range.len() {
                    spans.push(f.range.clone());
                    continue;
                }
                if (self.ahead_of(p.start) as usize) < end {
                    continue;
                }
            }
            if at > 0 {
                let p = &self.ahead[at - 1];
                if self.ahead_of(p.start) as usize + p.wire_len > key as usize {
                    continue;
                }
            }
            let Some(u) = f.ulpdu(self.locator.grid(), data) else {
                continue;
            };
            let mut head = [0u8; PLAN_PREFIX];
            let n = u.copy_prefix(&mut head);
            let Ok(plan) = placer.plan(regions, &head[..n], u.len(), false) else {
                continue;
            };
            if matches!(plan.kind, SegmentKind::PeerTerminate(_)) {
                continue;
            }
            if plan.target.is_some() && !Placer::place(regions, &plan, &u) {
                continue;
            }
            // The ULPDU's CRC only serves the flow digest (the FPDU CRC was checked).
            let mut crc = 0u32;
            if digest {
                for p in u.pieces() {
                    crc = crc32c_append(crc, p);
                }
            }
            if !spans.push(f.range.clone()) {
                continue;
            }
            stats.placed_direct += 1;
            stats.placed_octets += plan.payload_len as u64;
            self.ahead.insert(
                at,
                PlacedAhead {
                    start: f.seq,
                    wire_len: f.range.len(),
                    plan,
                    ulpdu_crc: crc,
                    ulpdu_len: u.len(),
                },
            );
        }
    }
}

/// Why in-order receive processing stopped.
enum RxFailure {
    /// An MPA error (2 or 3): Terminate at layer 2.
    Mpa(MpaErrorCode),
    /// A placement violation: Terminate with the segment's DDP header.
    Placement {
        error: PlacementError,
        head: [u8; PLAN_PREFIX],
        len: usize,
    },
    /// The peer terminated.
    PeerTerminate(TerminateRepr),
}

/// The MPA receive side over in-order octets.
struct MpaRx<'a> {
    decoder: &'a mut FpduDecoder,
    /// Set by a zero-length Read Request RTR: (sink STag, sink TO) to answer.
    read_response: Option<(u32, u64)>,
    expect_first: &'a mut Option<Vec<String>>,
    digest: &'a mut Option<u32>,
    stats: &'a mut FlowStats,
    version: u8,
    failure: Option<RxFailure>,
    rx: &'a mut RxPlacement,
    regions: &'a RegionTable,
}

impl MpaRx<'_> {
    /// The next in-order octets (`from_store`: drained from the reassembly store). FPDUs
    /// placed ahead are stepped over and only completed.
    fn consume(&mut self, mut bytes: &[u8], from_store: bool) {
        while !bytes.is_empty() && self.failure.is_none() {
            if self.rx.skip_left > 0 {
                let n = self.rx.skip_left.min(bytes.len());
                self.rx.skip_left -= n;
                self.rx.rx_seq = self.rx.rx_seq + n;
                bytes = &bytes[n..];
                continue;
            }
            // Entries the stream already passed cannot be reached any more (defence).
            while let Some(p) = self.rx.ahead.front() {
                if self.rx.ahead_of(p.start) >= 1 << 30 {
                    self.rx.ahead.pop_front();
                } else {
                    break;
                }
            }
            let cut = self
                .rx
                .ahead
                .front()
                .map(|p| self.rx.ahead_of(p.start) as usize)
                .filter(|&d| d < bytes.len());
            let Some(d) = cut else {
                self.decode(bytes, from_store);
                self.rx.rx_seq = self.rx.rx_seq + bytes.len();
                return;
            };
            self.decode(&bytes[..d], from_store);
            self.rx.rx_seq = self.rx.rx_seq + d;
            bytes = &bytes[d..];
            if self.failure.is_some() {
                return;
            }
            let Some(p) = self.rx.ahead.pop_front() else {
                return;
            };
            if let Err(e) = self.decoder.skip_verified(p.wire_len) {
                self.stats.marker_errors += 1;
                self.failure = Some(RxFailure::Mpa(e.code()));
                return;
            }
            self.stats.fpdus += 1;
            self.stats.ulpdu_octets += p.ulpdu_len as u64;
            if let Some(d) = self.digest.as_mut() {
                *d = crc32c_combine(*d, p.ulpdu_crc, p.ulpdu_len as u64);
            }
            self.rx.complete(&p.plan, self.stats);
            self.rx.skip_left = p.wire_len;
        }
    }

    /// In-order octets through the FPDU decoder.
    fn decode(&mut self, bytes: &[u8], from_store: bool) {
        if self.failure.is_some() || bytes.is_empty() {
            return;
        }
        let mut chunk = self.decoder.feed(bytes);
        while let Some(r) = chunk.next_ulpdu() {
            match r {
                Ok(u) => {
                    if let Some(rtrs) = self.expect_first.take() {
                        if !rtrs.is_empty() {
                            // RFC 6581 §9.2: the first FPDU is a negotiated RTR, not data.
                            let mut head =
                                [0u8; ddp::UNTAGGED_HEADER_LEN + ddp::READ_REQUEST_HEADER_LEN];
                            let n = u.copy_prefix(&mut head);
                            match rtr_of(&head[..n], u.len(), self.version, &rtrs) {
                                None => {
                                    self.failure =
                                        Some(RxFailure::Mpa(MpaErrorCode::NoMatchingRtr));
                                    break;
                                }
                                Some(RtrType::ZeroLengthReadRequest) => {
                                    // RFC 5040 §4.4: sink STag and sink TO follow the DDP
                                    // header; the zero-length Read Response goes there.
                                    let h = &head[ddp::UNTAGGED_HEADER_LEN..];
                                    let stag = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
                                    let to = u64::from_be_bytes([
                                        h[4], h[5], h[6], h[7], h[8], h[9], h[10], h[11],
                                    ]);
                                    self.read_response = Some((stag, to));
                                }
                                Some(_) => {}
                            }
                            continue;
                        }
                    }
                    if let Some(placer) = self.rx.placer.as_ref() {
                        let mut head = [0u8; PLAN_PREFIX];
                        let n = u.copy_prefix(&mut head);
                        let plan = match placer.plan(self.regions, &head[..n], u.len(), true) {
                            Ok(p) => p,
                            Err(error) => {
                                self.failure = Some(RxFailure::Placement {
                                    error,
                                    head,
                                    len: u.len(),
                                });
                                break;
                            }
                        };
                        if let SegmentKind::PeerTerminate(t) = plan.kind {
                            self.failure = Some(RxFailure::PeerTerminate(t));
                            break;
                        }
                        if Placer::place(self.regions, &plan, &u) {
                            self.stats.placed_octets += plan.payload_len as u64;
                        }
                        if from_store {
                            self.stats.placed_from_store += 1;
                        } else {
                            self.stats.placed_in_order += 1;
                        }
                        self.rx.complete(&plan, self.stats);
                    }
                    self.stats.fpdus += 1;
                    self.stats.ulpdu_octets += u.len() as u64;
                    digest_ulpdu(self.digest, &u);
                }
                Err(e) => {
                    match e {
                        DecodeError::Crc { .. } => self.stats.crc_errors += 1,
                        DecodeError::Marker { .. } | DecodeError::Misframed { .. } => {
                            self.stats.marker_errors += 1
                        }
                        DecodeError::Abandoned => {}
                    }
                    self.failure = Some(RxFailure::Mpa(e.code()));
                    break;
                }
            }
        }
        while chunk.next_ulpdu().is_some() {}
    }
}

fn digest_ulpdu(digest: &mut Option<u32>, u: &Ulpdu<'_>) {
    if let Some(d) = digest.as_mut() {
        for p in u.pieces() {
            *d = crc32c_append(*d, p);
        }
    }
}

fn rtr_of(head: &[u8], len: usize, version: u8, allowed: &[String]) -> Option<RtrType> {
    // The hand-over names the accepted RTRs as `RtrType`'s Debug form.
    mpa::endpoint::classify_rtr(head, len, version)
        .filter(|rtr| allowed.iter().any(|a| *a == format!("{rtr:?}")))
}

/// An RTR indication from its hand-over name (`RtrType`'s Debug form; case and surrounding
/// blanks do not matter).
fn parse_rtr(name: &str) -> Option<RtrType> {
    let name = name.trim();
    RtrType::ALL
        .into_iter()
        .find(|r| format!("{r:?}").eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpa_ctl_proto::{MpaParams, TcpSnapshot};

    fn handover(rtr: &[&str], markers_tx: bool) -> HandOver {
        HandOver {
            flow_id: 3,
            tcp: TcpSnapshot {
                local: "10.99.0.2:40000".parse().unwrap(),
                remote: "10.99.0.1:7777".parse().unwrap(),
                snd_nxt: 1000,
                rcv_nxt: 5000,
                snd_wl1: 4999,
                snd_wnd: 65535,
                max_window: 65535,
                rcv_wnd: 65535,
                rcv_wup: 5000,
                mss: 1460,
                rcv_wscale: Some(7),
                snd_wscale: Some(7),
                sack_permitted: true,
                timestamps: None,
                send_queue: vec![],
                recv_queue: vec![],
            },
            mpa: MpaParams {
                role: Role::Initiator,
                rev: 2,
                markers_rx: false,
                markers_tx,
                crc: true,
                ddp_rdmap_version: 1,
                reply_frame: vec![],
                rtr: rtr.iter().map(|s| s.to_string()).collect(),
                pd: None,
                aligned_sender: false,
                request_frame: vec![],
                received_reply_frame: vec![],
            },
            next_hop_mac: [2, 0, 0, 0, 0, 1],
        }
    }

    /// Every payload the flow sends at creation.
    fn sent(h: &HandOver) -> Result<Vec<Vec<u8>>, FlowError> {
        let now = Instant::now();
        let mut f = Flow::new(h, [2, 0, 0, 0, 0, 2], &TcpConfig::default(), false, now)?;
        let mut scratch = vec![0u8; 2048];
        let mut frames = Vec::new();
        f.poll_frames(now, &mut scratch, |b| frames.push(b.to_vec()));
        let octets = f.stats_json()["octets_out"].as_u64().unwrap() as usize;
        // The payload is the tail of each frame (IPv4 without options, frames over 60 octets).
        Ok(frames
            .into_iter()
            .map(|fr| fr[fr.len() - octets.min(fr.len())..].to_vec())
            .filter(|p| octets > 0 && !p.is_empty())
            .collect())
    }

    #[test]
    fn initiator_sends_the_rtr_first_framed_as_agreed() {
        for (name, rtr) in [
            ("ZeroLengthSend", RtrType::ZeroLengthSend),
            ("ZeroLengthWrite", RtrType::ZeroLengthWrite),
            (" zerolengthreadrequest ", RtrType::ZeroLengthReadRequest),
        ] {
            for markers in [false, true] {
                let mut want = Vec::new();
                FpduEncoder::new(markers)
                    .encode(&rtr_ulpdu(rtr, 1), &mut want)
                    .unwrap();
                let got = sent(&handover(&[name], markers)).unwrap();
                assert_eq!(got, vec![want], "{name} markers {markers}");
            }
        }
    }

    #[test]
    fn initiator_without_rtr_sends_nothing() {
        assert!(sent(&handover(&[], true)).unwrap().is_empty());
    }

    #[test]
    fn bad_rtr_names_are_refused() {
        for rtr in [
            &["ZeroLengthSendX"][..],
            &["Send"],
            &["ZeroLengthSend", "ZeroLengthWrite"],
        ] {
            assert!(
                matches!(sent(&handover(rtr, false)), Err(FlowError::Invalid(_))),
                "{rtr:?}"
            );
        }
        let mut h = handover(&[], false);
        h.mpa.reply_frame = b"MPA ID Rep Frame\x40\x01\x00\x00".to_vec();
        assert!(matches!(sent(&h), Err(FlowError::Invalid(_))));
    }
}
