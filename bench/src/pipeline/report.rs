//! [`PipelineReport`]: what one configuration measured over its rounds, as the summary line
//! and the JSON record.

use super::round::RoundResult;
use super::{PipelineOpts, Spread};
use crate::report::document::PipelineConfigRecord;

/// What a configuration measured over its rounds (every round checked).
#[derive(Debug, Clone)]
pub(crate) struct PipelineReport {
    pub(crate) opts: PipelineOpts,
    /// Segments (frames) per round and the prepared stream's loss/reordering.
    pub(crate) segments: u64,
    pub(crate) dropped: u64,
    pub(crate) reordered: u64,
    /// Poll time per segment, ns.
    pub(crate) ns_per_segment: Spread,
    /// The thread's CPU time in polls per segment, ns (not inflated by preemption).
    pub(crate) cpu_ns_per_segment: Spread,
    /// ULPDU payload Gbit/s on one core (payload octets over poll time).
    pub(crate) gbits: Spread,
    /// Segments per second (poll time).
    pub(crate) segments_per_s: Spread,
    /// Thread CPU time over wall time of the whole loop (1.0: never preempted).
    pub(crate) cpu_over_wall: Spread,
    /// Poll time over the whole loop's wall time.
    pub(crate) poll_share: Spread,
    /// Copying every segment's TCP payload alone (memcpy), and CRC32c alone over the same
    /// octets, each expressed as the round's ULPDU payload over that time: what the pipeline
    /// would run at if it cost only that octet pass.
    pub(crate) memcpy_gbits: Spread,
    pub(crate) crc_gbits: Spread,
    /// The same over frames just written into a ring, burst by burst (`baseline`): the floor
    /// the pipeline, which reads such frames, is judged against.
    pub(crate) memcpy_warm_gbits: Spread,
    pub(crate) crc_warm_gbits: Spread,
    /// The last round.
    pub(crate) last: RoundResult,
}

impl PipelineReport {
    /// One line of text.
    pub fn line(&self) -> String {
        let r = &self.last;
        format!(
            "{}: {:.0} ns/segment ({:.0}–{:.0}; CPU {:.0}), {:.2} Gbit/s payload/core ({:.2}–{:.2}), \
             {:.2} M segments/s, CPU/wall {:.2}, poll/loop {:.2}; {} segments ({} lost+resent, \
             {} reordered, {} batched into the one before), {} ACKs, FPDUs {} (direct {}, in order {}, from store {}; \
             CRC from the segment's at its end {}; across segments in place {} \
             ({} of them CRC from the segments' CRCs), staged {}), \
             {} completions, {} region octets checked{}",
            self.opts.label(),
            self.ns_per_segment.median,
            self.ns_per_segment.min,
            self.ns_per_segment.max,
            self.cpu_ns_per_segment.median,
            self.gbits.median,
            self.gbits.min,
            self.gbits.max,
            self.segments_per_s.median / 1e6,
            self.cpu_over_wall.median,
            self.poll_share.median,
            self.segments,
            self.dropped,
            self.reordered,
            r.segments_batched,
            r.acks,
            r.fpdus,
            r.placed_direct,
            r.placed_in_order,
            r.placed_from_store,
            r.crc_at_segment_end,
            r.spanned_in_place,
            r.crc_from_segments,
            r.staged,
            r.completions,
            r.compared,
            if self.opts.huge_pages {
                format!(
                    ", {} MiB of frames on huge pages",
                    r.huge_page_octets >> 20
                )
            } else {
                String::new()
            },
        )
    }

    /// Every value, for `--json`.
    pub(crate) fn record(&self) -> PipelineConfigRecord {
        let o = &self.opts;
        let r = &self.last;
        PipelineConfigRecord {
            label: o.label(),
            flows: o.flows,
            size: o.size,
            mss: o.mss,
            markers: o.markers,
            crc: o.crc,
            op: o.op,
            aligned: o.aligned,
            loss: o.loss,
            reorder: o.reorder,
            bytes: o.bytes,
            rounds: o.rounds,
            digest: o.digest,
            verify_checksums: o.verify_checksums,
            segments: self.segments,
            dropped: self.dropped,
            reordered: self.reordered,
            ns_per_segment: self.ns_per_segment,
            cpu_ns_per_segment: self.cpu_ns_per_segment,
            gbits: self.gbits,
            segments_per_s: self.segments_per_s,
            cpu_over_wall: self.cpu_over_wall,
            poll_share: self.poll_share,
            acks: r.acks,
            fpdus: r.fpdus,
            placed_direct: r.placed_direct,
            placed_in_order: r.placed_in_order,
            placed_from_store: r.placed_from_store,
            spanned_in_place: r.spanned_in_place,
            crc_from_segments: r.crc_from_segments,
            crc_at_segment_end: r.crc_at_segment_end,
            staged: r.staged,
            huge_page_octets: r.huge_page_octets,
            out_of_order_segments: r.out_of_order_segments,
            segments_batched: r.segments_batched,
            store_high_water: r.store_high_water,
            completions: r.completions,
            region_octets_checked: r.compared,
            payload_octets: r.payload_octets,
            gbit_s_per_core: self.gbits.median,
            gbit_s_per_core_min: self.gbits.min,
            gbit_s_per_core_max: self.gbits.max,
            ns_per_packet: self.ns_per_segment.median,
            mpps: self.segments_per_s.median / 1e6,
            memcpy_gbit_s: self.memcpy_gbits.median,
            crc_gbit_s: self.crc_gbits.median,
            memcpy_warm_gbit_s: self.memcpy_warm_gbits.median,
            crc_warm_gbit_s: self.crc_warm_gbits.median,
            share_of_memcpy: self.gbits.median / self.memcpy_gbits.median,
            share_of_crc: self.gbits.median / self.crc_gbits.median,
            stage: None,
            stage_ns_per_packet: None,
            fit_ns_per_packet: None,
            fit_ns_per_kib: None,
            variant: false,
        }
    }
}
