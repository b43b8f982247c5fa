//! `mpa-peer listen`: the blocking kernel-TCP Responder (accept, the startup phase, then
//! ULPDUs digested and classified, one thread per connection).

use super::*;

/// Serves connections; returns whether all ended without error.
pub(crate) fn listen(a: ListenArgs) -> anyhow::Result<bool> {
    let mut private_data = Vec::new();
    if let Some(ad) = &a.advertise {
        private_data.extend_from_slice(&ad.emit());
    }
    private_data.extend_from_slice(a.private_data.as_deref().unwrap_or("").as_bytes());
    let cfg = config(&a.common, private_data, 2)?;
    let region = a.advertise.as_ref().map(RegionReport::from);
    let listener = TcpListener::bind(a.bind).with_context(|| format!("bind {}", a.bind))?;
    // Tests and scripts read the bound address (with --bind ...:0) from this line.
    eprintln!("mpa-peer: listening on {}", listener.local_addr()?);
    let (tx, rx) = mpsc::channel::<bool>();
    let mut started = 0u64;
    let timeout = Duration::from_secs(a.common.timeout);
    while a.connections == 0 || started < a.connections {
        let (sock, peer) = accept_within(&listener, a.accept_timeout)?;
        started += 1;
        let cfg = cfg.clone();
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut report = serve(sock, peer, &cfg, timeout);
            report.region = region;
            let ok = report.error.is_none();
            emit(&report);
            if let Some(e) = &report.error {
                eprintln!("mpa-peer: {peer}: {e}");
            }
            let _ = tx.send(ok);
        });
    }
    drop(tx);
    // Wait for every connection thread, not just the first failure.
    Ok(rx.iter().filter(|ok| !ok).count() == 0)
}

/// The next connection, waiting at most `secs` seconds (0: no limit).
fn accept_within(listener: &TcpListener, secs: u64) -> anyhow::Result<(TcpStream, SocketAddr)> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    if secs > 0 {
        let deadline = std::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                anyhow::bail!("no connection within --accept-timeout {secs} s");
            }
            let ms = PollTimeout::try_from(left.as_millis().clamp(1, 60_000) as u64)
                .unwrap_or(PollTimeout::MAX);
            let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, ms) {
                Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
                Ok(_) => break,
                Err(e) => return Err(e).context("poll on the listener"),
            }
        }
    }
    listener.accept().context("accept")
}

fn serve(sock: TcpStream, peer: SocketAddr, cfg: &EndpointConfig, timeout: Duration) -> Report {
    let t0 = Instant::now();
    let mut report = Report {
        peer: peer.to_string(),
        ..Report::default()
    };
    let _ = sock.set_nodelay(true);
    let mut digest = 0u32;
    let mut op: Option<&'static str> = None;
    let r = (|| -> Result<(), EndpointError> {
        let mut s = MpaStream::accept(sock, cfg)?;
        report.negotiated(s.negotiated());
        let version = s.negotiated().ddp_rdmap_version;
        while let Some(_n) = s.recv_with(Some(timeout), |u| {
            let mut head = [0u8; UNTAGGED_HEADER_LEN];
            let k = u.copy_prefix(&mut head);
            let this = classify(&head[..k], version);
            op = match op {
                None => Some(this),
                Some(o) if o == this => Some(o),
                Some(_) => Some("mixed"),
            };
            for p in u.pieces() {
                digest = crc32c_append(digest, p);
            }
        })? {}
        let st = s.stats();
        report.ulpdus = st.ulpdus_rx;
        report.ulpdu_bytes = st.ulpdu_octets_rx;
        Ok(())
    })();
    if let Err(e) = r {
        report.fail(&e);
    }
    report.op = op;
    report.ulpdu_digest = format!("{digest:08x}");
    report.seconds = t0.elapsed().as_secs_f64();
    report
}

/// What a received ULPDU is, from its first octets: "write" (tagged RDMA Write), "send"
/// (untagged Send on QN 0) or "other".
fn classify(head: &[u8], version: u8) -> &'static str {
    match DdpRepr::parse(head, version) {
        Ok((
            DdpRepr::Tagged {
                opcode: RdmapOpcode::RdmaWrite,
                ..
            },
            _,
        )) => "write",
        Ok((
            DdpRepr::Untagged {
                opcode: RdmapOpcode::Send,
                qn: queue::SEND,
                ..
            },
            _,
        )) => "send",
        _ => "other",
    }
}
