//! The IO shell against real child processes: the `awp-fixture` agent (build it first with
//! `cargo build -p agentwire-fixture-agents`) and `sh -c` scripts, over real pipes.

use std::time::Duration;

use agentwire_awp::session::{AgentSession, SessionOptions};
use agentwire_awp::{
    ContentBlock, LaunchConfig, LaunchPlan, NormalizedEvent, Protocol, SessionId, TurnOutcome,
    TurnStatus,
};
use agentwire_process::{StopPlan, StopStep};

/// Generous bound for anything a test waits on (never a synchronization sleep).
const WAIT: Duration = Duration::from_secs(30);

fn fixture_plan(
    mode: &str,
    protocol: Protocol,
    extra: &[&str],
    resume: Option<&str>,
) -> LaunchPlan {
    let mut config = LaunchConfig::new(agentwire_testkit::bin_path("awp-fixture"));
    config.prefix_args = ["--mode", mode]
        .iter()
        .chain(extra)
        .map(|s| (*s).to_owned())
        .collect();
    config.protocol = protocol;
    config.default_model = Some("fixture-model".into());
    let resume = resume.map(|id| SessionId::new(id).expect("valid id"));
    config
        .plan(None, resume.as_ref(), None)
        .expect("the fixture passes launch validation")
}

fn sh_plan(script: &str, env: &[(&str, &str)]) -> LaunchPlan {
    LaunchPlan {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        protocol: Protocol::AwpJsonl,
    }
}

async fn spawn(plan: &LaunchPlan, options: SessionOptions) -> AgentSession {
    AgentSession::spawn(plan, options).await.expect("spawned")
}

/// Sends one text turn and collects its events (the last one is `TurnCompleted`).
async fn turn(session: &mut AgentSession, text: &str) -> Vec<NormalizedEvent> {
    session
        .send_turn(&[ContentBlock::text(text)])
        .await
        .expect("turn accepted");
    collect(session).await
}

async fn collect(session: &mut AgentSession) -> Vec<NormalizedEvent> {
    tokio::time::timeout(WAIT, async {
        let mut events = Vec::new();
        while let Some(event) = session.next_event().await {
            events.push(event);
        }
        events
    })
    .await
    .expect("the turn ended in time")
}

fn outcome(events: &[NormalizedEvent]) -> &TurnOutcome {
    let completed: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, NormalizedEvent::TurnCompleted(_)))
        .collect();
    assert_eq!(completed.len(), 1, "{events:?}");
    match events.last() {
        Some(NormalizedEvent::TurnCompleted(outcome)) => outcome,
        other => panic!("TurnCompleted is not last: {other:?}"),
    }
}

fn text(events: &[NormalizedEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            NormalizedEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn failed(code: &str, detail: Option<&str>) -> TurnStatus {
    TurnStatus::Failed {
        code: code.into(),
        detail: detail.map(str::to_owned),
    }
}

/// For agents that ignore stdin EOF: the short stdin grace must elapse (a lower bound, never raced), then SIGTERM
/// kills them; the SIGTERM grace is generous so that a loaded machine cannot push a stop on to SIGKILL.
fn quick_stop() -> SessionOptions {
    let mut options = SessionOptions::default();
    options.stop_plan = StopPlan::new()
        .stdin_grace(Duration::from_millis(300))
        .term_grace(WAIT);
    options
}

/// For agents that exit on stdin EOF and tests that assert the stop ended there: every grace is generous, so
/// the exit is waited for as an event instead of raced against a short timer.
fn patient_stop() -> SessionOptions {
    let mut options = SessionOptions::default();
    options.stop_plan = StopPlan::new().stdin_grace(WAIT).term_grace(WAIT);
    options
}

#[tokio::test]
async fn a_live_process_is_reused_across_turns_and_stops_on_stdin_eof() {
    let mut session = spawn(
        &fixture_plan("normal", Protocol::AwpJsonl, &[], None),
        patient_stop(),
    )
    .await;
    let first = turn(&mut session, "hello").await;
    assert!(
        matches!(first.first(), Some(NormalizedEvent::SessionStarted { .. })),
        "{first:?}"
    );
    assert_eq!(text(&first), "echo: hello");
    let done = outcome(&first);
    assert_eq!(done.status, TurnStatus::Success);
    assert!(done.usage.is_some() && done.session_id.is_some());
    assert!(session.is_alive());

    let second = turn(&mut session, "again").await;
    assert_eq!(text(&second), "echo: again");
    assert_eq!(outcome(&second).status, TurnStatus::Success);
    assert_eq!(session.session_id(), done.session_id.as_ref());

    let stopped = session.stop().await;
    assert_eq!(stopped.ended_by, StopStep::StdinClosed);
    assert!(!session.is_alive());
    assert_eq!(session.next_event().await, None);
    let err = session
        .send_turn(&[ContentBlock::text("late")])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "agent_terminated");
}

#[tokio::test]
async fn stream_json_with_partial_messages_renders_text_once_per_turn() {
    let plan = fixture_plan("stream-json", Protocol::StreamJson, &[], None);
    assert!(plan.args.contains(&"--output-format".to_owned()));
    let mut session = spawn(&plan, SessionOptions::default()).await;
    for prompt in ["first turn", "second turn"] {
        let events = turn(&mut session, prompt).await;
        assert_eq!(text(&events), format!("echo: {prompt}"));
        assert_eq!(outcome(&events).status, TurnStatus::Success);
    }
    assert_eq!(
        session.diagnostics().counters.duplicate_messages_suppressed,
        2
    );
    session.stop().await;
}

#[tokio::test]
async fn scripted_outcomes_of_misbehaving_agents() {
    let cases: &[(&str, Protocol, TurnStatus)] = &[
        (
            "error-result",
            Protocol::AwpJsonl,
            failed("agent_error", Some("fixture_failure")),
        ),
        (
            "success-is-error",
            Protocol::AwpJsonl,
            failed("agent_error", Some("fixture_failure")),
        ),
        (
            "no-result-field",
            Protocol::AwpJsonl,
            failed("agent_error", Some("error_during_execution")),
        ),
        ("message-stop", Protocol::AwpJsonl, TurnStatus::Success),
        ("banner", Protocol::AwpJsonl, TurnStatus::Success),
        ("u2028", Protocol::AwpJsonl, TurnStatus::Success),
        (
            "exit-mid-turn",
            Protocol::AwpJsonl,
            failed("agent_exited_mid_turn", Some("exit code 3")),
        ),
        (
            "long-line",
            Protocol::AwpJsonl,
            failed(
                "stdout_line_too_long",
                Some("stdout line over 4194304 bytes"),
            ),
        ),
        (
            "flood",
            Protocol::AwpJsonl,
            failed(
                "stdout_line_too_long",
                Some("stdout line over 4194304 bytes"),
            ),
        ),
    ];
    for (mode, protocol, expect) in cases {
        let mut session = spawn(&fixture_plan(mode, *protocol, &[], None), quick_stop()).await;
        let events = turn(&mut session, "hi").await;
        assert_eq!(&outcome(&events).status, expect, "mode {mode}: {events:?}");
        if expect.is_success() {
            assert!(
                text(&events).starts_with("echo: ") && text(&events).ends_with("hi"),
                "mode {mode}: {events:?}"
            );
        }
        session.stop().await;
        assert!(!session.is_alive(), "mode {mode}");
    }
}

#[tokio::test]
async fn banner_lines_are_counted_and_u2028_survives() {
    let mut session = spawn(
        &fixture_plan("banner", Protocol::AwpJsonl, &[], None),
        SessionOptions::default(),
    )
    .await;
    let events = turn(&mut session, "x").await;
    assert_eq!(text(&events), "echo: x");
    assert_eq!(session.diagnostics().counters.malformed_lines, 2);
    session.stop().await;

    let mut session = spawn(
        &fixture_plan("u2028", Protocol::AwpJsonl, &[], None),
        SessionOptions::default(),
    )
    .await;
    let events = turn(&mut session, "y").await;
    assert!(
        text(&events).contains('\u{2028}') && text(&events).contains('\u{2029}'),
        "{events:?}"
    );
    session.stop().await;
}

#[tokio::test]
async fn a_3_mb_line_passes_the_4_mib_limit() {
    let plan = fixture_plan(
        "long-line",
        Protocol::AwpJsonl,
        &["--line-bytes", "3000000"],
        None,
    );
    let mut session = spawn(&plan, SessionOptions::default()).await;
    let events = turn(&mut session, "z").await;
    assert_eq!(outcome(&events).status, TurnStatus::Success);
    assert!(text(&events).len() > 2_900_000);
    session.stop().await;
}

#[tokio::test]
async fn the_line_too_long_stops_the_process() {
    let mut session = spawn(
        &fixture_plan("long-line", Protocol::AwpJsonl, &[], None),
        quick_stop(),
    )
    .await;
    let events = turn(&mut session, "z").await;
    assert_eq!(outcome(&events).status.code(), Some("stdout_line_too_long"));
    assert!(!session.is_alive(), "the shell stopped the runtime");
    assert_eq!(session.diagnostics().counters.lines_too_long, 1);
    let err = session
        .send_turn(&[ContentBlock::text("again")])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "agent_terminated");
}

#[tokio::test]
async fn exit_mid_turn_is_reported_and_the_process_is_gone() {
    let mut session = spawn(
        &fixture_plan("exit-mid-turn", Protocol::AwpJsonl, &[], None),
        SessionOptions::default(),
    )
    .await;
    let events = turn(&mut session, "q").await;
    assert_eq!(
        outcome(&events).status,
        failed("agent_exited_mid_turn", Some("exit code 3"))
    );
    assert!(!session.is_alive());
    assert_eq!(session.diagnostics().exit.and_then(|e| e.code), Some(3));
}

#[tokio::test]
async fn silence_mid_turn_hits_the_idle_timeout_and_stops_the_process() {
    let mut options = quick_stop();
    // The idle timeout must elapse (a lower bound); it also runs from the input to the fixture's first delta, so
    // it is long enough that a slow start on a loaded machine still gets the delta in first.
    options.idle_timeout = Some(Duration::from_secs(5));
    let mut session = spawn(
        &fixture_plan("silence", Protocol::AwpJsonl, &[], None),
        options,
    )
    .await;
    let events = turn(&mut session, "q").await;
    assert_eq!(text(&events), "echo: ");
    assert_eq!(outcome(&events).status.code(), Some("agent_idle_timeout"));
    assert!(!session.is_alive());
}

#[tokio::test]
async fn cancel_stops_the_process_and_completes_the_turn_as_cancelled() {
    let mut session = spawn(
        &fixture_plan("silence", Protocol::AwpJsonl, &[], None),
        patient_stop(),
    )
    .await;
    session
        .send_turn(&[ContentBlock::text("q")])
        .await
        .expect("accepted");
    // Wait for the first delta, proving the turn is under way.
    let first = tokio::time::timeout(WAIT, async {
        loop {
            match session.next_event().await {
                Some(NormalizedEvent::TextDelta { text }) => break text,
                Some(_) => continue,
                None => panic!("turn ended early"),
            }
        }
    })
    .await
    .expect("delta in time");
    assert_eq!(first, "echo: ");
    let stopped = session.cancel_turn().await;
    assert_eq!(stopped.ended_by, StopStep::StdinClosed);
    let rest = collect(&mut session).await;
    assert_eq!(outcome(&rest).status, failed("cancelled", None));
    assert!(!session.is_alive());
}

#[tokio::test]
async fn result_then_hang_completes_the_turn_and_stop_escalates_to_sigterm() {
    let mut session = spawn(
        &fixture_plan("result-hang", Protocol::AwpJsonl, &[], None),
        quick_stop(),
    )
    .await;
    let events = turn(&mut session, "q").await;
    assert_eq!(outcome(&events).status, TurnStatus::Success);
    assert!(
        session.is_alive(),
        "the turn completed while the process lives on"
    );
    let stopped = session.stop().await;
    assert_eq!(stopped.ended_by, StopStep::Sigterm);
    assert!(!session.is_alive());
}

#[tokio::test]
async fn a_grandchild_holding_stdout_cannot_hang_the_session() {
    let mut options = SessionOptions::default();
    options.child.drain_window = Duration::from_millis(200);
    let plan = fixture_plan(
        "grandchild",
        Protocol::AwpJsonl,
        &["--grandchild-secs", "120"],
        None,
    );
    let mut session = spawn(&plan, options).await;
    let events = turn(&mut session, "q").await;
    assert_eq!(outcome(&events).status, TurnStatus::Success);
    let stopped = tokio::time::timeout(WAIT, session.stop())
        .await
        .expect("stop does not wait for the grandchild");
    assert!(
        matches!(
            stopped.ended_by,
            StopStep::AlreadyExited | StopStep::StdinClosed
        ),
        "{stopped:?}"
    );
}

#[tokio::test]
async fn tool_use_streams_its_input_and_result() {
    let mut session = spawn(
        &fixture_plan("tool-use", Protocol::AwpJsonl, &[], None),
        SessionOptions::default(),
    )
    .await;
    let events = turn(&mut session, "run it").await;
    let tool_use = events.iter().find_map(|e| match e {
        NormalizedEvent::ToolUse { id, name, input } => {
            Some((id.clone(), name.clone(), input.clone()))
        }
        _ => None,
    });
    let (id, name, input) = tool_use.expect("a tool use");
    assert_eq!(name, "Bash");
    assert!(input.is_object(), "{input}");
    assert!(events.iter().any(
        |e| matches!(e, NormalizedEvent::ToolResult { tool_use_id, .. } if *tool_use_id == id)
    ));
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, NormalizedEvent::ToolUse { .. }))
            .count(),
        1
    );
    assert_eq!(outcome(&events).status, TurnStatus::Success);
    session.stop().await;
}

#[tokio::test]
async fn resume_with_a_different_reported_id_and_invalid_ids() {
    let plan = fixture_plan("resume-different-id", Protocol::AwpJsonl, &[], Some("abc"));
    assert!(plan.args.windows(2).any(|w| w == ["--resume", "abc"]));
    let mut options = SessionOptions::default();
    options.resumed_from = Some(SessionId::new("abc").expect("valid"));
    let mut session = spawn(&plan, options).await;
    let events = turn(&mut session, "q").await;
    assert!(events.contains(&NormalizedEvent::Notice {
        kind: "session_id_changed".into(),
        detail: Some("abc -> abc.fork".into())
    }));
    assert_eq!(
        session.session_id().map(SessionId::as_str),
        Some("abc.fork")
    );
    session.stop().await;

    let mut session = spawn(
        &fixture_plan("invalid-session-id", Protocol::AwpJsonl, &[], None),
        SessionOptions::default(),
    )
    .await;
    let events = turn(&mut session, "q").await;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, NormalizedEvent::SessionStarted { .. })),
        "{events:?}"
    );
    assert!(events.iter().any(
        |e| matches!(e, NormalizedEvent::Notice { kind, .. } if kind == "invalid_session_id")
    ));
    assert_eq!(outcome(&events).session_id, None);
    assert_eq!(session.session_id(), None);
    session.stop().await;
}

#[tokio::test]
async fn stderr_is_kept_as_a_bounded_tail() {
    let mut session = spawn(
        &fixture_plan("stderr-noise", Protocol::AwpJsonl, &[], None),
        SessionOptions::default(),
    )
    .await;
    let events = turn(&mut session, "q").await;
    assert_eq!(outcome(&events).status, TurnStatus::Success);
    session.stop().await;
    let diagnostics = session.diagnostics();
    assert!(
        diagnostics.stderr_total_bytes >= 256 * 1024,
        "{}",
        diagnostics.stderr_total_bytes
    );
    assert!(diagnostics.stderr_tail.len() <= 128 * 1024);
    assert!(!diagnostics.stderr_tail.is_empty());
}

#[tokio::test]
async fn plan_env_reaches_the_child_and_one_line_is_written_per_turn() {
    // The script echoes its stdin line count and an env value in each result.
    let script = r#"n=0; while read -r line; do n=$((n+1)); printf '{"type":"result","subtype":"success","result":"%s-%s"}\n' "$AWP_TEST_VALUE" "$n"; done"#;
    let mut session = spawn(
        &sh_plan(script, &[("AWP_TEST_VALUE", "v")]),
        SessionOptions::default(),
    )
    .await;
    for n in 1..=3 {
        let events = turn(&mut session, "line\nwith newline").await;
        assert_eq!(
            outcome(&events).result_text.as_deref(),
            Some(format!("v-{n}").as_str())
        );
    }
    session.stop().await;
}

#[tokio::test]
async fn send_turn_rules() {
    let mut session = spawn(&sh_plan("read -r line; sleep 30", &[]), quick_stop()).await;
    assert_eq!(
        session.send_turn(&[]).await.unwrap_err().code(),
        "empty_turn"
    );
    session
        .send_turn(&[ContentBlock::text("a")])
        .await
        .expect("accepted");
    let err = session
        .send_turn(&[ContentBlock::text("b")])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "turn_in_progress");
    session.stop().await;
    // The accepted turn "a" was running: stopping completes it exactly once, with `cancelled`.
    let rest = collect(&mut session).await;
    assert_eq!(outcome(&rest).status, failed("cancelled", None), "{rest:?}");
    assert!(
        session.next_event().await.is_none(),
        "nothing after the completion"
    );
}

#[tokio::test]
async fn spawn_failure_is_typed() {
    let plan = sh_plan("true", &[]);
    let plan = LaunchPlan {
        program: "/nonexistent/agent".into(),
        ..plan
    };
    let err = AgentSession::spawn(&plan, SessionOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.cause_code()),
        ("spawn_failed", "executable_not_found")
    );
}

#[tokio::test]
async fn an_agent_ignoring_sigterm_is_killed_at_the_end_of_the_ladder() {
    // `trap '' TERM` is inherited by `sleep` (ignored dispositions survive exec); stdin EOF is never read.
    let script = r#"trap '' TERM; read -r line; printf '{"type":"result","subtype":"success"}\n'; exec sleep 30"#;
    let mut options = SessionOptions::default();
    options.stop_plan = StopPlan::new()
        .stdin_grace(Duration::from_millis(200))
        .term_grace(Duration::from_millis(200));
    let mut session = spawn(&sh_plan(script, &[]), options).await;
    let events = turn(&mut session, "q").await;
    assert_eq!(outcome(&events).status, TurnStatus::Success);
    let stopped = tokio::time::timeout(WAIT, session.stop())
        .await
        .expect("stopped in time");
    assert_eq!(stopped.ended_by, StopStep::Sigkill);
    assert_eq!(stopped.status.signal, Some(9));
    assert!(!session.is_alive());
}

#[tokio::test]
async fn the_agent_runs_in_the_configured_working_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cwd = dir.path().canonicalize().expect("canonical path");
    let script = r#"read -r line; printf '{"type":"result","subtype":"success","result":"%s"}\n' "$(pwd -P)""#;
    let mut options = SessionOptions::default();
    options.cwd = Some(cwd.clone());
    let mut session = spawn(&sh_plan(script, &[]), options).await;
    let events = turn(&mut session, "q").await;
    assert_eq!(outcome(&events).result_text.as_deref(), cwd.to_str());
    session.stop().await;
}
