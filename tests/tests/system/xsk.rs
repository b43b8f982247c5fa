//! The AF_XDP layer on a real socket: the XDP program steers one TCP flow to an XSK on the
//! bed's veth; its segments arrive in the UMEM byte-exact, and a frame sent from the XSK
//! reaches the peer namespace.

use mpa_bpf::{AttachMode, FlowKey, FlowValue, XdpSteering};
use mpa_datapath::io::ring::FrameRing;
use mpa_datapath::io::xsk::{BindMode, XskConfig, XskQueue};
use mpa_testbed::{A4, B4};
use mpa_tests::frames::udp_v4;
use mpa_tests::{listen_in, require_privileged, run_in_netns, BedConfig, TestBed};
use std::io::Write;
use std::net::{SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

#[test]
fn steered_segments_reach_the_umem_and_frames_leave_through_it() {
    if !require_privileged("xsk") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let if_b = bed.if_b.clone();
    let (steer, mut xsk) = run_in_netns(&bed.ns_b, move || {
        let ifindex = mpa_bpf::ifindex_of(&if_b).unwrap();
        let steer = XdpSteering::attach(ifindex, AttachMode::Driver).unwrap();
        let cfg = XskConfig {
            frames: 1024,
            frame_size: 4096,
            ring_size: 512,
            bind_mode: BindMode::Copy,
            busy_poll: None,
            ..XskConfig::default()
        };
        let xsk = XskQueue::open(&if_b, 0, &cfg).unwrap();
        steer.set_xsk(0, xsk.as_fd()).unwrap();
        (steer, xsk)
    })
    .unwrap();
    let addr = SocketAddr::new(bed.addr_b(false), 7300);
    let listener = listen_in(&bed.ns_b, addr);
    let mut client = run_in_netns(&bed.ns_a, move || {
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap()
    })
    .unwrap();
    let (server, peer) = listener.accept().unwrap();
    steer
        .insert_flow(
            &FlowKey::new(addr, peer).unwrap(),
            FlowValue {
                flow_id: 1,
                flags: 0,
            },
        )
        .unwrap();
    let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    client.write_all(&payload).unwrap();
    // The segment (and its retransmissions: nobody ACKs) arrives in the UMEM.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut seen = None;
    while seen.is_none() && Instant::now() < deadline {
        xsk.rx_burst(100, |frame| {
            if frame.len() >= 14 + 20 + 20 + payload.len() && frame.ends_with(&payload) {
                seen = Some(frame.to_vec());
            }
        })
        .unwrap();
    }
    let frame = seen.expect("steered segment never reached the XSK");
    assert_eq!(&frame[12..14], &[0x08, 0x00]);
    assert!(xsk.stats().rx_frames >= 1);
    assert!(steer.counters().unwrap().redirected >= 1);
    drop(server);
    // TX: a UDP datagram built here arrives at a socket in ns a.
    let udp = run_in_netns(&bed.ns_a, || UdpSocket::bind("10.99.0.1:7301").unwrap()).unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let f = udp_v4(
        bed.mac_b().unwrap(),
        bed.mac_a().unwrap(),
        SocketAddrV4::new(B4, 4000),
        SocketAddrV4::new(A4, 7301),
        b"from the xsk",
    );
    assert!(xsk.send(&f));
    xsk.flush().unwrap();
    let mut buf = [0u8; 64];
    let (n, from) = udp.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"from the xsk");
    assert_eq!(from.ip(), bed.addr_b(false));
    assert_eq!(xsk.stats().tx_frames, 1);
}

#[test]
fn busy_polling_and_bind_modes_are_set_or_refused_clearly() {
    if !require_privileged("xsk busy poll") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let if_b = bed.if_b.clone();
    run_in_netns(&bed.ns_b, move || {
        let cfg = XskConfig {
            frames: 256,
            ring_size: 128,
            bind_mode: BindMode::Copy,
            busy_poll: Some(mpa_datapath::io::xsk::BusyPoll {
                usecs: 20,
                budget: 64,
            }),
            ..XskConfig::default()
        };
        let q = XskQueue::open(&if_b, 0, &cfg).expect("busy polling on a copy-mode socket");
        // Children of the datapath must not inherit (and so keep bound) the queue.
        let fd_flags = nix::fcntl::fcntl(&q, nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert!(nix::fcntl::FdFlag::from_bits_truncate(fd_flags)
            .contains(nix::fcntl::FdFlag::FD_CLOEXEC));
        drop(q);
        // veth has no zero-copy (docs/environment.md): the error names interface, queue and mode.
        let zc = XskConfig {
            bind_mode: BindMode::ZeroCopy,
            busy_poll: None,
            ..cfg
        };
        let e = XskQueue::open(&if_b, 0, &zc).unwrap_err().to_string();
        assert!(e.contains("veth-b") && e.contains("ZeroCopy"), "{e}");
        // A queue the device does not have.
        let e = XskQueue::open(
            &if_b,
            5,
            &XskConfig {
                busy_poll: None,
                ..cfg
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("queue 5"), "{e}");
    })
    .unwrap();
}
