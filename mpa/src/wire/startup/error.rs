//! Why a startup frame could not be parsed or emitted, and who is at fault.

use super::FrameKind;
use crate::error::{Fault, MpaErrorCode};
use crate::wire::Truncated;

/// Why a startup frame could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StartupFrameError {
    /// Fewer octets than the header or the announced private data need.
    #[error(transparent)]
    Truncated(#[from] Truncated),
    /// The key is neither the Request key nor the Reply key (RFC 5044 §7.1.1, §7.1.2 rule 5).
    #[error("not an MPA key: {found:02x?}")]
    UnknownKey {
        /// The 16 octets received.
        found: [u8; 16],
    },
    /// A valid key of the other kind: a Request where a Reply was expected is an
    /// Initiator/Initiator startup (RFC 5044 §7.1.2 rule 8).
    #[error("expected an MPA {expected} frame, received an MPA {found} frame")]
    UnexpectedKind {
        /// What the receiver waited for.
        expected: FrameKind,
        /// What arrived.
        found: FrameKind,
    },
    /// PD_Length above 512 (RFC 5044 §7.1.1).
    #[error("PD_Length {0} exceeds 512")]
    PdLengthTooLarge(u16),
    /// A revision this implementation cannot interpret (RFC 5044 §7.1.1 Rev).
    #[error("unsupported MPA revision {0}")]
    UnsupportedRevision(u8),
    /// S=1 with revision 2 but fewer than 4 octets of private data (RFC 6581 §6).
    #[error("enhanced frame (S=1) with PD_Length {0}, below the 4 octets of IRD/ORD")]
    EnhancedTooShort(u16),
    /// Emit: the private data does not fit in PD_Length's 512 octets.
    #[error("private data of {len} octets exceeds the {max} that fit")]
    PrivateDataTooLong {
        /// Octets given.
        len: usize,
        /// Octets that fit.
        max: usize,
    },
    /// Emit: enhanced data needs revision 2 or higher (RFC 6581 §6 Rev).
    #[error("enhanced data needs revision 2 or higher, not {0}")]
    EnhancedNeedsRev2(u8),
    /// Emit: IRD or ORD above 14 bits (RFC 6581 §9).
    #[error("IRD/ORD value {0:#x} exceeds 14 bits")]
    IrdOrdOutOfRange(u16),
    /// Emit: the output buffer is shorter than `StartupRepr::buffer_len`.
    #[error("output buffer of {have} octets, need {need}")]
    BufferTooShort {
        /// Octets needed.
        need: usize,
        /// Octets present.
        have: usize,
    },
}

impl StartupFrameError {
    /// Who is at fault.
    pub fn fault(&self) -> Fault {
        match self {
            StartupFrameError::Truncated(_)
            | StartupFrameError::UnknownKey { .. }
            | StartupFrameError::PdLengthTooLarge(_)
            | StartupFrameError::EnhancedTooShort(_) => Fault::PeerMisbehaved,
            StartupFrameError::UnexpectedKind { .. }
            | StartupFrameError::UnsupportedRevision(_) => Fault::Incompatible,
            StartupFrameError::PrivateDataTooLong { .. }
            | StartupFrameError::EnhancedNeedsRev2(_)
            | StartupFrameError::IrdOrdOutOfRange(_)
            | StartupFrameError::BufferTooShort { .. } => Fault::LocalMisuse,
        }
    }

    /// The MPA error code: 4, invalid MPA Request or Reply frame (RFC 5044 §8).
    pub fn code(&self) -> MpaErrorCode {
        MpaErrorCode::InvalidStartupFrame
    }
}
