//! Registered memory as the protocol describes it: regions and where posted receive buffers
//! go.

use serde::{Deserialize, Serialize};

/// One registered memory region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionInfo {
    /// The STag peers name it by (tagged offset 0 is its first octet).
    pub stag: u32,
    /// Octets.
    pub len: u64,
    /// Protection domain: connections of this domain may use it.
    pub pd: u32,
    /// RDMA Writes from the peer may place into it.
    pub remote_write: bool,
    /// RDMA Read Requests from the peer may read it.
    pub remote_read: bool,
    /// Backed by huge pages (hugetlbfs) rather than ordinary pages.
    pub huge_pages: bool,
}

/// Where posted receive buffers go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PostTarget {
    /// The receive queue of a connection that exists.
    Flow(u64),
    /// The protection domain: buffers wait there and the next connection of the domain takes
    /// all of them at its hand-over (so Sends that arrive right after the startup find them).
    Pd(u32),
}
