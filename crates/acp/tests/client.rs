//! The client role against the fixture agent role, in memory, every message validated against the official schema.

mod support;

use std::path::Path;

use agentwire_acp::schema::{
    PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    SelectedPermissionOutcome, SessionId, SessionUpdate, StopReason,
};
use agentwire_acp::{AcpError, ClientBuilder, PermissionHandler, Session, TurnEvent, Update};
use agentwire_fixture_agents::acp_fixture::Mode;
use support::{memory_pair, within};
use tokio::sync::mpsc;

/// Renders an update compactly: `text:<chunk>`, `tool_call:<id>:<status>`, `tool_call_update:<id>:<status>`, or
/// the kind.
fn render(update: &Update) -> String {
    match update {
        Update::Known(known) => match known.as_ref() {
            SessionUpdate::AgentMessageChunk(_) => {
                format!("text:{}", update.agent_text().unwrap_or(""))
            }
            SessionUpdate::UserMessageChunk(_) => "user_chunk".to_owned(),
            SessionUpdate::ToolCall(call) => {
                format!("tool_call:{}:{:?}", call.tool_call_id, call.status)
            }
            SessionUpdate::ToolCallUpdate(update) => {
                format!(
                    "tool_call_update:{}:{:?}",
                    update.tool_call_id, update.fields.status
                )
            }
            SessionUpdate::CurrentModeUpdate(mode) => format!("mode:{}", mode.current_mode_id),
            _ => update.kind().unwrap_or_default(),
        },
        Update::Raw { kind, .. } => format!("raw:{}", kind.clone().unwrap_or_default()),
    }
}

fn outcome(result: &Result<StopReason, AcpError>) -> String {
    match result {
        Ok(reason) => format!("{reason:?}"),
        Err(error) => error.code().to_owned(),
    }
}

async fn open(
    mode: Mode,
    builder: ClientBuilder,
) -> (agentwire_acp::Client, Session, support::Tap) {
    let (client, tap) = memory_pair(mode, builder);
    within(client.initialize()).await.expect("initialize");
    let session = within(client.new_session(Path::new("/work")))
        .await
        .expect("session/new");
    (client, session, tap)
}

/// Runs one turn with `text` and checks the rendered updates and outcome.
async fn check_turn(
    session: &mut Session,
    text: &str,
    expect_updates: &[&str],
    expect_outcome: &str,
) {
    let turn = within(session.prompt_text(text))
        .await
        .expect("prompt sent");
    let (updates, result) = within(turn.finish()).await;
    let rendered: Vec<String> = updates.iter().map(render).collect();
    assert_eq!(rendered, expect_updates);
    assert_eq!(outcome(&result), expect_outcome);
}

#[tokio::test]
async fn echo_turn_yields_the_chunk_then_end_turn() {
    let (client, mut session, tap) = open(Mode::Echo, ClientBuilder::new()).await;
    assert_eq!(session.id(), &SessionId::new("sess-1"));
    assert_eq!(
        session.modes().map(|m| m.current_mode_id.to_string()),
        Some("ask".to_owned())
    );
    check_turn(&mut session, "hello", &["text:hello"], "EndTurn").await;
    check_turn(&mut session, "again", &["text:again"], "EndTurn").await;
    let agent = client.agent().expect("initialized");
    assert!(agent.agent_capabilities.load_session);
    tap.assert_clean(true);
}

#[tokio::test]
async fn cancel_reports_cancelled_whatever_the_agent_answers() {
    for (mode, name) in [
        (Mode::WaitCancel, "cancelled"),
        (Mode::CancelError, "an error"),
        (Mode::CancelEndTurn, "end_turn"),
    ] {
        let (client, mut session, tap) = open(mode, ClientBuilder::new()).await;
        if mode == Mode::CancelEndTurn {
            // That mode answers end_turn once two extension requests came (the conformance check's cancel probes).
            for _ in 0..2 {
                let probe = client.connection().call("_probe", None).await;
                assert!(probe.is_err(), "{probe:?}");
            }
        }
        let mut turn = within(session.prompt_text("wait for cancel"))
            .await
            .expect("prompt sent");
        let first = within(turn.next()).await.expect("first event");
        assert!(
            matches!(&first, TurnEvent::Update(u) if u.agent_text() == Some("waiting for cancel")),
            "{name}"
        );
        assert!(within(turn.cancel()).await.expect("cancel sent"));
        let (updates, result) = within(turn.finish()).await;
        // Updates keep being accepted after the cancel.
        assert_eq!(
            updates.iter().map(render).collect::<Vec<_>>(),
            ["text:saw cancel"],
            "{name}"
        );
        assert_eq!(outcome(&result), "Cancelled", "agent answered {name}");
        // The next turn is not affected by the previous cancel.
        assert!(!within(session.canceller().cancel()).await.expect("no turn"));
        // The probes above are extension requests, outside the schema the tap checks against.
        tap.log
            .lock()
            .unwrap()
            .client_violations
            .retain(|violation| !violation.contains("_probe"));
        tap.assert_clean(true);
        assert!(
            tap.log
                .lock()
                .unwrap()
                .client_methods
                .contains(&"session/cancel".to_owned())
        );
        drop(client);
    }
}

#[tokio::test]
async fn a_late_duplicate_answer_is_dropped_and_counted() {
    let (client, mut session, tap) = open(Mode::DuplicateResponse, ClientBuilder::new()).await;
    check_turn(&mut session, "one", &[], "EndTurn").await;
    // The duplicate is read before the next turn's answer: the reader processes lines in order.
    check_turn(&mut session, "two", &[], "EndTurn").await;
    let stats = client.stats().rpc;
    assert!(
        stats.unknown_responses + stats.late_responses >= 1,
        "{stats:?}"
    );
    tap.assert_clean(true);
}

#[tokio::test]
async fn updates_after_the_prompt_answer_reach_the_session() {
    let (_client, mut session, tap) = open(Mode::LateUpdates, ClientBuilder::new()).await;
    let turn = within(session.prompt_text("go"))
        .await
        .expect("prompt sent");
    let (in_turn, result) = within(turn.finish()).await;
    assert_eq!(outcome(&result), "EndTurn");
    // Updates sent after the answer are never lost: those that arrived before the turn ended are its last events,
    // the rest arrive on the session, in order.
    let mut late: Vec<String> = in_turn.iter().map(render).collect();
    while late.len() < 2 {
        late.push(render(
            &within(session.next_update()).await.expect("late update"),
        ));
    }
    assert_eq!(late, ["text:late 1", "text:late 2"]);
    tap.assert_clean(true);
}

/// Answers every permission request with the option of `kind`, and reports each request's tool call id.
struct Choose {
    kind: PermissionOptionKind,
    seen: mpsc::UnboundedSender<String>,
}

impl PermissionHandler for Choose {
    async fn request_permission(
        &self,
        request: RequestPermissionRequest,
    ) -> RequestPermissionOutcome {
        let _ = self.seen.send(request.tool_call.tool_call_id.to_string());
        match request
            .options
            .iter()
            .find(|option| option.kind == self.kind)
        {
            Some(option) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(
                option.option_id.clone(),
            )),
            None => RequestPermissionOutcome::Cancelled,
        }
    }
}

/// Never answers: only a cancel ends its requests.
struct Never {
    seen: mpsc::UnboundedSender<String>,
}

impl PermissionHandler for Never {
    async fn request_permission(
        &self,
        request: RequestPermissionRequest,
    ) -> RequestPermissionOutcome {
        let _ = self.seen.send(request.tool_call.tool_call_id.to_string());
        std::future::pending().await
    }
}

#[tokio::test]
async fn permission_outcomes_drive_the_tool_call() {
    let (seen, mut seen_rx) = mpsc::unbounded_channel();
    let allow = Choose {
        kind: PermissionOptionKind::AllowOnce,
        seen,
    };
    let (_client, mut session, tap) =
        open(Mode::Tools, ClientBuilder::new().permission_handler(allow)).await;
    check_turn(
        &mut session,
        "edit",
        &[
            "tool_call:call-1:Pending",
            "tool_call_update:call-1:Some(Completed)",
        ],
        "EndTurn",
    )
    .await;
    assert_eq!(seen_rx.recv().await.as_deref(), Some("call-1"));
    tap.assert_clean(true);

    // The default handler fails closed: the agent sees `reject` and fails the tool call.
    let (_client, mut session, tap) = open(Mode::Tools, ClientBuilder::new()).await;
    check_turn(
        &mut session,
        "edit",
        &[
            "tool_call:call-1:Pending",
            "tool_call_update:call-1:Some(Failed)",
        ],
        "EndTurn",
    )
    .await;
    tap.assert_clean(true);
}

#[tokio::test]
async fn cancel_answers_pending_permission_requests_cancelled() {
    let (seen, mut seen_rx) = mpsc::unbounded_channel();
    let (client, mut session, tap) = open(
        Mode::OverlappingPermissions,
        ClientBuilder::new().permission_handler(Never { seen }),
    )
    .await;
    let mut turn = within(session.prompt_text("two at once"))
        .await
        .expect("prompt sent");
    let mut asked = vec![
        within(seen_rx.recv()).await.expect("first"),
        within(seen_rx.recv()).await.expect("second"),
    ];
    asked.sort();
    // One of the two names a tool call the agent never announced; it is asked all the same.
    assert_eq!(asked, ["ghost", "t1"]);
    within(turn.cancel()).await.expect("cancel sent");
    let mut rendered = Vec::new();
    let result = loop {
        match within(turn.next()).await.expect("event") {
            TurnEvent::Update(update) => rendered.push(render(&update)),
            TurnEvent::End(result) => break result,
        }
    };
    assert_eq!(
        rendered,
        [
            "tool_call:t1:Pending",
            "text:t1: cancelled; ghost: cancelled"
        ]
    );
    assert_eq!(outcome(&result), "Cancelled");
    assert_eq!(client.stats().permissions_cancelled, 2);
    tap.assert_clean(true);
}

#[tokio::test]
async fn overlapping_permission_requests_are_each_answered() {
    let (_client, mut session, tap) =
        open(Mode::OverlappingPermissions, ClientBuilder::new()).await;
    check_turn(
        &mut session,
        "two at once",
        &[
            "tool_call:t1:Pending",
            "text:t1: selected reject; ghost: selected reject",
        ],
        "EndTurn",
    )
    .await;
    tap.assert_clean(true);
}

#[tokio::test]
async fn session_load_routes_replay_before_the_answer() {
    let (client, tap) = memory_pair(Mode::Echo, ClientBuilder::new());
    within(client.initialize()).await.expect("initialize");
    let mut session = within(client.load_session(SessionId::new("saved-1"), Path::new("/work")))
        .await
        .expect("session/load");
    within(client.routed()).await;
    let mut replay = Vec::new();
    while let Some(update) = session.try_next_update() {
        replay.push(render(&update));
    }
    assert_eq!(replay, ["user_chunk", "text:earlier answer"]);
    tap.assert_clean(true);
}

#[tokio::test]
async fn session_load_routes_replay_after_the_answer() {
    let (client, tap) = memory_pair(Mode::LoadReplayAfter, ClientBuilder::new());
    within(client.initialize()).await.expect("initialize");
    let mut session = within(client.load_session(SessionId::new("saved-1"), Path::new("/work")))
        .await
        .expect("session/load");
    let mut replay = Vec::new();
    for _ in 0..2 {
        replay.push(render(
            &within(session.next_update())
                .await
                .expect("replayed update"),
        ));
    }
    assert_eq!(replay, ["user_chunk", "text:earlier answer"]);
    assert_eq!(session.modes().map(|m| m.available_modes.len()), Some(2));
    check_turn(&mut session, "continue", &["text:continue"], "EndTurn").await;
    tap.assert_clean(true);
}

#[tokio::test]
async fn set_mode_and_authenticate() {
    let (client, tap) = memory_pair(Mode::Auth, ClientBuilder::new());
    within(client.initialize()).await.expect("initialize");
    let refused = within(client.new_session(Path::new("/work")))
        .await
        .expect_err("auth required first");
    assert_eq!(refused.rpc().map(|e| e.code.0), Some(-32000));
    let wrong = within(client.authenticate("nope"))
        .await
        .expect_err("unknown method id");
    assert_eq!(wrong.code(), "rpc_error");
    within(client.authenticate("fixture-token"))
        .await
        .expect("authenticate");
    let mut session = within(client.new_session(Path::new("/work")))
        .await
        .expect("session/new");
    within(session.set_mode("code")).await.expect("set_mode");
    assert_eq!(
        render(&within(session.next_update()).await.expect("mode update")),
        "mode:code"
    );
    let unknown = within(session.set_mode("yolo"))
        .await
        .expect_err("unknown mode");
    assert_eq!(unknown.rpc().map(|e| e.code.0), Some(-32602));
    tap.assert_clean(true);
}

#[tokio::test]
async fn a_protocol_version_2_answer_closes_the_connection() {
    let (client, tap) = memory_pair(Mode::ProtocolV2, ClientBuilder::new());
    let error = within(client.initialize())
        .await
        .expect_err("version 2 is not supported");
    assert_eq!(error.code(), "unsupported_protocol_version");
    assert_eq!(
        error.to_string(),
        "agent answered protocol version 2, this client supports only version 1"
    );
    within(client.connection().closed()).await;
    let after = within(client.new_session(Path::new("/work")))
        .await
        .expect_err("not initialized");
    assert_eq!(after.code(), "not_initialized");
    tap.assert_clean(true);
}

#[tokio::test]
async fn methods_before_initialize_fail_typed() {
    let (client, _tap) = memory_pair(Mode::Echo, ClientBuilder::new());
    let error = within(client.new_session(Path::new("/work")))
        .await
        .expect_err("not initialized");
    assert_eq!(error.code(), "not_initialized");
    let load = within(client.load_session(SessionId::new("x"), Path::new("/w")))
        .await
        .expect_err("not initialized");
    assert_eq!(load.code(), "not_initialized");
}

#[tokio::test]
async fn advertised_capabilities_follow_the_installed_handlers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = ClientBuilder::new().capabilities();
    assert!(!plain.fs.read_text_file && !plain.fs.write_text_file && !plain.terminal);
    let with_fs =
        ClientBuilder::new().fs_handler(agentwire_acp::RootedFs::new(dir.path()).expect("root"));
    let caps = with_fs.capabilities();
    assert!(caps.fs.read_text_file && caps.fs.write_text_file && !caps.terminal);
    // What initialize sends says the same.
    let (client, tap) = memory_pair(Mode::Echo, with_fs);
    within(client.initialize()).await.expect("initialize");
    assert!(client.capabilities().fs.read_text_file);
    tap.assert_clean(true);
}

#[tokio::test]
async fn dropping_next_futures_loses_nothing() {
    use futures_util::FutureExt as _;
    let (_client, mut session, tap) = open(Mode::LateUpdates, ClientBuilder::new()).await;
    for _ in 0..3 {
        let mut turn = within(session.prompt_text("poll me"))
            .await
            .expect("prompt sent");
        let mut events = Vec::new();
        within(async {
            loop {
                // Poll once and drop the future when it is not ready.
                match turn.next().now_or_never() {
                    Some(Some(TurnEvent::Update(update))) => events.push(render(&update)),
                    Some(Some(TurnEvent::End(result))) => events.push(outcome(&result)),
                    Some(None) => break,
                    None => tokio::task::yield_now().await,
                }
            }
        })
        .await;
        // The outcome is the last event, exactly once.
        assert_eq!(
            events.last().map(String::as_str),
            Some("EndTurn"),
            "{events:?}"
        );
        assert_eq!(events.iter().filter(|e| *e == "EndTurn").count(), 1);
        drop(turn);
        // Whatever the turn did not yield of the two late updates arrives on the session.
        let mut late: Vec<String> = events
            .iter()
            .filter(|e| e.starts_with("text:"))
            .cloned()
            .collect();
        while late.len() < 2 {
            late.push(render(
                &within(session.next_update()).await.expect("late update"),
            ));
        }
        assert_eq!(late, ["text:late 1", "text:late 2"]);
    }
    tap.assert_clean(true);
}
