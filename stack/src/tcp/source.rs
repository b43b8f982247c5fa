//! Where the octets a connection sends come from: the [`SendSource`] trait, and the plain
//! byte ring ([`SendBuffer`]) as one implementation.
//!
//! The TCP asks the source two things per segment: how long the segment from an offset may
//! be ([`SendSource::segment_len`]), and its octets ([`SendSource::fill`]). A byte stream
//! cuts anywhere; an FPDU source (`crate::sender::FpduSource`) cuts only at FPDU
//! boundaries, so every segment it sends, new or retransmitted, starts with an FPDU and
//! carries whole FPDUs (RFC 5044 §5.1, Appendix A.1), and produces the octets on demand,
//! identical on every retransmission.

use super::send_buf::SendBuffer;

/// Why a source could not produce the octets the TCP asked for. The connection fails with
/// it (a RST goes out): a stream that cannot be continued must not be sent wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// A registered region a queued message reads from is gone or shorter than at post
    /// time.
    #[error("registered region {stag:#010x} unreadable at offset {offset} ({len} octets) while its message was in flight")]
    RegionUnreadable {
        /// The region's STag.
        stag: u32,
        /// Offset of the read in the region.
        offset: u64,
        /// Octets of the read.
        len: usize,
    },
}

/// The most octets a source shows the TCP at once: the largest window a peer can offer
/// (2^16 · 2^14, RFC 7323 §2.3), well inside the 2^31 that sequence comparisons allow.
pub(crate) const MAX_VISIBLE: usize = 1 << 30;

/// The octets a connection sends, addressed by offset from SND.UNA.
pub trait SendSource {
    /// Whether segments must end where [`SendSource::segment_len`] says even when TCP
    /// options would otherwise shrink them: the connection then sizes data segments from
    /// the options every segment carries (RFC 5044's EMSS: timestamps) and gives a data
    /// segment only the SACK blocks that fit beside it (pure ACKs carry them all).
    const ALIGNED: bool = false;

    /// Octets queued from SND.UNA on (sent or not) and not yet acknowledged, as far as the
    /// TCP may see them: at most `MAX_VISIBLE`, so that SND.UNA + `queued()` stays in the
    /// half of the 32-bit sequence space ahead of SND.UNA.
    fn queued(&self) -> usize;

    /// Octets queued beyond what [`SendSource::queued`] shows (a source may hold more than
    /// the sequence space can address at once; they come into view as octets are
    /// acknowledged). A FIN waits until this is 0.
    fn backlog(&self) -> u64 {
        0
    }

    /// The largest length of a segment starting `off` octets after SND.UNA that ends on a
    /// boundary of the source (for an FPDU source: after a whole FPDU) and is at most
    /// `room`; 0 when none fits. A byte stream returns `min(queued − off, room)`.
    fn segment_len(&self, off: usize, room: usize) -> usize;

    /// Writes the octets `off..off + out.len()` after SND.UNA into `out`. The caller keeps
    /// `off + out.len() <= queued()`. The same offsets give the same octets every time.
    fn fill(&mut self, off: usize, out: &mut [u8]) -> Result<(), SourceError>;

    /// `n` more octets were acknowledged: SND.UNA moves on by `n` (`n <= queued()`).
    fn acked(&mut self, n: usize);

    /// RDMA Read Responses wholly acknowledged since the last call (each frees a slot of
    /// our IRD). A byte stream sends none.
    fn take_acked_read_responses(&mut self) -> usize {
        0
    }
}

impl SendSource for SendBuffer {
    fn queued(&self) -> usize {
        self.len()
    }

    fn segment_len(&self, off: usize, room: usize) -> usize {
        self.len().saturating_sub(off).min(room)
    }

    fn fill(&mut self, off: usize, out: &mut [u8]) -> Result<(), SourceError> {
        self.copy_out(off, out);
        Ok(())
    }

    fn acked(&mut self, n: usize) {
        self.consume(n);
    }
}
