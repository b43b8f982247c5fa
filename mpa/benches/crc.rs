//! CRC32c throughput: our implementations against the `crc32c` and `crc-fast` crates, a plain
//! memcpy, and copy + CRC fused against copy then CRC.
//!
//! `cargo bench -p mpa --bench crc` (about two minutes); filter with e.g. `-- 'crc32c/4096'`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mpa::crc::{self, impls};

const SIZES: [usize; 6] = [64, 256, 1024, 4096, 16 * 1024, 64 * 1024];

fn data(len: usize) -> Vec<u8> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

fn crc32c(c: &mut Criterion) {
    let mut g = c.benchmark_group("crc32c");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    for size in SIZES {
        let buf = data(size);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("default", size), &buf, |b, d| {
            b.iter(|| crc::crc32c(black_box(d)))
        });
        for imp in impls::all() {
            g.bench_with_input(BenchmarkId::new(imp.name(), size), &buf, |b, d| {
                b.iter(|| imp.append(0, black_box(d)))
            });
        }
        g.bench_with_input(BenchmarkId::new("crate_crc32c", size), &buf, |b, d| {
            b.iter(|| crc32c::crc32c(black_box(d)))
        });
        g.bench_with_input(BenchmarkId::new("crate_crc_fast", size), &buf, |b, d| {
            b.iter(|| crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, black_box(d)))
        });
    }
    g.finish();
}

fn copy(c: &mut Criterion) {
    let mut g = c.benchmark_group("copy");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    for size in SIZES {
        let src = data(size);
        let mut dst = vec![0u8; size];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(BenchmarkId::new("memcpy", size), |b| {
            b.iter(|| dst.copy_from_slice(black_box(&src)))
        });
        g.bench_function(BenchmarkId::new("copy_then_crc", size), |b| {
            b.iter(|| {
                dst.copy_from_slice(black_box(&src));
                crc::crc32c(black_box(&dst))
            })
        });
        g.bench_function(BenchmarkId::new("fused_default", size), |b| {
            b.iter(|| crc::crc32c_copy(0, &mut dst, black_box(&src)))
        });
        for imp in impls::all() {
            let id = BenchmarkId::new(format!("fused_{}", imp.name()), size);
            g.bench_function(id, |b| b.iter(|| imp.copy(0, &mut dst, black_box(&src))));
        }
    }
    g.finish();
}

fn combine(c: &mut Criterion) {
    let mut g = c.benchmark_group("combine");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    for len_b in [1460u64, 65_536, 1 << 30] {
        g.bench_function(BenchmarkId::new("crc32c_combine", len_b), |b| {
            b.iter(|| crc::crc32c_combine(black_box(0x1234_5678), 0x9abc_def0, black_box(len_b)))
        });
    }
    g.finish();
}

criterion_group!(benches, crc32c, copy, combine);
criterion_main!(benches);
