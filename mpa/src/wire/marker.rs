//! The MPA marker (RFC 5044 §4.3): `RESERVED (u16) | FPDUPTR (u16 BE)`.

use super::Truncated;

mod field {
    use std::ops::Range;
    pub const RESERVED: Range<usize> = 0..2;
    pub const FPDUPTR: Range<usize> = 2..4;
}

/// Length of a marker on the wire.
pub const MARKER_LEN: usize = 4;

/// A view over the four octets of a marker.
#[derive(Debug, Clone, Copy)]
pub struct Marker<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Marker<T> {
    /// Wraps a buffer without checking its length.
    pub fn new_unchecked(buffer: T) -> Self {
        Marker { buffer }
    }

    /// Wraps a buffer after checking it holds a whole marker.
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        let m = Self::new_unchecked(buffer);
        m.check_len()?;
        Ok(m)
    }

    /// After this succeeds no accessor panics.
    pub fn check_len(&self) -> Result<(), Truncated> {
        let have = self.buffer.as_ref().len();
        if have < MARKER_LEN {
            return Err(Truncated {
                what: "marker",
                need: MARKER_LEN,
                have,
            });
        }
        Ok(())
    }

    /// The reserved field (0 on send, ignored on receive).
    pub fn reserved(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::RESERVED];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// FPDUPTR as sent.
    pub fn fpdu_ptr_raw(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::FPDUPTR];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// FPDUPTR with its two low bits treated as zero (RFC 5044 §4.3: receivers MUST).
    pub fn fpdu_ptr(&self) -> u16 {
        self.fpdu_ptr_raw() & !3
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Marker<T> {
    /// Writes a marker with a zero reserved field.
    pub fn set(&mut self, fpdu_ptr: u16) {
        let b = self.buffer.as_mut();
        b[field::RESERVED].copy_from_slice(&[0, 0]);
        b[field::FPDUPTR].copy_from_slice(&fpdu_ptr.to_be_bytes());
    }
}

/// The four wire octets of a marker with the given FPDUPTR.
#[inline]
pub fn marker_bytes(fpdu_ptr: u16) -> [u8; 4] {
    let p = fpdu_ptr.to_be_bytes();
    [0, 0, p[0], p[1]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_emit() {
        let m = Marker::new_checked([0x12u8, 0x34, 0x01, 0xff]).unwrap();
        assert_eq!(m.reserved(), 0x1234);
        assert_eq!(m.fpdu_ptr_raw(), 0x01ff);
        assert_eq!(m.fpdu_ptr(), 0x01fc);
        let mut buf = [0xffu8; 4];
        Marker::new_unchecked(&mut buf[..]).set(0x14);
        assert_eq!(buf, [0, 0, 0, 0x14]);
        assert_eq!(marker_bytes(0x14), buf);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            Marker::new_checked(&[0u8; 3][..]).unwrap_err(),
            Truncated {
                what: "marker",
                need: 4,
                have: 3
            }
        );
    }
}
