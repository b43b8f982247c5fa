//! The command line's habits: sizes with suffixes (the bad value named), `--duration` and
//! `-i` intervals, exit codes (2 usage, 1 at run time) and a closed stdout ending quietly.

mod common;

use common::{connect, finish_with_stderr, listen, BIN};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Output, Stdio};

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run mpa-peer")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// An address nothing listens on: a port just bound and let go.
fn refused() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// The octets of the `-i` lines in `text` (`… N octets … Gbit/s`), in order.
fn interval_octets(text: &str) -> Vec<u64> {
    text.lines()
        .filter(|l| l.ends_with("Gbit/s"))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let i = w.iter().position(|x| *x == "octets").expect(l);
            w[i - 1].parse().expect(l)
        })
        .collect()
}

#[test]
fn sizes_take_binary_suffixes() {
    let l = listen(&["--advertise", "0x2a:1M"]);
    let (c, ok, err) = connect(&l.addr, &["-n", "8", "-s", "4K"]);
    let (s, s_ok, _) = finish_with_stderr(l);
    assert!(ok && s_ok, "{c} {s} {err}");
    assert_eq!(c["ulpdu_bytes"], 8 * 4096);
    assert_eq!(c["messages"], 8);
    assert_eq!(s["region"]["len"], 1 << 20);
    assert_eq!(c["ulpdu_digest"], s["ulpdu_digest"]);
}

#[test]
fn a_bad_size_is_a_usage_error_that_names_it() {
    let to = refused();
    for (bad, says) in [
        ("4X", "\"4X\" is not a size"),
        ("", "empty size"),
        ("20E", "\"20E\" is too large"),
    ] {
        let o = run(&["connect", "-c", &to, "-n", "1", "-s", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{bad:?}: {}", stderr(&o));
    }
    let o = run(&["listen", "--bind", "127.0.0.1:0", "--advertise", "1:16Q"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("\"16Q\" is not a size"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn usage_errors_exit_2_and_runtime_errors_exit_1() {
    let to = refused();
    // Clap's own, and the checks after parsing.
    for args in [
        vec!["connect", "-c", &to, "-s", "64"],
        vec!["connect", "-c", &to, "-s", "64", "-n", "1", "-t", "1"],
        vec!["connect", "-c", &to, "-s", "64", "-t", "0"],
        vec!["connect", "-c", &to, "-s", "64", "-t", "1", "--op", "read"],
        vec!["connect", "-c", &to, "-s", "70000", "-n", "1"],
        vec!["connect", "-c", &to, "-s", "64", "-n", "1", "--p2p"],
        // A zero timeout failed later as "cannot set a 0 duration timeout".
        vec![
            "connect",
            "-c",
            &to,
            "-s",
            "64",
            "-n",
            "1",
            "--timeout",
            "0",
        ],
        vec!["listen", "--bind", "127.0.0.1:0", "--timeout", "0"],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
    }
    // A connection refused fails at run time.
    let o = run(&["connect", "-c", &to, "-s", "64", "-n", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("refused"), "{}", stderr(&o));
}

#[test]
fn duration_sends_until_the_time_is_up_with_interval_lines_both_sides() {
    let l = listen(&["-i", "0.2"]);
    let (c, ok, c_err) = connect(&l.addr, &["-t", "0.5", "-i", "0.2", "-s", "4K"]);
    let (s, s_ok, s_err) = finish_with_stderr(l);
    assert!(ok && s_ok, "{c} {s} {c_err}");
    // What was sent is reported, and arrived.
    let n = c["messages"].as_u64().unwrap();
    assert!(n > 0, "{c}");
    assert_eq!(c["ulpdus"], n);
    assert_eq!(c["ulpdu_bytes"], n * 4096);
    assert_eq!(s["ulpdu_bytes"], n * 4096);
    assert_eq!(c["ulpdu_digest"], s["ulpdu_digest"]);
    // Each side's intervals add up to what it sent or received; the last one is cut short.
    for (side, text) in [("connect", &c_err), ("listen", &s_err)] {
        let got = interval_octets(text);
        assert!(!got.is_empty(), "{side}: {text}");
        assert_eq!(got.iter().sum::<u64>(), n * 4096, "{side}: {text}");
    }
    // -D is perftest's name for it.
    let l = listen(&[]);
    let (c, ok, err) = connect(&l.addr, &["-D", "0.2", "-s", "1K"]);
    assert!(ok && c["messages"].as_u64().unwrap() > 0, "{c} {err}");
    drop(l);
}

/// `mpa-peer … | head -1`: stdout a pipe whose reader is gone before anything is written.
fn closed_pipe() -> std::io::PipeWriter {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    writer
}

#[test]
fn a_closed_stdout_ends_quietly() {
    // The listener would serve two connections; nobody reads its first report, so it ends
    // after it, without a panic.
    let mut listener = Command::new(BIN)
        .args(["listen", "--bind", "127.0.0.1:0", "--connections", "2"])
        .args(["--timeout", "20", "--accept-timeout", "60"])
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(listener.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();
    let rest = std::thread::spawn(move || {
        let mut rest = String::new();
        err.read_to_string(&mut rest).map(|_| rest).unwrap()
    });
    let sender = Command::new(BIN)
        .args([
            "connect",
            "-c",
            &addr,
            "-n",
            "100",
            "-s",
            "1K",
            "--timeout",
            "20",
        ])
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!stderr(&sender).contains("panicked"), "{}", stderr(&sender));
    assert_eq!(sender.status.code(), Some(0), "{}", stderr(&sender));
    let status = listener.wait().unwrap();
    let rest = rest.join().unwrap();
    assert!(!rest.contains("panicked"), "{rest}");
    assert_eq!(status.code(), Some(0), "{rest}");
}
