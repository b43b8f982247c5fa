//! What mpa-xdp's programs share for the people who run them (docs/operations.md):
//!
//! * [`logs`]: `--log-format text|json` on stderr, colour only on a terminal;
//! * [`options_file`]: a TOML file whose keys are a program's long options;
//! * [`generate`]: man pages and shell completions written from the clap definitions;
//! * [`readiness`]: the systemd notification protocol (`Type=notify`);
//! * [`metrics`]: an OpenMetrics endpoint, and the datapath's statistics as metrics.
#![forbid(unsafe_code)]

pub mod generate;
pub mod logs;
pub mod metrics;
pub mod options_file;
pub mod readiness;
