//! The Responder: validates the MPA Request, answers with a Reply (RFC 5044 §7.1.2 rule 2).

use super::{
    deadline, expired, frame_error, Awaiting, FrameReader, Negotiated, RejectCause, RequestInfo,
    StartupError, StartupEvent, StartupPolicy, StartupState,
};
use crate::rtr::{RtrSet, RtrType};
use crate::wire::startup::{
    rev2, FrameKind, Rev2Params, StartupFrame, StartupRepr, ENHANCED_LEN, MAX_PRIVATE_DATA,
};
use std::collections::VecDeque;
use std::time::Instant;

/// The Reply we will send, private data aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReplyPlan {
    rev: u8,
    markers: bool,
    crc: bool,
    enhanced: Option<Rev2Params>,
}

impl ReplyPlan {
    fn max_private_data(&self) -> usize {
        MAX_PRIVATE_DATA
            - if self.enhanced.is_some() {
                ENHANCED_LEN
            } else {
                0
            }
    }

    fn emit(&self, rejected: bool, private_data: &[u8]) -> Result<Vec<u8>, StartupError> {
        let max = self.max_private_data();
        if private_data.len() > max {
            return Err(StartupError::PrivateDataTooLong {
                len: private_data.len(),
                max,
            });
        }
        Ok(StartupRepr {
            kind: FrameKind::Reply,
            markers: self.markers,
            crc: self.crc,
            rejected,
            rev: self.rev,
            enhanced: self.enhanced,
            private_data,
        }
        .to_bytes()?)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    WaitRequest,
    /// Explicit mode: the Request passed the policy; the ULP decides.
    WaitDecision {
        plan: ReplyPlan,
        negotiated: Negotiated,
    },
    FullOperation,
    Rejected,
    Failed(StartupError),
}

/// The Responder side of the startup phase.
#[derive(Debug)]
pub struct ResponderStartup {
    policy: StartupPolicy,
    /// `Some` in auto mode: the private data of an accepting Reply.
    auto_reply: Option<Vec<u8>>,
    state: State,
    reader: FrameReader,
    deadline: Option<Instant>,
    consumed: usize,
    transmit: Option<Vec<u8>>,
    events: VecDeque<StartupEvent>,
    reject_cause: Option<RejectCause>,
}

impl ResponderStartup {
    /// Explicit mode: after a valid Request that our policy accepts, reports
    /// [`StartupEvent::RequestReceived`] and waits for [`ResponderStartup::accept`] or
    /// [`ResponderStartup::reject`]. Requests the policy refuses are rejected at once with
    /// [`StartupPolicy::reject_reason`]. The wait for the Request starts at `now`.
    ///
    /// An incoherent policy leaves the machine failed with [`StartupError::InvalidPolicy`].
    pub fn new(policy: StartupPolicy, now: Instant) -> Self {
        Self::with_mode(policy, None, now)
    }

    /// Auto mode: the policy decides alone; an accepting Reply carries `reply_private_data`,
    /// a rejecting one [`StartupPolicy::reject_reason`].
    ///
    /// An incoherent policy, or private data that cannot fit in a Reply (over 508 octets when
    /// revision 2 is accepted, 512 otherwise), leaves the machine failed.
    pub fn auto(policy: StartupPolicy, reply_private_data: Vec<u8>, now: Instant) -> Self {
        Self::with_mode(policy, Some(reply_private_data), now)
    }

    fn with_mode(policy: StartupPolicy, auto_reply: Option<Vec<u8>>, now: Instant) -> Self {
        let mut s = ResponderStartup {
            reader: FrameReader::new(FrameKind::Request, policy.max_private_data),
            deadline: deadline(now, policy.startup_timeout),
            policy,
            auto_reply,
            state: State::WaitRequest,
            consumed: 0,
            transmit: None,
            events: VecDeque::new(),
            reject_cause: None,
        };
        if let Err(e) = s.policy.validate() {
            s.fail(e.into());
        } else if let Some(pd) = &s.auto_reply {
            let max = s.policy.max_reply_private_data();
            if pd.len() > max {
                s.fail(StartupError::PrivateDataTooLong { len: pd.len(), max });
            }
        }
        s
    }

    /// Feeds received octets. Consumes at most the rest of the Request and returns how many
    /// octets it took; once the Request is complete it takes nothing more.
    pub fn handle_input(&mut self, now: Instant, bytes: &[u8]) -> Result<usize, StartupError> {
        match &self.state {
            State::Failed(e) => return Err(e.clone()),
            State::WaitRequest => {}
            State::WaitDecision { .. } | State::FullOperation | State::Rejected => return Ok(0),
        }
        // RFC 5044 §7.1.2 rule 8: a Responder SHOULD time out waiting for the Request.
        if expired(self.deadline, now) {
            return Err(self.fail(StartupError::Timeout(Awaiting::Request)));
        }
        let (n, complete) = match self.reader.feed(bytes) {
            Ok(r) => r,
            Err(e) => return Err(self.fail(e)),
        };
        self.consumed += n;
        if complete {
            if let Err(e) = self.on_request() {
                return Err(self.fail(e));
            }
        }
        Ok(n)
    }

    fn on_request(&mut self) -> Result<(), StartupError> {
        // RFC 5044 §7.1.2 rule 2: the Request MUST be received and validated; key (rule 5),
        // PD_Length (rule 9) and Rev (§7.1.1) are checked by the parser.
        let f = StartupFrame::new_checked(self.reader.frame())?;
        let request = StartupRepr::parse_expected(&f, FrameKind::Request).map_err(frame_error)?;
        let decision = decide(&self.policy, &request)?;
        match decision {
            Decision::Reject { plan, cause } => {
                let reason = self.policy.reject_reason.clone();
                self.send_reject(plan, cause, reason)
            }
            Decision::Accept { plan, negotiated } => match self.auto_reply.take() {
                Some(pd) => self.send_accept(plan, negotiated, &pd),
                None => {
                    self.events
                        .push_back(StartupEvent::RequestReceived(RequestInfo {
                            rev: request.rev,
                            markers: request.markers,
                            crc: request.crc,
                            enhanced: request.enhanced,
                            private_data: request.private_data.to_vec(),
                            negotiated: negotiated.clone(),
                        }));
                    self.state = State::WaitDecision { plan, negotiated };
                    Ok(())
                }
            },
        }
    }

    /// Explicit mode: accepts the Request with a Reply (R=0) carrying `private_data`
    /// (RFC 5044 §7.1.2 rule 2). Queues the Reply and [`StartupEvent::Established`].
    ///
    /// Errors without changing anything when not waiting for a decision or when the private
    /// data does not fit (512 octets; 508 in an enhanced Reply).
    pub fn accept(&mut self, private_data: Vec<u8>) -> Result<(), StartupError> {
        let (plan, negotiated) = match &self.state {
            State::WaitDecision { plan, negotiated } => (*plan, negotiated.clone()),
            State::Failed(e) => return Err(e.clone()),
            _ => return Err(StartupError::InvalidCall("accept")),
        };
        self.send_accept(plan, negotiated, &private_data)
    }

    /// Explicit mode: rejects the Request with a Reply (R=1) carrying `reason` as private data
    /// (RFC 5044 §7.1.2 rules 2, 6). Queues the Reply and [`StartupEvent::Rejected`].
    ///
    /// Errors without changing anything when not waiting for a decision or when the reason
    /// does not fit.
    pub fn reject(&mut self, reason: Vec<u8>) -> Result<(), StartupError> {
        let plan = match &self.state {
            State::WaitDecision { plan, .. } => *plan,
            State::Failed(e) => return Err(e.clone()),
            _ => return Err(StartupError::InvalidCall("reject")),
        };
        self.send_reject(plan, RejectCause::Ulp, reason)
    }

    fn send_accept(
        &mut self,
        plan: ReplyPlan,
        negotiated: Negotiated,
        private_data: &[u8],
    ) -> Result<(), StartupError> {
        let reply = plan.emit(false, private_data)?;
        tracing::debug!(?negotiated, "MPA Responder: accepting, Full Operation");
        self.transmit = Some(reply);
        self.state = State::FullOperation;
        self.events.push_back(StartupEvent::Established(negotiated));
        Ok(())
    }

    fn send_reject(
        &mut self,
        plan: ReplyPlan,
        cause: RejectCause,
        reason: Vec<u8>,
    ) -> Result<(), StartupError> {
        let reply = plan.emit(true, &reason)?;
        tracing::debug!(?cause, "MPA Responder: rejecting");
        self.transmit = Some(reply);
        self.state = State::Rejected;
        self.reject_cause = Some(cause);
        self.events.push_back(StartupEvent::Rejected {
            private_data: reason,
        });
        Ok(())
    }

    /// The Reply, once it is decided; nothing after a failure.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        if matches!(self.state, State::Failed(_)) {
            return None;
        }
        self.transmit.take()
    }

    /// Fails the startup when the wait for the Request, or for the ULP's decision, has run
    /// past its deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        if !expired(self.deadline, now) {
            return;
        }
        match self.state {
            State::WaitRequest => {
                self.fail(StartupError::Timeout(Awaiting::Request));
            }
            State::WaitDecision { .. } => {
                self.fail(StartupError::Timeout(Awaiting::Decision));
            }
            _ => {}
        }
    }

    /// When [`ResponderStartup::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::WaitRequest | State::WaitDecision { .. } => self.deadline,
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
            State::WaitRequest => StartupState::WaitRequest,
            State::WaitDecision { .. } => StartupState::WaitDecision,
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

    /// Octets consumed by `handle_input` so far: the Request's length once it is complete.
    pub fn bytes_consumed(&self) -> usize {
        self.consumed
    }

    /// Why we rejected, once we did.
    pub fn reject_cause(&self) -> Option<RejectCause> {
        self.reject_cause
    }

    fn fail(&mut self, e: StartupError) -> StartupError {
        tracing::debug!(error = %e, "MPA Responder: startup failed");
        self.state = State::Failed(e.clone());
        self.transmit = None;
        self.events.push_back(StartupEvent::Failed(e.clone()));
        e
    }
}

enum Decision {
    Accept {
        plan: ReplyPlan,
        negotiated: Negotiated,
    },
    Reject {
        plan: ReplyPlan,
        cause: RejectCause,
    },
}

/// Decides the Reply to a valid Request by policy.
fn decide(policy: &StartupPolicy, req: &StartupRepr<'_>) -> Result<Decision, StartupError> {
    // RFC 5044 §7.1.1 Rev: a revision we cannot interoperate with closes. RFC 6581 §6 Rev: a
    // host accepting revision 2 MUST still accept 1. §10: an enhanced Request to a Responder
    // without revision 2 is improperly formatted. Appendix C: revision 0 only when permissive.
    let rdmac = match (req.rev, req.enhanced.is_some()) {
        (0, _) if policy.permissive => true,
        (1, _) => false,
        (2, _) if policy.accept_rev2 => false,
        (2, true) => return Err(StartupError::EnhancedNotSupported),
        (r, _) => return Err(StartupError::RevisionNotAccepted(r)),
    };
    let our_max_rev = if policy.accept_rev2 { 2 } else { 1 };
    // Appendix C.2.4: answer an RDMAC peer with revision 0, M=1, C=1. Otherwise never a
    // revision above the Request's, which some Initiators refuse.
    let rev = if rdmac { 0 } else { req.rev.min(our_max_rev) };
    let (markers_rx, markers_tx) = if rdmac {
        (true, true)
    } else {
        // RFC 5044 §7.1.1 M: the Request's M asks markers from us; our M asks them toward us.
        (policy.markers_required, req.markers)
    };
    // RFC 5044 §7.1.1 C: CRCs iff either frame has C=1; an RDMAC peer always uses them.
    let our_crc = rdmac || policy.our_crc();
    let crc = our_crc || req.crc;

    let mut negotiated = Negotiated {
        rev: req.rev,
        markers_rx,
        markers_tx,
        crc,
        peer_private_data: req.private_data.to_vec(),
        ddp_rdmap_version: if rdmac { 0 } else { 1 },
        p2p: false,
        rtr: None,
        rtr_options: RtrSet::EMPTY,
        ird: policy.ird,
        ord: policy.ord,
        peer_enhanced: req.enhanced,
    };
    // RFC 6581 §10: an enhanced Request gets an enhanced Reply, an unenhanced one an
    // unenhanced Reply.
    let mut enhanced = None;
    if let Some(theirs) = req.enhanced {
        let ours = negotiate_enhanced(policy, theirs, &mut negotiated);
        enhanced = Some(ours);
    }
    let mut plan = ReplyPlan {
        rev,
        markers: markers_rx,
        crc: our_crc,
        enhanced,
    };

    // RFC 5044 §7.1.2 rule 2: a properly formatted Request that is not acceptable SHOULD get a
    // Reply with R=1.
    if markers_tx && !policy.markers_tx_allowed {
        return Ok(Decision::Reject {
            plan,
            cause: RejectCause::Markers,
        });
    }
    if !policy.private_data_rule.accepts(req.private_data) {
        return Ok(Decision::Reject {
            plan,
            cause: RejectCause::PrivateData,
        });
    }
    if let (Some(theirs), Some(ours)) = (req.enhanced, plan.enhanced.as_mut()) {
        // RFC 6581 §9.1: the Responder MAY reject when the initiator IRD is below the ORD the
        // ULP needs, and says the needed ORD in the Reply.
        if theirs.ird != rev2::NO_NEGOTIATION && theirs.ird < policy.required_ord {
            ours.ord = policy.required_ord;
            return Ok(Decision::Reject {
                plan,
                cause: RejectCause::InsufficientIrd {
                    initiator_ird: theirs.ird,
                    required_ord: policy.required_ord,
                },
            });
        }
    }
    Ok(Decision::Accept { plan, negotiated })
}

/// RFC 6581 §9.1 (IRD/ORD) and §9.2 (connection model and RTR) at the Responder: returns the
/// Reply's enhanced data and records our local values.
fn negotiate_enhanced(
    policy: &StartupPolicy,
    theirs: Rev2Params,
    n: &mut Negotiated,
) -> Rev2Params {
    // §9.2: the Responder MUST set A as in the Request.
    let p2p = theirs.peer_to_peer;
    let rtr = if p2p {
        // §9.2: set the Request's options we support; if none, at least one we support.
        let support = policy.rtr_support_usable();
        let matched = theirs.rtr.intersection(support);
        if matched.is_empty() {
            support
        } else {
            matched
        }
    } else {
        RtrSet::EMPTY
    };
    // §9.1: initiator ORD 0x3FFF → leave our IRD unchanged and answer 0x3FFF. Otherwise our
    // IRD covers the initiator ORD as far as we can (the Initiator then lowers its ORD); a
    // Read RTR needs one inbound read slot even when the initiator ORD is 0.
    let (ird, reply_ird) =
        if theirs.ord == rev2::NO_NEGOTIATION || policy.ird == rev2::NO_NEGOTIATION {
            (policy.ird, rev2::NO_NEGOTIATION)
        } else {
            let mut want = theirs.ord;
            if rtr.contains(RtrType::ZeroLengthReadRequest) && want == 0 {
                want = 1;
            }
            let ird = want.min(policy.ird);
            (ird, ird)
        };
    // §9.1: initiator IRD 0x3FFF → leave our ORD unchanged and answer 0x3FFF. Otherwise the
    // Responder MUST set its ORD at most to the initiator IRD.
    let (ord, reply_ord) =
        if theirs.ird == rev2::NO_NEGOTIATION || policy.ord == rev2::NO_NEGOTIATION {
            (policy.ord, rev2::NO_NEGOTIATION)
        } else {
            let ord = policy.ord.min(theirs.ird);
            (ord, ord)
        };
    n.p2p = p2p;
    n.rtr_options = rtr;
    n.ird = ird;
    n.ord = ord;
    Rev2Params {
        peer_to_peer: p2p,
        rtr,
        ird: reply_ird,
        ord: reply_ord,
    }
}
