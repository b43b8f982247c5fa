//! Asking for a received frame's cache lines ahead of use: the one instruction the frame
//! path needs that the standard library has no safe form of.

/// Asks for the cache lines of `data` (a received frame about to be processed) without
/// waiting for them. A hint: no effect on what any code reads. All of the frame: with only
/// its first lines (headers) the checksum pass still waits for the rest (measured with
/// `mpa-bench pipeline`: whole frame ≈ 600 ns/segment, first 2 or 6 lines 645–675, none 700).
#[inline]
pub(crate) fn prefetch(data: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    prefetch_lines::<{ core::arch::x86_64::_MM_HINT_T0 }>(data);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// [`prefetch`] into the second-level cache (`prefetcht1`): for the kilobytes of a jumbo
/// frame's descriptors, which asked for into the first level at once would fill its few miss
/// buffers and make the worker wait on its own prefetches
/// (docs/investigations/2026-12-07-jumbo-descriptors-ahead.md).
#[inline]
pub(crate) fn prefetch_into_l2(data: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    prefetch_lines::<{ core::arch::x86_64::_MM_HINT_T1 }>(data);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_lines<const HINT: i32>(data: &[u8]) {
    let p = data.as_ptr();
    for off in (0..data.len()).step_by(64) {
        // SAFETY: prefetch never faults and reads nothing the program sees; the address is
        // inside `data` anyway (SSE, part of every x86-64).
        unsafe { core::arch::x86_64::_mm_prefetch::<HINT>(p.add(off).cast()) };
    }
}
