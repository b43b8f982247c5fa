//! Building blocks for driving the datapath in memory (tests, fuzzing, `mpa-bench pipeline`):
//! a seedable generator, an Initiator-side FPDU stream builder, and a hand-over of an
//! established connection as `mpa-control` would send it. Nothing here touches a socket.

#![forbid(unsafe_code)]

use mpa::crc::crc32c_append;
use mpa::encoder::{exact_fill, FpduEncoder};
use mpa::startup::RtrType;
use mpa::wire::ddp::{queue, DdpRepr, RdmapOpcode};
use mpa_ctl_proto::{HandOver, MpaParams, Role, TcpSnapshot, TsSnapshot};
use std::net::SocketAddr;

/// splitmix64: small, seedable, good enough for link models and generated traffic.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p` (0 ≤ p ≤ 1; never for p = 0).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// Uniform in `0..n` (0 for n = 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// An Initiator's FPDU stream, from the first octet after the startup frames, with what a
/// correct receiver must see: the ULPDU digest, the FPDU count, where each message starts and
/// (aligned) where each TCP segment must end.
#[derive(Debug)]
pub struct FpduStream {
    enc: FpduEncoder,
    /// Aligned (RFC 5044 §5.1 exact fill) to TCP segments of this many octets; `None`: any cut.
    aligned: Option<usize>,
    seg_used: usize,
    /// The wire octets.
    pub wire: Vec<u8>,
    /// Aligned: the stream offset where each TCP segment ends.
    pub segment_ends: Vec<usize>,
    /// CRC32c over every ULPDU octet, in order.
    pub digest: u32,
    /// FPDUs in the stream.
    pub fpdus: u64,
    /// The stream offset where each message begins.
    pub message_starts: Vec<usize>,
}

impl FpduStream {
    /// An empty stream; `aligned`: exact fill for segments of that many octets.
    pub fn new(markers: bool, aligned: Option<usize>) -> Self {
        FpduStream {
            enc: FpduEncoder::new(markers),
            aligned,
            seg_used: 0,
            wire: Vec::new(),
            segment_ends: Vec::new(),
            digest: 0,
            fpdus: 0,
            message_starts: Vec::new(),
        }
    }

    fn fpdu(&mut self, header: &[u8], payload: &[u8], end_segment: bool) {
        self.digest = crc32c_append(crc32c_append(self.digest, header), payload);
        let r = self
            .enc
            .encode_parts(&[header, payload], &mut self.wire)
            .expect("ULPDU within MULPDU");
        self.fpdus += 1;
        if let Some(emss) = self.aligned {
            self.seg_used += r.len();
            if end_segment || self.seg_used >= emss {
                self.segment_ends.push(self.wire.len());
                self.seg_used = 0;
            }
        }
    }

    /// One message of `data`: DDP segments with `header_len`-octet headers from
    /// `header(offset, last)`. Aligned streams cut by exact fill; otherwise each segment takes
    /// `take(left)` octets (at least 1, at most what is left).
    pub fn message(
        &mut self,
        data: &[u8],
        header_len: usize,
        header: impl Fn(usize, bool) -> DdpRepr,
        mut take: impl FnMut(usize) -> usize,
    ) {
        self.message_starts.push(self.wire.len());
        let mut off = 0;
        loop {
            let left = data.len() - off;
            let (n, last, end) = match self.aligned {
                Some(emss) => {
                    let c = exact_fill(&self.enc, emss, self.seg_used, header_len, left);
                    (c.take, c.last, c.end_segment)
                }
                None => {
                    let n = take(left).clamp(left.min(1), left);
                    (n, n == left, false)
                }
            };
            let mut h = [0u8; 32];
            header(off, last)
                .emit(&mut h[..header_len], 1)
                .expect("header fits");
            self.fpdu(&h[..header_len], &data[off..off + n], end);
            off += n;
            if last {
                break;
            }
        }
    }

    /// Aligned: closes the last segment (the stream's end is a segment end).
    pub fn finish(&mut self) {
        if self.aligned.is_some() && self.segment_ends.last() != Some(&self.wire.len()) {
            self.segment_ends.push(self.wire.len());
        }
    }
}

/// The DDP header of one segment of an RDMA Write to (`stag`, `to`).
pub fn write_segment(stag: u32, to: u64, last: bool) -> DdpRepr {
    DdpRepr::Tagged {
        last,
        opcode: RdmapOpcode::RdmaWrite,
        stag,
        to,
    }
}

/// The DDP header of one segment of Send `msn` at message offset `mo` (queue 0).
pub fn send_segment(msn: u32, mo: u32, last: bool) -> DdpRepr {
    DdpRepr::Untagged {
        last,
        opcode: RdmapOpcode::Send,
        inv_stag: 0,
        qn: queue::SEND,
        msn,
        mo,
    }
}

/// A hand-over of an established connection, as `mpa-control` sends it (no timestamps, SACK
/// permitted, window scale 7 both ways).
#[derive(Debug, Clone)]
pub struct SimHandover {
    /// The datapath's flow id.
    pub flow_id: u64,
    /// Our address.
    pub local: SocketAddr,
    /// The peer's.
    pub remote: SocketAddr,
    /// RCV.NXT (the peer's stream starts here).
    pub rcv_nxt: u32,
    /// SND.NXT.
    pub snd_nxt: u32,
    /// The peer's MSS.
    pub mss: u16,
    /// Receive window at hand-over.
    pub rcv_wnd: u32,
    /// Our role.
    pub role: Role,
    /// Markers toward us / toward the peer.
    pub markers_rx: bool,
    /// Markers toward the peer.
    pub markers_tx: bool,
    /// CRCs.
    pub crc: bool,
    /// Protection domain placed into.
    pub pd: Option<u32>,
    /// The peer aligns FPDUs with segments.
    pub aligned_sender: bool,
    /// RTRs (Initiator: the one it sends; Responder: those it accepts).
    pub rtr: Vec<RtrType>,
    /// The IRD and ORD revision 2 negotiated (`None`: not negotiated).
    pub ird: Option<u16>,
    /// See `ird`.
    pub ord: Option<u16>,
    /// The next hop's MAC.
    pub next_hop_mac: [u8; 6],
    /// TCP timestamps negotiated: our clock and the peer's last TSval at hand-over.
    pub timestamps: Option<TsSnapshot>,
}

impl Default for SimHandover {
    fn default() -> Self {
        SimHandover {
            flow_id: 1,
            local: "10.99.0.2:40000".parse().expect("address"),
            remote: "10.99.0.1:7777".parse().expect("address"),
            rcv_nxt: u32::MAX - 3000,
            snd_nxt: 1000,
            mss: 1460,
            rcv_wnd: 65535,
            role: Role::Initiator,
            markers_rx: false,
            markers_tx: false,
            crc: true,
            pd: None,
            aligned_sender: false,
            rtr: Vec::new(),
            ird: None,
            ord: None,
            timestamps: None,
            next_hop_mac: [2, 0, 0, 0, 0, 1],
        }
    }
}

impl SimHandover {
    /// The hand-over message.
    pub fn build(&self) -> HandOver {
        HandOver {
            flow_id: self.flow_id,
            tcp: TcpSnapshot {
                local: self.local,
                remote: self.remote,
                snd_nxt: self.snd_nxt,
                rcv_nxt: self.rcv_nxt,
                snd_wl1: self.rcv_nxt.wrapping_sub(1),
                snd_wnd: 65535,
                max_window: 65535,
                rcv_wnd: self.rcv_wnd,
                rcv_wup: self.rcv_nxt,
                mss: self.mss,
                rcv_wscale: Some(7),
                snd_wscale: Some(7),
                sack_permitted: true,
                timestamps: self.timestamps,
                send_queue: vec![],
                recv_queue: vec![],
            },
            mpa: MpaParams {
                role: self.role,
                rev: 2,
                markers_rx: self.markers_rx,
                markers_tx: self.markers_tx,
                crc: self.crc,
                ddp_rdmap_version: 1,
                reply_frame: vec![],
                rtr: self.rtr.clone(),
                pd: self.pd,
                aligned_sender: self.aligned_sender,
                request_frame: vec![],
                received_reply_frame: vec![],
                ird: self.ird,
                ord: self.ord,
            },
            next_hop_mac: self.next_hop_mac,
            app: None,
        }
    }
}
