//! The consumer side of the completion rings: one reader per ring, a set per subscription,
//! and the eventfd that wakes a sleeping consumer.

use super::*;

/// The consumer's end of one ring.
#[derive(Debug)]
pub struct Reader {
    file: Arc<RingFile>,
    end: ReadEnd,
    /// Lost records reported so far.
    accounted: u64,
}

/// What [`Reader::take`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing unread.
    Empty,
    /// This many records were lost here (between what was read and what comes next);
    /// reported once.
    Lost(u64),
    /// A record (consumed).
    Record(Record),
}

impl Reader {
    /// The consumer of ring `ring` of `file` (`None` when there is no such ring).
    pub fn new(file: Arc<RingFile>, ring: u32) -> Option<Reader> {
        let end = ReadEnd::new(&file.0, ring)?;
        // Losses before the consumer mapped the file are reported too: a ring starts with
        // none.
        Some(Reader {
            end,
            accounted: 0,
            file,
        })
    }

    fn corrupt(&self, what: &'static str) -> RingError {
        RingError::Corrupt {
            ring: self.end.ring(),
            what,
        }
    }

    /// The next record without consuming it, or a loss before it (reported, then the record
    /// follows at the next call), or `Empty` (after reporting any loss after the last record).
    pub fn peek(&mut self) -> Result<Next, RingError> {
        // Lost before head: the producer stores head before lost, so a lost count read here
        // comes with every record written before those losses (a trailing loss is reported
        // only once they are all read).
        let lost = self.lost();
        let unread = self
            .end
            .unread(&self.file.0)
            .map_err(|what| self.corrupt(what))?;
        if unread == 0 {
            if lost.wrapping_sub(self.accounted) as i64 > 0 {
                let n = lost.wrapping_sub(self.accounted);
                self.accounted = lost;
                return Ok(Next::Lost(n));
            }
            return Ok(Next::Empty);
        }
        let mut b = [0u8; RECORD_LEN];
        self.end.read(&self.file.0, &mut b);
        let (r, l) = decode_record(&b).ok_or_else(|| self.corrupt("unknown record"))?;
        if l.wrapping_sub(self.accounted) as i64 > 0 {
            let n = l.wrapping_sub(self.accounted);
            self.accounted = l;
            return Ok(Next::Lost(n));
        }
        Ok(Next::Record(r))
    }

    /// Consumes the record [`Reader::peek`] returned (visible to the producer at
    /// [`Reader::commit`]).
    pub fn advance(&mut self) {
        self.end.advance();
    }

    /// The next record, consumed, or a loss, or `Empty`.
    pub fn take(&mut self) -> Result<Next, RingError> {
        let n = self.peek()?;
        if let Next::Record(_) = n {
            self.advance();
        }
        Ok(n)
    }

    /// Gives the slots consumed back to the producer.
    pub fn commit(&mut self) {
        self.end.commit(&self.file.0);
    }

    /// Something unread, or a loss not yet reported.
    pub fn has_news(&self) -> bool {
        let lost = self.lost();
        self.end.has_news(&self.file.0) || lost != self.accounted
    }

    /// The producer's lost count.
    fn lost(&self) -> u64 {
        self.file
            .0
            .u64_at(self.end.ring(), OFF_LOST)
            .load(Ordering::Acquire)
    }

    /// The consumer index: records consumed.
    pub fn tail(&self) -> u64 {
        self.end.tail()
    }

    /// This ring's index in the file.
    pub fn ring(&self) -> u32 {
        self.end.ring()
    }

    /// Sets or clears the `waiting` flag. Setting it is followed by a full fence: check the
    /// ring again after it, before sleeping.
    pub fn set_waiting(&self, on: bool) {
        self.end.set_waiting(&self.file.0, on);
    }
}

/// The consumer's view of one subscription: every worker's ring, read in turn, with
/// [`Record::Moved`] markers honoured so that a flow's completions stay in order when it
/// moves between workers.
#[derive(Debug)]
pub struct RingSet {
    readers: Vec<Reader>,
    next: usize,
}

impl RingSet {
    /// The ring file the rings live in (shared with the datapath's workers).
    pub fn file(&self) -> Option<&RingFile> {
        self.readers.first().map(|r| &*r.file)
    }

    /// Every ring of `file`.
    pub fn new(file: Arc<RingFile>) -> RingSet {
        RingSet {
            readers: (0..file.rings())
                .filter_map(|r| Reader::new(file.clone(), r))
                .collect(),
            next: 0,
        }
    }

    /// Moves up to `max` completions into `out`, in order per connection. Stops at a loss
    /// and returns how many records were lost there (`out` then holds what came before it;
    /// what follows comes at the next call); 0 when nothing was lost.
    pub fn poll(&mut self, out: &mut Vec<Completion>, max: usize) -> Result<u64, RingError> {
        self.poll_tagged(out, None, max)
    }

    /// [`RingSet::poll`], and for each completion appended to `out` the index of the ring it
    /// came from appended to `rings` (the worker that wrote it: the one that owned its flow
    /// then).
    pub fn poll_with_rings(
        &mut self,
        out: &mut Vec<Completion>,
        rings: &mut Vec<u32>,
        max: usize,
    ) -> Result<u64, RingError> {
        self.poll_tagged(out, Some(rings), max)
    }

    fn poll_tagged(
        &mut self,
        out: &mut Vec<Completion>,
        rings: Option<&mut Vec<u32>>,
        max: usize,
    ) -> Result<u64, RingError> {
        let n = self.readers.len();
        let start = self.next;
        self.next = (self.next + 1) % n.max(1);
        let r = self.poll_from(start, out, rings, max);
        for rd in &mut self.readers {
            rd.commit();
        }
        r
    }

    fn poll_from(
        &mut self,
        start: usize,
        out: &mut Vec<Completion>,
        mut rings: Option<&mut Vec<u32>>,
        max: usize,
    ) -> Result<u64, RingError> {
        let n = self.readers.len();
        // Passes until one makes no progress: a ring held by a Moved marker may be free once
        // the ring it waits for was read further in the same pass.
        loop {
            let mut progress = false;
            for k in 0..n {
                let i = (start + k) % n;
                while out.len() < max {
                    match self.readers[i].peek()? {
                        Next::Empty => break,
                        Next::Lost(l) => return Ok(l),
                        Next::Record(Record::Completion(c)) => {
                            out.push(c);
                            if let Some(r) = rings.as_deref_mut() {
                                r.push(self.readers[i].ring());
                            }
                            self.readers[i].advance();
                            progress = true;
                        }
                        Next::Record(Record::Moved {
                            from_ring,
                            position,
                            ..
                        }) => {
                            let done = self
                                .readers
                                .get(from_ring as usize)
                                .is_none_or(|r| position.wrapping_sub(r.tail()) as i64 <= 0);
                            if !done {
                                break;
                            }
                            self.readers[i].advance();
                            progress = true;
                        }
                    }
                }
            }
            if !progress || out.len() >= max {
                return Ok(0);
            }
        }
    }

    /// Before sleeping: sets every ring's `waiting` flag, then looks again; `false` (flags
    /// cleared) when something arrived meanwhile and the caller must not sleep.
    pub fn prepare_sleep(&mut self) -> bool {
        for r in &self.readers {
            r.set_waiting(true);
        }
        let quiet = self.readers.iter().all(|r| !r.has_news());
        if !quiet {
            self.finish_sleep();
        }
        quiet
    }

    /// After sleeping: clears the `waiting` flags the producers did not clear.
    pub fn finish_sleep(&self) {
        for r in &self.readers {
            r.set_waiting(false);
        }
    }

    /// Records consumed from each ring.
    pub fn tails(&self) -> Vec<u64> {
        self.readers.iter().map(Reader::tail).collect()
    }
}

/// The eventfd of a subscription as its producers hold it: the workers for completion rings,
/// the application for post queues.
#[derive(Debug, Clone)]
pub struct Waker(Arc<OwnedFd>);

impl Waker {
    /// A fresh eventfd (close-on-exec, non-blocking) and the waker writing it.
    pub fn create() -> Result<Waker, RingError> {
        use nix::sys::eventfd::{EfdFlags, EventFd};
        let e = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(sys("eventfd"))?;
        Ok(Waker(Arc::new(e.into())))
    }

    /// The waker of an eventfd received from the other process (an application ringing a
    /// worker's post queue doorbell).
    pub fn from_fd(fd: OwnedFd) -> Waker {
        Waker(Arc::new(fd))
    }

    /// Wakes the sleeping side (one system call: only when its `waiting` flag was set).
    pub fn wake(&self) {
        // A full counter (EAGAIN) already wakes the consumer.
        let _ = nix::unistd::write(&*self.0, &1u64.to_ne_bytes());
    }

    /// The descriptor to pass to the consumer.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Reads and resets an eventfd without blocking (the consumer after a wake-up).
pub fn drain_eventfd(fd: BorrowedFd<'_>) {
    let mut b = [0u8; 8];
    let _ = nix::unistd::read(fd, &mut b);
}
