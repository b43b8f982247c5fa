//! The datapath side of an experiment as an application sets it up: `mpa-control serve` in ns
//! b as its connection manager, and connections the application asks for itself through the
//! interface (`mpa-app`: `connect_to`, then its `Established` event), not an operator's
//! hand-over (docs/verbs.md).

use anyhow::{anyhow, bail, Result};
use mpa_app::{CmEvent, ConnectOptions, ConnectionEvent, Consumer};
use mpa_ctl_proto::region_ad::RegionAd;
use mpa_harness::datapath::temp_path;
use mpa_harness::ControlDaemon;
use mpa_testbed::TestBed;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long the manager may take to serve, and a connection to be established.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// `mpa-control serve` in ns b serving the datapath at `socket` for applications (no
/// configured listener), once it says so.
pub(crate) fn connection_manager(bed: &TestBed, socket: &std::path::Path) -> Result<ControlDaemon> {
    let config = temp_path("cm.toml");
    std::fs::write(
        &config,
        format!("datapath_socket = \"{}\"\n", socket.display()),
    )?;
    let d = ControlDaemon::start(bed, &config, "info");
    let t0 = Instant::now();
    while !d.log().iter().any(|l| l.contains("serving applications")) {
        if t0.elapsed() > WAIT {
            bail!(
                "the connection manager did not serve applications within {WAIT:?}:\n{}",
                d.log().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(d)
}

/// Connects to `to` for domain `pd` through the interface and waits for the connection: its
/// flow and the region the peer advertised in its Reply.
pub(crate) fn connect_as_application(
    consumer: &mut Consumer,
    pd: u32,
    to: SocketAddr,
    options: ConnectOptions,
) -> Result<(u64, RegionAd)> {
    let conn_id = consumer.connect_to(pd, to, options)?;
    match consumer.wait_connection_event(WAIT)? {
        Some(ConnectionEvent::Cm(CmEvent::Established {
            conn_id: c,
            flow_id,
            params,
        })) if c == conn_id => {
            let ad = RegionAd::parse(&params.private_data)?
                .ok_or_else(|| anyhow!("{to} advertised no region"))?;
            Ok((flow_id, ad))
        }
        e => bail!("connection {conn_id} to {to} not established: {e:?}"),
    }
}
