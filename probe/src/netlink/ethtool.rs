//! ethtool over netlink (linux/ethtool_netlink.h): `CHANNELS_GET` for the queues and
//! `FEATURES_GET` for the offloads, the latter with verbose bitsets, which carry each
//! feature's name (names are stable; bit numbers are not).

use super::genl::{ask, Family};
use super::{attrs, Conn, NlError};
use crate::readings::{Offload, QueueSource, Queues, OFFLOADS};

/// The ethtool family.
#[derive(Debug)]
pub(crate) struct Ethtool;

impl Family for Ethtool {
    const NAME: &'static str = "ethtool";
    const VERSION: u8 = 1;
}

const MSG_FEATURES_GET: u8 = 11;
const MSG_CHANNELS_GET: u8 = 17;
/// `ETHTOOL_A_*_HEADER`: attribute 1 of every request.
const A_HEADER: u16 = 1;
/// `ETHTOOL_A_HEADER_DEV_INDEX`.
const A_HEADER_DEV_INDEX: u16 = 1;

/// `ETHTOOL_A_CHANNELS_*`.
mod channels {
    pub const RX_MAX: u16 = 2;
    pub const TX_MAX: u16 = 3;
    pub const COMBINED_MAX: u16 = 5;
    pub const RX_COUNT: u16 = 6;
    pub const TX_COUNT: u16 = 7;
    pub const COMBINED_COUNT: u16 = 9;
}

/// `ETHTOOL_A_FEATURES_*`: each a bitset.
mod features {
    pub const HW: u16 = 2;
    pub const ACTIVE: u16 = 4;
    pub const NOCHANGE: u16 = 5;
}

/// `ETHTOOL_A_BITSET_*` and `ETHTOOL_A_BITSET_BIT_*`.
mod bitset {
    pub const NOMASK: u16 = 1;
    pub const BITS: u16 = 3;
    pub const BITS_BIT: u16 = 1;
    pub const BIT_NAME: u16 = 2;
    pub const BIT_VALUE: u16 = 3;
}

/// The most bits of a bitset read (the kernel has about 70 features).
const MAX_BITS: usize = 1024;

fn header(ifindex: u32) -> Vec<netlink_packet_core::DefaultNla> {
    // No ETHTOOL_FLAG_COMPACT_BITSETS: bitsets come with names.
    vec![attrs::nest(
        A_HEADER,
        &[attrs::u32_attr(A_HEADER_DEV_INDEX, ifindex)],
    )]
}

/// The queues of interface `ifindex`; `EOPNOTSUPP` from a driver without `get_channels`.
pub(crate) fn channels(conn: &mut Conn, ifindex: u32) -> Result<Queues, NlError> {
    let reply = ask::<Ethtool>(conn, MSG_CHANNELS_GET, header(ifindex))?;
    Ok(queues_of(&reply))
}

/// The queues of a `CHANNELS_GET` reply. The kernel leaves out a kind of channel whose maximum
/// is 0: absent counts are 0.
pub(crate) fn queues_of(reply: &[u8]) -> Queues {
    let count = |k| attrs::u32_in(reply, k).unwrap_or(0);
    Queues {
        source: QueueSource::Ethtool,
        rx: count(channels::RX_COUNT),
        tx: count(channels::TX_COUNT),
        combined: count(channels::COMBINED_COUNT),
        rx_max: attrs::u32_in(reply, channels::RX_MAX),
        tx_max: attrs::u32_in(reply, channels::TX_MAX),
        combined_max: attrs::u32_in(reply, channels::COMBINED_MAX),
    }
}

/// The offloads of [`OFFLOADS`] of interface `ifindex`.
pub(crate) fn offloads(conn: &mut Conn, ifindex: u32) -> Result<Vec<Offload>, NlError> {
    let reply = ask::<Ethtool>(conn, MSG_FEATURES_GET, header(ifindex))?;
    offloads_of(&reply)
}

/// The offloads of a `FEATURES_GET` reply: active when set in `active`, changeable when set in
/// `hw` and not in `nochange` (what `ethtool -k` shows as "[fixed]" otherwise). The kernel
/// sends `hw` with a mask (every feature listed, the set ones with `VALUE`) and the others as
/// lists.
pub(crate) fn offloads_of(reply: &[u8]) -> Result<Vec<Offload>, NlError> {
    let set = |kind| {
        attrs::find(reply, kind)
            .map(|a| set_bits(a.value()))
            .ok_or(NlError::Missing("a features bitset"))
    };
    let (hw, active, nochange) = (
        set(features::HW)?,
        set(features::ACTIVE)?,
        set(features::NOCHANGE)?,
    );
    let has = |bits: &[String], n: &str| bits.iter().any(|b| b == n);
    Ok(OFFLOADS
        .iter()
        .map(|o| Offload {
            name: o.shown.to_string(),
            active: has(&active, o.kernel),
            changeable: has(&hw, o.kernel) && !has(&nochange, o.kernel),
        })
        .collect())
}

/// The names of the bits set in a verbose bitset: with `NOMASK` (a list) every bit listed is
/// set; otherwise a listed bit is set when it carries `VALUE`.
fn set_bits(bitset_attr: &[u8]) -> Vec<String> {
    let list = attrs::find(bitset_attr, bitset::NOMASK).is_some();
    let Some(bits) = attrs::find(bitset_attr, bitset::BITS) else {
        return Vec::new();
    };
    attrs::iter(bits.value())
        .filter(|b| b.kind() == bitset::BITS_BIT)
        .take(MAX_BITS)
        .filter(|b| list || attrs::find(b.value(), bitset::BIT_VALUE).is_some())
        .filter_map(|b| attrs::string_in(b.value(), bitset::BIT_NAME))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::attrs::{encode, nest, string_attr, u32_attr};
    use netlink_packet_core::DefaultNla;

    /// A verbose bit: index, name, and VALUE when `value` (masked bitsets only).
    fn bit(index: u32, name: &str, value: bool) -> DefaultNla {
        let mut v = vec![u32_attr(1, index), string_attr(bitset::BIT_NAME, name)];
        if value {
            v.push(DefaultNla::new(bitset::BIT_VALUE, vec![]));
        }
        nest(bitset::BITS_BIT, &v)
    }

    /// A list bitset (NOMASK) of `names`, as the kernel sends every features bitset.
    fn list(kind: u16, names: &[&str]) -> DefaultNla {
        let bits: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, n)| bit(i as u32, n, false))
            .collect();
        nest(
            kind,
            &[
                DefaultNla::new(bitset::NOMASK, vec![]),
                u32_attr(2, 64),
                nest(bitset::BITS, &bits),
            ],
        )
    }

    /// A masked bitset: every one of `all` listed, those in `set` with VALUE (as the kernel
    /// sends `hw`).
    fn masked(kind: u16, all: &[&str], set: &[&str]) -> DefaultNla {
        let bits: Vec<_> = all
            .iter()
            .enumerate()
            .map(|(i, n)| bit(i as u32, n, set.contains(n)))
            .collect();
        nest(kind, &[u32_attr(2, 64), nest(bitset::BITS, &bits)])
    }

    /// The kernel's names of every feature the tests mention.
    const ALL: [&str; 6] = [
        "rx-lro",
        "rx-gro-hw",
        "rx-gro",
        "rx-gro-list",
        "rx-checksum",
        "rx-udp-gro-forwarding",
    ];

    #[test]
    fn features_lists_give_active_and_fixed() {
        let reply = encode(&[
            masked(features::HW, &ALL, &["rx-gro-hw", "rx-gro", "rx-lro"]),
            list(3, &[]),
            list(features::ACTIVE, &["rx-lro", "rx-gro", "rx-checksum"]),
            list(features::NOCHANGE, &["rx-lro"]),
        ]);
        let o = offloads_of(&reply).unwrap();
        let get = |n: &str| o.iter().find(|x| x.name == n).unwrap().clone();
        assert_eq!(o.len(), OFFLOADS.len());
        let lro = get("large-receive-offload");
        assert!(lro.active && !lro.changeable, "{lro:?}");
        let gro_hw = get("rx-gro-hw");
        assert!(!gro_hw.active && gro_hw.changeable, "{gro_hw:?}");
        let gro = get("generic-receive-offload");
        assert!(gro.active && gro.changeable, "{gro:?}");
        let list = get("rx-gro-list");
        assert!(!list.active && !list.changeable, "{list:?}");
    }

    #[test]
    fn a_masked_bitset_counts_only_bits_with_value() {
        let reply = encode(&[
            masked(features::HW, &ALL, &[]),
            masked(features::ACTIVE, &["rx-gro-hw", "rx-lro"], &["rx-gro-hw"]),
            list(features::NOCHANGE, &[]),
        ]);
        let o = offloads_of(&reply).unwrap();
        assert!(o.iter().find(|x| x.name == "rx-gro-hw").unwrap().active);
        assert!(
            !o.iter()
                .find(|x| x.name == "large-receive-offload")
                .unwrap()
                .active
        );
    }

    #[test]
    fn a_reply_without_its_bitsets_is_an_error_not_all_off() {
        let reply = encode(&[masked(features::HW, &ALL, &["rx-gro-hw"])]);
        assert!(matches!(offloads_of(&reply), Err(NlError::Missing(_))));
        assert!(matches!(offloads_of(&[1, 2, 3]), Err(NlError::Missing(_))));
    }

    #[test]
    fn channels_absent_are_zero_and_maxima_unknown() {
        let reply = encode(&[
            u32_attr(channels::RX_MAX, 4),
            u32_attr(channels::RX_COUNT, 2),
            u32_attr(channels::TX_MAX, 4),
            u32_attr(channels::TX_COUNT, 3),
            // A count of the wrong size reads as absent.
            DefaultNla::new(channels::COMBINED_COUNT, vec![1]),
        ]);
        let q = queues_of(&reply);
        assert_eq!((q.rx, q.tx, q.combined), (2, 3, 0));
        assert_eq!(
            (q.rx_max, q.tx_max, q.combined_max),
            (Some(4), Some(4), None)
        );
        assert_eq!(q.rx_in_use(), 2);
    }
}
