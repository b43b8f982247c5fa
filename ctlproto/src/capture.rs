//! Packet capture over the control socket: the frames the datapath streams to a capturing
//! client ([`crate::Message::StartCapture`]), the bounds both sides enforce, and how the
//! bytes of a frame travel in JSON (base64: a third larger than the frame, not four times as
//! an array of numbers would be).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Octets of a classic libpcap file header.
pub const PCAP_FILE_HEADER_LEN: u64 = 24;
/// Octets of a classic libpcap record header (before each frame's captured octets).
pub const PCAP_RECORD_HEADER_LEN: u64 = 16;
/// Longest capture: one hour.
pub const MAX_DURATION_MS: u64 = 3_600_000;
/// Largest capture file: 4 GiB.
pub const MAX_BYTES: u64 = 4 << 30;
/// Smallest `max_bytes`: the file header and one record of one octet.
pub const MIN_BYTES: u64 = PCAP_FILE_HEADER_LEN + PCAP_RECORD_HEADER_LEN + 1;
/// Largest snapshot length (Wireshark's own limit).
pub const MAX_SNAPLEN: u32 = 262_144;
/// Default `max_bytes` of `mpa-control capture`: 64 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// Default snapshot length of `mpa-control capture`.
pub const DEFAULT_SNAPLEN: u32 = 65_535;

/// Which way a captured frame went, as the datapath saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaptureDirection {
    /// Received from the wire (steered to the datapath by XDP).
    Rx,
    /// Sent by the datapath.
    Tx,
}

/// One captured frame: Ethernet header first, at most the capture's snapshot length.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturedFrame {
    /// When the worker handled it, CLOCK_REALTIME nanoseconds (one reading per poll of the
    /// worker: frames of one burst share it).
    pub ts_ns: u64,
    /// Which way.
    pub direction: CaptureDirection,
    /// The frame's length on the wire (before truncation to the snapshot length).
    pub orig_len: u32,
    /// The captured octets.
    #[serde(with = "base64")]
    pub data: Vec<u8>,
    /// Not seen on the wire by the datapath but rebuilt from the hand-over: the MPA startup
    /// frames the kernel carried before the connection moved (so that dissectors that need
    /// them, like Wireshark's, recognise the FPDUs that follow).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reconstructed: bool,
}

/// Why a capture request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaptureBoundError {
    /// Duration zero or above [`MAX_DURATION_MS`].
    #[error("capture duration {0} ms: must be 1 ms to {MAX_DURATION_MS} ms (one hour)")]
    Duration(u64),
    /// Size bound below [`MIN_BYTES`] or above [`MAX_BYTES`].
    #[error("capture size bound {0} octets: must be {MIN_BYTES} to {MAX_BYTES} (4 GiB)")]
    Bytes(u64),
    /// Snapshot length zero or above [`MAX_SNAPLEN`].
    #[error("snapshot length {0}: must be 1 to {MAX_SNAPLEN}")]
    Snaplen(u32),
}

/// Checks a capture request's bounds (both the datapath and `mpa-control` call it).
pub fn check_request(
    max_bytes: u64,
    duration_ms: u64,
    snaplen: u32,
) -> Result<(), CaptureBoundError> {
    if duration_ms == 0 || duration_ms > MAX_DURATION_MS {
        return Err(CaptureBoundError::Duration(duration_ms));
    }
    if !(MIN_BYTES..=MAX_BYTES).contains(&max_bytes) {
        return Err(CaptureBoundError::Bytes(max_bytes));
    }
    if snaplen == 0 || snaplen > MAX_SNAPLEN {
        return Err(CaptureBoundError::Snaplen(snaplen));
    }
    Ok(())
}

/// Octets a frame of `captured` octets adds to a pcap file.
pub fn pcap_record_len(captured: usize) -> u64 {
    PCAP_RECORD_HEADER_LEN + captured as u64
}

/// Standard base64 (RFC 4648, with padding) for `#[serde(with = "base64")]`.
pub(crate) mod base64 {
    use super::*;

    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub fn serialize<S: Serializer>(data: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode(data))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        decode(&s).ok_or_else(|| serde::de::Error::custom("invalid base64"))
    }

    pub fn encode(data: &[u8]) -> String {
        let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
        for chunk in data.chunks(3) {
            let b = [
                chunk[0],
                chunk.get(1).copied().unwrap_or(0),
                chunk.get(2).copied().unwrap_or(0),
            ];
            let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }

    pub fn decode(s: &str) -> Option<Vec<u8>> {
        let s = s.as_bytes();
        if !s.len().is_multiple_of(4) {
            return None;
        }
        let mut out = Vec::with_capacity(s.len() / 4 * 3);
        let quads = s.len() / 4;
        for (q, chunk) in s.chunks(4).enumerate() {
            let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
            if pad > 2 || (pad > 0 && q + 1 != quads) {
                return None;
            }
            let mut n = 0u32;
            for &c in &chunk[..4 - pad] {
                n = n << 6 | value(c)?;
            }
            n <<= 6 * pad as u32;
            let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
            out.extend_from_slice(&bytes[..3 - pad]);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::base64::{decode, encode};
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(plain.as_bytes()), coded);
            assert_eq!(decode(coded).unwrap(), plain.as_bytes());
        }
        let all: Vec<u8> = (0..=255).chain((0..=255).rev()).collect();
        for n in 0..all.len() {
            assert_eq!(decode(&encode(&all[..n])).unwrap(), &all[..n]);
        }
        for bad in ["Zg=", "Z===", "Zg==Zg==", "Zm9*", "=Zm9"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn frames_travel_as_base64_and_reconstructed_is_optional() {
        let f = CapturedFrame {
            ts_ns: 5,
            direction: CaptureDirection::Tx,
            orig_len: 60,
            data: b"foobar".to_vec(),
            reconstructed: false,
        };
        let j = serde_json::to_value(&f).unwrap();
        assert_eq!(
            j,
            serde_json::json!({"ts_ns": 5, "direction": "tx", "orig_len": 60, "data": "Zm9vYmFy"})
        );
        let back: CapturedFrame = serde_json::from_value(j).unwrap();
        assert_eq!(back, f);
        let bad = serde_json::json!({"ts_ns": 5, "direction": "rx", "orig_len": 6, "data": "%%%%"});
        assert!(serde_json::from_value::<CapturedFrame>(bad).is_err());
    }

    #[test]
    fn bounds_are_checked() {
        assert_eq!(
            check_request(DEFAULT_MAX_BYTES, 1000, DEFAULT_SNAPLEN),
            Ok(())
        );
        assert_eq!(
            check_request(DEFAULT_MAX_BYTES, 0, 100),
            Err(CaptureBoundError::Duration(0))
        );
        assert_eq!(
            check_request(DEFAULT_MAX_BYTES, MAX_DURATION_MS + 1, 100),
            Err(CaptureBoundError::Duration(MAX_DURATION_MS + 1))
        );
        assert_eq!(check_request(MIN_BYTES, MAX_DURATION_MS, 1), Ok(()));
        assert_eq!(
            check_request(MIN_BYTES - 1, 10, 100),
            Err(CaptureBoundError::Bytes(MIN_BYTES - 1))
        );
        assert_eq!(
            check_request(MAX_BYTES + 1, 10, 100),
            Err(CaptureBoundError::Bytes(MAX_BYTES + 1))
        );
        assert_eq!(
            check_request(MAX_BYTES, 10, 0),
            Err(CaptureBoundError::Snaplen(0))
        );
        assert_eq!(
            check_request(MAX_BYTES, 10, MAX_SNAPLEN + 1),
            Err(CaptureBoundError::Snaplen(MAX_SNAPLEN + 1))
        );
        assert_eq!(pcap_record_len(100), 116);
    }
}
