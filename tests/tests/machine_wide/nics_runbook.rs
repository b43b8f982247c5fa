//! docs/nics.md, the two-host runbook, run on a namespace bed standing in for the two hosts:
//! every line of its `sh` blocks must be listed here with what it does on the bed, and every
//! line listed here must be in the page, so that the page cannot gain or change a command
//! that no test runs. Host A is ns b (the datapath's side), host B ns a; `$IFACE` and `$PEER`
//! are the bed's.

use mpa_tests::{bin, require_privileged, BedConfig, TestBed};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a runbook line does on the bed.
#[derive(Debug, Clone, Copy)]
enum OnBed {
    /// A shell variable of the page's first block (the test sets its own).
    Variable,
    /// Runs and exits 0.
    Succeeds,
    /// Exits non-zero, printing this (what veth lacks).
    Fails(&'static str),
    /// `mpa-datapath` that becomes ready, then stops cleanly on SIGTERM.
    Daemon,
    /// A benchmark, run with these arguments appended to keep it short, exits 0.
    Bench(&'static [&'static str]),
    /// Needs a physical NIC or systemd as PID 1 (the page says so).
    NeedsHardware,
}

const RUNBOOK: &[(&str, OnBed)] = &[
    (
        "IFACE=eth1          # host A's interface toward B",
        OnBed::Variable,
    ),
    (
        "PEER=192.0.2.2      # host B's address on that link",
        OnBed::Variable,
    ),
    ("mpa-datapath probe --iface $IFACE", OnBed::Succeeds),
    ("mpa-datapath probe --iface $IFACE --json", OnBed::Succeeds),
    (
        "ethtool -k $IFACE | grep -E 'large-receive-offload|rx-gro-hw|generic-receive-offload'",
        OnBed::Succeeds,
    ),
    ("ethtool -K $IFACE lro off rx-gro-hw off", OnBed::Succeeds),
    ("ethtool -K $IFACE gro off", OnBed::Succeeds),
    ("ethtool -l $IFACE", OnBed::Succeeds),
    (
        "mpa-datapath --iface $IFACE --queues 2 --steer channels",
        OnBed::Daemon,
    ),
    (
        "mpa-datapath --iface $IFACE --steer ntuple --steer-port 7777",
        OnBed::Fails("the driver (veth) takes no ntuple rules"),
    ),
    ("ethtool -n $IFACE", OnBed::Fails("Operation not supported")),
    ("grep -E \"$IFACE\" /proc/interrupts", OnBed::Fails("")),
    (
        "echo 2 > /proc/irq/$IRQ/smp_affinity_list",
        OnBed::NeedsHardware,
    ),
    ("systemctl stop irqbalance", OnBed::NeedsHardware),
    (
        "mpa-datapath --iface $IFACE --queues 2 --pin-cpus",
        OnBed::Daemon,
    ),
    ("sysctl -w vm.nr_hugepages=64", OnBed::Succeeds),
    ("mpa-datapath --iface $IFACE --huge-pages on", OnBed::Daemon),
    (
        "mpa-datapath --iface $IFACE --zero-copy on",
        OnBed::Fails("zero-copy refused"),
    ),
    (
        "echo 2 > /sys/class/net/$IFACE/napi_defer_hard_irqs",
        OnBed::Succeeds,
    ),
    (
        "echo 200000 > /sys/class/net/$IFACE/gro_flush_timeout",
        OnBed::Succeeds,
    ),
    (
        "mpa-datapath --iface $IFACE --busy-poll 50 --busy-poll-budget 64 --spin-us 100",
        OnBed::Daemon,
    ),
    (
        "mpa-bench bw --iface $IFACE --peer $PEER",
        OnBed::Bench(&["--sizes", "4096", "--bytes", "4194304", "--rounds", "1"]),
    ),
    (
        "mpa-bench lat --pingpong --iface $IFACE --peer $PEER",
        OnBed::Bench(&[
            "--sizes",
            "64",
            "--messages",
            "200",
            "--rounds",
            "1",
            "--spin-us",
            "200",
            "--out",
            "$OUT",
        ]),
    ),
    (
        "mpa-bench lat --iface $IFACE --peer $PEER",
        // The error bound this busy 2-core machine can promise (the default is 50 µs).
        OnBed::Bench(&[
            "--sizes",
            "64",
            "--messages",
            "200",
            "--rounds",
            "1",
            "--spin-us",
            "200",
            "--out",
            "$OUT",
            "--max-clock-error-us",
            "500",
        ]),
    ),
    (
        "systemctl enable --now mpa-datapath@$IFACE mpa-control",
        OnBed::NeedsHardware,
    ),
];

/// The lines of docs/nics.md's `sh` blocks.
fn runbook_lines() -> Vec<String> {
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/nics.md")).unwrap();
    let mut lines = Vec::new();
    let mut inside = false;
    for l in page.lines() {
        if inside && l.starts_with("```") {
            inside = false;
        } else if inside && !l.trim().is_empty() {
            lines.push(l.to_string());
        } else if l == "```sh" {
            inside = true;
        }
    }
    lines
}

#[test]
fn every_runbook_command_is_listed_here_and_every_listed_one_is_in_the_page() {
    let _machine = crate::one_at_a_time();
    let page = runbook_lines();
    for l in &page {
        assert!(
            RUNBOOK.iter().any(|(r, _)| r == l),
            "docs/nics.md runs `{l}`, which this test does not"
        );
    }
    for (r, _) in RUNBOOK {
        assert!(
            page.iter().any(|l| l == r),
            "`{r}` is no longer in docs/nics.md"
        );
    }
}

/// `vm.nr_hugepages` as it was, put back on every exit path.
struct RestoreHugePages(Option<String>);

impl Drop for RestoreHugePages {
    fn drop(&mut self) {
        if let Some(v) = &self.0 {
            let _ = std::fs::write("/proc/sys/vm/nr_hugepages", v);
        }
    }
}

/// `line` through `sh -c` in ns b with the bed's `$IFACE` and `$PEER`, the workspace's
/// programs first on PATH.
fn shell(bed: &TestBed, line: &str) -> Command {
    let dir = bin("mpa-datapath").parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = bed.command(&bed.ns_b, "sh");
    cmd.args(["-c", line])
        .env("PATH", path)
        .env("IFACE", &bed.if_b)
        .env("PEER", bed.addr_a(false).to_string())
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    cmd
}

/// Runs a datapath line until it is ready, then stops it with SIGTERM: it must exit 0.
fn daemon(bed: &TestBed, line: &str) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let socket = std::env::temp_dir().join(format!("mpa-runbook-{}-{n}.sock", std::process::id()));
    let mut child = shell(bed, &format!("exec {line} --socket {}", socket.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let (log, err) = (log.clone(), child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                log.lock().unwrap().push(l);
            }
        })
    };
    let t0 = Instant::now();
    let ready = loop {
        if log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("mpa-datapath: ready"))
        {
            break true;
        }
        if t0.elapsed() > Duration::from_secs(20) || child.try_wait().unwrap().is_some() {
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let status = wait_within(&mut child, Duration::from_secs(20));
    let _ = reader.join();
    let log = log.lock().unwrap().join("\n");
    assert!(ready, "`{line}` never became ready:\n{log}");
    assert_eq!(status, Some(0), "`{line}` after SIGTERM:\n{log}");
}

fn wait_within(child: &mut std::process::Child, t: Duration) -> Option<i32> {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code();
        }
        if t0.elapsed() > t {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` to its end: whether it exited 0, and what it printed on stdout and stderr.
fn run(mut cmd: Command) -> (bool, String) {
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_runbook_runs_on_a_namespace_bed() {
    let _machine = crate::one_at_a_time();
    if !require_privileged("the NIC runbook") {
        return;
    }
    // Two queues each way, as the runbook's `--queues 2` lines need.
    let bed = TestBed::up(BedConfig {
        queues: 2,
        ..BedConfig::default()
    })
    .unwrap();
    // Host B's side sends on one TX queue: a veth's RX queue is its peer's TX queue, and veth
    // takes XDP only with at least as many RX queues as its peer has TX queues, so that the
    // benchmarks' `--steer auto` (one served queue: the channels set to one) can attach.
    let (ok, text) = run({
        let mut c = bed.command(&bed.ns_a, "ethtool");
        c.args(["-L", &bed.if_a, "tx", "1"]);
        c
    });
    assert!(ok, "ethtool -L {} tx 1: {text}", bed.if_a);
    let _huge = RestoreHugePages(std::fs::read_to_string("/proc/sys/vm/nr_hugepages").ok());
    let out_dir = std::env::temp_dir().join(format!("mpa-runbook-{}", std::process::id()));
    for line in runbook_lines() {
        let Some(&(_, on_bed)) = RUNBOOK.iter().find(|(r, _)| *r == line) else {
            panic!("`{line}` is not listed");
        };
        match on_bed {
            OnBed::Variable | OnBed::NeedsHardware => {}
            OnBed::Succeeds => {
                let (ok, text) = run(shell(&bed, &line));
                assert!(ok, "`{line}`:\n{text}");
            }
            OnBed::Fails(why) => {
                let (ok, text) = run(shell(&bed, &line));
                assert!(
                    !ok && text.contains(why),
                    "`{line}` should fail with {why:?}:\n{text}"
                );
            }
            OnBed::Daemon => daemon(&bed, &line),
            OnBed::Bench(extra) => {
                let cmd = format!(
                    "{line} {} --peer-exec 'ip netns exec {}'",
                    extra.join(" "),
                    bed.ns_a
                );
                let mut c = shell(&bed, &cmd);
                c.env("OUT", &out_dir);
                let (ok, text) = run(c);
                assert!(ok && text.contains("datapath"), "`{cmd}`:\n{text}");
                // Two RX queues, one served: each datapath run set the channels to one and
                // put them back.
                assert!(
                    text.contains("channels: RX 2 → 1")
                        && text.contains("RX channels 1 → 2 restored"),
                    "`{cmd}` did not steer:\n{text}"
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&out_dir);
}
