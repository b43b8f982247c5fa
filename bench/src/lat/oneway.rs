//! One-way latency: the stamped sender in ns a against the datapath's consumer and the
//! kernel-TCP Responder in ns b.

use super::args::LatArgs;
use super::samples::{
    decode_stamp, hgrm, hgrm_name, monotonic_ns, record, us, Row, Samples, Side, STAMP_LEN,
};
use crate::bed::options::{messages, Run, PD, PORT};
use crate::bed::peer::sender_with;
use crate::bed::split;
use crate::report::progress::Progress;
use crate::report::Document;
use anyhow::{anyhow, bail, Context, Result};
use mpa::endpoint::{EndpointConfig, MpaStream};
use mpa::startup::StartupPolicy;
use mpa::wire::ddp::TAGGED_HEADER_LEN;
use mpa::wire::fpdu::MAX_ULPDU;
use mpa_ctl_proto::consumer::Consumer;
use mpa_ctl_proto::region_ad::RegionAd;
use mpa_ctl_proto::CompletionKind;
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
pub fn lat(a: &LatArgs) -> Result<(Document, Vec<Row>)> {
    if a.sizes.is_empty() || a.rounds == 0 {
        bail!("--sizes and --rounds must not be empty / 0");
    }
    for &size in &a.sizes {
        if !(TAGGED_HEADER_LEN + STAMP_LEN..=MAX_ULPDU).contains(&size) {
            bail!(
                "--sizes {size}: a ULPDU must hold the {TAGGED_HEADER_LEN}-octet header and the \
                 {STAMP_LEN}-octet stamp, and be at most {MAX_ULPDU} octets"
            );
        }
    }
    let bed = a.bed.bed()?;
    let extra = a.sender_args();
    let mut rows: Vec<Row> = Vec::new();
    for &size in &a.sizes {
        for side in [Side::Kernel, Side::Datapath] {
            rows.push(Row {
                side,
                bytes: size,
                samples: Samples::default(),
            });
        }
    }
    let progress = Progress::new("lat", u64::from(a.rounds) * a.sizes.len() as u64 * 2);
    for round in 0..a.rounds {
        for (i, &size) in a.sizes.iter().enumerate() {
            let r = a.run(size);
            let at = format!("round {} of {}", round + 1, a.rounds);
            progress.running(format!("{at}: kernel, {size} B"));
            let k = kernel_lat(&bed, &r, &extra).with_context(|| format!("kernel, {size} B"))?;
            progress.done(format!(
                "kernel {size} B: p50 {:.1} µs",
                us(k.hist.value_at_quantile(0.5))
            ));
            rows[2 * i].samples.add(&k);
            progress.running(format!("{at}: datapath, {size} B"));
            let d = datapath_lat(&bed, &r, &extra, a.consumer_busy_poll)
                .with_context(|| format!("datapath, {size} B"))?;
            progress.done(format!(
                "datapath {size} B: p50 {:.1} µs",
                us(d.hist.value_at_quantile(0.5))
            ));
            rows[2 * i + 1].samples.add(&d);
            progress.println(format!(
                "round {}, {size} B: p50 kernel {:.1} µs, datapath {:.1} µs",
                round + 1,
                us(k.hist.value_at_quantile(0.5)),
                us(d.hist.value_at_quantile(0.5))
            ));
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

/// The kernel side: an in-process blocking `MpaStream` Responder in ns b.
fn kernel_lat(bed: &TestBed, r: &Run, extra: &[String]) -> Result<Samples> {
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
    // The Responder is the kernel side's receiver: with --split-cpus on the receiver's CPU,
    // as the datapath's workers are.
    let pin = split::applies(bed, r.bed.split_cpus);
    let responder = std::thread::spawn(move || -> Result<(Samples, u64)> {
        if pin {
            split::pin_this_thread_to_receiver_cpu()?;
        }
        let sock = accept_within(&listener, Duration::from_secs(30))?;
        sock.set_nodelay(true)?;
        let mut s = MpaStream::accept(sock, &cfg)?;
        let mut smp = Samples::default();
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
    let n = messages(r);
    if sent.ulpdus != n || smp.hist.len() + smp.bad != n || wrong > 0 {
        bail!(
            "kernel side: sent {} ULPDUs, {} stamped ones received ({} bad), {wrong} of the wrong length; {n} expected",
            sent.ulpdus,
            smp.hist.len(),
            smp.bad
        );
    }
    Ok(smp)
}

/// The datapath side: the datapath and hand-over listener in ns b, the consumer reading the
/// stamps from the region at each completion's offset.
fn datapath_lat(bed: &TestBed, r: &Run, extra: &[String], busy_poll: bool) -> Result<Samples> {
    let socket = temp_path("lat.sock");
    let opts = DatapathOptions {
        queues: r.bed.queues,
        spin: Duration::from_micros(r.transfer.spin_us),
        ..DatapathOptions::default()
    };
    let dp = start_datapath(bed, &socket, &opts)?;
    let result = split::pin_datapath_workers(bed, r.bed.split_cpus, r.bed.queues)
        .and_then(|()| datapath_lat_on(bed, &socket, r, extra, busy_poll));
    dp.stop();
    result
}

/// [`datapath_lat`] with the datapath running at `socket`.
fn datapath_lat_on(
    bed: &TestBed,
    socket: &std::path::Path,
    r: &Run,
    extra: &[String],
    busy_poll: bool,
) -> Result<Samples> {
    let mut consumer = Consumer::connect(socket, Duration::from_secs(20))?;
    let region = consumer.create_region(r.transfer.region_bytes, PD, true, false)?;
    consumer.subscribe(PD)?;
    // Sleeping on the eventfd, or spinning on the ring with --consumer-busy-poll.
    consumer.set_busy_poll(busy_poll);
    let ad = RegionAd {
        writes: true,
        sends: false,
        stag: region.info().stag,
        len: r.transfer.region_bytes,
        base_to: 0,
        recv_buf_size: 0,
    };
    let payload = (r.size - TAGGED_HEADER_LEN) as u64;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    // Owns the consumer and the mapping (not shared: the mapping is Send, not Sync).
    let collector = std::thread::spawn(move || -> Result<(Samples, u64)> {
        let mut smp = Samples::default();
        let mut wrong = 0u64;
        let mut quiet_since_stop = 0;
        loop {
            let deadline = Instant::now() + Duration::from_millis(100);
            match consumer.next_completions(deadline)? {
                Some(batch) => {
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
                }
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
    let n = messages(r);
    if smp.hist.len() + smp.bad != n || wrong > 0 {
        bail!(
            "datapath side: {} completions with stamps ({} bad), {wrong} wrong; {n} expected",
            smp.hist.len(),
            smp.bad
        );
    }
    Ok(smp)
}
