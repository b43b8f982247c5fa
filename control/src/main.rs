//! `mpa-control`: the connection-setup daemon (`serve`) and operations on the datapath
//! (`flows`, `stats`, `close`, `capture`) over its control socket.
//!
//! [`cli`] is the command line; [`commands`] holds what each subcommand does.
#![forbid(unsafe_code)]

mod cli;
mod commands;

use clap::Parser;
use cli::{Cli, Cmd, LogFormat};
use std::io::IsTerminal;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match cli.log_format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().init(),
    }
    let r = match cli.cmd {
        Cmd::Serve { config } => commands::serve(&config),
        Cmd::Flows { target, json } => commands::flows(&target, json),
        Cmd::Stats { target, json } => commands::stats(&target, json),
        Cmd::Connect(a) => commands::connect(&a),
        Cmd::Close { target, id } => commands::close(&target, id),
        Cmd::Capture(a) => commands::capture_cmd(&a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mpa-control: {e}");
            ExitCode::FAILURE
        }
    }
}
