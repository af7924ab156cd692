//! [`SpoolError`]: every failure of the spool, with a stable code from DeepChat's local-control error set.

use std::fmt;
use std::io;

use crate::id::InvalidArtifactId;

/// Which quota a create or write would have crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuotaScope {
    /// One artifact ([`crate::Limits::max_artifact_bytes`]).
    Artifact,
    /// One request of one connection and owner.
    Request,
    /// One connection.
    Connection,
    /// One owner.
    Owner,
    /// The whole spool.
    Total,
}

impl fmt::Display for QuotaScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuotaScope::Artifact => "artifact",
            QuotaScope::Request => "request",
            QuotaScope::Connection => "connection",
            QuotaScope::Owner => "owner",
            QuotaScope::Total => "total",
        })
    }
}

/// Whether a quota counts bytes or artifacts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuotaKind {
    /// A byte quota.
    Bytes,
    /// An artifact-count quota.
    Count,
}

impl fmt::Display for QuotaKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuotaKind::Bytes => "bytes",
            QuotaKind::Count => "count",
        })
    }
}

/// A spool failure. Messages never contain a path, an owner or file contents.
///
/// Codes (see [`SpoolError::code`]) are the local-control error codes of DeepChat
/// (`src/shared/contracts/localControl.ts`, summarized in `protocols/local-control.md`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpoolError {
    /// The id is malformed, unknown, expired, deleted, or owned by someone else. One variant for all of these, so
    /// that a caller cannot tell another owner's artifact from a missing one. Code `not_found`.
    #[error("artifact not found")]
    NotFound,
    /// A create or write would cross a quota. Code `result_too_large` for the artifact and request quotas (the
    /// output of this request is too big), `rate_limited` for connection, owner and total quotas (space comes back
    /// when other artifacts expire or are deleted).
    #[error("artifact {scope} {kind} quota exceeded")]
    QuotaExceeded {
        /// The quota that would have been crossed.
        scope: QuotaScope,
        /// Bytes or count.
        kind: QuotaKind,
    },
    /// The creator's metadata is unusable (empty or overlong owner/connection/request id, a MIME type or file name
    /// outside the allowed shape, a TTL above the maximum). Code `invalid_request`.
    #[error("invalid artifact request: {0}")]
    InvalidRequest(&'static str),
    /// The spool directory is not private to this user (symlink, not a directory, other owner, group/other mode
    /// bits). Code `unavailable`.
    #[error("spool directory is unsafe: {0}")]
    UnsafeDirectory(&'static str),
    /// The writer already failed, or was already published or aborted. Code `conflict`.
    #[error("artifact writer is closed")]
    WriterClosed,
    /// The published file no longer matches its record (size or type changed underneath the spool).
    /// Code `internal_error`.
    #[error("artifact file does not match its record")]
    Corrupted,
    /// A filesystem call failed. Only the [`io::ErrorKind`] is kept, never the path. Code `internal_error`.
    #[error("artifact storage failed ({0})")]
    Io(io::ErrorKind),
    /// The OS random source failed. Code `internal_error`.
    #[error("random source unavailable")]
    Random,
}

impl SpoolError {
    /// The stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            SpoolError::NotFound => "not_found",
            SpoolError::QuotaExceeded {
                scope: QuotaScope::Artifact | QuotaScope::Request,
                ..
            } => "result_too_large",
            SpoolError::QuotaExceeded { .. } => "rate_limited",
            SpoolError::InvalidRequest(_) => "invalid_request",
            SpoolError::UnsafeDirectory(_) => "unavailable",
            SpoolError::WriterClosed => "conflict",
            SpoolError::Corrupted | SpoolError::Io(_) | SpoolError::Random => "internal_error",
        }
    }

    /// Whether the same call may succeed later without a change on the caller's side: true for the quotas that
    /// free up as other artifacts expire (connection, owner, total).
    pub fn is_retriable(&self) -> bool {
        self.code() == "rate_limited"
    }
}

impl From<InvalidArtifactId> for SpoolError {
    fn from(_: InvalidArtifactId) -> Self {
        SpoolError::NotFound
    }
}

impl From<io::Error> for SpoolError {
    fn from(error: io::Error) -> Self {
        SpoolError::Io(error.kind())
    }
}

impl From<rustix::io::Errno> for SpoolError {
    fn from(errno: rustix::io::Errno) -> Self {
        SpoolError::Io(io::Error::from(errno).kind())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(error: SpoolError, code: &str, message: &str) {
        assert_eq!(error.code(), code, "{error:?}");
        assert_eq!(error.to_string(), message);
    }

    #[test]
    fn codes_and_messages_are_stable() {
        check(SpoolError::NotFound, "not_found", "artifact not found");
        check(
            SpoolError::QuotaExceeded {
                scope: QuotaScope::Artifact,
                kind: QuotaKind::Bytes,
            },
            "result_too_large",
            "artifact artifact bytes quota exceeded",
        );
        check(
            SpoolError::QuotaExceeded {
                scope: QuotaScope::Request,
                kind: QuotaKind::Count,
            },
            "result_too_large",
            "artifact request count quota exceeded",
        );
        for scope in [QuotaScope::Connection, QuotaScope::Owner, QuotaScope::Total] {
            let error = SpoolError::QuotaExceeded {
                scope,
                kind: QuotaKind::Bytes,
            };
            assert_eq!(error.code(), "rate_limited");
            assert!(error.is_retriable());
        }
        check(
            SpoolError::InvalidRequest("ttl above the maximum"),
            "invalid_request",
            "invalid artifact request: ttl above the maximum",
        );
        check(
            SpoolError::UnsafeDirectory("symlink"),
            "unavailable",
            "spool directory is unsafe: symlink",
        );
        check(
            SpoolError::WriterClosed,
            "conflict",
            "artifact writer is closed",
        );
        check(
            SpoolError::Corrupted,
            "internal_error",
            "artifact file does not match its record",
        );
        check(
            SpoolError::from(io::Error::from(io::ErrorKind::PermissionDenied)),
            "internal_error",
            "artifact storage failed (permission denied)",
        );
        check(
            SpoolError::Random,
            "internal_error",
            "random source unavailable",
        );
        check(
            SpoolError::from(InvalidArtifactId),
            "not_found",
            "artifact not found",
        );
        assert!(!SpoolError::NotFound.is_retriable());
    }
}
