//! Completions: what the datapath reports when a message has been placed. They reach the
//! consumer through shared memory ([`crate::ring`]), as fixed-size records.

use serde::{Deserialize, Serialize};

/// What a completion reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompletionKind {
    /// An RDMA Write message was placed completely (RFC 5040 has no completion for it at
    /// the sink; we report it so that consumers can see data arrive).
    WritePlaced,
    /// An RDMA Read Response message was placed completely.
    ReadResponsePlaced,
    /// A Send (any variant) arrived completely in a posted buffer.
    SendArrived,
    /// An RDMA Write the consumer posted was sent and the peer acknowledged its every
    /// octet (`stag`/`offset`/`len`: the local region it was read from).
    WriteSent,
    /// A Send the consumer posted was sent and acknowledged (`msn`: its MSN).
    SendSent,
}

/// One completed message, delivered in order per connection (RFC 5041 §4.1: after all its
/// segments and all earlier messages were placed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    /// The connection.
    pub flow_id: u64,
    /// What arrived.
    pub kind: CompletionKind,
    /// The region placed into.
    pub stag: u32,
    /// Offset in the region of the message's first octet (tagged: its TO; Send: the posted
    /// buffer's offset).
    pub offset: u64,
    /// Octets of the message.
    pub len: u64,
    /// Send: its MSN; Send with Invalidate: also the STag the peer asked to invalidate.
    pub msn: Option<u32>,
    /// Send with Invalidate variants: the STag named.
    pub invalidate_stag: Option<u32>,
}
