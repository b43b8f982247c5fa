//! TCP sequence numbers: 32-bit, wrapping, compared in serial-number arithmetic.

use std::cmp::Ordering;
use std::fmt;
use std::ops::{Add, Sub};

/// A TCP sequence number. Arithmetic wraps modulo 2^32; ordering is only meaningful for
/// numbers less than 2^31 apart (RFC 793 §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SeqNumber(pub u32);

impl SeqNumber {
    /// Octets from `earlier` to `self`, modulo 2^32.
    #[inline]
    pub fn distance_from(self, earlier: SeqNumber) -> u32 {
        self.0.wrapping_sub(earlier.0)
    }
}

impl Add<u32> for SeqNumber {
    type Output = SeqNumber;
    #[inline]
    fn add(self, rhs: u32) -> SeqNumber {
        SeqNumber(self.0.wrapping_add(rhs))
    }
}

impl Add<usize> for SeqNumber {
    type Output = SeqNumber;
    #[inline]
    fn add(self, rhs: usize) -> SeqNumber {
        // Truncation is the point: sequence space is modulo 2^32.
        SeqNumber(self.0.wrapping_add(rhs as u32))
    }
}

impl Sub<SeqNumber> for SeqNumber {
    type Output = i32;
    /// Signed distance, valid when the two are less than 2^31 apart.
    #[inline]
    fn sub(self, rhs: SeqNumber) -> i32 {
        self.0.wrapping_sub(rhs.0) as i32
    }
}

impl PartialOrd for SeqNumber {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some((*self - *other).cmp(&0))
    }
}

impl fmt::Display for SeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps() {
        let a = SeqNumber(u32::MAX - 1);
        let b = a + 4u32;
        assert_eq!(b, SeqNumber(2));
        assert!(a < b);
        assert_eq!(b - a, 4);
        assert_eq!(b.distance_from(a), 4);
    }
}
