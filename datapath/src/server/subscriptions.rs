//! Completion subscriptions: for each, a sealed memfd of completion rings (one per worker)
//! and an eventfd, and a sealed memfd of post queues (one per worker), made here; each worker
//! gets the producer end of its ring and the reader of its post queue, the consumer gets the
//! descriptors — with every worker's post queue doorbell — with the `Subscribed` answer
//! (SCM_RIGHTS) and maps them. The control thread keeps none: when the consumer goes (or a
//! new subscriber of the domain replaces it) the workers drop their ends and the memory is
//! released.

use super::{Command, Server};
use crate::memory::completions::RingSubscription;
use mpa_ctl_proto::ring::post::{queue_bytes, PostQueueFile, PostReader};
use mpa_ctl_proto::ring::{Producer, RingFile, Waker};
use mpa_ctl_proto::{ErrorCode, Message};
use std::sync::Arc;

/// Subscriptions (domains) one control client may hold at once: each maps a completion ring
/// per worker (1.5 MiB each by default), so a client subscribing to every domain number
/// would otherwise take memory without bound.
pub const MAX_SUBSCRIPTIONS_PER_CLIENT: usize = 64;

/// Records per post queue: a consumer posting faster than a worker reads 64 a turn meets
/// back-pressure (its post refused as full, nothing lost) only after this many.
pub const POST_QUEUE_CAPACITY: u32 = 1024;

impl Server {
    /// Creates `client`'s subscription to domain `pd` and answers request `id` with its
    /// rings, and its post queues when asked (`post_queues`); refused beyond
    /// [`MAX_SUBSCRIPTIONS_PER_CLIENT`].
    pub(super) fn open_subscription(&mut self, client: u64, id: u64, pd: u32, post_queues: bool) {
        if let Err((code, message)) = self.registry.check_domain(pd, client) {
            return self.reply(client, Message::Error { id, code, message });
        }
        let held = self.registry.subscriptions_of(client);
        if held.len() >= MAX_SUBSCRIPTIONS_PER_CLIENT && !held.iter().any(|&(p, _)| p == pd) {
            let message = format!(
                "this client holds {MAX_SUBSCRIPTIONS_PER_CLIENT} subscriptions already (each \
                 maps a completion ring per worker)"
            );
            let code = ErrorCode::Limit;
            return self.reply(client, Message::Error { id, code, message });
        }
        let sub = self.next_subscription;
        self.next_subscription += 1;
        let rings = self.workers.len() as u32;
        // The post queue file and a doorbell per worker travel in the same message as the
        // rings: without room for them all, the subscription has no post queues (posts then
        // go through this socket).
        let post_capacity = if post_queues && rings as usize + 3 <= mpa_ctl_proto::MAX_FDS {
            POST_QUEUE_CAPACITY
        } else {
            0
        };
        // The rings and queues come out of the memory budget (docs/limits.md).
        let post_bytes = if post_capacity == 0 {
            0
        } else {
            u64::from(rings) * queue_bytes(post_capacity) as u64
        };
        let bytes = u64::from(rings) * mpa_ctl_proto::ring::ring_bytes(self.completion_ring) as u64
            + post_bytes;
        let Some(charge) = mpa_stack::budget::Charge::take(&self.budget, bytes) else {
            let m = self.budget.report();
            let message = format!(
                "the datapath's memory budget has no room for {bytes} octets of completion \
                 rings ({} of {} in use)",
                m.used, m.limit
            );
            let code = ErrorCode::Limit;
            return self.reply(client, Message::Error { id, code, message });
        };
        let made = RingFile::create(
            &format!("mpa-completions-{pd}-{sub}"),
            rings,
            self.completion_ring,
        )
        .and_then(|f| Ok((Arc::new(f), Waker::create()?)));
        let (file, waker) = match made {
            Ok(x) => x,
            Err(e) => {
                return self.reply(
                    client,
                    Message::Error {
                        id,
                        code: ErrorCode::Internal,
                        message: e.to_string(),
                    },
                )
            }
        };
        let posts = if post_capacity == 0 {
            None
        } else {
            match PostQueueFile::create(&format!("mpa-posts-{pd}-{sub}"), rings, post_capacity) {
                Ok(f) => Some(Arc::new(f)),
                Err(e) => {
                    return self.reply(
                        client,
                        Message::Error {
                            id,
                            code: ErrorCode::Internal,
                            message: e.to_string(),
                        },
                    )
                }
            }
        };
        // Each worker's reader is made before the descriptor leaves: its tail is then the
        // creator's, whatever the consumer writes.
        let mut readers: Vec<Option<PostReader>> = (0..rings)
            .map(|q| posts.as_ref().and_then(|f| PostReader::new(f.clone(), q)))
            .collect();
        let fds = match self.subscription_fds(&file, &waker, posts.as_deref()) {
            Ok(fds) => fds,
            Err(e) => {
                return self.reply(
                    client,
                    Message::Error {
                        id,
                        code: ErrorCode::Internal,
                        message: format!("descriptors of the completion rings: {e}"),
                    },
                )
            }
        };
        for (i, w) in self.workers.iter().enumerate() {
            if let Some(producer) = Producer::new(file.clone(), i as u32) {
                let _ = w.send(Command::Subscribe(Box::new(RingSubscription {
                    pd,
                    id: sub,
                    producer,
                    waker: waker.clone(),
                    posts: readers.get_mut(i).and_then(Option::take),
                })));
            }
        }
        // Checked above; the workers replace an earlier subscription of the domain.
        match self.registry.subscribe(pd, client, sub) {
            Err((code, message)) => {
                return self.reply(client, Message::Error { id, code, message });
            }
            Ok(replaced) => {
                if let Some(old) = replaced {
                    self.subscription_charges.remove(&old);
                }
                self.subscription_charges.insert(sub, charge);
            }
        }
        tracing::info!(
            client,
            pd,
            subscription = sub,
            rings,
            capacity = self.completion_ring,
            post_capacity,
            "completion rings and post queues created"
        );
        let capacity = self.completion_ring;
        self.send_with_fds(
            client,
            Message::Subscribed {
                id,
                pd,
                rings,
                capacity,
                post_capacity,
            },
            fds,
        );
    }

    /// The descriptors of a `Subscribed` answer, in order: the ring file, its eventfd, and
    /// with post queues their file and every worker's doorbell.
    fn subscription_fds(
        &self,
        rings: &RingFile,
        waker: &Waker,
        posts: Option<&PostQueueFile>,
    ) -> std::io::Result<Vec<std::os::fd::OwnedFd>> {
        let mut fds = vec![
            rings.fd().try_clone_to_owned()?,
            waker.fd().try_clone_to_owned()?,
        ];
        if let Some(p) = posts {
            fds.push(p.fd().try_clone_to_owned()?);
            for d in &self.doorbells {
                fds.push(d.fd().try_clone_to_owned()?);
            }
        }
        Ok(fds)
    }

    /// Unsubscribe: the subscription ends (refused unless `client` is the subscriber) and
    /// the workers drop its rings.
    pub(super) fn close_subscription(
        &mut self,
        client: u64,
        pd: u32,
    ) -> Result<(), crate::memory::registry::Refusal> {
        let id = self.registry.unsubscribe(pd, client)?;
        self.subscription_charges.remove(&id);
        for w in &self.workers {
            let _ = w.send(Command::Unsubscribe { pd, id });
        }
        Ok(())
    }

    /// `client` is gone: the workers drop the rings of its subscriptions.
    pub(super) fn close_subscriptions(&mut self, client: u64) {
        for (pd, id) in self.registry.subscriptions_of(client) {
            self.subscription_charges.remove(&id);
            for w in &self.workers {
                let _ = w.send(Command::Unsubscribe { pd, id });
            }
        }
    }
}
