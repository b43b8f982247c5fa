//! One-way latency: the stamped sender in ns a against the datapath's consumer and the
//! kernel-TCP Responder in ns b. On two hosts the sender's clock is measured before and after
//! every run and the run's samples corrected by it ([`super::clock`]).

use super::args::LatArgs;
use super::clock::Clock;
use super::samples::{
    decode_stamp, hgrm, hgrm_name, monotonic_ns, record, us, Receipts, Row, Samples, Side,
    STAMP_LEN,
};
use crate::bed::options::{messages, DatapathMode, Run, PD, PORT};
use crate::bed::peer::sender_with;
use crate::bed::split;
use crate::report::progress::Progress;
use crate::report::Document;
use anyhow::{anyhow, bail, Context, Result};
use mpa::endpoint::{EndpointConfig, MpaStream};
use mpa::startup::StartupPolicy;
use mpa::wire::ddp::TAGGED_HEADER_LEN;
use mpa::wire::fpdu::MAX_ULPDU;
use mpa_app::Consumer;
use mpa_ctl_proto::region_ad::RegionAd;
use mpa_ctl_proto::CompletionKind;
use mpa_datapath::worker::QueueDriver;
use mpa_harness::datapath::{
    accept_and_hand_over, start_datapath, stats, temp_path, DatapathOptions, HandedOver, Responder,
};
use mpa_testbed::{run_in_netns, TestBed};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs `lat`: every size on both sides, `rounds` times; writes the `.hgrm` files; returns
/// the document and the rows.
pub(crate) fn lat(a: &LatArgs) -> Result<(Document, Vec<Row>)> {
    if a.sizes.is_empty() || a.rounds == 0 {
        mpa_cli::usage!("--sizes and --rounds must not be empty / 0");
    }
    for &size in &a.sizes {
        if !(TAGGED_HEADER_LEN + STAMP_LEN..=MAX_ULPDU).contains(&size) {
            mpa_cli::usage!(
                "--sizes {size}: a ULPDU must hold the {TAGGED_HEADER_LEN}-octet header and the \
                 {STAMP_LEN}-octet stamp, and be at most {MAX_ULPDU} octets"
            );
        }
    }
    a.require_one_queue_for_run_to_completion()?;
    if a.modes.iter().any(|m| m.runs_an_example()) {
        mpa_cli::usage!("--modes c-api and rust-app are ping-pong modes: add --pingpong");
    }
    let bed = a.bed.bed()?;
    if a.wire_segments {
        crate::bed::wire_segments(&bed)?;
    }
    // On two hosts: the responder started and the offset measured before the first run.
    let mut clock = Clock::start(&bed, a)?;
    let deferred = clock.deferred();
    let extra = a.sender_args();
    let sides: Vec<Side> = std::iter::once(Side::Kernel)
        .chain(a.modes.iter().map(|&m| Side::of(m)))
        .collect();
    let mut rows: Vec<Row> = Vec::new();
    for &size in &a.sizes {
        for &side in &sides {
            rows.push(Row {
                side,
                bytes: size,
                samples: Samples::default(),
            });
        }
    }
    let progress = Progress::new(
        "lat",
        u64::from(a.rounds) * (a.sizes.len() * sides.len()) as u64,
    );
    for round in 0..a.rounds {
        for (i, &size) in a.sizes.iter().enumerate() {
            let at = format!("round {} of {}", round + 1, a.rounds);
            let mut line = format!("round {}, {size} B: p50", round + 1);
            for (j, &side) in sides.iter().enumerate() {
                progress.running(format!("{at}: {}, {size} B", side.key()));
                let got = match side {
                    Side::Kernel => {
                        kernel_lat(&bed, &a.run(size, DatapathMode::Sleep), &extra, deferred)
                    }
                    _ => {
                        let mode = a.modes[j - 1];
                        datapath_lat(&bed, &a.run(size, mode), &extra, a, mode, deferred)
                    }
                }
                .with_context(|| format!("{}, {size} B", side.key()))?;
                // The offset after the run: with the one before, the run's correction.
                let span = clock
                    .measure()
                    .with_context(|| format!("the peer's clock after {}, {size} B", side.key()))?;
                let smp = got.finish(|stamp, now| match &span {
                    Some(span) => span.latency(stamp, now),
                    None => i128::from(now) - i128::from(stamp),
                });
                let p50 = us(smp.hist.value_at_quantile(0.5));
                progress.done(format!("{} {size} B: p50 {p50:.1} µs", side.key()));
                line += &format!(" {} {p50:.1} µs", side.key());
                rows[i * sides.len() + j].samples.add(&smp);
            }
            progress.println(line);
        }
    }
    drop(progress);
    std::fs::create_dir_all(&a.out).with_context(|| format!("create {}", a.out.display()))?;
    for r in &rows {
        let path = a.out.join(hgrm_name(r.side, r.bytes, a.rate));
        std::fs::write(&path, hgrm(&r.samples.hist))
            .with_context(|| format!("write {}", path.display()))?;
    }
    let doc = Document::Lat {
        params: a.params(),
        results: rows.iter().map(|r| record(r, a.rounds)).collect(),
        clock: Some(clock.record()),
    };
    Ok((doc, rows))
}

/// Accepts one connection on `listener` within `wait`.
fn accept_within(listener: &TcpListener, wait: Duration) -> Result<std::net::TcpStream> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + wait;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The kernel side: an in-process blocking `MpaStream` Responder in ns b (`deferred`: the
/// sender's clock is another host's).
fn kernel_lat(bed: &TestBed, r: &Run, extra: &[String], deferred: bool) -> Result<Receipts> {
    let addr = SocketAddr::new(bed.addr_b(false), PORT);
    let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr))??;
    let cfg = EndpointConfig {
        policy: StartupPolicy {
            revision: 2,
            accept_rev2: true,
            markers_required: r.markers(),
            crc_suppressed_by_admin: !r.framing.crc(),
            startup_timeout: Duration::from_secs(20),
            ..StartupPolicy::default()
        },
        private_data: Vec::new(),
        emss: 1448,
    };
    let payload = (r.size - TAGGED_HEADER_LEN) as u64;
    let n = messages(r);
    // The Responder is the kernel side's receiver: with --split-cpus on the receiver's CPU,
    // as the datapath's workers are.
    let pin = split::applies(bed, r.bed.split_cpus);
    let responder = std::thread::spawn(move || -> Result<(Receipts, u64)> {
        if pin {
            split::pin_this_thread_to_receiver_cpu()?;
        }
        let sock = accept_within(&listener, Duration::from_secs(30))?;
        sock.set_nodelay(true)?;
        let mut s = MpaStream::accept(sock, &cfg)?;
        let mut smp = Receipts::new(deferred, n);
        let mut wrong = 0u64;
        while s
            .recv_with(Some(Duration::from_secs(60)), |u| {
                let mut head = [0u8; TAGGED_HEADER_LEN + STAMP_LEN];
                let k = u.copy_prefix(&mut head);
                // The whole ULPDU has been read (and its FPDU checked): the receive point.
                let now = monotonic_ns();
                smp.record(decode_stamp(&head[TAGGED_HEADER_LEN.min(k)..k]), now);
                if u.len() as u64 != payload + TAGGED_HEADER_LEN as u64 {
                    wrong += 1;
                }
            })?
            .is_some()
        {}
        Ok((smp, wrong))
    });
    let sent = sender_with(bed, r, extra)?;
    let (smp, wrong) = responder
        .join()
        .map_err(|_| anyhow!("kernel Responder panicked"))??;
    if sent.ulpdus != n || smp.count() != n || wrong > 0 {
        bail!(
            "kernel side: sent {} ULPDUs, {} received, {wrong} of the wrong length; {n} expected",
            sent.ulpdus,
            smp.count(),
        );
    }
    Ok(smp)
}

/// The datapath side: the datapath and hand-over listener in ns b, the consumer reading the
/// stamps from the region at each completion's offset — in `rtc` mode on the thread that
/// also turns the queue.
fn datapath_lat(
    bed: &TestBed,
    r: &Run,
    extra: &[String],
    a: &LatArgs,
    mode: DatapathMode,
    deferred: bool,
) -> Result<Receipts> {
    // Busy polling, yielding every so many empty polls.
    let busy_poll = a.consumer_busy_poll.then_some(a.spin_yield_polls);
    let socket = temp_path("lat.sock");
    let opts = DatapathOptions {
        spin: Duration::from_micros(r.transfer.spin_us),
        yield_every: a.spin_yield_polls,
        caller_drives_queues: mode.runs_to_completion(),
        xsk: a.xsk(),
        ..r.bed.datapath_options(bed)?
    };
    let mut dp = start_datapath(bed, &socket, &opts)?;
    let driver = a.queue_driver(&mut dp, mode);
    let result = if driver.is_some() {
        Ok(())
    } else {
        split::pin_datapath_workers(bed, r.bed.split_cpus, r.bed.queues)
    }
    .and_then(|()| {
        let pin = split::applies(bed, r.bed.split_cpus);
        datapath_lat_on(bed, &socket, r, extra, busy_poll, driver, pin, deferred)
    });
    dp.stop();
    result
}

/// [`datapath_lat`] with the datapath running at `socket` (and its queue's driver in `rtc`
/// mode; `pin`: the reading thread on the receiver's CPU, as the workers are).
#[allow(clippy::too_many_arguments)]
fn datapath_lat_on(
    bed: &TestBed,
    socket: &std::path::Path,
    r: &Run,
    extra: &[String],
    busy_poll: Option<u32>,
    driver: Option<QueueDriver>,
    pin: bool,
    deferred: bool,
) -> Result<Receipts> {
    let mut consumer = Consumer::connect(socket, Duration::from_secs(20))?;
    let region = consumer.create_region(r.transfer.region_bytes, PD, true, false)?;
    consumer.subscribe(PD)?;
    // Sleeping on the eventfd, or spinning on the ring with --consumer-busy-poll.
    consumer.set_busy_poll(busy_poll.is_some());
    if let Some(every) = busy_poll {
        consumer.set_busy_poll_yield_every(every);
    }
    let ad = RegionAd {
        writes: true,
        sends: false,
        stag: region.info().stag,
        len: r.transfer.region_bytes,
        base_to: 0,
        recv_buf_size: 0,
    };
    let payload = (r.size - TAGGED_HEADER_LEN) as u64;
    let n = messages(r);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    // Owns the consumer and the mapping (not shared: the mapping is Send, not Sync).
    let collector = std::thread::spawn(move || -> Result<(Receipts, u64)> {
        if pin && driver.is_some() {
            split::pin_this_thread_to_receiver_cpu()?;
        }
        let mut smp = Receipts::new(deferred, n);
        let mut wrong = 0u64;
        let mut take = |batch: &[mpa_ctl_proto::Completion]| {
            for c in batch {
                let mut ts = [0u8; STAMP_LEN];
                let ok = region.read(c.offset, &mut ts);
                // The consumer holds the completion and its stamp: the receive point.
                let now = monotonic_ns();
                smp.record(ok.then(|| u64::from_le_bytes(ts)), now);
                if c.kind != CompletionKind::WritePlaced || c.len != payload {
                    wrong += 1;
                }
            }
        };
        if let Some(mut driver) = driver {
            // Run-to-completion: one loop turns the queue and reads its completions.
            let mut batch = Vec::with_capacity(4096);
            let mut quiet_since: Option<Instant> = None;
            loop {
                driver.poll()?;
                batch.clear();
                if consumer.poll_completions(&mut batch)? > 0 {
                    take(&batch);
                    quiet_since = None;
                } else if flag.load(Ordering::Relaxed) {
                    let t = *quiet_since.get_or_insert_with(Instant::now);
                    if t.elapsed() > Duration::from_millis(300) {
                        return Ok((smp, wrong));
                    }
                }
            }
        }
        let mut quiet_since_stop = 0;
        loop {
            let deadline = Instant::now() + Duration::from_millis(100);
            match consumer.next_completions(deadline)? {
                Some(batch) => take(&batch),
                None if flag.load(Ordering::Relaxed) => {
                    quiet_since_stop += 1;
                    if quiet_since_stop >= 3 {
                        return Ok((smp, wrong));
                    }
                }
                None => {}
            }
        }
    });
    let markers = r.markers();
    let responder = Responder {
        reply_private_data: ad.emit().to_vec(),
        placement: mpa_control::Placement {
            pd: Some(PD),
            aligned_sender: false,
            conn_id: None,
        },
        wait: Duration::from_secs(120),
        ..Responder::framing(markers, r.framing.crc())
    };
    let addr = SocketAddr::new(bed.addr_b(false), PORT);
    let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr))??;
    let (ns_b, sock_path) = (bed.ns_b.clone(), socket.to_path_buf());
    let setup =
        std::thread::spawn(move || accept_and_hand_over(&ns_b, &sock_path, &listener, &responder));
    let peer = sender_with(bed, r, extra)?;
    let HandedOver {
        flow_id,
        mut dpc,
        frozen,
        ..
    } = setup
        .join()
        .map_err(|_| anyhow!("setup thread panicked"))??;
    let gone = dpc.next_notification()?;
    drop(frozen);
    let stats = stats(&mut dpc)?;
    let report = stats
        .ended_flow(flow_id)
        .cloned()
        .ok_or_else(|| anyhow!("flow {flow_id} missing from stats ({gone:?})"))?;
    stop.store(true, Ordering::Relaxed);
    let (smp, wrong) = collector
        .join()
        .map_err(|_| anyhow!("completion reader panicked"))??;
    if let Some(e) = &report.ended {
        if e.terminate.is_some() || e.mpa_error.is_some() {
            bail!("the flow ended with an error: {e:?}");
        }
    }
    if report.ulpdu_digest.as_deref() != Some(peer.ulpdu_digest.as_str()) {
        bail!(
            "digests differ: sent {} received {}",
            peer.ulpdu_digest,
            report.ulpdu_digest.as_deref().unwrap_or("none")
        );
    }
    if smp.count() != n || wrong > 0 {
        bail!(
            "datapath side: {} completions, {wrong} wrong; {n} expected",
            smp.count(),
        );
    }
    Ok(smp)
}
