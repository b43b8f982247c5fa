//! The XDP program on the bed's interface in ns b, the flows it steers, and frames injected
//! from ns a.

use crate::raw;
use mpa_bpf::{ifindex_of, AttachMode, BpfError, FlowKey, XdpSteering};
use mpa_testbed::{run_in_netns, Conn, TestBed};

/// The ifindex of this host's interface (in ns b).
pub fn ifindex_b(bed: &TestBed) -> u32 {
    run_in_netns(&bed.ns_b, || ifindex_of(&bed.if_b))
        .expect("enter namespace b")
        .unwrap_or_else(|e| panic!("ifindex of {}: {e}", bed.if_b))
}

/// Loads and attaches the program to this host's interface, from a thread inside ns b.
pub fn attach_b(bed: &TestBed, mode: AttachMode) -> Result<XdpSteering, BpfError> {
    let ifindex = ifindex_b(bed);
    run_in_netns(&bed.ns_b, || XdpSteering::attach(ifindex, mode)).expect("enter namespace b")
}

/// The flow of `c` as the XDP side (b, the server) sees it.
pub fn flow_key(c: &Conn) -> FlowKey {
    let k = FlowKey::new(
        c.server.local_addr().unwrap(),
        c.server.peer_addr().unwrap(),
    )
    .unwrap();
    // The client's view, reversed, is the same 4-tuple.
    let k2 = FlowKey::new(
        c.client.peer_addr().unwrap(),
        c.client.local_addr().unwrap(),
    )
    .unwrap();
    assert_eq!(k, k2);
    k
}

/// The 4-tuple of `c` in the wrong direction (local = the client).
pub fn reversed_key(c: &Conn) -> FlowKey {
    FlowKey::new(
        c.server.peer_addr().unwrap(),
        c.server.local_addr().unwrap(),
    )
    .unwrap()
}

/// Sends raw frames out of the peer's interface (ns a) with an AF_PACKET socket.
pub fn inject_from_a(bed: &TestBed, frames: &[Vec<u8>]) {
    run_in_netns(&bed.ns_a, || {
        let ifindex = ifindex_of(&bed.if_a).expect("ifindex of the peer's interface");
        raw::send_frames(ifindex, frames)
    })
    .expect("enter namespace a")
    .expect("inject frames");
}
