//! The control protocol under arbitrary input (the `control` cargo-fuzz target and the
//! deterministic sweep in this crate's tests): whatever octets a client or a datapath sends,
//! decoding never panics, never allocates beyond one message's bound, and what decodes
//! re-encodes to an equal message.

use crate::clock_probe::ClockMessage;
use crate::region_ad::RegionAd;
use crate::ring::post::{decode_post, encode_post, POST_LEN};
use crate::ring::{decode_record, encode_record, RECORD_LEN};
use crate::{encode_message, read_message_counted, Message, MAX_MESSAGE};

/// Runs every decoder of the control protocol on `data`.
pub fn fuzz_control(data: &[u8]) {
    // A stream of frames, as a reader sees it: each message decodes, takes what its prefix
    // says, and round-trips.
    let mut r = std::io::Cursor::new(data);
    while let Ok((m, n)) = read_message_counted(&mut r) {
        assert!(n <= 4 + MAX_MESSAGE);
        round_trip(&m);
    }
    // A body alone.
    if let Ok(m) = serde_json::from_slice::<Message>(data) {
        round_trip(&m);
    }
    // A clock probe or answer.
    if let Ok(m) = ClockMessage::parse(data) {
        assert_eq!(&m.emit()[..], data);
    }
    // The region advertisement in a Reply's private data.
    if let Ok(Some(ad)) = RegionAd::parse(data) {
        assert_eq!(RegionAd::parse(&ad.emit()).ok().flatten(), Some(ad));
    }
    // A completion ring's slots.
    for slot in data.chunks_exact(RECORD_LEN) {
        let slot: &[u8; RECORD_LEN] = slot.try_into().expect("chunks_exact");
        if let Some((r, lost)) = decode_record(slot) {
            assert_eq!(decode_record(&encode_record(&r, lost)), Some((r, lost)));
        }
    }
    // A post queue's slots: what decodes is exactly what it re-encodes to.
    for slot in data.chunks_exact(POST_LEN) {
        let slot: &[u8; POST_LEN] = slot.try_into().expect("chunks_exact");
        if let Ok(p) = decode_post(slot) {
            assert_eq!(&encode_post(&p), slot);
        }
    }
}

fn round_trip(m: &Message) {
    if let Ok(frame) = encode_message(m) {
        let (again, n) = read_message_counted(&mut std::io::Cursor::new(&frame))
            .expect("an encoded message decodes");
        assert_eq!(n, frame.len());
        assert_eq!(&again, m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64: a fixed sequence, so that the sweep is the same every run.
    fn next(s: &mut u64) -> u64 {
        *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    #[test]
    fn mutated_frames_never_panic_and_valid_ones_round_trip() {
        let seeds: Vec<Vec<u8>> = [
            Message::Hello {
                version: 1,
                agent: "x".into(),
            },
            Message::GetStats {
                id: 7,
                flows_after: Some(3),
                max_flows: Some(2),
            },
            Message::Error {
                id: 1,
                code: crate::ErrorCode::Limit,
                message: "m".into(),
            },
        ]
        .iter()
        .map(|m| encode_message(m).unwrap())
        .collect();
        let mut s = 1u64;
        for i in 0..20_000 {
            let mut v = seeds[i % seeds.len()].clone();
            if i % 7 == 0 {
                v.extend_from_slice(&seeds[(i / 7) % seeds.len()]);
            }
            for _ in 0..(next(&mut s) % 4) {
                let at = (next(&mut s) as usize) % v.len();
                match next(&mut s) % 3 {
                    0 => v[at] ^= 1 << (next(&mut s) % 8),
                    1 => v.truncate(at.max(1)),
                    _ => v.insert(at, next(&mut s) as u8),
                }
            }
            fuzz_control(&v);
        }
        // Random octets, including lengths over the bound.
        for _ in 0..5_000 {
            let len = (next(&mut s) % 96) as usize;
            let v: Vec<u8> = (0..len).map(|_| next(&mut s) as u8).collect();
            fuzz_control(&v);
        }
        fuzz_control(&[0xff, 0xff, 0xff, 0xff, b'{']);
        fuzz_control(&[0u8; 80]);
    }
}
