//! The tokio shell on a paused runtime (virtual time): waits, expiry without a driver, renderers and their
//! events, cancellation and clearing.

use std::time::Duration;

use agentwire_approval::{
    ApprovalError, ApprovalEvent, ApprovalId, ApprovalMatch, ApprovalSnapshot, Approvals,
    Consumption, Decision, DenyReason, Domain, Limits, NewApproval, RENDERER_EVENT_BUFFER,
    Renderer, RendererEvent, Resolution,
};
use serde_json::{Value, json};
use tokio::time::Instant;

fn create(
    approvals: &Approvals,
    domain: Domain,
    scope: &str,
    args: &Value,
    consumption: Consumption,
) -> ApprovalSnapshot {
    approvals
        .create(NewApproval::new(domain, scope, "m", args).consumption(consumption))
        .expect("valid approval")
}

/// The next event a renderer gets, which must be an approval event.
async fn next(renderer: &mut Renderer) -> ApprovalEvent {
    match renderer.next_event().await {
        Some(RendererEvent::Approval(event)) => event,
        other => panic!("expected an approval event, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn wait_resolves_approved_and_spends_a_waiter_approval() {
    let approvals = Approvals::new(Limits::default());
    let renderer = approvals.attach_renderer();
    let args = json!({"a": 1});
    let snapshot = create(
        &approvals,
        Domain::CliMutation,
        "cli:1",
        &args,
        Consumption::Waiter,
    );
    let wait = tokio::spawn({
        let approvals = approvals.clone();
        async move { approvals.wait(snapshot.id).await }
    });
    tokio::task::yield_now().await;
    renderer
        .resolve(snapshot.id, "cli:1", Resolution::Approve)
        .unwrap();
    assert_eq!(wait.await.unwrap(), Ok(Decision::Approved));
    assert!(approvals.pending().is_empty(), "spent by its waiter");
    assert_eq!(
        renderer.resolve(snapshot.id, "cli:1", Resolution::Approve),
        Err(ApprovalError::NotFound)
    );
}

#[tokio::test(start_paused = true)]
async fn an_approval_approved_before_the_wait_is_still_delivered_once() {
    let approvals = Approvals::new(Limits::default());
    let renderer = approvals.attach_renderer();
    let args = json!({});
    let waited = create(
        &approvals,
        Domain::CliMutation,
        "s",
        &args,
        Consumption::Waiter,
    );
    renderer
        .resolve(waited.id, "s", Resolution::Approve)
        .unwrap();
    assert_eq!(approvals.wait(waited.id).await, Ok(Decision::Approved));
    assert_eq!(
        approvals.wait(waited.id).await,
        Err(ApprovalError::NotFound)
    );

    // A match approval is reported, not spent: the execution spends it.
    let matched = create(
        &approvals,
        Domain::ToolPermission,
        "s",
        &args,
        Consumption::Match,
    );
    renderer
        .resolve(matched.id, "s", Resolution::Approve)
        .unwrap();
    assert_eq!(approvals.wait(matched.id).await, Ok(Decision::Approved));
    let spend = ApprovalMatch::new(Domain::ToolPermission, "s", "m", &args);
    assert!(approvals.consume_approved(&spend));
    assert!(!approvals.consume_approved(&spend));
}

#[tokio::test(start_paused = true)]
async fn wait_resolves_denied_when_the_renderer_denies() {
    let approvals = Approvals::new(Limits::default());
    let renderer = approvals.attach_renderer();
    let snapshot = create(
        &approvals,
        Domain::ToolPermission,
        "s",
        &json!({}),
        Consumption::Match,
    );
    let (decision, ()) = tokio::join!(approvals.wait(snapshot.id), async {
        renderer
            .resolve(snapshot.id, "s", Resolution::Deny)
            .unwrap();
    });
    assert_eq!(
        decision,
        Ok(Decision::Denied {
            reason: DenyReason::Renderer
        })
    );
}

#[tokio::test(start_paused = true)]
async fn wait_ends_expired_exactly_at_the_expiry_with_nobody_driving_time() {
    let approvals = Approvals::new(Limits::default());
    let _renderer = approvals.attach_renderer();
    let start = Instant::now();
    let snapshot = create(
        &approvals,
        Domain::ToolPermission,
        "s",
        &json!({}),
        Consumption::Match,
    );
    assert_eq!(approvals.wait(snapshot.id).await, Ok(Decision::Expired));
    let waited = start.elapsed();
    // Virtual time: the paused clock jumps to the timer, which tokio rounds up to the next millisecond.
    assert!(
        waited >= Duration::from_secs(120)
            && waited <= Duration::from_secs(120) + Duration::from_millis(1),
        "{waited:?}"
    );
    assert!(approvals.pending().is_empty());
    assert_eq!(approvals.next_expiry(), None);
}

#[tokio::test(start_paused = true)]
async fn a_late_answer_is_refused_as_a_timeout() {
    let approvals = Approvals::new(Limits::default());
    let renderer = approvals.attach_renderer();
    let snapshot = approvals
        .create(
            NewApproval::new(Domain::ToolPermission, "s", "m", &json!({}))
                .timeout(Duration::from_secs(5)),
        )
        .unwrap();
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(
        renderer.resolve(snapshot.id, "s", Resolution::Approve),
        Err(ApprovalError::Expired)
    );
    assert_eq!(
        renderer.resolve(snapshot.id, "s", Resolution::Approve),
        Err(ApprovalError::NotFound)
    );
}

#[tokio::test(start_paused = true)]
async fn one_waiter_per_approval_and_unknown_ids_are_not_found() {
    let approvals = Approvals::new(Limits::default());
    let snapshot = create(
        &approvals,
        Domain::ToolPermission,
        "s",
        &json!({}),
        Consumption::Match,
    );
    let first = tokio::spawn({
        let approvals = approvals.clone();
        async move { approvals.wait(snapshot.id).await }
    });
    tokio::task::yield_now().await;
    let error = approvals.wait(snapshot.id).await.unwrap_err();
    assert_eq!(error, ApprovalError::AlreadyWaiting);
    assert_eq!(error.code(), "conflict");
    assert_eq!(
        approvals.wait(ApprovalId::from_u64(12345)).await,
        Err(ApprovalError::NotFound)
    );
    approvals.clear();
    assert_eq!(first.await.unwrap(), Ok(Decision::Cancelled));
}

#[tokio::test(start_paused = true)]
async fn dropping_a_wait_unregisters_it_and_leaves_the_approval_pending() {
    let approvals = Approvals::new(Limits::default());
    let renderer = approvals.attach_renderer();
    let snapshot = create(
        &approvals,
        Domain::CliMutation,
        "s",
        &json!({}),
        Consumption::Waiter,
    );
    let abandoned = tokio::time::timeout(Duration::from_secs(1), approvals.wait(snapshot.id)).await;
    assert!(abandoned.is_err(), "timed out, so the wait was dropped");
    assert_eq!(approvals.pending().len(), 1);
    let (decision, ()) = tokio::join!(approvals.wait(snapshot.id), async {
        renderer
            .resolve(snapshot.id, "s", Resolution::Approve)
            .unwrap();
    });
    assert_eq!(decision, Ok(Decision::Approved));
}

#[tokio::test(start_paused = true)]
async fn cancel_scope_and_clear_reach_the_waiters() {
    let approvals = Approvals::new(Limits::default());
    let args = json!({});
    let in_scope = create(
        &approvals,
        Domain::ToolPermission,
        "tool:c",
        &args,
        Consumption::Match,
    );
    let other = create(
        &approvals,
        Domain::ToolPermission,
        "tool:d",
        &args,
        Consumption::Match,
    );
    let (first, second, ()) = tokio::join!(
        approvals.wait(in_scope.id),
        approvals.wait(other.id),
        async {
            approvals.cancel_scope("tool:c", DenyReason::ScopeCancelled);
            assert_eq!(approvals.pending().len(), 1);
            approvals.clear();
        }
    );
    assert_eq!(
        first,
        Ok(Decision::Denied {
            reason: DenyReason::ScopeCancelled
        })
    );
    assert_eq!(second, Ok(Decision::Cancelled));
}

#[tokio::test(start_paused = true)]
async fn renderers_see_created_decided_removed_in_order() {
    let approvals = Approvals::new(Limits::default());
    let mut renderer = approvals.attach_renderer();
    let display = json!({"title": "Install skill"});
    let snapshot = approvals
        .create(
            NewApproval::new(Domain::ToolPermission, "s", "m", &json!({"secret": "x"}))
                .display(display.clone()),
        )
        .unwrap();
    assert_eq!(
        next(&mut renderer).await,
        ApprovalEvent::Created(snapshot.clone())
    );
    assert_eq!(renderer.pending(), vec![snapshot.clone()]);
    renderer
        .resolve(snapshot.id, "s", Resolution::Deny)
        .unwrap();
    assert_eq!(
        next(&mut renderer).await,
        ApprovalEvent::Decided {
            id: snapshot.id,
            scope: "s".into(),
            decision: Decision::Denied {
                reason: DenyReason::Renderer
            }
        }
    );
    assert_eq!(
        next(&mut renderer).await,
        ApprovalEvent::Removed {
            id: snapshot.id,
            scope: "s".into()
        }
    );
    assert_eq!(renderer.try_next_event(), None);
}

#[tokio::test(start_paused = true)]
async fn a_renderer_that_falls_behind_is_told_how_much_it_missed() {
    let approvals = Approvals::new(Limits {
        max_pending_per_scope: 1000,
        ..Limits::default()
    });
    let mut renderer = approvals.attach_renderer();
    let args = json!({});
    let extra = 10;
    for _ in 0..RENDERER_EVENT_BUFFER + extra {
        create(
            &approvals,
            Domain::ToolPermission,
            "s",
            &args,
            Consumption::Match,
        );
    }
    assert_eq!(
        renderer.try_next_event(),
        Some(RendererEvent::Lagged {
            missed: extra as u64
        })
    );
    assert!(matches!(
        renderer.try_next_event(),
        Some(RendererEvent::Approval(ApprovalEvent::Created(_)))
    ));
    assert_eq!(renderer.pending().len(), RENDERER_EVENT_BUFFER + extra);
}

#[tokio::test(start_paused = true)]
async fn the_last_renderer_leaving_denies_pending_cli_mutations_only() {
    let approvals = Approvals::new(Limits::default());
    let first = approvals.attach_renderer();
    let second = approvals.attach_renderer();
    assert_eq!(approvals.renderer_count(), 2);
    let args = json!({});
    let cli = create(
        &approvals,
        Domain::CliMutation,
        "cli:1",
        &args,
        Consumption::Waiter,
    );
    let tool = create(
        &approvals,
        Domain::ToolPermission,
        "tool:1",
        &args,
        Consumption::Match,
    );
    drop(first);
    assert_eq!(approvals.renderer_count(), 1);
    assert_eq!(approvals.pending().len(), 2, "one renderer is still there");
    let (decision, ()) = tokio::join!(approvals.wait(cli.id), async { drop(second) });
    assert_eq!(
        decision,
        Ok(Decision::Denied {
            reason: DenyReason::NoRenderer
        })
    );
    assert_eq!(approvals.renderer_count(), 0);
    let left: Vec<ApprovalId> = approvals.pending().iter().map(|s| s.id).collect();
    assert_eq!(left, vec![tool.id]);
}

#[tokio::test(start_paused = true)]
async fn handle_timeout_reports_unwaited_expiries_at_next_expiry() {
    let approvals = Approvals::new(Limits::default());
    let mut renderer = approvals.attach_renderer();
    let snapshot = approvals
        .create(
            NewApproval::new(Domain::ToolPermission, "s", "m", &json!({}))
                .timeout(Duration::from_secs(3)),
        )
        .unwrap();
    let _ = next(&mut renderer).await;
    let due = approvals.next_expiry().unwrap();
    tokio::time::sleep_until(Instant::from_std(due)).await;
    approvals.handle_timeout();
    assert_eq!(
        next(&mut renderer).await,
        ApprovalEvent::Decided {
            id: snapshot.id,
            scope: "s".into(),
            decision: Decision::Expired
        }
    );
}

#[tokio::test(start_paused = true)]
async fn run_expiry_reports_each_expiry_at_its_time_even_an_earlier_one_created_later() {
    let approvals = Approvals::new(Limits::default());
    let mut renderer = approvals.attach_renderer();
    let start = Instant::now();
    let args = json!({});
    let late = approvals
        .create(
            NewApproval::new(Domain::ToolPermission, "s", "m", &args)
                .timeout(Duration::from_secs(10)),
        )
        .unwrap();
    let driver = tokio::spawn({
        let approvals = approvals.clone();
        async move { approvals.run_expiry().await }
    });
    tokio::task::yield_now().await;
    let early = approvals
        .create(
            NewApproval::new(Domain::ToolPermission, "s", "m", &args)
                .timeout(Duration::from_secs(2)),
        )
        .unwrap();
    let mut expired = Vec::new();
    while expired.len() < 2 {
        if let ApprovalEvent::Decided { id, decision, .. } = next(&mut renderer).await {
            assert_eq!(decision, Decision::Expired);
            expired.push((id, start.elapsed()));
        }
    }
    driver.abort();
    let ms = Duration::from_millis(1);
    assert_eq!(expired[0].0, early.id);
    assert!(expired[0].1 >= Duration::from_secs(2) && expired[0].1 <= Duration::from_secs(2) + ms);
    assert_eq!(expired[1].0, late.id);
    assert!(
        expired[1].1 >= Duration::from_secs(10) && expired[1].1 <= Duration::from_secs(10) + ms
    );
}
