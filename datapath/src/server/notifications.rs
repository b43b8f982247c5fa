//! What the workers report to the control thread: captured frames, flows seen on the wrong
//! queue, and flows that ended (completions go to their consumers through shared memory,
//! not through here).

use super::{Server, FINISHED_KEPT};
use crate::worker::Notification;
use mpa_ctl_proto::Message;

impl Server {
    pub(super) fn notified(&mut self, n: Notification) {
        match n {
            Notification::Captured {
                queue,
                generation,
                batch,
            } => self.captured(queue, generation, batch),
            Notification::Post {
                queue,
                sub,
                pd,
                post,
                forwarding,
            } => {
                forwarding.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                // The owner; a flow nobody has goes back to be refused.
                let owner = self
                    .adopted
                    .get(&post.flow_id)
                    .and_then(|a| a.worker)
                    .filter(|&w| w < self.workers.len())
                    .unwrap_or(queue as usize);
                if let Some(w) = self.workers.get(owner) {
                    let _ = w.send(crate::worker::Command::Post {
                        sub,
                        pd,
                        post: Box::new(post),
                    });
                }
            }
            Notification::Stray {
                queue,
                local,
                remote,
            } => self.move_stray_flow(queue, local, remote),
            Notification::FlowGone {
                flow_id,
                end,
                stats,
                ..
            } => {
                let client = self.adopted.get(&flow_id).map(|a| a.client);
                // The application that owns the flow's domain learns of the end too (when it
                // is not the adopter itself).
                let owner = self
                    .adopted
                    .get(&flow_id)
                    .and_then(|a| a.pd)
                    .and_then(|pd| self.registry.domain_owner(pd))
                    .filter(|&o| Some(o) != client);
                self.forget(flow_id);
                let mpa_error = end.mpa_error.map(mpa::MpaErrorCode::code);
                self.ended.count(mpa_error, end.terminate);
                tracing::info!(flow_id, ?end, ?stats, "flow gone");
                let m = Message::FlowGone {
                    flow_id,
                    mpa_error,
                    terminate: end.terminate,
                    reason: end.reason,
                };
                if let Some(o) = owner {
                    self.reply(o, m.clone());
                }
                if let Some(c) = client {
                    self.reply(c, m);
                }
                if self.finished.len() == FINISHED_KEPT {
                    self.finished.pop_front();
                }
                self.finished.push_back(*stats);
            }
        }
    }
}
