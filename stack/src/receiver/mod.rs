//! The MPA receiver of one connection, sans I/O: the octets TCP delivers go in (in order, or
//! ahead of the stream when out-of-order segments can be located), placements into registered
//! memory, completions and at most one Terminate come out. No AF_XDP, no sockets, no clock:
//! the worker drives it through [`crate::flow::Flow`], tests and the in-memory pipeline drive
//! it directly (`MpaReceiver` + `tcp::Connection` + a `Regions` implementation).
//!
//! The path of one FPDU: `MpaReceiver::handle_in_order` → `FpduDecoder` (markers, CRC, in
//! batches) → RTR check for the first FPDU (RFC 6581) → `Placer::plan` (RFC 5040/5041
//! checks) → `Placer::place` (copy into the region) → `Placer::complete` (in stream
//! order) → `MpaReceiver::poll_completion`. Out of order, `MpaReceiver::handle_segment_ahead`
//! finds whole FPDUs with the `FpduLocator` (marker- or alignment-guided, CRC-verified) and
//! places them at once; they complete when the in-order stream reaches them.

#![forbid(unsafe_code)]

mod ahead;
mod out_of_order;
pub(crate) mod placement;
pub(crate) mod regions;
mod run;
#[cfg(test)]
pub(crate) mod tests;

use ahead::AheadList;
use mpa::crc::{crc32c_append, crc32c_combine};
use mpa::decoder::{DecodeError, FpduDecoder};
use mpa::endpoint::classify_rtr;
use mpa::locator::{FpduLocator, LocatedFpdu};
use mpa::markers::MarkerGrid;
use mpa::seq::SeqNumber;
use mpa::startup::{RtrSet, RtrType};
use mpa::wire::ddp::{
    self, terminate_ulpdu, terminate_ulpdu_for_segment, DdpRepr, RdmapOpcode, TerminateRepr,
    TerminatedSegment,
};
use mpa::MpaErrorCode;
pub(crate) use mpa_ctl_proto::stats::RxStats;
use mpa_ctl_proto::Completion;
pub(crate) use placement::{
    PlacementError, Placer, ReadRequest, SegmentKind, SegmentPlan, PLAN_PREFIX,
};
pub use placement::{PostError, PostedBuf, SharedReceiveQueue, MAX_POSTED};
pub(crate) use regions::{MemRegions, Regions};
pub use regions::{Region, RegionTable, STREAMING_MIN_MESSAGE};
pub use run::{reuse_slices, RunOctets};
use std::collections::VecDeque;

/// FPDUs placed out of order and not yet completed in order, per connection.
pub(crate) const MAX_PLACED_AHEAD: usize = 4096;

/// Completions a receiver holds before the worker collects them; past this the in-order path
/// stops placing (the worker collects after every burst, so this is a bound, not a limit met
/// in practice).
const MAX_HELD_COMPLETIONS: usize = 1 << 16;

/// How far past the end of an in-order placement [`hint_next_placement`] asks for lines at
/// most: two 4 KiB messages ahead (into the second-level cache; 4 and 16 KiB measured the same
/// in `mpa-bench pipeline`).
const PLACEMENT_HINT_MAX: usize = 8 << 10;

/// How far past the end of an in-order placement [`hint_next_placement`] asks for lines at
/// least, however short the placement: lines asked for only one short FPDU ahead come too
/// late (docs/investigations/2026-12-08-placement-hint-ahead-of-short-fpdus.md).
const PLACEMENT_HINT_MIN: usize = 4 << 10;

/// Inbound RDMA Read Requests outstanding at most (RFC 5040 §6.1's IRD) when the startup
/// negotiated none: as large as common iWARP adapters offer. A negotiated IRD
/// ([`MpaReceiver::with_ird`]) is never above it. One beyond the IRD is RDMAP's
/// "catastrophic error, localized to RDMAP Stream" (as siw answers an IRQ overrun).
pub(crate) const MAX_INBOUND_READS: usize = mpa_ctl_proto::DATAPATH_MAX_IRD as usize;

/// What was negotiated for the receive direction of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReceiverConfig {
    /// The datapath's id of the connection (carried in completions).
    pub(crate) flow_id: u64,
    /// Sequence number of the first octet after the startup frames (RCV.NXT at hand-over).
    pub(crate) start: SeqNumber,
    /// The peer inserts markers toward us.
    pub(crate) markers: bool,
    /// FPDUs carry CRCs.
    pub(crate) crc: bool,
    /// The peer promised FPDU-aligned segments (an FPDU header at every segment start).
    pub(crate) aligned_sender: bool,
    /// DDP/RDMAP version.
    pub(crate) ddp_rdmap_version: u8,
    /// Protection domain whose regions we place into; `None`: payloads are only counted.
    pub(crate) pd: Option<u32>,
    /// Responder: the first FPDU must be an RTR of this set (RFC 6581 §9.2; empty: any FPDU).
    /// Initiator: `None`.
    pub(crate) expect_rtr: Option<RtrSet>,
    /// Keep a CRC32c digest of every ULPDU octet, in order (for end-to-end checks).
    pub(crate) digest: bool,
}

/// Why the receiver ended the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RxError {
    /// An MPA error (RFC 5044 §8): Terminate at layer 2.
    #[error("{0}")]
    Mpa(MpaErrorCode),
    /// A DDP/RDMAP placement violation: Terminate with the segment's DDP header.
    #[error("{0}")]
    Placement(PlacementError),
}

impl RxError {}

/// How the receive direction ended: reported once by [`MpaReceiver::poll_terminate`]. After
/// either, nothing more is placed or completed (RFC 5040 §5.3, RFC 5041 §7: a Terminate ends
/// data transfer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RxEnd {
    /// We found an error: send `ulpdu` (a Terminate) as an FPDU, then close.
    Local {
        /// What was wrong.
        error: RxError,
        /// The Terminate's control fields.
        terminate: TerminateRepr,
        /// The Terminate ULPDU to send.
        ulpdu: Vec<u8>,
    },
    /// The peer sent a Terminate, naming this segment of ours when it copied its header.
    Peer(TerminateRepr, Option<TerminatedSegment>),
}

/// Where in-order octets come from (for the placement counters only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InOrderSource {
    /// The in-order part of a segment that just arrived.
    Segment,
    /// Drained from the TCP reassembly store once a hole filled.
    Store,
}

/// The MPA receive side of one connection.
#[derive(Debug)]
pub(crate) struct MpaReceiver {
    flow_id: u64,
    version: u8,
    decoder: FpduDecoder,
    /// `None` without a protection domain: payloads are only counted (and digested).
    placer: Option<Placer>,
    locator: FpduLocator,
    /// Out-of-order segments can be parsed alone: markers toward us, or an aligned sender
    /// and CRCs (header at segment start, verified by CRC).
    locatable: bool,
    ahead: AheadList,
    /// Octets still to step over (the rest of an FPDU placed ahead).
    skip_left: usize,
    /// Responder before the first FPDU: the RTRs it may be.
    expect_first: Option<RtrSet>,
    digest: Option<u32>,
    stats: RxStats,
    completions: VecDeque<Completion>,
    located: Vec<LocatedFpdu>,
    /// An out-of-order FPDU gathered from stored pieces and a segment (`out_of_order`).
    gathered: Vec<u8>,
    /// The sink (STag, TO) of a zero-length Read Request RTR, to answer.
    read_rtr: Option<(u32, u64)>,
    /// Valid RDMA Read Requests accepted in order, not yet handed to the sender.
    reads: VecDeque<ReadRequest>,
    /// Read Requests accepted whose Read Response is not yet acknowledged (the IRD count).
    reads_outstanding: usize,
    /// Our IRD: at most this many `reads_outstanding`.
    ird: usize,
    /// Where the last in-order placement ended, and how far ahead its lines were asked for.
    placed_end: Option<PlacedEnd>,
    /// Sticky end: set once, never cleared.
    end: Option<RxEnd>,
    end_reported: bool,
}

impl MpaReceiver {
    /// A receiver for what was negotiated.
    pub(crate) fn new(cfg: &ReceiverConfig) -> Self {
        let locatable = cfg.markers || (cfg.aligned_sender && cfg.crc);
        MpaReceiver {
            flow_id: cfg.flow_id,
            version: cfg.ddp_rdmap_version,
            decoder: FpduDecoder::new(cfg.markers, cfg.crc),
            placer: cfg.pd.map(|pd| Placer::new(pd, cfg.ddp_rdmap_version)),
            locator: FpduLocator::new(MarkerGrid::new(cfg.start, cfg.markers), cfg.crc)
                .with_aligned_sender(cfg.aligned_sender && cfg.crc),
            locatable,
            ahead: AheadList::new(cfg.start),
            skip_left: 0,
            expect_first: cfg.expect_rtr,
            digest: cfg.digest.then_some(0),
            stats: RxStats::default(),
            completions: VecDeque::new(),
            located: Vec::new(),
            gathered: Vec::new(),
            read_rtr: None,
            reads: VecDeque::new(),
            reads_outstanding: 0,
            ird: MAX_INBOUND_READS,
            placed_end: None,
            end: None,
            end_reported: false,
        }
    }

    /// The IRD revision 2 negotiated (RFC 6581 §9.1) instead of [`MAX_INBOUND_READS`]
    /// (capped by it): a Read Request beyond it ends the stream (0/2/7).
    pub(crate) fn with_ird(mut self, ird: u16) -> Self {
        self.ird = usize::from(ird).min(MAX_INBOUND_READS);
        self
    }

    /// Our IRD in force.
    pub(crate) fn ird(&self) -> usize {
        self.ird
    }

    /// Counters.
    pub(crate) fn stats(&self) -> &RxStats {
        &self.stats
    }

    /// The running digest of the ULPDU octets (when kept).
    pub(crate) fn digest(&self) -> Option<u32> {
        self.digest
    }

    /// Whether the peer's FPDUs carry a CRC that is checked (negotiated).
    pub(crate) fn checks_crc(&self) -> bool {
        self.decoder.checks_crc()
    }

    /// The protection domain placed into.
    pub(crate) fn pd(&self) -> Option<u32> {
        self.placer.as_ref().map(Placer::pd)
    }

    /// Receive buffers posted and not yet used (`None` without a domain).
    pub(crate) fn posted(&self) -> Option<usize> {
        self.placer.as_ref().map(Placer::posted)
    }

    /// FPDUs placed ahead of the stream, waiting for it.
    pub(crate) fn placed_ahead_waiting(&self) -> usize {
        self.ahead.len()
    }

    /// Octets of a partial FPDU held by the decoder (a FIN now cuts an FPDU short).
    pub(crate) fn partial_fpdu(&self) -> bool {
        self.decoder.buffered() > 0
    }

    /// Whether the receive direction has ended (our Terminate or the peer's).
    #[cfg(test)]
    pub(crate) fn is_ended(&self) -> bool {
        self.end.is_some()
    }

    /// Posts receive buffers for the peer's Sends (in MSN order).
    pub(crate) fn post_recv(&mut self, bufs: &[PostedBuf]) -> Result<(), PostRecvError> {
        let p = self.placer.as_mut().ok_or(PostRecvError::NoDomain)?;
        if p.is_shared() {
            return Err(PostRecvError::Shared);
        }
        p.post(bufs.iter().copied()).map_err(PostRecvError::Full)
    }

    /// Draws every receive buffer from the domain's shared receive queue `q` from now on.
    pub(crate) fn attach_shared(
        &mut self,
        q: std::sync::Arc<dyn placement::SharedReceiveQueue>,
    ) -> Result<(), PostRecvError> {
        let p = self.placer.as_mut().ok_or(PostRecvError::NoDomain)?;
        p.attach_shared(q).map_err(PostRecvError::Full)
    }

    /// Takes the posted buffers no Send used (the connection ended: they are flushed).
    pub(crate) fn take_posted(&mut self) -> std::collections::VecDeque<PostedBuf> {
        self.placer
            .as_mut()
            .map(|p| p.take_posted())
            .unwrap_or_default()
    }

    /// Whether out-of-order segments should go through [`Self::handle_segment_ahead`]:
    /// locatable framing, a domain, the first FPDU (the RTR) seen, no error, room left.
    pub(crate) fn wants_segments_ahead(&self) -> bool {
        self.locatable
            && self.placer.is_some()
            && self.expect_first.is_none()
            && self.end.is_none()
            && self.decoder.error().is_none()
            && self.ahead.len() < MAX_PLACED_AHEAD
    }

    /// The next completion, in stream order.
    pub(crate) fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// Whether completions are waiting.
    pub(crate) fn has_completions(&self) -> bool {
        !self.completions.is_empty()
    }

    /// How the receive direction ended, once (then `None`).
    pub(crate) fn poll_terminate(&mut self) -> Option<&RxEnd> {
        if self.end_reported {
            return None;
        }
        self.end_reported = self.end.is_some();
        self.end.as_ref()
    }

    /// The oldest valid RDMA Read Request accepted and not yet taken: the flow answers it with
    /// a Read Response (RFC 5040 §5.2.1), in the order the requests arrived (§5.5 rule 20).
    pub(crate) fn poll_read_request(&mut self) -> Option<ReadRequest> {
        self.reads.pop_front()
    }

    /// We sent a Read Request for `size` octets into `sink_stag` at `sink_to`: its Read
    /// Response may be placed there (and nothing else may: [`Placer::expect_read_response`]).
    /// `false` when it cannot be tracked (no domain, or too many outstanding).
    pub(crate) fn expect_read_response(&mut self, sink_stag: u32, sink_to: u64, size: u64) -> bool {
        self.placer
            .as_mut()
            .is_some_and(|p| p.expect_read_response(sink_stag, sink_to, size))
    }

    /// Our Read RTR went out first: its zero-length Read Response is expected before any
    /// other (see [`Placer::expect_rtr_read_response`]).
    pub(crate) fn expect_rtr_read_response(&mut self) -> bool {
        self.placer
            .as_mut()
            .is_some_and(Placer::expect_rtr_read_response)
    }

    /// Read Responses that answered our Read RTR since the last call.
    pub(crate) fn take_rtr_answered(&mut self) -> usize {
        self.placer.as_mut().map_or(0, Placer::take_rtr_answered)
    }

    /// The Read Responses of `n` accepted Read Requests were acknowledged: `n` fewer
    /// outstanding.
    pub(crate) fn reads_served(&mut self, n: usize) {
        self.reads_outstanding = self.reads_outstanding.saturating_sub(n);
    }

    /// A ULPDU the receiver asks to send: the zero-length Read Response that answers a
    /// zero-length Read Request RTR (RFC 6581 §9.2, RFC 5040 §5.2).
    pub(crate) fn poll_reply(&mut self) -> Option<[u8; ddp::TAGGED_HEADER_LEN]> {
        let (stag, to) = self.read_rtr.take()?;
        let mut h = [0u8; ddp::TAGGED_HEADER_LEN];
        DdpRepr::Tagged {
            last: true,
            opcode: RdmapOpcode::RdmaReadResponse,
            stag,
            to,
        }
        .emit(&mut h, self.version)
        .map(|_| h)
    }

    /// The next in-order octets of the stream. FPDUs placed ahead are stepped over and only
    /// completed.
    pub(crate) fn handle_in_order<R: Regions + ?Sized>(
        &mut self,
        mut bytes: &[u8],
        source: InOrderSource,
        regions: &mut R,
    ) {
        while !bytes.is_empty() && self.end.is_none() {
            if self.skip_left > 0 {
                let n = self.skip_left.min(bytes.len());
                self.skip_left -= n;
                self.ahead.advance(n);
                bytes = &bytes[n..];
                continue;
            }
            let Some(d) = self.ahead.next_within(bytes.len()) else {
                self.decode(bytes, None, (&[], &[]), source, regions);
                self.ahead.advance(bytes.len());
                return;
            };
            self.decode(&bytes[..d], None, (&[], &[]), source, regions);
            self.ahead.advance(d);
            bytes = &bytes[d..];
            if self.end.is_some() {
                return;
            }
            let Some(p) = self.ahead.pop_front() else {
                return;
            };
            if let Err(e) = self.decoder.skip_verified(p.wire_len) {
                self.stats.marker_errors += 1;
                self.fail(RxError::Mpa(e.code()), &[], 0);
                return;
            }
            self.stats.fpdus += 1;
            self.stats.ulpdu_octets += p.ulpdu_len as u64;
            if let Some(d) = self.digest.as_mut() {
                *d = crc32c_combine(*d, p.ulpdu_crc, p.ulpdu_len as u64);
            }
            self.complete(&p.plan, p.ulpdu_len);
            if self.end.is_some() {
                return;
            }
            self.skip_left = p.wire_len;
        }
    }

    /// The in-order payloads of consecutive segments that are all still in hand (a run: the
    /// segments of one flow in one RX burst), in order. An FPDU that spans segments of the run
    /// is verified and placed from the segments themselves, not copied first
    /// (docs/architecture.md, "Runs of segments"); only one that reaches past the run's end is
    /// buffered. With FPDUs placed ahead waiting, each payload goes through
    /// [`Self::handle_in_order`] on its own.
    pub(crate) fn handle_in_order_run<R: Regions + ?Sized>(
        &mut self,
        run: &RunOctets<'_>,
        regions: &mut R,
    ) {
        let (octets, crcs) = (run.octets(), run.crcs());
        if self.ahead.len() > 0 || self.skip_left > 0 {
            for b in octets {
                self.handle_in_order(b, InOrderSource::Segment, regions);
            }
            return;
        }
        // `rest_crc`: the CRC of `octets[i][skip..]` when `skip > 0` and it is known (the
        // decoder's, from the FPDU that spilled into the chunk).
        let (mut i, mut skip, mut rest_crc) = (0, 0, None);
        while i < octets.len() && self.end.is_none() {
            let bytes = &octets[i][skip..];
            let bytes_crc = if skip == 0 {
                crcs.get(i).copied().flatten()
            } else {
                rest_crc
            };
            let next = (&octets[i + 1..], crcs.get(i + 1..).unwrap_or_default());
            let (spill, spill_rest_crc) =
                self.decode(bytes, bytes_crc, next, InOrderSource::Segment, regions);
            self.ahead.advance(bytes.len() + spill);
            i += 1;
            (skip, rest_crc) = (spill, spill_rest_crc);
            while i < octets.len() && skip >= octets[i].len() {
                skip -= octets[i].len();
                i += 1;
            }
        }
    }

    /// In-order octets through the FPDU decoder, with their CRC32c if known; `next`: the run's
    /// octets after them, still in hand, and their CRCs where known. Returns how many octets
    /// of `next` the last FPDU reached into, and the CRC of what it left of the last chunk it
    /// reached, when known.
    fn decode<R: Regions + ?Sized>(
        &mut self,
        bytes: &[u8],
        bytes_crc: Option<u32>,
        (next, next_crcs): (&[&[u8]], &[Option<u32>]),
        source: InOrderSource,
        regions: &mut R,
    ) -> (usize, Option<u32>) {
        if self.end.is_some() || bytes.is_empty() {
            return (0, None);
        }
        let mut chunk = self
            .decoder
            .feed_run_with_crcs(bytes, bytes_crc, next, next_crcs);
        while let Some(r) = chunk.next_ulpdu() {
            let u = match r {
                Ok(u) => u,
                Err(e) => {
                    match e {
                        DecodeError::Crc { .. } => self.stats.crc_errors += 1,
                        DecodeError::Marker { .. } | DecodeError::Misframed { .. } => {
                            self.stats.marker_errors += 1
                        }
                        DecodeError::Abandoned => {}
                    }
                    self.end = Some(local_end(RxError::Mpa(e.code()), self.version, &[], 0));
                    break;
                }
            };
            let mut head = [0u8; PLAN_PREFIX];
            let n = u.copy_prefix(&mut head);
            if let Some(rtrs) = self.expect_first.take() {
                if !rtrs.is_empty() {
                    // RFC 6581 §9.2: the first FPDU is a negotiated RTR, not data.
                    let rtr = classify_rtr(&head[..n], u.len(), self.version)
                        .filter(|t| rtrs.contains(*t));
                    // An untagged RTR (a zero-length Send on queue 0 or Read Request on
                    // queue 1) takes MSN 1 of its queue (RFC 5041 §5.1): with a domain, the
                    // next message of that queue must carry MSN 2.
                    let msn = match (rtr, self.placer.as_mut()) {
                        (None | Some(RtrType::ZeroLengthWrite), _) | (_, None) => Ok(()),
                        (Some(_), Some(p)) => match DdpRepr::parse(&head[..n], self.version) {
                            Ok((DdpRepr::Untagged { qn, msn, .. }, _)) => p.rtr_received(qn, msn),
                            _ => Ok(()),
                        },
                    };
                    if let Err(error) = msn {
                        let e = RxError::Placement(error);
                        self.end = Some(local_end(e, self.version, &head[..n], u.len()));
                        break;
                    }
                    match rtr {
                        None => {
                            let e = RxError::Mpa(MpaErrorCode::NoMatchingRtr);
                            self.end = Some(local_end(e, self.version, &[], 0));
                            break;
                        }
                        Some(RtrType::ZeroLengthReadRequest) => {
                            // RFC 5040 §4.4: sink STag and sink TO follow the DDP header; the
                            // zero-length Read Response goes there.
                            let h = &head[ddp::UNTAGGED_HEADER_LEN..];
                            let stag = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
                            let to = u64::from_be_bytes([
                                h[4], h[5], h[6], h[7], h[8], h[9], h[10], h[11],
                            ]);
                            self.read_rtr = Some((stag, to));
                        }
                        Some(_) => {}
                    }
                    continue;
                }
            }
            if let Some(placer) = self.placer.as_mut() {
                let mut planned = placer.plan(regions, &head[..n], u.len(), true);
                if let Err(e) = &planned {
                    if placer.draw_for(e) {
                        planned = placer.plan(regions, &head[..n], u.len(), true);
                    }
                }
                let placer = &*placer;
                let plan = match planned {
                    Ok(p) => p,
                    Err(error) => {
                        let e = RxError::Placement(error);
                        self.end = Some(local_end(e, self.version, &head[..n], u.len()));
                        break;
                    }
                };
                if let SegmentKind::PeerTerminate(t, named) = plan.kind {
                    self.end = Some(RxEnd::Peer(t, named));
                    break;
                }
                if let SegmentKind::ReadRequest(req) = plan.kind {
                    if self.reads_outstanding >= self.ird {
                        let e = RxError::Placement(PlacementError::IrdExceeded {
                            msn: req.msn,
                            ird: self.ird,
                        });
                        self.end = Some(local_end(e, self.version, &head[..n], u.len()));
                        break;
                    }
                    self.reads_outstanding += 1;
                    self.reads.push_back(req);
                    if let Some(p) = self.placer.as_mut() {
                        p.read_accepted();
                    }
                    self.stats.fpdus += 1;
                    self.stats.ulpdu_octets += u.len() as u64;
                    if let Some(d) = self.digest.as_mut() {
                        *d = u.pieces().fold(*d, crc32c_append);
                    }
                    continue;
                }
                if let Err(error) = placer.continues(&plan) {
                    let e = RxError::Placement(error);
                    self.end = Some(local_end(e, self.version, &head[..n], u.len()));
                    break;
                }
                if self.completions.len() >= MAX_HELD_COMPLETIONS {
                    let e = RxError::Mpa(MpaErrorCode::LocalCatastrophic);
                    self.end = Some(local_end(e, self.version, &[], 0));
                    break;
                }
                if Placer::place(regions, &plan, &u) {
                    self.stats.placed_octets += plan.payload_len as u64;
                    hint_next_placement(&mut self.placed_end, regions, &plan);
                }
                match source {
                    InOrderSource::Segment => self.stats.placed_in_order += 1,
                    InOrderSource::Store => self.stats.placed_from_store += 1,
                }
                if let Some(Ok(Some(c))) = self
                    .placer
                    .as_mut()
                    .map(|p| p.complete(&plan, self.flow_id))
                {
                    self.stats.completions += 1;
                    self.completions.push_back(c);
                }
            }
            self.stats.fpdus += 1;
            self.stats.ulpdu_octets += u.len() as u64;
            if let Some(d) = self.digest.as_mut() {
                *d = u.pieces().fold(*d, crc32c_append);
            }
        }
        while chunk.next_ulpdu().is_some() {}
        let spill = (chunk.spill(), chunk.spill_rest_crc());
        drop(chunk);
        let d = self.decoder.stats();
        self.stats.spanned_in_place = d.spanned;
        self.stats.crc_from_segments = d.crc_joined;
        self.stats.crc_at_segment_end = d.crc_at_chunk_end;
        self.stats.staged = d.reassembled;
        spill
    }

    /// Advances the in-order placement state past `plan` (placed now or ahead) and queues
    /// the completion it produces.
    /// An FPDU placed ahead that does not continue its tagged message ends the stream with
    /// a Terminate carrying its DDP header, rebuilt from the plan.
    fn complete(&mut self, plan: &SegmentPlan, ulpdu_len: usize) {
        let Some(placer) = self.placer.as_mut() else {
            return;
        };
        match placer.complete(plan, self.flow_id) {
            Ok(Some(c)) => {
                self.stats.completions += 1;
                self.completions.push_back(c);
            }
            Ok(None) => {}
            Err(error) => {
                let mut head = [0u8; ddp::TAGGED_HEADER_LEN];
                let n = match plan.kind {
                    SegmentKind::Tagged {
                        opcode,
                        stag,
                        to,
                        last,
                    } => DdpRepr::Tagged {
                        last,
                        opcode,
                        stag,
                        to,
                    }
                    .emit(&mut head, self.version)
                    .map_or(0, |_| head.len()),
                    _ => 0,
                };
                self.fail(RxError::Placement(error), &head[..n], ulpdu_len);
            }
        }
    }

    fn fail(&mut self, error: RxError, head: &[u8], seg_len: usize) {
        if self.end.is_none() {
            self.end = Some(local_end(error, self.version, head, seg_len));
        }
    }
}

/// The Terminate for `error`: an MPA error at layer 2; a placement violation carries the
/// offending segment's DDP header (RFC 5040 §7, Figure 10).
fn local_end(error: RxError, version: u8, head: &[u8], seg_len: usize) -> RxEnd {
    let (terminate, ulpdu) = match error {
        RxError::Mpa(code) => (TerminateRepr::mpa(code), terminate_ulpdu(code, 1, version)),
        RxError::Placement(p) => {
            let t = p.terminate();
            (t, terminate_ulpdu_for_segment(t, 1, version, seg_len, head))
        }
    };
    RxEnd::Local {
        error,
        terminate,
        ulpdu,
    }
}

/// Why receive buffers were not posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostRecvError {
    /// The connection has no protection domain: it does not place.
    #[error("the connection has no protection domain: it does not place")]
    NoDomain,
    /// Too many buffers.
    #[error(transparent)]
    Full(PostError),
    /// The connection draws its buffers from its domain's shared receive queue: post there.
    #[error("the connection receives from its domain's shared receive queue: post to the domain")]
    Shared,
}

/// Where the last in-order placement ended, and the end of the lines asked for ahead of it.
#[derive(Debug, Clone, Copy)]
struct PlacedEnd {
    stag: u32,
    end: u64,
    hinted_end: u64,
}

/// After an in-order placement that began where the one before it ended (`placed_end`: the
/// FPDUs of one message, back-to-back messages — a stream running through a region), the
/// lines as far past its end as it was long — at least [`PLACEMENT_HINT_MIN`], at most
/// [`PLACEMENT_HINT_MAX`] — that were not asked for yet are asked for now, into the
/// second-level cache: their reads then overlap the checks of the FPDUs before them instead of
/// stalling their copies. The floor keeps short FPDUs (those of a sender that aligns them with
/// its segments) from asking for lines only one FPDU ahead, too late to arrive. A placement
/// anywhere else asks for nothing (docs/architecture.md, "Receive path").
#[inline]
fn hint_next_placement<R: Regions + ?Sized>(
    placed_end: &mut Option<PlacedEnd>,
    regions: &R,
    plan: &SegmentPlan,
) {
    let Some((stag, off)) = plan.target.filter(|_| plan.payload_len > 0) else {
        return;
    };
    let end = off.saturating_add(plan.payload_len as u64);
    let hinted_end = match *placed_end {
        Some(p) if p.stag == stag && p.end == off => {
            let from = p.hinted_end.max(end);
            let ahead = plan
                .payload_len
                .clamp(PLACEMENT_HINT_MIN, PLACEMENT_HINT_MAX);
            let to = end.saturating_add(ahead as u64);
            if to > from {
                regions.prefetch_for_later_write(stag, from, (to - from) as usize);
            }
            to.max(from)
        }
        _ => end,
    };
    *placed_end = Some(PlacedEnd {
        stag,
        end,
        hinted_end,
    });
}
