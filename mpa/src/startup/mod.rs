//! The MPA startup phase (RFC 5044 §7.1; RFC 6581), sans I/O.
//!
//! Two state machines in the manner of quinn-proto, one per role:
//! * [`InitiatorStartup`] sends the MPA Request, then validates the Reply;
//! * [`ResponderStartup`] validates the Request, then answers with a Reply, either by
//!   [`StartupPolicy`] alone ([`ResponderStartup::auto`]) or after the ULP looked at the
//!   Request ([`ResponderStartup::new`], [`StartupEvent::RequestReceived`],
//!   [`ResponderStartup::accept`] / [`ResponderStartup::reject`]).
//!
//! Both are driven the same way: octets in with `handle_input(now, bytes)` (which consumes at
//! most the octets of the one frame it waits for: what follows belongs to Full Operation and
//! to the caller), octets out with `poll_transmit()`, time with `poll_timeout()` and
//! `handle_timeout(now)`, results with `poll_event()`. Time is always passed in.
//!
//! A failure is returned by the call that detects it, is also queued once as
//! [`StartupEvent::Failed`], and is sticky: every later `handle_input` returns it again.
//! [`StartupError::disposition`] says what the caller must do with the TCP connection.

#![forbid(unsafe_code)]

mod initiator;
mod responder;
#[cfg(test)]
mod tests;

// The policy types name these, so the startup API offers them beside the policies.
pub use crate::rtr::{RtrSet, RtrType};
pub use crate::wire::startup::{FrameKind, Rev2Params};
pub use initiator::InitiatorStartup;
pub use responder::ResponderStartup;

use crate::error::{Fault, MpaErrorCode};
use crate::wire::startup::{
    rev2, StartupFrame, StartupFrameError, StartupRepr, ENHANCED_LEN, HEADER_LEN, MAX_PRIVATE_DATA,
};
use std::time::{Duration, Instant};

/// IRD/ORD value meaning "no automatic negotiation; the ULP does it" (RFC 6581 §9.1).
pub const NO_IRD_ORD_NEGOTIATION: u16 = rev2::NO_NEGOTIATION;

/// Which private data a peer may send (RFC 5044 §7.1.2 rules 2, 3 and 6: "private data not
/// acceptable"). Applied to the ULP private data, after any enhanced data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PrivateDataRule {
    /// Any private data.
    #[default]
    AcceptAny,
    /// Private data that begins with these octets.
    RequirePrefix(Vec<u8>),
    /// Private data of at most this many octets.
    MaxLen(usize),
}

impl PrivateDataRule {
    /// Whether `private_data` is acceptable.
    pub fn accepts(&self, private_data: &[u8]) -> bool {
        match self {
            PrivateDataRule::AcceptAny => true,
            PrivateDataRule::RequirePrefix(p) => private_data.starts_with(p),
            PrivateDataRule::MaxLen(n) => private_data.len() <= *n,
        }
    }
}

/// Local policy for the startup phase, for either role.
///
/// CRC: our frames carry C=1 unless an administrator suppressed it; since CRCs are used when
/// either frame has C=1 (RFC 5044 §7.1.1), "CRC required" is always met and needs no knob.
/// Markers: `markers_required` sets M in our frame; the peer MUST then add markers (every
/// sender can), so it cannot refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartupPolicy {
    /// The revision an Initiator sends: 1 (RFC 5044) or 2 (RFC 6581: the Request is enhanced,
    /// S=1, with IRD/ORD and, when `p2p`, RTR negotiation). RFC 6581 §10: an Initiator MUST NOT
    /// use the enhanced format when it wants none of its functions, hence default 1.
    pub revision: u8,
    /// Accept revision 2: a Responder answers enhanced Requests (S=1) enhanced, otherwise
    /// treats them as improperly formatted and closes (RFC 6581 §10); an Initiator accepts a
    /// Reply of revision 2. Revision 1 is always accepted (RFC 6581 §6 Rev: MUST).
    pub accept_rev2: bool,
    /// Accept RDMA Consortium peers (MPA revision 0; RFC 5044 Appendix C): markers both ways,
    /// CRC, and DDP/RDMAP version 0 on that connection. Without it revision 0 is closed.
    pub permissive: bool,
    /// We require markers in the FPDUs we receive (M=1 in our frame).
    pub markers_required: bool,
    /// We add markers toward a peer that requires them. When false, a Request with M=1 is
    /// rejected (R=1) and a Reply with M=1 fails the Initiator (docs/protocol.md: a peer that does
    /// not allow the policy is rejected or closed). RFC 5044 §7.1.1 says every sender MUST be
    /// able to, so clear this only for a datapath that cannot.
    pub markers_tx_allowed: bool,
    /// An administrator turned CRCs off for this path (RFC 5044 §4.4, §7.1.1): our frame says
    /// C=0. CRCs are still used when the peer's frame says C=1.
    pub crc_suppressed_by_admin: bool,
    /// The largest PD_Length we buffer (at most 512 counts). A frame announcing more is
    /// improperly formatted (RFC 5044 §7.1.2 rule 9) and is refused before its private data
    /// is read.
    pub max_private_data: usize,
    /// Which ULP private data of the peer is acceptable.
    pub private_data_rule: PrivateDataRule,
    /// The private data of a Reply that rejects by policy (a reason, e.g. text).
    pub reject_reason: Vec<u8>,
    /// Initiator, revision 2: request the peer-to-peer model (A=1, an RTR indication first).
    pub p2p: bool,
    /// Initiator: the RTR indications we can send (B, C, D of the Request when `p2p`).
    pub rtr_send: RtrSet,
    /// Responder: the RTR indications we can receive (RFC 6581 §9.2: at least one).
    pub rtr_support: RtrSet,
    /// Our IRD: the most inbound RDMA Read Requests we can serve (14 bits; 0x3FFF = the ULP
    /// negotiates).
    pub ird: u16,
    /// Our ORD: the most outbound RDMA Read Requests we want (14 bits; 0x3FFF = the ULP
    /// negotiates).
    pub ord: u16,
    /// Responder: the ORD the ULP needs. A Request whose initiator IRD is below it is rejected,
    /// the Reply's ORD saying what is needed (RFC 6581 §9.1). 0 = no minimum.
    pub required_ord: u16,
    /// How long each wait of the startup phase may last (RFC 5044 §7.1.2 rules 8 and 10).
    pub startup_timeout: Duration,
}

impl Default for StartupPolicy {
    fn default() -> Self {
        StartupPolicy {
            revision: 1,
            accept_rev2: true,
            permissive: false,
            markers_required: false,
            markers_tx_allowed: true,
            crc_suppressed_by_admin: false,
            max_private_data: MAX_PRIVATE_DATA,
            private_data_rule: PrivateDataRule::AcceptAny,
            reject_reason: b"MPA connection rejected by policy".to_vec(),
            p2p: false,
            rtr_send: RtrSet::ALL,
            rtr_support: RtrSet::ALL,
            ird: 8,
            ord: 8,
            required_ord: 0,
            startup_timeout: Duration::from_secs(10),
        }
    }
}

impl StartupPolicy {
    /// Checks the policy is coherent.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if !(1..=2).contains(&self.revision) {
            return Err(PolicyError::Revision(self.revision));
        }
        if self.revision == 2 && !self.accept_rev2 {
            return Err(PolicyError::Rev2NotAccepted);
        }
        if self.p2p && self.revision < 2 {
            return Err(PolicyError::P2pNeedsRev2);
        }
        if self.p2p && self.rtr_send.is_empty() {
            return Err(PolicyError::NoRtrToSend);
        }
        // RFC 6581 §9.2: an enhanced responder MUST support at least one RTR indication.
        if self.accept_rev2 && self.rtr_support_usable().is_empty() {
            return Err(PolicyError::NoRtrSupported);
        }
        for v in [self.ird, self.ord, self.required_ord] {
            if v > rev2::IRD_ORD_MASK {
                return Err(PolicyError::IrdOrdOutOfRange(v));
            }
        }
        let max = self.max_reply_private_data();
        if self.reject_reason.len() > max {
            return Err(PolicyError::RejectReasonTooLong {
                len: self.reject_reason.len(),
                max,
            });
        }
        Ok(())
    }

    /// Our C flag (RFC 5044 §7.1.1 C; §4.4: no CRC only by an administrator's choice).
    fn our_crc(&self) -> bool {
        !self.crc_suppressed_by_admin
    }

    /// The RTR types a Responder can serve: a zero-length Read RTR needs an IRD of at least 1.
    fn rtr_support_usable(&self) -> RtrSet {
        if self.ird == 0 {
            self.rtr_support.without(RtrType::ZeroLengthReadRequest)
        } else {
            self.rtr_support
        }
    }

    /// The most ULP private data a Reply of ours may need to carry.
    fn max_reply_private_data(&self) -> usize {
        if self.accept_rev2 {
            MAX_PRIVATE_DATA - ENHANCED_LEN
        } else {
            MAX_PRIVATE_DATA
        }
    }
}

/// Why a [`StartupPolicy`] is not coherent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// `revision` is neither 1 nor 2.
    #[error("revision {0}: only 1 and 2 can be sent")]
    Revision(u8),
    /// `revision` 2 without `accept_rev2`.
    #[error("revision 2 is sent but not accepted")]
    Rev2NotAccepted,
    /// `p2p` needs `revision` 2.
    #[error("the peer-to-peer model needs revision 2")]
    P2pNeedsRev2,
    /// `p2p` with an empty `rtr_send`.
    #[error("the peer-to-peer model needs at least one RTR type we can send")]
    NoRtrToSend,
    /// `accept_rev2` without a usable RTR type in `rtr_support` (RFC 6581 §9.2).
    #[error("revision 2 needs at least one RTR type we can receive (a Read RTR needs IRD >= 1)")]
    NoRtrSupported,
    /// IRD, ORD or required ORD above 14 bits.
    #[error("IRD/ORD value {0:#x} exceeds 14 bits")]
    IrdOrdOutOfRange(u16),
    /// The reject reason does not fit in a Reply.
    #[error("reject reason of {len} octets exceeds {max}")]
    RejectReasonTooLong {
        /// Octets given.
        len: usize,
        /// Octets that fit.
        max: usize,
    },
}

/// The wait that timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Awaiting {
    /// A Responder waiting for the Request (a Responder/Responder startup looks like this).
    Request,
    /// A Responder waiting for its ULP to accept or reject.
    Decision,
    /// An Initiator waiting for the Reply.
    Reply,
}

/// What the caller must do with the TCP connection after a [`StartupError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Close the TCP connection now and report the error (RFC 5044 §7.1.2 rules 2, 3, 5).
    CloseTcp,
    /// Exit MPA leaving TCP open; the ULP may close it or use it otherwise (RFC 5044 §7.1.2
    /// rule 3).
    LeaveTcpOpen,
    /// Send an RDMAP Terminate (layer 2 LLP, error type 0 MPA, [`StartupError::code`]) as the
    /// first FPDU, framed as [`InitiatorStartup::framing`] says, then close (RFC 6581 §9.1,
    /// §9.2).
    TerminateThenClose,
    /// A local API misuse: nothing happened to the connection.
    Unaffected,
}

/// Why the startup phase failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartupError {
    /// An improperly formatted frame (RFC 5044 §7.1.1, §7.1.2 rules 2, 3, 5, 9).
    #[error("improperly formatted MPA startup frame: {0}")]
    Frame(#[from] StartupFrameError),
    /// An Initiator received a Request: both sides started as Initiator (RFC 5044 §7.1.2
    /// rule 8).
    #[error("received an MPA Request while Initiator (Initiator/Initiator startup)")]
    InitiatorInitiator,
    /// A Responder received a Reply key where the Request belongs.
    #[error("received an MPA Reply while Responder")]
    UnexpectedReply,
    /// PD_Length beyond our private data buffer (RFC 5044 §7.1.2 rule 9).
    #[error("PD_Length {pd_length} exceeds our private data buffer of {buffer} octets")]
    PrivateDataExceedsBuffer {
        /// PD_Length received.
        pd_length: u16,
        /// Our buffer.
        buffer: usize,
    },
    /// A revision we cannot interoperate with (RFC 5044 §7.1.1 Rev; Appendix C).
    #[error("MPA revision {0} not accepted by our policy")]
    RevisionNotAccepted(u8),
    /// An enhanced Request (S=1) while we do not accept revision 2 (RFC 6581 §10).
    #[error("enhanced MPA Request (S=1) but revision 2 is not accepted")]
    EnhancedNotSupported,
    /// The Reply is enhanced although the Request was not, or the reverse (RFC 6581 §10).
    #[error("Reply enhanced = {received} does not answer Request enhanced = {sent}")]
    EnhancedMismatch {
        /// Our Request had S=1.
        sent: bool,
        /// The Reply had S=1.
        received: bool,
    },
    /// The peer requires markers and our policy does not add them.
    #[error("the peer requires markers but our policy does not generate them")]
    MarkersNotAllowed,
    /// The Reply's private data is not acceptable (RFC 5044 §7.1.2 rule 3).
    #[error("the Reply's private data is not acceptable")]
    PrivateDataNotAcceptable,
    /// The Reply's A flag differs from the Request's (RFC 6581 §9.2; error code 7).
    #[error("connection model mismatch: Request A = {requested}, Reply A = {replied}")]
    ConnectionModelMismatch {
        /// Our A.
        requested: bool,
        /// The Reply's A.
        replied: bool,
    },
    /// No RTR indication we can send is supported by the Responder (RFC 6581 §9.2; code 7).
    #[error(
        "no matching RTR option: we can send {can_send:?}, the Responder supports {supported:?}"
    )]
    NoMatchingRtr {
        /// What we can send.
        can_send: RtrSet,
        /// What the Reply offered.
        supported: RtrSet,
    },
    /// The Responder's ORD exceeds the IRD we can provide (RFC 6581 §9.1; code 6).
    #[error("insufficient IRD resources: the Responder's ORD is {required}, our IRD {available}")]
    InsufficientIrd {
        /// The Responder's ORD.
        required: u16,
        /// Our largest IRD.
        available: u16,
    },
    /// A wait ran past [`StartupPolicy::startup_timeout`] (RFC 5044 §7.1.2 rules 8, 10).
    #[error("timed out waiting for the MPA {0:?}")]
    Timeout(Awaiting),
    /// Our private data does not fit in the frame.
    #[error("private data of {len} octets exceeds the {max} that fit")]
    PrivateDataTooLong {
        /// Octets given.
        len: usize,
        /// Octets that fit.
        max: usize,
    },
    /// The policy is not coherent.
    #[error("invalid startup policy: {0}")]
    InvalidPolicy(#[from] PolicyError),
    /// A call that the current state does not allow.
    #[error("{0} is not allowed in the current state")]
    InvalidCall(&'static str),
}

impl StartupError {
    /// Who is at fault.
    pub fn fault(&self) -> Fault {
        match self {
            StartupError::Frame(e) => e.fault(),
            StartupError::UnexpectedReply
            | StartupError::EnhancedMismatch { .. }
            | StartupError::ConnectionModelMismatch { .. } => Fault::PeerMisbehaved,
            StartupError::InitiatorInitiator
            | StartupError::PrivateDataExceedsBuffer { .. }
            | StartupError::RevisionNotAccepted(_)
            | StartupError::EnhancedNotSupported
            | StartupError::MarkersNotAllowed
            | StartupError::PrivateDataNotAcceptable
            | StartupError::NoMatchingRtr { .. }
            | StartupError::InsufficientIrd { .. } => Fault::Incompatible,
            StartupError::Timeout(_) => Fault::Transport,
            StartupError::PrivateDataTooLong { .. }
            | StartupError::InvalidPolicy(_)
            | StartupError::InvalidCall(_) => Fault::LocalMisuse,
        }
    }

    /// The MPA error code reported to the ULP (RFC 5044 §8, RFC 6581 §8). A failed startup is
    /// 4 unless RFC 6581 names a code (6, 7); local misuse is 5, local error.
    pub fn code(&self) -> MpaErrorCode {
        match self {
            StartupError::ConnectionModelMismatch { .. } | StartupError::NoMatchingRtr { .. } => {
                MpaErrorCode::NoMatchingRtr
            }
            StartupError::InsufficientIrd { .. } => MpaErrorCode::InsufficientIrd,
            StartupError::PrivateDataTooLong { .. }
            | StartupError::InvalidPolicy(_)
            | StartupError::InvalidCall(_) => MpaErrorCode::LocalCatastrophic,
            _ => MpaErrorCode::InvalidStartupFrame,
        }
    }

    /// What to do with the TCP connection.
    pub fn disposition(&self) -> Disposition {
        match self {
            // RFC 5044 §7.1.2 rule 3: private data not acceptable → exit MPA, TCP left open.
            StartupError::PrivateDataNotAcceptable => Disposition::LeaveTcpOpen,
            // RFC 6581 §9.1, §9.2: the Initiator MUST send a TERM with code 6 or 7.
            StartupError::ConnectionModelMismatch { .. }
            | StartupError::NoMatchingRtr { .. }
            | StartupError::InsufficientIrd { .. } => Disposition::TerminateThenClose,
            StartupError::PrivateDataTooLong { .. }
            | StartupError::InvalidPolicy(_)
            | StartupError::InvalidCall(_) => Disposition::Unaffected,
            _ => Disposition::CloseTcp,
        }
    }
}

/// Maps a frame error to the role-aware error: a Request at an Initiator is an
/// Initiator/Initiator startup (RFC 5044 §7.1.2 rule 8).
fn frame_error(e: StartupFrameError) -> StartupError {
    match e {
        StartupFrameError::UnexpectedKind {
            found: FrameKind::Request,
            ..
        } => StartupError::InitiatorInitiator,
        StartupFrameError::UnexpectedKind {
            found: FrameKind::Reply,
            ..
        } => StartupError::UnexpectedReply,
        e => StartupError::Frame(e),
    }
}

/// How FPDUs are framed in Full Operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    /// The peer adds markers toward us.
    pub markers_rx: bool,
    /// We add markers toward the peer.
    pub markers_tx: bool,
    /// CRCs generated and checked in both directions.
    pub crc: bool,
    /// DDP and RDMAP header version: 1, or 0 with an RDMA Consortium peer (Appendix C).
    pub ddp_rdmap_version: u8,
}

/// The result of a successful startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The peer's MPA revision, reported to the ULP (RFC 5044 §7.1.1 Rev).
    pub rev: u8,
    /// The peer adds markers in FPDUs toward us.
    pub markers_rx: bool,
    /// We add markers in FPDUs toward the peer.
    pub markers_tx: bool,
    /// CRCs are generated and checked in both directions.
    pub crc: bool,
    /// The peer's ULP private data (after any enhanced data).
    pub peer_private_data: Vec<u8>,
    /// DDP and RDMAP header version: 1, or 0 with a permissive revision-0 peer (Appendix C).
    pub ddp_rdmap_version: u8,
    /// The peer-to-peer model (A=1): the Initiator sends an RTR indication first.
    pub p2p: bool,
    /// Initiator: the RTR indication to send as the very first FPDU, before anything else
    /// (RFC 6581 §5, §9.2). Responder: always `None` (see [`Negotiated::rtr_options`]).
    pub rtr: Option<RtrType>,
    /// The RTR types negotiated: at the Responder those the Initiator may send (our Reply's
    /// B, C, D); at the Initiator those both support. Empty unless `p2p`.
    pub rtr_options: RtrSet,
    /// Our IRD after negotiation (RFC 6581 §9.1); our policy's value when the connection is
    /// not enhanced or IRD is not negotiated (0x3FFF).
    pub ird: u16,
    /// Our ORD after negotiation (RFC 6581 §9.1), likewise.
    pub ord: u16,
    /// The peer's enhanced data as received, for the ULP (RFC 6581 §9.1: MUST pass IRD/ORD).
    pub peer_enhanced: Option<Rev2Params>,
}

impl Negotiated {
    /// How FPDUs are framed.
    pub fn framing(&self) -> Framing {
        Framing {
            markers_rx: self.markers_rx,
            markers_tx: self.markers_tx,
            crc: self.crc,
            ddp_rdmap_version: self.ddp_rdmap_version,
        }
    }

    /// The RTR types the Responder accepts as the Initiator's first FPDU (see
    /// [`Negotiated::rtr_options`]), in preference order.
    pub fn rtr_accepted(&self) -> &'static [RtrType] {
        self.rtr_options.as_slice()
    }
}

/// A validated Request, as shown to the ULP of an explicit [`ResponderStartup`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo {
    /// The Request's revision.
    pub rev: u8,
    /// M: the Initiator requires markers from us.
    pub markers: bool,
    /// C: the Initiator prefers CRCs.
    pub crc: bool,
    /// The enhanced data, if S=1.
    pub enhanced: Option<Rev2Params>,
    /// The ULP private data.
    pub private_data: Vec<u8>,
    /// What accepting will establish (private data of our Reply aside).
    pub negotiated: Negotiated,
}

/// Why a connection was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectCause {
    /// Initiator: the Reply had R=1.
    Peer,
    /// Responder: the ULP called [`ResponderStartup::reject`].
    Ulp,
    /// Responder: the Request's private data failed [`StartupPolicy::private_data_rule`].
    PrivateData,
    /// Responder: the Initiator requires markers and `markers_tx_allowed` is false.
    Markers,
    /// Responder: the initiator IRD is below [`StartupPolicy::required_ord`] (RFC 6581 §9.1).
    InsufficientIrd {
        /// The Request's IRD.
        initiator_ird: u16,
        /// What we need.
        required_ord: u16,
    },
}

/// What a startup state machine reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupEvent {
    /// Responder, explicit mode: a valid, policy-acceptable Request arrived; call
    /// [`ResponderStartup::accept`] or [`ResponderStartup::reject`].
    RequestReceived(RequestInfo),
    /// Full Operation may begin with these parameters. At the Responder the accepting Reply
    /// is waiting in `poll_transmit`; it MUST then receive and validate an FPDU before it
    /// sends any (RFC 5044 §7.1.2 rule 4).
    Established(Negotiated),
    /// The connection was rejected and MPA exited with TCP open (RFC 5044 §7.1.2 rules 2,
    /// 3). `private_data` is the rejecting Reply's private data: the peer's reason at the
    /// Initiator, ours at the Responder (whose Reply waits in `poll_transmit`).
    Rejected {
        /// The Reply's private data.
        private_data: Vec<u8>,
    },
    /// The startup failed; see [`StartupError::disposition`].
    Failed(StartupError),
}

/// Where a startup state machine stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartupState {
    /// Responder: waiting for the Request.
    WaitRequest,
    /// Responder, explicit mode: waiting for `accept` or `reject`.
    WaitDecision,
    /// Initiator: waiting for the Reply.
    WaitReply,
    /// Full Operation: FPDUs from here on.
    FullOperation,
    /// Rejected: MPA exited, TCP open.
    Rejected,
    /// Failed: see the error.
    Failed,
}

/// Reads one startup frame from a byte stream, never past its end, and refuses a bad key or
/// an oversized PD_Length as soon as the header is in, before buffering private data. Holds
/// at most 20 + 512 octets.
#[derive(Debug)]
struct FrameReader {
    expected: FrameKind,
    max_pd: usize,
    buf: Vec<u8>,
}

impl FrameReader {
    fn new(expected: FrameKind, max_private_data: usize) -> Self {
        FrameReader {
            expected,
            max_pd: max_private_data.min(MAX_PRIVATE_DATA),
            buf: Vec::with_capacity(HEADER_LEN),
        }
    }

    /// Octets the frame needs in all, as far as known.
    fn target(&self) -> usize {
        if self.buf.len() < HEADER_LEN {
            HEADER_LEN
        } else {
            StartupFrame::new_unchecked(&self.buf[..]).frame_len()
        }
    }

    /// Takes octets of the frame from `bytes`; returns how many and whether it is complete.
    fn feed(&mut self, bytes: &[u8]) -> Result<(usize, bool), StartupError> {
        let mut taken = 0;
        loop {
            let target = self.target();
            if self.buf.len() >= target {
                return Ok((taken, true));
            }
            let rest = bytes.get(taken..).unwrap_or(&[]);
            let n = (target - self.buf.len()).min(rest.len());
            if n == 0 {
                return Ok((taken, false));
            }
            self.buf.extend_from_slice(rest.get(..n).unwrap_or(&[]));
            taken += n;
            if self.buf.len() == HEADER_LEN {
                self.check_header()?;
            }
        }
    }

    fn check_header(&self) -> Result<(), StartupError> {
        let f = StartupFrame::new_unchecked(&self.buf[..]);
        let key = f.key();
        // RFC 5044 §7.1.2 rule 5: a key that does not match closes the connection; rule 8:
        // the other kind's key reveals Initiator/Initiator.
        match FrameKind::from_key(&key) {
            None => return Err(StartupFrameError::UnknownKey { found: key }.into()),
            Some(found) if found != self.expected => {
                return Err(frame_error(StartupFrameError::UnexpectedKind {
                    expected: self.expected,
                    found,
                }))
            }
            Some(_) => {}
        }
        // RFC 5044 §7.1.1 Rev: MUST check; we fail before waiting for the private data.
        if f.rev() > 2 {
            return Err(StartupFrameError::UnsupportedRevision(f.rev()).into());
        }
        // RFC 5044 §7.1.1 PD_Length and §7.1.2 rule 9: above 512, or above our buffer,
        // the frame is improperly formatted.
        let pd = f.pd_length();
        if usize::from(pd) > MAX_PRIVATE_DATA {
            return Err(StartupFrameError::PdLengthTooLarge(pd).into());
        }
        if usize::from(pd) > self.max_pd {
            return Err(StartupError::PrivateDataExceedsBuffer {
                pd_length: pd,
                buffer: self.max_pd,
            });
        }
        Ok(())
    }

    /// The frame's octets (complete once `feed` said so).
    fn frame(&self) -> &[u8] {
        &self.buf
    }
}

/// `now + timeout`, or no deadline when that overflows.
fn deadline(now: Instant, timeout: Duration) -> Option<Instant> {
    now.checked_add(timeout)
}

fn expired(deadline: Option<Instant>, now: Instant) -> bool {
    deadline.is_some_and(|d| now >= d)
}

/// Fuzz entry point: parses `data` as a Request and as a Reply, and runs both state machines
/// over it in chunks (sized by the first octet), under a few policies. Never panics on any
/// input; the assertions are invariants.
pub fn fuzz_startup(data: &[u8]) {
    let frame = StartupFrame::new_unchecked(data);
    let _ = (
        frame.key(),
        frame.flags(),
        frame.rev(),
        frame.pd_length(),
        frame.private_data(),
    );
    for kind in [FrameKind::Request, FrameKind::Reply] {
        if let Ok(repr) = StartupRepr::parse_expected(&frame, kind) {
            if let Ok(bytes) = repr.to_bytes() {
                let again = StartupFrame::new_unchecked(&bytes[..]);
                assert_eq!(StartupRepr::parse(&again).ok(), Some(repr));
            }
        }
    }
    let chunk = usize::from(data.first().copied().unwrap_or(0) % 41) + 1;
    let policies = [
        StartupPolicy::default(),
        StartupPolicy {
            revision: 2,
            p2p: true,
            permissive: true,
            markers_required: true,
            markers_tx_allowed: false,
            crc_suppressed_by_admin: true,
            max_private_data: 64,
            private_data_rule: PrivateDataRule::RequirePrefix(vec![0]),
            required_ord: 4,
            ird: 0,
            rtr_send: RtrSet::single(RtrType::ZeroLengthReadRequest),
            rtr_support: RtrSet::single(RtrType::ZeroLengthWrite),
            ..StartupPolicy::default()
        },
        StartupPolicy {
            revision: 2,
            p2p: true,
            ..StartupPolicy::default()
        },
    ];
    let now = Instant::now();
    for policy in policies {
        if let Ok(mut i) = InitiatorStartup::new(policy.clone(), b"fuzz".to_vec(), now) {
            let _ = i.poll_transmit();
            fuzz_feed(data, chunk, |b| i.handle_input(now, b));
            while i.poll_event().is_some() {}
            assert!(i.bytes_consumed() <= data.len());
        }
        for explicit in [false, true] {
            let mut r = if explicit {
                ResponderStartup::new(policy.clone(), now)
            } else {
                ResponderStartup::auto(policy.clone(), b"ok".to_vec(), now)
            };
            fuzz_feed(data, chunk, |b| r.handle_input(now, b));
            while let Some(ev) = r.poll_event() {
                if let StartupEvent::RequestReceived(_) = ev {
                    let _ = if data.len() & 1 == 0 {
                        r.accept(data.get(..data.len().min(600)).unwrap_or(&[]).to_vec())
                    } else {
                        r.reject(b"no".to_vec())
                    };
                }
            }
            if let Some(reply) = r.poll_transmit() {
                assert!(reply.len() <= crate::wire::startup::MAX_FRAME_LEN);
            }
            assert!(r.bytes_consumed() <= data.len());
        }
    }
}

fn fuzz_feed(
    data: &[u8],
    chunk: usize,
    mut input: impl FnMut(&[u8]) -> Result<usize, StartupError>,
) {
    let mut off = 0;
    while off < data.len() {
        let end = (off + chunk).min(data.len());
        let piece = data.get(off..end).unwrap_or(&[]);
        match input(piece) {
            Ok(n) => {
                assert!(n <= piece.len());
                if n < piece.len() {
                    // The frame is complete; the rest is not ours.
                    assert_eq!(input(data.get(off + n..).unwrap_or(&[])), Ok(0));
                    return;
                }
            }
            Err(e) => {
                // Sticky.
                assert_eq!(input(piece), Err(e));
                return;
            }
        }
        off = end;
    }
}
