//! The send side of a flow: what a consumer posts (Writes, Sends, Reads), the Read
//! Responses the flow owes its peer, and where its frames are built.

use super::work::PostedWork;
use super::*;
use mpa_ctl_proto::ring::post::{PostOp, SgList, WorkRequest};
use mpa_ctl_proto::CompletionStatus;

/// Message `i`'s entries of a post of `len`-octet messages: with one entry, its `i`-th
/// slice; a list of more is one message.
fn message_sg(sg: &SgList, i: u64, len: u64) -> SgList {
    match sg.entries() {
        [one] => SgList::one(one.stag, one.offset + i * len, len),
        _ => *sg,
    }
}

/// Message `i`'s op of a post of `len`-octet messages: a Write's `i`-th sink range.
fn message_op(op: PostOp, i: u64, len: u64) -> PostOp {
    match op {
        PostOp::Write { sink_stag, sink_to } => PostOp::Write {
            sink_stag,
            sink_to: sink_to + i * len,
        },
        op => op,
    }
}

/// What message `i` (of `len` octets, from `sg`) of `post` completes with.
fn posted_work(
    post: &WorkRequest,
    i: u64,
    len: u64,
    sg: &SgList,
    msg: Option<u64>,
    msn: Option<u32>,
) -> PostedWork {
    let first = sg.first();
    let (kind, sink) = match post.op {
        PostOp::Write { sink_stag, sink_to } => (
            CompletionKind::WriteSent,
            Some((sink_stag, sink_to + i * len)),
        ),
        PostOp::Send => (CompletionKind::SendSent, None),
        PostOp::Read { .. } => (CompletionKind::ReadResponsePlaced, None),
    };
    PostedWork {
        msg,
        wr_id: post.wr_id.wrapping_add(i),
        signaled: post.signaled,
        kind,
        stag: first.stag,
        offset: first.offset,
        len,
        msn,
        sink,
        read_msn: None,
    }
}

/// Outbound RDMA Read Requests outstanding at most (our ORD, RFC 5040 §6.1) when the
/// startup negotiated none: at or below what common iWARP peers accept (and `mpa-peer
/// listen`'s bound). A negotiated ORD is used up to this.
pub(crate) const MAX_OUTBOUND_READS: usize = mpa_ctl_proto::DATAPATH_MAX_ORD as usize;

/// Work requests' messages waiting per flow at most (Reads for ORD room, and whatever was
/// posted behind them or behind a fence).
const MAX_WAITING: usize = 4096;

/// A message posted and not yet given to the sender: it keeps its place behind a Read that
/// waits for ORD room or behind a fence (verbs start a queue pair's work requests in order).
#[derive(Debug, Clone, Copy)]
pub(super) enum Waiting {
    /// A Read Request.
    Read {
        req: ReadRequestRepr,
        /// Not before every earlier Read is answered.
        fence: bool,
    },
    /// A Write or Send.
    Message {
        op: PostOp,
        sg: SgList,
        solicited: bool,
        /// Not before every earlier Read is answered.
        fence: bool,
    },
}

/// Where a TX frame is built: the UMEM frame itself in the worker (one copy from the region),
/// a buffer in tests.
pub trait FrameSink {
    /// Frames that can be queued now.
    fn room(&mut self) -> usize;
    /// Longest frame a buffer holds.
    fn frame_capacity(&self) -> usize;
    /// Builds one frame in a free buffer: `build` writes it and returns its length (0:
    /// nothing, the buffer stays free). `false` when no buffer was free.
    fn send_with(&mut self, build: impl FnOnce(&mut [u8]) -> usize) -> bool;
}

/// Octets of an in-memory frame buffer ([`FrameVec`], the datapath's in-memory ring): a
/// jumbo frame (MTU 9000) with room to spare.
pub const MEM_FRAME_CAPACITY: usize = 9216;

/// A [`FrameSink`] that keeps every frame (tests, in-memory harnesses).
#[derive(Debug, Clone, Default)]
pub struct FrameVec {
    /// The frames built, in order.
    pub frames: Vec<Vec<u8>>,
}

impl FrameSink for FrameVec {
    fn room(&mut self) -> usize {
        usize::MAX
    }

    fn frame_capacity(&self) -> usize {
        MEM_FRAME_CAPACITY
    }

    fn send_with(&mut self, build: impl FnOnce(&mut [u8]) -> usize) -> bool {
        let mut b = vec![0u8; MEM_FRAME_CAPACITY];
        let n = build(&mut b);
        if n == 0 {
            return false;
        }
        b.truncate(n);
        self.frames.push(b);
        true
    }
}

impl Flow {
    /// Queues one of the flow's own ULPDUs (Terminate, RTR, Read Response to an RTR) as an
    /// FPDU after what is queued. Such ULPDUs are small; one that cannot be queued (an EMSS
    /// below it) is logged and dropped, and the flow's close still follows.
    pub(super) fn send_ulpdu(&mut self, ulpdu: &[u8]) {
        if !self.tcp.can_queue() {
            return;
        }
        if let Err(e) = self.tcp.source_mut().inner_mut().post_ulpdu(ulpdu) {
            tracing::warn!(flow = self.id, %e, "cannot queue the flow's own FPDU");
        }
    }

    /// Queues a consumer's work request on the flow, all of its messages or none, every
    /// entry checked against `regions` (the worker's table) now. A message goes to the
    /// sender at once unless something posted before it still waits or it is fenced behind
    /// a Read outstanding; then it waits its turn (docs/consumer.md, "Work requests"). Returns the
    /// first Send's MSN when the Sends went out at once.
    pub fn post(
        &mut self,
        regions: &RegionTable,
        post: &WorkRequest,
    ) -> Result<Option<u32>, PostError> {
        if !self.tcp.can_queue() || self.ending.is_some() || self.ended.is_some() {
            return Err(PostError::Closed);
        }
        let entries = post.sg_list.entries();
        if post.count == 0 || (entries.len() > 1 && post.count > 1) {
            return Err(PostError::Gather);
        }
        // All or none: the whole run is checked before the first is queued.
        let count = u64::from(post.count);
        let mut total = 0u64;
        for e in entries {
            let region = regions
                .get(e.stag)
                .ok_or(PostError::UnknownRegion { stag: e.stag })?;
            let span = e
                .len
                .checked_mul(count)
                .ok_or(PostError::TooLong { len: u64::MAX })?;
            if e.offset
                .checked_add(span)
                .is_none_or(|end| end > region.info.len)
            {
                return Err(PostError::OutOfBounds {
                    stag: e.stag,
                    offset: e.offset,
                    len: span,
                    region_len: region.info.len,
                });
            }
            if let Some(pd) = self.rx.pd() {
                if region.info.pd != pd {
                    return Err(PostError::WrongDomain {
                        stag: e.stag,
                        region_pd: region.info.pd,
                        pd,
                    });
                }
            }
            total = total
                .checked_add(span)
                .ok_or(PostError::TooLong { len: u64::MAX })?;
        }
        // Octets per message.
        let len = total / count;
        match post.op {
            PostOp::Write { sink_to, .. } if sink_to.checked_add(total).is_none() => {
                return Err(PostError::TooLong { len: total });
            }
            PostOp::Send if len > u64::from(u32::MAX) + 1 => {
                return Err(PostError::TooLong { len });
            }
            PostOp::Read { src_to, .. } => {
                if entries.len() > 1 {
                    return Err(PostError::Gather);
                }
                if len == 0 || len > u64::from(u32::MAX) {
                    return Err(PostError::ReadSize { len });
                }
                if src_to.checked_add(total).is_none() {
                    return Err(PostError::TooLong { len: total });
                }
                if self.ord == 0 {
                    return Err(PostError::NoReads);
                }
            }
            _ => {}
        }
        let src = self.tcp.source_mut().inner_mut();
        for e in entries {
            if let Some(region) = regions.get(e.stag) {
                src.regions_mut().insert(region.clone());
            }
        }
        let wait = matches!(post.op, PostOp::Read { .. })
            || !self.waiting.is_empty()
            || (post.fence && self.reads_in_flight > 0);
        if wait {
            if self.waiting.len() + post.count as usize > MAX_WAITING {
                return Err(PostError::QueueFull(MAX_WAITING));
            }
            self.queue_waiting(post, len);
            return Ok(None);
        }
        let src = self.tcp.source_mut().inner_mut();
        let room = src.max_messages().saturating_sub(src.queued_messages());
        if post.count as usize > room {
            return Err(PostError::QueueFull(src.max_messages()));
        }
        src.check_budget(total)?;
        let mut first_msn = None;
        for i in 0..count {
            let sg = message_sg(&post.sg_list, i, len);
            let (msg, msn) = self.send_message(message_op(post.op, i, len), &sg, post.solicited)?;
            first_msn = first_msn.or(msn);
            self.work
                .sends
                .push_back(posted_work(post, i, len, &sg, Some(msg), msn));
        }
        Ok(first_msn)
    }

    /// Gives one Write or Send to the sender: its id, and a Send's MSN.
    fn send_message(
        &mut self,
        op: PostOp,
        sg: &SgList,
        solicited: bool,
    ) -> Result<(u64, Option<u32>), PostError> {
        let src = self.tcp.source_mut().inner_mut();
        match op {
            PostOp::Write { sink_stag, sink_to } => {
                Ok((src.post_write_from(sg, sink_stag, sink_to)?, None))
            }
            PostOp::Send => {
                let (id, msn) = src.post_send_from(sg, solicited)?;
                Ok((id, Some(msn)))
            }
            PostOp::Read { .. } => Err(PostError::Gather),
        }
    }

    /// Puts a checked post's messages behind what waits, and sends what may go.
    fn queue_waiting(&mut self, post: &WorkRequest, len: u64) {
        for i in 0..u64::from(post.count) {
            let sg = message_sg(&post.sg_list, i, len);
            let fence = post.fence && i == 0;
            let w = match post.op {
                PostOp::Read { src_stag, src_to } => {
                    let first = sg.first();
                    self.work
                        .reads
                        .push_back(posted_work(post, i, len, &sg, None, None));
                    Waiting::Read {
                        req: ReadRequestRepr {
                            sink_stag: first.stag,
                            sink_to: first.offset,
                            size: len as u32,
                            src_stag,
                            src_to: src_to + i * len,
                        },
                        fence,
                    }
                }
                op => {
                    self.work
                        .sends
                        .push_back(posted_work(post, i, len, &sg, None, None));
                    Waiting::Message {
                        op: message_op(op, i, len),
                        sg,
                        solicited: post.solicited,
                        fence,
                    }
                }
            };
            self.waiting.push_back(w);
        }
        self.release_waiting();
    }

    /// Gives the sender what waits, in order, while it may go: a Read while fewer than the
    /// flow's ORD are outstanding, a fenced request once every earlier Read is answered, a
    /// Write or Send while the sender has room (otherwise it waits for acknowledgments). A
    /// message whose region went meanwhile fails with a local protection error.
    pub(super) fn release_waiting(&mut self) {
        while let Some(&w) = self.waiting.front() {
            if !self.tcp.can_queue() {
                break;
            }
            match w {
                Waiting::Read { req, fence } => {
                    if self.reads_in_flight >= self.ord || (fence && self.reads_in_flight > 0) {
                        break;
                    }
                    if !self.send_read(&req) {
                        break;
                    }
                }
                Waiting::Message {
                    op,
                    sg,
                    solicited,
                    fence,
                } => {
                    if fence && self.reads_in_flight > 0 {
                        break;
                    }
                    match self.send_message(op, &sg, solicited) {
                        Ok((msg, msn)) => {
                            if let Some(p) = self.work.sends.iter_mut().find(|p| p.msg.is_none()) {
                                p.msg = Some(msg);
                                p.msn = msn;
                            }
                        }
                        Err(PostError::QueueFull(_) | PostError::SendBudget { .. }) => break,
                        Err(e) => {
                            tracing::debug!(flow = self.id, %e, "waiting message failed");
                            if let Some(i) = self.work.sends.iter().position(|p| p.msg.is_none()) {
                                if let Some(p) = self.work.sends.remove(i) {
                                    self.work.flushed.push_back(
                                        p.completion(self.id, CompletionStatus::LocalProtection),
                                    );
                                }
                            }
                        }
                    }
                }
            }
            self.waiting.pop_front();
        }
    }

    /// Sends one Read Request (room checked); `false` when it cannot go now.
    fn send_read(&mut self, r: &ReadRequestRepr) -> bool {
        if !self
            .rx
            .expect_read_response(r.sink_stag, r.sink_to, u64::from(r.size))
        {
            tracing::warn!(
                flow = self.id,
                "Read Request not sent: its answer cannot be tracked"
            );
            return false;
        }
        let src = self.tcp.source_mut().inner_mut();
        match src.post_read_request(r) {
            Ok((_, msn)) => {
                self.reads_in_flight += 1;
                // Reads go out in the order they were posted: the first not yet sent.
                if let Some(w) = self.work.reads.iter_mut().find(|w| w.read_msn.is_none()) {
                    w.read_msn = Some(msn);
                }
                true
            }
            Err(e) => {
                tracing::warn!(flow = self.id, %e, "Read Request not queued");
                false
            }
        }
    }

    /// Queues the Read Response to a Read Request the receiver accepted (its checks passed
    /// against `regions` a moment ago: the region is there). The response reads the region
    /// when its segments are written, like a Write.
    pub(super) fn serve_read(&mut self, r: &ReadRequest, regions: &RegionTable) {
        if !self.tcp.can_queue() {
            return;
        }
        let r = &r.header;
        let Some(region) = regions.get(r.src_stag) else {
            return;
        };
        let src = self.tcp.source_mut().inner_mut();
        src.regions_mut().insert(region.clone());
        let posted = src.post_read_response(
            r.src_stag,
            r.src_to,
            u64::from(r.size),
            r.sink_stag,
            r.sink_to,
        );
        match posted {
            Ok(_) => self.reads_served += 1,
            Err(e) => tracing::warn!(flow = self.id, %e, "Read Response not queued"),
        }
    }

    /// A region was destroyed: a message still reading it fails the flow when its octets are
    /// next needed (never wrong octets).
    pub fn forget_region(&mut self, stag: u32) {
        self.tcp.source_mut().inner_mut().regions_mut().remove(stag);
    }

    /// Whether the flow has octets it could send now if TX frames allowed.
    pub fn wants_to_send(&self) -> bool {
        let sent = self.tcp.snd_nxt().distance_from(self.tcp.snd_una()) as usize;
        sent < self.tcp.source().queued()
    }
}
