//! One AF_XDP socket per RX queue, with its own UMEM and all four rings (s2n-quic-xdp style:
//! one struct owns the UMEM and its rings, so "frames belong to this UMEM" holds by
//! construction). The xsk-rs ring calls are unsafe because the caller must hand back only
//! descriptors of the same UMEM, which the ownership here guarantees. One of the crate's two
//! `unsafe` boundaries (the other is `region`, the registered memory).

use crate::io::chain::{self, reuse_descs, Chain, RxFrames, XDP_PKT_CONTD};
use crate::io::ring::{FrameRing, RingStats};
use std::num::NonZeroU32;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Arc;
use xsk_rs::config::{
    BindFlags, FrameSize, Interface, LibxdpFlags, QueueSize, SocketConfig, UmemConfig,
};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem};

/// How the socket binds (docs/environment.md: veth supports copy mode only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    /// Let the kernel choose (zero-copy when the driver supports it).
    Auto,
    /// Force copy mode.
    Copy,
    /// Require zero-copy (fails on drivers without it).
    ZeroCopy,
}

impl std::str::FromStr for BindMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(BindMode::Auto),
            "copy" => Ok(BindMode::Copy),
            "zerocopy" => Ok(BindMode::ZeroCopy),
            o => Err(format!("bind mode {o:?}: expected auto, copy or zerocopy")),
        }
    }
}

/// Sizes and modes of one queue's socket.
#[derive(Debug, Clone)]
pub struct XskConfig {
    /// UMEM frames (half for RX through the fill ring, half for TX).
    pub frames: u32,
    /// Octets per frame (2048 or 4096).
    pub frame_size: u32,
    /// Entries of each ring (power of two).
    pub ring_size: u32,
    /// Bind mode.
    pub bind_mode: BindMode,
    /// Whether the UMEM goes on huge pages.
    pub huge_pages: HugePages,
    /// Preferred busy polling (SO_PREFER_BUSY_POLL + SO_BUSY_POLL µs + SO_BUSY_POLL_BUDGET):
    /// the kernel runs the driver's NAPI from our wakeups instead of interrupts. Off: `None`.
    pub busy_poll: Option<BusyPoll>,
}

/// Huge pages for the UMEM: a 4 KiB page per frame costs a TLB miss at each frame's first
/// touch; a 2 MiB page covers 512 frames (docs/nics.md, "6. Zero-copy, huge pages, busy
/// polling").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum HugePages {
    /// On huge pages where the system has enough free, else on normal pages (logged).
    Auto,
    /// On huge pages, or fail naming how many are needed.
    On,
    /// On normal pages.
    #[default]
    Off,
}

/// Busy-polling parameters of an AF_XDP socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusyPoll {
    /// SO_BUSY_POLL: microseconds to busy-poll in a blocking call.
    pub usecs: u32,
    /// SO_BUSY_POLL_BUDGET: packets per busy-poll round.
    pub budget: u32,
}

/// Socket options for busy polling (Linux <asm-generic/socket.h>).
mod busy_poll_opts {
    use nix::libc;
    use nix::{setsockopt_impl, sockopt_impl};
    const SO_BUSY_POLL: i32 = 46;
    const SO_PREFER_BUSY_POLL: i32 = 69;
    const SO_BUSY_POLL_BUDGET: i32 = 70;
    sockopt_impl!(BusyPollUsecs, SetOnly, libc::SOL_SOCKET, SO_BUSY_POLL, i32);
    sockopt_impl!(
        PreferBusyPoll,
        SetOnly,
        libc::SOL_SOCKET,
        SO_PREFER_BUSY_POLL,
        i32
    );
    sockopt_impl!(
        BusyPollBudget,
        SetOnly,
        libc::SOL_SOCKET,
        SO_BUSY_POLL_BUDGET,
        i32
    );
}
use busy_poll_opts::{BusyPollBudget, BusyPollUsecs, PreferBusyPoll};

/// `getsockopt(SOL_XDP, XDP_OPTIONS)`: the mode the kernel bound the socket in
/// (<linux/if_xdp.h>: `struct xdp_options { __u32 flags; }`, `XDP_OPTIONS_ZEROCOPY`).
mod xdp_options {
    use nix::libc;
    use nix::{getsockopt_impl, sockopt_impl};
    const SOL_XDP: i32 = 283;
    const XDP_OPTIONS: i32 = 8;
    pub(super) const XDP_OPTIONS_ZEROCOPY: u32 = 1;
    sockopt_impl!(XdpOptions, GetOnly, SOL_XDP, XDP_OPTIONS, u32);
}

/// The driver behind `iface`, as sysfs names it (`/sys/class/net/IF/device/driver`); `None`
/// for a virtual interface without a device (veth, bridges).
pub fn driver_of(iface: &str) -> Option<String> {
    let link = std::fs::read_link(format!("/sys/class/net/{iface}/device/driver")).ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

impl XskConfig {
    /// Octets per UMEM frame by default: a page.
    pub const DEFAULT_FRAME_SIZE: u32 = 4096;
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            frames: 8192,
            frame_size: Self::DEFAULT_FRAME_SIZE,
            ring_size: 2048,
            bind_mode: BindMode::Auto,
            huge_pages: HugePages::Off,
            busy_poll: None,
        }
    }
}

/// Why a socket could not be opened or driven.
#[derive(Debug, thiserror::Error)]
pub enum XskError {
    /// A configuration value the kernel will not take.
    #[error("AF_XDP configuration: {0}")]
    Config(String),
    /// UMEM creation failed (over 8 MiB needs CAP_IPC_LOCK: docs/environment.md).
    #[error("UMEM of {frames} frames × {frame_size} octets: {detail}")]
    Umem {
        /// Frames asked for.
        frames: u32,
        /// Frame size.
        frame_size: u32,
        /// What failed.
        detail: String,
    },
    /// Socket creation or bind failed.
    #[error("AF_XDP socket on {iface} queue {queue} ({mode:?}): {detail}")]
    Socket {
        /// Interface.
        iface: String,
        /// Queue.
        queue: u32,
        /// Bind mode.
        mode: BindMode,
        /// What failed.
        detail: String,
    },
    /// A ring operation failed.
    #[error("AF_XDP ring I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// Counters of one queue's socket.
type XskStats = RingStats;

/// One AF_XDP socket with its UMEM.
pub struct XskQueue {
    queue: u32,
    // The rings hold raw pointers into the UMEM's memory. They stay valid whatever the drop
    // order here: xsk-rs's `Umem` is a reference-counted handle and every ring keeps a clone,
    // so the mapping goes only when the last ring is gone.
    umem: Umem,
    fill: FillQueue,
    comp: CompQueue,
    rx: RxQueue,
    tx: TxQueue,
    tx_free: Vec<FrameDesc>,
    tx_pending: Vec<FrameDesc>,
    /// RX frames the fill ring did not take yet (given back first on the next burst).
    fill_pending: Vec<FrameDesc>,
    rx_descs: Vec<FrameDesc>,
    /// The current burst's frames as the worker sees them (emptied between bursts).
    rx_octets: Vec<(&'static [u8], bool)>,
    comp_descs: Vec<FrameDesc>,
    /// Gathers frames that arrive in several descriptors (multi-buffer, jumbo frames).
    chain: Chain,
    /// Bound with XDP_USE_SG: frames larger than a UMEM frame arrive as descriptor chains.
    multi_buffer: bool,
    /// Octets of packet data a UMEM frame holds (frame size less the XDP headroom).
    frame_data: usize,
    stats: XskStats,
    /// Wakes the worker out of its idle poll() when a command arrives.
    wake: Arc<nix::sys::eventfd::EventFd>,
    /// The post queues' doorbell (an eventfd consumers write when the worker sleeps with
    /// posts waiting): waited on beside the socket, drained after a wake-up.
    doorbell: Option<std::os::fd::OwnedFd>,
}

/// Interrupts an idle [`XskQueue::rx_burst`] wait (from another thread).
#[derive(Debug, Clone)]
pub(crate) struct Waker(Arc<nix::sys::eventfd::EventFd>);

impl Waker {
    /// Makes the current or next idle wait return at once.
    pub(crate) fn wake(&self) {
        let _ = self.0.write(1);
    }
}

impl std::fmt::Debug for XskQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XskQueue")
            .field("queue", &self.queue)
            .field("stats", &self.stats)
            .finish()
    }
}

const BURST: usize = 64;

/// The fewest UMEM frames a socket takes: half go to RX, half to TX, and each half must hold
/// two bursts, one in the kernel's hands while the worker has the other; with fewer a
/// datapath would start and then neither receive nor send.
pub const MIN_FRAMES: u32 = 4 * BURST as u32;

/// XDP_PACKET_HEADROOM (linux/bpf.h): the part of each UMEM frame before the packet data.
pub(crate) const XDP_PACKET_HEADROOM: u32 = 256;

impl AsFd for XskQueue {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor belongs to the socket this XskQueue owns; it stays open for
        // as long as `self` (and so the returned borrow) lives.
        unsafe { BorrowedFd::borrow_raw(self.rx.fd().as_raw_fd()) }
    }
}

impl XskQueue {
    /// Opens and binds a socket on `iface` queue `queue`, with need_wakeup, without letting
    /// libxdp load its own program (docs/environment.md: ours steers; libxdp's would take ARP too).
    pub fn open(iface: &str, queue: u32, cfg: &XskConfig) -> Result<Self, XskError> {
        let bad = |e: &dyn std::fmt::Display| XskError::Config(e.to_string());
        let ring = QueueSize::new(cfg.ring_size).map_err(|e| bad(&e))?;
        // The fill ring holds every RX frame (half the UMEM) at once.
        let fill_ring =
            QueueSize::new((cfg.frames / 2).max(1).next_power_of_two()).map_err(|e| bad(&e))?;
        let umem_cfg = UmemConfig::builder()
            .frame_size(FrameSize::new(cfg.frame_size).map_err(|e| bad(&e))?)
            .fill_queue_size(fill_ring)
            .comp_queue_size(ring)
            .build()
            .map_err(|e| bad(&e))?;
        let frames = NonZeroU32::new(cfg.frames)
            .filter(|f| f.get() >= MIN_FRAMES)
            .ok_or_else(|| {
                XskError::Config(format!(
                    "{} frames: at least {MIN_FRAMES} (half for RX, half for TX)",
                    cfg.frames
                ))
            })?;
        let umem_err = |detail: String| XskError::Umem {
            frames: cfg.frames,
            frame_size: cfg.frame_size,
            detail,
        };
        let huge_needed = (u64::from(cfg.frames) * u64::from(cfg.frame_size)).div_ceil(2 << 20);
        let no_huge = |e: &dyn std::fmt::Debug| {
            format!(
                "no huge pages for it ({e:?}): it needs {huge_needed} free 2 MiB pages \
                 (HugePages_Free in /proc/meminfo; reserve them with vm.nr_hugepages)"
            )
        };
        let ((umem, mut descs), huge) = match cfg.huge_pages {
            HugePages::Off => (
                Umem::new(umem_cfg, frames, false).map_err(|e| umem_err(format!("{e:?}")))?,
                false,
            ),
            HugePages::On => (
                Umem::new(umem_cfg, frames, true).map_err(|e| umem_err(no_huge(&e)))?,
                true,
            ),
            HugePages::Auto => match Umem::new(umem_cfg, frames, true) {
                Ok(u) => (u, true),
                Err(e) => {
                    tracing::info!(iface, queue, reason = %no_huge(&e), "UMEM on normal pages");
                    (
                        Umem::new(umem_cfg, frames, false)
                            .map_err(|e| umem_err(format!("{e:?}")))?,
                        false,
                    )
                }
            },
        };
        let sock_cfg = |flags: BindFlags| {
            SocketConfig::builder()
                .rx_queue_size(ring)
                .tx_queue_size(ring)
                .libxdp_flags(LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD)
                .bind_flags(flags)
                .build()
        };
        let sock_err = |detail: String| XskError::Socket {
            iface: iface.to_string(),
            queue,
            mode: cfg.bind_mode,
            detail,
        };
        let ifname: Interface = iface.parse().map_err(|e| sock_err(format!("{e:?}")))?;
        // Binds in `mode` with need_wakeup, with multi-buffer (XDP_USE_SG, Linux 6.6) when
        // the driver takes it, so that frames larger than a UMEM frame (jumbo MTUs) arrive as
        // descriptor chains instead of being dropped. Copy mode always has it; a zero-copy
        // driver without it refuses (EOPNOTSUPP), and the socket is then bound without:
        // frames up to a UMEM frame only.
        let bind = |mode: BindFlags| {
            let base = mode | BindFlags::XDP_USE_NEED_WAKEUP;
            // SAFETY: the UMEM outlives the socket: the returned XskQueue owns both, and the
            // rings keep their own reference to the UMEM (xsk-rs's `Umem` is
            // reference-counted), so the memory stays mapped for as long as any ring exists.
            match unsafe {
                Socket::new(
                    sock_cfg(base | BindFlags::XDP_USE_SG),
                    &umem,
                    &ifname,
                    queue,
                )
            } {
                Ok(s) => Ok((s, true)),
                Err(sg) => {
                    // SAFETY: as above.
                    match unsafe { Socket::new(sock_cfg(base), &umem, &ifname, queue) } {
                        Ok(s) => {
                            tracing::warn!(iface, queue, error = ?sg,
                                "AF_XDP bind with XDP_USE_SG failed; bound without: no frames above a UMEM frame");
                            Ok((s, false))
                        }
                        Err(e) => Err(format!("{e:?}")),
                    }
                }
            }
        };
        let zero_copy_refused = |why: String| {
            let driver = driver_of(iface).map_or_else(
                || "no driver in sysfs (a virtual interface)".to_string(),
                |d| format!("driver {d}"),
            );
            format!(
                "zero-copy refused ({driver}): {why}; zero-copy needs a driver with AF_XDP \
                 zero-copy support and XDP attached in native mode (docs/environment.md)"
            )
        };
        let ((tx, rx, fq_cq), multi_buffer) = match cfg.bind_mode {
            BindMode::Copy => bind(BindFlags::XDP_COPY).map_err(sock_err)?,
            BindMode::ZeroCopy => {
                bind(BindFlags::XDP_ZEROCOPY).map_err(|why| sock_err(zero_copy_refused(why)))?
            }
            // Zero-copy where the driver has it, else copy mode, saying why.
            BindMode::Auto => match bind(BindFlags::XDP_ZEROCOPY) {
                Ok(b) => b,
                Err(why) => {
                    tracing::info!(iface, queue, reason = %zero_copy_refused(why),
                        "AF_XDP socket in copy mode");
                    bind(BindFlags::XDP_COPY).map_err(sock_err)?
                }
            },
        };
        let (mut fill, comp) =
            fq_cq.ok_or_else(|| sock_err("no fill/completion ring (UMEM already bound)".into()))?;
        let tx_free = descs.split_off(descs.len() / 2);
        // SAFETY: every descriptor comes from this UMEM and none is in use elsewhere.
        let n = unsafe { fill.produce(&descs) };
        if n != descs.len() {
            return Err(sock_err(format!(
                "fill ring took {n} of {} frames",
                descs.len()
            )));
        }
        let mut q = XskQueue {
            queue,
            umem,
            fill,
            comp,
            rx,
            tx,
            tx_pending: Vec::with_capacity(tx_free.len()),
            tx_free,
            fill_pending: Vec::with_capacity(BURST),
            rx_descs: vec![FrameDesc::default(); BURST],
            rx_octets: Vec::with_capacity(BURST),
            comp_descs: vec![FrameDesc::default(); BURST],
            chain: Chain::default(),
            multi_buffer,
            frame_data: cfg.frame_size.saturating_sub(XDP_PACKET_HEADROOM) as usize,
            stats: XskStats::default(),
            wake: Arc::new(
                nix::sys::eventfd::EventFd::from_flags(
                    nix::sys::eventfd::EfdFlags::EFD_NONBLOCK
                        | nix::sys::eventfd::EfdFlags::EFD_CLOEXEC,
                )
                .map_err(|e| XskError::Config(format!("eventfd: {e}")))?,
            ),
            doorbell: None,
        };
        // libxdp opens the socket without O_CLOEXEC: a child process (a helper the datapath
        // spawns) would otherwise keep the queue bound after we close it.
        nix::fcntl::fcntl(
            &q,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )
        .map_err(|e| sock_err(format!("FD_CLOEXEC: {e}")))?;
        if let Some(bp) = cfg.busy_poll {
            let set = |what: &str, r: nix::Result<()>| {
                r.map_err(|e| {
                    sock_err(format!(
                        "{what}: {e} (needs CAP_NET_ADMIN and kernel ≥ 5.11)"
                    ))
                })
            };
            set(
                "SO_PREFER_BUSY_POLL",
                nix::sys::socket::setsockopt(&q, PreferBusyPoll, &1),
            )?;
            let usecs =
                i32::try_from(bp.usecs).map_err(|_| XskError::Config("busy-poll µs".into()))?;
            set(
                "SO_BUSY_POLL",
                nix::sys::socket::setsockopt(&q, BusyPollUsecs, &usecs),
            )?;
            let budget = i32::try_from(bp.budget)
                .map_err(|_| XskError::Config("busy-poll budget".into()))?;
            set(
                "SO_BUSY_POLL_BUDGET",
                nix::sys::socket::setsockopt(&q, BusyPollBudget, &budget),
            )?;
        }
        // The mode the kernel actually bound (auto may have fallen back to copy).
        let options = nix::sys::socket::getsockopt(&q, xdp_options::XdpOptions)
            .map_err(|e| sock_err(format!("XDP_OPTIONS: {e}")))?;
        q.stats.zero_copy = options & xdp_options::XDP_OPTIONS_ZEROCOPY != 0;
        q.stats.multi_buffer = q.multi_buffer;
        q.stats.huge_pages = huge;
        tracing::info!(
            iface,
            queue,
            mode = if q.stats.zero_copy {
                "zero-copy"
            } else {
                "copy"
            },
            multi_buffer = q.multi_buffer,
            huge_pages = huge,
            "AF_XDP socket bound"
        );
        Ok(q)
    }

    /// The queue this socket serves.
    pub(crate) fn queue(&self) -> u32 {
        self.queue
    }

    /// The largest frame (octets) this socket receives: the gather limit with multi-buffer,
    /// else a UMEM frame less the XDP headroom.
    pub(crate) fn max_rx_frame(&self) -> usize {
        if self.multi_buffer {
            self.chain.max_frame()
        } else {
            self.frame_data
        }
    }

    /// Receives frames of up to `octets` (at least [`chain::MAX_FRAME`]; the interface's MTU
    /// with its link header when larger), gathered from as many descriptors as that takes.
    pub(crate) fn set_max_rx_frame(&mut self, octets: usize) {
        let octets = octets.max(chain::MAX_FRAME);
        let descs = octets
            .div_ceil(self.frame_data.max(1))
            .max(chain::MAX_DESCS);
        if octets != self.chain.max_frame() || descs != self.chain.max_descs() {
            self.chain = Chain::new(octets, descs);
        }
    }

    /// Idle waits also end when `fd` (an eventfd: the post queues' doorbell) is written.
    pub(crate) fn set_doorbell(&mut self, fd: std::os::fd::OwnedFd) {
        self.doorbell = Some(fd);
    }

    /// A handle that interrupts this queue's idle waits.
    pub(crate) fn waker(&self) -> Waker {
        Waker(self.wake.clone())
    }

    /// Waits up to `timeout_ms` for received frames or a wake-up; true when frames may be
    /// there.
    fn wait(&mut self, timeout_ms: i32) -> Result<bool, XskError> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [
            PollFd::new(self.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.wake.as_fd(), PollFlags::POLLIN),
            PollFd::new(
                self.doorbell
                    .as_ref()
                    .map_or(self.wake.as_fd(), |d| d.as_fd()),
                PollFlags::POLLIN,
            ),
        ];
        let t = PollTimeout::try_from(timeout_ms).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, t) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => return Ok(false),
            Err(e) => return Err(XskError::Io(std::io::Error::from(e))),
        }
        let ready = |f: &PollFd| f.revents().is_some_and(|r| r.contains(PollFlags::POLLIN));
        let (socket, wake, bell) = (ready(&fds[0]), ready(&fds[1]), ready(&fds[2]));
        if wake {
            let _ = self.wake.read();
        }
        if bell {
            if let Some(d) = &self.doorbell {
                mpa_ctl_proto::ring::drain_eventfd(d.as_fd());
            }
        }
        Ok(socket)
    }

    /// Counters.
    pub fn stats(&self) -> XskStats {
        self.stats
    }

    /// Receives up to one burst, waiting at most `timeout_ms` (0: no syscall) and hands each
    /// frame to `f`, then gives the frames back to the fill ring. Returns the frame count.
    pub fn rx_burst_frames<T>(
        &mut self,
        timeout_ms: i32,
        f: impl for<'u, 's> FnOnce(&mut RxFrames<'u, 's>) -> T,
    ) -> Result<(usize, T), XskError> {
        // Busy: take what the ring holds without a syscall. Idle: block in poll() up to
        // `timeout_ms`, so that an idle worker leaves the CPU to others.
        // SAFETY: `rx_descs` is ours; the ring writes descriptors of this UMEM into it.
        let mut n = unsafe { self.rx.consume(&mut self.rx_descs) };
        if n == 0 && timeout_ms > 0 {
            self.stats.rx_waits += 1;
        }
        if n == 0 && timeout_ms > 0 && self.wait(timeout_ms)? {
            // SAFETY: as above.
            n = unsafe { self.rx.consume(&mut self.rx_descs) };
        }
        self.stats.count_burst(n, self.rx_descs.len());
        let umem = &self.umem;
        let mut descs = reuse_descs(std::mem::take(&mut self.rx_octets));
        descs.extend(self.rx_descs[..n].iter().map(|d| {
            // SAFETY: the descriptor was just consumed from this socket's RX ring, so the
            // frame belongs to this UMEM and the kernel no longer writes to it until we give
            // it back to the fill ring below, after `f` returned and `descs` was emptied (`f`
            // cannot keep a frame: it is generic over the frames' lifetime).
            let data = unsafe { umem.data(d) };
            (data.contents(), d.options() & XDP_PKT_CONTD != 0)
        }));
        let mut frames = RxFrames::new(
            &mut self.chain,
            &descs,
            self.rx_descs.len(),
            &mut self.stats,
        );
        let t = f(&mut frames);
        frames.finish();
        self.rx_octets = reuse_descs(descs);
        // Every descriptor of the burst goes back exactly once, whatever became of its
        // frame (delivered in place, gathered, or part of a dropped chain): `deliver` keeps
        // none, an open chain's octets are already in its scratch buffer.
        if n > 0 || !self.fill_pending.is_empty() {
            self.fill_pending.extend_from_slice(&self.rx_descs[..n]);
            // SAFETY: these frames came from this UMEM's RX ring (now or in an earlier burst
            // whose fill fell short) and nothing refers to them any more (`f` only borrowed
            // them).
            let m = unsafe { self.fill.produce(&self.fill_pending) };
            if m == self.fill_pending.len() {
                self.fill_pending.clear();
            } else {
                // The ring had no room for all (xsk-rs reserves all or nothing): keep the
                // rest for the next burst rather than lose them from the UMEM.
                self.fill_pending.drain(..m);
            }
            if self.fill.needs_wakeup() {
                self.stats.wakeups += 1;
                self.fill.wakeup(self.rx.fd_mut(), 0)?;
            }
        }
        Ok((n, t))
    }

    /// [`XskQueue::rx_burst_frames`] handing each frame to `f` in turn.
    pub fn rx_burst(&mut self, timeout_ms: i32, f: impl FnMut(&[u8])) -> Result<usize, XskError> {
        FrameRing::rx_burst(self, timeout_ms, f)
    }

    /// Builds a frame in place in a free TX frame (`build` writes it and returns its length,
    /// 0 to leave the frame free) and queues it; `false` when no frame is free (the caller's
    /// retransmission logic covers the loss) or nothing was built.
    pub(crate) fn send_with(&mut self, build: impl FnOnce(&mut [u8]) -> usize) -> bool {
        self.reclaim();
        if self.tx_free.is_empty() && !self.tx_pending.is_empty() {
            // Out of frames in a long pass (thousands of flows each sending): hand what is
            // queued to the kernel now and take back what it finished, rather than drop.
            let _ = self.flush();
            self.reclaim();
        }
        let Some(mut d) = self.tx_free.pop() else {
            self.stats.tx_no_frame += 1;
            return false;
        };
        // SAFETY: `d` came from this UMEM's free list: the kernel is not using the frame.
        let mut data = unsafe { self.umem.data_mut(&mut d) };
        // The whole frame as the buffer (the cursor sets the descriptor's length), then its
        // length as built.
        let cap = {
            let mut cur = data.cursor();
            let cap = cur.buf_len();
            cur.set_pos(cap);
            cap
        };
        let n = build(data.contents_mut()).min(cap);
        data.cursor().set_pos(n);
        if n == 0 {
            self.tx_free.push(d);
            return false;
        }
        self.stats.tx_frames += 1;
        self.stats.tx_octets += n as u64;
        self.tx_pending.push(d);
        true
    }

    /// TX frames free now (after taking back those the kernel finished).
    pub(crate) fn tx_room(&mut self) -> usize {
        self.reclaim();
        self.tx_free.len()
    }

    /// Hands every queued TX frame to the kernel and kicks it when it asks for a wakeup.
    pub fn flush(&mut self) -> Result<(), XskError> {
        let mut off = 0;
        let mut spins = 0;
        while off < self.tx_pending.len() {
            // SAFETY: pending descriptors belong to this UMEM and hold complete packets.
            let k = unsafe { self.tx.produce(&self.tx_pending[off..]) };
            off += k;
            if self.tx.needs_wakeup() || k == 0 {
                self.stats.wakeups += 1;
                self.tx.wakeup()?;
            }
            if k == 0 {
                self.reclaim();
                spins += 1;
                if spins > 1000 {
                    // The ring stays full: give the frames back rather than spin forever.
                    let dropped = self.tx_pending.len() - off;
                    self.stats.tx_no_frame += dropped as u64;
                    let rest: Vec<FrameDesc> = self.tx_pending.drain(off..).collect();
                    self.tx_free.extend(rest);
                    break;
                }
            }
        }
        // In copy mode one sendto() sends at most TX_BATCH_SIZE (32) frames (Linux
        // net/xdp/xsk.c, __xsk_generic_xmit, EAGAIN beyond): the rest would wait in the ring
        // for the next kick — the next poll, maybe after a sleep. Kick until all went.
        let produced = off;
        for _ in 1..produced.div_ceil(KERNEL_TX_BATCH) {
            if !self.tx.needs_wakeup() {
                break;
            }
            self.stats.wakeups += 1;
            self.tx.wakeup()?;
        }
        self.tx_pending.clear();
        self.reclaim();
        Ok(())
    }

    /// Takes back frames the kernel finished sending.
    fn reclaim(&mut self) {
        // SAFETY: the completion ring returns descriptors of this UMEM that we produced.
        let c = unsafe { self.comp.consume(&mut self.comp_descs) };
        self.tx_free.extend_from_slice(&self.comp_descs[..c]);
    }
}

impl FrameRing for XskQueue {
    type Error = XskError;

    fn queue(&self) -> u32 {
        XskQueue::queue(self)
    }

    fn rx_burst_frames<T>(
        &mut self,
        timeout_ms: i32,
        f: impl for<'u, 's> FnOnce(&mut RxFrames<'u, 's>) -> T,
    ) -> Result<(usize, T), XskError> {
        XskQueue::rx_burst_frames(self, timeout_ms, f)
    }

    fn send_with(&mut self, build: impl FnOnce(&mut [u8]) -> usize) -> bool {
        XskQueue::send_with(self, build)
    }

    fn tx_room(&mut self) -> usize {
        XskQueue::tx_room(self)
    }

    fn tx_frame_capacity(&self) -> usize {
        self.frame_data
    }

    fn flush(&mut self) -> Result<(), XskError> {
        XskQueue::flush(self)
    }

    fn stats(&self) -> RingStats {
        XskQueue::stats(self)
    }
}

/// Frames the kernel sends per sendto() on a copy-mode AF_XDP socket (TX_BATCH_SIZE).
const KERNEL_TX_BATCH: usize = 32;
