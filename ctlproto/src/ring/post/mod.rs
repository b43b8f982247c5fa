//! Posts through shared memory: the application's RDMA Writes, Sends and Reads reach a worker
//! without a control-socket round trip. One single-producer/single-consumer queue per
//! (subscription, worker), all queues of a subscription in one sealed memfd that the datapath
//! creates (it decides the capacity) and passes with SCM_RIGHTS, with an eventfd the
//! application writes to wake a sleeping worker.
//!
//! The file is laid out as the completion rings are ([`super`]: the same three header lines
//! and free-running indices, magic `"MPAQ"`, its own layout version [`POST_LAYOUT_VERSION`],
//! the lost word at 136 unused and 0), the roles reversed: the application produces, the
//! worker consumes and owns `waiting`. Records of [`POST_LEN`] octets, little endian:
//!
//! | offset | field | meaning |
//! |---|---|---|
//! | 0 | op u8 | 1 Write, 2 Send, 3 Read |
//! | 1 | flags u8 | bit 0: unsignaled (the messages complete only when they fail); other bits 0 |
//! | 2 | 6 × 0 | |
//! | 8 | flow_id u64 | the connection |
//! | 16 | offset u64 | offset in the local region of the first message's octets |
//! | 24 | len u64 | octets per message (≥ 1) |
//! | 32 | remote_to u64 | Write: the sink's tagged offset; Read: the source's; Send: 0 |
//! | 40 | wr_id u64 | the work request id: message `i` completes with `wr_id + i`; a refusal ([`crate::CompletionKind::PostRefused`]) carries it |
//! | 48 | stag u32 | the local region |
//! | 52 | count u32 | messages (≥ 1), message `i` at `offset + i·len` (and `remote_to + i·len`) |
//! | 56 | remote stag u32 | Write: the peer's sink STag; Read: the peer's source STag; Send: 0 |
//! | 60 | 4 × 0 | |
//!
//! A post means what [`crate::Message::PostWrite`], [`crate::Message::PostSend`] and
//! [`crate::Message::PostRead`] mean.
//!
//! The application never loses a post silently: [`PostProducer::try_post`] refuses one that
//! does not fit ([`PostQueueFull`]), and it tries again once the worker has read. It
//! publishes a burst with [`PostProducer::publish`], which — after a full fence — tells it
//! whether the worker sleeps (its `waiting` flag was set; now cleared), the only case where
//! it writes the eventfd. The worker sets `waiting`, fences and looks at the queue again
//! before it sleeps ([`PostReader::prepare_sleep`]), so one of the two always sees the other.
//!
//! Every octet of the file is the application's to scribble on at any time. The worker copies
//! each record out of the slot once and decodes the copy ([`decode_post`] refuses an
//! unknown op, a non-zero padding octet, a Send naming a remote region, a count or length of
//! 0); a head that goes back or runs more than a queue ahead of the worker's own tail is
//! [`PostQueueError::Corrupt`], after which the reader refuses to read that queue again.
//! Create each [`PostReader`] before passing the descriptor: its tail is then the creator's.
//!
//! No `unsafe` here: every access to the shared octets goes through the ring code shared
//! with the completion rings.
#![deny(unsafe_code)]

use super::spsc::{ring_bytes_of, ReadEnd, RecordLayout, Rings, WriteEnd};
use super::RingError;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;

/// Octets of one post record.
pub const POST_LEN: usize = 64;
/// `"MPAQ"`.
pub const POST_MAGIC: u32 = u32::from_le_bytes(*b"MPAQ");
/// Version of the post queue layout.
pub const POST_LAYOUT_VERSION: u32 = 1;

const OP_WRITE: u8 = 1;
const OP_SEND: u8 = 2;
const OP_READ: u8 = 3;

/// The post queues' kind of ring file.
pub(crate) enum Posts {}

impl RecordLayout for Posts {
    const MAGIC: u32 = POST_MAGIC;
    const VERSION: u32 = POST_LAYOUT_VERSION;
    const LEN: usize = POST_LEN;
}

/// Octets one queue of `capacity` records takes in the file (a whole number of pages).
pub fn queue_bytes(capacity: u32) -> usize {
    ring_bytes_of(POST_LEN, capacity)
}

/// What a post asks for, with what only that kind names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum PostOp {
    /// RDMA Writes into the peer's region.
    Write {
        /// The peer's sink STag.
        sink_stag: u32,
        /// The sink's tagged offset of the first Write.
        sink_to: u64,
    },
    /// Sends (queue 0, consecutive MSNs).
    Send,
    /// RDMA Reads of the peer's region into ours.
    Read {
        /// The peer's source STag.
        src_stag: u32,
        /// The source's tagged offset of the first Read.
        src_to: u64,
    },
}

/// One work request: `count` messages of `len` octets each on connection `flow_id`, message
/// `i` reading (Write, Send) or filling (Read) region `stag` at `offset + i·len`. The same
/// type travels through the shared-memory post queue ([`encode_post`]) and over the control
/// socket ([`crate::Message::Post`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorkRequest {
    /// The connection.
    pub flow_id: u64,
    /// The work request id: message `i` completes with `wr_id + i` (a refusal carries it
    /// too).
    pub wr_id: u64,
    /// The local region.
    pub stag: u32,
    /// Offset of the first message's octets in it.
    pub offset: u64,
    /// Octets per message (≥ 1).
    pub len: u64,
    /// Messages (≥ 1).
    pub count: u32,
    /// Write, Send or Read.
    pub op: PostOp,
    /// Complete each message when done; otherwise only a failure completes.
    pub signaled: bool,
}

/// What is wrong with a post record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostDefect {
    /// An op other than 1 (Write), 2 (Send), 3 (Read).
    #[error("unknown op {0}")]
    UnknownOp(u8),
    /// A padding octet is not 0.
    #[error("non-zero padding")]
    Padding,
    /// A Send with a remote STag or tagged offset.
    #[error("a Send names a remote region")]
    SendRemote,
    /// No message.
    #[error("count 0")]
    ZeroCount,
    /// Messages of no octet.
    #[error("length 0")]
    ZeroLen,
}

/// A record the worker refuses, with what identifies it to the application (as read: the
/// octets were the application's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("post {wr_id:#x} on connection {flow_id} refused: {defect}")]
pub struct PostRefused {
    /// The flow the record names.
    pub flow_id: u64,
    /// The record's wr_id.
    pub wr_id: u64,
    /// The record's message count, as written (what its poster counts as outstanding).
    pub count: u32,
    /// Why.
    pub defect: PostDefect,
}

/// The octets of `p` in a slot.
pub fn encode_post(p: &WorkRequest) -> [u8; POST_LEN] {
    let (op, remote_stag, remote_to) = match p.op {
        PostOp::Write { sink_stag, sink_to } => (OP_WRITE, sink_stag, sink_to),
        PostOp::Send => (OP_SEND, 0, 0),
        PostOp::Read { src_stag, src_to } => (OP_READ, src_stag, src_to),
    };
    let mut b = [0u8; POST_LEN];
    b[0] = op;
    b[1] = u8::from(!p.signaled);
    b[8..16].copy_from_slice(&p.flow_id.to_le_bytes());
    b[16..24].copy_from_slice(&p.offset.to_le_bytes());
    b[24..32].copy_from_slice(&p.len.to_le_bytes());
    b[32..40].copy_from_slice(&remote_to.to_le_bytes());
    b[40..48].copy_from_slice(&p.wr_id.to_le_bytes());
    b[48..52].copy_from_slice(&p.stag.to_le_bytes());
    b[52..56].copy_from_slice(&p.count.to_le_bytes());
    b[56..60].copy_from_slice(&remote_stag.to_le_bytes());
    b
}

/// The post in a slot's octets (a copy: never the shared slot itself), or why not.
pub fn decode_post(b: &[u8; POST_LEN]) -> Result<WorkRequest, PostRefused> {
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
    let (flow_id, wr_id, count) = (u64_at(8), u64_at(40), u32_at(52));
    let refuse = |defect| PostRefused {
        flow_id,
        wr_id,
        count,
        defect,
    };
    let (remote_stag, remote_to) = (u32_at(56), u64_at(32));
    let op = match b[0] {
        OP_WRITE => PostOp::Write {
            sink_stag: remote_stag,
            sink_to: remote_to,
        },
        OP_SEND => PostOp::Send,
        OP_READ => PostOp::Read {
            src_stag: remote_stag,
            src_to: remote_to,
        },
        op => return Err(refuse(PostDefect::UnknownOp(op))),
    };
    if b[1] & !1 != 0 || b[2..8].iter().chain(&b[60..64]).any(|&x| x != 0) {
        return Err(refuse(PostDefect::Padding));
    }
    if op == PostOp::Send && (remote_stag != 0 || remote_to != 0) {
        return Err(refuse(PostDefect::SendRemote));
    }
    let p = WorkRequest {
        flow_id,
        wr_id,
        stag: u32_at(48),
        offset: u64_at(16),
        len: u64_at(24),
        count: u32_at(52),
        op,
        signaled: b[1] & 1 == 0,
    };
    if p.count == 0 {
        return Err(refuse(PostDefect::ZeroCount));
    }
    if p.len == 0 {
        return Err(refuse(PostDefect::ZeroLen));
    }
    Ok(p)
}

/// Why a post queue file could not be made, mapped or read.
#[derive(Debug, thiserror::Error)]
pub enum PostQueueError {
    /// Capacity not a power of two in range, or a queue count out of range.
    #[error("post queues: {queues} queues of {capacity} records (capacity a power of two in {min} ..= {max}, 1 ..= {most} queues)",
        min = super::MIN_CAPACITY, max = super::MAX_CAPACITY, most = super::MAX_RINGS)]
    Shape {
        /// Queues asked for.
        queues: u32,
        /// Records per queue asked for.
        capacity: u32,
    },
    /// The kernel refused.
    #[error("post queues: {what}: {err}")]
    Sys {
        /// The call.
        what: &'static str,
        /// The error.
        err: nix::Error,
    },
    /// The file is not what the datapath announced (size, seals, header).
    #[error("post queues: {0}")]
    Layout(&'static str),
    /// A queue's head makes no sense: the application wrote its index wrong (or let
    /// something else write it). The queue is not read again.
    #[error("post queue {queue}: {what}")]
    Corrupt {
        /// The queue.
        queue: u32,
        /// What was wrong.
        what: &'static str,
    },
}

impl From<RingError> for PostQueueError {
    fn from(e: RingError) -> PostQueueError {
        match e {
            RingError::Shape { rings, capacity } => PostQueueError::Shape {
                queues: rings,
                capacity,
            },
            RingError::Sys { what, err } => PostQueueError::Sys { what, err },
            RingError::Layout(what) => PostQueueError::Layout(what),
            RingError::Corrupt { ring, what } => PostQueueError::Corrupt { queue: ring, what },
        }
    }
}

/// A post did not fit: the worker has not read the queue's every slot yet. Nothing was
/// written; try again after the worker has read (or post through the control socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("post queue full: the worker has not read what was posted before")]
pub struct PostQueueFull;

/// The shared mapping of a subscription's post queues (one per worker).
pub struct PostQueueFile(Rings<Posts>);

impl std::fmt::Debug for PostQueueFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostQueueFile")
            .field("queues", &self.0.rings())
            .field("capacity", &self.0.capacity())
            .finish()
    }
}

impl PostQueueFile {
    /// Creates a sealed memfd named `name` holding `queues` empty queues of `capacity`
    /// records (the datapath's side).
    pub fn create(name: &str, queues: u32, capacity: u32) -> Result<PostQueueFile, PostQueueError> {
        Self::create_at(name, queues, capacity, 0)
    }

    /// [`PostQueueFile::create`] with every queue's indices starting at `start` (tests of
    /// index wrap-around).
    pub fn create_at(
        name: &str,
        queues: u32,
        capacity: u32,
        start: u64,
    ) -> Result<PostQueueFile, PostQueueError> {
        Ok(PostQueueFile(Rings::create_at(
            name, queues, capacity, start,
        )?))
    }

    /// Maps a post queue file received from the datapath, checking that it is sealed, of the
    /// size `queues` × `capacity` make, and that every header says so (the application's
    /// side).
    pub fn open(fd: OwnedFd, queues: u32, capacity: u32) -> Result<PostQueueFile, PostQueueError> {
        Ok(PostQueueFile(Rings::open(fd, queues, capacity)?))
    }

    /// The descriptor to pass to the application.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.0.fd()
    }

    /// Queues in the file.
    pub fn queues(&self) -> u32 {
        self.0.rings()
    }

    /// Records per queue.
    pub fn capacity(&self) -> u32 {
        self.0.capacity()
    }

    /// Octets mapped.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The application's end of one queue.
#[derive(Debug)]
pub struct PostProducer {
    file: Arc<PostQueueFile>,
    end: WriteEnd,
}

impl PostProducer {
    /// The producer of queue `queue` of `file` (`None` when there is no such queue).
    pub fn new(file: Arc<PostQueueFile>, queue: u32) -> Option<PostProducer> {
        let end = WriteEnd::new(&file.0, queue)?;
        Some(PostProducer { file, end })
    }

    /// Writes `post` into the next slot, not yet visible to the worker (see
    /// [`PostProducer::publish`]); no system call. [`PostQueueFull`] when the worker has not
    /// freed a slot: nothing was written.
    #[inline]
    pub fn try_post(&mut self, post: &WorkRequest) -> Result<(), PostQueueFull> {
        if !self.end.has_room(&self.file.0) {
            return Err(PostQueueFull);
        }
        self.end.write(&self.file.0, &encode_post(post));
        Ok(())
    }

    /// Makes every post written so far visible to the worker (release); `true` when the
    /// worker sleeps and must be woken (its `waiting` flag was set, and is now cleared):
    /// then write the queue's eventfd ([`super::Waker::wake`]). Once per burst.
    #[must_use]
    pub fn publish(&mut self) -> bool {
        if !self.end.unpublished() {
            return false;
        }
        self.end.publish(&self.file.0);
        self.end.take_waiting(&self.file.0)
    }

    /// Free slots as far as this producer knows (at least; the worker may have freed more).
    pub fn room(&self) -> u64 {
        self.end.room()
    }

    /// The producer index: posts written.
    pub fn head(&self) -> u64 {
        self.end.head()
    }

    /// This queue's index in the file.
    pub fn queue(&self) -> u32 {
        self.end.ring()
    }
}

/// The worker's end of one queue.
#[derive(Debug)]
pub struct PostReader {
    file: Arc<PostQueueFile>,
    end: ReadEnd,
    /// Set at the first corrupt index: the queue is not read again.
    failed: Option<&'static str>,
}

impl PostReader {
    /// The reader of queue `queue` of `file` (`None` when there is no such queue).
    pub fn new(file: Arc<PostQueueFile>, queue: u32) -> Option<PostReader> {
        let end = ReadEnd::new(&file.0, queue)?;
        Some(PostReader {
            file,
            end,
            failed: None,
        })
    }

    fn corrupt(&self, what: &'static str) -> PostQueueError {
        PostQueueError::Corrupt {
            queue: self.end.ring(),
            what,
        }
    }

    /// Appends up to `max` records to `out` (a post, or the refusal of a record that makes
    /// no sense), oldest first, and gives their slots back to the application; how many.
    /// Allocates only when `out` has no room for them. A corrupt head is an error now and at
    /// every later call.
    pub fn take(
        &mut self,
        out: &mut Vec<Result<WorkRequest, PostRefused>>,
        max: usize,
    ) -> Result<usize, PostQueueError> {
        if let Some(what) = self.failed {
            return Err(self.corrupt(what));
        }
        let unread = match self.end.unread(&self.file.0) {
            Ok(n) => n,
            Err(what) => {
                self.failed = Some(what);
                return Err(self.corrupt(what));
            }
        };
        // At most a queue's worth: `unread` was checked against the capacity.
        let n = usize::try_from(unread).map_or(max, |u| u.min(max));
        for _ in 0..n {
            let mut b = [0u8; POST_LEN];
            self.end.read(&self.file.0, &mut b);
            out.push(decode_post(&b));
            self.end.advance();
        }
        self.end.commit(&self.file.0);
        Ok(n)
    }

    /// Something unread (or a head that will turn out corrupt); never for a queue already
    /// found corrupt, so that it does not keep the worker awake.
    pub fn has_news(&self) -> bool {
        self.failed.is_none() && self.end.has_news(&self.file.0)
    }

    /// Before sleeping: sets the `waiting` flag, then looks again; `false` (flag cleared)
    /// when something arrived meanwhile and the worker must not sleep.
    pub fn prepare_sleep(&mut self) -> bool {
        self.end.set_waiting(&self.file.0, true);
        let quiet = !self.has_news();
        if !quiet {
            self.finish_sleep();
        }
        quiet
    }

    /// After sleeping (or deciding not to): clears the `waiting` flag if the application did
    /// not.
    pub fn finish_sleep(&self) {
        self.end.set_waiting(&self.file.0, false);
    }

    /// The consumer index: records taken.
    pub fn tail(&self) -> u64 {
        self.end.tail()
    }

    /// This queue's index in the file.
    pub fn queue(&self) -> u32 {
        self.end.ring()
    }
}

#[cfg(test)]
mod tests;
