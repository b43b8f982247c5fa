//! Portable CRC32c: slice-by-8 tables, the bitwise reference and polynomial arithmetic
//! modulo P over GF(2) (for combining CRCs and for the SIMD kernels' folding constants).
//!
//! Representation: a polynomial of degree < 32 is a `u32` in *reflected* order, bit 31 holding
//! the coefficient of x^0 and bit 0 that of x^31 — the order the CRC register uses.

use super::POLY;

/// x^0 in reflected order.
pub(crate) const ONE: u32 = 1 << 31;

/// `a * b mod P` (both reflected). Constant time, 32 steps.
pub(crate) const fn mul(a: u32, b: u32) -> u32 {
    let mut p = 0u32;
    let mut b = b;
    let mut i = 0;
    while i < 32 {
        // Coefficient of x^i in `a`: add b * x^i.
        p ^= b & 0u32.wrapping_sub((a >> (31 - i)) & 1);
        // b *= x: a shift towards bit 0, reducing x^32 to P's lower terms.
        b = (b >> 1) ^ (POLY & 0u32.wrapping_sub(b & 1));
        i += 1;
    }
    p
}

/// `x^e mod P` (reflected), square and multiply.
pub(crate) const fn xpow(e: u64) -> u32 {
    let mut r = ONE;
    let mut base = ONE >> 1; // x^1
    let mut e = e;
    while e != 0 {
        if e & 1 != 0 {
            r = mul(r, base);
        }
        base = mul(base, base);
        e >>= 1;
    }
    r
}

/// `X8N[k][d] = x^(8 * d * 16^k) mod P`: shifting a CRC by `n` octets takes one
/// multiplication per non-zero nibble of `n`.
pub(crate) static X8N: [[u32; 16]; 16] = make_x8n();

const fn make_x8n() -> [[u32; 16]; 16] {
    let mut t = [[ONE; 16]; 16];
    let mut step = xpow(8); // x^(8 * 16^k)
    let mut k = 0;
    while k < 16 {
        let mut d = 1;
        while d < 16 {
            t[k][d] = mul(t[k][d - 1], step);
            d += 1;
        }
        // x^(8 * 16^(k+1)) = (x^(8 * 16^k))^16
        let mut s = 0;
        while s < 4 {
            step = mul(step, step);
            s += 1;
        }
        k += 1;
    }
    t
}

/// `X8B[0][i] = x^(8 i) mod P` and `X8B[1][i] = x^(8 * 256 i) mod P`: shifting a CRC by
/// fewer than 2^16 octets (a segment, an FPDU) takes two multiplications and no branch.
pub(crate) static X8B: [[u32; 256]; 2] = make_x8b();

const fn make_x8b() -> [[u32; 256]; 2] {
    let mut t = [[ONE; 256]; 2];
    let steps = [xpow(8), xpow(8 * 256)];
    let mut k = 0;
    while k < 2 {
        let mut i = 1;
        while i < 256 {
            t[k][i] = mul(t[k][i - 1], steps[k]);
            i += 1;
        }
        k += 1;
    }
    t
}

/// `crc * x^(8 n) mod P` with the portable multiply: the register after `n` zero octets.
pub(crate) fn shift(crc: u32, n: u64) -> u32 {
    shift_with(crc, n, mul)
}

/// `crc * x^(8 n) mod P`, multiplying with `mul`.
#[inline(always)]
pub(crate) fn shift_with(crc: u32, n: u64, mul: impl Fn(u32, u32) -> u32) -> u32 {
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

/// Bitwise CRC over the raw (non-inverted) register.
pub(crate) fn bitwise(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (POLY & 0u32.wrapping_sub(crc & 1));
        }
    }
    crc
}

const fn make_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = (c >> 1) ^ (POLY & 0u32.wrapping_sub(c & 1));
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut i = 0;
    while i < 256 {
        let mut j = 1;
        while j < 8 {
            t[j][i] = (t[j - 1][i] >> 8) ^ t[0][(t[j - 1][i] & 0xff) as usize];
            j += 1;
        }
        i += 1;
    }
    t
}

static TABLES: [[u32; 256]; 8] = make_tables();

/// Slice-by-8 over the raw (non-inverted) register. Not inlined: it would make every caller
/// (the dispatching `crc32c`) save registers even on the SIMD paths.
#[inline(never)]
pub(crate) fn update(mut crc: u32, data: &[u8]) -> u32 {
    let t = &TABLES;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let lo = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) ^ crc;
        let hi = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        crc = t[7][(lo & 0xff) as usize]
            ^ t[6][((lo >> 8) & 0xff) as usize]
            ^ t[5][((lo >> 16) & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][(hi & 0xff) as usize]
            ^ t[2][((hi >> 8) & 0xff) as usize]
            ^ t[1][((hi >> 16) & 0xff) as usize]
            ^ t[0][(hi >> 24) as usize];
    }
    for &b in chunks.remainder() {
        crc = (crc >> 8) ^ t[0][((crc ^ u32::from(b)) & 0xff) as usize];
    }
    crc
}

/// Copy and CRC in cache-sized pieces: each piece is copied, then read back while hot.
pub(crate) fn copy(mut crc: u32, dst: &mut [u8], src: &[u8]) -> u32 {
    const PIECE: usize = 1024;
    for (d, s) in dst.chunks_mut(PIECE).zip(src.chunks(PIECE)) {
        d.copy_from_slice(s);
        crc = update(crc, d);
    }
    crc
}
