//! [`XdpSteering`]: the loaded steering program, its maps, and its attachment to one interface.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::{Mutex, Once};

use libbpf_rs::query::{LinkInfoIter, ProgInfoIter};
use libbpf_rs::{
    ErrorKind, MapCore, MapFlags, MapHandle, Object, ObjectBuilder, PrintLevel, Program,
    ProgramInput, Xdp, XdpFlags,
};
use tracing::{debug, info, trace, warn};

use crate::counters::{XdpCounters, COUNTERS_SIZE};
use crate::error::{attach_hint, BpfError, Iface, MapName, Result};
use crate::flow::{FlowKey, FlowValue, FLOW_KEY_SIZE, FLOW_VALUE_SIZE, HOST_KEY_SIZE};
use crate::link::{detach_netlink_expected, XdpLink};
use crate::ts::{decode, TsSegment, TS_RECORD_SIZE};
use crate::{MAX_FLOWS, MAX_QUEUES, MAX_TS_RECORDS, MAX_WATCHED_PORTS};

/// The program's function name in `steer.bpf.c`.
const PROG_NAME: &str = "mpa_steer";

/// `steer.bpf.o`, built by build.rs. libbpf parses ELF in place, so keep it 8-aligned.
#[repr(C, align(8))]
struct Aligned<T: ?Sized>(T);
static OBJECT: &Aligned<[u8]> = &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/steer.bpf.o")));

/// How to attach the program to an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttachMode {
    /// Native XDP in the driver (`XDP_FLAGS_DRV_MODE`); fails where the driver has none.
    Driver,
    /// Generic XDP on the skb path (`XDP_FLAGS_SKB_MODE`); works everywhere, slower.
    Generic,
    /// Driver mode, falling back to generic mode if the driver attach fails.
    DriverOrGeneric,
}

impl AttachMode {
    fn flags(self) -> XdpFlags {
        match self {
            Self::Driver => XdpFlags::DRV_MODE,
            Self::Generic => XdpFlags::SKB_MODE,
            Self::DriverOrGeneric => XdpFlags::NONE,
        }
    }
}

impl fmt::Display for AttachMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Driver => "driver",
            Self::Generic => "generic",
            Self::DriverOrGeneric => "driver-or-generic",
        })
    }
}

/// An XDP program's verdict (`enum xdp_action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XdpAction {
    /// `XDP_ABORTED`
    Aborted,
    /// `XDP_DROP`
    Drop,
    /// `XDP_PASS`
    Pass,
    /// `XDP_TX`
    Tx,
    /// `XDP_REDIRECT`
    Redirect,
    /// Any other value.
    Unknown(u32),
}

impl From<u32> for XdpAction {
    fn from(v: u32) -> Self {
        match v {
            0 => Self::Aborted,
            1 => Self::Drop,
            2 => Self::Pass,
            3 => Self::Tx,
            4 => Self::Redirect,
            v => Self::Unknown(v),
        }
    }
}

/// Where the program is attached.
#[derive(Debug)]
struct Attachment {
    iface: Iface,
    /// [`AttachMode::Driver`] or [`AttachMode::Generic`]: the mode actually in use.
    mode: AttachMode,
    /// Holds the program on the interface; closing it (drop, or the process dying) detaches.
    link: XdpLink,
}

/// The steering program, loaded into the kernel, and (usually) attached to one interface.
///
/// Frames of flows in the `flows` map go to the AF_XDP socket registered for their RX queue
/// ([`set_xsk`](Self::set_xsk)), or are dropped when there is none; everything else goes to
/// the kernel. The program is attached through a BPF link: dropping the value, or the process
/// dying (even by `kill -9`), detaches it and unloads it; the interface is left as it was.
///
/// Attach acts on the interface index in the network namespace of the calling thread; the
/// value may then be moved to and dropped on any thread. Map operations work from any
/// namespace.
#[derive(Debug)]
pub struct XdpSteering {
    /// Owns the program and the maps.
    obj: Object,
    flows: MapHandle,
    xsks: MapHandle,
    counters: MapHandle,
    /// (local, remote) address pair → flows in `flows` between them: the program drops
    /// frames it cannot parse to the ports (fragments, IPv6 extension headers, VLAN stacks)
    /// that may be TCP between such a pair.
    hosts: MapHandle,
    /// Local ports whose connections' timestamped segments are recorded until steered.
    watch_ports: MapHandle,
    /// The peer's last timestamped segments of each watched connection.
    ts_records: MapHandle,
    /// Serializes flow insertions and removals, so that `hosts` counts stay exact.
    hosts_lock: Mutex<()>,
    prog_id: u32,
    attachment: Option<Attachment>,
}

impl XdpSteering {
    /// Loads the program and attaches it to `ifindex` (in the calling thread's network
    /// namespace). Fails if another XDP program is attached there in that mode.
    pub fn attach(ifindex: u32, mode: AttachMode) -> Result<Self> {
        let mut this = Self::load()?;
        this.attach_to(ifindex, mode)?;
        Ok(this)
    }

    /// Loads the program without attaching it: fill the maps first, then
    /// [`attach_to`](Self::attach_to); or exercise it with [`test_run`](Self::test_run).
    pub fn load() -> Result<Self> {
        route_libbpf_logs();
        let obj = ObjectBuilder::default()
            .open_memory(&OBJECT.0)
            .map_err(BpfError::Open)?
            .load()
            .map_err(BpfError::Load)?;

        let flows = map_handle(
            &obj,
            MapName::Flows,
            FLOW_KEY_SIZE,
            FLOW_VALUE_SIZE,
            MAX_FLOWS,
        )?;
        let xsks = map_handle(&obj, MapName::Xsks, 4, 4, MAX_QUEUES)?;
        let counters = map_handle(&obj, MapName::Counters, 4, COUNTERS_SIZE, 1)?;
        let hosts = map_handle(&obj, MapName::Hosts, HOST_KEY_SIZE, 4, MAX_FLOWS)?;
        let watch_ports = map_handle(&obj, MapName::WatchPorts, 4, 4, MAX_WATCHED_PORTS)?;
        let ts_records = map_handle(
            &obj,
            MapName::TsRecords,
            FLOW_KEY_SIZE,
            TS_RECORD_SIZE,
            MAX_TS_RECORDS,
        )?;
        let prog_id = {
            let prog = find_program(&obj)?;
            Program::id_from_fd(prog.as_fd()).map_err(BpfError::Load)?
        };
        debug!(prog_id, "XDP steering program loaded");
        Ok(Self {
            obj,
            flows,
            xsks,
            counters,
            hosts,
            watch_ports,
            ts_records,
            hosts_lock: Mutex::new(()),
            prog_id,
            attachment: None,
        })
    }

    /// Attaches the loaded program to `ifindex` in the calling thread's network namespace and
    /// returns the mode in use ([`AttachMode::Driver`] or [`AttachMode::Generic`]).
    ///
    /// Never replaces another program, with one exception: a steering program of ours
    /// (`mpa_steer`) attached through netlink, which only a datapath from before bpf_link
    /// attachment can have left behind (a netlink attachment outlives its process), is stale:
    /// it is detached first, with a warning naming it.
    pub fn attach_to(&mut self, ifindex: u32, mode: AttachMode) -> Result<AttachMode> {
        if let Some(a) = &self.attachment {
            return Err(BpfError::AlreadyAttached {
                iface: a.iface.clone(),
            });
        }
        let idx = i32::try_from(ifindex).map_err(|_| BpfError::InvalidIfindex(ifindex))?;
        let iface = Iface::resolve(ifindex);
        {
            let prog = find_program(&self.obj)?;
            remove_stale(prog.as_fd(), idx, &iface);
        }

        let (used, link) = {
            let prog = find_program(&self.obj)?;
            let try_attach = |m: AttachMode| XdpLink::attach(prog.as_fd(), idx, m.flags());
            match mode {
                AttachMode::Driver | AttachMode::Generic => {
                    let link = try_attach(mode).map_err(|e| BpfError::Attach {
                        iface: iface.clone(),
                        mode,
                        hint: attach_hint(&e),
                        source: e.into(),
                    })?;
                    (mode, link)
                }
                AttachMode::DriverOrGeneric => match try_attach(AttachMode::Driver) {
                    Ok(link) => (AttachMode::Driver, link),
                    Err(driver) => {
                        let driver = libbpf_rs::Error::from(driver);
                        warn!(%iface, error = %driver, "driver-mode XDP attach failed; trying generic mode");
                        let link = try_attach(AttachMode::Generic).map_err(|generic| {
                            BpfError::AttachFallback {
                                iface: iface.clone(),
                                driver,
                                generic: generic.into(),
                            }
                        })?;
                        (AttachMode::Generic, link)
                    }
                },
            }
        };
        info!(%iface, mode = %used, prog_id = self.prog_id, link_id = link.id(), "XDP steering attached (bpf_link)");
        self.attachment = Some(Attachment {
            iface,
            mode: used,
            link,
        });
        Ok(used)
    }

    /// Detaches the program from its interface, if attached: closes the link. If the program
    /// was detached already by someone else (`bpftool link detach`, the interface deleted),
    /// that changes nothing on the interface and a warning says so. Afterwards the value counts
    /// as detached; it may be attached again.
    pub fn detach(&mut self) -> Result<()> {
        let Some(att) = self.attachment.take() else {
            return Ok(());
        };
        match att.link.ifindex() {
            Ok(Some(_)) => info!(iface = %att.iface, mode = %att.mode, "XDP steering detached"),
            Ok(None) => warn!(iface = %att.iface, mode = %att.mode, prog_id = self.prog_id,
                "our XDP program was detached by someone else; nothing left to detach"),
            Err(e) => {
                warn!(iface = %att.iface, error = %e, "XDP link query failed; closing it anyway")
            }
        }
        drop(att.link);
        Ok(())
    }

    /// Whether the program is still attached where [`attach_to`](Self::attach_to) put it:
    /// `Ok(false)` once someone detached its link (`bpftool link detach`) or the interface
    /// went away. One system call, any thread, any namespace: cheap enough for a timer tick,
    /// too dear for a packet. `Ok(false)` too if it was never attached.
    pub fn is_attached(&self) -> Result<bool> {
        let Some(att) = &self.attachment else {
            return Ok(false);
        };
        att.link
            .ifindex()
            .map(|i| i.is_some())
            .map_err(|e| BpfError::Detach {
                iface: att.iface.clone(),
                mode: att.mode,
                source: e.into(),
            })
    }

    /// The kernel's id of the BPF link holding the program on its interface (`bpftool link
    /// show`), while attached.
    pub fn link_id(&self) -> Option<u32> {
        self.attachment.as_ref().map(|a| a.link.id())
    }

    /// Attaches the program through netlink and forgets it, as datapaths did before bpf_link
    /// attachment: the program stays on the interface after this value and the process are
    /// gone. Only for tests of the clean-up of such leftovers; returns the program's id.
    #[doc(hidden)]
    pub fn attach_legacy_and_leak(self, ifindex: u32, mode: AttachMode) -> Result<u32> {
        let idx = i32::try_from(ifindex).map_err(|_| BpfError::InvalidIfindex(ifindex))?;
        let prog = find_program(&self.obj)?;
        Xdp::new(prog.as_fd())
            .attach(idx, mode.flags() | XdpFlags::UPDATE_IF_NOEXIST)
            .map_err(|source| BpfError::Attach {
                iface: Iface::resolve(ifindex),
                mode,
                hint: "",
                source,
            })?;
        Ok(self.prog_id)
    }

    /// The interface the program is attached to.
    pub fn iface(&self) -> Option<&Iface> {
        self.attachment.as_ref().map(|a| &a.iface)
    }

    /// The mode in use: [`AttachMode::Driver`] or [`AttachMode::Generic`]; `None` if detached.
    pub fn attached_mode(&self) -> Option<AttachMode> {
        self.attachment.as_ref().map(|a| a.mode)
    }

    /// The kernel's id of the loaded program (as `bpftool prog` and `ip link` show it).
    pub fn prog_id(&self) -> u32 {
        self.prog_id
    }

    /// Steers the flow: from now on its frames go to the XSK of their RX queue or are dropped,
    /// and frames between its two hosts that the program cannot parse to the ports are
    /// dropped. Replaces the value if the flow is already present.
    pub fn insert_flow(&self, key: &FlowKey, value: FlowValue) -> Result<()> {
        let _serial = self.hosts_lock.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = self.flow(key)?.is_none();
        if fresh {
            // Each host pair has a flow, so a full `hosts` means a full `flows`.
            if let Err(e) = self.add_host(key, 1) {
                if self.flow_count().is_ok_and(|n| n >= MAX_FLOWS as usize) {
                    return Err(BpfError::FlowTableFull {
                        capacity: MAX_FLOWS,
                        target: self.target(),
                    });
                }
                return Err(e);
            }
        }
        let r = match self
            .flows
            .update(&key.to_bytes(), &value.to_bytes(), MapFlags::ANY)
        {
            Ok(()) => {
                debug!(local = %key.local(), remote = %key.remote(), flow_id = value.flow_id, "flow steered");
                return Ok(());
            }
            // A full preallocated hash map answers E2BIG, which libbpf-rs does not classify.
            Err(_) if self.flow_count().is_ok_and(|n| n >= MAX_FLOWS as usize) => {
                Err(BpfError::FlowTableFull {
                    capacity: MAX_FLOWS,
                    target: self.target(),
                })
            }
            Err(source) => Err(self.map_error(MapName::Flows, "update", source)),
        };
        if fresh {
            if let Err(e) = self.add_host(key, -1) {
                warn!(error = %ErrorChain(&e), "hosts count not taken back after a failed insert");
            }
        }
        r
    }

    /// Stops steering the flow: its frames go to the kernel again. `Ok(false)` if it was not
    /// steered.
    pub fn remove_flow(&self, key: &FlowKey) -> Result<bool> {
        let _serial = self.hosts_lock.lock().unwrap_or_else(|p| p.into_inner());
        match self.flows.delete(&key.to_bytes()) {
            Ok(()) => {
                debug!(local = %key.local(), remote = %key.remote(), "flow unsteered");
                self.add_host(key, -1)?;
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(source) => Err(self.map_error(MapName::Flows, "delete", source)),
        }
    }

    /// Flows steered between the two hosts of `key` (its ports do not matter).
    pub fn host_flows(&self, key: &FlowKey) -> Result<u32> {
        let v = self
            .hosts
            .lookup(&key.host_bytes(), MapFlags::ANY)
            .map_err(|source| self.map_error(MapName::Hosts, "lookup", source))?;
        Ok(v.and_then(|v| <[u8; 4]>::try_from(v.as_slice()).ok())
            .map_or(0, u32::from_ne_bytes))
    }

    /// Adds `delta` to the flows between `key`'s hosts; the entry goes at zero.
    fn add_host(&self, key: &FlowKey, delta: i64) -> Result<()> {
        let n = i64::from(self.host_flows(key)?) + delta;
        let h = key.host_bytes();
        if n <= 0 {
            return match self.hosts.delete(&h) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
                Err(source) => Err(self.map_error(MapName::Hosts, "delete", source)),
            };
        }
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        self.hosts
            .update(&h, &n.to_ne_bytes(), MapFlags::ANY)
            .map_err(|source| self.map_error(MapName::Hosts, "update", source))
    }

    /// The flow's value, if it is steered.
    pub fn flow(&self, key: &FlowKey) -> Result<Option<FlowValue>> {
        let v = self
            .flows
            .lookup(&key.to_bytes(), MapFlags::ANY)
            .map_err(|source| self.map_error(MapName::Flows, "lookup", source))?;
        Ok(
            v.and_then(|v| <[u8; FLOW_VALUE_SIZE]>::try_from(v.as_slice()).ok())
                .map(|v| FlowValue::from_bytes(&v)),
        )
    }

    /// How many flows are steered. Walks the map (one syscall per flow): control-path use
    /// only; approximate while flows are inserted or removed concurrently.
    pub fn flow_count(&self) -> Result<usize> {
        Ok(self.flows.keys().count())
    }

    /// Every steered flow (a walk of the map, like [`flow_count`](Self::flow_count)).
    pub fn flows(&self) -> Result<Vec<(FlowKey, FlowValue)>> {
        let mut out = Vec::new();
        for k in self.flows.keys() {
            let Ok(kb) = <[u8; FLOW_KEY_SIZE]>::try_from(k.as_slice()) else {
                continue;
            };
            let key = FlowKey::from_bytes(&kb)?;
            // Removed since the walk saw it: skip.
            if let Some(value) = self.flow(&key)? {
                out.push((key, value));
            }
        }
        Ok(out)
    }

    /// Watches local TCP port `port`: from now on the program records, for each connection
    /// to it that is not steered, the peer's last timestamped segments (sequence range and
    /// TSval), so that [`take_ts_segments`](Self::take_ts_segments) can give its hand-over the
    /// TS.Recent the kernel had. Idempotent. Fails when [`MAX_WATCHED_PORTS`] are watched.
    pub fn watch_port(&self, port: u16) -> Result<()> {
        self.watch_ports
            .update(&port_key(port), &1u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(|source| self.map_error(MapName::WatchPorts, "update", source))?;
        debug!(port, "port watched");
        Ok(())
    }

    /// Stops watching `port` and forgets the records of its connections. `Ok(false)` if it
    /// was not watched.
    pub fn unwatch_port(&self, port: u16) -> Result<bool> {
        match self.watch_ports.delete(&port_key(port)) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
            Err(source) => return Err(self.map_error(MapName::WatchPorts, "delete", source)),
        }
        // A walk of the map (at most MAX_TS_RECORDS keys): control path, rare.
        let stale: Vec<Vec<u8>> = self
            .ts_records
            .keys()
            .filter(|k| k.get(4..6) == Some(&port.to_be_bytes()[..]))
            .collect();
        for k in stale {
            let _ = self.ts_records.delete(&k);
        }
        debug!(port, "port unwatched");
        Ok(true)
    }

    /// Whether `port` is watched.
    pub fn is_watched(&self, port: u16) -> Result<bool> {
        Ok(self
            .watch_ports
            .lookup(&port_key(port), MapFlags::ANY)
            .map_err(|source| self.map_error(MapName::WatchPorts, "lookup", source))?
            .is_some())
    }

    /// The peer's recorded timestamped segments of connection `key`, oldest first, and
    /// forgets them (a connection's records are taken once, at its hand-over, or dropped
    /// when its setup fails). Empty when none were recorded.
    pub fn take_ts_segments(&self, key: &FlowKey) -> Result<Vec<TsSegment>> {
        let k = key.to_bytes();
        let v = self
            .ts_records
            .lookup(&k, MapFlags::ANY)
            .map_err(|source| self.map_error(MapName::TsRecords, "lookup", source))?;
        match self.ts_records.delete(&k) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(source) => return Err(self.map_error(MapName::TsRecords, "delete", source)),
        }
        Ok(v.map(|v| decode(&v)).unwrap_or_default())
    }

    /// Connections with recorded segments now (a walk of the map).
    pub fn ts_record_count(&self) -> usize {
        self.ts_records.keys().count()
    }

    /// Registers the AF_XDP socket bound to RX `queue`: steered frames arriving on that queue
    /// go to it. The map refers to the socket, not the descriptor: closing the socket removes
    /// it from the map; the descriptor may be closed once the socket is owned elsewhere.
    pub fn set_xsk(&self, queue: u32, xsk: BorrowedFd<'_>) -> Result<()> {
        check_queue(queue)?;
        let fd = u32::try_from(xsk.as_raw_fd()).unwrap_or(u32::MAX);
        self.xsks
            .update(&queue.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
            .map_err(|source| self.map_error(MapName::Xsks, "update", source))?;
        debug!(queue, fd, "XSK registered");
        Ok(())
    }

    /// Unregisters the socket of RX `queue`: its steered frames are dropped from now on.
    pub fn clear_xsk(&self, queue: u32) -> Result<()> {
        check_queue(queue)?;
        match self.xsks.delete(&queue.to_ne_bytes()) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(source) => Err(self.map_error(MapName::Xsks, "delete", source)),
        }?;
        debug!(queue, "XSK unregistered");
        Ok(())
    }

    /// The counters summed over all CPUs.
    pub fn counters(&self) -> Result<XdpCounters> {
        Ok(self.counters_per_cpu()?.into_iter().sum())
    }

    /// The counters of each possible CPU, indexed by CPU number.
    pub fn counters_per_cpu(&self) -> Result<Vec<XdpCounters>> {
        let per_cpu = self
            .counters
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(|source| self.map_error(MapName::Counters, "lookup", source))?;
        Ok(per_cpu
            .unwrap_or_default()
            .iter()
            .map(|v| XdpCounters::from_bytes(v))
            .collect())
    }

    /// Runs the program once on `frame` with `BPF_PROG_TEST_RUN` (no interface involved; the
    /// RX queue is 0) and returns its verdict. The maps and counters are the real ones. The
    /// kernel needs at least an Ethernet header's worth (14 octets).
    pub fn test_run(&self, frame: &[u8]) -> Result<XdpAction> {
        // BPF_PROG_TEST_RUN is offered on libbpf-rs's mutable program view only.
        let prog =
            self.obj
                .progs_mut()
                .find(|p| p.name() == PROG_NAME)
                .ok_or(BpfError::Missing {
                    kind: "program",
                    name: PROG_NAME,
                })?;
        let input = ProgramInput {
            data_in: Some(frame),
            ..Default::default()
        };
        let out = prog.test_run(input).map_err(BpfError::TestRun)?;
        Ok(XdpAction::from(out.return_value))
    }

    /// Like [`test_run`](Self::test_run), but the program sees only the first `linear`
    /// octets of `frame` in its linear part and the rest as fragments, as a multi-buffer
    /// (jumbo) frame from a driver. The kernel takes the linear size from the context's
    /// `data_end` (Linux 6.18; older kernels refuse a `data_end` short of the frame).
    pub fn test_run_linear(&self, frame: &[u8], linear: u32) -> Result<XdpAction> {
        let prog =
            self.obj
                .progs_mut()
                .find(|p| p.name() == PROG_NAME)
                .ok_or(BpfError::Missing {
                    kind: "program",
                    name: PROG_NAME,
                })?;
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
        // egress_ifindex (six u32).
        let mut ctx = [0u8; 24];
        ctx[4..8].copy_from_slice(&linear.to_ne_bytes());
        let input = ProgramInput {
            data_in: Some(frame),
            context_in: Some(&mut ctx),
            ..Default::default()
        };
        let out = prog.test_run(input).map_err(BpfError::TestRun)?;
        Ok(XdpAction::from(out.return_value))
    }

    fn target(&self) -> String {
        match &self.attachment {
            Some(a) => format!("on {} ({} mode)", a.iface, a.mode),
            None => "not attached".to_owned(),
        }
    }

    fn map_error(&self, map: MapName, op: &'static str, source: libbpf_rs::Error) -> BpfError {
        BpfError::Map {
            map,
            op,
            target: self.target(),
            source,
        }
    }
}

impl Drop for XdpSteering {
    fn drop(&mut self) {
        if let Err(e) = self.detach() {
            warn!(error = %ErrorChain(&e), "XDP steering: detach on drop failed");
        }
    }
}

/// Detaches a stale steering program of ours from `idx`: one named [`PROG_NAME`] and attached
/// through netlink. No BPF link holds it, so no living process owns the attachment: only a
/// datapath from before bpf_link attachment leaves one behind (a netlink attachment outlives
/// its process). Anything else attached there — another tool's program, or ours held by a
/// running datapath's link — is left alone; the attach then fails and says so.
fn remove_stale(prog: BorrowedFd<'_>, idx: i32, iface: &Iface) {
    let attached = match Xdp::new(prog).query(idx, XdpFlags::NONE) {
        Ok(o) => o,
        Err(e) => {
            debug!(%iface, error = %e, "XDP query before attach failed");
            return;
        }
    };
    for (id, mode) in [
        (attached.drv_prog_id, AttachMode::Driver),
        (attached.skb_prog_id, AttachMode::Generic),
    ] {
        if id == 0 {
            continue;
        }
        let name = ProgInfoIter::default()
            .find(|p| p.id == id)
            .map(|p| p.name.to_string_lossy().into_owned());
        if name.as_deref() != Some(PROG_NAME) {
            debug!(%iface, prog_id = id, ?name, %mode, "another XDP program is attached; not ours to remove");
            continue;
        }
        if let Some(l) = LinkInfoIter::default().find(|l| l.prog_id == id) {
            debug!(%iface, prog_id = id, link_id = l.id, %mode,
                "our XDP program is held by a link: a running datapath owns it");
            continue;
        }
        let removed = Program::fd_from_id(id)
            .map_err(|e| io::Error::other(e.to_string()))
            .and_then(|fd| detach_netlink_expected(idx, mode.flags(), fd.as_fd()));
        match removed {
            Ok(()) => warn!(%iface, prog_id = id, %mode,
                "removed a stale XDP steering program (mpa_steer, attached through netlink) \
                 that an earlier mpa-datapath left behind"),
            Err(e) => warn!(%iface, prog_id = id, %mode, error = %e,
                "could not remove a stale XDP steering program"),
        }
    }
}

fn check_queue(queue: u32) -> Result<()> {
    if queue >= MAX_QUEUES {
        return Err(BpfError::QueueOutOfRange {
            queue,
            max: MAX_QUEUES,
        });
    }
    Ok(())
}

fn find_program(obj: &Object) -> Result<Program<'_>> {
    obj.progs()
        .find(|p| p.name() == PROG_NAME)
        .ok_or(BpfError::Missing {
            kind: "program",
            name: PROG_NAME,
        })
}

/// An owned handle to map `name`, after checking its layout against the Rust mirror.
/// The `watch_ports` key: the port in network byte order in the low two octets of a `__u32`
/// as the program reads it from the TCP header.
fn port_key(port: u16) -> [u8; 4] {
    let b = port.to_be_bytes();
    [b[0], b[1], 0, 0]
}

fn map_handle(
    obj: &Object,
    name: MapName,
    key: usize,
    value: usize,
    max_entries: u32,
) -> Result<MapHandle> {
    let map = obj
        .maps()
        .find(|m| m.name() == name.as_str())
        .ok_or(BpfError::Missing {
            kind: "map",
            name: name.as_str(),
        })?;
    for (what, actual, expected) in [
        ("key size", map.key_size(), key as u32),
        ("value size", map.value_size(), value as u32),
        ("max_entries", map.max_entries(), max_entries),
    ] {
        if actual != expected {
            return Err(BpfError::Layout {
                map: name,
                what,
                actual,
                expected,
            });
        }
    }
    MapHandle::try_from(&map).map_err(BpfError::Load)
}

/// Sends libbpf's messages (the verifier log among them) to `tracing`, target `libbpf`.
/// libbpf's printer is process-wide; this installs it once, on the first load.
fn route_libbpf_logs() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        libbpf_rs::set_print(Some((PrintLevel::Debug, libbpf_log)));
    });
}

fn libbpf_log(level: PrintLevel, msg: String) {
    let msg = msg.trim_end();
    match level {
        PrintLevel::Warn => warn!(target: "libbpf", "{msg}"),
        PrintLevel::Info => debug!(target: "libbpf", "{msg}"),
        PrintLevel::Debug => trace!(target: "libbpf", "{msg}"),
    }
}

/// Displays an error with its sources, `a: b: c`.
pub(crate) struct ErrorChain<'a>(pub &'a dyn std::error::Error);

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}
