//! What a worker reports when asked for statistics: its queue's counters and a page of its
//! flows (docs/consumer.md, "Statistics in pages").

use super::Worker;
use crate::io::ring::FrameRing;
use mpa_ctl_proto::stats::{QueueReport, QueueStats};
use mpa_stack::flow::Flow;

/// CPU time (user + system) of the calling thread: the worker's own cost, apart from the
/// rest of the process.
fn thread_cpu_seconds() -> f64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD)
        .map(|u| {
            let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or(0.0)
}

impl<R: FrameRing> Worker<R> {
    /// Counters and every flow's report.
    pub fn report(&self) -> QueueReport {
        self.report_page(None, usize::MAX)
    }

    /// Counters and the reports of the flows of lowest id above `after`, at most `max` of
    /// them, by ascending id.
    pub(super) fn report_page(&self, after: Option<u64>, max: usize) -> QueueReport {
        let mut listed: Vec<&Flow> = (self.flows.values())
            .filter(|f| after.is_none_or(|a| f.id > a))
            .collect();
        if listed.len() > max {
            listed.select_nth_unstable_by_key(max, |f| f.id);
            listed.truncate(max);
        }
        listed.sort_unstable_by_key(|f| f.id);
        QueueReport {
            queue: self.xsk.queue(),
            ring: self.xsk.stats(),
            stats: QueueStats {
                completions_overflow: self.completions.overflow,
                completions_unclaimed: self.completions.unclaimed,
                streamed_messages: self.regions.streamed_messages(),
                ..self.stats
            },
            cpu_seconds: thread_cpu_seconds(),
            flows: listed.into_iter().map(Flow::report).collect(),
            flow_count: self.flows.len() as u64,
        }
    }
}
