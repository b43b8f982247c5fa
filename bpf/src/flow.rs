//! The `flows` map's key and value, mirrored octet for octet from `struct flow_key` and
//! `struct flow_value` in `steer.bpf.c`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::error::{BpfError, Result};

/// Octets in `struct flow_key`.
pub(crate) const FLOW_KEY_SIZE: usize = 40;
/// Octets in `struct host_key` (family, padding, two addresses).
pub(crate) const HOST_KEY_SIZE: usize = 36;
/// Octets in `struct flow_value`.
pub(crate) const FLOW_VALUE_SIZE: usize = 8;

/// Offsets into `struct flow_key`.
mod field {
    use std::ops::Range;

    pub const FAMILY: usize = 0;
    pub const LOCAL_PORT: Range<usize> = 4..6;
    pub const REMOTE_PORT: Range<usize> = 6..8;
    pub const LOCAL_ADDR: Range<usize> = 8..24;
    pub const REMOTE_ADDR: Range<usize> = 24..40;
    /// IPv4 addresses sit in the first word of the address arrays.
    pub const LOCAL_ADDR4: Range<usize> = 8..12;
    pub const REMOTE_ADDR4: Range<usize> = 24..28;
}

const FAMILY_V4: u8 = 4;
const FAMILY_V6: u8 = 6;

/// The 4-tuple of one TCP connection as this host sees it: `local` is this host's address
/// (the destination of the packets the program steers), `remote` the peer's.
///
/// Both addresses are kept in canonical form: an IPv4-mapped IPv6 address
/// (`::ffff:a.b.c.d`, as a dual-stack IPv6 socket reports an IPv4 peer) becomes the IPv4
/// address, because such a connection's packets are IPv4 on the wire. IPv6 flow labels and
/// scope ids are not part of the key (they do not identify a TCP connection on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    local: SocketAddr,
    remote: SocketAddr,
}

impl FlowKey {
    /// The key for packets from `remote` to `local`.
    ///
    /// Fails with [`BpfError::FamilyMismatch`] when, after mapping IPv4-mapped IPv6 addresses
    /// to IPv4, one address is IPv4 and the other IPv6.
    pub fn new(local: SocketAddr, remote: SocketAddr) -> Result<Self> {
        let (l, r) = (canonical(local), canonical(remote));
        if l.is_ipv4() != r.is_ipv4() {
            return Err(BpfError::FamilyMismatch { local, remote });
        }
        Ok(Self {
            local: l,
            remote: r,
        })
    }

    /// This host's end (canonical form).
    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// The peer's end (canonical form).
    pub fn remote(&self) -> SocketAddr {
        self.remote
    }

    /// The `struct flow_key` octets.
    pub(crate) fn to_bytes(self) -> [u8; FLOW_KEY_SIZE] {
        let mut b = [0u8; FLOW_KEY_SIZE];
        b[field::LOCAL_PORT].copy_from_slice(&self.local.port().to_be_bytes());
        b[field::REMOTE_PORT].copy_from_slice(&self.remote.port().to_be_bytes());
        match (self.local.ip(), self.remote.ip()) {
            (IpAddr::V4(l), IpAddr::V4(r)) => {
                b[field::FAMILY] = FAMILY_V4;
                b[field::LOCAL_ADDR4].copy_from_slice(&l.octets());
                b[field::REMOTE_ADDR4].copy_from_slice(&r.octets());
            }
            (IpAddr::V6(l), IpAddr::V6(r)) => {
                b[field::FAMILY] = FAMILY_V6;
                b[field::LOCAL_ADDR].copy_from_slice(&l.octets());
                b[field::REMOTE_ADDR].copy_from_slice(&r.octets());
            }
            // `new` guarantees one family.
            _ => unreachable!("FlowKey holds addresses of one family"),
        }
        b
    }

    /// Decodes a `struct flow_key` read back from the map.
    /// The `struct host_key` octets: family and both addresses, without the ports.
    pub(crate) fn host_bytes(self) -> [u8; HOST_KEY_SIZE] {
        let b = self.to_bytes();
        let mut h = [0u8; HOST_KEY_SIZE];
        h[..4].copy_from_slice(&b[..4]);
        h[4..].copy_from_slice(&b[field::LOCAL_ADDR.start..]);
        h
    }

    pub(crate) fn from_bytes(b: &[u8; FLOW_KEY_SIZE]) -> Result<Self> {
        let port = |r: std::ops::Range<usize>| u16::from_be_bytes([b[r.start], b[r.start + 1]]);
        let (lp, rp) = (port(field::LOCAL_PORT), port(field::REMOTE_PORT));
        let (l, r): (IpAddr, IpAddr) = match b[field::FAMILY] {
            FAMILY_V4 => {
                let a4 = |r: std::ops::Range<usize>| {
                    Ipv4Addr::from(<[u8; 4]>::try_from(&b[r]).expect("4-octet range"))
                };
                (
                    a4(field::LOCAL_ADDR4).into(),
                    a4(field::REMOTE_ADDR4).into(),
                )
            }
            FAMILY_V6 => {
                let a6 = |r: std::ops::Range<usize>| {
                    Ipv6Addr::from(<[u8; 16]>::try_from(&b[r]).expect("16-octet range"))
                };
                (a6(field::LOCAL_ADDR).into(), a6(field::REMOTE_ADDR).into())
            }
            family => return Err(BpfError::BadKey { family }),
        };
        Ok(Self {
            local: SocketAddr::new(l, lp),
            remote: SocketAddr::new(r, rp),
        })
    }
}

/// IPv4-mapped IPv6 → IPv4; flow label and scope id dropped.
fn canonical(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V4(_) => a,
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => SocketAddr::new((*v6.ip()).into(), v6.port()),
        },
    }
}

/// What the data path stores with a steered flow. The XDP program only tests for presence;
/// the value is for the data path's own bookkeeping (e.g. listing flows).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FlowValue {
    /// The data path's identifier for the flow.
    pub flow_id: u32,
    /// Reserved: 0.
    pub flags: u32,
}

impl FlowValue {
    /// A value with `flow_id` and no flags.
    pub const fn new(flow_id: u32) -> Self {
        Self { flow_id, flags: 0 }
    }

    /// The `struct flow_value` octets (host byte order, as the kernel stores them).
    pub(crate) fn to_bytes(self) -> [u8; FLOW_VALUE_SIZE] {
        let mut b = [0u8; FLOW_VALUE_SIZE];
        b[0..4].copy_from_slice(&self.flow_id.to_ne_bytes());
        b[4..8].copy_from_slice(&self.flags.to_ne_bytes());
        b
    }

    /// Decodes a `struct flow_value`.
    pub(crate) fn from_bytes(b: &[u8; FLOW_VALUE_SIZE]) -> Self {
        Self {
            flow_id: u32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
            flags: u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_layout() {
        let k = FlowKey::new(sa("10.0.0.2:7777"), sa("10.0.0.1:40000")).unwrap();
        let b = k.to_bytes();
        let mut want = [0u8; FLOW_KEY_SIZE];
        want[0] = 4;
        want[4..6].copy_from_slice(&[0x1e, 0x61]); // 7777
        want[6..8].copy_from_slice(&[0x9c, 0x40]); // 40000
        want[8..12].copy_from_slice(&[10, 0, 0, 2]);
        want[24..28].copy_from_slice(&[10, 0, 0, 1]);
        assert_eq!(b, want);
        assert_eq!(FlowKey::from_bytes(&b).unwrap(), k);
    }

    #[test]
    fn ipv6_layout() {
        let k = FlowKey::new(sa("[fd00::2]:443"), sa("[fd00::1]:1")).unwrap();
        let b = k.to_bytes();
        assert_eq!(b[0], 6);
        assert_eq!(&b[1..4], &[0, 0, 0]);
        assert_eq!(&b[4..8], &[0x01, 0xbb, 0x00, 0x01]);
        assert_eq!(&b[8..24], &"fd00::2".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(&b[24..40], &"fd00::1".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(FlowKey::from_bytes(&b).unwrap(), k);
    }

    #[test]
    fn v4_mapped_is_ipv4() {
        let mapped = FlowKey::new(sa("[::ffff:10.0.0.2]:80"), sa("[::ffff:10.0.0.1]:9")).unwrap();
        let plain = FlowKey::new(sa("10.0.0.2:80"), sa("10.0.0.1:9")).unwrap();
        assert_eq!(mapped, plain);
        assert_eq!(mapped.to_bytes(), plain.to_bytes());
        // Mixed spellings of the same family are fine too.
        assert_eq!(
            FlowKey::new(sa("[::ffff:10.0.0.2]:80"), sa("10.0.0.1:9")).unwrap(),
            plain
        );
    }

    #[test]
    fn scope_and_flowinfo_ignored() {
        let a = FlowKey::new(sa("[fe80::1%3]:80"), sa("[fe80::2%3]:9")).unwrap();
        let b = FlowKey::new(sa("[fe80::1]:80"), sa("[fe80::2]:9")).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn family_mismatch() {
        let e = FlowKey::new(sa("10.0.0.2:80"), sa("[fd00::1]:9")).unwrap_err();
        assert!(matches!(e, BpfError::FamilyMismatch { .. }), "{e}");
    }

    #[test]
    fn bad_family_on_read_back() {
        let mut b = [0u8; FLOW_KEY_SIZE];
        b[0] = 5;
        assert!(matches!(
            FlowKey::from_bytes(&b),
            Err(BpfError::BadKey { family: 5 })
        ));
    }

    #[test]
    fn value_round_trip() {
        let v = FlowValue {
            flow_id: 0xdead_beef,
            flags: 3,
        };
        assert_eq!(FlowValue::from_bytes(&v.to_bytes()), v);
    }
}
