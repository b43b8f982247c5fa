//! The runner's check of one class: counters before and after its script, and what the
//! class expects of them (dropped and counted, acknowledged, a Terminate with its exact
//! code, the connection closed), with the octets placed before it still intact.

use super::{flow_gone, live_counters, verify_placed, Class, Ctx, Expect, SLOT};
use anyhow::{bail, Context, Result};
use mpa_ctl_proto::stats::FlowReport;
use mpa_harness::datapath::HandedOver;
use std::time::Duration;

/// How long a class that expects a Terminate waits for it.
const TERMINATE_WAIT: Duration = Duration::from_secs(5);

/// Checks a class; returns what happened and, when the flow already ended, its report.
pub(super) fn check_class(
    ctx: &mut Ctx,
    h: &mut HandedOver,
    class: &Class,
) -> Result<(String, Option<FlowReport>)> {
    let before = live_counters(&mut h.dpc, h.flow_id)?;
    let nxt0 = ctx.p.snd_nxt;
    (class.script)(ctx)?;
    match class.expect {
        Expect::Silent(c) | Expect::Acked(c) => {
            ctx.p.poll(Duration::from_millis(150))?;
            let after = live_counters(&mut h.dpc, h.flow_id)?;
            let d = c.read(&after) - c.read(&before);
            let answers = std::mem::take(&mut ctx.p.inbox);
            let acks = answers
                .iter()
                .filter(|r| r.is_pure_ack() && r.ack == Some(ctx.p.snd_nxt))
                .count();
            match class.expect {
                Expect::Silent(_) if !answers.is_empty() => {
                    bail!(
                        "no answer, got {} segments: {:?}",
                        answers.len(),
                        answers[0]
                    )
                }
                Expect::Acked(_) if acks == 0 => {
                    bail!("an ACK of {}, got {answers:?}", ctx.p.snd_nxt)
                }
                _ => {}
            }
            if d != 1 {
                bail!("{} +1, got +{d}", c.name());
            }
            let what = if acks > 0 {
                format!("{acks} ACK(s) of SND.NXT")
            } else {
                "no answer".into()
            };
            alive(ctx)?;
            Ok((format!("{what}, {} +1, connection lives", c.name()), None))
        }
        Expect::Placed => {
            if ctx.p.snd_nxt == nxt0 {
                bail!("the script sent nothing");
            }
            ctx.wait_acked()?;
            verify_placed(ctx)?;
            let n: usize = ctx.placed.iter().map(|(_, d)| d.len()).sum();
            alive(ctx)?;
            Ok((
                format!(
                    "{}{n} octets placed octet-exact, connection lives",
                    ctx.note
                ),
                None,
            ))
        }
        Expect::Terminate(l, t, c) => {
            // A class that passes waits only as long as the Terminate takes; one that fails
            // says what came instead.
            let got = ctx
                .p
                .wait_for(TERMINATE_WAIT, |r| r.terminate().is_some())?
                .and_then(|r| r.terminate());
            let Some(term) = got else {
                bail!(
                    "a Terminate, got none within {TERMINATE_WAIT:?} ({})",
                    no_terminate_why(ctx, h)
                );
            };
            if (term.layer, term.error_type, term.error_code) != (l, t, c) {
                bail!(
                    "Terminate layer {l} type {t} code {c:#04x}, got layer {} type {} code {:#04x}",
                    term.layer,
                    term.error_type,
                    term.error_code
                );
            }
            (class.after)(ctx)?;
            let mut rst = ctx.p.seg(&[]);
            rst.flags.rst = true;
            rst.flags.ack = None;
            ctx.p.send_seg(&rst)?;
            let end = flow_gone(h)?;
            let e = end.ended.clone().unwrap_or_default_end();
            match e.terminate {
                Some(ti) if ti.sent && (ti.layer, ti.error_type, ti.error_code) == (l, t, c) => {}
                other => bail!(
                    "the flow to end with the Terminate it sent, got {other:?} ({})",
                    e.reason
                ),
            }
            verify_placed(ctx)?;
            Ok((
                format!(
                    "{}Terminate layer {l} type {t} code {c:#04x}, flow ended: {}",
                    ctx.note, e.reason
                ),
                Some(end),
            ))
        }
        Expect::Closed => {
            // Acknowledge what the datapath sends while it closes (its FIN).
            ctx.p.poll(Duration::from_millis(300))?;
            let end = flow_gone(h)?;
            let e = end.ended.clone().unwrap_or_default_end();
            if e.mpa_error != Some(1) {
                bail!(
                    "flow ended with MPA error 1, got {:?} ({})",
                    e.mpa_error,
                    e.reason
                );
            }
            Ok((format!("flow ended: {}", e.reason), Some(end)))
        }
        Expect::Lives => {
            ctx.p.inbox.clear();
            alive(ctx)?;
            Ok((format!("{}connection lives", ctx.note), None))
        }
        Expect::Gone => bail!("ended classes run through ended::check_gone"),
        Expect::Reset(want) => {
            let end = flow_gone(h)?;
            let e = end.ended.clone().unwrap_or_default_end();
            if e.mpa_error != Some(want) {
                bail!(
                    "flow ended with MPA error {want}, got {:?} ({})",
                    e.mpa_error,
                    e.reason
                );
            }
            Ok((format!("{}flow ended: {}", ctx.note, e.reason), Some(end)))
        }
        Expect::PeerTerminate => {
            (class.after)(ctx)?;
            let mut rst = ctx.p.seg(&[]);
            rst.flags.rst = true;
            rst.flags.ack = None;
            ctx.p.send_seg(&rst)?;
            let end = flow_gone(h)?;
            let e = end.ended.clone().unwrap_or_default_end();
            match e.terminate {
                Some(ti) if !ti.sent => {}
                other => bail!(
                    "the flow to end with our Terminate, got {other:?} ({})",
                    e.reason
                ),
            }
            verify_placed(ctx)?;
            Ok((format!("flow ended: {}", e.reason), Some(end)))
        }
    }
}

trait DefaultEnd {
    fn unwrap_or_default_end(self) -> mpa_ctl_proto::stats::EndReport;
}

impl DefaultEnd for Option<mpa_ctl_proto::stats::EndReport> {
    fn unwrap_or_default_end(self) -> mpa_ctl_proto::stats::EndReport {
        self.unwrap_or(mpa_ctl_proto::stats::EndReport {
            mpa_error: None,
            reason: "no end report".into(),
            terminate: None,
        })
    }
}

/// The connection lives: a valid RDMA Write at the end of the slot is acknowledged and
/// placed.
fn alive(ctx: &mut Ctx) -> Result<()> {
    let data = ctx.pattern(0xa5);
    ctx.write(SLOT - 64, &data)?;
    ctx.wait_acked().context("the connection to live on")?;
    verify_placed(ctx)
}

/// What a class that waited in vain for a Terminate saw: the segments that came (data, or
/// ACKs of how much of ours) and the flow's own counters, so that a failure says whether the
/// datapath never took the script's last segment or answered and the answer went astray.
fn no_terminate_why(ctx: &mut Ctx, h: &mut HandedOver) -> String {
    let inbox = &ctx.p.inbox;
    let data: Vec<String> = inbox
        .iter()
        .filter(|r| !r.payload.is_empty())
        .map(|r| format!("{}+{}", r.seq, r.payload.len()))
        .collect();
    let best_ack = inbox.iter().filter_map(|r| r.ack).max();
    let flow = match live_counters(&mut h.dpc, h.flow_id) {
        Ok(s) => format!(
            "flow {}: {} packets, {} out of order, {} duplicates, {} retransmissions, \
             {} frames out, rx {:?}",
            s.flow.state,
            s.flow.packets,
            s.flow.out_of_order_segments,
            s.flow.duplicates,
            s.flow.retransmissions,
            s.flow.frames_sent,
            s.flow.rx
        ),
        Err(e) => format!("flow counters: {e:#}"),
    };
    format!(
        "{} segments came, data at {data:?}, highest ACK {best_ack:?} of SND.NXT {}, RCV.NXT {}; {flow}",
        inbox.len(),
        ctx.p.snd_nxt,
        ctx.p.rcv_nxt
    )
}
