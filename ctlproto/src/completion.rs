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

    /// The status of the completion that reports it.
    pub fn status(self) -> CompletionStatus {
        match self {
            RefusalCode::Malformed | RefusalCode::Invalid => CompletionStatus::LocalQpOperation,
            RefusalCode::UnknownRegion | RefusalCode::WrongDomain | RefusalCode::OutOfBounds => {
                CompletionStatus::LocalProtection
            }
            RefusalCode::Busy => CompletionStatus::QueueFull,
            // Verbs completes a post on a queue pair in error as flushed.
            RefusalCode::UnknownFlow | RefusalCode::Closed => CompletionStatus::Flushed,
        }
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
    /// The work request makes no sense for its connection (`IBV_WC_LOC_QP_OP_ERR`): a
    /// malformed record, a Read of a size the protocol cannot carry, a Read on a connection
    /// whose ORD is 0, a message too long for its header (a refused shared-memory post,
    /// [`RefusalCode::Malformed`], [`RefusalCode::Invalid`]).
    LocalQpOperation = 2,
    /// A local region of the request is not the application's to use (`IBV_WC_LOC_PROT_ERR`):
    /// no such STag, another domain's, outside the region, or destroyed while the request
    /// waited ([`RefusalCode::UnknownRegion`], [`RefusalCode::WrongDomain`],
    /// [`RefusalCode::OutOfBounds`]).
    LocalProtection = 4,
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
    /// The connection's send queue or send budget was full when the worker read the post
    /// ([`RefusalCode::Busy`]): post again once completions arrive. Verbs has no status for
    /// it (`ibv_post_send` refuses with `ENOMEM` before returning); a post through shared
    /// memory is read after the application's call returned, so its refusal is a
    /// completion.
    QueueFull = 64,
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
            2 => CompletionStatus::LocalQpOperation,
            4 => CompletionStatus::LocalProtection,
            5 => CompletionStatus::Flushed,
            9 => CompletionStatus::RemoteInvalidRequest,
            10 => CompletionStatus::RemoteAccess,
            11 => CompletionStatus::RemoteOperation,
            12 => CompletionStatus::RetryExceeded,
            64 => CompletionStatus::QueueFull,
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
            status: code.status(),
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
    fn every_refusal_completes_with_a_failure_status() {
        use super::{Completion, RefusalCode as R};
        let all = [
            (R::Malformed, S::LocalQpOperation),
            (R::UnknownFlow, S::Flushed),
            (R::WrongDomain, S::LocalProtection),
            (R::UnknownRegion, S::LocalProtection),
            (R::OutOfBounds, S::LocalProtection),
            (R::Invalid, S::LocalQpOperation),
            (R::Busy, S::QueueFull),
            (R::Closed, S::Flushed),
        ];
        for (code, status) in all {
            let c = Completion::post_refused(1, 2, 3, 4, code);
            assert_eq!((c.status, c.refusal()), (status, Some((3, code))));
        }
    }

    #[test]
    fn statuses_carry_verbs_numbers_and_read_back() {
        // ibv_wc_status: SUCCESS 0, LOC_QP_OP_ERR 2, LOC_PROT_ERR 4, WR_FLUSH_ERR 5,
        // REM_INV_REQ_ERR 9, REM_ACCESS_ERR 10, REM_OP_ERR 11, RETRY_EXC_ERR 12; queue full
        // has no verbs number.
        let all = [
            (S::Success, 0),
            (S::LocalQpOperation, 2),
            (S::LocalProtection, 4),
            (S::QueueFull, 64),
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
