//! `demo`: one transfer through the datapath, checked byte for byte (and, when placing, the
//! region compared with what the peer wrote).

use crate::bed::cpu::SystemCpu;
use crate::bed::options::{bed, Op, Run, PD, PORT};
use crate::bed::peer::{aggregate, cpu_seconds, digests_match, senders};
use crate::bed::placement::Placement;
use anyhow::{anyhow, bail, Result};
use mpa_harness::datapath::{
    accept_and_hand_over, start_datapath, stats, temp_path, DatapathOptions, HandedOver, Responder,
};
use mpa_testbed::{run_in_netns, TestBed};
use serde_json::Value;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

/// What one datapath run measured.
pub struct DpResult {
    /// The sender's report (with several connections: the first sender's, with the summed
    /// octets and the longest `transfer_seconds` of all).
    pub peer: Value,
    /// Every sender's report.
    pub peers: Vec<Value>,
    /// The flow's final counters in the datapath (with several connections: numeric counters
    /// summed over the flows, the rest from the first).
    pub flow: Value,
    /// Every flow's final counters.
    pub flows: Vec<Value>,
    /// CPU seconds of this process (datapath, listener, consumer) during the transfer.
    pub cpu: f64,
    /// Whole-system busy CPU seconds during the transfer (`/proc/stat`).
    pub system_cpu: f64,
    /// CPU seconds of the sender processes (`mpa-peer connect`).
    pub sender_cpu: f64,
    /// The XDP program's counters.
    pub xdp: Value,
    /// Each queue's ring counters (frames, multi-buffer frames, dropped chains, largest).
    pub rings: Value,
    /// Placement check: (messages completed, region octets compared) summed over the
    /// connections, when placing.
    pub placement: Option<(u64, u64)>,
}

/// One transfer through the datapath on `bed`: the datapath and the hand-over listener in ns
/// b, `r.connections` × `mpa-peer connect` in ns a.
pub fn datapath_run(bed: &TestBed, r: &Run) -> Result<DpResult> {
    let socket = temp_path("bench.sock");
    let mut opts = DatapathOptions {
        queues: r.queues,
        ..DatapathOptions::default()
    };
    if let Some(b) = r.rcv_buf {
        opts.tcp.rcv_buf = b;
        opts.tcp.reassembly_limit = b;
    }
    if let Some(n) = r.ooo_ack_every {
        opts.tcp.ooo_ack_every = n;
    }
    opts.spin = std::time::Duration::from_micros(r.spin_us);
    let dp = start_datapath(bed, &socket, &opts)?;
    if crate::bed::split::applies(bed, r.split_cpus) {
        let want = r.queues.max(1) as usize;
        let n = crate::bed::split::pin_workers(want)?;
        if n < want {
            bail!("--split-cpus: {n} datapath worker threads to pin, {want} expected");
        }
    }
    let result = transfer(bed, &socket, r);
    dp.stop();
    result
}

/// One transfer of `r.connections` connections through the datapath already running on `bed`
/// with its control socket at `socket` (what [`datapath_run`] and `soak` do each time).
pub fn transfer(bed: &TestBed, socket: &std::path::Path, r: &Run) -> Result<DpResult> {
    let n = r.connections.max(1);
    // One region, consumer and protection domain per connection, so that each consumer's
    // completions are its connection's.
    let placements = match r.op {
        Op::Count => Vec::new(),
        _ => (0..n)
            .map(|i| Placement::prepare_in(socket, r, PD + i))
            .collect::<Result<Vec<_>>>()?,
    };
    let markers = r.markers();
    let crc = !r.plain;
    let responders: Vec<Responder> = (0..n)
        .map(|i| {
            let p = placements.get(i as usize);
            Responder {
                reply_private_data: p.map(|p| p.ad.emit().to_vec()).unwrap_or_default(),
                placement: mpa_control::Placement {
                    pd: p.map(|_| PD + i),
                    aligned_sender: r.aligned() && !markers && crc,
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
    let flows = reports
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<_>, _>>()?;
    let mut flow = aggregate(&flows);
    flow["worker_cpu_seconds"] = serde_json::json!(worker_cpu);
    Ok(DpResult {
        peer: aggregate(&peers),
        peers,
        flow,
        flows,
        cpu,
        system_cpu,
        sender_cpu,
        xdp: serde_json::json!(stats.xdp),
        rings: serde_json::json!(stats.queues.iter().map(|q| q.ring).collect::<Vec<_>>()),
        placement: placed,
    })
}

/// CPU seconds of each live thread of this process, by name (MPA_BENCH_THREADS=1): where a
/// run's CPU went.
pub fn print_thread_cpu() {
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
    for (name, secs) in rows.iter().filter(|r| r.1 > 0.0) {
        println!("thread {name:20} {secs:.2} s");
    }
}

pub fn gbit(octets: f64, seconds: f64) -> f64 {
    octets * 8.0 / seconds / 1e9
}

pub fn demo(r: &Run) -> Result<String> {
    let bed = bed(r)?;
    let t0 = Instant::now();
    let d = datapath_run(&bed, r)?;
    let secs = d.peer["transfer_seconds"]
        .as_f64()
        .unwrap_or(t0.elapsed().as_secs_f64());
    let octets = d.flow["ulpdu_octets"].as_f64().unwrap_or(0.0);
    let digest_ok = digests_match(&d.peers, &d.flows);
    println!("sender      : {}", d.peer);
    println!("datapath    : {}", d.flow);
    println!("xdp         : {}", d.xdp);
    println!("rings       : {}", d.rings);
    println!(
        "fpdus={} ulpdu_octets={} crc_errors={} marker_errors={} out_of_order={} sack_blocks={} digest_match={}",
        d.flow["fpdus"], d.flow["ulpdu_octets"], d.flow["crc_errors"], d.flow["marker_errors"],
        d.flow["out_of_order_segments"], d.flow["sack_blocks_sent"], digest_ok
    );
    if !digest_ok {
        bail!(
            "digests differ: sent {} received {}",
            d.peer["ulpdu_digest"],
            d.flow["ulpdu_digest"]
        );
    }
    if let Some(e) = d.flow["ended"]["mpa_error"].as_u64() {
        bail!("flow ended with MPA error {e}");
    }
    let dropped = if r.loss > 0 { bed.dropped()? } else { 0 };
    if r.loss > 0 {
        println!("bridge dropped {dropped} frames");
    }
    let impairment = bed.impair_stats();
    if let Some(s) = impairment {
        println!("impairment  : {s}");
    }
    println!(
        "datapath CPU: {:.2} s for {:.0} MiB (workers {:.2} s)",
        d.cpu,
        octets / (1 << 20) as f64,
        d.flow["worker_cpu_seconds"].as_f64().unwrap_or(0.0)
    );
    let g = gbit(octets, secs);
    let f = &d.flow;
    let n = |k: &str| f[k].as_u64().unwrap_or(0);
    let (direct, gathered, store) = (
        n("placed_direct"),
        n("placed_gathered"),
        n("placed_from_store"),
    );
    // Shares of the FPDUs that arrived out of order (placed ahead or from the store): placed
    // on arrival straight from their segment, and on arrival at all (also those gathered
    // from stored pieces once their last piece came).
    let ooo = direct + gathered + store;
    let share = |x: u64| (ooo > 0).then(|| 100.0 * x as f64 / ooo as f64);
    let (direct_pct, ahead_pct) = (share(direct), share(direct + gathered));
    if let Some((msgs, region)) = d.placement {
        println!(
            "placement   : {msgs} messages completed in order; region of {region} octets equals what the peer wrote; placed_direct={direct} placed_gathered={gathered} placed_from_store={store} placed_in_order={} located_rejected={} store_high_water={}",
            n("placed_in_order"), n("located_rejected"), n("store_high_water")
        );
    }
    if r.json {
        let v = serde_json::json!({
            "gbit_per_s": g,
            "seconds": secs,
            "ulpdu_octets": octets,
            "cpu_seconds": d.cpu,
            "op": format!("{:?}", r.op).to_lowercase(),
            "loss_percent": r.loss,
            "bridge_dropped": dropped,
            "impairment": impairment.map(|s| s.to_string()),
            "placed_direct": direct,
            "placed_from_store": store,
            "placed_direct_percent": direct_pct,
            "placed_gathered": gathered,
            "placed_ahead_percent": ahead_pct,
            "placement_checked": d.placement.map(|(m, o)| serde_json::json!({"messages": m, "region_octets": o})),
            "flow": d.flow,
        });
        println!("result: {v}");
    }
    Ok(match (d.placement, ahead_pct, direct_pct) {
        (Some(_), Some(a), Some(p)) => {
            format!("{g:.2} Gbit/s placed_ahead={a:.1}% (directly from one segment {p:.1}%)")
        }
        (Some(_), _, _) => format!("{g:.2} Gbit/s placed_ahead=n/a (nothing out of order)"),
        (None, _, _) => format!("{g:.2} Gbit/s"),
    })
}
