//! A blocking MPA endpoint over any `Read + Write` (normally a kernel `TcpStream`): runs the
//! startup phase for either role, then sends and receives ULPDUs with the negotiated markers
//! and CRC. The reference peer and the software baseline for the datapath.

use crate::decoder::{DecodeError, FpduDecoder, Ulpdu};
use crate::encoder::{EncodeError, FpduEncoder};
use crate::error::MpaErrorCode;
use crate::markers;
use crate::startup::{
    Disposition, InitiatorStartup, Negotiated, ResponderStartup, RtrType, StartupError,
    StartupEvent, StartupPolicy,
};
use crate::wire::ddp::{
    self, queue, terminate_ulpdu, DdpRepr, RdmapOpcode, ReadRequestRepr, TerminateRepr,
    READ_REQUEST_HEADER_LEN,
};
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// Why an endpoint stopped.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The transport failed (error 1).
    #[error("TCP: {0}")]
    Io(#[from] io::Error),
    /// The peer closed the connection (error 1).
    #[error("TCP connection closed by the peer")]
    Closed,
    /// The startup phase failed.
    #[error("startup: {0}")]
    Startup(#[from] StartupError),
    /// The peer rejected the connection (Reply with R=1); its private data often says why.
    #[error("rejected by the peer: {}", String::from_utf8_lossy(private_data))]
    Rejected {
        /// The Reply's private data.
        private_data: Vec<u8>,
    },
    /// We rejected the peer's Request.
    #[error("rejected the peer's Request: {}", String::from_utf8_lossy(reason))]
    RejectedPeer {
        /// The reason sent in the Reply's private data.
        reason: Vec<u8>,
    },
    /// An FPDU failed its checks (errors 2 and 3).
    #[error("FPDU: {0}")]
    Decode(#[from] DecodeError),
    /// A ULPDU could not be framed.
    #[error("framing: {0}")]
    Encode(#[from] EncodeError),
    /// The first FPDU was not a negotiated RTR (RFC 6581 §9.2).
    #[error("first FPDU is not a negotiated RTR indication")]
    BadRtr,
    /// The peer sent a Terminate.
    #[error("peer terminated: layer {layer}, type {error_type}, code {error_code}")]
    Terminated {
        /// Layer.
        layer: u8,
        /// Error type.
        error_type: u8,
        /// Error code.
        error_code: u8,
    },
    /// A Responder may not send before it received its first FPDU (RFC 5044 §7.1.2).
    #[error("a Responder sends no FPDU before it has received one")]
    NotYetAllowed,
    /// A wait ran past its deadline.
    #[error("timed out")]
    Timeout,
}

impl EndpointError {
    /// The MPA error code (RFC 5044 §8, RFC 6581 §8), if one applies.
    pub fn code(&self) -> Option<MpaErrorCode> {
        match self {
            EndpointError::Io(_) | EndpointError::Closed | EndpointError::Timeout => {
                Some(MpaErrorCode::TcpClosed)
            }
            EndpointError::Startup(e) => Some(e.code()),
            EndpointError::Decode(e) => Some(e.code()),
            EndpointError::BadRtr => Some(MpaErrorCode::NoMatchingRtr),
            EndpointError::Terminated {
                error_code,
                layer: 2,
                error_type: 0,
            } => MpaErrorCode::from_code(*error_code),
            _ => None,
        }
    }
}

/// Settings of one endpoint.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// Startup policy.
    pub policy: StartupPolicy,
    /// Private data for our Request (Initiator) or accepting Reply (Responder).
    pub private_data: Vec<u8>,
    /// Effective MSS for FPDU alignment and MULPDU.
    pub emss: usize,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            policy: StartupPolicy::default(),
            private_data: Vec::new(),
            emss: 1448,
        }
    }
}

/// Counters of one endpoint.
#[derive(Debug, Clone, Copy, Default)]
pub struct EndpointStats {
    /// ULPDUs delivered to the caller (RTRs not counted).
    pub ulpdus_rx: u64,
    /// ULPDU octets delivered.
    pub ulpdu_octets_rx: u64,
    /// ULPDUs sent (RTRs not counted).
    pub ulpdus_tx: u64,
    /// ULPDU octets sent.
    pub ulpdu_octets_tx: u64,
}

const READ_CHUNK: usize = 256 * 1024;

/// An MPA connection in Full Operation over a blocking byte stream.
pub struct MpaStream<S: Transport> {
    io: S,
    negotiated: Negotiated,
    enc: FpduEncoder,
    dec: FpduDecoder,
    rbuf: Vec<u8>,
    /// Octets in `rbuf[..rlen]` not yet given to the decoder.
    rlen: usize,
    wbuf: Vec<u8>,
    /// Aligned sending: `wbuf` is cut into segments of whole FPDUs, each at most EMSS.
    /// Wire octets of FPDUs since SeqStart, `wbuf` included.
    wire_tx: u64,
    /// Aligned sending: where the current TCP segment grid starts (a wire offset), ...
    aligned: bool,
    seg_origin: u64,
    /// ... the `wbuf` indices where a short segment ends (written with a record boundary),
    cuts: Vec<usize>,
    /// ... and whether the FPDU sent next ends its segment.
    end_next: bool,
    /// Every FPDU a record (segment) of its own.
    record_per_fpdu: bool,
    emss: usize,
    may_send: bool,
    expect_rtr: bool,
    eof: bool,
    stats: EndpointStats,
    /// Next MSN on the Terminate queue.
    term_msn: u32,
    /// The read timeout set on `io`.
    armed: ArmedTimeout,
}

impl<S: Transport> MpaStream<S> {
    /// Initiator: sends the Request, validates the Reply, and (peer-to-peer, RFC 6581) sends
    /// the negotiated RTR as the first FPDU.
    pub fn connect(mut io: S, cfg: &EndpointConfig) -> Result<Self, EndpointError> {
        let now = Instant::now();
        let mut sm = InitiatorStartup::new(cfg.policy.clone(), cfg.private_data.clone(), now)?;
        while let Some(bytes) = sm.poll_transmit() {
            io.write_all(&bytes)?;
        }
        io.flush()?;
        let mut rbuf = vec![0u8; READ_CHUNK];
        let mut rlen = 0;
        let mut consumed = 0;
        let mut armed = ArmedTimeout::default();
        let negotiated = loop {
            if let Some(ev) = sm.poll_event() {
                match ev {
                    StartupEvent::Established(n) => break n,
                    StartupEvent::Rejected { private_data } => {
                        return Err(EndpointError::Rejected { private_data })
                    }
                    StartupEvent::Failed(e) => return Err(initiator_failed(&mut io, &sm, e)),
                    _ => continue,
                }
            }
            if consumed < rlen {
                match sm.handle_input(Instant::now(), &rbuf[consumed..rlen]) {
                    Ok(n) => consumed += n,
                    Err(e) => return Err(initiator_failed(&mut io, &sm, e)),
                }
                continue;
            }
            let n = read_until(&mut io, &mut armed, &mut rbuf[rlen..], sm.poll_timeout())?;
            match n {
                None => sm.handle_timeout(Instant::now()),
                Some(0) => return Err(EndpointError::Closed),
                Some(n) => rlen += n,
            }
        };
        rbuf.copy_within(consumed..rlen, 0);
        let mut s = Self::full_operation(io, armed, negotiated, rbuf, rlen - consumed, cfg.emss);
        s.may_send = true;
        if let Some(rtr) = s.negotiated.rtr {
            // RFC 6581 §9.2: the Initiator MUST send one of the negotiated RTRs first.
            let ulpdu = rtr_ulpdu(rtr, s.negotiated.ddp_rdmap_version);
            s.send_raw(&[&ulpdu])?;
            s.flush()?;
        }
        Ok(s)
    }

    /// Responder: reads and validates the Request and replies by policy. A rejection sends a
    /// Reply with R=1 and returns [`EndpointError::RejectedPeer`].
    pub fn accept(mut io: S, cfg: &EndpointConfig) -> Result<Self, EndpointError> {
        let mut sm =
            ResponderStartup::auto(cfg.policy.clone(), cfg.private_data.clone(), Instant::now());
        let mut rbuf = vec![0u8; READ_CHUNK];
        let mut rlen = 0;
        let mut consumed = 0;
        let mut armed = ArmedTimeout::default();
        let negotiated = loop {
            while let Some(bytes) = sm.poll_transmit() {
                io.write_all(&bytes)?;
                io.flush()?;
            }
            if let Some(ev) = sm.poll_event() {
                match ev {
                    StartupEvent::Established(n) => {
                        while let Some(bytes) = sm.poll_transmit() {
                            io.write_all(&bytes)?;
                        }
                        io.flush()?;
                        break n;
                    }
                    StartupEvent::Rejected { private_data } => {
                        while let Some(bytes) = sm.poll_transmit() {
                            io.write_all(&bytes)?;
                        }
                        io.flush()?;
                        return Err(EndpointError::RejectedPeer {
                            reason: private_data,
                        });
                    }
                    StartupEvent::Failed(e) => return Err(e.into()),
                    _ => continue,
                }
            }
            if consumed < rlen {
                consumed += sm.handle_input(Instant::now(), &rbuf[consumed..rlen])?;
                continue;
            }
            match read_until(&mut io, &mut armed, &mut rbuf[rlen..], sm.poll_timeout())? {
                None => sm.handle_timeout(Instant::now()),
                Some(0) => return Err(EndpointError::Closed),
                Some(n) => rlen += n,
            }
        };
        rbuf.copy_within(consumed..rlen, 0);
        let mut s = Self::full_operation(io, armed, negotiated, rbuf, rlen - consumed, cfg.emss);
        s.expect_rtr = s.negotiated.p2p;
        Ok(s)
    }

    fn full_operation(
        io: S,
        armed: ArmedTimeout,
        negotiated: Negotiated,
        rbuf: Vec<u8>,
        rlen: usize,
        emss: usize,
    ) -> Self {
        let enc = FpduEncoder::new(negotiated.markers_tx);
        let dec = FpduDecoder::new(negotiated.markers_rx, negotiated.crc);
        MpaStream {
            io,
            negotiated,
            enc,
            dec,
            rbuf,
            rlen,
            wbuf: Vec::with_capacity(64 * 1024),
            wire_tx: 0,
            aligned: false,
            seg_origin: 0,
            cuts: Vec::new(),
            end_next: false,
            record_per_fpdu: false,
            emss,
            may_send: false,
            expect_rtr: false,
            eof: false,
            stats: EndpointStats::default(),
            term_msn: 1,
            armed,
        }
    }

    /// What the startup phase negotiated.
    pub fn negotiated(&self) -> &Negotiated {
        &self.negotiated
    }

    /// The largest ULPDU for one FPDU in one segment (RFC 5044 §5).
    pub fn mulpdu(&self) -> usize {
        markers::mulpdu(self.emss, self.negotiated.markers_tx)
    }

    /// Counters.
    pub fn stats(&self) -> EndpointStats {
        self.stats
    }

    /// The underlying stream.
    pub fn get_ref(&self) -> &S {
        &self.io
    }

    fn send_raw(&mut self, parts: &[&[u8]]) -> Result<(), EndpointError> {
        let before = self.wbuf.len();
        self.enc.encode_parts(parts, &mut self.wbuf)?;
        self.wire_tx += (self.wbuf.len() - before) as u64;
        if (std::mem::take(&mut self.end_next) && self.aligned) || self.record_per_fpdu {
            self.cuts.push(self.wbuf.len());
            self.seg_origin = self.wire_tx;
        }
        if self.wbuf.len() >= 48 * 1024 {
            self.write_out(false)?;
        }
        Ok(())
    }

    /// Queues one ULPDU given as parts (e.g. a DDP header and its payload); whole FPDUs are
    /// written in batches, call [`MpaStream::flush`] to push them out.
    pub fn send_parts(&mut self, parts: &[&[u8]]) -> Result<(), EndpointError> {
        if !self.may_send {
            return Err(EndpointError::NotYetAllowed);
        }
        self.send_raw(parts)?;
        self.stats.ulpdus_tx += 1;
        self.stats.ulpdu_octets_tx += parts.iter().map(|p| p.len() as u64).sum::<u64>();
        Ok(())
    }

    /// Aligned sending (RFC 5044 §5.1) over a TCP that knows nothing of MPA: from now on
    /// whole TCP segments of EMSS octets are written (the rest waits for more data or
    /// [`MpaStream::flush`]), and messages cut with [`MpaStream::aligned_chunk`] fill them
    /// exactly, so Linux (cutting every EMSS octets) starts each segment with an FPDU and a
    /// receiver can place any segment on its own. EMSS must be the connection's MSS.
    pub fn set_aligned(&mut self, on: bool) -> Result<(), EndpointError> {
        self.flush()?;
        self.aligned = on;
        self.seg_origin = self.wire_tx;
        Ok(())
    }

    /// Every FPDU from now on travels in a TCP segment of its own (a record boundary after
    /// each): one system call per FPDU, for tools that want it so (Wireshark's MPA dissector
    /// finds markers only in segments holding one FPDU).
    pub fn set_record_per_fpdu(&mut self, on: bool) -> Result<(), EndpointError> {
        self.flush()?;
        self.record_per_fpdu = on;
        Ok(())
    }

    /// With aligned sending: how many payload octets the next DDP segment of a message
    /// should carry (its header is `header_len` octets, `left` payload octets remain), and
    /// whether it ends the message ([`crate::encoder::exact_fill`]). Send exactly that
    /// segment next.
    pub fn aligned_chunk(&mut self, header_len: usize, left: usize) -> (usize, bool) {
        let used = ((self.wire_tx - self.seg_origin) % self.emss.max(1) as u64) as usize;
        let c = crate::encoder::exact_fill(&self.enc, self.emss, used, header_len, left);
        self.end_next = c.end_segment;
        (c.take, c.last)
    }

    /// Queues one ULPDU.
    pub fn send(&mut self, ulpdu: &[u8]) -> Result<(), EndpointError> {
        self.send_parts(&[ulpdu])
    }

    /// Writes every queued FPDU.
    pub fn flush(&mut self) -> Result<(), EndpointError> {
        self.write_out(true)?;
        self.io.flush()?;
        Ok(())
    }

    /// Writes queued FPDUs: all of them (`all`), or with aligned sending only whole TCP
    /// segments (short ones end with a record boundary) so Linux never sends a partial one
    /// that would shift the grid.
    fn write_out(&mut self, all: bool) -> Result<(), EndpointError> {
        let mut start = 0;
        for cut in std::mem::take(&mut self.cuts) {
            self.io.write_record(&self.wbuf[start..cut])?;
            start = cut;
        }
        let end = if all || !self.aligned {
            self.wbuf.len()
        } else {
            // The last segment boundary in the buffer.
            let wbuf_off = self.wire_tx - self.wbuf.len() as u64;
            let emss = self.emss.max(1) as u64;
            let grid_end = self.seg_origin + (self.wire_tx - self.seg_origin) / emss * emss;
            (grid_end.saturating_sub(wbuf_off) as usize).clamp(start, self.wbuf.len())
        };
        if end > start {
            self.io.write_all(&self.wbuf[start..end])?;
        }
        self.wbuf.drain(..end);
        Ok(())
    }

    /// Sends an RDMAP Terminate carrying an MPA error (layer 2, type 0) and flushes. Allowed
    /// even before the first FPDU arrived: it is the last thing this side sends.
    pub fn send_terminate(&mut self, code: MpaErrorCode) -> Result<(), EndpointError> {
        let t = terminate_ulpdu(code, self.term_msn, self.negotiated.ddp_rdmap_version);
        self.term_msn = self.term_msn.wrapping_add(1);
        self.send_raw(&[&t])?;
        self.flush()
    }

    /// Reads once (blocking, up to `timeout`) and hands every complete ULPDU to `f`. Returns
    /// how many were delivered; `Ok(None)` at a clean end of stream (peer closed between
    /// FPDUs), [`EndpointError::Closed`] when it closed inside an FPDU.
    pub fn recv_with(
        &mut self,
        timeout: Option<Duration>,
        mut f: impl FnMut(Ulpdu<'_>),
    ) -> Result<Option<usize>, EndpointError> {
        if self.rlen == 0 {
            if self.eof {
                return Ok(None);
            }
            let deadline = timeout.map(|t| Instant::now() + t);
            match read_until(&mut self.io, &mut self.armed, &mut self.rbuf, deadline)? {
                None => return Err(EndpointError::Timeout),
                Some(0) => {
                    self.eof = true;
                    return if self.dec.buffered() == 0 {
                        Ok(None)
                    } else {
                        Err(EndpointError::Closed)
                    };
                }
                Some(n) => self.rlen = n,
            }
        }
        let n = self.rlen;
        self.rlen = 0;
        let mut delivered = 0;
        let version = self.negotiated.ddp_rdmap_version;
        let mut chunk = self.dec.feed(&self.rbuf[..n]);
        let mut pending_error = None;
        let mut rtr_reply = false;
        while let Some(r) = chunk.next_ulpdu() {
            let u = match r {
                Ok(u) => u,
                Err(e) => {
                    pending_error = Some(EndpointError::Decode(e));
                    break;
                }
            };
            let mut head = [0u8; ddp::UNTAGGED_HEADER_LEN + READ_REQUEST_HEADER_LEN];
            let hl = u.copy_prefix(&mut head);
            // A Terminate may come first (RFC 6581 §9.2: no matching RTR, code 7).
            if let Ok((
                DdpRepr::Untagged {
                    opcode: RdmapOpcode::Terminate,
                    ..
                },
                off,
            )) = DdpRepr::parse(&head[..hl], version)
            {
                let mut t = [0u8; ddp::UNTAGGED_HEADER_LEN + ddp::TERMINATE_HEADER_LEN];
                let tl = u.copy_prefix(&mut t);
                if let Ok(tr) = TerminateRepr::parse(&t[off.min(tl)..tl]) {
                    pending_error = Some(EndpointError::Terminated {
                        layer: tr.layer,
                        error_type: tr.error_type,
                        error_code: tr.error_code,
                    });
                    break;
                }
            }
            if self.expect_rtr {
                self.expect_rtr = false;
                match check_rtr(
                    &head[..hl],
                    u.len(),
                    version,
                    self.negotiated.rtr_accepted(),
                ) {
                    Some(rtr) => {
                        rtr_reply = rtr == RtrType::ZeroLengthReadRequest;
                        self.may_send = true;
                        continue;
                    }
                    None => {
                        pending_error = Some(EndpointError::BadRtr);
                        break;
                    }
                }
            }
            self.may_send = true;
            self.stats.ulpdus_rx += 1;
            self.stats.ulpdu_octets_rx += u.len() as u64;
            delivered += 1;
            f(u);
        }
        // Drain the chunk so that the decoder keeps a consistent position.
        while chunk.next_ulpdu().is_some() {}
        drop(chunk);
        if let Some(e) = pending_error {
            if let EndpointError::Decode(d) = &e {
                // RFC 5044 §8: for errors 2 and 3 the ULP sends a Terminate, then closes.
                let _ = self.send_terminate(d.code());
            }
            if matches!(e, EndpointError::BadRtr) {
                let _ = self.send_terminate(MpaErrorCode::NoMatchingRtr);
            }
            return Err(e);
        }
        if rtr_reply {
            // A zero-length Read Request RTR is answered by a zero-length Read Response.
            let resp = DdpRepr::Tagged {
                last: true,
                opcode: RdmapOpcode::RdmaReadResponse,
                stag: 0,
                to: 0,
            };
            let mut h = [0u8; ddp::TAGGED_HEADER_LEN];
            resp.emit(&mut h, version);
            self.send_raw(&[&h])?;
            self.flush()?;
        }
        Ok(Some(delivered))
    }

    /// Receives the next batch of ULPDUs into `out` (appended, each one after the other) with
    /// their lengths in `lens`. `Ok(false)` at a clean end of stream.
    pub fn recv_batch(
        &mut self,
        timeout: Option<Duration>,
        out: &mut Vec<u8>,
        lens: &mut Vec<usize>,
    ) -> Result<bool, EndpointError> {
        Ok(self
            .recv_with(timeout, |u| {
                u.extend_vec(out);
                lens.push(u.len());
            })?
            .is_some())
    }

    /// Closes the write side of a TCP stream after flushing.
    pub fn into_inner(mut self) -> Result<S, EndpointError> {
        self.flush()?;
        Ok(self.io)
    }
}

/// Acts on an Initiator's startup failure: for codes 6 and 7 (RFC 6581 §9.1, §9.2) the
/// Terminate goes out as the first FPDU, framed as negotiated, before the connection closes.
fn initiator_failed<S: Transport>(
    io: &mut S,
    sm: &InitiatorStartup,
    e: StartupError,
) -> EndpointError {
    if let Some(fpdu) = startup_failure_terminate(sm, &e) {
        // Best effort: the connection is closing with `e` whatever happens here.
        let _ = io.write_all(&fpdu).and_then(|()| io.flush());
    }
    e.into()
}

/// The Terminate FPDU an Initiator sends when its startup fails with a disposition of
/// "terminate, then close" (codes 6 and 7, RFC 6581 §9.1, §9.2), framed as negotiated; `None`
/// for every other failure.
pub fn startup_failure_terminate(sm: &InitiatorStartup, e: &StartupError) -> Option<Vec<u8>> {
    if e.disposition() != Disposition::TerminateThenClose {
        return None;
    }
    let fr = sm.framing()?;
    let ulpdu = terminate_ulpdu(e.code(), 1, fr.ddp_rdmap_version);
    let mut out = Vec::new();
    FpduEncoder::new(fr.markers_tx)
        .encode(&ulpdu, &mut out)
        .ok()?;
    Some(out)
}

/// A blocking byte stream with read timeouts: what [`MpaStream`] runs over.
pub trait Transport: Read + Write {
    /// Sets the timeout of subsequent reads (`None`: block forever).
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;

    /// Writes octets that end a record: the transport's next octets must not join them in
    /// one segment (Linux TCP: `MSG_EOR`). The default writes them like any others.
    fn write_record(&mut self, buf: &[u8]) -> io::Result<()> {
        self.write_all(buf)
    }
}

impl Transport for std::net::TcpStream {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        std::net::TcpStream::set_read_timeout(self, timeout)
    }
}

impl Transport for std::os::unix::net::UnixStream {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        std::os::unix::net::UnixStream::set_read_timeout(self, timeout)
    }
}

/// The read timeout last set on a transport. Setting it is a system call on a socket; a
/// stream that reads with the same timeout every time (a request-response loop) would pay
/// one per read, as many as the reads themselves. A timeout already set is kept while it
/// ends no later than the caller's deadline and not much earlier (an early end only costs
/// another turn of [`read_until`]'s loop).
#[derive(Debug, Default)]
struct ArmedTimeout {
    /// `None`: not known (nothing set by us yet).
    set: Option<Option<Duration>>,
}

impl ArmedTimeout {
    /// Makes the transport's next read end within `left` (`None`: never).
    fn arm<S: Transport>(&mut self, io: &mut S, left: Option<Duration>) -> io::Result<()> {
        let keep = match (self.set, left) {
            (Some(None), None) => true,
            (Some(Some(set)), Some(left)) => set <= left && set >= left - left / 8,
            _ => false,
        };
        if !keep {
            // A little short of `left`, so that the following calls with about the same
            // time left keep it.
            let t = left.map(|l| l - l / 16);
            io.set_read_timeout(t)?;
            self.set = Some(t);
        }
        Ok(())
    }
}

/// Reads into `buf`, giving up at `deadline`; `Ok(None)` on timeout.
fn read_until<S: Transport>(
    io: &mut S,
    armed: &mut ArmedTimeout,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> Result<Option<usize>, EndpointError> {
    loop {
        let timeout = match deadline {
            None => None,
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => Some(left),
                _ => return Ok(None),
            },
        };
        armed.arm(io, timeout)?;
        match io.read(buf) {
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The STag our zero-length RTRs carry (a zero-length Write's STag, a Read Request's sink and
/// source STags). RFC 5041 §5.3 says a zero-length tagged segment's STag is not checked, but
/// Chelsio T5/T6 hardware refuses any tagged segment with STag 0, so we send 1 as siw does
/// (and never check STag/TO of a zero-length tagged segment ourselves).
pub const RTR_STAG: u32 = 1;

/// The ULPDU of a zero-length RTR indication (RFC 6581 §9.2).
pub fn rtr_ulpdu(rtr: RtrType, version: u8) -> Vec<u8> {
    let repr = match rtr {
        RtrType::ZeroLengthSend => DdpRepr::Untagged {
            last: true,
            opcode: RdmapOpcode::Send,
            inv_stag: 0,
            qn: queue::SEND,
            msn: 1,
            mo: 0,
        },
        RtrType::ZeroLengthWrite => DdpRepr::Tagged {
            last: true,
            opcode: RdmapOpcode::RdmaWrite,
            stag: RTR_STAG,
            to: 0,
        },
        RtrType::ZeroLengthReadRequest => {
            // A Read of 0 octets; both STags non-zero (see RTR_STAG).
            let read = ReadRequestRepr {
                sink_stag: RTR_STAG,
                sink_to: 0,
                size: 0,
                src_stag: RTR_STAG,
                src_to: 0,
            };
            return read.ulpdu(1, version).to_vec();
        }
    };
    let mut v = vec![0u8; repr.header_len()];
    let n = repr.emit(&mut v, version).unwrap_or(0);
    v.truncate(n);
    v
}

/// Which negotiated RTR, if any, the first ULPDU is.
fn check_rtr(head: &[u8], ulpdu_len: usize, version: u8, accepted: &[RtrType]) -> Option<RtrType> {
    classify_rtr(head, ulpdu_len, version).filter(|rtr| accepted.contains(rtr))
}

/// Which zero-length RTR indication (RFC 6581 §9.2), if any, a ULPDU of `ulpdu_len` octets
/// whose first octets are `head` is.
pub fn classify_rtr(head: &[u8], ulpdu_len: usize, version: u8) -> Option<RtrType> {
    let (repr, off) = DdpRepr::parse(head, version).ok()?;
    match repr {
        DdpRepr::Untagged {
            opcode: RdmapOpcode::Send,
            qn: queue::SEND,
            last: true,
            ..
        } if ulpdu_len == off => Some(RtrType::ZeroLengthSend),
        DdpRepr::Tagged {
            opcode: RdmapOpcode::RdmaWrite,
            last: true,
            ..
        } if ulpdu_len == off => Some(RtrType::ZeroLengthWrite),
        DdpRepr::Untagged {
            opcode: RdmapOpcode::RdmaReadRequest,
            qn: queue::READ_REQUEST,
            ..
        } if ulpdu_len == off + READ_REQUEST_HEADER_LEN
            // A zero-length Read: its RDMA Read Message Size (RFC 5040 §4.4) is 0.
            && head
                .get(off..)
                .and_then(|h| ReadRequestRepr::parse(h).ok())
                .is_some_and(|r| r.size == 0) =>
        {
            Some(RtrType::ZeroLengthReadRequest)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chelsio T5/T6 refuse tagged segments with STag 0, even zero-length ones: every RTR we
    /// send names STag 1, and each is recognised as what it is.
    #[test]
    fn rtrs_carry_a_nonzero_stag_and_classify_as_themselves() {
        for rtr in RtrType::ALL {
            let u = rtr_ulpdu(rtr, 1);
            assert_eq!(classify_rtr(&u, u.len(), 1), Some(rtr));
            let (repr, n) = DdpRepr::parse(&u, 1).unwrap();
            match (rtr, repr) {
                (RtrType::ZeroLengthWrite, DdpRepr::Tagged { stag, to, .. }) => {
                    assert_eq!((stag, to, u.len()), (RTR_STAG, 0, n));
                }
                (RtrType::ZeroLengthReadRequest, DdpRepr::Untagged { .. }) => {
                    assert_eq!(u.len() - n, READ_REQUEST_HEADER_LEN);
                    let rr = ReadRequestRepr::parse(&u[n..]).unwrap();
                    assert_eq!(
                        (rr.sink_stag, rr.size, rr.src_stag),
                        (RTR_STAG, 0, RTR_STAG)
                    );
                    // The octets on the wire, as RFC 5040 §4.4 lays them out.
                    assert_eq!(&u[n..n + 4], &RTR_STAG.to_be_bytes(), "sink STag");
                    assert_eq!(&u[n + 12..n + 16], &[0; 4], "read size");
                    assert_eq!(&u[n + 16..n + 20], &RTR_STAG.to_be_bytes(), "source STag");
                }
                (RtrType::ZeroLengthSend, DdpRepr::Untagged { msn, .. }) => {
                    assert_eq!((msn, u.len()), (1, n));
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
