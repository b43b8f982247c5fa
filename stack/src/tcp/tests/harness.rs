//! Helpers: hand-over snapshots near the 32-bit wrap, a scripted peer, and segment capture
//! through the wire code (every transmitted segment is emitted, checksummed, parsed back).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use mpa::seq::SeqNumber;

use crate::tcp::{Connection, HandoverState, TcpConfig, TsHandover};
use crate::wire::tcp::{SackBlock, TcpFlags, TcpOptions, TcpPacket, TcpRepr, TcpTimestamps};

pub(crate) const MSS: u16 = 1460;
/// Payload of a full segment with timestamps.
pub(crate) const SEG: usize = 1448;
pub(crate) const OUR_PORT: u16 = 7777;
pub(crate) const PEER_PORT: u16 = 40000;
pub(crate) const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub(crate) const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// Our RCV.NXT at hand-over: 2000 octets below the wrap.
pub(crate) const RCV0: u32 = u32::MAX - 1999;
/// Our SND.NXT at hand-over: 500 octets below the wrap.
pub(crate) const SND0: u32 = u32::MAX - 499;
pub(crate) const TSVAL_AT_FREEZE: u32 = 4_000_000_000;
pub(crate) const PEER_TS0: u32 = 0xffff_fff0;

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The stream octet at offset `i`: distinct enough to catch misplacement.
pub(crate) fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8 ^ (i as u8)
}

pub(crate) fn stream(off: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|k| pattern(off + k)).collect()
}

pub(crate) fn handover(t0: Instant, ts: bool) -> HandoverState {
    HandoverState {
        local_port: OUR_PORT,
        remote_port: PEER_PORT,
        snd_nxt: SeqNumber(SND0),
        rcv_nxt: SeqNumber(RCV0),
        snd_wnd: 64 * 1024,
        rcv_wnd: 64 * 1024,
        rcv_wup: SeqNumber(RCV0),
        snd_wscale: 7,
        rcv_wscale: 7,
        mss: MSS,
        sack_permitted: true,
        timestamps: ts.then_some(TsHandover {
            tsval_at_freeze: TSVAL_AT_FREEZE,
            freeze_instant: t0,
            ts_recent: PEER_TS0,
        }),
    }
}

pub(crate) fn conn(t0: Instant, ts: bool, cfg: &TcpConfig) -> Connection {
    Connection::new(&handover(t0, ts), cfg, t0).unwrap()
}

/// A segment as it went on the wire, parsed back.
#[derive(Debug, Clone)]
pub(crate) struct Seg {
    pub(crate) repr: TcpRepr,
    pub(crate) payload: Vec<u8>,
}

impl Seg {
    pub(crate) fn ack(&self) -> SeqNumber {
        self.repr.ack_number.expect("ACK set")
    }
    pub(crate) fn sack(&self) -> &[SackBlock] {
        self.repr.options.sack.as_slice()
    }
    /// The right edge of the window it offers (the handover's window scale, 7).
    pub(crate) fn right_edge(&self) -> SeqNumber {
        self.ack() + (u32::from(self.repr.window_len) << 7)
    }
    pub(crate) fn is_pure_ack(&self) -> bool {
        self.payload.is_empty() && self.repr.flags == TcpFlags::empty()
    }
}

/// Emits a transmit into wire octets with a valid IPv4 checksum, and checks that the octets
/// parse back to the same header.
pub(crate) fn to_wire(
    c: &mut Connection,
    now: Instant,
    src: Ipv4Addr,
    dst: Ipv4Addr,
) -> Option<Vec<u8>> {
    let mut buf = [0u8; 2048];
    let t = c.poll_transmit(now, &mut buf)?;
    let mut p = TcpPacket::new_checked(&mut buf[..t.len()]).unwrap();
    p.fill_checksum_v4(src, dst);
    assert!(p.verify_checksum_v4(src, dst));
    let back = TcpRepr::parse(&p).unwrap();
    assert_eq!(back, t.repr);
    assert_eq!(p.payload().len(), t.payload_len);
    Some(buf[..t.len()].to_vec())
}

pub(crate) fn parse(bytes: &[u8]) -> Seg {
    let p = TcpPacket::new_checked(bytes).unwrap();
    Seg {
        repr: TcpRepr::parse(&p).unwrap(),
        payload: p.payload().to_vec(),
    }
}

/// Everything the connection wants to send now.
pub(crate) fn drain_tx(c: &mut Connection, now: Instant) -> Vec<Seg> {
    let mut v = Vec::new();
    while let Some(b) = to_wire(c, now, OUR_IP, PEER_IP) {
        v.push(parse(&b));
        assert!(v.len() < 10_000, "poll_transmit never returns None");
    }
    v
}

/// The peer, scripted: it sends with its own sequence numbers (our RCV side) and timestamps.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    /// Sequence number of stream offset 0.
    pub(crate) base: SeqNumber,
    /// What it acknowledges (our send side).
    pub(crate) ack: SeqNumber,
    pub(crate) tsval: u32,
    pub(crate) tsecr: u32,
    pub(crate) ts: bool,
    pub(crate) wnd: u16,
}

impl Peer {
    pub(crate) fn new(ts: bool) -> Peer {
        Peer {
            base: SeqNumber(RCV0),
            ack: SeqNumber(SND0),
            tsval: PEER_TS0.wrapping_add(1),
            tsecr: TSVAL_AT_FREEZE,
            ts,
            wnd: 512, // << 7 = 64 KiB
        }
    }

    pub(crate) fn repr(&self, seq: SeqNumber, flags: TcpFlags) -> TcpRepr {
        TcpRepr {
            src_port: PEER_PORT,
            dst_port: OUR_PORT,
            seq_number: seq,
            ack_number: Some(self.ack),
            flags,
            window_len: self.wnd,
            urgent_at: 0,
            options: TcpOptions {
                timestamps: self.ts.then_some(TcpTimestamps {
                    tsval: self.tsval,
                    tsecr: self.tsecr,
                }),
                ..TcpOptions::default()
            },
        }
    }

    /// Stream octets `[off, off + len)` as a segment.
    pub(crate) fn data(&self, off: u64, len: usize) -> (TcpRepr, Vec<u8>) {
        (
            self.repr(self.base + off as u32, TcpFlags::PSH),
            stream(off, len),
        )
    }

    /// A pure ACK at stream offset `off` (the peer's SND.NXT).
    pub(crate) fn pure_ack(&self, off: u64) -> TcpRepr {
        self.repr(self.base + off as u32, TcpFlags::empty())
    }
}

/// Feeds one segment and consumes what it delivers; returns the outcome and the octets.
pub(crate) fn feed(
    c: &mut Connection,
    now: Instant,
    repr: &TcpRepr,
    payload: &[u8],
) -> (crate::tcp::SegmentOutcome, Vec<u8>) {
    let out = c.handle_segment(now, repr, payload);
    let mut got = payload[out.in_order.clone()].to_vec();
    if out.reassembled > 0 {
        let n = c.drain_reassembled(|s| got.extend_from_slice(s));
        assert_eq!(n, out.reassembled);
    }
    (out, got)
}
