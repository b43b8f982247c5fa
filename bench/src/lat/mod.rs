//! `lat`: one-way latency per message, the datapath against the blocking kernel-TCP
//! Responder, same bed and sender, alternating.
//!
//! The sender (`mpa-peer connect --timestamps --rate R`, ns a) starts every RDMA Write's
//! payload with the CLOCK_MONOTONIC time in ns (u64 LE) taken right before the message is
//! encoded and written; the namespaces share the host's clock (on two hosts, `--iface`, the
//! peer's clock is measured and every sample corrected: `clock`). The receivers take
//! CLOCK_MONOTONIC again:
//! * datapath: the bench's consumer, when it holds a completion (`Consumer::next_completions`
//!   returned its batch) and has read the stamp from the mapped region at the completion's
//!   offset — so the datapath's number includes the completion ring in shared memory and
//!   the consumer's wake-up by the ring's eventfd (`--consumer-busy-poll`: it spins on the
//!   ring instead, `Consumer::set_busy_poll`);
//! * kernel: an in-process blocking `MpaStream` Responder in ns b, in `recv_with`'s callback,
//!   i.e. when the whole ULPDU has been read and its FPDU checked.
//!
//! Latency runs check counts, lengths, offsets and the ULPDU digest (which covers the
//! stamps), not the region against the pattern (the stamps overwrite its first 8 octets).
//!
//! `--pingpong` runs the ping-pong of `pingpong` instead.

mod args;
pub(crate) mod clock;
mod echo;
mod example_app;
mod oneway;
mod pingpong;
mod samples;

pub(crate) use crate::bed::options::{DatapathMode, PostVia};
pub(crate) use args::ClockArgs;
pub use args::LatArgs;
pub(crate) use oneway::lat;
pub(crate) use pingpong::{pingpong, pingpong_table};
pub(crate) use samples::{table, table_within, Row, Side};

use crate::report::document::LatClock;
use crate::report::Document;
use anyhow::Result;

/// `mpa-bench lat`: the table (stdout, or stderr with `--json`) and the document with `--json`.
pub fn run_cli(a: &LatArgs) -> Result<()> {
    if let (true, Some(domains)) = (a.pingpong, a.flood_neighbour) {
        let text = pingpong::beside_a_flooding_neighbour(a, domains)?;
        crate::report::text(
            false,
            &format!("{}; {}\n{text}", bed_line(a), a.framing.framing().words()),
        );
        return Ok(());
    }
    if a.pingpong {
        let (doc, rows) = pingpong::pingpong(a)?;
        let text = format!(
            "{}; {}; RDMA Write ping-pong against the kernel mpa-peer listen --echo, {} \
             iterations per size, side and round (after 100 warm-up), {} rounds\n{}",
            bed_line(a),
            a.framing.framing().words(),
            a.messages,
            a.rounds,
            pingpong::pingpong_table(&rows)
        );
        crate::report::text(a.json, &text);
        if a.json {
            crate::report::print(&doc)?;
        }
        return Ok(());
    }
    let (doc, rows) = lat(a)?;
    let mut text = format!(
        "{}; {}; {} messages per size, side and round, {} rounds, sender paced at {}; RDMA Writes into a 16 MiB region (datapath) / digested (kernel)\n",
        bed_line(a),
        a.framing.framing().words(),
        a.messages,
        a.rounds,
        if a.rate == 0 {
            "no rate (unpaced)".to_string()
        } else {
            format!("{} msg/s", a.rate)
        }
    );
    let clock = match &doc {
        Document::Lat { clock: Some(c), .. } => Some(c),
        _ => None,
    };
    text += &clock_line(clock);
    let error_ns = match clock {
        Some(LatClock::Measured(m)) => Some(m.error_ns),
        _ => None,
    };
    text += &table_within(&rows, error_ns);
    text += &format!(
        "hgrm files: {}/lat-{{kernel,datapath}}-<bytes>{}.hgrm\n",
        a.out.display(),
        if a.rate == 0 { "-unpaced" } else { "" }
    );
    crate::report::text(a.json, &text);
    if a.json {
        crate::report::print(&doc)?;
    }
    Ok(())
}

/// The clock in the table's heading: one host's, or the peer's as measured.
fn clock_line(clock: Option<&LatClock>) -> String {
    match clock {
        Some(LatClock::Measured(m)) => format!(
            "clock: the peer host's, measured through {} (UDP, {} probes before the first run and \
             after each, {} measurements): offset θ = peer − here = {:+.3} µs, error bound \
             ε = {:.2} µs, drift {:+.3} ppm (± {:.3} ppm); every sample corrected by θ \
             interpolated over its run\n",
            m.responder,
            m.probes,
            m.measurements.len(),
            m.offset_ns as f64 / 1e3,
            m.error_ns as f64 / 1e3,
            m.drift_ppm,
            m.drift_error_ppm
        ),
        _ => "clock: same host (both ends read this host's CLOCK_MONOTONIC)\n".into(),
    }
}

/// The bed in the table's heading: `bed: mtu 1500` and what differs from the direct veth pair.
fn bed_line(a: &LatArgs) -> String {
    let b = &a.bed;
    let mut s = match (&b.nic.iface, b.nic.peer) {
        (Some(i), Some(p)) => format!("interface {i}, peer {p}: mtu {}", b.mtu),
        _ => format!("bed: mtu {}", b.mtu),
    };
    if b.loss > 0 {
        s += &format!(" loss {}%", b.loss);
    }
    if b.impair.is_some() {
        s += " impaired";
    }
    if b.queues != 1 {
        s += &format!(" queues {}", b.queues);
    }
    if b.split_cpus {
        s += ", split CPUs (sender on 0, receiver on 1)";
    }
    if a.wire_segments {
        s += ", wire segments (sender without TSO, kernel receiver with GRO)";
    }
    s
}
