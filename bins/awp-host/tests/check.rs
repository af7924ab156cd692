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
