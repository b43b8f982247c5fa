//! Connection management (rdma_cm): listen, connection requests, accept, reject, connect, the
//! events, and disconnect, through the connection manager (`mpa-control serve`).

use crate::args;
use crate::context::{mpx_context, with};
use crate::errors::{Failure, MPX_ERR_TIMEOUT, MPX_OK};
use mpa_app::{CmEvent, ConnectOptions, ConnectionEvent, ListenOptions, PeerParams};
use std::ffi::{c_char, c_int};
use std::net::SocketAddr;
use std::time::Duration;

/// Private data of an MPA Request or Reply at most (RFC 5044's 512, less revision 2's IRD
/// and ORD).
pub const MPX_MAX_PRIVATE_DATA: usize = 512;
/// Octets of an event's `reason` (NUL included).
pub const MPX_REASON_LEN: usize = 256;
/// Octets of an event's address strings (NUL included).
pub const MPX_ADDR_LEN: usize = 64;

/// A connection request at a listener: accept or reject `conn_id`.
pub const MPX_CM_CONNECT_REQUEST: u32 = 1;
/// The connection is established: post on `flow_id`.
pub const MPX_CM_ESTABLISHED: u32 = 2;
/// The peer rejected our request (its reason in the private data).
pub const MPX_CM_REJECTED: u32 = 3;
/// No TCP connection could be made.
pub const MPX_CM_UNREACHABLE: u32 = 4;
/// The setup failed after TCP connected (an MPA error, the peer closed, a timeout).
pub const MPX_CM_CONNECT_ERROR: u32 = 5;
/// A listener stopped without being asked.
pub const MPX_CM_LISTEN_ENDED: u32 = 6;
/// An established connection ended (closed, reset, a Terminate either way, an MPA error).
pub const MPX_CM_DISCONNECTED: u32 = 7;

/// One connection-manager event (`rdma_cm_event`). Fields an event does not carry are 0,
/// `mpa_error` and `terminate_layer` are -1 when absent.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mpx_cm_event {
    /// `MPX_CM_*`.
    pub event: u32,
    /// The listener (`MPX_CM_CONNECT_REQUEST`, `MPX_CM_LISTEN_ENDED`).
    pub listen_id: u64,
    /// The connection request or setup.
    pub conn_id: u64,
    /// The connection (`MPX_CM_ESTABLISHED`, `MPX_CM_DISCONNECTED`).
    pub flow_id: u64,
    /// The peer's private data (its Request at a listener, its Reply at a connector, its
    /// rejection's).
    pub private_data: [u8; MPX_MAX_PRIVATE_DATA],
    /// Octets of `private_data`.
    pub private_data_len: u32,
    /// The MPA revision of the peer.
    pub revision: u32,
    /// IRD and ORD: the Initiator's as sent at a request, the negotiated ones when
    /// established (revision 2, when `has_ird_ord`).
    pub ird: u32,
    /// See `ird`.
    pub ord: u32,
    /// Whether `ird` and `ord` are set.
    pub has_ird_ord: u32,
    /// The MPA error code (RFC 5044 §8), or -1.
    pub mpa_error: i32,
    /// The Terminate's layer (0 RDMAP, 1 DDP, 2 MPA), or -1.
    pub terminate_layer: i32,
    /// The Terminate's error type.
    pub terminate_type: u32,
    /// The Terminate's error code.
    pub terminate_code: u32,
    /// 1 when we sent the Terminate, 0 when the peer did.
    pub terminate_sent: u32,
    /// The peer's address, `ip:port` (NUL-terminated).
    pub peer: [c_char; MPX_ADDR_LEN],
    /// Our address, `ip:port`.
    pub local: [c_char; MPX_ADDR_LEN],
    /// Why, in words (NUL-terminated).
    pub reason: [c_char; MPX_REASON_LEN],
}

impl Default for mpx_cm_event {
    fn default() -> Self {
        mpx_cm_event {
            event: 0,
            listen_id: 0,
            conn_id: 0,
            flow_id: 0,
            private_data: [0; MPX_MAX_PRIVATE_DATA],
            private_data_len: 0,
            revision: 0,
            ird: 0,
            ord: 0,
            has_ird_ord: 0,
            mpa_error: -1,
            terminate_layer: -1,
            terminate_type: 0,
            terminate_code: 0,
            terminate_sent: 0,
            peer: [0; MPX_ADDR_LEN],
            local: [0; MPX_ADDR_LEN],
            reason: [0; MPX_REASON_LEN],
        }
    }
}

/// Copies `s` into `dst`, cut to fit with its NUL.
fn put_str(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, &b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = b as c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}

impl mpx_cm_event {
    fn private(&mut self, data: &[u8]) {
        let n = data.len().min(MPX_MAX_PRIVATE_DATA);
        self.private_data[..n].copy_from_slice(&data[..n]);
        self.private_data_len = n as u32;
    }

    fn params(&mut self, p: &PeerParams) {
        self.private(&p.private_data);
        self.revision = u32::from(p.revision);
        if let (Some(ird), Some(ord)) = (p.ird, p.ord) {
            (self.ird, self.ord, self.has_ird_ord) = (u32::from(ird), u32::from(ord), 1);
        }
        put_str(&mut self.peer, &p.peer.to_string());
        put_str(&mut self.local, &p.local.to_string());
    }

    fn of(e: &ConnectionEvent) -> mpx_cm_event {
        let mut x = mpx_cm_event::default();
        match e {
            ConnectionEvent::Cm(CmEvent::ConnectRequest {
                listen_id,
                conn_id,
                params,
                peer_ird_ord,
            }) => {
                x.event = MPX_CM_CONNECT_REQUEST;
                (x.listen_id, x.conn_id) = (*listen_id, *conn_id);
                x.params(params);
                (x.ird, x.ord, x.has_ird_ord) = match peer_ird_ord {
                    Some((i, o)) => (u32::from(*i), u32::from(*o), 1),
                    None => (0, 0, 0),
                };
            }
            ConnectionEvent::Cm(CmEvent::Established {
                conn_id,
                flow_id,
                params,
            }) => {
                x.event = MPX_CM_ESTABLISHED;
                (x.conn_id, x.flow_id) = (*conn_id, *flow_id);
                x.params(params);
            }
            ConnectionEvent::Cm(CmEvent::Rejected {
                conn_id,
                private_data,
            }) => {
                x.event = MPX_CM_REJECTED;
                x.conn_id = *conn_id;
                x.private(private_data);
            }
            ConnectionEvent::Cm(CmEvent::Unreachable { conn_id, reason }) => {
                x.event = MPX_CM_UNREACHABLE;
                x.conn_id = *conn_id;
                put_str(&mut x.reason, reason);
            }
            ConnectionEvent::Cm(CmEvent::SetupFailed {
                conn_id,
                mpa_error,
                reason,
            }) => {
                x.event = MPX_CM_CONNECT_ERROR;
                x.conn_id = *conn_id;
                x.mpa_error = mpa_error.map_or(-1, i32::from);
                put_str(&mut x.reason, reason);
            }
            ConnectionEvent::Cm(CmEvent::ListenEnded { listen_id, reason }) => {
                x.event = MPX_CM_LISTEN_ENDED;
                x.listen_id = *listen_id;
                put_str(&mut x.reason, reason);
            }
            ConnectionEvent::Ended(end) => {
                x.event = MPX_CM_DISCONNECTED;
                x.flow_id = end.flow_id;
                x.mpa_error = end.mpa_error.map_or(-1, i32::from);
                if let Some(t) = &end.terminate {
                    x.terminate_layer = i32::from(t.layer);
                    (x.terminate_type, x.terminate_code) =
                        (u32::from(t.error_type), u32::from(t.error_code));
                    x.terminate_sent = u32::from(t.sent);
                }
                put_str(&mut x.reason, &end.reason);
            }
        }
        x
    }
}

fn address(s: *const c_char, what: &str) -> Result<SocketAddr, Failure> {
    let text = args::string(s, what)?;
    text.parse()
        .map_err(|_| Failure::invalid(format!("{what}: `{text}` is not ip:port")))
}

/// `mpx_conn_param::flags`: ask the peer for markers toward us (M=1).
pub const MPX_CONN_MARKERS: u32 = 1;
/// `mpx_conn_param::flags`: do not ask for CRCs (C=0); CRCs are still used when the peer asks.
pub const MPX_CONN_NO_CRC: u32 = 2;
/// `mpx_conn_param::flags`: MPA revision 1 (RFC 5044): a connector's Request is revision 1,
/// a listener accepts revision 1 only; no IRD/ORD exchange.
pub const MPX_CONN_REVISION_1: u32 = 4;
/// `mpx_conn_param::flags`, connect only: revision 2's peer-to-peer model (the connector
/// sends an RTR indication first).
pub const MPX_CONN_P2P: u32 = 8;
const MPX_CONN_KNOWN: u32 = MPX_CONN_MARKERS | MPX_CONN_NO_CRC | MPX_CONN_REVISION_1 | MPX_CONN_P2P;

/// How a connection is requested or accepted (`rdma_conn_param`). Zeroed, it is what
/// `mpx_connect` and `mpx_listen` use: revision 2, CRCs, IRD and ORD 8.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mpx_conn_param {
    /// The Request's private data (connect only; a listener's is each accept's): at most
    /// `MPX_MAX_PRIVATE_DATA` octets, less 8 for revision 2's IRD/ORD; NULL when
    /// `private_data_len` is 0.
    pub private_data: *const u8,
    /// Octets of `private_data`.
    pub private_data_len: u32,
    /// Our IRD (`responder_resources`): Read Requests the peer may have outstanding toward
    /// us; 0: 8.
    pub ird: u16,
    /// Our ORD (`initiator_depth`): our Reads outstanding at once; 0: 8.
    pub ord: u16,
    /// `MPX_CONN_*`.
    pub flags: u32,
    /// Connect only: milliseconds each wait of the setup may last (TCP connect, the Reply);
    /// 0: the connection manager's own.
    pub timeout_ms: u32,
    /// Listen only (`rdma_listen`'s backlog): connection requests waiting for an accept or a
    /// reject at most, more are refused with a reset; 0: 16.
    pub backlog: u32,
}

/// The parts both options share, checked.
struct Common {
    revision: u8,
    markers: bool,
    crc: bool,
    ird: u16,
    ord: u16,
}

fn common(p: &mpx_conn_param) -> Result<Common, Failure> {
    if p.flags & !MPX_CONN_KNOWN != 0 {
        return Err(Failure::invalid(format!(
            "flags {:#x}: unknown bits {:#x}",
            p.flags,
            p.flags & !MPX_CONN_KNOWN
        )));
    }
    let revision = if p.flags & MPX_CONN_REVISION_1 != 0 {
        1
    } else {
        2
    };
    if revision == 1 && p.flags & MPX_CONN_P2P != 0 {
        return Err(Failure::invalid(
            "flags: MPX_CONN_P2P needs revision 2, not MPX_CONN_REVISION_1",
        ));
    }
    let depth = |v: u16| if v == 0 { 8 } else { v };
    Ok(Common {
        revision,
        markers: p.flags & MPX_CONN_MARKERS != 0,
        crc: p.flags & MPX_CONN_NO_CRC == 0,
        ird: depth(p.ird),
        ord: depth(p.ord),
    })
}

/// Listens on `bind` (`ip:port`, port 0: any) for domain `pd` (`rdma_bind_addr` +
/// `rdma_listen`), MPA revision 2 with CRCs and the datapath's IRD/ORD (8); `*listen_id` is
/// the listener, `*port` the port bound.
#[no_mangle]
pub extern "C" fn mpx_listen(
    ctx: *mut mpx_context,
    pd: u32,
    bind: *const c_char,
    listen_id: *mut u64,
    port: *mut u16,
) -> c_int {
    with(ctx, |c| {
        let at = address(bind, "bind")?;
        let (id, bound) = c.consumer.listen(pd, at, ListenOptions::default())?;
        args::store(listen_id, id, "listen_id")?;
        args::store(port, bound.port(), "port").map(|_| MPX_OK)
    })
}

/// `mpx_listen` with `param`'s revision, markers, CRC, IRD, ORD and backlog; its private data
/// and timeout must be empty (a listener's private data is each accept's).
#[no_mangle]
pub extern "C" fn mpx_listen_with(
    ctx: *mut mpx_context,
    pd: u32,
    bind: *const c_char,
    param: *const mpx_conn_param,
    listen_id: *mut u64,
    port: *mut u16,
) -> c_int {
    with(ctx, |c| {
        let at = address(bind, "bind")?;
        let p = args::value(param, "param")?;
        let k = common(&p)?;
        if p.private_data_len != 0 || !p.private_data.is_null() {
            return Err(Failure::invalid(
                "param: a listener has no private data of its own (each accept gives one)",
            ));
        }
        if p.timeout_ms != 0 {
            return Err(Failure::invalid("param: timeout_ms is for connect only"));
        }
        if p.flags & MPX_CONN_P2P != 0 {
            return Err(Failure::invalid("flags: MPX_CONN_P2P is for connect only"));
        }
        let d = ListenOptions::default();
        let options = ListenOptions {
            revision: k.revision,
            markers_required: k.markers,
            crc: k.crc,
            ird: k.ird,
            ord: k.ord,
            backlog: if p.backlog == 0 { d.backlog } else { p.backlog },
            ..d
        };
        let (id, bound) = c.consumer.listen(pd, at, options)?;
        args::store(listen_id, id, "listen_id")?;
        args::store(port, bound.port(), "port").map(|_| MPX_OK)
    })
}

/// Stops listener `listen_id`.
#[no_mangle]
pub extern "C" fn mpx_stop_listening(ctx: *mut mpx_context, listen_id: u64) -> c_int {
    with(ctx, |c| {
        c.consumer
            .stop_listening(listen_id)
            .map(|_| MPX_OK)
            .map_err(Into::into)
    })
}

/// Connects to `remote` (`ip:port`) for domain `pd` with this Request private data
/// (`rdma_resolve_addr` … `rdma_connect`; revision 2, CRCs): `*conn_id` is the setup, whose
/// outcome comes as an event.
#[no_mangle]
pub extern "C" fn mpx_connect(
    ctx: *mut mpx_context,
    pd: u32,
    remote: *const c_char,
    private_data: *const u8,
    private_data_len: u32,
    conn_id: *mut u64,
) -> c_int {
    with(ctx, |c| {
        let to = address(remote, "remote")?;
        let data = args::octets(private_data, private_data_len as usize, "private_data")?;
        let options = ConnectOptions {
            private_data: data.to_vec(),
            ..ConnectOptions::default()
        };
        let id = c.consumer.connect_to(pd, to, options)?;
        args::store(conn_id, id, "conn_id").map(|_| MPX_OK)
    })
}

/// `mpx_connect` with `param` (`rdma_connect`'s `rdma_conn_param`): its private data,
/// IRD/ORD, revision, markers, CRC, peer-to-peer model and setup timeout.
#[no_mangle]
pub extern "C" fn mpx_connect_with(
    ctx: *mut mpx_context,
    pd: u32,
    remote: *const c_char,
    param: *const mpx_conn_param,
    conn_id: *mut u64,
) -> c_int {
    with(ctx, |c| {
        let to = address(remote, "remote")?;
        let p = args::value(param, "param")?;
        let k = common(&p)?;
        if p.backlog != 0 {
            return Err(Failure::invalid("param: backlog is for listen only"));
        }
        let data = args::octets(p.private_data, p.private_data_len as usize, "private_data")?;
        let options = ConnectOptions {
            revision: k.revision,
            markers_required: k.markers,
            crc: k.crc,
            p2p: p.flags & MPX_CONN_P2P != 0,
            ird: k.ird,
            ord: k.ord,
            private_data: data.to_vec(),
            timeout_ms: p.timeout_ms,
            ..ConnectOptions::default()
        };
        let id = c.consumer.connect_to(pd, to, options)?;
        args::store(conn_id, id, "conn_id").map(|_| MPX_OK)
    })
}

/// Accepts connection request `conn_id` with this Reply private data (`rdma_accept`).
#[no_mangle]
pub extern "C" fn mpx_accept(
    ctx: *mut mpx_context,
    conn_id: u64,
    private_data: *const u8,
    private_data_len: u32,
) -> c_int {
    decide(ctx, conn_id, private_data, private_data_len, true)
}

/// Rejects connection request `conn_id` with this private data (`rdma_reject`).
#[no_mangle]
pub extern "C" fn mpx_reject(
    ctx: *mut mpx_context,
    conn_id: u64,
    private_data: *const u8,
    private_data_len: u32,
) -> c_int {
    decide(ctx, conn_id, private_data, private_data_len, false)
}

/// Accepts or rejects connection request `conn_id` with this private data.
fn decide(
    ctx: *mut mpx_context,
    conn_id: u64,
    private_data: *const u8,
    private_data_len: u32,
    accept: bool,
) -> c_int {
    with(ctx, |c| {
        let data = args::octets(private_data, private_data_len as usize, "private_data")?;
        match accept {
            true => c.consumer.accept(conn_id, data)?,
            false => c.consumer.reject(conn_id, data)?,
        }
        Ok(MPX_OK)
    })
}

/// The next connection event (`rdma_get_cm_event`), waiting up to `timeout_ms`:
/// `MPX_ERR_TIMEOUT` when none came.
#[no_mangle]
pub extern "C" fn mpx_get_cm_event(
    ctx: *mut mpx_context,
    timeout_ms: u32,
    event: *mut mpx_cm_event,
) -> c_int {
    with(ctx, |c| {
        let wait = Duration::from_millis(u64::from(timeout_ms));
        match c.consumer.wait_connection_event(wait)? {
            Some(e) => args::store(event, mpx_cm_event::of(&e), "event").map(|_| MPX_OK),
            None => Err(Failure {
                code: MPX_ERR_TIMEOUT,
                message: format!("no connection event within {timeout_ms} ms"),
            }),
        }
    })
}

/// The descriptor that becomes readable when a connection event waits (for the
/// application's own epoll; `rdma_event_channel`'s fd). The library's: do not close it.
#[no_mangle]
pub extern "C" fn mpx_cm_fd(ctx: *mut mpx_context) -> c_int {
    use std::os::fd::AsRawFd;
    with(ctx, |c| Ok(c.consumer.event_fd().as_raw_fd()))
}

/// Ends connection `flow_id` gracefully (`rdma_disconnect`): what is posted goes out, then a
/// FIN; a `MPX_CM_DISCONNECTED` event follows.
#[no_mangle]
pub extern "C" fn mpx_disconnect(ctx: *mut mpx_context, flow_id: u64) -> c_int {
    with(ctx, |c| {
        c.consumer
            .finish_flow(flow_id)
            .map(|_| MPX_OK)
            .map_err(Into::into)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::MPX_ERR_INVALID;

    fn param(flags: u32, ird: u16, ord: u16) -> mpx_conn_param {
        mpx_conn_param {
            private_data: std::ptr::null(),
            private_data_len: 0,
            ird,
            ord,
            flags,
            timeout_ms: 0,
            backlog: 0,
        }
    }

    #[test]
    fn connection_parameters_map_to_the_options_and_zero_is_the_default() {
        let k = common(&param(0, 0, 0)).unwrap();
        let d = ConnectOptions::default();
        assert_eq!(
            (k.revision, k.markers, k.crc, k.ird, k.ord),
            (d.revision, d.markers_required, d.crc, d.ird, d.ord)
        );
        let k = common(&param(
            MPX_CONN_MARKERS | MPX_CONN_NO_CRC | MPX_CONN_REVISION_1,
            3,
            5,
        ))
        .unwrap();
        assert_eq!(
            (k.revision, k.markers, k.crc, k.ird, k.ord),
            (1, true, false, 3, 5)
        );
        assert_eq!(common(&param(MPX_CONN_P2P, 0, 0)).unwrap().revision, 2);
        for bad in [0x10, MPX_CONN_P2P | MPX_CONN_REVISION_1] {
            assert_eq!(
                common(&param(bad, 0, 0)).err().unwrap().code,
                MPX_ERR_INVALID
            );
        }
    }
}
