//! The link as rtnetlink reports it (`RTM_GETLINK` by name, in the caller's network namespace):
//! index, kind, MTU and its range, queues allocated, parent device, an XDP program attached.

use super::{Conn, NlError};
use crate::readings::{Link, XdpAttached};
use netlink_packet_route::link::{
    InfoKind, LinkAttribute, LinkExtentMask, LinkFlags, LinkInfo, LinkLayerType, LinkMessage,
    LinkXdp, State, XdpAttached as Attached,
};
use netlink_packet_route::RouteNetlinkMessage;

/// `ENODEV`: the kernel's answer for a name no interface has.
pub(crate) const ENODEV: i32 = 19;

/// The link named `iface`; `Ok(None)` when there is none in this network namespace.
pub(crate) fn get(conn: &mut Conn, iface: &str) -> Result<Option<Link>, NlError> {
    let mut req = LinkMessage::default();
    req.attributes
        .push(LinkAttribute::IfName(iface.to_string()));
    // Statistics are not needed; leave them out of the answer.
    req.attributes
        .push(LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]));
    match conn.request(RouteNetlinkMessage::GetLink(req)) {
        Ok(RouteNetlinkMessage::NewLink(m)) => Ok(Some(link_of(&m))),
        Ok(other) => Err(NlError::Decode(format!(
            "expected a link, got {}",
            kind_of(&other)
        ))),
        Err(e) if e.errno() == Some(ENODEV) => Ok(None),
        Err(e) => Err(e),
    }
}

fn kind_of(m: &RouteNetlinkMessage) -> &'static str {
    match m {
        RouteNetlinkMessage::NewAddress(_) => "an address",
        RouteNetlinkMessage::NewRoute(_) => "a route",
        _ => "another message",
    }
}

/// The readings of one `RTM_NEWLINK` answer; attributes it lacks read as unknown.
pub(crate) fn link_of(m: &LinkMessage) -> Link {
    let mut l = Link {
        ifindex: m.header.index,
        kind: None,
        ethernet: false,
        link_type: m.header.link_layer_type.to_string().to_lowercase(),
        up: m.header.flags.contains(LinkFlags::Up),
        operstate: "unknown".into(),
        mtu: 0,
        min_mtu: None,
        max_mtu: None,
        num_rx_queues: None,
        num_tx_queues: None,
        parent_bus: None,
        parent_dev: None,
        xdp_attached: None,
    };
    let mut address_len = 0;
    for a in &m.attributes {
        match a {
            LinkAttribute::Mtu(v) => l.mtu = *v,
            // 0: the driver sets no bound (loopback, some virtual interfaces).
            LinkAttribute::MinMtu(v) => l.min_mtu = Some(*v).filter(|&v| v > 0),
            LinkAttribute::MaxMtu(v) => l.max_mtu = Some(*v).filter(|&v| v > 0),
            LinkAttribute::NumRxQueues(v) => l.num_rx_queues = Some(*v),
            LinkAttribute::NumTxQueues(v) => l.num_tx_queues = Some(*v),
            LinkAttribute::Address(v) => address_len = v.len(),
            LinkAttribute::ParentDevBusName(v) => l.parent_bus = Some(bounded(v)),
            LinkAttribute::ParentDevName(v) => l.parent_dev = Some(bounded(v)),
            LinkAttribute::OperState(s) => l.operstate = operstate(s),
            LinkAttribute::LinkInfo(infos) => {
                l.kind = infos.iter().find_map(|i| match i {
                    LinkInfo::Kind(k) => Some(kind_name(k)),
                    _ => None,
                })
            }
            LinkAttribute::Xdp(x) => l.xdp_attached = attached(x),
            _ => {}
        }
    }
    l.ethernet = m.header.link_layer_type == LinkLayerType::Ether && address_len == 6;
    l
}

fn bounded(s: &str) -> String {
    s.chars().take(super::attrs::MAX_STRING).collect()
}

fn kind_name(k: &InfoKind) -> String {
    bounded(&k.to_string())
}

fn operstate(s: &State) -> String {
    match s {
        State::Up => "up".into(),
        State::Down => "down".into(),
        State::LowerLayerDown => "lower-layer-down".into(),
        State::Dormant => "dormant".into(),
        State::Testing => "testing".into(),
        State::NotPresent => "not-present".into(),
        _ => "unknown".into(),
    }
}

/// The program attached, from the `IFLA_XDP` nest (`XDP_ATTACHED_NONE`: none).
fn attached(x: &[LinkXdp]) -> Option<XdpAttached> {
    let mode = x.iter().find_map(|a| match a {
        LinkXdp::Attached(m) => Some(*m),
        _ => None,
    })?;
    let mode = match mode {
        Attached::None => return None,
        Attached::Driver => "driver".to_string(),
        Attached::SocketBuffer => "generic".to_string(),
        Attached::Hardware => "offload".to_string(),
        Attached::Multiple => "multiple".to_string(),
        Attached::Other(v) => format!("mode {v}"),
        _ => "unknown".to_string(),
    };
    let prog_id = x.iter().find_map(|a| match a {
        LinkXdp::ProgId(id) | LinkXdp::DrvProgId(id) | LinkXdp::SkbProgId(id) => Some(*id),
        _ => None,
    });
    Some(XdpAttached { mode, prog_id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_veth_link_reads_as_such() {
        let mut m = LinkMessage::default();
        m.header.index = 7;
        m.header.link_layer_type = LinkLayerType::Ether;
        m.header.flags = LinkFlags::Up;
        m.attributes = vec![
            LinkAttribute::Mtu(1500),
            LinkAttribute::MinMtu(68),
            LinkAttribute::MaxMtu(65535),
            LinkAttribute::NumRxQueues(2),
            LinkAttribute::NumTxQueues(2),
            LinkAttribute::Address(vec![2, 0, 0, 0, 0, 1]),
            LinkAttribute::OperState(State::Up),
            LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Veth)]),
            LinkAttribute::Xdp(vec![LinkXdp::Attached(Attached::None)]),
        ];
        let l = link_of(&m);
        assert_eq!(l.ifindex, 7);
        assert_eq!(l.kind.as_deref(), Some("veth"));
        assert!(l.ethernet && l.up);
        assert_eq!((l.mtu, l.min_mtu, l.max_mtu), (1500, Some(68), Some(65535)));
        assert_eq!((l.num_rx_queues, l.num_tx_queues), (Some(2), Some(2)));
        assert_eq!(l.operstate, "up");
        assert_eq!(l.xdp_attached, None);
    }

    #[test]
    fn an_attached_program_and_missing_attributes() {
        let mut m = LinkMessage::default();
        m.header.link_layer_type = LinkLayerType::Loopback;
        m.attributes = vec![LinkAttribute::Xdp(vec![
            LinkXdp::Attached(Attached::Driver),
            LinkXdp::ProgId(42),
        ])];
        let l = link_of(&m);
        assert!(!l.ethernet, "not Ethernet");
        assert_eq!(l.mtu, 0);
        assert_eq!(l.kind, None);
        assert_eq!(
            l.xdp_attached,
            Some(XdpAttached {
                mode: "driver".into(),
                prog_id: Some(42)
            })
        );
    }
}
