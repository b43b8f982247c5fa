//! Profiling aid: CRC32c speed of the default implementation at FPDU-like lengths.
use std::time::Instant;
fn main() {
    let buf: Vec<u8> = (0..70000u32).map(|i| i as u8).collect();
    for n in [
        4096usize, 4100, 4112, 4114, 4116, 4120, 4128, 4352, 16400, 16448,
    ] {
        let iters = 2_000_000_000 / n;
        let t = Instant::now();
        let mut c = 0u32;
        for _ in 0..iters {
            c ^= mpa::crc::crc32c(std::hint::black_box(&buf[..n]));
        }
        let dt = t.elapsed().as_secs_f64();
        println!(
            "{n:6} {:6.2} GiB/s ({c:x})",
            (iters * n) as f64 / dt / (1u64 << 30) as f64
        );
    }
}
