//! Agent tokens: short-lived, in-memory, conversation-bound capabilities with call and byte quotas.
//!
//! [`TokenAuthority::issue`] mints 32 random bytes as base64url (43 characters) and keeps only their SHA-256;
//! [`TokenAuthority::begin_request`] hashes a presented token, looks the digest up and confirms it with a
//! constant-time comparison (`subtle`), checks expiry against `now` and the call/byte quotas, and charges one
//! call. The returned [`RequestGrant`] is what [`Caller::agent`](crate::caller::Caller::agent) is built from;
//! bytes are charged to it as the request reads and writes ([`TokenAuthority::charge_bytes`]) and it is given
//! back with [`TokenAuthority::end_request`]. Tokens are revoked one by one, per conversation (run ended), or
//! all at once (shutdown). Token values never appear in `Debug` output or error messages.
//!
//! Defaults (DeepChat `agentTokenAuthority.ts`): TTL 35 min (max 60), 64 calls (max 1024), 256 MiB
//! (max 1 GiB), at most 8 tokens per conversation (the oldest idle one is replaced) and 256 in total.
//! Sans-IO: no timers; expiry is checked against the `now` passed in.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::caller::Scope;

/// An Agent token's secret value: one [`TokenAuthority::issue`] made, or one a client presented (the server
/// hands those to [`Service::authenticate_agent`](crate::server::Service::authenticate_agent) unchecked).
/// `Debug` prints `AgentToken(<redacted>)`; read it with [`expose`](Self::expose) only to hand it to the Agent's
/// environment (`DEEPCHAT_CLI_AGENT_TOKEN`) or to check it.
#[derive(Clone, PartialEq, Eq)]
pub struct AgentToken(String);

impl AgentToken {
    /// A token as a client presented it (any well-formed bearer text; not checked here).
    pub(crate) fn presented(text: String) -> AgentToken {
        AgentToken(text)
    }

    /// The token text (43 base64url characters for an issued token).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for AgentToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AgentToken(<redacted>)")
    }
}

/// Bounds of a [`TokenAuthority`]. Every field's default is DeepChat's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenLimits {
    /// Lifetime when the issuer asks for none. Default 35 min.
    pub default_ttl: Duration,
    /// Longest lifetime an issuer may ask for. Default 60 min; more is `invalid_request`.
    pub max_ttl: Duration,
    /// Calls when the issuer asks for none. Default 64.
    pub default_max_calls: u32,
    /// Most calls an issuer may grant. Default 1024; more is `invalid_request`.
    pub max_calls: u32,
    /// Bytes (request plus response) when the issuer asks for none. Default 256 MiB.
    pub default_max_bytes: u64,
    /// Most bytes an issuer may grant. Default 1 GiB; more is `invalid_request`.
    pub max_bytes: u64,
    /// Live tokens in total. Default 256; one more is `unavailable` (capacity).
    pub max_tokens: usize,
    /// Live tokens per conversation. Default 8; a ninth replaces the oldest idle one, or is `unavailable`
    /// when all eight are in use.
    pub max_tokens_per_conversation: usize,
}

impl Default for TokenLimits {
    fn default() -> Self {
        TokenLimits {
            default_ttl: Duration::from_secs(35 * 60),
            max_ttl: Duration::from_secs(60 * 60),
            default_max_calls: 64,
            max_calls: 1024,
            default_max_bytes: 256 * 1024 * 1024,
            max_bytes: 1024 * 1024 * 1024,
            max_tokens: 256,
            max_tokens_per_conversation: 8,
        }
    }
}

/// What to mint: a conversation binding, scopes, and optional TTL/quotas (defaults from [`TokenLimits`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IssueRequest {
    /// The conversation the token is bound to (1..=128 characters after trimming, no NUL).
    pub conversation_id: String,
    /// The route scopes the token carries (at least one, no duplicates).
    pub scopes: Vec<Scope>,
    /// Lifetime; `None` = [`TokenLimits::default_ttl`].
    pub ttl: Option<Duration>,
    /// Call quota; `None` = [`TokenLimits::default_max_calls`].
    pub max_calls: Option<u32>,
    /// Byte quota; `None` = [`TokenLimits::default_max_bytes`].
    pub max_bytes: Option<u64>,
}

impl IssueRequest {
    /// A request with default TTL and quotas.
    pub fn new(conversation_id: impl Into<String>, scopes: Vec<Scope>) -> Self {
        IssueRequest {
            conversation_id: conversation_id.into(),
            scopes,
            ttl: None,
            max_calls: None,
            max_bytes: None,
        }
    }

    /// Sets the lifetime.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Sets the call quota.
    pub fn max_calls(mut self, max_calls: u32) -> Self {
        self.max_calls = Some(max_calls);
        self
    }

    /// Sets the byte quota.
    pub fn max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = Some(max_bytes);
        self
    }
}

/// The public claims of a token: its id, conversation, scopes and expiry. Safe to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenClaims {
    token_id: String,
    conversation_id: String,
    scopes: Vec<Scope>,
    expires_at: Instant,
}

impl TokenClaims {
    /// Random public id (16 bytes, 22 base64url characters), distinct from the token.
    pub fn token_id(&self) -> &str {
        &self.token_id
    }

    /// The bound conversation.
    pub fn conversation_id(&self) -> &str {
        &self.conversation_id
    }

    /// The granted scopes.
    pub fn scopes(&self) -> &[Scope] {
        &self.scopes
    }

    /// The instant from which the token is refused.
    pub fn expires_at(&self) -> Instant {
        self.expires_at
    }
}

/// A freshly minted token: the secret (give it to the Agent), its claims and quotas.
#[derive(Debug, Clone)]
pub struct IssuedToken {
    /// The secret value; redacted in `Debug`.
    pub token: AgentToken,
    /// Public claims.
    pub claims: TokenClaims,
    /// Call quota.
    pub max_calls: u32,
    /// Byte quota.
    pub max_bytes: u64,
}

/// One admitted request on a valid token. Build the [`Caller`](crate::caller::Caller) from it, charge bytes
/// to it, and give it back with [`TokenAuthority::end_request`].
pub struct RequestGrant {
    digest: [u8; 32],
    claims: TokenClaims,
}

impl RequestGrant {
    /// The token's claims.
    pub fn claims(&self) -> &TokenClaims {
        &self.claims
    }
}

impl fmt::Debug for RequestGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestGrant")
            .field("claims", &self.claims)
            .finish_non_exhaustive()
    }
}

/// Why a token could not be issued or used. Messages never contain the token.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// An issue request field is empty, malformed or above its maximum; `field` names it.
    #[error("invalid token request: {field}")]
    InvalidRequest {
        /// `conversation_id`, `scopes`, `ttl`, `max_calls` or `max_bytes`.
        field: &'static str,
    },
    /// The total or per-conversation token capacity is exhausted.
    #[error("agent token capacity is exhausted")]
    Capacity,
    /// The OS random source failed.
    #[error("random source is unavailable")]
    RandomUnavailable,
    /// The presented token is malformed, unknown or revoked.
    #[error("authentication failed")]
    Invalid,
    /// The token's lifetime is over.
    #[error("agent token expired")]
    Expired,
    /// The token has used all its calls or bytes.
    #[error("agent token quota is exhausted")]
    QuotaExhausted,
}

impl TokenError {
    /// DeepChat's wire code: `invalid_request`, `unavailable`, `authentication_failed` or `rate_limited`.
    pub fn code(&self) -> &'static str {
        match self {
            TokenError::InvalidRequest { .. } => "invalid_request",
            TokenError::Capacity | TokenError::RandomUnavailable => "unavailable",
            TokenError::Invalid | TokenError::Expired => "authentication_failed",
            TokenError::QuotaExhausted => "rate_limited",
        }
    }
}

struct Record {
    digest: [u8; 32],
    claims: TokenClaims,
    max_calls: u32,
    max_bytes: u64,
    used_calls: u32,
    used_bytes: u64,
    active_requests: usize,
    issued_seq: u64,
}

impl Record {
    fn exhausted(&self) -> bool {
        self.used_calls >= self.max_calls || self.used_bytes >= self.max_bytes
    }
}

/// The in-memory Agent token store. Sans-IO: pass `now` to every call that can observe expiry.
pub struct TokenAuthority {
    limits: TokenLimits,
    records: HashMap<[u8; 32], Record>,
    next_seq: u64,
}

impl fmt::Debug for TokenAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenAuthority")
            .field("limits", &self.limits)
            .field("tokens", &self.records.len())
            .finish()
    }
}

impl TokenAuthority {
    /// An empty authority.
    pub fn new(limits: TokenLimits) -> Self {
        TokenAuthority {
            limits,
            records: HashMap::new(),
            next_seq: 0,
        }
    }

    /// Mints a token for `request` at `now`.
    ///
    /// # Errors
    /// [`TokenError::InvalidRequest`] for a bad field, [`TokenError::Capacity`] when full,
    /// [`TokenError::RandomUnavailable`] when the OS random source fails.
    pub fn issue(
        &mut self,
        request: IssueRequest,
        now: Instant,
    ) -> Result<IssuedToken, TokenError> {
        let conversation_id = request.conversation_id.trim();
        if conversation_id.is_empty()
            || conversation_id.chars().count() > 128
            || conversation_id.contains('\0')
        {
            return Err(TokenError::InvalidRequest {
                field: "conversation_id",
            });
        }
        let mut scopes = request.scopes.clone();
        scopes.sort_unstable();
        scopes.dedup();
        if request.scopes.is_empty() || scopes.len() != request.scopes.len() {
            return Err(TokenError::InvalidRequest { field: "scopes" });
        }
        let ttl = request.ttl.unwrap_or(self.limits.default_ttl);
        if ttl.is_zero() || ttl > self.limits.max_ttl {
            return Err(TokenError::InvalidRequest { field: "ttl" });
        }
        let max_calls = request.max_calls.unwrap_or(self.limits.default_max_calls);
        if max_calls == 0 || max_calls > self.limits.max_calls {
            return Err(TokenError::InvalidRequest { field: "max_calls" });
        }
        let max_bytes = request.max_bytes.unwrap_or(self.limits.default_max_bytes);
        if max_bytes == 0 || max_bytes > self.limits.max_bytes {
            return Err(TokenError::InvalidRequest { field: "max_bytes" });
        }
        let expires_at = now
            .checked_add(ttl)
            .ok_or(TokenError::InvalidRequest { field: "ttl" })?;

        self.prune(now);
        let in_conversation = self
            .records
            .values()
            .filter(|record| record.claims.conversation_id == conversation_id)
            .count();
        let replaces = in_conversation >= self.limits.max_tokens_per_conversation;
        if !replaces && self.records.len() >= self.limits.max_tokens {
            return Err(TokenError::Capacity);
        }
        if replaces {
            let oldest_idle = self
                .records
                .values()
                .filter(|record| {
                    record.claims.conversation_id == conversation_id && record.active_requests == 0
                })
                .min_by_key(|record| record.issued_seq)
                .map(|record| record.digest);
            match oldest_idle {
                Some(digest) => {
                    self.records.remove(&digest);
                }
                None => return Err(TokenError::Capacity),
            }
        }

        let (token, digest) = self.unique_token()?;
        let token_id = self.unique_token_id()?;
        let claims = TokenClaims {
            token_id,
            conversation_id: conversation_id.to_owned(),
            scopes: request.scopes,
            expires_at,
        };
        self.next_seq += 1;
        self.records.insert(
            digest,
            Record {
                digest,
                claims: claims.clone(),
                max_calls,
                max_bytes,
                used_calls: 0,
                used_bytes: 0,
                active_requests: 0,
                issued_seq: self.next_seq,
            },
        );
        Ok(IssuedToken {
            token,
            claims,
            max_calls,
            max_bytes,
        })
    }

    /// Validates a presented bearer token and admits one request on it, charging one call.
    ///
    /// # Errors
    /// [`TokenError::Invalid`] for a malformed, unknown or revoked token; [`TokenError::Expired`] (the token is
    /// then forgotten); [`TokenError::QuotaExhausted`] when its calls or bytes are used up.
    pub fn begin_request(
        &mut self,
        presented: &str,
        now: Instant,
    ) -> Result<RequestGrant, TokenError> {
        if !is_token_shaped(presented) {
            return Err(TokenError::Invalid);
        }
        let digest = digest(presented);
        let Some(record) = self.records.get_mut(&digest) else {
            return Err(TokenError::Invalid);
        };
        if !bool::from(record.digest.ct_eq(&digest)) {
            return Err(TokenError::Invalid);
        }
        if record.claims.expires_at <= now {
            self.records.remove(&digest);
            return Err(TokenError::Expired);
        }
        if record.exhausted() {
            return Err(TokenError::QuotaExhausted);
        }
        record.used_calls += 1;
        record.active_requests += 1;
        Ok(RequestGrant {
            digest,
            claims: record.claims.clone(),
        })
    }

    /// Charges `bytes` (read or written for this request) to the grant's token.
    ///
    /// # Errors
    /// [`TokenError::Invalid`] when the token was revoked meanwhile, [`TokenError::Expired`] after its expiry,
    /// [`TokenError::QuotaExhausted`] when `bytes` does not fit — the token's byte quota is then marked used
    /// up, so the request must stop and later requests are refused.
    pub fn charge_bytes(
        &mut self,
        grant: &RequestGrant,
        bytes: u64,
        now: Instant,
    ) -> Result<(), TokenError> {
        let Some(record) = self.records.get_mut(&grant.digest) else {
            return Err(TokenError::Invalid);
        };
        if record.claims.expires_at <= now {
            self.records.remove(&grant.digest);
            return Err(TokenError::Expired);
        }
        let remaining = record.max_bytes - record.used_bytes;
        if bytes > remaining {
            record.used_bytes = record.max_bytes;
            return Err(TokenError::QuotaExhausted);
        }
        record.used_bytes += bytes;
        Ok(())
    }

    /// Ends a request admitted by [`begin_request`](Self::begin_request).
    pub fn end_request(&mut self, grant: RequestGrant) {
        if let Some(record) = self.records.get_mut(&grant.digest) {
            record.active_requests = record.active_requests.saturating_sub(1);
        }
    }

    /// Whether the grant's token is still live (not revoked, replaced or expired at `now`); a shell checks
    /// this while a long request runs and aborts it with `authentication_failed` when it turns false.
    pub fn is_live(&self, grant: &RequestGrant, now: Instant) -> bool {
        self.records
            .get(&grant.digest)
            .is_some_and(|record| record.claims.expires_at > now)
    }

    /// Revokes the token with this public id; `true` if it existed.
    pub fn revoke(&mut self, token_id: &str) -> bool {
        let before = self.records.len();
        self.records
            .retain(|_, record| record.claims.token_id != token_id);
        self.records.len() != before
    }

    /// Revokes every token of a conversation (its run ended); returns how many.
    pub fn revoke_conversation(&mut self, conversation_id: &str) -> usize {
        let conversation_id = conversation_id.trim();
        let before = self.records.len();
        self.records
            .retain(|_, record| record.claims.conversation_id != conversation_id);
        before - self.records.len()
    }

    /// Revokes every token (shutdown).
    pub fn clear(&mut self) {
        self.records.clear();
    }

    /// Forgets expired tokens and idle tokens whose quota is used up.
    pub fn prune(&mut self, now: Instant) {
        self.records.retain(|_, record| {
            record.claims.expires_at > now && !(record.active_requests == 0 && record.exhausted())
        });
    }

    /// Live tokens (including expired ones not yet pruned).
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no token is held.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    fn unique_token(&self) -> Result<(AgentToken, [u8; 32]), TokenError> {
        for _ in 0..8 {
            let token = random_base64url::<32>()?;
            let digest = digest(&token);
            if !self.records.contains_key(&digest) {
                return Ok((AgentToken(token), digest));
            }
        }
        Err(TokenError::RandomUnavailable)
    }

    fn unique_token_id(&self) -> Result<String, TokenError> {
        for _ in 0..8 {
            let id = random_base64url::<16>()?;
            if !self
                .records
                .values()
                .any(|record| record.claims.token_id == id)
            {
                return Ok(id);
            }
        }
        Err(TokenError::RandomUnavailable)
    }
}

/// Whether `token` has the shape of a local-control token: 43..=256 base64url characters
/// (DeepChat `LocalControlTokenSchema`).
pub fn is_token_shaped(token: &str) -> bool {
    (43..=256).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn random_base64url<const N: usize>() -> Result<String, TokenError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|_| TokenError::RandomUnavailable)?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn authority() -> TokenAuthority {
        TokenAuthority::new(TokenLimits::default())
    }

    fn issue(authority: &mut TokenAuthority, conversation: &str, now: Instant) -> IssuedToken {
        authority
            .issue(IssueRequest::new(conversation, vec![Scope::RunsRead]), now)
            .expect("issue")
    }

    #[test]
    fn tokens_are_43_base64url_chars_and_never_in_debug() {
        let mut authority = authority();
        let now = Instant::now();
        let issued = issue(&mut authority, "conv", now);
        let token = issued.token.expose().to_owned();
        assert_eq!(token.len(), 43);
        assert!(is_token_shaped(&token));
        assert_eq!(issued.claims.token_id().len(), 22);
        let grant = authority.begin_request(&token, now).expect("grant");
        for debug in [
            format!("{issued:?}"),
            format!("{:?}", issued.token),
            format!("{grant:?}"),
            format!("{authority:?}"),
            format!("{:?}", crate::caller::Caller::agent("c", &grant)),
        ] {
            assert!(!debug.contains(&token), "{debug}");
        }
        assert!(format!("{issued:?}").contains("<redacted>"));
        let error = authority
            .begin_request(&format!("{token}x"), now)
            .expect_err("unknown");
        assert!(!error.to_string().contains(&token));
    }

    #[test]
    fn defaults_and_maximums() {
        let mut authority = authority();
        let now = Instant::now();
        let issued = issue(&mut authority, "conv", now);
        assert_eq!(issued.max_calls, 64);
        assert_eq!(issued.max_bytes, 256 * 1024 * 1024);
        assert_eq!(
            issued.claims.expires_at(),
            now + Duration::from_secs(35 * 60)
        );

        let request = || IssueRequest::new("conv", vec![Scope::RunsRead]);
        let at_max = request()
            .ttl(Duration::from_secs(3600))
            .max_calls(1024)
            .max_bytes(1 << 30);
        assert!(authority.issue(at_max, now).is_ok());
        for (bad, field) in [
            (
                request().ttl(Duration::from_secs(3600) + Duration::from_nanos(1)),
                "ttl",
            ),
            (request().ttl(Duration::ZERO), "ttl"),
            (request().max_calls(1025), "max_calls"),
            (request().max_calls(0), "max_calls"),
            (request().max_bytes((1 << 30) + 1), "max_bytes"),
            (request().max_bytes(0), "max_bytes"),
            (
                IssueRequest::new("  ", vec![Scope::RunsRead]),
                "conversation_id",
            ),
            (
                IssueRequest::new("a".repeat(129), vec![Scope::RunsRead]),
                "conversation_id",
            ),
            (IssueRequest::new("conv", vec![]), "scopes"),
            (
                IssueRequest::new("conv", vec![Scope::RunsRead, Scope::RunsRead]),
                "scopes",
            ),
        ] {
            let error = authority.issue(bad, now).expect_err(field);
            assert_eq!(error, TokenError::InvalidRequest { field });
            assert_eq!(error.code(), "invalid_request");
        }
        assert!(
            authority
                .issue(
                    IssueRequest::new("a".repeat(128), vec![Scope::RunsRead]),
                    now
                )
                .is_ok()
        );
    }

    #[test]
    fn expiry_is_by_now() {
        let mut authority = authority();
        let now = Instant::now();
        let issued = issue(&mut authority, "conv", now);
        let expiry = issued.claims.expires_at();
        let grant = authority
            .begin_request(issued.token.expose(), expiry - Duration::from_nanos(1))
            .expect("just before expiry");
        assert!(authority.is_live(&grant, expiry - Duration::from_nanos(1)));
        assert!(!authority.is_live(&grant, expiry));
        authority.end_request(grant);
        let error = authority
            .begin_request(issued.token.expose(), expiry)
            .expect_err("expired");
        assert_eq!(
            (error.clone(), error.code()),
            (TokenError::Expired, "authentication_failed")
        );
        // An expired token is forgotten: it is now simply invalid.
        assert_eq!(
            authority
                .begin_request(issued.token.expose(), expiry)
                .expect_err("gone"),
            TokenError::Invalid
        );
    }

    #[test]
    fn malformed_and_unknown_tokens_are_invalid() {
        let mut authority = authority();
        let now = Instant::now();
        issue(&mut authority, "conv", now);
        for presented in [
            "",
            "short",
            &"a".repeat(42),
            &"a".repeat(257),
            &format!("{}+", "a".repeat(43)),
        ] {
            assert_eq!(
                authority.begin_request(presented, now).expect_err("bad"),
                TokenError::Invalid
            );
        }
        assert_eq!(
            authority
                .begin_request(&"a".repeat(43), now)
                .expect_err("unknown"),
            TokenError::Invalid
        );
    }

    #[test]
    fn call_quota_boundary() {
        let mut authority = authority();
        let now = Instant::now();
        let issued = authority
            .issue(
                IssueRequest::new("conv", vec![Scope::RunsRead]).max_calls(2),
                now,
            )
            .expect("issue");
        for _ in 0..2 {
            let grant = authority
                .begin_request(issued.token.expose(), now)
                .expect("within quota");
            authority.end_request(grant);
        }
        let error = authority
            .begin_request(issued.token.expose(), now)
            .expect_err("third call");
        assert_eq!(
            (error.clone(), error.code()),
            (TokenError::QuotaExhausted, "rate_limited")
        );
    }

    #[test]
    fn byte_quota_boundary() {
        let mut authority = authority();
        let now = Instant::now();
        let issued = authority
            .issue(
                IssueRequest::new("conv", vec![Scope::RunsRead]).max_bytes(100),
                now,
            )
            .expect("issue");
        let grant = authority
            .begin_request(issued.token.expose(), now)
            .expect("grant");
        authority.charge_bytes(&grant, 60, now).expect("60");
        authority.charge_bytes(&grant, 39, now).expect("99");
        authority.charge_bytes(&grant, 1, now).expect("exactly 100");
        assert_eq!(
            authority.charge_bytes(&grant, 1, now),
            Err(TokenError::QuotaExhausted)
        );
        authority.end_request(grant);
        assert_eq!(
            authority
                .begin_request(issued.token.expose(), now)
                .expect_err("exhausted"),
            TokenError::QuotaExhausted
        );
    }

    #[test]
    fn revocation_by_id_conversation_and_clear() {
        let mut authority = authority();
        let now = Instant::now();
        let a = issue(&mut authority, "conv-a", now);
        let b = issue(&mut authority, "conv-a", now);
        let c = issue(&mut authority, "conv-b", now);
        let grant = authority
            .begin_request(c.token.expose(), now)
            .expect("grant");
        assert!(authority.revoke(a.claims.token_id()));
        assert!(!authority.revoke(a.claims.token_id()));
        assert_eq!(
            authority
                .begin_request(a.token.expose(), now)
                .expect_err("revoked"),
            TokenError::Invalid
        );
        assert_eq!(authority.revoke_conversation("conv-a"), 1);
        assert_eq!(
            authority
                .begin_request(b.token.expose(), now)
                .expect_err("revoked"),
            TokenError::Invalid
        );
        assert!(authority.is_live(&grant, now));
        authority.clear();
        assert!(!authority.is_live(&grant, now));
        assert_eq!(
            authority.charge_bytes(&grant, 1, now),
            Err(TokenError::Invalid)
        );
        assert!(authority.is_empty());
    }

    #[test]
    fn per_conversation_cap_replaces_the_oldest_idle_token() {
        let mut authority = authority();
        let now = Instant::now();
        let tokens: Vec<IssuedToken> = (0..8).map(|_| issue(&mut authority, "conv", now)).collect();
        // The oldest is busy, so the ninth replaces the second.
        let busy = authority
            .begin_request(tokens[0].token.expose(), now)
            .expect("busy");
        let ninth = issue(&mut authority, "conv", now);
        assert_eq!(authority.len(), 8);
        assert_eq!(
            authority
                .begin_request(tokens[1].token.expose(), now)
                .expect_err("replaced"),
            TokenError::Invalid
        );
        assert!(authority.is_live(&busy, now));
        let ninth_grant = authority
            .begin_request(ninth.token.expose(), now)
            .expect("ninth");
        authority.end_request(ninth_grant);
        // With all eight busy, a ninth cannot be issued.
        let mut grants = vec![busy];
        for token in tokens.iter().skip(2).chain(std::iter::once(&ninth)) {
            grants.push(
                authority
                    .begin_request(token.token.expose(), now)
                    .expect("busy"),
            );
        }
        let error = authority
            .issue(IssueRequest::new("conv", vec![Scope::RunsRead]), now)
            .expect_err("capacity");
        assert_eq!(
            (error.clone(), error.code()),
            (TokenError::Capacity, "unavailable")
        );
        for grant in grants {
            authority.end_request(grant);
        }
    }

    #[test]
    fn total_cap_boundary() {
        let limits = TokenLimits {
            max_tokens: 3,
            ..TokenLimits::default()
        };
        let mut authority = TokenAuthority::new(limits);
        let now = Instant::now();
        for i in 0..3 {
            issue(&mut authority, &format!("conv-{i}"), now);
        }
        assert_eq!(
            authority
                .issue(IssueRequest::new("conv-x", vec![Scope::RunsRead]), now)
                .expect_err("full"),
            TokenError::Capacity
        );
        // Expired tokens free capacity.
        let later = now + Duration::from_secs(35 * 60);
        assert!(
            authority
                .issue(IssueRequest::new("conv-x", vec![Scope::RunsRead]), later)
                .is_ok()
        );
        assert_eq!(authority.len(), 1);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Begin,
        Charge(u64),
        End,
        Advance(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => Just(Op::Begin),
            4 => (0u64..40).prop_map(Op::Charge),
            3 => Just(Op::End),
            1 => (0u64..400).prop_map(Op::Advance),
        ]
    }

    proptest! {
        /// Random request sequences never admit more calls or bytes than granted, and every refusal is the one
        /// the model predicts.
        #[test]
        fn quotas_hold_under_any_sequence(
            max_calls in 1u32..8,
            max_bytes in 1u64..120,
            ttl_secs in 1u64..2000,
            ops in proptest::collection::vec(op(), 0..80),
        ) {
            let mut authority = authority();
            let start = Instant::now();
            let issued = authority.issue(
                IssueRequest::new("conv", vec![Scope::RunsRead])
                    .max_calls(max_calls)
                    .max_bytes(max_bytes)
                    .ttl(Duration::from_secs(ttl_secs)),
                start,
            ).expect("issue");
            let expires = start + Duration::from_secs(ttl_secs);
            let mut now = start;
            let mut grants: Vec<RequestGrant> = Vec::new();
            let (mut calls, mut bytes, mut gone) = (0u32, 0u64, false);
            for op in ops {
                match op {
                    Op::Begin => {
                        let result = authority.begin_request(issued.token.expose(), now);
                        if gone {
                            prop_assert_eq!(result.expect_err("gone"), TokenError::Invalid);
                        } else if now >= expires {
                            prop_assert_eq!(result.expect_err("expired"), TokenError::Expired);
                            gone = true;
                        } else if calls >= max_calls || bytes >= max_bytes {
                            prop_assert_eq!(result.expect_err("quota"), TokenError::QuotaExhausted);
                        } else {
                            grants.push(result.expect("admitted"));
                            calls += 1;
                        }
                    }
                    Op::Charge(n) => {
                        if let Some(grant) = grants.last() {
                            let result = authority.charge_bytes(grant, n, now);
                            if gone {
                                prop_assert_eq!(result, Err(TokenError::Invalid));
                            } else if now >= expires {
                                prop_assert_eq!(result, Err(TokenError::Expired));
                                gone = true;
                            } else if n > max_bytes - bytes {
                                prop_assert_eq!(result, Err(TokenError::QuotaExhausted));
                                bytes = max_bytes;
                            } else {
                                prop_assert_eq!(result, Ok(()));
                                bytes += n;
                            }
                        }
                    }
                    Op::End => {
                        if let Some(grant) = grants.pop() {
                            authority.end_request(grant);
                        }
                    }
                    Op::Advance(secs) => now += Duration::from_secs(secs),
                }
                prop_assert!(calls <= max_calls);
                prop_assert!(bytes <= max_bytes);
            }
        }
    }
}
