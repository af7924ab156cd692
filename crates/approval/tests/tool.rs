//! The tool-permission adapter: model pre-check, deduplication by explicit key while pending, one approved
//! execution, conversation cancellation. Behaviour follows DeepChat's `toolPermissionBroker.ts`.

use agentwire_approval::{
    ApprovalError, ApprovalEvent, Approvals, Decision, DenyReason, Limits, Renderer, Resolution,
    ToolAuthorization, ToolCall, ToolPermissions,
};
use serde_json::{Value, json};

fn setup() -> (Approvals, ToolPermissions, Renderer) {
    let approvals = Approvals::new(Limits::default());
    let renderer = approvals.attach_renderer();
    (approvals.clone(), ToolPermissions::new(approvals), renderer)
}

fn call<'a>(conversation: &'a str, key: &'a str, args: &'a Value) -> ToolCall<'a> {
    ToolCall {
        conversation,
        tool: "fs.write",
        key,
        args,
    }
}

#[tokio::test(start_paused = true)]
async fn the_same_call_while_pending_is_the_same_approval() {
    let (approvals, tools, _renderer) = setup();
    let args = json!({"path": "a.txt", "text": "hi"});
    let reordered = json!({"text": "hi", "path": "a.txt"});
    let first = tools
        .request(call("c1", "server-1", &args), json!({"file": "a.txt"}))
        .unwrap();
    let again = tools
        .request(call("c1", "server-1", &reordered), Value::Null)
        .unwrap();
    assert_eq!(again.id, first.id);
    assert_eq!(
        again.display,
        json!({"file": "a.txt"}),
        "the first request's display stays"
    );
    assert_eq!(first.scope, "tool:c1");

    let other_args = json!({"path": "b.txt"});
    let distinct = [
        tools
            .request(call("c1", "server-2", &args), Value::Null)
            .unwrap()
            .id,
        tools
            .request(call("c2", "server-1", &args), Value::Null)
            .unwrap()
            .id,
        tools
            .request(call("c1", "server-1", &other_args), Value::Null)
            .unwrap()
            .id,
    ];
    assert!(distinct.iter().all(|id| *id != first.id));
    assert_eq!(approvals.pending().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn execution_runs_once_per_renderer_approval() {
    let (approvals, tools, renderer) = setup();
    let args = json!({"path": "a.txt"});
    let ToolAuthorization::NeedsApproval(pending) = tools
        .authorize_execution(call("c1", "k", &args), Value::Null)
        .unwrap()
    else {
        panic!("nothing approved yet");
    };
    // The pre-check and the execution check share the pending approval.
    assert_eq!(
        tools
            .request(call("c1", "k", &args), Value::Null)
            .unwrap()
            .id,
        pending.id
    );
    renderer
        .resolve(pending.id, &pending.scope, Resolution::Approve)
        .unwrap();

    let other_args = json!({"path": "b.txt"});
    assert!(matches!(
        tools
            .authorize_execution(call("c1", "k", &other_args), Value::Null)
            .unwrap(),
        ToolAuthorization::NeedsApproval(_)
    ));
    assert_eq!(
        tools
            .authorize_execution(call("c1", "k", &args), Value::Null)
            .unwrap(),
        ToolAuthorization::Allowed
    );
    let ToolAuthorization::NeedsApproval(next) = tools
        .authorize_execution(call("c1", "k", &args), Value::Null)
        .unwrap()
    else {
        panic!("an approval is spent by one execution");
    };
    assert_ne!(next.id, pending.id);
    assert_eq!(approvals.pending().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_conversation_denies_pending_and_drops_approved_unspent() {
    let (approvals, tools, mut renderer) = setup();
    let args = json!({});
    let waiting = tools.request(call("c1", "k1", &args), Value::Null).unwrap();
    let approved = tools.request(call("c1", "k2", &args), Value::Null).unwrap();
    let elsewhere = tools.request(call("c2", "k1", &args), Value::Null).unwrap();
    renderer
        .resolve(approved.id, &approved.scope, Resolution::Approve)
        .unwrap();
    while renderer.try_next_event().is_some() {}

    let (decision, ()) = tokio::join!(approvals.wait(waiting.id), async {
        tools.cancel_conversation("c1");
    });
    assert_eq!(
        decision,
        Ok(Decision::Denied {
            reason: DenyReason::ScopeCancelled
        })
    );
    assert!(matches!(
        tools
            .authorize_execution(call("c1", "k2", &args), Value::Null)
            .unwrap(),
        ToolAuthorization::NeedsApproval(_)
    ));
    assert_eq!(
        renderer.resolve(waiting.id, &waiting.scope, Resolution::Approve),
        Err(ApprovalError::NotFound)
    );
    assert!(approvals.pending().iter().any(|s| s.id == elsewhere.id));
    let removed: Vec<_> = std::iter::from_fn(|| renderer.try_next_event())
        .filter_map(|event| match event {
            agentwire_approval::RendererEvent::Approval(ApprovalEvent::Removed { id, .. }) => {
                Some(id)
            }
            _ => None,
        })
        .collect();
    assert!(removed.contains(&waiting.id) && removed.contains(&approved.id));
}

#[tokio::test(start_paused = true)]
async fn an_empty_dedup_key_is_invalid_request() {
    let (_approvals, tools, _renderer) = setup();
    let error = tools
        .request(call("c1", "", &json!({})), Value::Null)
        .unwrap_err();
    assert_eq!(
        error,
        ApprovalError::InvalidField {
            field: "dedup_key",
            problem: "empty"
        }
    );
    assert_eq!(error.code(), "invalid_request");
}
