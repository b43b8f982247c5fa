//! x86-64 CRC32c kernels: the SSE4.2 `crc32` instruction (one chain, or three chains merged
//! with PCLMULQDQ), PCLMULQDQ / VPCLMULQDQ folding (128, 256 and 512 bits), and the hybrids of
//! 256-bit / 512-bit folding with three `crc32` chains (see `super` for which runs when).
//!
//! Every kernel works on the raw (non-inverted) register and is an `unsafe fn` with
//! `#[target_feature]`: callers must have detected the features first (see `super::Level`).
//! The `COPY` variants also store every octet they read at the same offset behind `dst`, so
//! the datapath reads each octet once; without `COPY` `dst` is never touched (it may be null).
//!
//! Folding, in short: a 128-bit block V (low qword L = the earlier 8 octets) that stands
//! `F` bits before a later block D is replaced by `V * x^F mod P`, computed as
//! `clmul(L, x^(F+31) mod P) ^ clmul(H, x^(F-33) mod P)` (the extra `x^33` comes from the
//! reflected bit order of the constants and of `pclmulqdq`'s product), and XORed into D. The
//! result keeps the same CRC, so at the end the last 16 folded octets are simply fed to
//! `crc32q` as if they were data. The initial register is XORed into the first four octets.
//!
//! Needs Rust 1.89 (VPCLMULQDQ intrinsics and target feature; safe `#[target_feature]`
//! functions and safe intrinsic calls came in 1.86/1.87).

use core::arch::x86_64::*;

use super::portable::{xpow, X8B, X8N};

/// Below this length the 256-bit folding kernel runs one `crc32q` chain (no set-up cost).
pub(super) const FOLD_MIN: usize = 128;
/// Below this length the 128-bit folding kernel runs one `crc32q` chain.
const FOLD128_MIN: usize = 256;
/// Below this length the three-chain kernel runs one chain.
const THREE_WAY_MIN: usize = 96;
/// Largest block of one chain in the three-chain kernel (octets).
const THREE_WAY_BLOCK: usize = 4096;

/// Folding constants for a distance of `f` bits: `[x^(f+31), x^(f-33)] mod P`.
const fn kpair(f: u64) -> [u64; 2] {
    [xpow(f + 31) as u64, xpow(f - 33) as u64]
}

const K128: [u64; 2] = kpair(128);
const K256: [u64; 2] = kpair(256);
const K384: [u64; 2] = kpair(384);
const K512: [u64; 2] = kpair(512);
const K640: [u64; 2] = kpair(640);
const K768: [u64; 2] = kpair(768);
const K896: [u64; 2] = kpair(896);
const K1024: [u64; 2] = kpair(1024);

/// Merge constants of the three-chain kernel, for a block of `8 m` octets:
/// `[x^(8 * 2b - 33), x^(8 * b - 33)] mod P` with `b = 8 m`.
static K3WAY: [[u32; 2]; THREE_WAY_BLOCK / 8 + 1] = make_k3way();

const fn make_k3way() -> [[u32; 2]; THREE_WAY_BLOCK / 8 + 1] {
    let mut t = [[0u32; 2]; THREE_WAY_BLOCK / 8 + 1];
    let step2 = xpow(128);
    let step1 = xpow(64);
    let mut k2 = xpow(128 - 33);
    let mut k1 = xpow(64 - 33);
    let mut m = 1;
    while m < t.len() {
        t[m] = [k2, k1];
        k2 = super::portable::mul(k2, step2);
        k1 = super::portable::mul(k1, step1);
        m += 1;
    }
    t
}

#[inline]
#[target_feature(enable = "sse2")]
fn k128(k: [u64; 2]) -> __m128i {
    _mm_set_epi64x(k[1] as i64, k[0] as i64)
}

#[inline]
#[target_feature(enable = "avx2")]
fn k256(k: [u64; 2]) -> __m256i {
    _mm256_set_epi64x(k[1] as i64, k[0] as i64, k[1] as i64, k[0] as i64)
}

/// `v * x^F mod P` as a 128-bit block, `k = kpair(F)`.
#[inline]
#[target_feature(enable = "pclmulqdq")]
fn fold(v: __m128i, k: __m128i) -> __m128i {
    _mm_xor_si128(
        _mm_clmulepi64_si128::<0x00>(v, k),
        _mm_clmulepi64_si128::<0x11>(v, k),
    )
}

/// [`fold`] on both 128-bit lanes.
#[inline]
#[target_feature(enable = "avx2,vpclmulqdq")]
fn fold2(v: __m256i, k: __m256i) -> __m256i {
    _mm256_xor_si256(
        _mm256_clmulepi64_epi128::<0x00>(v, k),
        _mm256_clmulepi64_epi128::<0x11>(v, k),
    )
}

/// The CRC register after the 16 octets of `v`, starting from 0.
#[inline]
#[target_feature(enable = "sse4.2")]
fn reduce(v: __m128i) -> u32 {
    let lo = _mm_cvtsi128_si64(v) as u64;
    let hi = _mm_extract_epi64::<1>(v) as u64;
    _mm_crc32_u64(_mm_crc32_u64(0, lo), hi) as u32
}

/// `a * x^(8 n_a) ^ b * x^(8 n_b) mod P` for `ka = x^(8 n_a - 33)`, `kb = x^(8 n_b - 33)`.
#[inline]
#[target_feature(enable = "sse4.2,pclmulqdq")]
fn shift2(a: u32, ka: u32, b: u32, kb: u32) -> u32 {
    let pa =
        _mm_clmulepi64_si128::<0x00>(_mm_cvtsi32_si128(a as i32), _mm_cvtsi32_si128(ka as i32));
    let pb =
        _mm_clmulepi64_si128::<0x00>(_mm_cvtsi32_si128(b as i32), _mm_cvtsi32_si128(kb as i32));
    _mm_crc32_u64(0, _mm_cvtsi128_si64(_mm_xor_si128(pa, pb)) as u64) as u32
}

/// `a * b mod P` (reflected) with one carry-less multiply and one `crc32` reduction.
#[inline]
#[target_feature(enable = "sse4.2,pclmulqdq")]
pub(super) fn mul(a: u32, b: u32) -> u32 {
    let p = _mm_clmulepi64_si128::<0x00>(_mm_cvtsi32_si128(a as i32), _mm_cvtsi32_si128(b as i32));
    // The product has degree <= 62; shifting left by one drops the extra factor x that the
    // reflected product carries, so `w` is exactly a*b as a 64-bit reflected polynomial.
    let w = (_mm_cvtsi128_si64(p) as u64) << 1;
    _mm_crc32_u32(0, w as u32) ^ (w >> 32) as u32
}

/// `crc * x^(8 n) mod P` for `n < 2^16` with two multiplications by table entries and no
/// data-dependent branch (a mispredicted branch in a kernel would also discard its work
/// behind it; the joins of segment CRCs in the receive path take this too,
/// docs/architecture.md, "Runs of segments").
#[inline]
#[target_feature(enable = "sse4.2,pclmulqdq")]
fn shift_short(crc: u32, n: usize) -> u32 {
    debug_assert!(n < 1 << 16);
    mul(mul(crc, X8B[0][n & 0xff]), X8B[1][(n >> 8) & 0xff])
}

/// `crc * x^(8 n) mod P` (see `portable::shift`), with the carry-less multiply.
#[target_feature(enable = "sse4.2,pclmulqdq")]
pub(super) fn shift(crc: u32, n: u64) -> u32 {
    if n < 1 << 16 {
        return shift_short(crc, n as usize);
    }
    let mut r = crc;
    let mut n = n;
    for row in &X8N {
        if n == 0 {
            break;
        }
        let d = (n & 0xf) as usize;
        if d != 0 {
            r = mul(r, row[d]);
        }
        n >>= 4;
    }
    r
}

/// Loads 16 octets at `s + off` and, with `COPY`, stores them at `d + off`.
///
/// # Safety
/// `off + 16` octets must be readable at `s` (and, with `COPY`, writable at `d`).
#[inline]
#[target_feature(enable = "sse2")]
unsafe fn take16<const COPY: bool>(s: *const u8, d: *mut u8, off: usize) -> __m128i {
    // SAFETY: the caller guarantees that `s + off .. s + off + 16` is readable.
    let v = unsafe { _mm_loadu_si128(s.add(off).cast()) };
    if COPY {
        // SAFETY: with COPY the caller guarantees that `d + off .. d + off + 16` is writable.
        unsafe { _mm_storeu_si128(d.add(off).cast(), v) };
    }
    v
}

/// Loads 32 octets at `s + off` and, with `COPY`, stores them at `d + off`.
///
/// # Safety
/// `off + 32` octets must be readable at `s` (and, with `COPY`, writable at `d`).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn take32<const COPY: bool>(s: *const u8, d: *mut u8, off: usize) -> __m256i {
    // SAFETY: the caller guarantees that `s + off .. s + off + 32` is readable.
    let v = unsafe { _mm256_loadu_si256(s.add(off).cast()) };
    if COPY {
        // SAFETY: with COPY the caller guarantees that `d + off .. d + off + 32` is writable.
        unsafe { _mm256_storeu_si256(d.add(off).cast(), v) };
    }
    v
}

/// Loads 8 octets (little endian) at `s + off` and, with `COPY`, stores them at `d + off`.
///
/// # Safety
/// As [`take16`], for 8 octets.
#[inline(always)]
unsafe fn take8<const COPY: bool>(s: *const u8, d: *mut u8, off: usize) -> u64 {
    // SAFETY: the caller guarantees that `s + off .. s + off + 8` is readable.
    let v = unsafe { s.add(off).cast::<u64>().read_unaligned() };
    if COPY {
        // SAFETY: with COPY the caller guarantees that `d + off .. d + off + 8` is writable.
        unsafe { d.add(off).cast::<u64>().write_unaligned(v) };
    }
    v
}

/// One `crc32` chain: 8 octets per instruction, then 4, 2, 1.
///
/// # Safety
/// SSE4.2 must be available; with `COPY`, `dst` must be valid for writes of `src.len()`
/// octets and must not overlap `src`.
#[target_feature(enable = "sse4.2")]
pub(super) unsafe fn chain<const COPY: bool>(crc: u32, src: &[u8], dst: *mut u8) -> u32 {
    let (s, n) = (src.as_ptr(), src.len());
    let mut c = u64::from(crc);
    let mut off = 0;
    while off + 8 <= n {
        // SAFETY: off + 8 <= n; dst as the caller guarantees.
        c = _mm_crc32_u64(c, unsafe { take8::<COPY>(s, dst, off) });
        off += 8;
    }
    let mut c = c as u32;
    if off + 4 <= n {
        // SAFETY: off + 4 <= n octets are readable at `s` (and writable at `dst` with COPY).
        let v = unsafe { s.add(off).cast::<u32>().read_unaligned() };
        if COPY {
            // SAFETY: as above.
            unsafe { dst.add(off).cast::<u32>().write_unaligned(v) };
        }
        c = _mm_crc32_u32(c, v);
        off += 4;
    }
    while off < n {
        // SAFETY: off < n.
        let v = unsafe { *s.add(off) };
        if COPY {
            // SAFETY: off < n.
            unsafe { *dst.add(off) = v };
        }
        c = _mm_crc32_u8(c, v);
        off += 1;
    }
    c
}

/// Three independent `crc32` chains over three adjacent blocks, merged with two carry-less
/// multiplications: the `crc32` latency (3 cycles) is hidden behind its throughput (1/cycle).
///
/// # Safety
/// SSE4.2 and PCLMULQDQ must be available; `dst` as for [`chain`].
#[target_feature(enable = "sse4.2,pclmulqdq")]
pub(super) unsafe fn three_way<const COPY: bool>(crc: u32, src: &[u8], dst: *mut u8) -> u32 {
    let (s, n) = (src.as_ptr(), src.len());
    let mut c = crc;
    let mut off = 0;
    if n >= THREE_WAY_MIN {
        loop {
            let m = ((n - off) / 24).min(THREE_WAY_BLOCK / 8);
            if m < 4 {
                break;
            }
            let b = 8 * m;
            let (mut ca, mut cb, mut cc) = (u64::from(c), 0u64, 0u64);
            let end = off + b;
            while off < end {
                // SAFETY: off + 2b + 8 <= (block start) + 3b <= n.
                let (va, vb, vc) = unsafe {
                    (
                        take8::<COPY>(s, dst, off),
                        take8::<COPY>(s, dst, off + b),
                        take8::<COPY>(s, dst, off + 2 * b),
                    )
                };
                ca = _mm_crc32_u64(ca, va);
                cb = _mm_crc32_u64(cb, vb);
                cc = _mm_crc32_u64(cc, vc);
                off += 8;
            }
            off += 2 * b;
            let [k2, k1] = K3WAY[m];
            c = shift2(ca as u32, k2, cb as u32, k1) ^ cc as u32;
        }
    }
    let rest = src.get(off..).unwrap_or_default();
    // SAFETY: features as ours; `dst + off` is valid for `rest.len()` octets with COPY.
    unsafe { chain::<COPY>(c, rest, dst.wrapping_add(off)) }
}

/// 128-bit PCLMULQDQ folding, eight accumulators (128 octets per round).
///
/// # Safety
/// SSE4.2 and PCLMULQDQ must be available; `dst` as for [`chain`].
#[target_feature(enable = "sse4.2,pclmulqdq")]
pub(super) unsafe fn fold128<const COPY: bool>(crc: u32, src: &[u8], dst: *mut u8) -> u32 {
    let (s, n) = (src.as_ptr(), src.len());
    if n < FOLD128_MIN {
        // SAFETY: same features and `dst` contract.
        return unsafe { chain::<COPY>(crc, src, dst) };
    }
    let mut x = [_mm_setzero_si128(); 8];
    for (i, xi) in x.iter_mut().enumerate() {
        // SAFETY: 16 i + 16 <= 128 <= n.
        *xi = unsafe { take16::<COPY>(s, dst, 16 * i) };
    }
    x[0] = _mm_xor_si128(x[0], _mm_cvtsi32_si128(crc as i32));
    let mut off = 128;
    let k = k128(K1024);
    while off + 128 <= n {
        for (i, xi) in x.iter_mut().enumerate() {
            // SAFETY: off + 16 i + 16 <= off + 128 <= n.
            let d = unsafe { take16::<COPY>(s, dst, off + 16 * i) };
            *xi = _mm_xor_si128(fold(*xi, k), d);
        }
        off += 128;
    }
    let merge = [K896, K768, K640, K512, K384, K256, K128];
    let mut acc = x[7];
    for (xi, km) in x.iter().zip(merge) {
        acc = _mm_xor_si128(acc, fold(*xi, k128(km)));
    }
    let k = k128(K128);
    while off + 16 <= n {
        // SAFETY: off + 16 <= n.
        let d = unsafe { take16::<COPY>(s, dst, off) };
        acc = _mm_xor_si128(fold(acc, k), d);
        off += 16;
    }
    let rest = src.get(off..).unwrap_or_default();
    // SAFETY: features as ours; `dst + off` is valid for `rest.len()` octets with COPY.
    unsafe { chain::<COPY>(reduce(acc), rest, dst.wrapping_add(off)) }
}

/// 256-bit VPCLMULQDQ folding (AVX2 encoding, no AVX-512), four accumulators (128 octets
/// per round); below 128 octets one accumulator.
///
/// # Safety
/// SSE4.2, PCLMULQDQ, AVX2 and VPCLMULQDQ must be available; `dst` as for [`chain`].
#[target_feature(enable = "sse4.2,pclmulqdq,avx2,vpclmulqdq")]
pub(super) unsafe fn fold256<const COPY: bool>(crc: u32, src: &[u8], dst: *mut u8) -> u32 {
    let (s, n) = (src.as_ptr(), src.len());
    if n < FOLD_MIN {
        // SAFETY: same features and `dst` contract.
        return unsafe { chain::<COPY>(crc, src, dst) };
    }
    let init = _mm256_zextsi128_si256(_mm_cvtsi32_si128(crc as i32));
    let (mut acc, mut off) = if n < 128 {
        // SAFETY: 32 <= FOLD_MIN <= n.
        let first = unsafe { take32::<COPY>(s, dst, 0) };
        (_mm256_xor_si256(first, init), 32)
    } else {
        let mut y = [_mm256_setzero_si256(); 4];
        for (i, yi) in y.iter_mut().enumerate() {
            // SAFETY: 32 i + 32 <= 128 <= n.
            *yi = unsafe { take32::<COPY>(s, dst, 32 * i) };
        }
        y[0] = _mm256_xor_si256(y[0], init);
        let mut off = 128;
        let k = k256(K1024);
        while off + 128 <= n {
            for (i, yi) in y.iter_mut().enumerate() {
                // SAFETY: off + 32 i + 32 <= off + 128 <= n.
                let d = unsafe { take32::<COPY>(s, dst, off + 32 * i) };
                *yi = _mm256_xor_si256(fold2(*yi, k), d);
            }
            off += 128;
        }
        let acc = _mm256_xor_si256(
            _mm256_xor_si256(y[3], fold2(y[0], k256(K768))),
            _mm256_xor_si256(fold2(y[1], k256(K512)), fold2(y[2], k256(K256))),
        );
        (acc, off)
    };
    let k = k256(K256);
    while off + 32 <= n {
        // SAFETY: off + 32 <= n.
        let d = unsafe { take32::<COPY>(s, dst, off) };
        acc = _mm256_xor_si256(fold2(acc, k), d);
        off += 32;
    }
    let k = k128(K128);
    let lo = _mm256_castsi256_si128(acc);
    let hi = _mm256_extracti128_si256::<1>(acc);
    let mut acc = _mm_xor_si128(fold(lo, k), hi);
    if off + 16 <= n {
        // SAFETY: off + 16 <= n.
        let d = unsafe { take16::<COPY>(s, dst, off) };
        acc = _mm_xor_si128(fold(acc, k), d);
        off += 16;
    }
    let rest = src.get(off..).unwrap_or_default();
    // SAFETY: features as ours; `dst + off` is valid for `rest.len()` octets with COPY.
    unsafe { chain::<COPY>(reduce(acc), rest, dst.wrapping_add(off)) }
}

/// `crc32q` per scalar chain per round of [`hybrid`] (tuned on AMD Zen 4, where the
/// carry-less multiplier and `crc32` partly compete: 8 `vpclmulqdq` + 18 `crc32q` per round).
pub(super) const HQ: usize = 6;
/// Rounds per merge (longer inputs are done in pieces of this many rounds).
const HMAX_ROUNDS: usize = 256;

/// Round geometry and merge constants of [`hybrid`] for `Q` `crc32q` per chain per round.
struct Hybrid<const Q: usize>;

impl<const Q: usize> Hybrid<Q> {
    /// Octets per scalar chain per round.
    const SB: usize = 8 * Q;
    /// Octets per round: four 256-bit blocks and three scalar pieces.
    const ROUND: usize = 128 + 3 * Self::SB;
    /// Merge constants for `r` rounds: `x^(8 d - 33) mod P` for `d` the distance from the
    /// end of what came before, of the vector region, of `a` and of `b` to the end of the
    /// piece.
    const K: [[u32; 4]; HMAX_ROUNDS + 1] = make_khybrid(Self::ROUND, Self::SB);
}

const fn make_khybrid(round: usize, sb: usize) -> [[u32; 4]; HMAX_ROUNDS + 1] {
    use super::portable::mul;
    let d = [round as u64, 3 * sb as u64, 2 * sb as u64, sb as u64];
    let mut t = [[0u32; 4]; HMAX_ROUNDS + 1];
    let mut steps = [0u32; 4];
    let mut k = [0u32; 4];
    let mut j = 0;
    while j < 4 {
        steps[j] = xpow(8 * d[j]);
        k[j] = xpow(8 * d[j] - 33);
        j += 1;
    }
    let mut r = 1;
    while r <= HMAX_ROUNDS {
        t[r] = k;
        let mut j = 0;
        while j < 4 {
            k[j] = mul(k[j], steps[j]);
            j += 1;
        }
        r += 1;
    }
    t
}

/// VPCLMULQDQ folding *and* three `crc32` chains at once: the carry-less multiplier and the
/// `crc32` unit work side by side, so their throughputs (partly) add up.
///
/// The input is cut into `[head][v][a][b][c]`, the head being what does not fill a round.
/// The head runs one `crc32` chain from the caller's register (independent of the rest, so
/// the CPU overlaps it with the main loop); `v` (128 octets per round) is folded from 0 by
/// four 256-bit accumulators; `a`, `b`, `c` (`8 Q` octets per round each) run three `crc32`
/// chains from 0. The five partial CRCs are merged by four carry-less multiplications with
/// `x^(8 d - 33)`, `d` being the distance from the end of each part to the end: constants
/// that depend only on the number of rounds (a table).
///
/// (Spreading the head over the three chains instead needs four run-time multiplications
/// for the constants; measured slower on Zen 4 at every size.)
///
/// # Safety
/// SSE4.2, PCLMULQDQ, AVX2 and VPCLMULQDQ must be available; `dst` as for [`chain`].
#[target_feature(enable = "sse4.2,pclmulqdq,avx2,vpclmulqdq")]
pub(super) unsafe fn hybrid<const COPY: bool, const Q: usize>(
    crc: u32,
    src: &[u8],
    dst: *mut u8,
) -> u32 {
    const { assert!(Q >= 1 && Q <= 10) };
    let (s, n) = (src.as_ptr(), src.len());
    let round = Hybrid::<Q>::ROUND;
    // The head's chain is serial: worth it only when it is short next to the rest.
    if n < 3 * round || 6 * (n % round) > n {
        // SAFETY: same features and `dst` contract.
        return unsafe { fold256::<COPY>(crc, src, dst) };
    }
    let head = n % round;
    // SAFETY: features as ours; `dst` is valid for `head <= n` octets with COPY.
    let mut c = unsafe { chain::<COPY>(crc, src.get(..head).unwrap_or_default(), dst) };
    let mut pos = head;
    let mut rounds_left = n / round;
    while rounds_left > 0 {
        let rounds = rounds_left.min(HMAX_ROUNDS);
        rounds_left -= rounds;
        // SAFETY: `pos + rounds * round <= n`; features and `dst` as ours.
        c = unsafe { hybrid_piece::<COPY, Q>(c, s, dst, pos, rounds) };
        pos += rounds * round;
    }
    c
}

/// `rounds` rounds of [`hybrid`] at `s + pos`, extending the register `prev` (the CRC of
/// everything before `pos`).
///
/// # Safety
/// `1 <= rounds <= HMAX_ROUNDS`; `pos + rounds * Hybrid::<Q>::ROUND` octets readable at `s`
/// (and, with COPY, writable at `dst`); the features of [`hybrid`].
#[inline]
#[target_feature(enable = "sse4.2,pclmulqdq,avx2,vpclmulqdq")]
unsafe fn hybrid_piece<const COPY: bool, const Q: usize>(
    prev: u32,
    s: *const u8,
    dst: *mut u8,
    pos: usize,
    rounds: usize,
) -> u32 {
    let ls = rounds * Hybrid::<Q>::SB;
    let ov = pos;
    let oa = pos + 128 * rounds;
    let (ob, oc) = (oa + ls, oa + 2 * ls);

    let (mut ca, mut cb, mut cc) = (0u64, 0u64, 0u64);
    let mut so = 0; // offset inside each scalar region
    let mut y = [_mm256_setzero_si256(); 4];
    for (i, yi) in y.iter_mut().enumerate() {
        // SAFETY: ov + 128 <= oa.
        *yi = unsafe { take32::<COPY>(s, dst, ov + 32 * i) };
    }
    let k = k256(K1024);
    let mut vo = ov + 128; // absolute offset of the next vector block
    loop {
        for q in 0..Q {
            let o = so + 8 * q;
            // SAFETY: o + 8 <= ls, so each read is inside its region (oc + ls is the end).
            let (va, vb, vc) = unsafe {
                (
                    take8::<COPY>(s, dst, oa + o),
                    take8::<COPY>(s, dst, ob + o),
                    take8::<COPY>(s, dst, oc + o),
                )
            };
            ca = _mm_crc32_u64(ca, va);
            cb = _mm_crc32_u64(cb, vb);
            cc = _mm_crc32_u64(cc, vc);
        }
        so += Hybrid::<Q>::SB;
        if so >= ls {
            break;
        }
        for (i, yi) in y.iter_mut().enumerate() {
            // SAFETY: vo + 128 <= ov + 128 * rounds = oa.
            let d = unsafe { take32::<COPY>(s, dst, vo + 32 * i) };
            *yi = _mm256_xor_si256(fold2(*yi, k), d);
        }
        vo += 128;
    }
    let acc = _mm256_xor_si256(
        _mm256_xor_si256(y[3], fold2(y[0], k256(K768))),
        _mm256_xor_si256(fold2(y[1], k256(K512)), fold2(y[2], k256(K256))),
    );
    let acc = _mm_xor_si128(
        fold(_mm256_castsi256_si128(acc), k128(K128)),
        _mm256_extracti128_si256::<1>(acc),
    );
    let cv = reduce(acc);
    let table: &'static [[u32; 4]; HMAX_ROUNDS + 1] = &Hybrid::<Q>::K;
    let [kp, kv, ka, kb] = table[rounds];
    let p = |x: u32, k: u32| {
        _mm_clmulepi64_si128::<0x00>(_mm_cvtsi32_si128(x as i32), _mm_cvtsi32_si128(k as i32))
    };
    let m = _mm_xor_si128(
        _mm_xor_si128(p(prev, kp), p(cv, kv)),
        _mm_xor_si128(p(ca as u32, ka), p(cb as u32, kb)),
    );
    _mm_crc32_u64(0, _mm_cvtsi128_si64(m) as u64) as u32 ^ cc as u32
}

mod avx512;
pub(in crate::crc) use avx512::{fold512, fold512_summing, hybrid512, WordSum, HQ512};
