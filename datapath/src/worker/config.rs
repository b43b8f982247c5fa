//! A worker's settings: what the datapath, a run-to-completion driver or a test chooses for
//! one queue, and the polling constants they rest on.

use crate::memory::streaming::StreamingStores;
use mpa_stack::tcp::TcpConfig;
use std::time::Duration;

/// Empty polls before an idle worker blocks in poll() instead of spinning.
pub(super) const SPIN_POLLS: u32 = 256;

/// [`WorkerConfig::yield_every`] by default, the same as a busy-polling consumer's: a yield
/// costs a system call (well under a µs) per 32 empty polls, and a thread woken on the
/// spinner's core waits a few µs at most (docs/latency.md, "Polling and sleeping").
pub const DEFAULT_YIELD_EVERY: u32 = mpa_ctl_proto::ring::SPIN_YIELD_EVERY;

/// Settings of a worker.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// MAC address of the interface (source of our frames).
    pub our_mac: [u8; 6],
    /// TCP settings for every flow.
    pub tcp: TcpConfig,
    /// Keep a digest of the ULPDU octets of each flow.
    pub digest: bool,
    /// Verify TCP checksums (off only where the NIC did it).
    pub verify_checksums: bool,
    /// After the last frame, keep polling without sleeping for this long (on top of
    /// `SPIN_POLLS` empty polls). Zero suits bulk traffic and a shared CPU; a few hundred
    /// µs keep a worker awake between the messages of a request/response load, so that a
    /// frame does not wait for the worker to be woken from poll() (latency for a core).
    pub spin: Duration,
    /// While it spins, every this many empty polls the worker offers its core to any other
    /// runnable thread (`sched_yield`; 0: never). A thread woken on the core of a spinner
    /// that never yields (the peer, the consumer, the kernel's work for either) may wait
    /// until the spinner's time slice ends, hundreds of µs; when nothing else is runnable
    /// the yield returns at once (docs/latency.md, "Polling and sleeping").
    pub yield_every: u32,
    /// Run-to-completion: a turn's TX kick is made at the start of the next turn (or at once
    /// by a post), not at its end, so that the application reads the turn's completions
    /// before the kick's system call — which in copy mode carries the frames through the
    /// peer's stack inside the call (docs/latency.md).
    pub defer_tx_kick: bool,
    /// Take a multi-buffer frame whose descriptors all came in one burst into the decoder's
    /// run descriptor by descriptor, without gathering it (docs/features.md, "Jumbo
    /// frames"). On by default: with each descriptor's payload CRC taken in the checksum's
    /// pass it measured 1.08–1.14× the gathered path; `false` gathers every chain.
    pub chains_in_pieces: bool,
    /// Which regions take long messages with streaming stores (docs/features.md,
    /// "Streaming stores").
    pub streaming_stores: StreamingStores,
}

impl WorkerConfig {
    /// The datapath's defaults for an interface of MAC `our_mac`: default TCP settings, no
    /// digest, TCP checksums verified, sleeping when idle and yielding while spinning, kicks
    /// made at once, jumbo chains gathered, ordinary stores.
    pub fn new(our_mac: [u8; 6]) -> Self {
        WorkerConfig {
            our_mac,
            tcp: TcpConfig::default(),
            digest: false,
            verify_checksums: true,
            spin: Duration::ZERO,
            yield_every: DEFAULT_YIELD_EVERY,
            defer_tx_kick: false,
            chains_in_pieces: true,
            streaming_stores: StreamingStores::default(),
        }
    }
}
