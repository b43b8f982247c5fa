//! `mpa-peer listen`: the blocking kernel-TCP Responder (accept, the startup phase, then
//! ULPDUs digested and classified, one thread per connection). With `--advertise` each
//! connection has its region in memory (`sink.rs`): RDMA Writes are placed, Read Requests
//! answered (`read.rs`), and a violation gets its Terminate before the connection closes.
//! With `--echo` every complete RDMA Write is written back to the Initiator (`echo.rs`).

use super::*;
use crate::echo::{Echo, EchoError};
use crate::interval::{self, Meter};
use crate::read::{answer_all, head_of};
use crate::sink::{Sink, Violation, DEFAULT_IRD, MAX_REGION_LEN};
use mpa::startup::{PrivateDataRule, NO_IRD_ORD_NEGOTIATION};
use mpa::wire::ddp::terminate_ulpdu_for_segment;
use std::io::Read;

/// What each connection's region is (from `--advertise` and its companions).
#[derive(Clone, Copy)]
struct SinkConfig {
    ad: RegionAd,
    remote_read: bool,
    fill_pattern: bool,
    /// `--echo`: Writes are echoed, every `corrupt_every`-th one flipped (0: none).
    echo: Option<u64>,
}

/// Serves connections; returns whether all ended without error.
pub(crate) fn listen(mut a: ListenArgs) -> anyhow::Result<bool> {
    let mut private_data = Vec::new();
    if let Some(ad) = &mut a.advertise {
        ad.base_to = a.base_to;
        ad.check().context("--base-to")?;
        if ad.len > MAX_REGION_LEN {
            crate::usage!(
                "--advertise: a region of {} octets is more than the {MAX_REGION_LEN} octets \
                 (1 GiB) the listener keeps in memory per connection",
                ad.len
            );
        }
        private_data.extend_from_slice(&ad.emit());
    }
    let sink = a.advertise.map(|ad| SinkConfig {
        ad,
        remote_read: a.remote_read,
        fill_pattern: a.fill_pattern,
        echo: a.echo.then_some(a.echo_corrupt_every),
    });
    private_data.extend_from_slice(a.private_data.as_deref().unwrap_or("").as_bytes());
    let mut cfg = config(&a.common, private_data, 2)?;
    if a.echo {
        // An Initiator that advertises no region has nowhere to receive the echoes: reject
        // its Request (its private data must start with the advertisement's magic) so that
        // both sides learn why at once, instead of after its first Write.
        cfg.policy.private_data_rule = PrivateDataRule::RequirePrefix(region_ad::MAGIC.to_vec());
        cfg.policy.reject_reason = EchoError::NoAdvertisement.to_string().into_bytes();
    }
    let region = a.advertise.as_ref().map(RegionReport::from);
    let listener = TcpListener::bind(a.bind).with_context(|| format!("bind {}", a.bind))?;
    // Tests and scripts read the bound address (with --bind ...:0) from this line.
    eprintln!("mpa-peer: listening on {}", listener.local_addr()?);
    let (tx, rx) = mpsc::channel::<bool>();
    let mut started = 0u64;
    let timeout = Duration::from_secs(a.common.timeout);
    while a.connections == 0 || started < a.connections {
        let (sock, peer) = accept_within(&listener, a.accept_timeout)?;
        started += 1;
        let cfg = cfg.clone();
        let tx = tx.clone();
        let interval = a.interval;
        std::thread::spawn(move || {
            let mut report = serve(sock, peer, &cfg, timeout, sink, interval);
            report.region = region;
            let ok = report.error.is_none();
            emit(&report);
            if let Some(e) = &report.error {
                eprintln!("mpa-peer: {peer}: {e}");
            }
            if mpa_cli::out::closed() {
                // Nobody reads the reports any more (`listen … | head -1`): end as a
                // command killed by SIGPIPE would, without its noise.
                std::process::exit(if ok { 0 } else { 1 });
            }
            let _ = tx.send(ok);
        });
    }
    drop(tx);
    // Wait for every connection thread, not just the first failure.
    Ok(rx.iter().filter(|ok| !ok).count() == 0)
}

/// The next connection, waiting at most `secs` seconds (0: no limit).
fn accept_within(listener: &TcpListener, secs: u64) -> anyhow::Result<(TcpStream, SocketAddr)> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    if secs > 0 {
        let deadline = std::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                anyhow::bail!("no connection within --accept-timeout {secs} s");
            }
            let ms = PollTimeout::try_from(left.as_millis().clamp(1, 60_000) as u64)
                .unwrap_or(PollTimeout::MAX);
            let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, ms) {
                Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
                Ok(_) => break,
                Err(e) => return Err(e).context("poll on the listener"),
            }
        }
    }
    listener.accept().context("accept")
}

/// Why a connection ended early.
enum ServeError {
    /// A protocol or I/O error from the endpoint (or the peer's Terminate).
    Mpa(EndpointError),
    /// The peer broke a DDP/RDMAP rule of the region, or a Write cannot be echoed: we sent
    /// its Terminate.
    Fault(Fault),
}

/// What stops placement and ends the connection with a Terminate.
#[derive(Debug, thiserror::Error)]
enum Fault {
    #[error(transparent)]
    Sink(#[from] Violation),
    #[error(transparent)]
    Echo(#[from] EchoError),
}

impl Fault {
    fn terminate(&self) -> TerminateRepr {
        match self {
            Fault::Sink(v) => v.terminate(),
            Fault::Echo(e) => e.terminate(),
        }
    }

    fn carries_rdma_header(&self) -> bool {
        matches!(self, Fault::Sink(v) if v.carries_rdma_header())
    }
}

impl From<EndpointError> for ServeError {
    fn from(e: EndpointError) -> Self {
        ServeError::Mpa(e)
    }
}

/// Untagged Sends on QN 0 (RFC 5040 §5.3): messages (L set) and payload octets.
#[derive(Default)]
struct SendCount {
    messages: u64,
    octets: u64,
}

impl SendCount {
    fn add(&mut self, head: &[u8], len: usize, version: u8) {
        if let Ok((
            DdpRepr::Untagged {
                opcode:
                    RdmapOpcode::Send
                    | RdmapOpcode::SendWithInvalidate
                    | RdmapOpcode::SendWithSolicitedEvent
                    | RdmapOpcode::SendWithSolicitedEventAndInvalidate,
                qn: queue::SEND,
                last,
                ..
            },
            off,
        )) = DdpRepr::parse(head, version)
        {
            self.octets += (len - off) as u64;
            self.messages += u64::from(last);
        }
    }
}

fn serve(
    sock: TcpStream,
    peer: SocketAddr,
    cfg: &EndpointConfig,
    timeout: Duration,
    sink_cfg: Option<SinkConfig>,
    interval: Option<Duration>,
) -> Report {
    let t0 = Instant::now();
    let mut report = Report {
        peer: peer.to_string(),
        ..Report::default()
    };
    let _ = sock.set_nodelay(true);
    if sink_cfg.is_some_and(|c| c.echo.is_some()) {
        // Echoes are written while the Initiator waits for them: bound that wait too.
        let _ = sock.set_write_timeout(Some(timeout));
    }
    let mut cfg = cfg.clone();
    // Read Responses are cut at the connection's MULPDU, which follows its MSS.
    if let Ok(mss) = nix::sys::socket::getsockopt(&sock, nix::sys::socket::sockopt::TcpMaxSeg) {
        if mss >= 128 {
            cfg.emss = mss as usize;
        }
    }
    let mut digest = 0u32;
    let mut op: Option<&'static str> = None;
    let mut sends = SendCount::default();
    let mut sink: Option<Sink> = None;
    let mut echo: Option<Echo> = None;
    let mut reads_served = 0u64;
    let mut meter: Option<Meter> = None;
    let mut received = 0u64;
    let r = (|| -> Result<(), ServeError> {
        let mut s = MpaStream::accept(sock, &cfg)?;
        meter = interval.map(|every| Meter::new(peer.to_string(), every, Instant::now()));
        report.negotiated(s.negotiated());
        let neg = s.negotiated();
        // An Initiator's region advertisement (`connect --op pingpong`): reported apart from
        // the private data after it.
        if let Ok(Some(ad)) = RegionAd::parse(&neg.peer_private_data) {
            report.peer_region = Some(RegionReport::from(&ad));
            report.private_data = Some(
                String::from_utf8_lossy(&neg.peer_private_data[region_ad::LEN..]).into_owned(),
            );
        }
        let version = neg.ddp_rdmap_version;
        // RFC 6581 §9.1: the IRD revision 2 negotiated, else a fixed bound.
        let ird = if neg.peer_enhanced.is_some() && neg.ird != NO_IRD_ORD_NEGOTIATION {
            neg.ird
        } else {
            DEFAULT_IRD
        };
        let sink = &mut sink;
        *sink = sink_cfg.map(|c| Sink::new(&c.ad, c.remote_read, c.fill_pattern, ird));
        let echo = &mut echo;
        *echo = sink_cfg.and_then(|c| {
            c.echo
                .map(|every| Echo::new(&c.ad, &neg.peer_private_data, every))
        });
        loop {
            let mut fault = None;
            let n = s.recv_with(Some(timeout), |u| {
                let (head, k) = head_of(&u);
                let this = classify(&head[..k], version);
                op = match op {
                    None => Some(this),
                    Some(o) if o == this => Some(o),
                    Some(_) => Some("mixed"),
                };
                for p in u.pieces() {
                    digest = crc32c_append(digest, p);
                }
                received += u.len() as u64;
                sends.add(&head[..k], u.len(), version);
                // After a violation nothing more is placed or answered.
                if let (Some(sk), None) = (sink.as_mut(), &fault) {
                    let placed = sk
                        .on_ulpdu(&head[..k], u.len(), version, u.pieces())
                        .map_err(Fault::from)
                        .and_then(|()| match echo.as_mut() {
                            Some(e) => e
                                .on_ulpdu(&head[..k], u.len(), version, u.pieces())
                                .map_err(Fault::from),
                            None => Ok(()),
                        });
                    if let Err(f) = placed {
                        fault = Some((f, head, k, u.len()));
                    }
                }
            })?;
            if let Some(m) = meter.as_mut() {
                interval::print(m.tick(Instant::now(), received));
            }
            if let Some(sk) = sink.as_mut() {
                // The Read Requests and Writes before a violation are still answered and
                // echoed, in order.
                let answered = answer_all(&mut s, sk)?;
                reads_served += answered;
                let mut echoed = 0;
                for w in echo.as_mut().map(Echo::take_ready).unwrap_or_default() {
                    crate::echo::send(&mut s, &w)?;
                    echoed += 1;
                }
                // At once: the Initiator of a ping-pong waits for the echo (TCP_NODELAY is
                // set, nothing batches it).
                if answered + echoed > 0 {
                    s.flush()?;
                }
            }
            if let Some((f, head, k, len)) = fault {
                let st = s.stats();
                report.ulpdus = st.ulpdus_rx;
                report.ulpdu_bytes = st.ulpdu_octets_rx;
                // RFC 5040 Figure 10: the DDP header always, the Read Request's RDMA header
                // (HdrCt R) only with a Remote Protection Error.
                let hdr_len = if f.carries_rdma_header() {
                    k
                } else {
                    k.min(UNTAGGED_HEADER_LEN)
                };
                let term =
                    terminate_ulpdu_for_segment(f.terminate(), 1, version, len, &head[..hdr_len]);
                s.send(&term)?;
                s.flush()?;
                close_after_terminate(s.get_ref(), timeout);
                return Err(ServeError::Fault(f));
            }
            if n.is_none() {
                break;
            }
        }
        let st = s.stats();
        report.ulpdus = st.ulpdus_rx;
        report.ulpdu_bytes = st.ulpdu_octets_rx;
        Ok(())
    })();
    if let Some(m) = meter.as_mut() {
        interval::print(m.finish(Instant::now(), received));
    }
    match r {
        Ok(()) => {}
        Err(ServeError::Mpa(e)) => report.fail(&e),
        Err(ServeError::Fault(f)) => report.terminated(f.terminate(), &f),
    }
    if let Some(e) = &echo {
        report.echoes = Some(e.echoes());
        // Also when no Write came to need it: an --echo connection needs the advertisement.
        if let (Err(why), None) = (e.target(), &report.error) {
            report.error = Some(why.to_string());
        }
    }
    report.op = op;
    report.ulpdu_digest = format!("{digest:08x}");
    report.sends = Some(sends.messages);
    report.send_octets = Some(sends.octets);
    if let Some(sk) = &sink {
        let st = sk.stats();
        report.writes = Some(st.writes);
        report.write_octets = Some(st.write_octets);
        report.region_digest = Some(format!("{:08x}", sk.digest()));
        report.region_pattern_ok = Some(st.pattern_mismatches == 0);
        report.reads_served = Some(reads_served);
    }
    report.seconds = t0.elapsed().as_secs_f64();
    report
}

/// After our Terminate: FIN, then read and drop what the peer still sends until it closes
/// (at most `timeout`), so that closing with unread octets does not reset the connection
/// and destroy the Terminate before the peer has read it.
fn close_after_terminate(sock: &TcpStream, timeout: Duration) {
    let _ = sock.shutdown(std::net::Shutdown::Write);
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 64 * 1024];
    let mut sock = sock;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || sock.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match sock.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// What a received ULPDU is, from its first octets: "write" (tagged RDMA Write), "send"
/// (untagged Send on QN 0), "read" (RDMA Read Request on QN 1) or "other".
fn classify(head: &[u8], version: u8) -> &'static str {
    match DdpRepr::parse(head, version) {
        Ok((
            DdpRepr::Tagged {
                opcode: RdmapOpcode::RdmaWrite,
                ..
            },
            _,
        )) => "write",
        Ok((
            DdpRepr::Untagged {
                opcode: RdmapOpcode::Send,
                qn: queue::SEND,
                ..
            },
            _,
        )) => "send",
        Ok((
            DdpRepr::Untagged {
                opcode: RdmapOpcode::RdmaReadRequest,
                qn: queue::READ_REQUEST,
                ..
            },
            _,
        )) => "read",
        _ => "other",
    }
}
