//! The HTTP side of the metrics: a listener thread answering `GET /metrics`. One thread
//! serves up to [`MAX_CONNECTIONS`] connections at once over non-blocking sockets and
//! `poll(2)`, so a client that is silent or slow holds one slot and delays nobody's scrape.
//! What a hostile client can take is bounded:
//!
//! * time: [`REQUEST_DEADLINE`] from its accept to the end of its request head (then it is
//!   answered 408, as far as its socket takes it, and closed), and [`WRITE_DEADLINE`] to take
//!   the whole answer (then it is closed);
//! * memory: [`MAX_REQUEST`] octets of request head (a longer head is answered 431), and the
//!   answer, once per slot;
//! * slots: when all are taken, a new connection still gets one: the connection that has
//!   made least use of its own gives it up — first one whose answer is already sent, then the
//!   oldest that has not finished sending its request, and only when every slot is writing an
//!   answer the oldest of those.
//!
//! Everything but `GET /metrics` is answered with the HTTP status that says why (400, 404,
//! 405, 408, 431, 503) and the connection closed. What happened is counted
//! ([`Endpoint::stats`]) and logged at debug level.

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The OpenMetrics text format, as Prometheus asks for it.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The longest a client has from its accept to the end of its request head.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(3);
/// The longest a client has to take its whole answer, from when the answer is ready.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(3);
/// The longest request head read, the blank line that ends it included.
pub const MAX_REQUEST: usize = 8192;
/// Connections served at once; past it, a new connection takes the slot of another.
pub const MAX_CONNECTIONS: usize = 16;
/// After its answer a connection is read for up to this long (and [`LINGER_OCTETS`]) before
/// it is closed: closing a socket with unread octets resets the connection, and a reset can
/// destroy the answer before the client has read it.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_OCTETS: usize = 64 * 1024;
/// How often the thread looks at its stop flag, and how long it waits after an accept error
/// (EMFILE and the like) before it accepts again.
const POLL: Duration = Duration::from_millis(50);

/// What the endpoint has done since it started.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct EndpointStats {
    /// Connections accepted.
    pub accepted: u64,
    /// Answers written whole, errors included.
    pub answered: u64,
    /// Connections closed to give their slot to a new one.
    pub evicted: u64,
    /// Connections closed at [`REQUEST_DEADLINE`] without a whole request head.
    pub request_timeouts: u64,
    /// Connections closed at [`WRITE_DEADLINE`] before they took their whole answer.
    pub write_timeouts: u64,
    /// Request heads longer than [`MAX_REQUEST`] (answered 431).
    pub too_large: u64,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    answered: AtomicU64,
    evicted: AtomicU64,
    request_timeouts: AtomicU64,
    write_timeouts: AtomicU64,
    too_large: AtomicU64,
}

fn count(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A running metrics endpoint; stops when dropped.
pub struct Endpoint {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<()>>,
}

impl Endpoint {
    /// Listens on `addr` (port 0: any free port, see [`Endpoint::local_addr`]) and answers
    /// each scrape with `render()`: `Ok(text)` in the OpenMetrics format, or `Err(why)` when
    /// the figures cannot be had now (answered 503 with `why`).
    pub fn start(
        addr: SocketAddr,
        render: impl Fn() -> Result<String, String> + Send + 'static,
    ) -> std::io::Result<Endpoint> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let server = Server {
            listener,
            render: Box::new(render),
            counters: counters.clone(),
            conns: Vec::with_capacity(MAX_CONNECTIONS),
            accept_after: None,
        };
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || server.run(&flag))?;
        Ok(Endpoint {
            addr,
            stop,
            counters,
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What it has done so far.
    pub fn stats(&self) -> EndpointStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EndpointStats {
            accepted: get(&c.accepted),
            answered: get(&c.answered),
            evicted: get(&c.evicted),
            request_timeouts: get(&c.request_timeouts),
            write_timeouts: get(&c.write_timeouts),
            too_large: get(&c.too_large),
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

type Render = Box<dyn Fn() -> Result<String, String> + Send>;

/// The listener and its connections, on the endpoint's thread.
struct Server {
    listener: TcpListener,
    render: Render,
    counters: Arc<Counters>,
    conns: Vec<Conn>,
    /// After an accept error, when to accept again.
    accept_after: Option<Instant>,
}

impl Server {
    fn run(mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let listen = self.accept_after.is_none_or(|t| now >= t);
            let wait = self
                .conns
                .iter()
                .map(|c| c.deadline().saturating_duration_since(now))
                .fold(POLL, Duration::min);
            // Rounded up, so that a deadline less than a millisecond away is not polled for
            // again and again with a zero timeout.
            let wait = PollTimeout::from(wait.as_micros().div_ceil(1000) as u16);
            let ready: Vec<PollFlags> = {
                let mut fds = Vec::with_capacity(self.conns.len() + 1);
                let on = if listen {
                    PollFlags::POLLIN
                } else {
                    PollFlags::empty()
                };
                fds.push(PollFd::new(self.listener.as_fd(), on));
                fds.extend(
                    self.conns
                        .iter()
                        .map(|c| PollFd::new(c.stream.as_fd(), c.interest())),
                );
                match poll(&mut fds, wait) {
                    Ok(_) => {}
                    Err(Errno::EINTR) => continue,
                    Err(e) => {
                        tracing::warn!(%e, "metrics endpoint: poll");
                        std::thread::sleep(POLL);
                        continue;
                    }
                }
                fds.iter()
                    .map(|f| f.revents().unwrap_or(PollFlags::empty()))
                    .collect()
            };
            for (conn, events) in self.conns.iter_mut().zip(&ready[1..]) {
                if !events.is_empty() {
                    conn.advance(&*self.render, &self.counters);
                }
            }
            let now = Instant::now();
            for conn in &mut self.conns {
                conn.expire(now, &self.counters);
            }
            self.conns.retain(|c| !matches!(c.state, State::Closed));
            if !ready[0].is_empty() {
                self.accept();
            }
        }
    }

    /// Takes the connections waiting, each into a slot of its own; at most a slot's worth
    /// per turn, so that a flood of connections does not keep the open ones from being served.
    fn accept(&mut self) {
        for _ in 0..MAX_CONNECTIONS {
            let (stream, peer) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::ConnectionAborted | ErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                Err(e) => {
                    // EMFILE and the like: say so, and do not spin on it.
                    tracing::warn!(%e, "metrics endpoint: accept");
                    self.accept_after = Some(Instant::now() + POLL);
                    return;
                }
            };
            self.accept_after = None;
            count(&self.counters.accepted);
            if let Err(e) = stream.set_nonblocking(true) {
                tracing::debug!(%peer, %e, "metrics connection");
                continue;
            }
            if self.conns.len() >= MAX_CONNECTIONS {
                if let Some(i) = victim(&self.conns) {
                    let old = self.conns.swap_remove(i);
                    count(&self.counters.evicted);
                    tracing::debug!(
                        peer = %old.peer,
                        state = old.state.name(),
                        "metrics connection evicted to make room"
                    );
                }
            }
            let now = Instant::now();
            let mut conn = Conn {
                stream,
                peer,
                accepted: now,
                state: State::Reading {
                    head: Vec::new(),
                    deadline: now + REQUEST_DEADLINE,
                },
            };
            // A scraper sends its request with its connection: answer it before anything
            // else can take its slot.
            conn.advance(&*self.render, &self.counters);
            if !matches!(conn.state, State::Closed) {
                self.conns.push(conn);
            }
        }
    }
}

/// The connection that gives up its slot: one whose answer is sent, else the oldest still
/// sending its request, else the oldest taking its answer.
fn victim(conns: &[Conn]) -> Option<usize> {
    let rank = |c: &Conn| match c.state {
        State::Lingering { .. } | State::Closed => 0,
        State::Reading { .. } => 1,
        State::Writing { .. } => 2,
    };
    conns
        .iter()
        .enumerate()
        .min_by_key(|(_, c)| (rank(c), c.accepted))
        .map(|(i, _)| i)
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    accepted: Instant,
    state: State,
}

enum State {
    /// Reading the request head.
    Reading {
        head: Vec<u8>,
        deadline: Instant,
    },
    /// Writing the answer.
    Writing {
        out: Vec<u8>,
        sent: usize,
        deadline: Instant,
    },
    /// Answer sent and the write side shut: reading what else the client sends until it
    /// closes, so that closing does not reset the answer.
    Lingering {
        drained: usize,
        deadline: Instant,
    },
    Closed,
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::Reading { .. } => "reading",
            State::Writing { .. } => "writing",
            State::Lingering { .. } => "lingering",
            State::Closed => "closed",
        }
    }
}

impl Conn {
    fn interest(&self) -> PollFlags {
        match self.state {
            State::Writing { .. } => PollFlags::POLLOUT,
            _ => PollFlags::POLLIN,
        }
    }

    fn deadline(&self) -> Instant {
        match self.state {
            State::Reading { deadline, .. }
            | State::Writing { deadline, .. }
            | State::Lingering { deadline, .. } => deadline,
            State::Closed => self.accepted,
        }
    }

    /// Does what the socket lets it do now without waiting.
    fn advance(&mut self, render: &dyn Fn() -> Result<String, String>, counters: &Counters) {
        if let Err(e) = self.step(render, counters) {
            tracing::debug!(peer = %self.peer, %e, state = self.state.name(), "metrics connection");
            self.state = State::Closed;
        }
    }

    fn step(
        &mut self,
        render: &dyn Fn() -> Result<String, String>,
        counters: &Counters,
    ) -> std::io::Result<()> {
        loop {
            match &mut self.state {
                State::Reading { head, .. } => {
                    if !read_head(&mut self.stream, head)? {
                        return Ok(());
                    }
                    let request = classify(head);
                    if request == Request::TooLarge {
                        count(&counters.too_large);
                    }
                    self.state = State::Writing {
                        out: answer(request, render),
                        sent: 0,
                        deadline: Instant::now() + WRITE_DEADLINE,
                    };
                }
                State::Writing { out, sent, .. } => {
                    if !write_more(&mut self.stream, out, sent)? {
                        return Ok(());
                    }
                    count(&counters.answered);
                    let _ = self.stream.shutdown(std::net::Shutdown::Write);
                    self.state = State::Lingering {
                        drained: 0,
                        deadline: Instant::now() + LINGER,
                    };
                }
                State::Lingering { drained, .. } => {
                    let mut buf = [0u8; 4096];
                    loop {
                        match self.stream.read(&mut buf) {
                            Ok(0) => break,
                            Ok(n) => {
                                *drained += n;
                                if *drained >= LINGER_OCTETS {
                                    break;
                                }
                            }
                            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                            Err(e) if e.kind() == ErrorKind::Interrupted => {}
                            Err(e) => return Err(e),
                        }
                    }
                    self.state = State::Closed;
                }
                State::Closed => return Ok(()),
            }
        }
    }

    /// Closes the connection if its deadline has passed.
    fn expire(&mut self, now: Instant, counters: &Counters) {
        if matches!(self.state, State::Closed) || now < self.deadline() {
            return;
        }
        match self.state {
            State::Reading { .. } => {
                count(&counters.request_timeouts);
                tracing::debug!(peer = %self.peer, "metrics request not whole within its deadline");
                // One try, without waiting: the client is closed whether it takes it or not.
                let _ = self.stream.write(&reply(
                    "408 Request Timeout",
                    "text/plain",
                    "request not whole in time\n",
                ));
            }
            State::Writing { .. } => {
                count(&counters.write_timeouts);
                tracing::debug!(peer = %self.peer, "metrics answer not taken within its deadline");
            }
            State::Lingering { .. } | State::Closed => {}
        }
        self.state = State::Closed;
    }
}

/// Reads what has arrived of the request head; true once it is whole, [`MAX_REQUEST`]
/// octets long, or the client has sent all it will (what lies beyond is not read: a GET has
/// no body worth reading).
fn read_head(conn: &mut TcpStream, head: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut buf = [0u8; 1024];
    loop {
        if head_ends(head) || head.len() >= MAX_REQUEST {
            return Ok(true);
        }
        let room = (MAX_REQUEST - head.len()).min(buf.len());
        match conn.read(&mut buf[..room]) {
            Ok(0) => return Ok(true),
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn head_ends(head: &[u8]) -> bool {
    head.windows(4).any(|w| w == b"\r\n\r\n")
}

/// Writes what the socket takes now; true once all of `out` is written.
fn write_more(conn: &mut TcpStream, out: &[u8], sent: &mut usize) -> std::io::Result<bool> {
    while *sent < out.len() {
        match conn.write(&out[*sent..]) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => *sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// What one request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    Metrics,
    NotFound,
    WrongMethod,
    Bad,
    TooLarge,
}

fn answer(request: Request, render: &dyn Fn() -> Result<String, String>) -> Vec<u8> {
    match request {
        Request::Metrics => match render() {
            Ok(text) => reply("200 OK", CONTENT_TYPE, &text),
            Err(why) => reply("503 Service Unavailable", "text/plain", &format!("{why}\n")),
        },
        Request::NotFound => reply("404 Not Found", "text/plain", "metrics are at /metrics\n"),
        Request::WrongMethod => reply("405 Method Not Allowed", "text/plain", "GET only\n"),
        Request::Bad => reply("400 Bad Request", "text/plain", "not an HTTP request\n"),
        Request::TooLarge => reply(
            "431 Request Header Fields Too Large",
            "text/plain",
            &format!("request head over {MAX_REQUEST} octets\n"),
        ),
    }
}

fn reply(status: &str, content_type: &str, body: &str) -> Vec<u8> {
    let allow = if status.starts_with("405") {
        "Allow: GET\r\n"
    } else {
        ""
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// What a head read by [`read_head`] asks for: a head cut at [`MAX_REQUEST`] is too large if
/// its request line is whole and well-formed, and not HTTP otherwise.
fn classify(head: &[u8]) -> Request {
    if head_ends(head) || head.len() < MAX_REQUEST {
        return parse(head);
    }
    if !head.contains(&b'\n') {
        return Request::Bad;
    }
    match parse(head) {
        Request::Bad => Request::Bad,
        _ => Request::TooLarge,
    }
}

fn parse(head: &[u8]) -> Request {
    let Some(line) = head.split(|&b| b == b'\n').next() else {
        return Request::Bad;
    };
    let Ok(line) = std::str::from_utf8(line) else {
        return Request::Bad;
    };
    let mut words = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Request::Bad;
    };
    if !version.starts_with("HTTP/1.") {
        return Request::Bad;
    }
    let path = target.split('?').next().unwrap_or(target);
    match (method, path) {
        ("GET", "/metrics") => Request::Metrics,
        ("GET", _) => Request::NotFound,
        _ => Request::WrongMethod,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, request: &[u8]) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(request).unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn answers_each_kind_of_request_with_its_status() {
        let ep = Endpoint::start("127.0.0.1:0".parse().unwrap(), || {
            Ok("# TYPE x counter\nx_total 1\n# EOF\n".into())
        })
        .unwrap();
        let a = ep.local_addr();
        let ok = get(a, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains(CONTENT_TYPE) && ok.ends_with("x_total 1\n# EOF\n"),
            "{ok}"
        );
        assert!(get(a, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 200"));
        assert!(get(a, b"GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        let post = get(a, b"POST /metrics HTTP/1.1\r\n\r\n");
        assert!(
            post.starts_with("HTTP/1.1 405") && post.contains("Allow: GET"),
            "{post}"
        );
        assert!(get(a, b"\x16\x03\x01 junk\r\n\r\n").starts_with("HTTP/1.1 400"));
        assert!(get(a, &[b'A'; MAX_REQUEST]).starts_with("HTTP/1.1 400"));
    }

    #[test]
    fn a_render_failure_is_503_with_the_reason() {
        let ep = Endpoint::start("127.0.0.1:0".parse().unwrap(), || {
            Err("datapath not answering".into())
        })
        .unwrap();
        let r = get(ep.local_addr(), b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.1 503") && r.ends_with("datapath not answering\n"),
            "{r}"
        );
    }

    #[test]
    fn a_silent_client_is_let_go_and_the_next_one_served() {
        let ep = Endpoint::start("127.0.0.1:0".parse().unwrap(), || Ok("# EOF\n".into())).unwrap();
        let silent = TcpStream::connect(ep.local_addr()).unwrap();
        let r = get(ep.local_addr(), b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        drop(silent);
    }

    fn start(render: impl Fn() -> Result<String, String> + Send + 'static) -> Endpoint {
        Endpoint::start("127.0.0.1:0".parse().unwrap(), render).unwrap()
    }

    /// A scrape of /metrics, answered 200 within 2 s.
    fn scrape_within_2s(addr: SocketAddr) {
        let t = Instant::now();
        let r = get(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "scrape took {:?}",
            t.elapsed()
        );
    }

    /// Until `f` holds or 5 s have passed.
    fn eventually(f: impl Fn() -> bool) -> bool {
        let t = Instant::now();
        while !f() {
            if t.elapsed() > Duration::from_secs(5) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    #[test]
    fn silent_connections_do_not_delay_a_scrape_even_past_the_bound() {
        let ep = start(|| Ok("# EOF\n".into()));
        let a = ep.local_addr();
        let mut silent: Vec<_> = (0..8).map(|_| TcpStream::connect(a).unwrap()).collect();
        for _ in 0..3 {
            scrape_within_2s(a);
        }
        silent.extend((0..MAX_CONNECTIONS + 4).map(|_| TcpStream::connect(a).unwrap()));
        for _ in 0..3 {
            scrape_within_2s(a);
        }
        // Every connection past the bound took the slot of a silent one.
        let want = (8 + MAX_CONNECTIONS + 4 + 6 - MAX_CONNECTIONS) as u64;
        assert!(
            eventually(|| ep.stats().accepted == want + MAX_CONNECTIONS as u64),
            "{:?}",
            ep.stats()
        );
        let s = ep.stats();
        assert!(s.evicted >= want - 6 && s.evicted <= want, "{s:?}");
        assert_eq!(s.answered, 6, "{s:?}");
        drop(silent);
    }

    #[test]
    fn a_slow_client_is_cut_at_its_deadline() {
        let ep = start(|| Ok("# EOF\n".into()));
        let a = ep.local_addr();
        let mut slow = TcpStream::connect(a).unwrap();
        let mut reader = slow.try_clone().unwrap();
        let began = Instant::now();
        // One octet per 100 ms of a head that never ends, until the endpoint closes.
        let writer = std::thread::spawn(move || {
            let head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ";
            for &b in head.iter().chain(std::iter::repeat(&b'a')) {
                if slow.write_all(&[b]).is_err() || began.elapsed() > Duration::from_secs(10) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        // Scrapes are served meanwhile.
        std::thread::sleep(Duration::from_millis(300));
        scrape_within_2s(a);
        reader
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut out = Vec::new();
        // Closed, with a 408 if it arrived before the reset.
        let _ = reader.read_to_end(&mut out);
        let cut = began.elapsed();
        assert!(
            cut >= REQUEST_DEADLINE - Duration::from_millis(100)
                && cut < REQUEST_DEADLINE + Duration::from_secs(1),
            "cut after {cut:?}"
        );
        assert!(
            out.is_empty() || out.starts_with(b"HTTP/1.1 408"),
            "{out:?}"
        );
        writer.join().unwrap();
        assert_eq!(ep.stats().request_timeouts, 1, "{:?}", ep.stats());
    }

    #[test]
    fn a_request_head_over_the_bound_is_refused() {
        let ep = start(|| Ok("# EOF\n".into()));
        let mut request = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
        request.extend(std::iter::repeat_n(b'a', MAX_REQUEST));
        request.extend_from_slice(b"\r\n\r\n");
        let r = get(ep.local_addr(), &request);
        assert!(r.starts_with("HTTP/1.1 431"), "{r}");
        assert!(r.ends_with(&format!("over {MAX_REQUEST} octets\n")), "{r}");
        assert_eq!(ep.stats().too_large, 1);
        // A head that just fits is served.
        let mut request = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
        let pad = MAX_REQUEST - request.len() - 4;
        request.extend(std::iter::repeat_n(b'a', pad));
        request.extend_from_slice(b"\r\n\r\n");
        assert_eq!(request.len(), MAX_REQUEST);
        let r = get(ep.local_addr(), &request);
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    }

    #[test]
    fn a_client_that_does_not_take_its_answer_is_cut_at_the_write_deadline() {
        // Larger than what the two sockets' buffers hold.
        let ep = start(|| Ok("x".repeat(16 << 20)));
        let a = ep.local_addr();
        let mut stuck = TcpStream::connect(a).unwrap();
        stuck.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let began = Instant::now();
        // The answer is written for a while; meanwhile another client is served whole.
        std::thread::sleep(Duration::from_millis(300));
        let t = Instant::now();
        let r = get(a, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200") && r.len() > 16 << 20);
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        assert!(
            eventually(|| ep.stats().write_timeouts == 1),
            "{:?}",
            ep.stats()
        );
        let cut = began.elapsed();
        assert!(
            cut >= WRITE_DEADLINE && cut < WRITE_DEADLINE + Duration::from_secs(2),
            "cut after {cut:?}"
        );
        drop(stuck);
    }

    #[test]
    fn slots_go_first_from_connections_that_have_their_answer_then_from_the_oldest_reader() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let t0 = Instant::now();
        let conn = |state: State, age: u64| {
            let _client = TcpStream::connect(a).unwrap();
            let (stream, peer) = l.accept().unwrap();
            Conn {
                stream,
                peer,
                accepted: t0 + Duration::from_millis(age),
                state,
            }
        };
        let reading = || State::Reading {
            head: Vec::new(),
            deadline: t0,
        };
        let writing = || State::Writing {
            out: Vec::new(),
            sent: 0,
            deadline: t0,
        };
        let lingering = || State::Lingering {
            drained: 0,
            deadline: t0,
        };
        let conns = vec![conn(writing(), 0), conn(reading(), 2), conn(reading(), 1)];
        assert_eq!(victim(&conns), Some(2));
        let mut conns = conns;
        conns.push(conn(lingering(), 5));
        assert_eq!(victim(&conns), Some(3));
        let conns = vec![conn(writing(), 3), conn(writing(), 1)];
        assert_eq!(victim(&conns), Some(1));
        assert_eq!(victim(&[]), None);
    }
}
