//! The fixture of the `mpa-peer` process tests: a listener on 127.0.0.1:0 (its address read
//! from its first stderr line), its report, and `connect` runs.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_mpa-peer");

pub struct Listener {
    pub child: Child,
    pub addr: String,
    /// Its stderr after the first line, once it has exited.
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn listen(args: &[&str]) -> Listener {
    let mut child = Command::new(BIN)
        .args(["listen", "--bind", "127.0.0.1:0", "--timeout", "20"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn listener");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("mpa-peer: listening on ")
        .expect(&line)
        .to_string();
    // Keep draining stderr so the child never blocks on it.
    let stderr = std::thread::spawn(move || {
        let mut all = String::new();
        while err.read_line(&mut all).map(|n| n > 0).unwrap_or(false) {}
        all
    });
    Listener {
        child,
        addr,
        stderr: Some(stderr),
    }
}

pub fn finish(l: Listener) -> (Value, bool) {
    let (v, ok, _) = finish_with_stderr(l);
    (v, ok)
}

/// [`finish`], and what the listener wrote on stderr after its first line.
pub fn finish_with_stderr(mut l: Listener) -> (Value, bool, String) {
    let out = l.child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).unwrap();
    let status = l.child.wait().unwrap();
    let stderr = l.stderr.take().unwrap().join().unwrap();
    (
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}")),
        status.success(),
        stderr,
    )
}

pub fn connect(addr: &str, args: &[&str]) -> (Value, bool, String) {
    let out = Command::new(BIN)
        .args(["connect", "--to", addr, "--timeout", "20"])
        .args(args)
        .output()
        .expect("run connect");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let v: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout:?}"));
    (
        v,
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

pub fn flag(on: bool, name: &'static str) -> Option<&'static str> {
    on.then_some(name)
}
