//! Receive fast path of the minimal TCP: `handle_segment` on 1448-octet segments with
//! timestamps (PAWS checked on every segment), bursts of 32 followed by `end_of_burst` and
//! the ACK emitted into a buffer, as a worker's poll loop does. In order, and with 1 %
//! reordering (every 100th segment overtakes its predecessor: one copy into the reassembly
//! store and one drain). Reported per segment (elements) and per payload octet (bytes).
//!
//! `cargo bench -p mpa-datapath --bench tcp`

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mpa::seq::SeqNumber;
use mpa_stack::tcp::{Connection, HandoverState, TcpConfig, TsHandover};
use mpa_stack::wire::tcp::{TcpFlags, TcpOptions, TcpPacket, TcpRepr, TcpTimestamps};

const SEG: usize = 1448;
/// Segments per iteration.
const BATCH: usize = 1024;
const BURST: usize = 32;

struct Rx {
    conn: Connection,
    base: SeqNumber,
    now: Instant,
    tsval: u32,
    payload: Vec<u8>,
    tx: Vec<u8>,
}

impl Rx {
    fn new() -> Rx {
        let now = Instant::now();
        let start = SeqNumber(u32::MAX - 100_000);
        let h = HandoverState {
            local_port: 7777,
            remote_port: 40000,
            snd_nxt: SeqNumber(1),
            rcv_nxt: start,
            snd_wnd: 1 << 20,
            rcv_wnd: 1 << 20,
            rcv_wup: start,
            snd_wscale: 7,
            rcv_wscale: 7,
            mss: 1460,
            sack_permitted: true,
            timestamps: Some(TsHandover {
                tsval_at_freeze: 1,
                freeze_instant: now,
                ts_recent: 1,
            }),
        };
        let cfg = TcpConfig {
            rcv_buf: 4 << 20,
            reassembly_limit: 4 << 20,
            ..TcpConfig::default()
        };
        Rx {
            conn: Connection::new(&h, &cfg, now).unwrap(),
            base: start,
            now,
            tsval: 2,
            payload: (0..SEG).map(|i| i as u8).collect(),
            tx: vec![0u8; 2048],
        }
    }

    fn repr(&self, k: usize) -> TcpRepr {
        TcpRepr {
            src_port: 40000,
            dst_port: 7777,
            seq_number: self.base + k * SEG,
            ack_number: Some(SeqNumber(1)),
            flags: TcpFlags::PSH,
            window_len: 512,
            urgent_at: 0,
            options: TcpOptions {
                timestamps: Some(TcpTimestamps {
                    tsval: self.tsval,
                    tsecr: 1,
                }),
                ..TcpOptions::default()
            },
        }
    }

    /// One batch of segments; returns payload octets delivered.
    fn batch(&mut self, reorder: bool) -> usize {
        let mut delivered = 0;
        for b in 0..BATCH / BURST {
            for i in 0..BURST {
                let k = b * BURST + i;
                let idx = match (reorder, k % 100) {
                    (true, 98) => k + 1,
                    (true, 99) => k - 1,
                    _ => k,
                };
                let repr = self.repr(idx);
                let out = self.conn.handle_segment(self.now, &repr, &self.payload);
                delivered += black_box(&self.payload[out.in_order]).len();
                if out.reassembled > 0 {
                    delivered += self.conn.drain_reassembled(|s| {
                        black_box(s);
                    });
                }
            }
            self.now += Duration::from_micros(10);
            self.tsval = self.tsval.wrapping_add(1);
            self.conn.end_of_burst(self.now);
            while let Some(t) = self.conn.poll_transmit(self.now, &mut self.tx) {
                black_box(t);
            }
        }
        self.base = self.base + BATCH * SEG;
        delivered
    }
}

/// A whole wire segment, for the parse + checksum cost beside `handle_segment`.
fn wire_segment() -> Vec<u8> {
    let rx = Rx::new();
    let repr = rx.repr(0);
    let mut buf = vec![0u8; repr.header_len() + SEG];
    let n = repr
        .emit(&mut TcpPacket::new_unchecked(&mut buf[..]))
        .unwrap();
    buf[n..].copy_from_slice(&rx.payload);
    TcpPacket::new_unchecked(&mut buf[..])
        .fill_checksum_v4(Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 1));
    buf
}

fn bench(c: &mut Criterion) {
    for (unit, tp) in [
        ("segments", Throughput::Elements(BATCH as u64)),
        ("bytes", Throughput::Bytes((BATCH * SEG) as u64)),
    ] {
        let mut g = c.benchmark_group(format!("tcp/handle_segment/{unit}"));
        g.measurement_time(Duration::from_secs(2))
            .warm_up_time(Duration::from_millis(500))
            .sample_size(30)
            .throughput(tp);
        for (name, reorder) in [("in_order", false), ("reorder_1pct", true)] {
            let mut rx = Rx::new();
            g.bench_function(name, |b| {
                b.iter(|| {
                    let n = rx.batch(reorder);
                    assert_eq!(n, BATCH * SEG);
                    n
                })
            });
            let s = rx.conn.stats();
            assert_eq!(
                s.octets_delivered,
                s.in_order_segs * SEG as u64 + s.octets_reassembled
            );
        }
        g.finish();
    }

    let seg = wire_segment();
    let mut g = c.benchmark_group("tcp/wire");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(30)
        .throughput(Throughput::Bytes(seg.len() as u64));
    g.bench_function("parse+verify_checksum_v4", |b| {
        b.iter(|| {
            let p = TcpPacket::new_checked(black_box(&seg[..])).unwrap();
            assert!(p.verify_checksum_v4(Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 1)));
            black_box(TcpRepr::parse(&p).unwrap())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
