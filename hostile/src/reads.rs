//! RDMA Read Requests and Read Responses (RFC 5040 §4.4, §4.5, §5.2.1, §6.1) and the MSN a
//! peer-to-peer RTR takes (RFC 6581 §9.2, RFC 5041 §5.1): queue 1's MSN first, then the Data
//! Source's checks (RDMAP Remote Protection Errors, each Terminate carrying the Read Request
//! header; valid ones are answered), the IRD, and Read Responses nobody asked for.

use super::classes::{term, write_not_placed};
use super::{Class, Ctx, Expect as E, Setup};
use anyhow::Result;
use mpa::wire::ddp::{RdmapOpcode as Op, ReadRequestRepr};
use mpa_harness::hostile_peer::{fpdu_bytes, tagged_ulpdu, untagged_ulpdu};

/// The Read classes.
pub static CLASSES: &[Class] = &[
    // RDMA Read Requests: queue 1's MSN first (DDP, RFC 5041 §5.1), then the Data Source's
    // checks (RFC 5040 §5.2.1, RDMAP Remote Protection Errors). A valid one is answered.
    term("read-request-msn-out-of-order", (1, 2, 3), |c| {
        let stag = c.env.stag_read_only;
        read_request_msn(c, 2, stag, 0, 64)
    }),
    term("read-request-unknown-source-stag", (0, 1, 0), |c| {
        let stag = c.env.stag() ^ 0xff;
        read_request(c, stag, 0, 64)
    }),
    term("read-request-beyond-the-source", (0, 1, 1), |c| {
        let stag = c.env.stag_read_only;
        read_request(c, stag, super::SLOT - 10, 64)
    }),
    term("read-request-without-remote-read", (0, 1, 2), |c| {
        let stag = c.env.stag();
        read_request(c, stag, 0, 64)
    }),
    term("read-request-source-of-another-domain", (0, 1, 3), |c| {
        let stag = c.env.stag_other_pd;
        read_request(c, stag, 0, 64)
    }),
    // A second Read Request with MSN 1: queue 1's MSNs advance (RFC 5041 §5.1).
    term("read-request-msn-repeated", (1, 2, 3), |c| {
        let stag = c.env.stag_read_only;
        read_request_msn(c, 1, stag, 0, 64)?;
        read_request_msn(c, 1, stag, 0, 64)
    }),
    // Peer-to-peer: the RTR took MSN 1 of its queue (RFC 5041 §5.1), so the first real
    // message there is MSN 2; MSN 1 again is out of range.
    Class {
        name: "send-msn-1-after-a-send-rtr",
        expect: E::Terminate(1, 2, 3),
        setup: Setup::P2p(mpa::startup::RtrType::ZeroLengthSend),
        script: |c| {
            let u = untagged_ulpdu(Op::Send, 0, 1, 0, &c.pattern(8));
            c.p.send_data(&fpdu_bytes(&u, true))
        },
        after: write_not_placed,
    },
    Class {
        name: "read-request-msn-1-after-a-read-rtr",
        expect: E::Terminate(1, 2, 3),
        setup: Setup::P2p(mpa::startup::RtrType::ZeroLengthReadRequest),
        script: |c| {
            let stag = c.env.stag_read_only;
            read_request_msn(c, 1, stag, 0, 64)
        },
        after: write_not_placed,
    },
    // Its Read Response would wrap the sink's TO: it cannot be served (RFC 5040 §5.2.1).
    term("read-request-sink-to-wraps", (0, 1, 4), |c| {
        let stag = c.env.stag_read_only;
        read_request_at(c, 1, u64::MAX - 10, stag, 0, 64)
    }),
    // One Read Request more than our IRD outstanding (none of the Read Responses is
    // acknowledged): RFC 5040 §6.1 "MUST NOT exceed".
    term("ird-overrun", (0, 2, 7), |c| {
        let stag = c.env.stag_read_only;
        let n = mpa_ctl_proto::DATAPATH_MAX_IRD as u32 + 1;
        // Back to back, each its own segment; none of the Read Responses read (so none is
        // acknowledged) before the last request goes.
        for msn in 1..=n {
            let f = read_request_fpdu(c, msn, c.env.stag(), 0, stag, 0, 64);
            c.p.send_data(&f)?;
        }
        Ok(())
    }),
    // A zero-length Read Response answers a request all the same (RFC 5040 §4.5).
    term("zero-length-unsolicited-read-response", (0, 2, 6), |c| {
        let u = tagged_ulpdu(true, Op::RdmaReadResponse, c.env.stag(), c.slot, &[]);
        c.p.send_data(&fpdu_bytes(&u, true))
    }),
    // A Read Response nobody asked for must not write our memory (RFC 5040 §4.5).
    term("unsolicited-read-response", (0, 2, 6), |c| {
        let u = tagged_ulpdu(
            true,
            Op::RdmaReadResponse,
            c.env.stag(),
            c.slot,
            &c.pattern(5),
        );
        c.p.send_data(&fpdu_bytes(&u, true))
    }),
];

/// Sends an RDMA Read Request (QN 1, MSN 1) for `size` octets of (`src`, `src_to`) into the
/// hostile region.
fn read_request(c: &mut Ctx, src: u32, src_to: u64, size: u32) -> Result<()> {
    read_request_msn(c, 1, src, src_to, size)
}

/// [`read_request`] with MSN `msn`.
fn read_request_msn(c: &mut Ctx, msn: u32, src: u32, src_to: u64, size: u32) -> Result<()> {
    read_request_at(c, msn, 0, src, src_to, size)
}

/// [`read_request_msn`] into the hostile region at sink TO `sink_to`.
fn read_request_at(
    c: &mut Ctx,
    msn: u32,
    sink_to: u64,
    src: u32,
    src_to: u64,
    size: u32,
) -> Result<()> {
    let f = read_request_fpdu(c, msn, c.env.stag(), sink_to, src, src_to, size);
    c.p.send_data(&f)
}

/// The FPDU of an RDMA Read Request (QN 1, `msn`) of `size` octets of (`src`, `src_to`)
/// into (`sink`, `sink_to`).
fn read_request_fpdu(
    _c: &Ctx,
    msn: u32,
    sink: u32,
    sink_to: u64,
    src: u32,
    src_to: u64,
    size: u32,
) -> Vec<u8> {
    let body = ReadRequestRepr {
        sink_stag: sink,
        sink_to,
        size,
        src_stag: src,
        src_to,
    }
    .emit();
    let u = untagged_ulpdu(Op::RdmaReadRequest, 1, msn, 0, &body);
    fpdu_bytes(&u, true)
}
