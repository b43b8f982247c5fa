//! Clock probes: how `mpa-bench lat` learns the offset between its host's CLOCK_MONOTONIC and
//! a peer host's, NTP-style, over UDP (docs/latency.md, "Two hosts").
//!
//! The bench sends probes; the responder on the peer host (`mpa-peer clock`) answers each
//! with its own CLOCK_MONOTONIC time when the probe arrived and when it answered. A keepalive
//! only tells the responder that its client is still there. Like [`crate::region_ad`] this is
//! an mpa-xdp convention shared by the programs of a benchmark, not part of any RFC.
//!
//! # Format
//!
//! Every message is exactly 40 octets, probes and answers alike (so that both directions
//! carry frames of one size and take the same time on the wire). All integers big-endian.
//!
//! ```text
//! octets 0..4    magic "MPCK" (4d 50 43 4b)
//!        4       version = 1
//!        5       kind: 1 probe, 2 answer, 3 keepalive
//!        6..8    reserved: 0
//!        8..16   nonce (u64): the client's, echoed by the answer
//!       16..20   sequence number (u32): the probe's, echoed by the answer
//!       20..24   reserved: 0
//!       24..32   answer: the responder's CLOCK_MONOTONIC (ns) when the probe arrived; else 0
//!       32..40   answer: the responder's CLOCK_MONOTONIC (ns) when it answered; else 0
//! ```
//!
//! [`ClockMessage::parse`] refuses everything else: another length, magic, version or kind,
//! reserved octets that are not 0, a probe or keepalive that carries times, and an answer
//! whose answering time is before its arrival time. A responder answers only probes, never
//! answers, so two responders cannot keep each other busy, and its answer is no larger than
//! the probe.

/// The first four octets of every message.
pub const MAGIC: [u8; 4] = *b"MPCK";
/// The version this module reads and writes.
pub const VERSION: u8 = 1;
/// Octets in every message.
pub const LEN: usize = 40;

const KIND_PROBE: u8 = 1;
const KIND_ANSWER: u8 = 2;
const KIND_KEEPALIVE: u8 = 3;

mod field {
    use std::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION: usize = 4;
    pub const KIND: usize = 5;
    pub const RESERVED1: Range<usize> = 6..8;
    pub const NONCE: Range<usize> = 8..16;
    pub const SEQ: Range<usize> = 16..20;
    pub const RESERVED2: Range<usize> = 20..24;
    pub const RECEIVED: Range<usize> = 24..32;
    pub const ANSWERED: Range<usize> = 32..40;
}

/// One clock message (see the [module documentation](self) for the format).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClockMessage {
    /// The client asks for the responder's time.
    Probe {
        /// The client's nonce.
        nonce: u64,
        /// The probe's number.
        seq: u32,
    },
    /// The responder's times for one probe, in its CLOCK_MONOTONIC ns.
    Answer {
        /// The probe's nonce.
        nonce: u64,
        /// The probe's number.
        seq: u32,
        /// When the probe arrived.
        received: u64,
        /// When the answer left (not before `received`).
        answered: u64,
    },
    /// The client is still there; not answered.
    Keepalive {
        /// The client's nonce.
        nonce: u64,
    },
}

/// Why octets are not a clock message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClockProbeError {
    /// Not exactly 40 octets.
    #[error("clock message of {have} octets, expected 40")]
    Length {
        /// Octets received.
        have: usize,
    },
    /// Another magic.
    #[error("not a clock message (no \"MPCK\" magic)")]
    Magic,
    /// A version other than 1.
    #[error("clock message version {0}, expected 1")]
    Version(u8),
    /// A kind other than 1, 2 and 3.
    #[error("clock message of unknown kind {0}")]
    Kind(u8),
    /// Reserved octets that are not 0.
    #[error("clock message with reserved octets set")]
    Reserved,
    /// A probe or keepalive carrying times.
    #[error("clock probe or keepalive carrying times")]
    TimesInProbe,
    /// An answer that left before its probe arrived.
    #[error("clock answer sent at {answered} ns, before its probe arrived at {received} ns")]
    Backwards {
        /// The arrival time it gave.
        received: u64,
        /// The answering time it gave.
        answered: u64,
    },
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

impl ClockMessage {
    /// Reads one message: exactly [`LEN`] octets of a valid version-1 message.
    pub fn parse(b: &[u8]) -> Result<ClockMessage, ClockProbeError> {
        if b.len() != LEN {
            return Err(ClockProbeError::Length { have: b.len() });
        }
        // From here on every field lies inside `b`.
        if b[field::MAGIC] != MAGIC {
            return Err(ClockProbeError::Magic);
        }
        if b[field::VERSION] != VERSION {
            return Err(ClockProbeError::Version(b[field::VERSION]));
        }
        if b[field::RESERVED1]
            .iter()
            .chain(&b[field::RESERVED2])
            .any(|&x| x != 0)
        {
            return Err(ClockProbeError::Reserved);
        }
        let nonce = be64(&b[field::NONCE]);
        let seq = be32(&b[field::SEQ]);
        let (received, answered) = (be64(&b[field::RECEIVED]), be64(&b[field::ANSWERED]));
        match b[field::KIND] {
            KIND_ANSWER if answered < received => {
                Err(ClockProbeError::Backwards { received, answered })
            }
            KIND_ANSWER => Ok(ClockMessage::Answer {
                nonce,
                seq,
                received,
                answered,
            }),
            KIND_PROBE | KIND_KEEPALIVE if received != 0 || answered != 0 => {
                Err(ClockProbeError::TimesInProbe)
            }
            KIND_PROBE => Ok(ClockMessage::Probe { nonce, seq }),
            KIND_KEEPALIVE if seq != 0 => Err(ClockProbeError::Reserved),
            KIND_KEEPALIVE => Ok(ClockMessage::Keepalive { nonce }),
            k => Err(ClockProbeError::Kind(k)),
        }
    }

    /// The message's 40 octets, fields written as they are.
    pub fn emit(&self) -> [u8; LEN] {
        let (kind, nonce, seq, received, answered) = match *self {
            ClockMessage::Probe { nonce, seq } => (KIND_PROBE, nonce, seq, 0, 0),
            ClockMessage::Answer {
                nonce,
                seq,
                received,
                answered,
            } => (KIND_ANSWER, nonce, seq, received, answered),
            ClockMessage::Keepalive { nonce } => (KIND_KEEPALIVE, nonce, 0, 0, 0),
        };
        let mut b = [0u8; LEN];
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::VERSION] = VERSION;
        b[field::KIND] = kind;
        b[field::NONCE].copy_from_slice(&nonce.to_be_bytes());
        b[field::SEQ].copy_from_slice(&seq.to_be_bytes());
        b[field::RECEIVED].copy_from_slice(&received.to_be_bytes());
        b[field::ANSWERED].copy_from_slice(&answered.to_be_bytes());
        b
    }

    /// The answer to this message if it is a probe, with the responder's arrival and
    /// answering times (`None` for a keepalive or an answer: those are never answered).
    pub fn answer(&self, received: u64, answered: u64) -> Option<ClockMessage> {
        match *self {
            ClockMessage::Probe { nonce, seq } => Some(ClockMessage::Answer {
                nonce,
                seq,
                received,
                answered: answered.max(received),
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ANSWER: ClockMessage = ClockMessage::Answer {
        nonce: 0x0102_0304_0506_0708,
        seq: 0x0a0b_0c0d,
        received: 0x1000,
        answered: 0x1234,
    };

    const ANSWER_OCTETS: [u8; LEN] = [
        b'M', b'P', b'C', b'K', 1, 2, 0, 0, //
        1, 2, 3, 4, 5, 6, 7, 8, //
        0x0a, 0x0b, 0x0c, 0x0d, 0, 0, 0, 0, //
        0, 0, 0, 0, 0, 0, 0x10, 0, //
        0, 0, 0, 0, 0, 0, 0x12, 0x34,
    ];

    #[test]
    fn emit_and_parse_the_documented_layout() {
        assert_eq!(ANSWER.emit(), ANSWER_OCTETS);
        assert_eq!(ClockMessage::parse(&ANSWER_OCTETS), Ok(ANSWER));
        let probe = ClockMessage::Probe {
            nonce: 0x0102_0304_0506_0708,
            seq: 0x0a0b_0c0d,
        };
        let mut octets = ANSWER_OCTETS;
        octets[5] = 1;
        octets[24..].fill(0);
        assert_eq!(probe.emit(), octets);
        assert_eq!(ClockMessage::parse(&octets), Ok(probe));
        let keepalive = ClockMessage::Keepalive { nonce: 7 };
        let k = keepalive.emit();
        assert_eq!(
            (k[5], &k[8..16], &k[16..]),
            (3, &[0, 0, 0, 0, 0, 0, 0, 7][..], &[0u8; 24][..])
        );
        assert_eq!(ClockMessage::parse(&k), Ok(keepalive));
    }

    #[test]
    fn a_probe_is_answered_with_its_nonce_and_number() {
        let probe = ClockMessage::Probe { nonce: 9, seq: 3 };
        assert_eq!(
            probe.answer(100, 150),
            Some(ClockMessage::Answer {
                nonce: 9,
                seq: 3,
                received: 100,
                answered: 150
            })
        );
        // A clock read twice never makes an answer that parses as backwards.
        let a = probe.answer(100, 90).unwrap();
        assert_eq!(ClockMessage::parse(&a.emit()), Ok(a));
        assert_eq!(ANSWER.answer(1, 2), None);
        assert_eq!(ClockMessage::Keepalive { nonce: 9 }.answer(1, 2), None);
    }

    #[test]
    fn malformed_messages_are_errors() {
        assert_eq!(
            ClockMessage::parse(&[]),
            Err(ClockProbeError::Length { have: 0 })
        );
        assert_eq!(
            ClockMessage::parse(&ANSWER_OCTETS[..39]),
            Err(ClockProbeError::Length { have: 39 })
        );
        let mut long = ANSWER_OCTETS.to_vec();
        long.push(0);
        assert_eq!(
            ClockMessage::parse(&long),
            Err(ClockProbeError::Length { have: 41 })
        );
        let with = |i: usize, v: u8| {
            let mut b = ANSWER_OCTETS;
            b[i] = v;
            ClockMessage::parse(&b)
        };
        assert_eq!(with(0, b'm'), Err(ClockProbeError::Magic));
        assert_eq!(with(4, 2), Err(ClockProbeError::Version(2)));
        assert_eq!(with(4, 0), Err(ClockProbeError::Version(0)));
        assert_eq!(with(5, 0), Err(ClockProbeError::Kind(0)));
        assert_eq!(with(5, 4), Err(ClockProbeError::Kind(4)));
        for i in [6, 7, 20, 23] {
            assert_eq!(with(i, 1), Err(ClockProbeError::Reserved), "octet {i}");
        }
        // Times in a probe or keepalive; a keepalive with a number.
        assert_eq!(with(5, 1), Err(ClockProbeError::TimesInProbe));
        assert_eq!(with(5, 3), Err(ClockProbeError::TimesInProbe));
        let mut k = ClockMessage::Keepalive { nonce: 1 }.emit();
        k[19] = 1;
        assert_eq!(ClockMessage::parse(&k), Err(ClockProbeError::Reserved));
        // An answer that left before it arrived.
        assert_eq!(
            with(30, 0x13),
            Err(ClockProbeError::Backwards {
                received: 0x1300,
                answered: 0x1234
            })
        );
    }

    #[test]
    fn errors_read_well() {
        assert_eq!(
            ClockProbeError::Length { have: 41 }.to_string(),
            "clock message of 41 octets, expected 40"
        );
        assert_eq!(
            ClockProbeError::Kind(9).to_string(),
            "clock message of unknown kind 9"
        );
    }

    fn message() -> impl Strategy<Value = ClockMessage> {
        prop_oneof![
            (any::<u64>(), any::<u32>())
                .prop_map(|(nonce, seq)| ClockMessage::Probe { nonce, seq }),
            any::<u64>().prop_map(|nonce| ClockMessage::Keepalive { nonce }),
            (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
                |(nonce, seq, a, b)| ClockMessage::Answer {
                    nonce,
                    seq,
                    received: a.min(b),
                    answered: a.max(b),
                }
            ),
        ]
    }

    proptest! {
        #[test]
        fn round_trip(m in message()) {
            prop_assert_eq!(ClockMessage::parse(&m.emit()), Ok(m));
        }

        /// Near-messages (the magic and version right, every other field drawn, reserved
        /// octets mostly 0): what parses re-emits as exactly the octets it came from.
        #[test]
        fn what_parses_emits_the_same_octets(
            kind in 0u8..5,
            reserved in prop_oneof![Just([0u8; 6]), any::<[u8; 6]>()],
            nonce in any::<u64>(),
            seq in prop_oneof![Just(0u32), any::<u32>()],
            times in prop_oneof![Just([0u8; 16]), any::<[u8; 16]>()],
        ) {
            let mut b = [0u8; LEN];
            b[..4].copy_from_slice(&MAGIC);
            b[4] = VERSION;
            b[5] = kind;
            b[6..8].copy_from_slice(&reserved[..2]);
            b[8..16].copy_from_slice(&nonce.to_be_bytes());
            b[16..20].copy_from_slice(&seq.to_be_bytes());
            b[20..24].copy_from_slice(&reserved[2..]);
            b[24..].copy_from_slice(&times);
            if let Ok(m) = ClockMessage::parse(&b) {
                prop_assert_eq!(m.emit(), b);
            }
        }
    }
}
