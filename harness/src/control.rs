//! `mpa-control serve` as a process in ns b, its stderr log collected line by line.

use crate::bin;
use crate::procs::{collect_stderr, wrapped_command};
use mpa_testbed::TestBed;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `mpa-control serve --config FILE` in ns b; killed when dropped.
pub struct ControlDaemon {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

impl ControlDaemon {
    /// Starts it with `RUST_LOG` set to `filter`.
    pub fn start(bed: &TestBed, config: &Path, filter: &str) -> ControlDaemon {
        Self::start_wrapped(bed, &[], config, filter)
    }

    /// [`ControlDaemon::start`] in namespace `ns` (ns a, for a datapath on each side).
    pub fn start_in(bed: &TestBed, ns: &str, config: &Path, filter: &str) -> ControlDaemon {
        Self::spawn(bed, ns, &[], config, filter)
    }

    /// [`ControlDaemon::start`] run through `wrapper` (a program and its arguments that runs
    /// the rest of its command line, such as `setpriv ...`) inside ns b.
    pub fn start_wrapped(
        bed: &TestBed,
        wrapper: &[&str],
        config: &Path,
        filter: &str,
    ) -> ControlDaemon {
        Self::spawn(bed, &bed.ns_b, wrapper, config, filter)
    }

    fn spawn(
        bed: &TestBed,
        ns: &str,
        wrapper: &[&str],
        config: &Path,
        filter: &str,
    ) -> ControlDaemon {
        let program = bin("mpa-control").to_string_lossy().into_owned();
        let mut child = wrapped_command(bed, ns, wrapper, &program)
            .args(["serve", "--config", &config.to_string_lossy()])
            .env("RUST_LOG", filter)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mpa-control serve");
        let (log, reader) = collect_stderr(&mut child);
        ControlDaemon {
            child,
            log,
            reader: Some(reader),
        }
    }

    /// Every line logged so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Waits (up to `timeout`) until the log satisfies `pred`; panics with the log otherwise.
    pub fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&[String]) -> bool) {
        let t0 = Instant::now();
        loop {
            if pred(&self.log()) {
                return;
            }
            if t0.elapsed() > timeout {
                panic!("daemon never logged {what}:\n{}", self.log().join("\n"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until a line contains every one of `words`.
    pub fn wait_line(&self, words: &[&str]) {
        self.wait_for(&format!("{words:?}"), Duration::from_secs(10), |l| {
            l.iter().any(|l| words.iter().all(|w| l.contains(w)))
        });
    }

    /// Lines containing every one of `words`.
    pub fn count(&self, words: &[&str]) -> usize {
        self.log()
            .iter()
            .filter(|l| words.iter().all(|w| l.contains(w)))
            .count()
    }

    /// The flow the daemon handed over for the Initiator at `peer`.
    pub fn flow_of(&self, peer: SocketAddr) -> u64 {
        let needle = format!("peer={peer} ");
        self.wait_line(&["handed over", &needle]);
        let log = self.log();
        let line = log
            .iter()
            .find(|l| l.contains("handed over") && l.contains(&needle))
            .expect("the line waited for");
        let rest = &line[line.find("flow_id=").expect("flow_id in the line") + "flow_id=".len()..];
        rest.split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|d| d.parse().ok())
            .expect("a flow id")
    }
}

impl ControlDaemon {
    /// Waits until the daemon closed the frozen socket of `flow_id`.
    pub fn wait_gone(&self, flow_id: u64) {
        let id = format!("flow_id={flow_id} ");
        self.wait_for(
            &format!("flow {flow_id} gone"),
            Duration::from_secs(5),
            |l| {
                l.iter()
                    .any(|l| l.contains("flow gone: frozen socket closed") && l.contains(&id))
            },
        );
    }

    /// SIGTERM: asserts the daemon exits cleanly (status 0) at once and logs `exiting` once.
    pub fn terminate(mut self) {
        let pid = self.child.id().to_string();
        let st = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -TERM {pid}: {st}");
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait for mpa-control") {
                break s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(3),
                "no exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "exit after SIGTERM: {status}");
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        assert_eq!(self.count(&["exiting"]), 1, "{:?}", self.log());
    }
}

impl Drop for ControlDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}
