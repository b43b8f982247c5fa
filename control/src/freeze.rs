//! Freezing a kernel TCP socket with TCP_REPAIR and reading the state the datapath needs.
//!
//! Order that works (docs/environment.md, "TCP_REPAIR hand-over"): nothing left unread or unsent,
//! flush a pending delayed ACK (TCP_QUICKACK), steer the 4-tuple away from the kernel,
//! `TCP_REPAIR=1`, read, and later close the socket *while still in repair mode* (silent). Never
//! set `TCP_REPAIR=0`: that sends a window probe.

use mpa_ctl_proto::{TcpSnapshot, TsSnapshot};
use nix::sys::socket::{getsockopt, recv, setsockopt, MsgFlags};
use nix::sys::time::TimeSpec;
use nix::time::{clock_gettime, ClockId};
use nix::{getsockopt_impl, setsockopt_impl, sockopt_impl};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

// Linux UAPI <linux/tcp.h>; spelled out so that the values are visible next to their use.
const TCP_REPAIR: i32 = 19;
const TCP_REPAIR_QUEUE: i32 = 20;
const TCP_QUEUE_SEQ: i32 = 21;
const TCP_TIMESTAMP: i32 = 24;
const TCP_REPAIR_WINDOW: i32 = 29;
const TCP_NO_QUEUE: i32 = 0;
const TCP_RECV_QUEUE: i32 = 1;
const TCP_SEND_QUEUE: i32 = 2;
const TCPI_OPT_TIMESTAMPS: u8 = 1;
const TCPI_OPT_SACK: u8 = 2;
const TCPI_OPT_WSCALE: u8 = 4;

/// `struct tcp_repair_window` (public only because nix's sockopt macro needs it).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RepairWindow {
    snd_wl1: u32,
    snd_wnd: u32,
    max_window: u32,
    rcv_wnd: u32,
    rcv_wup: u32,
}

/// The first 8 octets of `struct tcp_info`: state, ca_state, retransmits, probes, backoff,
/// options, wscale (snd low nibble, rcv high nibble), flags.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpInfoHead([u8; 8]);

sockopt_impl!(Repair, Both, libc::IPPROTO_TCP, TCP_REPAIR, i32);
sockopt_impl!(RepairQueue, Both, libc::IPPROTO_TCP, TCP_REPAIR_QUEUE, i32);
sockopt_impl!(QueueSeq, Both, libc::IPPROTO_TCP, TCP_QUEUE_SEQ, u32);
sockopt_impl!(Timestamp, GetOnly, libc::IPPROTO_TCP, TCP_TIMESTAMP, u32);
sockopt_impl!(
    RepairWin,
    GetOnly,
    libc::IPPROTO_TCP,
    TCP_REPAIR_WINDOW,
    RepairWindow
);
sockopt_impl!(
    InfoHead,
    GetOnly,
    libc::IPPROTO_TCP,
    libc::TCP_INFO,
    TcpInfoHead
);
sockopt_impl!(MaxSeg, GetOnly, libc::IPPROTO_TCP, libc::TCP_MAXSEG, i32);
sockopt_impl!(QuickAck, Both, libc::IPPROTO_TCP, libc::TCP_QUICKACK, i32);

/// Why a socket could not be frozen or read.
#[derive(Debug, thiserror::Error)]
pub enum FreezeError {
    /// A socket call failed.
    #[error("{step}: {source}")]
    Sys {
        /// What was being done.
        step: &'static str,
        /// The errno.
        source: nix::Error,
    },
    /// The socket has no peer or local address.
    #[error("socket addresses: {0}")]
    Address(std::io::Error),
}

fn sys<T>(step: &'static str, r: nix::Result<T>) -> Result<T, FreezeError> {
    r.map_err(|source| FreezeError::Sys { step, source })
}

/// Largest queue content read back (a hand-over expects both queues empty).
const MAX_QUEUE: usize = 64 * 1024;

fn monotonic_ns() -> Result<u64, FreezeError> {
    let t: TimeSpec = sys("clock_gettime", clock_gettime(ClockId::CLOCK_MONOTONIC))?;
    Ok(t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

/// Flushes a pending delayed ACK so that the frozen socket does not send it later.
pub fn flush_ack(sock: &TcpStream) -> Result<(), FreezeError> {
    sys("TCP_QUICKACK", setsockopt(sock, QuickAck, &1))
}

/// A socket in repair mode. Dropping it closes the socket silently (still in repair mode).
#[derive(Debug)]
pub struct FrozenSocket {
    sock: TcpStream,
}

impl FrozenSocket {
    /// The socket (in repair mode: do not read or write through it).
    pub fn as_raw_fd(&self) -> i32 {
        self.sock.as_raw_fd()
    }
}

/// Puts `sock` into repair mode and reads its state. The caller steers the 4-tuple away from
/// the kernel first.
pub fn freeze(sock: TcpStream) -> Result<(FrozenSocket, TcpSnapshot), FreezeError> {
    let local = sock.local_addr().map_err(FreezeError::Address)?;
    let remote = sock.peer_addr().map_err(FreezeError::Address)?;
    let info = sys("TCP_INFO", getsockopt(&sock, InfoHead))?;
    sys("TCP_REPAIR=1", setsockopt(&sock, Repair, &1))?;
    let frozen = FrozenSocket { sock };
    let s = &frozen.sock;
    sys(
        "TCP_REPAIR_QUEUE recv",
        setsockopt(s, RepairQueue, &TCP_RECV_QUEUE),
    )?;
    let rcv_nxt = sys("TCP_QUEUE_SEQ recv", getsockopt(s, QueueSeq))?;
    let recv_queue = peek_queue(s)?;
    sys(
        "TCP_REPAIR_QUEUE send",
        setsockopt(s, RepairQueue, &TCP_SEND_QUEUE),
    )?;
    let snd_nxt = sys("TCP_QUEUE_SEQ send", getsockopt(s, QueueSeq))?;
    let send_queue = peek_queue(s)?;
    sys(
        "TCP_REPAIR_QUEUE none",
        setsockopt(s, RepairQueue, &TCP_NO_QUEUE),
    )?;
    let w = sys("TCP_REPAIR_WINDOW", getsockopt(s, RepairWin))?;
    // In repair mode TCP_MAXSEG reports the peer's SYN MSS (mss_clamp).
    let mss = sys("TCP_MAXSEG", getsockopt(s, MaxSeg))?;
    let options = info.0[5];
    let (snd_ws, rcv_ws) = (info.0[6] & 0x0f, info.0[6] >> 4);
    let timestamps = if options & TCPI_OPT_TIMESTAMPS != 0 {
        let m0 = monotonic_ns()?;
        let tsval = sys("TCP_TIMESTAMP", getsockopt(s, Timestamp))?;
        let m1 = monotonic_ns()?;
        Some(TsSnapshot {
            tsval,
            monotonic_ns: m0 + (m1 - m0) / 2,
            ts_recent: 0,
        })
    } else {
        None
    };
    let wscale = options & TCPI_OPT_WSCALE != 0;
    let snap = TcpSnapshot {
        local,
        remote,
        snd_nxt,
        rcv_nxt,
        snd_wl1: w.snd_wl1,
        snd_wnd: w.snd_wnd,
        max_window: w.max_window,
        rcv_wnd: w.rcv_wnd,
        rcv_wup: w.rcv_wup,
        mss: u16::try_from(mss).unwrap_or(u16::MAX),
        rcv_wscale: wscale.then_some(rcv_ws),
        snd_wscale: wscale.then_some(snd_ws),
        sack_permitted: options & TCPI_OPT_SACK != 0,
        timestamps,
        send_queue,
        recv_queue,
    };
    Ok((frozen, snap))
}

/// In repair mode, `recv(MSG_PEEK)` returns the contents of the selected queue.
fn peek_queue(s: &TcpStream) -> Result<Vec<u8>, FreezeError> {
    let mut buf = vec![0u8; MAX_QUEUE];
    let n = match recv(
        s.as_raw_fd(),
        &mut buf,
        MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
    ) {
        Ok(n) => n,
        Err(nix::Error::EAGAIN) => 0,
        Err(source) => {
            return Err(FreezeError::Sys {
                step: "peek queue",
                source,
            })
        }
    };
    buf.truncate(n);
    Ok(buf)
}

/// Whether the socket is (still) in repair mode.
pub fn in_repair(sock: &FrozenSocket) -> Result<bool, FreezeError> {
    Ok(sys("TCP_REPAIR?", getsockopt(&sock.sock, Repair))? != 0)
}
