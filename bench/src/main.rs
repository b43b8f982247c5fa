//! `mpa-bench`: whole experiments on a private namespace test bed (the building blocks are in
//! the library). Every experiment with a kernel counterpart runs the AF_XDP datapath and the
//! blocking kernel-TCP Responder on the same bed with the same sender, rounds alternating.
//!
//! * `demo`: one transfer through the datapath, checked byte for byte; last line `demo: OK …`
//!   or `demo: FAILED …`.
//! * `bw` (alias `compare`): goodput, spread and whole-system CPU per octet.
//! * `lat`: one-way latency per message, percentiles per size and `.hgrm` files.
//! * `pipeline`: the receive pipeline alone (`Worker<MemRing>`, frames prepared in memory).
//! * `setup` (alias `scale`): hand-overs per second and hand-over latency, N connections.
//! * `hostile`: hostile-input classes against the live datapath beside a bystander; last line
//!   `hostile: N/N classes as specified; bystander octet-exact`.
//! * `suite`: `make bench`'s standard set: summary, JSON, plots, `.hgrm` files.
//! * `soak`: one datapath for minutes under waves of connections; memory and descriptors.
//! * `ab`: an old build against a new one, any experiment, rounds alternating.
//! * `ack-timing`: from a capture, how soon each data segment was reported by an ACK.
//!
//! `--json` (`-J`) prints one JSON document on stdout (`{"scenario", "params", "results",
//! "ok": true}`; `demo`'s every measured value; docs/benchmarks.md, "JSON"), also when the run
//! fails (`{"scenario", "error", "ok": false}`); the human text then goes to stderr. Exit
//! codes: 0 done, 1 failed at run time, 2 a usage error.
#![forbid(unsafe_code)]
// Results go through `mpa_cli::outln!`: a closed stdout must end the run quietly, not panic.
#![deny(clippy::print_stdout)]

use clap::{Parser, Subcommand};
use mpa_bench::bw::BwArgs;
use mpa_bench::suite::SuiteArgs;
use mpa_bench::{bw, demo, lat, pipeline, report, setup, LatArgs, PipelineArgs, Run, SetupArgs};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "mpa-bench",
    version,
    about = "mpa-xdp experiments on a namespace test bed"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// One transfer through the datapath, checked byte for byte.
    Demo(Run),
    /// Goodput and CPU per octet, datapath vs kernel TCP.
    ///
    /// Goodput and CPU per octet: datapath vs the blocking kernel-TCP Responder, same bed and
    /// sender, rounds alternating; median and min–max.
    #[command(alias = "compare")]
    Bw(BwArgs),
    /// One-way latency (or --pingpong round trips), datapath vs kernel TCP.
    ///
    /// One-way latency per message: datapath vs the blocking kernel-TCP Responder, same bed
    /// and paced sender; percentiles per size, `.hgrm` files.
    Lat(LatArgs),
    /// Connection setup: hand-overs per second and their latency.
    ///
    /// Many connections at once through `mpa-control serve`: hand-overs per second and
    /// hand-over latency percentiles; all carry data.
    #[command(alias = "scale")]
    Setup(SetupArgs),
    /// The receive pipeline alone, in memory: Gbit/s per core.
    ///
    /// The receive pipeline alone: a Worker on an in-memory ring fed prepared frames; Gbit/s
    /// per core, ns per packet, memcpy and CRC alone over the same octets (no namespace, no
    /// root).
    Pipeline(PipelineArgs),
    /// Hostile-input classes against the live datapath.
    ///
    /// Hostile-input classes against the live datapath, each with its expected outcome,
    /// beside a bystander connection that must finish octet-exact (`make hostile`).
    Hostile(mpa_bench::hostile::HostileArgs),
    /// The standard set (`make bench`): summary.md, results.json, PNG plots, `.hgrm` files.
    Suite(SuiteArgs),
    /// One datapath for minutes under waves of connections.
    ///
    /// One datapath for `--minutes` while waves of connections open, transfer (checked octet
    /// for octet) and close; memory and descriptors sampled and bounded.
    Soak(mpa_bench::soak::SoakArgs),
    /// An old build against a new one, in alternation.
    ///
    /// An old build against a new one: the same experiment from each in alternation, each
    /// headline value's median and range per build and their ratio
    /// (`mpa-bench ab OLD NEW -- pipeline --rounds 3`).
    Ab(mpa_bench::ab::AbArgs),
    /// ACK timing per connection from a capture.
    ///
    /// From a capture (pcap or pcapng), per connection: µs from each data segment's
    /// transmission to the first ACK that reports it, first transmissions and
    /// retransmissions apart.
    AckTiming(mpa_bench::ack_timing::AckTimingArgs),
}

impl Cmd {
    /// The experiment's name in its last line and its documents, and whether it prints a
    /// document (`--json`).
    fn name_and_json(&self) -> (&'static str, bool) {
        match self {
            Cmd::Demo(r) => ("demo", r.json),
            Cmd::Bw(a) => ("bw", a.json),
            Cmd::Lat(a) => ("lat", a.json),
            Cmd::Setup(a) => ("setup", a.json),
            Cmd::Pipeline(a) => ("pipeline", a.json),
            Cmd::Hostile(a) => ("hostile", a.json),
            Cmd::Suite(a) => ("suite", a.json),
            Cmd::Soak(a) => ("soak", a.json),
            Cmd::Ab(a) => ("ab", a.json),
            Cmd::AckTiming(a) => ("ack-timing", a.json),
        }
    }
}

fn main() -> ExitCode {
    if let Some(code) = mpa_ops::generate::if_asked(<Cli as clap::CommandFactory>::command, "1") {
        return code;
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    let (name, json) = cli.cmd.name_and_json();
    let result = match cli.cmd {
        Cmd::Hostile(a) => match mpa_bench::hostile::hostile(&a) {
            Ok(true) => Ok(()),
            // Its summary line (or document) said what failed.
            Ok(false) => return ExitCode::FAILURE,
            Err(e) => Err(e),
        },
        Cmd::Demo(r) => demo::run_cli(&r),
        Cmd::Setup(s) => setup::run_cli(&s),
        Cmd::Pipeline(a) => pipeline::run_cli(&a),
        Cmd::Lat(a) => lat::run_cli(&a),
        Cmd::Bw(a) => bw::run_cli(&a),
        Cmd::Soak(a) => mpa_bench::soak::soak(&a).and_then(|line| {
            report::line(a.json, &format!("soak: OK {line}"));
            if a.json {
                report::print(&serde_json::json!({"scenario": "soak", "summary": line}))?;
            }
            Ok(())
        }),
        Cmd::Ab(a) => mpa_bench::ab::run_cli(&a),
        Cmd::AckTiming(a) => mpa_bench::ack_timing::run_cli(&a),
        Cmd::Suite(a) => mpa_bench::suite::suite(&a).and_then(|md| {
            report::text(a.json, &md);
            report::line(
                a.json,
                &format!("suite: OK, written to {}", a.out.display()),
            );
            if a.json {
                report::print(&serde_json::json!({
                    "scenario": "suite",
                    "out": a.out,
                    "results": a.out.join("results.json"),
                }))?;
            }
            Ok(())
        }),
    };
    // 0 done, 1 failed at run time, 2 a usage error (clap's own, or a value or combination
    // of options only the experiment can check). A reader that closed stdout early changes
    // none of it.
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if json {
                // The one document on stdout says that it failed and why; the line, as
                // without --json, on stderr.
                mpa_cli::outln!("{}", report::failure(name, &e));
                eprintln!("{name}: FAILED {e:#}");
            } else {
                // The last line says what failed, on stdout like the results.
                mpa_cli::outln!("{name}: FAILED {e:#}");
            }
            mpa_cli::exit_code(&e)
        }
    }
}
