//! The statistics document in pages (docs/consumer.md, "Statistics in pages"): an answer
//! lists at most `max_flows` live flows, those of lowest id above `flows_after`, and says
//! where the next page starts; read page after page, every live flow is listed once, on
//! whichever queue it lives. A page size outside 1 ..= the bound is refused.

use mpa::endpoint::EndpointConfig;
use mpa_control::datapath_client::{ClientError, DatapathClient};
use mpa_ctl_proto::stats::{FlowPage, MAX_FLOWS_PER_ANSWER};
use mpa_ctl_proto::ErrorCode;
use mpa_tests::{
    datapath, hand_over, initiator_in_a, listen_in, require_privileged, BedConfig, DatapathOptions,
    TestBed,
};
use std::net::SocketAddr;
use std::time::Duration;

const FLOWS: usize = 7;

#[test]
fn pages_list_every_live_flow_once_and_bad_page_sizes_are_refused() {
    if !require_privileged("statistics pages") {
        return;
    }
    let bed = TestBed::up(BedConfig {
        queues: 2,
        ..BedConfig::default()
    })
    .unwrap();
    let (dp, socket) = datapath(
        &bed,
        &DatapathOptions {
            queues: 2,
            ..DatapathOptions::default()
        },
    );
    // Each connection stays up (its stream, control client and frozen socket held) until
    // the end.
    let mut held = Vec::new();
    let mut ids = Vec::new();
    for i in 0..FLOWS {
        let addr = SocketAddr::new(bed.addr_b(false), 7900 + i as u16);
        let listener = listen_in(&bed.ns_b, addr);
        let mut cfg = EndpointConfig::default();
        cfg.policy.startup_timeout = Duration::from_secs(10);
        let initiator = initiator_in_a(&bed, addr, cfg, |_, s| s.expect("startup"));
        let (flow_id, dpc, frozen) = hand_over(&bed, &socket, &listener, false, true, None);
        held.push((initiator.join().unwrap(), dpc, frozen));
        ids.push(flow_id);
    }
    ids.sort_unstable();
    let mut c = DatapathClient::connect(&socket, Duration::from_secs(5)).unwrap();

    // Pages of two: 2, 2, 2, 1 flows, each page's range where the previous one said.
    let mut after = None;
    let mut listed = Vec::new();
    let mut pages = 0;
    loop {
        let page = c.stats_page(after, Some(2)).unwrap();
        pages += 1;
        page.check_page().unwrap();
        let total: u64 = page.queues.iter().map(|q| q.flow_count).sum();
        assert_eq!(total, FLOWS as u64, "{page:?}");
        let mut these: Vec<u64> = page.live_flows().map(|(_, f)| f.flow_id).collect();
        these.sort_unstable();
        let want: Vec<u64> = (ids.iter().copied())
            .filter(|&id| after.is_none_or(|a| id > a))
            .take(2)
            .collect();
        assert_eq!(these, want, "page after {after:?}");
        let next = (listed.len() + these.len() < FLOWS).then(|| *these.last().unwrap());
        assert_eq!(page.flow_page, FlowPage { after, next });
        listed.extend(these);
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!((pages, &listed), (FLOWS.div_ceil(2), &ids));

    // The whole document, paged by the client: every flow once, on its own queue.
    let doc = c.stats().unwrap();
    let mut all: Vec<u64> = doc.live_flows().map(|(_, f)| f.flow_id).collect();
    all.sort_unstable();
    assert_eq!(all, ids);
    for q in &doc.queues {
        assert_eq!(q.flows.len() as u64, q.flow_count, "queue {}", q.queue);
    }
    assert_eq!(doc.flow_page.next, None);

    // Above the highest id: no flow, nothing more.
    let last = c.stats_page(ids.last().copied(), None).unwrap();
    assert_eq!(last.live_flows().count(), 0);
    assert_eq!(last.flow_page.next, None);

    for bad in [0, MAX_FLOWS_PER_ANSWER + 1, u32::MAX] {
        match c.stats_page(None, Some(bad)) {
            Err(ClientError::Refused { code, message }) => {
                assert_eq!(code, ErrorCode::BadRequest);
                assert_eq!(
                    message,
                    format!("max_flows {bad}: an answer lists 1 ..= {MAX_FLOWS_PER_ANSWER} flows")
                );
            }
            other => panic!("max_flows {bad}: {other:?}"),
        }
    }
    // The client is still served after its refused requests.
    assert_eq!(
        c.stats_page(None, Some(MAX_FLOWS_PER_ANSWER))
            .unwrap()
            .live_flows()
            .count(),
        FLOWS
    );
    drop(held);
    dp.stop();
}
