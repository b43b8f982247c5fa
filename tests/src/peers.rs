//! MPA peers in ns a (in-process Initiators and Responders), the datapath in ns b with its
//! hand-over, and the datapath's counters.

use crate::bin;
use mpa::endpoint::{EndpointConfig, EndpointError, MpaStream};
use mpa::startup::StartupPolicy;
use mpa_control::datapath_client::DatapathClient;
use mpa_control::freeze::FrozenSocket;
use mpa_control::initiator::{connect_and_hand_over, InitiatorOutcome};
use mpa_ctl_proto::stats::{DatapathStats, FlowReport};
use mpa_datapath::server::Datapath;
use mpa_harness::{accept_and_hand_over, start_datapath, temp_path, DatapathOptions, Responder};
use mpa_testbed::{run_in_netns, TestBed};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The datapath in ns b (`mpa-bench`'s `start_datapath`), its control socket at a fresh path.
pub fn datapath(bed: &TestBed, opts: &DatapathOptions) -> (Datapath, PathBuf) {
    let path = temp_path("dp.sock");
    let dp = start_datapath(bed, &path, opts).unwrap_or_else(|e| panic!("{e:#}"));
    (dp, path)
}

/// Accepts one connection on `listener` (in ns b) and hands it to the datapath at
/// `dp_socket` (`mpa-bench`'s hand-over), the Reply carrying "datapath"; the flow places into
/// protection domain `pd`. Returns the flow, the control connection and the frozen socket.
pub fn hand_over(
    bed: &TestBed,
    dp_socket: &Path,
    listener: &TcpListener,
    markers: bool,
    crc: bool,
    pd: Option<u32>,
) -> (u64, DatapathClient, FrozenSocket) {
    let r = Responder {
        reply_private_data: b"datapath".to_vec(),
        placement: pd.into(),
        ..Responder::framing(markers, crc)
    };
    let h = accept_and_hand_over(&bed.ns_b, dp_socket, listener, &r)
        .unwrap_or_else(|e| panic!("hand-over: {e:#}"));
    (h.flow_id, h.dpc, h.frozen)
}

/// The datapath at `dp_socket` connects, as Initiator, from ns b to the MPA listener at `bind`
/// (`mpa-control`'s `connect_and_hand_over`) and owns the flow, placing into protection domain
/// `pd`: the flow's id, what was negotiated, and the frozen kernel socket.
pub fn datapath_initiates(
    bed: &TestBed,
    dp_socket: &Path,
    bind: SocketAddr,
    pd: u32,
) -> (u64, mpa::startup::Negotiated, FrozenSocket) {
    let mut dpc = DatapathClient::connect(dp_socket, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("datapath control socket: {e}"));
    let placement = mpa_control::Placement {
        pd: Some(pd),
        aligned_sender: false,
        conn_id: None,
    };
    let outcome = run_in_netns(&bed.ns_b, || {
        connect_and_hand_over(
            bind,
            StartupPolicy::default(),
            Vec::new(),
            placement,
            &mut dpc,
        )
    })
    .expect("enter the namespace")
    .unwrap_or_else(|e| panic!("connect to {bind} and hand over: {e:#}"));
    let InitiatorOutcome::HandedOver {
        flow_id,
        negotiated,
        frozen,
    } = outcome
    else {
        panic!("the listener at {bind} rejected the connection")
    };
    (flow_id, negotiated, frozen)
}

/// A blocking listener on `addr` in namespace `ns`.
pub fn listen_in(ns: &str, addr: SocketAddr) -> TcpListener {
    run_in_netns(ns, || TcpListener::bind(addr))
        .expect("enter the namespace")
        .unwrap_or_else(|e| panic!("listen on {addr} in {ns}: {e}"))
}

/// An MPA Initiator in ns a, on a thread: connects to `addr` (without Nagle delay), runs the
/// startup with `cfg`, and gives `f` its local address and the outcome.
pub fn initiator_in_a<T: Send + 'static>(
    bed: &TestBed,
    addr: SocketAddr,
    cfg: EndpointConfig,
    f: impl FnOnce(SocketAddr, Result<MpaStream<TcpStream>, EndpointError>) -> T + Send + 'static,
) -> JoinHandle<T> {
    let ns_a = bed.ns_a.clone();
    std::thread::spawn(move || {
        run_in_netns(&ns_a, move || {
            // A listener that refuses with a reset (mpa-control beyond max_connections or
            // without a datapath) can make connect, setsockopt or getsockname fail already:
            // that is the startup's outcome, given to `f` (local address unspecified then).
            let unknown = SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), 0);
            let sock = match TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                .and_then(|s| s.set_nodelay(true).map(|()| s))
                .and_then(|s| s.local_addr().map(|l| (s, l)))
            {
                Ok(s) => s,
                Err(e) => return f(unknown, Err(e.into())),
            };
            let (sock, local) = sock;
            f(local, MpaStream::connect(sock, &cfg))
        })
        .unwrap()
    })
}

/// An MPA Initiator in ns a that sends `count` RDMA Writes of `len` octets to `stag` (one
/// after the other from offset 0, `rdma_write`'s pattern), closes its sending side and reads
/// until the datapath closes too (each wait bounded at 20 s); the outcome on join.
pub fn writes_from_a(
    bed: &TestBed,
    addr: SocketAddr,
    stag: u32,
    count: u64,
    len: usize,
) -> JoinHandle<Result<(), EndpointError>> {
    let mut cfg = EndpointConfig::default();
    cfg.policy.startup_timeout = Duration::from_secs(20);
    initiator_in_a(bed, addr, cfg, move |_, s| {
        let mut s = s?;
        for i in 0..count {
            s.send(&crate::frames::rdma_write(stag, i * len as u64, len))?;
        }
        s.flush()?;
        s.get_ref()
            .shutdown(std::net::Shutdown::Write)
            .map_err(EndpointError::from)?;
        loop {
            match s.recv_with(Some(Duration::from_secs(20)), |_| {}) {
                Ok(Some(_)) => continue,
                other => return other.map(|_| ()),
            }
        }
    })
}

/// An MPA Responder in ns a on `bind`, on a thread: accepts one connection with `cfg` and
/// gives `f` the outcome.
pub fn responder_in_a<T: Send + 'static>(
    bed: &TestBed,
    bind: SocketAddr,
    cfg: EndpointConfig,
    f: impl FnOnce(Result<MpaStream<TcpStream>, EndpointError>) -> T + Send + 'static,
) -> JoinHandle<T> {
    let listener = listen_in(&bed.ns_a, bind);
    std::thread::spawn(move || {
        let (sock, _) = listener.accept().unwrap();
        f(MpaStream::accept(sock, &cfg))
    })
}

/// The datapath's statistics, asked for on `dpc`.
pub fn stats(dpc: &mut DatapathClient) -> DatapathStats {
    mpa_harness::datapath::stats(dpc).expect("statistics from the datapath")
}

/// Waits for the datapath's next notification on `dpc`: it must say that flow `flow_id` is
/// gone without an MPA error.
pub fn gone_cleanly(dpc: &mut DatapathClient, flow_id: u64) {
    match dpc.next_notification().expect("a notification") {
        mpa_ctl_proto::Message::FlowGone {
            flow_id: id,
            mpa_error: None,
            ..
        } => assert_eq!(id, flow_id),
        m => panic!("flow {flow_id}: {m:?}"),
    }
}

/// The final counters the datapath kept for the ended flow `flow_id`.
pub fn ended_flow(dpc: &mut DatapathClient, flow_id: u64) -> FlowReport {
    let s = stats(dpc);
    s.ended_flow(flow_id)
        .unwrap_or_else(|| panic!("flow {flow_id} not among the ended flows: {s:?}"))
        .clone()
}

/// The final counters of flow `flow_id` once the datapath behind `socket` reports it ended,
/// asked for every 50 ms for at most `timeout`.
pub fn wait_ended_flow(socket: &std::path::Path, flow_id: u64, timeout: Duration) -> FlowReport {
    let t0 = std::time::Instant::now();
    loop {
        let mut dpc =
            DatapathClient::connect(socket, Duration::from_secs(5)).expect("reach the datapath");
        if let Some(f) = stats(&mut dpc).ended_flow(flow_id) {
            return f.clone();
        }
        assert!(
            t0.elapsed() < timeout,
            "flow {flow_id} not ended within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `mpa-peer listen` in ns a for one connection; killed when dropped.
pub struct PeerListener {
    child: Child,
}

impl PeerListener {
    /// Starts it with `args` after `listen --bind BIND --connections 1`; ready once it says
    /// it listens.
    pub fn start(bed: &TestBed, bind: SocketAddr, args: &[&str]) -> PeerListener {
        let mut child = bed
            .command(&bed.ns_a, &bin("mpa-peer").to_string_lossy())
            .args(["listen", "--bind", &bind.to_string(), "--connections", "1"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        assert!(line.contains("listening on"), "mpa-peer: {line}");
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = err.read_to_string(&mut rest);
            if !rest.is_empty() {
                eprint!("mpa-peer stderr: {rest}");
            }
        });
        PeerListener { child }
    }

    /// Waits (bounded) for the exit; returns the connection's JSON report.
    pub fn report(mut self, within: Duration) -> Value {
        let t0 = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(t0.elapsed() < within, "mpa-peer listen did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let line = out.lines().next().expect("no report line from mpa-peer");
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }
}

impl Drop for PeerListener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
