//! What a worker needs of its frame source: receive a burst of Ethernet frames (and give their
//! buffers back), queue frames to send, hand them to the device. [`crate::io::xsk::XskQueue`] is
//! the AF_XDP implementation; [`MemRing`] keeps frames in memory, so the whole receive
//! pipeline (frame parsing, TCP, MPA, placement, ACKs) runs without a NIC, a namespace or
//! root: in tests and in the isolated pipeline benchmark. The worker is generic over the
//! ring (monomorphised: no dynamic dispatch per packet).

#![forbid(unsafe_code)]

use crate::io::arena::{Arena, Frame};
use crate::io::chain::{reuse_descs, Chain};
pub use crate::io::chain::{ChainedFrame, RxFrame, RxFrames};
pub(crate) use mpa_ctl_proto::stats::RingStats;
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// A worker's frame source and sink.
pub trait FrameRing {
    /// Why the ring could not be driven.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The RX queue this ring serves.
    fn queue(&self) -> u32;

    /// Receives up to one burst, waiting at most `timeout_ms` when none is there (0: never
    /// wait), hands its frames to `f` (which takes them with [`RxFrames::next`]; those it
    /// leaves are dropped), then gives the buffers back. Returns the descriptors taken (a
    /// multi-buffer frame counts each of its descriptors; 0: nothing came) and what `f`
    /// returned. A frame in place stays valid until `f` returns, so `f` may keep several.
    fn rx_burst_frames<T>(
        &mut self,
        timeout_ms: i32,
        f: impl for<'u, 's> FnOnce(&mut RxFrames<'u, 's>) -> T,
    ) -> Result<(usize, T), Self::Error>;

    /// [`FrameRing::rx_burst_frames`] handing each frame to `f` in turn.
    fn rx_burst(
        &mut self,
        timeout_ms: i32,
        mut f: impl FnMut(&[u8]),
    ) -> Result<usize, Self::Error> {
        self.rx_burst_frames(timeout_ms, |frames| {
            // A chained frame is gathered here (allocated on the first one only).
            let mut scratch = Vec::new();
            while let Some(frame) = frames.next() {
                f(frame.contiguous(&mut scratch));
            }
        })
        .map(|(n, ())| n)
    }

    /// Copies `pkt` into a free TX buffer and queues it; `false` when none is free (the
    /// caller's retransmission logic covers the loss).
    fn send(&mut self, pkt: &[u8]) -> bool {
        self.send_with(|buf| match buf.get_mut(..pkt.len()) {
            Some(b) => {
                b.copy_from_slice(pkt);
                pkt.len()
            }
            None => 0,
        })
    }

    /// Builds a frame in place in a free TX buffer (of [`FrameRing::tx_frame_capacity`]
    /// octets): `build` writes it and returns its length, 0 to leave the buffer free. `false`
    /// when no buffer was free or nothing was built.
    fn send_with(&mut self, build: impl FnOnce(&mut [u8]) -> usize) -> bool;

    /// TX buffers free now (frames that can be queued before [`FrameRing::flush`]).
    fn tx_room(&mut self) -> usize;

    /// Octets of one TX buffer: the longest frame it sends.
    fn tx_frame_capacity(&self) -> usize;

    /// Hands every queued TX frame to the device and takes back those it finished.
    fn flush(&mut self) -> Result<(), Self::Error>;

    /// Counters.
    fn stats(&self) -> RingStats;
}

/// Frames a [`MemRing`] holds in each direction at most (as a real ring of this size).
pub const MEM_RING_SIZE: usize = 4096;

/// Octets of a [`MemRing`] TX buffer: a jumbo frame (MTU 9000) with room to spare.
use mpa_stack::flow::MEM_FRAME_CAPACITY;

/// Frames received per [`FrameRing::rx_burst`].
const BURST: usize = 64;

/// Octets of a [`MemRing`]'s frames by default: a jumbo frame in one (as a UMEM of 16 KiB
/// frames on huge pages would hold it).
pub const MEM_FRAME_SIZE: usize = 16 << 10;

/// An RX descriptor: a frame of the arena, its octets, and whether more of its packet follow
/// (XDP_PKT_CONTD).
#[derive(Debug)]
struct Desc {
    frame: Frame,
    len: u32,
    more: bool,
}

#[derive(Debug)]
struct Shared {
    rx: VecDeque<Desc>,
    /// Multi-buffer: frames above this many octets are cut into descriptors of it, as the
    /// kernel does into UMEM frames (`MemWire::set_chunk`); never more than a frame holds.
    chunk: Option<usize>,
    tx: VecDeque<Vec<u8>>,
    /// Frames offered by the wire side while the RX ring (or the free list) was full (empty).
    rx_dropped: u64,
    /// Frames of the arena the wire side may fill, oldest first (a UMEM's fill ring: frames
    /// are filled in the order they were given back, so a burst's frames are not the few the
    /// last burst used, still in the cache).
    free: VecDeque<Frame>,
}

#[derive(Debug)]
struct Inner {
    shared: Mutex<Shared>,
    rx_ready: Condvar,
    /// Where the RX descriptors' octets are (module `arena`: who may touch which frame).
    arena: Arena,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic while holding the lock leaves plain queues behind: still usable.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An in-memory frame ring: the worker's side. Its RX frames lie in an arena laid out as a
/// UMEM (one frame per [`MemRing::with_frames`] stride, the data after a 256-octet headroom).
#[derive(Debug)]
pub struct MemRing {
    queue: u32,
    inner: Arc<Inner>,
    /// Descriptors taken from the shared queue for the current burst: their frames are this
    /// side's until given back.
    burst: Vec<Desc>,
    /// Gathers frames that came in several descriptors.
    chain: Chain,
    /// The current burst's frames as the worker sees them (emptied between bursts).
    descs: Vec<(&'static [u8], bool)>,
    /// TX frames queued by `send`, handed over by `flush` (the wire side keeps them).
    tx_pending: Vec<Vec<u8>>,
    /// Where frames are built (as in a UMEM frame: it holds the previous frame's octets),
    /// then copied into a buffer of their own length: zeroing a jumbo-sized buffer for
    /// every ACK was 8 % of the worker's time in `mpa-bench pipeline --loss 20`, which the
    /// AF_XDP path never pays.
    scratch: Box<[u8]>,
    /// Frames of the last burst, handed back to the wire side at the next one.
    spent: Vec<Frame>,
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
    /// A ring for queue `queue` and the wire side that feeds it, on frames of
    /// [`MEM_FRAME_SIZE`] octets.
    pub fn new(queue: u32) -> io::Result<(MemRing, MemWire)> {
        Self::with_frames(queue, MEM_FRAME_SIZE, false)
    }

    /// A ring whose RX frames are `frame_size` octets apart (more than the 256-octet
    /// headroom; a frame holds `frame_size - 256` octets, longer frames arrive as descriptor
    /// chains), on transparent huge pages when `huge_pages` (see
    /// [`MemWire::huge_page_octets`] for whether the kernel gave them).
    pub fn with_frames(
        queue: u32,
        frame_size: usize,
        huge_pages: bool,
    ) -> io::Result<(MemRing, MemWire)> {
        // Every descriptor the RX queue holds, a burst in the worker's hands and the last
        // burst's, not yet given back.
        let frames = MEM_RING_SIZE + 2 * BURST;
        let (arena, free) = Arena::new(frame_size, frames, huge_pages)?;
        let inner = Arc::new(Inner {
            shared: Mutex::new(Shared {
                rx: VecDeque::with_capacity(MEM_RING_SIZE),
                chunk: None,
                tx: VecDeque::new(),
                rx_dropped: 0,
                free: free.into(),
            }),
            rx_ready: Condvar::new(),
            arena,
        });
        Ok((
            MemRing {
                queue,
                inner: inner.clone(),
                burst: Vec::with_capacity(BURST),
                chain: Chain::default(),
                descs: Vec::with_capacity(BURST),
                tx_pending: Vec::new(),
                scratch: vec![0; MEM_FRAME_CAPACITY].into_boxed_slice(),
                spent: Vec::with_capacity(BURST),
                stats: RingStats::default(),
            },
            MemWire { inner },
        ))
    }
}

impl FrameRing for MemRing {
    type Error = MemRingError;

    fn queue(&self) -> u32 {
        self.queue
    }

    fn rx_burst_frames<T>(
        &mut self,
        timeout_ms: i32,
        f: impl for<'u, 's> FnOnce(&mut RxFrames<'u, 's>) -> T,
    ) -> Result<(usize, T), MemRingError> {
        {
            let mut s = self.inner.lock();
            if s.rx.is_empty() && timeout_ms > 0 {
                self.stats.rx_waits += 1;
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
            s.free.extend(self.spent.drain(..));
        }
        let n = self.burst.len();
        self.stats.count_burst(n, BURST);
        let mut descs = reuse_descs(std::mem::take(&mut self.descs));
        let arena = &self.inner.arena;
        descs.extend(
            self.burst
                .iter()
                .map(|d| (arena.read(&d.frame, d.len as usize), d.more)),
        );
        let mut frames = RxFrames::new(&mut self.chain, &descs, BURST, &mut self.stats);
        let t = f(&mut frames);
        frames.finish();
        self.descs = reuse_descs(descs);
        // Every frame back exactly once, as the AF_XDP ring gives every descriptor back.
        self.spent.extend(self.burst.drain(..).map(|d| d.frame));
        Ok((n, t))
    }

    fn send_with(&mut self, build: impl FnOnce(&mut [u8]) -> usize) -> bool {
        if self.tx_pending.len() >= MEM_RING_SIZE {
            self.stats.tx_no_frame += 1;
            return false;
        }
        let n = build(&mut self.scratch).min(MEM_FRAME_CAPACITY);
        if n == 0 {
            return false;
        }
        let b = self.scratch[..n].to_vec();
        self.stats.tx_frames += 1;
        self.stats.tx_octets += n as u64;
        self.tx_pending.push(b);
        true
    }

    fn tx_room(&mut self) -> usize {
        MEM_RING_SIZE - self.tx_pending.len()
    }

    fn tx_frame_capacity(&self) -> usize {
        MEM_FRAME_CAPACITY
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

impl Shared {
    /// Octets per descriptor: the chunk, at most what a frame of `arena` holds.
    fn chunk(&self, arena: &Arena) -> usize {
        self.chunk
            .unwrap_or(usize::MAX)
            .min(arena.capacity())
            .max(1)
    }

    /// Queues `frame` as one descriptor or, above the chunk, a chain; all or nothing, as the
    /// kernel checks room for every descriptor of a packet first. Returns whether it fitted.
    fn push_frame(&mut self, arena: &Arena, frame: &[u8]) -> bool {
        let chunk = self.chunk(arena);
        let n = frame.len().div_ceil(chunk).max(1);
        if self.rx.len() + n > MEM_RING_SIZE || self.free.len() < n {
            self.rx_dropped += 1;
            return false;
        }
        let mut parts = frame.chunks(chunk);
        for i in 0..n {
            let part = parts.next().unwrap_or_default();
            self.push_desc(arena, part, i + 1 < n);
        }
        true
    }

    /// Queues one descriptor of `octets` (cut at a frame's capacity); the caller checked
    /// there is room and a free frame.
    fn push_desc(&mut self, arena: &Arena, octets: &[u8], more: bool) {
        let Some(mut frame) = self.free.pop_front() else {
            self.rx_dropped += 1;
            return;
        };
        let len = arena.write(&mut frame, octets);
        self.rx.push_back(Desc {
            frame,
            len: len as u32,
            more,
        });
    }
}

impl MemWire {
    /// Offers a frame to the worker; `false` (counted) when its RX ring is full.
    pub fn inject(&self, frame: Vec<u8>) -> bool {
        let mut s = self.inner.lock();
        let ok = s.push_frame(&self.inner.arena, &frame);
        drop(s);
        if ok {
            self.inner.rx_ready.notify_one();
        }
        ok
    }

    /// Multi-buffer, as AF_XDP with XDP_USE_SG: frames longer than `chunk` octets reach the
    /// worker as chains of `chunk`-octet descriptors (the kernel's copy mode cuts at the UMEM
    /// frame's data size, 3840 for 4096-octet frames). `None`: every frame in one, up to what
    /// a frame of the ring holds.
    pub fn set_chunk(&self, chunk: Option<usize>) {
        self.inner.lock().chunk = chunk.filter(|&c| c > 0);
    }

    /// Octets of the ring's RX frames the kernel backs with transparent huge pages now, or
    /// `None` if it cannot be read (/proc/self/smaps).
    pub fn huge_page_octets(&self) -> Option<u64> {
        self.inner.arena.huge_page_octets()
    }

    /// Offers raw descriptors (octets, XDP_PKT_CONTD) as they are, for chains the kernel
    /// would never make (cut short, overlong). Returns how many were taken.
    pub fn inject_descs<'a>(&self, descs: impl IntoIterator<Item = (&'a [u8], bool)>) -> usize {
        let mut s = self.inner.lock();
        let mut n = 0;
        for (octets, more) in descs {
            if s.rx.len() >= MEM_RING_SIZE || s.free.is_empty() {
                s.rx_dropped += 1;
                continue;
            }
            s.push_desc(&self.inner.arena, octets, more);
            n += 1;
        }
        drop(s);
        if n > 0 {
            self.inner.rx_ready.notify_one();
        }
        n
    }

    /// Offers copies of `frames` in order, written into free frames of the arena as a NIC
    /// fills UMEM frames, under one lock and with one wake-up. Returns how many were taken;
    /// the rest (counted) found the RX ring full.
    pub fn inject_copies<'a>(&self, frames: impl IntoIterator<Item = &'a [u8]>) -> usize {
        let mut s = self.inner.lock();
        let mut n = 0;
        for frame in frames {
            if s.push_frame(&self.inner.arena, frame) {
                n += 1;
            }
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

    /// Descriptors (frames, or parts of multi-buffer frames) waiting in the worker's RX ring.
    #[cfg(test)]
    fn rx_waiting(&self) -> usize {
        self.inner.lock().rx.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(id: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| id ^ (i as u8).wrapping_mul(7)).collect()
    }

    /// Frames anywhere: RX ring, free list, the worker's burst and spent ones.
    fn frames(r: &MemRing) -> usize {
        let s = r.inner.lock();
        s.rx.len() + s.free.len() + r.spent.len() + r.burst.len()
    }

    fn drain(r: &mut MemRing) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        while r.rx_burst(0, |f| got.push(f.to_vec())).unwrap() > 0 {}
        got
    }

    #[test]
    fn multi_buffer_frames_reach_the_worker_whole() {
        let (mut r, w) = MemRing::new(0).unwrap();
        w.set_chunk(Some(3840));
        let sent: Vec<Vec<u8>> = (0..100u8)
            .map(|i| frame(i, [9014, 66, 3840, 3841, 1514][usize::from(i) % 5]))
            .collect();
        assert_eq!(w.inject_copies(sent.iter().map(Vec::as_slice)), 100);
        // 9014: 3 descriptors, 3841: 2, others 1.
        assert_eq!(w.rx_waiting(), 20 * 3 + 20 * 2 + 60);
        assert_eq!(drain(&mut r), sent);
        let st = r.stats();
        assert_eq!(st.rx_frames, 100);
        assert_eq!(st.rx_multi_buffer, 40);
        assert_eq!(st.rx_chain_dropped, 0);
        assert_eq!(st.rx_largest, 9014);
        // 160 descriptors in bursts of at most 64: two full, one of 32; the empty last
        // look is no burst.
        assert_eq!((st.rx_bursts, st.rx_full_bursts), (3, 2));
        assert_eq!(
            st.rx_octets,
            sent.iter().map(|f| f.len() as u64).sum::<u64>()
        );
        // Frame accounting: every descriptor's frame came back once (none lost, none twice).
        assert_eq!(frames(&r), r.inner.arena.frames());
    }

    #[test]
    fn cut_and_overlong_chains_are_dropped_and_counted() {
        let (mut r, w) = MemRing::new(0).unwrap();
        r.chain = Chain::new(1000, 3);
        let a = frame(1, 400);
        let ok = frame(2, 900);
        // Overlong by descriptors (4 > 3), then by octets (1200 > 1000), then a good chain.
        let mut descs: Vec<(&[u8], bool)> = vec![(&a[..100], true); 3];
        descs.push((&a[..100], false));
        descs.extend([(&a[..], true), (&a[..], true), (&a[..], false)]);
        descs.extend([
            (&ok[..300], true),
            (&ok[300..600], true),
            (&ok[600..], false),
        ]);
        // Cut short: the ring ends inside a chain.
        descs.extend([(&a[..], true), (&a[..], true)]);
        let n = descs.len();
        assert_eq!(w.inject_descs(descs), n);
        assert_eq!(drain(&mut r), vec![ok.clone()]);
        let st = r.stats();
        assert_eq!(st.rx_chain_dropped, 3);
        assert_eq!(st.rx_frames, 1);
        assert_eq!(st.rx_multi_buffer, 1);
        assert_eq!(frames(&r), r.inner.arena.frames());
        // What follows the cut chain stands alone.
        w.inject(frame(3, 60));
        assert_eq!(drain(&mut r), vec![frame(3, 60)]);
        assert_eq!(r.stats().rx_chain_dropped, 3);
    }
}
