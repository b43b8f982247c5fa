//! IPv4 header classes beside the TCP ones of the first table: a bad header checksum, a
//! total length beyond the frame, header options (valid: RFC 1122 §3.2.1.8, a host MUST
//! accept them) and octets after the IP datagram (Ethernet padding: not TCP payload).

use super::classes::{class, hostile_write};
use super::{Class, Counter as C, Ctx, Expect as E};
use anyhow::{bail, Result};

/// The IPv4 header classes.
pub static CLASSES: &[Class] = &[
    class("bad-ipv4-header-checksum", E::Silent(C::Malformed), |c| {
        let mut f = v4_frame(c)?;
        f[24] ^= 0x5a;
        c.p.send_raw(&f)
    }),
    class(
        "ipv4-total-length-beyond-frame",
        E::Silent(C::Malformed),
        |c| {
            let mut f = v4_frame(c)?;
            let total = u16::from_be_bytes([f[16], f[17]]) + 40;
            f[16..18].copy_from_slice(&total.to_be_bytes());
            ipv4_checksum(&mut f);
            c.p.send_raw(&f)
        },
    ),
    class("ipv4-header-options", E::Placed, |c| {
        // Four octets of options (NOP, NOP, NOP, EOL): IHL 6, the segment otherwise valid.
        let d = c.pattern(0x51);
        let s = c.p.seg(&c.write_fpdu(0, &d));
        let f = c.p.frame(&s)?;
        let mut v = f[..34].to_vec();
        v.extend_from_slice(&[1, 1, 1, 0]);
        v.extend_from_slice(&f[34..]);
        v[14] = 0x46;
        let total = u16::from_be_bytes([v[16], v[17]]) + 4;
        v[16..18].copy_from_slice(&total.to_be_bytes());
        ipv4_checksum(&mut v);
        c.p.send_raw(&v)?;
        c.p.snd_nxt = c.p.snd_nxt.wrapping_add(s.payload.len() as u32);
        c.placed.push((c.slot, d));
        Ok(())
    }),
    class("octets-after-the-ip-datagram", E::Placed, |c| {
        // 40 octets after the datagram's total length (as Ethernet padding would be): not
        // payload; were they taken, the stream would be off by 40 and the next write fail.
        let d = c.pattern(0x52);
        let s = c.p.seg(&c.write_fpdu(0, &d));
        let mut f = c.p.frame(&s)?;
        f.extend_from_slice(&[0xa5; 40]);
        c.p.send_raw(&f)?;
        c.p.snd_nxt = c.p.snd_nxt.wrapping_add(s.payload.len() as u32);
        c.placed.push((c.slot, d));
        Ok(())
    }),
];

/// The frame of the hostile write (never placed), checked to be untagged IPv4 without
/// options.
fn v4_frame(c: &Ctx) -> Result<Vec<u8>> {
    let f = c.p.frame(&hostile_write(c))?;
    if f.len() < 54 || f[12..14] != [0x08, 0x00] || f[14] != 0x45 {
        bail!("an untagged IPv4 frame without options to bend");
    }
    Ok(f)
}

/// Rewrites the IPv4 header checksum of an untagged frame (any IHL).
fn ipv4_checksum(f: &mut [u8]) {
    let ihl = usize::from(f[14] & 0x0f) * 4;
    f[24] = 0;
    f[25] = 0;
    let sum: u32 = f[14..14 + ihl]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = !((sum & 0xffff) + (sum >> 16)) as u16;
    f[24..26].copy_from_slice(&sum.to_be_bytes());
}
