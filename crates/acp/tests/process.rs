//! The client role driving the real `acp-fixture` process: the hazards of protocols/acp.md that need a process.
//!
//! Build the fixture first: `cargo build -p agentwire-fixture-agents`.

mod support;

use std::path::Path;
use std::time::Duration;

use agentwire_acp::{ClientBuilder, TurnEvent};
use agentwire_process::{StopPlan, StopStep};
use agentwire_testkit::proc::{is_alive, wait_gone};
use support::{WAIT, fixture_command, within};

#[tokio::test]
async fn spawned_echo_agent_runs_a_turn_and_stops_on_stdin_eof() {
    let client = ClientBuilder::new()
        .spawn(&mut fixture_command("echo"))
        .expect("spawn");
    within(client.initialize()).await.expect("initialize");
    let mut session = within(client.new_session(Path::new("/work")))
        .await
        .expect("session");
    let (updates, result) = within(
        within(session.prompt_text("ping"))
            .await
            .expect("prompt")
            .finish(),
    )
    .await;
    assert_eq!(
        updates
            .iter()
            .filter_map(|u| u.agent_text())
            .collect::<Vec<_>>(),
        ["ping"]
    );
    assert!(matches!(
        result,
        Ok(agentwire_acp::schema::StopReason::EndTurn)
    ));
    // A generous stdin grace: the exit on EOF is waited for, not raced against the 5 s default.
    let outcome = within(client.stop(StopPlan::new().stdin_grace(WAIT / 2)))
        .await
        .expect("spawned");
    assert_eq!(outcome.ended_by, StopStep::StdinClosed);
    assert!(outcome.status.success());
}

#[tokio::test]
async fn non_json_before_the_first_frame_is_counted_not_fatal() {
    let client = ClientBuilder::new()
        .spawn(&mut fixture_command("banner"))
        .expect("spawn");
    within(client.initialize())
        .await
        .expect("initialize despite the banner");
    let mut session = within(client.new_session(Path::new("/work")))
        .await
        .expect("session");
    let (updates, _) = within(
        within(session.prompt_text("after banner"))
            .await
            .expect("prompt")
            .finish(),
    )
    .await;
    assert_eq!(updates.len(), 1);
    assert_eq!(client.stats().rpc.invalid_lines, 2);
    within(client.stop(StopPlan::new())).await;
}

#[tokio::test]
async fn a_20_mb_update_line_is_delivered_whole() {
    let mut command = fixture_command("huge-update");
    command.env("ACP_FIXTURE_HUGE_BYTES", "20000000");
    let client = ClientBuilder::new().spawn(&mut command).expect("spawn");
    within(client.initialize()).await.expect("initialize");
    let mut session = within(client.new_session(Path::new("/work")))
        .await
        .expect("session");
    let (updates, result) = within(
        within(session.prompt_text("dump"))
            .await
            .expect("prompt")
            .finish(),
    )
    .await;
    assert!(result.is_ok(), "{result:?}");
    let biggest = updates
        .iter()
        .map(|update| match update {
            agentwire_acp::Update::Known(known) => {
                serde_json::to_string(known).map(|s| s.len()).unwrap_or(0)
            }
            agentwire_acp::Update::Raw { update, .. } => update.to_string().len(),
        })
        .max()
        .unwrap_or(0);
    assert!(biggest > 20_000_000, "largest update {biggest} bytes");
    assert_eq!(client.stats().rpc.too_long_lines, 0);
    within(client.stop(StopPlan::new())).await;
}

#[tokio::test]
async fn an_agent_exit_mid_prompt_fails_the_turn_typed() {
    let client = ClientBuilder::new()
        .spawn(&mut fixture_command("exit-mid-prompt"))
        .expect("spawn");
    within(client.initialize()).await.expect("initialize");
    let mut session = within(client.new_session(Path::new("/work")))
        .await
        .expect("session");
    let mut turn = within(session.prompt_text("go")).await.expect("prompt");
    let mut texts = Vec::new();
    let result = loop {
        match within(turn.next()).await.expect("event") {
            TurnEvent::Update(update) => texts.extend(update.agent_text().map(str::to_owned)),
            TurnEvent::End(result) => break result,
        }
    };
    assert_eq!(texts, ["about to exit"]);
    assert_eq!(
        result.map_err(|e| e.code()).err(),
        Some("connection_closed")
    );
    let child = client.child().expect("spawned");
    assert_eq!(within(child.wait()).await.code, Some(3));
}

#[tokio::test]
async fn stop_kills_a_grandchild_that_outlives_stdin_eof() {
    let client = ClientBuilder::new()
        .spawn(&mut fixture_command("grandchild"))
        .expect("spawn");
    within(client.initialize()).await.expect("initialize");
    let child = client.child().expect("spawned");
    let stderr = child.stderr_tail();
    // Wait for the fixture to report its grandchild's pid (an event, polled with a deadline).
    let pid = within(async {
        loop {
            let text = stderr.tail_lossy();
            if let Some(pid) = text.lines().find_map(|l| l.strip_prefix("grandchild-pid ")) {
                break pid.trim().parse::<u32>().expect("pid");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(is_alive(pid), "grandchild {pid} should be running");
    // The stdin grace is the test's whole patience: the agent's exit on EOF is waited for, not raced.
    let outcome = within(client.stop(StopPlan::new().stdin_grace(WAIT / 2)))
        .await
        .expect("spawned");
    // The agent itself exits on stdin EOF; its grandchild would not, but the group is killed.
    assert_eq!(outcome.ended_by, StopStep::StdinClosed);
    assert!(
        wait_gone(pid, WAIT).await,
        "grandchild {pid} survived the group kill"
    );
}

#[tokio::test]
async fn the_agent_role_rejects_initialize_without_protocol_version() {
    let mut child = fixture_command("echo").spawn().expect("spawn");
    let stdin = child.stdin();
    let mut stdout = child.take_stdout().expect("stdout");
    stdin.write_line(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"x","version":"1"}}}"#).await.expect("write");
    let mut text = Vec::new();
    while !text.ends_with(b"\n") {
        match within(stdout.next()).await {
            Some(agentwire_process::StdoutItem::Bytes(bytes)) => text.extend_from_slice(&bytes),
            other => panic!("unexpected {other:?}"),
        }
    }
    let answer: serde_json::Value = serde_json::from_slice(&text).expect("json");
    assert_eq!(answer["error"]["code"], -32602);
    assert_eq!(answer["id"], 1);
    child.stop(StopPlan::new()).await;
}

fn kandev_command() -> agentwire_process::Command {
    let mut command =
        agentwire_process::Command::new(agentwire_testkit::bin_path("kandev-fixture"));
    command.inherit_os_env();
    command
}

fn render_kandev(updates: &[agentwire_acp::Update]) -> Vec<String> {
    use agentwire_acp::schema::SessionUpdate;
    updates
        .iter()
        .map(|update| match update {
            agentwire_acp::Update::Known(known) => match known.as_ref() {
                SessionUpdate::AgentMessageChunk(_) => {
                    format!("text:{}", update.agent_text().unwrap_or(""))
                }
                SessionUpdate::ToolCall(call) => format!(
                    "tool_call:{}:{}:{:?}",
                    call.tool_call_id, call.title, call.status
                ),
                SessionUpdate::ToolCallUpdate(u) => {
                    format!("tool_call_update:{}:{:?}", u.tool_call_id, u.fields.status)
                }
                _ => update.kind().unwrap_or_default(),
            },
            agentwire_acp::Update::Raw { kind, .. } => {
                format!("raw:{}", kind.clone().unwrap_or_default())
            }
        })
        .collect()
}

#[tokio::test]
async fn the_kandev_dialect_is_detected_and_mapped() {
    let client = ClientBuilder::new()
        .spawn(&mut kandev_command())
        .expect("spawn");
    within(client.initialize()).await.expect("initialize");
    assert_eq!(client.dialect(), Some(agentwire_acp::Dialect::Kandev));
    let mut session = within(client.new_session(Path::new("/work")))
        .await
        .expect("session");
    assert_eq!(session.id().to_string(), "kandev-1");
    // The dialect has none of the v1 session methods: refused before anything is sent.
    let refused = within(session.set_model("smart"))
        .await
        .expect_err("no config options");
    assert_eq!(refused.code(), "capability_missing");
    let refused = within(client.resume_session(session.id().clone(), Path::new("/work")))
        .await
        .expect_err("no resume");
    assert_eq!(refused.code(), "capability_missing");
    let (updates, result) = within(
        within(session.prompt_text("fix it"))
            .await
            .expect("prompt")
            .finish(),
    )
    .await;
    assert_eq!(
        render_kandev(&updates),
        [
            "text:Processing: fix it",
            "tool_call:kandev-tool-1:file_edit:InProgress",
            "tool_call_update:kandev-tool-1:Some(Completed)",
        ]
    );
    assert!(
        matches!(result, Ok(agentwire_acp::schema::StopReason::EndTurn)),
        "{result:?}"
    );
    let (_, failed) = within(
        within(session.prompt_text("please fail"))
            .await
            .expect("prompt")
            .finish(),
    )
    .await;
    let failed = failed.expect_err("error update fails the turn");
    assert_eq!(failed.code(), "turn_failed");
    assert_eq!(
        failed.to_string(),
        "agent reported the turn failed: Failed to compile after changes: syntax error on line 45"
    );
    // A turn that never completes ends with a cancel; the example agent exits on cancel.
    let mut turn = within(session.prompt_text("hang")).await.expect("prompt");
    for _ in 0..3 {
        assert!(matches!(
            within(turn.next()).await,
            Some(TurnEvent::Update(_))
        ));
    }
    within(turn.cancel()).await.expect("cancel");
    let (_, cancelled) = within(turn.finish()).await;
    assert!(
        matches!(cancelled, Ok(agentwire_acp::schema::StopReason::Cancelled)),
        "{cancelled:?}"
    );
    let status = within(client.child().expect("spawned").wait()).await;
    assert_eq!(status.code, Some(0));
}
