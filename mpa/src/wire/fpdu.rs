//! The FPDU without markers (RFC 5044 §4.1):
//! `ULPDU_Length (u16 BE) | ULPDU | PAD (0..3) | CRC (4, least-significant octet first)`.
//!
//! Markers are a property of the stream position, not of the FPDU; [`crate::markers`] maps
//! between this contiguous form and the wire.

use super::Truncated;
use crate::crc;

mod field {
    use std::ops::Range;
    pub const ULPDU_LEN: Range<usize> = 0..2;
    pub const ULPDU: usize = 2;
}

/// Octets of the ULPDU_Length field.
pub const HEADER_LEN: usize = 2;
/// Octets of the CRC field.
pub const CRC_LEN: usize = 4;
/// The largest ULPDU a sender may post (RFC 5044 §3).
pub const MAX_ULPDU: usize = 64768;
/// MPA never offers a MULPDU below this (RFC 5044 §4.5... §5).
pub const MIN_MULPDU: usize = 128;

/// PAD octets after a ULPDU of `ulpdu_len` octets: `(2 + len + pad) % 4 == 0`.
#[inline]
pub const fn pad_len(ulpdu_len: usize) -> usize {
    (4 - (HEADER_LEN + ulpdu_len) % 4) % 4
}

/// Octets of an FPDU without markers: header, ULPDU, PAD and CRC.
#[inline]
pub const fn fpdu_len(ulpdu_len: usize) -> usize {
    HEADER_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// A view over a marker-free FPDU.
#[derive(Debug, Clone, Copy)]
pub struct Fpdu<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Fpdu<T> {
    /// Wraps a buffer without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        Fpdu { buffer }
    }

    /// Wraps a buffer after [`Fpdu::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Checks that the buffer holds the header and the whole FPDU it announces. After this
    /// succeeds no accessor panics.
    pub fn check_len(&self) -> Result<(), Truncated> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(Truncated {
                what: "FPDU header",
                need: HEADER_LEN,
                have,
            });
        }
        let need = fpdu_len(usize::from(self.ulpdu_len()));
        if have < need {
            return Err(Truncated {
                what: "FPDU",
                need,
                have,
            });
        }
        Ok(())
    }

    /// ULPDU_Length.
    pub fn ulpdu_len(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::ULPDU_LEN];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Octets of the whole FPDU (header through CRC).
    pub fn total_len(&self) -> usize {
        fpdu_len(usize::from(self.ulpdu_len()))
    }

    /// The ULPDU.
    pub fn ulpdu(&self) -> &[u8] {
        let n = usize::from(self.ulpdu_len());
        &self.buffer.as_ref()[field::ULPDU..field::ULPDU + n]
    }

    /// The PAD octets (zero on send, ignored on receive but covered by the CRC).
    pub fn pad(&self) -> &[u8] {
        let n = usize::from(self.ulpdu_len());
        &self.buffer.as_ref()[field::ULPDU + n..field::ULPDU + n + pad_len(n)]
    }

    /// The CRC field as a value (the wire carries it least-significant octet first).
    pub fn crc_field(&self) -> u32 {
        let end = self.total_len();
        let b = &self.buffer.as_ref()[end - CRC_LEN..end];
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The CRC computed over header, ULPDU and PAD.
    pub fn compute_crc(&self) -> u32 {
        crc::crc32c(&self.buffer.as_ref()[..self.total_len() - CRC_LEN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Fpdu<T> {
    /// Sets ULPDU_Length.
    pub fn set_ulpdu_len(&mut self, len: u16) {
        self.buffer.as_mut()[field::ULPDU_LEN].copy_from_slice(&len.to_be_bytes());
    }

    /// The ULPDU, writable.
    pub fn ulpdu_mut(&mut self) -> &mut [u8] {
        let n = usize::from(self.ulpdu_len());
        &mut self.buffer.as_mut()[field::ULPDU..field::ULPDU + n]
    }

    /// Zeroes the PAD and writes the CRC over header, ULPDU and PAD.
    pub fn fill_pad_and_crc(&mut self) {
        let n = usize::from(self.ulpdu_len());
        let end = self.total_len();
        let buf = self.buffer.as_mut();
        buf[field::ULPDU + n..end - CRC_LEN].fill(0);
        let c = crc::crc32c(&buf[..end - CRC_LEN]);
        buf[end - CRC_LEN..end].copy_from_slice(&c.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/protocol.md worked example: zero-length tagged RDMA Write, STag 1, TO 0.
    const WRITE_RTR: [u8; 20] = [
        0x00, 0x0e, 0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0xeb, 0xd3, 0x4c, 0x5f,
    ];

    #[test]
    fn deconstruct() {
        let f = Fpdu::new_checked(&WRITE_RTR[..]).unwrap();
        assert_eq!(f.ulpdu_len(), 14);
        assert_eq!(f.total_len(), 20);
        assert_eq!(f.pad(), &[] as &[u8]);
        assert_eq!(f.ulpdu()[0], 0xc1);
        assert_eq!(f.crc_field(), 0x5F4C_D3EB);
        assert_eq!(f.compute_crc(), f.crc_field());
    }

    #[test]
    fn crc_with_leading_marker_covered() {
        // The same FPDU behind a marker with FPDUPTR 0: the marker is covered by the CRC
        // (RFC 5044 §4.4 rule 2), docs/protocol.md's second worked value.
        let mut covered = vec![0u8; 4];
        covered.extend_from_slice(&WRITE_RTR[..16]);
        assert_eq!(crc::crc32c(&covered), 0xA1F9_1F3F);
    }

    #[test]
    fn construct() {
        let mut buf = [0xaau8; 20];
        let mut f = Fpdu::new_unchecked(&mut buf[..]);
        f.set_ulpdu_len(14);
        f.ulpdu_mut().copy_from_slice(&WRITE_RTR[2..16]);
        f.fill_pad_and_crc();
        assert_eq!(buf, WRITE_RTR);
    }

    #[test]
    fn pad_lengths() {
        assert_eq!(pad_len(0), 2);
        assert_eq!(pad_len(1), 1);
        assert_eq!(pad_len(2), 0);
        assert_eq!(pad_len(3), 3);
        assert_eq!(fpdu_len(42), 48);
        for n in 0..100 {
            assert_eq!((2 + n + pad_len(n)) % 4, 0);
        }
    }

    #[test]
    fn truncated_and_impossible_length() {
        assert!(Fpdu::new_checked(&[0u8][..]).is_err());
        assert_eq!(
            Fpdu::new_checked(&WRITE_RTR[..19]).unwrap_err(),
            Truncated {
                what: "FPDU",
                need: 20,
                have: 19
            }
        );
        // A header announcing 65535 octets over a short buffer is refused, not indexed.
        assert!(Fpdu::new_checked(&[0xffu8, 0xff, 0, 0][..]).is_err());
    }
}
