//! Property tests: random interleavings of create / resolve / consume / take / cancel / cancel_scope /
//! time advance / handle_timeout / clear against a reference model, on virtual time.
//!
//! Checked after every step: the broker's return values and events equal the model's, and, from the observed
//! history alone, an approval is never consumed twice, never resolved after its cancellation or expiry, never
//! approved without a successful `resolve(Approve)`, and no scope ever holds more than its cap.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use agentwire_approval::{
    ApprovalBroker, ApprovalError, ApprovalEvent, ApprovalId, ApprovalMatch, Consumption, Decision,
    DenyReason, Domain, Limits, NewApproval, Resolution,
};
use proptest::prelude::*;
use serde_json::{Value, json};

const SCOPES: [&str; 3] = ["s0", "s1", "s2"];
const METHODS: [&str; 2] = ["m0", "m1"];
const KEYS: [&str; 2] = ["k0", "k1"];
const PER_SCOPE: usize = 3;
const TOTAL: usize = 7;

#[derive(Clone, Debug)]
enum Op {
    Create {
        scope: usize,
        method: usize,
        args: u8,
        key: Option<usize>,
        waiter: bool,
        timeout_ms: u64,
    },
    Resolve {
        pick: usize,
        approve: bool,
        wrong_scope: bool,
    },
    Consume {
        scope: usize,
        method: usize,
        args: u8,
        key: Option<usize>,
    },
    Take {
        pick: usize,
    },
    Cancel {
        pick: usize,
    },
    CancelScope {
        scope: usize,
    },
    Advance {
        ms: u64,
    },
    Timeout,
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..SCOPES.len(), 0..METHODS.len(), 0u8..3, prop::option::of(0..KEYS.len()), any::<bool>(), 1u64..3_000)
            .prop_map(|(scope, method, args, key, waiter, timeout_ms)| Op::Create { scope, method, args, key, waiter, timeout_ms }),
        5 => (any::<usize>(), any::<bool>(), prop::bool::weighted(0.1))
            .prop_map(|(pick, approve, wrong_scope)| Op::Resolve { pick, approve, wrong_scope }),
        3 => (0..SCOPES.len(), 0..METHODS.len(), 0u8..3, prop::option::of(0..KEYS.len()))
            .prop_map(|(scope, method, args, key)| Op::Consume { scope, method, args, key }),
        2 => any::<usize>().prop_map(|pick| Op::Take { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        1 => (0..SCOPES.len()).prop_map(|scope| Op::CancelScope { scope }),
        3 => (0u64..2_000).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Timeout),
        1 => Just(Op::Clear),
    ]
}

fn args_value(args: u8) -> Value {
    json!({ "v": args, "nested": { "b": [args], "a": null } })
}

#[derive(Clone, Debug)]
struct ModelEntry {
    scope: usize,
    method: usize,
    args: u8,
    key: Option<usize>,
    waiter: bool,
    approved: bool,
    expires_at: Instant,
}

/// The reference: what the broker should hold and emit.
struct Model {
    live: BTreeMap<ApprovalId, ModelEntry>,
    next_id: u64,
}

impl Model {
    fn new() -> Self {
        Self {
            live: BTreeMap::new(),
            next_id: 1,
        }
    }

    fn scope_of(&self, id: ApprovalId) -> Option<&'static str> {
        self.live.get(&id).map(|entry| SCOPES[entry.scope])
    }

    fn remove(&mut self, id: ApprovalId, events: &mut Vec<ApprovalEvent>) {
        if let Some(entry) = self.live.remove(&id) {
            events.push(ApprovalEvent::Removed {
                id,
                scope: SCOPES[entry.scope].to_owned(),
            });
        }
    }

    fn decide_or_drop(
        &mut self,
        id: ApprovalId,
        decision: Decision,
        events: &mut Vec<ApprovalEvent>,
    ) {
        let Some(entry) = self.live.get(&id) else {
            return;
        };
        if !entry.approved {
            events.push(ApprovalEvent::Decided {
                id,
                scope: SCOPES[entry.scope].to_owned(),
                decision,
            });
        }
        self.remove(id, events);
    }

    fn expire(&mut self, now: Instant, events: &mut Vec<ApprovalEvent>) {
        let due: Vec<ApprovalId> = self
            .live
            .iter()
            .filter(|(_, entry)| entry.expires_at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.decide_or_drop(id, Decision::Expired, events);
        }
    }
}

/// What the history says so far, independent of the model.
#[derive(Default)]
struct History {
    decided: HashMap<ApprovalId, Decision>,
    removed: HashMap<ApprovalId, ()>,
    consumed: HashMap<ApprovalId, u32>,
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let limits = Limits {
        max_pending_per_scope: PER_SCOPE,
        max_pending_total: TOTAL,
        ..Limits::default()
    };
    let mut broker = ApprovalBroker::new(limits);
    let mut model = Model::new();
    let mut history = History::default();
    let mut created: Vec<ApprovalId> = Vec::new();
    let mut now = Instant::now();

    for op in ops {
        let mut expected: Vec<ApprovalEvent> = Vec::new();
        // Which approval a successful resolve(Approve) in this step approved, and which ones this step spent.
        let mut approved_now: Option<ApprovalId> = None;
        let mut spent_now: Option<ApprovalId> = None;
        let pick = |pick: usize| -> Option<ApprovalId> {
            (!created.is_empty()).then(|| created[pick % created.len()])
        };
        match op {
            Op::Create {
                scope,
                method,
                args,
                key,
                waiter,
                timeout_ms,
            } => {
                let value = args_value(args);
                let mut request = NewApproval::new(
                    Domain::ToolPermission,
                    SCOPES[scope],
                    METHODS[method],
                    &value,
                )
                .timeout(Duration::from_millis(timeout_ms))
                .consumption(if waiter {
                    Consumption::Waiter
                } else {
                    Consumption::Match
                });
                if let Some(key) = key {
                    request = request.dedup_key(KEYS[key]);
                }
                let result = broker.create(request, now);

                model.expire(now, &mut expected);
                let duplicate = key.and_then(|_| {
                    model.live.iter().find(|(_, e)| {
                        !e.approved
                            && e.scope == scope
                            && e.method == method
                            && e.args == args
                            && e.key == key
                    })
                });
                let in_scope = model.live.values().filter(|e| e.scope == scope).count();
                if let Some((&id, _)) = duplicate {
                    prop_assert_eq!(result.map(|s| s.id), Ok(id));
                } else if in_scope >= PER_SCOPE {
                    prop_assert_eq!(
                        result.map(|s| s.id),
                        Err(ApprovalError::ScopeFull { limit: PER_SCOPE })
                    );
                } else if model.live.len() >= TOTAL {
                    prop_assert_eq!(
                        result.map(|s| s.id),
                        Err(ApprovalError::BrokerFull { limit: TOTAL })
                    );
                } else {
                    let id = ApprovalId::from_u64(model.next_id);
                    model.next_id += 1;
                    let snapshot =
                        result.map_err(|e| TestCaseError::fail(format!("create failed: {e}")))?;
                    prop_assert_eq!(snapshot.id, id);
                    prop_assert_eq!(snapshot.expires_at, now + Duration::from_millis(timeout_ms));
                    model.live.insert(
                        id,
                        ModelEntry {
                            scope,
                            method,
                            args,
                            key,
                            waiter,
                            approved: false,
                            expires_at: snapshot.expires_at,
                        },
                    );
                    expected.push(ApprovalEvent::Created(snapshot));
                    created.push(id);
                }
            }
            Op::Resolve {
                pick: index,
                approve,
                wrong_scope,
            } => {
                let Some(id) = pick(index) else { continue };
                let real_scope = model.scope_of(id).unwrap_or("s0");
                let scope = if wrong_scope { "elsewhere" } else { real_scope };
                let resolution = if approve {
                    Resolution::Approve
                } else {
                    Resolution::Deny
                };
                let result = broker.resolve(id, scope, resolution, now);

                let found = model
                    .live
                    .get(&id)
                    .filter(|_| !wrong_scope)
                    .map(|e| (e.expires_at <= now, e.approved));
                model.expire(now, &mut expected);
                let want = match found {
                    None => Err(ApprovalError::NotFound),
                    Some((true, _)) => Err(ApprovalError::Expired),
                    Some((false, true)) => Err(ApprovalError::AlreadyResolved),
                    Some((false, false)) => Ok(()),
                };
                prop_assert_eq!(&result, &want);
                if result.is_ok() {
                    // History: never resolved after a denial, cancellation or expiry.
                    prop_assert!(
                        !history.removed.contains_key(&id),
                        "resolved after removal: {id:?}"
                    );
                    prop_assert!(!history.decided.contains_key(&id), "resolved twice: {id:?}");
                    if approve {
                        if let Some(entry) = model.live.get_mut(&id) {
                            entry.approved = true;
                        }
                        approved_now = Some(id);
                        expected.push(ApprovalEvent::Decided {
                            id,
                            scope: real_scope.to_owned(),
                            decision: Decision::Approved,
                        });
                    } else {
                        model.decide_or_drop(
                            id,
                            Decision::Denied {
                                reason: DenyReason::Renderer,
                            },
                            &mut expected,
                        );
                    }
                }
            }
            Op::Consume {
                scope,
                method,
                args,
                key,
            } => {
                let value = args_value(args);
                let mut spend = ApprovalMatch::new(
                    Domain::ToolPermission,
                    SCOPES[scope],
                    METHODS[method],
                    &value,
                );
                if let Some(key) = key {
                    spend = spend.dedup_key(KEYS[key]);
                }
                let consumed = broker.consume_approved(&spend, now);

                model.expire(now, &mut expected);
                let target = model
                    .live
                    .iter()
                    .find(|(_, e)| {
                        e.approved
                            && !e.waiter
                            && e.scope == scope
                            && e.method == method
                            && e.args == args
                            && e.key == key
                    })
                    .map(|(id, _)| *id);
                prop_assert_eq!(consumed, target.is_some());
                if let Some(id) = target {
                    model.remove(id, &mut expected);
                    spent_now = Some(id);
                }
            }
            Op::Take { pick: index } => {
                let Some(id) = pick(index) else { continue };
                let taken = broker.take_approved(id, now);
                model.expire(now, &mut expected);
                let want = model.live.get(&id).is_some_and(|e| e.approved && e.waiter);
                prop_assert_eq!(taken, want);
                if want {
                    model.remove(id, &mut expected);
                    spent_now = Some(id);
                }
            }
            Op::Cancel { pick: index } => {
                let Some(id) = pick(index) else { continue };
                let scope = model.scope_of(id).unwrap_or("s0");
                let result = broker.cancel(id, scope, DenyReason::ConnectionClosed);
                let live = model.live.contains_key(&id);
                prop_assert_eq!(result.is_ok(), live);
                model.decide_or_drop(
                    id,
                    Decision::Denied {
                        reason: DenyReason::ConnectionClosed,
                    },
                    &mut expected,
                );
            }
            Op::CancelScope { scope } => {
                broker.cancel_scope(SCOPES[scope], DenyReason::ScopeCancelled);
                let ids: Vec<ApprovalId> = model
                    .live
                    .iter()
                    .filter(|(_, e)| e.scope == scope)
                    .map(|(id, _)| *id)
                    .collect();
                for id in ids {
                    model.decide_or_drop(
                        id,
                        Decision::Denied {
                            reason: DenyReason::ScopeCancelled,
                        },
                        &mut expected,
                    );
                }
            }
            Op::Advance { ms } => now += Duration::from_millis(ms),
            Op::Timeout => {
                broker.handle_timeout(now);
                model.expire(now, &mut expected);
            }
            Op::Clear => {
                broker.clear();
                let ids: Vec<ApprovalId> = model.live.keys().copied().collect();
                for id in ids {
                    model.decide_or_drop(id, Decision::Cancelled, &mut expected);
                }
            }
        }

        let events: Vec<ApprovalEvent> = std::iter::from_fn(|| broker.poll_event()).collect();
        prop_assert_eq!(&events, &expected);

        // History invariants, from the observed events alone.
        for event in &events {
            match event {
                ApprovalEvent::Created(snapshot) => {
                    prop_assert!(!history.decided.contains_key(&snapshot.id));
                    prop_assert!(!history.removed.contains_key(&snapshot.id));
                }
                ApprovalEvent::Decided { id, decision, .. } => {
                    prop_assert!(!history.removed.contains_key(id), "decided after removal");
                    prop_assert!(
                        history.decided.insert(*id, *decision).is_none(),
                        "decided twice"
                    );
                    if *decision == Decision::Approved {
                        prop_assert_eq!(
                            approved_now,
                            Some(*id),
                            "approved without a resolve(Approve)"
                        );
                    }
                }
                ApprovalEvent::Removed { id, .. } => {
                    prop_assert!(history.removed.insert(*id, ()).is_none(), "removed twice");
                }
                _ => {}
            }
        }
        if let Some(id) = spent_now {
            let count = history.consumed.entry(id).or_insert(0);
            *count += 1;
            prop_assert_eq!(*count, 1, "consumed twice");
            prop_assert_eq!(
                history.decided.get(&id),
                Some(&Decision::Approved),
                "consumed without approval"
            );
        }
        for scope in SCOPES {
            prop_assert!(broker.live_in_scope(scope) <= PER_SCOPE);
        }
        prop_assert!(broker.len() <= TOTAL);
        prop_assert_eq!(broker.len(), model.live.len());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_interleavings_keep_every_approval_invariant(ops in prop::collection::vec(op(), 1..120)) {
        run(ops)?;
    }
}
