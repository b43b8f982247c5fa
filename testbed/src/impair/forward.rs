//! The forwarder thread: enters the bridge namespace, binds a packet socket to each of `ra`
//! and `rb`, and moves frames between them through one [`Shaper`] per direction, in batches.
//! One thread for both directions (the machine has 2 cores, shared with the sender and the
//! datapath); it waits in ppoll until a socket is readable or the next held frame is due,
//! at most [`TICK_US`], so that a stop request is seen within that time.

use super::packet::{ifindex, wait_readable, wait_writable, PacketSocket, MAX_BATCH};
use super::{ImpairStats, Impairment, Shaper};
use crate::BedError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest wait in one ppoll (µs): the bound on noticing a stop request.
const TICK_US: u64 = 10_000;
/// How long start-up and stop may take before they are reported as failed.
const START_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Socket buffer each way (octets).
const SOCKET_BUFFER: usize = 8 << 20;
/// How long to wait for room in a full send buffer before counting the frame as lost.
const SEND_WAIT_US: u64 = 5_000;
/// Buffers kept for reuse.
const POOL: usize = 4 * MAX_BATCH;

/// A running forwarder; stopping (or dropping) it stops and joins the thread.
#[derive(Debug)]
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<ImpairStats>>,
    /// In a mutex only so that the bed is `Sync` (only `stop`, with `&mut`, uses it).
    done: Mutex<mpsc::Receiver<()>>,
    handle: Option<JoinHandle<()>>,
}

/// Sends on drop, so the owner learns that the thread ended even if it panicked.
struct Done(mpsc::SyncSender<()>);

impl Drop for Done {
    fn drop(&mut self) {
        let _ = self.0.try_send(());
    }
}

impl Forwarder {
    /// Starts forwarding between interfaces `if_a` (towards a) and `if_b` of namespace `ns`;
    /// returns once both sockets are bound. `mtu` sizes the buffers; `loss_port` is the bed's.
    pub fn start(
        ns: &str,
        if_a: &str,
        if_b: &str,
        imp: &Impairment,
        mtu: u32,
        loss_port: u16,
    ) -> Result<Forwarder, BedError> {
        let file = std::fs::File::open(format!("/var/run/netns/{ns}")).map_err(|source| {
            BedError::Spawn {
                cmd: format!("open namespace {ns}"),
                source,
            }
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(ImpairStats::default()));
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<(), String>>(1);
        let (done_tx, done) = mpsc::sync_channel(1);
        let shapers = [
            Shaper::new(imp, true, loss_port),
            Shaper::new(imp, false, loss_port),
        ];
        // Ethernet header, one VLAN tag, and room for what a veth may deliver above the MTU.
        let slot = mtu as usize + 14 + 4 + 64;
        let (ns_name, names) = (ns.to_string(), [if_a.to_string(), if_b.to_string()]);
        let (stop2, stats2) = (stop.clone(), stats.clone());
        let handle = std::thread::Builder::new()
            .name(format!("impair-{ns}"))
            .spawn(move || {
                let _done = Done(done_tx);
                let socks = crate::netns::join(&file, &ns_name)
                    .map_err(|e| e.to_string())
                    .and_then(|()| {
                        let bind = |n: &str| {
                            ifindex(n)
                                .and_then(|i| PacketSocket::bind(i, SOCKET_BUFFER))
                                .map_err(|e| format!("packet socket on {n}: {e}"))
                        };
                        Ok([bind(&names[0])?, bind(&names[1])?])
                    });
                match socks {
                    Ok(socks) => {
                        let _ = ready_tx.send(Ok(()));
                        run(&socks, shapers, slot, &stop2, &stats2);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })
            .map_err(|source| BedError::Spawn {
                cmd: "impairment forwarder thread".into(),
                source,
            })?;
        let mut fwd = Forwarder {
            stop,
            stats,
            done: Mutex::new(done),
            handle: Some(handle),
        };
        let started = match ready_rx.recv_timeout(START_TIMEOUT) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(format!("no start-up report: {e}")),
        };
        if let Err(e) = started {
            fwd.stop();
            return Err(BedError::Config(format!(
                "impairment forwarder in {ns}: {e}"
            )));
        }
        tracing::debug!(ns, a_to_b = %imp.a_to_b, b_to_a = %imp.b_to_a, seed = imp.seed, "impairment forwarder up");
        Ok(fwd)
    }

    /// What the forwarder did so far (updated after every batch).
    pub fn stats(&self) -> ImpairStats {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops and joins the thread (waits at most [`STOP_TIMEOUT`]; a thread that does not end
    /// by then is reported and left detached rather than hanging the caller).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let Some(h) = self.handle.take() else {
            return;
        };
        let done = self.done.get_mut().unwrap_or_else(|p| p.into_inner());
        match done.recv_timeout(STOP_TIMEOUT) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                if h.join().is_err() {
                    tracing::warn!("impairment forwarder panicked");
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                tracing::warn!("impairment forwarder did not stop within {STOP_TIMEOUT:?}");
            }
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The loop: receive a batch from each readable socket, shape, send what is due, wait.
fn run(
    socks: &[PacketSocket; 2],
    mut shapers: [Shaper; 2],
    slot: usize,
    stop: &AtomicBool,
    stats: &Mutex<ImpairStats>,
) {
    let t0 = Instant::now();
    let now = || t0.elapsed().as_micros() as u64;
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut rx: Vec<Vec<u8>> = (0..MAX_BATCH).map(|_| Vec::with_capacity(slot)).collect();
    let mut trunc = [false; MAX_BATCH];
    let mut tx: Vec<Vec<u8>> = Vec::with_capacity(MAX_BATCH);
    let mut readable = [true, true];
    let mut last_drops = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let mut full = false;
        for d in 0..2 {
            if !readable[d] {
                continue;
            }
            let n = match socks[d].recv_batch(&mut rx, &mut trunc) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(%e, "impairment forwarder receive");
                    0
                }
            };
            full |= n == MAX_BATCH;
            let t = now();
            for i in 0..n {
                let mut fresh = pool.pop().unwrap_or_else(|| Vec::with_capacity(slot));
                fresh.reserve(slot);
                let frame = std::mem::replace(&mut rx[i], fresh);
                if trunc[i] {
                    shapers[d].stats_mut().truncated += 1;
                    recycle(&mut pool, frame);
                } else if let Some(f) = shapers[d].push(t, frame) {
                    recycle(&mut pool, f);
                }
            }
        }
        let t = now();
        for d in 0..2 {
            // Frames received on socket d leave through the other one.
            loop {
                while tx.len() < MAX_BATCH {
                    match shapers[d].pop(t) {
                        Some(f) => tx.push(f),
                        None => break,
                    }
                }
                if tx.is_empty() {
                    break;
                }
                send_all(&socks[1 - d], &mut tx, &mut shapers[d], stop);
                for f in tx.drain(..) {
                    recycle(&mut pool, f);
                }
            }
        }
        if last_drops.elapsed() >= Duration::from_millis(50) {
            last_drops = Instant::now();
            for d in 0..2 {
                shapers[d].stats_mut().socket_drops += socks[d].drops().unwrap_or(0);
            }
        }
        publish(stats, &shapers);
        if full {
            // More may be waiting: read again before sleeping.
            readable = [true, true];
            continue;
        }
        let t = now();
        let wait = shapers
            .iter()
            .filter_map(Shaper::next_due)
            .min()
            .map_or(TICK_US, |due| due.saturating_sub(t).min(TICK_US));
        readable = if wait == 0 {
            [true, true]
        } else {
            wait_readable([&socks[0], &socks[1]], wait).unwrap_or([true, true])
        };
    }
    for d in 0..2 {
        shapers[d].stats_mut().socket_drops += socks[d].drops().unwrap_or(0);
    }
    publish(stats, &shapers);
}

fn recycle(pool: &mut Vec<Vec<u8>>, f: Vec<u8>) {
    if pool.len() < POOL {
        pool.push(f);
    }
}

fn publish(stats: &Mutex<ImpairStats>, shapers: &[Shaper; 2]) {
    let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
    s.a_to_b = *shapers[0].stats();
    s.b_to_a = *shapers[1].stats();
}

/// Sends every frame of `tx`; a frame the kernel refuses (or that finds no room within
/// [`SEND_WAIT_US`]) is counted as a send error and skipped.
fn send_all(sock: &PacketSocket, tx: &mut [Vec<u8>], shaper: &mut Shaper, stop: &AtomicBool) {
    let mut at = 0;
    while at < tx.len() && !stop.load(Ordering::Relaxed) {
        match sock.send_batch(&tx[at..]) {
            Ok(n) if n > 0 => {
                at += n;
                shaper.stats_mut().forwarded += n as u64;
            }
            Ok(_) => at += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if !wait_writable(sock, SEND_WAIT_US).unwrap_or(false) {
                    shaper.stats_mut().send_errors += 1;
                    at += 1;
                }
            }
            Err(e) => {
                tracing::trace!(%e, "impairment forwarder send");
                shaper.stats_mut().send_errors += 1;
                at += 1;
            }
        }
    }
}
