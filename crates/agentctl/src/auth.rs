//! Bearer-token check: `Authorization: Bearer <AGENTCTL_TOKEN>` on every route but `/health`, compared in constant
//! time (SHA-256 of both sides, then `subtle`), so neither the token's length nor its content leaks through timing.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The expected token, kept only as its SHA-256 digest.
#[derive(Clone)]
pub struct TokenCheck {
    digest: [u8; 32],
}

impl std::fmt::Debug for TokenCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenCheck(***)")
    }
}

impl TokenCheck {
    /// A check for `token`.
    pub fn new(token: &str) -> Self {
        Self {
            digest: Sha256::digest(token.as_bytes()).into(),
        }
    }

    /// Whether an `Authorization` header value carries the token (`Bearer <token>`, scheme case-insensitive).
    pub fn allows(&self, authorization: Option<&[u8]>) -> bool {
        let Some(value) = authorization else {
            return false;
        };
        let Some((scheme, token)) = split_scheme(value) else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case(b"bearer") {
            return false;
        }
        let digest: [u8; 32] = Sha256::digest(token).into();
        digest.ct_eq(&self.digest).into()
    }
}

fn split_scheme(value: &[u8]) -> Option<(&[u8], &[u8])> {
    let space = value.iter().position(|&b| b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    let token = rest.trim_ascii();
    Some((scheme, token))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(header: Option<&str>, expect: bool) {
        let token = TokenCheck::new("s3cret-token");
        assert_eq!(
            token.allows(header.map(str::as_bytes)),
            expect,
            "{header:?}"
        );
    }

    #[test]
    fn only_the_exact_bearer_token_passes() {
        check(Some("Bearer s3cret-token"), true);
        check(Some("bearer s3cret-token"), true);
        check(Some("Bearer  s3cret-token "), true);
        check(None, false);
        check(Some("Bearer"), false);
        check(Some("Bearer s3cret-tokenX"), false);
        check(Some("Bearer s3cret-toke"), false);
        check(Some("Basic s3cret-token"), false);
        check(Some("s3cret-token"), false);
        check(Some(""), false);
    }

    #[test]
    fn debug_never_shows_the_token() {
        assert_eq!(format!("{:?}", TokenCheck::new("abc")), "TokenCheck(***)");
    }
}
