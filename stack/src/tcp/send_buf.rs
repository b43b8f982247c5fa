//! The send buffer: a ring of octets from SND.UNA on, allocated once.

/// The byte ring [`crate::tcp::Connection::send`] fills.
pub struct SendBuffer {
    ring: Box<[u8]>,
    /// Ring index of the octet at SND.UNA.
    head: usize,
    len: usize,
}

impl std::fmt::Debug for SendBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBuffer")
            .field("capacity", &self.ring.len())
            .field("head", &self.head)
            .field("len", &self.len)
            .finish()
    }
}

impl SendBuffer {
    /// An empty ring of `capacity` octets (at least one).
    pub(crate) fn new(capacity: usize) -> SendBuffer {
        SendBuffer {
            ring: vec![0u8; capacity.max(1)].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    /// Octets queued (sent or not) and not yet acknowledged.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Room for more octets.
    #[cfg(test)]
    pub(crate) fn free(&self) -> usize {
        self.ring.len() - self.len
    }

    /// Queues as much of `data` as fits; returns how much.
    #[cfg(test)]
    pub(crate) fn push(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.free());
        let cap = self.ring.len();
        let tail = (self.head + self.len) % cap;
        let first = (cap - tail).min(n);
        self.ring[tail..tail + first].copy_from_slice(&data[..first]);
        self.ring[..n - first].copy_from_slice(&data[first..n]);
        self.len += n;
        n
    }

    /// Copies `out.len()` octets starting `off` octets after SND.UNA. The caller keeps
    /// `off + out.len() <= len()`; octets past the end are left untouched.
    pub(crate) fn copy_out(&self, off: usize, out: &mut [u8]) {
        let n = out.len().min(self.len.saturating_sub(off));
        let cap = self.ring.len();
        let pos = (self.head + off) % cap;
        let first = (cap - pos).min(n);
        out[..first].copy_from_slice(&self.ring[pos..pos + first]);
        out[first..n].copy_from_slice(&self.ring[..n - first]);
    }

    /// Frees `n` acknowledged octets from the front.
    pub(crate) fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        self.head = (self.head + n) % self.ring.len();
        self.len -= n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps() {
        let mut b = SendBuffer::new(8);
        assert_eq!(b.push(b"abcdef"), 6);
        b.consume(4);
        assert_eq!(b.push(b"ghijklmn"), 6);
        assert_eq!(b.free(), 0);
        let mut out = [0u8; 8];
        b.copy_out(0, &mut out);
        assert_eq!(&out, b"efghijkl");
        let mut out = [0u8; 3];
        b.copy_out(5, &mut out);
        assert_eq!(&out, b"jkl");
        b.consume(100);
        assert_eq!(b.len(), 0);
    }
}
