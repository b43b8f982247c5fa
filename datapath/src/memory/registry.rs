//! The control thread's registry of memory regions, the domains' shared receive queues, and
//! completion subscribers. Workers get copies of what they need through commands
//! (docs/architecture.md, "Fast-path rules": no shared mutable state with workers); a shared
//! receive queue is the one exception, a bounded lock-free queue its connections draw from,
//! once per Send at most.

#![forbid(unsafe_code)]

use mpa_ctl_proto::shm::{RegisterError, ShmError};
use mpa_ctl_proto::stats::RegistryStats;
use mpa_ctl_proto::{ErrorCode, RegionInfo};
use mpa_stack::receiver::{PostedBuf, Region, SharedReceiveQueue, MAX_POSTED};
use mpa_stack::region::{RegionError, RegionMemory};
use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// A domain's shared receive queue (docs/consumer.md, "Receive buffers for Sends"): the
/// control thread posts into it, the connections of the domain, on any worker, draw from it.
/// Bounded: [`MAX_POSTED`] buffers are admitted at most, and room for as many drawn and given
/// back.
#[derive(Debug)]
pub(crate) struct DomainReceiveQueue {
    tx: crossbeam_channel::Sender<PostedBuf>,
    rx: crossbeam_channel::Receiver<PostedBuf>,
}

impl DomainReceiveQueue {
    fn new() -> Self {
        let (tx, rx) = crossbeam_channel::bounded(2 * MAX_POSTED);
        DomainReceiveQueue { tx, rx }
    }

    /// Buffers waiting.
    pub(crate) fn len(&self) -> usize {
        self.rx.len()
    }

    fn push(&self, b: PostedBuf) {
        let _ = self.tx.try_send(b);
    }

    /// Drops the waiting buffers in region `stag` (destroyed), keeping the others' order.
    fn forget_region(&self, stag: u32) {
        let keep: Vec<PostedBuf> = self.rx.try_iter().filter(|b| b.stag != stag).collect();
        for b in keep {
            self.push(b);
        }
    }
}

impl SharedReceiveQueue for DomainReceiveQueue {
    fn take(&self) -> Option<PostedBuf> {
        self.rx.try_recv().ok()
    }

    fn give_back(&self, buf: PostedBuf) -> bool {
        self.tx.try_send(buf).is_ok()
    }
}

/// Regions one datapath holds at once.
const MAX_REGIONS: usize = 4096;

/// Regions one control client may hold at once: a quarter of [`MAX_REGIONS`], so that one
/// client cannot take every region of the host.
const MAX_REGIONS_PER_CLIENT: usize = MAX_REGIONS / 4;

/// A refused registry request: the control protocol's code and the message.
pub(crate) type Refusal = (ErrorCode, String);

fn bad(message: String) -> Refusal {
    (ErrorCode::BadRequest, message)
}

/// Regions, waiting buffers and subscribers.
#[derive(Debug)]
pub(crate) struct Registry {
    regions: HashMap<u32, Region>,
    /// Octets of all regions together, bounded by `max_bytes`.
    bytes: u64,
    max_bytes: u64,
    next_index: u32,
    keys: RandomState,
    /// Receive buffers posted to a domain, taken by its next connection.
    /// Each domain's shared receive queue, made by its first `PostRecv` to the domain.
    shared: HashMap<u32, Arc<DomainReceiveQueue>>,
    /// Subscriber (control client id) of each domain's completions, and the subscription.
    subscribers: HashMap<u32, (u64, u64)>,
    /// The control client that created each region (by STag): the region goes with it.
    owners: HashMap<u32, u64>,
    /// The control client that owns each protection domain: the first to create a region in
    /// it or subscribe to it. Other clients' requests naming it are refused; it is released
    /// when its owner has neither a region in it nor its subscription (or is gone).
    domains: HashMap<u32, u64>,
    /// Domains handed out by [`Registry::alloc_pd`] (numbers from
    /// [`mpa_ctl_proto::FIRST_ALLOCATED_PD`]), by owner: held until deallocated or the owner
    /// is gone, whatever is in them.
    allocated: HashMap<u32, u64>,
    next_pd: u32,
    /// Pages lost to consumers' holes by regions destroyed since ([`RegionMemory::pages_lost`]).
    lost_gone: u64,
    /// Regions whose lost pages were reported, each once.
    lost_reported: HashSet<u32>,
    /// The process's count of lost pages at the last look ([`Registry::newly_losing`]).
    lost_seen: u64,
}

/// Allocated domains one client may hold at once.
pub(crate) const MAX_PDS_PER_CLIENT: usize = 64;

impl Registry {
    /// An empty registry allowing `max_bytes` of regions in all.
    pub(crate) fn new(max_bytes: u64) -> Self {
        Registry {
            regions: HashMap::new(),
            bytes: 0,
            max_bytes,
            next_index: 1,
            keys: RandomState::new(),
            shared: HashMap::new(),
            subscribers: HashMap::new(),
            owners: HashMap::new(),
            domains: HashMap::new(),
            allocated: HashMap::new(),
            next_pd: mpa_ctl_proto::FIRST_ALLOCATED_PD,
            lost_gone: 0,
            lost_reported: HashSet::new(),
            lost_seen: 0,
        }
    }

    /// The regions that lost pages to a consumer's hole since the last call and were not
    /// named before, with the pages lost so far: each region is named once in its life. One
    /// atomic load while no page is lost anywhere in the process.
    pub(crate) fn newly_losing(&mut self) -> Vec<(RegionInfo, u64, usize)> {
        let total = mpa_ctl_proto::shm::pages_lost_total();
        if total == self.lost_seen {
            return Vec::new();
        }
        self.lost_seen = total;
        let mut v: Vec<_> = self
            .regions
            .values()
            .filter(|r| r.mem.pages_lost() > 0 && !self.lost_reported.contains(&r.info.stag))
            .map(|r| (r.info.clone(), r.mem.pages_lost(), r.mem.page_size()))
            .collect();
        v.sort_by_key(|(info, ..)| info.stag);
        self.lost_reported
            .extend(v.iter().map(|(info, ..)| info.stag));
        v
    }

    /// Allocates a protection domain for `client`: a number no client names yet, owned by
    /// `client` from now on (docs/consumer.md, "Who may do what").
    pub(crate) fn alloc_pd(&mut self, client: u64) -> Result<u32, Refusal> {
        if self.allocated.values().filter(|&&c| c == client).count() >= MAX_PDS_PER_CLIENT {
            return Err((
                ErrorCode::Limit,
                format!("this client holds {MAX_PDS_PER_CLIENT} protection domains already"),
            ));
        }
        // Numbers are not reused while the datapath runs (a stale handle names nothing); the
        // space is 2^32 − 2^24 allocations.
        loop {
            let pd = self.next_pd;
            self.next_pd = self
                .next_pd
                .checked_add(1)
                .unwrap_or(mpa_ctl_proto::FIRST_ALLOCATED_PD);
            if !self.allocated.contains_key(&pd) && !self.domains.contains_key(&pd) {
                self.allocated.insert(pd, client);
                self.domains.insert(pd, client);
                return Ok(pd);
            }
        }
    }

    /// Releases allocated domain `pd` of `client`; refused while a region or subscription of
    /// it remains (the caller checks connections, listeners and setups).
    pub(crate) fn dealloc_pd(&mut self, pd: u32, client: u64) -> Result<(), Refusal> {
        if self.allocated.get(&pd) != Some(&client) {
            return Err((
                ErrorCode::Forbidden,
                format!("protection domain {pd} was not allocated to this client"),
            ));
        }
        let regions = self.regions.values().filter(|r| r.info.pd == pd).count();
        if regions > 0 || self.subscribers.contains_key(&pd) {
            return Err(bad(format!(
                "protection domain {pd} is in use: {regions} region(s){}",
                if self.subscribers.contains_key(&pd) {
                    " and a subscription"
                } else {
                    ""
                }
            )));
        }
        self.allocated.remove(&pd);
        self.domains.remove(&pd);
        self.shared.remove(&pd);
        Ok(())
    }

    /// Creates a region for control client `owner`. STags are a 24-bit index and an 8-bit random key (RFC 5040 §2.1
    /// "STag"), so that a stale or guessed STag of another region is unlikely to be valid.
    pub(crate) fn create(
        &mut self,
        len: u64,
        pd: u32,
        remote_write: bool,
        remote_read: bool,
        owner: u64,
    ) -> Result<Region, Refusal> {
        let stag = self.admit(len, pd, owner)?;
        let mem = RegionMemory::create(&format!("mpa-region-{stag:08x}"), len).map_err(|e| {
            let code = match e {
                RegionError::GuardFull(_) => ErrorCode::Limit,
                _ => ErrorCode::Internal,
            };
            (code, e.to_string())
        })?;
        let access = (remote_write, remote_read);
        Ok(self.insert(stag, mem, pd, access, owner))
    }

    /// Registers the first `len` octets of the memfd an application handed over as a region
    /// of `owner`'s, under the same checks and bounds as [`Registry::create`]: the domain
    /// must be `owner`'s, and the octets count toward `--max-region-bytes` (the datapath maps
    /// and populates them) though the memory is the application's (docs/limits.md,
    /// "Memory an application registers").
    pub(crate) fn register(
        &mut self,
        fd: OwnedFd,
        len: u64,
        pd: u32,
        access: (bool, bool),
        owner: u64,
    ) -> Result<Region, Refusal> {
        let stag = self.admit(len, pd, owner)?;
        let mem = RegionMemory::register(fd, len).map_err(|e| {
            let code = match &e {
                RegisterError::Map(ShmError::GuardFull(_)) => ErrorCode::Limit,
                RegisterError::Map(ShmError::Sys { err, .. }) if *err == nix::Error::ENOMEM => {
                    ErrorCode::Limit
                }
                RegisterError::Map(ShmError::Sys { .. }) => ErrorCode::Internal,
                _ => ErrorCode::BadRequest,
            };
            (code, format!("the memory cannot be registered: {e}"))
        })?;
        Ok(self.insert(stag, mem, pd, access, owner))
    }

    /// The checks of a new region of `len` octets in domain `pd` for `owner`, and its STag.
    fn admit(&mut self, len: u64, pd: u32, owner: u64) -> Result<u32, Refusal> {
        self.check_domain(pd, owner)?;
        if len == 0 {
            return Err(bad("a region needs at least one octet".into()));
        }
        if self.regions.len() >= MAX_REGIONS {
            return Err((
                ErrorCode::Limit,
                format!("{MAX_REGIONS} regions exist already"),
            ));
        }
        if self.owners.values().filter(|&&c| c == owner).count() >= MAX_REGIONS_PER_CLIENT {
            return Err((
                ErrorCode::Limit,
                format!("this client holds {MAX_REGIONS_PER_CLIENT} regions already"),
            ));
        }
        if self.bytes.saturating_add(len) > self.max_bytes {
            return Err((
                ErrorCode::Limit,
                format!(
                    "{len} more octets exceed the region budget (--max-region-bytes {}, {} in \
                     use)",
                    self.max_bytes, self.bytes
                ),
            ));
        }
        let index = self.next_index & 0x00ff_ffff;
        self.next_index = self.next_index.wrapping_add(1).max(1);
        let key = (self.keys.hash_one(index) & 0xff) as u32;
        let stag = (index << 8) | key;
        if self.regions.contains_key(&stag) {
            return Err((ErrorCode::Limit, "STag space exhausted".into()));
        }
        Ok(stag)
    }

    /// Enters a region admitted as `stag`, with its memory and access rights (remote write,
    /// remote read), as `owner`'s.
    fn insert(
        &mut self,
        stag: u32,
        mem: RegionMemory,
        pd: u32,
        (remote_write, remote_read): (bool, bool),
        owner: u64,
    ) -> Region {
        let len = mem.len();
        let r = Region {
            info: RegionInfo {
                stag,
                len,
                pd,
                remote_write,
                remote_read,
                huge_pages: mem.huge_pages(),
            },
            mem: Arc::new(mem),
        };
        self.bytes += len;
        self.regions.insert(stag, r.clone());
        self.owners.insert(stag, owner);
        self.domains.insert(pd, owner);
        r
    }

    /// Refuses `client` a request naming domain `pd` when another client owns it.
    pub(crate) fn check_domain(&self, pd: u32, client: u64) -> Result<(), Refusal> {
        if pd >= mpa_ctl_proto::FIRST_ALLOCATED_PD {
            return match self.allocated.get(&pd) {
                Some(&owner) if owner == client => Ok(()),
                _ => Err((
                    ErrorCode::Forbidden,
                    format!("protection domain {pd} was not allocated to this control client"),
                )),
            };
        }
        match self.domains.get(&pd) {
            Some(&owner) if owner != client => Err((
                ErrorCode::Forbidden,
                format!("protection domain {pd} belongs to another control client"),
            )),
            _ => Ok(()),
        }
    }

    /// Whether `client` owns a domain (a region or a subscription in it).
    pub(crate) fn owns_any(&self, client: u64) -> bool {
        self.domains.values().any(|&c| c == client)
    }

    /// The control client owning domain `pd`, if any.
    pub(crate) fn domain_owner(&self, pd: u32) -> Option<u64> {
        self.domains.get(&pd).copied()
    }

    /// Releases domain `pd` once nothing of its owner's is left in it: no region, no
    /// subscription.
    fn release_if_idle(&mut self, pd: u32) {
        if self.allocated.contains_key(&pd) {
            return;
        }
        let used =
            self.subscribers.contains_key(&pd) || self.regions.values().any(|r| r.info.pd == pd);
        if !used {
            self.domains.remove(&pd);
        }
    }

    /// Destroys region `stag` at the request of `client`, which must own its domain.
    pub(crate) fn destroy_for(&mut self, stag: u32, client: u64) -> Result<(), Refusal> {
        let pd = self
            .regions
            .get(&stag)
            .ok_or_else(|| bad(format!("no region with STag {stag:#x}")))?
            .info
            .pd;
        self.check_domain(pd, client)?;
        self.destroy(stag)
    }

    /// Forgets a region (memory stays mapped wherever it is mapped).
    fn destroy(&mut self, stag: u32) -> Result<(), Refusal> {
        let r = self
            .regions
            .remove(&stag)
            .ok_or_else(|| bad(format!("no region with STag {stag:#x}")))?;
        self.bytes -= r.info.len;
        self.lost_gone += r.mem.pages_lost();
        self.lost_reported.remove(&stag);
        self.owners.remove(&stag);
        for q in self.shared.values() {
            q.forget_region(stag);
        }
        self.release_if_idle(r.info.pd);
        Ok(())
    }

    /// Regions, all or of one domain, by STag.
    pub(crate) fn list(&self, pd: Option<u32>) -> Vec<RegionInfo> {
        let mut v: Vec<_> = self
            .regions
            .values()
            .filter(|r| pd.is_none_or(|pd| r.info.pd == pd))
            .map(|r| r.info.clone())
            .collect();
        v.sort_by_key(|r| r.stag);
        v
    }

    /// Checks and builds `count` buffers of `len` octets from `offset` in region `stag`,
    /// for a connection of domain `pd`; buffer `i` completes with work request `wr_id + i`.
    pub(crate) fn buffers(
        &self,
        pd: u32,
        stag: u32,
        offset: u64,
        len: u32,
        count: u32,
        wr_id: u64,
    ) -> Result<Vec<PostedBuf>, Refusal> {
        let r = self
            .regions
            .get(&stag)
            .ok_or_else(|| bad(format!("no region with STag {stag:#x}")))?;
        if r.info.pd != pd {
            return Err(bad(format!(
                "region {stag:#x} belongs to domain {}, not {pd}",
                r.info.pd
            )));
        }
        if count == 0 || count as usize > MAX_POSTED {
            return Err(bad(format!(
                "count {count}: post 1 ..= {MAX_POSTED} buffers"
            )));
        }
        let end = u64::from(len)
            .checked_mul(u64::from(count))
            .and_then(|n| n.checked_add(offset));
        if end.is_none_or(|e| e > r.info.len) {
            return Err(bad(format!(
                "{count} buffers of {len} octets from offset {offset} do not fit region {stag:#x} ({} octets)",
                r.info.len
            )));
        }
        Ok((0..u64::from(count))
            .map(|i| PostedBuf {
                stag,
                offset: offset + i * u64::from(len),
                len,
                wr_id: wr_id.wrapping_add(i),
            })
            .collect())
    }

    /// Adds buffers to a domain's shared receive queue (made by the first).
    pub(crate) fn wait(&mut self, pd: u32, bufs: Vec<PostedBuf>) -> Result<(), Refusal> {
        let q = self
            .shared
            .entry(pd)
            .or_insert_with(|| Arc::new(DomainReceiveQueue::new()));
        let queued = q.len();
        if queued + bufs.len() > MAX_POSTED {
            return Err((
                ErrorCode::Limit,
                format!(
                    "domain {pd} has {queued} buffers waiting; {} more exceed {MAX_POSTED}",
                    bufs.len()
                ),
            ));
        }
        for b in bufs {
            q.push(b);
        }
        Ok(())
    }

    /// Domain `pd`'s shared receive queue, if anything was ever posted to it: every connection
    /// handed over into the domain from then on draws from it.
    pub(crate) fn shared_queue(&self, pd: u32) -> Option<Arc<DomainReceiveQueue>> {
        self.shared.get(&pd).cloned()
    }

    /// Makes `client` the subscriber of `pd`'s completions through subscription `sub`,
    /// unless another client owns the domain (then its subscription stays); returns the
    /// subscription it replaces (this client's earlier one), whose rings the workers drop.
    pub(crate) fn subscribe(
        &mut self,
        pd: u32,
        client: u64,
        sub: u64,
    ) -> Result<Option<u64>, Refusal> {
        self.check_domain(pd, client)?;
        self.domains.insert(pd, client);
        Ok(self
            .subscribers
            .insert(pd, (client, sub))
            .map(|(_, old)| old))
    }

    /// Ends `client`'s subscription to `pd` (refused unless it is the subscriber); the domain
    /// is released when none of its regions is left. Returns the subscription ended.
    pub(crate) fn unsubscribe(&mut self, pd: u32, client: u64) -> Result<u64, Refusal> {
        self.check_domain(pd, client)?;
        let Some(&(_, sub)) = self.subscribers.get(&pd).filter(|(c, _)| *c == client) else {
            return Err(bad(format!("this client is not subscribed to domain {pd}")));
        };
        self.subscribers.remove(&pd);
        self.release_if_idle(pd);
        Ok(sub)
    }

    /// The subscriber of `pd` (the tests' view of the table).
    #[cfg(test)]
    pub(crate) fn subscriber(&self, pd: u32) -> Option<u64> {
        self.subscribers.get(&pd).map(|&(c, _)| c)
    }

    /// The subscriptions `client` holds: (domain, subscription).
    pub(crate) fn subscriptions_of(&self, client: u64) -> Vec<(u32, u64)> {
        let mut v: Vec<_> = self
            .subscribers
            .iter()
            .filter(|(_, &(c, _))| c == client)
            .map(|(&pd, &(_, sub))| (pd, sub))
            .collect();
        v.sort_unstable();
        v
    }

    /// A client went away (closed its connection, or died): its subscriptions end and the
    /// regions it created are destroyed, with the buffers waiting in them, so that nothing is
    /// placed any more into memory nobody maps and its octets leave the budget. Returns the
    /// STags destroyed (the workers must forget them too).
    pub(crate) fn client_gone(&mut self, client: u64) -> Vec<u32> {
        self.subscribers.retain(|_, (c, _)| *c != client);
        let mut stags: Vec<u32> = self
            .owners
            .iter()
            .filter(|(_, &c)| c == client)
            .map(|(&stag, _)| stag)
            .collect();
        stags.sort_unstable();
        for &stag in &stags {
            let _ = self.destroy(stag);
        }
        self.domains.retain(|_, c| *c != client);
        let gone: Vec<u32> = self
            .allocated
            .iter()
            .filter(|(_, &c)| c == client)
            .map(|(&pd, _)| pd)
            .collect();
        for pd in gone {
            self.allocated.remove(&pd);
            self.shared.remove(&pd);
        }
        stags
    }

    /// Counters for the statistics document.
    pub(crate) fn stats(&self) -> RegistryStats {
        RegistryStats {
            regions: self.regions.len(),
            region_octets: self.bytes,
            region_budget: self.max_bytes,
            buffers_waiting: self.shared.values().map(|q| q.len()).sum::<usize>(),
            subscribers: self.subscribers.len(),
            unclaimed_completions: 0,
            region_pages_lost: self.lost_gone
                + self
                    .regions
                    .values()
                    .map(|r| r.mem.pages_lost())
                    .sum::<u64>(),
            registered_regions: self.regions.values().filter(|r| r.mem.registered()).count(),
            registered_octets: self
                .regions
                .values()
                .filter(|r| r.mem.registered())
                .map(|r| r.info.len)
                .sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_bounded_and_checked() {
        let mut g = Registry::new(10_000);
        assert_eq!(
            g.create(0, 1, true, false, 7).unwrap_err().0,
            ErrorCode::BadRequest
        );
        let a = g.create(6_000, 1, true, false, 7).unwrap();
        assert_eq!(
            g.create(5_000, 1, true, false, 7).unwrap_err().0,
            ErrorCode::Limit
        );
        let b = g.create(4_000, 2, false, true, 7).unwrap();
        assert_ne!(a.info.stag, b.info.stag);
        assert_eq!(a.info.stag >> 8, 1);
        assert_eq!(g.list(Some(2)), vec![b.info.clone()]);
        assert_eq!(g.list(None).len(), 2);
        // Buffers: domain, bounds and count are checked.
        assert!(g.buffers(2, a.info.stag, 0, 100, 1, 0).is_err());
        assert!(g.buffers(1, a.info.stag, 0, 100, 0, 0).is_err());
        assert!(g.buffers(1, a.info.stag, 1, 1000, 6, 0).is_err());
        assert!(g.buffers(1, a.info.stag, u64::MAX, 1, 1, 0).is_err());
        let bufs = g.buffers(1, a.info.stag, 0, 1000, 6, 0).unwrap();
        assert_eq!(bufs[5].offset, 5000);
        g.wait(1, bufs).unwrap();
        g.destroy(a.info.stag).unwrap();
        assert_eq!(g.shared_queue(1).unwrap().len(), 0);
        assert!(g.destroy(a.info.stag).is_err());
        let c = g.create(5_000, 1, true, false, 7).unwrap();
        let d = g.create(1_000, 3, true, false, 8).unwrap();
        assert_eq!(g.subscribe(1, 7, 1).unwrap(), None);
        assert_eq!(g.subscriber(1), Some(7));
        assert_eq!(g.subscriptions_of(7), vec![(1, 1)]);
        let bufs = g.buffers(3, d.info.stag, 0, 100, 2, 0).unwrap();
        g.wait(3, bufs).unwrap();
        // Client 7 goes: its subscription and its regions (only those) with it.
        assert_eq!(g.client_gone(7), vec![b.info.stag, c.info.stag]);
        assert_eq!(g.subscriber(1), None);
        assert_eq!(g.list(None), vec![d.info.clone()]);
        assert_eq!(g.stats().region_octets, 1_000);
        assert_eq!(g.shared_queue(3).unwrap().len(), 2);
        assert!(g.client_gone(7).is_empty());
    }

    /// An application's memfd is registered under the checks of a created region: its
    /// domain's owner only, within the region budget; its octets and count show apart in the
    /// statistics, and nothing registered is counted when a refusal leaves it out.
    #[test]
    fn registered_memory_is_checked_and_counted_as_a_region() {
        use nix::sys::memfd::{memfd_create, MFdFlags};
        let memfd = |len: i64| {
            let fd =
                memfd_create("app", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).unwrap();
            nix::unistd::ftruncate(&fd, len).unwrap();
            fd
        };
        let mut g = Registry::new(100_000);
        let created = g.create(1_000, 1, true, false, 7).unwrap();
        // Domain 1 is client 7's.
        let (code, message) = g
            .register(memfd(4096), 4096, 1, (true, false), 8)
            .unwrap_err();
        assert_eq!(code, ErrorCode::Forbidden);
        assert_eq!(
            message,
            "protection domain 1 belongs to another control client"
        );
        let (code, message) = g
            .register(memfd(4096), 200_000, 1, (true, false), 7)
            .unwrap_err();
        assert_eq!(code, ErrorCode::Limit, "{message}");
        let (code, message) = g
            .register(memfd(4096), 8192, 1, (true, false), 7)
            .unwrap_err();
        assert_eq!(code, ErrorCode::BadRequest);
        assert_eq!(
            message,
            "the memory cannot be registered: the memfd holds 4096 octets, fewer than the \
             8192 to register"
        );
        let r = g
            .register(memfd(3 * 4096), 10_000, 1, (false, true), 7)
            .unwrap();
        assert_eq!(
            (
                r.info.len,
                r.info.pd,
                r.info.remote_write,
                r.info.remote_read
            ),
            (10_000, 1, false, true)
        );
        assert!(r.mem.registered() && !created.mem.registered());
        let st = g.stats();
        assert_eq!(
            (
                st.regions,
                st.region_octets,
                st.registered_regions,
                st.registered_octets
            ),
            (2, 11_000, 1, 10_000)
        );
        assert_eq!(g.client_gone(7), vec![created.info.stag, r.info.stag]);
        let st = g.stats();
        assert_eq!((st.registered_regions, st.registered_octets), (0, 0));
    }

    /// An allocated domain is its allocator's from the start: nobody else may name it, even
    /// before anything is in it; it stays until deallocated, and deallocation waits for its
    /// regions and subscription to go.
    #[test]
    fn allocated_domains_are_their_allocators_only() {
        let mut g = Registry::new(1 << 20);
        let pd = g.alloc_pd(1).unwrap();
        assert!(pd >= mpa_ctl_proto::FIRST_ALLOCATED_PD);
        assert_ne!(g.alloc_pd(1).unwrap(), pd);
        assert_eq!(g.domain_owner(pd), Some(1));
        assert_eq!(g.check_domain(pd, 2).unwrap_err().0, ErrorCode::Forbidden);
        assert_eq!(
            g.create(100, pd, true, false, 2).unwrap_err().0,
            ErrorCode::Forbidden
        );
        assert_eq!(g.subscribe(pd, 2, 9).unwrap_err().0, ErrorCode::Forbidden);
        // A number in the allocated range that nobody was given is nobody's to claim.
        assert_eq!(
            g.create(100, pd + 100, true, false, 1).unwrap_err().0,
            ErrorCode::Forbidden
        );
        let r = g.create(100, pd, true, false, 1).unwrap();
        assert_eq!(g.dealloc_pd(pd, 2).unwrap_err().0, ErrorCode::Forbidden);
        assert_eq!(g.dealloc_pd(pd, 1).unwrap_err().0, ErrorCode::BadRequest);
        g.destroy_for(r.info.stag, 1).unwrap();
        // Empty, the domain is still held.
        assert_eq!(g.domain_owner(pd), Some(1));
        g.dealloc_pd(pd, 1).unwrap();
        assert_eq!(g.domain_owner(pd), None);
        assert_eq!(g.check_domain(pd, 1).unwrap_err().0, ErrorCode::Forbidden);
        // The owner going releases what it allocated.
        let other = g.alloc_pd(3).unwrap();
        g.client_gone(3);
        assert_eq!(g.domain_owner(other), None);
        for _ in 0..MAX_PDS_PER_CLIENT {
            g.alloc_pd(4).unwrap();
        }
        assert_eq!(g.alloc_pd(4).unwrap_err().0, ErrorCode::Limit);
    }

    /// A domain belongs to the first client that creates a region in it or subscribes to
    /// it; the others are refused (Forbidden) until it is released.
    #[test]
    fn domains_belong_to_one_client() {
        let mut g = Registry::new(1 << 20);
        let forbidden = |r: Result<(), Refusal>| r.unwrap_err().0 == ErrorCode::Forbidden;
        let a = g.create(100, 5, true, false, 1).unwrap();
        assert_eq!(g.domain_owner(5), Some(1));
        assert_eq!(
            g.create(100, 5, true, false, 2).unwrap_err().0,
            ErrorCode::Forbidden
        );
        assert!(forbidden(g.subscribe(5, 2, 9).map(|_| ())));
        assert!(forbidden(g.destroy_for(a.info.stag, 2)));
        assert!(forbidden(g.check_domain(5, 2)));
        assert_eq!(g.subscribe(5, 1, 10).unwrap(), None);
        assert_eq!(g.subscriber(5), Some(1));
        // Its last region gone, the owner still holds the domain by its subscription, and
        // releases it by unsubscribing.
        g.destroy_for(a.info.stag, 1).unwrap();
        assert_eq!(g.domain_owner(5), Some(1));
        assert!(forbidden(g.subscribe(5, 2, 9).map(|_| ())));
        assert!(forbidden(g.unsubscribe(5, 2).map(|_| ())));
        assert_eq!(g.unsubscribe(5, 1).unwrap(), 10);
        assert_eq!(g.domain_owner(5), None);
        assert!(g.unsubscribe(5, 1).is_err());
        g.subscribe(5, 1, 11).unwrap();
        assert_eq!(
            g.subscribe(5, 1, 12).unwrap(),
            Some(11),
            "a new subscription replaces"
        );
        // Subscribing alone claims a domain; the owner leaving releases it.
        g.subscribe(6, 1, 13).unwrap();
        assert!(g.create(100, 6, true, false, 2).is_err());
        g.client_gone(1);
        assert_eq!(g.domain_owner(5), None);
        assert_eq!(g.domain_owner(6), None);
        g.subscribe(5, 2, 14).unwrap();
        assert_eq!(g.subscriber(5), Some(2));
        // A region destroyed with no subscription releases its domain.
        let b = g.create(100, 7, true, false, 3).unwrap();
        g.destroy_for(b.info.stag, 3).unwrap();
        assert_eq!(g.domain_owner(7), None);
        g.create(100, 7, true, false, 4).unwrap();
    }
}
