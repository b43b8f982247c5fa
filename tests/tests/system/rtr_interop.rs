//! Peer-to-peer startup (RFC 6581 §9.2) against the kernel-TCP `mpa-peer connect --p2p`, the
//! datapath as Responder with a protection domain: for every RTR type the datapath accepts,
//! the peer's RDMA Writes, Sends and RDMA Reads that follow the RTR are placed (or served)
//! octet for octet. An untagged RTR takes MSN 1 of its queue (RFC 5041 §5.1), so the peer's
//! first Send after a Send RTR and its first Read Request after a Read RTR carry MSN 2 —
//! which the datapath must expect (else it ends the stream with DDP 1/2/3). The datapath as
//! Initiator against `mpa-peer listen` follows; both ends datapaths, both roles, are in
//! `datapath/tests/send_pair.rs`.

use mpa::startup::{RtrSet, RtrType};
use mpa::wire::ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use mpa_app::Consumer;
use mpa_ctl_proto::pattern::PatternTable;
use mpa_ctl_proto::region_ad::{self, RegionAd};
use mpa_ctl_proto::{CompletionKind, PostTarget};
use mpa_tests::{bin, datapath, require_privileged, BedConfig, DatapathOptions, TestBed};
use serde_json::Value;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const SIZE: u64 = 4096;
const COUNT: u64 = 40;
const LEN: u64 = 1 << 20;

#[test]
fn every_rtr_then_writes_sends_and_reads_from_mpa_peer() {
    if !require_privileged("peer-to-peer RTR interop") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = datapath(&bed, &DatapathOptions::default());
    let mut port = 7860u16;
    for (pd, rtr) in (11u32..).zip(RtrType::ALL) {
        for op in ["write", "send", "read"] {
            port += 1;
            let what = format!("{rtr:?} then {op}s");
            // One domain per case: its region, buffers and completions are its own.
            let pd = pd * 8 + port as u32 % 8;
            let mut consumer = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
            let region = consumer.create_region(LEN, pd, true, op == "read").unwrap();
            let stag = region.info().stag;
            let payload = match op {
                "send" => SIZE - UNTAGGED_HEADER_LEN as u64,
                _ => SIZE - TAGGED_HEADER_LEN as u64,
            };
            if op == "read" {
                let fill: Vec<u8> = (0..LEN as usize)
                    .map(|o| mpa_ctl_proto::pattern::pattern(0, o))
                    .collect();
                assert!(region.write(0, &fill));
            }
            if op == "send" {
                consumer
                    .post_recv(PostTarget::Pd(pd), stag, 0, payload as u32, COUNT as u32)
                    .unwrap();
            }
            consumer.subscribe(pd).unwrap();
            let ad = RegionAd {
                writes: op == "write",
                sends: op == "send",
                stag,
                len: LEN,
                base_to: 0,
                recv_buf_size: if op == "send" { payload as u32 } else { 0 },
            };
            let addr = SocketAddr::new(bed.addr_b(false), port);
            let listener = mpa_tests::listen_in(&bed.ns_b, addr);
            let mut responder = mpa_tests::Responder {
                reply_private_data: ad.emit().to_vec(),
                placement: mpa_control::Placement {
                    pd: Some(pd),
                    aligned_sender: false,
                    conn_id: None,
                },
                ..mpa_tests::Responder::framing(false, true)
            };
            responder.policy.accept_rev2 = true;
            responder.policy.rtr_support = RtrSet::single(rtr);
            let (ns_b, sock) = (bed.ns_b.clone(), path.clone());
            let setup = std::thread::spawn(move || {
                mpa_tests::accept_and_hand_over(&ns_b, &sock, &listener, &responder)
            });
            let mut cmd = bed.command(&bed.ns_a, &bin("mpa-peer").to_string_lossy());
            cmd.args(["connect", "--to", &addr.to_string(), "--op", op])
                .args(["--rev", "2", "--p2p"])
                .args(["--size", &SIZE.to_string(), "--count", &COUNT.to_string()])
                .args(["--timeout", "20"]);
            let out = cmd.output().unwrap();
            let handed = setup.join().unwrap().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let report: Value = serde_json::from_str(
                stdout
                    .lines()
                    .next()
                    .unwrap_or_else(|| panic!("{what}: {}", String::from_utf8_lossy(&out.stderr))),
            )
            .unwrap();
            assert!(out.status.success(), "{what}: {report}");
            assert_eq!(report["rtr"], format!("{rtr:?}"), "{what}: {report}");
            // The flow's own account: ended without a Terminate either way.
            let f = mpa_tests::wait_ended_flow(&path, handed.flow_id, Duration::from_secs(20));
            drop(handed);
            assert_eq!(
                f.ended.as_ref().and_then(|e| e.terminate),
                None,
                "{what}: {f:?}"
            );
            if op == "read" {
                assert_eq!(report["read_pattern_ok"], true, "{what}: {report}");
                assert_eq!(report["read_responses"], COUNT, "{what}: {report}");
                assert_eq!(f.tx.read_responses, COUNT, "{what}: {f:?}");
                continue;
            }
            // Every message completed, in order, where it belongs; the region holds exactly
            // what the peer sent.
            let mut completions = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(10);
            while (completions.len() as u64) < COUNT && Instant::now() < deadline {
                if let Some(b) = consumer
                    .next_completions(Instant::now() + Duration::from_millis(100))
                    .unwrap()
                {
                    completions.extend(b);
                }
            }
            assert_eq!(completions.len() as u64, COUNT, "{what}");
            let table = PatternTable::new(payload as usize);
            let got = region.to_vec();
            for (m, c) in (0..COUNT).zip(&completions) {
                let (kind, off) = if op == "write" {
                    let off = region_ad::write_to(&ad, m, payload).unwrap();
                    (CompletionKind::WritePlaced, off)
                } else {
                    (CompletionKind::SendArrived, m * payload)
                };
                assert_eq!((c.kind, c.offset, c.len), (kind, off, payload), "{what}");
                if op == "send" {
                    // The RTR took MSN 1 when it was a Send.
                    let first = 1 + u32::from(rtr == RtrType::ZeroLengthSend);
                    assert_eq!(c.msn, Some(first + m as u32), "{what}");
                }
                let o = off as usize;
                assert!(
                    got[o..o + payload as usize] == *table.payload(m, payload as usize),
                    "{what}: message {m} differs"
                );
            }
        }
    }
    dp.stop();
}

/// The datapath as peer-to-peer Initiator (its RTR first) against `mpa-peer listen`: for every
/// RTR type, its consumer's Writes land in the listener's region octet for octet, its Sends
/// arrive (the first with MSN 2 after a Send RTR, else 1), and its Reads fetch the listener's
/// pattern — after a Read RTR the listener's zero-length answer comes first and completes
/// nothing for the consumer.
#[test]
fn every_rtr_then_writes_sends_and_reads_to_mpa_peer_listen() {
    if !require_privileged("peer-to-peer RTR interop, datapath as Initiator") {
        return;
    }
    use mpa::crc::crc32c;
    use mpa_ctl_proto::CompletionKind as K;
    const PEER_STAG: u32 = 0x7700;
    const MSG: u64 = 4000;
    const N: u32 = 32;
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = datapath(&bed, &DatapathOptions::default());
    let mut port = 7880u16;
    for (pd, rtr) in (41u32..).zip(RtrType::ALL) {
        for op in ["write", "send", "read"] {
            port += 1;
            let what = format!("Initiator, {rtr:?} then {op}s");
            let pd = pd * 8 + port as u32 % 8;
            let bind = SocketAddr::new(bed.addr_a(false), port);
            let advertise = format!("{PEER_STAG:#x}:{LEN}:4096");
            let mut args = vec!["--rev", "2", "--timeout", "20", "--advertise", &advertise];
            if op == "read" {
                args.extend(["--remote-read", "--fill-pattern"]);
            }
            let listener = mpa_tests::PeerListener::start(&bed, bind, &args);
            let mut consumer = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
            let region = consumer.create_region(LEN, pd, true, false).unwrap();
            let stag = region.info().stag;
            let data: Vec<u8> = (0..LEN as usize).map(|i| (i * 131 % 251) as u8).collect();
            if op != "read" {
                assert!(region.write(0, &data));
            }
            consumer.subscribe(pd).unwrap();
            let policy = mpa::startup::StartupPolicy {
                revision: 2,
                accept_rev2: true,
                p2p: true,
                rtr_send: RtrSet::single(rtr),
                ..Default::default()
            };
            let (flow_id, ad, frozen) =
                mpa_harness::datapath::initiate(&bed, &path, bind, policy, Vec::new(), pd)
                    .unwrap_or_else(|e| panic!("{what}: {e:#}"));
            let (kind, first_msn) = match op {
                "write" => {
                    consumer
                        .post_write(flow_id, stag, 0, MSG, N, ad.stag, ad.base_to)
                        .unwrap();
                    (K::WriteSent, None)
                }
                "send" => {
                    let msn = consumer
                        .post_send(flow_id, stag, 0, MSG, N)
                        .unwrap()
                        .expect("no Read waits");
                    (K::SendSent, Some(msn))
                }
                _ => {
                    consumer
                        .post_read(flow_id, stag, 0, MSG, N, ad.stag, ad.base_to)
                        .unwrap();
                    (K::ReadResponsePlaced, None)
                }
            };
            if let Some(msn) = first_msn {
                let want = 1 + u32::from(rtr == RtrType::ZeroLengthSend);
                assert_eq!(msn, want, "{what}: the first Send's MSN");
            }
            let mut done = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(20);
            while done.len() < N as usize {
                assert!(
                    Instant::now() < deadline,
                    "{what}: {} of {N} completed",
                    done.len()
                );
                if let Some(b) = consumer
                    .next_completions(Instant::now() + Duration::from_millis(100))
                    .unwrap()
                {
                    done.extend(b);
                }
            }
            for (i, c) in done.iter().enumerate() {
                let i = i as u64;
                assert_eq!((c.kind, c.offset, c.len), (kind, i * MSG, MSG), "{what}");
                if let Some(msn) = first_msn {
                    assert_eq!(c.msn, Some(msn + i as u32), "{what}");
                }
            }
            consumer.finish_flow(flow_id).unwrap();
            let report = listener.report(Duration::from_secs(30));
            drop(frozen);
            assert_eq!(report["error"], Value::Null, "{what}: {report}");
            let n = u64::from(N);
            match op {
                "write" => {
                    assert_eq!(report["writes"], n, "{what}: {report}");
                    let mut want = vec![0u8; LEN as usize];
                    let sent = (n * MSG) as usize;
                    want[..sent].copy_from_slice(&data[..sent]);
                    assert_eq!(
                        report["region_digest"],
                        format!("{:08x}", crc32c(&want)),
                        "{what}: the listener's region"
                    );
                }
                "send" => {
                    assert_eq!(report["sends"], n, "{what}: {report}");
                    assert_eq!(report["send_octets"], n * MSG, "{what}: {report}");
                }
                _ => {
                    assert_eq!(report["reads_served"], n, "{what}: {report}");
                    let want: Vec<u8> = (0..(n * MSG) as usize)
                        .map(|o| mpa_ctl_proto::pattern::pattern(0, o))
                        .collect();
                    let got = region.to_vec();
                    assert!(
                        got[..want.len()] == want[..],
                        "{what}: what was read differs"
                    );
                }
            }
        }
    }
    dp.stop();
}
