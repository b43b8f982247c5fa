//! [`RunOctets`]: the in-order payloads of one flow's segments still in hand (a run), each with
//! the CRC32c of its octets when the parse pass took it (docs/architecture.md, "Runs of
//! segments").

#![forbid(unsafe_code)]

/// In-order payloads of consecutive segments of one flow, in stream order, all still in hand,
/// and the CRC32c of each where known: an FPDU spanning them is verified from their CRCs
/// without reading their octets again (`MpaReceiver::handle_in_order_run`).
#[derive(Debug, Default)]
pub struct RunOctets<'f> {
    octets: Vec<&'f [u8]>,
    /// `crcs[i]`: the CRC32c of `octets[i]`, if known.
    crcs: Vec<Option<u32>>,
}

impl<'f> RunOctets<'f> {
    /// An empty run.
    pub fn new() -> Self {
        RunOctets::default()
    }

    /// Appends `octets` (nothing when empty), with their CRC32c if known.
    #[inline]
    pub fn push(&mut self, octets: &'f [u8], crc: Option<u32>) {
        if !octets.is_empty() {
            self.octets.push(octets);
            self.crcs.push(crc);
        }
    }

    /// Whether the run holds no octets.
    pub fn is_empty(&self) -> bool {
        self.octets.is_empty()
    }

    /// Empties the run, keeping its allocations.
    pub fn clear(&mut self) {
        self.octets.clear();
        self.crcs.clear();
    }

    /// The payloads, in order.
    pub(crate) fn octets(&self) -> &[&'f [u8]] {
        &self.octets
    }

    /// The CRC32c of each payload, where known.
    pub(crate) fn crcs(&self) -> &[Option<u32>] {
        &self.crcs
    }

    /// The run emptied, for slices of another lifetime, its allocations kept: a worker keeps
    /// it from burst to burst.
    pub fn reuse<'b>(mut self) -> RunOctets<'b> {
        self.crcs.clear();
        RunOctets {
            octets: reuse_slices(self.octets),
            crcs: self.crcs,
        }
    }
}

/// `v` emptied, for slices of another lifetime, its allocation kept (an empty vector collected
/// in place into one of the same layout).
// `filter_map` rather than `filter`: the element type changes (to another lifetime).
#[allow(clippy::unnecessary_filter_map)]
pub fn reuse_slices<'b>(mut v: Vec<&[u8]>) -> Vec<&'b [u8]> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}
