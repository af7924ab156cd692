//! The sans-IO core of managed tasks: limits, request validation, statuses, the request fingerprint that backs
//! idempotency, and the wire DTO of a task.
//!
//! Source: issue 9 ("Managed tasks") and the AWP agent CLI protocol, section "The checked-in reference CLI…"
//! (`awp_run_managed_task`: a bounded argv, a 1–300 s wait, an idempotency key per session/turn/tool call).

use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::ids::TaskId;

/// Bounds of the task API. Every field is enforced; see each for its default and what happens past it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskLimits {
    /// Most argv items (the executable included). Default 32; one more is `argv_too_many_items` (400).
    pub max_argv_items: usize,
    /// Most bytes of all argv items together (UTF-8). Default 64 KiB (65 536); one more is `argv_too_large` (400).
    pub max_argv_bytes: usize,
    /// Timeout used when a request gives none, in seconds. Default 60.
    pub default_timeout_seconds: u64,
    /// Largest `timeout_seconds` accepted. Default 3600; the smallest is 1. Outside: `timeout_invalid` (400).
    pub max_timeout_seconds: u64,
    /// Bytes of stdout kept per task (the head) and of stderr (the tail). Default 64 KiB (65 536) each; past it
    /// the rest is read and dropped, and `stdout_truncated` / `stderr_truncated` is `true`.
    pub max_output_bytes: usize,
    /// Longest `Idempotency-Key` header, in bytes (visible ASCII only). Default 255; one more is
    /// `idempotency_key_invalid` (400).
    pub max_idempotency_key_bytes: usize,
    /// Most tasks `queued` or `running` at once. Default 1024; a submission past it is `task_queue_full` (503).
    pub max_pending_tasks: u64,
}

impl Default for TaskLimits {
    fn default() -> Self {
        Self {
            max_argv_items: 32,
            max_argv_bytes: 64 * 1024,
            default_timeout_seconds: 60,
            max_timeout_seconds: 3600,
            max_output_bytes: 64 * 1024,
            max_idempotency_key_bytes: 255,
            max_pending_tasks: 1024,
        }
    }
}

/// Why a task request was refused before anything was stored. Each has a stable code; all are HTTP 400.
#[non_exhaustive]
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum TaskRequestError {
    /// The body is not a JSON object.
    #[error("the body is not a json object")]
    InvalidJson,
    /// The object has a field other than `argv` and `timeout_seconds`.
    #[error("unknown field {0:?}")]
    UnknownField(String),
    /// `argv` is missing, not an array of strings, or its first item (the executable) is empty.
    #[error("argv must be a non-empty array of strings whose first item is not empty")]
    ArgvInvalid,
    /// An argv item contains a NUL byte.
    #[error("argv item {0} contains a nul byte")]
    ArgvContainsNul(usize),
    /// More argv items than [`TaskLimits::max_argv_items`].
    #[error("argv has {count} items; at most {max} are accepted")]
    ArgvTooManyItems {
        /// Items sent.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// More argv bytes than [`TaskLimits::max_argv_bytes`].
    #[error("argv has {bytes} bytes; at most {max} are accepted")]
    ArgvTooLarge {
        /// Bytes sent.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// `timeout_seconds` is not an integer from 1 to [`TaskLimits::max_timeout_seconds`].
    #[error("timeout_seconds must be an integer from 1 to {max}")]
    TimeoutInvalid {
        /// The limit.
        max: u64,
    },
    /// No `Idempotency-Key` header.
    #[error("the Idempotency-Key header is required")]
    IdempotencyKeyMissing,
    /// The key is empty, too long, or not visible ASCII.
    #[error("the Idempotency-Key header must be 1 to {max} visible ascii characters")]
    IdempotencyKeyInvalid {
        /// The limit in bytes.
        max: usize,
    },
}

impl TaskRequestError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            TaskRequestError::InvalidJson => "invalid_json",
            TaskRequestError::UnknownField(_) => "unknown_field",
            TaskRequestError::ArgvInvalid => "argv_invalid",
            TaskRequestError::ArgvContainsNul(_) => "argv_contains_nul",
            TaskRequestError::ArgvTooManyItems { .. } => "argv_too_many_items",
            TaskRequestError::ArgvTooLarge { .. } => "argv_too_large",
            TaskRequestError::TimeoutInvalid { .. } => "timeout_invalid",
            TaskRequestError::IdempotencyKeyMissing => "idempotency_key_missing",
            TaskRequestError::IdempotencyKeyInvalid { .. } => "idempotency_key_invalid",
        }
    }
}

/// A validated task request: `{"argv":["echo","hi"],"timeout_seconds":30}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRequest {
    /// The program (`argv[0]`, a name looked up in `PATH` or a path) and its arguments; never given to a shell.
    pub argv: Vec<String>,
    /// How long the task may run before its process group is stopped (`timed_out`), in seconds.
    pub timeout_seconds: u64,
}

impl TaskRequest {
    /// Parses and validates a `POST /v1/tasks` body.
    ///
    /// # Errors
    /// A [`TaskRequestError`] naming the first rule broken.
    pub fn parse(body: &[u8], limits: &TaskLimits) -> Result<Self, TaskRequestError> {
        let Ok(Value::Object(object)) = serde_json::from_slice::<Value>(body) else {
            return Err(TaskRequestError::InvalidJson);
        };
        if let Some(field) = object
            .keys()
            .find(|k| *k != "argv" && *k != "timeout_seconds")
        {
            let shown: String = field.chars().take(64).collect();
            return Err(TaskRequestError::UnknownField(shown));
        }
        let Some(Value::Array(items)) = object.get("argv") else {
            return Err(TaskRequestError::ArgvInvalid);
        };
        if items.len() > limits.max_argv_items {
            return Err(TaskRequestError::ArgvTooManyItems {
                count: items.len(),
                max: limits.max_argv_items,
            });
        }
        let mut argv = Vec::with_capacity(items.len());
        let mut bytes = 0usize;
        for (index, item) in items.iter().enumerate() {
            let Value::String(item) = item else {
                return Err(TaskRequestError::ArgvInvalid);
            };
            if item.contains('\0') {
                return Err(TaskRequestError::ArgvContainsNul(index));
            }
            bytes = bytes.saturating_add(item.len());
            argv.push(item.clone());
        }
        if argv.first().is_none_or(String::is_empty) {
            return Err(TaskRequestError::ArgvInvalid);
        }
        if bytes > limits.max_argv_bytes {
            return Err(TaskRequestError::ArgvTooLarge {
                bytes,
                max: limits.max_argv_bytes,
            });
        }
        let invalid_timeout = TaskRequestError::TimeoutInvalid {
            max: limits.max_timeout_seconds,
        };
        let timeout_seconds = match object.get("timeout_seconds") {
            None | Some(Value::Null) => limits.default_timeout_seconds,
            Some(Value::Number(n)) => n.as_u64().ok_or(invalid_timeout.clone())?,
            Some(_) => return Err(invalid_timeout),
        };
        if !(1..=limits.max_timeout_seconds).contains(&timeout_seconds) {
            return Err(invalid_timeout);
        }
        Ok(Self {
            argv,
            timeout_seconds,
        })
    }

    /// SHA-256 (lowercase hex) of the canonical request `{"argv":[…],"timeout_seconds":n}` with the effective
    /// timeout: two requests with the same fingerprint are the same request for idempotency.
    pub fn fingerprint(&self) -> String {
        let canonical = json!({"argv": self.argv, "timeout_seconds": self.timeout_seconds});
        hex(&Sha256::digest(canonical.to_string().as_bytes()))
    }

    /// The timeout as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_seconds)
    }
}

/// Checks an `Idempotency-Key` header value: 1 to [`TaskLimits::max_idempotency_key_bytes`] bytes of visible
/// ASCII (`!` to `~`).
///
/// # Errors
/// [`TaskRequestError::IdempotencyKeyMissing`] for `None`, [`TaskRequestError::IdempotencyKeyInvalid`] otherwise.
pub fn validate_idempotency_key<'a>(
    key: Option<&'a [u8]>,
    limits: &TaskLimits,
) -> Result<&'a str, TaskRequestError> {
    let key = key.ok_or(TaskRequestError::IdempotencyKeyMissing)?;
    let invalid = TaskRequestError::IdempotencyKeyInvalid {
        max: limits.max_idempotency_key_bytes,
    };
    if key.is_empty()
        || key.len() > limits.max_idempotency_key_bytes
        || !key.iter().all(|b| (0x21..=0x7e).contains(b))
    {
        return Err(invalid);
    }
    std::str::from_utf8(key).map_err(|_| invalid)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Lifecycle of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    /// Accepted and durable; waiting for a worker.
    Queued,
    /// A worker has started it (or is about to).
    Running,
    /// The program exited with code 0.
    Succeeded,
    /// The program exited non-zero or by a signal, or the worker refused it (`executable_not_allowed`,
    /// `executable_not_found`, `spawn_failed`; see `error`).
    Failed,
    /// It ran past its `timeout_seconds`; its process group was stopped (SIGTERM, then SIGKILL).
    TimedOut,
    /// It was `running` when its host stopped; the outcome is unknown and it is never run again.
    Lost,
}

impl TaskStatus {
    /// The stored and wire name: `queued | running | succeeded | failed | timed_out | lost`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Running => "running",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Failed => "failed",
            TaskStatus::TimedOut => "timed_out",
            TaskStatus::Lost => "lost",
        }
    }

    /// Parses a name from [`TaskStatus::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => TaskStatus::Queued,
            "running" => TaskStatus::Running,
            "succeeded" => TaskStatus::Succeeded,
            "failed" => TaskStatus::Failed,
            "timed_out" => TaskStatus::TimedOut,
            "lost" => TaskStatus::Lost,
            _ => return None,
        })
    }

    /// Whether the task has ended (it will not change again).
    pub fn is_terminal(self) -> bool {
        !matches!(self, TaskStatus::Queued | TaskStatus::Running)
    }
}

/// A stored task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRecord {
    /// Id.
    pub id: TaskId,
    /// Status.
    pub status: TaskStatus,
    /// The argv as submitted.
    pub argv: Vec<String>,
    /// The timeout, in seconds.
    pub timeout_seconds: u64,
    /// The exit code, when the program exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended the program, if one did.
    pub signal: Option<i32>,
    /// The first [`TaskLimits::max_output_bytes`] of stdout.
    pub stdout: Vec<u8>,
    /// The last [`TaskLimits::max_output_bytes`] of stderr.
    pub stderr: Vec<u8>,
    /// Whether stdout was longer than what is kept.
    pub stdout_truncated: bool,
    /// Whether stderr was longer than what is kept.
    pub stderr_truncated: bool,
    /// Stable failure code (`executable_not_allowed`, `timed_out`, `host_interrupted`, …).
    pub error_code: Option<String>,
    /// Acceptance time, milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// Start time, milliseconds since the Unix epoch.
    pub started_at_ms: Option<i64>,
    /// End time, milliseconds since the Unix epoch.
    pub finished_at_ms: Option<i64>,
}

fn rfc3339(ms: i64) -> String {
    let ms = u64::try_from(ms).unwrap_or(0);
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

impl TaskRecord {
    /// The wire DTO served by `GET /v1/tasks/{id}` and `POST /v1/tasks`:
    ///
    /// ```text
    /// {"id":"task_…","status":"succeeded","argv":["echo","hi"],"timeout_seconds":60,"exit_code":0,"signal":null,
    ///  "stdout":"hi\n","stderr":"","stdout_truncated":false,"stderr_truncated":false,"error":null,
    ///  "created_at":"2026-12-01T10:00:00.000Z","started_at":"…","finished_at":"…"}
    /// ```
    ///
    /// `stdout`/`stderr` are the kept bytes decoded as UTF-8 with invalid sequences replaced by U+FFFD (a cut can
    /// split a character). Times are RFC 3339 UTC with milliseconds, `null` until they happen.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id.as_str(),
            "status": self.status.as_str(),
            "argv": self.argv,
            "timeout_seconds": self.timeout_seconds,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "stdout": String::from_utf8_lossy(&self.stdout),
            "stderr": String::from_utf8_lossy(&self.stderr),
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
            "error": self.error_code,
            "created_at": rfc3339(self.created_at_ms),
            "started_at": self.started_at_ms.map(rfc3339),
            "finished_at": self.finished_at_ms.map(rfc3339),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(body: &str, expect: Result<(Vec<&str>, u64), &str>) {
        let got = TaskRequest::parse(body.as_bytes(), &TaskLimits::default()).map_err(|e| e.code());
        let expect = expect.map(|(argv, timeout_seconds)| TaskRequest {
            argv: argv.into_iter().map(str::to_owned).collect(),
            timeout_seconds,
        });
        assert_eq!(got, expect, "{body}");
    }

    #[test]
    fn requests_are_validated() {
        check(r#"{"argv":["echo","hi"]}"#, Ok((vec!["echo", "hi"], 60)));
        check(
            r#"{"argv":["echo",""],"timeout_seconds":1}"#,
            Ok((vec!["echo", ""], 1)),
        );
        check(
            r#"{"argv":["x"],"timeout_seconds":3600}"#,
            Ok((vec!["x"], 3600)),
        );
        check(
            r#"{"argv":["x"],"timeout_seconds":3601}"#,
            Err("timeout_invalid"),
        );
        check(
            r#"{"argv":["x"],"timeout_seconds":0}"#,
            Err("timeout_invalid"),
        );
        check(
            r#"{"argv":["x"],"timeout_seconds":1.5}"#,
            Err("timeout_invalid"),
        );
        check(
            r#"{"argv":["x"],"timeout_seconds":"9"}"#,
            Err("timeout_invalid"),
        );
        check(r#"{"argv":[]}"#, Err("argv_invalid"));
        check(r#"{"argv":[""]}"#, Err("argv_invalid"));
        check(r#"{"argv":"echo hi"}"#, Err("argv_invalid"));
        check(r#"{"argv":["echo",1]}"#, Err("argv_invalid"));
        check(r#"{}"#, Err("argv_invalid"));
        check(r#"{"argv":["a\u0000b"]}"#, Err("argv_contains_nul"));
        check(r#"{"argv":["x"],"shell":true}"#, Err("unknown_field"));
        check(r#"["echo"]"#, Err("invalid_json"));
        check("not json", Err("invalid_json"));
    }

    #[test]
    fn argv_bounds_hold_at_the_limit_and_one_past_it() {
        let limits = TaskLimits::default();
        let items = |n: usize| -> String {
            let argv: Vec<String> = (0..n).map(|i| format!("a{i}")).collect();
            json!({ "argv": argv }).to_string()
        };
        let parse = |body: &str| TaskRequest::parse(body.as_bytes(), &limits).map_err(|e| e.code());
        assert!(parse(&items(32)).is_ok());
        assert_eq!(parse(&items(33)), Err("argv_too_many_items"));
        let sized = |n: usize| json!({"argv": ["x".repeat(n)]}).to_string();
        assert!(parse(&sized(64 * 1024)).is_ok());
        assert_eq!(parse(&sized(64 * 1024 + 1)), Err("argv_too_large"));
    }

    #[test]
    fn idempotency_keys_are_bounded_visible_ascii() {
        let limits = TaskLimits::default();
        let check = |key: Option<&[u8]>, expect: Result<(), &str>| {
            assert_eq!(
                validate_idempotency_key(key, &limits)
                    .map(|_| ())
                    .map_err(|e| e.code()),
                expect,
                "{key:?}"
            );
        };
        check(Some(b"k-1"), Ok(()));
        check(Some("k".repeat(255).as_bytes()), Ok(()));
        check(
            Some("k".repeat(256).as_bytes()),
            Err("idempotency_key_invalid"),
        );
        check(Some(b""), Err("idempotency_key_invalid"));
        check(Some(b"a b"), Err("idempotency_key_invalid"));
        check(Some("é".as_bytes()), Err("idempotency_key_invalid"));
        check(None, Err("idempotency_key_missing"));
    }

    #[test]
    fn the_fingerprint_uses_the_effective_timeout() {
        let limits = TaskLimits::default();
        let a = TaskRequest::parse(br#"{"argv":["x"]}"#, &limits).unwrap();
        let b = TaskRequest::parse(br#"{"timeout_seconds":60,"argv":["x"]}"#, &limits).unwrap();
        let c = TaskRequest::parse(br#"{"argv":["x"],"timeout_seconds":61}"#, &limits).unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
        assert_eq!(a.fingerprint().len(), 64);
    }

    #[test]
    fn statuses_round_trip() {
        for status in [
            TaskStatus::Queued,
            TaskStatus::Running,
            TaskStatus::Succeeded,
            TaskStatus::Failed,
            TaskStatus::TimedOut,
            TaskStatus::Lost,
        ] {
            assert_eq!(TaskStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(TaskStatus::parse("cancelled"), None);
    }
}
