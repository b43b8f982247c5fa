//! `tcpdump` writing a capture in one of the bed's namespaces, for tests that read what went
//! over the wire.

use mpa_testbed::TestBed;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `tcpdump -w`; killed when dropped.
pub struct Tcpdump {
    child: Child,
}

impl Tcpdump {
    /// Starts `tcpdump -i IFACE --immediate-mode -U -w PATH ARGS…` in `ns` and returns once it
    /// says it listens (at most 20 s: a fixed sleep was too short on a loaded machine, and the
    /// capture then missed everything). Immediate mode: without it frames wait in the kernel
    /// for a full block, and a capture stopped within a second keeps none of them.
    pub fn start(bed: &TestBed, ns: &str, iface: &str, path: &Path, args: &[&str]) -> Tcpdump {
        let mut child = bed
            .command(ns, "tcpdump")
            .args(["-i", iface, "--immediate-mode", "-U", "-w"])
            .arg(path)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump (make deps installs it)");
        let (up_tx, up_rx) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        // Drained to the end so that tcpdump never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("listening on") {
                    let _ = up_tx.send(());
                }
            }
        });
        up_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("tcpdump did not start listening");
        Tcpdump { child }
    }

    /// Stops it with SIGINT (it flushes and closes the file) and waits for it, at most 10 s
    /// (then it is killed by the drop).
    pub fn stop(mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        );
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
