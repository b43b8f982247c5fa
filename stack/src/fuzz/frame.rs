//! Frame-level fuzzing: a received frame, hostile in every octet, parsed and checked as a
//! follower of a batch (`wire::frame::BatchHeader`). Called by the `frame` cargo-fuzz target
//! (`fuzz/`) and by a property test, so CI runs it too.
//!
//! Input: one octet of configuration (IPv6 or IPv4, a VLAN tag, TCP checksum verified, the
//! payload's CRC taken, the mutations' checksums filled again), two octets of payload length,
//! then records of `offset u8 | xor u8` applied to a well-formed follower of a batch (the
//! first frame's headers but for sequence number, PSH and IPv4 identification). The mutated
//! frame is parsed, and checked against the batch's header: whenever the check takes it as a
//! follower, the parse must take it too, with the same addresses, ports, VLAN tag, control bits
//! but PSH, window and options (`TcpRepr::continued_by`), payload and CRC. The raw input is
//! also parsed, and taken as a batch's header, as a frame of its own.

use crate::wire::frame::{parse_tcp_frame_with_payload_crc, BatchHeader, Follower, FrameTemplate};
use crate::wire::ip::{Ipv4Packet, IPV4_HEADER_LEN};
use crate::wire::tcp::{TcpFlags, TcpOptions, TcpPacket, TcpRepr, TcpTimestamps};
use mpa::seq::SeqNumber;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

/// A segment of a batch as a Linux sender writes them (timestamps on): `seq`, PSH or not,
/// IPv4 identification `ident`, `len` payload octets; with a VLAN tag when `vid` is given.
pub(crate) fn batch_segment(
    v6: bool,
    vid: Option<u16>,
    seq: u32,
    psh: bool,
    ident: u16,
    len: usize,
) -> Vec<u8> {
    let (a, b): (SocketAddr, SocketAddr) = if v6 {
        (
            SocketAddr::new([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1].into(), 40001),
            SocketAddr::new([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0xaa].into(), 7777),
        )
    } else {
        (
            SocketAddr::new([10, 1, 2, 3].into(), 40001),
            SocketAddr::new([10, 3, 2, 1].into(), 7777),
        )
    };
    let mac_a = [0x52, 0x54, 0, 0xab, 0xcd, 0xef];
    let mac_b = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
    let Ok(t) = FrameTemplate::new(mac_a, mac_b, a, b) else {
        return Vec::new();
    };
    let r = TcpRepr {
        src_port: 40001,
        dst_port: 7777,
        seq_number: SeqNumber(seq),
        ack_number: Some(SeqNumber(0x1234_5678)),
        flags: if psh {
            TcpFlags::PSH
        } else {
            TcpFlags::empty()
        },
        window_len: 1000,
        urgent_at: 0,
        options: TcpOptions {
            timestamps: Some(TcpTimestamps {
                tsval: 0x0a1b_2c3d,
                tsecr: 0x00c0_ffee,
            }),
            ..TcpOptions::default()
        },
    };
    let l = t.l2l3_len();
    let mut buf = vec![0u8; l + 60 + len];
    let Ok(hl) = r.emit(&mut TcpPacket::new_unchecked(&mut buf[l..])) else {
        return Vec::new();
    };
    for (i, o) in buf[l + hl..l + hl + len].iter_mut().enumerate() {
        *o = (i * 13 + usize::from(ident)) as u8;
    }
    let Ok(n) = t.finish(&mut buf, hl + len) else {
        return Vec::new();
    };
    buf.truncate(n);
    if !v6 {
        buf[18..20].copy_from_slice(&ident.to_be_bytes());
        refill_ipv4_checksum(&mut buf, 14);
    }
    match vid {
        Some(vid) => [
            &buf[..12],
            &[0x81, 0x00],
            &vid.to_be_bytes()[..],
            &buf[12..],
        ]
        .concat(),
        None => buf,
    }
}

/// Fills the IPv4 header checksum (IPv4) and the TCP checksum of `frame`, its IP header at
/// `ip`, again after a change, where its lengths still allow: a changed header octet is then
/// seen by what compares headers, not only by the checksums.
pub(crate) fn refill_checksums(frame: &mut [u8], ip: usize, v6: bool) {
    if !v6 {
        refill_ipv4_checksum(frame, ip);
    }
    refill_tcp_checksum(frame, ip, v6);
}

/// Fills the IPv4 header checksum of the header at `ip` again, where its length allows.
fn refill_ipv4_checksum(frame: &mut [u8], ip: usize) {
    let Some(&ver_ihl) = frame.get(ip) else {
        return;
    };
    let hl = usize::from(ver_ihl & 0x0f) * 4;
    if let Some(h) = frame.get_mut(ip..ip + hl).filter(|_| hl >= IPV4_HEADER_LEN) {
        Ipv4Packet::new_unchecked(h).fill_checksum();
    }
}

/// Fills the TCP checksum of `frame` (its IP header at `ip`) again, where its lengths allow.
fn refill_tcp_checksum(frame: &mut [u8], ip: usize, v6: bool) {
    let be16 = |f: &[u8], at: usize| f.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let (tcp, tcp_len) = match (v6, frame.get(ip)) {
        (true, Some(_)) => (ip + 40, be16(frame, ip + 4).map(usize::from)),
        (false, Some(&ver_ihl)) => {
            let hl = usize::from(ver_ihl & 0x0f) * 4;
            let total = be16(frame, ip + 2).map(usize::from);
            (ip + hl, total.map(|t| t.saturating_sub(hl)))
        }
        (_, None) => return,
    };
    let Some(tcp_len) = tcp_len.filter(|&l| l >= 20 && tcp + l <= frame.len()) else {
        return;
    };
    // The addresses lie before the segment's end (checked above), whatever the header says.
    let segment = tcp..tcp + tcp_len;
    if v6 {
        let a = |at: usize| {
            Ipv6Addr::from(<[u8; 16]>::try_from(&frame[ip + at..ip + at + 16]).unwrap_or_default())
        };
        let (src, dst) = (a(8), a(24));
        TcpPacket::new_unchecked(&mut frame[segment]).fill_checksum_v6(src, dst);
    } else {
        let a = |at: usize| {
            Ipv4Addr::from(<[u8; 4]>::try_from(&frame[ip + at..ip + at + 4]).unwrap_or_default())
        };
        let (src, dst) = (a(12), a(16));
        TcpPacket::new_unchecked(&mut frame[segment]).fill_checksum_v4(src, dst);
    }
}

/// What the parse says of `frame` as a follower of the batch whose first frame is `first`:
/// `None` where the parse and `TcpRepr::continued_by` would not take it as one.
pub(crate) fn parsed_follower<'f>(
    first: &[u8],
    frame: &'f [u8],
    verify: bool,
    crc: bool,
) -> Option<Follower<'f>> {
    let head = parse_tcp_frame_with_payload_crc(first, true, false).ok()?;
    let head_repr = TcpRepr::parse(&head.tcp).ok()?;
    let f = parse_tcp_frame_with_payload_crc(frame, verify, crc).ok()?;
    let r = TcpRepr::parse(&f.tcp).ok()?;
    let payload = f.tcp.payload_in_buffer();
    ((f.dst, f.src) == (head.dst, head.src)
        && f.vlan == head.vlan
        && head_repr.continued_by(r.seq_number, &r, payload.len()))
    .then_some(Follower {
        seq_number: r.seq_number,
        flags: r.flags,
        payload,
        payload_crc: f.payload_crc,
    })
}

/// Runs one input; panics only on a broken invariant (which is the finding).
pub fn fuzz_frame(data: &[u8]) {
    let mut own = BatchHeader::default();
    if own.take(data) {
        let _ = own.follower(data, true, true);
    }
    let _ = parse_tcp_frame_with_payload_crc(data, true, true);
    let Some((&cfg, rest)) = data.split_first() else {
        return;
    };
    let (v6, vid) = (cfg & 1 != 0, (cfg & 2 != 0).then_some(42));
    let (verify, crc, refill) = (cfg & 4 != 0, cfg & 8 != 0, cfg & 16 != 0);
    let (len, records) = match rest {
        [a, b, records @ ..] => (usize::from(u16::from_be_bytes([*a, *b]) % 1500), records),
        _ => (1448, &[][..]),
    };
    let first = batch_segment(v6, vid, 1, false, 1, 1448);
    let mut header = BatchHeader::default();
    assert!(header.take(&first), "a well-formed first frame is taken");
    let mut frame = batch_segment(v6, vid, 1449, true, 2, len.max(1));
    for r in records.chunks_exact(2) {
        if let Some(o) = frame.get_mut(usize::from(r[0])) {
            *o ^= r[1];
        }
    }
    if refill {
        refill_checksums(&mut frame, if vid.is_some() { 18 } else { 14 }, v6);
    }
    if let Some(got) = header.follower(&frame, verify, crc) {
        assert_eq!(
            Some(got),
            parsed_follower(&first, &frame, verify, crc),
            "a follower the parse would not batch so"
        );
    }
    if records.chunks_exact(2).all(|r| r[1] == 0) {
        assert!(
            header.follower(&frame, verify, crc).is_some(),
            "an unchanged follower is taken"
        );
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// Arbitrary inputs: no panic, no broken invariant.
        #[test]
        fn arbitrary_frames_never_break_the_follower_check(
            data in proptest::collection::vec(any::<u8>(), 0..64)
        ) {
            super::fuzz_frame(&data);
        }
    }

    /// The harness reaches the follower check's acceptance with and without changes.
    #[test]
    fn unchanged_and_refilled_followers_are_taken() {
        for cfg in 0..32u8 {
            super::fuzz_frame(&[cfg, 0x05, 0xa8]);
            // The IPv4 identification changed, checksums filled again.
            super::fuzz_frame(&[cfg | 16, 0x05, 0xa8, 18, 0x77, 19, 0x01]);
        }
    }
}
