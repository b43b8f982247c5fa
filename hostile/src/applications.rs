//! Applications naming what is not theirs (docs/consumer.md, "Connections from the
//! application", "Who may do what"): another application's allocated domain, a domain number
//! nobody was given, connection requests and listeners that are not theirs, and a hand-over
//! into an application's domain that did not ask for the connection. Each is refused with its
//! code, changes nothing, and the witness client stays answered.

use super::ctl::witnessed;
use super::Ctx;
use anyhow::{bail, Result};
use mpa_app::{Consumer, ConsumerError};
use mpa_control::datapath_client::DatapathClient;
use mpa_ctl_proto::client::ClientError;
use mpa_ctl_proto::cm::{ConnectOptions, ListenOptions};
use mpa_ctl_proto::{AppHandOver, ErrorCode, Message};
use mpa_harness::datapath::stats;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(5);

/// The code a refused request got, or what happened instead.
fn code<T: std::fmt::Debug>(r: Result<T, ConsumerError>) -> String {
    match r {
        Err(ConsumerError::Client(ClientError::Refused { code, .. })) => format!("{code:?}"),
        Err(e) => format!("failed: {e}"),
        Ok(v) => format!("done: {v:?}"),
    }
}

fn expect(what: &str, want: ErrorCode, got: String) -> Result<()> {
    if got != format!("{want:?}") {
        bail!("{what}: {want:?} expected, got {got}");
    }
    Ok(())
}

/// Another application's allocated domain, and a domain number in the allocated range nobody
/// was given: Listen, Connect, CreateRegion, Subscribe, PostRecv and DeallocPd naming either
/// are refused `Forbidden`; the owner's region stays, and nothing is left of the intruder.
pub fn names_anothers_domain(c: &mut Ctx) -> Result<()> {
    witnessed(c, |p| {
        let mut owner = Consumer::connect(p, WAIT)?;
        let pd = owner.alloc_pd()?;
        let region = owner.create_region(4096, pd, true, true)?;
        let mut intruder = Consumer::connect(p, WAIT)?;
        let nobodys = pd.wrapping_add(1 << 20);
        let any: std::net::SocketAddr = "127.0.0.1:0".parse()?;
        for target in [pd, nobodys] {
            let f = ErrorCode::Forbidden;
            let listen = intruder.listen(target, any, ListenOptions::default());
            expect("Listen", f, code(listen))?;
            let connect = intruder.connect_to(target, any, ConnectOptions::default());
            expect("Connect", f, code(connect))?;
            expect(
                "CreateRegion",
                f,
                code(intruder.create_region(4096, target, true, true)),
            )?;
            expect("Subscribe", f, code(intruder.subscribe(target)))?;
            let recv = intruder.post_recv(
                mpa_ctl_proto::PostTarget::Pd(target),
                region.info().stag,
                0,
                64,
                1,
            );
            expect("PostRecv", f, code(recv))?;
            expect("DeallocPd", f, code(intruder.dealloc_pd(target)))?;
        }
        if owner.regions(Some(pd))?.len() != 1 {
            bail!("the owner's region is gone");
        }
        Ok(format!(
            "six requests naming another application's domain {pd:#x} and six naming \
             {nobodys:#x} (allocated to nobody): Forbidden"
        ))
    })
}

/// Accept, Reject and StopListening of connection requests and listeners that are not the
/// client's (made-up ids, every one below the next the datapath would hand out): refused
/// `BadRequest`, no manager is told anything.
pub fn decides_anothers_request(c: &mut Ctx) -> Result<()> {
    witnessed(c, |p| {
        let mut intruder = Consumer::connect(p, WAIT)?;
        for id in 1..=64 {
            let b = ErrorCode::BadRequest;
            expect("Accept", b, code(intruder.accept(id, b"mine")))?;
            expect("Reject", b, code(intruder.reject(id, b"no")))?;
            expect("StopListening", b, code(intruder.stop_listening(id)))?;
        }
        Ok("Accept, Reject and StopListening of 64 ids not its own: BadRequest".into())
    })
}

/// The connection manager itself (an operator) handing a connection over into an
/// application's domain without the application's setup: refused `Forbidden` with and without
/// a made-up setup id, nothing steered afterwards.
pub fn handover_into_unasked_domain(c: &mut Ctx) -> Result<()> {
    witnessed(c, |p| {
        let mut app = Consumer::connect(p, WAIT)?;
        let pd = app.alloc_pd()?;
        let mut op = DatapathClient::connect(p, WAIT)?;
        let before = stats(&mut op)?.adopted_flows;
        // A 4-tuple nobody uses (TEST-NET addresses).
        let local = "192.0.2.1:4792".parse()?;
        let remote = "192.0.2.2:40001".parse()?;
        let flow_id = match op.request(|id| Message::AdoptFlow { id, local, remote })? {
            Message::FlowAdopted { flow_id, .. } => flow_id,
            m => bail!("AdoptFlow answered {m:?}"),
        };
        let mut seen = Vec::new();
        for app_conn in [None, Some(7_777_777)] {
            let mut h = mpa_stack::sim::SimHandover {
                flow_id,
                local,
                remote,
                pd: Some(pd),
                ..Default::default()
            }
            .build();
            h.app = app_conn.map(|conn_id| AppHandOver {
                conn_id,
                params: mpa_ctl_proto::cm::PeerParams {
                    peer: remote,
                    local,
                    revision: 2,
                    markers_rx: false,
                    markers_tx: false,
                    crc: true,
                    ird: None,
                    ord: None,
                    private_data: Vec::new(),
                },
            });
            let handover = Box::new(h);
            match op.request(|id| Message::HandOver { id, handover }) {
                Err(ClientError::Refused {
                    code: ErrorCode::Forbidden,
                    ..
                }) => seen.push("Forbidden"),
                r => bail!("HandOver into domain {pd:#x} (setup {app_conn:?}): {r:?}"),
            }
        }
        op.request(|id| Message::CloseFlow { id, flow_id })?;
        let after = stats(&mut op)?.adopted_flows;
        if after != before {
            bail!("{before} adopted flows before, {after} after");
        }
        if app.connection_events()?.iter().any(|_| true) {
            bail!("the application was told of a connection it never asked for");
        }
        Ok(format!(
            "HandOver into application domain {pd:#x} without its setup and with a made-up \
             one: {seen:?}; adopted flows {before} before and after"
        ))
    })
}
