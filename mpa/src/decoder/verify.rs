//! Verification of one whole FPDU wire image: the CRC (error 2), then every marker (error 3).

use super::{DecodeError, MARKER_INTERVAL};
use crate::crc;
use crate::markers;
use crate::wire::fpdu::CRC_LEN;

/// Verifies the whole wire image of the FPDU at stream position `pos` (`wire.len()` must be
/// its wire length, as computed from its header): CRC first (error 2), then every marker
/// (error 3, only meaningful with a valid CRC). Returns ULPDU_Length.
pub(crate) fn verify_fpdu(
    wire: &[u8],
    pos: u32,
    markers: bool,
    crc: bool,
) -> Result<u16, DecodeError> {
    let computed = crc.then(|| crc::crc32c(&wire[..wire.len() - CRC_LEN]));
    verify_fpdu_computed(wire, pos, markers, computed)
}

/// [`verify_fpdu`] with the CRC32c of the FPDU's octets before its CRC field already
/// computed (`None`: CRCs are off).
pub(super) fn verify_fpdu_computed(
    wire: &[u8],
    pos: u32,
    markers: bool,
    computed: Option<u32>,
) -> Result<u16, DecodeError> {
    let hoff = markers::header_offset(pos, markers);
    let ulpdu_len = u16::from_be_bytes([wire[hoff], wire[hoff + 1]]);
    let n = wire.len();
    // RFC 5044 §6: locate unambiguously and verify the CRC before passing the ULPDU on.
    if let Some(computed) = computed {
        let received = u32::from_le_bytes([wire[n - 4], wire[n - 3], wire[n - 2], wire[n - 1]]);
        check_crc(pos, received, computed)?;
    }
    // The quick check first; the error's details only when it fails.
    if markers && !markers_ok(wire, pos, hoff) {
        check_markers(wire, pos, hoff)?;
    }
    Ok(ulpdu_len)
}

/// Checks every marker of the FPDU wire image `wire` at stream position `pos` whose header
/// is at `hoff`, in order (RFC 5044 §8 error 3: we check every marker, in order data too).
/// Markers sit wherever the stream position is a multiple of 512; none can fall on the CRC
/// (the last 4 octets).
#[inline]
fn check_markers(wire: &[u8], pos: u32, hoff: usize) -> Result<(), DecodeError> {
    let n = wire.len();
    let mut w = markers::to_next_marker(pos);
    while w + CRC_LEN < n {
        // A leading marker (w == 0, hoff == 4) has FPDUPTR 0; the others point at the header.
        let expected = w.saturating_sub(hoff) as u16;
        let found = u16::from_be_bytes([wire[w + 2], wire[w + 3]]) & !3;
        check_marker(pos, w, found, expected)?;
        w += MARKER_INTERVAL;
    }
    Ok(())
}

/// Error 2 unless the FPDU at `pos` carries the CRC computed over it.
#[inline]
pub(super) fn check_crc(pos: u32, received: u32, computed: u32) -> Result<(), DecodeError> {
    if computed == received {
        return Ok(());
    }
    Err(DecodeError::Crc {
        pos,
        received,
        computed,
    })
}

/// Error 3 unless the marker `w` octets into the FPDU at `pos` has FPDUPTR `expected`.
#[inline]
pub(super) fn check_marker(
    pos: u32,
    w: usize,
    found: u16,
    expected: u16,
) -> Result<(), DecodeError> {
    if found == expected {
        return Ok(());
    }
    Err(DecodeError::Marker {
        marker_pos: pos.wrapping_add(w as u32),
        found,
        expected,
    })
}

/// Whether every marker of the FPDU is right: exactly when [`check_markers`] passes, without
/// the error's details.
#[inline]
pub(super) fn markers_ok(wire: &[u8], pos: u32, hoff: usize) -> bool {
    let end = wire.len().saturating_sub(CRC_LEN);
    let mut w = markers::to_next_marker(pos);
    if w == 0 && end > 0 {
        // The leading marker: FPDUPTR 0.
        if marker_ptr(wire, 0) != 0 {
            return false;
        }
        w = MARKER_INTERVAL;
    }
    let mut expected = w.wrapping_sub(hoff) as u16;
    while w < end {
        if marker_ptr(wire, w) != expected {
            return false;
        }
        w += MARKER_INTERVAL;
        expected = expected.wrapping_add(MARKER_INTERVAL as u16);
    }
    true
}

/// FPDUPTR (low two bits cleared) of the marker at `wire[w..]`, or !0 if it is not whole.
#[inline(always)]
fn marker_ptr(wire: &[u8], w: usize) -> u16 {
    match wire.get(w..) {
        Some([_, _, a, b, ..]) => u16::from_be_bytes([*a, *b]) & !3,
        _ => !0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The quick marker check passes exactly when the detailed one does: at every stream
        /// position (a leading marker or not), every length, with FPDUPTRs right, wrong or
        /// arbitrary.
        #[test]
        fn markers_ok_is_check_markers_passing(
            pos in prop_oneof![0u32..4096, (0u32..8).prop_map(|k| k * 512)],
            len in 0usize..3000,
            flips in proptest::collection::vec((0usize..3000, any::<u8>()), 0..3),
            fill in any::<u8>(),
        ) {
            let hoff = markers::header_offset(pos, true);
            let mut wire = vec![fill; len];
            // Every marker right first.
            let mut w = markers::to_next_marker(pos);
            while w + 4 <= len {
                let p = (w.saturating_sub(hoff) as u16).to_be_bytes();
                wire[w + 2] = p[0];
                wire[w + 3] = p[1];
                w += MARKER_INTERVAL;
            }
            for (at, x) in flips {
                if let Some(b) = wire.get_mut(at) {
                    *b ^= x;
                }
            }
            prop_assert_eq!(
                markers_ok(&wire, pos, hoff),
                check_markers(&wire, pos, hoff).is_ok()
            );
        }
    }
}
