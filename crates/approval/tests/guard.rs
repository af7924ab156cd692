//! `CliMutationGuard` on a paused runtime: fail closed without a renderer, one approval per request (never
//! deduplicated), denial when the request or its connection goes away, timeout, cap, bad arguments.
//! Scenarios follow DeepChat's `test/main/cli/mutationGuard.test.ts`.

use std::time::Duration;

use agentwire_approval::{
    ApprovalError, ApprovalEvent, ApprovalSnapshot, Approvals, CanonicalError, CliMutation,
    CliMutationGuard, Decision, DenyReason, GuardError, Limits, Renderer, RendererEvent,
    Resolution,
};
use serde_json::json;
use tokio::time::Instant;

fn setup() -> (Approvals, CliMutationGuard, Renderer) {
    let approvals = Approvals::new(Limits::default());
    let renderer = approvals.attach_renderer();
    let guard = CliMutationGuard::new(approvals.clone());
    (approvals, guard, renderer)
}

/// Waits for the next `Created` event, skipping others.
async fn shown(renderer: &mut Renderer) -> ApprovalSnapshot {
    loop {
        match renderer.next_event().await {
            Some(RendererEvent::Approval(ApprovalEvent::Created(snapshot))) => return snapshot,
            Some(_) => continue,
            None => panic!("renderer channel closed"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn with_no_renderer_a_mutation_is_denied_at_once_and_creates_nothing() {
    let approvals = Approvals::new(Limits::default());
    let guard = CliMutationGuard::new(approvals.clone());
    let start = Instant::now();
    let args = json!({"name": "x"});
    let error = guard
        .authorize(CliMutation::new("conn", "skills.install", &args))
        .await
        .unwrap_err();
    assert_eq!(error, GuardError::NoRenderer);
    assert_eq!(error.code(), "approval_denied");
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "no waiting for the timeout"
    );
    assert!(approvals.pending().is_empty());

    // A renderer that came and went does not count either.
    drop(approvals.attach_renderer());
    let again = guard
        .authorize(CliMutation::new("conn", "skills.install", &args))
        .await;
    assert_eq!(again, Err(GuardError::NoRenderer));
}

#[tokio::test(start_paused = true)]
async fn an_approved_request_resumes_and_the_renderer_sees_only_display_data() {
    let (approvals, guard, mut renderer) = setup();
    let args = json!({"url": "https://example.com/skill.git?token=hunter2"});
    let display = json!({"host": "example.com", "queryPresent": true});
    let mutation =
        CliMutation::new("conn-1", "skills.installFromUrl", &args).display(display.clone());
    let (authorized, id) = tokio::join!(guard.authorize(mutation), async {
        let snapshot = shown(&mut renderer).await;
        assert_eq!(snapshot.display, display);
        assert_eq!(snapshot.scope, "cli:conn-1");
        assert_eq!(snapshot.method, "skills.installFromUrl");
        assert!(!format!("{snapshot:?}").contains("hunter2"));
        renderer
            .resolve(snapshot.id, &snapshot.scope, Resolution::Approve)
            .unwrap();
        snapshot.id
    });
    assert_eq!(authorized.unwrap().approval_id(), id);
    assert!(
        approvals.pending().is_empty(),
        "spent by the request it resumed"
    );
    assert_eq!(
        renderer.resolve(id, "cli:conn-1", Resolution::Approve),
        Err(ApprovalError::NotFound)
    );
}

#[tokio::test(start_paused = true)]
async fn identical_concurrent_mutations_get_separate_approvals_and_one_allow_resumes_one() {
    let (approvals, guard, mut renderer) = setup();
    let args = json!({"key": "theme", "value": "dark"});
    let first = tokio::spawn({
        let guard = guard.clone();
        let args = args.clone();
        async move {
            guard
                .authorize(CliMutation::new("conn", "settings.set", &args))
                .await
        }
    });
    let second = tokio::spawn({
        let guard = guard.clone();
        let args = args.clone();
        async move {
            guard
                .authorize(CliMutation::new("conn", "settings.set", &args))
                .await
        }
    });
    let a = shown(&mut renderer).await;
    let b = shown(&mut renderer).await;
    assert_ne!(a.id, b.id);
    assert_eq!(
        a.args_hash, b.args_hash,
        "same binding, still two approvals"
    );

    renderer
        .resolve(a.id, &a.scope, Resolution::Approve)
        .unwrap();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.approval_id(), a.id);
    assert!(!second.is_finished());
    let live: Vec<_> = approvals.pending().iter().map(|s| s.id).collect();
    assert_eq!(
        live,
        vec![b.id],
        "the second request still waits for its own answer"
    );

    renderer.resolve(b.id, &b.scope, Resolution::Deny).unwrap();
    let denied = second.await.unwrap().unwrap_err();
    assert_eq!(
        denied,
        GuardError::Denied {
            reason: DenyReason::Renderer
        }
    );
    assert_eq!(denied.code(), "approval_denied");
}

#[tokio::test(start_paused = true)]
async fn a_closed_connection_denies_its_pending_mutations_only() {
    let (approvals, guard, mut renderer) = setup();
    let args = json!({});
    let closing = tokio::spawn({
        let guard = guard.clone();
        let args = args.clone();
        async move {
            guard
                .authorize(CliMutation::new("a", "mcp.add", &args))
                .await
        }
    });
    let staying = tokio::spawn({
        let guard = guard.clone();
        let args = args.clone();
        async move {
            guard
                .authorize(CliMutation::new("b", "mcp.add", &args))
                .await
        }
    });
    let on_a = shown(&mut renderer).await;
    let on_b = shown(&mut renderer).await;
    guard.connection_closed("a");
    assert_eq!(
        closing.await.unwrap(),
        Err(GuardError::Denied {
            reason: DenyReason::ConnectionClosed
        })
    );
    assert_eq!(
        renderer.resolve(on_a.id, &on_a.scope, Resolution::Approve),
        Err(ApprovalError::NotFound)
    );
    renderer
        .resolve(on_b.id, &on_b.scope, Resolution::Approve)
        .unwrap();
    assert!(staying.await.unwrap().is_ok());
    assert!(approvals.pending().is_empty());
}

#[tokio::test(start_paused = true)]
async fn dropping_the_request_denies_its_approval_and_later_resolution_fails() {
    let (approvals, guard, mut renderer) = setup();
    let args = json!({"provider": "p"});
    let request = tokio::spawn({
        let guard = guard.clone();
        let args = args.clone();
        async move {
            guard
                .authorize(CliMutation::new("conn", "providers.remove", &args))
                .await
        }
    });
    let snapshot = shown(&mut renderer).await;
    request.abort();
    assert!(request.await.unwrap_err().is_cancelled());
    let mut seen = Vec::new();
    while let Some(RendererEvent::Approval(event)) = renderer.try_next_event() {
        seen.push(event);
    }
    assert_eq!(
        seen,
        vec![
            ApprovalEvent::Decided {
                id: snapshot.id,
                scope: "cli:conn".into(),
                decision: Decision::Denied {
                    reason: DenyReason::ConnectionClosed
                }
            },
            ApprovalEvent::Removed {
                id: snapshot.id,
                scope: "cli:conn".into()
            }
        ]
    );
    assert_eq!(
        renderer.resolve(snapshot.id, &snapshot.scope, Resolution::Approve),
        Err(ApprovalError::NotFound)
    );
    assert!(approvals.pending().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_request_times_out_at_its_timeout_and_leaves_nothing_replayable() {
    let (approvals, guard, mut renderer) = setup();
    let args = json!({});
    let start = Instant::now();
    let result = guard
        .authorize(
            CliMutation::new("conn", "skills.install", &args).timeout(Duration::from_secs(10)),
        )
        .await;
    let waited = start.elapsed();
    assert_eq!(result, Err(GuardError::Timeout));
    assert_eq!(result.unwrap_err().code(), "approval_timeout");
    assert!(
        waited >= Duration::from_secs(10) && waited <= Duration::from_millis(10_001),
        "{waited:?}"
    );
    let snapshot = shown(&mut renderer).await;
    assert_eq!(
        renderer.resolve(snapshot.id, &snapshot.scope, Resolution::Approve),
        Err(ApprovalError::NotFound)
    );
    assert!(approvals.pending().is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_default_timeout_is_two_minutes() {
    let (_approvals, guard, _renderer) = setup();
    let start = Instant::now();
    let result = guard
        .authorize(CliMutation::new("conn", "m.x", &json!({})))
        .await;
    assert_eq!(result, Err(GuardError::Timeout));
    assert!(start.elapsed() >= Duration::from_secs(120));
}

#[tokio::test(start_paused = true)]
async fn the_renderer_leaving_denies_a_waiting_mutation_at_once() {
    let (_approvals, guard, mut renderer) = setup();
    let args = json!({});
    let start = Instant::now();
    let (result, ()) = tokio::join!(
        guard.authorize(CliMutation::new("conn", "m.x", &args)),
        async {
            let _ = shown(&mut renderer).await;
            drop(renderer);
        }
    );
    assert_eq!(
        result,
        Err(GuardError::Denied {
            reason: DenyReason::NoRenderer
        })
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn shutdown_reports_cancellation_not_denial() {
    let (approvals, guard, mut renderer) = setup();
    let args = json!({});
    let (result, ()) = tokio::join!(
        guard.authorize(CliMutation::new("conn", "m.x", &args)),
        async {
            let _ = shown(&mut renderer).await;
            approvals.clear();
        }
    );
    let error = result.unwrap_err();
    assert_eq!(error, GuardError::Cancelled);
    assert_eq!(error.code(), "cancelled");
}

#[tokio::test(start_paused = true)]
async fn sixty_four_pending_mutations_per_connection_and_the_sixty_fifth_is_rate_limited() {
    let (approvals, guard, _renderer) = setup();
    let mut waiting = Vec::new();
    for n in 0..64 {
        let guard = guard.clone();
        waiting.push(tokio::spawn(async move {
            let args = json!({ "n": n });
            guard
                .authorize(CliMutation::new("conn", "m.x", &args))
                .await
        }));
    }
    while approvals.pending().len() < 64 {
        tokio::task::yield_now().await;
    }
    let args = json!({ "n": 64 });
    let error = guard
        .authorize(CliMutation::new("conn", "m.x", &args))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        GuardError::Rejected(ApprovalError::ScopeFull { limit: 64 })
    );
    assert_eq!(error.code(), "rate_limited");
    // Another connection has its own budget.
    let other = tokio::spawn({
        let guard = guard.clone();
        async move {
            guard
                .authorize(CliMutation::new("other", "m.x", &json!({})))
                .await
        }
    });
    while approvals.pending().len() < 65 {
        tokio::task::yield_now().await;
    }
    guard.connection_closed("conn");
    for task in waiting {
        assert!(matches!(
            task.await.unwrap(),
            Err(GuardError::Denied { .. })
        ));
    }
    guard.connection_closed("other");
    assert!(other.await.unwrap().is_err());
}

#[tokio::test(start_paused = true)]
async fn arguments_over_the_canonical_limits_are_invalid_request() {
    let (approvals, guard, _renderer) = setup();
    let deep = (0..65).fold(json!(0), |inner, _| json!([inner]));
    let error = guard
        .authorize(CliMutation::new("conn", "m.x", &deep))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        GuardError::Rejected(ApprovalError::InvalidArgs(CanonicalError::TooDeep {
            limit: 64
        }))
    );
    assert_eq!(error.code(), "invalid_request");
    assert!(approvals.pending().is_empty());
}

mod properties {
    use std::collections::BTreeSet;

    use agentwire_approval::ApprovalId;
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// N identical concurrent mutations, a random subset approved, the rest denied, some requests dropped
        /// first: exactly the approved, still-open requests resume, each with its own approval.
        #[test]
        fn one_allow_resumes_exactly_one_identical_mutation(
            answers in prop::collection::vec((any::<bool>(), prop::bool::weighted(0.2)), 1..12)
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("runtime");
            runtime.block_on(async {
                let (approvals, guard, mut renderer) = setup();
                let args = json!({"same": "args"});
                let tasks: Vec<_> = answers
                    .iter()
                    .map(|_| {
                        let guard = guard.clone();
                        let args = args.clone();
                        tokio::spawn(async move {
                            guard.authorize(CliMutation::new("conn", "settings.set", &args)).await
                        })
                    })
                    .collect();
                let mut shown_ids = Vec::new();
                for _ in &answers {
                    shown_ids.push(shown(&mut renderer).await);
                }
                let ids: BTreeSet<ApprovalId> = shown_ids.iter().map(|s| s.id).collect();
                prop_assert_eq!(ids.len(), answers.len(), "never deduplicated");

                let mut expected_ok = BTreeSet::new();
                for ((approve, drop_first), (task, snapshot)) in
                    answers.iter().zip(tasks.iter().zip(&shown_ids))
                {
                    if *drop_first {
                        task.abort();
                        while approvals.pending().iter().any(|live| live.id == snapshot.id) {
                            tokio::task::yield_now().await;
                        }
                        let late = renderer.resolve(snapshot.id, &snapshot.scope, Resolution::Approve);
                        prop_assert_eq!(late, Err(ApprovalError::NotFound));
                        continue;
                    }
                    let resolution = if *approve { Resolution::Approve } else { Resolution::Deny };
                    renderer.resolve(snapshot.id, &snapshot.scope, resolution).expect("live approval");
                    if *approve {
                        expected_ok.insert(snapshot.id);
                    }
                }
                let mut resumed = BTreeSet::new();
                for task in tasks {
                    if let Ok(Ok(authorized)) = task.await {
                        prop_assert!(resumed.insert(authorized.approval_id()), "one approval resumed twice");
                    }
                }
                prop_assert_eq!(resumed, expected_ok);
                prop_assert!(approvals.pending().is_empty());
                Ok(())
            })?;
        }
    }
}
