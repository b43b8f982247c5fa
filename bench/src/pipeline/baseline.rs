//! The octet passes the pipeline is compared with, over the same octets in the same run:
//! copying every segment's TCP payload into a region-sized buffer (what placement must at
//! least do) and CRC32c over every segment's TCP payload (what the FPDU check must at least
//! do), with the crate's selected CRC kernel. Timed like the pipeline's polls: wall time of
//! the pass only.
//!
//! Each pass runs twice. **Cold**: over the whole prepared frame set in one go, read from
//! memory (hundreds of MB, far beyond the caches). **Warm**: burst by burst, each burst's
//! frames first copied into a ring of slots (untimed, as the benchmark's in-memory ring is
//! filled before each poll, and as a NIC in copy mode or with DDIO leaves them), then the
//! timed pass over the slots — the octets the pipeline itself reads, in the same bursts
//! (`--ring-fill` included). The slots lie back to back at cache-line granularity
//! ([`SLOT_ALIGN`]), not one frame per 4 KiB page as the in-memory ring's arena lays them out
//! (as a UMEM does): never slower for the copy on the machines measured, so the stricter floor.
//! The warm figures are the floor the pipeline is judged against; the cold ones what memory
//! bandwidth allows.

use super::gen::Prepared;
use std::time::{Duration, Instant};

/// Bytes of the copy destination: the pipeline's default region.
const DST_BYTES: usize = super::DEFAULT_REGION_BYTES as usize;

/// Slot alignment of the warm passes' ring: the longest frame rounded up to a cache line. One
/// frame per 4 KiB page, as in a UMEM, made the warm copy slower on an Intel Xeon (48.7
/// against 84.7 Gbit/s at MSS 1448: the hardware prefetcher stops at page boundaries,
/// docs/investigations/2026-12-02-warm-baselines.md) and changed it within the spread on an
/// AMD Zen 4 (docs/investigations/2026-12-07-what-bounds-the-receive-pipeline.md).
pub(crate) const SLOT_ALIGN: usize = 64;

/// Where each frame's TCP payload is, the copy destination, and the warm passes' ring.
pub(crate) struct Payloads {
    spans: Vec<(usize, usize)>,
    dst: Vec<u8>,
    ring: Vec<u8>,
    stride: usize,
    burst: usize,
}

/// One round's passes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OctetPasses {
    pub(crate) memcpy: Duration,
    pub(crate) crc: Duration,
    /// The same passes over frames just written into a ring, burst by burst.
    pub(crate) memcpy_warm: Duration,
    pub(crate) crc_warm: Duration,
}

/// The TCP payload offset of an Ethernet/IPv4/TCP frame, `None` if it is not one.
pub(crate) fn tcp_payload_offset(frame: &[u8]) -> Option<usize> {
    let ip = 14usize;
    let ihl = usize::from(*frame.get(ip)? & 0x0f) * 4;
    let tcp = ip + ihl;
    let doff = usize::from(*frame.get(tcp + 12)? >> 4) * 4;
    let at = tcp + doff;
    (ihl >= 20 && doff >= 20 && at <= frame.len()).then_some(at)
}

impl Payloads {
    /// The passes over `p`'s frames; the warm ones `burst` frames at a time (the pipeline's
    /// ring size).
    pub(crate) fn of(p: &Prepared, burst: usize) -> Payloads {
        let spans: Vec<(usize, usize)> = p
            .frames
            .iter()
            .enumerate()
            .filter_map(|(i, f)| Some((i, tcp_payload_offset(&f.bytes)?)))
            .collect();
        let longest = p.frames.iter().map(|f| f.bytes.len()).max().unwrap_or(0);
        let stride = longest.max(1).next_multiple_of(SLOT_ALIGN);
        let burst = burst.clamp(1, spans.len().max(1));
        Payloads {
            spans,
            dst: vec![0u8; DST_BYTES],
            ring: vec![0u8; burst * stride],
            stride,
            burst,
        }
    }

    /// Copies the frames of `chunk` into the ring's slots (untimed).
    fn fill_ring(&mut self, p: &Prepared, chunk: &[(usize, usize)]) {
        for (k, &(i, _)) in chunk.iter().enumerate() {
            let f = &p.frames[i].bytes;
            self.ring[k * self.stride..k * self.stride + f.len()].copy_from_slice(f);
        }
    }

    /// The warm passes: per burst, the frames written into the ring, then the timed copy of
    /// their payloads; written again, then the timed CRC.
    fn time_warm(&mut self, p: &Prepared) -> (Duration, Duration) {
        let (mut copy, mut crc) = (Duration::ZERO, Duration::ZERO);
        let spans = std::mem::take(&mut self.spans);
        let mut at = 0usize;
        let mut crc_value = 0u32;
        for chunk in spans.chunks(self.burst) {
            self.fill_ring(p, chunk);
            copy += self.copy_ring(p, chunk, &mut at);
            self.fill_ring(p, chunk);
            let t = Instant::now();
            for (k, &(i, off)) in chunk.iter().enumerate() {
                let len = p.frames[i].bytes.len() - off;
                let src = &self.ring[k * self.stride + off..k * self.stride + off + len];
                crc_value ^= mpa::crc::crc32c(std::hint::black_box(src));
            }
            crc += t.elapsed();
        }
        std::hint::black_box(crc_value);
        self.spans = spans;
        (copy, crc)
    }

    /// The warm copy alone: per burst, the frames written into the ring, then the timed copy
    /// of their payloads. What several of these side by side on their own CPUs take
    /// (`pipeline --workers`) is what the machine's caches and memory allow workers.
    pub(crate) fn time_warm_copy(&mut self, p: &Prepared) -> Duration {
        let mut copy = Duration::ZERO;
        let spans = std::mem::take(&mut self.spans);
        let mut at = 0usize;
        for chunk in spans.chunks(self.burst) {
            self.fill_ring(p, chunk);
            copy += self.copy_ring(p, chunk, &mut at);
        }
        self.spans = spans;
        copy
    }

    /// The timed copy of the payloads of `chunk`'s frames, in the ring, to the destination
    /// from `at` on (wrapping to its start).
    fn copy_ring(&mut self, p: &Prepared, chunk: &[(usize, usize)], at: &mut usize) -> Duration {
        let t = Instant::now();
        for (k, &(i, off)) in chunk.iter().enumerate() {
            let len = p.frames[i].bytes.len() - off;
            let src = &self.ring[k * self.stride + off..k * self.stride + off + len];
            if *at + len > self.dst.len() {
                *at = 0;
            }
            self.dst[*at..*at + len].copy_from_slice(src);
            *at += len;
        }
        std::hint::black_box(&mut self.dst);
        t.elapsed()
    }

    /// Times one memcpy pass and one CRC pass.
    pub(crate) fn time(&mut self, p: &Prepared) -> OctetPasses {
        let t = Instant::now();
        let mut at = 0usize;
        for &(i, off) in &self.spans {
            let src = &p.frames[i].bytes[off..];
            if at + src.len() > self.dst.len() {
                at = 0;
            }
            self.dst[at..at + src.len()].copy_from_slice(src);
            at += src.len();
        }
        std::hint::black_box(&mut self.dst);
        let memcpy = t.elapsed();
        let t = Instant::now();
        let mut crc_value = 0u32;
        for &(i, off) in &self.spans {
            crc_value ^= mpa::crc::crc32c(std::hint::black_box(&p.frames[i].bytes[off..]));
        }
        // Used, so the pass cannot be optimised away.
        std::hint::black_box(crc_value);
        let crc = t.elapsed();
        let (memcpy_warm, crc_warm) = self.time_warm(p);
        OctetPasses {
            memcpy,
            crc,
            memcpy_warm,
            crc_warm,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_payload_of_a_built_frame() {
        let b = etherparse::PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(1, 2, 3, 1000)
            .options(&[etherparse::TcpOptionElement::Timestamp(1, 2)])
            .unwrap();
        let mut v = Vec::new();
        b.write(&mut v, b"payload").unwrap();
        let at = tcp_payload_offset(&v).unwrap();
        assert_eq!(&v[at..], b"payload");
        assert_eq!(tcp_payload_offset(&v[..20]), None);
    }
}
