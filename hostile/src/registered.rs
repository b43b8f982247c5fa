//! A client that hands the datapath memory it cannot register (docs/consumer.md, "Registering
//! memory the application has"): no descriptor, descriptors that are not memfds, a memfd that
//! may shrink, one shorter than asked, a length beyond the region budget. Each is refused with
//! its reason, no descriptor stays open in the datapath, and a memfd it does take is sealed
//! against shrinking before it is mapped.

use super::ctl::WAIT;
use super::{Ctx, PD_OTHER};
use anyhow::{bail, Context, Result};
use mpa_app::{Consumer, ConsumerError};
use mpa_ctl_proto::client::ClientError;
use mpa_ctl_proto::{encode_message, handshake, read_message, ErrorCode, Message};
use mpa_harness::datapath::temp_path;
use nix::sys::memfd::{memfd_create, MFdFlags};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// A domain of this class's own client.
const PD_REGISTER: u32 = PD_OTHER + 101;

/// A memfd of `len` octets named `name`, sealable or not.
fn memfd(name: &str, len: i64, sealable: bool) -> Result<OwnedFd> {
    let extra = if sealable {
        MFdFlags::MFD_ALLOW_SEALING
    } else {
        MFdFlags::empty()
    };
    let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC | extra)?;
    nix::unistd::ftruncate(&fd, len)?;
    Ok(fd)
}

/// Descriptors of this process (the datapath runs in it) whose target starts with `prefix`.
fn open_to(prefix: &str) -> Result<usize> {
    let mut n = 0;
    for e in std::fs::read_dir("/proc/self/fd")? {
        if let Ok(t) = std::fs::read_link(e?.path()) {
            n += usize::from(t.to_string_lossy().starts_with(prefix));
        }
    }
    Ok(n)
}

/// A RegisterRegion of `len` octets with `fds` attached, sent raw; the answer.
fn register_raw(
    s: &UnixStream,
    id: u64,
    len: u64,
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> Result<Message> {
    let m = Message::RegisterRegion {
        id,
        pd: PD_REGISTER,
        len,
        remote_write: true,
        remote_read: false,
    };
    mpa_ctl_proto::write_frame_with_fds(s, &encode_message(&m)?, fds)?;
    Ok(read_message(&mut &*s)?)
}

/// `r` refused with `code` and a message that contains `words`.
fn refused<T: std::fmt::Debug>(
    what: &str,
    r: std::result::Result<T, ConsumerError>,
    code: ErrorCode,
    words: &str,
) -> Result<()> {
    match r {
        Err(ConsumerError::Client(ClientError::Refused { code: c, message }))
            if c == code && message.contains(words) =>
        {
            Ok(())
        }
        other => bail!("{what}: {code:?} with \"{words}\", got {other:?}"),
    }
}

/// The class: every refusal with its reason, nothing kept, the memfd taken sealed.
pub fn unusable_memory(c: &mut Ctx) -> Result<()> {
    super::ctl::witnessed(c, |p| {
        let tag = format!("hostile-register-{}", std::process::id());
        raw_refusals(p, &tag)?;
        let mut con = Consumer::connect(p, WAIT)?;
        let fixed = memfd(&tag, 4096, false)?;
        refused(
            "a memfd without MFD_ALLOW_SEALING",
            con.register_region(fixed.as_fd(), 4096, PD_REGISTER, true, false),
            ErrorCode::BadRequest,
            "takes no more seals",
        )?;
        let short = memfd(&tag, 4096, true)?;
        refused(
            "a memfd shorter than asked",
            con.register_region(short.as_fd(), 8192, PD_REGISTER, true, false),
            ErrorCode::BadRequest,
            "holds 4096 octets, fewer than the 8192",
        )?;
        refused(
            "a length beyond the region budget",
            con.register_region(short.as_fd(), 1 << 50, PD_REGISTER, true, false),
            ErrorCode::Limit,
            "region budget",
        )?;
        // Nothing refused was sealed: the file still takes any length.
        nix::unistd::ftruncate(&short, 8192).context("the refused memfd resized")?;
        let taken = con.register_region(short.as_fd(), 8192, PD_REGISTER, true, false)?;
        if nix::unistd::ftruncate(&short, 4096) != Err(nix::Error::EPERM) {
            bail!("the registered memfd shrinks under the datapath's mapping");
        }
        con.destroy_region(taken.stag)?;
        drop(con);
        drop((fixed, short));
        let memfds = format!("/memfd:{tag}");
        let t0 = std::time::Instant::now();
        while open_to(&memfds)? > 0 {
            if t0.elapsed() > WAIT {
                bail!("{} descriptors of the memfds still open", open_to(&memfds)?);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Ok(
            "no descriptor, 8 regular files, a memfd that may shrink, one too short, one \
            beyond the budget: refused, none kept; a sealable memfd taken sealed"
                .into(),
        )
    })
}

/// Without a descriptor, and with eight descriptors of a regular file: each refused, and the
/// datapath keeps none of the file's.
fn raw_refusals(p: &Path, tag: &str) -> Result<()> {
    let mut s = UnixStream::connect(p).context("control connect")?;
    s.set_read_timeout(Some(WAIT))?;
    s.set_write_timeout(Some(WAIT))?;
    handshake(&mut s, "mpa-bench hostile").context("control Hello")?;
    match register_raw(&s, 1, 4096, &[])? {
        Message::Error {
            id: 1,
            code: ErrorCode::BadRequest,
            message,
        } if message.contains("carries no descriptor") => {}
        m => bail!("no descriptor: BadRequest, got {m:?}"),
    }
    let path = temp_path(tag);
    let file = std::fs::File::create(&path)?;
    file.set_len(4096)?;
    let fds = [file.as_fd(); 8];
    // Not a memfd; on a tmpfs /tmp, a file that takes no seals.
    match register_raw(&s, 2, 4096, &fds)? {
        Message::Error {
            id: 2,
            code: ErrorCode::BadRequest,
            message,
        } if message.contains("not a memfd") || message.contains("takes no more seals") => {}
        m => bail!("8 regular files: BadRequest, got {m:?}"),
    }
    let path = path.to_string_lossy().to_string();
    let open = open_to(&path)?;
    let _ = std::fs::remove_file(&path);
    drop(file);
    if open != 1 {
        bail!("only our own descriptor of the file open, got {open}");
    }
    Ok(())
}
