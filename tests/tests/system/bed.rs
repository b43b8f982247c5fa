//! The test bed itself: connectivity over IPv4 and IPv6, real loss in the bridge, the
//! impairment bridge, cleanup.
//! (Configurations it refuses, which needs no privilege: testbed/tests/config.rs.)

use mpa_testbed::{require_privileged, run, run_in_netns, BedConfig, TestBed};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// Sends `n` octets from ns a to ns b over kernel TCP; returns what b received.
fn transfer(bed: &TestBed, v6: bool, port: u16, n: usize) -> usize {
    let addr = SocketAddr::new(bed.addr_b(v6), port);
    let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr).unwrap()).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = vec![0u8; 65536];
        let mut got = 0;
        loop {
            match s.read(&mut buf) {
                Ok(0) => break got,
                Ok(k) => got += k,
                Err(e) => panic!("server read: {e}"),
            }
        }
    });
    run_in_netns(&bed.ns_a, move || {
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
        c.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
        let chunk = vec![0x5au8; 65536];
        let mut left = n;
        while left > 0 {
            let k = left.min(chunk.len());
            c.write_all(&chunk[..k]).unwrap();
            left -= k;
        }
    })
    .unwrap();
    server.join().unwrap()
}

fn namespaces() -> String {
    String::from_utf8_lossy(&run(&["ip", "netns", "list"]).unwrap().stdout).to_string()
}

#[test]
fn direct_pair_carries_ipv4_and_ipv6_and_cleans_up() {
    if !require_privileged("direct_pair") {
        return;
    }
    let bed = TestBed::up(BedConfig {
        queues: 2,
        mtu: 3506,
        ..BedConfig::default()
    })
    .unwrap();
    let names: Vec<String> = bed.namespaces().iter().map(|s| s.to_string()).collect();
    assert_eq!(transfer(&bed, false, 7000, 1 << 20), 1 << 20);
    assert_eq!(transfer(&bed, true, 7001, 1 << 20), 1 << 20);
    drop(bed);
    let left = namespaces();
    for n in names {
        assert!(!left.contains(&n), "{n} left behind");
    }
}

#[test]
fn bridge_with_loss_drops_for_real() {
    if !require_privileged("bridge_with_loss") {
        return;
    }
    let bed = TestBed::up(BedConfig {
        bridge: true,
        loss_percent: 5,
        loss_port: 7002,
        ..BedConfig::default()
    })
    .unwrap();
    assert_eq!(transfer(&bed, false, 7002, 2 << 20), 2 << 20);
    assert!(bed.dropped().unwrap() > 0, "5% loss dropped nothing");
    // Another port is not subject to the loss rule.
    let before = bed.dropped().unwrap();
    assert_eq!(transfer(&bed, true, 7003, 1 << 20), 1 << 20);
    assert_eq!(bed.dropped().unwrap(), before);
}

#[test]
fn cleanup_on_panic() {
    if !require_privileged("cleanup_on_panic") {
        return;
    }
    let names = std::panic::catch_unwind(|| {
        let bed = TestBed::up(BedConfig::default()).unwrap();
        let names: Vec<String> = bed.namespaces().iter().map(|s| s.to_string()).collect();
        std::panic::panic_any(names);
    })
    .unwrap_err();
    let names = names.downcast::<Vec<String>>().unwrap();
    let left = namespaces();
    for n in names.iter() {
        assert!(!left.contains(n.as_str()), "{n} left behind");
    }
}

/// Sends `n` octets of a pattern from a to b on `port`; true when b got exactly them.
fn transfer_exact(bed: &TestBed, v6: bool, port: u16, n: usize) -> bool {
    let pattern = |i: usize| (i.wrapping_mul(31) ^ (i >> 9)) as u8;
    let addr = SocketAddr::new(bed.addr_b(v6), port);
    let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr).unwrap()).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = vec![0u8; 65536];
        let (mut got, mut same) = (0, true);
        loop {
            match s.read(&mut buf) {
                Ok(0) => break got == n && same,
                Ok(k) => {
                    same &= buf[..k]
                        .iter()
                        .enumerate()
                        .all(|(j, b)| *b == pattern(got + j));
                    got += k;
                }
                Err(e) => panic!("server read: {e}"),
            }
        }
    });
    run_in_netns(&bed.ns_a, move || {
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
        c.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
        let data: Vec<u8> = (0..n).map(pattern).collect();
        c.write_all(&data).unwrap();
    })
    .unwrap();
    server.join().unwrap()
}

/// Threads of this process whose name starts with `prefix`.
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.starts_with(prefix))
        .count()
}

#[test]
fn impairment_bridge_impairs_both_ways_forwards_the_rest_and_stops() {
    if !require_privileged("impairment_bridge") {
        return;
    }
    let imp = "drop=10,reorder=5,dup=5,corrupt=1,delay-us=50,jitter-us=50,seed=7,both"
        .parse()
        .unwrap();
    let bed = TestBed::up(BedConfig {
        bridge: true,
        loss_port: 7004,
        impair: Some(imp),
        ..BedConfig::default()
    })
    .unwrap();
    let names: Vec<String> = bed.namespaces().iter().map(|s| s.to_string()).collect();
    assert_eq!(threads_named("impair-"), 1);
    assert!(transfer_exact(&bed, false, 7004, 4 << 20));
    // The connection's close may still be retransmitting through the losses: the counters are
    // read once they stop moving (at most a few seconds).
    let mut s = bed.impair_stats().unwrap();
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(200));
        let now = bed.impair_stats().unwrap();
        let still =
            (now.a_to_b.eligible, now.b_to_a.eligible) == (s.a_to_b.eligible, s.b_to_a.eligible);
        s = now;
        if still {
            break;
        }
    }
    for (dir, d) in [("a→b", s.a_to_b), ("b→a", s.b_to_a)] {
        // Every kind happened, in both directions (corruption: only a→b carries payload).
        assert!(d.eligible > 100, "{dir}: {s}");
        assert!(
            d.dropped > 0 && d.duplicated > 0 && d.reordered > 0,
            "{dir}: {s}"
        );
        assert_eq!(d.delayed, d.eligible - d.dropped, "{dir}: {s}");
        assert_eq!(
            d.send_errors + d.socket_drops + d.truncated + d.overflow,
            0,
            "{dir}: {s}"
        );
    }
    assert!(s.a_to_b.corrupted > 0, "{s}");
    assert_eq!(bed.dropped().unwrap(), s.a_to_b.dropped + s.b_to_a.dropped);
    // Another port (and IPv6 neighbour discovery) passes untouched.
    assert!(transfer_exact(&bed, true, 7005, 1 << 20));
    let t = bed.impair_stats().unwrap();
    // (A late frame of the first connection's close may still count as eligible.)
    assert!(t.a_to_b.eligible - s.a_to_b.eligible < 5, "{s}\n{t}");
    assert!(t.a_to_b.frames > s.a_to_b.frames + 500, "{s}\n{t}");
    // The nftables loss does not mix with the forwarder.
    assert!(bed.set_loss(5).is_err());
    drop(bed);
    assert_eq!(threads_named("impair-"), 0, "forwarder thread left running");
    let left = namespaces();
    for n in names {
        assert!(!left.contains(&n), "{n} left behind");
    }
}
