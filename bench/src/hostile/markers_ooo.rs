//! Markers on the out-of-order path (RFC 5044 §4.3, §8 error 3), the Responder requiring
//! them: a segment ahead of RCV.NXT whose marker is honest, has RESERVED ≠ 0, points before
//! the segment, points into the segment at no FPDU, or points at a forged FPDU with a valid
//! CRC inside another FPDU's data; then the hole is filled. The locator may only place what
//! it verified, and the in-order stream decides: the honest FPDUs are placed octet-exact,
//! a wrong marker ends the flow with Terminate 2/0/3 and the FPDU it sits in is not placed.

use super::classes::{marked, marker_data, write_not_placed};
use super::peer::{fpdu_bytes, write_ulpdu};
use super::{Class, Ctx, Expect as E, Setup};
use anyhow::{anyhow, bail, Result};
use mpa::encoder::FpduEncoder;
use mpa_ctl_proto::stats::RxStats;

/// The out-of-order marker classes.
pub static CLASSES: &[Class] = &[
    marked("ooo-markers-valid", E::Placed, |c| {
        two_fpdus_out_of_order(c, |_| {}, Some(1))
    }),
    marked("ooo-marker-reserved-not-zero", E::Placed, |c| {
        // RESERVED is ignored on receive (RFC 5044 §4.3), in order and ahead alike.
        two_fpdus_out_of_order(c, |m| m[..2].copy_from_slice(&[0xde, 0xad]), None)
    }),
    wrong("ooo-marker-fpduptr-before-segment", |c| {
        // FPDUPTR 252 (508 with one bit flipped) points before the segment's start: the
        // locator cannot use it, the in-order stream finds it wrong.
        one_fpdu_split(c, |m| m[2] ^= 0x01, false)
    }),
    wrong("ooo-marker-fpduptr-into-segment", |c| {
        // FPDUPTR 100 points into the segment, at ULPDU octets that are no FPDU header.
        one_fpdu_split(c, |m| m[2..4].copy_from_slice(&[0, 100]), false)
    }),
    Class {
        name: "ooo-marker-points-at-forged-fpdu",
        expect: E::Terminate(2, 0, 3),
        setup: Setup::Markers,
        script: |c| one_fpdu_split(c, |m| m.copy_from_slice(&[0, 0, 0, 0]), true),
        after: forged_after,
    },
];

const fn wrong(name: &'static str, script: fn(&mut Ctx) -> Result<()>) -> Class {
    Class {
        name,
        expect: E::Terminate(2, 0, 3),
        setup: Setup::Markers,
        script,
        after: |c| {
            c.untouched(0, 700)?;
            write_not_placed(c)
        },
    }
}

/// Slot offset the forged FPDU writes to.
const FORGED_AT: u64 = 2048;

/// After the forged-FPDU class's Terminate: the real FPDU is not placed; where the forged
/// one wrote is noted (it was verified by its own CRC before the in-order stream showed the
/// marker lied).
fn forged_after(c: &mut Ctx) -> Result<()> {
    c.untouched(0, 700)?;
    let forged = c.env.read(c.slot + FORGED_AT, 64);
    let placed = forged == forged_data(c);
    let untouched = forged.iter().all(|&b| b == 0);
    if !placed && !untouched {
        bail!("the forged FPDU's target holds neither its octets nor zeros");
    }
    let note = std::mem::take(&mut c.note);
    c.note = format!(
        "{note}the forged FPDU's 64 octets {} at slot+{FORGED_AT}; ",
        if placed { "placed" } else { "not placed" }
    );
    write_not_placed(c)
}

fn forged_data(c: &Ctx) -> Vec<u8> {
    c.pattern(0x7f)
}

fn rx_stats(c: &Ctx) -> Result<RxStats> {
    Ok(c.flow_report()?.rx)
}

/// Stream position of SND.NXT (markers counted from SeqStart).
fn position(c: &Ctx) -> Result<u32> {
    let s0 = c
        .markers_from
        .ok_or_else(|| anyhow!("markers were not negotiated"))?;
    Ok(c.p.snd_nxt.wrapping_sub(s0))
}

/// Sends `wire` (to start at SND.NXT) as two segments, the one from `split` on first (ahead
/// of RCV.NXT, a hole before it), then the hole; advances SND.NXT past both.
fn send_split(c: &mut Ctx, wire: &[u8], split: usize) -> Result<()> {
    let mut ahead = c.p.seg(&wire[split..]);
    ahead.seq = c.p.snd_nxt.wrapping_add(split as u32);
    c.p.send_seg(&ahead)?;
    c.p.poll(std::time::Duration::from_millis(50))?;
    c.p.inbox.clear();
    let first = c.p.seg(&wire[..split]);
    c.p.send_seg(&first)?;
    c.p.snd_nxt = c.p.snd_nxt.wrapping_add(wire.len() as u32);
    Ok(())
}

/// A 200-octet RDMA Write and a 700-octet one after it (its marker at stream position 512
/// bent by `bend`, its CRC recomputed); the second FPDU is sent first, wholly inside a
/// segment ahead of RCV.NXT, then the first fills the hole. Both must be placed; with
/// `direct`, exactly that many FPDUs straight from the segment ahead.
fn two_fpdus_out_of_order(c: &mut Ctx, bend: fn(&mut [u8]), direct: Option<u64>) -> Result<()> {
    if position(c)? != 0 {
        bail!("the script expects to start at stream position 0");
    }
    let (d1, d2) = (marker_data(3)[..200].to_vec(), marker_data(4));
    let mut enc = FpduEncoder::at_position(0, true);
    let mut wire = Vec::new();
    enc.encode(&write_ulpdu(c.env.stag(), c.slot, &d1), &mut wire)
        .map_err(|e| anyhow!("encoding: {e}"))?;
    let split = wire.len();
    enc.encode(&write_ulpdu(c.env.stag(), c.slot + 1024, &d2), &mut wire)
        .map_err(|e| anyhow!("encoding: {e}"))?;
    if split >= 512 || wire.len() < 600 {
        bail!("the second FPDU to span stream position 512");
    }
    let ptr = (512 - split) as u16;
    if wire[514..516] != ptr.to_be_bytes() {
        bail!("a marker with FPDUPTR {ptr} at stream position 512");
    }
    bend(&mut wire[512..516]);
    let n = wire.len();
    let crc = mpa::crc::crc32c(&wire[split..n - 4]);
    wire[n - 4..].copy_from_slice(&crc.to_le_bytes());
    let before = rx_stats(c)?;
    send_split(c, &wire, split)?;
    c.placed.push((c.slot, d1));
    c.placed.push((c.slot + 1024, d2));
    c.wait_acked()?;
    let after = rx_stats(c)?;
    let placed_direct = after.placed_direct - before.placed_direct;
    let rejected = after.located_rejected - before.located_rejected;
    if let Some(want) = direct {
        if placed_direct != want {
            bail!("rx.placed_direct +{want} (the FPDU ahead located by its marker), got +{placed_direct}");
        }
    }
    c.note = format!("rx.placed_direct +{placed_direct}, rx.located_rejected +{rejected}; ");
    Ok(())
}

/// One 700-octet RDMA Write (markers at stream positions 0 and 512) whose marker at 512 is
/// bent by `bend` (CRC recomputed), cut at wire offset 300: the part with the bent marker
/// goes first, ahead of RCV.NXT, then the hole. With `forged`, ULPDU octets 492.. (right
/// behind the marker at 512) hold a complete FPDU with a valid CRC writing 64 octets to
/// slot+[`FORGED_AT`]: what a marker with FPDUPTR 0 would point at.
fn one_fpdu_split(c: &mut Ctx, bend: fn(&mut [u8]), forged: bool) -> Result<()> {
    if position(c)? != 0 {
        bail!("the script expects to start at stream position 0");
    }
    let mut d = marker_data(1);
    if forged {
        let f = fpdu_bytes(
            &write_ulpdu(c.env.stag(), c.slot + FORGED_AT, &forged_data(c)),
            true,
        );
        d[492..492 + f.len()].copy_from_slice(&f);
    }
    let mut wire = Vec::new();
    FpduEncoder::at_position(0, true)
        .encode(&write_ulpdu(c.env.stag(), c.slot, &d), &mut wire)
        .map_err(|e| anyhow!("encoding: {e}"))?;
    if wire.len() < 600 || wire[514..516] != [0x01, 0xfc] {
        bail!("no marker with FPDUPTR 508 at wire offset 512");
    }
    bend(&mut wire[512..516]);
    let n = wire.len();
    let crc = mpa::crc::crc32c(&wire[..n - 4]);
    wire[n - 4..].copy_from_slice(&crc.to_le_bytes());
    let before = rx_stats(c)?;
    send_split(c, &wire, 300)?;
    c.p.poll(std::time::Duration::from_millis(100))?;
    let after = rx_stats(c)?;
    c.note = format!(
        "rx.placed_direct +{}, rx.located_rejected +{}; ",
        after.placed_direct - before.placed_direct,
        after.located_rejected - before.located_rejected
    );
    Ok(())
}
