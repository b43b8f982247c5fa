//! The sender's clock, for one-way `lat` (docs/latency.md, "Two hosts").
//!
//! On the private bed both ends read one host's CLOCK_MONOTONIC: nothing to measure
//! ([`Clock::SameHost`]). With `--iface` the sender runs on another host, whose
//! CLOCK_MONOTONIC started at its own boot: `lat` starts the clock responder (`mpa-peer
//! clock`) there through `--peer-exec`, measures the offset before the first run and after
//! every run ([`estimate`]: the minimum-delay exchange of `--clock-probes` probes), and each
//! run's samples are corrected by the offset interpolated between the measurements around it.
//! A measurement that gets no answer, or whose error bound is above `--max-clock-error-us`,
//! ends the experiment ([`ClockError`]): samples on an unknown clock would be numbers without
//! meaning.

pub(crate) mod estimate;
mod probe;
mod responder;

use super::args::LatArgs;
use crate::report::document::{ClockMeasurement, LatClock, MeasuredClock};
use anyhow::Result;
use estimate::Estimate;
pub(crate) use estimate::Span;
use mpa_testbed::{run_in_netns, TestBed};
use probe::Prober;
use responder::Responder;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

/// The responder's idle timeout: several keepalives may be lost before it ends.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why one-way latency cannot be measured from the peer host.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClockError {
    /// `mpa-peer clock` did not start on the peer.
    #[error(
        "one-way latency from another host needs the offset between the two hosts' clocks, and \
         the clock responder could not be started on the peer {peer} (UDP port {port}): \
         `{command}`: {reason}. Install the same mpa-peer there (--peer-bin-dir), or measure \
         round trips with --pingpong, which needs no common clock"
    )]
    Start {
        peer: IpAddr,
        port: u16,
        command: String,
        reason: String,
    },
    /// It started but no probe was answered.
    #[error(
        "one-way latency from another host needs the offset between the two hosts' clocks, and \
         the clock responder on the peer {peer} did not answer on UDP port {port}: {sent} \
         probes over {waited:.1} s, none answered{refused} (started with `{command}`). Let UDP \
         port {port} through to the peer (or choose another with --clock-port), or measure \
         round trips with --pingpong, which needs no common clock"
    )]
    NoAnswer {
        peer: IpAddr,
        port: u16,
        sent: u32,
        waited: f64,
        /// Empty, or what the ICMP port unreachable reports say.
        refused: String,
        command: String,
    },
    /// The best exchange's error bound is above `--max-clock-error-us`.
    #[error(
        "the peer {peer}'s clock offset is known only to ± {error_us:.1} µs (the fastest of \
         {answered} probe exchanges took {rtt_us:.1} µs there and back), more than \
         --max-clock-error-us {max_us}: one-way samples would be mostly clock error. Measure \
         on a quieter path, with more --clock-probes or a larger --max-clock-error-us, or \
         measure round trips with --pingpong, which needs no common clock"
    )]
    TooUncertain {
        peer: IpAddr,
        error_us: f64,
        rtt_us: f64,
        answered: u32,
        max_us: f64,
    },
    /// The probing socket failed.
    #[error("clock probes to {responder}: {source}")]
    Io {
        responder: SocketAddr,
        source: std::io::Error,
    },
}

/// The sender's clock against ours.
pub(crate) enum Clock {
    /// One host's clock on both ends.
    SameHost,
    /// The peer host's, measured.
    Measured(Box<PeerClock>),
}

/// The peer host's clock: its responder, the prober and every measurement so far.
pub(crate) struct PeerClock {
    responder: Responder,
    prober: Prober,
    addr: SocketAddr,
    probes: u32,
    max_error_ns: u64,
    measurements: Vec<Estimate>,
}

impl Clock {
    /// The private bed: [`Clock::SameHost`]. On an external bed: the responder started on the
    /// peer host and probed once (the offset before the first run).
    pub(crate) fn start(bed: &TestBed, a: &LatArgs) -> Result<Clock> {
        let Some(ext) = &bed.external else {
            return Ok(Clock::SameHost);
        };
        let addr = SocketAddr::new(ext.peer, a.clock.clock_port);
        let args = [
            "--idle-timeout".to_string(),
            IDLE_TIMEOUT.as_secs().to_string(),
            "--lifetime".to_string(),
            lifetime(a).as_secs().to_string(),
        ];
        let responder = Responder::start(bed, addr, &args).map_err(|e| ClockError::Start {
            peer: ext.peer,
            port: a.clock.clock_port,
            command: e.command,
            reason: e.reason,
        })?;
        // The route to the peer picks the source address, of the peer's family.
        let local = match ext.peer {
            IpAddr::V4(_) => SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0)),
            IpAddr::V6(_) => SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0)),
        };
        let io = |source| ClockError::Io {
            responder: addr,
            source,
        };
        let sock = run_in_netns(&bed.ns_b, move || -> std::io::Result<UdpSocket> {
            let s = UdpSocket::bind(local)?;
            s.connect(addr)?;
            Ok(s)
        })?
        .map_err(io)?;
        let prober = Prober::new(sock).map_err(io)?;
        let mut clock = Clock::Measured(Box::new(PeerClock {
            responder,
            prober,
            addr,
            probes: a.clock.clock_probes,
            max_error_ns: (a.clock.max_clock_error_us * 1000.0).round() as u64,
            measurements: Vec::new(),
        }));
        clock.measure()?;
        Ok(clock)
    }

    /// Whether samples wait for the measurement after their run ([`super::Receipts`]).
    pub(crate) fn deferred(&self) -> bool {
        matches!(self, Clock::Measured(_))
    }

    /// Measures the offset now (after a run); the span from the previous measurement to this
    /// one, which the run's samples are corrected by. `None` on one host's clock.
    pub(crate) fn measure(&mut self) -> Result<Option<Span>> {
        let Clock::Measured(c) = self else {
            return Ok(None);
        };
        let est = c.measure()?;
        let before = c.measurements.last().copied();
        c.measurements.push(est);
        Ok(before.map(|before| Span { before, after: est }))
    }

    /// What the document says about the clock.
    pub(crate) fn record(&self) -> LatClock {
        let Clock::Measured(c) = self else {
            return LatClock::SameHost;
        };
        let (Some(first), Some(last)) = (c.measurements.first(), c.measurements.last()) else {
            return LatClock::SameHost;
        };
        let whole = Span {
            before: *first,
            after: *last,
        };
        LatClock::Measured(MeasuredClock {
            responder: c.addr.to_string(),
            probes: c.probes,
            max_error_ns: c.max_error_ns,
            offset_ns: first.offset_ns,
            error_ns: c.measurements.iter().map(|m| m.error_ns).max().unwrap_or(0),
            drift_ppm: whole.drift_ppm(),
            drift_error_ppm: whole.drift_error_ppm(),
            measurements: c
                .measurements
                .iter()
                .map(|m| ClockMeasurement {
                    at_s: m.at.saturating_sub(first.at) as f64 / 1e9,
                    offset_ns: m.offset_ns,
                    error_ns: m.error_ns,
                    rtt_ns: m.rtt_ns,
                    answered: m.answered,
                    sent: m.sent,
                })
                .collect(),
        })
    }
}

impl PeerClock {
    /// One measurement, refused when nothing answered or its bound is too wide.
    fn measure(&mut self) -> Result<Estimate, ClockError> {
        let (peer, port) = (self.addr.ip(), self.addr.port());
        let at = self
            .prober
            .measure(self.probes)
            .map_err(|source| ClockError::Io {
                responder: self.addr,
                source,
            })?;
        let Some(est) = Estimate::best(&at.exchanges, at.sent) else {
            return Err(ClockError::NoAnswer {
                peer,
                port,
                sent: at.sent,
                waited: at.elapsed.as_secs_f64(),
                refused: if at.refused > 0 {
                    format!(
                        "; the peer host reported the port unreachable {} times (nothing \
                         listens there)",
                        at.refused
                    )
                } else {
                    String::new()
                },
                command: self.responder.command.clone(),
            });
        };
        tracing::debug!(?est, late = at.late, stray = at.stray, "clock measured");
        if est.error_ns > self.max_error_ns {
            return Err(ClockError::TooUncertain {
                peer,
                error_us: est.error_ns as f64 / 1e3,
                rtt_us: est.rtt_ns as f64 / 1e3,
                answered: est.answered,
                max_us: self.max_error_ns as f64 / 1e3,
            });
        }
        Ok(est)
    }
}

/// The responder's lifetime, a bound on the whole experiment in case the bench hangs with its
/// keepalive still going: every run at its pace (or 100,000 msg/s unpaced) plus 5 minutes of
/// set-up and waits each, at most a week.
fn lifetime(a: &LatArgs) -> Duration {
    let runs = u64::from(a.rounds) * a.sizes.len() as u64 * (1 + a.modes.len() as u64);
    let pace = if a.rate == 0 { 100_000 } else { a.rate };
    let run = a.messages / pace + 300;
    Duration::from_secs(
        runs.saturating_mul(run)
            .saturating_add(60)
            .min(7 * 24 * 3600),
    )
}
