//! `listen --echo`: the Responder half of the ping-pong latency test (`connect --op
//! pingpong`, `pingpong.rs`). Every complete RDMA Write message the listener places into its
//! region is written straight back to the Initiator: an RDMA Write of the same payload octets
//! to the region the Initiator advertised in its Request's private data ([`RegionAd`], the
//! format the listener's own Reply uses), at the same offset — sink TO = the Initiator's base
//! TO + (TO − our base TO). Sans I/O: [`Echo::on_ulpdu`] collects the messages, the
//! connection thread sends what [`Echo::take_ready`] gives after each batch it read, cut into
//! FPDUs of at most MULPDU octets ([`send`]), and flushes at once.
//!
//! A message is echoed only when its last segment (L set) has arrived: a Write of several DDP
//! segments comes back once, whole (RFC 5041 §5.3: the message is complete at L). Runs of
//! contiguous TOs are merged, so the echo is cut at MULPDU however the Initiator cut it.

use crate::read::segments;
use crate::sink::{copy_skipping, locate, OutOfRange};
use mpa::endpoint::{EndpointError, MpaStream, Transport};
use mpa::wire::ddp::{DdpRepr, RdmapOpcode, TerminateRepr, TAGGED_HEADER_LEN};
use mpa_ctl_proto::region_ad::{RegionAd, RegionAdError};

/// Why a Write cannot be echoed. Each ends the connection with a Terminate
/// ([`EchoError::terminate`]) carrying the header of the Write that could not be echoed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EchoError {
    /// The Request carried no region advertisement (the startup normally rejects such a
    /// Request already: `listen --echo` accepts only private data that starts with one).
    #[error(
        "--echo: the Initiator's Request carries no region advertisement to echo RDMA Writes into"
    )]
    NoAdvertisement,
    /// The Request's advertisement is malformed.
    #[error("--echo: the Initiator's Request carries a malformed region advertisement: {0}")]
    BadAdvertisement(RegionAdError),
    /// The Initiator's region does not accept RDMA Writes (flag 0x01 clear).
    #[error("--echo: the Initiator's region (STag {stag:#x}) does not accept RDMA Writes")]
    NoWrites { stag: u32 },
    /// The echo's target is (partly) outside the Initiator's region, or its TO wraps.
    #[error(
        "--echo: echo of {len} octets at TO {to:#x} is outside the Initiator's region (STag \
         {stag:#x}, TO {base_to:#x}, {region_len} octets)"
    )]
    OutsideRegion {
        stag: u32,
        to: u64,
        len: u64,
        base_to: u64,
        region_len: u64,
    },
    /// A message longer than our own region (its segments rewrote the same octets): more
    /// than an echo may hold back.
    #[error("--echo: an RDMA Write message of more than {limit} octets (the region's length)")]
    MessageTooLong { limit: u64 },
}

impl EchoError {
    /// RDMAP Remote Operation Error, Unspecified Error (RFC 5040 Figure 9: layer 0, type 2,
    /// code 0xFF): the Write was valid and placed, but this Responder cannot perform the echo
    /// it owes for it — the same code the datapath answers a Read Request it does not serve
    /// with.
    pub(crate) fn terminate(&self) -> TerminateRepr {
        TerminateRepr {
            layer: 0,
            error_type: 2,
            error_code: 0xff,
        }
    }
}

/// One echo Write: the message's runs of contiguous octets, each at its sink TO in the
/// Initiator's region.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct EchoWrite {
    /// The Initiator's STag.
    pub stag: u32,
    /// (sink TO, payload octets); L goes on the last FPDU of the last run.
    pub runs: Vec<(u64, Vec<u8>)>,
}

/// One connection's echo state.
pub(crate) struct Echo {
    /// The Initiator's region, or why there is none to echo into.
    target: Result<RegionAd, EchoError>,
    /// Our region (what the Writes were checked against).
    own: RegionAd,
    /// Test hook: every `corrupt_every`-th echo has its first octet flipped (0: never).
    corrupt_every: u64,
    /// The message being received: runs of (our TO, payload).
    current: Vec<(u64, Vec<u8>)>,
    current_len: u64,
    ready: Vec<EchoWrite>,
    echoes: u64,
}

impl Echo {
    /// The echo for a connection whose Request carried `peer_private_data`; `own` is our
    /// advertised region (its base TO set).
    pub(crate) fn new(own: &RegionAd, peer_private_data: &[u8], corrupt_every: u64) -> Self {
        let target = match RegionAd::parse(peer_private_data) {
            Ok(Some(ad)) if ad.writes => Ok(ad),
            Ok(Some(ad)) => Err(EchoError::NoWrites { stag: ad.stag }),
            Ok(None) => Err(EchoError::NoAdvertisement),
            Err(e) => Err(EchoError::BadAdvertisement(e)),
        };
        Echo {
            target,
            own: *own,
            corrupt_every,
            current: Vec::new(),
            current_len: 0,
            ready: Vec::new(),
            echoes: 0,
        }
    }

    /// The Initiator's region, when it advertised a usable one.
    pub(crate) fn target(&self) -> Result<&RegionAd, EchoError> {
        self.target.as_ref().map_err(|e| *e)
    }

    /// Echo Writes sent (counted when handed out by [`Echo::take_ready`]).
    pub(crate) fn echoes(&self) -> u64 {
        self.echoes
    }

    /// Takes one ULPDU the [`crate::sink::Sink`] has just placed without a violation (first
    /// octets `head`, `len` in all, given as `pieces`). RDMA Writes are collected; at L the
    /// message is checked against the Initiator's region and queued. Other messages are
    /// not echoed.
    pub(crate) fn on_ulpdu<'a>(
        &mut self,
        head: &[u8],
        len: usize,
        version: u8,
        pieces: impl Iterator<Item = &'a [u8]>,
    ) -> Result<(), EchoError> {
        let Ok((
            DdpRepr::Tagged {
                opcode: RdmapOpcode::RdmaWrite,
                last,
                to,
                ..
            },
            _,
        )) = DdpRepr::parse(head, version)
        else {
            return Ok(());
        };
        let n = len - TAGGED_HEADER_LEN;
        if n > 0 {
            self.current_len += n as u64;
            if self.current_len > self.own.len {
                return Err(EchoError::MessageTooLong {
                    limit: self.own.len,
                });
            }
            let run = match self.current.last_mut() {
                Some((at, run)) if *at + run.len() as u64 == to => run,
                _ => {
                    self.current.push((to, Vec::new()));
                    &mut self.current.last_mut().expect("just pushed").1
                }
            };
            let from = run.len();
            run.resize(from + n, 0);
            copy_skipping(pieces, TAGGED_HEADER_LEN, &mut run[from..]);
        }
        if !last {
            return Ok(());
        }
        let target = *self.target()?;
        let mut runs = std::mem::take(&mut self.current);
        self.current_len = 0;
        for (to, data) in &mut runs {
            // Our offset (the sink checked the segment: it lies in our region), the same
            // offset in the Initiator's region. Judged as an offset, so that it cannot wrap:
            // RegionAd::check keeps the Initiator's base TO + length within 64 bits.
            let off = *to - self.own.base_to;
            let len = data.len() as u64;
            if let Err(OutOfRange::Bounds | OutOfRange::Wrap) = locate(0, target.len, off, len) {
                return Err(EchoError::OutsideRegion {
                    stag: target.stag,
                    to: target.base_to.wrapping_add(off),
                    len,
                    base_to: target.base_to,
                    region_len: target.len,
                });
            }
            *to = target.base_to + off;
        }
        self.ready.push(EchoWrite {
            stag: target.stag,
            runs,
        });
        Ok(())
    }

    /// The echoes complete since the last call, in arrival order (RFC 5040 §5.5: the echo
    /// Writes go out in the order their messages arrived); counts them and applies the
    /// corruption test hook.
    pub(crate) fn take_ready(&mut self) -> Vec<EchoWrite> {
        let mut ready = std::mem::take(&mut self.ready);
        for w in &mut ready {
            self.echoes += 1;
            if self.corrupt_every > 0 && self.echoes.is_multiple_of(self.corrupt_every) {
                if let Some(b) = w.runs.iter_mut().find_map(|(_, d)| d.first_mut()) {
                    *b ^= 0x01;
                }
            }
        }
        ready
    }
}

/// Queues the echo Write `w` to the Initiator's region: tagged RDMA Writes cut into
/// DDP segments whose ULPDUs fit MULPDU, TO advancing, L on the last (a message without
/// octets is one empty segment with L). The caller flushes.
pub(crate) fn send<S: Transport>(s: &mut MpaStream<S>, w: &EchoWrite) -> Result<(), EndpointError> {
    let version = s.negotiated().ddp_rdmap_version;
    let max_payload = s.mulpdu().saturating_sub(TAGGED_HEADER_LEN);
    let mut h = [0u8; TAGGED_HEADER_LEN];
    let empty = [(0u64, Vec::new())];
    let runs = if w.runs.is_empty() {
        &empty[..]
    } else {
        &w.runs
    };
    for (r, (to, data)) in runs.iter().enumerate() {
        let last_run = r + 1 == runs.len();
        for (at, take, last) in segments(data.len(), max_payload) {
            DdpRepr::Tagged {
                last: last && last_run,
                opcode: RdmapOpcode::RdmaWrite,
                stag: w.stag,
                to: to.wrapping_add(at as u64),
            }
            .emit(&mut h, version);
            s.send_parts(&[&h, &data[at..at + take]])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ad(stag: u32, base_to: u64, len: u64) -> RegionAd {
        RegionAd {
            writes: true,
            sends: false,
            stag,
            len,
            base_to,
            recv_buf_size: 0,
        }
    }

    fn write_ulpdu(to: u64, last: bool, payload: &[u8]) -> Vec<u8> {
        crate::sink::tagged_ulpdu(RdmapOpcode::RdmaWrite, 0x77, to, last, payload)
    }

    fn feed(e: &mut Echo, u: &[u8]) -> Result<(), EchoError> {
        // Two pieces, as markers would cut it.
        let cut = u.len().min(7);
        e.on_ulpdu(
            &u[..u.len().min(TAGGED_HEADER_LEN)],
            u.len(),
            1,
            [&u[..cut], &u[cut..]].into_iter(),
        )
    }

    #[test]
    fn a_message_is_echoed_once_at_the_same_offset() {
        // Ours: TOs 1000..1600; theirs: TOs 0x10..0x10 + 600.
        let mut e = Echo::new(&ad(0x77, 1000, 600), &ad(0x99, 0x10, 600).emit(), 0);
        let data: Vec<u8> = (0..300u16).map(|i| i as u8).collect();
        feed(&mut e, &write_ulpdu(1200, false, &data[..100])).unwrap();
        assert!(e.take_ready().is_empty(), "not before L");
        feed(&mut e, &write_ulpdu(1300, true, &data[100..])).unwrap();
        let ready = e.take_ready();
        assert_eq!(
            ready,
            [EchoWrite {
                stag: 0x99,
                runs: vec![(0x10 + 200, data.clone())]
            }]
        );
        assert_eq!(e.echoes(), 1);
        // Non-contiguous segments stay separate runs; a zero-length Write is echoed empty.
        feed(&mut e, &write_ulpdu(1000, false, &data[..10])).unwrap();
        feed(&mut e, &write_ulpdu(1500, true, &data[..5])).unwrap();
        feed(&mut e, &write_ulpdu(u64::MAX, true, &[])).unwrap();
        let ready = e.take_ready();
        assert_eq!(ready.len(), 2);
        assert_eq!(
            ready[0].runs,
            [
                (0x10, data[..10].to_vec()),
                (0x10 + 500, data[..5].to_vec())
            ]
        );
        assert!(ready[1].runs.is_empty());
        assert_eq!(e.echoes(), 3);
    }

    #[test]
    fn echoes_outside_the_initiators_region_are_refused() {
        // Theirs holds 100 octets: an echo at our offset 50 of 60 octets does not fit.
        let mut e = Echo::new(&ad(0x77, 0, 600), &ad(0x99, 0, 100).emit(), 0);
        feed(&mut e, &write_ulpdu(0, true, &[1; 100])).unwrap();
        assert_eq!(
            feed(&mut e, &write_ulpdu(50, true, &[1; 60])),
            Err(EchoError::OutsideRegion {
                stag: 0x99,
                to: 50,
                len: 60,
                base_to: 0,
                region_len: 100
            })
        );
        // Their region at the top of the TO space: the offset maps past 2^64.
        let mut e = Echo::new(&ad(0x77, 0, 600), &ad(0x99, u64::MAX - 99, 99).emit(), 0);
        assert!(matches!(
            feed(&mut e, &write_ulpdu(200, true, &[1; 10])),
            Err(EchoError::OutsideRegion { .. })
        ));
        let t = EchoError::NoAdvertisement.terminate();
        assert_eq!((t.layer, t.error_type, t.error_code), (0, 2, 0xff));
    }

    #[test]
    fn no_usable_advertisement_fails_at_the_first_write() {
        let mut no_writes = ad(0x99, 0, 100);
        no_writes.writes = false;
        let mut bad = ad(0x99, 0, 100).emit();
        bad[4] = 2;
        for (pd, want) in [
            (b"hello".to_vec(), EchoError::NoAdvertisement),
            (
                no_writes.emit().to_vec(),
                EchoError::NoWrites { stag: 0x99 },
            ),
            (
                bad.to_vec(),
                EchoError::BadAdvertisement(RegionAdError::Version(2)),
            ),
        ] {
            let mut e = Echo::new(&ad(0x77, 0, 600), &pd, 0);
            assert_eq!(e.target().unwrap_err(), want);
            // Segments without L are only collected.
            feed(&mut e, &write_ulpdu(0, false, &[1; 10])).unwrap();
            assert_eq!(feed(&mut e, &write_ulpdu(10, true, &[1; 10])), Err(want));
        }
    }

    #[test]
    fn messages_longer_than_the_region_are_refused() {
        let mut e = Echo::new(&ad(0x77, 0, 100), &ad(0x99, 0, 100).emit(), 0);
        feed(&mut e, &write_ulpdu(0, false, &[1; 100])).unwrap();
        assert_eq!(
            feed(&mut e, &write_ulpdu(0, false, &[1; 1])),
            Err(EchoError::MessageTooLong { limit: 100 })
        );
    }

    #[test]
    fn every_kth_echo_is_corrupted_when_asked() {
        let mut e = Echo::new(&ad(0x77, 0, 100), &ad(0x99, 0, 100).emit(), 2);
        for _ in 0..4 {
            feed(&mut e, &write_ulpdu(0, true, &[7; 3])).unwrap();
        }
        let firsts: Vec<u8> = e.take_ready().iter().map(|w| w.runs[0].1[0]).collect();
        assert_eq!(firsts, [7, 6, 7, 6]);
    }
}
