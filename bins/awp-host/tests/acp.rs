//! `awp-host` with ACP agents, end to end: the real binary against the `acp-fixture` and `kandev-fixture` agents
//! (real processes, pipes, SQLite) — chat, persistence, resume, permissions, fs root, failures, Ctrl-C, check.

mod support;

use std::path::Path;
use std::time::Duration;

use agentwire_process::Command;
use serde_json::Value;
use support::{Host, Output, collect, read_until, result_record, thread_id};

/// Writes agents.toml with one ACP agent per `(name, binary, mode)`; `mode` `None` passes no `--mode`.
fn acp_agents(host: &Host, agents: &[(&str, &str, Option<&str>)]) {
    let mut text = String::new();
    for (name, binary, mode) in agents {
        let path = agentwire_testkit::bin_path(binary);
        text.push_str(&format!(
            "[[agents]]\nname = \"{name}\"\nprotocol = \"acp\"\nexecutable = \"{}\"\n",
            path.display()
        ));
        if let Some(mode) = mode {
            text.push_str(&format!("args = [\"--mode\", \"{mode}\"]\n"));
        }
    }
    std::fs::write(host.config.join("agents.toml"), text).expect("write agents.toml");
}

/// Runs `awp-host ARGS` with `cwd` as its working directory (stdin closed at once: not a terminal).
async fn run_in(host: &Host, cwd: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(agentwire_testkit::bin_path("awp-host"));
    cmd.arg("--data-dir")
        .arg(&host.data)
        .arg("--config-dir")
        .arg(&host.config)
        .args(args)
        .current_dir(cwd)
        .inherit_os_env();
    let mut child = cmd.spawn().expect("spawn awp-host");
    child.stdin().close().await;
    collect(&mut child).await
}

/// The events of a `--jsonl` run without its result record, as `(type, text-ish field)` pairs.
fn events(out: &Output) -> Vec<(String, String)> {
    let mut lines = out.jsonl();
    lines.pop();
    lines
        .iter()
        .map(|e| {
            let kind = e["type"].as_str().unwrap_or_default().to_owned();
            let text = ["text", "session_id", "summary", "name", "kind"]
                .iter()
                .find_map(|k| e.get(*k).and_then(Value::as_str))
                .unwrap_or_default()
                .to_owned();
            (kind, text)
        })
        .collect()
}

fn check(out: &Output, code: i32, expect_events: &[(&str, &str)]) {
    assert_eq!(out.code, code, "{out:?}");
    let got = events(out);
    let got: Vec<(&str, &str)> = got.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(got, expect_events, "{out:?}");
}

fn messages(detail: &Value) -> Vec<(String, String)> {
    detail["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_answers_persists_and_resumes_the_session() {
    let host = Host::new();
    acp_agents(&host, &[("acp", "acp-fixture", Some("echo"))]);
    let out = host
        .run(&["chat", "--agent", "acp", "--jsonl", "hello"])
        .await;
    check(
        &out,
        0,
        &[("session_started", "sess-1"), ("text_delta", "hello")],
    );
    let record = result_record(&out);
    assert_eq!(record["status"], "succeeded");
    assert_eq!(record["session_id"], "sess-1");
    let thread = thread_id(&out);

    // The fixture advertises sessionCapabilities.resume: the thread's session is reopened with session/resume (the
    // fallbacks, session/load then a new session, are covered in crates/host/tests/acp_turn.rs).
    let out = host
        .run(&["chat", "--thread", &thread, "--jsonl", "again"])
        .await;
    check(
        &out,
        0,
        &[("session_started", "sess-1"), ("text_delta", "again")],
    );
    let detail = host.thread(&thread).await;
    assert_eq!(detail["thread"]["session_id"], "sess-1");
    assert_eq!(detail["runs"][1]["resumed_session_id"], "sess-1");
    let expect = [
        ("user", "hello"),
        ("assistant", "hello"),
        ("user", "again"),
        ("assistant", "again"),
    ];
    let got = messages(&detail);
    let got: Vec<(&str, &str)> = got.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(got, expect);

    // Human output: the text on stdout, the status line on stderr.
    let out = host.run(&["chat", "--agent", "acp", "plain"]).await;
    assert_eq!((out.code, out.stdout.as_str()), (0, "plain\n"), "{out:?}");
    assert!(out.stderr.contains("succeeded"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_load_session_gets_a_new_session_noted_in_the_thread() {
    let host = Host::new();
    acp_agents(&host, &[("kandev", "kandev-fixture", None)]);
    let out = host
        .run(&["chat", "--agent", "kandev", "--jsonl", "hi"])
        .await;
    check(
        &out,
        0,
        &[
            ("session_started", "kandev-1"),
            ("text_delta", "Processing: hi"),
            ("tool_use", "file_edit"),
            ("tool_result", "completed"),
        ],
    );
    let thread = thread_id(&out);
    let out = host
        .run(&["chat", "--thread", &thread, "--jsonl", "more"])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let got = events(&out);
    assert_eq!(got[1].0, "notice", "{out:?}");
    assert_eq!(got[1].1, "session_not_resumed", "{out:?}");
    let detail = host.thread(&thread).await;
    let note = messages(&detail)
        .into_iter()
        .find(|(role, text)| role == "tool" && text.starts_with("ℹ "))
        .expect("the new session is noted in the thread");
    assert!(
        note.1
            .contains("session kandev-1 was not resumed, started new session kandev-1"),
        "{note:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_are_denied_without_a_terminal_and_allowed_once_with_yes() {
    let host = Host::new();
    acp_agents(&host, &[("tools", "acp-fixture", Some("tools"))]);
    let denied = host
        .run(&["chat", "--agent", "tools", "--jsonl", "go"])
        .await;
    check(
        &denied,
        0,
        &[
            ("session_started", "sess-1"),
            ("tool_use", "write hello.txt"),
            ("tool_result", "selected reject"),
        ],
    );
    assert_eq!(denied.jsonl()[2]["is_error"], true);
    let allowed = host
        .run(&["chat", "--agent", "tools", "--yes", "--jsonl", "go"])
        .await;
    check(
        &allowed,
        0,
        &[
            ("session_started", "sess-1"),
            ("tool_use", "write hello.txt"),
            ("tool_result", "selected allow"),
        ],
    );
    assert_eq!(allowed.jsonl()[2]["is_error"], false);
    let detail = host.thread(&thread_id(&allowed)).await;
    let got = messages(&detail);
    let got: Vec<(&str, &str)> = got.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(
        got,
        [
            ("user", "go"),
            ("tool", r#"⚙ write hello.txt {"kind":"edit"}"#),
            ("tool", "↳ selected allow"),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fs_requests_are_confined_to_the_chat_working_directory() {
    let host = Host::new();
    acp_agents(&host, &[("fs", "acp-fixture", Some("fs"))]);
    let work = host.path("work");
    std::fs::create_dir_all(&work).expect("work dir");
    std::fs::write(work.join("inside.txt"), "inside\n").expect("write");
    std::fs::write(host.path("outside.txt"), "secret\n").expect("write");
    let work = work.canonicalize().expect("canonical");
    let inside = format!("read {}", work.join("inside.txt").display());
    let out = run_in(&host, &work, &["chat", "--agent", "fs", &inside]).await;
    assert_eq!((out.code, out.stdout.as_str()), (0, "inside\n"), "{out:?}");
    let outside = format!(
        "read {}",
        work.parent().expect("parent").join("outside.txt").display()
    );
    let out = run_in(&host, &work, &["chat", "--agent", "fs", &outside]).await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "error -32602 outside_root\n"),
        "{out:?}"
    );
    let write = format!("write {} hi there", work.join("new.txt").display());
    let out = run_in(&host, &work, &["chat", "--agent", "fs", &write]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(work.join("new.txt")).expect("written"),
        "hi there"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_exiting_mid_prompt_fails_the_turn_with_exit_6() {
    let host = Host::new();
    acp_agents(&host, &[("dies", "acp-fixture", Some("exit-mid-prompt"))]);
    let out = host.run(&["chat", "--agent", "dies", "--jsonl", "x"]).await;
    check(
        &out,
        6,
        &[
            ("session_started", "sess-1"),
            ("text_delta", "about to exit"),
        ],
    );
    let record = result_record(&out);
    assert_eq!(record["status"], "failed");
    assert_eq!(record["error"]["code"], "agent_exited_mid_turn");
    let detail = host
        .thread(record["thread_id"].as_str().expect("thread"))
        .await;
    assert_eq!(detail["runs"][0]["status"], "failed");
    // The session id was durable before the prompt, the streamed text is kept.
    assert_eq!(detail["thread"]["session_id"], "sess-1");
    assert_eq!(detail["messages"][1]["content"], "about to exit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_sends_session_cancel_and_exits_7() {
    let host = Host::new();
    acp_agents(&host, &[("waits", "acp-fixture", Some("wait-cancel"))]);
    let mut child = host.spawn(&["chat", "--agent", "waits", "--jsonl", "please cancel me"]);
    let mut stdout = child.take_stdout().expect("stdout");
    let seen = read_until(&mut stdout, "waiting for cancel").await;
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id().expect("pid")).expect("pid"))
        .expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("send SIGINT");
    let rest = read_until(&mut stdout, "\"type\":\"result\"").await;
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("exit");
    assert_eq!(status.code, Some(7), "{seen}{rest}");
    // The agent saw session/cancel and kept streaming until it answered `cancelled`.
    assert!(rest.contains("saw cancel"), "{seen}{rest}");
    let record: Value = serde_json::from_str(rest.lines().last().expect("record")).expect("json");
    assert_eq!(record["status"], "cancelled");
    assert_eq!(record["error"]["code"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_protocol_acp_reports_conformance() {
    let host = Host::new();
    let fixture = agentwire_testkit::bin_path("acp-fixture");
    let fixture = fixture.to_str().expect("utf-8 path");
    let out = host
        .run(&[
            "check",
            "--protocol",
            "acp",
            "--",
            fixture,
            "--mode",
            "echo",
        ])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("PASS  spawns"), "{out:?}");
    assert!(out.stdout.contains("conformant"), "{out:?}");

    let out = host
        .run(&[
            "check",
            "--protocol",
            "acp",
            "--json",
            "--",
            fixture,
            "--mode",
            "cancel-error",
        ])
        .await;
    assert_eq!(out.code, 8, "{out:?}");
    let rule = out.json()["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|r| r["id"] == "cancel_yields_cancelled")
        .cloned()
        .expect("cancel rule");
    assert_eq!(rule["outcome"], "fail", "{rule}");
    assert!(out.stderr.contains("(check_failed)"), "{out:?}");

    let out = host
        .run(&[
            "check",
            "--protocol",
            "acp",
            "--",
            fixture,
            "--mode",
            "protocol-v2",
        ])
        .await;
    assert_eq!(out.code, 8, "{out:?}");
    assert!(
        out.stdout
            .contains("FAIL  initialize_answers_integer_version"),
        "{out:?}"
    );

    let out = host
        .run(&["check", "--protocol", "acp", "--", "/nonexistent/acp-agent"])
        .await;
    assert_eq!(out.code, 3, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_protocol_version_is_a_protocol_violation_exit_8() {
    let host = Host::new();
    acp_agents(&host, &[("v2", "acp-fixture", Some("protocol-v2"))]);
    let out = host.run(&["chat", "--agent", "v2", "--jsonl", "x"]).await;
    check(&out, 8, &[]);
    let record = result_record(&out);
    assert_eq!(record["error"]["code"], "unsupported_protocol_version");
    // The user message was stored before the agent was started; no session id was learnt.
    let detail = host
        .thread(record["thread_id"].as_str().expect("thread"))
        .await;
    assert_eq!(detail["runs"][0]["status"], "failed");
    assert_eq!(detail["messages"][0]["content"], "x");
    assert_eq!(detail["thread"]["session_id"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_acp_agent_times_out_with_exit_7() {
    let host = Host::new();
    acp_agents(&host, &[("waits", "acp-fixture", Some("wait-cancel"))]);
    // The fixture waits for session/cancel forever after "waiting for cancel".
    let out = host
        .run(&[
            "chat",
            "--agent",
            "waits",
            "--idle-timeout",
            "1s",
            "--jsonl",
            "cancel me",
        ])
        .await;
    check(
        &out,
        7,
        &[
            ("session_started", "sess-1"),
            ("text_delta", "waiting for cancel"),
        ],
    );
    assert_eq!(result_record(&out)["error"]["code"], "agent_idle_timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_model_reaches_an_acp_agent_through_set_config_option() {
    let host = Host::new();
    acp_agents(&host, &[("acp", "acp-fixture", Some("echo"))]);
    let out = host
        .run(&[
            "chat", "--agent", "acp", "--model", "smart", "--jsonl", "hi",
        ])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let started = out
        .jsonl()
        .into_iter()
        .find(|e| e["type"] == "session_started");
    assert_eq!(
        started.map(|e| e["model"].clone()),
        Some(Value::from("smart")),
        "{out:?}"
    );
    // A model the agent's option does not offer fails the turn with the agent's refusal.
    let out = host
        .run(&["chat", "--agent", "acp", "--model", "huge", "--jsonl", "hi"])
        .await;
    assert_ne!(out.code, 0, "{out:?}");
    let record = result_record(&out);
    assert_eq!(record["error"]["code"], "agent_error", "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_agent_runs_a_configured_acp_agent_with_its_env() {
    let host = Host::new();
    let fixture = agentwire_testkit::bin_path("acp-fixture");
    // The fixture reads its mode from ACP_FIXTURE_MODE: the configured env selects a faulty one.
    host.agents_toml(&format!(
        "[[agents]]\nname = \"acp-fx\"\nprotocol = \"acp\"\nexecutable = \"{}\"\n\
         env = {{ ACP_FIXTURE_MODE = \"protocol-v2\" }}\n",
        fixture.display()
    ));
    let out = host.run(&["check", "--agent", "acp-fx"]).await;
    assert_eq!(out.code, 8, "{out:?}");
    assert!(
        out.stdout
            .contains("FAIL  initialize_answers_integer_version"),
        "{out:?}"
    );
    let out = host
        .run(&[
            "check",
            "--agent",
            "acp-fx",
            "--env",
            "ACP_FIXTURE_MODE=echo",
        ])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("conformant: required rules"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_announced_twice_is_rendered_once_then_its_updates() {
    let host = Host::new();
    acp_agents(&host, &[("twice", "acp-fixture", Some("tool-call-twice"))]);
    let human = host.run(&["chat", "--agent", "twice", "go"]).await;
    assert_eq!(human.code, 0, "{human:?}");
    assert_eq!(
        human.stdout, "⚙ read hello.txt {\"kind\":\"read\"}\n↳ done\n",
        "{human:?}"
    );
    let out = host
        .run(&["chat", "--agent", "twice", "--jsonl", "go"])
        .await;
    check(
        &out,
        0,
        &[
            ("session_started", "sess-1"),
            ("tool_use", "read hello.txt"),
            ("notice", "tool_call_repeated"),
            ("tool_result", "done"),
        ],
    );
    let detail = host.thread(&thread_id(&out)).await;
    let got = messages(&detail);
    let got: Vec<(&str, &str)> = got.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(
        got,
        [
            ("user", "go"),
            ("tool", r#"⚙ read hello.txt {"kind":"read"}"#),
            ("tool", "↳ done"),
        ]
    );
}

/// Writes agents.toml with one `acp-fixture` agent `name` in `mode`, with `extra` TOML lines.
fn acp_agent_with(host: &Host, name: &str, mode: &str, extra: &str) {
    let text = format!(
        "[[agents]]\nname = \"{name}\"\nprotocol = \"acp\"\nexecutable = \"{}\"\nargs = [\"--mode\", \"{mode}\"]\n{extra}",
        agentwire_testkit::bin_path("acp-fixture").display()
    );
    std::fs::write(host.config.join("agents.toml"), text).expect("write agents.toml");
}

/// Sends `signal` to `child`.
fn interrupt(child: &agentwire_process::Child, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id().expect("pid")).expect("pid"))
        .expect("pid");
    rustix::process::kill_process(pid, signal).expect("send the signal");
}

/// Waits (bounded) until the fixture's trace file shows the client's request `method`.
async fn traced_request(trace: &Path, method: &str) {
    let needle = format!("\"method\":\"{method}\"");
    let seen = async {
        loop {
            let text = std::fs::read_to_string(trace).unwrap_or_default();
            if text
                .lines()
                .any(|l| l.starts_with("client ") && l.contains(&needle))
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), seen)
        .await
        .expect("the agent read the request in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_silent_at_startup_fails_at_the_first_output_timeout_with_exit_7() {
    // `chat --first-output-timeout` bounds the `initialize` answer.
    let host = Host::new();
    acp_agent_with(&host, "mute", "mute-initialize", "");
    let out = host
        .run(&[
            "chat",
            "--agent",
            "mute",
            "--first-output-timeout",
            "1",
            "--json",
            "hi",
        ])
        .await;
    assert_eq!(out.code, 7, "{out:?}");
    let record = out.json();
    assert_eq!(
        record["error"]["code"], "agent_first_output_timeout",
        "{out:?}"
    );
    let detail = record["error"]["detail"].as_str().expect("detail");
    assert!(detail.contains("`initialize`"), "{detail}");
    // agents.toml's first_output_timeout_secs bounds the `session/new` answer.
    let host = Host::new();
    acp_agent_with(&host, "mute", "mute-new", "first_output_timeout_secs = 1\n");
    let out = host.run(&["chat", "--agent", "mute", "--json", "hi"]).await;
    assert_eq!(out.code, 7, "{out:?}");
    let record = out.json();
    assert_eq!(
        record["error"]["code"], "agent_first_output_timeout",
        "{out:?}"
    );
    let detail = record["error"]["detail"].as_str().expect("detail");
    assert!(detail.contains("`session/new`"), "{detail}");
    let thread = host
        .thread(record["thread_id"].as_str().expect("thread"))
        .await;
    assert_eq!(
        thread["runs"][0]["error"]["code"], "agent_first_output_timeout",
        "{thread}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sigterm_ends_an_acp_agents_startup_it_never_answers_with_exit_7() {
    let host = Host::new();
    let trace = host.config.join("trace.log");
    acp_agent_with(
        &host,
        "mute",
        "mute-initialize",
        &format!("env = {{ ACP_FIXTURE_TRACE = \"{}\" }}\n", trace.display()),
    );
    let mut child = host.spawn(&[
        "chat",
        "--agent",
        "mute",
        "--first-output-timeout",
        "0",
        "--json",
        "hi",
    ]);
    let mut stdout = child.take_stdout().expect("stdout");
    traced_request(&trace, "initialize").await;
    // A supervisor's single SIGTERM (the same as one Ctrl-C).
    interrupt(&child, rustix::process::Signal::TERM);
    let rest = read_until(&mut stdout, "\"type\":\"result\"").await;
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("exit after one signal");
    assert_eq!(status.code, Some(7), "{rest}");
    let record: Value = serde_json::from_str(rest.trim()).expect("json");
    assert_eq!(record["status"], "cancelled", "{rest}");
    assert_eq!(record["error"]["code"], "cancelled", "{rest}");
    let thread = host
        .thread(record["thread_id"].as_str().expect("thread"))
        .await;
    assert_eq!(thread["runs"][0]["status"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ctrl_c_ends_a_turn_whose_acp_agent_ignores_session_cancel() {
    let host = Host::new();
    acp_agents(&host, &[("deaf", "acp-fixture", Some("ignore-cancel"))]);
    let mut child = host.spawn(&["chat", "--agent", "deaf", "--jsonl", "hi"]);
    let mut stdout = child.take_stdout().expect("stdout");
    let seen = read_until(&mut stdout, "ignoring cancel").await;
    interrupt(&child, rustix::process::Signal::INT);
    // Bounded by the 10 s grace, then the stop ladder.
    let rest = read_until(&mut stdout, "\"type\":\"result\"").await;
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("exit after one signal");
    assert_eq!(status.code, Some(7), "{seen}{rest}");
    let record: Value = serde_json::from_str(rest.lines().last().expect("record")).expect("json");
    assert_eq!(record["status"], "cancelled", "{rest}");
    assert_eq!(record["error"]["code"], "cancelled", "{rest}");
    assert_eq!(
        record["error"]["detail"],
        "the agent did not end the turn within 10 s of session/cancel; it was stopped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_failing_at_startup_says_why() {
    let host = Host::new();
    acp_agent_with(&host, "bad", "fail-start", "");
    let out = host.run(&["chat", "--agent", "bad", "--json", "hi"]).await;
    assert_eq!(out.code, 6, "{out:?}");
    let record = out.json();
    assert_eq!(record["error"]["code"], "agent_exited_mid_turn", "{out:?}");
    assert_eq!(
        record["error"]["detail"],
        "the agent exited before answering `initialize` (exit code 1)"
    );
    assert_eq!(
        record["error"]["reason"],
        "Error: FIXTURE_API_KEY is not set"
    );
    let thread = record["thread_id"].as_str().expect("thread").to_owned();
    let shown = host.run(&["threads", "show", &thread]).await;
    assert!(
        shown
            .stdout
            .contains("why: Error: FIXTURE_API_KEY is not set"),
        "{shown:?}"
    );
    // The human message carries the reason too.
    let out = host.run(&["chat", "--agent", "bad", "hi"]).await;
    assert_eq!(out.code, 6, "{out:?}");
    assert!(
        out.stderr
            .contains("the agent said: Error: FIXTURE_API_KEY is not set"),
        "{out:?}"
    );
    // What it printed on stdout that is not JSON, when stderr is empty.
    acp_agent_with(&host, "nj", "not-json-exit", "");
    let out = host.run(&["chat", "--agent", "nj", "--json", "hi"]).await;
    assert_eq!(out.code, 6, "{out:?}");
    let reason = out.json()["error"]["reason"]
        .as_str()
        .expect("reason")
        .to_owned();
    assert_eq!(
        reason,
        "the agent printed 1 line that is not JSON; first: fixture: please log in first"
    );
}
