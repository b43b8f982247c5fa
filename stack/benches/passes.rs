//! The passes over a received payload octet, alone and together: the copy into the region
//! (the floor), the CRC32c, the TCP checksum, today's order over a burst (every segment's
//! checksum first, then each segment's CRC and copy, by when the frame has left L1), one
//! segment at a time (checksum, CRC and copy while it is hot), the CRC folded into the
//! copy (`crc32c_copy`), and the checksum's word sum folded into the CRC
//! (`crc32c_append_summing`, the parse pass of the receive pipeline). A burst of 64 segments of 1448 payload octets in 4 KiB frame slots
//! (as AF_XDP frames are), placed one after the other into a 16 MiB region; reported per
//! payload octet. So that the floor is measured on each machine, not assumed
//! (docs/investigations/2026-12-07-passes-over-a-payload-octet.md).
//!
//! `cargo bench -p mpa-stack --bench passes` (`make microbench` runs it with the others)

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mpa::crc::{crc32c, crc32c_append_summing, crc32c_copy};
use mpa::seq::SeqNumber;
use mpa_stack::wire::tcp::{TcpFlags, TcpOptions, TcpPacket, TcpRepr, TcpTimestamps};

const SEG: usize = 1448;
const BURST: usize = 64;
/// AF_XDP frame slots.
const SLOT: usize = 4096;
/// As the pipeline benchmark's region.
const REGION: usize = 16 << 20;
const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

/// A burst of TCP segments with payload, each at the start of its slot; the header length.
fn burst() -> (Vec<u8>, usize) {
    let mut frames = vec![0u8; BURST * SLOT];
    let mut hdr = 0;
    for k in 0..BURST {
        let repr = TcpRepr {
            src_port: 40000,
            dst_port: 7777,
            seq_number: SeqNumber(1) + k * SEG,
            ack_number: Some(SeqNumber(1)),
            flags: TcpFlags::PSH,
            window_len: 512,
            urgent_at: 0,
            options: TcpOptions {
                timestamps: Some(TcpTimestamps { tsval: 2, tsecr: 1 }),
                ..TcpOptions::default()
            },
        };
        let slot = &mut frames[k * SLOT..k * SLOT + repr.header_len() + SEG];
        hdr = repr
            .emit(&mut TcpPacket::new_unchecked(&mut slot[..]))
            .expect("a header fits its slot");
        for (i, b) in slot[hdr..].iter_mut().enumerate() {
            *b = (i * 7 + k) as u8;
        }
        TcpPacket::new_unchecked(&mut slot[..]).fill_checksum_v4(SRC, DST);
    }
    (frames, hdr)
}

fn bench(c: &mut Criterion) {
    let (frames, hdr) = burst();
    let segment = |k: usize| &frames[k * SLOT..k * SLOT + hdr + SEG];
    let mut region = vec![0u8; REGION];
    let mut at = 0usize;
    let mut next = move || {
        let here = at;
        at = (at + SEG) % (REGION - SEG);
        here
    };
    let mut g = c.benchmark_group("passes");
    g.throughput(Throughput::Bytes((BURST * SEG) as u64));
    let checksum = |k: usize| {
        let p = TcpPacket::new_checked(segment(k)).expect("a valid segment");
        assert!(p.verify_checksum_v4(SRC, DST));
    };
    g.bench_function("copy", |b| {
        b.iter(|| {
            for k in 0..BURST {
                let o = next();
                region[o..o + SEG].copy_from_slice(&segment(k)[hdr..]);
            }
        })
    });
    g.bench_function("crc32c", |b| {
        b.iter(|| (0..BURST).fold(0u32, |a, k| a ^ crc32c(black_box(&segment(k)[hdr..]))))
    });
    g.bench_function("tcp_checksum", |b| b.iter(|| (0..BURST).for_each(checksum)));
    g.bench_function("burst_order: checksums, then crc + copy", |b| {
        b.iter(|| {
            (0..BURST).for_each(checksum);
            let mut a = 0u32;
            for k in 0..BURST {
                let o = next();
                a ^= crc32c(&segment(k)[hdr..]);
                region[o..o + SEG].copy_from_slice(&segment(k)[hdr..]);
            }
            a
        })
    });
    g.bench_function("segment_at_a_time: checksum + crc + copy", |b| {
        b.iter(|| {
            let mut a = 0u32;
            for k in 0..BURST {
                checksum(k);
                let o = next();
                a ^= crc32c(&segment(k)[hdr..]);
                region[o..o + SEG].copy_from_slice(&segment(k)[hdr..]);
            }
            a
        })
    });
    g.bench_function("checksum + crc32c, one pass", |b| {
        b.iter(|| {
            (0..BURST).fold((0u32, 0u64), |(c, s), k| {
                let (crc, sum, _) = crc32c_append_summing(0, black_box(&segment(k)[hdr..]));
                (c ^ crc, s.wrapping_add(sum))
            })
        })
    });
    g.bench_function("crc32c_copy", |b| {
        b.iter(|| {
            let mut a = 0u32;
            for k in 0..BURST {
                let o = next();
                a ^= crc32c_copy(0, &mut region[o..o + SEG], &segment(k)[hdr..]);
            }
            a
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
