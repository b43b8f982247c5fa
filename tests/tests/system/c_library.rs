//! libmpaxdp from C (docs/c-library.md), every program built as a user builds one: against
//! the library as `make install-c-library` installs it, with pkg-config's flags. A C program
//! calls every error path against a live datapath — bad handles
//! and arguments, another context's objects, connections that do not exist, malformed work
//! requests, a refusal that comes back as a completion, a panic inside the library — and
//! each returns its code with a message (`capi/tests/c/errors.c`); and the C bandwidth program
//! (`examples/c/rdma_bw.c`) against `mpa-peer` and a second datapath.

use super::pingpong_example::{first_line, spawn};
use mpa_tests::{datapath, require_privileged, BedConfig, DatapathOptions, PeerListener, TestBed};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_path_buf()
}

/// libmpaxdp installed as `make install-c-library` installs it (PREFIX /usr) from the
/// build this test runs, into `<profile dir>/c-library-tree`, once per test process.
fn installed_tree() -> &'static Path {
    static TREE: OnceLock<PathBuf> = OnceLock::new();
    TREE.get_or_init(|| {
        let profile_dir = mpa_harness::c_library_dir();
        let tree = profile_dir.join("c-library-tree");
        let out = Command::new("make")
            .arg("-C")
            .arg(root())
            .args(["--no-print-directory", "install-c-library", "PREFIX=/usr"])
            .arg(format!("DESTDIR={}", tree.display()))
            .arg(format!("PROFILE_DIR={}", profile_dir.display()))
            .output()
            .expect("make");
        assert!(
            out.status.success(),
            "make install-c-library: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tree
    })
}

/// `examples/c/NAME.c`, built against the installed tree.
pub(crate) fn example_program(name: &str) -> PathBuf {
    compile(&root().join(format!("examples/c/{name}.c")), name)
}

/// Compiles C program `source` as a user would against the installed library: `cc` with
/// `pkg-config --cflags --libs mpa-xdp` of [`installed_tree`], run against the installed
/// `libmpaxdp.so.0` (an rpath into the tree). The executable, once per test process and name.
pub(crate) fn compile(source: &Path, name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, exe)) = built.iter().find(|(s, _)| s == source) {
        return exe.clone();
    }
    let tree = installed_tree();
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "mpa-xdp"])
        .env("PKG_CONFIG_PATH", tree.join("usr/lib/pkgconfig"))
        .env("PKG_CONFIG_SYSROOT_DIR", tree)
        .output()
        .expect("pkg-config");
    assert!(
        flags.status.success(),
        "pkg-config mpa-xdp: {}",
        String::from_utf8_lossy(&flags.stderr)
    );
    let flags = String::from_utf8(flags.stdout).expect("pkg-config's flags");
    let dir = tree.join("programs");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(format!("{name}-{}", std::process::id()));
    let out = Command::new("cc")
        .args([
            "-std=c11",
            "-D_DEFAULT_SOURCE",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-o",
        ])
        .arg(&exe)
        .arg(source)
        .args(flags.split_whitespace())
        .arg(format!("-Wl,-rpath,{}", tree.join("usr/lib").display()))
        .arg("-lm")
        .output()
        .expect("cc");
    assert!(
        out.status.success(),
        "cc {}: {}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    built.push((source.to_path_buf(), exe.clone()));
    exe
}

#[test]
fn every_error_path_returns_its_code_and_message_from_c() {
    if !require_privileged("the C library's error paths") {
        return;
    }
    let exe = compile(&root().join("capi/tests/c/errors.c"), "errors");
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, socket) = datapath(&bed, &DatapathOptions::default());
    let out = Command::new(&exe).arg(&socket).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("passed: 0 failures"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every check ran: one line each.
    assert_eq!(
        text.lines().filter(|l| l.starts_with("ok ")).count(),
        58,
        "{text}"
    );
    assert_eq!(dp.failure(), None);
    dp.stop();
}

/// `examples/c/rdma_bw.c` `connect` with `args`, to `at` through the datapath at `socket`: its
/// one JSON document.
fn bandwidth(program: &Path, socket: &Path, at: SocketAddr, args: &[&str]) -> serde_json::Value {
    let at = at.to_string();
    let all: Vec<&str> = ["connect", at.as_str(), "4096", "500", "--json"]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    let child = spawn(program, socket, &all);
    let out = super::pingpong_example::finished(child, "rdma_bw connect");
    let doc: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        (&doc["bytes"], &doc["iterations"]),
        (&4096.into(), &500.into()),
        "{doc}"
    );
    let avg = doc["bw_average_gbps"].as_f64().unwrap_or(0.0);
    assert!(
        avg > 0.0 && doc["bw_peak_gbps"].as_f64() >= Some(avg),
        "{doc}"
    );
    doc
}

/// The C bandwidth program writes and reads `mpa-peer listen`'s region (every completion
/// checked by the program, every Write and Read counted by the peer), and writes into a second
/// datapath whose C listener counts them placed.
#[test]
fn the_c_bandwidth_program_writes_and_reads_against_mpa_peer_and_a_datapath() {
    if !require_privileged("the C bandwidth program") {
        return;
    }
    let program = example_program("rdma_bw");
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (_dp_b, socket_b) = datapath(&bed, &DatapathOptions::default());
    let _cm_b = super::pingpong_example::manager(&bed, &bed.ns_b, &socket_b);
    for (port, read) in [(7941u16, false), (7942, true)] {
        let at = SocketAddr::new(bed.addr_a(false), port);
        let mut flags = vec!["--advertise", "0xbb0001:262144"];
        if read {
            flags.push("--remote-read");
        }
        let peer = PeerListener::start(&bed, at, &flags);
        // Reads poll for their completions; Writes wait asleep.
        let doc = bandwidth(
            &program,
            &socket_b,
            at,
            if read {
                &["--read", "--busy-poll", "16"]
            } else {
                &[]
            },
        );
        assert_eq!(doc["op"], if read { "read" } else { "write" }, "{doc}");
        let report = peer.report(Duration::from_secs(30));
        assert_eq!(report["error"], serde_json::Value::Null, "{report}");
        let key = if read { "reads_served" } else { "writes" };
        assert_eq!(report[key], 500, "{report}");
    }
    // Datapath to datapath: the C listener on datapath A counts every Write placed.
    let socket_a = mpa_harness::temp_path("bw-dp-a.sock");
    let _dp_a = mpa_harness::datapath::start_datapath_on(
        &bed.ns_a,
        &bed.if_a,
        &socket_a,
        &DatapathOptions::default(),
    )
    .unwrap();
    let _cm_a = super::pingpong_example::manager(&bed, &bed.ns_a, &socket_a);
    let at = SocketAddr::new(bed.addr_a(false), 7943);
    let mut listener = spawn(
        &program,
        &socket_a,
        &["listen", &at.to_string(), "4096", "--busy-poll", "16"],
    );
    assert_eq!(first_line(&mut listener), format!("listening on {at}"));
    bandwidth(&program, &socket_b, at, &[]);
    let out = super::pingpong_example::finished(listener, "rdma_bw listen");
    assert!(out.contains("500 writes placed, 2048000 octets"), "{out}");
}

/// Flushed completions from C: a kernel MPA peer resets the connection while three receive
/// buffers are posted; each completes flushed with its id on the receive CQ, then the end
/// comes (`capi/tests/c/flushed.c`).
#[test]
fn posted_buffers_complete_flushed_in_c_when_the_peer_resets() {
    if !require_privileged("flushed completions from C") {
        return;
    }
    use mpa::endpoint::{EndpointConfig, MpaStream};
    let exe = compile(&root().join("capi/tests/c/flushed.c"), "flushed");
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, socket) = datapath(&bed, &DatapathOptions::default());
    let _cm = super::pingpong_example::manager(&bed, &bed.ns_b, &socket);
    let listener = mpa_tests::listen_in(&bed.ns_a, SocketAddr::new(bed.addr_a(false), 0));
    let at = listener.local_addr().unwrap();
    let (reset_tx, reset_rx) = std::sync::mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        let (sock, _) = listener.accept().unwrap();
        let s = MpaStream::accept(sock, &EndpointConfig::default()).unwrap();
        reset_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        nix::sys::socket::setsockopt(s.get_ref(), nix::sys::socket::sockopt::Linger, &linger)
            .unwrap();
    });
    let mut child = spawn(&exe, &socket, &[&at.to_string()]);
    assert_eq!(first_line(&mut child), "ready");
    reset_tx.send(()).unwrap();
    peer.join().unwrap();
    let out = super::pingpong_example::finished(child, "flushed");
    assert!(out.contains("flushed 3, then disconnected"), "{out}");
    assert_eq!(dp.failure(), None);
    dp.stop();
}
