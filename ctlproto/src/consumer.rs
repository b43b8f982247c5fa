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

use crate::{
    read_message_with_fd, write_message, Completion, ErrorCode, Message, PostTarget, ProtoError,
    RegionInfo, VERSION,
};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use std::collections::VecDeque;
use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

/// Why a consumer request failed.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// The socket or the protocol failed.
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// The datapath refused.
    #[error("datapath refused ({code:?}): {message}")]
    Refused {
        /// Its code.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
    /// Something else than the answer arrived, or the descriptor was missing.
    #[error("unexpected answer: {0}")]
    Unexpected(String),
    /// The region could not be mapped.
    #[error("mapping region {stag:#x}: {err}")]
    Map {
        /// Region.
        stag: u32,
        /// Why.
        err: nix::Error,
    },
    /// No answer in time.
    #[error("no answer from the datapath within {0:?}")]
    Timeout(Duration),
}

/// A connection to the datapath as a consumer.
pub struct Consumer {
    stream: UnixStream,
    next_id: u64,
    timeout: Duration,
    /// Completions that arrived while waiting for an answer.
    queued: VecDeque<Vec<Completion>>,
}

impl Consumer {
    /// Connects; `timeout` bounds every wait for an answer.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Consumer, ConsumerError> {
        let stream = UnixStream::connect(path).map_err(ProtoError::from)?;
        stream
            .set_read_timeout(Some(timeout))
            .map_err(ProtoError::from)?;
        let mut c = Consumer {
            stream,
            next_id: 1,
            timeout,
            queued: VecDeque::new(),
        };
        write_message(
            &mut &c.stream,
            &Message::Hello {
                version: VERSION,
                agent: format!("mpa consumer {}", env!("CARGO_PKG_VERSION")),
            },
        )?;
        match c.read()? {
            (Message::Hello { version, .. }, _) if version == VERSION => Ok(c),
            (Message::Hello { version, .. }, _) => {
                Err(ProtoError::Version { theirs: version }.into())
            }
            (Message::Error { code, message, .. }, _) => {
                Err(ConsumerError::Refused { code, message })
            }
            (m, _) => Err(ConsumerError::Unexpected(format!("{m:?}"))),
        }
    }

    fn read(&mut self) -> Result<(Message, Option<OwnedFd>), ConsumerError> {
        match read_message_with_fd(&self.stream) {
            Err(ProtoError::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(ConsumerError::Timeout(self.timeout))
            }
            r => Ok(r?),
        }
    }

    /// Sends a request and waits for its answer (completions arriving meanwhile are kept).
    fn request(
        &mut self,
        build: impl FnOnce(u64) -> Message,
    ) -> Result<(Message, Option<OwnedFd>), ConsumerError> {
        let id = self.next_id;
        self.next_id += 1;
        write_message(&mut &self.stream, &build(id))?;
        let deadline = Instant::now() + self.timeout;
        loop {
            if Instant::now() >= deadline {
                return Err(ConsumerError::Timeout(self.timeout));
            }
            match self.read()? {
                (Message::Completions { items, .. }, _) => self.queued.push_back(items),
                (Message::Error { code, message, .. }, _) => {
                    return Err(ConsumerError::Refused { code, message })
                }
                (m, fd) if answer_id(&m) == Some(id) => return Ok((m, fd)),
                (m, _) => return Err(ConsumerError::Unexpected(format!("{m:?}"))),
            }
        }
    }

    /// Creates a region of `len` octets in protection domain `pd` and maps it.
    pub fn create_region(
        &mut self,
        len: u64,
        pd: u32,
        remote_write: bool,
        remote_read: bool,
    ) -> Result<MappedRegion, ConsumerError> {
        let (m, fd) = self.request(|id| Message::CreateRegion {
            id,
            len,
            pd,
            remote_write,
            remote_read,
        })?;
        let Message::RegionCreated { region, .. } = m else {
            return Err(ConsumerError::Unexpected(format!("{m:?}")));
        };
        let fd = fd.ok_or_else(|| {
            ConsumerError::Unexpected("RegionCreated without a descriptor".into())
        })?;
        MappedRegion::map(region, fd)
    }

    /// No further placement into `stag`.
    pub fn destroy_region(&mut self, stag: u32) -> Result<(), ConsumerError> {
        self.expect_ok(|id| Message::DestroyRegion { id, stag })
    }

    /// Regions, all or of one domain.
    pub fn regions(&mut self, pd: Option<u32>) -> Result<Vec<RegionInfo>, ConsumerError> {
        match self.request(|id| Message::ListRegions { id, pd })? {
            (Message::Regions { regions, .. }, _) => Ok(regions),
            (m, _) => Err(ConsumerError::Unexpected(format!("{m:?}"))),
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

    fn expect_ok(&mut self, build: impl FnOnce(u64) -> Message) -> Result<(), ConsumerError> {
        match self.request(build)? {
            (Message::Ok { .. }, _) => Ok(()),
            (m, _) => Err(ConsumerError::Unexpected(format!("{m:?}"))),
        }
    }

    /// The next batch of completions, or `None` when none arrives before `deadline`.
    pub fn next_completions(
        &mut self,
        deadline: Instant,
    ) -> Result<Option<Vec<Completion>>, ConsumerError> {
        if let Some(b) = self.queued.pop_front() {
            return Ok(Some(b));
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.stream
                .set_read_timeout(Some(left.min(self.timeout)))
                .map_err(ProtoError::from)?;
            let r = self.read();
            self.stream
                .set_read_timeout(Some(self.timeout))
                .map_err(ProtoError::from)?;
            match r {
                Ok((Message::Completions { items, .. }, _)) => return Ok(Some(items)),
                Ok((m, _)) => return Err(ConsumerError::Unexpected(format!("{m:?}"))),
                Err(ConsumerError::Timeout(_)) => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

fn answer_id(m: &Message) -> Option<u64> {
    match m {
        Message::RegionCreated { id, .. } | Message::Regions { id, .. } | Message::Ok { id } => {
            Some(*id)
        }
        _ => None,
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
