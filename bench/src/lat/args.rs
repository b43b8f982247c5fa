//! `mpa-bench lat`'s options and the parameters its document records.

use crate::bed::options::{
    Align, BedArgs, DatapathMode, FramingArgs, Op, PostVia, Run, TransferArgs,
};
use crate::report::document::LatParams;
use clap::Args;
use mpa_datapath::server::Datapath;
use mpa_datapath::worker::QueueDriver;
use std::path::PathBuf;
use std::time::Duration;

/// `mpa-bench lat`'s options. On real NICs (`--iface`), the sender's stamps are the peer
/// host's CLOCK_MONOTONIC: one-way latency then measures the offset between the two clocks
/// through a clock responder on the peer (`--clock-port`, `--clock-probes`,
/// `--max-clock-error-us`; docs/latency.md, "Two hosts") and corrects every sample by it.
#[derive(Args, Clone, Debug)]
pub struct LatArgs {
    /// ULPDU sizes (DDP header included; 4096 or 4K; at least 22, at most 64768).
    #[arg(
        short = 's',
        long,
        value_delimiter = ',',
        default_values_t = [64usize, 1024, 4096, 16384],
        value_parser = mpa_cli::size::<usize>
    )]
    pub(crate) sizes: Vec<usize>,
    /// Messages per size, side and round (as perftest's -n).
    #[arg(short = 'n', long, default_value_t = 20_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) messages: u64,
    /// The sender's pacing, messages per second (0: unpaced; queues then build up).
    #[arg(long, default_value_t = 10_000)]
    pub(crate) rate: u64,
    /// Rounds; each runs every size on the kernel side, then on the datapath.
    #[arg(long, default_value_t = 3)]
    pub(crate) rounds: u32,
    #[command(flatten)]
    pub(crate) bed: BedArgs,
    #[command(flatten)]
    pub(crate) framing: FramingArgs,
    /// Where the `.hgrm` percentile distributions go (one per side and size).
    #[arg(long, default_value_os_t = crate::report::default_out("lat"))]
    pub(crate) out: PathBuf,
    /// Print the one JSON document on stdout (the table goes to stderr).
    #[arg(short = 'J', long)]
    pub json: bool,
    /// The datapath's modes, each measured beside kernel TCP in the same run
    /// (docs/latency.md): `sleep` (worker threads that sleep when idle, the datapath's
    /// default), `spin` (worker threads that keep polling `--spin-us` after their last frame),
    /// `rtc` (run-to-completion: the measuring thread turns the queue itself, no worker
    /// thread, no control-socket request per post), `rtc-sleep` (the same, its thread
    /// sleeping in the kernel as soon as a poll finds nothing: for a thread that shares its
    /// core); with `--pingpong` also `c-api` (the C ping-pong, `examples/c/write_pingpong.c`,
    /// compiled at the start of the run against libmpaxdp, as the application in a process
    /// of its own; workers as in `sleep`) and `rust-app` (its Rust twin, the same way).
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["sleep", "spin", "rtc"])]
    pub(crate) modes: Vec<DatapathMode>,
    /// In the `sleep` and `spin` modes, the consumer busy-polls its completion ring instead
    /// of sleeping on the ring's eventfd until the worker wakes it (in `c-api` and `rust-app`
    /// the example, with `--busy-poll`): it then needs a core of
    /// its own, which a 2-core bed that also runs the peer, the worker and the kernel's veth
    /// work does not have.
    #[arg(long)]
    pub(crate) consumer_busy_poll: bool,
    /// In the `spin` mode, how long the workers keep polling after their last frame before
    /// they may sleep, µs (`mpa-datapath --spin-us`).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) spin_us: u64,
    /// While the datapath's workers spin (every mode), and while a busy-polling consumer
    /// spins, each offers its core to other runnable threads every this many empty polls
    /// (`mpa-datapath --spin-yield-polls`; 0: never).
    #[arg(long, default_value_t = mpa_datapath::worker::DEFAULT_YIELD_EVERY, value_name = "POLLS")]
    pub(crate) spin_yield_polls: u32,
    /// Preferred busy polling on the datapath's AF_XDP sockets, every mode: `SO_PREFER_BUSY_POLL`
    /// with `SO_BUSY_POLL` of this many µs and a budget of 64 (`mpa-datapath --busy-poll-us`;
    /// 0: off).
    #[arg(long, default_value_t = 0)]
    pub(crate) busy_poll_us: u32,
    /// Every receiver gets MTU-sized segments, as from a NIC: the kernel sender's veth
    /// without TSO (attaching XDP to a veth turns its peer's TSO off, so only the kernel
    /// receiver would otherwise get whole messages as one GSO packet) and the kernel
    /// receiver's veth with GRO on. A diagnostic of where a gap lies. Direct veth bed only.
    #[arg(long)]
    pub(crate) wire_segments: bool,
    /// With `--pingpong`, how the process modes' consumer posts each Write: `shm` (the
    /// subscription's shared-memory post queue: no system call unless the worker sleeps) or
    /// `control` (a `Post` request over the control socket, answered by the worker).
    #[arg(long, value_enum, default_value = "shm")]
    pub(crate) post_via: PostVia,
    /// RDMA Write ping-pong instead (perftest `ib_write_lat` style, RTT/2): the kernel
    /// `mpa-peer listen --echo` answers both a kernel-TCP Initiator and the datapath's
    /// (docs/benchmarks.md, "lat"); `--messages` iterations, `--rate` unused. Round trips
    /// need no common clock.
    #[arg(long)]
    pub(crate) pingpong: bool,
    /// With `--pingpong`: the fairness check.
    ///
    /// With `--pingpong`: the fairness check. Each process-mode ping-pong runs twice per
    /// round, alone and beside a neighbour that keeps the post queues of DOMAINS domains of
    /// its own full of posts the datapath refuses (Writes on the ping-pong's connection,
    /// which is not in its domains); prints both and the ratio of their p99 (docs/limits.md,
    /// "Posts").
    #[arg(long, value_name = "DOMAINS", requires = "pingpong", conflicts_with = "json",
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) flood_neighbour: Option<u32>,
    #[command(flatten)]
    pub(crate) clock: ClockArgs,
}

/// One-way `lat` on two hosts: how the peer host's clock is measured (docs/latency.md, "Two
/// hosts"). Only with --iface; not with --pingpong, whose round trips need no common clock.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct ClockArgs {
    /// The UDP port of the clock responder (`mpa-peer clock`) that one-way `lat` starts on the
    /// peer host through --peer-exec, to measure the offset between the hosts' clocks before
    /// and after every run. On the private bed both ends share one clock and nothing is
    /// measured.
    #[arg(
        long,
        default_value_t = 7778,
        value_name = "PORT",
        requires = "iface",
        conflicts_with = "pingpong"
    )]
    pub(crate) clock_port: u16,
    /// Probes per clock measurement; the exchange with the smallest delay gives the offset.
    #[arg(
        long,
        default_value_t = 200,
        value_name = "N",
        requires = "iface",
        conflicts_with = "pingpong",
        value_parser = clap::value_parser!(u32).range(1..=100_000)
    )]
    pub(crate) clock_probes: u32,
    /// The largest error bound of a clock measurement that one-way latency accepts, µs (half
    /// the best probe exchange's delay): every sample is only that exact. Above it the
    /// experiment fails: past 50 µs, several times a LAN's one-way latency, the samples
    /// would be mostly clock error.
    #[arg(
        long,
        default_value_t = 50.0,
        value_name = "US",
        requires = "iface",
        conflicts_with = "pingpong",
        value_parser = positive_us
    )]
    pub(crate) max_clock_error_us: f64,
}

impl Default for ClockArgs {
    /// The command line's defaults.
    fn default() -> Self {
        ClockArgs {
            clock_port: 7778,
            clock_probes: 200,
            max_clock_error_us: 50.0,
        }
    }
}

/// A bound in µs: a finite number above 0.
fn positive_us(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err(format!("{s:?}: must be more than 0 µs")),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
}

impl LatArgs {
    /// The run-to-completion modes turn one queue from the measuring thread: any other
    /// queue count is a usage error.
    pub(crate) fn require_one_queue_for_run_to_completion(&self) -> anyhow::Result<()> {
        if self.modes.iter().any(|m| m.runs_to_completion()) && self.bed.queues != 1 {
            mpa_cli::usage!(
                "--modes rtc and rtc-sleep turn one queue from the measuring thread: --queues 1"
            );
        }
        Ok(())
    }

    /// In a run-to-completion `mode`, `dp`'s queue driver, yielding as `--spin-yield-polls`
    /// says and, in `rtc-sleep`, sleeping whenever a poll finds nothing; `None` otherwise.
    pub(crate) fn queue_driver(
        &self,
        dp: &mut Datapath,
        mode: DatapathMode,
    ) -> Option<QueueDriver> {
        let mut driver = dp.take_queue_drivers().into_iter().next()?;
        driver.set_yield_every(self.spin_yield_polls);
        if mode == DatapathMode::RtcSleep {
            driver.set_sleep_after(Some(Duration::ZERO));
        }
        Some(driver)
    }
    /// The transfer of one size in `mode`, as the other experiments describe it.
    pub(crate) fn run(&self, size: usize, mode: DatapathMode) -> Run {
        Run {
            transfer: TransferArgs {
                duration: None,
                interval: None,
                bytes: self.messages * size as u64,
                op: Op::Write,
                region_bytes: 16 << 20,
                align: Align::Off,
                connections: 1,
                rcv_buf: None,
                ooo_ack_every: None,
                spin_us: if mode == DatapathMode::Spin {
                    self.spin_us
                } else {
                    0
                },
                sender_cc: None,
            },
            size,
            bed: self.bed.clone(),
            framing: self.framing,
            json: false,
        }
    }

    /// The datapath's AF_XDP socket settings.
    pub(crate) fn xsk(&self) -> mpa_datapath::io::xsk::XskConfig {
        let d = mpa_harness::datapath::DatapathOptions::default().xsk;
        mpa_datapath::io::xsk::XskConfig {
            busy_poll: (self.busy_poll_us > 0).then_some(mpa_datapath::io::xsk::BusyPoll {
                usecs: self.busy_poll_us,
                budget: 64,
            }),
            ..d
        }
    }

    pub(crate) fn sender_args(&self) -> Vec<String> {
        vec![
            "--timestamps".into(),
            "--rate".into(),
            self.rate.to_string(),
        ]
    }

    /// The document's parameters (the bed's only where it is not the default one).
    pub(crate) fn params(&self) -> LatParams {
        let bed = &self.bed;
        LatParams {
            sizes: self.sizes.clone(),
            messages: self.messages,
            rate: self.rate,
            rounds: self.rounds,
            mtu: bed.mtu,
            consumer_busy_poll: self.consumer_busy_poll,
            spin_us: self.spin_us,
            spin_yield_polls: self.spin_yield_polls,
            modes: self.modes.clone(),
            post_via: self.pingpong.then_some(self.post_via),
            wire_segments: self.wire_segments,
            busy_poll_us: self.busy_poll_us,
            framing: self.framing.framing(),
            pingpong: self.pingpong,
            loss_percent: (bed.loss > 0).then_some(bed.loss),
            impair: bed.impair.as_ref().map(|i| format!("{i:?}")),
            queues: (bed.queues != 1).then_some(bed.queues),
            split_cpus: bed.split_cpus,
            iface: bed.nic.iface.clone(),
            peer: bed.nic.peer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        lat: LatArgs,
    }

    fn parse(args: &[&str]) -> Result<LatArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("lat").chain(args.iter().copied())).map(|c| c.lat)
    }

    #[test]
    fn the_clock_options_default_and_belong_to_two_hosts() {
        // The defaults of the command line are ClockArgs::default(), also on the private bed
        // (where they are not used), and with --pingpong.
        for args in [&[][..], &["--pingpong"]] {
            assert_eq!(parse(args).unwrap().clock, ClockArgs::default());
        }
        let d = ClockArgs::default();
        assert_eq!(
            (d.clock_port, d.clock_probes, d.max_clock_error_us),
            (7778, 200, 50.0)
        );
        let two = ["--iface", "eth0", "--peer", "192.0.2.1"];
        let a = parse(
            &[
                &two[..],
                &["--clock-port", "9", "--max-clock-error-us", "2.5"],
            ]
            .concat(),
        )
        .unwrap();
        assert_eq!((a.clock.clock_port, a.clock.max_clock_error_us), (9, 2.5));
        for bad in [
            &["--clock-port", "9"][..],
            &[&two[..], &["--pingpong", "--clock-port", "9"]].concat(),
            &[&two[..], &["--clock-probes", "0"]].concat(),
            &[&two[..], &["--max-clock-error-us", "-1"]].concat(),
            &[&two[..], &["--max-clock-error-us", "inf"]].concat(),
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
