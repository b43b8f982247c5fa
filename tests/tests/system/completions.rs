//! Completions through shared memory, whole system: a consumer that falls behind its
//! completion ring loses records — counted exactly, in the datapath's statistics and in what
//! the consumer API reports — while the flow keeps placing every octet; the records it does
//! get are in order. (A dead consumer's rings are released: `faults.rs`,
//! `dead_client_loses_its_regions_and_adoptions_and_other_flows_keep_placing`.)

use mpa_app::{Consumer, ConsumerError};
use mpa_ctl_proto::CompletionKind;
use mpa_tests::{
    datapath, ended_flow, gone_cleanly, hand_over, listen_in, require_privileged, stats,
    writes_from_a, BedConfig, DatapathOptions, TestBed,
};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

#[test]
fn a_slow_consumer_sees_counted_overflow_while_the_flow_places_every_octet() {
    if !require_privileged("completion ring overflow") {
        return;
    }
    const RING: u32 = 64;
    const WRITES: u64 = 2000;
    const LEN: usize = 500;
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, path) = datapath(
        &bed,
        &DatapathOptions {
            completion_ring: RING,
            ..DatapathOptions::default()
        },
    );
    let mut consumer = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
    let region = consumer.create_region(1 << 20, 1, true, false).unwrap();
    consumer.subscribe(1).unwrap();
    let stag = region.info().stag;
    let addr = SocketAddr::new(bed.addr_b(false), 7651);
    let listener = listen_in(&bed.ns_b, addr);
    let peer = writes_from_a(&bed, addr, stag, WRITES, LEN);
    let (flow, mut dpc, frozen) = hand_over(&bed, &path, &listener, false, true, Some(1));
    // The consumer reads nothing until the flow has ended.
    peer.join().unwrap().unwrap();
    gone_cleanly(&mut dpc, flow);
    drop(frozen);
    let f = ended_flow(&mut dpc, flow);
    assert_eq!((f.rx.placed_in_order, f.rx.completions), (WRITES, WRITES));
    // Every octet placed although the consumer read no completion.
    let want: Vec<u8> = (0..LEN).map(|j| (j % 251) as u8).collect();
    let mut got = vec![0u8; LEN];
    for i in 0..WRITES {
        assert!(region.read(i * LEN as u64, &mut got));
        assert_eq!(got, want, "write {i}");
    }
    // The worker counted what did not fit.
    let lost = WRITES - u64::from(RING);
    let s = stats(&mut dpc);
    assert_eq!(s.queues[0].stats.completions_overflow, lost);
    assert_eq!(s.queues[0].stats.completions_unclaimed, 0);
    // The consumer: the first RING completions in order, then the loss, exactly, then
    // nothing.
    let deadline = || Instant::now() + Duration::from_secs(2);
    let first = consumer
        .next_completions(deadline())
        .unwrap()
        .expect("the ring's records");
    assert_eq!(first.len(), RING as usize);
    for (i, c) in first.iter().enumerate() {
        assert_eq!(
            (c.flow_id, c.kind, c.stag, c.offset, c.len),
            (
                flow,
                CompletionKind::WritePlaced,
                stag,
                (i * LEN) as u64,
                LEN as u64
            )
        );
    }
    match consumer.next_completions(deadline()) {
        Err(ConsumerError::Overflow { pd: 1, lost: l }) => assert_eq!(l, lost),
        other => panic!("expected the overflow, got {other:?}"),
    }
    assert!(consumer
        .next_completions(Instant::now() + Duration::from_millis(200))
        .unwrap()
        .is_none());
    drop(dpc);
    dp.stop();
}
