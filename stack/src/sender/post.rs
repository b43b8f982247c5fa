//! Posting: each message checked (region, domain, bounds, DDP field sizes) and laid out
//! at once as FPDUs of the stream.

use super::*;
use mpa::endpoint::rtr_ulpdu;
use mpa::startup::RtrType;
use mpa::wire::ddp::ReadRequestRepr;
use mpa_ctl_proto::ring::post::SgList;

impl<R: Regions> FpduSource<R> {
    /// Queues an RDMA Write of `len` octets at `src_offset` of local region `src_stag` to
    /// the peer's `sink_stag` at tagged offset `sink_to`; returns its id.
    pub(crate) fn post_write(
        &mut self,
        src_stag: u32,
        src_offset: u64,
        len: u64,
        sink_stag: u32,
        sink_to: u64,
    ) -> Result<u64, PostError> {
        if sink_to.checked_add(len).is_none() {
            return Err(PostError::TooLong { len });
        }
        self.post_write_from(&SgList::one(src_stag, src_offset, len), sink_stag, sink_to)
    }

    /// Queues an RDMA Write of the octets of `sg`'s entries one after the other to the
    /// peer's `sink_stag` at tagged offset `sink_to`; returns its id.
    pub(crate) fn post_write_from(
        &mut self,
        sg: &SgList,
        sink_stag: u32,
        sink_to: u64,
    ) -> Result<u64, PostError> {
        let len = sg.total_len().ok_or(PostError::TooLong { len: u64::MAX })?;
        if sink_to.checked_add(len).is_none() {
            return Err(PostError::TooLong { len });
        }
        let kind = MessageKind::Write { sink_stag, sink_to };
        self.post(kind, TAGGED_HEADER_LEN, sg)
    }

    /// Queues the Read Response to a Read Request of the peer: `len` octets at `src_offset`
    /// of `src_stag` to the peer's `sink_stag` at `sink_to`; returns its id. Not bounded by
    /// the consumer's queue (the receiver's IRD bounds these).
    pub(crate) fn post_read_response(
        &mut self,
        src_stag: u32,
        src_offset: u64,
        len: u64,
        sink_stag: u32,
        sink_to: u64,
    ) -> Result<u64, PostError> {
        if sink_to.checked_add(len).is_none() {
            return Err(PostError::TooLong { len });
        }
        let kind = MessageKind::ReadResponse { sink_stag, sink_to };
        self.check(src_stag, src_offset, len)?;
        Ok(self.push(kind, TAGGED_HEADER_LEN, src_stag, src_offset, len, false))
    }

    /// Queues an RDMA Read Request (RFC 5040 §4.4; queue 1, the next MSN of that queue):
    /// `read.size` octets of the peer's `read.src_stag` at `read.src_to`, to land in our
    /// `read.sink_stag` at `read.sink_to`; returns its id and MSN. The caller bounds how many are outstanding (the
    /// peer's IRD).
    pub(crate) fn post_read_request(
        &mut self,
        read: &ReadRequestRepr,
    ) -> Result<(u64, u32), PostError> {
        let msn = self.next_read_msn;
        let u = read.ulpdu(msn, self.cfg.ddp_rdmap_version);
        let id = self.post_ulpdu(&u)?;
        self.next_read_msn = msn.wrapping_add(1);
        Ok((id, msn))
    }

    /// Queues a Send (QN 0, the next MSN) of `len` octets at `src_offset` of local region
    /// `src_stag`; returns its id and MSN.
    pub(crate) fn post_send(
        &mut self,
        src_stag: u32,
        src_offset: u64,
        len: u64,
    ) -> Result<(u64, u32), PostError> {
        self.post_send_from(&SgList::one(src_stag, src_offset, len), false)
    }

    /// Queues a Send (QN 0, the next MSN; with Solicited Event when `solicited`, RFC 5040
    /// §4.3) of the octets of `sg`'s entries one after the other; returns its id and MSN.
    pub(crate) fn post_send_from(
        &mut self,
        sg: &SgList,
        solicited: bool,
    ) -> Result<(u64, u32), PostError> {
        let len = sg.total_len().ok_or(PostError::TooLong { len: u64::MAX })?;
        // RFC 5041 §5: MO is 32 bits, so a Send holds at most 2^32 octets.
        if len > u64::from(u32::MAX) + 1 {
            return Err(PostError::TooLong { len });
        }
        let msn = self.next_msn;
        let kind = MessageKind::Send { msn, solicited };
        let id = self.post(kind, UNTAGGED_HEADER_LEN, sg)?;
        // RFC 5041 §5.1: the MSN increases by one per message, wrapping.
        self.next_msn = msn.wrapping_add(1);
        Ok((id, msn))
    }

    /// Queues the RTR indication `rtr` (RFC 6581 §9.2), the stream's first FPDU. A zero-length
    /// Send or Read Request is an untagged message: it takes the next MSN of its queue
    /// (RFC 5041 §5.1), so the consumer's first Send or Read carries the one after.
    pub(crate) fn post_rtr(&mut self, rtr: RtrType) -> Result<u64, PostError> {
        let ulpdu = rtr_ulpdu(rtr, self.cfg.ddp_rdmap_version);
        let id = self.post_ulpdu(&ulpdu)?;
        match rtr {
            RtrType::ZeroLengthSend => self.next_msn = self.next_msn.wrapping_add(1),
            RtrType::ZeroLengthReadRequest => {
                self.next_read_msn = self.next_read_msn.wrapping_add(1)
            }
            RtrType::ZeroLengthWrite => {}
        }
        Ok(id)
    }

    /// Queues `ulpdu` (a DDP segment the connection built itself: a Terminate, an RTR)
    /// as one FPDU after everything queued; returns its id. It must fit one FPDU
    /// ([`FpduSource::mulpdu`]); the queue bound does not apply (a Terminate must go out
    /// whatever the consumer posted).
    pub(crate) fn post_ulpdu(&mut self, ulpdu: &[u8]) -> Result<u64, PostError> {
        if ulpdu.len() > self.mulpdu {
            return Err(PostError::TooLong {
                len: ulpdu.len() as u64,
            });
        }
        let id = self.push(MessageKind::Control, ulpdu.len(), 0, 0, 0, false);
        self.controls.push_back((id, ulpdu.into()));
        Ok(id)
    }

    /// Queues a consumer's message reading `sg`'s entries (each checked), all of them or
    /// nothing.
    fn post(&mut self, kind: MessageKind, hdr: usize, sg: &SgList) -> Result<u64, PostError> {
        if self.msgs.len() >= self.cfg.max_messages {
            return Err(PostError::QueueFull(self.cfg.max_messages));
        }
        let len = sg.total_len().ok_or(PostError::TooLong { len: u64::MAX })?;
        self.check_budget(len)?;
        for e in sg.entries() {
            self.check(e.stag, e.offset, e.len)?;
        }
        self.consumer_octets += len;
        let first = sg.first();
        let gathered = sg.entries().len() > 1;
        let id = self.push(kind, hdr, first.stag, first.offset, len, gathered);
        if gathered {
            self.gathers.push_back((id, *sg));
        }
        Ok(id)
    }

    /// The region exists, is of the connection's domain, and holds the range.
    fn check(&self, src_stag: u32, src_offset: u64, len: u64) -> Result<(), PostError> {
        let info = self
            .regions
            .info(src_stag)
            .ok_or(PostError::UnknownRegion { stag: src_stag })?;
        if let Some(pd) = self.cfg.pd {
            if info.pd != pd {
                return Err(PostError::WrongDomain {
                    stag: src_stag,
                    region_pd: info.pd,
                    pd,
                });
            }
        }
        if src_offset.checked_add(len).is_none_or(|end| end > info.len) {
            return Err(PostError::OutOfBounds {
                stag: src_stag,
                offset: src_offset,
                len,
                region_len: info.len,
            });
        }
        Ok(())
    }

    /// Appends a checked message to the stream.
    fn push(
        &mut self,
        kind: MessageKind,
        hdr: usize,
        src_stag: u32,
        src_offset: u64,
        len: u64,
        gathered: bool,
    ) -> u64 {
        // A control message is all header (its ULPDU), so its chunk may be 0: one FPDU.
        let content_start = self.content_tail;
        let chunk = fpdu_chunk(
            self.mulpdu,
            hdr,
            len,
            content_start,
            self.first_marker,
            self.cfg.markers,
        );
        let fpdus = if len == 0 { 1 } else { len.div_ceil(chunk) };
        let last = len - (fpdus - 1) * chunk;
        let full = fpdu::fpdu_len(hdr + chunk as usize) as u64;
        let content_len = (fpdus - 1) * full + fpdu::fpdu_len(hdr + last as usize) as u64;
        let content_end = content_start + content_len;
        let wire_end = self.boundary(content_end);
        let id = self.next_id;
        self.next_id += 1;
        self.msgs.push_back(Msg {
            id,
            kind,
            src_stag,
            src_offset,
            len,
            gathered,
            hdr,
            chunk,
            fpdus,
            content_start,
            content_end,
            wire_end,
        });
        self.content_tail = content_end;
        self.wire_tail = wire_end;
        self.stats.posted += 1;
        trace!(id, ?kind, len, fpdus, wire_end, "sender: posted");
        id
    }
}

/// Payload octets per FPDU of a message of `len` octets with `hdr` octets of DDP header,
/// whose content (the stream without markers) starts at `content_start`: the most MULPDU
/// allows; with markers, the largest of up to 16 sizes 4 octets apart (or, for a message of
/// one FPDU, two FPDUs) whose FPDUs never end right before a Marker (content index
/// `first_marker + j·508`), when one exists. Such an
/// end is legal (RFC 5044 §4.3 puts the Marker at the start of the next FPDU), but a segment
/// ending there trips Wireshark's MPA dissector, which counts a Marker at the segment's very
/// end (`number_of_markers` in packet-iwarp-mpa.c) and loses the stream from then on.
pub(crate) fn fpdu_chunk(
    mulpdu: usize,
    hdr: usize,
    len: u64,
    content_start: u64,
    first_marker: u64,
    markers: bool,
) -> u64 {
    let max = mulpdu.saturating_sub(hdr) as u64;
    if !markers || len == 0 || max < 8 {
        return max;
    }
    let on_marker = |end: u64| end >= first_marker && (end - first_marker).is_multiple_of(BETWEEN);
    let clean = |chunk: u64| {
        let fpdus = len.div_ceil(chunk);
        let full = fpdu::fpdu_len(hdr + chunk as usize) as u64;
        let last = len - (fpdus - 1) * chunk;
        let end = content_start + (fpdus - 1) * full + fpdu::fpdu_len(hdr + last as usize) as u64;
        // Inner ends step by `full`: their residues modulo 508 repeat within 127 steps.
        let inner = (fpdus - 1).min(127);
        !on_marker(end) && !(1..=inner).any(|k| on_marker(content_start + k * full))
    };
    // A message of one FPDU can only move its end by becoming two.
    let split = (len > 4 && len <= max).then(|| len - 4);
    (0..16u64)
        .map(|t| max - 4 * t)
        .take_while(|&c| c >= 4)
        .chain(split)
        .find(|&c| clean(c))
        .unwrap_or(max)
}
