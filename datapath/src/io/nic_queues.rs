//! Putting MPA flows on the RX queues that have an AF_XDP socket (docs/nics.md, "4.
//! Queues, and putting MPA flows on them"). A NIC hashes each flow to one of its RX
//! queues; a steered flow whose segments land on a queue without a socket is dropped by the
//! XDP program (`steered_no_xsk`). Either the NIC gets exactly as many RX channels as the
//! datapath serves (`channels`), or ntuple rules send the listeners' ports to the served
//! queues (`ntuple`).
//!
//! Every change is written to a state file before it is made (the file replaced atomically
//! and synced), and marked done after, so that whatever moment the datapath is killed at, the
//! file names everything that may be on the NIC. The datapath undoes it when it stops; a
//! datapath that was killed leaves the file, and the next one to start with the same file
//! undoes it before anything else — only what is still as it was left, so that a rule or a
//! channel count an administrator changed since is kept.
//!
//! The file names the device by its identity (ifindex, permanent hardware address, bus
//! address, driver) beside its interface name: names move (a rename, a replaced NIC), and an
//! undo applied to another device would remove someone else's rules or channels. Recovery
//! finds the device by that identity, follows it to a new name, and refuses, keeping the file,
//! when no interface or more than one is that device, or when the file does not say.

#![forbid(unsafe_code)]

use crate::io::ethtool::{Channels, Ethtool, RuleAt, RuleTable, TcpRule};
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

mod device;
mod state_file;

use device::*;
pub use device::{DeviceMismatch, Identity};
use state_file::*;

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
    /// The device the state file records is not one interface of this host now, or the
    /// file does not say which device it was: nothing is undone and the file is kept.
    #[error("steering state {path}: {why}; nothing undone, the file is kept")]
    Device {
        /// The file.
        path: PathBuf,
        /// What differed.
        why: Box<DeviceMismatch>,
    },
    /// Undoing what the state file records failed on the NIC.
    #[error(
        "steering state {path}: {iface}: {what}: {error}; the file is kept: check the NIC \
         (`ethtool -l {iface}`, `ethtool -n {iface}`) and start again, or undo the rest by \
         hand and remove the file"
    )]
    Undo {
        /// The file.
        path: PathBuf,
        /// The interface the device has now.
        iface: String,
        /// What was asked.
        what: String,
        /// The kernel's answer.
        error: io::Error,
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

/// The largest state file read (a few hundred rules).
const MAX_STATE: u64 = 1 << 20;

/// One NIC's channels and rule table, as steering uses them; [`Ethtool`] is the real one.
trait Nic {
    fn driver(&self) -> String;
    fn channels(&self) -> io::Result<Channels>;
    fn set_channels(&self, c: &Channels) -> io::Result<()>;
    fn rule_table(&self) -> io::Result<RuleTable>;
    fn rule_locations(&self) -> io::Result<Vec<u32>>;
    fn rule(&self, location: u32) -> io::Result<RuleAt>;
    fn insert_rule(&self, rule: &TcpRule, location: Option<u32>) -> io::Result<u32>;
    fn delete_rule(&self, location: u32) -> io::Result<()>;
}

impl Nic for Ethtool {
    fn driver(&self) -> String {
        self.driver_info().map(|d| d.driver).unwrap_or_default()
    }
    fn channels(&self) -> io::Result<Channels> {
        Ethtool::channels(self)
    }
    fn set_channels(&self, c: &Channels) -> io::Result<()> {
        Ethtool::set_channels(self, c)
    }
    fn rule_table(&self) -> io::Result<RuleTable> {
        Ethtool::rule_table(self)
    }
    fn rule_locations(&self) -> io::Result<Vec<u32>> {
        Ethtool::rule_locations(self)
    }
    fn rule(&self, location: u32) -> io::Result<RuleAt> {
        Ethtool::rule(self, location)
    }
    fn insert_rule(&self, rule: &TcpRule, location: Option<u32>) -> io::Result<u32> {
        Ethtool::insert_rule(self, rule, location)
    }
    fn delete_rule(&self, location: u32) -> io::Result<()> {
        Ethtool::delete_rule(self, location)
    }
}

/// The host as steering sees it: its interfaces, their NICs, and the state file's storage.
/// [`System`] is the real one; tests put an in-memory host (and its crashes) in its place.
trait Host: Send {
    /// The interface `iface` and its device's identity.
    fn netdev(&self, iface: &str) -> io::Result<Netdev>;
    /// Every interface of the network namespace.
    fn netdevs(&self) -> io::Result<Vec<Netdev>>;
    /// The NIC of `iface`.
    fn nic(&self, iface: &str) -> io::Result<Box<dyn Nic>>;
    /// Replaces the state file's content with `text`, whole or not at all, durably.
    fn write_state(&self, path: &Path, text: &[u8]) -> io::Result<()>;
}

/// The calling thread's network namespace, through ethtool and the interface index calls.
struct System;

impl System {
    fn identity(name: &str, ifindex: u32) -> io::Result<Netdev> {
        let et = Ethtool::new(name)?;
        let addr = et.permanent_address()?;
        let permanent_address = (addr.iter().any(|&b| b != 0)).then(|| {
            addr.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        });
        // Not every device has driver information (the loopback has none).
        let info = et.driver_info().ok();
        let nonempty = |s: String| (!s.is_empty()).then_some(s);
        Ok(Netdev {
            name: name.to_string(),
            id: Identity {
                ifindex,
                permanent_address,
                bus: info.as_ref().and_then(|i| nonempty(i.bus.clone())),
                driver: info.and_then(|i| nonempty(i.driver)),
            },
        })
    }
}

impl Host for System {
    fn netdev(&self, iface: &str) -> io::Result<Netdev> {
        let ifindex = nix::net::if_::if_nametoindex(iface).map_err(io::Error::from)?;
        System::identity(iface, ifindex)
    }

    fn netdevs(&self) -> io::Result<Vec<Netdev>> {
        let all = nix::net::if_::if_nameindex().map_err(io::Error::from)?;
        Ok(all
            .iter()
            .filter_map(|i| {
                let name = i.name().to_str().ok()?;
                // An interface deleted since the listing is not a candidate.
                System::identity(name, i.index()).ok()
            })
            .collect())
    }

    fn nic(&self, iface: &str) -> io::Result<Box<dyn Nic>> {
        Ok(Box::new(Ethtool::new(iface)?))
    }

    fn write_state(&self, path: &Path, text: &[u8]) -> io::Result<()> {
        write_atomically(path, text)
    }
}

/// Writes `text` to `path` through a temporary file beside it, synced before it replaces
/// `path` and the directory synced after: a crash, or a power loss, leaves the old content
/// or the new, never half of one.
fn write_atomically(path: &Path, text: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

/// Steering in place; undone by [`undo`](Self::undo) or on drop.
pub struct Steered {
    host: Box<dyn Host>,
    path: PathBuf,
    changes: Changes,
    /// The state file exists (it is removed once what it records is undone).
    written: bool,
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
        if !self.written {
            return;
        }
        self.written = false;
        let changes = std::mem::take(&mut self.changes);
        match undo_recorded(&*self.host, &self.path, &changes) {
            Ok(done) => {
                if !done.is_empty() {
                    tracing::info!(iface = %changes.iface, "queue steering undone: {done}");
                }
                if let Err(e) = std::fs::remove_file(&self.path) {
                    tracing::warn!(state = %self.path.display(), "steering state not removed: {e}");
                }
            }
            Err(e) => tracing::error!("queue steering not undone: {e}"),
        }
    }

    /// Records the changes in the state file.
    fn save(&mut self) -> Result<(), SteeringError> {
        let text = serde_json::to_vec(&self.changes).map_err(|e| SteeringError::State {
            path: self.path.clone(),
            detail: e.to_string(),
        })?;
        self.written = true;
        self.host
            .write_state(&self.path, &text)
            .map_err(|e| SteeringError::State {
                path: self.path.clone(),
                detail: e.to_string(),
            })
    }

    /// Inserts `rule` on `nic`, recorded as intended first and as inserted after; the inner
    /// result is the NIC's answer (an error: nothing inserted, nothing recorded).
    fn insert_recorded(
        &mut self,
        nic: &dyn Nic,
        rule: TcpRule,
    ) -> Result<io::Result<u32>, SteeringError> {
        let place = match plan_place(nic) {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        let location = place.location();
        self.changes.rules.push(RuleRecord {
            rule,
            place,
            inserted: false,
        });
        self.save()?;
        match nic.insert_rule(&rule, location) {
            Ok(loc) => {
                if let Some(r) = self.changes.rules.last_mut() {
                    r.place = Place::At(loc);
                    r.inserted = true;
                }
                self.save()?;
                Ok(Ok(loc))
            }
            Err(e) => {
                self.changes.rules.pop();
                self.save()?;
                Ok(Err(e))
            }
        }
    }
}

impl Drop for Steered {
    fn drop(&mut self) {
        self.undo_in_place();
    }
}

/// Where the next rule goes: where the driver chooses, or the last free location, as
/// ethtool's rule manager picks, so that rules at lower locations (higher priority on most
/// NICs) set by the administrator win.
fn plan_place(nic: &dyn Nic) -> io::Result<Place> {
    let table = nic.rule_table()?;
    let used = nic.rule_locations()?;
    if table.driver_chooses {
        return Ok(Place::ChosenByDriver {
            in_use_before: used,
        });
    }
    (0..table.size)
        .rev()
        .find(|l| !used.contains(l))
        .map(Place::At)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("the NIC's rule table is full ({} rules)", table.size),
            )
        })
}

fn ethtool_err(iface: &str, what: impl Into<String>) -> impl FnOnce(io::Error) -> SteeringError {
    let (iface, what) = (iface.to_string(), what.into());
    move |error| SteeringError::Ethtool { iface, what, error }
}

/// Undoes what an earlier datapath left in `path` (it was killed), then removes the file;
/// says what was undone (`None`: no file).
pub fn recover(path: &Path) -> Result<Option<String>, SteeringError> {
    recover_on(&System, path)
}

fn recover_on(host: &dyn Host, path: &Path) -> Result<Option<String>, SteeringError> {
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
    let done = undo_recorded(host, path, &changes)?;
    std::fs::remove_file(path).map_err(|e| state_err(e.to_string()))?;
    Ok(Some(if done.is_empty() {
        "nothing had been changed yet".into()
    } else {
        done
    }))
}

/// Finds the device `c` records and undoes `c` on it where the NIC still is as `c` left it;
/// says what was done. Every error names `path`.
fn undo_recorded(host: &dyn Host, path: &Path, c: &Changes) -> Result<String, SteeringError> {
    if c.is_empty() {
        return Ok(String::new());
    }
    let Some(id) = &c.device else {
        return Err(SteeringError::Device {
            path: path.to_path_buf(),
            why: Box::new(DeviceMismatch::Unknown {
                iface: c.iface.clone(),
                changes: c.describe(),
            }),
        });
    };
    let undo_err = |iface: &str, what: String| {
        let (path, iface) = (path.to_path_buf(), iface.to_string());
        move |error| SteeringError::Undo {
            path,
            iface,
            what,
            error,
        }
    };
    let now = host
        .netdevs()
        .map_err(undo_err(&c.iface, "list the interfaces".into()))?;
    let dev = find_device(&c.iface, id, &now).map_err(|why| SteeringError::Device {
        path: path.to_path_buf(),
        why,
    })?;
    let mut done = Vec::new();
    if dev.name != c.iface {
        tracing::warn!(state = %path.display(), recorded = %c.iface, now = %dev.name,
            "the interface was renamed since its steering was recorded: the same device ({id}), undone under its new name");
        done.push(format!(
            "{} was renamed {} (the same device: {id})",
            c.iface, dev.name
        ));
    }
    if dev.id.ifindex != id.ifindex {
        done.push(format!(
            "the device was re-created (ifindex {} → {})",
            id.ifindex, dev.id.ifindex
        ));
    }
    let nic = host
        .nic(&dev.name)
        .map_err(undo_err(&dev.name, "open".into()))?;
    undo_changes(&*nic, c, &mut done).map_err(|(what, e)| undo_err(&dev.name, what)(e))?;
    Ok(done.join(", "))
}

/// Undoes `c` on `nic` where it still is as `c` left it, saying what was done in `done`; an
/// error says what was asked.
fn undo_changes(
    nic: &dyn Nic,
    c: &Changes,
    done: &mut Vec<String>,
) -> Result<(), (String, io::Error)> {
    let remove = |loc: u32, done: &mut Vec<String>, how: &str| match nic.delete_rule(loc) {
        Ok(()) => {
            done.push(format!("rule {loc} removed{how}"));
            Ok(())
        }
        Err(e) if e.raw_os_error() == Some(nix::libc::ENOENT) => {
            tracing::info!(location = loc, "ntuple rule absent already");
            done.push(format!("rule {loc} absent already"));
            Ok(())
        }
        Err(e) => Err((format!("remove the rule at {loc}"), e)),
    };
    for r in &c.rules {
        let how = if r.inserted {
            ""
        } else {
            " (inserted, not yet recorded as such)"
        };
        match &r.place {
            Place::At(loc) => match nic.rule(*loc) {
                Ok(RuleAt::Ours(now)) if now == r.rule => remove(*loc, done, how)?,
                Ok(RuleAt::Absent) => {
                    let what = if r.inserted {
                        "absent already"
                    } else {
                        "absent (its insertion had not happened)"
                    };
                    tracing::info!(location = loc, "ntuple rule {what}");
                    done.push(format!("rule {loc} {what}"));
                }
                Ok(_) => done.push(format!("rule {loc} changed since, kept")),
                Err(e) => return Err((format!("read the rule at {loc}"), e)),
            },
            Place::ChosenByDriver { in_use_before } => {
                let locs = nic
                    .rule_locations()
                    .map_err(|e| ("read the rule locations".to_string(), e))?;
                let mut found = false;
                for loc in locs.into_iter().filter(|l| !in_use_before.contains(l)) {
                    match nic.rule(loc) {
                        Ok(RuleAt::Ours(now)) if now == r.rule => {
                            remove(loc, done, how)?;
                            found = true;
                        }
                        Ok(_) => {}
                        Err(e) => return Err((format!("read the rule at {loc}"), e)),
                    }
                }
                if !found {
                    let rule = describe_rule(&r.rule);
                    tracing::info!("{rule} absent (its insertion had not happened)");
                    done.push(format!("{rule} absent (its insertion had not happened)"));
                }
            }
        }
    }
    if let Some((before, set)) = c.channels {
        let now = nic
            .channels()
            .map_err(|e| ("read the channels".to_string(), e))?;
        if counts(&now) == counts(&set) {
            nic.set_channels(&before)
                .map_err(|e| ("restore the channels".to_string(), e))?;
            done.push(format!(
                "RX channels {} → {} restored",
                set.rx_queues(),
                before.rx_queues()
            ));
        } else if counts(&now) == counts(&before) {
            done.push(format!(
                "RX channels at {} as before (not set, or put back)",
                before.rx_queues()
            ));
        } else {
            done.push("channels changed since, kept".to_string());
        }
    }
    Ok(())
}

fn counts(c: &Channels) -> [u32; 4] {
    [c.rx_count, c.tx_count, c.other_count, c.combined_count]
}

/// Sets up `how` for `queues` served queues on `iface`, recording each change in `path`
/// before it is made.
pub fn apply(
    iface: &str,
    queues: u32,
    how: &QueueSteering,
    path: &Path,
) -> Result<Steered, SteeringError> {
    apply_on(Box::new(System), iface, queues, how, path)
}

fn apply_on(
    host: Box<dyn Host>,
    iface: &str,
    queues: u32,
    how: &QueueSteering,
    path: &Path,
) -> Result<Steered, SteeringError> {
    let refused = |why| SteeringError::Refused {
        iface: iface.to_string(),
        why,
    };
    if let QueueSteering::Ntuple { ports } = how {
        if ports.is_empty() {
            return Err(refused(RefusedWhy::NoPorts));
        }
        if !queues.is_power_of_two() {
            return Err(refused(RefusedWhy::NotPowerOfTwo(queues)));
        }
    }
    let nic = host.nic(iface).map_err(ethtool_err(iface, "open"))?;
    let mut steered = Steered {
        host,
        path: path.to_path_buf(),
        changes: Changes {
            iface: iface.to_string(),
            ..Changes::default()
        },
        written: false,
        summary: String::new(),
    };
    if *how != QueueSteering::Off {
        let dev = steered
            .host
            .netdev(iface)
            .map_err(ethtool_err(iface, "read the device's identity"))?;
        steered.changes.device = Some(dev.id);
    }
    match how {
        QueueSteering::Off => {
            // Not every driver reports channels (and then it is not ours to guess).
            if let Ok(ch) = nic.channels() {
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
            let before = nic
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
                steered.save()?;
                if let Err(e) = nic.set_channels(&set) {
                    // Not set: the state file goes with `steered`, nothing to undo.
                    steered.changes.channels = None;
                    return Err(ethtool_err(iface, "set the channels")(e));
                }
            }
            steered.summary = format!("channels: RX {} → {}", before.rx_queues(), set.rx_queues());
        }
        QueueSteering::Ntuple { ports } => {
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
                        let none_yet = !steered.changes.rules.iter().any(|r| r.inserted);
                        match steered.insert_recorded(&*nic, rule)? {
                            Ok(_) => {}
                            Err(e) if none_yet && unsupported(&e) => {
                                return Err(refused(RefusedWhy::NoNtuple {
                                    driver: nic.driver(),
                                    error: e,
                                }));
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
                .filter_map(|r| r.place.location().map(|l| l.to_string()))
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
mod tests;
