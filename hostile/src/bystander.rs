//! The bystander: a normal connection on the same worker as the hostile ones, `mpa-peer
//! connect` writing 4 KiB RDMA Writes into its region at a steady pace, that must finish
//! octet-exact whatever the classes do.

use crate::{flow_gone, BYSTANDER_PORT, PD_BYSTANDER};
use anyhow::{anyhow, bail, Context, Result};
use mpa::wire::ddp;
use mpa_app::{Consumer, MappedRegion};
use mpa_ctl_proto::pattern::PatternTable;
use mpa_ctl_proto::region_ad::{self, RegionAd};
use mpa_ctl_proto::CompletionKind;
use mpa_harness::datapath::{accept_and_hand_over, HandedOver, Responder};
use mpa_harness::CompletionReader;
use mpa_testbed::{run_in_netns, TestBed};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

/// Octets of each Write's ULPDU.
const SIZE: usize = 4096;
/// Octets of the bystander's region (the Writes wrap around it, as the advertisement says).
const REGION: u64 = 4 << 20;

/// What `mpa-peer connect` reports of its transfer (its JSON line).
#[derive(serde::Deserialize)]
struct SenderReport {
    ulpdu_digest: String,
    transfer_seconds: Option<f64>,
}

/// The bystander while it runs.
pub(super) struct Bystander {
    messages: u64,
    ad: RegionAd,
    region: MappedRegion,
    /// The completions, read as they come.
    reader: CompletionReader,
    sender: std::thread::JoinHandle<Result<SenderReport>>,
    handed: HandedOver,
}

impl Bystander {
    /// Its region and completion reader, its hand-over, and `mpa-peer connect` in ns a
    /// sending `rate` Writes a second for about `seconds`.
    pub(super) fn start(
        bed: &Arc<TestBed>,
        socket: &Path,
        rate: u64,
        seconds: u64,
    ) -> Result<Bystander> {
        let messages = (rate * seconds).max(1);
        let mut consumer = Consumer::connect(socket, Duration::from_secs(20))?;
        let region = consumer.create_region(REGION, PD_BYSTANDER, true, false)?;
        consumer.subscribe(PD_BYSTANDER)?;
        let ad = RegionAd {
            writes: true,
            sends: false,
            stag: region.info().stag,
            len: REGION,
            base_to: 0,
            recv_buf_size: 0,
        };
        let reader = CompletionReader::start(consumer);
        let resp = Responder {
            reply_private_data: ad.emit().to_vec(),
            placement: mpa_control::Placement {
                pd: Some(PD_BYSTANDER),
                aligned_sender: false,
                conn_id: None,
            },
            wait: Duration::from_secs(seconds + 120),
            ..Responder::framing(false, true)
        };
        let to = SocketAddr::new(bed.addr_b(false), BYSTANDER_PORT);
        let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(to))??;
        let (ns_b, sock) = (bed.ns_b.clone(), socket.to_path_buf());
        let setup =
            std::thread::spawn(move || accept_and_hand_over(&ns_b, &sock, &listener, &resp));
        let bed2 = bed.clone();
        let sender = std::thread::spawn(move || send(&bed2, to, messages, rate));
        let handed = setup
            .join()
            .map_err(|_| anyhow!("bystander hand-over panicked"))??;
        Ok(Bystander {
            messages,
            ad,
            region,
            reader,
            sender,
            handed,
        })
    }

    /// Whether the sender is still sending.
    pub(super) fn running(&self) -> bool {
        !self.sender.is_finished()
    }

    /// Waits for the end: the flow ended without an error, its digest is the sender's, every
    /// Write completed in order where the advertisement puts it, and the region holds exactly
    /// what was written.
    pub(super) fn finish(mut self) -> Result<String> {
        let sent = self
            .sender
            .join()
            .map_err(|_| anyhow!("bystander sender panicked"))??;
        let end = flow_gone(&mut self.handed)?;
        if let Some(e) = end
            .ended
            .as_ref()
            .filter(|e| e.mpa_error.is_some() || e.terminate.is_some())
        {
            bail!("bystander ended with an error: {} ", e.reason);
        }
        if end.ulpdu_digest.as_deref() != Some(sent.ulpdu_digest.as_str()) {
            bail!(
                "bystander digests differ: sent {} received {:?}",
                sent.ulpdu_digest,
                end.ulpdu_digest
            );
        }
        let (all, _consumer) = self.reader.finish()?;
        let payload = (SIZE - ddp::TAGGED_HEADER_LEN) as u64;
        if all.len() as u64 != self.messages {
            bail!("{} completions for {} Writes", all.len(), self.messages);
        }
        let table = PatternTable::new(payload as usize);
        let mut want = vec![0u8; REGION as usize];
        for (n, c) in all.iter().enumerate() {
            let n = n as u64;
            let at = region_ad::write_to(&self.ad, n, payload)
                .ok_or_else(|| anyhow!("Write {n} does not fit the advertisement"))?;
            if (c.kind, c.offset, c.len) != (CompletionKind::WritePlaced, at, payload) {
                bail!("completion {n} is {c:?}, expected a Write placed at {at} of {payload}");
            }
            let at = at as usize;
            want[at..at + payload as usize].copy_from_slice(table.payload(n, payload as usize));
        }
        let got = self.region.to_vec();
        if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
            bail!(
                "region differs from what the peer wrote at offset {i}: {:#04x} instead of {:#04x}",
                got[i],
                want[i]
            );
        }
        Ok(format!(
            "{} writes in {:.1} s, region of {} octets octet-exact",
            self.messages,
            sent.transfer_seconds.unwrap_or(0.0),
            got.len()
        ))
    }
}

/// `mpa-peer connect` in ns a: `messages` Writes of [`SIZE`] octets at `rate` a second, CRC
/// on, no markers; its report.
fn send(bed: &TestBed, to: SocketAddr, messages: u64, rate: u64) -> Result<SenderReport> {
    let peer = mpa_harness::bin("mpa-peer");
    let out = bed
        .command(&bed.ns_a, &peer.to_string_lossy())
        .args(["connect", "--to", &to.to_string(), "--timeout", "60"])
        .args([
            "--count",
            &messages.to_string(),
            "--size",
            &SIZE.to_string(),
        ])
        .args(["--rate", &rate.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .context("run mpa-peer connect")?;
    let report: SenderReport = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("mpa-peer output {:?}", String::from_utf8_lossy(&out.stdout)))?;
    if !out.status.success() {
        bail!("mpa-peer connect failed ({})", out.status);
    }
    Ok(report)
}
