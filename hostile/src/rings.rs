//! Consumers that misuse their completion rings: one that never reads them while Writes keep
//! arriving, one that writes garbage into the indices it shares with the workers. The workers
//! trust nothing back, count what they lose, write nothing outside the rings, and every Write
//! is placed (docs/hostile.md).

use super::ctl::WAIT;
use super::Ctx;
use anyhow::{bail, Context, Result};
use mpa_app::ConsumerError;
use mpa_control::datapath_client::DatapathClient;
use mpa_harness::datapath::stats;
use std::time::Duration;

/// A consumer that subscribes to the hostile domain's completions and never reads them while
/// 20,000 RDMA Writes arrive: every write is placed (the last of each offset checked by the
/// runner), the completions wait in its shared-memory ring (or are lost and counted when it
/// is full), and the worker never waits for it. The consumer is the domain's owner (only it
/// may subscribe); it reads its backlog afterwards and unsubscribes.
pub fn consumer_never_reads(c: &mut Ctx) -> Result<()> {
    const N: u32 = 20_000;
    let env = c.env;
    let mut con = env.owner()?;
    con.subscribe(super::PD_HOSTILE)?;
    let mut w = DatapathClient::connect(&c.env.socket, WAIT)?;
    let overflow = |s: &mpa_ctl_proto::stats::DatapathStats| -> u64 {
        s.queues.iter().map(|q| q.stats.completions_overflow).sum()
    };
    let lost0 = overflow(&stats(&mut w)?);
    write_bursts(c, N, 128, 7)?;
    let st = stats(&mut w)?;
    c.note = format!(
        "{N} writes sent while the subscriber read nothing ({} completions lost to its full ring, {} octets queued to clients); ",
        overflow(&st) - lost0,
        st.control.queued_octets,
    );
    // The backlog; losses (the ring overflowed, as this class means it to) are reported in
    // passing, not an error here.
    loop {
        match con.next_completions(std::time::Instant::now()) {
            Ok(Some(_)) | Err(ConsumerError::Overflow { .. }) => {}
            Ok(None) => break,
            Err(e) => return Err(e.into()),
        }
    }
    con.unsubscribe(super::PD_HOSTILE)?;
    Ok(())
}

/// A consumer that writes garbage over its completion rings' headers (indices, counters,
/// flags; it holds the memfd, so it can) and reads nothing while more RDMA Writes arrive than
/// a ring holds: the workers never
/// trust an index back (a tail they did not expect makes the ring look full: records lost and
/// counted), nothing is written outside the rings, and every Write is placed (the runner
/// checks the last of each offset).
pub fn garbage_ring_indices(c: &mut Ctx) -> Result<()> {
    use std::os::unix::fs::FileExt;
    // More than a ring holds, unread: the workers must read the (garbage) tail back.
    const N: u32 = super::COMPLETION_RING + 2000;
    let mut w = DatapathClient::connect(&c.env.socket, WAIT)?;
    let lost = |s: &mpa_ctl_proto::stats::DatapathStats| -> u64 {
        s.queues.iter().map(|q| q.stats.completions_overflow).sum()
    };
    let lost0 = lost(&stats(&mut w)?);
    let env = c.env;
    let mut con = env.owner()?;
    con.subscribe(super::PD_HOSTILE)?;
    let file = con
        .ring_file(super::PD_HOSTILE)
        .context("the subscription's ring file")?;
    let rings = file.rings() as u64;
    let ring_len = (file.len() as u64) / rings;
    let f = std::fs::File::from(file.fd().try_clone_to_owned()?);
    let garbage = vec![0xa5u8; mpa_ctl_proto::ring::HEADER_LEN];
    for r in 0..rings {
        f.write_at(&garbage, r * ring_len)?;
    }
    write_bursts(c, N, 64, 3)?;
    // The last burst is not waited for (its ACK is the runner's): its completions may still
    // be on their way when the first statistics are read.
    let want = u64::from(N - super::COMPLETION_RING);
    let deadline = std::time::Instant::now() + WAIT;
    let mut lost_now = lost(&stats(&mut w)?) - lost0;
    while lost_now < want && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        lost_now = lost(&stats(&mut w)?) - lost0;
    }
    if lost_now < want {
        bail!(
            "at least {} completions lost to a ring that looks full, got {lost_now}",
            N - super::COMPLETION_RING
        );
    }
    let read = match con.next_completions(std::time::Instant::now()) {
        Err(e) => format!("the consumer's own read failed: {e}"),
        Ok(r) => format!("the consumer read {} records", r.map_or(0, |v| v.len())),
    };
    con.unsubscribe(super::PD_HOSTILE)?;
    c.note = format!(
        "ring headers overwritten, {N} writes sent: {lost_now} completions lost and counted, \
         {read}; "
    );
    Ok(())
}

/// Sends `n` RDMA Writes of 16 octets (write `k` holds `k·mix + j`) to `slots` offsets of the
/// class's slot in turn, in bursts of 8 KiB, each acknowledged before the next (the last ACK is
/// the runner's to see); the last write to each offset is what the runner checks.
fn write_bursts(c: &mut Ctx, n: u32, slots: u32, mix: u32) -> Result<()> {
    let mut burst = Vec::new();
    for k in 0..n {
        let off = u64::from(k % slots) * 16;
        let d: Vec<u8> = (0..16u32).map(|j| (k * mix + j) as u8).collect();
        burst.extend_from_slice(&c.write_fpdu(off, &d));
        if k >= n - slots {
            c.placed.push((c.slot + off, d));
        }
        if burst.len() >= 8 << 10 || k == n - 1 {
            c.p.send_stream(&burst, 1400)?;
            burst.clear();
            if k != n - 1 {
                c.wait_acked()
                    .with_context(|| format!("write {k} of {n}"))?;
            }
        }
    }
    Ok(())
}
