//! `mpa-datapath` as a process in ns b, for the tests that kill it, make it fail, or watch it
//! exit (an in-process datapath, [`crate::datapath`], cannot be killed without the test).

use crate::bins::bin;
use mpa_testbed::TestBed;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The line `mpa-datapath` prints once it serves.
const READY: &str = "mpa-datapath: ready";

/// A running `mpa-datapath` (driver-mode XDP, copy-mode AF_XDP, ULPDU digests on) on the
/// bed's interface in ns b, its stderr collected. Dropping it kills it (SIGKILL).
pub struct DatapathProcess {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
    /// Its control socket.
    pub socket: PathBuf,
}

impl DatapathProcess {
    /// Starts it with the environment `envs` and waits (bounded) for its ready line. Retried
    /// for a moment when it exits first: right after another datapath stopped, the kernel may
    /// still hold the queue (EBUSY on the AF_XDP bind). `Err` with its log when it never
    /// became ready.
    pub fn start(bed: &TestBed, envs: &[(&str, &str)]) -> Result<Self, String> {
        Self::start_with(bed, envs, &[])
    }

    /// [`DatapathProcess::start`] with more command-line arguments.
    pub fn start_with(bed: &TestBed, envs: &[(&str, &str)], args: &[&str]) -> Result<Self, String> {
        let t0 = Instant::now();
        loop {
            let mut p = Self::spawn(bed, envs, args);
            match p.wait_ready(Duration::from_secs(20)) {
                Ok(()) => return Ok(p),
                Err(log) if t0.elapsed() < Duration::from_secs(3) => {
                    drop(p);
                    eprintln!("datapath start failed; retrying:\n{log}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(log) => return Err(log),
            }
        }
    }

    /// [`DatapathProcess::start_with`] run through `wrapper` (a program and its arguments
    /// that runs the rest of its command line, such as `setpriv ...`) inside ns b.
    pub fn start_wrapped(bed: &TestBed, wrapper: &[&str], args: &[&str]) -> Result<Self, String> {
        let mut p = Self::spawn_wrapped(bed, &[], wrapper, args);
        p.wait_ready(Duration::from_secs(20)).map(|()| p)
    }

    /// Starts it once, without retrying: for a start that is expected to fail.
    pub fn start_once(bed: &TestBed, envs: &[(&str, &str)]) -> Result<Self, String> {
        Self::start_once_with(bed, envs, &[])
    }

    /// [`DatapathProcess::start_once`] with more command-line arguments (later ones override
    /// the defaults).
    pub fn start_once_with(
        bed: &TestBed,
        envs: &[(&str, &str)],
        args: &[&str],
    ) -> Result<Self, String> {
        let mut p = Self::spawn(bed, envs, args);
        p.wait_ready(Duration::from_secs(20)).map(|()| p)
    }

    fn spawn(bed: &TestBed, envs: &[(&str, &str)], args: &[&str]) -> Self {
        Self::spawn_wrapped(bed, envs, &[], args)
    }

    fn spawn_wrapped(
        bed: &TestBed,
        envs: &[(&str, &str)],
        wrapper: &[&str],
        args: &[&str],
    ) -> Self {
        let socket = crate::temp_path("dp-proc.sock");
        let program = bin("mpa-datapath").to_string_lossy().into_owned();
        let mut cmd = wrapped_command(bed, &bed.ns_b, wrapper, &program);
        cmd.args(["--iface", &bed.if_b, "--socket", &socket.to_string_lossy()])
            .args(["--xdp-mode", "native", "--zero-copy", "off", "--digest"])
            .args(["--frames", "4096", "--huge-pages", "off"])
            .args(args)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn mpa-datapath");
        let (log, reader) = collect_stderr(&mut child);
        DatapathProcess {
            child,
            log,
            reader: Some(reader),
            socket,
        }
    }

    /// Waits for the ready line; `Err(log)` if the process exits or 20 s pass first.
    fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let t0 = Instant::now();
        loop {
            if self.log().iter().any(|l| l.contains(READY)) {
                return Ok(());
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                // Let the reader take the last lines.
                if let Some(r) = self.reader.take() {
                    let _ = r.join();
                }
                return Err(format!("exited ({st}):\n{}", self.log().join("\n")));
            }
            if t0.elapsed() > timeout {
                return Err(format!(
                    "not ready in {timeout:?}:\n{}",
                    self.log().join("\n")
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its process id (`ip netns exec` execs the program: the same process).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it logged so far, line by line.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Waits (bounded) until its log satisfies `pred`; panics with the log otherwise.
    pub fn wait_log(&self, what: &str, timeout: Duration, pred: impl Fn(&[String]) -> bool) {
        let t0 = Instant::now();
        while !pred(&self.log()) {
            assert!(
                t0.elapsed() < timeout,
                "the datapath never logged {what}:\n{}",
                self.log().join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `kill -9`, and its exit status.
    pub fn kill9(&mut self) -> ExitStatus {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("wait")
    }

    /// SIGTERM (a clean stop), and its exit status (bounded wait).
    pub fn terminate(&mut self) -> ExitStatus {
        signal(self.pid(), "-TERM");
        self.wait_exit(Duration::from_secs(10))
    }

    /// Waits (bounded) for it to exit on its own; panics with the log otherwise.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                if let Some(r) = self.reader.take() {
                    let _ = r.join();
                }
                return st;
            }
            assert!(
                t0.elapsed() < timeout,
                "the datapath did not exit in {timeout:?}:\n{}",
                self.log().join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `kill SIG PID`.
fn signal(pid: u32, sig: &str) {
    let st = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill(1)");
    assert!(st.success(), "kill {sig} {pid}");
}

impl Drop for DatapathProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// `program` in namespace `ns`, run through `wrapper` (a program and its arguments that
/// runs the rest of its command line, such as `setpriv ...`) when there is one.
pub fn wrapped_command(bed: &TestBed, ns: &str, wrapper: &[&str], program: &str) -> Command {
    match wrapper.split_first() {
        None => bed.command(ns, program),
        Some((w, rest)) => {
            let mut c = bed.command(ns, w);
            c.args(rest).arg(program);
            c
        }
    }
}

/// Collects `child`'s piped stderr line by line on a thread: the shared log and the thread
/// (it ends when the child's stderr closes).
pub fn collect_stderr(child: &mut Child) -> (Arc<Mutex<Vec<String>>>, JoinHandle<()>) {
    let stderr = child.stderr.take().expect("piped stderr");
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            l.lock().unwrap().push(line);
        }
    });
    (log, reader)
}
