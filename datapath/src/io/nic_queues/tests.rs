//! The state-file logic on an in-memory host: its interfaces, their NICs (channels, rule
//! tables) and a crash injected at any insert, after which nothing more reaches a NIC or the
//! state file.

use super::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("mpa-steer-{name}-{}", std::process::id()))
}

fn os_err(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// One interface of the in-memory host.
struct FakeDev {
    name: String,
    id: Identity,
    driver: String,
    channels: Channels,
    /// Rule table: `None` is a rule of another kind.
    rules: BTreeMap<u32, Option<TcpRule>>,
    table: RuleTable,
    ntuple: bool,
}

/// The in-memory host: its interfaces, and a crash that, once it happens, lets nothing
/// more reach a NIC or the state file (as when the process is killed).
#[derive(Default)]
struct World {
    devs: Vec<FakeDev>,
    crash_after_inserts: Option<usize>,
    inserts: usize,
    crashed: bool,
    fail_deletes: bool,
}

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<World>>);

struct FakeNic {
    world: Arc<Mutex<World>>,
    name: String,
}

fn physical(name: &str, ifindex: u32, mac: &str, bus: &str) -> FakeDev {
    FakeDev {
        name: name.into(),
        id: Identity {
            ifindex,
            permanent_address: Some(mac.into()),
            bus: Some(bus.into()),
            driver: Some("ice".into()),
        },
        driver: "ice".into(),
        channels: {
            let mut c = Channels::default();
            (c.max_combined, c.combined_count) = (8, 8);
            c
        },
        rules: BTreeMap::new(),
        table: RuleTable {
            size: 16,
            driver_chooses: false,
        },
        ntuple: true,
    }
}

fn virtual_dev(name: &str, ifindex: u32) -> FakeDev {
    FakeDev {
        id: Identity {
            ifindex,
            permanent_address: None,
            bus: None,
            driver: Some("veth".into()),
        },
        driver: "veth".into(),
        channels: {
            let mut c = Channels::default();
            (c.max_rx, c.rx_count, c.max_tx, c.tx_count) = (4, 4, 4, 4);
            c
        },
        ntuple: false,
        ..physical(name, ifindex, "", "")
    }
}

impl Fake {
    fn with(devs: Vec<FakeDev>) -> Fake {
        Fake(Arc::new(Mutex::new(World {
            devs,
            ..World::default()
        })))
    }

    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        self.0.lock().unwrap()
    }

    fn dev<T>(&self, name: &str, f: impl FnOnce(&mut FakeDev) -> T) -> T {
        f(self
            .world()
            .devs
            .iter_mut()
            .find(|d| d.name == name)
            .expect("no such fake interface"))
    }

    fn rules(&self, name: &str) -> BTreeMap<u32, Option<TcpRule>> {
        self.dev(name, |d| d.rules.clone())
    }

    /// The next start: the killed process is gone, the NICs are as it left them.
    fn restart(&self) {
        let mut w = self.world();
        w.crashed = false;
        w.crash_after_inserts = None;
    }
}

impl Host for Fake {
    fn netdev(&self, iface: &str) -> io::Result<Netdev> {
        let w = self.world();
        let d = w
            .devs
            .iter()
            .find(|d| d.name == iface)
            .ok_or_else(|| os_err(nix::libc::ENODEV))?;
        Ok(Netdev {
            name: d.name.clone(),
            id: d.id.clone(),
        })
    }
    fn netdevs(&self) -> io::Result<Vec<Netdev>> {
        let w = self.world();
        if w.crashed {
            return Err(io::Error::other("crashed"));
        }
        Ok(w.devs
            .iter()
            .map(|d| Netdev {
                name: d.name.clone(),
                id: d.id.clone(),
            })
            .collect())
    }
    fn nic(&self, iface: &str) -> io::Result<Box<dyn Nic>> {
        Ok(Box::new(FakeNic {
            world: self.0.clone(),
            name: iface.into(),
        }))
    }
    fn write_state(&self, path: &Path, text: &[u8]) -> io::Result<()> {
        if self.world().crashed {
            return Err(io::Error::other("crashed"));
        }
        write_atomically(path, text)
    }
}

impl FakeNic {
    fn with<T>(&self, f: impl FnOnce(&mut FakeDev) -> io::Result<T>) -> io::Result<T> {
        let mut w = self.world.lock().unwrap();
        if w.crashed {
            return Err(io::Error::other("crashed"));
        }
        let d = w
            .devs
            .iter_mut()
            .find(|d| d.name == self.name)
            .ok_or_else(|| os_err(nix::libc::ENODEV))?;
        f(d)
    }
    fn ntuple(&self) -> io::Result<()> {
        self.with(|d| {
            if d.ntuple {
                Ok(())
            } else {
                Err(os_err(nix::libc::EOPNOTSUPP))
            }
        })
    }
}

impl Nic for FakeNic {
    fn driver(&self) -> String {
        self.with(|d| Ok(d.driver.clone())).unwrap_or_default()
    }
    fn channels(&self) -> io::Result<Channels> {
        self.with(|d| Ok(d.channels))
    }
    fn set_channels(&self, c: &Channels) -> io::Result<()> {
        self.with(|d| {
            d.channels.rx_count = c.rx_count;
            d.channels.tx_count = c.tx_count;
            d.channels.combined_count = c.combined_count;
            Ok(())
        })
    }
    fn rule_table(&self) -> io::Result<RuleTable> {
        self.ntuple()?;
        self.with(|d| Ok(d.table))
    }
    fn rule_locations(&self) -> io::Result<Vec<u32>> {
        self.ntuple()?;
        self.with(|d| Ok(d.rules.keys().copied().collect()))
    }
    fn rule(&self, location: u32) -> io::Result<RuleAt> {
        self.ntuple()?;
        self.with(|d| {
            Ok(match d.rules.get(&location) {
                None => RuleAt::Absent,
                Some(Some(r)) => RuleAt::Ours(*r),
                Some(None) => RuleAt::Other,
            })
        })
    }
    fn insert_rule(&self, rule: &TcpRule, location: Option<u32>) -> io::Result<u32> {
        self.ntuple()?;
        let loc = self.with(|d| {
            let loc = match location {
                Some(l) if l < d.table.size => l,
                Some(_) => return Err(os_err(nix::libc::EINVAL)),
                None if d.table.driver_chooses => (0..d.table.size)
                    .find(|l| !d.rules.contains_key(l))
                    .ok_or_else(|| os_err(nix::libc::ENOSPC))?,
                None => return Err(os_err(nix::libc::EINVAL)),
            };
            d.rules.insert(loc, Some(*rule));
            Ok(loc)
        })?;
        let mut w = self.world.lock().unwrap();
        w.inserts += 1;
        if w.crash_after_inserts == Some(w.inserts) {
            w.crashed = true;
        }
        Ok(loc)
    }
    fn delete_rule(&self, location: u32) -> io::Result<()> {
        self.ntuple()?;
        if self.world.lock().unwrap().fail_deletes {
            return Err(os_err(nix::libc::EBUSY));
        }
        self.with(|d| match d.rules.remove(&location) {
            Some(_) => Ok(()),
            None => Err(os_err(nix::libc::ENOENT)),
        })
    }
}

fn ours(port: u16, queue: u32) -> TcpRule {
    TcpRule {
        ipv6: false,
        dst_port: port,
        src_bits: queue as u16,
        src_mask: 1,
        queue,
    }
}

const NIC_A: &str = "0c:42:a1:00:00:01";
const NIC_B: &str = "0c:42:a1:00:00:02";

#[test]
fn no_state_file_is_nothing_to_recover() {
    let p = temp("none");
    assert_eq!(recover(&p).unwrap(), None);
}

#[test]
fn an_unreadable_state_file_is_an_error_naming_it_and_is_kept() {
    let p = temp("bad");
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
    let p = temp("ntuple");
    let none = QueueSteering::Ntuple { ports: vec![] };
    let e = apply("lo", 1, &none, &p).err().unwrap().to_string();
    assert!(e.contains("--steer-port"), "{e}");
    let three = QueueSteering::Ntuple { ports: vec![5000] };
    let e = apply("lo", 3, &three, &p).err().unwrap().to_string();
    assert!(e.contains("power of two"), "{e}");
    assert!(!p.exists());
}

#[test]
fn ntuple_rules_are_recorded_and_removed_on_undo() {
    let p = temp("ntuple-undo");
    let host = Fake::with(vec![physical("eth1", 3, NIC_A, "0000:3b:00.0")]);
    host.dev("eth1", |d| d.rules.insert(0, None));
    let how = QueueSteering::Ntuple {
        ports: vec![7000, 7001],
    };
    let s = apply_on(Box::new(host.clone()), "eth1", 2, &how, &p).unwrap();
    assert_eq!(host.rules("eth1").len(), 1 + 2 * 2 * 2);
    let recorded: Changes = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    assert_eq!(recorded.rules.len(), 8);
    assert!(recorded.rules.iter().all(|r| r.inserted));
    assert_eq!(
        recorded.device.as_ref().unwrap().bus.as_deref(),
        Some("0000:3b:00.0")
    );
    assert!(
        s.summary().starts_with("ntuple: 8 rules at 15,14,"),
        "{}",
        s.summary()
    );
    s.undo();
    assert_eq!(host.rules("eth1"), BTreeMap::from([(0, None)]));
    assert!(!p.exists());
}

#[test]
fn a_crash_between_inserting_a_rule_and_recording_it_is_undone_at_the_next_start() {
    let p = temp("crash-insert");
    let host = Fake::with(vec![physical("eth1", 3, NIC_A, "0000:3b:00.0")]);
    // An administrator's rule, identical to one of ours: not ours to remove.
    host.dev("eth1", |d| d.rules.insert(0, Some(ours(7000, 0))));
    host.world().crash_after_inserts = Some(3);
    let how = QueueSteering::Ntuple { ports: vec![7000] };
    let e = apply_on(Box::new(host.clone()), "eth1", 2, &how, &p)
        .err()
        .unwrap();
    assert!(e.to_string().contains(&p.display().to_string()), "{e}");
    // Killed right after the third insert: three rules on the NIC, the file left.
    assert_eq!(host.rules("eth1").len(), 1 + 3);
    assert!(p.exists());

    host.restart();
    let done = recover_on(&host, &p).unwrap().unwrap();
    assert_eq!(
        host.rules("eth1"),
        BTreeMap::from([(0, Some(ours(7000, 0)))])
    );
    assert!(
        done.contains("rule 15 removed")
            && done.contains("rule 14 removed")
            && done.contains("rule 13 removed (inserted, not yet recorded as such)"),
        "{done}"
    );
    assert!(!p.exists());
    // A second start has nothing left to do.
    assert_eq!(recover_on(&host, &p).unwrap(), None);
}

#[test]
fn a_crash_after_a_rule_the_driver_placed_is_undone_by_finding_it() {
    let p = temp("crash-driver-chooses");
    let host = Fake::with(vec![physical("eth1", 3, NIC_A, "0000:3b:00.0")]);
    host.dev("eth1", |d| {
        d.table.driver_chooses = true;
        d.rules.insert(0, Some(ours(7000, 0)));
    });
    host.world().crash_after_inserts = Some(1);
    let how = QueueSteering::Ntuple { ports: vec![7000] };
    assert!(apply_on(Box::new(host.clone()), "eth1", 2, &how, &p).is_err());
    assert_eq!(host.rules("eth1").len(), 2);

    host.restart();
    let done = recover_on(&host, &p).unwrap().unwrap();
    assert!(
        done.contains("rule 1 removed (inserted, not yet recorded"),
        "{done}"
    );
    assert_eq!(
        host.rules("eth1"),
        BTreeMap::from([(0, Some(ours(7000, 0)))])
    );
}

#[test]
fn an_intended_rule_never_inserted_is_reported_absent_and_is_no_error() {
    let p = temp("intent-only");
    let host = Fake::with(vec![physical("eth1", 3, NIC_A, "0000:3b:00.0")]);
    let changes = Changes {
        iface: "eth1".into(),
        device: Some(host.netdev("eth1").unwrap().id),
        channels: None,
        rules: vec![
            RuleRecord {
                rule: ours(7000, 0),
                place: Place::At(15),
                inserted: false,
            },
            RuleRecord {
                rule: ours(7000, 1),
                place: Place::ChosenByDriver {
                    in_use_before: vec![15],
                },
                inserted: false,
            },
        ],
    };
    write_atomically(&p, &serde_json::to_vec(&changes).unwrap()).unwrap();
    let done = recover_on(&host, &p).unwrap().unwrap();
    assert!(
        done.contains("rule 15 absent (its insertion had not happened)")
            && done.contains("dst-port 7000 src-port 0x1/0x1 → queue 1 absent"),
        "{done}"
    );
    assert!(!p.exists());
}

/// Steering as a killed datapath left it: applied, never undone.
fn killed_after(host: &Fake, iface: &str, how: &QueueSteering, p: &Path) {
    let s = apply_on(Box::new(host.clone()), iface, 2, how, p).unwrap();
    std::mem::forget(s);
    assert!(p.exists());
}

#[test]
fn a_renamed_interface_is_recovered_by_its_identity() {
    let p = temp("renamed");
    let host = Fake::with(vec![physical("eth1", 3, NIC_A, "0000:3b:00.0")]);
    killed_after(
        &host,
        "eth1",
        &QueueSteering::Ntuple { ports: vec![7000] },
        &p,
    );
    assert_eq!(host.rules("eth1").len(), 4);
    host.dev("eth1", |d| d.name = "ens1f0".into());
    let done = recover_on(&host, &p).unwrap().unwrap();
    assert!(
        done.contains("eth1 was renamed ens1f0 (the same device: ifindex 3, permanent address 0c:42:a1:00:00:01, bus 0000:3b:00.0"),
        "{done}"
    );
    assert!(host.rules("ens1f0").is_empty());
    assert!(!p.exists());

    // A virtual device has only its ifindex to go by.
    let host = Fake::with(vec![virtual_dev("veth0", 7)]);
    killed_after(&host, "veth0", &QueueSteering::Channels, &p);
    assert_eq!(host.dev("veth0", |d| d.channels.rx_count), 2);
    host.dev("veth0", |d| d.name = "mpa-b".into());
    let done = recover_on(&host, &p).unwrap().unwrap();
    assert!(
        done.contains("veth0 was renamed mpa-b") && done.contains("RX channels 2 → 4 restored"),
        "{done}"
    );
    assert_eq!(host.dev("mpa-b", |d| d.channels.rx_count), 4);
}

#[test]
fn a_re_created_device_is_recovered_by_its_hardware_identity() {
    let p = temp("re-created");
    let host = Fake::with(vec![physical("eth1", 3, NIC_A, "0000:3b:00.0")]);
    killed_after(&host, "eth1", &QueueSteering::Channels, &p);
    host.dev("eth1", |d| d.id.ifindex = 9);
    let done = recover_on(&host, &p).unwrap().unwrap();
    assert!(
        done.contains("ifindex 3 → 9") && done.contains("restored"),
        "{done}"
    );
    assert_eq!(host.dev("eth1", |d| d.channels.combined_count), 8);
}

#[test]
fn a_different_device_under_the_same_name_is_refused_naming_the_file() {
    let p = temp("replaced");
    let host = Fake::with(vec![physical("eth1", 3, NIC_A, "0000:3b:00.0")]);
    killed_after(
        &host,
        "eth1",
        &QueueSteering::Ntuple { ports: vec![7000] },
        &p,
    );
    // The NIC replaced: another device is eth1 now, with rules of the same shape.
    let mut other = physical("eth1", 4, NIC_B, "0000:5e:00.0");
    other.rules = host.rules("eth1");
    let want = other.rules.clone();
    host.world().devs = vec![other];
    let e = recover_on(&host, &p).unwrap_err();
    assert!(matches!(e, SteeringError::Device { .. }), "{e:?}");
    let e = e.to_string();
    for part in [
        p.display().to_string().as_str(),
        "eth1 is another device now",
        "ifindex 3 → 4",
        "permanent address 0c:42:a1:00:00:01 → 0c:42:a1:00:00:02",
        "bus 0000:3b:00.0 → 0000:5e:00.0",
        "the file is kept",
    ] {
        assert!(e.contains(part), "{part:?} in {e}");
    }
    assert_eq!(host.rules("eth1"), want);
    assert!(p.exists());

    // A virtual device: another ifindex under the name is another device.
    let host = Fake::with(vec![virtual_dev("veth0", 7)]);
    killed_after(&host, "veth0", &QueueSteering::Channels, &p);
    host.world().devs = vec![virtual_dev("veth0", 8)];
    let e = recover_on(&host, &p).unwrap_err().to_string();
    assert!(
        e.contains(&p.display().to_string()) && e.contains("ifindex 7 → 8"),
        "{e}"
    );
    assert_eq!(host.dev("veth0", |d| d.channels.rx_count), 4);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_vanished_interface_is_refused_naming_the_file() {
    let p = temp("vanished");
    let host = Fake::with(vec![physical("eth1", 3, NIC_A, "0000:3b:00.0")]);
    killed_after(&host, "eth1", &QueueSteering::Channels, &p);
    host.world().devs.clear();
    let e = recover_on(&host, &p).unwrap_err().to_string();
    assert!(
        e.contains(&p.display().to_string())
            && e.contains("no interface eth1")
            && e.contains("remove the file"),
        "{e}"
    );
    assert!(p.exists());
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn two_interfaces_with_the_recorded_identity_and_neither_its_ifindex_are_refused() {
    let p = temp("ambiguous");
    let host = Fake::with(vec![physical("eth1", 3, NIC_A, "0000:3b:00.0")]);
    killed_after(&host, "eth1", &QueueSteering::Channels, &p);
    host.world().devs = vec![
        physical("eth1", 5, NIC_A, "0000:3b:00.0"),
        physical("eth2", 6, NIC_A, "0000:3b:00.0"),
    ];
    let e = recover_on(&host, &p).unwrap_err().to_string();
    assert!(
        e.contains(&p.display().to_string()) && e.contains("eth1, eth2"),
        "{e}"
    );
    assert!(p.exists());
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_state_file_naming_the_interface_only_is_refused_with_what_to_do() {
    let p = temp("name-only");
    let host = Fake::with(vec![physical("eth1", 3, NIC_A, "0000:3b:00.0")]);
    host.dev("eth1", |d| d.rules.insert(5, Some(ours(7000, 0))));
    let rule = serde_json::to_string(&ours(7000, 0)).unwrap();
    std::fs::write(
        &p,
        format!(r#"{{"iface":"eth1","channels":null,"rules":[[5,{rule}]]}}"#),
    )
    .unwrap();
    let e = recover_on(&host, &p).unwrap_err().to_string();
    for part in [
        p.display().to_string().as_str(),
        "names interface eth1 but not its device",
        "dst-port 7000 src-port 0x0/0x1 → queue 0 at 5",
        "ethtool -N eth1 delete LOCATION",
        "then remove the file",
    ] {
        assert!(e.contains(part), "{part:?} in {e}");
    }
    assert_eq!(host.rules("eth1").len(), 1);
    assert!(p.exists());

    // One that records nothing is simply removed.
    std::fs::write(&p, r#"{"iface":"eth1","channels":null,"rules":[]}"#).unwrap();
    assert!(recover_on(&host, &p).unwrap().is_some());
    assert!(!p.exists());
}

#[test]
fn a_failure_while_undoing_names_the_file_and_keeps_it() {
    let p = temp("undo-fails");
    let host = Fake::with(vec![physical("eth1", 3, NIC_A, "0000:3b:00.0")]);
    killed_after(
        &host,
        "eth1",
        &QueueSteering::Ntuple { ports: vec![7000] },
        &p,
    );
    host.world().fail_deletes = true;
    let e = recover_on(&host, &p).unwrap_err().to_string();
    assert!(
        e.contains(&p.display().to_string()) && e.contains("eth1: remove the rule at 15"),
        "{e}"
    );
    assert!(p.exists());
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn channels_recorded_but_not_set_are_reported_as_before() {
    let p = temp("channels-intent");
    let host = Fake::with(vec![virtual_dev("veth0", 7)]);
    killed_after(&host, "veth0", &QueueSteering::Channels, &p);
    // As if killed between recording and setting: the count is still the old one.
    host.dev("veth0", |d| d.channels.rx_count = 4);
    let done = recover_on(&host, &p).unwrap().unwrap();
    assert!(done.contains("RX channels at 4 as before"), "{done}");
}

#[test]
fn a_driver_without_ntuple_is_refused_and_leaves_no_state() {
    let p = temp("no-ntuple");
    let host = Fake::with(vec![virtual_dev("veth0", 7)]);
    let how = QueueSteering::Ntuple { ports: vec![7000] };
    let e = apply_on(Box::new(host), "veth0", 1, &how, &p)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("the driver (veth) takes no ntuple rules"), "{e}");
    assert!(!p.exists());
}

#[test]
fn the_identity_of_the_loopback_is_its_ifindex() {
    let lo = System.netdev("lo").unwrap();
    assert_eq!(lo.id.permanent_address, None);
    assert_eq!(lo.id.bus, None);
    assert!(System.netdevs().unwrap().contains(&lo));
}

#[test]
fn the_state_is_replaced_whole_with_no_temporary_left() {
    let p = temp("atomic");
    write_atomically(&p, b"one").unwrap();
    write_atomically(&p, b"two").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"two");
    let mut tmp = p.as_os_str().to_owned();
    tmp.push(".tmp");
    assert!(!Path::new(&tmp).exists());
    std::fs::remove_file(&p).unwrap();
}
