//! The worker's flows by 4-tuple, looked up once per received frame.
//!
//! Frames of one flow come in runs (a burst holds a window's worth of one sender's
//! segments), so the table remembers the last entry found: a frame of the same flow costs
//! one key comparison, not a hash and a probe. Flows live in slots (a slab) so that the
//! remembered entry is an index that stays valid until that flow is removed. The hash of a
//! miss writes each address and port as whole integers (SocketAddr's own `Hash` feeds the
//! hasher octet slices and discriminants piece by piece: a tenth of the pipeline's samples
//! with SipHash, still ~5 % with foldhash).

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;

/// (local, remote), canonical (IPv4-mapped IPv6 addresses as IPv4).
type FlowKey = (SocketAddr, SocketAddr);

/// The hasher of the worker's maps. Keys come from the network, so the hash must not be
/// predictable: foldhash's `RandomState` draws a per-process global seed plus a per-map seed,
/// so a peer cannot precompute colliding 4-tuples offline, and can choose only its own ports
/// and addresses (a few of the tuple's bits) anyway. foldhash is not cryptographic
/// ("minimally DoS-resistant"): recovering the seed would take studying lookup timings of a
/// long-running worker, and the worker holds only the flows handed to it, not one per peer
/// SYN.
pub type FlowHasher = foldhash::fast::RandomState;

/// A [`FlowKey`] hashed as integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IndexKey(FlowKey);

impl Hash for IndexKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        fn one<H: Hasher>(a: &SocketAddr, state: &mut H) {
            match a {
                SocketAddr::V4(v4) => {
                    state.write_u64(u64::from(v4.ip().to_bits()) << 16 | u64::from(v4.port()))
                }
                SocketAddr::V6(v6) => {
                    state.write_u128(v6.ip().to_bits());
                    state.write_u16(v6.port());
                }
            }
        }
        one(&self.0 .0, state);
        one(&self.0 .1, state);
    }
}

/// Flows (`V`: the worker's [`crate::flow::Flow`]) by 4-tuple, remembering the last one found.
#[derive(Debug)]
pub struct FlowTable<V> {
    slots: Vec<Option<(FlowKey, V)>>,
    /// Empty slots, reused before the vector grows.
    free: Vec<usize>,
    index: HashMap<IndexKey, usize, FlowHasher>,
    /// The entry the last successful lookup found: its slot holds this key while it is set.
    last: Option<(FlowKey, usize)>,
}

impl<V> Default for FlowTable<V> {
    fn default() -> Self {
        FlowTable {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashMap::default(),
            last: None,
        }
    }
}

impl<V> FlowTable<V> {
    /// Flows held.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no flow is held.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Whether a flow of `key` is held.
    pub fn contains_key(&self, key: &FlowKey) -> bool {
        self.index.contains_key(&IndexKey(*key))
    }

    /// The flow of `key`.
    #[inline]
    pub fn get_mut(&mut self, key: &FlowKey) -> Option<&mut V> {
        let slot = match self.last {
            Some((k, slot)) if k == *key => slot,
            _ => {
                let slot = *self.index.get(&IndexKey(*key))?;
                self.last = Some((*key, slot));
                slot
            }
        };
        self.slots
            .get_mut(slot)
            .and_then(Option::as_mut)
            .map(|(_, f)| f)
    }

    /// Adds the flow of `key`, returning the one it replaces.
    pub fn insert(&mut self, key: FlowKey, flow: V) -> Option<V> {
        if let Some(&slot) = self.index.get(&IndexKey(key)) {
            return self.slots[slot].replace((key, flow)).map(|(_, f)| f);
        }
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s] = Some((key, flow));
                s
            }
            None => {
                self.slots.push(Some((key, flow)));
                self.slots.len() - 1
            }
        };
        self.index.insert(IndexKey(key), slot);
        None
    }

    /// Removes the flow of `key`.
    pub fn remove(&mut self, key: &FlowKey) -> Option<V> {
        let slot = self.index.remove(&IndexKey(*key))?;
        if self.last.is_some_and(|(_, s)| s == slot) {
            self.last = None;
        }
        self.free.push(slot);
        self.slots[slot].take().map(|(_, f)| f)
    }

    /// Every flow with its key.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&FlowKey, &mut V)> {
        self.slots
            .iter_mut()
            .filter_map(|s| s.as_mut().map(|(k, f)| (&*k, f)))
    }

    /// Every flow.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().filter_map(|s| s.as_ref().map(|(_, f)| f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u16) -> FlowKey {
        (
            SocketAddr::from(([10, 0, 0, 2], 5000)),
            SocketAddr::from(([10, 0, 0, 1], 40000 + i)),
        )
    }

    /// The remembered entry never outlives its flow: after a removal and a slot reused by
    /// another key, a lookup of the removed key misses and the new key finds its own value.
    #[test]
    fn remembered_entry_follows_removal_and_slot_reuse() {
        let mut t = FlowTable::default();
        assert_eq!(t.insert(key(1), 1), None);
        assert_eq!(t.insert(key(2), 2), None);
        assert_eq!(t.get_mut(&key(1)), Some(&mut 1));
        assert_eq!(t.remove(&key(1)), Some(1));
        assert_eq!(t.get_mut(&key(1)), None);
        assert_eq!(t.insert(key(3), 3), None);
        assert_eq!(t.slots.len(), 2, "the freed slot was reused");
        assert_eq!(t.get_mut(&key(1)), None);
        assert_eq!(t.get_mut(&key(3)), Some(&mut 3));
        assert_eq!(t.get_mut(&key(2)), Some(&mut 2));
        assert_eq!(t.insert(key(2), 20), Some(2));
        assert_eq!(t.get_mut(&key(2)), Some(&mut 20));
        assert_eq!(t.len(), 2);
        let mut all: Vec<_> = t.iter_mut().map(|(k, v)| (k.1.port(), *v)).collect();
        all.sort();
        assert_eq!(all, vec![(40002, 20), (40003, 3)]);
    }

    /// Against a HashMap model over random operations (IPv4 and IPv6 keys).
    #[test]
    fn matches_a_map_model() {
        let mut rng = crate::sim::SplitMix64(7);
        let mut t = FlowTable::default();
        let mut model = std::collections::HashMap::new();
        for step in 0..20_000u32 {
            let i = (rng.next_u64() % 40) as u16;
            let k = if i.is_multiple_of(2) {
                key(i)
            } else {
                (
                    SocketAddr::from(([0xfd00, 0, 0, 0, 0, 0, 0, 2], 5000)),
                    SocketAddr::from(([0xfd00, 0, 0, 0, 0, 0, 0, 1], 40000 + i)),
                )
            };
            match rng.next_u64() % 4 {
                0 => assert_eq!(t.insert(k, step), model.insert(k, step)),
                1 => assert_eq!(t.remove(&k), model.remove(&k)),
                _ => assert_eq!(t.get_mut(&k).copied(), model.get(&k).copied()),
            }
            assert_eq!(t.len(), model.len());
            assert_eq!(t.contains_key(&k), model.contains_key(&k));
        }
    }
}
