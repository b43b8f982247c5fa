//! The deterministic payload pattern shared by senders and checkers: an mpa-xdp demo
//! convention (not MPA), kept with the other conventions the programs share.
//!
//! Octet `i` (0-based) of payload number `n` (0-based message count) is
//!
//! ```text
//! (n·131 + i·7 + 3) mod 251
//! ```
//!
//! computed exactly (no wrap-around at 2^64). `mpa-peer connect` sends payload `n` as the DDP
//! payload of its `n`-th RDMA Write or Send, so a receiver (or the benchmark) can recompute the
//! expected contents of a tagged region or receive buffer byte for byte.
//!
//! [`PatternTable`] produces the same octets by slicing one precomputed table: the pattern is
//! periodic in `i` with period 251 and payload `n` starts `198·n mod 251` into the period
//! (7·198 ≡ 131 mod 251), so senders copy instead of computing each octet.

/// The period of the pattern in both `n` and `i`.
pub const PERIOD: usize = 251;

/// Octet `i` of payload `n`: `(n·131 + i·7 + 3) mod 251`.
pub fn pattern(n: u64, i: usize) -> u8 {
    let n = (n % PERIOD as u64) as usize;
    let i = i % PERIOD;
    ((n * 131 + i * 7 + 3) % PERIOD) as u8
}

/// Precomputed pattern octets for payloads of up to `max_len` octets.
#[derive(Debug, Clone)]
pub struct PatternTable {
    table: Vec<u8>,
    max_len: usize,
}

impl PatternTable {
    /// A table serving payloads of up to `max_len` octets (`max_len + 251` octets of memory).
    pub fn new(max_len: usize) -> Self {
        PatternTable {
            table: (0..max_len + PERIOD)
                .map(|j| ((j * 7 + 3) % PERIOD) as u8)
                .collect(),
            max_len,
        }
    }

    /// The longest payload [`PatternTable::payload`] serves.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The first `len` octets of payload `n`: octet `i` is [`pattern`]`(n, i)`.
    ///
    /// # Panics
    ///
    /// When `len` exceeds [`PatternTable::max_len`].
    pub fn payload(&self, n: u64, len: usize) -> &[u8] {
        assert!(
            len <= self.max_len,
            "payload of {len} octets from a PatternTable of at most {}",
            self.max_len
        );
        let k = ((n % PERIOD as u64) * 198 % PERIOD as u64) as usize;
        &self.table[k..k + len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, written out literally (no wrap for these `n`).
    fn literal(n: u64, i: usize) -> u8 {
        ((n as u128 * 131 + i as u128 * 7 + 3) % 251) as u8
    }

    #[test]
    fn pattern_table_matches_the_definition() {
        let t = PatternTable::new(600);
        assert_eq!(t.max_len(), 600);
        for n in [0u64, 1, 2, 250, 251, 252, 65535, 1 << 33, u64::MAX] {
            let p = t.payload(n, 600);
            for (i, &b) in p.iter().enumerate() {
                assert_eq!(b, pattern(n, i), "n {n} i {i}");
                assert_eq!(b, literal(n, i), "n {n} i {i}");
            }
        }
        assert_eq!(t.payload(7, 0), &[] as &[u8]);
    }

    #[test]
    fn first_octets() {
        // n 0: 3, 10, 17, …; n 1: 134, 141, …
        assert_eq!(PatternTable::new(3).payload(0, 3), &[3, 10, 17]);
        assert_eq!(PatternTable::new(2).payload(1, 2), &[134, 141]);
    }

    #[test]
    #[should_panic(expected = "at most 4")]
    fn too_long_panics() {
        let _ = PatternTable::new(4).payload(0, 5);
    }
}
