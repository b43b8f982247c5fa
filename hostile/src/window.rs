//! The peer's receive window against the datapath's send side (its Terminates are the only
//! data it sends): a window closed for ever ends the flow after the persist limit
//! ([`super::PERSIST_PROBES`] here), and a window shrunk to zero while the Terminate is in
//! flight beyond the new right edge is probed and the Terminate resent once it opens
//! (RFC 1122 §4.2.2.17: robust against shrinking, MUST probe a zero window).

use super::classes::class;
use super::{Class, Ctx, Expect as E, PERSIST_PROBES};
use anyhow::{bail, Result};
use mpa_harness::hostile_peer::{fpdu_bytes, write_ulpdu, Rx};
use std::time::{Duration, Instant};

/// The window classes.
pub static CLASSES: &[Class] = &[
    // The flow's report keeps the error the Terminate was for (MPA error 2), although the
    // Terminate never left: the persist limit's RST ended the connection first.
    class("zero-window-persist-limit", E::Reset(2), persist_limit),
    class(
        "window-shrink-to-zero-in-flight",
        E::Terminate(2, 0, 2),
        shrink,
    ),
];

/// A segment that commits no octet beyond the window: a probe (no data, or at most one
/// octet) or a RST.
fn within_zero_window(r: &Rx) -> bool {
    r.payload.len() <= 1 || r.rst
}

/// A zero-window probe as the datapath sends it: no data at SND.UNA - 1 (our RCV.NXT - 1,
/// as we take nothing while the window is closed).
fn is_probe(c: &Ctx, r: &Rx) -> bool {
    r.payload.is_empty() && !r.rst && !r.fin && r.seq == c.p.rcv_nxt.wrapping_sub(1)
}

/// We close our window for good (every probe answered, window 0, nothing taken) while the
/// datapath has a Terminate to send: it probes [`PERSIST_PROBES`] times, sends nothing
/// beyond the window, then gives up with a RST.
fn persist_limit(c: &mut Ctx) -> Result<()> {
    c.p.window = 0;
    c.p.accept = false;
    let s = c.p.seg(&[]);
    c.p.send_seg(&s)?;
    let f = fpdu_bytes(&write_ulpdu(c.env.stag(), c.slot, &c.pattern(4)), false);
    c.p.send_data(&f)?;
    // RTO 200 ms here, doubling: the RST about 6 s after the first probe; 60 s bounds it
    // whatever the RTO.
    let end = Instant::now() + Duration::from_secs(60);
    let mut probes = 0u32;
    let rst = loop {
        if Instant::now() >= end {
            bail!("a RST after {PERSIST_PROBES} probes within 60 s, got {probes} probes");
        }
        c.p.poll(Duration::from_millis(50))?;
        let seen = std::mem::take(&mut c.p.inbox);
        if let Some(big) = seen.iter().find(|r| !within_zero_window(r)) {
            bail!(
                "nothing beyond a zero window, got {} octets at {}",
                big.payload.len(),
                big.seq
            );
        }
        let mut rst = None;
        for r in seen {
            if r.rst {
                rst = Some(r);
                break;
            }
            if is_probe(c, &r) {
                // A probe: answered as a live peer that never reads answers it.
                probes += 1;
                let a = c.p.seg(&[]);
                c.p.send_seg(&a)?;
            }
        }
        if let Some(r) = rst {
            break r;
        }
    };
    if probes != PERSIST_PROBES {
        bail!("{PERSIST_PROBES} probes before the RST, got {probes}");
    }
    c.note = format!(
        "{probes} probes answered with window 0, then RST seq {}; ",
        rst.seq
    );
    Ok(())
}

/// The Terminate goes out into an open window; we take none of it and shrink the window to
/// zero (an ACK of the old RCV.NXT, window 0: the right edge moves left of the Terminate).
/// The datapath must probe, send nothing beyond the edge, and resend the Terminate once the
/// window opens again.
fn shrink(c: &mut Ctx) -> Result<()> {
    let open = c.p.window;
    c.p.accept = false;
    let f = fpdu_bytes(&write_ulpdu(c.env.stag(), c.slot, &c.pattern(4)), false);
    c.p.send_data(&f)?;
    let Some(first) =
        c.p.wait_for(Duration::from_secs(3), |r| r.terminate().is_some())?
    else {
        bail!("the Terminate into the open window, got none within 3 s");
    };
    // take() answered with the window still open; now the shrink.
    c.p.window = 0;
    let s = c.p.seg(&[]);
    c.p.send_seg(&s)?;
    c.p.inbox.clear();
    c.p.poll(Duration::from_secs(2))?;
    let seen = std::mem::take(&mut c.p.inbox);
    if let Some(big) = seen.iter().find(|r| !within_zero_window(r)) {
        bail!(
            "nothing beyond the shrunk right edge, got {} octets at {} (the Terminate at {})",
            big.payload.len(),
            big.seq,
            first.seq
        );
    }
    let probes = seen.iter().filter(|r| is_probe(c, r)).count();
    if probes == 0 {
        bail!("zero-window probes within 2 s of the shrink (RFC 1122 §4.2.2.17 MUST), got none");
    }
    c.p.window = open;
    c.p.accept = true;
    let s = c.p.seg(&[]);
    c.p.send_seg(&s)?;
    let Some(again) =
        c.p.wait_for(Duration::from_secs(10), |r| r.terminate().is_some())?
    else {
        bail!("the Terminate again once the window opened, got none within 10 s");
    };
    if again.seq != first.seq {
        bail!(
            "the same Terminate (seq {}) again, got seq {}",
            first.seq,
            again.seq
        );
    }
    c.note = format!("{probes} probe(s) while shrunk to 0, nothing beyond the edge; ");
    // The runner checks the Terminate's codes.
    c.p.inbox.insert(0, again);
    Ok(())
}
