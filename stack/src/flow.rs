//! One handed-over MPA connection inside a worker: its TCP ([`Connection`]), its MPA
//! receiver (`MpaReceiver`) and the frames it sends (the accepting Reply, ACKs, a Terminate
//! on error). The flow only wires them together; the protocol lives in `tcp` and `receiver`.

#![forbid(unsafe_code)]

mod receive;
mod send;
mod work;

pub use mpa_ctl_proto::ring::post::{PostOp, SgList, Sge, WorkRequest};
pub(crate) use receive::{
    receive_pieces_in_run, receive_segment, receive_segment_in_run, receive_segments_in_run,
};
pub(crate) use send::MAX_OUTBOUND_READS;
pub use send::{FrameSink, FrameVec, MEM_FRAME_CAPACITY};

use crate::receiver::{
    MpaReceiver, PostRecvError, PostedBuf, ReadRequest, ReceiverConfig, RegionTable, RunOctets,
    RxEnd, RxError,
};
use crate::sender::{FpduSource, MessageKind, PostError, Preamble, SenderConfig, MIN_EMSS};
use crate::tcp::{Connection, Event, HandoverState, SendSource, TcpConfig, TsHandover};
use crate::wire::frame::FrameTemplate;
use crate::wire::tcp::{TcpRepr, TIMESTAMPS_OPTION_LEN};
use mpa::seq::SeqNumber;
use mpa::startup::{RtrSet, RtrType};
use mpa::wire::ddp::ReadRequestRepr;
use mpa::MpaErrorCode;
use mpa_ctl_proto::stats::{EndReport, FlowReport, TxStats};
use mpa_ctl_proto::{Completion, CompletionKind, HandOver, Role, TerminateInfo};
use std::time::{Duration, Instant};

/// Why a hand-over could not become a flow.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    /// The TCP state is not usable.
    #[error("TCP state: {0}")]
    Tcp(#[from] crate::tcp::TcpError),
    /// Addresses or MACs are not usable.
    #[error("frame template: {0}")]
    Frame(#[from] crate::wire::frame::FrameError),
    /// A Responder's hand-over carries no Reply frame to send.
    #[error("Responder hand-over without a Reply")]
    ResponderWithoutReply,
    /// An Initiator's hand-over carries a Reply frame.
    #[error("Initiator hand-over with a Reply frame")]
    InitiatorWithReply,
    /// A frame the flow must send first does not fit the TCP send buffer.
    #[error("the {0} does not fit the send buffer")]
    SendBuffer(&'static str),
    /// An Initiator names more than one RTR to send.
    #[error("an Initiator sends one RTR indication, not {0:?}")]
    SeveralRtrs(Vec<RtrType>),
    /// The peer's MSS (or the TX frame) leaves no room for an FPDU.
    #[error("segments of at most {emss} octets cannot carry FPDUs (at least {MIN_EMSS})")]
    EmssTooSmall {
        /// The EMSS the TCP and the TX frames allow.
        emss: usize,
    },
}

/// What a flow sends: the Responder's Reply, then an FPDU stream of the consumer's Writes and
/// Sends (read from registered memory) and the flow's own ULPDUs (Terminate, RTR, the
/// zero-length Read Response to an RTR).
type FlowSource = Preamble<FpduSource<RegionTable>>;

/// How a flow ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowEnd {
    /// The MPA error code (RFC 5044 §8), `None` for a clean close.
    pub mpa_error: Option<MpaErrorCode>,
    /// Why, in words.
    pub reason: String,
    /// The Terminate that ended it (sent by us or by the peer).
    pub terminate: Option<TerminateInfo>,
}

/// One connection.
pub struct Flow {
    /// The datapath's id.
    pub id: u64,
    tcp: Connection<FlowSource>,
    template: FrameTemplate,
    rx: MpaReceiver,
    packets: u64,
    frames_sent: u64,
    ending: Option<FlowEnd>,
    ended: Option<FlowEnd>,
    /// The TS.Recent inherited at the hand-over, if known.
    ts_recent_inherited: Option<u32>,
    /// Read Responses queued for the peer's Read Requests.
    reads_served: u64,
    /// Our Read Requests sent and not yet answered (their Read Response not yet placed).
    reads_in_flight: usize,
    /// Our ORD: at most this many `reads_in_flight`.
    ord: usize,
    /// Work requests' messages waiting their turn (a Read for ORD room, what was posted
    /// behind it or behind a fence).
    waiting: std::collections::VecDeque<send::Waiting>,
    /// The consumer's work requests not yet completed.
    work: work::Work,
    /// The flow's fixed charge on the datapath's memory budget (`crate::budget`), given
    /// back when the flow goes.
    charge: Option<crate::budget::Charge>,
}

/// Converts a CLOCK_MONOTONIC reading into an `Instant` (both use the same clock on Linux).
fn instant_of_monotonic(ns: u64, now: Instant) -> Instant {
    let now_ns = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(ns);
    now.checked_sub(Duration::from_nanos(now_ns.saturating_sub(ns)))
        .unwrap_or(now)
}

/// `cfg.max_snd_mss` is for IPv4 headers (Ethernet + 20 octets): larger IP headers (IPv6)
/// take their extra octets from it.
fn clamp_mss(cfg: &TcpConfig, template: &FrameTemplate) -> TcpConfig {
    const ETHERNET_IPV4: usize = 14 + 20;
    let extra = template.l2l3_len().saturating_sub(ETHERNET_IPV4);
    let extra = u16::try_from(extra).unwrap_or(u16::MAX);
    TcpConfig {
        max_snd_mss: cfg.max_snd_mss.saturating_sub(extra).max(64),
        ..cfg.clone()
    }
}

impl Flow {
    /// Builds the flow from a hand-over; `our_mac` is the interface's address, `max_frame`
    /// the longest frame it may send (its TX buffers'). A Responder's accepting Reply is
    /// queued at once (TCP retransmits it until acknowledged); so is a peer-to-peer
    /// Initiator's RTR indication, its first FPDU.
    pub fn new(
        h: &HandOver,
        our_mac: [u8; 6],
        cfg: &TcpConfig,
        digest: bool,
        now: Instant,
        max_frame: usize,
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
            snd_nxt: SeqNumber(t.snd_nxt),
            rcv_nxt: SeqNumber(t.rcv_nxt),
            snd_wnd: t.snd_wnd,
            rcv_wnd: t.rcv_wnd,
            rcv_wup: SeqNumber(t.rcv_wup),
            snd_wscale: t.snd_wscale.unwrap_or(0),
            rcv_wscale: t.rcv_wscale.unwrap_or(0),
            mss: t.mss,
            sack_permitted: t.sack_permitted,
            timestamps: ts,
        };
        let template = FrameTemplate::new(our_mac, h.next_hop_mac, t.local, t.remote)?;
        let cfg = clamp_mss(cfg, &template);
        let m = &h.mpa;
        // The TCP's EMSS is known once it exists: a stand-in source first.
        let stand_in = FpduSource::new(SenderConfig::new(MIN_EMSS, false), RegionTable::default())
            .map_err(|_| FlowError::EmssTooSmall { emss: MIN_EMSS })?;
        let mut tcp =
            Connection::with_source(&state, &cfg, now, Preamble::new(Vec::new(), stand_in))?;
        // An FPDU must fit one segment, and a segment one TX frame: headers and the options
        // every segment carries come off the frame.
        let options = if ts.is_some() {
            TIMESTAMPS_OPTION_LEN
        } else {
            0
        };
        let by_frame =
            max_frame.saturating_sub(template.l2l3_len() + crate::wire::tcp::HEADER_LEN + options);
        let emss = tcp.emss().min(by_frame);
        let sender = FpduSource::new(
            SenderConfig {
                pd: m.pd,
                ddp_rdmap_version: m.ddp_rdmap_version,
                ..SenderConfig::new(emss, m.markers_tx)
            },
            RegionTable::default(),
        )
        .map_err(|_| FlowError::EmssTooSmall { emss })?;
        let mut sender = sender;
        if digest {
            sender.keep_digest();
        }
        let expect_rtr = match m.role {
            Role::Responder => {
                if m.reply_frame.is_empty() {
                    return Err(FlowError::ResponderWithoutReply);
                }
                *tcp.source_mut() = Preamble::new(m.reply_frame.clone(), sender);
                Some(m.rtr.iter().fold(RtrSet::EMPTY, |set, t| set.with(*t)))
            }
            Role::Initiator => {
                if !m.reply_frame.is_empty() {
                    return Err(FlowError::InitiatorWithReply);
                }
                if m.rtr.len() > 1 {
                    return Err(FlowError::SeveralRtrs(m.rtr.clone()));
                }
                *tcp.source_mut() = Preamble::new(Vec::new(), sender);
                // Not peer-to-peer: the ULP's first FPDU comes later. Peer-to-peer (RFC 6581
                // §9.2): the negotiated RTR is the very first FPDU, framed as agreed (markers
                // toward the peer if it asked for them).
                if let Some(&rtr) = m.rtr.first() {
                    tcp.source_mut()
                        .inner_mut()
                        .post_rtr(rtr)
                        .map_err(|_| FlowError::SendBuffer("RTR"))?;
                }
                None
            }
        };
        let mut rx = MpaReceiver::new(&ReceiverConfig {
            flow_id: h.flow_id,
            start: SeqNumber(t.rcv_nxt),
            markers: m.markers_rx,
            crc: m.crc,
            aligned_sender: m.aligned_sender,
            ddp_rdmap_version: m.ddp_rdmap_version,
            pd: m.pd,
            expect_rtr,
            digest,
        });
        // RFC 6581 §9.1: what revision 2 negotiated bounds the Reads each way.
        if let Some(ird) = m.ird {
            rx = rx.with_ird(ird);
        }
        let ord = m.ord.map_or(MAX_OUTBOUND_READS, |o| {
            usize::from(o).min(MAX_OUTBOUND_READS)
        });
        // Our Read RTR is a Read Request like any other to the peer: it holds one of our ORD
        // slots until its zero-length Read Response arrives, and only that response may
        // answer it.
        let mut reads_in_flight = 0;
        if m.role == Role::Initiator
            && m.rtr.first() == Some(&RtrType::ZeroLengthReadRequest)
            && rx.pd().is_some()
        {
            if !rx.expect_rtr_read_response() {
                return Err(FlowError::SendBuffer("RTR"));
            }
            reads_in_flight = 1;
        }
        Ok(Flow {
            id: h.flow_id,
            tcp,
            template,
            rx,
            packets: 0,
            frames_sent: 0,
            ending: None,
            ended: None,
            ts_recent_inherited: t.timestamps.map(|t| t.ts_recent).filter(|&v| v != 0),
            reads_served: 0,
            reads_in_flight,
            ord,
            waiting: Default::default(),
            work: Default::default(),
            charge: None,
        })
    }

    /// Handles one TCP segment of this flow; `regions` is the worker's region table.
    pub fn on_segment(
        &mut self,
        now: Instant,
        repr: &TcpRepr,
        payload: &[u8],
        regions: &mut RegionTable,
    ) {
        self.packets += 1;
        receive_segment(&mut self.tcp, &mut self.rx, now, repr, payload, regions);
        self.after_receive(regions);
    }

    /// [`Flow::on_segment`] for a segment whose frame stays in hand until the end of the RX
    /// burst: its in-order payload joins `run` (this flow's segments of the burst so far)
    /// rather than being decoded now, so that an FPDU spanning segments is verified and placed
    /// from them in place. The caller ends the run with [`Flow::end_run`] before the frames
    /// go back, before a segment of this flow it does not keep, and before the flow's
    /// end-of-burst; a run holds one flow's segments only. `payload`: the octets and their
    /// CRC32c if the parse took it (`parse_tcp_frame_with_payload_crc`).
    pub fn on_segment_in_run<'f>(
        &mut self,
        now: Instant,
        repr: &TcpRepr,
        payload: (&'f [u8], Option<u32>),
        run: &mut RunOctets<'f>,
        regions: &mut RegionTable,
    ) {
        self.packets += 1;
        receive_segment_in_run(
            &mut self.tcp,
            &mut self.rx,
            now,
            repr,
            payload,
            run,
            regions,
        );
        self.after_receive(regions);
    }

    /// [`Flow::on_segment_in_run`] for a segment whose payload lies in `pieces` (one after
    /// the other: a frame in several receive descriptors, all valid until the run ends), and
    /// the CRC32c of each piece where known (`crcs[i]` of the `i`th piece; empty: none, as
    /// `parse_tcp_frame_in_pieces_with_payload_crcs` gives them).
    /// Returns false, with nothing changed, when the segment starts beyond RCV.NXT: the caller
    /// then gathers it and hands it to [`Flow::on_segment`] (after ending the run).
    pub fn on_segment_in_pieces_in_run<'f>(
        &mut self,
        now: Instant,
        repr: &TcpRepr,
        pieces: (impl Iterator<Item = &'f [u8]> + Clone, &[Option<u32>]),
        run: &mut RunOctets<'f>,
        regions: &mut RegionTable,
    ) -> bool {
        let taken =
            receive_pieces_in_run(&mut self.tcp, &mut self.rx, now, repr, pieces, run, regions);
        if taken.is_none() {
            return false;
        }
        self.packets += 1;
        self.after_receive(regions);
        true
    }

    /// [`Flow::on_segment_in_run`] for consecutive segments of one burst whose headers are
    /// equal but for their sequence numbers, each starting where the one before ends (what GRO
    /// merges): `repr` is the first one's, `payloads` theirs (and the CRC32c of each, where
    /// known), all valid until the run ends. The
    /// TCP takes them in one update. Returns false, with nothing changed, when that would not
    /// give exactly what taking them one by one gives (not at RCV.NXT, octets held out of
    /// order, an ACK owed per segment, ...): the caller then hands them to
    /// [`Flow::on_segment_in_run`] one by one.
    pub fn on_segments_in_run<'f>(
        &mut self,
        now: Instant,
        repr: &TcpRepr,
        payloads: (&[&'f [u8]], &[Option<u32>]),
        run: &mut RunOctets<'f>,
        regions: &mut RegionTable,
    ) -> bool {
        let taken = receive_segments_in_run(
            &mut self.tcp,
            &mut self.rx,
            now,
            repr,
            payloads,
            run,
            regions,
        );
        if taken.is_none() {
            return false;
        }
        self.packets += payloads.0.len() as u64;
        self.after_receive(regions);
        true
    }

    /// Whether a segment starting at `seq` is the next in order (RCV.NXT).
    pub fn expects(&self, seq: SeqNumber) -> bool {
        self.tcp.rcv_nxt() == seq
    }

    /// Decodes and places what `run` holds ([`Flow::on_segment_in_run`]) and empties it.
    pub fn end_run(&mut self, run: &mut RunOctets<'_>, regions: &mut RegionTable) {
        if run.is_empty() {
            return;
        }
        self.rx.handle_in_order_run(run, regions);
        run.clear();
        self.after_receive(regions);
    }

    /// What the receiver asks for after octets went in: answers to RTRs and Read Requests,
    /// and the end of the stream.
    fn after_receive(&mut self, regions: &mut RegionTable) {
        let rtr_answered = self.rx.take_rtr_answered();
        if rtr_answered > 0 {
            self.reads_in_flight = self.reads_in_flight.saturating_sub(rtr_answered);
            self.release_waiting();
        }
        if let Some(h) = self.rx.poll_reply() {
            // Our first FPDU, allowed now that one arrived (RFC 5044 §7.1.2). It answers the
            // first Read Request of the stream (the RTR), so it goes before the Read
            // Responses to those that arrived with it (RFC 5040 §5.5: in request order).
            self.send_ulpdu(&h);
        }
        while let Some(r) = self.rx.poll_read_request() {
            self.serve_read(&r, regions);
        }
        let Some(end) = self.rx.poll_terminate().cloned() else {
            return;
        };
        if self.ending.is_some() || self.ended.is_some() {
            return;
        }
        match end {
            RxEnd::Local {
                error,
                terminate: t,
                ulpdu,
            } => {
                // RFC 5044 §8: the ULP — us — sends the Terminate, then closes.
                self.send_ulpdu(&ulpdu);
                self.tcp.close();
                let reason = error.to_string();
                tracing::info!(flow = self.id, layer = t.layer, error_type = t.error_type, code = t.error_code, %reason, "Terminate sent");
                self.ending = Some(FlowEnd {
                    mpa_error: match error {
                        RxError::Mpa(c) => Some(c),
                        RxError::Placement(_) => None,
                    },
                    reason,
                    terminate: Some(TerminateInfo {
                        layer: t.layer,
                        error_type: t.error_type,
                        error_code: t.error_code,
                        sent: true,
                    }),
                });
            }
            RxEnd::Peer(t, named) => {
                self.tcp.close();
                self.work
                    .failure
                    .get_or_insert(work::WorkFailure::terminate(&t, named));
                // The queue pair is in error from now on (RFC 5040 §5.4's Terminate ends the
                // stream): what is outstanding fails now, not when acknowledgments that
                // still come would complete it.
                self.flush_work();
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
        }
    }

    /// Holds `charge` on the datapath's memory budget for as long as the flow lives, and
    /// charges its out-of-order octets to the same budget.
    pub fn attach_budget(&mut self, charge: crate::budget::Charge) {
        self.tcp.set_budget(charge.budget().clone());
        self.charge = Some(charge);
    }

    /// Posts receive buffers for the peer's Sends.
    pub fn post_recv(&mut self, bufs: &[PostedBuf]) -> Result<(), PostRecvError> {
        self.rx.post_recv(bufs)
    }

    /// Draws every receive buffer from its domain's shared receive queue `q` from now on (at
    /// the hand-over, before any of its own is posted).
    pub fn attach_shared_receive_queue(
        &mut self,
        q: std::sync::Arc<dyn crate::receiver::SharedReceiveQueue>,
    ) -> Result<(), PostRecvError> {
        self.rx.attach_shared(q)
    }

    /// The VLAN its frames carry (VID), `None` for untagged: always untagged, as the frames we
    /// build are and as a hand-over names no VLAN. A frame of the 4-tuple with another tag
    /// belongs to another network and is not the flow's.
    pub(crate) fn vlan(&self) -> Option<u16> {
        None
    }

    /// Whether a received frame's VLAN tag is the flow's. VID 0 (a priority tag, IEEE
    /// 802.1Q) counts as untagged.
    pub fn vlan_matches(&self, tag: Option<crate::wire::ethernet::VlanTag>) -> bool {
        tag.map(|t| t.vid()).filter(|&v| v != 0) == self.vlan()
    }

    /// Whether the peer's FPDUs carry a CRC this flow checks (negotiated at the MPA startup):
    /// the parse pass then has a use for the payload's CRC.
    pub fn checks_crc(&self) -> bool {
        self.rx.checks_crc()
    }

    /// The flow's protection domain.
    pub fn pd(&self) -> Option<u32> {
        self.rx.pd()
    }

    /// Hands the completions produced since the last call to `f`, in order: each with its
    /// work request's id; an unsignaled request's only when it failed; after the flow ended,
    /// the flushed ones ([`Flow::flush_work`]).
    #[inline]
    pub fn drain_completions(&mut self, mut f: impl FnMut(&Completion)) {
        self.drain_due(&mut f);
        while let Some(c) = self.work.flushed.pop_front() {
            f(&c);
        }
    }

    /// The completions the receiver and the sender produced, with their work requests.
    #[inline]
    fn drain_due(&mut self, mut f: impl FnMut(&Completion)) {
        let mut answered = 0;
        while let Some(mut c) = self.rx.poll_completion() {
            if c.kind == CompletionKind::ReadResponsePlaced {
                answered += 1;
            }
            if self.complete_work(&mut c, None) {
                f(&c);
            }
        }
        if answered > 0 {
            self.reads_in_flight = self.reads_in_flight.saturating_sub(answered);
            self.release_waiting();
        }
        let mut acked = false;
        while let Some(c) = self.tcp.source_mut().inner_mut().poll_completion() {
            acked = true;
            let (kind, msn) = match c.kind {
                MessageKind::Write { .. } => (CompletionKind::WriteSent, None),
                MessageKind::Send { msn, .. } => (CompletionKind::SendSent, Some(msn)),
                MessageKind::Control => continue,
                // Its IRD slot was freed as the ACK arrived (`receive_segment`).
                MessageKind::ReadResponse { .. } => continue,
            };
            let mut done = Completion {
                flow_id: self.id,
                kind,
                stag: c.src_stag,
                offset: c.src_offset,
                len: c.len,
                msn,
                invalidate_stag: None,
                wr_id: 0,
                status: mpa_ctl_proto::CompletionStatus::Success,
            };
            if !self.work.in_error && self.complete_work(&mut done, Some(c.id)) {
                f(&done);
            }
        }
        // Acknowledged messages made room in the sender for what waits.
        if acked && !self.waiting.is_empty() {
            self.release_waiting();
        }
    }

    /// Whether completions are waiting.
    pub fn has_completions(&self) -> bool {
        self.rx.has_completions()
            || self.tcp.source().inner().has_completions()
            || !self.work.flushed.is_empty()
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

    /// [`Flow::poll_frames`] without the pure ACK owed to in-order data, which waits for a
    /// data segment to carry it (`Connection::set_hold_pure_ack`). Returns whether an ACK
    /// is still owed: the caller sends it with a later [`Flow::poll_frames`].
    pub fn poll_frames_holding_ack(&mut self, now: Instant, sink: &mut impl FrameSink) -> bool {
        self.tcp.set_hold_pure_ack(true);
        self.poll_frames(now, sink);
        self.tcp.set_hold_pure_ack(false);
        self.tcp.ack_owed()
    }

    /// Builds every frame due now, each straight into a buffer of `sink` (the payload read
    /// from the region once, into the TX frame). Stops when `sink` has no free buffer: the
    /// rest waits for the next call ([`Flow::wants_to_send`]).
    pub fn poll_frames(&mut self, now: Instant, sink: &mut impl FrameSink) {
        let l = self.template.l2l3_len();
        let cap = sink.frame_capacity();
        let mut room = sink.room();
        while room > 0 {
            room -= 1;
            let (tcp, template) = (&mut self.tcp, &self.template);
            let mut built = false;
            let mut error = None;
            sink.send_with(|frame| {
                let n = cap.min(frame.len());
                let frame = &mut frame[..n];
                let Some(tx) = frame.get_mut(l..).and_then(|b| tcp.poll_transmit(now, b)) else {
                    return 0;
                };
                built = true;
                match template.finish(frame, tx.header_len + tx.payload_len) {
                    Ok(n) => n,
                    Err(e) => {
                        error = Some(e);
                        0
                    }
                }
            });
            if let Some(e) = error {
                tracing::error!(flow = self.id, %e, "cannot build frame");
            }
            if !built {
                break;
            }
            self.frames_sent += 1;
        }
        self.poll_events();
    }

    fn poll_events(&mut self) {
        while let Some(ev) = self.tcp.poll_event() {
            match ev {
                Event::PeerClosed => {
                    // The peer finished sending: close our side too. An FPDU cut short by the
                    // FIN is error 1.
                    if self.rx.partial_fpdu() && self.ending.is_none() {
                        self.ending = Some(FlowEnd {
                            mpa_error: Some(MpaErrorCode::TcpClosed),
                            reason: "peer closed inside an FPDU".into(),
                            terminate: None,
                        });
                    }
                    self.tcp.close();
                }
                Event::Reset => {
                    let reason = "connection reset by the peer".to_string();
                    self.finish(Some(MpaErrorCode::TcpClosed), reason);
                }
                Event::Failed(e) => {
                    if e.gave_up_on_silent_peer() {
                        self.work
                            .failure
                            .get_or_insert(work::WorkFailure::retry_exceeded());
                    }
                    self.finish(Some(MpaErrorCode::TcpClosed), format!("TCP: {e}"));
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

    fn finish(&mut self, mpa_error: Option<MpaErrorCode>, reason: String) {
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

    /// Closes our direction after everything queued: a FIN follows the last FPDU.
    pub fn close_gracefully(&mut self) {
        self.tcp.close();
    }

    /// Forgets the connection at once (operator close): RST to the peer.
    pub fn abort(&mut self) {
        self.abort_because("closed by the operator");
    }

    /// [`abort`](Self::abort), ending the flow with `reason`.
    pub fn abort_because(&mut self, reason: &str) {
        self.tcp.abort();
        self.finish(None, reason.into());
    }

    /// Counters and state.
    pub fn report(&self) -> FlowReport {
        let t = self.tcp.stats();
        FlowReport {
            flow_id: self.id,
            state: format!("{:?}", self.tcp.state()),
            packets: self.packets,
            octets: t.octets_in,
            out_of_order_segments: t.ooo_segs,
            segments_batched: t.segs_batched,
            duplicates: t.dup_full + t.dup_partial,
            sack_blocks_sent: t.sack_blocks_sent,
            acks_sent: t.acks_sent,
            acks_carried: t.acks_carried,
            retransmissions: t.retransmissions,
            frames_sent: self.frames_sent,
            octets_out: t.octets_out,
            ulpdu_digest: self.rx.digest().map(|d| format!("{d:08x}")),
            pd: self.pd(),
            placed_ahead_waiting: self.rx.placed_ahead_waiting(),
            posted_buffers: self.rx.posted(),
            store_high_water: t.store_high_water,
            dropped_reassembly_full: t.dropped.reassembly_full,
            dropped_out_of_window: t.dropped.out_of_window,
            keepalive_probes: t.keepalive_probes,
            window_probes: t.window_probes,
            tcp_drops: mpa_ctl_proto::stats::TcpDrops {
                paws: t.dropped.paws,
                missing_timestamp: t.dropped.missing_timestamp,
                bad_ack: t.dropped.bad_ack,
                bad_rst: t.dropped.bad_rst,
                syn: t.dropped.syn,
                after_close: t.dropped.after_close,
                duplicate: t.dup_full,
                challenge_acks: t.challenge_acks,
                challenge_acks_suppressed: t.challenge_acks_suppressed,
                challenge_acks_merged: t.challenge_acks_merged,
            },
            ts_recent_inherited: self.ts_recent_inherited,
            rx: *self.rx.stats(),
            tx: {
                let src = self.tcp.source().inner();
                let st = src.stats();
                TxStats {
                    messages_posted: st.posted,
                    messages_completed: st.completed,
                    messages_queued: src.queued_messages() as u64,
                    fpdus_sent: st.fpdus_filled,
                    octets_read: st.octets_read,
                    partial_fpdus: st.partial_fills,
                    cwnd: self.tcp.cwnd() as u64,
                    srtt_us: self.tcp.srtt().map(|d| d.as_micros() as u64),
                    read_responses: self.reads_served,
                    ulpdu_digest: src.digest().map(|d| format!("{d:08x}")),
                    ird: self.rx.ird() as u32,
                    ord: self.ord as u32,
                }
            },
            ended: self.ended.as_ref().map(|e| EndReport {
                mpa_error: e.mpa_error.map(MpaErrorCode::code),
                reason: e.reason.clone(),
                terminate: e.terminate,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_flows_take_their_longer_header_from_the_send_mss() {
        let cfg = TcpConfig::default();
        let t = |l: &str, r: &str| {
            FrameTemplate::new([2; 6], [4; 6], l.parse().unwrap(), r.parse().unwrap()).unwrap()
        };
        let v4 = clamp_mss(&cfg, &t("10.0.0.1:1", "10.0.0.2:2"));
        assert_eq!(v4.max_snd_mss, 1460);
        let v6 = clamp_mss(&cfg, &t("[fd00::1]:1", "[fd00::2]:2"));
        assert_eq!(v6.max_snd_mss, 1440);
        assert_eq!(
            TcpConfig {
                max_snd_mss: 1460,
                ..v6
            },
            cfg
        );
    }
}
