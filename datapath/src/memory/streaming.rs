//! Which regions placement writes with streaming stores (docs/features.md, "Streaming
//! stores"): never (the default), those larger than the last-level cache, or every region.
//! The last-level cache's size comes from sysfs.

use std::io::Read;
use std::path::Path;

/// Which regions take long messages with streaming (non-temporal) stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum StreamingStores {
    /// Ordinary stores into every region, each message's destination lines prefetched for
    /// writing first: on the machines measured, faster than streaming even into regions
    /// larger than the last-level cache.
    #[default]
    Off,
    /// Streaming stores into regions larger than the last-level cache: every line placed
    /// there would miss anyway, and streaming skips reading it first.
    LargeRegions,
    /// Streaming stores into every region (a consumer that reads a message at once then
    /// finds it in memory, not in the cache).
    On,
}

impl StreamingStores {
    /// The region length from which messages are streamed (`RegionTable::with_streaming_from`):
    /// `None` for `Off`, and for `LargeRegions` where the last-level cache's size is unknown.
    pub fn streaming_from(self) -> Option<u64> {
        match self {
            StreamingStores::Off => None,
            StreamingStores::On => Some(0),
            StreamingStores::LargeRegions => {
                last_level_cache_bytes(Path::new(CPU0_CACHES)).map(|bytes| bytes.saturating_add(1))
            }
        }
    }
}

/// Where the kernel describes CPU 0's caches, one `indexN` directory each.
const CPU0_CACHES: &str = "/sys/devices/system/cpu/cpu0/cache";

/// The largest data or unified cache of the highest level under `dir` (`indexN/level`,
/// `indexN/type`, `indexN/size` as "107520K"), in octets; `None` when none can be read.
pub(crate) fn last_level_cache_bytes(dir: &Path) -> Option<u64> {
    let mut best: Option<(u32, u64)> = None;
    for entry in std::fs::read_dir(dir).ok()?.take(64).flatten() {
        let d = entry.path();
        let (Some(level), Some(kind), Some(size)) = (
            read_small(&d.join("level")).and_then(|l| l.parse::<u32>().ok()),
            read_small(&d.join("type")),
            read_small(&d.join("size")).and_then(|s| parse_size(&s)),
        ) else {
            continue;
        };
        if kind == "Instruction" {
            continue;
        }
        if best.is_none_or(|(l, s)| (level, size) > (l, s)) {
            best = Some((level, size));
        }
    }
    best.map(|(_, size)| size)
}

/// A sysfs cache size: octets with an optional K, M or G suffix.
fn parse_size(s: &str) -> Option<u64> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: u64 = digits.parse().ok()?;
    let shift = match unit {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

/// A small sysfs file, trimmed; `None` when it cannot be read.
fn read_small(path: &Path) -> Option<String> {
    let mut s = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(64)
        .read_to_string(&mut s)
        .ok()?;
    Some(s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_their_units_and_garbage_does_not() {
        assert_eq!(parse_size("107520K"), Some(107_520 << 10));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("12X"), None);
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("99999999999999999999K"), None);
        assert_eq!(parse_size("18446744073709551615K"), None);
    }

    /// The highest level's largest data or unified cache wins; instruction caches and
    /// unreadable entries do not count.
    #[test]
    fn the_last_level_is_the_highest_data_cache() {
        let dir = std::env::temp_dir().join(format!("mpa-caches-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = |i: u32, level: &str, kind: &str, size: &str| {
            let d = dir.join(format!("index{i}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("level"), level).unwrap();
            std::fs::write(d.join("type"), kind).unwrap();
            std::fs::write(d.join("size"), size).unwrap();
        };
        cache(0, "1\n", "Data\n", "48K\n");
        cache(1, "1\n", "Instruction\n", "32K\n");
        cache(2, "2\n", "Unified\n", "2048K\n");
        assert_eq!(last_level_cache_bytes(&dir), Some(2 << 20));
        cache(3, "3\n", "Unified\n", "107520K\n");
        cache(4, "4\n", "Instruction\n", "1G\n");
        cache(5, "9\n", "Unified\n", "bad\n");
        assert_eq!(last_level_cache_bytes(&dir), Some(107_520 << 10));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(last_level_cache_bytes(&dir), None);
        // This machine's, if it describes them: something plausible.
        if let Some(b) = last_level_cache_bytes(Path::new(CPU0_CACHES)) {
            assert!(b >= 64 << 10, "{b}");
        }
    }
}
