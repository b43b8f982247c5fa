//! `mpa-peer clock`: the clock responder `mpa-bench lat` starts on a peer host to measure the
//! offset between the two hosts' CLOCK_MONOTONIC (docs/latency.md, "Two hosts"). It answers
//! every well-formed probe ([`mpa_ctl_proto::clock_probe`]) with its own time at the probe's
//! arrival and at the answer, over UDP, and nothing else: a datagram that is not a probe is
//! counted and dropped, never answered. It ends by itself after `--idle-timeout` without a
//! probe or keepalive from its client and after `--lifetime` in any case, so that a bench that
//! went away (a killed `ssh`) leaves nothing running; then it prints one JSON line.
//!
//! Its client is the first source of a well-formed probe or keepalive: that address and port
//! with that message's nonce (a bench probes from one socket with one nonce for its whole
//! run). Only the client's messages keep the responder alive, so that a stranger cannot hold
//! it for its whole lifetime. A stranger's probe is still answered: the answer is no larger
//! than the probe, and should a stranger have come first, the bench still gets its answers
//! (though not a longer life). Strangers' messages are counted apart.

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
    /// Exit after SECONDS without a well-formed probe or keepalive from the client, the first
    /// source of one (the bench sends a keepalive every 2 s while it runs); others' probes are
    /// answered but do not extend the wait.
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = mpa_cli::seconds)]
    idle_timeout: Duration,
    /// Exit after SECONDS whatever arrives.
    #[arg(long, value_name = "SECONDS", default_value = "3600", value_parser = mpa_cli::seconds)]
    lifetime: Duration,
}

/// Who sent a well-formed probe or keepalive.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) enum Sender {
    /// The client: its message extends the responder's life.
    Client,
    /// Another source, or the client's address with another nonce: answered, counted, and
    /// no reason to stay.
    Stranger,
}

/// The client: the first source of a well-formed probe or keepalive, and its nonce.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) struct Client {
    pub(crate) addr: SocketAddr,
    pub(crate) nonce: u64,
}

/// What one datagram was to the responder.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Handled {
    /// A probe: these octets go back to its sender.
    Answer([u8; clock_probe::LEN], Sender),
    /// A keepalive: nothing to send.
    Keepalive(Sender),
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
    /// The well-formed probes and keepalives among those that were not the client's (its
    /// probes answered all the same).
    pub(crate) strangers: u64,
    /// Datagrams that were not well-formed probes or keepalives (answers included).
    pub(crate) dropped: u64,
    /// The client's address, once it has one.
    pub(crate) client: Option<String>,
    /// `idle` or `lifetime`.
    pub(crate) ended: &'static str,
    pub(crate) seconds: f64,
}

/// The responder without its socket.
#[derive(Debug, Default)]
pub(crate) struct Responder {
    pub(crate) client: Option<Client>,
    pub(crate) report: ClockReport,
}

impl Responder {
    /// What to do with `datagram` from `from`, which arrived at `received` (CLOCK_MONOTONIC
    /// ns); `now` reads the clock again right before an answer is built. `datagram` is what
    /// the socket gave, up to one octet more than a message, so that a longer datagram is
    /// seen as too long.
    pub(crate) fn handle(
        &mut self,
        datagram: &[u8],
        from: SocketAddr,
        received: u64,
        now: impl FnOnce() -> u64,
    ) -> Handled {
        let handled = match ClockMessage::parse(datagram) {
            Ok(m @ ClockMessage::Probe { nonce, .. }) => match m.answer(received, now()) {
                Some(a) => Handled::Answer(a.emit(), self.sender(from, nonce)),
                None => Handled::NotAProbe,
            },
            Ok(ClockMessage::Keepalive { nonce }) => Handled::Keepalive(self.sender(from, nonce)),
            Ok(ClockMessage::Answer { .. }) => Handled::NotAProbe,
            Err(e) => Handled::Malformed(e),
        };
        let r = &mut self.report;
        match handled {
            Handled::Answer(_, who) => {
                r.answered += 1;
                r.strangers += u64::from(who == Sender::Stranger);
            }
            Handled::Keepalive(Sender::Client) => r.keepalives += 1,
            Handled::Keepalive(Sender::Stranger) => r.strangers += 1,
            Handled::Malformed(_) | Handled::NotAProbe => r.dropped += 1,
        }
        handled
    }

    /// Who sent a well-formed message; the first sender becomes the client.
    fn sender(&mut self, addr: SocketAddr, nonce: u64) -> Sender {
        let me = Client { addr, nonce };
        match self.client {
            Some(c) if c == me => Sender::Client,
            Some(_) => Sender::Stranger,
            None => {
                self.client = Some(me);
                self.report.client = Some(addr.to_string());
                Sender::Client
            }
        }
    }
}

/// Serves probes until idle or the lifetime ends.
pub(crate) fn clock(a: ClockArgs) -> anyhow::Result<bool> {
    if a.idle_timeout.is_zero() || a.lifetime.is_zero() {
        usage!("--idle-timeout and --lifetime must be more than 0 s");
    }
    let sock = UdpSocket::bind(a.listen).with_context(|| format!("bind UDP {}", a.listen))?;
    let mut responder = Responder::default();
    responder.report.listen = sock.local_addr()?.to_string();
    // The bench (and tests, with ...:0) read the bound address from this line.
    eprintln!(
        "mpa-peer: clock: listening on {} (UDP)",
        responder.report.listen
    );
    let start = Instant::now();
    let mut last = start;
    let mut buf = [0u8; clock_probe::LEN + 1];
    let ended = loop {
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
        match responder.handle(&buf[..n], from, received, monotonic_ns) {
            Handled::Answer(octets, who) => {
                if who == Sender::Client {
                    last = Instant::now();
                } else {
                    tracing::debug!(%from, "a stranger's clock probe: answered, no longer life");
                }
                // A lost answer is a lost probe to the bench; nothing to do here.
                if let Err(e) = sock.send_to(&octets, from) {
                    tracing::debug!(%from, %e, "clock answer not sent");
                }
            }
            Handled::Keepalive(Sender::Client) => last = Instant::now(),
            Handled::Keepalive(Sender::Stranger) => {
                tracing::debug!(%from, "a stranger's clock keepalive: ignored")
            }
            Handled::Malformed(e) => tracing::debug!(%from, %e, "not a clock probe"),
            Handled::NotAProbe => tracing::debug!(%from, "a clock answer, not answered"),
        }
    };
    let mut report = responder.report;
    report.ended = ended;
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

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 1], port))
    }

    fn handled(octets: &[u8]) -> (Handled, ClockReport) {
        let mut r = Responder::default();
        let h = r.handle(octets, addr(1), 1_000, || 1_500);
        (h, r.report)
    }

    #[test]
    fn a_probe_gets_both_times_and_its_nonce_and_number_back() {
        let probe = ClockMessage::Probe { nonce: 42, seq: 7 }.emit();
        let (h, r) = handled(&probe);
        let Handled::Answer(octets, Sender::Client) = h else {
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
        assert_eq!(h, Handled::Keepalive(Sender::Client));
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
        let mut r = Responder::default();
        for (octets, want) in cases {
            let h = r.handle(octets, addr(1), 1, || panic!("no clock read for {want:?}"));
            assert_eq!(h, want);
        }
        // Nothing well-formed came: no client yet.
        assert_eq!(r.client, None);
        let r = r.report;
        assert_eq!((r.answered, r.keepalives, r.dropped), (0, 0, 9));
    }

    #[test]
    fn the_first_sender_is_the_client_and_others_are_answered_as_strangers() {
        let mut r = Responder::default();
        let probe = |nonce| ClockMessage::Probe { nonce, seq: 1 }.emit();
        let keepalive = |nonce| ClockMessage::Keepalive { nonce }.emit();
        let steps: [(&[u8], SocketAddr, Sender); 6] = [
            (&keepalive(7), addr(1), Sender::Client),
            (&probe(7), addr(1), Sender::Client),
            // Another port, another address, the client's address with another nonce.
            (&probe(7), addr(2), Sender::Stranger),
            (
                &probe(7),
                SocketAddr::from(([192, 0, 2, 9], 1)),
                Sender::Stranger,
            ),
            (&probe(8), addr(1), Sender::Stranger),
            (&keepalive(7), addr(2), Sender::Stranger),
        ];
        for (octets, from, want) in steps {
            let who = match r.handle(octets, from, 1, || 2) {
                Handled::Answer(_, who) | Handled::Keepalive(who) => who,
                h => panic!("{h:?}"),
            };
            assert_eq!(who, want, "{from}");
        }
        assert_eq!(
            r.client,
            Some(Client {
                addr: addr(1),
                nonce: 7
            })
        );
        let rep = &r.report;
        assert_eq!(
            (rep.answered, rep.keepalives, rep.strangers, rep.dropped),
            (4, 1, 4, 0)
        );
        assert_eq!(rep.client.as_deref(), Some("192.0.2.1:1"));
    }
}
