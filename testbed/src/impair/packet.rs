//! AF_PACKET sockets bound to one interface, with batched receive and send (recvmmsg,
//! sendmmsg): the forwarder's only kernel boundary, and the crate's only `unsafe` (std and
//! nix have no safe packet-socket batching).
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// linux/if_packet.h
const PACKET_STATISTICS: libc::c_int = 6;
/// linux/if_packet.h: do not loop our own transmissions back to this socket.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// A raw packet socket bound to one interface, non-blocking, that sees every frame the
/// interface receives (and not those it sends).
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

impl PacketSocket {
    /// Binds to interface `ifindex` of the calling thread's namespace; `buffer` octets of
    /// socket buffer each way (forced: we run as root).
    pub fn bind(ifindex: u32, buffer: usize) -> io::Result<PacketSocket> {
        let all = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: socket(2) with constant arguments; the result is checked.
        let fd = cvt(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                libc::c_int::from(all),
            )
        })?;
        // SAFETY: `fd` was just returned by socket(2); nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let sock = PacketSocket { fd };
        sock.setsockopt(libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)?;
        let buf = libc::c_int::try_from(buffer).unwrap_or(libc::c_int::MAX);
        sock.setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, buf)?;
        sock.setsockopt(libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, buf)?;
        let addr = libc::sockaddr_ll {
            sll_family: libc::AF_PACKET as u16,
            sll_protocol: all,
            sll_ifindex: ifindex as i32,
            sll_hatype: 0,
            sll_pkttype: 0,
            sll_halen: 0,
            sll_addr: [0; 8],
        };
        // SAFETY: `addr` is a live sockaddr_ll and the length passed is its size.
        cvt(unsafe {
            libc::bind(
                sock.fd.as_raw_fd(),
                std::ptr::from_ref(&addr).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        Ok(sock)
    }

    fn setsockopt(&self, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
        // SAFETY: `v` is a live c_int and the length passed is its size.
        cvt(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                std::ptr::from_ref(&v).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        })
        .map(|_| ())
    }

    /// Frames the socket dropped since the last call (its receive queue was full).
    pub fn drops(&self) -> io::Result<u64> {
        let mut st = [0u32; 2]; // struct tpacket_stats { tp_packets, tp_drops }
        let mut len = std::mem::size_of_val(&st) as libc::socklen_t;
        // SAFETY: `st` and `len` are live and `len` is `st`'s size; the kernel writes at most
        // `len` octets.
        cvt(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                st.as_mut_ptr().cast(),
                &mut len,
            )
        })?;
        Ok(u64::from(st[1]))
    }

    /// Receives up to `bufs.len()` frames without waiting, each into the spare capacity of
    /// one buffer (whose length is set to the frame's; a frame larger than the capacity is
    /// cut and flagged `true`). Returns how many; 0 when none is waiting.
    pub fn recv_batch(&self, bufs: &mut [Vec<u8>], truncated: &mut [bool]) -> io::Result<usize> {
        let n = bufs.len().min(truncated.len()).min(MAX_BATCH);
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_BATCH];
        // SAFETY: mmsghdr is plain data for which all-zero is a valid (empty) value.
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..n {
            bufs[i].clear();
            iov[i] = libc::iovec {
                iov_base: bufs[i].as_mut_ptr().cast(),
                iov_len: bufs[i].capacity(),
            };
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `msgs[..n]` each point at one iovec over the spare capacity of a live
        // buffer that nothing else touches during the call; no timeout.
        let got = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let got = got as usize;
        for i in 0..got {
            let len = (msgs[i].msg_len as usize).min(bufs[i].capacity());
            // SAFETY: the kernel wrote `msg_len` octets into the spare capacity (at most
            // the capacity, as the iovec said); they are initialised.
            unsafe { bufs[i].set_len(len) };
            truncated[i] = msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        }
        Ok(got)
    }

    /// Sends frames out of the bound interface. Returns how many went; an error only when
    /// the first one failed.
    pub fn send_batch(&self, frames: &[Vec<u8>]) -> io::Result<usize> {
        let n = frames.len().min(MAX_BATCH);
        if n == 0 {
            return Ok(0);
        }
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_BATCH];
        // SAFETY: mmsghdr is plain data for which all-zero is a valid (empty) value.
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..n {
            // The kernel only reads through this pointer (sendmmsg).
            iov[i] = libc::iovec {
                iov_base: frames[i].as_ptr().cast_mut().cast(),
                iov_len: frames[i].len(),
            };
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `msgs[..n]` each point at one iovec over a live frame; the socket is bound,
        // so no address is needed.
        let sent = unsafe {
            libc::sendmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(sent as usize)
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Most frames per system call.
pub const MAX_BATCH: usize = 64;

/// Waits until one of `socks` is readable (`true` per ready one), or `timeout_us` passes.
pub fn wait_readable(socks: [&PacketSocket; 2], timeout_us: u64) -> io::Result<[bool; 2]> {
    wait(socks, libc::POLLIN, timeout_us)
}

/// Waits until one of `socks` can send, or `timeout_us` passes.
pub fn wait_writable(sock: &PacketSocket, timeout_us: u64) -> io::Result<bool> {
    Ok(wait([sock, sock], libc::POLLOUT, timeout_us)?[0])
}

fn wait(
    socks: [&PacketSocket; 2],
    events: libc::c_short,
    timeout_us: u64,
) -> io::Result<[bool; 2]> {
    let mut fds = socks.map(|s| libc::pollfd {
        fd: s.fd.as_raw_fd(),
        events,
        revents: 0,
    });
    let ts = libc::timespec {
        tv_sec: (timeout_us / 1_000_000) as libc::time_t,
        tv_nsec: ((timeout_us % 1_000_000) * 1000) as libc::c_long,
    };
    // SAFETY: `fds` and `ts` are live for the call and the count is `fds`' length; no
    // signal mask.
    let r = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok([false, false]);
        }
        return Err(e);
    }
    Ok(fds.map(|p| p.revents & (events | libc::POLLERR) != 0))
}

/// The index of interface `name` in the calling thread's namespace.
pub fn ifindex(name: &str) -> io::Result<u32> {
    let c =
        std::ffi::CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a live NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(i)
}
