//! Core classes over IPv6 (the bed's fd99::1 → fd99::2; the datapath steers and serves IPv6
//! flows end to end): a placed write, bad checksum, out of window, RST in window and exact,
//! bad CRC, and the XDP program's drops of what it does not parse for a steered host pair
//! (a fragment header, a hop-by-hop options header, a frame cut inside the TCP header), which
//! would otherwise reach ns b's frozen socket.

use super::classes::{class, hostile_write, rst, write_not_placed};
use super::{Class, Counter as C, Ctx, Expect as E, Setup};
use anyhow::{bail, Result};
use mpa_harness::hostile_peer::{fpdu_bytes, write_ulpdu};

/// The IPv6 classes.
pub static CLASSES: &[Class] = &[
    v6("ipv6-write-placed", E::Placed, |c| {
        let d = c.pattern(0x61);
        c.write(0, &d)
    }),
    v6("ipv6-bad-tcp-checksum", E::Silent(C::Malformed), |c| {
        let mut s = hostile_write(c);
        s.bad_checksum = true;
        c.p.send_seg(&s)
    }),
    v6("ipv6-data-beyond-window", E::Acked(C::OutOfWindow), |c| {
        let mut s = hostile_write(c);
        s.seq = s.seq.wrapping_add(c.p.peer_window + 4096);
        c.p.send_seg(&s)
    }),
    v6("ipv6-rst-in-window-inexact", E::Acked(C::BadRst), |c| {
        let s = rst(c, c.p.snd_nxt.wrapping_add(1));
        c.p.send_seg(&s)
    }),
    v6("ipv6-rst-exact", E::Closed, |c| {
        let s = rst(c, c.p.snd_nxt);
        c.p.send_seg(&s)
    }),
    Class {
        after: write_not_placed,
        ..v6("ipv6-bad-crc", E::Terminate(2, 0, 2), |c| {
            let f = fpdu_bytes(&write_ulpdu(c.env.stag(), c.slot, &c.pattern(4)), false);
            c.p.send_data(&f)
        })
    },
    v6("ipv6-fragment-header", E::Silent(C::XdpFragment), |c| {
        // A first fragment (offset 0, M set) of a valid segment: RFC 8200 §4.5.
        with_extension(c, 44, [6, 0, 0x00, 0x01, 0x12, 0x34, 0x56, 0x78])
    }),
    v6("ipv6-later-fragment", E::Silent(C::XdpFragment), |c| {
        // A later fragment (offset 185 × 8, M clear) whose first octets look like our TCP
        // header.
        with_extension(c, 44, [6, 0, 0x05, 0xc8, 0x12, 0x34, 0x56, 0x79])
    }),
    v6("ipv6-hop-by-hop-header", E::Silent(C::XdpIpv6Ext), |c| {
        // Hop-by-hop options (RFC 8200 §4.3): one PadN option filling its 8 octets.
        with_extension(c, 0, [6, 0, 1, 4, 0, 0, 0, 0])
    }),
    v6(
        "ipv6-truncated-in-tcp-header",
        E::Silent(C::XdpMalformed),
        |c| {
            let mut s = hostile_write(c);
            s.truncate = Some(14 + 40 + 10);
            c.p.send_seg(&s)
        },
    ),
];

const fn v6(name: &'static str, expect: E, script: fn(&mut Ctx) -> Result<()>) -> Class {
    Class {
        setup: Setup::Ipv6,
        ..class(name, expect, script)
    }
}

/// Sends the hostile write with one 8-octet extension header (`next` = its Next Header
/// value in the IPv6 header) between the IPv6 header and TCP; the TCP checksum stays valid
/// (the pseudo-header does not cover extension headers).
fn with_extension(c: &mut Ctx, next: u8, ext: [u8; 8]) -> Result<()> {
    let s = hostile_write(c);
    let f = c.p.frame(&s)?;
    if f.len() < 54 || f[12..14] != [0x86, 0xdd] || f[20] != 6 {
        bail!("an untagged IPv6/TCP frame to bend");
    }
    let plen = u16::from_be_bytes([f[18], f[19]]) + 8;
    let mut v = f[..54].to_vec();
    v[18..20].copy_from_slice(&plen.to_be_bytes());
    v[20] = next;
    v.extend_from_slice(&ext);
    v.extend_from_slice(&f[54..]);
    c.p.send_raw(&v)
}
