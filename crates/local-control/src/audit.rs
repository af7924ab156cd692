//! The policy audit log: one JSONL record per decision, in size-capped segments, two kept.
//!
//! An [`AuditRecord`] carries the time, caller kind, connection/conversation, method, effect, outcome, request
//! id and a SHA-256 of the canonical *redacted* arguments (the method's [`AuditProjection`]) — never the
//! arguments, tokens, secrets, prompts or bytes. [`AuditLog`] appends records to `audit.jsonl` in its
//! directory; when a record would take the file past [`AuditLimits::segment_bytes`] (default 10 MiB) the file
//! becomes `audit.1.jsonl` (replacing the previous one) and a new `audit.jsonl` starts, so at most two
//! segments exist. Files are 0600 in a 0700 directory. This module does blocking file IO; an async caller
//! runs [`AuditLog::append`] on a blocking thread.
//!
//! Source: DeepChat spec, section "Effect Policy" ("Every policy decision is audited with …") and
//! `src/main/cli/policy.ts` (`CliPolicyAuditRecord`, `hashApprovalArguments` over the audit projection);
//! canonicalization limits from DeepChat's approval canonicalization (depth 64, 10 000 keys, 1 MiB).
//!
//! [`AuditProjection`]: crate::surface::AuditProjection

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::caller::Caller;
use crate::policy;
use crate::surface::{Effect, MethodSpec};

/// The current segment's file name.
pub const CURRENT_SEGMENT: &str = "audit.jsonl";
/// The previous segment's file name.
pub const PREVIOUS_SEGMENT: &str = "audit.1.jsonl";

/// Canonical JSON is `agentwire_approval`'s, DeepChat's approval canonicalization (keys in JavaScript's UTF-16
/// order, `JSON.stringify` strings and numbers, depth 64, 10 000 keys, 1 MiB): the audit hash and the approval
/// binding hash the same bytes.
pub use agentwire_approval::{CanonicalError, CanonicalLimits, canonical_json};

/// Lowercase hex SHA-256 of the canonical `{"arguments": projected, "operation": method}`.
///
/// # Errors
/// As [`canonical_json`].
pub fn arguments_hash(method: &str, projected: &Value) -> Result<String, CanonicalError> {
    let bound = serde_json::json!({ "operation": method, "arguments": projected });
    agentwire_approval::ArgsHash::of(&bound, &CanonicalLimits::default())
        .map(|hash| hash.to_string())
}

/// The outcome of a policy decision, on the wire kebab-case (DeepChat `CliPolicyAuditOutcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Allowed without approval.
    Allowed,
    /// Refused by the host before any approval was asked for: by surface or policy, or because the request could
    /// not succeed (invalid params, a name taken, an unknown provider, …). Never a person's decision: that is
    /// [`Outcome::ApprovalDenied`] (DeepChat's `CliPolicyAuditOutcome` has no other value for such refusals).
    Denied,
    /// Allowed after renderer approval.
    Approved,
    /// The renderer denied it.
    ApprovalDenied,
    /// The approval timed out.
    ApprovalTimeout,
    /// The request was cancelled while waiting.
    Cancelled,
    /// No renderer could present the approval, or the service was unavailable.
    Unavailable,
    /// Refused by compute admission or token quota.
    RateLimited,
    /// The surface entry is misconfigured.
    Misconfigured,
}

/// One audit line, DeepChat's `CliPolicyAuditRecord` shape:
///
/// `{"timestamp":1764583200000,"principal":"agent","connectionId":"c1","conversationId":"t1","operation":"runs.get",
/// "effect":"read","outcome":"allowed","requestId":"r1","redactedArgumentsHash":"9f…"}`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AuditRecord {
    /// Milliseconds since the Unix epoch.
    pub timestamp: u64,
    /// Caller kind: `human`, `agent` or `internal`.
    pub principal: String,
    /// The transport connection, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_id: Option<String>,
    /// An Agent caller's conversation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// The method.
    pub operation: String,
    /// The resolved effect.
    pub effect: Effect,
    /// What happened.
    pub outcome: Outcome,
    /// The client's request id.
    pub request_id: String,
    /// The approval's id, when one was created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_request_id: Option<String>,
    /// Hex SHA-256 of the canonical redacted arguments ([`arguments_hash`]).
    pub redacted_arguments_hash: String,
}

impl AuditRecord {
    /// A record for `caller` calling `spec` with `params` (only the spec's audit projection is hashed).
    ///
    /// # Errors
    /// [`CanonicalError`] when the projection exceeds the canonical limits.
    pub fn new(
        caller: &Caller,
        spec: &MethodSpec,
        params: &Value,
        outcome: Outcome,
        request_id: &str,
        at: SystemTime,
    ) -> Result<AuditRecord, CanonicalError> {
        let hash = arguments_hash(spec.method, &spec.audit.project(params))?;
        Ok(AuditRecord {
            timestamp: at
                .duration_since(UNIX_EPOCH)
                .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0),
            principal: caller.kind().to_owned(),
            connection_id: caller.connection_id().map(str::to_owned),
            conversation_id: caller.conversation_id().map(str::to_owned),
            operation: spec.method.to_owned(),
            effect: policy::resolve_effect(spec, params),
            outcome,
            request_id: request_id.to_owned(),
            approval_request_id: None,
            redacted_arguments_hash: hash,
        })
    }

    /// Sets the approval id.
    pub fn approval_request_id(mut self, id: impl Into<String>) -> Self {
        self.approval_request_id = Some(id.into());
        self
    }
}

/// Bounds of the audit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditLimits {
    /// Largest segment in bytes. Default 10 MiB; the record that would pass it starts a new segment (a single
    /// record larger than this is still written, alone, in its own segment).
    pub segment_bytes: u64,
}

impl Default for AuditLimits {
    fn default() -> Self {
        AuditLimits {
            segment_bytes: 10 * 1024 * 1024,
        }
    }
}

/// Why the audit log could not be written.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// Creating, writing or rotating a file failed.
    #[error("cannot write audit log: {0}")]
    Io(#[from] std::io::Error),
    /// The record could not be serialized.
    #[error("cannot serialize audit record: {0}")]
    Serialize(#[from] serde_json::Error),
}

impl AuditError {
    /// A stable snake_case code: `io` or `serialize_failed`.
    pub fn code(&self) -> &'static str {
        match self {
            AuditError::Io(_) => "io",
            AuditError::Serialize(_) => "serialize_failed",
        }
    }
}

/// The JSONL audit writer over `<dir>/audit.jsonl` and `<dir>/audit.1.jsonl`.
#[derive(Debug)]
pub struct AuditLog {
    dir: PathBuf,
    file: File,
    size: u64,
    limits: AuditLimits,
}

impl AuditLog {
    /// Opens (creating with mode 0700 if missing) `dir` and appends to its current segment (mode 0600).
    ///
    /// # Errors
    /// [`AuditError::Io`].
    pub fn open(dir: &Path, limits: AuditLimits) -> Result<AuditLog, AuditError> {
        create_private_dir(dir)?;
        let file = open_segment(&dir.join(CURRENT_SEGMENT))?;
        let size = file.metadata()?.len();
        Ok(AuditLog {
            dir: dir.to_owned(),
            file,
            size,
            limits,
        })
    }

    /// Appends one record as a JSON line, rotating first if it would pass the segment size.
    ///
    /// # Errors
    /// [`AuditError::Io`] or [`AuditError::Serialize`]; nothing is written then.
    pub fn append(&mut self, record: &AuditRecord) -> Result<(), AuditError> {
        let mut line = serde_json::to_vec(record)?;
        line.push(b'\n');
        let length = line.len() as u64;
        if self.size > 0 && self.size.saturating_add(length) > self.limits.segment_bytes {
            self.rotate()?;
        }
        self.file.write_all(&line)?;
        self.size += length;
        Ok(())
    }

    /// Bytes in the current segment.
    pub fn current_size(&self) -> u64 {
        self.size
    }

    fn rotate(&mut self) -> Result<(), AuditError> {
        self.file.sync_data()?;
        fs::rename(
            self.dir.join(CURRENT_SEGMENT),
            self.dir.join(PREVIOUS_SEGMENT),
        )?;
        self.file = open_segment(&self.dir.join(CURRENT_SEGMENT))?;
        self.size = 0;
        Ok(())
    }
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder.create(dir)
}

fn open_segment(path: &Path) -> std::io::Result<File> {
    // Only a regular file is appended to: a planted symlink or other node at the segment path is refused.
    // The directory is private (0700), so nobody else can swap the node between this check and the open.
    match fs::symlink_metadata(path) {
        Ok(metadata) if !metadata.file_type().is_file() => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "audit segment is not a regular file",
            ));
        }
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    options.open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::surface::Surface;
    use serde_json::json;
    use sha2::{Digest, Sha256};

    #[test]
    fn canonical_form_sorts_keys_and_is_order_independent() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"d":[1,"x"],"c":null}}"#).expect("a");
        let b: Value = serde_json::from_str(r#"{"a":{"c":null,"d":[1,"x"]},"b":1}"#).expect("b");
        let canonical = canonical_json(&a, &CanonicalLimits::default()).expect("canonical");
        assert_eq!(canonical, br#"{"a":{"c":null,"d":[1,"x"]},"b":1}"#);
        assert_eq!(
            arguments_hash("runs.get", &a).expect("hash"),
            arguments_hash("runs.get", &b).expect("hash")
        );
        assert_ne!(
            arguments_hash("runs.get", &a).expect("hash"),
            arguments_hash("runs.cancel", &a).expect("hash")
        );
        assert_eq!(arguments_hash("runs.get", &a).expect("hash").len(), 64);
    }

    #[test]
    fn the_hash_uses_javascripts_key_order() {
        // U+10000 is a surrogate pair (0xD800 …) in UTF-16, so JavaScript sorts it before U+E000; UTF-8 byte
        // order (0xF0 … vs 0xEE …) would put it after.
        let projected = json!({"\u{e000}": 1, "\u{10000}": 2});
        let expected = "{\"arguments\":{\"\u{10000}\":2,\"\u{e000}\":1},\"operation\":\"m.x\"}";
        let digest = Sha256::digest(expected.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(arguments_hash("m.x", &projected).expect("hash"), hex);
        // Past the limits the projection has no hash (the record is not built).
        let deep = (0..70).fold(json!(1), |inner, _| json!([inner]));
        assert!(arguments_hash("m.x", &deep).is_err());
    }

    fn record(request_id: &str, params: &Value) -> AuditRecord {
        let surface = Surface::standard();
        let spec = surface.get("sessions.runDetached").expect("spec");
        AuditRecord::new(
            &Caller::human("conn-1"),
            spec,
            params,
            Outcome::Allowed,
            request_id,
            SystemTime::now(),
        )
        .expect("record")
    }

    #[test]
    fn segments_rotate_at_the_cap_and_two_are_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let params = json!({"prompt": "hello"});
        let line_len = serde_json::to_vec(&record("r-0000", &params))
            .expect("json")
            .len() as u64
            + 1;
        // Exactly two lines fit.
        let mut log = AuditLog::open(
            dir.path(),
            AuditLimits {
                segment_bytes: 2 * line_len,
            },
        )
        .expect("open");
        log.append(&record("r-0001", &params)).expect("1");
        log.append(&record("r-0002", &params)).expect("2");
        assert_eq!(log.current_size(), 2 * line_len);
        assert!(!dir.path().join(PREVIOUS_SEGMENT).exists());
        log.append(&record("r-0003", &params)).expect("3 rotates");
        assert_eq!(log.current_size(), line_len);
        for n in 4..=9 {
            log.append(&record(&format!("r-{n:04}"), &params))
                .expect("more");
        }
        let mut names: Vec<String> = fs::read_dir(dir.path())
            .expect("read_dir")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![PREVIOUS_SEGMENT.to_owned(), CURRENT_SEGMENT.to_owned()]
        );
        let current = fs::read_to_string(dir.path().join(CURRENT_SEGMENT)).expect("current");
        let previous = fs::read_to_string(dir.path().join(PREVIOUS_SEGMENT)).expect("previous");
        assert!(current.contains("r-0009") && previous.contains("r-0007"));
        for text in [&current, &previous] {
            assert!(text.len() as u64 <= 2 * line_len);
            for line in text.lines() {
                let parsed: AuditRecord = serde_json::from_str(line).expect("valid record");
                assert_eq!(parsed.operation, "sessions.runDetached");
            }
        }
        // One byte less than two lines: every record starts a new segment.
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = AuditLog::open(
            dir.path(),
            AuditLimits {
                segment_bytes: 2 * line_len - 1,
            },
        )
        .expect("open");
        log.append(&record("r-0001", &params)).expect("1");
        log.append(&record("r-0002", &params)).expect("2 rotates");
        assert_eq!(log.current_size(), line_len);
        assert!(dir.path().join(PREVIOUS_SEGMENT).exists());
    }

    #[cfg(unix)]
    #[test]
    fn files_are_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let parent = tempfile::tempdir().expect("tempdir");
        let dir = parent.path().join("audit");
        let mut log = AuditLog::open(&dir, AuditLimits::default()).expect("open");
        log.append(&record("r-1", &json!({}))).expect("append");
        let mode = |path: &Path| fs::metadata(path).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join(CURRENT_SEGMENT)), 0o600);
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_symlink_is_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("elsewhere");
        fs::write(&target, b"").expect("target");
        std::os::unix::fs::symlink(&target, dir.path().join(CURRENT_SEGMENT)).expect("symlink");
        assert!(AuditLog::open(dir.path(), AuditLimits::default()).is_err());
    }
}
