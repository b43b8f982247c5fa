//! Run-to-completion: the application's own thread is a queue's worker. It calls
//! [`QueueDriver::poll`] in its loop — the AF_XDP rings, TCP and MPA, placement, completions
//! written to its shared-memory ring — and posts messages with [`QueueDriver::post`] between
//! two polls, so that no other thread and no system call other than the AF_XDP kicks stands
//! between a received frame and the application, or between a post and its frames
//! (docs/latency.md). The worker code is the same as a worker thread's; only who turns the
//! loop differs. The control thread still serves `mpa-control` and consumers (hand-overs,
//! regions, subscriptions) and reaches the queue through the same command channel, read at
//! every poll.

use super::{Turn, Worker, WorkerError};
use crate::io::ring::FrameRing;
use crate::io::xsk::XskQueue;
use mpa_ctl_proto::stats::QueueReport;
pub use mpa_stack::flow::{PostOp, SgList, Sge, WorkRequest};
use std::time::Duration;

/// Why a driven queue cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    /// The datapath stopped (or failed): the queue's flows were aborted.
    #[error("the datapath stopped; queue {queue} is no longer served")]
    Stopped {
        /// The queue.
        queue: u32,
    },
    /// The queue's frame ring failed (the AF_XDP socket).
    #[error("queue {queue}: {detail}")]
    Ring {
        /// The queue.
        queue: u32,
        /// What failed.
        detail: String,
    },
    /// A post was refused (nothing of it was queued).
    #[error(transparent)]
    Post(#[from] WorkerError),
    /// The work [`QueueDriver::poll_while`] ran beside the queue panicked.
    #[error("the work run while queue {queue} was turned panicked")]
    WorkPanicked {
        /// The queue.
        queue: u32,
    },
}

/// One queue's worker, turned by the application's thread
/// ([`Datapath::take_queue_drivers`](crate::server::Datapath::take_queue_drivers)).
///
/// It must be polled at least once per worker deadline (`--worker-deadline-ms`, 10 s by
/// default) — the datapath's watchdog takes a queue whose loop stops turning for stuck, and
/// stops — and unless told to ([`QueueDriver::set_sleep_after`]) it never sleeps: polling is
/// the application's loop, at a core's cost. Dropped, it aborts its flows (RST to each
/// peer).
pub struct QueueDriver<R: FrameRing = XskQueue> {
    worker: Worker<R>,
    stopped: bool,
}

impl<R: FrameRing> QueueDriver<R> {
    pub(crate) fn new(worker: Worker<R>) -> Self {
        QueueDriver {
            worker,
            stopped: false,
        }
    }

    /// Offer the core to other runnable threads every `polls` empty polls of
    /// [`QueueDriver::poll`] (`sched_yield`; 0, the default: never). For a loop whose core
    /// is shared with the peer's or the application's other threads; on a core of its own a
    /// yield only adds its system call (docs/latency.md, "Polling and sleeping").
    pub fn set_yield_every(&mut self, polls: u32) {
        self.worker.set_yield_every(polls);
    }

    /// Let [`QueueDriver::poll`] sleep when the queue is idle: once no frame came for `spin`,
    /// a poll waits in the kernel (`poll()` on the
    /// AF_XDP socket) until a frame arrives, the control thread has a command, or the queue's
    /// next timer is due, at most 10 ms, and then does its turn. `None`, the default: it never
    /// sleeps. For a thread that shares its core: it then pays a wake-up per message after
    /// an idle spell, as a blocking socket does, instead of holding the core
    /// (docs/latency.md, "Run-to-completion that sleeps").
    pub fn set_sleep_after(&mut self, spin: Option<Duration>) {
        self.worker.set_sleep_after(spin);
    }

    /// The queue this driver serves.
    pub fn queue(&self) -> u32 {
        self.worker.xsk.queue()
    }

    /// The queue's counters and every flow's report (as `GetStats` gives them).
    pub fn report(&self) -> QueueReport {
        self.worker.report()
    }

    /// Flows the queue owns.
    pub fn flows(&self) -> usize {
        self.worker.flows.len()
    }

    /// One turn, without sleeping: the frames the last turn built handed to the kernel, the
    /// control thread's commands, one RX burst through TCP and MPA into the regions, timers,
    /// the frames this turn needs built (ACKs: they leave at the next turn or post, so that the
    /// application reads this turn's completions first), and the completion rings published.
    /// Returns the RX descriptors taken.
    pub fn poll(&mut self) -> Result<usize, DriveError> {
        let queue = self.queue();
        if self.stopped {
            return Err(DriveError::Stopped { queue });
        }
        match self.worker.turn() {
            Turn::Polled(n) => Ok(n),
            Turn::Failed(e) => Err(DriveError::Ring {
                queue,
                detail: e.to_string(),
            }),
            Turn::Stop => {
                self.stopped = true;
                self.worker.abort_all();
                Err(DriveError::Stopped { queue })
            }
        }
    }

    /// Queues `post`'s messages on its flow (all or none; the first Send's MSN) and
    /// hands the frames the window allows to the kernel at once, with any the last poll left
    /// (its ACKs): one system call. The region must be registered (by a consumer of the
    /// datapath) in the flow's protection domain.
    pub fn post(&mut self, post: &WorkRequest) -> Result<Option<u32>, DriveError> {
        let queue = self.queue();
        if self.stopped {
            return Err(DriveError::Stopped { queue });
        }
        match self.worker.post_and_send(post) {
            Ok(r) => Ok(r?),
            Err(e) => Err(DriveError::Ring {
                queue,
                detail: e.to_string(),
            }),
        }
    }
}

impl<R: FrameRing + Send> QueueDriver<R> {
    /// Runs `work` on another thread while this one turns the queue, and returns its result:
    /// for what needs the queue served while it waits — a hand-over (`mpa-control`'s, or the
    /// application's own setup), the exchange that closes a connection. `work` must bound its
    /// own waits: the call returns when it does (after turning the queue until then), or
    /// when the queue fails, once `work` has ended.
    pub fn poll_while<T: Send>(
        &mut self,
        work: impl FnOnce() -> T + Send,
    ) -> Result<T, DriveError> {
        let queue = self.queue();
        std::thread::scope(|s| {
            let h = s.spawn(work);
            while !h.is_finished() {
                self.poll()?;
            }
            h.join().map_err(|_| DriveError::WorkPanicked { queue })
        })
    }
}

impl<R: FrameRing> Drop for QueueDriver<R> {
    fn drop(&mut self) {
        self.worker.abort_all();
    }
}
