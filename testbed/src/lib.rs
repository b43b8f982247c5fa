//! Test beds in network namespaces, shared by tests, the demo and the benchmarks.
//!
//! ```text
//!   ns a (peer)                    [ns r: bridge br0, nftables loss]              ns b (this host)
//!   veth a  ──────────────────────── ra ── br0 ── rb ─────────────────────────── veth b (XDP here)
//! ```
//! Without the bridge, `a` and `b` are the two ends of one veth pair. With an [`Impairment`]
//! the bridge is not br0 but a forwarder thread that drops, reorders, duplicates, delays and
//! corrupts frames both ways ([`impair`]). Names are unique per run
//! (`mpat<pid>x<n>-a`), every namespace is removed when the [`TestBed`] drops (also when a test
//! panics), and namespaces left behind by a killed run (whose pid is gone) are removed by the
//! next [`TestBed::up`]. The sender's transmit checksum offload is off (docs/environment.md:
//! frames from a veth otherwise carry only the pseudo-header sum).
//!
//! Also the one privilege gate of the whole-system tests ([`require_privileged`], which
//! `MPA_REQUIRE_PRIVILEGED=1` turns from a skip into a failure), the one way to run code in a
//! namespace ([`run_in_netns`]) and kernel TCP connections across the bed ([`Conn`]).
// The one exception is impair::packet (packet sockets), which allows it for itself.
#![deny(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

mod conn;
mod gate;
pub mod impair;
mod netns;
pub use conn::{Conn, STEP};
pub use gate::{privileged, require_privileged, skip_or_fail};
pub use impair::{DirStats, ImpairStats, Impairment};
pub use netns::{run_in_netns, NetnsError};

/// Name prefix of every namespace a test bed creates.
pub const PREFIX: &str = "mpat";

/// Why a bed could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BedError {
    /// A command failed.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A command could not be started.
    #[error("cannot run `{cmd}`: {source}")]
    Spawn {
        /// The command line.
        cmd: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not root, or the kernel lacks namespaces.
    #[error("network namespaces unavailable: {0}")]
    Unprivileged(String),
    /// A bad configuration.
    #[error("invalid test bed configuration: {0}")]
    Config(String),
}

/// How to build a bed.
#[derive(Debug, Clone)]
pub struct BedConfig {
    /// Put a bridge namespace `r` between `a` and `b` (needed for real loss).
    pub bridge: bool,
    /// Drop this percentage (0..=100) of frames a → b carrying TCP to `loss_port` in `r`.
    pub loss_percent: u8,
    /// The TCP destination port the loss applies to.
    pub loss_port: u16,
    /// MTU of every veth (above 3506 only with a frags-aware XDP program: docs/environment.md).
    pub mtu: u32,
    /// RX and TX queues of every veth.
    pub queues: u32,
    /// Replace the bridge by the impairment forwarder (needs `bridge`; excludes
    /// `loss_percent`, whose equivalent is `drop=`).
    pub impair: Option<Impairment>,
}

impl Default for BedConfig {
    fn default() -> Self {
        BedConfig {
            bridge: false,
            loss_percent: 0,
            loss_port: 7777,
            mtu: 1500,
            queues: 1,
            impair: None,
        }
    }
}

/// A running bed. Dropping it removes every namespace it made.
#[derive(Debug)]
pub struct TestBed {
    /// The peer's namespace.
    pub ns_a: String,
    /// The bridge namespace, if any.
    pub ns_r: Option<String>,
    /// This host's namespace.
    pub ns_b: String,
    /// The peer's interface (in `ns_a`).
    pub if_a: String,
    /// This host's interface (in `ns_b`), where XDP attaches.
    pub if_b: String,
    /// The configuration it was built with.
    pub config: BedConfig,
    /// Set when the bed is this host's real interface and a peer host ([`TestBed::external`]).
    pub external: Option<ExternalPeer>,
    /// The impairment forwarder, when the config asks for one.
    forwarder: Option<impair::Forwarder>,
}

/// A bed made of this host's own interface and a separate peer host (real NICs): `ns_b` is a
/// name given to the caller's own network namespace (`ip netns attach`), and commands for
/// `ns_a` run through `exec` (e.g. `ssh root@peer`).
#[derive(Debug, Clone)]
pub struct ExternalPeer {
    /// This host's interface, where XDP attaches.
    pub iface: String,
    /// This host's address on `iface`.
    pub local: IpAddr,
    /// The peer host's address.
    pub peer: IpAddr,
    /// The command prefix that runs a program on the peer host.
    pub exec: Vec<String>,
    /// The path of programs on the peer host: a directory, or `None` for the same path as here.
    pub bin_dir: Option<String>,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// IPv4 address of `a`.
pub const A4: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
/// IPv4 address of `b`.
pub const B4: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
/// IPv6 address of `a`.
pub const A6: Ipv6Addr = Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 1);
/// IPv6 address of `b`.
pub const B6: Ipv6Addr = Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 2);

fn cmdline(args: &[&str]) -> String {
    args.join(" ")
}

/// Runs a command; an error carries its stderr.
pub fn run(args: &[&str]) -> Result<Output, BedError> {
    let (prog, rest) = args
        .split_first()
        .ok_or_else(|| BedError::Config("empty command".into()))?;
    let out = Command::new(prog)
        .args(rest)
        .output()
        .map_err(|source| BedError::Spawn {
            cmd: cmdline(args),
            source,
        })?;
    if !out.status.success() {
        return Err(BedError::Command {
            cmd: cmdline(args),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

/// Runs a command inside a namespace.
pub fn run_in(ns: &str, args: &[&str]) -> Result<Output, BedError> {
    let mut v = vec!["ip", "netns", "exec", ns];
    v.extend_from_slice(args);
    run(&v)
}

/// Removes namespaces of earlier runs whose process is gone.
fn reap_stale() {
    let Ok(out) = run(&["ip", "netns", "list"]) else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if pid.is_empty() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let _ = run(&["ip", "netns", "del", name]);
    }
}

impl TestBed {
    /// Builds a bed.
    pub fn up(config: BedConfig) -> Result<TestBed, BedError> {
        if config.loss_percent > 100 {
            return Err(BedError::Config(format!(
                "loss {}% > 100%",
                config.loss_percent
            )));
        }
        if config.loss_percent > 0 && !config.bridge {
            return Err(BedError::Config("loss needs the bridge namespace".into()));
        }
        if config.impair.is_some() && !config.bridge {
            return Err(BedError::Config(
                "the impairment forwarder needs the bridge namespace".into(),
            ));
        }
        if config.impair.is_some() && config.loss_percent > 0 {
            return Err(BedError::Config(
                "nftables loss and the impairment forwarder exclude each other (use drop=)".into(),
            ));
        }
        // Every bed carries IPv6 as well, whose links take no MTU under 1280 (RFC 8200 §5).
        if !(1280..=65535).contains(&config.mtu) {
            return Err(BedError::Config(format!(
                "mtu {}: the bed's links carry IPv6 too, so 1280 to 65535",
                config.mtu
            )));
        }
        if !(1..=64).contains(&config.queues) {
            return Err(BedError::Config(format!(
                "queues {}: 1 to 64",
                config.queues
            )));
        }
        privileged()?;
        reap_stale();
        let id = format!(
            "{PREFIX}{}x{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let mut bed = TestBed {
            ns_a: format!("{id}-a"),
            ns_r: config.bridge.then(|| format!("{id}-r")),
            ns_b: format!("{id}-b"),
            // Interface names must fit 15 octets and only be unique per namespace.
            if_a: "veth-a".into(),
            if_b: "veth-b".into(),
            config,
            external: None,
            forwarder: None,
        };
        // From here on Drop cleans up whatever was made.
        bed.build()?;
        Ok(bed)
    }

    fn build(&mut self) -> Result<(), BedError> {
        let q = self.config.queues.to_string();
        let mtu = self.config.mtu.to_string();
        for ns in self.namespaces() {
            run(&["ip", "netns", "add", ns])?;
            run_in(ns, &["ip", "link", "set", "lo", "up"])?;
        }
        let (a, b) = (self.ns_a.clone(), self.ns_b.clone());
        let veth = |x: &str, y: &str| {
            run(&[
                "ip",
                "link",
                "add",
                x,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "type",
                "veth",
                "peer",
                "name",
                y,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
            ])
        };
        // Temporary names in the root namespace are unique per bed (≤ 15 octets).
        let tag = self
            .ns_a
            .trim_start_matches(PREFIX)
            .trim_end_matches("-a")
            .replace('x', "");
        let t = |s: &str| format!("m{s}{tag}").chars().take(15).collect::<String>();
        match self.ns_r.clone() {
            None => {
                let (ta, tb) = (t("a"), t("b"));
                veth(&ta, &tb)?;
                self.move_rename(&ta, &a, &self.if_a.clone())?;
                self.move_rename(&tb, &b, &self.if_b.clone())?;
            }
            Some(r) => {
                let (ta, tra, trb, tb) = (t("a"), t("p"), t("q"), t("b"));
                veth(&ta, &tra)?;
                veth(&trb, &tb)?;
                self.move_rename(&ta, &a, &self.if_a.clone())?;
                self.move_rename(&tb, &b, &self.if_b.clone())?;
                if self.config.impair.is_some() {
                    // r's own stack stays silent (no IPv6 autoconfiguration on ra/rb).
                    // (Sysctls under /proc/sys/net are those of the opening thread's namespace.)
                    let _ = run_in_netns(&r, || {
                        std::fs::write("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1")
                    });
                }
                self.move_rename(&tra, &r, "ra")?;
                self.move_rename(&trb, &r, "rb")?;
                match self.config.impair.clone() {
                    None => {
                        run_in(&r, &["ip", "link", "add", "br0", "type", "bridge"])?;
                        for i in ["ra", "rb"] {
                            run_in(&r, &["ip", "link", "set", i, "mtu", &mtu])?;
                            run_in(&r, &["ip", "link", "set", i, "master", "br0"])?;
                            run_in(&r, &["ip", "link", "set", i, "up"])?;
                        }
                        run_in(&r, &["ip", "link", "set", "br0", "up"])?;
                        if self.config.loss_percent > 0 {
                            self.set_loss(self.config.loss_percent)?;
                        }
                    }
                    Some(imp) => {
                        for i in ["ra", "rb"] {
                            run_in(&r, &["ip", "link", "set", i, "mtu", &mtu])?;
                            run_in(&r, &["ip", "link", "set", i, "promisc", "on"])?;
                            run_in(&r, &["ip", "link", "set", i, "up"])?;
                            // Frames as they came, no aggregates above the MTU.
                            let _ = run_in(&r, &["ethtool", "-K", i, "gro", "off"]);
                        }
                        self.forwarder = Some(impair::Forwarder::start(
                            &r,
                            "ra",
                            "rb",
                            &imp,
                            self.config.mtu,
                            self.config.loss_port,
                        )?);
                    }
                }
            }
        }
        for (ns, ifn, v4, v6) in [(&a, &self.if_a, A4, A6), (&b, &self.if_b, B4, B6)] {
            run_in(ns, &["ip", "link", "set", ifn, "mtu", &mtu])?;
            run_in(ns, &["ip", "addr", "add", &format!("{v4}/24"), "dev", ifn])?;
            run_in(
                ns,
                &[
                    "ip",
                    "-6",
                    "addr",
                    "add",
                    &format!("{v6}/64"),
                    "dev",
                    ifn,
                    "nodad",
                ],
            )?;
            run_in(ns, &["ip", "link", "set", ifn, "up"])?;
        }
        // docs/environment.md: the sender's checksum offload must be off.
        run_in(&a, &["ethtool", "-K", &self.if_a, "tx", "off"])?;
        if self.forwarder.is_some() {
            // A packet socket reads and writes bare octets: a frame from b with only the
            // pseudo-header sum (checksum offload) would reach a with a bad checksum.
            run_in(&b, &["ethtool", "-K", &self.if_b, "tx", "off"])?;
        }
        Ok(())
    }

    fn move_rename(&self, tmp: &str, ns: &str, name: &str) -> Result<(), BedError> {
        run(&["ip", "link", "set", tmp, "netns", ns])?;
        run_in(ns, &["ip", "link", "set", tmp, "name", name])?;
        Ok(())
    }

    /// A bed on this host's interface `peer.iface`, with the peer on another host: no
    /// namespace is created; the caller's own network namespace gets a name (so that
    /// [`run_in_netns`] and `ip netns exec` work on it as on `ns_b`), removed on drop. `local`
    /// is `peer.iface`'s first IPv4 address when `None`. No loss, no bridge.
    pub fn external(mut peer: ExternalPeer, mtu: u32) -> Result<TestBed, BedError> {
        privileged()?;
        reap_stale();
        if peer.exec.is_empty() {
            return Err(BedError::Config(
                "the peer needs a command prefix to run the sender (e.g. `ssh root@HOST`)".into(),
            ));
        }
        if peer.local.is_unspecified() {
            peer.local = first_ipv4(&peer.iface)?.into();
        }
        let id = format!(
            "{PREFIX}{}x{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let ns_b = format!("{id}-host");
        run(&[
            "ip",
            "netns",
            "attach",
            &ns_b,
            &std::process::id().to_string(),
        ])?;
        Ok(TestBed {
            ns_a: String::new(),
            ns_r: None,
            ns_b,
            if_a: String::new(),
            if_b: peer.iface.clone(),
            config: BedConfig {
                mtu,
                ..BedConfig::default()
            },
            external: Some(peer),
            forwarder: None,
        })
    }

    /// Every namespace of the bed (for an external bed: only the name of this host's).
    pub fn namespaces(&self) -> Vec<&str> {
        if self.external.is_some() {
            return vec![self.ns_b.as_str()];
        }
        let mut v = vec![self.ns_a.as_str()];
        v.extend(self.ns_r.as_deref());
        v.push(self.ns_b.as_str());
        v
    }

    /// Sets (replaces) the loss on frames a → b to TCP port `loss_port` in the bridge.
    pub fn set_loss(&self, percent: u8) -> Result<(), BedError> {
        if self.external.is_some() {
            return Err(BedError::Config(
                "no loss on real interfaces (the bed's loss lives in its bridge namespace)".into(),
            ));
        }
        let r = self
            .ns_r
            .as_deref()
            .ok_or_else(|| BedError::Config("no bridge".into()))?;
        if self.forwarder.is_some() {
            return Err(BedError::Config(
                "the impairment forwarder replaces the bridge; its drops are set by drop=".into(),
            ));
        }
        if percent > 100 {
            return Err(BedError::Config(format!("loss {percent}% > 100%")));
        }
        let _ = run_in(r, &["nft", "delete", "table", "bridge", "loss"]);
        let rules = format!(
            "table bridge loss {{\n chain drop_fwd {{\n  type filter hook forward priority 0; policy accept;\n  \
             iifname \"ra\" meta l4proto tcp th dport {port} numgen random mod 100 < {percent} counter drop\n }}\n}}\n",
            port = self.config.loss_port
        );
        let path = std::env::temp_dir().join(format!("{r}-loss.nft"));
        std::fs::write(&path, rules).map_err(|source| BedError::Spawn {
            cmd: "write nft rules".into(),
            source,
        })?;
        let res = run_in(r, &["nft", "-f", &path.to_string_lossy()]);
        let _ = std::fs::remove_file(&path);
        res.map(|_| ())
    }

    /// Frames dropped so far by the loss rule (with the impairment forwarder: by it, both
    /// directions).
    pub fn dropped(&self) -> Result<u64, BedError> {
        if let Some(s) = self.impair_stats() {
            return Ok(s.a_to_b.dropped + s.b_to_a.dropped);
        }
        let Some(r) = self.ns_r.as_deref() else {
            return Ok(0);
        };
        let out = run_in(r, &["nft", "list", "table", "bridge", "loss"])?;
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(text
            .split_whitespace()
            .skip_while(|w| *w != "packets")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0))
    }

    /// What the impairment forwarder did so far, if the bed has one.
    pub fn impair_stats(&self) -> Option<ImpairStats> {
        self.forwarder.as_ref().map(impair::Forwarder::stats)
    }

    /// The address of `b` (the host under test) in the family asked for.
    pub fn addr_b(&self, v6: bool) -> IpAddr {
        if let Some(e) = &self.external {
            return e.local;
        }
        if v6 {
            IpAddr::V6(B6)
        } else {
            IpAddr::V4(B4)
        }
    }

    /// The address of `a` (the peer).
    pub fn addr_a(&self, v6: bool) -> IpAddr {
        if let Some(e) = &self.external {
            return e.peer;
        }
        if v6 {
            IpAddr::V6(A6)
        } else {
            IpAddr::V4(A4)
        }
    }

    /// A command to run inside namespace `ns` (e.g. `bed.command(&bed.ns_a, "mpa-peer")`); on
    /// an external bed, `ns_a`'s commands run on the peer host through its command prefix.
    pub fn command(&self, ns: &str, program: &str) -> Command {
        if let Some(e) = self.external.as_ref().filter(|_| ns == self.ns_a) {
            let program = match &e.bin_dir {
                Some(dir) => {
                    let name = std::path::Path::new(program)
                        .file_name()
                        .map_or(program.into(), |n| n.to_string_lossy().into_owned());
                    format!("{}/{name}", dir.trim_end_matches('/'))
                }
                None => program.to_string(),
            };
            let mut c = Command::new(&e.exec[0]);
            c.args(&e.exec[1..]).arg(program);
            return c;
        }
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, program]);
        c
    }

    /// `ip link show dev IF` of this host's interface (where XDP attaches), in `ns_b`.
    pub fn link_b(&self) -> Result<String, BedError> {
        let out = run_in(&self.ns_b, &["ip", "link", "show", "dev", &self.if_b])?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The MAC address of interface `ifname` in namespace `ns`.
    pub fn mac(&self, ns: &str, ifname: &str) -> Result<[u8; 6], BedError> {
        let out = run_in(ns, &["cat", &format!("/sys/class/net/{ifname}/address")])?;
        let text = String::from_utf8_lossy(&out.stdout);
        let octets: Vec<u8> = text
            .trim()
            .split(':')
            .filter_map(|h| u8::from_str_radix(h, 16).ok())
            .collect();
        octets
            .try_into()
            .map_err(|_| BedError::Config(format!("no MAC address in {text:?}")))
    }

    /// The MAC address of the peer's interface.
    pub fn mac_a(&self) -> Result<[u8; 6], BedError> {
        self.mac(&self.ns_a, &self.if_a)
    }

    /// The MAC address of this host's interface.
    pub fn mac_b(&self) -> Result<[u8; 6], BedError> {
        self.mac(&self.ns_b, &self.if_b)
    }
}

/// The first IPv4 address of interface `iface` in this namespace.
pub fn first_ipv4(iface: &str) -> Result<Ipv4Addr, BedError> {
    let out = run(&["ip", "-4", "-o", "addr", "show", "dev", iface])?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_first_inet(&text)
        .ok_or_else(|| BedError::Config(format!("{iface} has no IPv4 address (give --local)")))
}

/// The first `inet A.B.C.D/N` address of `ip -o addr` output.
fn parse_first_inet(text: &str) -> Option<Ipv4Addr> {
    let mut words = text.split_whitespace();
    words.find(|w| *w == "inet")?;
    words.next()?.split('/').next()?.parse().ok()
}

impl Drop for TestBed {
    fn drop(&mut self) {
        // The forwarder's thread sits in ns r: stop and join it first.
        if let Some(mut f) = self.forwarder.take() {
            f.stop();
        }
        for ns in self.namespaces() {
            if let Err(e) = run(&["ip", "netns", "del", ns]) {
                tracing::warn!(%e, "test bed cleanup");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_inet_of_ip_addr_output() {
        let out = "3: eth0    inet 192.0.2.7/24 brd 192.0.2.255 scope global eth0\\       valid_lft forever\n\
                   3: eth0    inet 198.51.100.1/24 scope global secondary eth0\n";
        assert_eq!(parse_first_inet(out), Some(Ipv4Addr::new(192, 0, 2, 7)));
        assert_eq!(parse_first_inet(""), None);
        assert_eq!(parse_first_inet("3: eth0 inet nonsense/24"), None);
    }

    /// Checked before anything is made (so without privileges too): an MTU IPv6 cannot use
    /// would fail in `ip` with a bare "Invalid argument".
    #[test]
    fn a_configuration_no_bed_could_have_is_refused_with_its_reason() {
        let refused = |c: BedConfig| match TestBed::up(c) {
            Err(BedError::Config(why)) => why,
            other => panic!("{other:?}"),
        };
        for (mtu, queues, why) in [
            (
                100,
                1,
                "mtu 100: the bed's links carry IPv6 too, so 1280 to 65535",
            ),
            (1279, 1, "mtu 1279: the bed's links carry IPv6 too"),
            (65536, 1, "mtu 65536: "),
            (1500, 0, "queues 0: 1 to 64"),
            (1500, 65, "queues 65: 1 to 64"),
        ] {
            let got = refused(BedConfig {
                mtu,
                queues,
                ..BedConfig::default()
            });
            assert!(got.starts_with(why), "{mtu}/{queues}: {got}");
        }
    }

    #[test]
    fn peer_commands_go_through_the_prefix() {
        let bed = std::mem::ManuallyDrop::new(TestBed {
            ns_a: String::new(),
            ns_r: None,
            ns_b: "x-host".into(),
            if_a: String::new(),
            if_b: "eth0".into(),
            config: BedConfig::default(),
            external: Some(ExternalPeer {
                iface: "eth0".into(),
                local: Ipv4Addr::new(192, 0, 2, 1).into(),
                peer: Ipv4Addr::new(192, 0, 2, 2).into(),
                exec: vec!["ssh".into(), "root@peer".into()],
                bin_dir: Some("/opt/mpa/".into()),
            }),
            forwarder: None,
        });
        let c = bed.command("", "/home/me/target/release/mpa-peer");
        assert_eq!(c.get_program(), "ssh");
        let args: Vec<_> = c.get_args().collect();
        assert_eq!(args, ["root@peer", "/opt/mpa/mpa-peer"]);
        let c = bed.command("x-host", "mpa-peer");
        assert_eq!(c.get_program(), "ip");
        assert_eq!(bed.addr_b(false), IpAddr::from([192, 0, 2, 1]));
        assert_eq!(bed.addr_a(true), IpAddr::from([192, 0, 2, 2]));
        assert_eq!(bed.namespaces(), ["x-host"]);
        assert!(bed.set_loss(1).is_err());
    }
}
