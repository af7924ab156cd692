//! The ACP conformance check against the fixture agents: conformant modes pass, misbehaving modes fail the rule they
//! break. Build the fixtures first: `cargo build -p agentwire-fixture-agents`.

use agentwire_acp::conformance::{CheckPlan, Outcome, run_check};

/// Runs the check against `program args` and compares each listed rule's outcome (`pass`, `fail`, `skip`) and the
/// overall verdict.
async fn check(program: &str, args: &[&str], expect: &[(&str, &str)], passed: bool) {
    let mut plan = CheckPlan::new(agentwire_testkit::bin_path(program), args.iter().copied());
    plan.cwd = std::env::temp_dir();
    let report = run_check(plan).await;
    for (id, outcome) in expect {
        let got = match &report
            .get(id)
            .unwrap_or_else(|| panic!("no rule {id}"))
            .outcome
        {
            Outcome::Pass => "pass",
            Outcome::Fail { .. } => "fail",
            Outcome::Skipped { .. } => "skip",
        };
        assert_eq!(
            got,
            *outcome,
            "{program} {args:?}: rule {id}\n{}",
            report.render_text()
        );
    }
    assert_eq!(report.passed(), passed, "{}", report.render_text());
}

#[tokio::test]
async fn the_echo_agent_is_conformant() {
    check(
        "acp-fixture",
        &["--mode", "echo"],
        &[
            ("spawns", "pass"),
            ("initialize_answers_integer_version", "pass"),
            ("session_new_returns_id", "pass"),
            ("prompt_returns_stop_reason", "pass"),
            ("updates_reference_session", "pass"),
            ("stdout_only_jsonrpc", "pass"),
            ("exits_on_stdin_eof", "pass"),
            ("updates_parse", "pass"),
            ("unknown_method_not_found", "pass"),
        ],
        true,
    )
    .await;
}

#[tokio::test]
async fn an_agent_that_honours_cancel_passes_the_cancel_rule() {
    check(
        "acp-fixture",
        &["--mode", "wait-cancel"],
        &[("cancel_yields_cancelled", "pass")],
        true,
    )
    .await;
}

#[tokio::test]
async fn misbehaving_agents_fail_the_rule_they_break() {
    check(
        "acp-fixture",
        &["--mode", "cancel-error"],
        &[("cancel_yields_cancelled", "fail")],
        false,
    )
    .await;
    check(
        "acp-fixture",
        &["--mode", "cancel-end-turn"],
        &[("cancel_yields_cancelled", "fail")],
        false,
    )
    .await;
    check(
        "acp-fixture",
        &["--mode", "banner"],
        &[
            ("stdout_only_jsonrpc", "fail"),
            ("prompt_returns_stop_reason", "pass"),
        ],
        false,
    )
    .await;
    check(
        "acp-fixture",
        &["--mode", "protocol-v2"],
        &[
            ("initialize_answers_integer_version", "fail"),
            ("session_new_returns_id", "skip"),
        ],
        false,
    )
    .await;
    check(
        "acp-fixture",
        &["--mode", "exit-mid-prompt"],
        &[("prompt_returns_stop_reason", "fail")],
        false,
    )
    .await;
    check(
        "kandev-fixture",
        &[],
        &[("initialize_answers_integer_version", "fail")],
        false,
    )
    .await;
}

#[tokio::test]
async fn a_missing_program_fails_spawns() {
    let report = run_check(CheckPlan::new("/nonexistent/agent", Vec::<String>::new())).await;
    assert_eq!(report.failed_ids(), ["spawns"]);
    assert!(!report.passed());
}
