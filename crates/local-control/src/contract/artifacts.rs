//! `artifacts.describe`, `artifacts.read`, `artifacts.delete`: metadata and removal of owned artifacts.
//!
//! Source: DeepChat `src/shared/contracts/routes/artifacts.routes.ts`. All inputs and outputs are strict.
//! The bytes themselves travel over `GET /v1/artifacts/:id`, never in these results; metadata never holds a path.

use serde::{Deserialize, Serialize};

use super::{
    ContractError, MAX_SAFE_INTEGER, Method, Problem, Validate, check_chars, check_len,
    is_base64url,
};

/// Latest timestamp a JavaScript `Date` holds, ms (`MAX_DATE_TIMESTAMP_MS`).
pub const MAX_DATE_TIMESTAMP_MS: u64 = 8_640_000_000_000_000;

/// `ArtifactIdSchema`: 16..=128 characters of `[A-Za-z0-9_-]`.
///
/// # Errors
/// [`Problem::TooShort`]/[`Problem::TooLong`]/[`Problem::BadFormat`] on field `field`.
pub fn check_artifact_id(field: &'static str, id: &str) -> Result<(), ContractError> {
    check_len(field, id, 16, 128)?;
    check_chars(field, id, is_base64url)
}

/// Params of the three artifact methods: `{"id":"AbCdEfGhIjKlMnOpQrStUvWx"}` (strict).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactIdParams {
    /// The artifact id (see [`check_artifact_id`]).
    pub id: String,
}

impl Validate for ArtifactIdParams {
    fn validate(&self) -> Result<(), ContractError> {
        check_artifact_id("id", &self.id)
    }
}

/// Who owns an artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArtifactOwner {
    /// A human CLI connection.
    Human,
    /// An agent connection.
    Agent,
}

/// `ArtifactMetadataSchema` (strict, `expiresAt > createdAt`).
///
/// `{"id":"AbCdEfGhIjKlMnOpQrStUvWx","requestId":"req-1","owner":"human","mimeType":"text/plain","size":5,"sha256":"<64 hex>","filename":"a.txt","createdAt":1,"expiresAt":2}`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArtifactMetadata {
    /// Artifact id.
    pub id: String,
    /// Request that produced it, 1..=128 of `[A-Za-z0-9._:-]`.
    pub request_id: String,
    /// Owner.
    pub owner: ArtifactOwner,
    /// MIME type `type/subtype[; k=v]*`, 3..=255 characters.
    pub mime_type: String,
    /// Bytes, ≤ 2^53 − 1.
    pub size: u64,
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
    /// Suggested file name, 1..=255 characters (a name, never a path the server reads).
    pub filename: String,
    /// Creation, Unix ms.
    pub created_at: u64,
    /// Expiry, Unix ms, after `created_at`.
    pub expires_at: u64,
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$&^_.+-".contains(c)
}

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.chars().all(is_token_char)
}

/// DeepChat's MIME pattern: `token/token` followed by any number of `;\s*token=token`.
pub fn is_mime_type(value: &str) -> bool {
    let mut parts = value.split(';');
    let Some(essence) = parts.next() else {
        return false;
    };
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    if !is_token(kind) || !is_token(subtype) {
        return false;
    }
    parts.all(|param| {
        let param = param.trim_start_matches([' ', '\t', '\n', '\r', '\u{b}', '\u{c}']);
        param
            .split_once('=')
            .is_some_and(|(k, v)| is_token(k) && is_token(v))
    })
}

impl Validate for ArtifactMetadata {
    fn validate(&self) -> Result<(), ContractError> {
        check_artifact_id("artifact.id", &self.id)?;
        if !crate::envelope::is_valid_request_id(&self.request_id) {
            return Err(ContractError::field(
                "artifact.requestId",
                Problem::BadFormat,
            ));
        }
        check_len("artifact.mimeType", &self.mime_type, 3, 255)?;
        if !is_mime_type(&self.mime_type) {
            return Err(ContractError::field(
                "artifact.mimeType",
                Problem::BadFormat,
            ));
        }
        if self.size > MAX_SAFE_INTEGER {
            return Err(ContractError::field("artifact.size", Problem::OutOfRange));
        }
        if self.sha256.len() != 64
            || !self
                .sha256
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        {
            return Err(ContractError::field("artifact.sha256", Problem::BadFormat));
        }
        check_len("artifact.filename", &self.filename, 1, 255)?;
        if self.created_at > MAX_DATE_TIMESTAMP_MS {
            return Err(ContractError::field(
                "artifact.createdAt",
                Problem::OutOfRange,
            ));
        }
        if self.expires_at > MAX_DATE_TIMESTAMP_MS {
            return Err(ContractError::field(
                "artifact.expiresAt",
                Problem::OutOfRange,
            ));
        }
        if self.expires_at <= self.created_at {
            return Err(ContractError::field(
                "artifact.expiresAt",
                Problem::Inconsistent,
            ));
        }
        Ok(())
    }
}

/// Result of `artifacts.describe` and `artifacts.read`: `{"artifact":{…}}` (strict).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactResult {
    /// The metadata.
    pub artifact: ArtifactMetadata,
}

impl Validate for ArtifactResult {
    fn validate(&self) -> Result<(), ContractError> {
        self.artifact.validate()
    }
}

/// Result of `artifacts.delete`: `{"deleted":true}` (strict; `deleted` is the literal `true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteResult {
    /// Always `true`.
    pub deleted: bool,
}

impl DeleteResult {
    /// `{"deleted":true}`.
    pub const DELETED: DeleteResult = DeleteResult { deleted: true };
}

impl Validate for DeleteResult {
    fn validate(&self) -> Result<(), ContractError> {
        if self.deleted {
            Ok(())
        } else {
            Err(ContractError::field("deleted", Problem::OutOfRange))
        }
    }
}

/// `artifacts.describe`: [`ArtifactIdParams`] → [`ArtifactResult`].
#[derive(Debug, Clone, Copy)]
pub struct Describe;
impl Method for Describe {
    const NAME: &'static str = "artifacts.describe";
    type Params = ArtifactIdParams;
    type Result = ArtifactResult;
}

/// `artifacts.read`: [`ArtifactIdParams`] → [`ArtifactResult`] (the authorization step before the download).
#[derive(Debug, Clone, Copy)]
pub struct Read;
impl Method for Read {
    const NAME: &'static str = "artifacts.read";
    type Params = ArtifactIdParams;
    type Result = ArtifactResult;
}

/// `artifacts.delete`: [`ArtifactIdParams`] → [`DeleteResult`].
#[derive(Debug, Clone, Copy)]
pub struct Delete;
impl Method for Delete {
    const NAME: &'static str = "artifacts.delete";
    type Params = ArtifactIdParams;
    type Result = DeleteResult;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_id_limits() {
        assert!(check_artifact_id("id", &"a".repeat(16)).is_ok());
        assert_eq!(
            check_artifact_id("id", &"a".repeat(15)).unwrap_err().code(),
            "too_short"
        );
        assert!(check_artifact_id("id", &"a".repeat(128)).is_ok());
        assert_eq!(
            check_artifact_id("id", &"a".repeat(129))
                .unwrap_err()
                .code(),
            "too_long"
        );
        for bad in [
            "..%2F..%2F..%2Fetc",
            "aaaaaaaaaaaaaaa/",
            "aaaaaaaaaaaaaaa\0",
            "aaaaaaaaaaaaaaa=",
        ] {
            assert_eq!(
                check_artifact_id("id", bad).unwrap_err().code(),
                "bad_format",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn mime_pattern() {
        for ok in [
            "text/plain",
            "image/png",
            "text/plain; charset=utf-8",
            "a/b;c=d",
        ] {
            assert!(is_mime_type(ok), "{ok}");
        }
        for bad in [
            "text",
            "text/",
            "/plain",
            "text/plain;",
            "text/plain; charset",
            "te xt/plain",
        ] {
            assert!(!is_mime_type(bad), "{bad}");
        }
    }
}
