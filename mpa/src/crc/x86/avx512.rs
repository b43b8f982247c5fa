//! AVX-512: 512-bit VPCLMULQDQ folding (four 128-bit lanes per instruction) and its hybrid
//! with three `crc32` chains. Uses AVX512F and VPCLMULQDQ only (no VL/BW: the tails are
//! folded with 128-bit PCLMULQDQ and finished with `crc32`).

use super::*;

const K1536: [u64; 2] = kpair(1536);
const K2048: [u64; 2] = kpair(2048);

/// Below this length [`fold512`] hands over to [`fold256`] (one 512-bit block needs 64).
const FOLD512_MIN: usize = 64;

#[inline]
#[target_feature(enable = "avx512f")]
fn k512(k: [u64; 2]) -> __m512i {
    let (lo, hi) = (k[0] as i64, k[1] as i64);
    _mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo)
}

/// [`fold`] on all four 128-bit lanes, XORed into `d` (one ternary-logic XOR3).
#[inline]
#[target_feature(enable = "avx512f,vpclmulqdq")]
fn fold4(v: __m512i, k: __m512i, d: __m512i) -> __m512i {
    _mm512_ternarylogic_epi64::<0x96>(
        _mm512_clmulepi64_epi128::<0x00>(v, k),
        _mm512_clmulepi64_epi128::<0x11>(v, k),
        d,
    )
}

/// Four 512-bit accumulators standing 64, 128, 192 octets before the last one, folded into
/// one (the three folds are independent; only the XORs are serial).
#[inline]
#[target_feature(enable = "avx512f,vpclmulqdq")]
fn merge4(y: [__m512i; 4]) -> __m512i {
    let t = fold4(y[0], k512(K1536), y[3]);
    let t = fold4(y[1], k512(K1024), t);
    fold4(y[2], k512(K512), t)
}

/// One 512-bit accumulator down to 128 bits: lanes 0, 1, 2 folded by 48, 32, 16 octets onto
/// lane 3 with one pair of multiplications (lane 3's constant is 0).
#[inline]
#[target_feature(enable = "avx512f,vpclmulqdq")]
fn reduce512(acc: __m512i) -> __m128i {
    let k = _mm512_set_epi64(
        0,
        0,
        K128[1] as i64,
        K128[0] as i64,
        K256[1] as i64,
        K256[0] as i64,
        K384[1] as i64,
        K384[0] as i64,
    );
    let t = _mm512_xor_si512(
        _mm512_clmulepi64_epi128::<0x00>(acc, k),
        _mm512_clmulepi64_epi128::<0x11>(acc, k),
    );
    let t = _mm256_xor_si256(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64::<1>(t));
    _mm_xor_si128(
        _mm_xor_si128(_mm256_castsi256_si128(t), _mm256_extracti128_si256::<1>(t)),
        _mm512_extracti32x4_epi32::<3>(acc),
    )
}

/// Loads 64 octets at `s + off` and, with `COPY`, stores them at `d + off`.
///
/// # Safety
/// `off + 64` octets must be readable at `s` (and, with `COPY`, writable at `d`).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn take64<const COPY: bool>(s: *const u8, d: *mut u8, off: usize) -> __m512i {
    // SAFETY: the caller guarantees that `s + off .. s + off + 64` is readable.
    let v = unsafe { _mm512_loadu_si512(s.add(off).cast()) };
    if COPY {
        // SAFETY: with COPY the caller guarantees that `d + off .. d + off + 64` is writable.
        unsafe { _mm512_storeu_si512(d.add(off).cast(), v) };
    }
    v
}

/// From this length [`fold512`] first runs up to a 64-octet boundary on a `crc32` chain, so
/// that no 512-bit load splits a cache line. Measured on Sapphire Rapids: +30 % at 64 KiB
/// (data in L2), but a loss up to 16 KiB (in L1), where the extra chain and shift cost more.
const FOLD512_ALIGN_MIN: usize = 32 * 1024;

/// Octets before the next 64-octet boundary at `p`.
#[inline(always)]
fn to_boundary64(p: *const u8) -> usize {
    (p as usize).wrapping_neg() & 63
}

/// [`fold512_from`]; from [`FOLD512_ALIGN_MIN`] octets the part before the first 64-octet
/// boundary runs on one `crc32` chain beside the folding (which starts from 0), and the two
/// are joined by one shift.
///
/// # Safety
/// As [`fold512_from`].
#[target_feature(enable = "sse4.2,pclmulqdq,avx2,avx512f,vpclmulqdq")]
pub(in crate::crc) unsafe fn fold512<const COPY: bool>(crc: u32, src: &[u8], dst: *mut u8) -> u32 {
    let head = to_boundary64(src.as_ptr());
    if src.len() < FOLD512_ALIGN_MIN || head == 0 {
        // SAFETY: same features and `dst` contract.
        return unsafe { fold512_from::<COPY>(crc, src, dst) };
    }
    let (a, b) = src.split_at(head);
    // SAFETY: features as ours; `dst` is valid for `head` octets with COPY.
    let ca = unsafe { chain::<COPY>(crc, a, dst) };
    // Shift before folding, in program order, so the CPU overlaps both with the folding.
    let ca = if b.len() < 1 << 16 {
        shift_short(ca, b.len())
    } else {
        shift(ca, b.len() as u64)
    };
    // SAFETY: features as ours; `dst + head` is valid for `b.len()` octets with COPY.
    ca ^ unsafe { fold512_from::<COPY>(0, b, dst.wrapping_add(head)) }
}

/// 512-bit VPCLMULQDQ folding: four accumulators (256 octets per round, two multiplications
/// and one XOR3 per 64 octets), then one accumulator over 64-octet blocks, 128-bit folding
/// over 16-octet blocks and one `crc32` chain for the last 0..15 octets.
///
/// # Safety
/// SSE4.2, PCLMULQDQ, AVX2, AVX512F and VPCLMULQDQ must be available; `dst` as for [`chain`].
#[target_feature(enable = "sse4.2,pclmulqdq,avx2,avx512f,vpclmulqdq")]
unsafe fn fold512_from<const COPY: bool>(crc: u32, src: &[u8], dst: *mut u8) -> u32 {
    let mut unused = WordSum::new();
    // SAFETY: same features and `dst` contract.
    unsafe { fold512_summing::<COPY, false>(crc, src, dst, &mut unused) }
}

/// The Internet checksum's word sum (RFC 1071) of the 64-octet blocks a kernel loads, taken
/// beside the CRC from the same registers: each block's sixteen 32-bit native-endian words
/// added into 64-bit lanes (no carry can leave a lane below 2^32 blocks), as the transport
/// checksum's own AVX-512 pass adds them. `covered`: the octets summed, from the start of the
/// input, a multiple of 64.
pub(in crate::crc) struct WordSum {
    lo: __m512i,
    hi: __m512i,
    pub(in crate::crc) covered: usize,
}

impl WordSum {
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(in crate::crc) fn new() -> WordSum {
        WordSum {
            lo: _mm512_setzero_si512(),
            hi: _mm512_setzero_si512(),
            covered: 0,
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn add(&mut self, v: __m512i) {
        let zero = _mm512_setzero_si512();
        self.lo = _mm512_add_epi64(self.lo, _mm512_unpacklo_epi32(v, zero));
        self.hi = _mm512_add_epi64(self.hi, _mm512_unpackhi_epi32(v, zero));
    }

    /// The sum of the words added, unfolded.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(in crate::crc) fn total(&self) -> u64 {
        _mm512_reduce_add_epi64(_mm512_add_epi64(self.lo, self.hi)) as u64
    }
}

/// [`fold512_from`], with `SUM` adding every 64-octet block it loads to `sum` (the blocks
/// from the start of `src` up to the last whole one; none below 64 octets).
///
/// # Safety
/// As [`fold512_from`].
#[inline]
#[target_feature(enable = "sse4.2,pclmulqdq,avx2,avx512f,vpclmulqdq")]
pub(in crate::crc) unsafe fn fold512_summing<const COPY: bool, const SUM: bool>(
    crc: u32,
    src: &[u8],
    dst: *mut u8,
    sum: &mut WordSum,
) -> u32 {
    let (s, n) = (src.as_ptr(), src.len());
    if n < FOLD512_MIN {
        // SAFETY: same features (a subset) and `dst` contract.
        return unsafe { fold256::<COPY>(crc, src, dst) };
    }
    let mut take = |off: usize| {
        debug_assert!(off + 64 <= n);
        // SAFETY: every call below passes `off + 64 <= n`; `dst` as ours.
        let v = unsafe { take64::<COPY>(s, dst, off) };
        if SUM {
            sum.add(v);
        }
        v
    };
    let init = _mm512_zextsi128_si512(_mm_cvtsi32_si128(crc as i32));
    let (mut acc, mut off) = if n >= 256 {
        let mut y = [_mm512_setzero_si512(); 4];
        for (i, yi) in y.iter_mut().enumerate() {
            // 64 i + 64 <= 256 <= n.
            *yi = take(64 * i);
        }
        y[0] = _mm512_xor_si512(y[0], init);
        let mut off = 256;
        let k = k512(K2048);
        while off + 256 <= n {
            for (i, yi) in y.iter_mut().enumerate() {
                // off + 64 i + 64 <= off + 256 <= n.
                let d = take(off + 64 * i);
                *yi = fold4(*yi, k, d);
            }
            off += 256;
        }
        (merge4(y), off)
    } else {
        // 64 <= FOLD512_MIN <= n.
        let first = take(0);
        (_mm512_xor_si512(first, init), 64)
    };
    let k = k512(K512);
    while off + 64 <= n {
        // off + 64 <= n.
        let d = take(off);
        acc = fold4(acc, k, d);
        off += 64;
    }
    sum.covered = off;
    let mut x = reduce512(acc);
    let k = k128(K128);
    while off + 16 <= n {
        // SAFETY: off + 16 <= n.
        let d = unsafe { take16::<COPY>(s, dst, off) };
        x = _mm_xor_si128(fold(x, k), d);
        off += 16;
    }
    let rest = src.get(off..).unwrap_or_default();
    // SAFETY: features as ours; `dst + off` is valid for `rest.len()` octets with COPY.
    unsafe { chain::<COPY>(reduce(x), rest, dst.wrapping_add(off)) }
}

/// `crc32q` per scalar chain per round of [`hybrid512`] (tuned on Sapphire Rapids: 8
/// `vpclmulqdq` on port 5 beside 3 Q `crc32q` on port 1 per round).
pub(in crate::crc) const HQ512: usize = 2;

/// Round geometry and merge constants of [`hybrid512`]: as [`Hybrid`], with 256 vector
/// octets (four 512-bit blocks) per round.
struct Hybrid512<const Q: usize>;

impl<const Q: usize> Hybrid512<Q> {
    const SB: usize = 8 * Q;
    const ROUND: usize = 256 + 3 * Self::SB;
    const K: [[u32; 4]; HMAX_ROUNDS + 1] = make_khybrid(Self::ROUND, Self::SB);
}

/// [`hybrid`] with 512-bit folding, laid out for aligned 512-bit loads:
/// `[head][v][a][b][c]...[tail]`. The head (up to the first 64-octet boundary) runs one
/// `crc32` chain from the caller's register; then pieces of up to [`HMAX_ROUNDS`] rounds,
/// each `v` (256 octets per round, four 512-bit accumulators), `a`, `b`, `c` (`8 Q` octets
/// per round each, three `crc32` chains), merged by carry-less multiplications; the tail
/// (less than a round) runs its own chain from 0, joined at the end by one multiplication.
/// The head and tail chains are independent of the pieces, so the CPU overlaps them.
///
/// # Safety
/// SSE4.2, PCLMULQDQ, AVX2, AVX512F and VPCLMULQDQ must be available; `dst` as for [`chain`].
#[target_feature(enable = "sse4.2,pclmulqdq,avx2,avx512f,vpclmulqdq")]
pub(in crate::crc) unsafe fn hybrid512<const COPY: bool, const Q: usize>(
    crc: u32,
    src: &[u8],
    dst: *mut u8,
) -> u32 {
    const { assert!(Q >= 1 && Q <= 10) };
    let (s, n) = (src.as_ptr(), src.len());
    let round = Hybrid512::<Q>::ROUND;
    let head = to_boundary64(s).min(n);
    let tail = (n - head) % round;
    // The tail's chain is serial: worth it only when it is short next to the rest.
    if n < 3 * round || 6 * tail > n {
        // SAFETY: same features and `dst` contract.
        return unsafe { fold512::<COPY>(crc, src, dst) };
    }
    let body_end = n - tail;
    // Program order: both side chains and the tail's shift constant first, so that they
    // overlap with the pieces.
    // SAFETY: features as ours; `dst` is valid for `head <= n` octets with COPY.
    let mut c = unsafe { chain::<COPY>(crc, src.get(..head).unwrap_or_default(), dst) };
    let rest = src.get(body_end..).unwrap_or_default();
    // SAFETY: features as ours; `dst + body_end` is valid for `tail` octets with COPY.
    let ct = unsafe { chain::<COPY>(0, rest, dst.wrapping_add(body_end)) };
    let kt = shift_short(crate::crc::portable::ONE, tail);
    let mut pos = head;
    let mut rounds_left = (body_end - head) / round;
    while rounds_left > 0 {
        let rounds = rounds_left.min(HMAX_ROUNDS);
        rounds_left -= rounds;
        // SAFETY: `pos + rounds * round <= body_end <= n`; features and `dst` as ours.
        c = unsafe { hybrid512_piece::<COPY, Q>(c, s, dst, pos, rounds) };
        pos += rounds * round;
    }
    mul(c, kt) ^ ct
}

/// `rounds` rounds of [`hybrid512`] at `s + pos`, extending the register `prev`.
///
/// # Safety
/// `1 <= rounds <= HMAX_ROUNDS`; `pos + rounds * Hybrid512::<Q>::ROUND` octets readable at
/// `s` (and, with COPY, writable at `dst`); the features of [`hybrid512`].
#[inline]
#[target_feature(enable = "sse4.2,pclmulqdq,avx2,avx512f,vpclmulqdq")]
unsafe fn hybrid512_piece<const COPY: bool, const Q: usize>(
    prev: u32,
    s: *const u8,
    dst: *mut u8,
    pos: usize,
    rounds: usize,
) -> u32 {
    let ls = rounds * Hybrid512::<Q>::SB;
    let ov = pos;
    let oa = pos + 256 * rounds;
    let (ob, oc) = (oa + ls, oa + 2 * ls);

    let (mut ca, mut cb, mut cc) = (0u64, 0u64, 0u64);
    let mut so = 0; // offset inside each scalar region
    let mut y = [_mm512_setzero_si512(); 4];
    for (i, yi) in y.iter_mut().enumerate() {
        // SAFETY: ov + 256 <= oa.
        *yi = unsafe { take64::<COPY>(s, dst, ov + 64 * i) };
    }
    let k = k512(K2048);
    let mut vo = ov + 256; // absolute offset of the next vector block
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
        so += Hybrid512::<Q>::SB;
        if so >= ls {
            break;
        }
        for (i, yi) in y.iter_mut().enumerate() {
            // SAFETY: vo + 256 <= ov + 256 * rounds = oa.
            let d = unsafe { take64::<COPY>(s, dst, vo + 64 * i) };
            *yi = fold4(*yi, k, d);
        }
        vo += 256;
    }
    let cv = reduce(reduce512(merge4(y)));
    let table: &'static [[u32; 4]; HMAX_ROUNDS + 1] = &Hybrid512::<Q>::K;
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
