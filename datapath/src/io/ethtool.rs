//! The kernel's ethtool interface (`SIOCETHTOOL`, <linux/ethtool.h>) for what the datapath
//! sets up on a NIC before it binds its AF_XDP sockets: the channel (queue) count and ntuple
//! classification rules that put MPA flows on the queues that have a socket
//! (docs/nics.md, "4. Queues, and putting MPA flows on them"). Ntuple rules have no netlink
//! interface in Linux, so this is the ioctl; it is one of the crate's `unsafe` boundaries:
//! each call hands the kernel a pointer to a `#[repr(C)]` struct laid out as the kernel's.

use nix::libc;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GPERMADDR: u32 = 0x20;
const ETHTOOL_GRXCLSRLCNT: u32 = 0x2e;
const ETHTOOL_GRXCLSRULE: u32 = 0x2f;
const ETHTOOL_GRXCLSRLALL: u32 = 0x30;
const ETHTOOL_SRXCLSRLDEL: u32 = 0x31;
const ETHTOOL_SRXCLSRLINS: u32 = 0x32;
const ETHTOOL_GCHANNELS: u32 = 0x3c;
const ETHTOOL_SCHANNELS: u32 = 0x3d;
const TCP_V4_FLOW: u32 = 0x01;
const TCP_V6_FLOW: u32 = 0x05;
/// Flags a rule's `flow_type` may carry beside the type (FLOW_EXT, FLOW_MAC_EXT, FLOW_RSS).
const FLOW_FLAGS: u32 = 0x8000_0000 | 0x4000_0000 | 0x2000_0000;
/// `location` asking the driver to choose one (only where the rule count's `data` has
/// RX_CLS_LOC_SPECIAL).
const RX_CLS_LOC_ANY: u32 = 0xffff_ffff;
const RX_CLS_LOC_SPECIAL: u64 = 0x8000_0000;
/// More rules than any NIC's table holds: a bound on what is read back.
const MAX_RULES: u32 = 1 << 16;
/// `MAX_ADDR_LEN`: the longest hardware address of any device.
const MAX_ADDR_LEN: usize = 32;

/// `struct ifreq` with `ifr_data` (40 octets on 64-bit Linux).
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// `struct ethtool_channels`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Channels {
    #[serde(skip)]
    cmd: u32,
    /// Most RX-only channels.
    pub max_rx: u32,
    /// Most TX-only channels.
    pub max_tx: u32,
    /// Most other channels.
    pub max_other: u32,
    /// Most combined (RX and TX) channels.
    pub max_combined: u32,
    /// RX-only channels.
    pub rx_count: u32,
    /// TX-only channels.
    pub tx_count: u32,
    /// Other channels.
    pub other_count: u32,
    /// Combined channels.
    pub combined_count: u32,
}

impl Channels {
    /// The RX queues these channels give (combined ones receive too).
    pub fn rx_queues(&self) -> u32 {
        self.rx_count + self.combined_count
    }
}

/// `struct ethtool_drvinfo`.
#[repr(C)]
struct DrvInfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

/// `struct ethtool_perm_addr` with room for the longest address after it.
#[repr(C)]
struct PermAddr {
    cmd: u32,
    size: u32,
    data: [u8; MAX_ADDR_LEN],
}

/// What the driver says of itself (`ethtool -i`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverInfo {
    /// Driver name (`veth`, `mlx5_core`, `ice`, …).
    pub driver: String,
    /// Driver version.
    pub version: String,
    /// Firmware version (empty when the driver has none).
    pub firmware: String,
    /// Bus address (empty for a virtual device).
    pub bus: String,
}

/// `struct ethtool_rx_flow_spec`: the header fields and masks of one rule, its action and
/// its place in the table.
#[repr(C)]
#[derive(Clone, Copy)]
struct FlowSpec {
    flow_type: u32,
    h_u: [u8; 52],
    h_ext: [u8; 20],
    m_u: [u8; 52],
    m_ext: [u8; 20],
    ring_cookie: u64,
    location: u32,
}

/// `struct ethtool_rxnfc` without its trailing `rule_locs[]`, which starts at
/// `offset_of!(RxNfc, rule_cnt) + 4` (188).
#[repr(C)]
#[derive(Clone, Copy)]
struct RxNfc {
    cmd: u32,
    flow_type: u32,
    data: u64,
    fs: FlowSpec,
    rule_cnt: u32,
}

impl RxNfc {
    fn new(cmd: u32) -> RxNfc {
        RxNfc {
            cmd,
            flow_type: 0,
            data: 0,
            fs: FlowSpec {
                flow_type: 0,
                h_u: [0; 52],
                h_ext: [0; 20],
                m_u: [0; 52],
                m_ext: [0; 20],
                ring_cookie: 0,
                location: 0,
            },
            rule_cnt: 0,
        }
    }
}

/// One ntuple rule of the kind the datapath installs: TCP segments to `dst_port`, optionally
/// only those whose source port's bits under `src_mask` equal `src_bits`, go to RX queue
/// `queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TcpRule {
    /// IPv6 (else IPv4).
    pub ipv6: bool,
    /// The local (destination) port.
    pub dst_port: u16,
    /// Source-port bits to match, under `src_mask`.
    pub src_bits: u16,
    /// Source-port mask (0: any source port).
    pub src_mask: u16,
    /// The RX queue.
    pub queue: u32,
}

/// What a location of the rule table holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleAt {
    /// No rule.
    Absent,
    /// A rule of the datapath's kind.
    Ours(TcpRule),
    /// A rule of another kind (someone else's).
    Other,
}

/// The NIC's rule table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleTable {
    /// Its size (locations 0 to `size` − 1).
    pub size: u32,
    /// The driver chooses a new rule's location itself (`RX_CLS_LOC_SPECIAL`).
    pub driver_chooses: bool,
}

/// Offsets of the ports in `tcp_ip4_spec` / `tcp_ip6_spec` (source, then destination).
fn port_offsets(ipv6: bool) -> (usize, usize) {
    if ipv6 {
        (32, 34)
    } else {
        (8, 10)
    }
}

impl TcpRule {
    fn encode(&self, location: u32) -> FlowSpec {
        let mut fs = RxNfc::new(0).fs;
        fs.flow_type = if self.ipv6 { TCP_V6_FLOW } else { TCP_V4_FLOW };
        let (src, dst) = port_offsets(self.ipv6);
        fs.h_u[dst..dst + 2].copy_from_slice(&self.dst_port.to_be_bytes());
        fs.m_u[dst..dst + 2].copy_from_slice(&[0xff, 0xff]);
        fs.h_u[src..src + 2].copy_from_slice(&(self.src_bits & self.src_mask).to_be_bytes());
        fs.m_u[src..src + 2].copy_from_slice(&self.src_mask.to_be_bytes());
        fs.ring_cookie = u64::from(self.queue);
        fs.location = location;
        fs
    }

    /// The rule `fs` holds, when it is one of this kind (no other field matched).
    fn decode(fs: &FlowSpec) -> Option<TcpRule> {
        let ipv6 = match fs.flow_type & !FLOW_FLAGS {
            TCP_V4_FLOW => false,
            TCP_V6_FLOW => true,
            _ => return None,
        };
        if fs.flow_type & FLOW_FLAGS != 0 {
            return None;
        }
        let (src, dst) = port_offsets(ipv6);
        let be = |b: &[u8; 52], at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
        // Any other masked field makes it a rule of someone else's.
        let others =
            fs.m_u.iter().enumerate().any(|(i, &m)| {
                m != 0 && !(src..src + 2).contains(&i) && !(dst..dst + 2).contains(&i)
            });
        if others || be(&fs.m_u, dst) != 0xffff || fs.ring_cookie > u64::from(u32::MAX) {
            return None;
        }
        let src_mask = be(&fs.m_u, src);
        Some(TcpRule {
            ipv6,
            dst_port: be(&fs.h_u, dst),
            src_bits: be(&fs.h_u, src) & src_mask,
            src_mask,
            queue: fs.ring_cookie as u32,
        })
    }
}

/// The ethtool ioctl on one interface, through a datagram socket of the calling thread's
/// network namespace.
pub struct Ethtool {
    sock: OwnedFd,
    name: [u8; libc::IFNAMSIZ],
}

impl Ethtool {
    /// For `iface` (checked for length here; its existence by the first call).
    pub fn new(iface: &str) -> io::Result<Ethtool> {
        let mut name = [0u8; libc::IFNAMSIZ];
        if iface.is_empty() || iface.len() >= name.len() || iface.contains('\0') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("interface name {iface:?}"),
            ));
        }
        name[..iface.len()].copy_from_slice(iface.as_bytes());
        let sock = nix::sys::socket::socket(
            nix::sys::socket::AddressFamily::Inet,
            nix::sys::socket::SockType::Datagram,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(io::Error::from)?;
        Ok(Ethtool { sock, name })
    }

    /// One SIOCETHTOOL call with `cmd`, a `#[repr(C)]` ethtool struct whose first field is
    /// the command, which the kernel reads and may write back.
    fn call<T>(&self, cmd: &mut T) -> io::Result<()> {
        // SAFETY: `cmd` is a live, exclusively borrowed `#[repr(C)]` struct laid out as the
        // kernel's struct for the command in its first field (checked by the layout tests
        // below); the kernel reads and writes at most that struct's size for these commands.
        unsafe { self.ioctl((cmd as *mut T).cast()) }
    }

    /// SIOCETHTOOL with `ifr_data` = `data`.
    ///
    /// # Safety
    /// `data` must point to an ethtool command struct, valid for reads and writes of as many
    /// octets as the kernel accesses for its command, for the duration of the call.
    unsafe fn ioctl(&self, data: *mut libc::c_void) -> io::Result<()> {
        let mut req = IfReq {
            name: self.name,
            data,
            _pad: [0; 16],
        };
        // SAFETY: `req` is a valid `struct ifreq` that outlives the call; what `ifr_data`
        // points to is the caller's promise.
        let rc = unsafe {
            libc::ioctl(
                self.sock.as_raw_fd(),
                SIOCETHTOOL as _,
                &mut req as *mut IfReq,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// `ethtool -i`.
    pub fn driver_info(&self) -> io::Result<DriverInfo> {
        let mut d = DrvInfo {
            cmd: ETHTOOL_GDRVINFO,
            driver: [0; 32],
            version: [0; 32],
            fw_version: [0; 32],
            bus_info: [0; 32],
            erom_version: [0; 32],
            reserved2: [0; 12],
            n_priv_flags: 0,
            n_stats: 0,
            testinfo_len: 0,
            eedump_len: 0,
            regdump_len: 0,
        };
        self.call(&mut d)?;
        let text = |b: &[u8; 32]| {
            let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
            String::from_utf8_lossy(&b[..end]).into_owned()
        };
        Ok(DriverInfo {
            driver: text(&d.driver),
            version: text(&d.version),
            firmware: text(&d.fw_version),
            bus: text(&d.bus_info),
        })
    }

    /// `ethtool -P`: the permanent hardware address, as long as the device's addresses are
    /// (all zeros for a device that has none, such as veth).
    pub fn permanent_address(&self) -> io::Result<Vec<u8>> {
        let mut a = PermAddr {
            cmd: ETHTOOL_GPERMADDR,
            size: MAX_ADDR_LEN as u32,
            data: [0; MAX_ADDR_LEN],
        };
        self.call(&mut a)?;
        Ok(a.data[..(a.size as usize).min(MAX_ADDR_LEN)].to_vec())
    }

    /// `ethtool -l`.
    pub fn channels(&self) -> io::Result<Channels> {
        let mut c = Channels {
            cmd: ETHTOOL_GCHANNELS,
            ..Channels::default()
        };
        self.call(&mut c)?;
        Ok(c)
    }

    /// `ethtool -L`: the counts of `c` (its maxima are ignored by the kernel).
    pub fn set_channels(&self, c: &Channels) -> io::Result<()> {
        let mut c = Channels {
            cmd: ETHTOOL_SCHANNELS,
            ..*c
        };
        self.call(&mut c)
    }

    /// The rule table: its size, and whether the driver chooses locations itself.
    pub fn rule_table(&self) -> io::Result<RuleTable> {
        let mut r = RxNfc::new(ETHTOOL_GRXCLSRLCNT);
        self.call(&mut r)?;
        Ok(RuleTable {
            size: (r.data & !RX_CLS_LOC_SPECIAL).min(u64::from(MAX_RULES)) as u32,
            driver_chooses: r.data & RX_CLS_LOC_SPECIAL != 0,
        })
    }

    /// The locations in use.
    pub fn rule_locations(&self) -> io::Result<Vec<u32>> {
        let mut count = RxNfc::new(ETHTOOL_GRXCLSRLCNT);
        self.call(&mut count)?;
        let n = count.rule_cnt.min(MAX_RULES) as usize;
        let locs_at = std::mem::offset_of!(RxNfc, rule_cnt) + 4;
        // An RxNfc followed by n locations, 8-aligned.
        let words = (locs_at + 4 * n)
            .div_ceil(8)
            .max(std::mem::size_of::<RxNfc>() / 8);
        let mut buf = vec![0u64; words];
        let head = RxNfc {
            data: u64::from(count.data.min(u64::from(MAX_RULES)) as u32),
            rule_cnt: n as u32,
            ..RxNfc::new(ETHTOOL_GRXCLSRLALL)
        };
        let bytes = buf.as_mut_ptr().cast::<u8>();
        // SAFETY: `buf` holds at least size_of::<RxNfc>() octets (see `words`), 8-aligned as
        // RxNfc needs; the header is written into it by value.
        unsafe { bytes.cast::<RxNfc>().write(head) };
        // SAFETY: `buf` holds the rxnfc header and room for the `rule_cnt` locations the
        // kernel writes after it (at `locs_at`), and it outlives the call; the kernel refuses
        // a table larger than `rule_cnt`.
        unsafe { self.ioctl(bytes.cast())? };
        // SAFETY: as above; the kernel wrote the header back in place.
        let got = unsafe { bytes.cast::<RxNfc>().read() }
            .rule_cnt
            .min(n as u32) as usize;
        let raw: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
        Ok(raw[locs_at..locs_at + 4 * got]
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// What the rule table holds at `location`.
    pub fn rule(&self, location: u32) -> io::Result<RuleAt> {
        let mut r = RxNfc::new(ETHTOOL_GRXCLSRULE);
        r.fs.location = location;
        match self.call(&mut r) {
            Ok(()) => Ok(TcpRule::decode(&r.fs).map_or(RuleAt::Other, RuleAt::Ours)),
            // Drivers answer an empty location with either (mlx5: ENOENT; ice, i40e, ixgbe:
            // EINVAL).
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINVAL)) => {
                Ok(RuleAt::Absent)
            }
            Err(e) => Err(e),
        }
    }

    /// Installs `rule` at `location`, or where the driver chooses (`None`, only where
    /// [`RuleTable::driver_chooses`]); returns the location.
    pub fn insert_rule(&self, rule: &TcpRule, location: Option<u32>) -> io::Result<u32> {
        let mut r = RxNfc::new(ETHTOOL_SRXCLSRLINS);
        r.fs = rule.encode(location.unwrap_or(RX_CLS_LOC_ANY));
        self.call(&mut r)?;
        Ok(r.fs.location)
    }

    /// Removes the rule at `location`.
    pub fn delete_rule(&self, location: u32) -> io::Result<()> {
        let mut r = RxNfc::new(ETHTOOL_SRXCLSRLDEL);
        r.fs.location = location;
        self.call(&mut r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn structs_are_laid_out_as_the_kernels() {
        // <linux/ethtool.h> on 64-bit: the sizes and offsets the kernel copies.
        assert_eq!(size_of::<IfReq>(), 40);
        assert_eq!(size_of::<Channels>(), 36);
        assert_eq!(size_of::<DrvInfo>(), 196);
        assert_eq!(offset_of!(PermAddr, data), 8);
        assert_eq!(offset_of!(DrvInfo, n_priv_flags), 176);
        assert_eq!(offset_of!(FlowSpec, h_ext), 56);
        assert_eq!(offset_of!(FlowSpec, m_u), 76);
        assert_eq!(offset_of!(FlowSpec, m_ext), 128);
        assert_eq!(offset_of!(FlowSpec, ring_cookie), 152);
        assert_eq!(offset_of!(FlowSpec, location), 160);
        assert_eq!(size_of::<FlowSpec>(), 168);
        assert_eq!(offset_of!(RxNfc, data), 8);
        assert_eq!(offset_of!(RxNfc, fs), 16);
        assert_eq!(offset_of!(RxNfc, rule_cnt), 184);
        assert_eq!(size_of::<RxNfc>(), 192);
    }

    #[test]
    fn a_rule_encodes_ports_big_endian_with_masks_and_decodes_back() {
        let rule = TcpRule {
            ipv6: false,
            dst_port: 0x1389,
            src_bits: 3,
            src_mask: 3,
            queue: 2,
        };
        let fs = rule.encode(7);
        assert_eq!(fs.flow_type, TCP_V4_FLOW);
        assert_eq!(&fs.h_u[8..12], &[0x00, 0x03, 0x13, 0x89]);
        assert_eq!(&fs.m_u[8..12], &[0x00, 0x03, 0xff, 0xff]);
        assert!(fs.m_u[..8].iter().chain(&fs.m_u[12..]).all(|&b| b == 0));
        assert_eq!((fs.ring_cookie, fs.location), (2, 7));
        assert_eq!(TcpRule::decode(&fs), Some(rule));
        let v6 = TcpRule {
            ipv6: true,
            src_mask: 0,
            src_bits: 0,
            ..rule
        };
        let fs6 = v6.encode(RX_CLS_LOC_ANY);
        assert_eq!(fs6.flow_type, TCP_V6_FLOW);
        assert_eq!(&fs6.h_u[34..36], &[0x13, 0x89]);
        assert_eq!(TcpRule::decode(&fs6), Some(v6));
    }

    #[test]
    fn rules_of_other_kinds_are_not_taken_for_ours() {
        let rule = TcpRule {
            ipv6: false,
            dst_port: 5000,
            src_bits: 0,
            src_mask: 0,
            queue: 0,
        };
        let mut fs = rule.encode(1);
        fs.m_u[4] = 0xff; // a destination address matched too
        assert_eq!(TcpRule::decode(&fs), None);
        let mut fs = rule.encode(1);
        fs.flow_type |= 0x2000_0000; // an RSS-context action
        assert_eq!(TcpRule::decode(&fs), None);
        let mut fs = rule.encode(1);
        fs.flow_type = 0x02; // UDP
        assert_eq!(TcpRule::decode(&fs), None);
        let mut fs = rule.encode(1);
        fs.ring_cookie = u64::MAX; // drop
        assert_eq!(TcpRule::decode(&fs), None);
    }

    #[test]
    fn a_bad_interface_name_is_refused_before_any_call() {
        for bad in ["", "a-name-longer-than-15", "nul\0"] {
            assert!(Ethtool::new(bad).is_err(), "{bad:?}");
        }
    }
}
