//! The hostile suite: hostile-input classes against the live datapath, each with its
//! expected outcome, while a bystander connection on the same worker places RDMA Writes and
//! must finish octet-exact (docs/hostile.md). `mpa-bench hostile` is its command; the
//! whole-system tests call [`run`] and check every class by name.
//!
//! Every class is one entry of [`classes::CLASSES`]: a name, what must happen ([`Expect`])
//! and a script that drives a [`HostilePeer`] (a real MPA connection, our kernel socket in ns a
//! frozen, every frame crafted). The runner here opens a fresh hostile connection per class,
//! runs the script, checks the outcome on the wire and in the datapath's counters, and closes
//! the connection.

#![forbid(unsafe_code)]
// A line goes through the caller's `say`: the suite never prints on its own.
#![deny(clippy::print_stdout)]

pub mod applications;
mod bystander;
mod check;
pub mod classes;
mod counters;
pub mod ctl;
pub mod ended;
pub mod foreign;
pub mod frames;
pub mod ipv6;
mod locator;
pub mod markers_ooo;
pub mod reads;
pub mod registered;
pub mod rings;
pub mod window;

pub use counters::{Counter, Snapshot};
pub use mpa_harness::hostile_peer::{HostileConfig, HostilePeer, Rx, Seg};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use mpa_app::{Consumer, MappedRegion};
use mpa_ctl_proto::stats::{DatapathStats, FlowReport};
use mpa_ctl_proto::{Message, PostTarget};
use mpa_harness::datapath::{accept_and_hand_over, start_datapath, stats, temp_path, HandedOver};
use mpa_harness::datapath::{DatapathOptions, Responder};
use mpa_testbed::{run_in_netns, BedConfig, TestBed};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The port of the bystander's hand-over listener in ns b.
pub const BYSTANDER_PORT: u16 = 7777;
/// The protection domain of the bystander's region.
pub const PD_BYSTANDER: u32 = 1;
/// The port the hostile connections' hand-over listener uses in ns b (the bystander's is
/// [`BYSTANDER_PORT`]).
pub const HOSTILE_PORT: u16 = 7778;
/// Protection domain of the hostile connections' region and posted buffers.
pub const PD_HOSTILE: u32 = 20;
/// A protection domain with a region but no posted buffers.
pub const PD_NO_BUFFERS: u32 = 21;
/// A protection domain whose region no hostile connection may use.
pub const PD_OTHER: u32 = 22;
/// Octets of the hostile region; each class owns [`SLOT`] octets of it.
pub const REGION: u64 = 1 << 20;
/// Octets of the region each class owns.
pub const SLOT: u64 = 4096;
/// Octets of each posted receive buffer (Sends).
pub const RECV_BUF: u32 = 256;
/// Receive buffers posted to [`PD_HOSTILE`].
pub const RECV_BUFS: u32 = 4;
/// The datapath's zero-window probe limit here (`TcpConfig::persist_max_probes`, default
/// 15): with 200 ms RTOs backing off, 15 probes would take minutes; 4 end the flow after
/// about 6 s (`window::persist_limit`). Lower would cut into `zero-window-forever`, which
/// keeps the window closed for 3 s and expects the flow to live.
pub const PERSIST_PROBES: u32 = 4;

/// The hostile datapath's memory budget (docs/limits.md): room for the run's flows and
/// subscriptions, small enough for a class to exhaust it.
pub const MEMORY_BUDGET: u64 = 48 << 20;

/// Records per completion ring of the hostile datapath: each subscription then charges
/// 192 KiB per worker to the budget, less than the octets one flow's store may hold, so a
/// class that exhausts the budget with subscriptions leaves less than a store's worth.
pub const COMPLETION_RING: u32 = 4096;

/// Every class: the first table, then the later topics' tables.
pub fn all_classes() -> impl Iterator<Item = &'static Class> {
    classes::CLASSES
        .iter()
        .chain(frames::CLASSES)
        .chain(window::CLASSES)
        .chain(markers_ooo::CLASSES)
        .chain(ended::CLASSES)
        .chain(ipv6::CLASSES)
        .chain(reads::CLASSES)
}

/// The suite's options (`mpa-bench hostile`'s).
#[derive(Args, Clone, Debug)]
pub struct HostileArgs {
    /// Run only the classes whose name contains this.
    #[arg(long)]
    pub only: Option<String>,
    /// Leave out the classes whose name contains this (e.g. the one class that measures CPU
    /// time, `locator-amplification`, in a debug build).
    #[arg(long)]
    pub skip: Vec<String>,
    /// Print the classes and their expected outcomes, run nothing.
    #[arg(long)]
    pub list: bool,
    /// The bystander's pace, RDMA Writes of 4 KiB per second.
    #[arg(long, default_value_t = DEFAULT_BYSTANDER_RATE)]
    pub bystander_rate: u64,
    /// The bystander's length in seconds (it should outlast the classes; default: a third of
    /// a second per class and 10 s more).
    #[arg(long)]
    pub bystander_seconds: Option<u64>,
    /// (Internal: the `control-other-uid` class runs this as another user.) Connect to this
    /// control socket, print what happened in one line, run nothing else.
    #[arg(long, hide = true)]
    pub probe_socket: Option<std::path::PathBuf>,
    /// (Internal: the classes on other clients' flows run this without CAP_NET_ADMIN.) With
    /// `--probe-socket`: ask this of flow `--probe-flow` and print the answer's code.
    #[arg(long, hide = true, requires_all = ["probe_socket", "probe_flow"])]
    pub probe_foreign: Option<String>,
    /// (Internal.) The flow `--probe-foreign` names.
    #[arg(long, hide = true)]
    pub probe_flow: Option<u64>,
    /// (Internal: the idle-client checks run this without CAP_NET_ADMIN.) With
    /// `--probe-socket`: say Hello, hold `nothing` or a `region`, stay silent for
    /// `--probe-idle-ms`, and print the datapath's last words or `served`.
    #[arg(long, hide = true, requires = "probe_socket")]
    pub probe_idle: Option<String>,
    /// (Internal.) How long `--probe-idle` stays silent.
    #[arg(long, hide = true, default_value_t = DEFAULT_PROBE_IDLE_MS)]
    pub probe_idle_ms: u64,
    /// Print one JSON document on stdout (`{"scenario": "hostile", "classes", "bystander",
    /// "ok"}`); the lines go to stderr.
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// The bystander's default pace, Writes a second.
const DEFAULT_BYSTANDER_RATE: u64 = 1000;
/// How long `--probe-idle` stays silent by default, ms.
const DEFAULT_PROBE_IDLE_MS: u64 = 4000;

impl Default for HostileArgs {
    /// What `mpa-bench hostile` runs with no option: every class.
    fn default() -> Self {
        HostileArgs {
            only: None,
            skip: Vec::new(),
            list: false,
            bystander_rate: DEFAULT_BYSTANDER_RATE,
            bystander_seconds: None,
            probe_socket: None,
            probe_foreign: None,
            probe_flow: None,
            probe_idle: None,
            probe_idle_ms: DEFAULT_PROBE_IDLE_MS,
            json: false,
        }
    }
}

/// What must happen after a class's script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Dropped without any answer, `counter` up by exactly 1; the connection lives on (a
    /// valid RDMA Write afterwards is acknowledged and placed).
    Silent(Counter),
    /// Answered by an ACK of our SND.NXT (challenge or duplicate ACK), `counter` up by
    /// exactly 1, nothing placed; the connection lives on.
    Acked(Counter),
    /// Accepted: what the script wrote is acknowledged and placed octet for octet; the
    /// connection lives on.
    Placed,
    /// A Terminate with exactly (layer, error type, error code) comes back, and the flow ends
    /// with it (RFC 5040 §4.8, RFC 5041 §7, RFC 5044 §8).
    Terminate(u8, u8, u8),
    /// The flow ends with MPA error 1 (TCP connection closed, reset or lost).
    Closed,
    /// Our Terminate ends the flow (the datapath reports the peer's Terminate).
    PeerTerminate,
    /// The connection lives (a valid RDMA Write afterwards is acknowledged and placed); the
    /// script checked the rest itself (its error names what it expected).
    Lives,
    /// The script ends the flow; once it is gone the runner closes ns b's frozen socket as
    /// mpa-control does (silently: nothing may arrive), then the class's `after` sends frames
    /// on the ended 4-tuple ([`ended`]).
    Gone,
    /// The datapath resets the connection (the script saw the RST and checked what came
    /// before it); the flow ends, its report keeping the first error (RFC 5044 §8 error).
    Reset(u8),
}

impl std::fmt::Display for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expect::Silent(c) => write!(f, "dropped silently, {} +1, connection lives", c.name()),
            Expect::Acked(c) => write!(f, "ACK of SND.NXT, {} +1, connection lives", c.name()),
            Expect::Placed => write!(f, "placed octet-exact, connection lives"),
            Expect::Terminate(l, t, c) => {
                write!(f, "Terminate layer {l} type {t} code {c:#04x}, flow ends")
            }
            Expect::Closed => write!(f, "flow ends with MPA error 1 (TCP closed)"),
            Expect::PeerTerminate => write!(f, "flow ends by our Terminate"),
            Expect::Lives => write!(f, "the script's checks hold, connection lives"),
            Expect::Reset(e) => write!(f, "RST from the datapath, flow ends with MPA error {e}"),
            Expect::Gone => write!(
                f,
                "flow gone, frozen socket closed silently; the ended tuple's frames go to ns b's kernel: RST, nothing placed, no datapath counter"
            ),
        }
    }
}

/// Which responder the class's connection meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setup {
    /// Protection domain [`PD_HOSTILE`]: the region and posted buffers.
    Normal,
    /// Protection domain [`PD_NO_BUFFERS`]: a region, no posted buffers.
    NoBuffers,
    /// As `Normal`, the Responder trusting an aligned sender (the locator runs on
    /// out-of-order segments).
    Aligned,
    /// As `Normal`, with [`RECV_BUFS`] receive buffers posted to the domain's shared receive
    /// queue, which its connections draw from.
    Posted,
    /// As `Normal`, the Responder requiring markers (RFC 5044 §7.1.1 M=1 in its Reply): our
    /// FPDUs carry them ([`Ctx::write`] adds them), the datapath's toward us do not.
    Markers,
    /// As `Normal`, over IPv6 (the bed's fd99::1 → fd99::2).
    Ipv6,
    /// As `Normal`, peer-to-peer (revision 2): the startup sent this RTR first, and the
    /// datapath took it (its queue's MSN 1).
    P2p(mpa::startup::RtrType),
}

/// One hostile-input class.
pub struct Class {
    /// Short name (`class <name>: …`).
    pub name: &'static str,
    /// What must happen.
    pub expect: Expect,
    /// Which responder.
    pub setup: Setup,
    /// Drives the peer; an error is a failure of the class (with its own words).
    pub script: fn(&mut Ctx) -> Result<()>,
    /// Runs once the expected end (Terminate) was seen, before the flow is closed: e.g.
    /// FPDUs after a Terminate, which must not be placed.
    pub after: fn(&mut Ctx) -> Result<()>,
}

/// An `after` that does nothing.
pub fn nothing(_: &mut Ctx) -> Result<()> {
    Ok(())
}

/// What the hostile connections share: the regions and their STags.
pub struct Env {
    /// The region in [`PD_HOSTILE`] (remote write).
    pub region: MappedRegion,
    /// A region in [`PD_HOSTILE`] without remote write access, with remote read access.
    pub stag_read_only: u32,
    /// A region in [`PD_OTHER`].
    pub stag_other_pd: u32,
    /// The region in [`PD_NO_BUFFERS`].
    pub stag_no_buffers: u32,
    /// A second region in [`PD_HOSTILE`] (remote write).
    pub stag_second: u32,
    /// The datapath's control socket.
    pub socket: std::path::PathBuf,
    consumer: std::sync::Mutex<Consumer>,
}

impl Env {
    fn prepare(socket: &Path) -> Result<Env> {
        let mut c = Consumer::connect(socket, Duration::from_secs(20))?;
        let region = c.create_region(REGION, PD_HOSTILE, true, false)?;
        let ro = c.create_region(SLOT, PD_HOSTILE, false, true)?;
        let other = c.create_region(SLOT, PD_OTHER, true, false)?;
        let nob = c.create_region(SLOT, PD_NO_BUFFERS, true, false)?;
        let second = c.create_region(SLOT, PD_HOSTILE, true, false)?;
        Ok(Env {
            stag_second: second.info().stag,
            stag_read_only: ro.info().stag,
            stag_other_pd: other.info().stag,
            stag_no_buffers: nob.info().stag,
            region,
            socket: socket.to_path_buf(),
            consumer: std::sync::Mutex::new(c),
        })
    }

    /// The consumer that created the hostile regions: it owns their protection domains, so
    /// only it may subscribe to their completions.
    pub fn owner(&self) -> Result<std::sync::MutexGuard<'_, Consumer>> {
        self.consumer
            .lock()
            .map_err(|_| anyhow!("consumer lock poisoned"))
    }

    /// The region's STag.
    pub fn stag(&self) -> u32 {
        self.region.info().stag
    }

    /// Posts [`RECV_BUFS`] receive buffers to [`PD_HOSTILE`]'s shared receive queue, in
    /// the region's second half, clear of the slots.
    fn post_buffers(&self) -> Result<()> {
        let mut c = self
            .consumer
            .lock()
            .map_err(|_| anyhow!("consumer lock poisoned"))?;
        c.post_recv(
            PostTarget::Pd(PD_HOSTILE),
            self.stag(),
            REGION / 2,
            RECV_BUF,
            RECV_BUFS,
        )?;
        Ok(())
    }

    /// `len` octets of the region at `off`.
    pub fn read(&self, off: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.region.read(off, &mut v);
        v
    }
}

/// A class's script's world: the peer, the shared regions, and its own slot of the region.
pub struct Ctx<'a> {
    /// The hostile connection.
    pub p: HostilePeer,
    /// The regions.
    pub env: &'a Env,
    /// Start of this class's [`SLOT`] octets of the region.
    pub slot: u64,
    /// Writes the script expects placed: (region offset, octets).
    pub placed: Vec<(u64, Vec<u8>)>,
    /// The datapath's flow id of this connection.
    pub flow_id: u64,
    /// What the script saw, for the class's line (ends with "; ").
    pub note: String,
    /// SeqStart (our first FPDU octet) when markers go toward the datapath.
    pub markers_from: Option<u32>,
}

impl Ctx<'_> {
    /// 64 octets unique to this class and `tag`.
    pub fn pattern(&self, tag: u8) -> Vec<u8> {
        (0..64u64)
            .map(|i| (self.slot / SLOT) as u8 ^ tag ^ (i as u8).wrapping_mul(31))
            .collect()
    }

    /// The FPDU of a valid RDMA Write of `data` at `off` in this class's slot.
    pub fn write_fpdu(&self, off: u64, data: &[u8]) -> Vec<u8> {
        mpa_harness::hostile_peer::fpdu_bytes(
            &mpa_harness::hostile_peer::write_ulpdu(self.env.stag(), self.slot + off, data),
            true,
        )
    }

    /// Sends a valid RDMA Write at `off` in the slot (one segment) and records it as
    /// expected to be placed.
    pub fn write(&mut self, off: u64, data: &[u8]) -> Result<()> {
        let f = match self.markers_from {
            Some(_) => self.marked(&mpa_harness::hostile_peer::write_ulpdu(
                self.env.stag(),
                self.slot + off,
                data,
            ))?,
            None => self.write_fpdu(off, data),
        };
        self.p.send_data(&f)?;
        self.placed.push((self.slot + off, data.to_vec()));
        Ok(())
    }

    /// The FPDU of `ulpdu` at SND.NXT with markers where the stream position puts them
    /// (RFC 5044 §4.3; positions counted from SeqStart).
    pub fn marked(&self, ulpdu: &[u8]) -> Result<Vec<u8>> {
        let s0 = self
            .markers_from
            .ok_or_else(|| anyhow!("markers were not negotiated"))?;
        let mut enc = mpa::encoder::FpduEncoder::at_position(self.p.snd_nxt.wrapping_sub(s0), true);
        let mut out = Vec::new();
        enc.encode(ulpdu, &mut out)
            .map_err(|e| anyhow!("encoding an FPDU: {e}"))?;
        Ok(out)
    }

    /// Waits until the datapath acknowledged everything we sent.
    pub fn wait_acked(&mut self) -> Result<()> {
        let want = self.p.snd_nxt;
        let got = self
            .p
            .wait_for(Duration::from_secs(3), |r| r.ack == Some(want))?;
        if got.is_none() {
            bail!("no ACK of {want} within 3 s");
        }
        Ok(())
    }

    /// The flow's live counters (over a control connection of its own).
    pub fn flow_report(&self) -> Result<FlowReport> {
        let mut dpc = mpa_control::datapath_client::DatapathClient::connect(
            &self.env.socket,
            Duration::from_secs(5),
        )?;
        Ok(live_counters(&mut dpc, self.flow_id)?.flow)
    }

    /// Fails unless the slot at `off` still holds zeros (nothing placed there).
    pub fn untouched(&self, off: u64, len: usize) -> Result<()> {
        let got = self.env.read(self.slot + off, len);
        if let Some(i) = got.iter().position(|&b| b != 0) {
            bail!(
                "octets placed at slot offset {} although they must not be",
                off + i as u64
            );
        }
        Ok(())
    }
}

/// One class's result.
#[derive(serde::Serialize, Debug, Clone)]
pub struct Outcome {
    /// The class's name.
    pub name: &'static str,
    /// Whether it behaved as specified.
    pub ok: bool,
    /// What was seen (or, failed, what was expected and what happened instead).
    pub text: String,
}

/// What a run of the suite found.
#[derive(Debug)]
pub struct Report {
    /// Every class run, in the order of the tables.
    pub outcomes: Vec<Outcome>,
    /// The bystander's end: what it placed, or why it failed.
    pub bystander: std::result::Result<String, String>,
    /// The last line: `N/N classes as specified; bystander octet-exact`, or what failed.
    pub summary: String,
}

impl Report {
    /// Every class as specified and the bystander octet-exact.
    pub fn ok(&self) -> bool {
        self.bystander.is_ok() && self.outcomes.iter().all(|o| o.ok)
    }
}

/// The classes `a` selects (`--only`, `--skip`), in the order of the tables.
pub fn selected(a: &HostileArgs) -> Vec<&'static Class> {
    all_classes()
        .filter(|c| a.only.as_ref().is_none_or(|o| c.name.contains(o.as_str())))
        .filter(|c| !a.skip.iter().any(|s| c.name.contains(s.as_str())))
        .collect()
}

fn live_counters(
    dpc: &mut mpa_control::datapath_client::DatapathClient,
    flow: u64,
) -> Result<Snapshot> {
    let s: DatapathStats = stats(dpc)?;
    for q in &s.queues {
        if let Some(f) = q.flows.iter().find(|f| f.flow_id == flow) {
            return Ok(Snapshot {
                flow: f.clone(),
                queue: q.stats,
                xdp: s.xdp.unwrap_or_default(),
            });
        }
    }
    bail!("flow {flow} is not live")
}

pub(crate) fn flow_gone(h: &mut HandedOver) -> Result<FlowReport> {
    loop {
        match h.dpc.next_notification()? {
            Message::FlowGone { flow_id, .. } if flow_id == h.flow_id => break,
            _ => {}
        }
    }
    let s = stats(&mut h.dpc)?;
    s.ended_flow(h.flow_id)
        .cloned()
        .ok_or_else(|| anyhow!("flow {} not among the ended flows", h.flow_id))
}

/// The hand-over listeners in ns b on [`HOSTILE_PORT`].
struct Listeners {
    v4: TcpListener,
    v6: TcpListener,
}

/// Runs one class on a fresh connection; `index` picks its slot.
fn run_class(
    bed: &TestBed,
    socket: &Path,
    listeners: &Listeners,
    env: &Env,
    index: usize,
    class: &Class,
) -> Result<String> {
    let pd = match class.setup {
        Setup::NoBuffers => PD_NO_BUFFERS,
        _ => PD_HOSTILE,
    };
    let mut resp = Responder {
        placement: mpa_control::Placement {
            pd: Some(pd),
            aligned_sender: class.setup == Setup::Aligned,
            conn_id: None,
        },
        wait: Duration::from_secs(10),
        ..Responder::framing(class.setup == Setup::Markers, true)
    };
    let rtr = match class.setup {
        Setup::P2p(rtr) => Some(rtr),
        _ => None,
    };
    if let Some(rtr) = rtr {
        resp.policy.accept_rev2 = true;
        resp.policy.rtr_support = mpa::startup::RtrSet::single(rtr);
    }
    if class.setup == Setup::Posted {
        env.post_buffers()?;
    }
    let v6 = class.setup == Setup::Ipv6;
    let listener = if v6 { &listeners.v6 } else { &listeners.v4 };
    let to = SocketAddr::new(bed.addr_b(v6), HOSTILE_PORT);
    let (h, p) = std::thread::scope(|s| {
        let ns_b = bed.ns_b.clone();
        let t = s.spawn(move || accept_and_hand_over(&ns_b, socket, listener, &resp));
        let p = HostilePeer::connect(
            bed,
            to,
            &HostileConfig {
                rtr,
                ..HostileConfig::default()
            },
        );
        let h = t.join().map_err(|_| anyhow!("hand-over thread panicked"));
        (h, p)
    });
    let mut h = h??;
    let p = p?;
    let mut ctx = Ctx {
        p,
        env,
        slot: index as u64 * SLOT,
        placed: Vec::new(),
        flow_id: h.flow_id,
        note: String::new(),
        markers_from: None,
    };
    if h.negotiated.markers_rx {
        ctx.markers_from = Some(ctx.p.snd_nxt);
    }
    if class.expect == Expect::Gone {
        return ended::check_gone(&mut ctx, h, class);
    }
    let res = check::check_class(&mut ctx, &mut h, class);
    // Whatever happened: end the flow (an exact RST), wait until it is gone.
    let gone = if res.as_ref().is_ok_and(|r| r.1.is_some()) {
        Ok(())
    } else {
        let mut rst = ctx.p.seg(&[]);
        rst.flags.rst = true;
        rst.flags.ack = None;
        ctx.p.send_seg(&rst)?;
        flow_gone(&mut h).map(|_| ())
    };
    let (text, _) = res?;
    gone.context("flow end after the class")?;
    Ok(text)
}

pub(crate) fn verify_placed(ctx: &Ctx) -> Result<()> {
    for (off, want) in &ctx.placed {
        let got = ctx.env.read(*off, want.len());
        if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
            bail!(
                "region offset {} to hold {:#04x}, got {:#04x}",
                off + i as u64,
                want[i],
                got[i]
            );
        }
    }
    Ok(())
}

/// Runs the selected classes on a fresh bed of their own, calling `say` with each class's line
/// (`class NAME: OK …` or `class NAME: FAILED …`), the bystander's and the summary
/// (`hostile: …`) as they come. An error is a bed that could not be built; a class or the
/// bystander failing is in the [`Report`].
pub fn run(a: &HostileArgs, say: &mut dyn FnMut(&str)) -> Result<Report> {
    let classes = selected(a);
    let bed = Arc::new(TestBed::up(BedConfig {
        loss_port: BYSTANDER_PORT,
        ..BedConfig::default()
    })?);
    let socket = temp_path("hostile.sock");
    let mut opts = DatapathOptions::default();
    opts.tcp.persist_max_probes = PERSIST_PROBES;
    opts.memory_budget = Some(MEMORY_BUDGET);
    opts.completion_ring = COMPLETION_RING;
    let dp = start_datapath(&bed, &socket, &opts)?;
    let env = Env::prepare(&socket)?;
    let seconds = a.bystander_seconds.unwrap_or(10 + classes.len() as u64 / 3);
    let bystander = bystander::Bystander::start(&bed, &socket, a.bystander_rate, seconds)?;
    let addr = SocketAddr::new(bed.addr_b(false), HOSTILE_PORT);
    let addr6 = SocketAddr::new(bed.addr_b(true), HOSTILE_PORT);
    let listeners = Listeners {
        v4: run_in_netns(&bed.ns_b, move || TcpListener::bind(addr))??,
        v6: run_in_netns(&bed.ns_b, move || TcpListener::bind(addr6))??,
    };
    // The hostile connections inherit TS.Recent at their hand-over (as mpa-control's
    // listeners do): the port is watched for the whole run.
    let mut _watcher =
        mpa_control::datapath_client::DatapathClient::connect(&socket, Duration::from_secs(10))?;
    _watcher.request(|id| Message::WatchPort {
        id,
        port: HOSTILE_PORT,
    })?;
    let t0 = Instant::now();
    let mut outcomes = Vec::new();
    let mut overlapped = 0;
    for (i, c) in classes.iter().enumerate() {
        let tc = Instant::now();
        let r = run_class(&bed, &socket, &listeners, &env, i + 1, c);
        tracing::info!(
            class = c.name,
            seconds = tc.elapsed().as_secs_f64(),
            "class done"
        );
        if bystander.running() {
            overlapped += 1;
        }
        let o = match r {
            Ok(text) => Outcome {
                name: c.name,
                ok: true,
                text,
            },
            Err(e) => Outcome {
                name: c.name,
                ok: false,
                text: format!("expected {}: {e:#}", c.expect),
            },
        };
        let verdict = if o.ok { "OK" } else { "FAILED" };
        say(&format!("class {}: {verdict} {}", o.name, o.text));
        outcomes.push(o);
    }
    let secs = t0.elapsed().as_secs_f64();
    let by = bystander.finish().map_err(|e| format!("{e:#}"));
    dp.stop();
    let ok = outcomes.iter().filter(|o| o.ok).count();
    let n = outcomes.len();
    let by_text = match &by {
        Ok(t) => {
            say(&format!("bystander: OK {t}; sending during {overlapped}/{n} classes; classes took {secs:.1} s"));
            "bystander octet-exact".to_string()
        }
        Err(e) => {
            say(&format!("bystander: FAILED {e}"));
            format!("bystander FAILED: {e}")
        }
    };
    let summary = if ok == n {
        format!("{ok}/{n} classes as specified; {by_text}")
    } else {
        let failed: Vec<&str> = outcomes.iter().filter(|o| !o.ok).map(|o| o.name).collect();
        format!(
            "{ok}/{n} classes as specified (failed: {}); {by_text}",
            failed.join(", ")
        )
    };
    say(&format!("hostile: {summary}"));
    Ok(Report {
        outcomes,
        bystander: by,
        summary,
    })
}

/// The hidden probe modes (`--probe-socket` …): the classes that need a client of another
/// user or without CAP_NET_ADMIN run `mpa-bench hostile` so. `Some(line)` to print when `a`
/// asks for one.
pub fn probe_line(a: &HostileArgs) -> Option<String> {
    let p = a.probe_socket.as_ref()?;
    if let (Some(op), Some(flow)) = (&a.probe_foreign, a.probe_flow) {
        return Some(foreign::probe_foreign(p, op, flow));
    }
    if let Some(hold) = &a.probe_idle {
        let silent = std::time::Duration::from_millis(a.probe_idle_ms);
        return Some(ctl::probe_idle(p, hold, silent));
    }
    Some(ctl::probe(p))
}
