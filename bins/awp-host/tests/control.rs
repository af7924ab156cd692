//! Claude Code's control protocol with the real binary and `claude-fixture` (a stream-json agent derived from the
//! Claude Agent SDK's source, see its header): `initialize` after launch, `can_use_tool` answered with the chat
//! permission policy, `interrupt` on Ctrl-C with the stop ladder as the fallback.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Host, read_until};

/// Path of the control-protocol fixture.
fn claude_fixture() -> std::path::PathBuf {
    agentwire_testkit::bin_path("claude-fixture")
}

/// One `claude-fixture` agent named `name` in `mode`; `setting` is an extra agents.toml line.
fn claude_agent(host: &Host, name: &str, mode: &str, setting: &str) {
    host.agents_toml(&format!(
        "[[agents]]\nname = \"{name}\"\nprotocol = \"stream-json\"\nexecutable = \"{}\"\nargs = [\"--mode\", \"{mode}\"]\n{setting}\n",
        claude_fixture().display()
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_initializes_claude_code_before_the_first_turn_when_the_setting_is_on() {
    let host = Host::new();
    claude_agent(&host, "cc", "normal", "control_protocol = true");
    let out = host.run(&["chat", "--agent", "cc", "--json", "pid"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let text = out.json()["text"].as_str().unwrap().to_owned();
    assert!(text.contains("initialized=true"), "{text}");

    // Off: no initialize, no permission prompt tool.
    claude_agent(&host, "cc", "normal", "control_protocol = false");
    let out = host.run(&["chat", "--agent", "cc", "--json", "pid"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.json()["text"]
            .as_str()
            .unwrap()
            .contains("initialized=false"),
        "{out:?}"
    );
    let out = host.run(&["chat", "--agent", "cc", "--json", "tool"]).await;
    assert!(
        out.json()["text"]
            .as_str()
            .unwrap()
            .contains("no permission prompt tool"),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executable_named_claude_speaks_the_control_protocol_by_default() {
    let host = Host::new();
    let bin = host.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let claude = bin.join("claude");
    std::fs::copy(claude_fixture(), &claude).unwrap();
    host.agents_toml(&format!(
        "[[agents]]\nname = \"claude\"\nprotocol = \"stream-json\"\nexecutable = \"{}\"\n",
        claude.display()
    ));
    let out = host
        .run(&["chat", "--agent", "claude", "--json", "pid"])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.json()["text"]
            .as_str()
            .unwrap()
            .contains("initialized=true"),
        "{out:?}"
    );
    // A link named `claude` (the usual install) counts too, though the link is resolved at load.
    let link = host.path("claude");
    std::os::unix::fs::symlink(claude_fixture(), &link).unwrap();
    host.agents_toml(&format!(
        "[[agents]]\nname = \"claude\"\nprotocol = \"stream-json\"\nexecutable = \"{}\"\n",
        link.display()
    ));
    let out = host
        .run(&["chat", "--agent", "claude", "--json", "pid"])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.json()["text"]
            .as_str()
            .unwrap()
            .contains("initialized=true"),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_or_unanswered_initialize_fails_the_turn_with_a_typed_error() {
    let host = Host::new();
    for (mode, says) in [
        ("refuse-initialize", "initialize refused by the fixture"),
        (
            "exit-at-initialize",
            "exited before answering the `initialize` control request",
        ),
    ] {
        claude_agent(&host, "cc", mode, "control_protocol = true");
        let out = host.run(&["chat", "--agent", "cc", "--json", "hi"]).await;
        // A turn that failed at the agent's startup: exit 6.
        assert_eq!(out.code, 6, "{out:?}");
        let record = out.json();
        assert_eq!(
            record["error"]["code"], "control_initialize_failed",
            "{record}"
        );
        assert!(record.to_string().contains(says), "{record}");
        let detail = host.thread(record["thread_id"].as_str().unwrap()).await;
        assert_eq!(detail["runs"][0]["status"], "failed", "{detail}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn can_use_tool_is_allowed_with_yes_and_denied_without_a_terminal() {
    let host = Host::new();
    claude_agent(&host, "cc", "normal", "control_protocol = true");
    let out = host
        .run(&["chat", "--agent", "cc", "--yes", "--json", "tool"])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    // Allowed with the input unchanged (`updatedInput`).
    assert_eq!(
        out.json()["text"],
        r#"allowed: {"command":"echo hi"}"#,
        "{out:?}"
    );
    let out = host.run(&["chat", "--agent", "cc", "--json", "tool"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let text = out.json()["text"].as_str().unwrap().to_owned();
    assert!(
        text.starts_with("denied: denied by awp-host: no terminal"),
        "{text}"
    );
}

/// Sends SIGINT to `child` once its stdout showed `needle`; returns the final JSON Lines result record and the
/// exit code.
async fn interrupt_after(host: &Host, agent: &str, needle: &str) -> (Value, i32) {
    let mut child = host.spawn(&["chat", "--agent", agent, "--jsonl", "slow"]);
    let mut stdout = child.take_stdout().expect("stdout");
    let seen = read_until(&mut stdout, needle).await;
    let pid = child.id().expect("a running host");
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).expect("a pid")).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("send SIGINT");
    let rest = read_until(&mut stdout, "\"type\":\"result\"").await;
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("exit");
    let record: Value = serde_json::from_str(rest.lines().last().expect("a result line"))
        .unwrap_or_else(|e| panic!("{e}: {seen}{rest}"));
    (record, status.code.unwrap_or(-1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_interrupts_claude_code_and_its_result_ends_the_turn_cancelled() {
    let host = Host::new();
    claude_agent(&host, "cc", "normal", "control_protocol = true");
    let (record, code) = interrupt_after(&host, "cc", "working").await;
    assert_eq!(code, 7, "{record}");
    assert_eq!(record["status"], "cancelled", "{record}");
    assert_eq!(record["error"]["code"], "cancelled", "{record}");
    assert!(record.to_string().contains("interrupted"), "{record}");
    let detail = host.thread(record["thread_id"].as_str().unwrap()).await;
    assert_eq!(detail["runs"][0]["status"], "cancelled", "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_without_a_result_falls_back_to_the_stop_ladder() {
    let host = Host::new();
    claude_agent(&host, "cc", "ignore-interrupt", "control_protocol = true");
    let (record, code) = interrupt_after(&host, "cc", "working").await;
    assert_eq!(code, 7, "{record}");
    assert_eq!(record["status"], "cancelled", "{record}");
    assert_eq!(record["error"]["code"], "cancelled", "{record}");
    assert!(!record.to_string().contains("interrupted:"), "{record}");
}

/// `chat --agent cc` in text mode, then `threads show` of its thread: (host output, the `why:` line).
async fn text_run_and_why(host: &Host) -> (support::Output, String) {
    let out = host.run(&["chat", "--agent", "cc", "hi"]).await;
    let list = host.run(&["threads", "list", "--json"]).await.json();
    let thread = list[0]["id"].as_str().expect("a thread").to_owned();
    let show = host.run(&["threads", "show", &thread]).await;
    let why = show
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("why:"))
        .unwrap_or_else(|| panic!("no why: line in {show:?}"))
        .trim()
        .to_owned();
    (out, why)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_failing_before_answering_initialize_says_why() {
    for (mode, said) in [
        // Its stderr, as a CLI refusing its flags says it.
        ("fail-at-start", "error: unknown option '--bogus'"),
        // What it printed on stdout that is not JSON.
        (
            "login-and-exit",
            "the agent printed 1 line that is not JSON; first: Invalid API key · Please run /login",
        ),
    ] {
        let host = Host::new();
        claude_agent(&host, "cc", mode, "control_protocol = true");
        let out = host.run(&["chat", "--agent", "cc", "--json", "hi"]).await;
        assert_eq!(out.code, 6, "{mode}: {out:?}");
        let record = out.json();
        assert_eq!(
            record["error"]["code"], "control_initialize_failed",
            "{record}"
        );
        assert_eq!(record["error"]["reason"], said, "{record}");
        let detail = record["error"]["detail"].as_str().expect("a detail");
        assert!(detail.contains("exit code 1"), "{record}");

        let (out, why) = text_run_and_why(&host).await;
        assert_eq!(out.code, 6, "{mode}: {out:?}");
        assert!(
            out.stderr.contains(&format!("the agent said: {said}")),
            "{mode}: {out:?}"
        );
        assert!(out.stderr.contains("exit code 1"), "{mode}: {out:?}");
        assert_eq!(why, format!("why: {said}"), "{mode}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_waiting_for_a_login_instead_of_answering_initialize_times_out_with_the_hint() {
    let host = Host::new();
    // The first-output timeout bounds the wait for the `initialize` answer.
    claude_agent(
        &host,
        "cc",
        "login-and-wait",
        "control_protocol = true\nfirst_output_timeout_secs = 1",
    );
    let (out, why) = text_run_and_why(&host).await;
    assert_eq!(out.code, 7, "{out:?}");
    for says in [
        "(agent_first_output_timeout)",
        "no answer to the `initialize` control request 1 s after launch",
        "be waiting for a login",
        "run `awp-host check --agent cc`",
        "the agent said: the agent printed 1 line that is not JSON; first: Please log in",
    ] {
        assert!(out.stderr.contains(says), "{says}: {out:?}");
    }
    assert_eq!(
        why,
        "why: the agent printed 1 line that is not JSON; first: Please log in"
    );
    // Per call too.
    claude_agent(&host, "cc", "login-and-wait", "control_protocol = true");
    let out = host
        .run(&[
            "chat",
            "--agent",
            "cc",
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
        "{record}"
    );
    assert_eq!(
        record["error"]["reason"],
        "the agent printed 1 line that is not JSON; first: Please log in"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_before_the_initialize_answer_cancels_the_turn_and_stops_the_agent() {
    let host = Host::new();
    let fifo = host.path("initialize.fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    // No first-output timeout: only the cancel can end the wait.
    claude_agent(
        &host,
        "cc",
        "mute-at-initialize",
        &format!(
            "control_protocol = true\nfirst_output_timeout_secs = 0\nenv = {{ CLAUDE_FIXTURE_INITIALIZE_FIFO = \"{}\" }}",
            fifo.display()
        ),
    );
    let mut child = host.spawn(&["chat", "--agent", "cc", "--json", "hi"]);
    // The agent read the `initialize` request: the host waits for its answer now.
    let fifo_path = fifo.clone();
    let said = tokio::task::spawn_blocking(move || std::fs::read_to_string(fifo_path))
        .await
        .expect("joined")
        .expect("read the fifo");
    assert_eq!(said, "initialize\n");
    let pid = child.id().expect("a running host");
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).expect("a pid")).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("send SIGINT");
    let out = support::collect(&mut child).await;
    assert_eq!(out.code, 7, "{out:?}");
    let record = out.json();
    assert_eq!(record["status"], "cancelled", "{record}");
    assert_eq!(record["error"]["code"], "cancelled", "{record}");
    assert!(
        record["error"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("initialize")),
        "{record}"
    );
    let detail = host.thread(record["thread_id"].as_str().unwrap()).await;
    assert_eq!(detail["runs"][0]["status"], "cancelled", "{detail}");
}
