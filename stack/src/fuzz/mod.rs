//! Flow-level fuzzing: arbitrary segment sequences into one connection's TCP and MPA receiver
//! (`flow::receive_segment`), placing into in-memory regions, on virtual time. Every octet is
//! hostile; the only acceptable outcomes are placement, a counted drop, or a Terminate. Called
//! by the `flow` cargo-fuzz target (`fuzz/`) and by a property test, so CI runs it too.
//!
//! Input: one octet of configuration (markers, CRC, aligned sender, Responder expecting an
//! RTR, whether half of the segments carry well-formed FPDUs, whether segments arrive in three
//! pieces as a frame in several receive descriptors, `flow::receive_pieces_in_run`, whether
//! each record is cut into three consecutive segments offered to the TCP as one batch,
//! `flow::receive_segments_in_run`), then records of
//! `kind u8 | offset u16 | len u16 | payload` (payload truncated to what is left). A segment's
//! sequence number is RCV.NXT − 1024 + offset, so duplicates, in-order, out-of-order and
//! out-of-window segments all occur; `kind` picks TCP flags, and whether the payload is taken
//! raw or wrapped as FPDUs of a Write or Send built from it.

#![forbid(unsafe_code)]

mod frame;
mod sender;
pub use frame::fuzz_frame;
#[cfg(test)]
pub(crate) use frame::{batch_segment, parsed_follower, refill_checksums};
pub use sender::fuzz_sender;

use crate::flow::{receive_pieces_in_run, receive_segment, receive_segments_in_run};
use crate::receiver::{MemRegions, MpaReceiver, PostedBuf, ReceiverConfig, RunOctets};
use crate::tcp::{Connection, Event, HandoverState, TcpConfig, TsHandover};
use crate::wire::tcp::{TcpFlags, TcpOptions, TcpRepr};
use mpa::encoder::FpduEncoder;
use mpa::seq::SeqNumber;
use mpa::startup::RtrSet;
use mpa::wire::ddp::{queue, DdpRepr, RdmapOpcode, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use mpa_ctl_proto::RegionInfo;
use std::time::{Duration, Instant};

const RCV0: u32 = u32::MAX - 5000;
const SND0: u32 = 7000;
const REGION: u32 = 0x11;
const REGION_LEN: u64 = 1 << 16;

/// A connection at (SND.NXT, RCV.NXT) = (`snd`, `rcv`) on ports 7777 ← 40000, windows of
/// 64 KiB scaled by 7, SACK on: what the fuzz harnesses start from.
fn handover(snd: u32, rcv: u32, mss: u16, timestamps: Option<TsHandover>) -> HandoverState {
    HandoverState {
        local_port: 7777,
        remote_port: 40000,
        snd_nxt: SeqNumber(snd),
        rcv_nxt: SeqNumber(rcv),
        snd_wnd: 1 << 16,
        rcv_wnd: 1 << 16,
        rcv_wup: SeqNumber(rcv),
        snd_wscale: 7,
        rcv_wscale: 7,
        mss,
        sack_permitted: true,
        timestamps,
    }
}

/// Runs one input; panics only on a broken invariant (which is the finding).
pub fn fuzz_flow(data: &[u8]) {
    fuzz_flow_counting(data);
}

/// [`fuzz_flow`], returning the completions it saw (for the harness's own test).
fn fuzz_flow_counting(data: &[u8]) -> u64 {
    let Some((&cfg, mut rest)) = data.split_first() else {
        return 0;
    };
    let markers = cfg & 1 != 0;
    let t0 = Instant::now();
    let state = handover(SND0, RCV0, 1460, None);
    let tcp_cfg = TcpConfig {
        rcv_buf: 1 << 18,
        reassembly_limit: 1 << 17,
        ..TcpConfig::default()
    };
    let Ok(mut tcp) = Connection::new(&state, &tcp_cfg, t0) else {
        return 0;
    };
    let mut rx = MpaReceiver::new(&ReceiverConfig {
        flow_id: 1,
        start: SeqNumber(RCV0),
        markers,
        crc: cfg & 2 != 0,
        aligned_sender: cfg & 4 != 0,
        ddp_rdmap_version: 1,
        pd: Some(1),
        expect_rtr: (cfg & 8 != 0).then_some(RtrSet::ALL),
        digest: true,
    });
    let mut regions = MemRegions::default();
    regions.insert(RegionInfo {
        stag: REGION,
        len: REGION_LEN,
        pd: 1,
        remote_write: true,
        remote_read: false,
        huge_pages: false,
    });
    let bufs: Vec<PostedBuf> = (0..64)
        .map(|i| PostedBuf {
            stag: REGION,
            offset: i * 1024,
            len: 1024,
            wr_id: 0,
        })
        .collect();
    rx.post_recv(&bufs).expect("64 buffers fit");
    let mut enc = FpduEncoder::new(markers);
    let mut now = t0;
    let mut frame = vec![0u8; 4096];
    let mut wire = Vec::new();
    let mut completions = 0u64;
    let mut msn = 1u32;
    while rest.len() >= 5 {
        let kind = rest[0];
        let offset = u32::from(u16::from_be_bytes([rest[1], rest[2]]));
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]) % 4096);
        rest = &rest[5..];
        let take = len.min(rest.len());
        let raw = &rest[..take];
        rest = &rest[take..];
        // Half the time (when asked), the octets become well-formed FPDUs: deeper paths.
        let payload: &[u8] = if cfg & 16 != 0 && kind & 1 != 0 {
            wire.clear();
            let mut h = [0u8; UNTAGGED_HEADER_LEN];
            let n = if kind & 2 != 0 {
                DdpRepr::Tagged {
                    last: true,
                    opcode: RdmapOpcode::RdmaWrite,
                    stag: REGION,
                    to: u64::from(offset) * 4,
                }
                .emit(&mut h, 1)
            } else {
                msn = msn.wrapping_add(u32::from(kind & 4 != 0));
                DdpRepr::Untagged {
                    last: kind & 8 == 0,
                    opcode: RdmapOpcode::Send,
                    inv_stag: 0,
                    qn: queue::SEND,
                    msn,
                    mo: 0,
                }
                .emit(&mut h, 1)
            };
            let n = n.unwrap_or(TAGGED_HEADER_LEN);
            let body = &raw[..raw.len().min(1400)];
            if enc.encode_parts(&[&h[..n], body], &mut wire).is_err() {
                continue;
            }
            &wire
        } else {
            raw
        };
        let mut flags = TcpFlags::empty();
        for (bit, f) in [
            (0x10, TcpFlags::FIN),
            (0x20, TcpFlags::PSH),
            (0x40, TcpFlags::RST),
            (0x80, TcpFlags::SYN),
        ] {
            if kind & bit != 0 && (bit != 0x40 || kind & 0x0f == 0x0f) {
                flags = flags.with(f);
            }
        }
        let seq = tcp.rcv_nxt() + offset.wrapping_sub(1024);
        let repr = TcpRepr {
            src_port: 40000,
            dst_port: 7777,
            seq_number: seq,
            ack_number: Some(tcp.snd_nxt()),
            flags,
            window_len: 512,
            urgent_at: 0,
            options: TcpOptions::default(),
        };
        now += Duration::from_micros(u64::from(kind) * 50);
        let batched = cfg & 64 != 0 && {
            // Three consecutive segments with this header but for their sequence numbers,
            // offered to the TCP as one batch (`flow::receive_segments_in_run`); refused, they
            // go one by one.
            let c1 = usize::from(kind) * 37 % (payload.len() + 1);
            let c2 = (c1 + (offset as usize >> 4)).min(payload.len());
            let segs = [&payload[..c1], &payload[c1..c2], &payload[c2..]];
            // Their CRCs as the parse pass gives them; with bit 0 of the kind one is wrong (it
            // can only make the decoder read the octets again).
            let mut crcs = segs.map(|s| Some(mpa::crc::crc32c(s)));
            if kind & 1 != 0 {
                crcs[usize::from(kind >> 1) % 3] = Some(u32::from(kind) << 7);
            }
            let mut run = RunOctets::new();
            let taken = receive_segments_in_run(
                &mut tcp,
                &mut rx,
                now,
                &repr,
                (&segs, &crcs),
                &mut run,
                &mut regions,
            );
            rx.handle_in_order_run(&run, &mut regions);
            if taken.is_none() {
                let mut r = repr;
                for s in segs {
                    receive_segment(&mut tcp, &mut rx, now, &r, s, &mut regions);
                    r.seq_number = r.seq_number + s.len();
                }
            }
            true
        };
        let in_pieces = !batched && cfg & 32 != 0 && {
            // Cut where the record says; a piece may be empty.
            let c1 = usize::from(kind) * 37 % (payload.len() + 1);
            let c2 = (c1 + (offset as usize >> 4)).min(payload.len());
            let pieces = [&payload[..c1], &payload[c1..c2], &payload[c2..]];
            // Their CRCs, one of them wrong with bit 1 of the kind.
            let mut crcs = pieces.map(|p| Some(mpa::crc::crc32c(p)));
            if kind & 2 != 0 {
                crcs[usize::from(kind >> 2) % 3] = Some(u32::from(kind) << 9);
            }
            let mut run = RunOctets::new();
            let taken = receive_pieces_in_run(
                &mut tcp,
                &mut rx,
                now,
                &repr,
                (pieces.into_iter(), &crcs[..]),
                &mut run,
                &mut regions,
            );
            rx.handle_in_order_run(&run, &mut regions);
            taken.is_some()
        };
        if !in_pieces && !batched {
            receive_segment(&mut tcp, &mut rx, now, &repr, payload, &mut regions);
        }
        while let Some(c) = rx.poll_completion() {
            completions += 1;
            // A zero-length Write's TO is not checked (RFC 5041 §5.3): it may point anywhere.
            assert!(
                c.len == 0 || c.offset + c.len <= REGION_LEN,
                "completion beyond the region"
            );
        }
        let _ = rx.poll_reply();
        let _ = rx.poll_terminate();
        tcp.end_of_burst(now);
        while let Some(t) = tcp.poll_transmit(now, &mut frame) {
            assert!(t.header_len + t.payload_len <= frame.len());
        }
        while tcp.poll_event().is_some_and(|e| e != Event::Closed) {}
        if tcp.poll_timeout().is_some_and(|t| t <= now) {
            tcp.handle_timeout(now);
        }
    }
    assert_eq!(rx.stats().completions, completions);
    completions
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    /// The harness reaches placement: in-order well-formed Writes (kind 3 at offset 1024,
    /// i.e. RCV.NXT) complete.
    #[test]
    fn well_formed_in_order_writes_complete() {
        let mut d = vec![16 | 2 | 1];
        for _ in 0..10 {
            d.extend_from_slice(&[3, 0x04, 0x00, 0, 100]);
            d.extend_from_slice(&[7u8; 100]);
        }
        assert_eq!(super::fuzz_flow_counting(&d), 10);
        // The same segments each in three pieces: the same completions.
        d[0] |= 32;
        assert_eq!(super::fuzz_flow_counting(&d), 10);
    }

    /// A zero-length Write whose STag and TO are not the region's completes: RFC 5041 §5.3
    /// forbids checking them ("MUST NOT be checked for a zero-length Tagged DDP Message").
    /// Here an aligned sender's out-of-order Write arrives cut in three segments, and a later
    /// one's start, parsed as an FPDU (as an aligned sender's segments are), is a zero-length
    /// Write whose TO lies far beyond the region.
    #[test]
    fn a_zero_length_write_completes_wherever_its_to_points() {
        let d: [u8; 32] = [
            0xf4, 0x63, 0x04, 0x04, 0x00, 0x00, 0x33, 0xf9, 0x12, 0x00, 0x00, 0x17, 0x04, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00, 0x00, 0x33, 0x04, 0x00,
            0x00, 0x00, 0xff, 0x00,
        ];
        assert_eq!(super::fuzz_flow_counting(&d), 1);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Any segment sequence: no panic, no placement outside the region, counters agree.
        #[test]
        fn arbitrary_segments_never_break_the_flow(data in proptest::collection::vec(any::<u8>(), 0..6000)) {
            super::fuzz_flow(&data);
        }

        /// The same with most segments carrying well-formed FPDUs (deeper paths).
        #[test]
        fn well_formed_fpdus_in_any_order(cfg in any::<u8>(), data in proptest::collection::vec(any::<u8>(), 0..6000)) {
            let mut d = vec![cfg | 16];
            d.extend(data);
            super::fuzz_flow(&d);
        }
    }
}
