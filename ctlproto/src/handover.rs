//! What `mpa-control` hands to the datapath for one connection: the frozen kernel TCP state
//! and what the MPA startup phase agreed.

use mpa::startup::RtrType;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// The kernel TCP state read with TCP_REPAIR at freeze time (docs/environment.md, "TCP_REPAIR
/// hand-over").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpSnapshot {
    /// Our address (the accepted or connected socket's local side).
    pub local: SocketAddr,
    /// The peer's address.
    pub remote: SocketAddr,
    /// Next sequence number we send (TCP_QUEUE_SEQ of the send queue).
    pub snd_nxt: u32,
    /// Next sequence number we expect (TCP_QUEUE_SEQ of the receive queue).
    pub rcv_nxt: u32,
    /// TCP_REPAIR_WINDOW: snd_wl1.
    pub snd_wl1: u32,
    /// TCP_REPAIR_WINDOW: the peer's window as last received, unscaled octets.
    pub snd_wnd: u32,
    /// TCP_REPAIR_WINDOW: max_window.
    pub max_window: u32,
    /// TCP_REPAIR_WINDOW: our receive window, octets.
    pub rcv_wnd: u32,
    /// TCP_REPAIR_WINDOW: rcv_wup (the right edge we advertised is rcv_wup + rcv_wnd).
    pub rcv_wup: u32,
    /// The peer's SYN MSS (TCP_MAXSEG in repair mode).
    pub mss: u16,
    /// Our window shift (tcpi_rcv_wscale), when window scaling was negotiated.
    pub rcv_wscale: Option<u8>,
    /// The peer's window shift (tcpi_snd_wscale).
    pub snd_wscale: Option<u8>,
    /// SACK permitted on this connection.
    pub sack_permitted: bool,
    /// Timestamps: our TSval at freeze and CLOCK_MONOTONIC (ns) when it was read.
    pub timestamps: Option<TsSnapshot>,
    /// Octets still queued for sending (should be empty: the hand-over drains first).
    pub send_queue: Vec<u8>,
    /// Octets received but unread (should be empty).
    pub recv_queue: Vec<u8>,
}

/// Timestamp clock at freeze.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TsSnapshot {
    /// TCP_TIMESTAMP: our TSval clock at freeze.
    pub tsval: u32,
    /// CLOCK_MONOTONIC in nanoseconds, halfway between two reads bracketing TCP_TIMESTAMP.
    pub monotonic_ns: u64,
    /// The peer's last TSval, when known (0 otherwise; Linux accepts TSecr 0).
    pub ts_recent: u32,
}

/// MPA role of this side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// We sent the Request.
    Initiator,
    /// We answer with the Reply.
    Responder,
}

/// What the startup phase agreed, and what the datapath still has to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MpaParams {
    /// Our role.
    pub role: Role,
    /// The peer's revision.
    pub rev: u8,
    /// The peer adds markers toward us.
    pub markers_rx: bool,
    /// We add markers toward the peer.
    pub markers_tx: bool,
    /// CRC both ways.
    pub crc: bool,
    /// DDP/RDMAP version (1, or 0 with an RDMAC peer).
    pub ddp_rdmap_version: u8,
    /// Responder: the accepting Reply frame the datapath sends (with retransmission) so that
    /// its ACK and the first FPDU reach the datapath. Empty for an Initiator.
    pub reply_frame: Vec<u8>,
    /// The RTR the Initiator sends first (none or one), or the ones a Responder accepts. On
    /// the wire: their names (`"ZeroLengthSend"`, `"ZeroLengthWrite"`,
    /// `"ZeroLengthReadRequest"`); an unknown name fails the whole message.
    #[serde(with = "crate::rtr_names")]
    pub rtr: Vec<RtrType>,
    /// The protection domain whose registered regions the peer's RDMA messages may target
    /// and whose posted receive buffers its Sends use; `None`: no placement (payloads are
    /// only counted and digested).
    #[serde(default)]
    pub pd: Option<u32>,
    /// Without markers toward us: the peer aligns FPDUs with segments (RFC 5044 §5.1), so an
    /// out-of-order segment may be placed when an FPDU header at its start verifies by CRC.
    #[serde(default)]
    pub aligned_sender: bool,
    /// The MPA Request as it travelled (received by a Responder, sent by an Initiator), kept
    /// only so that a capture taken by the datapath can show the startup the kernel carried
    /// (reconstructed frames, see `CapturedFrame::reconstructed`). Empty when unknown.
    #[serde(default)]
    pub request_frame: Vec<u8>,
    /// Initiator only: the Reply it received, for the same purpose. Empty otherwise.
    #[serde(default)]
    pub received_reply_frame: Vec<u8>,
    /// Revision 2 with IRD/ORD negotiated (RFC 6581 §9.1): our IRD, the most inbound RDMA
    /// Read Requests the peer may have outstanding (at most [`DATAPATH_MAX_IRD`]). `None`:
    /// not negotiated; the datapath serves up to [`DATAPATH_MAX_IRD`].
    #[serde(default)]
    pub ird: Option<u16>,
    /// Likewise our ORD: the most outbound Read Requests we may have outstanding (0: none
    /// may be sent). `None`: not negotiated; the datapath's own bound ([`DATAPATH_MAX_ORD`]).
    #[serde(default)]
    pub ord: Option<u16>,
}

/// The most inbound RDMA Read Requests the datapath holds per connection (its IRD queue): a
/// negotiated IRD above it could not be honoured, so `mpa-control` refuses to offer more.
pub const DATAPATH_MAX_IRD: u16 = 32;

/// The most outbound RDMA Read Requests the datapath keeps outstanding per connection; a
/// larger negotiated ORD is used up to this.
pub const DATAPATH_MAX_ORD: u16 = 16;

/// The whole hand-over of one connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandOver {
    /// The flow the datapath created for this 4-tuple.
    pub flow_id: u64,
    /// Kernel TCP state.
    pub tcp: TcpSnapshot,
    /// MPA state.
    pub mpa: MpaParams,
    /// Next-hop MAC address (from the neighbour table).
    pub next_hop_mac: [u8; 6],
    /// An application's connection (it asked by Listen or Connect): the setup it ends and
    /// what the application is told. `None`: a listener of the operator's configuration.
    #[serde(default)]
    pub app: Option<AppHandOver>,
}

/// The application's side of a hand-over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppHandOver {
    /// The setup (from [`crate::Message::ConnectionQueued`] or
    /// [`crate::Message::ManagerConnect`]).
    pub conn_id: u64,
    /// What [`crate::cm::CmEvent::Established`] reports.
    pub params: crate::cm::PeerParams,
}
