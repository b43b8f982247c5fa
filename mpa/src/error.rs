//! MPA error codes (RFC 5044 §8, RFC 6581 §8) and the mapping from typed errors to them.

use std::fmt;

/// The error codes MPA reports to its ULP, and that the ULP puts in an RDMAP Terminate with
/// layer 2 (LLP) and error type 0 (MPA).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MpaErrorCode {
    /// 1: TCP connection closed, terminated or lost (RST, FIN, timeout, too many retries).
    TcpClosed = 1,
    /// 2: received CRC does not match.
    CrcMismatch = 2,
    /// 3: with a valid CRC, a marker and ULPDU_Length disagree on the start of an FPDU.
    MarkerMismatch = 3,
    /// 4: invalid MPA Request or Reply frame.
    InvalidStartupFrame = 4,
    /// 5 (RFC 6581): local catastrophic error.
    LocalCatastrophic = 5,
    /// 6 (RFC 6581): insufficient IRD resources.
    InsufficientIrd = 6,
    /// 7 (RFC 6581): no matching RTR option.
    NoMatchingRtr = 7,
}

impl MpaErrorCode {
    /// The numeric code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Parses a numeric code.
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Self::TcpClosed,
            2 => Self::CrcMismatch,
            3 => Self::MarkerMismatch,
            4 => Self::InvalidStartupFrame,
            5 => Self::LocalCatastrophic,
            6 => Self::InsufficientIrd,
            7 => Self::NoMatchingRtr,
            _ => return None,
        })
    }
}

impl fmt::Display for MpaErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Self::TcpClosed => "TCP connection closed, terminated or lost",
            Self::CrcMismatch => "received CRC does not match",
            Self::MarkerMismatch => "marker and ULPDU_Length disagree on the start of an FPDU",
            Self::InvalidStartupFrame => "invalid MPA Request or Reply frame",
            Self::LocalCatastrophic => "local catastrophic error",
            Self::InsufficientIrd => "insufficient IRD resources",
            Self::NoMatchingRtr => "no matching RTR option",
        };
        write!(f, "MPA error {}: {}", self.code(), s)
    }
}

/// Who is at fault for an error, in the manner of rustls: the peer broke the protocol, the
/// peer is incompatible with our policy, or we misused the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The peer sent something the RFCs forbid.
    PeerMisbehaved,
    /// The peer is well-behaved but our policies do not agree.
    Incompatible,
    /// A local caller used the API wrongly.
    LocalMisuse,
    /// The transport failed.
    Transport,
}
