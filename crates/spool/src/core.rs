//! The sans-IO spool core: ownership records, quota accounting and expiry on virtual time.
//!
//! [`SpoolCore`] never touches a file or a clock. The tokio shell ([`crate::ArtifactSpool`]) asks it before every
//! create and every write (`begin`, `reserve`), tells it about publication, abort and deletion, and hands it
//! `now: Instant` for expiry. Every live artifact (being written or published) holds a reservation of its bytes
//! and one count in four scopes: its request, its connection, its owner, and the spool; the reservation is
//! released exactly once, on abort, delete or expiry.

use std::collections::HashMap;
use std::collections::hash_map::Entry as MapEntry;
use std::time::{Duration, Instant};

use crate::error::{QuotaKind, QuotaScope, SpoolError};
use crate::id::ArtifactId;
use crate::limits::Limits;
use crate::meta::{ArtifactMetadata, check_filename, check_key, check_mime_type, hex};

/// Who an artifact belongs to and what it is charged to.
///
/// `owner` decides who may describe, read and delete (DeepChat: the local user for human callers, the
/// conversation for agents); `connection_id` and `request_id` are quota and audit provenance.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Scope {
    /// Owner key, 1 to 256 bytes.
    pub owner: String,
    /// Connection the artifact was created over, 1 to 256 bytes.
    pub connection_id: String,
    /// Request that produces the artifact, 1 to 256 bytes.
    pub request_id: String,
}

impl Scope {
    /// A scope from its three keys (checked when the artifact is begun).
    pub fn new(
        owner: impl Into<String>,
        connection_id: impl Into<String>,
        request_id: impl Into<String>,
    ) -> Self {
        Self {
            owner: owner.into(),
            connection_id: connection_id.into(),
            request_id: request_id.into(),
        }
    }

    fn check(&self) -> Result<(), SpoolError> {
        check_key(
            &self.owner,
            "owner is empty, too long or has control characters",
        )?;
        check_key(
            &self.connection_id,
            "connection id is empty, too long or has control characters",
        )?;
        check_key(
            &self.request_id,
            "request id is empty, too long or has control characters",
        )
    }
}

/// Bytes and artifacts held in one scope.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Reserved bytes (written so far for pending artifacts, the size for published ones).
    pub bytes: u64,
    /// Live artifacts.
    pub count: u32,
}

/// What the creator says about an artifact, checked by [`SpoolCore::begin`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ArtifactSpec {
    /// The scope it is charged to.
    pub scope: Scope,
    /// `type/subtype`, no parameters, at most 255 bytes.
    pub mime_type: String,
    /// Suggested download name: no `/`, `\`, control characters; not `.`/`..`; at most 255 bytes.
    pub filename: String,
    /// Lifetime after publication; `None` = [`Limits::default_ttl`]. Must be non-zero and at most
    /// [`Limits::max_ttl`].
    pub ttl: Option<Duration>,
}

impl ArtifactSpec {
    /// A spec with the default TTL.
    pub fn new(scope: Scope, mime_type: impl Into<String>, filename: impl Into<String>) -> Self {
        Self {
            scope,
            mime_type: mime_type.into(),
            filename: filename.into(),
            ttl: None,
        }
    }

    /// Sets the lifetime after publication.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
}

/// A published artifact's record (internal state; [`ArtifactRecord::metadata`] is the wire view).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactRecord {
    /// The id.
    pub id: ArtifactId,
    /// Owner, connection and request.
    pub scope: Scope,
    /// Media type.
    pub mime_type: String,
    /// Suggested file name.
    pub filename: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the bytes.
    pub sha256: [u8; 32],
    /// Publication time, Unix milliseconds.
    pub created_at_ms: u64,
    /// Expiry time, Unix milliseconds.
    pub expires_at_ms: u64,
    /// Expiry on the monotonic clock: the artifact is gone from `expires_at` on (inclusive).
    pub expires_at: Instant,
}

impl ArtifactRecord {
    /// The public metadata: no path, no connection id.
    pub fn metadata(&self) -> ArtifactMetadata {
        ArtifactMetadata {
            id: self.id.to_string(),
            request_id: self.scope.request_id.clone(),
            owner: self.scope.owner.clone(),
            mime_type: self.mime_type.clone(),
            size: self.size,
            sha256: hex(&self.sha256),
            filename: self.filename.clone(),
            created_at: self.created_at_ms,
            expires_at: self.expires_at_ms,
        }
    }
}

#[derive(Debug)]
enum State {
    Pending {
        mime_type: String,
        filename: String,
        ttl: Duration,
    },
    Published(ArtifactRecord),
}

#[derive(Debug)]
struct Entry {
    scope: Scope,
    bytes: u64,
    state: State,
}

type RequestKey = (String, String, String);

fn request_key(scope: &Scope) -> RequestKey {
    (
        scope.owner.clone(),
        scope.connection_id.clone(),
        scope.request_id.clone(),
    )
}

/// Ownership, quotas and expiry of every live artifact; no IO, no clock.
///
/// Invariant (tested with random operation sequences): no scope's [`Usage`] ever exceeds its [`Limits`], and each
/// scope's usage is exactly the sum over its live artifacts, so released bytes and counts come back.
#[derive(Debug)]
pub struct SpoolCore {
    limits: Limits,
    entries: HashMap<ArtifactId, Entry>,
    total: Usage,
    requests: HashMap<RequestKey, Usage>,
    connections: HashMap<String, Usage>,
    owners: HashMap<String, Usage>,
}

impl SpoolCore {
    /// An empty core enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            entries: HashMap::new(),
            total: Usage::default(),
            requests: HashMap::new(),
            connections: HashMap::new(),
            owners: HashMap::new(),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Starts a pending artifact under `id`: checks the spec and takes one count in each scope.
    ///
    /// # Errors
    /// [`SpoolError::InvalidRequest`] for a bad spec or TTL, [`SpoolError::QuotaExceeded`] with
    /// [`QuotaKind::Count`] when a scope is full, [`SpoolError::Io`] (`AlreadyExists`) if `id` is live already.
    pub fn begin(&mut self, id: ArtifactId, spec: ArtifactSpec) -> Result<(), SpoolError> {
        spec.scope.check()?;
        check_mime_type(&spec.mime_type)?;
        check_filename(&spec.filename)?;
        let ttl = spec.ttl.unwrap_or(self.limits.default_ttl);
        if ttl.is_zero() {
            return Err(SpoolError::InvalidRequest("ttl is zero"));
        }
        if ttl > self.limits.max_ttl {
            return Err(SpoolError::InvalidRequest("ttl above the maximum"));
        }
        if self.entries.contains_key(&id) {
            return Err(SpoolError::Io(std::io::ErrorKind::AlreadyExists));
        }
        let usages = self.usages(&spec.scope);
        let caps = [
            (
                QuotaScope::Request,
                usages[0].count,
                self.limits.max_request_artifacts,
            ),
            (
                QuotaScope::Connection,
                usages[1].count,
                self.limits.max_connection_artifacts,
            ),
            (
                QuotaScope::Owner,
                usages[2].count,
                self.limits.max_owner_artifacts,
            ),
            (
                QuotaScope::Total,
                usages[3].count,
                self.limits.max_total_artifacts,
            ),
        ];
        for (scope, count, max) in caps {
            if count >= max {
                return Err(SpoolError::QuotaExceeded {
                    scope,
                    kind: QuotaKind::Count,
                });
            }
        }
        self.apply(&spec.scope, 0, 1);
        self.entries.insert(
            id,
            Entry {
                scope: spec.scope,
                bytes: 0,
                state: State::Pending {
                    mime_type: spec.mime_type,
                    filename: spec.filename,
                    ttl,
                },
            },
        );
        Ok(())
    }

    /// Reserves `additional` more bytes for the pending artifact `id`, before they are written.
    ///
    /// All five byte quotas are checked first; on failure nothing changes (the caller aborts the artifact).
    ///
    /// # Errors
    /// [`SpoolError::QuotaExceeded`] with [`QuotaKind::Bytes`]; [`SpoolError::WriterClosed`] if `id` is not pending.
    pub fn reserve(&mut self, id: &ArtifactId, additional: u64) -> Result<(), SpoolError> {
        let Some(entry) = self.entries.get(id) else {
            return Err(SpoolError::WriterClosed);
        };
        if !matches!(entry.state, State::Pending { .. }) {
            return Err(SpoolError::WriterClosed);
        }
        let over = |scope| SpoolError::QuotaExceeded {
            scope,
            kind: QuotaKind::Bytes,
        };
        let artifact_bytes = entry
            .bytes
            .checked_add(additional)
            .ok_or(over(QuotaScope::Artifact))?;
        if artifact_bytes > self.limits.max_artifact_bytes {
            return Err(over(QuotaScope::Artifact));
        }
        let usages = self.usages(&entry.scope);
        let caps = [
            (
                QuotaScope::Request,
                usages[0].bytes,
                self.limits.max_request_bytes,
            ),
            (
                QuotaScope::Connection,
                usages[1].bytes,
                self.limits.max_connection_bytes,
            ),
            (
                QuotaScope::Owner,
                usages[2].bytes,
                self.limits.max_owner_bytes,
            ),
            (
                QuotaScope::Total,
                usages[3].bytes,
                self.limits.max_total_bytes,
            ),
        ];
        for (scope, used, max) in caps {
            match used.checked_add(additional) {
                Some(after) if after <= max => {}
                _ => return Err(over(scope)),
            }
        }
        let scope = entry.scope.clone();
        self.apply(&scope, additional, 0);
        if let Some(entry) = self.entries.get_mut(id) {
            entry.bytes = artifact_bytes;
        }
        Ok(())
    }

    /// Drops the pending artifact `id` and releases its reservation. Returns false (and changes nothing) when `id`
    /// is not pending; a published artifact is removed only by [`SpoolCore::delete`] or expiry.
    pub fn abort(&mut self, id: &ArtifactId) -> bool {
        match self.entries.get(id) {
            Some(Entry {
                state: State::Pending { .. },
                ..
            }) => {
                self.remove(id);
                true
            }
            _ => false,
        }
    }

    /// Publishes the pending artifact `id`: its `size` must equal the bytes reserved for it.
    ///
    /// `created_at_ms` is the wall-clock time (Unix ms) for the metadata; `now` starts the TTL.
    ///
    /// # Errors
    /// [`SpoolError::WriterClosed`] if `id` is not pending; [`SpoolError::Corrupted`] if `size` differs from the
    /// reservation (the artifact stays pending; abort it).
    pub fn publish(
        &mut self,
        id: &ArtifactId,
        size: u64,
        sha256: [u8; 32],
        created_at_ms: u64,
        now: Instant,
    ) -> Result<ArtifactRecord, SpoolError> {
        let Some(entry) = self.entries.get_mut(id) else {
            return Err(SpoolError::WriterClosed);
        };
        let State::Pending {
            mime_type,
            filename,
            ttl,
        } = &entry.state
        else {
            return Err(SpoolError::WriterClosed);
        };
        if entry.bytes != size {
            return Err(SpoolError::Corrupted);
        }
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        // A monotonic clock too close to its end to add the TTL: expire at once rather than never.
        let expires_at = now.checked_add(*ttl).unwrap_or(now);
        let record = ArtifactRecord {
            id: *id,
            scope: entry.scope.clone(),
            mime_type: mime_type.clone(),
            filename: filename.clone(),
            size,
            sha256,
            created_at_ms,
            expires_at_ms: created_at_ms.saturating_add(ttl_ms),
            expires_at,
        };
        entry.state = State::Published(record.clone());
        Ok(record)
    }

    /// The published, unexpired artifact `id` if `owner` owns it.
    ///
    /// # Errors
    /// [`SpoolError::NotFound`] when it is unknown, pending, expired or another owner's.
    pub fn describe(
        &self,
        owner: &str,
        id: &ArtifactId,
        now: Instant,
    ) -> Result<&ArtifactRecord, SpoolError> {
        match self.entries.get(id) {
            Some(Entry {
                state: State::Published(record),
                ..
            }) if record.scope.owner == owner && now < record.expires_at => Ok(record),
            _ => Err(SpoolError::NotFound),
        }
    }

    /// Removes the published artifact `id` of `owner` and releases its reservation; the caller unlinks the file.
    ///
    /// # Errors
    /// [`SpoolError::NotFound`] as for [`SpoolCore::describe`].
    pub fn delete(
        &mut self,
        owner: &str,
        id: &ArtifactId,
        now: Instant,
    ) -> Result<ArtifactRecord, SpoolError> {
        let record = self.describe(owner, id, now)?.clone();
        self.remove(id);
        Ok(record)
    }

    /// Removes the published artifact `id` without an ownership check and returns whether it was there: for the
    /// producer's own cleanup when a request fails after some of its outputs were published (DeepChat's
    /// `discard`). Never expose it to callers, who must use [`SpoolCore::delete`].
    pub fn discard(&mut self, id: &ArtifactId) -> bool {
        match self.entries.get(id) {
            Some(Entry {
                state: State::Published(_),
                ..
            }) => {
                self.remove(id);
                true
            }
            _ => false,
        }
    }

    /// Removes every published artifact whose expiry is at or before `now` and returns their ids (the caller
    /// unlinks the files). Pending artifacts do not expire: their writer owns them until publish or abort.
    pub fn sweep_expired(&mut self, now: Instant) -> Vec<ArtifactId> {
        let expired: Vec<ArtifactId> = self
            .entries
            .iter()
            .filter_map(|(id, entry)| match &entry.state {
                State::Published(record) if record.expires_at <= now => Some(*id),
                _ => None,
            })
            .collect();
        for id in &expired {
            self.remove(id);
        }
        expired
    }

    /// Removes every entry, pending or published, and returns their ids (shutdown cleanup).
    pub fn clear(&mut self) -> Vec<ArtifactId> {
        let ids: Vec<ArtifactId> = self.entries.keys().copied().collect();
        for id in &ids {
            self.remove(id);
        }
        ids
    }

    /// Usage of the whole spool.
    pub fn total_usage(&self) -> Usage {
        self.total
    }

    /// Usage of one owner (zero when it has nothing).
    pub fn owner_usage(&self, owner: &str) -> Usage {
        self.owners.get(owner).copied().unwrap_or_default()
    }

    /// Usage of one connection.
    pub fn connection_usage(&self, connection_id: &str) -> Usage {
        self.connections
            .get(connection_id)
            .copied()
            .unwrap_or_default()
    }

    /// Usage of one request (of one owner and connection).
    pub fn request_usage(&self, scope: &Scope) -> Usage {
        self.requests
            .get(&request_key(scope))
            .copied()
            .unwrap_or_default()
    }

    /// Whether `id` is live (pending or published, expired or not).
    pub fn contains(&self, id: &ArtifactId) -> bool {
        self.entries.contains_key(id)
    }

    /// Live artifacts, pending and published.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is live.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The four usages of a scope: request, connection, owner, total.
    fn usages(&self, scope: &Scope) -> [Usage; 4] {
        [
            self.request_usage(scope),
            self.connection_usage(&scope.connection_id),
            self.owner_usage(&scope.owner),
            self.total,
        ]
    }

    fn remove(&mut self, id: &ArtifactId) {
        if let Some(entry) = self.entries.remove(id) {
            self.release(&entry.scope, entry.bytes);
        }
    }

    fn apply(&mut self, scope: &Scope, bytes: u64, count: u32) {
        let add = |usage: &mut Usage| {
            usage.bytes = usage.bytes.saturating_add(bytes);
            usage.count = usage.count.saturating_add(count);
        };
        add(&mut self.total);
        add(self.requests.entry(request_key(scope)).or_default());
        add(self
            .connections
            .entry(scope.connection_id.clone())
            .or_default());
        add(self.owners.entry(scope.owner.clone()).or_default());
    }

    fn release(&mut self, scope: &Scope, bytes: u64) {
        fn sub(usage: &mut Usage, bytes: u64) {
            usage.bytes = usage.bytes.saturating_sub(bytes);
            usage.count = usage.count.saturating_sub(1);
        }
        fn sub_in<K: std::hash::Hash + Eq>(map: &mut HashMap<K, Usage>, key: K, bytes: u64) {
            if let MapEntry::Occupied(mut slot) = map.entry(key) {
                sub(slot.get_mut(), bytes);
                if slot.get().count == 0 {
                    slot.remove();
                }
            }
        }
        sub(&mut self.total, bytes);
        sub_in(&mut self.requests, request_key(scope), bytes);
        sub_in(&mut self.connections, scope.connection_id.clone(), bytes);
        sub_in(&mut self.owners, scope.owner.clone(), bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(n: u8) -> ArtifactId {
        ArtifactId::from_random_bytes([n; 24])
    }

    fn spec(owner: &str, connection: &str, request: &str) -> ArtifactSpec {
        ArtifactSpec::new(Scope::new(owner, connection, request), "image/png", "a.png")
    }

    fn small_limits() -> Limits {
        Limits {
            max_artifact_bytes: 10,
            max_request_bytes: 15,
            max_connection_bytes: 20,
            max_owner_bytes: 25,
            max_total_bytes: 30,
            max_request_artifacts: 2,
            max_connection_artifacts: 3,
            max_owner_artifacts: 4,
            max_total_artifacts: 5,
            ..Limits::default()
        }
    }

    fn quota(error: SpoolError) -> (QuotaScope, QuotaKind) {
        match error {
            SpoolError::QuotaExceeded { scope, kind } => (scope, kind),
            other => panic!("expected a quota error, got {other:?}"),
        }
    }

    #[test]
    fn artifact_byte_quota_holds_at_the_limit_and_fails_one_past_it() {
        let mut core = SpoolCore::new(small_limits());
        core.begin(id(1), spec("o", "c", "r")).unwrap();
        core.reserve(&id(1), 10).unwrap();
        assert_eq!(
            quota(core.reserve(&id(1), 1).unwrap_err()),
            (QuotaScope::Artifact, QuotaKind::Bytes)
        );
        assert_eq!(
            core.total_usage(),
            Usage {
                bytes: 10,
                count: 1
            }
        );
    }

    #[test]
    fn each_byte_scope_is_enforced_at_its_boundary() {
        let mut core = SpoolCore::new(small_limits());
        // request: 15 bytes over two artifacts of one request.
        core.begin(id(1), spec("o", "c", "r")).unwrap();
        core.reserve(&id(1), 10).unwrap();
        core.begin(id(2), spec("o", "c", "r")).unwrap();
        core.reserve(&id(2), 5).unwrap();
        assert_eq!(
            quota(core.reserve(&id(2), 1).unwrap_err()).0,
            QuotaScope::Request
        );
        // connection: 20 bytes.
        core.begin(id(3), spec("o", "c", "r2")).unwrap();
        core.reserve(&id(3), 5).unwrap();
        assert_eq!(
            quota(core.reserve(&id(3), 1).unwrap_err()).0,
            QuotaScope::Connection
        );
        // owner: 25 bytes.
        core.begin(id(4), spec("o", "c2", "r")).unwrap();
        core.reserve(&id(4), 5).unwrap();
        assert_eq!(
            quota(core.reserve(&id(4), 1).unwrap_err()).0,
            QuotaScope::Owner
        );
        // total: 30 bytes.
        core.begin(id(5), spec("o2", "c3", "r")).unwrap();
        core.reserve(&id(5), 5).unwrap();
        assert_eq!(
            quota(core.reserve(&id(5), 1).unwrap_err()).0,
            QuotaScope::Total
        );
        assert_eq!(
            core.total_usage(),
            Usage {
                bytes: 30,
                count: 5
            }
        );
        // Releasing returns the bytes.
        assert!(core.abort(&id(1)));
        core.reserve(&id(5), 10).unwrap_err(); // artifact quota: 5 + 10 > 10
        core.reserve(&id(5), 5).unwrap();
        assert_eq!(
            core.total_usage(),
            Usage {
                bytes: 25,
                count: 4
            }
        );
    }

    #[test]
    fn each_count_scope_is_enforced_at_its_boundary() {
        let mut core = SpoolCore::new(small_limits());
        core.begin(id(1), spec("o", "c", "r")).unwrap();
        core.begin(id(2), spec("o", "c", "r")).unwrap();
        assert_eq!(
            quota(core.begin(id(3), spec("o", "c", "r")).unwrap_err()),
            (QuotaScope::Request, QuotaKind::Count)
        );
        core.begin(id(3), spec("o", "c", "r2")).unwrap();
        assert_eq!(
            quota(core.begin(id(4), spec("o", "c", "r3")).unwrap_err()).0,
            QuotaScope::Connection
        );
        core.begin(id(4), spec("o", "c2", "r")).unwrap();
        assert_eq!(
            quota(core.begin(id(5), spec("o", "c3", "r")).unwrap_err()).0,
            QuotaScope::Owner
        );
        core.begin(id(5), spec("o2", "c4", "r")).unwrap();
        assert_eq!(
            quota(core.begin(id(6), spec("o3", "c5", "r")).unwrap_err()).0,
            QuotaScope::Total
        );
        assert!(core.abort(&id(5)));
        core.begin(id(6), spec("o3", "c5", "r")).unwrap();
    }

    #[test]
    fn publish_describe_delete_and_expiry_on_virtual_time() {
        let start = Instant::now();
        let mut core = SpoolCore::new(Limits::default());
        core.begin(id(1), spec("alice", "c", "r").ttl(Duration::from_secs(60)))
            .unwrap();
        core.reserve(&id(1), 3).unwrap();
        assert_eq!(
            core.describe("alice", &id(1), start).unwrap_err().code(),
            "not_found"
        );
        assert!(matches!(
            core.publish(&id(1), 4, [0; 32], 1_000, start),
            Err(SpoolError::Corrupted)
        ));
        let record = core.publish(&id(1), 3, [7; 32], 1_000, start).unwrap();
        assert_eq!(record.expires_at_ms, 61_000);
        assert!(!core.abort(&id(1)), "a published artifact is not aborted");
        assert!(matches!(
            core.reserve(&id(1), 1),
            Err(SpoolError::WriterClosed)
        ));
        assert_eq!(core.describe("alice", &id(1), start).unwrap().size, 3);
        assert_eq!(
            core.describe("bob", &id(1), start).unwrap_err().code(),
            "not_found"
        );
        assert!(core.delete("bob", &id(1), start).is_err());
        let just_before = start + Duration::from_secs(60) - Duration::from_nanos(1);
        assert!(core.describe("alice", &id(1), just_before).is_ok());
        assert!(core.sweep_expired(just_before).is_empty());
        let at_expiry = start + Duration::from_secs(60);
        assert!(core.describe("alice", &id(1), at_expiry).is_err());
        assert!(core.delete("alice", &id(1), at_expiry).is_err());
        assert_eq!(core.sweep_expired(at_expiry), vec![id(1)]);
        assert!(core.is_empty());
        assert_eq!(core.total_usage(), Usage::default());

        core.begin(id(2), spec("alice", "c", "r")).unwrap();
        core.publish(&id(2), 0, [0; 32], 0, start).unwrap();
        assert_eq!(core.delete("alice", &id(2), start).unwrap().id, id(2));
        assert_eq!(core.owner_usage("alice"), Usage::default());

        core.begin(id(3), spec("alice", "c", "r")).unwrap();
        assert!(
            !core.discard(&id(3)),
            "a pending artifact belongs to its writer"
        );
        core.reserve(&id(3), 2).unwrap();
        core.publish(&id(3), 2, [0; 32], 0, start).unwrap();
        assert!(core.discard(&id(3)));
        assert!(!core.discard(&id(3)));
        assert_eq!(core.total_usage(), Usage::default());
    }

    #[test]
    fn bad_specs_are_invalid_requests() {
        let mut core = SpoolCore::new(Limits::default());
        let max = core.limits().max_ttl;
        assert!(core.begin(id(1), spec("o", "c", "r").ttl(max)).is_ok());
        for bad in [
            spec("o", "c", "r").ttl(max + Duration::from_millis(1)),
            spec("o", "c", "r").ttl(Duration::ZERO),
            spec("", "c", "r"),
            spec("o", "", "r"),
            spec("o", "c", ""),
            ArtifactSpec::new(Scope::new("o", "c", "r"), "png", "a.png"),
            ArtifactSpec::new(Scope::new("o", "c", "r"), "image/png", "../a.png"),
        ] {
            assert_eq!(
                core.begin(id(2), bad).unwrap_err().code(),
                "invalid_request"
            );
        }
        assert!(
            core.begin(id(1), spec("o", "c", "r")).is_err(),
            "duplicate id"
        );
        assert_eq!(core.len(), 1);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Begin {
            slot: u8,
            owner: u8,
            connection: u8,
            request: u8,
        },
        Write {
            slot: u8,
            bytes: u64,
        },
        Abort {
            slot: u8,
        },
        Publish {
            slot: u8,
        },
        Delete {
            slot: u8,
            owner: u8,
        },
        Advance {
            secs: u64,
        },
        Sweep,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..12u8, 0..3u8, 0..3u8, 0..2u8).prop_map(|(slot, owner, connection, request)| {
                Op::Begin {
                    slot,
                    owner,
                    connection,
                    request,
                }
            }),
            (0..12u8, 0..12u64).prop_map(|(slot, bytes)| Op::Write { slot, bytes }),
            (0..12u8).prop_map(|slot| Op::Abort { slot }),
            (0..12u8).prop_map(|slot| Op::Publish { slot }),
            (0..12u8, 0..3u8).prop_map(|(slot, owner)| Op::Delete { slot, owner }),
            (0..30u64).prop_map(|secs| Op::Advance { secs }),
            Just(Op::Sweep),
        ]
    }

    fn assert_invariants(core: &SpoolCore) {
        let limits = core.limits().clone();
        let mut total = Usage::default();
        let mut owners: HashMap<String, Usage> = HashMap::new();
        let mut connections: HashMap<String, Usage> = HashMap::new();
        let mut requests: HashMap<RequestKey, Usage> = HashMap::new();
        for entry in core.entries.values() {
            assert!(entry.bytes <= limits.max_artifact_bytes);
            for usage in [
                &mut total,
                owners.entry(entry.scope.owner.clone()).or_default(),
                connections
                    .entry(entry.scope.connection_id.clone())
                    .or_default(),
                requests.entry(request_key(&entry.scope)).or_default(),
            ] {
                usage.bytes += entry.bytes;
                usage.count += 1;
            }
        }
        assert_eq!(core.total, total);
        assert_eq!(core.owners, owners);
        assert_eq!(core.connections, connections);
        assert_eq!(core.requests, requests);
        assert!(total.bytes <= limits.max_total_bytes && total.count <= limits.max_total_artifacts);
        for usage in owners.values() {
            assert!(
                usage.bytes <= limits.max_owner_bytes && usage.count <= limits.max_owner_artifacts
            );
        }
        for usage in connections.values() {
            assert!(
                usage.bytes <= limits.max_connection_bytes
                    && usage.count <= limits.max_connection_artifacts
            );
        }
        for usage in requests.values() {
            assert!(
                usage.bytes <= limits.max_request_bytes
                    && usage.count <= limits.max_request_artifacts
            );
        }
    }

    proptest! {
        #[test]
        fn random_operations_never_exceed_a_quota_and_release_everything(
            ops in proptest::collection::vec(op(), 1..120)
        ) {
            let start = Instant::now();
            let mut now = start;
            let mut core = SpoolCore::new(small_limits());
            for op in ops {
                match op {
                    Op::Begin { slot, owner, connection, request } => {
                        let spec = spec(&format!("o{owner}"), &format!("c{connection}"), &format!("r{request}"))
                            .ttl(Duration::from_secs(20));
                        let before = core.total_usage();
                        if core.begin(id(slot), spec).is_err() {
                            prop_assert_eq!(core.total_usage(), before);
                        }
                    }
                    Op::Write { slot, bytes } => {
                        let before = core.total_usage();
                        match core.reserve(&id(slot), bytes) {
                            Ok(()) => prop_assert_eq!(core.total_usage().bytes, before.bytes + bytes),
                            Err(_) => prop_assert_eq!(core.total_usage(), before),
                        }
                    }
                    Op::Abort { slot } => {
                        core.abort(&id(slot));
                    }
                    Op::Publish { slot } => {
                        let size = core.entries.get(&id(slot)).map(|e| e.bytes).unwrap_or(0);
                        let _ = core.publish(&id(slot), size, [0; 32], 0, now);
                    }
                    Op::Delete { slot, owner } => {
                        let _ = core.delete(&format!("o{owner}"), &id(slot), now);
                    }
                    Op::Advance { secs } => now += Duration::from_secs(secs),
                    Op::Sweep => {
                        for expired in core.sweep_expired(now) {
                            prop_assert!(!core.contains(&expired));
                        }
                    }
                }
                assert_invariants(&core);
            }
            // Everything published expires; everything pending is aborted: all bytes and counts come back.
            let pending: Vec<ArtifactId> = core.entries.keys().copied().collect();
            for id in &pending {
                core.abort(id);
            }
            core.sweep_expired(now + Duration::from_secs(21));
            prop_assert!(core.is_empty());
            prop_assert_eq!(core.total_usage(), Usage::default());
            prop_assert!(core.owners.is_empty() && core.connections.is_empty() && core.requests.is_empty());
            // And the space is usable again up to the full limits.
            core.begin(id(200), spec("o", "c", "r")).unwrap();
            core.reserve(&id(200), 10).unwrap();
        }
    }
}
