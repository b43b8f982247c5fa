//! The context (`ibv_open_device`), protection domains, regions and completion queues.

use crate::args;
use crate::errors::{guard, Failure, MPX_OK};
use mpa_app::{Completion, CompletionKind, Consumer, MappedRegion};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// One connection to a datapath's control socket and what the application made through it.
/// Opaque to C; not thread-safe (the header's rule).
pub struct mpx_context {
    pub(crate) consumer: Consumer,
    regions: HashMap<u32, MappedRegion>,
    /// Completions read and not yet handed out (reused).
    scratch: Vec<Completion>,
}

/// Peers may write the region (RDMA Write).
pub const MPX_ACCESS_REMOTE_WRITE: u32 = 1;
/// Peers may read the region (RDMA Read).
pub const MPX_ACCESS_REMOTE_READ: u32 = 2;

/// A Write of the peer's was placed (no work request of ours: `wr_id` 0).
pub const MPX_WC_WRITE_PLACED: u32 = 0;
/// A Read of ours was answered and placed.
pub const MPX_WC_READ_RESPONSE_PLACED: u32 = 1;
/// A Send arrived in a receive buffer (or the buffer was flushed).
pub const MPX_WC_SEND_ARRIVED: u32 = 2;
/// A Write of ours was acknowledged.
pub const MPX_WC_WRITE_SENT: u32 = 3;
/// A Send of ours was acknowledged.
pub const MPX_WC_SEND_SENT: u32 = 4;
/// A post through shared memory was refused (`status` says why).
pub const MPX_WC_POST_REFUSED: u32 = 5;

/// One completion (`ibv_wc`). `status` carries verbs' `ibv_wc_status` numbers (0 success, 2
/// local QP operation error, 4 local protection error, 5 flushed, 9 remote invalid request, 10
/// remote access error, 11 remote operation error, 12 retry exceeded), and 64 for a full
/// queue.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mpx_wc {
    /// The work request's id (`wr_id + i` for message `i` of a post of several).
    pub wr_id: u64,
    /// The connection.
    pub flow_id: u64,
    /// Offset in the region of the first octet.
    pub offset: u64,
    /// Octets.
    pub byte_len: u64,
    /// `MPX_WC_*`.
    pub kind: u32,
    /// Verbs' status number.
    pub status: u32,
    /// The region.
    pub stag: u32,
    /// A Send's MSN (when `has_msn`).
    pub msn: u32,
    /// Whether `msn` is set.
    pub has_msn: u32,
    /// The STag a received Send with Invalidate names (0: none).
    pub invalidate_stag: u32,
}

impl From<&Completion> for mpx_wc {
    fn from(c: &Completion) -> mpx_wc {
        mpx_wc {
            wr_id: c.wr_id,
            flow_id: c.flow_id,
            offset: c.offset,
            byte_len: c.len,
            kind: match c.kind {
                CompletionKind::WritePlaced => MPX_WC_WRITE_PLACED,
                CompletionKind::ReadResponsePlaced => MPX_WC_READ_RESPONSE_PLACED,
                CompletionKind::SendArrived => MPX_WC_SEND_ARRIVED,
                CompletionKind::WriteSent => MPX_WC_WRITE_SENT,
                CompletionKind::SendSent => MPX_WC_SEND_SENT,
                CompletionKind::PostRefused => MPX_WC_POST_REFUSED,
            },
            status: u32::from(c.status.code()),
            stag: c.stag,
            msn: c.msn.unwrap_or(0),
            has_msn: u32::from(c.msn.is_some()),
            invalidate_stag: c.invalidate_stag.unwrap_or(0),
        }
    }
}

/// In debug builds, a call on a context panics inside the library while this variable is
/// `panic`: the tests show that the panic comes back as `MPX_ERR_INTERNAL`.
pub const FAULT_ENV: &str = "MPAXDP_FAULT";

/// Runs `body` on the context at `ctx`.
pub(crate) fn with(
    ctx: *mut mpx_context,
    body: impl FnOnce(&mut mpx_context) -> Result<c_int, Failure>,
) -> c_int {
    guard(|| {
        let c = args::context(ctx)?;
        #[cfg(debug_assertions)]
        if std::env::var(FAULT_ENV).is_ok_and(|v| v == "panic") {
            panic!("fault injected by {FAULT_ENV}");
        }
        body(c)
    })
}

/// `MPX_ACCESS_*` flags as (remote write, remote read).
fn access_flags(access: u32) -> Result<(bool, bool), Failure> {
    if access & !(MPX_ACCESS_REMOTE_WRITE | MPX_ACCESS_REMOTE_READ) != 0 {
        return Err(Failure::invalid(format!(
            "access: unknown flags {access:#x}"
        )));
    }
    Ok((
        access & MPX_ACCESS_REMOTE_WRITE != 0,
        access & MPX_ACCESS_REMOTE_READ != 0,
    ))
}

fn ok(_: ()) -> c_int {
    MPX_OK
}

/// Opens a context: connects to the datapath's control socket at `socket_path`
/// (`/run/mpa-datapath.sock` by default), each wait for an answer bounded by `timeout_ms`.
/// `*out` is the context, for [`mpx_close`].
#[no_mangle]
pub extern "C" fn mpx_open(
    socket_path: *const c_char,
    timeout_ms: u32,
    out: *mut *mut mpx_context,
) -> c_int {
    guard(|| {
        let path = args::string(socket_path, "socket_path")?;
        if timeout_ms == 0 {
            return Err(Failure::invalid("timeout_ms: 0"));
        }
        let consumer =
            Consumer::connect(path.as_ref(), Duration::from_millis(u64::from(timeout_ms)))?;
        let ctx = Box::new(mpx_context {
            consumer,
            regions: HashMap::new(),
            scratch: Vec::new(),
        });
        args::store(out, Box::into_raw(ctx), "out")?;
        Ok(MPX_OK)
    })
}

/// Closes a context (`ibv_close_device`): its regions, CQs, domains and the connection to
/// the datapath go with it. `ctx` may be null.
#[no_mangle]
pub extern "C" fn mpx_close(ctx: *mut mpx_context) -> c_int {
    guard(|| {
        if !ctx.is_null() {
            drop(args::boxed(ctx));
        }
        Ok(MPX_OK)
    })
}

/// Allocates a protection domain owned by this context (`ibv_alloc_pd`).
#[no_mangle]
pub extern "C" fn mpx_alloc_pd(ctx: *mut mpx_context, pd: *mut u32) -> c_int {
    with(ctx, |c| {
        let p = c.consumer.alloc_pd()?;
        args::store(pd, p, "pd").map(|_| MPX_OK)
    })
}

/// Deallocates domain `pd` (`ibv_dealloc_pd`); refused while anything of it remains.
#[no_mangle]
pub extern "C" fn mpx_dealloc_pd(ctx: *mut mpx_context, pd: u32) -> c_int {
    with(ctx, |c| Ok(ok(c.consumer.dealloc_pd(pd)?)))
}

/// Registers `len` octets of memory the datapath allocates in domain `pd` (`ibv_reg_mr`),
/// with `MPX_ACCESS_*` flags; `*stag` is its STag (lkey and rkey), for
/// [`mpx_region_addr`] and work requests.
#[no_mangle]
pub extern "C" fn mpx_create_region(
    ctx: *mut mpx_context,
    pd: u32,
    len: u64,
    access: u32,
    stag: *mut u32,
) -> c_int {
    with(ctx, |c| {
        let (remote_write, remote_read) = access_flags(access)?;
        let r = c
            .consumer
            .create_region(len, pd, remote_write, remote_read)?;
        let s = r.info().stag;
        c.regions.insert(s, r);
        args::store(stag, s, "stag").map(|_| MPX_OK)
    })
}

/// Registers `len` octets of the application's own memory, the memfd `fd` (its own mapping
/// stays its own), in domain `pd` with `MPX_ACCESS_*` flags (`ibv_reg_mr` over an existing
/// buffer): the datapath seals it against resizing and maps it. `*stag` is its STag. The
/// memfd must allow sealing (`MFD_ALLOW_SEALING`) or be sealed against shrinking and growing
/// already, and be open read-write (docs/consumer.md, "Regions").
#[no_mangle]
pub extern "C" fn mpx_register_region(
    ctx: *mut mpx_context,
    fd: c_int,
    len: u64,
    pd: u32,
    access: u32,
    stag: *mut u32,
) -> c_int {
    with(ctx, |c| {
        let (remote_write, remote_read) = access_flags(access)?;
        if fd < 0 {
            return Err(Failure::invalid(format!("fd: {fd}")));
        }
        let info =
            c.consumer
                .register_region(args::descriptor(fd), len, pd, remote_write, remote_read)?;
        args::store(stag, info.stag, "stag").map(|_| MPX_OK)
    })
}

/// The address and length of region `stag` in this process. The datapath reads and writes
/// the octets at any time (placing what peers send, reading what is posted).
#[no_mangle]
pub extern "C" fn mpx_region_addr(
    ctx: *mut mpx_context,
    stag: u32,
    addr: *mut *mut c_void,
    len: *mut u64,
) -> c_int {
    with(ctx, |c| {
        let r = c
            .regions
            .get(&stag)
            .ok_or_else(|| Failure::invalid(format!("no region {stag:#x} in this context")))?;
        args::store(addr, r.as_ptr().cast(), "addr")?;
        args::store(len, r.info().len, "len").map(|_| MPX_OK)
    })
}

/// Deregisters region `stag` (`ibv_dereg_mr`); its address is not to be used after.
#[no_mangle]
pub extern "C" fn mpx_destroy_region(ctx: *mut mpx_context, stag: u32) -> c_int {
    with(ctx, |c| {
        if !c.regions.contains_key(&stag) {
            return Err(Failure::invalid(format!(
                "no region {stag:#x} in this context"
            )));
        }
        c.consumer.destroy_region(stag)?;
        c.regions.remove(&stag);
        Ok(MPX_OK)
    })
}

/// Receives domain `pd`'s completions (`ibv_create_comp_channel`): the rings and the post
/// queues in shared memory. Before [`mpx_create_cq`] and posting.
#[no_mangle]
pub extern "C" fn mpx_subscribe(ctx: *mut mpx_context, pd: u32) -> c_int {
    with(ctx, |c| Ok(ok(c.consumer.subscribe(pd)?)))
}

/// Creates a completion queue of domain `pd` holding up to `capacity` completions
/// (`ibv_create_cq`).
#[no_mangle]
pub extern "C" fn mpx_create_cq(
    ctx: *mut mpx_context,
    pd: u32,
    capacity: u32,
    cq: *mut u32,
) -> c_int {
    with(ctx, |c| {
        let id = c.consumer.create_cq(pd, capacity)?;
        args::store(cq, id, "cq").map(|_| MPX_OK)
    })
}

/// Destroys CQ `cq` (`ibv_destroy_cq`); refused while a connection or domain uses it.
#[no_mangle]
pub extern "C" fn mpx_destroy_cq(ctx: *mut mpx_context, cq: u32) -> c_int {
    with(ctx, |c| Ok(ok(c.consumer.destroy_cq(cq)?)))
}

/// Every connection of the CQs' domain without CQs of its own completes its requests on
/// `send_cq` and what arrives on `recv_cq` (set before connecting or listening).
#[no_mangle]
pub extern "C" fn mpx_set_domain_cqs(ctx: *mut mpx_context, send_cq: u32, recv_cq: u32) -> c_int {
    with(ctx, |c| {
        Ok(ok(c.consumer.set_domain_cqs(send_cq, recv_cq)?))
    })
}

/// Connection `flow_id`'s own send and receive CQs (the queue pair's).
#[no_mangle]
pub extern "C" fn mpx_bind_cqs(
    ctx: *mut mpx_context,
    flow_id: u64,
    send_cq: u32,
    recv_cq: u32,
) -> c_int {
    with(ctx, |c| {
        Ok(ok(c.consumer.bind_cqs(flow_id, send_cq, recv_cq)?))
    })
}

/// Up to `n` of CQ `cq`'s completions into `wc` (`ibv_poll_cq`), without waiting and without
/// a system call: how many (0: none now), or an error.
#[no_mangle]
pub extern "C" fn mpx_poll_cq(ctx: *mut mpx_context, cq: u32, wc: *mut mpx_wc, n: u32) -> c_int {
    wait_cq(ctx, cq, wc, n, None)
}

/// How [`mpx_wait_cq`] waits: `busy` 0 sleeps on the domain's descriptor until the datapath
/// wakes it (the default), 1 polls the completion rings without sleeping (lower latency, a
/// core kept busy), offering the core to other threads every `yield_every` empty polls (0:
/// never; `MPX_DEFAULT_YIELD_EVERY` is the library's default). Per context.
#[no_mangle]
pub extern "C" fn mpx_set_busy_poll(ctx: *mut mpx_context, busy: c_int, yield_every: u32) -> c_int {
    with(ctx, |c| {
        let on = match busy {
            0 => false,
            1 => true,
            b => return Err(Failure::invalid(format!("busy {b}: 0 or 1"))),
        };
        c.consumer.set_busy_poll(on);
        c.consumer.set_busy_poll_yield_every(yield_every);
        Ok(MPX_OK)
    })
}

/// Empty polls between two offers of the core while [`mpx_set_busy_poll`] spins, by default
/// (the Rust interface's `DEFAULT_BUSY_POLL_YIELD_EVERY`; a test keeps them equal).
pub const MPX_DEFAULT_YIELD_EVERY: u32 = 32;

/// As [`mpx_poll_cq`], waiting up to `timeout_ms` for a completion (sleeping on the domain's
/// descriptor, or polling after [`mpx_set_busy_poll`]): 0 when none came.
#[no_mangle]
pub extern "C" fn mpx_wait_cq(
    ctx: *mut mpx_context,
    cq: u32,
    wc: *mut mpx_wc,
    n: u32,
    timeout_ms: u32,
) -> c_int {
    wait_cq(ctx, cq, wc, n, Some(timeout_ms))
}

fn wait_cq(
    ctx: *mut mpx_context,
    cq: u32,
    wc: *mut mpx_wc,
    n: u32,
    timeout_ms: Option<u32>,
) -> c_int {
    with(ctx, |c| {
        let n = n.min(i32::MAX as u32) as usize;
        let out = args::out_array(wc, n, "wc")?;
        let mut got = std::mem::take(&mut c.scratch);
        got.clear();
        let r = match timeout_ms {
            None => c.consumer.poll_cq(cq, &mut got, n),
            Some(ms) => {
                let deadline = Instant::now() + Duration::from_millis(u64::from(ms));
                c.consumer.wait_cq(cq, &mut got, n, deadline)
            }
        };
        for (i, x) in got.iter().enumerate() {
            args::store_at(out, i, mpx_wc::from(x));
        }
        let count = got.len();
        c.scratch = got;
        r?;
        Ok(count as c_int)
    })
}

/// The descriptor that becomes readable when CQ `cq`'s domain has completions and was armed
/// ([`mpx_arm_cq`]): for the application's own epoll. It stays the library's: do not close it.
#[no_mangle]
pub extern "C" fn mpx_cq_fd(ctx: *mut mpx_context, cq: u32) -> c_int {
    with(ctx, |c| Ok(c.consumer.cq_fd(cq)?.as_raw_fd()))
}

/// Asks for a wake-up of [`mpx_cq_fd`] at the next completion of the CQ's domain
/// (`ibv_req_notify_cq`): 1 armed (wait on the descriptor, then [`mpx_ack_cq`] and poll), 0
/// completions are waiting already (poll now).
#[no_mangle]
pub extern "C" fn mpx_arm_cq(ctx: *mut mpx_context, cq: u32) -> c_int {
    with(ctx, |c| {
        let pd = c.consumer.cq_domain(cq)?;
        Ok(c_int::from(c.consumer.arm(pd)?))
    })
}

/// After [`mpx_cq_fd`] became readable (`ibv_ack_cq_events`): reads it empty and disarms.
#[no_mangle]
pub extern "C" fn mpx_ack_cq(ctx: *mut mpx_context, cq: u32) -> c_int {
    with(ctx, |c| {
        let pd = c.consumer.cq_domain(cq)?;
        Ok(ok(c.consumer.ack_notify(pd)?))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_yield_is_the_rust_interfaces() {
        assert_eq!(
            super::MPX_DEFAULT_YIELD_EVERY,
            mpa_app::DEFAULT_BUSY_POLL_YIELD_EVERY
        );
    }
}
