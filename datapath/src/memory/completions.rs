//! The worker's side of completion delivery: the rings of the subscriptions to its flows'
//! domains (shared memory, [`mpa_ctl_proto::ring`]). Completions go straight from a flow into
//! its domain's ring on the per-packet path — no allocation, no lock, no system call — and
//! each ring written in a burst is published once at its end (the eventfd is written only
//! when the consumer said it sleeps). A full ring never stalls the worker: the record is
//! counted as lost, in the ring (the consumer sees where) and in the queue's statistics.
//!
//! A flow that moves to another worker leaves a [`RingMark`] (where its completions ended in
//! the old ring); the new worker writes a [`Record::Moved`] marker before the flow's next
//! record, and the consumer reads the old ring up to the mark before it goes past the
//! marker, so the flow's completions stay in order across the move.
//!
//! A subscription also brings this worker's end of its post queue (shared memory the
//! consumer writes, [`mpa_ctl_proto::ring::post`]): the worker reads it every turn
//! (`worker::posts`), and a post it refuses comes back through the same subscription's ring.

#![forbid(unsafe_code)]

use mpa_ctl_proto::ring::post::{PostQueueError, PostReader, PostRefused, WorkRequest};
use mpa_ctl_proto::ring::{Producer, Record, Waker};
use mpa_ctl_proto::Completion;
use mpa_stack::flow::Flow;

/// One subscription as a worker holds it: the ring of this worker and the subscription's
/// eventfd.
#[derive(Debug)]
pub struct RingSubscription {
    /// The domain.
    pub pd: u32,
    /// The subscription (unique per datapath): a later one for the domain replaces it.
    pub id: u64,
    /// This worker's ring.
    pub producer: Producer,
    /// Wakes the consumer.
    pub waker: Waker,
    /// This worker's post queue of the subscription (made before its descriptor went to the
    /// consumer), if the subscription has post queues.
    pub posts: Option<PostReader>,
}

/// Where a flow's completions ended in the ring of the worker it left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingMark {
    /// The subscription the ring belongs to.
    pub(crate) sub: u64,
    /// The ring (the old worker's index).
    pub ring: u32,
    /// The old ring's producer index after the flow's last record there.
    pub position: u64,
}

struct Sub {
    s: RingSubscription,
    dirty: bool,
    /// The post queue was found corrupt: reported once, never read again.
    posts_failed: bool,
    /// When its posts are read again (every post of its last visits was refused).
    pause: PostsPause,
}

/// The pause of a post queue whose posts are all refused for the poster's fault: 1 ms at
/// first, twice as long after each further such visit, up to [`MAX_POSTS_PAUSE`]. A visit
/// with a post taken ends it, and so does quiet: a queue that stayed silent after its pause
/// ended for as long as that pause lasted is not flooding, and starts again at 1 ms.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PostsPause {
    until: Option<std::time::Instant>,
    length: std::time::Duration,
}

impl PostsPause {
    /// Whether the queue is not to be read at `now`.
    pub(crate) fn paused(&self, now: std::time::Instant) -> bool {
        self.until.is_some_and(|until| now < until)
    }

    /// The time left of the pause at `now`, if it has not ended.
    pub(crate) fn left(&self, now: std::time::Instant) -> Option<std::time::Duration> {
        self.until
            .filter(|&until| now < until)
            .map(|until| until - now)
    }

    /// After a visit that took posts: `all_refused` when each was refused for a fault of
    /// the poster's.
    pub(crate) fn visited(&mut self, all_refused: bool, now: std::time::Instant) {
        if self.until.is_some_and(|until| now >= until + self.length) {
            self.length = std::time::Duration::ZERO;
        }
        if all_refused {
            self.length = (self.length * 2)
                .max(std::time::Duration::from_millis(1))
                .min(MAX_POSTS_PAUSE);
            self.until = Some(now + self.length);
        } else {
            *self = Self::default();
        }
    }
}

/// The longest pause of a post queue whose posts are all refused: a consumer that only
/// sends what the datapath refuses is read at most this seldom, so it cannot keep a worker
/// busy (docs/limits.md, "Posts").
pub(crate) const MAX_POSTS_PAUSE: std::time::Duration = std::time::Duration::from_millis(64);

/// The subscriptions of a worker, and its completion counters.
#[derive(Default)]
pub(crate) struct Outbox {
    subs: Vec<Sub>,
    /// Flows that arrived from another worker and whose marker is not written yet.
    moved: Vec<(u64, RingMark)>,
    /// Completions lost because a consumer's ring was full.
    pub(crate) overflow: u64,
    /// Completions of domains nobody subscribes to.
    pub(crate) unclaimed: u64,
}

impl Outbox {
    /// Starts delivering a domain's completions into `s` (replacing its earlier
    /// subscription, whose ring this worker then unmaps).
    pub(crate) fn subscribe(&mut self, s: RingSubscription) {
        self.subs.retain(|x| x.s.pd != s.pd);
        self.subs.push(Sub {
            s,
            dirty: false,
            posts_failed: false,
            pause: PostsPause::default(),
        });
    }

    /// Ends subscription `id` of `pd` (its consumer is gone), if it is still the domain's.
    pub(crate) fn unsubscribe(&mut self, pd: u32, id: u64) {
        self.subs.retain(|x| (x.s.pd, x.s.id) != (pd, id));
    }

    /// Moves `flow`'s new completions into its domain's ring (unpublished).
    #[inline]
    pub(crate) fn deliver(&mut self, flow: &mut Flow) {
        let Some(pd) = flow.pd() else {
            return;
        };
        let Some(sub) = self.subs.iter_mut().find(|x| x.s.pd == pd) else {
            let unclaimed = &mut self.unclaimed;
            flow.drain_completions(|_| *unclaimed += 1);
            return;
        };
        sub.dirty = true;
        let p = &mut sub.s.producer;
        let mut blocked = false;
        if !self.moved.is_empty() {
            if let Some(i) = self.moved.iter().position(|(id, _)| *id == flow.id) {
                let mark = self.moved[i].1;
                let marker = Record::Moved {
                    flow_id: flow.id,
                    from_ring: mark.ring,
                    position: mark.position,
                };
                // A mark of another subscription (replaced meanwhile) points at a ring the
                // consumer no longer reads: nothing to wait for.
                if mark.sub != sub.s.id || mark.ring == p.ring() || p.try_push(&marker) {
                    self.moved.swap_remove(i);
                } else {
                    blocked = true;
                }
            }
        }
        let overflow = &mut self.overflow;
        flow.drain_completions(|c| {
            // Behind a marker that found no room, records may not overtake it: lost too.
            if blocked {
                p.lose();
                *overflow += 1;
            } else if !p.push(&Record::Completion(*c)) {
                *overflow += 1;
            }
        });
    }

    /// Subscriptions held (post queues are read by their index, `0 .. subscriptions()`).
    pub(crate) fn subscriptions(&self) -> usize {
        self.subs.len()
    }

    /// Whether subscription `i`'s post queue is paused at `now` (its posts were all refused:
    /// [`Outbox::posts_refused`]).
    pub(crate) fn posts_paused(&self, i: usize, now: std::time::Instant) -> bool {
        self.subs.get(i).is_some_and(|x| x.pause.paused(now))
    }

    /// After a visit to subscription `i`'s post queue that took posts: `all_refused` when
    /// each was refused for a fault of the poster's ([`PostsPause`]).
    pub(crate) fn posts_refused(&mut self, i: usize, all_refused: bool, now: std::time::Instant) {
        if let Some(x) = self.subs.get_mut(i) {
            x.pause.visited(all_refused, now);
        }
    }

    /// Takes up to `max` posts of subscription `i`'s post queue into `out`; its domain and id
    /// (`None`: no queue, or one found corrupt). A corrupt queue is logged and counted in
    /// `corrupt` once, then left alone.
    pub(crate) fn take_posts(
        &mut self,
        i: usize,
        out: &mut Vec<Result<WorkRequest, PostRefused>>,
        max: usize,
        corrupt: &mut u64,
    ) -> Option<(u32, u64)> {
        let x = self.subs.get_mut(i)?;
        if x.posts_failed {
            return None;
        }
        let r = x.s.posts.as_mut()?;
        if let Err(e) = r.take(out, max) {
            x.posts_failed = true;
            *corrupt += 1;
            let what = match &e {
                PostQueueError::Corrupt { what, .. } => *what,
                _ => "unreadable",
            };
            tracing::warn!(
                pd = x.s.pd,
                subscription = x.s.id,
                queue = r.queue(),
                what,
                "post queue corrupt: no longer read (the consumer wrote its index wrong)"
            );
            return None;
        }
        Some((x.s.pd, x.s.id))
    }

    /// Writes `c` (a refused post) into subscription `sub`'s ring (unpublished); `false` when
    /// the subscription is gone or its ring was full (counted as lost).
    pub(crate) fn refuse(&mut self, sub: u64, c: &Completion) -> bool {
        let Some(x) = self.subs.iter_mut().find(|x| x.s.id == sub) else {
            return false;
        };
        x.dirty = true;
        let ok = x.s.producer.push(&Record::Completion(*c));
        if !ok {
            self.overflow += 1;
        }
        ok
    }

    /// Before the worker sleeps: every readable post queue's `waiting` flag set; `false` (all
    /// cleared again) when one has posts, and the worker must not sleep.
    pub(crate) fn prepare_post_sleep(&mut self, now: std::time::Instant) -> bool {
        for i in 0..self.subs.len() {
            let x = &mut self.subs[i];
            // A paused queue is read when its pause ends (the sleep is no longer:
            // [`Outbox::posts_pause_left`]), whatever it holds.
            if x.pause.paused(now) {
                continue;
            }
            let Some(r) = x.s.posts.as_mut().filter(|_| !x.posts_failed) else {
                continue;
            };
            if !r.prepare_sleep() {
                self.finish_post_sleep();
                return false;
            }
        }
        true
    }

    /// The time until the first pause of a post queue ends, if one is paused at `now`.
    pub(crate) fn posts_pause_left(&self, now: std::time::Instant) -> Option<std::time::Duration> {
        self.subs.iter().filter_map(|x| x.pause.left(now)).min()
    }

    /// After sleeping: the `waiting` flags the consumers did not clear, cleared.
    pub(crate) fn finish_post_sleep(&self) {
        for x in &self.subs {
            if let Some(r) = &x.s.posts {
                r.finish_sleep();
            }
        }
    }

    /// Publishes every ring written since the last call and wakes the consumers that sleep:
    /// once per burst.
    pub(crate) fn publish(&mut self) {
        for x in self.subs.iter_mut().filter(|x| x.dirty) {
            x.dirty = false;
            if x.s.producer.publish() {
                x.s.waker.wake();
            }
        }
    }

    /// Flow `flow_id` of domain `pd` leaves this worker: everything is published, and the
    /// mark says where its completions end here.
    pub(crate) fn leave(&mut self, flow_id: u64, pd: Option<u32>) -> Option<RingMark> {
        self.publish();
        // It arrived here and never wrote its marker: its completions still end where the
        // earlier mark says (nothing of it was written here).
        if let Some(i) = self.moved.iter().position(|(id, _)| *id == flow_id) {
            return Some(self.moved.swap_remove(i).1);
        }
        let pd = pd?;
        let sub = self.subs.iter().find(|x| x.s.pd == pd)?;
        Some(RingMark {
            sub: sub.s.id,
            ring: sub.s.producer.ring(),
            position: sub.s.producer.head(),
        })
    }

    /// Flow `flow_id` arrived from another worker, its completions there ending at `mark`.
    pub(crate) fn arrive(&mut self, flow_id: u64, mark: Option<RingMark>) {
        if let Some(m) = mark {
            self.moved.retain(|(id, _)| *id != flow_id);
            self.moved.push((flow_id, m));
        }
    }

    /// A flow ended: a marker it never wrote is not needed any more.
    pub(crate) fn gone(&mut self, flow_id: u64) {
        if !self.moved.is_empty() {
            self.moved.retain(|(id, _)| *id != flow_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_flooding_queue_is_paused_doubling_up_to_the_longest_pause() {
        let mut p = PostsPause::default();
        let mut now = Instant::now();
        assert!(!p.paused(now));
        let mut lengths = Vec::new();
        for _ in 0..9 {
            p.visited(true, now);
            let left = p.left(now).unwrap();
            lengths.push(left);
            assert!(p.paused(now + left - Duration::from_nanos(1)));
            assert!(!p.paused(now + left));
            // The flooder's next posts are there the moment the pause ends.
            now += left;
        }
        let want: Vec<Duration> = [1, 2, 4, 8, 16, 32, 64, 64, 64].map(|m| m * MS).into();
        assert_eq!(lengths, want);
        assert_eq!(MAX_POSTS_PAUSE, 64 * MS);
    }

    #[test]
    fn a_post_taken_or_quiet_as_long_as_the_pause_ends_the_pauses() {
        let mut p = PostsPause::default();
        let mut now = Instant::now();
        for _ in 0..4 {
            p.visited(true, now);
            now += p.left(now).unwrap();
        }
        // 8 ms pause ended at `now`; a post taken ends the pauses at once.
        p.visited(false, now);
        assert_eq!(p, PostsPause::default());
        assert!(!p.paused(now));

        for _ in 0..4 {
            p.visited(true, now);
            now += p.left(now).unwrap();
        }
        // Quiet for less than the 8 ms it lasted: the next refusal doubles.
        p.visited(true, now + 7 * MS);
        assert_eq!(p.left(now + 7 * MS), Some(16 * MS));
        now += 7 * MS + 16 * MS;
        // Quiet for as long as the 16 ms it lasted: a refusal then starts again at 1 ms.
        p.visited(true, now + 16 * MS);
        assert_eq!(p.left(now + 16 * MS), Some(MS));
    }
}
