//! [`SetupError`]: why a connection could not be set up, in either role. Its own module
//! because the Initiator, the Responder and the hand-over they share all return it.

use crate::datapath_client::ClientError;
use crate::freeze::FreezeError;
use crate::neighbour::NeighbourError;
use mpa::startup::StartupError;
use std::io;

impl SetupError {
    /// The MPA error code (RFC 5044 §8) the failure amounts to, when it is a startup error.
    pub fn mpa_error(&self) -> Option<u8> {
        match self {
            SetupError::Startup(e) => Some(e.code().code()),
            _ => None,
        }
    }
}

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
    /// The application that owned the setup cancelled it or went away, or decided nothing
    /// in time.
    #[error("abandoned: {0}")]
    Abandoned(String),
    /// Octets were queued in the kernel socket at freeze time: they would be lost.
    #[error("kernel socket not quiet at hand-over: {recv} octets unread, {send} unsent")]
    NotQuiet {
        /// Unread octets.
        recv: usize,
        /// Unsent octets.
        send: usize,
    },
}
