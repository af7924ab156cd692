//! The control protocol in the IO shell against real `sh -c` agents over real pipes: `initialize` answered,
//! refused, timed out, and control requests read outside a turn kept for `next_item`.

use std::time::Duration;

use agentwire_awp::control::ControlMessage;
use agentwire_awp::session::{AgentSession, SessionOptions};
use agentwire_awp::{LaunchPlan, Protocol, SessionItem};

/// Bound for an answer that does come (never a synchronization sleep).
const WAIT: Duration = Duration::from_secs(30);

fn sh(script: &str) -> LaunchPlan {
    LaunchPlan {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        env: Vec::new(),
        protocol: Protocol::StreamJson,
    }
}

async fn spawn(script: &str) -> AgentSession {
    let mut options = SessionOptions::default();
    options.control_protocol = true;
    AgentSession::spawn(&sh(script), options)
        .await
        .expect("spawned")
}

/// Reads the host's request line and extracts its `request_id` into `$id`.
const READ_ID: &str =
    r#"read -r l; id=$(printf %s "$l" | sed 's/.*"request_id":"\([^"]*\)".*/\1/'); "#;

#[tokio::test]
async fn initialize_returns_the_answer_and_keeps_other_control_requests_for_next_item() {
    let script = format!(
        "{READ_ID}{}{}cat >/dev/null",
        r#"echo '{"type":"control_request","request_id":"cli-1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{}}}'; "#,
        r#"echo "{\"type\":\"control_response\",\"response\":{\"subtype\":\"success\",\"request_id\":\"$id\",\"response\":{\"commands\":[]}}}"; "#,
    );
    let mut session = spawn(&script).await;
    let answer = session.initialize(Some(WAIT)).await.expect("initialized");
    assert_eq!(answer, serde_json::json!({"commands": []}));
    // The request that came first is handed out now, outside any turn.
    match session.next_item().await {
        Some(SessionItem::Control(ControlMessage::Request {
            request_id,
            subtype,
            ..
        })) => assert_eq!(
            (request_id.as_str(), subtype.as_str()),
            ("cli-1", "can_use_tool")
        ),
        other => panic!("expected the deferred request, got {other:?}"),
    }
    assert_eq!(session.next_item().await, None);
    // Control lines are not counted as output outside a turn.
    assert_eq!(session.diagnostics().counters.unknown_events, 0);
    session.stop().await;
}

#[tokio::test]
async fn a_refused_initialize_is_a_typed_error_with_the_agents_words() {
    let script = format!(
        "{READ_ID}{}cat >/dev/null",
        r#"echo "{\"type\":\"control_response\",\"response\":{\"subtype\":\"error\",\"request_id\":\"$id\",\"error\":\"not logged in\"}}"; "#,
    );
    let mut session = spawn(&script).await;
    let err = session.initialize(Some(WAIT)).await.expect_err("refused");
    assert_eq!(err.code(), "control_request_refused");
    assert!(err.to_string().contains("not logged in"), "{err}");
    session.stop().await;
}

#[tokio::test]
async fn an_unanswered_initialize_times_out_and_an_exit_is_reported() {
    let mut session = spawn("cat >/dev/null").await;
    let err = session
        .initialize(Some(Duration::from_millis(100)))
        .await
        .expect_err("no answer");
    assert_eq!(err.code(), "control_timeout");
    assert!(err.to_string().contains("initialize"), "{err}");
    session.stop().await;

    let mut session = spawn("read -r l; exit 3").await;
    let err = session.initialize(Some(WAIT)).await.expect_err("exited");
    assert_eq!(err.code(), "agent_exited");
    session.stop().await;
}

#[tokio::test]
async fn what_an_agent_printed_instead_of_answering_initialize_is_kept() {
    // A login prompt before the first input, then an exit: the line is a malformed line of the diagnostics
    // (though discarded as output before input), with the exit status.
    let mut session = spawn("echo 'Please log in'; read -r l; exit 3").await;
    let err = session.initialize(Some(WAIT)).await.expect_err("exited");
    assert_eq!(err.code(), "agent_exited");
    session.stop().await;
    let d = session.diagnostics();
    assert_eq!(d.first_malformed_line.as_deref(), Some("Please log in"));
    assert_eq!(d.counters.malformed_lines, 1);
    assert_eq!(d.counters.output_before_input, 1);
    assert_eq!(d.exit.and_then(|e| e.code), Some(3));

    // An agent that exited before the request was even written: what it printed is still read at the stop.
    let mut session = spawn("echo 'Invalid API key'; exit 1").await;
    let _ = session.initialize(Some(WAIT)).await.expect_err("exited");
    session.stop().await;
    let d = session.diagnostics();
    assert_eq!(d.first_malformed_line.as_deref(), Some("Invalid API key"));
    assert_eq!(d.exit.and_then(|e| e.code), Some(1));

    // Without a bound, the wait ends with the agent's exit.
    let mut session = spawn("read -r l; exit 4").await;
    let err = session.initialize(None).await.expect_err("exited");
    assert_eq!(err.code(), "agent_exited");
    session.stop().await;
}
