//! The HTTP error shape: `{"error":"conflict","message":"agent is already running","details":{…},"http_status":409}`.
//!
//! Source: `protocols/agentctl.md` ("HTTP API"). Codes beyond the note's list: `method_not_allowed` 405,
//! `payload_too_large` 413, `forbidden` 403 (cross-site or rebound request), `request_timeout` 408 (stalled body),
//! `unsupported_media_type` 415 (a body not declared JSON), `agent_exited` 502 (the agent exited while a call was pending),
//! `agent_unreachable` 502 (it closed its stdout, or its stdin cannot be written), `unavailable` 503
//! (a limit was reached).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// A stable error code and its HTTP status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// 400: malformed JSON, a bad query string, not a WebSocket upgrade.
    BadRequest,
    /// 400: well-formed but invalid input (wrong field types, missing `method`, …).
    ValidationError,
    /// 401: missing or wrong bearer token.
    Unauthorized,
    /// 403: a cross-site request (a foreign `Origin`) or a `Host` that is not this loopback server (DNS
    /// rebinding).
    Forbidden,
    /// 404: no such route.
    NotFound,
    /// 405: the route exists, the method does not.
    MethodNotAllowed,
    /// 408: the request body stalled longer than `AGENTCTL_IDLE_TIMEOUT_MS`, or was not complete within
    /// `AGENTCTL_BODY_READ_TIMEOUT_MS`.
    RequestTimeout,
    /// 409: the agent's state does not allow it (already running, not running, no pending request with that id).
    Conflict,
    /// 413: a body over `AGENTCTL_MAX_MESSAGE_BYTES`.
    PayloadTooLarge,
    /// 415: a request body that is not declared `application/json`.
    UnsupportedMediaType,
    /// 500: spawning failed, or another internal failure.
    InternalError,
    /// 502: the agent exited while the call was pending.
    AgentExited,
    /// 502: the agent still runs but can no longer answer: it closed its stdout, or its stdin cannot be written
    /// (`details.reason`: `stdout_closed` or `stdin_closed`).
    AgentUnreachable,
    /// 503: a limit was reached (pending calls, subscribers, the agent not reading its stdin).
    Unavailable,
    /// 504: the agent did not answer in time.
    Timeout,
}

impl ErrorKind {
    /// Stable snake_case code (the `error` member).
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::ValidationError => "validation_error",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::RequestTimeout => "request_timeout",
            ErrorKind::UnsupportedMediaType => "unsupported_media_type",
            ErrorKind::NotFound => "not_found",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::Conflict => "conflict",
            ErrorKind::PayloadTooLarge => "payload_too_large",
            ErrorKind::InternalError => "internal_error",
            ErrorKind::AgentExited => "agent_exited",
            ErrorKind::AgentUnreachable => "agent_unreachable",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout => "timeout",
        }
    }

    /// The HTTP status.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorKind::BadRequest | ErrorKind::ValidationError => StatusCode::BAD_REQUEST,
            ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorKind::Forbidden => StatusCode::FORBIDDEN,
            ErrorKind::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorKind::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorKind::Conflict => StatusCode::CONFLICT,
            ErrorKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::InternalError => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorKind::AgentExited | ErrorKind::AgentUnreachable => StatusCode::BAD_GATEWAY,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }
}

/// An error answered to an HTTP client.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// Code and status.
    pub kind: ErrorKind,
    /// Lowercase human-readable message.
    pub message: String,
    /// Extra facts (`null` when none).
    pub details: serde_json::Value,
}

impl ApiError {
    /// An error without details.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            details: serde_json::Value::Null,
        }
    }

    /// Adds details.
    #[must_use]
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = details;
        self
    }
}

/// The wire shape.
#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'static str,
    message: &'a str,
    details: &'a serde_json::Value,
    http_status: u16,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.kind.status();
        let body = ErrorBody {
            error: self.kind.code(),
            message: &self.message,
            details: &self.details,
            http_status: status.as_u16(),
        };
        let mut response = (status, Json(body)).into_response();
        if self.kind == ErrorKind::RequestTimeout {
            // The rest of a stalled body is not worth waiting for.
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        if self.kind == ErrorKind::Unauthorized {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_statuses_are_stable() {
        for (kind, code, status) in [
            (ErrorKind::BadRequest, "bad_request", 400),
            (ErrorKind::ValidationError, "validation_error", 400),
            (ErrorKind::Unauthorized, "unauthorized", 401),
            (ErrorKind::Forbidden, "forbidden", 403),
            (ErrorKind::RequestTimeout, "request_timeout", 408),
            (
                ErrorKind::UnsupportedMediaType,
                "unsupported_media_type",
                415,
            ),
            (ErrorKind::NotFound, "not_found", 404),
            (ErrorKind::MethodNotAllowed, "method_not_allowed", 405),
            (ErrorKind::Conflict, "conflict", 409),
            (ErrorKind::PayloadTooLarge, "payload_too_large", 413),
            (ErrorKind::InternalError, "internal_error", 500),
            (ErrorKind::AgentExited, "agent_exited", 502),
            (ErrorKind::AgentUnreachable, "agent_unreachable", 502),
            (ErrorKind::Unavailable, "unavailable", 503),
            (ErrorKind::Timeout, "timeout", 504),
        ] {
            assert_eq!((kind.code(), kind.status().as_u16()), (code, status));
        }
    }
}
