//! The consumer's connections, as rdma_cm's: its domains (`AllocPd`), its listeners and
//! connects, accept and reject, and the events the datapath sends about them — requests,
//! setups' outcomes and the ends of established connections — kept in a bounded queue.

use super::{Consumer, ConsumerError};
use mpa_ctl_proto::cm::{CmEvent, ConnectOptions, ListenOptions};
use mpa_ctl_proto::Message;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// Connection ends a consumer keeps until [`Consumer::connection_events`] takes them; more
/// are counted ([`Consumer::connection_events_dropped`]), not kept.
pub const MAX_CONNECTION_EVENTS: usize = 4096;

/// A connection of one of the consumer's domains ended (however it ended: a graceful close,
/// a reset, a Terminate either way, an MPA error, a timer): no more of its completions come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionEnded {
    /// The connection.
    pub flow_id: u64,
    /// The MPA error code (RFC 5044 §8), if it ended with one.
    pub mpa_error: Option<u8>,
    /// The Terminate that ended it, sent or received.
    pub terminate: Option<mpa_ctl_proto::TerminateInfo>,
    /// Why, in words.
    pub reason: String,
}

/// What happened to a listener or connection of the consumer's (rdma_cm's events): from the
/// connection manager, or the end of an established connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionEvent {
    /// A listener's connection request, an outcome of a setup, or a listener's end.
    Cm(CmEvent),
    /// An established connection ended.
    Ended(ConnectionEnded),
}

impl Consumer {
    /// The connection events since the last call, oldest first (as rdma_cm's event channel
    /// tells a verbs application): requests at its listeners, setups' outcomes, and the ends
    /// of the connections of its domains. Reads what the datapath sent without waiting. A
    /// datapath that went away is an error.
    pub fn connection_events(&mut self) -> Result<Vec<ConnectionEvent>, ConsumerError> {
        self.check_socket()?;
        Ok(self.ended.drain(..).collect())
    }

    /// The next connection event, waiting at most `timeout` (`Ok(None)`: none came).
    pub fn wait_connection_event(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<ConnectionEvent>, ConsumerError> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_socket()?;
            if let Some(e) = self.ended.pop_front() {
                return Ok(Some(e));
            }
            match self.client.wait_notification(Some(deadline))? {
                Some(m) => self.note(m),
                None => return Ok(None),
            }
        }
    }

    /// The descriptor that becomes readable when a connection event may have come: put it in
    /// an epoll set, then call [`Consumer::connection_events`] (like `rdma_event_channel`'s
    /// fd). Events already read while waiting for an answer are returned at once by that
    /// call without the descriptor becoming readable: call it after every request too.
    pub fn event_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.client.as_fd()
    }

    /// Allocates a protection domain that only this consumer may name (`ibv_alloc_pd`).
    pub fn alloc_pd(&mut self) -> Result<u32, ConsumerError> {
        match self.client.request(|id| Message::AllocPd { id })? {
            Message::PdAllocated { pd, .. } => Ok(pd),
            m => Err(Self::unexpected(m)),
        }
    }

    /// Releases an allocated domain (`ibv_dealloc_pd`); refused while anything is in it.
    pub fn dealloc_pd(&mut self, pd: u32) -> Result<(), ConsumerError> {
        self.expect_ok(|id| Message::DeallocPd { id, pd })
    }

    /// Listens for MPA connections on `bind` for domain `pd` (`rdma_bind_addr` +
    /// `rdma_listen`); returns the listener and where it is bound. Requests arrive as
    /// [`CmEvent::ConnectRequest`].
    pub fn listen(
        &mut self,
        pd: u32,
        bind: std::net::SocketAddr,
        options: ListenOptions,
    ) -> Result<(u64, std::net::SocketAddr), ConsumerError> {
        match self.client.request(|id| Message::Listen {
            id,
            pd,
            bind,
            options,
        })? {
            Message::Listening {
                listen_id, bound, ..
            } => Ok((listen_id, bound)),
            m => Err(Self::unexpected(m)),
        }
    }

    /// Stops listener `listen_id` (`rdma_destroy_id` of a listening id).
    pub fn stop_listening(&mut self, listen_id: u64) -> Result<(), ConsumerError> {
        self.expect_ok(|id| Message::StopListening { id, listen_id })
    }

    /// Connects to `remote` for domain `pd` (`rdma_resolve_addr` … `rdma_connect`); returns
    /// the connection whose outcome comes as a [`CmEvent`].
    pub fn connect_to(
        &mut self,
        pd: u32,
        remote: std::net::SocketAddr,
        options: ConnectOptions,
    ) -> Result<u64, ConsumerError> {
        match self.client.request(|id| Message::Connect {
            id,
            pd,
            remote,
            options,
        })? {
            Message::Connecting { conn_id, .. } => Ok(conn_id),
            m => Err(Self::unexpected(m)),
        }
    }

    /// Accepts connection request `conn_id` with this Reply private data (`rdma_accept`);
    /// [`CmEvent::Established`] follows.
    pub fn accept(&mut self, conn_id: u64, private_data: &[u8]) -> Result<(), ConsumerError> {
        let private_data = private_data.to_vec();
        self.expect_ok(|id| Message::Accept {
            id,
            conn_id,
            private_data,
        })
    }

    /// Rejects connection request `conn_id` with this private data (`rdma_reject`).
    pub fn reject(&mut self, conn_id: u64, private_data: &[u8]) -> Result<(), ConsumerError> {
        let private_data = private_data.to_vec();
        self.expect_ok(|id| Message::Reject {
            id,
            conn_id,
            private_data,
        })
    }

    /// Connection ends not kept because [`MAX_CONNECTION_EVENTS`] were waiting untaken.
    pub fn connection_events_dropped(&self) -> u64 {
        self.ended_dropped
    }

    /// Keeps a connection event the datapath sent; other notifications are not for
    /// consumers.
    fn note(&mut self, m: Message) {
        let e = match m {
            Message::FlowGone {
                flow_id,
                mpa_error,
                reason,
                terminate,
            } => ConnectionEvent::Ended(ConnectionEnded {
                flow_id,
                mpa_error,
                terminate,
                reason,
            }),
            Message::CmEvent { event } => ConnectionEvent::Cm(event),
            _ => return,
        };
        if self.ended.len() >= MAX_CONNECTION_EVENTS {
            self.ended_dropped += 1;
            return;
        }
        self.ended.push_back(e);
    }

    /// The control socket without waiting: connection ends kept, other notifications
    /// dropped; a closed socket (the datapath went away) is an error.
    pub(super) fn check_socket(&mut self) -> Result<(), ConsumerError> {
        while let Some(m) = self.client.queued_notification() {
            self.note(m);
        }
        loop {
            let mut f = [PollFd::new(self.client.as_fd(), PollFlags::POLLIN)];
            if !matches!(poll(&mut f, PollTimeout::ZERO), Ok(n) if n > 0) {
                return Ok(());
            }
            // Readable: a message or the end of the stream (an error).
            if let Some(m) = self.client.wait_notification(None)? {
                self.note(m);
            }
        }
    }
}
