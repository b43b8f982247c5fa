//! Why a connection failed, or could not be created.

use mpa::MpaErrorCode;

/// A connection's error. Sticky: once failed, a connection stays failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TcpError {
    /// The peer reset the connection (RST at RCV.NXT, RFC 5961 §3.2).
    #[error("connection reset by peer")]
    Reset,
    /// Our data or FIN went unacknowledged through too many retransmission timeouts
    /// (RFC 9293 §3.8.3, R2).
    #[error("no acknowledgment after {retransmissions} retransmission timeouts")]
    RetransmissionLimit {
        /// Consecutive timeouts.
        retransmissions: u32,
    },
    /// The peer stayed silent through every keepalive probe (RFC 1122 §4.2.3.6).
    #[error("peer silent: no answer to {probes} keepalive probes")]
    KeepaliveTimeout {
        /// Probes sent without an answer.
        probes: u32,
    },
    /// Octets were queued with nothing in flight and nothing (window, retransmission,
    /// persist) to wait for through a whole keepalive idle period: the stream cannot move.
    #[error("send stalled: {queued} octets queued, none in flight, no timer to wait for")]
    SendStalled {
        /// Octets queued (in view of the TCP).
        queued: usize,
    },
    /// The peer's FIN did not come within the FIN-WAIT-2 bound after ours was acknowledged.
    #[error("no FIN from the peer within {timeout:?} of FIN-WAIT-2")]
    FinWait2Timeout {
        /// The bound.
        timeout: std::time::Duration,
    },
    /// The peer's window stayed closed through every zero-window probe (RFC 9293 §3.8.6.1
    /// lets a sender give up; Linux does after `tcp_retries2`).
    #[error("the peer's window stayed closed through {probes} zero-window probes")]
    PersistLimit {
        /// Probes sent while it stayed closed.
        probes: u32,
    },
    /// The send source could not produce octets already committed to the stream.
    #[error("send source failed: {0}")]
    Source(#[from] super::source::SourceError),
    /// The hand-over state or the configuration cannot describe a connection.
    #[error("invalid hand-over state or configuration: {0}")]
    InvalidHandover(&'static str),
}

impl TcpError {
    /// The connection gave up waiting for a silent peer: retransmissions, keepalive probes or
    /// zero-window probes ran out (what verbs calls "retry exceeded").
    pub(crate) fn gave_up_on_silent_peer(&self) -> bool {
        matches!(
            self,
            TcpError::RetransmissionLimit { .. }
                | TcpError::KeepaliveTimeout { .. }
                | TcpError::PersistLimit { .. }
        )
    }
}

impl From<&TcpError> for MpaErrorCode {
    /// Every TCP failure is MPA error 1: "TCP connection closed, terminated or lost".
    fn from(_: &TcpError) -> MpaErrorCode {
        MpaErrorCode::TcpClosed
    }
}
