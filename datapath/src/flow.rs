//! One handed-over MPA connection inside a worker: its TCP, its MPA receiver, and what it
//! sends (the accepting Reply, ACKs, a Terminate on error).

use crate::tcp::{Connection, Event, HandoverState, TcpConfig, TsHandover};
use crate::wire::frame::FrameTemplate;
use crate::wire::tcp::TcpRepr;
use mpa::crc::crc32c_append;
use mpa::decoder::{DecodeError, FpduDecoder};
use mpa::encoder::FpduEncoder;
use mpa::endpoint::rtr_ulpdu;
use mpa::startup::RtrType;
use mpa::wire::ddp::{self, terminate_ulpdu, DdpRepr, RdmapOpcode};
use mpa::MpaErrorCode;
use mpa_ctl_proto::{HandOver, Role};
use serde_json::json;
use std::time::{Duration, Instant};

/// Why a hand-over could not become a flow.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    /// The TCP state is not usable.
    #[error("TCP state: {0}")]
    Tcp(#[from] crate::tcp::TcpError),
    /// Addresses or MACs are not usable.
    #[error("frame template: {0}")]
    Frame(#[from] crate::wire::frame::FrameError),
    /// Something else in the hand-over is wrong.
    #[error("hand-over: {0}")]
    Invalid(String),
}

/// Counters of one flow (MPA side; TCP keeps its own).
#[derive(Debug, Clone, Copy, Default)]
pub struct FlowStats {
    /// Frames received for this flow.
    pub packets: u64,
    /// FPDUs delivered.
    pub fpdus: u64,
    /// ULPDU octets delivered.
    pub ulpdu_octets: u64,
    /// CRC errors (error 2).
    pub crc_errors: u64,
    /// Marker errors (error 3).
    pub marker_errors: u64,
    /// Frames sent.
    pub frames_sent: u64,
}

/// How a flow ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowEnd {
    /// The MPA error code (RFC 5044 §8), `None` for a clean close.
    pub mpa_error: Option<u8>,
    /// Why, in words.
    pub reason: String,
}

/// One connection.
pub struct Flow {
    /// The datapath's id.
    pub id: u64,
    tcp: Connection,
    template: FrameTemplate,
    decoder: FpduDecoder,
    encoder: FpduEncoder,
    version: u8,
    /// RFC 5044 §7.1.2: a Responder sends no FPDU before one arrived; RFC 6581: the first must
    /// be one of these RTRs (empty: any FPDU).
    expect_first: Option<Vec<String>>,
    digest: Option<u32>,
    stats: FlowStats,
    ending: Option<FlowEnd>,
    ended: Option<FlowEnd>,
    /// When the flow started, for reports.
    pub started: Instant,
}

/// Converts a CLOCK_MONOTONIC reading into an `Instant` (both use the same clock on Linux).
fn instant_of_monotonic(ns: u64, now: Instant) -> Instant {
    let now_ns = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(ns);
    now.checked_sub(Duration::from_nanos(now_ns.saturating_sub(ns)))
        .unwrap_or(now)
}

impl Flow {
    /// Builds the flow from a hand-over; `our_mac` is the interface's address. A Responder's
    /// accepting Reply is queued at once (TCP retransmits it until acknowledged); so is a
    /// peer-to-peer Initiator's RTR indication, its first FPDU.
    pub fn new(
        h: &HandOver,
        our_mac: [u8; 6],
        cfg: &TcpConfig,
        digest: bool,
        now: Instant,
    ) -> Result<Flow, FlowError> {
        let t = &h.tcp;
        let ts = t.timestamps.map(|ts| TsHandover {
            tsval_at_freeze: ts.tsval,
            freeze_instant: instant_of_monotonic(ts.monotonic_ns, now),
            ts_recent: ts.ts_recent,
        });
        let state = HandoverState {
            local_port: t.local.port(),
            remote_port: t.remote.port(),
            snd_nxt: mpa::SeqNumber(t.snd_nxt),
            rcv_nxt: mpa::SeqNumber(t.rcv_nxt),
            snd_wnd: t.snd_wnd,
            rcv_wnd: t.rcv_wnd,
            rcv_wup: mpa::SeqNumber(t.rcv_wup),
            snd_wscale: t.snd_wscale.unwrap_or(0),
            rcv_wscale: t.rcv_wscale.unwrap_or(0),
            mss: t.mss,
            sack_permitted: t.sack_permitted,
            timestamps: ts,
        };
        let mut tcp = Connection::new(&state, cfg, now)?;
        let template = FrameTemplate::new(our_mac, h.next_hop_mac, t.local, t.remote)?;
        let m = &h.mpa;
        let mut encoder = FpduEncoder::new(m.markers_tx);
        let expect_first = match m.role {
            Role::Responder => {
                if m.reply_frame.is_empty() {
                    return Err(FlowError::Invalid(
                        "Responder hand-over without a Reply".into(),
                    ));
                }
                if tcp.send(&m.reply_frame) != m.reply_frame.len() {
                    return Err(FlowError::Invalid(
                        "Reply does not fit the send buffer".into(),
                    ));
                }
                Some(m.rtr.clone())
            }
            Role::Initiator => {
                if !m.reply_frame.is_empty() {
                    return Err(FlowError::Invalid(
                        "Initiator hand-over with a Reply frame".into(),
                    ));
                }
                match m.rtr.as_slice() {
                    // Not peer-to-peer: the ULP's first FPDU comes later.
                    [] => {}
                    // RFC 6581 §9.2: the negotiated RTR is the very first FPDU, framed as
                    // agreed (markers toward the peer if it asked for them).
                    [name] => {
                        let rtr = parse_rtr(name).ok_or_else(|| {
                            FlowError::Invalid(format!("unknown RTR indication {name:?}"))
                        })?;
                        let mut wire = Vec::new();
                        encoder
                            .encode(&rtr_ulpdu(rtr, m.ddp_rdmap_version), &mut wire)
                            .map_err(|e| FlowError::Invalid(format!("RTR FPDU: {e}")))?;
                        if tcp.send(&wire) != wire.len() {
                            return Err(FlowError::Invalid(
                                "RTR does not fit the send buffer".into(),
                            ));
                        }
                    }
                    more => {
                        return Err(FlowError::Invalid(format!(
                            "an Initiator sends one RTR indication, not {more:?}"
                        )))
                    }
                }
                None
            }
        };
        Ok(Flow {
            id: h.flow_id,
            tcp,
            template,
            decoder: FpduDecoder::new(m.markers_rx, m.crc),
            encoder,
            version: m.ddp_rdmap_version,
            expect_first,
            digest: digest.then_some(0),
            stats: FlowStats::default(),
            ending: None,
            ended: None,
            started: now,
        })
    }

    /// Handles one TCP segment of this flow.
    pub fn on_segment(&mut self, now: Instant, repr: &TcpRepr, payload: &[u8]) {
        self.stats.packets += 1;
        let out = self.tcp.handle_segment(now, repr, payload);
        let in_order = payload.get(out.in_order).unwrap_or(&[]);
        let Flow {
            tcp,
            decoder,
            expect_first,
            digest,
            stats,
            version,
            ..
        } = self;
        let mut rx = MpaRx {
            decoder,
            read_response: None,
            expect_first,
            digest,
            stats,
            version: *version,
            failure: None,
        };
        rx.consume(in_order);
        if out.reassembled > 0 {
            tcp.drain_reassembled(|b| rx.consume(b));
        }
        let (failure, read_response) = (rx.failure, rx.read_response);
        if let Some(code) = failure {
            self.fail(code);
        } else if let Some((stag, to)) = read_response {
            // A zero-length Read Request RTR is answered by a zero-length Read Response
            // (RFC 6581 §9.2, RFC 5040 §5.2): our first FPDU, allowed now that one arrived.
            let resp = DdpRepr::Tagged {
                last: true,
                opcode: RdmapOpcode::RdmaReadResponse,
                stag,
                to,
            };
            let mut h = [0u8; ddp::TAGGED_HEADER_LEN];
            let mut wire = Vec::new();
            if resp.emit(&mut h, self.version).is_some()
                && self.encoder.encode(&h, &mut wire).is_ok()
            {
                self.tcp.send(&wire);
            }
        }
    }

    /// Ends the connection with an MPA error: a Terminate (layer 2, type 0) goes out as an
    /// FPDU, then our FIN (RFC 5044 §8: the ULP — us — sends the Terminate, then closes).
    fn fail(&mut self, code: MpaErrorCode) {
        if self.ending.is_some() || self.ended.is_some() {
            return;
        }
        let t = terminate_ulpdu(code, 1, self.version);
        let mut wire = Vec::new();
        if self.encoder.encode(&t, &mut wire).is_ok() {
            self.tcp.send(&wire);
        }
        self.tcp.close();
        self.ending = Some(FlowEnd {
            mpa_error: Some(code.code()),
            reason: code.to_string(),
        });
    }

    /// Called at the end of each RX burst that touched this flow.
    pub fn end_of_burst(&mut self, now: Instant) {
        self.tcp.end_of_burst(now);
    }

    /// Runs timers due at `now`.
    pub fn on_timer(&mut self, now: Instant) {
        if self.tcp.poll_timeout().is_some_and(|t| t <= now) {
            self.tcp.handle_timeout(now);
        }
    }

    /// When the flow next needs [`Flow::on_timer`].
    pub fn next_timeout(&self) -> Option<Instant> {
        self.tcp.poll_timeout()
    }

    /// Builds every frame due now into `scratch` and hands each to `send`.
    pub fn poll_frames(&mut self, now: Instant, scratch: &mut [u8], mut send: impl FnMut(&[u8])) {
        let l = self.template.l2l3_len();
        while let Some(tx) = scratch
            .get_mut(l..)
            .and_then(|b| self.tcp.poll_transmit(now, b))
        {
            match self
                .template
                .finish(scratch, tx.header_len + tx.payload_len)
            {
                Ok(n) => {
                    self.stats.frames_sent += 1;
                    send(&scratch[..n]);
                }
                Err(e) => tracing::error!(flow = self.id, %e, "cannot build frame"),
            }
        }
        self.poll_events();
    }

    fn poll_events(&mut self) {
        while let Some(ev) = self.tcp.poll_event() {
            match ev {
                Event::PeerClosed => {
                    // The peer finished sending: close our side too. An FPDU cut short by the
                    // FIN is error 1.
                    if self.decoder.buffered() > 0 && self.ending.is_none() {
                        self.ending = Some(FlowEnd {
                            mpa_error: Some(MpaErrorCode::TcpClosed.code()),
                            reason: "peer closed inside an FPDU".into(),
                        });
                    }
                    self.tcp.close();
                }
                Event::Reset => {
                    let reason = "connection reset by the peer".to_string();
                    self.finish(Some(MpaErrorCode::TcpClosed.code()), reason);
                }
                Event::Failed(e) => {
                    self.finish(Some(MpaErrorCode::TcpClosed.code()), format!("TCP: {e}"));
                }
                Event::Closed => {
                    let (code, reason) = match self.ending.take() {
                        Some(e) => (e.mpa_error, e.reason),
                        None => (None, "closed".to_string()),
                    };
                    self.finish(code, reason);
                }
            }
        }
    }

    fn finish(&mut self, mpa_error: Option<u8>, reason: String) {
        if self.ended.is_none() {
            // An earlier MPA error wins over the TCP close it caused.
            let end = match self.ending.take() {
                Some(e) if e.mpa_error.is_some() => e,
                _ => FlowEnd { mpa_error, reason },
            };
            self.ended = Some(end);
        }
    }

    /// How the flow ended, once it has.
    pub fn ended(&self) -> Option<&FlowEnd> {
        self.ended.as_ref()
    }

    /// Forgets the connection at once (operator close): RST to the peer.
    pub fn abort(&mut self) {
        self.tcp.abort();
        self.finish(None, "closed by the operator".into());
    }

    /// Counters and state as JSON.
    pub fn stats_json(&self) -> serde_json::Value {
        let t = self.tcp.stats();
        json!({
            "flow_id": self.id,
            "state": format!("{:?}", self.tcp.state()),
            "packets": self.stats.packets,
            "octets": t.octets_in,
            "fpdus": self.stats.fpdus,
            "ulpdu_octets": self.stats.ulpdu_octets,
            "crc_errors": self.stats.crc_errors,
            "marker_errors": self.stats.marker_errors,
            "out_of_order_segments": t.ooo_segs,
            "duplicates": t.dup_full + t.dup_partial,
            "sack_blocks_sent": t.sack_blocks_sent,
            "acks_sent": t.acks_sent,
            "retransmissions": t.retransmissions,
            "frames_sent": self.stats.frames_sent,
            "octets_out": t.octets_out,
            "ulpdu_digest": self.digest.map(|d| format!("{d:08x}")),
            "ended": self.ended.as_ref().map(|e| json!({"mpa_error": e.mpa_error, "reason": e.reason})),
        })
    }
}

/// The MPA receive side over in-order octets.
struct MpaRx<'a> {
    decoder: &'a mut FpduDecoder,
    /// Set by a zero-length Read Request RTR: (sink STag, sink TO) to answer.
    read_response: Option<(u32, u64)>,
    expect_first: &'a mut Option<Vec<String>>,
    digest: &'a mut Option<u32>,
    stats: &'a mut FlowStats,
    version: u8,
    failure: Option<MpaErrorCode>,
}

impl MpaRx<'_> {
    fn consume(&mut self, bytes: &[u8]) {
        if self.failure.is_some() || bytes.is_empty() {
            return;
        }
        let mut chunk = self.decoder.feed(bytes);
        while let Some(r) = chunk.next_ulpdu() {
            match r {
                Ok(u) => {
                    if let Some(rtrs) = self.expect_first.take() {
                        if !rtrs.is_empty() {
                            // RFC 6581 §9.2: the first FPDU is a negotiated RTR, not data.
                            let mut head =
                                [0u8; ddp::UNTAGGED_HEADER_LEN + ddp::READ_REQUEST_HEADER_LEN];
                            let n = u.copy_prefix(&mut head);
                            match rtr_of(&head[..n], u.len(), self.version, &rtrs) {
                                None => {
                                    self.failure = Some(MpaErrorCode::NoMatchingRtr);
                                    break;
                                }
                                Some(RtrType::ZeroLengthReadRequest) => {
                                    // RFC 5040 §4.4: sink STag and sink TO follow the DDP
                                    // header; the zero-length Read Response goes there.
                                    let h = &head[ddp::UNTAGGED_HEADER_LEN..];
                                    let stag = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
                                    let to = u64::from_be_bytes([
                                        h[4], h[5], h[6], h[7], h[8], h[9], h[10], h[11],
                                    ]);
                                    self.read_response = Some((stag, to));
                                }
                                Some(_) => {}
                            }
                            continue;
                        }
                    }
                    self.stats.fpdus += 1;
                    self.stats.ulpdu_octets += u.len() as u64;
                    if let Some(d) = self.digest.as_mut() {
                        for p in u.pieces() {
                            *d = crc32c_append(*d, p);
                        }
                    }
                }
                Err(e) => {
                    match e {
                        DecodeError::Crc { .. } => self.stats.crc_errors += 1,
                        DecodeError::Marker { .. } | DecodeError::Misframed { .. } => {
                            self.stats.marker_errors += 1
                        }
                        DecodeError::Abandoned => {}
                    }
                    self.failure = Some(e.code());
                    break;
                }
            }
        }
        while chunk.next_ulpdu().is_some() {}
    }
}

fn rtr_of(head: &[u8], len: usize, version: u8, allowed: &[String]) -> Option<RtrType> {
    // The hand-over names the accepted RTRs as `RtrType`'s Debug form.
    mpa::endpoint::classify_rtr(head, len, version)
        .filter(|rtr| allowed.iter().any(|a| *a == format!("{rtr:?}")))
}

/// An RTR indication from its hand-over name (`RtrType`'s Debug form; case and surrounding
/// blanks do not matter).
fn parse_rtr(name: &str) -> Option<RtrType> {
    let name = name.trim();
    RtrType::ALL
        .into_iter()
        .find(|r| format!("{r:?}").eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpa_ctl_proto::{MpaParams, TcpSnapshot};

    fn handover(rtr: &[&str], markers_tx: bool) -> HandOver {
        HandOver {
            flow_id: 3,
            tcp: TcpSnapshot {
                local: "10.99.0.2:40000".parse().unwrap(),
                remote: "10.99.0.1:7777".parse().unwrap(),
                snd_nxt: 1000,
                rcv_nxt: 5000,
                snd_wl1: 4999,
                snd_wnd: 65535,
                max_window: 65535,
                rcv_wnd: 65535,
                rcv_wup: 5000,
                mss: 1460,
                rcv_wscale: Some(7),
                snd_wscale: Some(7),
                sack_permitted: true,
                timestamps: None,
                send_queue: vec![],
                recv_queue: vec![],
            },
            mpa: MpaParams {
                role: Role::Initiator,
                rev: 2,
                markers_rx: false,
                markers_tx,
                crc: true,
                ddp_rdmap_version: 1,
                reply_frame: vec![],
                rtr: rtr.iter().map(|s| s.to_string()).collect(),
            },
            next_hop_mac: [2, 0, 0, 0, 0, 1],
        }
    }

    /// Every payload the flow sends at creation.
    fn sent(h: &HandOver) -> Result<Vec<Vec<u8>>, FlowError> {
        let now = Instant::now();
        let mut f = Flow::new(h, [2, 0, 0, 0, 0, 2], &TcpConfig::default(), false, now)?;
        let mut scratch = vec![0u8; 2048];
        let mut frames = Vec::new();
        f.poll_frames(now, &mut scratch, |b| frames.push(b.to_vec()));
        let octets = f.stats_json()["octets_out"].as_u64().unwrap() as usize;
        // The payload is the tail of each frame (IPv4 without options, frames over 60 octets).
        Ok(frames
            .into_iter()
            .map(|fr| fr[fr.len() - octets.min(fr.len())..].to_vec())
            .filter(|p| octets > 0 && !p.is_empty())
            .collect())
    }

    #[test]
    fn initiator_sends_the_rtr_first_framed_as_agreed() {
        for (name, rtr) in [
            ("ZeroLengthSend", RtrType::ZeroLengthSend),
            ("ZeroLengthWrite", RtrType::ZeroLengthWrite),
            (" zerolengthreadrequest ", RtrType::ZeroLengthReadRequest),
        ] {
            for markers in [false, true] {
                let mut want = Vec::new();
                FpduEncoder::new(markers)
                    .encode(&rtr_ulpdu(rtr, 1), &mut want)
                    .unwrap();
                let got = sent(&handover(&[name], markers)).unwrap();
                assert_eq!(got, vec![want], "{name} markers {markers}");
            }
        }
    }

    #[test]
    fn initiator_without_rtr_sends_nothing() {
        assert!(sent(&handover(&[], true)).unwrap().is_empty());
    }

    #[test]
    fn bad_rtr_names_are_refused() {
        for rtr in [
            &["ZeroLengthSendX"][..],
            &["Send"],
            &["ZeroLengthSend", "ZeroLengthWrite"],
        ] {
            assert!(
                matches!(sent(&handover(rtr, false)), Err(FlowError::Invalid(_))),
                "{rtr:?}"
            );
        }
        let mut h = handover(&[], false);
        h.mpa.reply_frame = b"MPA ID Rep Frame\x40\x01\x00\x00".to_vec();
        assert!(matches!(sent(&h), Err(FlowError::Invalid(_))));
    }
}
