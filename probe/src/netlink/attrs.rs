//! Reading netlink attributes the way the probe trusts them: through `netlink-packet-core`'s
//! checked attribute iterator, an attribute of the wrong size reading as absent, strings cut
//! to [`MAX_STRING`] characters, and nothing read past a malformed attribute.

use netlink_packet_core::{DefaultNla, Emitable, NlaBuffer, NlasIterator, NLA_F_NESTED};

/// The most characters kept of a string attribute.
pub(crate) const MAX_STRING: usize = 128;

/// The attributes of `buf`, in order, up to the first malformed one.
pub(crate) fn iter(buf: &[u8]) -> impl Iterator<Item = NlaBuffer<&[u8]>> {
    NlasIterator::new(buf).map_while(Result::ok)
}

/// The first attribute of type `kind`.
pub(crate) fn find(buf: &[u8], kind: u16) -> Option<NlaBuffer<&[u8]>> {
    iter(buf).find(|a| a.kind() == kind)
}

/// An attribute's value as a native-endian u32 (exactly four octets).
pub(crate) fn u32_of(a: &NlaBuffer<&[u8]>) -> Option<u32> {
    Some(u32::from_ne_bytes(a.value().try_into().ok()?))
}

/// An attribute's value as a native-endian u16 (exactly two octets).
pub(crate) fn u16_of(a: &NlaBuffer<&[u8]>) -> Option<u16> {
    Some(u16::from_ne_bytes(a.value().try_into().ok()?))
}

/// An attribute's value as a native-endian u64 (exactly eight octets).
pub(crate) fn u64_of(a: &NlaBuffer<&[u8]>) -> Option<u64> {
    Some(u64::from_ne_bytes(a.value().try_into().ok()?))
}

/// An attribute's value as a string: up to its first NUL, invalid UTF-8 replaced, at most
/// [`MAX_STRING`] characters.
pub(crate) fn string_of(a: &NlaBuffer<&[u8]>) -> String {
    let v = a.value();
    let v = v.split(|&b| b == 0).next().unwrap_or(v);
    String::from_utf8_lossy(v)
        .chars()
        .take(MAX_STRING)
        .collect()
}

/// The u32 of attribute `kind` in `buf`.
pub(crate) fn u32_in(buf: &[u8], kind: u16) -> Option<u32> {
    find(buf, kind).as_ref().and_then(u32_of)
}

/// The u64 of attribute `kind` in `buf`.
pub(crate) fn u64_in(buf: &[u8], kind: u16) -> Option<u64> {
    find(buf, kind).as_ref().and_then(u64_of)
}

/// The string of attribute `kind` in `buf`.
pub(crate) fn string_in(buf: &[u8], kind: u16) -> Option<String> {
    find(buf, kind).as_ref().map(string_of)
}

/// A u32 attribute to send.
pub(crate) fn u32_attr(kind: u16, v: u32) -> DefaultNla {
    DefaultNla::new(kind, v.to_ne_bytes().to_vec())
}

/// A NUL-terminated string attribute to send.
pub(crate) fn string_attr(kind: u16, s: &str) -> DefaultNla {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    DefaultNla::new(kind, v)
}

/// A nested attribute to send, holding `inner`.
pub(crate) fn nest(kind: u16, inner: &[DefaultNla]) -> DefaultNla {
    let mut v = vec![0u8; inner.buffer_len()];
    inner.emit(&mut v);
    DefaultNla::new(kind | NLA_F_NESTED, v)
}

/// Attributes as the kernel lays them out: length, type, value, padding to four (the fixtures
/// of the readers' tests).
#[cfg(test)]
pub(crate) fn encode(attrs: &[DefaultNla]) -> Vec<u8> {
    let mut v = vec![0u8; attrs.buffer_len()];
    attrs.emit(&mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_of_the_wrong_size_read_as_absent() {
        let buf = encode(&[
            DefaultNla::new(1, vec![1, 0, 0]),
            DefaultNla::new(2, 7u64.to_ne_bytes().to_vec()),
            u32_attr(3, 9),
        ]);
        assert_eq!(u32_in(&buf, 1), None);
        assert_eq!(u32_in(&buf, 2), None);
        assert_eq!(u64_in(&buf, 2), Some(7));
        assert_eq!(u32_in(&buf, 3), Some(9));
        assert_eq!(u32_in(&buf, 4), None);
    }

    #[test]
    fn nothing_is_read_past_a_malformed_attribute() {
        let mut buf = encode(&[u32_attr(1, 5)]);
        // A second attribute whose length runs past the buffer.
        buf.extend_from_slice(&[200, 0, 2, 0, 1, 2, 3, 4]);
        buf.extend_from_slice(&encode(&[u32_attr(3, 6)]));
        assert_eq!(u32_in(&buf, 1), Some(5));
        assert_eq!(u32_in(&buf, 2), None);
        assert_eq!(u32_in(&buf, 3), None, "read past the malformed attribute");
        // A length below the header's own four octets.
        assert_eq!(iter(&[2, 0, 1, 0, 0, 0, 0, 0]).count(), 0);
        assert_eq!(iter(&[1, 2, 3]).count(), 0);
        assert_eq!(iter(&[]).count(), 0);
    }

    #[test]
    fn strings_stop_at_nul_and_are_bounded() {
        let buf = encode(&[
            string_attr(1, "veth"),
            DefaultNla::new(2, b"ab\0cd".to_vec()),
            DefaultNla::new(3, vec![b'x'; 4000]),
            DefaultNla::new(4, vec![0xff, b'a']),
        ]);
        assert_eq!(string_in(&buf, 1).as_deref(), Some("veth"));
        assert_eq!(string_in(&buf, 2).as_deref(), Some("ab"));
        assert_eq!(string_in(&buf, 3).map(|s| s.len()), Some(MAX_STRING));
        assert_eq!(string_in(&buf, 4).as_deref(), Some("\u{fffd}a"));
    }

    #[test]
    fn a_nest_carries_its_attributes_and_the_nested_flag() {
        let n = nest(1, &[u32_attr(1, 42), string_attr(2, "eth0")]);
        let buf = encode(&[n]);
        let a = find(&buf, 1).unwrap();
        assert!(a.nested_flag());
        assert_eq!(u32_in(a.value(), 1), Some(42));
        assert_eq!(string_in(a.value(), 2).as_deref(), Some("eth0"));
    }
}
