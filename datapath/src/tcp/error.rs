//! Why a connection failed, or could not be created.

use mpa::{Fault, MpaErrorCode};

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
    /// The hand-over state or the configuration cannot describe a connection.
    #[error("invalid hand-over state or configuration: {0}")]
    InvalidHandover(&'static str),
}

impl TcpError {
    /// Who is at fault.
    pub fn fault(&self) -> Fault {
        match self {
            TcpError::Reset | TcpError::RetransmissionLimit { .. } => Fault::Transport,
            TcpError::InvalidHandover(_) => Fault::LocalMisuse,
        }
    }
}

impl From<&TcpError> for MpaErrorCode {
    /// Every TCP failure is MPA error 1: "TCP connection closed, terminated or lost".
    fn from(_: &TcpError) -> MpaErrorCode {
        MpaErrorCode::TcpClosed
    }
}
