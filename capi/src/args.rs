//! What C hands the library, read: the ABI's one place that dereferences pointers the
//! application passed. Each function checks for null and takes the length the caller
//! states; the caller promises (the header says so) that a non-null pointer points at that
//! many valid octets for the call's duration.
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use crate::errors::Failure;
use std::ffi::{c_char, CStr};

/// The NUL-terminated string at `p`, as UTF-8.
pub(crate) fn string<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::invalid(format!("{what}: null")));
    }
    // SAFETY: non-null, and the caller passes a NUL-terminated string valid for the call.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| Failure::invalid(format!("{what}: not UTF-8")))
}

/// The `len` octets at `p` (empty when `len` is 0, whatever `p`).
pub(crate) fn octets<'a>(p: *const u8, len: usize, what: &str) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::invalid(format!("{what}: null with length {len}")));
    }
    if len > isize::MAX as usize {
        return Err(Failure::invalid(format!("{what}: length {len}")));
    }
    // SAFETY: non-null, and the caller passes `len` readable octets valid for the call.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// The value at `p` (copied).
pub(crate) fn value<T: Copy>(p: *const T, what: &str) -> Result<T, Failure> {
    if p.is_null() {
        return Err(Failure::invalid(format!("{what}: null")));
    }
    // SAFETY: non-null, and the caller passes a valid, aligned T for the call.
    Ok(unsafe { p.read() })
}

/// Stores `v` at `p`.
pub(crate) fn store<T>(p: *mut T, v: T, what: &str) -> Result<(), Failure> {
    if p.is_null() {
        return Err(Failure::invalid(format!("{what}: null")));
    }
    // SAFETY: non-null, and the caller passes a valid, aligned, writable T for the call.
    unsafe { p.write(v) };
    Ok(())
}

/// The `n` writable values at `p`, each to be written with [`store_at`].
pub(crate) fn out_array<T>(p: *mut T, n: usize, what: &str) -> Result<(*mut T, usize), Failure> {
    if n > 0 && p.is_null() {
        return Err(Failure::invalid(format!("{what}: null with room for {n}")));
    }
    Ok((p, n))
}

/// Stores `v` as element `i` (< the `n` of [`out_array`]).
pub(crate) fn store_at<T>((p, n): (*mut T, usize), i: usize, v: T) {
    if i < n {
        // SAFETY: i < n, and the caller passes room for n values at p (checked non-null).
        unsafe { p.add(i).write(v) };
    }
}

/// The context at `p`, mutable for the call.
pub(crate) fn context<'a, T>(p: *mut T) -> Result<&'a mut T, Failure> {
    if p.is_null() {
        return Err(Failure::invalid("context: null"));
    }
    // SAFETY: non-null; the caller passes a context mpx_open returned and has not closed,
    // used by one thread at a time (the header's rule).
    Ok(unsafe { &mut *p })
}

/// Takes back the box [`Box::into_raw`] made of a context.
pub(crate) fn boxed<T>(p: *mut T) -> Box<T> {
    // SAFETY: p is non-null (checked by the caller) and came from Box::into_raw in
    // mpx_open; the header's rule: a context is closed once and not used after.
    unsafe { Box::from_raw(p) }
}

/// The application's descriptor `fd` (≥ 0), borrowed for the call.
pub(crate) fn descriptor<'a>(fd: std::ffi::c_int) -> std::os::fd::BorrowedFd<'a> {
    // SAFETY: fd ≥ 0 (checked by the caller), and the caller passes a descriptor it keeps
    // open for the call's duration (the header's rule).
    unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }
}
