//! The agent's opaque native session id (`session_id`), validated before it is reported or persisted.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize};

/// Longest accepted session id, in bytes (the protocol's `{1,256}`).
pub const MAX_SESSION_ID_BYTES: usize = 256;

/// An agent's native session id, the value passed back with `--resume`.
///
/// Valid ids match `[A-Za-z0-9._:-]{1,256}` (AWP agent CLI protocol, "Resume and delivery semantics").
/// Anything else is rejected: it is never reported as the session id and never persisted.
/// On the wire it is a plain JSON string: `"876cf434-8513-47bd-a1fe-30bed7186e2f"`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct SessionId(String);

/// Why a string is not a valid [`SessionId`]; the rejected value is deliberately not included.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidSessionId {
    /// The id is the empty string.
    #[error("session id is empty")]
    Empty,
    /// The id is longer than [`MAX_SESSION_ID_BYTES`].
    #[error("session id is {len} bytes, more than the limit of 256")]
    TooLong {
        /// Length of the rejected id in bytes.
        len: usize,
    },
    /// The `session_id` field is not a JSON string.
    #[error("session id is not a string")]
    NotAString,
    /// The id contains a character outside `[A-Za-z0-9._:-]`.
    #[error("session id contains a character outside [A-Za-z0-9._:-] at byte {position}")]
    InvalidCharacter {
        /// Byte offset of the first offending character.
        position: usize,
    },
}

impl InvalidSessionId {
    /// Stable machine-readable code: always `invalid_session_id`.
    pub fn code(&self) -> &'static str {
        "invalid_session_id"
    }
}

impl SessionId {
    /// Validates `id` against `[A-Za-z0-9._:-]{1,256}`.
    ///
    /// # Errors
    /// [`InvalidSessionId`] saying which rule failed (never echoing the value).
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidSessionId> {
        let id = id.into();
        validate(&id)?;
        Ok(Self(id))
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as an owned string.
    pub fn into_string(self) -> String {
        self.0
    }

    /// True when the id starts with `-`, so that a CLI could read it as a flag (use `--flag=<id>`).
    pub fn looks_like_flag(&self) -> bool {
        self.0.starts_with('-')
    }
}

fn validate(id: &str) -> Result<(), InvalidSessionId> {
    if id.is_empty() {
        return Err(InvalidSessionId::Empty);
    }
    if id.len() > MAX_SESSION_ID_BYTES {
        return Err(InvalidSessionId::TooLong { len: id.len() });
    }
    match id
        .bytes()
        .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-')))
    {
        Some(position) => Err(InvalidSessionId::InvalidCharacter { position }),
        None => Ok(()),
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SessionId").field(&self.0).finish()
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for SessionId {
    type Error = InvalidSessionId;
    fn try_from(id: String) -> Result<Self, Self::Error> {
        Self::new(id)
    }
}

impl TryFrom<&str> for SessionId {
    type Error = InvalidSessionId;
    fn try_from(id: &str) -> Result<Self, Self::Error> {
        Self::new(id)
    }
}

impl FromStr for SessionId {
    type Err = InvalidSessionId;
    fn from_str(id: &str) -> Result<Self, Self::Err> {
        Self::new(id)
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let id = String::deserialize(deserializer)?;
        Self::new(id).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expect: Result<(), InvalidSessionId>) {
        assert_eq!(SessionId::new(input).map(|_| ()), expect, "input {input:?}");
    }

    #[test]
    fn accepts_the_protocol_alphabet() {
        check("876cf434-8513-47bd-a1fe-30bed7186e2f", Ok(()));
        check("a.b_c:d-E9", Ok(()));
        check("-starts-with-dash", Ok(()));
        check(&"x".repeat(256), Ok(()));
    }

    #[test]
    fn rejects_everything_else() {
        check("", Err(InvalidSessionId::Empty));
        check(
            &"x".repeat(257),
            Err(InvalidSessionId::TooLong { len: 257 }),
        );
        check(
            "abc def",
            Err(InvalidSessionId::InvalidCharacter { position: 3 }),
        );
        check(
            "../etc",
            Err(InvalidSessionId::InvalidCharacter { position: 2 }),
        );
        check(
            "id\n",
            Err(InvalidSessionId::InvalidCharacter { position: 2 }),
        );
        check("é", Err(InvalidSessionId::InvalidCharacter { position: 0 }));
    }

    #[test]
    fn error_code_is_stable_and_message_never_echoes_the_value() {
        let err = SessionId::new("secret value").unwrap_err();
        assert_eq!(err.code(), "invalid_session_id");
        assert!(!err.to_string().contains("secret"));
    }

    #[test]
    fn serde_is_a_validated_plain_string() {
        let id: SessionId = serde_json::from_str("\"abc\"").unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"abc\"");
        assert!(serde_json::from_str::<SessionId>("\"a b\"").is_err());
    }
}
