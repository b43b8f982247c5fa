//! AF_XDP multi-buffer receive (`XDP_USE_SG`): a frame larger than one UMEM frame arrives as
//! a chain of RX descriptors, every one but the last flagged `XDP_PKT_CONTD`. The receive
//! pipeline takes one contiguous frame, so [`Chain`] hands a single-descriptor frame over in
//! place (no copy: every frame up to the UMEM frame size, i.e. all of MTU 1500) and gathers a
//! chain into a per-worker scratch buffer (one extra copy, for jumbo frames only).
//!
//! Why gather and not a UMEM frame that holds a whole jumbo frame: in aligned mode the kernel
//! takes UMEM chunks of at most a page (4096) unless the UMEM is backed by huge pages, which
//! these machines do not have (docs/environment.md, "AF_XDP on veth"), and 16 KiB chunks for
//! every frame would quadruple the UMEM for MTU 1500 traffic. The copy of 9000 octets runs at
//! memcpy speed (~0.3 µs here) against the ~4.8 µs the pipeline spends on such a segment;
//! `mpa-bench pipeline --mss 8948 --umem-chunk 3840|0` measured about 2 %, within the noise
//! (docs/features.md, "Jumbo frames").
//!
//! Frames are never held across the chain: each descriptor's octets are copied (or handed
//! over) while its frame is in hand, and the caller gives every descriptor of a burst back to
//! the fill ring exactly once after the burst, whatever happened to its packet
//! ([`deliver`]). A chain that cannot be a real packet is dropped whole and counted, never
//! passed on in part:
//! * **overlong**: more than [`Chain::max_descs`] descriptors or [`Chain::max_frame`] octets;
//! * **cut short**: the RX ring ran dry with the chain still open. The kernel publishes a
//!   packet's descriptors at once (it checks for room for all of them first), so a burst that
//!   took fewer descriptors than it asked for ends at a packet boundary; only a full burst
//!   may end inside a packet, whose rest then comes first in the next burst.

#![forbid(unsafe_code)]

use mpa_ctl_proto::stats::RingStats;

/// `XDP_PKT_CONTD` (linux/if_xdp.h): more descriptors of this packet follow.
pub(crate) const XDP_PKT_CONTD: u32 = 1;

/// Largest frame gathered by default: a 9216-octet MTU (the common NIC jumbo limit) with
/// Ethernet and two VLAN tags, rounded up.
pub const MAX_FRAME: usize = 9216 + 32;

/// Most descriptors of one frame by default (the kernel's MAX_SKB_FRAGS + 1 is 18).
pub const MAX_DESCS: usize = 18;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between packets.
    Idle,
    /// Gathering a chain of `descs` descriptors so far into the scratch buffer.
    Gathering { descs: usize },
    /// The chain was dropped (counted once); skipping its remaining descriptors.
    Discarding,
}

/// What became of one descriptor.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step<'a> {
    /// The descriptor's octets are a whole frame, handed over in place.
    InPlace,
    /// The last descriptor of a chain: the whole frame, gathered.
    Gathered(&'a [u8]),
    /// Part of a chain still open.
    Pending,
    /// Part of a chain that was dropped.
    Dropped,
}

/// Gathers multi-descriptor frames; one per RX ring (its scratch buffer is the worker's).
#[derive(Debug)]
pub(crate) struct Chain {
    scratch: Vec<u8>,
    max_frame: usize,
    max_descs: usize,
    state: State,
}

impl Default for Chain {
    fn default() -> Self {
        Chain::new(MAX_FRAME, MAX_DESCS)
    }
}

impl Chain {
    /// An assembler for frames of at most `max_frame` octets in at most `max_descs`
    /// descriptors (both at least 1). The scratch buffer is allocated here, once.
    pub(crate) fn new(max_frame: usize, max_descs: usize) -> Self {
        Chain {
            scratch: Vec::with_capacity(max_frame.max(1)),
            max_frame: max_frame.max(1),
            max_descs: max_descs.max(1),
            state: State::Idle,
        }
    }

    /// Largest frame gathered, octets.
    pub(crate) fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Most descriptors of one frame.
    pub(crate) fn max_descs(&self) -> usize {
        self.max_descs
    }

    /// Whether a chain is open (its next descriptor still to come).
    fn is_open(&self) -> bool {
        self.state != State::Idle
    }

    /// Takes one descriptor's octets; `more` is its `XDP_PKT_CONTD` flag. Counts frames,
    /// octets, gathered frames and dropped chains in `stats`.
    pub(crate) fn push<'a>(
        &'a mut self,
        data: &[u8],
        more: bool,
        stats: &mut RingStats,
    ) -> Step<'a> {
        match (self.state, more) {
            (State::Idle, false) => {
                if data.len() > self.max_frame {
                    // One descriptor larger than we would gather (a UMEM frame above
                    // max_frame): the same bound holds either way.
                    stats.rx_chain_dropped += 1;
                    return Step::Dropped;
                }
                deliver_stats(stats, data.len(), false);
                Step::InPlace
            }
            (State::Idle, true) => {
                self.scratch.clear();
                self.state = State::Gathering { descs: 0 };
                self.gather(data, more, stats)
            }
            (State::Gathering { .. }, _) => self.gather(data, more, stats),
            (State::Discarding, _) => {
                if !more {
                    self.state = State::Idle;
                }
                Step::Dropped
            }
        }
    }

    fn gather<'a>(&'a mut self, data: &[u8], more: bool, stats: &mut RingStats) -> Step<'a> {
        let State::Gathering { descs } = self.state else {
            return Step::Dropped;
        };
        let descs = descs + 1;
        if descs > self.max_descs || self.scratch.len() + data.len() > self.max_frame {
            stats.rx_chain_dropped += 1;
            self.scratch.clear();
            self.state = if more { State::Discarding } else { State::Idle };
            return Step::Dropped;
        }
        self.scratch.extend_from_slice(data);
        if more {
            self.state = State::Gathering { descs };
            return Step::Pending;
        }
        self.state = State::Idle;
        deliver_stats(stats, self.scratch.len(), true);
        Step::Gathered(&self.scratch)
    }

    /// The frame the last [`Chain::push`] that returned [`Step::Gathered`] gathered.
    fn gathered(&self) -> &[u8] {
        &self.scratch
    }

    /// The RX ring ran dry with a chain open: its rest will never come. Drops it (counted
    /// unless already dropped as overlong).
    pub(crate) fn cut(&mut self, stats: &mut RingStats) {
        if let State::Gathering { .. } = self.state {
            stats.rx_chain_dropped += 1;
        }
        self.scratch.clear();
        self.state = State::Idle;
    }
}

/// Prefetches the first or the second half of a frame (split at a multiple of 64 octets).
#[inline(always)]
fn prefetch_half(frame: Option<&[u8]>, second: bool) {
    if let Some(b) = frame {
        let mid = (b.len() / 2) & !63;
        crate::io::prefetch::prefetch(if second { &b[mid..] } else { &b[..mid] });
    }
}

/// Longest descriptor prefetched into the first-level cache, in two halves on either side of
/// a frame's processing; a longer one (a jumbo frame in one descriptor) is asked for whole
/// into the second-level cache, as a chain's descriptors are: half of it would still fill the
/// first level's miss buffers (docs/investigations/2026-12-07-jumbo-descriptors-ahead.md).
const PREFETCH_IN_HALVES_MAX: usize = 2048;

/// Starts the prefetch of the descriptor two ahead: a short one's first half into the first
/// level, returning it for its second half at the next frame; a long one whole into the
/// second level, returning `None`.
#[inline(always)]
fn prefetch_ahead(ahead: Option<&[u8]>) -> Option<&[u8]> {
    match ahead {
        Some(b) if b.len() > PREFETCH_IN_HALVES_MAX => {
            crate::io::prefetch::prefetch_into_l2(b);
            None
        }
        short => {
            prefetch_half(short, false);
            short
        }
    }
}

fn deliver_stats(stats: &mut RingStats, len: usize, gathered: bool) {
    stats.rx_frames += 1;
    stats.rx_octets += len as u64;
    if gathered {
        stats.rx_multi_buffer += 1;
    }
    stats.rx_largest = stats.rx_largest.max(len as u64);
}

/// One received frame of a burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxFrame<'u, 'g> {
    /// A frame in its own buffer (one descriptor): its octets stay valid, unchanged, until
    /// the burst ends, so a run of them can be decoded together.
    InPlace(&'u [u8]),
    /// A frame in a chain of descriptors that all came in this burst: its pieces stay valid,
    /// unchanged, until the burst ends.
    Chained(ChainedFrame<'u, 'g>),
    /// A frame gathered from a chain of descriptors into the ring's scratch buffer (the chain
    /// began in the burst before): valid only until the next frame is taken.
    Gathered(&'g [u8]),
}

impl RxFrame<'_, '_> {
    /// The frame's octets in one piece: `scratch` holds a chained frame's, gathered.
    pub fn contiguous<'a>(&'a self, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        match self {
            RxFrame::InPlace(b) | RxFrame::Gathered(b) => b,
            RxFrame::Chained(c) => {
                c.gather_into(scratch);
                scratch
            }
        }
    }
}

/// A frame in several descriptors of one burst, in order; at least two, within the chain's
/// bounds (the most descriptors and octets of one frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainedFrame<'u, 'g> {
    descs: &'g [(&'u [u8], bool)],
    len: usize,
}

impl<'u, 'g> ChainedFrame<'u, 'g> {
    /// The frame's length, octets.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: a chained frame has at least two descriptors (one may be empty).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The descriptors' octets, in order.
    pub fn pieces(self) -> impl Iterator<Item = &'u [u8]> + Clone + 'g {
        self.descs.iter().map(|d| d.0)
    }

    /// The whole frame copied into `out` (emptied first).
    pub fn gather_into(&self, out: &mut Vec<u8>) {
        out.clear();
        for p in self.pieces() {
            out.extend_from_slice(p);
        }
    }
}

/// The frames of one RX burst, taken one after the other ([`RxFrames::next`]): single-
/// descriptor frames in place for the whole burst (`'u`), chains gathered. The ring gives every
/// descriptor back to the fill ring after the burst, exactly once, whatever became of its
/// frame: nothing here keeps one.
pub struct RxFrames<'u, 's> {
    chain: &'s mut Chain,
    /// Each descriptor's octets and its `XDP_PKT_CONTD` flag.
    descs: &'s [(&'u [u8], bool)],
    /// Descriptors the burst asked the ring for (fewer taken: the ring ran dry, so an open
    /// chain is cut at the end).
    asked: usize,
    at: usize,
    /// The frame whose second half is to be prefetched when the next one is asked for.
    second_half: Option<&'u [u8]>,
    stats: &'s mut RingStats,
}

impl<'u, 's> RxFrames<'u, 's> {
    pub(crate) fn new(
        chain: &'s mut Chain,
        descs: &'s [(&'u [u8], bool)],
        asked: usize,
        stats: &'s mut RingStats,
    ) -> Self {
        // Frames are asked for (their cache lines fetched) ahead of their turn: the first
        // touch of a frame the kernel or NIC wrote misses the cache, and the pipeline
        // (checksum, CRC, placement) of the frames before it is long enough to hide that.
        // Two frames ahead, each in two halves on either side of a frame's processing: all ~24
        // lines of a 1500-octet frame at once overran the line fill buffers (16 here, shared
        // with the region copy's stores) and the worker waited on the prefetches themselves,
        // ~10 % of its samples.
        if let Some(d) = descs.get(1) {
            crate::io::prefetch::prefetch(d.0);
        }
        RxFrames {
            chain,
            descs,
            asked,
            at: 0,
            second_half: None,
            stats,
        }
    }

    /// The next whole frame of the burst, `None` after the last.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<RxFrame<'u, '_>> {
        prefetch_half(self.second_half.take(), true);
        loop {
            let Some(&(data, more)) = self.descs.get(self.at) else {
                if self.descs.len() < self.asked && self.chain.is_open() {
                    self.chain.cut(self.stats);
                }
                return None;
            };
            if more && !self.chain.is_open() {
                if let Some((n, len)) = self.whole_chain() {
                    // The whole chain is in this burst: its pieces stay where they are.
                    let descs = &self.descs[self.at..self.at + n];
                    self.at += n;
                    deliver_stats(self.stats, len, true);
                    self.prefetch_next_frame_into_l2();
                    return Some(RxFrame::Chained(ChainedFrame { descs, len }));
                }
            }
            let ahead = prefetch_ahead(self.descs.get(self.at + 2).map(|a| a.0));
            self.at += 1;
            match self.chain.push(data, more, self.stats) {
                Step::InPlace => {
                    self.second_half = ahead;
                    return Some(RxFrame::InPlace(data));
                }
                Step::Gathered(_) => {
                    self.second_half = ahead;
                    break;
                }
                Step::Pending | Step::Dropped => prefetch_half(ahead, true),
            }
        }
        // The gathered frame, borrowed again now that the loop is done with the chain.
        Some(RxFrame::Gathered(self.chain.gathered()))
    }

    /// Every descriptor of the next frame, asked for into the second-level cache while a
    /// chain is processed: each descriptor is a UMEM frame of its own, where the hardware
    /// prefetcher stops, and a jumbo frame's ~140 lines asked for into the first level would
    /// wait on its miss buffers (docs/investigations/2026-12-07-jumbo-descriptors-ahead.md).
    fn prefetch_next_frame_into_l2(&self) {
        let next = self.descs.get(self.at..).unwrap_or_default();
        for &(data, more) in next.iter().take(self.chain.max_descs) {
            crate::io::prefetch::prefetch_into_l2(data);
            if !more {
                break;
            }
        }
    }

    /// The chain that starts at the next descriptor, when it ends in this burst within the
    /// chain's bounds: its number of descriptors and octets. `None` for one the assembler is
    /// to take (gathered across bursts, or dropped and counted).
    fn whole_chain(&self) -> Option<(usize, usize)> {
        let mut len = 0usize;
        for (i, &(data, more)) in self.descs[self.at..].iter().enumerate() {
            len += data.len();
            if i + 1 > self.chain.max_descs || len > self.chain.max_frame {
                return None;
            }
            if !more {
                return Some((i + 1, len));
            }
        }
        None
    }

    /// Takes (and drops) the frames not taken yet, so that the chain state and the counters
    /// are those of the whole burst.
    pub(crate) fn finish(&mut self) {
        while self.next().is_some() {}
    }
}

/// `v` emptied, for slices of another lifetime, its allocation kept (an empty vector collected
/// in place into one of the same layout): a ring lists each burst's descriptors in it.
// `filter_map` rather than `filter`: the element type changes (to another lifetime).
#[allow(clippy::unnecessary_filter_map)]
pub(crate) fn reuse_descs<'b>(mut v: Vec<(&[u8], bool)>) -> Vec<(&'b [u8], bool)> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

/// Hands every frame of one burst of RX descriptors to `f` (see [`RxFrames`]): `octets(d)`
/// gives a descriptor's data and whether `XDP_PKT_CONTD` is set.
#[cfg(test)]
pub(crate) fn deliver<'u, D>(
    chain: &mut Chain,
    descs: &'u [D],
    asked: usize,
    octets: impl FnMut(&'u D) -> (&'u [u8], bool),
    mut f: impl FnMut(&[u8]),
    stats: &mut RingStats,
) {
    let descs: Vec<(&[u8], bool)> = descs.iter().map(octets).collect();
    let mut frames = RxFrames::new(chain, &descs, asked, stats);
    let mut scratch = Vec::new();
    while let Some(frame) = frames.next() {
        f(frame.contiguous(&mut scratch));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Distinct octets per frame and position, so a mis-assembly shows.
    fn frame(id: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| id ^ (i as u8).wrapping_mul(31)).collect()
    }

    /// A UMEM as the kernel's copy mode fills it: frames of `chunk` octets from a fill ring,
    /// one descriptor per chunk of a packet, XDP_PKT_CONTD on all but the last.
    struct FakeUmem {
        frames: Vec<Vec<u8>>,
        chunk: usize,
        fill: VecDeque<usize>,
        /// (frame index, length, options)
        rx: VecDeque<(usize, usize, u32)>,
        rx_dropped: u64,
    }

    impl FakeUmem {
        fn new(n: usize, chunk: usize) -> Self {
            FakeUmem {
                frames: vec![vec![0; chunk]; n],
                chunk,
                fill: (0..n).collect(),
                rx: VecDeque::new(),
                rx_dropped: 0,
            }
        }

        /// The kernel's __xsk_rcv: all descriptors or none.
        fn receive(&mut self, pkt: &[u8]) {
            let n = pkt.len().div_ceil(self.chunk).max(1);
            if self.fill.len() < n {
                self.rx_dropped += 1;
                return;
            }
            for (i, part) in pkt.chunks(self.chunk).enumerate() {
                let idx = self.fill.pop_front().unwrap();
                self.frames[idx][..part.len()].copy_from_slice(part);
                let opt = if i + 1 < n { XDP_PKT_CONTD } else { 0 };
                self.rx.push_back((idx, part.len(), opt));
            }
        }

        /// Raw descriptors, for chains the kernel never makes.
        fn push_raw(&mut self, parts: &[(&[u8], bool)]) {
            for (part, more) in parts {
                let idx = self.fill.pop_front().unwrap();
                self.frames[idx][..part.len()].copy_from_slice(part);
                self.rx.push_back((idx, part.len(), u32::from(*more)));
            }
        }

        /// One burst of at most `burst` descriptors through `deliver`, then every one back to
        /// the fill ring, as XskQueue::rx_burst does.
        fn burst(
            &mut self,
            chain: &mut Chain,
            burst: usize,
            stats: &mut RingStats,
            out: &mut Vec<Vec<u8>>,
        ) -> usize {
            let n = self.rx.len().min(burst);
            let descs: Vec<(usize, usize, u32)> = self.rx.drain(..n).collect();
            let frames = &self.frames;
            deliver(
                chain,
                &descs,
                burst,
                |&(idx, len, opt)| (&frames[idx][..len], opt & XDP_PKT_CONTD != 0),
                |f| out.push(f.to_vec()),
                stats,
            );
            for &(idx, _, _) in &descs {
                self.fill.push_back(idx);
            }
            n
        }

        /// Every frame is in exactly one place: the fill ring or the RX ring.
        fn check_accounting(&self) {
            let mut seen = vec![0u32; self.frames.len()];
            for &i in &self.fill {
                seen[i] += 1;
            }
            for &(i, _, _) in &self.rx {
                seen[i] += 1;
            }
            assert!(seen.iter().all(|&c| c == 1), "frame accounting {seen:?}");
        }
    }

    #[test]
    fn a_short_descriptor_is_prefetched_in_halves_a_long_one_whole() {
        // The second half of a short one is left for the next frame; a long one (a jumbo frame
        // in one descriptor) is asked for whole, nothing left.
        let short = vec![0u8; PREFETCH_IN_HALVES_MAX];
        let long = vec![0u8; PREFETCH_IN_HALVES_MAX + 1];
        assert_eq!(prefetch_ahead(Some(&short)), Some(&short[..]));
        assert_eq!(prefetch_ahead(Some(&long)), None);
        assert_eq!(prefetch_ahead(None), None);
    }

    #[test]
    fn single_descriptor_frames_pass_in_place() {
        let mut c = Chain::default();
        let mut st = RingStats::default();
        let f = frame(1, 1514);
        match c.push(&f, false, &mut st) {
            Step::InPlace => {}
            s => panic!("{s:?}"),
        }
        assert_eq!(st.rx_frames, 1);
        assert_eq!(st.rx_multi_buffer, 0);
        assert_eq!(st.rx_largest, 1514);
    }

    #[test]
    fn jumbo_frames_are_gathered_whole_across_bursts() {
        let mut u = FakeUmem::new(64, 3840);
        let mut c = Chain::default();
        let mut st = RingStats::default();
        let sent: Vec<Vec<u8>> = (0..40u8)
            .map(|i| frame(i, [9014, 60, 3840, 3841, 7680, 1514][usize::from(i) % 6]))
            .collect();
        let mut got = Vec::new();
        let mut next = 0;
        // Bursts of 5 descriptors: most end inside a 3-descriptor frame, whose rest comes
        // first in the next burst.
        while next < sent.len() || !u.rx.is_empty() {
            while next < sent.len() && u.fill.len() >= 3 {
                u.receive(&sent[next]);
                next += 1;
            }
            u.burst(&mut c, 5, &mut st, &mut got);
            u.check_accounting();
        }
        assert_eq!(u.rx_dropped, 0);
        assert_eq!(got, sent, "frames octet-exact and in order");
        assert_eq!(st.rx_chain_dropped, 0);
        assert_eq!(st.rx_frames, 40);
        // 9014, 3841 and 7680 octets (i % 6 = 0, 3, 4) take several 3840-octet frames.
        assert_eq!(st.rx_multi_buffer, 7 + 7 + 6);
        assert_eq!(st.rx_largest, 9014);
        assert!(!c.is_open());
    }

    #[test]
    fn a_chain_cut_short_by_a_dry_ring_is_dropped_not_joined_to_the_next() {
        let mut u = FakeUmem::new(16, 64);
        let mut c = Chain::new(1024, 8);
        let mut st = RingStats::default();
        let mut got = Vec::new();
        let a = frame(1, 64);
        let b = frame(2, 100);
        // The first 64 octets of a packet, then the ring is dry.
        u.push_raw(&[(&a, true)]);
        assert_eq!(u.burst(&mut c, 8, &mut st, &mut got), 1);
        u.check_accounting();
        assert!(got.is_empty());
        assert_eq!(st.rx_chain_dropped, 1);
        // The next packet is whole, not glued onto the cut one.
        u.receive(&b);
        u.burst(&mut c, 8, &mut st, &mut got);
        u.check_accounting();
        assert_eq!(got, vec![b]);
        assert_eq!(st.rx_chain_dropped, 1);
        assert_eq!(st.rx_frames, 1);
    }

    #[test]
    fn a_full_burst_ending_inside_a_chain_keeps_it_open() {
        let mut u = FakeUmem::new(16, 64);
        let mut c = Chain::new(1024, 8);
        let mut st = RingStats::default();
        let mut got = Vec::new();
        let p = frame(3, 200); // 4 descriptors
        u.receive(&p);
        assert_eq!(u.burst(&mut c, 2, &mut st, &mut got), 2);
        assert!(c.is_open());
        assert_eq!(u.burst(&mut c, 2, &mut st, &mut got), 2);
        assert_eq!(got, vec![p]);
        u.check_accounting();
        assert_eq!(st.rx_chain_dropped, 0);
    }

    #[test]
    fn overlong_chains_are_dropped_whole_and_counted_once() {
        let mut u = FakeUmem::new(64, 64);
        let mut c = Chain::new(256, 3);
        let mut st = RingStats::default();
        let mut got = Vec::new();
        let ok = frame(4, 192); // 3 descriptors, 192 octets: at both limits
        let too_many = frame(5, 200); // 4 descriptors
        let too_long = frame(6, 64);
        u.receive(&ok);
        u.receive(&too_many);
        u.receive(&ok);
        u.burst(&mut c, 64, &mut st, &mut got);
        u.check_accounting();
        assert_eq!(got, vec![ok.clone(), ok.clone()]);
        assert_eq!(st.rx_chain_dropped, 1);

        // Octet limit: 3 descriptors but more octets than max_frame.
        let mut c = Chain::new(150, 3);
        let mut st = RingStats::default();
        got.clear();
        u.push_raw(&[(&too_long, true), (&too_long, true), (&too_long, false)]);
        u.receive(&frame(7, 100));
        u.burst(&mut c, 64, &mut st, &mut got);
        u.check_accounting();
        assert_eq!(got, vec![frame(7, 100)]);
        assert_eq!(st.rx_chain_dropped, 1);
        assert_eq!(st.rx_frames, 1);

        // An overlong chain cut by a dry ring is counted once, not twice.
        let mut c = Chain::new(1024, 2);
        let mut st = RingStats::default();
        got.clear();
        u.push_raw(&[(&too_long, true), (&too_long, true), (&too_long, true)]);
        u.burst(&mut c, 64, &mut st, &mut got);
        u.check_accounting();
        assert!(got.is_empty());
        assert_eq!(st.rx_chain_dropped, 1);
        assert!(!c.is_open());
    }

    /// A chain whose descriptors all came in one burst is handed over as its descriptors
    /// themselves (no copy); one that began in the burst before is gathered; one over the
    /// bounds is dropped and counted as before.
    #[test]
    fn chains_within_a_burst_are_handed_over_in_their_descriptors() {
        let (a, b, c, d) = (frame(1, 100), frame(2, 64), frame(3, 90), frame(4, 70));
        let long = frame(5, 40);
        let first: Vec<(&[u8], bool)> = vec![
            (&a[..64], true),
            (&a[64..90], true),
            (&a[90..], false),
            (&b, false),
            (&long, true),
            (&long, true),
            (&long, true),
            (&long, false),
            (&c[..50], true),
            (&c[50..], false),
            (&d[..64], true),
        ];
        let mut chain = Chain::new(1024, 3);
        let mut st = RingStats::default();
        let mut frames = RxFrames::new(&mut chain, &first, first.len(), &mut st);
        let Some(RxFrame::Chained(fa)) = frames.next() else {
            panic!("a is not chained");
        };
        assert_eq!(fa.len(), 100);
        let pieces: Vec<&[u8]> = fa.pieces().collect();
        assert_eq!(pieces.len(), 3);
        for (p, d) in pieces.iter().zip(&first) {
            assert!(std::ptr::eq(*p, d.0), "a piece is its descriptor");
        }
        let mut scratch = Vec::new();
        fa.gather_into(&mut scratch);
        assert_eq!(scratch, a);
        assert_eq!(frames.next(), Some(RxFrame::InPlace(&b[..])));
        // Four descriptors where three are allowed: dropped whole, not chained.
        let Some(RxFrame::Chained(fc)) = frames.next() else {
            panic!("c is not chained");
        };
        assert_eq!(RxFrame::Chained(fc).contiguous(&mut scratch), &c[..]);
        // The burst was full and ends inside d: d stays open for the next one.
        assert_eq!(frames.next(), None);
        assert!(chain.is_open());
        assert_eq!(st.rx_chain_dropped, 1);
        assert_eq!((st.rx_frames, st.rx_multi_buffer), (3, 2));
        let second: Vec<(&[u8], bool)> = vec![(&d[64..], false)];
        let mut frames = RxFrames::new(&mut chain, &second, 8, &mut st);
        assert_eq!(frames.next(), Some(RxFrame::Gathered(&d[..])));
        assert_eq!(frames.next(), None);
        assert_eq!((st.rx_frames, st.rx_multi_buffer), (4, 3));
        assert_eq!(st.rx_largest, 100);
    }

    #[test]
    fn a_single_descriptor_above_max_frame_is_dropped() {
        let mut c = Chain::new(100, 4);
        let mut st = RingStats::default();
        assert_eq!(c.push(&[0; 101], false, &mut st), Step::Dropped);
        assert_eq!(st.rx_chain_dropped, 1);
        assert_eq!(st.rx_frames, 0);
    }
}
