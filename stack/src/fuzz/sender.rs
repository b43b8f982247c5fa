//! Sender-side fuzzing: a connection sending RDMA Writes and Sends from a region
//! ([`crate::sender::FpduSource`]) gets arbitrary ACKs from a hostile peer — any
//! acknowledgment number around its send window, any window, up to four SACK blocks with any
//! edges (inside, outside, reversed, overlapping), timestamps or none, RST/SYN/FIN flags — on
//! virtual time that jumps forward (RTOs, persist, pacing). Every octet of those ACKs is
//! network input. Acceptable: segments sent, counted drops, a reset; never a panic, a
//! segment that is not whole FPDUs (while the window allows one), unbounded state, or a
//! completion for a message the peer did not acknowledge.
//!
//! Input: one octet of configuration (markers, timestamps, NewReno instead of CUBIC, a
//! small EMSS), then records of `kind u8 | ack u16 | win u16 | sack [4 × (u16, u16)] | time
//! u8` (22 octets). `ack` is SND.UNA − 4096 + ack; SACK edges are SND.UNA − 4096 + edge.

#![forbid(unsafe_code)]

use crate::receiver::{MemRegions, Regions};
use crate::sender::{FpduSource, SenderConfig};
use crate::tcp::{CongestionControl, Connection, Event, TcpConfig, TsHandover};
use crate::wire::tcp::{SackBlock, TcpFlags, TcpOptions, TcpRepr, TcpTimestamps};
use mpa_ctl_proto::RegionInfo;
use std::time::{Duration, Instant};

const SND0: u32 = u32::MAX - 20_000;
const RCV0: u32 = 5000;
const SRC: u32 = 0x21;
const SRC_LEN: u64 = 1 << 18;
const RECORD: usize = 22;

/// Runs one input; panics only on a broken invariant (which is the finding).
pub fn fuzz_sender(data: &[u8]) {
    fuzz_sender_counting(data);
}

/// [`fuzz_sender`], returning how many messages completed (for the harness's own test).
fn fuzz_sender_counting(data: &[u8]) -> u64 {
    let Some((&cfg, mut rest)) = data.split_first() else {
        return 0;
    };
    let markers = cfg & 1 != 0;
    let timestamps = cfg & 2 != 0;
    let t0 = Instant::now();
    let mss = if cfg & 8 != 0 { 536 } else { 1460 };
    let ts = timestamps.then_some(TsHandover {
        tsval_at_freeze: 50_000,
        freeze_instant: t0,
        ts_recent: 100,
    });
    let state = super::handover(SND0, RCV0, mss, ts);
    let tcp_cfg = TcpConfig {
        snd_buf: 1 << 18,
        congestion_control: if cfg & 4 != 0 {
            CongestionControl::NewReno
        } else {
            CongestionControl::Cubic
        },
        ..TcpConfig::default()
    };
    let mut regions = MemRegions::default();
    regions.insert(RegionInfo {
        stag: SRC,
        len: SRC_LEN,
        pd: 1,
        remote_write: false,
        remote_read: false,
        huge_pages: false,
    });
    let pattern: Vec<u8> = (0..SRC_LEN as usize).map(|i| (i * 7 + 3) as u8).collect();
    assert!(regions.write(SRC, 0, &pattern));
    let emss = usize::from(state.mss) - if timestamps { 12 } else { 0 };
    let Ok(mut src) = FpduSource::new(SenderConfig::new(emss, markers), regions) else {
        return 0;
    };
    // A mix of sizes, Writes and Sends: 0, 1, a segment and a bit, 64 KiB.
    let mut posted = 0u64;
    for (i, len) in [1u64, 1500, 65536, 0, 4096, 3000, 20_000]
        .iter()
        .enumerate()
    {
        let ok = if i % 2 == 0 {
            src.post_write(SRC, 100 * i as u64, *len, 0x99, 1000 * i as u64)
                .is_ok()
        } else {
            src.post_send(SRC, 100 * i as u64, *len).is_ok()
        };
        posted += u64::from(ok);
    }
    let Ok(mut tcp) = Connection::with_source(&state, &tcp_cfg, t0, src) else {
        return 0;
    };
    let mut now = t0;
    let mut frame = vec![0u8; 2048];
    let mut completed = 0u64;
    let mut tsval = 1000u32;
    while rest.len() >= RECORD {
        let (r, tail) = rest.split_at(RECORD);
        rest = tail;
        let u16_at = |i: usize| u32::from(u16::from_be_bytes([r[i], r[i + 1]]));
        let kind = r[0];
        let base = tcp.snd_una() + 0u32.wrapping_sub(4096);
        let mut options = TcpOptions::default();
        for b in 0..usize::from(kind & 3) + usize::from(kind & 4 != 0) {
            let left = base + u16_at(5 + 4 * b) * 2;
            let right = base + u16_at(7 + 4 * b) * 2;
            options.sack.push(SackBlock { left, right });
        }
        if timestamps && kind & 8 == 0 {
            tsval = tsval.wrapping_add(u32::from(r[21]));
            options.timestamps = Some(TcpTimestamps {
                tsval,
                tsecr: tcp.tsval(now).unwrap_or(0),
            });
        }
        let mut flags = TcpFlags::empty();
        if kind & 0xf0 == 0xf0 {
            flags = flags.with(TcpFlags::RST);
        } else if kind & 0xf0 == 0xe0 {
            flags = flags.with(TcpFlags::SYN);
        } else if kind & 0xf0 == 0xd0 {
            flags = flags.with(TcpFlags::FIN);
        }
        let repr = TcpRepr {
            src_port: 40000,
            dst_port: 7777,
            seq_number: tcp.rcv_nxt(),
            ack_number: (kind & 0x10 == 0 || kind & 0x20 != 0).then(|| base + u16_at(1) * 4),
            flags,
            window_len: u16_at(3) as u16,
            urgent_at: 0,
            options,
        };
        let una_before = tcp.snd_una();
        let _ = tcp.handle_segment(now, &repr, &[]);
        assert!(
            una_before <= tcp.snd_una() && tcp.snd_una() <= tcp.snd_nxt(),
            "SND.UNA went back or past SND.NXT"
        );
        while let Some(c) = tcp.source_mut().poll_completion() {
            completed += 1;
            assert!(completed <= posted, "more completions than messages: {c:?}");
        }
        now += Duration::from_micros(u64::from(r[21]) * 97);
        if tcp.poll_timeout().is_some_and(|t| t <= now) {
            tcp.handle_timeout(now);
        }
        tcp.end_of_burst(now);
        let mut sent = 0;
        while let Some(t) = tcp.poll_transmit(now, &mut frame) {
            assert!(t.header_len + t.payload_len <= frame.len());
            assert!(t.payload_len <= emss, "segment above the EMSS");
            sent += 1;
            assert!(sent <= 1024, "poll_transmit does not stop");
        }
        while tcp.poll_event().is_some_and(|e| e != Event::Closed) {}
    }
    // Nothing acknowledged beyond what was sent, nothing completed twice.
    assert!(tcp.source().stats().completed <= posted);
    completed
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    /// The harness reaches completions: honest cumulative ACKs that advance by whole
    /// segments' worth complete the messages.
    #[test]
    fn honest_acks_complete_messages() {
        let mut d = vec![0u8];
        // ack = SND.UNA − 4096 + 4·ack: 4096/4 + 1024·k moves SND.UNA by 4096 each time.
        for _ in 0..200 {
            let mut r = [0u8; super::RECORD];
            r[0] = 0; // ACK, no SACK, no flags
            r[1..3].copy_from_slice(&(1024u16 + 365).to_be_bytes());
            r[3..5].copy_from_slice(&4096u16.to_be_bytes());
            r[21] = 30;
            d.extend_from_slice(&r);
        }
        assert!(super::fuzz_sender_counting(&d) > 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Arbitrary ACK sequences: no panic, no broken invariant.
        #[test]
        fn arbitrary_acks_never_break_the_sender(data in proptest::collection::vec(any::<u8>(), 0..4000)) {
            super::fuzz_sender(&data);
        }
    }
}
