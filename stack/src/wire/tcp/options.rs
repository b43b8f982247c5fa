//! TCP options (RFC 9293 §3.1): MSS, window scale and timestamps (RFC 7323), SACK-permitted
//! and SACK (RFC 2018): their parse and their emission.

use std::fmt;

use mpa::seq::SeqNumber;

use super::{kind, TcpWireError, MAX_SACK_BLOCKS, TIMESTAMPS_OPTION_LEN};

/// One SACK block (RFC 2018 §3): `left` is the first octet held, `right` the one after the last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SackBlock {
    /// Left edge: first sequence number of the block.
    pub(crate) left: SeqNumber,
    /// Right edge: the sequence number just after the block.
    pub(crate) right: SeqNumber,
}

/// Up to four SACK blocks, stored inline.
#[derive(Clone, Copy, Default)]
pub struct SackBlocks {
    blocks: [SackBlock; MAX_SACK_BLOCKS],
    len: u8,
}

impl SackBlocks {
    /// No blocks.
    pub(crate) const fn new() -> SackBlocks {
        SackBlocks {
            blocks: [SackBlock {
                left: SeqNumber(0),
                right: SeqNumber(0),
            }; MAX_SACK_BLOCKS],
            len: 0,
        }
    }
    /// Appends a block; returns false (and drops it) when four are held already.
    pub(crate) fn push(&mut self, b: SackBlock) -> bool {
        match self.blocks.get_mut(usize::from(self.len)) {
            Some(slot) => {
                *slot = b;
                self.len += 1;
                true
            }
            None => false,
        }
    }
    /// Removes every block.
    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }
    /// The blocks, first (most recent) first.
    pub(crate) fn as_slice(&self) -> &[SackBlock] {
        &self.blocks[..usize::from(self.len)]
    }
    /// Number of blocks.
    pub(crate) fn len(&self) -> usize {
        usize::from(self.len)
    }
    /// Whether there is no block.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl PartialEq for SackBlocks {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}
impl Eq for SackBlocks {}

impl fmt::Debug for SackBlocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// The timestamps option (RFC 7323 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpTimestamps {
    /// TSval: the sender's clock.
    pub tsval: u32,
    /// TSecr: the most recent TSval the sender received.
    pub tsecr: u32,
}

/// The options of one segment that this crate understands. Unknown options are skipped when
/// parsing and never emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpOptions {
    /// Maximum segment size (kind 2).
    pub mss: Option<u16>,
    /// Window scale shift (kind 3), as received (not clamped to 14).
    pub window_scale: Option<u8>,
    /// SACK-permitted (kind 4).
    pub sack_permitted: bool,
    /// SACK blocks (kind 5).
    pub sack: SackBlocks,
    /// Timestamps (kind 8).
    pub timestamps: Option<TcpTimestamps>,
}

impl TcpOptions {
    /// Parses an option space. EOL ends it (what follows is padding); NOP is skipped; unknown
    /// kinds are skipped by their length. Every malformed option is an error, never a panic.
    #[cfg(test)]
    #[inline]
    pub(crate) fn parse(opts: &[u8]) -> Result<TcpOptions, TcpWireError> {
        let mut out = TcpOptions::default();
        Self::parse_into(&mut out, opts)?;
        Ok(out)
    }

    /// [`TcpOptions::parse`] into `out` (meaningless after an error), the two common layouts
    /// read in place. For the receive path: the general walk is a call whose result came
    /// back through memory and was copied with wide loads over its narrow stores, a failed
    /// store forward that waits for every earlier store, the previous segment's region copy
    /// included (2 % of the pipeline's samples for segments without options).
    #[inline(always)]
    pub(crate) fn parse_into(out: &mut TcpOptions, opts: &[u8]) -> Result<(), TcpWireError> {
        if opts.is_empty() {
            *out = TcpOptions::default();
            return Ok(());
        }
        // The layout every segment of a timestamped connection carries (RFC 7323 Appendix
        // A: NOP, NOP, TS): read in one go, without walking the options.
        if let [kind::NOP, kind::NOP, kind::TIMESTAMPS, 10, a0, a1, a2, a3, e0, e1, e2, e3] = *opts
        {
            *out = TcpOptions {
                timestamps: Some(TcpTimestamps {
                    tsval: u32::from_be_bytes([a0, a1, a2, a3]),
                    tsecr: u32::from_be_bytes([e0, e1, e2, e3]),
                }),
                ..TcpOptions::default()
            };
            return Ok(());
        }
        *out = Self::parse_general(opts)?;
        Ok(())
    }

    /// [`TcpOptions::parse`] of any layout.
    pub(super) fn parse_general(opts: &[u8]) -> Result<TcpOptions, TcpWireError> {
        let mut out = TcpOptions::default();
        let mut i = 0;
        while let Some(&k) = opts.get(i) {
            match k {
                kind::EOL => break,
                kind::NOP => {
                    i += 1;
                    continue;
                }
                _ => {}
            }
            let Some(&len) = opts.get(i + 1) else {
                return Err(TcpWireError::OptionTruncated { kind: k, offset: i });
            };
            // RFC 9293 §3.1: the length counts kind and length octets, so it is at least 2.
            if len < 2 {
                return Err(TcpWireError::OptionBadLength { kind: k, len });
            }
            let end = i + usize::from(len);
            let Some(body) = opts.get(i + 2..end) else {
                return Err(TcpWireError::OptionTruncated { kind: k, offset: i });
            };
            let bad = TcpWireError::OptionBadLength { kind: k, len };
            match k {
                kind::MSS => {
                    let [a, b] = body else { return Err(bad) };
                    out.mss = Some(u16::from_be_bytes([*a, *b]));
                }
                kind::WINDOW_SCALE => {
                    let [s] = body else { return Err(bad) };
                    out.window_scale = Some(*s);
                }
                kind::SACK_PERMITTED => {
                    if !body.is_empty() {
                        return Err(bad);
                    }
                    out.sack_permitted = true;
                }
                kind::SACK => {
                    // RFC 2018 §3: length 8n + 2, with 1 <= n <= 4 in 40 option octets.
                    if body.is_empty() || body.len() % 8 != 0 || body.len() / 8 > MAX_SACK_BLOCKS {
                        return Err(bad);
                    }
                    out.sack.clear();
                    for b in body.chunks_exact(8) {
                        out.sack.push(SackBlock {
                            left: SeqNumber(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
                            right: SeqNumber(u32::from_be_bytes([b[4], b[5], b[6], b[7]])),
                        });
                    }
                }
                kind::TIMESTAMPS => {
                    let [a0, a1, a2, a3, e0, e1, e2, e3] = body else {
                        return Err(bad);
                    };
                    out.timestamps = Some(TcpTimestamps {
                        tsval: u32::from_be_bytes([*a0, *a1, *a2, *a3]),
                        tsecr: u32::from_be_bytes([*e0, *e1, *e2, *e3]),
                    });
                }
                _ => {} // unknown: skipped by its length
            }
            i = end;
        }
        Ok(out)
    }

    /// Octets [`TcpRepr::emit`] writes for these options: always a multiple of 4 (each option is aligned the
    /// way Linux aligns it, with NOPs in front).
    pub(crate) fn emitted_len(&self) -> usize {
        let mut n = 0;
        if self.mss.is_some() {
            n += 4;
        }
        if self.window_scale.is_some() {
            n += 4;
        }
        if self.sack_permitted {
            n += 4;
        }
        if self.timestamps.is_some() {
            n += TIMESTAMPS_OPTION_LEN;
        }
        if !self.sack.is_empty() {
            n += 4 + 8 * self.sack.len();
        }
        n
    }

    /// Writes the options into `out`, which must be [`TcpOptions::emitted_len`] octets.
    pub(super) fn emit(&self, out: &mut [u8]) {
        let mut w = Writer { out, at: 0 };
        if let Some(mss) = self.mss {
            w.put(&[kind::MSS, 4]);
            w.put(&mss.to_be_bytes());
        }
        if let Some(s) = self.window_scale {
            w.put(&[kind::NOP, kind::WINDOW_SCALE, 3, s]);
        }
        if self.sack_permitted {
            w.put(&[kind::NOP, kind::NOP, kind::SACK_PERMITTED, 2]);
        }
        if let Some(ts) = self.timestamps {
            w.put(&[kind::NOP, kind::NOP, kind::TIMESTAMPS, 10]);
            w.put(&ts.tsval.to_be_bytes());
            w.put(&ts.tsecr.to_be_bytes());
        }
        if !self.sack.is_empty() {
            let len = 2 + 8 * self.sack.len() as u8;
            w.put(&[kind::NOP, kind::NOP, kind::SACK, len]);
            for b in self.sack.as_slice() {
                w.put(&b.left.0.to_be_bytes());
                w.put(&b.right.0.to_be_bytes());
            }
        }
        // Pad with EOL (zero) to the end: RFC 9293 §3.1.
        w.out[w.at..].fill(kind::EOL);
    }
}

struct Writer<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, b: &[u8]) {
        self.out[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
}
