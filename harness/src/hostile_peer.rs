//! The hostile peer: a real MPA connection whose own kernel socket in ns a is frozen with
//! TCP_REPAIR (exactly as mpa-control freezes ours) and then driven frame by frame over an
//! AF_PACKET socket, so that a script knows the exact sequence state and can send any frame.
//!
//! The kernel in ns a stays silent: nftables drops the 4-tuple in both directions before the
//! freeze (as XDP steers it away from the kernel in ns b), and the frozen socket sends nothing.
//! AF_PACKET sits before netfilter on receive and after it on send, so the script still sees
//! every frame of the flow and its own frames reach the wire.

use anyhow::{anyhow, bail, Context, Result};
use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TcpOptionElement, TransportSlice};
use mpa::endpoint::{EndpointConfig, MpaStream};
use mpa::startup::StartupPolicy;
use mpa::wire::ddp::{DdpRepr, RdmapOpcode, TerminateRepr};
use mpa::wire::fpdu;
use mpa_control::freeze::{flush_ack, freeze, FrozenSocket};
use mpa_testbed::{run_in, run_in_netns, TestBed};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{
    recvfrom, sendto, setsockopt, socket, sockopt, AddressFamily, LinkAddr, MsgFlags, SockFlag,
    SockProtocol, SockType,
};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// `PACKET_OUTGOING`: a frame this host sent (seen again on an `ETH_P_ALL` socket).
const PACKET_OUTGOING: u8 = 4;

/// TCP flags of a crafted segment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    pub syn: bool,
    pub rst: bool,
    pub fin: bool,
    pub psh: bool,
    /// `None`: the ACK bit off.
    pub ack: Option<u32>,
}

/// One segment to send: every field free. [`HostilePeer::seg`] fills it from the state.
#[derive(Debug, Clone)]
pub struct Seg {
    pub seq: u32,
    pub flags: Flags,
    /// The window field as sent (unscaled).
    pub window: u16,
    /// TSval, TSecr (`None`: no timestamps option).
    pub ts: Option<(u32, u32)>,
    /// Option octets after the timestamps (padded with NOP to a multiple of 4).
    pub extra_options: Vec<u8>,
    /// Replace the whole option area with these octets (no padding added: exact bytes).
    pub raw_options: Option<Vec<u8>>,
    pub payload: Vec<u8>,
    /// Invert the TCP checksum.
    pub bad_checksum: bool,
    /// Cut the frame to this many octets.
    pub truncate: Option<usize>,
}

/// A segment the datapath sent to us.
#[derive(Debug, Clone)]
pub struct Rx {
    pub seq: u32,
    pub ack: Option<u32>,
    pub syn: bool,
    pub rst: bool,
    pub fin: bool,
    pub window: u16,
    pub tsval: Option<u32>,
    pub payload: Vec<u8>,
}

impl Rx {
    /// A segment without data, SYN, FIN or RST: a pure ACK.
    pub fn is_pure_ack(&self) -> bool {
        self.payload.is_empty() && !self.syn && !self.fin && !self.rst && self.ack.is_some()
    }

    /// The Terminate this segment's FPDU carries (markers off toward us), if it does.
    pub fn terminate(&self) -> Option<TerminateRepr> {
        // The segment's FPDUs one after the other (no markers toward us): a Terminate may
        // follow a Read Response in the same segment.
        let mut rest = &self.payload[..];
        while rest.len() >= 2 {
            let ulpdu_len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
            let whole = fpdu::fpdu_len(ulpdu_len).min(rest.len());
            let f = fpdu::Fpdu::new_checked(&rest[..whole]).ok()?;
            if let Ok((
                DdpRepr::Untagged {
                    opcode: RdmapOpcode::Terminate,
                    ..
                },
                hl,
            )) = DdpRepr::parse(f.ulpdu(), 1)
            {
                return TerminateRepr::parse(&f.ulpdu()[hl..]).ok();
            }
            rest = &rest[whole..];
        }
        None
    }
}

/// How the hostile peer's MPA startup asks (what it then frames by hand).
#[derive(Debug, Clone, Default)]
pub struct HostileConfig {
    /// Ask for markers toward the datapath (the Responder must require or allow them).
    pub markers: bool,
    /// Peer-to-peer (revision 2): offer only this RTR, which the startup sends first
    /// (RFC 6581 §9.2), before the connection is frozen.
    pub rtr: Option<mpa::startup::RtrType>,
}

/// One hostile connection: the exact TCP state of our side and a raw socket on ns a's veth.
pub struct HostilePeer {
    sock: OwnedFd,
    /// ns a's veth as a send address: taken from a frame seen on it (nix has no safe
    /// constructor for a `sockaddr_ll`; a received frame carries one).
    link: Option<LinkAddr>,
    ifindex: u32,
    mac_a: [u8; 6],
    mac_b: [u8; 6],
    /// Our address (ns a) and the datapath's (ns b): both IPv4 or both IPv6.
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// Our next sequence number (SND.NXT).
    pub snd_nxt: u32,
    /// The datapath's next sequence number as far as we received in order (RCV.NXT).
    pub rcv_nxt: u32,
    /// The window field we send (our scale applies).
    pub window: u16,
    /// The datapath's window in octets (its scale applied), from its last segment.
    pub peer_window: u32,
    /// The datapath's window scale (applied to its window field).
    pub peer_wscale: u8,
    /// Our TSval clock: value at `ts_at`; `None` without timestamps.
    ts_base: Option<(u32, Instant)>,
    /// The datapath's last TSval.
    pub ts_recent: u32,
    /// The MSS the datapath announced.
    pub mss: u16,
    /// What arrived from the datapath and was not yet taken by a script.
    pub inbox: Vec<Rx>,
    /// Whether in-order data from the datapath is taken (RCV.NXT advances); false: a zero
    /// window that refuses even probes (every segment answered with the old RCV.NXT).
    pub accept: bool,
    /// TSval of the last segment with data our kernel sent before the freeze (the Request):
    /// the TS.Recent the datapath's kernel socket had at its freeze.
    pub startup_tsval: Option<u32>,
    _frozen: FrozenSocket,
    ns_a: String,
    nft_table: String,
}

impl Drop for HostilePeer {
    fn drop(&mut self) {
        let _ = run_in(
            &self.ns_a,
            &["nft", "delete", "table", "inet", &self.nft_table],
        );
    }
}

/// The nftables match of `a`'s address (`ip` or `ip6`).
fn nft_family(a: &SocketAddr) -> &'static str {
    if a.is_ipv4() {
        "ip"
    } else {
        "ip6"
    }
}

/// Octets of the IP header of `a`'s family as the peer builds it (no options, no extension
/// headers).
pub fn ip_header_len(a: &SocketAddr) -> usize {
    if a.is_ipv4() {
        20
    } else {
        40
    }
}

impl HostilePeer {
    /// Connects from ns a to `to` (the hand-over listener in ns b), runs the MPA startup as
    /// Initiator (CRC on; markers as `cfg` says), then freezes our socket and takes over.
    pub fn connect(bed: &TestBed, to: SocketAddr, cfg: &HostileConfig) -> Result<HostilePeer> {
        let remote = to;
        let ifindex = run_in_netns(&bed.ns_a, || nix::net::if_::if_nametoindex(&*bed.if_a))??;
        // The raw socket first: it sees the whole startup, which gives the link address to
        // send to and the datapath's last TSval.
        // Non-blocking: the bystander's frames pass this socket too, so a receive timeout
        // would never expire; waits go through poll(2).
        let sock = run_in_netns(&bed.ns_a, || {
            socket(
                AddressFamily::Packet,
                SockType::Raw,
                SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
                SockProtocol::EthAll,
            )
        })??;
        // The bystander's frames pass this socket too: room for a while of them.
        setsockopt(&sock, sockopt::RcvBufForce, &(32 << 20))?;
        let mut policy = StartupPolicy {
            markers_required: cfg.markers,
            ..StartupPolicy::default()
        };
        if let Some(rtr) = cfg.rtr {
            policy.revision = 2;
            policy.accept_rev2 = true;
            policy.p2p = true;
            policy.rtr_send = mpa::startup::RtrSet::single(rtr);
        }
        let ecfg = EndpointConfig {
            policy,
            ..EndpointConfig::default()
        };
        let stream = run_in_netns(&bed.ns_a, move || -> Result<TcpStream> {
            let s = TcpStream::connect_timeout(&to, Duration::from_secs(5))?;
            s.set_nodelay(true)?;
            let m = MpaStream::connect(s, &ecfg).context("MPA startup")?;
            Ok(m.into_inner()?)
        })??;
        let local = stream.local_addr()?;
        // Steer the 4-tuple away from ns a's kernel, then freeze (mpa-control's order).
        let nft_table = format!("hostile{}", local.port());
        let fam = nft_family(&remote);
        let rules = format!(
            "table inet {nft_table} {{\n chain pre {{ type filter hook prerouting priority -300; {fam} saddr {} tcp sport {} tcp dport {} drop; }}\n chain out {{ type filter hook output priority -300; {fam} daddr {} tcp sport {} tcp dport {} drop; }}\n}}\n",
            remote.ip(),
            remote.port(),
            local.port(),
            remote.ip(),
            local.port(),
            remote.port()
        );
        let path = crate::datapath::temp_path("hostile.nft");
        std::fs::write(&path, rules)?;
        let out = run_in(&bed.ns_a, &["nft", "-f", &path.to_string_lossy()]);
        let _ = std::fs::remove_file(&path);
        out.context("nftables rules for the hostile flow")?;
        flush_ack(&stream)?;
        // The Reply's ACK may still be on its way: let the kernel send it first.
        std::thread::sleep(Duration::from_millis(20));
        let (frozen, snap) = freeze(stream)?;
        if !snap.send_queue.is_empty() {
            bail!(
                "{} octets unacknowledged at the freeze",
                snap.send_queue.len()
            );
        }
        let mac_a = bed.mac_a()?;
        let mac_b = bed.mac_b()?;
        let mut p = HostilePeer {
            sock,
            link: None,
            ifindex,
            mac_a,
            mac_b,
            local,
            remote,
            snd_nxt: snap.snd_nxt,
            rcv_nxt: snap.rcv_nxt,
            window: u16::try_from(snap.rcv_wnd >> snap.rcv_wscale.unwrap_or(0)).unwrap_or(u16::MAX),
            peer_window: snap.snd_wnd,
            peer_wscale: snap.snd_wscale.unwrap_or(0),
            ts_base: snap.timestamps.map(|t| {
                let age = Duration::from_nanos(monotonic_ns().saturating_sub(t.monotonic_ns));
                (t.tsval, Instant::now() - age)
            }),
            ts_recent: 0,
            mss: snap.mss,
            inbox: Vec::new(),
            accept: true,
            startup_tsval: None,
            _frozen: frozen,
            ns_a: bed.ns_a.clone(),
            nft_table,
        };
        // Everything captured so far: the startup, for TS.Recent (kept out of the inbox).
        p.poll(Duration::ZERO)?;
        p.inbox.clear();
        if p.link.is_none() {
            bail!("no frame of the startup seen on {}", bed.if_a);
        }
        Ok(p)
    }

    /// Our TSval now (kernel TCP clock: milliseconds).
    pub fn tsval(&self) -> u32 {
        self.ts_base
            .map_or(0, |(v, at)| v.wrapping_add(at.elapsed().as_millis() as u32))
    }

    /// Whether timestamps were negotiated.
    pub fn timestamps(&self) -> bool {
        self.ts_base.is_some()
    }

    /// A well-formed segment at SND.NXT acknowledging RCV.NXT, carrying `payload`.
    pub fn seg(&self, payload: &[u8]) -> Seg {
        Seg {
            seq: self.snd_nxt,
            flags: Flags {
                psh: !payload.is_empty(),
                ack: Some(self.rcv_nxt),
                ..Flags::default()
            },
            window: self.window,
            ts: self.ts_base.map(|_| (self.tsval(), self.ts_recent)),
            extra_options: Vec::new(),
            raw_options: None,
            payload: payload.to_vec(),
            bad_checksum: false,
            truncate: None,
        }
    }

    /// The Ethernet frame of `s`.
    pub fn frame(&self, s: &Seg) -> Result<Vec<u8>> {
        let mut opts = Vec::new();
        match &s.raw_options {
            Some(raw) => opts.extend_from_slice(raw),
            None => {
                if let Some((v, e)) = s.ts {
                    opts.extend_from_slice(&[1, 1, 8, 10]);
                    opts.extend_from_slice(&v.to_be_bytes());
                    opts.extend_from_slice(&e.to_be_bytes());
                }
                opts.extend_from_slice(&s.extra_options);
                while opts.len() % 4 != 0 {
                    opts.push(1);
                }
            }
        }
        let eth = PacketBuilder::ethernet2(self.mac_a, self.mac_b);
        let ip = match (self.local.ip(), self.remote.ip()) {
            (IpAddr::V4(l), IpAddr::V4(r)) => eth.ipv4(l.octets(), r.octets(), 64),
            (IpAddr::V6(l), IpAddr::V6(r)) => eth.ipv6(l.octets(), r.octets(), 64),
            _ => bail!("mixed address families {} and {}", self.local, self.remote),
        };
        let mut b = ip.tcp(self.local.port(), self.remote.port(), s.seq, s.window);
        if s.flags.syn {
            b = b.syn();
        }
        if s.flags.rst {
            b = b.rst();
        }
        if s.flags.fin {
            b = b.fin();
        }
        if s.flags.psh {
            b = b.psh();
        }
        if let Some(a) = s.flags.ack {
            b = b.ack(a);
        }
        let b = b
            .options_raw(&opts)
            .map_err(|e| anyhow!("TCP options: {e:?}"))?;
        let mut f = Vec::with_capacity(b.size(s.payload.len()));
        b.write(&mut f, &s.payload)?;
        if s.bad_checksum {
            // Ethernet 14 + the IP header, checksum at TCP offset 16.
            f[14 + ip_header_len(&self.local) + 16] ^= 0xff;
        }
        if let Some(n) = s.truncate {
            f.truncate(n);
        }
        Ok(f)
    }

    /// Sends `s` as it is (no state change).
    pub fn send_seg(&self, s: &Seg) -> Result<()> {
        let f = self.frame(s)?;
        self.send_raw(&f)
    }

    /// Sends any octets as one frame out of ns a's veth.
    pub fn send_raw(&self, frame: &[u8]) -> Result<()> {
        let link = self
            .link
            .as_ref()
            .ok_or_else(|| anyhow!("no link address yet"))?;
        // A flood can fill the device's queue for a moment (ENOBUFS): the frame is sent again
        // after a short pause, a bounded number of times, as a real sender's queue would wait.
        let mut tries = 0;
        loop {
            match sendto(self.sock.as_raw_fd(), frame, link, MsgFlags::empty()) {
                Ok(_) => return Ok(()),
                Err(nix::errno::Errno::ENOBUFS) if tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                Err(e) => return Err(e).context("AF_PACKET send"),
            }
        }
    }

    /// Sends `payload` in order at SND.NXT and advances SND.NXT.
    pub fn send_data(&mut self, payload: &[u8]) -> Result<()> {
        let s = self.seg(payload);
        self.send_seg(&s)?;
        self.snd_nxt = self.snd_nxt.wrapping_add(payload.len() as u32);
        Ok(())
    }

    /// Sends `wire` in order in segments of at most `mss` octets.
    pub fn send_stream(&mut self, wire: &[u8], mss: usize) -> Result<()> {
        for c in wire.chunks(mss.max(1)) {
            self.send_data(c)?;
        }
        Ok(())
    }

    /// Reads what arrives for `wait`, into the inbox. In-order data from the datapath
    /// advances RCV.NXT and is acknowledged; a duplicate is acknowledged again.
    pub fn poll(&mut self, wait: Duration) -> Result<()> {
        let end = Instant::now() + wait;
        let mut buf = vec![0u8; 65536];
        loop {
            // Checked on every frame: the bystander's frames pass this socket too.
            if !wait.is_zero() && Instant::now() >= end {
                return Ok(());
            }
            match recvfrom::<LinkAddr>(self.sock.as_raw_fd(), &mut buf) {
                Ok((n, Some(from))) if from.ifindex() == self.ifindex as usize => {
                    if self.link.is_none() {
                        self.link = Some(from);
                    }
                    if from.pkttype() == PACKET_OUTGOING {
                        // Only our kernel's (this socket does not see its own frames).
                        if let Some(ts) = self.sent_tsval(&buf[..n]) {
                            self.startup_tsval = Some(ts);
                        }
                        continue;
                    }
                    if let Some(rx) = self.parse(&buf[..n]) {
                        self.take(rx)?;
                    }
                }
                Ok(_) => {}
                Err(nix::Error::EAGAIN) | Err(nix::Error::EINTR) => {
                    let left = end.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(());
                    }
                    let ms = left.as_millis().clamp(1, 20) as u16;
                    let mut fds = [PollFd::new(self.sock.as_fd(), PollFlags::POLLIN)];
                    let _ = poll(&mut fds, PollTimeout::from(ms));
                }
                Err(e) => return Err(e).context("AF_PACKET receive"),
            }
        }
    }

    fn take(&mut self, rx: Rx) -> Result<()> {
        if let Some(v) = rx.tsval {
            self.ts_recent = v;
        }
        self.peer_window = u32::from(rx.window) << self.peer_wscale;
        let len = rx.payload.len() as u32 + u32::from(rx.fin) + u32::from(rx.syn);
        if len > 0 && !rx.rst {
            if rx.seq == self.rcv_nxt && self.accept {
                self.rcv_nxt = self.rcv_nxt.wrapping_add(len);
            }
            // Acknowledge it (in order: the new RCV.NXT; else a duplicate ACK).
            let ack = self.seg(&[]);
            self.send_seg(&ack)?;
        }
        self.inbox.push(rx);
        Ok(())
    }

    /// Waits up to `wait` for a segment that `pred` accepts; the inbox keeps the others.
    pub fn wait_for(&mut self, wait: Duration, pred: impl Fn(&Rx) -> bool) -> Result<Option<Rx>> {
        let end = Instant::now() + wait;
        loop {
            if let Some(i) = self.inbox.iter().position(&pred) {
                return Ok(Some(self.inbox.remove(i)));
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.poll(left.min(Duration::from_millis(20)))?;
        }
    }

    /// The TSval of a segment with data of our flow toward the datapath.
    fn sent_tsval(&self, frame: &[u8]) -> Option<u32> {
        let p = SlicedPacket::from_ethernet(frame).ok()?;
        let (src, dst) = ip_pair(&p.net)?;
        let Some(TransportSlice::Tcp(t)) = p.transport else {
            return None;
        };
        if src != self.local.ip()
            || dst != self.remote.ip()
            || t.source_port() != self.local.port()
            || t.destination_port() != self.remote.port()
            || t.payload().is_empty()
        {
            return None;
        }
        t.options_iterator().find_map(|o| match o {
            Ok(TcpOptionElement::Timestamp(v, _)) => Some(v),
            _ => None,
        })
    }

    fn parse(&self, frame: &[u8]) -> Option<Rx> {
        let p = SlicedPacket::from_ethernet(frame).ok()?;
        let (src, dst) = ip_pair(&p.net)?;
        let Some(TransportSlice::Tcp(t)) = p.transport else {
            return None;
        };
        if src != self.remote.ip()
            || dst != self.local.ip()
            || t.source_port() != self.remote.port()
            || t.destination_port() != self.local.port()
        {
            return None;
        }
        let tsval = t.options_iterator().find_map(|o| match o {
            Ok(TcpOptionElement::Timestamp(v, _)) => Some(v),
            _ => None,
        });
        Some(Rx {
            seq: t.sequence_number(),
            ack: t.ack().then(|| t.acknowledgment_number()),
            syn: t.syn(),
            rst: t.rst(),
            fin: t.fin(),
            window: t.window_size(),
            tsval,
            payload: t.payload().to_vec(),
        })
    }
}

fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// An FPDU (no markers) around `ulpdu` with its CRC; `crc_ok` false flips the CRC.
pub fn fpdu_bytes(ulpdu: &[u8], crc_ok: bool) -> Vec<u8> {
    let mut b = vec![0u8; fpdu::fpdu_len(ulpdu.len())];
    b[..2].copy_from_slice(&(ulpdu.len() as u16).to_be_bytes());
    b[2..2 + ulpdu.len()].copy_from_slice(ulpdu);
    let mut f = fpdu::Fpdu::new_unchecked(&mut b[..]);
    f.fill_pad_and_crc();
    if !crc_ok {
        let n = b.len();
        b[n - 1] ^= 0x5a;
    }
    b
}

/// An FPDU whose ULPDU_Length field says `claimed` while `ulpdu` follows (CRC over what is
/// there, so that only the length lies).
pub fn fpdu_claiming(claimed: u16, ulpdu: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(ulpdu.len() + 8);
    b.extend_from_slice(&claimed.to_be_bytes());
    b.extend_from_slice(ulpdu);
    b.resize(b.len() + fpdu::pad_len(ulpdu.len()), 0);
    let c = mpa::crc::crc32c(&b);
    b.extend_from_slice(&c.to_le_bytes());
    b
}

/// An RDMA Write ULPDU (one tagged DDP segment, L set): `data` to `stag` at `to`.
pub fn write_ulpdu(stag: u32, to: u64, data: &[u8]) -> Vec<u8> {
    tagged_ulpdu(true, RdmapOpcode::RdmaWrite, stag, to, data)
}

/// A tagged DDP segment with any opcode and L flag.
pub fn tagged_ulpdu(last: bool, opcode: RdmapOpcode, stag: u32, to: u64, data: &[u8]) -> Vec<u8> {
    let r = DdpRepr::Tagged {
        last,
        opcode,
        stag,
        to,
    };
    let mut v = vec![0u8; r.header_len()];
    r.emit(&mut v, 1);
    v.extend_from_slice(data);
    v
}

/// An untagged DDP segment (QN, MSN, MO free).
pub fn untagged_ulpdu(opcode: RdmapOpcode, qn: u32, msn: u32, mo: u32, data: &[u8]) -> Vec<u8> {
    let r = DdpRepr::Untagged {
        last: true,
        opcode,
        inv_stag: 0,
        qn,
        msn,
        mo,
    };
    let mut v = vec![0u8; r.header_len()];
    r.emit(&mut v, 1);
    v.extend_from_slice(data);
    v
}

/// The IPv4 address of `a` as an `Ipv4Addr` (IPv6 not handled by the hostile peer).
pub fn ipv4(a: IpAddr) -> Option<Ipv4Addr> {
    match a {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(_) => None,
    }
}

/// Source and destination of an IPv4 or IPv6 packet.
fn ip_pair(net: &Option<NetSlice>) -> Option<(IpAddr, IpAddr)> {
    match net {
        Some(NetSlice::Ipv4(ip)) => Some((
            ip.header().source_addr().into(),
            ip.header().destination_addr().into(),
        )),
        Some(NetSlice::Ipv6(ip)) => Some((
            ip.header().source_addr().into(),
            ip.header().destination_addr().into(),
        )),
        _ => None,
    }
}
