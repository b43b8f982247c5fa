//! The Internet checksum (RFC 1071) and the IPv4 / IPv6 pseudo-headers TCP covers
//! (RFC 9293 §3.1, RFC 8200 §8.1).
//!
//! Sums are kept unfolded in a `u64` so that pieces (pseudo-header, header, payload) can be
//! added in any order and folded once.
//!
//! The octet pass over a segment runs on AVX-512 or AVX2 when the CPU has them (`x86`,
//! chosen at run time), else on the scalar loop here; both give the same folded sum.

#[cfg(target_arch = "x86_64")]
mod x86;

use std::net::{Ipv4Addr, Ipv6Addr};

/// IP protocol number of TCP.
pub(crate) const PROTO_TCP: u8 = 6;

/// Adds `data` to a running unfolded one's-complement sum. `data` is taken as a sequence of
/// big-endian 16-bit words; an odd trailing octet is padded with zero (RFC 1071 §4.1). Only
/// the last piece of a sum may have odd length.
#[inline]
pub(crate) fn sum(acc: u64, data: &[u8]) -> u64 {
    // The ones' complement sum is independent of byte order (RFC 1071 §2(B)): `data` is
    // summed in native order and the folded result read back as big-endian.
    let native = fold(sum_native(data)).to_ne_bytes();
    acc + u64::from(u16::from_be_bytes(native))
}

/// [`sum`] of a short header whose length is a multiple of 4 (IPv4, TCP): its 32-bit
/// big-endian words added in registers, each congruent to the sum of its two 16-bit words,
/// left unfolded. `sum` goes through the SIMD kernel's set-up and a scalar tail loop, several
/// times the instructions for 20 to 60 octets. A tail of 1–3 octets (never, for a header)
/// is summed by `sum`.
#[inline]
pub(crate) fn sum_header(acc: u64, data: &[u8]) -> u64 {
    let words = data.chunks_exact(4);
    let tail = words.remainder();
    let acc = words.fold(acc, |a, w| {
        a + u64::from(u32::from_be_bytes(w.try_into().unwrap_or_default()))
    });
    if tail.is_empty() {
        acc
    } else {
        sum(acc, tail)
    }
}

/// [`sum`] of `data`, and the CRC32c of the same octets from the same pass where the CPU has
/// a kernel that folds both (`mpa::crc::crc32c_append_summing`): a received segment's payload
/// is then read once for its checksum and its FPDUs' CRCs (docs/architecture.md, "Receive
/// path", "Runs of segments"). `data` must start at an even offset of the data summed.
#[inline]
pub(crate) fn sum_with_crc32c(acc: u64, data: &[u8]) -> (u64, u32) {
    let (crc, blocks, covered) = mpa::crc::crc32c_append_summing(0, data);
    // `covered` is a multiple of 64: the rest's 16-bit words keep their places.
    let native = add_carry(blocks, sum_native(&data[covered..]));
    let native = fold(native).to_ne_bytes();
    (acc + u64::from(u16::from_be_bytes(native)), crc)
}

/// Whether a TCP segment's checksum holds, `pseudo` the sum of its pseudo-header and its
/// header `header_len` octets (a multiple of 4, so the payload starts at an even offset):
/// `None` when it fails, else `Some` of the payload's CRC32c taken in the same pass when
/// `take_crc` ([`sum_with_crc32c`]), `Some(None)` otherwise. RFC 9293 §3.1 (MUST-3): the
/// receiver checks it, a bad segment is dropped.
#[inline]
pub(crate) fn verify_tcp(
    pseudo: u64,
    segment: &[u8],
    header_len: usize,
    take_crc: bool,
) -> Option<Option<u32>> {
    let (sum, crc) = if take_crc {
        let (header, payload) = segment.split_at(header_len.min(segment.len()));
        let (sum, crc) = sum_with_crc32c(sum_header(pseudo, header), payload);
        (sum, Some(crc))
    } else {
        (sum(pseudo, segment), None)
    };
    (fold(sum) == 0xffff).then_some(crc)
}

/// [`sum`] of a piece that starts `odd` octets after an even offset of the data summed: at an
/// odd offset every octet takes the other half of its 16-bit word, and the ones' complement
/// sum of octets that swapped places is the swapped sum (RFC 1071 §2(B)). For data split
/// into pieces of any length (a frame in several receive descriptors).
#[inline]
pub(crate) fn sum_at(acc: u64, data: &[u8], odd: bool) -> u64 {
    if odd {
        acc + u64::from(fold(sum(0, data)).swap_bytes())
    } else {
        sum(acc, data)
    }
}

/// [`sum_with_crc32c`] of a piece that starts `odd` octets after an even offset of the data
/// summed ([`sum_at`]'s rule): the CRC32c is of the piece's octets as they are.
#[inline]
pub(crate) fn sum_at_with_crc32c(acc: u64, data: &[u8], odd: bool) -> (u64, u32) {
    if odd {
        let (s, crc) = sum_with_crc32c(0, data);
        (acc + u64::from(fold(s).swap_bytes()), crc)
    } else {
        sum_with_crc32c(acc, data)
    }
}

/// `a + b` with the carry out of bit 63 added back in (end-around carry). Cannot overflow
/// twice: on a carry the wrapped sum is at most 2^64 - 2.
#[inline(always)]
fn add_carry(a: u64, b: u64) -> u64 {
    let (s, c) = a.overflowing_add(b);
    s + u64::from(c)
}

/// The unfolded ones' complement sum of `data` read as native-endian 16-bit words (a
/// trailing odd octet padded with zero). 32 octets per step into four independent
/// accumulators, so the carry chains overlap; unaligned reads through `from_ne_bytes`.
#[inline]
fn sum_native(data: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if data.len() >= x86::MIN_LEN {
        if let Some(k) = x86::Kernel::detect() {
            let (blocks, rest) = k.sum_blocks(data);
            // `rest` starts at a multiple of 64 octets: its 16-bit words keep their places.
            return add_carry(blocks, sum_native_scalar(rest));
        }
    }
    sum_native_scalar(data)
}

/// [`sum_native`] on any CPU.
#[inline]
fn sum_native_scalar(data: &[u8]) -> u64 {
    let mut a = [0u64; 4];
    let mut blocks = data.chunks_exact(32);
    for b in &mut blocks {
        for (i, acc) in a.iter_mut().enumerate() {
            let w = u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
            *acc = add_carry(*acc, w);
        }
    }
    let mut acc = add_carry(add_carry(a[0], a[1]), add_carry(a[2], a[3]));
    let mut words = blocks.remainder().chunks_exact(8);
    for w in &mut words {
        acc = add_carry(acc, u64::from_ne_bytes(w.try_into().unwrap()));
    }
    add_carry(acc, sum_tail(words.remainder()))
}

/// The sum of the last 0..=7 octets (starting at an even offset) as native 16-bit words, the
/// odd last octet padded with zero: a 32-bit word is congruent to the sum of its two 16-bit
/// halves. Read in registers, piece by piece: copying the tail into a zeroed `[u8; 8]` and
/// loading that as a `u64` went through `memcpy` and a failed store forward, which waits for
/// every earlier store (the region copy included) — 40 % of `parse_tcp_frame`'s samples, for
/// the 4-octet tail of the IPv4 header.
#[inline(always)]
fn sum_tail(mut rest: &[u8]) -> u64 {
    let mut acc = 0u64;
    if let Some((w, r)) = rest.split_first_chunk::<4>() {
        acc += u64::from(u32::from_ne_bytes(*w));
        rest = r;
    }
    if let Some((w, r)) = rest.split_first_chunk::<2>() {
        acc += u64::from(u16::from_ne_bytes(*w));
        rest = r;
    }
    if let [b] = *rest {
        acc += u64::from(u16::from_ne_bytes([b, 0]));
    }
    acc
}

/// Folds an unfolded sum to 16 bits (without the final complement).
#[inline]
pub(crate) fn fold(acc: u64) -> u16 {
    // 64 -> 33 -> 32 bits, then 32 -> 17 -> 16, each step keeping the end-around carry.
    let acc = (acc & 0xffff_ffff) + (acc >> 32);
    let acc = (acc & 0xffff_ffff) + (acc >> 32);
    let acc = (acc & 0xffff) + (acc >> 16);
    let acc = (acc & 0xffff) + (acc >> 16);
    acc as u16
}

/// The unfolded sum of the IPv4 pseudo-header for a TCP segment of `tcp_len` octets
/// (header and payload).
#[inline]
pub(crate) fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, tcp_len: u32) -> u64 {
    // Each address as one 32-bit number (≡ the sum of its two big-endian 16-bit words), in
    // registers: the same value `sum` of its octets folds to, without a pass through memory.
    u64::from(src.to_bits()) + u64::from(dst.to_bits()) + u64::from(PROTO_TCP) + u64::from(tcp_len)
}

/// The unfolded sum of the IPv6 pseudo-header (RFC 8200 §8.1) for a TCP segment of
/// `tcp_len` octets.
#[inline]
pub(crate) fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, tcp_len: u32) -> u64 {
    // As for IPv4: each 64-bit half of an address is congruent to the sum of its 16-bit
    // words.
    let halves = |a: Ipv6Addr| {
        let b = a.to_bits();
        add_carry((b >> 64) as u64, b as u64)
    };
    // Folded, so that callers may add to it without overflow, like the IPv4 sum.
    let rest = u64::from(PROTO_TCP) + u64::from(tcp_len);
    u64::from(fold(add_carry(add_carry(halves(src), halves(dst)), rest)))
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

    /// The checksum and CRC taken in one pass are the separate passes' results, at every
    /// length around the kernel's blocks, from any running sum.
    #[test]
    fn sum_with_crc_is_sum_and_crc() {
        let data: Vec<u8> = (0..9100u32)
            .map(|i| ((i * 37 + 11) ^ (i >> 7)) as u8)
            .collect();
        for len in (0..700).chain([1447, 1448, 3840, 8948, 9000]) {
            for acc in [0, 0x1_2345_6789] {
                let d = &data[..len];
                let (s, crc) = sum_with_crc32c(acc, d);
                assert_eq!(fold(s), fold(sum(acc, d)), "len {len}");
                assert_eq!(crc, mpa::crc::crc32c(d), "len {len}");
            }
        }
    }

    /// RFC 1071 §3 example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
    #[test]
    fn rfc1071_example() {
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(0, &d)), 0xddf2);
    }

    /// `n` pseudo-random octets (xorshift64 from `seed`).
    fn noise(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// The sum the old implementation took: 16-bit big-endian words straight into the
    /// accumulator, pseudo-header pieces added as words.
    fn reference_sum(acc: u64, data: &[u8]) -> u64 {
        data.chunks(2).fold(acc, |a, p| {
            a + u64::from(u16::from_be_bytes([p[0], *p.get(1).unwrap_or(&0)]))
        })
    }

    /// Every length 0..2000, at every start offset modulo 8 (unaligned reads), over
    /// pseudo-random octets, both folded alone and after a pseudo-header.
    #[test]
    fn every_length_matches_reference() {
        let data = noise(0x9e37_79b9_7f4a_7c15, 2008);
        let src = Ipv4Addr::new(192, 168, 122, 1);
        let dst = Ipv4Addr::new(192, 168, 122, 57);
        for off in 0..8 {
            for len in 0..2000 {
                let d = &data[off..off + len];
                assert_eq!(fold(sum(0, d)), naive(d), "len {len} off {off}");
                let p = pseudo_header_v4(src, dst, len as u32);
                assert_eq!(fold(sum(p, d)), fold(reference_sum(p, d)), "len {len}");
            }
        }
    }

    /// A header's sum by 32-bit words folds to what `sum` folds to, at every length (headers
    /// are multiples of 4; other lengths take `sum` for their tail) and start offset.
    #[test]
    fn header_sums_match_sum() {
        let data = noise(0x2545_f491_4f6c_dd1d, 72);
        for off in 0..8 {
            for len in 0..64 {
                let d = &data[off..off + len];
                for acc in [0, 0x1_2345, u64::from(u32::MAX) * 3] {
                    assert_eq!(
                        fold(sum_header(acc, d)),
                        fold(sum(acc, d)),
                        "len {len} off {off}"
                    );
                }
            }
        }
        for b in [0x00, 0xff] {
            let d = [b; 60];
            assert_eq!(fold(sum_header(0, &d)), naive(&d), "octet {b:#x}");
        }
    }

    #[test]
    fn extremes_match_reference() {
        for len in 0..200 {
            for b in [0x00, 0x01, 0x80, 0xfe, 0xff] {
                let d = vec![b; len];
                assert_eq!(fold(sum(0, &d)), naive(&d), "len {len} octet {b:#x}");
            }
        }
        for v in [
            0,
            1,
            0xffff,
            0x1_0000,
            0xffff_ffff,
            0x1_0000_0000,
            u64::MAX,
            u64::MAX - 1,
        ] {
            assert_eq!(u64::from(fold(v)) % 0xffff, v % 0xffff, "{v:#x}");
            assert_eq!(fold(v) == 0, v == 0);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Random buffers of random length below 2000 and random IPv4 / IPv6 pseudo-headers:
        /// the fast sum folds to the same value as the byte-pair reference.
        #[test]
        fn matches_reference_with_pseudo_headers(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2000),
            off in 0usize..8,
            s4 in proptest::prelude::any::<[u8; 4]>(),
            d4 in proptest::prelude::any::<[u8; 4]>(),
            s6 in proptest::prelude::any::<[u8; 16]>(),
            d6 in proptest::prelude::any::<[u8; 16]>(),
            len_field in proptest::prelude::any::<u16>(),
        ) {
            let d = &data[off.min(data.len())..];
            proptest::prop_assert_eq!(fold(sum(0, d)), naive(d));
            let p4 = pseudo_header_v4(s4.into(), d4.into(), u32::from(len_field));
            let r4 = reference_sum(0, &[&s4[..], &d4, &[0, PROTO_TCP], &len_field.to_be_bytes()].concat());
            proptest::prop_assert_eq!(fold(p4), fold(r4));
            proptest::prop_assert_eq!(fold(sum(p4, d)), fold(reference_sum(r4, d)));
            let p6 = pseudo_header_v6(s6.into(), d6.into(), u32::from(len_field));
            let r6 = reference_sum(
                0,
                &[&s6[..], &d6, &u32::from(len_field).to_be_bytes(), &[0, 0, 0, PROTO_TCP]].concat(),
            );
            proptest::prop_assert_eq!(fold(p6), fold(r6));
            proptest::prop_assert_eq!(fold(sum(p6, d)), fold(reference_sum(r6, d)));
        }
    }

    /// Every SIMD kernel this CPU runs against the scalar loop: every length 0..1100 at
    /// every start offset 0..64 (alignment), over pseudo-random octets, and runs of the
    /// extreme octets (carries in every lane).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_kernels_match_scalar_exhaustively() {
        let data = noise(0x2545_f491_4f6c_dd1d, 1200);
        let mut ran = 0;
        for k in [x86::Kernel::Avx2, x86::Kernel::Avx512] {
            if !k.available() {
                eprintln!("checksum kernel {k:?}: not on this CPU, not tested");
                continue;
            }
            ran += 1;
            for off in 0..64 {
                for len in 0..1100 {
                    let d = &data[off..off + len];
                    let scalar = fold(sum_native_scalar(d));
                    assert_eq!(fold(simd_sum(k, d)), scalar, "{k:?} len {len} off {off}");
                    assert_eq!(fold(sum(0, d)), naive(d), "len {len} off {off}");
                }
            }
            for b in [0x00, 0x01, 0x80, 0xfe, 0xff] {
                for len in [64, 127, 128, 1448, 9000, 70_000] {
                    let d = vec![b; len];
                    let scalar = fold(sum_native_scalar(&d));
                    assert_eq!(fold(simd_sum(k, &d)), scalar, "{k:?} {b:#x} × {len}");
                    assert_eq!(fold(sum(0, &d)), naive(&d), "{b:#x} × {len}");
                }
            }
        }
        eprintln!("{ran} SIMD checksum kernel(s) tested");
    }

    /// A kernel's sum of `d`, finished by the scalar loop as `sum_native` does.
    #[cfg(target_arch = "x86_64")]
    fn simd_sum(k: x86::Kernel, d: &[u8]) -> u64 {
        let (blocks, rest) = k.sum_blocks(d);
        add_carry(blocks, sum_native_scalar(rest))
    }

    #[cfg(target_arch = "x86_64")]
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1000))]

        /// Random buffers up to a jumbo frame, at random offsets: each kernel this CPU runs,
        /// and the dispatching `sum` after a random pseudo-header, fold to what the scalar
        /// loop and the byte-pair reference give.
        #[test]
        fn simd_kernels_match_scalar(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..9100),
            off in 0usize..64,
            acc in 0u64..(1 << 40),
        ) {
            let d = &data[off.min(data.len())..];
            let scalar = fold(sum_native_scalar(d));
            for k in [x86::Kernel::Avx2, x86::Kernel::Avx512] {
                if k.available() {
                    proptest::prop_assert_eq!(fold(simd_sum(k, d)), scalar, "{:?}", k);
                }
            }
            proptest::prop_assert_eq!(fold(sum(acc, d)), fold(reference_sum(acc, d)));
        }
    }

    #[test]
    fn all_ones_folds() {
        let d = [0xffu8; 4096];
        assert_eq!(fold(sum(0, &d)), 0xffff);
    }
}
