//! The probe's netlink requests: rtnetlink for the link, generic netlink for ethtool, netdev
//! and devlink. Framing and attribute walking are the rust-netlink crates'
//! (`netlink-packet-core`, `-route`, `-generic`); the socket is `netlink-sys`'s, with a
//! receive timeout.
//!
//! Every answer is hostile input: one datagram of at most [`MAX_DATAGRAM`] octets at a time
//! (a larger one is an error, not a larger buffer), at most [`MAX_MESSAGES`] datagrams and
//! messages per request, [`TIMEOUT`] for the whole request, and attributes read only through
//! the checked views of [`attrs`]: a missing, short or overlong attribute reads as absent,
//! never as a panic.

pub(crate) mod attrs;
pub(crate) mod devlink;
pub(crate) mod ethtool;
pub(crate) mod genl;
pub(crate) mod link;
pub(crate) mod netdev;

use netlink_packet_core::{
    NetlinkBuffer, NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkPayload,
    NetlinkSerializable,
};
use netlink_sys::{Socket, SocketAddr};
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;
use std::fmt::Debug;
use std::time::{Duration, Instant};

/// The longest wait for one answer.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(2);
/// The largest datagram read (an ethtool features reply with names is about 12 KiB).
pub(crate) const MAX_DATAGRAM: usize = 256 * 1024;
/// Datagrams read, and messages looked at, for one request before giving up.
pub(crate) const MAX_MESSAGES: usize = 64;

/// Why a request got no usable answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NlError {
    /// The socket could not be made or used.
    #[error("netlink socket: {0}")]
    Socket(std::io::Error),
    /// Nothing came in time.
    #[error("no answer within {} s", TIMEOUT.as_secs())]
    Timeout,
    /// The kernel refused the request.
    #[error("{0}")]
    Kernel(std::io::Error),
    /// A datagram larger than this reader takes.
    #[error("a reply of {0} octets (at most {MAX_DATAGRAM} are read)")]
    TooLarge(usize),
    /// A reply that does not parse.
    #[error("an unreadable reply: {0}")]
    Decode(String),
    /// Only other messages came (or the end of a dump without an answer).
    #[error("no answer among {0} messages")]
    NoAnswer(usize),
    /// A reply without what it must carry.
    #[error("a reply without {0}")]
    Missing(&'static str),
    /// The kernel has no such generic netlink family.
    #[error("the kernel has no {0} generic netlink family")]
    NoFamily(&'static str),
}

impl NlError {
    /// The errno of a refusal by the kernel.
    pub(crate) fn errno(&self) -> Option<i32> {
        match self {
            NlError::Kernel(e) => e.raw_os_error(),
            _ => None,
        }
    }
}

/// One netlink socket of one protocol, talking to the kernel.
pub(crate) struct Conn {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Conn {
    /// A socket of `protocol` (`netlink_sys::constants::NETLINK_ROUTE`, `…_GENERIC`).
    pub(crate) fn open(protocol: isize) -> Result<Conn, NlError> {
        let mut socket = Socket::new(protocol).map_err(NlError::Socket)?;
        socket.bind_auto().map_err(NlError::Socket)?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(NlError::Socket)?;
        // Receives wait for what is left of their request's time (`request`).
        let t = TimeVal::new(TIMEOUT.as_secs() as _, 0);
        setsockopt(&socket, sockopt::SendTimeout, &t).map_err(|e| NlError::Socket(e.into()))?;
        Ok(Conn {
            socket,
            seq: 0,
            buf: Vec::with_capacity(MAX_DATAGRAM),
        })
    }

    /// Sends `payload` as a request (no dump) and returns the kernel's answer to it.
    pub(crate) fn request<I>(&mut self, payload: I) -> Result<I, NlError>
    where
        I: NetlinkSerializable + NetlinkDeserializable + Debug,
    {
        self.seq = self.seq.wrapping_add(1);
        let mut msg = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::InnerMessage(payload),
        );
        msg.header.flags = netlink_packet_core::NLM_F_REQUEST;
        msg.header.sequence_number = self.seq;
        msg.finalize();
        let mut out = vec![0u8; msg.buffer_len()];
        msg.serialize(&mut out);
        self.socket.send(&out, 0).map_err(NlError::Socket)?;
        let deadline = Instant::now() + TIMEOUT;
        let mut seen = 0;
        for _ in 0..MAX_MESSAGES {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(NlError::Timeout);
            }
            // The rest of the request's time, at least a millisecond (0 would wait forever).
            let left = left.max(Duration::from_millis(1));
            let t = TimeVal::new(left.as_secs() as _, left.subsec_micros() as _);
            setsockopt(&self.socket, sockopt::ReceiveTimeout, &t)
                .map_err(|e| NlError::Socket(e.into()))?;
            self.buf.clear();
            let n = match self.socket.recv(&mut self.buf, MSG_TRUNC) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    return Err(NlError::Timeout)
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(NlError::Socket(e)),
            };
            if n > self.buf.len() {
                return Err(NlError::TooLarge(n));
            }
            let mut at = 0;
            while at < n && seen < MAX_MESSAGES {
                seen += 1;
                let rest = &self.buf[at..n];
                let header =
                    NetlinkBuffer::new_checked(rest).map_err(|e| NlError::Decode(e.to_string()))?;
                let len = header.length() as usize;
                // Messages are 4-octet aligned within a datagram.
                at = at.saturating_add(len.div_ceil(4) * 4);
                // The socket is connected to the kernel (port 0), the only sender it takes;
                // a message of another request is skipped unread.
                if header.sequence_number() != self.seq {
                    continue;
                }
                let m = NetlinkMessage::<I>::deserialize(&rest[..len])
                    .map_err(|e| NlError::Decode(e.to_string()))?;
                match m.payload {
                    NetlinkPayload::InnerMessage(i) => return Ok(i),
                    NetlinkPayload::Error(e) => match e.code {
                        // An ACK: the answer, if any, came before it.
                        None => return Err(NlError::NoAnswer(seen)),
                        Some(code) => {
                            // |code| without overflow on i32::MIN from a hostile sender.
                            let errno = i32::try_from(code.get().unsigned_abs()).unwrap_or(0);
                            return Err(NlError::Kernel(std::io::Error::from_raw_os_error(errno)));
                        }
                    },
                    NetlinkPayload::Done(_) => return Err(NlError::NoAnswer(seen)),
                    _ => {}
                }
            }
        }
        Err(NlError::NoAnswer(seen))
    }
}

/// `MSG_TRUNC`: `recv` returns the datagram's whole length, so an overlong one is noticed.
const MSG_TRUNC: i32 = nix::sys::socket::MsgFlags::MSG_TRUNC.bits();
