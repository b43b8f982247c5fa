//! `setup` (formerly `scale`): many connections at once through `mpa-control serve`, handed
//! over to one datapath, each carrying an FPDU, then all closed. Measures hand-overs per
//! second and the hand-over latency of each connection: from the Initiator's `connect()` to
//! its receipt of the MPA Reply, which the datapath sends once the connection is handed over
//! (TCP handshake, MPA Request, freeze, hand-over, Reply).

use crate::bed::options::PORT;
use crate::report::document::{SetupParams, SetupRecord};
use crate::report::Document;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use hdrhistogram::Histogram;
use mpa::wire::ddp::{DdpRepr, RdmapOpcode};
use mpa_control::datapath_client::DatapathClient;
use mpa_ctl_proto::stats::FlowReport;
use mpa_harness::datapath::{start_datapath, stats, temp_path, DatapathOptions};
use mpa_harness::sibling;
use mpa_testbed::{run_in_netns, BedConfig, TestBed};
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// `setup`'s options.
#[derive(Args, Clone, Debug)]
pub struct SetupArgs {
    /// Connections to hand over and keep open.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) connections: usize,
    /// Initiator threads connecting in parallel (in ns a).
    #[arg(long, default_value_t = 32)]
    pub(crate) parallel: usize,
    /// Print the one JSON document on stdout (the summary goes to stderr).
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// What `setup` measured.
pub(crate) struct SetupResult {
    pub(crate) connections: usize,
    pub(crate) parallel: usize,
    pub(crate) seconds: f64,
    /// Hand-over latency, µs.
    pub(crate) latency: Histogram<u64>,
    pub(crate) rss_mib: f64,
    pub(crate) close_seconds: f64,
}

impl SetupResult {
    pub(crate) fn handovers_per_s(&self) -> f64 {
        self.connections as f64 / self.seconds.max(1e-9)
    }

    /// The document (docs/benchmarks.md, "JSON").
    pub(crate) fn document(&self) -> Document {
        let ms = |q: f64| self.latency.value_at_quantile(q) as f64 / 1000.0;
        Document::Setup {
            params: SetupParams {
                connections: self.connections,
                parallel: self.parallel,
            },
            results: vec![SetupRecord {
                connections: self.connections,
                parallel: self.parallel,
                seconds: self.seconds,
                handovers_per_s: self.handovers_per_s(),
                min_ms: self.latency.min() as f64 / 1000.0,
                p50_ms: ms(0.5),
                p90_ms: ms(0.9),
                p99_ms: ms(0.99),
                p999_ms: ms(0.999),
                max_ms: self.latency.max() as f64 / 1000.0,
                rss_mib: self.rss_mib,
                close_seconds: self.close_seconds,
            }],
        }
    }

    /// One line of text.
    pub fn line(&self) -> String {
        let ms = |q: f64| self.latency.value_at_quantile(q) as f64 / 1000.0;
        format!(
            "{} connections handed over in {:.2} s by {} initiator threads ({:.0} hand-overs/s); \
             hand-over latency p50 {:.2} ms p90 {:.2} ms p99 {:.2} ms max {:.2} ms; process RSS \
             with all open {:.0} MiB; all closed cleanly in {:.1} s",
            self.connections,
            self.seconds,
            self.parallel,
            self.handovers_per_s(),
            ms(0.5),
            ms(0.9),
            ms(0.99),
            self.latency.max() as f64 / 1000.0,
            self.rss_mib,
            self.close_seconds
        )
    }
}

/// `mpa-bench setup` (alias `scale`): prints `setup: OK …` (stderr with `--json`, the
/// document on stdout).
pub fn run_cli(s: &SetupArgs) -> Result<()> {
    let r = setup(s)?;
    let line = format!(
        "setup: OK {} concurrent connections, {:.0} hand-overs/s\n{}",
        r.connections,
        r.handovers_per_s(),
        r.line()
    );
    crate::report::line(s.json, &line);
    if s.json {
        crate::report::print(&r.document())?;
    }
    Ok(())
}

/// Runs `setup`: the datapath in ns b (in this process), `mpa-control serve` (child, ns b),
/// `connections` MPA Initiators in ns a (threads). Measures the hand-over rate, checks that
/// every connection carries an FPDU through the datapath, then closes them all.
pub(crate) fn setup(s: &SetupArgs) -> Result<SetupResult> {
    let n = s.connections;
    if n == 0 || s.parallel == 0 {
        mpa_cli::usage!("--connections and --parallel must be at least 1");
    }
    // Descriptors: the Initiators' sockets here, the frozen ones in the daemon (which
    // inherits the limit); each process holds about `n`.
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let want = (n + 2048) as u64;
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if hard < want {
        bail!("{n} connections need {want} descriptors per process; the hard limit is {hard}");
    }
    setrlimit(Resource::RLIMIT_NOFILE, want, hard).context("raise RLIMIT_NOFILE")?;
    let bed = TestBed::up(BedConfig {
        loss_port: PORT,
        ..BedConfig::default()
    })?;
    let socket = temp_path("scale.sock");
    let opts = DatapathOptions {
        digest: false,
        ..DatapathOptions::default()
    };
    let dp = start_datapath(&bed, &socket, &opts)?;
    let addr = SocketAddr::new(bed.addr_b(false), PORT);
    let config = temp_path("scale.toml");
    std::fs::write(
        &config,
        format!(
            // Every connection comes from the one sender host.
            "datapath_socket = {:?}\nmax_connections = {n}\nmax_connections_per_source = {n}\n\n\
             [[listener]]\nbind = \"{addr}\"\n",
            socket.to_string_lossy(),
            n = n + 64
        ),
    )?;
    let mut daemon = bed
        .command(&bed.ns_b, &sibling("mpa-control")?.to_string_lossy())
        .args(["serve", "--config", &config.to_string_lossy()])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .context("start mpa-control serve")?;
    let result = setup_run(&bed, s, addr, &socket);
    let _ = daemon.kill();
    let _ = daemon.wait();
    let _ = std::fs::remove_file(&config);
    dp.stop();
    result
}

fn setup_run(
    bed: &TestBed,
    s: &SetupArgs,
    addr: SocketAddr,
    socket: &std::path::Path,
) -> Result<SetupResult> {
    use mpa::endpoint::{EndpointConfig, MpaStream};
    use std::net::TcpStream;
    let n = s.connections;
    // Wait for the daemon's listener.
    let t_wait = Instant::now();
    loop {
        let up = run_in_netns(&bed.ns_a, move || {
            TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
        })?;
        if up {
            break;
        }
        if t_wait.elapsed() > Duration::from_secs(10) {
            bail!("mpa-control serve is not listening on {addr}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The probe above was refused by nothing but counted as a failed setup: let it end.
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let per = n.div_ceil(s.parallel);
    let mut handles = Vec::new();
    for t in 0..s.parallel {
        let count = per.min(n.saturating_sub(t * per));
        let ns_a = bed.ns_a.clone();
        handles.push(std::thread::spawn(move || {
            run_in_netns(
                &ns_a,
                move || -> Result<(Vec<MpaStream<TcpStream>>, Vec<f64>)> {
                    let mut cfg = EndpointConfig::default();
                    cfg.policy.startup_timeout = Duration::from_secs(30);
                    let mut streams = Vec::with_capacity(count);
                    let mut lat = Vec::with_capacity(count);
                    for _ in 0..count {
                        let c0 = Instant::now();
                        let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(30))?;
                        sock.set_nodelay(true)?;
                        // Returns once the datapath sent the Reply: the hand-over is complete.
                        let st = MpaStream::connect(sock, &cfg)?;
                        lat.push(c0.elapsed().as_secs_f64());
                        streams.push(st);
                    }
                    Ok((streams, lat))
                },
            )?
        }));
    }
    let mut streams = Vec::with_capacity(n);
    let mut lat = Vec::with_capacity(n);
    for h in handles {
        let (st, l) = h
            .join()
            .map_err(|_| anyhow!("initiator thread panicked"))??;
        streams.extend(st);
        lat.extend(l);
    }
    let setup_secs = t0.elapsed().as_secs_f64();
    // 1 µs .. 10 min, 3 significant digits.
    let mut latency = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    for l in &lat {
        latency.saturating_record(((l * 1e6) as u64).max(1));
    }
    let mut dpc = DatapathClient::connect(socket, Duration::from_secs(60))?;
    let flows_of = |dpc: &mut DatapathClient| -> Result<Vec<FlowReport>> {
        Ok(stats(dpc)?.live_flows().map(|(_, f)| f.clone()).collect())
    };
    // The statistics come in pages (docs/consumer.md, "Statistics in pages"): each flow must
    // be listed once.
    let listed = flows_of(&mut dpc)?;
    let live = (listed.iter().map(|f| f.flow_id)).collect::<std::collections::HashSet<_>>();
    if listed.len() != n || live.len() != n {
        bail!(
            "{} flows listed ({} distinct) by the datapath, {n} expected",
            listed.len(),
            live.len()
        );
    }
    // Every connection carries one FPDU (a 64-octet RDMA Write) through the datapath.
    let ulpdu = {
        let mut v = vec![0u8; 64];
        DdpRepr::Tagged {
            last: true,
            opcode: RdmapOpcode::RdmaWrite,
            stag: 1,
            to: 0,
        }
        .emit(&mut v, 1);
        v
    };
    for st in streams.iter_mut() {
        st.send(&ulpdu)?;
        st.flush()?;
    }
    let t_data = Instant::now();
    let carried = loop {
        let flows = flows_of(&mut dpc)?;
        let carried = flows.iter().filter(|f| f.rx.fpdus == 1).count();
        if carried == n || t_data.elapsed() > Duration::from_secs(30) {
            break carried;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let rss_mib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0);
    if carried != n {
        bail!("{carried} of {n} connections carried their FPDU through the datapath");
    }
    // Close them all: every flow must end cleanly.
    let t_close = Instant::now();
    for st in &streams {
        let _ = st.get_ref().shutdown(std::net::Shutdown::Write);
    }
    let left = loop {
        let left = flows_of(&mut dpc)?.len();
        if left == 0 || t_close.elapsed() > Duration::from_secs(60) {
            break left;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    drop(streams);
    if left != 0 {
        bail!("{left} flows still open 60 s after their peers closed");
    }
    Ok(SetupResult {
        connections: n,
        parallel: s.parallel,
        seconds: setup_secs,
        latency,
        rss_mib,
        close_seconds: t_close.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_has_rate_and_percentiles() {
        let mut latency = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).unwrap();
        for us in 1..=100u64 {
            latency.record(us * 1000).unwrap(); // 1 .. 100 ms
        }
        let r = SetupResult {
            connections: 100,
            parallel: 4,
            seconds: 0.5,
            latency,
            rss_mib: 10.0,
            close_seconds: 1.0,
        };
        let v = serde_json::to_value(r.document()).unwrap();
        crate::report::check_shape(&v).unwrap();
        let x = &v["results"][0];
        assert_eq!(x["handovers_per_s"], 200.0);
        assert!((x["p50_ms"].as_f64().unwrap() - 50.0).abs() < 0.1, "{x}");
        assert!((x["p99_ms"].as_f64().unwrap() - 99.0).abs() < 0.1, "{x}");
        assert!((x["max_ms"].as_f64().unwrap() - 100.0).abs() < 0.1, "{x}");
        assert!(r.line().contains("(200 hand-overs/s)"));
    }
}
