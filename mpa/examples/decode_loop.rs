//! Profiling aid: decodes a 256 KiB stream of 4 KiB FPDUs (markers + CRC) in a loop.
use mpa::decoder::FpduDecoder;
use mpa::encoder::FpduEncoder;
use std::time::Instant;
fn main() {
    let size: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(4096);
    let mut wire = Vec::new();
    let mut enc = FpduEncoder::new(true);
    let u: Vec<u8> = (0..size).map(|i| i as u8).collect();
    for _ in 0..(256 * 1024 / size) {
        enc.encode(&u, &mut wire).unwrap();
    }
    let t = Instant::now();
    let mut n = 0usize;
    let iters = 20000;
    let chunk = 256 * 1024;
    for _ in 0..iters {
        let mut dec = FpduDecoder::new(true, true);
        let mut ch = dec.feed(&wire[..wire.len().min(chunk)]);
        while let Some(r) = ch.next_ulpdu() {
            let u = r.unwrap();
            let mut head = [0u8; 18];
            u.copy_prefix(&mut head);
            std::hint::black_box(&head);
            n += u.len();
        }
    }
    let dt = t.elapsed().as_secs_f64();
    println!("{:.2} GiB/s ulpdu", n as f64 / dt / (1u64 << 30) as f64);
}
