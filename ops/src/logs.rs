//! Log lines on stderr through `tracing`: text for people (coloured only when stderr is a
//! terminal, so journald and files get no escape codes) or one JSON object per line for
//! collectors (every field of an event is a JSON field).

use std::io::IsTerminal;

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `2026-12-02T10:00:00Z  INFO target: message key=value`.
    Text,
    /// `{"timestamp":…,"level":"INFO","fields":{"message":…},"target":…}`.
    Json,
}

/// Installs the global subscriber: `RUST_LOG` when set, else `default_filter`.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().init(),
    }
}
