//! The Initiator side of connection setup: connect with a kernel socket, send the MPA Request,
//! validate the Reply, and hand the quiet connection to the datapath, which then sends the
//! negotiated RTR indication (peer-to-peer, RFC 6581 §9.2) as the first FPDU.

use crate::datapath_client::DatapathClient;
use crate::freeze::FrozenSocket;
use crate::handover::{hand_over, read_frame_step, FrameRead, Placement, StartupWire};
use crate::setup_error::SetupError;
use mpa::startup::{InitiatorStartup, Negotiated, StartupError, StartupEvent, StartupPolicy};
use mpa::wire::startup::MAX_FRAME_LEN;
use mpa_ctl_proto::{Message, Role};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

/// What happened to one outgoing connection.
#[derive(Debug)]
pub enum InitiatorOutcome {
    /// The datapath owns the connection; keep `frozen` until it reports the flow gone.
    HandedOver {
        /// The datapath's flow.
        flow_id: u64,
        /// The kernel socket, frozen; dropping it closes it silently.
        frozen: FrozenSocket,
        /// What was negotiated (`rtr`: the indication the datapath sent first).
        negotiated: Negotiated,
    },
    /// The Responder rejected our Request (Reply with R=1); the socket is closed and the
    /// datapath never heard of the connection.
    Rejected {
        /// The Reply's private data: usually the reason.
        reason: Vec<u8>,
    },
}

/// Connects to `to` (bounded by `policy.startup_timeout`), runs the Initiator startup with
/// our ULP `private_data`, and hands the connection to the datapath.
///
/// Errors: a startup failure whose disposition is
/// `Disposition::TerminateThenClose` (codes 6 and 7) first sends the Terminate through the
/// kernel socket, framed as the Reply negotiated; the connection then closes.
pub fn connect_and_hand_over(
    to: SocketAddr,
    policy: StartupPolicy,
    private_data: Vec<u8>,
    placement: impl Into<Placement>,
    dp: &mut DatapathClient,
) -> Result<InitiatorOutcome, SetupError> {
    let sock = connect_tcp(None, to, policy.startup_timeout)?;
    start_and_hand_over_on(sock, policy, private_data, placement.into(), dp)
}

/// A TCP connection to `to` from `local` (`None`: the kernel's choice), within `timeout`.
pub fn connect_tcp(
    local: Option<SocketAddr>,
    to: SocketAddr,
    timeout: std::time::Duration,
) -> std::io::Result<TcpStream> {
    let Some(local) = local else {
        return TcpStream::connect_timeout(&to, timeout);
    };
    use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, SockaddrStorage};
    use std::os::fd::AsFd;
    let family = if to.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
    let fd = socket::socket(family, SockType::Stream, flags, None)?;
    use std::os::fd::AsRawFd;
    socket::bind(fd.as_raw_fd(), &SockaddrStorage::from(local))?;
    match socket::connect(fd.as_raw_fd(), &SockaddrStorage::from(to)) {
        Ok(()) => {}
        Err(nix::errno::Errno::EINPROGRESS) => {
            let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
            let mut fds = [nix::poll::PollFd::new(
                fd.as_fd(),
                nix::poll::PollFlags::POLLOUT,
            )];
            if nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms))? == 0 {
                return Err(std::io::ErrorKind::TimedOut.into());
            }
            let err = socket::getsockopt(&fd, socket::sockopt::SocketError)?;
            if err != 0 {
                return Err(std::io::Error::from_raw_os_error(err));
            }
        }
        Err(e) => return Err(e.into()),
    }
    let s = TcpStream::from(fd);
    s.set_nonblocking(false)?;
    Ok(s)
}

/// The Initiator startup with our ULP `private_data` on the connected `sock`, and the
/// hand-over (see [`connect_and_hand_over`]).
pub fn start_and_hand_over_on(
    sock: TcpStream,
    policy: StartupPolicy,
    private_data: Vec<u8>,
    placement: Placement,
    dp: &mut DatapathClient,
) -> Result<InitiatorOutcome, SetupError> {
    let sm = InitiatorStartup::new(policy, private_data, Instant::now())?;
    // The Reply is the peer's last segment to the kernel before the hand-over: watch our
    // port before the Request goes out, so that its TSval is recorded (docs/environment.md,
    // "Why TS.Recent must be inherited"); a refusal only costs that.
    let port = sock.local_addr()?.port();
    let watched = match dp.request(|id| Message::WatchPort { id, port }) {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(port, %e, "local port not watched: the hand-over starts with TS.Recent unknown");
            false
        }
    };
    let r = start_and_hand_over(sock, sm, placement, dp);
    if watched {
        let _ = dp.request(|id| Message::UnwatchPort { id, port });
    }
    r
}

/// The startup on the connected `sock`, then the hand-over.
fn start_and_hand_over(
    mut sock: TcpStream,
    mut sm: InitiatorStartup,
    placement: Placement,
    dp: &mut DatapathClient,
) -> Result<InitiatorOutcome, SetupError> {
    // The Request in one segment: no reason to wait for more.
    sock.set_nodelay(true)?;
    let mut sent = Vec::new();
    while let Some(request) = sm.poll_transmit() {
        sock.write_all(&request)?;
        sent.extend_from_slice(&request);
    }
    sock.flush()?;
    // Read exactly the Reply: a Responder sends nothing before our first FPDU, but whatever
    // follows the Reply would belong to the datapath, so it is never consumed here.
    let mut frame: Vec<u8> = Vec::with_capacity(MAX_FRAME_LEN);
    let negotiated = loop {
        if let Some(ev) = sm.poll_event() {
            match ev {
                StartupEvent::Established(n) => break n,
                StartupEvent::Rejected { private_data } => {
                    let _ = sock.shutdown(std::net::Shutdown::Both);
                    return Ok(InitiatorOutcome::Rejected {
                        reason: private_data,
                    });
                }
                StartupEvent::Failed(e) => return Err(failed(&mut sock, &sm, e)),
                StartupEvent::RequestReceived(_) => continue,
            }
        }
        let Some(deadline) = sm.poll_timeout() else {
            return Err(SetupError::Closed);
        };
        match read_frame_step(&mut sock, &mut frame, deadline)? {
            FrameRead::Octets(n) => {
                // Errors also arrive as a Failed event, which acts on the disposition.
                let _ = sm.handle_input(Instant::now(), &frame[frame.len() - n..]);
            }
            FrameRead::TimedOut => sm.handle_timeout(Instant::now()),
            FrameRead::Interrupted => {}
        }
    };
    sock.set_read_timeout(None)?;
    // RFC 6581 §9.2: the datapath sends this RTR as the very first FPDU.
    let rtr = negotiated.rtr.into_iter().collect();
    let wire = StartupWire {
        reply_to_send: Vec::new(),
        request: sent,
        // `frame` holds exactly the Reply (see frame_want).
        reply_received: frame,
    };
    let (flow_id, frozen) =
        hand_over(sock, dp, Role::Initiator, &negotiated, wire, rtr, placement)?;
    Ok(InitiatorOutcome::HandedOver {
        flow_id,
        frozen,
        negotiated,
    })
}

/// Acts on a startup failure: for codes 6 and 7 (RFC 6581 §9.1, §9.2) the Terminate goes out
/// as the first FPDU, framed as negotiated, before the socket closes (as `mpa::endpoint`).
fn failed(sock: &mut TcpStream, sm: &InitiatorStartup, e: StartupError) -> SetupError {
    if let Some(fpdu) = mpa::endpoint::startup_failure_terminate(sm, &e) {
        // Best effort: the connection is closing with `e` whatever happens here.
        let _ = sock.write_all(&fpdu).and_then(|()| sock.flush());
    }
    let _ = sock.shutdown(std::net::Shutdown::Both);
    e.into()
}
