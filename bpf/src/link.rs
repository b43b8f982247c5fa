//! XDP attachment through a BPF link (`BPF_LINK_CREATE`), the one place this crate calls libbpf
//! without libbpf-rs: libbpf-rs 0.25's `Program::attach_xdp` cannot pass the mode flags
//! (driver or generic), and its `Xdp` type attaches through netlink.
//!
//! Why a link: a netlink attachment outlives its process, so a `kill -9` of the datapath left
//! the program attached, every steered 4-tuple dropped and the next start refused. A link is
//! released when its last descriptor closes, which the kernel does when the process dies; the
//! program then leaves the interface with it. Links also refuse `ip link set dev X xdp off`
//! and any netlink replacement (EBUSY), so another tool cannot silently take the interface.

#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use libbpf_rs::libbpf_sys;
use libbpf_rs::XdpFlags;

/// An XDP program attached to an interface through a BPF link. Dropping it closes the link's
/// only descriptor: the kernel detaches the program, unless it was detached already (then
/// nothing happens, whatever is attached there now).
#[derive(Debug)]
pub(crate) struct XdpLink {
    fd: OwnedFd,
    id: u32,
}

impl XdpLink {
    /// Attaches `prog` to `ifindex` (in the calling thread's network namespace) in the mode
    /// `flags` says (`DRV_MODE`, `SKB_MODE`, or none: driver if the driver has native XDP).
    pub(crate) fn attach(prog: BorrowedFd<'_>, ifindex: i32, flags: XdpFlags) -> io::Result<Self> {
        let opts = libbpf_sys::bpf_link_create_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as libbpf_sys::size_t,
            flags: flags.bits(),
            ..Default::default()
        };
        // SAFETY: `opts` is a properly sized, initialised options struct that lives across the
        // call; libbpf reads it and keeps no pointer to it. The descriptors are plain ints.
        let fd = unsafe {
            libbpf_sys::bpf_link_create(prog.as_raw_fd(), ifindex, libbpf_sys::BPF_XDP, &opts)
        };
        if fd < 0 {
            return Err(io::Error::from_raw_os_error(-fd));
        }
        // SAFETY: `fd` is a fresh descriptor bpf_link_create returned to us and nobody else
        // owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut link = XdpLink { fd, id: 0 };
        link.id = link.info()?.id;
        Ok(link)
    }

    /// The kernel's id of the link (`bpftool link` shows it).
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// The interface the link holds the program on, or `None` once it was detached (by
    /// `BPF_LINK_DETACH`, e.g. `bpftool link detach`, or because the interface went away).
    /// One system call, no namespace needed.
    pub(crate) fn ifindex(&self) -> io::Result<Option<u32>> {
        let info = self.info()?;
        if info.type_ != libbpf_sys::BPF_LINK_TYPE_XDP {
            return Err(io::Error::other(format!(
                "link {} is of type {}, not XDP",
                info.id, info.type_
            )));
        }
        // SAFETY: the kernel filled the XDP member of the union: the type is XDP (checked).
        let ifindex = unsafe { info.__bindgen_anon_1.xdp.ifindex };
        Ok((ifindex != 0).then_some(ifindex))
    }

    fn info(&self) -> io::Result<libbpf_sys::bpf_link_info> {
        let mut info = libbpf_sys::bpf_link_info::default();
        let mut len = std::mem::size_of::<libbpf_sys::bpf_link_info>() as u32;
        // SAFETY: `info` and `len` are valid for writes and `len` is `info`'s size, which
        // bounds what the kernel writes; the descriptor is ours and open.
        let r = unsafe {
            libbpf_sys::bpf_link_get_info_by_fd(self.fd.as_raw_fd(), &mut info, &mut len)
        };
        if r < 0 {
            return Err(io::Error::from_raw_os_error(-r));
        }
        Ok(info)
    }
}

/// Detaches the netlink-attached XDP program of `ifindex` in the mode `flags` says, but only
/// if it is still `expected` (`XDP_FLAGS_REPLACE` with the expected program: the kernel
/// checks, so a program attached meanwhile by someone else is never removed).
pub(crate) fn detach_netlink_expected(
    ifindex: i32,
    flags: XdpFlags,
    expected: BorrowedFd<'_>,
) -> io::Result<()> {
    let opts = libbpf_sys::bpf_xdp_attach_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_xdp_attach_opts>() as libbpf_sys::size_t,
        old_prog_fd: expected.as_raw_fd(),
        ..Default::default()
    };
    // SAFETY: `opts` is a properly sized, initialised options struct that lives across the
    // call; libbpf reads it and keeps no pointer to it.
    let r =
        unsafe { libbpf_sys::bpf_xdp_detach(ifindex, (flags | XdpFlags::REPLACE).bits(), &opts) };
    if r < 0 {
        return Err(io::Error::from_raw_os_error(-r));
    }
    Ok(())
}
