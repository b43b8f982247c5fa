//! The Internet checksum's octet pass with AVX2 or AVX-512, chosen at run time.
//!
//! The sum is taken over 32-bit native-endian words added into 64-bit lanes: 2^32 ≡ 2^16 ≡
//! 1 (mod 0xffff), so any such sum folds to the 16-bit ones' complement sum of the same
//! octets (RFC 1071 §2(B)/(C): order and word size do not matter), and a lane takes one
//! word per 64-octet block, so it cannot carry out below 2^32 blocks (256 GiB): no
//! end-around carry inside the loop. Sixteen
//! lanes (four 256-bit or two 512-bit accumulators) keep the adds independent. The loop body
//! is plain Rust that the compiler vectorizes (`vpmovzxdq` + `vpaddq`) inside a
//! `#[target_feature]` function; the one `unsafe` is calling that function once the feature
//! was detected. `super::tests` checks every kernel against the scalar sum.
#![allow(unsafe_code)]

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
    sum_blocks(data)
}

#[target_feature(enable = "avx512f")]
fn sum_blocks_avx512(data: &[u8]) -> (u64, &[u8]) {
    sum_blocks(data)
}

/// The vectorizable body, inlined into each `#[target_feature]` function so that it is
/// compiled for that feature.
#[inline(always)]
fn sum_blocks(data: &[u8]) -> (u64, &[u8]) {
    let mut lanes = [0u64; BLOCK / 4];
    let mut blocks = data.chunks_exact(BLOCK);
    for b in &mut blocks {
        for (lane, w) in lanes.iter_mut().zip(b.chunks_exact(4)) {
            *lane += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
        }
    }
    // Each lane is below 2^32 * (len / 64): their sum could carry out only for inputs of
    // gigabytes, but the end-around carry costs nothing here.
    let sum = lanes.iter().fold(0u64, |a, &l| {
        let (s, c) = a.overflowing_add(l);
        s + u64::from(c)
    });
    (sum, blocks.remainder())
}
