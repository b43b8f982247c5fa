//! The out-of-order locator under a crafted flood (RFC 5044 §5.1, an aligned sender trusted):
//! its work must stay linear in a segment's length, measured as the worker's CPU time.

use super::Ctx;
use anyhow::{bail, Result};
use std::time::{Duration, Instant};

/// RFC 5044 §5.1 aligned sender trusted: an out-of-order segment is searched for an FPDU
/// header. A crafted segment where every 4-aligned offset announces an FPDU ending exactly at
/// the segment's end (none with a valid CRC) must cost work linear in its length, not
/// quadratic; it is sent 500 times (duplicates), then a valid write must land. The worker's
/// CPU for the 500 must stay under 20 µs per segment (a linear locator needs ~1 µs).
pub(super) fn amplification(c: &mut Ctx) -> Result<()> {
    let len = 1444usize;
    let mut seg = vec![0u8; len];
    for o in (0..len - 6).step_by(4) {
        let ulpdu = (len - o - 6) as u16;
        seg[o..o + 2].copy_from_slice(&ulpdu.to_be_bytes());
    }
    let cpu0 = worker_cpu(c)?;
    let t0 = Instant::now();
    for _ in 0..500 {
        let mut s = c.p.seg(&seg);
        s.seq = c.p.snd_nxt.wrapping_add(len as u32);
        c.p.send_seg(&s)?;
    }
    c.p.poll(Duration::from_millis(200))?;
    c.p.inbox.clear();
    let cpu = worker_cpu(c)? - cpu0;
    let per = cpu / 500.0 * 1e6;
    tracing::info!(cpu, per_segment_us = per, elapsed = ?t0.elapsed(), "locator amplification");
    if per > 20.0 {
        bail!("worker CPU ≤ 20 µs per crafted segment, got {per:.0} µs ({cpu:.3} s for 500)");
    }
    // The flood sat one segment ahead; fill exactly that hole with a valid write... of the
    // crafted segment's length would be placed as junk: instead write in order and let the
    // store's junk stay out of order (above what the liveness write needs).
    let d = c.pattern(8);
    c.write(0, &d)
}

fn worker_cpu(c: &Ctx) -> Result<f64> {
    let mut dpc = mpa_control::datapath_client::DatapathClient::connect(
        &c.env.socket,
        Duration::from_secs(5),
    )?;
    let s = mpa_harness::datapath::stats(&mut dpc)?;
    Ok(s.queues.iter().map(|q| q.cpu_seconds).sum())
}
