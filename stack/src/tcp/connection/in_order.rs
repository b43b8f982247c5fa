//! In-order text the caller holds in pieces, taken by its lengths: a segment in several
//! receive descriptors, or consecutive segments of one burst taken in one update, as GRO
//! merges them (docs/architecture.md, "Runs of segments").

use std::time::Instant;

use super::*;

impl<S: SendSource> Connection<S> {
    /// As [`Connection::handle_segment`] for in-order text whose octets the caller holds in
    /// pieces: one segment (a frame in several receive descriptors), or consecutive segments
    /// of one burst taken together (`text.segments` > 1: headers equal but for the sequence
    /// number, docs/architecture.md, "Runs of segments"). [`SegmentOutcome::in_order`] says
    /// which of the octets were taken. `None`, with nothing changed, for text that starts
    /// beyond RCV.NXT (the reassembly store would need its octets in one piece), and for
    /// segments taken together unless handling them as one gives exactly what handling them
    /// one after the other would ([`Connection::takes_as_one`]): the caller then hands them
    /// over one by one.
    pub(crate) fn handle_segment_in_order(
        &mut self,
        now: Instant,
        repr: &TcpRepr,
        text: TextLengths,
    ) -> Option<SegmentOutcome> {
        if repr.seq_number > self.rcv_nxt {
            return None;
        }
        if text.segments > 1 && !self.takes_as_one(now, repr, text.octets) {
            return None;
        }
        let out = self.handle_segment_inner(now, repr, Text::Length(text), &mut |_, _, _| {});
        if text.segments > 1 {
            self.stats.segs_batched += u64::from(text.segments - 1);
        }
        if text.segments > 1 && self.state != State::Closed {
            // What the segments after the first do beyond adding their text: each updates the
            // send window (RFC 9293 §3.10.7.4, SND.WL1 < SEG.SEQ), and the last one's update
            // leaves what all of theirs would (their window and ACK fields are the first's).
            if let Some(ack) = repr.ack_number {
                let new_wnd = u32::from(repr.window_len) << self.snd_wscale;
                let last = repr.seq_number + text.last_at;
                self.update_send_window(last, ack, new_wnd, false);
            }
        }
        self.settle_budget(0);
        Some(out)
    }

    /// Whether `octets` of text in several segments, the first of them `repr` and the others
    /// equal to it but for their sequence numbers, can be handled as one segment with exactly
    /// the outcome of handling them one after the other: established, starting at RCV.NXT,
    /// no control bit but PSH, an acceptable ACK, a TSval PAWS lets through, all of it inside
    /// the advertised window, nothing held out of order and no ACK owed per segment (each of
    /// those changes how the next segment is handled).
    fn takes_as_one(&mut self, now: Instant, repr: &TcpRepr, octets: usize) -> bool {
        let Some(ack) = repr.ack_number else {
            return false;
        };
        let flags = repr.flags;
        let plain = !(flags.fin() || flags.syn() || flags.rst());
        let ack_ok = !(ack > self.snd_max || ack < self.snd_una + self.max_snd_wnd.wrapping_neg());
        let ts_ok = match (self.ts, repr.options.timestamps) {
            (None, _) => true,
            (Some(_), Some(t)) => !self.paws_rejects(t.tsval, now),
            (Some(_), None) => !self.cfg.require_timestamps,
        };
        plain
            && ack_ok
            && ts_ok
            && matches!(
                self.state,
                State::Established | State::FinWait1 | State::FinWait2
            )
            && repr.seq_number == self.rcv_nxt
            && octets > 0
            && octets <= self.rcv_wnd() as usize
            && self.store.is_empty()
            && self.peer_fin.is_none()
            && !self.ack_each
            && self.ooo_owed_end.is_none()
    }
}

/// A received segment's text as the receive path takes it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Text<'a> {
    /// Its octets, in one piece.
    Octets(&'a [u8]),
    /// Its lengths only: the caller holds the octets, and the text starts at or before
    /// RCV.NXT (in-order text never needs them here).
    Length(TextLengths),
}

impl Text<'_> {
    pub(super) fn len(&self) -> usize {
        match *self {
            Text::Octets(b) => b.len(),
            Text::Length(t) => t.octets,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Segments it came in.
    pub(super) fn segments(&self) -> u32 {
        match *self {
            Text::Octets(_) => 1,
            Text::Length(t) => t.segments,
        }
    }

    /// Octets of its longest segment.
    pub(super) fn largest(&self) -> usize {
        match *self {
            Text::Octets(b) => b.len(),
            Text::Length(t) => t.largest,
        }
    }
}

/// The lengths of in-order text whose octets the caller holds
/// ([`Connection::handle_segment_in_order`]): one segment's, or those of consecutive segments
/// taken as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TextLengths {
    /// Octets of all of them.
    pub(crate) octets: usize,
    /// Segments (at least 1).
    pub(crate) segments: u32,
    /// Octets of the longest.
    pub(crate) largest: usize,
    /// Where the last one starts: octets after the first one's start.
    pub(crate) last_at: usize,
}

impl TextLengths {
    /// One segment of `octets`.
    pub(crate) fn one(octets: usize) -> Self {
        TextLengths {
            octets,
            segments: 1,
            largest: octets,
            last_at: 0,
        }
    }

    /// Consecutive segments of these lengths, in order.
    pub(crate) fn of(lengths: impl Iterator<Item = usize>) -> Self {
        let mut t = TextLengths {
            octets: 0,
            segments: 0,
            largest: 0,
            last_at: 0,
        };
        for n in lengths {
            t.last_at = t.octets;
            t.octets += n;
            t.segments += 1;
            t.largest = t.largest.max(n);
        }
        t.segments = t.segments.max(1);
        t
    }
}
