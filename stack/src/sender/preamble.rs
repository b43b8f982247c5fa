//! Octets sent before an FPDU stream: a Responder's MPA Reply (RFC 5044 §7.1) goes out
//! ahead of the first FPDU, and the stream's markers and FPDU alignment count from the
//! octet after it (RFC 5044 §4.3: SeqStart follows the startup frames).

#![forbid(unsafe_code)]

use crate::tcp::{SendSource, SourceError};

/// `inner` preceded by a few raw octets. The preamble is cut off from the stream: no
/// segment carries both, so the first FPDU starts a segment of its own (RFC 5044 §5.1).
#[derive(Debug)]
pub(crate) struct Preamble<S> {
    /// The preamble's octets not yet acknowledged.
    head: Vec<u8>,
    inner: S,
}

impl<S: SendSource> Preamble<S> {
    /// `head` (may be empty), then what `inner` holds.
    pub(crate) fn new(head: Vec<u8>, inner: S) -> Preamble<S> {
        Preamble { head, inner }
    }

    /// The source after the preamble.
    pub(crate) fn inner(&self) -> &S {
        &self.inner
    }

    /// The source after the preamble, to queue into.
    pub(crate) fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }
}

impl<S: SendSource> SendSource for Preamble<S> {
    const ALIGNED: bool = S::ALIGNED;

    fn queued(&self) -> usize {
        self.head.len() + self.inner.queued()
    }

    fn backlog(&self) -> u64 {
        self.inner.backlog()
    }

    fn segment_len(&self, off: usize, room: usize) -> usize {
        let h = self.head.len();
        if off < h {
            (h - off).min(room)
        } else {
            self.inner.segment_len(off - h, room)
        }
    }

    fn fill(&mut self, off: usize, out: &mut [u8]) -> Result<(), SourceError> {
        let h = self.head.len();
        let from_head = h.saturating_sub(off).min(out.len());
        if from_head > 0 {
            out[..from_head].copy_from_slice(&self.head[off..off + from_head]);
        }
        let rest = &mut out[from_head..];
        if rest.is_empty() {
            return Ok(());
        }
        self.inner.fill((off + from_head) - h, rest)
    }

    fn take_acked_read_responses(&mut self) -> usize {
        self.inner.take_acked_read_responses()
    }

    fn acked(&mut self, n: usize) {
        let from_head = n.min(self.head.len());
        self.head.drain(..from_head);
        if n > from_head {
            self.inner.acked(n - from_head);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::SendBuffer;

    fn source(head: &[u8], body: &[u8]) -> Preamble<SendBuffer> {
        let mut b = SendBuffer::new(1024);
        b.push(body);
        Preamble::new(head.to_vec(), b)
    }

    #[test]
    fn the_preamble_is_cut_off_and_consumed_first() {
        let mut p = source(b"REPLY", b"fpdus");
        assert_eq!(p.queued(), 10);
        // Never one segment across the edge.
        assert_eq!(p.segment_len(0, 100), 5);
        assert_eq!(p.segment_len(3, 100), 2);
        assert_eq!(p.segment_len(5, 100), 5);
        let mut out = [0u8; 10];
        p.fill(0, &mut out).unwrap();
        assert_eq!(&out, b"REPLYfpdus");
        let mut out = [0u8; 4];
        p.fill(3, &mut out).unwrap();
        assert_eq!(&out, b"LYfp");
        p.acked(3);
        assert_eq!(p.queued(), 7);
        let mut out = [0u8; 7];
        p.fill(0, &mut out).unwrap();
        assert_eq!(&out, b"LYfpdus");
        p.acked(4);
        assert_eq!(p.queued(), 3);
        assert_eq!(p.inner().queued(), 3);
        let mut out = [0u8; 3];
        p.fill(0, &mut out).unwrap();
        assert_eq!(&out, b"dus");
    }
}
