//! Frames for a steered 4-tuple of no flow, and for a 4-tuple whose flow has ended (`Expect::Gone`): the flow ends (exact RST,
//! FIN at an FPDU boundary, or our RST after its Terminate), `FlowGone` comes, and ns b's
//! frozen socket is closed as mpa-control closes it (in repair mode: silently). From then
//! on the tuple must be unsteered: a valid RDMA Write on it goes to ns b's kernel, which has
//! no socket for it and answers with a RST (RFC 9293 §3.10.7.1: SEQ = SEG.ACK, no ACK bit,
//! from the listener's port), the datapath counts nothing and places nothing.

use super::classes::{class, hostile_write, rst};
use super::{flow_gone, verify_placed, Class, Counter as C, Ctx, Expect as E};
use anyhow::{anyhow, bail, Context, Result};
use mpa_control::datapath_client::DatapathClient;
use mpa_ctl_proto::Message;
use mpa_harness::datapath::HandedOver;
use mpa_harness::hostile_peer::ip_header_len;
use std::net::SocketAddr;
use std::time::Duration;

/// The ended-tuple classes.
pub static CLASSES: &[Class] = &[
    class(
        "steered-tuple-of-no-flow",
        E::Silent(C::UnknownFlow),
        steered_without_flow,
    ),
    Class {
        after: tuple_goes_to_the_kernel,
        ..class("frames-after-flow-ended-by-rst", E::Gone, |c| {
            let s = rst(c, c.p.snd_nxt);
            c.p.send_seg(&s)
        })
    },
    Class {
        after: tuple_goes_to_the_kernel,
        ..class("frames-after-flow-ended-by-fin", E::Gone, |c| {
            // A placed write, then our FIN at the FPDU boundary: the datapath closes too
            // (its FIN, which the peer acknowledges), the flow ends in LAST-ACK.
            let d = c.pattern(0x41);
            c.write(0, &d)?;
            c.wait_acked()?;
            let mut s = c.p.seg(&[]);
            s.flags.fin = true;
            c.p.send_seg(&s)?;
            c.p.snd_nxt = c.p.snd_nxt.wrapping_add(1);
            if c.p.wait_for(Duration::from_secs(3), |r| r.fin)?.is_none() {
                bail!("the datapath's FIN after ours, got none within 3 s");
            }
            c.note = "FIN both ways; ".into();
            Ok(())
        })
    },
    Class {
        after: tuple_goes_to_the_kernel,
        ..class("frames-after-flow-ended-by-terminate", E::Gone, |c| {
            let f = mpa_harness::hostile_peer::fpdu_bytes(
                &mpa_harness::hostile_peer::write_ulpdu(c.env.stag(), c.slot, &c.pattern(4)),
                false,
            );
            c.p.send_data(&f)?;
            let t =
                c.p.wait_for(Duration::from_secs(3), |r| r.terminate().is_some())?
                    .and_then(|r| r.terminate())
                    .ok_or_else(|| anyhow!("a Terminate (bad CRC), got none within 3 s"))?;
            if (t.layer, t.error_type, t.error_code) != (2, 0, 2) {
                bail!("Terminate 2/0/0x02, got {t:?}");
            }
            // Let its FIN come (acknowledged by the peer), then reset exactly.
            c.p.poll(Duration::from_millis(100))?;
            let s = rst(c, c.p.snd_nxt);
            c.note = "Terminate 2/0/0x02, then our RST; ".into();
            c.p.send_seg(&s)
        })
    },
];

/// A 4-tuple steered to the datapath (adopted, never handed over: what a frame meets
/// between AdoptFlow and HandOver) is no flow: its frame is counted and dropped (redirected
/// by XDP, so ns b's kernel never sees it), and the adoption ends with its client.
fn steered_without_flow(c: &mut Ctx) -> Result<()> {
    let mut dpc = DatapathClient::connect(&c.env.socket, Duration::from_secs(5))?;
    let port = c.p.local.port() ^ 0x4000;
    let remote = SocketAddr::new(c.p.local.ip(), port);
    match dpc.request(|id| Message::AdoptFlow {
        id,
        local: c.p.remote,
        remote,
    })? {
        Message::FlowAdopted { .. } => {}
        other => bail!("FlowAdopted for {remote}, got {other:?}"),
    }
    let mut f = c.p.frame(&hostile_write(c))?;
    set_source_port(&mut f, ip_header_len(&c.p.local), port);
    c.p.send_raw(&f)?;
    // Counted before the adoption goes with its client.
    c.p.poll(Duration::from_millis(100))?;
    drop(dpc);
    c.note = format!("adopted {remote} → {}, never handed over; ", c.p.remote);
    Ok(())
}

/// Rewrites the TCP source port of an untagged frame, its checksum updated (RFC 1624).
fn set_source_port(f: &mut [u8], ip_len: usize, port: u16) {
    let t = 14 + ip_len;
    let old = u16::from_be_bytes([f[t], f[t + 1]]);
    f[t..t + 2].copy_from_slice(&port.to_be_bytes());
    let hc = u16::from_be_bytes([f[t + 16], f[t + 17]]);
    let mut sum = u32::from(!hc) + u32::from(!old) + u32::from(port);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    f[t + 16..t + 18].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

/// Runs an [`Expect::Gone`] class: its script, FlowGone, the silent close, its `after`.
pub(super) fn check_gone(ctx: &mut Ctx, mut h: HandedOver, class: &Class) -> Result<String> {
    if let Err(e) = (class.script)(ctx) {
        // Whatever state it left: end the flow for the next class.
        let s = rst(ctx, ctx.p.snd_nxt);
        ctx.p.send_seg(&s)?;
        flow_gone(&mut h).context("flow end after a failed script")?;
        return Err(e);
    }
    let end = flow_gone(&mut h)?;
    let reason = end
        .ended
        .as_ref()
        .map_or_else(|| "no end report".to_string(), |e| e.reason.clone());
    // What the datapath sent while the flow ended was seen; from here on nothing may come.
    ctx.p.poll(Duration::from_millis(100))?;
    ctx.p.inbox.clear();
    let HandedOver { frozen, dpc, .. } = h;
    drop(frozen);
    ctx.p.poll(Duration::from_millis(300))?;
    if let Some(r) = ctx.p.inbox.first() {
        bail!("the frozen socket to close silently, got {r:?}");
    }
    (class.after)(ctx)?;
    verify_placed(ctx)?;
    drop(dpc);
    Ok(format!(
        "flow ended ({reason}), frozen socket closed silently; {}",
        ctx.note.trim_end_matches("; ")
    ))
}

/// A valid in-window RDMA Write on the ended tuple: ns b's kernel answers it with a RST at
/// exactly its acknowledgment number; the datapath's queue counts no unknown flow, the XDP
/// program passed it, and the region stays untouched.
fn tuple_goes_to_the_kernel(c: &mut Ctx) -> Result<()> {
    let before = live_counters_any(c)?;
    let d = c.pattern(0x3c);
    let s = c.p.seg(&c.write_fpdu(256, &d));
    let ack = s.flags.ack.unwrap_or_default();
    c.p.send_seg(&s)?;
    let Some(r) = c.p.wait_for(Duration::from_secs(2), |r| r.rst)? else {
        bail!(
            "a RST from ns b's kernel, got {} other segments",
            c.p.inbox.len()
        );
    };
    if r.seq != ack || r.ack.is_some() {
        bail!(
            "RST with SEQ = SEG.ACK {ack} and no ACK bit, got seq {} ack {:?}",
            r.seq,
            r.ack
        );
    }
    c.p.poll(Duration::from_millis(100))?;
    let after = live_counters_any(c)?;
    if after.unknown_flow != before.unknown_flow {
        bail!(
            "queue.unknown_flow +0 (the tuple unsteered), got +{}",
            after.unknown_flow - before.unknown_flow
        );
    }
    if after.passed <= before.passed {
        bail!("xdp.passed +1 at least (the frame went to the kernel), got +0");
    }
    c.untouched(256, d.len())?;
    let note = std::mem::take(&mut c.note);
    c.note = format!(
        "{note}a Write on the ended tuple: the kernel's RST seq {} (= SEG.ACK), queue.unknown_flow +0, xdp.passed +{}, nothing placed; ",
        r.seq,
        after.passed - before.passed
    );
    Ok(())
}

/// The counters that show where a frame of no flow went.
struct Unsteered {
    /// Queues' `unknown_flow`, summed.
    unknown_flow: u64,
    /// The XDP program's `passed`.
    passed: u64,
}

fn live_counters_any(c: &Ctx) -> Result<Unsteered> {
    let mut dpc = mpa_control::datapath_client::DatapathClient::connect(
        &c.env.socket,
        Duration::from_secs(5),
    )?;
    let s = mpa_harness::datapath::stats(&mut dpc)?;
    Ok(Unsteered {
        unknown_flow: s.queues.iter().map(|q| q.stats.unknown_flow).sum(),
        passed: s.xdp.map_or(0, |x| x.passed),
    })
}
