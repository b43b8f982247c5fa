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
            if let Some(answer) = answer_in(&self.buf[..n], self.seq, &mut seen) {
                return answer;
            }
        }
        Err(NlError::NoAnswer(seen))
    }
}

/// `MSG_TRUNC`: `recv` returns the datagram's whole length, so an overlong one is noticed.
const MSG_TRUNC: i32 = nix::sys::socket::MsgFlags::MSG_TRUNC.bits();

/// The answer to request `seq` in one datagram, if it holds one: the first message of that
/// sequence number that is the reply, a refusal or the end. Messages of other requests are
/// skipped unread; `seen` counts the messages looked at, up to [`MAX_MESSAGES`].
fn answer_in<I: NetlinkDeserializable>(
    datagram: &[u8],
    seq: u32,
    seen: &mut usize,
) -> Option<Result<I, NlError>> {
    let decode = |e: netlink_packet_core::DecodeError| NlError::Decode(e.to_string());
    let mut at = 0;
    while at < datagram.len() && *seen < MAX_MESSAGES {
        *seen += 1;
        let rest = &datagram[at..];
        let header = match NetlinkBuffer::new_checked(rest) {
            Ok(h) => h,
            Err(e) => return Some(Err(decode(e))),
        };
        let len = header.length() as usize;
        // Messages are 4-octet aligned within a datagram.
        at = at.saturating_add(len.div_ceil(4) * 4);
        // The socket is connected to the kernel (port 0), the only sender it takes.
        if header.sequence_number() != seq {
            continue;
        }
        let m = match NetlinkMessage::<I>::deserialize(&rest[..len]) {
            Ok(m) => m,
            Err(e) => return Some(Err(decode(e))),
        };
        match m.payload {
            NetlinkPayload::InnerMessage(i) => return Some(Ok(i)),
            NetlinkPayload::Error(e) => {
                return Some(Err(match e.code {
                    // An ACK: the answer, if any, came before it.
                    None => NlError::NoAnswer(*seen),
                    // |code| without overflow on i32::MIN from a hostile sender.
                    Some(code) => NlError::Kernel(std::io::Error::from_raw_os_error(
                        i32::try_from(code.get().unsigned_abs()).unwrap_or(0),
                    )),
                }));
            }
            NetlinkPayload::Done(_) => return Some(Err(NlError::NoAnswer(*seen))),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::genl::{Ctrl, Msg};
    use super::*;
    use netlink_packet_generic::GenlMessage;

    type Reply = GenlMessage<Msg<Ctrl>>;

    /// A netlink message as the kernel frames it: header, then `payload`, padded to four.
    fn message(kind: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let len = 16 + payload.len() as u32;
        let mut v = Vec::new();
        v.extend_from_slice(&len.to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(&0u16.to_ne_bytes());
        v.extend_from_slice(&seq.to_ne_bytes());
        v.extend_from_slice(&0u32.to_ne_bytes());
        v.extend_from_slice(payload);
        v.resize(v.len().div_ceil(4) * 4, 0);
        v
    }

    /// A generic netlink reply of the controller: command 1, attributes `attrs`.
    fn reply(seq: u32, attrs: &[u8]) -> Vec<u8> {
        let mut p = vec![1, 2, 0, 0];
        p.extend_from_slice(attrs);
        message(0x10, seq, &p)
    }

    fn error(seq: u32, code: i32) -> Vec<u8> {
        let mut p = code.to_ne_bytes().to_vec();
        p.extend_from_slice(&message(0x10, seq, &[])[..16]);
        message(2, seq, &p)
    }

    fn answer(datagram: &[u8], seq: u32) -> Option<Result<Reply, NlError>> {
        answer_in::<Reply>(datagram, seq, &mut 0)
    }

    #[test]
    fn the_reply_to_this_request_after_others() {
        let mut d = reply(6, &[8, 0, 1, 0, 9, 0, 0, 0]);
        d.extend(reply(7, &[8, 0, 1, 0, 16, 0, 0, 0]));
        let r = answer(&d, 7).unwrap().unwrap();
        assert_eq!(r.payload.reply, [8, 0, 1, 0, 16, 0, 0, 0]);
        assert!(answer(&d, 8).is_none(), "no answer to another request");
    }

    #[test]
    fn refusals_and_acks() {
        let e = answer(&error(3, -19), 3).unwrap().unwrap_err();
        assert_eq!(e.errno(), Some(19));
        // The most negative code does not overflow.
        let e = answer(&error(3, i32::MIN), 3).unwrap().unwrap_err();
        assert!(matches!(e, NlError::Kernel(_)), "{e:?}");
        let e = answer(&error(3, 0), 3).unwrap().unwrap_err();
        assert!(matches!(e, NlError::NoAnswer(1)), "{e:?}");
        let e = answer(&message(3, 3, &[0; 4]), 3).unwrap().unwrap_err();
        assert!(matches!(e, NlError::NoAnswer(1)), "{e:?}");
    }

    #[test]
    fn malformed_datagrams_are_errors_not_panics() {
        // A length beyond the datagram, below a header, a datagram shorter than a header.
        let mut long = reply(1, &[]);
        long[0] = 200;
        let mut short = reply(1, &[]);
        short[..4].copy_from_slice(&8u32.to_ne_bytes());
        for d in [long, short, vec![1, 2, 3], vec![0; 15]] {
            assert!(
                matches!(answer(&d, 1), Some(Err(NlError::Decode(_)))),
                "{d:?}"
            );
        }
        // A generic netlink reply without its own header; an error without its code.
        assert!(matches!(
            answer(&message(0x10, 1, &[1, 2]), 1),
            Some(Err(NlError::Decode(_)))
        ));
        assert!(matches!(
            answer(&message(2, 1, &[1, 2]), 1),
            Some(Err(NlError::Decode(_)))
        ));
        assert!(answer(&[], 1).is_none());
    }

    #[test]
    fn messages_looked_at_are_bounded() {
        let many: Vec<u8> = (0..200).flat_map(|_| reply(1, &[])).collect();
        let mut seen = 0;
        assert!(answer_in::<Reply>(&many, 2, &mut seen).is_none());
        assert_eq!(seen, MAX_MESSAGES);
    }
}
