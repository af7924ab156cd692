//! `awp-host check`: the conformance engine wired to the CLI, against real agents.

mod support;

use support::{Host, fixture};

fn check(out: &support::Output, code: i32, expect_in_stdout: &[&str]) {
    assert_eq!(out.code, code, "{out:?}");
    for needle in expect_in_stdout {
        assert!(out.stdout.contains(needle), "missing {needle:?} in {out:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bundled_agent_is_conformant() {
    let host = Host::new();
    let agent = agentwire_testkit::bin_path("awp-agent");
    let out = host.run(&["check", "--", agent.to_str().unwrap()]).await;
    check(
        &out,
        0,
        &[
            "PASS  stdout_only_json",
            "conformant: required rules 12 passed, 0 failed, 0 skipped",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_banner_fails_the_check_with_evidence_and_exit_8() {
    let host = Host::new();
    let fx = fixture();
    let out = host
        .run(&["check", "--", fx.to_str().unwrap(), "--mode", "banner"])
        .await;
    check(
        &out,
        8,
        &["FAIL  stdout_only_json", "evidence: turn 1, stdout line 1"],
    );
    assert!(out.stderr.contains("(check_failed)"), "{out:?}");
    let out = host
        .run(&[
            "check",
            "--json",
            "--",
            fx.to_str().unwrap(),
            "--mode",
            "banner",
        ])
        .await;
    assert_eq!(out.code, 8, "{out:?}");
    let report = out.json();
    let rule = report["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "stdout_only_json")
        .unwrap();
    assert_eq!(rule["outcome"], "fail");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_agent_exits_3_and_no_command_exits_2() {
    let host = Host::new();
    let out = host.run(&["check", "--", "/nonexistent/agent"]).await;
    check(&out, 3, &["FAIL  launch_contract", "SKIP"]);
    let out = host.run(&["check"]).await;
    assert_eq!(out.code, 2, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_url_in_the_command_is_explained_and_can_be_opted_in() {
    let host = Host::new();
    let fx = fixture();
    let fx = fx.to_str().unwrap();
    let rule = |out: &support::Output| {
        out.json()["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == "launch_contract")
            .cloned()
            .unwrap()
    };
    let denied = host
        .run(&[
            "check",
            "--json",
            "--",
            fx,
            "--base",
            "https://api.example.com",
        ])
        .await;
    assert_eq!(denied.code, 3, "{denied:?}");
    let evidence = rule(&denied)["evidence"].as_str().unwrap().to_owned();
    assert!(!evidence.contains("AWP_AGENT_CLI"), "{evidence}");
    assert!(evidence.contains("the command's argument"), "{evidence}");
    assert!(evidence.contains("--remote-api-opt-in"), "{evidence}");
    let flag = host
        .run(&[
            "check",
            "--json",
            "--remote-api-opt-in",
            "--",
            fx,
            "--base",
            "https://api.example.com",
        ])
        .await;
    assert_eq!(rule(&flag)["outcome"], "pass", "{flag:?}");
    let mut child = host.spawn_with_env(
        &[
            "check",
            "--json",
            "--",
            fx,
            "--base",
            "https://api.example.com",
        ],
        &[("AWP_AGENT_REMOTE_API_OPT_IN", "1")],
    );
    let env = support::collect(&mut child).await;
    assert_eq!(rule(&env)["outcome"], "pass", "{env:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_agent_is_checked_with_its_env_and_env_flags_override_it() {
    let host = Host::new();
    // The fixture reads its mode from AWP_FIXTURE_MODE: the configured env makes it print a banner.
    host.agents_toml(
        "[[agents]]\nname = \"fx\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\n\
         env = { AWP_FIXTURE_MODE = \"banner\" }\n",
    );
    let out = host.run(&["check", "--agent", "fx"]).await;
    check(&out, 8, &["FAIL  stdout_only_json"]);
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("FAIL  stdout_only_json"))
        .unwrap();
    assert!(line.contains(" required "), "{line}");
    let out = host
        .run(&["check", "--agent", "fx", "--env", "AWP_FIXTURE_MODE=normal"])
        .await;
    check(
        &out,
        0,
        &[
            "PASS  stdout_only_json",
            "conformant: required rules 12 passed",
        ],
    );
    // A remote URL added with --env is refused with the agent's own switch as the hint (--remote-api-opt-in
    // does not go with --agent).
    let out = host
        .run(&[
            "check",
            "--json",
            "--agent",
            "fx",
            "--env",
            "BASE=https://api.example.com",
        ])
        .await;
    assert_eq!(out.code, 3, "{out:?}");
    let report = out.json();
    let rule = report["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "launch_contract")
        .unwrap();
    let evidence = rule["evidence"].as_str().unwrap();
    assert!(
        evidence.contains("remote_api_opt_in = true on the agent in agents.toml"),
        "{evidence}"
    );
    assert!(!evidence.contains("AWP_AGENT"), "{evidence}");
    assert!(!evidence.contains("--remote-api-opt-in"), "{evidence}");
    // An agent that is not configured is a usage error; --agent and a command are exclusive.
    let out = host.run(&["check", "--agent", "nope"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    let fx = fixture();
    let out = host
        .run(&["check", "--agent", "fx", "--", fx.to_str().unwrap()])
        .await;
    assert_eq!(out.code, 2, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_flags_reach_a_command_and_bad_ones_are_usage_errors() {
    let host = Host::new();
    let fx = fixture();
    let fx = fx.to_str().unwrap();
    let out = host
        .run(&["check", "--env", "AWP_FIXTURE_MODE=banner", "--", fx])
        .await;
    check(&out, 8, &["FAIL  stdout_only_json"]);
    for bad in ["NOEQUALS", "=value"] {
        let out = host.run(&["check", "--env", bad, "--", fx]).await;
        assert_eq!(out.code, 2, "{bad}: {out:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_never_ends_is_a_failure_and_its_success_is_skipped_not_passed() {
    let host = Host::new();
    let fx = fixture();
    let out = host
        .run(&[
            "check",
            "--timeout",
            "1s",
            "--json",
            "--",
            fx.to_str().unwrap(),
            "--mode",
            "silence",
        ])
        .await;
    assert_eq!(out.code, 8, "{out:?}");
    let report = out.json();
    let rule = |id: &str| {
        report["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap()
            .clone()
    };
    let terminal = rule("one_terminal_per_turn");
    assert_eq!(terminal["outcome"], "fail", "{report}");
    assert!(
        terminal["evidence"]
            .as_str()
            .unwrap()
            .contains("no terminal event within 1 s"),
        "{report}"
    );
    assert_eq!(rule("turn_succeeds")["outcome"], "skipped", "{report}");
    assert_eq!(rule("valid_session_id")["outcome"], "pass", "{report}");
    assert_eq!(report["conformant"], false);
    let skipped = report["summary"]["required"]["skipped"].as_u64().unwrap();
    assert!(skipped >= 1, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_dies_skips_turn_succeeds() {
    let host = Host::new();
    let fx = fixture();
    let out = host
        .run(&[
            "check",
            "--",
            fx.to_str().unwrap(),
            "--mode",
            "exit-mid-turn",
        ])
        .await;
    check(
        &out,
        8,
        &[
            "FAIL  one_terminal_per_turn",
            "SKIP  turn_succeeds",
            "why: turn 1 did not end (see one_terminal_per_turn)",
        ],
    );
}
