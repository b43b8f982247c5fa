//! Read Requests and the ACKs of their Read Responses in one receive burst, through a whole
//! worker on its in-memory ring. The worker decodes a burst's in-order segments together
//! (docs/architecture.md, "Runs of segments"), while the TCP takes each segment's ACK as it
//! comes: a Read Response acknowledged by a segment the peer sent after a Read Request must
//! not make room for that request under the IRD (RFC 5040 §6.1), whatever the burst holds.

use crossbeam_channel::unbounded;
use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
use mpa::encoder::FpduEncoder;
use mpa::wire::ddp::{DdpRepr, RdmapOpcode, ReadRequestRepr, TerminateRepr};
use mpa::wire::fpdu::{fpdu_len, Fpdu};
use mpa_ctl_proto::RegionInfo;
use mpa_datapath::io::ring::{MemRing, MemWire};
use mpa_datapath::worker::{Command, Worker, WorkerConfig};
use mpa_stack::receiver::Region;
use mpa_stack::region::RegionMemory;
use mpa_stack::sim::SimHandover;
use std::net::SocketAddrV4;
use std::sync::Arc;

const OUR_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const RCV_NXT: u32 = 7000;
const SND_NXT: u32 = 1000;
/// The region the Read Requests read.
const SRC_STAG: u32 = 0x20;
/// The peer's region the Read Responses are for.
const SINK_STAG: u32 = 0x99;
/// Our negotiated IRD.
const IRD: u16 = 4;
/// Octets each Read Request asks for.
const READ_LEN: u32 = 64;

fn local() -> SocketAddrV4 {
    "10.99.0.2:40000".parse().unwrap()
}

fn remote() -> SocketAddrV4 {
    "10.99.0.1:7777".parse().unwrap()
}

/// A worker holding one flow (no markers, CRCs, IRD [`IRD`]) and a remotely readable region.
fn worker() -> (Worker<MemRing>, MemWire) {
    let (ring, wire) = MemRing::new(0).unwrap();
    let (_cmd_tx, cmd_rx) = unbounded();
    let (note_tx, _notes) = unbounded();
    let mut worker = Worker::new(ring, WorkerConfig::new(OUR_MAC), cmd_rx, note_tx);
    let len = 64 * 1024;
    let mem = Arc::new(RegionMemory::create("reads-in-a-burst", len).unwrap());
    assert!(mem.write(0, &[0x5a; 4096]));
    worker.apply(Command::AddRegion(Region {
        info: RegionInfo {
            stag: SRC_STAG,
            len,
            pd: 1,
            remote_write: false,
            remote_read: true,
            huge_pages: false,
        },
        mem,
    }));
    let h = SimHandover {
        flow_id: 5,
        local: local().into(),
        remote: remote().into(),
        rcv_nxt: RCV_NXT,
        snd_nxt: SND_NXT,
        pd: Some(1),
        ird: Some(IRD),
        ord: Some(0),
        next_hop_mac: PEER_MAC,
        ..SimHandover::default()
    }
    .build();
    let (answer, result) = unbounded();
    assert!(worker.apply(Command::HandOver(Box::new(h), None, answer)));
    result.recv().unwrap().expect("hand-over accepted");
    (worker, wire)
}

/// The FPDU of Read Request `msn` for [`READ_LEN`] octets at `msn * 64` of [`SRC_STAG`].
fn read_request(msn: u32) -> Vec<u8> {
    let u = ReadRequestRepr {
        sink_stag: SINK_STAG,
        sink_to: u64::from(msn * 1000),
        size: READ_LEN,
        src_stag: SRC_STAG,
        src_to: u64::from(msn * READ_LEN),
    }
    .ulpdu(msn, 1);
    let mut wire = Vec::new();
    FpduEncoder::new(false).encode(&u, &mut wire).unwrap();
    wire
}

/// A segment from the peer: `payload` at `seq`, acknowledging `ack`.
fn segment(seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(PEER_MAC, OUR_MAC)
        .ipv4(remote().ip().octets(), local().ip().octets(), 64)
        .tcp(remote().port(), local().port(), seq, 512)
        .ack(ack);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).unwrap();
    v
}

/// What the worker sent: each data segment's FPDUs, as (DDP header, ULPDU after it), and the
/// octets of TCP payload.
#[derive(Default)]
struct Sent {
    fpdus: Vec<(DdpRepr, Vec<u8>)>,
    octets: u32,
}

impl Sent {
    fn take(&mut self, wire: &MemWire) {
        for frame in wire.take_sent() {
            let p = SlicedPacket::from_ethernet(&frame).unwrap();
            let Some(TransportSlice::Tcp(t)) = p.transport else {
                panic!("TCP")
            };
            let mut rest = t.payload();
            self.octets += rest.len() as u32;
            while !rest.is_empty() {
                let n = fpdu_len(usize::from(u16::from_be_bytes([rest[0], rest[1]])));
                let f = Fpdu::new_checked(&rest[..n]).expect("whole FPDUs per segment");
                let (ddp, hl) = DdpRepr::parse(f.ulpdu(), 1).unwrap();
                self.fpdus.push((ddp, f.ulpdu()[hl..].to_vec()));
                rest = &rest[n..];
            }
        }
    }

    fn read_responses(&self) -> usize {
        self.fpdus
            .iter()
            .filter(|(d, _)| {
                matches!(
                    d,
                    DdpRepr::Tagged {
                        opcode: RdmapOpcode::RdmaReadResponse,
                        last: true,
                        ..
                    }
                )
            })
            .count()
    }

    fn terminate(&self) -> Option<TerminateRepr> {
        self.fpdus.iter().find_map(|(d, rest)| match d {
            DdpRepr::Untagged {
                opcode: RdmapOpcode::Terminate,
                ..
            } => TerminateRepr::parse(rest).ok(),
            _ => None,
        })
    }
}

/// Requests 1 and 2 alone, answered; then requests 3 to 5 and an ACK of both answers in one
/// burst, the ACK first (`ack_first`) or last. Returns what the worker sent after the burst.
fn two_answered_then_a_burst(ack_first: bool) -> Sent {
    let (mut w, wire) = worker();
    let mut seq = RCV_NXT;
    let mut sent = Sent::default();
    for msn in 1..=2 {
        let f = read_request(msn);
        assert!(wire.inject(segment(seq, SND_NXT, &f)));
        seq = seq.wrapping_add(f.len() as u32);
        w.poll_once().unwrap();
    }
    for _ in 0..10 {
        sent.take(&wire);
        if sent.read_responses() == 2 {
            break;
        }
        w.poll_once().unwrap();
    }
    assert_eq!(
        sent.read_responses(),
        2,
        "the first two Read Requests answered"
    );
    let acked = SND_NXT.wrapping_add(sent.octets);
    let mut burst = Vec::new();
    if ack_first {
        burst.push(segment(seq, acked, &[]));
    }
    for msn in 3..=5 {
        let f = read_request(msn);
        burst.push(segment(seq, SND_NXT, &f));
        seq = seq.wrapping_add(f.len() as u32);
    }
    if !ack_first {
        burst.push(segment(seq, acked, &[]));
    }
    assert_eq!(
        wire.inject_copies(burst.iter().map(|f| &f[..])),
        burst.len()
    );
    let mut after = Sent::default();
    for _ in 0..10 {
        w.poll_once().unwrap();
        after.take(&wire);
    }
    after
}

/// The peer sent request 5 with the answers to 1 and 2 not yet acknowledged: five outstanding
/// against an IRD of four. That its ACK of them follows in the same burst changes nothing:
/// the fifth request ends the stream with RDMAP's Terminate for an IRD overrun (layer 0, type
/// 2, code 7), and it gets no answer.
#[test]
fn an_ack_after_a_read_request_in_one_burst_does_not_make_room_for_it() {
    let after = two_answered_then_a_burst(false);
    let t = after.terminate().expect("a Terminate");
    assert_eq!((t.layer, t.error_type, t.error_code), (0, 2, 7));
    assert!(after.read_responses() <= 2, "{}", after.read_responses());
}

/// The same burst with the ACK before the requests: three outstanding, within the IRD, all
/// answered and no Terminate.
#[test]
fn an_ack_before_read_requests_in_one_burst_makes_room_for_them() {
    let after = two_answered_then_a_burst(true);
    assert_eq!(after.terminate(), None);
    assert_eq!(after.read_responses(), 3);
}
