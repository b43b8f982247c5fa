//! Encoder and decoder throughput with markers and CRC, beside memcpy and CRC32c alone over
//! the same octets (same run). `tools/dev/bench-summary` prints GiB/s and the ratios.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mpa::crc::crc32c;
use mpa::decoder::FpduDecoder;
use mpa::encoder::FpduEncoder;
use std::time::Duration;

/// About this many ULPDU octets per iteration.
const STREAM: usize = 256 * 1024;
/// Read size for the decoder: `MpaStream` reads 256 KiB at a time (set `MPA_BENCH_CHUNK` to
/// try others; an FPDU that spans two chunks is copied once).
const CHUNK: usize = 256 * 1024;
const SIZES: [usize; 4] = [64, 1024, 4096, 16384];

fn chunk_size() -> usize {
    std::env::var("MPA_BENCH_CHUNK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CHUNK)
}

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
            let chunk = chunk_size();
            g.bench_with_input(BenchmarkId::new("decode", size), &wire, |b, wire| {
                b.iter(|| {
                    let mut dec = FpduDecoder::new(markers, true);
                    let mut n = 0usize;
                    for chunk in wire.chunks(chunk) {
                        let mut ch = dec.feed(chunk);
                        while let Some(r) = ch.next_ulpdu() {
                            // What a DDP consumer reads first: the header; the payload
                            // pieces go to placement, measured elsewhere.
                            let u = r.unwrap();
                            let mut head = [0u8; 18];
                            u.copy_prefix(&mut head);
                            black_box(&head);
                            n += u.len();
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
            // The `crc32c` crate over the same octets, for scale.
            g.bench_with_input(
                BenchmarkId::new("crate-crc32c-same-octets", size),
                &wire,
                |b, wire| b.iter(|| black_box(crc32c::crc32c(black_box(wire)))),
            );
            // The CRC work the decoder cannot avoid: one CRC per FPDU over its wire octets.
            let mut fpdus = Vec::new();
            let mut at = 0;
            let mut pos_enc = FpduEncoder::new(markers);
            for u in &us {
                let n = pos_enc.wire_len(u.len());
                pos_enc.encode(u, &mut Vec::new()).unwrap();
                fpdus.push(at..at + n - 4);
                at += n;
            }
            g.bench_with_input(
                BenchmarkId::new("crc32c-per-fpdu", size),
                &wire,
                |b, wire| {
                    b.iter(|| {
                        let mut c = 0;
                        for r in &fpdus {
                            c ^= crc32c(black_box(&wire[r.clone()]));
                        }
                        black_box(c)
                    })
                },
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
