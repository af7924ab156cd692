//! Error types: canonicalization ([`CanonicalError`]), broker operations ([`ApprovalError`]) and the CLI
//! mutation guard's outcome ([`GuardError`]), each with a stable snake_case `code()`.
//!
//! Codes are DeepChat's local-control error codes where they surface there
//! (`src/shared/contracts/localControl.ts`): `invalid_request`, `rate_limited`, `not_found`, `conflict`,
//! `approval_denied`, `approval_timeout`, `cancelled`.

use crate::types::DenyReason;

/// Why approval arguments (or display data) could not be canonicalized. Every variant has code `invalid_request`.
///
/// Source: DeepChat `approvalBroker.ts` `canonicalize`/`serializeArguments`.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    /// A value sits deeper than [`CanonicalLimits::max_depth`](crate::CanonicalLimits::max_depth) containers.
    #[error("json is nested deeper than {limit} levels")]
    TooDeep {
        /// The limit that was exceeded.
        limit: usize,
    },
    /// The value has more object keys in all than [`CanonicalLimits::max_keys`](crate::CanonicalLimits::max_keys).
    #[error("json has more than {limit} object keys")]
    TooManyKeys {
        /// The limit that was exceeded.
        limit: usize,
    },
    /// The canonical form is longer than [`CanonicalLimits::max_bytes`](crate::CanonicalLimits::max_bytes).
    #[error("canonical json is longer than {limit} bytes")]
    TooLarge {
        /// The limit that was exceeded, in bytes.
        limit: usize,
    },
    /// A number is neither an integer nor a finite `f64`. A plain `serde_json::Value` cannot hold one (serde_json
    /// refuses `NaN`, infinities and out-of-range literals); with serde_json's `arbitrary_precision` a literal
    /// such as `1e400` can get here.
    #[error("json number is not finite")]
    NonFiniteNumber,
}

impl CanonicalError {
    /// The stable wire code: always `invalid_request`.
    pub fn code(&self) -> &'static str {
        "invalid_request"
    }

    /// A stable snake_case detail: `too_deep`, `too_many_keys`, `too_large` or `non_finite_number`.
    pub fn reason(&self) -> &'static str {
        match self {
            CanonicalError::TooDeep { .. } => "too_deep",
            CanonicalError::TooManyKeys { .. } => "too_many_keys",
            CanonicalError::TooLarge { .. } => "too_large",
            CanonicalError::NonFiniteNumber => "non_finite_number",
        }
    }
}

/// Why a broker operation was refused.
///
/// Messages never contain argument or display values (only field names and limits).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    /// The arguments cannot be canonicalized. Code `invalid_request`.
    #[error("invalid approval arguments: {0}")]
    InvalidArgs(CanonicalError),
    /// The display data cannot be canonicalized or exceeds
    /// [`Limits::max_display_bytes`](crate::Limits::max_display_bytes). Code `invalid_request`.
    #[error("invalid approval display data: {0}")]
    InvalidDisplay(CanonicalError),
    /// A binding field (`scope`, `method`, `dedup_key`) or the `timeout` is empty, too long or out of range.
    /// Code `invalid_request`.
    #[error("invalid approval {field}: {problem}")]
    InvalidField {
        /// The field: `scope`, `method`, `dedup_key` or `timeout`.
        field: &'static str,
        /// What is wrong with it: `empty`, `too_long`, `zero`, `too_large`.
        problem: &'static str,
    },
    /// The scope already holds [`Limits::max_pending_per_scope`](crate::Limits::max_pending_per_scope)
    /// approvals. Code `rate_limited`.
    #[error("too many pending approvals in this scope (limit {limit})")]
    ScopeFull {
        /// The per-scope limit.
        limit: usize,
    },
    /// The broker already holds [`Limits::max_pending_total`](crate::Limits::max_pending_total) approvals.
    /// Code `rate_limited`.
    #[error("too many pending approvals (limit {limit})")]
    BrokerFull {
        /// The broker-wide limit.
        limit: usize,
    },
    /// No live approval has this id in this scope: it never existed, or it was denied, cancelled, expired or
    /// consumed. Code `not_found`.
    #[error("approval not found")]
    NotFound,
    /// The approval was already approved and waits for its consumer. Code `conflict`.
    #[error("approval already resolved")]
    AlreadyResolved,
    /// Someone already waits for this approval; one decision resumes one waiter. Code `conflict`.
    #[error("approval already has a waiter")]
    AlreadyWaiting,
    /// The approval's expiry passed before it was resolved; it is now expired. Code `approval_timeout`.
    #[error("approval expired")]
    Expired,
}

impl ApprovalError {
    /// A stable snake_case code: `invalid_request`, `rate_limited`, `not_found`, `conflict` or `approval_timeout`.
    pub fn code(&self) -> &'static str {
        match self {
            ApprovalError::InvalidArgs(_)
            | ApprovalError::InvalidDisplay(_)
            | ApprovalError::InvalidField { .. } => "invalid_request",
            ApprovalError::ScopeFull { .. } | ApprovalError::BrokerFull { .. } => "rate_limited",
            ApprovalError::NotFound => "not_found",
            ApprovalError::AlreadyResolved | ApprovalError::AlreadyWaiting => "conflict",
            ApprovalError::Expired => "approval_timeout",
        }
    }
}

/// Why [`CliMutationGuard::authorize`](crate::CliMutationGuard::authorize) did not let a mutation run.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    /// No renderer is attached, so nobody could answer: refused at once, no approval created.
    /// Code `approval_denied` (DESIGN.md invariant 8: exit 5 at once, not after the timeout).
    #[error("approval denied: no approval renderer is attached")]
    NoRenderer,
    /// The approval was denied: by the renderer, by scope/connection cancellation, or because the last renderer
    /// went away. Code `approval_denied`.
    #[error("approval denied ({})", reason.code())]
    Denied {
        /// Who or what denied it.
        reason: DenyReason,
    },
    /// Nobody answered before the approval's expiry. Code `approval_timeout`.
    #[error("approval timed out")]
    Timeout,
    /// The broker was cleared (shutdown) while the request waited. Code `cancelled`.
    #[error("approval cancelled")]
    Cancelled,
    /// The request was refused before an approval existed (bad arguments, pending cap). Its code.
    #[error(transparent)]
    Rejected(#[from] ApprovalError),
}

impl GuardError {
    /// A stable snake_case code: `approval_denied`, `approval_timeout`, `cancelled`, or the
    /// [`ApprovalError::code`] of a rejection (`invalid_request`, `rate_limited`, …).
    pub fn code(&self) -> &'static str {
        match self {
            GuardError::NoRenderer | GuardError::Denied { .. } => "approval_denied",
            GuardError::Timeout => "approval_timeout",
            GuardError::Cancelled => "cancelled",
            GuardError::Rejected(error) => error.code(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approval_error_codes_are_stable() {
        let cases = [
            (
                ApprovalError::InvalidArgs(CanonicalError::NonFiniteNumber),
                "invalid_request",
            ),
            (
                ApprovalError::InvalidDisplay(CanonicalError::TooLarge { limit: 1 }),
                "invalid_request",
            ),
            (
                ApprovalError::InvalidField {
                    field: "scope",
                    problem: "empty",
                },
                "invalid_request",
            ),
            (ApprovalError::ScopeFull { limit: 64 }, "rate_limited"),
            (ApprovalError::BrokerFull { limit: 4096 }, "rate_limited"),
            (ApprovalError::NotFound, "not_found"),
            (ApprovalError::AlreadyResolved, "conflict"),
            (ApprovalError::AlreadyWaiting, "conflict"),
            (ApprovalError::Expired, "approval_timeout"),
        ];
        for (error, code) in cases {
            assert_eq!(error.code(), code, "{error}");
        }
    }

    #[test]
    fn guard_error_codes_are_stable() {
        let cases = [
            (GuardError::NoRenderer, "approval_denied"),
            (
                GuardError::Denied {
                    reason: DenyReason::Renderer,
                },
                "approval_denied",
            ),
            (GuardError::Timeout, "approval_timeout"),
            (GuardError::Cancelled, "cancelled"),
            (
                GuardError::Rejected(ApprovalError::ScopeFull { limit: 64 }),
                "rate_limited",
            ),
        ];
        for (error, code) in cases {
            assert_eq!(error.code(), code, "{error}");
        }
        assert_eq!(
            GuardError::Denied {
                reason: DenyReason::ConnectionClosed
            }
            .to_string(),
            "approval denied (connection_closed)"
        );
    }
}
