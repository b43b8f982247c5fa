//! Hostile clients that name what is another's: a flow this client did not adopt, in a domain
//! it does not own, without an operator's capability — adopting, handing over, watching,
//! closing, finishing, capturing, listing, reading statistics. Each is refused (or shown
//! nothing), the flow lives on, and nothing is steered or handed over (docs/hostile.md). The
//! foreign client is another process, `mpa-bench hostile --probe-foreign`.

use super::ctl::{bench_program, witnessed, WAIT};
use super::Ctx;
use anyhow::{bail, Context, Result};
use mpa_control::datapath_client::DatapathClient;
use mpa_ctl_proto::client::ClientError;
use mpa_ctl_proto::Message;
use mpa_harness::datapath::stats;
use std::path::Path;

/// Another control client (same uid, but neither the flow's adopter, nor its domain's
/// owner, nor an operator: its process lacks CAP_NET_ADMIN) asks `op` of the hostile
/// connection's flow: refused with `Forbidden`, and the flow lives on (the runner then places
/// a Write on it). The client is `mpa-bench hostile --probe-foreign` run by `setpriv`
/// without CAP_NET_ADMIN.
fn foreign(c: &mut Ctx, op: &'static str) -> Result<()> {
    foreign_expecting(c, op, "Forbidden")
}

/// As [`foreign`], the probe's line to be `want`; the datapath's adopted flows and regions
/// must be as many after it as before (nothing steered, nothing handed over).
fn foreign_expecting(c: &mut Ctx, op: &'static str, want: &'static str) -> Result<()> {
    let flow_id = c.flow_id;
    witnessed(c, |p| {
        let mut op_client = DatapathClient::connect(p, WAIT)?;
        let held = |s: &mpa_ctl_proto::stats::DatapathStats| {
            (
                s.adopted_flows,
                s.registry.regions,
                s.handover.watched_ports.clone(),
            )
        };
        let before = held(&stats(&mut op_client)?);
        let out = std::process::Command::new("setpriv")
            .args(["--inh-caps=-net_admin", "--bounding-set=-net_admin", "--"])
            .arg(bench_program())
            .args(["hostile", "--probe-socket"])
            .arg(p)
            .args(["--probe-foreign", op, "--probe-flow", &flow_id.to_string()])
            .output()
            .context("the probe without CAP_NET_ADMIN (setpriv, util-linux)")?;
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if line != want {
            bail!(
                "{op} by a client without CAP_NET_ADMIN: `{want}`, got `{line}` {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let after = held(&stats(&mut op_client)?);
        if after != before {
            bail!("(adopted flows, regions, watched ports) {before:?} before the probe, {after:?} after");
        }
        Ok(format!(
            "{op} (flow {flow_id}) by another client without CAP_NET_ADMIN: {line}"
        ))
    })
}

/// The probe (`--probe-foreign`): asks `op` of `flow_id` on a fresh client, prints the
/// refusal's code or what came instead.
pub fn probe_foreign(p: &Path, op: &str, flow_id: u64) -> String {
    let mut dpc = match DatapathClient::connect(p, WAIT) {
        Ok(c) => c,
        Err(e) => return format!("no client: {e}"),
    };
    let capture = |id, flow| Message::StartCapture {
        id,
        flow,
        max_bytes: 1 << 20,
        duration_ms: 1000,
        snaplen: 65535,
    };
    let ask = |dpc: &mut DatapathClient, build: &dyn Fn(u64) -> Message| match dpc.request(build) {
        Err(ClientError::Refused { code, .. }) => format!("{code:?}"),
        Err(e) => format!("failed: {e}"),
        Ok(m) => format!("answered: {m:?}"),
    };
    match op {
        "CloseFlow" => ask(&mut dpc, &|id| Message::CloseFlow { id, flow_id }),
        "FinishFlow" => ask(&mut dpc, &|id| Message::FinishFlow { id, flow_id }),
        "StartCapture" => ask(&mut dpc, &|id| capture(id, Some(flow_id))),
        "StartCapture-all" => ask(&mut dpc, &|id| capture(id, None)),
        "HandOver" => ask(&mut dpc, &|id| Message::HandOver {
            id,
            handover: Box::new(
                mpa_stack::sim::SimHandover {
                    flow_id,
                    ..Default::default()
                }
                .build(),
            ),
        }),
        // A 4-tuple the probe has no connection for (TEST-NET addresses).
        "AdoptFlow" => ask(&mut dpc, &|id| Message::AdoptFlow {
            id,
            local: "192.0.2.1:4791".parse().expect("address"),
            remote: "192.0.2.2:40000".parse().expect("address"),
        }),
        // A hand-over made up whole, of a flow nobody adopted.
        "HandOver-made-up" => ask(&mut dpc, &|id| Message::HandOver {
            id,
            handover: Box::new(
                mpa_stack::sim::SimHandover {
                    flow_id: flow_id + 1_000_000,
                    ..Default::default()
                }
                .build(),
            ),
        }),
        "WatchPort" => ask(&mut dpc, &|id| Message::WatchPort { id, port: 4791 }),
        // A gathered Write on the flow, from any region: the flow's domain is not the probe's.
        "Post" => ask(&mut dpc, &|id| Message::Post {
            id,
            wr: mpa_ctl_proto::ring::post::WorkRequest {
                sg_list: mpa_ctl_proto::ring::post::SgList::new(
                    &[mpa_ctl_proto::ring::post::Sge {
                        stag: 1,
                        offset: 0,
                        len: 64,
                    }; 2],
                )
                .unwrap_or(mpa_ctl_proto::ring::post::SgList::one(1, 0, 64)),
                ..mpa_ctl_proto::ring::post::WorkRequest::new(
                    flow_id,
                    1,
                    mpa_ctl_proto::ring::post::PostOp::Write {
                        sink_stag: 1,
                        sink_to: 0,
                    },
                    1,
                    0,
                    64,
                    1,
                )
            },
        }),
        // Buffers into the shared receive queue of the hostile connection's domain.
        "PostRecv-domain" => ask(&mut dpc, &|id| Message::PostRecv {
            id,
            target: mpa_ctl_proto::PostTarget::Pd(super::PD_HOSTILE),
            stag: 1,
            offset: 0,
            len: 64,
            count: 1,
            wr_id: 0,
        }),
        "ListRegions" => match dpc.request(|id| Message::ListRegions { id, pd: None }) {
            Ok(Message::Regions { regions, .. }) => format!("regions {}", regions.len()),
            Ok(m) => format!("answered: {m:?}"),
            Err(e) => format!("failed: {e}"),
        },
        "GetStats" => match stats(&mut dpc) {
            Ok(s) => format!(
                "flows {} ended {} capture {}",
                s.queues.iter().map(|q| q.flows.len()).sum::<usize>(),
                s.ended_flows.len(),
                s.capture.is_some()
            ),
            Err(e) => format!("failed: {e}"),
        },
        other => format!("no such probe: {other}"),
    }
}

/// AdoptFlow of a 4-tuple by a client without CAP_NET_ADMIN (it could steer a live kernel
/// connection's segments away from it): only the connection manager adopts.
pub fn adopt_without_capability(c: &mut Ctx) -> Result<()> {
    foreign(c, "AdoptFlow")
}

/// A HandOver made up whole (the message carries the TCP state) by a client without
/// CAP_NET_ADMIN: refused, and nothing handed over anywhere.
pub fn made_up_handover(c: &mut Ctx) -> Result<()> {
    foreign(c, "HandOver-made-up")
}

/// WatchPort (recording other connections' segments) by a client without CAP_NET_ADMIN.
pub fn watch_without_capability(c: &mut Ctx) -> Result<()> {
    foreign(c, "WatchPort")
}

/// ListRegions by a client that owns no domain, while others hold regions: it sees none.
pub fn list_anothers_regions(c: &mut Ctx) -> Result<()> {
    let mut op = DatapathClient::connect(&c.env.socket, WAIT)?;
    let regions = stats(&mut op)?.registry.regions;
    if regions == 0 {
        bail!("the run's consumers hold no region to hide");
    }
    foreign_expecting(c, "ListRegions", "regions 0")
}

/// GetStats by a client that owns no domain, beside live flows: every queue's counters but
/// none of the others' flows, ended flows or capture.
pub fn stats_of_anothers_flows(c: &mut Ctx) -> Result<()> {
    foreign_expecting(c, "GetStats", "flows 0 ended 0 capture false")
}

/// CloseFlow of another client's flow.
pub fn close_anothers_flow(c: &mut Ctx) -> Result<()> {
    foreign(c, "CloseFlow")
}

/// FinishFlow of another client's flow.
pub fn finish_anothers_flow(c: &mut Ctx) -> Result<()> {
    foreign(c, "FinishFlow")
}

/// StartCapture (with payloads) of another client's flow, and of every flow.
pub fn capture_anothers_flow(c: &mut Ctx) -> Result<()> {
    foreign(c, "StartCapture")?;
    let one = std::mem::take(&mut c.note);
    foreign(c, "StartCapture-all")?;
    c.note = format!("{one}{}", c.note);
    Ok(())
}

/// A work request (a gathered Write) posted on another client's flow.
pub fn post_on_anothers_flow(c: &mut Ctx) -> Result<()> {
    foreign(c, "Post")
}

/// Receive buffers posted into the shared receive queue of another client's domain, which
/// its connections would draw from.
pub fn post_recv_to_anothers_domain(c: &mut Ctx) -> Result<()> {
    foreign(c, "PostRecv-domain")
}

/// HandOver naming another client's (handed-over) flow: only its adopter hands it over,
/// whatever its capabilities.
pub fn handover_anothers_flow(c: &mut Ctx) -> Result<()> {
    foreign(c, "HandOver")
}
