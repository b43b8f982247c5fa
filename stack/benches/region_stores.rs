//! Placement's store pattern into a registered region, ordinary stores against non-temporal
//! (AVX-512 streaming) stores with one `sfence` per burst of 64 messages: messages placed one
//! after the other (each a contiguous destination, as consecutive Writes are), in pieces of
//! 455 octets (a 4 KiB message between markers), 1,400 and 4,096 octets, into a region larger
//! than the last-level cache and one that fits it. The decision tool behind
//! docs/investigations/2026-12-03-non-temporal-stores.md; not the datapath's code.
//!
//! `cargo bench -p mpa-stack --bench region_stores`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// Messages per fence.
const BURST: usize = 64;

/// Copies `n` octets with streaming stores for the 64-octet lines of the destination, ordinary
/// stores for its unaligned head and tail.
///
/// # Safety
/// `dst .. dst + n` and `src .. src + n` are valid, disjoint; the CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn copy_streaming(dst: *mut u8, src: *const u8, n: usize) {
    use std::arch::x86_64::{_mm512_loadu_si512, _mm512_stream_si512};
    let head = dst.align_offset(64).min(n);
    // SAFETY: within the ranges the caller vouches for; the streamed lines are 64-aligned.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        let mut i = head;
        while i + 64 <= n {
            let v = _mm512_loadu_si512(src.add(i).cast());
            _mm512_stream_si512(dst.add(i).cast(), v);
            i += 64;
        }
        std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), n - i);
    }
}

/// `iters` messages of `src.len()` octets into `region`, one after the other (wrapping).
fn place(region: &mut [u8], src: &[u8], iters: u64, streaming: bool) -> Duration {
    let n = src.len();
    let slots = region.len() / n;
    let t = Instant::now();
    for k in 0..iters as usize {
        let dst = &mut region[(k % slots) * n..][..n];
        if streaming {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `dst` and `src` are distinct slices of `n` octets; AVX-512F checked by
            // the caller.
            unsafe {
                copy_streaming(dst.as_mut_ptr(), src.as_ptr(), n);
                if (k + 1) % BURST == 0 {
                    std::arch::x86_64::_mm_sfence();
                }
            }
        } else {
            dst.copy_from_slice(src);
        }
    }
    #[cfg(target_arch = "x86_64")]
    if streaming {
        // SAFETY: a fence has no operands.
        unsafe { std::arch::x86_64::_mm_sfence() };
    }
    black_box(&region[0]);
    t.elapsed()
}

fn bench(c: &mut Criterion) {
    #[cfg(target_arch = "x86_64")]
    if !std::arch::is_x86_feature_detected!("avx512f") {
        eprintln!("region_stores: no AVX-512F here, nothing to compare");
        return;
    }
    let mut g = c.benchmark_group("region_stores");
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    for region_mib in [1024usize, 16] {
        // Touched before timing, as a registered region in use is.
        let mut region = vec![1u8; region_mib << 20];
        for piece in [455usize, 1400, 4096] {
            let src: Vec<u8> = (0..piece).map(|i| i as u8).collect();
            g.throughput(Throughput::Bytes(piece as u64));
            for (name, streaming) in [("ordinary", false), ("streaming", true)] {
                let id = BenchmarkId::new(format!("{name}/{region_mib}MiB"), piece);
                g.bench_function(id, |b| {
                    b.iter_custom(|iters| place(&mut region, &src, iters, streaming))
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
