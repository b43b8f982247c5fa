//! Whole frames on the hot path: Ethernet (one optional VLAN tag), IPv4 or IPv6, TCP.
//!
//! [`parse_tcp_frame`] takes a received frame apart in one pass without allocating and
//! without panicking on any input; every reason to drop a frame is its own [`FrameError`]
//! variant, so the caller can count them. [`FrameTemplate`] holds the Ethernet and IP headers
//! of one flow, prebuilt at hand-over, and [`FrameTemplate::finish`] puts them in front of a
//! TCP segment that `Connection::poll_transmit` has already written, filling both checksums.
//!
//! [`BatchHeader`] holds the headers of a batch's first frame, and checks the frames after it
//! against them in place ([`BatchHeader::follower`]): the common case of the receive path
//! without the parse.
//!
//! Modules: `parse` (received frames), `follower` (frames that continue a batch), `template`
//! (outgoing frames), tests beside them.

#![forbid(unsafe_code)]

mod follower;
mod parse;
mod template;
#[cfg(test)]
mod tests;

pub use follower::{BatchHeader, Follower};
pub use parse::{
    octets_in, parse_tcp_frame, parse_tcp_frame_in_pieces,
    parse_tcp_frame_in_pieces_with_payload_crcs, parse_tcp_frame_with_payload_crc, TcpFrame,
};
pub use template::FrameTemplate;

use super::ethernet::{self, EthernetError};
use super::ip::{IpError, IPV6_HEADER_LEN};
use super::tcp::TcpWireError;
use std::net::IpAddr;

/// The longest Ethernet + IP header a [`FrameTemplate`] writes: 14 + 40.
pub(crate) const MAX_L2L3_LEN: usize = ethernet::HEADER_LEN + IPV6_HEADER_LEN;

/// Why a frame was dropped, or could not be built.
///
/// Parsing yields each reason as its own variant (the IP ones inside [`FrameError::Ip`]:
/// `IpError::Fragment`, `IpError::Unsupported` for IPv6 extension headers,
/// `IpError::BadChecksum` for the IPv4 header checksum).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The Ethernet header (with its VLAN tag) is truncated.
    #[error(transparent)]
    Ethernet(#[from] EthernetError),
    /// The EtherType is neither IPv4 nor IPv6 (after at most one VLAN tag).
    #[error("not IP: EtherType {ethertype:#06x}")]
    NotIp {
        /// The EtherType found.
        ethertype: u16,
    },
    /// The IP header is malformed, truncated, fails its checksum, is a fragment, or is
    /// followed by an IPv6 extension header.
    #[error(transparent)]
    Ip(#[from] IpError),
    /// The IP payload is not TCP.
    #[error("not TCP: IP protocol {protocol}")]
    NotTcp {
        /// The protocol / next-header value.
        protocol: u8,
    },
    /// The TCP header is malformed or truncated.
    #[error(transparent)]
    Tcp(#[from] TcpWireError),
    /// The TCP checksum is wrong.
    #[error("bad TCP checksum")]
    BadTcpChecksum,
    /// Local misuse: a template's two addresses are of different families.
    #[error("address families differ: {src} and {dst}")]
    FamilyMismatch {
        /// Our address.
        src: IpAddr,
        /// The peer's address.
        dst: IpAddr,
    },
    /// Local misuse: the buffer cannot hold the frame.
    #[error("buffer of {have} octets cannot hold a {need}-octet frame")]
    BufferTooShort {
        /// Octets the frame needs.
        need: usize,
        /// Octets the buffer has.
        have: usize,
    },
}

/// Fuzz entry point: parses arbitrary octets as a frame, with and without TCP checksum
/// verification, and reads every field of the result. Never panics on any input.
#[cfg(test)]
pub(crate) fn fuzz_parse_tcp_frame(data: &[u8]) {
    for verify in [false, true] {
        if let Ok(f) = parse_tcp_frame(data, verify) {
            let _ = (f.tcp.payload(), f.tcp.options(), f.tcp.seq_number());
            let _ = super::tcp::TcpRepr::parse(&f.tcp);
            debug_assert_eq!(f.tcp.into_inner().len(), f.ip_payload_len);
            debug_assert!(f.tcp_offset + f.ip_payload_len <= data.len());
        }
    }
}
