//! Next-hop MAC resolution from the kernel's routing and neighbour tables (slow path: one
//! `ip -j` call each, only at hand-over), with a short cache: two process spawns per
//! hand-over were most of the hand-over cost (`mpa-bench scale`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a resolved next hop is reused.
const CACHE_TTL: Duration = Duration::from_secs(5);
/// Entries kept (destinations × namespaces); the cache is cleared when full.
const CACHE_MAX: usize = 4096;

/// (network namespace cookie, destination) → (resolved at, interface, MAC).
type Cache = HashMap<(u64, IpAddr), (Instant, String, [u8; 6])>;
static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

/// SO_NETNS_COOKIE (Linux 5.14, <asm-generic/socket.h>).
const SO_NETNS_COOKIE: i32 = 71;
use nix::{getsockopt_impl, sockopt_impl};
sockopt_impl!(NetnsCookie, GetOnly, libc::SOL_SOCKET, SO_NETNS_COOKIE, u64);

/// The calling thread's network namespace (hand-overs run in several in tests), as its
/// cookie: unlike the namespace file's inode, which the kernel reuses soon after a namespace
/// is deleted, a cookie is never reused while the system runs. `None` (no caching) where
/// the kernel has no cookies.
fn netns_id() -> Option<u64> {
    use nix::sys::socket::{getsockopt, socket, AddressFamily, SockFlag, SockType};
    let s = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .ok()?;
    getsockopt(&s, NetnsCookie).ok()
}

/// Why a next hop could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum NeighbourError {
    /// `ip` could not run or failed.
    #[error("`ip {args}`: {detail}")]
    Ip {
        /// Arguments.
        args: String,
        /// What went wrong.
        detail: String,
    },
    /// No usable neighbour entry.
    #[error("no resolved neighbour for {0}")]
    Unresolved(IpAddr),
}

fn ip_json(args: &[&str]) -> Result<serde_json::Value, NeighbourError> {
    let err = |detail: String| NeighbourError::Ip {
        args: args.join(" "),
        detail,
    };
    let out = Command::new("ip")
        .arg("-j")
        .args(args)
        .output()
        .map_err(|e| err(e.to_string()))?;
    if !out.status.success() {
        return Err(err(String::from_utf8_lossy(&out.stderr).trim().to_string()));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| err(e.to_string()))
}

/// The interface and next-hop address used to reach `dst`.
pub fn route(dst: IpAddr) -> Result<(String, IpAddr), NeighbourError> {
    let v = ip_json(&["route", "get", &dst.to_string()])?;
    let r = v.get(0).ok_or(NeighbourError::Unresolved(dst))?;
    let dev = r["dev"]
        .as_str()
        .ok_or(NeighbourError::Unresolved(dst))?
        .to_string();
    let via = r["gateway"]
        .as_str()
        .and_then(|g| g.parse().ok())
        .unwrap_or(dst);
    Ok((dev, via))
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// The MAC address of the next hop toward `dst`, and the interface.
pub fn next_hop_mac(dst: IpAddr) -> Result<(String, [u8; 6]), NeighbourError> {
    let Some(ns) = netns_id() else {
        return resolve(dst);
    };
    let key = (ns, dst);
    if let Ok(mut g) = CACHE.lock() {
        if let Some((at, dev, mac)) = g.get_or_insert_with(HashMap::new).get(&key) {
            if at.elapsed() < CACHE_TTL {
                return Ok((dev.clone(), *mac));
            }
        }
    }
    let (dev, mac) = resolve(dst)?;
    if let Ok(mut g) = CACHE.lock() {
        let c = g.get_or_insert_with(HashMap::new);
        if c.len() >= CACHE_MAX {
            c.clear();
        }
        c.insert(key, (Instant::now(), dev.clone(), mac));
    }
    Ok((dev, mac))
}

fn resolve(dst: IpAddr) -> Result<(String, [u8; 6]), NeighbourError> {
    let (dev, via) = route(dst)?;
    let v = ip_json(&["neigh", "show", &via.to_string(), "dev", &dev])?;
    let entries = v.as_array().cloned().unwrap_or_default();
    for e in entries {
        let failed = e["state"]
            .as_array()
            .is_some_and(|s| s.iter().any(|x| x == "FAILED" || x == "INCOMPLETE"));
        if let (false, Some(mac)) = (failed, e["lladdr"].as_str().and_then(parse_mac)) {
            return Ok((dev, mac));
        }
    }
    Err(NeighbourError::Unresolved(via))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs() {
        assert_eq!(parse_mac("02:00:0a:ff:00:01"), Some([2, 0, 10, 255, 0, 1]));
        assert_eq!(parse_mac("02:00:0a:ff:00"), None);
        assert_eq!(parse_mac("02:00:0a:ff:00:01:02"), None);
        assert_eq!(parse_mac("zz:00:0a:ff:00:01"), None);
    }
}
