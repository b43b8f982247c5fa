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
//! | 1 | flags u8 | bit 0: unsignaled (the messages complete only when they fail); bit 1: solicited (a Send with Solicited Event); bit 2: fence (wait for the Reads posted before); other bits 0 |
//! | 2 | num_sge u8 | entries of the scatter-gather list, 1 ..= [`MAX_SGE`] (a Read: 1) |
//! | 3 | 5 × 0 | |
//! | 8 | flow_id u64 | the connection |
//! | 16 | remote_to u64 | Write: the sink's tagged offset; Read: the source's; Send: 0 |
//! | 24 | wr_id u64 | the work request id: message `i` completes with `wr_id + i`; a refusal ([`crate::CompletionKind::PostRefused`]) carries it |
//! | 32 | remote stag u32 | Write: the peer's sink STag; Read: the peer's source STag; Send: 0 |
//! | 36 | count u32 | messages (≥ 1; 1 with more than one entry), message `i` at the entry's `offset + i·len` (and `remote_to + i·len`) |
//! | 40 | 8 × 0 | |
//! | 48 + 20·k | entry k: stag u32, offset u64, len u64 | the local region, the offset in it, octets (≥ 1); entries from `num_sge` on all 0 |
//!
//! A message's payload is its entries' octets one after the other (a Write or Send gathers
//! them; a Read fills its one entry).
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
//! unknown op or flag, a non-zero padding octet, a Send naming a remote region, a count,
//! entry count or length of 0, and what [`PostDefect`] lists); a head that goes back or runs
//! more than a queue ahead of the worker's own tail is [`PostQueueError::Corrupt`], after
//! which the reader refuses to read that queue again. Create each [`PostReader`] before
//! passing the descriptor: its tail is then the creator's.
//!
//! No `unsafe` here: every access to the shared octets goes through the ring code shared
//! with the completion rings.
#![deny(unsafe_code)]

use super::spsc::{ring_bytes_of, ReadEnd, RecordLayout, Rings, WriteEnd};
use super::RingError;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;

/// Octets of one post record.
pub const POST_LEN: usize = 128;
/// `"MPAQ"`.
pub const POST_MAGIC: u32 = u32::from_le_bytes(*b"MPAQ");
/// Version of the post queue layout.
pub const POST_LAYOUT_VERSION: u32 = 2;
/// Entries of a work request's scatter-gather list at most (as a device's `max_sge`).
pub const MAX_SGE: usize = 4;

const OP_WRITE: u8 = 1;
const OP_SEND: u8 = 2;
const OP_READ: u8 = 3;

const FLAG_UNSIGNALED: u8 = 1;
const FLAG_SOLICITED: u8 = 2;
const FLAG_FENCE: u8 = 4;

const SGE_AT: usize = 48;
const SGE_LEN: usize = 20;

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

/// One entry of a scatter-gather list: `len` octets at `offset` of local region `stag` (as
/// verbs' `ibv_sge`, whose `lkey` is our STag).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sge {
    /// The local region.
    pub stag: u32,
    /// Offset in it.
    pub offset: u64,
    /// Octets.
    pub len: u64,
}

/// A scatter-gather list of 1 ..= [`MAX_SGE`] entries: a message's payload is their octets
/// one after the other.
#[derive(Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "Vec<Sge>", into = "Vec<Sge>")]
pub struct SgList {
    entries: [Sge; MAX_SGE],
    n: u8,
}

impl std::fmt::Debug for SgList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.entries()).finish()
    }
}

/// A list of no entry or more than [`MAX_SGE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a scatter-gather list holds 1 ..= {MAX_SGE} entries, not {0}")]
pub struct SgListLength(pub usize);

impl SgList {
    /// One entry.
    pub fn one(stag: u32, offset: u64, len: u64) -> SgList {
        let mut entries = [Sge::default(); MAX_SGE];
        entries[0] = Sge { stag, offset, len };
        SgList { entries, n: 1 }
    }

    /// `entries` (1 ..= [`MAX_SGE`]).
    pub fn new(entries: &[Sge]) -> Result<SgList, SgListLength> {
        if entries.is_empty() || entries.len() > MAX_SGE {
            return Err(SgListLength(entries.len()));
        }
        let mut l = SgList {
            entries: [Sge::default(); MAX_SGE],
            n: entries.len() as u8,
        };
        l.entries[..entries.len()].copy_from_slice(entries);
        Ok(l)
    }

    /// The entries.
    pub fn entries(&self) -> &[Sge] {
        &self.entries[..usize::from(self.n).min(MAX_SGE)]
    }

    /// The first entry (every list has one).
    pub fn first(&self) -> Sge {
        self.entries[0]
    }

    /// Octets of all entries, if they fit a `u64`.
    pub fn total_len(&self) -> Option<u64> {
        self.entries()
            .iter()
            .try_fold(0u64, |t, e| t.checked_add(e.len))
    }
}

impl TryFrom<Vec<Sge>> for SgList {
    type Error = SgListLength;
    fn try_from(v: Vec<Sge>) -> Result<SgList, SgListLength> {
        SgList::new(&v)
    }
}

impl From<SgList> for Vec<Sge> {
    fn from(l: SgList) -> Vec<Sge> {
        l.entries().to_vec()
    }
}

/// One work request (verbs' `ibv_send_wr`): `count` messages on connection `flow_id`, each
/// gathering its payload from `sg_list` (Write, Send) or filling its one entry (Read);
/// with one entry, message `i` reads or fills `offset + i·len`. The same type travels
/// through the shared-memory post queue ([`encode_post`]) and over the control socket
/// ([`crate::Message::Post`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorkRequest {
    /// The connection.
    pub flow_id: u64,
    /// The work request id: message `i` completes with `wr_id + i` (a refusal carries it
    /// too).
    pub wr_id: u64,
    /// Where the octets are: 1 ..= [`MAX_SGE`] entries (a Read: 1).
    pub sg_list: SgList,
    /// Messages (≥ 1; 1 when the list has more than one entry).
    pub count: u32,
    /// Write, Send or Read.
    pub op: PostOp,
    /// Complete each message when done; otherwise only a failure completes
    /// (`IBV_SEND_SIGNALED`).
    pub signaled: bool,
    /// A Send with Solicited Event (RFC 5040 §4.3; `IBV_SEND_SOLICITED`): the peer's
    /// consumer is to be woken for it. Sends only.
    #[serde(default)]
    pub solicited: bool,
    /// Start only once every Read posted before on the connection is answered
    /// (`IBV_SEND_FENCE`).
    #[serde(default)]
    pub fence: bool,
}

impl WorkRequest {
    /// A signaled request of `count` messages from one range, no solicited event, no fence.
    pub fn new(
        flow_id: u64,
        wr_id: u64,
        op: PostOp,
        stag: u32,
        offset: u64,
        len: u64,
        count: u32,
    ) -> WorkRequest {
        WorkRequest {
            flow_id,
            wr_id,
            sg_list: SgList::one(stag, offset, len),
            count,
            op,
            signaled: true,
            solicited: false,
            fence: false,
        }
    }
}

/// What is wrong with a post record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostDefect {
    /// An op other than 1 (Write), 2 (Send), 3 (Read).
    #[error("unknown op {0}")]
    UnknownOp(u8),
    /// A padding octet, an unknown flag or an entry past the list's end is not 0.
    #[error("non-zero padding")]
    Padding,
    /// A Send with a remote STag or tagged offset.
    #[error("a Send names a remote region")]
    SendRemote,
    /// No message.
    #[error("count 0")]
    ZeroCount,
    /// An entry of no octet.
    #[error("length 0")]
    ZeroLen,
    /// A list of no entry or more than [`MAX_SGE`].
    #[error("{0} scatter-gather entries (1 ..= {MAX_SGE})")]
    SgeCount(u8),
    /// More than one message from a list of more than one entry.
    #[error("a count above 1 with more than one scatter-gather entry")]
    CountWithGather,
    /// A Read scatters into more than one entry.
    #[error("a Read fills one scatter-gather entry")]
    ReadGather,
    /// The solicited flag on a Write or Read.
    #[error("only a Send can be solicited")]
    SolicitedNotSend,
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

impl WorkRequest {
    /// What is wrong with it as a record would say it ([`decode_post`]'s checks).
    pub fn defect(&self) -> Option<PostDefect> {
        let n = self.sg_list.entries().len();
        if self.count == 0 {
            Some(PostDefect::ZeroCount)
        } else if self.sg_list.entries().iter().any(|e| e.len == 0) {
            Some(PostDefect::ZeroLen)
        } else if n > 1 && self.count > 1 {
            Some(PostDefect::CountWithGather)
        } else if n > 1 && matches!(self.op, PostOp::Read { .. }) {
            Some(PostDefect::ReadGather)
        } else if self.solicited && self.op != PostOp::Send {
            Some(PostDefect::SolicitedNotSend)
        } else {
            None
        }
    }
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
    b[1] = if p.signaled { 0 } else { FLAG_UNSIGNALED }
        | if p.solicited { FLAG_SOLICITED } else { 0 }
        | if p.fence { FLAG_FENCE } else { 0 };
    b[2] = p.sg_list.entries().len() as u8;
    b[8..16].copy_from_slice(&p.flow_id.to_le_bytes());
    b[16..24].copy_from_slice(&remote_to.to_le_bytes());
    b[24..32].copy_from_slice(&p.wr_id.to_le_bytes());
    b[32..36].copy_from_slice(&remote_stag.to_le_bytes());
    b[36..40].copy_from_slice(&p.count.to_le_bytes());
    for (k, e) in p.sg_list.entries().iter().enumerate() {
        let at = SGE_AT + k * SGE_LEN;
        b[at..at + 4].copy_from_slice(&e.stag.to_le_bytes());
        b[at + 4..at + 12].copy_from_slice(&e.offset.to_le_bytes());
        b[at + 12..at + 20].copy_from_slice(&e.len.to_le_bytes());
    }
    b
}

/// The post in a slot's octets (a copy: never the shared slot itself), or why not.
pub fn decode_post(b: &[u8; POST_LEN]) -> Result<WorkRequest, PostRefused> {
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
    let (flow_id, wr_id, count) = (u64_at(8), u64_at(24), u32_at(36));
    let refuse = |defect| PostRefused {
        flow_id,
        wr_id,
        count,
        defect,
    };
    let (remote_stag, remote_to) = (u32_at(32), u64_at(16));
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
    let n = b[2];
    if n == 0 || usize::from(n) > MAX_SGE {
        return Err(refuse(PostDefect::SgeCount(n)));
    }
    let entries_end = SGE_AT + usize::from(n) * SGE_LEN;
    let flags = FLAG_UNSIGNALED | FLAG_SOLICITED | FLAG_FENCE;
    if b[1] & !flags != 0
        || b[3..8]
            .iter()
            .chain(&b[40..48])
            .chain(&b[entries_end..])
            .any(|&x| x != 0)
    {
        return Err(refuse(PostDefect::Padding));
    }
    if op == PostOp::Send && (remote_stag != 0 || remote_to != 0) {
        return Err(refuse(PostDefect::SendRemote));
    }
    let mut entries = [Sge::default(); MAX_SGE];
    for (k, e) in entries.iter_mut().take(usize::from(n)).enumerate() {
        let at = SGE_AT + k * SGE_LEN;
        *e = Sge {
            stag: u32_at(at),
            offset: u64_at(at + 4),
            len: u64_at(at + 12),
        };
    }
    let p = WorkRequest {
        flow_id,
        wr_id,
        sg_list: SgList { entries, n },
        count,
        op,
        signaled: b[1] & FLAG_UNSIGNALED == 0,
        solicited: b[1] & FLAG_SOLICITED != 0,
        fence: b[1] & FLAG_FENCE != 0,
    };
    match p.defect() {
        Some(d) => Err(refuse(d)),
        None => Ok(p),
    }
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
