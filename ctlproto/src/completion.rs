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
    /// A post made through the shared-memory post queue ([`crate::ring::post`]) was refused
    /// and nothing of it was queued: `stag` is the post's local region, `offset` carries its
    /// wr_id, `len` the [`RefusalCode`] (read both with [`Completion::refusal`]) and `msn`
    /// the post's message count (none of which will complete).
    PostRefused,
}

/// Why the datapath refused a post made through shared memory (a
/// [`CompletionKind::PostRefused`] completion's `len`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalCode {
    /// The record makes no sense (unknown op, non-zero padding, a count or length of 0).
    Malformed = 1,
    /// No such connection (or it ended).
    UnknownFlow = 2,
    /// The connection, or the region, belongs to another protection domain than the
    /// subscription whose queue carried the post.
    WrongDomain = 3,
    /// No registered region with the post's STag.
    UnknownRegion = 4,
    /// The messages lie outside the region.
    OutOfBounds = 5,
    /// The messages cannot be sent as asked (too long for their header, a Read of a size
    /// the protocol cannot carry, Reads on a connection whose ORD is 0).
    Invalid = 6,
    /// The connection's send queue or send budget is full, or the datapath is forwarding
    /// too many misrouted posts: post again once completions arrive.
    Busy = 7,
    /// The connection is closing or closed.
    Closed = 8,
}

impl RefusalCode {
    /// The code as a completion record carries it.
    pub fn code(self) -> u64 {
        self as u64
    }

    /// The code a completion record carries, if known.
    pub fn from_code(c: u64) -> Option<RefusalCode> {
        Some(match c {
            1 => RefusalCode::Malformed,
            2 => RefusalCode::UnknownFlow,
            3 => RefusalCode::WrongDomain,
            4 => RefusalCode::UnknownRegion,
            5 => RefusalCode::OutOfBounds,
            6 => RefusalCode::Invalid,
            7 => RefusalCode::Busy,
            8 => RefusalCode::Closed,
            _ => return None,
        })
    }
}

/// How a work request ended, with the numbers of verbs' `ibv_wc_status`. Every completion has one;
/// a failed one always comes, signaled or not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompletionStatus {
    /// Done (`IBV_WC_SUCCESS`).
    #[default]
    Success = 0,
    /// The connection ended before the work request was done (`IBV_WC_WR_FLUSH_ERR`):
    /// closed, reset, a Terminate either way, an MPA error, a timer. Its octets may or may
    /// not have reached the peer. Why the connection ended (a Terminate's layer, type and
    /// code) comes with its end (`FlowGone`), as verbs reports a queue pair's error as an
    /// asynchronous event.
    Flushed = 5,
    /// The peer's Terminate named this request as one it could not take: an untagged buffer
    /// error (DDP layer, type 2: no buffer posted, invalid queue, MSN or offset, a message
    /// too long) (`IBV_WC_REM_INV_REQ_ERR`).
    RemoteInvalidRequest = 9,
    /// The peer's Terminate named this request as one that broke its memory's protection: a
    /// remote protection error (RDMAP layer, type 1) or a tagged buffer error (DDP layer,
    /// type 1): invalid STag, bounds, access rights, domain (`IBV_WC_REM_ACCESS_ERR`).
    RemoteAccess = 10,
    /// The peer's Terminate named this request with another error: a remote operation error
    /// or a catastrophic one (`IBV_WC_REM_OP_ERR`).
    RemoteOperation = 11,
    /// The oldest request outstanding when the connection gave up waiting for the peer:
    /// retransmissions, keepalive probes or zero-window probes ran out
    /// (`IBV_WC_RETRY_EXC_ERR`).
    RetryExceeded = 12,
}

impl CompletionStatus {
    /// The code a completion record carries.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The status of a record's code, if known.
    pub fn from_code(c: u8) -> Option<CompletionStatus> {
        Some(match c {
            0 => CompletionStatus::Success,
            5 => CompletionStatus::Flushed,
            9 => CompletionStatus::RemoteInvalidRequest,
            10 => CompletionStatus::RemoteAccess,
            11 => CompletionStatus::RemoteOperation,
            12 => CompletionStatus::RetryExceeded,
            _ => return None,
        })
    }
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
    /// The work request's id as the application posted it (a post of `count` messages:
    /// `wr_id + i` for message `i`; a receive buffer: likewise); 0 for what the peer sent
    /// into a region (`WritePlaced`).
    #[serde(default)]
    pub wr_id: u64,
    /// How it ended.
    #[serde(default)]
    pub status: CompletionStatus,
}

impl Completion {
    /// A refused post's wr_id and why it was refused; `None` for other kinds (and for a
    /// code this version does not know).
    pub fn refusal(&self) -> Option<(u64, RefusalCode)> {
        if self.kind != CompletionKind::PostRefused {
            return None;
        }
        Some((self.offset, RefusalCode::from_code(self.len)?))
    }

    /// The completion that reports the refusal of post `wr_id` of `count` messages on
    /// `flow_id` (region `stag`).
    pub fn post_refused(
        flow_id: u64,
        stag: u32,
        wr_id: u64,
        count: u32,
        code: RefusalCode,
    ) -> Completion {
        Completion {
            flow_id,
            kind: CompletionKind::PostRefused,
            stag,
            offset: wr_id,
            len: code.code(),
            msn: Some(count),
            invalidate_stag: None,
            wr_id,
            status: CompletionStatus::Success,
        }
    }

    /// How many messages of the consumer's own posts this completion accounts for: one for a
    /// message sent (a Write or Send acknowledged, a Read's response placed), the post's
    /// count for a refusal, none for what the peer sent.
    pub fn posted_messages(&self) -> u64 {
        match self.kind {
            CompletionKind::WriteSent
            | CompletionKind::SendSent
            | CompletionKind::ReadResponsePlaced => 1,
            CompletionKind::PostRefused => u64::from(self.msn.unwrap_or(0)),
            CompletionKind::WritePlaced | CompletionKind::SendArrived => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CompletionStatus as S;

    #[test]
    fn statuses_carry_verbs_numbers_and_read_back() {
        // ibv_wc_status: SUCCESS 0, WR_FLUSH_ERR 5, REM_INV_REQ_ERR 9, REM_ACCESS_ERR 10,
        // REM_OP_ERR 11, RETRY_EXC_ERR 12.
        let all = [
            (S::Success, 0),
            (S::Flushed, 5),
            (S::RemoteInvalidRequest, 9),
            (S::RemoteAccess, 10),
            (S::RemoteOperation, 11),
            (S::RetryExceeded, 12),
        ];
        for (s, code) in all {
            assert_eq!(s.code(), code);
            assert_eq!(S::from_code(code), Some(s));
        }
        for code in (0..=255u8).filter(|c| !all.iter().any(|(_, k)| k == c)) {
            assert_eq!(S::from_code(code), None, "{code}");
        }
    }
}
