//! The Responder side of connection setup: accept with a kernel socket, run the startup phase,
//! and hand the connection over to the datapath, which sends the accepting Reply itself
//! (docs/architecture.md, "Connection setup" steps 1–4).

use crate::datapath_client::DatapathClient;
use crate::freeze::FrozenSocket;
use crate::handover::{hand_over, read_frame_step, FrameRead, Placement, StartupWire};
use mpa::startup::{Negotiated, RequestInfo, ResponderStartup, StartupEvent, StartupPolicy};
use mpa_ctl_proto::Role;
use std::io::Write;
use std::net::TcpStream;
use std::time::Instant;

// Kept at its old path for callers outside the library (the hand-over tests).
pub use crate::setup_error::SetupError;

/// What happened to one accepted connection.
#[derive(Debug)]
pub enum Outcome {
    /// The datapath owns the connection; keep `frozen` until it reports the flow gone.
    HandedOver {
        /// The datapath's flow.
        flow_id: u64,
        /// The kernel socket, frozen; dropping it closes it silently.
        frozen: FrozenSocket,
        /// What was negotiated.
        negotiated: Negotiated,
    },
    /// We rejected the Request: the kernel sent the R=1 Reply and the socket is closed.
    Rejected {
        /// The reason sent.
        reason: Vec<u8>,
    },
}

/// An application's answer to a Request ([`decide_and_hand_over`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Accept with this Reply private data.
    Accept(Vec<u8>),
    /// Reject with this private data.
    Reject(Vec<u8>),
    /// Neither: close the connection (the application went away or took too long).
    Abandon(String),
}

/// Runs the Responder startup on `sock` and hands the connection to the datapath; its flow
/// places into protection domain `pd` (when given).
pub fn respond_and_hand_over(
    sock: TcpStream,
    policy: StartupPolicy,
    reply_private_data: Vec<u8>,
    placement: impl Into<Placement>,
    dp: &mut DatapathClient,
) -> Result<Outcome, SetupError> {
    let sm = ResponderStartup::auto(policy, reply_private_data, Instant::now());
    run(
        sock,
        sm,
        |_, _| Verdict::Abandon("no decision".into()),
        placement.into(),
        dp,
    )
}

/// The Responder startup in explicit mode: a Request that passes `policy` goes to `decide`
/// (with the Request and the Placement to fill in), whose verdict accepts, rejects or
/// abandons it; an accepted connection is handed over.
pub fn decide_and_hand_over(
    sock: TcpStream,
    policy: StartupPolicy,
    decide: impl FnOnce(&RequestInfo, &mut Placement) -> Verdict,
    placement: Placement,
    dp: &mut DatapathClient,
) -> Result<Outcome, SetupError> {
    let sm = ResponderStartup::new(policy, Instant::now());
    run(sock, sm, decide, placement, dp)
}

fn run(
    mut sock: TcpStream,
    mut sm: ResponderStartup,
    decide: impl FnOnce(&RequestInfo, &mut Placement) -> Verdict,
    mut placement: Placement,
    dp: &mut DatapathClient,
) -> Result<Outcome, SetupError> {
    let mut decide = Some(decide);
    // Read exactly the Request: octets after it belong to Full Operation (none can come
    // before our Reply from a compliant Initiator, and we never swallow them).
    let mut frame: Vec<u8> = Vec::with_capacity(mpa::wire::startup::MAX_FRAME_LEN);
    let negotiated = loop {
        if let Some(ev) = sm.poll_event() {
            match ev {
                StartupEvent::Established(n) => break n,
                StartupEvent::Rejected { private_data } => {
                    while let Some(reply) = sm.poll_transmit() {
                        sock.write_all(&reply)?;
                    }
                    sock.flush()?;
                    let _ = sock.shutdown(std::net::Shutdown::Both);
                    return Ok(Outcome::Rejected {
                        reason: private_data,
                    });
                }
                StartupEvent::Failed(e) => return Err(e.into()),
                StartupEvent::RequestReceived(info) => {
                    let verdict = match decide.take() {
                        Some(d) => d(&info, &mut placement),
                        None => Verdict::Abandon("a second Request".into()),
                    };
                    match verdict {
                        Verdict::Accept(pd) => sm.accept(pd)?,
                        Verdict::Reject(pd) => sm.reject(pd)?,
                        Verdict::Abandon(why) => {
                            let _ = sock.shutdown(std::net::Shutdown::Both);
                            return Err(SetupError::Abandoned(why));
                        }
                    }
                    continue;
                }
            }
        }
        let Some(deadline) = sm.poll_timeout() else {
            return Err(SetupError::Closed);
        };
        match read_frame_step(&mut sock, &mut frame, deadline)? {
            FrameRead::Octets(n) => {
                sm.handle_input(Instant::now(), &frame[frame.len() - n..])?;
            }
            FrameRead::TimedOut => sm.handle_timeout(Instant::now()),
            FrameRead::Interrupted => {}
        }
    };
    let reply_frame = sm.poll_transmit().unwrap_or_default();
    let rtr = negotiated.rtr_accepted().to_vec();
    let wire = StartupWire {
        reply_to_send: reply_frame,
        // `frame` holds exactly the Request (see frame_want).
        request: frame,
        reply_received: Vec::new(),
    };
    let (flow_id, frozen) =
        hand_over(sock, dp, Role::Responder, &negotiated, wire, rtr, placement)?;
    Ok(Outcome::HandedOver {
        flow_id,
        frozen,
        negotiated,
    })
}
