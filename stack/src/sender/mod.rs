//! The MPA sender of one connection, sans I/O: RDMA Writes and Sends posted from registered
//! memory become an FPDU stream that our own TCP sends FPDU-aligned (RFC 5044 §5.1,
//! Appendix A.1), as a [`SendSource`].
//!
//! Layout. Every message is cut into DDP segments of at most `MULPDU − header` payload
//! octets (RFC 5044 §4.5 from the EMSS, markers counted at their worst), so one FPDU —
//! header, markers at their stream positions, PAD, CRC — always fits one segment, wherever
//! it starts. Because the cut does not depend on the position, a message's FPDUs are fixed
//! the moment it is posted: the marker-free ("content") octets of the stream are the FPDUs
//! end to end, markers sit at every 512th stream position, and the wire offset of any
//! content octet (and back) is arithmetic. Nothing per FPDU is stored; a message is one
//! record until its last octet is acknowledged.
//!
//! Octets. [`SendSource::fill`] writes each FPDU straight into the TCP's output slice (the
//! UMEM frame, once wired): markers and the DDP header from the record, the payload read
//! from the region in place (one copy), PAD, then the CRC over what was written. The same
//! offsets give the same octets on every retransmission. [`SendSource::segment_len`] lets
//! the TCP cut only after whole FPDUs.
//!
//! Completions. [`SendSource::acked`] moves SND.UNA; a message whose last octet is
//! acknowledged completes (once, in posting order): `FpduSource::poll_completion`.
//!
//! Checks at post time ([`PostError`]): the region exists, the domain matches, the range
//! lies inside the region (overflow included), the message fits the DDP fields (a Send's
//! MO is 32 bits), the queue has room. A region that disappears from the source's table
//! while its message is in flight fails the connection ([`SourceError`]), never a panic
//! and never wrong octets.

#![forbid(unsafe_code)]

mod post;
mod preamble;
#[cfg(test)]
mod tests;

pub(crate) use preamble::Preamble;

use mpa_ctl_proto::ring::post::SgList;
use std::collections::VecDeque;

use mpa::crc;
use mpa::markers::{self, Piece, WireLayout};
use mpa::wire::ddp::{DdpRepr, RdmapOpcode, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use mpa::wire::fpdu::{self, CRC_LEN, HEADER_LEN};
use mpa::wire::marker::{marker_bytes, MARKER_LEN};
use tracing::trace;

use crate::receiver::Regions;
use crate::tcp::{SendSource, SourceError, MAX_VISIBLE};

/// Marker interval and the content octets between two markers.
const INTERVAL: u64 = markers::MARKER_INTERVAL as u64;
const BETWEEN: u64 = INTERVAL - MARKER_LEN as u64;

/// The smallest EMSS a sender takes: one FPDU must carry a Send header and payload.
pub const MIN_EMSS: usize = 64;

/// What was negotiated for the send direction of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SenderConfig {
    /// The peer asked for markers (its M flag).
    pub(crate) markers: bool,
    /// RFC 5044's EMSS: the TCP's MSS less the options every segment carries
    /// ([`crate::tcp::Connection::emss`]).
    pub(crate) emss: usize,
    /// Stream position (octets since SeqStart, mod 2^32) of the source's first octet: 0
    /// when it starts with Full Operation. A multiple of 4.
    pub(crate) position: u32,
    /// Protection domain the connection belongs to: regions of other domains cannot be
    /// sent from. `None`: any.
    pub(crate) pd: Option<u32>,
    /// DDP/RDMAP version (1; 0 for an RDMAC peer).
    pub(crate) ddp_rdmap_version: u8,
    /// Messages queued (posted and not yet completed) at most.
    pub(crate) max_messages: usize,
    /// Payload octets of the consumer's Writes and Sends queued (posted and not yet
    /// acknowledged) at most: the flow's send budget, as `SO_SNDBUF` is a socket's. Read
    /// Responses owed to the peer are not counted (the IRD bounds them).
    pub(crate) max_queued_octets: u64,
}

/// The default send budget of a flow: the largest window a peer can offer.
const DEFAULT_MAX_QUEUED_OCTETS: u64 = 1 << 30;

impl SenderConfig {
    /// Version 1, from stream position 0, any domain, 4096 messages.
    pub(crate) fn new(emss: usize, markers: bool) -> SenderConfig {
        SenderConfig {
            markers,
            emss,
            position: 0,
            pd: None,
            ddp_rdmap_version: 1,
            max_messages: 4096,
            max_queued_octets: DEFAULT_MAX_QUEUED_OCTETS,
        }
    }
}

/// Why a sender could not be created. A local misuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SenderConfigError {
    /// No FPDU with a header and payload fits such segments.
    #[error("EMSS {emss} below the {MIN_EMSS}-octet minimum")]
    EmssTooSmall {
        /// The EMSS given.
        emss: usize,
    },
    /// FPDUs start at multiples of 4 from SeqStart (RFC 5044 §4.3).
    #[error("stream position {0} is not a multiple of 4")]
    Unaligned(u32),
}

/// Why a message was not posted. Nothing was queued; a local misuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// No region with this STag.
    #[error("no registered region {stag:#010x}")]
    UnknownRegion {
        /// The STag.
        stag: u32,
    },
    /// The region belongs to another protection domain.
    #[error("region {stag:#010x} is in protection domain {region_pd}, the connection in {pd}")]
    WrongDomain {
        /// The STag.
        stag: u32,
        /// Its domain.
        region_pd: u32,
        /// The connection's.
        pd: u32,
    },
    /// The range is not inside the region.
    #[error("{len} octets at {offset} lie outside region {stag:#010x} of {region_len} octets")]
    OutOfBounds {
        /// The STag.
        stag: u32,
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
        /// The region's length.
        region_len: u64,
    },
    /// A Send longer than its 32-bit message offsets can address, or a Write whose tagged
    /// offsets would wrap.
    #[error("message of {len} octets too long for its DDP header")]
    TooLong {
        /// Length asked for.
        len: u64,
    },
    /// An RDMA Read of no octets or of more than its 32-bit RDMA Read Message Size carries.
    #[error("an RDMA Read of {len} octets: reads here are 1 ..= 4294967295 octets")]
    ReadSize {
        /// Length asked for.
        len: u64,
    },
    /// The startup negotiated an ORD of 0 (RFC 6581 §9.1): no RDMA Read may be outstanding.
    #[error("the connection's negotiated ORD is 0: no RDMA Read may be sent")]
    NoReads,
    /// The queue holds `max_messages` already.
    #[error("send queue full ({0} messages)")]
    QueueFull(usize),
    /// The post would take the flow's queued octets past its send budget; post again as
    /// completions arrive.
    #[error("send budget: {queued} octets queued + {len} posted exceed the flow's {budget}")]
    SendBudget {
        /// Consumer octets queued now.
        queued: u64,
        /// Octets of the refused post.
        len: u64,
        /// The budget.
        budget: u64,
    },
    /// The connection can take no more (closing or closed).
    #[error("connection not open for sending")]
    Closed,
    /// A scatter-gather list the request cannot use: more than one entry for a Read (it
    /// fills one range) or with a count above 1, or no message.
    #[error("a Read fills one scatter-gather entry, and a list of more is one message")]
    Gather,
}

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MessageKind {
    /// An RDMA Write (RFC 5040 §4.3) to the peer's tagged buffer.
    Write {
        /// The peer's STag.
        sink_stag: u32,
        /// Tagged offset of the first octet.
        sink_to: u64,
    },
    /// A Send (RFC 5040 §5.3) on queue 0.
    Send {
        /// Its message sequence number (1 for the first, RFC 5041 §5.1).
        msn: u32,
        /// With Solicited Event (RFC 5040 §4.3).
        solicited: bool,
    },
    /// An RDMA Read Response (RFC 5040 §4.5) answering the peer's Read Request: read from a
    /// local region like a Write, to the peer's sink buffer; it completes silently (the
    /// receiver's IRD count goes down).
    ReadResponse {
        /// The peer's sink STag.
        sink_stag: u32,
        /// Tagged offset in the sink of the first octet.
        sink_to: u64,
    },
    /// A ULPDU the connection itself sends (a Terminate, an RTR, the zero-length Read
    /// Response that answers an RTR), carried whole in one FPDU from the source's own
    /// copy ([`FpduSource::post_ulpdu`]); it completes silently.
    Control,
}

/// A message whose every octet the peer acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SendCompletion {
    /// The id [`FpduSource::post_write`] / [`FpduSource::post_send`] returned.
    pub(crate) id: u64,
    /// What it was.
    pub(crate) kind: MessageKind,
    /// The local region it was read from.
    pub(crate) src_stag: u32,
    /// Offset in that region.
    pub(crate) src_offset: u64,
    /// Payload octets.
    pub(crate) len: u64,
}

/// Counters of one sender.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SenderStats {
    /// Messages posted.
    pub(crate) posted: u64,
    /// Messages completed.
    pub(crate) completed: u64,
    /// FPDUs written into segments (retransmissions included).
    pub(crate) fpdus_filled: u64,
    /// FPDUs written only in part (a segment boundary inside them: see
    /// `TcpStats::unaligned_segments`).
    pub(crate) partial_fills: u64,
    /// Payload octets read from regions (retransmissions included).
    pub(crate) octets_read: u64,
}

/// One posted message, its place in the stream fixed.
#[derive(Debug, Clone, Copy)]
struct Msg {
    id: u64,
    kind: MessageKind,
    src_stag: u32,
    src_offset: u64,
    len: u64,
    /// Its payload is gathered from the entries kept in [`FpduSource::gathers`] (`src_stag`
    /// and `src_offset` are the first's).
    gathered: bool,
    /// DDP header octets.
    hdr: usize,
    /// Payload octets per FPDU (the last carries the rest).
    chunk: u64,
    /// FPDUs (at least one: a zero-length message is one FPDU).
    fpdus: u64,
    /// Content index of its first octet (content: the stream without markers, from the
    /// source's first octet).
    content_start: u64,
    /// Content index one past its last octet.
    content_end: u64,
    /// Wire offset (from the source's first octet) one past its last octet.
    wire_end: u64,
}

impl Msg {
    /// Content octets of a full FPDU.
    fn full_content(&self) -> u64 {
        fpdu::fpdu_len(self.hdr + self.chunk as usize) as u64
    }

    /// FPDU `k`: (content start, payload offset in the message, payload octets).
    fn fpdu(&self, k: u64) -> (u64, u64, usize) {
        let off = k * self.chunk;
        let take = (self.len - off).min(self.chunk) as usize;
        (self.content_start + k * self.full_content(), off, take)
    }

    /// The FPDU holding content octet `c` (inside the message).
    fn fpdu_at(&self, c: u64) -> u64 {
        ((c - self.content_start) / self.full_content()).min(self.fpdus - 1)
    }
}

/// An FPDU stream over a queue of messages read from registered memory; see the module
/// documentation. `R` holds the regions it reads (e.g. [`crate::receiver::MemRegions`], or
/// a flow's own [`crate::receiver::RegionTable`] of `Arc`'d memory).
#[derive(Debug)]
pub(crate) struct FpduSource<R: Regions> {
    cfg: SenderConfig,
    regions: R,
    /// Largest ULPDU per FPDU.
    mulpdu: usize,
    /// Wire offset of the first marker (markers every 512 from there).
    first_marker: u64,
    msgs: VecDeque<Msg>,
    /// Wire offset of SND.UNA.
    base: u64,
    /// Content and wire offsets of the end of the queue.
    content_tail: u64,
    wire_tail: u64,
    next_id: u64,
    next_msn: u32,
    /// Payload octets of queued consumer Writes and Sends (against `max_queued_octets`).
    consumer_octets: u64,
    /// MSN of our next Read Request (queue 1).
    next_read_msn: u32,
    /// The octets of queued [`MessageKind::Control`] messages, oldest first, by id.
    controls: VecDeque<(u64, Box<[u8]>)>,
    /// The scatter-gather lists of queued messages of more than one entry, oldest first,
    /// by id.
    gathers: VecDeque<(u64, SgList)>,
    completions: VecDeque<SendCompletion>,
    /// Read Responses wholly acknowledged since [`SendSource::take_acked_read_responses`].
    read_responses_acked: usize,
    /// An FPDU written in part is built here first.
    scratch: Vec<u8>,
    /// CRC32c of the ULPDUs sent, when kept; `digest_next`: content index of the next FPDU
    /// to add.
    digest: Option<u32>,
    digest_next: u64,
    stats: SenderStats,
}

impl<R: Regions> FpduSource<R> {
    /// An empty sender reading from `regions`.
    pub(crate) fn new(cfg: SenderConfig, regions: R) -> Result<FpduSource<R>, SenderConfigError> {
        if cfg.emss < MIN_EMSS {
            return Err(SenderConfigError::EmssTooSmall { emss: cfg.emss });
        }
        if !cfg.position.is_multiple_of(4) {
            return Err(SenderConfigError::Unaligned(cfg.position));
        }
        // RFC 5044 §4.5's MULPDU, without its floor of 128 (which would not fit a small
        // EMSS): an FPDU of it fits the EMSS wherever it starts.
        let overhead = 6
            + cfg.emss % 4
            + if cfg.markers {
                4 * cfg.emss.div_ceil(512)
            } else {
                0
            };
        let mulpdu = (cfg.emss - overhead).min(fpdu::MAX_ULPDU);
        Ok(FpduSource {
            cfg,
            regions,
            mulpdu,
            first_marker: markers::to_next_marker(cfg.position) as u64,
            msgs: VecDeque::new(),
            base: 0,
            content_tail: 0,
            wire_tail: 0,
            next_id: 1,
            next_msn: 1,
            consumer_octets: 0,
            next_read_msn: 1,
            controls: VecDeque::new(),
            gathers: VecDeque::new(),
            completions: VecDeque::new(),
            read_responses_acked: 0,
            scratch: Vec::new(),
            stats: SenderStats::default(),
            digest: None,
            digest_next: 0,
        })
    }

    /// The regions it reads, to add or remove some. Removing one a queued message reads
    /// fails the connection when its octets are next needed.
    pub(crate) fn regions_mut(&mut self) -> &mut R {
        &mut self.regions
    }

    /// Counters.
    pub(crate) fn stats(&self) -> &SenderStats {
        &self.stats
    }

    /// The largest ULPDU of one FPDU.
    #[cfg(test)]
    pub(crate) fn mulpdu(&self) -> usize {
        self.mulpdu
    }

    /// Messages posted and not yet completed.
    pub(crate) fn queued_messages(&self) -> usize {
        self.msgs.len()
    }

    /// Whether `len` more consumer octets fit the send budget.
    pub(crate) fn check_budget(&self, len: u64) -> Result<(), PostError> {
        let budget = self.cfg.max_queued_octets;
        if self.consumer_octets.saturating_add(len) > budget {
            return Err(PostError::SendBudget {
                queued: self.consumer_octets,
                len,
                budget,
            });
        }
        Ok(())
    }

    /// The MSN the next Send gets.
    #[cfg(test)]
    pub(crate) fn next_msn(&self) -> u32 {
        self.next_msn
    }

    /// The most messages queued at once.
    pub(crate) fn max_messages(&self) -> usize {
        self.cfg.max_messages
    }

    /// Whether completions wait for [`FpduSource::poll_completion`].
    pub(crate) fn has_completions(&self) -> bool {
        !self.completions.is_empty()
    }

    /// The next completion, oldest first.
    pub(crate) fn poll_completion(&mut self) -> Option<SendCompletion> {
        self.completions.pop_front()
    }

    // ---------------------------------------------------------------- stream arithmetic

    /// Wire offset of content octet `c`: `c` plus the markers before it.
    fn wire_of(&self, c: u64) -> u64 {
        if !self.cfg.markers || c < self.first_marker {
            return c;
        }
        c + MARKER_LEN as u64 * ((c - self.first_marker) / BETWEEN + 1)
    }

    /// Wire offset of the boundary before content octet `c` (an FPDU starting there begins
    /// with the marker in front of it, if one is).
    fn boundary(&self, c: u64) -> u64 {
        if c == 0 {
            0
        } else {
            self.wire_of(c - 1) + 1
        }
    }

    /// Content octets before wire offset `w` (markers, and the part of one `w` is inside,
    /// excluded).
    fn content_before(&self, w: u64) -> u64 {
        if !self.cfg.markers || w <= self.first_marker {
            return w;
        }
        let n = (w - self.first_marker - 1) / INTERVAL + 1;
        let last = self.first_marker + (n - 1) * INTERVAL;
        w - MARKER_LEN as u64 * (n - 1) - (w - last).min(MARKER_LEN as u64)
    }

    /// The message and FPDU holding wire offset `w` (< `wire_tail`).
    fn locate(&self, w: u64) -> (usize, u64) {
        let c = self.content_before(w);
        let i = self.msgs.partition_point(|m| m.content_end <= c);
        let i = i.min(self.msgs.len() - 1);
        (i, self.msgs[i].fpdu_at(c.max(self.msgs[i].content_start)))
    }

    /// The FPDU after (`i`, `k`), if any.
    fn next_fpdu(&self, i: usize, k: u64) -> Option<(usize, u64)> {
        if k + 1 < self.msgs[i].fpdus {
            Some((i, k + 1))
        } else if i + 1 < self.msgs.len() {
            Some((i + 1, 0))
        } else {
            None
        }
    }

    /// Wire range of FPDU `k` of message `i`.
    fn wire_range(&self, i: usize, k: u64) -> (u64, u64) {
        let m = &self.msgs[i];
        let (cs, _, take) = m.fpdu(k);
        let ce = cs + fpdu::fpdu_len(m.hdr + take) as u64;
        (self.boundary(cs), self.boundary(ce))
    }

    /// Reads `dst.len()` octets of message `m`'s payload from its offset `msg_off`: from its
    /// one range, or across its scatter-gather entries.
    fn read_payload(&self, m: &Msg, msg_off: u64, dst: &mut [u8]) -> Result<(), SourceError> {
        let unreadable = |stag, offset, len| SourceError::RegionUnreadable { stag, offset, len };
        if !m.gathered {
            let src_off = m.src_offset + msg_off;
            return match self.regions.read(m.src_stag, src_off, dst) {
                true => Ok(()),
                false => Err(unreadable(m.src_stag, src_off, dst.len())),
            };
        }
        let sg = self
            .gathers
            .iter()
            .find(|(id, _)| *id == m.id)
            .map(|(_, sg)| sg)
            .ok_or(unreadable(m.src_stag, m.src_offset, dst.len()))?;
        let (mut at, mut skip) = (0, msg_off);
        for e in sg.entries() {
            if at == dst.len() {
                break;
            }
            if skip >= e.len {
                skip -= e.len;
                continue;
            }
            let n = ((e.len - skip) as usize).min(dst.len() - at);
            if !self
                .regions
                .read(e.stag, e.offset + skip, &mut dst[at..at + n])
            {
                return Err(unreadable(e.stag, e.offset + skip, n));
            }
            at += n;
            skip = 0;
        }
        match at == dst.len() {
            true => Ok(()),
            false => Err(unreadable(m.src_stag, m.src_offset + msg_off, dst.len())),
        }
    }

    /// Writes FPDU `k` of message `i`, whose wire image starts at wire offset `ws`, into
    /// `out` (exactly its wire length).
    fn write_fpdu(&mut self, i: usize, k: u64, ws: u64, out: &mut [u8]) -> Result<(), SourceError> {
        let m = self.msgs[i];
        let (_, off, take) = m.fpdu(k);
        let last = k + 1 == m.fpdus;
        let ulpdu_len = m.hdr + take;
        // ULPDU_Length and the DDP header (for a control message: its whole ULPDU), the
        // content's first octets.
        let mut fixed = [0u8; HEADER_LEN + UNTAGGED_HEADER_LEN];
        let mut control = Vec::new();
        fixed[..HEADER_LEN].copy_from_slice(&(ulpdu_len as u16).to_be_bytes());
        let ddp = match m.kind {
            MessageKind::Write { sink_stag, sink_to } => Some(DdpRepr::Tagged {
                last,
                opcode: RdmapOpcode::RdmaWrite,
                stag: sink_stag,
                to: sink_to + off,
            }),
            MessageKind::ReadResponse { sink_stag, sink_to } => Some(DdpRepr::Tagged {
                last,
                opcode: RdmapOpcode::RdmaReadResponse,
                stag: sink_stag,
                to: sink_to + off,
            }),
            MessageKind::Send { msn, solicited } => Some(DdpRepr::Untagged {
                last,
                opcode: if solicited {
                    RdmapOpcode::SendWithSolicitedEvent
                } else {
                    RdmapOpcode::Send
                },
                inv_stag: 0,
                qn: 0,
                msn,
                // Checked at post time: a Send's offsets fit 32 bits.
                mo: off as u32,
            }),
            MessageKind::Control => {
                let octets = self
                    .controls
                    .iter()
                    .find(|(id, _)| *id == m.id)
                    .map(|(_, b)| &b[..])
                    .unwrap_or(&[]);
                control.extend_from_slice(&fixed[..HEADER_LEN]);
                control.extend_from_slice(octets);
                None
            }
        };
        let head: &[u8] = match ddp {
            Some(ddp) => {
                let _ = ddp.emit(&mut fixed[HEADER_LEN..], self.cfg.ddp_rdmap_version);
                &fixed[..HEADER_LEN + m.hdr]
            }
            None => &control,
        };
        let payload_end = HEADER_LEN + ulpdu_len;
        let content_len = fpdu::fpdu_len(ulpdu_len);
        let pos = self.cfg.position.wrapping_add(ws as u32);
        for piece in WireLayout::new(pos, content_len, self.cfg.markers) {
            match piece {
                Piece::Marker { wire, fpdu_ptr } => {
                    out[wire..wire + MARKER_LEN].copy_from_slice(&marker_bytes(fpdu_ptr));
                }
                Piece::Content { wire, content, len } => {
                    let dst = &mut out[wire..wire + len];
                    let mut at = 0;
                    let mut c = content;
                    // Header part.
                    if c < head.len() {
                        let n = (head.len() - c).min(len);
                        dst[..n].copy_from_slice(&head[c..c + n]);
                        at += n;
                        c += n;
                    }
                    // Payload part, straight from the region.
                    if at < len && c < payload_end {
                        let n = (payload_end - c).min(len - at);
                        let msg_off = off + (c - head.len()) as u64;
                        self.read_payload(&m, msg_off, &mut dst[at..at + n])?;
                        self.stats.octets_read += n as u64;
                        at += n;
                    }
                    // PAD and the CRC slot.
                    dst[at..].fill(0);
                }
            }
        }
        // The CRC: the last four wire octets, over every wire octet before them.
        let n = out.len();
        let c = crc::crc32c(&out[..n - CRC_LEN]);
        out[n - CRC_LEN..].copy_from_slice(&c.to_le_bytes());
        self.stats.fpdus_filled += 1;
        // The ULPDU digest, once per FPDU in stream order (first fills come in order; a
        // retransmission is behind `digest_next`): the ULPDU's octets, as a receiver's
        // digest sees them (no ULPDU_Length, markers, PAD or CRC).
        let cs = m.fpdu(k).0;
        if let Some(mut d) = self.digest.filter(|_| cs == self.digest_next) {
            for piece in WireLayout::new(pos, content_len, self.cfg.markers) {
                if let Piece::Content { wire, content, len } = piece {
                    let a = content.max(HEADER_LEN);
                    let b = (content + len).min(payload_end);
                    if a < b {
                        d = crc::crc32c_append(d, &out[wire + a - content..wire + b - content]);
                    }
                }
            }
            self.digest = Some(d);
            self.digest_next = cs + content_len as u64;
        }
        Ok(())
    }

    /// CRC32c over every ULPDU sent so far (DDP headers and payloads, in stream order), when
    /// kept ([`FpduSource::keep_digest`]): what a receiver's ULPDU digest of this stream is.
    pub(crate) fn digest(&self) -> Option<u32> {
        self.digest
    }

    /// Keep [`FpduSource::digest`] from now on (call before anything is sent).
    pub(crate) fn keep_digest(&mut self) {
        self.digest = Some(0);
    }
}

impl<R: Regions> SendSource for FpduSource<R> {
    const ALIGNED: bool = true;

    fn queued(&self) -> usize {
        (self.wire_tail - self.base).min(MAX_VISIBLE as u64) as usize
    }

    fn backlog(&self) -> u64 {
        (self.wire_tail - self.base).saturating_sub(MAX_VISIBLE as u64)
    }

    fn segment_len(&self, off: usize, room: usize) -> usize {
        let w0 = self.base + off as u64;
        if w0 >= self.wire_tail {
            return 0;
        }
        let mut at = self.locate(w0);
        let mut best = 0;
        loop {
            let (_, we) = self.wire_range(at.0, at.1);
            if we - w0 > room as u64 {
                return best;
            }
            best = (we - w0) as usize;
            match self.next_fpdu(at.0, at.1) {
                Some(n) => at = n,
                None => return best,
            }
        }
    }

    fn fill(&mut self, off: usize, out: &mut [u8]) -> Result<(), SourceError> {
        let w0 = self.base + off as u64;
        let w1 = (w0 + out.len() as u64).min(self.wire_tail);
        if w0 >= w1 {
            return Ok(());
        }
        let mut at = Some(self.locate(w0));
        while let Some((i, k)) = at {
            let (ws, we) = self.wire_range(i, k);
            if ws >= w1 {
                break;
            }
            if ws >= w0 && we <= w1 {
                let dst = &mut out[(ws - w0) as usize..(we - w0) as usize];
                self.write_fpdu(i, k, ws, dst)?;
            } else {
                // A segment edge inside this FPDU: build it whole, copy the part.
                let mut scratch = std::mem::take(&mut self.scratch);
                scratch.resize((we - ws) as usize, 0);
                let r = self.write_fpdu(i, k, ws, &mut scratch);
                if r.is_ok() {
                    let (a, b) = (ws.max(w0), we.min(w1));
                    out[(a - w0) as usize..(b - w0) as usize]
                        .copy_from_slice(&scratch[(a - ws) as usize..(b - ws) as usize]);
                    self.stats.partial_fills += 1;
                }
                self.scratch = scratch;
                r?;
            }
            at = self.next_fpdu(i, k);
        }
        Ok(())
    }

    fn take_acked_read_responses(&mut self) -> usize {
        std::mem::take(&mut self.read_responses_acked)
    }

    fn acked(&mut self, n: usize) {
        self.base = (self.base + n as u64).min(self.wire_tail);
        while let Some(m) = self.msgs.front() {
            if m.wire_end > self.base {
                break;
            }
            let m = *m;
            self.msgs.pop_front();
            if m.kind == MessageKind::Control {
                if self.controls.front().is_some_and(|(id, _)| *id == m.id) {
                    self.controls.pop_front();
                }
                continue;
            }
            if m.gathered && self.gathers.front().is_some_and(|(id, _)| *id == m.id) {
                self.gathers.pop_front();
            }
            self.stats.completed += 1;
            if let MessageKind::Write { .. } | MessageKind::Send { .. } = m.kind {
                self.consumer_octets -= m.len;
            }
            if let MessageKind::ReadResponse { .. } = m.kind {
                self.read_responses_acked += 1;
            }
            trace!(id = m.id, len = m.len, "sender: completed");
            self.completions.push_back(SendCompletion {
                id: m.id,
                kind: m.kind,
                src_stag: m.src_stag,
                src_offset: m.src_offset,
                len: m.len,
            });
        }
    }
}
