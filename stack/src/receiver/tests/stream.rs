//! The Initiator side of the in-memory pair: RDMA Writes and Sends cut into DDP segments and
//! framed into an FPDU stream (markers on or off; segments of any size, or cut so that FPDUs
//! fill every TCP segment exactly, as an aligned sender does), with what a correct receiver
//! must end up with: region contents, completions in order, the ULPDU digest.

use crate::sim::{send_segment, write_segment, FpduStream, SplitMix64 as Rng};
use mpa::wire::ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use mpa_ctl_proto::{Completion, CompletionKind, RegionInfo};

use crate::receiver::{MemRegions, PostedBuf, Regions};

/// The region RDMA Writes go to.
pub(crate) const WRITE_STAG: u32 = 0x100;
/// The region posted receive buffers are in.
pub(crate) const SEND_STAG: u32 = 0x200;
pub(crate) const PD: u32 = 1;
pub(crate) const FLOW: u64 = 7;

/// How the sender cuts its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Segmentation {
    /// DDP segments of any size up to this many payload octets; TCP cuts the stream at MSS
    /// wherever that falls.
    Unaligned(usize),
    /// Exact fill: FPDUs end exactly at every TCP segment boundary of this many octets
    /// (RFC 5044 §5.1), with a short segment where no FPDU can end exactly.
    Aligned(usize),
}

/// A stream to send and what the receiver must make of it.
pub(crate) struct Stream {
    /// The wire octets (FPDUs) from the first octet after the startup frames.
    pub(crate) wire: Vec<u8>,
    /// Aligned: where each TCP segment ends (stream offsets); the sender writes one at a time.
    pub(crate) segment_ends: Option<Vec<usize>>,
    /// Regions the receiver needs (zero-filled).
    pub(crate) regions: MemRegions,
    /// Receive buffers to post, in MSN order.
    pub(crate) posted: Vec<PostedBuf>,
    /// The regions as they must end up.
    pub(crate) expect_regions: MemRegions,
    /// Completions, in order.
    pub(crate) expect_completions: Vec<Completion>,
    /// CRC32c over every ULPDU octet in order.
    pub(crate) expect_digest: u32,
    /// FPDUs in the stream.
    pub(crate) fpdus: u64,
}

/// Cuts of one message's DDP segments when unaligned: random, up to `max` payload octets.
fn random_take(rng: &mut Rng, seg: Segmentation) -> impl FnMut(usize) -> usize + '_ {
    move |left| match seg {
        Segmentation::Unaligned(max) => (1 + rng.below(max as u64) as usize).min(left),
        Segmentation::Aligned(_) => left,
    }
}

fn write(b: &mut FpduStream, rng: &mut Rng, seg: Segmentation, to: u64, data: &[u8]) {
    let header = |off: usize, last| write_segment(WRITE_STAG, to + off as u64, last);
    b.message(data, TAGGED_HEADER_LEN, header, random_take(rng, seg));
}

fn send(b: &mut FpduStream, rng: &mut Rng, seg: Segmentation, msn: u32, data: &[u8]) {
    let header = |off: usize, last| send_segment(msn, off as u32, last);
    b.message(data, UNTAGGED_HEADER_LEN, header, random_take(rng, seg));
}

fn region(stag: u32, len: u64) -> RegionInfo {
    crate::receiver::tests::writable_region(stag, len, PD)
}

/// About `octets` of payload in Writes (disjoint ranges of one region) and Sends (one posted
/// buffer each), in random sizes and order.
pub(crate) fn build(seed: u64, octets: usize, markers: bool, seg: Segmentation) -> Stream {
    let mut rng = Rng(seed);
    let write_len = octets as u64 + 4096;
    let mut regions = MemRegions::default();
    regions.insert(region(WRITE_STAG, write_len));
    regions.insert(region(SEND_STAG, octets as u64 / 2 + 4096));
    let mut expect_regions = regions.clone();
    let aligned = match seg {
        Segmentation::Aligned(emss) => Some(emss),
        Segmentation::Unaligned(_) => None,
    };
    let mut b = FpduStream::new(markers, aligned);
    let (mut to, mut send_off, mut msn) = (0u64, 0u64, 1u32);
    let mut posted = Vec::new();
    let mut completions = Vec::new();
    let mut total = 0;
    while total < octets {
        let len = 1 + rng.below(12_000) as usize;
        let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        let is_send = rng.chance(0.3) && send_off + len as u64 <= octets as u64 / 2 + 4096;
        if is_send {
            send(&mut b, &mut rng, seg, msn, &data);
            assert!(expect_regions.write(SEND_STAG, send_off, &data));
            posted.push(PostedBuf {
                stag: SEND_STAG,
                offset: send_off,
                len: len as u32 + rng.below(64) as u32,
                wr_id: 0,
            });
            completions.push(Completion {
                flow_id: FLOW,
                kind: CompletionKind::SendArrived,
                stag: SEND_STAG,
                offset: send_off,
                len: len as u64,
                msn: Some(msn),
                invalidate_stag: None,
                wr_id: 0,
                status: mpa_ctl_proto::CompletionStatus::Success,
            });
            send_off += len as u64 + 64;
            msn += 1;
        } else {
            if to + len as u64 > write_len {
                break;
            }
            write(&mut b, &mut rng, seg, to, &data);
            assert!(expect_regions.write(WRITE_STAG, to, &data));
            completions.push(Completion {
                flow_id: FLOW,
                kind: CompletionKind::WritePlaced,
                stag: WRITE_STAG,
                offset: to,
                len: len as u64,
                msn: None,
                invalidate_stag: None,
                wr_id: 0,
                status: mpa_ctl_proto::CompletionStatus::Success,
            });
            to += len as u64 + rng.below(8);
        }
        total += len;
    }
    b.finish();
    Stream {
        segment_ends: aligned.map(|_| b.segment_ends),
        wire: b.wire,
        regions,
        posted,
        expect_regions,
        expect_completions: completions,
        expect_digest: b.digest,
        fpdus: b.fpdus,
    }
}
