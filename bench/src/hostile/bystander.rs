//! The bystander of `mpa-bench hostile`: a normal connection on the same worker, placing
//! RDMA Writes that must land octet-exact whatever the hostile classes do.

use super::{flow_gone, HostileArgs};
use crate::bed::options::{Align, BedArgs, FramingArgs, Op, Run, TransferArgs, PORT};
use crate::bed::peer::PeerReport;
use crate::bed::placement::Placement;
use anyhow::{anyhow, bail, Result};
use mpa_harness::datapath::{accept_and_hand_over, HandedOver, Responder};
use mpa_testbed::{run_in_netns, TestBed};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
/// The bystander: `mpa-peer connect` writing into its region at a steady pace.
pub(super) struct Bystander {
    run: Run,
    placement: Placement,
    sender: std::thread::JoinHandle<Result<PeerReport>>,
    handed: HandedOver,
}

impl Bystander {
    pub(super) fn start(
        bed: &Arc<TestBed>,
        socket: &Path,
        a: &HostileArgs,
        seconds: u64,
    ) -> Result<Bystander> {
        let size = 4096usize;
        let count = (a.bystander_rate * seconds).max(1);
        let run = Run {
            transfer: TransferArgs {
                duration: None,
                interval: None,
                bytes: count * size as u64,
                op: Op::Write,
                region_bytes: 4 << 20,
                align: Align::Off,
                connections: 1,
                rcv_buf: None,
                ooo_ack_every: None,
                spin_us: 0,
                sender_cc: None,
            },
            size,
            bed: BedArgs::default(),
            framing: FramingArgs::default(),
            json: false,
        };
        let placement = Placement::prepare_in(socket, &run, crate::bed::options::PD)?;
        let resp = Responder {
            reply_private_data: placement.ad.emit().to_vec(),
            placement: mpa_control::Placement {
                pd: Some(crate::bed::options::PD),
                aligned_sender: false,
                conn_id: None,
            },
            wait: Duration::from_secs(seconds + 120),
            ..Responder::framing(run.markers(), true)
        };
        let addr = SocketAddr::new(bed.addr_b(false), PORT);
        let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr))??;
        let (ns_b, sock) = (bed.ns_b.clone(), socket.to_path_buf());
        let setup =
            std::thread::spawn(move || accept_and_hand_over(&ns_b, &sock, &listener, &resp));
        let (bed2, run2, rate) = (bed.clone(), run.clone(), a.bystander_rate);
        let sender = std::thread::spawn(move || {
            crate::bed::peer::sender_with(&bed2, &run2, &["--rate".into(), rate.to_string()])
        });
        let handed = setup
            .join()
            .map_err(|_| anyhow!("bystander hand-over panicked"))??;
        Ok(Bystander {
            run,
            placement,
            sender,
            handed,
        })
    }

    /// Whether the sender is still sending.
    pub(super) fn running(&self) -> bool {
        !self.sender.is_finished()
    }

    /// Waits for the end; the region must hold exactly what the sender wrote.
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
        let (m, o) = self.placement.verify(&self.run)?;
        Ok(format!(
            "{m} writes in {:.1} s, region of {o} octets octet-exact",
            sent.transfer_seconds.unwrap_or(0.0)
        ))
    }
}
