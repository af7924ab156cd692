//! The broker's vocabulary: ids, domains, decisions, requests, matches, snapshots and events.
//!
//! Internal state, not wire DTOs: the local-control layer converts snapshots and events to its own wire shapes
//! (DeepChat's `approvals.requested` / `approvals.closed` payloads), so nothing here derives `Serialize`.

use std::fmt;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::canonical::ArgsHash;

/// An approval's id: unique within one broker, never reused, allocated in creation order.
///
/// `Display` is 16 lowercase hex digits (e.g. `000000000000002a`), which fits DeepChat's request-id pattern
/// `^[A-Za-z0-9_-]{16,128}$`. An id is not a secret and not a capability: knowing it does not let anyone resolve
/// anything (resolution needs a [`Renderer`](crate::Renderer) and the matching scope).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApprovalId(u64);

impl ApprovalId {
    /// Wraps a raw number (for tests and for ids read back from [`ApprovalId::parse`]).
    pub const fn from_u64(raw: u64) -> Self {
        Self(raw)
    }

    /// The raw number.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// Parses the `Display` form: exactly 16 lowercase hex digits. Anything else is `None`.
    pub fn parse(text: &str) -> Option<Self> {
        if text.len() != 16
            || !text
                .bytes()
                .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
        {
            return None;
        }
        u64::from_str_radix(text, 16).ok().map(Self)
    }
}

impl fmt::Display for ApprovalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Debug for ApprovalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApprovalId({self})")
    }
}

/// Which adapter created an approval (DeepChat's `domain`: `cli-mutation`, `tool-permission`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Domain {
    /// A sensitive mutation requested over the local control socket ([`CliMutationGuard`](crate::CliMutationGuard)).
    CliMutation,
    /// A tool call's permission ([`ToolPermissions`](crate::ToolPermissions)).
    ToolPermission,
}

impl Domain {
    /// `cli-mutation` or `tool-permission`, as DeepChat names them.
    pub fn as_str(self) -> &'static str {
        match self {
            Domain::CliMutation => "cli-mutation",
            Domain::ToolPermission => "tool-permission",
        }
    }
}

/// Who spends an approved approval. Exactly one consumption per approval either way.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consumption {
    /// The one waiter of the approval takes it when it is approved ([`ApprovalBroker::take_approved`](crate::ApprovalBroker::take_approved));
    /// [`ApprovalBroker::consume_approved`](crate::ApprovalBroker::consume_approved) never matches it.
    /// DeepChat: `consumeOnApprove: true` (CLI mutations, MCP app decisions).
    Waiter,
    /// A later execution spends it by presenting the same binding
    /// ([`ApprovalBroker::consume_approved`](crate::ApprovalBroker::consume_approved)); waiting on it reports the
    /// decision without spending it. DeepChat: the model pre-check flow of `ToolPermissionBroker`.
    Match,
}

/// What a renderer answers. Only a renderer resolves (DESIGN.md invariant 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Allow the bound operation once.
    Approve,
    /// Refuse it.
    Deny,
}

/// Why an approval was denied without the renderer approving it.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DenyReason {
    /// The renderer answered [`Resolution::Deny`].
    Renderer,
    /// Its scope was cancelled ([`ApprovalBroker::cancel_scope`](crate::ApprovalBroker::cancel_scope) with this
    /// reason, e.g. a conversation's tool approvals when the conversation is cancelled).
    ScopeCancelled,
    /// The request or connection that asked for it went away.
    ConnectionClosed,
    /// The last renderer detached, so nobody could answer it.
    NoRenderer,
}

impl DenyReason {
    /// A stable snake_case code: `renderer`, `scope_cancelled`, `connection_closed` or `no_renderer`.
    pub fn code(self) -> &'static str {
        match self {
            DenyReason::Renderer => "renderer",
            DenyReason::ScopeCancelled => "scope_cancelled",
            DenyReason::ConnectionClosed => "connection_closed",
            DenyReason::NoRenderer => "no_renderer",
        }
    }
}

/// The outcome of an approval. Each approval gets exactly one, reported once in [`ApprovalEvent::Decided`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// A renderer approved it.
    Approved,
    /// It was denied (see [`DenyReason`]).
    Denied {
        /// Who or what denied it.
        reason: DenyReason,
    },
    /// Its expiry passed while it was pending.
    Expired,
    /// The broker was cleared (shutdown) while it was pending.
    Cancelled,
}

impl Decision {
    /// A stable snake_case code: `approved`, `denied`, `expired` or `cancelled`.
    pub fn code(self) -> &'static str {
        match self {
            Decision::Approved => "approved",
            Decision::Denied { .. } => "denied",
            Decision::Expired => "expired",
            Decision::Cancelled => "cancelled",
        }
    }
}

/// Where a live approval stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalStatus {
    /// Waiting for a renderer.
    Pending,
    /// Approved, not yet consumed.
    Approved,
}

/// A request for a new approval: the binding (domain, scope, method, arguments, optional dedup key), the display
/// data and the options.
///
/// Built with [`NewApproval::new`] and chainable setters. The arguments are canonicalized and hashed by the broker;
/// only their [`ArgsHash`] is kept. `Debug` leaves the arguments out (they may hold secrets).
#[derive(Clone)]
pub struct NewApproval<'a> {
    pub(crate) domain: Domain,
    pub(crate) scope: &'a str,
    pub(crate) method: &'a str,
    pub(crate) args: &'a Value,
    pub(crate) display: Value,
    pub(crate) timeout: Option<Duration>,
    pub(crate) dedup_key: Option<&'a str>,
    pub(crate) consumption: Consumption,
}

impl<'a> NewApproval<'a> {
    /// An approval for `method` with `args` in `scope`; no display data (`null`), the broker's default timeout,
    /// no deduplication, [`Consumption::Match`].
    pub fn new(domain: Domain, scope: &'a str, method: &'a str, args: &'a Value) -> Self {
        Self {
            domain,
            scope,
            method,
            args,
            display: Value::Null,
            timeout: None,
            dedup_key: None,
            consumption: Consumption::Match,
        }
    }

    /// What the renderer shows, **already redacted** by the caller. The broker never derives display data from
    /// the arguments; it checks it against the canonical limits and
    /// [`Limits::max_display_bytes`](crate::Limits::max_display_bytes).
    pub fn display(mut self, display: Value) -> Self {
        self.display = display;
        self
    }

    /// This approval's timeout instead of [`Limits::default_timeout`](crate::Limits::default_timeout).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Deduplicate while pending: a create whose whole binding (domain, scope, method, args hash and this key)
    /// equals a **pending** approval's returns that approval instead of a new one. Without a key, every create is
    /// a new approval.
    pub fn dedup_key(mut self, key: &'a str) -> Self {
        self.dedup_key = Some(key);
        self
    }

    /// Who spends it once approved (default [`Consumption::Match`]).
    pub fn consumption(mut self, consumption: Consumption) -> Self {
        self.consumption = consumption;
        self
    }
}

/// The binding an execution presents to [`ApprovalBroker::consume_approved`](crate::ApprovalBroker::consume_approved).
///
/// Matches an approved [`Consumption::Match`] approval whose domain, scope, method, dedup key and args hash are
/// all equal (and whose id is `id`, if given). `Debug` leaves the arguments out.
#[derive(Clone)]
pub struct ApprovalMatch<'a> {
    pub(crate) id: Option<ApprovalId>,
    pub(crate) domain: Domain,
    pub(crate) scope: &'a str,
    pub(crate) method: &'a str,
    pub(crate) args: &'a Value,
    pub(crate) dedup_key: Option<&'a str>,
}

impl<'a> ApprovalMatch<'a> {
    /// A match on domain, scope, method and arguments, no dedup key, any id.
    pub fn new(domain: Domain, scope: &'a str, method: &'a str, args: &'a Value) -> Self {
        Self {
            id: None,
            domain,
            scope,
            method,
            args,
            dedup_key: None,
        }
    }

    /// Only the approval with this id.
    pub fn id(mut self, id: ApprovalId) -> Self {
        self.id = Some(id);
        self
    }

    /// The dedup key the approval was created with.
    pub fn dedup_key(mut self, key: &'a str) -> Self {
        self.dedup_key = Some(key);
        self
    }
}

impl fmt::Debug for NewApproval<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewApproval")
            .field("domain", &self.domain)
            .field("scope", &self.scope)
            .field("method", &self.method)
            .field("args", &"<not shown>")
            .field("display", &self.display)
            .field("timeout", &self.timeout)
            .field("dedup_key", &self.dedup_key)
            .field("consumption", &self.consumption)
            .finish()
    }
}

impl fmt::Debug for ApprovalMatch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalMatch")
            .field("id", &self.id)
            .field("domain", &self.domain)
            .field("scope", &self.scope)
            .field("method", &self.method)
            .field("args", &"<not shown>")
            .field("dedup_key", &self.dedup_key)
            .finish()
    }
}

/// A copy of a live approval, for renderers and pending listings. Carries the args hash, never the arguments.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub struct ApprovalSnapshot {
    /// Its id.
    pub id: ApprovalId,
    /// The adapter that created it.
    pub domain: Domain,
    /// Its scope key, e.g. `cli:<connection>` or `tool:<conversation>`.
    pub scope: String,
    /// The bound method (operation), e.g. `skills.installFromUrl`.
    pub method: String,
    /// SHA-256 of the canonical arguments.
    pub args_hash: ArgsHash,
    /// The redacted display data given at creation (`null` if none).
    pub display: Value,
    /// Pending or approved-not-yet-consumed.
    pub status: ApprovalStatus,
    /// Who spends it.
    pub consumption: Consumption,
    /// When it was created (the `now` passed to create).
    pub created_at: Instant,
    /// When it expires: at or after this instant it is expired.
    pub expires_at: Instant,
}

/// What happened to approvals, in order. Drained with [`ApprovalBroker::poll_event`](crate::ApprovalBroker::poll_event).
///
/// Per approval: one `Created`, then at most one `Decided`, then at most one `Removed` (the last event for its id).
/// DeepChat: `created` / `resolved` / `removed` broker events, `approvals.requested` / `approvals.closed`.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub enum ApprovalEvent {
    /// A new approval a renderer should show.
    Created(ApprovalSnapshot),
    /// The approval's one decision.
    Decided {
        /// Its id.
        id: ApprovalId,
        /// Its scope.
        scope: String,
        /// The decision.
        decision: Decision,
    },
    /// The approval left the broker (decided, consumed, expired or cleared); its id is dead from now on.
    Removed {
        /// Its id.
        id: ApprovalId,
        /// Its scope.
        scope: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approval_id_round_trips_through_its_sixteen_hex_digit_form() {
        let id = ApprovalId::from_u64(42);
        assert_eq!(id.to_string(), "000000000000002a");
        assert_eq!(ApprovalId::parse("000000000000002a"), Some(id));
        for bad in [
            "2a",
            "000000000000002A",
            "000000000000002a0",
            "-00000000000002a",
            "../../etc/passwd",
        ] {
            assert_eq!(ApprovalId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn debug_output_never_shows_the_arguments() {
        let args = serde_json::json!({"apiKey": "sk-live-secret"});
        let shown = format!(
            "{:?} {:?}",
            NewApproval::new(Domain::CliMutation, "cli:1", "providers.setKey", &args),
            ApprovalMatch::new(Domain::CliMutation, "cli:1", "providers.setKey", &args)
        );
        assert!(shown.contains("providers.setKey"), "{shown}");
        assert!(!shown.contains("sk-live-secret"), "{shown}");
    }

    #[test]
    fn codes_are_stable() {
        assert_eq!(Domain::CliMutation.as_str(), "cli-mutation");
        assert_eq!(Domain::ToolPermission.as_str(), "tool-permission");
        let reasons = [
            DenyReason::Renderer,
            DenyReason::ScopeCancelled,
            DenyReason::ConnectionClosed,
            DenyReason::NoRenderer,
        ];
        assert_eq!(
            reasons.map(DenyReason::code),
            [
                "renderer",
                "scope_cancelled",
                "connection_closed",
                "no_renderer"
            ]
        );
        let decisions = [
            Decision::Approved,
            Decision::Denied {
                reason: DenyReason::Renderer,
            },
            Decision::Expired,
            Decision::Cancelled,
        ];
        assert_eq!(
            decisions.map(Decision::code),
            ["approved", "denied", "expired", "cancelled"]
        );
    }
}
