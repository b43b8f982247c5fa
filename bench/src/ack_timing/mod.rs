//! `ack-timing`: how soon a receiver reports each data segment, read from a capture.
//!
//! For every connection of the capture whose data goes to `--port` (the bed's MPA port by
//! default), each data segment's latest transmission is matched with the first ACK that
//! reports it — cumulatively, or in a SACK block — and the time between them is collected,
//! first transmissions and retransmissions apart. Where the capture was taken decides what
//! the time means: on the sender's interface it is the sender's view (its RTT samples and the
//! queues it waits in); on the port towards the receiver it is the receiver's own turnaround
//! (for the datapath: veth, XDP and the worker). docs/benchmarks.md shows how to capture.
//!
//! The capture is a pcap or pcapng file (`tcpdump -w`, `mpa-control capture`) of Ethernet,
//! Linux cooked (`tcpdump -i any`) or raw IP frames; frames that are not TCP are skipped.

mod matcher;

use anyhow::{bail, Context, Result};
use clap::Args;
use etherparse::{EtherType, LaxNetSlice, LaxSlicedPacket, TcpOptionElement, TransportSlice};
use matcher::{Connection, Percentiles};
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, TsResolution};
use serde::Serialize;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// `mpa-bench ack-timing`'s options.
#[derive(Args, Clone, Debug)]
pub struct AckTimingArgs {
    /// The capture (pcap or pcapng).
    pub(crate) capture: PathBuf,
    /// The receiver's TCP port: data goes to it, ACKs come from it.
    #[arg(short = 'p', long, default_value_t = crate::bed::options::PORT)]
    pub(crate) port: u16,
    /// Connections with fewer data segments than this are left out.
    #[arg(long, default_value_t = 1000)]
    pub(crate) min_segments: u64,
    /// Print one JSON document on stdout instead of the table.
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// One connection's result.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub(crate) struct ConnectionTiming {
    /// The data sender's address and port.
    pub(crate) sender: SocketAddr,
    /// The receiver's.
    pub(crate) receiver: SocketAddr,
    /// Data segments seen (transmissions, retransmissions included).
    pub(crate) data_segments: u64,
    /// Segments reported by an ACK after their first transmission.
    pub(crate) first: Percentiles,
    /// Segments reported by an ACK after a retransmission.
    pub(crate) retransmitted: Percentiles,
    /// Segments still unreported when the capture ended.
    pub(crate) unreported: u64,
}

/// The document `--json` prints.
#[derive(Serialize, Clone, Debug)]
pub(crate) struct AckTimingReport {
    /// The capture read.
    pub(crate) capture: String,
    /// The receiver's port.
    pub(crate) port: u16,
    /// TCP frames read.
    pub(crate) tcp_frames: u64,
    /// Connections with at least `--min-segments` data segments, in order of their first frame.
    pub(crate) connections: Vec<ConnectionTiming>,
}

/// The frames of a capture, whatever its format: (timestamp in ns, link type, octets).
fn for_each_frame(
    path: &PathBuf,
    mut f: impl FnMut(u64, DataLink, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut file = File::open(path)
        .map(BufReader::new)
        .with_context(|| format!("ack-timing: open {}", path.display()))?;
    // The first block's type tells pcapng from pcap; peeked, not consumed.
    let pcapng = file
        .fill_buf()
        .with_context(|| format!("ack-timing: read {}", path.display()))?
        .starts_with(&[0x0a, 0x0d, 0x0d, 0x0a]);
    if pcapng {
        let mut r = PcapNgReader::new(file)
            .with_context(|| format!("ack-timing: {} is not a pcapng file", path.display()))?;
        // Each interface's link type and timestamp unit, as its description block comes
        // (packets name their interface). The crate hands an enhanced packet's raw timestamp
        // over as nanoseconds; its unit is the interface's `if_tsresol` (default 10^-6 s).
        let mut links: Vec<(DataLink, TsUnit)> = Vec::new();
        while let Some(block) = r.next_block() {
            match block.with_context(|| format!("ack-timing: {}", path.display()))? {
                Block::InterfaceDescription(i) => {
                    let unit = i
                        .options
                        .iter()
                        .find_map(|o| match o {
                            InterfaceDescriptionOption::IfTsResol(r) => Some(TsUnit(*r)),
                            _ => None,
                        })
                        .unwrap_or(TsUnit(6));
                    links.push((i.linktype, unit));
                }
                Block::EnhancedPacket(p) => {
                    let (link, unit) = links
                        .get(p.interface_id as usize)
                        .copied()
                        .unwrap_or((DataLink::ETHERNET, TsUnit(6)));
                    f(unit.to_ns(p.timestamp.as_nanos()), link, &p.data)?;
                }
                _ => {}
            }
        }
        return Ok(());
    }
    let mut r = PcapReader::new(file).with_context(|| {
        format!(
            "ack-timing: {} is neither a pcap nor a pcapng file",
            path.display()
        )
    })?;
    let header = r.header();
    let (link, frac_ns) = (
        header.datalink,
        match header.ts_resolution {
            TsResolution::MicroSecond => 1_000,
            TsResolution::NanoSecond => 1,
        },
    );
    // Raw records: a capture with a snap length keeps each frame's original length beyond it,
    // which the crate's checked records refuse.
    while let Some(p) = r.next_raw_packet() {
        match p {
            Ok(p) => f(
                u64::from(p.ts_sec) * 1_000_000_000 + u64::from(p.ts_frac) * frac_ns,
                link,
                &p.data,
            )?,
            // A capture cut short by killing tcpdump ends in a partial record: read up to it.
            Err(pcap_file::PcapError::IncompleteBuffer) => break,
            Err(e) => return Err(e).with_context(|| format!("ack-timing: {}", path.display())),
        }
    }
    Ok(())
}

/// A pcapng interface's timestamp unit (`if_tsresol`): 10^-n s, or 2^-n s with the top bit.
#[derive(Clone, Copy, Debug, PartialEq)]
struct TsUnit(u8);

impl TsUnit {
    /// `raw` timestamp units in ns (saturating).
    fn to_ns(self, raw: u128) -> u64 {
        let n = u32::from(self.0 & 0x7f);
        let ns = if self.0 & 0x80 == 0 {
            match 9u32.checked_sub(n) {
                Some(up) => raw.saturating_mul(10u128.pow(up)),
                None => raw / 10u128.saturating_pow(n - 9),
            }
        } else {
            raw.saturating_mul(1_000_000_000) >> n.min(127)
        };
        ns.min(u128::from(u64::MAX)) as u64
    }
}

/// One TCP frame as the matcher needs it.
struct TcpFrame {
    src: SocketAddr,
    dst: SocketAddr,
    seq: u32,
    ack: Option<u32>,
    len: usize,
    sack: Vec<(u32, u32)>,
}

/// Octets of a Linux cooked (SLL) header; its protocol type is the last two.
const SLL_HEADER_LEN: usize = 16;

/// The TCP frame in `data`, read laxly: captures keep only the first octets of each frame
/// (a snap length), so the payload length comes from the IP header, not from what was kept.
fn tcp_frame(link: DataLink, data: &[u8]) -> Result<Option<TcpFrame>> {
    let p = match link {
        DataLink::ETHERNET => LaxSlicedPacket::from_ethernet(data).ok(),
        DataLink::LINUX_SLL => data.get(SLL_HEADER_LEN..).map(|rest| {
            let ether_type = u16::from_be_bytes([data[14], data[15]]);
            LaxSlicedPacket::from_ether_type(EtherType(ether_type), rest)
        }),
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => LaxSlicedPacket::from_ip(data).ok(),
        other => bail!(
            "ack-timing: link type {other:?} is not supported (Ethernet, Linux cooked or raw IP)"
        ),
    };
    let Some(p) = p else { return Ok(None) };
    let (src_ip, dst_ip, ip_payload_len): (IpAddr, IpAddr, usize) = match &p.net {
        Some(LaxNetSlice::Ipv4(ip)) => {
            let h = ip.header();
            (
                h.source_addr().into(),
                h.destination_addr().into(),
                usize::from(h.total_len()).saturating_sub(usize::from(h.ihl()) * 4),
            )
        }
        Some(LaxNetSlice::Ipv6(ip)) => {
            let h = ip.header();
            (
                h.source_addr().into(),
                h.destination_addr().into(),
                usize::from(h.payload_length()).saturating_sub(ip.extensions().slice().len()),
            )
        }
        _ => return Ok(None),
    };
    let Some(TransportSlice::Tcp(t)) = &p.transport else {
        return Ok(None);
    };
    let sack = t
        .options_iterator()
        .filter_map(|o| match o {
            Ok(TcpOptionElement::SelectiveAcknowledgement(first, rest)) => {
                Some(std::iter::once(first).chain(rest.into_iter().flatten()))
            }
            _ => None,
        })
        .flatten()
        .collect();
    Ok(Some(TcpFrame {
        src: SocketAddr::new(src_ip, t.source_port()),
        dst: SocketAddr::new(dst_ip, t.destination_port()),
        seq: t.sequence_number(),
        ack: t.ack().then(|| t.acknowledgment_number()),
        len: ip_payload_len.saturating_sub(usize::from(t.data_offset()) * 4),
        sack,
    }))
}

/// Reads the capture and matches every connection's segments with their ACKs.
pub(crate) fn ack_timing(a: &AckTimingArgs) -> Result<AckTimingReport> {
    let mut conns: HashMap<(SocketAddr, SocketAddr), Connection> = HashMap::new();
    let mut order: Vec<(SocketAddr, SocketAddr)> = Vec::new();
    let mut tcp_frames = 0u64;
    for_each_frame(&a.capture, |t_ns, link, data| {
        let Some(fr) = tcp_frame(link, data)? else {
            return Ok(());
        };
        tcp_frames += 1;
        let (key, data_dir) = if fr.dst.port() == a.port {
            ((fr.src, fr.dst), true)
        } else if fr.src.port() == a.port {
            ((fr.dst, fr.src), false)
        } else {
            return Ok(());
        };
        let c = conns.entry(key).or_insert_with(|| {
            order.push(key);
            Connection::default()
        });
        if data_dir {
            if fr.len > 0 {
                c.data(t_ns, fr.seq);
            }
        } else if let Some(ack) = fr.ack {
            c.ack(t_ns, ack, &fr.sack);
        }
        Ok(())
    })?;
    let connections = order
        .into_iter()
        .filter_map(|key| {
            let c = conns.remove(&key)?;
            (c.data_segments() >= a.min_segments).then(|| ConnectionTiming {
                sender: key.0,
                receiver: key.1,
                data_segments: c.data_segments(),
                first: c.first(),
                retransmitted: c.retransmitted(),
                unreported: c.unreported(),
            })
        })
        .collect();
    Ok(AckTimingReport {
        capture: a.capture.display().to_string(),
        port: a.port,
        tcp_frames,
        connections,
    })
}

/// The table `ack-timing` prints.
pub(crate) fn table(r: &AckTimingReport) -> String {
    let mut s = format!(
        "{}: {} TCP frames; per connection with data to port {}, µs from a segment's (latest) \
         transmission to the first ACK reporting it\n",
        r.capture, r.tcp_frames, r.port
    );
    s += &format!(
        "{:<44} {:>9} {:>34} {:>34}\n",
        "sender → receiver",
        "segments",
        "first: n p10/p50/p90/p99",
        "retransmitted: n p10/p50/p90/p99"
    );
    let cell = |p: &Percentiles| match p.p50_us {
        Some(_) => format!(
            "{} {:.0}/{:.0}/{:.0}/{:.0}",
            p.count,
            p.p10_us.unwrap_or(f64::NAN),
            p.p50_us.unwrap_or(f64::NAN),
            p.p90_us.unwrap_or(f64::NAN),
            p.p99_us.unwrap_or(f64::NAN)
        ),
        None => "0 -".to_string(),
    };
    for c in &r.connections {
        s += &format!(
            "{:<44} {:>9} {:>34} {:>34}\n",
            format!("{} → {}", c.sender, c.receiver),
            c.data_segments,
            cell(&c.first),
            cell(&c.retransmitted)
        );
    }
    if r.connections.is_empty() {
        s += "no connection with enough data segments (--min-segments)\n";
    }
    s
}

/// `mpa-bench ack-timing`: the table on stdout, or the document with `--json`.
pub fn run_cli(a: &AckTimingArgs) -> Result<()> {
    let r = ack_timing(a)?;
    if a.json {
        crate::report::print(&r)?;
    } else {
        mpa_cli::out!("{}", table(&r));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::TsUnit;

    #[test]
    fn pcapng_timestamp_units_become_nanoseconds() {
        assert_eq!(TsUnit(6).to_ns(1_500_000), 1_500_000_000);
        assert_eq!(TsUnit(9).to_ns(42), 42);
        assert_eq!(TsUnit(12).to_ns(42_000), 42);
        // 2^-10 s units: 1024 of them are one second.
        assert_eq!(TsUnit(0x80 | 10).to_ns(1024), 1_000_000_000);
        assert_eq!(TsUnit(0).to_ns(u128::MAX), u64::MAX);
        assert_eq!(TsUnit(0x7f).to_ns(5), 0);
    }
}
