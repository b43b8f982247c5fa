//! Connection management for applications, shaped like rdma_cm: an application listens or
//! connects through the datapath, which relays to the connection manager (`mpa-control
//! serve`, the process that owns kernel sockets); the manager runs TCP and the MPA startup and
//! hands each connection over into the application's protection domain. What happens comes back
//! to the application as [`CmEvent`]s (docs/consumer.md, "Connections from the application").

use mpa::startup::RtrType;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// Most private data an application may put in a Request, Reply or rejection: a startup
/// frame carries at most 512 octets (RFC 5044 §7.1), and revision 2 takes 8 of them for
/// IRD/ORD (RFC 6581 §9.1).
pub const MAX_APP_PRIVATE_DATA: usize = 504;

/// Listeners one client may have at once.
pub const MAX_LISTENS_PER_CLIENT: usize = 16;

/// Connections one client may have in setup at once (connecting, or requests not yet
/// accepted or rejected).
pub const MAX_SETUPS_PER_CLIENT: usize = 256;

/// How an application's listener answers MPA Requests: the policy keys a TOML listener has,
/// except those the application decides per connection (its Reply's private data, accept or
/// reject).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListenOptions {
    /// Highest revision accepted: 1 (RFC 5044) or 2 (RFC 6581).
    pub revision: u8,
    /// Ask the peer for markers toward us (M=1 in our Reply).
    pub markers_required: bool,
    /// Ask for CRCs (C=1 in our Reply); with `false`, CRCs are still used when the peer asks.
    pub crc: bool,
    /// Accept MPA revision 0 (RDMA Consortium) peers.
    pub permissive: bool,
    /// Our IRD offered (at most [`crate::DATAPATH_MAX_IRD`]).
    pub ird: u16,
    /// Our ORD offered.
    pub ord: u16,
    /// The RTR indications accepted from a peer-to-peer Initiator (at least one).
    #[serde(with = "crate::rtr_names")]
    pub rtr_support: Vec<RtrType>,
    /// Peers align FPDUs with segments: without markers, place out-of-order segments whose
    /// first FPDU verifies by CRC (RFC 5044 §5.1).
    pub aligned_sender: bool,
    /// Connection requests waiting for the application's accept or reject at most; more are
    /// refused with a reset.
    pub backlog: u32,
}

impl Default for ListenOptions {
    fn default() -> Self {
        ListenOptions {
            revision: 2,
            markers_required: false,
            crc: true,
            permissive: false,
            ird: 8,
            ord: 8,
            rtr_support: RtrType::ALL.to_vec(),
            aligned_sender: false,
            backlog: 16,
        }
    }
}

/// How an application's connection is requested (the Initiator's startup).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConnectOptions {
    /// Our local address; `None`: the kernel chooses (the route's source, an ephemeral port).
    pub local: Option<SocketAddr>,
    /// The revision of our Request: 1 (RFC 5044) or 2 (RFC 6581, with IRD/ORD).
    pub revision: u8,
    /// Ask the peer for markers toward us (M=1).
    pub markers_required: bool,
    /// Ask for CRCs (C=1); with `false`, CRCs are still used when the peer asks.
    pub crc: bool,
    /// Revision 2: the peer-to-peer model (the Initiator sends an RTR indication first).
    pub p2p: bool,
    /// Our IRD (revision 2).
    pub ird: u16,
    /// Our ORD (revision 2).
    pub ord: u16,
    /// Our Request's private data (at most [`MAX_APP_PRIVATE_DATA`] octets).
    pub private_data: Vec<u8>,
    /// Peers align FPDUs with segments (see [`ListenOptions::aligned_sender`]).
    pub aligned_sender: bool,
    /// Milliseconds each wait of the setup may last (TCP connect, the Reply); 0: the
    /// connection manager's own.
    pub timeout_ms: u32,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            local: None,
            revision: 2,
            markers_required: false,
            crc: true,
            p2p: false,
            ird: 8,
            ord: 8,
            private_data: Vec::new(),
            aligned_sender: false,
            timeout_ms: 0,
        }
    }
}

/// What the peer's startup frame said and what was agreed, as an application sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerParams {
    /// The peer's address.
    pub peer: SocketAddr,
    /// Our address.
    pub local: SocketAddr,
    /// The peer's MPA revision.
    pub revision: u8,
    /// Markers toward us.
    pub markers_rx: bool,
    /// Markers toward the peer.
    pub markers_tx: bool,
    /// CRCs both ways.
    pub crc: bool,
    /// Our IRD after negotiation (revision 2), or `None`.
    pub ird: Option<u16>,
    /// Our ORD after negotiation (revision 2), or `None`.
    pub ord: Option<u16>,
    /// The peer's ULP private data (its Request at a listener, its Reply at a connector).
    pub private_data: Vec<u8>,
}

/// What the connection manager and the datapath tell an application about its connections
/// (datapath → application, [`crate::Message::CmEvent`]). A connection's events come in
/// this order: `ConnectRequest` (listener only), then one of `Established`, `Rejected`,
/// `Unreachable`, `SetupFailed`; after `Established`, the connection's end comes as
/// [`crate::Message::FlowGone`] (disconnected, terminated, or an MPA error).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum CmEvent {
    /// An MPA Request arrived at listener `listen_id`: accept or reject `conn_id`.
    ConnectRequest {
        /// The listener.
        listen_id: u64,
        /// The connection, for Accept or Reject.
        conn_id: u64,
        /// The Request (what accepting will agree).
        params: PeerParams,
        /// Revision 2: the Initiator's IRD and ORD as sent.
        peer_ird_ord: Option<(u16, u16)>,
    },
    /// The connection is the datapath's: post on `flow_id`.
    Established {
        /// The connection.
        conn_id: u64,
        /// Its flow: the queue pair's number.
        flow_id: u64,
        /// What was agreed, and the peer's private data.
        params: PeerParams,
    },
    /// The peer rejected our Request (Reply with R=1), with its private data.
    Rejected {
        /// The connection.
        conn_id: u64,
        /// The peer's reason.
        private_data: Vec<u8>,
    },
    /// No TCP connection could be made (refused, no route, timed out).
    Unreachable {
        /// The connection.
        conn_id: u64,
        /// Why.
        reason: String,
    },
    /// The setup failed after TCP connected: an MPA startup error (its code, RFC 5044 §8),
    /// the peer closed, a timeout, or the hand-over.
    SetupFailed {
        /// The connection.
        conn_id: u64,
        /// The MPA error code, when the failure was one.
        mpa_error: Option<u8>,
        /// Why.
        reason: String,
    },
    /// Listener `listen_id` stopped without being asked (the connection manager went away).
    ListenEnded {
        /// The listener.
        listen_id: u64,
        /// Why.
        reason: String,
    },
}

impl CmEvent {
    /// The connection the event is about, if any.
    pub fn conn_id(&self) -> Option<u64> {
        match self {
            CmEvent::ConnectRequest { conn_id, .. }
            | CmEvent::Established { conn_id, .. }
            | CmEvent::Rejected { conn_id, .. }
            | CmEvent::Unreachable { conn_id, .. }
            | CmEvent::SetupFailed { conn_id, .. } => Some(*conn_id),
            CmEvent::ListenEnded { .. } => None,
        }
    }
}

/// How a setup the connection manager ran for an application ended, when not by a hand-over
/// (connection manager → datapath).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum SetupOutcome {
    /// See [`CmEvent::Rejected`].
    Rejected {
        /// The peer's reason.
        private_data: Vec<u8>,
    },
    /// See [`CmEvent::Unreachable`].
    Unreachable {
        /// Why.
        reason: String,
    },
    /// See [`CmEvent::SetupFailed`].
    Failed {
        /// The MPA error code, when the failure was one.
        mpa_error: Option<u8>,
        /// Why.
        reason: String,
    },
}

/// An application's answer to a connection request (datapath → connection manager).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Send the accepting Reply with this private data (IRD/ORD the listener's), then hand
    /// over.
    Accept {
        /// Our Reply's private data.
        private_data: Vec<u8>,
    },
    /// Send a rejecting Reply (R=1) with this private data and close.
    Reject {
        /// Our reason.
        private_data: Vec<u8>,
    },
}

/// Checks options an application sent; the message says what is wrong.
pub fn check_listen(o: &ListenOptions) -> Result<(), String> {
    if !matches!(o.revision, 1 | 2) {
        return Err(format!("revision {} (1 or 2)", o.revision));
    }
    check_ird_ord(o.ird, o.ord)?;
    if o.rtr_support.is_empty() {
        return Err("rtr_support needs at least one RTR indication (RFC 6581 §9.2)".into());
    }
    if o.backlog == 0 || o.backlog as usize > MAX_SETUPS_PER_CLIENT {
        return Err(format!(
            "backlog {} (1 ..= {MAX_SETUPS_PER_CLIENT})",
            o.backlog
        ));
    }
    Ok(())
}

/// Checks connect options; the message says what is wrong.
pub fn check_connect(o: &ConnectOptions) -> Result<(), String> {
    if !matches!(o.revision, 1 | 2) {
        return Err(format!("revision {} (1 or 2)", o.revision));
    }
    if o.p2p && o.revision != 2 {
        return Err("p2p needs revision 2 (RFC 6581)".into());
    }
    check_ird_ord(o.ird, o.ord)?;
    check_private_data(&o.private_data)
}

/// Checks private data an application sends in a Request, Reply or rejection.
pub fn check_private_data(pd: &[u8]) -> Result<(), String> {
    if pd.len() > MAX_APP_PRIVATE_DATA {
        return Err(format!(
            "{} octets of private data (at most {MAX_APP_PRIVATE_DATA})",
            pd.len()
        ));
    }
    Ok(())
}

fn check_ird_ord(ird: u16, ord: u16) -> Result<(), String> {
    if ird > crate::DATAPATH_MAX_IRD {
        return Err(format!(
            "ird {ird}: the datapath serves at most {} inbound Reads",
            crate::DATAPATH_MAX_IRD
        ));
    }
    if ord > 0x3FFF {
        return Err(format!("ord {ord} (14 bits, RFC 6581 §9.1)"));
    }
    Ok(())
}
