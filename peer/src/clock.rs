//! `mpa-peer clock`: the clock responder `mpa-bench lat` starts on a peer host to measure the
//! offset between the two hosts' CLOCK_MONOTONIC (docs/latency.md, "Two hosts"). It answers
//! every well-formed probe ([`mpa_ctl_proto::clock_probe`]) with its own time at the probe's
//! arrival and at the answer, over UDP, and nothing else: a datagram that is not a probe is
//! counted and dropped, never answered. It ends by itself after `--idle-timeout` without a
//! probe or keepalive and after `--lifetime` in any case, so that a bench that went away (a
//! killed `ssh`) leaves nothing running; then it prints one JSON line.

use super::*;
use mpa_ctl_proto::clock_probe::{self, ClockMessage, ClockProbeError};
use serde::Serialize;
use std::io::ErrorKind;
use std::net::UdpSocket;

#[derive(Args)]
pub(crate) struct ClockArgs {
    /// The UDP address and port to answer probes on (this host's address as the bench sees
    /// it).
    #[arg(long, value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// Exit after SECONDS without a well-formed probe or keepalive (the bench sends a
    /// keepalive every 2 s while it runs).
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = mpa_cli::seconds)]
    idle_timeout: Duration,
    /// Exit after SECONDS whatever arrives.
    #[arg(long, value_name = "SECONDS", default_value = "3600", value_parser = mpa_cli::seconds)]
    lifetime: Duration,
}

/// What one datagram was to the responder.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Handled {
    /// A probe: these octets go back to its sender.
    Answer([u8; clock_probe::LEN]),
    /// A keepalive: nothing to send.
    Keepalive,
    /// Not a clock message: dropped.
    Malformed(ClockProbeError),
    /// Another responder's answer: dropped, never answered, so that two responders cannot
    /// keep each other busy.
    NotAProbe,
}

/// The responder's counts, its JSON line at the end.
#[derive(Serialize, Default, Debug, PartialEq)]
pub(crate) struct ClockReport {
    pub(crate) listen: String,
    pub(crate) answered: u64,
    pub(crate) keepalives: u64,
    /// Datagrams that were not well-formed probes or keepalives (answers included).
    pub(crate) dropped: u64,
    /// `idle` or `lifetime`.
    pub(crate) ended: &'static str,
    pub(crate) seconds: f64,
}

/// The responder without its socket: what to do with `datagram`, which arrived at
/// `received` (CLOCK_MONOTONIC ns); `now` reads the clock again right before an answer is
/// built. `datagram` is what the socket gave, up to one octet more than a message, so that a
/// longer datagram is seen as too long.
pub(crate) fn handle(
    datagram: &[u8],
    received: u64,
    now: impl FnOnce() -> u64,
    report: &mut ClockReport,
) -> Handled {
    let handled = match ClockMessage::parse(datagram) {
        Ok(m @ ClockMessage::Probe { .. }) => match m.answer(received, now()) {
            Some(a) => Handled::Answer(a.emit()),
            None => Handled::NotAProbe,
        },
        Ok(ClockMessage::Keepalive { .. }) => Handled::Keepalive,
        Ok(ClockMessage::Answer { .. }) => Handled::NotAProbe,
        Err(e) => Handled::Malformed(e),
    };
    match handled {
        Handled::Answer(_) => report.answered += 1,
        Handled::Keepalive => report.keepalives += 1,
        Handled::Malformed(_) | Handled::NotAProbe => report.dropped += 1,
    }
    handled
}

/// Serves probes until idle or the lifetime ends.
pub(crate) fn clock(a: ClockArgs) -> anyhow::Result<bool> {
    if a.idle_timeout.is_zero() || a.lifetime.is_zero() {
        usage!("--idle-timeout and --lifetime must be more than 0 s");
    }
    let sock = UdpSocket::bind(a.listen).with_context(|| format!("bind UDP {}", a.listen))?;
    let mut report = ClockReport {
        listen: sock.local_addr()?.to_string(),
        ..ClockReport::default()
    };
    // The bench (and tests, with ...:0) read the bound address from this line.
    eprintln!("mpa-peer: clock: listening on {} (UDP)", report.listen);
    let start = Instant::now();
    let mut last = start;
    let mut buf = [0u8; clock_probe::LEN + 1];
    report.ended = loop {
        let now = Instant::now();
        let (idle_end, life_end) = (last + a.idle_timeout, start + a.lifetime);
        if now >= life_end {
            break "lifetime";
        }
        if now >= idle_end {
            break "idle";
        }
        sock.set_read_timeout(Some(idle_end.min(life_end) - now))?;
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            // An ICMP error for an earlier answer, or a signal: the socket is still good.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionRefused | ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => return Err(e).context("receive a clock probe"),
        };
        let received = monotonic_ns();
        match handle(&buf[..n], received, monotonic_ns, &mut report) {
            Handled::Answer(octets) => {
                last = Instant::now();
                // A lost answer is a lost probe to the bench; nothing to do here.
                if let Err(e) = sock.send_to(&octets, from) {
                    tracing::debug!(%from, %e, "clock answer not sent");
                }
            }
            Handled::Keepalive => last = Instant::now(),
            Handled::Malformed(e) => tracing::debug!(%from, %e, "not a clock probe"),
            Handled::NotAProbe => tracing::debug!(%from, "a clock answer, not answered"),
        }
    };
    report.seconds = start.elapsed().as_secs_f64();
    mpa_cli::outln!(
        "{}",
        serde_json::to_string(&report).context("encode the report")?
    );
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handled(octets: &[u8]) -> (Handled, ClockReport) {
        let mut r = ClockReport::default();
        let h = handle(octets, 1_000, || 1_500, &mut r);
        (h, r)
    }

    #[test]
    fn a_probe_gets_both_times_and_its_nonce_and_number_back() {
        let probe = ClockMessage::Probe { nonce: 42, seq: 7 }.emit();
        let (h, r) = handled(&probe);
        let Handled::Answer(octets) = h else {
            panic!("{h:?}");
        };
        assert_eq!(
            ClockMessage::parse(&octets),
            Ok(ClockMessage::Answer {
                nonce: 42,
                seq: 7,
                received: 1_000,
                answered: 1_500
            })
        );
        assert_eq!((r.answered, r.keepalives, r.dropped), (1, 0, 0));
        let (h, r) = handled(&ClockMessage::Keepalive { nonce: 42 }.emit());
        assert_eq!(h, Handled::Keepalive);
        assert_eq!((r.answered, r.keepalives, r.dropped), (0, 1, 0));
    }

    #[test]
    fn malformed_probes_are_dropped_and_counted_never_answered() {
        let probe = ClockMessage::Probe { nonce: 1, seq: 1 }.emit();
        let mut long = probe.to_vec();
        long.push(0);
        let mut times = probe;
        times[39] = 1;
        let mut kind = probe;
        kind[5] = 9;
        let mut version = probe;
        version[4] = 2;
        let mut reserved = probe;
        reserved[21] = 0x80;
        let answer = ClockMessage::Answer {
            nonce: 1,
            seq: 1,
            received: 5,
            answered: 6,
        }
        .emit();
        let cases: [(&[u8], Handled); 9] = [
            (&[], Handled::Malformed(ClockProbeError::Length { have: 0 })),
            (
                &probe[..39],
                Handled::Malformed(ClockProbeError::Length { have: 39 }),
            ),
            (
                &long,
                Handled::Malformed(ClockProbeError::Length { have: 41 }),
            ),
            (&[0u8; 40], Handled::Malformed(ClockProbeError::Magic)),
            (&version, Handled::Malformed(ClockProbeError::Version(2))),
            (&kind, Handled::Malformed(ClockProbeError::Kind(9))),
            (&reserved, Handled::Malformed(ClockProbeError::Reserved)),
            (&times, Handled::Malformed(ClockProbeError::TimesInProbe)),
            // Another responder's answer: not answered back.
            (&answer, Handled::NotAProbe),
        ];
        let mut r = ClockReport::default();
        for (octets, want) in cases {
            let h = handle(octets, 1, || panic!("no clock read for {want:?}"), &mut r);
            assert_eq!(h, want);
        }
        assert_eq!((r.answered, r.keepalives, r.dropped), (0, 0, 9));
    }
}
