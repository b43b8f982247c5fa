//! Two network namespaces, `a` (client side) and `b` (the XDP side), joined by a
//! single-queue veth pair `va` <-> `vb`, with IPv4 and IPv6 addresses. Names are unique per
//! process and test (`mpab-<pid>-<n>-a/b`); the namespaces are deleted when the value drops,
//! also on panic. Namespaces left behind by a killed run (its pid gone) are swept at the next
//! start.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use mpa_bpf::netns::{NetNs, NETNS_RUN_DIR};
use mpa_bpf::{ifindex_of, AttachMode, BpfError, FlowKey, XdpSteering};

use super::{privileged, skip_or_fail};

pub const VETH_A: &str = "va";
pub const VETH_B: &str = "vb";
pub const A_V4: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 1);
pub const B_V4: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 2);
pub const A_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x201, 0, 0, 0, 0, 0, 1);
pub const B_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x201, 0, 0, 0, 0, 0, 2);

/// Bound on every blocking step of a test.
pub const STEP: Duration = Duration::from_secs(3);

const PREFIX: &str = "mpab-";
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Deletes the namespaces it names on drop.
struct NsGuard {
    names: Vec<String>,
}

impl Drop for NsGuard {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

pub struct Testbed {
    pub ns_a: NetNs,
    pub ns_b: NetNs,
    pub name_a: String,
    pub name_b: String,
    /// Deletes both namespaces when the test bed drops (after the handles above close).
    _guard: NsGuard,
}

impl Testbed {
    /// The test bed, or `None` when the test has been skipped.
    pub fn new(test: &str) -> Option<Self> {
        if !privileged(test) {
            return None;
        }
        for tool in ["ip", "ethtool"] {
            if Command::new(tool).arg("-V").output().is_err() {
                skip_or_fail(test, &format!("`{tool}` not found (make deps)"));
                return None;
            }
        }
        sweep_stale();

        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let base = format!("{PREFIX}{}-{n}", std::process::id());
        let (name_a, name_b) = (format!("{base}-a"), format!("{base}-b"));
        let mut guard = NsGuard { names: Vec::new() };
        for name in [&name_a, &name_b] {
            if let Err(e) = try_sh(&["ip", "netns", "add", name]) {
                skip_or_fail(test, &format!("cannot create network namespaces: {e}"));
                return None;
            }
            guard.names.push(name.clone());
        }

        let (a, b) = (name_a.as_str(), name_b.as_str());
        let q = ["numtxqueues", "1", "numrxqueues", "1"];
        let mut add = vec!["ip", "-n", a, "link", "add", VETH_A];
        add.extend(q);
        add.extend(["type", "veth", "peer", "name", VETH_B]);
        add.extend(q);
        add.extend(["netns", b]);
        sh(&add);
        for (ns, dev, v4, v6) in [(a, VETH_A, A_V4, A_V6), (b, VETH_B, B_V4, B_V6)] {
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{v4}/24"),
                "dev",
                dev,
            ]);
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                dev,
                "nodad",
            ]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        // The sender would otherwise leave TCP checksums partial (see ENV.md).
        sh(&[
            "ip", "netns", "exec", a, "ethtool", "-K", VETH_A, "tx", "off",
        ]);

        Some(Self {
            ns_a: NetNs::named(a).expect("open namespace a"),
            ns_b: NetNs::named(b).expect("open namespace b"),
            name_a,
            name_b,
            _guard: guard,
        })
    }

    /// `ip -n b link show dev vb`.
    pub fn link_b(&self) -> String {
        sh(&["ip", "-n", &self.name_b, "link", "show", "dev", VETH_B])
    }

    pub fn ifindex_b(&self) -> u32 {
        self.ns_b
            .run(|| ifindex_of(VETH_B))
            .expect("enter namespace b")
            .expect("ifindex of vb")
    }

    /// Loads and attaches the program to `vb`, from a thread inside namespace b.
    pub fn attach_b(&self, mode: AttachMode) -> Result<XdpSteering, BpfError> {
        let ifindex = self.ifindex_b();
        self.ns_b
            .run(|| XdpSteering::attach(ifindex, mode))
            .expect("enter namespace b")
    }

    pub fn listen_b(&self, ip: IpAddr, port: u16) -> TcpListener {
        let l = self
            .ns_b
            .run(|| TcpListener::bind(SocketAddr::new(ip, port)))
            .expect("enter namespace b")
            .expect("listen in namespace b");
        l.set_nonblocking(true).expect("nonblocking listener");
        l
    }

    /// A connection from namespace a to `listener` in namespace b, both ends with read and
    /// write timeouts of [`STEP`].
    pub fn connect(&self, listener: &TcpListener) -> Conn {
        let to = listener.local_addr().expect("listener address");
        let client = self
            .ns_a
            .run(|| TcpStream::connect_timeout(&to, STEP))
            .expect("enter namespace a")
            .unwrap_or_else(|e| panic!("connect from a to {to}: {e}"));
        let deadline = Instant::now() + STEP;
        let server = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(e) => panic!("accept on {to}: {e}"),
            }
        };
        server.set_nonblocking(false).expect("blocking stream");
        for s in [&client, &server] {
            s.set_read_timeout(Some(STEP)).expect("read timeout");
            s.set_write_timeout(Some(STEP)).expect("write timeout");
            s.set_nodelay(true).expect("nodelay");
        }
        Conn { client, server }
    }

    /// Sends raw frames out of `va` (namespace a) with an AF_PACKET socket.
    pub fn inject_from_a(&self, frames: &[Vec<u8>]) {
        self.ns_a
            .run(|| {
                let ifindex = ifindex_of(VETH_A).expect("ifindex of va");
                raw::send_frames(ifindex, frames)
            })
            .expect("enter namespace a")
            .expect("inject frames");
    }
}

/// A TCP connection from a (client) to b (server).
pub struct Conn {
    pub client: TcpStream,
    pub server: TcpStream,
}

impl Conn {
    /// The flow as the XDP side (b, the server) sees it.
    pub fn key(&self) -> FlowKey {
        let k = FlowKey::new(
            self.server.local_addr().unwrap(),
            self.server.peer_addr().unwrap(),
        )
        .unwrap();
        // The client's view, reversed, is the same 4-tuple.
        let k2 = FlowKey::new(
            self.client.peer_addr().unwrap(),
            self.client.local_addr().unwrap(),
        )
        .unwrap();
        assert_eq!(k, k2);
        k
    }

    /// The same 4-tuple in the wrong direction (local = the client).
    pub fn reversed_key(&self) -> FlowKey {
        FlowKey::new(
            self.server.peer_addr().unwrap(),
            self.server.local_addr().unwrap(),
        )
        .unwrap()
    }

    /// Client sends `msg`, server reads it and echoes it, client reads the echo.
    pub fn echo(&mut self, msg: &[u8]) -> io::Result<()> {
        self.client.write_all(msg)?;
        let mut got = vec![0; msg.len()];
        self.server.read_exact(&mut got)?;
        assert_eq!(got, msg, "server received other bytes");
        self.server.write_all(&got)?;
        self.client.read_exact(&mut got)?;
        assert_eq!(got, msg, "client received other bytes");
        Ok(())
    }
}

/// Runs a command; its stdout, or a description of the failure.
pub fn try_sh(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "`{}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn sh(args: &[&str]) -> String {
    try_sh(args).unwrap_or_else(|e| panic!("{e}"))
}

/// Deletes `mpab-<pid>-...` namespaces whose process is gone (a run killed by a signal).
fn sweep_stale() {
    let Ok(dir) = std::fs::read_dir(NETNS_RUN_DIR) else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("ip").args(["netns", "del", &name]).output();
        }
    }
}

/// Raw sockets for the tests (no safe wrapper in std).
pub mod raw {
    use super::*;

    fn check(ret: libc::c_int) -> io::Result<OwnedFd> {
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `ret` is a descriptor socket(2) just returned; nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(ret) })
    }

    /// An AF_XDP socket, not bound (enough to sit in an XSKMAP).
    pub fn xdp_socket() -> io::Result<OwnedFd> {
        // SAFETY: socket(2) with constant arguments; the result is checked.
        check(unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })
    }

    /// Sends each frame (Ethernet header included) out of interface `ifindex`.
    pub fn send_frames(ifindex: u32, frames: &[Vec<u8>]) -> io::Result<()> {
        // Protocol 0: this socket sends only and receives nothing.
        // SAFETY: socket(2) with constant arguments; the result is checked.
        let sock = check(unsafe {
            libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0)
        })?;
        let addr = libc::sockaddr_ll {
            sll_family: libc::AF_PACKET as u16,
            sll_protocol: (libc::ETH_P_IP as u16).to_be(),
            sll_ifindex: ifindex as i32,
            sll_hatype: 0,
            sll_pkttype: 0,
            sll_halen: 6,
            sll_addr: [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0],
        };
        for f in frames {
            // SAFETY: `f` and `addr` are live for the call and the lengths passed are theirs.
            let n = unsafe {
                libc::sendto(
                    sock.as_raw_fd(),
                    f.as_ptr().cast(),
                    f.len(),
                    0,
                    std::ptr::from_ref(&addr).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            assert_eq!(n as usize, f.len(), "short AF_PACKET send");
        }
        Ok(())
    }
}
