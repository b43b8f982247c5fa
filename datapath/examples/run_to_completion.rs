//! Run-to-completion (docs/latency.md): this program is the datapath and its application in
//! one thread. It starts the datapath on an interface with no worker thread, takes the
//! queue's driver, connects to an MPA echo server (`mpa-peer listen --echo`) as Initiator
//! and hands the connection over, then plays RDMA Write ping-pong: post a Write, turn the
//! queue until the echo's Write is placed, again — posts, AF_XDP rings, TCP, MPA, placement
//! and completions all in the one loop. At the end it checks the echoed octets, closes the
//! connection and prints the round trips. With `--sleep-when-idle` the loop sleeps in the
//! kernel whenever a poll finds nothing, instead of spinning.
//!
//! ```text
//! mpa-peer listen --echo --bind 10.0.0.1:7000 --advertise 0xec0001:4074 --rev 2 --markers &
//! run_to_completion --iface veth0 --connect 10.0.0.1:7000 --size 4096
//! ```
//!
//! The echo server's advertised region (in its Reply) must hold `--size` − 14 octets (the
//! Write's payload).
//! Exit status: 0 when every echo came back intact, 1 on a runtime failure, 2 on a usage
//! error. Every wait is bounded.

use clap::Parser;
use mpa::startup::StartupPolicy;
use mpa::wire::ddp::TAGGED_HEADER_LEN;
use mpa_app::Consumer;
use mpa_control::datapath_client::DatapathClient;
use mpa_control::initiator::{connect_and_hand_over, InitiatorOutcome};
use mpa_control::Placement;
use mpa_ctl_proto::region_ad::RegionAd;
use mpa_ctl_proto::{Completion, CompletionKind};
use mpa_datapath::io::xsk::XskConfig;
use mpa_datapath::server::{Datapath, DatapathConfig};
use mpa_datapath::worker::{PostOp, QueueDriver, SgList, WorkRequest};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(about = "RDMA Write ping-pong from a run-to-completion datapath")]
struct Args {
    /// Interface to serve (its queue 0).
    #[arg(long)]
    iface: String,
    /// The echo server.
    #[arg(long)]
    connect: SocketAddr,
    /// ULPDU octets of each Write (its 14-octet tagged DDP header included).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(15..=65536))]
    size: u64,
    /// Round trips.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    iterations: u64,
    /// Markers in both directions.
    #[arg(long)]
    markers: bool,
    /// Sleep in the kernel whenever a poll finds nothing, instead of spinning (for a thread
    /// that shares its core).
    #[arg(long)]
    sleep_when_idle: bool,
    /// The datapath's control socket (created; this program's own consumer connects to it).
    #[arg(long, default_value = "/tmp/mpa-run-to-completion.sock")]
    socket: PathBuf,
}

/// Our protection domain.
const PD: u32 = 1;
/// Each wait for an echo, the hand-over and the close.
const WAIT: Duration = Duration::from_secs(10);

type Failure = Box<dyn std::error::Error + Send + Sync>;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("run_to_completion: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &Args) -> Result<(), Failure> {
    let mut dp = Datapath::start(DatapathConfig {
        iface: a.iface.clone(),
        queues: 1,
        xdp_mode: mpa_bpf::AttachMode::Driver,
        xsk: XskConfig::default(),
        socket: a.socket.clone(),
        digest: false,
        tcp: Default::default(),
        verify_checksums: true,
        chains_in_pieces: true,
        streaming_stores: Default::default(),
        pin_cpus: false,
        max_region_bytes: mpa_datapath::server::DEFAULT_MAX_REGION_BYTES,
        max_control_clients: mpa_datapath::server::DEFAULT_MAX_CONTROL_CLIENTS,
        control_deadlines: Default::default(),
        completion_ring: mpa_datapath::server::DEFAULT_COMPLETION_RING,
        spin: Duration::ZERO,
        yield_every: mpa_datapath::worker::DEFAULT_YIELD_EVERY,
        worker_deadline: mpa_datapath::server::DEFAULT_WORKER_DEADLINE,
        memory_budget: None,
        caller_drives_queues: true,
        queue_steering: Default::default(),
    })?;
    let mut driver = dp
        .take_queue_drivers()
        .pop()
        .ok_or("the datapath gave no queue driver")?;
    if a.sleep_when_idle {
        driver.set_sleep_after(Some(Duration::ZERO));
    }
    let r = ping_pong(a, &mut driver);
    drop(driver);
    dp.stop();
    r
}

fn ping_pong(a: &Args, driver: &mut QueueDriver) -> Result<(), Failure> {
    let payload = a.size - TAGGED_HEADER_LEN as u64;
    // Regions and the subscription are control requests: the datapath's control thread
    // answers them without the queue.
    let mut consumer = Consumer::connect(&a.socket, WAIT)?;
    let src = consumer.create_region(payload, PD, false, false)?;
    let sink = consumer.create_region(payload, PD, true, false)?;
    consumer.subscribe(PD)?;
    let sent: Vec<u8> = (0..payload as usize).map(|i| (i * 7 + 3) as u8).collect();
    if !src.write(0, &sent) {
        return Err("cannot fill the source region".into());
    }
    let ad = RegionAd {
        writes: true,
        sends: false,
        stag: sink.info().stag,
        len: payload,
        base_to: 0,
        recv_buf_size: 0,
    };
    let policy = StartupPolicy {
        revision: 2,
        accept_rev2: true,
        markers_required: a.markers,
        startup_timeout: WAIT,
        ..StartupPolicy::default()
    };
    // The hand-over is answered by the queue's worker: it is turned meanwhile.
    let (to, private_data) = (a.connect, ad.emit().to_vec());
    let socket = a.socket.clone();
    let outcome = driver.poll_while(move || -> Result<InitiatorOutcome, Failure> {
        let mut dpc = DatapathClient::connect(&socket, WAIT)?;
        let placement = Placement {
            pd: Some(PD),
            aligned_sender: false,
            conn_id: None,
        };
        Ok(connect_and_hand_over(
            to,
            policy,
            private_data,
            placement,
            &mut dpc,
        )?)
    })??;
    let InitiatorOutcome::HandedOver {
        flow_id,
        frozen,
        negotiated,
    } = outcome
    else {
        return Err(format!("{} rejected the connection", a.connect).into());
    };
    // Where the echo server lets us write: its Reply's advertisement.
    let echo = RegionAd::parse(&negotiated.peer_private_data)?
        .ok_or("the echo server advertised no region")?;
    if echo.len < payload {
        return Err(format!(
            "the echo server's region holds {} octets, not {payload}",
            echo.len
        )
        .into());
    }
    let post = WorkRequest {
        flow_id,
        op: PostOp::Write {
            sink_stag: echo.stag,
            sink_to: echo.base_to,
        },
        sg_list: SgList::one(src.info().stag, 0, payload),
        count: 1,
        wr_id: 0,
        signaled: true,
        solicited: false,
        fence: false,
    };
    let mut rtts = Vec::with_capacity(a.iterations as usize);
    let mut batch: Vec<Completion> = Vec::with_capacity(64);
    for i in 0..a.iterations {
        let t0 = Instant::now();
        driver.post(&post)?;
        let mut placed = false;
        while !placed {
            driver.poll()?;
            batch.clear();
            consumer.poll_completions(&mut batch)?;
            for c in &batch {
                match c.kind {
                    CompletionKind::WritePlaced if c.stag == sink.info().stag => {
                        if c.len != payload {
                            return Err(format!("iteration {i}: echo of {} octets", c.len).into());
                        }
                        placed = true;
                    }
                    CompletionKind::WriteSent => {}
                    _ => return Err(format!("iteration {i}: unexpected {c:?}").into()),
                }
            }
            if !placed && t0.elapsed() > WAIT {
                return Err(format!("iteration {i}: no echo within {WAIT:?}").into());
            }
        }
        rtts.push(t0.elapsed());
    }
    if sink.to_vec() != sent {
        return Err("the echoed octets differ from those sent".into());
    }
    // Our FIN, and the server's, go through the queue: turned until the flow is gone.
    consumer.finish_flow(flow_id)?;
    let t0 = Instant::now();
    while driver.flows() > 0 {
        driver.poll()?;
        if t0.elapsed() > WAIT {
            return Err(format!("the connection did not close within {WAIT:?}").into());
        }
    }
    drop(frozen);
    rtts.sort_unstable();
    let half_us = |q: f64| {
        let i = ((rtts.len() - 1) as f64 * q).round() as usize;
        rtts[i].as_secs_f64() * 1e6 / 2.0
    };
    println!(
        "echo verified: {} round trips of {} octets; RTT/2 p50 {:.2} µs, p99 {:.2} µs; \
         the thread slept {} times",
        rtts.len(),
        a.size,
        half_us(0.5),
        half_us(0.99),
        driver.report().ring.rx_waits
    );
    Ok(())
}
