//! `demo`: one transfer through the datapath, checked byte for byte (and, when placing, the
//! region compared with what the peer wrote).

use crate::bed::cpu::SystemCpu;
use crate::bed::options::{Op, Run, PD, PORT};
use crate::bed::peer::{cpu_seconds, digests_match, senders, PeerReport};
use crate::bed::placement::Placement;
use anyhow::{anyhow, bail, Result};
use mpa_ctl_proto::stats::{EndReport, FlowReport, RingStats, RxStats};
use mpa_harness::datapath::{
    accept_and_hand_over, start_datapath, stats, temp_path, HandedOver, Responder,
};
use mpa_testbed::{run_in_netns, TestBed};
use serde::{Deserialize, Serialize};
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

/// The counters of a run's flows summed (what `demo` prints and `bw` and `soak` use), the
/// digest and the end from one flow, and the workers' CPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct FlowTotals {
    /// Frames and TCP payload octets received.
    pub(crate) packets: u64,
    pub(crate) octets: u64,
    pub(crate) out_of_order_segments: u64,
    pub(crate) duplicates: u64,
    pub(crate) sack_blocks_sent: u64,
    pub(crate) acks_sent: u64,
    pub(crate) retransmissions: u64,
    /// Frames and TCP payload octets sent.
    pub(crate) frames_sent: u64,
    pub(crate) octets_out: u64,
    /// The reassembly stores' high-water marks, added up.
    pub(crate) store_high_water: u64,
    pub(crate) dropped_reassembly_full: u64,
    pub(crate) dropped_out_of_window: u64,
    /// The MPA receive counters (FPDUs, ULPDU octets, CRC and marker errors, placement).
    #[serde(flatten)]
    pub(crate) rx: RxStats,
    /// The first flow's ULPDU digest (`None` when the datapath kept none).
    pub(crate) ulpdu_digest: Option<String>,
    /// How the first flow that ended with an error ended, else how the first flow ended.
    pub(crate) ended: Option<EndReport>,
    /// CPU seconds of the datapath's workers (all queues).
    pub(crate) worker_cpu_seconds: f64,
}

impl FlowTotals {
    /// `flows` summed; `worker_cpu_seconds` left at 0.
    pub(crate) fn of(flows: &[FlowReport]) -> FlowTotals {
        let mut t = FlowTotals {
            ulpdu_digest: flows.first().and_then(|f| f.ulpdu_digest.clone()),
            ended: flows
                .iter()
                .filter_map(|f| f.ended.as_ref())
                .find(|e| e.mpa_error.is_some() || e.terminate.is_some())
                .or_else(|| flows.first().and_then(|f| f.ended.as_ref()))
                .cloned(),
            ..FlowTotals::default()
        };
        for f in flows {
            t.packets += f.packets;
            t.octets += f.octets;
            t.out_of_order_segments += f.out_of_order_segments;
            t.duplicates += f.duplicates;
            t.sack_blocks_sent += f.sack_blocks_sent;
            t.acks_sent += f.acks_sent;
            t.retransmissions += f.retransmissions;
            t.frames_sent += f.frames_sent;
            t.octets_out += f.octets_out;
            t.store_high_water += f.store_high_water;
            t.dropped_reassembly_full += f.dropped_reassembly_full;
            t.dropped_out_of_window += f.dropped_out_of_window;
            add_rx(&mut t.rx, &f.rx);
        }
        t
    }
}

/// Adds every counter of `b` to `a` (all of them: a new counter does not compile until it is
/// added here too).
fn add_rx(a: &mut RxStats, b: &RxStats) {
    let RxStats {
        fpdus,
        ulpdu_octets,
        crc_errors,
        marker_errors,
        placed_direct,
        placed_gathered,
        gather_over_budget,
        placed_in_order,
        placed_from_store,
        spanned_in_place,
        crc_from_segments,
        crc_at_segment_end,
        staged,
        located_rejected,
        ahead_refused,
        ahead_offered,
        ahead_unlocated,
        ahead_overlapping,
        ahead_no_span,
        placed_octets,
        completions,
    } = *b;
    a.fpdus += fpdus;
    a.ulpdu_octets += ulpdu_octets;
    a.crc_errors += crc_errors;
    a.marker_errors += marker_errors;
    a.placed_direct += placed_direct;
    a.placed_gathered += placed_gathered;
    a.gather_over_budget += gather_over_budget;
    a.placed_in_order += placed_in_order;
    a.placed_from_store += placed_from_store;
    a.spanned_in_place += spanned_in_place;
    a.crc_from_segments += crc_from_segments;
    a.crc_at_segment_end += crc_at_segment_end;
    a.staged += staged;
    a.located_rejected += located_rejected;
    a.ahead_refused += ahead_refused;
    a.ahead_offered += ahead_offered;
    a.ahead_unlocated += ahead_unlocated;
    a.ahead_overlapping += ahead_overlapping;
    a.ahead_no_span += ahead_no_span;
    a.placed_octets += placed_octets;
    a.completions += completions;
}

/// What one datapath run measured.
pub(crate) struct DpResult {
    /// The sender's report (with several connections: summed, see
    /// [`PeerReport::aggregate`]).
    pub(crate) peer: PeerReport,
    /// Every sender's report.
    pub(crate) peers: Vec<PeerReport>,
    /// The flows' final counters in the datapath, summed.
    pub(crate) flow: FlowTotals,
    /// Every flow's final counters.
    pub(crate) flows: Vec<FlowReport>,
    /// CPU seconds of this process (datapath, listener, consumer) during the transfer.
    pub(crate) cpu: f64,
    /// Whole-system busy CPU seconds during the transfer (`/proc/stat`).
    pub(crate) system_cpu: f64,
    /// CPU seconds of the sender processes (`mpa-peer connect`).
    pub(crate) sender_cpu: f64,
    /// The XDP program's counters, when readable.
    pub(crate) xdp: Option<mpa_ctl_proto::stats::XdpCounters>,
    /// Each queue's ring counters (frames, multi-buffer frames, dropped chains, largest).
    pub(crate) rings: Vec<RingStats>,
    /// Placement check: (messages completed, region octets compared) summed over the
    /// connections, when placing.
    pub(crate) placement: Option<(u64, u64)>,
}

/// One transfer through the datapath on `bed`: the datapath and the hand-over listener in ns
/// b, `r.connections` × `mpa-peer connect` in ns a.
pub(crate) fn datapath_run(bed: &TestBed, r: &Run) -> Result<DpResult> {
    let socket = temp_path("bench.sock");
    let mut opts = r.bed.datapath_options(bed)?;
    if let Some(b) = r.transfer.rcv_buf {
        opts.tcp.rcv_buf = b;
        opts.tcp.reassembly_limit = b;
    }
    if let Some(n) = r.transfer.ooo_ack_every {
        opts.tcp.ooo_ack_every = n;
    }
    opts.spin = std::time::Duration::from_micros(r.transfer.spin_us);
    let dp = start_datapath(bed, &socket, &opts)?;
    let result = crate::bed::split::pin_datapath_workers(bed, r.bed.split_cpus, r.bed.queues)
        .and_then(|()| transfer(bed, &socket, r));
    dp.stop();
    result
}

/// One transfer of `r.connections` connections through the datapath already running on `bed`
/// with its control socket at `socket` (what [`datapath_run`] and `soak` do each time).
pub(crate) fn transfer(bed: &TestBed, socket: &std::path::Path, r: &Run) -> Result<DpResult> {
    let n = r.transfer.connections.max(1);
    // One region, consumer and protection domain per connection, so that each consumer's
    // completions are its connection's.
    let placements = match r.transfer.op {
        Op::Count => Vec::new(),
        _ => (0..n)
            .map(|i| Placement::prepare_in(socket, r, PD + i))
            .collect::<Result<Vec<_>>>()?,
    };
    let markers = r.markers();
    let crc = r.framing.crc();
    let responders: Vec<Responder> = (0..n)
        .map(|i| {
            let p = placements.get(i as usize);
            Responder {
                reply_private_data: p.map(|p| p.ad.emit().to_vec()).unwrap_or_default(),
                placement: mpa_control::Placement {
                    pd: p.map(|_| PD + i),
                    aligned_sender: r.aligned() && !markers && crc,
                    conn_id: None,
                },
                wait: Duration::from_secs(120),
                ..Responder::framing(markers, crc)
            }
        })
        .collect();
    let addr = SocketAddr::new(bed.addr_b(false), PORT);
    let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr))??;
    let (ns_b, sock_path) = (bed.ns_b.clone(), socket.to_path_buf());
    // The hand-over listener: the connections one after the other (not scoped: a failed
    // sender must not wait for it).
    let setup = std::thread::spawn(move || {
        responders
            .iter()
            .map(|resp| accept_and_hand_over(&ns_b, &sock_path, &listener, resp))
            .collect::<Result<Vec<HandedOver>>>()
    });
    let system = SystemCpu::start()?;
    let cpu0 = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_SELF);
    let children0 = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_CHILDREN);
    let peers = senders(bed, r)?;
    let sender_cpu = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_CHILDREN) - children0;
    let mut handed = setup
        .join()
        .map_err(|_| anyhow!("setup thread panicked"))??;
    let mut gone = Vec::new();
    for h in handed.iter_mut() {
        gone.push(h.dpc.next_notification()?);
    }
    let cpu = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_SELF) - cpu0;
    let system_cpu = system.seconds()?;
    if std::env::var_os("MPA_BENCH_THREADS").is_some() {
        print_thread_cpu();
    }
    let stats = stats(&mut handed[0].dpc)?;
    let mut reports = Vec::new();
    for (h, g) in handed.iter().zip(&gone) {
        let report = stats
            .ended_flow(h.flow_id)
            .cloned()
            .ok_or_else(|| anyhow!("flow {} missing from stats ({g:?})", h.flow_id))?;
        reports.push(report);
    }
    drop(handed);
    // The workers' own CPU (one queue: the flows' worker), apart from the control thread and
    // the consumers that run in this process too.
    let worker_cpu: f64 = stats.queues.iter().map(|q| q.cpu_seconds).sum();
    if let Some(bad) = reports.iter().find_map(|f| {
        f.ended
            .as_ref()
            .filter(|e| e.terminate.is_some() || e.mpa_error.is_some())
    }) {
        if !placements.is_empty() {
            bail!("a flow ended with an error: {bad:?}");
        }
    }
    let mut placed: Option<(u64, u64)> = None;
    for p in placements {
        let (m, o) = p.verify(r)?;
        let t = placed.get_or_insert((0, 0));
        *t = (t.0 + m, t.1 + o);
    }
    // A timed run: each placement checked what completed; together that must be what the
    // senders say they sent.
    if let (Some(_), Some((m, _))) = (r.transfer.duration, placed) {
        let sent: u64 = peers.iter().filter_map(|p| p.messages).sum();
        if m != sent {
            bail!("{m} messages completed, the senders sent {sent}");
        }
    }
    let flow = FlowTotals {
        worker_cpu_seconds: worker_cpu,
        ..FlowTotals::of(&reports)
    };
    Ok(DpResult {
        peer: PeerReport::aggregate(&peers),
        peers,
        flow,
        flows: reports,
        cpu,
        system_cpu,
        sender_cpu,
        xdp: stats.xdp,
        rings: stats.queues.iter().map(|q| q.ring).collect(),
        placement: placed,
    })
}

/// CPU seconds of each live thread of this process, by name (MPA_BENCH_THREADS=1): where a
/// run's CPU went (on stderr).
pub(crate) fn print_thread_cpu() {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    let tick = 100.0; // USER_HZ
    let mut rows: Vec<(String, f64)> = dir
        .filter_map(|e| {
            let p = e.ok()?.path();
            let name = std::fs::read_to_string(p.join("comm"))
                .ok()?
                .trim()
                .to_string();
            let stat = std::fs::read_to_string(p.join("stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let t = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
            Some((name, t / tick))
        })
        .collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    // A diagnostic beside the results: on stderr, so that a `--json` document stays alone.
    for (name, secs) in rows.iter().filter(|r| r.1 > 0.0) {
        eprintln!("thread {name:20} {secs:.2} s");
    }
}

pub(crate) fn gbit(octets: f64, seconds: f64) -> f64 {
    octets * 8.0 / seconds / 1e9
}

/// The document `demo --json` prints: every measured value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct DemoDocument {
    /// Goodput: ULPDU octets over the sender's transfer time.
    pub(crate) gbit_per_s: f64,
    pub(crate) seconds: f64,
    pub(crate) ulpdu_octets: u64,
    /// CPU seconds of this process (datapath, listener, consumers) during the transfer.
    pub(crate) cpu_seconds: f64,
    pub(crate) op: Op,
    pub(crate) loss_percent: u8,
    /// Frames the bridge dropped (loss or impairment).
    pub(crate) bridge_dropped: u64,
    /// The impairment bridge's counters, when it ran.
    pub(crate) impairment: Option<String>,
    /// FPDUs that arrived out of order: placed straight from their segment, from the
    /// reassembly store, gathered from stored pieces on arrival of the last; the shares
    /// placed on arrival straight from one segment and on arrival at all (`None`: nothing
    /// arrived out of order).
    pub(crate) placed_direct: u64,
    pub(crate) placed_from_store: u64,
    pub(crate) placed_direct_percent: Option<f64>,
    pub(crate) placed_gathered: u64,
    pub(crate) placed_ahead_percent: Option<f64>,
    /// What the placement check compared, when placing.
    pub(crate) placement_checked: Option<PlacementChecked>,
    /// The flows' counters, summed.
    pub(crate) flow: FlowTotals,
}

/// The placement check of a run: messages completed in order and region octets compared,
/// over all connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PlacementChecked {
    pub(crate) messages: u64,
    pub(crate) region_octets: u64,
}

/// Prints a line of the demo's text: on stdout, or on stderr when stdout carries the
/// document.
fn print_line(json: bool, line: &str) {
    crate::report::line(json, line);
}

/// `mpa-bench demo`: the text, the last line `demo: OK …` (stdout, or stderr with `--json`),
/// and with `--json` the document on stdout.
pub fn run_cli(r: &Run) -> Result<()> {
    let (doc, verdict) = demo(r)?;
    print_line(r.json, &format!("demo: OK {verdict}"));
    if r.json {
        crate::report::print(&doc)?;
    }
    Ok(())
}

/// Runs the demo, printing what it measured as it goes; returns the document and the verdict
/// line's text.
pub(crate) fn demo(r: &Run) -> Result<(DemoDocument, String)> {
    r.transfer.check()?;
    let bed = r.bed.bed()?;
    let t0 = Instant::now();
    let d = datapath_run(&bed, r)?;
    let secs = d
        .peer
        .transfer_seconds
        .unwrap_or(t0.elapsed().as_secs_f64());
    let f = &d.flow;
    let rx = &f.rx;
    let octets = rx.ulpdu_octets;
    let digest_ok = digests_match(&d.peers, &d.flows);
    let say = |line: &str| print_line(r.json, line);
    say(&format!("sender      : {}", d.peer));
    say(&format!("datapath    : {}", serde_json::to_string(f)?));
    say(&format!(
        "xdp         : {}",
        d.xdp
            .map(|x| serde_json::to_string(&x))
            .transpose()?
            .unwrap_or_else(|| "(not readable)".into())
    ));
    say(&format!(
        "rings       : {}",
        serde_json::to_string(&d.rings)?
    ));
    say(&format!(
        "fpdus={} ulpdu_octets={} crc_errors={} marker_errors={} out_of_order={} sack_blocks={} digest_match={}",
        rx.fpdus, rx.ulpdu_octets, rx.crc_errors, rx.marker_errors,
        f.out_of_order_segments, f.sack_blocks_sent, digest_ok
    ));
    if !digest_ok {
        bail!(
            "digests differ: sent {} received {}",
            d.peer.ulpdu_digest,
            f.ulpdu_digest.as_deref().unwrap_or("none")
        );
    }
    if let Some(e) = f.ended.as_ref().and_then(|e| e.mpa_error) {
        bail!("flow ended with MPA error {e}");
    }
    let loss = r.bed.loss;
    let dropped = if loss > 0 { bed.dropped()? } else { 0 };
    if loss > 0 {
        say(&format!("bridge dropped {dropped} frames"));
    }
    let impairment = bed.impair_stats();
    if let Some(s) = &impairment {
        say(&format!("impairment  : {s}"));
    }
    say(&format!(
        "datapath CPU: {:.2} s for {:.0} MiB (workers {:.2} s)",
        d.cpu,
        octets as f64 / (1 << 20) as f64,
        f.worker_cpu_seconds
    ));
    let g = gbit(octets as f64, secs);
    let (direct, gathered, store) = (rx.placed_direct, rx.placed_gathered, rx.placed_from_store);
    // Shares of the FPDUs that arrived out of order (placed ahead or from the store): placed
    // on arrival straight from their segment, and on arrival at all (also those gathered
    // from stored pieces once their last piece came).
    let ooo = direct + gathered + store;
    let share = |x: u64| (ooo > 0).then(|| 100.0 * x as f64 / ooo as f64);
    let (direct_pct, ahead_pct) = (share(direct), share(direct + gathered));
    if let Some((msgs, region)) = d.placement {
        say(&format!(
            "placement   : {msgs} messages completed in order; region of {region} octets equals what the peer wrote; placed_direct={direct} placed_gathered={gathered} placed_from_store={store} placed_in_order={} located_rejected={} store_high_water={}",
            rx.placed_in_order, rx.located_rejected, f.store_high_water
        ));
    }
    let verdict = match (d.placement, ahead_pct, direct_pct) {
        (Some(_), Some(a), Some(p)) => {
            format!("{g:.2} Gbit/s placed_ahead={a:.1}% (directly from one segment {p:.1}%)")
        }
        (Some(_), _, _) => format!("{g:.2} Gbit/s placed_ahead=n/a (nothing out of order)"),
        (None, _, _) => format!("{g:.2} Gbit/s"),
    };
    let doc = DemoDocument {
        gbit_per_s: g,
        seconds: secs,
        ulpdu_octets: octets,
        cpu_seconds: d.cpu,
        op: r.transfer.op,
        loss_percent: loss,
        bridge_dropped: dropped,
        impairment: impairment.map(|s| s.to_string()),
        placed_direct: direct,
        placed_from_store: store,
        placed_direct_percent: direct_pct,
        placed_gathered: gathered,
        placed_ahead_percent: ahead_pct,
        placement_checked: d
            .placement
            .map(|(messages, region_octets)| PlacementChecked {
                messages,
                region_octets,
            }),
        flow: d.flow,
    };
    Ok((doc, verdict))
}
