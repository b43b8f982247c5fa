//! `mpa-bench ack-timing` on a real capture: `tcpdump` on the sender's interface while
//! `mpa-peer connect` in ns b sends to `mpa-peer listen` in ns a over kernel TCP; every data
//! segment of the one connection is reported by an ACK, and the document names the two ends.
//! A file that is not a capture is refused with a message naming it.

use mpa_tests::capture::Tcpdump;
use mpa_tests::{bin, require_privileged, BedConfig, PeerListener, TestBed};
use serde_json::Value;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

const PORT: u16 = 7777;

#[test]
fn ack_timing_reads_a_tcpdump_capture_of_a_kernel_transfer() {
    if !require_privileged("ack-timing on a capture") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let dir = std::env::temp_dir().join(format!("mpa-ack-timing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("sender.pcap");
    let dump = Tcpdump::start(
        &bed,
        &bed.ns_b,
        &bed.if_b,
        &pcap,
        &["-s", "128", "tcp", "port", &PORT.to_string()],
    );
    let to = SocketAddr::new(bed.addr_a(false), PORT);
    let listener = PeerListener::start(&bed, to, &["--markers", "--crc"]);
    let out = bed
        .command(&bed.ns_b, &bin("mpa-peer").to_string_lossy())
        .args([
            "connect",
            "--to",
            &to.to_string(),
            "--count",
            "2000",
            "--size",
            "4096",
        ])
        .args(["--timeout", "30"])
        .args(["--markers", "--crc"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = listener.report(Duration::from_secs(30));
    assert_eq!(got["ulpdus"], 2000);
    std::thread::sleep(Duration::from_millis(200));
    dump.stop();

    let run = Command::new(bin("mpa-bench"))
        .args(["ack-timing", "--json", "--min-segments", "1"])
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
    let doc: Value = serde_json::from_slice(&run.stdout).unwrap();
    let conns = doc["connections"].as_array().unwrap();
    assert_eq!(conns.len(), 1, "{doc}");
    let c = &conns[0];
    assert_eq!(c["receiver"], to.to_string());
    assert_eq!(
        c["sender"].as_str().unwrap().split(':').next().unwrap(),
        bed.addr_b(false).to_string()
    );
    let segments = c["data_segments"].as_u64().unwrap();
    // The MPA Request and 2,000 FPDUs of 4 KiB: at least 8 MiB in segments of at most 64 KiB.
    assert!(segments >= 128, "{c}");
    let first = c["first"]["count"].as_u64().unwrap();
    let again = c["retransmitted"]["count"].as_u64().unwrap();
    // Every segment sent was reported. A transmission that a retransmission (a tail loss
    // probe, say) replaced before any ACK reported it is not measured, so first + again may
    // fall short of the transmissions by those; on a veth pair without loss they are few.
    assert_eq!(c["unreported"], 0, "{c}");
    assert!(first + again <= segments, "{c}");
    assert!(first * 10 >= segments * 9, "{c}");
    assert!(c["first"]["p50_us"].as_f64().unwrap() > 0.0, "{c}");
    assert!(doc["tcp_frames"].as_u64().unwrap() > segments);

    // The same capture as pcapng (per-interface timestamp units): the same result.
    let pcapng = dir.join("sender.pcapng");
    let conv = Command::new("editcap")
        .args(["-F", "pcapng"])
        .arg(&pcap)
        .arg(&pcapng)
        .output()
        .expect("editcap (wireshark-common, with tshark: make deps installs it)");
    assert!(
        conv.status.success(),
        "{}",
        String::from_utf8_lossy(&conv.stderr)
    );
    let run = Command::new(bin("mpa-bench"))
        .args(["ack-timing", "--json", "--min-segments", "1"])
        .arg(&pcapng)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
    let ng: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(ng["connections"], doc["connections"], "{ng}\n{doc}");

    // Not a capture: refused, naming the file.
    let junk = dir.join("junk.pcap");
    std::fs::write(&junk, b"this is not a capture file at all").unwrap();
    let run = Command::new(bin("mpa-bench"))
        .args(["ack-timing"])
        .arg(&junk)
        .output()
        .unwrap();
    assert!(!run.status.success());
    let said = String::from_utf8_lossy(&run.stdout);
    assert!(
        said.contains("ack-timing: FAILED") && said.contains("junk.pcap"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
