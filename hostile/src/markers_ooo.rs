//! Markers on the out-of-order path (RFC 5044 §4.3, §8 error 3), the Responder requiring
//! them: a segment ahead of RCV.NXT whose marker is honest, has RESERVED ≠ 0, points before
//! the segment, points into the segment at no FPDU, or points at a forged FPDU with a valid
//! CRC inside another FPDU's data; then the hole is filled. The locator may only place what
//! it verified, and the in-order stream decides: the honest FPDUs are placed octet-exact,
//! a wrong marker ends the flow with Terminate 2/0/3 and the FPDU it sits in is not placed.

use super::classes::{marked, marker_data, write_not_placed};
use super::{Class, Ctx, Expect as E, Setup};
use anyhow::{anyhow, bail, Result};
use mpa::encoder::FpduEncoder;
use mpa_ctl_proto::stats::RxStats;
use mpa_harness::hostile_peer::write_ulpdu;

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
const FORGED_AT: u64 = 3072;

/// After the forged-FPDU class's Terminate: the real FPDU is not placed, and the forged one
/// was: the locator verified it by its own CRC (its marker, its length, its CRC all agree)
/// and placed it ahead before the in-order stream showed that the marker lied. Inherent in
/// placing ahead of the stream (RFC 5041 §5.1 lets tagged data be placed out of order; on an
/// error the tagged buffer's contents are undefined to the ULP): the octets land only where
/// the same peer could write anyway (its STag, rights and bounds checked as for any write),
/// and no completion reports them, since an FPDU placed ahead completes only when the
/// in-order stream reaches it, which the Terminate forestalls.
fn forged_after(c: &mut Ctx) -> Result<()> {
    c.untouched(0, 700)?;
    if c.env.read(c.slot + FORGED_AT, 64) != forged_data(c) {
        bail!("the forged FPDU's 64 octets placed ahead at slot+{FORGED_AT}, got other octets");
    }
    let note = std::mem::take(&mut c.note);
    c.note = format!(
        "{note}the forged FPDU placed ahead (64 octets at slot+{FORGED_AT}), never completed; "
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

/// The datapath locates FPDUs ahead only once it has seen the first FPDU in order: a
/// 488-octet write at slot+3200 whose FPDU (after the marker at position 0) ends exactly at
/// stream position 512, so that what follows starts at a marker position as at 0.
fn open_to_512(c: &mut Ctx) -> Result<()> {
    if position(c)? != 0 {
        bail!("the script expects to start at stream position 0");
    }
    let d = marker_data(9)[..488].to_vec();
    c.write(3200, &d)?;
    c.wait_acked()?;
    if position(c)? != 512 {
        bail!(
            "the opening write to end at stream position 512, got {}",
            position(c)?
        );
    }
    Ok(())
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
    open_to_512(c)?;
    let (d1, d2) = (marker_data(3)[..200].to_vec(), marker_data(4));
    let mut enc = FpduEncoder::at_position(512, true);
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
    // The ACK stays in the inbox for the runner's own wait.
    let want = c.p.snd_nxt;
    let Some(ack) =
        c.p.wait_for(std::time::Duration::from_secs(3), |r| r.ack == Some(want))?
    else {
        let t = c.p.inbox.iter().find_map(|r| r.terminate());
        bail!("no ACK of {want} within 3 s (Terminate seen: {t:?})");
    };
    c.p.inbox.push(ack);
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
    open_to_512(c)?;
    let mut d = marker_data(1);
    if forged {
        // Its wire image as a sender would lay it at stream position 1024 (a marker
        // position): the leading marker (FPDUPTR 0) is covered by its CRC. The marker the
        // bend writes at 1024 is that leading marker; the rest follows it.
        let mut f = Vec::new();
        FpduEncoder::at_position(1024, true)
            .encode(
                &write_ulpdu(c.env.stag(), c.slot + FORGED_AT, &forged_data(c)),
                &mut f,
            )
            .map_err(|e| anyhow!("encoding: {e}"))?;
        if f[..4] != [0, 0, 0, 0] {
            bail!("a leading marker 0000 on the forged FPDU");
        }
        d[492..492 + f.len() - 4].copy_from_slice(&f[4..]);
    }
    let mut wire = Vec::new();
    FpduEncoder::at_position(512, true)
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
