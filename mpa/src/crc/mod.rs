//! CRC32c (Castagnoli), the MPA FPDU CRC (RFC 5044 §4.4, RFC 3720 B.4).
//!
//! Conventions: the public functions take and return the *finished* CRC value (final XOR
//! applied), so `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`. On the wire MPA sends the
//! value least-significant octet first (`u32::to_le_bytes`).
//!
//! The implementation is chosen once at run time (CPU feature detection, cached in an atomic;
//! a call pays one relaxed load and a branch) from [`impls`]:
//! * x86-64 with AVX2 + VPCLMULQDQ (no AVX-512 needed): [`impls::hybrid`] — 256-bit
//!   carry-less folding and three `crc32` chains running side by side; below about 800
//!   octets (or when the length leaves a long remainder) 256-bit folding alone.
//! * x86-64 with SSE4.2 + PCLMULQDQ: three `crc32` chains merged with PCLMULQDQ.
//! * x86-64 with SSE4.2: one `crc32` chain. Elsewhere: portable slice-by-8.
//!
//! Inputs shorter than 128 octets always take one `crc32` chain (no set-up). Every
//! implementation is tested against the bitwise [`crc32c_reference`].

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
    if matches!(level(), Level::Pclmul | Level::Vpclmul) {
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

/// `crc32q` per chain per round of the hybrid kernel.
#[cfg(target_arch = "x86_64")]
const HQ: usize = x86::HQ;

/// What this CPU offers, detected once.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
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
    } else if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("vpclmulqdq") {
        Level::Vpclmul
    } else {
        Level::Pclmul
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_uncached() -> Level {
    Level::Portable
}

/// The default kernel for `level`, on the raw register.
#[inline(always)]
fn update(level: Level, crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        let dst = core::ptr::null_mut();
        // Short inputs go straight to one `crc32` chain, without any set-up.
        let short = data.len() < x86::FOLD_MIN;
        // SAFETY: `level` says the CPU has each kernel's features; without COPY `dst` is
        // never used.
        let r = unsafe {
            match level {
                Level::Sse42 => Some(x86::chain::<false>(crc, data, dst)),
                _ if short => Some(x86::chain::<false>(crc, data, dst)),
                Level::Vpclmul => Some(x86::hybrid::<false, HQ>(crc, data, dst)),
                Level::Pclmul => Some(x86::three_way::<false>(crc, data, dst)),
                Level::Portable => None,
            }
        };
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
        let short = src.len() < x86::FOLD_MIN;
        // SAFETY: `level` says the CPU has each kernel's features; `d` is valid for
        // `src.len()` writes and does not overlap `src` (`&mut` and `&`).
        let r = unsafe {
            match level {
                Level::Sse42 => Some(x86::chain::<true>(crc, src, d)),
                _ if short => Some(x86::chain::<true>(crc, src, d)),
                Level::Vpclmul => Some(x86::hybrid::<true, HQ>(crc, src, d)),
                Level::Pclmul => Some(x86::three_way::<true>(crc, src, d)),
                Level::Portable => None,
            }
        };
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
    if matches!(level(), Level::Pclmul | Level::Vpclmul) {
        // SAFETY: the level says SSE4.2 and PCLMULQDQ are available.
        return unsafe { x86::shift(crc, n) };
    }
    portable::shift(crc, n)
}

/// Every implementation, for tests and benchmarks. The default functions above pick one.
pub mod impls {
    #[cfg(target_arch = "x86_64")]
    use super::x86;
    #[cfg(target_arch = "x86_64")]
    use super::HQ;
    use super::{portable, Level};

    /// A raw-register kernel; `dst` is written only by the copy kernels.
    type Kernel = unsafe fn(u32, &[u8], *mut u8) -> u32;

    /// One CRC32c implementation. Values exist only for implementations the running CPU
    /// supports, so calling one is always sound.
    #[derive(Clone, Copy)]
    pub struct Impl {
        name: &'static str,
        /// `None`: portable.
        kernels: Option<(Kernel, Kernel)>,
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

    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn at_least(l: Level) -> bool {
        super::level() as u8 >= l as u8
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
        #[cfg(target_arch = "x86_64")]
        if at_least(Level::Sse42) {
            return Some(Impl {
                name: "sse42",
                kernels: Some((x86::chain::<false>, x86::chain::<true>)),
            });
        }
        None
    }

    /// Three SSE4.2 `crc32` chains merged with PCLMULQDQ (up to 8 octets per cycle).
    pub fn sse42_3way() -> Option<Impl> {
        #[cfg(target_arch = "x86_64")]
        if at_least(Level::Pclmul) {
            return Some(Impl {
                name: "sse42_3way",
                kernels: Some((x86::three_way::<false>, x86::three_way::<true>)),
            });
        }
        None
    }

    /// 128-bit PCLMULQDQ folding.
    pub fn pclmul() -> Option<Impl> {
        #[cfg(target_arch = "x86_64")]
        if at_least(Level::Pclmul) {
            return Some(Impl {
                name: "pclmul",
                kernels: Some((x86::fold128::<false>, x86::fold128::<true>)),
            });
        }
        None
    }

    /// 256-bit VPCLMULQDQ folding (AVX2 encoding).
    pub fn vpclmul() -> Option<Impl> {
        #[cfg(target_arch = "x86_64")]
        if at_least(Level::Vpclmul) {
            return Some(Impl {
                name: "vpclmul",
                kernels: Some((x86::fold256::<false>, x86::fold256::<true>)),
            });
        }
        None
    }

    /// VPCLMULQDQ folding and three `crc32` chains side by side.
    pub fn hybrid() -> Option<Impl> {
        #[cfg(target_arch = "x86_64")]
        if at_least(Level::Vpclmul) {
            return Some(Impl {
                name: "hybrid",
                kernels: Some((x86::hybrid::<false, HQ>, x86::hybrid::<true, HQ>)),
            });
        }
        None
    }

    /// Every implementation this CPU runs, portable first.
    pub fn all() -> Vec<Impl> {
        let mut v = vec![portable()];
        v.extend(
            [sse42(), sse42_3way(), pclmul(), vpclmul(), hybrid()]
                .into_iter()
                .flatten(),
        );
        v
    }

    /// The implementation [`crc32c_append`](super::crc32c_append) uses on this CPU.
    pub fn default_impl() -> Impl {
        match super::level() {
            Level::Vpclmul => hybrid(),
            Level::Pclmul => sse42_3way(),
            Level::Sse42 => sse42(),
            Level::Portable => None,
        }
        .unwrap_or_else(portable)
    }
}
