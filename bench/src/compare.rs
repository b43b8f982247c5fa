//! `compare`: goodput and CPU per octet, the datapath against the blocking kernel-TCP
//! Responder, same bed and sender, alternating.

use crate::demo::{datapath_run, gbit};
use crate::options::{bed, Op, Run};
use crate::peer::kernel_run;
use anyhow::{bail, Result};

/// Runs `compare` and prints its table.
pub fn compare(r: &Run) -> Result<()> {
    let bed = bed(r)?;
    // Alternate the two receivers so that machine noise hits both.
    let mut rows = Vec::new();
    for round in 0..2 {
        let k = kernel_run(&bed, r)?;
        let kernel_octets = k.1["ulpdu_bytes"].as_f64().unwrap_or(0.0);
        if k.0["ulpdu_digest"] != k.1["ulpdu_digest"] {
            bail!("kernel Responder digests differ");
        }
        let kg = gbit(kernel_octets, k.1["seconds"].as_f64().unwrap_or(1.0));
        rows.push((
            "kernel-tcp mpa-peer listen",
            round,
            kg,
            k.2 / kernel_octets * 1e9,
        ));
        let d = datapath_run(&bed, r)?;
        if d.flow["ulpdu_digest"] != d.peer["ulpdu_digest"] {
            bail!("datapath digests differ");
        }
        let octets = d.flow["ulpdu_octets"].as_f64().unwrap_or(0.0);
        let dg = gbit(octets, d.peer["seconds"].as_f64().unwrap_or(1.0));
        rows.push(("mpa-datapath (AF_XDP)", round, dg, d.cpu / octets * 1e9));
        if r.loss > 0 {
            let n = |k: &str| d.flow[k].as_u64().unwrap_or(0);
            let (direct, store) = (n("placed_direct"), n("placed_from_store"));
            println!(
                "round {round}: datapath placed {direct} out-of-order FPDUs directly, {store} from the store"
            );
        }
    }
    println!(
        "bed: mtu {} loss {}% queues {}; {} MiB as {} B ULPDUs, {}; sender {}; datapath: {}",
        r.mtu,
        r.loss,
        r.queues,
        r.bytes >> 20,
        r.size,
        match (r.markers(), r.plain) {
            (true, _) => "markers + CRC",
            (false, false) => "CRC, no markers",
            (false, true) => "no markers, no CRC",
        },
        if r.aligned() {
            "aligned (exact fill)"
        } else {
            "unaligned"
        },
        match r.op {
            Op::Write => "RDMA Writes placed into a region, checked",
            Op::Send => "Sends placed into posted buffers, checked",
            Op::Count => "payloads counted and digested, not placed",
        }
    );
    println!(
        "{:28} {:>5} {:>12} {:>16}",
        "receiver", "round", "Gbit/s", "CPU ns/octet"
    );
    for (name, round, g, cpu) in &rows {
        println!("{name:28} {round:>5} {g:>12.2} {cpu:>16.3}");
    }
    let avg = |n: &str| {
        let v: Vec<f64> = rows.iter().filter(|r| r.0 == n).map(|r| r.2).collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    let ratio = avg("mpa-datapath (AF_XDP)") / avg("kernel-tcp mpa-peer listen");
    println!("datapath / kernel goodput: {ratio:.2}x");
    Ok(())
}
