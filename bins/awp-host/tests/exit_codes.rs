//! Every exit status of `awp-host chat` from a real cause, plus crash recovery and cancellation.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Host, read_until};

fn check(out: &support::Output, code: i32, error_code: &str) {
    assert_eq!(out.code, code, "{out:?}");
    assert!(out.stderr.contains("awp-host: error: "), "{out:?}");
    assert!(out.stderr.contains(&format!("({error_code})")), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_exit_2() {
    let host = Host::new();
    let out = host.run(&["chat", "--bogus", "x"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    check(
        &host.run(&["chat", "--thread", "nope", "x"]).await,
        2,
        "invalid_id",
    );
    check(
        &host
            .run(&["chat", "--thread", "th_0000000000000000", "x"])
            .await,
        2,
        "thread_not_found",
    );
    check(
        &host.run(&["chat", "--agent", "ghost", "x"]).await,
        2,
        "agent_not_found",
    );
    check(
        &host.run(&["threads", "show", "th_0000000000000000"]).await,
        2,
        "thread_not_found",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_agent_exits_3() {
    let host = Host::new();
    host.agents_toml(
        "[[agents]]\nname = \"gone\"\nprotocol = \"awp-jsonl\"\nexecutable = \"/nonexistent/agent\"\n\
         [[agents]]\nname = \"acp\"\nprotocol = \"acp\"\nexecutable = \"/nonexistent/acp-agent\"\n",
    );
    check(
        &host.run(&["chat", "--agent", "gone", "x"]).await,
        3,
        "executable_not_found",
    );
    check(
        &host.run(&["chat", "--agent", "acp", "x"]).await,
        3,
        "executable_not_found",
    );
    // Nothing was recorded for turns that could not start.
    assert_eq!(
        host.run(&["threads", "list", "--json"]).await.json(),
        Value::Array(vec![])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_exits_6_and_is_recorded() {
    let host = Host::new();
    host.agents_toml(
        "[[agents]]\nname = \"dies\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"exit-mid-turn\"]\n\
         [[agents]]\nname = \"errs\"\nprotocol = \"awp-jsonl\"\nexecutable = \"$FIXTURE\"\nargs = [\"--mode\", \"error-result\"]\n",
    );
    let out = host.run(&["chat", "--agent", "dies", "--jsonl", "x"]).await;
    check(&out, 6, "agent_exited_mid_turn");
    let record = support::result_record(&out);
    assert_eq!(record["status"], "failed");
    assert_eq!(record["error"]["code"], "agent_exited_mid_turn");
    let detail = host.thread(record["thread_id"].as_str().unwrap()).await;
    assert_eq!(detail["runs"][0]["status"], "failed");
    assert_eq!(detail["runs"][0]["error"]["code"], "agent_exited_mid_turn");
    // The text that streamed before the exit is kept.
    assert_eq!(detail["messages"][1]["role"], "assistant");

    let out = host.run(&["chat", "--agent", "errs", "x"]).await;
    check(&out, 6, "agent_error");
    assert!(out.stderr.contains("fixture_failure"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_timeout_exits_7() {
    let host = Host::new();
    host.fixture_agent("quiet", "silence", "awp-jsonl");
    let out = host
        .run(&[
            "chat",
            "--agent",
            "quiet",
            "--idle-timeout",
            "1s",
            "--jsonl",
            "x",
        ])
        .await;
    check(&out, 7, "agent_idle_timeout");
    assert_eq!(support::result_record(&out)["status"], "failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_the_turn_and_exits_7() {
    let host = Host::new();
    host.fixture_agent("quiet", "silence", "awp-jsonl");
    let mut child = host.spawn(&["chat", "--agent", "quiet", "--jsonl", "x"]);
    let mut stdout = child.take_stdout().expect("stdout");
    let seen = read_until(&mut stdout, "text_delta").await;
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("send SIGINT");
    let rest = read_until(&mut stdout, "\"type\":\"result\"").await;
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("exit");
    assert_eq!(status.code, Some(7), "{seen}{rest}");
    let record: Value = serde_json::from_str(rest.lines().last().unwrap()).unwrap();
    assert_eq!(record["status"], "cancelled");
    assert_eq!(record["error"]["code"], "cancelled");
    let detail = host.thread(record["thread_id"].as_str().unwrap()).await;
    assert_eq!(detail["runs"][0]["status"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_long_stdout_line_is_a_protocol_violation_exit_8() {
    let host = Host::new();
    // A 5 000 000-byte line (with its newline) against the 4 MiB limit.
    host.fixture_agent("long", "long-line", "awp-jsonl");
    let out = host.run(&["chat", "--agent", "long", "--jsonl", "x"]).await;
    check(&out, 8, "stdout_line_too_long");
    let detail = host
        .thread(support::result_record(&out)["thread_id"].as_str().unwrap())
        .await;
    assert_eq!(detail["runs"][0]["error"]["code"], "stdout_line_too_long");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_without_newlines_is_stopped_at_the_limit_exit_8() {
    let host = Host::new();
    // 10 MiB without a newline, then the agent waits: the host must not wait for the line to end.
    host.fixture_agent("flood", "flood", "awp-jsonl");
    let out = host.run(&["chat", "--agent", "flood", "x"]).await;
    check(&out, 8, "stdout_line_too_long");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_session_id_is_not_stored_and_exits_8() {
    let host = Host::new();
    host.fixture_agent("bad", "invalid-session-id", "awp-jsonl");
    let out = host.run(&["chat", "--agent", "bad", "--jsonl", "x"]).await;
    check(&out, 8, "invalid_session_id");
    let record = support::result_record(&out);
    assert_eq!(record["session_id"], Value::Null);
    let detail = host.thread(record["thread_id"].as_str().unwrap()).await;
    assert_eq!(detail["thread"]["session_id"], Value::Null);
    assert_eq!(detail["sessions"], Value::Array(vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_mid_turn_leaves_the_run_interrupted() {
    let host = Host::new();
    host.fixture_agent("quiet", "silence", "awp-jsonl");
    let mut child = host.spawn(&["chat", "--agent", "quiet", "--jsonl", "remember me"]);
    let mut stdout = child.take_stdout().expect("stdout");
    let seen = read_until(&mut stdout, "text_delta").await;
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("send SIGKILL");
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("exit");
    assert_eq!(status.signal, Some(9), "{seen}");
    let list = host.run(&["threads", "list", "--json"]).await;
    assert!(list.stderr.contains("marked interrupted"), "{list:?}");
    let threads = list.json();
    let detail = host.thread(threads[0]["id"].as_str().unwrap()).await;
    assert_eq!(detail["runs"][0]["status"], "interrupted");
    assert_eq!(detail["messages"][0]["content"], "remember me");
    // The session id arrived with init before the kill and is durable.
    assert!(detail["thread"]["session_id"].is_string(), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_and_version_exit_0() {
    let host = Host::new();
    let out = host.run(&["--help"]).await;
    assert_eq!(out.code, 0);
    assert!(out.stdout.contains("Exit codes:"), "{out:?}");
    let out = host.run(&["chat", "--help"]).await;
    assert!(out.stdout.contains("--attach <FILE>"), "{out:?}");
    let out = host.run(&["--version"]).await;
    assert!(out.stdout.starts_with("awp-host "), "{out:?}");
}
