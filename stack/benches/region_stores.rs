//! Placement's store pattern into a registered region: ordinary stores with the destination
//! prefetched for writing (`SharedMemory::write_pieces`) against streaming stores
//! (`SharedMemory::write_pieces_streaming`, one `settle_streamed_stores` per burst of 64
//! messages). Messages are placed one after the other (each a contiguous destination, as
//! consecutive Writes are), 4 KiB cut into the 508-octet pieces between markers, and 1,400 and
//! 4,096 octets whole, into a region larger than the last-level cache and one that fits it.
//! The decision tool behind docs/features.md, "Streaming stores".
//!
//! `cargo bench -p mpa-stack --bench region_stores`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mpa_shm::{settle_streamed_stores, SharedMemory};

/// Messages per fence.
const BURST: usize = 64;

/// `iters` messages made of `pieces` into `region`, one after the other (wrapping).
fn place(region: &SharedMemory, pieces: &[&[u8]], iters: u64, streaming: bool) -> Duration {
    let n: usize = pieces.iter().map(|p| p.len()).sum();
    let slots = region.len() / n;
    let t = Instant::now();
    for k in 0..iters as usize {
        let off = ((k % slots) * n) as u64;
        let ok = if streaming {
            let ok = region.write_pieces_streaming(off, n, pieces.iter().copied());
            if (k + 1) % BURST == 0 {
                settle_streamed_stores();
            }
            ok
        } else {
            region.write_pieces(off, n, pieces.iter().copied())
        };
        black_box(ok);
    }
    settle_streamed_stores();
    t.elapsed()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("region_stores");
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    let src: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
    let marked: Vec<&[u8]> = src.chunks(508).collect();
    let shapes: [(&str, Vec<&[u8]>); 3] = [
        ("4096-in-508", marked),
        ("1400", vec![&src[..1400]]),
        ("4096", vec![&src[..]]),
    ];
    for region_mib in [1024u64, 16] {
        let region = SharedMemory::create("region-stores", region_mib << 20, true)
            .or_else(|_| SharedMemory::create("region-stores", region_mib << 20, false))
            .expect("shared memory for the region");
        // Touched before timing, as a registered region in use is.
        for off in (0..region.len() as u64).step_by(4096) {
            region.write(off, &[1]);
        }
        for (shape, pieces) in &shapes {
            let n: usize = pieces.iter().map(|p| p.len()).sum();
            g.throughput(Throughput::Bytes(n as u64));
            for (name, streaming) in [("ordinary", false), ("streaming", true)] {
                let id = BenchmarkId::new(format!("{name}/{region_mib}MiB"), shape);
                g.bench_function(id, |b| {
                    b.iter_custom(|iters| place(&region, pieces, iters, streaming))
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
