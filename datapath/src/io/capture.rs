//! Packet capture inside a worker (`mpa-control capture`): a `CaptureTap` copies the frames
//! a worker receives for its flows and the frames it sends, truncated to the snapshot length,
//! into batches whose memory was reserved when the capture started. At the end of each poll
//! the worker hands over the full batches, and the one being filled once it has waited
//! `FLUSH_AFTER`; the control thread sends them to the capturing client and gives each
//! emptied batch back.
//!
//! Fast-path rules (docs/architecture.md, "Fast-path rules"): without a capture a worker pays
//! one branch per frame; with one, a copy of at most the snapshot length into reserved
//! memory; when no batch is free (the control thread or the client is behind) the frame is
//! counted as dropped, never waited for, and nothing is allocated per frame.
#![forbid(unsafe_code)]

use crossbeam_channel::Receiver;
use mpa::seq::SeqNumber;
use mpa_ctl_proto::{CaptureDirection, HandOver, Role};
use mpa_stack::wire::frame::{FrameError, FrameTemplate};
use mpa_stack::wire::tcp::{TcpFlags, TcpOptions, TcpPacket, TcpRepr, HEADER_LEN};
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Octets of captured frames one batch holds.
const BATCH_BYTES: usize = 256 << 10;
/// Frames one batch holds.
const BATCH_FRAMES: usize = 1024;
/// Batches each worker may have in flight during a capture: its memory bound while
/// capturing is this many times [`BATCH_BYTES`] (4 MiB, plus the records).
pub(crate) const BATCHES_PER_WORKER: usize = 16;
/// Longest a partly filled batch waits before it is handed over: a worker handing over a
/// batch per poll would soon find none free, while the control thread has not yet run.
const FLUSH_AFTER: Duration = Duration::from_millis(5);

/// One frame of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameRecord {
    /// CLOCK_REALTIME, nanoseconds.
    pub(crate) ts_ns: u64,
    /// Which way.
    pub(crate) direction: CaptureDirection,
    /// The frame's length before truncation.
    pub(crate) orig_len: u32,
    /// Octets kept in the batch.
    pub(crate) len: u32,
    /// Rebuilt from the hand-over, not seen on the wire (the MPA startup frames).
    pub(crate) reconstructed: bool,
}

/// Captured frames back to back, with one record each; memory reserved once.
#[derive(Debug)]
pub struct CaptureBatch {
    data: Vec<u8>,
    records: Vec<FrameRecord>,
}

impl CaptureBatch {
    /// An empty batch holding up to `frames` frames and `bytes` octets of them.
    pub(crate) fn with_capacity(bytes: usize, frames: usize) -> CaptureBatch {
        CaptureBatch {
            data: Vec::with_capacity(bytes),
            records: Vec::with_capacity(frames),
        }
    }

    /// A batch of the standard size ([`BATCH_BYTES`], [`BATCH_FRAMES`]).
    pub(crate) fn standard() -> CaptureBatch {
        Self::with_capacity(BATCH_BYTES, BATCH_FRAMES)
    }

    /// Whether a frame of `len` octets still fits without growing.
    fn fits(&self, len: usize) -> bool {
        self.records.len() < self.records.capacity()
            && self.data.len() + len <= self.data.capacity()
    }

    /// Whether it holds no frame.
    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Frames held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    /// Forgets the frames, keeping the memory.
    pub(crate) fn clear(&mut self) {
        self.data.clear();
        self.records.clear();
    }

    /// The frames with their octets, in the order they were captured.
    pub(crate) fn frames(&self) -> impl Iterator<Item = (&FrameRecord, &[u8])> {
        let mut at = 0usize;
        self.records.iter().map(move |r| {
            let d = &self.data[at..at + r.len as usize];
            at += r.len as usize;
            (r, d)
        })
    }
}

/// What a worker needs to start capturing.
#[derive(Debug)]
pub struct CaptureSpec {
    /// Tells this capture's batches from an earlier one's.
    pub(crate) generation: u64,
    /// Only this flow; `None`: every frame.
    pub(crate) flow: Option<u64>,
    /// Octets kept of each frame.
    pub(crate) snaplen: u32,
    /// Empty batches: filled at start, refilled by the control thread as it sends them on.
    pub(crate) free: Receiver<CaptureBatch>,
}

/// A worker's capture, while one runs.
#[derive(Debug)]
pub(crate) struct CaptureTap {
    generation: u64,
    flow: Option<u64>,
    snaplen: usize,
    free: Receiver<CaptureBatch>,
    /// The batch being filled.
    current: Option<CaptureBatch>,
    /// Full batches not handed over yet (at most [`BATCHES_PER_WORKER`]: reserved).
    ready: Vec<CaptureBatch>,
    /// Frames that found no room.
    dropped: u64,
    /// This poll's clock reading, taken at its first captured frame.
    stamp: Option<u64>,
    /// When the end of a poll first found the current batch holding frames.
    filling_since: Option<Instant>,
}

impl CaptureTap {
    /// A tap for `spec`.
    pub(crate) fn new(spec: CaptureSpec) -> CaptureTap {
        CaptureTap {
            generation: spec.generation,
            flow: spec.flow,
            snaplen: spec.snaplen as usize,
            free: spec.free,
            current: None,
            ready: Vec::with_capacity(BATCHES_PER_WORKER),
            dropped: 0,
            stamp: None,
            filling_since: None,
        }
    }

    /// This capture's generation.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether frames of flow `id` are captured.
    #[inline]
    pub(crate) fn wants(&self, id: u64) -> bool {
        self.flow.is_none_or(|f| f == id)
    }

    /// Whether every frame is captured (also those of no flow: malformed, stray).
    #[inline]
    pub(crate) fn all(&self) -> bool {
        self.flow.is_none()
    }

    /// Frames dropped so far for want of room.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Starts a poll: its frames get one clock reading, taken when the first is captured.
    pub(crate) fn begin_poll(&mut self) {
        self.stamp = None;
    }

    /// Copies `frame` (at most the snapshot length of it) into the current batch, moving to
    /// a free batch when it is full; counts it as dropped when none is free.
    pub(crate) fn push(&mut self, direction: CaptureDirection, frame: &[u8], reconstructed: bool) {
        let len = frame.len().min(self.snaplen).min(BATCH_BYTES);
        let ts_ns = *self.stamp.get_or_insert_with(realtime_ns);
        loop {
            match self.current.as_mut() {
                Some(b) if b.fits(len) => {
                    b.data.extend_from_slice(&frame[..len]);
                    b.records.push(FrameRecord {
                        ts_ns,
                        direction,
                        orig_len: u32::try_from(frame.len()).unwrap_or(u32::MAX),
                        len: len as u32,
                        reconstructed,
                    });
                    return;
                }
                Some(_) => {
                    if let Some(full) = self.current.take() {
                        self.ready.push(full);
                        self.filling_since = None;
                    }
                }
                None => {}
            }
            match self.free.try_recv() {
                Ok(b) if b.data.capacity() >= len && b.records.capacity() > 0 => {
                    self.current = Some(b)
                }
                // A batch too small for any frame (not one of ours): never loop on it.
                Ok(_) | Err(_) => {
                    self.dropped += 1;
                    return;
                }
            }
        }
    }

    /// The batches to hand over at the end of a poll at `now`: the full ones, and the one
    /// being filled once it has waited [`FLUSH_AFTER`].
    pub(crate) fn due_batches(&mut self, now: Instant) -> impl Iterator<Item = CaptureBatch> + '_ {
        if self.current.as_ref().is_some_and(|b| !b.is_empty()) {
            let since = *self.filling_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= FLUSH_AFTER {
                self.ready.extend(self.current.take());
                self.filling_since = None;
            }
        }
        self.ready.drain(..)
    }

    /// Every batch holding frames (the capture ends).
    pub(crate) fn all_batches(&mut self) -> impl Iterator<Item = CaptureBatch> + '_ {
        if let Some(b) = self.current.take_if(|b| !b.is_empty()) {
            self.ready.push(b);
        }
        self.filling_since = None;
        self.ready.drain(..)
    }
}

/// CLOCK_REALTIME in nanoseconds (vDSO: no system call).
fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The MPA startup frames the kernel carried before the hand-over, rebuilt from it for a
/// capture: a Responder's received Request; an Initiator's sent Request and received Reply.
/// Sequence and acknowledgment numbers are where the frames were in the connection (they end
/// where the hand-over's state begins), so that a dissector finds the FPDUs that follow.
/// Frames the hand-over does not carry are left out.
pub fn startup_frames(
    h: &HandOver,
    our_mac: [u8; 6],
) -> Result<Vec<(CaptureDirection, Vec<u8>)>, FrameError> {
    let t = &h.tcp;
    let m = &h.mpa;
    let their_window = window_field(t.snd_wnd, t.snd_wscale);
    let our_window = window_field(t.rcv_wnd, t.rcv_wscale);
    let len = |f: &[u8]| f.len() as u32;
    let from_peer = |payload: &[u8], ack: u32| {
        let seq = t.rcv_nxt.wrapping_sub(len(payload));
        let ends = (h.next_hop_mac, our_mac, t.remote, t.local);
        tcp_frame(ends, seq, ack, their_window, payload)
    };
    let from_us = |payload: &[u8], ack: u32| {
        let seq = t.snd_nxt.wrapping_sub(len(payload));
        let ends = (our_mac, h.next_hop_mac, t.local, t.remote);
        tcp_frame(ends, seq, ack, our_window, payload)
    };
    let mut out = Vec::new();
    match m.role {
        Role::Responder => {
            if !m.request_frame.is_empty() {
                out.push((
                    CaptureDirection::Rx,
                    from_peer(&m.request_frame, t.snd_nxt)?,
                ));
            }
        }
        Role::Initiator => {
            let reply = &m.received_reply_frame;
            if !m.request_frame.is_empty() {
                let ack = t.rcv_nxt.wrapping_sub(len(reply));
                out.push((CaptureDirection::Tx, from_us(&m.request_frame, ack)?));
            }
            if !reply.is_empty() {
                out.push((CaptureDirection::Rx, from_peer(reply, t.snd_nxt)?));
            }
        }
    }
    Ok(out)
}

/// The 16-bit window field for `window` octets at `shift`.
fn window_field(window: u32, shift: Option<u8>) -> u16 {
    let w = window >> shift.unwrap_or(0).min(14);
    u16::try_from(w).unwrap_or(u16::MAX)
}

/// One Ethernet/IP/TCP frame with PSH and ACK set and no options, checksums filled.
fn tcp_frame(
    (src_mac, dst_mac, src, dst): ([u8; 6], [u8; 6], SocketAddr, SocketAddr),
    seq: u32,
    ack: u32,
    window: u16,
    payload: &[u8],
) -> Result<Vec<u8>, FrameError> {
    let template = FrameTemplate::new(src_mac, dst_mac, src, dst)?;
    let l = template.l2l3_len();
    let mut buf = vec![0u8; l + HEADER_LEN + payload.len()];
    let repr = TcpRepr {
        src_port: src.port(),
        dst_port: dst.port(),
        seq_number: SeqNumber(seq),
        ack_number: Some(SeqNumber(ack)),
        flags: TcpFlags::PSH,
        window_len: window,
        urgent_at: 0,
        options: TcpOptions::default(),
    };
    let header = repr.emit(&mut TcpPacket::new_unchecked(&mut buf[l..]))?;
    buf[l + header..].copy_from_slice(payload);
    let n = template.finish(&mut buf, header + payload.len())?;
    buf.truncate(n);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::bounded;

    fn tap(flow: Option<u64>, snaplen: u32, batches: Vec<CaptureBatch>) -> CaptureTap {
        let (tx, rx) = bounded(batches.len().max(1));
        for b in batches {
            tx.send(b).unwrap();
        }
        CaptureTap::new(CaptureSpec {
            generation: 7,
            flow,
            snaplen,
            free: rx,
        })
    }

    #[test]
    fn frames_are_truncated_to_the_snapshot_length() {
        let mut t = tap(None, 10, vec![CaptureBatch::with_capacity(100, 10)]);
        t.begin_poll();
        t.push(CaptureDirection::Rx, &[1u8; 64], false);
        t.push(CaptureDirection::Tx, &[2u8; 4], false);
        let batches: Vec<_> = t.all_batches().collect();
        assert_eq!(batches.len(), 1);
        let frames: Vec<_> = batches[0].frames().collect();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].0.orig_len, 64);
        assert_eq!(frames[0].1, &[1u8; 10]);
        assert_eq!(frames[1].0.direction, CaptureDirection::Tx);
        assert_eq!(frames[1].1, &[2u8; 4]);
        // One clock reading per poll.
        assert_eq!(frames[0].0.ts_ns, frames[1].0.ts_ns);
        assert!(frames[0].0.ts_ns > 1_600_000_000_000_000_000);
        assert_eq!(t.dropped(), 0);
    }

    #[test]
    fn a_full_batch_moves_on_and_without_room_frames_are_dropped_not_grown() {
        // Two batches of 3 frames / 100 octets each: the 7th frame finds no room.
        let mut t = tap(
            None,
            65535,
            vec![
                CaptureBatch::with_capacity(100, 3),
                CaptureBatch::with_capacity(100, 3),
            ],
        );
        t.begin_poll();
        for i in 0..7u8 {
            t.push(CaptureDirection::Rx, &[i; 20], false);
        }
        assert_eq!(t.dropped(), 1);
        let batches: Vec<_> = t.all_batches().collect();
        assert_eq!(batches.iter().map(CaptureBatch::len).sum::<usize>(), 6);
        for b in &batches {
            assert_eq!(b.records.capacity(), 3, "never grown");
            assert_eq!(b.data.capacity(), 100, "never grown");
        }
        let firsts: Vec<u8> = batches
            .iter()
            .flat_map(|b| b.frames().map(|(_, d)| d[0]))
            .collect();
        assert_eq!(firsts, vec![0, 1, 2, 3, 4, 5], "in order");
        // No batch is free any more: the next frame is dropped too.
        t.push(CaptureDirection::Rx, &[9; 60], false);
        assert_eq!(t.dropped(), 2);
    }

    #[test]
    fn the_filter_picks_one_flow() {
        let t = tap(Some(3), 100, vec![]);
        assert!(t.wants(3) && !t.wants(4) && !t.all());
        let t = tap(None, 100, vec![]);
        assert!(t.wants(3) && t.wants(4) && t.all());
    }

    #[test]
    fn a_partly_filled_batch_waits_a_while() {
        let mut t = tap(
            None,
            100,
            vec![
                CaptureBatch::with_capacity(100, 3),
                CaptureBatch::with_capacity(100, 3),
            ],
        );
        let t0 = Instant::now();
        assert_eq!(t.due_batches(t0).count(), 0, "nothing captured");
        t.begin_poll();
        t.push(CaptureDirection::Rx, &[1; 10], false);
        assert_eq!(t.due_batches(t0).count(), 0, "held");
        let t1 = t0 + FLUSH_AFTER / 2;
        assert_eq!(t.due_batches(t1).count(), 0, "still held");
        let t2 = t0 + FLUSH_AFTER;
        assert_eq!(t.due_batches(t2).count(), 1, "waited long enough");
        // Full batches go at once.
        for i in 0..3 {
            t.push(CaptureDirection::Rx, &[i; 10], false);
        }
        assert_eq!(
            t.due_batches(t2).count(),
            0,
            "full, but it may still take a frame"
        );
        t.push(CaptureDirection::Rx, &[3; 10], false);
        assert_eq!(t.dropped(), 1, "both batches are with the control thread");
        assert_eq!(t.due_batches(t2).count(), 1, "the full one goes at once");
    }
}
