//! The probing side of a clock measurement: one UDP socket toward the responder, a
//! measurement of up to N exchanges, and a keepalive every 2 s for as long as the bench runs
//! (the responder ends itself when idle). Every answer is hostile input: it counts only when
//! it parses ([`ClockMessage::parse`]: length, magic, version, kind, reserved octets, times
//! in order) and echoes this prober's nonce and the number of the probe just sent; anything
//! else is counted and dropped.

use super::estimate::Exchange;
use crate::lat::samples::monotonic_ns;
use mpa_ctl_proto::clock_probe::{ClockMessage, LEN};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, ErrorKind};
use std::net::UdpSocket;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A measurement that has had no answer for this long gives up.
pub(crate) const FIRST_ANSWER_WITHIN: Duration = Duration::from_secs(3);
/// A measurement ends after this long with what it has.
const MEASURE_WITHIN: Duration = Duration::from_secs(10);
/// How long one probe's answer is waited for before the next probe goes out.
const PROBE_WAIT: Duration = Duration::from_millis(500);
/// How often the responder hears that the bench is still there (its idle timeout is
/// longer: [`super::IDLE_TIMEOUT`]).
const KEEPALIVE_EVERY: Duration = Duration::from_secs(2);
/// The pause after an ICMP port unreachable, before the next probe.
const REFUSED_PAUSE: Duration = Duration::from_millis(10);

/// What one measurement got.
#[derive(Debug, Default)]
pub(crate) struct Attempt {
    /// Answered exchanges, in order.
    pub(crate) exchanges: Vec<Exchange>,
    /// Probes sent.
    pub(crate) sent: u32,
    /// ICMP port unreachable reports (nothing listens on the port on the peer host).
    pub(crate) refused: u32,
    /// Answers to an earlier probe of ours, arriving after it was given up.
    pub(crate) late: u32,
    /// Datagrams that were not an answer of ours.
    pub(crate) stray: u32,
    /// How long it took.
    pub(crate) elapsed: Duration,
}

/// Probes one responder from a socket connected to it; a keepalive thread beside.
pub(crate) struct Prober {
    sock: UdpSocket,
    nonce: u64,
    seq: u32,
    keepalive: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
}

impl Prober {
    /// A prober on `sock` (connected to the responder), its keepalive running.
    pub(crate) fn new(sock: UdpSocket) -> io::Result<Prober> {
        // Not a secret: it tells this run's answers from any other's (std seeds its hasher
        // keys randomly per process).
        let nonce = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let ka = sock.try_clone()?;
        let (stop, stopped) = mpsc::channel::<()>();
        let beat = ClockMessage::Keepalive { nonce }.emit();
        let thread = std::thread::Builder::new()
            .name("clock-keepalive".into())
            .spawn(move || {
                // Ends when the prober drops its sender.
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(KEEPALIVE_EVERY)
                {
                    // A lost keepalive is made up for by the next; a refused one shows in the
                    // next measurement.
                    let _ = ka.send(&beat);
                }
            })?;
        Ok(Prober {
            sock,
            nonce,
            seq: 0,
            keepalive: Some((stop, thread)),
        })
    }

    /// Sends up to `probes` probes, one at a time, each waited for up to 500 ms; stops at
    /// `probes` answers, after 3 s without any, or after 10 s.
    pub(crate) fn measure(&mut self, probes: u32) -> io::Result<Attempt> {
        let start = Instant::now();
        let mut at = Attempt::default();
        let mut buf = [0u8; LEN + 1];
        while (at.exchanges.len() as u32) < probes {
            let elapsed = start.elapsed();
            if elapsed >= MEASURE_WITHIN
                || (at.exchanges.is_empty() && elapsed >= FIRST_ANSWER_WITHIN)
            {
                break;
            }
            self.seq = self.seq.wrapping_add(1);
            let seq = self.seq;
            let probe = ClockMessage::Probe {
                nonce: self.nonce,
                seq,
            }
            .emit();
            let sent = monotonic_ns();
            match self.sock.send(&probe) {
                Ok(_) => at.sent += 1,
                // An earlier probe's ICMP port unreachable, reported now.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                    at.refused += 1;
                    std::thread::sleep(REFUSED_PAUSE);
                    continue;
                }
                Err(e) => return Err(e),
            }
            let deadline = Instant::now() + PROBE_WAIT;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                self.sock.set_read_timeout(Some(left))?;
                let n = match self.sock.recv(&mut buf) {
                    Ok(n) => n,
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        break
                    }
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                        at.refused += 1;
                        std::thread::sleep(REFUSED_PAUSE);
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                // Taken before anything else is done with the answer.
                let received = monotonic_ns();
                match ClockMessage::parse(&buf[..n]) {
                    Ok(ClockMessage::Answer {
                        nonce,
                        seq: s,
                        received: peer_received,
                        answered: peer_answered,
                    }) if nonce == self.nonce && s == seq => {
                        at.exchanges.push(Exchange {
                            sent,
                            peer_received,
                            peer_answered,
                            received,
                        });
                        break;
                    }
                    Ok(ClockMessage::Answer { nonce, .. }) if nonce == self.nonce => at.late += 1,
                    _ => at.stray += 1,
                }
            }
        }
        at.elapsed = start.elapsed();
        Ok(at)
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.keepalive.take() {
            drop(stop);
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A responder on loopback that answers through `answer` (which may lie), once per probe,
    /// until no probe came for a second; the number of probes it got.
    fn responder(
        answer: impl Fn(ClockMessage, u64) -> Vec<Vec<u8>> + Send + 'static,
    ) -> (UdpSocket, std::thread::JoinHandle<u32>) {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        server
            .set_read_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client.connect(server.local_addr().unwrap()).unwrap();
        let t = std::thread::spawn(move || {
            let mut probes = 0;
            let mut buf = [0u8; 64];
            while let Ok((n, from)) = server.recv_from(&mut buf) {
                let Ok(m @ ClockMessage::Probe { .. }) = ClockMessage::parse(&buf[..n]) else {
                    continue;
                };
                probes += 1;
                for octets in answer(m, monotonic_ns()) {
                    server.send_to(&octets, from).unwrap();
                }
            }
            probes
        });
        (client, t)
    }

    #[test]
    fn only_answers_echoing_the_nonce_and_number_count() {
        let (client, server) = responder(|m, now| {
            let ClockMessage::Probe { nonce, seq } = m else {
                unreachable!()
            };
            let good = m.answer(now, now).unwrap().emit();
            let wrong_nonce = ClockMessage::Probe {
                nonce: nonce ^ 1,
                seq,
            }
            .answer(now, now)
            .unwrap()
            .emit();
            let earlier = ClockMessage::Probe {
                nonce,
                seq: seq.wrapping_sub(1),
            }
            .answer(now, now)
            .unwrap()
            .emit();
            let backwards = ClockMessage::Answer {
                nonce,
                seq,
                received: now + 1,
                answered: now,
            }
            .emit();
            let mut long = good.to_vec();
            long.push(0);
            // The real answer comes last, after every kind of wrong one.
            vec![
                wrong_nonce.to_vec(),
                earlier.to_vec(),
                long,
                good[..39].to_vec(),
                m.emit().to_vec(),
                backwards.to_vec(),
                good.to_vec(),
            ]
        });
        let mut p = Prober::new(client).unwrap();
        let at = p.measure(5).unwrap();
        assert_eq!(server.join().unwrap(), 5);
        assert_eq!(at.sent, 5);
        assert_eq!(at.exchanges.len(), 5);
        assert_eq!((at.late, at.stray, at.refused), (5, 25, 0));
        for e in &at.exchanges {
            // Loopback, one clock: the answer's times lie between ours.
            assert!(
                e.sent <= e.peer_received && e.peer_answered <= e.received,
                "{e:?}"
            );
        }
    }

    #[test]
    fn a_silent_responder_gives_up_after_the_first_answer_timeout() {
        let (client, server) = responder(|_, _| Vec::new());
        let mut p = Prober::new(client).unwrap();
        let at = p.measure(200).unwrap();
        assert!(at.exchanges.is_empty());
        assert!(at.elapsed >= FIRST_ANSWER_WITHIN, "{at:?}");
        // Each probe waited for its 500 ms: at most one more than fit in 3 s.
        assert!((1..=7).contains(&at.sent), "{at:?}");
        assert_eq!(server.join().unwrap(), at.sent);
        assert_eq!(at.refused, 0);
    }

    #[test]
    fn a_closed_port_is_reported_as_refused() {
        let gone = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = gone.local_addr().unwrap();
        drop(gone);
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client.connect(addr).unwrap();
        let at = Prober::new(client).unwrap().measure(10).unwrap();
        assert!(at.exchanges.is_empty());
        assert!(at.refused > 0, "{at:?}");
    }
}
