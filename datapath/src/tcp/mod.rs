//! A minimal TCP for established connections handed over from the kernel, sans I/O.
//!
//! Segments and time go in, segments, timer deadlines and events come out; nothing here
//! touches a socket, a clock or the allocator on the per-segment path. What it does:
//!
//! * receive: RFC 9293 acceptability and trimming, PAWS (RFC 7323), RST/SYN/ACK checks of
//!   RFC 5961, in-order delivery without a copy (a range of the caller's own payload), and a
//!   reassembly store for out-of-order octets bounded by memory (octets copied, one range
//!   per MSS; placed octets free; far-end pruning), with SACK (RFC 2018) and D-SACK
//!   (RFC 2883);
//! * ACKs: in-order bulk every second segment or at the end of each RX burst, else a
//!   delayed-ACK timer; under loss one ACK per out-of-order, hole-filling or duplicate
//!   segment, frozen with the SACK blocks of its moment and queued (RFC 5681 §4.2);
//!   timestamps that continue the kernel's clock;
//! * window: what the buffers can really take, scaled, never retracted;
//! * send: a bulk sender from a [`SendSource`] (the byte ring behind [`Connection::send`], or
//!   an FPDU source whose segments, retransmissions included, carry whole FPDUs only): congestion control in [`cc`] (CUBIC,
//!   RFC 9438, by default, or NewReno; HyStart++, RFC 9406, in slow start), SACK loss
//!   recovery per RFC 6675 (pipe, NextSeg, IsLost with DupThresh, one window reduction per
//!   episode; RFC 6582 partial ACKs without SACK; a lost retransmission at SND.UNA found
//!   from later SACKs), RFC 6298 RTO with backoff and the window collapse, RFC 5827 early
//!   retransmit and RFC 3042 limited transmit, the peer's window, pacing at gain × cwnd /
//!   SRTT ([`Connection::next_send_at`]), zero-window probes, FIN in both directions with
//!   every closing state.
//!
//! What it does not: the handshake (the kernel did it), urgent data, ECN, RACK-TLP
//! (RFC 8985: reordering deeper than DupThresh costs a spurious retransmission and a
//! window reduction); D-SACKs it receives are counted, not acted on (no RFC 3708 undo).
//!
//! Files: [`config`] (hand-over snapshot, policy), `connection` (the state machine: types,
//! construction and events; `connection/rx.rs` receive, `ack.rs` ACK processing, `tx.rs`
//! send, `timers.rs` timers), `reassembly` (out-of-order store), `source` (what is sent:
//! [`SendSource`]), `send_buf`, `rtt` (RFC 6298), `scoreboard` (peer's SACKs), [`cc`] (congestion control), `timer`, [`stats`], [`error`]. Tests: `tests/`
//! (`pair.rs` one sender over a lossy link, `bulk.rs` senders through a shared bottleneck).
#![forbid(unsafe_code)]

pub mod cc;
pub mod config;
mod connection;
pub mod error;
mod reassembly;
mod rtt;
mod scoreboard;
mod send_buf;
mod source;
pub mod stats;
mod timer;

#[cfg(test)]
pub(crate) mod tests;

pub use cc::CongestionControl;
pub use config::{HandoverState, TcpConfig, TsHandover};
pub use connection::{Connection, Event, SegmentOutcome, State, Transmit};
pub use error::TcpError;
pub use send_buf::SendBuffer;
pub use source::{SendSource, SourceError};
pub use stats::{DropCounters, DropReason, TcpStats};

/// Parts of an out-of-order segment the caller consumed itself (offsets into the octets it
/// was shown, sorted, disjoint); see [`Connection::handle_segment_placing`]. Bounded: past
/// [`PlacedSpans::CAPACITY`] spans the caller stops placing and the rest is stored.
#[derive(Debug, Clone)]
pub struct PlacedSpans {
    spans: [std::ops::Range<usize>; PlacedSpans::CAPACITY],
    len: usize,
}

impl Default for PlacedSpans {
    fn default() -> Self {
        PlacedSpans {
            spans: std::array::from_fn(|_| 0..0),
            len: 0,
        }
    }
}

impl PlacedSpans {
    /// Spans one segment can report.
    pub const CAPACITY: usize = 64;

    /// Whether another span fits.
    pub fn has_room(&self) -> bool {
        self.len < Self::CAPACITY
    }

    /// Adds a span after the previous ones; `false` (ignored) when full or out of order.
    pub fn push(&mut self, r: std::ops::Range<usize>) -> bool {
        let after = self.len == 0 || self.spans[self.len - 1].end <= r.start;
        if !self.has_room() || !after || r.is_empty() {
            return false;
        }
        self.spans[self.len] = r;
        self.len += 1;
        true
    }

    /// The spans.
    pub fn as_slice(&self) -> &[std::ops::Range<usize>] {
        &self.spans[..self.len]
    }
}
