//! `connect --op pingpong`: write ping-pong latency in the style of perftest's
//! `ib_write_lat`, against `listen --advertise … --echo` (`echo.rs`).
//!
//! The Initiator advertises a region of its own in its Request's private data ([`local_ad`]:
//! STag [`LOCAL_STAG`], the payload's length, base TO 0; `--private-data` follows it, as on
//! the listener's Reply). Then, W warm-up and N measured times: one RDMA Write of the payload
//! (payload `i` of the shared pattern, so that an echo of an earlier ping cannot pass for
//! this one) to the Responder's advertised region at its base TO, flushed at once; then wait
//! until the echo — an RDMA Write to our STag at TO 0, the same octets, L on its last
//! segment — has fully arrived, and check it. The round trip is timed with CLOCK_MONOTONIC
//! from just before the ping is encoded and written to just after the ULPDU carrying the
//! echo's last octets was read and verified (its CRC), before its octets are compared;
//! RTT/2 goes into an HdrHistogram (1 ns .. 1 h, 3 significant digits). One ping is
//! outstanding at a time, so nothing queues: TCP_NODELAY, blocking I/O, every wait bounded by
//! `--timeout`.

use crate::read::head_of;
use crate::report::{Report, RttReport};
use crate::{ConnectArgs, ConnectError, Op};
use anyhow::bail;
use hdrhistogram::Histogram;
use mpa::crc::crc32c_append;
use mpa::endpoint::{EndpointError, MpaStream, Transport};
use mpa::startup::{Negotiated, RtrType};
use mpa::wire::ddp::{
    terminate_ulpdu_for_segment, DdpRepr, RdmapOpcode, TerminateRepr, TAGGED_HEADER_LEN,
    UNTAGGED_HEADER_LEN,
};
use mpa_ctl_proto::pattern::PatternTable;
use mpa_ctl_proto::region_ad::RegionAd;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// The STag of the Initiator's echo region (a fixed value: it only has to come back).
pub(crate) const LOCAL_STAG: u32 = 0x5a5a_0002;

/// The region the Initiator advertises for the echoes of `payload`-octet pings.
pub(crate) fn local_ad(payload: usize) -> RegionAd {
    RegionAd {
        writes: true,
        sends: false,
        stag: LOCAL_STAG,
        len: payload as u64,
        base_to: 0,
        recv_buf_size: 0,
    }
}

/// Checks the arguments against `--op` and returns the Request's private data: with `--op
/// pingpong` our region's advertisement first, `--private-data` after it (as on the
/// listener's Reply).
pub(crate) fn request_private_data(a: &ConnectArgs) -> anyhow::Result<Vec<u8>> {
    let pingpong = a.op == Op::Pingpong;
    if !pingpong && (a.warmup.is_some() || a.rtt_samples.is_some()) {
        bail!("--warmup and --rtt-samples are for --op pingpong");
    }
    if pingpong && (a.timestamps || a.rate.is_some() || a.aligned) {
        bail!("--timestamps, --rate and --aligned are not for --op pingpong");
    }
    let mut private_data = Vec::new();
    if pingpong {
        let Some(payload) = a.size.checked_sub(TAGGED_HEADER_LEN) else {
            bail!(
                "--op pingpong needs --size of at least {TAGGED_HEADER_LEN} octets (the tagged \
                 DDP header); --size {} is too small",
                a.size
            );
        };
        private_data.extend_from_slice(&local_ad(payload).emit());
    }
    private_data.extend_from_slice(a.private_data.as_deref().unwrap_or("").as_bytes());
    Ok(private_data)
}

/// Why an echo is not the one the Initiator waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PingError {
    /// Not an RDMA Write (a Terminate the endpoint reports itself).
    #[error("unexpected {opcode:?} while waiting for an echo")]
    UnexpectedOpcode { opcode: RdmapOpcode },
    /// A message while no ping is outstanding.
    #[error("an RDMA Write with no ping outstanding")]
    Unsolicited,
    /// An echo to another STag than our region's.
    #[error("echo to STag {stag:#x}, our region is STag {LOCAL_STAG:#x}")]
    WrongStag { stag: u32 },
    /// An echo segment at another TO than where the echo continues.
    #[error("echo of ping {ping} at TO {to:#x}, expected {expected:#x}")]
    WrongTo { ping: u64, to: u64, expected: u64 },
    /// More octets than the ping carried, or L before all of them.
    #[error("echo of ping {ping}: {got} octets with L {last}, the ping carried {size}")]
    Length {
        ping: u64,
        got: u64,
        size: u64,
        last: bool,
    },
    /// The echo's octets differ from the ping's.
    #[error(
        "echo of ping {ping}: {octets} octets differ from those sent (the first at offset {first})"
    )]
    Mismatch { ping: u64, octets: u64, first: u64 },
}

impl PingError {
    /// The Terminate a Data Sink sends for a message it cannot take (as [`crate::read`]'s
    /// Reader: RFC 5041 §7.2 for the tagged checks, RFC 5040 Figure 9 0x06 for a message that
    /// is no Write we wait for); `None` for octets that differ, which no protocol rule
    /// catches (the CRC held): the connection just ends.
    pub(crate) fn terminate(&self) -> Option<TerminateRepr> {
        let (layer, error_type, error_code) = match self {
            PingError::WrongStag { .. } => (1, 1, 0x00),
            PingError::WrongTo { .. } | PingError::Length { .. } => (1, 1, 0x01),
            PingError::UnexpectedOpcode { .. } | PingError::Unsolicited => (0, 2, 0x06),
            PingError::Mismatch { .. } => return None,
        };
        Some(TerminateRepr {
            layer,
            error_type,
            error_code,
        })
    }
}

/// The pings: which goes out next, the check of its echo, and the round-trip times.
pub(crate) struct Pinger {
    target: RegionAd,
    payload: usize,
    warmup: u64,
    total: u64,
    table: PatternTable,
    /// Pings whose echo arrived, octet for octet.
    done: u64,
    /// Ping `done` was sent and its echo is awaited.
    outstanding: bool,
    /// Echo octets of ping `done` received so far, those that differed, and the first.
    got: u64,
    mismatches: u64,
    first_mismatch: u64,
    /// A zero-length Read RTR (RFC 6581 §9.2) awaits its zero-length response.
    rtr_pending: bool,
    hist: Histogram<u64>,
    /// Every measured RTT (ns), when asked for.
    samples: Option<Vec<u64>>,
}

impl Pinger {
    /// `warmup` + `count` pings of `payload` octets into `target` (the Responder's region,
    /// which holds them); `rtr_read`: the RTR was a zero-length Read Request.
    pub(crate) fn new(
        target: &RegionAd,
        payload: usize,
        count: u64,
        warmup: u64,
        rtr_read: bool,
        keep_samples: bool,
    ) -> Self {
        Pinger {
            target: *target,
            payload,
            warmup,
            total: warmup.saturating_add(count),
            table: PatternTable::new(payload),
            done: 0,
            outstanding: false,
            got: 0,
            mismatches: 0,
            first_mismatch: 0,
            rtr_pending: rtr_read,
            hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds"),
            samples: keep_samples.then(Vec::new),
        }
    }

    /// Every ping answered.
    pub(crate) fn finished(&self) -> bool {
        self.done == self.total
    }

    /// The next ping (header and payload); its echo is awaited from now on.
    pub(crate) fn next_ping(&mut self) -> (DdpRepr, &[u8]) {
        self.outstanding = true;
        self.got = 0;
        self.mismatches = 0;
        let h = DdpRepr::Tagged {
            last: true,
            opcode: RdmapOpcode::RdmaWrite,
            stag: self.target.stag,
            to: self.target.base_to,
        };
        (h, self.table.payload(self.done, self.payload))
    }

    /// Checks one ULPDU (first octets `head`, `len` in all, given as `pieces`) as the next
    /// segment of the echo; `Ok(true)` when it completed the echo (L), octet for octet.
    pub(crate) fn on_ulpdu<'a>(
        &mut self,
        head: &[u8],
        len: usize,
        version: u8,
        pieces: impl Iterator<Item = &'a [u8]>,
    ) -> Result<bool, PingError> {
        let (opcode, last, stag, to) = match DdpRepr::parse(head, version) {
            Ok((
                DdpRepr::Tagged {
                    opcode,
                    last,
                    stag,
                    to,
                },
                _,
            )) => (opcode, last, stag, to),
            Ok((DdpRepr::Untagged { opcode, .. }, _)) => {
                return Err(PingError::UnexpectedOpcode { opcode })
            }
            Err(_) => {
                return Err(PingError::UnexpectedOpcode {
                    opcode: RdmapOpcode::Unknown(0xf),
                })
            }
        };
        let n = (len - TAGGED_HEADER_LEN) as u64;
        if self.rtr_pending && opcode == RdmapOpcode::RdmaReadResponse && last && n == 0 {
            // The RTR's zero-length response: STag and TO unchecked (RFC 5041 §5.3).
            self.rtr_pending = false;
            return Ok(false);
        }
        if opcode != RdmapOpcode::RdmaWrite {
            return Err(PingError::UnexpectedOpcode { opcode });
        }
        if !self.outstanding {
            return Err(PingError::Unsolicited);
        }
        let ping = self.done;
        // RFC 5041 §5.3: a zero-length segment's STag and TO are not checked.
        if n > 0 {
            if stag != LOCAL_STAG {
                return Err(PingError::WrongStag { stag });
            }
            if to != self.got {
                return Err(PingError::WrongTo {
                    ping,
                    to,
                    expected: self.got,
                });
            }
        }
        let size = self.payload as u64;
        let got = self.got + n;
        if got > size || (last && got != size) {
            return Err(PingError::Length {
                ping,
                got,
                size,
                last,
            });
        }
        let sent = self.table.payload(ping, self.payload);
        let mut at = self.got as usize;
        let mut skip = TAGGED_HEADER_LEN;
        for p in pieces {
            let s = skip.min(p.len());
            skip -= s;
            let p = &p[s..];
            let want = &sent[at..at + p.len()];
            if p != want {
                let first = p.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
                if self.mismatches == 0 {
                    self.first_mismatch = (at + first) as u64;
                }
                self.mismatches += p.iter().zip(want).filter(|(a, b)| a != b).count() as u64;
            }
            at += p.len();
        }
        self.got = got;
        if !last {
            return Ok(false);
        }
        self.outstanding = false;
        if self.mismatches > 0 {
            // Not answered: the run ends here, without counting this ping.
            return Err(PingError::Mismatch {
                ping,
                octets: self.mismatches,
                first: self.first_mismatch,
            });
        }
        self.done += 1;
        Ok(true)
    }

    /// Records the round trip of the ping just answered (warm-up pings are not recorded).
    pub(crate) fn record(&mut self, rtt_ns: u64) {
        if self.done > self.warmup {
            self.hist.saturating_record((rtt_ns / 2).max(1));
            if let Some(s) = &mut self.samples {
                s.push(rtt_ns);
            }
        }
    }

    /// Measured round trips so far, and warm-up ones.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.done.saturating_sub(self.warmup),
            self.done.min(self.warmup),
        )
    }
}

/// The [`Pinger`] for `connect --op pingpong`, or why the Reply rules it out (the message
/// for the report).
pub(crate) fn pinger_for(
    neg: &Negotiated,
    ad: Option<&RegionAd>,
    payload: usize,
    count: u64,
    warmup: u64,
    keep_samples: bool,
) -> Result<Pinger, String> {
    let Some(ad) = ad else {
        return Err(
            "--op pingpong: the Responder's Reply carries no region advertisement, so \
                    there is no region to write the pings into (listen --advertise … --echo)"
                .into(),
        );
    };
    if !ad.writes {
        return Err(format!(
            "--op pingpong: the Responder's region advertisement (STag {:#x}) does not accept \
             RDMA Writes (flag 0x01 clear)",
            ad.stag
        ));
    }
    if payload as u64 > ad.len {
        return Err(format!(
            "--op pingpong: a ping of {payload} payload octets does not fit the advertised \
             region of {} octets (STag {:#x})",
            ad.len, ad.stag
        ));
    }
    let rtr_read = neg.rtr == Some(RtrType::ZeroLengthReadRequest);
    Ok(Pinger::new(
        ad,
        payload,
        count,
        warmup,
        rtr_read,
        keep_samples,
    ))
}

/// Runs the pings: one at a time, each flushed at once, its echo awaited at most `timeout`
/// and checked; an echo that breaks a rule is answered with its Terminate
/// ([`PingError::terminate`]). `digest` takes the ping ULPDUs sent.
pub(crate) fn run<S: Transport>(
    s: &mut MpaStream<S>,
    pinger: &mut Pinger,
    timeout: Duration,
    digest: &mut u32,
) -> Result<(), ConnectError> {
    let version = s.negotiated().ddp_rdmap_version;
    let mut ulpdu = vec![0u8; TAGGED_HEADER_LEN + pinger.payload];
    while !pinger.finished() {
        let (h, data) = pinger.next_ping();
        let off = h.emit(&mut ulpdu, version).unwrap_or(TAGGED_HEADER_LEN);
        ulpdu[off..].copy_from_slice(data);
        // Before the encoder (CRC) and the write: the echo's encoding counts too.
        let t0 = crate::monotonic_ns();
        s.send(&ulpdu)?;
        s.flush()?;
        let deadline = Instant::now() + timeout;
        let mut t1 = None;
        while t1.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(EndpointError::Timeout.into());
            }
            let mut bad = None;
            let n = s.recv_with(Some(left), |u| {
                // Read and verified (CRC) already; taken before our own checks.
                let at = crate::monotonic_ns();
                if bad.is_some() {
                    return;
                }
                let (head, k) = head_of(&u);
                match pinger.on_ulpdu(&head[..k], u.len(), version, u.pieces()) {
                    Ok(true) => t1 = Some(at),
                    Ok(false) => {}
                    Err(e) => bad = Some((e, head, k, u.len())),
                }
            })?;
            if let Some((e, head, k, len)) = bad {
                let Some(t) = e.terminate() else {
                    return Err(ConnectError::Failed(e.to_string()));
                };
                let hdr = &head[..k.min(UNTAGGED_HEADER_LEN)];
                let term = terminate_ulpdu_for_segment(t, 1, version, len, hdr);
                // Best effort: the connection ends with `e` whatever happens to the Terminate.
                let _ = s.send(&term).and_then(|()| s.flush());
                return Err(ConnectError::Violation(t, e.to_string()));
            }
            if n.is_none() {
                return Err(EndpointError::Closed.into());
            }
        }
        pinger.record(t1.unwrap_or(t0).saturating_sub(t0));
        *digest = crc32c_append(*digest, &ulpdu);
    }
    Ok(())
}

/// The pings' numbers in the report; `samples`: the file for every measured RTT, one per
/// line (ns), written with what was measured even when the run failed.
pub(crate) fn report(report: &mut Report, pinger: &Pinger, samples: Option<&Path>) {
    let (iterations, warmup) = pinger.counts();
    report.iterations = Some(iterations);
    report.warmup = Some(warmup);
    report.rtt_half_ns = RttReport::of(&pinger.hist);
    if let (Some(path), Some(rtts)) = (samples, &pinger.samples) {
        if let Err(e) = write_samples(path, rtts) {
            let msg = format!("--rtt-samples {}: {e}", path.display());
            eprintln!("mpa-peer: {msg}");
            report.error.get_or_insert(msg);
        }
    }
}

fn write_samples(path: &Path, rtts: &[u64]) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for r in rtts {
        writeln!(f, "{r}")?;
    }
    f.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::tagged_ulpdu as tagged;

    fn target() -> RegionAd {
        RegionAd {
            writes: true,
            sends: false,
            stag: 0x2a,
            len: 100,
            base_to: 0x1000,
            recv_buf_size: 0,
        }
    }

    fn echo(stag: u32, to: u64, last: bool, data: &[u8]) -> Vec<u8> {
        tagged(RdmapOpcode::RdmaWrite, stag, to, last, data)
    }

    fn feed(p: &mut Pinger, u: &[u8]) -> Result<bool, PingError> {
        // Two pieces, as markers would cut it.
        let cut = u.len().min(9);
        p.on_ulpdu(
            &u[..u.len().min(TAGGED_HEADER_LEN)],
            u.len(),
            1,
            [&u[..cut], &u[cut..]].into_iter(),
        )
    }

    #[test]
    fn pings_are_checked_and_only_measured_ones_recorded() {
        let mut p = Pinger::new(&target(), 20, 2, 1, false, true);
        let mut sent = Vec::new();
        for (i, rtt) in [(0u64, 1_000_000u64), (1, 3000), (2, 5000)] {
            let (h, data) = p.next_ping();
            assert_eq!(
                h,
                DdpRepr::Tagged {
                    last: true,
                    opcode: RdmapOpcode::RdmaWrite,
                    stag: 0x2a,
                    to: 0x1000
                }
            );
            let data = data.to_vec();
            assert!(
                !sent.contains(&data),
                "ping {i} differs from the earlier ones"
            );
            sent.push(data.clone());
            // In two segments.
            assert_eq!(
                feed(&mut p, &echo(LOCAL_STAG, 0, false, &data[..7])),
                Ok(false)
            );
            assert_eq!(
                feed(&mut p, &echo(LOCAL_STAG, 7, true, &data[7..])),
                Ok(true)
            );
            p.record(rtt);
        }
        assert!(p.finished());
        assert_eq!(p.counts(), (2, 1));
        let r = RttReport::of(&p.hist).unwrap();
        assert!(
            (1499..=1501).contains(&r.min) && (2499..=2501).contains(&r.max),
            "{r:?}"
        );
        assert_eq!(p.samples.as_deref(), Some(&[3000, 5000][..]));
        assert_eq!(
            feed(&mut p, &echo(LOCAL_STAG, 0, true, &sent[2])),
            Err(PingError::Unsolicited)
        );
    }

    #[test]
    fn bad_echoes_are_refused() {
        let fresh = || {
            let mut p = Pinger::new(&target(), 20, 1, 0, false, false);
            let data = p.next_ping().1.to_vec();
            (p, data)
        };
        let (_, data) = fresh();
        let mut flipped = data.clone();
        flipped[5] ^= 0x80;
        flipped[9] ^= 0x01;
        let cases = [
            (echo(7, 0, true, &data), Some((1, 1, 0))),
            (echo(LOCAL_STAG, 1, true, &data[..19]), Some((1, 1, 1))),
            (echo(LOCAL_STAG, 0, true, &data[..19]), Some((1, 1, 1))),
            (
                echo(LOCAL_STAG, 0, false, &[data.clone(), vec![0]].concat()),
                Some((1, 1, 1)),
            ),
            (echo(LOCAL_STAG, 0, true, &flipped), None),
        ];
        for (u, want) in cases {
            let e = feed(&mut fresh().0, &u).unwrap_err();
            let got = e.terminate().map(|t| (t.layer, t.error_type, t.error_code));
            assert_eq!(got, want, "{e}");
        }
        assert_eq!(
            feed(&mut fresh().0, &echo(LOCAL_STAG, 0, true, &flipped)),
            Err(PingError::Mismatch {
                ping: 0,
                octets: 2,
                first: 5
            })
        );
        let rr = tagged(RdmapOpcode::RdmaReadResponse, 0, 0, true, &[]);
        assert!(matches!(
            feed(&mut fresh().0, &rr),
            Err(PingError::UnexpectedOpcode { .. })
        ));
    }

    #[test]
    fn a_read_rtr_response_comes_first() {
        let mut p = Pinger::new(&target(), 0, 1, 0, true, false);
        p.next_ping();
        let rr = tagged(RdmapOpcode::RdmaReadResponse, 0, 0, true, &[]);
        assert_eq!(feed(&mut p, &rr), Ok(false));
        // A zero-length echo: STag and TO unchecked.
        assert_eq!(feed(&mut p, &echo(9, 9, true, &[])), Ok(true));
        assert!(p.finished());
    }
}
