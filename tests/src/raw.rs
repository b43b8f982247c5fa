//! Raw sockets for the tests (no safe wrapper in std): an unbound AF_XDP socket, and frames
//! sent out of an interface with AF_PACKET.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

fn check(ret: libc::c_int) -> io::Result<OwnedFd> {
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `ret` is a descriptor socket(2) just returned; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(ret) })
}

/// An AF_XDP socket, not bound (enough to sit in an XSKMAP).
pub fn xdp_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the result is checked.
    check(unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })
}

/// Sends each frame (Ethernet header included) out of interface `ifindex` (of the calling
/// thread's namespace).
pub fn send_frames(ifindex: u32, frames: &[Vec<u8>]) -> io::Result<()> {
    // Protocol 0: this socket sends only and receives nothing.
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let sock =
        check(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
    let addr = libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as u16,
        sll_protocol: (libc::ETH_P_IP as u16).to_be(),
        sll_ifindex: ifindex as i32,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 6,
        sll_addr: [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0],
    };
    for f in frames {
        // SAFETY: `f` and `addr` are live for the call and the lengths passed are theirs.
        let n = unsafe {
            libc::sendto(
                sock.as_raw_fd(),
                f.as_ptr().cast(),
                f.len(),
                0,
                std::ptr::from_ref(&addr).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        assert_eq!(n as usize, f.len(), "short AF_PACKET send");
    }
    Ok(())
}
