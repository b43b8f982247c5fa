//! The Internet checksum (RFC 1071) and the IPv4 / IPv6 pseudo-headers TCP covers
//! (RFC 9293 §3.1, RFC 8200 §8.1).
//!
//! Sums are kept unfolded in a `u64` so that pieces (pseudo-header, header, payload) can be
//! added in any order and folded once.

use std::net::{Ipv4Addr, Ipv6Addr};

/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;

/// Adds `data` to a running unfolded one's-complement sum. `data` is taken as a sequence of
/// big-endian 16-bit words; an odd trailing octet is padded with zero (RFC 1071 §4.1). Only
/// the last piece of a sum may have odd length.
#[inline]
pub fn sum(mut acc: u64, data: &[u8]) -> u64 {
    // 32-bit words into a 64-bit accumulator: carries cannot overflow for any buffer below
    // 2^32 words, and the loop vectorises.
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let rest = words.remainder();
    let mut tail = [0u8; 4];
    tail[..rest.len()].copy_from_slice(rest);
    acc + u64::from(u32::from_be_bytes(tail))
}

/// Folds an unfolded sum to 16 bits (without the final complement).
#[inline]
pub fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The unfolded sum of the IPv4 pseudo-header for a TCP segment of `tcp_len` octets
/// (header and payload).
#[inline]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, tcp_len: u32) -> u64 {
    let mut acc = sum(0, &src.octets());
    acc = sum(acc, &dst.octets());
    acc + u64::from(PROTO_TCP) + u64::from(tcp_len)
}

/// The unfolded sum of the IPv6 pseudo-header (RFC 8200 §8.1) for a TCP segment of
/// `tcp_len` octets.
#[inline]
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, tcp_len: u32) -> u64 {
    let mut acc = sum(0, &src.octets());
    acc = sum(acc, &dst.octets());
    acc + u64::from(PROTO_TCP) + u64::from(tcp_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The textbook definition, 16 bits at a time with end-around carry.
    fn naive(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for pair in data.chunks(2) {
            let w = u32::from(pair[0]) << 8 | u32::from(*pair.get(1).unwrap_or(&0));
            s += w;
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn matches_naive_sum() {
        let data: Vec<u8> = (0..1001u32).map(|i| (i * 37 + 11) as u8).collect();
        for len in [0, 1, 2, 3, 4, 5, 7, 8, 63, 64, 65, 1000, 1001] {
            assert_eq!(fold(sum(0, &data[..len])), naive(&data[..len]), "len {len}");
        }
    }

    /// RFC 1071 §3 example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
    #[test]
    fn rfc1071_example() {
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(0, &d)), 0xddf2);
    }

    #[test]
    fn all_ones_folds() {
        let d = [0xffu8; 4096];
        assert_eq!(fold(sum(0, &d)), 0xffff);
    }
}
