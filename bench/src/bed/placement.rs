//! The consumer side of a placing run: a region (or posted buffers) for the peer's RDMA Writes
//! (or Sends), completions read as they come, and the check of what landed.

use crate::bed::options::{messages, Op, Run};
use anyhow::{bail, Result};
use mpa::wire::ddp;
use mpa_app::{Consumer, MappedRegion};
use mpa_ctl_proto::pattern::PatternTable;
use mpa_ctl_proto::region_ad::{self, RegionAd};
use mpa_ctl_proto::{CompletionKind, PostTarget};
use mpa_harness::CompletionReader;
use mpa_stack::receiver::MAX_POSTED;
use std::time::Duration;

/// The consumer side of a placing run: the region, what the sender will do with it, and a
/// thread that reads completions as they come (a consumer must keep up).
pub(crate) struct Placement {
    /// The completions, read as they come.
    reader: CompletionReader,
    region: MappedRegion,
    /// The region's advertisement (the hand-over Reply's private data).
    pub(crate) ad: RegionAd,
    op: Op,
}

impl Placement {
    /// Creates the region (and posts receive buffers for Sends) before the connection, in
    /// protection domain `pd`.
    pub(crate) fn prepare_in(socket: &std::path::Path, r: &Run, pd: u32) -> Result<Placement> {
        let mut consumer = Consumer::connect(socket, Duration::from_secs(20))?;
        let count = messages(r);
        let (len, recv) = match r.transfer.op {
            Op::Write => (r.transfer.region_bytes, 0u32),
            Op::Send => {
                let p = r.size.saturating_sub(ddp::UNTAGGED_HEADER_LEN).max(1) as u32;
                if count > MAX_POSTED as u64 {
                    mpa_cli::usage!("--op send posts one buffer per message: at most {MAX_POSTED} messages, not {count} (raise --size or lower --bytes)");
                }
                (u64::from(p) * count, p)
            }
            Op::Count => bail!("no placement with --op count"),
        };
        let region = consumer.create_region(len, pd, true, false)?;
        let stag = region.info().stag;
        if r.transfer.op == Op::Send {
            consumer.post_recv(PostTarget::Pd(pd), stag, 0, recv, count as u32)?;
        }
        consumer.subscribe(pd)?;
        let ad = RegionAd {
            writes: true,
            sends: recv > 0,
            stag,
            len,
            base_to: 0,
            recv_buf_size: recv,
        };
        let reader = CompletionReader::start(consumer);
        Ok(Placement {
            reader,
            region,
            ad,
            op: r.transfer.op,
        })
    }

    /// After the flow ended: every message completed, in order, where it belongs, and the
    /// region holds exactly what the sender wrote. Returns (messages, octets compared).
    pub(crate) fn verify(self, r: &Run) -> Result<(u64, u64)> {
        let payload = match self.op {
            Op::Write => r.size - ddp::TAGGED_HEADER_LEN,
            _ => r.size - ddp::UNTAGGED_HEADER_LEN,
        } as u64;
        let (all, _consumer) = self.reader.finish()?;
        // With --duration the sender's count is known only from its report: every
        // completion is still checked in order and in place, and the caller checks their
        // number against the senders' (`demo::transfer`).
        let count = match r.transfer.duration {
            Some(_) => all.len() as u64,
            None => messages(r),
        };
        if all.len() as u64 != count {
            bail!("{} completions for {count} messages", all.len());
        }
        let mut n = 0u64;
        {
            for c in all {
                let want = match self.op {
                    Op::Write => (
                        CompletionKind::WritePlaced,
                        region_ad::write_to(&self.ad, n, payload).unwrap_or(u64::MAX),
                    ),
                    _ => (
                        CompletionKind::SendArrived,
                        n * u64::from(self.ad.recv_buf_size),
                    ),
                };
                if (c.kind, c.offset, c.len) != (want.0, want.1, payload) {
                    bail!("completion {n} is {c:?}, expected {want:?} of {payload} octets");
                }
                n += 1;
            }
        }
        let got = self.region.to_vec();
        let mut want = vec![0u8; got.len()];
        let table = PatternTable::new(payload as usize);
        for m in 0..count {
            let off = match self.op {
                Op::Write => region_ad::write_to(&self.ad, m, payload).unwrap_or(0),
                _ => m * u64::from(self.ad.recv_buf_size),
            } as usize;
            want[off..off + payload as usize].copy_from_slice(table.payload(m, payload as usize));
        }
        if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
            bail!(
                "region differs from what the peer wrote at offset {i}: {:#04x} instead of {:#04x}",
                got[i],
                want[i]
            );
        }
        Ok((n, got.len() as u64))
    }
}
