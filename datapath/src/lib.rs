//! The MPA data path process: AF_XDP sockets and their rings, registered memory shared with
//! consumers, one polling worker per queue driving the sans-I/O protocol stack
//! (`mpa_stack`), and the server that owns them (control socket, XDP steering, hand-overs).
//!
//! Modules, in the order a received frame meets them:
//! * [`io`]: one AF_XDP socket per RX queue with its UMEM and rings ([`io::xsk`]); the
//!   [`io::ring::FrameRing`] trait a worker runs on, and an in-memory ring
//!   ([`io::ring::MemRing`]); multi-buffer descriptor chains; capture to pcap.
//! * [`worker`]: one polling thread per queue: frames → flows (`mpa_stack::flow`), timers,
//!   TX, completions out.
//! * [`memory`]: registered memory (memfd regions, STags, posted buffers) and the
//!   subscribers' shared-memory completion rings.
//! * [`server`]: the datapath process: control socket, workers, XDP steering.
//! * [`probe_needs`]: what `mpa-datapath probe` (the `mpa-probe` crate) judges an interface
//!   against.
//!
//! `unsafe` is allowed only for the boundary that needs it: [`io::xsk`] (the AF_XDP rings and
//! UMEM) and `io::prefetch` (the prefetch of received frames). Registered memory is mapped
//! and copied into by `mpa_ctl_proto::shm` (shared with the completion rings and the
//! consumer). Every other module carries `#![forbid(unsafe_code)]`.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod io;
pub mod memory;
pub mod server;
pub mod worker;

/// What this datapath needs of an interface, for `mpa-datapath probe` (`mpa_probe`): its queue
/// limit, its UMEM frames, the frames a peer sends at an MTU, the segments it sends, and the
/// ethtool driver query.
pub fn probe_needs() -> mpa_probe::Datapath {
    mpa_probe::Datapath {
        max_queues: server::MAX_QUEUES,
        frame_size: io::xsk::XskConfig::DEFAULT_FRAME_SIZE,
        headroom: io::xsk::XDP_PACKET_HEADROOM,
        rx_frame_for_mtu: server::rx_frame_for_mtu,
        link_mss: server::link_mss,
        driver_info: |iface| {
            let info = io::ethtool::Ethtool::new(iface)
                .and_then(|e| e.driver_info())
                .ok()?;
            Some(mpa_probe::DriverInfo {
                driver: info.driver,
                firmware: info.firmware,
            })
        },
    }
}
