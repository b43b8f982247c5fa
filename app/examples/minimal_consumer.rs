//! A minimal consumer of `mpa-datapath` (docs/consumer.md): it connects to the datapath's
//! control socket, creates a registered region in a protection domain (remote writes
//! allowed), subscribes to the domain's completions, prints each completion as it arrives
//! (with the first octets it placed), and after the run time unsubscribes, destroys the
//! region and exits.
//!
//! ```text
//! cargo run -p mpa-app --example minimal_consumer -- SOCKET [PD] [LEN] [SECONDS]
//! ```
//!
//! SOCKET is the datapath's control socket (`mpa-datapath --socket`, by default
//! /run/mpa-datapath.sock); PD the protection domain (default 1); LEN the region's length in
//! octets (default 16 MiB); SECONDS how long to wait for completions (default 30). Every wait
//! is bounded; a failure is reported on stderr and the exit status is non-zero.

use mpa_app::{Consumer, ConsumerError, MappedRegion};
use mpa_ctl_proto::{Completion, CompletionKind};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Bound of every wait for an answer on the control socket.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest single wait for completions (the run time is checked between waits).
const POLL: Duration = Duration::from_secs(1);
/// Octets of each placed message shown.
const SHOWN: usize = 16;

/// Why the consumer stopped: its message, printed as is when `main` returns it.
struct Failure(String);

impl std::fmt::Debug for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<ConsumerError> for Failure {
    fn from(e: ConsumerError) -> Failure {
        Failure(e.to_string())
    }
}

/// The command line.
struct Args {
    socket: PathBuf,
    pd: u32,
    len: u64,
    run_for: Duration,
}

const USAGE: &str = "usage: minimal_consumer SOCKET [PD] [LEN] [SECONDS]";

fn number<T: std::str::FromStr>(arg: Option<String>, name: &str, default: T) -> Result<T, Failure> {
    match arg {
        None => Ok(default),
        Some(s) => s
            .parse()
            .map_err(|_| Failure(format!("{name} {s:?} is not a number; {USAGE}"))),
    }
}

fn parse_args() -> Result<Args, Failure> {
    let mut it = std::env::args().skip(1);
    let socket = it.next().map(PathBuf::from).ok_or(Failure(USAGE.into()))?;
    let pd = number(it.next(), "PD", 1u32)?;
    let len = number(it.next(), "LEN", 16u64 << 20)?;
    let seconds = number(it.next(), "SECONDS", 30u64)?;
    if it.next().is_some() {
        return Err(Failure(USAGE.into()));
    }
    if len == 0 {
        return Err(Failure("LEN must be at least 1".into()));
    }
    Ok(Args {
        socket,
        pd,
        len,
        run_for: Duration::from_secs(seconds),
    })
}

/// One completion as a line, with the first octets it placed in our region.
fn show(c: &Completion, region: &MappedRegion) -> String {
    let mut line = format!(
        "flow {} {:?} stag {:#010x} offset {} len {}",
        c.flow_id, c.kind, c.stag, c.offset, c.len
    );
    if let Some(msn) = c.msn {
        line.push_str(&format!(" msn {msn}"));
    }
    if let Some(inv) = c.invalidate_stag {
        line.push_str(&format!(" invalidate {inv:#010x}"));
    }
    let placed_here = matches!(
        c.kind,
        CompletionKind::WritePlaced
            | CompletionKind::ReadResponsePlaced
            | CompletionKind::SendArrived
    ) && c.stag == region.info().stag;
    if placed_here {
        let n = usize::try_from(c.len).map_or(SHOWN, |l| l.min(SHOWN));
        let mut head = vec![0u8; n];
        // Copied out: the datapath may write the region at any time.
        if region.read(c.offset, &mut head) {
            let hex: Vec<String> = head.iter().map(|b| format!("{b:02x}")).collect();
            line.push_str(&format!(" first octets {}", hex.join(" ")));
        }
    }
    line
}

fn main() -> Result<(), Failure> {
    let args = parse_args()?;
    let mut consumer = Consumer::connect(&args.socket, ANSWER_TIMEOUT).map_err(|e| {
        Failure(format!(
            "cannot reach the datapath at {}: {e}",
            args.socket.display()
        ))
    })?;
    // Remote writes allowed, remote reads not.
    let region = consumer.create_region(args.len, args.pd, true, false)?;
    let info = region.info().clone();
    println!(
        "region stag {:#010x} len {} pd {} huge_pages {}",
        info.stag, info.len, info.pd, info.huge_pages
    );
    consumer.subscribe(args.pd)?;
    println!(
        "subscribed to domain {}; waiting {} s for completions",
        args.pd,
        args.run_for.as_secs()
    );

    let started = Instant::now();
    let end = started
        .checked_add(args.run_for)
        .ok_or(Failure("SECONDS too large".into()))?;
    let mut seen = 0u64;
    let mut lost = 0u64;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let deadline = now.checked_add(POLL).map_or(end, |d| d.min(end));
        match consumer.next_completions(deadline) {
            Ok(Some(batch)) => {
                for c in &batch {
                    println!("{}", show(c, &region));
                }
                seen += batch.len() as u64;
            }
            // Nothing before the deadline: wait again until the run time is over.
            Ok(None) => {}
            // We read too slowly: records were lost here; the next call goes on after them.
            Err(ConsumerError::Overflow { pd, lost: n }) => {
                eprintln!("domain {pd}: {n} completions lost (the ring was full)");
                lost += n;
            }
            // Anything else (the datapath went away, a corrupt ring) ends the run.
            Err(e) => return Err(e.into()),
        }
    }

    // Clean exit: closing the connection would release both as well.
    consumer.unsubscribe(args.pd)?;
    consumer.destroy_region(info.stag)?;
    println!(
        "{seen} completions, {lost} lost, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
