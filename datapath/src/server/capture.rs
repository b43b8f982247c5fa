//! Packet capture on behalf of one client: the workers copy frames into batches the control
//! thread hands them; the control thread forwards them to the client within the capture's
//! bounds of time and size and gives the batches back.

use super::{Command, Server};
use crate::io::capture::{CaptureBatch, CaptureSpec, BATCHES_PER_WORKER};
use crossbeam_channel::Sender;
use mpa_ctl_proto::capture::{check_request, pcap_record_len, PCAP_FILE_HEADER_LEN};
use mpa_ctl_proto::{CapturedFrame, ErrorCode, Message};
use std::time::{Duration, Instant};

/// A packet capture on behalf of one client.
pub(super) struct Capture {
    pub(super) client: u64,
    pub(super) generation: u64,
    pub(super) flow: Option<u64>,
    pub(super) deadline: Instant,
    pub(super) max_bytes: u64,
    /// Octets of the pcap file the frames sent so far make (file header included).
    pub(super) bytes: u64,
    /// Frames sent to the client.
    pub(super) frames: u64,
    /// Frames lost: no room in a worker, or the client's queue full.
    pub(super) dropped: u64,
    /// Where each worker's emptied batches go back.
    pub(super) returns: Vec<Sender<CaptureBatch>>,
    /// Set when the capture must end at the next turn of the loop.
    pub(super) ending: Option<&'static str>,
}

/// Octets of frames per [`Message::Captured`] (base64 makes them a third larger; the
/// protocol's message limit is 8 MiB).
const CAPTURED_MESSAGE_OCTETS: usize = 1 << 20;

impl Server {
    /// Starts a capture for `client`: every worker gets its batches (the capture's whole
    /// memory, reserved here) and starts copying.
    pub(super) fn start_capture(
        &mut self,
        client: u64,
        flow: Option<u64>,
        max_bytes: u64,
        duration_ms: u64,
        snaplen: u32,
    ) -> Result<(), crate::memory::registry::Refusal> {
        check_request(max_bytes, duration_ms, snaplen)
            .map_err(|e| (ErrorCode::BadRequest, e.to_string()))?;
        if let Some(c) = &self.capture {
            let left = c.deadline.saturating_duration_since(Instant::now());
            return Err((
                ErrorCode::Limit,
                format!(
                    "a capture is already running (one at a time; it ends within {:.1} s)",
                    left.as_secs_f64()
                ),
            ));
        }
        if let Some(f) = flow.filter(|f| !self.adopted.contains_key(f)) {
            return Err((ErrorCode::UnknownFlow, format!("no flow {f}")));
        }
        // A capture holds payloads: of one flow, for a client that controls it; of every
        // flow, only for a client that controls them all.
        match flow {
            Some(f) => self.may_control(client, f)?,
            None => {
                let ids: Vec<u64> = self.adopted.keys().copied().collect();
                for f in ids {
                    self.may_control(client, f)?;
                }
            }
        }
        let generation = self.next_capture;
        self.next_capture += 1;
        let mut returns = Vec::with_capacity(self.workers.len());
        for w in &self.workers {
            let (tx, free) = crossbeam_channel::bounded(BATCHES_PER_WORKER);
            for _ in 0..BATCHES_PER_WORKER {
                let _ = tx.try_send(CaptureBatch::standard());
            }
            let spec = CaptureSpec {
                generation,
                flow,
                snaplen,
                free,
            };
            if w.send(Command::StartCapture(spec)).is_err() {
                // Undo: the workers that started drop their taps (their answers are not needed).
                for w in &self.workers {
                    let (tx, _) = crossbeam_channel::bounded(1);
                    let _ = w.send(Command::StopCapture(tx));
                }
                return Err((ErrorCode::Internal, "worker gone".into()));
            }
            returns.push(tx);
        }
        tracing::info!(
            client,
            ?flow,
            max_bytes,
            duration_ms,
            snaplen,
            "capture started"
        );
        self.capture = Some(Capture {
            client,
            generation,
            flow,
            deadline: Instant::now() + Duration::from_millis(duration_ms),
            max_bytes,
            bytes: PCAP_FILE_HEADER_LEN,
            frames: 0,
            dropped: 0,
            returns,
            ending: None,
        });
        Ok(())
    }

    /// Ends the capture when its time is up, its size bound reached, its client asked or left.
    pub(super) fn capture_tick(&mut self) {
        let Some(c) = &self.capture else {
            return;
        };
        let reason = if !self.clients.contains_key(&c.client) {
            Some("client gone")
        } else if c.ending.is_some() {
            c.ending
        } else if Instant::now() >= c.deadline {
            Some("duration")
        } else {
            None
        };
        if let Some(reason) = reason {
            self.finish_capture(reason);
        }
    }

    /// Stops every worker's tap, forwards what they still held, and tells the client.
    pub(super) fn finish_capture(&mut self, reason: &'static str) {
        let mut dropped = 0;
        for w in &self.workers {
            let (tx, rx) = crossbeam_channel::bounded(1);
            if w.send(Command::StopCapture(tx)).is_ok() {
                match rx.recv_timeout(Duration::from_secs(2)) {
                    Ok(d) => dropped += d,
                    Err(_) => tracing::warn!("worker did not stop its capture in time"),
                }
            }
        }
        // A worker sends its last batches before it answers: they are queued by now.
        while let Ok(n) = self.notify.try_recv() {
            self.notified(n);
        }
        let Some(c) = self.capture.take() else {
            return;
        };
        let dropped = c.dropped + dropped;
        tracing::info!(
            client = c.client,
            reason,
            frames = c.frames,
            bytes = c.bytes,
            dropped,
            "capture done"
        );
        let done = Message::CaptureDone {
            reason: reason.to_string(),
            frames: c.frames,
            dropped,
        };
        self.reply(c.client, done);
    }

    /// Sends a worker's captured frames to the capturing client (within the size bound) and
    /// gives the batch back to the worker.
    pub(super) fn captured(&mut self, queue: u32, generation: u64, mut batch: CaptureBatch) {
        let Some(c) = self.capture.as_mut().filter(|c| c.generation == generation) else {
            return;
        };
        let mut messages: Vec<Vec<CapturedFrame>> = Vec::new();
        let mut chunk = Vec::new();
        let mut octets = 0usize;
        for (r, data) in batch.frames() {
            let grows = pcap_record_len(data.len());
            if c.bytes + grows > c.max_bytes {
                c.ending.get_or_insert("max_bytes");
                break;
            }
            c.bytes += grows;
            octets += data.len();
            chunk.push(CapturedFrame {
                ts_ns: r.ts_ns,
                direction: r.direction,
                orig_len: r.orig_len,
                data: data.to_vec(),
                reconstructed: r.reconstructed,
            });
            if octets >= CAPTURED_MESSAGE_OCTETS {
                messages.push(std::mem::take(&mut chunk));
                octets = 0;
            }
        }
        if !chunk.is_empty() {
            messages.push(chunk);
        }
        batch.clear();
        if let Some(back) = c.returns.get(queue as usize) {
            let _ = back.try_send(batch);
        }
        let client = c.client;
        for frames in messages {
            let n = frames.len() as u64;
            let sent = self.send_to(client, Message::Captured { frames }, None);
            if let Some(c) = self.capture.as_mut() {
                if sent {
                    c.frames += n;
                } else {
                    c.dropped += n;
                }
            }
        }
    }
}
