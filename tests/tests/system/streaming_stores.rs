//! Streaming stores, whole system (docs/features.md, "Streaming stores"): with
//! `--streaming-stores on` a kernel Initiator's RDMA Writes with markers land octet for octet,
//! every message counted as streamed, and a consumer that reads each message as soon as its
//! completion shows finds all of its octets (the worker fences before it publishes); with
//! `off` the same traffic streams nothing.

use mpa_app::Consumer;
use mpa_datapath::memory::streaming::StreamingStores;
use mpa_tests::{
    datapath, ended_flow, gone_cleanly, hand_over, listen_in, require_privileged, stats,
    writes_from_a, BedConfig, DatapathOptions, TestBed,
};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Writes per connection and their length: more than a KiB (streamed), not a multiple of a
/// cache line (each has partial lines at its ends), cut by markers and segments.
const WRITES: u64 = 400;
const LEN: usize = 4000;

#[test]
fn streamed_writes_land_exactly_and_before_their_completions() {
    if !require_privileged("streaming stores") {
        return;
    }
    let bed = TestBed::up(BedConfig::default()).unwrap();
    for (mode, port) in [(StreamingStores::On, 7661), (StreamingStores::Off, 7662)] {
        let (dp, path) = datapath(
            &bed,
            &DatapathOptions {
                streaming_stores: mode,
                ..DatapathOptions::default()
            },
        );
        let mut consumer = Consumer::connect(&path, Duration::from_secs(10)).unwrap();
        let region = consumer.create_region(4 << 20, 1, true, false).unwrap();
        consumer.subscribe(1).unwrap();
        let stag = region.info().stag;
        let addr = SocketAddr::new(bed.addr_b(false), port);
        let listener = listen_in(&bed.ns_b, addr);
        let peer = writes_from_a(&bed, addr, stag, WRITES, LEN);
        let (flow, mut dpc, frozen) = hand_over(&bed, &path, &listener, true, true, Some(1));
        // Each message is read the moment its completion is seen.
        let want: Vec<u8> = (0..LEN).map(|j| (j % 251) as u8).collect();
        let mut got = vec![0u8; LEN];
        let mut seen = 0u64;
        let until = Instant::now() + Duration::from_secs(30);
        while seen < WRITES {
            let batch = consumer
                .next_completions(until)
                .unwrap()
                .unwrap_or_else(|| panic!("{mode:?}: {seen} of {WRITES} completions by 30 s"));
            for c in batch {
                assert_eq!((c.flow_id, c.stag, c.len), (flow, stag, LEN as u64));
                assert_eq!(c.offset, seen * LEN as u64, "{mode:?}: in order");
                assert!(region.read(c.offset, &mut got));
                assert!(
                    got == want,
                    "{mode:?}: write {seen} not all there at its completion"
                );
                seen += 1;
            }
        }
        peer.join().unwrap().unwrap();
        gone_cleanly(&mut dpc, flow);
        drop(frozen);
        let f = ended_flow(&mut dpc, flow);
        assert_eq!((f.rx.placed_in_order, f.rx.completions), (WRITES, WRITES));
        let streamed = stats(&mut dpc).queues[0].stats.streamed_messages;
        match mode {
            StreamingStores::On => assert_eq!(streamed, WRITES),
            _ => assert_eq!(streamed, 0),
        }
        drop(dpc);
        drop(consumer);
        dp.stop();
    }
}
