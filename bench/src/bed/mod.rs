//! The namespace bed every experiment runs on, and what runs on it beside the system under
//! test: the options shared by the experiments (bed, MTU, framing, the two-host interface
//! arguments), `mpa-peer` processes as senders and kernel-TCP receivers, the consumer side of
//! a placing run, CPU accounting, the Linux sender's TCP counters, and the bed split over two
//! CPUs.

pub(crate) mod application;
pub(crate) mod cpu;
pub(crate) mod options;
pub(crate) mod peer;
pub(crate) mod placement;
pub(crate) mod sender_tcp;
pub(crate) mod split;

use anyhow::{Context, Result};

/// `--wire-segments`: the sender's veth end without TSO, the receiver's with GRO.
pub(crate) fn wire_segments(bed: &mpa_testbed::TestBed) -> Result<()> {
    if bed.ns_r.is_some() || bed.external.is_some() {
        mpa_cli::usage!(
            "--wire-segments needs the direct veth pair (no --loss, --impair or --iface)"
        );
    }
    for (ns, ifname, feature) in [
        (&bed.ns_a, &bed.if_a, ["tso", "off"]),
        (&bed.ns_b, &bed.if_b, ["gro", "on"]),
    ] {
        let mut args = vec!["ethtool", "-K", ifname.as_str()];
        args.extend(feature);
        mpa_testbed::run_in(ns, &args).with_context(|| args.join(" "))?;
    }
    Ok(())
}
