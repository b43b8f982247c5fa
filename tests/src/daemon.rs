//! `mpa-control serve` as a process in ns b, its stderr log collected line by line.

use crate::bin;
use mpa_testbed::TestBed;
use std::io::{BufRead, BufReader};
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
        let mut child = bed
            .command(&bed.ns_b, &bin("mpa-control").to_string_lossy())
            .args(["serve", "--config", &config.to_string_lossy()])
            .env("RUST_LOG", filter)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mpa-control serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                l.lock().unwrap().push(line);
            }
        });
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

impl Drop for ControlDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}
