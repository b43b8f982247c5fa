//! The per-stage breakdown of the pipeline's cost, by subtraction: a ladder of
//! configurations, each adding one stage to the one before, run interleaved
//! (round `i` of every rung before round `i + 1` of any). A stage's cost is the difference of
//! the medians of adjacent rungs' poll CPU time per packet (the thread's CPU clock, which
//! preemption by other load does not inflate). It is a difference of medians, not an
//! instrumented timer (timers per stage would cost more than some stages), so a stage cheaper
//! than the rounds' noise can read as slightly negative.
//!
//! 1. `parse + flow + TCP + FPDU decode`: counting only (no protection domain), no markers,
//!    no CRC, no software TCP checksum, no digest: Ethernet/IPv4/TCP parsing, the flow
//!    lookup, the TCP receive path and ACKs, the FPDU deframer and DDP header decode.
//! 2. `+ TCP checksum`: the same with the software TCP checksum verified.
//! 3. `+ CRC32c`: the MPA CRC checked.
//! 4. `+ markers`: markers present in the stream and removed.
//! 5. `+ placement + completions`: RDMA Writes placed into a registered region, the RFC 5040
//!    checks, completions issued (per message, so their share falls as ULPDUs grow).
//!
//! Every rung frames the FPDUs as the base does: aligned with segments or not.

use super::{pipeline_many, PipelineOpts, PipelineReport};
use crate::bed::options::Op;
use crate::report::document::PipelineConfigRecord;
use anyhow::Result;

/// The rungs' names, in order.
pub(crate) const STAGES: [&str; 5] = [
    "parse + flow + TCP + FPDU decode",
    "+ TCP checksum",
    "+ CRC32c",
    "+ markers",
    "+ placement + completions",
];

/// The ladder of configurations at `base`'s MSS, size, flows and volume.
pub(crate) fn ladder(base: &PipelineOpts) -> Vec<PipelineOpts> {
    let rung = |i: usize| {
        let mut o = base.clone();
        o.loss = 0.0;
        o.reorder = 0.0;
        o.digest = false;
        o.op = if i >= 4 { Op::Write } else { Op::Count };
        o.verify_checksums = i >= 1;
        o.crc = i >= 2;
        o.markers = i >= 3;
        o
    };
    (0..STAGES.len()).map(rung).collect()
}

/// The ladder's reports.
pub(crate) struct StageTable {
    pub(crate) reports: Vec<PipelineReport>,
}

/// Runs the ladder.
pub(crate) fn run(base: &PipelineOpts) -> Result<StageTable> {
    Ok(StageTable {
        reports: pipeline_many(&ladder(base))?,
    })
}

impl StageTable {
    /// ns per packet of each stage: the first rung's whole cost, then differences.
    pub(crate) fn stage_ns(&self) -> Vec<(&'static str, f64)> {
        stage_costs(
            &self
                .reports
                .iter()
                .map(|r| r.cpu_ns_per_segment.median)
                .collect::<Vec<_>>(),
        )
    }

    /// The table (markdown).
    pub(crate) fn table(&self) -> String {
        let Some(last) = self.reports.last() else {
            return String::new();
        };
        let mut s = format!(
            "per stage, MSS {} ULPDU {}{} (difference of adjacent rungs' median poll CPU ns/packet):\n\n\
             | stage | ns/packet | cumulative ns/packet | cumulative Gbit/s/core |\n\
             |---|---|---|---|\n",
            last.opts.mss,
            last.opts.size,
            if last.opts.aligned { ", FPDUs aligned" } else { "" },
        );
        for ((name, ns), r) in self.stage_ns().iter().zip(&self.reports) {
            s += &format!(
                "| {name} | {ns:.0} | {:.0} | {:.2} |\n",
                r.cpu_ns_per_segment.median, r.gbits.median
            );
        }
        s
    }

    /// One result per rung, with its stage and the stage's own cost.
    pub(crate) fn records(&self) -> Vec<PipelineConfigRecord> {
        self.stage_ns()
            .iter()
            .zip(&self.reports)
            .map(|(&(name, ns), r)| PipelineConfigRecord {
                stage: Some(name.to_string()),
                stage_ns_per_packet: Some(ns),
                ..r.record()
            })
            .collect()
    }
}

/// Stage costs from the rungs' cumulative costs.
pub(crate) fn stage_costs(cumulative: &[f64]) -> Vec<(&'static str, f64)> {
    STAGES
        .iter()
        .zip(cumulative)
        .enumerate()
        .map(|(i, (&name, &c))| (name, if i == 0 { c } else { c - cumulative[i - 1] }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rung_adds_one_stage() {
        let base = PipelineOpts {
            rounds: 1,
            flows: 1,
            size: 4096,
            mss: 1448,
            markers: false,
            crc: false,
            op: Op::Send,
            aligned: true,
            loss: 1.0,
            reorder: 1.0,
            bytes: 1 << 20,
            seed: 1,
            digest: true,
            verify_checksums: false,
            umem_chunk: 3840,
            chains_in_pieces: true,
            huge_pages: false,
            region_bytes: 16 << 20,
            ring_fill: None,
            streaming_stores: Default::default(),
            timestamps: true,
        };
        let l = ladder(&base);
        let key = |o: &PipelineOpts| (o.op, o.verify_checksums, o.crc, o.markers);
        assert_eq!(
            l.iter().map(key).collect::<Vec<_>>(),
            [
                (Op::Count, false, false, false),
                (Op::Count, true, false, false),
                (Op::Count, true, true, false),
                (Op::Count, true, true, true),
                (Op::Write, true, true, true),
            ]
        );
        assert!(l
            .iter()
            .all(|o| o.loss == 0.0 && !o.digest && o.mss == 1448 && o.aligned));
        let unaligned = ladder(&PipelineOpts {
            aligned: false,
            ..base
        });
        assert!(unaligned.iter().all(|o| !o.aligned));
    }

    #[test]
    fn costs_are_differences() {
        let c = stage_costs(&[100.0, 130.0, 180.0, 185.0, 300.0]);
        let ns: Vec<f64> = c.iter().map(|x| x.1).collect();
        assert_eq!(ns, [100.0, 30.0, 50.0, 5.0, 115.0]);
        assert_eq!(c[4].0, "+ placement + completions");
    }
}
