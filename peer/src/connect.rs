//! `mpa-peer connect`: the Initiator. It connects, runs the startup phase, sends RDMA Writes
//! or Sends (`--count` of them, or for `--duration`), or hands over to the RDMA Read
//! ([`crate::read`]) and ping-pong ([`crate::pingpong`]) modes, closes and prints its report.

use super::*;
use crate::interval::{self, Meter};

/// Octets of the send timestamp at the start of a `--timestamps` payload.
const STAMP_LEN: usize = 8;

/// Writes the send timestamp `ns` at the start of `payload` (u64 LE); `false` when the
/// payload is too short for it.
fn stamp(payload: &mut [u8], ns: u64) -> bool {
    match payload.get_mut(..STAMP_LEN) {
        Some(p) => {
            p.copy_from_slice(&ns.to_le_bytes());
            true
        }
        None => false,
    }
}

/// What each ULPDU `connect` sends is.
enum Plan {
    /// Below the tagged header, without an advertisement: opaque octets (framing tests).
    Opaque,
    /// RDMA Writes of `payload` octets: into the advertised region, or to STag 1 at a TO
    /// advancing by `payload` from 0.
    Write {
        ad: Option<RegionAd>,
        payload: usize,
    },
    /// Sends of `payload` octets on QN 0; `send_rtr`: the RTR took MSN 1.
    Send { payload: usize, send_rtr: bool },
}

/// Decides what to send from the operation, the ULPDU size and the Reply; `Err` is the
/// message for a combination the advertisement (or the size) rules out.
fn plan(op: Op, size: usize, ad: Option<&RegionAd>, neg: &Negotiated) -> Result<Plan, String> {
    match op {
        Op::Write => {
            let Some(ad) = ad else {
                return Ok(if size < TAGGED_HEADER_LEN {
                    Plan::Opaque
                } else {
                    Plan::Write {
                        ad: None,
                        payload: size - TAGGED_HEADER_LEN,
                    }
                });
            };
            if !ad.writes {
                return Err(format!(
                    "--op write: the Responder's region advertisement (STag {:#x}) does not \
                     accept RDMA Writes (flag 0x01 clear)",
                    ad.stag
                ));
            }
            let Some(payload) = size.checked_sub(TAGGED_HEADER_LEN) else {
                return Err(format!(
                    "--op write: --size {size} is below the {TAGGED_HEADER_LEN}-octet tagged \
                     DDP header, so no RDMA Write can be placed in the advertised region"
                ));
            };
            if region_ad::write_to(ad, 0, payload as u64).is_none() {
                return Err(format!(
                    "--op write: an RDMA Write payload of {payload} octets (--size {size} \
                     minus the {TAGGED_HEADER_LEN}-octet header) does not fit the advertised \
                     region of {} octets (STag {:#x})",
                    ad.len, ad.stag
                ));
            }
            Ok(Plan::Write {
                ad: Some(*ad),
                payload,
            })
        }
        Op::Send => {
            // `connect` refuses sizes below the untagged header before connecting.
            let payload = size.saturating_sub(UNTAGGED_HEADER_LEN);
            if let Some(ad) = ad {
                if !ad.sends {
                    return Err(format!(
                        "--op send: the Responder's region advertisement (STag {:#x}) does \
                         not accept Sends (flag 0x02 clear: no receive buffers posted)",
                        ad.stag
                    ));
                }
                if payload as u64 > u64::from(ad.recv_buf_size) {
                    return Err(format!(
                        "--op send: a Send payload of {payload} octets (--size {size} minus \
                         the {UNTAGGED_HEADER_LEN}-octet header) exceeds the advertised \
                         receive buffer size of {} octets",
                        ad.recv_buf_size
                    ));
                }
            }
            Ok(Plan::Send {
                payload,
                send_rtr: neg.rtr == Some(RtrType::ZeroLengthSend),
            })
        }
        // `connect` takes --op read and pingpong to their modules before planning.
        Op::Read | Op::Pingpong => Err(format!("--op {} is not planned here", op.name())),
    }
}

/// The DDP segment of a message (header `h`) that starts `at` octets into its payload.
fn ddp_segment(h: DdpRepr, at: usize, last: bool) -> DdpRepr {
    match h {
        DdpRepr::Tagged {
            opcode, stag, to, ..
        } => DdpRepr::Tagged {
            last,
            opcode,
            stag,
            to: to.wrapping_add(at as u64),
        },
        DdpRepr::Untagged {
            opcode,
            inv_stag,
            qn,
            msn,
            mo,
            ..
        } => DdpRepr::Untagged {
            last,
            opcode,
            inv_stag,
            qn,
            msn,
            mo: mo.wrapping_add(at as u32),
        },
    }
}

pub(crate) fn connect(a: ConnectArgs) -> anyhow::Result<bool> {
    let pingpong = a.op == Op::Pingpong;
    let private_data = pingpong::request_private_data(&a)?;
    let mut cfg = config(&a.common, private_data, 1)?;
    if a.op != Op::Read && a.size > MAX_ULPDU {
        usage!(
            "--size {} exceeds the 64768-octet ULPDU maximum (RFC 5044 §3)",
            a.size
        );
    }
    if a.op == Op::Send && a.size < UNTAGGED_HEADER_LEN {
        usage!(
            "--op send needs --size of at least {UNTAGGED_HEADER_LEN} octets (the untagged DDP \
             header); --size {} is too small",
            a.size
        );
    }
    if a.op == Op::Read && (a.timestamps || a.rate.is_some()) {
        usage!("--timestamps and --rate pace and stamp what connect sends; --op read sends none");
    }
    if matches!(a.op, Op::Read | Op::Pingpong) && (a.duration.is_some() || a.interval.is_some()) {
        usage!(
            "--duration and --interval time a stream of Writes or Sends; --op {} runs --count \
             requests",
            a.op.name()
        );
    }
    // Without --count, --duration ends the stream (clap requires one of them).
    let count = a.count.unwrap_or(u64::MAX);
    let rate = a.rate.unwrap_or(if a.timestamps { 10_000 } else { 0 });
    let t0 = Instant::now();
    let sock = TcpStream::connect_timeout(&a.to, Duration::from_secs(a.common.timeout))
        .with_context(|| format!("connect {}", a.to))?;
    sock.set_nodelay(true)?;
    if let Some(name) = &a.congestion {
        nix::sys::socket::setsockopt(
            &sock,
            nix::sys::socket::sockopt::TcpCongestion,
            &std::ffi::OsString::from(name),
        )
        .with_context(|| format!("--congestion {name} (TCP_CONGESTION)"))?;
    }
    let congestion = nix::sys::socket::getsockopt(&sock, nix::sys::socket::sockopt::TcpCongestion)
        .ok()
        .map(|n| n.to_string_lossy().trim_end_matches('\0').to_string());
    // EMSS is the connection's MSS (what Linux cuts segments at): MULPDU and aligned sending
    // follow it.
    if let Ok(mss) = nix::sys::socket::getsockopt(&sock, nix::sys::socket::sockopt::TcpMaxSeg) {
        if mss >= 128 {
            cfg.emss = mss as usize;
        }
    }
    let mut report = Report {
        peer: a.to.to_string(),
        op: Some(a.op.name()),
        congestion,
        ..Report::default()
    };
    let mut digest = 0u32;
    let mut transfer_start: Option<Instant> = None;
    let mut reads: Option<read::Reader> = None;
    let mut pings: Option<pingpong::Pinger> = None;
    let mut meter: Option<Meter> = None;
    let mut sent_octets = 0u64;
    if pingpong {
        // Every wait bounded: a write that cannot go out either.
        sock.set_write_timeout(Some(Duration::from_secs(a.common.timeout)))?;
    }
    let r = (|| -> Result<(), ConnectError> {
        let mut s = MpaStream::connect(EorStream(sock), &cfg)?;
        report.negotiated(s.negotiated());
        report.mulpdu = Some(s.mulpdu());
        if a.aligned {
            s.set_aligned(true)?;
        }
        if a.fpdu_per_segment {
            s.set_record_per_fpdu(true)?;
        }
        let neg = s.negotiated();
        let ad = match RegionAd::parse(&neg.peer_private_data) {
            Ok(ad) => ad,
            Err(e) => {
                return Err(ConnectError::Refused(format!(
                    "the Reply's private data holds a malformed region advertisement: {e}"
                )))
            }
        };
        if let Some(ad) = &ad {
            report.region = Some(RegionReport::from(ad));
            // The private data after the advertisement.
            report.private_data = Some(
                String::from_utf8_lossy(&neg.peer_private_data[region_ad::LEN..]).into_owned(),
            );
        }
        if a.op == Op::Read {
            let reader = reads.insert(
                read::reader_for(neg, ad.as_ref(), a.size, count).map_err(ConnectError::Refused)?,
            );
            transfer_start = Some(Instant::now());
            let timeout = Duration::from_secs(a.common.timeout);
            read::run(&mut s, reader, timeout, &mut digest)?;
            return finish(&mut s, &mut report, a.common.timeout);
        }
        if pingpong {
            let pinger = pings.insert(
                pingpong::pinger_for(
                    neg,
                    ad.as_ref(),
                    a.size - TAGGED_HEADER_LEN,
                    count,
                    a.warmup.unwrap_or(100),
                    a.rtt_samples.is_some(),
                )
                .map_err(ConnectError::Refused)?,
            );
            transfer_start = Some(Instant::now());
            let timeout = Duration::from_secs(a.common.timeout);
            pingpong::run(&mut s, pinger, timeout, &mut digest)?;
            return finish(&mut s, &mut report, a.common.timeout);
        }
        let plan = plan(a.op, a.size, ad.as_ref(), neg).map_err(ConnectError::Refused)?;
        let version = neg.ddp_rdmap_version;
        let mut ulpdu = vec![0u8; a.size];
        let table = PatternTable::new(a.size);
        if a.timestamps {
            let payload = match plan {
                Plan::Opaque => a.size,
                Plan::Write { payload, .. } | Plan::Send { payload, .. } => payload,
            };
            if payload < STAMP_LEN {
                return Err(ConnectError::Refused(format!(
                    "--timestamps needs a payload of at least {STAMP_LEN} octets; --size {} \
                     leaves {payload}",
                    a.size
                )));
            }
        }
        let paced = Instant::now();
        transfer_start = Some(paced);
        let deadline = a.duration.map(|d| paced + d);
        meter = a
            .interval
            .map(|every| Meter::new(a.to.to_string(), every, paced));
        let mut n = 0u64;
        report.messages = Some(n);
        while n < count {
            if deadline.is_some() || meter.is_some() {
                let now = Instant::now();
                if let Some(m) = meter.as_mut() {
                    interval::print(m.tick(now, sent_octets));
                }
                if deadline.is_some_and(|d| now >= d) {
                    break;
                }
            }
            // An absolute schedule (rate 0: none): late messages catch up rather than drift.
            if let Some(at) = n.saturating_mul(1_000_000_000).checked_div(rate) {
                let due = paced + Duration::from_nanos(at);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
            let (h, payload) = match plan {
                Plan::Opaque => (None, a.size),
                Plan::Write {
                    ad: Some(ref ad),
                    payload,
                } => (
                    // `plan` checked that one payload fits, so every write_to is Some.
                    Some(region_ad::write_repr(ad, n, payload as u64).expect("fits the region")),
                    payload,
                ),
                Plan::Write { ad: None, payload } => (
                    Some(DdpRepr::Tagged {
                        last: true,
                        opcode: RdmapOpcode::RdmaWrite,
                        stag: 1,
                        to: n.wrapping_mul(payload as u64),
                    }),
                    payload,
                ),
                Plan::Send { payload, send_rtr } => {
                    (Some(region_ad::send_repr(n, send_rtr)), payload)
                }
            };
            let data = table.payload(n, payload);
            match h {
                Some(h) if a.aligned => {
                    // DDP segments cut to fill TCP segments exactly: TO or MO advances, L on
                    // the last.
                    let mut at = 0usize;
                    loop {
                        let (take, last) = s.aligned_chunk(h.header_len(), payload - at);
                        let seg = ddp_segment(h, at, last);
                        let off = seg.emit(&mut ulpdu, version).unwrap_or(0);
                        ulpdu[off..off + take].copy_from_slice(&data[at..at + take]);
                        if a.timestamps && at == 0 {
                            stamp(&mut ulpdu[off..off + take], monotonic_ns());
                        }
                        s.send(&ulpdu[..off + take])?;
                        digest = crc32c_append(digest, &ulpdu[..off + take]);
                        sent_octets += (off + take) as u64;
                        at += take;
                        if last {
                            break;
                        }
                    }
                }
                _ => {
                    let off = h.and_then(|h| h.emit(&mut ulpdu, version)).unwrap_or(0);
                    ulpdu[off..].copy_from_slice(data);
                    if a.timestamps {
                        stamp(&mut ulpdu[off..], monotonic_ns());
                    }
                    s.send(&ulpdu)?;
                    digest = crc32c_append(digest, &ulpdu);
                    sent_octets += ulpdu.len() as u64;
                }
            }
            if a.timestamps {
                // One message per write: nothing waits in the stream's batch.
                s.flush()?;
            }
            n += 1;
            report.messages = Some(n);
        }
        finish(&mut s, &mut report, a.common.timeout)
    })();
    // The last interval ends when the peer has closed after the last message, as the
    // transfer time does.
    if let Some(m) = meter.as_mut() {
        interval::print(m.finish(Instant::now(), sent_octets));
    }
    match r {
        Ok(()) => {}
        Err(ConnectError::Mpa(e)) => {
            report.fail(&e);
            eprintln!("mpa-peer: {}: {e}", a.to);
        }
        Err(ConnectError::Refused(msg) | ConnectError::Failed(msg)) => {
            eprintln!("mpa-peer: {}: {msg}", a.to);
            report.error = Some(msg);
        }
        Err(ConnectError::Violation(t, msg)) => {
            report.terminated(t, &msg);
            eprintln!("mpa-peer: {}: {msg}", a.to);
        }
    }
    report.ulpdu_digest = format!("{digest:08x}");
    report.seconds = t0.elapsed().as_secs_f64();
    report.transfer_seconds = transfer_start.map(|t| t.elapsed().as_secs_f64());
    if let Some(reader) = &reads {
        read::report(&mut report, reader.stats());
    }
    if let Some(pinger) = &pings {
        pingpong::report(&mut report, pinger, a.rtt_samples.as_deref());
    }
    let ok = report.error.is_none();
    emit(&report);
    Ok(ok)
}

/// Flushes, records what was sent, closes our side and waits for the peer to close; a
/// Terminate it sends instead becomes our error.
fn finish(
    s: &mut MpaStream<EorStream>,
    report: &mut Report,
    timeout: u64,
) -> Result<(), ConnectError> {
    s.flush()?;
    let st = s.stats();
    report.ulpdus = st.ulpdus_tx;
    report.ulpdu_bytes = st.ulpdu_octets_tx;
    s.get_ref()
        .0
        .shutdown(std::net::Shutdown::Write)
        .map_err(EndpointError::from)?;
    while s
        .recv_with(Some(Duration::from_secs(timeout)), |_| {})?
        .is_some()
    {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_stamp() {
        let mut p = [0xaau8; 12];
        assert!(stamp(&mut p, 0x0102_0304_0506_0708));
        assert_eq!(&p[..8], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&p[8..], &[0xaa; 4]);
        assert!(!stamp(&mut [0u8; 7], 1));
        let (a, b) = (monotonic_ns(), monotonic_ns());
        assert!(a > 0 && b >= a);
    }
}
