//! `connect`: the MPA Initiator, holding the frozen socket until the flow ends.

use crate::cli::ConnectArgs;
use mpa::startup::{RtrSet, RtrType, StartupPolicy};
use mpa_control::datapath_client::ClientError;
use mpa_control::initiator::{connect_and_hand_over, InitiatorOutcome};
use mpa_ctl_proto::Message;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The Request's policy from the command line.
fn initiator_policy(a: &ConnectArgs) -> Result<StartupPolicy, String> {
    let revision = a.rev.unwrap_or(if a.p2p { 2 } else { 1 });
    if a.p2p && revision < 2 {
        return Err("--p2p needs --rev 2".into());
    }
    let policy = StartupPolicy {
        revision,
        markers_required: a.markers,
        crc_suppressed_by_admin: a.no_crc,
        p2p: a.p2p,
        rtr_send: if a.rtr.is_empty() {
            RtrSet::ALL
        } else {
            a.rtr.iter().map(|r| RtrType::from(*r)).collect()
        },
        startup_timeout: Duration::from_secs(a.timeout),
        ..StartupPolicy::default()
    };
    policy.validate().map_err(|e| format!("policy: {e}"))?;
    Ok(policy)
}

pub(crate) fn connect(a: &ConnectArgs) -> Result<(), String> {
    let policy = initiator_policy(a)?;
    let hold = match a.hold {
        Some(h) if !(h.is_finite() && h >= 0.0) => {
            return Err(format!("--hold {h}: not a number of seconds"))
        }
        h => h.map(Duration::from_secs_f64),
    };
    // Before the hand-over: a signal must close the flow, not leave it running unowned.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| format!("signals: {e}"))?;
    }
    let (mut dp, path) = a.target.connect()?;
    let private_data = a.private_data.clone().unwrap_or_default().into_bytes();
    let outcome = connect_and_hand_over(
        a.to,
        policy,
        private_data,
        mpa_control::Placement {
            pd: a.pd,
            aligned_sender: a.aligned_sender,
            conn_id: None,
        },
        &mut dp,
    )
    .map_err(|e| format!("connect {}: {e}", a.to))?;
    let (flow_id, frozen, n) = match outcome {
        InitiatorOutcome::Rejected { reason } => {
            return Err(format!(
                "connect {}: rejected by the Responder: {}",
                a.to,
                String::from_utf8_lossy(&reason)
            ))
        }
        InitiatorOutcome::HandedOver {
            flow_id,
            frozen,
            negotiated,
        } => (flow_id, frozen, negotiated),
    };
    let rtr = n.rtr.map(|r| format!("{r:?}"));
    if a.json {
        let line = json!({
            "flow_id": flow_id,
            "to": a.to.to_string(),
            "rev": n.rev,
            "markers_rx": n.markers_rx,
            "markers_tx": n.markers_tx,
            "crc": n.crc,
            "p2p": n.p2p,
            "rtr": rtr,
            "ird": n.ird,
            "ord": n.ord,
            "private_data": String::from_utf8_lossy(&n.peer_private_data),
        });
        println!("{line}");
    } else {
        println!(
            "flow {flow_id}: {} rev {} markers_rx {} markers_tx {} crc {} rtr {}",
            a.to,
            n.rev,
            n.markers_rx,
            n.markers_tx,
            n.crc,
            rtr.as_deref().unwrap_or("-")
        );
    }
    let deadline = hold.map(|h| Instant::now() + h);
    let dp_err = |e: ClientError| format!("flow {flow_id}: datapath at {}: {e}", path.display());
    loop {
        // Short slices so that a signal is seen promptly.
        let slice = Instant::now() + Duration::from_millis(200);
        let until = deadline.map_or(slice, |d| d.min(slice));
        match dp.wait_notification(Some(until)).map_err(dp_err)? {
            Some(Message::FlowGone {
                flow_id: gone,
                mpa_error,
                reason,
                terminate,
            }) if gone == flow_id => {
                drop(frozen);
                return match mpa_error {
                    None if terminate.is_some() => Err(format!(
                        "flow {flow_id} ended with a Terminate ({terminate:?}): {reason}"
                    )),
                    None => {
                        tracing::info!(flow_id, %reason, "flow ended");
                        Ok(())
                    }
                    Some(code) => Err(format!(
                        "flow {flow_id} ended with MPA error {code}: {reason}"
                    )),
                };
            }
            Some(_) => continue,
            None => {}
        }
        let expired = deadline.is_some_and(|d| Instant::now() >= d);
        if expired || stop.load(Ordering::Relaxed) {
            break;
        }
    }
    // Held long enough (or told to stop): the datapath resets the connection.
    match dp.request(|id| Message::CloseFlow { id, flow_id }) {
        Ok(Message::Ok { .. }) => {}
        Ok(m) => return Err(dp_err(ClientError::Unexpected(Box::new(m)))),
        Err(e) => return Err(dp_err(e)),
    }
    let t0 = Instant::now() + Duration::from_secs(5);
    while let Some(m) = dp.wait_notification(Some(t0)).map_err(dp_err)? {
        if matches!(m, Message::FlowGone { flow_id: gone, .. } if gone == flow_id) {
            break;
        }
    }
    drop(frozen);
    tracing::info!(flow_id, "flow closed");
    Ok(())
}
