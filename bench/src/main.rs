//! `mpa-bench`: whole experiments on a private namespace test bed (the building blocks are in
//! the library).
//!
//! * `demo`: the datapath and the hand-over listener in ns b, `mpa-peer connect` in ns a;
//!   prints goodput, FPDU counts, errors and the digest check, last line `demo: OK …` or
//!   `demo: FAILED …`.
//! * `compare`: the same sender against the datapath and against the blocking kernel-TCP
//!   Responder (`mpa-peer listen`), same bed, same run.
//! * `lat`: one-way latency per message (stamped by the sender), datapath vs kernel TCP,
//!   percentiles per size and `.hgrm` files.
//! * `pipeline`: the receive pipeline alone (`Worker<MemRing>`, frames prepared in memory).
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use mpa_bench::{compare, demo, lat, pipeline, scale, LatArgs, PipelineArgs, Run, Scale};
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
    /// Goodput and CPU: datapath vs the blocking kernel-TCP Responder, same bed and sender.
    Compare(Run),
    /// One-way latency per message: datapath vs the blocking kernel-TCP Responder, same bed
    /// and paced sender; percentiles per size, `.hgrm` files.
    Lat(LatArgs),
    /// Many connections at once through `mpa-control serve`: hand-over rate, all carry data.
    Scale(Scale),
    /// The receive pipeline alone: a Worker on an in-memory ring fed prepared frames; ns per
    /// segment, checked every round (no namespace, no root).
    Pipeline(PipelineArgs),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Demo(r) => match demo(&r) {
            Ok(line) => {
                println!("demo: OK {line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                println!("demo: FAILED {e:#}");
                ExitCode::FAILURE
            }
        },
        Cmd::Scale(sc) => match scale(&sc) {
            Ok(line) => {
                println!("scale: OK {line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                println!("scale: FAILED {e:#}");
                ExitCode::FAILURE
            }
        },
        Cmd::Pipeline(a) => match pipeline::run_cli(&a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                println!("pipeline: FAILED {e:#}");
                ExitCode::FAILURE
            }
        },
        Cmd::Lat(a) => match lat(&a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mpa-bench: {e:#}");
                ExitCode::FAILURE
            }
        },
        Cmd::Compare(r) => match compare(&r) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mpa-bench: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}
