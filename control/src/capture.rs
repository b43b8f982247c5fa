//! `mpa-control capture`: asks the datapath for a packet capture ([`Message::StartCapture`])
//! and writes the frames it streams into a classic libpcap file (nanosecond timestamps,
//! LINKTYPE_ETHERNET) that Wireshark and tshark open.

use crate::datapath_client::{ClientError, DatapathClient};
use mpa_ctl_proto::capture::{
    check_request, pcap_record_len, CaptureBoundError, PCAP_FILE_HEADER_LEN,
};
use mpa_ctl_proto::{CaptureDirection, ErrorCode, Message};
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Magic number of a libpcap file with nanosecond timestamps.
pub const PCAP_MAGIC_NS: u32 = 0xa1b2_3c4d;
/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;

/// Why a pcap file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    /// Writing failed.
    #[error("pcap write: {0}")]
    Io(#[from] io::Error),
    /// The size bound cannot even hold the file header.
    #[error(
        "a pcap file of at most {0} octets cannot hold its {PCAP_FILE_HEADER_LEN}-octet header"
    )]
    TooSmall(u64),
}

/// A classic libpcap file (version 2.4, nanosecond timestamps, Ethernet frames, native byte
/// order as libpcap writes it) that never grows beyond `max_bytes` octets.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    w: W,
    snaplen: u32,
    max_bytes: u64,
    bytes: u64,
    frames: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header; frames are cut to `snaplen` octets.
    pub fn new(mut w: W, snaplen: u32, max_bytes: u64) -> Result<Self, PcapError> {
        if max_bytes < PCAP_FILE_HEADER_LEN {
            return Err(PcapError::TooSmall(max_bytes));
        }
        let mut h = [0u8; PCAP_FILE_HEADER_LEN as usize];
        h[0..4].copy_from_slice(&PCAP_MAGIC_NS.to_ne_bytes());
        h[4..6].copy_from_slice(&2u16.to_ne_bytes());
        h[6..8].copy_from_slice(&4u16.to_ne_bytes());
        // thiszone and sigfigs: 0.
        h[16..20].copy_from_slice(&snaplen.to_ne_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_ne_bytes());
        w.write_all(&h)?;
        Ok(PcapWriter {
            w,
            snaplen,
            max_bytes,
            bytes: PCAP_FILE_HEADER_LEN,
            frames: 0,
        })
    }

    /// Appends one frame seen at `ts_ns` (Unix time, nanoseconds) that was `orig_len` octets
    /// on the wire. `Ok(false)`, and nothing written, when it would take the file past its
    /// size bound.
    pub fn write_frame(
        &mut self,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
    ) -> Result<bool, PcapError> {
        let data = &data[..data.len().min(self.snaplen as usize)];
        let grows = pcap_record_len(data.len());
        if self.bytes + grows > self.max_bytes {
            return Ok(false);
        }
        let mut r = [0u8; 16];
        let secs = u32::try_from(ts_ns / 1_000_000_000).unwrap_or(u32::MAX);
        r[0..4].copy_from_slice(&secs.to_ne_bytes());
        r[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_ne_bytes());
        r[8..12].copy_from_slice(&(data.len() as u32).to_ne_bytes());
        r[12..16].copy_from_slice(&orig_len.max(data.len() as u32).to_ne_bytes());
        self.w.write_all(&r)?;
        self.w.write_all(data)?;
        self.bytes += grows;
        self.frames += 1;
        Ok(true)
    }

    /// Octets written so far (file header included).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Frames written so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Flushes and returns the writer.
    pub fn finish(mut self) -> Result<W, PcapError> {
        self.w.flush()?;
        Ok(self.w)
    }
}

/// What to capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureOptions {
    /// One flow, or every frame (`None`).
    pub flow: Option<u64>,
    /// Bound of the file, octets.
    pub max_bytes: u64,
    /// Bound of the capture's duration.
    pub duration: Duration,
    /// Octets kept of each frame.
    pub snaplen: u32,
}

/// How a capture went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureSummary {
    /// Frames written.
    pub frames: u64,
    /// Of which received by the datapath.
    pub rx: u64,
    /// Of which sent by the datapath.
    pub tx: u64,
    /// Of which rebuilt from a hand-over (MPA startup frames).
    pub reconstructed: u64,
    /// Octets of the file.
    pub bytes: u64,
    /// Frames the datapath saw but could not pass on (buffers or queues full).
    pub dropped: u64,
    /// Why it ended: "duration", "max_bytes", "stopped" (or the datapath's words).
    pub reason: String,
}

/// Why a capture failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// A bound is out of range.
    #[error(transparent)]
    Bounds(#[from] CaptureBoundError),
    /// The datapath refused or failed.
    #[error("datapath: {0}")]
    Datapath(#[from] ClientError),
    /// The file could not be written.
    #[error(transparent)]
    Pcap(#[from] PcapError),
    /// The datapath did not end the capture in time.
    #[error("the datapath did not end the capture within {0:?} of its end")]
    NoEnd(Duration),
}

/// How long after the capture's own end the datapath may take to say it ended.
const END_GRACE: Duration = Duration::from_secs(5);

/// Runs a capture over `dp` into `out` (pcap). Ends when the datapath says so (duration, size
/// bound); `stop` set (a signal) asks it to end early. Returns the summary and `out`.
pub fn capture<W: Write>(
    dp: &mut DatapathClient,
    opts: &CaptureOptions,
    out: W,
    stop: &AtomicBool,
) -> Result<(CaptureSummary, W), CaptureError> {
    let duration_ms = u64::try_from(opts.duration.as_millis()).unwrap_or(u64::MAX);
    check_request(opts.max_bytes, duration_ms, opts.snaplen)?;
    let mut pcap = PcapWriter::new(out, opts.snaplen, opts.max_bytes)?;
    match dp.request(|id| Message::StartCapture {
        id,
        flow: opts.flow,
        max_bytes: opts.max_bytes,
        duration_ms,
        snaplen: opts.snaplen,
    })? {
        Message::Ok { .. } => {}
        m => return Err(ClientError::Unexpected(Box::new(m)).into()),
    }
    tracing::debug!(?opts, "capture started");
    let end = Instant::now() + opts.duration + END_GRACE;
    let (mut rx, mut tx, mut reconstructed) = (0u64, 0u64, 0u64);
    let mut asked_to_stop = false;
    let (reason, dropped) = loop {
        let slice = (Instant::now() + Duration::from_millis(200)).min(end);
        match dp.wait_notification(Some(slice))? {
            Some(Message::Captured { frames }) => {
                let mut full = false;
                for f in frames {
                    if full || !pcap.write_frame(f.ts_ns, f.orig_len, &f.data)? {
                        full = true;
                        continue;
                    }
                    match f.direction {
                        CaptureDirection::Rx => rx += 1,
                        CaptureDirection::Tx => tx += 1,
                    }
                    reconstructed += u64::from(f.reconstructed);
                }
                // The datapath keeps the same account and ends the capture itself; asking
                // covers a frame cut differently here.
                if full && !asked_to_stop {
                    asked_to_stop = true;
                    request_stop(dp)?;
                }
            }
            Some(Message::CaptureDone {
                reason, dropped, ..
            }) => break (reason, dropped),
            Some(other) => tracing::debug!(?other, "notification ignored during a capture"),
            None => {}
        }
        if stop.load(Ordering::Relaxed) && !asked_to_stop {
            asked_to_stop = true;
            request_stop(dp)?;
        }
        if Instant::now() >= end {
            return Err(CaptureError::NoEnd(END_GRACE));
        }
    };
    let bytes = pcap.bytes();
    let frames = pcap.frames();
    let out = pcap.finish()?;
    Ok((
        CaptureSummary {
            frames,
            rx,
            tx,
            reconstructed,
            bytes,
            dropped,
            reason,
        },
        out,
    ))
}

/// Asks the datapath to end the capture now (it may have ended already).
fn request_stop(dp: &mut DatapathClient) -> Result<(), ClientError> {
    match dp.request(|id| Message::StopCapture { id }) {
        Ok(_)
        | Err(ClientError::Refused {
            code: ErrorCode::BadRequest,
            ..
        }) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn header_and_records_are_libpcap_2_4_nanoseconds_ethernet() {
        let mut w = PcapWriter::new(Vec::new(), 65535, 1 << 20).unwrap();
        assert!(w
            .write_frame(1_700_000_000_123_456_789, 60, &[0xab; 60])
            .unwrap());
        assert!(w.write_frame(5, 1514, &[1, 2, 3]).unwrap());
        assert_eq!((w.frames(), w.bytes()), (2, 24 + 16 + 60 + 16 + 3));
        let b = w.finish().unwrap();
        assert_eq!(b.len(), 24 + 16 + 60 + 16 + 3);
        assert_eq!(u32_at(&b, 0), 0xa1b2_3c4d);
        assert_eq!(u16::from_ne_bytes([b[4], b[5]]), 2, "version 2.4");
        assert_eq!(u16::from_ne_bytes([b[6], b[7]]), 4, "version 2.4");
        assert_eq!(u32_at(&b, 8), 0);
        assert_eq!(u32_at(&b, 12), 0);
        assert_eq!(u32_at(&b, 16), 65535);
        assert_eq!(u32_at(&b, 20), 1);
        // First record.
        assert_eq!(u32_at(&b, 24), 1_700_000_000);
        assert_eq!(u32_at(&b, 28), 123_456_789);
        assert_eq!((u32_at(&b, 32), u32_at(&b, 36)), (60, 60));
        assert_eq!(&b[40..100], &[0xab; 60]);
        // Second: orig_len as given.
        assert_eq!((u32_at(&b, 100), u32_at(&b, 104)), (0, 5));
        assert_eq!((u32_at(&b, 108), u32_at(&b, 112)), (3, 1514));
        assert_eq!(&b[116..], &[1, 2, 3]);
    }

    #[test]
    fn frames_are_cut_to_the_snapshot_length() {
        let mut w = PcapWriter::new(Vec::new(), 10, 1 << 20).unwrap();
        assert!(w.write_frame(0, 100, &[7; 100]).unwrap());
        let b = w.finish().unwrap();
        assert_eq!(b.len(), 24 + 16 + 10);
        assert_eq!((u32_at(&b, 32), u32_at(&b, 36)), (10, 100));
    }

    #[test]
    fn the_file_never_passes_its_size_bound() {
        // Room for the header and exactly two 20-octet frames.
        let max = 24 + 2 * (16 + 20);
        let mut w = PcapWriter::new(Vec::new(), 65535, max).unwrap();
        assert!(w.write_frame(0, 20, &[1; 20]).unwrap());
        assert!(w.write_frame(0, 20, &[2; 20]).unwrap());
        assert!(
            !w.write_frame(0, 1, &[3]).unwrap(),
            "one octet more is refused"
        );
        assert_eq!(w.frames(), 2);
        let b = w.finish().unwrap();
        assert_eq!(b.len() as u64, max);
        assert!(matches!(
            PcapWriter::new(Vec::new(), 100, 23),
            Err(PcapError::TooSmall(23))
        ));
    }
}
