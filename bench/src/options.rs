//! What an experiment is asked to do: the options of `mpa-bench demo` and of `bw` runs, and the
//! bed they run on.

use anyhow::Result;
use clap::Args;
use mpa_testbed::{BedConfig, TestBed};

/// `demo` and `compare`: one transfer's options.
#[derive(Args, Clone, Debug)]
pub struct Run {
    /// Octets to send.
    #[arg(long, default_value_t = 256 << 20)]
    pub bytes: u64,
    /// ULPDU size.
    #[arg(long, default_value_t = 4096)]
    pub size: usize,
    /// MTU of the bed (≤ 3506 with XDP on veth).
    #[arg(long, default_value_t = 1500)]
    pub mtu: u32,
    /// Loss in the bridge namespace, percent (0: direct veth pair).
    #[arg(long, default_value_t = 0)]
    pub loss: u8,
    /// RX queues.
    #[arg(long, default_value_t = 1)]
    pub queues: u32,
    /// Markers and CRC both ways (the default); --plain turns both off.
    #[arg(long)]
    pub plain: bool,
    /// CRC but no markers; with an aligned sender the datapath then places out-of-order
    /// segments whose first FPDU verifies by CRC (the listener's `aligned_sender`).
    #[arg(long, conflicts_with = "plain")]
    pub no_markers: bool,
    /// What the sender does: RDMA Writes into a registered region (checked byte for byte),
    /// Sends into posted buffers (checked likewise), or `count`: no placement (payloads only
    /// counted and digested, the data path of issue 3).
    #[arg(long, value_enum, default_value = "write")]
    pub op: Op,
    /// Region size for `--op write` (writes wrap around in whole slots).
    #[arg(long, default_value_t = 16 << 20)]
    pub region_bytes: u64,
    /// Whether the sender aligns FPDUs with TCP segments (RFC 5044 §5.1; what lets segments
    /// that arrive out of order be placed on their own). `auto`: when there is loss. Aligned
    /// sending cuts messages so that FPDUs fill every TCP segment exactly.
    #[arg(long, value_enum, default_value = "auto")]
    pub align: Align,
    /// Print one JSON line with every measured value (`result: {...}`).
    #[arg(long)]
    pub json: bool,
}

/// `--align`: whether the sender aligns FPDUs with TCP segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Align {
    Auto,
    On,
    Off,
}

impl Run {
    /// Markers both ways.
    pub fn markers(&self) -> bool {
        !self.plain && !self.no_markers
    }

    /// Whether the sender aligns FPDUs with TCP segments.
    pub fn aligned(&self) -> bool {
        match self.align {
            Align::Auto => self.loss > 0,
            Align::On => true,
            Align::Off => false,
        }
    }
}

/// `--op`: what the sender does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Op {
    Write,
    Send,
    Count,
}

/// Protection domain of the bench's connection and region.
pub const PD: u32 = 1;

/// The port the hand-over listener (or the kernel Responder) listens on in ns b.
pub const PORT: u16 = 7777;

/// The bed a run asks for: the direct veth pair, or the bridge with loss.
pub fn bed(r: &Run) -> Result<TestBed> {
    Ok(TestBed::up(BedConfig {
        bridge: r.loss > 0,
        loss_percent: r.loss,
        loss_port: PORT,
        mtu: r.mtu,
        queues: r.queues,
    })?)
}

/// The messages a run sends.
pub fn messages(r: &Run) -> u64 {
    (r.bytes / r.size as u64).max(1)
}
