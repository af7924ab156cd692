//! The errors of the ACP roles: one enum for everything a client or agent call can fail with.

use agentwire_jsonrpc::{CallError, ErrorObject, SendError};

/// Why an ACP operation failed.
///
/// Each variant has a stable snake_case [`code`](AcpError::code) for errors that cross a process boundary
/// (host diagnostics, `awp-host check` reports).
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum AcpError {
    /// The peer answered the request with a JSON-RPC error object (any code, kept unchanged).
    #[error("peer answered {method} with error {}: {}", .error.code.0, .error.message)]
    Rpc {
        /// The method that failed, e.g. `session/new`.
        method: String,
        /// The peer's error object.
        error: Box<ErrorObject>,
    },
    /// The agent answered `initialize` with a protocol version this crate does not speak; the connection was
    /// closed (ACP "Initialization": a client that does not support the answered version closes the connection).
    #[error(
        "agent answered protocol version {answered}, this client supports only version {supported}"
    )]
    UnsupportedProtocolVersion {
        /// The version the agent answered, as JSON text (`2`, `"1.0"`, `null`).
        answered: String,
        /// The version this crate speaks (1).
        supported: u16,
    },
    /// The peer's answer does not have the shape the method's schema requires.
    #[error("invalid {method} answer from peer: {reason}")]
    InvalidResponse {
        /// The method whose answer was invalid.
        method: String,
        /// What was wrong (serde's message).
        reason: String,
    },
    /// The operation needs a capability the peer did not advertise (e.g. `session/load` without `loadSession`).
    #[error("peer did not advertise the {capability} capability")]
    CapabilityMissing {
        /// The capability's JSON path, e.g. `agentCapabilities.loadSession`.
        capability: &'static str,
    },
    /// A method was called before `initialize` succeeded.
    #[error("the connection is not initialized")]
    NotInitialized,
    /// The agent ended the turn with a failure it reported itself (Kandev dialect `error`, or `complete` with
    /// `success: false`).
    #[error("agent reported the turn failed: {message}")]
    TurnFailed {
        /// The agent's message.
        message: String,
    },
    /// The connection closed (agent exit, EOF, write failure) before the answer arrived.
    #[error("connection to the peer closed")]
    ConnectionClosed,
    /// No answer within the configured timeout.
    #[error("{method} timed out")]
    Timeout {
        /// The method that timed out.
        method: String,
    },
    /// Too many calls are already waiting for answers (`agentwire_jsonrpc::Config::max_pending_calls`).
    #[error("too many pending calls")]
    TooManyPendingCalls,
    /// A message could not be encoded as one JSON line; nothing was sent.
    #[error("message could not be encoded: {0}")]
    Encode(String),
    /// The agent process could not be started.
    #[error("agent could not be spawned: {0}")]
    Spawn(#[from] agentwire_process::SpawnError),
}

impl AcpError {
    /// A stable snake_case code: `rpc_error`, `unsupported_protocol_version`, `invalid_response`,
    /// `capability_missing`, `not_initialized`, `turn_failed`, `connection_closed`, `timeout`,
    /// `too_many_pending_calls`, `encode_failed` or `spawn_failed`.
    pub fn code(&self) -> &'static str {
        match self {
            AcpError::Rpc { .. } => "rpc_error",
            AcpError::UnsupportedProtocolVersion { .. } => "unsupported_protocol_version",
            AcpError::InvalidResponse { .. } => "invalid_response",
            AcpError::CapabilityMissing { .. } => "capability_missing",
            AcpError::NotInitialized => "not_initialized",
            AcpError::TurnFailed { .. } => "turn_failed",
            AcpError::ConnectionClosed => "connection_closed",
            AcpError::Timeout { .. } => "timeout",
            AcpError::TooManyPendingCalls => "too_many_pending_calls",
            AcpError::Encode(_) => "encode_failed",
            AcpError::Spawn(_) => "spawn_failed",
        }
    }

    /// The peer's error object for [`AcpError::Rpc`].
    pub fn rpc(&self) -> Option<&ErrorObject> {
        match self {
            AcpError::Rpc { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }

    pub(crate) fn from_call(method: &str, error: CallError) -> Self {
        match error {
            CallError::Rpc(error) => AcpError::Rpc {
                method: method.to_owned(),
                error: Box::new(error),
            },
            CallError::Timeout => AcpError::Timeout {
                method: method.to_owned(),
            },
            CallError::TooManyPendingCalls => AcpError::TooManyPendingCalls,
            CallError::InvalidResponse(reason) => AcpError::InvalidResponse {
                method: method.to_owned(),
                reason,
            },
            CallError::Encode(error) => AcpError::Encode(error.to_string()),
            // Cancelled (our own `$/cancel_request`), ConnectionClosed and future variants: the answer will not come.
            _ => AcpError::ConnectionClosed,
        }
    }

    pub(crate) fn invalid_response(method: &str, error: impl std::fmt::Display) -> Self {
        AcpError::InvalidResponse {
            method: method.to_owned(),
            reason: error.to_string(),
        }
    }
}

impl From<SendError> for AcpError {
    fn from(error: SendError) -> Self {
        match error {
            SendError::Encode(error) => AcpError::Encode(error.to_string()),
            _ => AcpError::ConnectionClosed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_jsonrpc::ErrorCode;

    fn check(error: AcpError, code: &str, message: &str) {
        assert_eq!(error.code(), code);
        assert_eq!(error.to_string(), message);
    }

    #[test]
    fn codes_and_messages_are_stable() {
        let rpc = ErrorObject::new(ErrorCode(-32000), "auth required");
        check(
            AcpError::Rpc {
                method: "session/new".into(),
                error: Box::new(rpc),
            },
            "rpc_error",
            "peer answered session/new with error -32000: auth required",
        );
        check(
            AcpError::UnsupportedProtocolVersion {
                answered: "2".into(),
                supported: 1,
            },
            "unsupported_protocol_version",
            "agent answered protocol version 2, this client supports only version 1",
        );
        check(
            AcpError::InvalidResponse {
                method: "initialize".into(),
                reason: "missing field".into(),
            },
            "invalid_response",
            "invalid initialize answer from peer: missing field",
        );
        check(
            AcpError::CapabilityMissing {
                capability: "agentCapabilities.loadSession",
            },
            "capability_missing",
            "peer did not advertise the agentCapabilities.loadSession capability",
        );
        check(
            AcpError::NotInitialized,
            "not_initialized",
            "the connection is not initialized",
        );
        check(
            AcpError::TurnFailed {
                message: "boom".into(),
            },
            "turn_failed",
            "agent reported the turn failed: boom",
        );
        check(
            AcpError::ConnectionClosed,
            "connection_closed",
            "connection to the peer closed",
        );
        check(
            AcpError::Timeout {
                method: "initialize".into(),
            },
            "timeout",
            "initialize timed out",
        );
        check(
            AcpError::TooManyPendingCalls,
            "too_many_pending_calls",
            "too many pending calls",
        );
        check(
            AcpError::Encode("x".into()),
            "encode_failed",
            "message could not be encoded: x",
        );
    }

    #[test]
    fn call_errors_map_to_acp_errors() {
        assert_eq!(
            AcpError::from_call("m", CallError::ConnectionClosed).code(),
            "connection_closed"
        );
        assert_eq!(
            AcpError::from_call("m", CallError::Timeout).code(),
            "timeout"
        );
        assert_eq!(
            AcpError::from_call("m", CallError::TooManyPendingCalls).code(),
            "too_many_pending_calls"
        );
        let rpc = AcpError::from_call("m", CallError::Rpc(ErrorObject::internal_error("x")));
        assert_eq!(rpc.rpc().map(|e| e.code), Some(ErrorCode::INTERNAL_ERROR));
    }
}
