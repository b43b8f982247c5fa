//! The impairment bridge: a userspace forwarder in the bridge namespace `r` that drops,
//! reorders, duplicates, delays and corrupts frames in both directions, seeded and
//! reproducible (this kernel has no netem).
//!
//! ```text
//!   ns a ── veth a ═ ra ──[AF_PACKET]── forwarder thread ──[AF_PACKET]── rb ═ veth b ── ns b
//! ```
//! With an [`Impairment`] the bed has no Linux bridge: `ra` and `rb` carry no address, and a
//! thread of the process that owns the [`crate::TestBed`] (entered into `r`) moves every frame
//! between them through two packet sockets (`forward`). What happens to a frame is decided by
//! a sans-I/O [`Shaper`] per direction, with time passed in, so it is tested without sockets.
//!
//! Only *eligible* frames are impaired: TCP over IPv4 (unfragmented) or IPv6 (no extension
//! header) to or from the configured port ([`Scope`]), SYNs excluded unless asked for (a lost
//! SYN costs a one-second retransmission and tests nothing of MPA). Everything else (ARP,
//! neighbour discovery, other ports) is forwarded at once and untouched.
//!
//! Reproducible means: the n-th eligible frame of a direction always meets the same fate for a
//! given seed (every eligible frame draws the same number of random values). Which frame is the
//! n-th depends on the endpoints' timing (retransmissions), so counts over a live transfer vary
//! between runs; the [`Shaper`] on its own is exactly reproducible.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

mod forward;
mod packet;
pub(crate) use forward::Forwarder;

/// Parts per million in one percent.
const PPM_PER_PERCENT: f64 = 10_000.0;
/// Most frames held back for reordering at once per direction (more are not reordered).
const MAX_HELD: usize = 256;
/// Most frames waiting out their delay per direction (~128 MiB at MTU 1500 with both
/// directions full); more are dropped and counted as `overflow`, so memory stays bounded.
const MAX_QUEUED: usize = 1 << 16;

/// What the bridge does to frames of one direction. Rates are in parts per million of the
/// eligible frames; they are drawn independently for each frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rates {
    /// Dropped.
    pub drop_ppm: u32,
    /// Held back until `reorder_by` later eligible frames have passed, or `reorder_us`
    /// microseconds, whichever comes first.
    pub reorder_ppm: u32,
    /// Sent twice (the copy right after the original).
    pub dup_ppm: u32,
    /// One bit of the TCP payload flipped (frames without payload are left alone).
    pub corrupt_ppm: u32,
    /// How many later frames overtake a reordered one.
    pub reorder_by: u32,
    /// The longest a reordered frame is held, in microseconds.
    pub reorder_us: u32,
    /// Fixed delay of every eligible frame, in microseconds.
    pub delay_us: u32,
    /// Extra delay, uniform in `0..=jitter_us`; frames stay in order (a frame never leaves
    /// before the one ahead of it).
    pub jitter_us: u32,
}

impl Default for Rates {
    fn default() -> Self {
        Rates {
            drop_ppm: 0,
            reorder_ppm: 0,
            dup_ppm: 0,
            corrupt_ppm: 0,
            reorder_by: 3,
            reorder_us: 1000,
            delay_us: 0,
            jitter_us: 0,
        }
    }
}

impl Rates {
    /// Whether this direction does anything to frames.
    pub fn active(&self) -> bool {
        self.drop_ppm + self.reorder_ppm + self.dup_ppm + self.corrupt_ppm > 0
            || self.delay_us + self.jitter_us > 0
    }
}

/// Which TCP frames are eligible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// TCP to or from the bed's `loss_port` (the default).
    #[default]
    LossPort,
    /// TCP to or from this port.
    Port(u16),
    /// Every TCP frame.
    AnyTcp,
}

/// The impairment bridge's configuration ([`crate::BedConfig::impair`]); parsed from text by
/// [`FromStr`] (the syntax of `mpa-bench --impair`, see [`Impairment::SYNTAX`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Impairment {
    /// Frames from a to b.
    pub a_to_b: Rates,
    /// Frames from b to a.
    pub b_to_a: Rates,
    /// Seed of both directions' random numbers.
    pub seed: u64,
    /// Which frames are eligible.
    pub scope: Scope,
    /// Impair SYN segments too (default: they pass untouched).
    pub syn: bool,
    /// Recompute the TCP checksum after corrupting, so that only MPA's CRC can catch it.
    pub fix_checksum: bool,
}

impl Impairment {
    /// The text syntax, for help messages.
    pub const SYNTAX: &'static str = "comma-separated KEY=VALUE or FLAG: drop=PCT, reorder=PCT, \
        dup=PCT, corrupt=PCT, reorder-by=FRAMES (3), reorder-us=US (1000), delay-us=US, \
        jitter-us=US apply to a→b, or to both directions after `both` anywhere (`ba`: b→a only); \
        `ab.KEY=` / `ba.KEY=` set one direction; seed=N, port=N|any (default: the bed's port), \
        syn (impair SYNs too), fix-csum (corrupt with a valid TCP checksum: only the MPA CRC \
        catches it). Example: drop=20,reorder=5,dup=2,corrupt=0.1,delay-us=100,seed=7,both";
}

/// A bad `--impair` text: names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("impairment `{key}`: {reason} (syntax: {})", Impairment::SYNTAX)]
pub struct ImpairParseError {
    /// The key (or item) at fault.
    pub key: String,
    /// What is wrong with it.
    pub reason: String,
}

fn bad(key: &str, reason: impl Into<String>) -> ImpairParseError {
    ImpairParseError {
        key: key.to_string(),
        reason: reason.into(),
    }
}

fn percent(key: &str, v: &str) -> Result<u32, ImpairParseError> {
    let p: f64 = v
        .parse()
        .map_err(|_| bad(key, format!("`{v}` is not a percentage")))?;
    if !(0.0..=100.0).contains(&p) {
        return Err(bad(key, format!("{v}% is not in 0..=100")));
    }
    Ok((p * PPM_PER_PERCENT).round() as u32)
}

fn number<T: FromStr>(key: &str, v: &str) -> Result<T, ImpairParseError> {
    v.parse()
        .map_err(|_| bad(key, format!("`{v}` is not a valid number")))
}

/// Sets one rate key; `Ok(false)` when `key` is not a rate key.
fn set_rate(r: &mut Rates, key: &str, v: &str) -> Result<bool, ImpairParseError> {
    match key {
        "drop" | "reorder" | "dup" | "corrupt" => {
            let ppm = percent(key, v)?;
            *match key {
                "drop" => &mut r.drop_ppm,
                "reorder" => &mut r.reorder_ppm,
                "dup" => &mut r.dup_ppm,
                _ => &mut r.corrupt_ppm,
            } = ppm;
        }
        "reorder-by" => {
            r.reorder_by = number(key, v)?;
            if r.reorder_by == 0 {
                return Err(bad(key, "must be at least 1"));
            }
        }
        "reorder-us" => r.reorder_us = number(key, v)?,
        "delay-us" => r.delay_us = number(key, v)?,
        "jitter-us" => r.jitter_us = number(key, v)?,
        _ => return Ok(false),
    }
    Ok(true)
}

impl FromStr for Impairment {
    type Err = ImpairParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut imp = Impairment::default();
        // Unprefixed rate keys, in order, applied to the chosen directions at the end; prefixed
        // ones after them.
        let mut shared: Vec<(&str, &str)> = Vec::new();
        let mut own: Vec<(bool, &str, &str)> = Vec::new();
        let (mut ab, mut ba) = (true, false);
        if s.trim().is_empty() {
            return Err(bad("", "empty"));
        }
        for item in s.split(',').map(str::trim) {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (item, None),
            };
            match (key, value) {
                ("both", None) => (ab, ba) = (true, true),
                ("ab", None) => (ab, ba) = (true, false),
                ("ba", None) => (ab, ba) = (false, true),
                ("syn", None) => imp.syn = true,
                ("fix-csum", None) => imp.fix_checksum = true,
                ("seed", Some(v)) => imp.seed = number(key, v)?,
                ("port", Some("any")) => imp.scope = Scope::AnyTcp,
                ("port", Some(v)) => imp.scope = Scope::Port(number(key, v)?),
                (_, Some(v)) => {
                    let (dir, bare) = match key.split_once('.') {
                        Some(("ab", k)) => (Some(true), k),
                        Some(("ba", k)) => (Some(false), k),
                        Some(_) => return Err(bad(key, "unknown direction (ab. or ba.)")),
                        None => (None, key),
                    };
                    // Validate now so the error names the item as written.
                    if !set_rate(&mut Rates::default(), bare, v)? {
                        return Err(bad(key, "unknown key"));
                    }
                    match dir {
                        Some(d) => own.push((d, bare, v)),
                        None => shared.push((bare, v)),
                    }
                }
                (_, None) => {
                    let known = [
                        "drop",
                        "reorder",
                        "dup",
                        "corrupt",
                        "reorder-by",
                        "reorder-us",
                        "delay-us",
                        "jitter-us",
                        "seed",
                        "port",
                    ];
                    let reason = if known.contains(&key) {
                        "needs a value (KEY=VALUE)"
                    } else {
                        "unknown key"
                    };
                    return Err(bad(key, reason));
                }
            }
        }
        for (k, v) in shared {
            if ab {
                set_rate(&mut imp.a_to_b, k, v)?;
            }
            if ba {
                set_rate(&mut imp.b_to_a, k, v)?;
            }
        }
        for (d, k, v) in own {
            set_rate(if d { &mut imp.a_to_b } else { &mut imp.b_to_a }, k, v)?;
        }
        Ok(imp)
    }
}

impl fmt::Display for Rates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = |ppm: u32| ppm as f64 / PPM_PER_PERCENT;
        write!(
            f,
            "drop={} reorder={} (by {} frames / {} µs) dup={} corrupt={} delay={} µs jitter={} µs",
            pct(self.drop_ppm),
            pct(self.reorder_ppm),
            self.reorder_by,
            self.reorder_us,
            pct(self.dup_ppm),
            pct(self.corrupt_ppm),
            self.delay_us,
            self.jitter_us
        )
    }
}

/// What one direction of the bridge did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DirStats {
    /// Frames received from the interface.
    pub frames: u64,
    /// Of those, eligible for impairment.
    pub eligible: u64,
    /// Eligible frames dropped.
    pub dropped: u64,
    /// Eligible frames with a bit flipped.
    pub corrupted: u64,
    /// Eligible frames sent twice.
    pub duplicated: u64,
    /// Eligible frames held back for reordering.
    pub reordered: u64,
    /// Eligible frames delayed (a fixed delay or jitter above 0).
    pub delayed: u64,
    /// Frames sent on (duplicates included; counted by the I/O side).
    pub forwarded: u64,
    /// Frames the kernel refused to send (e.g. ENOBUFS from a full peer queue): lost.
    pub send_errors: u64,
    /// Frames the packet socket dropped before we read them (PACKET_STATISTICS): lost.
    pub socket_drops: u64,
    /// Frames larger than the receive buffer: dropped.
    pub truncated: u64,
    /// Eligible frames dropped because too many were already waiting out their delay.
    pub overflow: u64,
}

impl fmt::Display for DirStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "frames={} eligible={} dropped={} corrupted={} duplicated={} reordered={} delayed={} \
             forwarded={} send_errors={} socket_drops={} truncated={} overflow={}",
            self.frames,
            self.eligible,
            self.dropped,
            self.corrupted,
            self.duplicated,
            self.reordered,
            self.delayed,
            self.forwarded,
            self.send_errors,
            self.socket_drops,
            self.truncated,
            self.overflow
        )
    }
}

/// What the bridge did, both directions ([`crate::TestBed::impair_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ImpairStats {
    /// Frames from a to b.
    pub a_to_b: DirStats,
    /// Frames from b to a.
    pub b_to_a: DirStats,
}

impl fmt::Display for ImpairStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a→b {}; b→a {}", self.a_to_b, self.b_to_a)
    }
}

/// xorshift64* seeded through splitmix64: small, fast, and the same on every platform.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        Rng(if z == 0 { 1 } else { z })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// True with probability `ppm` per million.
    fn chance(&mut self, ppm: u32) -> bool {
        // Always draw, so that every eligible frame consumes the same randomness.
        let r = (self.next_u64() >> 11) % 1_000_000;
        r < u64::from(ppm)
    }

    /// Uniform in `0..=max`.
    fn upto(&mut self, max: u32) -> u32 {
        let r = self.next_u64() >> 11;
        (r % (u64::from(max) + 1)) as u32
    }
}

/// Where the TCP header and payload of a frame are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tcp {
    /// Offset of the TCP header in the frame.
    header: usize,
    /// Offset of the payload.
    payload: usize,
    /// End of the segment (IP length; Ethernet padding excluded).
    end: usize,
    src_port: u16,
    dst_port: u16,
    syn: bool,
}

/// The TCP segment of an Ethernet frame, if it is one the bridge may impair: IPv4 without
/// fragmentation or IPv6 without extension headers, no VLAN tag, consistent lengths.
fn tcp_of(f: &[u8]) -> Option<Tcp> {
    let be16 = |o: usize| -> Option<u16> { Some(u16::from_be_bytes([*f.get(o)?, *f.get(o + 1)?])) };
    let (header, end) = match be16(12)? {
        0x0800 => {
            let vihl = *f.get(14)?;
            let ihl = usize::from(vihl & 0x0f) * 4;
            let frag = be16(20)?;
            if vihl >> 4 != 4 || ihl < 20 || *f.get(23)? != 6 || frag & 0x3fff != 0 {
                return None;
            }
            (14 + ihl, 14 + usize::from(be16(16)?))
        }
        0x86dd => {
            if *f.get(20)? != 6 {
                return None;
            }
            (54, 54 + usize::from(be16(18)?))
        }
        _ => return None,
    };
    let doff = usize::from(*f.get(header + 12)? >> 4) * 4;
    let payload = header + doff;
    if doff < 20 || payload > end || end > f.len() {
        return None;
    }
    Some(Tcp {
        header,
        payload,
        end,
        src_port: be16(header)?,
        dst_port: be16(header + 2)?,
        syn: f[header + 13] & 0x02 != 0,
    })
}

/// RFC 1624 eqn. 3: the checksum after one 16-bit word of the summed data changed.
fn checksum_update(hc: u16, old: u16, new: u16) -> u16 {
    let mut s = u32::from(!hc) + u32::from(!old) + u32::from(new);
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// Flips bit `pick % (8 × payload length)` of the payload; with `fix` the TCP checksum is
/// updated to match. False when there is no payload.
fn corrupt(f: &mut [u8], t: &Tcp, pick: u64, fix: bool) -> bool {
    let len = t.end - t.payload;
    if len == 0 {
        return false;
    }
    let bit = (pick % (len as u64 * 8)) as usize;
    let at = t.payload + bit / 8;
    // The checksummed 16-bit word holding the octet, aligned from the TCP header's start
    // (the pseudo-header is an even number of octets); a last odd octet is padded with 0.
    let rel = (at - t.header) & !1;
    let word = |f: &[u8]| {
        let hi = f[t.header + rel];
        let lo = if t.header + rel + 1 < t.end {
            f[t.header + rel + 1]
        } else {
            0
        };
        u16::from_be_bytes([hi, lo])
    };
    let old = word(f);
    f[at] ^= 1 << (bit % 8);
    if fix {
        let c = t.header + 16;
        let hc = u16::from_be_bytes([f[c], f[c + 1]]);
        let new = checksum_update(hc, old, word(f));
        f[c..c + 2].copy_from_slice(&new.to_be_bytes());
    }
    true
}

/// A frame held back for reordering.
#[derive(Debug)]
struct Held {
    frame: Vec<u8>,
    /// Eligible frames still to overtake it.
    after: u32,
    /// When it leaves regardless (µs).
    deadline: u64,
    /// Its delay once released (µs).
    delay: u64,
}

/// One direction of the bridge: decides each frame's fate and when it leaves. Sans-I/O: the
/// caller passes frames in with [`Shaper::push`] and takes what is due with [`Shaper::pop`],
/// time in microseconds from any origin.
#[derive(Debug)]
pub struct Shaper {
    rates: Rates,
    /// The eligible port, if only one.
    port: Option<u16>,
    syn: bool,
    fix_checksum: bool,
    rng: Rng,
    /// Untouched frames, sent at once.
    ready: VecDeque<Vec<u8>>,
    /// Eligible frames with the time they are due, in order (due times never decrease).
    queue: VecDeque<(u64, Vec<u8>)>,
    last_due: u64,
    held: Vec<Held>,
    stats: DirStats,
}

impl Shaper {
    /// The direction `a_to_b` (or b → a) of `imp`; `loss_port` is the bed's port, for
    /// [`Scope::LossPort`].
    pub fn new(imp: &Impairment, a_to_b: bool, loss_port: u16) -> Shaper {
        let (rates, salt) = if a_to_b {
            (imp.a_to_b, 0xab)
        } else {
            (imp.b_to_a, 0xba)
        };
        Shaper {
            rates,
            port: match imp.scope {
                Scope::LossPort => Some(loss_port),
                Scope::Port(p) => Some(p),
                Scope::AnyTcp => None,
            },
            syn: imp.syn,
            fix_checksum: imp.fix_checksum,
            rng: Rng::new(imp.seed ^ salt),
            ready: VecDeque::new(),
            queue: VecDeque::new(),
            last_due: 0,
            held: Vec::new(),
            stats: DirStats::default(),
        }
    }

    /// What this direction did so far.
    pub fn stats(&self) -> &DirStats {
        &self.stats
    }

    /// Counters the I/O side keeps (send errors, socket drops, truncated frames).
    pub fn stats_mut(&mut self) -> &mut DirStats {
        &mut self.stats
    }

    fn eligible(&self, f: &[u8]) -> Option<Tcp> {
        if !self.rates.active() {
            return None;
        }
        let t = tcp_of(f)?;
        let port_ok = self.port.is_none_or(|p| t.src_port == p || t.dst_port == p);
        (port_ok && (self.syn || !t.syn)).then_some(t)
    }

    /// A frame arrived at `now`. Returns it when it was dropped (so its buffer can be reused).
    pub fn push(&mut self, now: u64, mut frame: Vec<u8>) -> Option<Vec<u8>> {
        self.stats.frames += 1;
        let Some(t) = self.eligible(&frame) else {
            self.ready.push_back(frame);
            return None;
        };
        self.stats.eligible += 1;
        let r = self.rates;
        // Every eligible frame draws all its numbers, whatever they decide.
        let drop = self.rng.chance(r.drop_ppm);
        let flip = self.rng.chance(r.corrupt_ppm);
        let pick = self.rng.next_u64();
        let dup = self.rng.chance(r.dup_ppm);
        let reorder = self.rng.chance(r.reorder_ppm);
        let delay = u64::from(r.delay_us) + u64::from(self.rng.upto(r.jitter_us));
        if drop {
            self.stats.dropped += 1;
            return Some(frame);
        }
        if self.queue.len() + self.held.len() >= MAX_QUEUED {
            self.stats.overflow += 1;
            return Some(frame);
        }
        if flip && corrupt(&mut frame, &t, pick, self.fix_checksum) {
            self.stats.corrupted += 1;
        }
        if delay > 0 {
            self.stats.delayed += 1;
        }
        let copy = dup.then(|| frame.clone());
        if dup {
            self.stats.duplicated += 1;
        }
        if reorder && self.held.len() < MAX_HELD {
            self.stats.reordered += 1;
            self.held.push(Held {
                frame,
                after: r.reorder_by,
                deadline: now + u64::from(r.reorder_us),
                delay,
            });
        } else {
            self.pass(now, frame, delay);
        }
        if let Some(c) = copy {
            self.pass(now, c, delay);
        }
        None
    }

    /// Queues an eligible frame; it overtakes every held one, and those whose count runs out
    /// follow it.
    fn pass(&mut self, now: u64, frame: Vec<u8>, delay: u64) {
        self.enqueue(now + delay, frame);
        let mut i = 0;
        while i < self.held.len() {
            self.held[i].after -= 1;
            if self.held[i].after == 0 {
                let h = self.held.remove(i);
                self.enqueue(now + h.delay, h.frame);
            } else {
                i += 1;
            }
        }
    }

    fn enqueue(&mut self, due: u64, frame: Vec<u8>) {
        self.last_due = self.last_due.max(due);
        self.queue.push_back((self.last_due, frame));
    }

    /// The next frame due at `now`, if any.
    pub fn pop(&mut self, now: u64) -> Option<Vec<u8>> {
        if let Some(f) = self.ready.pop_front() {
            return Some(f);
        }
        // Held frames whose time ran out go in the order they were held.
        while let Some(i) = self.held.iter().position(|h| h.deadline <= now) {
            let h = self.held.remove(i);
            self.enqueue(h.deadline + h.delay, h.frame);
        }
        if self.queue.front().is_some_and(|(due, _)| *due <= now) {
            return self.queue.pop_front().map(|(_, f)| f);
        }
        None
    }

    /// When [`Shaper::pop`] next has something (µs), if ever.
    pub fn next_due(&self) -> Option<u64> {
        if !self.ready.is_empty() {
            return Some(0);
        }
        let q = self.queue.front().map(|(d, _)| *d);
        let h = self.held.iter().map(|h| h.deadline).min();
        match (q, h) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests;
