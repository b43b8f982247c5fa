//! A client of the datapath's control socket: requests matched to their answers by id,
//! notifications (id 0) queued while waiting, every wait bounded. Used by `mpa-control` (the
//! connection-setup process) and by the application interface (crate `mpa-app`). Every read
//! takes the descriptor a message may carry (SCM_RIGHTS), so none is ever lost.

use crate::stats::{DatapathStats, PageError};
use crate::{
    handshake, read_message_with_fds, write_message, write_message_with_fd, ErrorCode, Message,
    ProtoError,
};
use nix::sys::socket::{recv, MsgFlags};
use std::collections::VecDeque;
use std::io::{self, ErrorKind};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

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
    /// The pages of a statistics document do not fit together.
    #[error(transparent)]
    Page(#[from] PageError),
}

/// A connection to the datapath's control socket.
#[derive(Debug)]
pub struct ControlClient {
    stream: UnixStream,
    next_id: u64,
    /// Notifications (id 0) received while waiting for answers.
    notifications: VecDeque<Message>,
    /// The datapath's agent string from its Hello.
    pub agent: String,
    /// The bound of every wait for an answer.
    timeout: Duration,
}

impl ControlClient {
    /// Connects and exchanges Hellos; every later wait is bounded by `timeout`.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Self, ClientError> {
        Self::connect_as(
            path,
            timeout,
            concat!("mpa-ctl-proto ", env!("CARGO_PKG_VERSION")),
        )
    }

    /// As [`ControlClient::connect`], introducing itself as `agent`.
    pub fn connect_as(path: &Path, timeout: Duration, agent: &str) -> Result<Self, ClientError> {
        let stream = UnixStream::connect(path).map_err(ProtoError::Io)?;
        Self::over_as(stream, timeout, agent)
    }

    /// Uses an already connected stream (tests, socket activation).
    pub fn over(stream: UnixStream, timeout: Duration) -> Result<Self, ClientError> {
        Self::over_as(
            stream,
            timeout,
            concat!("mpa-ctl-proto ", env!("CARGO_PKG_VERSION")),
        )
    }

    /// As [`ControlClient::over`], introducing itself as `agent`.
    pub fn over_as(
        mut stream: UnixStream,
        timeout: Duration,
        agent: &str,
    ) -> Result<Self, ClientError> {
        stream
            .set_read_timeout(Some(timeout))
            .map_err(ProtoError::Io)?;
        stream
            .set_write_timeout(Some(timeout))
            .map_err(ProtoError::Io)?;
        let agent = handshake(&mut stream, agent)?;
        Ok(ControlClient {
            stream,
            next_id: 1,
            notifications: VecDeque::new(),
            agent,
            timeout,
        })
    }

    /// Sends a request built with a fresh id and waits for its answer.
    pub fn request(&mut self, build: impl FnOnce(u64) -> Message) -> Result<Message, ClientError> {
        self.request_with_fd(build).map(|(m, _)| m)
    }

    /// As [`ControlClient::request`], with the descriptor the answer carries, if any.
    pub fn request_with_fd(
        &mut self,
        build: impl FnOnce(u64) -> Message,
    ) -> Result<(Message, Option<OwnedFd>), ClientError> {
        self.request_with_fds(build)
            .map(|(m, fds)| (m, fds.into_iter().next()))
    }

    /// As [`ControlClient::request`], with every descriptor the answer carries, in order.
    pub fn request_with_fds(
        &mut self,
        build: impl FnOnce(u64) -> Message,
    ) -> Result<(Message, Vec<OwnedFd>), ClientError> {
        self.exchange(None, build)
    }

    /// As [`ControlClient::request`], with descriptor `fd` attached to the request
    /// (SCM_RIGHTS): the memfd a RegisterRegion hands over. The datapath receives a
    /// duplicate; `fd` stays the caller's.
    pub fn request_sending_fd(
        &mut self,
        fd: BorrowedFd<'_>,
        build: impl FnOnce(u64) -> Message,
    ) -> Result<Message, ClientError> {
        self.exchange(Some(fd), build).map(|(m, _)| m)
    }

    /// Sends a request built with a fresh id, with `fd` attached if given, and waits for its
    /// answer and the descriptors that come with it.
    fn exchange(
        &mut self,
        fd: Option<BorrowedFd<'_>>,
        build: impl FnOnce(u64) -> Message,
    ) -> Result<(Message, Vec<OwnedFd>), ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        match fd {
            Some(fd) => write_message_with_fd(&self.stream, &build(id), fd)?,
            None => write_message(&mut self.stream, &build(id))?,
        }
        loop {
            let (m, fds) = read_message_with_fds(&self.stream)?;
            match answer_id(&m) {
                None => self.notifications.push_back(m),
                Some(got) if got == id => {
                    return match m {
                        Message::Error { code, message, .. } => {
                            Err(ClientError::Refused { code, message })
                        }
                        m => Ok((m, fds)),
                    };
                }
                Some(_) => return Err(ClientError::Unexpected(Box::new(m))),
            }
        }
    }

    /// The whole statistics document: page after page until every live flow is listed
    /// (docs/consumer.md, "Statistics in pages"). The counters are those of the first page.
    pub fn stats(&mut self) -> Result<DatapathStats, ClientError> {
        let mut doc = self.stats_page(None, None)?;
        doc.check_page()?;
        while let Some(after) = doc.flow_page.next {
            let page = self.stats_page(Some(after), None)?;
            doc.append_page(page)?;
        }
        Ok(doc)
    }

    /// One page of the statistics document: at most `max_flows` live flows (`None`: as many
    /// as an answer holds), those with the lowest ids above `flows_after`.
    pub fn stats_page(
        &mut self,
        flows_after: Option<u64>,
        max_flows: Option<u32>,
    ) -> Result<DatapathStats, ClientError> {
        match self.request(|id| Message::GetStats {
            id,
            flows_after,
            max_flows,
        })? {
            Message::Stats { stats, .. } => Ok(*stats),
            other => Err(ClientError::Unexpected(Box::new(other))),
        }
    }

    /// A notification already read (while waiting for an answer), without reading more.
    pub fn queued_notification(&mut self) -> Option<Message> {
        self.notifications.pop_front()
    }

    /// The next notification, waiting at most the socket timeout.
    pub fn next_notification(&mut self) -> Result<Message, ClientError> {
        if let Some(m) = self.notifications.pop_front() {
            return Ok(m);
        }
        let (m, _) = read_message_with_fds(&self.stream)?;
        match answer_id(&m) {
            None => Ok(m),
            Some(_) => Err(ClientError::Unexpected(Box::new(m))),
        }
    }
}

impl std::os::fd::AsFd for ControlClient {
    /// The socket, for polling beside other descriptors.
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

impl ControlClient {
    /// The next notification, waiting until `deadline` (`None`: as long as it takes);
    /// `Ok(None)` when the deadline came first. The wait happens before a message starts, so
    /// running out of time never splits one.
    pub fn wait_notification(
        &mut self,
        deadline: Option<Instant>,
    ) -> Result<Option<Message>, ClientError> {
        if let Some(m) = self.notifications.pop_front() {
            return Ok(Some(m));
        }
        loop {
            let left = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(None),
                },
            };
            self.stream.set_read_timeout(left).map_err(ProtoError::Io)?;
            let peeked = recv(self.stream.as_raw_fd(), &mut [0u8; 1], MsgFlags::MSG_PEEK)
                .map_err(io::Error::from);
            self.stream
                .set_read_timeout(Some(self.timeout))
                .map_err(ProtoError::Io)?;
            match peeked {
                Ok(0) => return Err(ProtoError::Closed.into()),
                Ok(_) => return self.next_notification().map(Some),
                Err(e) if is_wait(&e) => continue,
                Err(e) => return Err(ProtoError::Io(e).into()),
            }
        }
    }
}

/// A read that ended for want of data (timeout or signal), not a failure.
fn is_wait(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// The request id an answer refers to; `None` for notifications.
fn answer_id(m: &Message) -> Option<u64> {
    match m {
        Message::FlowAdopted { id, .. }
        | Message::HandedOver { id, .. }
        | Message::Stats { id, .. }
        | Message::Regions { id, .. }
        | Message::RegionCreated { id, .. }
        | Message::RegionRegistered { id, .. }
        | Message::Subscribed { id, .. }
        | Message::Posted { id, .. }
        | Message::PdAllocated { id, .. }
        | Message::Listening { id, .. }
        | Message::Connecting { id, .. }
        | Message::ConnectionQueued { id, .. }
        | Message::Ok { id }
        | Message::Error { id, .. } => Some(*id),
        // Requests and notifications: no wildcard, so that a new answer cannot be missed
        // (one was: its request then timed out).
        Message::Hello { .. }
        | Message::AdoptFlow { .. }
        | Message::HandOver { .. }
        | Message::FinishFlow { .. }
        | Message::CloseFlow { .. }
        | Message::FlowGone { .. }
        | Message::CreateRegion { .. }
        | Message::RegisterRegion { .. }
        | Message::DestroyRegion { .. }
        | Message::ListRegions { .. }
        | Message::PostRecv { .. }
        | Message::Post { .. }
        | Message::Subscribe { .. }
        | Message::Unsubscribe { .. }
        | Message::WatchPort { .. }
        | Message::UnwatchPort { .. }
        | Message::GetStats { .. }
        | Message::StartCapture { .. }
        | Message::StopCapture { .. }
        | Message::Captured { .. }
        | Message::CaptureDone { .. }
        | Message::AllocPd { .. }
        | Message::DeallocPd { .. }
        | Message::Listen { .. }
        | Message::StopListening { .. }
        | Message::Connect { .. }
        | Message::Accept { .. }
        | Message::Reject { .. }
        | Message::CmEvent { .. }
        | Message::ServeConnections { .. }
        | Message::ManagerListen { .. }
        | Message::ListenResult { .. }
        | Message::ManagerStopListening { .. }
        | Message::ConnectionRequested { .. }
        | Message::ManagerDecision { .. }
        | Message::ManagerConnect { .. }
        | Message::ManagerCancel { .. }
        | Message::SetupEnded { .. } => None,
    }
}
