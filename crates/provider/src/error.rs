//! Normalized provider failures ([`ProviderError`]) and the redacting credential type ([`ApiKey`]).
//!
//! An upstream failure is reduced to what a caller may see and act on: a stable code, the HTTP status when there
//! was one, its class and whether retrying can help. Upstream error text, headers and bodies are never read into
//! an error (non-2xx bodies are dropped unread), so they cannot reach `Display`, `Debug` or any field.

use std::fmt;

/// Why a provider could not be configured or did not answer. Crosses process boundaries as [`ProviderError::code`].
#[non_exhaustive]
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProviderError {
    /// The base URL is not an absolute `http(s)` URL without credentials, query or fragment.
    #[error("provider base url is not a valid http(s) url")]
    UrlInvalid,
    /// The base URL (or a media URL the provider returned) is plain `http://` to a host that is not loopback.
    #[error("provider url uses plain http to a non-loopback host")]
    UrlRejected,
    /// Neither the request nor the provider's configuration names a model.
    #[error("no model: pass a model or configure a default")]
    MissingModel,
    /// The HTTP client could not be built (TLS backend).
    #[error("http client could not be built")]
    Client,
    /// Connecting failed or timed out, or the connection broke.
    #[error("provider unreachable")]
    Unreachable,
    /// The response head or a body chunk did not arrive within the idle timeout, or the whole call took longer
    /// than the total timeout.
    #[error("provider timed out")]
    Timeout,
    /// HTTP 401 or 403.
    #[error("provider refused the credentials (http {status})")]
    AuthFailed {
        /// 401 or 403.
        status: u16,
    },
    /// HTTP 429.
    #[error("provider rate limited the request")]
    RateLimited,
    /// Any other non-2xx status.
    #[error("provider returned http status {status}")]
    Http {
        /// The status code.
        status: u16,
    },
    /// Not the documented response shape, an `error` object in a stream, or a stream cut before it finished.
    #[error("provider sent a malformed response")]
    BadResponse,
    /// Streamed text grew past [`crate::Limits::max_reply_bytes`].
    #[error("provider reply too long")]
    ReplyTooLong,
    /// A response body (or one SSE event) was larger than its limit in [`crate::Limits`].
    #[error("provider response too large")]
    ResponseTooLarge,
    /// The request's own payload (prompt, text to speak, audio to transcribe) is over its limit.
    #[error("request input too large")]
    InputTooLarge,
    /// The request is not valid for this provider (empty prompt, unsupported size or format, audio that is
    /// not a WAV file for the built-in provider).
    #[error("invalid request: {reason}")]
    InvalidInput {
        /// A fixed description written by this crate (never upstream text).
        reason: &'static str,
    },
    /// The upstream video job ended with status `failed` (its error text is not passed on).
    #[error("provider job failed")]
    JobFailed,
}

/// The class of an HTTP status, as `"4xx"`/`"5xx"`/… on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusClass {
    /// 1xx.
    Informational,
    /// 2xx (never an error; listed for completeness).
    Success,
    /// 3xx (redirects are not followed and count as failures).
    Redirection,
    /// 4xx.
    ClientError,
    /// 5xx.
    ServerError,
}

impl StatusClass {
    /// The class of `status`, `None` outside 100..=599.
    pub fn of(status: u16) -> Option<Self> {
        Some(match status {
            100..=199 => StatusClass::Informational,
            200..=299 => StatusClass::Success,
            300..=399 => StatusClass::Redirection,
            400..=499 => StatusClass::ClientError,
            500..=599 => StatusClass::ServerError,
            _ => return None,
        })
    }

    /// `"1xx"` … `"5xx"`.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusClass::Informational => "1xx",
            StatusClass::Success => "2xx",
            StatusClass::Redirection => "3xx",
            StatusClass::ClientError => "4xx",
            StatusClass::ServerError => "5xx",
        }
    }
}

impl ProviderError {
    /// Stable machine-readable code, e.g. `provider_auth_failed`.
    pub fn code(&self) -> &'static str {
        match self {
            ProviderError::UrlInvalid => "provider_url_invalid",
            ProviderError::UrlRejected => "provider_url_rejected",
            ProviderError::MissingModel => "missing_model",
            ProviderError::Client => "provider_client_failed",
            ProviderError::Unreachable => "provider_unreachable",
            ProviderError::Timeout => "provider_timeout",
            ProviderError::AuthFailed { .. } => "provider_auth_failed",
            ProviderError::RateLimited => "provider_rate_limited",
            ProviderError::Http { .. } => "provider_http_error",
            ProviderError::BadResponse => "provider_bad_response",
            ProviderError::ReplyTooLong => "provider_reply_too_long",
            ProviderError::ResponseTooLarge => "provider_response_too_large",
            ProviderError::InputTooLarge => "provider_input_too_large",
            ProviderError::InvalidInput { .. } => "provider_invalid_input",
            ProviderError::JobFailed => "provider_job_failed",
        }
    }

    /// The upstream HTTP status, when the failure was a non-2xx answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            ProviderError::AuthFailed { status } | ProviderError::Http { status } => Some(*status),
            ProviderError::RateLimited => Some(429),
            _ => None,
        }
    }

    /// The class of [`ProviderError::status`].
    pub fn status_class(&self) -> Option<StatusClass> {
        self.status().and_then(StatusClass::of)
    }

    /// Whether the same request may succeed later: connection failures, timeouts, 429 and 5xx are retryable;
    /// 4xx, malformed responses, limits and configuration errors are not.
    pub fn retryable(&self) -> bool {
        match self {
            ProviderError::Unreachable | ProviderError::Timeout | ProviderError::RateLimited => {
                true
            }
            ProviderError::Http { status } => *status >= 500,
            _ => false,
        }
    }
}

/// An API key. `Debug` and `Display` print `ApiKey(***)`; the only way to the text is [`ApiKey::expose`],
/// which the HTTP client calls to build the `Authorization` header.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

/// Why a text is not an acceptable API key.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApiKeyError {
    /// Empty after trimming.
    #[error("api key is empty")]
    Empty,
    /// Longer than [`ApiKey::MAX_BYTES`].
    #[error("api key too long")]
    TooLong,
    /// Contains whitespace or a control character (it could not be sent in a header as given).
    #[error("api key contains whitespace or control characters")]
    InvalidCharacters,
}

impl ApiKeyError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ApiKeyError::Empty => "api_key_empty",
            ApiKeyError::TooLong => "api_key_too_long",
            ApiKeyError::InvalidCharacters => "api_key_invalid",
        }
    }
}

impl ApiKey {
    /// Longest accepted key, in bytes.
    pub const MAX_BYTES: usize = 4096;

    /// A key from `text` with surrounding whitespace (a trailing newline from stdin) removed.
    ///
    /// # Errors
    /// [`ApiKeyError`] when the key is empty, over [`ApiKey::MAX_BYTES`], or has inner whitespace or
    /// control characters.
    pub fn new(text: &str) -> Result<Self, ApiKeyError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(ApiKeyError::Empty);
        }
        if text.len() > Self::MAX_BYTES {
            return Err(ApiKeyError::TooLong);
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ApiKeyError::InvalidCharacters);
        }
        Ok(Self(text.to_owned()))
    }

    /// The key itself, for the request header (and a credential store). Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_a_distinct_stable_code_and_a_class() {
        let all = [
            ProviderError::UrlInvalid,
            ProviderError::UrlRejected,
            ProviderError::MissingModel,
            ProviderError::Client,
            ProviderError::Unreachable,
            ProviderError::Timeout,
            ProviderError::AuthFailed { status: 401 },
            ProviderError::RateLimited,
            ProviderError::Http { status: 500 },
            ProviderError::BadResponse,
            ProviderError::ReplyTooLong,
            ProviderError::ResponseTooLarge,
            ProviderError::InputTooLarge,
            ProviderError::InvalidInput { reason: "x" },
            ProviderError::JobFailed,
        ];
        let codes: std::collections::BTreeSet<&str> = all.iter().map(ProviderError::code).collect();
        assert_eq!(codes.len(), all.len());
        let retryable: Vec<&str> = all
            .iter()
            .filter(|e| e.retryable())
            .map(ProviderError::code)
            .collect();
        assert_eq!(
            retryable,
            [
                "provider_unreachable",
                "provider_timeout",
                "provider_rate_limited",
                "provider_http_error"
            ]
        );
        assert!(!ProviderError::Http { status: 404 }.retryable());
        assert!(ProviderError::Http { status: 503 }.retryable());
        assert_eq!(
            ProviderError::Http { status: 503 }
                .status_class()
                .map(StatusClass::as_str),
            Some("5xx")
        );
        assert_eq!(
            ProviderError::AuthFailed { status: 403 }
                .status_class()
                .map(StatusClass::as_str),
            Some("4xx")
        );
        assert_eq!(ProviderError::Timeout.status(), None);
    }

    #[test]
    fn api_keys_redact_and_validate() {
        let key = ApiKey::new(" sk-planted-secret\n").expect("key");
        assert_eq!(key.expose(), "sk-planted-secret");
        assert_eq!(format!("{key:?} {key}"), "ApiKey(***) ***");
        assert_eq!(ApiKey::new("  "), Err(ApiKeyError::Empty));
        assert_eq!(ApiKey::new("a b"), Err(ApiKeyError::InvalidCharacters));
        assert!(ApiKey::new(&"k".repeat(ApiKey::MAX_BYTES)).is_ok());
        assert_eq!(
            ApiKey::new(&"k".repeat(ApiKey::MAX_BYTES + 1)),
            Err(ApiKeyError::TooLong)
        );
    }
}
