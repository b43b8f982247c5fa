//! IPv4 (RFC 791) and IPv6 (RFC 8200) headers, as far as a TCP data path needs them.
//!
//! [`Ipv4Packet`] and [`Ipv6Packet`] view a whole packet. Their buffer may be longer than the
//! packet (Ethernet pads short frames to 60 octets): [`Ipv4Packet::payload`] and
//! [`Ipv6Packet::payload`] end where the header's length says, never at the buffer's end.
//!
//! The data path handles neither fragments nor IPv6 extension headers: [`Ipv4Repr::parse`]
//! and [`Ipv6Repr::parse`] turn them into typed errors the caller counts and drops.
//!
//! `v4` and `v6` hold one version each; what both share (limits, [`IpError`]) is here.

#![forbid(unsafe_code)]

#[cfg(test)]
mod tests;
mod v4;
mod v6;

pub(crate) use v4::{Ipv4Packet, Ipv4Repr};
pub(crate) use v6::{Ipv6Packet, Ipv6Repr};

use std::ops::Range;

/// IPv4 flag: don't fragment (RFC 791 §3.1), in the flags/fragment-offset word.
pub(crate) const IPV4_DF: u16 = 0x4000;
/// IPv4 flag: more fragments.
pub(crate) const IPV4_MF: u16 = 0x2000;
/// Mask of the fragment offset (in 8-octet units) in the flags/fragment-offset word.
pub(crate) const IPV4_FRAG_OFFSET_MASK: u16 = 0x1fff;

/// Octets of an IPv4 header without options.
pub(crate) const IPV4_HEADER_LEN: usize = 20;
/// Octets of the fixed IPv6 header.
pub(crate) const IPV6_HEADER_LEN: usize = 40;
/// TTL / hop limit the emit helpers use (Linux's default).
pub(crate) const DEFAULT_HOP_LIMIT: u8 = 64;

/// IPv6 next-header values that are extension headers (RFC 8200 §4; IANA "IPv6 Extension
/// Header Types"), ESP and AH included.
pub(crate) const IPV6_EXTENSION_HEADERS: [u8; 11] =
    [0, 43, 44, 50, 51, 60, 135, 139, 140, 253, 254];

/// Whether an IPv6 next-header value is an extension header.
pub(crate) fn is_ipv6_extension_header(next_header: u8) -> bool {
    IPV6_EXTENSION_HEADERS.contains(&next_header)
}

/// What is wrong with an IP header, or why one could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IpError {
    /// The buffer is shorter than the header, or than the packet its length field announces.
    #[error("truncated IP packet: need {need} octets, have {have}")]
    Truncated {
        /// Octets needed.
        need: usize,
        /// Octets present.
        have: usize,
    },
    /// The version field is not the one the view expects.
    #[error("IP version {0} where another was expected")]
    BadVersion(u8),
    /// IPv4 IHL below 5 words (RFC 791 §3.1).
    #[error("IPv4 IHL {0} is below the minimum of 5 words")]
    BadHeaderLen(u8),
    /// IPv4 total length smaller than the header.
    #[error("IPv4 total length {total_len} is shorter than its {header_len}-octet header")]
    BadTotalLen {
        /// The total-length field.
        total_len: usize,
        /// The header length from IHL.
        header_len: usize,
    },
    /// The IPv4 header checksum is wrong.
    #[error("bad IPv4 header checksum")]
    BadChecksum,
    /// An IPv4 fragment (MF set or offset non-zero): not reassembled here.
    #[error("IPv4 fragment (more fragments {more_fragments}, offset {offset} octets)")]
    Fragment {
        /// MF flag.
        more_fragments: bool,
        /// Fragment offset in octets.
        offset: usize,
    },
    /// An IPv6 extension header follows the fixed header: not handled here.
    #[error("unsupported IPv6 extension header {next_header}")]
    Unsupported {
        /// The next-header value.
        next_header: u8,
    },
    /// The payload is too long for the length field.
    #[error("IP payload of {0} octets does not fit the length field")]
    PayloadTooLong(usize),
}

fn u16_at(b: &[u8], r: Range<usize>) -> u16 {
    u16::from_be_bytes([b[r.start], b[r.start + 1]])
}
