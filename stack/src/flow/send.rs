//! The send side of a flow: what a consumer posts (Writes, Sends, Reads), the Read
//! Responses the flow owes its peer, and where its frames are built.

use super::work::PostedWork;
use super::*;

/// A consumer's post of `count` messages of `len` octets each, back to back in one region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendPost {
    /// Write or Send.
    pub op: SendOp,
    /// Local region to read.
    pub stag: u32,
    /// Offset of the first message's octets.
    pub offset: u64,
    /// Octets per message.
    pub len: u64,
    /// Messages.
    pub count: u32,
    /// The application's work request id: message `i` completes with `wr_id + i`.
    pub wr_id: u64,
    /// Complete when done; otherwise only a failure completes (as `IBV_SEND_SIGNALED`).
    pub signaled: bool,
}

/// What a [`SendPost`] sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// RDMA Writes to the peer's `sink_stag`, the first at `sink_to`.
    Write {
        /// The peer's STag.
        sink_stag: u32,
        /// Tagged offset of the first write.
        sink_to: u64,
    },
    /// Sends on queue 0.
    Send,
    /// RDMA Read Requests of the peer's `src_stag` from `src_to` (read `i` at
    /// `src_to + i·len`) into the post's region (its `stag`, `offset + i·len`). At most
    /// the flow's ORD (`MAX_OUTBOUND_READS` or the negotiated one) are outstanding; the
    /// rest wait in order.
    Read {
        /// The peer's STag (advertised to us).
        src_stag: u32,
        /// Its tagged offset of the first read.
        src_to: u64,
    },
}

/// Outbound RDMA Read Requests outstanding at most (our ORD, RFC 5040 §6.1) when the
/// startup negotiated none: at or below what common iWARP peers accept (and `mpa-peer
/// listen`'s bound). A negotiated ORD is used up to this.
pub(crate) const MAX_OUTBOUND_READS: usize = mpa_ctl_proto::DATAPATH_MAX_ORD as usize;

/// Reads posted and not yet sent, per flow, at most.
const MAX_WAITING_READS: usize = 4096;

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

    /// Queues a consumer's Writes or Sends reading `region` (the worker's entry for
    /// `post.stag`); all or none. Returns the first Send's MSN (for Sends).
    pub fn post(&mut self, region: &Region, post: &SendPost) -> Result<Option<u32>, PostError> {
        if !self.tcp.can_queue() || self.ending.is_some() || self.ended.is_some() {
            return Err(PostError::Closed);
        }
        let src = self.tcp.source_mut().inner_mut();
        let count = u64::from(post.count);
        // All or none: the whole run is checked before the first is queued.
        let total = post
            .len
            .checked_mul(count)
            .ok_or(PostError::TooLong { len: u64::MAX })?;
        let end = post.offset.checked_add(total);
        if end.is_none_or(|e| e > region.info.len) {
            return Err(PostError::OutOfBounds {
                stag: post.stag,
                offset: post.offset,
                len: total,
                region_len: region.info.len,
            });
        }
        if let SendOp::Write { sink_to, .. } = post.op {
            if sink_to.checked_add(total).is_none() {
                return Err(PostError::TooLong { len: total });
            }
        }
        if let SendOp::Read { src_to, .. } = post.op {
            if post.len == 0 || post.len > u64::from(u32::MAX) {
                return Err(PostError::ReadSize { len: post.len });
            }
            if src_to.checked_add(total).is_none() {
                return Err(PostError::TooLong { len: total });
            }
            if let Some(pd) = self.rx.pd() {
                if region.info.pd != pd {
                    return Err(PostError::WrongDomain {
                        stag: post.stag,
                        region_pd: region.info.pd,
                        pd,
                    });
                }
            }
            if self.ord == 0 {
                return Err(PostError::NoReads);
            }
            if self.reads_waiting.len() + post.count as usize > MAX_WAITING_READS {
                return Err(PostError::QueueFull(MAX_WAITING_READS));
            }
            return Ok(self.queue_reads(post));
        }
        let room = src.max_messages().saturating_sub(src.queued_messages());
        if post.count as usize > room {
            return Err(PostError::QueueFull(src.max_messages()));
        }
        src.check_budget(total)?;
        src.regions_mut().insert(region.clone());
        let mut first_msn = None;
        for i in 0..count {
            let offset = post.offset + i * post.len;
            let (msg, kind, msn, sink) = match post.op {
                SendOp::Write { sink_stag, sink_to } => {
                    let to = sink_to + i * post.len;
                    let id = src.post_write(post.stag, offset, post.len, sink_stag, to)?;
                    (id, CompletionKind::WriteSent, None, Some((sink_stag, to)))
                }
                SendOp::Send => {
                    let (id, msn) = src.post_send(post.stag, offset, post.len)?;
                    first_msn.get_or_insert(msn);
                    (id, CompletionKind::SendSent, Some(msn), None)
                }
                SendOp::Read { .. } => continue,
            };
            self.work.sends.push_back(PostedWork {
                msg,
                wr_id: post.wr_id.wrapping_add(i),
                signaled: post.signaled,
                kind,
                stag: post.stag,
                offset,
                len: post.len,
                msn,
                sink,
                read_msn: None,
            });
        }
        Ok(first_msn)
    }

    /// Queues checked reads and sends what ORD allows; `None` (reads have no Send MSN).
    fn queue_reads(&mut self, post: &SendPost) -> Option<u32> {
        let SendOp::Read { src_stag, src_to } = post.op else {
            return None;
        };
        for i in 0..u64::from(post.count) {
            self.reads_waiting.push_back(ReadRequestRepr {
                sink_stag: post.stag,
                sink_to: post.offset + i * post.len,
                size: post.len as u32,
                src_stag,
                src_to: src_to + i * post.len,
            });
            self.work.reads.push_back(PostedWork {
                msg: 0,
                wr_id: post.wr_id.wrapping_add(i),
                signaled: post.signaled,
                kind: CompletionKind::ReadResponsePlaced,
                stag: post.stag,
                offset: post.offset + i * post.len,
                len: post.len,
                msn: None,
                sink: None,
                read_msn: None,
            });
        }
        self.release_reads();
        None
    }

    /// Sends waiting Read Requests while fewer than the flow's ORD are outstanding.
    pub(super) fn release_reads(&mut self) {
        while self.reads_in_flight < self.ord && self.tcp.can_queue() {
            let Some(r) = self.reads_waiting.pop_front() else {
                break;
            };
            if !self
                .rx
                .expect_read_response(r.sink_stag, r.sink_to, u64::from(r.size))
            {
                tracing::warn!(
                    flow = self.id,
                    "Read Request not sent: its answer cannot be tracked"
                );
                self.reads_waiting.push_front(r);
                break;
            }
            let src = self.tcp.source_mut().inner_mut();
            match src.post_read_request(&r) {
                Ok((_, msn)) => {
                    self.reads_in_flight += 1;
                    // Reads go out in the order they were posted: the first not yet sent.
                    if let Some(w) = self.work.reads.iter_mut().find(|w| w.read_msn.is_none()) {
                        w.read_msn = Some(msn);
                    }
                }
                Err(e) => {
                    tracing::warn!(flow = self.id, %e, "Read Request not queued");
                    break;
                }
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
