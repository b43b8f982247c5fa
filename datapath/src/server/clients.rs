//! The control server's clients: accepting them (our own user only), a reader and a bounded
//! writer thread per client, and queueing messages to them without ever blocking the control
//! thread on a slow client.

use super::{Incoming, Server};
use crossbeam_channel::Sender;
use mpa_ctl_proto::{read_message, write_message, write_message_with_fd, ErrorCode, Message};
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;

pub(super) struct Client {
    /// To the client's writer thread (bounded): the control thread never blocks on a slow
    /// client.
    out: Sender<Outgoing>,
    pub(super) hello: bool,
    /// The writer thread: it ends once `out` is dropped and the queue is written.
    writer: std::thread::JoinHandle<()>,
}

/// A message for a client, with the region whose descriptor goes along (SCM_RIGHTS).
struct Outgoing(Message, Option<Arc<crate::region::RegionMemory>>);

/// Messages queued for one client before further completions for it are dropped (and
/// counted).
const CLIENT_QUEUE: usize = 65_536;

impl Server {
    pub(super) fn accept(&mut self, in_tx: &Sender<Incoming>) {
        // Linux allocates a socket in every accept(), even one that finds nothing: ask poll()
        // first, since this runs on every turn of the loop (every notification).
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [PollFd::new(self.listener.as_fd(), PollFlags::POLLIN)];
        if !matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0) {
            return;
        }
        loop {
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::warn!(%e, "control accept");
                    return;
                }
            };
            let _ = stream.set_nonblocking(false);
            // Only our own user (or root) may drive the datapath.
            let allowed =
                nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
                    .map(|c| c.uid() == nix::unistd::geteuid().as_raw() || c.uid() == 0)
                    .unwrap_or(false);
            let mut w = match stream.try_clone() {
                Ok(w) => w,
                Err(_) => continue,
            };
            if !allowed {
                let _ = write_message(
                    &mut w,
                    &Message::Error {
                        id: 0,
                        code: ErrorCode::Forbidden,
                        message: "not the datapath's user".into(),
                    },
                );
                continue;
            }
            let id = self.next_client;
            self.next_client += 1;
            let tx = in_tx.clone();
            let mut r = stream;
            std::thread::spawn(move || loop {
                match read_message(&mut r) {
                    Ok(m) => {
                        if tx.send(Incoming::Msg(id, m)).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        tracing::debug!(client = id, %e, "control client gone");
                        let _ = tx.send(Incoming::Gone(id));
                        return;
                    }
                }
            });
            let (out, out_rx) = crossbeam_channel::bounded::<Outgoing>(CLIENT_QUEUE);
            let writer = std::thread::spawn(move || {
                for Outgoing(m, region) in out_rx {
                    let r = match &region {
                        Some(mem) => write_message_with_fd(&w, &m, mem.fd()),
                        None => write_message(&mut w, &m),
                    };
                    if let Err(e) = r {
                        tracing::debug!(client = id, %e, "control client write");
                        return;
                    }
                }
            });
            self.clients.insert(
                id,
                Client {
                    out,
                    hello: false,
                    writer,
                },
            );
        }
    }

    /// Closes every client's queue and waits, until `deadline` at most, for their writers to
    /// send what is queued: a stopping datapath's last words reach its clients.
    pub(super) fn close_clients(&mut self, deadline: std::time::Instant) {
        let writers: Vec<_> = self.clients.drain().map(|(_, c)| c.writer).collect();
        for w in writers {
            while !w.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }

    pub(super) fn reply(&mut self, client: u64, m: Message) {
        self.send_to(client, m, None);
    }

    /// Queues a message for a client; `false` when its queue is full (or it is gone).
    pub(super) fn send_to(
        &mut self,
        client: u64,
        m: Message,
        region: Option<Arc<crate::region::RegionMemory>>,
    ) -> bool {
        let Some(c) = self.clients.get(&client) else {
            return false;
        };
        match c.out.try_send(Outgoing(m, region)) {
            Ok(()) => true,
            Err(crossbeam_channel::TrySendError::Full(_)) => {
                tracing::warn!(client, "control client does not keep up: message dropped");
                false
            }
            Err(crossbeam_channel::TrySendError::Disconnected(_)) => false,
        }
    }
}
