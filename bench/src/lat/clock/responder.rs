//! Starting `mpa-peer clock` on the peer host, through `--peer-exec` as the sender is, and
//! stopping it.

use mpa_testbed::TestBed;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long the responder has to say that it listens (a login through `ssh` included).
pub(crate) const START_WITHIN: Duration = Duration::from_secs(10);

/// The running responder; killed when dropped (over `ssh` the remote one then ends by its
/// idle timeout).
pub(crate) struct Responder {
    child: Child,
    /// The command line it was started with, for messages.
    pub(crate) command: String,
}

/// Why it did not start: the command line and what went wrong.
#[derive(Debug)]
pub(crate) struct NotStarted {
    pub(crate) command: String,
    pub(crate) reason: String,
}

impl Responder {
    /// Runs `mpa-peer clock --listen LISTEN` in the bed's peer namespace or on the peer host
    /// with `args` after it, and waits up to [`START_WITHIN`] for its "listening on" line.
    pub(crate) fn start(
        bed: &TestBed,
        listen: SocketAddr,
        args: &[String],
    ) -> Result<Responder, NotStarted> {
        let bin = mpa_harness::sibling("mpa-peer").map_err(|e| NotStarted {
            command: "mpa-peer clock".into(),
            reason: e.to_string(),
        })?;
        let mut cmd = bed.command(&bed.ns_a, &bin.to_string_lossy());
        cmd.args(["clock", "--listen", &listen.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let command = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        let not_started = |reason: String| NotStarted {
            command: command.clone(),
            reason,
        };
        let mut child = cmd.spawn().map_err(|e| not_started(e.to_string()))?;
        let Some(err) = child.stderr.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(not_started("no stderr".into()));
        };
        // Its stderr, line by line: the first lines here, the rest to the log.
        let (tx, lines) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            let mut ready = false;
            let mut err = BufReader::new(err);
            loop {
                // Lines of at most 4 KiB (a longer one arrives in pieces).
                let mut raw = Vec::new();
                match (&mut err).take(4096).read_until(b'\n', &mut raw) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let line = String::from_utf8_lossy(&raw).trim_end().to_string();
                if ready {
                    tracing::warn!("mpa-peer clock: {line}");
                } else {
                    ready = line.contains("listening on");
                    if tx.send(line).is_err() {
                        ready = true;
                    }
                }
            }
        });
        let deadline = Instant::now() + START_WITHIN;
        let mut said = Vec::new();
        let reason = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) if line.contains("listening on") => {
                    return Ok(Responder { child, command });
                }
                // What it said before it failed, the last few lines.
                Ok(line) => {
                    if said.len() == 8 {
                        said.remove(0);
                    }
                    said.push(line);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    break format!("it did not say that it listens within {START_WITHIN:?}");
                }
                // Its stderr closed: it ended, or is about to.
                Err(mpsc::RecvTimeoutError::Disconnected) => break ended(&mut child),
            }
        };
        let _ = child.kill();
        let _ = child.wait();
        let said = said.join(" / ");
        Err(not_started(if said.is_empty() {
            reason
        } else {
            format!("{reason}: {}", said.trim())
        }))
    }
}

/// How a responder whose stderr closed ended (waiting at most a second for it).
fn ended(child: &mut Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return format!("it ended ({status})"),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => return "it closed its stderr without saying that it listens".into(),
            Err(e) => return format!("it ended ({e})"),
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
