//! `demo`: one transfer through the datapath, checked byte for byte (and, when placing, the
//! region compared with what the peer wrote).

use crate::cpu::SystemCpu;
use crate::datapath::{
    accept_and_hand_over, start_datapath, stats, temp_path, DatapathOptions, HandedOver, Responder,
};
use crate::options::{bed, Op, Run, PD, PORT};
use crate::peer::{cpu_seconds, sender};
use crate::placement::Placement;
use anyhow::{anyhow, bail, Result};
use mpa_testbed::{run_in_netns, TestBed};
use serde_json::Value;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

/// What one datapath run measured.
pub struct DpResult {
    /// The sender's report.
    pub peer: Value,
    /// The flow's final counters in the datapath.
    pub flow: Value,
    /// CPU seconds of this process (datapath, listener, consumer) during the transfer.
    pub cpu: f64,
    /// Whole-system busy CPU seconds during the transfer (`/proc/stat`).
    pub system_cpu: f64,
    /// CPU seconds of the sender process (`mpa-peer connect`).
    pub sender_cpu: f64,
    /// The XDP program's counters.
    pub xdp: Value,
    /// Placement check: (messages completed, region octets compared), when placing.
    pub placement: Option<(u64, u64)>,
}

/// One transfer through the datapath on `bed`: the datapath and the hand-over listener in ns
/// b, `mpa-peer connect` in ns a.
pub fn datapath_run(bed: &TestBed, r: &Run) -> Result<DpResult> {
    let socket = temp_path("bench.sock");
    let opts = DatapathOptions {
        queues: r.queues,
        ..DatapathOptions::default()
    };
    let dp = start_datapath(bed, &socket, &opts)?;
    let placement = match r.op {
        Op::Count => None,
        _ => Some(Placement::prepare(&socket, r)?),
    };
    let markers = r.markers();
    let crc = !r.plain;
    let responder = Responder {
        reply_private_data: placement
            .as_ref()
            .map(|p| p.ad.emit().to_vec())
            .unwrap_or_default(),
        placement: mpa_control::Placement {
            pd: placement.as_ref().map(|_| PD),
            aligned_sender: r.aligned() && !markers && crc,
        },
        wait: Duration::from_secs(120),
        ..Responder::framing(markers, crc)
    };
    let addr = SocketAddr::new(bed.addr_b(false), PORT);
    let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr))??;
    let (ns_b, sock_path) = (bed.ns_b.clone(), socket.clone());
    // The hand-over listener: one connection (not scoped: a failed sender must not wait for it).
    let setup =
        std::thread::spawn(move || accept_and_hand_over(&ns_b, &sock_path, &listener, &responder));
    let system = SystemCpu::start()?;
    let cpu0 = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_SELF);
    let children0 = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_CHILDREN);
    let peer = sender(bed, r)?;
    let sender_cpu = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_CHILDREN) - children0;
    let HandedOver {
        flow_id,
        mut dpc,
        frozen,
        ..
    } = setup
        .join()
        .map_err(|_| anyhow!("setup thread panicked"))??;
    let gone = dpc.next_notification()?;
    let cpu = cpu_seconds(nix::sys::resource::UsageWho::RUSAGE_SELF) - cpu0;
    let system_cpu = system.seconds()?;
    if std::env::var_os("MPA_BENCH_THREADS").is_some() {
        print_thread_cpu();
    }
    drop(frozen);
    let stats = stats(&mut dpc)?;
    let report = stats
        .ended_flow(flow_id)
        .cloned()
        .ok_or_else(|| anyhow!("flow {flow_id} missing from stats ({gone:?})"))?;
    // The workers' own CPU (one queue: the flow's worker), apart from the control thread and
    // the consumer that run in this process too.
    let worker_cpu: f64 = stats.queues.iter().map(|q| q.cpu_seconds).sum();
    let clean = report
        .ended
        .as_ref()
        .is_none_or(|e| e.terminate.is_none() && e.mpa_error.is_none());
    let placement = match placement {
        Some(p) if clean => Some(p.verify(r)?),
        Some(_) => bail!("the flow ended with an error: {:?}", report.ended),
        None => None,
    };
    let mut flow = serde_json::to_value(&report)?;
    flow["worker_cpu_seconds"] = serde_json::json!(worker_cpu);
    dp.stop();
    Ok(DpResult {
        peer,
        flow,
        cpu,
        system_cpu,
        sender_cpu,
        xdp: serde_json::json!(stats.xdp),
        placement,
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
    let secs = d.peer["seconds"]
        .as_f64()
        .unwrap_or(t0.elapsed().as_secs_f64());
    let octets = d.flow["ulpdu_octets"].as_f64().unwrap_or(0.0);
    let digest_ok = d.flow["ulpdu_digest"] == d.peer["ulpdu_digest"];
    println!("sender      : {}", d.peer);
    println!("datapath    : {}", d.flow);
    println!("xdp         : {}", d.xdp);
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
    println!(
        "datapath CPU: {:.2} s for {:.0} MiB (workers {:.2} s)",
        d.cpu,
        octets / (1 << 20) as f64,
        d.flow["worker_cpu_seconds"].as_f64().unwrap_or(0.0)
    );
    let g = gbit(octets, secs);
    let f = &d.flow;
    let n = |k: &str| f[k].as_u64().unwrap_or(0);
    let (direct, store) = (n("placed_direct"), n("placed_from_store"));
    // Share of the FPDUs that arrived out of order (placed ahead or from the store) that were
    // placed directly.
    let direct_pct = if direct + store > 0 {
        Some(100.0 * direct as f64 / (direct + store) as f64)
    } else {
        None
    };
    if let Some((msgs, region)) = d.placement {
        println!(
            "placement   : {msgs} messages completed in order; region of {region} octets equals what the peer wrote; placed_direct={direct} placed_from_store={store} placed_in_order={} located_rejected={} store_high_water={}",
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
            "placed_direct": direct,
            "placed_from_store": store,
            "placed_direct_percent": direct_pct,
            "placement_checked": d.placement.map(|(m, o)| serde_json::json!({"messages": m, "region_octets": o})),
            "flow": d.flow,
        });
        println!("result: {v}");
    }
    Ok(match (d.placement, direct_pct) {
        (Some(_), Some(p)) => format!("{g:.2} Gbit/s placed_direct={p:.1}%"),
        (Some(_), None) => format!("{g:.2} Gbit/s placed_direct=n/a (nothing out of order)"),
        (None, _) => format!("{g:.2} Gbit/s"),
    })
}
