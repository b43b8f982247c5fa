//! CRC32c throughput: our implementations against the `crc32c` and `crc-fast` crates, a plain
//! memcpy, and copy + CRC fused against copy then CRC.
//!
//! `cargo bench -p mpa --bench crc` (criterion, several minutes); filter with e.g.
//! `-- 'crc32c/4096'`. It first prints, per size, the kernel the default functions select.
//!
//! `CRC_SIDE_BY_SIDE=20 cargo bench -p mpa --bench crc` instead runs every candidate at every
//! size in turn, round after round (20 rounds), and prints GiB/s as the median over rounds
//! with min–max: on a shared, noisy machine candidates are compared under the same load. In a
//! round each candidate/size gets the best of a few ~100 µs batches (robust to preemption).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use mpa::crc::{self, impls};

/// 1448: one TCP segment's payload (MSS 1448 with timestamps).
const SIZES: [usize; 13] = [
    64,
    128,
    192,
    256,
    512,
    1024,
    1448,
    2048,
    4096,
    8192,
    16 * 1024,
    32 * 1024,
    64 * 1024,
];

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
        println!(
            "crc32c/default/{size}: selects {}",
            crc::selected_kernel(size)
        );
    }
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

/// A named CRC32c function for the side-by-side run.
type Candidate = (String, Box<dyn FnMut(&[u8]) -> u32>);

fn candidates() -> Vec<Candidate> {
    let mut v: Vec<Candidate> = vec![("default".into(), Box::new(crc::crc32c))];
    for imp in impls::all() {
        v.push((imp.name().into(), Box::new(move |d| imp.append(0, d))));
    }
    v.push(("crate_crc32c".into(), Box::new(crc32c::crc32c)));
    v.push((
        "crate_crc_fast".into(),
        Box::new(|d| crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, d) as u32),
    ));
    let mut dst = vec![0u8; SIZES[SIZES.len() - 1]];
    v.push((
        "memcpy".into(),
        Box::new(move |d| {
            dst[..d.len()].copy_from_slice(d);
            black_box(&dst);
            0
        }),
    ));
    v
}

/// Nanoseconds per call of `f` over `d`: the best of `batches` batches of `iters` calls.
fn time(f: &mut dyn FnMut(&[u8]) -> u32, d: &[u8], iters: u64, batches: usize) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..iters {
            black_box(f(black_box(d)));
        }
        best = best.min(t.elapsed().as_nanos() as f64 / iters as f64);
    }
    best
}

fn side_by_side(rounds: usize) {
    let mut cands = candidates();
    let bufs: Vec<Vec<u8>> = SIZES.iter().map(|&n| data(n)).collect();
    // Calls per ~100 µs batch, per candidate and size.
    let iters: Vec<Vec<u64>> = cands
        .iter_mut()
        .map(|(_, f)| {
            bufs.iter()
                .map(|d| {
                    let ns = time(f.as_mut(), d, 64, 3);
                    ((100_000.0 / ns) as u64).max(1)
                })
                .collect()
        })
        .collect();
    // gibs[size][cand] = one value per round
    let mut gibs = vec![vec![Vec::with_capacity(rounds); cands.len()]; SIZES.len()];
    for r in 0..rounds {
        for (si, d) in bufs.iter().enumerate() {
            let nc = cands.len();
            for j in 0..nc {
                let ci = (j + r) % nc; // rotate the order between rounds
                let ns = time(cands[ci].1.as_mut(), d, iters[ci][si], 5);
                gibs[si][ci].push(d.len() as f64 / ns * 1e9 / (1u64 << 30) as f64);
            }
        }
    }
    println!("GiB/s, median of {rounds} rounds (min-max); * = fastest median");
    for (si, &size) in SIZES.iter().enumerate() {
        println!(
            "size {size}: default selects {}",
            crc::selected_kernel(size)
        );
        let med: Vec<f64> = gibs[si].iter_mut().map(|v| median(v)).collect();
        let best = med[..cands.len() - 1]
            .iter()
            .cloned()
            .fold(f64::MIN, f64::max);
        for (ci, (name, _)) in cands.iter().enumerate() {
            let v = &gibs[si][ci];
            let (lo, hi) = (v[0], v[v.len() - 1]);
            let mark = if med[ci] == best { "*" } else { " " };
            println!("  {name:16} {:7.2} ({lo:.2}-{hi:.2}) {mark}", med[ci]);
        }
    }
}

/// Sorts `v` and returns its median.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

criterion_group!(benches, crc32c, copy, combine);

fn main() {
    if let Some(rounds) = std::env::var("CRC_SIDE_BY_SIDE")
        .ok()
        .and_then(|r| r.parse::<usize>().ok())
    {
        side_by_side(rounds.max(1));
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
