//! RDMA Reads over kernel TCP, both sides (RFC 5040 §4.4, §4.5, §5.2).
//!
//! * Data Source (`listen --advertise … --remote-read`): the [`Sink`] checks and queues each
//!   Read Request; [`respond`] answers it with a Read Response — tagged, RDMAP opcode 2, to
//!   the request's Data Sink STag and TO — cut into DDP segments whose FPDUs stay within
//!   MULPDU, L set on the last.
//! * Data Sink (`connect --op read`): [`Reader`] issues `count` Read Requests of `size`
//!   octets with at most ORD outstanding and checks every Read Response: opcode, sink STag,
//!   TO (in order), length, L, and the octets against the region pattern of the source
//!   offsets (the Responder's region is pattern-filled, `listen --fill-pattern`).
//!
//! Which octets read `i` asks for: source TO `base_to + (i·size mod (len − size + 1))`, so
//! reads march through the region one after the other and start over near its start before
//! one would cross its end (every read stays in bounds, and most of the region gets read).
//! It lands at the Initiator's own sink STag [`SINK_STAG`], TO `i·size` (modulo 2^64).

use crate::report::Report;
use crate::request::{ReadRequest, HEAD_LEN};
use crate::sink::{RegionPattern, Sink};
use crate::ConnectError;
use mpa::crc::crc32c_append;
use mpa::endpoint::{EndpointError, MpaStream, Transport};
use mpa::startup::{Negotiated, RtrType, NO_IRD_ORD_NEGOTIATION};
use mpa::wire::ddp::{
    terminate_ulpdu_for_segment, DdpRepr, RdmapOpcode, ReadRequestRepr, TerminateRepr,
    TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN,
};
use mpa_ctl_proto::region_ad::RegionAd;
use std::time::Duration;

/// The STag of the Initiator's sink buffer for Read Responses (a fixed value: it only has to
/// come back unchanged).
pub(crate) const SINK_STAG: u32 = 0x5a5a_0001;
/// Outbound Reads outstanding at once when the startup did not negotiate ORD.
pub(crate) const DEFAULT_ORD: u16 = 8;

/// The DDP segments of a Read Response of `size` octets with at most `max_payload` octets
/// each: (offset, length, last). A zero-length response is one empty segment with L.
pub(crate) fn segments(
    size: usize,
    max_payload: usize,
) -> impl Iterator<Item = (usize, usize, bool)> {
    let step = max_payload.max(1);
    let n = size.div_ceil(step).max(1);
    (0..n).map(move |k| {
        let at = k * step;
        let take = step.min(size - at);
        (at, take, k + 1 == n)
    })
}

/// Answers `rr` with the Read Response carrying `data`: DDP segments of at most MULPDU
/// octets each (header included), TO advancing from the Data Sink TO, L on the last. Queued;
/// the caller flushes.
pub(crate) fn respond<S: Transport>(
    s: &mut MpaStream<S>,
    rr: &ReadRequest,
    data: &[u8],
) -> Result<(), EndpointError> {
    let version = s.negotiated().ddp_rdmap_version;
    let max_payload = s.mulpdu().saturating_sub(TAGGED_HEADER_LEN);
    let mut h = [0u8; TAGGED_HEADER_LEN];
    for (at, take, last) in segments(data.len(), max_payload) {
        DdpRepr::Tagged {
            last,
            opcode: RdmapOpcode::RdmaReadResponse,
            stag: rr.header.sink_stag,
            to: rr.header.sink_to.wrapping_add(at as u64),
        }
        .emit(&mut h, version);
        s.send_parts(&[&h, &data[at..at + take]])?;
    }
    Ok(())
}

/// Answers every Read Request `sink` has queued, in arrival order (RFC 5040 §5.5 rule 20);
/// returns how many. Queued; the caller flushes.
pub(crate) fn answer_all<S: Transport>(
    s: &mut MpaStream<S>,
    sink: &mut Sink,
) -> Result<u64, EndpointError> {
    let mut n = 0;
    while let Some((rr, data)) = sink.next_read() {
        respond(s, &rr, data)?;
        n += 1;
    }
    Ok(n)
}

/// Region offset of read `i` of `size` octets in a region of `len` octets (`size <= len`):
/// `i·size mod (len − size + 1)`.
pub(crate) fn source_offset(i: u64, size: u64, len: u64) -> u64 {
    let room = u128::from(len - size) + 1;
    ((u128::from(i) * u128::from(size)) % room) as u64
}

/// Why a Read Response is not the one the Initiator waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReadError {
    /// Not a Read Response (nor a Terminate, which the endpoint reports itself).
    #[error("unexpected {opcode:?} while reading")]
    UnexpectedOpcode { opcode: RdmapOpcode },
    /// A Read Response with no Read outstanding.
    #[error("a Read Response with no RDMA Read outstanding")]
    Unsolicited,
    /// A Read Response to another STag than our sink's.
    #[error("Read Response to STag {stag:#x}, our sink is STag {SINK_STAG:#x}")]
    WrongStag { stag: u32 },
    /// A Read Response segment at another TO than where the oldest read continues.
    #[error("Read Response at TO {to:#x}, expected {expected:#x} (read {read})")]
    WrongTo { to: u64, expected: u64, read: u64 },
    /// More octets than asked for, or L before all of them.
    #[error("Read Response for read {read}: {got} octets with L {last}, {size} asked for")]
    Length {
        read: u64,
        got: u64,
        size: u32,
        last: bool,
    },
}

impl ReadError {
    /// The Terminate the Initiator sends: RFC 5041 §7.2 for the tagged sink checks (another
    /// STag: invalid STag; octets outside the run the read expects: base or bounds, as the
    /// datapath treats a tagged message that does not continue), RFC 5040 Figure 9 (0x06
    /// unexpected opcode) for a message that is no Read Response we wait for.
    pub(crate) fn terminate(&self) -> TerminateRepr {
        let (layer, error_type, error_code) = match self {
            ReadError::WrongStag { .. } => (1, 1, 0x00),
            ReadError::WrongTo { .. } | ReadError::Length { .. } => (1, 1, 0x01),
            ReadError::UnexpectedOpcode { .. } | ReadError::Unsolicited => (0, 2, 0x06),
        };
        TerminateRepr {
            layer,
            error_type,
            error_code,
        }
    }
}

/// What the Initiator's reads counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ReadStats {
    /// Read Responses complete (L received).
    pub responses: u64,
    /// Read Response payload octets received.
    pub octets: u64,
    /// Octets that differed from the pattern at their source offset.
    pub pattern_mismatches: u64,
}

/// The Initiator's Reads: which request goes out next, and the check of every response.
pub(crate) struct Reader {
    ad: RegionAd,
    size: u32,
    count: u64,
    ord: u16,
    next_msn: u32,
    issued: u64,
    done: u64,
    /// Octets of read `done` received so far.
    got: u64,
    /// A zero-length Read RTR (RFC 6581 §9.2) awaits its zero-length response, which comes
    /// before ours.
    rtr_pending: bool,
    pattern: RegionPattern,
    stats: ReadStats,
}

impl Reader {
    /// `count` Reads of `size` octets (at most `ad.len`) from the advertised region, at most
    /// `ord` (≥ 1) outstanding; `rtr_read`: the connection's RTR was a zero-length Read
    /// Request, which took MSN 1 on queue 1 and one ORD slot until its response.
    pub(crate) fn new(ad: &RegionAd, size: u32, count: u64, ord: u16, rtr_read: bool) -> Self {
        Reader {
            ad: *ad,
            size,
            count,
            ord,
            next_msn: if rtr_read { 2 } else { 1 },
            issued: 0,
            done: 0,
            got: 0,
            rtr_pending: rtr_read,
            pattern: RegionPattern::new(),
            stats: ReadStats::default(),
        }
    }

    pub(crate) fn stats(&self) -> ReadStats {
        self.stats
    }

    /// Every read answered.
    pub(crate) fn finished(&self) -> bool {
        self.done == self.count && !self.rtr_pending
    }

    fn outstanding(&self) -> u64 {
        self.issued - self.done + u64::from(self.rtr_pending)
    }

    /// The next Read Request to send, while fewer than ORD are outstanding.
    pub(crate) fn next_request(&mut self) -> Option<ReadRequest> {
        if self.issued == self.count || self.outstanding() >= u64::from(self.ord) {
            return None;
        }
        let i = self.issued;
        let off = source_offset(i, u64::from(self.size), self.ad.len);
        let rr = ReadRequest {
            msn: self.next_msn,
            header: ReadRequestRepr {
                sink_stag: SINK_STAG,
                sink_to: i.wrapping_mul(u64::from(self.size)),
                size: self.size,
                src_stag: self.ad.stag,
                src_to: self.ad.base_to + off,
            },
        };
        self.issued += 1;
        self.next_msn = self.next_msn.wrapping_add(1);
        Some(rr)
    }

    /// Checks one ULPDU (first octets `head`, `len` in all, given as `pieces`) as the next
    /// Read Response segment.
    pub(crate) fn on_ulpdu<'a>(
        &mut self,
        head: &[u8],
        len: usize,
        version: u8,
        pieces: impl Iterator<Item = &'a [u8]>,
    ) -> Result<(), ReadError> {
        let (last, stag, to) = match DdpRepr::parse(head, version) {
            Ok((
                DdpRepr::Tagged {
                    opcode: RdmapOpcode::RdmaReadResponse,
                    last,
                    stag,
                    to,
                },
                _,
            )) => (last, stag, to),
            Ok((DdpRepr::Tagged { opcode, .. } | DdpRepr::Untagged { opcode, .. }, _)) => {
                return Err(ReadError::UnexpectedOpcode { opcode })
            }
            Err(_) => {
                return Err(ReadError::UnexpectedOpcode {
                    opcode: RdmapOpcode::Unknown(0xf),
                })
            }
        };
        let payload = (len - TAGGED_HEADER_LEN) as u64;
        if self.rtr_pending {
            // The RTR's zero-length response: STag and TO unchecked (RFC 5041 §5.3).
            if payload != 0 || !last {
                return Err(ReadError::Length {
                    read: 0,
                    got: payload,
                    size: 0,
                    last,
                });
            }
            self.rtr_pending = false;
            return Ok(());
        }
        if self.done == self.issued {
            return Err(ReadError::Unsolicited);
        }
        let read = self.done;
        // RFC 5041 §5.3: a zero-length segment's STag and TO are not checked.
        if payload > 0 {
            if stag != SINK_STAG {
                return Err(ReadError::WrongStag { stag });
            }
            let expected = read
                .wrapping_mul(u64::from(self.size))
                .wrapping_add(self.got);
            if to != expected {
                return Err(ReadError::WrongTo { to, expected, read });
            }
        }
        let got = self.got + payload;
        if got > u64::from(self.size) || (last && got != u64::from(self.size)) {
            return Err(ReadError::Length {
                read,
                got,
                size: self.size,
                last,
            });
        }
        // The octets must be the pattern at their source offset.
        let mut off = source_offset(read, u64::from(self.size), self.ad.len) + self.got;
        let mut skip = TAGGED_HEADER_LEN;
        for p in pieces {
            let s = skip.min(p.len());
            skip -= s;
            let p = &p[s..];
            self.stats.pattern_mismatches += self.pattern.mismatches(off, p);
            off += p.len() as u64;
        }
        self.stats.octets += payload;
        self.got = got;
        if last {
            self.stats.responses += 1;
            self.done += 1;
            self.got = 0;
        }
        Ok(())
    }
}

/// The [`Reader`] for `connect --op read --size SIZE --count COUNT`, or why the connection
/// rules it out (the message for the report).
pub(crate) fn reader_for(
    neg: &Negotiated,
    ad: Option<&RegionAd>,
    size: usize,
    count: u64,
) -> Result<Reader, String> {
    let Some(ad) = ad else {
        return Err(
            "--op read: the Responder's Reply carries no region advertisement, so \
                    there is no region to read from"
                .into(),
        );
    };
    let size = u32::try_from(size)
        .ok()
        .filter(|&s| u64::from(s) <= ad.len)
        .ok_or_else(|| {
            format!(
                "--op read: --size {size} exceeds the advertised region of {} octets \
                 (STag {:#x})",
                ad.len, ad.stag
            )
        })?;
    // RFC 6581 §9.1: the negotiated ORD when revision 2 negotiated one.
    let ord = if neg.peer_enhanced.is_some() && neg.ord != NO_IRD_ORD_NEGOTIATION {
        neg.ord
    } else {
        DEFAULT_ORD
    };
    if ord == 0 {
        return Err(
            "--op read: the startup negotiated an ORD of 0: no RDMA Read may be \
                    outstanding"
                .into(),
        );
    }
    let rtr_read = neg.rtr == Some(RtrType::ZeroLengthReadRequest);
    Ok(Reader::new(ad, size, count, ord, rtr_read))
}

/// Runs the reads: sends Read Requests while fewer than ORD are outstanding, checks every
/// Read Response, until all are answered. Every wait is bounded by `timeout`; a response
/// that breaks a rule is answered with its Terminate ([`ReadError::terminate`]). `digest`
/// takes the Read Request ULPDUs sent.
pub(crate) fn run<S: Transport>(
    s: &mut MpaStream<S>,
    reader: &mut Reader,
    timeout: Duration,
    digest: &mut u32,
) -> Result<(), ConnectError> {
    let version = s.negotiated().ddp_rdmap_version;
    while !reader.finished() {
        let mut sent = false;
        while let Some(rr) = reader.next_request() {
            let u = rr.ulpdu(version);
            s.send(&u)?;
            *digest = crc32c_append(*digest, &u);
            sent = true;
        }
        if sent {
            s.flush()?;
        }
        let mut bad = None;
        let n = s.recv_with(Some(timeout), |u| {
            if bad.is_some() {
                return;
            }
            let (head, k) = head_of(&u);
            if let Err(e) = reader.on_ulpdu(&head[..k], u.len(), version, u.pieces()) {
                bad = Some((e, head, k, u.len()));
            }
        })?;
        if let Some((e, head, k, len)) = bad {
            let t = e.terminate();
            let hdr = &head[..k.min(UNTAGGED_HEADER_LEN)];
            let term = terminate_ulpdu_for_segment(t, 1, version, len, hdr);
            // Best effort: the connection ends with `e` whatever happens to the Terminate.
            let _ = s.send(&term).and_then(|()| s.flush());
            return Err(ConnectError::Violation(t, e.to_string()));
        }
        if n.is_none() {
            return Err(EndpointError::Closed.into());
        }
    }
    Ok(())
}

/// The reads' numbers in the report; octets that differ from the pattern make it an error.
pub(crate) fn report(report: &mut Report, st: ReadStats) {
    report.read_responses = Some(st.responses);
    report.read_octets = Some(st.octets);
    report.read_pattern_ok = Some(st.pattern_mismatches == 0);
    if let Some(t) = report.transfer_seconds.filter(|&t| t > 0.0) {
        report.goodput_gbps = Some(st.octets as f64 * 8.0 / t / 1e9);
    }
    if st.pattern_mismatches > 0 && report.error.is_none() {
        report.error = Some(format!(
            "{} octets read differ from the pattern at their source offsets",
            st.pattern_mismatches
        ));
    }
}

/// The first octets of a ULPDU that the [`Sink`], the [`Reader`] and a Terminate look at.
pub(crate) fn head_of(u: &mpa::decoder::Ulpdu<'_>) -> ([u8; HEAD_LEN], usize) {
    let mut head = [0u8; HEAD_LEN];
    let k = u.copy_prefix(&mut head);
    (head, k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ad(base_to: u64, len: u64) -> RegionAd {
        RegionAd {
            writes: true,
            sends: false,
            stag: 0x42,
            len,
            base_to,
            recv_buf_size: 0,
        }
    }

    #[test]
    fn read_request_round_trip() {
        let rr = ReadRequest {
            msn: 7,
            header: ReadRequestRepr {
                sink_stag: SINK_STAG,
                sink_to: 0x0102_0304_0506_0708,
                size: 4096,
                src_stag: 0x42,
                src_to: u64::MAX - 1,
            },
        };
        let u = rr.ulpdu(1);
        let (h, off) = DdpRepr::parse(&u, 1).unwrap();
        assert_eq!(
            h,
            DdpRepr::Untagged {
                last: true,
                opcode: RdmapOpcode::RdmaReadRequest,
                inv_stag: 0,
                qn: 1,
                msn: 7,
                mo: 0
            }
        );
        assert_eq!(ReadRequest::parse(7, &u[off..]), Some(rr));
        assert_eq!(ReadRequest::parse(7, &u[off..off + 27]), None);
    }

    #[test]
    fn source_offsets_stay_in_bounds() {
        // 10 octets in a 25-octet region: offsets 0, 10 (15 fits), then 20 mod 16 = 4, ...
        let offs: Vec<u64> = (0..5).map(|i| source_offset(i, 10, 25)).collect();
        assert_eq!(offs, [0, 10, 4, 14, 8]);
        for i in 0..1000 {
            assert!(source_offset(i, 10, 25) + 10 <= 25);
        }
        let room = (1u128 << 20) - 4096 + 1;
        assert_eq!(
            source_offset(u64::MAX, 4096, 1 << 20),
            ((u128::from(u64::MAX) * 4096) % room) as u64
        );
        assert_eq!(source_offset(5, 25, 25), 0);
        assert_eq!(source_offset(5, 0, 25), 0);
    }

    #[test]
    fn segments_cut_at_max_payload() {
        let v: Vec<_> = segments(10, 4).collect();
        assert_eq!(v, [(0, 4, false), (4, 4, false), (8, 2, true)]);
        assert_eq!(
            segments(8, 4).collect::<Vec<_>>(),
            [(0, 4, false), (4, 4, true)]
        );
        assert_eq!(segments(0, 4).collect::<Vec<_>>(), [(0, 0, true)]);
        assert_eq!(segments(3, 0).count(), 3);
    }

    fn response(stag: u32, to: u64, last: bool, data: &[u8]) -> Vec<u8> {
        crate::sink::tagged_ulpdu(RdmapOpcode::RdmaReadResponse, stag, to, last, data)
    }

    fn feed(r: &mut Reader, u: &[u8]) -> Result<(), ReadError> {
        // Two pieces, as markers would cut it.
        let cut = u.len().min(9);
        r.on_ulpdu(
            &u[..u.len().min(HEAD_LEN)],
            u.len(),
            1,
            [&u[..cut], &u[cut..]].into_iter(),
        )
    }

    /// The pattern of the region octets `off..off + n`.
    fn pat(off: u64, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        RegionPattern::new().fill(off, &mut v);
        v
    }

    #[test]
    fn reader_keeps_ord_and_checks_every_response() {
        let mut r = Reader::new(&ad(1000, 25), 10, 3, 2, false);
        let a = r.next_request().unwrap();
        let b = r.next_request().unwrap();
        assert!(r.next_request().is_none(), "ORD 2");
        let (ah, bh) = (a.header, b.header);
        assert_eq!(
            (a.msn, ah.sink_to, ah.src_to, ah.src_stag),
            (1, 0, 1000, 0x42)
        );
        assert_eq!((b.msn, bh.sink_to, bh.src_to), (2, 10, 1010));
        // Read 0 in two segments.
        feed(&mut r, &response(SINK_STAG, 0, false, &pat(0, 4))).unwrap();
        feed(&mut r, &response(SINK_STAG, 4, true, &pat(4, 6))).unwrap();
        let c = r.next_request().unwrap();
        assert_eq!((c.msn, c.header.sink_to, c.header.src_to), (3, 20, 1004));
        assert!(r.next_request().is_none());
        feed(&mut r, &response(SINK_STAG, 10, true, &pat(10, 10))).unwrap();
        // Wrong octets are counted, not fatal.
        feed(&mut r, &response(SINK_STAG, 20, true, &pat(5, 10))).unwrap();
        assert!(r.finished());
        let st = r.stats();
        assert_eq!((st.responses, st.octets), (3, 30));
        assert!(st.pattern_mismatches > 0);
        assert_eq!(
            feed(&mut r, &response(SINK_STAG, 30, true, &[])),
            Err(ReadError::Unsolicited)
        );
    }

    #[test]
    fn reader_refuses_what_it_did_not_ask_for() {
        let fresh = || {
            let mut r = Reader::new(&ad(0, 100), 10, 2, 8, false);
            r.next_request().unwrap();
            r
        };
        let cases = [
            (response(7, 0, true, &pat(0, 10)), (1, 1, 0)),
            (response(SINK_STAG, 10, true, &pat(0, 10)), (1, 1, 1)),
            (response(SINK_STAG, 0, true, &pat(0, 9)), (1, 1, 1)),
            (response(SINK_STAG, 0, false, &pat(0, 11)), (1, 1, 1)),
        ];
        for (u, (l, t, c)) in cases {
            let e = feed(&mut fresh(), &u).unwrap_err();
            let tr = e.terminate();
            assert_eq!((tr.layer, tr.error_type, tr.error_code), (l, t, c), "{e}");
        }
        let mut w = vec![0u8; TAGGED_HEADER_LEN];
        DdpRepr::Tagged {
            last: true,
            opcode: RdmapOpcode::RdmaWrite,
            stag: 1,
            to: 0,
        }
        .emit(&mut w, 1)
        .unwrap();
        assert_eq!(
            feed(&mut fresh(), &w),
            Err(ReadError::UnexpectedOpcode {
                opcode: RdmapOpcode::RdmaWrite
            })
        );
    }

    #[test]
    fn a_read_rtr_takes_msn_1_and_an_ord_slot() {
        let mut r = Reader::new(&ad(0, 100), 10, 2, 2, true);
        assert_eq!(r.next_request().unwrap().msn, 2);
        assert!(r.next_request().is_none(), "the RTR holds the other slot");
        assert!(!r.finished());
        feed(&mut r, &response(0, 0, true, &[])).unwrap();
        assert_eq!(r.next_request().unwrap().msn, 3);
        feed(&mut r, &response(SINK_STAG, 0, true, &pat(0, 10))).unwrap();
        feed(&mut r, &response(SINK_STAG, 10, true, &pat(10, 10))).unwrap();
        assert!(r.finished());
        assert_eq!(r.stats().pattern_mismatches, 0);
    }
}
