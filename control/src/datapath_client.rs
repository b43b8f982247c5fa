//! The connection-setup side of the control socket: requests to the datapath and its
//! notifications.

use mpa_ctl_proto::{handshake, read_message, write_message, ErrorCode, Message, ProtoError};
use std::collections::VecDeque;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Why a datapath request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket or protocol failed.
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// The datapath refused the request.
    #[error("datapath refused ({code:?}): {message}")]
    Refused {
        /// Error kind.
        code: ErrorCode,
        /// Details.
        message: String,
    },
    /// An answer that does not fit the request.
    #[error("unexpected answer from the datapath: {0:?}")]
    Unexpected(Box<Message>),
}

/// A connection to the datapath's control socket.
#[derive(Debug)]
pub struct DatapathClient {
    stream: UnixStream,
    next_id: u64,
    /// Notifications (id 0) received while waiting for answers.
    notifications: VecDeque<Message>,
    /// The datapath's agent string from its Hello.
    pub agent: String,
}

impl DatapathClient {
    /// Connects and exchanges Hellos; every later wait is bounded by `timeout`.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Self, ClientError> {
        let stream = UnixStream::connect(path).map_err(ProtoError::Io)?;
        Self::over(stream, timeout)
    }

    /// Uses an already connected stream (tests, socket activation).
    pub fn over(mut stream: UnixStream, timeout: Duration) -> Result<Self, ClientError> {
        stream
            .set_read_timeout(Some(timeout))
            .map_err(ProtoError::Io)?;
        stream
            .set_write_timeout(Some(timeout))
            .map_err(ProtoError::Io)?;
        let agent = handshake(
            &mut stream,
            concat!("mpa-control ", env!("CARGO_PKG_VERSION")),
        )?;
        Ok(DatapathClient {
            stream,
            next_id: 1,
            notifications: VecDeque::new(),
            agent,
        })
    }

    /// Sends a request built with a fresh id and waits for its answer.
    pub fn request(&mut self, build: impl FnOnce(u64) -> Message) -> Result<Message, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        write_message(&mut self.stream, &build(id))?;
        loop {
            let m = read_message(&mut self.stream)?;
            match answer_id(&m) {
                None => self.notifications.push_back(m),
                Some(got) if got == id => {
                    return match m {
                        Message::Error { code, message, .. } => {
                            Err(ClientError::Refused { code, message })
                        }
                        m => Ok(m),
                    };
                }
                Some(_) => return Err(ClientError::Unexpected(Box::new(m))),
            }
        }
    }

    /// The next notification, waiting at most the socket timeout.
    pub fn next_notification(&mut self) -> Result<Message, ClientError> {
        if let Some(m) = self.notifications.pop_front() {
            return Ok(m);
        }
        let m = read_message(&mut self.stream)?;
        match answer_id(&m) {
            None => Ok(m),
            Some(_) => Err(ClientError::Unexpected(Box::new(m))),
        }
    }
}

/// The request id an answer refers to; `None` for notifications.
fn answer_id(m: &Message) -> Option<u64> {
    match m {
        Message::FlowAdopted { id, .. }
        | Message::HandedOver { id, .. }
        | Message::Stats { id, .. }
        | Message::Ok { id }
        | Message::Error { id, .. } => Some(*id),
        _ => None,
    }
}
