//! One finding per topic: the reading in words and what the datapath will do with it; the
//! blockers and the options each topic adds to the report.

use super::{
    names_or_none, native_without_redirect, release, rx_metadata_names, rx_sg, xdp_names, Blocker,
    Finding, Receive, Report, Topic, XdpMode, ZeroCopyAuto,
};
use crate::readings::{offload_name, Device, DriverSource, Kernel, Offload, QueueSource, Readings};

/// Interrupts named one by one in the text; the JSON has them all.
const IRQS_SHOWN: usize = 8;

fn push(rep: &mut Report, topic: Topic, reading: String, datapath: Vec<String>) {
    rep.findings.push(Finding {
        topic,
        reading,
        datapath,
    });
}

pub(super) fn interface(r: &Readings, d: &Device, rep: &mut Report) {
    let l = &d.link;
    let reading = format!(
        "{}, index {}, {} (state {}), {}{}",
        r.iface,
        l.ifindex,
        if l.up { "up" } else { "down" },
        l.operstate,
        l.link_type,
        if l.ethernet { "" } else { " (not Ethernet)" },
    );
    let mut out = Vec::new();
    if !l.ethernet {
        rep.blockers.push(Blocker::NotEthernet(l.link_type.clone()));
    }
    match &l.xdp_attached {
        Some(x) => rep.blockers.push(Blocker::XdpAttached {
            mode: x.mode.clone(),
            prog_id: x.prog_id,
        }),
        None => out.push("no XDP program attached: the datapath attaches its own here".into()),
    }
    let down = ["down", "lower-layer-down", "not-present", "dormant"];
    if !l.up || down.contains(&l.operstate.as_str()) {
        out.push(format!(
            "not up: the datapath attaches, but no frame arrives until it is (`ip link set {} up`, \
             and a carrier)",
            r.iface
        ));
    }
    push(rep, Topic::Interface, reading, out);
}

pub(super) fn driver(d: &Device, rep: &mut Report) {
    let drv = &d.driver;
    let name = drv.name.as_deref().unwrap_or("unknown");
    let reading = match drv.source {
        DriverSource::Sysfs => format!(
            "{name}, {} {}",
            drv.bus.as_deref().unwrap_or("bus unknown"),
            drv.address.as_deref().unwrap_or("address unknown")
        ),
        DriverSource::LinkKind => format!("{name} (link kind of a virtual interface: no device)"),
        DriverSource::Unknown => "unknown (no device in sysfs, no link kind)".into(),
    };
    push(rep, Topic::Driver, reading, Vec::new());
    let reading = match (&d.firmware, drv.source) {
        (_, DriverSource::LinkKind | DriverSource::Unknown) if d.firmware.got().is_none() => {
            "not reported (no device)".to_string()
        }
        (f, _) => match f.got() {
            Some(fw) if fw.running.is_empty() => "devlink reports no running versions".into(),
            Some(fw) => fw
                .running
                .iter()
                .map(|v| format!("{} {}", v.name, v.value))
                .collect::<Vec<_>>()
                .join(", "),
            None => format!("not reported ({})", f.why_not().unwrap_or("")),
        },
    };
    push(rep, Topic::Firmware, reading, Vec::new());
}

pub(super) fn kernel(k: Option<&Kernel>, frame_data: u64, rep: &mut Report) {
    let mut out = Vec::new();
    match k {
        None => out.push("unknown: taken to have what the datapath needs".into()),
        Some(k) if !k.at_least(6, 1) => rep.blockers.push(Blocker::OldKernel(k.release.clone())),
        Some(k) if !k.at_least(6, 6) => out.push(format!(
            "no multi-buffer AF_XDP (6.6): frames above {frame_data} octets are dropped"
        )),
        Some(_) => out.push(
            "multi-buffer AF_XDP (6.6 and later): frames larger than a UMEM frame arrive as \
             chains"
                .into(),
        ),
    }
    push(rep, Topic::Kernel, release(k), out);
}

pub(super) fn queues(r: &Readings, d: &Device, max_queues: u32, rep: &mut Report) {
    let Some(q) = d.queues.got() else {
        let why = d.queues.why_not().unwrap_or("");
        push(
            rep,
            Topic::Queues,
            format!("not reported ({why})"),
            vec![format!(
                "--queues must not exceed the RX queues in use (`ethtool -l {}`)",
                r.iface
            )],
        );
        return;
    };
    // The kernel leaves out the maximum of a kind of channel the driver has none of.
    let max = |m: Option<u32>| m.unwrap_or(0);
    let reading = match q.source {
        QueueSource::Ethtool => format!(
            "rx {}, tx {}, combined {} (at most rx {}, tx {}, combined {}; ethtool channels)",
            q.rx,
            q.tx,
            q.combined,
            max(q.rx_max),
            max(q.tx_max),
            max(q.combined_max)
        ),
        QueueSource::Sysfs => format!("rx {}, tx {} (sysfs; no maxima)", q.rx, q.tx),
    };
    let n = q.rx_in_use();
    let narrow = |k: u32| {
        if q.combined > 0 {
            format!("`ethtool -L {} combined {k}`", r.iface)
        } else {
            format!("`ethtool -L {} rx {k} tx {k}`", r.iface)
        }
    };
    let out = match n {
        0 => vec!["no RX queue in use: nothing would reach a worker".to_string()],
        1 => vec!["one worker and one AF_XDP socket, on queue 0: --queues 1 (the default)".into()],
        n if n > max_queues => {
            rep.options.push(format!("--queues {max_queues}"));
            vec![format!(
                "{n} RX queues; the datapath serves at most {max_queues}: run with --queues \
                 {max_queues} --steer channels, or narrow the NIC ({})",
                narrow(max_queues)
            )]
        }
        n => {
            rep.options.push(format!("--queues {n}"));
            vec![format!(
                "one worker and one AF_XDP socket per RX queue: run with --queues {n}; with \
                 fewer, steered segments the NIC hashes to a queue without a socket are dropped \
                 (steered_no_xsk): add --steer channels, or narrow the NIC: {}",
                narrow(1)
            )]
        }
    };
    push(rep, Topic::Queues, reading, out);
}

pub(super) fn mtu(r: &Readings, d: &Device, rep: &mut Report) {
    let l = &d.link;
    let Some(p) = rep.predictions.clone() else {
        return;
    };
    let range = match (l.min_mtu, l.max_mtu) {
        (Some(lo), Some(hi)) => format!(" (the driver takes {lo}..{hi})"),
        (None, Some(hi)) => format!(" (the driver takes up to {hi})"),
        _ => String::new(),
    };
    let reading = format!(
        "{}{range}: frames of up to {} octets",
        l.mtu, p.frame_octets
    );
    let mut out = Vec::new();
    match p.receive {
        Receive::SingleBuffer => out.push(format!(
            "each frame fits one UMEM frame ({} octets: MTU {} and below) and is \
             received in place",
            p.frame_data, p.single_buffer_mtu
        )),
        Receive::MultiBuffer => {
            out.push(format!(
                "frames above {} octets arrive as chains of up to {} UMEM frames and \
                 are gathered into one (one extra copy; docs/architecture.md, \"Receive path\")",
                p.frame_data, p.descriptors
            ));
            out.push(format!(
                "segments it sends fit one UMEM frame: at most {} octets of TCP payload and options",
                p.sent_mss
            ));
            if let Some(f) = d.xdp.got() {
                if p.xdp_mode_auto == XdpMode::Native && !rx_sg(f) {
                    out.push(
                        "the driver has no rx-sg: its native XDP may refuse frames larger than \
                         a page; --xdp-mode auto then attaches in generic mode"
                            .into(),
                    );
                }
            }
        }
        Receive::Dropped => rep.blockers.push(Blocker::MtuBeyondLimit {
            mtu: l.mtu,
            frame: p.frame_octets,
            release: release(r.kernel.as_ref()),
            frame_data: p.frame_data,
            max_mtu: p.single_buffer_mtu,
        }),
    }
    push(rep, Topic::Mtu, reading, out);
}

pub(super) fn xdp(d: &Device, rep: &mut Report) {
    let Some(p) = rep.predictions.clone() else {
        return;
    };
    let Some(f) = d.xdp.got() else {
        push(
            rep,
            Topic::Xdp,
            format!("not reported ({})", d.xdp.why_not().unwrap_or("")),
            vec![
                "--xdp-mode auto tries native XDP, then generic".into(),
                "--zero-copy auto tries zero-copy, then copy mode; --zero-copy on fails where the \
                 driver has no zero-copy"
                    .into(),
            ],
        );
        return;
    };
    let segs = f.zc_max_segs.map_or(String::new(), |s| {
        format!(
            "; zero-copy frames of up to {s} segment{}",
            if s == 1 { "" } else { "s" }
        )
    });
    let reading = format!(
        "{}{segs} (rx metadata: {})",
        xdp_names(f),
        rx_metadata_names(f)
    );
    let mut out = Vec::new();
    match p.xdp_mode_auto {
        XdpMode::Native if native_without_redirect(f) => {
            rep.options.push("--xdp-mode generic".into());
            out.push(
                "native XDP without redirect: frames cannot reach AF_XDP sockets from the \
                 driver: run with --xdp-mode generic"
                    .into(),
            );
        }
        XdpMode::Native => out.push(
            "native XDP: --xdp-mode auto (the default) attaches the steering program in the \
             driver"
                .into(),
        ),
        _ => out.push(format!(
            "no native XDP (the driver reports {}): --xdp-mode auto attaches in generic (skb) \
             mode, after GRO and slower; --xdp-mode native fails",
            names_or_none(f.xdp, &crate::readings::XDP_ACT)
        )),
    }
    let segs = f.zc_max_segs.unwrap_or(1);
    match p.zero_copy_auto {
        ZeroCopyAuto::ZeroCopy => out.push(format!(
            "AF_XDP zero-copy: --zero-copy auto (the default) binds zero-copy{}",
            if p.descriptors > 1 {
                format!(
                    ", multi-buffer ({} of up to {segs} segments a frame)",
                    p.descriptors
                )
            } else {
                String::new()
            }
        )),
        ZeroCopyAuto::ZeroCopyWithoutMultiBuffer => {
            rep.options.push("--zero-copy off".into());
            out.push(format!(
                "AF_XDP zero-copy of up to {segs} segments a frame, and frames at this MTU take \
                 {}: --zero-copy auto and on bind zero-copy without multi-buffer and drop frames \
                 above {} octets: run with --zero-copy off (copy mode gathers them)",
                p.descriptors, p.frame_data
            ));
        }
        _ if p.xdp_mode_auto != XdpMode::Native || native_without_redirect(f) => out.push(
            "zero-copy needs native XDP: --zero-copy auto binds in copy mode; --zero-copy on fails"
                .into(),
        ),
        _ => out.push(
            "no AF_XDP zero-copy: --zero-copy auto binds in copy mode (each frame copied into \
             the UMEM); --zero-copy on fails"
                .into(),
        ),
    }
    push(rep, Topic::Xdp, reading, out);
}

/// The name `ethtool -K` takes for the offload `ethtool -k` shows as `name`.
fn ethtool_k_name(name: &str) -> &str {
    offload_name(name).map_or(name, |o| o.short)
}

/// Merged by the NIC (before any XDP) rather than by the stack (before generic XDP only).
fn in_hardware(o: &Offload) -> bool {
    o.name == "large-receive-offload" || o.name == "rx-gro-hw"
}

pub(super) fn offloads(r: &Readings, d: &Device, generic: bool, rep: &mut Report) {
    let Some(list) = d.offloads.got() else {
        push(
            rep,
            Topic::Offloads,
            format!("not reported ({})", d.offloads.why_not().unwrap_or("")),
            vec![format!(
                "check `ethtool -k {}`: large-receive-offload and rx-gro-hw must be off{}",
                r.iface,
                if generic {
                    ", and generic-receive-offload and rx-gro-list with generic XDP"
                } else {
                    ""
                }
            )],
        );
        return;
    };
    let reading = list
        .iter()
        .map(|o| {
            format!(
                "{} {}{}",
                o.name,
                if o.active { "on" } else { "off" },
                if o.changeable { "" } else { " [fixed]" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let mut out = Vec::new();
    let mut off = Vec::new();
    for o in list.iter().filter(|o| o.active) {
        let hw = in_hardware(o);
        if !hw && !generic {
            out.push(format!(
                "{} is on: it runs after native XDP and does not matter here; with --xdp-mode \
                 generic it must be off (`ethtool -K {} {} off`)",
                o.name,
                r.iface,
                ethtool_k_name(&o.name)
            ));
            continue;
        }
        if o.changeable {
            off.push(ethtool_k_name(&o.name).to_string());
            rep.blockers.push(Blocker::OffloadOn {
                name: o.name.clone(),
                before_generic_only: !hw,
                fix: format!("ethtool -K {} {} off", r.iface, ethtool_k_name(&o.name)),
            });
        } else {
            rep.blockers.push(Blocker::OffloadFixed {
                name: o.name.clone(),
            });
        }
    }
    if !off.is_empty() {
        out.push(format!(
            "must be off: ethtool -K {} {}",
            r.iface,
            off.iter()
                .map(|n| format!("{n} off"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    } else if out.is_empty() && !list.iter().any(|o| o.active) {
        out.push("none is on: segments reach XDP as they came".into());
    }
    push(rep, Topic::Offloads, reading, out);
}

pub(super) fn irqs(r: &Readings, d: &Device, rep: &mut Report) {
    let pin = format!("--pin-cpus puts worker q on CPU q ({} CPUs here)", r.cpus);
    let irqs = &d.irqs;
    let (reading, mut out) = if !irqs.device {
        (
            "none: a virtual interface has no device and no interrupts of its own".to_string(),
            vec![format!("{pin}; no interrupt to place beside it")],
        )
    } else if irqs.list.is_empty() {
        (
            "none found (device/msi_irqs, device/irq)".to_string(),
            vec![pin],
        )
    } else {
        let mut shown: Vec<String> = irqs
            .list
            .iter()
            .take(IRQS_SHOWN)
            .map(|i| {
                format!(
                    "{}{} on CPUs {}",
                    i.irq,
                    i.name.as_deref().map_or(String::new(), |n| format!(" {n}")),
                    i.cpus.as_deref().unwrap_or("?")
                )
            })
            .collect();
        if irqs.list.len() > IRQS_SHOWN {
            shown.push(format!("and {} more", irqs.list.len() - IRQS_SHOWN));
        }
        (
            format!("{}: {}", irqs.list.len(), shown.join(", ")),
            vec![format!(
                "{pin}: give queue q's interrupt CPU q too (`echo q > \
                 /proc/irq/N/smp_affinity_list`), so that its frames are handled where its \
                 worker runs; with --busy-poll-us the worker drives its queue itself: keep \
                 interrupts off the workers' CPUs instead"
            )],
        )
    };
    if let Some(n) = rep.predictions.as_ref().and_then(|p| p.queues_max) {
        if n as usize > r.cpus {
            out.push(format!(
                "{n} queues and {} CPUs: --pin-cpus cannot give each worker a CPU of its own",
                r.cpus
            ));
        }
    }
    push(rep, Topic::Irqs, reading, out);
}
