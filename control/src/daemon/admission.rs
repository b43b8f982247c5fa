//! Admission: whether an accepted connection may start a setup (`max_connections`,
//! `max_connections_per_source`, the datapath reachable), and the slot it holds until its
//! frozen socket is closed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// State shared by the listeners and the link.
#[derive(Debug)]
pub(super) struct Shared {
    /// The link holds a working datapath connection.
    pub(super) up: AtomicBool,
    /// Connections in setup plus handed over (frozen sockets held).
    pub(super) active: AtomicUsize,
    pub(super) max: usize,
    /// Connections taken per peer address (entries removed at zero), at most `per_source`.
    pub(super) by_source: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
    pub(super) per_source: usize,
}

/// One of `max_connections`, taken for `peer`; given back when dropped.
#[derive(Debug)]
pub(super) struct Slot(Arc<Shared>, SocketAddr);

/// Why no slot was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NoSlot {
    /// `max_connections` are taken.
    Full,
    /// `max_connections_per_source` are taken by the peer's address.
    Source,
}

impl Slot {
    pub(super) fn take(shared: &Arc<Shared>, peer: SocketAddr) -> Result<Slot, NoSlot> {
        let ip = peer.ip().to_canonical();
        // The global limit first: when every slot is taken, that is the reason.
        if shared.active.fetch_add(1, Ordering::AcqRel) >= shared.max {
            shared.active.fetch_sub(1, Ordering::AcqRel);
            return Err(NoSlot::Full);
        }
        let mut by = shared.by_source.lock().unwrap_or_else(|e| e.into_inner());
        let n = by.entry(ip).or_insert(0);
        if *n >= shared.per_source {
            if *n == 0 {
                by.remove(&ip);
            }
            drop(by);
            shared.active.fetch_sub(1, Ordering::AcqRel);
            return Err(NoSlot::Source);
        }
        *n += 1;
        Ok(Slot(shared.clone(), peer))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        {
            let mut by = self.0.by_source.lock().unwrap_or_else(|e| e.into_inner());
            let ip = self.1.ip().to_canonical();
            if let Some(n) = by.get_mut(&ip) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    by.remove(&ip);
                }
            }
        }
        let before = self.0.active.fetch_sub(1, Ordering::AcqRel);
        // The moment the slot is free again (what a client waiting for room can wait for;
        // the setup's own outcome is logged before its thread lets go of the slot).
        tracing::debug!(peer = %self.1, active = before.saturating_sub(1), "slot given back");
    }
}
