//! Error types of the connection: one enum per failure area (a call, a send), and why a connection closed.

use agentwire_jsonl::EncodeError;

use crate::message::ErrorObject;

/// Why [`Connection::call`](crate::Connection::call) (or a [`PendingCall`](crate::PendingCall)) did not return a result.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The peer answered with an error object (any code, unknown codes included).
    #[error("peer answered with an error: {0}")]
    Rpc(ErrorObject),
    /// No answer within the call's timeout. The call is forgotten: a late answer is dropped and counted in
    /// [`Stats::late_responses`](crate::Stats::late_responses). The peer is not told (use
    /// [`Connection::cancel`](crate::Connection::cancel) for that).
    #[error("call timed out")]
    Timeout,
    /// The call was cancelled with [`Connection::cancel`](crate::Connection::cancel): `$/cancel_request` was sent
    /// and the peer's eventual answer is dropped and counted in [`Stats::late_responses`](crate::Stats::late_responses).
    #[error("call cancelled")]
    Cancelled,
    /// The connection closed (peer EOF, read or write failure, or [`Connection::close`](crate::Connection::close))
    /// before the answer arrived, or was already closed.
    #[error("connection closed")]
    ConnectionClosed,
    /// [`Config::max_pending_calls`](crate::Config::max_pending_calls) calls are already waiting for answers;
    /// nothing was sent.
    #[error("too many pending calls")]
    TooManyPendingCalls,
    /// The peer sent a response-shaped message with this call's id that is not a valid response (for example both
    /// `result` and `error`); the text says what was wrong.
    #[error("invalid response from peer: {0}")]
    InvalidResponse(String),
    /// The request could not be encoded as one JSON line; nothing was sent.
    #[error(transparent)]
    Encode(EncodeError),
}

impl CallError {
    /// A stable snake_case code: `rpc_error`, `timeout`, `cancelled`, `connection_closed`,
    /// `too_many_pending_calls`, `invalid_response` or `encode_failed`.
    pub fn code(&self) -> &'static str {
        match self {
            CallError::Rpc(_) => "rpc_error",
            CallError::Timeout => "timeout",
            CallError::Cancelled => "cancelled",
            CallError::ConnectionClosed => "connection_closed",
            CallError::TooManyPendingCalls => "too_many_pending_calls",
            CallError::InvalidResponse(_) => "invalid_response",
            CallError::Encode(_) => "encode_failed",
        }
    }

    /// The peer's error object for [`CallError::Rpc`].
    pub fn rpc(&self) -> Option<&ErrorObject> {
        match self {
            CallError::Rpc(error) => Some(error),
            _ => None,
        }
    }
}

impl From<SendError> for CallError {
    fn from(error: SendError) -> Self {
        match error {
            SendError::ConnectionClosed => CallError::ConnectionClosed,
            SendError::Encode(error) => CallError::Encode(error),
        }
    }
}

/// Why a notification or a response could not be queued for writing.
///
/// `Ok` from a send means the line was handed to the connection's writer task; a later write failure closes the
/// connection (see [`Connection::close_reason`](crate::Connection::close_reason)) and fails every pending call.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The output is closed or closing: a write failure, [`Connection::close`](crate::Connection::close) or
    /// [`Connection::abort`](crate::Connection::abort) (also for a send that was waiting for room in the queue when
    /// the close began), or every handle dropped.
    #[error("connection closed")]
    ConnectionClosed,
    /// The message could not be encoded as one JSON line; nothing was sent.
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

impl SendError {
    /// A stable snake_case code: `connection_closed` or `encode_failed`.
    pub fn code(&self) -> &'static str {
        match self {
            SendError::ConnectionClosed => "connection_closed",
            SendError::Encode(_) => "encode_failed",
        }
    }
}

/// Why a connection closed. The first reason wins.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// The peer closed its side (EOF on the reader).
    Eof,
    /// Reading failed; the text is the IO error.
    ReadFailed(String),
    /// Writing failed; the text is the IO error.
    WriteFailed(String),
    /// We closed it: [`Connection::close`](crate::Connection::close), or every handle was dropped.
    Closed,
}

impl CloseReason {
    /// A stable snake_case code: `eof`, `read_failed`, `write_failed` or `closed`.
    pub fn code(&self) -> &'static str {
        match self {
            CloseReason::Eof => "eof",
            CloseReason::ReadFailed(_) => "read_failed",
            CloseReason::WriteFailed(_) => "write_failed",
            CloseReason::Closed => "closed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ErrorCode;

    #[test]
    fn codes_are_stable() {
        let calls = [
            (
                CallError::Rpc(ErrorObject::new(ErrorCode(1), "x")),
                "rpc_error",
            ),
            (CallError::Timeout, "timeout"),
            (CallError::Cancelled, "cancelled"),
            (CallError::ConnectionClosed, "connection_closed"),
            (CallError::TooManyPendingCalls, "too_many_pending_calls"),
            (CallError::InvalidResponse("x".into()), "invalid_response"),
            (
                CallError::Encode(EncodeError::RawNewline { offset: 1 }),
                "encode_failed",
            ),
        ];
        for (error, code) in calls {
            assert_eq!(error.code(), code, "{error}");
        }
        assert_eq!(SendError::ConnectionClosed.code(), "connection_closed");
        assert_eq!(
            SendError::Encode(EncodeError::RawNewline { offset: 1 }).code(),
            "encode_failed"
        );
        let reasons = [
            (CloseReason::Eof, "eof"),
            (CloseReason::ReadFailed("x".into()), "read_failed"),
            (CloseReason::WriteFailed("x".into()), "write_failed"),
            (CloseReason::Closed, "closed"),
        ];
        for (reason, code) in reasons {
            assert_eq!(reason.code(), code);
        }
    }

    #[test]
    fn messages_are_lowercase_without_trailing_period() {
        for error in [
            CallError::Timeout,
            CallError::TooManyPendingCalls,
            CallError::ConnectionClosed,
        ] {
            let text = error.to_string();
            assert!(!text.ends_with('.'));
            assert_eq!(text, text.to_lowercase());
        }
    }
}
