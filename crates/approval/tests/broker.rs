//! The sans-IO broker rule by rule, on virtual time (a fixed base `Instant` plus offsets; the broker never reads
//! a clock).

use std::time::{Duration, Instant};

use agentwire_approval::{
    ApprovalBroker, ApprovalError, ApprovalEvent, ApprovalId, ApprovalMatch, ApprovalStatus,
    ArgsHash, CanonicalError, CanonicalLimits, Consumption, Decision, DenyReason, Domain, Limits,
    NewApproval, Resolution,
};
use serde_json::{Value, json};

const TOOL: Domain = Domain::ToolPermission;
const MS: Duration = Duration::from_millis(1);
const NS: Duration = Duration::from_nanos(1);

/// A broker on virtual time with helpers that drain its events.
struct Harness {
    broker: ApprovalBroker,
    t0: Instant,
}

impl Harness {
    fn new() -> Self {
        Self::with(Limits::default())
    }

    fn with(limits: Limits) -> Self {
        Self {
            broker: ApprovalBroker::new(limits),
            t0: Instant::now(),
        }
    }

    fn at(&self, offset: Duration) -> Instant {
        self.t0 + offset
    }

    fn create(&mut self, scope: &str, method: &str, args: &Value) -> ApprovalId {
        let now = self.t0;
        let id = self
            .broker
            .create(NewApproval::new(TOOL, scope, method, args), now)
            .expect("valid approval")
            .id;
        self.events();
        id
    }

    fn events(&mut self) -> Vec<ApprovalEvent> {
        std::iter::from_fn(|| self.broker.poll_event()).collect()
    }
}

fn decided(id: ApprovalId, scope: &str, decision: Decision) -> ApprovalEvent {
    ApprovalEvent::Decided {
        id,
        scope: scope.to_owned(),
        decision,
    }
}

fn removed(id: ApprovalId, scope: &str) -> ApprovalEvent {
    ApprovalEvent::Removed {
        id,
        scope: scope.to_owned(),
    }
}

fn spend<'a>(scope: &'a str, method: &'a str, args: &'a Value) -> ApprovalMatch<'a> {
    ApprovalMatch::new(TOOL, scope, method, args)
}

#[test]
fn create_binds_method_args_hash_scope_and_expiry_and_announces_it() {
    let mut h = Harness::new();
    let args = json!({"b": 2, "a": [1, {"y": null, "x": "v"}]});
    let display = json!({"summary": "install a skill"});
    let snapshot = h
        .broker
        .create(
            NewApproval::new(TOOL, "tool:c1", "skills.install", &args).display(display.clone()),
            h.t0,
        )
        .unwrap();
    assert_eq!(snapshot.scope, "tool:c1");
    assert_eq!(snapshot.method, "skills.install");
    assert_eq!(snapshot.domain, TOOL);
    assert_eq!(
        snapshot.args_hash,
        ArgsHash::of(&args, &CanonicalLimits::default()).unwrap()
    );
    assert_eq!(snapshot.status, ApprovalStatus::Pending);
    assert_eq!(snapshot.created_at, h.t0);
    assert_eq!(snapshot.expires_at, h.t0 + Duration::from_secs(120));
    assert_eq!(snapshot.display, display);
    assert_eq!(h.events(), vec![ApprovalEvent::Created(snapshot.clone())]);
    assert_eq!(h.broker.get(snapshot.id), Some(snapshot));
}

#[test]
fn display_data_is_what_the_caller_passed_never_the_arguments() {
    let mut h = Harness::new();
    let args = json!({"apiKey": "sk-secret-value", "url": "https://x.test/?sig=secret"});
    let snapshot = h
        .broker
        .create(NewApproval::new(TOOL, "s", "providers.setKey", &args), h.t0)
        .unwrap();
    assert_eq!(snapshot.display, Value::Null);
    let shown = format!("{snapshot:?} {:?}", h.events());
    assert!(!shown.contains("secret"), "{shown}");
}

#[test]
fn display_data_is_bounded_at_sixteen_kib() {
    let mut h = Harness::new();
    let args = json!({});
    // A string of n bytes is n + 2 canonical bytes.
    let fits = Value::String("d".repeat(16 * 1024 - 2));
    let over = Value::String("d".repeat(16 * 1024 - 1));
    assert!(
        h.broker
            .create(NewApproval::new(TOOL, "s", "m", &args).display(fits), h.t0)
            .is_ok()
    );
    let error = h
        .broker
        .create(NewApproval::new(TOOL, "s", "m", &args).display(over), h.t0)
        .unwrap_err();
    assert_eq!(
        error,
        ApprovalError::InvalidDisplay(CanonicalError::TooLarge { limit: 16 * 1024 })
    );
    assert_eq!(error.code(), "invalid_request");
}

#[test]
fn arguments_over_a_canonical_limit_are_invalid_request_and_create_nothing() {
    let mut h = Harness::new();
    let deep = (0..65).fold(json!(1), |inner, _| json!([inner]));
    let error = h
        .broker
        .create(NewApproval::new(TOOL, "s", "m", &deep), h.t0)
        .unwrap_err();
    assert_eq!(
        error,
        ApprovalError::InvalidArgs(CanonicalError::TooDeep { limit: 64 })
    );
    assert_eq!(error.code(), "invalid_request");
    assert!(h.broker.is_empty());
    assert!(h.events().is_empty());
}

#[test]
fn binding_fields_and_timeouts_are_checked_at_their_limits() {
    let mut h = Harness::new();
    let args = json!(null);
    let mut attempt = |scope: &str, method: &str, key: Option<&str>, timeout: Option<Duration>| {
        let mut request = NewApproval::new(TOOL, scope, method, &args);
        if let Some(key) = key {
            request = request.dedup_key(key);
        }
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        h.broker.create(request, h.t0).map(|_| ())
    };
    let invalid = |field, problem| Err(ApprovalError::InvalidField { field, problem });
    assert_eq!(attempt(&"s".repeat(512), "m", None, None), Ok(()));
    assert_eq!(
        attempt(&"s".repeat(513), "m", None, None),
        invalid("scope", "too_long")
    );
    assert_eq!(attempt(" ", "m", None, None), invalid("scope", "empty"));
    assert_eq!(attempt("s", &"m".repeat(256), None, None), Ok(()));
    assert_eq!(
        attempt("s", &"m".repeat(257), None, None),
        invalid("method", "too_long")
    );
    assert_eq!(attempt("s", "", None, None), invalid("method", "empty"));
    assert_eq!(attempt("s", "m", Some(&"k".repeat(65_536)), None), Ok(()));
    assert_eq!(
        attempt("s", "m", Some(&"k".repeat(65_537)), None),
        invalid("dedup_key", "too_long")
    );
    assert_eq!(
        attempt("s", "m", Some(""), None),
        invalid("dedup_key", "empty")
    );
    assert_eq!(
        attempt("s", "m", None, Some(Duration::ZERO)),
        invalid("timeout", "zero")
    );
    assert_eq!(
        attempt("s", "m", None, Some(Duration::from_secs(30 * 60))),
        Ok(())
    );
    assert_eq!(
        attempt("s", "m", None, Some(Duration::from_secs(30 * 60) + NS)),
        invalid("timeout", "too_large")
    );
}

#[test]
fn approval_is_consumed_exactly_once_by_the_same_binding() {
    let mut h = Harness::new();
    let args = json!({"path": "/tmp/x"});
    let id = h.create("tool:c1", "fs.write", &args);
    h.broker
        .resolve(id, "tool:c1", Resolution::Approve, h.at(MS))
        .unwrap();
    assert_eq!(h.events(), vec![decided(id, "tool:c1", Decision::Approved)]);
    assert_eq!(h.broker.get(id).unwrap().status, ApprovalStatus::Approved);

    // Same args in another key order are the same canonical binding.
    let reordered: Value = serde_json::from_str(r#"{ "path" : "/tmp/x" }"#).unwrap();
    assert!(
        h.broker
            .consume_approved(&spend("tool:c1", "fs.write", &reordered), h.at(2 * MS))
    );
    assert_eq!(h.events(), vec![removed(id, "tool:c1")]);
    assert!(
        !h.broker
            .consume_approved(&spend("tool:c1", "fs.write", &args), h.at(2 * MS))
    );
    assert_eq!(
        h.broker
            .resolve(id, "tool:c1", Resolution::Approve, h.at(3 * MS)),
        Err(ApprovalError::NotFound)
    );
}

#[test]
fn consumption_needs_every_part_of_the_binding_to_match() {
    let mut h = Harness::new();
    let args = json!({"n": 1});
    let id = h.create("s1", "m1", &args);
    h.broker
        .resolve(id, "s1", Resolution::Approve, h.t0)
        .unwrap();
    let other_args = json!({"n": 2});
    let misses = [
        spend("s2", "m1", &args),
        spend("s1", "m2", &args),
        spend("s1", "m1", &other_args),
        ApprovalMatch::new(Domain::CliMutation, "s1", "m1", &args),
        spend("s1", "m1", &args).dedup_key("k"),
        spend("s1", "m1", &args).id(ApprovalId::from_u64(id.as_u64() + 1)),
    ];
    for miss in &misses {
        assert!(!h.broker.consume_approved(miss, h.t0), "{miss:?}");
    }
    assert!(
        h.broker
            .consume_approved(&spend("s1", "m1", &args).id(id), h.t0)
    );
}

#[test]
fn nothing_is_consumable_before_a_renderer_approves() {
    let mut h = Harness::new();
    let args = json!([1, 2]);
    let id = h.create("s", "m", &args);
    assert!(!h.broker.consume_approved(&spend("s", "m", &args), h.t0));
    assert_eq!(h.broker.get(id).unwrap().status, ApprovalStatus::Pending);
    assert!(h.events().is_empty());
}

#[test]
fn deny_removes_the_approval_and_later_answers_fail() {
    let mut h = Harness::new();
    let args = json!({});
    let id = h.create("s", "m", &args);
    h.broker.resolve(id, "s", Resolution::Deny, h.t0).unwrap();
    assert_eq!(
        h.events(),
        vec![
            decided(
                id,
                "s",
                Decision::Denied {
                    reason: DenyReason::Renderer
                }
            ),
            removed(id, "s")
        ]
    );
    for resolution in [Resolution::Approve, Resolution::Deny] {
        assert_eq!(
            h.broker.resolve(id, "s", resolution, h.t0),
            Err(ApprovalError::NotFound)
        );
    }
    assert!(!h.broker.consume_approved(&spend("s", "m", &args), h.t0));
}

#[test]
fn resolution_from_another_scope_is_not_found_and_leaves_it_pending() {
    let mut h = Harness::new();
    let id = h.create("cli:a", "m", &json!({}));
    assert_eq!(
        h.broker.resolve(id, "cli:b", Resolution::Approve, h.t0),
        Err(ApprovalError::NotFound)
    );
    assert_eq!(
        h.broker.resolve(
            ApprovalId::from_u64(999),
            "cli:a",
            Resolution::Approve,
            h.t0
        ),
        Err(ApprovalError::NotFound)
    );
    assert_eq!(h.broker.get(id).unwrap().status, ApprovalStatus::Pending);
}

#[test]
fn a_second_answer_to_an_approved_approval_is_a_conflict() {
    let mut h = Harness::new();
    let id = h.create("s", "m", &json!({}));
    h.broker
        .resolve(id, "s", Resolution::Approve, h.t0)
        .unwrap();
    for resolution in [Resolution::Approve, Resolution::Deny] {
        let error = h.broker.resolve(id, "s", resolution, h.t0).unwrap_err();
        assert_eq!(error, ApprovalError::AlreadyResolved);
        assert_eq!(error.code(), "conflict");
    }
}

#[test]
fn expiry_is_exact_a_nanosecond_before_is_in_time_at_expiry_is_too_late() {
    let timeout = Duration::from_secs(120);
    let mut h = Harness::new();
    let early = h.create("s", "m", &json!(1));
    let late = h.create("s", "m", &json!(2));
    h.broker
        .resolve(early, "s", Resolution::Approve, h.at(timeout - NS))
        .unwrap();
    h.events();
    let error = h
        .broker
        .resolve(late, "s", Resolution::Approve, h.at(timeout))
        .unwrap_err();
    assert_eq!(error, ApprovalError::Expired);
    assert_eq!(error.code(), "approval_timeout");
    // Both expired at `timeout`: the pending one decided Expired, the approved-unconsumed one just removed.
    assert_eq!(
        h.events(),
        vec![
            removed(early, "s"),
            decided(late, "s", Decision::Expired),
            removed(late, "s")
        ]
    );
    assert!(
        !h.broker
            .consume_approved(&spend("s", "m", &json!(1)), h.at(timeout))
    );
    assert_eq!(
        h.broker
            .resolve(late, "s", Resolution::Approve, h.at(timeout)),
        Err(ApprovalError::NotFound)
    );
}

#[test]
fn handle_timeout_expires_at_the_deadline_and_poll_timeout_names_it() {
    let mut h = Harness::new();
    let args = json!({});
    let long = h.create("s", "m", &args);
    let short = h
        .broker
        .create(
            NewApproval::new(TOOL, "s", "m", &args).timeout(10 * MS),
            h.t0,
        )
        .unwrap()
        .id;
    h.events();
    assert_eq!(h.broker.poll_timeout(), Some(h.at(10 * MS)));
    h.broker.handle_timeout(h.at(10 * MS - NS));
    assert!(h.events().is_empty());
    assert_eq!(h.broker.pending(h.at(10 * MS - NS)).len(), 2);
    assert_eq!(h.broker.pending(h.at(10 * MS)).len(), 1);
    h.broker.handle_timeout(h.at(10 * MS));
    assert_eq!(
        h.events(),
        vec![decided(short, "s", Decision::Expired), removed(short, "s")]
    );
    assert_eq!(
        h.broker.poll_timeout(),
        Some(h.at(Duration::from_secs(120)))
    );
    assert_eq!(h.broker.get(long).unwrap().status, ApprovalStatus::Pending);
    h.broker.handle_timeout(h.at(Duration::from_secs(120)));
    assert_eq!(h.broker.poll_timeout(), None);
}

#[test]
fn consumption_at_or_after_expiry_fails() {
    let mut h = Harness::new();
    let args = json!({});
    let id = h.create("s", "m", &args);
    h.broker
        .resolve(id, "s", Resolution::Approve, h.t0)
        .unwrap();
    assert!(
        !h.broker
            .consume_approved(&spend("s", "m", &args), h.at(Duration::from_secs(120)))
    );
}

#[test]
fn cancel_scope_denies_only_that_scope_and_later_resolution_fails() {
    let mut h = Harness::new();
    let args = json!({});
    let pending = h.create("tool:c1", "m", &args);
    let approved = h.create("tool:c1", "m", &args);
    let elsewhere = h.create("tool:c2", "m", &args);
    h.broker
        .resolve(approved, "tool:c1", Resolution::Approve, h.t0)
        .unwrap();
    h.events();
    h.broker.cancel_scope("tool:c1", DenyReason::ScopeCancelled);
    assert_eq!(
        h.events(),
        vec![
            decided(
                pending,
                "tool:c1",
                Decision::Denied {
                    reason: DenyReason::ScopeCancelled
                }
            ),
            removed(pending, "tool:c1"),
            removed(approved, "tool:c1"),
        ]
    );
    assert_eq!(
        h.broker
            .resolve(pending, "tool:c1", Resolution::Approve, h.t0),
        Err(ApprovalError::NotFound)
    );
    assert!(
        !h.broker
            .consume_approved(&spend("tool:c1", "m", &args), h.t0)
    );
    assert_eq!(
        h.broker.get(elsewhere).unwrap().status,
        ApprovalStatus::Pending
    );
    assert_eq!(h.broker.live_in_scope("tool:c1"), 0);
}

#[test]
fn cancel_one_needs_its_scope_and_reports_the_reason() {
    let mut h = Harness::new();
    let id = h.create("cli:7", "m", &json!({}));
    assert_eq!(
        h.broker.cancel(id, "cli:8", DenyReason::ConnectionClosed),
        Err(ApprovalError::NotFound)
    );
    h.broker
        .cancel(id, "cli:7", DenyReason::ConnectionClosed)
        .unwrap();
    assert_eq!(
        h.events(),
        vec![
            decided(
                id,
                "cli:7",
                Decision::Denied {
                    reason: DenyReason::ConnectionClosed
                }
            ),
            removed(id, "cli:7")
        ]
    );
    assert_eq!(
        h.broker.cancel(id, "cli:7", DenyReason::ConnectionClosed),
        Err(ApprovalError::NotFound)
    );
}

#[test]
fn cancel_domain_touches_only_that_domain() {
    let mut h = Harness::new();
    let args = json!({});
    let tool = h.create("s", "m", &args);
    let cli = h
        .broker
        .create(NewApproval::new(Domain::CliMutation, "s", "m", &args), h.t0)
        .unwrap()
        .id;
    h.events();
    h.broker
        .cancel_domain(Domain::CliMutation, DenyReason::NoRenderer);
    assert_eq!(
        h.events(),
        vec![
            decided(
                cli,
                "s",
                Decision::Denied {
                    reason: DenyReason::NoRenderer
                }
            ),
            removed(cli, "s")
        ]
    );
    assert!(h.broker.get(tool).is_some());
}

#[test]
fn clear_cancels_everything() {
    let mut h = Harness::new();
    let a = h.create("s1", "m", &json!(1));
    let b = h.create("s2", "m", &json!(2));
    h.broker
        .resolve(b, "s2", Resolution::Approve, h.t0)
        .unwrap();
    h.events();
    h.broker.clear();
    assert_eq!(
        h.events(),
        vec![
            decided(a, "s1", Decision::Cancelled),
            removed(a, "s1"),
            removed(b, "s2")
        ]
    );
    assert!(h.broker.is_empty());
    assert_eq!(h.broker.poll_timeout(), None);
}

#[test]
fn sixty_four_per_scope_and_the_sixty_fifth_is_rate_limited() {
    let mut h = Harness::new();
    let args = json!({});
    let ids: Vec<ApprovalId> = (0..64).map(|_| h.create("cli:c", "m", &args)).collect();
    assert_eq!(h.broker.live_in_scope("cli:c"), 64);
    let error = h
        .broker
        .create(NewApproval::new(TOOL, "cli:c", "m", &args), h.t0)
        .unwrap_err();
    assert_eq!(error, ApprovalError::ScopeFull { limit: 64 });
    assert_eq!(error.code(), "rate_limited");
    assert!(h.events().is_empty());
    // Other scopes are not affected; freeing one slot makes room again.
    h.create("cli:other", "m", &args);
    h.broker
        .resolve(ids[0], "cli:c", Resolution::Deny, h.t0)
        .unwrap();
    h.create("cli:c", "m", &args);
    // Expired approvals stop counting at the create that comes after their expiry.
    assert!(
        h.broker
            .create(
                NewApproval::new(TOOL, "cli:c", "m", &args),
                h.at(Duration::from_secs(120))
            )
            .is_ok()
    );
    assert_eq!(h.broker.live_in_scope("cli:c"), 1);
}

#[test]
fn the_broker_wide_cap_holds_too() {
    let mut h = Harness::with(Limits {
        max_pending_total: 3,
        ..Limits::default()
    });
    let args = json!({});
    for scope in ["a", "b", "c"] {
        h.create(scope, "m", &args);
    }
    let error = h
        .broker
        .create(NewApproval::new(TOOL, "d", "m", &args), h.t0)
        .unwrap_err();
    assert_eq!(error, ApprovalError::BrokerFull { limit: 3 });
    assert_eq!(error.code(), "rate_limited");
}

#[test]
fn dedup_key_reuses_the_pending_approval_with_the_same_binding_only() {
    let mut h = Harness::new();
    let args = json!({"q": 1});
    let request = || NewApproval::new(TOOL, "tool:c", "search", &args).dedup_key("server-1");
    let first = h.broker.create(request(), h.t0).unwrap();
    h.events();
    let again = h.broker.create(request(), h.at(MS)).unwrap();
    assert_eq!(again, first);
    assert!(
        h.events().is_empty(),
        "a deduplicated create announces nothing"
    );

    let other_args = json!({"q": 2});
    let other = h
        .broker
        .create(
            NewApproval::new(TOOL, "tool:c", "search", &other_args).dedup_key("server-1"),
            h.t0,
        )
        .unwrap();
    assert_ne!(other.id, first.id);
    let other_key = h
        .broker
        .create(
            NewApproval::new(TOOL, "tool:c", "search", &args).dedup_key("server-2"),
            h.t0,
        )
        .unwrap();
    assert_ne!(other_key.id, first.id);

    // Once approved it is no longer pending: the next request is a new approval.
    h.broker
        .resolve(first.id, "tool:c", Resolution::Approve, h.t0)
        .unwrap();
    let after = h.broker.create(request(), h.t0).unwrap();
    assert_ne!(after.id, first.id);
}

#[test]
fn without_a_dedup_key_identical_requests_are_separate_approvals() {
    let mut h = Harness::new();
    let args = json!({"same": true});
    let first = h.create("cli:c", "settings.update", &args);
    let second = h.create("cli:c", "settings.update", &args);
    assert_ne!(first, second);
    h.broker
        .resolve(first, "cli:c", Resolution::Approve, h.t0)
        .unwrap();
    assert_eq!(
        h.broker.get(second).unwrap().status,
        ApprovalStatus::Pending
    );
    assert!(
        h.broker
            .consume_approved(&spend("cli:c", "settings.update", &args), h.t0)
    );
    assert!(
        !h.broker
            .consume_approved(&spend("cli:c", "settings.update", &args), h.t0)
    );
}

#[test]
fn a_full_scope_still_returns_its_deduplicated_pending_approval() {
    let mut h = Harness::with(Limits {
        max_pending_per_scope: 1,
        ..Limits::default()
    });
    let args = json!({});
    let first = h
        .broker
        .create(NewApproval::new(TOOL, "s", "m", &args).dedup_key("k"), h.t0)
        .unwrap();
    let again = h
        .broker
        .create(NewApproval::new(TOOL, "s", "m", &args).dedup_key("k"), h.t0)
        .unwrap();
    assert_eq!(again.id, first.id);
}

#[test]
fn waiter_approvals_are_spent_only_by_take_approved_once() {
    let mut h = Harness::new();
    let args = json!({});
    let id = h
        .broker
        .create(
            NewApproval::new(Domain::CliMutation, "cli:c", "m", &args)
                .consumption(Consumption::Waiter),
            h.t0,
        )
        .unwrap()
        .id;
    assert!(!h.broker.take_approved(id, h.t0), "not approved yet");
    h.broker
        .resolve(id, "cli:c", Resolution::Approve, h.t0)
        .unwrap();
    let by_match = ApprovalMatch::new(Domain::CliMutation, "cli:c", "m", &args);
    assert!(!h.broker.consume_approved(&by_match, h.t0));
    assert!(h.broker.take_approved(id, h.t0));
    assert!(!h.broker.take_approved(id, h.t0));
}

#[test]
fn match_approvals_cannot_be_taken_by_a_waiter() {
    let mut h = Harness::new();
    let id = h.create("s", "m", &json!({}));
    h.broker
        .resolve(id, "s", Resolution::Approve, h.t0)
        .unwrap();
    assert!(!h.broker.take_approved(id, h.t0));
}

#[test]
fn ids_are_never_reused_and_pending_lists_oldest_first() {
    let mut h = Harness::new();
    let a = h.create("s", "m", &json!(1));
    h.broker.resolve(a, "s", Resolution::Deny, h.t0).unwrap();
    let b = h.create("s", "m", &json!(2));
    let c = h.create("t", "m", &json!(3));
    assert!(a < b && b < c);
    let listed: Vec<ApprovalId> = h.broker.pending(h.t0).iter().map(|s| s.id).collect();
    assert_eq!(listed, vec![b, c]);
    assert_eq!(h.broker.len(), 2);
}
