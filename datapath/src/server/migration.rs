//! Moving a flow between workers. A hand-over cannot know which RX queue RSS will pick for
//! the peer's segments, so it guesses; when a segment of the flow arrives on another queue,
//! that queue's worker reports it (Notification::Stray) and the flow moves there, so that
//! each flow is served by the one worker that sees its segments.

use super::{Command, Server};
use std::net::SocketAddr;
use std::time::Duration;

impl Server {
    /// The worker of `queue` saw a segment of the flow `local` ↔ `remote`: its owner releases
    /// the flow and that worker adopts it. The worker names the 4-tuple as its frames carry it,
    /// i.e. canonical (IPv4, not IPv4-mapped), like the flow's [`mpa_bpf::FlowKey`].
    pub(super) fn move_stray_flow(&mut self, queue: u32, local: SocketAddr, remote: SocketAddr) {
        let q = queue as usize;
        let Some((&flow_id, a)) = self
            .adopted
            .iter_mut()
            .find(|(_, a)| a.key.local() == local && a.key.remote() == remote)
        else {
            return;
        };
        let Some(owner) = a.worker.filter(|w| *w != q && q < self.workers.len()) else {
            return;
        };
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self.workers[owner]
            .send(Command::Release(flow_id, tx))
            .is_err()
        {
            return;
        }
        if let Ok(Some((flow, mark))) = rx.recv_timeout(Duration::from_secs(1)) {
            a.worker = Some(q);
            let _ = self.workers[q].send(Command::Adopt(flow, (local, remote), mark));
            tracing::debug!(flow_id, from = owner, to = q, "flow moved to its RSS queue");
        }
    }
}
