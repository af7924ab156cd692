//! The conformance check against real agents: it passes for `awp-agent` and the `awp-fixture` in its
//! well-behaved modes, and fails with the right rule and evidence for misbehaving modes.
//! Build the agents first: `cargo build -p awp-agent -p agentwire-fixture-agents`.

use std::time::Duration;

use agentwire_awp::conformance::{CheckPlan, CheckReport, Outcome, run_check};
use agentwire_awp::{LaunchConfig, Protocol};

fn fixture(mode: &str, protocol: Protocol) -> CheckPlan {
    let mut launch = LaunchConfig::new(agentwire_testkit::bin_path("awp-fixture"));
    launch.prefix_args = vec!["--mode".into(), mode.into()];
    launch.protocol = protocol;
    launch.default_model = Some("fixture-model".into());
    let mut plan = CheckPlan::new(launch);
    plan.limits.quiet_window = QUIET;
    plan.limits.exit_grace = EXIT_GRACE;
    plan.limits.turn_timeout = Duration::from_secs(30);
    plan
}

/// The silence watched before the first input. It elapses in full for every agent, so it is short; a test that
/// expects early output to be *caught* uses [`CATCH_QUIET`] instead, so a slow start on a loaded machine cannot
/// push the line past the window.
const QUIET: Duration = Duration::from_millis(300);
/// The quiet window of the tests that expect output before input to be caught.
const CATCH_QUIET: Duration = Duration::from_secs(5);
/// How long an agent may take to exit after stdin EOF. A well-behaved agent exits at once, so this only elapses
/// for agents that are expected to fail the rule; generous so that a loaded machine cannot fail a good agent.
const EXIT_GRACE: Duration = Duration::from_secs(10);
/// The turn timeout of the tests whose agent never answers: it must elapse (a lower bound), and it is long enough
/// that the agent's first line (named in the evidence) arrives before it even on a loaded machine.
const NO_ANSWER: Duration = Duration::from_secs(5);

/// Runs the check and asserts exactly `failing` rules fail, each with evidence containing the given text.
async fn check(plan: CheckPlan, failing: &[(&str, &str)]) -> CheckReport {
    let report = run_check(plan).await;
    let text = report.render_text();
    let failed = report.failed_ids();
    let expected: Vec<&str> = failing.iter().map(|(id, _)| *id).collect();
    assert_eq!(failed, expected, "report:\n{text}");
    for (id, evidence_part) in failing {
        match report.get(id).map(|r| &r.outcome) {
            Some(Outcome::Fail { evidence }) => {
                assert!(
                    evidence.contains(evidence_part),
                    "{id}: {evidence:?} lacks {evidence_part:?}\n{text}"
                )
            }
            other => panic!("{id}: {other:?}\n{text}"),
        }
    }
    if failing.is_empty() {
        assert!(report.passed(), "report:\n{text}");
        assert!(
            report.rules.iter().all(|r| r.outcome == Outcome::Pass),
            "every rule judged and passed:\n{text}"
        );
    }
    report
}

#[tokio::test]
async fn awp_agent_is_conformant() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut launch = LaunchConfig::new(agentwire_testkit::bin_path("awp-agent"));
    launch.env.insert(
        "AWP_AGENT_SESSION_DIR".into(),
        tmp.path().join("sessions").display().to_string(),
    );
    let mut plan = CheckPlan::new(launch);
    plan.limits.quiet_window = QUIET;
    plan.limits.exit_grace = EXIT_GRACE;
    check(plan, &[]).await;
}

#[tokio::test]
async fn fixture_normal_and_stream_json_are_conformant() {
    check(fixture("normal", Protocol::AwpJsonl), &[]).await;
    check(fixture("stream-json", Protocol::StreamJson), &[]).await;
    check(fixture("tool-use", Protocol::AwpJsonl), &[]).await;
    check(fixture("message-stop", Protocol::AwpJsonl), &[]).await;
    // Reporting a different id on resume is allowed by the protocol.
    check(fixture("resume-different-id", Protocol::AwpJsonl), &[]).await;
}

#[tokio::test]
async fn output_before_input_is_caught_with_the_line() {
    let mut plan = fixture("output-before-input", Protocol::AwpJsonl);
    plan.limits.quiet_window = CATCH_QUIET;
    check(
        plan,
        &[(
            "no_output_before_input",
            "before any input, stdout line 1: {\"type\":\"system\",\"subtype\":\"init\"",
        )],
    )
    .await;
}

#[tokio::test]
async fn output_before_input_of_the_resumed_process_is_caught() {
    // A shell agent that behaves, except that it greets on stdout when started with --resume.
    let script = r#"case "$*" in *--resume*) echo '{"type":"system","subtype":"status","status":"resuming"}';; esac
n=0
while IFS= read -r line; do
  n=$((n+1))
  [ "$n" = 1 ] && echo '{"type":"system","subtype":"init","session_id":"sh-session"}'
  echo '{"type":"result","subtype":"success","is_error":false,"session_id":"sh-session","usage":{"input_tokens":1,"output_tokens":1}}'
done"#;
    // The launch contract refuses symlinks: use the shell /bin/sh points to.
    let shell = std::fs::canonicalize("/bin/sh").expect("a POSIX shell");
    let mut launch = LaunchConfig::new(shell);
    launch.prefix_args = vec!["-c".into(), script.into(), "sh".into()];
    let mut plan = CheckPlan::new(launch);
    plan.limits.quiet_window = CATCH_QUIET;
    plan.limits.exit_grace = EXIT_GRACE;
    check(
        plan,
        &[(
            "no_output_before_input",
            "resumed process, before any input, stdout line 1: {\"type\":\"system\",\"subtype\":\"status\"",
        )],
    )
    .await;
}

#[tokio::test]
async fn exit_mid_turn_is_caught() {
    let report = check(
        fixture("exit-mid-turn", Protocol::AwpJsonl),
        &[
            (
                "one_terminal_per_turn",
                "turn 1: the process exited before a terminal event (exit code 3); last line: {\"type\":\"content_block_delta\"",
            ),
            ("resume_accepted", "resumed turn (--resume fixture-"),
        ],
    )
    .await;
    assert!(!report.passed());
    assert!(matches!(
        report.get("second_turn_same_process").map(|r| &r.outcome),
        Some(Outcome::Skipped { .. })
    ));
}

#[tokio::test]
async fn invalid_session_id_is_caught() {
    let report = check(
        fixture("invalid-session-id", Protocol::AwpJsonl),
        &[
            ("valid_session_id", "turn 1, stdout line 1: {\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"bad id/with spaces!\""),
        ],
    )
    .await;
    // No valid id, so resume cannot be judged.
    assert!(matches!(
        report.get("resume_accepted").map(|r| &r.outcome),
        Some(Outcome::Skipped { .. })
    ));
}

#[tokio::test]
async fn banner_on_stdout_is_caught() {
    check(
        fixture("banner", Protocol::AwpJsonl),
        &[(
            "stdout_only_json",
            "turn 1, stdout line 1: Welcome to fixture-agent v0.0.0 (not JSON) (not a JSON line)",
        )],
    )
    .await;
}

#[tokio::test]
async fn failing_and_hanging_agents_are_caught() {
    check(
        fixture("error-result", Protocol::AwpJsonl),
        &[
            (
                "turn_succeeds",
                "turn 1: failed with agent_error (fixture_failure)",
            ),
            ("resume_accepted", "agent_error (fixture_failure)"),
        ],
    )
    .await;
    check(
        fixture("no-result-field", Protocol::AwpJsonl),
        &[
            (
                "turn_succeeds",
                "turn 1: failed with agent_error (error_during_execution)",
            ),
            ("resume_accepted", "agent_error (error_during_execution)"),
            ("terminal_has_usage", "turn 1: terminal event without usage"),
        ],
    )
    .await;
    let mut silent = fixture("silence", Protocol::AwpJsonl);
    silent.limits.turn_timeout = NO_ANSWER;
    check(
        silent,
        &[
            (
                "one_terminal_per_turn",
                "turn 1: no terminal event within 5 s; last line: {\"type\":\"content_block_delta\"",
            ),
            ("resume_accepted", "no terminal event"),
        ],
    )
    .await;
    let mut hang = fixture("result-hang", Protocol::AwpJsonl);
    hang.limits.turn_timeout = NO_ANSWER;
    check(
        hang,
        &[
            (
                "one_terminal_per_turn",
                "turn 2: no terminal event within 5 s; last line: no output",
            ),
            ("second_turn_same_process", "turn 2: no terminal event"),
            (
                "exits_on_stdin_eof",
                "resumed process, still running 10 s after stdin was closed; stopped by sigterm",
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_command_outside_the_launch_contract_is_refused() {
    let report = run_check(CheckPlan::new(LaunchConfig::new("relative/agent"))).await;
    assert_eq!(report.failed_ids(), vec!["launch_contract"]);
    assert!(!report.passed());
    assert!(report.render_text().contains("SKIP  spawns"));
}

#[tokio::test]
async fn over_long_lines_and_floods_are_caught_without_waiting_for_a_newline() {
    // Exactly at the limit is fine; one byte past is not.
    let mut at_limit = fixture("long-line", Protocol::AwpJsonl);
    at_limit
        .launch
        .prefix_args
        .extend(["--line-bytes".into(), "4194304".into()]);
    check(at_limit, &[]).await;
    let mut past_limit = fixture("long-line", Protocol::AwpJsonl);
    past_limit
        .launch
        .prefix_args
        .extend(["--line-bytes".into(), "4194305".into()]);
    check(
        past_limit,
        &[
            (
                "line_within_limit",
                "turn 1, stdout line 2: a line of at least ",
            ),
            ("resume_accepted", "stdout_line_too_long"),
        ],
    )
    .await;
    // 10 MiB without a newline: caught as soon as the buffer crosses 4 MiB (the turn timeout is 30 s).
    check(
        fixture("flood", Protocol::AwpJsonl),
        &[
            (
                "line_within_limit",
                "turn 1, stdout line 2: a line of at least ",
            ),
            ("resume_accepted", "stdout_line_too_long"),
        ],
    )
    .await;
}

#[tokio::test]
async fn an_agent_that_exits_after_one_turn_fails_second_turn_same_process() {
    // The fixture exits after its first turn while a grandchild keeps stdout open for 30 s: the check must
    // rely on the exit (plus the drain window), not on the pipe closing.
    let mut plan = fixture("grandchild", Protocol::AwpJsonl);
    plan.launch
        .prefix_args
        .extend(["--grandchild-secs".into(), "30".into()]);
    let report = run_check(plan).await;
    let text = report.render_text();
    assert!(
        matches!(
            report.get("second_turn_same_process").map(|r| &r.outcome),
            Some(Outcome::Fail { evidence }) if evidence.contains("exit")
        ),
        "{text}"
    );
    assert_eq!(
        report.get("turn_succeeds").map(|r| &r.outcome),
        Some(&Outcome::Pass),
        "{text}"
    );
    assert!(!report.passed());
}
