//! The listener's advertised region as a real Data Sink (and Data Source, `read.rs`): an
//! in-memory region of the advertised length into which tagged RDMA Writes are placed after
//! the checks RFC 5041 §7.2 and RFC 5040 §7.2 prescribe; the violations map to the same
//! Terminates as the datapath's receiver (stack/src/receiver/placement/error.rs). Sans I/O:
//! the connection thread feeds ULPDUs in and sends what comes out.
//!
//! The region's pattern: octet `o` of the region (its TO is `base_to + o`) is expected to be
//! [`pattern`]`(0, o)`, i.e. the region reads as payload 0 of the shared pattern spread over
//! the whole region: what a datapath sender test that fills its source region with the
//! pattern by region offset and writes offset `o` to TO `base_to + o` leaves here, and what
//! `--fill-pattern` puts in ours. `mpa-peer connect --op write` sends payload `n` into
//! slot `n` instead; both agree exactly when the payload length is ≡ 198 (mod 251) and the
//! writes do not wrap (pattern.rs: payload `n` starts 198·n mod 251 into the period).

use crate::request::ReadRequest;
use mpa::crc::crc32c_append;
use mpa::wire::ddp::{
    queue, DdpRepr, RdmapOpcode, TerminateRepr, READ_REQUEST_HEADER_LEN, TAGGED_HEADER_LEN,
};
use mpa_ctl_proto::pattern::{pattern, PERIOD};
use mpa_ctl_proto::region_ad::RegionAd;
use std::collections::VecDeque;
use std::ops::Range;

/// The largest region the listener keeps in memory (per connection).
pub(crate) const MAX_REGION_LEN: u64 = 1 << 30;
/// Inbound RDMA Reads outstanding at once when the startup did not negotiate IRD (revision 1,
/// or 0x3FFF): what the Initiator's default ORD (8) fits with room to spare.
pub(crate) const DEFAULT_IRD: u16 = 16;

/// Why an incoming message is refused; each carries the values that failed its check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Violation {
    /// An RDMA Write to an STag other than the region's.
    #[error("RDMA Write to STag {stag:#x}, the only region is STag {region:#x}")]
    InvalidStag { stag: u32, region: u32 },
    /// TO + length wraps 2^64.
    #[error("RDMA Write TO {to:#x} + {len} octets wraps")]
    ToWrap { to: u64, len: u64 },
    /// The payload is (partly) outside the region.
    #[error("RDMA Write TO {to:#x} + {len} octets is outside the region (TO {base_to:#x}, {region_len} octets)")]
    Bounds {
        to: u64,
        len: u64,
        base_to: u64,
        region_len: u64,
    },
    /// A Read Request too short for its RDMA Read Request Header.
    #[error("a {ulpdu_len}-octet RDMA Read Request is too short for its header")]
    ReadTruncated { ulpdu_len: usize },
    /// A Read Request on a queue other than 1.
    #[error("RDMA Read Request on queue {qn}, expected 1")]
    ReadInvalidQn { qn: u32 },
    /// The Data Source STag is not the region's.
    #[error("Read Request source STag {stag:#x}, the only region is STag {region:#x}")]
    ReadInvalidStag { stag: u32, region: u32 },
    /// Source TO + RDMA Read Message Size wraps 2^64.
    #[error("Read Request source TO {to:#x} + {len} octets wraps")]
    ReadToWrap { to: u64, len: u32 },
    /// The octets asked for are (partly) outside the region.
    #[error("Read Request source TO {to:#x} + {len} octets is outside the region (TO {base_to:#x}, {region_len} octets)")]
    ReadBounds {
        to: u64,
        len: u32,
        base_to: u64,
        region_len: u64,
    },
    /// The region does not allow remote reads (no `--remote-read`).
    #[error("STag {stag:#x} does not allow remote reads")]
    NoRemoteRead { stag: u32 },
    /// More Read Requests outstanding than the IRD.
    #[error("more than IRD {ird} RDMA Read Requests outstanding")]
    IrdExceeded { ird: u16 },
}

impl Violation {
    /// The Terminate control fields: RFC 5041 §7.2 (DDP tagged, layer 1 type 1) for Writes,
    /// RFC 5040 Figure 9 (RDMAP, layer 0) for Read Requests; the same values as the
    /// datapath's `PlacementError::terminate`.
    pub(crate) fn terminate(&self) -> TerminateRepr {
        use Violation as V;
        let (layer, error_type, error_code) = match self {
            V::InvalidStag { .. } => (1, 1, 0x00),
            V::Bounds { .. } => (1, 1, 0x01),
            V::ToWrap { .. } => (1, 1, 0x03),
            // RFC 5041 §7.2: untagged buffer error, Invalid QN.
            V::ReadInvalidQn { .. } => (1, 2, 0x01),
            // As the datapath: a Read Request cut short is an unspecified operation error.
            V::ReadTruncated { .. } => (0, 2, 0xff),
            // RFC 5040 §7.2 4a-4e, Figure 9: Remote Protection Errors.
            V::ReadInvalidStag { .. } => (0, 1, 0x00),
            V::ReadBounds { .. } => (0, 1, 0x01),
            V::NoRemoteRead { .. } => (0, 1, 0x02),
            V::ReadToWrap { .. } => (0, 1, 0x04),
            // RFC 5040 has no code for an IRD overrun (§6.1 only says neither side may exceed
            // it). Remote Operation Error 0x07 "Catastrophic error, localized to RDMAP Stream"
            // fits best: the stream is broken, nothing else is; it is also what Linux siw
            // sends when its inbound read queue overflows (siw_init_rresp).
            V::IrdExceeded { .. } => (0, 2, 0x07),
        };
        TerminateRepr {
            layer,
            error_type,
            error_code,
        }
    }

    /// Whether the Terminate carries the Read Request's RDMA header (HdrCt R): RFC 5040
    /// Figure 10, only for Remote Protection Errors.
    pub(crate) fn carries_rdma_header(&self) -> bool {
        self.terminate().layer == 0 && self.terminate().error_type == 1
    }
}

/// Why a tagged range fails its checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutOfRange {
    /// TO + length wraps 2^64.
    Wrap,
    /// Starts before the region's first TO or ends after its last.
    Bounds,
}

/// The region offset of the `len` octets at TO `to` in a region of `region_len` octets whose
/// first octet has TO `base_to` (RFC 5041 §7.2 "base or bounds", "TO wrap"; RFC 5040 §7.2
/// 4c-4e). Wrapping is judged first, as the datapath does.
pub(crate) fn locate(base_to: u64, region_len: u64, to: u64, len: u64) -> Result<u64, OutOfRange> {
    let end = to.checked_add(len).ok_or(OutOfRange::Wrap)?;
    // RegionAd::check keeps base_to + region_len within 64 bits; saturate all the same.
    if to < base_to || end > base_to.saturating_add(region_len) {
        return Err(OutOfRange::Bounds);
    }
    Ok(to - base_to)
}

/// Octets compared against the pattern per step.
const PATTERN_STEP: usize = 64 * 1024;

/// The region pattern, [`pattern`]`(0, o)` at region offset `o`, as one precomputed row.
pub(crate) struct RegionPattern {
    row: Vec<u8>,
}

impl RegionPattern {
    pub(crate) fn new() -> Self {
        RegionPattern {
            row: (0..PERIOD + PATTERN_STEP).map(|j| pattern(0, j)).collect(),
        }
    }

    /// The pattern at region offsets `at..at + len` (`len` at most [`PATTERN_STEP`]).
    fn at(&self, at: u64, len: usize) -> &[u8] {
        let k = (at % PERIOD as u64) as usize;
        &self.row[k..k + len]
    }

    /// How many octets of `data` differ from the pattern at region offsets
    /// `off..off + data.len()`.
    pub(crate) fn mismatches(&self, off: u64, data: &[u8]) -> u64 {
        let mut at = off;
        let mut n = 0;
        for c in data.chunks(PATTERN_STEP) {
            let want = self.at(at, c.len());
            // Equal slices (the usual case) compare as one memcmp.
            if c != want {
                n += c.iter().zip(want).filter(|(a, b)| a != b).count() as u64;
            }
            at += c.len() as u64;
        }
        n
    }

    /// Fills `buf`, region offsets `off..`, with the pattern.
    pub(crate) fn fill(&self, off: u64, buf: &mut [u8]) {
        let mut at = off;
        for c in buf.chunks_mut(PATTERN_STEP) {
            c.copy_from_slice(self.at(at, c.len()));
            at += c.len() as u64;
        }
    }
}

/// What a connection's sink counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SinkStats {
    /// RDMA Write messages (segments with L set).
    pub writes: u64,
    /// RDMA Write payload octets placed.
    pub write_octets: u64,
    /// Octets placed that differed from the region pattern at their place.
    pub pattern_mismatches: u64,
}

/// One connection's region, and the Read Requests waiting for their responses.
pub(crate) struct Sink {
    ad: RegionAd,
    remote_read: bool,
    mem: Vec<u8>,
    pattern: RegionPattern,
    stats: SinkStats,
    ird: u16,
    reads: VecDeque<ReadRequest>,
}

impl Sink {
    /// A region of `ad.len` octets (at most [`MAX_REGION_LEN`], checked by the caller),
    /// zeroed or (`fill`) holding the region pattern; `ird` Read Requests may wait at once.
    pub(crate) fn new(ad: &RegionAd, remote_read: bool, fill: bool, ird: u16) -> Self {
        let pattern = RegionPattern::new();
        let mut mem = vec![0u8; ad.len as usize];
        if fill {
            pattern.fill(0, &mut mem);
        }
        Sink {
            ad: *ad,
            remote_read,
            mem,
            pattern,
            stats: SinkStats::default(),
            ird,
            reads: VecDeque::new(),
        }
    }

    pub(crate) fn stats(&self) -> SinkStats {
        self.stats
    }

    /// CRC32c of the whole region.
    pub(crate) fn digest(&self) -> u32 {
        crc32c_append(0, &self.mem)
    }

    /// Takes one ULPDU (its first octets `head`, at least `UNTAGGED_HEADER_LEN` +
    /// [`READ_REQUEST_HEADER_LEN`] when it has them; `len` octets in all, given as `pieces`):
    /// RDMA Writes are placed, Read Requests queued for [`Sink::next_read`]; everything else
    /// is left to the caller. A violation stops the connection: nothing more may be fed.
    pub(crate) fn on_ulpdu<'a>(
        &mut self,
        head: &[u8],
        len: usize,
        version: u8,
        pieces: impl Iterator<Item = &'a [u8]>,
    ) -> Result<(), Violation> {
        match DdpRepr::parse(head, version) {
            Ok((
                DdpRepr::Tagged {
                    opcode: RdmapOpcode::RdmaWrite,
                    last,
                    stag,
                    to,
                },
                _,
            )) => self.write(stag, to, last, len - TAGGED_HEADER_LEN, pieces),
            Ok((
                DdpRepr::Untagged {
                    opcode: RdmapOpcode::RdmaReadRequest,
                    qn,
                    msn,
                    ..
                },
                off,
            )) => {
                if qn != queue::READ_REQUEST {
                    return Err(Violation::ReadInvalidQn { qn });
                }
                let rr = head
                    .get(off..off + READ_REQUEST_HEADER_LEN)
                    .filter(|_| len >= off + READ_REQUEST_HEADER_LEN)
                    .and_then(|h| ReadRequest::parse(msn, h))
                    .ok_or(Violation::ReadTruncated { ulpdu_len: len })?;
                self.check_read(&rr)?;
                if self.reads.len() >= usize::from(self.ird) {
                    return Err(Violation::IrdExceeded { ird: self.ird });
                }
                self.reads.push_back(rr);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// RFC 5041 §7.2 checks of a tagged RDMA Write of `len` payload octets, then placement.
    fn write<'a>(
        &mut self,
        stag: u32,
        to: u64,
        last: bool,
        len: usize,
        pieces: impl Iterator<Item = &'a [u8]>,
    ) -> Result<(), Violation> {
        // RFC 5041 §5.3: STag and TO of a zero-length tagged segment are not checked.
        if len > 0 {
            if stag != self.ad.stag {
                return Err(Violation::InvalidStag {
                    stag,
                    region: self.ad.stag,
                });
            }
            let off = match locate(self.ad.base_to, self.ad.len, to, len as u64) {
                Ok(off) => off as usize,
                Err(OutOfRange::Wrap) => {
                    return Err(Violation::ToWrap {
                        to,
                        len: len as u64,
                    })
                }
                Err(OutOfRange::Bounds) => {
                    return Err(Violation::Bounds {
                        to,
                        len: len as u64,
                        base_to: self.ad.base_to,
                        region_len: self.ad.len,
                    })
                }
            };
            let dst = &mut self.mem[off..off + len];
            copy_skipping(pieces, TAGGED_HEADER_LEN, dst);
            self.stats.pattern_mismatches += self.pattern.mismatches(off as u64, dst);
            self.stats.write_octets += len as u64;
        }
        if last {
            self.stats.writes += 1;
        }
        Ok(())
    }

    /// RFC 5040 §7.2 (4a-4e) as the Data Source checks a Read Request, in the datapath's
    /// order: source STag, TO wrap, bounds, then remote read access. A zero-length Read is
    /// not checked ("for non-zero length RDMA Read Request Messages").
    fn check_read(&self, rr: &ReadRequest) -> Result<(), Violation> {
        let rr = &rr.header;
        if rr.size == 0 {
            return Ok(());
        }
        if rr.src_stag != self.ad.stag {
            return Err(Violation::ReadInvalidStag {
                stag: rr.src_stag,
                region: self.ad.stag,
            });
        }
        match locate(self.ad.base_to, self.ad.len, rr.src_to, u64::from(rr.size)) {
            Ok(_) => {}
            Err(OutOfRange::Wrap) => {
                return Err(Violation::ReadToWrap {
                    to: rr.src_to,
                    len: rr.size,
                })
            }
            Err(OutOfRange::Bounds) => {
                return Err(Violation::ReadBounds {
                    to: rr.src_to,
                    len: rr.size,
                    base_to: self.ad.base_to,
                    region_len: self.ad.len,
                })
            }
        }
        if !self.remote_read {
            return Err(Violation::NoRemoteRead { stag: rr.src_stag });
        }
        Ok(())
    }

    /// The oldest Read Request not answered yet and the region octets it asks for (checked
    /// when it arrived); the caller sends the Read Response, in arrival order (RFC 5040 §5.5
    /// rule 20).
    pub(crate) fn next_read(&mut self) -> Option<(ReadRequest, &[u8])> {
        let rr = self.reads.pop_front()?;
        let range = self.source_range(&rr);
        Some((rr, &self.mem[range]))
    }

    fn source_range(&self, rr: &ReadRequest) -> Range<usize> {
        let rr = &rr.header;
        match locate(self.ad.base_to, self.ad.len, rr.src_to, u64::from(rr.size)) {
            Ok(off) => off as usize..off as usize + rr.size as usize,
            // Zero-length Reads are not checked: they read nothing.
            Err(_) => 0..0,
        }
    }
}

/// Copies the octets of `pieces` after the first `skip` into `dst` (exactly `dst.len()` of
/// them are expected).
pub(crate) fn copy_skipping<'a>(
    pieces: impl Iterator<Item = &'a [u8]>,
    mut skip: usize,
    dst: &mut [u8],
) {
    let mut at = 0;
    for p in pieces {
        let s = skip.min(p.len());
        let p = &p[s..];
        skip -= s;
        let n = p.len().min(dst.len() - at);
        dst[at..at + n].copy_from_slice(&p[..n]);
        at += n;
    }
}

/// A tagged DDP segment (version 1) with `payload`: the ULPDUs the peer's unit tests feed.
#[cfg(test)]
pub(crate) fn tagged_ulpdu(
    opcode: RdmapOpcode,
    stag: u32,
    to: u64,
    last: bool,
    payload: &[u8],
) -> Vec<u8> {
    let mut v = vec![0u8; TAGGED_HEADER_LEN];
    DdpRepr::Tagged {
        last,
        opcode,
        stag,
        to,
    }
    .emit(&mut v, 1)
    .expect("a tagged header fits its buffer");
    v.extend_from_slice(payload);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpa::wire::ddp::ReadRequestRepr;

    fn ad(base_to: u64, len: u64) -> RegionAd {
        RegionAd {
            writes: true,
            sends: false,
            stag: 0x77,
            len,
            base_to,
            recv_buf_size: 0,
        }
    }

    #[test]
    fn bounds_arithmetic() {
        // Region TOs 100..200.
        assert_eq!(locate(100, 100, 100, 100), Ok(0));
        assert_eq!(locate(100, 100, 150, 50), Ok(50));
        assert_eq!(locate(100, 100, 199, 1), Ok(99));
        assert_eq!(locate(100, 100, 200, 0), Ok(100));
        assert_eq!(locate(100, 100, 199, 2), Err(OutOfRange::Bounds));
        assert_eq!(locate(100, 100, 99, 1), Err(OutOfRange::Bounds));
        assert_eq!(locate(100, 100, 0, 10), Err(OutOfRange::Bounds));
        assert_eq!(locate(100, 100, 201, 0), Err(OutOfRange::Bounds));
        // Wrap is judged before bounds.
        assert_eq!(locate(100, 100, u64::MAX, 1), Err(OutOfRange::Wrap));
        assert_eq!(locate(0, 100, u64::MAX - 9, 9), Err(OutOfRange::Bounds));
        assert_eq!(locate(0, 100, u64::MAX - 9, 10), Err(OutOfRange::Wrap));
        // A region at the very top of the TO space (its last octet has TO 2^64 - 2).
        assert_eq!(locate(u64::MAX - 9, 9, u64::MAX - 9, 9), Ok(0));
        assert_eq!(locate(u64::MAX - 9, 9, u64::MAX - 1, 1), Ok(8));
        assert_eq!(locate(u64::MAX - 9, 9, u64::MAX, 0), Ok(9));
        assert_eq!(
            locate(u64::MAX - 9, 8, u64::MAX - 1, 1),
            Err(OutOfRange::Bounds)
        );
        assert_eq!(
            locate(u64::MAX - 9, 9, u64::MAX - 1, 2),
            Err(OutOfRange::Wrap)
        );
    }

    fn write_ulpdu(stag: u32, to: u64, last: bool, payload: &[u8]) -> Vec<u8> {
        tagged_ulpdu(RdmapOpcode::RdmaWrite, stag, to, last, payload)
    }

    fn feed(s: &mut Sink, u: &[u8]) -> Result<(), Violation> {
        // Two pieces, as markers would cut it.
        let cut = u.len().min(5);
        s.on_ulpdu(
            &u[..u.len().min(crate::request::HEAD_LEN)],
            u.len(),
            1,
            [&u[..cut], &u[cut..]].into_iter(),
        )
    }

    #[test]
    fn writes_are_placed_at_base_to_relative_offsets() {
        let p = RegionPattern::new();
        let mut s = Sink::new(&ad(1000, 600), false, false, 4);
        let mut data = vec![0u8; 300];
        p.fill(200, &mut data);
        feed(&mut s, &write_ulpdu(0x77, 1200, false, &data[..100])).unwrap();
        feed(&mut s, &write_ulpdu(0x77, 1300, true, &data[100..])).unwrap();
        assert_eq!(
            s.stats(),
            SinkStats {
                writes: 1,
                write_octets: 300,
                pattern_mismatches: 0
            }
        );
        let mut want = vec![0u8; 600];
        want[200..500].copy_from_slice(&data);
        assert_eq!(s.mem, want);
        assert_eq!(s.digest(), mpa::crc::crc32c(&want));
        // Right octets in the wrong place.
        feed(&mut s, &write_ulpdu(0x77, 1000, true, &data[..10])).unwrap();
        assert_eq!(s.stats().pattern_mismatches, 10);
        // Zero-length: no checks.
        feed(&mut s, &write_ulpdu(5, u64::MAX, true, &[])).unwrap();
        assert_eq!(s.stats().writes, 3);
    }

    #[test]
    fn write_violations_and_their_terminates() {
        let mut s = Sink::new(&ad(1000, 600), false, false, 4);
        let cases = [
            (write_ulpdu(0x78, 1000, true, &[1]), (1, 1, 0)),
            (write_ulpdu(0x77, 1599, true, &[1, 2]), (1, 1, 1)),
            (write_ulpdu(0x77, 999, true, &[1]), (1, 1, 1)),
            (write_ulpdu(0x77, u64::MAX, true, &[1, 2]), (1, 1, 3)),
        ];
        for (u, (l, t, c)) in cases {
            let v = feed(&mut s, &u).unwrap_err();
            let tr = v.terminate();
            assert_eq!((tr.layer, tr.error_type, tr.error_code), (l, t, c), "{v}");
            assert!(!v.carries_rdma_header());
        }
        assert_eq!(s.stats(), SinkStats::default());
    }

    fn read_ulpdu(qn: u32, rr: &ReadRequest) -> Vec<u8> {
        let mut v = rr.ulpdu(1).to_vec();
        v[6..10].copy_from_slice(&qn.to_be_bytes());
        v
    }

    fn rr(size: u32, src_stag: u32, src_to: u64) -> ReadRequest {
        ReadRequest {
            msn: 1,
            header: ReadRequestRepr {
                sink_stag: 0x5a5a_0001,
                sink_to: 0,
                size,
                src_stag,
                src_to,
            },
        }
    }

    #[test]
    fn read_requests_are_checked_queued_and_bounded_by_ird() {
        let mut s = Sink::new(&ad(1000, 600), true, true, 2);
        feed(&mut s, &read_ulpdu(1, &rr(100, 0x77, 1500))).unwrap();
        feed(&mut s, &read_ulpdu(1, &rr(0, 9, u64::MAX))).unwrap();
        let v = feed(&mut s, &read_ulpdu(1, &rr(1, 0x77, 1000))).unwrap_err();
        assert_eq!(v, Violation::IrdExceeded { ird: 2 });
        let t = v.terminate();
        assert_eq!((t.layer, t.error_type, t.error_code), (0, 2, 7));
        assert!(!v.carries_rdma_header());
        let (r, data) = s.next_read().unwrap();
        assert_eq!((r.header.size, data.len()), (100, 100));
        assert_eq!(RegionPattern::new().mismatches(500, data), 0);
        let (r, data) = s.next_read().unwrap();
        assert_eq!((r.header.size, data.len()), (0, 0));
        assert!(s.next_read().is_none());
    }

    #[test]
    fn read_violations_and_their_terminates() {
        let mut readable = Sink::new(&ad(1000, 600), true, false, 8);
        let mut unreadable = Sink::new(&ad(1000, 600), false, false, 8);
        let cases = [
            (true, read_ulpdu(1, &rr(1, 0x78, 1000)), (0, 1, 0)),
            (true, read_ulpdu(1, &rr(2, 0x77, 1599)), (0, 1, 1)),
            (true, read_ulpdu(1, &rr(1, 0x77, 999)), (0, 1, 1)),
            (true, read_ulpdu(1, &rr(2, 0x77, u64::MAX)), (0, 1, 4)),
            (false, read_ulpdu(1, &rr(1, 0x77, 1000)), (0, 1, 2)),
            // Bounds before access, as in the datapath.
            (false, read_ulpdu(1, &rr(601, 0x77, 1000)), (0, 1, 1)),
            (true, read_ulpdu(0, &rr(1, 0x77, 1000)), (1, 2, 1)),
        ];
        for (remote_read, u, (l, t, c)) in cases {
            let s = if remote_read {
                &mut readable
            } else {
                &mut unreadable
            };
            let v = feed(s, &u).unwrap_err();
            let tr = v.terminate();
            assert_eq!((tr.layer, tr.error_type, tr.error_code), (l, t, c), "{v}");
            assert_eq!(v.carries_rdma_header(), (l, t) == (0, 1));
        }
        let short = &read_ulpdu(1, &rr(1, 0x77, 1000))[..40];
        assert_eq!(
            feed(&mut readable, short),
            Err(Violation::ReadTruncated { ulpdu_len: 40 })
        );
        assert!(readable.next_read().is_none());
    }

    #[test]
    fn pattern_fill_and_match_agree_with_the_definition() {
        let p = RegionPattern::new();
        let mut buf = vec![0u8; 3 * PATTERN_STEP + 17];
        p.fill(250, &mut buf);
        for (i, &b) in buf.iter().enumerate() {
            assert_eq!(b, pattern(0, 250 + i));
        }
        assert_eq!(p.mismatches(250, &buf), 0);
        assert_eq!(
            p.mismatches(251, &buf),
            buf.len() as u64,
            "7 is coprime to 251: every octet moves"
        );
        buf[PATTERN_STEP + 3] ^= 1;
        buf[2 * PATTERN_STEP + 3] ^= 1;
        assert_eq!(p.mismatches(250, &buf), 2);
        // Payload n of a write with a 198-octet payload is the region pattern at slot n.
        let t = mpa_ctl_proto::pattern::PatternTable::new(198);
        for n in 0..5u64 {
            assert_eq!(p.mismatches(n * 198, t.payload(n, 198)), 0);
        }
    }
}
