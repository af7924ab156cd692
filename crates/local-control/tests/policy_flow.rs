//! End-to-end policy flow without the transport: token → caller → surface → decision → admission → audit file.
//!
//! The audit file is then searched for every planted secret, prompt and the Agent token itself.

use std::time::{Instant, SystemTime};

use agentwire_local_control::audit::{
    AuditLimits, AuditLog, AuditRecord, CURRENT_SEGMENT, Outcome, PREVIOUS_SEGMENT,
};
use agentwire_local_control::caller::{Caller, Scope};
use agentwire_local_control::hub::{EventHub, HubLimits, NewEvent, SubscriptionItem};
use agentwire_local_control::policy::{
    self, ComputeAdmission, ComputeLimits, Decision, PolicyError,
};
use agentwire_local_control::surface::{Effect, Surface, Transport};
use agentwire_local_control::tokens::{IssueRequest, TokenAuthority, TokenError, TokenLimits};
use serde_json::{Value, json};

const SECRET: &str = "sk-PLANTED-SECRET-4f1d9c";
const PROMPT: &str = "PLANTED-PROMPT-summarise the quarterly numbers";

fn outcome_of(decision: &Decision) -> Outcome {
    match decision {
        Decision::Allow => Outcome::Allowed,
        Decision::NeedsApproval => Outcome::ApprovalDenied,
        Decision::Deny(PolicyError::Misconfigured) => Outcome::Misconfigured,
        Decision::Deny(_) => Outcome::Denied,
    }
}

#[test]
fn agent_requests_are_decided_and_audited_without_leaking_secrets() {
    let now = Instant::now();
    let mut tokens = TokenAuthority::new(TokenLimits::default());
    let issued = tokens
        .issue(
            IssueRequest::new(
                "conversation-7",
                vec![
                    Scope::SystemRead,
                    Scope::RunsRead,
                    Scope::RunsCancel,
                    Scope::SettingsWrite,
                ],
            ),
            now,
        )
        .expect("issue");
    let token = issued.token.expose().to_owned();
    let grant = tokens.begin_request(&token, now).expect("valid token");
    let agent = Caller::agent("connection-1", &grant);
    let human = Caller::human("connection-2");
    for debug in [
        format!("{agent:?}"),
        format!("{grant:?}"),
        format!("{issued:?}"),
    ] {
        assert!(!debug.contains(&token));
    }

    let surface = Surface::standard();
    let dir = tempfile::tempdir().expect("tempdir");
    // Small segments so that both segments get written and both are searched.
    let mut log = AuditLog::open(
        dir.path(),
        AuditLimits {
            segment_bytes: 2048,
        },
    )
    .expect("open audit");
    let cases: Vec<(&Caller, &str, Transport, Value, Decision)> = vec![
        (
            &agent,
            "runs.get",
            Transport::Rpc,
            json!({"runId": "run-1", "apiKey": SECRET}),
            Decision::Allow,
        ),
        (
            &agent,
            "sessions.runDetached",
            Transport::Rpc,
            json!({"prompt": PROMPT, "systemPrompt": SECRET, "agentId": "a"}),
            Decision::Deny(PolicyError::CallerNotAllowed),
        ),
        (
            &human,
            "sessions.runDetached",
            Transport::Rpc,
            json!({"prompt": PROMPT, "systemPrompt": SECRET, "agentId": "a", "token": token}),
            Decision::Allow,
        ),
        (
            &agent,
            "settings.updatePublic",
            Transport::Rpc,
            json!({"changes": [{"key": "fontFamily", "value": SECRET}]}),
            Decision::NeedsApproval,
        ),
        (
            &agent,
            "settings.updatePublic",
            Transport::Rpc,
            json!({"changes": [{"key": "proxyPassword", "value": SECRET}]}),
            Decision::Deny(PolicyError::AgentInputNotAllowed),
        ),
        (
            &human,
            "settings.updatePublic",
            Transport::Rpc,
            json!({"changes": [{"key": "proxyPassword", "value": SECRET}]}),
            Decision::NeedsApproval,
        ),
        (
            &agent,
            "runs.cancel",
            Transport::Rpc,
            json!({"runId": "run-1"}),
            Decision::Allow,
        ),
        (
            &agent,
            "artifacts.read",
            Transport::Download,
            json!({"id": SECRET}),
            Decision::Deny(PolicyError::CallerNotAllowed),
        ),
        (
            &agent,
            "events.subscribe",
            Transport::Stream,
            json!({"cursor": SECRET}),
            Decision::Deny(PolicyError::CallerNotAllowed),
        ),
        (
            &agent,
            "cli.capabilities",
            Transport::Rpc,
            json!({}),
            Decision::Allow,
        ),
    ];
    for (index, (caller, method, transport, params, expected)) in cases.into_iter().enumerate() {
        let spec = surface.lookup(method, transport).expect(method);
        let decision = policy::decide(caller, spec, &params);
        assert_eq!(decision, expected, "{method}");
        let record = AuditRecord::new(
            caller,
            spec,
            &params,
            outcome_of(&decision),
            &format!("req-{index}"),
            SystemTime::now(),
        )
        .expect("record");
        log.append(&record).expect("append");
    }
    // Unknown methods never reach the policy.
    assert_eq!(
        surface
            .lookup("settings.getAll", Transport::Rpc)
            .expect_err("unknown")
            .code(),
        "not_found"
    );

    assert!(
        dir.path().join(PREVIOUS_SEGMENT).exists(),
        "the test should cover both segments"
    );
    let mut text = String::new();
    for segment in [PREVIOUS_SEGMENT, CURRENT_SEGMENT] {
        text.push_str(&std::fs::read_to_string(dir.path().join(segment)).expect("segment"));
    }
    for planted in [SECRET, PROMPT, "PLANTED", token.as_str()] {
        assert!(!text.contains(planted), "audit log contains {planted:?}");
    }
    // What is there: caller kinds, methods, outcomes, hashes.
    let records: Vec<AuditRecord> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("record"))
        .collect();
    assert!(records.iter().any(|r| r.principal == "agent"
        && r.conversation_id.as_deref() == Some("conversation-7")
        && r.operation == "runs.get"
        && r.outcome == Outcome::Allowed));
    assert!(
        records
            .iter()
            .any(|r| r.operation == "settings.updatePublic"
                && r.effect == Effect::SecurityConfig
                && r.outcome == Outcome::Denied)
    );
    assert!(
        records
            .iter()
            .all(|r| r.redacted_arguments_hash.len() == 64)
    );
    tokens.end_request(grant);
}

#[test]
fn agent_compute_is_admitted_twice_then_rate_limited_and_revocation_fails_closed() {
    let now = Instant::now();
    let mut tokens = TokenAuthority::new(TokenLimits::default());
    let issued = tokens
        .issue(
            IssueRequest::new("conversation-9", vec![Scope::RunsRead]),
            now,
        )
        .expect("issue");
    let grant = tokens
        .begin_request(issued.token.expose(), now)
        .expect("grant");
    let agent = Caller::agent("connection-1", &grant);
    let mut admission = ComputeAdmission::new(ComputeLimits::default());
    let first = admission
        .admit(&agent, Effect::Compute, now)
        .expect("first");
    let second = admission
        .admit(&agent, Effect::Compute, now)
        .expect("second");
    assert_eq!(
        admission
            .admit(&agent, Effect::Compute, now)
            .map(|p| p.is_some()),
        Err(PolicyError::RateLimited)
    );
    for permit in [first, second].into_iter().flatten() {
        admission.release(permit);
    }
    // The run ended: its tokens are revoked and the in-flight request can see it.
    assert_eq!(tokens.revoke_conversation("conversation-9"), 1);
    assert!(!tokens.is_live(&grant, now));
    tokens.end_request(grant);
    let error = tokens
        .begin_request(issued.token.expose(), now)
        .expect_err("revoked");
    assert_eq!(
        (error, "authentication_failed"),
        (TokenError::Invalid, TokenError::Invalid.code())
    );
}

#[tokio::test]
async fn a_human_watches_a_run_to_its_end_and_resumes_after_a_disconnect() {
    let hub = EventHub::new(HubLimits::default()).expect("hub");
    hub.start_run("run-1").expect("start");
    let mut watch = hub.subscribe(Some("run-1"), None).expect("subscribe");
    hub.publish(NewEvent::new("run-1", "run.started", json!({})))
        .expect("publish");
    let Some(SubscriptionItem::Event(first)) = watch.next().await else {
        panic!("expected the first event");
    };
    let cursor = format!("{}:{}", hub.incarnation(), first.offset());
    drop(watch);
    hub.publish(NewEvent::new("run-1", "run.progress", json!({"step": 1})))
        .expect("publish");
    hub.finish_run(NewEvent::new(
        "run-1",
        "run.completed",
        json!({"status": "idle"}),
    ))
    .expect("finish");
    let mut resumed = hub.subscribe(Some("run-1"), Some(&cursor)).expect("resume");
    let mut names = Vec::new();
    while let Some(item) = resumed.next().await {
        match item {
            SubscriptionItem::Event(event) => names.push(event.event().to_owned()),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(names, vec!["run.progress", "run.completed"]);
}
