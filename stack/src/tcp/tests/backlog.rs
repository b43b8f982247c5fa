//! A source that holds more than the TCP may see at once (`SendSource::backlog`): the TCP
//! sends what is in view, more comes into view as octets are acknowledged, and a `close`
//! places the FIN after the last octet, not after the last one in view. Scaled down: the
//! test source shows 10 000 octets at a time where an FPDU source shows `MAX_VISIBLE`.

use super::harness::*;
use crate::tcp::{Connection, SendSource, SourceError, State, TcpConfig};
use std::time::Instant;

/// `total` octets of the harness's stream pattern, `view` of them in view at once.
struct Backlogged {
    total: u64,
    acked: u64,
    view: u64,
}

impl SendSource for Backlogged {
    fn queued(&self) -> usize {
        (self.total - self.acked).min(self.view) as usize
    }

    fn backlog(&self) -> u64 {
        (self.total - self.acked).saturating_sub(self.view)
    }

    fn segment_len(&self, off: usize, room: usize) -> usize {
        self.queued().saturating_sub(off).min(room)
    }

    fn fill(&mut self, off: usize, out: &mut [u8]) -> Result<(), SourceError> {
        assert!(
            off + out.len() <= self.queued(),
            "only octets in view are asked for"
        );
        out.copy_from_slice(&stream(self.acked + off as u64, out.len()));
        Ok(())
    }

    fn acked(&mut self, n: usize) {
        self.acked += n as u64;
    }
}

/// Everything the connection sends now.
fn drain(c: &mut Connection<Backlogged>, now: Instant) -> Vec<Seg> {
    let mut buf = [0u8; 2048];
    let mut v = Vec::new();
    while let Some(t) = c.poll_transmit(now, &mut buf) {
        v.push(parse(&buf[..t.len()]));
        assert!(v.len() < 10_000, "poll_transmit never returns None");
    }
    v
}

#[test]
fn octets_beyond_the_view_are_sent_as_acks_bring_them_in_and_the_fin_follows_the_last() {
    let t0 = Instant::now();
    let h = handover(t0, false);
    const TOTAL: u64 = 50_000;
    let src = Backlogged {
        total: TOTAL,
        acked: 0,
        view: 10_000,
    };
    let mut c = Connection::with_source(&h, &TcpConfig::default(), t0, src).unwrap();
    c.close();
    assert!(!c.can_queue(), "closed for new octets at once");
    let mut peer = Peer::new(false);
    let mut got = Vec::new();
    let mut fin_at = None;
    let mut now = t0;
    for _ in 0..1000 {
        now += ms(1);
        let segs = drain(&mut c, now);
        if segs.is_empty() {
            break;
        }
        for s in &segs {
            let off = s.repr.seq_number.distance_from(h.snd_nxt) as u64;
            if !s.payload.is_empty() {
                assert_eq!(off, got.len() as u64, "in order, no gap");
                got.extend_from_slice(&s.payload);
            }
            if s.repr.flags.contains(crate::wire::tcp::TcpFlags::FIN) {
                fin_at = Some(off + s.payload.len() as u64);
            }
            peer.ack = s.repr.seq_number
                + s.payload.len() as u32
                + u32::from(s.repr.flags.contains(crate::wire::tcp::TcpFlags::FIN));
        }
        c.handle_segment(now, &peer.pure_ack(0), &[]);
    }
    assert_eq!(got.len() as u64, TOTAL);
    assert!(got == stream(0, TOTAL as usize), "every octet, in order");
    assert_eq!(
        fin_at,
        Some(TOTAL),
        "the FIN after the last octet, not the view's"
    );
    assert_eq!(c.state(), State::FinWait2);
}
