//! The Responder side of connection setup: accept with a kernel socket, run the startup phase,
//! and hand the connection over to the datapath, which sends the accepting Reply itself
//! (DESIGN.md, "Connection setup" steps 1–4).

use crate::datapath_client::{ClientError, DatapathClient};
use crate::freeze::{self, FreezeError, FrozenSocket};
use crate::neighbour::{self, NeighbourError};
use mpa::startup::{Negotiated, ResponderStartup, StartupError, StartupEvent, StartupPolicy};
use mpa_ctl_proto::{HandOver, Message, MpaParams, Role};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

/// Why a connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The kernel socket failed (MPA error 1).
    #[error("TCP: {0}")]
    Io(#[from] io::Error),
    /// The peer closed before the Request was complete.
    #[error("peer closed during the startup phase")]
    Closed,
    /// The startup phase failed.
    #[error("startup: {0}")]
    Startup(#[from] StartupError),
    /// The datapath refused or failed.
    #[error("datapath: {0}")]
    Datapath(#[from] ClientError),
    /// Freezing the socket failed.
    #[error("freeze: {0}")]
    Freeze(#[from] FreezeError),
    /// No next-hop MAC.
    #[error("next hop: {0}")]
    Neighbour(#[from] NeighbourError),
    /// Octets were queued in the kernel socket at freeze time: they would be lost.
    #[error("kernel socket not quiet at hand-over: {recv} octets unread, {send} unsent")]
    NotQuiet {
        /// Unread octets.
        recv: usize,
        /// Unsent octets.
        send: usize,
    },
}

/// What happened to one accepted connection.
#[derive(Debug)]
pub enum Outcome {
    /// The datapath owns the connection; keep `frozen` until it reports the flow gone.
    HandedOver {
        /// The datapath's flow.
        flow_id: u64,
        /// The kernel socket, frozen; dropping it closes it silently.
        frozen: FrozenSocket,
        /// What was negotiated.
        negotiated: Negotiated,
    },
    /// We rejected the Request: the kernel sent the R=1 Reply and the socket is closed.
    Rejected {
        /// The reason sent.
        reason: Vec<u8>,
    },
}

/// Runs the Responder startup on `sock` and hands the connection to the datapath.
pub fn respond_and_hand_over(
    mut sock: TcpStream,
    policy: StartupPolicy,
    reply_private_data: Vec<u8>,
    dp: &mut DatapathClient,
) -> Result<Outcome, SetupError> {
    let mut sm = ResponderStartup::auto(policy, reply_private_data, Instant::now());
    // Read exactly the Request: octets after it belong to Full Operation (none can come
    // before our Reply from a compliant Initiator, and we never swallow them).
    let mut frame: Vec<u8> = Vec::with_capacity(532);
    let mut buf = [0u8; 532];
    let negotiated = loop {
        if let Some(ev) = sm.poll_event() {
            match ev {
                StartupEvent::Established(n) => break n,
                StartupEvent::Rejected { private_data } => {
                    while let Some(reply) = sm.poll_transmit() {
                        sock.write_all(&reply)?;
                    }
                    sock.flush()?;
                    let _ = sock.shutdown(std::net::Shutdown::Both);
                    return Ok(Outcome::Rejected {
                        reason: private_data,
                    });
                }
                StartupEvent::Failed(e) => return Err(e.into()),
                StartupEvent::RequestReceived(_) => continue,
            }
        }
        let Some(deadline) = sm.poll_timeout() else {
            return Err(SetupError::Closed);
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            sm.handle_timeout(Instant::now());
            continue;
        }
        sock.set_read_timeout(Some(left))?;
        // Header first, then exactly the private data it announces.
        let want = if frame.len() < 20 {
            20 - frame.len()
        } else {
            // The state machine already refused PD_Length over the limit.
            let pd = usize::from(u16::from_be_bytes([frame[18], frame[19]])).min(512);
            (20 + pd).saturating_sub(frame.len()).max(1)
        };
        match sock.read(&mut buf[..want]) {
            Ok(0) => return Err(SetupError::Closed),
            Ok(n) => {
                frame.extend_from_slice(&buf[..n]);
                sm.handle_input(Instant::now(), &buf[..n])?;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                sm.handle_timeout(Instant::now());
            }
            Err(e) => return Err(e.into()),
        }
    };
    let reply_frame = sm.poll_transmit().unwrap_or_default();
    let local = sock.local_addr()?;
    let remote = sock.peer_addr()?;
    // 1. The datapath creates the flow and steers the 4-tuple to itself.
    let flow_id = match dp.request(|id| Message::AdoptFlow { id, local, remote })? {
        Message::FlowAdopted { flow_id, .. } => flow_id,
        m => return Err(ClientError::Unexpected(Box::new(m)).into()),
    };
    let handed = (|| -> Result<(FrozenSocket, Negotiated), SetupError> {
        // 2. Freeze and read the state; nothing may be queued.
        freeze::flush_ack(&sock)?;
        let (frozen, tcp) = freeze::freeze(sock)?;
        if !tcp.recv_queue.is_empty() || !tcp.send_queue.is_empty() {
            return Err(SetupError::NotQuiet {
                recv: tcp.recv_queue.len(),
                send: tcp.send_queue.len(),
            });
        }
        let (_, next_hop_mac) = neighbour::next_hop_mac(remote.ip())?;
        let mpa = MpaParams {
            role: Role::Responder,
            rev: negotiated.rev,
            markers_rx: negotiated.markers_rx,
            markers_tx: negotiated.markers_tx,
            crc: negotiated.crc,
            ddp_rdmap_version: negotiated.ddp_rdmap_version,
            reply_frame,
            rtr: negotiated
                .rtr_accepted()
                .iter()
                .map(|r| format!("{r:?}"))
                .collect(),
        };
        let handover = Box::new(HandOver {
            flow_id,
            tcp,
            mpa,
            next_hop_mac,
        });
        // 3. The datapath sends the Reply itself and owns the connection from here.
        match dp.request(|id| Message::HandOver { id, handover })? {
            Message::HandedOver { .. } => Ok((frozen, negotiated)),
            m => Err(ClientError::Unexpected(Box::new(m)).into()),
        }
    })();
    match handed {
        Ok((frozen, negotiated)) => Ok(Outcome::HandedOver {
            flow_id,
            frozen,
            negotiated,
        }),
        Err(e) => {
            // Undo the adoption; the kernel socket (frozen or not) closes when dropped.
            let _ = dp.request(|id| Message::CloseFlow { id, flow_id });
            Err(e)
        }
    }
}
