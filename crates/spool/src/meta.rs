//! The public artifact metadata (the wire DTO) and the checks on what a creator may say about an artifact.

use serde::{Deserialize, Serialize};

use crate::error::SpoolError;

/// Longest MIME type accepted, bytes.
pub const MAX_MIME_TYPE_BYTES: usize = 255;
/// Longest suggested file name accepted, bytes.
pub const MAX_FILENAME_BYTES: usize = 255;
/// Longest owner, connection id or request id accepted, bytes.
pub const MAX_KEY_BYTES: usize = 256;

/// What callers learn about an artifact: never a path.
///
/// JSON (camelCase, timestamps in Unix milliseconds, `sha256` lowercase hex):
/// `{"id":"q1Xv…","requestId":"req-1","owner":"human","mimeType":"image/png","size":1234,"sha256":"9f86…",
/// "filename":"generated-image-1.png","createdAt":1764583200000,"expiresAt":1764586800000}`.
///
/// Source: the field list of DeepChat's spool in `protocols/local-control.md` and the spec's ArtifactSpool section;
/// the types follow DeepChat's CLI, which formats `artifact.expiresAt` with `new Date(…)` (milliseconds) and
/// prints `artifact.size` as a byte count. `owner` is the spool's opaque owner key (for a human CLI caller the
/// local user, for an agent its conversation), chosen by the embedder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct ArtifactMetadata {
    /// The artifact id (32 base64url characters).
    pub id: String,
    /// The request that produced the artifact.
    pub request_id: String,
    /// The owner key.
    pub owner: String,
    /// The media type, e.g. `image/png`.
    pub mime_type: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the bytes, 64 lowercase hex digits.
    pub sha256: String,
    /// Suggested file name for a download; never a path on the host.
    pub filename: String,
    /// Publication time, Unix milliseconds.
    pub created_at: u64,
    /// Expiry time, Unix milliseconds.
    pub expires_at: u64,
}

/// Checks an owner, connection id or request id: 1 to [`MAX_KEY_BYTES`] bytes, no control characters.
pub(crate) fn check_key(value: &str, what: &'static str) -> Result<(), SpoolError> {
    if value.is_empty() || value.len() > MAX_KEY_BYTES || value.chars().any(char::is_control) {
        return Err(SpoolError::InvalidRequest(what));
    }
    Ok(())
}

/// Checks a MIME type: `type/subtype`, each a token of `A-Z a-z 0-9 ! # $ & ^ _ . + -` starting with an
/// alphanumeric, at most [`MAX_MIME_TYPE_BYTES`] bytes, no parameters.
pub(crate) fn check_mime_type(value: &str) -> Result<(), SpoolError> {
    const ERROR: SpoolError = SpoolError::InvalidRequest("mime type is not type/subtype");
    if value.len() > MAX_MIME_TYPE_BYTES {
        return Err(ERROR);
    }
    let Some((kind, subtype)) = value.split_once('/') else {
        return Err(ERROR);
    };
    let token = |part: &str| {
        part.as_bytes()
            .first()
            .is_some_and(u8::is_ascii_alphanumeric)
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    if token(kind) && token(subtype) {
        Ok(())
    } else {
        Err(ERROR)
    }
}

/// Checks a suggested file name: 1 to [`MAX_FILENAME_BYTES`] bytes, no `/`, `\`, control characters, not `.` or `..`.
pub(crate) fn check_filename(value: &str) -> Result<(), SpoolError> {
    if value.is_empty()
        || value.len() > MAX_FILENAME_BYTES
        || value == "."
        || value == ".."
        || value
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control())
    {
        return Err(SpoolError::InvalidRequest(
            "filename is not a plain file name",
        ));
    }
    Ok(())
}

/// Lowercase hex of a digest.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_serializes_to_deepchat_field_names() {
        let metadata = ArtifactMetadata {
            id: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcd-_".into(),
            request_id: "req-1".into(),
            owner: "human".into(),
            mime_type: "image/png".into(),
            size: 3,
            sha256: hex(&[0xab; 32]),
            filename: "generated-image-1.png".into(),
            created_at: 1_764_583_200_000,
            expires_at: 1_764_586_800_000,
        };
        let json = serde_json::to_value(&metadata).unwrap();
        let expected = serde_json::json!({
            "id": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcd-_",
            "requestId": "req-1",
            "owner": "human",
            "mimeType": "image/png",
            "size": 3,
            "sha256": "ab".repeat(32),
            "filename": "generated-image-1.png",
            "createdAt": 1_764_583_200_000_u64,
            "expiresAt": 1_764_586_800_000_u64,
        });
        assert_eq!(json, expected);
        let back: ArtifactMetadata = serde_json::from_value(json).unwrap();
        assert_eq!(back, metadata);
        let mut with_path = expected.clone();
        with_path["path"] = "/tmp/x".into();
        assert!(serde_json::from_value::<ArtifactMetadata>(with_path).is_err());
    }

    #[test]
    fn mime_types_are_checked() {
        for good in [
            "image/png",
            "application/vnd.openxmlformats+xml",
            "audio/x-wav",
            "video/mp4",
        ] {
            assert!(check_mime_type(good).is_ok(), "{good}");
        }
        let long = format!("a/{}", "b".repeat(MAX_MIME_TYPE_BYTES - 2));
        assert!(check_mime_type(&long).is_ok());
        let too_long = format!("a/{}", "b".repeat(MAX_MIME_TYPE_BYTES - 1));
        for bad in [
            "",
            "png",
            "image/",
            "/png",
            "image/png; charset=x",
            "image/p/ng",
            "image/pn\ng",
            &too_long,
        ] {
            assert_eq!(
                check_mime_type(bad).unwrap_err().code(),
                "invalid_request",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn filenames_are_checked() {
        let longest = "f".repeat(MAX_FILENAME_BYTES);
        for good in [
            "a.png",
            "generated image (1).png",
            "..png",
            longest.as_str(),
        ] {
            assert!(check_filename(good).is_ok(), "{good}");
        }
        let too_long = "f".repeat(MAX_FILENAME_BYTES + 1);
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "..\\x",
            "a\0b",
            "a\nb",
            too_long.as_str(),
        ] {
            assert!(check_filename(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn keys_are_checked() {
        assert!(check_key(&"k".repeat(MAX_KEY_BYTES), "owner").is_ok());
        assert!(check_key(&"k".repeat(MAX_KEY_BYTES + 1), "owner").is_err());
        assert!(check_key("", "owner").is_err());
        assert!(check_key("a\u{7f}", "owner").is_err());
    }
}
