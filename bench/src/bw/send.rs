//! `bw --sender datapath`: the datapath as the SENDER. The receiver is the kernel-TCP
//! `mpa-peer listen` in ns a for the first two, placing RDMA Writes into the region it
//! advertises, and a second datapath in ns a for the third (`dp→dp`); the senders, in ns b,
//! are:
//! * kernel: `mpa-peer connect --op write` (kernel TCP, the `mpa` encoder);
//! * datapath: this process as an application of the datapath — its own domain
//!   (`alloc_pd`), a registered region filled with random octets, the connection it asks for
//!   itself (`connect_to`, `mpa-control serve` in ns b running the kernel side), Writes posted
//!   in batches (`Consumer::post_write`) and kept at most [`IN_FLIGHT`] outstanding, each
//!   completed when the peer acknowledged it; then `FinishFlow` (a FIN after the last FPDU).
//!
//! Both send `--bytes` of payload in messages of `size − 14` payload octets (a `size`-octet
//! ULPDU for the kernel sender, which puts each in one FPDU; the datapath cuts FPDUs to its
//! MULPDU so that every segment carries whole FPDUs). Checked every run: the kernel side's
//! ULPDU digests match; on the datapath side the listener's region equals the consumer's
//! region octet for octet (`region_digest`) and it counted every Write. Goodput: payload
//! octets over the transfer time (kernel: the sender's `transfer_seconds`; datapath: first
//! post to last completion). CPU: whole system (`crate::bed::cpu`) around each transfer; `proc`
//! is the sending process (mpa-peer connect / this process with the datapath).

use crate::bed::application::{connect_as_application, connection_manager};
use crate::bed::cpu::{CpuUse, SystemCpu};
use crate::bed::options::PORT;
use crate::bed::peer::{PeerListen, PeerReport};
use crate::bw::{transfer_seconds, BwArgs, BwRow, BwSample};
use crate::report::progress::Progress;
use crate::report::{Document, Receiver};
use anyhow::{anyhow, bail, Context, Result};
use mpa_app::{ConnectOptions, Consumer};
use mpa_control::datapath_client::DatapathClient;
use mpa_ctl_proto::region_ad::RegionAd;
use mpa_ctl_proto::CompletionKind;
use mpa_harness::datapath::{start_datapath, temp_path, DatapathOptions};
use mpa_harness::sibling;
use mpa_testbed::{run_in_netns, TestBed};
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Writes posted and not yet completed at most (the datapath queues up to 4096 per flow).
pub(crate) const IN_FLIGHT: u32 = 2048;
/// Writes per `Post` request.
const BATCH: u32 = 512;
const PD: u32 = 11;
const PEER_STAG: u32 = 0x5e_0001;
/// Payload octets of a Write's DDP header (tagged).
const TAGGED: usize = mpa::wire::ddp::TAGGED_HEADER_LEN;

/// What one run must not exceed.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

fn cpu_self() -> f64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .map(|u| {
            let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or(0.0)
}

fn cpu_children() -> f64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .map(|u| {
            let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or(0.0)
}

/// The region both senders write into: the listener's, a whole number of messages long.
fn sink_len(a: &BwArgs, payload: u64) -> u64 {
    (a.transfer.region_bytes / payload).max(1) * payload
}

/// `mpa-peer listen` in ns a for one connection, advertising the sink region.
fn listener(bed: &TestBed, a: &BwArgs, sink: u64) -> Result<PeerListen> {
    let bind = SocketAddr::new(bed.addr_a(false), PORT).to_string();
    let advertise = format!("{PEER_STAG:#x}:{sink}");
    let mut args = vec!["--bind", &bind, "--connections", "1", "--timeout", "60"];
    args.extend(["--accept-timeout", "120", "--advertise", &advertise]);
    if !a.framing.crc() {
        args.push("--no-crc");
    }
    if a.framing.markers() {
        args.push("--markers");
    }
    PeerListen::start(bed, &bed.ns_a, &args)
}

/// Posts `count` Writes of `payload` octets from region `stag` (slot `i mod slots` of it) to
/// the peer's `(STag, base TO)` at the same offsets, keeping at most [`IN_FLIGHT`]
/// outstanding, until every one completed; returns the seconds from the first post to the
/// last completion.
fn send_writes(
    consumer: &mut Consumer,
    flow_id: u64,
    stag: u32,
    payload: u64,
    slots: u64,
    count: u64,
    (sink_stag, base_to): (u32, u64),
) -> Result<f64> {
    let t0 = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    while done < count {
        if t0.elapsed() > RUN_TIMEOUT {
            bail!("{done} of {count} Writes completed in {RUN_TIMEOUT:?}");
        }
        while posted < count && posted - done < u64::from(IN_FLIGHT) {
            // A batch of contiguous slots, not past the region's end.
            let slot = posted % slots;
            let n = (count - posted)
                .min(u64::from(BATCH))
                .min(slots - slot)
                .min(u64::from(IN_FLIGHT) - (posted - done));
            let off = slot * payload;
            consumer.post_write(
                flow_id,
                stag,
                off,
                payload,
                n as u32,
                sink_stag,
                base_to + off,
            )?;
            posted += n;
        }
        let next = consumer.next_completions(Instant::now() + Duration::from_millis(100))?;
        for c in next.unwrap_or_default() {
            if c.kind != CompletionKind::WriteSent || c.len != payload {
                bail!("unexpected completion {c:?}");
            }
            done += 1;
        }
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// The kernel sender: `mpa-peer connect` in ns b.
fn kernel_send(bed: &TestBed, a: &BwArgs, size: usize, count: u64) -> Result<BwSample> {
    let payload = (size - TAGGED) as u64;
    let listener = listener(bed, a, sink_len(a, payload))?;
    let bin = sibling("mpa-peer")?;
    let to = SocketAddr::new(bed.addr_a(false), PORT).to_string();
    let system = SystemCpu::start()?;
    let c0 = cpu_children();
    let out = bed
        .command(&bed.ns_b, &bin.to_string_lossy())
        .args(["connect", "--to", &to, "--op", "write", "--timeout", "60"])
        .args(["--count", &count.to_string(), "--size", &size.to_string()])
        .args((!a.framing.crc()).then_some("--no-crc"))
        .stdin(Stdio::null())
        .output()
        .context("mpa-peer connect")?;
    let sender_cpu = cpu_children() - c0;
    let system = system.seconds()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .next()
        .ok_or_else(|| anyhow!("no report from mpa-peer connect"))?;
    let sent: PeerReport =
        serde_json::from_str(line).with_context(|| format!("mpa-peer connect output {line:?}"))?;
    let got = listener.report(Duration::from_secs(60))?;
    if sent.ulpdu_digest != got.ulpdu_digest || got.error.is_some() {
        bail!(
            "kernel sender: digests {} / {}, listener {got}",
            sent.ulpdu_digest,
            got.ulpdu_digest
        );
    }
    Ok(BwSample {
        octets: (count * payload) as f64,
        messages: count as f64,
        seconds: transfer_seconds(&sent),
        cpu: CpuUse {
            system,
            receiver: sender_cpu,
            sender: sender_cpu,
        },
    })
}

/// What the sending application asks for: revision 2, no markers toward us, CRCs as the
/// framing says.
fn connect_options(a: &BwArgs) -> ConnectOptions {
    ConnectOptions {
        revision: 2,
        markers_required: false,
        crc: a.framing.crc(),
        timeout_ms: 20_000,
        ..ConnectOptions::default()
    }
}

/// The datapath sender: this process as an application of the datapath (its own domain, and
/// the connection it asks for through `mpa-control serve`).
fn datapath_send(bed: &TestBed, a: &BwArgs, size: usize, count: u64) -> Result<BwSample> {
    let payload = (size - TAGGED) as u64;
    let sink = sink_len(a, payload);
    let slots = sink / payload;
    let socket = temp_path("bw-send.sock");
    let dp = start_datapath(bed, &socket, &a.bed.datapath_options(bed)?)?;
    let manager = connection_manager(bed, &socket)?;
    let mut consumer = Consumer::connect(&socket, Duration::from_secs(20))?;
    let pd = consumer.alloc_pd()?;
    let region = consumer.create_region(sink, pd, false, false)?;
    consumer.subscribe(pd)?;
    let mut rng = mpa_stack::sim::SplitMix64(size as u64);
    let src: Vec<u8> = (0..sink).map(|_| rng.next_u64() as u8).collect();
    if !region.write(0, &src) {
        bail!("cannot fill the consumer's region");
    }
    let listener = listener(bed, a, sink)?;
    let to = SocketAddr::new(bed.addr_a(false), PORT);
    let (flow_id, ad) = connect_as_application(&mut consumer, pd, to, connect_options(a))?;
    let stag = region.info().stag;
    let system = SystemCpu::start()?;
    let c0 = cpu_self();
    let to = (ad.stag, ad.base_to);
    let seconds = send_writes(&mut consumer, flow_id, stag, payload, slots, count, to)?;
    let cpu = cpu_self() - c0;
    let system = system.seconds()?;
    consumer.finish_flow(flow_id)?;
    let got = listener.report(Duration::from_secs(60))?;
    // The sender's view, for the log: how its TCP ran.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        let mut dpc = DatapathClient::connect(&socket, Duration::from_secs(5))?;
        let s = mpa_harness::datapath::stats(&mut dpc)?;
        if let Some(f) = s.ended_flow(flow_id) {
            tracing::info!(
                cwnd = f.tx.cwnd,
                srtt_us = ?f.tx.srtt_us,
                retransmissions = f.retransmissions,
                frames = f.frames_sent,
                acks_in = f.packets,
                "datapath sender's flow"
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(manager);
    dp.stop();
    let want = format!("{:08x}", mpa::crc::crc32c(&src));
    let whole = count >= slots;
    if got.error.is_some()
        || got.write_octets != Some(count * payload)
        || (whole && got.region_digest.as_deref() != Some(want.as_str()))
    {
        bail!("datapath sender: the listener's region or counts differ: {got}");
    }
    Ok(BwSample {
        octets: (count * payload) as f64,
        messages: count as f64,
        seconds,
        cpu: CpuUse {
            system,
            receiver: cpu,
            sender: cpu,
        },
    })
}

/// Datapath to datapath: a second datapath in ns a on its end of the bed is the receiver
/// (its in-process Responder advertises a region of its consumer, which must end up equal to
/// the sender's region).
fn datapath_to_datapath(bed: &TestBed, a: &BwArgs, size: usize, count: u64) -> Result<BwSample> {
    let payload = (size - TAGGED) as u64;
    let sink = sink_len(a, payload);
    let slots = sink / payload;
    // The receiver: datapath A in ns a.
    let socket_a = temp_path("bw-dp-a.sock");
    let dp_a = mpa_harness::datapath::start_datapath_on(
        &bed.ns_a,
        &bed.if_a,
        &socket_a,
        &DatapathOptions::default(),
    )?;
    let mut consumer_a = Consumer::connect(&socket_a, Duration::from_secs(20))?;
    let region_a = consumer_a.create_region(sink, PD, true, false)?;
    let ad = RegionAd {
        writes: true,
        sends: false,
        stag: region_a.info().stag,
        len: sink,
        base_to: 0,
        recv_buf_size: 0,
    };
    let responder = mpa_harness::datapath::Responder {
        reply_private_data: ad.emit().to_vec(),
        placement: mpa_control::Placement {
            pd: Some(PD),
            aligned_sender: false,
            conn_id: None,
        },
        ..mpa_harness::datapath::Responder::framing(a.framing.markers(), a.framing.crc())
    };
    let addr = SocketAddr::new(bed.addr_a(false), PORT);
    let listener = run_in_netns(&bed.ns_a, move || std::net::TcpListener::bind(addr))??;
    let (ns_a, sock_a) = (bed.ns_a.clone(), socket_a.clone());
    let setup = std::thread::spawn(move || {
        mpa_harness::datapath::accept_and_hand_over(&ns_a, &sock_a, &listener, &responder)
    });
    // The sender: datapath B in ns b.
    let socket_b = temp_path("bw-dp-b.sock");
    let dp_b = start_datapath(bed, &socket_b, &a.bed.datapath_options(bed)?)?;
    let manager = connection_manager(bed, &socket_b)?;
    let mut consumer = Consumer::connect(&socket_b, Duration::from_secs(20))?;
    let pd = consumer.alloc_pd()?;
    let region = consumer.create_region(sink, pd, false, false)?;
    consumer.subscribe(pd)?;
    let mut rng = mpa_stack::sim::SplitMix64(size as u64 ^ 0xd00d);
    let src: Vec<u8> = (0..sink).map(|_| rng.next_u64() as u8).collect();
    if !region.write(0, &src) {
        bail!("cannot fill the consumer's region");
    }
    let (flow_id, _) = connect_as_application(&mut consumer, pd, addr, connect_options(a))?;
    let handed_a = setup
        .join()
        .map_err(|_| anyhow!("the Responder thread panicked"))??;
    let system = SystemCpu::start()?;
    let c0 = cpu_self();
    let (stag, to) = (region.info().stag, (ad.stag, ad.base_to));
    let seconds = send_writes(&mut consumer, flow_id, stag, payload, slots, count, to)?;
    let cpu = cpu_self() - c0;
    let system = system.seconds()?;
    consumer.finish_flow(flow_id)?;
    if count >= slots && region_a.to_vec() != src {
        bail!("datapath to datapath: the receiver's region differs from the sender's");
    }
    drop(handed_a);
    drop(manager);
    dp_b.stop();
    dp_a.stop();
    Ok(BwSample {
        octets: (count * payload) as f64,
        messages: count as f64,
        seconds,
        cpu: CpuUse {
            system,
            receiver: cpu,
            sender: cpu,
        },
    })
}

/// Runs `bw --sender datapath`: kernel and datapath senders alternating, every size, every
/// round.
pub(crate) fn bw_send(a: &BwArgs) -> Result<(Document, Vec<BwRow>)> {
    if a.sizes
        .iter()
        .any(|&s| s <= TAGGED || s > mpa::wire::fpdu::MAX_ULPDU)
    {
        mpa_cli::usage!(
            "--sizes: each above {TAGGED} and at most {} octets",
            mpa::wire::fpdu::MAX_ULPDU
        );
    }
    if a.transfer.connections != 1 || a.bed.queues != 1 || a.bed.nic.iface.is_some() {
        mpa_cli::usage!("--sender datapath runs one connection, one queue, on the private bed");
    }
    if a.bed.split_cpus {
        mpa_cli::usage!(
            "--sender datapath does not pin its senders and receivers: no --split-cpus"
        );
    }
    // What shapes the kernel sender or the receiving datapath has nothing to act on here:
    // refused rather than ignored.
    let t = &a.transfer;
    let ignored = [
        (
            t.op != crate::bed::options::Op::Write,
            "--op (it sends RDMA Writes)",
        ),
        (
            t.align != crate::bed::options::Align::Auto,
            "--align (the datapath always sends FPDU-aligned segments)",
        ),
        (t.spin_us != 0, "--spin-us"),
        (t.rcv_buf.is_some(), "--rcv-buf"),
        (t.ooo_ack_every.is_some(), "--ooo-ack-every"),
        (t.sender_cc.is_some(), "--sender-cc"),
        (a.wire_segments, "--wire-segments"),
        (
            t.duration.is_some(),
            "--duration (its senders send --bytes)",
        ),
        (t.interval.is_some(), "--interval"),
    ];
    if let Some((_, flag)) = ignored.iter().find(|(set, _)| *set) {
        mpa_cli::usage!("--sender datapath takes no {flag}");
    }
    let bed = a.bed.bed()?;
    let mut rows = Vec::new();
    for &size in &a.sizes {
        for receiver in [
            Receiver::Kernel,
            Receiver::Datapath,
            Receiver::DatapathToDatapath,
        ] {
            rows.push(BwRow {
                receiver,
                size,
                samples: Vec::new(),
                placed_direct_percent: Vec::new(),
                sender: Vec::new(),
            });
        }
    }
    let progress = Progress::new(
        "bw --sender datapath",
        u64::from(a.rounds) * a.sizes.len() as u64 * 3,
    );
    for round in 0..a.rounds {
        for (i, &size) in a.sizes.iter().enumerate() {
            let count = (a.transfer.bytes / (size - TAGGED) as u64).max(1);
            progress.running(format!("round {}: kernel sender, {size} B", round + 1));
            let k = kernel_send(&bed, a, size, count)
                .with_context(|| format!("kernel sender, {size} B"))?;
            progress.done(format!("kernel sender {size} B: {:.2} Gbit/s", k.gbit_s()));
            rows[3 * i].samples.push(k);
            progress.running(format!("round {}: datapath sender, {size} B", round + 1));
            let d = datapath_send(&bed, a, size, count)
                .with_context(|| format!("datapath sender, {size} B"))?;
            progress.done(format!(
                "datapath sender {size} B: {:.2} Gbit/s",
                d.gbit_s()
            ));
            progress.println(format!(
                "round {}, {size} B: kernel {:.2} Gbit/s, datapath {:.2} Gbit/s (senders)",
                round + 1,
                k.gbit_s(),
                d.gbit_s()
            ));
            rows[3 * i + 1].samples.push(d);
            progress.running(format!(
                "round {}: datapath → datapath, {size} B",
                round + 1
            ));
            let dd = datapath_to_datapath(&bed, a, size, count)
                .with_context(|| format!("datapath → datapath, {size} B"))?;
            progress.println(format!(
                "round {}, {size} B: datapath → datapath {:.2} Gbit/s",
                round + 1,
                dd.gbit_s()
            ));
            rows[3 * i + 2].samples.push(dd);
        }
    }
    drop(progress);
    let doc = Document::Bw {
        params: a.params(),
        results: rows.iter().map(BwRow::record).collect(),
    };
    Ok((doc, rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bw: BwArgs,
    }

    /// Flags the datapath sender has nothing to act on are refused by name, before any bed
    /// is made (so this runs without root).
    #[test]
    fn flags_the_datapath_sender_ignores_are_refused() {
        for (flag, value) in [
            ("--op", Some("send")),
            ("--align", Some("on")),
            ("--spin-us", Some("100")),
            ("--rcv-buf", Some("65536")),
            ("--ooo-ack-every", Some("2")),
            ("--sender-cc", Some("bbr")),
            ("--wire-segments", None),
        ] {
            let mut args = vec!["bw", "--sender", "datapath", flag];
            args.extend(value);
            let a = Cli::try_parse_from(&args).unwrap().bw;
            let err = bw_send(&a).unwrap_err().to_string();
            assert!(
                err.contains("--sender datapath takes no") && err.contains(flag),
                "{flag}: {err}"
            );
        }
    }
}
