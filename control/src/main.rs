//! `mpa-control`: the connection-setup daemon (`serve`) and operations on the datapath
//! (`flows`, `stats`, `close`, `capture`) over its control socket.
//!
//! [`cli`] is the command line; [`commands`] holds what each subcommand does.
#![forbid(unsafe_code)]

mod cli;
mod commands;

use clap::{CommandFactory, Parser};
use cli::{Cli, Cmd};
use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(code) = mpa_ops::generate::if_asked(Cli::command, "8") {
        return code;
    }
    let cli = Cli::parse();
    mpa_ops::logs::init(cli.log_format, "info");
    let r = match cli.cmd {
        Cmd::Serve { config, metrics } => commands::serve(&config, metrics),
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
