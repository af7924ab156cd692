//! The sans-IO approval state machine: inputs `create`/`resolve`/`consume_*`/`cancel_*`/`clear`/
//! `handle_timeout(now)`, outputs drained with `poll_event()`. No clock, no IO, no tasks.
//!
//! Behaviour checked against DeepChat's `src/main/approval/approvalBroker.ts` (the generic core extracted from
//! `src/main/tool/permission/toolPermissionBroker.ts`) and the spec's "ApprovalBroker" section.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::canonical::{ArgsHash, CanonicalLimits, canonical_json};
use crate::error::ApprovalError;
use crate::types::{
    ApprovalEvent, ApprovalId, ApprovalMatch, ApprovalSnapshot, ApprovalStatus, Consumption,
    Decision, DenyReason, Domain, NewApproval, Resolution,
};

/// Default for [`Limits::default_timeout`]: 2 minutes (DeepChat `DEFAULT_REQUEST_TIMEOUT_MS`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2 * 60);
/// Default for [`Limits::max_timeout`]: 30 minutes (the local control plane's longest request timeout).
pub const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Default for [`Limits::max_pending_per_scope`]: 64 (DeepChat `DEFAULT_MAX_PENDING_PER_SCOPE`).
pub const DEFAULT_MAX_PENDING_PER_SCOPE: usize = 64;
/// Default for [`Limits::max_pending_total`]: 4096 (64 connections × 64; not in DeepChat, which has no total cap).
pub const DEFAULT_MAX_PENDING_TOTAL: usize = 4096;
/// Default for [`Limits::max_display_bytes`]: 16 KiB (DeepChat `MAX_REDACTED_DISPLAY_BYTES`).
pub const DEFAULT_MAX_DISPLAY_BYTES: usize = 16 * 1024;
/// Default for [`Limits::max_scope_bytes`]: 512 (DeepChat `MAX_SCOPE_KEY_BYTES`).
pub const DEFAULT_MAX_SCOPE_BYTES: usize = 512;
/// Default for [`Limits::max_method_bytes`]: 256 (DeepChat `MAX_OPERATION_BYTES`).
pub const DEFAULT_MAX_METHOD_BYTES: usize = 256;
/// Default for [`Limits::max_dedup_key_bytes`]: 64 KiB (DeepChat `MAX_BINDING_KEY_BYTES`).
pub const DEFAULT_MAX_DEDUP_KEY_BYTES: usize = 64 * 1024;

/// The bounds an [`ApprovalBroker`] enforces. Bounded by default; there is no unbounded mode.
///
/// Construct with `Limits { max_pending_per_scope: 8, ..Limits::default() }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Timeout of an approval created without [`NewApproval::timeout`]. Default [`DEFAULT_TIMEOUT`] (2 min).
    /// Expiry is `now + timeout`; at that instant the approval is expired.
    pub default_timeout: Duration,
    /// Longest accepted timeout. Default [`DEFAULT_MAX_TIMEOUT`] (30 min). A longer (or zero) timeout is
    /// [`ApprovalError::InvalidField`] `timeout`.
    pub max_timeout: Duration,
    /// Most live approvals (pending or approved-unconsumed) in one scope. Default
    /// [`DEFAULT_MAX_PENDING_PER_SCOPE`] (64); one more is [`ApprovalError::ScopeFull`] (`rate_limited`).
    pub max_pending_per_scope: usize,
    /// Most live approvals in the broker. Default [`DEFAULT_MAX_PENDING_TOTAL`] (4096); one more is
    /// [`ApprovalError::BrokerFull`] (`rate_limited`).
    pub max_pending_total: usize,
    /// Limits on the arguments' canonical form: depth 64, 10 000 keys, 1 MiB by default. Overflow:
    /// [`ApprovalError::InvalidArgs`].
    pub args: CanonicalLimits,
    /// Longest canonical display data, in bytes (depth and keys as for `args`). Default
    /// [`DEFAULT_MAX_DISPLAY_BYTES`] (16 KiB). Overflow: [`ApprovalError::InvalidDisplay`].
    pub max_display_bytes: usize,
    /// Longest scope key, in bytes; it must not be empty. Default [`DEFAULT_MAX_SCOPE_BYTES`] (512).
    pub max_scope_bytes: usize,
    /// Longest method, in bytes; it must not be empty. Default [`DEFAULT_MAX_METHOD_BYTES`] (256).
    pub max_method_bytes: usize,
    /// Longest dedup key, in bytes; it must not be empty. Default [`DEFAULT_MAX_DEDUP_KEY_BYTES`] (64 KiB).
    pub max_dedup_key_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            default_timeout: DEFAULT_TIMEOUT,
            max_timeout: DEFAULT_MAX_TIMEOUT,
            max_pending_per_scope: DEFAULT_MAX_PENDING_PER_SCOPE,
            max_pending_total: DEFAULT_MAX_PENDING_TOTAL,
            args: CanonicalLimits::default(),
            max_display_bytes: DEFAULT_MAX_DISPLAY_BYTES,
            max_scope_bytes: DEFAULT_MAX_SCOPE_BYTES,
            max_method_bytes: DEFAULT_MAX_METHOD_BYTES,
            max_dedup_key_bytes: DEFAULT_MAX_DEDUP_KEY_BYTES,
        }
    }
}

#[derive(Debug)]
struct Entry {
    domain: Domain,
    scope: String,
    method: String,
    args_hash: ArgsHash,
    dedup_key: Option<String>,
    display: Value,
    consumption: Consumption,
    status: ApprovalStatus,
    created_at: Instant,
    expires_at: Instant,
}

impl Entry {
    fn snapshot(&self, id: ApprovalId) -> ApprovalSnapshot {
        ApprovalSnapshot {
            id,
            domain: self.domain,
            scope: self.scope.clone(),
            method: self.method.clone(),
            args_hash: self.args_hash,
            display: self.display.clone(),
            status: self.status,
            consumption: self.consumption,
            created_at: self.created_at,
            expires_at: self.expires_at,
        }
    }

    fn binds(
        &self,
        domain: Domain,
        scope: &str,
        method: &str,
        hash: &ArgsHash,
        key: Option<&str>,
    ) -> bool {
        self.domain == domain
            && self.scope == scope
            && self.method == method
            && self.args_hash == *hash
            && self.dedup_key.as_deref() == key
    }
}

/// The approval state machine. One per host; all time comes in as `now`.
///
/// Life of an approval: [`create`](Self::create) → `Pending` → [`resolve`](Self::resolve) `Approve` → `Approved`
/// → consumed once ([`consume_approved`](Self::consume_approved) for [`Consumption::Match`],
/// [`take_approved`](Self::take_approved) for [`Consumption::Waiter`]) → removed. Deny, cancellation, clearing and
/// expiry remove it with their [`Decision`]. A removed id is dead: resolving, consuming or cancelling it again
/// fails. An approved approval that is not consumed before its expiry is removed at expiry (its decision stays
/// `Approved`, but nothing can spend it any more).
///
/// Every call that takes `now` first expires what is due at `now`, so a late answer can never land; a driver
/// also calls [`handle_timeout`](Self::handle_timeout) at [`poll_timeout`](Self::poll_timeout) so that
/// expiries are reported without other traffic. After each call, drain [`poll_event`](Self::poll_event).
///
/// ```
/// use std::time::{Duration, Instant};
/// use agentwire_approval::{ApprovalBroker, ApprovalEvent, ApprovalMatch, Domain, Limits, NewApproval, Resolution};
/// use serde_json::json;
///
/// let mut broker = ApprovalBroker::new(Limits::default());
/// let now = Instant::now(); // the shell's clock; the broker never reads one
/// let args = json!({"url": "https://example.com/skill.git"});
/// let snapshot = broker
///     .create(NewApproval::new(Domain::ToolPermission, "tool:c1", "skills.install", &args), now)
///     .unwrap();
/// assert!(matches!(broker.poll_event(), Some(ApprovalEvent::Created(_))));
/// broker.resolve(snapshot.id, "tool:c1", Resolution::Approve, now).unwrap();
/// let spend = ApprovalMatch::new(Domain::ToolPermission, "tool:c1", "skills.install", &args);
/// assert!(broker.consume_approved(&spend, now + Duration::from_secs(1)));
/// assert!(!broker.consume_approved(&spend, now + Duration::from_secs(1))); // once only
/// ```
#[derive(Debug)]
pub struct ApprovalBroker {
    limits: Limits,
    next_id: u64,
    entries: BTreeMap<ApprovalId, Entry>,
    per_scope: HashMap<String, usize>,
    events: VecDeque<ApprovalEvent>,
}

impl ApprovalBroker {
    /// An empty broker enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            next_id: 1,
            entries: BTreeMap::new(),
            per_scope: HashMap::new(),
            events: VecDeque::new(),
        }
    }

    /// The limits it enforces.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Creates an approval bound to `request`'s domain, scope, method, canonical-args hash (and dedup key),
    /// expiring at `now + timeout`, and queues [`ApprovalEvent::Created`].
    ///
    /// With a dedup key, a pending approval with the same whole binding is returned instead (no event, no new
    /// expiry); it is found before the caps are checked, as in DeepChat.
    ///
    /// # Errors
    /// [`ApprovalError::InvalidField`] (empty or too long scope/method/key, zero or too long timeout),
    /// [`ApprovalError::InvalidArgs`], [`ApprovalError::InvalidDisplay`], [`ApprovalError::ScopeFull`],
    /// [`ApprovalError::BrokerFull`]. Nothing is created on error (approvals due at `now` are still expired).
    pub fn create(
        &mut self,
        request: NewApproval<'_>,
        now: Instant,
    ) -> Result<ApprovalSnapshot, ApprovalError> {
        self.handle_timeout(now);
        let limits = &self.limits;
        check_field("scope", request.scope, limits.max_scope_bytes)?;
        check_field("method", request.method, limits.max_method_bytes)?;
        if let Some(key) = request.dedup_key {
            check_field("dedup_key", key, limits.max_dedup_key_bytes)?;
        }
        let timeout = request.timeout.unwrap_or(limits.default_timeout);
        if timeout.is_zero() {
            return Err(invalid_field("timeout", "zero"));
        }
        if timeout > limits.max_timeout {
            return Err(invalid_field("timeout", "too_large"));
        }
        let expires_at = now
            .checked_add(timeout)
            .ok_or_else(|| invalid_field("timeout", "too_large"))?;
        let args_hash =
            ArgsHash::of(request.args, &limits.args).map_err(ApprovalError::InvalidArgs)?;
        let display_limits = CanonicalLimits {
            max_bytes: limits.max_display_bytes,
            ..limits.args
        };
        canonical_json(&request.display, &display_limits).map_err(ApprovalError::InvalidDisplay)?;

        if request.dedup_key.is_some() {
            let existing = self.entries.iter().find(|(_, entry)| {
                entry.status == ApprovalStatus::Pending
                    && entry.binds(
                        request.domain,
                        request.scope,
                        request.method,
                        &args_hash,
                        request.dedup_key,
                    )
            });
            if let Some((id, entry)) = existing {
                return Ok(entry.snapshot(*id));
            }
        }
        let in_scope = self.per_scope.get(request.scope).copied().unwrap_or(0);
        if in_scope >= limits.max_pending_per_scope {
            return Err(ApprovalError::ScopeFull {
                limit: limits.max_pending_per_scope,
            });
        }
        if self.entries.len() >= limits.max_pending_total {
            return Err(ApprovalError::BrokerFull {
                limit: limits.max_pending_total,
            });
        }

        let id = ApprovalId::from_u64(self.next_id);
        self.next_id += 1;
        let entry = Entry {
            domain: request.domain,
            scope: request.scope.to_owned(),
            method: request.method.to_owned(),
            args_hash,
            dedup_key: request.dedup_key.map(str::to_owned),
            display: request.display,
            consumption: request.consumption,
            status: ApprovalStatus::Pending,
            created_at: now,
            expires_at,
        };
        let snapshot = entry.snapshot(id);
        *self.per_scope.entry(entry.scope.clone()).or_insert(0) += 1;
        self.entries.insert(id, entry);
        self.events
            .push_back(ApprovalEvent::Created(snapshot.clone()));
        Ok(snapshot)
    }

    /// A renderer's answer to the pending approval `id` in `scope`.
    ///
    /// `Approve` makes it `Approved` (queues `Decided{Approved}`), to be consumed once. `Deny` removes it
    /// (queues `Decided{Denied{Renderer}}`, `Removed`).
    ///
    /// # Errors
    /// [`ApprovalError::NotFound`] if no live approval has this id in this scope (never created, already
    /// denied/cancelled/expired/consumed, or another scope); [`ApprovalError::Expired`] if its expiry is at or
    /// before `now` (it is expired now, with its events); [`ApprovalError::AlreadyResolved`] if it is already
    /// approved.
    pub fn resolve(
        &mut self,
        id: ApprovalId,
        scope: &str,
        resolution: Resolution,
        now: Instant,
    ) -> Result<(), ApprovalError> {
        let found = self
            .entries
            .get(&id)
            .filter(|entry| entry.scope == scope)
            .map(|entry| (entry.expires_at <= now, entry.status));
        self.handle_timeout(now);
        let Some((expired, status)) = found else {
            return Err(ApprovalError::NotFound);
        };
        if expired {
            return Err(ApprovalError::Expired);
        }
        if status == ApprovalStatus::Approved {
            return Err(ApprovalError::AlreadyResolved);
        }
        match resolution {
            Resolution::Approve => {
                if let Some(entry) = self.entries.get_mut(&id) {
                    entry.status = ApprovalStatus::Approved;
                }
                self.events.push_back(ApprovalEvent::Decided {
                    id,
                    scope: scope.to_owned(),
                    decision: Decision::Approved,
                });
            }
            Resolution::Deny => self.decide_and_remove(
                id,
                Decision::Denied {
                    reason: DenyReason::Renderer,
                },
            ),
        }
        Ok(())
    }

    /// Spends the oldest approved [`Consumption::Match`] approval whose binding equals `spend` (domain, scope,
    /// method, canonical-args hash, dedup key, and id if given). `true` exactly once per approval.
    ///
    /// `false` if none matches — including arguments that cannot be canonicalized (they cannot have been
    /// approved) and approvals whose expiry is at or before `now` (they are expired first).
    pub fn consume_approved(&mut self, spend: &ApprovalMatch<'_>, now: Instant) -> bool {
        self.handle_timeout(now);
        let Ok(hash) = ArgsHash::of(spend.args, &self.limits.args) else {
            return false;
        };
        let found = self.entries.iter().find(|(id, entry)| {
            entry.status == ApprovalStatus::Approved
                && entry.consumption == Consumption::Match
                && spend.id.is_none_or(|wanted| wanted == **id)
                && entry.binds(
                    spend.domain,
                    spend.scope,
                    spend.method,
                    &hash,
                    spend.dedup_key,
                )
        });
        let Some((&id, _)) = found else {
            return false;
        };
        self.remove(id);
        true
    }

    /// Spends the approved [`Consumption::Waiter`] approval `id` for its one waiter. `true` exactly once.
    ///
    /// `false` if `id` is not live, not approved, not a waiter approval, or expired at `now`.
    pub fn take_approved(&mut self, id: ApprovalId, now: Instant) -> bool {
        self.handle_timeout(now);
        match self.entries.get(&id) {
            Some(entry)
                if entry.status == ApprovalStatus::Approved
                    && entry.consumption == Consumption::Waiter =>
            {
                self.remove(id);
                true
            }
            _ => false,
        }
    }

    /// Denies the live approval `id` in `scope` with `reason` (its owner gave up, e.g. its request was dropped).
    /// A pending one queues `Decided{Denied{reason}}`; an approved-unconsumed one is only removed (it keeps its
    /// `Approved` decision but can no longer be spent).
    ///
    /// # Errors
    /// [`ApprovalError::NotFound`] if no live approval has this id in this scope.
    pub fn cancel(
        &mut self,
        id: ApprovalId,
        scope: &str,
        reason: DenyReason,
    ) -> Result<(), ApprovalError> {
        match self.entries.get(&id) {
            Some(entry) if entry.scope == scope => {
                self.deny_or_drop(id, reason);
                Ok(())
            }
            _ => Err(ApprovalError::NotFound),
        }
    }

    /// Denies every live approval in `scope` with `reason`, as [`cancel`](Self::cancel) does for one. Later
    /// resolution of any of them fails with `not_found`.
    pub fn cancel_scope(&mut self, scope: &str, reason: DenyReason) {
        self.cancel_where(|entry| entry.scope == scope, reason);
    }

    /// Denies every live approval of `domain` with `reason` (e.g. CLI mutations when the last renderer goes).
    pub fn cancel_domain(&mut self, domain: Domain, reason: DenyReason) {
        self.cancel_where(|entry| entry.domain == domain, reason);
    }

    /// Removes every approval (shutdown): pending ones are decided [`Decision::Cancelled`].
    pub fn clear(&mut self) {
        let ids: Vec<ApprovalId> = self.entries.keys().copied().collect();
        for id in ids {
            self.decide_or_drop(id, Decision::Cancelled);
        }
    }

    /// Expires every approval whose expiry is at or before `now`: pending ones are decided
    /// [`Decision::Expired`], approved-unconsumed ones are removed.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<ApprovalId> = self
            .entries
            .iter()
            .filter(|(_, entry)| entry.expires_at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.decide_or_drop(id, Decision::Expired);
        }
    }

    /// The earliest expiry of a live approval: when the driver should call [`handle_timeout`](Self::handle_timeout).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.entries.values().map(|entry| entry.expires_at).min()
    }

    /// The next queued event, oldest first; `None` when drained.
    pub fn poll_event(&mut self) -> Option<ApprovalEvent> {
        self.events.pop_front()
    }

    /// The live approval `id`, if any (it may be due to expire; call `handle_timeout` first for a fresh view).
    pub fn get(&self, id: ApprovalId) -> Option<ApprovalSnapshot> {
        self.entries.get(&id).map(|entry| entry.snapshot(id))
    }

    /// Live approvals not yet expired at `now`, oldest first (pending and approved-unconsumed).
    pub fn pending(&self, now: Instant) -> Vec<ApprovalSnapshot> {
        self.entries
            .iter()
            .filter(|(_, entry)| entry.expires_at > now)
            .map(|(id, entry)| entry.snapshot(*id))
            .collect()
    }

    /// How many live approvals `scope` holds (what the per-scope cap counts).
    pub fn live_in_scope(&self, scope: &str) -> usize {
        self.per_scope.get(scope).copied().unwrap_or(0)
    }

    /// How many live approvals the broker holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the broker holds no live approval.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn cancel_where(&mut self, matches: impl Fn(&Entry) -> bool, reason: DenyReason) {
        let ids: Vec<ApprovalId> = self
            .entries
            .iter()
            .filter(|(_, entry)| matches(entry))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.deny_or_drop(id, reason);
        }
    }

    fn deny_or_drop(&mut self, id: ApprovalId, reason: DenyReason) {
        self.decide_or_drop(id, Decision::Denied { reason });
    }

    /// A pending approval gets `decision` and is removed; an approved one (already decided) is only removed.
    fn decide_or_drop(&mut self, id: ApprovalId, decision: Decision) {
        match self.entries.get(&id).map(|entry| entry.status) {
            Some(ApprovalStatus::Pending) => self.decide_and_remove(id, decision),
            Some(ApprovalStatus::Approved) => self.remove(id),
            None => {}
        }
    }

    fn decide_and_remove(&mut self, id: ApprovalId, decision: Decision) {
        if let Some(entry) = self.entries.get(&id) {
            self.events.push_back(ApprovalEvent::Decided {
                id,
                scope: entry.scope.clone(),
                decision,
            });
        }
        self.remove(id);
    }

    fn remove(&mut self, id: ApprovalId) {
        let Some(entry) = self.entries.remove(&id) else {
            return;
        };
        if let Some(count) = self.per_scope.get_mut(&entry.scope) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_scope.remove(&entry.scope);
            }
        }
        self.events.push_back(ApprovalEvent::Removed {
            id,
            scope: entry.scope,
        });
    }
}

fn invalid_field(field: &'static str, problem: &'static str) -> ApprovalError {
    ApprovalError::InvalidField { field, problem }
}

fn check_field(field: &'static str, value: &str, max_bytes: usize) -> Result<(), ApprovalError> {
    if value.trim().is_empty() {
        return Err(invalid_field(field, "empty"));
    }
    if value.len() > max_bytes {
        return Err(invalid_field(field, "too_long"));
    }
    Ok(())
}
