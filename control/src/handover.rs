//! The hand-over shared by both roles (docs/architecture.md, "Connection setup" steps 2–4):
//! AdoptFlow → flush the delayed ACK → TCP_REPAIR freeze → nothing queued → next-hop MAC →
//! HandOver, with CloseFlow as the rollback when any step after the adoption fails.

use crate::datapath_client::{ClientError, DatapathClient};
use crate::freeze::{self, FrozenSocket};
use crate::neighbour;
use crate::setup_error::SetupError;
use mpa::startup::{Negotiated, NO_IRD_ORD_NEGOTIATION};
use mpa::wire::startup::{HEADER_LEN, MAX_FRAME_LEN, MAX_PRIVATE_DATA};
use mpa_ctl_proto::cm::PeerParams;
use mpa_ctl_proto::{AppHandOver, HandOver, Message, MpaParams, Role};
use std::io::{self, Read};
use std::net::TcpStream;
use std::time::Instant;

/// How many octets to read next of a startup frame of which `frame` arrived so far: the
/// header first, then exactly the private data it announces, so that nothing after the frame
/// is consumed (those octets belong to Full Operation and to the datapath).
fn frame_want(frame: &[u8]) -> usize {
    if frame.len() < HEADER_LEN {
        HEADER_LEN - frame.len()
    } else {
        // The state machine already refused PD_Length over the limit.
        let pd = usize::from(u16::from_be_bytes([frame[18], frame[19]])).min(MAX_PRIVATE_DATA);
        (HEADER_LEN + pd).saturating_sub(frame.len()).max(1)
    }
}

/// The startup frames of one connection.
pub(crate) struct StartupWire {
    /// Responder: the accepting Reply its flow sends first. Empty for an Initiator.
    pub reply_to_send: Vec<u8>,
    /// The Request as it travelled (received or sent): only for captures.
    pub request: Vec<u8>,
    /// Initiator: the Reply received, only for captures. Empty for a Responder.
    pub reply_received: Vec<u8>,
}

/// What one [`read_frame_step`] did.
pub(crate) enum FrameRead {
    /// This many octets arrived; they are the last ones of the frame buffer now.
    Octets(usize),
    /// The deadline came first: let the state machine handle its timeout.
    TimedOut,
    /// A signal interrupted the wait: try again.
    Interrupted,
}

/// One wait of either role's startup phase: reads, before `deadline`, at most the octets the
/// startup frame in `frame` still needs ([`frame_want`]) and appends them.
pub(crate) fn read_frame_step(
    sock: &mut TcpStream,
    frame: &mut Vec<u8>,
    deadline: Instant,
) -> Result<FrameRead, SetupError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Ok(FrameRead::TimedOut);
    }
    sock.set_read_timeout(Some(left))?;
    let mut buf = [0u8; MAX_FRAME_LEN];
    let want = frame_want(frame).min(MAX_FRAME_LEN);
    match sock.read(&mut buf[..want]) {
        Ok(0) => Err(SetupError::Closed),
        Ok(n) => {
            frame.extend_from_slice(&buf[..n]);
            Ok(FrameRead::Octets(n))
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(FrameRead::Interrupted),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Ok(FrameRead::TimedOut)
        }
        Err(e) => Err(e.into()),
    }
}

/// Hands the quiet connection `sock` (startup done) to the datapath. `wire` holds what a
/// Responder's flow sends first, and the startup frames a capture may show; `rtr` names the RTR indications
/// (`RtrType`'s Debug form): the one an Initiator's flow sends first, or those a Responder's
/// flow accepts; `pd` the protection domain whose regions and posted buffers the flow
/// places into (`None`: no placement). Returns the flow id and the frozen socket, which the caller keeps until the
/// datapath reports the flow gone.
/// How a handed-over flow places what it receives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Placement {
    /// Protection domain whose regions and posted buffers it places into (`None`: payloads
    /// are only counted).
    pub pd: Option<u32>,
    /// The peer aligns FPDUs with TCP segments: without markers, out-of-order segments whose
    /// leading FPDU verifies by CRC are placed at once (opt-in, RFC 5044 §5.1).
    pub aligned_sender: bool,
    /// An application's setup (its Listen or Connect): the hand-over names it, so that the
    /// datapath places into the domain the application asked for and tells it.
    pub conn_id: Option<u64>,
}

impl From<Option<u32>> for Placement {
    fn from(pd: Option<u32>) -> Self {
        Placement {
            pd,
            ..Placement::default()
        }
    }
}

pub(crate) fn hand_over(
    sock: TcpStream,
    dp: &mut DatapathClient,
    role: Role,
    negotiated: &Negotiated,
    wire: StartupWire,
    rtr: Vec<mpa::startup::RtrType>,
    placement: Placement,
) -> Result<(u64, FrozenSocket), SetupError> {
    let local = sock.local_addr()?;
    let remote = sock.peer_addr()?;
    // 1. The datapath creates the flow and steers the 4-tuple to itself.
    let flow_id = match dp.request(|id| Message::AdoptFlow { id, local, remote })? {
        Message::FlowAdopted { flow_id, .. } => flow_id,
        m => return Err(ClientError::Unexpected(Box::new(m)).into()),
    };
    let handed = (|| -> Result<FrozenSocket, SetupError> {
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
            role,
            rev: negotiated.rev,
            markers_rx: negotiated.markers_rx,
            markers_tx: negotiated.markers_tx,
            crc: negotiated.crc,
            ddp_rdmap_version: negotiated.ddp_rdmap_version,
            reply_frame: wire.reply_to_send,
            rtr,
            pd: placement.pd,
            aligned_sender: placement.aligned_sender,
            request_frame: wire.request,
            received_reply_frame: wire.reply_received,
            ird: negotiated_bound(negotiated, negotiated.ird),
            ord: negotiated_bound(negotiated, negotiated.ord),
        };
        let app = placement.conn_id.map(|conn_id| AppHandOver {
            conn_id,
            params: PeerParams {
                peer: remote,
                local,
                revision: negotiated.rev,
                markers_rx: negotiated.markers_rx,
                markers_tx: negotiated.markers_tx,
                crc: negotiated.crc,
                ird: mpa.ird,
                ord: mpa.ord,
                private_data: negotiated.peer_private_data.clone(),
            },
        });
        let handover = Box::new(HandOver {
            flow_id,
            tcp,
            mpa,
            next_hop_mac,
            app,
        });
        // 3. The datapath owns the connection from here (and sends the Reply or the RTR).
        match dp.request(|id| Message::HandOver { id, handover })? {
            Message::HandedOver { .. } => Ok(frozen),
            m => Err(ClientError::Unexpected(Box::new(m)).into()),
        }
    })();
    match handed {
        Ok(frozen) => Ok((flow_id, frozen)),
        Err(e) => {
            // Undo the adoption; the kernel socket (frozen or not) closes when dropped.
            let _ = dp.request(|id| Message::CloseFlow { id, flow_id });
            Err(e)
        }
    }
}

/// An IRD or ORD the startup negotiated (RFC 6581 §9.1): only revision 2's enhanced
/// connection setup carries them, and 0x3FFF leaves them to the ULP; otherwise `None` (the
/// datapath's own bounds apply).
pub(crate) fn negotiated_bound(n: &Negotiated, value: u16) -> Option<u16> {
    (n.peer_enhanced.is_some() && value != NO_IRD_ORD_NEGOTIATION).then_some(value)
}
