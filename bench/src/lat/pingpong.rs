//! `lat --pingpong`: RDMA Write ping-pong, perftest `ib_write_lat` style. The same echo server
//! on both sides — the kernel-TCP `mpa-peer listen --echo` in ns a, which writes every Write
//! it receives back into the region the Initiator advertised — and Initiators in ns b:
//! * kernel: an in-process blocking `MpaStream` (kernel TCP): write a Write, read until the
//!   echoed Write is whole;
//! * datapath, sleeping or spinning workers: this process as the datapath's application (it
//!   allocates its domain and connects itself through `mpa-app`, `mpa-control serve` running
//!   the kernel side; its Request advertises its region) posts one Write on the connection
//!   through its shared-memory post queue (`--post-via control`: a `Post` request over
//!   the control socket), then takes the echo's `WritePlaced` completion from its ring
//!   (busy-polled with `--consumer-busy-poll`, else the eventfd wake-up);
//! * datapath, run-to-completion: the measuring thread posts with `QueueDriver::post` and
//!   turns the queue itself until the echo is placed (docs/latency.md).
//!
//! Each iteration's round trip is taken with CLOCK_MONOTONIC around it; the table gives RTT/2
//! (hdrhistogram). Every echo is checked after its round trip, octet for octet, on every side
//! (the datapath's pings carry their iteration's number in their first octets, so an earlier
//! echo cannot pass); `c-api` is the C ping-pong, which does the same (`c_api`).

use super::args::LatArgs;
use super::echo::{check_echo, echo_server, ECHO_STAG, WARMUP};
use super::example_app::ExampleApp;
use super::samples::{monotonic_ns, record, table, Row, Samples, Side};
use crate::bed::application::{connect_as_application, connection_manager, WAIT};
use crate::bed::options::PORT;
use crate::bed::options::{DatapathMode, PostVia};
use crate::report::document::LatParams;
use crate::report::progress::Progress;
use crate::report::Document;
use anyhow::{anyhow, bail, Context, Result};
use mpa::endpoint::{EndpointConfig, MpaStream};
use mpa::startup::StartupPolicy;
use mpa::wire::ddp::{DdpRepr, RdmapOpcode, TAGGED_HEADER_LEN};
use mpa_app::{ConnectOptions, Consumer};
use mpa_ctl_proto::region_ad::RegionAd;
use mpa_ctl_proto::CompletionKind;
use mpa_datapath::worker::{PostOp, QueueDriver, SgList, WorkRequest};
use mpa_harness::datapath::{start_datapath, temp_path, DatapathOptions};
use mpa_testbed::{run_in_netns, TestBed};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Our advertisement: the region the echo writes back into.
fn our_ad(stag: u32, payload: u64) -> RegionAd {
    RegionAd {
        writes: true,
        sends: false,
        stag,
        len: payload,
        base_to: 0,
        recv_buf_size: 0,
    }
}

fn policy(a: &LatArgs) -> StartupPolicy {
    StartupPolicy {
        revision: 2,
        accept_rev2: true,
        markers_required: false,
        crc_suppressed_by_admin: !a.framing.crc(),
        startup_timeout: Duration::from_secs(20),
        ..StartupPolicy::default()
    }
}

/// The kernel Initiator: a blocking `MpaStream` in ns b.
fn kernel_pingpong(bed: &TestBed, a: &LatArgs, size: usize) -> Result<Samples> {
    let payload = (size - TAGGED_HEADER_LEN) as u64;
    let echo = echo_server(bed, a, payload)?;
    let to = SocketAddr::new(bed.addr_a(false), PORT);
    let sock = run_in_netns(&bed.ns_b, move || TcpStream::connect_timeout(&to, WAIT))??;
    sock.set_nodelay(true)?;
    const OUR_STAG: u32 = 0x5a5a_0002;
    let cfg = EndpointConfig {
        policy: policy(a),
        private_data: our_ad(OUR_STAG, payload).emit().to_vec(),
        emss: 1448,
    };
    let mut s = MpaStream::connect(sock, &cfg)?;
    let mut ulpdu = vec![0u8; size];
    DdpRepr::Tagged {
        last: true,
        opcode: RdmapOpcode::RdmaWrite,
        stag: ECHO_STAG,
        to: 0,
    }
    .emit(&mut ulpdu, s.negotiated().ddp_rdmap_version)
    .ok_or_else(|| anyhow!("the Write header does not fit {size} octets"))?;
    for (i, b) in ulpdu[TAGGED_HEADER_LEN..].iter_mut().enumerate() {
        *b = mpa_ctl_proto::pattern::pattern(1, i);
    }
    let mut smp = Samples::default();
    let mut echoed = vec![0u8; payload as usize];
    for i in 0..WARMUP + a.messages {
        let t0 = monotonic_ns();
        s.send(&ulpdu)?;
        s.flush()?;
        // Until the echo's last segment (L) arrived; its payload lands in `echoed`.
        let mut last = false;
        let deadline = Instant::now() + WAIT;
        while !last {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut bad = None;
            let got = s.recv_with(Some(left), |u| {
                let mut head = [0u8; TAGGED_HEADER_LEN];
                let k = u.copy_prefix(&mut head);
                match DdpRepr::parse(&head[..k], 1) {
                    Ok((
                        DdpRepr::Tagged {
                            last: l, stag, to, ..
                        },
                        h,
                    )) if stag == OUR_STAG => {
                        let body: Vec<u8> = u.pieces().flat_map(|p| p.iter().copied()).collect();
                        let dst = echoed.get_mut(to as usize..to as usize + body.len() - h);
                        match dst {
                            Some(d) => d.copy_from_slice(&body[h..]),
                            None => bad = Some("echo outside our region"),
                        }
                        last |= l;
                    }
                    _ => bad = Some("not an echo to our region"),
                }
            })?;
            if got.is_none() {
                bail!("the echo server closed");
            }
            if let Some(b) = bad {
                bail!("{b}");
            }
        }
        let rtt = monotonic_ns().saturating_sub(t0);
        if echoed[..] != ulpdu[TAGGED_HEADER_LEN..] {
            bail!("iteration {i}: the echo differs from what was sent");
        }
        if i >= WARMUP {
            smp.hist.saturating_record((rtt / 2).max(1));
        }
    }
    drop(s);
    check_echo(echo.report(Duration::from_secs(40))?, WARMUP + a.messages)?;
    Ok(smp)
}

/// The datapath Initiator: this process as its consumer; in `rtc` mode also the queue's
/// worker, turned by the measuring thread.
fn datapath_pingpong(
    bed: &TestBed,
    a: &LatArgs,
    size: usize,
    mode: DatapathMode,
    neighbour: Option<u32>,
) -> Result<Samples> {
    let payload = (size - TAGGED_HEADER_LEN) as u64;
    let socket = temp_path("pingpong.sock");
    let opts = DatapathOptions {
        spin: Duration::from_micros(a.run(size, mode).transfer.spin_us),
        yield_every: a.spin_yield_polls,
        caller_drives_queues: mode.runs_to_completion(),
        xsk: a.xsk(),
        ..a.bed.datapath_options(bed)?
    };
    let mut dp = start_datapath(bed, &socket, &opts)?;
    let mut driver = a.queue_driver(&mut dp, mode);
    // Started before the echo server, whose accept timeout runs from its start.
    let manager = connection_manager(bed, &socket)?;
    let mut consumer = Consumer::connect(&socket, Duration::from_secs(20))?;
    // The application's own domain; our source (what we send) and our sink (where the echo
    // lands), one region each.
    let pd = consumer.alloc_pd()?;
    let src = consumer.create_region(payload, pd, false, false)?;
    let sink = consumer.create_region(payload, pd, true, false)?;
    consumer.subscribe(pd)?;
    consumer.set_busy_poll(a.consumer_busy_poll);
    consumer.set_busy_poll_yield_every(a.spin_yield_polls);
    let mut sent: Vec<u8> = (0..payload as usize)
        .map(|i| mpa_ctl_proto::pattern::pattern(2, i))
        .collect();
    if !src.write(0, &sent) {
        bail!("cannot fill the source region");
    }
    // Each ping carries its iteration's number in its first (up to) 8 octets, so that an
    // echo of an earlier one cannot pass the check after it.
    let stamp_len = sent.len().min(8);
    let mut echoed = vec![0u8; sent.len()];
    let echo = echo_server(bed, a, payload)?;
    let to = SocketAddr::new(bed.addr_a(false), PORT);
    let options = ConnectOptions {
        revision: 2,
        crc: a.framing.crc(),
        private_data: our_ad(sink.info().stag, payload).emit().to_vec(),
        timeout_ms: 20_000,
        ..ConnectOptions::default()
    };
    // The application connects itself, as an application of the datapath does: the
    // connection manager (`mpa-control serve` in ns b) runs the kernel side. The hand-over
    // needs the queue's worker: in `rtc` mode it is turned while setup runs.
    let (flow_id, peer) = drive_while(driver.as_mut(), || {
        connect_as_application(&mut consumer, pd, to, options)
    })??;
    let flooder = neighbour
        .map(|domains| Flooder::start(&socket, domains, flow_id))
        .transpose()?;
    let post = WorkRequest {
        flow_id,
        op: PostOp::Write {
            sink_stag: peer.stag,
            sink_to: peer.base_to,
        },
        sg_list: SgList::one(src.info().stag, 0, payload),
        count: 1,
        wr_id: 0,
        signaled: true,
        solicited: false,
        fence: false,
    };
    let mut smp = Samples::default();
    let mut batch = Vec::with_capacity(64);
    for i in 0..WARMUP + a.messages {
        sent[..stamp_len].copy_from_slice(&i.to_le_bytes()[..stamp_len]);
        if !src.write(0, &sent[..stamp_len]) {
            bail!("cannot write ping {i}");
        }
        let t0 = monotonic_ns();
        let deadline = Instant::now() + WAIT;
        let placed = |c: &mpa_ctl_proto::Completion| -> Result<bool> {
            match c.kind {
                CompletionKind::WritePlaced if c.stag == sink.info().stag && c.len == payload => {
                    Ok(true)
                }
                CompletionKind::WriteSent => Ok(false),
                _ => bail!("iteration {i}: unexpected completion {c:?}"),
            }
        };
        match driver.as_mut() {
            Some(d) => {
                // Run-to-completion: post, then turn the queue and read the ring until the
                // echo is placed; no other thread, no control request.
                d.post(&post)?;
                let mut done = false;
                while !done {
                    d.poll()?;
                    batch.clear();
                    consumer.poll_completions(&mut batch)?;
                    for c in &batch {
                        done |= placed(c)?;
                    }
                    if !done && Instant::now() > deadline {
                        bail!("iteration {i}: no echo within {WAIT:?}");
                    }
                }
            }
            None => {
                match a.post_via {
                    PostVia::Shm => consumer.post_write_shm(
                        flow_id,
                        src.info().stag,
                        0,
                        payload,
                        1,
                        peer.stag,
                        peer.base_to,
                        i,
                    )?,
                    PostVia::Control => consumer.post_write(
                        flow_id,
                        src.info().stag,
                        0,
                        payload,
                        1,
                        peer.stag,
                        peer.base_to,
                    )?,
                }
                let mut done = false;
                while !done {
                    if Instant::now() > deadline {
                        bail!("iteration {i}: no echo within {WAIT:?}");
                    }
                    let Some(batch) = consumer.next_completions(deadline)? else {
                        continue;
                    };
                    for c in &batch {
                        done |= placed(c)?;
                    }
                }
            }
        }
        let rtt = monotonic_ns().saturating_sub(t0);
        if !sink.read(0, &mut echoed) || echoed != sent {
            bail!("iteration {i}: the echo differs from its ping");
        }
        if i >= WARMUP {
            smp.hist.saturating_record((rtt / 2).max(1));
        }
    }
    if let Some(f) = flooder {
        let posted = f.stop()?;
        if posted == 0 {
            bail!("the neighbour posted nothing");
        }
    }
    consumer.finish_flow(flow_id)?;
    // Our FIN leaves, and the echo server's ends the flow, only while the queue turns.
    let report = drive_while(driver.as_mut(), move || {
        echo.report(Duration::from_secs(40))
    })??;
    dp.stop();
    drop(manager);
    check_echo(report, WARMUP + a.messages)?;
    Ok(smp)
}

/// Runs `work`; with a driver (`rtc` mode), while this thread turns the queue, which `work`
/// needs served (a hand-over, the flow's end).
fn drive_while<T: Send>(
    driver: Option<&mut QueueDriver>,
    work: impl FnOnce() -> T + Send,
) -> Result<T> {
    match driver {
        Some(d) => Ok(d.poll_while(work)?),
        None => Ok(work()),
    }
}

/// Runs the ping-pong: every size, both sides, `rounds` times, alternating.
pub(crate) fn pingpong(a: &LatArgs) -> Result<(Document, Vec<Row>)> {
    if a.bed.split_cpus {
        mpa_cli::usage!(
            "--pingpong does not split its echo server and Initiators over the CPUs: no \
             --split-cpus"
        );
    }
    if let Some(s) = a
        .sizes
        .iter()
        .find(|&&s| s <= TAGGED_HEADER_LEN || s > 65536)
    {
        mpa_cli::usage!(
            "--sizes {s}: a ping-pong Write is {} ..= 65536 octets",
            TAGGED_HEADER_LEN + 1
        );
    }
    a.require_one_queue_for_run_to_completion()?;
    let examples = a.modes.iter().any(|m| m.runs_an_example());
    if examples && !a.framing.crc() {
        mpa_cli::usage!(
            "--modes c-api and rust-app: the ping-pong examples ask for CRCs; leave out --plain"
        );
    }
    let c_app = if a.modes.contains(&DatapathMode::CApi) {
        Some(ExampleApp::c()?)
    } else {
        None
    };
    let rust_app = if a.modes.contains(&DatapathMode::RustApp) {
        Some(ExampleApp::rust()?)
    } else {
        None
    };
    let bed = a.bed.bed()?;
    if a.wire_segments {
        crate::bed::wire_segments(&bed)?;
    }
    let sides: Vec<Side> = std::iter::once(Side::Kernel)
        .chain(a.modes.iter().map(|&m| Side::of(m)))
        .collect();
    let mut rows: Vec<Row> = Vec::new();
    for &bytes in &a.sizes {
        for &side in &sides {
            rows.push(Row {
                side,
                bytes,
                samples: Samples::default(),
            });
        }
    }
    let progress = Progress::new(
        "lat --pingpong",
        u64::from(a.rounds) * (a.sizes.len() * sides.len()) as u64,
    );
    for round in 0..a.rounds {
        for (i, &size) in a.sizes.iter().enumerate() {
            for (j, &side) in sides.iter().enumerate() {
                progress.running(format!("round {}: {}, {size} B", round + 1, side.key()));
                let smp = match (side, &c_app, &rust_app) {
                    (Side::Kernel, _, _) => kernel_pingpong(&bed, a, size),
                    (Side::CApi, Some(c), _) => c.pingpong(&bed, a, size),
                    (Side::RustApp, _, Some(r)) => r.pingpong(&bed, a, size),
                    _ => datapath_pingpong(&bed, a, size, a.modes[j - 1], None),
                }
                .with_context(|| format!("{}, {size} B", side.key()))?;
                rows[i * sides.len() + j].samples.add(&smp);
                progress.done(format!("{} {size} B", side.key()));
            }
        }
    }
    drop(progress);
    let doc = Document::Lat {
        params: LatParams {
            pingpong: true,
            ..a.params()
        },
        results: rows.iter().map(|r| record(r, a.rounds)).collect(),
        clock: None,
    };
    Ok((doc, rows))
}

/// The table of a ping-pong run.
/// With `c-api` and `rust-app` both measured, the C library's path against the Rust
/// interface's, each the same example in a process of its own, per size.
pub(crate) fn pingpong_table(rows: &[Row]) -> String {
    let mut t = table(rows)
        .replace("(one-way latency, µs)", "(Write ping-pong, RTT/2, µs)")
        .replace("receiver", "initiator");
    for c in rows.iter().filter(|r| r.side == Side::CApi) {
        let rust = rows
            .iter()
            .find(|r| r.side == Side::RustApp && r.bytes == c.bytes);
        if let Some(r) = rust {
            let q = |q: f64| {
                c.samples.hist.value_at_quantile(q) as f64
                    / r.samples.hist.value_at_quantile(q).max(1) as f64
            };
            t.push_str(&format!(
                "C library / Rust interface, same example, at {:>6} B: p50 {:.2}x, p99 {:.2}x\n",
                c.bytes,
                q(0.5),
                q(0.99)
            ));
        }
    }
    t
}

/// A neighbour of the ping-pong on the same datapath: consumers holding `domains` domains of
/// their own, each subscription's post queues kept full of RDMA Writes on the ping-pong's
/// connection, which the workers refuse (`WrongDomain`: the connection is not in the
/// neighbour's domains). It tops the queues up every millisecond and never reads its rings
/// (refusals past a full ring are lost and counted): the cost lands on the workers.
struct Flooder {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Result<u64>>,
}

impl Flooder {
    fn start(socket: &std::path::Path, domains: u32, victim: u64) -> Result<Flooder> {
        use mpa_ctl_proto::ring::post::{PostOp, WorkRequest};
        let per = mpa_datapath::server::MAX_SUBSCRIPTIONS_PER_CLIENT as u32;
        let mut consumers = Vec::new();
        for first in (0..domains).step_by(per as usize) {
            let mut c = Consumer::connect(socket, WAIT)?;
            let pds: Vec<u32> = (first..domains.min(first + per))
                .map(|k| 0x0f10_0000 + k)
                .collect();
            for &pd in &pds {
                c.subscribe(pd)
                    .with_context(|| format!("the neighbour's domain {pd:#x}"))?;
            }
            consumers.push((c, pds));
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::Builder::new()
            .name("flooding-neighbour".into())
            .spawn(move || -> Result<u64> {
                let mut posted = 0u64;
                while !halt.load(std::sync::atomic::Ordering::Relaxed) {
                    for (c, pds) in &mut consumers {
                        for &pd in pds.iter() {
                            let p = WorkRequest {
                                flow_id: victim,
                                wr_id: posted,
                                sg_list: SgList::one(1, 0, 64),
                                count: 1,
                                op: PostOp::Write {
                                    sink_stag: 1,
                                    sink_to: 0,
                                },
                                signaled: true,
                                solicited: false,
                                fence: false,
                            };
                            while c.post_in(pd, &p).is_ok() {
                                posted += 1;
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(posted)
            })?;
        Ok(Flooder { stop, thread })
    }

    /// Stops it; the posts it made.
    fn stop(self) -> Result<u64> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow!("the flooding neighbour panicked"))?
    }
}

/// `lat --pingpong --flood-neighbour DOMAINS`: each process mode's ping-pong alone and beside
/// a [`Flooder`] of `domains` domains, alternating within every round and size; the table of
/// both and the ratio of their p99.
pub(crate) fn beside_a_flooding_neighbour(a: &LatArgs, domains: u32) -> Result<String> {
    a.require_one_queue_for_run_to_completion()?;
    if a.modes.iter().any(|m| m.runs_an_example()) {
        mpa_cli::usage!(
            "--flood-neighbour measures the in-process modes (sleep, spin): leave c-api and \
             rust-app out of --modes"
        );
    }
    if a.modes.iter().any(|m| m.runs_to_completion()) {
        mpa_cli::usage!(
            "--flood-neighbour measures the process modes (sleep, spin): the neighbour's posts \
             go to a worker thread; leave rtc out of --modes"
        );
    }
    let bed = a.bed.bed()?;
    let mut alone: Vec<Row> = Vec::new();
    let mut flooded: Vec<Row> = Vec::new();
    for &bytes in &a.sizes {
        for &m in &a.modes {
            for rows in [&mut alone, &mut flooded] {
                rows.push(Row {
                    side: Side::of(m),
                    bytes,
                    samples: Samples::default(),
                });
            }
        }
    }
    let progress = Progress::new(
        "lat --pingpong --flood-neighbour",
        u64::from(a.rounds) * (a.sizes.len() * a.modes.len() * 2) as u64,
    );
    for round in 0..a.rounds {
        for (i, &size) in a.sizes.iter().enumerate() {
            for (j, &m) in a.modes.iter().enumerate() {
                let k = i * a.modes.len() + j;
                for (rows, neighbour) in [(&mut alone, None), (&mut flooded, Some(domains))] {
                    let what = if neighbour.is_some() {
                        "beside the neighbour"
                    } else {
                        "alone"
                    };
                    progress.running(format!(
                        "round {}: {}, {size} B, {what}",
                        round + 1,
                        Side::of(m).key()
                    ));
                    let smp = datapath_pingpong(&bed, a, size, m, neighbour)
                        .with_context(|| format!("{}, {size} B, {what}", Side::of(m).key()))?;
                    rows[k].samples.add(&smp);
                    progress.done(format!("{} {size} B {what}", Side::of(m).key()));
                }
            }
        }
    }
    drop(progress);
    let mut t = format!(
        "RDMA Write ping-pong (RTT/2, µs), alone and beside a neighbour keeping {domains} \
         domains' post queues full of refused posts; {} iterations per size, mode and round, {} \
         rounds\n{:23} {:>6} {:>11} {:>11} {:>11} {:>11} {:>9}\n",
        a.messages,
        a.rounds,
        "mode",
        "bytes",
        "p50 alone",
        "p50 beside",
        "p99 alone",
        "p99 beside",
        "p99 ×"
    );
    for (x, y) in alone.iter().zip(&flooded) {
        let us = |v: u64| v as f64 / 1000.0;
        let (p99a, p99f) = (
            x.samples.hist.value_at_quantile(0.99),
            y.samples.hist.value_at_quantile(0.99),
        );
        t.push_str(&format!(
            "{:23} {:>6} {:>11.2} {:>11.2} {:>11.2} {:>11.2} {:>9.2}\n",
            x.side.name(),
            x.bytes,
            us(x.samples.hist.value_at_quantile(0.5)),
            us(y.samples.hist.value_at_quantile(0.5)),
            us(p99a),
            us(p99f),
            p99f as f64 / p99a.max(1) as f64
        ));
    }
    Ok(t)
}
