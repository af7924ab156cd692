//! Artifact ids: 24 random bytes as unpadded base64url, parsed strictly before any filesystem call.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Random bytes in an id (192 bits, DESIGN.md invariant 9).
pub const ARTIFACT_ID_BYTES: usize = 24;

/// Length of an id's text form: 24 bytes in unpadded base64url are exactly 32 characters.
pub const ARTIFACT_ID_LEN: usize = 32;

/// An artifact id: 32 characters of the base64url alphabet (`A-Z a-z 0-9 - _`), no padding.
///
/// Made only by [`ArtifactId::generate`] (24 bytes from the OS random source) or by [`ArtifactId::parse`], which
/// checks the text byte by byte before anything else sees it, so a value of this type is always safe to use as a
/// file name in the spool directory.
/// Wire form: the bare string, e.g. `"q1Xv1mJ0c2r2Yb5bQ0ZrN3hUcUVwX3pL"`.
/// Source: DeepChat local control plane spec, "ArtifactSpool" (random unguessable ids) and
/// `protocols/local-control.md` ("id = 24 random bytes base64url").
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArtifactId([u8; ARTIFACT_ID_LEN]);

/// A string that is not an artifact id. Public code `not_found`: an unusable id names nothing, and the caller
/// learns no more than for an id that is well formed but unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("artifact not found")]
#[non_exhaustive]
pub struct InvalidArtifactId;

impl InvalidArtifactId {
    /// The stable error code: `not_found`.
    pub fn code(&self) -> &'static str {
        "not_found"
    }
}

/// The OS random source failed; no id could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("random source unavailable")]
#[non_exhaustive]
pub struct RandomUnavailable;

impl ArtifactId {
    /// A fresh id from 24 bytes of `getrandom`.
    ///
    /// # Errors
    /// [`RandomUnavailable`] when the OS random source fails.
    pub fn generate() -> Result<Self, RandomUnavailable> {
        let mut bytes = [0u8; ARTIFACT_ID_BYTES];
        getrandom::fill(&mut bytes).map_err(|_| RandomUnavailable)?;
        Ok(Self::from_random_bytes(bytes))
    }

    /// The id whose text form encodes `bytes` (used by [`ArtifactId::generate`] and by tests).
    pub fn from_random_bytes(bytes: [u8; ARTIFACT_ID_BYTES]) -> Self {
        let mut text = [0u8; ARTIFACT_ID_LEN];
        // 24 bytes always encode to exactly 32 characters, so the buffer is exactly large enough.
        let written = URL_SAFE_NO_PAD
            .encode_slice(bytes, &mut text)
            .unwrap_or_default();
        debug_assert_eq!(written, ARTIFACT_ID_LEN);
        Self(text)
    }

    /// Accepts exactly 32 characters from `A-Z a-z 0-9 - _`.
    ///
    /// Pure: no filesystem, no lookup. Anything else (`..%2F..`, `/`, NUL, `=` padding, 31 or 33 characters,
    /// non-ASCII) is refused.
    ///
    /// # Errors
    /// [`InvalidArtifactId`] (code `not_found`).
    pub fn parse(text: &str) -> Result<Self, InvalidArtifactId> {
        let bytes = text.as_bytes();
        if bytes.len() != ARTIFACT_ID_LEN || !bytes.iter().all(|b| is_base64url(*b)) {
            return Err(InvalidArtifactId);
        }
        // The last character carries 6 bits, all of them data (24 bytes = 32 × 6 bits), so every string of the
        // alphabet decodes; still require the canonical form so one artifact has exactly one spelling.
        let mut decoded = [0u8; ARTIFACT_ID_BYTES];
        match URL_SAFE_NO_PAD.decode_slice(bytes, &mut decoded) {
            Ok(ARTIFACT_ID_BYTES) => {}
            _ => return Err(InvalidArtifactId),
        }
        let mut text_bytes = [0u8; ARTIFACT_ID_LEN];
        text_bytes.copy_from_slice(bytes);
        Ok(Self(text_bytes))
    }

    /// The text form (32 ASCII characters).
    pub fn as_str(&self) -> &str {
        // Built only from the base64url alphabet, which is ASCII.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

fn is_base64url(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'
}

impl fmt::Display for ArtifactId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for ArtifactId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ArtifactId({})", self.as_str())
    }
}

impl std::str::FromStr for ArtifactId {
    type Err = InvalidArtifactId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(input: &str, ok: bool) {
        assert_eq!(ArtifactId::parse(input).is_ok(), ok, "{input:?}");
    }

    #[test]
    fn generated_ids_are_32_base64url_characters_and_round_trip() {
        let a = ArtifactId::generate().unwrap();
        let b = ArtifactId::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), ARTIFACT_ID_LEN);
        assert_eq!(ArtifactId::parse(a.as_str()).unwrap(), a);
        assert_eq!(a.to_string(), a.as_str());
    }

    #[test]
    fn hostile_and_malformed_ids_are_refused() {
        let good = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcd-_";
        check(good, true);
        check("..%2F..", false);
        check("../../../../../../../../etc/pass", false); // 32 characters, but `.` and `/`
        check("ABCDEFGHIJKLMNOPQRSTUVWXYZabcd/_", false);
        check("ABCDEFGHIJKLMNOPQRSTUVWXYZabcd\0_", false);
        check("ABCDEFGHIJKLMNOPQRSTUVWXYZabcd+_", false); // standard, not url-safe, alphabet
        check("ABCDEFGHIJKLMNOPQRSTUVWXYZabcd==", false);
        check("ABCDEFGHIJKLMNOPQRSTUVWXYZabcd-", false); // 31
        check("ABCDEFGHIJKLMNOPQRSTUVWXYZabcd-_A", false); // 33
        check("", false);
        check("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdé", false); // 32 bytes, non-ASCII
        check(&"A".repeat(4096), false);
        assert_eq!(InvalidArtifactId.code(), "not_found");
        assert_eq!(InvalidArtifactId.to_string(), "artifact not found");
    }

    proptest! {
        #[test]
        fn any_random_bytes_make_a_parseable_id(bytes in proptest::array::uniform24(any::<u8>())) {
            let id = ArtifactId::from_random_bytes(bytes);
            prop_assert_eq!(ArtifactId::parse(id.as_str()).unwrap(), id);
        }

        #[test]
        fn parse_accepts_exactly_the_alphabet_at_length_32(text in "\\PC{0,40}") {
            let expected = text.len() == ARTIFACT_ID_LEN && text.bytes().all(is_base64url);
            prop_assert_eq!(ArtifactId::parse(&text).is_ok(), expected);
        }
    }
}
