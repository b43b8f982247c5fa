//! The minimal consumer of docs/consumer.md (`app/examples/minimal_consumer.rs`) against
//! a live datapath: it creates its region and subscribes; a kernel-TCP peer in ns a writes RDMA
//! Writes into that region over a handed-over connection; the example prints one line per
//! completion (kind, offset, length, first octets placed), then unsubscribes, destroys its
//! region and exits 0 — and the datapath holds no region of it afterwards.

use mpa_harness::example;
use mpa_tests::{
    datapath, hand_over, listen_in, require_privileged, stats, writes_from_a, BedConfig,
    DatapathOptions, TestBed,
};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

const WRITES: u64 = 20;
const LEN: usize = 256;

#[test]
fn the_minimal_consumer_prints_every_completion_and_leaves_nothing_behind() {
    if !require_privileged("the minimal consumer example") {
        return;
    }
    // Built before the datapath starts: nothing waits on a build.
    let program = example("mpa-app", "minimal_consumer");
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = datapath(&bed, &DatapathOptions::default());
    let mut child = Command::new(program)
        .arg(&path)
        .args(["1", "1048576", "6"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    // "region stag 0x........ len 1048576 pd 1 huge_pages …"
    let stag = first
        .strip_prefix("region stag 0x")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .unwrap_or_else(|| panic!("first line: {first}"));
    assert!(first.contains(" len 1048576 pd 1 "), "{first}");
    let mut second = String::new();
    out.read_line(&mut second).unwrap();
    assert!(second.starts_with("subscribed to domain 1"), "{second}");

    let addr = SocketAddr::new(bed.addr_b(false), 7652);
    let listener = listen_in(&bed.ns_b, addr);
    let peer = writes_from_a(&bed, addr, stag, WRITES, LEN);
    let (_flow, _dpc, _frozen) = hand_over(&bed, &path, &listener, false, true, Some(1));
    peer.join().unwrap().unwrap();

    let mut lines = Vec::new();
    for line in out.lines() {
        lines.push(line.unwrap());
    }
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{status}: {err}\n{lines:#?}");
    let placed: Vec<&String> = lines.iter().filter(|l| l.contains("WritePlaced")).collect();
    assert_eq!(placed.len() as u64, WRITES, "{lines:#?}");
    for (i, l) in placed.iter().enumerate() {
        assert!(
            l.contains(&format!(" stag {stag:#010x} offset {} len {LEN} ", i * LEN)),
            "{l}"
        );
        assert!(l.contains(" first octets "), "{l}");
    }
    assert_eq!(
        lines
            .last()
            .map(|l| l.starts_with(&format!("{WRITES} completions, 0 lost"))),
        Some(true),
        "{lines:#?}"
    );
    // Its region and subscription are gone from the datapath (a region a flow still holds
    // goes when the flow lets go of it).
    let mut dpc =
        mpa_control::datapath_client::DatapathClient::connect(&path, Duration::from_secs(5))
            .unwrap();
    let t0 = std::time::Instant::now();
    loop {
        let r = stats(&mut dpc).registry;
        if r.regions == 0 && r.subscribers == 0 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{r:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(dp);
}
