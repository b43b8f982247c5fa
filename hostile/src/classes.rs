//! Every hostile-input class and its expected outcome, in one table ([`CLASSES`]).
//!
//! Each script starts on a fresh connection in Full Operation (no markers, CRC on, our SND.NXT
//! and RCV.NXT exact) and sends its hostile frames; the runner (`check::check_class`) then
//! checks the `Expect`ation on the wire and in the datapath's counters. Terminate codes:
//! RFC 5044 §8 (layer 2), RFC 5041 §7 (DDP, layer 1: type 1 tagged, 2 untagged), RFC 5040
//! §4.8 Figure 9 (RDMAP, layer 0), as `PlacementError::terminate` assigns them.

use super::{nothing, Class, Counter as C, Ctx, Expect as E, Setup, RECV_BUF, REGION, SLOT};
use anyhow::{bail, Result};
use mpa::wire::ddp::{terminate_ulpdu, RdmapOpcode as Op};
use mpa::MpaErrorCode;
use mpa_harness::hostile_peer::{
    fpdu_bytes, fpdu_claiming, tagged_ulpdu, untagged_ulpdu, write_ulpdu, Seg,
};
use std::time::Duration;

/// The table. Order: TCP and frame level, MPA framing, DDP/RDMAP, after a Terminate, load.
pub static CLASSES: &[Class] = &[
    // ---- TCP (RFC 9293, RFC 5961, RFC 7323) and frames ----
    class("rst-in-window-inexact", E::Acked(C::BadRst), |c| {
        let s = rst(c, c.p.snd_nxt.wrapping_add(1));
        c.p.send_seg(&s)
    }),
    class("rst-out-of-window", E::Silent(C::BadRst), |c| {
        let s = rst(c, c.p.snd_nxt.wrapping_add(0x4000_0000));
        c.p.send_seg(&s)
    }),
    class("rst-below-window", E::Silent(C::BadRst), |c| {
        let s = rst(c, c.p.snd_nxt.wrapping_sub(1000));
        c.p.send_seg(&s)
    }),
    class("rst-exact", E::Closed, |c| {
        let s = rst(c, c.p.snd_nxt);
        c.p.send_seg(&s)
    }),
    class("syn-in-window", E::Acked(C::Syn), |c| {
        let mut s = c.p.seg(&[]);
        s.flags.syn = true;
        c.p.send_seg(&s)
    }),
    class("syn-out-of-window", E::Acked(C::Syn), |c| {
        let mut s = c.p.seg(&[]);
        s.flags.syn = true;
        s.seq = s.seq.wrapping_add(0x4000_0000);
        c.p.send_seg(&s)
    }),
    class("ack-of-unsent-data", E::Acked(C::BadAck), |c| {
        let mut s = c.p.seg(&[]);
        s.flags.ack = Some(c.p.rcv_nxt.wrapping_add(100_000));
        c.p.send_seg(&s)
    }),
    class("ack-too-old", E::Acked(C::BadAck), |c| {
        let mut s = c.p.seg(&[]);
        s.flags.ack = Some(c.p.rcv_nxt.wrapping_sub(0x6000_0000));
        c.p.send_seg(&s)
    }),
    class("data-without-ack-bit", E::Silent(C::BadAck), |c| {
        let mut s = hostile_write(c);
        s.flags.ack = None;
        c.p.send_seg(&s)
    }),
    class("paws-old-timestamp", E::Acked(C::Paws), |c| {
        let mut s = hostile_write(c);
        s.ts = Some((c.p.tsval().wrapping_sub(100_000), c.p.ts_recent));
        c.p.send_seg(&s)
    }),
    class("missing-timestamp", E::Silent(C::MissingTimestamp), |c| {
        let mut s = hostile_write(c);
        s.ts = None;
        c.p.send_seg(&s)
    }),
    class("tcp-option-length-zero", E::Silent(C::Malformed), |c| {
        let mut s = hostile_write(c);
        s.raw_options = Some(with_ts(c, &[0x1e, 0x00]));
        c.p.send_seg(&s)
    }),
    class("tcp-option-past-header", E::Silent(C::Malformed), |c| {
        let mut s = hostile_write(c);
        s.raw_options = Some(with_ts(c, &[0x1e, 0x20]));
        c.p.send_seg(&s)
    }),
    class(
        "tcp-timestamp-option-bad-length",
        E::Silent(C::Malformed),
        |c| {
            let mut s = hostile_write(c);
            let (v, e) = (c.p.tsval(), c.p.ts_recent);
            let mut o = vec![1, 8, 12];
            o.extend_from_slice(&v.to_be_bytes());
            o.extend_from_slice(&e.to_be_bytes());
            o.push(0);
            s.raw_options = Some(o);
            c.p.send_seg(&s)
        },
    ),
    class("bad-tcp-checksum", E::Silent(C::Malformed), |c| {
        let mut s = hostile_write(c);
        s.bad_checksum = true;
        c.p.send_seg(&s)
    }),
    class("truncated-in-tcp-header", E::Silent(C::XdpMalformed), |c| {
        let mut s = hostile_write(c);
        s.truncate = Some(14 + 20 + 10);
        c.p.send_seg(&s)
    }),
    class("truncated-payload", E::Silent(C::Malformed), |c| {
        let s = hostile_write(c);
        let mut f = c.p.frame(&s)?;
        f.truncate(f.len() - 30);
        c.p.send_raw(&f)
    }),
    class("ipv4-fragment", E::Silent(C::XdpFragment), |c| {
        // A first fragment (MF set) of a segment between the steered host pair.
        let s = hostile_write(c);
        let mut f = c.p.frame(&s)?;
        f[14 + 6] |= 0x20;
        ipv4_checksum(&mut f);
        c.p.send_raw(&f)
    }),
    class("ipv4-later-fragment", E::Silent(C::XdpFragment), |c| {
        // A later fragment (offset 185 × 8) whose first octets look like our TCP header.
        let s = hostile_write(c);
        let mut f = c.p.frame(&s)?;
        f[14 + 6] = 0;
        f[14 + 7] = 185;
        ipv4_checksum(&mut f);
        c.p.send_raw(&f)
    }),
    class("vlan-tag-not-the-flows", E::Silent(C::WrongVlan), |c| {
        let s = hostile_write(c);
        let f = vlan_tagged(&c.p.frame(&s)?, &[0x8100]);
        c.p.send_raw(&f)
    }),
    class("stacked-vlan-tags", E::Silent(C::XdpVlanStack), |c| {
        let s = hostile_write(c);
        let f = vlan_tagged(&c.p.frame(&s)?, &[0x88a8, 0x8100]);
        c.p.send_raw(&f)
    }),
    // More tags than the XDP program looks through: the addresses are out of its reach.
    class("nine-vlan-tags", E::Silent(C::XdpVlanStack), |c| {
        let s = hostile_write(c);
        let f = vlan_tagged(&c.p.frame(&s)?, &[0x8100; 9]);
        c.p.send_raw(&f)
    }),
    class("sixteen-vlan-tags", E::Silent(C::XdpVlanStack), |c| {
        let s = hostile_write(c);
        let f = vlan_tagged(&c.p.frame(&s)?, &[0x88a8; 16]);
        c.p.send_raw(&f)
    }),
    class("data-beyond-window", E::Acked(C::OutOfWindow), |c| {
        let mut s = hostile_write(c);
        s.seq = s.seq.wrapping_add(c.p.peer_window + 4096);
        c.p.send_seg(&s)
    }),
    class("duplicate-retransmission", E::Acked(C::Duplicate), |c| {
        let d = c.pattern(1);
        let seq = c.p.snd_nxt;
        c.write(0, &d)?;
        c.wait_acked()?;
        let mut s = c.p.seg(&c.write_fpdu(0, &d));
        s.seq = seq;
        c.p.send_seg(&s)
    }),
    class(
        "overlap-with-different-content",
        E::Acked(C::Duplicate),
        |c| {
            // The first copy is placed; a retransmission of the same octets with other content
            // (and a valid CRC) must not overwrite it (the runner checks the region).
            let (a, b) = (c.pattern(1), c.pattern(2));
            let seq = c.p.snd_nxt;
            c.write(0, &a)?;
            c.wait_acked()?;
            let mut s = c.p.seg(&c.write_fpdu(0, &b));
            s.seq = seq;
            c.p.send_seg(&s)
        },
    ),
    class("overlap-partial-different-old-octets", E::Placed, |c| {
        let a = c.pattern(1);
        c.write(0, &a)?;
        c.wait_acked()?;
        // 16 old octets (different from what was sent) followed by a new valid FPDU.
        let b = c.pattern(2);
        let mut payload = vec![0xee; 16];
        payload.extend_from_slice(&c.write_fpdu(128, &b));
        let mut s = c.p.seg(&payload);
        s.seq = c.p.snd_nxt.wrapping_sub(16);
        c.p.send_seg(&s)?;
        c.p.snd_nxt = c.p.snd_nxt.wrapping_add(payload.len() as u32 - 16);
        c.placed.push((c.slot + 128, b));
        Ok(())
    }),
    class("tiny-segments", E::Placed, |c| {
        let d = c.pattern(3);
        let f = c.write_fpdu(0, &d);
        c.p.send_stream(&f, 1)?;
        c.placed.push((c.slot, d));
        Ok(())
    }),
    class("fpdu-above-mulpdu-across-segments", E::Placed, |c| {
        // An 8,000-octet ULPDU (MULPDU is about 1,400 here) in 100-octet segments: RFC 5044
        // has the receiver reassemble FPDUs whatever their segmentation.
        let data: Vec<u8> = (0..8000u32).map(|i| (i * 7 + 3) as u8).collect();
        let to = REGION * 3 / 4;
        let f = fpdu_bytes(&write_ulpdu(c.env.stag(), to, &data), true);
        c.p.send_stream(&f, 100)?;
        c.placed.push((to, data));
        Ok(())
    }),
    class("fin-inside-fpdu", E::Closed, |c| {
        // Half an FPDU, then FIN: RFC 5044 §8, the connection closed inside an FPDU.
        let f = c.write_fpdu(0, &c.pattern(3));
        c.p.send_data(&f[..20])?;
        let mut s = c.p.seg(&[]);
        s.flags.fin = true;
        c.p.send_seg(&s)?;
        c.p.snd_nxt = c.p.snd_nxt.wrapping_add(1);
        Ok(())
    }),
    // ---- MPA framing (RFC 5044 §8) ----
    term("bad-crc", (2, 0, 2), |c| {
        let f = fpdu_bytes(&write_ulpdu(c.env.stag(), c.slot, &c.pattern(4)), false);
        c.p.send_data(&f)
    }),
    term("ulpdu-length-lies", (2, 0, 2), |c| {
        // ULPDU_Length says 200, 50 octets and a CRC follow, then more octets: the CRC is
        // looked for where the length says, and does not match.
        let mut f = fpdu_claiming(200, &write_ulpdu(c.env.stag(), c.slot, &[7; 36]));
        f.resize(f.len() + 256, 0x33);
        c.p.send_data(&f)
    }),
    term("ulpdu-length-0", (0, 2, 0xff), |c| {
        c.p.send_data(&fpdu_bytes(&[], true))
    }),
    term("ulpdu-shorter-than-ddp-header", (0, 2, 0xff), |c| {
        let u = write_ulpdu(c.env.stag(), c.slot, &[1; 8]);
        c.p.send_data(&fpdu_bytes(&u[..10], true))
    }),
    // ---- MPA markers (RFC 5044 §4.3, §8 error 3), the Responder requiring them ----
    marked("markers-valid", E::Placed, |c| {
        // Three FPDUs across several marker positions, in 100-octet segments.
        for k in 0..3u64 {
            let d = marker_data(k as u8);
            let f = c.marked(&write_ulpdu(c.env.stag(), c.slot + k * 1024, &d))?;
            c.p.send_stream(&f, 100)?;
            c.placed.push((c.slot + k * 1024, d));
        }
        Ok(())
    }),
    marked("marker-reserved-not-zero", E::Placed, |c| {
        // RESERVED is ignored on receive (covered by the CRC only).
        bent_marker(c, |m| m[..2].copy_from_slice(&[0xde, 0xad]), true)
    }),
    marked("marker-fpduptr-low-bits", E::Placed, |c| {
        // FPDUPTR's two low bits: receivers MUST treat them as zero.
        bent_marker(c, |m| m[3] |= 3, true)
    }),
    Class {
        name: "marker-fpduptr-wrong",
        expect: E::Terminate(2, 0, 3),
        setup: Setup::Markers,
        script: |c| bent_marker(c, |m| m[2] ^= 0x01, false),
        after: |c| {
            c.untouched(0, 700)?;
            write_not_placed(c)
        },
    },
    // ---- DDP tagged (RFC 5041 §7, type 1) ----
    term("invalid-stag", (1, 1, 0), |c| {
        let f = fpdu_bytes(&write_ulpdu(0xdead_beef, 0, &c.pattern(5)), true);
        c.p.send_data(&f)
    }),
    term("base-or-bounds", (1, 1, 1), |c| {
        let f = fpdu_bytes(&write_ulpdu(c.env.stag(), REGION - 10, &c.pattern(5)), true);
        c.p.send_data(&f)
    }),
    term("stag-of-other-protection-domain", (1, 1, 2), |c| {
        let f = fpdu_bytes(&write_ulpdu(c.env.stag_other_pd, 0, &c.pattern(5)), true);
        c.p.send_data(&f)
    }),
    term("to-wraps", (1, 1, 3), |c| {
        let f = fpdu_bytes(
            &write_ulpdu(c.env.stag(), u64::MAX - 10, &c.pattern(5)),
            true,
        );
        c.p.send_data(&f)
    }),
    term("tagged-ddp-version", (1, 1, 4), |c| {
        let mut u = write_ulpdu(c.env.stag(), c.slot, &c.pattern(5));
        u[0] = (u[0] & !0x03) | 2;
        c.p.send_data(&fpdu_bytes(&u, true))
    }),
    term("tagged-continues-other-stag", (1, 1, 0), |c| {
        let d = c.pattern(5);
        let first = tagged_ulpdu(false, Op::RdmaWrite, c.env.stag(), c.slot, &d);
        let second = tagged_ulpdu(true, Op::RdmaWrite, c.env.stag_second, 64, &d);
        let mut w = fpdu_bytes(&first, true);
        w.extend_from_slice(&fpdu_bytes(&second, true));
        c.p.send_data(&w)
    }),
    term("tagged-jumps-to", (1, 1, 1), |c| {
        let d = c.pattern(5);
        let first = tagged_ulpdu(false, Op::RdmaWrite, c.env.stag(), c.slot, &d);
        let second = tagged_ulpdu(true, Op::RdmaWrite, c.env.stag(), c.slot + 1024, &d);
        let mut w = fpdu_bytes(&first, true);
        w.extend_from_slice(&fpdu_bytes(&second, true));
        c.p.send_data(&w)
    }),
    // ---- DDP untagged (RFC 5041 §7, type 2) ----
    term("untagged-ddp-version", (1, 2, 6), |c| {
        let mut u = untagged_ulpdu(Op::Send, 0, 1, 0, &[1; 32]);
        u[0] = (u[0] & !0x03) | 2;
        c.p.send_data(&fpdu_bytes(&u, true))
    }),
    term("invalid-qn", (1, 2, 1), |c| {
        let u = untagged_ulpdu(Op::Send, 3, 1, 0, &[1; 32]);
        c.p.send_data(&fpdu_bytes(&u, true))
    }),
    Class {
        name: "send-without-posted-buffer",
        expect: E::Terminate(1, 2, 2),
        setup: Setup::NoBuffers,
        script: |c| {
            let u = untagged_ulpdu(Op::Send, 0, 1, 0, &[1; 32]);
            c.p.send_data(&fpdu_bytes(&u, true))
        },
        after: nothing,
    },
    posted("msn-out-of-range", (1, 2, 3), |c| {
        let u = untagged_ulpdu(Op::Send, 0, 1000, 0, &[1; 32]);
        c.p.send_data(&fpdu_bytes(&u, true))
    }),
    posted("invalid-mo", (1, 2, 4), |c| {
        let u = untagged_ulpdu(Op::Send, 0, 1, 100_000, &[1; 32]);
        c.p.send_data(&fpdu_bytes(&u, true))
    }),
    posted("send-too-long-for-buffer", (1, 2, 5), |c| {
        let u = untagged_ulpdu(Op::Send, 0, 1, 0, &[1; RECV_BUF as usize + 44]);
        c.p.send_data(&fpdu_bytes(&u, true))
    }),
    // ---- RDMAP (RFC 5040 §4.8, layer 0) ----
    term("rdmap-version", (0, 2, 5), |c| {
        let mut u = write_ulpdu(c.env.stag(), c.slot, &c.pattern(5));
        u[1] = (2 << 6) | (u[1] & 0x0f);
        c.p.send_data(&fpdu_bytes(&u, true))
    }),
    term("write-without-remote-write-access", (0, 1, 2), |c| {
        let f = fpdu_bytes(&write_ulpdu(c.env.stag_read_only, 0, &c.pattern(5)), true);
        c.p.send_data(&f)
    }),
    term("send-opcode-in-tagged-segment", (0, 2, 6), |c| {
        let u = tagged_ulpdu(true, Op::Send, c.env.stag(), c.slot, &c.pattern(5));
        c.p.send_data(&fpdu_bytes(&u, true))
    }),
    term("write-opcode-in-untagged-segment", (0, 2, 6), |c| {
        let u = untagged_ulpdu(Op::RdmaWrite, 0, 1, 0, &[1; 32]);
        c.p.send_data(&fpdu_bytes(&u, true))
    }),
    // ---- after a Terminate (RFC 5040 §5.3 / RFC 5041 §5.4: no further data transfer) ----
    Class {
        name: "fpdus-after-terminate-sent",
        expect: E::Terminate(2, 0, 2),
        setup: Setup::Normal,
        script: |c| {
            let f = fpdu_bytes(&write_ulpdu(c.env.stag(), c.slot, &c.pattern(4)), false);
            c.p.send_data(&f)
        },
        after: write_not_placed,
    },
    Class {
        name: "fpdus-after-terminate-received",
        expect: E::PeerTerminate,
        setup: Setup::Normal,
        script: |c| {
            let t = terminate_ulpdu(MpaErrorCode::LocalCatastrophic, 1, 1);
            c.p.send_data(&fpdu_bytes(&t, true))?;
            c.wait_acked()
        },
        after: write_not_placed,
    },
    class("zero-window-forever", E::Terminate(2, 0, 2), |c| {
        // We close our window and refuse even its probes while the datapath has a Terminate
        // to send: it must probe (RFC 9293 §3.8.6.1), never send beyond the window, and send
        // the Terminate once the window opens.
        let open = c.p.window;
        c.p.window = 0;
        c.p.accept = false;
        let s = c.p.seg(&[]);
        c.p.send_seg(&s)?;
        let f = fpdu_bytes(&write_ulpdu(c.env.stag(), c.slot, &c.pattern(4)), false);
        c.p.send_data(&f)?;
        c.p.poll(Duration::from_secs(3))?;
        if let Some(big) = c.p.inbox.iter().find(|r| r.payload.len() > 1) {
            bail!(
                "at most 1-octet probes into a zero window, got {} octets",
                big.payload.len()
            );
        }
        let probes = c.flow_report()?.window_probes;
        if probes == 0 {
            bail!("window probes into the zero window, got none in 3 s");
        }
        c.note = format!("{probes} window probe(s) while closed; ");
        c.p.inbox.clear();
        c.p.window = open;
        c.p.accept = true;
        let s = c.p.seg(&[]);
        c.p.send_seg(&s)
    }),
    class("syn-flood-challenge-ack-limit", E::Lives, |c| {
        flood_limited(c, |c, i| {
            let mut s = c.p.seg(&[]);
            s.flags.syn = true;
            s.seq = s.seq.wrapping_add(0x4000_0000 + i);
            s
        })
    }),
    class("rst-flood-challenge-ack-limit", E::Lives, |c| {
        flood_limited(c, |c, i| rst(c, c.p.snd_nxt.wrapping_add(1 + i)))
    }),
    // ---- the control socket and budgets (the connection lives beside them) ----
    class(
        "control-length-over-max",
        E::Lives,
        super::ctl::length_over_max,
    ),
    class(
        "control-malformed-json",
        E::Lives,
        super::ctl::malformed_json,
    ),
    class("control-other-uid", E::Lives, super::ctl::other_uid),
    class(
        "control-stray-descriptors",
        E::Lives,
        super::ctl::stray_descriptors,
    ),
    class("control-flood-unread", E::Lives, super::ctl::flood_unread),
    class("region-budget", E::Lives, super::ctl::region_budget),
    class(
        "control-close-anothers-flow",
        E::Lives,
        super::foreign::close_anothers_flow,
    ),
    class(
        "control-finish-anothers-flow",
        E::Lives,
        super::foreign::finish_anothers_flow,
    ),
    class(
        "control-post-on-anothers-flow",
        E::Lives,
        super::foreign::post_on_anothers_flow,
    ),
    class(
        "control-post-recv-to-anothers-domain",
        E::Lives,
        super::foreign::post_recv_to_anothers_domain,
    ),
    class(
        "control-capture-anothers-flow",
        E::Lives,
        super::foreign::capture_anothers_flow,
    ),
    class(
        "control-handover-anothers-flow",
        E::Lives,
        super::foreign::handover_anothers_flow,
    ),
    class(
        "control-adopt-without-capability",
        E::Lives,
        super::foreign::adopt_without_capability,
    ),
    class(
        "control-made-up-handover",
        E::Lives,
        super::foreign::made_up_handover,
    ),
    class(
        "control-watch-without-capability",
        E::Lives,
        super::foreign::watch_without_capability,
    ),
    class(
        "control-list-anothers-regions",
        E::Lives,
        super::foreign::list_anothers_regions,
    ),
    class(
        "control-stats-of-anothers-flows",
        E::Lives,
        super::foreign::stats_of_anothers_flows,
    ),
    class(
        "application-names-anothers-domain",
        E::Lives,
        super::applications::names_anothers_domain,
    ),
    class(
        "application-decides-anothers-request",
        E::Lives,
        super::applications::decides_anothers_request,
    ),
    class(
        "handover-into-unasked-application-domain",
        E::Lives,
        super::applications::handover_into_unasked_domain,
    ),
    class(
        "control-subscription-flood",
        E::Lives,
        super::ctl::subscription_flood,
    ),
    class(
        "hostile-acker-of-a-bulk-sender",
        E::Lives,
        super::ctl::hostile_acker,
    ),
    class(
        "memory-budget-exhausted",
        E::Placed,
        super::ctl::memory_budget_exhausted,
    ),
    class(
        "consumer-garbage-ring-indices",
        E::Placed,
        super::rings::garbage_ring_indices,
    ),
    class(
        "consumer-never-reads",
        E::Placed,
        super::rings::consumer_never_reads,
    ),
    class(
        "control-silent-slot-holders",
        E::Lives,
        super::ctl::silent_slot_holders,
    ),
    class(
        "released-memory-descriptors-kept",
        E::Lives,
        super::ctl::released_memory_descriptors_kept,
    ),
    class(
        "register-unusable-memory",
        E::Lives,
        super::registered::unusable_memory,
    ),
    class(
        "metrics-silent-connections",
        E::Lives,
        super::ctl::metrics_silent_connections,
    ),
    class(
        "post-queues-flooding-neighbour",
        E::Placed,
        super::ctl::post_queues_flooding_neighbour,
    ),
    // ---- load ----
    class("out-of-order-flood", E::Placed, |c| {
        // Every other 64-octet piece of the whole window ahead of RCV.NXT (a hole before
        // each), then a valid in-order write: the store stays bounded and the write lands.
        let win = c.p.peer_window.max(8192);
        let mut off = 4096u32;
        let junk = [0x5au8; 64];
        while off + 64 <= win {
            let mut s = c.p.seg(&junk);
            s.seq = c.p.snd_nxt.wrapping_add(off);
            c.p.send_seg(&s)?;
            off += 128;
        }
        c.p.poll(Duration::from_millis(50))?;
        c.p.inbox.clear();
        let d = c.pattern(6);
        c.write(0, &d)
    }),
    Class {
        name: "locator-amplification",
        expect: E::Placed,
        setup: Setup::Aligned,
        script: super::locator::amplification,
        after: nothing,
    },
    // docs/environment.md, "Why TS.Recent must be inherited": the hand-over gave the flow
    // our Request's TSval (the port is watched), so a forged pure ACK at RCV.NXT with a
    // TSval half the space away fails PAWS instead of becoming the baseline that every real
    // segment then fails; a Write after it is placed.
    class("forged-ack-far-tsval-after-handover", E::Placed, |c| {
        let Some(real) = c.p.startup_tsval else {
            bail!("no TSval of our Request was seen");
        };
        let before = c.flow_report()?;
        if before.ts_recent_inherited != Some(real) {
            bail!(
                "TS.Recent inherited {:?}, our Request's TSval {real}",
                before.ts_recent_inherited
            );
        }
        // Half the space from our clock now (the datapath's TS.Recent has moved from `real`
        // to our later ACKs' TSvals since the hand-over).
        let mut s = c.p.seg(&[]);
        s.ts = Some((c.p.tsval().wrapping_add(1 << 31), c.p.ts_recent));
        c.p.send_seg(&s)?;
        c.p.poll(Duration::from_millis(50))?;
        let paws = c.flow_report()?.tcp_drops.paws - before.tcp_drops.paws;
        if paws != 1 {
            bail!("the forged ACK: tcp_drops.paws +1 expected, got +{paws}");
        }
        c.p.inbox.clear();
        c.note = format!("TS.Recent {real} inherited, forged ACK dropped by PAWS; ");
        let d = c.pattern(7);
        c.write(0, &d)
    }),
];

pub(super) const fn class(
    name: &'static str,
    expect: E,
    script: fn(&mut Ctx) -> Result<()>,
) -> Class {
    Class {
        name,
        expect,
        setup: Setup::Normal,
        script,
        after: nothing,
    }
}

pub(super) const fn term(
    name: &'static str,
    t: (u8, u8, u8),
    script: fn(&mut Ctx) -> Result<()>,
) -> Class {
    Class {
        name,
        expect: E::Terminate(t.0, t.1, t.2),
        setup: Setup::Normal,
        script,
        after: write_not_placed,
    }
}

const fn posted(name: &'static str, t: (u8, u8, u8), script: fn(&mut Ctx) -> Result<()>) -> Class {
    Class {
        name,
        expect: E::Terminate(t.0, t.1, t.2),
        setup: Setup::Posted,
        script,
        after: write_not_placed,
    }
}

pub(super) const fn marked(
    name: &'static str,
    expect: E,
    script: fn(&mut Ctx) -> Result<()>,
) -> Class {
    Class {
        name,
        expect,
        setup: Setup::Markers,
        script,
        after: nothing,
    }
}

/// 700 octets (an FPDU of them spans a marker position past its leading one).
pub(super) fn marker_data(tag: u8) -> Vec<u8> {
    (0..700u32).map(|i| (i * 13) as u8 ^ tag).collect()
}

/// A marked RDMA Write of 700 octets at the slot's start whose marker at stream position 512
/// is bent by `bend` (the CRC recomputed over the bent octets, so only the marker is wrong);
/// `placed`: whether the write is expected to land.
fn bent_marker(c: &mut Ctx, bend: fn(&mut [u8]), placed: bool) -> Result<()> {
    if c.p.snd_nxt != c.markers_from.unwrap_or(0) {
        bail!("the script expects to start at stream position 0");
    }
    let d = marker_data(1);
    let mut f = c.marked(&write_ulpdu(c.env.stag(), c.slot, &d))?;
    // Markers at wire offsets 0 (leading, FPDUPTR 0) and 512 (FPDUPTR 508).
    if f.len() < 600 || f[514..516] != [0x01, 0xfc] {
        bail!("no marker with FPDUPTR 508 at wire offset 512");
    }
    bend(&mut f[512..516]);
    let n = f.len();
    let crc = mpa::crc::crc32c(&f[..n - 4]);
    f[n - 4..].copy_from_slice(&crc.to_le_bytes());
    c.p.send_data(&f)?;
    if placed {
        c.placed.push((c.slot, d));
    }
    Ok(())
}

/// RFC 5961 §7: 250 segments that each draw a challenge ACK, sent at once, draw at most the
/// limit (100 per second; the 250 may straddle one second boundary: 200), the rest counted
/// as suppressed or as merged (answered by an ACK already owed in the same burst); every
/// ACK counted as sent is seen by the peer.
fn flood_limited(c: &mut Ctx, seg: fn(&Ctx, u32) -> Seg) -> Result<()> {
    const N: u64 = 250;
    let before = c.flow_report()?.tcp_drops;
    let seen_before = c.p.inbox.iter().filter(|r| r.is_pure_ack()).count() as u64;
    for i in 0..N {
        let s = seg(c, i as u32);
        c.p.send_seg(&s)?;
    }
    c.p.poll(Duration::from_millis(300))?;
    let after = c.flow_report()?.tcp_drops;
    let sent = after.challenge_acks - before.challenge_acks;
    let suppressed = after.challenge_acks_suppressed - before.challenge_acks_suppressed;
    let merged = after.challenge_acks_merged - before.challenge_acks_merged;
    let on_wire = c.p.inbox.iter().filter(|r| r.is_pure_ack()).count() as u64 - seen_before;
    if sent + suppressed + merged != N || sent == 0 || sent > 200 || sent > on_wire {
        bail!(
            "{N} challenges: at most 200 ACKs sent, each seen, the rest suppressed or merged; \
             got {sent} sent ({on_wire} seen), {suppressed} suppressed, {merged} merged"
        );
    }
    c.note = format!(
        "{sent} challenge ACKs ({on_wire} seen), {suppressed} suppressed, {merged} merged; "
    );
    Ok(())
}

/// A RST at `seq` (no ACK bit).
pub(super) fn rst(c: &Ctx, seq: u32) -> Seg {
    let mut s = c.p.seg(&[]);
    s.seq = seq;
    s.flags.rst = true;
    s.flags.ack = None;
    s
}

/// A valid RDMA Write at SND.NXT (SND.NXT not advanced): the segment a hostile variant
/// bends; it must never be placed (the write targets the slot's start, which the runner's
/// liveness write does not touch).
pub(super) fn hostile_write(c: &Ctx) -> Seg {
    c.p.seg(&c.write_fpdu(0, &c.pattern(9)))
}

/// Rewrites the IPv4 header checksum of an untagged frame.
fn ipv4_checksum(f: &mut [u8]) {
    f[24] = 0;
    f[25] = 0;
    let sum: u32 = f[14..34]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = !((sum & 0xffff) + (sum >> 16)) as u16;
    f[24..26].copy_from_slice(&sum.to_be_bytes());
}

/// `frame` with VLAN tags (TPIDs outermost first, VIDs 5, 6, …) after the MAC addresses.
fn vlan_tagged(frame: &[u8], tpids: &[u16]) -> Vec<u8> {
    let mut v = frame[..12].to_vec();
    for (i, t) in tpids.iter().enumerate() {
        v.extend_from_slice(&t.to_be_bytes());
        v.extend_from_slice(&(5 + i as u16).to_be_bytes());
    }
    v.extend_from_slice(&frame[12..]);
    v
}

/// The timestamps option (if negotiated) followed by `more`, padded with EOL.
fn with_ts(c: &Ctx, more: &[u8]) -> Vec<u8> {
    let mut o = Vec::new();
    if c.p.timestamps() {
        o.extend_from_slice(&[1, 1, 8, 10]);
        o.extend_from_slice(&c.p.tsval().to_be_bytes());
        o.extend_from_slice(&c.p.ts_recent.to_be_bytes());
    }
    o.extend_from_slice(more);
    while o.len() % 4 != 0 {
        o.push(0);
    }
    o
}

/// After the flow's Terminate: a valid RDMA Write (acknowledged by TCP) must not be placed.
pub(super) fn write_not_placed(c: &mut Ctx) -> Result<()> {
    let d = c.pattern(7);
    let f = c.write_fpdu(SLOT / 2, &d);
    c.p.send_data(&f)?;
    c.p.poll(Duration::from_millis(200))?;
    c.untouched(SLOT / 2, d.len())
}
