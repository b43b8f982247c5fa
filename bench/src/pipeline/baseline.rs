//! The octet passes the pipeline is compared with, over the same octets in the same run:
//! copying every segment's TCP payload into a region-sized buffer (what placement must at
//! least do) and CRC32c over every segment's TCP payload (what the FPDU check must at least
//! do), with the crate's selected CRC kernel. Timed like the pipeline's polls: wall time of
//! the pass only.

use super::gen::Prepared;
use std::time::{Duration, Instant};

/// Bytes of the copy destination: like a region, larger than the last-level cache.
const DST_BYTES: usize = 16 << 20;

/// Where each frame's TCP payload is, and the copy destination.
pub struct Payloads {
    spans: Vec<(usize, usize)>,
    dst: Vec<u8>,
}

/// One round's passes.
#[derive(Clone, Copy, Debug, Default)]
pub struct OctetPasses {
    pub memcpy: Duration,
    pub crc: Duration,
}

/// The TCP payload offset of an Ethernet/IPv4/TCP frame, `None` if it is not one.
pub fn tcp_payload_offset(frame: &[u8]) -> Option<usize> {
    let ip = 14usize;
    let ihl = usize::from(*frame.get(ip)? & 0x0f) * 4;
    let tcp = ip + ihl;
    let doff = usize::from(*frame.get(tcp + 12)? >> 4) * 4;
    let at = tcp + doff;
    (ihl >= 20 && doff >= 20 && at <= frame.len()).then_some(at)
}

impl Payloads {
    pub fn of(p: &Prepared) -> Payloads {
        let spans = p
            .frames
            .iter()
            .enumerate()
            .filter_map(|(i, f)| Some((i, tcp_payload_offset(&f.bytes)?)))
            .collect();
        Payloads {
            spans,
            dst: vec![0u8; DST_BYTES],
        }
    }

    /// Times one memcpy pass and one CRC pass.
    pub fn time(&mut self, p: &Prepared) -> OctetPasses {
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
        OctetPasses {
            memcpy,
            crc: t.elapsed(),
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
