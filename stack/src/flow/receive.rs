//! One received segment through a flow's TCP and MPA receiver: at once, or kept in a run of
//! the burst (whole, in pieces, or in a batch of segments) and decoded with it
//! (docs/architecture.md, "Runs of segments").

use crate::receiver::{InOrderSource, MpaReceiver, Regions, RunOctets};
use crate::tcp::{Connection, SegmentOutcome, SendSource, TextLengths};
use crate::wire::frame::octets_in;
use crate::wire::tcp::TcpRepr;
use std::time::Instant;

/// One received TCP segment through the TCP and the MPA receiver: out-of-order octets go
/// to [`MpaReceiver::handle_segment_ahead`] (when it can locate FPDUs), in-order octets and
/// those that became in order to [`MpaReceiver::handle_in_order`]. The one composition of the
/// two, used by [`Flow`] and by the in-memory harnesses.
pub(crate) fn receive_segment<S: SendSource, R: Regions + ?Sized>(
    tcp: &mut Connection<S>,
    rx: &mut MpaReceiver,
    now: Instant,
    repr: &TcpRepr,
    payload: &[u8],
    regions: &mut R,
) -> SegmentOutcome {
    let out = tcp_segment(tcp, rx, now, repr, (payload, None), regions, |_, _| {});
    if let Some(b) = payload.get(out.in_order.clone()) {
        rx.handle_in_order(b, InOrderSource::Segment, regions);
    }
    if out.reassembled > 0 {
        tcp.drain_reassembled(|b| rx.handle_in_order(b, InOrderSource::Store, regions));
    }
    out
}

/// [`receive_segment`] for a segment that stays in hand until `run` is ended: its in-order
/// payload joins `run` (with `payload_crc`, the CRC32c of the whole payload if known, when
/// all of it is in order), decoded later with the rest of the run
/// ([`MpaReceiver::handle_in_order_run`]). Anything that must see the stream up to this point
/// first (an out-of-order segment placed ahead, octets drained from the reassembly store)
/// ends the run before it.
pub(crate) fn receive_segment_in_run<'f, S: SendSource, R: Regions + ?Sized>(
    tcp: &mut Connection<S>,
    rx: &mut MpaReceiver,
    now: Instant,
    repr: &TcpRepr,
    (payload, payload_crc): (&'f [u8], Option<u32>),
    run: &mut RunOctets<'f>,
    regions: &mut R,
) -> SegmentOutcome {
    let out = tcp_segment(
        tcp,
        rx,
        now,
        repr,
        (payload, payload_crc),
        regions,
        |rx, regions| end_run(rx, regions, run),
    );
    if let Some(b) = payload.get(out.in_order.clone()) {
        let whole = b.len() == payload.len();
        run.push(b, payload_crc.filter(|_| whole));
    }
    if out.reassembled > 0 {
        drain_after_run(tcp, rx, run, regions);
    }
    out
}

/// [`receive_segment_in_run`] for a segment whose payload lies in pieces (a frame in several
/// receive descriptors): `pieces`, one after the other, and `crcs[i]`, if known, the CRC32c
/// of piece `i`. Its in-order octets join `run` piece by piece. `None`, with nothing changed,
/// for a segment that starts beyond RCV.NXT (out of order: the reassembly store and the
/// placement ahead take octets in one piece).
pub(crate) fn receive_pieces_in_run<'f, S: SendSource, R: Regions + ?Sized>(
    tcp: &mut Connection<S>,
    rx: &mut MpaReceiver,
    now: Instant,
    repr: &TcpRepr,
    (pieces, crcs): (impl Iterator<Item = &'f [u8]> + Clone, &[Option<u32>]),
    run: &mut RunOctets<'f>,
    regions: &mut R,
) -> Option<SegmentOutcome> {
    let text = TextLengths::one(pieces.clone().map(<[u8]>::len).sum());
    receive_text_in_run(tcp, rx, now, repr, (pieces, text, crcs), run, regions)
}

/// [`receive_segment_in_run`] for consecutive segments whose headers are equal but for their
/// sequence numbers, each starting where the one before ends: `repr` is the first one's,
/// `payloads` theirs (`crcs[i]` the CRC32c of `payloads[i]` if known). The TCP takes them as
/// one segment (as GRO merges them), and their octets join `run`. `None`, with nothing
/// changed, unless that gives exactly what taking them one by one would
/// (`Connection::handle_segment_in_order`): the caller then does.
pub(crate) fn receive_segments_in_run<'f, S: SendSource, R: Regions + ?Sized>(
    tcp: &mut Connection<S>,
    rx: &mut MpaReceiver,
    now: Instant,
    repr: &TcpRepr,
    (payloads, crcs): (&[&'f [u8]], &[Option<u32>]),
    run: &mut RunOctets<'f>,
    regions: &mut R,
) -> Option<SegmentOutcome> {
    let text = TextLengths::of(payloads.iter().map(|p| p.len()));
    let pieces = payloads.iter().copied();
    receive_text_in_run(tcp, rx, now, repr, (pieces, text, crcs), run, regions)
}

/// In-order text in `pieces` of the given lengths through the TCP, its octets into `run`;
/// `crcs[i]`, if known, the CRC32c of piece `i` (kept when the piece is in order whole).
fn receive_text_in_run<'f, S: SendSource, R: Regions + ?Sized>(
    tcp: &mut Connection<S>,
    rx: &mut MpaReceiver,
    now: Instant,
    repr: &TcpRepr,
    (pieces, text, crcs): (
        impl Iterator<Item = &'f [u8]> + Clone,
        TextLengths,
        &[Option<u32>],
    ),
    run: &mut RunOctets<'f>,
    regions: &mut R,
) -> Option<SegmentOutcome> {
    let out = tcp.handle_segment_in_order(now, repr, text)?;
    read_responses_acked(tcp, rx, regions, |rx, regions| end_run(rx, regions, run));
    if out.in_order == (0..text.octets) {
        for (i, p) in pieces.enumerate() {
            run.push(p, crcs.get(i).copied().flatten());
        }
    } else {
        for p in octets_in(pieces, out.in_order.clone()) {
            run.push(p, None);
        }
    }
    if out.reassembled > 0 {
        drain_after_run(tcp, rx, run, regions);
    }
    Some(out)
}

/// Decodes what `run` holds, if anything, and empties it.
fn end_run<R: Regions + ?Sized>(rx: &mut MpaReceiver, regions: &mut R, run: &mut RunOctets<'_>) {
    if !run.is_empty() {
        rx.handle_in_order_run(run, regions);
        run.clear();
    }
}

/// Octets the reassembly store made in order, after the run (which comes before them in the
/// stream).
fn drain_after_run<S: SendSource, R: Regions + ?Sized>(
    tcp: &mut Connection<S>,
    rx: &mut MpaReceiver,
    run: &mut RunOctets<'_>,
    regions: &mut R,
) {
    end_run(rx, regions, run);
    tcp.drain_reassembled(|b| rx.handle_in_order(b, InOrderSource::Store, regions));
}

/// The TCP's part of a segment: out-of-order octets to
/// [`MpaReceiver::handle_segment_ahead`] (with `payload_crc`, the CRC32c of the whole payload
/// if known, when they are all of it); then the Read Responses the segment acknowledged.
/// `earlier` (ending a run) decodes the in-order octets of the segments before it first,
/// before either.
fn tcp_segment<S: SendSource, R: Regions + ?Sized>(
    tcp: &mut Connection<S>,
    rx: &mut MpaReceiver,
    now: Instant,
    repr: &TcpRepr,
    (payload, payload_crc): (&[u8], Option<u32>),
    regions: &mut R,
    mut earlier: impl FnMut(&mut MpaReceiver, &mut R),
) -> SegmentOutcome {
    let out = if rx.wants_segments_ahead() {
        tcp.handle_segment_placing(now, repr, payload, &mut |seq, data, spans| {
            earlier(rx, regions);
            let whole = std::ptr::eq(data, payload);
            rx.handle_segment_ahead(seq, (data, payload_crc.filter(|_| whole)), spans, regions)
        })
    } else {
        tcp.handle_segment(now, repr, payload)
    };
    read_responses_acked(tcp, rx, regions, earlier);
    out
}

/// The Read Responses a segment acknowledged, counted as served. The segment's ACK counts
/// before its octets: a peer whose Read Response arrived whole may send its next Read Request
/// in the very segment that acknowledges it (RFC 793's order: the ACK field, then the text).
/// It counts after the octets of the segments before it, though: `earlier` first decodes
/// those a run still holds, so that an ACK the peer sent after a Read Request never makes room
/// for that request under the IRD (RFC 5040 §6.1).
fn read_responses_acked<S: SendSource, R: Regions + ?Sized>(
    tcp: &mut Connection<S>,
    rx: &mut MpaReceiver,
    regions: &mut R,
    earlier: impl FnOnce(&mut MpaReceiver, &mut R),
) {
    let served = tcp.source_mut().take_acked_read_responses();
    if served > 0 {
        earlier(rx, regions);
        rx.reads_served(served);
    }
}
