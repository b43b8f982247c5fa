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
//! * send: a bulk sender from a [`SendSource`] (the byte ring the tests fill, or
//!   an FPDU source whose segments, retransmissions included, carry whole FPDUs only): congestion control in `cc` (CUBIC,
//!   RFC 9438, by default, or NewReno; HyStart++, RFC 9406, in slow start), SACK loss
//!   recovery per RFC 6675 (pipe, NextSeg, IsLost with DupThresh, one window reduction per
//!   episode; RFC 6582 partial ACKs without SACK; a lost retransmission at SND.UNA found
//!   from later SACKs), RFC 6298 RTO with backoff and the window collapse, RFC 5827 early
//!   retransmit and RFC 3042 limited transmit, the peer's window, pacing at gain × cwnd /
//!   SRTT (a deadline `poll_timeout` reports), zero-window probes, FIN in both directions
//!   with every closing state.
//!
//! What it does not: the handshake (the kernel did it), urgent data, ECN, RACK-TLP
//! (RFC 8985: reordering deeper than DupThresh costs a spurious retransmission and a
//! window reduction); D-SACKs it receives are counted, not acted on (no RFC 3708 undo).
//!
//! Files: `config` (hand-over snapshot, policy), `connection` (the state machine: types,
//! construction and events; `connection/rx.rs` receive, `ack.rs` ACK processing, `tx.rs`
//! send, `timers.rs` timers), `reassembly` (out-of-order store), `source` (what is sent:
//! [`SendSource`]), `send_buf`, `rtt` (RFC 6298), `scoreboard` (peer's SACKs), `cc` (congestion control), `timer`, `stats`, `error`. Tests: `tests/`
//! (`pair.rs` one sender over a lossy link, `bulk.rs` senders through a shared bottleneck).
#![forbid(unsafe_code)]

pub(crate) mod cc;
pub(crate) mod config;
mod connection;
pub(crate) mod error;
mod reassembly;
mod rtt;
mod scoreboard;
mod send_buf;
mod source;
pub(crate) mod stats;
mod timer;

#[cfg(test)]
pub(crate) mod tests;

pub use cc::CongestionControl;
pub use config::{HandoverState, TcpConfig, TsHandover};
pub use connection::Connection;
pub use source::{SendSource, SourceError};

pub(crate) use connection::{Event, SegmentOutcome, TextLengths};
pub(crate) use error::TcpError;
pub(crate) use source::MAX_VISIBLE;
#[cfg(test)]
pub(crate) use {
    connection::State,
    send_buf::SendBuffer,
    stats::{DropReason, TcpStats},
};

/// Parts of an out-of-order segment the caller consumed itself (offsets into the octets it
/// was shown, sorted, disjoint); see [`Connection::handle_segment_placing`]. Bounded: past
/// [`PlacedSpans::CAPACITY`] spans the caller stops placing and the rest is stored.
///
/// It also shows the caller the out-of-order octets already copied into the store
/// ([`PlacedSpans::stored`]), so that an FPDU whose earlier or later pieces arrived in other
/// segments can be placed once the last piece is in; the caller names the stored octets it
/// consumed that way ([`PlacedSpans::push_stored`]) and the store stops counting them.
#[derive(Clone)]
pub(crate) struct PlacedSpans<'s> {
    spans: [std::ops::Range<usize>; PlacedSpans::CAPACITY],
    len: usize,
    store: Option<(&'s reassembly::Reassembly, mpa::seq::SeqNumber)>,
    stored: [(mpa::seq::SeqNumber, mpa::seq::SeqNumber); PlacedSpans::STORED_CAPACITY],
    stored_len: usize,
}

impl std::fmt::Debug for PlacedSpans<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacedSpans")
            .field("spans", &self.as_slice())
            .field("stored", &self.stored_spans())
            .finish()
    }
}

impl Default for PlacedSpans<'_> {
    fn default() -> Self {
        PlacedSpans {
            spans: std::array::from_fn(|_| 0..0),
            len: 0,
            store: None,
            stored: [(mpa::seq::SeqNumber(0), mpa::seq::SeqNumber(0));
                PlacedSpans::STORED_CAPACITY],
            stored_len: 0,
        }
    }
}

impl<'s> PlacedSpans<'s> {
    /// Spans one segment can report.
    const CAPACITY: usize = 64;
    /// Stored ranges one segment can report consumed (the FPDU reaching into the segment's
    /// start and the one reaching out of its end, each with a piece on one side).
    const STORED_CAPACITY: usize = 4;

    /// Spans that can see the store's copied octets above `rcv_nxt`.
    pub(crate) fn with_store(
        store: &'s reassembly::Reassembly,
        rcv_nxt: mpa::seq::SeqNumber,
    ) -> Self {
        PlacedSpans {
            store: Some((store, rcv_nxt)),
            ..PlacedSpans::default()
        }
    }

    /// Whether another span fits.
    pub(crate) fn has_room(&self) -> bool {
        self.len < Self::CAPACITY
    }

    /// Adds a span after the previous ones; `false` (ignored) when full or out of order.
    pub(crate) fn push(&mut self, r: std::ops::Range<usize>) -> bool {
        let after = self.len == 0 || self.spans[self.len - 1].end <= r.start;
        if !self.has_room() || !after || r.is_empty() {
            return false;
        }
        self.spans[self.len] = r;
        self.len += 1;
        true
    }

    /// The spans.
    pub(crate) fn as_slice(&self) -> &[std::ops::Range<usize>] {
        &self.spans[..self.len]
    }

    /// The octets `[s, e)` of the stream as the store holds them (one or two slices: its
    /// ring may wrap), when it holds every one, copied and not consumed by the caller;
    /// `None` otherwise or without a store.
    pub(crate) fn stored(
        &self,
        s: mpa::seq::SeqNumber,
        e: mpa::seq::SeqNumber,
    ) -> Option<(&'s [u8], &'s [u8])> {
        let (store, rcv_nxt) = self.store?;
        store.copied_octets(rcv_nxt, s, e)
    }

    /// The caller consumed the stored octets `[s, e)` (as [`PlacedSpans::stored`] showed
    /// them); `false` (ignored) when they are not stored or the list is full.
    pub(crate) fn push_stored(&mut self, s: mpa::seq::SeqNumber, e: mpa::seq::SeqNumber) -> bool {
        if self.stored_len >= Self::STORED_CAPACITY || self.stored(s, e).is_none() {
            return false;
        }
        self.stored[self.stored_len] = (s, e);
        self.stored_len += 1;
        true
    }

    /// The stored ranges the caller consumed.
    pub(crate) fn stored_spans(&self) -> &[(mpa::seq::SeqNumber, mpa::seq::SeqNumber)] {
        &self.stored[..self.stored_len]
    }

    /// The same spans without the view of the store (which they borrow).
    pub(crate) fn detach(&self) -> PlacedSpans<'static> {
        PlacedSpans {
            spans: self.spans.clone(),
            len: self.len,
            store: None,
            stored: self.stored,
            stored_len: self.stored_len,
        }
    }
}
