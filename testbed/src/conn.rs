//! Kernel TCP connections across a bed: a listener in `b`, a client in `a`, both ends in
//! hand with bounded blocking.

use crate::{run_in_netns, TestBed};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Bound on every blocking step of a [`Conn`].
pub const STEP: Duration = Duration::from_secs(3);

/// A TCP connection from `a` (client) to `b` (server).
#[derive(Debug)]
pub struct Conn {
    /// The end in `a`.
    pub client: TcpStream,
    /// The end in `b`.
    pub server: TcpStream,
}

impl TestBed {
    /// A non-blocking listener on `ip:port` in `b`.
    pub fn listen_b(&self, ip: IpAddr, port: u16) -> TcpListener {
        let l = run_in_netns(&self.ns_b, || TcpListener::bind(SocketAddr::new(ip, port)))
            .expect("enter namespace b")
            .unwrap_or_else(|e| panic!("listen on {ip}:{port} in namespace b: {e}"));
        l.set_nonblocking(true).expect("nonblocking listener");
        l
    }

    /// A connection from `a` to `listener` (from [`TestBed::listen_b`]), both ends with read
    /// and write timeouts of [`STEP`] and no Nagle delay.
    pub fn connect(&self, listener: &TcpListener) -> Conn {
        let to = listener.local_addr().expect("listener address");
        let client = run_in_netns(&self.ns_a, || TcpStream::connect_timeout(&to, STEP))
            .expect("enter namespace a")
            .unwrap_or_else(|e| panic!("connect from a to {to}: {e}"));
        let deadline = Instant::now() + STEP;
        let server = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(e) => panic!("accept on {to}: {e}"),
            }
        };
        server.set_nonblocking(false).expect("blocking stream");
        for s in [&client, &server] {
            s.set_read_timeout(Some(STEP)).expect("read timeout");
            s.set_write_timeout(Some(STEP)).expect("write timeout");
            s.set_nodelay(true).expect("nodelay");
        }
        Conn { client, server }
    }
}

impl Conn {
    /// Client sends `msg`, server reads it and echoes it, client reads the echo.
    pub fn echo(&mut self, msg: &[u8]) -> io::Result<()> {
        self.client.write_all(msg)?;
        let mut got = vec![0; msg.len()];
        self.server.read_exact(&mut got)?;
        assert_eq!(got, msg, "server received other bytes");
        self.server.write_all(&got)?;
        self.client.read_exact(&mut got)?;
        assert_eq!(got, msg, "client received other bytes");
        Ok(())
    }
}
