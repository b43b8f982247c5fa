//! The RFC 5040/5041 checks with their Terminate codes, and completions over segments.

use super::*;
use crate::receiver::regions::{Region, RegionTable};
use crate::region::RegionMemory;
use error::rdmap_err;
use mpa::encoder::FpduEncoder;
use mpa::wire::ddp::TAGGED_HEADER_LEN;
use mpa_ctl_proto::RegionInfo;
use std::sync::Arc;

fn table() -> RegionTable {
    let mut t = RegionTable::default();
    for (stag, pd, write) in [(0x10, 1, true), (0x20, 1, false), (0x30, 2, true)] {
        t.insert(Region {
            info: RegionInfo {
                stag,
                len: 4096,
                pd,
                remote_write: write,
                remote_read: false,
                huge_pages: false,
            },
            mem: Arc::new(RegionMemory::create("t", 4096).unwrap()),
        });
    }
    t
}

fn tagged(op: RdmapOpcode, stag: u32, to: u64, last: bool, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; TAGGED_HEADER_LEN];
    DdpRepr::Tagged {
        last,
        opcode: op,
        stag,
        to,
    }
    .emit(&mut v, 1)
    .unwrap();
    v.extend_from_slice(payload);
    v
}

fn send(qn: u32, msn: u32, mo: u32, last: bool, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; UNTAGGED_HEADER_LEN];
    DdpRepr::Untagged {
        last,
        opcode: RdmapOpcode::Send,
        inv_stag: 0,
        qn,
        msn,
        mo,
    }
    .emit(&mut v, 1)
    .unwrap();
    v.extend_from_slice(payload);
    v
}

fn code(p: &Placer, t: &RegionTable, u: &[u8], in_order: bool) -> (u8, u8, u8) {
    let e = p.plan(t, u, u.len(), in_order).unwrap_err().terminate();
    (e.layer, e.error_type, e.error_code)
}

/// Places `u` the way a flow does: through a real FPDU (markers on, so pieces split).
fn place_via_fpdu(p: &mut Placer, t: &mut RegionTable, u: &[u8]) -> Option<Completion> {
    let plan = p.plan(t, u, u.len(), true).unwrap();
    let mut wire = Vec::new();
    FpduEncoder::new(true).encode(u, &mut wire).unwrap();
    let mut dec = mpa::decoder::FpduDecoder::new(true, true);
    let mut c = dec.feed(&wire);
    let ulpdu = c.next_ulpdu().unwrap().unwrap();
    assert!(Placer::place(t, &plan, &ulpdu) || plan.target.is_none());
    p.complete(&plan, 9).unwrap()
}

#[test]
fn tagged_violations_give_the_rfc_codes() {
    let t = table();
    let p = Placer::new(1, 1);
    let w = |stag, to, n| tagged(RdmapOpcode::RdmaWrite, stag, to, true, &vec![1u8; n]);
    assert_eq!(code(&p, &t, &w(0x99, 0, 1), true), (1, 1, 0));
    assert_eq!(code(&p, &t, &w(0x30, 0, 1), true), (1, 1, 2));
    assert_eq!(code(&p, &t, &w(0x10, 4000, 97), true), (1, 1, 1));
    assert_eq!(code(&p, &t, &w(0x10, u64::MAX - 1, 8), true), (1, 1, 3));
    assert_eq!(code(&p, &t, &w(0x20, 0, 1), true), (0, 1, 2));
    // Zero-length: STag and TO are not checked (RFC 5041 §5.3).
    assert!(p.plan(&t, &w(0x99, u64::MAX, 0), 14, true).is_ok());
    assert!(p.plan(&t, &w(0x10, 4000, 96), 14 + 96, true).is_ok());
    let mut bad = w(0x10, 0, 1);
    bad[0] = (bad[0] & !3) | 2;
    assert_eq!(code(&p, &t, &bad, true), (1, 1, 4));
    let mut bad = w(0x10, 0, 1);
    bad[1] = (bad[1] & 0x3f) | 0x80;
    assert_eq!(code(&p, &t, &bad, true), (0, 2, 5));
    let op = tagged(RdmapOpcode::Send, 0x10, 0, true, &[1]);
    assert_eq!(code(&p, &t, &op, true), (0, 2, 6));
    assert_eq!(
        code(&p, &t, &[0xc1, 0x40, 0], true),
        (0, 2, rdmap_err::UNSPECIFIED)
    );
}

#[test]
fn untagged_violations_give_the_rfc_codes() {
    let mut t = table();
    let mut p = Placer::new(1, 1);
    assert_eq!(code(&p, &t, &send(0, 1, 0, true, &[1]), true), (1, 2, 2));
    p.post(
        [PostedBuf {
            stag: 0x10,
            offset: 100,
            len: 50,
            wr_id: 0,
        }]
        .into_iter(),
    )
    .unwrap();
    assert_eq!(code(&p, &t, &send(3, 1, 0, true, &[1]), true), (1, 2, 1));
    assert_eq!(code(&p, &t, &send(1, 1, 0, true, &[1]), true), (1, 2, 1));
    assert_eq!(code(&p, &t, &send(0, 0, 0, true, &[1]), true), (1, 2, 3));
    assert_eq!(code(&p, &t, &send(0, 2, 0, true, &[1]), true), (1, 2, 3));
    assert_eq!(code(&p, &t, &send(0, 2, 0, true, &[1]), false), (1, 2, 2));
    assert_eq!(code(&p, &t, &send(0, 1, 51, true, &[]), true), (1, 2, 4));
    assert_eq!(
        code(&p, &t, &send(0, 1, 40, true, &[0; 11]), true),
        (1, 2, 5)
    );
    let c = place_via_fpdu(&mut p, &mut t, &send(0, 1, 0, false, &[5; 30])).is_none();
    assert!(c);
    let c = place_via_fpdu(&mut p, &mut t, &send(0, 1, 30, true, &[6; 20])).unwrap();
    assert_eq!(
        (c.kind, c.stag, c.offset, c.len, c.msn),
        (CompletionKind::SendArrived, 0x10, 100, 50, Some(1))
    );
    let mut got = [0u8; 52];
    assert!(t.get(0x10).unwrap().mem.read(99, &mut got));
    assert_eq!(got[0], 0);
    assert!(got[1..31].iter().all(|&b| b == 5));
    assert!(got[31..51].iter().all(|&b| b == 6));
    assert_eq!(got[51], 0);
    // The buffer is used: MSN 2 has none.
    assert_eq!(code(&p, &t, &send(0, 2, 0, true, &[1]), true), (1, 2, 2));
    assert!(p
        .post((0..MAX_POSTED).map(|_| PostedBuf {
            stag: 0x10,
            offset: 0,
            len: 1,
            wr_id: 0,
        }))
        .is_ok());
    assert!(p
        .post(
            [PostedBuf {
                stag: 0x10,
                offset: 0,
                len: 1,
                wr_id: 0,
            }]
            .into_iter()
        )
        .is_err());
}

#[test]
fn tagged_messages_complete_over_their_segments() {
    let mut t = table();
    let mut p = Placer::new(1, 1);
    let a = tagged(RdmapOpcode::RdmaWrite, 0x10, 1000, false, &[1; 700]);
    let b = tagged(RdmapOpcode::RdmaWrite, 0x10, 1700, true, &[2; 300]);
    assert!(place_via_fpdu(&mut p, &mut t, &a).is_none());
    let c = place_via_fpdu(&mut p, &mut t, &b).unwrap();
    assert_eq!(
        (c.kind, c.stag, c.offset, c.len),
        (CompletionKind::WritePlaced, 0x10, 1000, 1000)
    );
    let mut got = vec![0u8; 1000];
    assert!(t.get(0x10).unwrap().mem.read(1000, &mut got));
    assert!(got[..700].iter().all(|&b| b == 1) && got[700..].iter().all(|&b| b == 2));
    // A peer Terminate is recognised with its control field.
    let mut term = send(2, 1, 0, true, &[0x12, 0x03, 0, 0]);
    term[1] = (term[1] & 0xf0) | 7;
    let plan = p.plan(&t, &term, term.len(), true).unwrap();
    assert_eq!(
        plan.kind,
        SegmentKind::PeerTerminate(
            TerminateRepr {
                layer: 1,
                error_type: 2,
                error_code: 3
            },
            None
        )
    );
}

/// A shared receive queue of at most `room` buffers.
#[derive(Debug)]
struct Srq {
    bufs: std::sync::Mutex<std::collections::VecDeque<PostedBuf>>,
    room: usize,
}

impl SharedReceiveQueue for Srq {
    fn take(&self) -> Option<PostedBuf> {
        self.bufs.lock().unwrap().pop_front()
    }
    fn give_back(&self, buf: PostedBuf) -> bool {
        let mut q = self.bufs.lock().unwrap();
        let fits = q.len() < self.room;
        if fits {
            q.push_back(buf);
        }
        fits
    }
}

/// A connection attached to its domain's shared receive queue draws buffers as its Sends need
/// them, in MSN order (a Send ahead draws those of the MSNs before it too), posts none of its
/// own, and gives back at its end what it drew and did not use; one that finds no room going
/// back is returned to be flushed.
#[test]
fn a_shared_receive_queue_is_drawn_in_msn_order_and_given_back() {
    let mut t = table();
    let buf = |i: u64| PostedBuf {
        stag: 0x10,
        offset: i * 100,
        len: 100,
        wr_id: 50 + i,
    };
    let q = Arc::new(Srq {
        bufs: std::sync::Mutex::new((0..5).map(buf).collect()),
        room: 3,
    });
    let mut p = Placer::new(1, 1);
    p.attach_shared(q.clone()).unwrap();
    // MSN 1 in order: one buffer drawn, the oldest.
    let first = send(0, 1, 0, true, &[1; 10]);
    let e = p.plan(&t, &first, first.len(), true).unwrap_err();
    assert!(p.draw_for(&e));
    let c = place_via_fpdu(&mut p, &mut t, &first).unwrap();
    assert_eq!((c.wr_id, c.offset, c.msn), (50, 0, Some(1)));
    // MSN 4 ahead: the buffers of MSNs 2, 3 and 4 drawn, in that order.
    let ahead = send(0, 4, 0, true, &[4; 10]);
    let e = p.plan(&t, &ahead, ahead.len(), false).unwrap_err();
    assert!(p.draw_for(&e));
    let plan = p.plan(&t, &ahead, ahead.len(), false).unwrap();
    assert_eq!(
        plan.target,
        Some((0x10, 300)),
        "MSN 4 takes the fourth buffer drawn"
    );
    assert_eq!(q.bufs.lock().unwrap().len(), 1);
    // MSN 6 ahead finds MSN 5's buffer and no more: it fails as before.
    let far = send(0, 6, 0, true, &[6; 10]);
    let e = p.plan(&t, &far, far.len(), false).unwrap_err();
    assert!(!p.draw_for(&e));
    assert_eq!(q.bufs.lock().unwrap().len(), 0, "MSN 5's buffer was drawn");
    // The end: MSNs 2–5's buffers go back, as many as fit (3), the fourth is for flushing.
    let flushed: Vec<u64> = p.take_posted().iter().map(|b| b.wr_id).collect();
    assert_eq!(flushed, [54]);
    let back: Vec<u64> = q.bufs.lock().unwrap().iter().map(|b| b.wr_id).collect();
    assert_eq!(back, [51, 52, 53]);
    // A placer with buffers of its own cannot attach.
    let mut own = Placer::new(1, 1);
    own.post([buf(0)].into_iter()).unwrap();
    assert!(own.attach_shared(q).is_err());
}
