//! TCP_REPAIR freeze on real kernel connections inside a test bed: the state read from both
//! ends agrees, and a socket closed in repair mode sends nothing to its peer.

use mpa_control::{freeze, neighbour};
use mpa_tests::{require_privileged, run_in_netns, BedConfig, TestBed};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

#[test]
fn freeze_reads_consistent_state_and_stays_silent() {
    if !require_privileged("freeze") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    for v6 in [false, true] {
        let port = if v6 { 7101 } else { 7100 };
        let addr = SocketAddr::new(bed.addr_b(v6), port);
        let listener = run_in_netns(&bed.ns_b, move || TcpListener::bind(addr).unwrap()).unwrap();
        let client = run_in_netns(&bed.ns_a, move || {
            let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
            c.write_all(&[7u8; 1000]).unwrap();
            c
        })
        .unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let mut buf = [0u8; 1000];
        server.read_exact(&mut buf).unwrap();
        server.write_all(b"reply").unwrap();
        let mut r = [0u8; 5];
        let mut c = client;
        c.read_exact(&mut r).unwrap();
        // Let the delayed ACK of "reply" go out, then freeze both ends.
        std::thread::sleep(Duration::from_millis(100));
        freeze::flush_ack(&server).unwrap();
        let (frozen, s) = freeze::freeze(server).unwrap();
        assert!(freeze::in_repair(&frozen).unwrap());
        assert!(s.send_queue.is_empty() && s.recv_queue.is_empty());
        // MTU 1500: the peer's SYN MSS is 1460 (IPv4) or 1440 (IPv6).
        assert_eq!(s.mss, if v6 { 1440 } else { 1460 });
        assert!(s.sack_permitted);
        assert!(s.rcv_wscale.is_some() && s.snd_wscale.is_some());
        let ts = s
            .timestamps
            .expect("Linux negotiates timestamps by default");
        assert!(ts.monotonic_ns > 0);
        assert!(s.rcv_wnd > 0 && s.snd_wnd > 0);
        // The next hop of the client, seen from b: veth-a's MAC.
        let (dev, mac) = run_in_netns(&bed.ns_b, move || {
            neighbour::next_hop_mac(s.remote.ip()).unwrap()
        })
        .unwrap();
        assert_eq!(dev, bed.if_b);
        assert_eq!(bed.mac_a().unwrap(), mac);
        // Closing in repair mode is silent: the client sees neither FIN nor RST.
        drop(frozen);
        c.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        match c.read(&mut r) {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            other => panic!("frozen socket was not silent: {other:?}"),
        }
        // Only now freeze the client (the same socket as `c`) and compare both ends.
        let (cfrozen, cs) = freeze::freeze(c).unwrap();
        assert_eq!(s.rcv_nxt, cs.snd_nxt, "server rcv_nxt vs client snd_nxt");
        assert_eq!(s.snd_nxt, cs.rcv_nxt, "server snd_nxt vs client rcv_nxt");
        assert_eq!(s.remote, cs.local);
        drop(cfrozen);
    }
}
