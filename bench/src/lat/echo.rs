//! The ping-pong's echo server, the same for every Initiator: `mpa-peer listen --echo` in ns
//! a, writing every Write it receives back into the region the Initiator advertised.

use super::args::LatArgs;
use crate::bed::options::PORT;
use crate::bed::peer::{PeerListen, PeerReport};
use anyhow::{bail, Result};
use mpa_testbed::TestBed;
use std::net::SocketAddr;

/// The echo server's region (its advertisement).
pub(super) const ECHO_STAG: u32 = 0xec_0001;

/// Iterations before the measured ones, per side, size and round.
pub(super) const WARMUP: u64 = 100;

/// `mpa-peer listen --echo` in ns a, for one connection.
pub(super) fn echo_server(bed: &TestBed, a: &LatArgs, payload: u64) -> Result<PeerListen> {
    let bind = SocketAddr::new(bed.addr_a(false), PORT).to_string();
    let advertise = format!("{ECHO_STAG:#x}:{payload}");
    let mut args = vec![
        "--echo",
        "--bind",
        &bind,
        "--connections",
        "1",
        "--timeout",
        "30",
    ];
    args.extend([
        "--accept-timeout",
        "60",
        "--advertise",
        &advertise,
        "--rev",
        "2",
    ]);
    if !a.framing.crc() {
        args.push("--no-crc");
    }
    if a.framing.markers() {
        args.push("--markers");
    }
    PeerListen::start(bed, &bed.ns_a, &args)
}

/// The echo server echoed `n` Writes and ended without an error.
pub(super) fn check_echo(echo: PeerReport, n: u64) -> Result<()> {
    if echo.error.is_some() || echo.echoes != Some(n) {
        bail!("echo server: {n} echoes expected: {echo}");
    }
    Ok(())
}
