//! Ready-to-Receive indication types (RFC 6581 §9.2) and sets of them.
//!
//! These are negotiation vocabulary, not a wire format: the enhanced connection establishment
//! data ([`crate::wire::startup::Rev2Params`]) carries a set as its B, C and D flags, the
//! startup policies ([`crate::startup::StartupPolicy`]) say which types we offer or accept,
//! and the datapath recognises the one chosen as the first FPDU. Kept in their own module so
//! that both the wire views and the negotiation import them without importing each other.

#![forbid(unsafe_code)]

use std::fmt;

/// A Ready-to-Receive indication type (RFC 6581 §9.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RtrType {
    /// A zero-length FULPDU Send (flag B).
    ZeroLengthSend,
    /// A zero-length RDMA Write (flag C).
    ZeroLengthWrite,
    /// A zero-length RDMA Read Request (flag D).
    ZeroLengthReadRequest,
}

impl RtrType {
    /// Every type, in our order of preference as Initiator.
    pub const ALL: [RtrType; 3] = [
        RtrType::ZeroLengthSend,
        RtrType::ZeroLengthWrite,
        RtrType::ZeroLengthReadRequest,
    ];

    const fn bit(self) -> u8 {
        match self {
            RtrType::ZeroLengthSend => 1,
            RtrType::ZeroLengthWrite => 2,
            RtrType::ZeroLengthReadRequest => 4,
        }
    }
}

/// A set of [`RtrType`]s: the B, C and D flags.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RtrSet {
    bits: u8,
}

impl RtrSet {
    /// No type.
    pub const EMPTY: RtrSet = RtrSet { bits: 0 };
    /// All three types.
    pub const ALL: RtrSet = RtrSet { bits: 7 };

    /// The set holding only `t`.
    pub const fn single(t: RtrType) -> Self {
        RtrSet { bits: t.bit() }
    }

    /// This set plus `t`.
    #[must_use]
    pub const fn with(self, t: RtrType) -> Self {
        RtrSet {
            bits: self.bits | t.bit(),
        }
    }

    /// This set less `t`.
    #[must_use]
    pub const fn without(self, t: RtrType) -> Self {
        RtrSet {
            bits: self.bits & !t.bit(),
        }
    }

    /// Whether `t` is in the set.
    pub const fn contains(self, t: RtrType) -> bool {
        self.bits & t.bit() != 0
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.bits == 0
    }

    /// Types in both sets.
    #[must_use]
    pub const fn intersection(self, other: RtrSet) -> Self {
        RtrSet {
            bits: self.bits & other.bits,
        }
    }

    /// The types, in preference order ([`RtrType::ALL`]), as a slice with static lifetime.
    pub fn as_slice(self) -> &'static [RtrType] {
        use RtrType::{ZeroLengthReadRequest as Rd, ZeroLengthSend as Sd, ZeroLengthWrite as Wr};
        const SUBSETS: [&[RtrType]; 8] = [
            &[],
            &[Sd],
            &[Wr],
            &[Sd, Wr],
            &[Rd],
            &[Sd, Rd],
            &[Wr, Rd],
            &[Sd, Wr, Rd],
        ];
        SUBSETS
            .get(usize::from(self.bits & 7))
            .copied()
            .unwrap_or(&[])
    }

    /// The first type in preference order.
    pub fn first(self) -> Option<RtrType> {
        self.as_slice().first().copied()
    }

    /// Iterates in preference order.
    pub fn iter(self) -> impl Iterator<Item = RtrType> {
        self.as_slice().iter().copied()
    }
}

impl FromIterator<RtrType> for RtrSet {
    fn from_iter<I: IntoIterator<Item = RtrType>>(iter: I) -> Self {
        iter.into_iter().fold(RtrSet::EMPTY, RtrSet::with)
    }
}

impl fmt::Debug for RtrSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtr_set() {
        assert!(RtrSet::EMPTY.is_empty());
        assert_eq!(RtrSet::ALL.as_slice(), &RtrType::ALL);
        let s: RtrSet = [RtrType::ZeroLengthReadRequest, RtrType::ZeroLengthWrite]
            .into_iter()
            .collect();
        assert_eq!(
            s.as_slice(),
            &[RtrType::ZeroLengthWrite, RtrType::ZeroLengthReadRequest]
        );
        assert_eq!(s.first(), Some(RtrType::ZeroLengthWrite));
        assert_eq!(
            s.without(RtrType::ZeroLengthWrite)
                .iter()
                .collect::<Vec<_>>(),
            vec![RtrType::ZeroLengthReadRequest]
        );
        assert_eq!(
            s.intersection(RtrSet::single(RtrType::ZeroLengthSend)),
            RtrSet::EMPTY
        );
        assert_eq!(
            format!("{:?}", s),
            "{ZeroLengthWrite, ZeroLengthReadRequest}"
        );
        for bits in 0..8u8 {
            let set = RtrSet { bits };
            assert_eq!(set.iter().collect::<RtrSet>(), set);
        }
    }
}
