//! The program's per-CPU `counters`, mirrored from `struct xdp_counters` in `steer.bpf.c`.

use std::ops::{Add, AddAssign};

/// Octets in `struct xdp_counters`.
pub(crate) const COUNTERS_SIZE: usize = 10 * 8;

/// What the XDP program did, frame by frame.
///
/// `seen == redirected + steered_no_xsk + passed + dropped()` (for one CPU, up to frames in
/// flight while the counters are read); `malformed` counts a subset of `passed +
/// dropped_malformed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct XdpCounters {
    /// Every frame the program ran on.
    pub seen: u64,
    /// Steered frames for which an AF_XDP socket was in the map (`XDP_REDIRECT`). Whether the
    /// socket then accepted the frame shows in its own `XDP_STATISTICS`.
    pub redirected: u64,
    /// Frames given to the kernel (`XDP_PASS`).
    pub passed: u64,
    /// Frames with a truncated or invalid Ethernet, VLAN, IP or TCP header (passed, or
    /// dropped when they are between a steered host pair: `dropped_malformed`).
    pub malformed: u64,
    /// Steered frames dropped because no AF_XDP socket was bound for their RX queue.
    pub steered_no_xsk: u64,
    /// IPv4 or IPv6 fragments that may carry TCP between a steered host pair: dropped, as
    /// the kernel would give them to a frozen socket (docs/architecture.md, "XDP steering").
    pub dropped_fragment: u64,
    /// IPv6 frames with TCP (or a chain not followed) behind extension headers between a
    /// steered host pair: dropped.
    pub dropped_ipv6_ext: u64,
    /// Frames with two or more VLAN tags whose inner frame is TCP between a steered host
    /// pair, or with more tags than the program looks through (any hosts): dropped.
    pub dropped_vlan_stack: u64,
    /// Malformed frames (cut inside the TCP header or an IPv6 extension chain) whose
    /// addresses are a steered host pair: dropped, so the frozen socket never sees them.
    pub dropped_malformed: u64,
    /// Multi-buffer (jumbo) frames whose linear part ended inside their headers: the
    /// headers were copied out and parsed whole (any verdict; docs/architecture.md, "Jumbo
    /// frames").
    pub headers_copied: u64,
}

impl XdpCounters {
    /// Decodes one CPU's `struct xdp_counters` (host byte order). Short input reads as zeros.
    pub(crate) fn from_bytes(b: &[u8]) -> Self {
        let word = |i: usize| {
            b.get(i * 8..i * 8 + 8)
                .map(|w| u64::from_ne_bytes(w.try_into().expect("8-octet slice")))
                .unwrap_or(0)
        };
        Self {
            seen: word(0),
            redirected: word(1),
            passed: word(2),
            malformed: word(3),
            steered_no_xsk: word(4),
            dropped_fragment: word(5),
            dropped_ipv6_ext: word(6),
            dropped_vlan_stack: word(7),
            dropped_malformed: word(8),
            headers_copied: word(9),
        }
    }

    /// Field-wise difference `self - earlier`, saturating at zero: what happened between two
    /// reads.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            seen: self.seen.saturating_sub(earlier.seen),
            redirected: self.redirected.saturating_sub(earlier.redirected),
            passed: self.passed.saturating_sub(earlier.passed),
            malformed: self.malformed.saturating_sub(earlier.malformed),
            steered_no_xsk: self.steered_no_xsk.saturating_sub(earlier.steered_no_xsk),
            dropped_fragment: self
                .dropped_fragment
                .saturating_sub(earlier.dropped_fragment),
            dropped_ipv6_ext: self
                .dropped_ipv6_ext
                .saturating_sub(earlier.dropped_ipv6_ext),
            dropped_vlan_stack: self
                .dropped_vlan_stack
                .saturating_sub(earlier.dropped_vlan_stack),
            dropped_malformed: self
                .dropped_malformed
                .saturating_sub(earlier.dropped_malformed),
            headers_copied: self.headers_copied.saturating_sub(earlier.headers_copied),
        }
    }

    /// Frames dropped because they could not be parsed down to the ports but may belong to
    /// a steered flow (the four `dropped_*` counters).
    pub fn dropped(&self) -> u64 {
        self.dropped_fragment
            + self.dropped_ipv6_ext
            + self.dropped_vlan_stack
            + self.dropped_malformed
    }
}

impl AddAssign for XdpCounters {
    fn add_assign(&mut self, o: Self) {
        self.seen += o.seen;
        self.redirected += o.redirected;
        self.passed += o.passed;
        self.malformed += o.malformed;
        self.steered_no_xsk += o.steered_no_xsk;
        self.dropped_fragment += o.dropped_fragment;
        self.dropped_ipv6_ext += o.dropped_ipv6_ext;
        self.dropped_vlan_stack += o.dropped_vlan_stack;
        self.dropped_malformed += o.dropped_malformed;
        self.headers_copied += o.headers_copied;
    }
}

impl Add for XdpCounters {
    type Output = Self;

    fn add(mut self, o: Self) -> Self {
        self += o;
        self
    }
}

impl std::iter::Sum for XdpCounters {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        iter.fold(Self::default(), Add::add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_and_sum() {
        let mut b = [0u8; COUNTERS_SIZE];
        for (i, w) in b.chunks_mut(8).enumerate() {
            w.copy_from_slice(&(i as u64 + 1).to_ne_bytes());
        }
        let c = XdpCounters::from_bytes(&b);
        assert_eq!(
            c,
            XdpCounters {
                seen: 1,
                redirected: 2,
                passed: 3,
                malformed: 4,
                steered_no_xsk: 5,
                dropped_fragment: 6,
                dropped_ipv6_ext: 7,
                dropped_vlan_stack: 8,
                dropped_malformed: 9,
                headers_copied: 10,
            }
        );
        let total: XdpCounters = [c, c].into_iter().sum();
        assert_eq!(total.steered_no_xsk, 10);
        assert_eq!(total.dropped(), 60);
        assert_eq!(total.since(&c), c);
        assert_eq!(c.since(&total).seen, 0);
        assert_eq!(XdpCounters::from_bytes(&b[..8]).seen, 1);
    }
}
