//! A `Connection` over a real child process started by agentwire-process (`Connection::from_frames`): the child's
//! stdout frames in, its stdin out, through real OS pipes.

mod support;

use agentwire_jsonrpc::{CallError, Connection, Incoming, IncomingMessage, RequestId};
use agentwire_process::{Child, Command, StopPlan};
use serde_json::json;
use support::within;

/// Spawns `program args…` (with the OS environment allowlist) and connects to its stdio.
fn connect(program: &str, args: &[&str]) -> (Child, Connection, Incoming) {
    agentwire_testkit::jsonrpc_peer::connect(Command::new(program).args(args).inherit_os_env())
        .expect("spawn")
}

/// `cat` sends our own request back: it arrives as an incoming request with id 0 while our call 0 is pending, and
/// must not be taken for its answer. Our answer to it comes back through `cat` and then completes our call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incoming_request_with_our_pending_id_is_not_its_answer() {
    let (child, connection, mut incoming) = connect("cat", &[]);
    let call = tokio::spawn({
        let connection = connection.clone();
        async move {
            connection
                .call("echo/me", Some(json!({"big": "y".repeat(1 << 20)})))
                .await
        }
    });
    let request = match within(incoming.next()).await {
        Some(IncomingMessage::Request(request)) => request,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (request.id.clone(), request.method.as_str()),
        (RequestId::Number(0), "echo/me")
    );
    assert_eq!(
        connection.pending_calls(),
        1,
        "the echoed request must not resolve our call"
    );
    request
        .respond(Ok(json!("answered by ourselves")))
        .await
        .unwrap();
    assert_eq!(
        within(call).await.unwrap().unwrap(),
        json!("answered by ourselves")
    );
    assert_eq!(connection.stats().unknown_responses, 0);
    child.stop(StopPlan::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_exits_mid_call_fails_every_pending_call() {
    // Reads one line (our first request), then exits without answering.
    let (child, connection, _incoming) = connect("sh", &["-c", "read line; exit 3"]);
    let mut calls = Vec::new();
    for n in 0..3 {
        let connection = connection.clone();
        calls.push(tokio::spawn(async move {
            connection.call("work", Some(json!([n]))).await
        }));
    }
    for call in calls {
        let result = within(call).await.unwrap();
        assert!(
            matches!(result, Err(CallError::ConnectionClosed)),
            "{result:?}"
        );
    }
    assert_eq!(within(child.wait()).await.code, Some(3));
    within(connection.closed()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_banner_before_the_first_frame_is_answered_and_survived() {
    // A child that prints a banner, then echoes stdin (so our request comes back as a request).
    let (child, connection, mut incoming) =
        connect("sh", &["-c", "echo 'agent v1 starting'; exec cat"]);
    // The banner is not JSON: we answer it with -32700 (which `cat` echoes back to us as a null-id error).
    connection.notify("hello", None).await.unwrap();
    match within(incoming.next()).await {
        Some(IncomingMessage::Notification(n)) => assert_eq!(n.method, "hello"),
        other => panic!("{other:?}"),
    }
    let stats = connection.stats();
    assert_eq!(stats.invalid_lines, 1);
    // Kept for diagnostics (an agent's login prompt or error message on stdout).
    assert_eq!(
        connection.first_invalid_line().as_deref(),
        Some("agent v1 starting")
    );
    child.stop(StopPlan::default()).await;
}
