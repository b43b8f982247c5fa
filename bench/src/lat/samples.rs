//! What a latency run measures and how it is shown: send stamps, the samples of one side,
//! the rows of the table, `.hgrm` files and each row's JSON.

use crate::bed::options::DatapathMode;
use crate::report::document::LatRecord;
use crate::report::Receiver;
use hdrhistogram::Histogram;
use std::fmt::Write as _;

/// Octets of the send timestamp at the start of each payload.
pub(crate) const STAMP_LEN: usize = 8;

/// The send timestamp at the start of a payload (u64 LE), if it is long enough.
pub(crate) fn decode_stamp(payload: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(
        payload.get(..STAMP_LEN)?.try_into().ok()?,
    ))
}

/// CLOCK_MONOTONIC in nanoseconds, the sender's clock.
pub(crate) fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// The receivers: kernel TCP, and the datapath in each of its modes (docs/latency.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Kernel,
    /// Worker threads that sleep in poll() when idle; the consumer posts over the control
    /// socket and waits on the completion ring's eventfd.
    Datapath,
    /// Worker threads that keep polling `--spin-us` after their last frame.
    DatapathSpin,
    /// No worker thread: the measuring thread turns the queue itself
    /// (`mpa_datapath::worker::QueueDriver`).
    RunToCompletion,
    /// The same, sleeping in the kernel whenever a poll finds nothing.
    RunToCompletionSleeping,
    /// The C ping-pong through libmpaxdp, its own process; worker threads sleeping when idle.
    CApi,
    /// Its Rust twin, the same way.
    RustApp,
}

impl Side {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Side::Kernel => "kernel-tcp MpaStream",
            Side::Datapath => "datapath, sleeping",
            Side::DatapathSpin => "datapath, spinning",
            Side::RunToCompletion => "datapath, run-to-compl.",
            Side::RunToCompletionSleeping => "datapath, rtc sleeping",
            Side::CApi => "datapath, C example",
            Side::RustApp => "datapath, Rust example",
        }
    }

    /// For file names and JSON.
    pub(crate) fn key(self) -> &'static str {
        self.receiver().key()
    }

    /// The receiver a document names.
    pub(crate) fn receiver(self) -> Receiver {
        match self {
            Side::Kernel => Receiver::Kernel,
            Side::Datapath => Receiver::Datapath,
            Side::DatapathSpin => Receiver::DatapathSpin,
            Side::RunToCompletion => Receiver::RunToCompletion,
            Side::RunToCompletionSleeping => Receiver::RunToCompletionSleeping,
            Side::CApi => Receiver::CApi,
            Side::RustApp => Receiver::RustApp,
        }
    }

    /// The side of a datapath mode.
    pub(crate) fn of(mode: DatapathMode) -> Side {
        match mode {
            DatapathMode::Sleep => Side::Datapath,
            DatapathMode::Spin => Side::DatapathSpin,
            DatapathMode::Rtc => Side::RunToCompletion,
            DatapathMode::RtcSleep => Side::RunToCompletionSleeping,
            DatapathMode::CApi => Side::CApi,
            DatapathMode::RustApp => Side::RustApp,
        }
    }
}

/// One-way latencies in ns, and the stamps that could not be used.
pub(crate) struct Samples {
    pub(crate) hist: Histogram<u64>,
    /// Missing, zero, in the future, or older than a minute.
    pub(crate) bad: u64,
}

impl Default for Samples {
    fn default() -> Self {
        Samples {
            // 1 ns .. 1 h, 3 significant digits.
            hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds"),
            bad: 0,
        }
    }
}

impl Samples {
    /// Records `now - ts` (ns).
    pub(crate) fn record(&mut self, ts: Option<u64>, now: u64) {
        match ts {
            Some(ts) if ts > 0 && ts <= now && now - ts < 60_000_000_000 => {
                self.hist.saturating_record((now - ts).max(1))
            }
            _ => self.bad += 1,
        }
    }

    /// Records a latency already computed (ns): below 0 (the clocks' error was larger than
    /// the latency) or a minute and above is a bad stamp, as is `None` (no stamp).
    pub(crate) fn record_latency(&mut self, ns: Option<i128>) {
        match ns {
            Some(ns) if (0..60_000_000_000).contains(&ns) => {
                self.hist.saturating_record((ns as u64).max(1))
            }
            _ => self.bad += 1,
        }
    }

    pub(crate) fn add(&mut self, o: &Samples) {
        self.hist.add(&o.hist).expect("same bounds");
        self.bad += o.bad;
    }
}

/// What a receiver gathers during a run. On one host's clock, the samples themselves; with
/// the peer host's clock measured, each message's stamp (the peer's clock) and receipt (ours)
/// until the offset measured after the run is known and every sample can be corrected
/// (docs/latency.md, "Two hosts"). At most the run's expected number of messages is kept;
/// more are counted as bad stamps.
pub(crate) enum Receipts {
    Direct(Samples),
    Deferred {
        /// (stamp, receipt), ns.
        pairs: Vec<(u64, u64)>,
        /// Messages expected: stamps past them are not kept.
        limit: u64,
        /// Messages without a stamp, or past the limit.
        bad: u64,
    },
}

impl Receipts {
    /// `deferred` when the sender's clock is another host's; `expected` messages.
    pub(crate) fn new(deferred: bool, expected: u64) -> Receipts {
        if !deferred {
            return Receipts::Direct(Samples::default());
        }
        Receipts::Deferred {
            pairs: Vec::with_capacity(expected.min(1 << 20) as usize),
            limit: expected,
            bad: 0,
        }
    }

    /// A message stamped `ts` (`None`: no stamp) received at `now`.
    pub(crate) fn record(&mut self, ts: Option<u64>, now: u64) {
        match self {
            Receipts::Direct(s) => s.record(ts, now),
            Receipts::Deferred { pairs, limit, bad } => match ts {
                Some(ts) if ts > 0 && (pairs.len() as u64) + *bad < *limit => pairs.push((ts, now)),
                _ => *bad += 1,
            },
        }
    }

    /// Messages recorded, samples and bad stamps.
    pub(crate) fn count(&self) -> u64 {
        match self {
            Receipts::Direct(s) => s.hist.len() + s.bad,
            Receipts::Deferred { pairs, bad, .. } => pairs.len() as u64 + bad,
        }
    }

    /// The samples: each deferred stamp's latency is `latency(stamp, receipt)` (the stamp
    /// corrected by the peer clock's offset at the receipt, `clock::Span::latency`).
    pub(crate) fn finish(self, latency: impl Fn(u64, u64) -> i128) -> Samples {
        match self {
            Receipts::Direct(s) => s,
            Receipts::Deferred { pairs, bad, .. } => {
                let mut s = Samples {
                    bad,
                    ..Samples::default()
                };
                for (ts, now) in pairs {
                    s.record_latency(Some(latency(ts, now)));
                }
                s
            }
        }
    }
}

/// One row of the table: a side and a size, all rounds.
pub(crate) struct Row {
    pub(crate) side: Side,
    pub(crate) bytes: usize,
    pub(crate) samples: Samples,
}

const QUANTILES: [(&str, f64); 4] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)];

pub(crate) fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The perftest-style table (µs), then the ratio of the p50s per size.
pub(crate) fn table(rows: &[Row]) -> String {
    table_within(rows, None)
}

/// [`table`] of samples that are only as exact as `error_ns`, the error bound of the peer
/// clock's offset they were corrected by (docs/latency.md, "Two hosts"); its units line
/// says so.
pub(crate) fn table_within(rows: &[Row], error_ns: Option<u64>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:23} {:>6} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "receiver", "bytes", "samples", "min", "p50", "p90", "p99", "p99.9", "max"
    );
    for r in rows {
        let h = &r.samples.hist;
        let _ = write!(
            s,
            "{:23} {:>6} {:>8} {:>9.2}",
            r.side.name(),
            r.bytes,
            h.len(),
            us(h.min())
        );
        for (_, q) in QUANTILES {
            let _ = write!(s, " {:>9.2}", us(h.value_at_quantile(q)));
        }
        let _ = write!(s, " {:>9.2}", us(h.max()));
        if r.samples.bad > 0 {
            let _ = write!(s, "  ({} bad stamps)", r.samples.bad);
        }
        s.push('\n');
    }
    match error_ns {
        None => {
            let _ = writeln!(s, "(one-way latency, µs)");
        }
        Some(e) => {
            let _ = writeln!(
                s,
                "(one-way latency, µs; every sample ± {:.2} µs, the error bound of the peer \
                 clock's offset)",
                us(e)
            );
        }
    }
    for r in rows.iter().filter(|r| r.side != Side::Kernel) {
        let k = rows
            .iter()
            .find(|k| k.side == Side::Kernel && k.bytes == r.bytes);
        if let Some(k) = k.filter(|k| !k.samples.hist.is_empty() && !r.samples.hist.is_empty()) {
            let ratio = |q: f64| {
                r.samples.hist.value_at_quantile(q) as f64
                    / k.samples.hist.value_at_quantile(q).max(1) as f64
            };
            let _ = writeln!(
                s,
                "{:18} / kernel at {:>6} B: p50 {:.2}x, p99 {:.2}x",
                r.side.key(),
                r.bytes,
                ratio(0.5),
                ratio(0.99)
            );
        }
    }
    s
}

/// HdrHistogram's percentile distribution text format (`.hgrm`, as
/// `outputPercentileDistribution` writes it), values in µs.
pub(crate) fn hgrm(h: &Histogram<u64>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    if !h.is_empty() {
        for v in h.iter_quantiles(5) {
            let q = v.quantile_iterated_to();
            let value = us(h.highest_equivalent(v.value_iterated_to()));
            let total: u64 = h.count_between(0, v.value_iterated_to());
            if q < 1.0 {
                let _ = writeln!(
                    s,
                    "{value:12.3} {q:2.12} {total:10} {:14.2}",
                    1.0 / (1.0 - q)
                );
            } else {
                let _ = writeln!(s, "{value:12.3} {q:2.12} {total:10}");
            }
        }
    }
    let _ = writeln!(
        s,
        "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]",
        h.mean() / 1000.0,
        h.stdev() / 1000.0
    );
    let _ = writeln!(
        s,
        "#[Max     = {:12.3}, Total count    = {:12}]",
        us(h.max()),
        h.len()
    );
    let _ = writeln!(
        s,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        h.buckets(),
        // Not exposed by the crate: 2 * 10^sigfig rounded up to a power of two.
        (2 * 10u64.pow(u32::from(h.sigfig()))).next_power_of_two()
    );
    s
}

/// A row's result in the document (docs/benchmarks.md, "JSON").
pub(crate) fn record(r: &Row, rounds: u32) -> LatRecord {
    let h = &r.samples.hist;
    let at = |q: f64| us(h.value_at_quantile(q));
    LatRecord {
        receiver: r.side.receiver(),
        size: r.bytes,
        rounds,
        samples: h.len(),
        bad_stamps: r.samples.bad,
        min_us: us(h.min()),
        p50_us: at(0.5),
        p90_us: at(0.9),
        p99_us: at(0.99),
        p999_us: at(0.999),
        max_us: us(h.max()),
        mean_us: h.mean() / 1000.0,
    }
}

/// The `.hgrm` file of a side and size (`-unpaced` when the sender was not paced).
pub(crate) fn hgrm_name(side: Side, bytes: usize, rate: u64) -> String {
    let pace = if rate == 0 { "-unpaced" } else { "" };
    format!("lat-{}-{bytes}{pace}.hgrm", side.key())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lat::LatArgs;
    use crate::report::document::LatClock;
    use crate::report::Document;
    use clap::Parser;

    #[test]
    fn stamp_codec() {
        let ns = 0x0102_0304_0506_0708u64;
        let mut p = ns.to_le_bytes().to_vec();
        p.extend_from_slice(b"pattern");
        assert_eq!(decode_stamp(&p), Some(ns));
        assert_eq!(decode_stamp(&p[..7]), None);
        let (a, b) = (monotonic_ns(), monotonic_ns());
        assert!(a > 0 && b >= a);
    }

    #[test]
    fn samples_reject_implausible_stamps() {
        let mut s = Samples::default();
        s.record(Some(1_000), 3_000);
        s.record(None, 3_000);
        s.record(Some(0), 3_000);
        s.record(Some(5_000), 3_000);
        s.record(Some(1), 61_000_000_000);
        assert_eq!((s.hist.len(), s.bad), (1, 4));
        assert_eq!(s.hist.value_at_quantile(0.5), 2_000);
    }

    #[test]
    fn deferred_receipts_are_corrected_by_the_span_and_bounded() {
        use crate::lat::clock::estimate::{Estimate, Span};
        // The peer's clock one second ahead of ours.
        let est = |at| Estimate {
            at,
            offset_ns: 1_000_000_000,
            error_ns: 5_000,
            rtt_ns: 10_000,
            answered: 1,
            sent: 1,
        };
        let span = Span {
            before: est(0),
            after: est(10_000_000_000),
        };
        let peer = |ours: u64| ours + 1_000_000_000;
        let mut r = Receipts::new(true, 4);
        r.record(Some(peer(5_000_000 - 20_000)), 5_000_000); // 20 µs
        r.record(Some(peer(5_000_000 + 3_000)), 5_000_000); // -3 µs: the clock's error
        r.record(None, 6_000_000); // no stamp
        r.record(Some(peer(7_000_000)), 7_000_000); // 0: recorded as 1 ns
        r.record(Some(peer(8_000_000 - 1)), 8_000_000); // past the limit of 4
        assert_eq!(r.count(), 5);
        let s = r.finish(|ts, now| span.latency(ts, now));
        assert_eq!((s.hist.len(), s.bad), (2, 3));
        assert_eq!(s.hist.min(), 1);
        assert!(s.hist.equivalent(s.hist.max(), 20_000), "{}", s.hist.max());
        // On one clock, recorded at once as before.
        let mut r = Receipts::new(false, 4);
        r.record(Some(1_000), 3_000);
        r.record(Some(5_000), 3_000);
        assert_eq!(r.count(), 2);
        let s = r.finish(|_, _| panic!("not deferred"));
        assert_eq!((s.hist.len(), s.bad, s.hist.max()), (1, 1, 2_000));
    }

    fn rows() -> Vec<Row> {
        let mut k = Samples::default();
        let mut d = Samples::default();
        for i in 1..=1000u64 {
            k.record(Some(1), 1 + i * 10); // 10 ns .. 10 µs
            d.record(Some(1), 1 + i * 1000); // 1 µs .. 1 ms
        }
        vec![
            Row {
                side: Side::Kernel,
                bytes: 64,
                samples: k,
            },
            Row {
                side: Side::Datapath,
                bytes: 64,
                samples: d,
            },
        ]
    }

    #[test]
    fn table_has_percentiles_and_ratio() {
        let t = table(&rows());
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0]
            .split_whitespace()
            .eq(["receiver", "bytes", "samples", "min", "p50", "p90", "p99", "p99.9", "max"]));
        let k: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(&k[..2], ["kernel-tcp", "MpaStream"]);
        // bytes, samples, min, p50, p90, p99, p99.9, max in µs.
        // Values are the histogram's (3 significant digits: equivalent ranges of 8 ns here).
        assert_eq!(
            &k[2..],
            ["64", "1000", "0.01", "5.00", "9.01", "9.90", "9.99", "10.01"]
        );
        let d: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(&d[..4], ["datapath,", "sleeping", "64", "1000"]);
        assert_eq!(d[5], "500.22"); // 3 significant digits: 500 µs reads as its range's top
        assert!(
            t.contains("datapath           / kernel at     64 B: p50 99.98x, p99 99.99x"),
            "{t}"
        );
    }

    #[test]
    fn hgrm_format() {
        let r = rows();
        let text = hgrm(&r[1].samples.hist);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].split_whitespace().eq([
            "Value",
            "Percentile",
            "TotalCount",
            "1/(1-Percentile)"
        ]));
        assert_eq!(lines[1], "");
        let first: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(first, ["1.000", "0.000000000000", "1", "1.00"]);
        // The last data line is the maximum at percentile 1 without the last column.
        let last = lines.iter().rev().find(|l| !l.starts_with('#')).unwrap();
        let last: Vec<&str> = last.split_whitespace().collect();
        assert_eq!(last.len(), 3);
        assert_eq!(&last[1..], ["1.000000000000", "1000"]);
        assert!(text.contains("#[Max     ="));
        assert!(text.contains("Total count    =         1000]"));
        assert!(text.contains("SubBuckets     =         2048]"), "{text}");
    }

    #[test]
    fn rows_make_a_documented_lat_document() {
        let r = rows();
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            lat: LatArgs,
        }
        let args = Cli::parse_from(["lat", "--sizes", "64"]).lat;
        let doc = Document::Lat {
            params: args.params(),
            results: r.iter().map(|r| record(r, 3)).collect(),
            clock: Some(LatClock::SameHost),
        };
        let v = serde_json::to_value(&doc).unwrap();
        crate::report::check_shape(&v).unwrap();
        assert_eq!(v["params"]["framing"], "markers+crc");
        // The default bed adds nothing to the parameters; every datapath mode is measured.
        assert_eq!(
            v["params"]["modes"],
            serde_json::json!(["sleep", "spin", "rtc"])
        );
        assert_eq!(
            v["params"].as_object().map(|o| o.len()),
            Some(10),
            "{}",
            v["params"]
        );
        assert_eq!(v["clock"], serde_json::json!({"source": "same-host"}));
        assert_eq!(v["results"][0]["receiver"], "kernel");
        assert_eq!(v["results"][1]["receiver"], "datapath");
        assert_eq!(v["results"][1]["samples"], 1000);
        assert_eq!(v["results"][1]["p50_us"], 500.223);
        assert!(v["results"][1]["p999_us"].as_f64().unwrap() > 998.0);
        assert_eq!(
            hgrm_name(Side::Datapath, 64, 0),
            "lat-datapath-64-unpaced.hgrm"
        );
        assert_eq!(
            hgrm_name(Side::Kernel, 4096, 10_000),
            "lat-kernel-4096.hgrm"
        );
        assert_eq!(
            hgrm_name(Side::of(DatapathMode::Rtc), 64, 10_000),
            "lat-datapath-rtc-64.hgrm"
        );
        assert_eq!(Side::of(DatapathMode::Spin).key(), "datapath-spin");
        assert_eq!(Side::of(DatapathMode::Sleep), Side::Datapath);
    }
}
