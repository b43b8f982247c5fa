//! Hostile clients of the datapath's control socket (`length u32 BE | JSON`, `mpa_ctl_proto`)
//! and exhaustion of its budgets: each a script of a class in [`super::classes::CLASSES`]
//! (the class's hostile connection only has to live on beside them). A witness client
//! connected before the hostile one must stay answered, and the datapath's client count must
//! come back to what it was.

use super::{Ctx, PD_OTHER};
use anyhow::{anyhow, bail, Context, Result};
use mpa_app::{Consumer, ConsumerError};
use mpa_control::datapath_client::DatapathClient;
use mpa_ctl_proto::client::ClientError;
use mpa_ctl_proto::{encode_message, handshake, read_message, ErrorCode, Message, MAX_MESSAGE};
use mpa_harness::datapath::{stats, temp_path};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

pub(super) const WAIT: Duration = Duration::from_secs(5);

/// A client past the Hello exchange.
fn hello(socket: &Path) -> Result<UnixStream> {
    let mut s = UnixStream::connect(socket).context("control connect")?;
    s.set_read_timeout(Some(WAIT))?;
    s.set_write_timeout(Some(WAIT))?;
    handshake(&mut s, "mpa-bench hostile").context("control Hello")?;
    Ok(s)
}

/// Waits until the datapath closes `s` without a word; which way it closed.
fn expect_closed(mut s: UnixStream) -> Result<&'static str> {
    let mut buf = [0u8; 4096];
    match s.read(&mut buf) {
        Ok(0) => Ok("closed (end of stream)"),
        Ok(n) => bail!("the client closed without an answer, got {n} octets"),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => Ok("closed (reset)"),
        Err(e) => bail!("the client closed within {WAIT:?}, got {e}"),
    }
}

/// Runs `hostile` beside a witness client; the witness must be answered after it and the
/// client count must be back where it was. Notes what `hostile` returned.
pub(super) fn witnessed(c: &mut Ctx, hostile: impl FnOnce(&Path) -> Result<String>) -> Result<()> {
    let mut w = DatapathClient::connect(&c.env.socket, WAIT)?;
    let before = stats(&mut w)?.control.clients;
    let what = hostile(&c.env.socket)?;
    // A client the hostile one closed goes asynchronously (its reader sees the end).
    let t0 = std::time::Instant::now();
    loop {
        let after = stats(&mut w).context("the witness client to be answered")?;
        if after.control.clients == before {
            break;
        }
        if t0.elapsed() > WAIT {
            bail!(
                "{before} control clients after the hostile one, got {}",
                after.control.clients
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    c.note = format!("{what}; witness answered, {before} clients before and after; ");
    Ok(())
}

/// A length prefix one octet over MAX_MESSAGE: the datapath closes that client unread.
pub fn length_over_max(c: &mut Ctx) -> Result<()> {
    witnessed(c, |p| {
        let mut s = hello(p)?;
        // The prefix alone (octets after it could meet a closed socket: EPIPE).
        s.write_all(&(MAX_MESSAGE as u32 + 1).to_be_bytes())?;
        expect_closed(s).map(str::to_string)
    })
}

/// A well-framed message that is not JSON: the datapath closes that client (no answer: the
/// request id is unknown).
pub fn malformed_json(c: &mut Ctx) -> Result<()> {
    witnessed(c, |p| {
        let mut s = hello(p)?;
        let body = br#"{"GetStats": {"id": 1"#;
        s.write_all(&(body.len() as u32).to_be_bytes())?;
        s.write_all(body)?;
        expect_closed(s).map(str::to_string)
    })
}

/// Another user (uid/gid 65534) connecting: refused by the socket file's mode 0600
/// (EACCES); with the mode opened to 0666, refused by the datapath's own check (SO_PEERCRED:
/// Error Forbidden, then closed). The probe runs as a child process (`--probe-socket`).
pub fn other_uid(c: &mut Ctx) -> Result<()> {
    witnessed(c, |p| {
        let mode = std::fs::metadata(p)?.permissions().mode() & 0o777;
        if mode != 0o600 {
            bail!("the control socket's mode 0600, got {mode:o}");
        }
        let first = probe_as_nobody(p)?;
        if first != "refused 13" {
            bail!("connect refused with EACCES (13), got `{first}`");
        }
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o666))?;
        let second = probe_as_nobody(p);
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600))?;
        let second = second?;
        if second != "answered Forbidden, closed" {
            bail!("through mode 0666: Error Forbidden then closed, got `{second}`");
        }
        Ok(format!("mode 0600: {first}; mode 0666: {second}"))
    })
}

/// `mpa-bench`, whose hidden `hostile --probe-…` modes are the probes: a client of another
/// user or without CAP_NET_ADMIN is another process.
pub(super) fn bench_program() -> std::path::PathBuf {
    mpa_harness::bin("mpa-bench")
}

/// Runs `mpa-bench hostile --probe-socket` as uid/gid 65534; its one line.
fn probe_as_nobody(p: &Path) -> Result<String> {
    let out = std::process::Command::new(bench_program())
        .args(["hostile", "--probe-socket"])
        .arg(p)
        .uid(65534)
        .gid(65534)
        .output()
        .context("the probe as uid 65534")?;
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if line.is_empty() {
        bail!(
            "the probe said nothing: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(line)
}

/// The probe (run as another user): connects, reads what the datapath says, prints one line.
pub fn probe(p: &Path) -> String {
    let mut s = match UnixStream::connect(p) {
        Ok(s) => s,
        Err(e) => return format!("refused {}", e.raw_os_error().unwrap_or(-1)),
    };
    let _ = s.set_read_timeout(Some(WAIT));
    let first = match read_message(&mut s) {
        Ok(Message::Error { code, .. }) => format!("answered {code:?}"),
        Ok(m) => return format!("answered {m:?}"),
        Err(e) => return format!("no answer: {e}"),
    };
    match expect_closed(s) {
        Ok(_) => format!("{first}, closed"),
        Err(e) => format!("{first}, {e}"),
    }
}

/// The idle probe (`--probe-idle`): a client that says Hello, holds `nothing` or a `region`
/// (4 KiB in a domain of its own), then says nothing for `silent`. Prints the message of the
/// datapath's `Error` (id 0) when it closes the client meanwhile, `served` when a request
/// after the silence is answered, or what happened instead.
pub fn probe_idle(p: &Path, hold: &str, silent: Duration) -> String {
    let run = || -> Result<String> {
        let mut s = hello(p)?;
        match hold {
            "nothing" => {}
            "region" => {
                let pd = 0x7_0000 + std::process::id() % 0x1_0000;
                let create = Message::CreateRegion {
                    id: 1,
                    len: 4096,
                    pd,
                    remote_write: true,
                    remote_read: false,
                };
                s.write_all(&encode_message(&create)?)?;
                let (answer, _fds) = mpa_ctl_proto::read_message_with_fds(&s)?;
                if !matches!(answer, Message::RegionCreated { .. }) {
                    bail!("CreateRegion answered {answer:?}");
                }
            }
            other => bail!("no such hold: {other}"),
        }
        s.set_read_timeout(Some(silent))?;
        match read_message(&mut s) {
            Ok(Message::Error { id: 0, message, .. }) => return Ok(message),
            Ok(m) => bail!("unasked: {m:?}"),
            Err(mpa_ctl_proto::ProtoError::Io(e))
                if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => bail!("{e}"),
        }
        s.set_read_timeout(Some(WAIT))?;
        s.write_all(&encode_message(&Message::get_stats(2))?)?;
        match read_message(&mut s)? {
            Message::Stats { .. } => Ok("served".into()),
            m => Ok(format!("answered {m:?}")),
        }
    };
    run().unwrap_or_else(|e| format!("failed: {e:#}"))
}

/// Eight descriptors (SCM_RIGHTS) attached to a GetStats request: answered, and none of them
/// stays open in the datapath (it runs in this process: /proc/self/fd).
pub fn stray_descriptors(c: &mut Ctx) -> Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    witnessed(c, |p| {
        let path = temp_path("hostile-scm");
        let file = std::fs::File::create(&path)?;
        let _ = std::fs::remove_file(&path);
        let s = hello(p)?;
        let frame = encode_message(&Message::get_stats(1))?;
        let fds = [file.as_raw_fd(); 8];
        sendmsg::<()>(
            s.as_raw_fd(),
            &[std::io::IoSlice::new(&frame)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            None,
        )
        .context("sendmsg with SCM_RIGHTS")?;
        match read_message(&mut &s)? {
            Message::Stats { id: 1, .. } => {}
            m => bail!("Stats for the request, got {m:?}"),
        }
        let open = open_to(&path)?;
        drop(file);
        let left = open_to(&path)?;
        if open != 1 || left != 0 {
            bail!(
                "only our own descriptor open (1, then 0 after closing it), got {open} then {left}"
            );
        }
        // Our end closed for writing: the datapath's reader ends, the client goes.
        s.shutdown(std::net::Shutdown::Write)?;
        expect_closed(s)?;
        Ok("8 descriptors with GetStats: answered, none kept".into())
    })
}

/// Descriptors of this process open to `path` (deleted).
fn open_to(path: &Path) -> Result<usize> {
    let want = path.to_string_lossy().to_string();
    let mut n = 0;
    for e in std::fs::read_dir("/proc/self/fd")? {
        if let Ok(t) = std::fs::read_link(e?.path()) {
            if t.to_string_lossy().starts_with(&want) {
                n += 1;
            }
        }
    }
    Ok(n)
}

/// A protection domain of the region-budget class's own client (the others belong to the
/// runner's consumer, which alone may create regions in them).
const PD_BUDGET: u32 = PD_OTHER + 100;

/// A region one octet beyond the datapath's region budget: Error Limit; a small one still
/// fits afterwards.
pub fn region_budget(c: &mut Ctx) -> Result<()> {
    witnessed(c, |p| {
        let mut con = Consumer::connect(p, WAIT)?;
        let used: u64 = con.regions(None)?.iter().map(|r| r.len).sum();
        let max = mpa_datapath::server::DEFAULT_MAX_REGION_BYTES;
        let over = max - used + 1;
        match con.create_region(over, PD_BUDGET, true, false) {
            Err(ConsumerError::Client(ClientError::Refused {
                code: ErrorCode::Limit,
                ..
            })) => {}
            Err(e) => bail!("Error Limit for {over} octets, got {e}"),
            Ok(r) => bail!(
                "Error Limit for {over} octets, got region {:#x}",
                r.info().stag
            ),
        }
        let small = con
            .create_region(4096, PD_BUDGET, true, false)
            .map_err(|e| anyhow!("a 4096-octet region after the refusal: {e}"))?;
        con.destroy_region(small.info().stag)?;
        Ok(format!(
            "{over} octets ({used} in use of {max}): Error Limit; 4096 octets: created"
        ))
    })
}

/// A client that sends GetStats requests and never reads: its queue of answers stays within
/// the datapath's bound (32 MiB, then answers are dropped and counted in
/// `control.messages_dropped`), and the witness is answered all along.
pub fn flood_unread(c: &mut Ctx) -> Result<()> {
    const BOUND: u64 = 32 << 20;
    witnessed(c, |p| {
        let mut w = DatapathClient::connect(p, WAIT)?;
        let dropped0 = stats(&mut w)?.control.messages_dropped;
        let s = hello(p)?;
        // Blocking writes (a timeout could cut a frame); shutdown() ends them.
        let flood = {
            let mut s = s.try_clone()?;
            s.set_write_timeout(None)?;
            std::thread::spawn(move || -> u64 {
                let mut sent = 0u64;
                while let Ok(f) = encode_message(&Message::get_stats(sent + 1)) {
                    if s.write_all(&f).is_err() {
                        break;
                    }
                    sent += 1;
                }
                sent
            })
        };
        let t0 = std::time::Instant::now();
        let (mut peak, mut answers, mut dropped) = (0u64, 0u64, 0u64);
        while t0.elapsed() < Duration::from_secs(20) {
            let st = stats(&mut w).context("the witness answered during the flood")?;
            answers += 1;
            peak = peak.max(st.control.queued_octets);
            dropped = st.control.messages_dropped - dropped0;
            if dropped > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = s.shutdown(std::net::Shutdown::Both);
        let sent = flood.join().map_err(|_| anyhow!("flood thread panicked"))?;
        drop(s);
        if dropped == 0 {
            bail!("answers dropped once the queue holds its bound, none in 20 s ({sent} requests)");
        }
        // The bound admits one message past it only into an empty queue.
        if peak > BOUND {
            bail!("at most {BOUND} octets queued, got {peak}");
        }
        // The flooder's answers go when it does: wait until its client is gone.
        let t1 = std::time::Instant::now();
        loop {
            let q = stats(&mut w)?.control.queued_octets;
            if q < 1 << 20 {
                break;
            }
            if t1.elapsed() > WAIT {
                bail!("the flooder's queue freed after it closed, {q} octets still queued");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(format!(
            "{sent} requests unread: {dropped} answers dropped, at most {peak} octets queued (bound {BOUND}), witness answered {answers} times during the flood"
        ))
    })
}

/// One client subscribing to domain after domain: each subscription maps a completion ring
/// per worker, so past [`mpa_datapath::server::MAX_SUBSCRIPTIONS_PER_CLIENT`] the next is
/// refused with `Limit`; re-subscribing to a domain it holds is not a new one, and what it
/// held goes with it.
pub fn subscription_flood(c: &mut Ctx) -> Result<()> {
    use mpa_datapath::server::MAX_SUBSCRIPTIONS_PER_CLIENT as MAX;
    witnessed(c, |p| {
        let mut consumer = Consumer::connect(p, WAIT)?;
        // Domains no class uses.
        let first = 0x5_0000u32;
        for pd in first..first + MAX as u32 {
            consumer
                .subscribe(pd)
                .with_context(|| format!("subscription {} of {MAX}", pd - first + 1))?;
        }
        match consumer.subscribe(first + MAX as u32) {
            Err(ConsumerError::Client(ClientError::Refused {
                code: ErrorCode::Limit,
                ..
            })) => {}
            other => bail!("subscription {} refused with Limit, got {other:?}", MAX + 1),
        }
        consumer
            .subscribe(first)
            .context("re-subscribing to a domain held")?;
        drop(consumer);
        Ok(format!(
            "{MAX} subscriptions, the next refused (Limit), a re-subscription taken"
        ))
    })
}

/// The datapath's memory budget exhausted (docs/limits.md): clients subscribe to domain after
/// domain until a subscription is refused for want of room (`Limit`, the budget named); then
/// out-of-order segments on the hostile connection are stored until one is dropped for want of
/// room (`memory.dropped_segments` +1) — never beyond the budget (`high_water` ≤ `limit`).
/// Once the clients go their charges come back, and the runner's Write is placed.
pub fn memory_budget_exhausted(c: &mut Ctx) -> Result<()> {
    let mut w = DatapathClient::connect(&c.env.socket, WAIT)?;
    let m0 = stats(&mut w)?.memory;
    let mut clients = Vec::new();
    let mut pd = 0x6_0000u32;
    let mut subscribed = 0;
    let refusal = 'fill: loop {
        let mut con = Consumer::connect(&c.env.socket, WAIT)?;
        for _ in 0..mpa_datapath::server::MAX_SUBSCRIPTIONS_PER_CLIENT {
            pd += 1;
            match con.subscribe(pd) {
                Ok(()) => subscribed += 1,
                Err(ConsumerError::Client(ClientError::Refused {
                    code: ErrorCode::Limit,
                    message,
                })) if message.contains("memory budget") => {
                    clients.push(con);
                    break 'fill message;
                }
                Err(e) => bail!("subscription {}: {e}", subscribed + 1),
            }
        }
        clients.push(con);
        if clients.len() > 64 {
            bail!("{subscribed} subscriptions and the budget never ran out");
        }
    };
    // Out-of-order octets on the hostile connection until the budget drops one.
    let junk = [0x5au8; 1400];
    let mut sent = 0;
    let m = loop {
        let mut s = c.p.seg(&junk);
        s.seq = c.p.snd_nxt.wrapping_add(4096 + sent * junk.len() as u32);
        c.p.send_seg(&s)?;
        sent += 1;
        let m = stats(&mut w)?.memory;
        if m.dropped_segments > m0.dropped_segments {
            break m;
        }
        if sent > 600 {
            bail!("{sent} out-of-order segments and none dropped for the budget: {m:?}");
        }
    };
    if m.high_water > m.limit {
        bail!("the budget exceeded: {m:?}");
    }
    c.p.poll(Duration::from_millis(50))?;
    c.p.inbox.clear();
    drop(clients);
    // The subscriptions' charges come back as their clients go.
    let t0 = std::time::Instant::now();
    let after = loop {
        let a = stats(&mut w)?.memory;
        if a.used + (2 << 20) < m.used {
            break a;
        }
        if t0.elapsed() > WAIT {
            bail!("the clients' charges did not come back: {a:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    c.note = format!(
        "{subscribed} subscriptions, the next refused ({refusal}); {sent} out-of-order segments, \
         the last dropped for want of room ({} of {} octets charged, high water {}); {} \
         charged once the clients went; ",
        m.used, m.limit, m.high_water, after.used
    );
    let d: Vec<u8> = (0..64u8).collect();
    c.write(0, &d)
}

/// The datapath as a bulk sender facing a hostile ACKer: while a consumer's 256 Writes of
/// 4 KiB go out on the hostile connection, its peer acknowledges octets never sent and octets
/// from far below the window (both dropped and counted as bad ACKs, answered by at most a
/// challenge ACK), then closes its window (zero) and opens it again. Every Write still
/// completes exactly once, in order, and the connection lives on.
pub fn hostile_acker(c: &mut Ctx) -> Result<()> {
    const N: u32 = 256;
    const LEN: u64 = 4096;
    let before = c.flow_report()?;
    let env = c.env;
    let mut con = env.owner()?;
    con.subscribe(super::PD_HOSTILE)?;
    con.post_write(c.flow_id, env.stag(), 0, LEN, N, 0x4242, 0)?;
    // Acknowledgments of what was never sent, and of what lies far behind.
    for ack in [
        c.p.rcv_nxt.wrapping_add(64 << 20),
        c.p.rcv_nxt.wrapping_sub(0x6000_0000),
    ] {
        let mut s = c.p.seg(&[]);
        s.flags.ack = Some(ack);
        c.p.send_seg(&s)?;
    }
    // A closed window for a while, then open again.
    let mut s = c.p.seg(&[]);
    s.window = 0;
    c.p.send_seg(&s)?;
    c.p.poll(Duration::from_millis(300))?;
    let s = c.p.seg(&[]);
    c.p.send_seg(&s)?;
    let mut done = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while done.len() < N as usize {
        if std::time::Instant::now() > deadline {
            bail!("{} of {N} Writes completed within 20 s", done.len());
        }
        c.p.poll(Duration::from_millis(20))?;
        if let Some(b) = con.next_completions(std::time::Instant::now())? {
            done.extend(b.into_iter().filter(|x| x.flow_id == c.flow_id));
        }
    }
    con.unsubscribe(super::PD_HOSTILE)?;
    for (i, d) in done.iter().enumerate() {
        if (d.kind, d.offset, d.len)
            != (
                mpa_ctl_proto::CompletionKind::WriteSent,
                i as u64 * LEN,
                LEN,
            )
        {
            bail!("completion {i}: {d:?}");
        }
    }
    c.p.inbox.clear();
    let after = c.flow_report()?;
    let bad = after.tcp_drops.bad_ack - before.tcp_drops.bad_ack;
    if bad < 2 {
        bail!("both hostile ACKs dropped as bad ACKs, got {bad}");
    }
    c.note = format!(
        "{N} Writes sent through 2 bad ACKs (dropped, counted) and a closed window: every one \
         completed once, in order; "
    );
    Ok(())
}

/// Connections that never say Hello take every control slot, the operators' too: a new
/// client is still served within 10 s (it takes the slot of the longest silent one, which is
/// told why) and the rest are closed at the Hello deadline, each told why.
pub fn silent_slot_holders(c: &mut Ctx) -> Result<()> {
    witnessed(c, |p| {
        let mut w = DatapathClient::connect(p, WAIT)?;
        let ctl0 = stats(&mut w)?.control;
        let free = (ctl0.max_clients + ctl0.operator_slots).saturating_sub(ctl0.clients);
        let mut silent = Vec::with_capacity(free);
        for _ in 0..free {
            let s = UnixStream::connect(p)?;
            s.set_read_timeout(Some(Duration::from_millis(ctl0.hello_deadline_ms) + WAIT))?;
            silent.push(s);
        }
        let t0 = std::time::Instant::now();
        let mut newcomer = loop {
            match DatapathClient::connect(p, WAIT) {
                Ok(n) => break n,
                Err(e) if t0.elapsed() > Duration::from_secs(10) => {
                    bail!("no slot for a new client within 10 s beside {free} silent ones: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        let served = t0.elapsed();
        let evicted = stats(&mut newcomer)?.control.clients_evicted - ctl0.clients_evicted;
        drop((newcomer, w));
        let (mut made_room, mut timed_out) = (0, 0);
        for mut s in silent {
            let words = match read_message(&mut s) {
                Ok(Message::Error {
                    id: 0,
                    code: ErrorCode::Limit,
                    message,
                }) => message,
                other => bail!("a silent connection is told why it is closed, got {other:?}"),
            };
            if words.starts_with("closed to make room") {
                made_room += 1;
            } else if words.starts_with("closed: no Hello within") {
                timed_out += 1;
            } else {
                bail!("unexpected words: {words}");
            }
            expect_closed(s)?;
        }
        if made_room != evicted || made_room == 0 || made_room + timed_out != free as u64 {
            bail!(
                "{free} silent connections: each closed once, one or more to make room; got \
                 {made_room} making room ({evicted} counted), {timed_out} at the deadline"
            );
        }
        Ok(format!(
            "{free} silent connections held every slot: a new client served after {} ms, \
             {made_room} closed to make room, {timed_out} at the Hello deadline",
            served.as_millis()
        ))
    })
}

/// A consumer that keeps a descriptor of every region it destroys and of every subscription's
/// rings it ends (64 cycles each of 1 MiB regions): once the datapath lets go, none of those
/// files has a page left, and the datapath's shared memory is back where it was.
pub fn released_memory_descriptors_kept(c: &mut Ctx) -> Result<()> {
    use std::os::fd::AsFd;
    const CYCLES: u32 = 64;
    witnessed(c, |p| {
        let mut w = DatapathClient::connect(p, WAIT)?;
        let before = stats(&mut w)?.memory;
        let mut con = Consumer::connect(p, WAIT)?;
        let mut kept = Vec::new();
        let pd = 0x7_1000;
        for _ in 0..CYCLES {
            let r = con.create_region(1 << 20, pd, true, false)?;
            kept.push(r.fd().try_clone_to_owned()?);
            con.destroy_region(r.info().stag)?;
        }
        for _ in 0..CYCLES {
            con.subscribe(pd + 1)?;
            let rings = con.ring_file(pd + 1).context("the subscription's rings")?;
            kept.push(rings.fd().try_clone_to_owned()?);
            con.unsubscribe(pd + 1)?;
        }
        let held = |k: &[std::os::fd::OwnedFd]| -> Result<u64> {
            k.iter()
                .map(|f| Ok(mpa_ctl_proto::shm::resident_bytes(f.as_fd())?))
                .sum()
        };
        let t0 = std::time::Instant::now();
        while held(&kept)? > 0 {
            if t0.elapsed() > WAIT {
                bail!(
                    "{} octets held through {} descriptors of released memory",
                    held(&kept)?,
                    kept.len()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let after = stats(&mut w)?.memory;
        if (after.shared_files, after.shared_bytes) != (before.shared_files, before.shared_bytes) {
            bail!("shared memory before {before:?}, after {after:?}");
        }
        Ok(format!(
            "{} descriptors of released regions and rings kept: 0 octets held, {} shared \
             octets before and after",
            kept.len(),
            after.shared_bytes
        ))
    })
}

/// A neighbour with 64 domains keeps their post queues full of Writes on the hostile
/// connection (not in its domains: every one refused) while the runner's Write is placed on
/// that connection: the workers read a bounded number of posts per turn across all queues,
/// the refusals are counted, and nothing of the connection waits for them.
pub fn post_queues_flooding_neighbour(c: &mut Ctx) -> Result<()> {
    use mpa_ctl_proto::ring::post::{PostOp, SgList, WorkRequest};
    let mut w = DatapathClient::connect(&c.env.socket, WAIT)?;
    let refused = |s: &mpa_ctl_proto::stats::DatapathStats| -> u64 {
        s.queues.iter().map(|q| q.stats.posts_refused).sum()
    };
    let refused0 = refused(&stats(&mut w)?);
    let mut con = Consumer::connect(&c.env.socket, WAIT)?;
    let pds: Vec<u32> = (0..64).map(|k| 0x7_2000 + k).collect();
    for &pd in &pds {
        con.subscribe(pd)?;
    }
    let post = WorkRequest {
        flow_id: c.flow_id,
        wr_id: 0,
        sg_list: SgList::one(c.env.stag(), 0, 64),
        count: 1,
        op: PostOp::Write {
            sink_stag: 1,
            sink_to: 0,
        },
        signaled: true,
        solicited: false,
        fence: false,
    };
    let mut posted = 0u64;
    let deadline = std::time::Instant::now() + Duration::from_millis(500);
    while std::time::Instant::now() < deadline {
        for &pd in &pds {
            while con.post_in(pd, &post).is_ok() {
                posted += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // A Write on the connection while the queues are still full.
    for &pd in &pds {
        while con.post_in(pd, &post).is_ok() {
            posted += 1;
        }
    }
    let d: Vec<u8> = (0..64u8).map(|b| b ^ 0x3c).collect();
    c.write(256, &d)?;
    let now = refused(&stats(&mut w)?) - refused0;
    if now == 0 {
        bail!("{posted} posts of another domain's connection, none refused");
    }
    drop(con);
    c.note = format!(
        "{posted} posts from 64 domains on a connection of another domain, {now} refused so \
         far; the connection's own Write placed meanwhile; "
    );
    Ok(())
}

/// Silent connections to the metrics endpoint (the datapath's own, `--metrics`): more than its
/// slots, held open while three scrapes are made; each is answered 200 with the datapath's
/// figures within 2 s (docs/operations.md, "Metrics").
pub fn metrics_silent_connections(c: &mut Ctx) -> Result<()> {
    use std::net::TcpStream;
    const SILENT: usize = 24;
    const WITHIN: Duration = Duration::from_secs(2);
    witnessed(c, |p| {
        let socket = p.to_path_buf();
        let ep = mpa_ops::metrics::Endpoint::start("127.0.0.1:0".parse()?, move || {
            mpa_ops::metrics::datapath::scrape(&socket, "hostile", false)
        })?;
        let addr = ep.local_addr();
        let silent = (0..SILENT)
            .map(|_| TcpStream::connect_timeout(&addr, WAIT))
            .collect::<std::io::Result<Vec<_>>>()
            .context("the silent connections")?;
        let mut slowest = Duration::ZERO;
        for i in 0..3 {
            let t0 = std::time::Instant::now();
            let mut s = TcpStream::connect_timeout(&addr, WAIT)?;
            s.set_read_timeout(Some(WITHIN))?;
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: hostile\r\nConnection: close\r\n\r\n")?;
            let mut answer = String::new();
            s.read_to_string(&mut answer)
                .with_context(|| format!("scrape {i} beside {SILENT} silent connections"))?;
            let took = t0.elapsed();
            if !answer.starts_with("HTTP/1.1 200") || !answer.contains("mpa_datapath_") {
                let head = answer.lines().next().unwrap_or("nothing");
                bail!("scrape {i}: 200 with the datapath's figures, got `{head}`");
            }
            if took > WITHIN {
                bail!("scrape {i} took {took:?} (within {WITHIN:?} expected)");
            }
            slowest = slowest.max(took);
        }
        let evicted = ep.stats().evicted;
        drop(silent);
        Ok(format!(
            "{SILENT} silent connections to the metrics endpoint: 3 scrapes answered 200, \
             slowest {slowest:.1?}, {evicted} silent connection(s) evicted"
        ))
    })
}
