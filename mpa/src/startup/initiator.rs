//! The Initiator: sends the MPA Request, validates the Reply (RFC 5044 §7.1.2 rules 1, 3).

use super::{
    deadline, expired, frame_error, Awaiting, FrameReader, Framing, Negotiated, RejectCause,
    StartupError, StartupEvent, StartupPolicy, StartupState,
};
use crate::rtr::{RtrSet, RtrType};
use crate::wire::startup::{
    rev2, FrameKind, Rev2Params, StartupFrame, StartupRepr, ENHANCED_LEN, MAX_PRIVATE_DATA,
};
use std::collections::VecDeque;
use std::time::Instant;

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Request sent (or waiting in `poll_transmit`), Reply not yet complete.
    WaitReply,
    FullOperation,
    Rejected,
    Failed(StartupError),
}

/// What our Request said.
#[derive(Debug, Clone, Copy)]
struct Sent {
    markers: bool,
    crc: bool,
    enhanced: Option<Rev2Params>,
}

/// The Initiator side of the startup phase.
///
/// ```
/// # use mpa::startup::*;
/// # use std::time::Instant;
/// let now = Instant::now();
/// let mut init = InitiatorStartup::new(StartupPolicy::default(), b"hello".to_vec(), now).unwrap();
/// let request = init.poll_transmit().unwrap();
/// let mut resp = ResponderStartup::auto(StartupPolicy::default(), Vec::new(), now);
/// assert_eq!(resp.handle_input(now, &request), Ok(request.len()));
/// let reply = resp.poll_transmit().unwrap();
/// assert_eq!(init.handle_input(now, &reply), Ok(reply.len()));
/// assert!(matches!(init.poll_event(), Some(StartupEvent::Established(n)) if n.crc));
/// ```
#[derive(Debug)]
pub struct InitiatorStartup {
    policy: StartupPolicy,
    state: State,
    sent: Sent,
    transmit: Option<Vec<u8>>,
    reader: FrameReader,
    deadline: Option<Instant>,
    consumed: usize,
    events: VecDeque<StartupEvent>,
    framing: Option<Framing>,
    peer_enhanced: Option<Rev2Params>,
}

impl InitiatorStartup {
    /// Prepares the Request (RFC 5044 §7.1.2 rule 1) with our ULP `private_data` and starts
    /// the wait for the Reply at `now`.
    ///
    /// Fails on an incoherent policy or private data that does not fit (512 octets, 508
    /// with revision 2).
    pub fn new(
        policy: StartupPolicy,
        private_data: Vec<u8>,
        now: Instant,
    ) -> Result<Self, StartupError> {
        policy.validate()?;
        // RFC 6581 §10: the enhanced format only when its functions are wanted (revision 2).
        let enhanced = (policy.revision >= 2).then_some(Rev2Params {
            peer_to_peer: policy.p2p,
            // RFC 6581 §9.2: B, C, D for each RTR we can send, only with A=1.
            rtr: if policy.p2p {
                policy.rtr_send
            } else {
                RtrSet::EMPTY
            },
            ird: policy.ird,
            ord: policy.ord,
        });
        let max = MAX_PRIVATE_DATA - if enhanced.is_some() { ENHANCED_LEN } else { 0 };
        if private_data.len() > max {
            return Err(StartupError::PrivateDataTooLong {
                len: private_data.len(),
                max,
            });
        }
        let sent = Sent {
            markers: policy.markers_required,
            crc: policy.our_crc(),
            enhanced,
        };
        let request = StartupRepr {
            kind: FrameKind::Request,
            markers: sent.markers,
            crc: sent.crc,
            rejected: false,
            rev: policy.revision,
            enhanced,
            private_data: &private_data,
        }
        .to_bytes()?;
        Ok(InitiatorStartup {
            reader: FrameReader::new(FrameKind::Reply, policy.max_private_data),
            deadline: deadline(now, policy.startup_timeout),
            policy,
            state: State::WaitReply,
            sent,
            transmit: Some(request),
            consumed: 0,
            events: VecDeque::new(),
            framing: None,
            peer_enhanced: None,
        })
    }

    /// The Request, once; nothing after a failure.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        if matches!(self.state, State::Failed(_)) {
            return None;
        }
        self.transmit.take()
    }

    /// Feeds received octets. Consumes at most the rest of the Reply and returns how many
    /// octets it took: anything after the Reply is Full Operation data for the caller. Once
    /// the startup ended (established or rejected) it takes nothing.
    pub fn handle_input(&mut self, now: Instant, bytes: &[u8]) -> Result<usize, StartupError> {
        match &self.state {
            State::Failed(e) => return Err(e.clone()),
            State::FullOperation | State::Rejected => return Ok(0),
            State::WaitReply => {}
        }
        // RFC 5044 §7.1.2 rule 10: the wait for the Reply is bounded.
        if expired(self.deadline, now) {
            return Err(self.fail(StartupError::Timeout(Awaiting::Reply)));
        }
        let (n, complete) = match self.reader.feed(bytes) {
            Ok(r) => r,
            Err(e) => return Err(self.fail(e)),
        };
        self.consumed += n;
        if complete {
            let (mut peer_enhanced, mut framing) = (None, None);
            let result = evaluate(
                &self.policy,
                self.sent,
                self.reader.frame(),
                &mut peer_enhanced,
                &mut framing,
            );
            self.peer_enhanced = peer_enhanced;
            self.framing = framing;
            match result {
                Ok(Outcome::Accepted(negotiated)) => {
                    tracing::debug!(?negotiated, "MPA Initiator: Full Operation");
                    self.state = State::FullOperation;
                    self.events.push_back(StartupEvent::Established(negotiated));
                }
                Ok(Outcome::Rejected(private_data)) => {
                    tracing::debug!("MPA Initiator: rejected by the Responder");
                    self.state = State::Rejected;
                    self.events
                        .push_back(StartupEvent::Rejected { private_data });
                }
                Err(e) => return Err(self.fail(e)),
            }
        }
        Ok(n)
    }

    /// Fails the startup when the wait for the Reply has run past its deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.state == State::WaitReply && expired(self.deadline, now) {
            self.fail(StartupError::Timeout(Awaiting::Reply));
        }
    }

    /// When [`InitiatorStartup::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::WaitReply => self.deadline,
            _ => None,
        }
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<StartupEvent> {
        self.events.pop_front()
    }

    /// Where the startup stands.
    pub fn state(&self) -> StartupState {
        match self.state {
            State::WaitReply => StartupState::WaitReply,
            State::FullOperation => StartupState::FullOperation,
            State::Rejected => StartupState::Rejected,
            State::Failed(_) => StartupState::Failed,
        }
    }

    /// The sticky error, if the startup failed.
    pub fn error(&self) -> Option<&StartupError> {
        match &self.state {
            State::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// Octets consumed by `handle_input` so far: the Reply's length once it is complete.
    pub fn bytes_consumed(&self) -> usize {
        self.consumed
    }

    /// The FPDU framing, known once a valid accepting Reply arrived; with it the caller frames
    /// the Terminate that [`super::Disposition::TerminateThenClose`] asks for.
    pub fn framing(&self) -> Option<Framing> {
        self.framing
    }

    /// The Reply's enhanced data (IRD, ORD, A, B, C, D), accepting or rejecting: RFC 6581 §9.1
    /// says the Initiator MUST pass the Responder's IRD and ORD to the ULP in both cases.
    pub fn peer_enhanced(&self) -> Option<Rev2Params> {
        self.peer_enhanced
    }

    /// Why the startup was rejected: always [`RejectCause::Peer`] for an Initiator.
    pub fn reject_cause(&self) -> Option<RejectCause> {
        (self.state == State::Rejected).then_some(RejectCause::Peer)
    }

    fn fail(&mut self, e: StartupError) -> StartupError {
        tracing::debug!(error = %e, "MPA Initiator: startup failed");
        self.state = State::Failed(e.clone());
        self.transmit = None;
        self.events.push_back(StartupEvent::Failed(e.clone()));
        e
    }
}

enum Outcome {
    Accepted(Negotiated),
    Rejected(Vec<u8>),
}

/// Validates a complete Reply against what we sent and our policy; records the Reply's
/// enhanced data and the framing as soon as they are known, for the caller's Terminate.
fn evaluate(
    policy: &StartupPolicy,
    sent: Sent,
    frame: &[u8],
    peer_enhanced: &mut Option<Rev2Params>,
    framing_out: &mut Option<Framing>,
) -> Result<Outcome, StartupError> {
    // RFC 5044 §7.1.2 rule 3: the Initiator MUST receive and validate the Reply; key (rule 5),
    // PD_Length (rule 9) and Rev (§7.1.1) checks happen in the parser.
    let f = StartupFrame::new_checked(frame)?;
    let reply = StartupRepr::parse_expected(&f, FrameKind::Reply).map_err(frame_error)?;
    *peer_enhanced = reply.enhanced;
    // RFC 5044 §7.1.1 Rev: a revision we cannot interoperate with closes; Appendix C: a
    // permissive implementation talks to revision-0 (RDMA Consortium) peers.
    let rdmac = match reply.rev {
        0 if policy.permissive => true,
        1 => false,
        2 if policy.accept_rev2 => false,
        r => return Err(StartupError::RevisionNotAccepted(r)),
    };
    // RFC 5044 §7.1.2 rule 3: R=1 → exit MPA, TCP left open.
    if reply.rejected {
        return Ok(Outcome::Rejected(reply.private_data.to_vec()));
    }
    // RFC 6581 §10: an enhanced Request MUST get an enhanced Reply, an unenhanced one an
    // unenhanced Reply.
    if reply.enhanced.is_some() != sent.enhanced.is_some() {
        return Err(StartupError::EnhancedMismatch {
            sent: sent.enhanced.is_some(),
            received: reply.enhanced.is_some(),
        });
    }
    let framing = if rdmac {
        // Appendix C.2.5: an RDMAC peer means version 0, markers and CRC.
        Framing {
            markers_rx: true,
            markers_tx: true,
            crc: true,
            ddp_rdmap_version: 0,
        }
    } else {
        Framing {
            // RFC 5044 §7.1.1 M: our M asks markers toward us; the Reply's M toward the
            // Responder, and with M=0 markers MUST NOT be added.
            markers_rx: sent.markers,
            markers_tx: reply.markers,
            // RFC 5044 §7.1.1 C: CRCs iff either frame has C=1.
            crc: sent.crc || reply.crc,
            ddp_rdmap_version: 1,
        }
    };
    *framing_out = Some(framing);
    if framing.markers_tx && !policy.markers_tx_allowed {
        return Err(StartupError::MarkersNotAllowed);
    }
    // RFC 5044 §7.1.2 rule 3: private data not acceptable → exit MPA, TCP left open.
    if !policy.private_data_rule.accepts(reply.private_data) {
        return Err(StartupError::PrivateDataNotAcceptable);
    }
    let mut negotiated = Negotiated {
        rev: reply.rev,
        markers_rx: framing.markers_rx,
        markers_tx: framing.markers_tx,
        crc: framing.crc,
        peer_private_data: reply.private_data.to_vec(),
        ddp_rdmap_version: framing.ddp_rdmap_version,
        p2p: false,
        rtr: None,
        rtr_options: RtrSet::EMPTY,
        ird: policy.ird,
        ord: policy.ord,
        peer_enhanced: reply.enhanced,
    };
    if let (Some(ours), Some(theirs)) = (sent.enhanced, reply.enhanced) {
        negotiate_enhanced(policy, ours, theirs, &mut negotiated)?;
    }
    Ok(Outcome::Accepted(negotiated))
}

/// RFC 6581 §9.1 (IRD/ORD) and §9.2 (connection model and RTR) at the Initiator.
fn negotiate_enhanced(
    policy: &StartupPolicy,
    ours: Rev2Params,
    theirs: Rev2Params,
    n: &mut Negotiated,
) -> Result<(), StartupError> {
    // §9.2: the Responder MUST answer A with the same A; otherwise no compatible model (7).
    if ours.peer_to_peer != theirs.peer_to_peer {
        return Err(StartupError::ConnectionModelMismatch {
            requested: ours.peer_to_peer,
            replied: theirs.peer_to_peer,
        });
    }
    // §9.1: our ORD at most the Responder's IRD, unchanged when it says 0x3FFF.
    let mut ord = if theirs.ird == rev2::NO_NEGOTIATION || policy.ord == rev2::NO_NEGOTIATION {
        policy.ord
    } else {
        policy.ord.min(theirs.ird)
    };
    // §9.1: our IRD at least the Responder's ORD, unchanged when it says 0x3FFF; lacking the
    // resources, a TERM with code 6.
    if theirs.ord != rev2::NO_NEGOTIATION
        && policy.ird != rev2::NO_NEGOTIATION
        && theirs.ord > policy.ird
    {
        return Err(StartupError::InsufficientIrd {
            required: theirs.ord,
            available: policy.ird,
        });
    }
    let ird = policy.ird;
    let mut rtr = None;
    let mut options = RtrSet::EMPTY;
    if ours.peer_to_peer {
        // §9.2: the Initiator MUST send one of the negotiated RTRs; none → TERM code 7.
        options = theirs.rtr.intersection(policy.rtr_send);
        if theirs.ird == 0 {
            // A zero-length Read Request needs an inbound read slot at the Responder.
            options = options.without(RtrType::ZeroLengthReadRequest);
        }
        let Some(t) = options.first() else {
            return Err(StartupError::NoMatchingRtr {
                can_send: policy.rtr_send,
                supported: theirs.rtr,
            });
        };
        if t == RtrType::ZeroLengthReadRequest && ord == 0 {
            // The Read RTR is itself an outbound RDMA Read.
            ord = 1;
        }
        rtr = Some(t);
    }
    n.p2p = ours.peer_to_peer;
    n.rtr = rtr;
    n.rtr_options = options;
    n.ird = ird;
    n.ord = ord;
    Ok(())
}
