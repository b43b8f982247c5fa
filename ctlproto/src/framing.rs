//! Framing of the control socket: `length (u32 BE) | JSON`, optionally with one file
//! descriptor attached (SCM_RIGHTS), and the Hello handshake that checks [`VERSION`].

use crate::{Message, MAX_MESSAGE, VERSION};
use std::io::{self, Read, Write};

/// Why a message could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// The socket failed.
    #[error("control socket I/O: {0}")]
    Io(#[from] io::Error),
    /// The peer closed the socket between messages.
    #[error("control socket closed by the peer")]
    Closed,
    /// A length prefix over the limit: the stream cannot be trusted any more.
    #[error("control message of {0} octets exceeds the {MAX_MESSAGE}-octet limit")]
    TooLarge(usize),
    /// A body that is not a valid message.
    #[error("malformed control message: {0}")]
    Malformed(#[from] serde_json::Error),
    /// The peer speaks another version.
    #[error("control protocol version {theirs}, this side speaks {VERSION}")]
    Version {
        /// The peer's version.
        theirs: u32,
    },
}

/// One message framed (length prefix and body), ready to write: what a sender can count in
/// octets before it queues the message.
pub fn encode_message(msg: &Message) -> Result<Vec<u8>, ProtoError> {
    let body = serde_json::to_vec(msg)?;
    if body.len() > MAX_MESSAGE {
        return Err(ProtoError::TooLarge(body.len()));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Writes one framed message.
pub fn write_message(w: &mut impl Write, msg: &Message) -> Result<(), ProtoError> {
    write_frame(w, &encode_message(msg)?)
}

/// Writes a frame made by [`encode_message`].
pub fn write_frame(w: &mut impl Write, frame: &[u8]) -> Result<(), ProtoError> {
    w.write_all(frame)?;
    w.flush()?;
    Ok(())
}

/// Reads one framed message; [`ProtoError::Closed`] at a clean end of stream.
pub fn read_message(r: &mut impl Read) -> Result<Message, ProtoError> {
    Ok(read_message_counted(r)?.0)
}

/// [`read_message`], with the octets the message took on the wire (prefix included).
pub fn read_message_counted(r: &mut impl Read) -> Result<(Message, usize), ProtoError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(ProtoError::Closed),
        Err(e) => return Err(e.into()),
    }
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_MESSAGE {
        return Err(ProtoError::TooLarge(n));
    }
    Ok((serde_json::from_slice(&read_body(r, n)?)?, 4 + n))
}

/// The `n` octets of a body, the buffer grown as they arrive: a peer that announces a large
/// message and sends nothing holds no more than it has sent (a length prefix alone costs
/// [`BODY_CHUNK`] at most).
fn read_body(r: &mut impl Read, n: usize) -> Result<Vec<u8>, ProtoError> {
    let mut body = Vec::with_capacity(n.min(BODY_CHUNK));
    r.take(n as u64).read_to_end(&mut body)?;
    if body.len() < n {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
    }
    Ok(body)
}

/// The buffer a body is read into before its octets arrive.
const BODY_CHUNK: usize = 64 << 10;

/// Writes one framed message with a file descriptor attached to its first octet
/// (SCM_RIGHTS). The reader must use [`read_message_with_fd`].
pub fn write_message_with_fd(
    s: &std::os::unix::net::UnixStream,
    msg: &Message,
    fd: std::os::fd::BorrowedFd<'_>,
) -> Result<(), ProtoError> {
    write_frame_with_fd(s, &encode_message(msg)?, fd)
}

/// [`write_message_with_fd`] of a frame made by [`encode_message`].
pub fn write_frame_with_fd(
    s: &std::os::unix::net::UnixStream,
    frame: &[u8],
    fd: std::os::fd::BorrowedFd<'_>,
) -> Result<(), ProtoError> {
    write_frame_with_fds(s, frame, &[fd])
}

/// A frame made by [`encode_message`] with descriptors attached to its first octet
/// (SCM_RIGHTS, in this order). The reader must use [`read_message_with_fds`].
pub fn write_frame_with_fds(
    s: &std::os::unix::net::UnixStream,
    frame: &[u8],
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> Result<(), ProtoError> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    use std::os::fd::AsRawFd;
    let raw: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let first = loop {
        match sendmsg::<()>(
            s.as_raw_fd(),
            &[io::IoSlice::new(frame)],
            if raw.is_empty() { &[] } else { &cmsg },
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Ok(n) => break n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e).into()),
        }
    };
    let mut w = s;
    w.write_all(&frame[first..])?;
    Ok(())
}

/// Reads one framed message and the descriptor attached to it, if any (see
/// [`write_message_with_fd`]). Use it for every read on a socket that may carry
/// descriptors: a plain read would close them. Descriptors beyond the first are closed.
pub fn read_message_with_fd(
    s: &std::os::unix::net::UnixStream,
) -> Result<(Message, Option<std::os::fd::OwnedFd>), ProtoError> {
    read_message_with_fds(s).map(|(m, fds)| (m, fds.into_iter().next()))
}

/// Descriptors one message carries at most: the kernel's SCM_MAX_FD.
pub const MAX_FDS: usize = 253;

/// Reads one framed message and every descriptor attached to it (at most [`MAX_FDS`]; see
/// [`write_frame_with_fds`]), in order.
pub fn read_message_with_fds(
    s: &std::os::unix::net::UnixStream,
) -> Result<(Message, Vec<std::os::fd::OwnedFd>), ProtoError> {
    read_message_with_fds_counted(s).map(|(m, fds, _)| (m, fds))
}

/// [`read_message_with_fds`], with the octets the message took on the wire (prefix
/// included). Descriptors attached to any octet but the length prefix's are closed by the
/// kernel as the body is read.
pub fn read_message_with_fds_counted(
    s: &std::os::unix::net::UnixStream,
) -> Result<(Message, Vec<std::os::fd::OwnedFd>, usize), ProtoError> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let mut len = [0u8; 4];
    let mut got = 0usize;
    let mut taken: Vec<OwnedFd> = Vec::new();
    while got < 4 {
        let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; MAX_FDS]);
        let mut iov = [io::IoSliceMut::new(&mut len[got..])];
        let msg = match recvmsg::<()>(
            s.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(m) => m,
            // A signal before any octet arrived: wait again (as `read_exact` does).
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e).into()),
        };
        let n = msg.bytes;
        for c in msg.cmsgs().map_err(io::Error::from)? {
            if let ControlMessageOwned::ScmRights(fds) = c {
                for raw in fds {
                    // SAFETY: the kernel just installed `raw` in our table for us (SCM_RIGHTS);
                    // nothing else knows it, so this is its only owner.
                    #[allow(unsafe_code)]
                    taken.push(unsafe { OwnedFd::from_raw_fd(raw) });
                }
            }
        }
        if n == 0 {
            return Err(if got == 0 {
                ProtoError::Closed
            } else {
                io::Error::from(io::ErrorKind::UnexpectedEof).into()
            });
        }
        got += n;
    }
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_MESSAGE {
        return Err(ProtoError::TooLarge(n));
    }
    let mut r = s;
    Ok((
        serde_json::from_slice(&read_body(&mut r, n)?)?,
        taken,
        4 + n,
    ))
}

/// Sends our Hello and checks the peer's.
pub fn handshake<S: Read + Write>(s: &mut S, agent: &str) -> Result<String, ProtoError> {
    write_message(
        s,
        &Message::Hello {
            version: VERSION,
            agent: agent.to_string(),
        },
    )?;
    match read_message(s)? {
        Message::Hello { version, agent } if version == VERSION => Ok(agent),
        Message::Hello { version, .. } => Err(ProtoError::Version { theirs: version }),
        other => Err(ProtoError::Malformed(serde::de::Error::custom(format!(
            "expected hello, got {other:?}"
        )))),
    }
}
