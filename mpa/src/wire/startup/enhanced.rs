//! The enhanced connection establishment data (RFC 6581 §9): the first four octets of the
//! private data of a revision-2 frame with S=1.

use super::{rev2, StartupFrameError, ENHANCED_LEN};
use crate::rtr::{RtrSet, RtrType};

/// The enhanced connection establishment data at the start of the private data of a frame
/// with S=1 (RFC 6581 §9): `A|B|IRD(14), C|D|ORD(14)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rev2Params {
    /// A: peer-to-peer connection model (an RTR indication is used).
    pub peer_to_peer: bool,
    /// B, C, D: the RTR types requested (Request) or supported (Reply). Always empty when
    /// `peer_to_peer` is false (RFC 6581 §9.2: sent as 0 and ignored on receive).
    pub rtr: RtrSet,
    /// IRD (14 bits; 0x3FFF = no automatic negotiation).
    pub ird: u16,
    /// ORD (14 bits; 0x3FFF = no automatic negotiation).
    pub ord: u16,
}

impl Rev2Params {
    /// Decodes the four octets: the IRD word, then the ORD word.
    pub fn from_bytes(b: [u8; ENHANCED_LEN]) -> Self {
        let [i0, i1, o0, o1] = b;
        let ird_word = u16::from_be_bytes([i0, i1]);
        let ord_word = u16::from_be_bytes([o0, o1]);
        let peer_to_peer = ird_word & rev2::A != 0;
        let mut rtr = RtrSet::EMPTY;
        // RFC 6581 §9.2: with A=0, B, C and D MUST be ignored on reception.
        if peer_to_peer {
            if ird_word & rev2::B != 0 {
                rtr = rtr.with(RtrType::ZeroLengthSend);
            }
            if ord_word & rev2::C != 0 {
                rtr = rtr.with(RtrType::ZeroLengthWrite);
            }
            if ord_word & rev2::D != 0 {
                rtr = rtr.with(RtrType::ZeroLengthReadRequest);
            }
        }
        Rev2Params {
            peer_to_peer,
            rtr,
            ird: ird_word & rev2::IRD_ORD_MASK,
            ord: ord_word & rev2::IRD_ORD_MASK,
        }
    }

    /// Encodes the four octets; IRD and ORD are cut to 14 bits (see [`Rev2Params::check`]).
    pub fn to_bytes(&self) -> [u8; ENHANCED_LEN] {
        let mut ird_word = self.ird & rev2::IRD_ORD_MASK;
        let mut ord_word = self.ord & rev2::IRD_ORD_MASK;
        // RFC 6581 §9.2: with A=0, B, C and D MUST be sent as 0.
        if self.peer_to_peer {
            ird_word |= rev2::A;
            if self.rtr.contains(RtrType::ZeroLengthSend) {
                ird_word |= rev2::B;
            }
            if self.rtr.contains(RtrType::ZeroLengthWrite) {
                ord_word |= rev2::C;
            }
            if self.rtr.contains(RtrType::ZeroLengthReadRequest) {
                ord_word |= rev2::D;
            }
        }
        let [a, b] = ird_word.to_be_bytes();
        let [c, d] = ord_word.to_be_bytes();
        [a, b, c, d]
    }

    /// Checks that IRD and ORD fit their 14 bits (RFC 6581 §9).
    pub fn check(&self) -> Result<(), StartupFrameError> {
        for v in [self.ird, self.ord] {
            if v > rev2::IRD_ORD_MASK {
                return Err(StartupFrameError::IrdOrdOutOfRange(v));
            }
        }
        Ok(())
    }
}
