//! An RDMA Write ping-pong over the datapath, in the manner of rdma-core's `rc_pingpong` and
//! perftest's `ib_write_lat`: the application listens or connects by itself (through the
//! datapath and its connection manager), and each side tells the other where to write in its
//! connection private data. docs/verbs.md walks through it.
//!
//! ```text
//! write_pingpong SOCKET listen  ADDR:PORT [SIZE] [ITERS] [--busy-poll N]   # the echo side
//! write_pingpong SOCKET connect ADDR:PORT [SIZE] [ITERS] [--busy-poll N] [--samples FILE]
//!                                                                          # the measuring side
//! ```
//!
//! SOCKET is the datapath's control socket (an `mpa-control serve` must serve it); SIZE the
//! payload octets of each Write (default 64); ITERS the round trips (default 1000).
//! Completions are waited for asleep on the domain's descriptor; `--busy-poll N` polls for
//! them instead, as perftest does, offering the core to other threads every N empty polls (0:
//! never; `Consumer::set_busy_poll`).
//!
//! * Both sides allocate a protection domain, register a region of 2 × SIZE octets that
//!   peers may write (the first half receives, the second half is the connector's send
//!   buffer) and subscribe to its completions.
//! * The connector sends its region's advertisement (`mpa_ctl_proto::region_ad`) in its MPA
//!   Request; the listener accepts with its own in the Reply — the format `mpa-peer` speaks,
//!   so either side also works against `mpa-peer listen --echo` and `mpa-peer connect --op
//!   pingpong`.
//! * The connector writes ping `i` (a pattern written once, its first octets `i`'s number)
//!   into the listener's region; the
//!   listener, on that Write's completion, writes the same octets back into the connector's
//!   region (an echo); the connector checks every octet of every echo and times the round
//!   trip. It prints perftest's latency columns (half the round trip, microseconds) and
//!   closes; the listener exits when the connection has ended. `--samples FILE` also writes
//!   every round trip, nanoseconds, one per line (`mpa-bench lat --pingpong --modes rust-app`).
//!
//! Every wait is bounded; a failure is printed on stderr and the exit status is non-zero.

use mpa_app::{ConnectionEvent, Consumer, ConsumerError, MappedRegion};
use mpa_ctl_proto::cm::{CmEvent, ConnectOptions, ListenOptions};
use mpa_ctl_proto::region_ad::RegionAd;
use mpa_ctl_proto::{Completion, CompletionKind};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Bound of each wait: an answer, an event, a completion.
const WAIT: Duration = Duration::from_secs(10);
/// The echo side looks for the connection's end after this long without a completion.
const IDLE: Duration = Duration::from_millis(50);

const USAGE: &str = "usage: write_pingpong SOCKET listen|connect ADDR:PORT [SIZE] [ITERS] \
                     [--busy-poll N] [--samples FILE]";

/// Why the program stopped: printed as is.
struct Failure(String);

impl std::fmt::Debug for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<ConsumerError> for Failure {
    fn from(e: ConsumerError) -> Failure {
        Failure(e.to_string())
    }
}

fn fail<T>(why: impl Into<String>) -> Result<T, Failure> {
    Err(Failure(why.into()))
}

struct Args {
    socket: PathBuf,
    listen: bool,
    addr: SocketAddr,
    size: u64,
    iters: u64,
    samples: Option<PathBuf>,
    /// `--busy-poll`'s N: polls between two offers of the core.
    busy_poll: Option<u32>,
}

fn args() -> Result<Args, Failure> {
    let mut samples = None;
    let mut busy_poll = None;
    let mut positional = Vec::new();
    let mut all = std::env::args().skip(1);
    while let Some(arg) = all.next() {
        match arg.as_str() {
            "--samples" => match all.next() {
                Some(f) => samples = Some(PathBuf::from(f)),
                None => return fail(format!("--samples needs a FILE; {USAGE}")),
            },
            "--busy-poll" => match all.next().map(|n| (n.parse::<u32>(), n)) {
                Some((Ok(n), _)) => busy_poll = Some(n),
                Some((Err(_), n)) => {
                    return fail(format!(
                        "--busy-poll {n:?} is not a number of polls; {USAGE}"
                    ))
                }
                None => return fail(format!("--busy-poll needs N; {USAGE}")),
            },
            a if a.starts_with("--") || positional.len() == 5 => {
                return fail(format!("unexpected argument {a:?}; {USAGE}"))
            }
            _ => positional.push(arg),
        }
    }
    let mut a = positional.into_iter();
    let (Some(socket), Some(role), Some(addr)) = (a.next(), a.next(), a.next()) else {
        return fail(USAGE);
    };
    let listen = match role.as_str() {
        "listen" => true,
        "connect" => false,
        r => return fail(format!("{r:?} is neither listen nor connect; {USAGE}")),
    };
    let addr = addr
        .parse()
        .map_err(|_| Failure(format!("{addr:?} is not ADDR:PORT; {USAGE}")))?;
    let number = |s: Option<String>, name: &str, default: u64| match s {
        None => Ok(default),
        Some(s) => match s.parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => fail(format!("{name} {s:?} is not a positive number; {USAGE}")),
        },
    };
    Ok(Args {
        socket: socket.into(),
        listen,
        addr,
        size: number(a.next(), "SIZE", 64)?,
        iters: number(a.next(), "ITERS", 1000)?,
        samples,
        busy_poll,
    })
}

/// Our domain, region and subscription: the resources both sides set up first.
struct Resources {
    app: Consumer,
    pd: u32,
    region: MappedRegion,
}

fn resources(a: &Args) -> Result<Resources, Failure> {
    // The context (ibv_open_device), the protection domain (ibv_alloc_pd), the region
    // (ibv_reg_mr) and its completions (ibv_create_cq).
    let mut app = Consumer::connect(&a.socket, WAIT)?;
    if let Some(n) = a.busy_poll {
        app.set_busy_poll(true);
        app.set_busy_poll_yield_every(n);
    }
    let pd = app.alloc_pd()?;
    let region = app.create_region(2 * a.size, pd, true, false)?;
    app.subscribe(pd)?;
    Ok(Resources { app, pd, region })
}

/// The advertisement of our receiving half: the peer writes there.
fn our_ad(r: &Resources, size: u64) -> RegionAd {
    RegionAd {
        writes: true,
        sends: false,
        stag: r.region.info().stag,
        len: size,
        base_to: 0,
        recv_buf_size: 0,
    }
}

/// The peer's advertisement from its private data.
fn peer_ad(private_data: &[u8], size: u64) -> Result<RegionAd, Failure> {
    match RegionAd::parse(private_data) {
        Ok(Some(ad)) if ad.writes && ad.len >= size => Ok(ad),
        Ok(Some(ad)) => fail(format!(
            "the peer's region (STag {:#x}, {} octets) does not take Writes of {size} octets",
            ad.stag, ad.len
        )),
        Ok(None) => fail("the peer's private data carries no region advertisement"),
        Err(e) => fail(format!("the peer's region advertisement: {e}")),
    }
}

/// The next connection event, or a failure after [`WAIT`].
fn next_event(app: &mut Consumer) -> Result<ConnectionEvent, Failure> {
    app.wait_connection_event(WAIT)?
        .ok_or_else(|| Failure(format!("no connection event within {WAIT:?}")))
}

/// Waits for the completion `want` picks; WriteSent completions of our own Writes pass.
fn completion(
    app: &mut Consumer,
    want: impl Fn(&Completion) -> bool,
) -> Result<Completion, Failure> {
    let deadline = Instant::now() + WAIT;
    loop {
        let Some(batch) = app.next_completions(deadline)? else {
            return fail(format!("no completion within {WAIT:?}"));
        };
        let mut found = None;
        for c in batch {
            if want(&c) && found.is_none() {
                found = Some(c);
            } else if c.kind != CompletionKind::WriteSent {
                return fail(format!("unexpected completion {c:?}"));
            }
        }
        if let Some(c) = found {
            return Ok(c);
        }
    }
}

/// The listener: accepts one connection and echoes every Write until it ends.
fn listen(a: &Args) -> Result<(), Failure> {
    let mut r = resources(a)?;
    // rdma_bind_addr + rdma_listen.
    let (_listener, bound) = r.app.listen(r.pd, a.addr, ListenOptions::default())?;
    println!("listening on {bound}");
    // RDMA_CM_EVENT_CONNECT_REQUEST, with the connector's private data.
    let ConnectionEvent::Cm(CmEvent::ConnectRequest {
        conn_id, params, ..
    }) = next_event(&mut r.app)?
    else {
        return fail("a connection request expected");
    };
    let theirs = match peer_ad(&params.private_data, a.size) {
        Ok(ad) => ad,
        Err(e) => {
            // rdma_reject, with the reason as private data.
            r.app.reject(conn_id, e.0.as_bytes())?;
            return Err(e);
        }
    };
    // rdma_accept, our advertisement as the Reply's private data; then ESTABLISHED.
    r.app.accept(conn_id, &our_ad(&r, a.size).emit())?;
    let ConnectionEvent::Cm(CmEvent::Established { flow_id, .. }) = next_event(&mut r.app)? else {
        return fail("the connection was not established");
    };
    println!("connected to {} (flow {flow_id})", params.peer);
    let stag = r.region.info().stag;
    let mut echoed = 0u64;
    let mut heard = Instant::now();
    loop {
        // A ping placed in our receiving half, or the connection's end (looked at whenever
        // no completion came for a moment).
        let batch = match r.app.next_completions(Instant::now() + IDLE)? {
            Some(b) => b,
            None => {
                if let Some(ConnectionEvent::Ended(e)) = r.app.connection_events()?.pop() {
                    println!("connection ended ({}); {echoed} echoes", e.reason);
                    return Ok(());
                }
                if heard.elapsed() > WAIT {
                    return fail(format!("no ping and no end within {WAIT:?}"));
                }
                continue;
            }
        };
        heard = Instant::now();
        for c in batch {
            match c.kind {
                CompletionKind::WritePlaced if c.flow_id == flow_id => {
                    // The echo: the same octets, at the same offset of the peer's region.
                    let sink_to = theirs.base_to + c.offset;
                    r.app.post_write_shm(
                        flow_id,
                        stag,
                        c.offset,
                        c.len,
                        1,
                        theirs.stag,
                        sink_to,
                        echoed,
                    )?;
                    echoed += 1;
                }
                CompletionKind::WriteSent => {}
                _ => return fail(format!("unexpected completion {c:?}")),
            }
        }
    }
}

/// The connector: connects, pings `iters` times, checks every echo and prints the latencies.
fn connect(a: &Args) -> Result<(), Failure> {
    let mut r = resources(a)?;
    // rdma_resolve_addr … rdma_connect, our advertisement as the Request's private data.
    let options = ConnectOptions {
        private_data: our_ad(&r, a.size).emit().to_vec(),
        ..ConnectOptions::default()
    };
    let conn_id = r.app.connect_to(r.pd, a.addr, options)?;
    let (flow_id, theirs) = match next_event(&mut r.app)? {
        ConnectionEvent::Cm(CmEvent::Established {
            flow_id, params, ..
        }) => (flow_id, peer_ad(&params.private_data, a.size)?),
        ConnectionEvent::Cm(CmEvent::Rejected { private_data, .. }) => {
            return fail(format!(
                "connection {conn_id} rejected: {}",
                String::from_utf8_lossy(&private_data)
            ))
        }
        e => return fail(format!("connection {conn_id} not established: {e:?}")),
    };
    let stag = r.region.info().stag;
    let (size, send_at) = (a.size, a.size);
    // The ping: a pattern written once, its first (up to) 8 octets the iteration's number,
    // so that an echo of an earlier ping cannot pass the check and the sender does not read
    // a whole freshly written message from this core's cache every round trip.
    let mut ping: Vec<u8> = (0..size as usize).map(|j| (j * 13 + 1) as u8).collect();
    let stamp = ping.len().min(8);
    if !r.region.write(send_at, &ping) {
        return fail("the region is shorter than 2 × SIZE");
    }
    let mut echo = vec![0u8; size as usize];
    let mut rtt_ns = Vec::with_capacity(a.iters as usize);
    for i in 0..a.iters {
        ping[..stamp].copy_from_slice(&i.to_le_bytes()[..stamp]);
        if !r.region.write(send_at, &ping[..stamp]) {
            return fail("the region is shorter than 2 × SIZE");
        }
        let t0 = Instant::now();
        r.app.post_write_shm(
            flow_id,
            stag,
            send_at,
            size,
            1,
            theirs.stag,
            theirs.base_to,
            i,
        )?;
        completion(&mut r.app, |c| {
            c.kind == CompletionKind::WritePlaced && c.flow_id == flow_id
        })?;
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        if !r.region.read(0, &mut echo) || echo != ping {
            return fail(format!("echo {i} differs from its ping"));
        }
    }
    // rdma_disconnect: what is posted goes out first, then the FIN.
    r.app.finish_flow(flow_id)?;
    if let Some(path) = &a.samples {
        let text: String = rtt_ns.iter().map(|v| format!("{v}\n")).collect();
        std::fs::write(path, text).map_err(|e| Failure(format!("{}: {e}", path.display())))?;
    }
    print_latency(size, &mut rtt_ns);
    Ok(())
}

/// perftest's `ib_write_lat` columns: half the round trip, microseconds.
fn print_latency(size: u64, rtt_ns: &mut [u64]) {
    rtt_ns.sort_unstable();
    let n = rtt_ns.len();
    let us = |ns: u64| ns as f64 / 2000.0;
    let pct = |p: f64| us(rtt_ns[((n as f64 * p).ceil() as usize).clamp(1, n) - 1]);
    let avg = rtt_ns.iter().map(|&v| us(v)).sum::<f64>() / n as f64;
    let var = rtt_ns.iter().map(|&v| (us(v) - avg).powi(2)).sum::<f64>() / n as f64;
    println!(
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    \
         t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"
    );
    println!(
        " {size:<6} {n:<10} {:<14.2} {:<14.2} {:<16.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
        us(rtt_ns[0]),
        us(rtt_ns[n - 1]),
        pct(0.5),
        avg,
        var.sqrt(),
        pct(0.99),
        pct(0.999)
    );
}

fn main() -> Result<(), Failure> {
    let a = args()?;
    if a.listen {
        listen(&a)
    } else {
        connect(&a)
    }
}
