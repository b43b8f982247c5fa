//! DDP/RDMAP placement (RFC 5041 §7, RFC 5040 §5/§7): where each verified ULPDU's payload
//! goes, every check the RFCs ask for on the way, and in-order completions.
//!
//! Validation ([`Placer::plan`]) is pure: it is used both for FPDUs found out of order (placed
//! at once when they pass, left to in-order processing otherwise) and for in-order ones
//! (where a failure becomes a Terminate). State changes only in [`Placer::complete`], in
//! stream order, so an FPDU placed early completes exactly as if it had arrived in order.

#![forbid(unsafe_code)]

use super::regions::Regions;
use mpa::decoder::Ulpdu;
use mpa::wire::ddp::{
    queue, DdpError, DdpRepr, RdmapOpcode, ReadRequestRepr, TerminateRepr, TerminatedSegment,
    READ_REQUEST_HEADER_LEN, UNTAGGED_HEADER_LEN,
};
use mpa_ctl_proto::{Completion, CompletionKind, CompletionStatus};
use std::collections::VecDeque;

mod error;
pub(crate) use error::PlacementError;
pub use error::PostError;

/// Receive buffers a connection may have posted at once.
pub const MAX_POSTED: usize = 65_536;
/// Octets of a ULPDU [`Placer::plan`] looks at: the longest header (untagged) plus what
/// follows it for a Terminate or a Read Request.
pub(crate) const PLAN_PREFIX: usize = UNTAGGED_HEADER_LEN + READ_REQUEST_HEADER_LEN;

/// A receive buffer for one untagged message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostedBuf {
    /// Region.
    pub stag: u32,
    /// Offset in the region.
    pub offset: u64,
    /// Octets.
    pub len: u32,
    /// The application's work request id: its completion carries it.
    pub wr_id: u64,
}

/// A protection domain's shared receive queue (verbs' SRQ): buffers every connection attached
/// to it draws from, in posting order, as its Sends need them. Drawn in MSN order by the
/// connection that takes them, so each connection's Sends still fill its buffers in MSN
/// order; a connection that ends gives back what it drew and did not use.
pub trait SharedReceiveQueue: Send + Sync + std::fmt::Debug {
    /// The oldest buffer waiting, if any.
    fn take(&self) -> Option<PostedBuf>;
    /// A buffer drawn and not used goes back (behind the ones waiting); `false` when it
    /// found no room (then its connection completes it as flushed).
    fn give_back(&self, buf: PostedBuf) -> bool;
}

/// What a validated segment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SegmentKind {
    /// RDMA Write or Read Response segment: payload at (STag, TO).
    Tagged {
        /// Opcode.
        opcode: RdmapOpcode,
        /// Region.
        stag: u32,
        /// Tagged offset of the payload's first octet.
        to: u64,
        /// L flag.
        last: bool,
    },
    /// A Send variant: payload into the posted buffer of its MSN at MO.
    Send {
        /// Opcode.
        opcode: RdmapOpcode,
        /// MSN.
        msn: u32,
        /// Message offset.
        mo: u32,
        /// L flag.
        last: bool,
        /// Invalidate STag (Send with Invalidate variants).
        inv_stag: u32,
    },
    /// The peer's Terminate, and the segment of ours it names: the connection ends.
    PeerTerminate(TerminateRepr, Option<TerminatedSegment>),
    /// An RDMA Read Request that passed the Data Source's checks: to be answered.
    ReadRequest(ReadRequest),
}

/// A valid RDMA Read Request (RFC 5040 §4.4): read `size` octets of local region `src_stag`
/// at `src_to` (the region offset: our regions start at TO 0) and send them as a Read
/// Response to the peer's `sink_stag` at `sink_to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadRequest {
    /// Its MSN on queue 1.
    pub(crate) msn: u32,
    /// Its RDMA Read Request Header.
    pub(crate) header: ReadRequestRepr,
}

/// A validated segment: what it is, its payload length, and where the payload goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentPlan {
    /// What it is.
    pub(crate) kind: SegmentKind,
    /// Octets of the ULPDU before the payload.
    pub(crate) header_len: usize,
    /// Payload octets.
    pub(crate) payload_len: usize,
    /// (STag, region offset) of the payload's first octet; `None` when nothing is placed.
    pub(crate) target: Option<(u32, u64)>,
}

/// The placement state of one connection.
#[derive(Debug)]
pub(crate) struct Placer {
    pd: u32,
    version: u8,
    /// Posted receive buffers for QN 0; `recv[0]` is for MSN `front_msn`.
    recv: VecDeque<PostedBuf>,
    /// The domain's shared receive queue the connection draws its buffers from, if attached
    /// (then it posts none of its own).
    shared: Option<std::sync::Arc<dyn SharedReceiveQueue>>,
    front_msn: u32,
    /// The tagged message being completed in order: (STag, TO of its first octet, octets).
    tagged: Option<(u32, u64, u64)>,
    /// The MSN the next Read Request (queue 1) must carry.
    read_msn: u32,
    /// Our RDMA Read Requests sent and not yet answered, oldest first: (sink STag, sink TO,
    /// size). A Read Response must land inside one of them (RFC 5040 §4.5: it answers a
    /// request; a peer must not write into our memory through it otherwise).
    reads_expected: VecDeque<(u32, u64, u64)>,
    /// Our zero-length Read Request RTR is the oldest of `reads_expected`: its (zero-length)
    /// Read Response completes nothing for the consumer.
    rtr_read_expected: bool,
    /// Read Responses to our Read RTR received since [`Placer::take_rtr_answered`].
    rtr_answered: usize,
}

/// Our Read Requests awaiting their Read Response at most (above any ORD we use).
const MAX_EXPECTED_READS: usize = 256;

impl Placer {
    /// Placement for a connection of protection domain `pd` using DDP/RDMAP `version`.
    pub(crate) fn new(pd: u32, version: u8) -> Self {
        Placer {
            pd,
            version,
            recv: VecDeque::new(),
            shared: None,
            // RFC 5041 §5.1: the first MSN of each queue is 1.
            front_msn: 1,
            tagged: None,
            read_msn: 1,
            reads_expected: VecDeque::new(),
            rtr_read_expected: false,
            rtr_answered: 0,
        }
    }

    /// Our zero-length Read Request RTR (RFC 6581 §9.2) went out as the stream's first
    /// FPDU: its zero-length Read Response is expected first, and answers only it.
    pub(crate) fn expect_rtr_read_response(&mut self) -> bool {
        if !self.reads_expected.is_empty() {
            return false;
        }
        self.reads_expected
            .push_back((mpa::endpoint::RTR_STAG, 0, 0));
        self.rtr_read_expected = true;
        true
    }

    /// Read Responses that answered our Read RTR since the last call (each frees the ORD
    /// slot the RTR took; none is a consumer's completion).
    pub(crate) fn take_rtr_answered(&mut self) -> usize {
        std::mem::take(&mut self.rtr_answered)
    }

    /// The peer's RTR, a zero-length message on queue 0 (Send) or queue 1 (Read Request),
    /// took MSN 1 of its queue (RFC 5041 §5.1): the next message there carries MSN 2. No
    /// receive buffer is consumed; the RTR is the provider's, not the consumer's.
    pub(crate) fn rtr_received(&mut self, qn: u32, msn: u32) -> Result<(), PlacementError> {
        let expected = if qn == queue::SEND {
            &mut self.front_msn
        } else {
            &mut self.read_msn
        };
        if msn != *expected {
            return Err(PlacementError::MsnRange {
                msn,
                expected: *expected,
            });
        }
        *expected = expected.wrapping_add(1);
        Ok(())
    }

    /// We sent a Read Request for `size` octets into our `sink_stag` at `sink_to`: its Read
    /// Response may land there. `false` when [`MAX_EXPECTED_READS`] are outstanding already.
    pub(crate) fn expect_read_response(&mut self, sink_stag: u32, sink_to: u64, size: u64) -> bool {
        if self.reads_expected.len() >= MAX_EXPECTED_READS {
            return false;
        }
        self.reads_expected.push_back((sink_stag, sink_to, size));
        true
    }

    /// A Read Request was accepted in order: the next must carry the following MSN.
    pub(crate) fn read_accepted(&mut self) {
        self.read_msn = self.read_msn.wrapping_add(1);
    }

    /// The protection domain.
    pub(crate) fn pd(&self) -> u32 {
        self.pd
    }

    /// Posted buffers not yet used.
    pub(crate) fn posted(&self) -> usize {
        self.recv.len()
    }

    /// Takes the posted buffers not yet used (the connection ended: they are flushed); those
    /// drawn from a shared receive queue go back to it instead.
    pub(crate) fn take_posted(&mut self) -> VecDeque<PostedBuf> {
        let bufs = std::mem::take(&mut self.recv);
        match &self.shared {
            Some(q) => bufs.into_iter().filter(|&b| !q.give_back(b)).collect(),
            None => bufs,
        }
    }

    /// Draws every buffer from now on from `q` (none of its own may be posted, nor be
    /// posted already).
    pub(crate) fn attach_shared(
        &mut self,
        q: std::sync::Arc<dyn SharedReceiveQueue>,
    ) -> Result<(), PostError> {
        if !self.recv.is_empty() {
            return Err(PostError {
                posted: self.recv.len(),
                more: 0,
            });
        }
        self.shared = Some(q);
        Ok(())
    }

    /// Whether it draws from a shared receive queue.
    pub(crate) fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// The Send `error` found no buffer: draws from the shared receive queue, in MSN order,
    /// up to the one it needs; whether it has it now (then plan again).
    pub(crate) fn draw_for(&mut self, error: &PlacementError) -> bool {
        let (PlacementError::NoBuffer { msn, .. }, Some(q)) = (error, &self.shared) else {
            return false;
        };
        let idx = msn.wrapping_sub(self.front_msn) as usize;
        if idx >= MAX_POSTED {
            return false;
        }
        while self.recv.len() <= idx {
            match q.take() {
                Some(b) => self.recv.push_back(b),
                None => return false,
            }
        }
        true
    }

    /// Appends receive buffers (in MSN order); refused beyond [`MAX_POSTED`].
    pub(crate) fn post(
        &mut self,
        bufs: impl ExactSizeIterator<Item = PostedBuf>,
    ) -> Result<(), PostError> {
        if self.recv.len() + bufs.len() > MAX_POSTED {
            return Err(PostError {
                posted: self.recv.len(),
                more: bufs.len(),
            });
        }
        self.recv.extend(bufs);
        Ok(())
    }

    /// Validates a ULPDU whose first octets are `head` (at least [`PLAN_PREFIX`] when the
    /// ULPDU is that long) and whose length is `ulpdu_len`. `in_order`: the segment is the
    /// next one of the stream (untagged messages must then be the next MSN).
    pub(crate) fn plan<R: Regions + ?Sized>(
        &self,
        regions: &R,
        head: &[u8],
        ulpdu_len: usize,
        in_order: bool,
    ) -> Result<SegmentPlan, PlacementError> {
        let (repr, header_len) = match DdpRepr::parse(head, self.version) {
            Ok(x) => x,
            Err(DdpError::Version {
                ddp,
                rdmap,
                expected,
            }) => {
                let tagged = head.first().is_some_and(|c| c & 0x80 != 0);
                return Err(if ddp != expected {
                    PlacementError::DdpVersion {
                        got: ddp,
                        expected,
                        tagged,
                    }
                } else {
                    PlacementError::RdmapVersion {
                        got: rdmap,
                        expected,
                    }
                });
            }
            Err(DdpError::Truncated(_)) => return Err(PlacementError::Truncated { ulpdu_len }),
        };
        let payload_len = ulpdu_len - header_len;
        let plan = |kind, target| SegmentPlan {
            kind,
            header_len,
            payload_len,
            target,
        };
        match repr {
            DdpRepr::Tagged {
                last,
                opcode,
                stag,
                to,
            } => {
                if !matches!(
                    opcode,
                    RdmapOpcode::RdmaWrite | RdmapOpcode::RdmaReadResponse
                ) {
                    return Err(PlacementError::UnexpectedOpcode {
                        opcode,
                        tagged: true,
                    });
                }
                let kind = SegmentKind::Tagged {
                    opcode,
                    stag,
                    to,
                    last,
                };
                // RFC 5041 §5.3: STag and TO of a zero-length tagged segment are not checked.
                // A zero-length Read Response still answers a request (RFC 5040 §4.5): with
                // none of ours outstanding it is unsolicited.
                if payload_len == 0 {
                    if opcode == RdmapOpcode::RdmaReadResponse && self.reads_expected.is_empty() {
                        return Err(PlacementError::UnsolicitedReadResponse { stag, to, len: 0 });
                    }
                    return Ok(plan(kind, None));
                }
                let Some(r) = regions.info(stag) else {
                    return Err(PlacementError::InvalidStag { stag });
                };
                if r.pd != self.pd {
                    return Err(PlacementError::StagNotAssociated {
                        stag,
                        region_pd: r.pd,
                        stream_pd: self.pd,
                    });
                }
                let Some(end) = to.checked_add(payload_len as u64) else {
                    return Err(PlacementError::ToWrap {
                        to,
                        len: payload_len,
                    });
                };
                if end > r.len {
                    return Err(PlacementError::Bounds {
                        stag,
                        to,
                        len: payload_len,
                        region_len: r.len,
                    });
                }
                if opcode == RdmapOpcode::RdmaWrite && !r.remote_write {
                    return Err(PlacementError::NoRemoteWrite { stag });
                }
                if opcode == RdmapOpcode::RdmaReadResponse {
                    // In order, it answers the oldest request (responses come in request
                    // order, RFC 5040 §5.5 rule 20); ahead of the stream, any outstanding one.
                    let inside = |&(s, t, n): &(u32, u64, u64)| {
                        s == stag && to >= t && end <= t.saturating_add(n)
                    };
                    let ok = if in_order {
                        self.reads_expected.front().is_some_and(inside)
                    } else {
                        self.reads_expected.iter().any(inside)
                    };
                    if !ok {
                        return Err(PlacementError::UnsolicitedReadResponse {
                            stag,
                            to,
                            len: payload_len,
                        });
                    }
                }
                Ok(plan(kind, Some((stag, to))))
            }
            DdpRepr::Untagged {
                last,
                opcode,
                inv_stag,
                qn,
                msn,
                mo,
            } => {
                let want_qn = match opcode {
                    RdmapOpcode::Send
                    | RdmapOpcode::SendWithInvalidate
                    | RdmapOpcode::SendWithSolicitedEvent
                    | RdmapOpcode::SendWithSolicitedEventAndInvalidate => queue::SEND,
                    RdmapOpcode::RdmaReadRequest => queue::READ_REQUEST,
                    RdmapOpcode::Terminate => queue::TERMINATE,
                    _ => {
                        return Err(PlacementError::UnexpectedOpcode {
                            opcode,
                            tagged: false,
                        })
                    }
                };
                if qn != want_qn {
                    return Err(PlacementError::InvalidQn {
                        opcode,
                        qn,
                        expected: want_qn,
                    });
                }
                match opcode {
                    RdmapOpcode::Terminate => {
                        let body = head.get(header_len..).unwrap_or_default();
                        let t = TerminateRepr::parse(body).unwrap_or(TerminateRepr {
                            layer: 0,
                            error_type: 0,
                            error_code: 0,
                        });
                        let named = TerminateRepr::terminated_segment(body);
                        return Ok(plan(SegmentKind::PeerTerminate(t, named), None));
                    }
                    RdmapOpcode::RdmaReadRequest => {
                        // RFC 5041 §5.1: queue 1 has its own MSNs, from 1, in order.
                        if msn != self.read_msn {
                            return Err(PlacementError::MsnRange {
                                msn,
                                expected: self.read_msn,
                            });
                        }
                        let header = self.check_read_request(
                            head.get(header_len..header_len + READ_REQUEST_HEADER_LEN),
                            ulpdu_len,
                            regions,
                        )?;
                        return Ok(plan(
                            SegmentKind::ReadRequest(ReadRequest { msn, header }),
                            None,
                        ));
                    }
                    _ => {}
                }
                let idx = msn.wrapping_sub(self.front_msn);
                if idx >= 1 << 31 || (in_order && idx != 0) {
                    return Err(PlacementError::MsnRange {
                        msn,
                        expected: self.front_msn,
                    });
                }
                let Some(buf) = self.recv.get(idx as usize) else {
                    return Err(PlacementError::NoBuffer {
                        msn,
                        posted: self.recv.len(),
                        front: self.front_msn,
                    });
                };
                if mo > buf.len {
                    return Err(PlacementError::InvalidMo {
                        mo,
                        buf_len: buf.len,
                    });
                }
                if u64::from(mo) + payload_len as u64 > u64::from(buf.len) {
                    return Err(PlacementError::TooLong {
                        mo,
                        len: payload_len,
                        buf_len: buf.len,
                    });
                }
                let target = (payload_len > 0).then_some((buf.stag, buf.offset + u64::from(mo)));
                // The buffer's region was checked when it was posted; it must still exist.
                if let Some((stag, _)) = target {
                    if regions.info(stag).is_none() {
                        return Err(PlacementError::BufferRegionGone { msn, stag });
                    }
                }
                Ok(plan(
                    SegmentKind::Send {
                        opcode,
                        msn,
                        mo,
                        last,
                        inv_stag,
                    },
                    target,
                ))
            }
        }
    }

    /// Copies the payload of `ulpdu` (validated by `plan`) into its region. Returns whether
    /// anything was written.
    pub(crate) fn place<R: Regions + ?Sized>(
        regions: &mut R,
        plan: &SegmentPlan,
        ulpdu: &Ulpdu<'_>,
    ) -> bool {
        let Some((stag, off)) = plan.target else {
            return false;
        };
        // One region lookup and bounds check for the message's payload, however many pieces
        // (between markers, across segments) it lies in.
        let mut skip = plan.header_len;
        let pieces = ulpdu.pieces().filter_map(|piece| {
            let p = piece.get(skip.min(piece.len())..).unwrap_or(&[]);
            skip -= skip.min(piece.len());
            (!p.is_empty()).then_some(p)
        });
        regions.write_pieces(stag, off, plan.payload_len, pieces)
    }

    /// Whether `plan`, the next segment in stream order, continues the tagged message being
    /// completed (if it is tagged and one is): the same STag, at the TO right after the
    /// octets so far. Zero-length segments are not checked (RFC 5041 §5.3), nor is a segment
    /// after only zero-length ones. Call before placing an in-order segment;
    /// [`Placer::complete`] checks again.
    pub(crate) fn continues(&self, plan: &SegmentPlan) -> Result<(), PlacementError> {
        let SegmentKind::Tagged { stag, to, .. } = plan.kind else {
            return Ok(());
        };
        match self.tagged {
            Some((s, first, n)) if n > 0 && plan.payload_len > 0 => {
                let expected_to = first.wrapping_add(n);
                if stag == s && to == expected_to {
                    Ok(())
                } else {
                    Err(PlacementError::TaggedDiscontinuity {
                        stag,
                        to,
                        expected_stag: s,
                        expected_to,
                    })
                }
            }
            _ => Ok(()),
        }
    }

    /// The Data Source's checks of an RDMA Read Request (RFC 5040 §4.4, §5.2.1): its header
    /// present, then the source STag valid, of this stream's domain, TO + size not wrapping,
    /// inside the region, and readable by the peer. `header`: the [`READ_REQUEST_HEADER_LEN`]
    /// octets after the DDP header, `None` when the ULPDU is shorter. The MSN is the caller's.
    fn check_read_request<R: Regions + ?Sized>(
        &self,
        header: Option<&[u8]>,
        ulpdu_len: usize,
        regions: &R,
    ) -> Result<ReadRequestRepr, PlacementError> {
        let Some(h) = header.and_then(|h| ReadRequestRepr::parse(h).ok()) else {
            return Err(PlacementError::Truncated { ulpdu_len });
        };
        let (size, stag, to) = (h.size, h.src_stag, h.src_to);
        let Some(r) = regions.info(stag) else {
            return Err(PlacementError::ReadInvalidStag { stag });
        };
        if r.pd != self.pd {
            return Err(PlacementError::ReadStagNotAssociated {
                stag,
                region_pd: r.pd,
                stream_pd: self.pd,
            });
        }
        let Some(end) = to.checked_add(u64::from(size)) else {
            return Err(PlacementError::ReadToWrap { to, len: size });
        };
        if end > r.len {
            return Err(PlacementError::ReadBounds {
                stag,
                to,
                len: size,
                region_len: r.len,
            });
        }
        if !r.remote_read {
            return Err(PlacementError::NoRemoteRead { stag });
        }
        let sink_to = h.sink_to;
        // The Read Response is a tagged message at the sink TO: one that would wrap cannot
        // be sent, so the request cannot be served (RFC 5041 §7.2's TO wrap, seen from the
        // Data Source).
        if sink_to.checked_add(u64::from(size)).is_none() {
            return Err(PlacementError::ReadSinkToWrap {
                to: sink_to,
                len: size,
            });
        }
        Ok(h)
    }

    /// Advances the in-order state past a placed segment; returns the completion of the
    /// message it ends, if any, or the error when the segment does not continue its tagged
    /// message ([`Placer::continues`]; the state is then left as it was).
    // Inlined for the same reason as `parse_tcp_frame`: its result, read back from memory
    // right after the placement copy, waited for the region stores on a failed store forward.
    #[inline(always)]
    pub(crate) fn complete(
        &mut self,
        plan: &SegmentPlan,
        flow_id: u64,
    ) -> Result<Option<Completion>, PlacementError> {
        self.continues(plan)?;
        Ok(self.advance(plan, flow_id))
    }

    #[inline(always)]
    fn advance(&mut self, plan: &SegmentPlan, flow_id: u64) -> Option<Completion> {
        match plan.kind {
            SegmentKind::Tagged {
                opcode,
                stag,
                to,
                last,
            } => {
                let (s, first, n) = match self.tagged.take() {
                    // Only zero-length segments so far: this one names the message.
                    Some((_, _, 0)) | None => (stag, to, 0),
                    Some(t) => t,
                };
                let n = n + plan.payload_len as u64;
                if !last {
                    self.tagged = Some((s, first, n));
                    return None;
                }
                if opcode == RdmapOpcode::RdmaReadResponse {
                    // Its request, the oldest (responses come in request order; `plan`
                    // checked it lands there), is answered.
                    self.reads_expected.pop_front();
                    if std::mem::take(&mut self.rtr_read_expected) {
                        self.rtr_answered += 1;
                        return None;
                    }
                }
                Some(Completion {
                    flow_id,
                    kind: if opcode == RdmapOpcode::RdmaReadResponse {
                        CompletionKind::ReadResponsePlaced
                    } else {
                        CompletionKind::WritePlaced
                    },
                    stag: s,
                    offset: first,
                    len: n,
                    msn: None,
                    invalidate_stag: None,
                    wr_id: 0,
                    status: CompletionStatus::Success,
                })
            }
            SegmentKind::Send {
                opcode,
                msn,
                mo,
                last,
                inv_stag,
            } => {
                if !last {
                    return None;
                }
                let buf = self.recv.pop_front()?;
                self.front_msn = self.front_msn.wrapping_add(1);
                Some(Completion {
                    flow_id,
                    wr_id: buf.wr_id,
                    status: CompletionStatus::Success,
                    kind: CompletionKind::SendArrived,
                    stag: buf.stag,
                    offset: buf.offset,
                    len: u64::from(mo) + plan.payload_len as u64,
                    msn: Some(msn),
                    invalidate_stag: matches!(
                        opcode,
                        RdmapOpcode::SendWithInvalidate
                            | RdmapOpcode::SendWithSolicitedEventAndInvalidate
                    )
                    .then_some(inv_stag),
                })
            }
            SegmentKind::PeerTerminate(..) | SegmentKind::ReadRequest(_) => None,
        }
    }
}

#[cfg(test)]
mod tests;
