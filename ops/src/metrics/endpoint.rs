//! The HTTP side of the metrics: a listener thread answering `GET /metrics`, one connection
//! at a time. A scraper makes one request every few seconds, so serving in turn costs
//! nothing, and it bounds what a hostile client can take: one connection, [`IO_DEADLINE`]
//! for its whole request and answer, [`MAX_REQUEST`] octets of request. Everything else is
//! answered with the HTTP status that says why (400, 404, 405, 503) and the connection closed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The OpenMetrics text format, as Prometheus asks for it.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The longest a connection is served: request read and answer written.
pub const IO_DEADLINE: Duration = Duration::from_secs(3);
/// The longest request head read.
pub const MAX_REQUEST: usize = 8192;
/// How often the idle listener looks at its stop flag.
const POLL: Duration = Duration::from_millis(50);

/// A running metrics endpoint; stops when dropped.
pub struct Endpoint {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
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
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || serve(&listener, &flag, &render))?;
        Ok(Endpoint {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
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

fn serve(listener: &TcpListener, stop: &AtomicBool, render: &dyn Fn() -> Result<String, String>) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((conn, peer)) => {
                if let Err(e) = answer(conn, render) {
                    tracing::debug!(%peer, %e, "metrics request");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) => {
                // EMFILE and the like: say so, and do not spin on it.
                tracing::warn!(%e, "metrics endpoint: accept");
                std::thread::sleep(POLL);
            }
        }
    }
}

/// What one request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    Metrics,
    NotFound,
    WrongMethod,
    Bad,
}

fn answer(mut conn: TcpStream, render: &dyn Fn() -> Result<String, String>) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    let deadline = Instant::now() + IO_DEADLINE;
    let head = read_head(&mut conn, deadline)?;
    let (status, content_type, body) = match parse(&head) {
        Request::Metrics => match render() {
            Ok(text) => ("200 OK", CONTENT_TYPE, text),
            Err(why) => ("503 Service Unavailable", "text/plain", format!("{why}\n")),
        },
        Request::NotFound => (
            "404 Not Found",
            "text/plain",
            "metrics are at /metrics\n".into(),
        ),
        Request::WrongMethod => ("405 Method Not Allowed", "text/plain", "GET only\n".into()),
        Request::Bad => (
            "400 Bad Request",
            "text/plain",
            "not an HTTP request\n".into(),
        ),
    };
    let allow = if status.starts_with("405") {
        "Allow: GET\r\n"
    } else {
        ""
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        body.len()
    );
    write_all(&mut conn, reply.as_bytes(), deadline)?;
    write_all(&mut conn, body.as_bytes(), deadline)?;
    let _ = conn.shutdown(std::net::Shutdown::Write);
    Ok(())
}

/// The request head, up to the blank line, at most [`MAX_REQUEST`] octets (what lies
/// beyond is not read: a GET has no body worth reading).
fn read_head(conn: &mut TcpStream, deadline: Instant) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
        conn.set_read_timeout(Some(left(deadline)?))?;
        let n = conn.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n.min(MAX_REQUEST - head.len())]);
    }
    Ok(head)
}

fn write_all(conn: &mut TcpStream, mut data: &[u8], deadline: Instant) -> std::io::Result<()> {
    while !data.is_empty() {
        conn.set_write_timeout(Some(left(deadline)?))?;
        let n = conn.write(data)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        data = &data[n..];
    }
    Ok(())
}

fn left(deadline: Instant) -> std::io::Result<Duration> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        Err(std::io::ErrorKind::TimedOut.into())
    } else {
        Ok(d)
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
}
