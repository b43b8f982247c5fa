//! What the command-line tools (`mpa-bench`, `mpa-peer`) share, so that an operator meets the
//! same habits in each:
//!
//! * [`size`](mod@size): sizes with binary suffixes as perftest and iperf3 take them (`4K`,
//!   `256M`, `1G`, `4KiB`, `64`), one value parser for every size option;
//! * [`seconds`](mod@seconds): `--duration` and `--interval` values;
//! * [`out`](mod@out): stdout that a closed pipe (`mpa-bench … | head -1`) ends quietly instead of a
//!   panic;
//! * [`exit`]: the exit codes, 0 done, 1 failed at run time, 2 a usage error.
#![forbid(unsafe_code)]

pub mod exit;
pub mod out;
pub mod seconds;
pub mod size;

pub use exit::{exit_code, Usage};
pub use seconds::seconds;
pub use size::size;
