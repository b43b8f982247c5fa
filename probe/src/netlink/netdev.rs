//! The netdev generic-netlink family (Linux 6.3; Documentation/netlink/specs/netdev.yaml):
//! `dev-get` answers which XDP actions the driver implements, whether AF_XDP zero-copy is one
//! of them and with how many segments, and the XDP metadata and AF_XDP TX features.

use super::genl::{ask, Family};
use super::{attrs, Conn, NlError};
use crate::readings::XdpFeatures;

/// The netdev family.
#[derive(Debug)]
pub(crate) struct Netdev;

impl Family for Netdev {
    const NAME: &'static str = "netdev";
    const VERSION: u8 = 1;
}

/// `NETDEV_CMD_DEV_GET`.
const CMD_DEV_GET: u8 = 1;

/// `NETDEV_A_DEV_*`.
mod dev {
    pub const IFINDEX: u16 = 1;
    pub const XDP_FEATURES: u16 = 3;
    pub const XDP_ZC_MAX_SEGS: u16 = 4;
    pub const XDP_RX_METADATA_FEATURES: u16 = 5;
    pub const XSK_FEATURES: u16 = 6;
}

/// The features of interface `ifindex`.
pub(crate) fn features(conn: &mut Conn, ifindex: u32) -> Result<XdpFeatures, NlError> {
    let reply = ask::<Netdev>(
        conn,
        CMD_DEV_GET,
        vec![attrs::u32_attr(dev::IFINDEX, ifindex)],
    )?;
    features_of(&reply, ifindex)
}

/// The features of a `dev-get` reply for `ifindex`: `xdp-features` must be there (a reply
/// without it, or for another interface, is an error); the others default to none (the kernel
/// puts `xdp-zc-max-segs` only beside `xsk-zerocopy`).
pub(crate) fn features_of(reply: &[u8], ifindex: u32) -> Result<XdpFeatures, NlError> {
    match attrs::u32_in(reply, dev::IFINDEX) {
        Some(i) if i == ifindex => {}
        Some(_) => return Err(NlError::Missing("the interface asked about")),
        None => return Err(NlError::Missing("an ifindex")),
    }
    Ok(XdpFeatures {
        xdp: attrs::u64_in(reply, dev::XDP_FEATURES).ok_or(NlError::Missing("xdp-features"))?,
        zc_max_segs: attrs::u32_in(reply, dev::XDP_ZC_MAX_SEGS),
        rx_metadata: attrs::u64_in(reply, dev::XDP_RX_METADATA_FEATURES).unwrap_or(0),
        xsk: attrs::u64_in(reply, dev::XSK_FEATURES).unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::attrs::{encode, u32_attr};
    use netlink_packet_core::DefaultNla;

    fn u64_attr(kind: u16, v: u64) -> DefaultNla {
        DefaultNla::new(kind, v.to_ne_bytes().to_vec())
    }

    #[test]
    fn a_zero_copy_driver_reports_its_segments() {
        let reply = encode(&[
            u32_attr(dev::IFINDEX, 4),
            // NETDEV_A_DEV_PAD before a u64, as nla_put_u64_64bit may add.
            DefaultNla::new(2, vec![]),
            u64_attr(dev::XDP_FEATURES, 0b010_1011),
            u32_attr(dev::XDP_ZC_MAX_SEGS, 5),
            u64_attr(dev::XDP_RX_METADATA_FEATURES, 0b11),
            u64_attr(dev::XSK_FEATURES, 0b1),
        ]);
        let f = features_of(&reply, 4).unwrap();
        assert_eq!(f.xdp, 0b010_1011);
        assert_eq!(f.zc_max_segs, Some(5));
        assert_eq!((f.rx_metadata, f.xsk), (0b11, 1));
    }

    #[test]
    fn replies_without_features_or_for_another_interface_are_errors() {
        let other = encode(&[u32_attr(dev::IFINDEX, 5), u64_attr(dev::XDP_FEATURES, 1)]);
        assert!(features_of(&other, 4).is_err());
        let bare = encode(&[u32_attr(dev::IFINDEX, 4)]);
        assert!(features_of(&bare, 4).is_err());
        // A u64 attribute of four octets reads as absent.
        let short = encode(&[u32_attr(dev::IFINDEX, 4), u32_attr(dev::XDP_FEATURES, 1)]);
        assert!(features_of(&short, 4).is_err());
        assert!(features_of(&[], 4).is_err());
    }
}
