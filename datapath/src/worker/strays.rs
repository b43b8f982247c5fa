//! Segments of steered 4-tuples that no flow of this worker owns ("strays"): RSS put the
//! peer's connection on this queue while the flow lives on another worker, or the flow is
//! not handed over yet, or it has just ended. The worker asks the control thread for the
//! flow and holds the frames (bounded) so that they can be replayed when it arrives instead
//! of costing the peer a retransmission timeout.
//!
//! Every entry is bounded in time as well as in space: it expires [`STRAY_TTL`] after its
//! first frame whether or not a flow ever comes; it is freed when a flow for its 4-tuple is
//! handed over to or adopted by this worker, or ends here. A key is asked for when first
//! seen and again at most once per [`STRAY_ASK_EVERY`] (the flow may not have been handed
//! over when it was first asked for). When every slot is taken the oldest entry makes room,
//! so new keys are always asked for.

#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A flow's 4-tuple as the worker keys it: (our address, the peer's).
type Key = (SocketAddr, SocketAddr);

/// Stray 4-tuples tracked at once.
pub const STRAY_FLOWS: usize = 1024;
/// Frames held per stray 4-tuple.
const STRAY_FRAMES: usize = 64;
/// Octets of held stray frames per worker, all 4-tuples together.
pub const STRAY_BYTES: usize = 16 << 20;
/// How long a stray entry and its frames live after its first frame.
pub const STRAY_TTL: Duration = Duration::from_secs(2);
/// The shortest time between two requests for the same 4-tuple.
pub const STRAY_ASK_EVERY: Duration = Duration::from_millis(100);

struct Stray {
    frames: Vec<Vec<u8>>,
    bytes: usize,
    created: Instant,
    asked: Instant,
}

/// The strays of one worker.
#[derive(Default)]
pub(crate) struct Strays {
    map: HashMap<Key, Stray>,
    /// Keys in order of creation with their creation time; an entry whose time differs from
    /// its key's live entry (freed, then created again) is stale and skipped.
    order: VecDeque<(Instant, Key)>,
    bytes: usize,
}

impl Strays {
    /// A frame of `key` arrived at `now`: holds it if there is room; `true` when the control
    /// thread should be asked for the flow.
    pub(crate) fn on_frame(&mut self, key: Key, frame: &[u8], now: Instant) -> bool {
        self.expire(now);
        let ask = match self.map.get_mut(&key) {
            Some(s) => {
                let due = now.saturating_duration_since(s.asked) >= STRAY_ASK_EVERY;
                if due {
                    s.asked = now;
                }
                due
            }
            None => {
                while self.map.len() >= STRAY_FLOWS {
                    self.evict_oldest();
                }
                self.map.insert(
                    key,
                    Stray {
                        frames: Vec::new(),
                        bytes: 0,
                        created: now,
                        asked: now,
                    },
                );
                self.order.push_back((now, key));
                if self.order.len() > 2 * STRAY_FLOWS {
                    // Many entries were freed early (flows arrived): drop their places.
                    let map = &self.map;
                    self.order
                        .retain(|(t, k)| map.get(k).is_some_and(|s| s.created == *t));
                }
                true
            }
        };
        if let Some(s) = self.map.get_mut(&key) {
            if s.frames.len() < STRAY_FRAMES && self.bytes + frame.len() <= STRAY_BYTES {
                self.bytes += frame.len();
                s.bytes += frame.len();
                s.frames.push(frame.to_vec());
            }
        }
        ask
    }

    /// Frees entries older than [`STRAY_TTL`]: one comparison when none is due.
    pub(crate) fn expire(&mut self, now: Instant) {
        while let Some(&(created, key)) = self.order.front() {
            if now.saturating_duration_since(created) < STRAY_TTL {
                break;
            }
            self.order.pop_front();
            if self.map.get(&key).is_some_and(|s| s.created == created) {
                self.drop_entry(&key);
            }
        }
        if self.map.is_empty() {
            self.order.clear();
        }
    }

    /// Removes `key`'s entry (its flow arrived or ended here), returning the held frames in
    /// arrival order.
    pub(crate) fn take(&mut self, key: &Key) -> Vec<Vec<u8>> {
        self.drop_entry(key).unwrap_or_default()
    }

    /// 4-tuples held.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Octets of held frames.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    fn drop_entry(&mut self, key: &Key) -> Option<Vec<Vec<u8>>> {
        let s = self.map.remove(key)?;
        self.bytes -= s.bytes;
        Some(s.frames)
    }

    fn evict_oldest(&mut self) {
        while let Some((created, key)) = self.order.pop_front() {
            if self.map.get(&key).is_some_and(|s| s.created == created) {
                self.drop_entry(&key);
                return;
            }
        }
        // Unreachable while every live entry has its place in `order`; stay bounded anyway.
        self.map.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(port: u16) -> Key {
        (
            "10.0.0.2:4000".parse().unwrap(),
            SocketAddr::from(([10, 0, 0, 1], port)),
        )
    }

    #[test]
    fn stale_order_entries_never_free_a_newer_entry() {
        let t0 = Instant::now();
        let mut s = Strays::default();
        assert!(s.on_frame(key(1), &[0; 10], t0));
        assert_eq!(s.take(&key(1)).len(), 1);
        // Created again later: the first entry's place in `order` must not expire it.
        let t1 = t0 + STRAY_TTL / 2;
        assert!(s.on_frame(key(1), &[0; 10], t1));
        s.expire(t0 + STRAY_TTL);
        assert_eq!((s.len(), s.bytes()), (1, 10));
        s.expire(t1 + STRAY_TTL);
        assert_eq!((s.len(), s.bytes()), (0, 0));
        assert!(s.order.is_empty());
    }

    #[test]
    fn octets_are_bounded_across_keys() {
        let t0 = Instant::now();
        let mut s = Strays::default();
        let frame = vec![0u8; 9000];
        for p in 0..STRAY_FLOWS as u16 {
            for _ in 0..STRAY_FRAMES {
                s.on_frame(key(p), &frame, t0);
            }
        }
        assert!(s.bytes() <= STRAY_BYTES);
        assert!(s.len() <= STRAY_FLOWS);
        let held: usize = s.map.values().map(|e| e.bytes).sum();
        assert_eq!(held, s.bytes());
    }
}
