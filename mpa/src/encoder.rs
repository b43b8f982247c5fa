//! FPDU sender: ULPDUs to wire octets at the right stream position (RFC 5044 §4).

use crate::crc;
use crate::markers::{self, Piece, WireLayout};
use crate::wire::fpdu::{self, CRC_LEN, HEADER_LEN, MAX_ULPDU};
use crate::wire::marker::marker_bytes;
use std::ops::Range;

/// Why a ULPDU could not be framed. Always a local misuse: nothing was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// RFC 5044 §3: DDP MUST NOT post a ULPDU larger than 64768 octets.
    #[error("ULPDU of {0} octets exceeds the 64768-octet maximum")]
    UlpduTooLarge(usize),
    /// The output buffer cannot hold the FPDU.
    #[error("output buffer too small: FPDU needs {need} octets, {have} available")]
    BufferTooSmall {
        /// Octets the FPDU needs.
        need: usize,
        /// Octets available.
        have: usize,
    },
}

/// Frames ULPDUs for one direction of a connection in Full Operation.
#[derive(Debug, Clone)]
pub struct FpduEncoder {
    pos: u32,
    markers: bool,
}

impl FpduEncoder {
    /// An encoder at the start of Full Operation (stream position 0 = SeqStart). `markers`:
    /// the peer required markers (its M flag).
    pub fn new(markers: bool) -> Self {
        FpduEncoder { pos: 0, markers }
    }

    /// An encoder that continues at stream position `pos` (octets since SeqStart, mod 2^32).
    pub fn at_position(pos: u32, markers: bool) -> Self {
        FpduEncoder { pos, markers }
    }

    /// Current stream position (octets since SeqStart, mod 2^32).
    pub fn position(&self) -> u32 {
        self.pos
    }

    /// Whether markers are inserted.
    pub fn markers(&self) -> bool {
        self.markers
    }

    /// Wire octets the next FPDU takes for a ULPDU of `ulpdu_len` octets.
    pub fn wire_len(&self, ulpdu_len: usize) -> usize {
        markers::fpdu_wire_len(self.pos, ulpdu_len, self.markers)
    }

    /// The largest ULPDU whose FPDU fits in `room` wire octets at the current position.
    pub fn max_ulpdu_in(&self, room: usize) -> Option<usize> {
        markers::max_ulpdu_in(self.pos, room, self.markers)
    }

    /// Frames a ULPDU given as consecutive parts (e.g. a DDP header and its payload) into the
    /// front of `out`; returns the wire octets written.
    pub fn encode_parts_into(
        &mut self,
        parts: &[&[u8]],
        out: &mut [u8],
    ) -> Result<usize, EncodeError> {
        let ulpdu_len: usize = parts.iter().map(|p| p.len()).sum();
        if ulpdu_len > MAX_ULPDU {
            return Err(EncodeError::UlpduTooLarge(ulpdu_len));
        }
        let need = self.wire_len(ulpdu_len);
        let out = match out.get_mut(..need) {
            Some(o) => o,
            None => {
                return Err(EncodeError::BufferTooSmall {
                    need,
                    have: out.len(),
                })
            }
        };
        let content_len = fpdu::fpdu_len(ulpdu_len);
        let header = (ulpdu_len as u16).to_be_bytes();
        let mut parts = PartsReader::new(parts);
        for piece in WireLayout::new(self.pos, content_len, self.markers) {
            match piece {
                Piece::Marker { wire, fpdu_ptr } => {
                    out[wire..wire + 4].copy_from_slice(&marker_bytes(fpdu_ptr));
                }
                Piece::Content { wire, content, len } => {
                    fill_content(
                        &mut out[wire..wire + len],
                        content,
                        ulpdu_len,
                        &header,
                        &mut parts,
                    );
                }
            }
        }
        // The CRC is the last four wire octets and covers every wire octet before them.
        let c = crc::crc32c(&out[..need - CRC_LEN]);
        out[need - CRC_LEN..].copy_from_slice(&c.to_le_bytes());
        self.pos = self.pos.wrapping_add(need as u32);
        Ok(need)
    }

    /// Frames one ULPDU into the front of `out`.
    pub fn encode_into(&mut self, ulpdu: &[u8], out: &mut [u8]) -> Result<usize, EncodeError> {
        self.encode_parts_into(&[ulpdu], out)
    }

    /// Frames one ULPDU given in parts, appending to `out`; returns the range written.
    pub fn encode_parts(
        &mut self,
        parts: &[&[u8]],
        out: &mut Vec<u8>,
    ) -> Result<Range<usize>, EncodeError> {
        let ulpdu_len: usize = parts.iter().map(|p| p.len()).sum();
        if ulpdu_len > MAX_ULPDU {
            return Err(EncodeError::UlpduTooLarge(ulpdu_len));
        }
        let start = out.len();
        out.resize(start + self.wire_len(ulpdu_len), 0);
        let n = self.encode_parts_into(parts, &mut out[start..])?;
        Ok(start..start + n)
    }

    /// Frames one ULPDU, appending to `out`; returns the range written.
    pub fn encode(&mut self, ulpdu: &[u8], out: &mut Vec<u8>) -> Result<Range<usize>, EncodeError> {
        self.encode_parts(&[ulpdu], out)
    }
}

/// Fills `dst` with marker-free FPDU octets `content..content + dst.len()`: header, ULPDU
/// (from the parts), then PAD zeroes (the CRC slot is written afterwards).
fn fill_content(
    dst: &mut [u8],
    content: usize,
    ulpdu_len: usize,
    header: &[u8; 2],
    parts: &mut PartsReader<'_>,
) {
    let mut at = 0;
    let mut c = content;
    while at < dst.len() {
        if c < HEADER_LEN {
            dst[at] = header[c];
            at += 1;
            c += 1;
        } else if c < HEADER_LEN + ulpdu_len {
            let want = (HEADER_LEN + ulpdu_len - c).min(dst.len() - at);
            parts.read(&mut dst[at..at + want]);
            at += want;
            c += want;
        } else {
            // PAD and the CRC slot.
            dst[at..].fill(0);
            break;
        }
    }
}

/// Sequential reader over a list of slices.
struct PartsReader<'a> {
    parts: &'a [&'a [u8]],
    idx: usize,
    off: usize,
}

impl<'a> PartsReader<'a> {
    fn new(parts: &'a [&'a [u8]]) -> Self {
        PartsReader {
            parts,
            idx: 0,
            off: 0,
        }
    }

    fn read(&mut self, mut dst: &mut [u8]) {
        while !dst.is_empty() {
            let Some(part) = self.parts.get(self.idx) else {
                return;
            };
            let avail = &part[self.off..];
            let n = avail.len().min(dst.len());
            dst[..n].copy_from_slice(&avail[..n]);
            dst = &mut dst[n..];
            self.off += n;
            if self.off == part.len() {
                self.idx += 1;
                self.off = 0;
            }
        }
    }
}

/// Packs whole FPDUs into segments of at most EMSS octets (RFC 5044 §5.1 FPDU alignment):
/// a segment starts at an FPDU boundary and holds as many whole FPDUs as fit.
#[derive(Debug)]
pub struct SegmentPacker {
    emss: usize,
    buf: Vec<u8>,
    segment_start: usize,
    segments: Vec<Range<usize>>,
}

impl SegmentPacker {
    /// A packer for segments of `emss` octets.
    pub fn new(emss: usize) -> Self {
        SegmentPacker {
            emss,
            buf: Vec::new(),
            segment_start: 0,
            segments: Vec::new(),
        }
    }

    /// Frames `parts` as one FPDU, closing the current segment first if the FPDU does not fit
    /// in what is left of it. An FPDU larger than EMSS gets a segment to itself (TCP will cut
    /// it; alignment is then lost, which receivers MUST tolerate).
    pub fn push(&mut self, enc: &mut FpduEncoder, parts: &[&[u8]]) -> Result<(), EncodeError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let used = self.buf.len() - self.segment_start;
        if used > 0 && used + enc.wire_len(len) > self.emss {
            self.close();
        }
        enc.encode_parts(parts, &mut self.buf)?;
        Ok(())
    }

    fn close(&mut self) {
        if self.buf.len() > self.segment_start {
            self.segments.push(self.segment_start..self.buf.len());
            self.segment_start = self.buf.len();
        }
    }

    /// Closes the open segment and returns the octets and the segment boundaries in them.
    pub fn finish(&mut self) -> (&[u8], &[Range<usize>]) {
        self.close();
        (&self.buf, &self.segments)
    }

    /// Forgets everything packed so far, keeping the allocations.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.segments.clear();
        self.segment_start = 0;
    }
}

/// Room an FPDU needs at least (header, the longest DDP/RDMAP header, CRC, two markers):
/// exact fill never leaves less than this (other than nothing) at the end of a segment.
const MIN_ROOM: usize = 48;

/// What [`exact_fill`] decided for the next DDP segment of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FillCut {
    /// Payload octets the segment carries.
    pub take: usize,
    /// It ends the message.
    pub last: bool,
    /// The TCP segment must end right after this FPDU (a short segment: the rest of the
    /// room is too small for any FPDU). The sender writes it with a record boundary
    /// (`MSG_EOR`) and the next segment starts afresh.
    pub end_segment: bool,
}

/// Exact-fill alignment (RFC 5044 §5.1 for a sender whose TCP knows nothing of MPA): how to
/// cut the next DDP segment of a message so that FPDUs fill the current TCP segment of
/// `emss` octets exactly. `seg_used` octets of that segment are taken already, the DDP
/// header of each segment is `header_len` octets and `left` payload octets of the message
/// remain.
///
/// Why it works: an FPDU that is to end exactly `room` octets ahead contains a number of
/// markers fixed by its start and end, so its ULPDU is `room − 4m − 6` octets with no PAD
/// (`room` is a multiple of 4, as every FPDU is) — unless a marker occupies the room's last
/// four octets: it would lead the next FPDU, so that segment ends four octets early. The message's last segment ends it when
/// the rest fits and leaves nothing or at least `MIN_ROOM` (room for the next FPDU); when
/// the rest is larger than the room, the segment fills the room and the rest moves on; when
/// it would leave a sliver, the rest is cut into two FPDUs that end exactly at the boundary
/// if possible, else the TCP segment ends early (`end_segment`). A TCP that cuts the stream
/// every `emss` octets from each such end (Linux with that MSS, when the sender writes whole
/// segments) then starts every segment with an FPDU.
pub fn exact_fill(
    enc: &FpduEncoder,
    emss: usize,
    seg_used: usize,
    header_len: usize,
    left: usize,
) -> FillCut {
    let emss = emss.max(MIN_ROOM * 2);
    let room = emss - seg_used % emss;
    let whole = enc.wire_len(header_len + left);
    let cut = |take, last, end_segment| FillCut {
        take,
        last,
        end_segment,
    };
    if whole == room || whole + MIN_ROOM <= room {
        return cut(left, true, false);
    }
    if whole > room {
        // Fill the room exactly; the rest moves on to the next segment. When a marker sits
        // in the last four octets of the room, no FPDU ends exactly there (it would belong to
        // the next FPDU as its leading marker): end the segment just before it instead.
        return match enc.max_ulpdu_in(room) {
            Some(u) if u >= header_len && u - header_len < left => {
                let exact = enc.wire_len(u) == room;
                cut(u - header_len, false, !exact)
            }
            _ => cut(left, true, true),
        };
    }
    // The rest fits but would leave a sliver: two FPDUs that end exactly at the boundary ...
    for x in 1..left {
        let a = enc.wire_len(header_len + x);
        if a + MIN_ROOM / 2 > room {
            break;
        }
        let b = markers::fpdu_wire_len(
            enc.position().wrapping_add(a as u32),
            header_len + left - x,
            enc.markers(),
        );
        if a + b == room {
            return cut(x, false, false);
        }
    }
    // ... or a short TCP segment.
    cut(left, true, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 5044 Figure 5: the first FPDU of a stream, a 42-octet untagged Send.
    #[test]
    fn rfc5044_figure5() {
        let mut ulpdu = vec![0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
        ulpdu.resize(42, 0);
        let mut enc = FpduEncoder::new(true);
        let mut out = Vec::new();
        let r = enc.encode(&ulpdu, &mut out).unwrap();
        assert_eq!(r, 0..52);
        assert_eq!(&out[..6], &[0, 0, 0, 0, 0x00, 0x2a]);
        assert_eq!(&out[48..], &[0x52, 0x23, 0x99, 0x83]);
        assert_eq!(enc.position(), 52);
    }

    /// RFC 5044 Figure 6: an FPDU at offset 0x1ec with a marker after ULPDU_Length.
    #[test]
    fn rfc5044_figure6() {
        let mut ulpdu = vec![0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0];
        ulpdu.resize(42, 0);
        let mut enc = FpduEncoder::at_position(0x1ec, true);
        let mut out = Vec::new();
        enc.encode(&ulpdu, &mut out).unwrap();
        assert_eq!(out.len(), 52);
        assert_eq!(&out[0x14..0x18], &[0, 0, 0, 0x14]);
        assert_eq!(&out[48..], &[0x84, 0x92, 0x58, 0x98]);
    }

    #[test]
    fn spec_write_rtr_with_leading_marker() {
        let ulpdu = [0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut out = Vec::new();
        FpduEncoder::new(false).encode(&ulpdu, &mut out).unwrap();
        assert_eq!(&out[16..], &[0xeb, 0xd3, 0x4c, 0x5f]);
        out.clear();
        FpduEncoder::new(true).encode(&ulpdu, &mut out).unwrap();
        assert_eq!(&out[20..], &0xA1F9_1F3Fu32.to_le_bytes());
    }

    #[test]
    fn errors() {
        let mut enc = FpduEncoder::new(false);
        let big = vec![0u8; MAX_ULPDU + 1];
        assert_eq!(
            enc.encode(&big, &mut Vec::new()).unwrap_err(),
            EncodeError::UlpduTooLarge(MAX_ULPDU + 1)
        );
        assert_eq!(
            enc.encode_into(&[1, 2, 3], &mut [0u8; 8]).unwrap_err(),
            EncodeError::BufferTooSmall { need: 12, have: 8 }
        );
        assert_eq!(enc.position(), 0);
    }

    #[test]
    fn parts_equal_whole() {
        let data: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let mut a = Vec::new();
        let mut b = Vec::new();
        FpduEncoder::at_position(500, true)
            .encode(&data, &mut a)
            .unwrap();
        FpduEncoder::at_position(500, true)
            .encode_parts(&[&data[..7], &[], &data[7..2000], &data[2000..]], &mut b)
            .unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn packer_keeps_fpdus_whole() {
        let mut enc = FpduEncoder::new(true);
        let mut p = SegmentPacker::new(1448);
        for n in [100usize, 700, 600, 1430, 0, 50] {
            p.push(&mut enc, &[&vec![7u8; n]]).unwrap();
        }
        let (buf, segs) = p.finish();
        assert_eq!(segs.first().map(|s| s.start), Some(0));
        assert_eq!(segs.last().map(|s| s.end), Some(buf.len()));
        // Every segment fits EMSS and ends on an FPDU boundary.
        let mut dec = crate::decoder::FpduDecoder::new(true, true);
        let mut n = 0;
        for s in segs {
            assert!(s.len() <= 1448, "{s:?}");
            let mut ch = dec.feed(&buf[s.clone()]);
            while let Some(r) = ch.next_ulpdu() {
                r.unwrap();
                n += 1;
            }
            drop(ch);
            assert_eq!(dec.buffered(), 0);
        }
        assert_eq!(n, 6);
        assert!(segs.len() >= 3);
    }

    proptest::proptest! {
        /// Messages cut by `exact_fill` start every TCP segment with an FPDU, where TCP cuts
        /// every EMSS octets from the start and from each early segment end.
        #[test]
        fn exact_fill_aligns_every_segment(
            sizes in proptest::collection::vec(0usize..20_000, 1..60),
            markers in proptest::bool::ANY,
            emss in proptest::sample::select(vec![536usize, 1448, 1460, 8948]),
            tagged in proptest::bool::ANY,
        ) {
            let h = if tagged { 14 } else { 18 };
            let mut enc = FpduEncoder::new(markers);
            let mut wire = Vec::new();
            let mut starts = std::collections::BTreeSet::new();
            let mut origin = 0usize;
            let mut boundaries = Vec::new();
            let mut payload_total = 0usize;
            let mut short_segments = 0usize;
            for &size in &sizes {
                let mut left = size;
                loop {
                    let used = (wire.len() - origin) % emss;
                    let c = exact_fill(&enc, emss, used, h, left);
                    proptest::prop_assert!(c.take <= left);
                    proptest::prop_assert_eq!(c.last, c.take == left);
                    starts.insert(wire.len());
                    enc.encode(&vec![0u8; h + c.take], &mut wire).unwrap();
                    left -= c.take;
                    payload_total += c.take;
                    if c.end_segment {
                        // TCP segments every EMSS octets from `origin` up to here.
                        let mut b = origin + emss;
                        while b < wire.len() {
                            boundaries.push(b);
                            b += emss;
                        }
                        origin = wire.len();
                        short_segments += 1;
                    }
                    if c.last {
                        break;
                    }
                }
            }
            let mut b = origin + emss;
            while b < wire.len() {
                boundaries.push(b);
                b += emss;
            }
            proptest::prop_assert_eq!(payload_total, sizes.iter().sum::<usize>());
            for b in boundaries {
                proptest::prop_assert!(starts.contains(&b), "boundary {} is inside an FPDU", b);
            }
            // Short segments are the exception, not the rule.
            proptest::prop_assert!(short_segments <= sizes.len());
        }
    }
}
