//! Running code inside a network namespace: on a fresh thread that joins the namespace, so
//! the rest of the process stays where it is.

use std::fs::File;

/// Why a closure could not run in a namespace.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// The namespace file could not be opened.
    #[error("open /var/run/netns/{ns}: {source}")]
    Open {
        /// Namespace name.
        ns: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// setns failed.
    #[error("setns into {ns}: {source}")]
    Setns {
        /// Namespace name.
        ns: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The closure panicked.
    #[error("the closure run in {0} panicked")]
    Panicked(String),
}

/// Runs `f` on a new (scoped) thread inside network namespace `ns` (a name under
/// /var/run/netns) and returns its result; `f` may borrow from the caller. Sockets, interface
/// indexes and BPF attachments made by `f` belong to that namespace; threads `f` spawns
/// inherit it.
pub fn run_in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> Result<T, NetnsError> {
    let file = File::open(format!("/var/run/netns/{ns}")).map_err(|source| NetnsError::Open {
        ns: ns.to_string(),
        source,
    })?;
    std::thread::scope(|s| {
        let handle = s.spawn(|| -> Result<T, NetnsError> {
            join(&file, ns)?;
            Ok(f())
        });
        handle
            .join()
            .map_err(|_| NetnsError::Panicked(ns.to_string()))?
    })
}

/// Moves the calling thread into the namespace behind `file`.
pub fn join(file: &File, ns: &str) -> Result<(), NetnsError> {
    nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| NetnsError::Setns {
        ns: ns.to_string(),
        source: std::io::Error::from(e),
    })
}
