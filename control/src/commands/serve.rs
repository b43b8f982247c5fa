//! `serve`: the connection-setup daemon, until SIGINT or SIGTERM.

use mpa_control::config::Config;
use mpa_control::daemon::Daemon;
use std::path::Path;

pub(crate) fn serve(config: &Path) -> Result<(), String> {
    let cfg = Config::load(config).map_err(|e| format!("config {}: {e}", config.display()))?;
    // Before any thread: a signal during startup must not kill us with the default action.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .map_err(|e| format!("signal handlers: {e}"))?;
    let _daemon = Daemon::start(cfg).map_err(|e| e.to_string())?;
    if let Some(sig) = signals.forever().next() {
        // Handed-over flows keep running in the datapath; their frozen sockets close silently
        // when the process exits.
        tracing::info!(signal = sig, "exiting");
    }
    Ok(())
}
