//! `serve`: the connection-setup daemon, until SIGINT or SIGTERM.

use mpa_control::config::Config;
use mpa_control::daemon::Daemon;
use std::net::SocketAddr;
use std::path::Path;

pub(crate) fn serve(config: &Path, metrics: Option<SocketAddr>) -> Result<(), String> {
    let cfg = Config::load(config).map_err(|e| format!("config {}: {e}", config.display()))?;
    // Before any thread: a signal during startup must not kill us with the default action.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .map_err(|e| format!("signal handlers: {e}"))?;
    let metrics = metrics.or(cfg.metrics);
    let listeners = cfg.listeners.len();
    let daemon = Daemon::start(cfg).map_err(|e| e.to_string())?;
    let _endpoint = match metrics {
        None => None,
        Some(addr) => {
            let collector = std::sync::Arc::new(daemon.collector());
            let render = move || {
                mpa_ops::metrics::encode(collector.clone()).map_err(|e| format!("encoding: {e}"))
            };
            let ep = mpa_ops::metrics::Endpoint::start(addr, render)
                .map_err(|e| format!("--metrics {addr}: {e}"))?;
            tracing::info!(addr = %ep.local_addr(), "metrics at http://{}/metrics", ep.local_addr());
            Some(ep)
        }
    };
    mpa_ops::readiness::ready(&format!("{listeners} listener(s) accepting"));
    if let Some(sig) = signals.forever().next() {
        // Handed-over flows keep running in the datapath; their frozen sockets close silently
        // when the process exits.
        tracing::info!(signal = sig, "exiting");
    }
    mpa_ops::readiness::stopping();
    Ok(())
}
