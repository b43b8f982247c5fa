//! Why decoding stopped, and which MPA error code and fault that is.

use crate::error::{Fault, MpaErrorCode};

/// Why decoding stopped. Sticky: after an error the decoder yields nothing more (RFC 5044 §8:
/// MPA MUST NOT deliver further FPDUs on that half connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Error 2: the CRC does not match.
    #[error("CRC mismatch in the FPDU at stream position {pos}: received {received:#010x}, computed {computed:#010x}")]
    Crc {
        /// Stream position of the FPDU.
        pos: u32,
        /// The CRC field.
        received: u32,
        /// The CRC computed over the octets.
        computed: u32,
    },
    /// Error 3: a marker disagrees with ULPDU_Length on where the FPDU starts.
    #[error("marker at stream position {marker_pos} has FPDUPTR {found}, expected {expected}")]
    Marker {
        /// Stream position of the marker.
        marker_pos: u32,
        /// FPDUPTR received (low two bits cleared).
        found: u16,
        /// FPDUPTR implied by ULPDU_Length framing.
        expected: u16,
    },
    /// Error 3: an FPDU that its markers located at stream position `located` (and that was
    /// placed out of order) is not where ULPDU_Length framing puts the next FPDU.
    #[error("the FPDU markers located at stream position {located} is not on the ULPDU_Length chain (next FPDU boundary after {chain})")]
    Misframed {
        /// Where the markers put the FPDU.
        located: u32,
        /// Where the in-order chain stands (start of the FPDU it is inside).
        chain: u32,
    },
    /// The caller dropped a `Chunk` before draining it; the stream position is lost.
    #[error("a chunk was dropped before all its FPDUs were taken")]
    Abandoned,
}

impl DecodeError {
    /// The MPA error code to report.
    pub fn code(&self) -> MpaErrorCode {
        match self {
            DecodeError::Crc { .. } => MpaErrorCode::CrcMismatch,
            DecodeError::Marker { .. } | DecodeError::Misframed { .. } => {
                MpaErrorCode::MarkerMismatch
            }
            DecodeError::Abandoned => MpaErrorCode::LocalCatastrophic,
        }
    }

    /// Who is at fault.
    pub fn fault(&self) -> Fault {
        match self {
            DecodeError::Abandoned => Fault::LocalMisuse,
            _ => Fault::PeerMisbehaved,
        }
    }
}
