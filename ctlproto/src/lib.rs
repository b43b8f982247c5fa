//! The control-socket protocol spoken between `mpa-control` (connection setup) and
//! `mpa-datapath` over a Unix stream socket. Both sides import this crate only, so the
//! connection-setup process links neither AF_XDP nor libbpf code.
//!
//! Framing: every message is `length (u32 BE) | JSON object`, at most [`MAX_MESSAGE`] octets
//! of JSON. The first message each way is [`Message::Hello`] carrying [`VERSION`]; a peer with
//! another version is refused with [`ErrorCode::Version`]. Every message carries a request id
//! so replies can be matched; datapath notifications use id 0.
#![deny(unsafe_code)]

pub mod capture;
pub mod client;
pub mod consumer;

pub use capture::{CaptureDirection, CapturedFrame};

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::net::SocketAddr;

/// Protocol version. Bump on any incompatible change.
pub const VERSION: u32 = 1;
/// Largest JSON body accepted: statistics of ~10,000 flows (≈330 octets each) fit; the peer
/// is a local process of the same user, the bound only stops runaway lengths.
pub const MAX_MESSAGE: usize = 8 * 1024 * 1024;

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

/// The kernel TCP state read with TCP_REPAIR at freeze time (see ENV.md, hand-over).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpSnapshot {
    /// Our address (the accepted or connected socket's local side).
    pub local: SocketAddr,
    /// The peer's address.
    pub remote: SocketAddr,
    /// Next sequence number we send (TCP_QUEUE_SEQ of the send queue).
    pub snd_nxt: u32,
    /// Next sequence number we expect (TCP_QUEUE_SEQ of the receive queue).
    pub rcv_nxt: u32,
    /// TCP_REPAIR_WINDOW: snd_wl1.
    pub snd_wl1: u32,
    /// TCP_REPAIR_WINDOW: the peer's window as last received, unscaled octets.
    pub snd_wnd: u32,
    /// TCP_REPAIR_WINDOW: max_window.
    pub max_window: u32,
    /// TCP_REPAIR_WINDOW: our receive window, octets.
    pub rcv_wnd: u32,
    /// TCP_REPAIR_WINDOW: rcv_wup (the right edge we advertised is rcv_wup + rcv_wnd).
    pub rcv_wup: u32,
    /// The peer's SYN MSS (TCP_MAXSEG in repair mode).
    pub mss: u16,
    /// Our window shift (tcpi_rcv_wscale), when window scaling was negotiated.
    pub rcv_wscale: Option<u8>,
    /// The peer's window shift (tcpi_snd_wscale).
    pub snd_wscale: Option<u8>,
    /// SACK permitted on this connection.
    pub sack_permitted: bool,
    /// Timestamps: our TSval at freeze and CLOCK_MONOTONIC (ns) when it was read.
    pub timestamps: Option<TsSnapshot>,
    /// Octets still queued for sending (should be empty: the hand-over drains first).
    pub send_queue: Vec<u8>,
    /// Octets received but unread (should be empty).
    pub recv_queue: Vec<u8>,
}

/// Timestamp clock at freeze.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TsSnapshot {
    /// TCP_TIMESTAMP: our TSval clock at freeze.
    pub tsval: u32,
    /// CLOCK_MONOTONIC in nanoseconds, halfway between two reads bracketing TCP_TIMESTAMP.
    pub monotonic_ns: u64,
    /// The peer's last TSval, when known (0 otherwise; Linux accepts TSecr 0).
    pub ts_recent: u32,
}

/// MPA role of this side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// We sent the Request.
    Initiator,
    /// We answer with the Reply.
    Responder,
}

/// What the startup phase agreed, and what the datapath still has to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MpaParams {
    /// Our role.
    pub role: Role,
    /// The peer's revision.
    pub rev: u8,
    /// The peer adds markers toward us.
    pub markers_rx: bool,
    /// We add markers toward the peer.
    pub markers_tx: bool,
    /// CRC both ways.
    pub crc: bool,
    /// DDP/RDMAP version (1, or 0 with an RDMAC peer).
    pub ddp_rdmap_version: u8,
    /// Responder: the accepting Reply frame the datapath sends (with retransmission) so that
    /// its ACK and the first FPDU reach the datapath. Empty for an Initiator.
    pub reply_frame: Vec<u8>,
    /// The RTR the Initiator sends first, or the ones a Responder accepts (names as in
    /// `mpa::startup::RtrType`'s Debug form).
    pub rtr: Vec<String>,
    /// The protection domain whose registered regions the peer's RDMA messages may target
    /// and whose posted receive buffers its Sends use; `None`: no placement (payloads are
    /// only counted and digested).
    #[serde(default)]
    pub pd: Option<u32>,
    /// Without markers toward us: the peer aligns FPDUs with segments (RFC 5044 §5.1), so an
    /// out-of-order segment may be placed when an FPDU header at its start verifies by CRC.
    #[serde(default)]
    pub aligned_sender: bool,
    /// The MPA Request as it travelled (received by a Responder, sent by an Initiator), kept
    /// only so that a capture taken by the datapath can show the startup the kernel carried
    /// (reconstructed frames, see [`CapturedFrame::reconstructed`]). Empty when unknown.
    #[serde(default)]
    pub request_frame: Vec<u8>,
    /// Initiator only: the Reply it received, for the same purpose. Empty otherwise.
    #[serde(default)]
    pub received_reply_frame: Vec<u8>,
}

/// One registered memory region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionInfo {
    /// The STag peers name it by (tagged offset 0 is its first octet).
    pub stag: u32,
    /// Octets.
    pub len: u64,
    /// Protection domain: connections of this domain may use it.
    pub pd: u32,
    /// RDMA Writes from the peer may place into it.
    pub remote_write: bool,
    /// RDMA Read Requests from the peer may read it.
    pub remote_read: bool,
    /// Backed by huge pages (hugetlbfs) rather than ordinary pages.
    pub huge_pages: bool,
}

/// Where posted receive buffers go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PostTarget {
    /// The receive queue of a connection that exists.
    Flow(u64),
    /// The protection domain: buffers wait there and the next connection of the domain takes
    /// all of them at its hand-over (so Sends that arrive right after the startup find them).
    Pd(u32),
}

/// What a completion reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompletionKind {
    /// An RDMA Write message was placed completely (RFC 5040 has no completion for it at
    /// the sink; we report it so that consumers can see data arrive).
    WritePlaced,
    /// An RDMA Read Response message was placed completely.
    ReadResponsePlaced,
    /// A Send (any variant) arrived completely in a posted buffer.
    SendArrived,
}

/// One completed message, delivered in order per connection (RFC 5041 §4.1: after all its
/// segments and all earlier messages were placed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    /// The connection.
    pub flow_id: u64,
    /// What arrived.
    pub kind: CompletionKind,
    /// The region placed into.
    pub stag: u32,
    /// Offset in the region of the message's first octet (tagged: its TO; Send: the posted
    /// buffer's offset).
    pub offset: u64,
    /// Octets of the message.
    pub len: u64,
    /// Send: its MSN; Send with Invalidate: also the STag the peer asked to invalidate.
    pub msn: Option<u32>,
    /// Send with Invalidate variants: the STag named.
    pub invalidate_stag: Option<u32>,
}

/// The wire form of [`Message::Completions`] items: base64 of 40-octet big-endian records
/// `flow_id u64 | offset u64 | len u64 | stag u32 | msn u32 | invalidate_stag u32 | kind u8 |
/// flags u8 (1: msn present, 2: invalidate_stag present) | 2 octets zero`.
pub mod completion_codec {
    use super::{Completion, CompletionKind};
    use serde::{Deserialize, Deserializer, Serializer};

    const RECORD: usize = 40;

    fn kind_code(k: CompletionKind) -> u8 {
        match k {
            CompletionKind::WritePlaced => 0,
            CompletionKind::ReadResponsePlaced => 1,
            CompletionKind::SendArrived => 2,
        }
    }

    /// Packs completions into records.
    pub fn pack(items: &[Completion]) -> Vec<u8> {
        let mut v = Vec::with_capacity(items.len() * RECORD);
        for c in items {
            v.extend_from_slice(&c.flow_id.to_be_bytes());
            v.extend_from_slice(&c.offset.to_be_bytes());
            v.extend_from_slice(&c.len.to_be_bytes());
            v.extend_from_slice(&c.stag.to_be_bytes());
            v.extend_from_slice(&c.msn.unwrap_or(0).to_be_bytes());
            v.extend_from_slice(&c.invalidate_stag.unwrap_or(0).to_be_bytes());
            v.push(kind_code(c.kind));
            v.push(u8::from(c.msn.is_some()) | (u8::from(c.invalidate_stag.is_some()) << 1));
            v.extend_from_slice(&[0, 0]);
        }
        v
    }

    /// Unpacks records; `None` for a length that is not whole records, an unknown kind or
    /// unknown flags.
    pub fn unpack(b: &[u8]) -> Option<Vec<Completion>> {
        if !b.len().is_multiple_of(RECORD) {
            return None;
        }
        let u64_at =
            |r: &[u8], i: usize| u64::from_be_bytes(r[i..i + 8].try_into().unwrap_or([0; 8]));
        let u32_at =
            |r: &[u8], i: usize| u32::from_be_bytes(r[i..i + 4].try_into().unwrap_or([0; 4]));
        b.chunks_exact(RECORD)
            .map(|r| {
                let kind = match r[36] {
                    0 => CompletionKind::WritePlaced,
                    1 => CompletionKind::ReadResponsePlaced,
                    2 => CompletionKind::SendArrived,
                    _ => return None,
                };
                let flags = r[37];
                if flags & !3 != 0 {
                    return None;
                }
                Some(Completion {
                    flow_id: u64_at(r, 0),
                    offset: u64_at(r, 8),
                    len: u64_at(r, 16),
                    stag: u32_at(r, 24),
                    msn: (flags & 1 != 0).then(|| u32_at(r, 28)),
                    invalidate_stag: (flags & 2 != 0).then(|| u32_at(r, 32)),
                    kind,
                })
            })
            .collect()
    }

    /// For `#[serde(with)]`.
    pub fn serialize<S: Serializer>(items: &[Completion], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::capture::base64::encode(&pack(items)))
    }

    /// For `#[serde(with)]`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Completion>, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        crate::capture::base64::decode(&s)
            .and_then(|b| unpack(&b))
            .ok_or_else(|| serde::de::Error::custom("invalid completion records"))
    }
}

/// An RDMAP Terminate's control field (RFC 5040 §4.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminateInfo {
    /// 0 RDMAP, 1 DDP, 2 LLP (MPA).
    pub layer: u8,
    /// Error type.
    pub error_type: u8,
    /// Error code.
    pub error_code: u8,
    /// We sent it (true) or the peer did (false).
    pub sent: bool,
}

/// The whole hand-over of one connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandOver {
    /// The flow the datapath created for this 4-tuple.
    pub flow_id: u64,
    /// Kernel TCP state.
    pub tcp: TcpSnapshot,
    /// MPA state.
    pub mpa: MpaParams,
    /// Next-hop MAC address (from the neighbour table).
    pub next_hop_mac: [u8; 6],
}

/// Error codes in [`Message::Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    /// Incompatible protocol version.
    Version,
    /// The request is not valid (details in the message).
    BadRequest,
    /// No such flow.
    UnknownFlow,
    /// The 4-tuple is already owned.
    FlowExists,
    /// A limit (flows, memory) was reached.
    Limit,
    /// The requester is not allowed.
    Forbidden,
    /// The datapath failed internally.
    Internal,
}

/// Every message of the protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// First message each way.
    Hello {
        /// [`VERSION`].
        version: u32,
        /// Free text: program name and version.
        agent: String,
    },
    /// control → datapath: start steering this 4-tuple; the datapath creates the flow, inserts
    /// it into the XDP `flows` map and holds its packets until the hand-over arrives.
    AdoptFlow {
        /// Request id.
        id: u64,
        /// Our side.
        local: SocketAddr,
        /// The peer.
        remote: SocketAddr,
    },
    /// datapath → control: the flow exists and is steered.
    FlowAdopted {
        /// Request id.
        id: u64,
        /// The flow.
        flow_id: u64,
    },
    /// control → datapath: the frozen kernel state; the datapath now owns the connection.
    HandOver {
        /// Request id.
        id: u64,
        /// The state.
        handover: Box<HandOver>,
    },
    /// datapath → control: hand-over accepted.
    HandedOver {
        /// Request id.
        id: u64,
        /// The flow.
        flow_id: u64,
    },
    /// control → datapath: forget a flow (hand-over failed, or an operator closes it).
    CloseFlow {
        /// Request id.
        id: u64,
        /// The flow.
        flow_id: u64,
    },
    /// datapath → control (id 0): a connection ended; close its frozen socket silently.
    FlowGone {
        /// The flow.
        flow_id: u64,
        /// The MPA error code (RFC 5044 §8), if it ended with one.
        mpa_error: Option<u8>,
        /// Why, in words.
        reason: String,
        /// The Terminate that ended it, either way.
        #[serde(default)]
        terminate: Option<TerminateInfo>,
    },
    /// consumer → datapath: create a registered memory region (memfd; huge pages when the
    /// length is a multiple of 2 MiB and hugetlbfs has room). Answered by
    /// [`Message::RegionCreated`] carrying the memory's file descriptor (SCM_RIGHTS, see
    /// [`read_message_with_fd`]); the region lives until [`Message::DestroyRegion`] (or the
    /// datapath exits), independent of the requesting socket.
    CreateRegion {
        /// Request id.
        id: u64,
        /// Octets (at least 1).
        len: u64,
        /// Protection domain.
        pd: u32,
        /// Allow RDMA Writes from peers.
        remote_write: bool,
        /// Allow RDMA Read Requests from peers.
        remote_read: bool,
    },
    /// datapath → consumer: the region, with its memory's descriptor attached.
    RegionCreated {
        /// Request id.
        id: u64,
        /// The region.
        region: RegionInfo,
    },
    /// consumer → datapath: no further placement into the region (flows that target it get
    /// an invalid-STag Terminate); its memory stays valid for whoever mapped it.
    DestroyRegion {
        /// Request id.
        id: u64,
        /// The region.
        stag: u32,
    },
    /// List regions, all or of one domain.
    ListRegions {
        /// Request id.
        id: u64,
        /// Only this domain.
        pd: Option<u32>,
    },
    /// The regions.
    Regions {
        /// Request id.
        id: u64,
        /// Regions.
        regions: Vec<RegionInfo>,
    },
    /// consumer → datapath: post `count` receive buffers of `len` octets each, back to back in
    /// region `stag` from `offset`, for Sends (QN 0), in MSN order.
    PostRecv {
        /// Request id.
        id: u64,
        /// A connection, or a domain's waiting list.
        target: PostTarget,
        /// Region.
        stag: u32,
        /// Offset of the first buffer.
        offset: u64,
        /// Octets per buffer.
        len: u32,
        /// Buffers.
        count: u32,
    },
    /// consumer → datapath: send this client the completions of the domain's connections
    /// (one subscriber per domain; a new one replaces the old).
    Subscribe {
        /// Request id.
        id: u64,
        /// Domain.
        pd: u32,
    },
    /// datapath → subscriber (id 0): completions, in order per connection. On the wire the
    /// items are one base64 string of packed records ([`completion_codec`]): thousands of
    /// small JSON objects cost more to write and read than the data path spends placing.
    Completions {
        /// Domain.
        pd: u32,
        /// Completions.
        #[serde(with = "completion_codec")]
        items: Vec<Completion>,
    },
    /// Ask for statistics.
    GetStats {
        /// Request id.
        id: u64,
    },
    /// Statistics as a JSON document.
    Stats {
        /// Request id.
        id: u64,
        /// Per queue and per flow counters.
        stats: serde_json::Value,
    },
    /// Start a packet capture for this client (one at a time per datapath): answered by
    /// [`Message::Ok`], then the datapath streams [`Message::Captured`] batches to this client
    /// and ends with [`Message::CaptureDone`] when `duration_ms` passed, `max_bytes` of pcap
    /// output (24-octet file header and 16 octets per record included) were sent, or
    /// [`Message::StopCapture`] came. Bounds: [`capture::check_request`].
    StartCapture {
        /// Request id.
        id: u64,
        /// Only this flow's frames; `None`: every frame the datapath receives or sends.
        flow: Option<u64>,
        /// Bound of the pcap file the frames make, octets.
        max_bytes: u64,
        /// Bound of the capture's duration, milliseconds.
        duration_ms: u64,
        /// Octets kept of each frame.
        snaplen: u32,
    },
    /// End this client's capture now (answered by [`Message::Ok`]; [`Message::CaptureDone`]
    /// follows).
    StopCapture {
        /// Request id.
        id: u64,
    },
    /// datapath → capturing client (id 0): captured frames, in the order each worker saw
    /// them (workers' batches interleave).
    Captured {
        /// The frames.
        frames: Vec<CapturedFrame>,
    },
    /// datapath → capturing client (id 0): the capture ended; nothing of it follows.
    CaptureDone {
        /// Why: "duration", "max_bytes", "stopped", "datapath stopping".
        reason: String,
        /// Frames sent to the client.
        frames: u64,
        /// Frames seen but not sent: worker buffers full, or the client's queue full.
        dropped: u64,
    },
    /// Plain success.
    Ok {
        /// Request id.
        id: u64,
    },
    /// A refused request.
    Error {
        /// Request id (0 when the request could not be parsed).
        id: u64,
        /// What kind of failure.
        code: ErrorCode,
        /// Details.
        message: String,
    },
}

/// Writes one framed message.
pub fn write_message(w: &mut impl Write, msg: &Message) -> Result<(), ProtoError> {
    let body = serde_json::to_vec(msg)?;
    if body.len() > MAX_MESSAGE {
        return Err(ProtoError::TooLarge(body.len()));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// Reads one framed message; [`ProtoError::Closed`] at a clean end of stream.
pub fn read_message(r: &mut impl Read) -> Result<Message, ProtoError> {
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
    let mut body = vec![0u8; n];
    r.read_exact(&mut body)?;
    Ok(serde_json::from_slice(&body)?)
}

/// Writes one framed message with a file descriptor attached to its first octet
/// (SCM_RIGHTS). The reader must use [`read_message_with_fd`].
pub fn write_message_with_fd(
    s: &std::os::unix::net::UnixStream,
    msg: &Message,
    fd: std::os::fd::BorrowedFd<'_>,
) -> Result<(), ProtoError> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    use std::os::fd::AsRawFd;
    let body = serde_json::to_vec(msg)?;
    if body.len() > MAX_MESSAGE {
        return Err(ProtoError::TooLarge(body.len()));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    let fds = [fd.as_raw_fd()];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let first = loop {
        match sendmsg::<()>(
            s.as_raw_fd(),
            &[io::IoSlice::new(&frame)],
            &cmsg,
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
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let mut len = [0u8; 4];
    let mut got = 0usize;
    let mut fd: Option<OwnedFd> = None;
    while got < 4 {
        let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; 4]);
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
                    let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                    if fd.is_none() {
                        fd = Some(owned);
                    }
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
    let mut body = vec![0u8; n];
    let mut r = s;
    r.read_exact(&mut body)?;
    Ok((serde_json::from_slice(&body)?, fd))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn snapshot() -> HandOver {
        HandOver {
            flow_id: 7,
            tcp: TcpSnapshot {
                local: "10.99.0.2:7777".parse().unwrap(),
                remote: "[fd99::1]:40000".parse().unwrap(),
                snd_nxt: u32::MAX,
                rcv_nxt: 5,
                snd_wl1: 4,
                snd_wnd: 65535,
                max_window: 65535,
                rcv_wnd: 131072,
                rcv_wup: 5,
                mss: 1460,
                rcv_wscale: Some(7),
                snd_wscale: Some(9),
                sack_permitted: true,
                timestamps: Some(TsSnapshot {
                    tsval: 123,
                    monotonic_ns: 456,
                    ts_recent: 0,
                }),
                send_queue: vec![],
                recv_queue: vec![1, 2],
            },
            mpa: MpaParams {
                role: Role::Responder,
                rev: 2,
                markers_rx: true,
                markers_tx: false,
                crc: true,
                ddp_rdmap_version: 1,
                reply_frame: b"MPA ID Rep Frame\x40\x01\x00\x00".to_vec(),
                rtr: vec!["ZeroLengthSend".into()],
                pd: Some(3),
                aligned_sender: true,
                request_frame: b"MPA ID Req Frame\x40\x01\x00\x00".to_vec(),
                received_reply_frame: vec![],
            },
            next_hop_mac: [2, 0, 0, 0, 0, 1],
        }
    }

    #[test]
    fn round_trip_every_message() {
        let msgs = vec![
            Message::Hello {
                version: VERSION,
                agent: "t".into(),
            },
            Message::AdoptFlow {
                id: 1,
                local: "1.2.3.4:5".parse().unwrap(),
                remote: "[::1]:6".parse().unwrap(),
            },
            Message::FlowAdopted { id: 1, flow_id: 9 },
            Message::HandOver {
                id: 2,
                handover: Box::new(snapshot()),
            },
            Message::HandedOver { id: 2, flow_id: 9 },
            Message::CloseFlow { id: 3, flow_id: 9 },
            Message::FlowGone {
                flow_id: 9,
                mpa_error: Some(2),
                reason: "CRC".into(),
                terminate: Some(TerminateInfo {
                    layer: 2,
                    error_type: 0,
                    error_code: 2,
                    sent: true,
                }),
            },
            Message::CreateRegion {
                id: 7,
                len: 1 << 20,
                pd: 3,
                remote_write: true,
                remote_read: false,
            },
            Message::RegionCreated {
                id: 7,
                region: RegionInfo {
                    stag: 0x100,
                    len: 1 << 20,
                    pd: 3,
                    remote_write: true,
                    remote_read: false,
                    huge_pages: false,
                },
            },
            Message::DestroyRegion { id: 8, stag: 0x100 },
            Message::ListRegions { id: 9, pd: None },
            Message::Regions {
                id: 9,
                regions: vec![],
            },
            Message::PostRecv {
                id: 10,
                target: PostTarget::Pd(3),
                stag: 0x100,
                offset: 0,
                len: 4096,
                count: 16,
            },
            Message::Subscribe { id: 11, pd: 3 },
            Message::Completions {
                pd: 3,
                items: vec![Completion {
                    flow_id: 1,
                    kind: CompletionKind::SendArrived,
                    stag: 0x100,
                    offset: 4096,
                    len: 100,
                    msn: Some(2),
                    invalidate_stag: None,
                }],
            },
            Message::StartCapture {
                id: 12,
                flow: Some(9),
                max_bytes: 1 << 20,
                duration_ms: 5000,
                snaplen: 128,
            },
            Message::StopCapture { id: 13 },
            Message::Captured {
                frames: vec![
                    CapturedFrame {
                        ts_ns: 1_700_000_000_123_456_789,
                        direction: CaptureDirection::Rx,
                        orig_len: 1514,
                        data: (0..=255).collect(),
                        reconstructed: false,
                    },
                    CapturedFrame {
                        ts_ns: 1,
                        direction: CaptureDirection::Tx,
                        orig_len: 0,
                        data: vec![],
                        reconstructed: true,
                    },
                ],
            },
            Message::CaptureDone {
                reason: "duration".into(),
                frames: 2,
                dropped: 1,
            },
            Message::GetStats { id: 4 },
            Message::Stats {
                id: 4,
                stats: serde_json::json!({"queues": []}),
            },
            Message::Ok { id: 5 },
            Message::Error {
                id: 6,
                code: ErrorCode::UnknownFlow,
                message: "no".into(),
            },
        ];
        let (mut a, mut b) = UnixStream::pair().unwrap();
        for m in &msgs {
            write_message(&mut a, m).unwrap();
        }
        drop(a);
        for m in &msgs {
            assert_eq!(&read_message(&mut b).unwrap(), m);
        }
        assert!(matches!(read_message(&mut b), Err(ProtoError::Closed)));
    }

    #[test]
    fn hand_overs_without_the_startup_frames_still_parse() {
        let mut j = serde_json::to_value(snapshot()).unwrap();
        let mpa = j["mpa"].as_object_mut().unwrap();
        mpa.remove("request_frame");
        mpa.remove("received_reply_frame");
        let h: HandOver = serde_json::from_value(j).unwrap();
        assert!(h.mpa.request_frame.is_empty() && h.mpa.received_reply_frame.is_empty());
    }

    #[test]
    fn malformed_and_oversized_are_refused() {
        let mut buf = Vec::new();
        buf.extend_from_slice(&5u32.to_be_bytes());
        buf.extend_from_slice(b"{\"ty");
        assert!(matches!(
            read_message(&mut &buf[..]),
            Err(ProtoError::Io(_))
        ));
        let mut buf = Vec::new();
        buf.extend_from_slice(&(MAX_MESSAGE as u32 + 1).to_be_bytes());
        assert!(matches!(
            read_message(&mut &buf[..]),
            Err(ProtoError::TooLarge(_))
        ));
        let body = br#"{"type":"hand_over","id":1}"#;
        let mut buf = (body.len() as u32).to_be_bytes().to_vec();
        buf.extend_from_slice(body);
        assert!(matches!(
            read_message(&mut &buf[..]),
            Err(ProtoError::Malformed(_))
        ));
        let body = br#"{"type":"launch_missiles","id":1}"#;
        let mut buf = (body.len() as u32).to_be_bytes().to_vec();
        buf.extend_from_slice(body);
        assert!(matches!(
            read_message(&mut &buf[..]),
            Err(ProtoError::Malformed(_))
        ));
    }

    #[test]
    fn descriptors_travel_with_their_message() {
        use std::io::{Read as _, Seek, SeekFrom, Write as _};
        use std::os::fd::AsFd;
        let (a, b) = UnixStream::pair().unwrap();
        let mut f = tempfile_in_memory();
        f.write_all(b"region").unwrap();
        let m = Message::Ok { id: 1 };
        write_message_with_fd(&a, &m, f.as_fd()).unwrap();
        write_message(&mut &a, &Message::Ok { id: 2 }).unwrap();
        let (got, fd) = read_message_with_fd(&b).unwrap();
        assert_eq!(got, m);
        let mut g = std::fs::File::from(fd.expect("descriptor"));
        g.seek(SeekFrom::Start(0)).unwrap();
        let mut s = String::new();
        g.read_to_string(&mut s).unwrap();
        assert_eq!(s, "region");
        let (got, fd) = read_message_with_fd(&b).unwrap();
        assert_eq!(got, Message::Ok { id: 2 });
        assert!(fd.is_none());
        drop(a);
        assert!(matches!(read_message_with_fd(&b), Err(ProtoError::Closed)));
    }

    fn tempfile_in_memory() -> std::fs::File {
        let p = std::env::temp_dir().join(format!("ctlproto-fd-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        let _ = std::fs::remove_file(&p);
        f
    }

    #[test]
    fn version_mismatch_is_typed() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || {
            write_message(
                &mut b,
                &Message::Hello {
                    version: VERSION + 1,
                    agent: "future".into(),
                },
            )
            .unwrap();
            let _ = read_message(&mut b);
        });
        match handshake(&mut a, "test") {
            Err(ProtoError::Version { theirs }) => assert_eq!(theirs, VERSION + 1),
            other => panic!("{other:?}"),
        }
        t.join().unwrap();
    }

    proptest::proptest! {
        #[test]
        fn completion_records_round_trip(
            v in proptest::collection::vec(
                (proptest::prelude::any::<(u64, u64, u64, u32)>(),
                 proptest::option::of(proptest::prelude::any::<u32>()),
                 proptest::option::of(proptest::prelude::any::<u32>()),
                 0u8..3),
                0..50)
        ) {
            let items: Vec<Completion> = v
                .into_iter()
                .map(|((flow_id, offset, len, stag), msn, invalidate_stag, k)| Completion {
                    flow_id,
                    kind: [
                        CompletionKind::WritePlaced,
                        CompletionKind::ReadResponsePlaced,
                        CompletionKind::SendArrived,
                    ][k as usize],
                    stag,
                    offset,
                    len,
                    msn,
                    invalidate_stag,
                })
                .collect();
            let m = Message::Completions { pd: 1, items };
            let mut buf = Vec::new();
            write_message(&mut buf, &m).unwrap();
            proptest::prop_assert_eq!(read_message(&mut &buf[..]).unwrap(), m);
        }

        #[test]
        fn arbitrary_completion_records_never_panic(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = completion_codec::unpack(&b);
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bodies_never_panic(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let mut buf = (body.len() as u32).to_be_bytes().to_vec();
            buf.extend_from_slice(&body);
            let _ = read_message(&mut &buf[..]);
        }
    }
}
