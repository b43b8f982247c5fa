//! The Internet checksum's octet pass with AVX2 or AVX-512, chosen at run time.
//!
//! The sum is taken over 32-bit native-endian words added into 64-bit lanes: 2^32 ≡ 2^16 ≡
//! 1 (mod 0xffff), so any such sum folds to the 16-bit ones' complement sum of the same
//! octets (RFC 1071 §2(B)/(C): order and word size do not matter). A lane gains one word
//! (below 2^32) per 64-octet block, so no end-around carry is needed inside the loop, and
//! the sum of the sixteen lanes cannot wrap below 2^28 blocks (16 GiB; frames are at most
//! 9 KiB). 32-bit words are widened with `unpack{lo,hi}_epi32` against zero into four
//! 256-bit or two 512-bit accumulators, so the adds are independent. Written with
//! intrinsics: the compiler's own vectorization of the plain loop used gathers. `unsafe` is
//! for the unaligned loads (inside the block) and for calling the `#[target_feature]`
//! functions once the feature was detected. `super::tests` checks every kernel against the
//! scalar sum.
#![allow(unsafe_code)]

use core::arch::x86_64::*;

/// Below this many octets the scalar loop runs: the vector set-up and the lane reduction
/// cost more than they save on a header.
pub(super) const MIN_LEN: usize = 128;

/// Octets per vector iteration.
const BLOCK: usize = 64;

/// The kernels, for tests and benchmarks to call one by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kernel {
    Avx2,
    Avx512,
}

impl Kernel {
    /// The best kernel this CPU runs, if any. `is_x86_feature_detected!` caches its answer
    /// (one relaxed atomic load per call).
    #[inline]
    pub(super) fn detect() -> Option<Kernel> {
        if std::is_x86_feature_detected!("avx512f") {
            Some(Kernel::Avx512)
        } else if std::is_x86_feature_detected!("avx2") {
            Some(Kernel::Avx2)
        } else {
            None
        }
    }

    /// Whether this CPU runs `self`.
    #[cfg(test)]
    pub(super) fn available(self) -> bool {
        match self {
            Kernel::Avx2 => std::is_x86_feature_detected!("avx2"),
            Kernel::Avx512 => std::is_x86_feature_detected!("avx512f"),
        }
    }

    /// The sum of `data`'s whole 64-octet blocks as 32-bit native words (unfolded; see the
    /// module documentation) and the octets after them.
    #[inline]
    pub(super) fn sum_blocks(self, data: &[u8]) -> (u64, &[u8]) {
        match self {
            // SAFETY: the kernels' only requirement is their target feature, and `Kernel`
            // values come from `detect` (or a test that checked `available`) on this CPU.
            Kernel::Avx2 => unsafe { sum_blocks_avx2(data) },
            // SAFETY: as above.
            Kernel::Avx512 => unsafe { sum_blocks_avx512(data) },
        }
    }
}

#[target_feature(enable = "avx2")]
fn sum_blocks_avx2(data: &[u8]) -> (u64, &[u8]) {
    let zero = _mm256_setzero_si256();
    let mut acc = [zero; 4];
    let mut blocks = data.chunks_exact(BLOCK);
    for b in &mut blocks {
        let p = b.as_ptr();
        // SAFETY: `b` is 64 octets long: both unaligned 32-octet loads lie inside it.
        let (x, y) = unsafe {
            (
                _mm256_loadu_si256(p.cast()),
                _mm256_loadu_si256(p.add(32).cast()),
            )
        };
        // Each 32-bit word zero-extended into a 64-bit lane: the low and the high pairs of
        // every 128-bit half.
        acc[0] = _mm256_add_epi64(acc[0], _mm256_unpacklo_epi32(x, zero));
        acc[1] = _mm256_add_epi64(acc[1], _mm256_unpackhi_epi32(x, zero));
        acc[2] = _mm256_add_epi64(acc[2], _mm256_unpacklo_epi32(y, zero));
        acc[3] = _mm256_add_epi64(acc[3], _mm256_unpackhi_epi32(y, zero));
    }
    let v = _mm256_add_epi64(
        _mm256_add_epi64(acc[0], acc[1]),
        _mm256_add_epi64(acc[2], acc[3]),
    );
    let lanes = [
        _mm256_extract_epi64::<0>(v),
        _mm256_extract_epi64::<1>(v),
        _mm256_extract_epi64::<2>(v),
        _mm256_extract_epi64::<3>(v),
    ];
    (lanes.iter().map(|&l| l as u64).sum(), blocks.remainder())
}

#[target_feature(enable = "avx512f")]
fn sum_blocks_avx512(data: &[u8]) -> (u64, &[u8]) {
    let zero = _mm512_setzero_si512();
    let (mut lo, mut hi) = (zero, zero);
    let mut blocks = data.chunks_exact(BLOCK);
    for b in &mut blocks {
        // SAFETY: `b` is 64 octets long: the unaligned 64-octet load is exactly it.
        let x = unsafe { _mm512_loadu_si512(b.as_ptr().cast()) };
        lo = _mm512_add_epi64(lo, _mm512_unpacklo_epi32(x, zero));
        hi = _mm512_add_epi64(hi, _mm512_unpackhi_epi32(x, zero));
    }
    let sum = _mm512_reduce_add_epi64(_mm512_add_epi64(lo, hi)) as u64;
    (sum, blocks.remainder())
}
