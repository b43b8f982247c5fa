//! What a worker needs of its frame source: receive a burst of Ethernet frames (and give their
//! buffers back), queue frames to send, hand them to the device. [`crate::xsk::XskQueue`] is
//! the AF_XDP implementation; [`MemRing`] keeps frames in memory, so the whole receive
//! pipeline (frame parsing, TCP, MPA, placement, ACKs) runs without a NIC, a namespace or
//! root: in tests and in the isolated pipeline benchmark. The worker is generic over the
//! ring (monomorphised: no dynamic dispatch per packet).

#![forbid(unsafe_code)]

pub use mpa_ctl_proto::stats::RingStats;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// A worker's frame source and sink.
pub trait FrameRing {
    /// Why the ring could not be driven.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The RX queue this ring serves.
    fn queue(&self) -> u32;

    /// Receives up to one burst, waiting at most `timeout_ms` when none is there (0: never
    /// wait), hands each frame to `f`, then gives the buffers back. Returns the frame count.
    fn rx_burst(&mut self, timeout_ms: i32, f: impl FnMut(&[u8])) -> Result<usize, Self::Error>;

    /// Copies `pkt` into a free TX buffer and queues it; `false` when none is free (the
    /// caller's retransmission logic covers the loss).
    fn send(&mut self, pkt: &[u8]) -> bool;

    /// Hands every queued TX frame to the device and takes back those it finished.
    fn flush(&mut self) -> Result<(), Self::Error>;

    /// Counters.
    fn stats(&self) -> RingStats;
}

/// Frames a [`MemRing`] holds in each direction at most (as a real ring of this size).
pub const MEM_RING_SIZE: usize = 4096;

/// Frames received per [`FrameRing::rx_burst`].
const BURST: usize = 64;

#[derive(Debug, Default)]
struct Shared {
    rx: VecDeque<Vec<u8>>,
    tx: VecDeque<Vec<u8>>,
    /// Frames offered by the wire side while the RX ring was full.
    rx_dropped: u64,
    /// Spent RX buffers handed back by the worker's side, reused by [`MemWire::inject_copies`]
    /// (no allocation or free per frame on either side once warm).
    free: Vec<Vec<u8>>,
}

#[derive(Debug, Default)]
struct Inner {
    shared: Mutex<Shared>,
    rx_ready: Condvar,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic while holding the lock leaves plain queues behind: still usable.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An in-memory frame ring: the worker's side.
#[derive(Debug)]
pub struct MemRing {
    queue: u32,
    inner: Arc<Inner>,
    /// Frames taken from the shared queue for the current burst (kept to reuse buffers).
    burst: Vec<Vec<u8>>,
    /// TX frames queued by `send`, handed over by `flush`.
    tx_pending: Vec<Vec<u8>>,
    /// Spent buffers, reused for TX copies.
    spare: Vec<Vec<u8>>,
    /// Spent RX buffers beyond `spare`, handed back to the wire side at the next burst.
    spent: Vec<Vec<u8>>,
    stats: RingStats,
}

/// The wire side of a [`MemRing`]: injects frames the worker receives, takes frames it sent.
#[derive(Debug, Clone)]
pub struct MemWire {
    inner: Arc<Inner>,
}

/// The in-memory ring never fails; this names that.
#[derive(Debug, thiserror::Error)]
#[error("in-memory ring")]
pub struct MemRingError;

impl MemRing {
    /// A ring for queue `queue` and the wire side that feeds it.
    pub fn new(queue: u32) -> (MemRing, MemWire) {
        let inner = Arc::new(Inner::default());
        (
            MemRing {
                queue,
                inner: inner.clone(),
                burst: Vec::with_capacity(BURST),
                tx_pending: Vec::new(),
                spare: Vec::new(),
                spent: Vec::new(),
                stats: RingStats::default(),
            },
            MemWire { inner },
        )
    }
}

impl FrameRing for MemRing {
    type Error = MemRingError;

    fn queue(&self) -> u32 {
        self.queue
    }

    fn rx_burst(
        &mut self,
        timeout_ms: i32,
        mut f: impl FnMut(&[u8]),
    ) -> Result<usize, MemRingError> {
        {
            let mut s = self.inner.lock();
            if s.rx.is_empty() && timeout_ms > 0 {
                let wait = Duration::from_millis(timeout_ms.unsigned_abs().into());
                s = self
                    .inner
                    .rx_ready
                    .wait_timeout(s, wait)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            let n = s.rx.len().min(BURST);
            self.burst.extend(s.rx.drain(..n));
            let room = MEM_RING_SIZE.saturating_sub(s.free.len());
            let back = self.spent.len().min(room);
            s.free.extend(self.spent.drain(..back));
            self.spent.clear();
        }
        let n = self.burst.len();
        for frame in self.burst.drain(..) {
            self.stats.rx_frames += 1;
            self.stats.rx_octets += frame.len() as u64;
            f(&frame);
            if self.spare.len() < BURST {
                self.spare.push(frame);
            } else {
                self.spent.push(frame);
            }
        }
        Ok(n)
    }

    fn send(&mut self, pkt: &[u8]) -> bool {
        if self.tx_pending.len() >= MEM_RING_SIZE {
            self.stats.tx_no_frame += 1;
            return false;
        }
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(pkt);
        self.stats.tx_frames += 1;
        self.stats.tx_octets += pkt.len() as u64;
        self.tx_pending.push(b);
        true
    }

    fn flush(&mut self) -> Result<(), MemRingError> {
        if self.tx_pending.is_empty() {
            return Ok(());
        }
        let mut s = self.inner.lock();
        for b in self.tx_pending.drain(..) {
            if s.tx.len() >= MEM_RING_SIZE {
                // The wire side does not take its frames: they are lost, as on a full link.
                self.stats.tx_no_frame += 1;
            } else {
                s.tx.push_back(b);
            }
        }
        Ok(())
    }

    fn stats(&self) -> RingStats {
        self.stats
    }
}

impl MemWire {
    /// Offers a frame to the worker; `false` (counted) when its RX ring is full.
    pub fn inject(&self, frame: Vec<u8>) -> bool {
        let mut s = self.inner.lock();
        if s.rx.len() >= MEM_RING_SIZE {
            s.rx_dropped += 1;
            return false;
        }
        s.rx.push_back(frame);
        drop(s);
        self.inner.rx_ready.notify_one();
        true
    }

    /// Offers copies of `frames` in order, in buffers the worker's side gave back when there
    /// are some (as a NIC fills free UMEM frames), under one lock and with one wake-up.
    /// Returns how many were taken; the rest (counted) found the RX ring full.
    pub fn inject_copies<'a>(&self, frames: impl IntoIterator<Item = &'a [u8]>) -> usize {
        let mut s = self.inner.lock();
        let mut n = 0;
        for frame in frames {
            if s.rx.len() >= MEM_RING_SIZE {
                s.rx_dropped += 1;
                continue;
            }
            let mut b = s.free.pop().unwrap_or_default();
            b.clear();
            b.extend_from_slice(frame);
            s.rx.push_back(b);
            n += 1;
        }
        drop(s);
        if n > 0 {
            self.inner.rx_ready.notify_one();
        }
        n
    }

    /// Takes every frame the worker sent so far.
    pub fn take_sent(&self) -> Vec<Vec<u8>> {
        self.inner.lock().tx.drain(..).collect()
    }

    /// Frames waiting in the worker's RX ring.
    pub fn rx_waiting(&self) -> usize {
        self.inner.lock().rx.len()
    }

    /// Frames refused because the RX ring was full.
    pub fn rx_dropped(&self) -> u64 {
        self.inner.lock().rx_dropped
    }
}
