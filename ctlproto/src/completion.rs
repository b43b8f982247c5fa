//! Completions: what the datapath reports when a message has been placed, and their compact
//! wire form (a JSON object per completion would dominate a busy subscriber's traffic).

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

/// The wire form of [`Message::Completions`] items: base64 of 40-octet big-endian records
/// `flow_id u64 | offset u64 | len u64 | stag u32 | msn u32 | invalidate_stag u32 | kind u8 |
/// flags u8 (1: msn present, 2: invalidate_stag present) | 2 octets zero`.
pub mod codec {
    use super::{Completion, CompletionKind};
    use serde::{Deserialize, Deserializer, Serializer};

    const RECORD: usize = 40;

    fn kind_code(k: CompletionKind) -> u8 {
        match k {
            CompletionKind::WritePlaced => 0,
            CompletionKind::ReadResponsePlaced => 1,
            CompletionKind::SendArrived => 2,
        }
    }

    /// Packs completions into records.
    pub fn pack(items: &[Completion]) -> Vec<u8> {
        let mut v = Vec::with_capacity(items.len() * RECORD);
        for c in items {
            v.extend_from_slice(&c.flow_id.to_be_bytes());
            v.extend_from_slice(&c.offset.to_be_bytes());
            v.extend_from_slice(&c.len.to_be_bytes());
            v.extend_from_slice(&c.stag.to_be_bytes());
            v.extend_from_slice(&c.msn.unwrap_or(0).to_be_bytes());
            v.extend_from_slice(&c.invalidate_stag.unwrap_or(0).to_be_bytes());
            v.push(kind_code(c.kind));
            v.push(u8::from(c.msn.is_some()) | (u8::from(c.invalidate_stag.is_some()) << 1));
            v.extend_from_slice(&[0, 0]);
        }
        v
    }

    /// Unpacks records; `None` for a length that is not whole records, an unknown kind or
    /// unknown flags.
    pub fn unpack(b: &[u8]) -> Option<Vec<Completion>> {
        if !b.len().is_multiple_of(RECORD) {
            return None;
        }
        let u64_at =
            |r: &[u8], i: usize| u64::from_be_bytes(r[i..i + 8].try_into().unwrap_or([0; 8]));
        let u32_at =
            |r: &[u8], i: usize| u32::from_be_bytes(r[i..i + 4].try_into().unwrap_or([0; 4]));
        b.chunks_exact(RECORD)
            .map(|r| {
                let kind = match r[36] {
                    0 => CompletionKind::WritePlaced,
                    1 => CompletionKind::ReadResponsePlaced,
                    2 => CompletionKind::SendArrived,
                    _ => return None,
                };
                let flags = r[37];
                if flags & !3 != 0 {
                    return None;
                }
                Some(Completion {
                    flow_id: u64_at(r, 0),
                    offset: u64_at(r, 8),
                    len: u64_at(r, 16),
                    stag: u32_at(r, 24),
                    msn: (flags & 1 != 0).then(|| u32_at(r, 28)),
                    invalidate_stag: (flags & 2 != 0).then(|| u32_at(r, 32)),
                    kind,
                })
            })
            .collect()
    }

    /// For `#[serde(with)]`.
    pub fn serialize<S: Serializer>(items: &[Completion], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::capture::base64::encode(&pack(items)))
    }

    /// For `#[serde(with)]`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Completion>, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        crate::capture::base64::decode(&s)
            .and_then(|b| unpack(&b))
            .ok_or_else(|| serde::de::Error::custom("invalid completion records"))
    }
}
