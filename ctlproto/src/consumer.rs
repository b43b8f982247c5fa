//! The consumer API: what an application that owns registered memory uses. It creates
//! regions over the datapath's control socket, maps their memory (the descriptor arrives
//! with SCM_RIGHTS), posts receive buffers for Sends, and reads completions, in order per
//! connection.
//!
//! ```no_run
//! use mpa_ctl_proto::consumer::Consumer;
//! use std::time::{Duration, Instant};
//! let mut c = Consumer::connect("/run/mpa-datapath.sock".as_ref(), Duration::from_secs(5))?;
//! let region = c.create_region(1 << 20, 1, true, false)?;
//! c.subscribe(1)?;
//! // ... a peer writes (STag region.info().stag) ...
//! while let Some(batch) = c.next_completions(Instant::now() + Duration::from_secs(1))? {
//!     for done in batch { println!("{done:?}"); }
//! }
//! let mut first = [0u8; 16];
//! region.read(0, &mut first);
//! # Ok::<(), mpa_ctl_proto::consumer::ConsumerError>(())
//! ```

use crate::client::{ClientError, ControlClient};
use crate::{Completion, Message, PostTarget, RegionInfo};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

/// Why a consumer request failed.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// The socket or the protocol failed, or the datapath refused.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// An answer without the region's descriptor.
    #[error("RegionCreated for {0:#x} without a descriptor")]
    NoDescriptor(u32),
    /// The region could not be mapped.
    #[error("mapping region {stag:#x}: {err}")]
    Map {
        /// Region.
        stag: u32,
        /// Why.
        err: nix::Error,
    },
}

/// A connection to the datapath as a consumer.
pub struct Consumer {
    client: ControlClient,
}

impl Consumer {
    /// Connects; `timeout` bounds every wait for an answer.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Consumer, ConsumerError> {
        let agent = concat!("mpa consumer ", env!("CARGO_PKG_VERSION"));
        Ok(Consumer {
            client: ControlClient::connect_as(path, timeout, agent)?,
        })
    }

    fn unexpected(m: Message) -> ConsumerError {
        ClientError::Unexpected(Box::new(m)).into()
    }

    /// Creates a region of `len` octets in protection domain `pd` and maps it.
    pub fn create_region(
        &mut self,
        len: u64,
        pd: u32,
        remote_write: bool,
        remote_read: bool,
    ) -> Result<MappedRegion, ConsumerError> {
        let (m, fd) = self.client.request_with_fd(|id| Message::CreateRegion {
            id,
            len,
            pd,
            remote_write,
            remote_read,
        })?;
        let Message::RegionCreated { region, .. } = m else {
            return Err(Self::unexpected(m));
        };
        let fd = fd.ok_or(ConsumerError::NoDescriptor(region.stag))?;
        MappedRegion::map(region, fd)
    }

    /// No further placement into `stag`.
    pub fn destroy_region(&mut self, stag: u32) -> Result<(), ConsumerError> {
        self.expect_ok(|id| Message::DestroyRegion { id, stag })
    }

    /// Regions, all or of one domain.
    pub fn regions(&mut self, pd: Option<u32>) -> Result<Vec<RegionInfo>, ConsumerError> {
        match self.client.request(|id| Message::ListRegions { id, pd })? {
            Message::Regions { regions, .. } => Ok(regions),
            m => Err(Self::unexpected(m)),
        }
    }

    /// Posts `count` receive buffers of `len` octets from `offset` in region `stag`.
    pub fn post_recv(
        &mut self,
        target: PostTarget,
        stag: u32,
        offset: u64,
        len: u32,
        count: u32,
    ) -> Result<(), ConsumerError> {
        self.expect_ok(|id| Message::PostRecv {
            id,
            target,
            stag,
            offset,
            len,
            count,
        })
    }

    /// Receive the completions of domain `pd`'s connections on this consumer.
    pub fn subscribe(&mut self, pd: u32) -> Result<(), ConsumerError> {
        self.expect_ok(|id| Message::Subscribe { id, pd })
    }

    /// Stop receiving domain `pd`'s completions.
    pub fn unsubscribe(&mut self, pd: u32) -> Result<(), ConsumerError> {
        self.expect_ok(|id| Message::Unsubscribe { id, pd })
    }

    fn expect_ok(&mut self, build: impl FnOnce(u64) -> Message) -> Result<(), ConsumerError> {
        match self.client.request(build)? {
            Message::Ok { .. } => Ok(()),
            m => Err(Self::unexpected(m)),
        }
    }

    /// The next batch of completions, or `None` when none arrives before `deadline`.
    pub fn next_completions(
        &mut self,
        deadline: Instant,
    ) -> Result<Option<Vec<Completion>>, ConsumerError> {
        loop {
            match self.client.wait_notification(Some(deadline))? {
                Some(Message::Completions { items, .. }) => return Ok(Some(items)),
                // Other notifications are not for consumers.
                Some(_) => continue,
                None => return Ok(None),
            }
        }
    }
}

/// A region's memory mapped read-only into the consumer. The datapath writes it at any
/// time, so it is only read by copying ([`MappedRegion::read`]), never through a reference.
pub struct MappedRegion {
    info: RegionInfo,
    ptr: NonNull<u8>,
    len: usize,
    _fd: OwnedFd,
}

// SAFETY: the mapping is owned by this value and only read by bounds-checked raw copies.
#[allow(unsafe_code)]
unsafe impl Send for MappedRegion {}

impl MappedRegion {
    fn map(info: RegionInfo, fd: OwnedFd) -> Result<MappedRegion, ConsumerError> {
        let stag = info.stag;
        let size = usize::try_from(info.len)
            .ok()
            .and_then(NonZeroUsize::new)
            .ok_or(ConsumerError::Map {
                stag,
                err: nix::Error::EINVAL,
            })?;
        // SAFETY: a fresh read-only shared mapping of the region's descriptor, `info.len`
        // octets (the datapath sized the memfd so); no reference into it is ever formed.
        #[allow(unsafe_code)]
        let ptr = unsafe {
            mmap(
                None,
                size,
                ProtFlags::PROT_READ,
                MapFlags::MAP_SHARED,
                &fd,
                0,
            )
        }
        .map_err(|err| ConsumerError::Map { stag, err })?;
        Ok(MappedRegion {
            info,
            ptr: ptr.cast(),
            len: size.get(),
            _fd: fd,
        })
    }

    /// The region.
    pub fn info(&self) -> &RegionInfo {
        &self.info
    }

    /// Copies the octets at `off` into `dst`; `false` when out of bounds.
    pub fn read(&self, off: u64, dst: &mut [u8]) -> bool {
        let Some(off) = usize::try_from(off)
            .ok()
            .filter(|o| o.checked_add(dst.len()).is_some_and(|e| e <= self.len))
        else {
            return false;
        };
        // SAFETY: off + dst.len() <= len (checked), inside our live mapping; `dst` is not
        // part of it.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        };
        true
    }

    /// The whole region, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        self.read(0, &mut v);
        v
    }
}

impl Drop for MappedRegion {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `map` created, once.
        #[allow(unsafe_code)]
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}
