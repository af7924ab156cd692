//! The ACP conformance check against the fixture agents: conformant modes pass, misbehaving modes fail the rule they
//! break. Build the fixtures first: `cargo build -p agentwire-fixture-agents`.

use agentwire_acp::conformance::{CheckPlan, Outcome, run_check};

/// Runs the check against `program args` and compares each listed rule's outcome (`pass`, `fail`, `skip`) and the
/// overall verdict.
async fn check(program: &str, args: &[&str], expect: &[(&str, &str)], passed: bool) {
    check_with(program, args, |_| {}, expect, passed).await;
}

/// As [`check`], with the plan adjusted by `adjust`.
async fn check_with(
    program: &str,
    args: &[&str],
    adjust: impl FnOnce(&mut CheckPlan),
    expect: &[(&str, &str)],
    passed: bool,
) {
    let mut plan = CheckPlan::new(agentwire_testkit::bin_path(program), args.iter().copied());
    plan.cwd = std::env::temp_dir();
    adjust(&mut plan);
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
            ("unknown_request_answered", "pass"),
            ("unknown_method_not_found", "pass"),
            ("cancel_request_answered", "skip"),
            ("client_capabilities_respected", "pass"),
            ("no_permission_request_after_cancel", "pass"),
            ("session_list_answers", "pass"),
            ("set_config_option_answers", "pass"),
            ("session_resume_answers", "pass"),
            ("session_resume_does_not_replay", "pass"),
            ("session_load_replays_before_answer", "pass"),
            ("session_close_answers", "pass"),
            ("session_delete_answers", "pass"),
            ("logout_answers", "skip"),
        ],
        true,
    )
    .await;
}

#[tokio::test]
async fn logout_is_exercised_only_on_request() {
    check_with(
        "acp-fixture",
        &["--mode", "echo"],
        |plan| plan.logout = true,
        &[("logout_answers", "pass")],
        true,
    )
    .await;
}

#[tokio::test]
async fn an_agent_without_resume_skips_the_resume_rules() {
    check(
        "acp-fixture",
        &["--mode", "echo", "--no-resume"],
        &[
            ("session_resume_answers", "skip"),
            ("session_resume_does_not_replay", "skip"),
            ("session_load_replays_before_answer", "pass"),
        ],
        true,
    )
    .await;
}

#[tokio::test]
async fn interop_faults_from_public_reports_fail_their_rule() {
    // Updates replayed by a resume.
    check(
        "acp-fixture",
        &["--mode", "resume-replays"],
        &[
            ("session_resume_answers", "pass"),
            ("session_resume_does_not_replay", "fail"),
            ("session_load_replays_before_answer", "pass"),
        ],
        false,
    )
    .await;
    // A load answered before its replay.
    check(
        "acp-fixture",
        &["--mode", "load-replay-after"],
        &[
            ("session_resume_does_not_replay", "pass"),
            ("session_load_replays_before_answer", "fail"),
        ],
        false,
    )
    .await;
    // An agent that never answers an unknown request: the probe gives up after its timeout.
    check_with(
        "acp-fixture",
        &["--mode", "ignore-unknown"],
        |plan| plan.limits.probe_timeout = std::time::Duration::from_millis(300),
        &[
            ("unknown_request_answered", "fail"),
            ("unknown_method_not_found", "skip"),
            // The fixture's runtime answers the cancelled probe -32800.
            ("cancel_request_answered", "pass"),
            ("session_list_answers", "pass"),
        ],
        false,
    )
    .await;
    // A permission request for new work after session/cancel (a should: reported, not failing the check).
    check(
        "acp-fixture",
        &["--mode", "permission-after-cancel"],
        &[
            ("no_permission_request_after_cancel", "fail"),
            ("cancel_yields_cancelled", "pass"),
        ],
        true,
    )
    .await;
    // A permission request for a tool call announced before the cancel may have crossed it on the wire: not a
    // fault. (The tools fixture's stop reason races its cancel flag, so only this rule is compared.)
    let mut plan = CheckPlan::new(
        agentwire_testkit::bin_path("acp-fixture"),
        ["--mode", "tools"],
    );
    plan.cwd = std::env::temp_dir();
    let report = run_check(plan).await;
    let rule = report
        .get("no_permission_request_after_cancel")
        .expect("rule");
    assert_eq!(rule.outcome, Outcome::Pass, "{}", report.render_text());
    // An elicitation asked of a client that did not advertise elicitation.
    check(
        "acp-fixture",
        &["--mode", "elicit"],
        &[
            ("client_capabilities_respected", "fail"),
            ("prompt_returns_stop_reason", "pass"),
        ],
        false,
    )
    .await;
    // A string protocolVersion.
    check(
        "acp-fixture",
        &["--mode", "string-version"],
        &[
            ("initialize_answers_integer_version", "fail"),
            ("session_new_returns_id", "skip"),
        ],
        false,
    )
    .await;
}

#[tokio::test]
async fn every_verdict_names_its_rule_and_spec_section() {
    let mut plan = CheckPlan::new(
        agentwire_testkit::bin_path("acp-fixture"),
        ["--mode", "cancel-end-turn"],
    );
    plan.cwd = std::env::temp_dir();
    let report = run_check(plan).await;
    assert_eq!(report.rules.len(), agentwire_acp::conformance::RULES.len());
    for rule in &report.rules {
        assert!(
            rule.spec
                .contains("<https://agentclientprotocol.com/protocol/"),
            "{}: {}",
            rule.id,
            rule.spec
        );
    }
    let json = serde_json::to_value(&report).expect("json");
    let cancel = json["rules"]
        .as_array()
        .and_then(|rules| rules.iter().find(|r| r["id"] == "cancel_yields_cancelled"))
        .expect("cancel rule")
        .clone();
    assert_eq!(cancel["outcome"], "fail");
    assert!(
        cancel["spec"]
            .as_str()
            .unwrap_or("")
            .starts_with("Prompt Turn § Cancellation")
    );
    assert!(
        cancel["evidence"]
            .as_str()
            .unwrap_or("")
            .contains("end_turn"),
        "{cancel}"
    );
    let text = report.render_text();
    assert!(text.contains("FAIL  cancel_yields_cancelled"), "{text}");
    assert!(text.contains("spec: Prompt Turn § Cancellation"), "{text}");
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

/// An agent that writes nothing and exits: the rules about its output were never exercised, so they are skipped,
/// not passed, and the missing initialize answer fails the check.
#[tokio::test]
async fn an_agent_that_writes_nothing_has_its_output_rules_skipped() {
    let mut plan = CheckPlan::new("/bin/sh", ["-c", "exit 0"]);
    plan.cwd = std::env::temp_dir();
    plan.limits.step_timeout = std::time::Duration::from_secs(2);
    let report = run_check(plan).await;
    for id in [
        "stdout_only_jsonrpc",
        "updates_reference_session",
        "updates_parse",
    ] {
        let outcome = &report.get(id).expect("rule").outcome;
        assert!(
            matches!(outcome, Outcome::Skipped { .. }),
            "{id}: {outcome:?}\n{}",
            report.render_text()
        );
    }
    assert!(
        matches!(
            report
                .get("initialize_answers_integer_version")
                .map(|r| &r.outcome),
            Some(Outcome::Fail { .. })
        ),
        "{}",
        report.render_text()
    );
    assert!(!report.passed());
}

#[tokio::test]
async fn a_fast_turn_that_crosses_the_cancel_in_flight_is_skipped_not_failed() {
    // `rich` ends its turn right after its first updates: the cancel and the end_turn cross in flight, which is
    // not evidence of ignoring the cancel. Repeated, since the crossing depends on scheduling.
    for _ in 0..5 {
        check(
            "acp-fixture",
            &["--mode", "rich"],
            &[("cancel_yields_cancelled", "skip")],
            true,
        )
        .await;
    }
}
