//! CRC32c (Castagnoli), the MPA FPDU CRC (RFC 5044 §4.4, RFC 3720 B.4).
//!
//! Conventions: the public functions take and return the *finished* CRC value (final XOR
//! applied), so `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`. On the wire MPA sends the
//! value least-significant octet first (`u32::to_le_bytes`).
//!
//! The CPU level is detected once (cached in an atomic); a call pays one relaxed load, a
//! branch on the level and one to three compares on the length, then runs one kernel of
//! [`impls`] ([`selected_kernel`] names it):
//!
//! | level (features) | length (octets) → kernel |
//! |---|---|
//! | AVX512F + VPCLMULQDQ (+ SSE4.2, PCLMULQDQ, AVX2) | < 192 `sse42`; 192..255 `vpclmul`; 256..32 KiB−1 `avx512`; ≥ 32 KiB `hybrid512` |
//! | AVX2 + VPCLMULQDQ, no AVX-512 | < 192 `sse42`; 192..1023 `vpclmul`; ≥ 1 KiB `hybrid` |
//! | SSE4.2 + PCLMULQDQ | < 128 `sse42`; else `sse42_3way` |
//! | SSE4.2 | `sse42` |
//! | none / not x86-64 | `portable` |
//!
//! The AVX-512 row comes from `CRC_SIDE_BY_SIDE=21 cargo bench -p mpa --bench crc` (every
//! kernel in turn, median of 21 rounds, run twice) on an Intel Xeon (Sapphire Rapids,
//! AVX-512 + VPCLMULQDQ), shared with other builds; GiB/s, run 1 (run 2 under heavier load):
//!
//! | octets | `sse42` | `vpclmul` | `avx512` | `hybrid512` | `crc-fast` crate |
//! |---|---|---|---|---|---|
//! | 64 | 14.8 (10.0) | 13.9 (9.3) | 11.0 (7.5) | 9.6 (5.5) | 9.9 (6.5) |
//! | 128 | 20.4 (15.1) | 19.6 (14.2) | 19.1 (13.6) | 17.0 (11.2) | 16.6 (11.1) |
//! | 192 | 21.5 (16.7) | 26.8 (17.1) | 24.1 (16.5) | 22.4 (14.3) | 19.9 (14.9) |
//! | 256 | 21.6 (15.9) | 34.5 (23.1) | 37.5 (23.5) | 32.8 (18.8) | 19.1 (13.8) |
//! | 1024 | 15.8 (12.3) | 41.1 (36.4) | 70.2 (57.2) | 39.1 (22.1) | 50.9 (28.9) |
//! | 4096 | 8.7 (8.3) | 42.6 (38.2) | 80.1 (68.1) | 69.5 (50.4) | 56.0 (47.3) |
//! | 16 KiB | 7.7 (7.3) | 43.0 (35.3) | 82.4 (70.3) | 83.2 (65.7) | 72.8 (67.5) |
//! | 32 KiB | 7.3 (7.3) | 43.0 (35.2) | 84.6 (75.3) | 90.5 (63.2) | 84.0 (74.3) |
//! | 64 KiB | 7.2 (7.2) | 42.8 (31.5) | 81.3 (69.6) | 91.9 (56.9) | 80.5 (68.1) |
//!
//! The `crc-fast` crate (512-bit folding too) is never the fastest after these kernels, so it
//! stays a dev-dependency. Between 16 and 32 KiB `avx512` and `hybrid512` are within noise;
//! from 32 KiB (data beyond L1) `hybrid512`, whose 512-bit loads are 64-octet aligned, wins.
//!
//! The AVX2 row comes from the same command on an AMD EPYC (Zen 3: AVX2 + VPCLMULQDQ, no
//! AVX-512, the CPUs that take this row), two runs of 21 rounds that agreed within 2 %; GiB/s,
//! the selected kernel in bold:
//!
//! | octets | `sse42` | `sse42_3way` | `vpclmul` | `hybrid` |
//! |---|---|---|---|---|
//! | 64 | **9.0** | 8.1 | 8.8 | 8.6 |
//! | 128 | **15.2** | 11.3 | 12.9 | 12.1 |
//! | 192 | 14.5 | 14.0 | **15.7** | 14.9 |
//! | 256 | 14.1 | 15.6 | **17.6** | 16.8 |
//! | 512 | 10.6 | 19.3 | **21.5** | 20.9 |
//! | 1024 | 9.2 | 21.4 | 22.9 | **22.6** |
//! | 1448 | 8.8 | 22.2 | 23.4 | **28.2** |
//! | 4096 | 8.3 | 22.4 | 23.8 | **34.1** |
//! | 64 KiB | 8.1 | 23.4 | 24.1 | **34.7** |
//!
//! At 1 KiB `vpclmul` and `hybrid` are within noise; from 1448 octets `hybrid` wins by a fifth
//! and more. `sse42_3way` never wins on this CPU (an earlier report of it beating `hybrid` at
//! 1 KiB on Zen 3 is not borne out). The SSE4.2 + PCLMULQDQ row has not been measured on a CPU
//! of that level.
//!
//! Every implementation is tested against the bitwise [`crc32c_reference`].

use core::sync::atomic::{AtomicU8, Ordering};

mod portable;
#[cfg(test)]
mod tests;
// The kernels need Rust 1.89 (VPCLMULQDQ); the workspace's `rust-version` should say so.
#[cfg(target_arch = "x86_64")]
#[clippy::msrv = "1.89"]
mod x86;

/// Reflected Castagnoli polynomial.
pub const POLY: u32 = 0x82F6_3B78;

/// CRC32c of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// Extends a finished CRC32c value with more octets.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    !update(level(), !crc, data)
}

/// Copies `src` into `dst` and extends `crc` over the copied octets, in one pass (each octet
/// is read once, so the CRC costs little on top of the copy).
///
/// `dst` and `src` should have the same length. If they do not, this does not panic: it
/// copies the first `min(dst.len(), src.len())` octets and returns the CRC extended over
/// exactly those; callers that care compare the lengths themselves.
#[inline]
pub fn crc32c_copy(crc: u32, dst: &mut [u8], src: &[u8]) -> u32 {
    let n = dst.len().min(src.len());
    !copy(level(), !crc, &mut dst[..n], &src[..n])
}

/// The CRC32c of `a ++ b` from `crc_a = crc32c(a)`, `crc_b = crc32c(b)` and `len_b = b.len()`,
/// in O(log len_b) (one GF(2) multiplication per non-zero hex digit of `len_b`).
///
/// For out-of-order placement: the CRCs of pieces can be computed as they arrive and joined
/// later. `crc32c_combine(crc32c(a), crc32c(b), b.len()) == crc32c(a ++ b)`, and with
/// `crc_a = 0` (the CRC of nothing) it returns `crc_b`.
#[inline]
pub fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    // With finished values the initial and final inversions cancel:
    // crc(a ++ b) = crc(a) * x^(8 |b|) + crc(b)  (mod P).
    shift(crc_a, len_b) ^ crc_b
}

/// The CRC32c of `b` from `crc_ab = crc32c(a ++ b)`, `crc_a = crc32c(a)` and `len_b = b.len()`:
/// the rest of a received chunk whose first part an FPDU before it took, without reading the
/// rest's octets again. `crc32c_rest(crc32c(a), crc32c(a ++ b), b.len()) == crc32c(b)`.
#[inline]
pub fn crc32c_rest(crc_a: u32, crc_ab: u32, len_b: u64) -> u32 {
    // crc(a ++ b) = crc(a) * x^(8 |b|) + crc(b), and + is its own inverse in GF(2).
    crc32c_combine(crc_a, crc_ab, len_b)
}

/// [`crc32c_append`] over `data`, and from the same loads the Internet checksum's word sum
/// (RFC 1071) of `data`'s leading 64-octet blocks: one pass where a transport checksum and an
/// FPDU CRC would each read the octets (docs/architecture.md, "Receive path").
///
/// Returns `(crc, sum, covered)`: `sum` adds the 32-bit native-endian words of
/// `data[..covered]` into a `u64` (unfolded; it folds to the ones' complement sum of the same
/// octets), `covered` a multiple of 64; the caller sums `data[covered..]` itself. Where the
/// CPU has no AVX-512 kernel, or `data` is shorter than one block, nothing is summed
/// (`covered == 0`).
#[inline]
pub fn crc32c_append_summing(crc: u32, data: &[u8]) -> (u32, u64, usize) {
    #[cfg(target_arch = "x86_64")]
    if level() == Level::Avx512 && data.len() >= AVX512_FOLD_MIN {
        // SAFETY: the level says AVX512F, VPCLMULQDQ, AVX2, PCLMULQDQ and SSE4.2 are there;
        // without COPY `dst` is never used.
        return unsafe {
            let mut sum = x86::WordSum::new();
            let c =
                x86::fold512_summing::<false, true>(!crc, data, core::ptr::null_mut(), &mut sum);
            (!c, sum.total(), sum.covered)
        };
    }
    (crc32c_append(crc, data), 0, 0)
}

/// [`crc32c_combine`] for one fixed `len_b`, precomputed: each combine is then a single
/// carry-less multiply (for checking runs of equal-length FPDUs in one CRC pass).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CombineFixed {
    len_b: u64,
    /// x^(8 len_b) mod P, reflected.
    k: u32,
}

impl CombineFixed {
    /// Precomputes the combine for second parts of `len_b` octets.
    pub fn new(len_b: u64) -> Self {
        CombineFixed {
            len_b,
            k: shift(portable::ONE, len_b),
        }
    }

    /// The length it was built for.
    pub fn len_b(&self) -> u64 {
        self.len_b
    }

    /// `crc32c_combine(crc_a, crc_b, self.len_b())`.
    #[inline]
    pub fn combine(&self, crc_a: u32, crc_b: u32) -> u32 {
        mul(crc_a, self.k) ^ crc_b
    }
}

/// `a * b mod P` (reflected), with the carry-less multiply where the CPU has it.
#[inline]
fn mul(a: u32, b: u32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if level() >= Level::Pclmul {
        // SAFETY: the level says SSE4.2 and PCLMULQDQ are available.
        return unsafe { x86::mul(a, b) };
    }
    portable::mul(a, b)
}

/// `crc32c_append(crc, &[0; n])` without the octets, in O(log n).
#[inline]
pub fn crc32c_append_zeros(crc: u32, n: u64) -> u32 {
    !shift(!crc, n)
}

/// Bitwise reference implementation, for differential tests.
pub fn crc32c_reference(data: &[u8]) -> u32 {
    !portable::bitwise(!0, data)
}

/// `crc32q` per chain per round of the hybrid kernels.
#[cfg(target_arch = "x86_64")]
const HQ: usize = x86::HQ;
#[cfg(target_arch = "x86_64")]
const HQ512: usize = x86::HQ512;

/// What this CPU offers, detected once.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[repr(u8)]
enum Level {
    Portable = 1,
    /// SSE4.2 `crc32`.
    Sse42 = 2,
    /// SSE4.2 and PCLMULQDQ.
    Pclmul = 3,
    /// SSE4.2, PCLMULQDQ, AVX2 and VPCLMULQDQ.
    Vpclmul = 4,
    /// All of the above, AVX512F and VPCLMULQDQ on 512-bit registers.
    Avx512 = 5,
}

/// 0 until detected, then a `Level`.
static LEVEL: AtomicU8 = AtomicU8::new(0);

#[inline(always)]
fn level() -> Level {
    match LEVEL.load(Ordering::Relaxed) {
        1 => Level::Portable,
        2 => Level::Sse42,
        3 => Level::Pclmul,
        4 => Level::Vpclmul,
        5 => Level::Avx512,
        _ => detect(),
    }
}

#[cold]
#[inline(never)]
fn detect() -> Level {
    let l = detect_uncached();
    LEVEL.store(l as u8, Ordering::Relaxed);
    l
}

#[cfg(target_arch = "x86_64")]
fn detect_uncached() -> Level {
    if !std::is_x86_feature_detected!("sse4.2") {
        Level::Portable
    } else if !std::is_x86_feature_detected!("pclmulqdq") {
        Level::Sse42
    } else if !(std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("vpclmulqdq"))
    {
        Level::Pclmul
    } else if std::is_x86_feature_detected!("avx512f") {
        Level::Avx512
    } else {
        Level::Vpclmul
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_uncached() -> Level {
    Level::Portable
}

/// A kernel the default functions can run (each name is also an [`impls`] entry).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
enum Kernel {
    Portable,
    Sse42,
    Sse42ThreeWay,
    Pclmul,
    Vpclmul,
    Hybrid,
    Avx512,
    Hybrid512,
}

impl Kernel {
    const fn name(self) -> &'static str {
        match self {
            Kernel::Portable => "portable",
            Kernel::Sse42 => "sse42",
            Kernel::Sse42ThreeWay => "sse42_3way",
            Kernel::Pclmul => "pclmul",
            Kernel::Vpclmul => "vpclmul",
            Kernel::Hybrid => "hybrid",
            Kernel::Avx512 => "avx512",
            Kernel::Hybrid512 => "hybrid512",
        }
    }

    /// The CPU level the kernel needs.
    const fn needs(self) -> Level {
        match self {
            Kernel::Portable => Level::Portable,
            Kernel::Sse42 => Level::Sse42,
            Kernel::Sse42ThreeWay | Kernel::Pclmul => Level::Pclmul,
            Kernel::Vpclmul | Kernel::Hybrid => Level::Vpclmul,
            Kernel::Avx512 | Kernel::Hybrid512 => Level::Avx512,
        }
    }
}

/// SSE4.2 + PCLMULQDQ: below this many octets one `crc32` chain (no set-up).
const SHORT: usize = 128;
/// AVX2 + VPCLMULQDQ without AVX-512: below this, one `crc32` chain; from it,
/// [`Kernel::Vpclmul`].
const VPCLMUL_SHORT: usize = 192;
/// AVX2 + VPCLMULQDQ without AVX-512: from this, [`Kernel::Hybrid`].
const VPCLMUL_HYBRID_MIN: usize = 1024;
/// AVX-512: below this, one `crc32` chain; from it, [`Kernel::Vpclmul`] (whose four 256-bit
/// accumulators beat one 512-bit accumulator on short inputs).
const AVX512_VPCLMUL_MIN: usize = 192;
/// AVX-512: from this, [`Kernel::Avx512`].
const AVX512_FOLD_MIN: usize = 256;
/// AVX-512: from this, [`Kernel::Hybrid512`].
const AVX512_HYBRID_MIN: usize = 32 * 1024;

/// The kernel the default functions run on `len` octets at `level` (the table in the module
/// documentation). Inlined into the callers: a few compares on `len`.
#[inline(always)]
fn pick(level: Level, len: usize) -> Kernel {
    match level {
        // Tested first: the shortest inputs pay the least for the choice.
        Level::Avx512 if len < AVX512_VPCLMUL_MIN => Kernel::Sse42,
        Level::Avx512 if len < AVX512_FOLD_MIN => Kernel::Vpclmul,
        Level::Avx512 if len < AVX512_HYBRID_MIN => Kernel::Avx512,
        Level::Avx512 => Kernel::Hybrid512,
        Level::Portable => Kernel::Portable,
        Level::Sse42 => Kernel::Sse42,
        Level::Vpclmul if len < VPCLMUL_SHORT => Kernel::Sse42,
        Level::Vpclmul if len < VPCLMUL_HYBRID_MIN => Kernel::Vpclmul,
        Level::Vpclmul => Kernel::Hybrid,
        Level::Pclmul if len < SHORT => Kernel::Sse42,
        Level::Pclmul => Kernel::Sse42ThreeWay,
    }
}

/// The name of the kernel (see [`impls`]) that [`crc32c`], [`crc32c_append`] and
/// [`crc32c_copy`] run for `len` octets on this CPU.
pub fn selected_kernel(len: usize) -> &'static str {
    pick(level(), len).name()
}

/// Runs x86 kernel `k` on the raw register; `None` for [`Kernel::Portable`].
///
/// # Safety
/// The CPU must be at `k.needs()` or above; with `COPY`, `dst` must be valid for
/// `src.len()` writes and must not overlap `src` (without it `dst` is unused).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn run_x86<const COPY: bool>(k: Kernel, crc: u32, src: &[u8], dst: *mut u8) -> Option<u32> {
    // SAFETY: the caller guarantees each kernel's features and the `dst` contract.
    unsafe {
        Some(match k {
            Kernel::Portable => return None,
            Kernel::Sse42 => x86::chain::<COPY>(crc, src, dst),
            Kernel::Sse42ThreeWay => x86::three_way::<COPY>(crc, src, dst),
            Kernel::Pclmul => x86::fold128::<COPY>(crc, src, dst),
            Kernel::Vpclmul => x86::fold256::<COPY>(crc, src, dst),
            Kernel::Hybrid => x86::hybrid::<COPY, HQ>(crc, src, dst),
            Kernel::Avx512 => x86::fold512::<COPY>(crc, src, dst),
            Kernel::Hybrid512 => x86::hybrid512::<COPY, HQ512>(crc, src, dst),
        })
    }
}

/// The default kernel for `level`, on the raw register.
#[inline(always)]
fn update(level: Level, crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `pick` only returns kernels that `level` (detected) supports; without COPY
        // `dst` is never used.
        let r =
            unsafe { run_x86::<false>(pick(level, data.len()), crc, data, core::ptr::null_mut()) };
        if let Some(r) = r {
            return r;
        }
    }
    let _ = level;
    portable::update(crc, data)
}

/// The default fused copy kernel for `level`, on the raw register; `dst.len() == src.len()`.
#[inline(always)]
fn copy(level: Level, crc: u32, dst: &mut [u8], src: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if dst.len() == src.len() {
        let d = dst.as_mut_ptr();
        // SAFETY: `pick` only returns kernels that `level` (detected) supports; `d` is valid
        // for `src.len()` writes and does not overlap `src` (`&mut` and `&`).
        let r = unsafe { run_x86::<true>(pick(level, src.len()), crc, src, d) };
        if let Some(r) = r {
            return r;
        }
    }
    let _ = level;
    portable::copy(crc, dst, src)
}

/// `crc * x^(8 n) mod P`.
#[inline]
fn shift(crc: u32, n: u64) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if level() >= Level::Pclmul {
        // SAFETY: the level says SSE4.2 and PCLMULQDQ are available.
        return unsafe { x86::shift(crc, n) };
    }
    portable::shift(crc, n)
}

/// Every implementation, for tests and benchmarks. The default functions above pick one per
/// size ([`selected_kernel`]).
pub mod impls {
    #[cfg(target_arch = "x86_64")]
    use super::x86;
    use super::{portable, Kernel};
    #[cfg(target_arch = "x86_64")]
    use super::{HQ, HQ512};

    /// A raw-register kernel; `dst` is written only by the copy kernels.
    type KernelFn = unsafe fn(u32, &[u8], *mut u8) -> u32;

    /// One CRC32c implementation. Values exist only for implementations the running CPU
    /// supports, so calling one is always sound.
    #[derive(Clone, Copy)]
    pub struct Impl {
        name: &'static str,
        /// `None`: portable.
        kernels: Option<(KernelFn, KernelFn)>,
    }

    impl core::fmt::Debug for Impl {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str(self.name)
        }
    }

    impl Impl {
        /// Short name (`"portable"`, `"sse42"`, ...).
        pub fn name(&self) -> &'static str {
            self.name
        }

        /// As [`crc32c_append`](super::crc32c_append), with this implementation.
        pub fn append(&self, crc: u32, data: &[u8]) -> u32 {
            match self.kernels {
                // SAFETY: an `Impl` with kernels is only built after detecting their
                // features; `dst` is unused without COPY.
                Some((update, _)) => !unsafe { update(!crc, data, core::ptr::null_mut()) },
                None => !portable::update(!crc, data),
            }
        }

        /// As [`crc32c_copy`](super::crc32c_copy), with this implementation.
        pub fn copy(&self, crc: u32, dst: &mut [u8], src: &[u8]) -> u32 {
            let n = dst.len().min(src.len());
            let (dst, src) = (&mut dst[..n], &src[..n]);
            match self.kernels {
                // SAFETY: features detected (see `append`); `dst` is valid for `src.len()`
                // writes and does not overlap `src`.
                Some((_, copy)) => !unsafe { copy(!crc, src, dst.as_mut_ptr()) },
                None => !portable::copy(!crc, dst, src),
            }
        }
    }

    /// The implementation of `k`, if this CPU runs it.
    fn of(k: Kernel) -> Option<Impl> {
        if super::level() < k.needs() {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        let kernels: Option<(KernelFn, KernelFn)> = match k {
            Kernel::Portable => None,
            Kernel::Sse42 => Some((x86::chain::<false>, x86::chain::<true>)),
            Kernel::Sse42ThreeWay => Some((x86::three_way::<false>, x86::three_way::<true>)),
            Kernel::Pclmul => Some((x86::fold128::<false>, x86::fold128::<true>)),
            Kernel::Vpclmul => Some((x86::fold256::<false>, x86::fold256::<true>)),
            Kernel::Hybrid => Some((x86::hybrid::<false, HQ>, x86::hybrid::<true, HQ>)),
            Kernel::Avx512 => Some((x86::fold512::<false>, x86::fold512::<true>)),
            Kernel::Hybrid512 => Some((
                x86::hybrid512::<false, HQ512>,
                x86::hybrid512::<true, HQ512>,
            )),
        };
        #[cfg(not(target_arch = "x86_64"))]
        let kernels = None;
        Some(Impl {
            name: k.name(),
            kernels,
        })
    }

    /// Portable slice-by-8; always available.
    pub fn portable() -> Impl {
        Impl {
            name: "portable",
            kernels: None,
        }
    }

    /// One SSE4.2 `crc32` chain (8 octets per 3 cycles).
    pub fn sse42() -> Option<Impl> {
        of(Kernel::Sse42)
    }

    /// Three SSE4.2 `crc32` chains merged with PCLMULQDQ (up to 8 octets per cycle).
    pub fn sse42_3way() -> Option<Impl> {
        of(Kernel::Sse42ThreeWay)
    }

    /// 128-bit PCLMULQDQ folding.
    pub fn pclmul() -> Option<Impl> {
        of(Kernel::Pclmul)
    }

    /// 256-bit VPCLMULQDQ folding (AVX2 encoding).
    pub fn vpclmul() -> Option<Impl> {
        of(Kernel::Vpclmul)
    }

    /// 256-bit VPCLMULQDQ folding and three `crc32` chains side by side.
    pub fn hybrid() -> Option<Impl> {
        of(Kernel::Hybrid)
    }

    /// 512-bit VPCLMULQDQ folding (AVX512F).
    pub fn avx512() -> Option<Impl> {
        of(Kernel::Avx512)
    }

    /// 512-bit VPCLMULQDQ folding and three `crc32` chains side by side (AVX512F).
    pub fn hybrid512() -> Option<Impl> {
        of(Kernel::Hybrid512)
    }

    /// Every implementation this CPU runs, portable first.
    pub fn all() -> Vec<Impl> {
        let mut v = vec![portable()];
        v.extend(
            [
                sse42(),
                sse42_3way(),
                pclmul(),
                vpclmul(),
                hybrid(),
                avx512(),
                hybrid512(),
            ]
            .into_iter()
            .flatten(),
        );
        v
    }

    /// The implementation the default functions use for `len` octets on this CPU.
    pub fn selected(len: usize) -> Impl {
        of(super::pick(super::level(), len)).unwrap_or_else(portable)
    }
}
