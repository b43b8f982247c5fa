//! `bw`: goodput and CPU per octet, the AF_XDP datapath against the blocking kernel-TCP
//! Responder (`mpa-peer listen`), same bed, same sender (`mpa-peer connect` in ns a), same
//! invocation; rounds alternate the two sides so that machine noise falls on both.
//!
//! Both sides do the same work: with `--op write|send` the datapath places every message into
//! a registered region / posted buffers and the region is compared octet for octet with what
//! the sender wrote; the kernel Responder reads every FPDU, checks it (CRC, markers) and
//! digests the ULPDUs. Every run checks the ULPDU digest end to end; a run that fails a check
//! fails the experiment. Goodput is ULPDU octets over the same sender's transfer time on both
//! sides (`transfer_seconds`). CPU: `bed::cpu`.

pub(crate) mod send;

use crate::bed::cpu::CpuUse;
pub(crate) use crate::bed::options::SenderSide;
use crate::bed::options::{messages, BedArgs, FramingArgs, Op, Run, TransferArgs};
use crate::bed::peer::{digests_match, kernel_run, PeerReport};
use crate::bed::sender_tcp::SenderTcp;
use crate::demo::{datapath_run, gbit};
use crate::report::document::{BwParams, BwRecord};
use crate::report::progress::Progress;
use crate::report::{Document, Receiver, Spread};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::fmt::Write as _;

/// `mpa-bench bw`'s options.
#[derive(Args, Clone, Debug)]
pub struct BwArgs {
    /// ULPDU sizes (DDP header included; 4096 or 4K), each at most 64768 (RFC 5044's largest
    /// ULPDU).
    #[arg(
        short = 's',
        long,
        value_delimiter = ',',
        default_values_t = [4096usize, 64512],
        value_parser = mpa_cli::size::<usize>
    )]
    pub(crate) sizes: Vec<usize>,
    /// Rounds; each runs every size on the kernel side, then on the datapath.
    #[arg(long, default_value_t = 3)]
    pub(crate) rounds: u32,
    #[command(flatten)]
    pub(crate) bed: BedArgs,
    #[command(flatten)]
    pub(crate) framing: FramingArgs,
    #[command(flatten)]
    pub(crate) transfer: TransferArgs,
    /// Print the one JSON document on stdout (the table goes to stderr).
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Who sends: `kernel` (default: `mpa-peer connect` toward the datapath or the kernel
    /// Responder), or `datapath`: the datapath sends RDMA Writes from a registered region to
    /// the kernel `mpa-peer listen`, against `mpa-peer connect` doing the same
    /// (docs/benchmarks.md, "bw").
    #[arg(long, value_enum, default_value = "kernel")]
    pub(crate) sender: SenderSide,
    /// Both receivers get MTU-sized segments, as from a NIC: the kernel sender's veth
    /// without TSO (attaching any XDP program to a veth turns its peer's TSO off, so the
    /// datapath never sees 64 KB GSO packets while the kernel Responder does) and the kernel
    /// receiver's veth with GRO on (as NIC drivers coalesce). A diagnostic of where the gap
    /// lies, not the default comparison. Direct veth bed only.
    #[arg(long)]
    pub(crate) wire_segments: bool,
}

impl BwArgs {
    /// The transfer of one size.
    pub(crate) fn run(&self, size: usize) -> Run {
        Run {
            size,
            bed: self.bed.clone(),
            framing: self.framing,
            transfer: self.transfer.clone(),
            json: false,
        }
    }

    /// The document's parameters.
    pub(crate) fn params(&self) -> BwParams {
        BwParams {
            sizes: self.sizes.clone(),
            bytes: self.transfer.bytes,
            duration_s: self.transfer.duration.map(|d| d.as_secs_f64()),
            rounds: self.rounds,
            mtu: self.bed.mtu,
            loss_percent: self.bed.loss,
            queues: self.bed.queues,
            framing: self.framing.framing(),
            impair: self.bed.impair.as_ref().map(|i| format!("{i:?}")),
            connections: self.transfer.connections,
            op: self.transfer.op,
            aligned: self
                .run(self.sizes.first().copied().unwrap_or(4096))
                .aligned(),
            iface: self.bed.nic.iface.clone(),
            peer: self.bed.nic.peer,
            split_cpus: self.bed.split_cpus,
            sender_cc: self.transfer.sender_cc.clone(),
            sender: self.sender,
            wire_segments: self.wire_segments,
        }
    }
}

/// One side's run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct BwSample {
    pub(crate) octets: f64,
    pub(crate) messages: f64,
    pub(crate) seconds: f64,
    pub(crate) cpu: CpuUse,
}

impl BwSample {
    pub(crate) fn gbit_s(&self) -> f64 {
        gbit(self.octets, self.seconds.max(1e-9))
    }
}

/// One row: a receiver and a size over all rounds.
#[derive(Clone, Debug)]
pub(crate) struct BwRow {
    pub(crate) receiver: Receiver,
    pub(crate) size: usize,
    pub(crate) samples: Vec<BwSample>,
    /// Share of the out-of-order FPDUs placed directly (datapath under loss), per round.
    pub(crate) placed_direct_percent: Vec<f64>,
    /// What the Linux sender's TCP did, per round (not on an external bed).
    pub(crate) sender: Vec<SenderTcp>,
}

impl BwRow {
    fn spread(&self, f: impl Fn(&BwSample) -> f64) -> Option<Spread> {
        Spread::of(self.samples.iter().map(f).collect())
    }

    /// The row's result in the document (docs/benchmarks.md, "JSON"), without the pairing
    /// with the kernel's rounds ([`paired_goodput`]).
    pub(crate) fn record(&self) -> BwRecord {
        let nan = f64::NAN;
        let g = self.spread(BwSample::gbit_s);
        let per = |f: &dyn Fn(&BwSample) -> f64| {
            self.spread(|s| CpuUse::ns_per_octet(f(s), s.octets))
                .map_or(nan, |s| s.median)
        };
        let median = |v: Vec<f64>| Spread::of(v).map(|s| s.median);
        BwRecord {
            receiver: self.receiver,
            size: self.size,
            rounds: self.samples.len(),
            gbit_s: g.map_or(nan, |s| s.median),
            gbit_s_min: g.map_or(nan, |s| s.min),
            gbit_s_max: g.map_or(nan, |s| s.max),
            gbit_s_mean: mean(self.samples.iter().map(BwSample::gbit_s)),
            msg_per_s: self
                .spread(|s| s.messages / s.seconds.max(1e-9))
                .map_or(nan, |s| s.median),
            messages: self.samples.first().map_or(0.0, |s| s.messages),
            octets: self.samples.first().map_or(0.0, |s| s.octets),
            system_cpu_ns_per_octet: per(&|s| s.cpu.system),
            process_cpu_ns_per_octet: per(&|s| s.cpu.receiver),
            sender_cpu_ns_per_octet: per(&|s| s.cpu.sender),
            placed_direct_percent: median(self.placed_direct_percent.clone()),
            sender_retrans_percent: median(
                self.sender.iter().map(SenderTcp::retrans_percent).collect(),
            ),
            sender_rtos: median(self.sender.iter().map(|t| t.rtos as f64).collect()),
            round_sender_tcp: self.sender.clone(),
            round_gbit_s: self.samples.iter().map(BwSample::gbit_s).collect(),
            paired_goodput_ratio: None,
            paired_goodput_ratio_min: None,
            paired_goodput_ratio_max: None,
        }
    }
}

/// The transfer time both sides are measured by: the sender's, from its first ULPDU until the
/// receiver closed after the last (`mpa-peer connect`'s `transfer_seconds`), so that a SYN or
/// MPA Request lost under loss (a retransmission timeout before any data) counts on neither.
pub(crate) fn transfer_seconds(sender: &PeerReport) -> f64 {
    sender.transfer_seconds.unwrap_or(sender.seconds)
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (n, sum) = v.fold((0u32, 0.0), |(n, s), x| (n + 1, s + x));
    if n == 0 {
        f64::NAN
    } else {
        sum / f64::from(n)
    }
}

/// The perftest-style table of `rows`, then the ratio per size.
pub(crate) fn table(rows: &[BwRow]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:9} {:>6} {:>10} {:>6} {:>9} {:>9} {:>17} {:>10} {:>10} {:>10}",
        "side",
        "bytes",
        "iterations",
        "rounds",
        "peak",
        "average",
        "median (min–max)",
        "Mmsg/s",
        "sys ns/B",
        "proc ns/B"
    );
    for r in rows {
        let v = r.record();
        let _ = writeln!(
            s,
            "{:9} {:>6} {:>10} {:>6} {:>9.2} {:>9.2} {:>6.2} ({:.2}–{:.2}) {:>10.3} {:>10.3} {:>10.3}",
            r.receiver.key(),
            r.size,
            v.messages as u64,
            r.samples.len(),
            v.gbit_s_max,
            v.gbit_s_mean,
            v.gbit_s,
            v.gbit_s_min,
            v.gbit_s_max,
            v.msg_per_s / 1e6,
            v.system_cpu_ns_per_octet,
            v.process_cpu_ns_per_octet,
        );
    }
    let _ = writeln!(
        s,
        "(goodput in Gbit/s of ULPDU octets; sys: whole-system CPU per octet incl. softirq and the \
         sender; proc: the receiver process)"
    );
    for r in rows.iter().filter(|r| !r.sender.is_empty()) {
        let v = r.record();
        let _ = writeln!(
            s,
            "sender TCP against {} at {:>6} B (median of rounds): {:.1} % of segments \
             retransmitted, {} RTOs",
            r.receiver.key(),
            r.size,
            v.sender_retrans_percent.unwrap_or(f64::NAN),
            v.sender_rtos.unwrap_or(f64::NAN),
        );
    }
    for d in rows.iter().filter(|r| r.receiver == Receiver::Datapath) {
        let Some(k) = rows
            .iter()
            .find(|k| k.receiver == Receiver::Kernel && k.size == d.size)
        else {
            continue;
        };
        let (dv, kv) = (d.record(), k.record());
        let _ = write!(
            s,
            "datapath / kernel at {:>6} B: goodput {:.2}x, whole-system CPU per octet {:.2}x",
            d.size,
            dv.gbit_s / kv.gbit_s,
            dv.system_cpu_ns_per_octet / kv.system_cpu_ns_per_octet
        );
        match paired_goodput(d, k) {
            Some(p) if d.samples.len() > 1 => {
                let _ = writeln!(
                    s,
                    "; paired by round: goodput {:.2}x ({:.2}–{:.2})",
                    p.median, p.min, p.max
                );
            }
            _ => s.push('\n'),
        }
    }
    s
}

/// The datapath/kernel goodput ratio of each round (both sides ran back to back in it),
/// their median and range: under loss single rounds of either side swing 2× or more between
/// rounds (the sender's recovery, this VM's speed), and a ratio of the two medians mixes
/// rounds that did not run side by side.
pub(crate) fn paired_goodput(d: &BwRow, k: &BwRow) -> Option<Spread> {
    if d.samples.len() != k.samples.len() {
        return None;
    }
    Spread::of(
        d.samples
            .iter()
            .zip(&k.samples)
            .map(|(d, k)| d.gbit_s() / k.gbit_s().max(1e-12))
            .collect(),
    )
}

/// Runs the experiment and returns its document (the caller prints it).
pub(crate) fn bw(a: &BwArgs) -> Result<(Document, Vec<BwRow>)> {
    if a.sizes.is_empty() || a.rounds == 0 {
        mpa_cli::usage!("--sizes and --rounds must not be empty / 0");
    }
    a.transfer.check()?;
    let (header, max) = (
        mpa::wire::ddp::TAGGED_HEADER_LEN,
        mpa::wire::fpdu::MAX_ULPDU,
    );
    if let Some(s) = a.sizes.iter().find(|&&s| !(header + 1..=max).contains(&s)) {
        mpa_cli::usage!(
            "--sizes {s}: a Write's ULPDU holds its {header}-octet DDP header and at least one \
             octet of payload, and is at most {max} octets (RFC 5044 §3)"
        );
    }
    let bed = a.bed.bed()?;
    if a.wire_segments {
        crate::bed::wire_segments(&bed)?;
    }
    let mut rows: Vec<BwRow> = Vec::new();
    for &size in &a.sizes {
        for receiver in [Receiver::Kernel, Receiver::Datapath] {
            rows.push(BwRow {
                receiver,
                size,
                samples: Vec::new(),
                placed_direct_percent: Vec::new(),
                sender: Vec::new(),
            });
        }
    }
    let progress = Progress::new("bw", u64::from(a.rounds) * a.sizes.len() as u64 * 2);
    for round in 0..a.rounds {
        for (i, &size) in a.sizes.iter().enumerate() {
            let r = a.run(size);
            progress.running(format!(
                "round {} of {}: kernel, {size} B",
                round + 1,
                a.rounds
            ));
            let before = sender_counters(&bed);
            let k = kernel_run(&bed, &r).with_context(|| format!("kernel, {size} B"))?;
            let k_sender = sender_since(&bed, before);
            if !digests_match(&k.senders, &k.receivers) {
                bail!(
                    "kernel, {size} B: digests differ: sent {} received {}",
                    k.sent.ulpdu_digest,
                    k.got.ulpdu_digest
                );
            }
            let ks = BwSample {
                octets: k.got.ulpdu_bytes as f64,
                messages: sent_messages(&r, &k.sent),
                seconds: transfer_seconds(&k.sent),
                cpu: k.cpu,
            };
            progress.done(format!("kernel {size} B: {:.2} Gbit/s", ks.gbit_s()));
            rows[2 * i].samples.push(ks);
            rows[2 * i].sender.extend(k_sender);
            progress.running(format!(
                "round {} of {}: datapath, {size} B",
                round + 1,
                a.rounds
            ));
            let before = sender_counters(&bed);
            let d = datapath_run(&bed, &r).with_context(|| format!("datapath, {size} B"))?;
            let d_sender = sender_since(&bed, before);
            if !digests_match(&d.peers, &d.flows) {
                bail!(
                    "datapath, {size} B: digests differ: sent {} received {}",
                    d.peer.ulpdu_digest,
                    d.flow.ulpdu_digest.as_deref().unwrap_or("none")
                );
            }
            let rx = &d.flow.rx;
            let ds = BwSample {
                octets: rx.ulpdu_octets as f64,
                messages: sent_messages(&r, &d.peer),
                seconds: transfer_seconds(&d.peer),
                cpu: CpuUse {
                    system: d.system_cpu,
                    receiver: d.cpu,
                    sender: d.sender_cpu,
                },
            };
            // Out-of-order FPDUs placed on arrival (from their segment, or gathered with
            // stored pieces), of all that arrived out of order.
            let ahead = (rx.placed_direct + rx.placed_gathered) as f64;
            let store = rx.placed_from_store as f64;
            if ahead + store > 0.0 {
                rows[2 * i + 1]
                    .placed_direct_percent
                    .push(100.0 * ahead / (ahead + store));
            }
            progress.done(format!("datapath {size} B: {:.2} Gbit/s", ds.gbit_s()));
            progress.println(format!(
                "round {}, {size} B: kernel {:.2} Gbit/s{}, datapath {:.2} Gbit/s{}",
                round + 1,
                ks.gbit_s(),
                sender_note(k_sender.as_ref()),
                ds.gbit_s(),
                sender_note(d_sender.as_ref()),
            ));
            rows[2 * i + 1].samples.push(ds);
            rows[2 * i + 1].sender.extend(d_sender);
        }
    }
    if let Some(s) = bed.impair_stats() {
        progress.println(format!("impairment: {s}"));
    }
    drop(progress);
    let results = rows
        .iter()
        .map(|r| {
            let mut v = r.record();
            let kernel = rows
                .iter()
                .find(|k| k.receiver == Receiver::Kernel && k.size == r.size);
            if let (true, Some(p)) = (
                r.receiver == Receiver::Datapath,
                kernel.and_then(|k| paired_goodput(r, k)),
            ) {
                v.paired_goodput_ratio = Some(p.median);
                v.paired_goodput_ratio_min = Some(p.min);
                v.paired_goodput_ratio_max = Some(p.max);
            }
            v
        })
        .collect();
    let doc = Document::Bw {
        params: a.params(),
        results,
    };
    Ok((doc, rows))
}

/// The messages the senders of a run sent (their reports, summed), or what `--bytes` makes
/// them send when a report does not say.
fn sent_messages(r: &Run, sent: &PeerReport) -> f64 {
    sent.messages
        .unwrap_or(messages(r) * u64::from(r.transfer.connections)) as f64
}

/// The sender namespace's TCP counters now (`None` on an external bed, or when they cannot
/// be read: the run goes on without them).
fn sender_counters(bed: &mpa_testbed::TestBed) -> Option<SenderTcp> {
    if bed.external.is_some() {
        return None;
    }
    SenderTcp::read(&bed.ns_a)
        .map_err(|e| tracing::warn!("sender TCP counters: {e:#}"))
        .ok()
}

/// What the sender's TCP did since `before`.
fn sender_since(bed: &mpa_testbed::TestBed, before: Option<SenderTcp>) -> Option<SenderTcp> {
    Some(sender_counters(bed)?.since(&before?))
}

/// ` (sender: 12.3 % retransmitted, 2 RTOs, 5 loss probes)`, or nothing.
fn sender_note(t: Option<&SenderTcp>) -> String {
    t.map_or(String::new(), |t| {
        format!(
            " (sender: {:.1} % retransmitted, {} RTOs, {} loss probes, {} SACK recoveries)",
            t.retrans_percent(),
            t.rtos,
            t.loss_probes,
            t.sack_recoveries
        )
    })
}

/// `mpa-bench bw`: the table (stdout, or stderr with `--json`), the document with `--json`.
pub fn run_cli(a: &BwArgs) -> Result<()> {
    let (doc, rows) = match a.sender {
        SenderSide::Kernel => bw(a)?,
        SenderSide::Datapath => crate::bw::send::bw_send(a)?,
    };
    let head = format!(
        "{}: mtu {} loss {}% queues {}; {} per run, {}; {}; sender {}{}{}",
        match (&a.bed.nic.iface, a.bed.nic.peer) {
            (Some(i), Some(p)) => format!("interface {i}, peer {p}"),
            _ => "bed".to_string(),
        },
        a.bed.mtu,
        a.bed.loss,
        a.bed.queues,
        match a.transfer.duration {
            Some(d) => format!("{:.1} s", d.as_secs_f64()),
            None => format!("{} MiB", a.transfer.bytes >> 20),
        },
        a.framing.framing().key(),
        match a.transfer.op {
            Op::Write => "RDMA Writes placed into a region (datapath, checked) / digested (kernel)",
            Op::Send => "Sends placed into posted buffers (datapath, checked) / digested (kernel)",
            Op::Count => "payloads counted and digested, not placed",
        },
        if a.run(a.sizes[0]).aligned() {
            "aligned (exact fill)"
        } else {
            "unaligned"
        },
        a.transfer
            .sender_cc
            .as_ref()
            .map_or(String::new(), |c| format!(", TCP congestion control {c}")),
        if a.bed.split_cpus {
            "; split CPUs (sender on 0, receiver on 1)"
        } else {
            ""
        },
    );
    let head = match a.sender {
        SenderSide::Kernel => head,
        SenderSide::Datapath => format!(
            "bed: mtu {} loss {}%; {} MiB per run, {}; SENDERS compared: the datapath (RDMA \
             Writes from a registered region, FPDU-aligned) vs mpa-peer connect (kernel TCP); \
             receiver: kernel mpa-peer listen placing into its region (checked); dp→dp: \
             datapath to a second datapath in ns a, the receiving consumer's region checked; \
             proc = this process (sending consumer and datapaths) or mpa-peer connect",
            a.bed.mtu,
            a.bed.loss,
            a.transfer.bytes >> 20,
            a.framing.framing().key()
        ),
    };
    let text = format!("{head}\n{}", table(&rows));
    crate::report::text(a.json, &text);
    if a.json {
        crate::report::print(&doc)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(gbit: f64, sys: f64, proc_: f64) -> BwSample {
        // 1 GB in `8 / gbit` seconds.
        BwSample {
            octets: 1e9,
            messages: 1e9 / 4096.0,
            seconds: 8.0 / gbit,
            cpu: CpuUse {
                system: sys,
                receiver: proc_,
                sender: 0.5,
            },
        }
    }

    #[test]
    fn row_record_has_median_spread_and_cpu_per_octet() {
        let row = BwRow {
            receiver: Receiver::Datapath,
            size: 4096,
            samples: vec![
                sample(2.0, 3.0, 1.0),
                sample(4.0, 1.0, 2.0),
                sample(3.0, 2.0, 3.0),
            ],
            placed_direct_percent: vec![99.0, 98.0, 97.0],
            sender: vec![],
        };
        let v = row.record();
        assert!((v.gbit_s - 3.0).abs() < 1e-9);
        assert!((v.gbit_s_min - 2.0).abs() < 1e-9);
        assert!((v.gbit_s_max - 4.0).abs() < 1e-9);
        assert!((v.gbit_s_mean - 3.0).abs() < 1e-9);
        // Median of 3, 1, 2 s per 1e9 octets: 2 ns per octet.
        assert!((v.system_cpu_ns_per_octet - 2.0).abs() < 1e-9);
        assert!((v.process_cpu_ns_per_octet - 2.0).abs() < 1e-9);
        assert!((v.sender_cpu_ns_per_octet - 0.5).abs() < 1e-9);
        assert_eq!(v.placed_direct_percent, Some(98.0));
        assert_eq!(v.rounds, 3);
        let a = BwArgs {
            sizes: vec![4096],
            transfer: TransferArgs {
                duration: None,
                interval: None,
                bytes: 1 << 20,
                op: Op::Write,
                region_bytes: 16 << 20,
                align: crate::bed::options::Align::Auto,
                connections: 1,
                rcv_buf: None,
                ooo_ack_every: None,
                spin_us: 0,
                sender_cc: None,
            },
            rounds: 3,
            bed: BedArgs::default(),
            framing: FramingArgs::default(),
            json: true,
            sender: SenderSide::Kernel,
            wire_segments: false,
        };
        let doc = Document::Bw {
            params: a.params(),
            results: vec![v],
        };
        let json = serde_json::to_value(&doc).unwrap();
        crate::report::check_shape(&json).unwrap();
        assert_eq!(json["params"]["framing"], "markers+crc");
        assert_eq!(json["params"]["loss_percent"], 0);
        assert_eq!(json["results"][0]["receiver"], "datapath");
    }

    #[test]
    fn paired_ratio_pairs_rounds_not_medians() {
        let row = |receiver, g: &[f64]| BwRow {
            receiver,
            size: 4096,
            samples: g.iter().map(|&g| sample(g, 1.0, 1.0)).collect(),
            placed_direct_percent: vec![],
            sender: vec![],
        };
        // The kernel swings between rounds; the datapath is 2x, 1.5x and 1x of it in turn.
        let k = row(Receiver::Kernel, &[1.0, 4.0, 2.0]);
        let d = row(Receiver::Datapath, &[2.0, 6.0, 2.0]);
        let p = paired_goodput(&d, &k).unwrap();
        assert!((p.median - 1.5).abs() < 1e-9, "{p:?}");
        assert!(
            (p.min - 1.0).abs() < 1e-9 && (p.max - 2.0).abs() < 1e-9,
            "{p:?}"
        );
        // The ratio of the medians (2.0 / 2.0) would say 1.0x.
        let t = table(&[k.clone(), d.clone()]);
        assert!(t.contains("goodput 1.00x"), "{t}");
        assert!(
            t.contains("paired by round: goodput 1.50x (1.00–2.00)"),
            "{t}"
        );
        // Rounds missing on one side: no pairing.
        let short = row(Receiver::Datapath, &[2.0, 6.0]);
        assert!(paired_goodput(&short, &k).is_none());
    }

    #[test]
    fn table_has_both_sides_and_the_ratio() {
        let rows = vec![
            BwRow {
                receiver: Receiver::Kernel,
                size: 4096,
                samples: vec![sample(2.0, 4.0, 1.0)],
                placed_direct_percent: vec![],
                sender: vec![],
            },
            BwRow {
                receiver: Receiver::Datapath,
                size: 4096,
                samples: vec![sample(3.0, 2.0, 1.0)],
                placed_direct_percent: vec![],
                sender: vec![],
            },
        ];
        let t = table(&rows);
        assert!(
            t.contains("goodput 1.50x, whole-system CPU per octet 0.50x"),
            "{t}"
        );
        let row = |who: &str| t.lines().find(|l| l.starts_with(who)).unwrap().to_string();
        let k: Vec<String> = row("kernel").split_whitespace().map(String::from).collect();
        // receiver, bytes, iterations, rounds, peak, average, median (min–max), Mmsg/s, ns/B.
        assert_eq!(
            &k[..6],
            ["kernel", "4096", "244140", "1", "2.00", "2.00"],
            "{t}"
        );
        assert_eq!(&k[9..], ["4.000", "1.000"], "{t}");
        assert!(row("datapath").contains(" 3.00 (3.00–3.00) "), "{t}");
    }
}
