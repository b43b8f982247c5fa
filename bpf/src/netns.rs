//! Running code inside another network namespace.
//!
//! A network namespace is per thread: [`NetNs::run`] runs a closure on a short-lived thread
//! that first enters the namespace with `setns(CLONE_NEWNET)`. What the closure creates there
//! stays bound to that namespace after the thread ends: sockets, and interface indices (which
//! only mean something inside their namespace). The calling thread never changes namespace.
//!
//! Entering a namespace needs `CAP_SYS_ADMIN`.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::sched::CloneFlags;

/// Where iproute2 keeps the namespaces `ip netns add` creates.
pub const NETNS_RUN_DIR: &str = "/var/run/netns";

/// An open handle to a network namespace (it keeps the namespace alive while open).
#[derive(Debug)]
pub struct NetNs {
    file: File,
}

impl NetNs {
    /// The calling thread's network namespace.
    pub fn current() -> io::Result<Self> {
        Self::open("/proc/thread-self/ns/net")
    }

    /// A namespace file: `/proc/PID/ns/net`, a bind mount, ...
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        Ok(Self {
            file: File::open(path)?,
        })
    }

    /// A namespace created by `ip netns add NAME`.
    pub fn named(name: &str) -> io::Result<Self> {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad network namespace name {name:?}"),
            ));
        }
        Self::open(PathBuf::from(NETNS_RUN_DIR).join(name))
    }

    /// Whether the calling thread is in this namespace.
    pub fn is_current(&self) -> io::Result<bool> {
        let mine = self.file.metadata()?;
        let cur = std::fs::metadata("/proc/thread-self/ns/net")?;
        Ok(mine.dev() == cur.dev() && mine.ino() == cur.ino())
    }

    /// Runs `f` inside this namespace and returns its result: on the calling thread if that is
    /// already in the namespace, else on a new thread that enters it first. A panic in `f`
    /// propagates to the caller. Errors only if the namespace cannot be entered.
    pub fn run<T, F>(&self, f: F) -> io::Result<T>
    where
        T: Send,
        F: FnOnce() -> T + Send,
    {
        if self.is_current()? {
            return Ok(f());
        }
        std::thread::scope(|s| {
            let worker = std::thread::Builder::new()
                .name("netns-run".into())
                .spawn_scoped(s, || {
                    nix::sched::setns(&self.file, CloneFlags::CLONE_NEWNET)?;
                    Ok(f())
                })?;
            match worker.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_is_current() {
        let ns = NetNs::current().unwrap();
        assert!(ns.is_current().unwrap());
        // Same namespace: runs inline, no setns (works without privilege).
        let here = std::thread::current().id();
        assert_eq!(ns.run(|| std::thread::current().id()).unwrap(), here);
    }

    #[test]
    fn bad_names_rejected() {
        for n in ["", ".", "..", "a/b", "../etc"] {
            let e = NetNs::named(n).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{n:?}");
        }
    }
}
