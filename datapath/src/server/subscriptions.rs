//! Completion subscriptions: for each, a sealed memfd of completion rings (one per worker)
//! and an eventfd, made here; each worker gets the producer end of its ring, the consumer
//! gets both descriptors with the `Subscribed` answer (SCM_RIGHTS) and maps the rings. The
//! control thread keeps neither: when the consumer goes (or a new subscriber of the domain
//! replaces it) the workers drop their ends and the memory is released.

use super::{Command, Server};
use crate::memory::completions::RingSubscription;
use mpa_ctl_proto::ring::{Producer, RingFile, Waker};
use mpa_ctl_proto::{ErrorCode, Message};
use std::sync::Arc;

/// Subscriptions (domains) one control client may hold at once: each maps a completion ring
/// per worker (1.5 MiB each by default), so a client subscribing to every domain number
/// would otherwise take memory without bound.
pub const MAX_SUBSCRIPTIONS_PER_CLIENT: usize = 64;

impl Server {
    /// Creates `client`'s subscription to domain `pd` and answers request `id` with its
    /// rings; refused beyond [`MAX_SUBSCRIPTIONS_PER_CLIENT`].
    pub(super) fn open_subscription(&mut self, client: u64, id: u64, pd: u32) {
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
        // The rings come out of the memory budget (docs/limits.md).
        let bytes = u64::from(rings) * mpa_ctl_proto::ring::ring_bytes(self.completion_ring) as u64;
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
        let fds = match (
            file.fd().try_clone_to_owned(),
            waker.fd().try_clone_to_owned(),
        ) {
            (Ok(a), Ok(b)) => vec![a, b],
            (Err(e), _) | (_, Err(e)) => {
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
            "completion rings created"
        );
        let capacity = self.completion_ring;
        self.send_with_fds(
            client,
            Message::Subscribed {
                id,
                pd,
                rings,
                capacity,
            },
            fds,
        );
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
