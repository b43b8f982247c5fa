//! Work requests (`ibv_post_send`, `ibv_post_recv`): one type, what the Rust interface posts
//! through the shared-memory post queue.

use crate::args;
use crate::context::{mpx_context, with};
use crate::errors::{Failure, MPX_OK};
use mpa_app::{PostOp, SgList, Sge, WorkRequest, MAX_SGE};
use mpa_ctl_proto::PostTarget;
use std::ffi::c_int;

/// Entries of a scatter-gather list at most.
pub const MPX_MAX_SGE: usize = 4;
const _: () = assert!(MPX_MAX_SGE == MAX_SGE, "the header's bound is the record's");

/// An RDMA Write (`IBV_WR_RDMA_WRITE`).
pub const MPX_WR_WRITE: u32 = 1;
/// A Send (`IBV_WR_SEND`).
pub const MPX_WR_SEND: u32 = 2;
/// An RDMA Read (`IBV_WR_RDMA_READ`).
pub const MPX_WR_READ: u32 = 3;

/// Complete when done (`IBV_SEND_SIGNALED`); without it, only a failure completes.
pub const MPX_SEND_SIGNALED: u32 = 1;
/// A Send with Solicited Event (`IBV_SEND_SOLICITED`).
pub const MPX_SEND_SOLICITED: u32 = 2;
/// Start once every Read posted before is answered (`IBV_SEND_FENCE`).
pub const MPX_SEND_FENCE: u32 = 4;

/// One scatter-gather entry (`ibv_sge`): `length` octets at `offset` of region `stag`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mpx_sge {
    /// Offset in the region.
    pub offset: u64,
    /// Octets.
    pub length: u64,
    /// The region (our lkey).
    pub stag: u32,
}

/// A work request (`ibv_send_wr`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mpx_send_wr {
    /// Message `i` completes with `wr_id + i`.
    pub wr_id: u64,
    /// The connection.
    pub flow_id: u64,
    /// Write: the sink's tagged offset; Read: the source's; Send: 0.
    pub remote_offset: u64,
    /// `MPX_WR_*`.
    pub opcode: u32,
    /// `MPX_SEND_*`.
    pub flags: u32,
    /// Write: the peer's sink STag; Read: the peer's source STag; Send: 0.
    pub remote_stag: u32,
    /// Messages (≥ 1; 1 with more than one entry), message `i` at `offset + i·length`.
    pub count: u32,
    /// Entries of `sg_list` used (1 ..= `MPX_MAX_SGE`; a Read: 1).
    pub num_sge: u32,
    /// The entries: a Write or Send gathers them, a Read fills the first.
    pub sg_list: [mpx_sge; MPX_MAX_SGE],
}

fn work_request(w: &mpx_send_wr) -> Result<WorkRequest, Failure> {
    let op = match w.opcode {
        MPX_WR_WRITE => PostOp::Write {
            sink_stag: w.remote_stag,
            sink_to: w.remote_offset,
        },
        MPX_WR_SEND => PostOp::Send,
        MPX_WR_READ => PostOp::Read {
            src_stag: w.remote_stag,
            src_to: w.remote_offset,
        },
        x => return Err(Failure::invalid(format!("opcode {x}"))),
    };
    let known = MPX_SEND_SIGNALED | MPX_SEND_SOLICITED | MPX_SEND_FENCE;
    if w.flags & !known != 0 {
        return Err(Failure::invalid(format!(
            "flags: unknown {:#x}",
            w.flags & !known
        )));
    }
    let n = w.num_sge as usize;
    if n == 0 || n > MPX_MAX_SGE {
        return Err(Failure::invalid(format!(
            "num_sge {n}: a work request has 1 ..= {MPX_MAX_SGE} entries"
        )));
    }
    let entries: Vec<Sge> = w
        .sg_list
        .iter()
        .take(n)
        .map(|e| Sge {
            stag: e.stag,
            offset: e.offset,
            len: e.length,
        })
        .collect();
    let sg_list = SgList::new(&entries).map_err(|e| Failure::invalid(e.to_string()))?;
    let wr = WorkRequest {
        flow_id: w.flow_id,
        wr_id: w.wr_id,
        sg_list,
        count: w.count,
        op,
        signaled: w.flags & MPX_SEND_SIGNALED != 0,
        solicited: w.flags & MPX_SEND_SOLICITED != 0,
        fence: w.flags & MPX_SEND_FENCE != 0,
    };
    match wr.defect() {
        Some(d) => Err(Failure::invalid(d.to_string())),
        None => Ok(wr),
    }
}

/// Posts work request `*wr` through the connection's shared-memory post queue
/// (`ibv_post_send`): no system call unless the worker sleeps. `MPX_ERR_AGAIN`: the queue is
/// full, nothing was posted. What the datapath refuses comes back as a completion.
#[no_mangle]
pub extern "C" fn mpx_post_send(ctx: *mut mpx_context, wr: *const mpx_send_wr) -> c_int {
    with(ctx, |c| {
        let wr = work_request(&args::value(wr, "wr")?)?;
        c.consumer.post(&wr)?;
        Ok(MPX_OK)
    })
}

/// Posts `count` receive buffers of `length` octets each, back to back in region `stag` from
/// `offset`, to connection `flow_id` (`ibv_post_recv`); buffer `i` completes with
/// `wr_id + i`.
#[no_mangle]
pub extern "C" fn mpx_post_recv(
    ctx: *mut mpx_context,
    flow_id: u64,
    stag: u32,
    offset: u64,
    length: u32,
    count: u32,
    wr_id: u64,
) -> c_int {
    post_recv(
        ctx,
        PostTarget::Flow(flow_id),
        stag,
        offset,
        length,
        count,
        wr_id,
    )
}

/// Posts receive buffers into domain `pd`'s shared receive queue (`ibv_post_srq_recv`):
/// every connection handed over into the domain from then on draws from it.
#[no_mangle]
pub extern "C" fn mpx_post_srq_recv(
    ctx: *mut mpx_context,
    pd: u32,
    stag: u32,
    offset: u64,
    length: u32,
    count: u32,
    wr_id: u64,
) -> c_int {
    post_recv(ctx, PostTarget::Pd(pd), stag, offset, length, count, wr_id)
}

/// `count` receive buffers for `target`.
fn post_recv(
    ctx: *mut mpx_context,
    target: PostTarget,
    stag: u32,
    offset: u64,
    length: u32,
    count: u32,
    wr_id: u64,
) -> c_int {
    with(ctx, |c| {
        c.consumer
            .post_recv_wr(target, stag, offset, length, count, wr_id)?;
        Ok(MPX_OK)
    })
}
