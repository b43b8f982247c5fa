//! A flow and a whole worker without AF_XDP, namespaces or root: hand-overs become flows,
//! frames built by `etherparse` go through the worker's in-memory ring (frame parsing, flow
//! lookup, TCP, MPA receive, placement into a registered region, ACKs, completions), and what
//! the worker sends comes back as frames.

use crossbeam_channel::{unbounded, Receiver};
use etherparse::{PacketBuilder, SlicedPacket, TcpOptionElement, TransportSlice};
use mpa::encoder::FpduEncoder;
use mpa::endpoint::rtr_ulpdu;
use mpa::startup::RtrType;
use mpa::wire::ddp::{DdpRepr, RdmapOpcode, TAGGED_HEADER_LEN};
use mpa_ctl_proto::ring::{Producer, RingFile, RingSet, Waker};
use mpa_ctl_proto::{CaptureDirection, CompletionKind, HandOver, RegionInfo, Role};
use mpa_datapath::io::capture::startup_frames;
use mpa_datapath::io::ring::{MemRing, MemWire};
use mpa_datapath::memory::completions::RingSubscription;
use mpa_datapath::worker::strays::{STRAY_ASK_EVERY, STRAY_BYTES, STRAY_FLOWS, STRAY_TTL};
use mpa_datapath::worker::{Command, Notification, Worker, WorkerConfig};
use mpa_stack::flow::{Flow, FlowError, FrameVec};
use mpa_stack::receiver::Region;
use mpa_stack::region::RegionMemory;
use mpa_stack::sim::SimHandover;
use mpa_stack::tcp::TcpConfig;
use mpa_stack::wire::frame::parse_tcp_frame;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::time::{Duration, Instant};

const OUR_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const RCV_NXT: u32 = u32::MAX - 3000; // the peer's stream wraps early
const SND_NXT: u32 = 1000;

fn local() -> SocketAddrV4 {
    "10.99.0.2:40000".parse().unwrap()
}

fn remote() -> SocketAddrV4 {
    "10.99.0.1:7777".parse().unwrap()
}

/// A hand-over of an established connection as mpa-control sends it.
fn handover(rtr: &[RtrType], markers_rx: bool, markers_tx: bool, pd: Option<u32>) -> HandOver {
    SimHandover {
        flow_id: 3,
        local: local().into(),
        remote: remote().into(),
        rcv_nxt: RCV_NXT,
        snd_nxt: SND_NXT,
        markers_rx,
        markers_tx,
        pd,
        rtr: rtr.to_vec(),
        next_hop_mac: PEER_MAC,
        ..SimHandover::default()
    }
    .build()
}

/// Every TCP payload the flow sends at creation.
fn sent_at_creation(h: &HandOver) -> Result<Vec<Vec<u8>>, FlowError> {
    let now = Instant::now();
    let mut f = Flow::new(h, OUR_MAC, &TcpConfig::default(), false, now, 2048)?;
    let mut sink = FrameVec::default();
    f.poll_frames(now, &mut sink);
    Ok(sink
        .frames
        .iter()
        .map(|b| tcp_of(b).payload)
        .filter(|p| !p.is_empty())
        .collect())
}

#[test]
fn initiator_sends_the_rtr_first_framed_as_agreed() {
    for rtr in RtrType::ALL {
        for markers in [false, true] {
            let mut want = Vec::new();
            FpduEncoder::new(markers)
                .encode(&rtr_ulpdu(rtr, 1), &mut want)
                .unwrap();
            let got = sent_at_creation(&handover(&[rtr], false, markers, None)).unwrap();
            assert_eq!(got, vec![want], "{rtr:?} markers {markers}");
        }
    }
}

#[test]
fn initiator_without_rtr_sends_nothing() {
    assert!(sent_at_creation(&handover(&[], false, true, None))
        .unwrap()
        .is_empty());
}

#[test]
fn bad_hand_overs_are_refused_with_their_reason() {
    let two = [RtrType::ZeroLengthSend, RtrType::ZeroLengthWrite];
    let two = sent_at_creation(&handover(&two, false, false, None));
    assert!(matches!(two, Err(FlowError::SeveralRtrs(_))));
    let mut h = handover(&[], false, false, None);
    h.mpa.reply_frame = b"MPA ID Rep Frame\x40\x01\x00\x00".to_vec();
    assert!(matches!(
        sent_at_creation(&h),
        Err(FlowError::InitiatorWithReply)
    ));
    let mut h = handover(&[], false, false, None);
    h.mpa.role = Role::Responder;
    assert!(matches!(
        sent_at_creation(&h),
        Err(FlowError::ResponderWithoutReply)
    ));
}

/// What a frame the worker sent carries.
struct Sent {
    src: SocketAddrV4,
    dst: SocketAddrV4,
    ack: u32,
    sack_blocks: usize,
    payload: Vec<u8>,
}

fn tcp_of(frame: &[u8]) -> Sent {
    let p = SlicedPacket::from_ethernet(frame).expect("an Ethernet frame");
    let Some(etherparse::NetSlice::Ipv4(ip)) = p.net else {
        panic!("IPv4")
    };
    let Some(TransportSlice::Tcp(t)) = p.transport else {
        panic!("TCP")
    };
    let sack_blocks = t
        .options_iterator()
        .filter_map(Result::ok)
        .map(|o| match o {
            TcpOptionElement::SelectiveAcknowledgement(_, more) => {
                1 + more.iter().filter(|b| b.is_some()).count()
            }
            _ => 0,
        })
        .sum();
    Sent {
        src: SocketAddrV4::new(ip.header().source_addr(), t.source_port()),
        dst: SocketAddrV4::new(ip.header().destination_addr(), t.destination_port()),
        ack: t.acknowledgment_number(),
        sack_blocks,
        payload: t.payload().to_vec(),
    }
}

/// A segment from the peer to us.
fn segment(seq: u32, payload: &[u8]) -> Vec<u8> {
    segment_with_window(seq, payload, 512)
}

/// [`segment`] with another window field.
fn segment_with_window(seq: u32, payload: &[u8], window: u16) -> Vec<u8> {
    segment_with(seq, payload, window, 64)
}

/// [`segment`] with another window field and IPv4 TTL.
fn segment_with(seq: u32, payload: &[u8], window: u16, ttl: u8) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(PEER_MAC, OUR_MAC)
        .ipv4(remote().ip().octets(), local().ip().octets(), ttl)
        .tcp(remote().port(), local().port(), seq, window)
        .ack(SND_NXT);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).unwrap();
    v
}

struct Bench {
    worker: Worker<MemRing>,
    wire: MemWire,
    notes: Receiver<Notification>,
    mem: Arc<RegionMemory>,
    /// The consumer's end of domain 1's completion ring.
    rings: RingSet,
}

/// A subscription of domain `pd` with one ring of `capacity` records: the worker's command
/// and the consumer's end.
fn subscription(pd: u32, capacity: u32) -> (Command, RingSet) {
    let file = Arc::new(RingFile::create("in-memory-completions", 1, capacity).unwrap());
    let sub = RingSubscription {
        pd,
        id: 1,
        producer: Producer::new(file.clone(), 0).unwrap(),
        waker: Waker::create().unwrap(),
        posts: None,
    };
    (Command::Subscribe(Box::new(sub)), RingSet::new(file))
}

const STAG: u32 = 0x10;
const REGION_LEN: u64 = 64 * 1024;

fn worker_with_flow(markers: bool) -> Bench {
    worker_with(markers, TcpConfig::default())
}

fn worker_with(markers: bool, tcp: TcpConfig) -> Bench {
    worker_with_chains(markers, tcp, false)
}

fn worker_with_chains(markers: bool, tcp: TcpConfig, chains_in_pieces: bool) -> Bench {
    let (ring, wire) = MemRing::new(0).unwrap();
    let (_cmd_tx, cmd_rx) = unbounded();
    let (note_tx, notes) = unbounded();
    let mut worker = Worker::new(
        ring,
        WorkerConfig {
            tcp,
            digest: true,
            chains_in_pieces,
            ..WorkerConfig::new(OUR_MAC)
        },
        cmd_rx,
        note_tx,
    );
    let mem = Arc::new(RegionMemory::create("in-memory-test", REGION_LEN).unwrap());
    worker.apply(Command::AddRegion(Region {
        info: RegionInfo {
            stag: STAG,
            len: REGION_LEN,
            pd: 1,
            remote_write: true,
            remote_read: false,
            huge_pages: false,
        },
        mem: mem.clone(),
    }));
    let (answer, result) = unbounded();
    let h = handover(&[], markers, false, Some(1));
    assert!(worker.apply(Command::HandOver(Box::new(h), None, answer)));
    result.recv().unwrap().expect("hand-over accepted");
    let (sub, rings) = subscription(1, 1024);
    assert!(worker.apply(sub));
    Bench {
        worker,
        wire,
        notes,
        mem,
        rings,
    }
}

fn writes(markers: bool, n: usize, len: usize) -> (Vec<u8>, Vec<u8>) {
    let mut enc = FpduEncoder::new(markers);
    let (mut wire, mut data) = (Vec::new(), Vec::new());
    for i in 0..n {
        let payload: Vec<u8> = (0..len).map(|k| (i * 31 + k * 7) as u8).collect();
        let mut u = vec![0u8; TAGGED_HEADER_LEN];
        DdpRepr::Tagged {
            last: true,
            opcode: RdmapOpcode::RdmaWrite,
            stag: STAG,
            to: (i * len) as u64,
        }
        .emit(&mut u, 1)
        .unwrap();
        u.extend_from_slice(&payload);
        enc.encode(&u, &mut wire).unwrap();
        data.extend_from_slice(&payload);
    }
    (wire, data)
}

/// `stream` cut into 1448-octet segments from RCV.NXT on: (sequence number, payload).
fn segments_of(stream: &[u8]) -> Vec<(u32, &[u8])> {
    stream
        .chunks(1448)
        .enumerate()
        .map(|(i, c)| (RCV_NXT.wrapping_add((i * 1448) as u32), c))
        .collect()
}

/// The whole stream of `n` Writes acknowledged, `data` in the region octet for octet, every
/// message completed and no FPDU error: what every run of segments must end in. Returns the
/// flow's report.
fn assert_all_placed(
    b: &mut Bench,
    stream: &[u8],
    data: &[u8],
    n: usize,
) -> mpa_ctl_proto::stats::FlowReport {
    let acks: Vec<Sent> = b.wire.take_sent().iter().map(|f| tcp_of(f)).collect();
    let end = RCV_NXT.wrapping_add(stream.len() as u32);
    assert_eq!(acks.last().map(|a| a.ack), Some(end));
    let f = b.worker.report().flows[0].clone();
    let mut got = vec![0u8; data.len()];
    assert!(b.mem.read(0, &mut got));
    assert!(got == data, "region octet-equal to the Writes");
    assert_eq!(f.rx.completions, n as u64);
    assert_eq!(f.rx.crc_errors + f.rx.marker_errors, 0);
    f
}

#[test]
fn a_worker_on_an_in_memory_ring_places_out_of_order_segments_and_acks() {
    let mut b = worker_with_flow(true);
    let (n, len) = (24, 600);
    let (stream, data) = writes(true, n, len);
    let segs = segments_of(&stream);
    // The first segment is late; one is duplicated.
    let mut order: Vec<usize> = (1..segs.len()).collect();
    order.insert(4, 3);
    order.push(0);
    let mut acks = Vec::new();
    for i in order {
        assert!(b.wire.inject(segment(segs[i].0, segs[i].1)));
        b.worker.poll_once().unwrap();
        acks.extend(b.wire.take_sent().iter().map(|f| tcp_of(f)));
    }
    for a in &acks {
        assert_eq!((a.src, a.dst), (local(), remote()));
        assert!(a.payload.is_empty());
    }
    // Out-of-order segments were acknowledged with SACK; the last ACK covers everything.
    assert!(acks.iter().any(|a| a.sack_blocks > 0));
    let end = RCV_NXT.wrapping_add(stream.len() as u32);
    assert_eq!(acks.last().map(|a| a.ack), Some(end));
    let mut got = vec![0u8; data.len()];
    assert!(b.mem.read(0, &mut got));
    assert!(got == data, "region octet-equal to the Writes");
    let q = b.worker.report();
    let f = &q.flows[0];
    assert!(f.rx.placed_direct > 0, "{f:?}");
    assert_eq!(f.rx.fpdus, n as u64);
    assert_eq!(f.rx.completions, n as u64);
    assert_eq!(q.ring.rx_frames, segs.len() as u64 + 1);
    // Completions are in the domain's ring, in order, published at the end of each burst.
    let mut completions = Vec::new();
    assert_eq!(b.rings.poll(&mut completions, 1000).unwrap(), 0);
    assert_eq!(q.stats.completions_overflow, 0);
    let offsets: Vec<u64> = completions.iter().map(|c| c.offset).collect();
    assert_eq!(
        offsets,
        (0..n as u64).map(|i| i * len as u64).collect::<Vec<u64>>()
    );
    assert!(completions
        .iter()
        .all(|c| c.kind == CompletionKind::WritePlaced && c.len == len as u64 && c.flow_id == 3));
}

/// In-order segments of one burst are taken by the TCP in one update per batch: a frame whose
/// header differs in more than its sequence number (here the window field) starts another
/// batch, and out-of-order segments are taken one by one. Every octet is placed as without
/// batching and the last ACK covers the stream.
#[test]
fn in_order_segments_of_a_burst_are_batched_for_the_tcp() {
    let mut b = worker_with_flow(true);
    let (n, len) = (24, 600);
    let (stream, data) = writes(true, n, len);
    let segs = segments_of(&stream);
    assert!(segs.len() > 8);
    // Burst 1: segments 0..6, the fourth with another window: batches [0, 1, 2], [3], [4, 5].
    for (i, &(seq, p)) in segs[..6].iter().enumerate() {
        let window = if i == 3 { 600 } else { 512 };
        assert!(b.wire.inject(segment_with_window(seq, p, window)));
    }
    b.worker.poll_once().unwrap();
    let f = b.worker.report().flows[0].clone();
    assert_eq!((f.packets, f.segments_batched), (6, 3), "{f:?}");
    // Burst 2: segments 7.. (6 is missing): out of order, one by one.
    for &(seq, p) in &segs[7..] {
        assert!(b.wire.inject(segment(seq, p)));
    }
    b.worker.poll_once().unwrap();
    // Burst 3: segment 6 fills the hole.
    assert!(b.wire.inject(segment(segs[6].0, segs[6].1)));
    b.worker.poll_once().unwrap();
    let f = assert_all_placed(&mut b, &stream, &data, n);
    assert_eq!(
        (f.packets, f.segments_batched, f.out_of_order_segments),
        (segs.len() as u64, 3, (segs.len() - 7) as u64),
        "{f:?}"
    );
}

/// The frames after a batch's first one are taken from their header octets alone when those
/// are the first one's but for lengths, sequence number, PSH and checksums
/// (docs/architecture.md, "Runs of segments"). One whose TTL differs still continues the batch
/// (through the parse: the TCP header is what batches it), and one whose TCP checksum fails
/// is dropped and counted as the parse drops it; sent again, it is placed, every octet exact.
#[test]
fn followers_of_a_batch_are_taken_and_a_corrupt_one_is_dropped() {
    let mut b = worker_with_flow(true);
    let (n, len) = (24, 600);
    let (stream, data) = writes(true, n, len);
    let segs = segments_of(&stream);
    // Burst 1: segments 0..6, the fourth with TTL 63, the sixth with a payload octet flipped.
    for (i, &(seq, p)) in segs[..6].iter().enumerate() {
        let mut f = segment_with(seq, p, 512, if i == 3 { 63 } else { 64 });
        if i == 5 {
            let last = f.len() - 1;
            f[last] ^= 0x20;
        }
        assert!(b.wire.inject(f));
    }
    b.worker.poll_once().unwrap();
    let q = b.worker.report();
    assert_eq!(q.stats.malformed, 1, "{:?}", q.stats);
    assert_eq!(
        (q.flows[0].packets, q.flows[0].segments_batched),
        (5, 4),
        "{:?}",
        q.flows[0]
    );
    // Burst 2: the rest, from the dropped one on.
    for &(seq, p) in &segs[5..] {
        assert!(b.wire.inject(segment(seq, p)));
    }
    b.worker.poll_once().unwrap();
    let f = assert_all_placed(&mut b, &stream, &data, n);
    assert_eq!(
        (f.packets, f.segments_batched, f.out_of_order_segments),
        (segs.len() as u64, segs.len() as u64 - 2, 0),
        "{f:?}"
    );
}

/// MTU 9000 over the in-memory ring cut as AF_XDP copy mode cuts into 4096-octet UMEM frames
/// (3840-octet descriptors): 8948-octet segments arrive as chains of three descriptors and are
/// gathered whole, placed octet-exact. A chain cut short (the ring ran dry after its first
/// descriptor) is dropped and counted, never joined to the next frame; the segment it
/// carried, sent again, is placed.
#[test]
fn jumbo_segments_arrive_as_descriptor_chains_and_are_gathered() {
    let q = jumbo_segments_in_chains(false);
    assert_eq!(
        q.flows[0].rx.spanned_in_place, 0,
        "gathered frames are decoded alone"
    );
}

/// The same with `chains_in_pieces`: each chain that came whole in one burst is decoded from
/// its descriptors, the FPDUs spanning them placed from the frames; the counts and the
/// octets are the same.
#[test]
fn jumbo_segments_decoded_from_their_descriptors() {
    let q = jumbo_segments_in_chains(true);
    let rx = &q.flows[0].rx;
    assert!(rx.spanned_in_place > 0, "{rx:?}");
    // FPDUs spanning descriptors of a chain in hand are verified from the CRCs of the
    // descriptors' payloads, taken in the checksum's pass (all but one whose first part's CRC
    // nothing before it had computed: it is read instead).
    assert!(rx.crc_from_segments + 1 >= rx.spanned_in_place, "{rx:?}");
    assert!(rx.crc_from_segments <= rx.spanned_in_place, "{rx:?}");
}

fn jumbo_segments_in_chains(chains_in_pieces: bool) -> mpa_ctl_proto::stats::QueueReport {
    let mut b = worker_with_chains(true, TcpConfig::default(), chains_in_pieces);
    b.wire.set_chunk(Some(3840));
    let (n, len) = (12, 4000);
    let (stream, data) = writes(true, n, len);
    let segs: Vec<Vec<u8>> = stream
        .chunks(8948)
        .enumerate()
        .map(|(i, c)| segment(RCV_NXT.wrapping_add((i * 8948) as u32), c))
        .collect();
    assert!(segs.len() >= 5 && segs.iter().rev().skip(1).all(|f| f.len() == 9002));
    b.wire.inject(segs[0].clone());
    b.worker.poll_once().unwrap();
    // Segment 1, cut after its first descriptor.
    assert_eq!(b.wire.inject_descs([(&segs[1][..3840], true)]), 1);
    b.worker.poll_once().unwrap();
    for f in &segs[1..] {
        assert!(b.wire.inject(f.clone()));
    }
    for _ in 0..10 {
        b.worker.poll_once().unwrap();
    }
    let acks: Vec<Sent> = b.wire.take_sent().iter().map(|f| tcp_of(f)).collect();
    let end = RCV_NXT.wrapping_add(stream.len() as u32);
    assert_eq!(acks.last().map(|a| a.ack), Some(end));
    let mut got = vec![0u8; data.len()];
    assert!(b.mem.read(0, &mut got));
    assert!(got == data, "region octet-equal to the Writes");
    let q = b.worker.report();
    assert_eq!(q.flows[0].rx.fpdus, n as u64);
    assert_eq!(q.ring.rx_chain_dropped, 1, "{:?}", q.ring);
    assert_eq!(q.ring.rx_frames, segs.len() as u64);
    assert_eq!(
        q.ring.rx_multi_buffer,
        segs.len() as u64 - 1 + u64::from(segs.last().unwrap().len() > 3840)
    );
    assert_eq!(q.ring.rx_largest, 9002);
    q
}

#[test]
fn a_full_completion_ring_loses_counted_records_and_placement_goes_on() {
    let mut b = worker_with_flow(false);
    // A consumer with a ring of 4 records that reads nothing while 24 Writes arrive.
    let (sub, mut rings) = subscription(1, 4);
    assert!(b.worker.apply(sub));
    let (n, len) = (24, 500);
    let (stream, data) = writes(false, n, len);
    for (i, c) in stream.chunks(1448).enumerate() {
        assert!(b
            .wire
            .inject(segment(RCV_NXT.wrapping_add((i * 1448) as u32), c)));
        b.worker.poll_once().unwrap();
    }
    let mut got = vec![0u8; data.len()];
    assert!(b.mem.read(0, &mut got));
    assert!(got == data, "placement is not held back by the consumer");
    let q = b.worker.report();
    assert_eq!(q.flows[0].rx.completions, n as u64);
    assert_eq!(q.stats.completions_overflow, n as u64 - 4);
    // The consumer gets the first four and then the loss, exactly.
    let mut out = Vec::new();
    assert_eq!(rings.poll(&mut out, 100).unwrap(), n as u64 - 4);
    assert_eq!(
        out.iter().map(|c| c.offset).collect::<Vec<_>>(),
        vec![0, 500, 1000, 1500]
    );
    out.clear();
    assert_eq!(rings.poll(&mut out, 100).unwrap(), 0);
    assert!(out.is_empty());
}

#[test]
fn hostile_frames_are_counted_not_placed() {
    let mut b = worker_with_flow(false);
    let (stream, _) = writes(false, 1, 500);
    // A bad TCP checksum.
    let mut bad = segment(RCV_NXT, &stream);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    // A segment of a 4-tuple no flow owns.
    let stray = {
        let b = PacketBuilder::ethernet2(PEER_MAC, OUR_MAC)
            .ipv4([10, 99, 0, 9], local().ip().octets(), 64)
            .tcp(1234, local().port(), 1, 512)
            .ack(1);
        let mut v = Vec::new();
        b.write(&mut v, b"x").unwrap();
        v
    };
    // Not even IP.
    let junk = vec![0u8; 20];
    for f in [bad, stray, junk] {
        assert!(b.wire.inject(f));
    }
    b.worker.poll_once().unwrap();
    let q = b.worker.report();
    assert_eq!(q.stats.malformed, 2);
    assert_eq!(q.stats.unknown_flow, 1);
    assert_eq!(q.flows[0].rx.fpdus, 0);
    let mut got = vec![0u8; 500];
    assert!(b.mem.read(0, &mut got));
    assert!(got.iter().all(|&x| x == 0));
    assert!(b
        .notes
        .try_iter()
        .any(|n| matches!(n, Notification::Stray { remote, .. } if remote.port() == 1234)));
}

/// A hand-over that carries the startup frames the kernel exchanged (for captures).
fn startup_handover(role: Role) -> HandOver {
    let mut h = handover(&[], true, false, None);
    h.mpa.role = role;
    h.mpa.rev = 1;
    h.mpa.request_frame = b"MPA ID Req Frame\xc0\x01\x00\x00".to_vec();
    h.mpa.received_reply_frame = b"MPA ID Rep Frame\x40\x01\x00\x00".to_vec();
    h
}

/// A capture shows the startup the kernel carried, rebuilt so that it ends exactly where the
/// datapath's own frames begin.
#[test]
fn startup_frames_end_where_the_hand_over_begins() {
    let ours = OUR_MAC;
    let mut h = startup_handover(Role::Responder);
    h.mpa.received_reply_frame.clear();
    let frames = startup_frames(&h, ours).unwrap();
    assert_eq!(frames.len(), 1);
    let (dir, f) = &frames[0];
    assert_eq!(*dir, CaptureDirection::Rx);
    let p = parse_tcp_frame(f, true).expect("valid checksums");
    assert_eq!(p.src, h.tcp.remote);
    assert_eq!(p.dst, h.tcp.local);
    assert_eq!(&f[0..6], &ours, "to our MAC");
    assert_eq!(p.tcp.payload(), &h.mpa.request_frame[..]);
    assert_eq!(p.tcp.seq_number().0.wrapping_add(20), h.tcp.rcv_nxt);
    assert_eq!(p.tcp.ack_number().0, h.tcp.snd_nxt);
    let scaled = h.tcp.snd_wnd >> h.tcp.snd_wscale.unwrap_or(0);
    assert_eq!(u32::from(p.tcp.window_len()), scaled);

    let h = startup_handover(Role::Initiator);
    let frames = startup_frames(&h, ours).unwrap();
    assert_eq!(frames.len(), 2);
    let (d0, f0) = &frames[0];
    let (d1, f1) = &frames[1];
    assert_eq!((*d0, *d1), (CaptureDirection::Tx, CaptureDirection::Rx));
    let req = parse_tcp_frame(f0, true).unwrap();
    let rep = parse_tcp_frame(f1, true).unwrap();
    assert_eq!((req.src, req.dst), (h.tcp.local, h.tcp.remote));
    assert_eq!(req.tcp.seq_number().0, SND_NXT - 20);
    assert_eq!(req.tcp.ack_number().0, rep.tcp.seq_number().0);
    assert_eq!(rep.tcp.seq_number().0, RCV_NXT.wrapping_sub(20));
    assert_eq!(rep.tcp.ack_number().0, SND_NXT);
    assert_eq!(rep.tcp.payload(), &h.mpa.received_reply_frame[..]);

    let mut h = startup_handover(Role::Responder);
    h.mpa.request_frame.clear();
    assert!(startup_frames(&h, ours).unwrap().is_empty());
}

/// A segment to us from the peer's address at `port` (another 4-tuple than the flow's).
fn segment_from(port: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(PEER_MAC, OUR_MAC)
        .ipv4(remote().ip().octets(), local().ip().octets(), 64)
        .tcp(port, local().port(), seq, 512)
        .ack(SND_NXT);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).unwrap();
    v
}

/// The peer ports the worker asked for since the last call, in order.
fn stray_asks(notes: &Receiver<Notification>) -> Vec<u16> {
    notes
        .try_iter()
        .filter_map(|n| match n {
            Notification::Stray { remote, .. } => Some(remote.port()),
            _ => None,
        })
        .collect()
}

/// Strays are bounded in time and space: a 4-tuple is asked for at most once per interval,
/// its entry expires, and past the slot limit new 4-tuples are still asked for.
#[test]
fn strays_are_asked_for_once_per_interval_expire_and_stay_bounded() {
    let mut b = worker_with_flow(false);
    let ms = Duration::from_millis;
    let t0 = Instant::now();
    for i in 0..40 {
        assert!(b.wire.inject(segment_from(5000, i, b"x")));
        b.worker.poll_once_at(t0 + ms(i.into())).unwrap();
    }
    assert_eq!(stray_asks(&b.notes), [5000], "one ask within an interval");
    assert_eq!(b.worker.strays().0, 1);
    for i in 0..20 {
        assert!(b.wire.inject(segment_from(5000, 100 + i, b"x")));
        b.worker
            .poll_once_at(t0 + STRAY_ASK_EVERY + ms(i.into()))
            .unwrap();
    }
    assert_eq!(stray_asks(&b.notes), [5000], "asked again once");
    // Nothing more arrives: the entry and its frames are gone after their time.
    b.worker.poll_once_at(t0 + STRAY_TTL).unwrap();
    assert_eq!(b.worker.strays(), (0, 0));
    // More 4-tuples than slots: every one is asked for, the held ones stay bounded.
    let t1 = t0 + 2 * STRAY_TTL;
    let n = STRAY_FLOWS + 100;
    for p in 0..n {
        assert!(b.wire.inject(segment_from(10_000 + p as u16, 1, b"y")));
        b.worker.poll_once_at(t1).unwrap();
    }
    let asks = stray_asks(&b.notes);
    assert_eq!(asks.len(), n);
    assert_eq!(asks.last(), Some(&(10_000 + n as u16 - 1)));
    let (keys, octets) = b.worker.strays();
    assert!(
        keys <= STRAY_FLOWS && octets <= STRAY_BYTES,
        "{keys} {octets}"
    );
    b.worker.poll_once_at(t1 + STRAY_TTL).unwrap();
    assert_eq!(b.worker.strays(), (0, 0));
    assert_eq!(b.worker.report().stats.unknown_flow, 60 + n as u64);
}

/// Frames that arrive before their flow is handed over to this worker are replayed into it
/// and freed; frames after a flow ended here are held only for their time.
#[test]
fn stray_frames_are_replayed_on_hand_over_and_freed_after_the_flow_ends() {
    let mut b = worker_with_flow(false);
    let t0 = Instant::now();
    let (stream, data) = writes(false, 1, 500);
    assert!(b.wire.inject(segment_from(7778, RCV_NXT, &stream)));
    b.worker.poll_once_at(t0).unwrap();
    assert_eq!(stray_asks(&b.notes), [7778]);
    assert_eq!(b.worker.strays().0, 1);
    let mut h = handover(&[], false, false, Some(1));
    h.flow_id = 4;
    h.tcp.remote.set_port(7778);
    let (answer, result) = unbounded();
    assert!(b.worker.apply(Command::HandOver(Box::new(h), None, answer)));
    result.recv().unwrap().expect("hand-over accepted");
    assert_eq!(b.worker.strays(), (0, 0), "freed by the hand-over");
    b.worker.poll_once_at(t0).unwrap();
    let q = b.worker.report();
    let f = q.flows.iter().find(|f| f.flow_id == 4).unwrap();
    assert_eq!(f.rx.fpdus, 1, "held frame replayed");
    let mut got = vec![0u8; data.len()];
    assert!(b.mem.read(0, &mut got));
    assert_eq!(got, data);
    // The flow ends; later segments of its 4-tuple are strays for their time only.
    b.worker.apply(Command::Close(4));
    b.worker.poll_once_at(t0).unwrap();
    assert!(b
        .notes
        .try_iter()
        .any(|n| matches!(n, Notification::FlowGone { flow_id: 4, .. })));
    for i in 0..50u32 {
        assert!(b.wire.inject(segment_from(7778, RCV_NXT + i, b"z")));
        b.worker.poll_once_at(t0).unwrap();
    }
    assert_eq!(stray_asks(&b.notes), [7778]);
    assert_eq!(b.worker.strays().0, 1);
    b.worker.poll_once_at(t0 + STRAY_TTL).unwrap();
    assert_eq!(b.worker.strays(), (0, 0));
}

/// A dual-stack listener reports IPv4 peers as IPv4-mapped IPv6 addresses: the hand-over's
/// 4-tuple must still match the IPv4 frames of the connection.
#[test]
fn a_hand_over_with_ipv4_mapped_addresses_owns_the_ipv4_frames() {
    let mut b = worker_with_flow(false);
    let mut h = handover(&[], false, false, Some(1));
    h.flow_id = 5;
    let mapped =
        |a: SocketAddrV4| std::net::SocketAddr::new(a.ip().to_ipv6_mapped().into(), a.port());
    let mut peer = remote();
    peer.set_port(7779);
    h.tcp.local = mapped(local());
    h.tcp.remote = mapped(peer);
    let (answer, result) = unbounded();
    assert!(b.worker.apply(Command::HandOver(Box::new(h), None, answer)));
    result.recv().unwrap().expect("hand-over accepted");
    let (stream, data) = writes(false, 1, 400);
    assert!(b.wire.inject(segment_from(7779, RCV_NXT, &stream)));
    b.worker.poll_once().unwrap();
    assert_eq!(stray_asks(&b.notes), Vec::<u16>::new());
    let q = b.worker.report();
    assert_eq!(q.stats.unknown_flow, 0);
    let f = q.flows.iter().find(|f| f.flow_id == 5).unwrap();
    assert_eq!(f.rx.fpdus, 1);
    let mut got = vec![0u8; data.len()];
    assert!(b.mem.read(0, &mut got));
    assert_eq!(got, data);
    // Its ACK leaves as an IPv4 frame to the peer.
    let sent = b.wire.take_sent();
    assert!(sent.iter().map(|f| tcp_of(f)).any(|s| s.dst == peer));
}

/// A frame of the flow's 4-tuple from another VLAN is not the flow's: dropped and counted,
/// never placed; a priority tag (VID 0) is untagged.
#[test]
fn frames_with_another_vlan_tag_are_not_the_flows() {
    let mut b = worker_with_flow(false);
    let (stream, data) = writes(false, 1, 300);
    let tagged = |vid: u16| {
        let pb = PacketBuilder::ethernet2(PEER_MAC, OUR_MAC)
            .single_vlan(etherparse::VlanId::try_new(vid).unwrap())
            .ipv4(remote().ip().octets(), local().ip().octets(), 64)
            .tcp(remote().port(), local().port(), RCV_NXT, 512)
            .ack(SND_NXT);
        let mut v = Vec::new();
        pb.write(&mut v, &stream).unwrap();
        v
    };
    assert!(b.wire.inject(tagged(5)));
    b.worker.poll_once().unwrap();
    let q = b.worker.report();
    assert_eq!(q.stats.wrong_vlan, 1);
    assert_eq!(q.flows[0].rx.fpdus, 0);
    let mut got = vec![0u8; data.len()];
    assert!(b.mem.read(0, &mut got));
    assert!(got.iter().all(|&x| x == 0));
    // A priority-tagged frame is the flow's.
    assert!(b.wire.inject(tagged(0)));
    b.worker.poll_once().unwrap();
    let q = b.worker.report();
    assert_eq!((q.stats.wrong_vlan, q.flows[0].rx.fpdus), (1, 1));
    assert!(b.mem.read(0, &mut got));
    assert_eq!(got, data);
}

/// A flow whose peer stops answering is probed by keepalive on the worker's timer
/// heap (virtual time), reset, and reported gone with the reason; its timers leave the heap.
#[test]
fn a_silent_peer_is_reaped_by_keepalive_and_reported_gone() {
    let mut b = worker_with(
        false,
        TcpConfig {
            keepalive_idle: Some(Duration::from_secs(10)),
            keepalive_interval: Duration::from_secs(2),
            keepalive_probes: 2,
            ..TcpConfig::default()
        },
    );
    let t0 = Instant::now();
    let (stream, _) = writes(false, 1, 100);
    assert!(b.wire.inject(segment(RCV_NXT, &stream)));
    b.worker.poll_once_at(t0).unwrap();
    b.wire.take_sent();
    // Poll every 100 ms of virtual time; the peer never answers.
    let mut probes = Vec::new();
    let mut rst_at = None;
    let mut gone = None;
    for step in 1..=200u64 {
        let now = t0 + Duration::from_millis(100 * step);
        b.worker.poll_once_at(now).unwrap();
        for f in b.wire.take_sent() {
            let p = SlicedPacket::from_ethernet(&f).unwrap();
            let Some(TransportSlice::Tcp(t)) = p.transport else {
                panic!("TCP")
            };
            if t.rst() {
                rst_at = Some(step);
            } else {
                assert!(t.payload().is_empty());
                assert_eq!(t.sequence_number(), SND_NXT - 1, "a keepalive probe");
                probes.push(step);
            }
        }
        if let Some(n) = b
            .notes
            .try_iter()
            .find(|n| matches!(n, Notification::FlowGone { .. }))
        {
            gone = Some((step, n));
            break;
        }
    }
    assert_eq!(probes, [100, 120], "at idle, then one interval later");
    assert_eq!(rst_at, Some(140));
    let Some((
        140,
        Notification::FlowGone {
            flow_id,
            end,
            stats,
            ..
        },
    )) = gone
    else {
        panic!("no FlowGone at 14 s: {gone:?}")
    };
    assert_eq!(flow_id, 3);
    assert_eq!(end.mpa_error, Some(mpa::MpaErrorCode::TcpClosed));
    assert_eq!(
        end.reason,
        "TCP: peer silent: no answer to 2 keepalive probes"
    );
    assert_eq!(stats.keepalive_probes, 2);
    assert!(b.worker.report().flows.is_empty());
    assert!(
        b.worker.timer_entries() <= 2,
        "{}",
        b.worker.timer_entries()
    );
}

#[test]
fn a_flow_that_moves_to_another_worker_keeps_its_completions_in_order() {
    // Worker 0 owns the flow first; both workers write into one subscription's two rings.
    let mut a = worker_with_flow(false);
    let (ring_b, wire_b) = MemRing::new(1).unwrap();
    let (_cmd_tx, cmd_rx) = unbounded();
    let (note_tx, _notes_b) = unbounded();
    let mut b = Worker::new(
        ring_b,
        WorkerConfig {
            digest: true,
            ..WorkerConfig::new(OUR_MAC)
        },
        cmd_rx,
        note_tx,
    );
    b.apply(Command::AddRegion(Region {
        info: RegionInfo {
            stag: STAG,
            len: REGION_LEN,
            pd: 1,
            remote_write: true,
            remote_read: false,
            huge_pages: false,
        },
        mem: a.mem.clone(),
    }));
    let file = Arc::new(RingFile::create("moving", 2, 64).unwrap());
    let waker = Waker::create().unwrap();
    for (i, w) in [&mut a.worker, &mut b].into_iter().enumerate() {
        assert!(w.apply(Command::Subscribe(Box::new(RingSubscription {
            pd: 1,
            id: 9,
            producer: Producer::new(file.clone(), i as u32).unwrap(),
            waker: waker.clone(),
            posts: None,
        }))));
    }
    let mut rings = RingSet::new(file);
    let (n, len) = (8, 500);
    let (stream, _) = writes(false, n, len);
    let half = 4 * (len + TAGGED_HEADER_LEN + 2 + 4);
    // The first four Writes on worker 0, then the flow moves, the last four on worker 1.
    assert!(a.wire.inject(segment(RCV_NXT, &stream[..half])));
    a.worker.poll_once().unwrap();
    let (tx, rx) = unbounded();
    assert!(a.worker.apply(Command::Release(3, tx)));
    let (flow, mark) = rx.recv().unwrap().expect("released");
    assert_eq!(mark.map(|m| (m.ring, m.position)), Some((0, 4)));
    assert!(b.apply(Command::Adopt(
        flow,
        (local().into(), remote().into()),
        mark
    )));
    assert!(wire_b.inject(segment(RCV_NXT.wrapping_add(half as u32), &stream[half..])));
    b.poll_once().unwrap();
    // Whichever ring the consumer looks at first, worker 0's four come first.
    let mut out = Vec::new();
    assert_eq!(rings.poll(&mut out, 0).unwrap(), 0);
    assert_eq!(rings.poll(&mut out, 100).unwrap(), 0);
    assert_eq!(
        out.iter().map(|c| c.offset).collect::<Vec<_>>(),
        (0..n as u64).map(|i| i * len as u64).collect::<Vec<_>>()
    );
    assert_eq!(
        rings.tails(),
        vec![4, 5],
        "ring 1: the marker and four records"
    );
}

/// Each flow draws its fixed charge from the datapath's memory budget: with room for one
/// flow, a second hand-over is refused with the budget's reason (and no flow is made), and
/// once the first flow is closed and gone its charge is back and the next hand-over is taken.
#[test]
fn a_hand_over_the_memory_budget_has_no_room_for_is_refused() {
    use mpa_datapath::worker::WorkerError;
    use mpa_stack::budget::{MemoryBudget, FLOW_CHARGE};
    let (ring, _wire) = MemRing::new(0).unwrap();
    let (_cmd_tx, cmd_rx) = unbounded();
    let (note_tx, notes) = unbounded();
    let budget = MemoryBudget::new(FLOW_CHARGE + 1000);
    let mut worker =
        Worker::new(ring, WorkerConfig::new(OUR_MAC), cmd_rx, note_tx).with_budget(budget.clone());
    let hand = |w: &mut Worker<MemRing>, id: u64, port: u16| {
        let mut h = SimHandover {
            flow_id: id,
            local: local().into(),
            remote: SocketAddrV4::new(*remote().ip(), port).into(),
            next_hop_mac: PEER_MAC,
            ..SimHandover::default()
        }
        .build();
        h.flow_id = id;
        let (answer, result) = unbounded();
        assert!(w.apply(Command::HandOver(Box::new(h), None, answer)));
        result.recv().unwrap()
    };
    hand(&mut worker, 1, 7001).expect("room for one flow");
    assert_eq!(budget.report().used, FLOW_CHARGE);
    let e = hand(&mut worker, 2, 7002).expect_err("no room for a second");
    assert!(
        matches!(e, WorkerError::MemoryBudget { used, limit } if used == FLOW_CHARGE && limit == FLOW_CHARGE + 1000),
        "{e}"
    );
    assert_eq!(worker.report().flows.len(), 1, "no flow made");
    assert_eq!(budget.report().refused, 1);
    assert!(worker.apply(Command::Close(1)));
    let now = Instant::now();
    for _ in 0..10 {
        worker.poll_once_at(now).unwrap();
        if notes
            .try_iter()
            .any(|n| matches!(n, Notification::FlowGone { .. }))
        {
            break;
        }
    }
    assert_eq!(budget.report().used, 0, "the closed flow's charge is back");
    hand(&mut worker, 3, 7003).expect("room again");
}

/// An idle worker with `yield_every` and `spin`, polled `polls` times on an empty ring: how
/// often it offered its core to other threads.
fn yields_after(yield_every: u32, spin: Duration, polls: u32) -> u64 {
    let (ring, _wire) = MemRing::new(0).unwrap();
    let (_cmd_tx, cmd_rx) = unbounded();
    let (note_tx, _notes) = unbounded();
    let mut worker = Worker::new(
        ring,
        WorkerConfig {
            yield_every,
            spin,
            ..WorkerConfig::new(OUR_MAC)
        },
        cmd_rx,
        note_tx,
    );
    for _ in 0..polls {
        worker.poll_once().unwrap();
    }
    worker.report().stats.spin_yields
}

#[test]
fn a_spinning_worker_yields_its_core_every_so_many_empty_polls_and_not_while_it_sleeps() {
    // 256 empty polls spin, the 32nd, 64th, … 256th yield; the next three sleep in poll()
    // (10 ms each on this ring) and do not.
    assert_eq!(yields_after(32, Duration::ZERO, 256), 8);
    assert_eq!(yields_after(32, Duration::ZERO, 259), 8);
    // Within a spin window every empty poll spins: the 288th yields too.
    assert_eq!(yields_after(32, Duration::from_secs(3600), 300), 9);
    assert_eq!(yields_after(1, Duration::ZERO, 100), 100);
    // 0: a spinner with a core of its own never yields.
    assert_eq!(yields_after(0, Duration::from_secs(3600), 300), 0);
}

/// RFC 5044 §6: nothing of an FPDU is placed before its CRC is checked. A 4 KiB Write whose
/// FPDU spans several segments, its last octet flipped (the TCP checksum recomputed, as a
/// corrupting middlebox would): the FPDU before it is placed octet-exact, nothing of it nor
/// of the one after it reaches the region, and the flow ends with MPA error 2 in a Terminate
/// we sent — whether its segments come in one burst, one per burst (the FPDU then spans
/// bursts), or as jumbo frames in descriptor chains, gathered or decoded in pieces.
#[test]
fn a_corrupt_last_octet_of_a_spanning_fpdu_places_nothing_of_it() {
    for (mss, per_burst, chunk, in_pieces) in [
        (1448, usize::MAX, None, false),
        (1448, 1, None, false),
        (8948, usize::MAX, Some(3840), false),
        (8948, usize::MAX, Some(3840), true),
    ] {
        let bursts = if per_burst == 1 {
            "a segment per burst"
        } else {
            "one burst"
        };
        let case = format!("MSS {mss}, {bursts}, chains in pieces {in_pieces}");
        // The peer never answers the Terminate and FIN: the flow ends when its TCP gives up,
        // after two timeouts here.
        let tcp = TcpConfig {
            max_retransmissions: 2,
            ..TcpConfig::default()
        };
        let mut b = worker_with_chains(true, tcp, in_pieces);
        b.wire.set_chunk(chunk);
        let len = 4096;
        let (mut stream, data) = writes(true, 3, len);
        let first_end = writes(true, 1, len).0.len();
        let second_end = writes(true, 2, len).0.len();
        // At MSS 1448 the corrupt FPDU spans three segments or more; at MSS 8948 it lies in
        // one segment across two of that frame's 3840-octet descriptors or more (54 octets
        // of headers come first).
        let (edges, unit, headers) = if mss == 1448 {
            (2, mss, 0)
        } else {
            (1, 3840, 54)
        };
        let spans = (second_end - 1 + headers) / unit - (first_end + headers) / unit;
        assert!(spans >= edges, "{case}: {spans}");
        stream[second_end - 1] ^= 0x40;
        let segs: Vec<Vec<u8>> = stream
            .chunks(mss)
            .enumerate()
            .map(|(i, c)| segment(RCV_NXT.wrapping_add((i * mss) as u32), c))
            .collect();
        let t0 = Instant::now();
        for burst in segs.chunks(per_burst.min(segs.len())) {
            for f in burst {
                assert!(b.wire.inject(f.clone()), "{case}");
            }
            b.worker.poll_once_at(t0).unwrap();
        }
        let mut region = vec![0u8; 3 * len];
        assert!(b.mem.read(0, &mut region));
        assert!(region[..len] == data[..len], "{case}: the good FPDU placed");
        assert!(
            region[len..].iter().all(|&x| x == 0),
            "{case}: an octet of the corrupt FPDU or of the one after it placed"
        );
        let stats = ended_by_a_crc_error(&mut b, t0, &case);
        assert_eq!((stats.rx.crc_errors, stats.rx.fpdus), (1, 1), "{case}");
        assert_eq!(stats.rx.completions, 1, "{case}");
        // In one burst at MSS 1448, and across a chain's descriptors taken in pieces, the good
        // FPDU's CRC was joined from its segments' (or pieces') CRCs, taken in the checksum's
        // pass; the corrupt one's failed that way and was computed from its octets, which
        // reported it. A gathered chain is decoded alone, from its octets.
        let joined = u64::from((mss == 1448 && per_burst != 1) || in_pieces);
        assert_eq!(stats.rx.crc_from_segments, joined, "{case}");
    }
}

/// Polls `b`, its clock stepping from `t0`, until its one flow is gone, which must have ended
/// with MPA error 2 in a Terminate we sent (its TCP gives up on a silent peer after two
/// timeouts); returns the flow's last counters.
fn ended_by_a_crc_error(
    b: &mut Bench,
    t0: Instant,
    case: &str,
) -> mpa_ctl_proto::stats::FlowReport {
    let mut gone = None;
    for step in 1..=600u64 {
        b.worker
            .poll_once_at(t0 + Duration::from_millis(100 * step))
            .unwrap();
        gone = b
            .notes
            .try_iter()
            .find(|n| matches!(n, Notification::FlowGone { .. }));
        if gone.is_some() {
            break;
        }
    }
    let Some(Notification::FlowGone { end, stats, .. }) = gone else {
        panic!("{case}: the flow never ended")
    };
    assert_eq!(
        end.mpa_error,
        Some(mpa::MpaErrorCode::CrcMismatch),
        "{case}"
    );
    let t = end.terminate.expect("a Terminate");
    assert_eq!(
        (t.layer, t.error_code, t.sent),
        (2, mpa::MpaErrorCode::CrcMismatch as u8, true),
        "{case}: {t:?}"
    );
    *stats
}

/// FPDUs aligned with their segments (FPDU Alignment, RFC 5044 Appendix B.2: whole FPDUs
/// from the segment's first payload octet to its last, as an MPA-aware sender sends them),
/// one or two to a segment: each FPDU that ends its segment, and a batch of them that does,
/// is verified from the CRC the parse pass took of the segment, none of its octets read
/// again, and every one is placed octet-exact. One whose last octet (its CRC field) is flipped, the TCP checksum recomputed,
/// places nothing of itself or of what follows, and the flow ends with MPA error 2.
#[test]
fn fpdus_aligned_with_segments_are_verified_from_the_segments_crcs() {
    for per_segment in [1, 2] {
        let (n, len) = (12, 600);
        // Where each FPDU ends in the stream.
        let ends: Vec<usize> = (1..=n).map(|k| writes(true, k, len).0.len()).collect();
        let cut = |stream: &[u8]| -> Vec<Vec<u8>> {
            let mut at = 0;
            ends.iter()
                .skip(per_segment - 1)
                .step_by(per_segment)
                .map(|&end| {
                    let f = segment(RCV_NXT.wrapping_add(at as u32), &stream[at..end]);
                    at = end;
                    f
                })
                .collect()
        };
        let case = format!("{per_segment} FPDUs per segment");
        let mut b = worker_with_flow(true);
        let (stream, data) = writes(true, n, len);
        for f in cut(&stream) {
            assert!(b.wire.inject(f), "{case}");
        }
        b.worker.poll_once().unwrap();
        let f = assert_all_placed(&mut b, &stream, &data, n);
        assert_eq!(f.rx.crc_at_segment_end, n as u64, "{case}: {f:?}");
        assert_eq!(f.rx.spanned_in_place + f.rx.staged, 0, "{case}: {f:?}");

        let tcp = TcpConfig {
            max_retransmissions: 2,
            ..TcpConfig::default()
        };
        let mut b = worker_with(true, tcp);
        let (mut stream, data) = writes(true, n, len);
        // The last FPDU of the second segment.
        let bad = ends[2 * per_segment - 1] - 1;
        stream[bad] ^= 0x40;
        let t0 = Instant::now();
        for f in cut(&stream) {
            assert!(b.wire.inject(f), "{case}");
        }
        b.worker.poll_once_at(t0).unwrap();
        // The FPDUs before the corrupt one (a batch that fails is checked FPDU by FPDU).
        let good = (2 * per_segment - 1) * len;
        let mut region = vec![0u8; n * len];
        assert!(b.mem.read(0, &mut region));
        assert!(
            region[..good] == data[..good],
            "{case}: the FPDUs before the corrupt one placed"
        );
        assert!(
            region[good..].iter().all(|&x| x == 0),
            "{case}: an octet of the corrupt FPDU or of one after it placed"
        );
        let stats = ended_by_a_crc_error(&mut b, t0, &case);
        assert_eq!(stats.rx.crc_errors, 1, "{case}");
        assert_eq!(stats.rx.fpdus as usize, 2 * per_segment - 1, "{case}");
    }
}
