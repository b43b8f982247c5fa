//! Region advertisement: a Responder offers a tagged region (and receive buffers) to the
//! Initiator in the private data of its accepting MPA Reply, and both sides derive where each
//! message lands from it.
//!
//! This is an mpa-xdp convention, not part of any RFC (so it lives here, beside the other
//! conventions the mpa-xdp programs share, and not in the `mpa` protocol crate): a ULP that wants
//! it puts the 32-octet advertisement at the start of the Reply's private data (RFC 5044 §7.1, at
//! most 512 octets in all); any octets after it are ordinary private data and are ignored here.
//!
//! # Format
//!
//! All integers big-endian.
//!
//! ```text
//! octets 0..4    magic "MPXR" (4d 50 58 52)
//!        4       version = 1
//!        5       flags: 0x01 W  RDMA Write accepted (the region has remote write access)
//!                       0x02 S  Sends accepted (receive buffers are posted on QN 0)
//!                       other bits: 0 on send, an error on receive
//!        6..8    reserved: 0 on send, ignored on receive
//!        8..12   STag of the region (u32)
//!       12..20   region length in octets (u64)
//!       20..28   base TO: the Tagged Offset of the region's first octet (u64)
//!       28..32   receive buffer size (u32): the size of each posted receive buffer for Sends;
//!                0 when S is clear, and not 0 when S is set
//! ```
//!
//! [`RegionAd::parse`] answers `Ok(None)` when the private data does not start with the magic
//! (it is ordinary private data), and an error when it does but the rest is not a valid
//! advertisement: truncated (under 32 octets), another version, unknown flag bits, S set with
//! a size of 0 or a size with S clear, or `base TO + length` above 2^64 − 1.
//!
//! # Placement
//!
//! The Initiator numbers its messages `n` = 0, 1, 2, … and sends payload `n` (for example
//! [`crate::pattern::PatternTable::payload`]) in exactly one DDP segment (L set).
//!
//! * RDMA Write `n` with a payload of `p` octets is tagged (RDMAP opcode 0) to the advertised
//!   STag at TO [`write_to`]: the region is cut into `slots = length / p` whole slots of `p`
//!   octets and writes fill them in turn, wrapping around:
//!   `base TO + (n mod slots) · p`. A zero-length write goes to `base TO`; a payload longer than
//!   the region does not fit (`None`). Octets past the last whole slot are never written.
//! * Send `n` is untagged (RDMAP opcode 3 Send), QN 0, MO 0, L set, with MSN `n + 1`
//!   (RFC 5041 §5.1: the first message on a queue has MSN 1; MSN wraps modulo 2^32). Its
//!   payload lands in the `n`-th (0-based) receive buffer the Responder posted, and must be no
//!   longer than the advertised receive buffer size. When the connection's RTR indication
//!   (RFC 6581 §9.2) was a zero-length Send, that RTR was the first Send on QN 0: it took
//!   MSN 1 and the first posted buffer, so Send `n` has MSN `n + 2` and lands in buffer `n + 1`
//!   ([`send_msn`]).

use mpa::wire::ddp::{queue, DdpRepr, RdmapOpcode};

/// The advertisement's first four octets.
pub const MAGIC: [u8; 4] = *b"MPXR";
/// The version this module reads and writes.
pub const VERSION: u8 = 1;
/// Octets in an advertisement.
pub const LEN: usize = 32;
/// Flag: RDMA Writes accepted.
pub const FLAG_WRITES: u8 = 0x01;
/// Flag: Sends accepted.
pub const FLAG_SENDS: u8 = 0x02;

mod field {
    use std::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION: usize = 4;
    pub const FLAGS: usize = 5;
    pub const STAG: Range<usize> = 8..12;
    pub const LEN: Range<usize> = 12..20;
    pub const BASE_TO: Range<usize> = 20..28;
    pub const RECV_BUF_SIZE: Range<usize> = 28..32;
}

/// A region advertisement (see the [module documentation](self) for the format).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegionAd {
    /// RDMA Writes accepted: the region has remote write access (flag 0x01).
    pub writes: bool,
    /// Sends accepted: receive buffers are posted on QN 0 (flag 0x02).
    pub sends: bool,
    /// STag of the region.
    pub stag: u32,
    /// Region length in octets.
    pub len: u64,
    /// Tagged Offset of the region's first octet.
    pub base_to: u64,
    /// Size of each posted receive buffer; 0 exactly when `sends` is false.
    pub recv_buf_size: u32,
}

/// Why private data that starts with the magic is not a valid advertisement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RegionAdError {
    /// Fewer than 32 octets.
    #[error("truncated region advertisement: need 32 octets, have {have}")]
    Truncated {
        /// Octets present.
        have: usize,
    },
    /// A version other than 1.
    #[error("region advertisement version {0}, expected 1")]
    Version(u8),
    /// Flag bits other than 0x01 and 0x02 set.
    #[error("region advertisement has unknown flag bits {0:#04x}")]
    UnknownFlags(u8),
    /// Sends accepted with a receive buffer size of 0.
    #[error("region advertisement accepts Sends but its receive buffer size is 0")]
    SendsWithoutBufferSize,
    /// A receive buffer size without the Sends flag.
    #[error("region advertisement has receive buffer size {0} but does not accept Sends")]
    BufferSizeWithoutSends(u32),
    /// `base_to + len` is above 2^64 − 1.
    #[error("region advertisement base TO {base_to:#x} + length {len} overflows 64 bits")]
    Overflow {
        /// Base TO.
        base_to: u64,
        /// Length.
        len: u64,
    },
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

impl RegionAd {
    /// Reads the advertisement at the start of `private_data`: `Ok(None)` when it does not
    /// start with the magic, an error when it does but is not a valid version-1
    /// advertisement. Octets after the first 32 are ignored.
    pub fn parse(private_data: &[u8]) -> Result<Option<RegionAd>, RegionAdError> {
        if private_data.get(field::MAGIC) != Some(&MAGIC[..]) {
            return Ok(None);
        }
        let b = private_data.get(..LEN).ok_or(RegionAdError::Truncated {
            have: private_data.len(),
        })?;
        if b[field::VERSION] != VERSION {
            return Err(RegionAdError::Version(b[field::VERSION]));
        }
        let flags = b[field::FLAGS];
        if flags & !(FLAG_WRITES | FLAG_SENDS) != 0 {
            return Err(RegionAdError::UnknownFlags(
                flags & !(FLAG_WRITES | FLAG_SENDS),
            ));
        }
        let ad = RegionAd {
            writes: flags & FLAG_WRITES != 0,
            sends: flags & FLAG_SENDS != 0,
            stag: be32(&b[field::STAG]),
            len: be64(&b[field::LEN]),
            base_to: be64(&b[field::BASE_TO]),
            recv_buf_size: be32(&b[field::RECV_BUF_SIZE]),
        };
        ad.check()?;
        Ok(Some(ad))
    }

    /// Checks the rules [`RegionAd::parse`] enforces on the fields: a receive buffer size
    /// exactly when Sends are accepted, and `base_to + len` within 64 bits. Senders call this
    /// before [`RegionAd::emit`].
    pub fn check(&self) -> Result<(), RegionAdError> {
        match (self.sends, self.recv_buf_size) {
            (true, 0) => return Err(RegionAdError::SendsWithoutBufferSize),
            (false, s) if s != 0 => return Err(RegionAdError::BufferSizeWithoutSends(s)),
            _ => {}
        }
        if self.base_to.checked_add(self.len).is_none() {
            return Err(RegionAdError::Overflow {
                base_to: self.base_to,
                len: self.len,
            });
        }
        Ok(())
    }

    /// The flags octet.
    pub fn flags(&self) -> u8 {
        (if self.writes { FLAG_WRITES } else { 0 }) | (if self.sends { FLAG_SENDS } else { 0 })
    }

    /// The 32 octets of the advertisement (reserved octets 0). Fields are written as they
    /// are; see [`RegionAd::check`].
    pub fn emit(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::VERSION] = VERSION;
        b[field::FLAGS] = self.flags();
        b[field::STAG].copy_from_slice(&self.stag.to_be_bytes());
        b[field::LEN].copy_from_slice(&self.len.to_be_bytes());
        b[field::BASE_TO].copy_from_slice(&self.base_to.to_be_bytes());
        b[field::RECV_BUF_SIZE].copy_from_slice(&self.recv_buf_size.to_be_bytes());
        b
    }
}

/// The TO of RDMA Write number `n` (0-based) whose payload is `payload_len` octets:
/// `base_to + (n mod slots) · payload_len` with `slots = len / payload_len`; `base_to` for a
/// zero-length payload; `None` when `payload_len > len` (or, for an advertisement that fails
/// [`RegionAd::check`], when the TO would overflow).
pub fn write_to(ad: &RegionAd, n: u64, payload_len: u64) -> Option<u64> {
    if payload_len == 0 {
        return Some(ad.base_to);
    }
    if payload_len > ad.len {
        return None;
    }
    let slots = ad.len / payload_len;
    ad.base_to.checked_add((n % slots) * payload_len)
}

/// The DDP/RDMAP header of RDMA Write number `n` with a `payload_len`-octet payload into the
/// advertised region: tagged, opcode 0, L set, `ad.stag`, TO [`write_to`].
pub fn write_repr(ad: &RegionAd, n: u64, payload_len: u64) -> Option<DdpRepr> {
    Some(DdpRepr::Tagged {
        last: true,
        opcode: RdmapOpcode::RdmaWrite,
        stag: ad.stag,
        to: write_to(ad, n, payload_len)?,
    })
}

/// The MSN of Send number `n` (0-based) on QN 0: `n + 1`, or `n + 2` when `send_rtr` (the
/// connection's RTR indication was a zero-length Send, which took MSN 1); modulo 2^32.
pub fn send_msn(n: u64, send_rtr: bool) -> u32 {
    (n.wrapping_add(1).wrapping_add(u64::from(send_rtr))) as u32
}

/// The DDP/RDMAP header of Send number `n`: untagged, opcode 3, L set, QN 0, MSN
/// [`send_msn`], MO 0.
pub fn send_repr(n: u64, send_rtr: bool) -> DdpRepr {
    DdpRepr::Untagged {
        last: true,
        opcode: RdmapOpcode::Send,
        inv_stag: 0,
        qn: queue::SEND,
        msn: send_msn(n, send_rtr),
        mo: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const AD: RegionAd = RegionAd {
        writes: true,
        sends: true,
        stag: 0x1234_5678,
        len: 1 << 20,
        base_to: 0x1000,
        recv_buf_size: 4096,
    };

    const AD_OCTETS: [u8; 32] = [
        b'M', b'P', b'X', b'R', 1, 0x03, 0, 0, //
        0x12, 0x34, 0x56, 0x78, //
        0, 0, 0, 0, 0, 0x10, 0, 0, //
        0, 0, 0, 0, 0, 0, 0x10, 0, //
        0, 0, 0x10, 0,
    ];

    #[test]
    fn emit_and_parse_the_documented_layout() {
        assert_eq!(AD.emit(), AD_OCTETS);
        assert_eq!(RegionAd::parse(&AD_OCTETS), Ok(Some(AD)));
    }

    #[test]
    fn trailing_private_data_and_reserved_octets_are_ignored() {
        let mut pd = AD_OCTETS.to_vec();
        pd[6] = 0xff;
        pd[7] = 0x01;
        pd.extend_from_slice(b"iser:hello");
        assert_eq!(RegionAd::parse(&pd), Ok(Some(AD)));
    }

    #[test]
    fn ordinary_private_data_is_not_an_ad() {
        for pd in [
            &b""[..],
            b"M",
            b"MPX",
            b"hello-initiator",
            b"MPXr1234",
            b"mpxr",
        ] {
            assert_eq!(RegionAd::parse(pd), Ok(None), "{pd:?}");
        }
    }

    #[test]
    fn malformed_ads_are_errors() {
        assert_eq!(
            RegionAd::parse(b"MPXR"),
            Err(RegionAdError::Truncated { have: 4 })
        );
        assert_eq!(
            RegionAd::parse(&AD_OCTETS[..31]),
            Err(RegionAdError::Truncated { have: 31 })
        );
        let with = |i: usize, v: u8| {
            let mut b = AD_OCTETS;
            b[i] = v;
            RegionAd::parse(&b)
        };
        assert_eq!(with(4, 2), Err(RegionAdError::Version(2)));
        assert_eq!(with(4, 0), Err(RegionAdError::Version(0)));
        assert_eq!(with(5, 0x07), Err(RegionAdError::UnknownFlags(0x04)));
        assert_eq!(with(5, 0x81), Err(RegionAdError::UnknownFlags(0x80)));
        // Size 4096 with only W set.
        assert_eq!(
            with(5, 0x01),
            Err(RegionAdError::BufferSizeWithoutSends(4096))
        );
        let mut no_size = AD;
        no_size.recv_buf_size = 0;
        assert_eq!(
            RegionAd::parse(&no_size.emit()),
            Err(RegionAdError::SendsWithoutBufferSize)
        );
        let mut big = AD;
        big.base_to = u64::MAX - (1 << 20) + 1;
        assert_eq!(
            RegionAd::parse(&big.emit()),
            Err(RegionAdError::Overflow {
                base_to: big.base_to,
                len: 1 << 20
            })
        );
        big.base_to -= 1;
        assert_eq!(RegionAd::parse(&big.emit()), Ok(Some(big)));
    }

    #[test]
    fn errors_read_well() {
        assert_eq!(
            RegionAdError::UnknownFlags(0x04).to_string(),
            "region advertisement has unknown flag bits 0x04"
        );
        assert_eq!(
            RegionAdError::Truncated { have: 7 }.to_string(),
            "truncated region advertisement: need 32 octets, have 7"
        );
    }

    #[test]
    fn writes_fill_whole_slots_and_wrap() {
        let ad = RegionAd { len: 10_000, ..AD };
        // 10 000 / 3000 = 3 slots; the last 1000 octets are never written.
        let tos: Vec<_> = (0..7).map(|n| write_to(&ad, n, 3000).unwrap()).collect();
        assert_eq!(
            tos,
            [
                0x1000,
                0x1000 + 3000,
                0x1000 + 6000,
                0x1000,
                0x1000 + 3000,
                0x1000 + 6000,
                0x1000
            ]
        );
        assert_eq!(write_to(&ad, 5, 0), Some(0x1000));
        assert_eq!(write_to(&ad, 9, 10_000), Some(0x1000));
        assert_eq!(write_to(&ad, 0, 10_001), None);
        let empty = RegionAd { len: 0, ..ad };
        assert_eq!(write_to(&empty, 3, 0), Some(0x1000));
        assert_eq!(write_to(&empty, 0, 1), None);
        assert_eq!(
            write_repr(&ad, 1, 3000),
            Some(DdpRepr::Tagged {
                last: true,
                opcode: RdmapOpcode::RdmaWrite,
                stag: 0x1234_5678,
                to: 0x1000 + 3000
            })
        );
        assert_eq!(write_repr(&ad, 1, 10_001), None);
    }

    #[test]
    fn sends_number_from_one() {
        assert_eq!(send_msn(0, false), 1);
        assert_eq!(send_msn(0, true), 2);
        assert_eq!(send_msn(u64::from(u32::MAX) - 1, false), u32::MAX);
        assert_eq!(send_msn(u64::from(u32::MAX), false), 0);
        // The header matches RFC 5044 Figure 5's Send (L, QN 0, MSN 1, MO 0).
        let mut h = [0u8; 18];
        send_repr(0, false).emit(&mut h, 1).unwrap();
        assert_eq!(
            h,
            [0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
        );
    }

    fn valid_ad() -> impl Strategy<Value = RegionAd> {
        (
            any::<bool>(),
            any::<bool>(),
            any::<u32>(),
            prop_oneof![0u64..300_000, any::<u64>()],
            any::<u64>(),
            1..=u32::MAX,
        )
            .prop_map(|(writes, sends, stag, len, base_to, size)| RegionAd {
                writes,
                sends,
                stag,
                len,
                base_to: base_to.min(u64::MAX - len),
                recv_buf_size: if sends { size } else { 0 },
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn round_trip(
            ad in valid_ad(),
            extra in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            prop_assert_eq!(ad.check(), Ok(()));
            let mut pd = ad.emit().to_vec();
            prop_assert_eq!(&pd[..4], b"MPXR");
            pd.extend_from_slice(&extra);
            prop_assert_eq!(RegionAd::parse(&pd), Ok(Some(ad)));
        }

        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = RegionAd::parse(&data);
        }

        #[test]
        fn parse_never_panics_behind_the_magic(
            rest in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let mut pd = MAGIC.to_vec();
            pd.extend_from_slice(&rest);
            if let Ok(Some(ad)) = RegionAd::parse(&pd) {
                // Whatever parses re-emits to the same octets, reserved octets aside.
                let e = ad.emit();
                prop_assert_eq!(&e[..6], &pd[..6]);
                prop_assert_eq!(&e[8..], &pd[8..32]);
            }
        }

        #[test]
        fn writes_stay_inside_the_region(ad in valid_ad(), n in any::<u64>(), p in 0u64..100_000) {
            match write_to(&ad, n, p) {
                None => prop_assert!(p > ad.len),
                Some(to) if p == 0 => prop_assert_eq!(to, ad.base_to),
                Some(to) => {
                    prop_assert!(to >= ad.base_to);
                    prop_assert!(to - ad.base_to + p <= ad.len);
                    prop_assert_eq!((to - ad.base_to) % p, 0);
                }
            }
        }
    }
}
