//! Encoder and decoder throughput with markers and CRC, beside memcpy and CRC32c alone over
//! the same octets (same run). `tools/bench-summary` prints GiB/s and the ratios.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mpa::crc::crc32c;
use mpa::decoder::FpduDecoder;
use mpa::encoder::FpduEncoder;
use std::time::Duration;

/// About this many ULPDU octets per iteration.
const STREAM: usize = 256 * 1024;
/// Read size for the decoder, like a socket read.
const CHUNK: usize = 64 * 1024;
const SIZES: [usize; 4] = [64, 1024, 4096, 16384];

fn ulpdus(size: usize) -> Vec<Vec<u8>> {
    (0..STREAM / size)
        .map(|i| (0..size).map(|j| (i * 7 + j * 13) as u8).collect())
        .collect()
}

fn bench(c: &mut Criterion) {
    for markers in [true, false] {
        let name = if markers {
            "framing/markers+crc"
        } else {
            "framing/crc"
        };
        let mut g = c.benchmark_group(name);
        g.measurement_time(Duration::from_secs(2))
            .warm_up_time(Duration::from_millis(500))
            .sample_size(20);
        for size in SIZES {
            let us = ulpdus(size);
            let total: usize = us.iter().map(Vec::len).sum();
            let mut wire = Vec::new();
            let mut enc = FpduEncoder::new(markers);
            for u in &us {
                enc.encode(u, &mut wire).unwrap();
            }
            g.throughput(Throughput::Bytes(total as u64));
            let mut out = Vec::with_capacity(wire.len());
            g.bench_with_input(BenchmarkId::new("encode", size), &us, |b, us| {
                b.iter(|| {
                    out.clear();
                    let mut enc = FpduEncoder::new(markers);
                    for u in us {
                        enc.encode(u, &mut out).unwrap();
                    }
                    black_box(out.len())
                })
            });
            g.bench_with_input(BenchmarkId::new("decode", size), &wire, |b, wire| {
                b.iter(|| {
                    let mut dec = FpduDecoder::new(markers, true);
                    let mut n = 0usize;
                    for chunk in wire.chunks(CHUNK) {
                        let mut ch = dec.feed(chunk);
                        while let Some(r) = ch.next_ulpdu() {
                            let u = r.unwrap();
                            for p in u.pieces() {
                                n += black_box(p).len();
                            }
                        }
                    }
                    assert_eq!(n, total);
                })
            });
            g.bench_with_input(
                BenchmarkId::new("crc32c-same-octets", size),
                &wire,
                |b, wire| b.iter(|| black_box(crc32c(black_box(wire)))),
            );
            let mut dst = vec![0u8; wire.len()];
            g.bench_with_input(
                BenchmarkId::new("memcpy-same-octets", size),
                &wire,
                |b, wire| {
                    b.iter(|| {
                        dst.copy_from_slice(black_box(wire));
                        black_box(&dst);
                    })
                },
            );
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
