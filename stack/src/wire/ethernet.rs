//! Ethernet II frames (IEEE 802.3 §3.2.6), with at most one 802.1Q / 802.1ad VLAN tag.
//!
//! [`EthernetFrame`] views a whole frame; when the first EtherType is a VLAN TPID the tag is
//! skipped and reported by [`EthernetFrame::vlan`], and [`EthernetFrame::ethertype`] /
//! [`EthernetFrame::payload`] describe what follows it. A second (stacked) tag is not looked
//! into: its TPID is reported as the EtherType, which no caller accepts as IP.
//!
//! The frame check sequence is not part of the buffer (NICs strip it before AF_XDP sees the
//! frame).

#![forbid(unsafe_code)]

use std::ops::Range;

mod field {
    use std::ops::Range;
    pub(crate) const DST: Range<usize> = 0..6;
    pub(crate) const SRC: Range<usize> = 6..12;
    pub(crate) const ETHERTYPE: Range<usize> = 12..14;
    /// With a VLAN tag: the TCI after the TPID, then the inner EtherType.
    pub(crate) const VLAN_TCI: Range<usize> = 14..16;
    pub(crate) const VLAN_ETHERTYPE: Range<usize> = 16..18;
}

/// A MAC address, in transmission order.
pub(crate) type MacAddr = [u8; 6];

/// EtherType of IPv4.
pub(crate) const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub(crate) const ETHERTYPE_IPV6: u16 = 0x86dd;
/// TPID of an IEEE 802.1Q (customer) VLAN tag.
const ETHERTYPE_VLAN: u16 = 0x8100;
/// TPID of an IEEE 802.1ad (service, "Q-in-Q") VLAN tag.
const ETHERTYPE_QINQ: u16 = 0x88a8;

/// Octets of an untagged Ethernet header.
pub(crate) const HEADER_LEN: usize = 14;
/// Octets one VLAN tag adds.
const VLAN_TAG_LEN: usize = 4;

/// What is wrong with an Ethernet frame, or why one could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EthernetError {
    /// The buffer is shorter than the header (with its VLAN tag, when there is one).
    #[error("truncated Ethernet header: need {need} octets, have {have}")]
    Truncated {
        /// Octets needed.
        need: usize,
        /// Octets present.
        have: usize,
    },
}

/// One VLAN tag: its TPID (0x8100, or 0x88a8 for the outer tag of QinQ) and tag control
/// information (PCP, DEI, VID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanTag {
    /// Tag protocol identifier.
    pub(crate) tpid: u16,
    /// Tag control information: PCP (3 bits), DEI (1 bit), VID (12 bits).
    tci: u16,
}

impl VlanTag {
    /// The VLAN identifier (low 12 bits of the TCI).
    pub(crate) fn vid(&self) -> u16 {
        self.tci & 0x0fff
    }
    /// The priority code point (top 3 bits of the TCI).
    #[cfg(test)]
    pub(crate) fn pcp(&self) -> u8 {
        (self.tci >> 13) as u8
    }
}

fn is_vlan_tpid(t: u16) -> bool {
    t == ETHERTYPE_VLAN || t == ETHERTYPE_QINQ
}

/// A view over an Ethernet II frame (without FCS).
///
/// Contract: after [`EthernetFrame::check_len`] succeeds, no accessor panics.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps a buffer without checking it.
    pub(crate) fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wraps a buffer after [`EthernetFrame::check_len`].
    pub(crate) fn new_checked(buffer: T) -> Result<Self, EthernetError> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Checks that the buffer holds the header, and the whole VLAN tag and inner EtherType
    /// when the outer EtherType is a VLAN TPID.
    pub(crate) fn check_len(&self) -> Result<(), EthernetError> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(EthernetError::Truncated {
                need: HEADER_LEN,
                have,
            });
        }
        let need = self.header_len();
        if have < need {
            return Err(EthernetError::Truncated { need, have });
        }
        Ok(())
    }

    fn u16_at(&self, r: Range<usize>) -> u16 {
        let b = &self.buffer.as_ref()[r];
        u16::from_be_bytes([b[0], b[1]])
    }

    #[cfg(test)]
    fn mac_at(&self, r: Range<usize>) -> MacAddr {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.buffer.as_ref()[r]);
        m
    }

    /// Destination MAC address.
    #[cfg(test)]
    pub(crate) fn dst_addr(&self) -> MacAddr {
        self.mac_at(field::DST)
    }
    /// Source MAC address.
    #[cfg(test)]
    pub(crate) fn src_addr(&self) -> MacAddr {
        self.mac_at(field::SRC)
    }
    /// The EtherType at octet 12 (a TPID when the frame is tagged).
    fn outer_ethertype(&self) -> u16 {
        self.u16_at(field::ETHERTYPE)
    }
    /// The VLAN tag, when the outer EtherType is an 802.1Q or 802.1ad TPID.
    pub(crate) fn vlan(&self) -> Option<VlanTag> {
        let tpid = self.outer_ethertype();
        is_vlan_tpid(tpid).then(|| VlanTag {
            tpid,
            tci: self.u16_at(field::VLAN_TCI),
        })
    }
    /// Header octets: 14, or 18 with a VLAN tag.
    pub(crate) fn header_len(&self) -> usize {
        if is_vlan_tpid(self.outer_ethertype()) {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }
    /// The EtherType of the payload (after the VLAN tag, if any).
    pub(crate) fn ethertype(&self) -> u16 {
        if is_vlan_tpid(self.outer_ethertype()) {
            self.u16_at(field::VLAN_ETHERTYPE)
        } else {
            self.outer_ethertype()
        }
    }
    /// The payload: everything after the header, Ethernet padding included (the network
    /// layer's own length trims it).
    #[cfg(test)]
    pub(crate) fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC address.
    #[cfg(test)]
    pub(crate) fn set_dst_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a)
    }
    /// Sets the source MAC address.
    #[cfg(test)]
    pub(crate) fn set_src_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a)
    }
    /// Sets the EtherType at octet 12 (the TPID of a tagged frame).
    #[cfg(test)]
    fn set_outer_ethertype(&mut self, t: u16) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&t.to_be_bytes())
    }
    /// The payload, writable.
    #[cfg(test)]
    pub(crate) fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

/// The meaning of an Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EthernetRepr {
    /// Source MAC address.
    pub(crate) src_addr: MacAddr,
    /// Destination MAC address.
    pub(crate) dst_addr: MacAddr,
    /// One VLAN tag, if any.
    pub(crate) vlan: Option<VlanTag>,
    /// EtherType of the payload.
    pub(crate) ethertype: u16,
}

impl EthernetRepr {
    /// Parses a frame's header.
    #[cfg(test)]
    pub(crate) fn parse<T: AsRef<[u8]>>(
        frame: &EthernetFrame<T>,
    ) -> Result<EthernetRepr, EthernetError> {
        frame.check_len()?;
        Ok(EthernetRepr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            vlan: frame.vlan(),
            ethertype: frame.ethertype(),
        })
    }

    /// Octets of the header [`EthernetRepr::emit`] writes.
    fn buffer_len(&self) -> usize {
        HEADER_LEN + if self.vlan.is_some() { VLAN_TAG_LEN } else { 0 }
    }

    /// Writes the header at the start of `buf`; returns its length.
    pub(crate) fn emit(&self, buf: &mut [u8]) -> Result<usize, EthernetError> {
        let need = self.buffer_len();
        let have = buf.len();
        let Some(h) = buf.get_mut(..need) else {
            return Err(EthernetError::Truncated { need, have });
        };
        h[field::DST].copy_from_slice(&self.dst_addr);
        h[field::SRC].copy_from_slice(&self.src_addr);
        match self.vlan {
            Some(tag) => {
                h[field::ETHERTYPE].copy_from_slice(&tag.tpid.to_be_bytes());
                h[field::VLAN_TCI].copy_from_slice(&tag.tci.to_be_bytes());
                h[field::VLAN_ETHERTYPE].copy_from_slice(&self.ethertype.to_be_bytes());
            }
            None => h[field::ETHERTYPE].copy_from_slice(&self.ethertype.to_be_bytes()),
        }
        Ok(need)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// dst 52:54:00:12:34:56, src 52:54:00:ab:cd:ef, IPv4, two payload octets.
    const UNTAGGED: [u8; 16] = [
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x52, 0x54, 0x00, 0xab, 0xcd, 0xef, 0x08, 0x00, 0xaa,
        0xbb,
    ];
    /// The same with an 802.1Q tag: PCP 5, VID 100, then IPv6.
    const TAGGED: [u8; 20] = [
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x52, 0x54, 0x00, 0xab, 0xcd, 0xef, 0x81, 0x00, 0xa0,
        0x64, 0x86, 0xdd, 0xaa, 0xbb,
    ];

    #[test]
    fn deconstruct_untagged() {
        let f = EthernetFrame::new_checked(&UNTAGGED[..]).unwrap();
        assert_eq!(f.dst_addr(), [0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
        assert_eq!(f.src_addr(), [0x52, 0x54, 0x00, 0xab, 0xcd, 0xef]);
        assert_eq!(f.ethertype(), ETHERTYPE_IPV4);
        assert_eq!(f.vlan(), None);
        assert_eq!(f.header_len(), 14);
        assert_eq!(f.payload(), &[0xaa, 0xbb]);
    }

    #[test]
    fn deconstruct_tagged() {
        let f = EthernetFrame::new_checked(&TAGGED[..]).unwrap();
        let tag = f.vlan().unwrap();
        assert_eq!(tag.tpid, ETHERTYPE_VLAN);
        assert_eq!(tag.vid(), 100);
        assert_eq!(tag.pcp(), 5);
        assert_eq!(f.ethertype(), ETHERTYPE_IPV6);
        assert_eq!(f.header_len(), 18);
        assert_eq!(f.payload(), &[0xaa, 0xbb]);
    }

    #[test]
    fn qinq_tag_is_skipped_too() {
        let mut b = TAGGED;
        b[12..14].copy_from_slice(&ETHERTYPE_QINQ.to_be_bytes());
        let f = EthernetFrame::new_checked(&b[..]).unwrap();
        assert_eq!(f.vlan().unwrap().tpid, ETHERTYPE_QINQ);
        assert_eq!(f.ethertype(), ETHERTYPE_IPV6);
    }

    #[test]
    fn truncated() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                EthernetFrame::new_checked(&UNTAGGED[..len]).unwrap_err(),
                EthernetError::Truncated {
                    need: HEADER_LEN,
                    have: len
                }
            );
        }
        for len in HEADER_LEN..18 {
            assert_eq!(
                EthernetFrame::new_checked(&TAGGED[..len]).unwrap_err(),
                EthernetError::Truncated {
                    need: 18,
                    have: len
                }
            );
        }
        // A bare header with no payload is fine.
        assert!(EthernetFrame::new_checked(&TAGGED[..18]).is_ok());
    }

    #[test]
    fn emit_round_trip() {
        for (fixture, n) in [(&UNTAGGED[..], 14), (&TAGGED[..], 18)] {
            let repr = EthernetRepr::parse(&EthernetFrame::new_unchecked(fixture)).unwrap();
            assert_eq!(repr.buffer_len(), n);
            let mut buf = [0u8; 20];
            assert_eq!(repr.emit(&mut buf).unwrap(), n);
            assert_eq!(&buf[..n], &fixture[..n]);
            assert_eq!(
                repr.emit(&mut buf[..n - 1]).unwrap_err(),
                EthernetError::Truncated {
                    need: n,
                    have: n - 1
                }
            );
        }
    }

    #[test]
    fn setters() {
        let mut b = [0u8; 16];
        let mut f = EthernetFrame::new_unchecked(&mut b[..]);
        f.set_dst_addr([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
        f.set_src_addr([0x52, 0x54, 0x00, 0xab, 0xcd, 0xef]);
        f.set_outer_ethertype(ETHERTYPE_IPV4);
        f.payload_mut().copy_from_slice(&[0xaa, 0xbb]);
        assert_eq!(b, UNTAGGED);
    }
}
