//! Putting MPA flows on the RX queues that have an AF_XDP socket (docs/nics.md, "Steering
//! flows to the served queues"). A NIC hashes each flow to one of its RX queues; a steered
//! flow whose segments land on a queue without a socket is dropped by the XDP program
//! (`steered_no_xsk`). Either the NIC gets exactly as many RX channels as the datapath serves
//! (`channels`), or ntuple rules send the listeners' ports to the served queues (`ntuple`).
//!
//! What is changed is written to a state file first and undone when the datapath stops; a
//! datapath that was killed leaves the file, and the next one to start with the same file
//! undoes it before anything else — only what is still as it was left, so that a rule or a
//! channel count an administrator changed since is kept.

#![forbid(unsafe_code)]

use crate::io::ethtool::{Channels, Ethtool, TcpRule};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

/// How flows are put on the served queues.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum QueueSteering {
    /// Nothing changed on the NIC; a warning when it has more RX queues than are served.
    #[default]
    Off,
    /// The NIC's RX channel count set to the served queues, restored on exit.
    Channels,
    /// Ntuple rules: TCP to each of these local ports goes to the served queues (spread by
    /// the low bits of the source port), removed on exit.
    Ntuple {
        /// The listeners' ports.
        ports: Vec<u16>,
    },
}

/// Why steering could not be set up or undone.
#[derive(Debug, thiserror::Error)]
pub enum SteeringError {
    /// The ethtool call failed.
    #[error("{iface}: {what}: {error}")]
    Ethtool {
        /// Interface.
        iface: String,
        /// What was asked.
        what: String,
        /// The kernel's answer.
        error: io::Error,
    },
    /// What was asked cannot be done on this NIC or with these options.
    #[error("{iface}: {why}")]
    Refused {
        /// Interface.
        iface: String,
        /// Why.
        why: RefusedWhy,
    },
    /// The state file could not be read or written.
    #[error("steering state {path}: {detail}")]
    State {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
}

/// Why a steering request was refused.
#[derive(Debug, thiserror::Error)]
pub enum RefusedWhy {
    /// More queues asked than the NIC has channels.
    #[error("--queues {asked} but the NIC has at most {max} RX channels")]
    TooManyQueues {
        /// Queues served.
        asked: u32,
        /// The NIC's maximum.
        max: u32,
    },
    /// Ntuple rules spread flows by source-port bits: a power of two of queues.
    #[error("ntuple steering spreads flows over the queues by source-port bits: --queues {0} must be a power of two")]
    NotPowerOfTwo(u32),
    /// Ntuple steering needs the ports.
    #[error("ntuple steering needs the listeners' ports (--steer-port)")]
    NoPorts,
    /// The driver has no ntuple rules.
    #[error("the driver ({driver}) takes no ntuple rules ({error}); use --steer channels, or turn ntuple filters on (`ethtool -K IFACE ntuple on`) where the NIC has them")]
    NoNtuple {
        /// Driver name.
        driver: String,
        /// The kernel's answer.
        error: io::Error,
    },
}

/// What the datapath changed on the NIC: the state file's content.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Changes {
    iface: String,
    /// The channels before, and as set.
    channels: Option<(Channels, Channels)>,
    /// Installed rules and their locations.
    rules: Vec<(u32, TcpRule)>,
}

/// The largest state file read (a few hundred rules).
const MAX_STATE: u64 = 1 << 20;

/// Steering in place; undone by [`undo`](Self::undo) or on drop.
pub struct Steered {
    path: PathBuf,
    changes: Changes,
    summary: String,
}

impl Steered {
    /// What was done, for the log and the statistics.
    pub fn summary(&self) -> &str {
        &self.summary
    }

    /// Restores the NIC and removes the state file.
    pub fn undo(mut self) {
        self.undo_in_place();
    }

    fn undo_in_place(&mut self) {
        if self.changes == Changes::default() {
            return;
        }
        let changes = std::mem::take(&mut self.changes);
        match undo_changes(&changes) {
            Ok(done) => {
                if !done.is_empty() {
                    tracing::info!(iface = %changes.iface, "queue steering undone: {done}");
                }
                let _ = std::fs::remove_file(&self.path);
            }
            Err(e) => tracing::error!(
                "queue steering not undone ({e}); {} kept",
                self.path.display()
            ),
        }
    }
}

impl Drop for Steered {
    fn drop(&mut self) {
        self.undo_in_place();
    }
}

fn ethtool_err(iface: &str, what: impl Into<String>) -> impl FnOnce(io::Error) -> SteeringError {
    let (iface, what) = (iface.to_string(), what.into());
    move |error| SteeringError::Ethtool { iface, what, error }
}

/// Undoes what an earlier datapath left in `path` (it was killed), then removes the file;
/// says what was undone (`None`: no file).
pub fn recover(path: &Path) -> Result<Option<String>, SteeringError> {
    let state_err = |detail: String| SteeringError::State {
        path: path.to_path_buf(),
        detail,
    };
    let text = match std::fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(state_err(e.to_string())),
        Ok(m) if m.len() > MAX_STATE => {
            return Err(state_err(format!(
                "{} octets; at most {MAX_STATE}",
                m.len()
            )))
        }
        Ok(_) => std::fs::read_to_string(path).map_err(|e| state_err(e.to_string()))?,
    };
    let changes: Changes = serde_json::from_str(&text).map_err(|e| {
        state_err(format!(
            "{e}: check the NIC's channels and rules (`ethtool -l`, `ethtool -n`) and remove the file"
        ))
    })?;
    let done = undo_changes(&changes)?;
    std::fs::remove_file(path).map_err(|e| state_err(e.to_string()))?;
    Ok(Some(done))
}

/// Undoes `changes` where the NIC still is as they left it; says what was done.
fn undo_changes(c: &Changes) -> Result<String, SteeringError> {
    let iface = &c.iface;
    let et = Ethtool::new(iface).map_err(ethtool_err(iface, "open"))?;
    let mut done = Vec::new();
    for &(loc, rule) in &c.rules {
        match et.rule(loc) {
            Ok(Some(r)) if r == rule => {
                et.delete_rule(loc)
                    .map_err(ethtool_err(iface, format!("remove the rule at {loc}")))?;
                done.push(format!("rule {loc} removed"));
            }
            Ok(_) => done.push(format!("rule {loc} changed since, kept")),
            Err(e) => return Err(ethtool_err(iface, format!("read the rule at {loc}"))(e)),
        }
    }
    if let Some((before, set)) = c.channels {
        let now = et
            .channels()
            .map_err(ethtool_err(iface, "read the channels"))?;
        if counts(&now) == counts(&set) {
            et.set_channels(&before)
                .map_err(ethtool_err(iface, "restore the channels"))?;
            done.push(format!(
                "RX channels {} → {} restored",
                set.rx_queues(),
                before.rx_queues()
            ));
        } else {
            done.push("channels changed since, kept".to_string());
        }
    }
    Ok(done.join(", "))
}

fn counts(c: &Channels) -> [u32; 4] {
    [c.rx_count, c.tx_count, c.other_count, c.combined_count]
}

/// Writes `c` to `path` (through a temporary file, so that a crash leaves the old or the new
/// content, never half of one).
fn save(path: &Path, c: &Changes) -> Result<(), SteeringError> {
    let state_err = |e: io::Error| SteeringError::State {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let tmp = path.with_extension("tmp");
    let text = serde_json::to_string(c).map_err(|e| state_err(io::Error::other(e)))?;
    std::fs::write(&tmp, text).map_err(state_err)?;
    std::fs::rename(&tmp, path).map_err(state_err)
}

/// Sets up `how` for `queues` served queues on `iface`, recording each change in `path`
/// before the next.
pub fn apply(
    iface: &str,
    queues: u32,
    how: &QueueSteering,
    path: &Path,
) -> Result<Steered, SteeringError> {
    let et = Ethtool::new(iface).map_err(ethtool_err(iface, "open"))?;
    let refused = |why| SteeringError::Refused {
        iface: iface.to_string(),
        why,
    };
    let mut steered = Steered {
        path: path.to_path_buf(),
        changes: Changes {
            iface: iface.to_string(),
            ..Changes::default()
        },
        summary: String::new(),
    };
    match how {
        QueueSteering::Off => {
            // Not every driver reports channels (and then it is not ours to guess).
            if let Ok(ch) = et.channels() {
                if ch.rx_queues() > queues {
                    tracing::warn!(iface, served = queues, rx_queues = ch.rx_queues(),
                        "the NIC has more RX queues than are served: steered segments hashed to the others are dropped (steered_no_xsk); use --steer channels or ntuple, or --queues {}", ch.rx_queues());
                }
                steered.summary = format!("off ({} RX queues, {queues} served)", ch.rx_queues());
            } else {
                steered.summary = "off".into();
            }
        }
        QueueSteering::Channels => {
            let before = et
                .channels()
                .map_err(ethtool_err(iface, "read the channels"))?;
            let mut set = before;
            // Combined channels where the NIC has them (most do), else RX-only ones (veth).
            if before.max_combined > 0 && (before.combined_count > 0 || before.max_rx == 0) {
                if queues > before.max_combined {
                    return Err(refused(RefusedWhy::TooManyQueues {
                        asked: queues,
                        max: before.max_combined,
                    }));
                }
                set.combined_count = queues;
                set.rx_count = 0;
            } else {
                if queues > before.max_rx {
                    return Err(refused(RefusedWhy::TooManyQueues {
                        asked: queues,
                        max: before.max_rx,
                    }));
                }
                set.rx_count = queues;
            }
            if counts(&set) != counts(&before) {
                steered.changes.channels = Some((before, set));
                save(path, &steered.changes)?;
                if let Err(e) = et.set_channels(&set) {
                    steered.changes.channels = None;
                    let _ = std::fs::remove_file(path);
                    return Err(ethtool_err(iface, "set the channels")(e));
                }
            }
            steered.summary = format!("channels: RX {} → {}", before.rx_queues(), set.rx_queues());
        }
        QueueSteering::Ntuple { ports } => {
            if ports.is_empty() {
                return Err(refused(RefusedWhy::NoPorts));
            }
            if !queues.is_power_of_two() {
                return Err(refused(RefusedWhy::NotPowerOfTwo(queues)));
            }
            let mask = (queues - 1) as u16;
            for &port in ports {
                for ipv6 in [false, true] {
                    for q in 0..queues {
                        let rule = TcpRule {
                            ipv6,
                            dst_port: port,
                            src_bits: q as u16,
                            src_mask: mask,
                            queue: q,
                        };
                        match et.insert_rule(&rule) {
                            Ok(loc) => {
                                steered.changes.rules.push((loc, rule));
                                save(path, &steered.changes)?;
                            }
                            Err(e) if steered.changes.rules.is_empty() && unsupported(&e) => {
                                let driver = et.driver_info().map(|d| d.driver).unwrap_or_default();
                                return Err(refused(RefusedWhy::NoNtuple { driver, error: e }));
                            }
                            // Some NICs take IPv4 rules only: IPv6 flows then go by RSS.
                            Err(e) if ipv6 && unsupported(&e) => {
                                tracing::warn!(iface, port, "IPv6 ntuple rules refused ({e}): IPv6 flows to this port are not steered");
                                break;
                            }
                            Err(e) => {
                                return Err(ethtool_err(
                                    iface,
                                    format!("add a rule for port {port} → queue {q}"),
                                )(e))
                            }
                        }
                    }
                }
            }
            let locs: Vec<String> = steered
                .changes
                .rules
                .iter()
                .map(|(l, _)| l.to_string())
                .collect();
            steered.summary = format!("ntuple: {} rules at {}", locs.len(), locs.join(","));
        }
    }
    Ok(steered)
}

fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(nix::libc::EOPNOTSUPP | nix::libc::EINVAL)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_state_file_is_nothing_to_recover() {
        let p = std::env::temp_dir().join(format!("mpa-steer-none-{}", std::process::id()));
        assert_eq!(recover(&p).unwrap(), None);
    }

    #[test]
    fn an_unreadable_state_file_is_an_error_naming_it_and_is_kept() {
        let p = std::env::temp_dir().join(format!("mpa-steer-bad-{}", std::process::id()));
        std::fs::write(&p, "{not json").unwrap();
        let e = recover(&p).unwrap_err().to_string();
        assert!(
            e.contains(&p.display().to_string()) && e.contains("ethtool -n"),
            "{e}"
        );
        assert!(p.exists());
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn ntuple_needs_ports_and_a_power_of_two() {
        let p = std::env::temp_dir().join(format!("mpa-steer-ntuple-{}", std::process::id()));
        let none = QueueSteering::Ntuple { ports: vec![] };
        let e = apply("lo", 1, &none, &p).err().unwrap().to_string();
        assert!(e.contains("--steer-port"), "{e}");
        let three = QueueSteering::Ntuple { ports: vec![5000] };
        let e = apply("lo", 3, &three, &p).err().unwrap().to_string();
        assert!(e.contains("power of two"), "{e}");
        assert!(!p.exists());
    }
}
