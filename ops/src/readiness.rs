//! The systemd notification protocol (`sd_notify(3)`): a unit of `Type=notify` is started
//! once the program says `READY=1`. Outside systemd (`NOTIFY_SOCKET` unset) every call does
//! nothing. A failure to notify is logged, never fatal: the program works without a
//! supervisor.

use sd_notify::NotifyState;

/// `READY=1` with a one-line status (`systemctl status` shows it).
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// `STOPPING=1`: the program is shutting down (a restart is not a crash).
pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

/// `STATUS=…` alone.
pub fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(%e, "cannot notify the service manager (NOTIFY_SOCKET)");
    }
}
