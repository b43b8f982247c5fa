//! The blocking endpoint, both roles over a real socket pair: startup, Full Operation, RTRs,
//! rejection, timeouts and every error path that ends in a Terminate.

use mpa::encoder::FpduEncoder;
use mpa::endpoint::{EndpointConfig, EndpointError, MpaStream};
use mpa::startup::{PrivateDataRule, RtrSet, RtrType, StartupError, StartupPolicy};
use mpa::MpaErrorCode;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::thread;
use std::time::Duration;

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

fn cfg(f: impl FnOnce(&mut StartupPolicy)) -> EndpointConfig {
    let mut c = EndpointConfig::default();
    c.policy.startup_timeout = Duration::from_secs(10);
    f(&mut c.policy);
    c
}

/// Runs a Responder on one end in a thread; returns what it received or its error.
fn responder(
    sock: UnixStream,
    c: EndpointConfig,
) -> thread::JoinHandle<Result<Vec<Vec<u8>>, EndpointError>> {
    thread::spawn(move || {
        let mut s = MpaStream::accept(sock, &c)?;
        let mut got = Vec::new();
        while s.recv_with(WAIT, |u| got.push(u.to_vec()))?.is_some() {}
        Ok(got)
    })
}

fn payloads() -> Vec<Vec<u8>> {
    [0usize, 1, 14, 500, 1430, 4000, 64768]
        .iter()
        .map(|&n| (0..n).map(|i| (i * 7 + n) as u8).collect())
        .collect()
}

#[test]
fn round_trip_every_framing_and_rtr() {
    let rtrs = [
        None,
        Some(RtrType::ZeroLengthSend),
        Some(RtrType::ZeroLengthWrite),
        Some(RtrType::ZeroLengthReadRequest),
    ];
    for bits in 0..8u8 {
        for rtr in rtrs {
            let (a, b) = UnixStream::pair().unwrap();
            let server = responder(
                b,
                cfg(|p| {
                    p.markers_required = bits & 1 != 0;
                    p.crc_suppressed_by_admin = bits & 4 != 0;
                }),
            );
            let client_cfg = cfg(|p| {
                p.markers_required = bits & 2 != 0;
                p.crc_suppressed_by_admin = bits & 4 != 0;
                if let Some(r) = rtr {
                    p.revision = 2;
                    p.p2p = true;
                    p.rtr_send = RtrSet::single(r);
                }
            });
            let mut c = MpaStream::connect(a, &client_cfg).unwrap();
            assert_eq!(c.negotiated().rtr, rtr);
            assert_eq!(c.negotiated().markers_tx, bits & 1 != 0);
            assert_eq!(c.negotiated().crc, bits & 4 == 0);
            let sent = payloads();
            for p in &sent {
                c.send(p).unwrap();
            }
            c.flush().unwrap();
            if rtr == Some(RtrType::ZeroLengthReadRequest) {
                // The Responder answers a Read RTR with a zero-length Read Response.
                let mut n = 0;
                c.recv_with(WAIT, |u| {
                    assert_eq!(u.len(), 14);
                    n += 1;
                })
                .unwrap();
                assert_eq!(n, 1);
            }
            c.get_ref().shutdown(std::net::Shutdown::Write).unwrap();
            let got = server.join().unwrap().unwrap();
            assert_eq!(got, sent, "bits {bits:03b} rtr {rtr:?}");
        }
    }
}

#[test]
fn responder_sends_nothing_before_the_first_fpdu() {
    let (a, b) = UnixStream::pair().unwrap();
    let t = thread::spawn(move || {
        let mut s = MpaStream::accept(b, &EndpointConfig::default()).unwrap();
        // RFC 5044 §7.1.2: not before one FPDU arrived.
        assert!(matches!(
            s.send(b"early"),
            Err(EndpointError::NotYetAllowed)
        ));
        s.recv_with(WAIT, |_| {}).unwrap();
        s.send(b"after").unwrap();
        s.flush().unwrap();
    });
    let mut c = MpaStream::connect(a, &EndpointConfig::default()).unwrap();
    c.send(b"first").unwrap();
    c.flush().unwrap();
    let mut got = Vec::new();
    c.recv_with(WAIT, |u| got.push(u.to_vec())).unwrap();
    assert_eq!(got, vec![b"after".to_vec()]);
    t.join().unwrap();
}

#[test]
fn rejection_carries_the_reason() {
    let (a, b) = UnixStream::pair().unwrap();
    let server = responder(
        b,
        cfg(|p| {
            p.private_data_rule = PrivateDataRule::RequirePrefix(b"token:".to_vec());
            p.reject_reason = b"bad token".to_vec();
        }),
    );
    let c = EndpointConfig {
        private_data: b"nope".to_vec(),
        ..Default::default()
    };
    match MpaStream::connect(a, &c) {
        Err(EndpointError::Rejected { private_data }) => assert_eq!(private_data, b"bad token"),
        other => panic!("{:?}", other.err()),
    }
    match server.join().unwrap() {
        Err(EndpointError::RejectedPeer { reason }) => assert_eq!(reason, b"bad token"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn startup_timeout() {
    let (_a, b) = UnixStream::pair().unwrap();
    let c = cfg(|p| p.startup_timeout = Duration::from_millis(200));
    let t0 = std::time::Instant::now();
    match MpaStream::accept(b, &c) {
        Err(EndpointError::Startup(StartupError::Timeout(_))) => {}
        other => panic!("{:?}", other.err()),
    }
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn initiator_initiator_is_detected() {
    let (a, b) = UnixStream::pair().unwrap();
    let t = thread::spawn(move || MpaStream::connect(b, &EndpointConfig::default()).err());
    let e = MpaStream::connect(a, &EndpointConfig::default())
        .err()
        .unwrap();
    assert!(
        matches!(e, EndpointError::Startup(StartupError::InitiatorInitiator)),
        "{e}"
    );
    assert_eq!(e.code(), Some(MpaErrorCode::InvalidStartupFrame));
    let e2 = t.join().unwrap().unwrap();
    assert!(
        matches!(e2, EndpointError::Startup(StartupError::InitiatorInitiator)),
        "{e2}"
    );
}

#[test]
fn crc_error_gives_code_2_and_a_terminate() {
    let (mut a, b) = UnixStream::pair().unwrap();
    let server = responder(b, EndpointConfig::default());
    // A hand-made Initiator: Request, then one corrupt FPDU.
    let mut req = b"MPA ID Req Frame".to_vec();
    req.extend_from_slice(&[0x40, 1, 0, 0]);
    a.write_all(&req).unwrap();
    let mut reply = [0u8; 20];
    std::io::Read::read_exact(&mut a, &mut reply).unwrap();
    assert_eq!(&reply[..16], b"MPA ID Rep Frame");
    let mut wire = Vec::new();
    FpduEncoder::new(false)
        .encode(b"hello world", &mut wire)
        .unwrap();
    wire[5] ^= 0x20;
    a.write_all(&wire).unwrap();
    let e = server.join().unwrap().unwrap_err();
    assert_eq!(e.code(), Some(MpaErrorCode::CrcMismatch), "{e}");
    // The Responder's Terminate: layer 2 (LLP), type 0 (MPA), code 2.
    let mut dec = mpa::decoder::FpduDecoder::new(false, true);
    let mut buf = vec![0u8; 256];
    let n = std::io::Read::read(&mut a, &mut buf).unwrap();
    let mut ch = dec.feed(&buf[..n]);
    let t = ch.next_ulpdu().unwrap().unwrap().to_vec();
    let (repr, off) = mpa::wire::ddp::DdpRepr::parse(&t, 1).unwrap();
    assert!(matches!(
        repr,
        mpa::wire::ddp::DdpRepr::Untagged { qn: 2, .. }
    ));
    let tr = mpa::wire::ddp::TerminateRepr::parse(&t[off..]).unwrap();
    assert_eq!((tr.layer, tr.error_type, tr.error_code), (2, 0, 2));
}

#[test]
fn no_matching_rtr_terminates_with_code_7() {
    let (a, b) = UnixStream::pair().unwrap();
    let server = responder(
        b,
        cfg(|p| p.rtr_support = RtrSet::single(RtrType::ZeroLengthSend)),
    );
    let c = cfg(|p| {
        p.revision = 2;
        p.p2p = true;
        p.rtr_send = RtrSet::single(RtrType::ZeroLengthWrite);
    });
    let e = MpaStream::connect(a, &c).err().unwrap();
    assert_eq!(e.code(), Some(MpaErrorCode::NoMatchingRtr), "{e}");
    // The Responder accepted, then received the Initiator's Terminate (code 7).
    let se = server.join().unwrap().unwrap_err();
    assert!(
        matches!(
            se,
            EndpointError::Terminated {
                layer: 2,
                error_type: 0,
                error_code: 7
            }
        ),
        "{se}"
    );
}

#[test]
fn peer_close_inside_an_fpdu_is_error_1() {
    let (mut a, b) = UnixStream::pair().unwrap();
    let server = responder(b, EndpointConfig::default());
    let mut req = b"MPA ID Req Frame".to_vec();
    req.extend_from_slice(&[0x40, 1, 0, 0]);
    a.write_all(&req).unwrap();
    let mut reply = [0u8; 20];
    std::io::Read::read_exact(&mut a, &mut reply).unwrap();
    let mut wire = Vec::new();
    FpduEncoder::new(false)
        .encode(&[9u8; 100], &mut wire)
        .unwrap();
    a.write_all(&wire[..50]).unwrap();
    drop(a);
    let e = server.join().unwrap().unwrap_err();
    assert!(matches!(e, EndpointError::Closed), "{e}");
    assert_eq!(e.code(), Some(MpaErrorCode::TcpClosed));
}

/// A socket that records the writes the endpoint makes (length, record boundary) and the
/// read timeouts it sets.
struct Recorder {
    inner: UnixStream,
    writes: std::sync::Arc<std::sync::Mutex<Vec<(usize, bool)>>>,
    timeouts: std::sync::Arc<std::sync::Mutex<Vec<Option<Duration>>>>,
}

impl std::io::Read for Recorder {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        std::io::Read::read(&mut self.inner, buf)
    }
}

impl Write for Recorder {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_all(buf)?;
        self.writes.lock().unwrap().push((buf.len(), false));
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl mpa::endpoint::Transport for Recorder {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> std::io::Result<()> {
        self.timeouts.lock().unwrap().push(timeout);
        self.inner.set_read_timeout(timeout)
    }
    fn write_record(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_all(buf)?;
        self.writes.lock().unwrap().push((buf.len(), true));
        Ok(())
    }
}

#[test]
fn aligned_sending_writes_whole_segments_and_delivers_everything() {
    for markers in [false, true] {
        let (a, b) = UnixStream::pair().unwrap();
        let server = responder(b, cfg(|p| p.markers_required = markers));
        let writes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let rec = Recorder {
            inner: a,
            writes: writes.clone(),
            timeouts: Default::default(),
        };
        let mut c = MpaStream::connect(rec, &cfg(|_| {})).unwrap();
        c.set_aligned(true).unwrap();
        writes.lock().unwrap().clear();
        let emss = EndpointConfig::default().emss;
        // Messages of every size class, each cut into DDP-like segments (a 14-octet header).
        let mut sent = Vec::new();
        for (i, size) in [4082usize, 0, 1, 9000, 37, 1400, 64000, 3, 700, 20000]
            .into_iter()
            .cycle()
            .take(60)
            .enumerate()
        {
            let mut left = size;
            loop {
                let (take, last) = c.aligned_chunk(14, left);
                let mut u = vec![i as u8; 14 + take];
                u[0] = last as u8;
                c.send(&u).unwrap();
                sent.push(u);
                left -= take;
                if last {
                    break;
                }
            }
        }
        c.flush().unwrap();
        c.get_ref()
            .inner
            .shutdown(std::net::Shutdown::Write)
            .unwrap();
        let got = server.join().unwrap().unwrap();
        assert_eq!(got, sent, "markers {markers}");
        // Every write but the final flush ends on the segment grid (EMSS octets from the
        // start or from the last record boundary); record boundaries are rare.
        let w = writes.lock().unwrap().clone();
        let (mut pos, mut origin, mut records) = (0usize, 0usize, 0usize);
        for (k, &(len, record)) in w.iter().enumerate() {
            pos += len;
            if record {
                origin = pos;
                records += 1;
            } else if k + 1 < w.len() {
                assert_eq!((pos - origin) % emss, 0, "write {k} of {w:?}");
            }
        }
        assert!(
            records * 20 < sent.len(),
            "{records} short segments for {} FPDUs",
            sent.len()
        );
        assert!(w.len() > 5, "{w:?}");
    }
}

/// A request-response loop reads with the same timeout every time: setting it is a system
/// call on a socket, made once, not once per read; and a wait still ends at its deadline,
/// never later (each timeout set is at most the time left).
#[test]
fn a_reading_loop_sets_its_read_timeout_once_and_waits_no_longer_than_asked() {
    const ROUNDS: usize = 200;
    let (a, b) = UnixStream::pair().unwrap();
    let set = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let rec = Recorder {
        inner: b,
        writes: Default::default(),
        timeouts: set.clone(),
    };
    let recorded = set.clone();
    let server = thread::spawn(move || {
        let mut s = MpaStream::accept(rec, &cfg(|_| {})).unwrap();
        let before = recorded.lock().unwrap().len();
        for i in 0..ROUNDS {
            let mut got = Vec::new();
            while got.is_empty() {
                s.recv_with(WAIT, |u| got.push(u.to_vec()))
                    .unwrap()
                    .unwrap();
            }
            assert_eq!(got, vec![(i as u32).to_be_bytes().to_vec()]);
            s.send(&got[0]).unwrap();
            s.flush().unwrap();
        }
        let in_loop = recorded.lock().unwrap().len() - before;
        // Nothing more comes: a short wait ends by itself.
        let asked = Duration::from_millis(50);
        let t0 = std::time::Instant::now();
        let r = s.recv_with(Some(asked), |_| {});
        (in_loop, before, t0.elapsed(), r.map(|_| ()))
    });
    let mut c = MpaStream::connect(a, &cfg(|_| {})).unwrap();
    for i in 0..ROUNDS as u32 {
        c.send(&i.to_be_bytes()).unwrap();
        c.flush().unwrap();
        let mut got = Vec::new();
        while got.is_empty() {
            c.recv_with(WAIT, |u| got.push(u.to_vec()))
                .unwrap()
                .unwrap();
        }
        assert_eq!(got, vec![i.to_be_bytes().to_vec()]);
    }
    let (in_loop, before, waited, r) = server.join().unwrap();
    assert!(
        in_loop <= 1,
        "{in_loop} read timeouts set for {ROUNDS} reads"
    );
    assert!(matches!(r, Err(EndpointError::Timeout)), "{r:?}");
    assert!(waited >= Duration::from_millis(50), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    let set = set.lock().unwrap();
    for t in &set[before..] {
        let t = t.expect("a read with a deadline never blocks forever");
        assert!(t <= WAIT.unwrap() && !t.is_zero(), "{t:?}");
    }
    // The short wait's timeouts: each at most what was left of its 50 ms.
    let short: Vec<Duration> = set[before + in_loop..].iter().map(|t| t.unwrap()).collect();
    assert!(!short.is_empty());
    assert!(
        short.iter().all(|t| *t <= Duration::from_millis(50)),
        "{short:?}"
    );
}
